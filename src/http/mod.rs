//! The HTTP server (`--http`): one listener, axum routes, HTTP concerns only (this module knows
//! nothing of MCP; the MCP service it mounts is `crate::mcp::streamable`).
//!
//! - `/healthz`: 200 for load balancers, before every check (and past the connection cap).
//! - `/mcp`: the MCP service (any tower `Service<http::Request<Bytes>>`), behind the bearer
//!   token ([`bearer`]).
//! - further route groups (the model APIs, and `/metrics` with them), each with its own
//!   credential check: a [`Routes`] passed to [`serve_http`], merged beside `/mcp`.
//! - `/ui`: the server's own web page (`ui`), with the model APIs: a chat and a view of the
//!   engine, whose files are served without the token and whose calls carry it.
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

pub mod api;
mod body;
mod checks;
mod compact;
mod embeddings;
mod listen;
mod ollama;
mod responses_ws;
pub mod routes;
mod settings;
mod threads;
mod transcriptions;
pub mod ui;
mod whole;

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
    /// The group's answer to a path none of its routes serves, when the path is its own (the
    /// model APIs answer an unknown `/v1/…` in their JSON envelope); `None` leaves it to the
    /// server's 404.
    pub unknown: Option<fn(&Request) -> Option<Response>>,
    /// The path of a web page the group serves, which the start log names.
    pub page: Option<&'static str>,
}

/// Why HTTP could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Serves `mcp` at `/mcp` (and `api`, if given, beside it) until SIGTERM, Ctrl-C or `stop` is
/// cancelled; then cancels `stop` (so a service holding a child of it ends its streams) and
/// gives the requests in flight `settings.shutdown_grace` to finish.
pub async fn serve_http<S, B>(
    settings: HttpSettings,
    stop: CancellationToken,
    mcp: S,
    api: Option<Routes>,
) -> Result<(), ServeError>
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
    let page = api.as_ref().and_then(|a| a.page);
    let app = app(&settings, mcp, api);
    let listener = tokio::net::TcpListener::bind(settings.bind)
        .await
        .map_err(|source| ServeError::Listen {
            address: settings.bind,
            source,
        })?;
    tracing::warn!(address = %settings.bind, auth = settings.auth_token.is_some(), "serving MCP over HTTP at /mcp");
    if let Some(path) = page {
        let url = ui::address(settings.bind, path);
        tracing::warn!(url = %url, "a chat page and a view of the engine: open {url} in a browser");
    }
    let limits = listen::Listen {
        max_connections: settings.max_connections,
        header_timeout: settings.header_timeout,
        shutdown_grace: settings.shutdown_grace,
        signals: settings.signals,
    };
    listen::serve(listener, app, limits, stop).await;
    Ok(())
}

/// Every route, with its checks.
fn app(settings: &HttpSettings, mcp: Mcp, api: Option<Routes>) -> Router {
    let token = settings.auth_token.as_deref().map(Token::new);
    let limits = Arc::new(body::Limits::new(settings));
    let pacing = Arc::new(whole::Pacing {
        budget: limits.budget.clone(),
        write_timeout: settings.write_timeout,
    });
    // A group's routes: its credential check, then the answer's pacing, then the body.
    let guarded = |group: Routes| {
        group
            .router
            .route_layer(from_fn_with_state(limits.clone(), body::read_whole))
            .route_layer(from_fn_with_state(pacing.clone(), whole::pace))
            .route_layer(from_fn_with_state(
                (token.clone(), group.auth),
                authenticate,
            ))
    };
    let mcp = Router::new().route("/mcp", any(move |r: Request| call(mcp.clone(), r)));
    let mut routes = guarded(Routes {
        router: mcp,
        auth: bearer,
        unknown: None,
        page: None,
    });
    let mut unknown = None;
    if let Some(api) = api {
        unknown = api.unknown;
        routes = routes.merge(guarded(api));
    }
    let allowed = Arc::new(checks::Allowed::new(
        &settings.allowed_hosts,
        &settings.allowed_origins,
    ));
    routes
        .route_layer(from_fn_with_state(allowed, check_head))
        .route("/healthz", any(health))
        .fallback(move |request: Request| async move {
            match unknown.and_then(|answer| answer(&request)) {
                Some(response) => response,
                None => not_found(),
            }
        })
        // Extractors (`Bytes`, `Json`) take what `body::read_whole` took.
        .layer(DefaultBodyLimit::max(settings.max_body))
        // A WebSocket's messages are held to the request body limit.
        .layer(axum::Extension(responses_ws::Limits {
            max_message: settings.max_body,
            idle: settings.websocket_idle,
        }))
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

fn not_found() -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request as HttpRequest;
    use std::time::Duration;

    fn settings(token: Option<&str>) -> HttpSettings {
        HttpSettings {
            bind: "127.0.0.1:8000".parse().unwrap(),
            allowed_hosts: vec!["localhost".into()],
            allowed_origins: vec!["http://localhost:8000".into()],
            auth_token: token.map(str::to_owned),
            max_body: 100,
            shutdown_grace: Duration::from_secs(1),
            max_connections: 4,
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(1),
            body_deadline: Duration::from_secs(1),
            max_body_buffer: 1000,
            max_json_values: 1000,
            write_timeout: Duration::from_secs(1),
            websocket_idle: Duration::from_secs(1),
            signals: true,
        }
    }

    /// An MCP service that echoes the body it was given.
    fn echo() -> Mcp {
        BoxCloneSyncService::new(tower::service_fn(|r: HttpRequest<Bytes>| async move {
            Ok::<_, Infallible>(axum::http::Response::new(Body::from(r.into_body())))
        }))
    }

    /// A group with another credential form: the token as `x-api-key`.
    fn api() -> Routes {
        fn api_key(request: &Request, token: &Token) -> Option<Response> {
            let key = request
                .headers()
                .get("x-api-key")
                .and_then(|v| v.to_str().ok());
            if key.is_some_and(|k| token.matches(k)) {
                return None;
            }
            Some((StatusCode::UNAUTHORIZED, "{\"error\":\"key\"}").into_response())
        }
        Routes {
            router: Router::new().route("/v1/models", any(|| async { "models" })),
            auth: api_key,
            unknown: None,
            page: None,
        }
    }

    async fn send(app: &Router, request: HttpRequest<Body>) -> (u16, String, Option<String>) {
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let id = response
            .headers()
            .get("x-request-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned(), id)
    }

    fn request(path: &str, headers: &[(&str, &str)], body: &str) -> HttpRequest<Body> {
        let mut r = HttpRequest::post(path).header("host", "localhost:8000");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(Body::from(body.to_owned())).unwrap()
    }

    #[tokio::test]
    async fn each_group_has_its_credential_check_behind_the_host_check() {
        let app = app(&settings(Some("s3cret")), echo(), Some(api()));
        let bearer = ("authorization", "Bearer s3cret");
        let key = ("x-api-key", "s3cret");
        let evil = ("host", "evil.example");
        assert_eq!(send(&app, request("/mcp", &[bearer], "hi")).await.1, "hi");
        assert_eq!(send(&app, request("/mcp", &[key], "hi")).await.0, 401);
        assert_eq!(
            send(&app, request("/v1/models", &[key], "")).await.1,
            "models"
        );
        let refused = send(&app, request("/v1/models", &[bearer], "")).await;
        assert_eq!(
            (refused.0, refused.1.as_str()),
            (401, "{\"error\":\"key\"}")
        );
        // A foreign Host is refused before the token is asked for, on every group.
        let mut foreign = request("/mcp", &[], "");
        foreign
            .headers_mut()
            .insert("host", HeaderValue::from_static("evil.example"));
        assert_eq!(send(&app, foreign).await.0, 403);
        let origin = ("origin", "http://evil.example");
        assert_eq!(
            send(&app, request("/v1/models", &[key, origin], ""))
                .await
                .0,
            403
        );
        // Health and unknown paths are outside the checks.
        let mut health = request("/healthz", &[], "");
        health
            .headers_mut()
            .insert("host", HeaderValue::from_static(evil.1));
        assert_eq!(send(&app, health).await.0, 200);
        assert_eq!(send(&app, request("/elsewhere", &[], "")).await.0, 404);
    }

    #[tokio::test]
    async fn bodies_are_limited_on_every_group_and_requests_get_an_id() {
        let app = app(&settings(None), echo(), Some(api()));
        let big = "x".repeat(101);
        let (status, text, _) = send(&app, request("/mcp", &[], &big)).await;
        assert_eq!(status, 413, "{text}");
        assert!(text.contains("AGENT_AS_MODEL_MAX_REQUEST_BYTES"), "{text}");
        assert_eq!(send(&app, request("/v1/models", &[], &big)).await.0, 413);
        let (status, _, id) = send(&app, request("/mcp", &[], "")).await;
        assert_eq!(status, 200);
        assert_eq!(id.map(|i| i.len()), Some(32));
        let kept = send(&app, request("/mcp", &[("x-request-id", "from-proxy")], "")).await;
        assert_eq!(kept.2.as_deref(), Some("from-proxy"));
        let long = "y".repeat(129);
        let replaced = send(&app, request("/mcp", &[("x-request-id", &long)], "")).await;
        assert_eq!(replaced.2.map(|i| i.len()), Some(32));
    }
}
