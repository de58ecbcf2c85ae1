//! The `agent-as-model` binary: reads its configuration, logs to stderr, serves MCP.

use agent_as_model::backends::mrtr::Sealer;
use agent_as_model::backends::sampling::Settings;
use agent_as_model::config::{Config, Transport};
use agent_as_model::server::Server;
use agent_as_model::transport::serve_stdio;
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let config = Config::parse();
    agent_as_model::logging::init();
    let (sealer, source) = match Sealer::new(&config.state_keys(), config.state_ttl()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agent-as-model: AGENT_AS_MODEL_STATE_KEY: {e}");
            return ExitCode::from(2);
        }
    };
    tracing::info!(?source, "requestState sealing key chosen");
    let settings = Settings {
        sampling_timeout: config.sampling_timeout(),
        sealer,
    };
    let server = match Server::new(settings, config.limits.clone()) {
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
    let outcome = runtime.block_on(match config.transport {
        Transport::Stdio => serve_stdio(server, config.framing()),
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
