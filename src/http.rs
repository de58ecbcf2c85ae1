//! Streamable HTTP: the same server on one endpoint (`/mcp`) for many clients, with
//! `/healthz` for load balancers. rmcp's service does the protocol: 2026-07-28 requests are
//! stateless (each POST is self-contained; MRTR rounds may land on any replica sharing the
//! sealing key), legacy clients get sessions (`Mcp-Session-Id`) because sampling needs the
//! session's server-to-client stream. In front of it: bearer-token auth (compared in constant
//! time), `Host` and `Origin` allow-lists (DNS rebinding), the body limit, and a graceful stop
//! on SIGTERM or Ctrl-C.

use crate::server::Server;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the HTTP server listens and whom it lets in.
#[derive(Clone)]
pub struct HttpSettings {
    pub bind: SocketAddr,
    /// `Host` values accepted (names or `name:port`); loopback names by default.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers (`scheme://host:port`); none means any request
    /// carrying an `Origin` header is refused.
    pub allowed_origins: Vec<String>,
    /// A bearer token every request must carry.
    pub auth_token: Option<String>,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// How long in-flight requests may finish after a stop signal.
    pub shutdown_grace: Duration,
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

/// Whether the request carries the token, compared in constant time (as digests, so the
/// lengths do not leak either).
fn authorized(request: &Request<Incoming>, token: &[u8; 32]) -> bool {
    let presented = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| Sha256::digest(t.trim().as_bytes()));
    match presented {
        Some(digest) => {
            digest
                .iter()
                .zip(token.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
        }
        None => false,
    }
}

/// Serves MCP over Streamable HTTP until SIGTERM or Ctrl-C.
pub async fn serve_http(server: Server, settings: HttpSettings) -> Result<(), String> {
    let stop = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_cancellation_token(stop.child_token())
        .with_max_request_body_bytes(settings.max_body)
        .with_allowed_hosts(settings.allowed_hosts.clone());
    config = config
        .with_allowed_origins(settings.allowed_origins.clone())
        .enforce_origin_validation();
    let mcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let token = settings
        .auth_token
        .as_ref()
        .map(|t| <[u8; 32]>::from(Sha256::digest(t.as_bytes())));
    let listener = tokio::net::TcpListener::bind(settings.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.bind))?;
    tracing::warn!(address = %settings.bind, auth = token.is_some(), "serving MCP over HTTP at /mcp");
    let connections = tokio_util::task::TaskTracker::new();
    // One signal listener for the server's life: a signal between two accepts is not lost.
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let Ok((stream, _peer)) = accepted else {
            continue;
        };
        connections.spawn(serve_connection(stream, mcp.clone(), token, stop.clone()));
    }
    tracing::warn!("stopping: finishing in-flight requests");
    stop.cancel();
    connections.close();
    if tokio::time::timeout(settings.shutdown_grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within the grace period; dropped");
    }
    Ok(())
}

type Mcp = StreamableHttpService<Server, LocalSessionManager>;

/// One request: health, `/mcp` behind the token, or 404.
async fn route(
    request: Request<Incoming>,
    mut mcp: Mcp,
    token: Option<[u8; 32]>,
) -> Response<Body> {
    match request.uri().path() {
        "/healthz" => plain(StatusCode::OK, "ok\n"),
        "/mcp" if token.is_some_and(|t| !authorized(&request, &t)) => {
            let mut r = plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer realm=\"agent-as-model\""),
            );
            r
        }
        "/mcp" => {
            use tower_service::Service as _;
            match mcp.call(request).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
        _ => plain(StatusCode::NOT_FOUND, "not found: MCP is served at /mcp\n"),
    }
}

/// Serves one connection until it closes, or ends it gracefully when the server stops.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    mcp: Mcp,
    token: Option<[u8; 32]>,
    stop: CancellationToken,
) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let mcp = mcp.clone();
        async move { Ok::<_, Infallible>(route(request, mcp, token).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
