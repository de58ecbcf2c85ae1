//! Request bodies, read whole before a route sees them: a declared length over the limit is 413
//! before a byte is read, a body that grows past it is 413, one that stops arriving for the body
//! timeout is 408, one that takes longer than the deadline in all is 408, and a malformed one (a
//! bad chunk size) is 400. The bytes are counted against a buffer all connections share, with
//! what parsing them will build (an estimate from the JSON values the body holds, whose number
//! is limited: 413 past it) and the copy the call keeps; past the buffer, 503 with Retry-After.
//! The share is held until the answer's head is out, and by a handler that keeps a [`Held`]
//! (a streamed answer) until its call ends. A refusal sent while the
//! client may still be writing lingers: the rest is read and dropped for a while, so that the
//! client reads the answer rather than a broken pipe.
//!
//! (tower-http's `RequestBodyLimitLayer` and `TimeoutLayer` do not fit: the first neither
//! lingers nor shares a budget, the second would bound the whole call, which may stream for
//! minutes.)

use super::settings::HttpSettings;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a refused body is read and dropped.
const LINGER: Duration = Duration::from_secs(2);

/// The body limits, and the buffer bodies share with what calls hold.
pub(super) struct Limits {
    max_body: usize,
    timeout: Duration,
    deadline: Duration,
    pub(super) budget: Arc<Budget>,
}

/// The memory requests may make the server hold at once, across every connection, counted in
/// bytes (one permit a byte): request bodies and what parsing them builds, and besides them
/// what a call loads or keeps that its body did not carry (a stored conversation it continues,
/// a WebSocket message, a connection's last response) and whole answers waiting for their
/// readers. And the most JSON values one request may hold, from its body and what it loads.
pub(super) struct Budget {
    free: Arc<Semaphore>,
    max_buffer: usize,
    max_values: usize,
}

/// Why a share of the [`Budget`] was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Overdrawn {
    /// The buffer is held whole by others: retry shortly (503).
    Busy { max: usize },
    /// One request would hold more JSON values than it may (413).
    Values { values: usize, max: usize },
}

impl Overdrawn {
    /// The refusal as the APIs write errors.
    pub(super) fn api_error(self, what: &str) -> crate::api::ApiError {
        use crate::api::{ApiError, ErrorKind};
        match self {
            Overdrawn::Busy { max } => ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    503,
                    ErrorKind::Overloaded,
                    format!(
                        "busy: {what} would take more memory than is free; requests and the \
                         data their calls hold already take {max} bytes, the most this server \
                         holds (AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES); retry shortly"
                    ),
                )
            },
            Overdrawn::Values { values, max } => ApiError::new(
                413,
                ErrorKind::InvalidRequest,
                format!(
                    "payload too large: {what} holds about {values} JSON values with the \
                     request, and a request may hold at most {max} \
                     (AGENT_AS_MODEL_MAX_JSON_VALUES)"
                ),
            )
            .with_code("payload_too_large"),
        }
    }
}

/// Bytes of the [`Budget`] held, and the JSON values they count (what a body holds, then what
/// its call loads besides); given back when the last clone is dropped.
#[derive(Clone, Default)]
pub(super) struct Held {
    shares: Vec<Arc<OwnedSemaphorePermit>>,
    values: usize,
}

impl Held {
    /// `self` holding `other`'s shares too.
    pub(super) fn join(&mut self, other: Held) {
        self.shares.extend(other.shares);
        self.values = self.values.saturating_add(other.values);
    }

    /// The JSON values counted.
    pub(super) fn values(&self) -> usize {
        self.values
    }
}

impl Budget {
    pub(super) fn new(max_buffer: usize, max_values: usize) -> Budget {
        Budget {
            free: Arc::new(Semaphore::new(max_buffer.min(Semaphore::MAX_PERMITS))),
            max_buffer,
            max_values,
        }
    }

    /// `bytes` of the buffer, or `Busy` when it has no room.
    pub(super) fn hold(&self, bytes: usize) -> Result<Held, Overdrawn> {
        let mut held = None;
        if !take(&self.free, &mut held, bytes) {
            return Err(Overdrawn::Busy {
                max: self.max_buffer,
            });
        }
        Ok(Held {
            shares: held.map(Arc::new).into_iter().collect(),
            values: 0,
        })
    }

    /// What holding the parsed form of the JSON text `text` takes, beside a request that
    /// already counts `values` JSON values: the text itself, its values (past the cap, `Values`)
    /// and `copies` copies of its text, as a body is counted.
    pub(super) fn hold_json(
        &self,
        text: &[u8],
        copies: usize,
        values: usize,
    ) -> Result<Held, Overdrawn> {
        let own = json_values(text);
        let all = own.saturating_add(values);
        if all > self.max_values {
            return Err(Overdrawn::Values {
                values: all,
                max: self.max_values,
            });
        }
        let bytes = own
            .saturating_mul(VALUE_BYTES)
            .saturating_add(text.len().saturating_mul(copies.saturating_add(1)));
        let mut held = self.hold(bytes)?;
        held.values = own;
        Ok(held)
    }
}

/// Bytes one parsed JSON value (or an object member's name) is held to take: serde_json's
/// `Value` is 32 bytes, in arrays that grow by doubling, and a member's name is a `String` of
/// its own.
const VALUE_BYTES: usize = 64;

/// Copies of a body's text a call holds while it is answered, besides the body itself: the
/// parsed call, the request made for the model, and that request as sent (a streamed call of
/// 16 MB of text holds 60 MB while its provider answers).
pub(super) const CALL_COPIES: usize = 4;

impl Limits {
    pub(super) fn new(settings: &HttpSettings) -> Limits {
        Limits {
            max_body: settings.max_body,
            timeout: settings.body_timeout,
            deadline: settings.body_deadline,
            budget: Arc::new(Budget::new(
                settings.max_body_buffer,
                settings.max_json_values,
            )),
        }
    }
}

/// Middleware: reads the body whole within the limits, then hands the request on with the body
/// in memory, holding its share of the buffer until the answer's head is out.
pub(super) async fn read_whole(
    State(limits): State<Arc<Limits>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body as u64) {
        linger(body);
        return too_large(&limits);
    }
    let (whole, mut held) = match tokio::time::timeout(limits.deadline, read(body, &limits)).await {
        Ok(Ok(read)) => read,
        Ok(Err(refusal)) => return refusal,
        Err(_) => {
            let text = format!(
                "request timeout: the body took longer than {} s to arrive \
                 (AGENT_AS_MODEL_BODY_DEADLINE_SECS)\n",
                limits.deadline.as_secs()
            );
            return (StatusCode::REQUEST_TIMEOUT, text).into_response();
        }
    };
    // What parsing builds and the call's copy of it are held as well.
    let values = json_values(&whole);
    if values > limits.budget.max_values {
        return too_many_values(&limits, values);
    }
    let parsed = values
        .saturating_mul(VALUE_BYTES)
        .saturating_add(whole.len().saturating_mul(CALL_COPIES));
    if !take(&limits.budget.free, &mut held, parsed) {
        return busy(&limits);
    }
    let held = Held {
        shares: held.map(Arc::new).into_iter().collect(),
        values,
    };
    let mut request = Request::from_parts(parts, Body::from(whole));
    request.extensions_mut().insert(held);
    request.extensions_mut().insert(limits.budget.clone());
    next.run(request).await
}

/// An upper bound on the JSON values (and object members' names) a body parses to, in one pass
/// over its bytes: every value but the first follows a `[`, `{`, `,` or `:` outside a string.
pub(super) fn json_values(bytes: &[u8]) -> usize {
    let mut values = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b'[' | b'{' | b',' | b':') {
            values += 1;
        }
    }
    values
}

async fn read(
    mut body: Body,
    limits: &Limits,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Response> {
    let mut whole = BytesMut::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    loop {
        let frame = match tokio::time::timeout(limits.timeout, body.frame()).await {
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    "request timeout: the body stopped arriving (AGENT_AS_MODEL_BODY_TIMEOUT_SECS)\n",
                )
                    .into_response());
            }
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(
                    (StatusCode::BAD_REQUEST, "bad request: malformed body\n").into_response()
                );
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if whole.len().saturating_add(data.len()) > limits.max_body {
            linger(body);
            return Err(too_large(limits));
        }
        if !take(&limits.budget.free, &mut held, data.len()) {
            linger(body);
            return Err(busy(limits));
        }
        whole.extend_from_slice(&data);
    }
    Ok((whole.freeze(), held))
}

/// Takes `n` more bytes of the shared buffer into `held`; `false` when it has no room.
fn take(free: &Arc<Semaphore>, held: &mut Option<OwnedSemaphorePermit>, n: usize) -> bool {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    let Ok(permit) = free.clone().try_acquire_many_owned(n) else {
        return false;
    };
    match held.as_mut() {
        Some(h) => h.merge(permit),
        None => *held = Some(permit),
    }
    true
}

/// Reads and drops what is left of a body, for [`LINGER`] at most, holding none of it.
pub(super) fn linger(mut body: Body) {
    tokio::spawn(async move {
        let drain = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(LINGER, drain).await;
    });
}

/// 413: the body is over the request limit.
fn too_large(limits: &Limits) -> Response {
    let text = format!(
        "payload too large: a request body may hold at most {} bytes \
         (AGENT_AS_MODEL_MAX_REQUEST_BYTES)\n",
        limits.max_body
    );
    (StatusCode::PAYLOAD_TOO_LARGE, text).into_response()
}

/// 413: the body holds more JSON values than one request may.
fn too_many_values(limits: &Limits, values: usize) -> Response {
    let text = format!(
        "payload too large: the body holds about {values} JSON values, and a request may hold at \
         most {} (AGENT_AS_MODEL_MAX_JSON_VALUES)\n",
        limits.budget.max_values
    );
    (StatusCode::PAYLOAD_TOO_LARGE, text).into_response()
}

/// 503 with Retry-After: the bodies being read hold the whole shared buffer.
fn busy(limits: &Limits) -> Response {
    busy_text(limits.budget.max_buffer)
}

/// 503 with Retry-After, in plain text: the buffer of `max` bytes is held whole.
pub(super) fn busy_text(max: usize) -> Response {
    let text = format!(
        "busy: request bodies and the calls they make already hold {max} bytes, the most this \
         server buffers (AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES); retry shortly\n"
    );
    let retry = [(header::RETRY_AFTER, HeaderValue::from_static("1"))];
    (StatusCode::SERVICE_UNAVAILABLE, retry, text).into_response()
}

#[cfg(test)]
mod tests {
    use super::json_values;

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(json_values(br#"{"a":1,"b":[2,3]}"#), 7);
        assert_eq!(json_values(br#"{"text":"a, b: [c] {d}"}"#), 3);
        assert_eq!(json_values(br#"{"text":"quote \", then, commas"}"#), 3);
        assert_eq!(json_values(b"[0,0,0,0]"), 5);
    }
}
