//! The `agent-as-model` binary: reads its settings, logs to stderr, serves MCP over stdio.

use agent_as_model::fulfil::{Settings, mrtr};
use agent_as_model::server::Server;
use clap::{Arg, Command, value_parser};
use rmcp::ServiceExt;
use std::process::ExitCode;
use std::time::Duration;

fn command() -> Command {
    Command::new("agent-as-model")
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
        )
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
        limits: Default::default(),
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
        let running = server.serve(rmcp::transport::stdio()).await?;
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
