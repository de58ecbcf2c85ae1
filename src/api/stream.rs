//! An answer as each API's stream of server-sent events: the text as the model makes it (when
//! the call cannot be repaired, see [`super::streams_live`]), held back only where it could still
//! become a stop sequence, and at the end the rest of the API object (the text not yet shown,
//! tool calls, the finish reason, usage) as the API's closing events.
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
use serde_json::{Map, Value, json};

/// One server-sent event, as its text.
fn frame(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// The events of one streamed answer.
pub struct Stream {
    dialect: Dialect,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    stop: Vec<String>,
    /// Text received and not yet shown: it could still become a stop sequence.
    held: String,
    /// Text shown so far.
    shown: String,
    /// A stop sequence was met: nothing more of the text is shown.
    stopped: bool,
    /// The text block (Anthropic) or message item (Responses) is open.
    text_open: bool,
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
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            shown: String::new(),
            stopped: false,
            text_open: false,
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

    /// A piece of the answer's text as the model made it.
    pub fn text(&mut self, delta: &str) -> Vec<String> {
        if self.stopped {
            return Vec::new();
        }
        self.held.push_str(delta);
        let safe = match self.earliest_stop() {
            Some(at) => {
                self.held.truncate(at);
                self.stopped = true;
                self.held.len()
            }
            None => self.safe_len(),
        };
        let (show, keep) = self.held.split_at(safe);
        let (show, keep) = (show.to_owned(), keep.to_owned());
        self.held = keep;
        self.show(&show)
    }

    /// Where the first stop sequence begins in the held text.
    fn earliest_stop(&self) -> Option<usize> {
        self.stop
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
    }

    /// How much of the held text can be shown: all but a tail that begins a stop sequence.
    fn safe_len(&self) -> usize {
        let mut safe = self.held.len();
        for s in &self.stop {
            for (i, _) in self.held.char_indices() {
                if i < safe && s.starts_with(self.held.get(i..).unwrap_or_default()) {
                    safe = i;
                    break;
                }
            }
        }
        safe
    }

    fn show(&mut self, text: &str) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        self.shown.push_str(text);
        let mut out = self.open_text();
        out.push(match self.dialect {
            Dialect::Chat => frame(None, &self.chunk(json!({"content": text}), Value::Null)),
            Dialect::Responses => {
                let mut p = Map::new();
                p.insert("item_id".into(), json!(self.message_item_id()));
                p.insert("output_index".into(), json!(0));
                p.insert("content_index".into(), json!(0));
                p.insert("delta".into(), json!(text));
                self.responses_event("response.output_text.delta", p)
            }
            Dialect::Messages => frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0,
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

    fn message_item_id(&self) -> String {
        format!("msg_{}", self.id.trim_start_matches("resp_"))
    }

    /// Opens the text block (Anthropic) or the message item and its part (Responses).
    fn open_text(&mut self) -> Vec<String> {
        if self.text_open {
            return Vec::new();
        }
        self.text_open = true;
        match self.dialect {
            Dialect::Messages => vec![frame(
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
            )],
            Dialect::Responses => {
                let mut item = Map::new();
                item.insert("output_index".into(), json!(0));
                item.insert(
                    "item".into(),
                    json!({"id": self.message_item_id(), "type": "message", "status": "in_progress",
                           "role": "assistant", "content": []}),
                );
                let mut part = Map::new();
                part.insert("item_id".into(), json!(self.message_item_id()));
                part.insert("output_index".into(), json!(0));
                part.insert("content_index".into(), json!(0));
                part.insert(
                    "part".into(),
                    json!({"type": "output_text", "text": "", "annotations": []}),
                );
                vec![
                    self.responses_event("response.output_item.added", item),
                    self.responses_event("response.content_part.added", part),
                ]
            }
            Dialect::Chat | Dialect::Gemini => Vec::new(),
        }
    }

    /// The rest of a text the stream has shown part of.
    fn rest<'t>(&self, text: &'t str) -> &'t str {
        text.strip_prefix(self.shown.as_str()).unwrap_or_else(|| {
            tracing::warn!("the streamed text is not the start of the answer");
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
        if let Some(Value::Array(calls)) = message.get("tool_calls") {
            for (index, call) in calls.iter().enumerate() {
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
        let mut index = 0;
        for block in &blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                    if index == 0 {
                        out.extend(self.show(self.rest(text)));
                        out.extend(self.open_text());
                    } else {
                        out.push(frame(Some("content_block_start"), &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
                        out.push(frame(Some("content_block_delta"), &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})));
                    }
                }
                Some("tool_use") => {
                    if index == 0 && self.text_open {
                        // Text shown live came before: it is block 0.
                        out.push(self.block_stop(0));
                        index = 1;
                    }
                    let input = block.get("input").cloned().unwrap_or(json!({}));
                    out.push(frame(
                        Some("content_block_start"),
                        &json!({"type": "content_block_start", "index": index,
                                "content_block": {"type": "tool_use", "id": block.get("id"),
                                                  "name": block.get("name"), "input": {}}}),
                    ));
                    out.push(frame(
                        Some("content_block_delta"),
                        &json!({"type": "content_block_delta", "index": index,
                                "delta": {"type": "input_json_delta",
                                          "partial_json": input.to_string()}}),
                    ));
                }
                _ => continue,
            }
            out.push(self.block_stop(index));
            index += 1;
        }
        let mut usage = object.get("usage").cloned().unwrap_or_default();
        if let Some(u) = usage.as_object_mut() {
            u.remove("estimated");
        }
        out.push(frame(
            Some("message_delta"),
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": object.get("stop_reason"),
                              "stop_sequence": object.get("stop_sequence")},
                    "usage": usage}),
        ));
        out.push(frame(
            Some("message_stop"),
            &json!({"type": "message_stop"}),
        ));
        out
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
        let mut done_items = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let item = self.responses_item(index, item, &mut out);
            done_items.push(item);
        }
        response.insert("output".into(), Value::Array(done_items));
        let mut p = Map::new();
        p.insert("response".into(), Value::Object(response));
        out.push(self.responses_event("response.completed", p));
        out
    }

    /// One output item's events, ending with `response.output_item.done` (which Codex reads
    /// the answer from); the item as done.
    fn responses_item(&mut self, index: usize, mut item: Value, out: &mut Vec<String>) -> Value {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => self.message_item(index, &mut item, out),
            Some("function_call") => self.function_call_item(index, &mut item, out),
            _ => {}
        }
        let mut p = Map::new();
        p.insert("output_index".into(), json!(index));
        p.insert("item".into(), item.clone());
        out.push(self.responses_event("response.output_item.done", p));
        item
    }

    /// A message item: its text not yet shown, then the text's and the part's `.done` events;
    /// the item completed in place.
    fn message_item(&mut self, index: usize, item: &mut Value, out: &mut Vec<String>) {
        let text = item
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if index == 0 {
            out.extend(self.show(self.rest(&text)));
            out.extend(self.open_text());
        }
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        if let Some(o) = item.as_object_mut() {
            o.insert("id".into(), json!(self.message_item_id()));
            o.insert("status".into(), json!("completed"));
            o.insert("content".into(), json!([part]));
        }
        for (kind, key, value) in [
            ("response.output_text.done", "text", json!(text)),
            ("response.content_part.done", "part", part),
        ] {
            let mut p = Map::new();
            p.insert("item_id".into(), json!(self.message_item_id()));
            p.insert("output_index".into(), json!(index));
            p.insert("content_index".into(), json!(0));
            p.insert(key.into(), value);
            out.push(self.responses_event(kind, p));
        }
    }

    /// A function call item: added (arguments empty), its arguments as one delta, done; the
    /// item completed in place.
    fn function_call_item(&mut self, index: usize, item: &mut Value, out: &mut Vec<String>) {
        if let Some(o) = item.as_object_mut() {
            o.insert("status".into(), json!("completed"));
        }
        let id = item.get("id").cloned().unwrap_or_default();
        let mut added = item.clone();
        if let Some(o) = added.as_object_mut() {
            o.insert("arguments".into(), json!(""));
            o.insert("status".into(), json!("in_progress"));
        }
        let mut p = Map::new();
        p.insert("output_index".into(), json!(index));
        p.insert("item".into(), added);
        out.push(self.responses_event("response.output_item.added", p));
        let arguments = item.get("arguments").cloned().unwrap_or(json!(""));
        for (kind, key) in [
            ("response.function_call_arguments.delta", "delta"),
            ("response.function_call_arguments.done", "arguments"),
        ] {
            let mut p = Map::new();
            p.insert("item_id".into(), id.clone());
            p.insert("output_index".into(), json!(index));
            p.insert(key.into(), arguments.clone());
            out.push(self.responses_event(kind, p));
        }
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
}
