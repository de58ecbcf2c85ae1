//! The bridge: `agent-as-model bridge -- <server>` between a host and a sampling MCP server.
//! A host that cannot sample gets every tool of the downstream server answered by the
//! embedded model (no key, no network); a host that can sample has the sampling passed up to it;
//! the downstream is restarted when it dies. Downstreams: this server, and the Python original
//! (PyPI `agent-as-model`, installed by `scripts/test`).

use crate::common::*;
use crate::local::{TURN, first_try};
use serde_json::json;

use crate::common::server::BIN;

/// The bridge in front of `downstream`, as a host would start it.
fn bridge(downstream: &[&str], extra: &[&str]) -> tokio::process::Command {
    let mut cmd = crate::common::server::Server::new().tokio_command();
    cmd.arg("bridge")
        .args(extra)
        .arg("--")
        .args(downstream)
        .env("RUST_LOG", "error");
    cmd
}

/// Asks `tool` the question and expects the embedded model's answer.
async fn expect_paris(client: &Client, tool: &str, label: &str) {
    let result = call(client, tool, question(tool, None)).await;
    assert!(!is_error(&result), "{label} {tool}: {result:?}");
    assert!(
        text(&result).contains("Paris"),
        "{label} {tool}: {}",
        text(&result)
    );
}

#[tokio::test]
async fn a_host_without_sampling_uses_this_server_through_the_bridge_on_both_eras() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let _turn = TURN.lock().await;
    for (era, down) in [(Era::Legacy, "legacy"), (Era::Modern, "modern")] {
        let host = Host::text("the host cannot sample").without_sampling();
        let cmd = bridge(&[BIN], &["--downstream-era", down]);
        let client = connect_command(host, era, cmd).await;
        // The downstream's tools, passed through unchanged.
        let tools = client.list_all_tools().await.unwrap();
        let direct = connect(Host::echo(), Era::Legacy).await;
        assert_eq!(tools, direct.list_all_tools().await.unwrap());
        direct.cancel().await.unwrap();
        for tool in SHAPES {
            expect_paris(&client, tool, down).await;
        }
        let models = call(&client, "list_models", json!({})).await;
        assert!(text(&models).contains("agent-default"), "{}", text(&models));
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_host_that_samples_answers_the_downstream_itself() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let host = Host::new(false, |p| {
        Ok(reply(&format!("the host answered: {}", last_text(p))))
    });
    let client = connect_command(host.clone(), Era::Legacy, bridge(&[BIN], &[])).await;
    let result = call(&client, "generate", json!({"prompt": "passed up"})).await;
    assert_eq!(text(&result), "the host answered: passed up");
    assert_eq!(host.seen().len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn errors_stay_the_downstreams_and_a_dead_downstream_is_restarted() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let host = Host::echo();
    // A timeout no other test uses marks this bridge's process.
    let marker = ["--with", "local", "--timeout-secs", "599"];
    let client = connect_command(host, Era::Legacy, bridge(&[BIN], &marker)).await;
    // The downstream's own error, unchanged.
    let e = try_call(&client, "no_such_tool", json!({}))
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -32602);
    assert!(e.to_string().contains("unknown tool"), "{e}");
    let bad = call(&client, "chat_complete", json!({"messages": "not a list"})).await;
    assert!(is_error(&bad) && text(&bad).contains("messages"), "{bad:?}");
    // Kill the downstream: calls say it is restarting, then work again.
    let found = std::process::Command::new("pgrep")
        .args(["-f", "bridge --with local --timeout-secs 599"])
        .output()
        .unwrap();
    let bridge_pid = String::from_utf8_lossy(&found.stdout).trim().to_owned();
    assert!(
        !bridge_pid.is_empty() && !bridge_pid.contains('\n'),
        "{bridge_pid:?}"
    );
    let killed = std::process::Command::new("pkill")
        .args(["-KILL", "-P", &bridge_pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let e = try_call(&client, "generate", json!({"prompt": "x"}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("restarting"), "{e}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match try_call(&client, "generate", json!({"prompt": "back"})).await {
            Ok(r) => {
                assert!(text(&r).contains("back"), "{r:?}");
                break;
            }
            Err(e) => assert!(std::time::Instant::now() < deadline, "never came back: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    client.cancel().await.unwrap();
}

fn peer_path(path: &str) -> String {
    format!("{}/target/peers/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn the_python_original_behind_the_bridge_answers_a_host_without_sampling() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let _turn = TURN.lock().await;
    let original = peer(
        "AGENT_AS_MODEL_ORIGINAL",
        &peer_path("original/bin/agent-as-model"),
    );
    // Each era on both sides: the original samples during the call (legacy) and in
    // input-required rounds (2026-07-28), which the bridge answers and retries.
    for (era, down) in [(Era::Legacy, "legacy"), (Era::Modern, "modern")] {
        let host = Host::text("the host cannot sample").without_sampling();
        let cmd = bridge(&[&original], &["--downstream-era", down]);
        let client = connect_command(host, era, cmd).await;
        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "chat_complete"), "{tools:?}");
        for tool in ["chat_complete", "generate"] {
            expect_paris(&client, tool, down).await;
        }
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn the_reference_everything_server_is_passed_through_and_its_sampling_answered() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let _turn = TURN.lock().await;
    let everything =
        peer_path("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let host = Host::text("the host cannot sample").without_sampling();
    // The everything server samples at temperature 0.7: a fixed seed makes the answer repeat.
    let mut cmd = bridge(&["node", &everything, "stdio"], &[]);
    cmd.env("AGENT_AS_MODEL_LOCAL_SEED", "7");
    let client = connect_command(host, Era::Legacy, cmd).await;
    // Its tools register once it knows the client samples (the bridge declares it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let tools = loop {
        let tools = client.list_all_tools().await.unwrap();
        if tools.iter().any(|t| t.name == "trigger-sampling-request")
            || std::time::Instant::now() > deadline
        {
            break tools;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let sampling = tools.iter().find(|t| t.name == "trigger-sampling-request");
    assert!(
        sampling.is_some(),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    // Annotations pass through unchanged.
    assert_eq!(
        sampling
            .unwrap()
            .annotations
            .as_ref()
            .and_then(|a| a.open_world_hint),
        Some(true)
    );
    let result = call(
        &client,
        "trigger-sampling-request",
        json!({"prompt": "What is the capital of France? One word.", "maxTokens": 16}),
    )
    .await;
    assert!(!is_error(&result), "{result:?}");
    let answer = text(&result);
    assert!(
        answer.contains("LLM sampling result") && answer.contains("Paris"),
        "{answer}"
    );
    // Resources and prompts are the downstream's own.
    let resources = client.list_all_resources().await.unwrap();
    assert!(!resources.is_empty());
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            resources[0].uri.clone(),
        ))
        .await
        .unwrap();
    assert!(!read.contents.is_empty());
    let prompts = client.list_all_prompts().await.unwrap();
    let simple = prompts
        .iter()
        .find(|p| {
            p.arguments
                .as_ref()
                .is_none_or(|a| a.iter().all(|a| a.required != Some(true)))
        })
        .unwrap_or_else(|| panic!("no prompt without required arguments: {prompts:?}"));
    let got = client
        .get_prompt(rmcp::model::GetPromptRequestParams::new(
            simple.name.clone(),
        ))
        .await
        .unwrap();
    assert!(!got.messages.is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_streamable_http_downstream_is_reached_with_its_token() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let _turn = TURN.lock().await;
    let token = "downstream-bearer-token-for-the-bridge";
    let server = crate::http::start(&[("AGENT_AS_MODEL_AUTH_TOKEN", token)]).await;
    let url = format!("{}/mcp", server.url);
    for down in ["legacy", "modern"] {
        let mut cmd = crate::common::server::Server::new().tokio_command();
        cmd.args(["bridge", "--downstream-era", down, "--url", &url])
            .env("AGENT_AS_MODEL_DOWNSTREAM_TOKEN", token)
            .env("RUST_LOG", "error");
        let host = Host::text("the host cannot sample").without_sampling();
        let client = connect_command(host, Era::Legacy, cmd).await;
        expect_paris(&client, "chat_complete", down).await;
        client.cancel().await.unwrap();
    }
    // Without the token the downstream refuses, and the bridge says so at start.
    let out = crate::common::server::Server::new()
        .tokio_command()
        .args(["bridge", "--url", &url])
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&url), "{stderr}");
}

#[tokio::test]
async fn concurrent_calls_through_the_bridge_each_get_their_own_answer() {
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let host = Host::new(false, |p| Ok(reply(&format!("answer to {}", last_text(p)))));
    let client = std::sync::Arc::new(connect_command(host, Era::Legacy, bridge(&[BIN], &[])).await);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..24 {
        let client = client.clone();
        calls.spawn(async move {
            let result = call(
                &client,
                "generate",
                json!({"prompt": format!("question {i}")}),
            )
            .await;
            assert_eq!(text(&result), format!("answer to question {i}"));
        });
    }
    while let Some(done) = calls.join_next().await {
        done.unwrap();
    }
}

#[test]
fn a_call_the_host_cancels_is_cancelled_down_the_chain() {
    use crate::common::raw::{Raw, tools_call};
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    let t = std::time::Duration::from_secs(20);
    // The host samples, so the downstream's sampling request comes up to it through the bridge
    // (a legacy downstream: it samples during the call, which the cancellation must end).
    let bridge = ["bridge", "--downstream-era", "legacy", "--", BIN];
    let mut raw = Raw::legacy_args(&bridge, &[], json!({"sampling": {}}));
    raw.send(&tools_call(
        json!(41),
        "generate",
        json!({"prompt": "slow one"}),
    ));
    let sampling = raw
        .recv_request("sampling/createMessage", t)
        .expect("sampling passed up");
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 41, "reason": "user gave up"}}),
    );
    // The bridge drops the call, the downstream cancels its sampling request, and the bridge
    // cancels the one it passed up.
    let cancel = raw
        .recv_matching(t, &mut Vec::new(), |v| {
            v["method"] == "notifications/cancelled"
        })
        .expect("the passed-up sampling request is cancelled");
    assert_eq!(cancel["params"]["requestId"], sampling["id"]);
    // The bridge and the downstream go on.
    raw.send(&tools_call(
        json!(42),
        "generate",
        json!({"prompt": "next"}),
    ));
    let sampling = raw
        .recv_request("sampling/createMessage", t)
        .expect("sampling again");
    raw.send(&json!({"jsonrpc": "2.0", "id": sampling["id"], "result": {
        "role": "assistant", "model": "m", "content": {"type": "text", "text": "still here"}}}));
    let done = raw.recv_id(&json!(42), t).expect("the next call completes");
    assert_eq!(done["result"]["content"][0]["text"], "still here", "{done}");
}
