//! Whole answers (a body of known length) to clients that may not read them. A large one is
//! handed to the connection in pieces, and a client that takes no piece for the write timeout
//! (`AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS`, as for streams) has its connection closed, which
//! frees the answer. While it waits for its reader, a large answer to a `GET` (a stored
//! response, its input items: data a request only reads, and can read again) holds its bytes of
//! the buffer requests share (`AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES`), and is refused 503 with
//! Retry-After when the buffer is full. A model's answer is never thrown away for want of room:
//! it is bounded by the cap on calls in flight and its tokens, and holds what is free.

use super::body::{Budget, Held, Overdrawn, busy_text};
use super::listen::Slot;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Answers from this size on are paced and counted; smaller ones go out as they are (the
/// connection's own buffers hold them).
pub(super) const PACED_FROM: usize = 64 * 1024;

/// The piece handed to the connection at a time.
const PIECE: usize = 64 * 1024;

/// What pacing answers holds: the buffer requests share, and how long an answer waits for a
/// reader that takes none of it.
pub(super) struct Pacing {
    pub(super) budget: Arc<Budget>,
    pub(super) write_timeout: Duration,
}

/// Middleware: the answer, paced and counted when it is whole and large.
pub(super) async fn pace(
    State(pacing): State<Arc<Pacing>>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let slot = request.extensions().get::<Slot>().cloned();
    let response = next.run(request).await;
    let reader = Reader {
        method: &method,
        slot: slot.as_ref(),
        write_timeout: pacing.write_timeout,
    };
    paced(response, &pacing.budget, reader).await
}

/// What pacing needs to know of the request an answer is for.
pub(super) struct Reader<'a> {
    pub(super) method: &'a Method,
    pub(super) slot: Option<&'a Slot>,
    pub(super) write_timeout: Duration,
}

/// `response`, paced and counted when its body is whole and large (see the module's notes).
pub(super) async fn paced(response: Response, budget: &Budget, reader: Reader<'_>) -> Response {
    let Some(size) = response.body().size_hint().exact() else {
        return response;
    };
    let Ok(size) = usize::try_from(size) else {
        return response;
    };
    if size < PACED_FROM {
        return response;
    }
    let held = match budget.hold(size) {
        Ok(held) => held,
        Err(Overdrawn::Busy { max }) if reader.method == Method::GET => return busy_text(max),
        Err(_) => Held::default(),
    };
    let (parts, body) = response.into_parts();
    // A body of exact size is in memory already: this only takes its bytes.
    let Ok(bytes) = axum::body::to_bytes(body, size).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let taken = Taken {
        since: tokio::time::Instant::now(),
        last: Arc::new(AtomicU64::new(0)),
    };
    let done = CancellationToken::new();
    if let Some(slot) = reader.slot {
        watch(
            taken.clone(),
            done.clone(),
            slot.abort.clone(),
            reader.write_timeout,
        );
    }
    let body = Paced {
        rest: bytes,
        taken,
        _held: held,
        _done: done.drop_guard(),
    };
    Response::from_parts(parts, Body::new(body))
}

/// When the last piece was taken: milliseconds after `since`.
#[derive(Clone)]
struct Taken {
    since: tokio::time::Instant,
    last: Arc<AtomicU64>,
}

impl Taken {
    fn now(&self) {
        let millis = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(millis, Ordering::Relaxed);
    }

    fn last(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

/// Closes the connection (cancels `abort`) when no piece is taken for `within`; ends when the
/// answer is sent or dropped (`done`).
fn watch(taken: Taken, done: CancellationToken, abort: CancellationToken, within: Duration) {
    tokio::spawn(async move {
        loop {
            let last = taken.last();
            let due = taken.since + Duration::from_millis(last) + within;
            tokio::select! {
                () = done.cancelled() => return,
                () = tokio::time::sleep_until(due) => {}
            }
            if taken.last() == last {
                tracing::warn!(
                    waited_secs = within.as_secs(),
                    "a client read none of a whole answer for \
                     AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS: its connection is closed"
                );
                abort.cancel();
                return;
            }
        }
    });
}

/// A whole answer handed out in pieces, holding its share of the buffer until it is sent.
struct Paced {
    rest: Bytes,
    /// When the last piece was handed out.
    taken: Taken,
    _held: Held,
    /// Ends the watch when the answer is sent or dropped.
    _done: DropGuard,
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            return Poll::Ready(None);
        }
        let piece = this.rest.split_to(this.rest.len().min(PIECE));
        this.taken.now();
        Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_large_get_holds_its_bytes_until_sent_and_is_refused_when_none_are_free() {
        let budget = Budget::new(3 * PACED_FROM, 1000);
        let get = Method::GET;
        let reader = || Reader {
            method: &get,
            slot: None,
            write_timeout: Duration::from_secs(1),
        };
        let big = || Response::new(Body::from(vec![b'x'; 2 * PACED_FROM]));
        let first = paced(big(), &budget, reader()).await;
        assert_eq!(first.status(), 200);
        // The first holds two thirds of the buffer: a second is refused.
        let second = paced(big(), &budget, reader()).await;
        assert_eq!(second.status(), 503);
        // Read whole, in pieces, and then the bytes are free again.
        let body = axum::body::to_bytes(first.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(body.len(), 2 * PACED_FROM);
        assert_eq!(paced(big(), &budget, reader()).await.status(), 200);
        // A small answer is not counted.
        let small = Response::new(Body::from("ok"));
        assert_eq!(paced(small, &budget, reader()).await.status(), 200);
    }
}
