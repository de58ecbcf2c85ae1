//! The `agent-as-model` binary: reads its configuration, logs to stderr, serves MCP.

use agent_as_model::backends::mrtr::Sealer;
use agent_as_model::backends::sampling::Settings;
use agent_as_model::config::{Config, Transport};
use agent_as_model::server::Server;
use clap::Parser;
use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
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
        Transport::Stdio => serve_stdio(server, &config),
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

async fn serve_stdio(server: Server, config: &Config) -> Result<(), Box<dyn std::error::Error>> {
    // A line over four times the request limit is dropped by the transport unread; one under it
    // is parsed and, if its arguments exceed the limit, refused with an error.
    let max_line = config
        .limits
        .max_request_bytes
        .saturating_mul(4)
        .max(1024 * 1024);
    let transport = AsyncRwTransport::new_server(tokio::io::stdin(), tokio::io::stdout())
        .with_max_line_length(max_line);
    let running = server.serve(transport).await?;
    running.waiting().await?;
    Ok(())
}
