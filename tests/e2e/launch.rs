//! `agent-as-model launch <cli>` with the real CLIs (Claude Code, Codex CLI, Gemini CLI,
//! opencode, from npm by scripts/peers), each offline in a network namespace of its own: inside it a scripted
//! OpenAI-compatible provider (tests/e2e/api/launch_provider.py) answers on loopback, the
//! server runs from a models file naming it, and the CLI, pointed at the server by `launch`
//! alone, prints the provider's answer and exits 0; the server is gone with it. A CLI that is
//! not installed is named, with how to install it; `launch --help` lists the CLIs with the
//! model each would ask for.

use crate::api_clis::{installed, node, unshare_flags};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::server::BIN;

/// A folder of the test's own, with a home, a working folder and a models file naming the
/// provider on `port`.
fn world(name: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-launch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["home", "work", "tmp"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        dir.join("models.toml"),
        format!(
            "[[models]]\nname = \"scripted\"\nbackend = \"provider\"\n\
             url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"upstream\"\nretries = 0\n"
        ),
    )
    .unwrap();
    dir
}

/// Runs `launch <cli> -- <arguments>` in a network namespace of its own, with the scripted
/// provider on `port` inside it and `path` as PATH: its exit status, stdout and stderr.
fn launch(name: &str, cli: &str, arguments: &[&str], path: &str) -> (i32, String, String) {
    let port = 18_000 + (std::process::id() % 1000) as u16;
    let dir = world(name, port);
    let provider = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/api/launch_provider.py");
    let script = format!(
        "ip link set lo up || exit 90; python3 {} {port} >/dev/null 2>&1 & p=$!; sleep 1; \
         \"$@\"; s=$?; kill $p; exit $s",
        provider.display()
    );
    let mut command = Command::new("timeout");
    command
        .args(["300", "unshare", unshare_flags(), "sh", "-c", &script, "sh"])
        .arg(BIN)
        .args(["--models", dir.join("models.toml").to_str().unwrap()])
        .args(["launch", cli, "--"])
        .args(arguments)
        .current_dir(dir.join("work"))
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("TMPDIR", dir.join("tmp"))
        .env("LANG", "C.UTF-8")
        .env("RUST_LOG", "warn")
        // A folder only its owner writes, as Gemini CLI wants of its settings' folders.
        .env("AGENT_AS_MODEL_CACHE_DIR", private_cache())
        .stdin(Stdio::null());
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether no folder from `dir` up to the root may be written by others than its owner (Gemini
/// CLI reads a settings file only under such folders).
fn private(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o022 == 0))
}

/// A cache folder for the launched server that only its owner's folders lead to: the user's
/// cache, else this checkout's `target`.
fn private_cache() -> PathBuf {
    let candidates = [
        agent_as_model::local::fetch::cache_dir()
            .ok()
            .map(|c| c.join("launch-tests")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("target/launch-cache")),
    ];
    for dir in candidates.into_iter().flatten() {
        std::fs::create_dir_all(&dir).unwrap();
        if private(&dir) {
            return dir;
        }
    }
    panic!(
        "no cache folder that only its owner can write leads to (neither the user's cache nor \
         target/): Gemini CLI would refuse the launch's settings file there"
    );
}

/// PATH with the Node.js the CLIs need and the CLIs' folder first.
fn cli_path() -> String {
    let node = node();
    let node_dir = Path::new(&node).parent().unwrap().display().to_string();
    let clis = Path::new(&installed("AGENT_AS_MODEL_CLAUDE", "claude"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    format!("{node_dir}:{clis}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
}

fn assert_answered(cli: &str, (code, stdout, stderr): (i32, String, String)) {
    assert_eq!(
        code, 0,
        "{cli}: exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains("Launched fine."),
        "{cli} did not print the provider's answer\nstdout: {stdout}\nstderr: {stderr}"
    );
}

#[test]
fn launch_runs_claude_code_on_the_servers_model() {
    let ran = launch("claude", "claude", &["-p", "Say hello."], &cli_path());
    assert_answered("claude", ran);
}

#[test]
fn launch_runs_codex_on_the_servers_model() {
    let ran = launch(
        "codex",
        "codex",
        &["exec", "--skip-git-repo-check", "Say hello."],
        &cli_path(),
    );
    assert_answered("codex", ran);
}

#[test]
fn launch_runs_gemini_cli_on_the_servers_model() {
    let ran = launch(
        "gemini",
        "gemini",
        &["--skip-trust", "-p", "Say hello."],
        &cli_path(),
    );
    assert_answered("gemini", ran);
}

#[test]
fn launch_runs_opencode_on_the_servers_model() {
    let ran = launch("opencode", "opencode", &["run", "Say hello."], &cli_path());
    assert_answered("opencode", ran);
    // Its provider offers the server's models, and its exit status is passed on.
    let (code, stdout, stderr) = launch(
        "opencode-models",
        "opencode",
        &["models", "agent-as-model"],
        &cli_path(),
    );
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("agent-as-model/scripted"), "{stdout}");
    let (code, stdout, stderr) = launch(
        "opencode-failed",
        "opencode",
        &["models", "no-such-provider"],
        &cli_path(),
    );
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("Provider not found: no-such-provider"),
        "{stderr}"
    );
}

#[test]
fn a_cli_that_is_not_installed_is_named_with_how_to_install_it() {
    for (cli, arguments, named, install) in [
        (
            "codex",
            &["exec", "hi"][..],
            "codex (Codex CLI) is not on PATH",
            "npm install -g @openai/codex",
        ),
        (
            "opencode",
            &["run", "hi"][..],
            "opencode (opencode) is not on PATH",
            "npm install -g opencode-ai",
        ),
    ] {
        // Told before the test's deadline of a minute (the launch itself is bounded at 300 s).
        let (name, cli_name) = (format!("missing-{cli}"), cli.to_owned());
        let arguments: Vec<String> = arguments.iter().map(|a| (*a).to_owned()).collect();
        let (code, _, stderr) = crate::common::before_blocking(
            Duration::from_secs(60),
            &format!("launch {cli} without {cli}"),
            move || {
                let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
                launch(
                    &name,
                    &cli_name,
                    &arguments,
                    "/usr/bin:/bin:/usr/sbin:/sbin",
                )
            },
        );
        assert_ne!(code, 0);
        assert!(
            stderr.contains(named) && stderr.contains(install),
            "{stderr}"
        );
    }
}

/// `agent-as-model ARGUMENTS` with `path` as PATH: its exit status and stdout.
fn help(arguments: &[&str], path: &str) -> (i32, String) {
    let out = crate::common::server::Server::new()
        .command()
        .args(arguments)
        .env("PATH", path)
        // The models the options given name, and no others.
        .env_remove("AGENT_AS_MODEL_MODELS")
        .env_remove("AGENT_AS_MODEL_BACKEND")
        .env_remove("AGENT_AS_MODEL_MODEL")
        .env_remove("AGENT_AS_MODEL_MODEL_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn launch_help_lists_the_clis_with_the_model_each_would_ask_for_and_how_to_install_it() {
    let dir = world("help", 1);
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        "default = \"scripted\"\n\
         [[models]]\nname = \"scripted\"\nbackend = \"provider\"\n\
         url = \"http://127.0.0.1:1/v1\"\nmodel = \"upstream\"\n\
         [[models]]\nname = \"second\"\nbackend = \"provider\"\n\
         url = \"http://127.0.0.1:1/v1\"\nmodel = \"other\"\n",
    )
    .unwrap();
    let models = models.to_str().unwrap();
    // With a models file (before `launch` or after the CLI's name), its models; the CLIs on
    // PATH found, the others with how to install them.
    for arguments in [
        &["--models", models, "launch", "--help"][..],
        &["launch", "codex", "--models", models, "-h"][..],
        &["--models", models, "help", "launch"][..],
    ] {
        let (code, stdout) = help(arguments, &cli_path());
        assert_eq!(code, 0, "{arguments:?}: {stdout}");
        for line in [
            "claude    Claude Code, model scripted",
            "codex     Codex CLI, model scripted",
            "gemini    Gemini CLI, model scripted",
            "opencode  opencode, model agent-as-model/scripted",
            "The server's models: scripted (the default), second",
        ] {
            assert!(
                stdout.contains(line),
                "{arguments:?}: no {line:?} in\n{stdout}"
            );
        }
        assert!(!stdout.contains("not installed"), "{arguments:?}: {stdout}");
    }
    // `--launch-model` picks one; a CLI not on PATH is named with its npm package.
    let (code, stdout) = help(
        &[
            "launch",
            "opencode",
            "--models",
            models,
            "--launch-model",
            "second",
            "--help",
        ],
        "/usr/bin:/bin",
    );
    assert_eq!(code, 0, "{stdout}");
    for line in [
        "claude    Claude Code, model second",
        "opencode  opencode, model agent-as-model/second",
        "not installed: install it with `npm install -g @anthropic-ai/claude-code`",
        "not installed: install it with `npm install -g @openai/codex`",
        "not installed: install it with `npm install -g @google/gemini-cli`",
        "not installed: install it with `npm install -g opencode-ai`",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    // Without a models file, the embedded model.
    let (code, stdout) = help(&["launch", "--help"], "/usr/bin:/bin");
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("codex     Codex CLI, model qwen2.5-coder-0.5b-instruct")
            && stdout.contains("The server's model: qwen2.5-coder-0.5b-instruct"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
