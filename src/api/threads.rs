//! Anthropic message threads (the beta `message-threads-2026-08-12`): a `POST /v1/messages`
//! with `thread: {"type": "create"}` asks the server to hold the conversation under the reply's
//! `id`, and one with `thread: {"type": "continue", "previous_message_id": …}` sends only the
//! new turn's messages, which follow the conversation held under that id. The conversation is
//! kept in the store the Responses are kept in ([`super::store`]: this process's memory or a
//! Redis, bounded by count, bytes and time), under `thread:<message id>`, as one JSON text: the
//! `system` and `tools` it was created with (a continue takes them from the thread, and one that
//! sends others is refused), the model, and every message, the reply last.
//!
//! A thread that is not held (never created, expired, evicted, or in another store) is a 404
//! `not_found_error` whose `details.error_code` is `thread_not_found`, on which the SDK replays
//! the whole conversation under a new thread; a server that can keep nothing answers a `thread`
//! with `thread_unsupported_request`, on which the SDK's tool runner goes on without threads.

use super::messages::{Block, Encoder, Message};
use super::store::Store;
use super::{ApiError, Encode, ErrorKind};
use crate::fulfil::written::Piece;
use crate::service::Answered;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The beta that carries `thread` (the SDK sends it in `anthropic-beta`).
pub const BETA: &str = "message-threads-2026-08-12";

/// The longest `previous_message_id` read.
const MAX_ID_BYTES: usize = 256;

/// The request fields a thread keeps from its `create`: a `continue` takes them from the thread.
const CREATE_ONLY: [&str; 2] = ["system", "tools"];

/// What a request's `thread` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Thread {
    /// Hold this conversation under the reply's `id`.
    Create,
    /// Follow the conversation held under this message id.
    Continue(String),
}

/// An invalid `thread` field, naming the part at fault.
fn invalid(param: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError {
        param: Some(param.to_owned()),
        ..ApiError::invalid(format!("`{param}`: {problem}"))
    }
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Takes `thread` out of a request body: `None` when it has none (or `null`), else what it asks,
/// or the error naming the part of it that is wrong.
pub fn read(map: &mut Map<String, Value>) -> Result<Option<Thread>, ApiError> {
    let object = match map.remove("thread") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object,
        Some(other) => {
            return Err(invalid(
                "thread",
                format!(
                    "expected an object, {{\"type\": \"create\"}} or {{\"type\": \"continue\", \
                     \"previous_message_id\": \"msg_…\"}}, not {}",
                    kind(&other)
                ),
            ));
        }
    };
    let thread = match object.get("type") {
        Some(Value::String(t)) if t == "create" => Thread::Create,
        Some(Value::String(t)) if t == "continue" => Thread::Continue(previous(&object)?),
        Some(Value::String(t)) => {
            return Err(invalid(
                "thread.type",
                format!(
                    "expected \"create\" or \"continue\", not {:?}",
                    crate::error::clip(t)
                ),
            ));
        }
        Some(other) => {
            let problem = format!("expected \"create\" or \"continue\", not {}", kind(other));
            return Err(invalid("thread.type", problem));
        }
        None => {
            return Err(invalid(
                "thread.type",
                "missing: \"create\" or \"continue\"",
            ));
        }
    };
    let allowed: &[&str] = match thread {
        Thread::Create => &["type"],
        Thread::Continue(_) => &["type", "previous_message_id"],
    };
    if let Some(extra) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        let param = format!("thread.{}", crate::error::clip(extra));
        return Err(invalid(&param, "not a field of this thread type"));
    }
    Ok(Some(thread))
}

/// A `continue`'s `previous_message_id`.
fn previous(object: &Map<String, Value>) -> Result<String, ApiError> {
    let param = "thread.previous_message_id";
    match object.get("previous_message_id") {
        Some(Value::String(id)) if id.trim().is_empty() => Err(invalid(param, "is empty")),
        Some(Value::String(id)) if id.len() > MAX_ID_BYTES => Err(invalid(
            param,
            format!(
                "is {} bytes long; a message id is at most {MAX_ID_BYTES}",
                id.len()
            ),
        )),
        Some(Value::String(id)) => Ok(id.clone()),
        Some(other) => Err(invalid(
            param,
            format!(
                "expected the id of a previous message (a string), not {}",
                kind(other)
            ),
        )),
        None => Err(invalid(
            param,
            "missing: a continue names the `id` of the reply it follows",
        )),
    }
}

/// What a thread's key in the store begins with: the Responses API's routes treat such an id
/// as no response of theirs.
pub const KEY_PREFIX: &str = "thread:";

/// Where the thread whose last reply is `id` is kept in the store.
pub fn key(id: &str) -> String {
    format!("{KEY_PREFIX}{id}")
}

pub use super::messages::ERROR_CODES;

/// 404 `thread_not_found`: no thread is held under `id`.
pub fn not_found(id: &str) -> ApiError {
    let message = format!(
        "No thread state found for previous_message_id '{}': it was never created here, it \
         expired or was evicted (AGENT_AS_MODEL_RESPONSES_TTL_SECS, _MAX_ENTRIES, _MAX_BYTES), or \
         another store holds it. Replay the full conversation with thread: {{\"type\": \"create\"}}.",
        crate::error::clip(id)
    );
    ApiError {
        param: Some("thread.previous_message_id".into()),
        ..ApiError::new(404, ErrorKind::NotFound, message).with_code("thread_not_found")
    }
}

/// 400 `thread_unsupported_request`: this server keeps no threads.
pub fn unsupported() -> ApiError {
    ApiError {
        param: Some("thread".into()),
        ..ApiError::invalid(
            "`thread`: this server keeps no conversations (its store keeps nothing: \
             AGENT_AS_MODEL_RESPONSES_MAX_ENTRIES or AGENT_AS_MODEL_RESPONSES_MAX_BYTES is 0); \
             send the full conversation without `thread`",
        )
        .with_code("thread_unsupported_request")
    }
}

/// 400 `thread_fingerprint_mismatch`: a continue sent `fields` other than the thread's.
fn mismatch(fields: &[&str]) -> ApiError {
    let named: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
    let verb = if fields.len() == 1 {
        "differs"
    } else {
        "differ"
    };
    ApiError {
        param: fields.first().map(|f| (*f).to_owned()),
        ..ApiError::invalid(format!(
            "{} {verb} from the thread's: a continue takes them from the thread as it was \
             created; leave them out, send the stored values, or replay the full conversation \
             with thread: {{\"type\": \"create\"}} to change them",
            named.join(" and ")
        ))
        .with_code("thread_fingerprint_mismatch")
    }
}

/// A thread as it is kept: what it was created with and every message, the last reply last.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The model the last request named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    pub messages: Vec<Value>,
}

impl Conversation {
    /// The conversation a request body holds (a continue's once [`follow`] made it whole).
    pub fn of_request(map: &Map<String, Value>) -> Conversation {
        let field = |name: &str| map.get(name).filter(|v| !v.is_null()).cloned();
        Conversation {
            model: map.get("model").and_then(Value::as_str).map(str::to_owned),
            system: field("system"),
            tools: field("tools"),
            messages: match map.get("messages") {
                Some(Value::Array(messages)) => messages.clone(),
                _ => Vec::new(),
            },
        }
    }
}

/// Makes a continue's body the whole conversation: the thread's `system` and `tools` (a body
/// that sends others is refused, naming them), its messages before the body's own, and its
/// model when the body names none.
pub fn follow(map: &mut Map<String, Value>, thread: Conversation) -> Result<(), ApiError> {
    let kept = [&thread.system, &thread.tools];
    let differ: Vec<&str> = CREATE_ONLY
        .into_iter()
        .zip(kept)
        .filter(|(name, kept)| {
            map.get(*name)
                .filter(|v| !v.is_null())
                .is_some_and(|sent| Some(sent) != kept.as_ref())
        })
        .map(|(name, _)| name)
        .collect();
    if !differ.is_empty() {
        return Err(mismatch(&differ));
    }
    let new = match map.remove("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(messages)) => messages,
        Some(other) => {
            return Err(invalid(
                "messages",
                format!("expected an array of messages, not {}", kind(&other)),
            ));
        }
    };
    let mut messages = thread.messages;
    messages.extend(new);
    map.insert("messages".into(), Value::Array(messages));
    for (name, kept) in CREATE_ONLY.into_iter().zip([thread.system, thread.tools]) {
        if let Some(kept) = kept {
            map.insert(name.into(), kept);
        }
    }
    let named = map
        .get("model")
        .and_then(Value::as_str)
        .is_some_and(|m| !m.trim().is_empty());
    if let (false, Some(model)) = (named, thread.model) {
        map.insert("model".into(), Value::String(model));
    }
    Ok(())
}

/// The reply as the assistant message a later request would send back (an empty text block,
/// which a message that says nothing has, left out).
fn reply_message(reply: &Message) -> Value {
    let content: Vec<&Block> = reply
        .content
        .iter()
        .filter(|b| !matches!(b, Block::Text { text } if text.is_empty()))
        .collect();
    json!({"role": "assistant", "content": content})
}

/// Where a thread's conversation is kept once its reply is made.
pub struct Keep {
    pub store: Store,
    pub conversation: Conversation,
}

impl Keep {
    /// Keeps the conversation with `reply` after it, under the reply's id; a store that fails is
    /// logged (the answer is sent all the same, and a continue from it finds no thread).
    pub fn save(self, reply: &Message) -> BoxFuture<'static, ()> {
        let Keep {
            store,
            mut conversation,
        } = self;
        conversation.messages.push(reply_message(reply));
        let id = reply.id.clone();
        Box::pin(async move {
            let text = match serde_json::to_string(&conversation) {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!(error = %e, "a thread could not be written for the store");
                    return;
                }
            };
            if let Err(e) = store.put(&key(&id), text).await {
                tracing::warn!(error = %e, message = %id, "a thread was not stored");
            }
        })
    }
}

/// A streamed message of a thread: the messages encoder, and where the conversation is kept
/// once the message is whole (before `message_stop` is sent, so that a client continuing at
/// once finds it).
pub struct Threaded {
    encoder: Encoder,
    keep: Option<Keep>,
    reply: Option<Message>,
}

impl Threaded {
    pub fn new(encoder: Encoder, keep: Keep) -> Self {
        Threaded {
            encoder,
            keep: Some(keep),
            reply: None,
        }
    }
}

impl Encode for Threaded {
    fn start(&mut self) -> Vec<String> {
        self.encoder.start()
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        self.encoder.piece(piece)
    }

    fn ping(&self) -> Option<String> {
        self.encoder.ping()
    }

    fn finish(&mut self, answered: &Answered) -> Vec<String> {
        let frames = self.encoder.finish(answered);
        self.reply = Some(self.encoder.whole(&answered.finished));
        frames
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        self.encoder.error(e)
    }

    fn save(&mut self) -> Option<BoxFuture<'static, ()>> {
        let reply = self.reply.take()?;
        Some(self.keep.take()?.save(&reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Dialect;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn thread_is_read_and_taken_out_of_the_body() {
        let mut m = body(json!({"model": "m", "thread": {"type": "create"}}));
        assert_eq!(read(&mut m).unwrap(), Some(Thread::Create));
        assert!(!m.contains_key("thread"));
        let mut m = body(json!({"thread": {"type": "continue", "previous_message_id": "msg_1"}}));
        assert_eq!(
            read(&mut m).unwrap(),
            Some(Thread::Continue("msg_1".into()))
        );
        for absent in [json!({}), json!({"thread": null})] {
            assert_eq!(read(&mut body(absent)).unwrap(), None);
        }
    }

    #[test]
    fn a_wrong_thread_is_refused_naming_the_part_at_fault() {
        for (thread, param) in [
            (json!("create"), "thread"),
            (json!({}), "thread.type"),
            (json!({"type": "resume"}), "thread.type"),
            (json!({"type": 1}), "thread.type"),
            (json!({"type": "continue"}), "thread.previous_message_id"),
            (
                json!({"type": "continue", "previous_message_id": 7}),
                "thread.previous_message_id",
            ),
            (
                json!({"type": "continue", "previous_message_id": " "}),
                "thread.previous_message_id",
            ),
            (
                json!({"type": "create", "previous_message_id": "msg_1"}),
                "thread.previous_message_id",
            ),
        ] {
            let e = read(&mut body(json!({ "thread": thread }))).unwrap_err();
            assert_eq!(e.status, 400, "{thread}");
            assert_eq!(e.param.as_deref(), Some(param), "{thread}");
            assert!(e.message.contains(param), "{}", e.message);
        }
    }

    #[test]
    fn a_continue_is_the_thread_then_its_own_messages_with_the_threads_system_and_tools() {
        let thread = Conversation {
            model: Some("m".into()),
            system: Some(json!("be brief")),
            tools: Some(json!([{"name": "t", "input_schema": {"type": "object"}}])),
            messages: vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": [{"type": "text", "text": "yo"}]}),
            ],
        };
        let mut m = body(json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}));
        follow(&mut m, thread.clone()).unwrap();
        assert_eq!(m["messages"].as_array().unwrap().len(), 3);
        assert_eq!(m["messages"][2]["content"], "x");
        assert_eq!(m["system"], "be brief");
        assert_eq!(m["model"], "m");
        assert_eq!(Conversation::of_request(&m).tools, thread.tools);
        // The thread's own values may be sent again; others are refused by name.
        let mut same = body(json!({"system": "be brief", "messages": []}));
        follow(&mut same, thread.clone()).unwrap();
        let mut other = body(json!({"system": "be long", "tools": [], "messages": []}));
        let e = follow(&mut other, thread).unwrap_err();
        assert!(e.message.contains("`system` and `tools`"), "{}", e.message);
        let v = e.body(Dialect::Messages);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(
            v["error"]["details"]["error_code"],
            "thread_fingerprint_mismatch"
        );
    }

    #[test]
    fn a_missing_thread_is_anthropics_thread_not_found() {
        let e = not_found("msg_gone");
        assert_eq!(e.status, 404);
        let v = e.body(Dialect::Messages);
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(
            v["error"]["details"],
            json!({"error_code": "thread_not_found"})
        );
        assert!(v["error"]["message"].as_str().unwrap().contains("msg_gone"));
        let v = unsupported().body(Dialect::Messages);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(
            v["error"]["details"],
            json!({"error_code": "thread_unsupported_request"})
        );
    }

    #[tokio::test]
    async fn the_reply_is_kept_after_the_conversation_under_its_id() {
        let store = Store::memory(crate::api::store::Bounds::default());
        let reply = Message {
            id: "msg_r".into(),
            kind: "message",
            role: "assistant",
            content: vec![
                Block::Text {
                    text: String::new(),
                },
                Block::ToolUse {
                    id: "toolu_1".into(),
                    name: "t".into(),
                    input: Map::new(),
                },
            ],
            model: "m".into(),
            stop_reason: Some("tool_use"),
            stop_sequence: None,
            usage: super::super::messages::Usage {
                input_tokens: 1,
                output_tokens: 1,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 0,
                estimated: false,
            },
        };
        let conversation = Conversation {
            messages: vec![json!({"role": "user", "content": "hi"})],
            ..Conversation::default()
        };
        Keep {
            store: store.clone(),
            conversation,
        }
        .save(&reply)
        .await;
        let text = store.get(&key("msg_r")).await.unwrap().unwrap();
        let kept: Conversation = serde_json::from_str(&text).unwrap();
        assert_eq!(kept.messages.len(), 2);
        assert_eq!(
            kept.messages[1],
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]})
        );
    }
}
