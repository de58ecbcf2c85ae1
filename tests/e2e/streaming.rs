//! Progress while the answer is made: a call carrying `_meta.progressToken` gets
//! `notifications/progress` from the embedded model as its tokens arrive (tokens so far, the
//! budget, the tail of the text), before its result; a call without one gets none. Driven by
//! the official MCP Python SDK's progress callback on both eras over stdio and Streamable HTTP,
//! and by a raw host that reads every line.

use crate::common::raw::{Raw, tools_call};
use crate::common::{peer, venv_bin};
use crate::local::{TURN, first_try};
use serde_json::{Value, json};
use std::time::Duration;

use crate::common::server::BIN;
const MAX_TOKENS: u64 = 40;

fn arguments() -> Value {
    json!({"prompt": "Write four lines about the sea.", "max_tokens": MAX_TOKENS,
           "temperature": 0})
}

/// Runs the Python SDK's progress client against `target` (a URL, or `stdio`).
fn python(target: &str, mode: &str) -> Value {
    python_call(
        target,
        mode,
        "generate",
        &arguments(),
        &[("AGENT_AS_MODEL_BACKEND", "local")],
    )
}

/// The Python SDK's progress client calling `tool`; over stdio the server gets `env`.
pub fn python_call(
    target: &str,
    mode: &str,
    tool: &str,
    arguments: &Value,
    env: &[(&str, &str)],
) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/progress_client.py"
    );
    let out = std::process::Command::new(peer("AGENT_AS_MODEL_PYTHON", &venv_bin("python")))
        .args([
            script,
            target,
            mode,
            tool,
            &arguments.to_string(),
            "--",
            BIN,
        ])
        .envs(env.iter().copied())
        .env("RUST_LOG", "error")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the Python SDK client ({e}); run scripts/test"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{target} {mode}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// What a host following the call sees: progress that grows towards the budget, the text so
/// far in its messages, the first of them well before the result, and the result unchanged.
fn check(report: &Value, version: &str) {
    assert_eq!(report["protocol_version"], version, "{report}");
    assert_eq!(report["is_error"], false, "{report}");
    let text = report["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{report}");
    let seen = report["progress"].as_array().unwrap();
    assert!(seen.len() >= 2, "{version}: progress {seen:?}");
    let values: Vec<f64> = seen
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "{version}: {values:?}"
    );
    for p in seen {
        assert_eq!(p["total"].as_f64(), Some(MAX_TOKENS as f64), "{p}");
    }
    assert!(*values.last().unwrap() <= MAX_TOKENS as f64, "{values:?}");
    // Notifications are at least 100 ms apart, so there are never more than the call's
    // length allows (plus the first).
    let result_t = report["result_t"].as_f64().unwrap();
    assert!(
        (seen.len() as f64) <= result_t / 0.1 + 2.0,
        "{} notifications in {result_t:.2} s",
        seen.len()
    );
    let first_t = seen[0]["t"].as_f64().unwrap();
    assert!(
        first_t < result_t,
        "first progress at {first_t}, result at {result_t}"
    );
    // The last message is the end of the text made so far: a part of the final answer.
    let last = seen.last().unwrap()["message"].as_str().unwrap();
    let last = last.trim_end_matches('…');
    assert!(
        text.contains(last.trim()),
        "{version}: {last:?} is not in the answer {text:?}"
    );
}

#[test]
fn the_python_sdk_follows_local_progress_over_stdio_on_both_eras() {
    let _turn = TURN.blocking_lock();
    let _ = first_try();
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        check(&python("stdio", mode), version);
    }
}

#[tokio::test]
async fn the_python_sdk_follows_local_progress_over_http_on_both_eras() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let server = crate::http::start(&[("AGENT_AS_MODEL_BACKEND", "local")]).await;
    let url = format!("{}/mcp", server.url);
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let url = url.clone();
        let report = tokio::task::spawn_blocking(move || python(&url, mode))
            .await
            .unwrap();
        check(&report, version);
    }
}

#[test]
fn progress_is_sent_only_for_a_call_with_a_token_and_never_after_its_result() {
    let _turn = TURN.blocking_lock();
    let _ = first_try();
    let mut raw = Raw::legacy(&[("AGENT_AS_MODEL_BACKEND", "local")], json!({}));
    let mut with_token = tools_call(json!("followed"), "generate", arguments());
    with_token["params"]["_meta"] = json!({"progressToken": "p-1"});
    for call in [
        tools_call(json!("quiet"), "generate", arguments()),
        with_token,
    ] {
        let id = call["id"].clone();
        raw.send(&call);
        let mut progress = Vec::new();
        loop {
            let line = raw
                .recv(Duration::from_secs(240))
                .expect("the call ended with a result");
            if line["method"] == "notifications/progress" {
                progress.push(line);
            } else if line["id"] == id {
                assert_eq!(line["result"]["isError"], false, "{line}");
                break;
            }
        }
        if id == "quiet" {
            assert!(progress.is_empty(), "no token, yet {progress:?}");
        } else {
            assert!(!progress.is_empty(), "no progress for a call with a token");
            assert!(
                progress
                    .iter()
                    .all(|p| p["params"]["progressToken"] == "p-1")
            );
        }
    }
    // Nothing for the finished call comes after its result.
    std::thread::sleep(Duration::from_millis(300));
    raw.send(&tools_call(json!("models"), "list_models", json!({})));
    let next = raw.recv(Duration::from_secs(30)).unwrap();
    assert_eq!(next["id"], "models", "{next}");
}

/// A scripted provider's stream: text, then a tool call whose name and arguments come in
/// parts, then (when `done`) its finish, usage and `[DONE]`.
fn tool_call_stream(done: bool) -> Vec<String> {
    let chunk = |delta: Value| json!({"model": "scripted-stream", "choices": [{"index": 0, "delta": delta}]});
    let mut events = vec![
        chunk(json!({"role": "assistant", "content": "Let me"})),
        chunk(json!({"content": " check the weather."})),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_w1", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\": \"Paris\"}"}}]})),
    ];
    if done {
        events.push(json!({"model": "scripted-stream",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
        events.push(json!({"model": "scripted-stream", "choices": [],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}}));
    }
    let mut events: Vec<String> = events.iter().map(Value::to_string).collect();
    if done {
        events.push("[DONE]".into());
    }
    events
}

fn weather_call() -> Value {
    json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
           "tools": [{"name": "get_weather", "description": "The weather in a city.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}}],
           "max_tokens": 50})
}

#[tokio::test]
async fn a_streaming_provider_is_followed_and_its_tool_call_deltas_assembled() {
    use crate::common::openai::{Reply, Scripted};
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let gap = Duration::from_millis(250);
        let server = Scripted::start(vec![Reply::Events(tool_call_stream(true), gap)]).await;
        let url = server.url.clone();
        let report = tokio::task::spawn_blocking(move || {
            let env = [
                ("AGENT_AS_MODEL_BACKEND", "provider"),
                ("AGENT_AS_MODEL_PROVIDER_URL", url.as_str()),
                ("AGENT_AS_MODEL_PROVIDER_MODEL", "gpt-stream"),
            ];
            python_call("stdio", mode, "chat_complete", &weather_call(), &env)
        })
        .await
        .unwrap();
        assert_eq!(report["protocol_version"], version, "{report}");
        assert_eq!(report["is_error"], false, "{report}");
        let body = &report["structured"]["chat_completion"];
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], "Let me check the weather.", "{report}");
        let call = &message["tool_calls"][0];
        assert_eq!(call["id"], "call_w1", "{report}");
        assert_eq!(call["function"]["name"], "get_weather", "{report}");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(body["usage"]["completion_tokens"], 12, "{report}");
        assert_eq!(body["model"], "scripted-stream");
        // The progress came while the stream did: the text so far, well before the result.
        let seen = report["progress"].as_array().unwrap();
        let result_t = report["result_t"].as_f64().unwrap();
        assert!(seen.len() >= 2, "{seen:?}");
        assert!(
            seen[0]["t"].as_f64().unwrap() + 0.5 < result_t,
            "{seen:?} / {result_t}"
        );
        assert!(
            seen.iter()
                .any(|p| p["message"].as_str().unwrap().contains("Let me check")),
            "{seen:?}"
        );
        let sent = &server.seen()[0].body;
        assert_eq!(sent["stream"], true, "{sent}");
        assert_eq!(
            sent["stream_options"],
            json!({"include_usage": true}),
            "{sent}"
        );
    }
}

#[tokio::test]
async fn a_stream_cut_short_fails_the_call_and_streaming_can_be_turned_off() {
    use crate::common::openai::{Reply, Scripted, completion};
    use crate::common::{ERAS, Host, call, connect_with_env, is_error, text};
    let cut = Scripted::start(vec![Reply::Events(tool_call_stream(false), Duration::ZERO)]).await;
    let whole = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    for era in ERAS {
        let env = [
            ("AGENT_AS_MODEL_BACKEND", "provider"),
            ("AGENT_AS_MODEL_PROVIDER_URL", cut.url.as_str()),
            ("AGENT_AS_MODEL_PROVIDER_MODEL", "gpt-stream"),
        ];
        let client = connect_with_env(Host::echo(), era, &env).await;
        let r = call(&client, "chat_complete", weather_call()).await;
        assert!(is_error(&r), "{}", text(&r));
        assert!(
            text(&r).contains("stream broke off before its end, after 5 part(s)"),
            "{}",
            text(&r)
        );
        client.cancel().await.unwrap();
        let env = [
            ("AGENT_AS_MODEL_BACKEND", "provider"),
            ("AGENT_AS_MODEL_PROVIDER_URL", whole.url.as_str()),
            ("AGENT_AS_MODEL_PROVIDER_MODEL", "gpt-whole"),
            ("AGENT_AS_MODEL_PROVIDER_STREAM", "false"),
        ];
        let client = connect_with_env(Host::echo(), era, &env).await;
        let r = call(&client, "generate", json!({"prompt": "Capital of France?"})).await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "Paris.");
        client.cancel().await.unwrap();
    }
    for seen in whole.seen() {
        assert!(seen.body.get("stream").is_none(), "{}", seen.body);
    }
}

#[tokio::test]
async fn a_sampling_request_the_bridge_answers_itself_streams_to_the_downstream() {
    // The downstream (the official Python SDK) asks the bridge for a completion with a
    // progress callback; the host cannot sample, so the bridge's embedded model answers, and
    // the downstream sees that model's progress before the answer.
    assert!(
        first_try().status.success(),
        "the model could not be fetched"
    );
    // The embedded model's turn: another test running it at once would halve its speed.
    let _turn = crate::local::TURN.lock().await;
    let mut cmd = crate::common::bridge_to_sdk_downstream();
    cmd.env("RUST_LOG", "error");
    let host = crate::common::Host::echo().without_sampling();
    let client = crate::common::connect_command(host, crate::common::Era::Legacy, cmd).await;
    let result = crate::common::call(
        &client,
        "ask",
        json!({"question": "Write four lines about the sea.", "max_tokens": MAX_TOKENS}),
    )
    .await;
    assert!(!crate::common::is_error(&result), "{result:?}");
    let report: Value = serde_json::from_str(&crate::common::text(&result)).unwrap();
    let seen = report["progress"].as_array().unwrap();
    assert!(
        !seen.is_empty(),
        "no progress reached the downstream: {report}"
    );
    let answer = report["answer"].as_str().unwrap();
    assert!(!answer.is_empty(), "{report}");
    let answered = report["answer_t"].as_f64().unwrap();
    assert!(
        seen.iter().all(|p| p["t"].as_f64().unwrap() <= answered),
        "progress after the answer: {report}"
    );
    assert_eq!(
        seen[0]["total"].as_f64(),
        Some(MAX_TOKENS as f64),
        "{report}"
    );
    // Each message is the end of the text so far: a piece of the answer.
    let last = seen.last().unwrap()["message"].as_str().unwrap().trim();
    assert!(
        last == "…" || answer.contains(last),
        "the last message is a piece of the answer: {report}"
    );
    assert!(
        seen.iter().any(|p| p["message"] != "…"),
        "some message carried text: {report}"
    );
    client.cancel().await.unwrap();
}
