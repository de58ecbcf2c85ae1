//! `agent-as-model launch <cli>`: an agent CLI run on this server's models with one command. The
//! server's settings are the command line's (before `launch`, and after the CLI's name up to
//! `--`), on a free loopback port with a token of its own, answered by the embedded model unless
//! a models file or another backend is named. The CLI is found on `PATH` and pointed at the
//! server by its own environment variables and command-line options, never by editing the
//! user's files; the arguments after `--` are its own, and its terminal is the user's.

use crate::config::{AgentCli, Backend, Config, LaunchArgs};
use crate::routing::file::{FileError, Models};
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

/// Why `launch --help` cannot tell the models the server would offer.
#[derive(Debug, thiserror::Error)]
enum Unoffered {
    /// The server options given do not read: the first line of clap's message.
    #[error("{0}")]
    Options(String),
    /// The models file they name does not read.
    #[error(transparent)]
    Models(#[from] FileError),
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
    answered_here(&mut config);
    keeps_prompts(&mut config);
    let endpoint = Endpoint {
        url: format!("http://{port}"),
        address: port,
        token,
    };
    Ok((config, endpoint, cli_arguments))
}

/// The embedded model answers a launched CLI unless a models file or a backend other than the
/// host's is named (there is no host to sample).
fn answered_here(config: &mut Config) {
    if config.models.is_none() && config.backend == Backend::Host {
        config.backend = Backend::Local;
    }
}

/// A launched CLI's long first prompt is kept on disk (in the models' cache folder) unless
/// `--prompt-cache-dir` says where (`--prompt-cache-max-bytes 0`: nowhere): the next launch
/// reads it back instead of the model reading it again.
fn keeps_prompts(config: &mut Config) {
    if config.local.prompt_cache_dir.is_none()
        && let Ok(cache) = crate::local::fetch::cache_dir()
    {
        config.local.prompt_cache_dir = Some(cache.join("prompts"));
    }
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
        AgentCli::Opencode => ("opencode", "opencode-ai", "opencode"),
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

/// The command that runs `cli` against `endpoint`, asking for `model` (`offered`: the other
/// models the server offers, for a CLI that lists them), with the user's `arguments`;
/// `scratch` is a folder of the launch's own (for a settings file the CLI reads only while
/// launched).
pub fn command(
    cli: AgentCli,
    endpoint: &Endpoint,
    model: &str,
    offered: &[String],
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
        AgentCli::Claude => point_claude(&mut command, endpoint, model),
        AgentCli::Codex => point_codex(&mut command, endpoint, model),
        AgentCli::Gemini => point_gemini(&mut command, endpoint, model, scratch)?,
        AgentCli::Opencode => point_opencode(&mut command, endpoint, model, offered),
    }
    command.args(arguments);
    Ok(command)
}

/// Claude Code: the Anthropic API's base URL and token, `model` for every tier.
fn point_claude(command: &mut Command, endpoint: &Endpoint, model: &str) {
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
        .env("CLAUDE_STREAM_IDLE_TIMEOUT_MS", STREAM_IDLE_MS.to_string())
        .env("DISABLE_TELEMETRY", "1");
}

/// How long a CLI waits for the next event of a stream: an embedded model on a CPU may read a
/// first prompt of an agent CLI's size (10,000 to 20,000 tokens) for minutes before its first
/// token, past the five Claude Code and Codex wait by default (each try they make again reads
/// on from what the last one left in the cache, but starts the wait anew).
const STREAM_IDLE_MS: u64 = 30 * 60 * 1000;

/// Codex CLI: a model provider of the launch's own (Responses API), by `-c` options.
fn point_codex(command: &mut Command, endpoint: &Endpoint, model: &str) {
    let provider = format!(
        "model_providers.agent-as-model={{name=\"agent-as-model\",base_url=\"{}/v1\",\
         env_key=\"{KEY_VARIABLE}\",wire_api=\"responses\",\
         stream_idle_timeout_ms={STREAM_IDLE_MS}}}",
        endpoint.url
    );
    command
        .env(KEY_VARIABLE, &endpoint.token)
        .args(["-c", "model_provider=agent-as-model", "-c", &provider])
        .args(["-c", &format!("model={}", toml_string(model))])
        .args(["-c", "analytics.enabled=false"]);
}

/// Gemini CLI: the Gemini API's base URL and key, with API-key auth chosen by a system
/// settings file of the launch's own (the user's settings stay as they are; without it the
/// base URL selects a gateway auth that non-interactive use refuses).
fn point_gemini(
    command: &mut Command,
    endpoint: &Endpoint,
    model: &str,
    scratch: &Path,
) -> Result<(), LaunchError> {
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
    Ok(())
}

/// opencode: its inline configuration (`OPENCODE_CONFIG_CONTENT`, which overrides the user's
/// and the project's files without touching them) names a provider of the launch's own, and
/// the fetch of models.dev's catalogue and the update check, which need the network, are off.
fn point_opencode(command: &mut Command, endpoint: &Endpoint, model: &str, offered: &[String]) {
    command
        .env(KEY_VARIABLE, &endpoint.token)
        .env(
            "OPENCODE_CONFIG_CONTENT",
            opencode_config(endpoint, model, offered).to_string(),
        )
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
}

/// The variable that carries the token to a CLI whose settings name a variable for it.
const KEY_VARIABLE: &str = "AGENT_AS_MODEL_LAUNCH_KEY";

/// The provider opencode's configuration names (its models are `agent-as-model/NAME`).
const OPENCODE_PROVIDER: &str = "agent-as-model";

/// opencode's inline configuration: a provider of OpenAI chat completions (its package is
/// built into opencode, so nothing is installed) at the server, with the token from
/// [`KEY_VARIABLE`], offering `model` and `offered`; `model` is both its model and its small
/// model (for titles), so no other provider is asked.
fn opencode_config(endpoint: &Endpoint, model: &str, offered: &[String]) -> serde_json::Value {
    let models: serde_json::Map<String, serde_json::Value> = std::iter::once(model)
        .chain(offered.iter().map(String::as_str))
        .map(|name| (name.to_owned(), serde_json::json!({ "name": name })))
        .collect();
    let chosen = format!("{OPENCODE_PROVIDER}/{model}");
    serde_json::json!({
        "provider": {
            OPENCODE_PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "agent-as-model",
                "options": {
                    "baseURL": format!("{}/v1", endpoint.url),
                    "apiKey": format!("{{env:{KEY_VARIABLE}}}"),
                },
                "models": models,
            }
        },
        "model": chosen,
        "small_model": chosen,
    })
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

/// The models the server offers under `config`, by name, its default first: a models file's
/// (read, not loaded; embedding models left out), else the embedded model's when it answers
/// (none known otherwise: then the server answers any name).
pub fn offered_models(config: &Config) -> Result<Vec<String>, FileError> {
    if let Some(path) = &config.models {
        let models = Models::read(path, |name| std::env::var(name).ok())?;
        let mut names = vec![models.default.clone()];
        for spec in models.entries.iter().filter(|spec| !spec.embeddings) {
            if !names.contains(&spec.name) {
                names.push(spec.name.clone());
            }
        }
        return Ok(names);
    }
    let embedded = config.backend == Backend::Local
        && config.local.model_file.is_none()
        && config.local.model.is_none();
    Ok(embedded
        .then(|| crate::local::fetch::DEFAULT_MODEL_NAME.to_owned())
        .into_iter()
        .collect())
}

/// The model the CLI asks for: the one given, else the server's default.
pub fn model(args: &LaunchArgs, default: Option<String>) -> String {
    args.model
        .clone()
        .or(default)
        .unwrap_or_else(|| crate::shapes::DEFAULT_MODEL.to_owned())
}

/// `launch --help`'s account of the CLIs, when `argv` (the whole command line) asks for
/// `launch`'s help (`-h` or `--help` after `launch`, before `--`; or `help launch`): each CLI
/// `launch` knows, the model it would ask for under the server options given, and where it
/// was found on `PATH` or how to install it.
pub fn help(argv: &[String]) -> Option<String> {
    let (options, chosen) = help_options(argv)?;
    let models = Config::try_parse_from(options)
        .map_err(|e| {
            Unoffered::Options(e.to_string().lines().next().unwrap_or_default().to_owned())
        })
        .and_then(|mut config| {
            answered_here(&mut config);
            Ok(offered_models(&config)?)
        });
    Some(help_text(models, chosen))
}

/// For a command line that asks for `launch`'s help: the server options it gives (with the
/// program's name first, without `launch`, the CLI's name and the help flag) and the
/// `--launch-model` it names.
fn help_options(argv: &[String]) -> Option<(Vec<String>, Option<String>)> {
    let at = argv.iter().position(|a| a == "launch")?;
    let mut before = argv.get(..at)?.to_vec();
    let by_help_command = before.len() > 1 && before.last().is_some_and(|a| a == "help");
    let mut after: Vec<String> = argv
        .get(at + 1..)?
        .iter()
        .take_while(|a| a.as_str() != "--")
        .cloned()
        .collect();
    let help_flag = |a: &String| a == "-h" || a == "--help";
    if !by_help_command && !after.iter().any(help_flag) {
        return None;
    }
    if by_help_command {
        before.pop();
    }
    after.retain(|a| !help_flag(a));
    let cli_named = after
        .first()
        .is_some_and(|a| <AgentCli as clap::ValueEnum>::from_str(a, false).is_ok());
    let mut chosen = None;
    let mut options = Vec::with_capacity(after.len());
    let mut rest = after.into_iter().skip(usize::from(cli_named));
    while let Some(option) = rest.next() {
        if option == "--launch-model" {
            chosen = rest.next();
        } else if let Some(name) = option.strip_prefix("--launch-model=") {
            chosen = Some(name.to_owned());
        } else {
            options.push(option);
        }
    }
    Some((before.into_iter().chain(options).collect(), chosen))
}

/// The account [`help`] gives, from the models the server would offer (or why the options
/// given do not read) and the `--launch-model` named.
fn help_text(models: Result<Vec<String>, Unoffered>, chosen: Option<String>) -> String {
    let (offered, problem) = match models {
        Ok(names) => (names, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let model = chosen
        .or_else(|| offered.first().cloned())
        .unwrap_or_else(|| crate::shapes::DEFAULT_MODEL.to_owned());
    let mut text = String::from(
        "CLIs (each run from PATH; the model it asks for, under the server options given):\n",
    );
    for &cli in <AgentCli as clap::ValueEnum>::value_variants() {
        let (name, package, shown) = program(cli);
        let asks = match cli {
            AgentCli::Opencode => format!("{OPENCODE_PROVIDER}/{model}"),
            _ => model.clone(),
        };
        let found = on_path(name).map_or_else(
            || format!("not installed: install it with `npm install -g {package}`"),
            |path| format!("installed: {}", path.display()),
        );
        text.push_str(&format!(
            "  {name:<9} {shown}, model {asks}\n            {found}\n"
        ));
    }
    text.push_str(&match (problem, offered.as_slice()) {
        (Some(e), _) => format!("\nThe server options given do not read ({e})"),
        (None, []) => format!(
            "\nThe server answers any model name (the CLIs ask for {} unless --launch-model \
             names one)",
            crate::shapes::DEFAULT_MODEL
        ),
        (None, [default]) => format!("\nThe server's model: {default}"),
        (None, [default, others @ ..]) => format!(
            "\nThe server's models: {default} (the default), {} (--launch-model NAME picks \
             another; opencode offers them all)",
            others.join(", ")
        ),
    });
    text
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
    fn a_launched_clis_long_prompts_are_kept_on_disk_unless_told_otherwise() {
        let (config, _, _) = launch(&["agent-as-model", "launch", "claude"]);
        let kept = config.local.prompt_cache_dir.unwrap();
        assert_eq!(
            kept,
            crate::local::fetch::cache_dir().unwrap().join("prompts")
        );
        let (config, _, _) = launch(&[
            "agent-as-model",
            "launch",
            "codex",
            "--prompt-cache-dir",
            "/p",
        ]);
        assert_eq!(config.local.prompt_cache_dir, Some("/p".into()));
        let (config, _, _) = launch(&[
            "agent-as-model",
            "launch",
            "codex",
            "--prompt-cache-max-bytes",
            "0",
        ]);
        let settings = crate::local::LocalSettings::from_config(&config).unwrap();
        assert_eq!(settings.prompt_cache, None);
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

    fn strings(argv: &[&str]) -> Vec<String> {
        argv.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn launch_help_reads_the_server_options_around_it() {
        let asked = |argv: &[&str]| help_options(&strings(argv));
        assert_eq!(asked(&["aam", "launch", "codex"]), None);
        assert_eq!(asked(&["aam", "launch", "codex", "--", "--help"]), None);
        assert_eq!(
            asked(&["aam", "--local-slots", "2", "launch", "--help"]),
            Some((strings(&["aam", "--local-slots", "2"]), None))
        );
        assert_eq!(
            asked(&[
                "aam",
                "launch",
                "opencode",
                "--models",
                "m.toml",
                "--launch-model",
                "coder",
                "-h"
            ]),
            Some((
                strings(&["aam", "--models", "m.toml"]),
                Some("coder".into())
            ))
        );
        assert_eq!(
            asked(&["aam", "help", "launch", "--launch-model=x"]),
            Some((strings(&["aam"]), Some("x".into())))
        );
        let text = help(&strings(&["aam", "launch", "--help"])).unwrap();
        assert!(
            text.contains("opencode  opencode, model agent-as-model/"),
            "{text}"
        );
        let text = help(&strings(&["aam", "--no-such-option", "launch", "--help"])).unwrap();
        assert!(text.contains("do not read"), "{text}");
        let text = help_text(Ok(strings(&["a", "b"])), None);
        assert!(
            text.contains("claude    Claude Code, model a\n")
                && text.contains("The server's models: a (the default), b ("),
            "{text}"
        );
        assert!(help_text(Ok(Vec::new()), None).contains("Codex CLI, model agent-default"));
    }

    #[test]
    fn opencode_is_given_a_provider_at_the_server_offering_its_models() {
        let endpoint = Endpoint {
            url: "http://127.0.0.1:9".into(),
            address: SocketAddr::from(([127, 0, 0, 1], 9)),
            token: "secret".into(),
        };
        let config = opencode_config(&endpoint, "b", &strings(&["a", "b"]));
        let provider = &config["provider"]["agent-as-model"];
        assert_eq!(provider["npm"], "@ai-sdk/openai-compatible");
        assert_eq!(provider["options"]["baseURL"], "http://127.0.0.1:9/v1");
        assert_eq!(
            provider["options"]["apiKey"],
            "{env:AGENT_AS_MODEL_LAUNCH_KEY}"
        );
        let models: Vec<&String> = provider["models"].as_object().unwrap().keys().collect();
        assert_eq!(models.len(), 2);
        assert_eq!(config["model"], "agent-as-model/b");
        assert_eq!(config["small_model"], "agent-as-model/b");
        assert!(!config.to_string().contains("secret"));
    }
}
