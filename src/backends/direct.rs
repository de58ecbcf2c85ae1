//! Direct backends: a model this server talks to itself — the embedded local model or an
//! OpenAI-compatible provider — instead of the host's model through MCP sampling. The one
//! [`super::driver`] runs the fulfilment machine on them as on sampling; each only declares
//! what its model can take and answers one neutral [`ModelRequest`] at a time.

use crate::call::{Block, Completion, ToolChoice, Tuning, Turn};
use crate::error::{CallError, CallResult};
use crate::fulfil::live::Events;
use crate::fulfil::{Attempt, Capabilities};
use crate::wire::openai;
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;

/// A boxed future, so backends can be chosen at run time.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One request to a direct backend: an attempt of the fulfilment machine, owned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRequest {
    /// The model name the caller passed (a hint; the backend decides).
    pub model: String,
    pub system: Option<String>,
    pub turns: Vec<Turn>,
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    pub tuning: Tuning,
    pub stop: Vec<String>,
    pub tools: Vec<ModelTool>,
    pub tool_choice: Option<ToolChoice>,
    /// The JSON Schema the answer must satisfy (structured output on a backend that enforces
    /// schemas).
    pub response_schema: Option<Map<String, Value>>,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTool {
    pub name: String,
    pub description: Option<String>,
    pub schema: Map<String, Value>,
}

impl ModelTool {
    /// The tool as an OpenAI function tool: what providers take and chat templates expect.
    pub fn openai(&self) -> openai::Tool {
        openai::Tool::function(&self.name, self.description.as_deref(), &self.schema)
    }
}

impl ModelRequest {
    pub fn from_attempt(attempt: &Attempt<'_>) -> Self {
        let call = attempt.call;
        let req = &call.request;
        ModelRequest {
            model: req.model.clone(),
            system: attempt.system.clone(),
            turns: attempt.turns().cloned().collect(),
            max_tokens: req.max_tokens,
            temperature: req.temperature,
            tuning: req.tuning,
            stop: req.stop.clone(),
            tools: attempt
                .tools
                .iter()
                .map(|t| ModelTool {
                    name: t.name.to_owned(),
                    description: t.description.map(str::to_owned),
                    schema: t.input_schema.clone(),
                })
                .collect(),
            tool_choice: attempt.tool_choice,
            response_schema: attempt.response_schema.cloned(),
        }
    }

    /// The first image or audio block, with where it is, for backends that take text only.
    pub fn first_media(&self) -> Option<(usize, &'static str)> {
        self.turns.iter().enumerate().find_map(|(i, t)| {
            t.blocks.iter().find_map(|b| match b {
                Block::Image { .. } => Some((i, "image")),
                Block::Audio { .. } => Some((i, "audio")),
                _ => None,
            })
        })
    }
}

/// A model this server calls itself.
pub trait Model: Send + Sync {
    /// `"local"` or `"provider"`: reported in results and by `list_models`.
    fn kind(&self) -> &'static str;
    /// What the model can take; the strategies follow from it.
    fn capabilities(&self) -> Capabilities;
    /// The `list_models` entry.
    fn describe(&self) -> Value;
    /// Answers one request; a backend that makes its answer token by token reports them to
    /// `live` as they come.
    fn complete(
        &self,
        request: ModelRequest,
        live: Option<Events>,
    ) -> BoxFuture<'_, CallResult<Completion>>;
    /// The prompt tokens this model would read for `request`, counted as it counts them when
    /// it answers; `None` when it cannot count them exactly (the caller estimates them then).
    fn count_tokens(&self, _request: ModelRequest) -> BoxFuture<'_, CallResult<Option<usize>>> {
        Box::pin(async { Ok(None) })
    }
}

/// Refuses media for a backend that takes text only, naming where it is.
pub fn text_only(request: &ModelRequest, backend: &'static str) -> CallResult<()> {
    match request.first_media() {
        Some((turn, kind)) => Err(CallError::backend(
            backend,
            format!(
                "it takes text only, and message {turn} carries {kind} content; send text, or \
                 use a host or provider whose model takes {kind}"
            ),
        )),
        None => Ok(()),
    }
}
