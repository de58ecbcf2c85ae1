//! Connections: the controls `axum::serve` lacks. A cap on connections held open (past it a few
//! more are answered at once, `/healthz` 200 and the rest 503, then closed; a new one past
//! those ends the oldest, so idle connections cannot keep a health check out), a pause after a
//! failed accept (out of descriptors) instead of a spin, the header timeout (which also bounds
//! an idle keep-alive connection), and a graceful stop on SIGTERM or Ctrl-C with a grace period.
//! A connection upgraded to a WebSocket keeps its place under the cap, and hears the stop,
//! through the [`Slot`] its requests carry.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Connections answered past the cap at once (`/healthz` 200, else 503), each for at most
/// [`OVER_CAP_TIMEOUT`]; one more ends the oldest of them (which has had the longest to send
/// its request), so a health check is answered however many idle connections arrive.
const OVERFLOW_CONNECTIONS: usize = 32;
const OVER_CAP_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection's place under the cap, in each of its requests' extensions: a handler that
/// takes the connection over (a WebSocket) keeps a clone for as long as it does, and ends when
/// `stop` is cancelled. Cancelling `abort` closes the connection at once (a client that reads
/// none of its answer).
#[derive(Clone)]
pub(super) struct Slot {
    _place: Arc<OwnedSemaphorePermit>,
    pub(super) stop: CancellationToken,
    pub(super) abort: CancellationToken,
}

/// What the listener needs to know.
pub(super) struct Listen {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub shutdown_grace: Duration,
    /// SIGTERM and Ctrl-C stop the server (else only `stop` does).
    pub signals: bool,
}

/// Serves `app` on `listener` until SIGTERM, Ctrl-C or `stop`; then cancels `stop` and gives
/// the requests in flight the grace period to finish.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Listen,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    // Connections held open, and the few answered past the cap (health checks among them).
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut overflow = Overflow::new();
    let mut backoff = AcceptBackoff::default();
    // One signal listener for the server's life: a signal between two accepts is not lost.
    let shutdown = shutdown_signal(limits.signals);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
            () = stop.cancelled() => break,
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
                    () = stop.cancelled() => break,
                }
            }
        };
        if let Ok(permit) = open.clone().try_acquire_owned() {
            let (app, stop, timeout) = (app.clone(), stop.clone(), limits.header_timeout);
            connections.spawn(async move {
                let slot = Slot {
                    _place: Arc::new(permit),
                    stop: stop.clone(),
                    abort: CancellationToken::new(),
                };
                serve_connection(stream, app, stop, timeout, slot).await;
            });
        } else {
            backoff.warn_full(limits.max_connections);
            overflow.answer(stream, &connections);
        }
    }
    finish(connections, stop, limits.shutdown_grace).await;
}

/// The connections answered past the cap, oldest first (each cancels its token when done), and
/// what answers them.
struct Overflow {
    connections: VecDeque<CancellationToken>,
    app: Router,
}

impl Overflow {
    fn new() -> Self {
        Overflow {
            connections: VecDeque::with_capacity(OVERFLOW_CONNECTIONS),
            app: Router::new()
                .route("/healthz", any(super::health))
                .fallback(full),
        }
    }

    /// Answers `stream` past the cap, on a task of `tasks`; one more than
    /// [`OVERFLOW_CONNECTIONS`] ends the oldest.
    fn answer(&mut self, stream: TcpStream, tasks: &TaskTracker) {
        self.connections.retain(|done| !done.is_cancelled());
        if self.connections.len() >= OVERFLOW_CONNECTIONS
            && let Some(oldest) = self.connections.pop_front()
        {
            oldest.cancel();
        }
        let (app, done) = (self.app.clone(), CancellationToken::new());
        self.connections.push_back(done.clone());
        tasks.spawn(async move {
            tokio::select! {
                () = serve_over_cap(stream, app) => {}
                () = done.cancelled() => {}
            }
            done.cancel();
        });
    }
}

/// Cancels `stop` and gives the connections in flight `grace` to finish.
async fn finish(connections: TaskTracker, stop: CancellationToken, grace: Duration) {
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

/// The pause after a failed accept: 5 ms doubling to 1 s, logged once per run of failures.
#[derive(Default)]
struct AcceptBackoff {
    pause: Duration,
    warned_full: bool,
}

impl AcceptBackoff {
    /// Says once that the connection cap is reached.
    fn warn_full(&mut self, max: usize) {
        if !self.warned_full {
            self.warned_full = true;
            tracing::warn!(
                max,
                "connection limit reached (AGENT_AS_MODEL_MAX_CONNECTIONS): new connections \
                 are answered 503 until some close (/healthz still answers)"
            );
        }
    }
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

/// Anything but `/healthz` on a connection past the cap.
async fn full() -> Response {
    let retry = [(header::RETRY_AFTER, HeaderValue::from_static("1"))];
    let text = "connection limit reached (AGENT_AS_MODEL_MAX_CONNECTIONS); retry later\n";
    (StatusCode::SERVICE_UNAVAILABLE, retry, text).into_response()
}

/// A connection past the cap: one request read within [`OVER_CAP_TIMEOUT`], answered, closed.
async fn serve_over_cap(stream: TcpStream, app: Router) {
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(OVER_CAP_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let _ = tokio::time::timeout(OVER_CAP_TIMEOUT, connection).await;
}

/// Serves one connection until it closes, or ends it gracefully when the server stops.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    stop: CancellationToken,
    header_timeout: Duration,
    slot: Slot,
) {
    // Answers are small and whole: send them at once, not after the peer's delayed ACK.
    let _ = stream.set_nodelay(true);
    let abort = slot.abort.clone();
    let app = tower::ServiceExt::map_request(
        app,
        move |mut request: http::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(slot.clone());
            request
        },
    );
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
        // A connection may become a WebSocket (the Responses API's WebSocket mode).
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        // Dropping the connection closes it, and frees what its answer holds.
        () = abort.cancelled() => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// SIGTERM or Ctrl-C, when `listens`; else never.
async fn shutdown_signal(listens: bool) {
    if !listens {
        return std::future::pending().await;
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
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
