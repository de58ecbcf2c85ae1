//! Gemini `generateContent`: the `GenerateContentResponse` and the stream of them
//! (`streamGenerateContent`), written by one [`Encoder`] from typed values. The stream sends
//! the text as it is made and a call whole at the end (as Gemini does); its last response has
//! the finish reason and the usage; the whole answer is what the stream's parts add up to.

use super::dialect::{self, Dialect, Endpoint, Opening, Route, Wire};
use super::gate::TextGate;
use super::logprobs::{Pending, finite};
use super::sse::{frame, text_and_calls};
use super::{ApiError, Encode, ErrorKind, Prepared};
use crate::call::{Block, Finish, TokenLogprob};
use crate::fulfil::written::Piece;
use crate::service::{Answered, Finished};
use serde::Serialize;
use serde_json::{Map, Value, json};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCall {
    pub id: String,
    pub name: String,
    pub args: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InlineData {
    pub mime_type: String,
    pub data: String,
}

/// A part of the model's content.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Part {
    Text(String),
    FunctionCall(FunctionCall),
    InlineData(InlineData),
    /// The model's reasoning: `{"text": …, "thought": true}`.
    #[serde(untagged)]
    Thought(Thought),
}

/// A thought part (shown with `includeThoughts`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thought {
    pub text: String,
    pub thought: bool,
}

impl Part {
    fn thought(text: String) -> Self {
        Part::Thought(Thought {
            text,
            thought: true,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Content {
    pub role: &'static str,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    pub content: Content,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<&'static str>,
    pub index: usize,
    /// The log-probabilities of the tokens of this response's text (`responseLogprobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs_result: Option<LogprobsResult>,
    /// The mean log-probability of the whole answer's tokens (the last response's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_logprobs: Option<f64>,
}

/// A token and its log-probability (Gemini has the token's id too: this server does not say
/// it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogprobsCandidate {
    pub token: String,
    pub log_probability: f64,
}

/// The likeliest tokens at one place, most likely first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopCandidates {
    pub candidates: Vec<LogprobsCandidate>,
}

/// Gemini's `logprobsResult`: the chosen token at each place and the likeliest there.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogprobsResult {
    pub top_candidates: Vec<TopCandidates>,
    pub chosen_candidates: Vec<LogprobsCandidate>,
    pub log_probability_sum: f64,
}

impl LogprobsResult {
    /// The result of `told`.
    fn of(told: &[TokenLogprob]) -> Self {
        let candidate = |token: &str, logprob: f64| LogprobsCandidate {
            token: token.to_owned(),
            log_probability: finite(logprob),
        };
        LogprobsResult {
            top_candidates: (told.iter())
                .map(|t| TopCandidates {
                    candidates: t
                        .top
                        .iter()
                        .map(|c| candidate(&c.token, c.logprob))
                        .collect(),
                })
                .collect(),
            chosen_candidates: told
                .iter()
                .map(|t| candidate(&t.token, t.logprob))
                .collect(),
            log_probability_sum: sum(told),
        }
    }
}

/// The sum of `told`'s tokens' log-probabilities.
fn sum(told: &[TokenLogprob]) -> f64 {
    told.iter().map(|t| finite(t.logprob)).sum()
}

/// The mean log-probability of `told`'s tokens (none: 0).
fn average(told: &[TokenLogprob]) -> f64 {
    sum(told) / told.len().max(1) as f64
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    pub prompt_token_count: usize,
    pub candidates_token_count: usize,
    pub total_token_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_content_token_count: Option<usize>,
    /// Counted by this server from the text, not by the model.
    pub estimated: bool,
}

impl From<crate::call::Usage> for UsageMetadata {
    fn from(u: crate::call::Usage) -> Self {
        UsageMetadata {
            prompt_token_count: u.prompt,
            candidates_token_count: u.completion,
            total_token_count: u.total(),
            cached_content_token_count: u.cached,
            estimated: u.estimated,
        }
    }
}

/// A `GenerateContentResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_metadata: Option<UsageMetadata>,
    pub model_version: String,
    pub response_id: String,
}

/// One response, as its stream of responses while it is made and whole when done.
pub struct Encoder {
    id: String,
    model: String,
    gate: TextGate,
    /// Thoughts were shown as they were made.
    thought: bool,
    /// The log-probabilities told and not written yet (only a call that asked for them is
    /// told any).
    logprobs: Pending,
}

impl Encoder {
    /// A response answered by `model`, its text stopped at `stop`.
    pub fn new(model: &str, stop: &[String]) -> Self {
        Encoder {
            id: uuid::Uuid::new_v4().simple().to_string(),
            model: model.to_owned(),
            gate: TextGate::new(stop),
            thought: false,
            logprobs: Pending::new(true),
        }
    }

    /// A response of `parts` with the log-probabilities `told` of their text's tokens; the
    /// last (`end`) with the finish reason, the usage and the whole answer's mean.
    fn response(
        &self,
        parts: Vec<Part>,
        end: Option<&Finished>,
        told: &[TokenLogprob],
    ) -> Response {
        let whole = end.and_then(|f| f.logprobs.as_deref());
        Response {
            candidates: vec![Candidate {
                content: Content {
                    role: "model",
                    parts,
                },
                finish_reason: end.map(|f| match f.finish {
                    Finish::MaxTokens => "MAX_TOKENS",
                    _ => "STOP",
                }),
                index: 0,
                logprobs_result: (!told.is_empty() || whole.is_some())
                    .then(|| LogprobsResult::of(told)),
                avg_logprobs: whole.map(average),
            }],
            usage_metadata: end.map(|f| f.usage.into()),
            // The model the backend says answered, once the answer is done.
            model_version: end.map_or_else(|| self.model.clone(), |f| f.model.clone()),
            response_id: self.id.clone(),
        }
    }

    /// The parts after `text`: the calls, the answer's images and audio.
    fn other_parts(answered: &Answered) -> Vec<Part> {
        let (_, calls) = text_and_calls(&answered.finished.answer);
        let mut parts: Vec<Part> = calls
            .iter()
            .map(|c| {
                Part::FunctionCall(FunctionCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    args: c.input.clone(),
                })
            })
            .collect();
        parts.extend(answered.media.iter().filter_map(|block| match block {
            Block::Image { data, mime, .. } | Block::Audio { data, mime, .. } => {
                Some(Part::InlineData(InlineData {
                    mime_type: mime.clone(),
                    data: data.clone(),
                }))
            }
            _ => None,
        }));
        parts
    }

    /// The whole response for an answer.
    pub fn whole(&self, answered: &Answered) -> Response {
        let finished = &answered.finished;
        let (text, calls) = text_and_calls(&finished.answer);
        let mut parts: Vec<Part> = finished
            .reasoning
            .clone()
            .map(Part::thought)
            .into_iter()
            .collect();
        if !text.is_empty() || calls.is_empty() {
            parts.push(Part::Text(text));
        }
        parts.extend(Self::other_parts(answered));
        let told = finished.logprobs.as_deref().unwrap_or_default();
        self.response(parts, Some(finished), told)
    }

    /// `self` with the response id `id` when one is given.
    pub fn named(mut self, id: Option<&str>) -> Self {
        if let Some(id) = id {
            self.id = id.to_owned();
        }
        self
    }
}

impl Encode for Encoder {
    fn start(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        let text = match piece {
            Piece::Text(text) => text,
            Piece::Reasoning(thought) if !thought.is_empty() => {
                self.thought = true;
                let parts = vec![Part::thought(thought)];
                return vec![frame(None, &self.response(parts, None, &[]))];
            }
            Piece::Logprobs(told) => {
                self.logprobs.hold(told);
                return Vec::new();
            }
            // Gemini sends a call whole, at the end.
            _ => return Vec::new(),
        };
        let show = self.gate.feed(&text);
        if show.is_empty() {
            return Vec::new();
        }
        let told = self.logprobs.take();
        vec![frame(
            None,
            &self.response(vec![Part::Text(show)], None, &told),
        )]
    }

    fn finish(&mut self, answered: &Answered) -> Vec<String> {
        let finished = &answered.finished;
        let (text, _) = text_and_calls(&finished.answer);
        let rest = self.gate.rest(&text);
        self.logprobs.finish(finished.logprobs.as_deref());
        let mut parts = Vec::new();
        // Thoughts not shown while they were made (an attempt that was not the answer's own).
        if let Some(thought) = finished.reasoning.clone().filter(|_| !self.thought) {
            parts.push(Part::thought(thought));
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest));
        }
        parts.extend(Self::other_parts(answered));
        // The rest of the text's tokens, and those no text carried.
        let told = self.logprobs.take();
        vec![frame(None, &self.response(parts, Some(finished), &told))]
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        vec![frame(None, &DIALECT.error_body(e))]
    }
}

/// Gemini in the registry ([`super::dialect`]).
pub const DIALECT: Dialect = dialect::of(&Gemini);

/// Gemini's API: `/v1beta/models/{model}:{method}` (and `/v1/models/…`), its model list; `GET
/// /v1/models` is its list for a request with `x-goog-api-key`.
pub struct Gemini;

impl Wire for Gemini {
    fn id(&self) -> &'static str {
        "gemini"
    }

    fn metric(&self) -> crate::metrics::Api {
        crate::metrics::Api::Gemini
    }

    fn shape(&self) -> &'static dyn crate::shapes::Shape {
        &crate::shapes::gemini::GenerateContent
    }

    fn routes(&self) -> &'static [Route] {
        const ROUTES: &[Route] = &[
            Route::post("/v1/models/{name}", Endpoint::GeminiMethod),
            Route::get("/v1beta/models", Endpoint::Models),
            Route::get("/v1beta/models/{name}", Endpoint::Model),
            Route::post("/v1beta/models/{name}", Endpoint::GeminiMethod),
        ];
        ROUTES
    }

    fn claims(&self, path: &str) -> bool {
        path.starts_with("/v1beta/") || path.contains(':')
    }

    fn lists_models_for(&self, has: &dyn Fn(&str) -> bool) -> bool {
        has("x-goog-api-key")
    }

    fn error_body(&self, e: &ApiError) -> Value {
        json!({"error": {
            "code": e.status,
            "message": e.message,
            "status": match e.kind {
                ErrorKind::InvalidRequest => "INVALID_ARGUMENT",
                ErrorKind::Authentication => "UNAUTHENTICATED",
                ErrorKind::NotFound => "NOT_FOUND",
                ErrorKind::RateLimit => "RESOURCE_EXHAUSTED",
                ErrorKind::Overloaded => "UNAVAILABLE",
                ErrorKind::Api => "INTERNAL",
            },
        }})
    }

    fn prepare(&self, body: &mut Map<String, Value>, model: Option<&str>, p: &mut Prepared) {
        crate::shapes::gemini::camel_case_fields(body, &mut p.warnings);
        if let Some(model) = model {
            body.insert("model".into(), json!(model));
        }
    }

    fn streams_calls(&self) -> bool {
        false
    }

    fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
        Box::new(Encoder::new(o.model, &o.call.request.stop))
    }

    fn whole(&self, o: &Opening<'_>, answered: &Answered) -> Value {
        let encoder = Encoder::new(o.model, &o.call.request.stop).named(o.id);
        dialect::to_json(&encoder.whole(answered))
    }

    fn tokens_object(&self, tokens: usize) -> Value {
        json!({"totalTokens": tokens})
    }

    /// Gemini's model has `inputTokenLimit` for the context.
    fn model_object(&self, id: &str, described: Option<&Value>) -> Value {
        let mut model = json!({"name": format!("models/{id}"), "displayName": id,
                               "supportedGenerationMethods":
                                   ["generateContent", "streamGenerateContent", "countTokens"]});
        let context = described.and_then(|d| d.get("context_tokens")).cloned();
        if let (Some(object), Some(context)) = (model.as_object_mut(), context) {
            object.insert("inputTokenLimit".into(), context);
        }
        model
    }

    fn model_list(&self, _ids: &[&str], data: Vec<Value>) -> Value {
        json!({"models": data})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::*;

    #[test]
    fn text_streams_a_call_comes_whole_at_the_end_and_the_parts_fold_into_the_whole() {
        let answered = answered(text_and_call(), Finish::ToolUse);
        let mut e = Encoder::new("m", &[]);
        let events = run(&mut e, pieces(), &answered);
        assert_eq!(events.len(), 2, "{events:?}");
        let whole = serde_json::to_value(e.whole(&answered)).unwrap();
        let parts: Vec<Value> = events
            .iter()
            .flat_map(|e| {
                e["candidates"][0]["content"]["parts"]
                    .as_array()
                    .unwrap()
                    .clone()
            })
            .collect();
        assert_eq!(
            Value::Array(parts),
            whole["candidates"][0]["content"]["parts"]
        );
        let last = events.last().unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(last["usageMetadata"], whole["usageMetadata"]);
        assert_eq!(last["responseId"], whole["responseId"]);
        assert!(events[0].get("usageMetadata").is_none());
    }

    #[test]
    fn thoughts_are_parts_marked_thought_before_the_text() {
        let (pieces, answered) = reasoned(answered(text_and_call(), Finish::ToolUse));
        let mut e = Encoder::new("m", &[]);
        let events = run(&mut e, pieces, &answered);
        let first = &events[0]["candidates"][0]["content"]["parts"][0];
        assert_eq!(first, &serde_json::json!({"text": "Thi", "thought": true}));
        let whole = serde_json::to_value(e.whole(&answered)).unwrap();
        let parts = &whole["candidates"][0]["content"]["parts"];
        assert_eq!(
            parts[0],
            serde_json::json!({"text": "Think.", "thought": true})
        );
        assert_eq!(parts[1], serde_json::json!({"text": "Sure."}));
    }

    #[test]
    fn logprobs_results_come_with_their_text_and_the_last_response_has_the_mean() {
        let (pieces, answered) = told_pieces(answered(
            crate::call::Answer::Text(String::new()),
            Finish::EndTurn,
        ));
        let whole = serde_json::to_value(Encoder::new("m", &[]).whole(&answered)).unwrap();
        let candidate = &whole["candidates"][0];
        assert_eq!(candidate["avgLogprobs"], -0.5);
        let result = &candidate["logprobsResult"];
        assert_eq!(
            result["chosenCandidates"][0],
            json!({"token": "Hello", "logProbability": -0.5})
        );
        assert_eq!(
            result["topCandidates"][0]["candidates"],
            json!([{"token": "Hello", "logProbability": -0.5},
                   {"token": "x", "logProbability": -1.5}])
        );
        assert_eq!(result["logProbabilitySum"], -1.5);
        let mut e = Encoder::new("m", &["END".into()]);
        let events = run(&mut e, pieces, &answered);
        let chosen: Vec<Value> = (events.iter())
            .flat_map(|e| {
                let result = &e["candidates"][0]["logprobsResult"]["chosenCandidates"];
                result.as_array().cloned().unwrap_or_default()
            })
            .map(|c| c["token"].clone())
            .collect();
        assert_eq!(json!(chosen), json!(["Hello", " E", "x"]));
        assert_eq!(events.last().unwrap()["candidates"][0]["avgLogprobs"], -0.5);
        // Not asked for: none.
        let plain = super::super::sse::tests_support::answered(
            crate::call::Answer::Text("Hi".into()),
            Finish::EndTurn,
        );
        let whole = serde_json::to_value(Encoder::new("m", &[]).whole(&plain)).unwrap();
        assert!(
            whole["candidates"][0].get("logprobsResult").is_none(),
            "{whole}"
        );
    }
}
