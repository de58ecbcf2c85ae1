//! `agent-as-model launch <cli>`: an agent CLI run on this server's models with one command. The
//! server's settings are the command line's (before `launch`, and after the CLI's name up to
//! `--`), on a free loopback port with a token of its own, answered by the embedded model unless
//! a models file or another backend is named. The CLI is found on `PATH` and pointed at the
//! server by its own environment variables and command-line options, never by editing the
//! user's files; the arguments after `--` are its own, and its terminal is the user's.

use crate::config::{AgentCli, Backend, Config, LaunchArgs};
use clap::Parser;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the server may take to listen.
const READY_WAIT: Duration = Duration::from_secs(30);

/// Why a CLI cannot be launched.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(
        "{program} ({name}) is not on PATH: install it with `npm install -g {package}`, or put \
         its folder on PATH"
    )]
    NotInstalled {
        program: &'static str,
        name: &'static str,
        package: &'static str,
    },
    #[error("launch: {0}")]
    Options(String),
    #[error("launch: no free loopback port: {0}")]
    Port(std::io::Error),
    #[error("launch: the server did not listen on {0} within 30 s")]
    NotReady(SocketAddr),
    #[error("launch: cannot write the CLI's settings: {0}")]
    Settings(std::io::Error),
}

/// What the launched CLI needs to know of the server.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub address: SocketAddr,
    /// The token the server takes, given to the CLI as its API key.
    pub token: String,
}

/// The server's settings for `launch`: the command line's (`argv` is the whole command line;
/// the options after the CLI's name, up to `--`, count as if given before `launch`), on a free
/// loopback port with a fresh token, the embedded model answering unless a models file or a
/// backend other than the host's is named. Also the CLI's own arguments.
pub fn server_config(argv: &[String]) -> Result<(Config, Endpoint, Vec<String>), LaunchError> {
    // From argv as given: clap's reading of `launch`'s positional lists loses `--`.
    let (server_options, cli_arguments) = split(argv);
    let before: Vec<String> = argv
        .iter()
        .take_while(|a| a.as_str() != "launch")
        .cloned()
        .collect();
    let all = before.into_iter().chain(server_options);
    let mut config =
        Config::try_parse_from(all).map_err(|e| LaunchError::Options(e.to_string()))?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(LaunchError::Port)?;
    let token = uuid::Uuid::new_v4().simple().to_string();
    config.http = Some(port);
    config.auth_token = Some(token.clone());
    config.command = None;
    if config.models.is_none() && config.backend == Backend::Host {
        config.backend = Backend::Local;
    }
    let endpoint = Endpoint {
        url: format!("http://{port}"),
        address: port,
        token,
    };
    Ok((config, endpoint, cli_arguments))
}

/// The server options (after the CLI's name, up to `--`, without `launch`'s own
/// `--launch-model`) and the CLI's arguments (after `--`) of a `launch` command line, read from
/// `argv` as given (clap's reading of the positional lists does not keep `--`).
fn split(argv: &[String]) -> (Vec<String>, Vec<String>) {
    let after_cli: Vec<String> = argv
        .iter()
        .skip_while(|a| a.as_str() != "launch")
        .skip(2)
        .cloned()
        .collect();
    let (options, arguments) = match after_cli.iter().position(|a| a == "--") {
        Some(at) => (
            after_cli.get(..at).unwrap_or_default().to_vec(),
            after_cli.get(at + 1..).unwrap_or_default().to_vec(),
        ),
        None => (after_cli, Vec::new()),
    };
    let mut kept = Vec::with_capacity(options.len());
    let mut skip_value = false;
    for option in options {
        if skip_value {
            skip_value = false;
        } else if option == "--launch-model" {
            skip_value = true;
        } else if !option.starts_with("--launch-model=") {
            kept.push(option);
        }
    }
    (kept, arguments)
}

/// A folder of this launch's own for the files a CLI reads while launched (removed after): in
/// this server's cache folder, since a CLI may refuse a settings file under a folder others can
/// write (Gemini CLI refuses one under `/tmp`).
pub fn scratch_dir() -> Result<PathBuf, LaunchError> {
    let cache = crate::local::fetch::cache_dir()
        .map_err(|e| LaunchError::Settings(std::io::Error::other(e.to_string())))?;
    let dir = cache.join("launch").join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).map_err(LaunchError::Settings)?;
    Ok(dir)
}

/// Waits until the server listens at `address`.
pub fn wait_ready(address: SocketAddr) -> Result<(), LaunchError> {
    let started = Instant::now();
    while started.elapsed() < READY_WAIT {
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(LaunchError::NotReady(address))
}

/// The program, its npm package and its name, for `cli`.
fn program(cli: AgentCli) -> (&'static str, &'static str, &'static str) {
    match cli {
        AgentCli::Claude => ("claude", "@anthropic-ai/claude-code", "Claude Code"),
        AgentCli::Codex => ("codex", "@openai/codex", "Codex CLI"),
        AgentCli::Gemini => ("gemini", "@google/gemini-cli", "Gemini CLI"),
    }
}

/// `name` found on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    on_path_in(name, &std::env::var_os("PATH")?)
}

/// `name` found in one of the folders of `path` (a `PATH` value).
fn on_path_in(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
        || ["exe", "cmd", "bat"]
            .iter()
            .any(|ext| path.with_extension(ext).is_file())
}

/// The command that runs `cli` against `endpoint`, asking for `model`, with the user's
/// `arguments`; `scratch` is a folder of the launch's own (for a settings file the CLI reads
/// only while launched).
pub fn command(
    cli: AgentCli,
    endpoint: &Endpoint,
    model: &str,
    arguments: &[String],
    scratch: &Path,
) -> Result<Command, LaunchError> {
    let (name, package, shown) = program(cli);
    let Some(found) = on_path(name) else {
        return Err(LaunchError::NotInstalled {
            program: name,
            name: shown,
            package,
        });
    };
    let mut command = Command::new(found);
    match cli {
        AgentCli::Claude => {
            command
                .env("ANTHROPIC_BASE_URL", &endpoint.url)
                .env("ANTHROPIC_AUTH_TOKEN", &endpoint.token)
                .env_remove("ANTHROPIC_API_KEY")
                .env("ANTHROPIC_MODEL", model)
                .env("ANTHROPIC_DEFAULT_OPUS_MODEL", model)
                .env("ANTHROPIC_DEFAULT_SONNET_MODEL", model)
                .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", model)
                .env("ANTHROPIC_SMALL_FAST_MODEL", model)
                // What changes from request to request would break the cached prefix.
                .env("CLAUDE_CODE_ATTRIBUTION_HEADER", "0")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("DISABLE_TELEMETRY", "1");
        }
        AgentCli::Codex => {
            let provider = format!(
                "model_providers.agent-as-model={{name=\"agent-as-model\",base_url=\"{}/v1\",\
                 env_key=\"AGENT_AS_MODEL_LAUNCH_KEY\",wire_api=\"responses\"}}",
                endpoint.url
            );
            command
                .env("AGENT_AS_MODEL_LAUNCH_KEY", &endpoint.token)
                .args(["-c", "model_provider=agent-as-model", "-c", &provider])
                .args(["-c", &format!("model={}", toml_string(model))])
                .args(["-c", "analytics.enabled=false"]);
        }
        AgentCli::Gemini => {
            // API-key auth, chosen by a system settings file of the launch's own (the user's
            // settings stay as they are; without it the base URL selects a gateway auth that
            // non-interactive use refuses).
            let settings = scratch.join("gemini-system-settings.json");
            let text = serde_json::json!({
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": false},
            });
            std::fs::write(&settings, text.to_string()).map_err(LaunchError::Settings)?;
            command
                .env("GOOGLE_GEMINI_BASE_URL", &endpoint.url)
                .env("GEMINI_API_KEY", &endpoint.token)
                .env("GEMINI_MODEL", model)
                .env("GEMINI_CLI_SYSTEM_SETTINGS_PATH", &settings);
        }
    }
    command.args(arguments);
    Ok(command)
}

/// `text` as a TOML string.
fn toml_string(text: &str) -> String {
    let escaped: String = text
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

/// The server's default model, by name: a models file's `default` (read, not loaded), else the
/// embedded model's name when it answers.
pub fn default_model(config: &Config) -> Option<String> {
    if let Some(path) = &config.models {
        let models = crate::routing::file::Models::read(path, |name| std::env::var(name).ok());
        return models.ok().map(|m| m.default);
    }
    (config.backend == Backend::Local
        && config.local.model_file.is_none()
        && config.local.model.is_none())
    .then(|| crate::local::fetch::DEFAULT_MODEL_NAME.to_owned())
}

/// The model the CLI asks for: the one given, else the server's default.
pub fn model(args: &LaunchArgs, default: Option<String>) -> String {
    args.model
        .clone()
        .or(default)
        .unwrap_or_else(|| crate::shapes::DEFAULT_MODEL.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(argv: &[&str]) -> (Config, Endpoint, Vec<String>) {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let config = Config::try_parse_from(&argv).unwrap();
        assert!(
            matches!(config.command, Some(crate::config::Command::Launch(_))),
            "not a launch: {argv:?}"
        );
        server_config(&argv).unwrap()
    }

    #[test]
    fn server_options_go_before_launch_or_after_the_cli_and_its_arguments_after_the_dashes() {
        let (config, endpoint, rest) = launch(&[
            "agent-as-model",
            "--local-slots",
            "2",
            "launch",
            "claude",
            "--max-tools",
            "7",
            "--launch-model",
            "coder",
            "--",
            "-p",
            "hi",
        ]);
        assert_eq!(config.backend, Backend::Local);
        assert_eq!(config.local.local_slots, 2);
        assert_eq!(config.limits.max_tools, 7);
        assert_eq!(rest, ["-p", "hi"]);
        let Some(crate::config::Command::Launch(args)) = &Config::try_parse_from([
            "agent-as-model",
            "launch",
            "claude",
            "--launch-model",
            "coder",
        ])
        .unwrap()
        .command
        else {
            panic!("not a launch");
        };
        assert_eq!(args.model.as_deref(), Some("coder"));
        assert_eq!(config.http, Some(endpoint.address));
        assert!(endpoint.address.ip().is_loopback());
        assert_eq!(config.auth_token.as_deref(), Some(endpoint.token.as_str()));
        assert!(config.command.is_none());
        // A backend named stays.
        let (config, _, rest) =
            launch(&["agent-as-model", "launch", "codex", "--backend", "provider"]);
        assert_eq!(config.backend, Backend::Provider);
        assert!(rest.is_empty());
    }

    #[test]
    fn a_cli_not_on_path_is_named_with_how_to_install_it() {
        let empty = std::env::temp_dir().join("aam-launch-empty-path");
        std::fs::create_dir_all(&empty).unwrap();
        let dirs = std::env::join_paths([&empty]).unwrap();
        assert!(on_path_in("codex", &dirs).is_none());
        let e = LaunchError::NotInstalled {
            program: "codex",
            name: "Codex CLI",
            package: "@openai/codex",
        };
        assert!(
            e.to_string().contains("npm install -g @openai/codex"),
            "{e}"
        );
        assert_eq!(toml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
