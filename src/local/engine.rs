//! The model on llama.cpp (through `llama-cpp-2`): loading a GGUF file of any architecture
//! llama.cpp runs, its tokens and metadata, the samplers for one answer (greedy or sampled,
//! masked by a grammar when the answer must be JSON of a schema or a tool call), and the
//! answer's text decoded as tokens arrive. The slots that share one context are in
//! [`super::slots`].

use super::template::SpecialTokens;
use crate::call::Finish;
use llama_cpp_2::LlamaBackendDeviceType;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How the engine runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Prompt plus answer of one call, in tokens, at most (0: the model's trained context).
    pub context: usize,
    /// Calls answered at once, each in its own sequence of the shared context.
    pub slots: usize,
    /// CPU threads for llama.cpp.
    pub threads: usize,
    /// Tokens in one step at most (see [`STEP_TOKENS`]).
    pub step: usize,
    /// A chat template to use instead of the one the file carries.
    pub chat_template: Option<String>,
    /// Layers put on a GPU.
    pub gpu_layers: crate::config::GpuLayers,
}

/// Tokens in one step of the slots at most, by default. How many a step really takes is set
/// by time (see [`STEP_SECONDS`]): bigger steps read a prompt faster (the weights are read
/// from memory once a step, whatever its size), shorter ones answer a cancellation sooner.
pub const STEP_TOKENS: usize = 256;

/// How long one step should take: the slots size each step from the time the last ones took
/// per token, so a cancelled call (looked at between steps) keeps the engine at most about
/// this long, however deep into a long prompt it is.
pub const STEP_SECONDS: f64 = 0.3;

/// Tokens a step that reads a prompt takes at least, and the unit its size is rounded down
/// to: llama.cpp's CPU attention takes queries in tiles of 64 (below that it falls back to one
/// row at a time, several times slower deep into a long prompt).
pub const STEP_QUANTUM: usize = 64;

/// Tokens a slot's share of the cache holds at first: the cache grows on demand (see
/// [`super::slots::Slots::place`]) up to [`Info::context`] a slot.
pub const FIRST_CONTEXT: usize = 4096;

/// Room a call's answer is given when the context grows for it: a context is grown to hold the
/// prompt and the answer's limit, but not more than this for the answer, so a call asking for
/// 64,000 tokens does not reserve them all (a longer answer ends at the slot's end, `length`).
pub const ANSWER_ROOM: usize = 4096;

/// Tokens of one text an embedding is made of, at most (a model trained on fewer, fewer).
pub const MAX_EMBEDDING_TOKENS: usize = 8192;

/// llama.cpp's `LLAMA_FLASH_ATTN_TYPE_ENABLED`.
const FLASH_ATTENTION_ENABLED: i32 = 1;

/// Makes embeddings with a context of its own (see [`Model::embedder`]).
pub struct Embedder<'m> {
    context: LlamaContext<'m>,
    size: usize,
}

impl Embedder<'_> {
    /// The most tokens one text may have.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The embedding of one text's tokens (at most [`Embedder::size`], at least one),
    /// normalized to length 1.
    pub fn embed(&mut self, tokens: &[LlamaToken]) -> Result<Vec<f32>, EngineError> {
        let fail = |reason: String| EngineError::Embed { reason };
        if tokens.is_empty() || tokens.len() > self.size {
            return Err(fail(format!(
                "{} tokens, where 1 to {} fit",
                tokens.len(),
                self.size
            )));
        }
        self.context.clear_kv_cache();
        let mut batch = LlamaBatch::new(tokens.len(), 1);
        batch
            .add_sequence(tokens, 0, true)
            .map_err(|e| fail(brief(&e)))?;
        self.context
            .decode(&mut batch)
            .map_err(|e| fail(brief(&e)))?;
        let pooled = self
            .context
            .embeddings_seq_ith(0)
            .map_err(|e| fail(brief(&e)))?;
        Ok(normalized(pooled))
    }
}

/// Embeddings are unit vectors, as every backend's are.
pub use crate::backends::direct::normalized;

/// How to sample one answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    pub max_tokens: usize,
    /// `None` or 0: greedy.
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub seed: u64,
    pub stop: Vec<String>,
    /// Penalties on the tokens seen last (none by default).
    pub penalties: Penalties,
    /// Keep only the tokens at least this fraction as likely as the most likely one.
    pub min_p: Option<f64>,
    /// Locally typical sampling, up to this probability mass.
    pub typical_p: Option<f64>,
    /// Mirostat draws the token, in place of top-k, typical, top-p and min-p and the plain
    /// draw.
    pub mirostat: Option<Mirostat>,
    /// Tokens in the model's vocabulary (mirostat 1.0 estimates from it).
    pub vocabulary: usize,
    /// Each answer token's log-probability is reported, with this many likeliest tokens.
    pub logprobs: Option<usize>,
}

/// Penalties on the tokens among the last `last_n` seen, as llama.cpp applies them: such a
/// token's logit is divided by `repeat` (multiplied when negative), less `presence`, less
/// `frequency` for each time it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Penalties {
    /// How many of the last tokens are looked at (0: none).
    pub last_n: usize,
    pub repeat: f64,
    pub frequency: f64,
    pub presence: f64,
    /// The tokens seen before the answer's: the prompt's last ones, `last_n` at most.
    pub seen: Vec<LlamaToken>,
}

impl Penalties {
    /// The window llama.cpp (and Ollama) looks back on when none is asked for.
    pub const LAST_N: usize = 64;

    /// Whether they change any logit.
    pub fn active(&self) -> bool {
        self.last_n > 0 && (self.repeat != 1.0 || self.frequency != 0.0 || self.presence != 0.0)
    }
}

impl Default for Penalties {
    /// None: a repeat penalty of 1 and no presence or frequency penalty.
    fn default() -> Self {
        Penalties {
            last_n: Penalties::LAST_N,
            repeat: 1.0,
            frequency: 0.0,
            presence: 0.0,
            seen: Vec::new(),
        }
    }
}

/// Mirostat, as llama.cpp runs it: the draw aims at a surprise of `tau`, learning at `eta`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mirostat {
    pub version: MirostatVersion,
    pub tau: f64,
    pub eta: f64,
}

impl Mirostat {
    /// llama.cpp's target surprise when none is asked for.
    pub const TAU: f64 = 5.0;
    /// llama.cpp's learning rate when none is asked for.
    pub const ETA: f64 = 0.1;
}

/// Mirostat 1.0 or 2.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirostatVersion {
    V1,
    V2,
}

/// One generated answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub text: String,
    /// What the answer's reader made of the text as it was made (its reasoning and calls in
    /// the model's format); `None`: the text is the answer as it is (a text completion).
    pub read: Option<super::format::Answer>,
    pub prompt_tokens: usize,
    /// Prompt tokens whose cache was kept from an earlier call (not processed again).
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub finish: Finish,
    /// The prompt left the model inside its reasoning (the answer begins there).
    pub in_reasoning: bool,
    /// Each answer token's log-probability, when they were asked for (else empty).
    pub logprobs: Vec<crate::call::TokenLogprob>,
}

/// What the model says about itself, and where it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Info {
    pub name: String,
    pub architecture: String,
    /// Tokens per call (prompt plus answer) at most: the slots' context grows to it.
    pub context: usize,
    /// The context the model was trained with.
    pub trained: usize,
    pub slots: usize,
    pub threads: usize,
    /// Tokens in one step.
    pub step: usize,
    /// The devices llama.cpp found, e.g. "CPU".
    pub device: String,
    /// The layers asked for on a GPU (`auto`, a number), as loaded: `0` when `auto` fell back
    /// to the CPU, or found no GPU.
    pub gpu_layers: String,
    /// How the model writes tool calls and reasoning, told from its chat template.
    pub format: super::format::Format,
    /// The model's parameters (weights), as the file counts them.
    pub parameters: u64,
    /// Bytes of the model's weights.
    pub bytes: u64,
    /// How the weights are stored (`general.file_type`: `Q8_0`, `Q4_K_M`, `F16`, …), when the
    /// file says.
    pub file_type: Option<String>,
    /// The vocabulary has fill-in-the-middle tokens (see [`Model::fill_in_middle`]).
    pub fill_in_middle: bool,
    /// The chat template the model's prompts are rendered with, when it has one.
    pub chat_template: Option<std::sync::Arc<str>>,
    /// Its projector reads images into its prompts.
    pub vision: bool,
    /// Its projector reads audio into its prompts.
    pub audio: bool,
}

/// Why the engine cannot run a model, or cannot enforce a grammar.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("llama.cpp cannot start: {0}")]
    Start(&'static StartError),
    #[error("the model file {file} does not exist")]
    Missing { file: ModelFile },
    #[error(
        "cannot load the model file {file}: {} (is it a whole GGUF file of an architecture \
         llama.cpp runs? download it again)",
        load_reason(.source, .file)
    )]
    Load {
        file: ModelFile,
        source: llama_cpp_2::LlamaModelLoadError,
    },
    #[error("llama.cpp cannot make a context: {}", brief(.0))]
    Context(#[source] llama_cpp_2::LlamaContextLoadError),
    #[error(transparent)]
    Guidance(#[from] GuidanceError),
    /// llguidance refused the grammar; `reason` is its error's first line.
    #[error("the schema cannot be enforced while decoding: {reason}")]
    Schema { reason: String },
    /// llama.cpp did not make a text's embedding.
    #[error("llama.cpp did not make the embedding: {reason}")]
    Embed { reason: String },
}

/// llguidance could not read the model's vocabulary (kept: the calls that follow are told
/// the same); `reason` is its error's first line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("constrained decoding cannot start: {reason}")]
pub struct GuidanceError {
    reason: String,
}

impl EngineError {
    /// The error naming its model file as `file` instead.
    pub fn naming(self, file: ModelFile) -> Self {
        match self {
            EngineError::Missing { .. } => EngineError::Missing { file },
            EngineError::Load { source, .. } => EngineError::Load { file, source },
            e => e,
        }
    }
}

/// How an error names a model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFile {
    /// By its path.
    Path(PathBuf),
    /// A file of this server's cache, removed (its path, this user's cache, is not shown):
    /// what it was, e.g. "default model".
    Removed(String),
    /// The file of the model of this name, shown to callers without its path (the log has it).
    Named(String),
}

impl std::fmt::Display for ModelFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelFile::Path(path) => write!(f, "{}", path.display()),
            ModelFile::Removed(what) => write!(
                f,
                "(the cached {what}, removed: it is fetched again on the next call)"
            ),
            ModelFile::Named(name) => write!(f, "of the model {name:?}"),
        }
    }
}

/// Why llama.cpp did not load a file, naming the file as `file` does.
fn load_reason(e: &llama_cpp_2::LlamaModelLoadError, file: &ModelFile) -> String {
    match e {
        llama_cpp_2::LlamaModelLoadError::PathToStrError(_) => {
            format!("failed to convert path {file} to str")
        }
        e => brief(e),
    }
}

/// An error's first line, without the paths or backtraces a library may append.
pub fn brief(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// llama.cpp's process-wide state, started once; its own log lines go to this server's log
/// under the target `llama-cpp-2` (shown from `error` unless `RUST_LOG` names that target:
/// `RUST_LOG=warn,llama-cpp-2=info` shows the devices found and the layers offloaded).
pub fn backend() -> Result<&'static LlamaBackend, EngineError> {
    static BACKEND: OnceLock<Result<LlamaBackend, StartError>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // First, so that loading the backends is logged too.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            load_backend_modules()?;
            LlamaBackend::init().map_err(|e| StartError::Init(brief(&e)))
        })
        .as_ref()
        .map_err(EngineError::Start)
}

/// Why llama.cpp cannot start (kept: every later call is told the same).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[cfg(feature = "dynamic-backends")]
    #[error("the folder of this program is not known, so llama.cpp's backends cannot be found")]
    NoFolder,
    #[cfg(feature = "dynamic-backends")]
    #[error("llama.cpp's backends cannot be loaded from {}: the path is not UTF-8", .0.display())]
    NotUtf8(PathBuf),
    #[cfg(feature = "dynamic-backends")]
    #[error(
        "no llama.cpp backend was found in {} (the libggml-cpu-*.so files, or ggml-cpu-*.dll, \
         must sit beside the program)",
        .0.display()
    )]
    NoBackend(PathBuf),
    /// llama.cpp's own start failed: its error's first line.
    #[error("{0}")]
    Init(String),
}

/// In a build with the `dynamic-backends` feature, llama.cpp's backends are modules beside the
/// binary: ggml loads the CPU build that is best for this CPU (llama.cpp's log says which:
/// `loaded CPU backend from …/libggml-cpu-haswell.so`) and each GPU backend whose driver is
/// installed. Only that folder is searched (not the working directory).
#[cfg(feature = "dynamic-backends")]
fn load_backend_modules() -> Result<(), StartError> {
    let folder = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .ok_or(StartError::NoFolder)?;
    if folder.to_str().is_none() {
        return Err(StartError::NotUtf8(folder));
    }
    llama_cpp_2::llama_backend::load_backends_from_path(&folder);
    if llama_cpp_2::list_llama_ggml_backend_devices().is_empty() {
        return Err(StartError::NoBackend(folder));
    }
    Ok(())
}

/// llama.cpp's backends are built into the binary.
#[cfg(not(feature = "dynamic-backends"))]
fn load_backend_modules() -> Result<(), StartError> {
    Ok(())
}

/// The physical cores of this machine (hyperthreads share a core's arithmetic units, so
/// llama.cpp is fastest with one thread per core), or the logical CPUs when the topology is
/// not known.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, usize::from);
    let Ok(entries) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return logical;
    };
    let mut cores = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_cpu = name
            .to_str()
            .and_then(|n| n.strip_prefix("cpu"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_cpu {
            continue;
        }
        let topology = entry.path().join("topology");
        let read = |f: &str| std::fs::read_to_string(topology.join(f)).ok();
        if let (Some(package), Some(core)) = (read("physical_package_id"), read("core_id")) {
            cores.insert((package.trim().to_owned(), core.trim().to_owned()));
        }
    }
    if cores.is_empty() {
        logical
    } else {
        cores.len().min(logical)
    }
}

/// The vocabulary's beginning, end, unknown and padding tokens as text (`special`: as the
/// token is written, `<|endoftext|>`), those it has.
fn special_tokens(model: &LlamaModel) -> SpecialTokens {
    let vocab = model.vocab();
    let text = |token: LlamaToken| {
        (token.0 >= 0 && token.0 < vocab.n_tokens())
            .then(|| String::from_utf8_lossy(&vocab.token_to_piece(token, true, None)).into_owned())
    };
    // llama.cpp keeps no accessor for the unknown token; the GGUF names it.
    let unk = model
        .meta_val_str("tokenizer.ggml.unknown_token_id")
        .ok()
        .and_then(|id| id.parse::<i32>().ok());
    SpecialTokens {
        bos: text(vocab.bos()),
        eos: text(vocab.eos()),
        unk: unk.and_then(|id| text(LlamaToken(id))),
        pad: text(vocab.pad()),
    }
}

/// The name of a GGUF `general.file_type` (llama.cpp's `llama_ftype`), as Ollama reports a
/// model's quantization level.
pub fn file_type_name(file_type: u32) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

pub struct Model {
    model: LlamaModel,
    info: Info,
    template: Option<String>,
    /// The vocabulary's special tokens as text, for the chat template.
    special: SpecialTokens,
    /// Bytes of the vocabulary's longest token (special tokens as written), so that a text's
    /// bytes over this times the context are more tokens than the context holds.
    longest_token: usize,
    /// Built on the first constrained answer (a walk over the whole vocabulary).
    guidance: OnceLock<Result<ParserFactory, GuidanceError>>,
    /// A small model of the same vocabulary that drafts this one's tokens (`--draft-model`).
    draft: Option<Box<Model>>,
    /// The projector that reads images and audio into its prompts (`--mmproj`), or why the
    /// one asked for could not be loaded.
    projector: Option<Result<super::projector::Projector, String>>,
}

/// The vocabulary's fill-in-the-middle tokens (prefix, suffix, middle), when it has all three.
fn fim_tokens(model: &LlamaModel) -> Option<(LlamaToken, LlamaToken, LlamaToken)> {
    let vocab = model.vocab();
    let (pre, suf, mid) = (vocab.fim_pre(), vocab.fim_suf(), vocab.fim_mid());
    [pre, suf, mid]
        .iter()
        .all(|t| t.0 >= 0)
        .then_some((pre, suf, mid))
}

/// The devices llama.cpp found, as `list_models` shows them: `CPU`, or `Vulkan (NVIDIA …)`.
fn shown_devices(devices: Vec<llama_cpp_2::LlamaBackendDevice>) -> String {
    let shown = devices
        .into_iter()
        .map(|d| match d.device_type {
            LlamaBackendDeviceType::Cpu => d.backend,
            _ => format!("{} ({})", d.backend, d.description),
        })
        .collect::<Vec<_>>()
        .join(", ");
    if shown.is_empty() {
        "CPU".into()
    } else {
        shown
    }
}

/// The GPU backend this build has (a cargo feature), if any.
const GPU_BACKEND: Option<&str> = if cfg!(feature = "vulkan") {
    Some("Vulkan")
} else if cfg!(feature = "cuda") {
    Some("CUDA")
} else if cfg!(feature = "metal") {
    Some("Metal")
} else {
    None
};

/// What to check when a GPU build finds no device.
const NO_DEVICE_HINT: &str = if cfg!(feature = "vulkan") {
    "the Vulkan loader, libvulkan.so.1 or vulkan-1.dll, and a driver must be installed; \
     `vulkaninfo --summary` lists the devices a Vulkan driver offers; NVIDIA's driver needs \
     the GL dispatch libraries (libglvnd: Debian's libgl1 and libegl1); software devices \
     (llvmpipe) are used only when GGML_VK_VISIBLE_DEVICES names them"
} else if cfg!(feature = "cuda") {
    "`nvidia-smi` lists the devices the CUDA driver sees"
} else {
    "the system's GPU driver lists its devices"
};

/// A model's weights as loaded, and where.
struct Weights {
    model: LlamaModel,
    /// The layers placed on a GPU, as `list_models` reports them: a number, or `all`.
    gpu_layers: String,
    /// The context per slot llama.cpp's fit left room for, when it chose one.
    fitted_context: Option<usize>,
}

impl Weights {
    fn on(model: LlamaModel, gpu_layers: String, fitted_context: Option<usize>) -> Weights {
        Weights {
            model,
            gpu_layers,
            fitted_context,
        }
    }
}

/// The model's weights, with `asked` of their layers on a GPU where `devices` has one: `auto`
/// places as many as llama.cpp's fit finds room for (and the context with them), and falls
/// back to the CPU (saying so) when they do not load.
fn load_weights(
    backend: &LlamaBackend,
    path: &Path,
    settings: &Settings,
    devices: &[llama_cpp_2::LlamaBackendDevice],
) -> Result<Weights, EngineError> {
    use crate::config::GpuLayers;
    let asked = settings.gpu_layers;
    let gpu = devices.iter().find(|d| {
        matches!(
            d.device_type,
            LlamaBackendDeviceType::Gpu | LlamaBackendDeviceType::IntegratedGpu
        )
    });
    let load = |params: &LlamaModelParams| {
        LlamaModel::load_from_file(backend, path, params).map_err(|source| EngineError::Load {
            file: ModelFile::Path(path.to_path_buf()),
            source,
        })
    };
    if gpu.is_none()
        && asked != GpuLayers::Count(0)
        && let Some(backend) = GPU_BACKEND
    {
        tracing::warn!(
            "this build runs models on {backend} devices, and none was found: the model runs \
             on the CPU ({})",
            NO_DEVICE_HINT
        );
    }
    Ok(match (asked, gpu) {
        (GpuLayers::Count(n), Some(_)) => {
            let model = load(&LlamaModelParams::default().with_n_gpu_layers(n))?;
            // More than the model's layers: every one, the output's too, as a fit says.
            let layers = if n > model.n_layer() {
                ALL_LAYERS.to_owned()
            } else {
                n.to_string()
            };
            Weights::on(model, layers, None)
        }
        // No GPU: the CPU, as llama.cpp runs it by default.
        (_, None) => Weights::on(load(&LlamaModelParams::default())?, "0".to_owned(), None),
        (GpuLayers::Auto, Some(gpu)) => fitted_weights(load, path, settings, gpu)?,
    })
}

/// The weights with as many layers on `gpu` as llama.cpp's fit finds room for (and the
/// context with them); on the CPU, saying so, when they do not load there.
fn fitted_weights(
    load: impl Fn(&LlamaModelParams) -> Result<LlamaModel, EngineError>,
    path: &Path,
    settings: &Settings,
    gpu: &llama_cpp_2::LlamaBackendDevice,
) -> Result<Weights, EngineError> {
    let (params, context) = match fit(path, settings) {
        Some((params, context)) => (params, context),
        None => (Box::pin(LlamaModelParams::default()), None),
    };
    Ok(match load(&params) {
        Ok(model) => {
            let placed = params.n_gpu_layers();
            let layers = u32::try_from(placed)
                .ok()
                .filter(|&n| n <= model.n_layer())
                .map_or_else(|| ALL_LAYERS.to_owned(), |n| n.to_string());
            Weights::on(model, layers, context)
        }
        // Where they do not fit, the CPU, and the log says so.
        Err(e) => {
            tracing::warn!(
                device = %gpu.description, problem = %e,
                "the model did not load on the GPU: loading it on the CPU \
                 (set --gpu-layers to put fewer layers there)"
            );
            Weights::on(
                load(&LlamaModelParams::default().with_n_gpu_layers(0))?,
                "0".to_owned(),
                None,
            )
        }
    })
}

/// [`Info::gpu_layers`] of a model whose every layer, the output's too, is on a GPU.
const ALL_LAYERS: &str = "all";

/// Memory llama.cpp's fit leaves free on each device, as llama-server's `--fit-target` does.
const FIT_MARGIN_BYTES: usize = 1 << 30;

/// Tokens of context the fit keeps at least when it has to cut the context to make room, as
/// llama-server's `--fit-ctx` does (or the context asked, when that is less).
const FIT_CONTEXT_MIN: u32 = 4096;

/// llama.cpp's fit of the model's layers, and of the context when none is set, to the free
/// memory of the GPUs: the model's parameters, and the context per slot it chose. `None`
/// (saying why) when it finds no fit or cannot read the file.
fn fit(
    path: &Path,
    settings: &Settings,
) -> Option<(std::pin::Pin<Box<LlamaModelParams>>, Option<usize>)> {
    // The fit swaps llama.cpp's logger while it runs: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let file = std::ffi::CString::new(path.to_str()?).ok()?;
    let slots = u32::try_from(settings.slots.max(1)).unwrap_or(1);
    let asked = u32::try_from(settings.context).unwrap_or(u32::MAX);
    // Zero: the fit chooses (the trained context, cut down to make room).
    let mut context = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(asked.saturating_mul(slots)))
        .with_n_seq_max(slots)
        .with_kv_unified(true)
        .with_swa_full(true);
    let mut margins = vec![FIT_MARGIN_BYTES; llama_cpp_2::max_devices()];
    let minimum = match asked {
        0 => FIT_CONTEXT_MIN,
        asked => asked.min(FIT_CONTEXT_MIN),
    }
    .saturating_mul(slots);
    let mut params = Box::pin(LlamaModelParams::default());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // llama.cpp's GGML_LOG_LEVEL_INFO: the fit's own lines from info up reach the log.
    const LOG_INFO: u32 = 2;
    match params
        .as_mut()
        .fit_params(&file, &mut context, &mut margins, minimum, LOG_INFO)
    {
        Ok(fitted) => {
            let per_slot = (asked == 0).then(|| (fitted.n_ctx / slots) as usize);
            Some((params, per_slot.filter(|&n| n > 0)))
        }
        Err(e) => {
            tracing::warn!(
                problem = %e,
                "llama.cpp found no fit of the model to the GPU's free memory: trying every \
                 layer there"
            );
            None
        }
    }
}

/// Bytes of the vocabulary's longest token (at least 1).
fn longest_token(model: &LlamaModel) -> usize {
    model
        .tokens(true)
        .map(|(_, bytes)| bytes.len())
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The context of a call: the one `asked` (0: none) within the `trained` one (0: not known),
/// [`FIRST_CONTEXT`] when neither is known; within what the GPU's memory has room for when the
/// fit chose it.
fn context_size(asked: usize, trained: usize, fitted: Option<usize>) -> usize {
    let context = match (asked, trained) {
        (0, 0) => FIRST_CONTEXT,
        (0, trained) => trained,
        (asked, 0) => asked,
        (asked, trained) => asked.min(trained),
    };
    fitted.map_or(context, |fitted| context.min(fitted))
}

impl Model {
    /// Loads a GGUF model (memory-mapped) with its chat template; `Err` says why it cannot
    /// be run.
    pub fn load(path: &Path, settings: &Settings) -> Result<Model, EngineError> {
        let backend = backend()?;
        let file = || ModelFile::Path(path.to_path_buf());
        if !path.is_file() {
            return Err(EngineError::Missing { file: file() });
        }
        let devices = llama_cpp_2::list_llama_ggml_backend_devices();
        let Weights {
            model,
            gpu_layers,
            fitted_context,
        } = load_weights(backend, path, settings, &devices)?;
        let meta = |key: &str| model.meta_val_str(key).ok().filter(|s| !s.is_empty());
        let architecture = meta("general.architecture").unwrap_or_default();
        let name = meta("general.name").unwrap_or_else(|| architecture.clone());
        let template = settings
            .chat_template
            .clone()
            .or_else(|| meta("tokenizer.chat_template"));
        let special = special_tokens(&model);
        let longest_token = longest_token(&model);
        let trained = usize::try_from(model.n_ctx_train()).unwrap_or(0);
        let context = context_size(settings.context, trained, fitted_context);
        let file_type = meta("general.file_type")
            .and_then(|t| t.parse::<u32>().ok())
            .and_then(file_type_name)
            .map(str::to_owned);
        let fill_in_middle = fim_tokens(&model).is_some();
        let (parameters, bytes) = (model.n_params(), model.size());
        Ok(Model {
            model,
            info: Info {
                name,
                architecture,
                context: context.max(16),
                trained,
                slots: settings.slots.max(1),
                threads: settings.threads.max(1),
                step: settings.step.clamp(8, 4096),
                gpu_layers,
                device: shown_devices(devices),
                format: super::format::Format::detect(template.as_deref()),
                parameters,
                bytes,
                file_type,
                fill_in_middle,
                chat_template: template.as_deref().map(std::sync::Arc::from),
                vision: false,
                audio: false,
            },
            template,
            special,
            longest_token,
            guidance: OnceLock::new(),
            draft: None,
            projector: None,
        })
    }

    pub fn info(&self) -> &Info {
        &self.info
    }

    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// The special tokens the chat template is given (`bos_token`, `eos_token`, …).
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// Bytes of the vocabulary's longest token.
    pub fn longest_token(&self) -> usize {
        self.longest_token
    }

    /// Bytes of the model's weights.
    pub fn size(&self) -> u64 {
        self.model.size() + self.draft.as_ref().map_or(0, |d| d.size())
    }

    /// A context for the slots: one cache of `cells` tokens that every slot's sequence shares
    /// (llama.cpp's unified KV cache), each sequence taking the cells it needs.
    pub fn context(&self, cells: usize) -> Result<LlamaContext<'_>, EngineError> {
        let info = &self.info;
        let cells = u32::try_from(cells).unwrap_or(u32::MAX);
        let slots = u32::try_from(info.slots).unwrap_or(1);
        let threads = i32::try_from(info.threads).unwrap_or(1);
        let step = u32::try_from(info.step).unwrap_or(512);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(cells))
            .with_n_seq_max(slots)
            .with_kv_unified(true)
            // A model with sliding-window attention keeps its whole window, so a slot's cache
            // can be cut back to a shared prefix.
            .with_swa_full(true)
            .with_n_batch(step)
            .with_n_ubatch(step)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        self.model
            .new_context(backend()?, params)
            .map_err(EngineError::Context)
    }

    /// A context that makes embeddings: one text of up to [`Embedder::size`] tokens at a time,
    /// pooled as the model's file says (mean pooling for a model that says nothing, as a chat
    /// model's file does).
    pub fn embedder(&self) -> Result<Embedder<'_>, EngineError> {
        // The context the settings allow (the trained one by default), to this server's cap.
        let size = self.info.context.clamp(16, MAX_EMBEDDING_TOKENS);
        let declared = self
            .model
            .meta_val_str(&format!("{}.pooling_type", self.info.architecture))
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .map(LlamaPoolingType::from)
            .filter(|p| !matches!(p, LlamaPoolingType::None | LlamaPoolingType::Unspecified));
        let tokens = u32::try_from(size).unwrap_or(u32::MAX);
        let threads = i32::try_from(self.info.threads).unwrap_or(1);
        // The whole text is one batch: pooling reads every token of it at once.
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(tokens))
            .with_n_batch(tokens)
            .with_n_ubatch(tokens)
            .with_n_seq_max(1)
            .with_embeddings(true)
            .with_pooling_type(declared.unwrap_or(LlamaPoolingType::Mean))
            // The whole text is one step: attention in tiles, not a matrix of its tokens
            // squared per head (gigabytes at a few thousand tokens).
            .with_flash_attention_policy(FLASH_ATTENTION_ENABLED)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let context = self
            .model
            .new_context(backend()?, params)
            .map_err(EngineError::Context)?;
        Ok(Embedder { context, size })
    }

    /// Tokens in the model's vocabulary.
    /// Has `draft` draft this model's tokens; `Err` says why it cannot (its vocabulary is not
    /// this one's).
    pub fn set_draft(&mut self, draft: Model) -> Result<(), String> {
        let (ours, theirs) = (self.model.vocab(), draft.model.vocab());
        let size = self.vocabulary();
        // The same size, and the same bytes for tokens spread over the whole vocabulary.
        let step = (size / 257).max(1);
        let differs = (0..size).step_by(step).find(|&id| {
            let token = LlamaToken(i32::try_from(id).unwrap_or(0));
            ours.token_to_piece(token, true, None) != theirs.token_to_piece(token, true, None)
        });
        match (draft.vocabulary() == size, differs) {
            (true, None) => {
                self.draft = Some(Box::new(draft));
                Ok(())
            }
            (false, _) => Err(format!(
                "its vocabulary has {} tokens, the model's {size}",
                draft.vocabulary()
            )),
            (true, Some(id)) => Err(format!("its token {id} is not the model's")),
        }
    }

    /// Loads the projector at `path` to read images and audio into this model's prompts; when
    /// it does not load, the model takes text only and media is refused with the reason.
    pub fn set_projector(&mut self, path: &Path) -> Result<(), String> {
        let gpu = self.info.gpu_layers != "0";
        let loaded = super::projector::Projector::load(path, &self.model, self.info.threads, gpu)
            .map_err(|e| e.to_string());
        if let Ok(projector) = &loaded {
            self.info.vision = projector.vision();
            self.info.audio = projector.audio_rate().is_some();
        }
        let problem = loaded.as_ref().err().cloned();
        self.projector = Some(loaded);
        problem.map_or(Ok(()), Err)
    }

    /// The projector that reads images and audio into this model's prompts: `None` when no
    /// projector was asked for, `Err` why the one asked for is not there.
    pub fn projector_state(&self) -> Option<Result<&super::projector::Projector, &str>> {
        (self.projector.as_ref()).map(|p| p.as_ref().map_err(String::as_str))
    }

    /// The projector, when one is loaded.
    pub fn projector(&self) -> Option<&super::projector::Projector> {
        self.projector_state().and_then(Result::ok)
    }

    /// The model that drafts this one's tokens, when there is one.
    pub fn draft(&self) -> Option<&Model> {
        self.draft.as_deref()
    }

    pub fn vocabulary(&self) -> usize {
        usize::try_from(self.model.n_vocab()).unwrap_or(0)
    }

    /// The tokens of a text to embed, read as text, with the markers the vocabulary puts
    /// around one (a beginning-of-text token, an end or separator token for BERT's kind).
    pub fn embedding_tokens(&self, text: &str) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        let mut tokens = Vec::new();
        let bos = vocab.bos();
        if vocab.should_add_bos() && bos.0 >= 0 {
            tokens.push(bos);
        }
        tokens.extend(vocab.tokenize(text.as_bytes(), false, false));
        let eos = vocab.eos();
        if vocab.should_add_eos() && eos.0 >= 0 {
            tokens.push(eos);
        } else if vocab.should_add_sep() {
            let sep = vocab.sep();
            if sep.0 >= 0 {
                tokens.push(sep);
            }
        }
        tokens
    }

    /// The tokens of a prompt: special tokens in its text are read as such, and a
    /// beginning-of-text token is put first when the model wants one and the text has none.
    pub fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        let mut tokens = vocab.tokenize(text.as_bytes(), false, true);
        let bos = vocab.bos();
        if vocab.should_add_bos() && bos.0 >= 0 && tokens.first() != Some(&bos) {
            tokens.insert(0, bos);
        }
        tokens
    }

    /// The tokens of a fill-in-the-middle prompt: the vocabulary's prefix token, `prefix`, its
    /// suffix token, `suffix`, and its middle token, after which the model writes what goes
    /// between (a beginning-of-text token first when the model wants one). The texts are read
    /// as text: a special token spelled in them is not one. `None` when the vocabulary has no
    /// fill-in-the-middle tokens.
    pub fn fill_in_middle(&self, prefix: &str, suffix: &str) -> Option<Vec<LlamaToken>> {
        let (pre, suf, mid) = fim_tokens(&self.model)?;
        let vocab = self.model.vocab();
        let mut tokens = Vec::new();
        let bos = vocab.bos();
        if vocab.should_add_bos() && bos.0 >= 0 {
            tokens.push(bos);
        }
        tokens.push(pre);
        tokens.extend(vocab.tokenize(prefix.as_bytes(), false, false));
        tokens.push(suf);
        tokens.extend(vocab.tokenize(suffix.as_bytes(), false, false));
        tokens.push(mid);
        Some(tokens)
    }

    /// Whether the vocabulary has ChatML's markers as tokens (a chat model whose file lacks
    /// its template), rather than being a base model that continues text.
    pub fn knows_chatml(&self) -> bool {
        let vocab = self.model.vocab();
        ["<|im_start|>", "<|im_end|>"]
            .iter()
            .all(|m| vocab.tokenize(m.as_bytes(), false, true).len() == 1)
    }

    /// Counts the tokens of a text.
    pub fn count(&self, text: &str) -> usize {
        self.tokenize(text).len()
    }

    /// Whether a step of the model runs on the CPU: it does unless every layer, the output's
    /// too, is on a GPU (then the CPU only hands the step over, and other models need not wait
    /// for the pool's CPU turn).
    pub fn on_cpu(&self) -> bool {
        self.info.gpu_layers != ALL_LAYERS
    }

    /// Whether the model's cache can be cut back to a prefix (a recurrent model's cannot), as
    /// taking back drafted tokens needs.
    pub fn cache_cuts(&self) -> bool {
        !self.model.is_recurrent() && !self.model.is_hybrid()
    }

    /// Whether a token ends the answer (end of turn or of text).
    pub fn is_end(&self, token: LlamaToken) -> bool {
        self.model.vocab().is_eog(token)
    }

    /// The bytes a token stands for in an answer: control tokens are not shown, except those
    /// in `shown` (the markers the answer's format reads, which its parser takes out).
    pub fn piece(&self, token: LlamaToken, shown: &[LlamaToken]) -> Vec<u8> {
        let special = shown.contains(&token);
        self.model.vocab().token_to_piece(token, special, None)
    }

    /// The control token a text is in this vocabulary, if it is one (`[TOOL_CALLS]`,
    /// `<|channel|>`): a single token that is not shown as text.
    pub fn special_token(&self, text: &str) -> Option<LlamaToken> {
        let vocab = self.model.vocab();
        match vocab.tokenize(text.as_bytes(), false, true).as_slice() {
            [token] if vocab.token_to_piece(*token, false, None).is_empty() => Some(*token),
            _ => None,
        }
    }

    /// A marker as a grammar names it: its special token (`<[id]>`), or its text.
    pub fn marker(&self, text: &str) -> String {
        match self.special_token(text) {
            Some(token) => format!("<[{}]>", token.0),
            None => super::format::grammar::literal(text),
        }
    }

    /// The tokens of a text inside an answer (no beginning-of-text token; special tokens
    /// spelled in it read as such).
    pub fn tokens_of(&self, text: &str) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), false, true)
    }

    /// Compiles a grammar the answer must follow; `Err` says why it cannot be enforced.
    pub fn constraint(&self, grammar: TopLevelGrammar) -> Result<LlamaSampler, EngineError> {
        Ok(LlamaSampler::from(self.matcher(grammar)?))
    }

    /// The grammar's matcher, not yet a sampler (one started mid-answer is fed what was
    /// written first).
    pub fn matcher(&self, grammar: TopLevelGrammar) -> Result<Matcher, EngineError> {
        let factory = self
            .guidance
            .get_or_init(|| {
                let env = LlamaSampler::llguidance_tok_env(&self.model);
                let mut factory = ParserFactory::new_simple(&env)
                    .map_err(|e| GuidanceError { reason: brief(&e) })?;
                factory.quiet();
                Ok(factory)
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let parser = factory
            .create_parser(grammar)
            .map_err(|e| EngineError::Schema { reason: brief(&e) })?;
        Ok(Matcher::new(Ok(parser)))
    }
}

/// One sampler of an answer's chain, as [`plan`] orders them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// [`Penalties`], having seen the tokens before the answer's.
    Penalties {
        last_n: i32,
        repeat: f32,
        frequency: f32,
        presence: f32,
    },
    TopK(i32),
    Typical(f32),
    TopP(f32),
    MinP(f32),
    Temperature(f32),
    /// Mirostat draws the token, seeded.
    Mirostat {
        version: MirostatVersion,
        tau: f32,
        eta: f32,
        seed: u32,
    },
    /// A draw from what is left, seeded.
    Draw(u32),
    /// The most likely token.
    Greedy,
}

impl Step {
    /// The llama.cpp sampler this step is.
    fn sampler(self, params: &Params) -> LlamaSampler {
        let vocabulary = i32::try_from(params.vocabulary).unwrap_or(i32::MAX);
        match self {
            Step::Penalties {
                last_n,
                repeat,
                frequency,
                presence,
            } => LlamaSampler::penalties(vocabulary, last_n, repeat, frequency, presence)
                .with_tokens(&params.penalties.seen),
            Step::TopK(k) => LlamaSampler::top_k(k),
            Step::Typical(p) => LlamaSampler::typical(p, 1),
            Step::TopP(p) => LlamaSampler::top_p(p, 1),
            Step::MinP(p) => LlamaSampler::min_p(p, 1),
            Step::Temperature(t) => LlamaSampler::temp(t),
            Step::Mirostat {
                version: MirostatVersion::V1,
                tau,
                eta,
                seed,
            } => LlamaSampler::mirostat(vocabulary, seed, tau, eta, MIROSTAT_M),
            Step::Mirostat {
                version: MirostatVersion::V2,
                tau,
                eta,
                seed,
            } => LlamaSampler::mirostat_v2(seed, tau, eta),
            Step::Draw(seed) => LlamaSampler::dist(seed),
            Step::Greedy => LlamaSampler::greedy(),
        }
    }
}

/// The tokens mirostat 1.0 estimates the distribution from, as llama.cpp's own chain sets it.
const MIROSTAT_M: i32 = 100;

/// The samplers of one answer, in the order of llama-server's default chain: the penalties
/// first, then greedy without a temperature (or at 0); else the `top_k` most likely tokens,
/// typical sampling, nucleus filtering for `top_p`, min-p, the temperature and a draw seeded
/// by `seed`, or with mirostat on the temperature and mirostat's own draw.
pub fn plan(params: &Params) -> Vec<Step> {
    let mut steps = Vec::new();
    let p = &params.penalties;
    if p.active() {
        steps.push(Step::Penalties {
            last_n: i32::try_from(p.last_n).unwrap_or(i32::MAX),
            repeat: p.repeat as f32,
            frequency: p.frequency as f32,
            presence: p.presence as f32,
        });
    }
    let Some(t) = params.temperature.filter(|t| *t > 1e-6) else {
        steps.push(Step::Greedy);
        return steps;
    };
    // llama.cpp's draw takes a 32-bit seed: both halves of ours count.
    let seed = (params.seed ^ (params.seed >> 32)) as u32;
    let draw = match params.mirostat {
        Some(m) => Step::Mirostat {
            version: m.version,
            tau: m.tau as f32,
            eta: m.eta as f32,
            seed,
        },
        None => {
            steps.extend(narrowing(params));
            Step::Draw(seed)
        }
    };
    steps.push(Step::Temperature(t as f32));
    steps.push(draw);
    steps
}

/// The samplers that narrow the draw, those asked for: top-k, typical, top-p, min-p.
fn narrowing(params: &Params) -> impl Iterator<Item = Step> {
    let fraction = |p: Option<f64>| p.filter(|p| *p > 0.0 && *p < 1.0).map(|p| p as f32);
    [
        params
            .top_k
            .filter(|k| *k > 0)
            .map(|k| Step::TopK(i32::try_from(k).unwrap_or(i32::MAX))),
        fraction(params.typical_p).map(Step::Typical),
        fraction(params.top_p).map(Step::TopP),
        params
            .min_p
            .filter(|p| *p > 0.0)
            .map(|p| Step::MinP(p as f32)),
    ]
    .into_iter()
    .flatten()
}

/// The sampler chain for one answer: the grammar's mask first when there is one, then the
/// [`plan`]'s samplers.
pub fn sampler(params: &Params, constraint: Option<LlamaSampler>) -> LlamaSampler {
    let mut chain: Vec<LlamaSampler> = constraint.into_iter().collect();
    chain.extend(plan(params).into_iter().map(|step| step.sampler(params)));
    LlamaSampler::chain_simple(chain)
}

/// An answer's text, decoded as its tokens arrive: bytes that do not yet make a whole
/// character wait for the next token, and stop sequences are looked for in the new text only
/// (each keeps how much of it ends the text so far), so the work per token is the token's
/// length per sequence: it grows with neither the answer nor the sequences' lengths.
#[derive(Debug, Default)]
pub struct Text {
    text: String,
    pending: Vec<u8>,
    stops: crate::call::Stops,
    /// Bytes of `text` handed on to be read ([`Text::unread`]).
    read: usize,
}

impl Text {
    /// The text of an answer that ends at the first of `stops`.
    pub fn new(stops: &[String]) -> Self {
        Text {
            stops: crate::call::Stops::new(stops),
            ..Text::default()
        }
    }

    /// Adds a token's bytes; returns the new text and, when a stop sequence is now complete,
    /// where the earliest one starts and which it is.
    pub fn push(&mut self, bytes: &[u8]) -> (String, Option<(usize, String)>) {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Bytes that can never be a character: shown as the replacement character.
            Err(_) => {
                let lossy = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending.clear();
                return self.append(lossy);
            }
        };
        let rest = self.pending.split_off(valid);
        let done = std::mem::replace(&mut self.pending, rest);
        self.append(String::from_utf8(done).unwrap_or_default())
    }

    fn append(&mut self, new: String) -> (String, Option<(usize, String)>) {
        self.text.push_str(&new);
        let stop = self
            .stops
            .feed(&new)
            .map(|(back, s)| (self.text.len().saturating_sub(back), s.to_owned()));
        (new, stop)
    }

    /// The text so far (bytes of an unfinished character left out).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text not handed on yet that can no longer become part of a stop sequence (up to
    /// `end`, where one begins, once it is met), now handed on: the answer's reader never
    /// sees a stop sequence or what follows it.
    pub fn unread(&mut self, end: Option<usize>) -> &str {
        let safe = end.unwrap_or_else(|| self.text.len().saturating_sub(self.stops.held()));
        let from = self.read;
        match self.text.get(from..safe) {
            Some(part) => {
                self.read = safe;
                part
            }
            // Not a character boundary yet, or nothing new.
            None => "",
        }
    }

    /// The whole text, cut where a stop sequence starts, and the part of it not handed on.
    pub fn end(self, cut: Option<usize>) -> (String, String) {
        let read = self.read;
        let text = self.finish(cut);
        let rest = text.get(read..).unwrap_or_default().to_owned();
        (text, rest)
    }

    /// The whole text, cut where a stop sequence starts.
    pub fn finish(mut self, cut: Option<usize>) -> String {
        if !self.pending.is_empty() {
            self.text
                .push_str(&String::from_utf8_lossy(&std::mem::take(&mut self.pending)));
        }
        if let Some(at) = cut {
            self.text.truncate(at);
        }
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llama_cpp_2::token::data::LlamaTokenData;
    use llama_cpp_2::token::data_array::LlamaTokenDataArray;

    fn sampled(temperature: Option<f64>) -> Params {
        Params {
            temperature,
            seed: (5 << 32) | 3,
            ..Params::default()
        }
    }

    fn penalised() -> Penalties {
        Penalties {
            repeat: 1.5,
            presence: 0.25,
            ..Penalties::default()
        }
    }

    #[test]
    fn samplers_not_asked_for_or_at_their_neutral_values_are_left_out() {
        // Greedy, or the temperature and a draw on both halves of the seed.
        assert_eq!(plan(&sampled(None)), [Step::Greedy]);
        assert_eq!(plan(&sampled(Some(0.0))), [Step::Greedy]);
        assert_eq!(
            plan(&sampled(Some(0.5))),
            [Step::Temperature(0.5), Step::Draw(6)]
        );
        let neutral = Params {
            top_k: Some(0),
            top_p: Some(1.0),
            min_p: Some(0.0),
            typical_p: Some(1.0),
            penalties: Penalties {
                last_n: 0,
                ..penalised()
            },
            ..sampled(Some(0.7))
        };
        assert_eq!(plan(&neutral), [Step::Temperature(0.7), Step::Draw(6)]);
        assert!(!Penalties::default().active());
    }

    #[test]
    fn the_chain_is_llama_servers_order_with_only_what_is_asked_for() {
        let penalties = Step::Penalties {
            last_n: 64,
            repeat: 1.5,
            frequency: 0.0,
            presence: 0.25,
        };
        let every = Params {
            top_k: Some(40),
            top_p: Some(0.9),
            min_p: Some(0.05),
            typical_p: Some(0.8),
            penalties: penalised(),
            ..sampled(Some(0.7))
        };
        assert_eq!(
            plan(&every),
            [
                penalties,
                Step::TopK(40),
                Step::Typical(0.8),
                Step::TopP(0.9),
                Step::MinP(0.05),
                Step::Temperature(0.7),
                Step::Draw(6),
            ]
        );
        // Greedy stays greedy, after the penalties.
        let greedy = Params {
            temperature: None,
            ..every.clone()
        };
        assert_eq!(plan(&greedy), [penalties, Step::Greedy]);
        // Mirostat draws in place of the narrowing samplers and the plain draw.
        let mirostat = Mirostat {
            version: MirostatVersion::V1,
            tau: 5.0,
            eta: 0.1,
        };
        let with_mirostat = Params {
            mirostat: Some(mirostat),
            ..every.clone()
        };
        let draw = Step::Mirostat {
            version: MirostatVersion::V1,
            tau: 5.0,
            eta: 0.1,
            seed: 6,
        };
        assert_eq!(
            plan(&with_mirostat),
            [penalties, Step::Temperature(0.7), draw]
        );
    }

    /// The token a chain picks from `logits` (token `i` has the `i`th).
    fn pick(chain: &mut LlamaSampler, logits: &[f32]) -> LlamaToken {
        let data = logits
            .iter()
            .enumerate()
            .map(|(i, l)| LlamaTokenData::new(LlamaToken::new(i as i32), *l, 0.0));
        let mut array = LlamaTokenDataArray::from_iter(data, false);
        array.apply_sampler(chain);
        let token = array.selected_token().unwrap();
        chain.accept(token);
        token
    }

    #[test]
    fn penalties_turn_greedy_from_the_tokens_seen_in_the_prompt_and_the_answer() {
        let logits = [2.0, 1.5, 1.2, 0.1];
        assert_eq!(
            pick(&mut sampler(&sampled(None), None), &logits),
            LlamaToken::new(0)
        );
        // The prompt's token 0 is penalised (2 / 1.5 - 0.25 is below 1.5): token 1 is the
        // most likely now, then (seen too) token 2.
        let params = Params {
            penalties: Penalties {
                seen: vec![LlamaToken::new(0)],
                ..penalised()
            },
            vocabulary: logits.len(),
            ..sampled(None)
        };
        let mut chain = sampler(&params, None);
        assert_eq!(pick(&mut chain, &logits), LlamaToken::new(1));
        assert_eq!(pick(&mut chain, &logits), LlamaToken::new(2));
        // Every sampler llama.cpp builds for a plan samples.
        let every = Params {
            top_k: Some(3),
            top_p: Some(0.9),
            min_p: Some(0.01),
            typical_p: Some(0.95),
            temperature: Some(0.8),
            ..params.clone()
        };
        for version in [None, Some(MirostatVersion::V1), Some(MirostatVersion::V2)] {
            let picks: std::collections::BTreeSet<i32> = (0..64u64)
                .map(|seed| {
                    let params = Params {
                        seed,
                        mirostat: version.map(|version| Mirostat {
                            version,
                            tau: Mirostat::TAU,
                            eta: Mirostat::ETA,
                        }),
                        ..every.clone()
                    };
                    pick(&mut sampler(&params, None), &logits).0
                })
                .collect();
            // A draw (seeds differ in what they pick), not a greedy choice.
            assert!(picks.len() > 1, "{version:?}: {picks:?}");
            // Without mirostat, top-k 3 (and top-p 0.9) leave the least likely token out.
            if version.is_none() {
                assert!(!picks.contains(&3), "{picks:?}");
            }
        }
    }

    #[test]
    fn the_earliest_stop_wins() {
        let stops = vec!["b".to_owned(), "a".to_owned(), String::new()];
        assert_eq!(crate::call::first_stop("xxab", &stops), Some((2, "a")));
        assert_eq!(crate::call::first_stop("xyz", &stops), None);
    }

    #[test]
    fn text_waits_for_whole_characters_and_finds_stops_across_tokens() {
        let mut text = Text::new(&["\nQ:".to_owned()]);
        let e = "é".as_bytes();
        assert_eq!(text.push(&e[..1]).0, "");
        assert_eq!(text.push(&e[1..]).0, "é");
        assert_eq!(text.push(b" Paris.\n").1, None);
        let (_, stop) = text.push(b"Q");
        assert_eq!(stop, None);
        let (_, stop) = text.push(b": next");
        assert_eq!(stop, Some(("é Paris.".len(), "\nQ:".to_owned())));
        assert_eq!(text.finish(stop.map(|s| s.0)), "é Paris.");
    }

    #[test]
    fn a_removed_cached_file_is_named_by_what_it_was_not_by_its_path() {
        let path = PathBuf::from("/home/someone/.cache/agent-as-model/models/m.gguf");
        let file = || ModelFile::Path(path.clone());
        let removed = ModelFile::Removed("default model".into());
        for e in [
            EngineError::Missing { file: file() },
            EngineError::Load {
                file: file(),
                source: llama_cpp_2::LlamaModelLoadError::PathToStrError(path.clone()),
            },
        ] {
            assert!(e.to_string().contains("/home/someone"), "{e}");
            let shown = e.naming(removed.clone()).to_string();
            assert!(!shown.contains("/home/someone"), "{shown}");
            assert!(
                shown.contains(
                    "(the cached default model, removed: it is fetched again on the next call)"
                ),
                "{shown}"
            );
        }
    }

    #[test]
    fn bytes_that_are_never_a_character_are_replaced() {
        let mut text = Text::default();
        text.push(&[0xff, b'a']);
        assert_eq!(text.finish(None), "\u{fffd}a");
    }
}
