//! The one typed configuration: every setting and limit, from flags or environment variables,
//! read once at startup and passed down. The environment is read elsewhere only for what is
//! not one of these settings: the variables a models file's `key_env` names, `RUST_LOG` and
//! `AGENT_AS_MODEL_CACHE_DIR`.

pub use crate::error::Backend;
use crate::limits::Limits;
use clap::Parser;
use std::time::Duration;

/// What `--version` prints: the version and the protocol revisions served, by era.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nMCP protocol: 2026-07-28 (stateless, input-required rounds); legacy 2025-11-25, ",
    "2025-06-18, 2025-03-26, 2024-11-05 (sampling during the call)"
);

/// How the server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// JSON-RPC lines on stdin and stdout: what MCP hosts start.
    Stdio,
}

/// How log lines are written (to stderr, always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// What an Ollama request's `keep_alive` may do to a local model (`--request-keep-alive`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RequestKeepAlive {
    /// As Ollama does: it sets how long the model stays loaded after the request (`0`
    /// unloads it once its calls are answered).
    #[default]
    Honour,
    /// Answered as if it were not given, with a warning: the model keeps its configured
    /// keep-alive.
    Ignore,
}

/// What answers when the host cannot sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fallback {
    /// Nothing: the call fails with -32021, as the original server does.
    None,
    Local,
    Provider,
}

/// An MCP server whose tools are shaped like model APIs and are answered by the connected
/// host's own model through MCP sampling: no API key.
///
/// Serves MCP over stdio: add it to a host rather than running it by hand. Hosts that sample
/// (VS Code, GitHub Copilot CLI, fast-agent) answer with their own model; for the many that do
/// not (Claude Code, Cursor, Goose, Codex, Zed, Gemini CLI), --fallback local answers with an
/// embedded model (fetched once) and --fallback provider with an OpenAI-compatible API. To see
/// it work without any host: agent-as-model try "What is the capital of France?". Logs go to
/// stderr; set RUST_LOG=debug for more.
#[derive(Debug, Clone, Parser)]
#[command(name = "agent-as-model", version = VERSION)]
pub struct Config {
    /// Longest wait for the host's answer to one sampling request (legacy era), in seconds
    #[arg(long, env = "AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sampling_timeout_secs: u64,

    /// How long a sealed requestState stays valid (2026-07-28 era), in seconds
    #[arg(long, env = "AGENT_AS_MODEL_STATE_TTL_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub state_ttl_secs: u64,

    /// Key that seals requestState (at least 32 bytes); random per process when unset
    #[arg(long, env = "AGENT_AS_MODEL_STATE_KEY", hide_env_values = true)]
    pub state_key: Option<String>,

    /// Older sealing keys still accepted for verification, comma-separated (key rotation)
    #[arg(
        long,
        env = "AGENT_AS_MODEL_STATE_KEYS_PREVIOUS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub state_keys_previous: Vec<String>,

    /// How the server is reached
    #[arg(long, env = "AGENT_AS_MODEL_TRANSPORT", value_enum, default_value_t = Transport::Stdio)]
    pub transport: Transport,

    /// Most tool calls in flight at once; beyond it a call is refused at once with "retry"
    #[arg(long, env = "AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_calls_in_flight: u64,

    /// Serve MCP over Streamable HTTP at this address (e.g. 127.0.0.1:8000) instead of stdio
    #[arg(long, env = "AGENT_AS_MODEL_HTTP", value_name = "ADDRESS")]
    pub http: Option<std::net::SocketAddr>,

    /// Host header values accepted over HTTP, comma-separated (default: localhost, 127.0.0.1,
    /// ::1 and the listening address)
    #[arg(long, env = "AGENT_AS_MODEL_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Browser origins accepted over HTTP (scheme://host:port), comma-separated; a request with
    /// any other Origin header is refused (default: this server's own loopback origins)
    #[arg(long, env = "AGENT_AS_MODEL_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,

    /// Bearer token every HTTP request must carry (prefer the environment variable); an empty
    /// one is refused at start, not taken as "no token"
    #[arg(long, env = "AGENT_AS_MODEL_AUTH_TOKEN", hide_env_values = true,
          value_parser = non_empty_token)]
    pub auth_token: Option<String>,

    /// Most legacy (stateful) HTTP sessions held at once; a new one beyond it gets 503
    #[arg(long, env = "AGENT_AS_MODEL_MAX_SESSIONS", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,

    /// Seconds a legacy HTTP session may stay without a message before it is closed
    #[arg(long, env = "AGENT_AS_MODEL_SESSION_IDLE_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub session_idle_secs: u64,

    /// Most tool calls one HTTP session may have in flight; beyond it a call gets -32000
    #[arg(long, env = "AGENT_AS_MODEL_MAX_CALLS_PER_SESSION", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_calls_per_session: u64,

    /// Most TCP connections held open over HTTP; past it a new connection is answered at once
    /// (`/healthz` still 200, anything else 503) and closed (default: half the descriptor limit,
    /// at most 4096)
    #[arg(long, env = "AGENT_AS_MODEL_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,

    /// Seconds an HTTP connection may take to send a request's headers (also the keep-alive
    /// idle limit between requests)
    #[arg(long, env = "AGENT_AS_MODEL_HEADER_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout_secs: u64,

    /// Seconds an HTTP request body may go without a byte arriving before it is answered 408
    #[arg(long, env = "AGENT_AS_MODEL_BODY_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout_secs: u64,

    /// Seconds a whole HTTP request body may take to arrive, however steadily; past it the
    /// request is answered 408
    #[arg(long, env = "AGENT_AS_MODEL_BODY_DEADLINE_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_deadline_secs: u64,

    /// Most bytes of request bodies held at once over HTTP, across every connection; a body
    /// that would go past it is answered 503 with Retry-After
    #[arg(long, env = "AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", default_value_t = 256 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_body_buffer_bytes: u64,

    /// Most JSON values (array elements, object members and their names) one HTTP request body
    /// may hold; a body with more is answered 413. Parsed, each value takes tens of bytes, so a
    /// body of tiny values takes many times its size in memory
    #[arg(long, env = "AGENT_AS_MODEL_MAX_JSON_VALUES", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(16..))]
    pub max_json_values: u64,

    /// Seconds a streamed answer over HTTP may wait for a client that reads none of it (its
    /// buffer full); past it the call is cancelled and its model freed
    #[arg(long, env = "AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stream_write_timeout_secs: u64,
    /// Seconds a Responses WebSocket may wait between creates before it is closed (pings do
    /// not extend it)
    #[arg(long, env = "AGENT_AS_MODEL_WEBSOCKET_IDLE_SECS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub websocket_idle_secs: u64,

    /// Where Responses are kept for previous_response_id and GET /v1/responses/{id}: `memory`
    /// (this process), or a Redis URL (redis://host:port[/db]) that replicas share. Read by
    /// [`Config::responses_store`] (a URL may carry a password: never shown)
    #[arg(
        long,
        env = "AGENT_AS_MODEL_RESPONSES_STORE",
        default_value = "memory",
        hide_env_values = true
    )]
    pub responses_store: String,

    /// Most Responses the memory store keeps; the oldest goes first (with Redis, Redis's own
    /// maxmemory bounds the count)
    #[arg(
        long,
        env = "AGENT_AS_MODEL_RESPONSES_MAX_ENTRIES",
        default_value_t = 10_000
    )]
    pub responses_max_entries: u64,

    /// Most bytes of stored Responses the memory store keeps, the oldest going first; a
    /// Response larger than this is not stored (in Redis either)
    #[arg(long, env = "AGENT_AS_MODEL_RESPONSES_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub responses_max_bytes: u64,

    /// Seconds a stored Response is kept (at most a year)
    #[arg(long, env = "AGENT_AS_MODEL_RESPONSES_TTL_SECS", default_value_t = 86_400,
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub responses_ttl_secs: u64,

    /// Log lines as text, or as JSON objects (one a line, each tool call with its request id
    /// and duration; the default level becomes info)
    #[arg(long, env = "AGENT_AS_MODEL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Which model answers: the host's (sampling), the embedded one, or a provider
    #[arg(long, env = "AGENT_AS_MODEL_BACKEND", value_enum, default_value_t = Backend::Host)]
    pub backend: Backend,

    /// What answers when the host cannot sample (none: the call fails with -32021)
    #[arg(long, env = "AGENT_AS_MODEL_FALLBACK", value_enum, default_value_t = Fallback::None)]
    pub fallback: Fallback,

    /// A models file (TOML): named models answered by the host, the local model or providers,
    /// chosen per call by the `model` argument (instead of --backend and --fallback)
    #[arg(long, env = "AGENT_AS_MODEL_MODELS", conflicts_with_all = ["backend", "fallback"])]
    pub models: Option<std::path::PathBuf>,

    /// Longest wait for a model at its `max_in_flight` cap, in seconds, before the call is
    /// refused with "retry"
    #[arg(long, env = "AGENT_AS_MODEL_QUEUE_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub queue_timeout_secs: u64,

    #[command(flatten)]
    pub local: LocalArgs,

    #[command(flatten)]
    pub provider: ProviderArgs,

    #[command(flatten)]
    pub limits: Limits,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Commands besides serving.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Ask one question through the whole MCP path: starts this server, connects to it as a
    /// host that answers its sampling requests with the embedded model (or a provider), calls
    /// a tool and prints the answer
    Try(TryArgs),
    /// Serve another MCP server (started as `-- COMMAND ARGS…`) to a host that cannot sample:
    /// everything the server offers is passed through, and its sampling requests are answered
    /// here, by the host when it can sample, else by the embedded model or a provider
    Bridge(BridgeArgs),
    /// Run an agent CLI on this server's models: starts this server on a free loopback port
    /// (with the options given before `launch` or after the CLI's name; the embedded model
    /// unless a models file or another backend is named), runs the CLI from PATH pointed at it
    /// (the arguments after `--` passed on), and stops the server when the CLI ends, with its
    /// exit status. CLIs: claude (Claude Code), codex (Codex CLI), gemini (Gemini CLI),
    /// opencode (`launch --help` lists them with the model each would ask for)
    Launch(LaunchArgs),
}

/// An agent CLI `launch` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentCli {
    /// Claude Code (`claude`, from npm: @anthropic-ai/claude-code), over the Anthropic API
    Claude,
    /// Codex CLI (`codex`, from npm: @openai/codex), over the Responses API
    Codex,
    /// Gemini CLI (`gemini`, from npm: @google/gemini-cli), over the Gemini API
    Gemini,
    /// opencode (`opencode`, from npm: opencode-ai), over OpenAI chat completions
    Opencode,
}

#[derive(Debug, Clone, clap::Args)]
pub struct LaunchArgs {
    /// The CLI to run
    #[arg(value_enum)]
    pub cli: AgentCli,
    /// The model the CLI asks for (a name a models file gives; by default the server's
    /// default model)
    #[arg(long = "launch-model", value_name = "NAME")]
    pub model: Option<String>,
    /// Server options, as they would be given before `launch`
    #[arg(allow_hyphen_values = true, value_name = "SERVER_OPTIONS")]
    pub options: Vec<String>,
    /// The CLI's own arguments, after `--`
    #[arg(last = true, value_name = "CLI_ARGUMENTS")]
    pub arguments: Vec<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BridgeArgs {
    /// Which model answers the downstream server's sampling when the host cannot
    #[arg(long, value_enum, default_value_t = Direct::Local)]
    pub with: Direct,
    /// The protocol era spoken to the downstream server (auto: 2026-07-28 when it offers it,
    /// else the legacy handshake)
    #[arg(long, value_enum, default_value_t = DownstreamEra::Auto)]
    pub downstream_era: DownstreamEra,
    /// Restarts of a downstream server that exits, before the bridge gives up (with backoff
    /// from half a second doubling to 30 s)
    #[arg(long, default_value_t = 5)]
    pub restarts: u32,
    /// Longest wait for the downstream server's answer to one request, in seconds
    #[arg(long, default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout_secs: u64,
    /// A Streamable HTTP downstream server's URL (e.g. http://127.0.0.1:8000/mcp), instead of a
    /// command
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// A bearer token for the `--url` downstream
    #[arg(long, env = "AGENT_AS_MODEL_DOWNSTREAM_TOKEN", hide_env_values = true)]
    pub url_token: Option<String>,
    /// The downstream server's command and arguments, after `--`
    #[arg(last = true, num_args = 1.., required_unless_present = "url")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DownstreamEra {
    Auto,
    Legacy,
    Modern,
}

#[derive(Debug, Clone, clap::Args)]
pub struct TryArgs {
    /// The question
    pub prompt: String,
    /// The tool to call
    #[arg(long, default_value = "chat_complete")]
    pub tool: String,
    /// Print the whole tool result as JSON instead of the answer's text
    #[arg(long)]
    pub json: bool,
    /// A JSON Schema the answer must satisfy (structured output), as JSON text
    #[arg(long)]
    pub schema: Option<String>,
    /// Which model answers the sampling requests (the host's side)
    #[arg(long, value_enum, default_value_t = Direct::Local)]
    pub with: Direct,
    /// Longest answer, in tokens
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
    /// Declare sampling without tools, as VS Code does: the server then asks for structured
    /// output in the prompt and validates it
    #[arg(long)]
    pub no_sampling_tools: bool,
}

/// A model this server calls itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Direct {
    Local,
    Provider,
}

/// The embedded model.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// A GGUF model file (any architecture llama.cpp runs) instead of the default
    /// Qwen2.5-Coder-0.5B-Instruct, which is fetched into the cache on first use. The file is
    /// memory-mapped, not copied: replace it by renaming a new file over it, never by writing
    /// into it in place (a file cut short under the map kills the process with SIGBUS); a
    /// file changed since it was loaded is refused for every call until a restart
    #[arg(long, env = "AGENT_AS_MODEL_MODEL_FILE", conflicts_with = "model")]
    pub model_file: Option<std::path::PathBuf>,

    /// The local model from Hugging Face, `hf:OWNER/REPO/FILE.gguf` (any architecture
    /// llama.cpp runs), fetched once into the cache; HF_ENDPOINT and HF_TOKEN as for the Hub's
    /// own client
    #[arg(
        long,
        env = "AGENT_AS_MODEL_MODEL",
        value_name = "hf:OWNER/REPO/FILE.gguf"
    )]
    pub model: Option<String>,

    /// The Hugging Face Hub's address
    #[arg(
        long,
        env = "HF_ENDPOINT",
        default_value = "https://huggingface.co",
        hide = true
    )]
    pub hf_endpoint: String,

    /// A Hugging Face token, for gated and private models (use the environment variable)
    #[arg(long, env = "HF_TOKEN", hide_env_values = true, hide = true)]
    pub hf_token: Option<String>,

    /// Prompt plus answer of one call to the local model, in tokens, at most: its context grows
    /// to this on demand (0: the model's trained context)
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_CONTEXT", default_value_t = 0,
          value_parser = local_context)]
    pub local_context: u64,

    /// Calls waiting for the local model at most; more are refused at once
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_QUEUE", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub local_queue: u64,

    /// Calls the local model answers at once (each in its own slot of one shared context)
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_SLOTS", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=16))]
    pub local_slots: u64,

    /// CPU threads for the local model [default: the physical cores]
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_THREADS",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub local_threads: Option<u64>,

    /// The local model's layers put on a GPU: `auto` (where a GPU backend was built in and a
    /// device is found, as many as llama.cpp's fit finds room for, leaving 1 GiB of the
    /// device free, with the context cut to fit when none is set; the CPU if they do not load
    /// there), a number, or 0 for the CPU alone. A models file's entry may set its own
    /// `gpu_layers`
    #[arg(long, env = "AGENT_AS_MODEL_GPU_LAYERS", default_value = "auto", value_parser = gpu_layers)]
    pub gpu_layers: GpuLayers,

    /// How long a local model stays loaded with no call, in seconds, before it is unloaded
    /// (its memory given back; the next call loads it again); negative: for good. A models
    /// file's entry may set its own `keep_alive`, and an Ollama request its own
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_KEEP_ALIVE", default_value_t = -1,
          allow_hyphen_values = true)]
    pub local_keep_alive: i64,

    /// What an Ollama request's `keep_alive` does: `honour` (it sets how long the model stays
    /// loaded after the request, `0` unloading it for everyone once its calls are answered, as
    /// Ollama does) or `ignore` (the request is answered as if it gave none, with a warning in
    /// the `x-agent-as-model-warnings` header and the log: a model keeps --local-keep-alive or
    /// its models file entry's `keep_alive`, and no client unloads it for the others)
    #[arg(long, env = "AGENT_AS_MODEL_REQUEST_KEEP_ALIVE", value_enum,
          default_value_t = RequestKeepAlive::Honour)]
    pub request_keep_alive: RequestKeepAlive,

    /// The memory the loaded local models may take together, in bytes or with a unit (`8G`,
    /// `512M`): a model that would go over it first unloads the least recently used idle
    /// ones; 0: no budget [default: three quarters of the machine's memory]
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_MEMORY", value_parser = byte_size)]
    pub local_memory: Option<u64>,

    /// A folder for the local models' prompt cache on disk: a long prompt's KV cache is saved
    /// there after it is read, and when its model unloads or the server stops, and a later
    /// prompt that starts with the same tokens reads it back instead of processing them again
    /// (after a restart too); replicas may share it [default: none, no cache on disk]
    #[arg(long, env = "AGENT_AS_MODEL_PROMPT_CACHE_DIR")]
    pub prompt_cache_dir: Option<std::path::PathBuf>,

    /// How the local models draft tokens to decode several a step: `ngram` looks the next
    /// tokens up where the sequence's last tokens appeared before (an edit or rewrite that
    /// repeats its input), and every drafted token is checked by the model, so answers do not
    /// change; `none` decodes one token a step
    #[arg(long, env = "AGENT_AS_MODEL_SPECULATIVE", value_enum,
          default_value_t = Speculative::None)]
    pub speculative: Speculative,

    /// A small model of the local model's vocabulary that drafts its next tokens (a GGUF file,
    /// or `hf:OWNER/REPO/FILE.gguf` fetched from the Hub as `--model` is): the model checks
    /// every drafted token, so answers do not change; it takes the place of `--speculative`'s
    /// drafts
    #[arg(long, env = "AGENT_AS_MODEL_DRAFT_MODEL")]
    pub draft_model: Option<std::path::PathBuf>,

    /// The local model's multimodal projector (llama.cpp's `mmproj`, a GGUF file or
    /// `hf:OWNER/REPO/FILE.gguf` fetched from the Hub as `--model` is): images, and audio where
    /// the projector takes it, are read into its prompts; without one the model takes text only
    #[arg(long, env = "AGENT_AS_MODEL_MMPROJ")]
    pub mmproj: Option<std::path::PathBuf>,

    /// The bytes the prompt cache on disk may hold (with a unit: `8G`, `512M`): past it, the
    /// files used longest ago are removed; 0: no prompt cache on disk
    #[arg(long, env = "AGENT_AS_MODEL_PROMPT_CACHE_MAX_BYTES", value_parser = byte_size,
          default_value = "8G")]
    pub prompt_cache_max_bytes: u64,

    /// The seed of the local model's sampled answers when a call gives none, so that they
    /// repeat [default: a new one for each call]
    #[arg(long, env = "AGENT_AS_MODEL_LOCAL_SEED")]
    pub local_seed: Option<u64>,

    /// A Jinja chat template to render the local model's prompts with, instead of the one its
    /// GGUF carries (`tokenizer.chat_template`); read once, at start
    #[arg(long, env = "AGENT_AS_MODEL_CHAT_TEMPLATE_FILE")]
    pub chat_template_file: Option<std::path::PathBuf>,

    /// Memory the model's chat template may use while it renders a prompt, in bytes: on
    /// Linux it renders in a child process limited to this much and killed at its deadline
    #[arg(long, env = "AGENT_AS_MODEL_CHAT_TEMPLATE_MEMORY_BYTES", default_value_t = 1 << 30,
          value_parser = clap::value_parser!(u64).range(16 << 20..))]
    pub chat_template_memory_bytes: u64,
}

/// How a local model drafts tokens to decode several a step (`--speculative`; see
/// `local::speculate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speculative {
    /// No drafts: one token a step.
    #[default]
    None,
    /// Drafts looked up in the sequence itself (its prompt and answer so far).
    Ngram,
}

/// The OpenAI-compatible provider.
#[derive(Debug, Clone, clap::Args)]
pub struct ProviderArgs {
    /// Base URL of an OpenAI-compatible API, e.g. http://localhost:11434/v1 (Ollama)
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_URL")]
    pub provider_url: Option<String>,

    /// The provider's model name
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_MODEL")]
    pub provider_model: Option<String>,

    /// The provider's API key (prefer the environment variable: flags show in process lists)
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_KEY", hide_env_values = true)]
    pub provider_key: Option<String>,

    /// Send tools natively (false: describe them in the prompt)
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_TOOLS", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub provider_tools: bool,

    /// Send output schemas as response_format json_schema (false: ask in the prompt)
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_JSON_SCHEMA", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub provider_json_schema: bool,

    /// Ask the provider to stream its answer (read as it is made: progress, and the first
    /// token seen at once); false for providers that refuse `stream`
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_STREAM", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub provider_stream: bool,

    /// The most tokens the provider's model writes in one answer (its output limit): a call
    /// asking for more is sent this many, where the provider would refuse it
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_MAX_TOKENS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub provider_max_tokens: Option<u32>,

    /// Longest wait for a provider's first byte, and between two parts of its answer, in
    /// seconds (an answer still arriving is not cut; see --provider-deadline-secs)
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub provider_timeout_secs: u64,

    /// Longest a provider call may take in all, in seconds: every attempt, the waits between
    /// them, and the whole answer however steadily it streams
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=7 * 86_400))]
    pub provider_deadline_secs: u64,

    /// Retries on 429, 5xx, timeouts and refused connections, with backoff
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_RETRIES", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(0..=10))]
    pub provider_retries: u32,

    /// Largest provider answer read, in bytes; a longer one fails the call
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_MAX_RESPONSE_BYTES", default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024..))]
    pub provider_max_response_bytes: u64,

    /// Most tool calls read from one provider answer; an answer with more fails the call
    #[arg(long, env = "AGENT_AS_MODEL_PROVIDER_MAX_TOOL_CALLS", default_value_t = 128,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub provider_max_tool_calls: u64,
}

/// `--auth-token`: an empty (or blank) token would turn authentication off in silence.
fn non_empty_token(token: &str) -> Result<String, String> {
    if token.trim().is_empty() {
        return Err(
            "an empty AGENT_AS_MODEL_AUTH_TOKEN (--auth-token) would let every request \
                    in: give a secret, or unset the variable to serve without a token"
                .into(),
        );
    }
    Ok(token.to_owned())
}

/// How many of a local model's layers go to a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuLayers {
    /// All of them where a device is found, falling back to the CPU.
    #[default]
    Auto,
    Count(u32),
}

impl std::fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuLayers::Auto => write!(f, "auto"),
            GpuLayers::Count(n) => write!(f, "{n}"),
        }
    }
}

/// `--gpu-layers`: `auto`, or a number of layers (0: the CPU).
pub fn gpu_layers(text: &str) -> Result<GpuLayers, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("auto") {
        return Ok(GpuLayers::Auto);
    }
    text.parse()
        .map(GpuLayers::Count)
        .map_err(|_| format!("expected `auto` or a number of layers (0: the CPU), got {text:?}"))
}

/// `--local-memory`: bytes, or a number with `K`, `M`, `G` or `T` (powers of 1024).
fn byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(format!(
                "{text:?}: expected bytes, or a number with K, M, G or T"
            ));
        }
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?}: expected bytes, or a number with K, M, G or T"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("{text:?}: expected a size of 0 or more"));
    }
    Ok((value * f64::from(1u32 << 10).powi(shift / 10)) as u64)
}

/// `--local-context`: 0 (the model's own), or 256 tokens to about a million.
fn local_context(text: &str) -> Result<u64, String> {
    let tokens: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of tokens, got {text:?}"))?;
    if tokens == 0 || (256..=1 << 20).contains(&tokens) {
        Ok(tokens)
    } else {
        Err(format!(
            "expected 0 (the model's trained context) or 256 to 1048576 tokens, got {tokens}"
        ))
    }
}

impl Config {
    pub fn sampling_timeout(&self) -> Duration {
        Duration::from_secs(self.sampling_timeout_secs)
    }

    pub fn state_ttl(&self) -> Duration {
        Duration::from_secs(self.state_ttl_secs)
    }

    /// The Responses store the setting names, or the error saying what it must be (which
    /// repeats no password).
    pub fn responses_store(&self) -> Result<store::Setting, String> {
        store::Setting::parse(&self.responses_store)
    }

    /// The bounds of the Responses store.
    pub fn responses_bounds(&self) -> store::Bounds {
        store::Bounds {
            max_entries: usize::try_from(self.responses_max_entries).unwrap_or(usize::MAX),
            max_bytes: usize::try_from(self.responses_max_bytes).unwrap_or(usize::MAX),
            ttl: Duration::from_secs(self.responses_ttl_secs),
        }
    }

    /// The sealing keys: the active one first, then those that only verify.
    pub fn state_keys(&self) -> Vec<Vec<u8>> {
        let previous = self.state_keys_previous.iter().map(|k| k.trim());
        self.state_key
            .as_deref()
            .into_iter()
            .chain(previous)
            .filter(|k| !k.is_empty())
            .map(|k| k.as_bytes().to_vec())
            .collect()
    }
}

/// Half the process's open-file limit (the other half is for the model, the log, the sessions'
/// streams and the connections answered past the cap), between 16 and 4096; 512 when the limit
/// cannot be read.
/// The Responses store's setting and bounds, read here and used by the store (`api::store`).
pub mod store {
    use std::time::Duration;

    /// What `AGENT_AS_MODEL_RESPONSES_STORE` says: this process's memory, or a Redis server.
    #[derive(Clone, PartialEq, Eq)]
    pub enum Setting {
        /// Responses kept in this process (the default).
        Memory,
        /// Responses kept in the Redis server at this URL (`redis://host:port[/db]`).
        Redis(String),
    }

    impl Setting {
        /// `memory`, or a `redis://` URL that names a host; anything else is refused, naming the
        /// setting.
        pub fn parse(text: &str) -> Result<Setting, String> {
            let text = text.trim();
            if text == "memory" {
                return Ok(Setting::Memory);
            }
            if text.starts_with("redis://") {
                return match redis::Client::open(text) {
                    Ok(_) => Ok(Setting::Redis(text.to_owned())),
                    Err(e) => Err(format!(
                        "AGENT_AS_MODEL_RESPONSES_STORE (--responses-store): not a Redis URL ({e}); \
                         expected redis://host:port[/db]"
                    )),
                };
            }
            // A URL with a password is not repeated in the message.
            let shown = if text.contains('@') {
                "a URL with credentials"
            } else {
                text
            };
            Err(format!(
                "AGENT_AS_MODEL_RESPONSES_STORE (--responses-store) must be `memory` or a \
                 redis://host:port[/db] URL, not `{}`",
                crate::error::clip(shown)
            ))
        }
    }

    impl std::fmt::Debug for Setting {
        /// The kind of store only: a Redis URL may carry a password.
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Setting::Memory => f.write_str("Memory"),
                Setting::Redis(_) => f.write_str("Redis(…)"),
            }
        }
    }

    /// The bounds of the store (a Redis store keeps `max_bytes`, for one entry, and `ttl`).
    #[derive(Debug, Clone, Copy)]
    pub struct Bounds {
        /// Most responses kept; the oldest goes first.
        pub max_entries: usize,
        /// Most bytes of stored JSON kept; the oldest goes first.
        pub max_bytes: usize,
        /// How long a response is kept after it was made.
        pub ttl: Duration,
    }

    impl Default for Bounds {
        /// 10,000 responses, 256 MiB, a day.
        fn default() -> Self {
            Bounds {
                max_entries: 10_000,
                max_bytes: 256 << 20,
                ttl: Duration::from_secs(86_400),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_layers_and_the_memory_budget_are_read_or_refused_naming_what_is_expected() {
        assert_eq!(gpu_layers("auto"), Ok(GpuLayers::Auto));
        assert_eq!(gpu_layers(" AUTO "), Ok(GpuLayers::Auto));
        assert_eq!(gpu_layers("0"), Ok(GpuLayers::Count(0)));
        assert_eq!(gpu_layers("33"), Ok(GpuLayers::Count(33)));
        assert!(gpu_layers("-1").unwrap_err().contains("`auto` or a number"));
        assert_eq!(byte_size("0"), Ok(0));
        assert_eq!(byte_size("512M"), Ok(512 << 20));
        assert_eq!(byte_size("8G"), Ok(8 << 30));
        assert_eq!(byte_size("8GiB"), Ok(8 << 30));
        assert_eq!(byte_size("1.5g"), Ok(3 << 29));
        assert_eq!(byte_size("1000"), Ok(1000));
        assert!(byte_size("lots").is_err());
        assert!(byte_size("5X").is_err());
        let c = Config::try_parse_from(["agent-as-model"]).unwrap();
        assert_eq!(c.local.gpu_layers, GpuLayers::Auto);
        assert_eq!(c.local.local_keep_alive, -1);
        assert_eq!(c.local.request_keep_alive, RequestKeepAlive::Honour);
        assert_eq!(c.local.local_memory, None);
        let c = Config::try_parse_from([
            "agent-as-model",
            "--gpu-layers",
            "0",
            "--local-keep-alive",
            "-1",
            "--local-memory",
            "2G",
        ])
        .unwrap();
        assert_eq!(c.local.gpu_layers, GpuLayers::Count(0));
        assert_eq!(c.local.local_memory, Some(2 << 30));
        let c =
            Config::try_parse_from(["agent-as-model", "--request-keep-alive", "ignore"]).unwrap();
        assert_eq!(c.local.request_keep_alive, RequestKeepAlive::Ignore);
    }

    #[test]
    fn keys_come_active_first_and_blank_ones_are_skipped() {
        let c = Config::try_parse_from([
            "agent-as-model",
            "--state-key",
            "k1",
            "--state-keys-previous",
            "k2, ,k3",
        ])
        .unwrap();
        assert_eq!(
            c.state_keys(),
            vec![b"k1".to_vec(), b"k2".to_vec(), b"k3".to_vec()]
        );
        assert_eq!(c.sampling_timeout(), Duration::from_secs(300));
        assert_eq!(c.transport, Transport::Stdio);
    }

    #[test]
    fn the_responses_store_is_memory_by_default_and_a_wrong_one_is_refused_by_name() {
        let c = Config::try_parse_from(["agent-as-model"]).unwrap();
        assert_eq!(c.responses_store(), Ok(store::Setting::Memory));
        let b = c.responses_bounds();
        assert_eq!(
            (b.max_entries, b.max_bytes, b.ttl),
            (10_000, 256 << 20, Duration::from_secs(86_400))
        );
        let c =
            Config::try_parse_from(["agent-as-model", "--responses-store", "mongodb://x"]).unwrap();
        let e = c.responses_store().unwrap_err();
        assert!(e.contains("AGENT_AS_MODEL_RESPONSES_STORE"), "{e}");
    }
}
