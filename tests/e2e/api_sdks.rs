//! The model APIs over HTTP (`--http`, beside `/mcp`), driven by the official Python SDKs
//! (`openai`, `anthropic`, `google-genai`, installed into `target/peers/venv` by
//! `scripts/peers`, or those of the Python `AGENT_AS_MODEL_SDK_PYTHON` names) pointed at the real
//! binary, as their users point them at any base URL.
//!
//! The answers come from a models file whose four entries are scripted OpenAI-compatible
//! providers (`common::openai::Scripted`), each reached through an alias of the name each SDK's
//! users would write: `paris` answers whole JSON, `paris-live` the same sentence as a stream of
//! events, `weather` a call of the `get_weather` tool, `capital` a JSON object for structured
//! output. The Python clients (`tests/e2e/api/*_client.py`) print what the SDK handed them as
//! JSON; the assertions are here. One more test asks the embedded model through every SDK.

use crate::common::openai::{Reply, Scripted, Seen, completion};
use crate::common::{Killed, sdk_python};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub(crate) const TOKEN: &str = "sk-api-sdks-token-0123456789abcdef";
pub(crate) const QUESTION: &str = "What is the capital of France?";
/// What `paris` answers whole and `paris-live` in pieces.
pub(crate) const ANSWER: &str = "The capital of France is Paris.";
const PIECES: [&str; 4] = ["The capital", " of France", " is", " Paris."];
/// The models file's entry names, in order, and the role each plays in the clients.
const ENTRIES: [&str; 4] = ["paris", "paris-live", "weather", "capital"];
const ROLES: [&str; 4] = ["plain", "live", "tool", "json"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sdk {
    OpenAi,
    Anthropic,
    Genai,
}

const SDKS: [Sdk; 3] = [Sdk::OpenAi, Sdk::Anthropic, Sdk::Genai];

impl Sdk {
    fn script(self) -> &'static str {
        match self {
            Sdk::OpenAi => "openai_client.py",
            Sdk::Anthropic => "anthropic_client.py",
            Sdk::Genai => "genai_client.py",
        }
    }

    /// The alias this SDK's client uses for each entry of [`ENTRIES`].
    fn aliases(self) -> [&'static str; 4] {
        match self {
            Sdk::OpenAi => ["gpt-4o-mini", "gpt-4o", "gpt-4.1", "gpt-5"],
            Sdk::Anthropic => [
                "claude-haiku-4-5",
                "claude-sonnet-4-5",
                "claude-opus-4-1",
                "claude-opus-4-5",
            ],
            Sdk::Genai => [
                "gemini-2.5-flash",
                "gemini-2.5-pro",
                "gemini-2.5-flash-lite",
                "gemini-3-pro-preview",
            ],
        }
    }

    /// `{"plain": alias, "live": alias, …}`, the client's `--models`.
    fn models(self) -> Value {
        let map: serde_json::Map<String, Value> = ROLES
            .iter()
            .zip(self.aliases())
            .map(|(role, alias)| ((*role).to_owned(), json!(alias)))
            .collect();
        Value::Object(map)
    }
}

/// The server with `--http` on a free port and `--auth-token TOKEN`, its log in a file.
pub(crate) struct Server {
    child: Killed,
    pub(crate) url: String,
    log: PathBuf,
}

impl Server {
    pub(crate) async fn start(dir: &Path, args: &[&str]) -> Server {
        Server::with_env(dir, args, &[]).await
    }

    /// The server started with `env` set besides.
    pub(crate) async fn with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let log = dir.join("server.log");
        // The embedded model may be loaded before the listener opens: a generous bound.
        let server = crate::common::server::Server::new()
            .http_flag()
            .args(["--auth-token", TOKEN])
            .args(args)
            .envs(env)
            .log_level("info")
            .log_file(&log)
            .ready_within(Duration::from_secs(180))
            .http()
            .await;
        // The clients' port: the server's, or one that keeps what they send on the way to it.
        let url = format!(
            "http://127.0.0.1:{}",
            crate::common::requests::front(server.port).await
        );
        Server {
            child: server.child,
            url,
            log,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A server on the embedded model (`--backend local`, then `args`), started once the model
    /// is fetched, with the model's turn: bind both (`let (_turn, server)`), so that the server
    /// stops before the turn is given up.
    pub(crate) async fn local(
        dir: &Path,
        args: &[&str],
    ) -> (tokio::sync::MutexGuard<'static, ()>, Server) {
        let fetched = crate::local::first_try();
        assert!(
            fetched.status.success(),
            "the embedded model could not be fetched: {}",
            String::from_utf8_lossy(&fetched.stderr)
        );
        let turn = crate::local::TURN.lock().await;
        let args = [&["--backend", "local"][..], args].concat();
        (turn, Server::start(dir, &args).await)
    }
}

/// A fresh folder for one test's files.
pub(crate) fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-api-sdks-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `sdk`'s client against `server` with `cases`, bounded by `limit`; what it printed.
/// Each case's value is what the SDK returned, or `{"error": …}` for what it raised.
async fn run(sdk: Sdk, server: &Server, models: &Value, cases: &[&str], limit: u64) -> Value {
    run_script(sdk.script(), server, models, cases, limit).await
}

/// Runs the client `name` (a script of `tests/e2e/api`) as [`run`] does.
async fn run_script(
    name: &str,
    server: &Server,
    models: &Value,
    cases: &[&str],
    limit: u64,
) -> Value {
    let python = sdk_python();
    let script = format!("{}/tests/e2e/api/{name}", env!("CARGO_MANIFEST_DIR"));
    let per_request = (limit / 3).max(30);
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(&script)
        .args(["--base", &server.url, "--key", TOKEN])
        .args(["--models", &models.to_string()])
        .args(["--timeout", &per_request.to_string()])
        .args(cases);
    run_client(command, name, server, limit).await
}

/// Runs a client, bounded by `limit`, with nothing from the environment choosing a key, a
/// base URL or a proxy for it; its last line of output as JSON.
pub(crate) async fn run_client(
    mut command: tokio::process::Command,
    name: &str,
    server: &Server,
    limit: u64,
) -> Value {
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().unwrap_or_else(|e| {
        panic!("cannot start {name} ({e}): run scripts/peers, which installs the clients")
    });
    let output = tokio::time::timeout(Duration::from_secs(limit), child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{name} did not finish within {limit} s; server log:\n{}",
                server.log()
            )
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{name} failed ({}) — if a client is missing, run scripts/peers\nstdout: {stdout}\n\
         stderr: {stderr}\nserver log:\n{}",
        output.status,
        server.log()
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!("{name} printed no JSON ({e}):\nstdout: {stdout}\nstderr: {stderr}")
    })
}

/// A case that succeeded: its value (else a panic showing what the SDK raised).
pub(crate) fn ok<'a>(out: &'a Value, case: &str) -> &'a Value {
    let v = &out[case];
    assert!(
        v.is_object() && v.get("error").is_none(),
        "{case}: the SDK raised or returned nothing:\n{}",
        serde_json::to_string_pretty(v).unwrap()
    );
    v
}

/// The texts of a case's `chunks`.
fn chunks(v: &Value) -> Vec<&str> {
    v["chunks"]
        .as_array()
        .unwrap_or_else(|| panic!("no chunks in {v}"))
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect()
}

/// A streamed case: its chunks rebuild `text`, and there were more than one.
pub(crate) fn assert_streamed(case: &str, v: &Value, text: &str) {
    let pieces = chunks(v);
    assert_eq!(pieces.concat(), text, "{case}: {v}");
    assert!(pieces.len() > 1, "{case}: one chunk only: {v}");
}

/// The scripted providers and the server whose models file names them.
pub(crate) struct Fixture {
    pub(crate) plain: Scripted,
    pub(crate) live: Scripted,
    tool: Scripted,
    json: Scripted,
    server: Server,
}

fn chunk(delta: Value, finish: Value) -> String {
    json!({"id": "chatcmpl-live", "object": "chat.completion.chunk", "created": 1,
           "model": "upstream-live",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

/// `ANSWER` as a provider streams it: a role, the pieces, the finish, the usage, `[DONE]`.
fn streamed_answer() -> Reply {
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    events.extend(
        PIECES
            .iter()
            .map(|p| chunk(json!({"content": p}), Value::Null)),
    );
    events.push(chunk(json!({}), json!("stop")));
    events.push(
        json!({"id": "chatcmpl-live", "object": "chat.completion.chunk", "created": 1,
               "model": "upstream-live", "choices": [],
               "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}})
        .to_string(),
    );
    events.push("[DONE]".into());
    Reply::Events(events, Duration::from_millis(30))
}

fn weather_call() -> Value {
    json!({"id": "chatcmpl-tool", "object": "chat.completion", "created": 1,
           "model": "upstream-weather",
           "choices": [{"index": 0, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": null, "tool_calls": [
                            {"id": "call_weather_1", "type": "function",
                             "function": {"name": "get_weather",
                                          "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}}],
           "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}})
}

fn weather_args() -> Value {
    json!({"city": "Paris", "unit": "celsius"})
}

fn capital() -> Value {
    json!({"city": "Paris", "country": "France", "population_millions": 2.1,
           "landmarks": ["Eiffel Tower", "Louvre"]})
}

impl Fixture {
    pub(crate) async fn start(name: &str) -> Fixture {
        let plain = Scripted::start(vec![Reply::json(200, &completion(ANSWER))]).await;
        let live = Scripted::start(vec![streamed_answer()]).await;
        let tool = Scripted::start(vec![Reply::json(200, &weather_call())]).await;
        let json =
            Scripted::start(vec![Reply::json(200, &completion(&capital().to_string()))]).await;
        let mut file = String::from("default = \"paris\"\n");
        for (i, (entry, scripted)) in ENTRIES
            .iter()
            .zip([&plain, &live, &tool, &json])
            .enumerate()
        {
            let aliases: Vec<&str> = SDKS.iter().map(|s| s.aliases()[i]).collect();
            file.push_str(&format!(
                "\n[[models]]\nname = \"{entry}\"\naliases = {}\nbackend = \"provider\"\n\
                 url = \"{}\"\nmodel = \"upstream-{entry}\"\nretries = 0\n",
                json!(aliases),
                scripted.url
            ));
        }
        let dir = folder(name);
        let path = dir.join("models.toml");
        std::fs::write(&path, file).unwrap();
        let server = Server::start(&dir, &["--models", path.to_str().unwrap()]).await;
        Fixture {
            plain,
            live,
            tool,
            json,
            server,
        }
    }

    pub(crate) async fn run(&self, sdk: Sdk, cases: &[&str]) -> Value {
        run(sdk, &self.server, &sdk.models(), cases, 180).await
    }

    /// How many requests each provider has had, in [`ENTRIES`] order.
    fn upstream_counts(&self) -> [usize; 4] {
        [&self.plain, &self.live, &self.tool, &self.json].map(|s| s.seen().len())
    }
}

/// The text of the last message a provider was sent (a string, or text parts).
fn last_text(seen: &Seen) -> String {
    let last = seen.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// Every request a provider got names its upstream model and carries `question`.
fn assert_asked(provider: &Scripted, entry: &str, question: &str, count: usize) {
    let seen = provider.seen();
    let bodies: Vec<&Value> = seen.iter().map(|s| &s.body).collect();
    assert_eq!(seen.len(), count, "{entry}'s provider got: {bodies:#?}");
    for s in &seen {
        assert_eq!(s.body["model"], format!("upstream-{entry}"), "{}", s.body);
        assert_eq!(last_text(s), question, "{}", s.body);
    }
}

/// The weather tool reached the provider as a chat function, with the choice "required".
fn assert_tool_offered(provider: &Scripted, count: usize) {
    let seen = provider.seen();
    assert_eq!(seen.len(), count, "{seen:#?}");
    for s in &seen {
        let tool = &s.body["tools"][0];
        assert_eq!(tool["type"], "function", "{}", s.body);
        assert_eq!(tool["function"]["name"], "get_weather", "{}", s.body);
        let parameters = &tool["function"]["parameters"];
        assert_eq!(parameters["type"], "object", "{}", s.body);
        assert_eq!(
            parameters["properties"]["city"]["type"], "string",
            "{}",
            s.body
        );
        assert_eq!(
            parameters["properties"]["unit"]["enum"],
            json!(["celsius", "fahrenheit"]),
            "{}",
            s.body
        );
        assert_eq!(s.body["tool_choice"], "required", "{}", s.body);
    }
}

/// The Capital schema reached the provider as a chat `response_format` JSON Schema.
fn assert_schema_asked(provider: &Scripted, count: usize) {
    let seen = provider.seen();
    assert_eq!(seen.len(), count, "{seen:#?}");
    for s in &seen {
        let format = &s.body["response_format"];
        assert_eq!(
            format["type"], "json_schema",
            "the schema did not reach the provider as its response_format: {}",
            s.body
        );
        let schema = &format["json_schema"]["schema"];
        for (key, kind) in [
            ("city", "string"),
            ("country", "string"),
            ("population_millions", "number"),
            ("landmarks", "array"),
        ] {
            assert_eq!(schema["properties"][key]["type"], kind, "{key}: {schema}");
        }
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap_or_else(|| panic!("no required list: {schema}"))
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        required.sort_unstable();
        assert_eq!(
            required,
            ["city", "country", "landmarks", "population_millions"],
            "{schema}"
        );
    }
}

/// A case that raised `class` with HTTP `status`.
fn assert_raised<'a>(out: &'a Value, case: &str, class: &str, status: u16) -> &'a Value {
    let e = &out[case];
    assert_eq!(e["class"], class, "{case}: {e:#}");
    assert_eq!(e["status"], status, "{case}: {e:#}");
    e
}

/// An unknown model's error says the name it was given and the models there are.
fn assert_names_listed(case: &str, e: &Value) {
    let message = e["message"].as_str().unwrap_or_default();
    assert!(message.contains("no-such-model"), "{case}: {e:#}");
    for name in ENTRIES {
        assert!(message.contains(name), "{case} does not name {name}: {e:#}");
    }
}

/// The entries a model list shows, in its order (aliases, if listed, left out).
fn listed_entries(ids: &Value) -> Vec<String> {
    ids.as_array()
        .unwrap_or_else(|| panic!("not a list: {ids}"))
        .iter()
        .map(|id| {
            id.as_str()
                .unwrap()
                .trim_start_matches("models/")
                .to_owned()
        })
        .filter(|id| ENTRIES.contains(&id.as_str()))
        .collect()
}

// ---- openai ----------------------------------------------------------------------------

#[tokio::test]
async fn the_openai_sdk_gets_whole_and_streamed_answers_from_chat_and_responses() {
    let f = Fixture::start("openai-answers").await;
    let out = f
        .run(
            Sdk::OpenAi,
            &[
                "chat_plain",
                "chat_live",
                "chat_stream",
                "chat_stream_helper",
                "responses_plain",
                "responses_live",
                "responses_stream",
            ],
        )
        .await;
    let plain = ok(&out, "chat_plain");
    assert_eq!(plain["text"], ANSWER, "{plain}");
    assert_eq!(plain["role"], "assistant", "{plain}");
    assert_eq!(plain["finish_reason"], "stop", "{plain}");
    assert_eq!(plain["object"], "chat.completion", "{plain}");
    assert_eq!(plain["usage"]["prompt_tokens"], 11, "{plain}");
    assert_eq!(plain["usage"]["completion_tokens"], 4, "{plain}");
    let live = ok(&out, "chat_live");
    assert_eq!(live["text"], ANSWER, "{live}");
    assert_eq!(live["finish_reason"], "stop", "{live}");
    let stream = ok(&out, "chat_stream");
    assert_streamed("chat_stream", stream, ANSWER);
    assert_eq!(stream["roles"], json!(["assistant"]), "{stream}");
    assert_eq!(stream["finish_reason"], "stop", "{stream}");
    assert_eq!(
        stream["objects"],
        json!(["chat.completion.chunk"]),
        "{stream}"
    );
    assert_eq!(stream["usage"]["completion_tokens"], 4, "{stream}");
    let helper = ok(&out, "chat_stream_helper");
    assert_streamed("chat_stream_helper", helper, ANSWER);
    assert_eq!(helper["final_text"], ANSWER, "{helper}");
    assert_eq!(helper["finish_reason"], "stop", "{helper}");

    let plain = ok(&out, "responses_plain");
    assert_eq!(plain["text"], ANSWER, "{plain}");
    assert_eq!(plain["status"], "completed", "{plain}");
    assert_eq!(plain["object"], "response", "{plain}");
    assert_eq!(plain["output_types"], json!(["message"]), "{plain}");
    assert_eq!(plain["usage"]["input_tokens"], 11, "{plain}");
    assert_eq!(plain["usage"]["output_tokens"], 4, "{plain}");
    let live = ok(&out, "responses_live");
    assert_eq!(live["text"], ANSWER, "{live}");
    let stream = ok(&out, "responses_stream");
    assert_streamed("responses_stream", stream, ANSWER);
    assert_eq!(stream["final_text"], ANSWER, "{stream}");
    assert_eq!(stream["status"], "completed", "{stream}");
    let types = stream["event_types"].as_array().unwrap();
    for needed in [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_item.done",
        "response.completed",
    ] {
        assert!(types.contains(&json!(needed)), "no {needed}: {stream}");
    }
    assert_eq!(types.first(), Some(&json!("response.created")), "{stream}");
    assert_eq!(types.last(), Some(&json!("response.completed")), "{stream}");

    assert_asked(&f.plain, "paris", QUESTION, 2);
    assert_asked(&f.live, "paris-live", QUESTION, 5);
}

#[tokio::test]
async fn the_openai_sdk_gets_tool_calls_whole_and_streamed() {
    let f = Fixture::start("openai-tools").await;
    let out = f
        .run(
            Sdk::OpenAi,
            &["chat_tool", "chat_tool_stream", "responses_tool"],
        )
        .await;
    for case in ["chat_tool", "chat_tool_stream"] {
        let v = ok(&out, case);
        let calls = v["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{case}: {v}");
        assert_eq!(calls[0]["type"], "function", "{case}: {v}");
        assert_eq!(calls[0]["name"], "get_weather", "{case}: {v}");
        assert_eq!(calls[0]["arguments"], weather_args(), "{case}: {v}");
        assert!(
            calls[0]["id"].as_str().is_some_and(|id| !id.is_empty()),
            "{case}: {v}"
        );
        assert_eq!(v["finish_reason"], "tool_calls", "{case}: {v}");
    }
    let streamed = ok(&out, "chat_tool_stream");
    assert_eq!(
        streamed["arguments_done"],
        json!([{"name": "get_weather", "arguments": weather_args()}]),
        "{streamed}"
    );
    let responses = ok(&out, "responses_tool");
    let calls = responses["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{responses}");
    assert_eq!(calls[0]["name"], "get_weather", "{responses}");
    assert_eq!(calls[0]["arguments"], weather_args(), "{responses}");
    assert!(
        calls[0]["call_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{responses}"
    );
    assert_eq!(
        responses["output_types"],
        json!(["function_call"]),
        "{responses}"
    );
    assert_eq!(responses["status"], "completed", "{responses}");

    assert_tool_offered(&f.tool, 3);
}

#[tokio::test]
async fn the_openai_sdk_parses_structured_output_from_chat_and_responses() {
    let f = Fixture::start("openai-structured").await;
    let out = f.run(Sdk::OpenAi, &["chat_parse", "responses_parse"]).await;
    let parsed = ok(&out, "chat_parse");
    assert_eq!(parsed["parsed"], capital(), "{parsed}");
    assert_eq!(parsed["refusal"], Value::Null, "{parsed}");
    assert_eq!(parsed["finish_reason"], "stop", "{parsed}");
    let parsed = ok(&out, "responses_parse");
    assert_eq!(parsed["parsed"], capital(), "{parsed}");
    assert_eq!(parsed["status"], "completed", "{parsed}");

    assert_schema_asked(&f.json, 2);
}

#[tokio::test]
async fn the_openai_sdk_lists_the_models_and_raises_not_found_and_authentication_errors() {
    let f = Fixture::start("openai-errors").await;
    let out = f
        .run(
            Sdk::OpenAi,
            &[
                "models",
                "unknown_model_chat",
                "unknown_model_responses",
                "wrong_key_chat",
                "wrong_key_models",
            ],
        )
        .await;
    let models = ok(&out, "models");
    assert_eq!(listed_entries(&models["ids"]), ENTRIES, "{models}");
    assert_eq!(models["objects"], json!(["model"]), "{models}");
    for case in ["unknown_model_chat", "unknown_model_responses"] {
        let e = assert_raised(&out, case, "NotFoundError", 404);
        assert_names_listed(case, e);
        assert_eq!(e["body"]["code"], "model_not_found", "{case}: {e:#}");
    }
    for case in ["wrong_key_chat", "wrong_key_models"] {
        assert_raised(&out, case, "AuthenticationError", 401);
    }
    assert_eq!(f.upstream_counts(), [0; 4], "no provider was asked");
}

// ---- anthropic -------------------------------------------------------------------------

#[tokio::test]
async fn the_anthropic_sdk_gets_whole_and_streamed_messages() {
    let f = Fixture::start("anthropic-answers").await;
    let out = f
        .run(
            Sdk::Anthropic,
            &["plain", "plain_bearer", "live", "stream", "stream_raw"],
        )
        .await;
    for case in ["plain", "plain_bearer"] {
        let v = ok(&out, case);
        assert_eq!(v["text"], ANSWER, "{case}: {v}");
        assert_eq!(v["block_types"], json!(["text"]), "{case}: {v}");
        assert_eq!(v["stop_reason"], "end_turn", "{case}: {v}");
        assert_eq!(v["type"], "message", "{case}: {v}");
        assert_eq!(v["role"], "assistant", "{case}: {v}");
        assert_eq!(v["usage"]["input_tokens"], 11, "{case}: {v}");
        assert_eq!(v["usage"]["output_tokens"], 4, "{case}: {v}");
    }
    let live = ok(&out, "live");
    assert_eq!(live["text"], ANSWER, "{live}");
    assert_eq!(live["stop_reason"], "end_turn", "{live}");
    let stream = ok(&out, "stream");
    assert_streamed("stream", stream, ANSWER);
    assert_eq!(stream["final_text"], ANSWER, "{stream}");
    assert_eq!(stream["stop_reason"], "end_turn", "{stream}");
    assert_eq!(stream["usage"]["output_tokens"], 4, "{stream}");
    let raw = ok(&out, "stream_raw");
    assert_streamed("stream_raw", raw, ANSWER);
    assert_eq!(raw["stop_reason"], "end_turn", "{raw}");
    let types: Vec<&str> = raw["event_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .filter(|t| *t != "ping")
        .collect();
    assert_eq!(types.first(), Some(&"message_start"), "{raw}");
    assert_eq!(types.get(1), Some(&"content_block_start"), "{raw}");
    assert_eq!(
        &types[types.len().saturating_sub(3)..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{raw}"
    );

    assert_asked(&f.plain, "paris", QUESTION, 2);
    assert_asked(&f.live, "paris-live", QUESTION, 3);
}

#[tokio::test]
async fn the_anthropic_sdk_gets_tool_use_whole_and_streamed() {
    let f = Fixture::start("anthropic-tools").await;
    let out = f.run(Sdk::Anthropic, &["tool", "tool_stream"]).await;
    for case in ["tool", "tool_stream"] {
        let v = ok(&out, case);
        let uses = v["tool_uses"].as_array().unwrap();
        assert_eq!(uses.len(), 1, "{case}: {v}");
        assert_eq!(uses[0]["name"], "get_weather", "{case}: {v}");
        assert_eq!(uses[0]["input"], weather_args(), "{case}: {v}");
        assert!(
            uses[0]["id"].as_str().is_some_and(|id| !id.is_empty()),
            "{case}: {v}"
        );
        assert_eq!(v["stop_reason"], "tool_use", "{case}: {v}");
    }
    let streamed = ok(&out, "tool_stream");
    let partial: String = streamed["partial_json"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).ok(),
        Some(weather_args()),
        "the input_json deltas rebuild the input: {streamed}"
    );

    assert_tool_offered(&f.tool, 2);
}

/// `messages.parse(output_format=…)` and `output_config.format` both travel as
/// `output_config: {format: {type: json_schema, schema}}`: the schema must constrain the answer
/// (reach the provider as its `response_format`), not only be checked afterwards.
#[tokio::test]
async fn the_anthropic_sdk_parses_structured_output_asked_with_output_config() {
    let f = Fixture::start("anthropic-structured").await;
    let out = f.run(Sdk::Anthropic, &["parse", "output_config"]).await;
    let parsed = ok(&out, "parse");
    assert_eq!(parsed["parsed"], capital(), "{parsed}");
    assert_eq!(parsed["stop_reason"], "end_turn", "{parsed}");
    let format = ok(&out, "output_config");
    assert_eq!(format["json"], capital(), "{format}");

    assert_schema_asked(&f.json, 2);
}

/// Claude Code's history after a tool call: `thinking` and `redacted_thinking` blocks beside the
/// `tool_use`, and a user message holding the `tool_result` and then text. Both the answer and the
/// count take it; the provider gets the call, its result and the text as a user turn after it,
/// and none of the reasoning.
#[tokio::test]
async fn the_anthropic_sdk_sends_claude_codes_thinking_history_and_results_followed_by_text() {
    let f = Fixture::start("anthropic-history").await;
    let out = f.run(Sdk::Anthropic, &["claude_code_history"]).await;
    let v = ok(&out, "claude_code_history");
    assert_eq!(v["text"], ANSWER, "{v}");
    assert!(v["counted"].as_u64().is_some_and(|n| n > 0), "{v}");
    let seen = f.plain.seen();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let messages = seen[0].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "user"],
        "{messages:#?}"
    );
    assert_eq!(messages[1]["tool_calls"][0]["id"], "toolu_01");
    assert_eq!(messages[2]["tool_call_id"], "toolu_01");
    assert!(messages[2]["content"].to_string().contains("21C and sunny"));
    assert_eq!(
        messages[3]["content"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| messages[3]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()),
        "Now answer the first question."
    );
    let body = seen[0].body.to_string();
    assert!(
        !body.contains("The user wants the weather") && !body.contains("ZW5jcnlwdGVk"),
        "no reasoning reaches the provider: {body}"
    );
}

#[tokio::test]
async fn the_anthropic_sdk_counts_the_tokens_of_messages_and_tools() {
    let f = Fixture::start("anthropic-tokens").await;
    let out = f.run(Sdk::Anthropic, &["count_tokens"]).await;
    let counted = ok(&out, "count_tokens");
    let n = |k: &str| {
        counted[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {counted}"))
    };
    assert!(n("short") > 0, "{counted}");
    assert!(
        n("long") > n("short"),
        "a longer message counts more: {counted}"
    );
    assert!(
        n("with_tools") > n("short"),
        "the tools' definitions count too: {counted}"
    );
    assert_eq!(f.upstream_counts(), [0; 4], "counting asks no provider");
}

#[tokio::test]
async fn the_anthropic_sdk_lists_the_models_and_raises_not_found_and_authentication_errors() {
    let f = Fixture::start("anthropic-errors").await;
    let out = f
        .run(
            Sdk::Anthropic,
            &[
                "models",
                "unknown_model",
                "wrong_key",
                "wrong_bearer",
                "wrong_key_models",
            ],
        )
        .await;
    let models = ok(&out, "models");
    assert_eq!(listed_entries(&models["ids"]), ENTRIES, "{models}");
    assert_eq!(models["types"], json!(["model"]), "{models}");
    let e = assert_raised(&out, "unknown_model", "NotFoundError", 404);
    assert_names_listed("unknown_model", e);
    assert_eq!(e["body"]["type"], "error", "{e:#}");
    assert_eq!(e["body"]["error"]["type"], "not_found_error", "{e:#}");
    for case in ["wrong_key", "wrong_bearer", "wrong_key_models"] {
        let e = assert_raised(&out, case, "AuthenticationError", 401);
        assert_eq!(
            e["body"]["error"]["type"], "authentication_error",
            "{case}: {e:#}"
        );
    }
    assert_eq!(f.upstream_counts(), [0; 4], "no provider was asked");
}

// ---- google-genai ----------------------------------------------------------------------

#[tokio::test]
async fn the_genai_sdk_gets_whole_and_streamed_content() {
    let f = Fixture::start("genai-answers").await;
    let out = f.run(Sdk::Genai, &["plain", "live", "stream"]).await;
    let plain = ok(&out, "plain");
    assert_eq!(plain["text"], ANSWER, "{plain}");
    assert_eq!(plain["finish_reason"], "STOP", "{plain}");
    assert_eq!(plain["role"], "model", "{plain}");
    assert_eq!(plain["usage"]["prompt_token_count"], 11, "{plain}");
    assert_eq!(plain["usage"]["candidates_token_count"], 4, "{plain}");
    let live = ok(&out, "live");
    assert_eq!(live["text"], ANSWER, "{live}");
    let stream = ok(&out, "stream");
    assert_streamed("stream", stream, ANSWER);
    assert_eq!(stream["finish_reason"], "STOP", "{stream}");

    assert_asked(&f.plain, "paris", QUESTION, 1);
    assert_asked(&f.live, "paris-live", QUESTION, 2);
}

#[tokio::test]
async fn the_genai_sdk_gets_function_calls_whole_and_streamed() {
    let f = Fixture::start("genai-tools").await;
    let out = f
        .run(Sdk::Genai, &["tool", "tool_stream", "tool_json_schema"])
        .await;
    for case in ["tool", "tool_stream", "tool_json_schema"] {
        let v = ok(&out, case);
        assert_eq!(
            v["function_calls"],
            json!([{"name": "get_weather", "args": weather_args()}]),
            "{case}: {v}"
        );
        assert_eq!(v["finish_reason"], "STOP", "{case}: {v}");
    }
    // Gemini's uppercase schema, and the JSON Schema the SDK sends as `parameters_json_schema`,
    // reached the provider as JSON Schema.
    assert_tool_offered(&f.tool, 3);
}

#[tokio::test]
async fn the_genai_sdk_parses_structured_output_from_response_schema_and_json_schema() {
    let f = Fixture::start("genai-structured").await;
    let out = f.run(Sdk::Genai, &["schema", "json_schema"]).await;
    let schema = ok(&out, "schema");
    assert_eq!(schema["parsed_type"], "Capital", "{schema}");
    assert_eq!(schema["parsed"], capital(), "{schema}");
    let json_schema = ok(&out, "json_schema");
    assert_eq!(json_schema["json"], capital(), "{json_schema}");

    // responseSchema (uppercase types) and responseJsonSchema both reached it as JSON Schema.
    assert_schema_asked(&f.json, 2);
}

#[tokio::test]
async fn the_genai_sdk_counts_tokens() {
    let f = Fixture::start("genai-tokens").await;
    let out = f.run(Sdk::Genai, &["count_tokens"]).await;
    let counted = ok(&out, "count_tokens");
    let n = |k: &str| {
        counted[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {counted}"))
    };
    assert!(n("short") > 0, "{counted}");
    assert!(
        n("long") > n("short"),
        "a longer text counts more: {counted}"
    );
    assert_eq!(f.upstream_counts(), [0; 4], "counting asks no provider");
}

#[tokio::test]
async fn the_genai_sdk_lists_the_models_and_raises_not_found_and_unauthenticated() {
    let f = Fixture::start("genai-errors").await;
    let out = f
        .run(
            Sdk::Genai,
            &[
                "models",
                "unknown_model",
                "unknown_model_stream",
                "wrong_key",
                "wrong_key_models",
            ],
        )
        .await;
    let models = ok(&out, "models");
    assert_eq!(listed_entries(&models["names"]), ENTRIES, "{models}");
    for name in models["names"].as_array().unwrap() {
        assert!(
            name.as_str().unwrap().starts_with("models/"),
            "Gemini names models as models/NAME: {models}"
        );
    }
    for case in ["unknown_model", "unknown_model_stream"] {
        let e = assert_raised(&out, case, "ClientError", 404);
        assert_eq!(e["api_status"], "NOT_FOUND", "{case}: {e:#}");
        assert_names_listed(case, e);
    }
    for case in ["wrong_key", "wrong_key_models"] {
        let e = assert_raised(&out, case, "ClientError", 401);
        assert_eq!(e["api_status"], "UNAUTHENTICATED", "{case}: {e:#}");
    }
    assert_eq!(f.upstream_counts(), [0; 4], "no provider was asked");
}

// ---- the embedded model ----------------------------------------------------------------

#[tokio::test]
async fn every_sdk_is_answered_by_the_embedded_model_whole_and_streamed() {
    let (_turn, server) = Server::local(&folder("local"), &[]).await;
    for sdk in SDKS {
        let models = json!({"local": sdk.aliases()[0]});
        let out = run(
            sdk,
            &server,
            &models,
            &["local_answer", "local_stream"],
            600,
        )
        .await;
        let answer = ok(&out, "local_answer");
        let text = answer["text"].as_str().unwrap_or_default();
        assert!(text.to_lowercase().contains("paris"), "{sdk:?}: {answer}");
        let stream = ok(&out, "local_stream");
        let pieces = chunks(stream);
        assert!(pieces.len() > 1, "{sdk:?}: one chunk only: {stream}");
        assert!(
            pieces.concat().to_lowercase().contains("paris"),
            "{sdk:?}: {stream}"
        );
    }
}

/// A vector's numbers (panics on anything else).
fn vector(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a vector: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Equal within float rounding (vectors made by the same model from the same text, decoded
/// from JSON or base64).
fn assert_same(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-5, "{what}: differ by {worst}");
}

/// Embeddings from the embedded model through the openai SDK (base64 by default, floats,
/// `dimensions`), the google-genai SDK (`embed_content`, one and a batch, with
/// `output_dimensionality`) and the `ollama` client (`embed`, the legacy `embeddings`, a long
/// text truncated or refused): every vector has length 1, identical text gives identical
/// vectors across the APIs, different text a different one, and the shortened vectors are the
/// full one's first dimensions, normalized again.
#[tokio::test]
async fn embeddings_come_from_the_embedded_model_through_every_sdk() {
    // A context of 1,024 tokens: the texts the model embeds at once are as long at most.
    let (_turn, server) = Server::local(&folder("embeddings"), &["--local-context", "1024"]).await;
    let models = json!({"local": "text-embedding-3-small"});
    let openai = run(Sdk::OpenAi, &server, &models, &["embeddings"], 600).await;
    let o = ok(&openai, "embeddings");
    let vectors: Vec<Vec<f64>> = o["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(vector)
        .collect();
    assert_eq!(vectors.len(), 3, "{o}");
    assert_eq!(o["indexes"], json!([0, 1, 2]));
    assert_eq!(o["model"], "qwen2.5-coder-0.5b-instruct");
    let dims = vectors[0].len();
    assert!(dims >= 256, "{dims} dimensions");
    for v in &vectors {
        assert!((dot(v, v) - 1.0).abs() < 1e-3, "not of length 1");
    }
    assert_same(&vectors[0], &vectors[1], "identical text");
    let unlike = dot(&vectors[0], &vectors[2]);
    assert!(unlike < 0.999, "different texts gave one vector ({unlike})");
    let tokens = o["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!((12..100).contains(&tokens), "{o}");
    assert_eq!(o["usage"]["total_tokens"], tokens);
    assert_same(&vector(&o["float"]), &vectors[0], "float and base64");
    let short = vector(&o["short"]);
    assert_eq!(short.len(), 32);
    let head: Vec<f64> = vectors[0][..32].to_vec();
    let norm = dot(&head, &head).sqrt();
    let renormalized: Vec<f64> = head.iter().map(|x| x / norm).collect();
    assert_same(
        &short,
        &renormalized,
        "dimensions: the first 32, normalized",
    );
    let too_long = &o["too_long"];
    assert_eq!(too_long["status"], 400, "{too_long}");
    let message = too_long["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("input[1]") && message.contains("tokens"),
        "{message}"
    );

    let models = json!({"local": "gemini-embedding-001"});
    let genai = run(Sdk::Genai, &server, &models, &["embeddings"], 600).await;
    let g = ok(&genai, "embeddings");
    assert_same(&vector(&g["one"]), &vectors[0], "genai, one text");
    let batch: Vec<Vec<f64>> = g["batch"].as_array().unwrap().iter().map(vector).collect();
    assert_eq!(batch.len(), 3);
    for (theirs, ours) in batch.iter().zip(&vectors) {
        assert_same(theirs, ours, "genai, a batch");
    }
    assert_same(&vector(&g["short"]), &short, "genai, output_dimensionality");

    let models = json!({"local": "qwen2.5-coder-0.5b-instruct"});
    let ollama = run_script("ollama_embed.py", &server, &models, &["embeddings"], 900).await;
    let l = ok(&ollama, "embeddings");
    let theirs: Vec<Vec<f64>> = l["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(vector)
        .collect();
    for (theirs, ours) in theirs.iter().zip(&vectors) {
        assert_same(theirs, ours, "ollama embed");
    }
    assert_eq!(l["prompt_eval_count"], tokens);
    assert!(l["total_duration"].as_u64().unwrap() > 0);
    assert_same(&vector(&l["short"]), &short, "ollama, dimensions");
    assert_same(
        &vector(&l["legacy"]),
        &vectors[0],
        "ollama, legacy embeddings",
    );
    // A text longer than the model embeds at once is cut to fit; refused when asked not to.
    assert_eq!(l["long_tokens"], 1024, "{l}");
    assert_eq!(l["long_dims"], dims);
    let refused = &l["refused"];
    assert_eq!(refused["status"], 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("input"),
        "{refused}"
    );
}

/// The messages a provider was sent, as `role: text` lines (tool calls and results by id).
fn conversation(seen: &Seen) -> Vec<String> {
    seen.body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages: {}", seen.body))
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => String::new(),
            };
            format!("{}: {text}", m["role"].as_str().unwrap_or("?"))
        })
        .collect()
}

/// The openai SDK keeps a Responses conversation by `previous_response_id`, whole and streamed:
/// each provider is sent the turns before (the earlier answers as assistant turns); the stored
/// response is retrieved; a deleted one is gone (404) and cannot be continued (400,
/// `previous_response_not_found`).
#[tokio::test]
async fn the_openai_sdk_continues_a_responses_conversation_by_previous_response_id() {
    let f = Fixture::start("conversation").await;
    let out = f.run(Sdk::OpenAi, &["responses_conversation"]).await;
    let v = ok(&out, "responses_conversation");
    let ids: Vec<&str> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    assert!(ids.iter().all(|id| id.starts_with("resp_")), "{v:#}");
    assert!(
        v["item_ids"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i.as_str().unwrap().starts_with("msg_")),
        "{v:#}"
    );
    assert_eq!(v["second_text"], ANSWER, "{v:#}");
    assert_eq!(v["second_previous"], ids[0], "{v:#}");
    assert_eq!(v["final_text"], ANSWER, "{v:#}");
    assert_eq!(v["final_previous"], ids[1], "{v:#}");
    assert_eq!(v["final_status"], "completed", "{v:#}");
    assert_eq!(
        v["retrieved"],
        json!({"id": ids[1], "text": ANSWER, "status": "completed"})
    );
    let events: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"response.created"), "{v:#}");
    assert_eq!(events.last(), Some(&"response.completed"), "{v:#}");
    assert_eq!(v["gone"], 404, "{v:#}");
    assert_eq!(
        v["refused"],
        json!({"status": 400, "code": "previous_response_not_found",
               "param": "previous_response_id"})
    );
    // What the providers were sent: every earlier turn, the answers as the assistant's.
    let plain = f.plain.seen();
    assert_eq!(plain.len(), 2, "{plain:#?}");
    assert_eq!(conversation(&plain[0]), ["user: My name is Ada."]);
    assert_eq!(
        conversation(&plain[1]),
        [
            "user: My name is Ada.".to_owned(),
            format!("assistant: {ANSWER}"),
            format!("user: {QUESTION}")
        ]
    );
    let live = f.live.seen();
    assert_eq!(live.len(), 1, "{live:#?}");
    assert_eq!(
        conversation(&live[0]),
        [
            "user: My name is Ada.".to_owned(),
            format!("assistant: {ANSWER}"),
            format!("user: {QUESTION}"),
            format!("assistant: {ANSWER}"),
            "user: And of Italy?".to_owned()
        ]
    );
}
