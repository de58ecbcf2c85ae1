//! A streamed chat completion (`stream: true`): the server-sent events of an OpenAI-compatible
//! API, assembled into the chat completion the same request would have answered without
//! streaming: the text's deltas joined, each tool call's name and argument fragments gathered
//! by their index, the finish reason, the model and the usage of the last chunk
//! (`stream_options.include_usage`). The text is handed on as it arrives.
//!
//! The events are parsed by `sse-stream` (the parser rmcp uses), fed one chunk at a time: it
//! reads only what it is given, so the provider bounds what is buffered (the answer's byte
//! limit covers a line or event that never ends) before anything reaches the parser.

use super::answer::{ChoiceLogprobs, ErrorObject, Field, Shape, UsageCounts};
use crate::fulfil::written::Piece;
use crate::wire::openai::{Message, Speaker, ToolCall};
use bytes::Bytes;
use futures_core::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use sse_stream::{ByteStreamBody, Sse, SseStream};
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Why a stream (or a whole answer) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// An event's data is not JSON (`data` is clipped).
    #[error("the provider's stream has an event that is not JSON ({error}): {data}")]
    NotJson {
        error: serde_json::Error,
        data: String,
    },
    /// The provider sent an error event (its message, clipped).
    #[error("the provider's stream ended with an error: {0}")]
    Provider(String),
    /// The answer has more tool calls than this server reads (streamed or whole).
    #[error(
        "the provider's answer has more than {0} tool calls, the most this server reads \
         (AGENT_AS_MODEL_PROVIDER_MAX_TOOL_CALLS)"
    )]
    TooManyCalls(usize),
    /// A line the event-stream parser refuses: a field it does not know (a provider's own,
    /// such as an `error:` line), a line without a colon, a repeated `event` or `id`, or text
    /// that is not UTF-8. The stream cannot be read past it.
    #[error("the provider's stream is not a well-formed event stream ({0})")]
    Sse(sse_stream::Error),
    /// The stream ended before `[DONE]` or a finish reason, after this many deltas.
    #[error("the provider's stream broke off before its end, after {0} part(s) of the answer")]
    BrokeOff(usize),
}

impl StreamError {
    /// Whether another model might not fail this way: a stream cut off, or one in a provider's
    /// own dialect (llama.cpp's servers of 2025 send a failure as an `error:` line).
    pub fn is_transient(&self) -> bool {
        matches!(self, StreamError::BrokeOff(_) | StreamError::Sse(_))
    }
}

/// A tool call being assembled from its deltas.
#[derive(Debug, Default)]
struct PartialCall {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// What the events so far add up to (made by [`Assembly::new`]). Each byte is looked at once (by
/// the parser, which keeps a line's start instead of scanning it again) and each delta finds
/// its tool call by index in constant time, so a hostile stream costs time in proportion to its
/// length.
pub struct Assembly {
    /// The chunk fed and not yet parsed.
    inbox: Inbox,
    /// The events parsed from what was fed (the parser holds a line or event not yet complete).
    events: SseStream<ByteStreamBody<Inbox, Bytes>>,
    content: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    /// Where each tool call index is in `calls`.
    positions: HashMap<u64, usize>,
    /// The most tool calls read.
    max_calls: usize,
    finish: Option<String>,
    model: Option<String>,
    usage: Option<UsageCounts>,
    /// The tokens of `logprobs.content` as the chunks carried them (when asked for).
    logprobs: Option<Vec<Value>>,
    /// `[DONE]` was seen.
    done: bool,
    /// Deltas that carried text or a tool call's part (about one token each).
    pub deltas: usize,
}

/// What one piece of the stream added.
#[derive(Debug, Default, PartialEq)]
pub struct Added {
    /// The text, the tool calls that began and their arguments' fragments, in order; a call's
    /// index is its place in the answer (the provider's own indices may be anything).
    pub pieces: Vec<Piece>,
    /// Whether anything was added (text or a tool call's part).
    pub any: bool,
    /// Complete events read (with data or not).
    pub events: usize,
}

impl Added {
    /// More of the answer's text, or of its reasoning: added to the last piece when it is of
    /// the same kind.
    fn append(&mut self, text: &str, reasoning: bool) {
        match (self.pieces.last_mut(), reasoning) {
            (Some(Piece::Reasoning(last)), true) | (Some(Piece::Text(last)), false) => {
                last.push_str(text);
            }
            _ => self.pieces.push(if reasoning {
                Piece::Reasoning(text.to_owned())
            } else {
                Piece::Text(text.to_owned())
            }),
        }
        self.any = true;
    }

    /// The text added.
    #[cfg(test)]
    fn text(&self) -> String {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The names of the calls that began.
    #[cfg(test)]
    fn calls(&self) -> Vec<String> {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::CallStart { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}

impl Assembly {
    /// An assembly that reads at most `max_calls` tool calls.
    pub fn new(max_calls: usize) -> Self {
        let inbox = Inbox::default();
        Assembly {
            events: SseStream::from_bytes_stream(inbox.clone()),
            inbox,
            content: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            positions: HashMap::new(),
            max_calls,
            finish: None,
            model: None,
            usage: None,
            logprobs: None,
            done: false,
            deltas: 0,
        }
    }

    /// Reads more of the stream; `Err` when the provider sent an error event, something that
    /// is not a chat completion chunk, or a line that is not an event stream's.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Added, StreamError> {
        let mut added = Added::default();
        if bytes.is_empty() {
            return Ok(added);
        }
        self.inbox.put(Bytes::copy_from_slice(bytes));
        // The parser's source has nothing more once this chunk is read: polling ends `Pending`,
        // and nothing waits for a wake-up (the next `feed` polls again).
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(event)) = Pin::new(&mut self.events).poll_next(&mut cx) {
            let event = event.map_err(StreamError::Sse)?;
            added.events += 1;
            self.dispatch(event, &mut added)?;
        }
        Ok(added)
    }

    /// One complete event. Its `event`, `id` and `retry` fields carry nothing for us.
    fn dispatch(&mut self, event: Sse, added: &mut Added) -> Result<(), StreamError> {
        let Some(data) = event.data else {
            return Ok(());
        };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk =
            serde_json::from_str::<Field<Chunk>>(&data).map_err(|error| StreamError::NotJson {
                error,
                data: crate::error::clip(&data).into_owned(),
            })?;
        // Data that is JSON but not an object carries nothing.
        let Some(chunk) = chunk.into_option() else {
            return Ok(());
        };
        if let Some(error) = chunk.error.into_option() {
            let message = ErrorObject::message(&error).unwrap_or_else(|| error.to_string());
            return Err(StreamError::Provider(
                crate::error::clip(&message).into_owned(),
            ));
        }
        if let Some(model) = chunk.model.into_option() {
            self.model = Some(model);
        }
        if let Some(usage) = chunk.usage.into_option() {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk
            .choices
            .into_option()
            .and_then(|choices| choices.into_iter().next())
        else {
            return Ok(());
        };
        let choice = choice.into_option().unwrap_or_default();
        if let Some(reason) = choice.finish_reason.into_option() {
            self.finish = Some(reason);
        }
        let delta = choice.delta.into_option().unwrap_or_default();
        let reasoning = match delta.reasoning_content {
            Field::Present(Some(r)) => Field::Present(Some(r)),
            _ => delta.reasoning,
        };
        self.logprobs_delta(choice.logprobs.into_option(), added);
        self.reasoning_delta(reasoning, added);
        self.text_delta(delta.content, added);
        for call in delta.tool_calls.into_option().unwrap_or_default() {
            self.tool_call_delta(call.into_option().unwrap_or_default(), added)?;
            added.any = true;
            self.deltas += 1;
        }
        Ok(())
    }

    /// The log-probabilities of the tokens of the text that follows in the chunk, kept for the
    /// answer and told before that text.
    fn logprobs_delta(&mut self, logprobs: Option<Value>, added: &mut Added) {
        let Some(mut logprobs) = logprobs else {
            return;
        };
        if let Some(told) = ChoiceLogprobs::of(&logprobs).filter(|t| !t.is_empty()) {
            added.pieces.push(Piece::Logprobs(told));
            added.any = true;
        }
        if let Some(Value::Array(content)) = logprobs.get_mut("content").map(Value::take) {
            self.logprobs.get_or_insert_with(Vec::new).extend(content);
        }
    }

    /// A part of the model's reasoning (before its text).
    fn reasoning_delta(&mut self, reasoning: Field<String>, added: &mut Added) {
        if let Some(text) = reasoning.get()
            && !text.is_empty()
        {
            self.reasoning.push_str(text);
            added.append(text, true);
            self.deltas += 1;
        }
    }

    /// A part of the answer's text.
    fn text_delta(&mut self, content: Field<String>, added: &mut Added) {
        if let Some(text) = content.get()
            && !text.is_empty()
        {
            self.content.push_str(text);
            added.append(text, false);
            self.deltas += 1;
        }
    }

    /// A part of a tool call: the first names it, the rest carry argument fragments, told to
    /// `added` once the call is named (its id fixed then: the provider's, or one made here);
    /// `Err` when it would begin one call too many.
    fn tool_call_delta(&mut self, delta: CallDelta, added: &mut Added) -> Result<(), StreamError> {
        let index = delta
            .index
            .into_option()
            .unwrap_or_else(|| self.calls.last().map_or(0, |c| c.index));
        let position = match self.positions.get(&index) {
            Some(p) => *p,
            None => {
                if self.calls.len() >= self.max_calls {
                    return Err(StreamError::TooManyCalls(self.max_calls));
                }
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.positions.insert(index, self.calls.len() - 1);
                self.calls.len() - 1
            }
        };
        let Some(call) = self.calls.get_mut(position) else {
            return Ok(());
        };
        let named = !call.name.is_empty();
        if let Some(id) = delta.id.into_option()
            && !named
        {
            call.id = Some(id);
        }
        let function = delta.function.into_option().unwrap_or_default();
        if let Some(name) = function.name.get() {
            call.name.push_str(name);
        }
        let part = function.arguments.get().map_or("", String::as_str);
        call.arguments.push_str(part);
        if !named && !call.name.is_empty() {
            let id = call
                .id
                .get_or_insert_with(|| crate::call::new_id("call_"))
                .clone();
            added.pieces.push(Piece::CallStart {
                index: position,
                id,
                name: call.name.clone(),
            });
            if !call.arguments.is_empty() {
                added.pieces.push(Piece::CallArgs {
                    index: position,
                    fragment: call.arguments.clone(),
                });
            }
        } else if named && !part.is_empty() {
            added.pieces.push(Piece::CallArgs {
                index: position,
                fragment: part.to_owned(),
            });
        }
        Ok(())
    }

    /// The chat completion the stream made; `Err` when it broke off before its end (no
    /// `[DONE]` and no finish reason).
    /// An event the stream ended in the middle of is not counted, as the event-stream format
    /// says.
    pub fn finish(self) -> Result<Value, StreamError> {
        if !self.done && self.finish.is_none() {
            return Err(StreamError::BrokeOff(self.deltas));
        }
        let mut message = Message::text(Speaker::Assistant, self.content);
        message.reasoning_content = (!self.reasoning.is_empty()).then_some(self.reasoning);
        message.tool_calls = self
            .calls
            .into_iter()
            .map(|c| ToolCall::api(c.id, c.name, c.arguments))
            .collect();
        let logprobs = (self.logprobs).map(|content| json!({"content": content, "refusal": null}));
        Ok(json!({
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish,
                         "logprobs": logprobs}],
            "usage": self.usage,
        }))
    }
}

/// One event's chat completion chunk; unknown fields are ignored, and one of an unexpected
/// type is read as absent ([`Field`]).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Chunk {
    /// An error event: any value (its `message` is shown, else the value itself).
    error: Field<Value>,
    model: Field<String>,
    usage: Field<UsageCounts>,
    choices: Field<Vec<Field<ChunkChoice>>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ChunkChoice {
    finish_reason: Field<String>,
    delta: Field<Delta>,
    logprobs: Field<Value>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Delta {
    content: Field<String>,
    reasoning_content: Field<String>,
    reasoning: Field<String>,
    tool_calls: Field<Vec<Field<CallDelta>>>,
}

/// A part of a tool call: its index, and the first part its id and name.
#[derive(Default, Deserialize)]
#[serde(default)]
struct CallDelta {
    index: Field<u64>,
    id: Field<String>,
    function: Field<FunctionDelta>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct FunctionDelta {
    name: Field<String>,
    arguments: Field<String>,
}

impl Shape for Chunk {}
impl Shape for ChunkChoice {}
impl Shape for Delta {}
impl Shape for CallDelta {}
impl Shape for FunctionDelta {}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("calls", &self.calls.len())
            .field("finish", &self.finish)
            .field("done", &self.done)
            .field("deltas", &self.deltas)
            .finish_non_exhaustive()
    }
}

/// The parser's source: the chunk [`Assembly::feed`] was given, once; then nothing yet
/// (`Pending`), never the end (a stream that stops is judged by [`Assembly::finish`]).
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Option<Bytes>>>);

impl Inbox {
    fn put(&self, bytes: Bytes) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(bytes);
    }
}

impl Stream for Inbox {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.0.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(bytes) => Poll::Ready(Some(Ok(bytes))),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(v: Value) -> String {
        format!("data: {v}\n\n")
    }

    #[test]
    fn logprobs_are_told_before_their_text_and_kept_for_the_answer() {
        let token = |t: &str| {
            json!({"token": t, "logprob": -0.5, "bytes": t.as_bytes(),
                                     "top_logprobs": []})
        };
        let stream = [
            event(json!({"choices": [{"delta": {"content": "Hel"},
                                      "logprobs": {"content": [token("Hel")]}}]})),
            event(json!({"choices": [{"delta": {"content": "lo"},
                                      "logprobs": {"content": [token("lo")]}}]})),
            event(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]})),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let mut assembly = Assembly::new(8);
        let added = assembly.feed(stream.as_bytes()).unwrap();
        let told: Vec<String> = (added.pieces.iter())
            .map(|p| match p {
                Piece::Logprobs(l) => format!("logprobs {}", l[0].token),
                Piece::Text(t) => format!("text {t}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(told, ["logprobs Hel", "text Hel", "logprobs lo", "text lo"]);
        let done = assembly.finish().unwrap();
        let logprobs = &done["choices"][0]["logprobs"]["content"];
        assert_eq!(logprobs[1], token("lo"));
        // Without them, the answer has none.
        let mut plain = Assembly::new(8);
        let stream = [
            event(json!({"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]})),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        plain.feed(stream.as_bytes()).unwrap();
        assert_eq!(
            plain.finish().unwrap()["choices"][0]["logprobs"],
            Value::Null
        );
    }

    #[test]
    fn text_and_tool_call_deltas_assemble_into_one_completion() {
        let stream = [
            ": keep-alive\n\n".to_owned(),
            event(
                json!({"model": "m1", "choices": [{"delta": {"role": "assistant",
                "content": "Hel"}}]}),
            ),
            event(json!({"choices": [{"delta": {"content": "lo"}}]})),
            event(
                json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]}),
            ),
            event(json!({"choices": [{"delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": "{\"city\": "}}]}}]})),
            event(json!({"choices": [{"delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": "\"Paris\"}"}}]}}]})),
            event(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})),
            event(json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7}})),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let mut assembly = Assembly::new(128);
        let mut text = String::new();
        let mut began = Vec::new();
        let mut pieces = Vec::new();
        // Fed in pieces that cut events and characters' lines anywhere.
        for piece in stream.as_bytes().chunks(7) {
            let added = assembly.feed(piece).unwrap();
            text.push_str(&added.text());
            began.extend(added.calls());
            pieces.extend(added.pieces);
        }
        assert_eq!(text, "Hello");
        assert_eq!(began, ["get_weather"]);
        // The call is told after the text, with the provider's id, its arguments in pieces.
        let calls: Vec<&Piece> = pieces
            .iter()
            .filter(|p| !matches!(p, Piece::Text(_)))
            .collect();
        assert_eq!(
            calls,
            [
                &Piece::CallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "get_weather".into()
                },
                &Piece::CallArgs {
                    index: 0,
                    fragment: "{\"city\": ".into()
                },
                &Piece::CallArgs {
                    index: 0,
                    fragment: "\"Paris\"}".into()
                },
            ]
        );
        assert!(matches!(pieces.last(), Some(Piece::CallArgs { .. })));
        assert_eq!(assembly.deltas, 5);
        let done = assembly.finish().unwrap();
        assert_eq!(done["model"], "m1");
        assert_eq!(done["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(done["choices"][0]["message"]["content"], "Hello");
        let call = &done["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["function"]["name"], "get_weather");
        assert_eq!(call["function"]["arguments"], "{\"city\": \"Paris\"}");
        assert_eq!(done["usage"]["completion_tokens"], 7);
    }

    #[test]
    fn reasoning_deltas_in_either_name_are_the_answers_reasoning() {
        let stream = [
            event(json!({"choices": [{"delta": {"reasoning_content": "Let me "}}]})),
            event(json!({"choices": [{"delta": {"reasoning": "think."}}]})),
            event(json!({"choices": [{"delta": {"content": "Paris."}, "finish_reason": "stop"}]})),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let mut assembly = Assembly::new(8);
        let mut pieces = Vec::new();
        for piece in stream.as_bytes().chunks(5) {
            pieces.extend(assembly.feed(piece).unwrap().pieces);
        }
        let reasoning: String = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Reasoning(r) => Some(r.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, "Let me think.");
        let done = assembly.finish().unwrap();
        assert_eq!(
            done["choices"][0]["message"]["reasoning_content"],
            "Let me think."
        );
        let c = crate::backends::provider::completion(&done, "m", 8).unwrap();
        assert_eq!(c.reasoning().as_deref(), Some("Let me think."));
        assert_eq!(c.blocks[1], crate::call::Block::Text("Paris.".into()));
    }

    #[test]
    fn too_many_tool_calls_are_refused_and_long_lines_are_read_once() {
        let calls: Vec<Value> = (0..200)
            .map(|i| json!({"index": i, "function": {"name": "f", "arguments": "{}"}}))
            .collect();
        let mut assembly = Assembly::new(128);
        let e = assembly
            .feed(event(json!({"choices": [{"delta": {"tool_calls": calls}}]})).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 128 tool calls"), "{e}");
        // A long event fed a byte at a time assembles like one fed whole.
        let text = "x".repeat(20_000);
        let whole =
            event(json!({"choices": [{"delta": {"content": text}, "finish_reason": "stop"}]}));
        let mut trickled = Assembly::new(128);
        let mut got = String::new();
        for b in whole.as_bytes().chunks(1) {
            got.push_str(&trickled.feed(b).unwrap().text());
        }
        assert_eq!(got, text);
        assert_eq!(
            trickled.finish().unwrap()["choices"][0]["message"]["content"],
            text
        );
    }

    #[test]
    fn a_cut_stream_and_an_error_event_are_errors() {
        let mut cut = Assembly::new(128);
        cut.feed(event(json!({"choices": [{"delta": {"content": "Hi"}}]})).as_bytes())
            .unwrap();
        cut.feed(b"data: {\"choices\": [{\"delta\": {\"cont")
            .unwrap();
        let e = cut.finish().unwrap_err().to_string();
        assert!(e.contains("broke off before its end, after 1 part"), "{e}");
        let mut error = Assembly::new(128);
        let e = error
            .feed(event(json!({"error": {"message": "rate limited"}})).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("rate limited"), "{e}");
    }

    /// What a whole stream adds up to, fed in pieces of `size` bytes.
    fn assembled(stream: &[u8], size: usize) -> (String, Value) {
        let mut assembly = Assembly::new(8);
        let mut text = String::new();
        for piece in stream.chunks(size) {
            text.push_str(&assembly.feed(piece).unwrap().text());
        }
        (text, assembly.finish().unwrap())
    }

    #[test]
    fn every_line_end_and_field_of_the_format_is_read_alike_in_any_pieces() {
        let stream = concat!(
            "\u{feff}: a comment\r\n",
            "event: message\r\nid: 1\r\nretry: 3000\r\n",
            "data: {\"model\": \"m\",\r\ndata: \"choices\": [{\"delta\": {\"content\": \"a\"}}]}\r\n\r\n",
            "data:{\"choices\": [{\"delta\": {\"content\": \"b\"}}]}\r\r",
            "event: only a name\n\n",
            "data: {\"choices\": [{\"delta\": {\"content\": \"c\"}, \"finish_reason\": \"stop\"}]}\n\n",
        );
        let whole = assembled(stream.as_bytes(), stream.len());
        assert_eq!(whole.0, "abc");
        assert_eq!(whole.1["model"], "m");
        assert_eq!(whole.1["choices"][0]["finish_reason"], "stop");
        for size in [1, 2, 3, 5, 13] {
            assert_eq!(
                assembled(stream.as_bytes(), size),
                whole,
                "pieces of {size}"
            );
        }
    }

    #[test]
    fn a_line_of_a_providers_own_dialect_is_a_transient_error() {
        // llama.cpp's servers of 2025: a failure mid-stream as an `error:` field.
        let mut assembly = Assembly::new(8);
        assembly
            .feed(event(json!({"choices": [{"delta": {"content": "Hi"}}]})).as_bytes())
            .unwrap();
        let e = assembly
            .feed(b"error: {\"code\": 400, \"message\": \"too long\"}\n\n")
            .unwrap_err();
        assert!(e.is_transient());
        assert_eq!(
            e.to_string(),
            "the provider's stream is not a well-formed event stream (invalid line)"
        );
        // A provider's error event (OpenAI's form) is not transient and says its message.
        let e = Assembly::new(8)
            .feed(event(json!({"error": {"message": "no such model"}})).as_bytes())
            .unwrap_err();
        assert!(!e.is_transient());
        assert_eq!(
            e.to_string(),
            "the provider's stream ended with an error: no such model"
        );
    }

    #[test]
    fn odd_fields_of_a_chunk_read_as_absent() {
        let stream = [
            // JSON that is not an object, and fields of another type, carry nothing.
            "data: [{\"error\": {\"message\": \"not an error\"}}]\n\n".to_owned(),
            "data: 5\n\n".to_owned(),
            event(json!({"model": 5, "choices": [{"delta": {"content": 7}}]})),
            // (A JSON pointer took an object's "0" for the first choice; a list is read.)
            event(json!({"choices": {"0": {"delta": {"content": "not a list"}}}})),
            event(json!({"model": "m", "choices": [null, {"delta": {"content": "no"}}]})),
            event(json!({"choices": [{"delta": {"content": "a", "tool_calls": null}}]})),
            // A part that is not an object still counts, for the call it would continue.
            event(json!({"choices": [{"delta": {"tool_calls": [
                {"index": 1, "id": "c", "function": {"name": "f", "arguments": "{"}}]}}]})),
            event(json!({"choices": [{"delta": {"tool_calls": [
                7, {"function": {"arguments": "}"}}]}}]})),
            event(
                json!({"choices": [{"delta": null, "finish_reason": "tool_calls"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                   "prompt_tokens_details": {"cached_tokens": 2}}}),
            ),
            event(json!({"choices": [], "usage": null})),
        ]
        .concat();
        let mut assembly = Assembly::new(8);
        let added = assembly.feed(stream.as_bytes()).unwrap();
        assert_eq!(added.text(), "a");
        assert_eq!(added.calls(), ["f"]);
        assert_eq!(assembly.deltas, 4);
        let done = assembly.finish().unwrap();
        assert_eq!(done["model"], "m");
        let call = &done["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(
            (&call["id"], &call["function"]["arguments"]),
            (&json!("c"), &json!("{}"))
        );
        assert_eq!(
            done["usage"],
            json!({"prompt_tokens": 3, "completion_tokens": 4,
                   "prompt_tokens_details": {"cached_tokens": 2}})
        );
        // An `error` field of any value is an error event.
        let e = Assembly::new(8)
            .feed(event(json!({"error": null})).as_bytes())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the provider's stream ended with an error: null"
        );
        let e = Assembly::new(8)
            .feed(b"data: {\"choices\": [\n\n")
            .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "the provider's stream has an event that is not JSON (EOF while parsing"
            ),
            "{e}"
        );
    }
}
