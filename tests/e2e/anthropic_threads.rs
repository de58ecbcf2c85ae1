//! Anthropic message threads (`thread` on `POST /v1/messages`, the beta
//! `message-threads-2026-08-12`), driven by the anthropic SDK's own tool runner
//! (`tests/e2e/api/anthropic_tool_runner.py`), which threads by default: its first request
//! creates the thread, its second continues it with the tool's result alone. The model is a
//! scripted OpenAI-compatible provider that calls `get_weather` and then answers with its
//! result; what it is sent on the second turn must be the whole conversation (the system prompt,
//! the question, the call and its result), rebuilt from the thread the server kept.
//!
//! And the errors the SDK recovers from: a continue whose thread is gone is `thread_not_found`
//! (the SDK replays the conversation under a new thread), a server that keeps nothing answers
//! `thread_unsupported_request` (the runner goes on without threads); a thread kept in Redis is
//! continued on another replica; a loaded thread counts against the request's JSON values.

use crate::api_sdks::{Server, TOKEN, folder, run_client};
use crate::common::openai::{Reply, Scripted, Seen, completion};
use crate::common::{peer, venv_bin};
use crate::http_api::post;
use crate::responses_store::{command, redis};
use serde_json::{Value, json};

const BETA: &str = "message-threads-2026-08-12";
/// The alias the client names for the provider that calls the tool, and for the other one.
const TOOL_MODEL: &str = "claude-sonnet-4-5";
const PLAIN_MODEL: &str = "claude-haiku-4-5";
const QUESTION: &str = "What is the weather in Paris, in celsius?";
/// What the tool returns, and the final answer that uses it.
const RESULT: &str = "Sunny, 21 degrees celsius in Paris.";
const FINAL: &str = "It is sunny in Paris: 21 degrees celsius.";

fn weather_call(n: usize) -> Reply {
    Reply::json(
        200,
        &json!({"id": "chatcmpl-tool", "object": "chat.completion", "created": 1,
                "model": "upstream-weather",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": null, "tool_calls": [
                                 {"id": format!("call_weather_{n}"), "type": "function",
                                  "function": {"name": "get_weather",
                                               "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}}),
    )
}

fn final_answer() -> Reply {
    Reply::json(200, &completion(FINAL))
}

/// The providers and the server whose models file names them (`env` set for the server).
struct Fixture {
    tool: Scripted,
    plain: Scripted,
    server: Server,
}

impl Fixture {
    async fn start(name: &str, script: Vec<Reply>, env: &[(&str, &str)]) -> Fixture {
        let tool = Scripted::start(script).await;
        let plain = Scripted::start(vec![Reply::json(200, &completion("Something."))]).await;
        let dir = folder(&format!("threads-{name}"));
        let args = models_file(&dir, &tool, &plain);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::with_env(&dir, &args, env).await;
        Fixture {
            tool,
            plain,
            server,
        }
    }

    /// The runner script's `cases`, their results.
    async fn run(&self, cases: &[&str]) -> Value {
        run_cases(&self.server, cases).await
    }
}

/// `--models FILE`, a file naming `tool` and `plain` by the client's aliases.
fn models_file(dir: &std::path::Path, tool: &Scripted, plain: &Scripted) -> [String; 2] {
    let entry = |name: &str, alias: &str, url: &str| {
        format!(
            "\n[[models]]\nname = \"{name}\"\naliases = [\"{alias}\"]\nbackend = \"provider\"\n\
             url = \"{url}\"\nmodel = \"upstream-{name}\"\nretries = 0\n"
        )
    };
    let file = format!(
        "default = \"weather\"\n{}{}",
        entry("weather", TOOL_MODEL, &tool.url),
        entry("plain", PLAIN_MODEL, &plain.url)
    );
    let path = dir.join("models.toml");
    std::fs::write(&path, file).unwrap();
    ["--models".into(), path.to_string_lossy().into_owned()]
}

async fn run_cases(server: &Server, cases: &[&str]) -> Value {
    let python = peer("AGENT_AS_MODEL_PYTHON", &venv_bin("python"));
    let name = "anthropic_tool_runner.py";
    let script = format!("{}/tests/e2e/api/{name}", env!("CARGO_MANIFEST_DIR"));
    let models = json!({"tool": TOOL_MODEL, "plain": PLAIN_MODEL});
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(&script)
        .args(["--base", &server.url, "--key", TOKEN])
        .args(["--models", &models.to_string()])
        .args(["--timeout", "60"])
        .args(cases);
    run_client(command, name, server, 180).await
}

/// A case's result (else a panic showing what the SDK raised).
fn ok<'a>(out: &'a Value, case: &str) -> &'a Value {
    crate::api_sdks::ok(out, case)
}

/// The runner's replies: the tool call, then the answer that used its result.
fn assert_round_trip(case: &str, v: &Value) {
    let replies = v["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 2, "{case}: {v:#}");
    assert_eq!(replies[0]["stop_reason"], "tool_use", "{case}: {v:#}");
    assert_eq!(replies[0]["tool_uses"][0]["name"], "get_weather", "{case}");
    assert_eq!(replies[1]["stop_reason"], "end_turn", "{case}: {v:#}");
    assert_eq!(replies[1]["text"], FINAL, "{case}: {v:#}");
    assert_eq!(
        v["calls"],
        json!([{"city": "Paris", "unit": "celsius"}]),
        "{case}"
    );
}

/// The SDK's requests: a create with the whole (first) turn, then a continue from the first
/// reply's id that carries the tool's result alone, without `system` or `tools`; both answered.
fn assert_create_then_continue(case: &str, v: &Value) {
    let exchanges = v["exchanges"].as_array().unwrap();
    assert_eq!(exchanges.len(), 2, "{case}: {v:#}");
    let (create, next) = (&exchanges[0], &exchanges[1]);
    for e in exchanges {
        assert_eq!(e["status"], 200, "{case}: {e:#}");
        assert!(
            e["beta"].as_str().is_some_and(|b| b.contains(BETA)),
            "{case}: {e:#}"
        );
    }
    assert_eq!(
        create["body"]["thread"],
        json!({"type": "create"}),
        "{case}"
    );
    assert!(create["body"]["tools"].is_array(), "{case}: {create:#}");
    let first_id = &v["replies"][0]["id"];
    assert_eq!(
        next["body"]["thread"],
        json!({"type": "continue", "previous_message_id": first_id}),
        "{case}: {next:#}"
    );
    let sent = next["body"]["messages"].as_array().unwrap();
    assert_eq!(sent.len(), 1, "only the new turn is sent: {next:#}");
    assert_eq!(sent[0]["content"][0]["type"], "tool_result", "{next:#}");
    assert!(next["body"].get("system").is_none(), "{next:#}");
    assert!(next["body"].get("tools").is_none(), "{next:#}");
}

/// What the provider was sent for the turn after the tool ran: the whole conversation, the
/// system prompt, the question, the call and its result, with the tool still offered.
fn assert_whole_conversation(seen: &Seen) {
    let body = &seen.body;
    let messages = body["messages"].as_array().unwrap();
    let with_role =
        |role: &str| -> Vec<&Value> { messages.iter().filter(|m| m["role"] == role).collect() };
    let system = with_role("system");
    assert!(
        system
            .first()
            .and_then(|m| m["content"].as_str())
            .is_some_and(|s| s.contains("weather questions")),
        "the thread's system prompt: {body:#}"
    );
    let user = with_role("user");
    assert_eq!(user.len(), 1, "{body:#}");
    assert!(
        user[0]["content"].to_string().contains(QUESTION),
        "{body:#}"
    );
    let assistant = with_role("assistant");
    assert_eq!(assistant.len(), 1, "{body:#}");
    let call = &assistant[0]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{body:#}");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({"city": "Paris", "unit": "celsius"}),
        "{body:#}"
    );
    let tool = with_role("tool");
    assert_eq!(tool.len(), 1, "{body:#}");
    assert_eq!(tool[0]["tool_call_id"], call["id"], "{body:#}");
    assert!(tool[0]["content"].to_string().contains(RESULT), "{body:#}");
    let order: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(order, ["system", "user", "assistant", "tool"], "{body:#}");
    assert_eq!(
        body["tools"][0]["function"]["name"], "get_weather",
        "{body:#}"
    );
}

#[tokio::test]
async fn the_sdks_tool_runner_continues_a_thread_with_the_tool_result_alone() {
    let script = vec![
        weather_call(1),
        final_answer(),
        weather_call(2),
        final_answer(),
    ];
    let f = Fixture::start("runner", script, &[]).await;
    let out = f.run(&["runner", "runner_stream"]).await;
    for case in ["runner", "runner_stream"] {
        let v = ok(&out, case);
        assert_round_trip(case, v);
        assert_create_then_continue(case, v);
    }
    let streamed = ok(&out, "runner_stream");
    let deltas: String = streamed["deltas"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(deltas, FINAL, "{streamed:#}");
    let seen = f.tool.seen();
    assert_eq!(seen.len(), 4, "{seen:#?}");
    for turn in [1, 3] {
        assert_whole_conversation(&seen[turn]);
    }
    for first in [0, 2] {
        let messages = seen[first].body["messages"].as_array().unwrap();
        assert_eq!(
            messages.len(),
            2,
            "system and question: {:#}",
            seen[first].body
        );
    }
    assert!(f.plain.seen().is_empty());
}

#[tokio::test]
async fn a_lost_thread_is_thread_not_found_and_the_sdk_replays_the_conversation() {
    // The store keeps one conversation: the tool's own thread evicts the runner's.
    let script = vec![weather_call(1), final_answer()];
    let env = [("AGENT_AS_MODEL_RESPONSES_MAX_ENTRIES", "1")];
    let f = Fixture::start("lost", script, &env).await;
    let out = f.run(&["lost", "recovers"]).await;
    let lost = ok(&out, "lost");
    assert_eq!(lost["status"], 404, "{lost:#}");
    assert_eq!(lost["class"], "ThreadNotFoundError", "{lost:#}");
    assert_eq!(lost["is_thread_not_found"], true, "{lost:#}");
    assert_eq!(lost["error_code"], "thread_not_found", "{lost:#}");
    assert_eq!(lost["body"]["type"], "error", "{lost:#}");
    assert_eq!(lost["body"]["error"]["type"], "not_found_error", "{lost:#}");
    assert_eq!(
        lost["body"]["error"]["details"],
        json!({"error_code": "thread_not_found"})
    );

    let v = ok(&out, "recovers");
    assert_round_trip("recovers", v);
    let exchanges = v["exchanges"].as_array().unwrap();
    let summary: Vec<(Value, Value, usize)> = exchanges
        .iter()
        .map(|e| {
            let sent = e["body"]["messages"].as_array().map_or(0, Vec::len);
            (
                e["body"]["thread"]["type"].clone(),
                e["status"].clone(),
                sent,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (json!("create"), json!(200), 1),
            (json!("continue"), json!(404), 1),
            (json!("create"), json!(200), 3),
        ],
        "create, continue of the lost thread, the whole conversation replayed: {v:#}"
    );
    let seen = f.tool.seen();
    assert_eq!(
        seen.len(),
        2,
        "the lost continue reached no model: {seen:#?}"
    );
    assert_whole_conversation(&seen[1]);
    assert_eq!(f.plain.seen().len(), 1, "the tool's own thread");
}

#[tokio::test]
async fn a_server_that_keeps_nothing_refuses_threads_and_the_runner_goes_on_without() {
    let script = vec![weather_call(1), final_answer()];
    let env = [("AGENT_AS_MODEL_RESPONSES_MAX_ENTRIES", "0")];
    let f = Fixture::start("unthreaded", script, &env).await;
    let out = f.run(&["runner"]).await;
    let v = ok(&out, "runner");
    assert_round_trip("runner", v);
    let exchanges = v["exchanges"].as_array().unwrap();
    assert_eq!(exchanges.len(), 3, "{v:#}");
    assert_eq!(exchanges[0]["status"], 400, "{v:#}");
    assert_eq!(exchanges[0]["body"]["thread"]["type"], "create", "{v:#}");
    for (e, sent) in exchanges[1..].iter().zip([1, 3]) {
        assert_eq!(e["status"], 200, "{e:#}");
        assert!(
            e["body"].get("thread").is_none(),
            "no thread any more: {e:#}"
        );
        assert_eq!(
            e["body"]["messages"].as_array().unwrap().len(),
            sent,
            "{e:#}"
        );
    }
    assert_whole_conversation(&f.tool.seen()[1]);
    // The refusal as the SDK reads it.
    let body = json!({"model": TOOL_MODEL, "max_tokens": 20, "thread": {"type": "create"},
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = post(&messages_url(&f.server), &headers(), &body).await;
    assert_eq!(status, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert_eq!(
        e["error"]["details"],
        json!({"error_code": "thread_unsupported_request"})
    );
}

fn messages_url(server: &Server) -> String {
    format!("{}/v1/messages", server.url)
}

fn headers() -> [(&'static str, &'static str); 3] {
    [
        ("x-api-key", TOKEN),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", BETA),
    ]
}

/// A thread created on one replica is kept in Redis and continued on another (whose provider
/// is sent the whole conversation); a continue naming `system` or `tools` other than the
/// thread's is refused with `thread_fingerprint_mismatch`.
#[tokio::test]
async fn a_thread_kept_in_redis_is_continued_on_another_replica() {
    let redis = redis().await;
    let script = vec![weather_call(1), final_answer()];
    let env = [("AGENT_AS_MODEL_RESPONSES_STORE", redis.url.as_str())];
    let f = Fixture::start("redis-a", script, &env).await;
    let dir = folder("threads-redis-b");
    let args = models_file(&dir, &f.tool, &f.plain);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let other = Server::with_env(&dir, &args, &env).await;
    let tools = json!([{"name": "get_weather", "description": "Weather for a city",
                        "input_schema": {"type": "object",
                                         "properties": {"city": {"type": "string"},
                                                        "unit": {"type": "string"}},
                                         "required": ["city", "unit"]}}]);
    let create = json!({"model": TOOL_MODEL, "max_tokens": 100, "thread": {"type": "create"},
                        "system": "You answer weather questions with the get_weather tool.",
                        "tools": tools, "messages": [{"role": "user", "content": QUESTION}]});
    let (status, _, text) = post(&messages_url(&f.server), &headers(), &create).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    let id = reply["id"].as_str().unwrap();
    let call = reply["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use: {reply}"));
    let key = format!("agent-as-model:response:thread:{id}");
    assert_eq!(command(redis.port, &["EXISTS", &key]).await.trim(), ":1");
    // The Responses routes share the store but find no response in a thread's key.
    let stored = format!("{}/v1/responses/thread:{id}", f.server.url);
    let client = crate::common::http_client();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = client
            .request(method.clone(), &stored)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} {stored}");
    }
    assert_eq!(command(redis.port, &["EXISTS", &key]).await.trim(), ":1");
    let result = json!([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call["id"], "content": RESULT}]}]);
    let thread = json!({"type": "continue", "previous_message_id": id});
    let changed = json!({"model": TOOL_MODEL, "max_tokens": 100, "thread": thread,
                         "system": "Something else.", "messages": result});
    let (status, _, text) = post(&messages_url(&other), &headers(), &changed).await;
    assert_eq!(status, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        e["error"]["details"]["error_code"],
        "thread_fingerprint_mismatch"
    );
    assert!(text.contains("`system`"), "{text}");
    let next = json!({"model": TOOL_MODEL, "max_tokens": 100, "thread": thread,
                      "messages": result, "stream": true});
    let (status, _, text) = post(&messages_url(&other), &headers(), &next).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    let seen = f.tool.seen();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_whole_conversation(&seen[1]);
}

/// The conversation a continue loads counts with its body against the JSON values one request
/// may hold: a thread that holds more than is left is refused with 413, before any model is
/// asked.
#[tokio::test]
async fn a_loaded_thread_counts_against_the_values_a_request_may_hold() {
    let script = vec![final_answer()];
    let env = [("AGENT_AS_MODEL_MAX_JSON_VALUES", "3000")];
    let f = Fixture::start("values", script, &env).await;
    let blocks: Vec<Value> = (0..400)
        .map(|i| json!({"type": "text", "text": format!("line {i}")}))
        .collect();
    let create = json!({"model": TOOL_MODEL, "max_tokens": 50, "thread": {"type": "create"},
                        "messages": [{"role": "user", "content": blocks}]});
    let (status, _, text) = post(&messages_url(&f.server), &headers(), &create).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    let next = json!({"model": TOOL_MODEL, "max_tokens": 50,
                      "thread": {"type": "continue", "previous_message_id": reply["id"]},
                      "messages": [{"role": "user", "content": blocks}]});
    let (status, _, text) = post(&messages_url(&f.server), &headers(), &next).await;
    assert_eq!(status, 413, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert!(text.contains("thread"), "{text}");
    assert_eq!(
        f.tool.seen().len(),
        1,
        "the refused continue reached no model"
    );
}
