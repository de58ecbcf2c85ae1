//! OpenAI's legacy text completions: the `text_completion` object and its stream of chunks
//! (objects of the same name, each with a piece of the text), written by one [`Encoder`] from
//! typed values. The whole answer is what the stream's chunks add up to: the same id, model,
//! text and finish reason; with `echo`, both begin with the prompt.

use super::chat::Usage;
use super::dialect::{self, Dialect, Endpoint, Opening, Route, Wire};
use super::gate::TextGate;
use super::logprobs::{Legacy, Pending};
use super::sse::{frame, now, text_and_calls};
use super::{ApiError, Encode, ErrorKind};
use crate::call::{Finish, TextPrompt};
use crate::fulfil::written::Piece;
use crate::service::{Answered, Finished};
use serde::Serialize;
use serde_json::Value;

/// One choice: the whole text, or a chunk's piece of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub text: String,
    pub index: usize,
    /// The tokens' log-probabilities, when asked for (`logprobs`) and reported; in a chunk,
    /// those of the text it carries.
    pub logprobs: Option<Legacy>,
    pub finish_reason: Option<&'static str>,
}

/// A `text_completion`, whole or as a chunk of the stream.
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

/// Why the text ended, as text completions say it.
fn finish_reason(finished: &Finished) -> &'static str {
    match finished.finish {
        Finish::MaxTokens => "length",
        Finish::EndTurn | Finish::StopSequence(_) | Finish::ToolUse => "stop",
    }
}

/// One text completion, as its chunks while it is made and as its object when done.
pub struct Encoder {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    /// `echo`: the prompt, shown before the answer.
    echo: Option<String>,
    gate: TextGate,
    /// The log-probabilities told and not written yet, when asked for.
    logprobs: Pending,
    /// Where the next token's text begins in the choice's text, in characters (after an
    /// echoed prompt, whose tokens have none here).
    offset: usize,
}

impl Encoder {
    /// A completion answered by `model`, its text stopped at `stop`, the prompt shown first
    /// when `text` asks for an echo; `include_usage` adds the usage chunk
    /// (`stream_options.include_usage`).
    pub fn new(
        model: &str,
        stop: &[String],
        text: Option<&TextPrompt>,
        include_usage: bool,
    ) -> Self {
        Encoder {
            id: crate::call::new_id("cmpl-"),
            created: now(),
            model: model.to_owned(),
            include_usage,
            echo: text.filter(|t| t.echo).map(|t| t.prompt.clone()),
            gate: TextGate::new(stop),
            logprobs: Pending::default(),
            offset: text
                .filter(|t| t.echo)
                .map_or(0, |t| t.prompt.chars().count()),
        }
    }

    /// `self` writing the log-probabilities of the text each chunk carries, when `asked`.
    pub fn with_logprobs(mut self, asked: bool) -> Self {
        self.logprobs = Pending::new(asked);
        self
    }

    /// The whole `text_completion` for an answer.
    pub fn whole(&self, finished: &Finished) -> Completion {
        let (answer, _) = text_and_calls(&finished.answer);
        let text = match &self.echo {
            Some(prompt) => format!("{prompt}{answer}"),
            None => answer,
        };
        let mut offset = self.offset;
        let logprobs = (finished.logprobs.as_deref()).map(|told| Legacy::of(told, &mut offset));
        Completion {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: finished.model.clone(),
            choices: vec![Choice {
                text,
                index: 0,
                logprobs,
                finish_reason: Some(finish_reason(finished)),
            }],
            usage: Some(finished.usage.into()),
        }
    }

    /// One streamed event: this completion's id, time and model with `choices` and `usage`.
    fn event(&self, choices: Vec<Choice>, usage: Option<Usage>) -> String {
        frame(
            None,
            &Completion {
                id: self.id.clone(),
                object: "text_completion",
                created: self.created,
                model: self.model.clone(),
                choices,
                usage,
            },
        )
    }

    fn chunk(
        &self,
        text: String,
        logprobs: Option<Legacy>,
        finish_reason: Option<&'static str>,
    ) -> String {
        let choice = Choice {
            text,
            index: 0,
            logprobs,
            finish_reason,
        };
        self.event(vec![choice], None)
    }

    /// The log-probabilities held, taken (when asked for).
    fn held(&mut self) -> Option<Legacy> {
        let asked = self.logprobs.asked();
        asked.then(|| Legacy::of(&self.logprobs.take(), &mut self.offset))
    }

    /// A chunk of the answer's `text`, with the log-probabilities held.
    fn text(&mut self, text: String) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        let logprobs = self.held();
        vec![self.chunk(text, logprobs, None)]
    }
}

impl Encode for Encoder {
    fn start(&mut self) -> Vec<String> {
        // The echoed prompt: its tokens have no log-probabilities here.
        let echo = self.echo.clone().unwrap_or_default();
        if echo.is_empty() {
            return Vec::new();
        }
        let none = self.logprobs.asked().then(Legacy::default);
        vec![self.chunk(echo, none, None)]
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        match piece {
            Piece::Text(text) => {
                let show = self.gate.feed(&text);
                self.text(show)
            }
            Piece::Logprobs(told) => {
                self.logprobs.hold(told);
                Vec::new()
            }
            // A text completion offers no tools.
            Piece::CallStart { .. } | Piece::CallArgs { .. } | Piece::Reasoning(_) => Vec::new(),
        }
    }

    fn finish(&mut self, answered: &Answered) -> Vec<String> {
        let finished = &answered.finished;
        let (text, _) = text_and_calls(&finished.answer);
        let rest = self.gate.rest(&text);
        self.logprobs.finish(finished.logprobs.as_deref());
        let mut out = self.text(rest);
        // What no text carried goes with the last chunk.
        let left = self.held().filter(|l| !l.tokens.is_empty());
        out.push(self.chunk(String::new(), left, Some(finish_reason(finished))));
        if self.include_usage {
            out.push(self.event(Vec::new(), Some(finished.usage.into())));
        }
        out.push("data: [DONE]\n\n".to_owned());
        out
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        vec![
            frame(None, &super::chat::openai_error(e)),
            "data: [DONE]\n\n".to_owned(),
        ]
    }
}

/// OpenAI's legacy text completions in the registry ([`super::dialect`]).
pub const DIALECT: Dialect = dialect::of(&Completions);

/// OpenAI's legacy text completions API.
pub struct Completions;

impl Wire for Completions {
    fn id(&self) -> &'static str {
        "completions"
    }

    fn metric(&self) -> crate::metrics::Api {
        crate::metrics::Api::Completions
    }

    fn shape(&self) -> &'static dyn crate::shapes::Shape {
        &crate::shapes::text::TextComplete
    }

    fn routes(&self) -> &'static [Route] {
        const ROUTES: &[Route] = &[Route::post("/v1/completions", Endpoint::Create)];
        ROUTES
    }

    fn error_body(&self, e: &ApiError) -> Value {
        super::chat::openai_error(e)
    }

    fn unrouted(&self) -> ErrorKind {
        ErrorKind::InvalidRequest
    }

    fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
        let (stop, text) = (&o.call.request.stop, o.call.request.text.as_ref());
        Box::new(
            Encoder::new(o.model, stop, text, o.include_usage)
                .with_logprobs(o.call.request.logprobs.is_some()),
        )
    }

    fn whole(&self, o: &Opening<'_>, answered: &Answered) -> Value {
        let (stop, text) = (&o.call.request.stop, o.call.request.text.as_ref());
        let encoder = Encoder::new(o.model, stop, text, false);
        dialect::to_json(&encoder.whole(&answered.finished))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::*;
    use crate::call::Answer;
    use serde_json::json;

    /// The chunks' texts joined, and the finish reason the stream ends with.
    fn fold(events: &[Value]) -> (String, Value) {
        let mut text = String::new();
        let mut finish = Value::Null;
        for e in events {
            let Some(choice) = e["choices"].get(0) else {
                continue;
            };
            text.push_str(choice["text"].as_str().unwrap());
            if !choice["finish_reason"].is_null() {
                finish = choice["finish_reason"].clone();
            }
        }
        (text, finish)
    }

    fn prompt(echo: bool) -> TextPrompt {
        TextPrompt {
            prompt: "The capital of France is".into(),
            suffix: None,
            echo,
        }
    }

    #[test]
    fn the_chunks_fold_into_the_whole_completion_with_the_usage_last() {
        let answered = answered(Answer::Text(" Paris.".into()), Finish::MaxTokens);
        let mut e = Encoder::new("m", &[], Some(&prompt(false)), true);
        let pieces = [" Par", "is."].map(|t| Piece::Text(t.into())).to_vec();
        let events = run(&mut e, pieces, &answered);
        let whole = serde_json::to_value(e.whole(&answered.finished)).unwrap();
        let (text, finish) = fold(&events);
        assert_eq!(text, whole["choices"][0]["text"]);
        assert_eq!(text, " Paris.");
        assert_eq!(finish, "length");
        assert_eq!(finish, whole["choices"][0]["finish_reason"]);
        assert_eq!(whole["object"], "text_completion");
        assert!(whole["id"].as_str().unwrap().starts_with("cmpl-"));
        assert_eq!(whole["choices"][0]["logprobs"], Value::Null);
        assert_eq!(whole["model"], "backend-model");
        for chunk in &events {
            assert_eq!(chunk["id"], whole["id"]);
            assert_eq!(chunk["object"], "text_completion");
        }
        // Until the last, every chunk has a null finish reason.
        let texts = &events[..events.len() - 2];
        assert!(
            texts
                .iter()
                .all(|c| c["choices"][0]["finish_reason"].is_null())
        );
        let usage = events.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"], whole["usage"]);
        assert_eq!(whole["usage"]["total_tokens"], 19);
    }

    #[test]
    fn an_echo_shows_the_prompt_first_and_a_stop_sequence_never_shows() {
        let answered = answered(
            Answer::Text(" Paris".into()),
            Finish::StopSequence(Some(".".into())),
        );
        let mut e = Encoder::new("m", &[".".into()], Some(&prompt(true)), false);
        let pieces = [" Par", "is", ". It is"]
            .map(|t| Piece::Text(t.into()))
            .to_vec();
        let events = run(&mut e, pieces, &answered);
        let whole = serde_json::to_value(e.whole(&answered.finished)).unwrap();
        let (text, finish) = fold(&events);
        assert_eq!(text, "The capital of France is Paris");
        assert_eq!(text, whole["choices"][0]["text"]);
        assert_eq!(finish, "stop");
        assert!(events.iter().all(|c| c.get("usage").is_none()));
    }

    #[test]
    fn logprobs_are_parallel_lists_whose_offsets_run_on_from_the_echoed_prompt() {
        let (pieces, answered) =
            told_pieces(answered(Answer::Text(String::new()), Finish::EndTurn));
        let echoed = prompt(true);
        let at = echoed.prompt.chars().count();
        let whole = Encoder::new("m", &[], Some(&echoed), false).whole(&answered.finished);
        let whole = serde_json::to_value(whole).unwrap();
        let logprobs = &whole["choices"][0]["logprobs"];
        assert_eq!(logprobs["tokens"], json!(["Hello", " E", "x"]));
        assert_eq!(logprobs["token_logprobs"], json!([-0.5, -0.5, -0.5]));
        assert_eq!(logprobs["top_logprobs"][1], json!({" E": -0.5, "x": -1.5}));
        assert_eq!(logprobs["text_offset"], json!([at, at + 5, at + 7]));
        // Streamed: each chunk its text's tokens, the offsets running on across chunks.
        let mut e = Encoder::new("m", &["END".into()], Some(&echoed), false).with_logprobs(true);
        let events = run(&mut e, pieces, &answered);
        let mut tokens = Vec::new();
        let mut offsets = Vec::new();
        for chunk in &events {
            let l = &chunk["choices"][0]["logprobs"];
            tokens.extend(l["tokens"].as_array().into_iter().flatten().cloned());
            offsets.extend(l["text_offset"].as_array().into_iter().flatten().cloned());
        }
        assert_eq!(json!(tokens), logprobs["tokens"]);
        assert_eq!(json!(offsets), logprobs["text_offset"]);
        // The echo has none of its own; the last chunk has none left.
        assert_eq!(events[0]["choices"][0]["logprobs"]["tokens"], json!([]));
        assert_eq!(
            events.last().unwrap()["choices"][0]["logprobs"],
            Value::Null
        );
    }

    #[test]
    fn an_error_after_the_stream_began_is_openais_envelope() {
        let mut e = Encoder::new("m", &[], None, false);
        let frames = e.error(&ApiError::invalid("no"));
        assert_eq!(data(&frames)[0]["error"]["type"], "invalid_request_error");
        assert_eq!(frames.last().unwrap(), "data: [DONE]\n\n");
    }
}
