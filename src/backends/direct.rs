//! Direct backends: a model this server talks to itself — the embedded local model or an
//! OpenAI-compatible provider — instead of the host's model through MCP sampling. They drive
//! the same fulfilment [`Machine`] as sampling; each only declares what its model can take and
//! answers one neutral [`ModelRequest`] at a time.

use crate::call::{Block, Call, Completion, ToolChoice, Turn};
use crate::error::{CallError, CallResult};
use crate::fulfil::live::Live;
use crate::fulfil::{Attempt, Capabilities, Fulfilled, Machine, Progress, Step};
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
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
    pub fn openai(&self) -> Value {
        serde_json::json!({"type": "function", "function": {
            "name": self.name, "description": self.description.clone().unwrap_or_default(),
            "parameters": self.schema}})
    }
}

impl ModelRequest {
    pub fn from_attempt(attempt: &Attempt<'_>) -> Self {
        let call = attempt.call;
        let req = &call.request;
        let number = |key: &str| call.metadata.get(key).and_then(Value::as_f64);
        ModelRequest {
            model: req.model.clone(),
            system: attempt.system.clone(),
            turns: attempt.turns().cloned().collect(),
            max_tokens: req.max_tokens,
            temperature: req.temperature,
            top_p: number("top_p").or_else(|| number("topP")),
            seed: call
                .metadata
                .get("seed")
                .and_then(Value::as_u64)
                .or_else(|| {
                    call.metadata
                        .get("seed")
                        .and_then(Value::as_f64)
                        .map(|f| f as u64)
                }),
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
        live: Option<Arc<Live>>,
    ) -> BoxFuture<'_, CallResult<Completion>>;
}

/// Fulfils one call on a direct backend: the machine's attempts, answered in turn, each told
/// to `live` when the caller follows the answer's progress.
pub async fn run(
    call: &Call,
    model: &dyn Model,
    live: Option<&Arc<Live>>,
) -> CallResult<Fulfilled> {
    let machine = Machine::new(call, model.capabilities());
    let mut progress = Progress::default();
    let mut answer = None;
    loop {
        let step = machine
            .step(&mut progress, answer.take())
            .map_err(|e| answered_by(e, model.kind()))?;
        match step {
            Step::Done(done) => return Ok(done),
            Step::Send(attempt) => {
                let request = ModelRequest::from_attempt(&attempt);
                if let Some(live) = live {
                    let budget = usize::try_from(request.max_tokens).ok();
                    live.attempt(
                        progress.repairs.len() + 1,
                        machine.attempts_allowed(),
                        budget,
                    );
                }
                answer = Some(model.complete(request, live.cloned()).await?);
            }
        }
    }
}

/// An answer the machine cannot use is, on a direct backend, that backend's failure (the
/// machine reports it as the host's, which answers on the sampling path).
fn answered_by(e: CallError, backend: &'static str) -> CallError {
    match e {
        CallError::Host(message) => CallError::backend(backend, message),
        e => e,
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
