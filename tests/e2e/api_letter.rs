//! The model APIs to the letter, on every dialect: a prompt over the context is an HTTP 400
//! before any stream, in each API's form (OpenAI's `context_length_exceeded`); Anthropic's
//! `message_start` says the prompt's real count (what `count_tokens` says) and its usage always
//! has both cache fields; a stream and a whole answer name the same model, the backend's.

use crate::common::openai::{Reply, Scripted, completion};
use crate::http_api::{TOKEN, data, embedded, post, server};
use serde_json::{Value, json};
use std::time::Duration;

/// Each API's request for `text`, streamed: its path and body.
fn streamed_requests(text: &str) -> [(&'static str, Value); 4] {
    [
        (
            "/v1/chat/completions",
            json!({"model": "local", "stream": true,
                   "messages": [{"role": "user", "content": text}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "local", "stream": true, "max_tokens": 16,
                   "messages": [{"role": "user", "content": text}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "local", "stream": true, "input": text}),
        ),
        (
            "/v1beta/models/local:streamGenerateContent?alt=sse",
            json!({"contents": [{"role": "user", "parts": [{"text": text}]}]}),
        ),
    ]
}

#[tokio::test]
async fn a_prompt_over_the_context_streamed_is_a_400_before_any_stream_in_each_apis_form() {
    // A context capped at 4,096 tokens (it would grow to the model's 32,768 otherwise).
    let (_turn, s) = embedded(&[
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
        ("AGENT_AS_MODEL_LOCAL_CONTEXT", "4096"),
    ])
    .await;
    let long = "word ".repeat(6000);
    for (path, body) in streamed_requests(&long) {
        let (status, headers, text) =
            post(&format!("{}{path}", s.url), &[("x-api-key", TOKEN)], &body).await;
        assert_eq!(status, 400, "{path}: {text}");
        assert_eq!(headers["content-type"], "application/json", "{path}");
        let e: Value = serde_json::from_str(&text).unwrap();
        match path {
            "/v1/messages" => {
                assert_eq!(e["type"], "error", "{e}");
                assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
                assert!(
                    e["error"]["message"]
                        .as_str()
                        .unwrap()
                        .starts_with("prompt is too long"),
                    "{e}"
                );
            }
            p if p.starts_with("/v1beta") => {
                assert_eq!(e["error"]["status"], "INVALID_ARGUMENT", "{e}");
                assert_eq!(e["error"]["code"], 400, "{e}");
            }
            _ => {
                assert_eq!(e["error"]["code"], "context_length_exceeded", "{e}");
                assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
            }
        }
    }
}

#[tokio::test]
async fn anthropics_message_start_says_the_prompts_real_count() {
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN)]).await;
    let messages = json!([{"role": "user", "content": "Name three colours of the rainbow."}]);
    let (status, _, counted) = post(
        &format!("{}/v1/messages/count_tokens", s.url),
        &[("x-api-key", TOKEN)],
        &json!({"model": "local", "messages": messages}),
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    let counted: Value = serde_json::from_str(&counted).unwrap();
    let (status, _, text) = post(
        &format!("{}/v1/messages", s.url),
        &[("x-api-key", TOKEN)],
        &json!({"model": "local", "stream": true, "max_tokens": 8, "messages": messages}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = data(&text);
    let start = &events[0]["message"];
    assert_eq!(events[0]["type"], "message_start");
    assert!(counted["input_tokens"].as_u64().unwrap() > 5, "{counted}");
    assert_eq!(
        start["usage"]["input_tokens"], counted["input_tokens"],
        "{start}"
    );
    let delta = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    for field in ["cache_creation_input_tokens", "cache_read_input_tokens"] {
        assert!(start["usage"][field].is_u64(), "{field}: {start}");
        assert!(delta["usage"][field].is_u64(), "{field}: {delta}");
    }
    assert_eq!(delta["usage"]["output_tokens"], 8, "{delta}");
}

fn chunk(delta: Value, finish: Value) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

#[tokio::test]
async fn a_stream_and_a_whole_answer_name_the_same_model_on_every_api() {
    let mut whole = completion("Paris.");
    whole["model"] = json!("upstream");
    let stream = Reply::Events(
        vec![
            chunk(json!({"content": "Paris."}), Value::Null),
            chunk(json!({}), json!("stop")),
            "[DONE]".into(),
        ],
        Duration::from_millis(5),
    );
    let provider = Scripted::start(vec![
        Reply::json(200, &whole),
        stream.clone(),
        Reply::json(200, &whole),
        stream.clone(),
        Reply::json(200, &whole),
        stream.clone(),
        Reply::json(200, &whole),
        stream,
    ])
    .await;
    let s = server("letter-model", &provider).await;
    // (path, body, where the model is in the whole answer, where in each streamed event)
    let cases: [(&str, Value, &str, &str); 4] = [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}),
            "/model",
            "/model",
        ),
        (
            "/v1/messages",
            json!({"model": "gpt-4o-mini", "max_tokens": 10,
                   "messages": [{"role": "user", "content": "Hi"}]}),
            "/model",
            "/message/model",
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-4o-mini", "input": "Hi"}),
            "/model",
            "/response/model",
        ),
        (
            "/v1beta/models/gpt-4o-mini:generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}),
            "/modelVersion",
            "/modelVersion",
        ),
    ];
    for (path, body, at_whole, at_event) in cases {
        let url = format!("{}{path}", s.url);
        let (status, _, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
        assert_eq!(status, 200, "{path}: {text}");
        let whole: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            whole.pointer(at_whole).unwrap(),
            "upstream",
            "{path}: {whole}"
        );
        let (url, body) = match path {
            p if p.starts_with("/v1beta") => (
                format!(
                    "{}/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse",
                    s.url
                ),
                body,
            ),
            _ => {
                let mut b = body;
                b["stream"] = json!(true);
                (url, b)
            }
        };
        let (status, _, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
        assert_eq!(status, 200, "{path}: {text}");
        let named: Vec<Value> = data(&text)
            .iter()
            .filter_map(|e| e.pointer(at_event).cloned())
            .collect();
        assert!(!named.is_empty(), "{path}: {text}");
        assert!(named.iter().all(|m| *m == "upstream"), "{path}: {text}");
    }
}

/// Gemini's fields in proto JSON's snake_case spelling are read as their camelCase names at
/// every level (system instruction, config, declarations, function calling config); a field
/// given in both spellings keeps the camelCase one and the other is named in the warnings
/// header; the caller's own property names are left as they are.
#[tokio::test]
async fn gemini_fields_in_snake_case_reach_the_model_and_a_duplicate_is_named() {
    let call = json!({"id": "c", "object": "chat.completion", "model": "upstream",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
            "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city_name\": \"Paris\"}"}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}});
    let provider = Scripted::start(vec![Reply::json(200, &call)]).await;
    let s = server("letter-gemini-snake", &provider).await;
    let body = json!({
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
        "system_instruction": {"parts": [{"text": "Answer with a tool."}]},
        "generation_config": {"max_output_tokens": 33, "stop_sequences": ["END"]},
        "generationConfig": {"temperature": 0.25},
        "tools": [{"function_declarations": [{"name": "get_weather",
            "parameters_json_schema": {"type": "object",
                "properties": {"city_name": {"type": "string"}}, "required": ["city_name"]}}]}],
        "tool_config": {"function_calling_config": {"mode": "ANY"}}
    });
    let (status, headers, text) = post(
        &format!("{}/v1beta/models/gpt-4o-mini:generateContent", s.url),
        &[("x-goog-api-key", TOKEN)],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answer["candidates"][0]["content"]["parts"][0]["functionCall"]["args"],
        json!({"city_name": "Paris"}),
        "{answer}"
    );
    let warnings = headers
        .get("x-agent-as-model-warnings")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(
        warnings.contains("`generation_config` and `generationConfig` are the same field"),
        "{warnings}"
    );
    let seen = provider.seen();
    let sent = &seen[0].body;
    assert_eq!(sent["messages"][0]["role"], "system", "{sent}");
    assert!(
        sent["messages"][0]["content"]
            .to_string()
            .contains("Answer with a tool.")
    );
    assert_eq!(sent["temperature"], 0.25, "{sent}");
    let parameters = &sent["tools"][0]["function"]["parameters"];
    assert_eq!(
        parameters["properties"]["city_name"]["type"], "string",
        "{sent}"
    );
    assert_eq!(parameters["required"], json!(["city_name"]), "{sent}");
    assert_eq!(sent["tool_choice"], "required", "{sent}");
}

/// A path under `/v1` or `/v1beta` that no route serves is a 404, and a method a route does not
/// take a 405, each in the JSON envelope of the API the path belongs to; paths elsewhere keep
/// the server's plain 404.
#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_apis_json_envelope() {
    let provider = Scripted::start(vec![]).await;
    let s = server("letter-routes", &provider).await;
    let client = crate::common::http_client();
    let send = |method: reqwest::Method, path: &str, headers: &[(&str, &str)]| {
        let mut request = client
            .request(method, format!("{}{path}", s.url))
            .header("authorization", format!("Bearer {TOKEN}"));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        async move {
            let r = request.send().await.unwrap();
            let status = r.status().as_u16();
            let kind = r
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            (status, kind, r.text().await.unwrap())
        }
    };
    let (status, kind, text) = send(reqwest::Method::POST, "/v1/embeddingz", &[]).await;
    assert_eq!((status, kind.as_str()), (404, "application/json"), "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        e["error"]["message"], "Invalid URL (POST /v1/embeddingz)",
        "{e}"
    );
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert!(e["error"]["code"].is_null(), "{e}");

    let (status, _, text) = send(reqwest::Method::POST, "/v1/messages/batches", &[]).await;
    assert_eq!(status, 404, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "not_found_error", "{e}");

    let (status, _, text) = send(reqwest::Method::GET, "/v1beta/cachedContents", &[]).await;
    assert_eq!(status, 404, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["status"], "NOT_FOUND", "{e}");
    assert_eq!(e["error"]["code"], 404, "{e}");

    let (status, kind, text) = send(reqwest::Method::GET, "/v1/chat/completions", &[]).await;
    assert_eq!((status, kind.as_str()), (405, "application/json"), "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        e["error"]["message"], "Method not allowed (GET /v1/chat/completions)",
        "{e}"
    );

    let (status, kind, _) = send(reqwest::Method::GET, "/elsewhere", &[]).await;
    assert_eq!(status, 404);
    assert!(kind.starts_with("text/plain"), "{kind}");
    assert!(provider.seen().is_empty());
}
