//! The `agent-as-model` binary: reads its configuration, logs to stderr, serves MCP (or runs
//! `try`).

use agent_as_model::api::store::{Store, StoreError};
use agent_as_model::config::{Command, Config, Transport};
use agent_as_model::error::StartError;
use agent_as_model::http::HttpSettings;
use agent_as_model::http::ServeError;
use agent_as_model::launch::LaunchError;
use agent_as_model::local::LocalSettings;
use agent_as_model::local::pool::Engines;
use agent_as_model::local::template::Sandbox;
use agent_as_model::mcp::bridge::BridgeError;
use agent_as_model::mcp::mrtr::Sealer;
use agent_as_model::mcp::sampling::Settings;
use agent_as_model::mcp::server::Server;
use agent_as_model::mcp::stdio::{Framing, serve_stdio};
use agent_as_model::mcp::streamable;
use agent_as_model::mcp::try_command::TryError;
use agent_as_model::routing::{Backends, SetupError};
use agent_as_model::service::Service;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// glibc raises its threshold for serving an allocation with its own mapping each time such a
/// block is freed, so later large blocks (request bodies, prompts) come from the heap, where
/// freeing them seldom gives memory back: a server that once held a few 16 MB bodies kept
/// their memory for good. A fixed threshold keeps large blocks mapped, and returned when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_large_blocks() {
    // SAFETY: mallopt sets one parameter of the allocator; this runs before any other thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_large_blocks() {}

/// The server's embedded models' engines (see [`Engines`]): their chat templates render in a
/// child process kept from one prompt to the next, this binary re-executed (on Linux through
/// /proc/self/exe, which still opens if the file was replaced since it started).
fn engines_for(config: &Config) -> Engines {
    let program = if cfg!(target_os = "linux") {
        Ok(std::path::PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe()
    };
    let sandbox = match program {
        Ok(program) => Some(Sandbox {
            program,
            memory: config.local.chat_template_memory_bytes,
        }),
        Err(e) => {
            tracing::warn!(error = %e, "chat templates render unbounded in memory");
            None
        }
    };
    Engines::new(sandbox)
}

fn main() -> ExitCode {
    return_large_blocks();
    // Started as the chat template's renderer by a server (see local::template).
    if let Some(code) = agent_as_model::local::template::helper_main() {
        return code;
    }
    let config = parse_config();
    // A store that is neither `memory` nor a Redis URL is refused now, naming the setting.
    if let Err(e) = config.responses_store() {
        eprintln!("agent-as-model: {e}");
        return ExitCode::from(2);
    }
    // A malformed setting of the local model is refused now, whichever backend answers.
    if let Err(e) = LocalSettings::from_config(&config) {
        eprintln!("agent-as-model: {e}");
        return ExitCode::from(2);
    }
    agent_as_model::logging::init(config.log_format);
    let engines = engines_for(&config);
    agent_as_model::install_tls();
    let runtime = match runtime_for(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent-as-model: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = run(&config, &runtime, &engines);
    // Pending blocking reads on stdin must not hold the process once the connection is over.
    runtime.shutdown_timeout(Duration::from_millis(100));
    // The local models' engines are freed before the process ends (a GPU's driver tears its
    // device down at exit, and must not find a model's buffers still in use).
    engines.shutdown(Duration::from_secs(10));
    let code = match outcome {
        Ok(code) => code,
        Err((e, code)) => {
            eprintln!("agent-as-model: {e}");
            code
        }
    };
    end_after_the_gpu(code);
    ExitCode::from(code)
}

/// The command line, read as `Config::parse` reads it; `launch`'s help also lists the CLIs it
/// knows, with the model each would ask for under the options given.
fn parse_config() -> Config {
    use clap::{CommandFactory, FromArgMatches};
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let text: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut command = Config::command();
    let mut argv = argv;
    if let Some(help) = agent_as_model::launch::help(&text) {
        command = command.mut_subcommand("launch", |launch| launch.after_help(help));
        // Also for a help flag among the server options after the CLI's name, which clap
        // reads as one of them.
        let flag = if text.iter().any(|a| a == "-h") {
            "-h"
        } else {
            "--help"
        };
        argv = argv
            .into_iter()
            .take(1)
            .chain(["launch".into(), flag.into()])
            .collect();
    }
    let read = command
        .try_get_matches_from_mut(argv)
        .and_then(|mut matches| Config::from_arg_matches_mut(&mut matches));
    match read {
        Ok(config) => config,
        Err(e) => e.format(&mut command).exit(),
    }
}

/// The async runtime: one thread for one stdio client (its calls are short and wait on the
/// host, and handing them between worker threads cost more than it gained, BENCHMARKS.md); a
/// worker per core for HTTP, the bridge, `try` and `launch`.
fn runtime_for(config: &Config) -> std::io::Result<tokio::runtime::Runtime> {
    let single = config.command.is_none() && config.http.is_none();
    let mut builder = if single {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().build()
}

/// Why the command line's work ended in an error, each told as its source tells it.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error(transparent)]
    Try(#[from] TryError),
    #[error(transparent)]
    Bridge(#[from] BridgeError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("launch: cannot run the CLI: {0}")]
    Cli(std::io::Error),
    /// The state keys given do not make a sealer (`launch` says so without the variable).
    #[error("AGENT_AS_MODEL_STATE_KEY: {0}")]
    StateKey(StartError),
    #[error(transparent)]
    Sealer(StartError),
    #[error(transparent)]
    Serve(#[from] Unserved),
}

/// Why the server did not serve, or stopped serving.
#[derive(Debug, thiserror::Error)]
enum Unserved {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Backends(#[from] SetupError),
    /// `AGENT_AS_MODEL_RESPONSES_STORE` names no store.
    #[error("{0}")]
    StoreSetting(String),
    #[error("{0}")]
    Store(StoreError),
    #[error(transparent)]
    Http(#[from] ServeError),
    /// The stdio server's error, in its words (its error cannot cross threads).
    #[error("{0}")]
    Stdio(String),
}

/// What the command line asks, done (the server's embedded models on `engines`): the exit code
/// (a launched CLI's own), or the error to print with its code.
fn run(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
    engines: &Engines,
) -> Result<u8, (Failed, u8)> {
    let failed = |e: Failed| (e, 1);
    match &config.command {
        Some(Command::Try(args)) => runtime
            .block_on(agent_as_model::mcp::try_command::run(config, args, engines))
            .map(|()| 0)
            .map_err(|e| failed(e.into())),
        Some(Command::Bridge(args)) => runtime
            .block_on(agent_as_model::mcp::bridge::run(config, args, engines))
            .map(|()| 0)
            .map_err(|e| failed(e.into())),
        Some(Command::Launch(args)) => launch(args, runtime, engines).map_err(failed),
        None => {
            let (sealer, source) = Sealer::new(&config.state_keys(), config.state_ttl())
                .map_err(|e| (Failed::StateKey(e), 2))?;
            tracing::info!(?source, "requestState sealing key chosen");
            serve(config, runtime, sealer, None, engines)
                .map(|()| 0)
                .map_err(|e| failed(e.into()))
        }
    }
}

/// In a GPU build, ends the process here, without the C++ static destructors that run at
/// exit: ggml's Vulkan backend destroys its instance in one, and on NVIDIA's driver that
/// teardown, once the driver's own has begun, can crash a process that has already answered
/// (llama.cpp issue 10528; seen as exit code 139 after `try`). The engines were freed above;
/// what is left is the operating system's to reclaim.
#[cfg(all(unix, any(feature = "vulkan", feature = "cuda")))]
fn end_after_the_gpu(code: u8) {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` ends the process at once; nothing after it runs, and the output above
    // is flushed.
    unsafe { libc::_exit(i32::from(code)) }
}

#[cfg(not(all(unix, any(feature = "vulkan", feature = "cuda"))))]
fn end_after_the_gpu(_code: u8) {}

/// `launch`: the server on a loopback port in this process, the CLI run against it; the CLI's
/// exit status (a CLI killed by a signal: 128 and the signal's number, as a shell says).
fn launch(
    args: &agent_as_model::config::LaunchArgs,
    runtime: &tokio::runtime::Runtime,
    engines: &Engines,
) -> Result<u8, Failed> {
    use agent_as_model::launch;
    let argv: Vec<String> = std::env::args().collect();
    let (config, endpoint, arguments) = launch::server_config(&argv)?;
    let (sealer, _) =
        Sealer::new(&config.state_keys(), config.state_ttl()).map_err(Failed::Sealer)?;
    let scratch = launch::scratch_dir()?;
    // Ctrl-C is the CLI's (Claude Code stops its turn with it): here it is taken and ignored,
    // by a handler, which the CLI does not inherit.
    runtime.spawn(async { while tokio::signal::ctrl_c().await.is_ok() {} });
    let stop = CancellationToken::new();
    let outcome = std::thread::scope(|scope| {
        let server = scope.spawn(|| serve(&config, runtime, sealer, Some(stop.clone()), engines));
        let ran = (|| {
            launch::wait_ready(endpoint.address)?;
            let offered = launch::offered_models(&config).unwrap_or_default();
            let model = launch::model(args, offered.first().cloned());
            let mut command =
                launch::command(args.cli, &endpoint, &model, &offered, &arguments, &scratch)?;
            tracing::info!(cli = ?args.cli, url = %endpoint.url, model = %model, "launching");
            let status = command.status().map_err(Failed::Cli)?;
            Ok::<u8, Failed>(exit_code(status))
        })();
        stop.cancel();
        // A server that could not start shows as one that never listened (`wait_ready`).
        let _ = server.join();
        ran
    });
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

/// A child's exit status as this process's: its code, or 128 and the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(1);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return u8::try_from(128 + signal).unwrap_or(1);
        }
    }
    1
}

/// The model APIs, answered by `service`: their stored Responses in this process, or in a Redis
/// the replicas share (connected on first use, inside the runtime, so the server starts while
/// Redis is down), and one cap on calls in flight with the MCP tools (`mcp`'s).
fn model_apis(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
    service: std::sync::Arc<Service>,
    mcp: &streamable::Settings,
) -> Result<std::sync::Arc<agent_as_model::api::Api>, Unserved> {
    let store = {
        let _inside = runtime.enter();
        let setting = config.responses_store().map_err(Unserved::StoreSetting)?;
        Store::open(&setting, config.responses_bounds()).map_err(Unserved::Store)
    }?;
    let api = agent_as_model::api::Api::new(
        service,
        mcp.calls.clone(),
        mcp.max_calls,
        Duration::from_secs(config.stream_write_timeout_secs),
    )
    .with_store(store)
    .with_hub(agent_as_model::local::hub::Access {
        endpoint: config.local.hf_endpoint.clone(),
        token: config.local.hf_token.clone().filter(|t| !t.is_empty()),
    });
    Ok(std::sync::Arc::new(api))
}

/// The server, its embedded models on `engines`, until it stops (`stopped_by`, else the
/// terminal's signals or the end of stdin).
fn serve(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
    sealer: Sealer,
    stopped_by: Option<CancellationToken>,
    engines: &Engines,
) -> Result<(), Unserved> {
    let settings = Settings {
        sampling_timeout: config.sampling_timeout(),
        sealer,
    };
    let backends = Backends::with_engines(config, engines)?;
    // One completion service, which the MCP tools and the model APIs both answer with.
    let service = std::sync::Arc::new(Service::new(
        config.limits.clone(),
        backends,
        config.sampling_timeout(),
    ));
    let server = Server::new(settings, service.clone())?;
    if let Some(mut http) = HttpSettings::from_config(config) {
        // Under `launch`, the launcher stops the server, not the terminal's signals.
        http.signals = stopped_by.is_none();
        let stop = stopped_by.unwrap_or_default();
        let mcp_settings = streamable::Settings::from_config(config);
        let api = model_apis(config, runtime, service, &mcp_settings)?;
        let mcp = streamable::service(server, &mcp_settings, stop.child_token());
        let routes = agent_as_model::http::routes::routes(api);
        return runtime
            .block_on(agent_as_model::http::serve_http(
                http,
                stop,
                mcp,
                Some(routes),
            ))
            .map_err(Unserved::from);
    }
    runtime
        .block_on(match config.transport {
            Transport::Stdio => {
                serve_stdio(|done| server.on_done(done), Framing::from_config(config))
            }
        })
        .map_err(|e| Unserved::Stdio(e.to_string()))
}
