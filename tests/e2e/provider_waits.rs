//! What a provider's failures and waits become: a provider error that quotes the prompt never
//! reaches the logs at their default level (text or JSON) while its status does, a wait the
//! provider asks for is told to the client as asked instead of slept through past the call's
//! deadline, and an answer that keeps streaming is read to its end however long it takes,
//! within a deadline of its own.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::raw::{Raw, tools_call};
use crate::http::start;
use serde_json::{Value, json};
use std::time::Duration;

/// A sentence a user would not want in a log file.
const SECRET: &str = "my bank PIN is 4921 and my mother's maiden name is Quixley";

fn models_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-waits-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_quoting_the_prompt_stays_out_of_the_default_logs() {
    // The provider fails with a 500 whose message quotes the prompt; the call falls back.
    let quoting = Scripted::start(vec![Reply::json(
        500,
        &json!({"error": {"message": format!("internal error while reading \"{SECRET}\"")}}),
    )])
    .await;
    let backup = Scripted::start(vec![Reply::json(200, &completion("Noted."))]).await;
    let file = format!(
        "default = \"quoting\"\n\
         [[models]]\nname = \"quoting\"\nbackend = \"provider\"\nurl = \"{}\"\nmodel = \"m\"\n\
         retries = 0\nfallbacks = [\"backup\"]\n\
         [[models]]\nname = \"backup\"\nbackend = \"provider\"\nurl = \"{}\"\nmodel = \"m\"\n",
        quoting.url, backup.url
    );
    let path = models_file("logs", &file);
    for format in ["text", "json"] {
        // No RUST_LOG: the default level of each format.
        let mut raw = Raw::legacy(
            &[
                ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
                ("AGENT_AS_MODEL_LOG_FORMAT", format),
            ],
            json!({}),
        );
        raw.send(&tools_call(json!(1), "generate", json!({"prompt": SECRET})));
        let reply = raw
            .recv_id(&json!(1), Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no answer ({format}): {}", raw.stderr()));
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        let stderr = raw.stderr();
        assert!(
            stderr.contains("falling back") && stderr.contains("500"),
            "the fallback and its status are logged ({format}): {stderr}"
        );
        assert!(
            !stderr.contains("Quixley") && !stderr.contains("4921"),
            "the prompt reached the {format} log: {stderr}"
        );
    }
    assert_eq!(quoting.seen().len(), 2, "one request per format");
}

/// A server whose one provider, at `url`, retries 3 times within a deadline of `deadline` s.
async fn api_server(url: &str, deadline: &str) -> crate::http::Replica {
    start(&[
        ("AGENT_AS_MODEL_BACKEND", "provider"),
        ("AGENT_AS_MODEL_PROVIDER_URL", url),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "m"),
        ("AGENT_AS_MODEL_PROVIDER_RETRIES", "3"),
        ("AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS", deadline),
    ])
    .await
}

/// Status, `Retry-After` and body of a chat completion at `server`, waited for at most 20 s.
async fn chat(server: &crate::http::Replica) -> (u16, Option<String>, Value) {
    let response = crate::common::http_client()
        .post(format!("{}/v1/chat/completions", server.url))
        .timeout(Duration::from_secs(20))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("answered within 20 s");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_the_provider_asks_for_is_told_to_the_client_not_slept_past_the_deadline() {
    let busy = |status, wait: &str| {
        Reply::Answer(
            status,
            vec![("Retry-After".into(), wait.into())],
            json!({"error": {"message": "slow down"}}).to_string(),
        )
    };
    // 30 s is a wait the retries would take, but not within a call of 10 s: the client is told
    // at once, with the provider's own wait.
    let provider = Scripted::start(vec![busy(429, "30")]).await;
    let server = api_server(&provider.url, "10").await;
    // Told before the client's deadline of 8 s: it did not wait.
    let (status, retry_after, body) =
        crate::common::before(Duration::from_secs(8), "the busy answer", chat(&server)).await;
    assert_eq!(
        (status, retry_after.as_deref()),
        (429, Some("30")),
        "{body}"
    );
    assert_eq!(provider.seen().len(), 1, "no retry that could not finish");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("retry after 30 s") && message.contains("slow down"),
        "{message}"
    );
    // A wait longer than any retry: a 503 stays a 503, and the wait is told (up to a day).
    let provider = Scripted::start(vec![busy(503, "100000")]).await;
    let server = api_server(&provider.url, "600").await;
    let (status, retry_after, body) = chat(&server).await;
    assert_eq!(
        (status, retry_after.as_deref()),
        (503, Some("86400")),
        "{body}"
    );
    assert_eq!(provider.seen().len(), 1);
}

/// A chat completion chunk carrying `text`, or (`None`) the last one, with its finish reason.
fn chunk(text: Option<&str>) -> String {
    let (delta, finish) = match text {
        Some(text) => (json!({"content": text}), Value::Null),
        None => (json!({}), json!("stop")),
    };
    json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

/// The tool result's text of a `generate` call answered by a provider streaming `events`, half
/// a second apart, with a 2 s timeout and the deadline `deadline`.
fn generate_streamed(events: Vec<String>, deadline: &str) -> Value {
    generate_answered(Reply::Events(events, Duration::from_millis(500)), deadline)
}

/// The tool result's text of a `generate` call answered by a provider's `reply`, with a 2 s
/// timeout and the deadline `deadline`, answered before the test's deadline of 20 s.
fn generate_answered(reply: Reply, deadline: &str) -> Value {
    let runtime = tokio::runtime::Handle::current();
    let provider = runtime.block_on(Scripted::start(vec![reply]));
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_BACKEND", "provider"),
            ("AGENT_AS_MODEL_PROVIDER_URL", &provider.url),
            ("AGENT_AS_MODEL_PROVIDER_MODEL", "m"),
            ("AGENT_AS_MODEL_PROVIDER_RETRIES", "0"),
            ("AGENT_AS_MODEL_PROVIDER_TIMEOUT_SECS", "2"),
            ("AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS", deadline),
        ],
        json!({}),
    );
    raw.send(&tools_call(
        json!(1),
        "generate",
        json!({"prompt": "count"}),
    ));
    let reply = raw
        .recv_id(&json!(1), Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no answer within 20 s: {}", raw.stderr()));
    reply["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_keeps_sending_is_read_past_the_timeout_within_its_deadline() {
    // Ten parts over five seconds, each within the 2 s timeout of the one before.
    let mut events: Vec<String> = (0..10).map(|i| chunk(Some(&format!("{i} ")))).collect();
    events.push(chunk(None));
    events.push("[DONE]".into());
    let result = tokio::task::block_in_place(|| generate_streamed(events, "600"));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["content"][0]["text"].as_str().unwrap().trim(),
        "0 1 2 3 4 5 6 7 8 9",
        "{result}"
    );
    // One that would stream for a minute is stopped at the deadline, which it names.
    let events: Vec<String> = (0..120).map(|_| chunk(Some("x"))).collect();
    let result = tokio::task::block_in_place(|| generate_streamed(events, "3"));
    assert_eq!(result["isError"], true, "{result}");
    let message = result["content"][0]["text"].as_str().unwrap();
    assert!(
        message.contains("after 3 s") && message.contains("AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS"),
        "{message}"
    );
}

/// The timeout counts complete events, not bytes: a provider that trickles one line that never
/// ends (a byte every 200 ms) is cut at the 2 s timeout, long before the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_trickles_one_endless_line_is_cut_at_the_timeout() {
    let result = tokio::task::block_in_place(|| generate_answered(Reply::Trickle, "600"));
    assert_eq!(result["isError"], true, "{result}");
    let message = result["content"][0]["text"].as_str().unwrap();
    assert!(
        message.contains("no complete event")
            && message.contains("AGENT_AS_MODEL_PROVIDER_TIMEOUT_SECS"),
        "{message}"
    );
}
