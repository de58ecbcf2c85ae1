//! The Responses API's WebSocket mode, as the Open Responses specification has it: `GET
//! /v1/responses` upgraded to a WebSocket, on which the client sends `response.create`
//! messages (a create body with `"type": "response.create"`), and each is answered as `POST
//! /v1/responses` with `stream: true` is (the same cap on calls in flight, the same parsing,
//! encoder and store): its `response.*` events are sent as JSON text messages, one response at
//! a time. A create refused before its response begins is answered by one `error` message with
//! the HTTP `status` it would have had (the specification's `WebSocketErrorEvent`); the
//! connection stays open for the next create.
//!
//! The connection keeps its last response, `store: false` or not, so that a next create naming
//! it by `previous_response_id` continues it with only the new input; on another connection (a
//! reconnect) only stored responses are found (`previous_response_not_found` otherwise). A
//! create that names a response and fails evicts that response from the connection (unless it
//! was only refused for want of room: 429, 503).
//!
//! Bounds: a message is held to the request body limit (a larger one closes the connection
//! with 1009), and while it is answered it holds its bytes, and what parsing it takes, of the
//! buffer request bodies share, its JSON values held to their cap, as a body's are (refused
//! with an `error` message naming the setting); the last response is kept as its JSON text,
//! holding its bytes of that buffer too (not kept when the buffer is full); a create sent while a response runs waits for it (one is held, and the
//! connection is not read further until it is taken); a client that reads nothing for the
//! stream write timeout (`AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS`) has its response
//! cancelled and its connection closed, as one that goes away does; a connection idle for
//! [`IDLE`] (`AGENT_AS_MODEL_WEBSOCKET_IDLE_SECS`; pings do not reset it) is closed, and one open for [`LIFETIME`] is told `websocket_connection_limit_reached`
//! at its next create and closed. A WebSocket keeps its connection's place under the connection
//! cap, and is closed when the server stops.

use super::api::{
    Cached, Holding, Loads, ResponsesTurn, error, read_object, responses_turn, stream_answer,
};
use super::body::{Budget, CALL_COPIES, Held};
use super::listen::Slot;
use crate::api::responses::{Resource, Stored, Streamed};
use crate::api::{Admitted, Api, ApiError, ErrorKind, responses};
use crate::metrics::Record;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A connection that sends nothing for this long between responses is closed, unless the
/// server's limits say otherwise (`AGENT_AS_MODEL_WEBSOCKET_IDLE_SECS`).
const IDLE: Duration = Duration::from_secs(15 * 60);

/// The longest a connection lasts (OpenAI's limit): past it, the next create is refused with
/// `websocket_connection_limit_reached` and the connection closed.
const LIFETIME: Duration = Duration::from_secs(60 * 60);

/// Events of a response waiting to be sent; when they are this many, the response waits for
/// the client (for the stream write timeout, then it is cancelled).
const STREAM_BUFFER: usize = 64;

/// The longest a closing message is given to go out.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The largest message when the server's limits are not in the request (they always are).
const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The WebSocket's limits, in every request's extensions.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    /// The largest message (and frame), in bytes: the request body limit.
    pub(super) max_message: usize,
    /// How long the connection may wait between creates.
    pub(super) idle: Duration,
}

/// `GET /v1/responses`: a WebSocket upgrade opens WebSocket mode; a plain GET is a 405 (POST
/// creates a response), and a broken upgrade a 400 saying what is wrong with it.
pub(super) async fn upgrade(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    limits: Option<Extension<Limits>>,
    slot: Option<Extension<Slot>>,
    Extension(budget): Extension<Arc<Budget>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) if headers.contains_key(header::UPGRADE) => {
            return rejection.into_response();
        }
        Err(_) => {
            let e = ApiError::new(
                405,
                ErrorKind::InvalidRequest,
                "GET /v1/responses opens the Responses API's WebSocket mode (a WebSocket \
                 upgrade); POST /v1/responses creates a response",
            );
            let mut response = error(responses::DIALECT, &e, &[]);
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            return response;
        }
    };
    let (max, idle) = limits.map_or((DEFAULT_MAX_MESSAGE, IDLE), |Extension(l)| {
        (l.max_message, l.idle)
    });
    let slot = slot.map(|Extension(slot)| slot);
    ws.max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| async move {
            let stop = slot.as_ref().map(|s| s.stop.clone()).unwrap_or_default();
            let mut connection = Connection {
                api,
                budget,
                idle,
                socket,
                last: None,
                held: None,
                opened: Instant::now(),
                stop,
            };
            connection.serve().await;
            // The connection's place under the cap is given back here.
            drop(slot);
        })
}

/// One WebSocket in Responses mode.
struct Connection {
    api: Arc<Api>,
    /// The buffer requests share: each message, and the last response kept here, hold their
    /// bytes of it.
    budget: Arc<Budget>,
    /// How long it may wait between creates.
    idle: Duration,
    socket: WebSocket,
    /// The last response made here, with the input it answered, as its stored JSON.
    last: Option<Cached>,
    /// A message received while a response ran, answered next.
    held: Option<Message>,
    opened: Instant,
    /// Cancelled when the server stops.
    stop: CancellationToken,
}

/// Whether a create that fails with `e` evicts the response it continued: every failure but
/// a refusal for want of room.
fn evicts(e: &ApiError) -> bool {
    !matches!(e.status, 429 | 503)
}

/// The `event:` name and `data:` text of one server-sent event frame.
fn event_of(frame: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(frame).ok()?;
    let (mut kind, mut data) = (None, None);
    for line in text.lines() {
        if let Some(k) = line.strip_prefix("event: ") {
            kind = Some(k);
        } else if let Some(d) = line.strip_prefix("data: ") {
            data = Some(d);
        }
    }
    Some((kind?, data?))
}

/// The response a terminal event (`response.completed`, `.incomplete`, `.failed`) carries.
fn response_of(data: &str) -> Option<Resource> {
    #[derive(serde::Deserialize)]
    struct Terminal {
        response: Resource,
    }
    serde_json::from_str::<Terminal>(data)
        .ok()
        .map(|t| t.response)
}

/// The `error` message for a create refused before its response began.
fn error_message(e: &ApiError) -> String {
    let kind = e.openai_type();
    let mut error = json!({
        "type": kind,
        "code": e.code.as_deref().unwrap_or(kind),
        "message": e.message,
        "param": e.param,
    });
    if let Some(secs) = e.retry_after
        && let Some(error) = error.as_object_mut()
    {
        error.insert("headers".into(), json!({"retry-after": secs.to_string()}));
    }
    // `sequence_number` too: a client that reads it as a stream's error event finds it valid.
    json!({"type": "error", "status": e.status, "sequence_number": 0, "error": error}).to_string()
}

/// Checks that `map` is a `response.create` message, and takes from it what a create body
/// does not hold here: its `type`, and HTTP's `stream` and `stream_options`.
fn create_body(map: &mut Map<String, Value>) -> Result<(), ApiError> {
    if map.get("type").and_then(Value::as_str) != Some("response.create") {
        let e = ApiError {
            param: Some("type".into()),
            ..ApiError::invalid(
                "`type`: expected \"response.create\", the message a client sends in \
                 WebSocket mode",
            )
        };
        return Err(e);
    }
    map.remove("type");
    // Every response is streamed here: HTTP's `stream` and `stream_options` say nothing.
    map.remove("stream");
    map.remove("stream_options");
    Ok(())
}

/// The error refusing a create whose answer did not begin: the one it ended with, or a 500
/// when it ended without saying; `None` when it began.
fn head_refusal(head: Result<Result<(), ApiError>, oneshot::error::RecvError>) -> Option<ApiError> {
    match head {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some(ApiError::new(
            500,
            ErrorKind::Api,
            "the answer ended before it began",
        )),
    }
}

impl Connection {
    /// Answers creates, one at a time, until the connection is over.
    async fn serve(&mut self) {
        loop {
            let message = match self.held.take() {
                Some(message) => message,
                None => match self.next().await {
                    Some(message) => message,
                    None => return,
                },
            };
            if self.opened.elapsed() >= LIFETIME {
                let e = ApiError::invalid(format!(
                    "this connection has been open {} minutes, the longest one lasts here: open \
                     a new one (a store: false conversation continues there with its whole \
                     input)",
                    LIFETIME.as_secs() / 60
                ))
                .with_code("websocket_connection_limit_reached");
                self.refuse(&e).await;
                self.close(1000, "connection limit reached").await;
                return;
            }
            if !self.create(message).await {
                return;
            }
        }
    }

    /// The next message to answer; `None` when the connection is over (closed, broken, idle,
    /// or the server stopping).
    async fn next(&mut self) -> Option<Message> {
        // Pings and pongs keep a connection alive but not idle for longer: the deadline is set
        // once, when the wait for a create begins.
        let deadline = tokio::time::Instant::now() + self.idle;
        loop {
            let received = tokio::select! {
                received = tokio::time::timeout_at(deadline, self.socket.recv()) => received,
                () = self.stop.cancelled() => {
                    self.close(1001, "server stopping").await;
                    return None;
                }
            };
            match received {
                Err(_) => {
                    self.close(1000, "idle").await;
                    return None;
                }
                Ok(None | Some(Ok(Message::Close(_)))) => return None,
                Ok(Some(Err(e))) => {
                    self.broken(&e).await;
                    return None;
                }
                Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
                Ok(Some(Ok(message))) => return Some(message),
            }
        }
    }

    /// Answers one message: a create's response, or the error refusing it. `false` when the
    /// connection is over.
    async fn create(&mut self, message: Message) -> bool {
        let mut record = self.api.record(responses::DIALECT);
        let text = match message {
            Message::Text(text) => Bytes::from(text),
            _ => {
                let e = ApiError::invalid(
                    "send each `response.create` as a text message holding a JSON object",
                );
                return self.refuse_call(&mut record, &e).await;
            }
        };
        // The message, and what parsing it and the call's copies take, are held against the
        // buffer requests share, and its values against their cap, as a body's are.
        let held = match self.budget.hold_json(&text, CALL_COPIES, 0) {
            Ok(held) => held,
            Err(overdrawn) => {
                let e = overdrawn.api_error("this message");
                return self.refuse_call(&mut record, &e).await;
            }
        };
        let mut map = match read_object(&text).await {
            Ok(map) => map,
            Err(e) => return self.refuse_call(&mut record, &e).await,
        };
        drop(text);
        if let Err(e) = create_body(&mut map) {
            return self.refuse_call(&mut record, &e).await;
        }
        let previous = map
            .get("previous_response_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let admitted = match self.api.admit() {
            Ok(admitted) => admitted,
            Err(e) => return self.refuse_call(&mut record, &e).await,
        };
        let loads = Loads {
            budget: &self.budget,
            values: held.values(),
        };
        match responses_turn(&self.api, loads, map, self.last.as_ref()).await {
            Ok(mut turn) => {
                let record = record.hand_on();
                turn.held.join(held);
                self.run(turn, admitted, previous.as_deref(), record).await
            }
            Err(refused) => {
                self.failed(previous.as_deref(), &refused.error);
                self.refuse_call(&mut record, &refused.error).await
            }
        }
    }

    /// Refuses a create before its response began, telling its record the status.
    async fn refuse_call(&mut self, record: &mut Record, e: &ApiError) -> bool {
        record.status(e.status);
        self.refuse(e).await
    }

    /// Streams a response's events to the client, reading the connection meanwhile (a close
    /// cancels the response; a next message is held). `false` when the connection is over.
    async fn run(
        &mut self,
        turn: ResponsesTurn,
        admitted: Admitted,
        previous: Option<&str>,
        record: Record,
    ) -> bool {
        let ResponsesTurn {
            prepared,
            call,
            encoder,
            keep,
            mut input,
            held,
            model,
        } = turn;
        if !prepared.warnings.is_empty() {
            tracing::info!(
                warnings = %prepared.warnings.join("; "),
                "a WebSocket response was made with warnings (no header carries them here)"
            );
        }
        drop(prepared);
        let encode = Box::new(Streamed::new(encoder, keep));
        // The message's share (and the loaded conversation's) is held here, and given back
        // before the response is kept.
        let mut share = Some(held);
        let (mut out, mut began) = self.spawn_answer(encode, call, admitted, record);
        let mut started = false;
        loop {
            tokio::select! {
                head = &mut began, if !started => match head_refusal(head) {
                    None => started = true,
                    Some(e) => {
                        self.failed(previous, &e);
                        return self.refuse(&e).await;
                    }
                },
                frame = out.recv(), if started => {
                    let Some(frame) = frame else {
                        return true;
                    };
                    let asked = model.as_deref();
                    if !self.relay(&frame, &mut input, previous, asked, &mut share).await {
                        return false;
                    }
                }
                received = self.socket.recv(), if self.held.is_none() => match received {
                    None | Some(Ok(Message::Close(_))) => return false,
                    Some(Err(e)) => {
                        self.broken(&e).await;
                        return false;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(message)) => self.held = Some(message),
                },
            }
        }
    }

    /// The answer made on a task of its own, as a streamed POST's is: its frames, and whether
    /// it began (or the error known before it did). Dropping the frames' receiver (the client
    /// gone, or reading nothing) cancels it.
    fn spawn_answer(
        &self,
        encode: Box<Streamed>,
        call: crate::service::Parsed,
        admitted: Admitted,
        record: Record,
    ) -> (
        mpsc::Receiver<Bytes>,
        oneshot::Receiver<Result<(), ApiError>>,
    ) {
        let holding = Holding {
            _call: admitted,
            _body: None,
        };
        let (frames, out) = mpsc::channel::<Bytes>(STREAM_BUFFER);
        let (head, began) = oneshot::channel();
        let api = Arc::clone(&self.api);
        tokio::spawn(async move {
            stream_answer(api, responses::DIALECT, encode, call, frames, head, record).await;
            drop(holding);
        });
        (out, began)
    }

    /// Sends one event of a response, keeping the response when the event is its last.
    /// `false` when the client is gone or reads nothing.
    async fn relay(
        &mut self,
        frame: &[u8],
        input: &mut Vec<Value>,
        previous: Option<&str>,
        asked_model: Option<&str>,
        share: &mut Option<Held>,
    ) -> bool {
        let Some((kind, data)) = event_of(frame) else {
            return true;
        };
        match kind {
            "response.completed" | "response.incomplete" => {
                // The create's share, and the last response's, are given back before this
                // one's is taken.
                *share = None;
                self.last = None;
                if let Some(response) = response_of(data) {
                    self.last = self.keep(Stored {
                        response,
                        input: std::mem::take(input),
                        asked_model: asked_model.map(str::to_owned),
                    });
                }
            }
            "response.failed" => self.evict(previous),
            _ => {}
        }
        self.send(Message::Text(data.into())).await
    }

    /// `stored` as the connection's last response: its JSON, holding its bytes of the buffer
    /// requests share. When the buffer has no room it is not kept: a next create continues it
    /// from the store, when it was stored.
    fn keep(&self, stored: Stored) -> Option<Cached> {
        let text = serde_json::to_string(&stored).ok()?;
        match self.budget.hold(text.len()) {
            Ok(held) => Some(Cached {
                id: stored.response.id,
                text: Arc::from(text),
                _held: held,
            }),
            Err(_) => {
                tracing::warn!(
                    bytes = text.len(),
                    "a WebSocket connection's last response is not kept in memory: the buffer \
                     requests share is full (AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES)"
                );
                None
            }
        }
    }

    /// A create naming `previous` failed with `e`.
    fn failed(&mut self, previous: Option<&str>, e: &ApiError) {
        if evicts(e) {
            self.evict(previous);
        }
    }

    /// Forgets the last response when it is `previous`.
    fn evict(&mut self, previous: Option<&str>) {
        if previous.is_some() && self.last.as_ref().map(|s| s.id.as_str()) == previous {
            self.last = None;
        }
    }

    /// Sends the `error` message refusing a create. `false` when the client is gone or reads
    /// nothing.
    async fn refuse(&mut self, e: &ApiError) -> bool {
        self.send(Message::Text(error_message(e).into())).await
    }

    /// Sends `message`, waiting at most the stream write timeout for the client to take it.
    async fn send(&mut self, message: Message) -> bool {
        let within = self.api.stream_write_timeout;
        match tokio::time::timeout(within, self.socket.send(message)).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(
                    waited_secs = within.as_secs(),
                    "a WebSocket client read nothing for AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS: \
                     its response is cancelled and its connection closed"
                );
                false
            }
        }
    }

    /// The connection failed with `e`: a message over the limit is told so (1009).
    async fn broken(&mut self, e: &axum::Error) {
        if e.to_string().contains("Message too long") {
            self.close(
                1009,
                "message over the request size limit (AGENT_AS_MODEL_MAX_REQUEST_BYTES)",
            )
            .await;
        }
    }

    /// Closes the connection with `code` and `reason`, if the client takes it in time.
    async fn close(&mut self, code: u16, reason: &str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let closing = self.socket.send(Message::Close(Some(frame)));
        let _ = tokio::time::timeout(CLOSE_WAIT, closing).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_frame_is_read_back_as_its_name_and_data() {
        let frame = b"event: response.created\ndata: {\"type\":\"response.created\"}\n\n";
        assert_eq!(
            event_of(frame),
            Some(("response.created", "{\"type\":\"response.created\"}"))
        );
        assert_eq!(event_of(b": ping\n\n"), None);
    }

    #[test]
    fn a_refusal_names_its_status_and_code_and_a_busy_server_keeps_the_chain() {
        let e = ApiError::invalid("gone").with_code("previous_response_not_found");
        let v: Value = serde_json::from_str(&error_message(&e)).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["status"], 400);
        assert_eq!(v["error"]["code"], "previous_response_not_found");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let busy = ApiError {
            retry_after: Some(1),
            ..ApiError::new(429, ErrorKind::RateLimit, "busy")
        };
        let v: Value = serde_json::from_str(&error_message(&busy)).unwrap();
        assert_eq!(v["error"]["code"], v["error"]["type"]);
        assert_eq!(v["error"]["headers"]["retry-after"], "1");
        assert!(evicts(&e));
        assert!(!evicts(&busy));
    }
}
