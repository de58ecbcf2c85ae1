//! The `agent-as-model` binary: reads its settings, logs to stderr, serves MCP over stdio.

use agent_as_model::contract::schema;
use agent_as_model::fulfil::{Settings, mrtr};
use agent_as_model::limits::Limits;
use agent_as_model::server::Server;
use clap::{Arg, Command, value_parser};
use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::process::ExitCode;
use std::time::Duration;

/// The size limits: flag, environment variable, help, default.
fn limit_args() -> [(&'static str, &'static str, &'static str, usize); 7] {
    let d = Limits::default();
    [
        (
            "max-request-bytes",
            "AGENT_AS_MODEL_MAX_REQUEST_BYTES",
            "Largest arguments of one tool call, in bytes of JSON",
            d.max_request_bytes,
        ),
        (
            "max-messages",
            "AGENT_AS_MODEL_MAX_MESSAGES",
            "Most messages (or input items) in one call",
            d.max_messages,
        ),
        (
            "max-message-chars",
            "AGENT_AS_MODEL_MAX_MESSAGE_CHARS",
            "Most characters of text in one message",
            d.max_message_chars,
        ),
        (
            "max-media-bytes",
            "AGENT_AS_MODEL_MAX_MEDIA_BYTES",
            "Largest image or audio part, in decoded bytes",
            d.max_media_bytes,
        ),
        (
            "max-tools",
            "AGENT_AS_MODEL_MAX_TOOLS",
            "Most tool definitions in one call",
            d.max_tools,
        ),
        (
            "max-schema-bytes",
            "AGENT_AS_MODEL_MAX_SCHEMA_BYTES",
            "Largest JSON Schema accepted, in bytes",
            schema::MAX_SCHEMA_BYTES,
        ),
        (
            "max-schema-depth",
            "AGENT_AS_MODEL_MAX_SCHEMA_DEPTH",
            "Deepest nesting accepted in a JSON Schema",
            schema::MAX_SCHEMA_DEPTH,
        ),
    ]
}

fn command() -> Command {
    let mut cmd = Command::new("agent-as-model")
        .version(env!("CARGO_PKG_VERSION"))
        .about(
            "An MCP server whose tools are shaped like model APIs and are answered by the \
             connected host's own model through MCP sampling: no API key.\n\nServes MCP over \
             stdio: add it to a sampling-capable host (VS Code, Goose, fast-agent) rather than \
             running it by hand. Logs go to stderr; set RUST_LOG=debug for more.",
        )
        .arg(
            Arg::new("sampling-timeout-secs")
                .long("sampling-timeout-secs")
                .env("AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS")
                .value_parser(value_parser!(u64).range(1..))
                .default_value("300")
                .help("Longest wait for the host's answer to one sampling request (legacy era)"),
        )
        .arg(
            Arg::new("state-ttl-secs")
                .long("state-ttl-secs")
                .env("AGENT_AS_MODEL_STATE_TTL_SECS")
                .value_parser(value_parser!(u64).range(1..))
                .default_value("3600")
                .help("How long a sealed requestState stays valid (2026-07-28 era)"),
        );
    for (flag, env, help, default) in limit_args() {
        cmd = cmd.arg(
            Arg::new(flag)
                .long(flag)
                .env(env)
                .value_parser(value_parser!(u64).range(1..))
                .help(format!("{help} [default: {default}]")),
        );
    }
    cmd
}

/// Sealing keys from the environment: `AGENT_AS_MODEL_STATE_KEY` seals (and verifies),
/// `AGENT_AS_MODEL_STATE_KEYS_PREVIOUS` (comma-separated) only verify, for key rotation.
fn state_keys() -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    if let Ok(k) = std::env::var("AGENT_AS_MODEL_STATE_KEY")
        && !k.is_empty()
    {
        keys.push(k.into_bytes());
    }
    if let Ok(previous) = std::env::var("AGENT_AS_MODEL_STATE_KEYS_PREVIOUS") {
        keys.extend(
            previous
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| k.as_bytes().to_vec()),
        );
    }
    keys
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let secs = |name: &str| matches.get_one::<u64>(name).copied().unwrap_or(1);
    let size = |name: &str| {
        let default = limit_args()
            .into_iter()
            .find(|(flag, ..)| *flag == name)
            .map_or(1, |(.., d)| d);
        matches
            .get_one::<u64>(name)
            .and_then(|v| usize::try_from(*v).ok())
            .unwrap_or(default)
    };
    let limits = Limits {
        max_messages: size("max-messages"),
        max_message_chars: size("max-message-chars"),
        max_media_bytes: size("max-media-bytes"),
        max_tools: size("max-tools"),
        max_request_bytes: size("max-request-bytes"),
    };
    schema::set_limits(size("max-schema-bytes"), size("max-schema-depth"));
    let keys = state_keys();
    let (sealer, source) =
        match mrtr::Sealer::new(&keys, Duration::from_secs(secs("state-ttl-secs"))) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("agent-as-model: AGENT_AS_MODEL_STATE_KEY: {e}");
                return ExitCode::from(2);
            }
        };
    tracing::info!(?source, "requestState sealing key chosen");
    let settings = Settings {
        sampling_timeout: Duration::from_secs(secs("sampling-timeout-secs")),
        sealer,
        limits: limits.clone(),
    };
    let server = match Server::new(settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agent-as-model: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent-as-model: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        // A line over four times the request limit is dropped by the transport unread; one
        // under it is parsed and, if its arguments exceed the limit, refused with an error.
        let max_line = limits.max_request_bytes.saturating_mul(4).max(1024 * 1024);
        let transport = AsyncRwTransport::new_server(tokio::io::stdin(), tokio::io::stdout())
            .with_max_line_length(max_line);
        let running = server.serve(transport).await?;
        running.waiting().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    });
    // Pending blocking reads on stdin must not hold the process once the connection is over.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-as-model: {e}");
            ExitCode::FAILURE
        }
    }
}
