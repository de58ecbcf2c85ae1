//! The ways users install the server, each started from its own launcher and answering an MCP
//! round trip on both eras: the PyPI wheel (built by `scripts/test` with maturin into
//! `target/dist`, installed into a fresh virtual environment), the npm launcher with this
//! platform's binary package (`npm pack`, then a local install), and the crate's file list.

use crate::common::{Era, Host, call, connect_command, text};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-install-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `launcher --version`, then a `generate` call on each era, answered by a scripted host.
async fn round_trip(launcher: &Path) {
    let version = run(Command::new(launcher).arg("--version"));
    assert!(
        version.starts_with(&format!("agent-as-model {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(version.contains("2026-07-28"), "{version}");
    for era in [Era::Legacy, Era::Modern] {
        let mut cmd = tokio::process::Command::new(launcher);
        cmd.env("RUST_LOG", "error");
        let client = connect_command(Host::echo(), era, cmd).await;
        let result = call(
            &client,
            "generate",
            json!({"prompt": "installed and answering"}),
        )
        .await;
        assert!(
            text(&result).contains("installed and answering"),
            "{result:?}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn the_wheel_installs_and_its_console_script_serves() {
    let wheel = built_wheel();
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("agent_as_model-{}-", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    // The index already holds the Python original under this name, up to 0.2.0: a wheel must
    // be newer to be uploaded and to be what `uvx agent-as-model` resolves.
    let version: Vec<u64> = name
        .trim_start_matches("agent_as_model-")
        .split('-')
        .next()
        .unwrap()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        version > vec![0, 2, 0],
        "the wheel's version {version:?} is not newer than the Python original's 0.2.0"
    );
    let venv = scratch("wheel");
    pip_install(&venv, &wheel);
    round_trip(&venv.join("bin/agent-as-model")).await;
    let _ = std::fs::remove_dir_all(&venv);
}

/// The wheel scripts/test built with maturin into `target/dist`.
pub fn built_wheel() -> PathBuf {
    let dist = Path::new(ROOT).join("target/dist");
    std::fs::read_dir(&dist)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .unwrap_or_else(|| panic!("no wheel in {}: run scripts/test", dist.display()))
}

/// A fresh virtual environment at `venv` with `wheel` installed into it, offline.
pub fn pip_install(venv: &Path, wheel: &Path) {
    run(Command::new("python3").args(["-m", "venv"]).arg(venv));
    run(Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--no-index",
            "--disable-pip-version-check",
        ])
        .arg(wheel));
}

/// The launcher and the platform package made in `platform` (npm/build.js), packed into `dir`
/// and installed into a new project, `dir/app`, which is returned.
pub fn npm_install(dir: &Path, platform: &Path) -> PathBuf {
    let packed = run(Command::new("npm")
        .current_dir(dir)
        .args(["pack", "--silent"])
        .arg(Path::new(ROOT).join("npm/agent-as-model"))
        .arg(platform));
    let tarballs: Vec<&str> = packed.lines().filter(|l| l.ends_with(".tgz")).collect();
    assert_eq!(tarballs.len(), 2, "{packed}");
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("package.json"),
        r#"{"name": "app", "private": true}"#,
    )
    .unwrap();
    let mut install = Command::new("npm");
    install
        .current_dir(&app)
        .args(["install", "--no-audit", "--no-fund", "--silent"]);
    for t in &tarballs {
        install.arg(dir.join(t));
    }
    run(&mut install);
    app
}

#[tokio::test]
async fn the_npm_launcher_starts_this_platforms_binary() {
    let dir = scratch("npm");
    let platform = dir.join("platform");
    let (os, cpu) = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => ("linux", "x64"),
        ("linux", "aarch64") => ("linux", "arm64"),
        ("macos", "x86_64") => ("darwin", "x64"),
        ("macos", "aarch64") => ("darwin", "arm64"),
        other => panic!("no npm package for {other:?}"),
    };
    run(Command::new("node")
        .arg(Path::new(ROOT).join("npm/build.js"))
        .arg(env!("CARGO_BIN_EXE_agent-as-model"))
        .args([os, cpu])
        .arg(&platform));
    let app = npm_install(&dir, &platform);
    // What `npx agent-as-model` runs in a project that installed it.
    let npx = run(Command::new("npx").current_dir(&app).args([
        "--no-install",
        "agent-as-model",
        "--version",
    ]));
    assert!(npx.contains(env!("CARGO_PKG_VERSION")), "{npx}");
    round_trip(&app.join("node_modules/.bin/agent-as-model")).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_crate_carries_what_cargo_install_needs() {
    let listed = run(Command::new(env!("CARGO")).current_dir(ROOT).args([
        "package",
        "--list",
        "--allow-dirty",
        "--offline",
    ]));
    let files: Vec<&str> = listed.lines().collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "src/main.rs",
        "src/shapes/tools/chat_complete.json",
        "src/http/ui/index.html",
    ] {
        assert!(files.contains(&needed), "{needed} missing from {files:?}");
    }
    assert!(
        files
            .iter()
            .all(|f| !f.starts_with("tests/") && !f.starts_with("target/")),
        "{files:?}"
    );
    // The npm launcher and the wheel carry the crate's version.
    let launcher: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("npm/agent-as-model/package.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(launcher["version"], env!("CARGO_PKG_VERSION"));
    for (_, v) in launcher["optionalDependencies"].as_object().unwrap() {
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
    }
}
