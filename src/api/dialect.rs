//! The model APIs as one registry. Each API is a [`Wire`] in its own module (`chat.rs`,
//! `completions.rs`, `responses.rs`, `messages.rs`, `gemini.rs`, `ollama.rs`): its routes, its
//! error envelope, what it does to a request body before its tool parses it, its encoder (one
//! constructor, [`Opening`], for a whole answer and a stream), its model list and its metrics
//! label. [`ALL`] lists them; the HTTP router (`http/routes.rs`), the envelope of an error for
//! a path no route serves ([`of_path`](super::registry::of_path)) and the model lists are derived from it. A new API is a
//! module with a [`Wire`] and one line in [`ALL`].

use super::{ApiError, Encode, ErrorKind, Prepared};
use crate::call::Call;
use crate::service::Answered;
use crate::shapes::Shape;
use serde_json::{Map, Value, json};
use std::time::Instant;

/// An HTTP method a route takes (the HTTP layer maps it to its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Delete,
}

/// What answers a route: a handler every API may use with its own [`Wire`] (`Create`,
/// `CountTokens`, the model lists), or one API's own handler in `src/http/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The request body answered by the API's tool, whole or streamed.
    Create,
    /// The prompt tokens the body would read ([`Wire::tokens_object`]).
    CountTokens,
    /// The API's model list.
    Models,
    /// One model of the API's list by name.
    Model,
    /// The model list of the API whose headers the request carries ([`for_model_list`](super::registry::for_model_list)).
    ModelsByHeader,
    /// One model, as the API whose headers the request carries lists it.
    ModelByHeader,
    ResponsesCreate,
    ResponsesSocket,
    ResponsesCompact,
    ResponsesTokens,
    ResponsesGet,
    ResponsesDelete,
    ResponsesInputItems,
    /// `POST /v1/messages`, with Anthropic's message threads.
    MessagesCreate,
    /// `POST …/models/{model}:{method}`.
    GeminiMethod,
    OllamaRunning,
    OllamaVersion,
    OllamaTags,
    OllamaShow,
    OllamaPs,
    /// `/api/chat` or `/api/generate`, as the route's API.
    OllamaAnswer,
    OllamaPull,
    OllamaDelete,
    OllamaNotHere,
}

/// One route of an API: a method on a path, answered by an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub endpoint: Endpoint,
}

impl Route {
    pub const fn get(path: &'static str, endpoint: Endpoint) -> Self {
        Route {
            method: Method::Get,
            path,
            endpoint,
        }
    }

    pub const fn post(path: &'static str, endpoint: Endpoint) -> Self {
        Route {
            method: Method::Post,
            path,
            endpoint,
        }
    }
}

/// What an answer's encoder is made from, the same for every API.
pub struct Opening<'a> {
    /// The model the answer is reported as made by.
    pub model: &'a str,
    /// The parsed call (its stop sequences, a text completion's options).
    pub call: &'a Call,
    /// OpenAI: `stream_options.include_usage`.
    pub include_usage: bool,
    /// The prompt's tokens, for the APIs whose stream says them first ([`Wire::counts_prompt`]).
    pub prompt_tokens: usize,
    /// When the request came.
    pub started: Instant,
    /// The object's id, when the caller gives it (an MCP tool's conversation cursor); else a
    /// new one.
    pub id: Option<&'a str>,
    /// The request as the client sent it, for the APIs whose object repeats it (Responses).
    pub body: Option<&'a Map<String, Value>>,
    /// Responses: how the tools the model sees were declared (namespaces, custom tools).
    pub names: Option<&'a crate::shapes::tool_names::Names>,
}

impl<'a> Opening<'a> {
    /// The opening of an answer of `call` reported as made by `model`, started now, with
    /// nothing else given.
    pub fn new(model: &'a str, call: &'a Call) -> Self {
        Opening {
            model,
            call,
            include_usage: false,
            prompt_tokens: 0,
            started: Instant::now(),
            id: None,
            body: None,
            names: None,
        }
    }
}

/// A model API (see the module's text).
pub trait Wire: Send + Sync + 'static {
    /// The API's name, unique in the registry.
    fn id(&self) -> &'static str;
    /// The API as the metrics name it.
    fn metric(&self) -> crate::metrics::Api;
    /// The tool whose arguments the API's request body is (after [`Wire::prepare`]).
    fn shape(&self) -> &'static dyn Shape;
    /// The API's routes.
    fn routes(&self) -> &'static [Route] {
        &[]
    }
    /// Whether an error for `path`, which no route may serve, is written in this API's envelope.
    fn claims(&self, _path: &str) -> bool {
        false
    }
    /// Whether `GET /v1/models` is this API's list for a request carrying the headers `has`
    /// says it carries.
    fn lists_models_for(&self, _has: &dyn Fn(&str) -> bool) -> bool {
        false
    }
    /// The error body in this API's envelope.
    fn error_body(&self, e: &ApiError) -> Value;
    /// The kind of the 404 for a path of this API no route serves.
    fn unrouted(&self) -> ErrorKind {
        ErrorKind::NotFound
    }
    /// Sets a request body straight for the API's tool: what a client sends that the tool has
    /// no use for, said in `prepared`'s warnings. `model` is the one the path names.
    fn prepare(&self, _body: &mut Map<String, Value>, _model: Option<&str>, _p: &mut Prepared) {}
    /// Whether the stream shows a tool call as it is made (else it is sent whole).
    fn streams_calls(&self) -> bool {
        true
    }
    /// The content type of the API's stream.
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }
    /// Whether the stream's first event says the prompt's tokens ([`Opening::prompt_tokens`]).
    fn counts_prompt(&self) -> bool {
        false
    }
    /// The encoder of a streamed answer.
    fn encoder(&self, opening: &Opening<'_>) -> Box<dyn Encode>;
    /// The API object of a whole answer.
    fn whole(&self, opening: &Opening<'_>, answered: &Answered) -> Value;
    /// The token-counting endpoint's answer for a prompt of `tokens`.
    fn tokens_object(&self, tokens: usize) -> Value {
        json!({"input_tokens": tokens})
    }
    /// One model as the API lists it; `described` is what the backends say of it (the
    /// embedded model's context, tool-call format and engine), OpenAI's extra fields here.
    fn model_object(&self, id: &str, described: Option<&Value>) -> Value {
        openai_model(id, described)
    }
    /// The list of `data` (the models `ids`, in order) in the API's envelope.
    fn model_list(&self, _ids: &[&str], data: Vec<Value>) -> Value {
        json!({"object": "list", "data": data})
    }
}

/// A model as OpenAI lists it, with what llama-server adds (context, format, engine).
fn openai_model(id: &str, described: Option<&Value>) -> Value {
    let mut model =
        json!({"id": id, "object": "model", "created": 0, "owned_by": "agent-as-model"});
    if let (Some(object), Some(described)) = (model.as_object_mut(), described) {
        if let Some(context) = described.get("context_tokens") {
            object.insert("context_length".into(), context.clone());
        }
        if let Some(format) = described.get("format").filter(|f| !f.is_null()) {
            object.insert("format".into(), format.clone());
        }
        // Where the embedded model runs: the device and the layers on it.
        if let Some(engine) = described.get("engine") {
            object.insert("engine".into(), engine.clone());
        }
        // What a request may hold for it, as OpenRouter's model list says it.
        if let Some(supports) = described.get("supports") {
            let says = |what: &str| supports.get(what).and_then(Value::as_bool) == Some(true);
            let inputs = ["text"]
                .into_iter()
                .chain(says("images").then_some("image"));
            let inputs: Vec<&str> = inputs.chain(says("audio").then_some("audio")).collect();
            object.insert("input_modalities".into(), json!(inputs));
        }
    }
    model
}

/// The API a request speaks: one entry of the registry.
#[derive(Clone, Copy)]
pub struct Dialect(&'static dyn Wire);

/// The dialect of `wire`.
pub const fn of(wire: &'static dyn Wire) -> Dialect {
    Dialect(wire)
}

impl std::ops::Deref for Dialect {
    type Target = dyn Wire;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl PartialEq for Dialect {
    fn eq(&self, other: &Self) -> bool {
        self.0.id() == other.0.id()
    }
}

impl Eq for Dialect {}

impl std::fmt::Debug for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.id())
    }
}

/// A typed API object as JSON.
pub fn to_json(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}
