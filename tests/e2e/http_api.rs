//! The model APIs over plain HTTP, driven with raw requests: the token in every spelling the
//! clients use and each API's 401 envelope, the answer a server with only the host's sampling
//! gives, a hosted tool left out with a warning header, Gemini's JSON-array stream, a stop
//! sequence that never reaches a stream even when it arrives in pieces, a tool call whose
//! arguments reach the client in pieces while the provider (or the embedded model) is still
//! making them, a client that goes away stopping the provider's request, and the embedded
//! model's exact token counts.

use crate::common::http_client;
use crate::common::openai::{Reply, Scripted, completion};
use crate::http::{Replica, start};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "api-test-token";

/// A models file with one provider entry, `scripted` (alias `gpt-4o-mini`), at `provider`.
pub fn models_file(name: &str, provider: &Scripted) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-http-api-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    let text = format!(
        "[[models]]\nname = \"scripted\"\naliases = [\"gpt-4o-mini\", \"gemini-2.5-flash\"]\n\
         backend = \"provider\"\nurl = \"{}\"\nmodel = \"upstream\"\nretries = 0\n",
        provider.url
    );
    std::fs::write(&path, text).unwrap();
    path
}

pub async fn server(name: &str, provider: &Scripted) -> Replica {
    server_with(name, provider, "", &[]).await
}

/// A server whose one provider entry has the settings `more` (TOML lines) besides, started with
/// the variables `env` too.
pub async fn server_with(
    name: &str,
    provider: &Scripted,
    more: &str,
    env: &[(&str, &str)],
) -> Replica {
    let path = models_file(name, provider);
    let file = std::fs::read_to_string(&path).unwrap() + more;
    std::fs::write(&path, file).unwrap();
    let mut all = vec![
        ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ];
    all.extend_from_slice(env);
    start(&all).await
}

pub async fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = http_client()
        .post(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

pub fn chat_body() -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Capital of France?"}]})
}

/// The `data:` payloads of an event stream.
pub fn data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// An OpenAI chat-completion chunk carrying `text`.
pub fn text_chunk(text: &str) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
           "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    .to_string()
}

/// The response to `body` at `url` (with the token), its body not read yet.
pub async fn open_stream(url: &str, body: &Value) -> reqwest::Response {
    http_client()
        .post(url)
        .header("x-api-key", TOKEN)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// A server answered by the embedded model (fetched once), with the model's turn held.
pub async fn embedded(env: &[(&str, &str)]) -> (tokio::sync::MutexGuard<'static, ()>, Replica) {
    let fetched = crate::local::first_try();
    assert!(
        fetched.status.success(),
        "the embedded model could not be fetched"
    );
    let turn = crate::local::TURN.lock().await;
    let mut env = env.to_vec();
    env.push(("AGENT_AS_MODEL_BACKEND", "local"));
    (turn, start(&env).await)
}

#[tokio::test]
async fn the_token_is_taken_in_every_spelling_and_a_missing_one_is_refused_in_each_envelope() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server("auth", &provider).await;
    let chat = format!("{}/v1/chat/completions", s.url);
    let bearer = format!("Bearer {TOKEN}");
    for headers in [
        vec![("authorization", bearer.as_str())],
        vec![("x-api-key", TOKEN)],
        vec![("x-goog-api-key", TOKEN)],
    ] {
        let (status, _, body) = post(&chat, &headers, &chat_body()).await;
        assert_eq!(status, 200, "{headers:?}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Paris.");
    }
    let (status, _, _) = post(&format!("{chat}?key={TOKEN}"), &[], &chat_body()).await;
    assert_eq!(status, 200);

    let (status, _, body) = post(&chat, &[("x-api-key", "wrong")], &chat_body()).await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    let messages = json!({"model": "gpt-4o-mini", "max_tokens": 10,
                          "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, body) = post(&format!("{}/v1/messages", s.url), &[], &messages).await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("authentication_error"))
    );
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let url = format!("{}/v1beta/models/gemini-2.5-flash:generateContent", s.url);
    let (status, _, body) = post(&url, &[], &gemini).await;
    assert_eq!(status, 401);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["status"], "UNAUTHENTICATED", "{v}");
    // Nothing refused reached the provider.
    assert_eq!(provider.seen().len(), 4);
}

/// `?key=` is read as a form decodes it (percent-escapes and `+`), and any `key` of the query
/// that is the token lets the request in, not only the first.
#[tokio::test]
async fn a_query_key_is_percent_decoded_and_any_of_several_may_match() {
    let token = "tok/en+with=odd&chars é";
    let provider = Scripted::start(vec![
        Reply::json(200, &completion("one")),
        Reply::json(200, &completion("two")),
        Reply::json(200, &completion("three")),
    ])
    .await;
    let s = server_with(
        "query-key",
        &provider,
        "",
        &[("AGENT_AS_MODEL_AUTH_TOKEN", token)],
    )
    .await;
    let chat = format!("{}/v1/chat/completions", s.url);
    let encoded = "tok%2Fen%2Bwith%3Dodd%26chars%20%C3%A9";
    for query in [
        format!("key={encoded}"),
        format!("key=wrong&key={encoded}"),
        format!("alt=sse&key=nope&key={}", encoded.replace("%20", "+")),
    ] {
        let (status, _, body) = post(&format!("{chat}?{query}"), &[], &chat_body()).await;
        assert_eq!(status, 200, "?{query}: {body}");
    }
    for query in ["key=wrong", "key=wrong&key=also-wrong", "key=tok/en"] {
        let (status, _, body) = post(&format!("{chat}?{query}"), &[], &chat_body()).await;
        assert_eq!(status, 401, "?{query}: {body}");
    }
    assert_eq!(provider.seen().len(), 3);
}

/// Anthropic `role: "system"` messages, moved into `system`, still count against the message
/// limit: a flood of them is refused, not folded into one huge system prompt.
#[tokio::test]
async fn system_messages_count_against_the_message_limit() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("fine"))]).await;
    let s = server_with(
        "system-flood",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_MESSAGES", "4")],
    )
    .await;
    let url = format!("{}/v1/messages", s.url);
    let with_system = |n: usize| {
        let mut messages = vec![json!({"role": "system", "content": "Be brief."}); n];
        messages.push(json!({"role": "user", "content": "hi"}));
        json!({"model": "gpt-4o-mini", "max_tokens": 10, "messages": messages})
    };
    let (status, _, body) = post(&url, &[("x-api-key", TOKEN)], &with_system(10)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("AGENT_AS_MODEL_MAX_MESSAGES"), "{body}");
    assert!(body.contains("11 messages"), "{body}");
    let (status, _, body) = post(&url, &[("x-api-key", TOKEN)], &with_system(3)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(provider.seen().len(), 1);
}

#[tokio::test]
async fn with_only_the_hosts_sampling_the_apis_say_they_need_a_direct_backend() {
    let s = start(&[]).await;
    let (status, _, body) =
        post(&format!("{}/v1/chat/completions", s.url), &[], &chat_body()).await;
    assert_eq!(status, 501, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("local or provider backend"), "{message}");
}

#[tokio::test]
async fn a_hosted_tool_is_left_out_with_a_warning_and_namespace_tools_are_offered() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server("hosted", &provider).await;
    let body = json!({"model": "gpt-4o-mini", "input": "Capital of France?", "tools": [
        {"type": "web_search"},
        {"type": "namespace", "name": "ns", "tools": [
            {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]}]});
    let bearer = format!("Bearer {TOKEN}");
    let (status, headers, text) = post(
        &format!("{}/v1/responses", s.url),
        &[("authorization", &bearer)],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let warning = headers["x-agent-as-model-warnings"].to_str().unwrap();
    assert!(warning.contains("web_search"), "{warning}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], "Paris.");
    let sent = &provider.seen()[0].body;
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    // The bare name (its call comes back with its namespace: tests/e2e/codex_tools.rs).
    assert_eq!(names, ["lookup"], "{sent}");
}

#[tokio::test]
async fn gemini_without_alt_sse_streams_one_json_array_and_an_unknown_model_is_a_404() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server("gemini", &provider).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Capital of France?"}]}]});
    let url = format!("{}/v1/models/gemini-2.5-flash:streamGenerateContent", s.url);
    let (status, _, text) = post(&url, &[("x-goog-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v[0]["candidates"][0]["content"]["parts"][0]["text"], "Paris.",
        "{v}"
    );
    let url = format!("{}/v1beta/models/nope:generateContent", s.url);
    let (status, _, text) = post(&url, &[("x-goog-api-key", TOKEN)], &body).await;
    assert_eq!(status, 404, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["status"], "NOT_FOUND");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("scripted"),
        "{v}"
    );
}

#[tokio::test]
async fn a_stop_sequence_arriving_in_pieces_never_reaches_the_stream() {
    let events = vec![
        text_chunk("Hello "),
        text_chunk("wor"),
        text_chunk("ld EN"),
        text_chunk("D and more"),
        "[DONE]".to_owned(),
    ];
    let provider = Scripted::start(vec![Reply::Events(events, Duration::from_millis(20))]).await;
    let s = server("stop", &provider).await;
    let body = json!({"model": "gpt-4o-mini", "stream": true, "stop": ["END"],
                      "messages": [{"role": "user", "content": "Say hello"}]});
    let (status, headers, text) = post(
        &format!("{}/v1/chat/completions", s.url),
        &[("x-api-key", TOKEN)],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let chunks = data(&text);
    let shown: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(shown, "Hello world ", "{text}");
    assert!(!text.contains("EN\""), "{text}");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")]);
    // The text came as it was made: more than one piece.
    assert!(
        chunks
            .iter()
            .filter(|c| c["choices"][0]["delta"]["content"].is_string())
            .count()
            > 2
    );
}

#[tokio::test]
async fn a_client_that_goes_away_stops_the_providers_request() {
    let provider = Scripted::start(vec![Reply::Silence]).await;
    let s = server("gone", &provider).await;
    let body = json!({"model": "gpt-4o-mini", "stream": true, "max_tokens": 10,
                      "messages": [{"role": "user", "content": "hi"}]});
    let mut response = open_stream(&format!("{}/v1/messages", s.url), &body).await;
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("message_start"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.open() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(provider.open(), 1, "the provider was asked");
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(provider.open(), 0, "the provider's request was closed");
}

#[tokio::test]
async fn the_embedded_model_reports_cached_tokens_and_refuses_a_prompt_over_its_context() {
    // A context capped at 4,096 tokens, so the long prompt below is over it.
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_LOCAL_CONTEXT", "4096")]).await;
    let system = "You are a terse geography assistant. Answer with one word. ".repeat(8);
    let chat = json!({"model": "local", "max_tokens": 8, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": "Capital of France?"}]});
    let url = format!("{}/v1/chat/completions", s.url);
    let (status, _, first) = post(&url, &[], &chat).await;
    assert_eq!(status, 200, "{first}");
    let (_, _, second) = post(&url, &[], &chat).await;
    let v: Value = serde_json::from_str(&second).unwrap();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(cached > 0 && cached <= prompt, "{v}");
    let messages = json!({"model": "local", "max_tokens": 8, "system": system,
                          "messages": [{"role": "user", "content": "Capital of France?"}]});
    let url = format!("{}/v1/messages", s.url);
    post(&url, &[], &messages).await;
    let (status, _, text) = post(&url, &[], &messages).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let read = v["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert!(read > 0, "{v}");
    // A prompt over the context is the caller's to shorten: a 400 in Anthropic's words.
    let long = json!({"model": "local", "max_tokens": 8,
                      "messages": [{"role": "user", "content": "word ".repeat(6000)}]});
    let (status, _, text) = post(&url, &[], &long).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("prompt is too long: "), "{message}");
    assert!(message.contains(" tokens > 4096 maximum"), "{message}");
}

/// A chat-completion chunk carrying a part of tool call 0.
fn call_chunk(part: Value) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
           "choices": [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": null}]})
    .to_string()
}

/// The `data:` payloads of the events received so far, reading more until `enough` holds
/// (or the stream ends, or 30 s pass); the events and whether the stream ended.
async fn read_until(
    response: &mut reqwest::Response,
    text: &mut String,
    enough: impl Fn(&[Value]) -> bool,
) -> (Vec<Value>, bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let complete = text.rfind("\n\n").map_or("", |end| &text[..end]);
        let events = data(complete);
        if enough(&events) || Instant::now() > deadline {
            return (events, false);
        }
        match tokio::time::timeout(Duration::from_secs(30), response.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => return (data(text), true),
        }
    }
}

#[tokio::test]
async fn a_tool_calls_arguments_reach_the_client_in_pieces_while_the_provider_makes_them() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]});
    let first = vec![
        call_chunk(json!({"index": 0, "id": "call_w", "type": "function",
                          "function": {"name": "get_weather", "arguments": ""}})),
        call_chunk(json!({"index": 0, "function": {"arguments": "{\"city\": \"Pa"}})),
    ];
    let rest = vec![
        call_chunk(json!({"index": 0, "function": {"arguments": "ris\"}"}})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        "[DONE]".to_owned(),
    ];
    let gates: Vec<_> = (0..3)
        .map(|_| std::sync::Arc::new(tokio::sync::Notify::new()))
        .collect();
    let script = gates
        .iter()
        .map(|g| Reply::Gated(first.clone(), g.clone(), rest.clone()))
        .collect();
    let provider = Scripted::start(script).await;
    let s = server("tool-pieces", &provider).await;
    let question = "What is the weather in Paris?";
    // Per API: the path, the body, the first fragment as the client sees it, the whole arguments.
    type Fragments = fn(&[Value]) -> Vec<String>;
    let cases: [(&str, Value, Fragments); 3] = [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o-mini", "stream": true,
                   "messages": [{"role": "user", "content": question}],
                   "tools": [{"type": "function",
                              "function": {"name": "get_weather", "parameters": schema}}]}),
            |events| {
                events
                    .iter()
                    .filter_map(|e| e.pointer("/choices/0/delta/tool_calls/0/function/arguments"))
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .filter(|a| !a.is_empty())
                    .collect()
            },
        ),
        (
            "/v1/messages",
            json!({"model": "gpt-4o-mini", "stream": true, "max_tokens": 100,
                   "messages": [{"role": "user", "content": question}],
                   "tools": [{"name": "get_weather", "input_schema": schema}]}),
            |events| {
                events
                    .iter()
                    .filter_map(|e| e.pointer("/delta/partial_json"))
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect()
            },
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-4o-mini", "stream": true, "input": question,
                   "tools": [{"type": "function", "name": "get_weather", "parameters": schema}]}),
            |events| {
                events
                    .iter()
                    .filter(|e| e["type"] == "response.function_call_arguments.delta")
                    .filter_map(|e| e["delta"].as_str().map(str::to_owned))
                    .collect()
            },
        ),
    ];
    for ((path, body, fragments), gate) in cases.into_iter().zip(&gates) {
        let mut response = open_stream(&format!("{}{path}", s.url), &body).await;
        assert_eq!(response.status(), 200, "{path}");
        let mut text = String::new();
        let (events, ended) =
            read_until(&mut response, &mut text, |e| !fragments(e).is_empty()).await;
        // The provider holds the rest until the gate opens: this came while it was writing.
        assert!(
            !ended,
            "{path}: the stream ended before the call's first piece: {text}"
        );
        assert_eq!(fragments(&events), ["{\"city\": \"Pa"], "{path}: {text}");
        assert!(
            text.contains("call_w"),
            "{path}: the call's id came first: {text}"
        );
        gate.notify_one();
        let (events, ended) = read_until(&mut response, &mut text, |_| false).await;
        assert!(ended, "{path}");
        let whole: String = fragments(&events).concat();
        assert_eq!(
            serde_json::from_str::<Value>(&whole).unwrap(),
            json!({"city": "Paris"}),
            "{path}: {text}"
        );
        assert_eq!(
            fragments(&events).len(),
            2,
            "{path}: sent once, in pieces: {text}"
        );
        let finish = match path {
            "/v1/chat/completions" => text.contains("\"finish_reason\":\"tool_calls\""),
            "/v1/messages" => text.contains("\"stop_reason\":\"tool_use\""),
            _ => events.iter().any(|e| {
                e["type"] == "response.completed"
                    && e.pointer("/response/output/0/call_id") == Some(&json!("call_w"))
            }),
        };
        assert!(finish, "{path}: {text}");
    }
}

/// A client joins a call's argument fragments, so a provider key split across two of them would
/// reach it whole: the end of a fragment that could still become the key waits for the next.
#[tokio::test]
async fn a_key_split_across_two_argument_fragments_never_reaches_the_client() {
    const KEY: &str = "sk-split-secret-key-0123456789";
    let (head, tail) = KEY.split_at(KEY.len() / 2);
    let events = vec![
        call_chunk(json!({"index": 0, "id": "call_k", "type": "function",
                          "function": {"name": "note", "arguments": ""}})),
        call_chunk(json!({"index": 0, "function": {"arguments": format!("{{\"text\": \"{head}")}})),
        call_chunk(json!({"index": 0, "function": {"arguments": format!("{tail}\"}}")}})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        "[DONE]".to_owned(),
    ];
    let provider = Scripted::start(vec![Reply::Events(events, Duration::from_millis(50))]).await;
    let s = server_with(
        "split-key",
        &provider,
        "key_env = \"SPLIT_KEY\"\n",
        &[("SPLIT_KEY", KEY)],
    )
    .await;
    let body = json!({"model": "gpt-4o-mini", "stream": true,
        "messages": [{"role": "user", "content": "Note something."}],
        "tools": [{"type": "function", "function": {"name": "note",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}]});
    let mut response = open_stream(&format!("{}/v1/chat/completions", s.url), &body).await;
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    let (events, ended) = read_until(&mut response, &mut text, |_| false).await;
    assert!(ended, "{text}");
    let joined: String = events
        .iter()
        .filter_map(|e| e.pointer("/choices/0/delta/tool_calls/0/function/arguments"))
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !text.contains(head),
        "the key's first half was sent before it was known not to be the key: {text}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&joined).unwrap(),
        json!({"text": "[redacted]"}),
        "the arguments as the client joins them: {text}"
    );
}

#[tokio::test]
async fn the_embedded_models_tool_call_streams_its_arguments_as_they_are_decoded() {
    let (_turn, s) = embedded(&[]).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]});
    let url = format!("{}/v1/chat/completions", s.url);
    for choice in [json!("required"), json!("auto")] {
        let body = json!({"model": "local", "stream": true, "max_tokens": 60, "seed": 1,
            "temperature": 0, "tool_choice": choice,
            "messages": [{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "The weather in a city", "parameters": schema}}]});
        let (status, _, text) = post(&url, &[], &body).await;
        assert_eq!(status, 200, "{choice}: {text}");
        let calls: Vec<Value> = data(&text)
            .into_iter()
            .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0").cloned())
            .collect();
        assert!(!calls.is_empty(), "{choice}: no call: {text}");
        assert_eq!(
            calls[0]["function"]["name"], "get_weather",
            "{choice}: {text}"
        );
        let id = calls[0]["id"].as_str().unwrap();
        assert!(id.starts_with("call_"), "{choice}: {text}");
        let fragments: Vec<&str> = calls
            .iter()
            .filter_map(|c| c["function"]["arguments"].as_str())
            .filter(|a| !a.is_empty())
            .collect();
        // Decoded token by token: the arguments come in several pieces, and join into them.
        assert!(fragments.len() > 2, "{choice}: {fragments:?}");
        let args: Value = serde_json::from_str(&fragments.concat()).unwrap();
        assert!(
            args["city"].as_str().is_some_and(|c| c.contains("Paris")),
            "{choice}: {args}"
        );
        assert!(calls.iter().all(|c| c["index"] == 0), "{choice}: {text}");
        assert!(
            text.contains("\"finish_reason\":\"tool_calls\""),
            "{choice}: {text}"
        );
    }
}

/// What `path` answers for `body`, with its status.
async fn answer(s: &Replica, path: &str, body: &Value) -> Value {
    let (status, _, text) = post(&format!("{}{path}", s.url), &[], body).await;
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The prompt tokens an Anthropic answer read: those it processed and those its cache held.
fn messages_prompt(v: &Value) -> u64 {
    let usage = &v["usage"];
    usage["input_tokens"].as_u64().unwrap()
        + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
        + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0)
}

/// The counts of `/v1/messages/count_tokens` and `/v1/responses/input_tokens`, each with the
/// prompt tokens the answer to the same body then read.
async fn counted_and_read(s: &Replica, messages: &Value, responses: &Value) -> [(u64, u64); 2] {
    let count = answer(s, "/v1/messages/count_tokens", messages).await;
    let counted = count["input_tokens"].as_u64().unwrap();
    let read = messages_prompt(&answer(s, "/v1/messages", messages).await);
    let count = answer(s, "/v1/responses/input_tokens", responses).await;
    assert_eq!(count["object"], "response.input_tokens", "{count}");
    let r_counted = count["input_tokens"].as_u64().unwrap();
    let r = answer(s, "/v1/responses", responses).await;
    let r_read = r["usage"]["input_tokens"].as_u64().unwrap();
    [(counted, read), (r_counted, r_read)]
}

#[tokio::test]
async fn the_embedded_models_token_counts_are_the_prompt_its_answer_reads() {
    let (_turn, s) = embedded(&[]).await;
    let messages = json!({"model": "local", "max_tokens": 4, "system": "Answer in one word.",
                          "messages": [{"role": "user", "content": "Capital of France?"}]});
    let responses = json!({"model": "local", "max_output_tokens": 4,
                           "instructions": "Answer in one word.", "input": "Capital of Italy?"});
    // The first count is asked while the model may still be loading: it waits, as a call does.
    let counts = counted_and_read(&s, &messages, &responses).await;
    for (counted, read) in counts {
        assert_eq!(counted, read, "{counts:?}");
    }
    // The chat template's own text is counted: more than the characters' estimate says.
    let estimate = ("Answer in one word.".len() + "Capital of France?".len()).div_ceil(4) as u64;
    assert!(counts[0].0 > estimate + 5, "{counts:?} vs {estimate}");
    // Gemini's count is the same model's.
    let gemini = json!({"systemInstruction": {"parts": [{"text": "Answer in one word."}]},
                        "contents": [{"role": "user", "parts": [{"text": "Capital of Spain?"}]}],
                        "generationConfig": {"maxOutputTokens": 4}});
    let count = answer(&s, "/v1beta/models/local:countTokens", &gemini).await;
    let reply = answer(&s, "/v1beta/models/local:generateContent", &gemini).await;
    assert_eq!(
        count["totalTokens"], reply["usageMetadata"]["promptTokenCount"],
        "{count} {reply}"
    );
}

#[tokio::test]
async fn the_embedded_models_token_counts_include_the_tools_in_its_template() {
    let (_turn, s) = embedded(&[]).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]});
    let question = "What is the weather in Paris?";
    let messages = json!({"model": "local", "max_tokens": 4,
                          "messages": [{"role": "user", "content": question}],
                          "tools": [{"name": "get_weather", "description": "The weather in a city.",
                                     "input_schema": schema}]});
    let responses = json!({"model": "local", "max_output_tokens": 4, "input": question,
                           "tools": [{"type": "function", "name": "get_weather",
                                      "description": "The weather in a city.",
                                      "parameters": schema}]});
    let counts = counted_and_read(&s, &messages, &responses).await;
    for (counted, read) in counts {
        assert_eq!(counted, read, "{counts:?}");
    }
    // Without the tools the prompt is shorter: they are counted as the template writes them.
    let mut bare = messages.clone();
    bare.as_object_mut().unwrap().remove("tools");
    let count = answer(&s, "/v1/messages/count_tokens", &bare).await;
    let without = count["input_tokens"].as_u64().unwrap();
    assert!(without + 20 < counts[0].0, "{without} vs {counts:?}");
}

#[tokio::test]
async fn a_count_is_answered_while_the_embedded_models_one_slot_is_writing() {
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_LOCAL_SLOTS", "1")]).await;
    let long = json!({"model": "local", "max_tokens": 48, "stream": true, "temperature": 0,
                      "messages": [{"role": "user",
                                    "content": "Count from 1 to 200, one number a line."}]});
    let mut response = http_client()
        .post(format!("{}/v1/messages", s.url))
        .header("content-type", "application/json")
        .body(long.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Each piece of the stream as it comes: when, and how many text deltas it carries.
    let (pieces, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(chunk)) = response.chunk().await {
            let deltas = String::from_utf8_lossy(&chunk)
                .matches("content_block_delta")
                .count();
            let _ = pieces.send((Instant::now(), deltas));
        }
    });
    while seen.recv().await.unwrap().1 == 0 {}
    // The one slot is writing the answer: the count does not wait for it.
    let count = json!({"model": "local",
                       "messages": [{"role": "user", "content": "Capital of France?"}]});
    let counted = answer(&s, "/v1/messages/count_tokens", &count).await;
    let counted_at = Instant::now();
    assert!(counted["input_tokens"].as_u64().unwrap() > 5, "{counted}");
    let mut after = 0;
    while let Some((at, deltas)) = seen.recv().await {
        if at > counted_at {
            after += deltas;
        }
    }
    assert!(
        after >= 10,
        "only {after} text deltas came after the count was answered"
    );
}

/// Claude Code asks for 32,000 tokens; a provider whose model writes at most 1,000 would refuse
/// that, so the entry's `max_tokens` is what the provider is sent (a smaller ask stays).
#[tokio::test]
async fn max_tokens_above_the_providers_limit_is_sent_as_its_limit() {
    let provider = Scripted::start(vec![
        Reply::json(200, &completion("Paris.")),
        Reply::json(200, &completion("Paris.")),
    ])
    .await;
    let s = server_with("max-tokens", &provider, "max_tokens = 1000\n", &[]).await;
    for (asked, sent) in [(32000, 1000), (50, 50)] {
        let body = json!({"model": "gpt-4o-mini", "max_tokens": asked,
                          "messages": [{"role": "user", "content": "Capital of France?"}]});
        let (status, _, text) = post(
            &format!("{}/v1/messages", s.url),
            &[("x-api-key", TOKEN), ("anthropic-version", "2023-06-01")],
            &body,
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let seen = provider.seen();
        assert_eq!(
            seen.last().map(|r| r.body["max_tokens"].clone()),
            Some(json!(sent)),
            "asked {asked}"
        );
    }
}

/// llama.cpp maps the GGUF into memory: a model file cut short in place after loading would
/// kill the server with SIGBUS at the next call. The call is refused instead, naming what
/// changed, and the server stays up.
#[tokio::test]
async fn a_model_file_cut_short_after_loading_is_refused_not_a_crash() {
    let _turn = crate::local::TURN.lock().await;
    let dir = std::env::temp_dir().join(format!("aam-cut-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    std::fs::copy(crate::engine::gemma(), &path).unwrap();
    let s = start(&[
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL_FILE", path.to_str().unwrap()),
    ])
    .await;
    let chat = format!("{}/v1/chat/completions", s.url);
    let mut body = chat_body();
    body["max_tokens"] = json!(4);
    let (status, _, text) = post(&chat, &[], &body).await;
    assert_eq!(status, 200, "{text}");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let (status, _, text) = post(&chat, &[], &body).await;
    assert_ne!(status, 200, "{text}");
    assert!(text.contains("changed since it was loaded"), "{text}");
    assert!(text.contains("restart the server"), "{text}");
    let health = http_client()
        .get(format!("{}/healthz", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "the server is still up");
    let _ = std::fs::remove_dir_all(&dir);
}
