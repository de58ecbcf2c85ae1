//! An answer as each API's stream of server-sent events: the text and the tool calls (each one's
//! start, then its arguments in pieces) as the model makes them, when the attempt's output is
//! the answer's own (see `Machine::verbatim`), the text held back only where it could still
//! become a stop sequence; at the end the rest of the API object (the text not yet shown, calls
//! not shown, the finish reason, usage) as the API's closing events. A call's `.done` events
//! carry its arguments as the answer has them.
//!
//! - chat: `chat.completion.chunk` deltas, a `finish_reason` chunk, a usage chunk when asked,
//!   `data: [DONE]`;
//! - Responses: `response.created`, `response.in_progress`, `response.output_item.added`,
//!   `response.content_part.added`, `response.output_text.delta`, the `.done` events,
//!   `response.function_call_arguments.*`, `response.completed` with the whole response;
//! - Anthropic: `message_start`, `content_block_start`, `text_delta` / `input_json_delta`,
//!   `content_block_stop`, `message_delta`, `message_stop`, `ping` while waiting;
//! - Gemini: one `GenerateContentResponse` per `data:` line, the last with `finishReason` and
//!   `usageMetadata`.

use super::{ApiError, Dialect};
use crate::fulfil::written::Piece;
use serde_json::{Map, Value, json};

/// One server-sent event, as its text.
fn frame(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// A tool call shown as it was made: its id and its content block (Anthropic), output item
/// (Responses) or index (chat).
struct LiveCall {
    id: String,
    slot: usize,
}

/// The events of one streamed answer.
pub struct Stream {
    dialect: Dialect,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    stop: crate::call::Stops,
    /// Text received and not yet shown: it could still become a stop sequence.
    held: String,
    /// Text shown so far.
    shown: String,
    /// A stop sequence was met: nothing more of the text is shown.
    stopped: bool,
    /// The content block (Anthropic) or output item (Responses) the text goes to, when open.
    text_slot: Option<usize>,
    /// Responses: the text shown in the open message item.
    item_text: String,
    /// The next content block (Anthropic) or output item (Responses).
    next_slot: usize,
    /// The tool calls shown as they were made, by their index.
    calls: Vec<LiveCall>,
    /// Anthropic: the block of the call shown last, while open.
    call_open: Option<usize>,
    /// Responses: the output items done, with their places.
    done_items: Vec<(usize, Value)>,
    /// Responses: the next `sequence_number`.
    sequence: u64,
}

impl Stream {
    /// `model` is the name the caller asked for; `stop` the call's stop sequences.
    pub fn new(dialect: Dialect, model: &str, include_usage: bool, stop: Vec<String>) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let hex = uuid::Uuid::new_v4().simple().to_string();
        let id = match dialect {
            Dialect::Chat => format!("chatcmpl-{hex}"),
            Dialect::Responses => format!("resp_{hex}"),
            Dialect::Messages => format!("msg_{hex}"),
            Dialect::Gemini => hex,
        };
        Stream {
            dialect,
            id,
            model: model.to_owned(),
            created,
            include_usage,
            stop: crate::call::Stops::new(&stop),
            held: String::new(),
            shown: String::new(),
            stopped: false,
            text_slot: None,
            item_text: String::new(),
            next_slot: 0,
            calls: Vec::new(),
            call_open: None,
            done_items: Vec::new(),
            sequence: 0,
        }
    }

    fn responses_event(&mut self, kind: &str, mut payload: Map<String, Value>) -> String {
        payload.insert("type".into(), json!(kind));
        payload.insert("sequence_number".into(), json!(self.sequence));
        self.sequence += 1;
        frame(Some(kind), &Value::Object(payload))
    }

    fn response_shell(&self, status: &str) -> Value {
        json!({"id": self.id, "object": "response", "created_at": self.created,
               "status": status, "model": self.model, "output": []})
    }

    /// What opens the stream.
    pub fn start(&mut self) -> Vec<String> {
        match self.dialect {
            Dialect::Chat => vec![frame(
                None,
                &self.chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            )],
            Dialect::Responses => {
                let created = self.response_shell("in_progress");
                let mut out = Vec::with_capacity(2);
                for kind in ["response.created", "response.in_progress"] {
                    let mut p = Map::new();
                    p.insert("response".into(), created.clone());
                    out.push(self.responses_event(kind, p));
                }
                out
            }
            Dialect::Messages => vec![frame(
                Some("message_start"),
                &json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 0, "output_tokens": 0,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
            )],
            Dialect::Gemini => Vec::new(),
        }
    }

    /// Anthropic's keep-alive while the answer is made.
    pub fn ping(&self) -> Option<String> {
        (self.dialect == Dialect::Messages).then(|| frame(Some("ping"), &json!({"type": "ping"})))
    }

    fn chunk(&self, delta: Value, finish_reason: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
    }

    /// What a piece of the answer shows, as the model made it.
    pub fn piece(&mut self, piece: Piece) -> Vec<String> {
        match piece {
            Piece::Text(text) => self.text(&text),
            Piece::CallStart { index, id, name } => self.tool_start(index, &id, &name),
            Piece::CallArgs { index, fragment } => self.tool_args(index, &fragment),
        }
    }

    /// A piece of the answer's text as the model made it.
    pub fn text(&mut self, delta: &str) -> Vec<String> {
        if self.stopped {
            return Vec::new();
        }
        self.held.push_str(delta);
        // The matcher reads the delta only: the work is the delta's length per sequence.
        let safe = match self.stop.feed(delta).map(|(back, _)| back) {
            Some(back) => {
                self.held.truncate(self.held.len().saturating_sub(back));
                self.stopped = true;
                self.held.len()
            }
            None => self.held.len().saturating_sub(self.stop.held()),
        };
        // A boundary: a stop sequence begins at one (`held` is whole characters).
        let Some((show, keep)) = self.held.split_at_checked(safe) else {
            return Vec::new();
        };
        let (show, keep) = (show.to_owned(), keep.to_owned());
        self.held = keep;
        self.show(&show)
    }

    fn show(&mut self, text: &str) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        self.shown.push_str(text);
        let mut out = self.open_text();
        let slot = self.text_slot.unwrap_or(0);
        out.push(match self.dialect {
            Dialect::Chat => frame(None, &self.chunk(json!({"content": text}), Value::Null)),
            Dialect::Responses => {
                self.item_text.push_str(text);
                let mut p = self.item_payload(&self.message_item_id(slot), slot);
                p.insert("content_index".into(), json!(0));
                p.insert("delta".into(), json!(text));
                self.responses_event("response.output_text.delta", p)
            }
            Dialect::Messages => frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": slot,
                        "delta": {"type": "text_delta", "text": text}}),
            ),
            Dialect::Gemini => frame(
                None,
                &json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                        "index": 0}],
                        "modelVersion": self.model, "responseId": self.id}),
            ),
        });
        out
    }

    /// Responses: the id of the message item in output slot `slot`.
    fn message_item_id(&self, slot: usize) -> String {
        let hex = self.id.trim_start_matches("resp_");
        match slot {
            0 => format!("msg_{hex}"),
            n => format!("msg_{hex}_{n}"),
        }
    }

    /// Responses: a payload naming an item and its place in the output.
    fn item_payload(&self, item_id: &str, slot: usize) -> Map<String, Value> {
        let mut p = Map::new();
        p.insert("item_id".into(), json!(item_id));
        p.insert("output_index".into(), json!(slot));
        p
    }

    /// The next content block (Anthropic) or output item (Responses).
    fn take_slot(&mut self) -> usize {
        let slot = self.next_slot;
        self.next_slot += 1;
        slot
    }

    /// Opens a text block (Anthropic) or a message item and its part (Responses) when none is
    /// open, closing the block of a call shown before it.
    fn open_text(&mut self) -> Vec<String> {
        if self.text_slot.is_some()
            || !matches!(self.dialect, Dialect::Messages | Dialect::Responses)
        {
            return Vec::new();
        }
        let mut out = self.close_call_block();
        let slot = self.take_slot();
        self.text_slot = Some(slot);
        if self.dialect == Dialect::Messages {
            out.push(frame(
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": slot,
                        "content_block": {"type": "text", "text": ""}}),
            ));
            return out;
        }
        let id = self.message_item_id(slot);
        let mut item = Map::new();
        item.insert("output_index".into(), json!(slot));
        item.insert(
            "item".into(),
            json!({"id": id, "type": "message", "status": "in_progress",
                   "role": "assistant", "content": []}),
        );
        let mut part = self.item_payload(&id, slot);
        part.insert("content_index".into(), json!(0));
        part.insert(
            "part".into(),
            json!({"type": "output_text", "text": "", "annotations": []}),
        );
        out.push(self.responses_event("response.output_item.added", item));
        out.push(self.responses_event("response.content_part.added", part));
        out
    }

    /// Closes the open text block (Anthropic) or message item (Responses).
    fn close_text(&mut self) -> Vec<String> {
        let Some(slot) = self.text_slot.take() else {
            return Vec::new();
        };
        match self.dialect {
            Dialect::Messages => vec![self.block_stop(slot)],
            Dialect::Responses => {
                let text = std::mem::take(&mut self.item_text);
                self.message_done(slot, text)
            }
            Dialect::Chat | Dialect::Gemini => Vec::new(),
        }
    }

    /// Anthropic: closes the block of the call shown last.
    fn close_call_block(&mut self) -> Vec<String> {
        self.call_open
            .take()
            .map(|slot| self.block_stop(slot))
            .into_iter()
            .collect()
    }

    /// Responses: a message item's text's and part's `.done` events and the item's own.
    fn message_done(&mut self, slot: usize, text: String) -> Vec<String> {
        let id = self.message_item_id(slot);
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        let mut out = Vec::with_capacity(3);
        for (kind, key, value) in [
            ("response.output_text.done", "text", json!(text)),
            ("response.content_part.done", "part", part.clone()),
        ] {
            let mut p = self.item_payload(&id, slot);
            p.insert("content_index".into(), json!(0));
            p.insert(key.into(), value);
            out.push(self.responses_event(kind, p));
        }
        let item = json!({"id": id, "type": "message", "status": "completed",
                          "role": "assistant", "content": [part]});
        out.push(self.item_done(slot, item));
        out
    }

    /// Responses: `response.output_item.done` (which Codex reads the answer from); the item
    /// joins the response's output.
    fn item_done(&mut self, slot: usize, item: Value) -> String {
        self.done_items.push((slot, item.clone()));
        let mut p = Map::new();
        p.insert("output_index".into(), json!(slot));
        p.insert("item".into(), item);
        self.responses_event("response.output_item.done", p)
    }

    /// The model began its call numbered `index`: shown at once, before its arguments (Gemini
    /// sends a call whole, at the end). A call out of order is shown at the end.
    pub fn tool_start(&mut self, index: usize, id: &str, name: &str) -> Vec<String> {
        if !self.dialect.streams_calls() || index != self.calls.len() {
            return Vec::new();
        }
        // Text held for a stop sequence that did not come before the call.
        let held = std::mem::take(&mut self.held);
        let mut out = self.show(&held);
        let slot = match self.dialect {
            Dialect::Chat => {
                let start = json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]});
                out.push(frame(None, &self.chunk(start, Value::Null)));
                index
            }
            Dialect::Messages => {
                out.extend(self.close_text());
                out.extend(self.close_call_block());
                let slot = self.take_slot();
                self.call_open = Some(slot);
                out.push(frame(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": slot,
                            "content_block": {"type": "tool_use", "id": id, "name": name,
                                              "input": {}}}),
                ));
                slot
            }
            Dialect::Responses | Dialect::Gemini => {
                out.extend(self.close_text());
                let slot = self.take_slot();
                let mut p = Map::new();
                p.insert("output_index".into(), json!(slot));
                p.insert(
                    "item".into(),
                    json!({"id": format!("fc_{id}"), "type": "function_call", "call_id": id,
                           "name": name, "arguments": "", "status": "in_progress"}),
                );
                out.push(self.responses_event("response.output_item.added", p));
                slot
            }
        };
        self.calls.push(LiveCall {
            id: id.to_owned(),
            slot,
        });
        out
    }

    /// More of the arguments of the call numbered `index`, shown as they came.
    pub fn tool_args(&mut self, index: usize, fragment: &str) -> Vec<String> {
        let Some(call) = self.calls.get(index) else {
            return Vec::new();
        };
        let (slot, id) = (call.slot, call.id.clone());
        let event = match self.dialect {
            Dialect::Chat => {
                let args = json!({"tool_calls": [{"index": index,
                    "function": {"arguments": fragment}}]});
                frame(None, &self.chunk(args, Value::Null))
            }
            Dialect::Messages => frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": slot,
                        "delta": {"type": "input_json_delta", "partial_json": fragment}}),
            ),
            Dialect::Responses => {
                let mut p = self.item_payload(&format!("fc_{id}"), slot);
                p.insert("delta".into(), json!(fragment));
                self.responses_event("response.function_call_arguments.delta", p)
            }
            Dialect::Gemini => return Vec::new(),
        };
        vec![event]
    }

    /// Whether the call with this id was shown as it was made.
    fn shown_call(&self, id: Option<&Value>) -> Option<&LiveCall> {
        let id = id.and_then(Value::as_str)?;
        self.calls.iter().find(|c| c.id == id)
    }

    /// The rest of a text the stream has shown part of.
    fn rest<'t>(&self, text: &'t str) -> &'t str {
        text.strip_prefix(self.shown.as_str()).unwrap_or_else(|| {
            // The answer trimmed white space the stream showed.
            if !self.shown.trim().starts_with(text.trim()) {
                tracing::warn!("the streamed text is not the start of the answer");
            }
            ""
        })
    }

    /// What closes the stream, from the answer's API object (`object`, as the non-streamed
    /// response's body would be).
    pub fn finish(&mut self, object: &Map<String, Value>) -> Vec<String> {
        match self.dialect {
            Dialect::Chat => self.finish_chat(object),
            Dialect::Responses => self.finish_responses(object),
            Dialect::Messages => self.finish_messages(object),
            Dialect::Gemini => self.finish_gemini(object),
        }
    }

    fn finish_chat(&mut self, object: &Map<String, Value>) -> Vec<String> {
        let choice = object
            .get("choices")
            .and_then(|c| c.get(0))
            .cloned()
            .unwrap_or_default();
        let message = choice.get("message").cloned().unwrap_or_default();
        let text = message.get("content").and_then(Value::as_str).unwrap_or("");
        let mut out = self.show(self.rest(text));
        let calls = message.get("tool_calls").and_then(Value::as_array);
        let unshown = calls
            .into_iter()
            .flatten()
            .filter(|call| self.shown_call(call.get("id")).is_none());
        for (index, call) in (self.calls.len()..).zip(unshown) {
            let function = call.get("function").cloned().unwrap_or_default();
            let start = json!({"tool_calls": [{"index": index, "id": call.get("id"),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": ""}}]});
            out.push(frame(None, &self.chunk(start, Value::Null)));
            let arguments = function.get("arguments").cloned().unwrap_or(json!(""));
            let args = json!({"tool_calls": [{"index": index,
                "function": {"arguments": arguments}}]});
            out.push(frame(None, &self.chunk(args, Value::Null)));
        }
        let finish = choice
            .get("finish_reason")
            .cloned()
            .unwrap_or(json!("stop"));
        out.push(frame(None, &self.chunk(json!({}), finish)));
        if self.include_usage {
            let mut usage = self.chunk(json!({}), Value::Null);
            if let Some(o) = usage.as_object_mut() {
                o.insert("choices".into(), json!([]));
                o.insert(
                    "usage".into(),
                    object.get("usage").cloned().unwrap_or_default(),
                );
            }
            out.push(frame(None, &usage));
        }
        out.push("data: [DONE]\n\n".to_owned());
        out
    }

    fn finish_messages(&mut self, object: &Map<String, Value>) -> Vec<String> {
        let mut out = Vec::new();
        let blocks = object
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut first_text = true;
        for block in &blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                    if first_text {
                        out.extend(self.show(self.rest(text)));
                        if self.next_slot == 0 {
                            out.extend(self.open_text());
                        }
                        first_text = false;
                    } else {
                        out.extend(self.close_text());
                        out.extend(self.show(text));
                    }
                }
                Some("tool_use") if self.shown_call(block.get("id")).is_none() => {
                    out.extend(self.close_text());
                    out.extend(self.close_call_block());
                    let slot = self.take_slot();
                    let input = block.get("input").cloned().unwrap_or(json!({}));
                    out.push(frame(
                        Some("content_block_start"),
                        &json!({"type": "content_block_start", "index": slot,
                                "content_block": {"type": "tool_use", "id": block.get("id"),
                                                  "name": block.get("name"), "input": {}}}),
                    ));
                    out.push(frame(
                        Some("content_block_delta"),
                        &json!({"type": "content_block_delta", "index": slot,
                                "delta": {"type": "input_json_delta",
                                          "partial_json": input.to_string()}}),
                    ));
                    out.push(self.block_stop(slot));
                }
                _ => {}
            }
        }
        out.extend(self.close_text());
        out.extend(self.close_call_block());
        out.extend(self.message_end(object));
        out
    }

    /// Anthropic's `message_delta` (the stop reason, the usage) and `message_stop`.
    fn message_end(&self, object: &Map<String, Value>) -> [String; 2] {
        let mut usage = object.get("usage").cloned().unwrap_or_default();
        if let Some(u) = usage.as_object_mut() {
            u.remove("estimated");
        }
        [
            frame(
                Some("message_delta"),
                &json!({"type": "message_delta",
                        "delta": {"stop_reason": object.get("stop_reason"),
                                  "stop_sequence": object.get("stop_sequence")},
                        "usage": usage}),
            ),
            frame(Some("message_stop"), &json!({"type": "message_stop"})),
        ]
    }

    fn block_stop(&self, index: usize) -> String {
        frame(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        )
    }

    fn finish_responses(&mut self, object: &Map<String, Value>) -> Vec<String> {
        let mut response = object.clone();
        response.insert("id".into(), json!(self.id));
        response.insert("created_at".into(), json!(self.created));
        let items = response
            .get("output")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        for item in items {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => self.message_item(&item, &mut out),
                Some("function_call") => self.function_call_item(item, &mut out),
                _ => {
                    let slot = self.take_slot();
                    out.push(self.item_done(slot, item));
                }
            }
        }
        out.extend(self.close_text());
        let mut done = std::mem::take(&mut self.done_items);
        done.sort_by_key(|(slot, _)| *slot);
        let output = done.into_iter().map(|(_, item)| item).collect();
        response.insert("output".into(), Value::Array(output));
        let mut p = Map::new();
        p.insert("response".into(), Value::Object(response));
        out.push(self.responses_event("response.completed", p));
        out
    }

    /// A message item: its text not yet shown (the item opened if nothing was), then closed.
    fn message_item(&mut self, item: &Value, out: &mut Vec<String>) {
        let text = item
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or("");
        out.extend(self.show(self.rest(text)));
        if self.next_slot == 0 {
            out.extend(self.open_text());
        }
        out.extend(self.close_text());
    }

    /// A function call item: one shown as it was made gets its arguments' `.done` and the
    /// item's; another is added (arguments empty), its arguments sent as one delta, done.
    fn function_call_item(&mut self, mut item: Value, out: &mut Vec<String>) {
        if let Some(o) = item.as_object_mut() {
            o.insert("status".into(), json!("completed"));
        }
        let id = item
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let arguments = item.get("arguments").cloned().unwrap_or(json!(""));
        let slot = match self.shown_call(item.get("call_id")) {
            Some(call) => call.slot,
            None => {
                out.extend(self.close_text());
                let slot = self.take_slot();
                let mut added = item.clone();
                if let Some(o) = added.as_object_mut() {
                    o.insert("arguments".into(), json!(""));
                    o.insert("status".into(), json!("in_progress"));
                }
                let mut p = Map::new();
                p.insert("output_index".into(), json!(slot));
                p.insert("item".into(), added);
                out.push(self.responses_event("response.output_item.added", p));
                let mut p = self.item_payload(&id, slot);
                p.insert("delta".into(), arguments.clone());
                out.push(self.responses_event("response.function_call_arguments.delta", p));
                slot
            }
        };
        let mut p = self.item_payload(&id, slot);
        p.insert("arguments".into(), arguments);
        out.push(self.responses_event("response.function_call_arguments.done", p));
        out.push(self.item_done(slot, item));
    }

    fn finish_gemini(&mut self, object: &Map<String, Value>) -> Vec<String> {
        let mut last = object.clone();
        // The text shown already is not sent again: the last chunk has the rest.
        if let Some(Value::Array(parts)) = last
            .get_mut("candidates")
            .and_then(|c| c.pointer_mut("/0/content/parts"))
        {
            let mut rest_done = false;
            for part in parts.iter_mut() {
                if rest_done {
                    break;
                }
                if let Some(Value::String(text)) = part.get_mut("text") {
                    *text = self.rest(text).to_owned();
                    rest_done = true;
                }
            }
            parts.retain(|p| p.get("text").is_none_or(|t| t.as_str() != Some("")));
        }
        last.insert("responseId".into(), json!(self.id));
        vec![frame(None, &Value::Object(last))]
    }

    /// An error after the stream began, in the API's own form.
    pub fn error(&mut self, e: &ApiError) -> Vec<String> {
        let body = e.body(self.dialect);
        match self.dialect {
            Dialect::Messages => vec![frame(Some("error"), &body)],
            Dialect::Responses => {
                let mut p = Map::new();
                p.insert("message".into(), json!(e.message));
                p.insert(
                    "code".into(),
                    body.pointer("/error/type").cloned().unwrap_or_default(),
                );
                vec![self.responses_event("error", p)]
            }
            Dialect::Chat => vec![frame(None, &body), "data: [DONE]\n\n".to_owned()],
            Dialect::Gemini => vec![frame(None, &body)],
        }
    }
}

impl super::Encode for Stream {
    fn start(&mut self) -> Vec<String> {
        Stream::start(self)
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        Stream::piece(self, piece)
    }

    fn ping(&self) -> Option<String> {
        Stream::ping(self)
    }

    fn finish(&mut self, answered: &crate::service::Answered) -> Vec<String> {
        Stream::finish(self, &answered.rendered.object)
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        Stream::error(self, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(frames: &[String]) -> Vec<Value> {
        frames
            .iter()
            .filter_map(|f| f.lines().find_map(|l| l.strip_prefix("data: ")))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn a_stop_sequence_split_across_deltas_is_never_shown() {
        let mut s = Stream::new(Dialect::Chat, "m", false, vec!["END".into()]);
        let mut shown = String::new();
        for piece in ["Hello E", "N", "D and more"] {
            for d in data(&s.text(piece)) {
                shown.push_str(d["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(shown, "Hello ");
        assert!(s.stopped);
    }

    #[test]
    fn held_text_that_is_no_stop_sequence_is_shown_in_the_end() {
        let mut s = Stream::new(Dialect::Messages, "m", false, vec!["END".into()]);
        s.start();
        let live = data(&s.text("ab E"));
        assert_eq!(live[1]["delta"]["text"], "ab ");
        let object = json!({"content": [{"type": "text", "text": "ab Ex"}], "stop_reason": "end_turn",
                            "usage": {"input_tokens": 3, "output_tokens": 2}});
        let end = data(&s.finish(object.as_object().unwrap()));
        assert_eq!(end[0]["delta"]["text"], "Ex");
        let kinds: Vec<&str> = end.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }

    /// A stream shown "Sure." and the call `call_1` in three pieces, then finished by the
    /// answer's object; the events' data.
    fn live_call(dialect: Dialect, object: Value) -> Vec<Value> {
        let mut s = Stream::new(dialect, "m", false, Vec::new());
        let mut frames = s.start();
        frames.extend(s.piece(Piece::Text("Sure.".into())));
        frames.extend(s.piece(Piece::CallStart {
            index: 0,
            id: "call_1".into(),
            name: "get_weather".into(),
        }));
        for fragment in ["{\"city\"", ": \"Par", "is\"}"] {
            frames.extend(s.piece(Piece::CallArgs {
                index: 0,
                fragment: fragment.into(),
            }));
        }
        frames.extend(s.finish(object.as_object().unwrap()));
        data(&frames)
    }

    #[test]
    fn a_chat_call_streams_its_arguments_in_pieces_and_is_not_sent_again() {
        let object = json!({"choices": [{"message": {"content": "Sure.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            "finish_reason": "tool_calls"}]});
        let events = live_call(Dialect::Chat, object);
        let calls: Vec<&Value> = events
            .iter()
            .filter_map(|e| e.pointer("/choices/0/delta/tool_calls/0"))
            .collect();
        assert_eq!(calls.len(), 4, "{calls:?}");
        assert_eq!(calls[0]["id"], "call_1");
        assert!(calls.iter().all(|c| c["index"] == 0));
        let args: String = calls
            .iter()
            .filter_map(|c| c.pointer("/function/arguments").and_then(Value::as_str))
            .collect();
        assert_eq!(args, "{\"city\": \"Paris\"}");
        let last = events.last().unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn an_anthropic_call_is_its_own_block_after_the_text() {
        let object = json!({"content": [{"type": "text", "text": "Sure."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2}});
        let events = live_call(Dialect::Messages, object);
        let shape: Vec<String> = events
            .iter()
            .map(|e| {
                let kind = e["type"].as_str().unwrap();
                match e.get("index") {
                    Some(i) => format!("{kind}:{i}"),
                    None => kind.to_owned(),
                }
            })
            .collect();
        assert_eq!(
            shape,
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
        assert_eq!(events[4]["content_block"]["id"], "call_1");
        assert_eq!(events[6]["delta"]["partial_json"], ": \"Par");
    }

    #[test]
    fn a_responses_call_is_an_item_done_with_the_answers_arguments() {
        let object = json!({"object": "response", "status": "completed", "output": [
            {"type": "message", "id": "x", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Sure.", "annotations": []}]},
            {"type": "function_call", "id": "fc_call_1", "call_id": "call_1",
             "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}]});
        let events = live_call(Dialect::Responses, object);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
        // The message is done before the call is added, and the call's pieces follow it.
        assert!(at("response.output_item.done") < at("response.function_call_arguments.delta"));
        let deltas = kinds
            .iter()
            .filter(|k| **k == "response.function_call_arguments.delta")
            .count();
        assert_eq!(deltas, 3);
        let completed = events.last().unwrap();
        assert_eq!(completed["type"], "response.completed");
        let output = completed["response"]["output"].as_array().unwrap();
        assert_eq!(output.len(), 2);
        assert_eq!(output[0]["content"][0]["text"], "Sure.");
        assert_eq!(output[1]["call_id"], "call_1");
        assert_eq!(output[1]["arguments"], "{\"city\":\"Paris\"}");
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1));
    }
}
