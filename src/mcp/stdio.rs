//! The stdio transport: an rmcp `Transport` that frames and checks lines itself instead of the
//! SDK's line transport.
//!
//! Every line from the client is checked before the SDK sees it, so that each request gets
//! exactly one well-formed JSON-RPC reply and no line can make the server build gigabytes:
//!
//! - a line longer than the limit is never held: its first bytes are kept to find its `id`,
//!   the rest is skipped, and it is answered with `-32600` (`id` from the head, else `null`);
//! - JSON that does not parse (invalid UTF-8, a lone surrogate, nesting deeper than 128, two
//!   values on a line, truncation) is answered with `-32700` and `"id": null`, checked with a
//!   pass that builds nothing;
//! - a batch or a non-object is `-32600`; a `tools/call` whose `name` is not a string or whose
//!   `arguments` is not an object is `-32602`; a second request with the id of one still in
//!   flight is refused; beyond the cap of calls in flight a call is refused with "retry";
//! - notifications are never answered: a malformed one is dropped, and one that arrives before
//!   any request (2026-07-28 has no handshake) is dropped instead of ending the session;
//! - every error the SDK writes gets an `id` member.
//!
//! Replies go to stdout through one writer thread, which writes every line queued while it was
//! busy in one system call. When stdin closes, calls still in flight are cancelled, what is
//! queued is written, and the process exits promptly.

use crate::config::Config;
use crate::error::clip;
use crate::mcp::server::OnDone;
use rmcp::ServiceExt;
use rmcp::model::{InputRequest, JsonRpcMessage, ServerRequest, ServerResult};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::future::Future;
use std::io;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// Bytes of an oversized line kept to find its id.
const HEAD_BYTES: usize = 4096;
/// How long calls in flight get to finish after stdin closes.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

/// The framing limits.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    /// Longest line accepted, in bytes.
    pub max_line: usize,
    /// Most `tools/call` requests in flight at once.
    pub max_calls: usize,
}

impl Framing {
    /// The stdio framing limits: a line holds a call's arguments, or a host's answer with
    /// media in it, plus the envelope.
    pub fn from_config(config: &Config) -> Framing {
        let l = &config.limits;
        let media_base64 = l.max_media_bytes.saturating_mul(4) / 3;
        Framing {
            max_line: l
                .max_request_bytes
                .max(media_base64)
                .saturating_add(1024 * 1024),
            max_calls: usize::try_from(config.max_calls_in_flight).unwrap_or(usize::MAX),
        }
    }
}

/// The JSON type of a value, read without building it; every string in it is decoded, so
/// invalid escapes (a lone surrogate) are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    String,
    Other,
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Kind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Kind, A::Error> {
                while m.next_entry::<Kind, Kind>()?.is_some() {}
                Ok(Kind::Object)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Kind, A::Error> {
                while s.next_element::<Kind>()?.is_some() {}
                Ok(Kind::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Kind, E> {
                Ok(Kind::String)
            }
            fn visit_unit<E>(self) -> Result<Kind, E> {
                Ok(Kind::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// What the framer reads of a message: everything but the bulk.
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, deserialize_with = "object_params")]
    params: Option<Params>,
    /// Whether the member is there at all (`"result": null` is a result, if a bad one).
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// `params` must be an object (MCP never sends positional params) or absent/null.
fn object_params<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<Params>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Params>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("params as an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
            Params::deserialize(de::value::MapAccessDeserializer::new(m)).map(Some)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// Only the id of a message that is otherwise malformed.
#[derive(Debug, Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<Value>,
}

fn present<'de, D: de::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Kind::deserialize(d).map(|_| true)
}

#[derive(Debug, Deserialize)]
struct Params {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    arguments: Option<Kind>,
    #[serde(default, rename = "_meta")]
    meta: Option<Kind>,
    /// Of a 2026-07-28 retry.
    #[serde(default, rename = "requestState")]
    request_state: Option<Kind>,
    #[serde(default, rename = "inputResponses")]
    input_responses: Option<Kind>,
    /// Of `notifications/cancelled`.
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
}

/// What to do with one line.
#[derive(Debug, PartialEq)]
enum Verdict {
    Forward,
    Drop,
    Reply(Value),
    /// Forward this message instead of the line.
    Instead(Value),
}

fn error(id: Option<Value>, code: i64, message: String) -> Verdict {
    Verdict::Reply(json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null),
                          "error": {"code": code, "message": message}}))
}

/// Ids of requests forwarded and not yet answered, and how many of them are tool calls.
#[derive(Default)]
struct InFlight {
    ids: HashSet<String>,
    calls: HashSet<String>,
    /// Whether the SDK's lifecycle has begun (see `classify_envelope`).
    seen_request: bool,
    /// Told when the last request in flight is over (the end of input waits for it).
    idle: Arc<tokio::sync::Notify>,
}

fn parse_error(e: &serde_json::Error) -> Verdict {
    error(
        None,
        -32700,
        format!("parse error: the line is not one JSON value ({e})"),
    )
}

/// Decides what to do with one complete line.
fn classify(line: &[u8], state: &Mutex<InFlight>, framing: Framing) -> Verdict {
    if let Err(e) = serde_json::from_slice::<Kind>(line) {
        return parse_error(&e);
    }
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return error(
            None,
            -32600,
            "invalid request: expected one JSON-RPC object per line (batches are not supported)"
                .into(),
        );
    }
    let env: Envelope = match serde_json::from_slice(line) {
        Ok(e) => e,
        Err(e) => {
            let id = serde_json::from_slice::<IdOnly>(line)
                .ok()
                .and_then(|m| m.id)
                .filter(|id| id.is_string() || id.is_number());
            return error(id, -32600, format!("invalid request: {e}"));
        }
    };
    let Ok(mut state) = state.lock() else {
        return Verdict::Forward;
    };
    classify_envelope(env, &mut state, framing)
}

fn classify_envelope(env: Envelope, state: &mut InFlight, framing: Framing) -> Verdict {
    let Some(method) = env.method else {
        // A response to one of our requests (sampling), or nonsense.
        return match (&env.id, env.result || env.error) {
            (Some(_), true) => Verdict::Forward,
            _ => error(env.id, -32600, "invalid request: no method".into()),
        };
    };
    let Some(id) = env.id.filter(|id| !id.is_null()) else {
        return classify_notification(&method, env.params.as_ref(), state);
    };
    if !(id.is_string() || id.is_number()) {
        return error(
            None,
            -32600,
            "invalid request: id must be a string or a number".into(),
        );
    }
    let key = id.to_string();
    if state.ids.contains(&key) {
        return error(
            Some(id),
            -32600,
            format!(
                "invalid request: a request with id {} is still in flight",
                clip(&key)
            ),
        );
    }
    if method == "tools/call" {
        if let Some(refused) = check_call(env.params.as_ref(), &id, state, framing) {
            return refused;
        }
        state.calls.insert(key.clone());
    }
    // The SDK picks the lifecycle at `initialize` or at the first request with inline metadata;
    // before that (`server/discover` and `ping` are answered without choosing one) a
    // notification would end its handshake, so notifications are dropped until then.
    let chooses_lifecycle = method == "initialize"
        || (method != "ping"
            && method != "server/discover"
            && env
                .params
                .as_ref()
                .is_some_and(|p| p.meta == Some(Kind::Object)));
    if chooses_lifecycle {
        state.seen_request = true;
    }
    state.ids.insert(key);
    Verdict::Forward
}

/// A notification: never answered. Dropped when malformed, or when no request came yet.
fn classify_notification(method: &str, params: Option<&Params>, state: &mut InFlight) -> Verdict {
    let malformed = params.is_some_and(|p| p.meta.is_some_and(|k| k != Kind::Object));
    if malformed || !state.seen_request {
        return Verdict::Drop;
    }
    // A cancelled request gets no reply: its id is free again. A tool call keeps its slot
    // until its work has stopped (the server says so, see `serve_stdio`).
    if method == "notifications/cancelled"
        && let Some(id) = params.and_then(|p| p.request_id.as_ref())
    {
        state.ids.remove(&id.to_string());
    }
    Verdict::Forward
}

/// A `tools/call`'s name and arguments, and room under the cap; `None` when it may go on.
fn check_call(
    params: Option<&Params>,
    id: &Value,
    state: &InFlight,
    framing: Framing,
) -> Option<Verdict> {
    if let Some(refused) = check_call_params(params, id) {
        return Some(refused);
    }
    let id = Some(id.clone());
    if state.calls.len() >= framing.max_calls {
        return Some(error(
            id,
            -32000,
            format!(
                "server busy: {} tool calls are in flight, the most this server takes at once \
                 (AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT); retry shortly",
                state.calls.len()
            ),
        ));
    }
    None
}

/// A `tools/call`'s members of the wrong JSON type, refused with `-32602` naming the member
/// (the SDK would answer them as an unknown method).
fn check_call_params(params: Option<&Params>, id: &Value) -> Option<Verdict> {
    let wrong = |member: &str, expected: &str| {
        Some(error(
            Some(id.clone()),
            -32602,
            format!("invalid params: `{member}` must be {expected}"),
        ))
    };
    if !params.is_some_and(|p| p.name.as_ref().is_some_and(Value::is_string)) {
        return wrong("name", "a string");
    }
    let params = params?;
    if params.arguments.is_some_and(|k| k != Kind::Object) {
        return wrong("arguments", "an object");
    }
    if params.request_state.is_some_and(|k| k != Kind::String) {
        return wrong(
            "requestState",
            "a string (the requestState of the input_required result, echoed unchanged)",
        );
    }
    if params.input_responses.is_some_and(|k| k != Kind::Object) {
        return wrong(
            "inputResponses",
            "an object keyed by the input requests' keys",
        );
    }
    None
}

/// For a request body over HTTP: a `tools/call` whose members have the wrong JSON type, as the
/// JSON-RPC error to answer it with; `None` for anything else (rmcp answers the rest).
pub(crate) fn refuse_malformed_call(body: &[u8]) -> Option<Value> {
    let env: Envelope = serde_json::from_slice(body).ok()?;
    if env.method.as_deref() != Some("tools/call") {
        return None;
    }
    let id = env.id.filter(|id| id.is_string() || id.is_number())?;
    match check_call_params(env.params.as_ref(), &id) {
        Some(Verdict::Reply(reply)) => Some(reply),
        _ => None,
    }
}

/// What a message is, by its top-level members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sort {
    /// It has a `method`: a request or a notification.
    Request,
    /// No `method`, and a `result` or an `error`: the answer to a request.
    Response,
    /// Neither shows.
    Unknown,
}

/// What the head of an oversized line shows of the message: its top-level `id` (a string or a
/// number) and what it is. Only the top-level members are read, in order, as far as the head
/// goes (a key inside a string or a nested object is not one); the values are skipped without
/// being built, except the id's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Head {
    pub id: Option<Value>,
    pub sort: Sort,
}

impl Head {
    pub(crate) fn of(head: &[u8]) -> Head {
        let mut found = Found::default();
        let mut de = serde_json::Deserializer::from_slice(head);
        // The head ends inside the message, so this always fails at last: what was read of
        // the members before that is kept.
        let _ = de::DeserializeSeed::deserialize(&mut found, &mut de);
        let sort = if found.method {
            Sort::Request
        } else if found.result_or_error {
            Sort::Response
        } else {
            Sort::Unknown
        };
        Head {
            id: found.id.filter(|id| id.is_string() || id.is_number()),
            sort,
        }
    }
}

/// The top-level members seen so far.
#[derive(Default)]
struct Found {
    id: Option<Value>,
    method: bool,
    result_or_error: bool,
}

impl<'de> de::DeserializeSeed<'de> for &mut Found {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for &mut Found {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "id" => self.id = Some(m.next_value::<Value>()?),
                "method" => {
                    self.method = true;
                    m.next_value::<de::IgnoredAny>()?;
                }
                "result" | "error" => {
                    self.result_or_error = true;
                    m.next_value::<de::IgnoredAny>()?;
                }
                _ => {
                    m.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Reads one line of at most `max` bytes. `Ok(None)` at end of input; an oversized line comes
/// back as `Err(head)` after the rest of it has been skipped.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<Result<(), Vec<u8>>>> {
    line.clear();
    let mut oversized = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if oversized {
                Some(Err(std::mem::take(line)))
            } else if line.is_empty() {
                None
            } else {
                Some(Ok(()))
            });
        }
        let (chunk, done, complete) = match buf.iter().position(|b| *b == b'\n') {
            Some(n) => (buf.get(..n).unwrap_or(buf), n + 1, true),
            None => (buf, buf.len(), false),
        };
        if oversized {
            // Only the head is kept.
        } else if line.len() + chunk.len() > max {
            oversized = true;
            let room = HEAD_BYTES.saturating_sub(line.len());
            line.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or(chunk));
        } else {
            line.extend_from_slice(chunk);
        }
        reader.consume(done);
        if complete {
            return Ok(Some(if oversized {
                Err(std::mem::take(line))
            } else {
                Ok(())
            }));
        }
    }
}

/// stdout, shared by the SDK's sends and the framer's own replies: whole lines, in order, written
/// by one thread of its own. Lines queued while it writes go out together in one write, so under
/// load many messages cost one system call, and no call waits on another's write.
#[derive(Clone)]
struct Out(mpsc::Sender<Vec<u8>>);

/// Lines queued for stdout before a sender waits.
const OUT_QUEUE: usize = 256;
/// Most bytes gathered into one write.
const OUT_BATCH: usize = 1 << 20;

impl Out {
    /// Starts the writer thread. The returned receiver reports when it has written everything it
    /// was given and stopped: after the last sender is gone, or after a write fails.
    fn start() -> io::Result<(Out, std::sync::mpsc::Receiver<()>)> {
        let (lines, mut queue) = mpsc::channel::<Vec<u8>>(OUT_QUEUE);
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("stdout".into())
            .spawn(move || {
                let stdout = std::io::stdout();
                let mut stdout = stdout.lock();
                let mut batch = Vec::new();
                while let Some(first) = queue.blocking_recv() {
                    // A line alone is written as it is; lines that queued up behind it are
                    // gathered, up to OUT_BATCH bytes, into a buffer kept no larger than that.
                    let out: &[u8] = match queue.try_recv() {
                        Err(_) => &first,
                        Ok(next) => {
                            batch.clear();
                            batch.extend_from_slice(&first);
                            batch.extend_from_slice(&next);
                            while batch.len() < OUT_BATCH {
                                match queue.try_recv() {
                                    Ok(line) => batch.extend_from_slice(&line),
                                    Err(_) => break,
                                }
                            }
                            &batch
                        }
                    };
                    if let Err(e) = stdout.write_all(out).and_then(|()| stdout.flush()) {
                        tracing::debug!(error = %e, "stdout closed");
                        break;
                    }
                    batch.clear();
                    batch.shrink_to(OUT_BATCH);
                }
                let _ = done.send(());
            })?;
        Ok((Out(lines), stopped))
    }

    async fn line(&self, mut bytes: Vec<u8>) -> io::Result<()> {
        bytes.push(b'\n');
        self.0
            .send(bytes)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed"))
    }
}

/// A request is over (answered, cancelled or refused): its id and its call slot are free.
fn finished(state: &Mutex<InFlight>, key: &str) {
    if let Ok(mut s) = state.lock() {
        s.ids.remove(key);
        s.calls.remove(key);
        if s.ids.is_empty() {
            s.idle.notify_one();
        }
    }
}

/// The JSON line for one of the SDK's messages: an error without an id gets `"id": null`, and
/// sampling temperatures are written as given. Only such messages go through a JSON value;
/// the rest are written straight from their types.
fn wire_line(item: &TxJsonRpcMessage<RoleServer>) -> io::Result<Vec<u8>> {
    let missing_id = matches!(item, JsonRpcMessage::Error(e) if e.id.is_none());
    if !missing_id && !carries_temperature(item) {
        return serde_json::to_vec(item).map_err(io::Error::other);
    }
    let mut message = serde_json::to_value(item).map_err(io::Error::other)?;
    if let (true, Value::Object(m)) = (missing_id, &mut message) {
        m.insert("id".into(), Value::Null);
    }
    exact_temperatures(&mut message);
    serde_json::to_vec(&message).map_err(io::Error::other)
}

/// Whether the message holds a sampling request with a `temperature`: a `sampling/createMessage`
/// request (legacy) or an input-required result that asks for one (2026-07-28).
#[allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.
fn carries_temperature(item: &TxJsonRpcMessage<RoleServer>) -> bool {
    let has = |p: &rmcp::model::CreateMessageRequestParams| p.temperature.is_some();
    match item {
        JsonRpcMessage::Request(r) => matches!(
            &r.request,
            ServerRequest::CreateMessageRequest(c) if has(&c.params)
        ),
        JsonRpcMessage::Response(r) => match &r.result {
            ServerResult::InputRequiredResult(ir) => ir.input_requests.as_ref().is_some_and(|q| {
                q.values()
                    .any(|q| matches!(q, InputRequest::CreateMessage(c) if has(&c.params)))
            }),
            _ => false,
        },
        _ => false,
    }
}

/// The SDK's transport: messages the framer accepted, in; the SDK's messages, out (with
/// answered ids retired, `"id": null` on errors that have none, and exact temperatures).
pub struct Stdio {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    out: Out,
    state: Arc<Mutex<InFlight>>,
}

impl Transport<RoleServer> for Stdio {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let (out, state) = (self.out.clone(), self.state.clone());
        async move {
            let answered = match &item {
                JsonRpcMessage::Response(r) => Some(&r.id),
                JsonRpcMessage::Error(e) => e.id.as_ref(),
                _ => None,
            };
            if let Some(id) = answered {
                finished(&state, &serde_json::to_string(id).unwrap_or_default());
            }
            out.line(wire_line(&item)?).await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl Future<Output = io::Result<()>> + Send {
        self.incoming.close();
        std::future::ready(Ok(()))
    }
}

/// The SDK types a sampling `temperature` as `f32` and writes it widened (`0.7` becomes
/// `0.699999988079071`). In a sampling request (legacy) or an input-required result
/// (2026-07-28), it is rewritten as the shortest decimal that is the same `f32`: the value the
/// caller gave, for any value written with up to seven significant digits.
pub(crate) fn exact_temperatures(message: &mut Value) {
    let mut params: Vec<&mut Value> = Vec::new();
    if message.get("method").and_then(Value::as_str) == Some("sampling/createMessage") {
        params.extend(message.get_mut("params"));
    } else if let Some(Value::Object(requests)) = message.pointer_mut("/result/inputRequests") {
        params.extend(requests.values_mut().filter_map(|r| r.get_mut("params")));
    }
    for p in params {
        if let Some(t) = p.get_mut("temperature")
            && let Some(f) = t.as_f64()
            && let Ok(exact) = serde_json::from_str::<Value>(&format!("{}", f as f32))
        {
            *t = exact;
        }
    }
}

/// Reads stdin a line at a time and hands each accepted message to the SDK, answers or drops
/// the rest, until stdin closes. Returns the SDK's input, still open, so that calls in flight
/// can finish.
async fn read_stdin(
    incoming: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    out: Out,
    state: Arc<Mutex<InFlight>>,
    framing: Framing,
) -> io::Result<mpsc::Sender<RxJsonRpcMessage<RoleServer>>> {
    let mut stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    while let Some(read) = read_line(&mut stdin, framing.max_line, &mut line).await? {
        let verdict = match read {
            Err(head) => oversized(&head, framing.max_line),
            Ok(()) if line.iter().all(u8::is_ascii_whitespace) => Verdict::Drop,
            Ok(()) => classify(&line, &state, framing),
        };
        let message = match verdict {
            Verdict::Forward => typed(&line, &state),
            Verdict::Instead(v) => typed(&serde_json::to_vec(&v).unwrap_or_default(), &state),
            Verdict::Drop => continue,
            Verdict::Reply(v) => Err(v),
        };
        match message {
            Ok(Some(m)) => {
                if incoming.send(m).await.is_err() {
                    break;
                }
            }
            Ok(None) => {}
            Err(reply) => {
                tracing::debug!(reply = %clip(&reply.to_string()), "framing reply");
                out.line(serde_json::to_vec(&reply).unwrap_or_default())
                    .await?;
            }
        }
    }
    Ok(incoming)
}

/// The SDK's message for an accepted line. A request the SDK's types do not accept is answered
/// here, with its id (the SDK would answer without one); such a notification is dropped.
fn typed(
    line: &[u8],
    state: &Mutex<InFlight>,
) -> Result<Option<RxJsonRpcMessage<RoleServer>>, Value> {
    match serde_json::from_slice(line) {
        Ok(m) => Ok(Some(m)),
        Err(e) => {
            let id = serde_json::from_slice::<IdOnly>(line)
                .ok()
                .and_then(|m| m.id);
            let Some(id) = id.filter(|id| id.is_string() || id.is_number()) else {
                return Ok(None);
            };
            finished(state, &id.to_string());
            match error(Some(id), -32600, format!("invalid request: {e}")) {
                Verdict::Reply(v) => Err(v),
                _ => Ok(None),
            }
        }
    }
}

/// A line over the limit, named by the id its head shows. A request is answered with
/// `-32600`; a response (the host's answer to a sampling request) reaches the waiting call as
/// an error, so the call fails at once instead of waiting out its timeout.
fn oversized(head: &[u8], max_line: usize) -> Verdict {
    let head = Head::of(head);
    match (head.id, head.sort) {
        (Some(id), Sort::Response) => {
            Verdict::Instead(json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32600,
            "message": format!("the answer is longer than {max_line} bytes, the most this \
                                server reads (AGENT_AS_MODEL_MAX_REQUEST_BYTES, \
                                AGENT_AS_MODEL_MAX_MEDIA_BYTES); it was not read")}}))
        }
        (id, _) => error(
            id,
            -32600,
            format!(
                "invalid request: the message is longer than {max_line} bytes \
                 (AGENT_AS_MODEL_MAX_REQUEST_BYTES) and was not read"
            ),
        ),
    }
}

/// Serves MCP over stdio until stdin closes. `make` builds the handler (this server, or the
/// bridge's side towards the host), given what it must call when a call's work has ended: a
/// call keeps its slot under the cap until then, cancelled or not.
pub async fn serve_stdio<S, F>(make: F, framing: Framing) -> Result<(), Box<dyn std::error::Error>>
where
    S: rmcp::ServerHandler,
    F: FnOnce(OnDone) -> S,
{
    let (to_sdk, incoming) = mpsc::channel(64);
    let (out, written) = Out::start()?;
    let state = Arc::new(Mutex::new(InFlight::default()));
    let slots = state.clone();
    let server = make(Arc::new(move |id| {
        if let Ok(mut s) = slots.lock() {
            s.calls
                .remove(&serde_json::to_string(id).unwrap_or_default());
        }
    }));
    let transport = Stdio {
        incoming,
        out: out.clone(),
        state: state.clone(),
    };
    // The reader runs before the SDK's handshake, which it feeds.
    let mut reader = tokio::spawn(read_stdin(to_sdk, out, state.clone(), framing));
    let mut serving = Box::pin(server.serve(transport));
    let handshake = tokio::select! {
        running = &mut serving => running,
        read = &mut reader => {
            // Input ended before a lifecycle began (nothing, a ping, a discover, a lone
            // initialize): the SDK sees the end, what was answered is written, and the
            // process ends.
            drop(read);
            let ended = tokio::time::timeout(SHUTDOWN_GRACE, &mut serving).await;
            drop(serving);
            if let Ok(Ok(running)) = ended {
                running.cancellation_token().cancel();
            }
            flush(written).await;
            return Ok(());
        }
    };
    let running = handshake?;
    let token = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let outcome = tokio::select! {
        quit = &mut waiting => quit.map(|_| ()).map_err(Into::into),
        read = &mut reader => match read {
            Ok(Ok(to_sdk)) => {
                finish(to_sdk, &state, waiting, token).await;
                Ok(())
            }
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        },
    };
    reader.abort();
    flush(written).await;
    outcome
}

/// Every line given to the writer is written before the process ends (bounded: a host that
/// stopped reading cannot hold it).
async fn flush(written: std::sync::mpsc::Receiver<()>) {
    let _ = tokio::task::spawn_blocking(move || written.recv_timeout(SHUTDOWN_GRACE)).await;
}

/// stdin closed: calls in flight get a moment to finish, then the SDK sees the end of input, and
/// what is still running is cancelled.
async fn finish<F: Future + Unpin>(
    to_sdk: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    state: &Mutex<InFlight>,
    mut waiting: F,
    token: rmcp::service::RunningServiceCancellationToken,
) {
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    loop {
        let idle = match state.lock() {
            Ok(s) if !s.ids.is_empty() => s.idle.clone(),
            _ => break,
        };
        if tokio::time::timeout_at(deadline, idle.notified())
            .await
            .is_err()
        {
            break;
        }
    }
    // What is still running is cancelled (calls waiting on the host tell it so), and the
    // SDK's loop ends.
    drop(to_sdk);
    token.cancel();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut waiting).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing() -> Framing {
        Framing {
            max_line: 1024,
            max_calls: 1,
        }
    }

    fn run(line: &str, state: &Mutex<InFlight>) -> Verdict {
        classify(line.as_bytes(), state, framing())
    }

    fn code(v: &Verdict) -> (i64, Value) {
        let Verdict::Reply(r) = v else {
            panic!("expected a reply, got {v:?}")
        };
        (r["error"]["code"].as_i64().unwrap(), r["id"].clone())
    }

    #[test]
    fn each_line_gets_one_well_formed_outcome() {
        let s = Mutex::new(InFlight::default());
        assert_eq!(
            run(
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                &s
            ),
            Verdict::Drop
        );
        for bad in [
            r#"{"a": "\ud800"}"#,
            r#"{"a":1}{"b":2}"#,
            r#"{"a":"#,
            &"[".repeat(200),
        ] {
            assert_eq!(code(&run(bad, &s)), (-32700, Value::Null), "{bad}");
        }
        assert_eq!(code(&run("[1]", &s)).0, -32600);
        let call = |id: u32, params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
        };
        assert_eq!(
            code(&run(&call(1, r#"{"name":5}"#), &s)),
            (-32602, json!(1))
        );
        assert_eq!(
            code(&run(&call(2, r#"{"name":"generate","arguments":[1]}"#), &s)),
            (-32602, json!(2))
        );
        assert_eq!(
            run(&call(3, r#"{"name":"generate","arguments":{}}"#), &s),
            Verdict::Forward
        );
        assert_eq!(code(&run(&call(3, r#"{"name":"generate"}"#), &s)).0, -32600);
        assert_eq!(code(&run(&call(4, r#"{"name":"generate"}"#), &s)).0, -32000);
        // After a request, notifications go through unless malformed.
        let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":5}}"#;
        assert_eq!(run(note, &s), Verdict::Drop);
        finished(&s, "3");
        assert_eq!(
            run(&call(4, r#"{"name":"generate"}"#), &s),
            Verdict::Forward
        );
        // A cancelled call keeps its slot until the server says its work has stopped.
        assert_eq!(code(&run(&call(5, r#"{"name":"generate"}"#), &s)).0, -32000);
        let init = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{}}"#;
        assert_eq!(run(init, &s), Verdict::Forward);
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#;
        assert_eq!(run(cancel, &s), Verdict::Forward);
        assert_eq!(code(&run(&call(5, r#"{"name":"generate"}"#), &s)).0, -32000);
        s.lock().unwrap().calls.remove("4");
        assert_eq!(
            run(&call(5, r#"{"name":"generate"}"#), &s),
            Verdict::Forward
        );
        let error = TxJsonRpcMessage::<RoleServer>::Error(rmcp::model::JsonRpcError {
            jsonrpc: Default::default(),
            id: None,
            error: rmcp::ErrorData::invalid_request("x", None),
        });
        let v: Value = serde_json::from_slice(&wire_line(&error).unwrap()).unwrap();
        assert_eq!(v["id"], Value::Null);
    }

    #[test]
    #[allow(deprecated)]
    fn temperatures_are_written_as_given() {
        let mut legacy = json!({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage",
                                "params": {"temperature": 0.699999988079071, "maxTokens": 5}});
        exact_temperatures(&mut legacy);
        assert_eq!(legacy["params"]["temperature"].to_string(), "0.7");
        let mut modern = json!({"jsonrpc": "2.0", "id": 1, "result": {"inputRequests": {"sample":
            {"method": "sampling/createMessage", "params": {"temperature": 0.20000000298023224}}}}});
        exact_temperatures(&mut modern);
        assert_eq!(
            modern["result"]["inputRequests"]["sample"]["params"]["temperature"].to_string(),
            "0.2"
        );
        // The SDK's own request, end to end through the writer.
        let params = rmcp::model::CreateMessageRequestParams::new(vec![], 5).with_temperature(0.7);
        let request = TxJsonRpcMessage::<RoleServer>::Request(rmcp::model::JsonRpcRequest {
            jsonrpc: Default::default(),
            id: rmcp::model::NumberOrString::Number(0),
            request: ServerRequest::CreateMessageRequest(rmcp::model::CreateMessageRequest::new(
                params,
            )),
        });
        let line: Value = serde_json::from_slice(&wire_line(&request).unwrap()).unwrap();
        assert_eq!(line["params"]["temperature"].to_string(), "0.7");
        // Anything else passes untouched, byte for byte, whatever its text says.
        let text = rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
            "\"temperature\":0.699999988079071",
        )]);
        let result = TxJsonRpcMessage::<RoleServer>::Response(rmcp::model::JsonRpcResponse {
            jsonrpc: Default::default(),
            id: rmcp::model::NumberOrString::Number(2),
            result: ServerResult::CallToolResult(text),
        });
        assert_eq!(
            wire_line(&result).unwrap(),
            serde_json::to_vec(&result).unwrap()
        );
    }

    #[test]
    fn oversized_lines_are_skipped_and_their_id_found() {
        assert_eq!(
            Head::of(br#"{"jsonrpc":"2.0","id": "abc","method":"x","params":{"#).id,
            Some(json!("abc"))
        );
        assert_eq!(
            Head::of(br#"{"jsonrpc":"2.0","method":"x","params":{"a":"#).id,
            None
        );
        // Only top-level members count: not a key inside a string or a nested object.
        let answer = br#"{"jsonrpc":"2.0","id":3,"result":{"text":"\"method\": {\"id\":9}","#;
        assert_eq!(
            Head::of(answer),
            Head {
                id: Some(json!(3)),
                sort: Sort::Response
            }
        );
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"id":5,"#;
        assert_eq!(
            Head::of(note),
            Head {
                id: None,
                sort: Sort::Request
            }
        );
        let escaped = br#"{"jsonrpc":"2.0","\u0069d":"e","error":{"code":1,"message":"x"#;
        assert_eq!(Head::of(escaped).id, Some(json!("e")));
        assert_eq!(Head::of(b"[1,2").sort, Sort::Unknown);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let input = format!("{}\n{{\"ok\":1}}\n", "x".repeat(10_000));
            let mut reader = BufReader::with_capacity(64, input.as_bytes());
            let mut line = Vec::new();
            let first = read_line(&mut reader, 100, &mut line)
                .await
                .unwrap()
                .unwrap();
            assert!(matches!(first, Err(head) if head.len() <= HEAD_BYTES));
            let second = read_line(&mut reader, 100, &mut line)
                .await
                .unwrap()
                .unwrap();
            assert!(second.is_ok());
            assert_eq!(line, b"{\"ok\":1}");
            assert!(
                read_line(&mut reader, 100, &mut line)
                    .await
                    .unwrap()
                    .is_none()
            );
        });
    }
}
