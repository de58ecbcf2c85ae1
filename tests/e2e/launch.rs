//! `agent-as-model launch <cli>` with the real CLIs (Claude Code, Codex CLI, Gemini CLI, from
//! npm by scripts/peers), each offline in a network namespace of its own: inside it a scripted
//! OpenAI-compatible provider (tests/e2e/api/launch_provider.py) answers on loopback, the
//! server runs from a models file naming it, and the CLI, pointed at the server by `launch`
//! alone, prints the provider's answer and exits 0; the server is gone with it. A CLI that is
//! not installed is named, with how to install it.

use crate::api_clis::{installed, node, unshare_flags};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agent-as-model");

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
fn a_cli_that_is_not_installed_is_named_with_how_to_install_it() {
    let started = std::time::Instant::now();
    let (code, _, stderr) = launch(
        "missing",
        "codex",
        &["exec", "hi"],
        "/usr/bin:/bin:/usr/sbin:/sbin",
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("codex (Codex CLI) is not on PATH")
            && stderr.contains("npm install -g @openai/codex"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}
