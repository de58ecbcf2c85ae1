//! MCP over Streamable HTTP as a plain tower service: rmcp's `StreamableHttpService` (2026-07-28
//! requests stateless, legacy clients in sessions) with what this server adds around it, for
//! the HTTP front (`crate::http`) to mount at `/mcp`. It takes a request whose body the front
//! has already read whole (within its limits) and answers it:
//!
//! - a malformed `tools/call` is answered as on stdio, before the SDK sees it;
//! - a legacy `initialize` past the session cap (`sessions`) is 503 with Retry-After;
//! - a `DELETE` of a session this server does not hold is 404 (rmcp would answer it as if it
//!   had closed one), and a closed one is 200 (rmcp says 202, which the Python SDK reports as
//!   a failed termination);
//! - tool calls go through the caps of [`crate::mcp::gate`], per session and in all;
//! - sampling temperatures in the responses are written as the caller gave them.
//!
//! HTTP itself (Host and Origin, auth, body limits, connections, request ids) is the front's:
//! rmcp's own Host and Origin checks are off here because the front makes them.

use crate::config::Config;
use crate::mcp::gate::GlobalCap;
use crate::mcp::server::Server;
use crate::mcp::sessions::CappedSessions;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize as _;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The body of the service's answers: whole, or a stream of SSE events.
pub type McpBody = BoxBody<Bytes, Infallible>;

/// What the service needs beyond the server: the legacy sessions' cap and idle limit, and the
/// caps on calls in flight.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Most legacy sessions held at once.
    pub max_sessions: usize,
    /// How long a legacy session may stay quiet before it is closed.
    pub session_idle: Duration,
    /// Most tool calls in flight, in all and per session.
    pub max_calls: usize,
    pub max_calls_per_session: usize,
    /// The places for calls in flight server-wide (`max_calls` of them), which the model APIs
    /// over HTTP take too: one cap for every front.
    pub calls: Arc<tokio::sync::Semaphore>,
}

impl Settings {
    pub fn from_config(config: &Config) -> Settings {
        Settings {
            max_sessions: usize::try_from(config.max_sessions).unwrap_or(usize::MAX),
            session_idle: Duration::from_secs(config.session_idle_secs),
            max_calls: usize::try_from(config.max_calls_in_flight).unwrap_or(usize::MAX),
            max_calls_per_session: usize::try_from(config.max_calls_per_session)
                .unwrap_or(usize::MAX),
            calls: GlobalCap::places(
                usize::try_from(config.max_calls_in_flight).unwrap_or(usize::MAX),
            ),
        }
    }
}

/// MCP at one endpoint: `Service<http::Request<Bytes>>`, cheap to clone (every connection
/// holds one), always ready.
#[derive(Clone)]
pub struct Streamable {
    mcp: StreamableHttpService<Server, CappedSessions>,
    sessions: Arc<CappedSessions>,
}

/// The service for `server`; cancelling `stop` ends its streams (for a graceful stop).
pub fn service(server: Server, settings: &Settings, stop: CancellationToken) -> Streamable {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_cancellation_token(stop)
        // The front has read the body whole, within its own limit.
        .with_max_request_body_bytes(usize::MAX)
        // And checked Host and Origin.
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let sessions = Arc::new(CappedSessions::new(
        settings.max_sessions,
        settings.session_idle,
    ));
    let calls = GlobalCap::shared(settings.calls.clone(), settings.max_calls);
    let per_session = settings.max_calls_per_session;
    let mcp = StreamableHttpService::new(
        move || Ok(server.with_gate(calls.session(per_session))),
        sessions.clone(),
        config,
    );
    Streamable { mcp, sessions }
}

impl tower_service::Service<Request<Bytes>> for Streamable {
    type Response = Response<McpBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<McpBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(request).await) })
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<McpBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

impl Streamable {
    async fn answer(mut self, request: Request<Bytes>) -> Response<McpBody> {
        if request.method() == Method::POST
            && let Some(reply) = crate::mcp::stdio::refuse_malformed_call(request.body())
        {
            let mut r = Response::new(Full::new(Bytes::from(reply.to_string())).boxed());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return r;
        }
        if opens_session(&request) && self.sessions.full().await {
            let mut r = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "session limit reached (AGENT_AS_MODEL_MAX_SESSIONS); retry later, or use \
                 protocol 2026-07-28, which needs no session\n",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return r;
        }
        if self.unknown_session(&request).await {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: no such session (it ended or expired); start a new one\n",
            );
        }
        use tower_service::Service as _;
        let delete = request.method() == Method::DELETE;
        let mut response = match self.mcp.call(request.map(Full::new)).await {
            Ok(r) => exact_temperatures(r).await,
            Err(never) => match never {},
        };
        if delete && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }

    /// Whether a `DELETE` names a session this server does not hold.
    async fn unknown_session<B>(&self, request: &Request<B>) -> bool {
        if request.method() != Method::DELETE {
            return false;
        }
        let Some(id) = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        !matches!(self.sessions.has_session(&id.into()).await, Ok(true))
    }
}

/// Whether a request would open a legacy session: a POST with no session, from a client that
/// has not named a stateless protocol version (one with no `initialize` handshake).
fn opens_session<B>(request: &Request<B>) -> bool {
    request.method() == Method::POST
        && !request.headers().contains_key("mcp-session-id")
        && request
            .headers()
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| version(v).has_initialize())
}

/// A protocol version header's value, typed (an unknown one is kept as it is: rmcp orders
/// versions by their `YYYY-MM-DD` date).
fn version(v: &str) -> ProtocolVersion {
    let text = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(v);
    ProtocolVersion::deserialize(text).unwrap_or(ProtocolVersion::LATEST)
}

/// The SDK types a sampling `temperature` as `f32`; the sampling requests in a response (a JSON
/// body, or SSE events, one a frame) are rewritten with the temperature as the caller gave it,
/// as on stdio. Frames without a temperature pass untouched.
async fn exact_temperatures(response: Response<McpBody>) -> Response<McpBody> {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return response.map(|body| body.map_frame(|f| f.map_data(exact_in_frame)).boxed());
    }
    let (mut parts, body) = response.into_parts();
    let whole = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Full::new(exact_in_frame(whole)).boxed())
}

fn exact_in_frame(data: Bytes) -> Bytes {
    const NEEDLE: &[u8] = b"\"temperature\"";
    if !data.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
        return data;
    }
    let Ok(text) = std::str::from_utf8(&data) else {
        return data;
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let (prefix, json) = match body.strip_prefix("data:") {
            Some(rest) => ("data: ", rest.trim_start()),
            None => ("", body),
        };
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(mut message) if json.starts_with('{') => {
                crate::mcp::stdio::exact_temperatures(&mut message);
                out.push_str(prefix);
                out.push_str(&message.to_string());
            }
            _ => out.push_str(body),
        }
        out.push_str(end);
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temperature_in_an_sse_event_is_written_as_given() {
        let frame = Bytes::from_static(
            b"id: 1\ndata: {\"method\":\"sampling/createMessage\",\"params\":{\"temperature\":0.699999988079071}}\n\n",
        );
        let out = exact_in_frame(frame);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.contains("\"temperature\":0.7"), "{text}");
        assert!(text.starts_with("id: 1\ndata: {"), "{text}");
    }

    #[test]
    fn a_legacy_initialize_opens_a_session_and_a_stateless_post_does_not() {
        let legacy = Request::post("/mcp").body(()).unwrap();
        assert!(opens_session(&legacy));
        let modern = Request::post("/mcp")
            .header("mcp-protocol-version", "2026-07-28")
            .body(())
            .unwrap();
        assert!(!opens_session(&modern));
        let in_session = Request::post("/mcp")
            .header("mcp-session-id", "x")
            .body(())
            .unwrap();
        assert!(!opens_session(&in_session));
    }
}
