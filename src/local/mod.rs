//! The local backend: an embedded model, in process, on llama.cpp. The model is loaded once
//! (fetched on first use when it is the default) by one worker thread, which answers several
//! calls at once in the slots of one shared context (see [`slots`]) and keeps the rest in a
//! bounded queue (see [`queue`]), which a cancelled call leaves at once. It counts a request's
//! prompt tokens exactly, rendered and tokenized as an answer reads them, through that same
//! queue but without taking a slot. It declares native tools and JSON schemas: both are
//! enforced while decoding (constrained decoding), so the answers parse and fit by
//! construction.

pub mod engine;
pub mod fetch;
pub mod format;
pub mod hub;
pub mod jinja;
mod logprobs;
pub mod media;
mod multimodal;
pub use multimodal::no_projector;
pub mod pool;
mod projector;
pub mod prompt_cache;
pub mod queue;
pub mod slots;
pub mod speculate;
pub mod template;

use crate::backends::direct::{self, BoxFuture, Model, ModelRequest, ModelTool};
use crate::call::{Block, Completion, Finish, TextPrompt, ToolChoice, Usage, new_id};
use crate::config::Config;
use crate::error::{Backend, CallError, CallResult};
use crate::fulfil::Capabilities;
use crate::fulfil::live::{Event, Events};
use crate::wire::openai;
use engine::{EngineError, Mirostat, MirostatVersion, ModelFile, Output, Params, Penalties};
use fetch::FetchError;
use format::grammar::{Goal, Start};
use format::{Family, Format, Parser, Tools};
use hub::HubError;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;
use queue::{Queue, Refused, Taken};
use serde_json::{Map, Value, json};
use slots::{Call, Counters, Slots};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{oneshot, watch};

/// Which model the local backend runs.
#[derive(Debug, Clone, Default)]
pub enum Source {
    /// The default model, fetched into the cache on first use.
    #[default]
    Default,
    /// A GGUF file.
    File(PathBuf),
    /// A GGUF file on Hugging Face, fetched into the cache on first use.
    Hub(hub::HubFile, hub::Access),
}

impl Source {
    /// Where its file is, or will be once fetched.
    fn on_disk(&self) -> Option<PathBuf> {
        match self {
            Source::File(file) => Some(file.clone()),
            Source::Hub(file, _) => file.cached().ok(),
            Source::Default => fetch::cached_default(),
        }
    }
}

/// Settings of the local backend.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub source: Source,
    /// Prompt plus answer of one call, in tokens, at most: the context grows to it on demand
    /// (0: the model's trained context).
    pub context: usize,
    /// Calls waiting for a slot at most; more are refused.
    pub queue: usize,
    /// Calls answered at once.
    pub slots: usize,
    /// CPU threads for llama.cpp.
    pub threads: usize,
    /// The seed of a sampled answer whose call gives none (none: a new one each time).
    pub seed: Option<u64>,
    /// The chat template to use instead of the model's (`--chat-template-file`).
    pub chat_template: Option<String>,
    /// An embedding model (a models file's `embeddings = true`): no chat context is made, and
    /// only embeddings are answered.
    pub embeddings_only: bool,
    /// Loaded at start, rather than on the first call.
    pub preload: bool,
    /// How long the model stays loaded with no call (`None`: for good).
    pub keep_alive: Option<std::time::Duration>,
    /// The name the pool and its log lines know the model by.
    pub label: String,
    /// Layers put on a GPU.
    pub gpu_layers: crate::config::GpuLayers,
    /// The prompt cache on disk, when there is one.
    pub prompt_cache: Option<prompt_cache::Settings>,
    /// How answers draft tokens, if they do.
    pub speculative: speculate::Speculative,
    /// The model that drafts the answers' tokens, when there is one.
    pub draft: Option<Source>,
    /// The multimodal projector that reads images and audio into the prompts, when there is
    /// one (`--mmproj`).
    pub mmproj: Option<Source>,
    /// The bounds on a request's media (bytes, pixels, parts, seconds of audio).
    pub limits: crate::limits::Limits,
}

impl LocalSettings {
    /// The embedded model's settings.
    pub fn from_config(config: &Config) -> Result<LocalSettings, SettingsError> {
        Ok(LocalSettings {
            source: source(config)?,
            context: usize::try_from(config.local.local_context).unwrap_or(0),
            queue: usize::try_from(config.local.local_queue).unwrap_or(64),
            slots: usize::try_from(config.local.local_slots).unwrap_or(2),
            threads: config
                .local
                .local_threads
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or_else(engine::physical_cores),
            seed: config.local.local_seed,
            chat_template: chat_template(config)?,
            embeddings_only: false,
            preload: true,
            keep_alive: u64::try_from(config.local.local_keep_alive)
                .ok()
                .map(std::time::Duration::from_secs),
            label: "local".into(),
            gpu_layers: config.local.gpu_layers,
            speculative: config.local.speculative,
            draft: (config.local.draft_model.as_deref())
                .map(|file| file_source(config, file))
                .transpose()?,
            mmproj: (config.local.mmproj.as_deref())
                .map(|file| file_source(config, file))
                .transpose()?,
            limits: config.limits.clone(),
            // No bytes for it: none.
            prompt_cache: config
                .local
                .prompt_cache_dir
                .clone()
                .filter(|_| config.local.prompt_cache_max_bytes > 0)
                .map(|dir| prompt_cache::Settings {
                    dir,
                    max_bytes: config.local.prompt_cache_max_bytes,
                }),
        })
    }

    /// These settings for a models file's `model_file`: a path, or `hf:OWNER/REPO/FILE.gguf`
    /// fetched from the Hub as `--model` is.
    pub fn with_model_file(mut self, config: &Config, file: &Path) -> Result<Self, SettingsError> {
        self.source = file_source(config, file)?;
        Ok(self)
    }
}

/// A model file the settings name: a path, or `hf:OWNER/REPO/FILE.gguf` fetched from the Hub.
pub fn file_source(config: &Config, file: &Path) -> Result<Source, SettingsError> {
    Ok(match file.to_str().filter(|f| f.starts_with(hub::PREFIX)) {
        Some(hf) => Source::Hub(hf.parse().map_err(SettingsError::Model)?, access(config)),
        None => Source::File(file.to_owned()),
    })
}

/// How the Hub is reached (`--hf-endpoint`, `HF_TOKEN`).
fn access(config: &Config) -> hub::Access {
    hub::Access {
        endpoint: config.local.hf_endpoint.clone(),
        token: config.local.hf_token.clone().filter(|t| !t.is_empty()),
    }
}

/// A malformed setting of the local model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--model (AGENT_AS_MODEL_MODEL): {0}")]
    Model(#[source] hub::SourceError),
    #[error(
        "--chat-template-file (AGENT_AS_MODEL_CHAT_TEMPLATE_FILE): cannot read {}: {problem}",
        path.display()
    )]
    ChatTemplate { path: PathBuf, problem: String },
}

/// The chat template file's text, when one is set; `Err` names a file that cannot be read.
fn chat_template(config: &Config) -> Result<Option<String>, SettingsError> {
    let Some(path) = &config.local.chat_template_file else {
        return Ok(None);
    };
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|e| SettingsError::ChatTemplate {
            path: path.clone(),
            problem: e.to_string(),
        })
}

/// For callers that report errors as text.
impl From<SettingsError> for String {
    fn from(e: SettingsError) -> String {
        e.to_string()
    }
}

/// Which model the local backend runs; `Err` names a malformed `--model`.
fn source(config: &Config) -> Result<Source, SettingsError> {
    let local = &config.local;
    Ok(match (&local.model, &local.model_file) {
        (Some(source), _) => Source::Hub(
            source.parse().map_err(SettingsError::Model)?,
            access(config),
        ),
        (None, Some(path)) => Source::File(path.clone()),
        (None, None) => Source::Default,
    })
}

/// Why the local model did not answer a call.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The model is not there: it could not be fetched or loaded.
    #[error(transparent)]
    Unavailable(Arc<LoadError>),
    #[error("cannot start the local model's thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The worker thread is gone (it only ends when the server does, or if it panicked).
    #[error("the local model's thread has stopped")]
    Stopped,
    /// The worker thread went while the call waited.
    #[error("the local model's thread stopped before answering")]
    StoppedBeforeAnswering,
    /// This model cannot take this request. Another model might.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Every slot is answering and the queue (of `queue` calls) is full.
    #[error(
        "the local model is busy: {queue} calls are already waiting (AGENT_AS_MODEL_LOCAL_QUEUE)"
    )]
    Busy { queue: usize },
    /// A call came to the slots with none free (the worker looks for one first).
    #[error("every slot of the local model is busy")]
    NoFreeSlot,
    /// llama.cpp failed while reading the prompt or writing the answer (every call in the
    /// step is told the one error).
    #[error("the local model failed: {}", engine::brief(.0))]
    Engine(#[source] Arc<llama_cpp_2::DecodeError>),
    /// The model file is not what was loaded: llama.cpp maps it into memory, and reading a
    /// file cut short under the map would kill the process (SIGBUS).
    #[error(
        "the {0}; llama.cpp reads it through a memory map, so it is not used again: restart the \
         server to load it anew (replace a model file by renaming a new one over it, never by \
         writing into it in place)"
    )]
    FileChanged(String),
    /// The context could not grow to hold the call (llama.cpp found no memory for it).
    #[error(
        "the local model cannot make a context of {tokens} tokens for this prompt: {source} \
         (send a shorter conversation, or lower AGENT_AS_MODEL_LOCAL_CONTEXT)"
    )]
    Grow {
        tokens: usize,
        #[source]
        source: EngineError,
    },
    /// An input this model cannot embed as asked (`path` names it: `input[2]`, `dimensions`).
    #[error("invalid argument `{path}`: {problem}")]
    EmbedInput { path: String, problem: String },
    /// llama.cpp made no embeddings context, or no embedding.
    #[error("the local model made no embedding: {0}")]
    Embed(#[source] EngineError),
    /// llama.cpp could not read an image or audio part into the prompt.
    #[error("the local model could not read an image or audio part: {0}")]
    Media(String),
}

/// Why the model could not be had: fetched, loaded, or given a context.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("cannot start the download: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("the default model could not be fetched: {0}")]
    Default(#[source] FetchError),
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The model does not fit in the local models' memory budget now.
    #[error("cannot load the local model: {0}")]
    NoRoom(#[from] pool::NoRoom),
}

impl LoadError {
    /// Whether another attempt may mend it (see [`HubError::again`]).
    fn again(&self) -> bool {
        match self {
            LoadError::Default(e) => e.again(),
            LoadError::Hub(e) => e.again(),
            // A file that will not load (or is not there) does not mend by itself: a 5xx, not
            // an invitation to retry.
            LoadError::Engine(EngineError::Load { .. } | EngineError::Missing { .. }) => false,
            LoadError::Engine(_) | LoadError::Runtime(_) | LoadError::NoRoom(_) => true,
        }
    }
}

/// Why this model cannot take a request.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The model's chat template refused it, or ran over its limits.
    #[error(transparent)]
    Template(#[from] template::TemplateError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "the prompt is {tokens} tokens, over the local model's context of {context} tokens \
         (AGENT_AS_MODEL_LOCAL_CONTEXT); send a shorter conversation"
    )]
    OverContext { tokens: usize, context: usize },
    /// Over the context the call asked for (Ollama's `num_ctx`).
    #[error(
        "the prompt is {tokens} tokens, over the {context} tokens the call asked for \
         (options.num_ctx); send a shorter conversation or a larger num_ctx"
    )]
    OverCallContext { tokens: usize, context: usize },
    /// Too long to be worth tokenizing: even at the vocabulary's longest token the text is more
    /// tokens than the context holds.
    #[error(
        "the prompt is {bytes} bytes, at least {tokens} tokens, over the local model's context \
         of {context} tokens (AGENT_AS_MODEL_LOCAL_CONTEXT); send a shorter conversation"
    )]
    OverContextBytes {
        bytes: usize,
        tokens: usize,
        context: usize,
    },
    /// A text completion's `suffix` for a model that cannot fill in the middle.
    #[error(
        "this model has no fill-in-the-middle tokens, so it cannot complete between a prompt \
         and a suffix; leave `suffix` out, or use a model whose vocabulary has them (a code \
         model such as Qwen2.5-Coder)"
    )]
    NoFillInMiddle,
    /// An image or audio part this model cannot read, or that is not what it says it is.
    #[error("invalid argument `{part}`: {problem}")]
    Media { part: String, problem: String },
}

impl From<LocalError> for CallError {
    /// A request this model cannot take (an empty prompt, one over its context) is the
    /// caller's to change; the rest another model might answer.
    fn from(e: LocalError) -> Self {
        match e {
            LocalError::Request(
                RequestError::OverContext { tokens, context }
                | RequestError::OverCallContext { tokens, context }
                | RequestError::OverContextBytes {
                    tokens, context, ..
                },
            ) => CallError::OverContext {
                backend: KIND,
                tokens,
                context,
                problem: e.to_string(),
            },
            LocalError::Request(RequestError::NoFillInMiddle) => {
                CallError::at("suffix", RequestError::NoFillInMiddle.to_string())
            }
            LocalError::Request(RequestError::Media { part, problem }) => {
                CallError::at(&part, problem)
            }
            LocalError::Request(e) => fail(e.to_string()),
            LocalError::EmbedInput { path, problem } => CallError::at(&path, problem),
            // A server that sent more than it stated: not overloaded, and no sooner mended.
            LocalError::Unavailable(load) if !load.again() => fail(load.to_string()),
            e => CallError::unavailable(KIND, e.to_string()),
        }
    }
}

/// What the worker is asked: an answer, which takes a slot, or a count of the prompt's
/// tokens, which takes none.
enum Job {
    Answer(Answer),
    Count(Count),
    Embed(Embed),
    /// Told once the model is loaded (a caller that waits for it: Ollama's empty request).
    Load(oneshot::Sender<Result<(), LocalError>>),
}

/// Embeddings of texts, made with the model's embedding context, one text a step between the
/// answers' steps; takes no slot.
struct Embed {
    request: direct::EmbedRequest,
    reply: oneshot::Sender<Result<direct::Embeddings, LocalError>>,
    /// The vectors made so far, in the inputs' order.
    made: Vec<Vec<f32>>,
    /// Their tokens.
    counted: usize,
}

struct Answer {
    request: ModelRequest,
    /// Told the answer's tokens (and the tool calls in them) as they are made, when the caller
    /// follows the answer.
    live: Option<Events>,
    /// What the ids of the answer's tool calls begin with.
    id_base: String,
    reply: oneshot::Sender<Result<Output, LocalError>>,
    /// Its prompt and sampler, made before it was queued (by the model then loaded).
    prepared: Option<Box<Prepared>>,
}

/// A call's parts, made before it was queued by the model loaded then: the worker takes them
/// while that model is still the one it serves, and makes them again otherwise.
struct Prepared {
    generation: u64,
    parts: Parts,
}

/// The model the worker serves, shared with the callers, who render and tokenize their prompts
/// (and make their samplers) with it on blocking threads before their calls are queued, so the
/// worker, which steps every answer, does not; `None` while no model is loaded. Each load is a
/// new generation.
#[derive(Default)]
struct Loaded(std::sync::Mutex<(u64, Option<Arc<engine::Model>>)>);

impl Loaded {
    fn get(&self) -> Option<(u64, Arc<engine::Model>)> {
        let held = self.0.lock().ok()?;
        held.1.clone().map(|model| (held.0, model))
    }

    /// Shares `model`, a new generation's: the generation.
    fn publish(&self, model: &Arc<engine::Model>) -> u64 {
        let Ok(mut held) = self.0.lock() else {
            return 0;
        };
        held.0 += 1;
        held.1 = Some(model.clone());
        held.0
    }

    /// Stops sharing the model, and waits (a render's deadline at most) for the callers still
    /// using it, so its memory is given back before the pool is told.
    fn withdraw(&self, model: Arc<engine::Model>) {
        if let Ok(mut held) = self.0.lock() {
            held.1 = None;
        }
        let deadline =
            std::time::Instant::now() + template::DEADLINE + std::time::Duration::from_secs(1);
        let mut model = model;
        while let Err(shared) = Arc::try_unwrap(model) {
            if std::time::Instant::now() > deadline {
                tracing::warn!("a caller still holds the unloaded model");
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            model = shared;
        }
    }
}

/// The tokens of the prompt the model would read for `request`.
struct Count {
    request: ModelRequest,
    reply: oneshot::Sender<Result<usize, LocalError>>,
}

impl Job {
    /// A count or embeddings: answered between steps, without a slot.
    fn takes_no_slot(&self) -> bool {
        matches!(self, Job::Count(_) | Job::Embed(_) | Job::Load(_))
    }

    /// Whether the caller has gone away (its call was cancelled).
    fn is_cancelled(&self) -> bool {
        match self {
            Job::Answer(answer) => answer.reply.is_closed(),
            Job::Count(count) => count.reply.is_closed(),
            Job::Embed(embed) => embed.reply.is_closed(),
            Job::Load(reply) => reply.is_closed(),
        }
    }

    /// Tells the caller why there is no answer.
    fn fail(self, why: LocalError) {
        match self {
            Job::Answer(answer) => {
                let _ = answer.reply.send(Err(why));
            }
            Job::Count(count) => {
                let _ = count.reply.send(Err(why));
            }
            Job::Embed(embed) => {
                let _ = embed.reply.send(Err(why));
            }
            Job::Load(reply) => {
                let _ = reply.send(Err(why));
            }
        }
    }
}

/// The model file as it was when loaded: its length and modification time.
struct OnDisk {
    path: PathBuf,
    len: u64,
    modified: Option<std::time::SystemTime>,
    /// The path is the user's own (`--model-file`), not this user's cache.
    shown_path: bool,
}

impl OnDisk {
    fn stat(path: &Path) -> Option<(u64, Option<std::time::SystemTime>)> {
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.len(), meta.modified().ok()))
    }

    /// How the file differs from what was loaded, if it does.
    fn changed(&self) -> Option<String> {
        let file = if self.shown_path {
            format!("model file {}", self.path.display())
        } else {
            "model file".to_owned()
        };
        match OnDisk::stat(&self.path) {
            None => Some(format!("{file} is gone since it was loaded")),
            Some((len, _)) if len != self.len => Some(format!(
                "{file} changed since it was loaded ({} bytes then, {len} now)",
                self.len
            )),
            Some((_, modified)) if modified != self.modified => {
                Some(format!("{file} was written to since it was loaded"))
            }
            Some(_) => None,
        }
    }
}

/// What the worker knows of its model, for `list_models`.
#[derive(Debug, Clone)]
enum State {
    /// Not loaded: it is on the next call (or was unloaded, idle past its keep-alive or to make
    /// room for another).
    Unloaded,
    Loading,
    Ready(engine::Info),
    Failed(Arc<LoadError>),
}

pub struct Local {
    jobs: Arc<Queue<Job>>,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
    settings: LocalSettings,
    keep: Arc<Keep>,
    known: Arc<Known>,
    /// The model the worker serves, for the work done before the queue.
    loaded: Arc<Loaded>,
    /// Where chat templates render (the engines' renderer; none: on a thread).
    sandbox: Option<template::Renderer>,
    /// What the projector's file says it reads (images, audio), read before the model loads,
    /// once there is a file to read.
    declared: std::sync::OnceLock<(bool, bool)>,
    /// The workers of the engines it was started from, kept while it lives: the last model (or
    /// server) to let them go stops and waits for them (see [`pool::Workers`]).
    _workers: Arc<pool::Workers>,
}

/// The name the model's file gave it when it was last loaded: it keeps going by it while it is
/// unloaded (idle past its keep-alive, Ollama's `keep_alive: 0`, or to make room), so that the
/// name a client saw loads it again.
#[derive(Default)]
struct Known {
    name: std::sync::Mutex<Option<String>>,
}

impl Known {
    fn get(&self) -> Option<String> {
        self.name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, name: &str) {
        *self
            .name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name.to_owned());
    }
}

/// How long the model stays loaded, as set last (a request may change it, as Ollama's do).
#[derive(Default)]
struct Keep {
    /// `None`: for good.
    alive: std::sync::Mutex<Option<std::time::Duration>>,
}

impl Keep {
    fn get(&self) -> Option<std::time::Duration> {
        *self
            .alive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, alive: Option<std::time::Duration>) {
        *self
            .alive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = alive;
    }
}

const KIND: Backend = Backend::Local;

fn fail(message: impl Into<String>) -> CallError {
    CallError::backend(KIND, message)
}

impl Local {
    /// Starts the worker, which begins loading (or fetching) the model at once, on engines of
    /// its own (no memory budget, templates rendered on a thread; see [`Local::start_with`]).
    pub fn start(settings: LocalSettings) -> Result<Local, LocalError> {
        Local::start_with(settings, &pool::Engines::default())
    }

    /// Starts the worker on a server's `engines`: it joins their pool, renders its chat
    /// templates where they say, and is stopped with their other workers.
    pub fn start_with(
        settings: LocalSettings,
        engines: &pool::Engines,
    ) -> Result<Local, LocalError> {
        let jobs = Queue::new(settings.queue);
        let first = if settings.preload {
            State::Loading
        } else {
            State::Unloaded
        };
        let (state_tx, state) = watch::channel(first);
        let counters = Arc::new(Counters::default());
        let keep = Arc::new(Keep::default());
        keep.set(settings.keep_alive);
        let known = Arc::new(Known::default());
        let loaded = Arc::new(Loaded::default());
        let worker = Worker {
            loaded: loaded.clone(),
            generation: std::cell::Cell::new(0),
            settings: settings.clone(),
            state: state_tx,
            counters: counters.clone(),
            keep: keep.clone(),
            known: known.clone(),
            pool: engines.pool().clone(),
            sandbox: engines.renderer().cloned(),
        };
        let queue = Closing(jobs.clone());
        let thread = std::thread::Builder::new()
            .name("local-model".into())
            .spawn(move || {
                let queue = queue;
                worker.run(&queue.0);
            })
            .map_err(LocalError::Thread)?;
        let closing = jobs.clone();
        let close = Box::new(move || drop(closing.close_and_drain()));
        engines.workers().add(close, thread);
        Ok(Local {
            jobs,
            state,
            counters,
            settings,
            keep,
            known,
            loaded,
            sandbox: engines.renderer().cloned(),
            declared: std::sync::OnceLock::new(),
            _workers: engines.workers().clone(),
        })
    }

    /// How long the model stays loaded with no call, from now on (`None`: for good); zero
    /// unloads it once its calls are answered.
    pub fn keep_alive(&self, alive: Option<std::time::Duration>) {
        self.keep.set(alive);
        self.jobs.nudge();
    }

    /// Waits until the model is loaded (fetched first if needed), or says why it cannot be.
    pub async fn ready(&self) -> Result<(), LocalError> {
        // Loaded or not, the worker says so in its queue's order: an unload asked just before
        // (Ollama's `keep_alive: 0`) is done first, and the model loaded again.
        if matches!(self.state(), State::Unloaded | State::Ready(_)) {
            let (reply, loaded) = oneshot::channel();
            let _place = self.queue(Job::Load(reply))?;
            return loaded
                .await
                .map_err(|_| LocalError::StoppedBeforeAnswering)?;
        }
        let mut state = self.state.clone();
        let seen = state
            .wait_for(|s| !matches!(s, State::Loading))
            .await
            .map_err(|_| LocalError::Stopped)?;
        match &*seen {
            State::Failed(e) => Err(LocalError::Unavailable(e.clone())),
            _ => Ok(()),
        }
    }

    fn state(&self) -> State {
        self.state.borrow().clone()
    }

    /// Whether it reads images, and audio, as its projector says once it is loaded; before, a
    /// projector asked for is taken to read images (audio is not known until it loads).
    fn senses(&self) -> (bool, Option<bool>) {
        if let State::Ready(info) = self.state() {
            return (info.vision, Some(info.audio));
        }
        let declared = self.declared.get().copied().or_else(|| {
            let file = self.settings.mmproj.as_ref()?.on_disk()?;
            let read = projector::declared(&file)?;
            Some(*self.declared.get_or_init(|| read))
        });
        match declared {
            Some((images, audio)) => (images, Some(audio)),
            None => (self.settings.mmproj.is_some(), None),
        }
    }

    /// Refuses media at once when the model can have no projector (the projector, once
    /// loaded, says whether it reads images, audio or both).
    fn takes_media(&self, request: &ModelRequest) -> CallResult<()> {
        // An `hf:` model may find its projector beside it once it is fetched.
        if self.settings.mmproj.is_some() || matches!(self.settings.source, Source::Hub(..)) {
            return Ok(());
        }
        multimodal::no_projector(request, &self.name())
    }

    /// Queues a job; it holds its place while the ticket lives.
    fn queue(&self, job: Job) -> Result<queue::Ticket<Job>, LocalError> {
        self.jobs.push(job).map_err(|e| match e {
            Refused::Full(_) => LocalError::Busy {
                queue: self.settings.queue,
            },
            Refused::Closed(_) => LocalError::Stopped,
        })
    }

    /// The model's format, once it is loaded.
    /// `request` with its parts (its prompt rendered and tokenized, its sampler), made on a
    /// blocking thread with the loaded model (the request goes there and back, not copied);
    /// no parts while no model is loaded (the worker makes them once it is).
    async fn prepare(
        &self,
        request: ModelRequest,
    ) -> Result<(ModelRequest, Option<Box<Prepared>>), LocalError> {
        let Some((generation, model)) = self.loaded.get() else {
            return Ok((request, None));
        };
        let (seed, sandbox) = (self.settings.seed, self.sandbox.clone());
        let limits = self.settings.limits.clone();
        let made = tokio::task::spawn_blocking(move || {
            let parts = Worker::parts(&model, &request, seed, sandbox.as_ref(), &limits);
            (request, parts)
        });
        let (request, parts) = made.await.map_err(|_| LocalError::StoppedBeforeAnswering)?;
        Ok((
            request,
            Some(Box::new(Prepared {
                generation,
                parts: parts?,
            })),
        ))
    }

    /// The warning for a call that asked for more context than the model has.
    fn context_warning(&self, asked: Option<u32>) -> Option<String> {
        let asked = usize::try_from(asked?).ok()?;
        let State::Ready(info) = self.state() else {
            return None;
        };
        (asked > info.context).then(|| {
            format!(
                "`num_ctx` {asked} is over the local model's context of {} tokens: the call \
                 had {} (AGENT_AS_MODEL_LOCAL_CONTEXT)",
                info.context, info.context
            )
        })
    }

    fn format(&self) -> Format {
        match self.state() {
            State::Ready(info) => info.format,
            _ => Format::default(),
        }
    }

    /// The name results report: the default model's, or what the file says it is (once it has
    /// been loaded, also while it is unloaded or loading again: the name a client was shown
    /// stays the model's, and a call naming it loads it again).
    fn name(&self) -> String {
        let source = match &self.settings.source {
            Source::Default => return fetch::DEFAULT_MODEL_NAME.to_owned(),
            other => other,
        };
        if let State::Ready(info) = self.state() {
            return info.name;
        }
        if let Some(name) = self.known.get() {
            return name;
        }
        match source {
            Source::File(path) => path.display().to_string(),
            Source::Hub(file, _) => file.to_string(),
            Source::Default => fetch::DEFAULT_MODEL_NAME.to_owned(),
        }
    }
}

impl Model for Local {
    fn kind(&self) -> Backend {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            tools: true,
            json_schema: true,
            top_k: true,
            streams: true,
            reasoning: true,
            context: true,
        }
    }

    fn model_name(&self) -> Option<String> {
        Some(self.name())
    }

    fn stats(&self) -> direct::Stats {
        let (loaded, slots) = match self.state() {
            State::Ready(info) => (true, info.slots),
            State::Unloaded | State::Loading | State::Failed(_) => (false, self.settings.slots),
        };
        let c = &self.counters;
        // What the slots' caches hold, as of the model loaded last: nothing once it is gone.
        let (kv_tokens, kv_cells) = if loaded {
            let cells = c.kv_cells.load(Ordering::Relaxed);
            (c.kv_tokens.load(Ordering::Relaxed), cells)
        } else {
            (0, 0)
        };
        direct::Stats {
            retries: None,
            engine: Some(direct::EngineStats {
                loaded,
                queued: self.jobs.waiting(),
                busy: c.busy.load(Ordering::Relaxed),
                slots,
                memory_bytes: if loaded {
                    c.memory_bytes.load(Ordering::Relaxed)
                } else {
                    0
                },
                drafted: c.drafted.load(Ordering::Relaxed),
                accepted: c.accepted.load(Ordering::Relaxed),
                kv_tokens,
                kv_cells,
            }),
        }
    }

    fn describe(&self) -> Value {
        let s = &self.settings;
        let asked = (s.context > 0).then_some(s.context);
        let (status, context, slots, threads, device) = match self.state() {
            // Before the model is loaded, a context of 0 is the model's own (not yet known).
            State::Loading => ("loading".to_owned(), asked, s.slots, s.threads, None),
            State::Unloaded => ("unloaded".to_owned(), asked, s.slots, s.threads, None),
            State::Ready(info) => (
                "ready".to_owned(),
                Some(info.context),
                info.slots,
                info.threads,
                Some(info.device),
            ),
            State::Failed(why) => (format!("failed: {why}"), asked, s.slots, s.threads, None),
        };
        // The layers on a GPU: as loaded, else as asked.
        let gpu_layers = match self.state() {
            State::Ready(info) => info.gpu_layers,
            _ => s.gpu_layers.to_string(),
        };
        let c = &self.counters;
        // How the model writes calls and reasoning, once it is loaded (its template says).
        let (format, file) = match self.state() {
            State::Ready(info) => (Some(info.format), file_json(&info)),
            _ => (None, Value::Null),
        };
        let (images, audio) = self.senses();
        json!({
            "id": self.name(),
            "owned_by": "local",
            "backend": "local",
            "description": "An embedded model running in this server's process on llama.cpp: \
                            no host, no key, no network once cached. Tools and JSON schemas are \
                            enforced while decoding, in the tool-call format its chat template \
                            names (`format`); its reasoning is returned apart from its text.",
            "status": status,
            // Seconds it stays loaded with no call (null: for good).
            "keep_alive_secs": self.keep.get().map(|d| d.as_secs()),
            "context_tokens": context,
            "engine": {"name": "llama.cpp", "device": device, "threads": threads,
                       "slots": slots, "gpu_layers": gpu_layers},
            "prefix_cache": prefix_cache_json(c),
            "supports": {"tools": !s.embeddings_only, "json_schema": !s.embeddings_only,
                         "images": images, "audio": audio,
                         "stop_sequences": !s.embeddings_only,
                         "reasoning": format.map(|f| f.reasons()), "embeddings": true,
                         "chat": !s.embeddings_only},
            "format": format.map(|f| json!({
                "tool_calls": f.name(),
                "recognised": f.recognised(),
                "reasoning": f.reasons(),
            })),
            "file": file,
        })
    }

    fn ready(&self) -> BoxFuture<'_, CallResult<()>> {
        Box::pin(async move { Ok(Local::ready(self).await?) })
    }

    fn keep_alive(&self, alive: Option<Option<std::time::Duration>>) {
        Local::keep_alive(self, alive.unwrap_or(self.settings.keep_alive));
    }

    /// Its file as the settings name it (an `hf:` file and the default model where they are
    /// cached), the same file as `path` when both name one file (through links too).
    fn uses_file(&self, path: &Path) -> bool {
        self.settings.source.on_disk().is_some_and(|own| {
            own == path
                || matches!((own.canonicalize(), path.canonicalize()), (Ok(a), Ok(b)) if a == b)
        })
    }

    fn chat_template(&self) -> Option<String> {
        match self.state() {
            State::Ready(info) => info.chat_template.map(|t| t.to_string()),
            _ => None,
        }
    }

    fn complete(
        &self,
        request: ModelRequest,
        live: Option<Events>,
    ) -> BoxFuture<'_, CallResult<Completion>> {
        Box::pin(async move {
            self.takes_media(&request)?;
            // The tools offered, for the warning on a format read leniently.
            let tools = offered(&request).to_vec();
            let logprobs = request.base.logprobs.is_some();
            let asked_context = request.base.context;
            let (request, prepared) = self.prepare(request).await?;
            let (reply, answer) = oneshot::channel();
            // The call holds its place while this future lives: dropped (the caller went away)
            // before the worker took it, the call leaves the queue.
            let _place = self.queue(Job::Answer(Answer {
                request,
                live,
                id_base: new_id("call_"),
                reply,
                prepared,
            }))?;
            let output = answer
                .await
                .map_err(|_| LocalError::StoppedBeforeAnswering)??;
            let name = self.name();
            let mut done = completion(output, &name, logprobs);
            done.warnings
                .extend(format_warning(self.format(), &tools, &name));
            done.warnings.extend(self.context_warning(asked_context));
            Ok(done)
        })
    }

    /// Embeddings made between the answers' steps, with a context of their own (made on the
    /// first request, and kept): they wait in the queue like a count.
    fn embed(
        &self,
        request: direct::EmbedRequest,
    ) -> BoxFuture<'_, CallResult<direct::Embeddings>> {
        Box::pin(async move {
            let (reply, made) = oneshot::channel();
            let embed = Embed {
                request,
                reply,
                made: Vec::new(),
                counted: 0,
            };
            let _place = self.queue(Job::Embed(embed))?;
            let mut embeddings = made
                .await
                .map_err(|_| LocalError::StoppedBeforeAnswering)??;
            embeddings.model = self.name();
            Ok(embeddings)
        })
    }

    /// The prompt's tokens as an answer's are rendered and tokenized: on a blocking thread
    /// with the loaded model; while none is, the count waits in the queue like a call (while
    /// the model loads too), but takes no slot, and it is answered between steps even while
    /// every slot is busy.
    fn count_tokens(&self, request: ModelRequest) -> BoxFuture<'_, CallResult<Option<usize>>> {
        Box::pin(async move {
            self.takes_media(&request)?;
            if let Some((_, model)) = self.loaded.get() {
                let (sandbox, limits) = (self.sandbox.clone(), self.settings.limits.clone());
                let counted = tokio::task::spawn_blocking(move || {
                    counted(&model, &request, sandbox.as_ref(), &limits)
                })
                .await
                .map_err(|_| LocalError::StoppedBeforeAnswering)?;
                return Ok(Some(counted?));
            }
            let (reply, counted) = oneshot::channel();
            let _place = self.queue(Job::Count(Count { request, reply }))?;
            let tokens = counted
                .await
                .map_err(|_| LocalError::StoppedBeforeAnswering)??;
            Ok(Some(tokens))
        })
    }
}

impl Drop for Local {
    /// The worker answers the calls in its slots, then stops.
    fn drop(&mut self) {
        self.jobs.close();
    }
}

/// Closes the queue when the worker's thread ends, however it ends (a panic too): calls
/// waiting are dropped, which their callers see as the thread's end, and new ones are refused.
struct Closing(Arc<Queue<Job>>);

impl Drop for Closing {
    fn drop(&mut self) {
        drop(self.0.close_and_drain());
    }
}

/// A worker's embeddings: the context that makes them (made on the first request, and kept) and
/// the request in progress, one text a step between the answers' steps, as a count is.
struct Embedding<'m> {
    embedder: Option<engine::Embedder<'m>>,
    current: Option<Embed>,
}

impl<'m> Embedding<'m> {
    fn new() -> Self {
        Embedding {
            embedder: None,
            current: None,
        }
    }

    /// Makes the next text of the request in progress (one whose caller went away is dropped,
    /// its texts unmade); whether a text was made.
    fn step(&mut self, model: &'m engine::Model, member: &pool::Member) -> bool {
        let Some(embed) = self.current.take().filter(|e| !e.reply.is_closed()) else {
            return false;
        };
        let _cpu = model.on_cpu().then(|| member.cpu());
        self.current = embed_step(model, &mut self.embedder, embed);
        true
    }

    /// Begins `embed` with its first text; the rest follow a step at a time. (One is never
    /// begun while another is in progress; one handed in then is made whole.)
    fn begin(&mut self, model: &'m engine::Model, member: &pool::Member, embed: Embed) {
        let _cpu = model.on_cpu().then(|| member.cpu());
        let rest = embed_step(model, &mut self.embedder, embed);
        if self.current.is_none() {
            self.current = rest;
            return;
        }
        let mut rest = rest;
        while let Some(more) = rest.filter(|e| !e.reply.is_closed()) {
            rest = embed_step(model, &mut self.embedder, more);
        }
    }
}

/// Makes the next text's embedding of `embed`; when they are all made (or one fails) tells its
/// caller and returns `None`, else returns it for the next step.
fn embed_step<'m>(
    model: &'m engine::Model,
    embedder: &mut Option<engine::Embedder<'m>>,
    mut embed: Embed,
) -> Option<Embed> {
    let i = embed.made.len();
    if i < embed.request.inputs.len() {
        match embedding(model, embedder, &embed.request, i) {
            Ok((vector, tokens)) => {
                embed.made.push(vector);
                embed.counted += tokens;
            }
            Err(e) => {
                let _ = embed.reply.send(Err(e));
                return None;
            }
        }
    }
    if embed.made.len() < embed.request.inputs.len() {
        return Some(embed);
    }
    let made = direct::Embeddings {
        model: model.info().name.clone(),
        vectors: embed.made,
        prompt_tokens: embed.counted,
    };
    let _ = embed.reply.send(Ok(made));
    None
}

/// The embedding of a request's input `i` and its tokens: the text's tokens (cut to the
/// context when the request says so, else refused when over it), pooled and normalized,
/// shortened to `dimensions` and normalized again.
fn embedding<'m>(
    model: &'m engine::Model,
    embedder: &mut Option<engine::Embedder<'m>>,
    request: &direct::EmbedRequest,
    i: usize,
) -> Result<(Vec<f32>, usize), LocalError> {
    let embedder = match embedder {
        Some(made) => made,
        None => embedder.insert(model.embedder().map_err(LocalError::Embed)?),
    };
    let Some(item) = request.inputs.get(i) else {
        return Err(embed_input(i, "is not there".into()));
    };
    let mut tokens = input_tokens(model, item, i)?;
    if tokens.is_empty() {
        return Err(embed_input(
            i,
            "is empty; send at least one token of text".into(),
        ));
    }
    if tokens.len() > embedder.size() {
        if !request.truncate {
            return Err(embed_input(
                i,
                format!(
                    "is {} tokens, over the {} this model embeds at once; send less, or ask \
                     for it to be truncated",
                    tokens.len(),
                    embedder.size()
                ),
            ));
        }
        tokens.truncate(embedder.size());
    }
    let counted = tokens.len();
    let vector = embedder.embed(&tokens).map_err(LocalError::Embed)?;
    Ok((shortened(vector, request.dimensions)?, counted))
}

/// A problem with a request's input `i`.
fn embed_input(i: usize, problem: String) -> LocalError {
    LocalError::EmbedInput {
        path: format!("input[{i}]"),
        problem,
    }
}

/// The tokens of a request's input `i`: its text's, or its token ids, each one of the model's.
fn input_tokens(
    model: &engine::Model,
    item: &direct::EmbedInput,
    i: usize,
) -> Result<Vec<LlamaToken>, LocalError> {
    let vocabulary = model.vocabulary();
    match item {
        direct::EmbedInput::Text(text) => Ok(model.embedding_tokens(text)),
        direct::EmbedInput::Tokens(ids) => ids
            .iter()
            .map(|id| {
                i32::try_from(*id)
                    .ok()
                    .filter(|id| usize::try_from(*id).is_ok_and(|id| id < vocabulary))
                    .map(LlamaToken::new)
                    .ok_or_else(|| {
                        embed_input(
                            i,
                            format!("token {id} is not one of the model's {vocabulary}"),
                        )
                    })
            })
            .collect(),
    }
}

/// An embedding shortened to the `dimensions` asked for, and normalized again.
fn shortened(mut vector: Vec<f32>, dimensions: Option<usize>) -> Result<Vec<f32>, LocalError> {
    let Some(wanted) = dimensions else {
        return Ok(vector);
    };
    if wanted == 0 || wanted > vector.len() {
        return Err(LocalError::EmbedInput {
            path: "dimensions".into(),
            problem: format!(
                "{wanted}: this model's embeddings have 1 to {} dimensions",
                vector.len()
            ),
        });
    }
    vector.truncate(wanted);
    Ok(engine::normalized(&vector))
}

/// What `describe` says of a loaded model's file.
fn file_json(info: &engine::Info) -> Value {
    json!({"architecture": info.architecture, "parameters": info.parameters,
           "bytes": info.bytes, "quantization": info.file_type,
           "trained_context": info.trained,
           "fill_in_middle": info.fill_in_middle})
}

/// What `describe` says of the slots' prefix cache.
fn prefix_cache_json(c: &Counters) -> Value {
    json!({"calls": c.calls.load(Ordering::Relaxed),
           "prompt_tokens": c.prompt_tokens.load(Ordering::Relaxed),
           "reused_tokens": c.reused_tokens.load(Ordering::Relaxed)})
}

/// Whether the answer must be a call of one of the tools (decoded under a grammar saying so).
fn requires_call(request: &ModelRequest, tools: &[ModelTool]) -> bool {
    request.response_schema.is_none()
        && request.tool_choice == Some(ToolChoice::Required)
        && !tools.is_empty()
}

/// The tools the model may call: none when the caller said so.
fn offered(request: &ModelRequest) -> &[ModelTool] {
    if request.tool_choice == Some(ToolChoice::None) {
        &[]
    } else {
        &request.tools
    }
}

struct Worker {
    settings: LocalSettings,
    state: watch::Sender<State>,
    counters: Arc<Counters>,
    keep: Arc<Keep>,
    known: Arc<Known>,
    /// The pool of the engines it was started from.
    pool: Arc<pool::Pool>,
    /// Where its chat templates render (the engines' renderer; none: on a thread).
    sandbox: Option<template::Renderer>,
    /// The model it serves, shared with its callers, and its generation.
    loaded: Arc<Loaded>,
    generation: std::cell::Cell<u64>,
}

/// Why serving stopped: the queue closed (the server is stopping), or the model is to be
/// unloaded (idle past its keep-alive, or asked to make room).
enum Served {
    Closed,
    Unload,
}

impl Worker {
    fn set(&self, state: State) {
        self.state.send_replace(state);
    }

    /// Loads the model and serves the queue until it closes. A model that cannot be loaded
    /// fails the calls that come, and loading is tried again for each.
    fn run(self, queue: &Arc<Queue<Job>>) {
        let nudged = queue.clone();
        let member = self
            .pool
            .join(&self.settings.label, Box::new(move || nudged.nudge()));
        let mut waiting = None;
        let mut load = self.settings.preload;
        loop {
            if !load {
                self.set(State::Unloaded);
                match queue.take() {
                    Some(job) if job.is_cancelled() => continue,
                    Some(job) => waiting = Some(job),
                    None => return,
                }
            }
            load = true;
            self.set(State::Loading);
            let why = match self.load(&member) {
                Ok((model, on_disk)) => {
                    match self.serve_loaded(model, on_disk, queue, waiting.take(), &member) {
                        Ok(Served::Closed) => return,
                        Ok(Served::Unload) => {
                            tracing::info!(model = %self.settings.label, "local model unloaded");
                            load = false;
                            continue;
                        }
                        Err(e) => LoadError::Engine(e),
                    }
                }
                Err(e) => {
                    member.release();
                    e
                }
            };
            let why = Arc::new(why);
            self.set(State::Failed(why.clone()));
            if let Some(job) = waiting.take() {
                job.fail(LocalError::Unavailable(why));
            }
            match queue.take() {
                Some(job) => waiting = Some(job),
                None => return,
            }
        }
    }

    /// Serves the queue with a loaded model, answers or embeddings, until the queue closes or
    /// the model is to be unloaded; the model's memory is given back before the pool is told.
    fn serve_loaded(
        &self,
        model: engine::Model,
        on_disk: Option<OnDisk>,
        queue: &Arc<Queue<Job>>,
        waiting: Option<Job>,
        member: &pool::Member,
    ) -> Result<Served, EngineError> {
        let model = Arc::new(model);
        self.generation.set(self.loaded.publish(&model));
        let served = if self.settings.embeddings_only {
            Ok(self.serve_embeddings(&model, on_disk.as_ref(), queue, waiting, member))
        } else {
            let disk = self.disk_cache(on_disk.as_ref());
            let (layout, first) = slots::Llama::layout(&model);
            let made = slots::Llama::new(&model, first);
            made.map(|decoder| Slots::new(decoder, layout, self.counters.clone(), disk))
                .map(|slots| slots.speculating(self.settings.speculative))
                .map(|mut slots| {
                    let served =
                        self.serve(&model, on_disk.as_ref(), &mut slots, queue, waiting, member);
                    // What the slots hold outlives the model's memory.
                    slots.keep_on_disk();
                    served
                })
        };
        self.loaded.withdraw(model);
        member.release();
        self.counters.memory_bytes.store(0, Ordering::Relaxed);
        served
    }

    /// The model's prompt cache on disk, when the settings ask for one and the model is a
    /// file (a cache that cannot be opened is left out, with a warning).
    fn disk_cache(&self, on_disk: Option<&OnDisk>) -> Option<prompt_cache::DiskCache> {
        let settings = self.settings.prompt_cache.as_ref()?;
        let weights = &on_disk?.path;
        match prompt_cache::DiskCache::open(settings, weights) {
            Ok(cache) => Some(cache),
            Err(e) => {
                tracing::warn!(model = %self.settings.label, problem = %e,
                    "the prompt cache on disk cannot be used");
                None
            }
        }
    }

    /// Admits calls while a slot is free and steps the slots, until the queue closes and the
    /// last call is answered. A call that needs a bigger context waits, and the calls behind
    /// it with it, until every slot is idle and the context has grown.
    fn serve(
        &self,
        model: &engine::Model,
        on_disk: Option<&OnDisk>,
        slots: &mut Slots<slots::Llama<'_>>,
        queue: &Queue<Job>,
        mut waiting: Option<Job>,
        member: &pool::Member,
    ) -> Served {
        self.ready(model);
        let mut held: Option<Call> = None;
        let mut embedding = Embedding::new();
        loop {
            if let Some(call) = held.take()
                && !call.reply.is_closed()
            {
                held = slots.place(call);
            }
            // Counts share the worker with answers: one count (or one text of the embeddings
            // in progress) a step at most, and answers waiting behind counts take the free
            // slots first.
            let mut counted = embedding.step(model, member);
            while held.is_none() && slots.has_free_slot() {
                let job = match waiting.take() {
                    Some(job) => job,
                    None if slots.is_idle() && !counted => match self.idle(queue, member) {
                        Ok(job) => job,
                        Err(served) => return served,
                    },
                    None => match queue.take_first(|job| !(counted && job.takes_no_slot())) {
                        Some(job) => job,
                        None => break,
                    },
                };
                counted |= job.takes_no_slot();
                if !job.is_cancelled() {
                    held = self.begin_unless_changed(
                        model,
                        on_disk,
                        slots,
                        &mut embedding,
                        member,
                        job,
                    );
                }
            }
            // Counts take no slot: one is answered each step even while every slot is busy.
            if !counted && let Some(job) = queue.take_first(Job::takes_no_slot) {
                let (slots, embedding) = (&mut *slots, &mut embedding);
                held = held
                    .or(self.begin_unless_changed(model, on_disk, slots, embedding, member, job));
            }
            self.step(slots, member);
        }
    }

    /// One step of the busy slots, what they hold told before and after.
    fn step(&self, slots: &mut Slots<slots::Llama<'_>>, member: &pool::Member) {
        slots.publish();
        if !slots.is_idle() {
            // A model whose layers are all on a GPU does not wait for the CPU's turn.
            let _cpu = slots.on_cpu().then(|| member.cpu());
            slots.step();
        }
        slots.publish();
    }

    /// The next job for an idle model: waits for one while the model's keep-alive lasts, and
    /// says to unload when it runs out, or when the pool asks for the model's room.
    fn idle(&self, queue: &Queue<Job>, member: &pool::Member) -> Result<Job, Served> {
        member.busy(false);
        loop {
            if member.evicted() {
                return Err(Served::Unload);
            }
            match queue.take_within(self.keep.get()) {
                Taken::Item(job) => {
                    member.busy(true);
                    return Ok(job);
                }
                Taken::Nudged => continue,
                Taken::TimedOut => {
                    // "Unload now" is done once: the next load keeps the model as its
                    // settings say.
                    if self.keep.get() == Some(std::time::Duration::ZERO) {
                        self.keep.set(self.settings.keep_alive);
                    }
                    return Err(Served::Unload);
                }
                Taken::Closed => return Err(Served::Closed),
            }
        }
    }

    /// An embedding model's work: embeddings, one request at a time, until the queue closes;
    /// anything else is refused (no chat context is made for it).
    fn serve_embeddings(
        &self,
        model: &engine::Model,
        on_disk: Option<&OnDisk>,
        queue: &Queue<Job>,
        mut waiting: Option<Job>,
        member: &pool::Member,
    ) -> Served {
        self.ready(model);
        let mut embedding = Embedding::new();
        loop {
            let job = match waiting.take() {
                Some(job) => job,
                None => match self.idle(queue, member) {
                    Ok(job) => job,
                    Err(served) => return served,
                },
            };
            if job.is_cancelled() {
                continue;
            }
            if let Some(why) = on_disk.and_then(OnDisk::changed) {
                job.fail(LocalError::FileChanged(why));
                continue;
            }
            match job {
                Job::Embed(embed) => {
                    // Text by text; a caller that goes away stops the work.
                    embedding.begin(model, member, embed);
                    while embedding.step(model, member) {}
                }
                Job::Load(reply) => {
                    let _ = reply.send(Ok(()));
                }
                other => other.fail(LocalError::EmbedInput {
                    path: "model".into(),
                    problem: "this is an embedding model (`embeddings = true`): it makes \
                              embeddings, not answers"
                        .into(),
                }),
            }
        }
    }

    /// Begins a job, unless the model's file changed on disk since it was loaded (its mapped
    /// pages may be gone): then the job fails, saying so. Returns a call that waits for the
    /// context to grow.
    fn begin_unless_changed<'m>(
        &self,
        model: &'m engine::Model,
        on_disk: Option<&OnDisk>,
        slots: &mut Slots<slots::Llama<'_>>,
        embedding: &mut Embedding<'m>,
        member: &pool::Member,
        job: Job,
    ) -> Option<Call> {
        match on_disk.and_then(OnDisk::changed) {
            Some(why) => {
                job.fail(LocalError::FileChanged(why));
                None
            }
            None => self.begin(model, slots, embedding, member, job),
        }
    }

    /// Says the model is ready, to the logs and to `list_models`.
    fn ready(&self, model: &engine::Model) {
        let info = model.info();
        tracing::info!(
            model = %info.name,
            architecture = %info.architecture,
            engine = "llama.cpp",
            device = %info.device,
            gpu_layers = %info.gpu_layers,
            threads = info.threads,
            slots = info.slots,
            context = info.context,
            "local model ready"
        );
        self.counters
            .memory_bytes
            .store(model.size(), Ordering::Relaxed);
        self.known.set(&info.name);
        self.set(State::Ready(info.clone()));
    }

    /// Begins a job: an answer takes a free slot (or is told why it cannot be made, or waits
    /// for the context to grow: then it is returned), a count is answered at once.
    fn begin<'m>(
        &self,
        model: &'m engine::Model,
        slots: &mut Slots<slots::Llama<'_>>,
        embedding: &mut Embedding<'m>,
        member: &pool::Member,
        job: Job,
    ) -> Option<Call> {
        match job {
            Job::Embed(embed) => {
                embedding.begin(model, member, embed);
                None
            }
            Job::Load(reply) => {
                let _ = reply.send(Ok(()));
                None
            }
            Job::Answer(answer) => self
                .prepare(model, answer)
                .and_then(|call| slots.place(call)),
            Job::Count(count) => {
                Self::count(model, count, self.sandbox.as_ref(), &self.settings.limits);
                None
            }
        }
    }

    /// Answers a count with the length of the prompt an answer would read: one over the
    /// context is counted too, unless its text is too long for any context of this size (see
    /// [`prompt`]).
    fn count(
        model: &engine::Model,
        count: Count,
        sandbox: Option<&template::Renderer>,
        limits: &crate::limits::Limits,
    ) {
        if count.reply.is_closed() {
            return;
        }
        let _ = (count.reply).send(counted(model, &count.request, sandbox, limits));
    }

    fn load(&self, member: &pool::Member) -> Result<(engine::Model, Option<OnDisk>), LoadError> {
        let path = Self::locate(&self.settings.source)?;
        let draft = (self.settings.draft.as_ref())
            .map(Self::locate)
            .transpose()?;
        let mmproj = self.projector_file()?;
        // Room in the memory budget for the weights (mapped) and a tenth more for the
        // context, the draft model's and the projector's too, before they are loaded.
        let room = |path: &Path| OnDisk::stat(path).map_or(0, |(len, _)| pool::footprint(len));
        let bytes =
            room(&path) + draft.as_deref().map_or(0, room) + mmproj.as_deref().map_or(0, room);
        member.reserve(bytes, pool::ROOM_WAIT)?;
        let started = std::time::Instant::now();
        let settings = engine::Settings {
            context: self.settings.context,
            slots: self.settings.slots,
            threads: self.settings.threads,
            step: engine::STEP_TOKENS,
            chat_template: self.settings.chat_template.clone(),
            gpu_layers: self.settings.gpu_layers,
        };
        // What the file is as it is mapped: checked before each call uses the map.
        let on_disk = OnDisk::stat(&path);
        let model = engine::Model::load(&path, &settings).map_err(|e| self.not_loaded(e, &path))?;
        let mut model = match draft {
            Some(draft) => self.with_draft(model, &draft, &settings),
            None => model,
        };
        if let Some(mmproj) = mmproj
            && let Err(why) = model.set_projector(&mmproj)
        {
            tracing::warn!(model = %self.settings.label, problem = %why,
                "the projector did not load: the model takes text only");
        }
        let on_disk = on_disk.map(|(len, modified)| OnDisk {
            path,
            len,
            modified,
            shown_path: matches!(self.settings.source, Source::File(_)),
        });
        tracing::info!(
            model = %model.info().name,
            seconds = started.elapsed().as_secs_f64(),
            "local model loaded"
        );
        Ok((model, on_disk))
    }

    /// Why the model's file at `path` did not load. The cache is ours: a default model that
    /// will not load is damaged; it is fetched again on the next call, and its path (this
    /// user's cache) is not shown.
    fn not_loaded(&self, e: EngineError, path: &Path) -> LoadError {
        let removed = match &self.settings.source {
            Source::Default => Some("default model".to_owned()),
            // Likewise an `hf:` file that passed the Hub's checks but will not load: it is
            // removed, so "download it again" is what the next call does.
            Source::Hub(file, _) => Some(file.to_string()),
            Source::File(_) => None,
        };
        let Some(what) = removed else {
            // The operator's own file: its path goes to the log, not to callers.
            tracing::warn!(
                model = %self.settings.label, path = %path.display(), error = %e,
                "the local model's file did not load"
            );
            return e
                .naming(ModelFile::Named(self.settings.label.clone()))
                .into();
        };
        fetch::forget(path);
        e.naming(ModelFile::Removed(what)).into()
    }

    /// `model` with the draft model in `path` drafting its tokens; without it (a warning says
    /// why) when it does not load or its vocabulary is not the model's: answers are the same
    /// either way, only slower.
    fn with_draft(
        &self,
        mut model: engine::Model,
        path: &Path,
        settings: &engine::Settings,
    ) -> engine::Model {
        let label = &self.settings.label;
        let draft = match engine::Model::load(path, settings) {
            Ok(draft) => draft,
            Err(e) => {
                tracing::warn!(model = %label, path = %path.display(), problem = %e,
                    "the draft model did not load: answering without it");
                return model;
            }
        };
        let name = draft.info().name.clone();
        match model.set_draft(draft) {
            Ok(()) => {
                tracing::info!(model = %label, draft = %name, "a draft model drafts the answers' tokens");
            }
            Err(why) => {
                tracing::warn!(model = %label, draft = %name, problem = %why,
                    "the draft model cannot draft for this model: answering without it");
            }
        }
        model
    }

    /// The projector's file: the one asked for, else one beside an `hf:` model in its
    /// repository (fetched into the cache once, as the model is).
    fn projector_file(&self) -> Result<Option<PathBuf>, LoadError> {
        if let Some(asked) = &self.settings.mmproj {
            return Self::locate(asked).map(Some);
        }
        let Source::Hub(model, access) = &self.settings.source else {
            return Ok(None);
        };
        let Some(beside) = fetching()?.block_on(hub::projector_beside(model, access)) else {
            return Ok(None);
        };
        tracing::info!(model = %self.settings.label, projector = %beside,
            "a projector beside the model in its repository reads its images");
        let source = Source::Hub(beside, access.clone());
        Self::locate(&source).map(Some)
    }

    /// A model file: given, or fetched into the cache (once).
    fn locate(source: &Source) -> Result<PathBuf, LoadError> {
        match source {
            Source::File(path) => Ok(path.clone()),
            Source::Default => fetching()?
                .block_on(fetch::default_model(&mut fetch::Progress::new()))
                .map_err(LoadError::Default),
            Source::Hub(file, access) => {
                Ok(fetching()?.block_on(hub::fetch(file, access, &mut fetch::Progress::new()))?)
            }
        }
    }

    /// The call as the slots take it: the prompt rendered with the model's chat template and
    /// tokenized, its token budget, its sampler (and the grammars that hold the answer to the
    /// model's format), and what reads the answer as it is made; a call that cannot be made is
    /// answered with the reason.
    fn prepare(&self, model: &engine::Model, answer: Answer) -> Option<Call> {
        let Answer {
            request,
            live,
            id_base,
            reply,
            prepared,
        } = answer;
        let parts = match prepared {
            Some(made) if made.generation == self.generation.get() => Ok(made.parts),
            _ => Self::parts(
                model,
                &request,
                self.settings.seed,
                self.sandbox.as_ref(),
                &self.settings.limits,
            ),
        };
        match parts {
            Ok(parts) => {
                let format = model.info().format;
                let raw = request.base.text.is_some();
                let tools = offered(&request);
                let parser = parser(format, tools, raw, &id_base, parts.prompt.in_reasoning);
                Some(Call {
                    think: parts.think,
                    lazy: parts.lazy,
                    shown: parts.shown,
                    in_reasoning: parts.prompt.in_reasoning,
                    prompt: parts.prompt.tokens,
                    media: parts.prompt.media,
                    params: parts.params,
                    budget: parts.budget,
                    sampler: parts.sampler,
                    reader: Box::new(AnswerReader::new(parser, live)),
                    reply,
                })
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                None
            }
        }
    }

    /// The prompt, its sampler and parameters and its token budget; `Err` when this model
    /// cannot take the request.
    fn parts(
        model: &engine::Model,
        request: &ModelRequest,
        seed: Option<u64>,
        sandbox: Option<&template::Renderer>,
        limits: &crate::limits::Limits,
    ) -> Result<Parts, LocalError> {
        let prompt = prompt(model, request, sandbox, limits)?;
        let context = model.info().context;
        if prompt.tokens.is_empty() {
            return Err(RequestError::EmptyPrompt.into());
        }
        let tokens = prompt.tokens.len();
        if tokens >= context {
            return Err(RequestError::OverContext { tokens, context }.into());
        }
        // The call's own context, within the model's.
        let asked = (request.base.context).map(|c| usize::try_from(c).unwrap_or(usize::MAX));
        let context = match asked {
            Some(asked) if asked <= tokens => {
                return Err(RequestError::OverCallContext {
                    tokens,
                    context: asked,
                }
                .into());
            }
            Some(asked) => asked.min(context),
            None => context,
        };
        let params = params(request, seed, &prompt.tokens, context, model.vocabulary());
        let budget = params.max_tokens.min(context - prompt.tokens.len());
        let constraint = grammar(model, request, start(model, request, &prompt)).and_then(|g| {
            match model.constraint(g) {
                Ok(c) => Some(c),
                Err(e) => {
                    // The answer is still checked against the schema and repaired.
                    tracing::warn!(problem = %e, "answering without constrained decoding");
                    None
                }
            }
        });
        Ok(Parts {
            sampler: engine::sampler(&params, constraint),
            think: think(model, request, &prompt),
            lazy: lazy(model, request),
            shown: shown(model),
            prompt,
            params,
            budget,
        })
    }
}

/// A runtime for the worker's fetches from the Hub (the worker runs on a thread of its own).
fn fetching() -> Result<tokio::runtime::Runtime, LoadError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LoadError::Runtime)
}

/// What a call's answer is made of, before it takes a slot.
struct Parts {
    prompt: Prompt,
    sampler: LlamaSampler,
    params: Params,
    budget: usize,
    think: Option<slots::Think>,
    lazy: Option<slots::Lazy>,
    shown: Vec<LlamaToken>,
}

/// How to sample the answer: the request's parameters, its seed or the server's (or a new
/// one), with the penalties having seen the end of `prompt` (as llama-server's do) and a
/// window of at most the model's `context`, and the `vocabulary`'s size.
fn params(
    request: &ModelRequest,
    seed: Option<u64>,
    prompt: &[LlamaToken],
    context: usize,
    vocabulary: usize,
) -> Params {
    let asked = &request.base.samplers;
    Params {
        max_tokens: usize::try_from(request.base.max_tokens).unwrap_or(usize::MAX),
        temperature: request.base.temperature,
        top_p: request.base.tuning.top_p,
        top_k: request.base.tuning.top_k,
        seed: request
            .base
            .tuning
            .seed
            .and_then(|s| u64::try_from(s).ok())
            .or(seed)
            .unwrap_or_else(random_seed),
        stop: request.base.stop.clone(),
        penalties: penalties(asked, prompt, context),
        min_p: asked.min_p,
        typical_p: asked.typical_p,
        mirostat: mirostat(asked),
        vocabulary,
        logprobs: request.base.logprobs.map(usize::from),
    }
}

/// The penalties asked for: a window of `repeat_last_n` tokens (-1: the whole `context`, and
/// never more), having seen the last of `prompt` when they change anything.
fn penalties(asked: &crate::call::Samplers, prompt: &[LlamaToken], context: usize) -> Penalties {
    let last_n = match asked.repeat_last_n {
        None => Penalties::LAST_N,
        Some(n) => usize::try_from(n).unwrap_or(context),
    };
    let mut penalties = Penalties {
        last_n: last_n.min(context),
        repeat: asked.repeat_penalty.unwrap_or(1.0),
        frequency: asked.frequency_penalty.unwrap_or(0.0),
        presence: asked.presence_penalty.unwrap_or(0.0),
        seen: Vec::new(),
    };
    if penalties.active() {
        let from = prompt.len().saturating_sub(penalties.last_n);
        // Media's tokens are no vocabulary's.
        penalties.seen = prompt
            .iter()
            .skip(from)
            .copied()
            .filter(|t| t.0 >= 0)
            .collect();
    }
    penalties
}

/// Mirostat when asked for (1 or 2), with llama.cpp's target and learning rate where none is
/// given.
fn mirostat(asked: &crate::call::Samplers) -> Option<Mirostat> {
    let version = match asked.mirostat {
        Some(1) => MirostatVersion::V1,
        Some(2) => MirostatVersion::V2,
        _ => return None,
    };
    Some(Mirostat {
        version,
        tau: asked.mirostat_tau.unwrap_or(Mirostat::TAU),
        eta: asked.mirostat_eta.unwrap_or(Mirostat::ETA),
    })
}

/// The prompt a model reads: its tokens, and whether it leaves the model inside its reasoning
/// (a template that opens `<think>` in the generation prompt).
struct Prompt {
    tokens: Vec<LlamaToken>,
    /// The images and audio among the tokens.
    media: Vec<slots::Media>,
    in_reasoning: bool,
}

/// The prompt the model reads for `request`: the system prompt, the turns and the tools it may
/// call rendered with the model's chat template (as plain text for a base model without one),
/// with the template keyword arguments that carry the caller's reasoning controls, tokenized
/// (the template rendered in `sandbox`, when one is given). An answer reads it, and a count
/// counts it.
fn prompt(
    model: &engine::Model,
    request: &ModelRequest,
    sandbox: Option<&template::Renderer>,
    limits: &crate::limits::Limits,
) -> Result<Prompt, RequestError> {
    if let Some(text) = &request.base.text {
        return Ok(Prompt {
            tokens: raw_prompt(model, text)?,
            media: Vec::new(),
            in_reasoning: false,
        });
    }
    let messages = openai::messages(
        request.base.system.as_deref(),
        &request.base.turns,
        openai::Reader::Template,
    );
    let tools: Vec<openai::Tool> = offered(request).iter().map(ModelTool::openai).collect();
    let format = model.info().format;
    let kwargs = format.template_kwargs(&request.base.reasoning, &request.base.template_kwargs);
    let text = if model.template().is_some() || model.knows_chatml() {
        let chat = template::Chat {
            special: Some(model.special_tokens()),
            kwargs: Some(&kwargs),
            ..template::Chat::new(&messages, &tools)
        };
        template::render_in(sandbox, model.template(), &chat)?
    } else {
        template::plain(&messages)
    };
    fits(model, text.len())?;
    tracing::trace!(prompt = %text, "local prompt");
    let in_reasoning = format.opens_reasoning(&text);
    if multimodal::has_media(request) {
        let (tokens, media) = multimodal::prompt(model, &text, request, limits)?;
        return Ok(Prompt {
            tokens,
            media,
            in_reasoning,
        });
    }
    Ok(Prompt {
        in_reasoning,
        tokens: model.tokenize(&text),
        media: Vec::new(),
    })
}

/// The tokens of the prompt an answer to `request` would read.
fn counted(
    model: &engine::Model,
    request: &ModelRequest,
    sandbox: Option<&template::Renderer>,
    limits: &crate::limits::Limits,
) -> Result<usize, LocalError> {
    Ok(prompt(model, request, sandbox, limits)?.tokens.len())
}

/// A text no context of this size could take is refused by its length, untokenized.
fn fits(model: &engine::Model, bytes: usize) -> Result<(), RequestError> {
    let context = model.info().context;
    let fewest = bytes.div_ceil(model.longest_token().max(1));
    if fewest > context {
        return Err(RequestError::OverContextBytes {
            bytes,
            tokens: fewest,
            context,
        });
    }
    Ok(())
}

/// A text completion's prompt, as llama.cpp's own server reads one: the text continued as it
/// is, with no chat template (a beginning-of-text token first when the model wants one), or,
/// with a suffix, in the model's fill-in-the-middle form.
fn raw_prompt(model: &engine::Model, text: &TextPrompt) -> Result<Vec<LlamaToken>, RequestError> {
    let suffix = text.suffix.as_deref();
    fits(model, text.prompt.len() + suffix.map_or(0, str::len))?;
    match suffix {
        None => Ok(model.tokenize(&text.prompt)),
        Some(suffix) => model
            .fill_in_middle(&text.prompt, suffix)
            .ok_or(RequestError::NoFillInMiddle),
    }
}

fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// Where the answer begins: inside reasoning the prompt opened, free to reason first (a
/// reasoning model whose reasoning is not turned off), or at the answer.
fn start(model: &engine::Model, request: &ModelRequest, prompt: &Prompt) -> Start {
    let format = model.info().format;
    if prompt.in_reasoning {
        Start::InReasoning
    } else if format.reasons() && request.base.reasoning.enabled != Some(false) {
        Start::MayReason
    } else {
        Start::Answer
    }
}

/// The grammar the answer must follow from its first token: the response schema, or calls of
/// the tools in the model's own format when a call is required (reasoning first, for a model
/// that reasons). `None` leaves the model free (text, or a call it may make: see [`lazy`]).
fn grammar(model: &engine::Model, request: &ModelRequest, start: Start) -> Option<TopLevelGrammar> {
    let format = model.info().format;
    let marker = |m: &str| model.marker(m);
    if let Some(schema) = &request.response_schema {
        let schema = closed(&Value::Object(schema.clone()));
        if start == Start::Answer && format.family != Family::Harmony {
            return Some(TopLevelGrammar::from_json_schema(schema));
        }
        let lark = format.grammar(Goal::Json(&schema), start, &marker);
        return Some(TopLevelGrammar::from_lark(lark));
    }
    let tools = offered(request);
    if requires_call(request, tools) {
        let lark = format.grammar(Goal::Calls(tools), start, &marker);
        return Some(TopLevelGrammar::from_lark(lark));
    }
    None
}

/// The grammar of calls the model may make (`tool_choice` auto), started when it writes its
/// family's trigger, so that a call it begins names an offered tool with arguments that fit.
fn lazy(model: &engine::Model, request: &ModelRequest) -> Option<slots::Lazy> {
    let format = model.info().format;
    let tools = offered(request);
    if tools.is_empty() || request.response_schema.is_some() || requires_call(request, tools) {
        return None;
    }
    let trigger = format.trigger()?;
    let lark = format.lazy_grammar(tools, &|m: &str| model.marker(m));
    Some(slots::Lazy::new(
        trigger,
        format.bare_trigger(),
        TopLevelGrammar::from_lark(lark),
    ))
}

/// A limit on the reasoning's tokens, for a model that reasons, when the caller set one.
fn think(model: &engine::Model, request: &ModelRequest, prompt: &Prompt) -> Option<slots::Think> {
    let format = model.info().format;
    let budget = usize::try_from(request.base.reasoning.budget?).ok()?;
    let (open, close) = format.reasoning_markers()?;
    let end = model.tokens_of(format.reasoning_end()?);
    Some(slots::Think::new(
        budget,
        prompt.in_reasoning,
        open,
        close,
        end,
    ))
}

/// The control tokens the model's format reads, shown to its parser.
fn shown(model: &engine::Model) -> Vec<LlamaToken> {
    let format = model.info().format;
    let reasoning = format
        .reasoning_markers()
        .map(|(open, close)| [open, close]);
    format
        .special_texts()
        .into_iter()
        .chain(reasoning.into_iter().flatten())
        .filter_map(|text| model.special_token(text))
        .collect()
}

/// JSON Schema keywords llguidance does not enforce and refuses a schema for (Claude Code's
/// tools use `propertyNames`): left out of the grammar, which then holds the rest; the answer
/// is still checked against the whole schema (and repaired) after it is written.
const UNENFORCED: [&str; 14] = [
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedItems",
    "unevaluatedProperties",
];

/// The schema with `additionalProperties: false` on objects that list their properties and
/// say nothing of others, and without the keywords the grammar cannot enforce
/// ([`UNENFORCED`]). Small models left free to invent keys loop until the token limit.
pub(crate) fn closed(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => {
            let mut out = Map::with_capacity(o.len() + 1);
            for (k, v) in o {
                if UNENFORCED.contains(&k.as_str()) {
                    continue;
                }
                let v = match k.as_str() {
                    "properties" | "$defs" | "definitions" | "patternProperties" => match v {
                        Value::Object(props) => Value::Object(
                            props.iter().map(|(n, s)| (n.clone(), closed(s))).collect(),
                        ),
                        other => other.clone(),
                    },
                    "items" | "additionalProperties" => closed(v),
                    "anyOf" | "oneOf" | "allOf" | "prefixItems" => match v {
                        Value::Array(a) => Value::Array(a.iter().map(closed).collect()),
                        other => other.clone(),
                    },
                    _ => v.clone(),
                };
                out.insert(k.clone(), v);
            }
            if o.contains_key("properties") && !o.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// The one reader of an answer as the slots make it: `parser` reads its text, reasoning and
/// tool calls in the model's format (each call's start and its arguments in pieces), told to
/// `live` as they come when someone follows the call; what it has read when the answer ends is
/// the answer (no second reading). Without a parser (a text completion) the text is told as
/// it is.
///
/// When the call asked for log-probabilities, each token's is held ([`logprobs::Told`]) and
/// told just before the next text the answer shows once its own text has been read: a
/// token of reasoning or of a tool call's markup goes with the text after it, and what no text
/// follows is told last, on its own. A token a stop sequence cut is never told.
struct AnswerReader {
    parser: Option<Parser>,
    live: Option<Events>,
    told: logprobs::Told,
}

impl AnswerReader {
    fn new(parser: Option<Parser>, live: Option<Events>) -> Self {
        AnswerReader {
            parser,
            live,
            told: logprobs::Told::default(),
        }
    }

    fn tell(&mut self, pieces: Vec<crate::fulfil::written::Piece>, tokens: usize) {
        for piece in pieces {
            if let crate::fulfil::written::Piece::Text(text) = &piece {
                self.text(tokens, text);
            } else if let Some(live) = &self.live {
                live.event(piece.event(tokens));
            }
        }
    }

    /// Tells `text`, after the log-probabilities of the tokens read so far.
    fn text(&mut self, tokens: usize, text: &str) {
        if let Some(live) = &self.live {
            self.told.tell(live.as_ref(), tokens);
            live.event(Event::Delta { tokens, text });
        }
    }
}

impl slots::Reader for AnswerReader {
    fn read(&mut self, tokens: usize, text: &str) {
        self.told.read(text);
        match &mut self.parser {
            Some(parser) => {
                let pieces = parser.feed(text);
                self.tell(pieces, tokens);
            }
            None => self.text(tokens, text),
        }
    }

    fn logprob(&mut self, logprob: &crate::call::TokenLogprob) {
        // Held only for whoever follows the call: the whole answer has them all.
        if self.live.is_some() {
            self.told.token(logprob);
        }
    }

    fn end(mut self: Box<Self>, tokens: usize) -> Option<format::Answer> {
        let answer = self.parser.take().map(|parser| {
            let (pieces, answer) = parser.end();
            self.tell(pieces, tokens);
            answer
        });
        if let Some(live) = &self.live {
            self.told.tell(live.as_ref(), tokens);
        }
        answer
    }
}

/// The reader of the model's answer in its format: its reasoning apart, and the calls of the
/// offered `tools` in it (when a grammar requires a call, the whole answer is calls). `None`
/// for a text completion (`raw`), whose answer is its text as it is.
fn parser(
    format: Format,
    tools: &[ModelTool],
    raw: bool,
    id_base: &str,
    in_reasoning: bool,
) -> Option<Parser> {
    if raw {
        return None;
    }
    let tools = (!tools.is_empty()).then(|| Tools::new(tools));
    Some(Parser::new(format, tools, id_base, in_reasoning))
}

/// What the result says of a model whose format is not recognised, when tools were offered:
/// its calls were read leniently.
fn format_warning(format: Format, tools: &[ModelTool], name: &str) -> Option<String> {
    (!format.recognised() && !tools.is_empty()).then(|| {
        format!(
            "the local model {name}'s chat template writes tool calls in no format this server \
             recognises; its calls were read leniently (in <tool_call> tags or as a bare JSON \
             answer) and are not held to the tools while decoding unless a call is required"
        )
    })
}

/// The model's output as a completion: its reasoning first, then its text, then the tool
/// calls its reader found in it (in the model's own format); with its tokens'
/// log-probabilities when they were `asked` for (every token the answer's text has, reasoning
/// and calls' markup included).
fn completion(output: Output, name: &str, asked: bool) -> Completion {
    let logprobs = asked.then(|| logprobs::within(output.logprobs, output.text.len()));
    let read = output.read.unwrap_or_else(|| format::Answer {
        text: output.text,
        ..format::Answer::default()
    });
    let mut blocks: Vec<Block> = Vec::new();
    let reasoning = read.reasoning.trim();
    if !reasoning.is_empty() {
        blocks.push(Block::Reasoning(reasoning.to_owned()));
    }
    if read.calls.is_empty() {
        blocks.push(Block::Text(read.text));
    } else if !read.text.trim().is_empty() {
        blocks.push(Block::Text(read.text.trim().to_owned()));
    }
    let finish = if read.calls.is_empty() {
        output.finish
    } else {
        Finish::ToolUse
    };
    blocks.extend(read.calls.into_iter().map(|c| Block::ToolUse {
        id: c.id,
        name: c.name,
        input: c.input,
    }));
    Completion {
        blocks,
        model: name.to_owned(),
        finish,
        usage: Some(Usage {
            prompt: output.prompt_tokens,
            completion: output.completion_tokens,
            estimated: false,
            cached: Some(output.cached_tokens),
        }),
        warnings: Vec::new(),
        logprobs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ModelTool {
        ModelTool {
            name: name.into(),
            description: None,
            schema: Map::new(),
        }
    }

    fn output(text: &str) -> Output {
        Output {
            text: text.into(),
            read: None,
            prompt_tokens: 5,
            cached_tokens: 0,
            completion_tokens: 9,
            finish: Finish::EndTurn,
            in_reasoning: false,
            logprobs: Vec::new(),
        }
    }

    /// The completion of `output` as the slots make it: its text read by `parser` as it comes.
    fn completion(mut output: Output, parser: Option<Parser>, name: &str) -> Completion {
        let mut reader: Box<dyn slots::Reader> = Box::new(AnswerReader::new(parser, None));
        reader.read(1, &output.text);
        output.read = reader.end(1);
        super::completion(output, name, false)
    }

    /// The reader of an answer in `format` to `request`.
    fn reader(
        format: Format,
        request: &ModelRequest,
        id_base: &str,
        in_reasoning: bool,
    ) -> Option<Parser> {
        parser(format, offered(request), false, id_base, in_reasoning)
    }

    #[test]
    fn the_answers_calls_keep_the_ids_they_were_told_with_and_end_it() {
        let request = ModelRequest {
            tools: vec![tool("get_weather")],
            ..Default::default()
        };
        let generic = Format::default();
        let text = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let done = completion(
            output(text),
            reader(generic, &request, "call_x", false),
            "m",
        );
        assert_eq!(done.finish, Finish::ToolUse);
        assert!(matches!(&done.blocks[..],
            [Block::Text(t), Block::ToolUse { id, name, input }]
                if t == "Sure." && id == "call_x_0" && name == "get_weather" && input["city"] == "Paris"));
        // Without tools the text is the answer, whatever it looks like.
        let done = completion(
            output(text),
            reader(generic, &ModelRequest::default(), "c", false),
            "m",
        );
        assert!(matches!(&done.blocks[..], [Block::Text(t)] if t == text));
        // A required call is read from the first byte.
        let required = ModelRequest {
            tool_choice: Some(ToolChoice::Required),
            ..request.clone()
        };
        let done = completion(
            output("{\"name\": \"get_weather\", \"arguments\": {}}"),
            reader(generic, &required, "c", false),
            "m",
        );
        assert!(matches!(&done.blocks[..], [Block::ToolUse { id, .. }] if id == "c_0"));
        // A text completion is its text.
        let done = completion(output(text), None, "m");
        assert!(matches!(&done.blocks[..], [Block::Text(t)] if t == text));
        // Only an unrecognised format with tools offered is named in the warnings.
        let warned = format_warning(generic, &request.tools, "tiny");
        assert!(warned.is_some_and(|w| w.contains("tiny") && w.contains("leniently")));
        let qwen3 = Format::detect(Some("<tool_call> <think>"));
        assert_eq!(format_warning(qwen3, &request.tools, "q"), None);
        assert_eq!(format_warning(generic, &[], "q"), None);
    }

    #[test]
    fn reasoning_comes_first_and_apart_from_the_text_and_calls() {
        let qwen3 = Format::detect(Some("<tool_call> <think>"));
        let request = ModelRequest {
            tools: vec![tool("get_weather")],
            ..Default::default()
        };
        let text = "Paris, so a call.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
        let done = completion(output(text), reader(qwen3, &request, "c", true), "m");
        assert!(
            matches!(&done.blocks[..],
            [Block::Reasoning(r), Block::ToolUse { .. }] if r == "Paris, so a call."),
            "{:?}",
            done.blocks
        );
        let done = completion(
            output("<think>Two and two.</think>\n\n4"),
            reader(qwen3, &ModelRequest::default(), "c", false),
            "m",
        );
        assert!(
            matches!(&done.blocks[..],
            [Block::Reasoning(r), Block::Text(t)] if r == "Two and two." && t == "4"),
            "{:?}",
            done.blocks
        );
    }

    /// What a stream is told, each event as a line.
    #[derive(Default)]
    struct Heard(std::sync::Mutex<Vec<String>>);

    impl crate::fulfil::live::Sink for Heard {
        fn event(&self, event: Event<'_>) {
            let line = match event {
                Event::Logprobs { logprobs, .. } => {
                    let tokens: Vec<&str> = logprobs.iter().map(|t| t.token.as_str()).collect();
                    format!("logprobs {tokens:?}")
                }
                Event::Delta { text, .. } => format!("text {text:?}"),
                Event::Reasoning { text, .. } => format!("reasoning {text:?}"),
                other => format!("{other:?}"),
            };
            self.0.lock().unwrap().push(line);
        }
    }

    fn token(text: &str) -> crate::call::TokenLogprob {
        crate::call::TokenLogprob {
            token: text.into(),
            bytes: text.as_bytes().to_vec(),
            logprob: -1.0,
            top: Vec::new(),
        }
    }

    #[test]
    fn a_streamed_tokens_logprob_comes_before_the_text_it_made_and_a_cut_one_never() {
        let heard = Arc::new(Heard::default());
        let live: Events = heard.clone();
        // A text completion: " E" is held for the stop sequence "END", which then comes.
        let mut r: Box<dyn slots::Reader> = Box::new(AnswerReader::new(None, Some(live)));
        r.logprob(&token("Hel"));
        r.read(1, "Hel");
        r.logprob(&token("lo"));
        r.logprob(&token(" E"));
        r.read(2, "lo");
        r.logprob(&token("ND"));
        assert!(r.end(4).is_none());
        let heard = std::mem::take(&mut *heard.0.lock().unwrap());
        assert_eq!(
            heard,
            [
                "logprobs [\"Hel\"]",
                "text \"Hel\"",
                "logprobs [\"lo\"]",
                "text \"lo\""
            ]
        );
        // Reasoning's tokens go with the text after it; the whole answer has every token.
        let qwen3 = Format::detect(Some("<tool_call> <think>"));
        let heard = Arc::new(Heard::default());
        let live: Events = heard.clone();
        let parser = reader(qwen3, &ModelRequest::default(), "c", true);
        let mut r: Box<dyn slots::Reader> = Box::new(AnswerReader::new(parser, Some(live)));
        let tokens = ["Two", "</think>", "\n\n", "4"];
        for (i, t) in tokens.iter().enumerate() {
            r.logprob(&token(t));
            r.read(i + 1, t);
        }
        r.end(4);
        let heard = std::mem::take(&mut *heard.0.lock().unwrap());
        let told: Vec<&String> = heard.iter().filter(|l| l.starts_with("logprobs")).collect();
        let first_text = heard.iter().position(|l| l.starts_with("text")).unwrap();
        assert!(heard[first_text - 1].starts_with("logprobs"), "{heard:?}");
        assert!(heard[0].starts_with("reasoning"), "{heard:?}");
        let all: String = told.iter().map(|l| l.as_str()).collect();
        for t in tokens {
            assert_eq!(all.matches(&format!("{t:?}")).count(), 1, "{heard:?}");
        }
        let mut whole = output("Two</think>\n\n4 END");
        whole.text = "Two</think>\n\n4".into();
        whole.logprobs = ["Two", "</think>", "\n\n", "4", " END"].map(token).to_vec();
        let done = super::completion(whole, "m", true);
        let kept: Vec<String> = done
            .logprobs
            .unwrap()
            .into_iter()
            .map(|t| t.token)
            .collect();
        assert_eq!(kept, tokens);
        assert_eq!(super::completion(output("4"), "m", false).logprobs, None);
    }

    #[test]
    fn closing_a_schema_keeps_what_it_admits() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "object",
            "properties": {"b": {"type": "string"}}}}, "items": {"properties": {}},
            "additionalProperties": true});
        let c = closed(&schema);
        assert_eq!(c["additionalProperties"], json!(true));
        assert_eq!(c["properties"]["a"]["additionalProperties"], json!(false));
        assert_eq!(c["items"]["additionalProperties"], json!(false));
    }

    #[test]
    fn keywords_the_grammar_cannot_enforce_are_left_out_but_properties_of_their_names_kept() {
        // As Claude Code's tools write them: a map whose keys are held by `propertyNames`.
        let schema = json!({"type": "object", "properties": {
            "env": {"type": "object", "propertyNames": {"pattern": "^[A-Z_]+$"},
                    "additionalProperties": {"type": "string"}},
            "contains": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}},
            "not": {"required": ["x"]}});
        let c = closed(&schema);
        assert!(c["properties"]["env"].get("propertyNames").is_none(), "{c}");
        assert_eq!(
            c["properties"]["env"]["additionalProperties"],
            json!({"type": "string"})
        );
        assert!(
            c["properties"]["contains"].get("uniqueItems").is_none(),
            "{c}"
        );
        assert_eq!(
            c["properties"]["contains"]["items"],
            json!({"type": "string"})
        );
        assert!(c.get("not").is_none(), "{c}");
    }

    #[test]
    fn the_samplers_asked_for_reach_the_answers_params() {
        let tokens: Vec<LlamaToken> = (0..100).map(LlamaToken::new).collect();
        let mut request = ModelRequest::default();
        request.base.samplers = crate::call::Samplers {
            repeat_penalty: Some(1.3),
            repeat_last_n: Some(8),
            frequency_penalty: Some(0.5),
            min_p: Some(0.05),
            typical_p: Some(0.9),
            mirostat: Some(2),
            mirostat_eta: Some(0.3),
            ..Default::default()
        };
        let p = params(&request, Some(7), &tokens, 4096, 151_936);
        assert_eq!((p.seed, p.vocabulary), (7, 151_936));
        assert_eq!(
            (
                p.penalties.last_n,
                p.penalties.repeat,
                p.penalties.frequency
            ),
            (8, 1.3, 0.5)
        );
        // The penalties have seen the prompt's last tokens, as many as they look back on.
        assert_eq!(p.penalties.seen, tokens[92..]);
        assert_eq!((p.min_p, p.typical_p), (Some(0.05), Some(0.9)));
        let m = p.mirostat.unwrap();
        assert_eq!(
            (m.version, m.tau, m.eta),
            (MirostatVersion::V2, Mirostat::TAU, 0.3)
        );
        // -1 is the whole context, and no window is wider than the context.
        for (asked, window) in [(-1, 50), (1_000_000, 50), (0, 0)] {
            request.base.samplers.repeat_last_n = Some(asked);
            let p = params(&request, None, &tokens, 50, 10);
            assert_eq!(p.penalties.last_n, window, "{asked}");
            assert_eq!(p.penalties.seen.len(), window, "{asked}");
        }
        // None asked for: none applied, nothing kept of the prompt, mirostat off.
        let p = params(&ModelRequest::default(), None, &tokens, 4096, 10);
        assert_eq!(p.penalties, Penalties::default());
        assert!(!p.penalties.active() && p.mirostat.is_none());
    }
}
