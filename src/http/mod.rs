//! Streamable HTTP: the same server on one endpoint (`/mcp`) for many clients, with
//! `/healthz` for load balancers. rmcp's service does the protocol: 2026-07-28 requests are
//! stateless (each POST is self-contained; MRTR rounds may land on any replica sharing the
//! sealing key), legacy clients get sessions (`Mcp-Session-Id`) because sampling needs the
//! session's server-to-client stream. In front of it: bearer-token auth (compared in constant
//! time), `Host` and `Origin` allow-lists (DNS rebinding), the body limit, and a graceful stop
//! on SIGTERM or Ctrl-C. Legacy sessions are capped and expire when idle ([`sessions`]); tool
//! calls are capped per session and in all ([`crate::mcp::gate`]); every request gets an id
//! (`X-Request-Id`, kept from a proxy or made here) that the call's log line carries.

mod sessions;

use crate::config::Config;
use crate::mcp::gate::GlobalCap;
use crate::mcp::server::Server;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sessions::CappedSessions;
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
    /// Most legacy sessions held at once.
    pub max_sessions: usize,
    /// How long a legacy session may stay quiet before it is closed.
    pub session_idle: Duration,
    /// Most tool calls in flight, in all and per session.
    pub max_calls: usize,
    pub max_calls_per_session: usize,
    /// Most connections held open; one more is answered at once and closed.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers (and stay idle between
    /// requests).
    pub header_timeout: Duration,
    /// How long a request body may go without a byte arriving.
    pub body_timeout: Duration,
    /// How long a whole request body may take.
    pub body_deadline: Duration,
    /// Most bytes of request bodies held at once, across every connection.
    pub max_body_buffer: usize,
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

fn plain_owned(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
    *response.status_mut() = status;
    response
}

/// Whether the request carries the token, compared in constant time (as digests, so the
/// lengths do not leak either). The scheme's name is case-insensitive (RFC 7235).
fn authorized<B>(request: &Request<B>, token: &[u8; 32]) -> bool {
    let presented = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, credentials) = v.trim_start().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(credentials)
        })
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

/// The front every connection shares: rmcp's service (legacy sessions capped, calls gated), the
/// sessions, the token's digest. Cancelling `stop` ends the service's streams.
fn front(server: Server, settings: &HttpSettings, stop: &CancellationToken) -> Front {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_cancellation_token(stop.child_token())
        .with_max_request_body_bytes(settings.max_body)
        .with_allowed_hosts(settings.allowed_hosts.clone())
        .with_allowed_origins(settings.allowed_origins.clone())
        .enforce_origin_validation();
    let sessions = Arc::new(CappedSessions::new(
        settings.max_sessions,
        settings.session_idle,
    ));
    let calls = GlobalCap::new(settings.max_calls);
    let per_session = settings.max_calls_per_session;
    let mcp = StreamableHttpService::new(
        move || Ok(server.with_gate(calls.session(per_session))),
        sessions.clone(),
        config,
    );
    let token = settings
        .auth_token
        .as_ref()
        .map(|t| <[u8; 32]>::from(Sha256::digest(t.as_bytes())));
    Front {
        mcp,
        sessions,
        token,
        max_body: settings.max_body,
        body_timeout: settings.body_timeout,
        body_deadline: settings.body_deadline,
        buffered: Arc::new(tokio::sync::Semaphore::new(
            settings
                .max_body_buffer
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        max_body_buffer: settings.max_body_buffer,
    }
}

/// Serves MCP over Streamable HTTP until SIGTERM or Ctrl-C.
pub async fn serve_http(server: Server, settings: HttpSettings) -> Result<(), String> {
    let stop = CancellationToken::new();
    let front = front(server, &settings, &stop);
    let listener = tokio::net::TcpListener::bind(settings.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.bind))?;
    tracing::warn!(address = %settings.bind, auth = front.token.is_some(), "serving MCP over HTTP at /mcp");
    let connections = tokio_util::task::TaskTracker::new();
    // Connections held open, and the few answered past the cap (health checks among them).
    let open = Arc::new(tokio::sync::Semaphore::new(settings.max_connections.max(1)));
    let overflow = Arc::new(tokio::sync::Semaphore::new(OVERFLOW_CONNECTIONS));
    let mut backoff = AcceptBackoff::default();
    // One signal listener for the server's life: a signal between two accepts is not lost.
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => {
                backoff.reset();
                stream
            }
            Err(e) => {
                // Out of descriptors (or another transient failure): wait before the next
                // accept instead of spinning on the same error.
                let pause = backoff.next(&e);
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        if let Ok(permit) = open.clone().try_acquire_owned() {
            let (front, stop, timeout) = (front.clone(), stop.clone(), settings.header_timeout);
            connections.spawn(async move {
                serve_connection(stream, front, stop, timeout).await;
                drop(permit);
            });
        } else if let Ok(permit) = overflow.clone().try_acquire_owned() {
            if !backoff.warned_full {
                backoff.warned_full = true;
                tracing::warn!(
                    max = settings.max_connections,
                    "connection limit reached (AGENT_AS_MODEL_MAX_CONNECTIONS): new connections \
                     are answered 503 until some close (/healthz still answers)"
                );
            }
            connections.spawn(async move {
                serve_over_cap(stream).await;
                drop(permit);
            });
        }
        // Past both, the connection is closed at once: its descriptor is freed here.
    }
    finish(&stop, &connections, settings.shutdown_grace).await;
    Ok(())
}

/// Stops the connections' requests and waits for those in flight, for `grace` at most.
async fn finish(
    stop: &CancellationToken,
    connections: &tokio_util::task::TaskTracker,
    grace: Duration,
) {
    tracing::warn!("stopping: finishing in-flight requests");
    stop.cancel();
    connections.close();
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within the grace period; dropped");
    }
}

/// Connections answered past the cap at once (`/healthz` 200, else 503), each for at most
/// [`OVER_CAP_TIMEOUT`]; past these too a connection is closed without an answer.
const OVERFLOW_CONNECTIONS: usize = 32;
const OVER_CAP_TIMEOUT: Duration = Duration::from_secs(2);

/// The pause after a failed accept: 5 ms doubling to 1 s, logged once per run of failures.
#[derive(Default)]
struct AcceptBackoff {
    pause: Duration,
    warned_full: bool,
}

impl AcceptBackoff {
    fn next(&mut self, error: &std::io::Error) -> Duration {
        if self.pause.is_zero() {
            tracing::warn!(error = %error, "accepting a connection failed (out of file descriptors?); backing off");
        }
        self.pause = (self.pause * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
        self.pause
    }

    fn reset(&mut self) {
        self.pause = Duration::ZERO;
    }
}

/// A connection past the cap: one request read within [`OVER_CAP_TIMEOUT`], answered (health
/// checks 200, the rest 503 naming the setting), then closed.
async fn serve_over_cap(stream: tokio::net::TcpStream) {
    let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
        let response = if request.uri().path() == "/healthz" {
            plain(StatusCode::OK, "ok\n")
        } else {
            let mut r = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "connection limit reached (AGENT_AS_MODEL_MAX_CONNECTIONS); retry later\n",
            );
            r.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            r
        };
        Ok::<_, Infallible>(response)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(OVER_CAP_TIMEOUT)
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let _ = tokio::time::timeout(OVER_CAP_TIMEOUT, connection).await;
}

type Mcp = StreamableHttpService<Server, CappedSessions>;

/// What every connection shares: the MCP service, its sessions, the token's digest and the
/// request limits.
#[derive(Clone)]
struct Front {
    mcp: Mcp,
    sessions: Arc<CappedSessions>,
    token: Option<[u8; 32]>,
    max_body: usize,
    body_timeout: Duration,
    body_deadline: Duration,
    /// The bytes of request bodies that may still be held (one permit a byte).
    buffered: Arc<tokio::sync::Semaphore>,
    max_body_buffer: usize,
}

/// One request, logged with its id and duration; the id is echoed as `X-Request-Id`.
async fn handle(mut request: Request<Incoming>, front: Front) -> Response<Body> {
    let started = std::time::Instant::now();
    let id = match request.headers().get(REQUEST_ID) {
        Some(v) if v.len() <= 128 => v.clone(),
        _ => {
            let fresh = uuid::Uuid::new_v4().simple().to_string();
            let v = hyper::header::HeaderValue::from_str(&fresh)
                .unwrap_or(hyper::header::HeaderValue::from_static("-"));
            request.headers_mut().insert(REQUEST_ID, v.clone());
            v
        }
    };
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let mut response = route(request, front).await;
    tracing::info!(
        request_id = id.to_str().unwrap_or("-"), method = %method, path = %crate::error::clip(&path),
        status = response.status().as_u16(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0, "http request"
    );
    response.headers_mut().insert(REQUEST_ID, id);
    response
}

const REQUEST_ID: &str = "x-request-id";

/// A refusal sent before the request's body is read: the body is read and dropped for up to
/// two seconds after the answer (a lingering close, as nginx does), so that a client still
/// writing it reads the refusal instead of a broken pipe.
fn refuse(request: Request<Incoming>, refusal: Response<Body>) -> Response<Body> {
    linger(request.into_body());
    refusal
}

/// Reads and drops what is left of a body, for two seconds at most, holding none of it.
fn linger(mut body: Incoming) {
    tokio::spawn(async move {
        let drain = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    });
}

/// Health, `/mcp` behind the host checks, the token, the body limits and the session cap, or
/// 404.
async fn route(request: Request<Incoming>, front: Front) -> Response<Body> {
    match request.uri().path() {
        "/healthz" => plain(StatusCode::OK, "ok\n"),
        "/mcp" => {
            if let Err((status, why)) = check_authority(&request) {
                return refuse(request, plain(status, why));
            }
            if front.token.is_some_and(|t| !authorized(&request, &t)) {
                let mut r = plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer realm=\"agent-as-model\""),
                );
                return refuse(request, r);
            }
            let read = tokio::time::timeout(front.body_deadline, read_body(request, &front));
            let (parts, body, _held) = match read.await {
                Ok(Ok(read)) => read,
                Ok(Err(refusal)) => return refusal,
                Err(_) => {
                    return plain_owned(
                        StatusCode::REQUEST_TIMEOUT,
                        format!(
                            "request timeout: the body took longer than {} s to arrive \
                             (AGENT_AS_MODEL_BODY_DEADLINE_SECS)\n",
                            front.body_deadline.as_secs()
                        ),
                    );
                }
            };
            if parts.method == hyper::Method::POST
                && let Some(reply) = crate::mcp::stdio::refuse_malformed_call(&body)
            {
                let mut r = plain_owned(StatusCode::OK, reply.to_string());
                r.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                return r;
            }
            route_mcp(Request::from_parts(parts, Full::new(body)), front).await
        }
        _ => plain(StatusCode::NOT_FOUND, "not found: MCP is served at /mcp\n"),
    }
}

/// The request's authority checks rmcp does not make: one `Host` header only; an absolute-form
/// target (`POST http://host/mcp`) judged by its own authority, which must agree with `Host`.
/// Loopback names are accepted on any port (a reverse proxy passes its own), as the official
/// MCP SDKs' defaults do; rmcp checks the names.
fn check_authority<B>(request: &Request<B>) -> Result<(), (StatusCode, &'static str)> {
    let hosts = request.headers().get_all(hyper::header::HOST);
    if hosts.iter().count() > 1 {
        return Err((
            StatusCode::BAD_REQUEST,
            "bad request: more than one Host header\n",
        ));
    }
    let host = hosts
        .iter()
        .next()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| hyper::http::uri::Authority::try_from(v).ok());
    let target = request.uri().authority();
    if let (Some(target), Some(host)) = (target, &host)
        && !target.host().eq_ignore_ascii_case(host.host())
    {
        return Err((
            StatusCode::BAD_REQUEST,
            "bad request: the request target's authority and the Host header differ\n",
        ));
    }
    Ok(())
}

/// A request's head and whole body, with the share of the body buffer it holds until the
/// request is answered.
type ReadBody = (
    hyper::http::request::Parts,
    Bytes,
    Option<tokio::sync::OwnedSemaphorePermit>,
);

/// The request's head and its body read whole: a declared length over the limit is 413 before a byte
/// is read, a body that grows past it is 413, one that stops arriving for the body timeout is
/// 408, and a malformed one (a bad chunk size) is 400. The body's bytes are counted against the
/// buffer all connections share, held until the request is answered; past it, 503.
async fn read_body(request: Request<Incoming>, front: &Front) -> Result<ReadBody, Response<Body>> {
    let declared = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > front.max_body as u64) {
        linger(request.into_body());
        return Err(too_large(front));
    }
    let (parts, mut body) = request.into_parts();
    let mut whole = bytes::BytesMut::new();
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    loop {
        let frame = match tokio::time::timeout(front.body_timeout, body.frame()).await {
            Err(_) => {
                return Err(plain(
                    StatusCode::REQUEST_TIMEOUT,
                    "request timeout: the body stopped arriving (AGENT_AS_MODEL_BODY_TIMEOUT_SECS)\n",
                ));
            }
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(plain(
                    StatusCode::BAD_REQUEST,
                    "bad request: malformed body\n",
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if whole.len().saturating_add(data.len()) > front.max_body {
                linger(body);
                return Err(too_large(front));
            }
            if !hold(front, &mut held, data.len()) {
                linger(body);
                return Err(busy(front));
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok((parts, whole.freeze(), held))
}

/// Takes `n` more bytes of the shared body buffer into `held`; `false` when it has no room.
fn hold(front: &Front, held: &mut Option<tokio::sync::OwnedSemaphorePermit>, n: usize) -> bool {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    let Ok(permit) = front.buffered.clone().try_acquire_many_owned(n) else {
        return false;
    };
    match held.as_mut() {
        Some(h) => h.merge(permit),
        None => *held = Some(permit),
    }
    true
}

/// 413: the body is over the request limit.
fn too_large(front: &Front) -> Response<Body> {
    plain_owned(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "payload too large: a request body may hold at most {} bytes \
             (AGENT_AS_MODEL_MAX_REQUEST_BYTES)\n",
            front.max_body
        ),
    )
}

/// 503 with Retry-After: the bodies being read hold the whole shared buffer.
fn busy(front: &Front) -> Response<Body> {
    let mut r = plain_owned(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "busy: request bodies already hold {} bytes, the most this server buffers \
             (AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES); retry shortly\n",
            front.max_body_buffer
        ),
    );
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    r
}

/// `/mcp` once the body is in: the session cap and the session's existence, then rmcp's
/// service.
async fn route_mcp(request: Request<Full<Bytes>>, mut front: Front) -> Response<Body> {
    if opens_session(&request) && front.sessions.full().await {
        let mut r = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "session limit reached (AGENT_AS_MODEL_MAX_SESSIONS); retry later, or use \
             protocol 2026-07-28, which needs no session\n",
        );
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("5"),
        );
        return r;
    }
    if unknown_session(&request, &front).await {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: no such session (it ended or expired); start a new one\n",
        );
    }
    use tower_service::Service as _;
    let delete = request.method() == hyper::Method::DELETE;
    let mut response = match front.mcp.call(request).await {
        Ok(r) => exact_temperatures(r).await,
        Err(never) => match never {},
    };
    // A closed session is answered 200, which every SDK takes (rmcp says 202, which the
    // Python SDK reports as a failed termination).
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// Whether a `DELETE` names a session this server does not hold (rmcp would answer it as if
/// it had closed one).
async fn unknown_session<B>(request: &Request<B>, front: &Front) -> bool {
    use rmcp::transport::streamable_http_server::session::SessionManager as _;
    if request.method() != hyper::Method::DELETE {
        return false;
    }
    let Some(id) = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    !matches!(front.sessions.has_session(&id.into()).await, Ok(true))
}

/// Whether a request would open a legacy session: a POST with no session, from a client that
/// has not named a stateless protocol version (a legacy `initialize`).
fn opens_session<B>(request: &Request<B>) -> bool {
    request.method() == hyper::Method::POST
        && !request.headers().contains_key("mcp-session-id")
        && request
            .headers()
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v < "2026-07-28")
}

/// The SDK types a sampling `temperature` as `f32`; the sampling requests in a response (a JSON
/// body, or SSE events, one a frame) are rewritten with the temperature as the caller gave it,
/// as on stdio. Frames without a temperature pass untouched.
async fn exact_temperatures(response: Response<Body>) -> Response<Body> {
    let json = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return response.map(|body| body.map_frame(|f| f.map_data(exact_in_frame)).boxed());
    }
    let (mut parts, body) = response.into_parts();
    let whole = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    parts.headers.remove(hyper::header::CONTENT_LENGTH);
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

/// Serves one connection until it closes, or ends it gracefully when the server stops.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    front: Front,
    stop: CancellationToken,
    header_timeout: Duration,
) {
    // Answers are small and whole: send them at once, not after the peer's delayed ACK.
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let front = front.clone();
        async move { Ok::<_, Infallible>(handle(request, front).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
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
impl HttpSettings {
    /// The HTTP server's settings, when `--http` is given.
    pub fn from_config(config: &Config) -> Option<HttpSettings> {
        let bind = config.http?;
        let mut hosts: Vec<String> = if config.allowed_hosts.is_empty() {
            ["localhost", "127.0.0.1", "::1", "[::1]"]
                .map(str::to_owned)
                .to_vec()
        } else {
            config
                .allowed_hosts
                .iter()
                // `name:*` is the name on any port, as rmcp takes a name without one.
                .map(|h| h.trim().trim_end_matches(":*").to_owned())
                .collect()
        };
        if config.allowed_hosts.is_empty() {
            hosts.push(bind.ip().to_string());
        }
        Some(HttpSettings {
            bind,
            allowed_hosts: hosts,
            allowed_origins: origins(config, bind),
            auth_token: config.auth_token.clone().filter(|t| !t.is_empty()),
            max_body: config.limits.max_request_bytes.saturating_add(1024 * 1024),
            max_sessions: usize::try_from(config.max_sessions).unwrap_or(usize::MAX),
            session_idle: Duration::from_secs(config.session_idle_secs),
            max_calls: usize::try_from(config.max_calls_in_flight).unwrap_or(usize::MAX),
            max_calls_per_session: usize::try_from(config.max_calls_per_session)
                .unwrap_or(usize::MAX),
            shutdown_grace: Duration::from_secs(10),
            max_connections: config
                .max_connections
                .map_or_else(default_max_connections, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
            header_timeout: Duration::from_secs(config.header_timeout_secs),
            body_timeout: Duration::from_secs(config.body_timeout_secs),
            body_deadline: Duration::from_secs(config.body_deadline_secs),
            max_body_buffer: usize::try_from(config.max_body_buffer_bytes).unwrap_or(usize::MAX),
        })
    }
}

/// Origins accepted over HTTP: those given, or else pages served by this very address (a
/// loopback name on the listening port), which a rebinding attack cannot forge.
fn origins(config: &Config, bind: std::net::SocketAddr) -> Vec<String> {
    if !config.allowed_origins.is_empty() {
        return config
            .allowed_origins
            .iter()
            .map(|o| o.trim().to_owned())
            .collect();
    }
    let port = bind.port();
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|host| ["http", "https"].map(|s| format!("{s}://{host}:{port}")))
        .collect()
}

#[cfg(unix)]
fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and reads nothing else.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0;
    if !read {
        return 512;
    }
    usize::try_from(limit.rlim_cur / 2)
        .unwrap_or(4096)
        .clamp(16, 4096)
}

/// Windows has no descriptor limit of this kind (sockets are handles).
#[cfg(not(unix))]
fn default_max_connections() -> usize {
    1024
}
