//! Direct backends: a model this server talks to itself — the embedded local model or an
//! OpenAI-compatible provider — instead of the host's model through MCP sampling. The one
//! [`super::driver`] runs the fulfilment machine on them as on sampling; each only declares
//! what its model can take and answers one neutral [`ModelRequest`] at a time.

use crate::call::{Completion, CompletionRequest, ToolChoice};
use crate::error::{Backend, CallError, CallResult};
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
    /// The call's request as this attempt sends it: the system prompt with the attempt's
    /// instruction, the turns followed by its repairs (the model name is the caller's hint; the
    /// backend decides).
    pub base: CompletionRequest,
    pub tools: Vec<ModelTool>,
    pub tool_choice: Option<ToolChoice>,
    /// The JSON Schema the answer must satisfy (structured output on a backend that enforces
    /// schemas).
    pub response_schema: Option<Map<String, Value>>,
}

pub use crate::call::ModelTool;

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
            base: CompletionRequest {
                system: attempt.system.clone(),
                turns: attempt.turns().cloned().collect(),
                ..req.clone()
            },
            tools: attempt.tools.clone(),
            tool_choice: attempt.tool_choice,
            response_schema: attempt.response_schema.cloned(),
        }
    }
}

/// What a model says of its work, read at each scrape of the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent again after a failure worth retrying (a provider's 429 or 5xx, a timeout);
    /// `None` for a model that does not retry.
    pub retries: Option<u64>,
    /// The embedded model's engine, when this is one.
    pub engine: Option<EngineStats>,
}

/// What the embedded model's engine holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// The model is loaded and answers.
    pub loaded: bool,
    /// Calls (and token counts) waiting for the worker.
    pub queued: usize,
    /// Slots answering a call now.
    pub busy: usize,
    /// Slots in all.
    pub slots: usize,
    /// Bytes of the model's weights, once it is loaded.
    pub memory_bytes: u64,
    /// Tokens the busy slots' caches hold (their calls' prompts and answers so far).
    pub kv_tokens: usize,
    /// Cells of the loaded model's cache (each slot's size times the slots; 0 unloaded).
    pub kv_cells: usize,
    /// Tokens drafted by speculative decoding since the server started, and of them those the
    /// model's samples kept.
    pub drafted: u64,
    pub accepted: u64,
}

/// A model this server calls itself.
pub trait Model: Send + Sync {
    /// `"local"` or `"provider"`: reported in results and by `list_models`.
    fn kind(&self) -> Backend;
    /// What the model can take; the strategies follow from it.
    fn capabilities(&self) -> Capabilities;
    /// The `list_models` entry.
    fn describe(&self) -> Value;
    /// The name the model goes by, as its answers report it (the entry's `id`).
    fn model_name(&self) -> Option<String> {
        self.describe().get("id")?.as_str().map(str::to_owned)
    }
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
    /// What the model says of its work now, for the metrics.
    fn stats(&self) -> Stats {
        Stats::default()
    }
    /// The embeddings of `request`'s inputs; a model that makes none says so.
    fn embed(&self, _request: EmbedRequest) -> BoxFuture<'_, CallResult<Embeddings>> {
        let name = self.model_name().unwrap_or_else(|| self.kind().to_string());
        Box::pin(async move {
            Err(CallError::at(
                "model",
                format!("the model {name:?} makes no embeddings; name an embedding model"),
            ))
        })
    }
    /// How long the model stays loaded with no call, from now on (`Some(None)`: for good; zero:
    /// unloaded once idle; `None`: as its settings say), for a model this server loads;
    /// others take no notice.
    fn keep_alive(&self, _alive: Option<Option<std::time::Duration>>) {}
    /// Whether the model answers from the file at `path` (the embedded model's GGUF file,
    /// given or in the cache); a model with no file of its own says no.
    fn uses_file(&self, _path: &std::path::Path) -> bool {
        false
    }
    /// Waits until the model can answer (the embedded model loaded), or says why it cannot.
    fn ready(&self) -> BoxFuture<'_, CallResult<()>> {
        Box::pin(async { Ok(()) })
    }
    /// The chat template the model's prompts are rendered with, when this server renders them
    /// (the embedded model, once loaded).
    fn chat_template(&self) -> Option<String> {
        None
    }
}

/// What to embed: texts, or texts as token ids of the model's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// A request for embeddings, as a backend takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    pub inputs: Vec<EmbedInput>,
    /// The vectors' length, when shorter than the model's (the first so many, normalized
    /// again, where the backend does not take it itself).
    pub dimensions: Option<usize>,
    /// A text over the model's context is cut to fit, rather than refused.
    pub truncate: bool,
}

/// One vector an input, in order, each of length 1 where the backend made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// The model that made them, as it names itself.
    pub model: String,
    pub vectors: Vec<Vec<f32>>,
    /// The inputs' tokens, as the model counted them.
    pub prompt_tokens: usize,
}

/// `v` scaled to length 1 (a zero vector as it is): every backend's embeddings are unit
/// vectors.
pub fn normalized(v: &[f32]) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        v.iter().map(|x| (f64::from(*x) / norm) as f32).collect()
    } else {
        v.to_vec()
    }
}
