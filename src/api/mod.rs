//! The model APIs (OpenAI chat completions, legacy text completions and Responses, Anthropic
//! messages, Gemini `generateContent`, Ollama's chat and generate) as a base URL, without the
//! HTTP: a request body becomes the arguments of the tool of the same shape (what a client sends
//! that a tool has no use for is set aside here: `stream`, a system turn inside Anthropic
//! `messages`, hosted tools no backend here runs; a text completion's shape is the HTTP API's
//! own; Ollama's requests are translated into chat completions', see [`ollama`]), is parsed and
//! answered by the completion service exactly as the tool is, and the shape's API object is the
//! response body. [`stream`] renders an answer as each API's stream of events; errors take each
//! API's envelope ([`ApiError`]). Each API is a [`Wire`] in its own module, listed once in
//! [`registry::ALL`], the registry the HTTP router and the error envelopes are derived from.
//!
//! These calls come from no MCP host, so they are answered by the direct backends (the
//! embedded model, providers, the models file's entries), never by sampling.

pub mod chat;
pub mod compact;
pub mod completions;
pub mod dialect;
pub mod embeddings;
pub mod gate;
pub mod gemini;
pub mod logprobs;
pub mod messages;
pub mod ollama;
pub mod registry;
pub mod responses;
pub mod sse;
pub mod store;
pub mod threads;
pub mod transcriptions;
pub use crate::shapes::tool_names;
pub use dialect::{Dialect, Opening, Wire};

use crate::call::Call;
use crate::error::{CallError, Upstream};
use crate::metrics::Record;
use crate::service::{Answered, Origin, Served, Service};
#[cfg(test)]
use crate::shapes;
#[cfg(test)]
use serde_json::json;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// One streamed answer's events, in an API's form, as server-sent event text: what opens the
/// stream, each piece of the answer as the model makes it, a keep-alive, and what closes it
/// (the answer's end, or an error after the stream began).
pub trait Encode: Send {
    fn start(&mut self) -> Vec<String>;
    fn piece(&mut self, piece: crate::fulfil::written::Piece) -> Vec<String>;
    /// The keep-alive sent while the answer is made, for the APIs that have one.
    fn ping(&self) -> Option<String> {
        None
    }
    fn finish(&mut self, answered: &Answered) -> Vec<String>;
    fn error(&mut self, e: &ApiError) -> Vec<String>;
    /// Work to finish before the closing events are sent (a response stored, so that a client
    /// continuing from it at once finds it).
    fn save(&mut self) -> Option<futures_util::future::BoxFuture<'static, ()>> {
        None
    }
}

/// A request body made ready for its tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prepared {
    pub arguments: Map<String, Value>,
    /// The client asked for a stream of events.
    pub stream: bool,
    /// OpenAI chat: `stream_options.include_usage`, a last chunk with the usage.
    pub include_usage: bool,
    /// What was set aside, said in the `x-agent-as-model-warnings` header.
    pub warnings: Vec<String>,
    /// Anthropic: `role: "system"` messages moved into `system`, still counted against
    /// `AGENT_AS_MODEL_MAX_MESSAGES` with the messages left.
    pub system_messages: usize,
    /// Responses: how the tools the model sees were declared (namespaces, custom tools).
    pub names: tool_names::Names,
}

/// Makes `body` the arguments of `dialect`'s tool. `model` is the one a Gemini path names;
/// `stream` whether the path asks for a stream (Gemini's `:streamGenerateContent`).
pub fn prepare(
    dialect: Dialect,
    mut body: Map<String, Value>,
    model: Option<&str>,
    stream: bool,
) -> Prepared {
    let asked_stream = matches!(body.remove("stream"), Some(Value::Bool(true)));
    let include_usage = body
        .remove("stream_options")
        .and_then(|o| o.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false);
    let mut prepared = Prepared {
        stream: stream || asked_stream,
        include_usage,
        ..Prepared::default()
    };
    dialect.prepare(&mut body, model, &mut prepared);
    prepared.arguments = body;
    prepared
}

/// What an API error says, rendered in each dialect's envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub kind: ErrorKind,
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// Seconds to wait before a retry (429, 503).
    pub retry_after: Option<u64>,
    /// OpenAI's machine-readable `code` (`context_length_exceeded`,
    /// `previous_response_not_found`, …), when there is one.
    pub code: Option<String>,
}

/// The kinds of failure the APIs tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    NotFound,
    RateLimit,
    Overloaded,
    Api,
}

impl ApiError {
    pub fn new(status: u16, kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            retry_after: None,
            code: None,
        }
    }

    /// `self` with OpenAI's `code`.
    pub fn with_code(mut self, code: &str) -> Self {
        self.code = Some(code.to_owned());
        self
    }

    /// The error's `type` in OpenAI's envelope.
    pub fn openai_type(&self) -> &'static str {
        match self.kind {
            ErrorKind::InvalidRequest | ErrorKind::NotFound => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Overloaded | ErrorKind::Api => "server_error",
        }
    }

    /// A request whose body is not what the API takes.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, ErrorKind::InvalidRequest, message)
    }

    /// The error body in `dialect`'s envelope.
    pub fn body(&self, dialect: Dialect) -> Value {
        dialect.error_body(self)
    }
}

impl From<CallError> for ApiError {
    fn from(e: CallError) -> Self {
        let message = e.to_string();
        match e {
            CallError::UnknownModel { .. } => ApiError {
                param: Some("model".into()),
                ..ApiError::new(404, ErrorKind::NotFound, message)
            },
            CallError::Argument { path, .. } => ApiError {
                param: Some(path),
                ..ApiError::invalid(message)
            },
            CallError::Invalid(_) => ApiError::invalid(message),
            // Claude Code acts on Anthropic's own words.
            CallError::OverContext {
                tokens, context, ..
            } => ApiError::invalid(format!(
                "prompt is too long: {tokens} tokens > {context} maximum ({message})"
            ))
            .with_code("context_length_exceeded"),
            // A provider that asked for a wait this call could not take: its status (503
            // stays 503, the rest 429) and its wait, as the client should honour it.
            CallError::Backend {
                transient: true,
                upstream:
                    Upstream {
                        status,
                        retry_after: Some(wait),
                    },
                ..
            } => {
                let (code, kind) = match status {
                    Some(503) => (503, ErrorKind::Overloaded),
                    _ => (429, ErrorKind::RateLimit),
                };
                ApiError {
                    retry_after: Some(retry_after_secs(wait)),
                    ..ApiError::new(code, kind, message)
                }
            }
            // A cap reached, an overloaded or unreachable backend: worth a retry shortly.
            CallError::Backend {
                transient: true, ..
            } => ApiError {
                retry_after: Some(1),
                ..ApiError::new(429, ErrorKind::RateLimit, message)
            },
            CallError::Host(_) => ApiError::new(501, ErrorKind::Api, message),
            CallError::Backend { .. } | CallError::Rejected(_) | CallError::Protocol(_) => {
                ApiError::new(502, ErrorKind::Api, message)
            }
        }
    }
}

/// The longest `Retry-After` told to a client, in seconds (a day): a peer's longer wait is
/// passed on as this.
pub const MAX_RETRY_AFTER_SECS: u64 = 86_400;

/// A peer's wait as whole seconds for `Retry-After`: rounded up, at least 1, at most
/// [`MAX_RETRY_AFTER_SECS`].
fn retry_after_secs(wait: std::time::Duration) -> u64 {
    let secs = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    secs.clamp(1, MAX_RETRY_AFTER_SECS)
}

/// The model APIs, answered by the completion service.
pub struct Api {
    pub service: std::sync::Arc<Service>,
    /// Places for calls in flight, shared with the MCP tools' calls (one server-wide cap).
    calls: Arc<Semaphore>,
    max_calls: usize,
    /// How long a streamed answer waits for a client that reads none of it.
    pub stream_write_timeout: Duration,
    /// Where Responses are kept for `previous_response_id` and `GET /v1/responses/{id}`.
    pub store: store::Store,
    /// Where Ollama's `/api/pull` fetches `hf:` files from (`None`: it fetches none).
    pub hub: Option<crate::local::hub::Access>,
}

/// A call's place under the server's cap on calls in flight, given back when it is dropped.
pub struct Admitted(#[allow(dead_code)] OwnedSemaphorePermit);

impl Api {
    /// The APIs answered by `service`, at most `max_calls` calls at once (counted on `calls`,
    /// which the MCP front may share).
    pub fn new(
        service: Arc<Service>,
        calls: Arc<Semaphore>,
        max_calls: usize,
        stream_write_timeout: Duration,
    ) -> Self {
        Api {
            service,
            calls,
            max_calls,
            stream_write_timeout,
            store: store::Store::memory(store::Bounds::default()),
            hub: None,
        }
    }

    /// `self` fetching `hf:` files for Ollama's `/api/pull` from the Hub `access` names.
    pub fn with_hub(mut self, access: crate::local::hub::Access) -> Self {
        self.hub = Some(access);
        self
    }

    /// `self` keeping Responses in `store`.
    pub fn with_store(mut self, store: store::Store) -> Self {
        self.store = store;
        self
    }

    /// A place for one more call, or a 429 saying to retry: calls over the cap are refused at
    /// once, never queued, as MCP tool calls are.
    pub fn admit(&self) -> Result<Admitted, ApiError> {
        match self.calls.clone().try_acquire_owned() {
            Ok(permit) => Ok(Admitted(permit)),
            Err(_) => Err(ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    429,
                    ErrorKind::RateLimit,
                    format!(
                        "server busy: {} calls are in flight, the most this server takes at \
                         once (AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT); retry shortly",
                        self.max_calls
                    ),
                )
            }),
        }
    }

    /// Parses a prepared request for `dialect`'s tool.
    pub fn parse(&self, dialect: Dialect, prepared: &Prepared) -> Result<Call, ApiError> {
        if self.service.backends().direct().next().is_none() {
            return Err(ApiError::new(
                501,
                ErrorKind::Api,
                "the HTTP model APIs are answered by a local or provider backend, and this \
                 server has only the host's sampling (which answers MCP tool calls alone): \
                 start it with --backend local, --backend provider or a models file",
            ));
        }
        // System messages moved into `system` count against the limit as the client sent them.
        let max = self.service.limits().max_messages;
        let kept = prepared
            .arguments
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let sent = kept.saturating_add(prepared.system_messages);
        if prepared.system_messages > 0 && sent > max {
            return Err(CallError::at(
                "messages",
                format!("{sent} messages is over the limit of {max} (AGENT_AS_MODEL_MAX_MESSAGES)"),
            )
            .into());
        }
        Ok(self.service.parse(dialect.shape(), &prepared.arguments)?)
    }

    /// The embeddings a request asks for, from the model it names (see
    /// [`Service::embed`]); only a model this server runs or calls makes them.
    pub async fn embed(
        &self,
        asked: &embeddings::Asked,
    ) -> Result<crate::backends::direct::Embeddings, ApiError> {
        let mut record = self
            .service
            .metrics()
            .record(crate::metrics::Api::Embeddings);
        let entry = self
            .service
            .backends()
            .embedder(&asked.model)
            .ok()
            .map(|(entry, _)| entry.name.clone());
        record.model(entry.as_deref());
        let made = self
            .service
            .embed(&asked.model, asked.request.clone())
            .await
            .map_err(ApiError::from);
        match (&made, &entry) {
            (Ok(made), Some(entry)) => record.answered(
                entry,
                crate::call::Usage {
                    prompt: made.prompt_tokens,
                    completion: 0,
                    estimated: false,
                    cached: None,
                },
            ),
            (Ok(_), None) => {}
            (Err(e), _) => record.status(e.status),
        }
        made
    }

    /// The model a call's answer is reported as made by, before the answer says (the backend's
    /// name for it; the name asked for when none is known).
    pub fn model_name(&self, call: &Call) -> String {
        self.service
            .backends()
            .answering_model(&call.request.model)
            .unwrap_or_else(|| call.request.model.clone())
    }

    /// A record of one call of `dialect`, starting now (see [`crate::metrics::Record`]).
    pub fn record(&self, dialect: Dialect) -> Record {
        self.service.metrics().record(dialect.metric())
    }

    /// Notes on a call's record, before it is answered, the model its route goes to first (a
    /// fallback may answer it instead: [`Api::note`] says which did).
    pub fn aim(&self, record: &mut Record, call: &Call) {
        let backends = self.service.backends();
        record.model(backends.entry_name(&call.request.model, false));
    }

    /// Notes how a call ended on its record: the model that answered and its usage, or the
    /// error's status.
    pub fn note(&self, record: &mut Record, result: &Result<Answered, ApiError>) {
        match result {
            Ok(answered) => record.answered(&answered.report.entry, answered.finished.usage),
            Err(e) => record.status(e.status),
        }
    }

    /// The prompt tokens a parsed call would have its model read (see
    /// [`Service::count_tokens`]).
    pub async fn count_tokens(&self, call: &Call) -> Result<usize, ApiError> {
        Ok(self.service.count_tokens(call).await?)
    }

    /// Answers a parsed call, telling `events` what happens while it is made.
    pub async fn answer(
        &self,
        call: &Call,
        cancel: &CancellationToken,
        events: Option<crate::fulfil::live::Events>,
    ) -> Result<Answered, ApiError> {
        let open = move || events.clone();
        let origin = Origin {
            host: None,
            cancel,
            events: &open,
        };
        match self.service.complete(call, &origin).await? {
            Served::Answered(answered) => Ok(*answered),
            Served::Asked => Err(ApiError::new(
                502,
                ErrorKind::Api,
                "the call asked for an input-required round, which HTTP clients cannot answer",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(file: &str) -> Vec<(String, Map<String, Value>)> {
        let path = format!(
            "{}/tests/data/api-clients/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                let path = v["path"].as_str()?.to_owned();
                Some((path, v["body"].as_object()?.clone()))
            })
            .collect()
    }

    fn dialect_of(path: &str) -> Option<Dialect> {
        Some(match path {
            "/v1/chat/completions" => Dialect::Chat,
            "/v1/responses" => Dialect::Responses,
            "/v1/messages" => Dialect::Messages,
            p if p.ends_with(":generateContent") || p.ends_with(":streamGenerateContent") => {
                Dialect::Gemini
            }
            _ => return None,
        })
    }

    /// Every body the real clients sent (SDKs, Claude Code, Codex, Gemini CLI) parses as its
    /// tool's arguments.
    #[test]
    fn every_recorded_client_body_parses() {
        let limits = crate::limits::Limits::default();
        let mut seen = 0;
        for file in [
            "capture-sdk-openai.jsonl",
            "capture-sdk-anthropic.jsonl",
            "capture-sdk-genai.jsonl",
            "capture-claude-code.jsonl",
            "capture-claude-code-toolcall.jsonl",
            "capture-codex.jsonl",
            "capture-codex-toolcall.jsonl",
            "capture-gemini-cli.jsonl",
            "capture-gemini-cli-toolcall.jsonl",
        ] {
            for (path, body) in captured(file) {
                let Some(dialect) = dialect_of(&path) else {
                    continue;
                };
                let model = path
                    .split("/models/")
                    .nth(1)
                    .and_then(|m| m.split(':').next());
                let prepared = prepare(dialect, body, model, false);
                let parsed = shapes::parse(dialect.shape(), &prepared.arguments, &limits);
                assert!(parsed.is_ok(), "{file} {path}: {:?}", parsed.err());
                seen += 1;
            }
        }
        assert!(seen >= 30, "{seen} bodies");
    }

    #[test]
    fn a_system_message_joins_the_system_prompt() {
        let body = json!({"system": "first", "messages": [
            {"role": "system", "content": "second"},
            {"role": "user", "content": "hi"}]});
        let p = prepare(
            Dialect::Messages,
            body.as_object().unwrap().clone(),
            None,
            false,
        );
        assert_eq!(
            p.arguments["system"],
            json!([{"type": "text", "text": "first"}, {"type": "text", "text": "second"}])
        );
        assert_eq!(
            p.arguments["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }

    #[test]
    fn namespace_tools_are_flattened_and_hosted_ones_left_out() {
        let body = json!({"input": "x", "stream": true, "tools": [
            {"type": "function", "name": "a", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "ns", "tools": [
                {"type": "function", "name": "b", "parameters": {"type": "object"}}]},
            {"type": "web_search"}]});
        let p = prepare(
            Dialect::Responses,
            body.as_object().unwrap().clone(),
            None,
            false,
        );
        let names: Vec<&str> = p.arguments["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        // The bare name, and the way back to its namespace kept for the answer.
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            p.names.declared("b").and_then(|d| d.namespace.as_deref()),
            Some("ns")
        );
        assert!(p.stream);
        assert!(p.warnings[0].contains("web_search"), "{:?}", p.warnings);
    }

    #[test]
    fn errors_take_each_envelope() {
        let e = ApiError::from(CallError::UnknownModel {
            name: "x".into(),
            known: "a, b".into(),
        });
        assert_eq!(e.status, 404);
        assert_eq!(e.body(Dialect::Chat)["error"]["param"], "model");
        assert_eq!(
            e.body(Dialect::Messages)["error"]["type"],
            "not_found_error"
        );
        assert_eq!(e.body(Dialect::Gemini)["error"]["status"], "NOT_FOUND");
    }

    #[test]
    fn a_wait_a_provider_asked_for_is_passed_on_up_to_a_day() {
        let asked = |status, secs: f64| {
            ApiError::from(
                CallError::unavailable(crate::config::Backend::Provider, "busy").with_upstream(
                    Upstream {
                        status: Some(status),
                        retry_after: Some(std::time::Duration::from_secs_f64(secs)),
                    },
                ),
            )
        };
        let e = asked(429, 30.0);
        assert_eq!(
            (e.status, e.kind, e.retry_after),
            (429, ErrorKind::RateLimit, Some(30))
        );
        let e = asked(503, 100_000.0);
        assert_eq!(
            (e.status, e.kind, e.retry_after),
            (503, ErrorKind::Overloaded, Some(86_400))
        );
        // A 500 that asked for a wait is a rate limit; part of a second is a second.
        assert_eq!(asked(500, 0.2).retry_after, Some(1));
        assert_eq!(asked(500, 2.5).status, 429);
        assert_eq!(asked(429, 2.5).retry_after, Some(3));
        // Without an asked-for wait: a retry shortly.
        let e = ApiError::from(CallError::unavailable(
            crate::config::Backend::Local,
            "busy",
        ));
        assert_eq!((e.status, e.retry_after), (429, Some(1)));
        let e = ApiError::from(CallError::backend(crate::config::Backend::Local, "broken"));
        assert_eq!((e.status, e.retry_after), (502, None));
    }
}
