//! The HTTP server (`--http`): one listener, axum routes, HTTP concerns only (this module knows
//! nothing of MCP; the MCP service it mounts is `crate::mcp::streamable`).
//!
//! - `/healthz`: 200 for load balancers, before every check (and past the connection cap).
//! - `/mcp`: the MCP service (any tower `Service<http::Request<Bytes>>`), behind the bearer
//!   token ([`bearer`]).
//! - further route groups (the model APIs), each with its own credential check: a [`Routes`]
//!   passed to [`serve_http`], merged beside `/mcp`.
//! - anything else: 404.
//!
//! Every route but `/healthz` is behind the same checks, in this order: `Host` and `Origin`
//! against the allow-lists (`checks`), the group's credential check ([`Auth`], when a token is
//! configured), then the body read whole within the size limit, the idle timeout and the
//! deadline, and the buffer all bodies share (`body`). Every request gets an id (`X-Request-Id`,
//! kept from a proxy or made here; tower-http's request-id layers), which the handler sees in
//! the request's headers, the answer echoes, and one `http request` log line carries with the
//! method, path, status and duration. Connections (the cap, header timeout, accept backoff,
//! graceful stop) are `listen`'s.
//!
//! The model APIs plug in as one more group: `serve_http(settings, stop, mcp, Some(Routes {
//! router, auth }))`, where `router` holds their routes (and no fallback) and `auth` is their
//! [`Auth`] (the token as `x-api-key`, `x-goog-api-key` or `?key=` too, refusing in the API's
//! own envelope), built on [`Token::matches`] and [`bearer_credentials`]. They get the same
//! Host/Origin checks, body limits, request ids and log lines as `/mcp`; those checks' refusals
//! are plain text, on every group.

mod body;
mod checks;
mod listen;
mod settings;

pub use checks::{Auth, Token, bearer, bearer_credentials};
pub use settings::HttpSettings;

use axum::body::{Body, HttpBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{BoxError, Router};
use bytes::Bytes;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

/// A group of routes served beside `/mcp`, behind its own credential check. The router should
/// set no fallback (unknown paths are this server's 404).
pub struct Routes {
    pub router: Router,
    pub auth: Auth,
}

/// Serves `mcp` at `/mcp` (and `api`, if given, beside it) until SIGTERM, Ctrl-C or `stop` is
/// cancelled; then cancels `stop` (so a service holding a child of it ends its streams) and
/// gives the requests in flight `settings.shutdown_grace` to finish.
pub async fn serve_http<S, B>(
    settings: HttpSettings,
    stop: CancellationToken,
    mcp: S,
    api: Option<Routes>,
) -> Result<(), String>
where
    S: tower_service::Service<
            axum::http::Request<Bytes>,
            Response = axum::http::Response<B>,
            Error = Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mcp = BoxCloneSyncService::new(mcp.map_response(|r| r.map(Body::new)));
    let app = app(&settings, mcp, api);
    let listener = tokio::net::TcpListener::bind(settings.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.bind))?;
    tracing::warn!(address = %settings.bind, auth = settings.auth_token.is_some(), "serving MCP over HTTP at /mcp");
    let limits = listen::Listen {
        max_connections: settings.max_connections,
        header_timeout: settings.header_timeout,
        shutdown_grace: settings.shutdown_grace,
    };
    listen::serve(listener, app, limits, stop).await;
    Ok(())
}

/// Every route, with its checks.
fn app(settings: &HttpSettings, mcp: Mcp, api: Option<Routes>) -> Router {
    let token = settings.auth_token.as_deref().map(Token::new);
    let limits = Arc::new(body::Limits::new(settings));
    // A group's routes: its credential check, then the body.
    let guarded = |group: Routes| {
        group
            .router
            .route_layer(from_fn_with_state(limits.clone(), body::read_whole))
            .route_layer(from_fn_with_state(
                (token.clone(), group.auth),
                authenticate,
            ))
    };
    let mcp = Router::new().route("/mcp", any(move |r: Request| call(mcp.clone(), r)));
    let mut routes = guarded(Routes {
        router: mcp,
        auth: bearer,
    });
    if let Some(api) = api {
        routes = routes.merge(guarded(api));
    }
    let allowed = Arc::new(checks::Allowed::new(
        &settings.allowed_hosts,
        &settings.allowed_origins,
    ));
    routes
        .route_layer(from_fn_with_state(allowed, check_head))
        .route("/healthz", any(health))
        .fallback(not_found)
        // Extractors (`Bytes`, `Json`) take what `body::read_whole` took.
        .layer(DefaultBodyLimit::max(settings.max_body))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, FreshId))
        .layer(from_fn(log_request))
}

/// The MCP service, boxed once.
type Mcp = BoxCloneSyncService<axum::http::Request<Bytes>, Response, Infallible>;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// `/mcp`: the request, its body already in memory, to the MCP service.
async fn call(mcp: Mcp, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (StatusCode::BAD_REQUEST, "bad request: malformed body\n").into_response();
    };
    match mcp
        .oneshot(axum::http::Request::from_parts(parts, bytes))
        .await
    {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

async fn health() -> &'static str {
    "ok\n"
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found: MCP is served at /mcp\n").into_response()
}

/// Middleware: `Host` and `Origin` (a refusal lingers, see `body`).
async fn check_head(
    State(allowed): State<Arc<checks::Allowed>>,
    request: Request,
    next: Next,
) -> Response {
    match allowed.check(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            body::linger(request.into_body());
            refusal.into_response()
        }
    }
}

/// Middleware: the group's credential check, when a token is configured.
async fn authenticate(
    State((token, auth)): State<(Option<Token>, Auth)>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    match auth(&request, &token) {
        None => next.run(request).await,
        Some(refusal) => {
            body::linger(request.into_body());
            refusal
        }
    }
}

/// A request id for a request that came without one: 32 hex digits.
#[derive(Clone, Copy)]
struct FreshId;

impl MakeRequestId for FreshId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// Middleware, outermost: drops a proxy's request id longer than 128 bytes (one is made
/// instead), then logs the request with the id its answer carries. (Not tower-http's
/// `TraceLayer`: its callbacks see the request or the response, not both, and this line's
/// fields are top-level in the JSON log, not a span's.)
async fn log_request(mut request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    if request
        .headers()
        .get(&REQUEST_ID)
        .is_some_and(|v| v.len() > 128)
    {
        request.headers_mut().remove(&REQUEST_ID);
    }
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let id = response.headers().get(&REQUEST_ID);
    tracing::info!(
        request_id = id.and_then(|v| v.to_str().ok()).unwrap_or("-"), method = %method,
        path = %crate::error::clip(&path), status = response.status().as_u16(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0, "http request"
    );
    response
}

