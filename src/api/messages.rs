//! Anthropic messages: the `message` object and its stream (`message_start`, content blocks
//! opened, filled and stopped, `message_delta`, `message_stop`, `ping` while waiting), written
//! by one [`Encoder`] from typed values. The whole answer is what the stream's events add up
//! to: the same id, model, blocks, stop reason and usage.

use super::dialect::{self, Dialect, Endpoint, Opening, Route, Wire};
use super::gate::TextGate;
use super::sse::{frame, text_and_calls};
use super::{ApiError, Encode, ErrorKind, Prepared};
use crate::call::{Answer, Finish};
use crate::fulfil::written::Piece;
use crate::service::{Answered, Finished};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// A content block.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// The model's reasoning, signed by this server so that it can tell the block is its own
    /// when a client sends it back ([`crate::shapes::anthropic::signature`]).
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Usage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_creation_input_tokens: usize,
    pub cache_read_input_tokens: usize,
    /// Counted by this server from the text, not by the model.
    pub estimated: bool,
}

impl Usage {
    /// Anthropic counts the prompt's cached tokens apart from its input tokens.
    fn of(u: crate::call::Usage) -> Self {
        let cached = u.cached.unwrap_or(0);
        Usage {
            input_tokens: u.prompt.saturating_sub(cached),
            output_tokens: u.completion,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
            estimated: u.estimated,
        }
    }
}

/// The `message` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub content: Vec<Block>,
    pub model: String,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

/// Why the answer ended, as Anthropic says it, and the stop sequence met.
fn stop_reason(finished: &Finished) -> (&'static str, Option<String>) {
    if matches!(finished.answer, Answer::ToolCalls { .. }) {
        return ("tool_use", None);
    }
    match &finished.finish {
        Finish::EndTurn => ("end_turn", None),
        Finish::MaxTokens => ("max_tokens", None),
        Finish::StopSequence(s) => ("stop_sequence", s.clone()),
        Finish::ToolUse => ("tool_use", None),
    }
}

/// A content block's events.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart { message: &'a Message },
    ContentBlockStart { index: usize, content_block: Value },
    ContentBlockDelta { index: usize, delta: Value },
    ContentBlockStop { index: usize },
    MessageDelta { delta: Value, usage: Usage },
    MessageStop,
    Ping,
}

impl Event<'_> {
    fn name(&self) -> &'static str {
        match self {
            Event::MessageStart { .. } => "message_start",
            Event::ContentBlockStart { .. } => "content_block_start",
            Event::ContentBlockDelta { .. } => "content_block_delta",
            Event::ContentBlockStop { .. } => "content_block_stop",
            Event::MessageDelta { .. } => "message_delta",
            Event::MessageStop => "message_stop",
            Event::Ping => "ping",
        }
    }

    fn frame(&self) -> String {
        frame(Some(self.name()), self)
    }
}

/// One message, as its events while it is made and as its object when done.
pub struct Encoder {
    /// The message as it stands: its content grows as blocks are opened.
    message: Message,
    gate: TextGate,
    /// The open text block's index.
    text_block: Option<usize>,
    /// The open tool-use block's index.
    call_block: Option<usize>,
    /// The open thinking block's index.
    thinking_block: Option<usize>,
    /// The ids of the calls shown as they were made, in order.
    calls: Vec<String>,
}

impl Encoder {
    /// A message answered by `model`, its text stopped at `stop`, its prompt `input_tokens`
    /// long (what `message_start` says).
    pub fn new(model: &str, stop: &[String], input_tokens: usize) -> Self {
        Encoder {
            message: Message {
                id: crate::call::new_id("msg_"),
                kind: "message",
                role: "assistant",
                content: Vec::new(),
                model: model.to_owned(),
                stop_reason: None,
                stop_sequence: None,
                usage: Usage {
                    input_tokens,
                    output_tokens: 0,
                    cache_creation_input_tokens: 0,
                    cache_read_input_tokens: 0,
                    estimated: false,
                },
            },
            gate: TextGate::new(stop),
            text_block: None,
            call_block: None,
            thinking_block: None,
            calls: Vec::new(),
        }
    }

    /// `self` with the id `id` when one is given.
    pub fn named(mut self, id: Option<&str>) -> Self {
        if let Some(id) = id {
            self.message.id = id.to_owned();
        }
        self
    }

    /// The whole message for an answer.
    pub fn whole(&self, finished: &Finished) -> Message {
        let (text, calls) = text_and_calls(&finished.answer);
        let mut content = Vec::with_capacity(calls.len() + 2);
        if let Some(thinking) = &finished.reasoning {
            content.push(Block::Thinking {
                signature: crate::shapes::anthropic::signature(thinking),
                thinking: thinking.clone(),
            });
        }
        if !text.is_empty() || calls.is_empty() {
            content.push(Block::Text { text });
        }
        content.extend(calls.iter().map(|c| Block::ToolUse {
            id: c.id.clone(),
            name: c.name.clone(),
            input: c.input.clone(),
        }));
        let (stop_reason, stop_sequence) = stop_reason(finished);
        Message {
            content,
            model: finished.model.clone(),
            stop_reason: Some(stop_reason),
            stop_sequence,
            usage: Usage::of(finished.usage),
            ..self.message.clone()
        }
    }

    fn stop_block(&self, index: usize) -> String {
        Event::ContentBlockStop { index }.frame()
    }

    /// Closes the open thinking, text or tool-use block; a thinking block ends with its
    /// signature.
    fn close(&mut self, out: &mut Vec<String>) {
        if let Some(index) = self.thinking_block.take()
            && let Some(Block::Thinking {
                thinking,
                signature,
            }) = self.message.content.get_mut(index)
        {
            *signature = crate::shapes::anthropic::signature(thinking);
            out.push(
                Event::ContentBlockDelta {
                    index,
                    delta: json!({"type": "signature_delta", "signature": signature}),
                }
                .frame(),
            );
            out.push(Event::ContentBlockStop { index }.frame());
        }
        for index in [self.text_block.take(), self.call_block.take()]
            .into_iter()
            .flatten()
        {
            out.push(self.stop_block(index));
        }
    }

    fn show(&mut self, text: String) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let index = match self.text_block {
            Some(index) => index,
            None => self.open_text(&mut out),
        };
        if let Some(Block::Text { text: shown }) = self.message.content.get_mut(index) {
            shown.push_str(&text);
        }
        out.push(
            Event::ContentBlockDelta {
                index,
                delta: json!({"type": "text_delta", "text": text}),
            }
            .frame(),
        );
        out
    }

    /// Shows more of the model's reasoning, in a thinking block opened for it.
    fn think(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let index = match self.thinking_block {
            Some(index) => index,
            None => {
                self.close(&mut out);
                let index = self.message.content.len();
                self.message.content.push(Block::Thinking {
                    thinking: String::new(),
                    signature: String::new(),
                });
                self.thinking_block = Some(index);
                out.push(
                    Event::ContentBlockStart {
                        index,
                        content_block: json!({"type": "thinking", "thinking": "",
                                              "signature": ""}),
                    }
                    .frame(),
                );
                index
            }
        };
        if let Some(Block::Thinking { thinking, .. }) = self.message.content.get_mut(index) {
            thinking.push_str(text);
        }
        out.push(
            Event::ContentBlockDelta {
                index,
                delta: json!({"type": "thinking_delta", "thinking": text}),
            }
            .frame(),
        );
        out
    }

    fn open_text(&mut self, out: &mut Vec<String>) -> usize {
        self.close(out);
        let index = self.message.content.len();
        self.message.content.push(Block::Text {
            text: String::new(),
        });
        self.text_block = Some(index);
        out.push(
            Event::ContentBlockStart {
                index,
                content_block: json!({"type": "text", "text": ""}),
            }
            .frame(),
        );
        index
    }

    fn open_call(&mut self, id: &str, name: &str, out: &mut Vec<String>) -> usize {
        self.close(out);
        let index = self.message.content.len();
        self.message.content.push(Block::ToolUse {
            id: id.to_owned(),
            name: name.to_owned(),
            input: Map::new(),
        });
        self.call_block = Some(index);
        out.push(
            Event::ContentBlockStart {
                index,
                content_block: json!({"type": "tool_use", "id": id, "name": name,
                                      "input": {}}),
            }
            .frame(),
        );
        index
    }

    fn args(index: usize, fragment: &str) -> String {
        Event::ContentBlockDelta {
            index,
            delta: json!({"type": "input_json_delta", "partial_json": fragment}),
        }
        .frame()
    }
}

impl Encode for Encoder {
    fn start(&mut self) -> Vec<String> {
        vec![
            Event::MessageStart {
                message: &self.message,
            }
            .frame(),
        ]
    }

    fn ping(&self) -> Option<String> {
        Some(Event::Ping.frame())
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        match piece {
            Piece::Text(text) => {
                let show = self.gate.feed(&text);
                self.show(show)
            }
            // A call out of order is shown at the end.
            Piece::CallStart { index, id, name } if index == self.calls.len() => {
                let held = self.gate.release();
                let mut out = self.show(held);
                self.open_call(&id, &name, &mut out);
                self.calls.push(id);
                out
            }
            Piece::Reasoning(text) if !text.is_empty() => self.think(&text),
            // Anthropic's messages have no log-probabilities (a call cannot ask for them).
            Piece::CallStart { .. } | Piece::Reasoning(_) | Piece::Logprobs(_) => Vec::new(),
            Piece::CallArgs { index, fragment } => {
                // Arguments go to the open block of the call shown last only.
                match self.call_block {
                    Some(block) if index + 1 == self.calls.len() => {
                        vec![Self::args(block, &fragment)]
                    }
                    _ => Vec::new(),
                }
            }
        }
    }

    fn finish(&mut self, answered: &Answered) -> Vec<String> {
        let finished = &answered.finished;
        let (text, calls) = text_and_calls(&finished.answer);
        let rest = self.gate.rest(&text);
        // Reasoning not shown while it was made (an attempt that was not the answer's own).
        let mut out = match &finished.reasoning {
            Some(reasoning) if self.message.content.is_empty() => self.think(reasoning),
            _ => Vec::new(),
        };
        out.extend(self.show(rest));
        // A message always has its text block, if empty, when it calls no tool.
        if self.message.content.is_empty() && calls.is_empty() {
            self.open_text(&mut out);
        }
        let unshown: Vec<_> = calls
            .iter()
            .filter(|c| !self.calls.contains(&c.id))
            .collect();
        for call in unshown {
            let index = self.open_call(&call.id, &call.name, &mut out);
            out.push(Self::args(index, &call.arguments_json()));
        }
        self.close(&mut out);
        let (stop_reason, stop_sequence) = stop_reason(finished);
        out.push(
            Event::MessageDelta {
                delta: json!({"stop_reason": stop_reason, "stop_sequence": stop_sequence}),
                usage: Usage::of(finished.usage),
            }
            .frame(),
        );
        out.push(Event::MessageStop.frame());
        out
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        vec![frame(Some("error"), &anthropic_error(e))]
    }
}

/// The `error.details.error_code`s of Anthropic's envelope this server answers with (the
/// error's `code`: [`ApiError::body`] writes it there): the message threads'.
pub const ERROR_CODES: [&str; 3] = [
    "thread_not_found",
    "thread_unsupported_request",
    "thread_fingerprint_mismatch",
];

/// Anthropic messages in the registry ([`super::dialect`]).
pub const DIALECT: Dialect = dialect::of(&Messages);

/// Anthropic's messages API: `/v1/messages` and its token count; `GET /v1/models` is its
/// list for a request with `anthropic-version` or `x-api-key`.
pub struct Messages;

impl Wire for Messages {
    fn id(&self) -> &'static str {
        "messages"
    }

    fn metric(&self) -> crate::metrics::Api {
        crate::metrics::Api::Messages
    }

    fn shape(&self) -> &'static dyn crate::shapes::Shape {
        &crate::shapes::anthropic::MessagesCreate
    }

    fn routes(&self) -> &'static [Route] {
        const ROUTES: &[Route] = &[
            Route::post("/v1/messages", Endpoint::MessagesCreate),
            Route::post("/v1/messages/count_tokens", Endpoint::CountTokens),
        ];
        ROUTES
    }

    fn claims(&self, path: &str) -> bool {
        path.starts_with("/v1/messages")
    }

    fn lists_models_for(&self, has: &dyn Fn(&str) -> bool) -> bool {
        has("anthropic-version") || has("x-api-key")
    }

    fn error_body(&self, e: &ApiError) -> Value {
        anthropic_error(e)
    }

    fn prepare(&self, body: &mut Map<String, Value>, _model: Option<&str>, p: &mut Prepared) {
        p.system_messages = system_messages(body);
        no_empty_tools(body);
    }

    fn counts_prompt(&self) -> bool {
        true
    }

    fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
        let stop = &o.call.request.stop;
        Box::new(Encoder::new(o.model, stop, o.prompt_tokens))
    }

    fn whole(&self, o: &Opening<'_>, answered: &Answered) -> Value {
        let encoder = Encoder::new(o.model, &o.call.request.stop, 0).named(o.id);
        dialect::to_json(&encoder.whole(&answered.finished))
    }

    fn model_object(&self, id: &str, _described: Option<&Value>) -> Value {
        json!({"type": "model", "id": id, "display_name": id,
               "created_at": "1970-01-01T00:00:00Z"})
    }

    fn model_list(&self, ids: &[&str], data: Vec<Value>) -> Value {
        json!({"data": data, "has_more": false, "first_id": ids.first(), "last_id": ids.last()})
    }
}

/// An error in Anthropic's envelope.
fn anthropic_error(e: &ApiError) -> Value {
    let mut error = json!({
        "type": match e.kind {
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Api => "api_error",
        },
        "message": e.message,
    });
    // Anthropic's own codes (the threads') are its `details.error_code`.
    if let (Some(code), Some(error)) = (&e.code, error.as_object_mut())
        && ERROR_CODES.contains(&code.as_str())
    {
        error.insert("details".into(), json!({"error_code": code}));
    }
    json!({"type": "error", "error": error})
}

/// Claude Code's title call sends `tools: []`, which Anthropic takes as no tools: taken so here
/// (the tools contract refuses an empty list), so the call is answered, not refused
/// (BENCHMARKS.md, "Agent CLIs at full size"). Within a session Claude Code, Codex CLI and
/// Gemini CLI resend their earlier turns as they were, so the embedded model reads a second
/// turn's prompt from its cache; what varies per request is Claude Code's billing header (the
/// first line of its system prompt), which `shapes::anthropic` leaves out of the prompt.
fn no_empty_tools(body: &mut Map<String, Value>) {
    if body
        .get("tools")
        .is_some_and(|t| t.as_array().is_some_and(Vec::is_empty))
    {
        body.remove("tools");
    }
}

/// Anthropic: `role: "system"` messages (Claude Code sends one) join the `system` prompt, in
/// order, after what `system` already says. Returns how many messages were moved.
fn system_messages(body: &mut Map<String, Value>) -> usize {
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return 0;
    };
    let sent = messages.len();
    let mut system = Vec::new();
    messages.retain(|m| {
        if m.get("role").and_then(Value::as_str) != Some("system") {
            return true;
        }
        match m.get("content") {
            Some(Value::String(text)) => system.push(json!({"type": "text", "text": text})),
            Some(Value::Array(blocks)) => system.extend(blocks.iter().cloned()),
            _ => {}
        }
        false
    });
    let moved = sent.saturating_sub(messages.len());
    if system.is_empty() {
        return moved;
    }
    let mut blocks = match body.remove("system") {
        Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    };
    blocks.extend(system);
    body.insert("system".into(), Value::Array(blocks));
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::*;

    fn shape(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .map(|e| {
                let kind = e["type"].as_str().unwrap();
                match e.get("index") {
                    Some(i) => format!("{kind}:{i}"),
                    None => kind.to_owned(),
                }
            })
            .collect()
    }

    #[test]
    fn an_empty_list_of_anthropic_tools_is_no_tools() {
        let body = serde_json::json!({"model": "m", "tools": [], "messages": []});
        let prepared = crate::api::prepare(DIALECT, body.as_object().unwrap().clone(), None, false);
        assert!(!prepared.arguments.contains_key("tools"));
        let chat = serde_json::json!({"model": "m", "tools": [], "messages": []});
        let prepared = crate::api::prepare(
            crate::api::chat::DIALECT,
            chat.as_object().unwrap().clone(),
            None,
            false,
        );
        assert!(prepared.arguments.contains_key("tools"));
    }

    #[test]
    fn a_call_is_its_own_block_after_the_text_and_the_events_fold_into_the_whole_message() {
        let answered = answered(text_and_call(), Finish::ToolUse);
        let mut e = Encoder::new("m", &[], 12);
        let events = run(&mut e, pieces(), &answered);
        assert_eq!(
            shape(&events),
            [
                "message_start",
                "content_block_start:0",
                "content_block_delta:0",
                "content_block_stop:0",
                "content_block_start:1",
                "content_block_delta:1",
                "content_block_delta:1",
                "content_block_delta:1",
                "content_block_stop:1",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[0]["message"]["usage"]["input_tokens"], 12);
        assert_eq!(events[0]["message"]["usage"]["cache_read_input_tokens"], 0);
        let whole = serde_json::to_value(e.whole(&answered.finished)).unwrap();
        assert_eq!(events[0]["message"]["id"], whole["id"]);
        assert_eq!(events[1]["content_block"]["type"], "text");
        assert_eq!(events[2]["delta"]["text"], whole["content"][0]["text"]);
        assert_eq!(events[4]["content_block"]["id"], whole["content"][1]["id"]);
        let json: String = events[5..8]
            .iter()
            .map(|d| d["delta"]["partial_json"].as_str().unwrap())
            .collect();
        let input: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(input, whole["content"][1]["input"]);
        assert_eq!(events[9]["delta"]["stop_reason"], whole["stop_reason"]);
        assert_eq!(events[9]["usage"], whole["usage"]);
        // Cached tokens are counted apart from the input, both always present.
        assert_eq!(whole["usage"]["input_tokens"], 8);
        assert_eq!(whole["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(whole["usage"]["cache_creation_input_tokens"], 0);
    }

    #[test]
    fn held_text_that_is_no_stop_sequence_is_shown_in_the_end() {
        let answered = answered(Answer::Text("ab Ex".into()), Finish::EndTurn);
        let mut e = Encoder::new("m", &["END".into()], 3);
        let events = run(&mut e, vec![Piece::Text("ab E".into())], &answered);
        assert_eq!(events[2]["delta"]["text"], "ab ");
        assert_eq!(events[3]["delta"]["text"], "Ex");
        assert_eq!(
            shape(&events)[4..],
            ["content_block_stop:0", "message_delta", "message_stop"]
        );
    }

    #[test]
    fn reasoning_streams_as_a_signed_thinking_block_before_the_text() {
        let (pieces, answered) = reasoned(answered(text_and_call(), Finish::ToolUse));
        let mut e = Encoder::new("m", &[], 12);
        let events = run(&mut e, pieces, &answered);
        assert_eq!(events[1]["type"], "content_block_start");
        assert_eq!(events[1]["content_block"]["type"], "thinking");
        let thinking: String = events
            .iter()
            .filter(|e| e["delta"]["type"] == "thinking_delta")
            .filter_map(|e| e["delta"]["thinking"].as_str())
            .collect();
        assert_eq!(thinking, "Think.");
        let signature = events
            .iter()
            .find(|e| e["delta"]["type"] == "signature_delta")
            .unwrap()["delta"]["signature"]
            .clone();
        assert_eq!(signature, crate::shapes::anthropic::signature("Think."));
        let whole = serde_json::to_value(e.whole(&answered.finished)).unwrap();
        assert_eq!(whole["content"][0]["type"], "thinking");
        assert_eq!(whole["content"][0]["thinking"], "Think.");
        assert_eq!(whole["content"][0]["signature"], signature);
        assert_eq!(whole["content"][1]["text"], "Sure.");
        // The stream's blocks are the whole message's, in order.
        let starts: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "content_block_start")
            .map(|e| &e["content_block"]["type"])
            .collect();
        assert_eq!(starts, ["thinking", "text", "tool_use"]);
    }
}
