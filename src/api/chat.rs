//! OpenAI chat completions: the `chat.completion` object and the stream of
//! `chat.completion.chunk`s, written by one [`Encoder`] from typed values. The whole answer
//! is what the stream's chunks add up to: the same id, model, text, calls and finish reason.

use super::dialect::{self, Dialect, Endpoint, Opening, Route, Wire};
use super::gate::TextGate;
use super::logprobs::{self, Pending};
use super::sse::{frame, now, text_and_calls};
use super::{ApiError, Encode, ErrorKind};
use crate::call::{Answer, Finish};
use crate::fulfil::written::Piece;
use crate::service::{Answered, Finished};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Function {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// In a chunk: the call's place in the message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: Function,
}

/// The assistant's message, whole or as a chunk's delta.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Message {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Whole: the text, `null` for a message that only calls tools; a delta: the new text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Option<String>>,
    /// The model's reasoning (whole) or more of it (a delta), as llama-server, vLLM and
    /// DeepSeek send it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<Message>,
    /// The tokens' log-probabilities, when asked for (`logprobs: true`) and reported; in a
    /// chunk, those of the text it carries.
    pub logprobs: Option<logprobs::Choice>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CachedTokens {
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// The prompt tokens read from a cache, when the backend says (the embedded model always
    /// does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<CachedTokens>,
    /// Counted by this server from the text, not by the model.
    pub estimated: bool,
}

impl From<crate::call::Usage> for Usage {
    fn from(u: crate::call::Usage) -> Self {
        Usage {
            prompt_tokens: u.prompt,
            completion_tokens: u.completion,
            total_tokens: u.total(),
            prompt_tokens_details: u.cached.map(|cached_tokens| CachedTokens { cached_tokens }),
            estimated: u.estimated,
        }
    }
}

/// A `chat.completion` or a `chat.completion.chunk`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Why the answer ended, as chat completions say it.
fn finish_reason(finished: &Finished) -> &'static str {
    if matches!(finished.answer, Answer::ToolCalls { .. }) {
        return "tool_calls";
    }
    match finished.finish {
        Finish::MaxTokens => "length",
        Finish::ToolUse => "tool_calls",
        Finish::EndTurn | Finish::StopSequence(_) => "stop",
    }
}

/// One chat completion, as its chunks while it is made and as its object when done.
pub struct Encoder {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    gate: TextGate,
    /// The ids of the calls shown as they were made, in order.
    calls: Vec<String>,
    /// Reasoning was shown as it was made.
    reasoned: bool,
    /// The log-probabilities told and not written yet, when asked for.
    logprobs: Pending,
}

impl Encoder {
    /// A completion answered by `model`, its text stopped at `stop`; `include_usage` adds the
    /// usage chunk (`stream_options.include_usage`).
    pub fn new(model: &str, stop: &[String], include_usage: bool) -> Self {
        Encoder {
            id: crate::call::new_id("chatcmpl-"),
            created: now(),
            model: model.to_owned(),
            include_usage,
            gate: TextGate::new(stop),
            calls: Vec::new(),
            reasoned: false,
            logprobs: Pending::default(),
        }
    }

    /// `self` writing the log-probabilities of the text each chunk carries, when `asked`.
    pub fn with_logprobs(mut self, asked: bool) -> Self {
        self.logprobs = Pending::new(asked);
        self
    }

    /// `self` with the id `id` when one is given.
    pub fn named(mut self, id: Option<&str>) -> Self {
        if let Some(id) = id {
            self.id = id.to_owned();
        }
        self
    }

    /// The whole `chat.completion` for an answer.
    pub fn whole(&self, finished: &Finished) -> Completion {
        let (text, calls) = text_and_calls(&finished.answer);
        let tool_calls: Vec<ToolCall> = calls
            .iter()
            .map(|c| ToolCall {
                index: None,
                id: Some(c.id.clone()),
                kind: Some("function"),
                function: Function {
                    name: Some(c.name.clone()),
                    arguments: c.arguments_json(),
                },
            })
            .collect();
        let content = if text.is_empty() && !tool_calls.is_empty() {
            None
        } else {
            Some(text)
        };
        Completion {
            id: self.id.clone(),
            object: "chat.completion",
            created: self.created,
            model: finished.model.clone(),
            choices: vec![Choice {
                index: 0,
                message: Some(Message {
                    role: Some("assistant"),
                    content: Some(content),
                    reasoning_content: finished.reasoning.clone(),
                    tool_calls,
                }),
                delta: None,
                logprobs: finished.logprobs.as_deref().map(logprobs::Choice::of),
                finish_reason: Some(finish_reason(finished)),
            }],
            usage: Some(finished.usage.into()),
        }
    }

    fn chunk(&self, delta: Message, finish_reason: Option<&'static str>) -> String {
        self.chunk_with(delta, None, finish_reason)
    }

    fn chunk_with(
        &self,
        delta: Message,
        logprobs: Option<logprobs::Choice>,
        finish_reason: Option<&'static str>,
    ) -> String {
        frame(
            None,
            &Completion {
                id: self.id.clone(),
                object: "chat.completion.chunk",
                created: self.created,
                model: self.model.clone(),
                choices: vec![Choice {
                    index: 0,
                    message: None,
                    delta: Some(delta),
                    logprobs,
                    finish_reason,
                }],
                usage: None,
            },
        )
    }

    /// A chunk of `text`, with the log-probabilities held (when asked for).
    fn text(&mut self, text: String) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        let logprobs = (self.logprobs.asked()).then(|| logprobs::Choice::of(&self.logprobs.take()));
        vec![self.chunk_with(
            Message {
                content: Some(Some(text)),
                ..Message::default()
            },
            logprobs,
            None,
        )]
    }

    fn reasoning_chunk(&self, text: String) -> String {
        self.chunk(
            Message {
                reasoning_content: Some(text),
                ..Message::default()
            },
            None,
        )
    }

    fn call_chunk(&self, index: usize, start: Option<(&str, &str)>, arguments: &str) -> String {
        let call = ToolCall {
            index: Some(index),
            id: start.map(|(id, _)| id.to_owned()),
            kind: start.map(|_| "function"),
            function: Function {
                name: start.map(|(_, name)| name.to_owned()),
                arguments: arguments.to_owned(),
            },
        };
        self.chunk(
            Message {
                tool_calls: vec![call],
                ..Message::default()
            },
            None,
        )
    }
}

impl Encode for Encoder {
    fn start(&mut self) -> Vec<String> {
        vec![self.chunk(
            Message {
                role: Some("assistant"),
                content: Some(Some(String::new())),
                ..Message::default()
            },
            None,
        )]
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        match piece {
            Piece::Text(text) => {
                let show = self.gate.feed(&text);
                self.text(show)
            }
            // A call out of order is shown at the end.
            Piece::CallStart { index, id, name } if index == self.calls.len() => {
                let held = self.gate.release();
                let mut out = self.text(held);
                out.push(self.call_chunk(index, Some((&id, &name)), ""));
                self.calls.push(id);
                out
            }
            Piece::Reasoning(text) if !text.is_empty() => {
                self.reasoned = true;
                vec![self.reasoning_chunk(text)]
            }
            Piece::CallStart { .. } | Piece::Reasoning(_) => Vec::new(),
            Piece::CallArgs { index, fragment } if index < self.calls.len() => {
                vec![self.call_chunk(index, None, &fragment)]
            }
            Piece::CallArgs { .. } => Vec::new(),
            Piece::Logprobs(told) => {
                self.logprobs.hold(told);
                Vec::new()
            }
        }
    }

    fn finish(&mut self, answered: &Answered) -> Vec<String> {
        let finished = &answered.finished;
        let (text, calls) = text_and_calls(&finished.answer);
        let rest = self.gate.rest(&text);
        self.logprobs.finish(finished.logprobs.as_deref());
        let mut out = Vec::new();
        // Reasoning not shown while it was made (an attempt that was not the answer's own).
        if let Some(reasoning) = finished.reasoning.clone().filter(|_| !self.reasoned) {
            out.push(self.reasoning_chunk(reasoning));
        }
        out.extend(self.text(rest));
        let unshown = calls.iter().filter(|c| !self.calls.contains(&c.id));
        for (index, call) in (self.calls.len()..).zip(unshown) {
            out.push(self.call_chunk(index, Some((&call.id, &call.name)), ""));
            out.push(self.call_chunk(index, None, &call.arguments_json()));
        }
        // What no text carried (a tool call's tokens) goes with the last chunk.
        let left = self.logprobs.take();
        let left = (!left.is_empty()).then(|| logprobs::Choice::of(&left));
        out.push(self.chunk_with(Message::default(), left, Some(finish_reason(finished))));
        if self.include_usage {
            out.push(frame(
                None,
                &Completion {
                    id: self.id.clone(),
                    object: "chat.completion.chunk",
                    created: self.created,
                    model: self.model.clone(),
                    choices: Vec::new(),
                    usage: Some(finished.usage.into()),
                },
            ));
        }
        out.push("data: [DONE]\n\n".to_owned());
        out
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        vec![frame(None, &openai_error(e)), "data: [DONE]\n\n".to_owned()]
    }
}

/// OpenAI chat completions in the registry ([`super::dialect`]).
pub const DIALECT: Dialect = dialect::of(&Chat);

/// OpenAI's chat completions API; `GET /v1/models` is its list unless the request carries
/// another API's headers.
pub struct Chat;

impl Wire for Chat {
    fn id(&self) -> &'static str {
        "chat"
    }

    fn metric(&self) -> crate::metrics::Api {
        crate::metrics::Api::Chat
    }

    fn shape(&self) -> &'static dyn crate::shapes::Shape {
        &crate::shapes::openai_chat::ChatComplete
    }

    fn routes(&self) -> &'static [Route] {
        const ROUTES: &[Route] = &[
            Route::post("/v1/chat/completions", Endpoint::Create),
            Route::get("/v1/models", Endpoint::ModelsByHeader),
            Route::get("/v1/models/{name}", Endpoint::ModelByHeader),
        ];
        ROUTES
    }

    fn error_body(&self, e: &ApiError) -> Value {
        openai_error(e)
    }

    fn unrouted(&self) -> ErrorKind {
        ErrorKind::InvalidRequest
    }

    fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
        Box::new(
            Encoder::new(o.model, &o.call.request.stop, o.include_usage)
                .with_logprobs(o.call.request.logprobs.is_some()),
        )
    }

    fn whole(&self, o: &Opening<'_>, answered: &Answered) -> Value {
        let encoder = Encoder::new(o.model, &o.call.request.stop, false).named(o.id);
        dialect::to_json(&encoder.whole(&answered.finished))
    }
}

/// An error in OpenAI's envelope (chat completions, text completions, Responses).
pub fn openai_error(e: &ApiError) -> Value {
    json!({"error": {
        "message": e.message,
        "type": e.openai_type(),
        "param": e.param,
        "code": match (&e.code, e.kind) {
            (Some(code), _) => json!(code),
            (None, ErrorKind::NotFound) => json!("model_not_found"),
            (None, ErrorKind::Authentication) => json!("invalid_api_key"),
            _ => Value::Null,
        },
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::*;
    use serde_json::json;

    /// The chunks' deltas folded: the text, each call's id, name and arguments, the finish.
    fn fold(events: &[Value]) -> (String, Vec<(String, String, String)>, Value) {
        let mut text = String::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        let mut finish = Value::Null;
        for e in events {
            let choice = &e["choices"][0];
            text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            for c in choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let i = c["index"].as_u64().unwrap() as usize;
                if i == calls.len() {
                    calls.push(Default::default());
                }
                let call = &mut calls[i];
                if let Some(id) = c["id"].as_str() {
                    call.0 = id.into();
                    call.1 = c["function"]["name"].as_str().unwrap().into();
                }
                call.2
                    .push_str(c["function"]["arguments"].as_str().unwrap_or(""));
            }
            if !choice["finish_reason"].is_null() {
                finish = choice["finish_reason"].clone();
            }
        }
        (text, calls, finish)
    }

    #[test]
    fn a_call_streams_in_pieces_and_the_chunks_fold_into_the_whole_answer() {
        let answered = answered(text_and_call(), Finish::ToolUse);
        let mut e = Encoder::new("m", &[], true);
        let events = run(&mut e, pieces(), &answered);
        let (text, calls, finish) = fold(&events);
        let whole = serde_json::to_value(e.whole(&answered.finished)).unwrap();
        let message = &whole["choices"][0]["message"];
        assert_eq!(text, message["content"].as_str().unwrap());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, message["tool_calls"][0]["id"]);
        assert_eq!(calls[0].1, message["tool_calls"][0]["function"]["name"]);
        // Shown as the model made them; the whole answer has them as JSON with sorted keys.
        assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
        assert_eq!(finish, whole["choices"][0]["finish_reason"]);
        assert_eq!(finish, "tool_calls");
        // One id throughout; the usage chunk last, as in the whole answer.
        assert!(events.iter().all(|c| c["id"] == whole["id"]));
        assert_eq!(events.last().unwrap()["usage"], whole["usage"]);
        assert_eq!(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
    }

    #[test]
    fn calls_not_shown_while_made_are_sent_at_the_end_and_a_stop_sequence_never_shows() {
        let answered = answered(text_and_call(), Finish::ToolUse);
        let mut e = Encoder::new("m", &["END".into()], false);
        let events = run(
            &mut e,
            vec![Piece::Text("Sure.".into()), Piece::Text("EN".into())],
            &answered,
        );
        let (text, calls, _) = fold(&events);
        assert_eq!(text, "Sure.");
        assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
        let mut e = Encoder::new("m", &["END".into()], false);
        let answered = super::super::sse::tests_support::answered(
            Answer::Text("Hello ".into()),
            Finish::StopSequence(Some("END".into())),
        );
        let events = run(
            &mut e,
            ["Hello E", "N", "D and more"]
                .map(|t| Piece::Text(t.into()))
                .to_vec(),
            &answered,
        );
        assert_eq!(fold(&events).0, "Hello ");
        assert_eq!(fold(&events).2, json!("stop"));
    }

    #[test]
    fn reasoning_streams_as_reasoning_content_and_the_whole_message_has_it() {
        let (pieces, answered) = reasoned(answered(text_and_call(), Finish::ToolUse));
        let mut e = Encoder::new("m", &[], false);
        let events = run(&mut e, pieces, &answered);
        let reasoning: String = events
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
            .collect();
        assert_eq!(reasoning, "Think.");
        // Never in the text.
        let (text, _, _) = fold(&events);
        assert_eq!(text, "Sure.");
        let whole = serde_json::to_value(e.whole(&answered.finished)).unwrap();
        assert_eq!(
            whole["choices"][0]["message"]["reasoning_content"],
            "Think."
        );
        // Reasoning not shown while made comes first at the end.
        let mut e = Encoder::new("m", &[], false);
        let events = run(&mut e, Vec::new(), &answered);
        assert_eq!(
            events[1]["choices"][0]["delta"]["reasoning_content"],
            "Think."
        );
    }

    /// The tokens of the chunks' `logprobs.content`, joined, and each chunk's own.
    fn streamed_tokens(events: &[Value]) -> (String, Vec<Value>) {
        let mut joined = String::new();
        let mut each = Vec::new();
        for e in events {
            let logprobs = &e["choices"][0]["logprobs"];
            for entry in logprobs["content"].as_array().into_iter().flatten() {
                joined.push_str(entry["token"].as_str().unwrap());
            }
            each.push(logprobs.clone());
        }
        (joined, each)
    }

    #[test]
    fn logprobs_come_whole_and_with_the_chunk_whose_text_their_tokens_made() {
        let plain = answered(Answer::Text("Hello Ex".into()), Finish::EndTurn);
        let (pieces, answered) = told_pieces(super::super::sse::tests_support::answered(
            Answer::Text(String::new()),
            Finish::EndTurn,
        ));
        let whole =
            serde_json::to_value(Encoder::new("m", &[], false).whole(&answered.finished)).unwrap();
        let logprobs = &whole["choices"][0]["logprobs"];
        assert_eq!(logprobs["refusal"], Value::Null);
        assert_eq!(
            logprobs["content"][0],
            json!({"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111],
                   "top_logprobs": [
                       {"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111]},
                       {"token": "x", "logprob": -1.5, "bytes": [120]}]})
        );
        // Streamed, the "E" held for the stop sequence `END` comes with the text after it.
        let mut e = Encoder::new("m", &["END".into()], false).with_logprobs(true);
        let events = run(&mut e, pieces, &answered);
        let (joined, each) = streamed_tokens(&events);
        assert_eq!(
            (joined.as_str(), fold(&events).0.as_str()),
            ("Hello Ex", "Hello Ex")
        );
        let texts: Vec<&str> = events
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(texts, ["", "Hello", " ", "Ex"]);
        // The role chunk and the last have none; the text chunks theirs.
        assert_eq!(each[0], Value::Null);
        assert_eq!(each[2]["content"][0]["token"], " E");
        assert_eq!(each[3]["content"][0]["token"], "x");
        assert_eq!(each[4], Value::Null);
        // An attempt not shown while made (or a call's tokens): all at the end.
        let mut e = Encoder::new("m", &[], false).with_logprobs(true);
        let (joined, _) = streamed_tokens(&run(&mut e, Vec::new(), &answered));
        assert_eq!(joined, "Hello Ex");
        // Not asked for: `null` throughout.
        let whole =
            serde_json::to_value(Encoder::new("m", &[], false).whole(&plain.finished)).unwrap();
        assert_eq!(whole["choices"][0]["logprobs"], Value::Null);
        let mut e = Encoder::new("m", &[], false);
        let events = run(&mut e, vec![Piece::Text("Hello Ex".into())], &plain);
        assert!(streamed_tokens(&events).1.iter().all(Value::is_null));
    }
}
