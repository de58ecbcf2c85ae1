//! Streamable HTTP: the real binary with `--http`, driven by plain HTTP requests on both eras:
//! 2026-07-28 MRTR rounds as self-contained POSTs (crossing replicas that share the sealing
//! key), legacy sessions with sampling on the session's stream, auth, Host and Origin checks,
//! health and a graceful stop.

use crate::common::{Killed, free_port, peer, venv_bin};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "http-test-sealing-key-0123456789abcdef";

pub struct Replica {
    pub child: Killed,
    pub url: String,
}

pub async fn start(env: &[(&str, &str)]) -> Replica {
    start_logging(env, Stdio::null()).await
}

/// A server whose log goes to `stderr`.
pub async fn start_logging(env: &[(&str, &str)], stderr: Stdio) -> Replica {
    let server = crate::common::server::Server::new()
        .log_level("error")
        .envs(env)
        .stderr(stderr)
        .http()
        .await;
    Replica {
        child: server.child,
        url: server.url,
    }
}

pub fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
           "io.modelcontextprotocol/clientInfo": {"name": "http-test", "version": "0"}})
}

/// The JSON-RPC messages of a response body (plain JSON or an SSE stream).
pub fn messages(body: &str) -> Vec<Value> {
    if body.trim_start().starts_with('{') {
        return vec![serde_json::from_str(body).unwrap()];
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect()
}

pub async fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Vec<Value>, reqwest::header::HeaderMap) {
    let mut request = crate::common::http_client()
        .post(format!("{url}/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let parsed = if status == 200 {
        messages(&text)
    } else {
        Vec::new()
    };
    (status, parsed, headers)
}

/// One 2026-07-28 `tools/call` POST (a first round, or a retry with `extra` params): the reply
/// and the response headers.
pub async fn modern_call(
    url: &str,
    arguments: &Value,
    extra: Value,
) -> (Value, reqwest::header::HeaderMap) {
    let mut params = json!({"_meta": meta(), "name": "generate", "arguments": arguments});
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "generate"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let (status, replies, headers) = post(url, &headers, &body).await;
    assert_eq!(status, 200);
    (replies.into_iter().find(|m| m["id"] == 7).unwrap(), headers)
}

pub fn sample_answer(text: &str) -> Value {
    json!({"sample": {"role": "assistant", "content": {"type": "text", "text": text},
                      "model": "http-host-model"}})
}

#[tokio::test]
async fn an_mrtr_retry_completes_on_another_replica_with_the_same_key_only() {
    let a = start(&[("AGENT_AS_MODEL_STATE_KEY", KEY)]).await;
    let b = start(&[("AGENT_AS_MODEL_STATE_KEY", KEY)]).await;
    let other = start(&[(
        "AGENT_AS_MODEL_STATE_KEY",
        "a-different-key-0123456789abcdefghij",
    )])
    .await;
    let arguments = json!({"prompt": "over http"});
    let (first, _) = modern_call(&a.url, &arguments, json!({})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["sample"]["method"],
        "sampling/createMessage"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    let retry =
        json!({"requestState": state, "inputResponses": sample_answer("answered across replicas")});
    let (done, _) = modern_call(&b.url, &arguments, retry.clone()).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "answered across replicas",
        "{done}"
    );
    let (refused, _) = modern_call(&other.url, &arguments, retry).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

#[tokio::test]
async fn a_legacy_session_samples_on_its_stream() {
    let server = start(&[]).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "legacy-http", "version": "0"}}});
    let (status, replies, headers) = post(&server.url, &[], &init).await;
    assert_eq!(status, 200);
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-11-25");
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let s = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, _, _) = post(
        &server.url,
        &s,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    // The call's response is a stream: the sampling request arrives on it, the answer is
    // POSTed back, and the result follows on the same stream.
    let response = crate::common::http_client()
        .post(format!("{}/mcp", server.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .body(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "generate", "arguments": {"prompt": "legacy over http"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let mut response = response;
    let mut buffer = String::new();
    let mut answered = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < deadline,
            "no result on the stream: {buffer}"
        );
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .unwrap()
            .unwrap()
            .expect("the stream stays open until the result");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        let seen = messages(&buffer);
        if !answered
            && let Some(request) = seen
                .iter()
                .find(|m| m["method"] == "sampling/createMessage")
        {
            assert_eq!(
                request["params"]["messages"][0]["content"]["text"],
                "legacy over http"
            );
            let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": "sampled over http"},
                "model": "m"}});
            let (status, _, _) = post(&server.url, &s, &reply).await;
            assert_eq!(status, 202);
            answered = true;
        }
        if let Some(done) = seen.iter().find(|m| m["id"] == 2) {
            assert_eq!(done["result"]["content"][0]["text"], "sampled over http");
            break;
        }
    }
}

#[tokio::test]
async fn auth_host_and_origin_are_checked_and_health_is_open() {
    let token = "secret-bearer-token-for-the-test";
    let server = start(&[("AGENT_AS_MODEL_AUTH_TOKEN", token)]).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"_meta": meta(), "name": "list_models", "arguments": {}}});
    let modern = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "list_models"),
    ];
    let (status, _, headers) = post(&server.url, &modern, &list).await;
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let bearer = format!("Bearer {token}");
    let wrong = [
        modern[0],
        modern[1],
        modern[2],
        ("Authorization", "Bearer nope"),
    ];
    assert_eq!(post(&server.url, &wrong, &list).await.0, 401);
    let good = [
        modern[0],
        modern[1],
        modern[2],
        ("Authorization", bearer.as_str()),
    ];
    let (status, replies, _) = post(&server.url, &good, &list).await;
    assert_eq!(status, 200);
    assert!(
        replies[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("agent-default")
    );
    // DNS rebinding: a foreign Host or Origin is refused before anything else.
    let rebound = [good[0], good[1], good[2], good[3], ("Host", "evil.example")];
    assert_eq!(post(&server.url, &rebound, &list).await.0, 403);
    let origin = [
        good[0],
        good[1],
        good[2],
        good[3],
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(post(&server.url, &origin, &list).await.0, 403);
    // A page from this very address is this server's own origin; another local port is not.
    let own = server.url.replace("127.0.0.1", "localhost");
    let port = own.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let own_origin = [good[0], good[1], good[2], good[3], ("Origin", own.as_str())];
    assert_eq!(post(&server.url, &own_origin, &list).await.0, 200);
    let other = format!("http://localhost:{}", port.wrapping_add(1));
    let other_origin = [
        good[0],
        good[1],
        good[2],
        good[3],
        ("Origin", other.as_str()),
    ];
    assert_eq!(post(&server.url, &other_origin, &list).await.0, 403);
    // A body over the request limit (plus the 1 MiB envelope allowance) is refused unread.
    let limited = start(&[("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "20000")]).await;
    let huge = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "_meta": meta(), "name": "generate", "arguments": {"prompt": "x".repeat(2 << 20)}}});
    let generate = [modern[0], modern[1], ("Mcp-Name", "generate")];
    assert_eq!(post(&limited.url, &generate, &huge).await.0, 413);
    let health = crate::common::http_client()
        .get(format!("{}/healthz", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let missing = crate::common::http_client()
        .get(format!("{}/elsewhere", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn sigterm_stops_the_server() {
    let mut server = start(&[]).await;
    let pid = server.child.0.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = server.child.0.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `deploy/nginx.conf` with its ports and paths replaced, started in the foreground.
pub async fn nginx(a: &Replica, b: &Replica) -> (Killed, String) {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("aam-nginx-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let config = include_str!("../../deploy/nginx.conf")
        .replace("127.0.0.1:8001", a.url.trim_start_matches("http://"))
        .replace("127.0.0.1:8002", b.url.trim_start_matches("http://"))
        .replace("127.0.0.1:8000", &format!("127.0.0.1:{port}"))
        .replace("/tmp/agent-as-model-nginx", &format!("{d}/nginx"));
    let path = dir.join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    let exe = peer("AGENT_AS_MODEL_NGINX", "/usr/sbin/nginx");
    let nginx = Killed(
        Command::new(&exe)
            .args(["-c", path.to_str().unwrap(), "-p", d])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start nginx at {exe} ({e}); scripts/test installs it")
            }),
    );
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = crate::common::http_client()
            .get(format!("{url}/healthz"))
            .send()
            .await
            && r.status() == 200
        {
            return (nginx, url);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nginx did not come up");
}

/// A 2026-07-28 `tools/call` through nginx: the reply and the replica that answered.
async fn modern_via(url: &str, arguments: &Value, extra: Value) -> (Value, String) {
    let (reply, headers) = modern_call(url, arguments, extra).await;
    (reply, headers["x-upstream"].to_str().unwrap().to_owned())
}

#[tokio::test]
async fn behind_nginx_retries_cross_replicas_and_sessions_stick() {
    let a = start(&[("AGENT_AS_MODEL_STATE_KEY", KEY)]).await;
    let b = start(&[("AGENT_AS_MODEL_STATE_KEY", KEY)]).await;
    let (_nginx, url) = nginx(&a, &b).await;
    // Requests without a session spread over both replicas; a retry that lands on the other
    // replica than its first round completes.
    let mut crossed = 0;
    let mut upstreams = std::collections::HashSet::new();
    for i in 0..12 {
        let arguments = json!({"prompt": format!("call {i}")});
        let (first, first_upstream) = modern_via(&url, &arguments, json!({})).await;
        let state = first["result"]["requestState"].as_str().unwrap().to_owned();
        let answer = format!("answer {i}");
        let retry = json!({"requestState": state, "inputResponses": sample_answer(&answer)});
        let (done, retry_upstream) = modern_via(&url, &arguments, retry).await;
        assert_eq!(
            done["result"]["content"][0]["text"],
            answer.as_str(),
            "{done}"
        );
        upstreams.insert(first_upstream.clone());
        if first_upstream != retry_upstream {
            crossed += 1;
        }
    }
    assert_eq!(upstreams.len(), 2, "both replicas served: {upstreams:?}");
    assert!(crossed > 0, "at least one retry crossed replicas");
    // A legacy session: every request with its id goes to the replica that created it.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "legacy-nginx", "version": "0"}}});
    let (status, _, headers) = post(&url, &[], &init).await;
    assert_eq!(status, 200);
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let home = headers["x-upstream"].to_str().unwrap().to_owned();
    let s = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    for _ in 0..6 {
        let (status, _, headers) = post(
            &url,
            &s,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
        assert_eq!(status, 202);
        assert_eq!(headers["x-upstream"].to_str().unwrap(), home);
    }
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "list_models", "arguments": {}}});
    let (status, replies, _) = post(&url, &s, &list).await;
    assert_eq!(status, 200);
    assert!(
        replies
            .iter()
            .any(|m| m["id"] == 3 && m["result"]["content"][0]["text"].is_string())
    );
}

#[tokio::test]
async fn the_official_python_sdk_samples_over_http_on_both_eras() {
    let server = start(&[]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_client.py"
    );
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let out = tokio::process::Command::new(peer("AGENT_AS_MODEL_PYTHON", &venv_bin("python")))
            .args([script, &format!("{}/mcp", server.url), mode])
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run the Python SDK client ({e}); run scripts/test"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(report["protocol_version"], version);
        assert_eq!(report["is_error"], false);
        assert_eq!(report["text"], "python host saw: hello from the python sdk");
        assert!(
            report["tools"]
                .as_array()
                .unwrap()
                .contains(&json!("chat_complete"))
        );
    }
}
