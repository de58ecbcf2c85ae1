//! Streamable HTTP under load and in operation: the legacy session cap and idle expiry, the
//! per-session and server-wide caps on calls in flight, sampling temperatures exactly as the
//! caller gave them, and JSON log lines carrying each call's request id and duration.

use crate::http::{messages, meta, modern_call, post, start, start_logging};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};

const LEGACY: &str = "2025-11-25";

/// Opens a legacy session (initialize + initialized); `Err(status)` when refused.
async fn open_session(url: &str) -> Result<String, u16> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {"sampling": {}},
        "clientInfo": {"name": "ops-test", "version": "0"}}});
    let (status, _, headers) = post(url, &[], &init).await;
    if status != 200 {
        return Err(status);
    }
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let s = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", LEGACY),
    ];
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(url, &s, &note).await.0, 202);
    Ok(session)
}

/// Starts a `generate` call in a legacy session; its response streams.
async fn start_call(url: &str, session: &str, id: u64, arguments: Value) -> reqwest::Response {
    crate::common::http_client()
        .post(format!("{url}/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", LEGACY)
        .body(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "generate", "arguments": arguments}})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
}

/// Reads a call's stream until a message matches.
async fn read_until(response: &mut reqwest::Response, wanted: impl Fn(&Value) -> bool) -> Value {
    let mut buffer = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "nothing matched: {buffer}");
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended: {buffer}"));
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(m) = messages(&buffer).into_iter().find(&wanted) {
            return m;
        }
    }
}

fn is_sampling(m: &Value) -> bool {
    m["method"] == "sampling/createMessage"
}

#[tokio::test]
async fn legacy_sessions_are_capped_and_expire_when_idle() {
    let server = start(&[
        ("AGENT_AS_MODEL_MAX_SESSIONS", "1"),
        ("AGENT_AS_MODEL_SESSION_IDLE_SECS", "2"),
    ])
    .await;
    let first = open_session(&server.url).await.unwrap();
    // The cap is full: a second legacy client is told to come back, with a reason.
    let response = crate::common::http_client()
        .post(format!("{}/mcp", server.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "second", "version": "0"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    assert!(response.text().await.unwrap().contains("MAX_SESSIONS"));
    // A 2026-07-28 client needs no session, so the cap does not concern it.
    let (listed, _) = modern_call(&server.url, &json!({"prompt": "p"}), json!({})).await;
    assert_eq!(listed["result"]["resultType"], "input_required", "{listed}");
    // Left quiet past the idle limit, the first session is closed and its place is free.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let s = [
        ("Mcp-Session-Id", first.as_str()),
        ("MCP-Protocol-Version", LEGACY),
    ];
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    assert_eq!(post(&server.url, &s, &ping).await.0, 404);
    assert!(open_session(&server.url).await.is_ok());
}

#[tokio::test]
async fn calls_in_flight_are_capped_per_session_and_in_all() {
    let server = start(&[
        ("AGENT_AS_MODEL_MAX_CALLS_PER_SESSION", "1"),
        ("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", "2"),
    ])
    .await;
    let a = open_session(&server.url).await.unwrap();
    // The first call waits on the host's answer, holding the session's only place.
    let mut held = start_call(&server.url, &a, 2, json!({"prompt": "hold"})).await;
    read_until(&mut held, is_sampling).await;
    let mut second = start_call(&server.url, &a, 3, json!({"prompt": "more"})).await;
    let refused = read_until(&mut second, |m| m["id"] == 3).await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("MAX_CALLS_PER_SESSION"), "{message}");
    // Another session holds the server's second place; a third call anywhere is over the
    // server-wide cap.
    let b = open_session(&server.url).await.unwrap();
    let mut other = start_call(&server.url, &b, 2, json!({"prompt": "hold too"})).await;
    read_until(&mut other, is_sampling).await;
    let c = open_session(&server.url).await.unwrap();
    let mut third = start_call(&server.url, &c, 2, json!({"prompt": "one too many"})).await;
    let refused = read_until(&mut third, |m| m["id"] == 2).await;
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("MAX_CALLS_IN_FLIGHT"), "{message}");
}

#[tokio::test]
async fn sampling_temperatures_arrive_as_given_on_both_eras() {
    let server = start(&[]).await;
    let arguments = json!({"prompt": "warm", "temperature": 0.7});
    let (first, _) = modern_call(&server.url, &arguments, json!({})).await;
    let params = &first["result"]["inputRequests"]["sample"]["params"];
    assert_eq!(params["temperature"].to_string(), "0.7", "{first}");
    let session = open_session(&server.url).await.unwrap();
    let arguments = json!({"prompt": "cool", "temperature": 0.2});
    let mut call = start_call(&server.url, &session, 2, arguments).await;
    let request = read_until(&mut call, is_sampling).await;
    assert_eq!(request["params"]["temperature"].to_string(), "0.2");
}

#[tokio::test]
async fn json_logs_carry_each_calls_request_id_and_duration() {
    let path = std::env::temp_dir().join(format!("aam-http-log-{}.jsonl", std::process::id()));
    let log = std::fs::File::create(&path).unwrap();
    let server = start_logging(
        &[("AGENT_AS_MODEL_LOG_FORMAT", "json"), ("RUST_LOG", "info")],
        Stdio::from(log),
    )
    .await;
    let (_, headers) = modern_call(&server.url, &json!({"prompt": "logged"}), json!({})).await;
    let id = headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(id.len() >= 16, "{id}");
    // A proxy's id is kept.
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"_meta": meta(), "name": "list_models", "arguments": {}}});
    let h = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "list_models"),
        ("X-Request-Id", "from-the-proxy-42"),
    ];
    let (status, _, headers) = post(&server.url, &h, &list).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-request-id"], "from-the-proxy-42");
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines: Vec<Value> = loop {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let calls = lines.iter().filter(|l| l["message"] == "tool call").count();
        if calls >= 2 || Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let call = |rid: &str| {
        lines
            .iter()
            .find(|l| l["message"] == "tool call" && l["request_id"] == rid)
            .unwrap_or_else(|| panic!("no call logged as {rid}: {lines:?}"))
            .clone()
    };
    let first = call(&id);
    assert_eq!(
        (&first["tool"], &first["outcome"]),
        (&json!("generate"), &json!("input_required"))
    );
    assert!(first["duration_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(first["level"], "INFO");
    let second = call("from-the-proxy-42");
    assert_eq!(
        (&second["tool"], &second["outcome"]),
        (&json!("list_models"), &json!("ok"))
    );
    assert!(lines.iter().any(|l| l["message"] == "http request"
        && l["request_id"] == id.as_str()
        && l["status"] == 200));
    // No prompt text in the default log.
    assert!(!std::fs::read_to_string(&path).unwrap().contains("logged"));
    let _ = std::fs::remove_file(&path);
}

/// fast-agent's one-shot run against the server at `url`: its passthrough model calls the tool
/// with the arguments given and answers the server's sampling by echoing the prompt. Returns
/// the tool result's structured content, as fast-agent prints it.
async fn fast_agent(url: &str, era: &str, tool: &str, arguments: &Value) -> Value {
    let bin = crate::common::peer(
        "AGENT_AS_MODEL_FAST_AGENT",
        &format!(
            "{}/target/peers/fast-agent/bin/fast-agent",
            env!("CARGO_MANIFEST_DIR")
        ),
    );
    let home = std::env::temp_dir().join(format!("aam-fast-agent-{}-{era}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = tokio::process::Command::new(&bin)
        .current_dir(&home)
        .env("HOME", &home)
        .args([
            "--no-update-check",
            "go",
            "--url",
            url,
            "--mcp-protocol",
            era,
        ])
        .args([
            "--model",
            "passthrough",
            "--isolated",
            "--no-shell",
            "--message",
        ])
        .arg(format!("***CALL_TOOL {tool} {arguments}"))
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {bin} ({e}); run scripts/test"));
    let _ = std::fs::remove_dir_all(&home);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{era}: {stdout}\n{stderr}");
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{era}: no result in\n{stdout}\n{stderr}"));
    serde_json::from_str(last).unwrap()
}

#[tokio::test]
async fn fast_agent_samples_over_http_on_both_eras() {
    if std::env::var("AGENT_AS_MODEL_FAST_AGENT").as_deref() == Ok("unavailable") {
        eprintln!("fast-agent needs Python 3.12+, which this machine lacks: not run");
        return;
    }
    let path = std::env::temp_dir().join(format!("aam-fast-agent-{}.jsonl", std::process::id()));
    let log = std::fs::File::create(&path).unwrap();
    let server = start_logging(
        &[("AGENT_AS_MODEL_LOG_FORMAT", "json"), ("RUST_LOG", "info")],
        Stdio::from(log),
    )
    .await;
    let url = format!("{}/mcp", server.url);
    let modern = fast_agent(
        &url,
        "modern",
        "generate",
        &json!({"prompt": "hello from fast-agent"}),
    )
    .await;
    assert_eq!(modern["result"], "hello from fast-agent", "{modern}");
    assert_eq!(modern["host_model"], "passthrough");
    let legacy = fast_agent(
        &url,
        "legacy",
        "chat_complete",
        &json!({"messages": [{"role": "user", "content": "legacy fast-agent"}]}),
    )
    .await;
    let choice = &legacy["chat_completion"]["choices"][0];
    assert_eq!(
        choice["message"]["content"], "legacy fast-agent",
        "{legacy}"
    );
    assert_eq!(legacy["chat_completion"]["model"], "passthrough");
    // The modern run went through MRTR rounds; the legacy one sampled inside its call.
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let calls: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "tool call")
        .collect();
    let outcomes = |tool: &str| -> Vec<String> {
        calls
            .iter()
            .filter(|c| c["tool"] == tool)
            .map(|c| c["outcome"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(outcomes("generate"), ["input_required", "ok"]);
    assert_eq!(outcomes("chat_complete"), ["ok"]);
}
