//! Log-probabilities as llama-server returns them, on the embedded model, greedy (temperature
//! 0), in each API's own form, whole and streamed: chat completions through the official openai
//! SDK (`logprobs` with `top_logprobs: 3`), legacy completions (`logprobs: 2`), the Responses
//! API (`include: ["message.output_text.logprobs"]`, every object and event valid under the Open
//! Responses schemas), Ollama's chat and generate through the official `ollama` client, and
//! Gemini's `responseLogprobs`. In each, the tokens' texts (their bytes too) join into the
//! answer's text, every log-probability is at most 0, and the chosen token is the likeliest at
//! its place (greedy), its alternatives as many as asked, most likely first.

use crate::api_sdks::{Server, TOKEN, folder, ok, run_client};
use crate::http_api::{data, post};
use crate::responses_api::{assert_valid, event_schema};
use serde_json::{Value, json};

/// The clients' cases (tests/e2e/api/logprobs_client.py).
const CASES: [&str; 7] = [
    "chat",
    "chat_stream",
    "completion",
    "completion_stream",
    "responses",
    "ollama_chat",
    "ollama_stream",
];

/// What the clients were handed, case by case.
async fn clients(server: &Server) -> Value {
    let script = format!(
        "{}/tests/e2e/api/logprobs_client.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let models = json!({"openai": "gpt-4o-mini", "ollama": "qwen2.5-coder-0.5b-instruct:latest"});
    let mut command = tokio::process::Command::new(crate::common::sdk_python());
    command
        .arg(&script)
        .args(["--base", &server.url, "--key", TOKEN])
        .args(["--models", &models.to_string()])
        .args(["--timeout", "300"])
        .args(CASES);
    run_client(command, "logprobs_client.py", server, 900).await
}

/// One token's entry in OpenAI's form (chat, Responses) or Ollama's (`bytes` and the
/// alternatives left out when empty): a log-probability of at most 0, its bytes its text's,
/// `top` alternatives, most likely first, the chosen token first (greedy).
fn assert_entry(entry: &Value, top: usize, what: &str) {
    let token = entry["token"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: {entry}"));
    let logprob = entry["logprob"].as_f64().unwrap();
    assert!(logprob <= 0.0, "{what}: {entry}");
    // (The `ollama` client's types leave the bytes out.)
    if let Some(bytes) = entry.get("bytes").filter(|b| !b.is_null()) {
        let bytes: Vec<u8> = (bytes.as_array().unwrap().iter())
            .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
            .collect();
        assert_eq!(String::from_utf8_lossy(&bytes), token, "{what}: {entry}");
    }
    let alternatives = entry["top_logprobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(alternatives.len(), top, "{what}: {entry}");
    if top > 0 {
        assert_eq!(alternatives[0]["token"], token, "{what}: greedy: {entry}");
        assert_eq!(
            alternatives[0]["logprob"], entry["logprob"],
            "{what}: {entry}"
        );
    }
    let ranked: Vec<f64> = alternatives
        .iter()
        .map(|a| a["logprob"].as_f64().unwrap())
        .collect();
    assert!(ranked.windows(2).all(|w| w[0] >= w[1]), "{what}: {entry}");
}

/// The entries' tokens, joined.
fn joined(entries: &[Value]) -> String {
    entries
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect()
}

/// A list of entries (none when `null`).
fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_embedded_model_reports_logprobs_in_every_apis_form_whole_and_streamed() {
    let (_turn, server) = Server::local(&folder("logprobs"), &[]).await;
    let out = clients(&server).await;
    chat(&out);
    completions(&out);
    responses(&out);
    ollama(&out);
    responses_over_http(&server).await;
    gemini(&server).await;
}

/// Chat completions: `choices[].logprobs.content`, whole and with each chunk.
fn chat(out: &Value) {
    let whole = ok(out, "chat");
    let text = whole["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{whole}");
    let content = list(&whole["logprobs"]["content"]);
    assert_eq!(joined(&content), text, "{whole}");
    for entry in &content {
        assert_entry(entry, 3, "chat");
    }
    assert_eq!(whole["logprobs"]["refusal"], Value::Null, "{whole}");
    let chunks = list(&ok(out, "chat_stream")["chunks"]);
    let streamed: String = chunks.iter().filter_map(|c| c["text"].as_str()).collect();
    let entries: Vec<Value> = chunks.iter().flat_map(|c| list(&c["logprobs"])).collect();
    assert_eq!(joined(&entries), streamed, "{chunks:?}");
    assert!(!streamed.is_empty(), "{chunks:?}");
    for entry in &entries {
        assert_entry(entry, 3, "chat stream");
    }
    let carrying = chunks.iter().filter(|c| !list(&c["logprobs"]).is_empty());
    assert!(
        carrying.count() > 1,
        "the tokens came in one chunk: {chunks:?}"
    );
}

/// Legacy completions: the parallel lists, whole and with each chunk.
fn completions(out: &Value) {
    let whole = ok(out, "completion");
    let text = whole["text"].as_str().unwrap();
    let logprobs = &whole["logprobs"];
    let tokens: Vec<&str> = (logprobs["tokens"].as_array().unwrap().iter())
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens.concat(), text, "{whole}");
    assert!(!tokens.is_empty(), "{whole}");
    let mut offset = 0;
    for (i, token) in tokens.iter().enumerate() {
        let logprob = &logprobs["token_logprobs"][i];
        assert!(logprob.as_f64().unwrap() <= 0.0, "{whole}");
        assert_eq!(logprobs["text_offset"][i], offset, "{whole}");
        offset += token.chars().count();
        // The two likeliest, the chosen one first (greedy) with its own log-probability.
        let top = logprobs["top_logprobs"][i].as_object().unwrap();
        assert_eq!(top.len(), 2, "{whole}");
        assert_eq!(
            top.keys().next().map(String::as_str),
            Some(*token),
            "{whole}"
        );
        assert_eq!(&top[*token], logprob, "{whole}");
    }
    let chunks = list(&ok(out, "completion_stream")["chunks"]);
    let streamed: String = chunks.iter().filter_map(|c| c["text"].as_str()).collect();
    let mut tokens = String::new();
    let mut offsets = Vec::new();
    for c in &chunks {
        for t in list(&c["logprobs"]["tokens"]) {
            tokens.push_str(t.as_str().unwrap());
        }
        offsets.extend(list(&c["logprobs"]["text_offset"]));
    }
    assert_eq!(tokens, streamed, "{chunks:?}");
    assert_eq!(offsets.first(), Some(&json!(0)), "{chunks:?}");
}

/// The Responses API through the SDK: the `output_text` part's `logprobs`.
fn responses(out: &Value) {
    let r = ok(out, "responses");
    let parts = list(&r["parts"]);
    assert_eq!(parts.len(), 1, "{r}");
    let logprobs = list(&parts[0]["logprobs"]);
    assert_eq!(joined(&logprobs), r["text"].as_str().unwrap(), "{r}");
    for entry in &logprobs {
        assert_entry(entry, 2, "responses");
    }
}

/// Ollama's chat (whole) and generate (streamed): the `logprobs` list, each line its own.
fn ollama(out: &Value) {
    let chat = ok(out, "ollama_chat");
    let logprobs = list(&chat["logprobs"]);
    assert_eq!(joined(&logprobs), chat["text"].as_str().unwrap(), "{chat}");
    for entry in &logprobs {
        assert_entry(entry, 3, "ollama chat");
    }
    let lines = list(&ok(out, "ollama_stream")["lines"]);
    let streamed: String = lines.iter().filter_map(|l| l["text"].as_str()).collect();
    let entries: Vec<Value> = lines.iter().flat_map(|l| list(&l["logprobs"])).collect();
    assert_eq!(joined(&entries), streamed, "{lines:?}");
    assert!(!streamed.is_empty(), "{lines:?}");
    for entry in &entries {
        assert_entry(entry, 2, "ollama stream");
    }
}

/// The Responses API over HTTP: the whole response and each streamed event validate, the
/// deltas' `logprobs` join into the text, and `output_text.done` has them all.
async fn responses_over_http(server: &Server) {
    let url = format!("{}/v1/responses", server.url);
    let body = json!({"model": "gpt-4o-mini", "input": "Say hello.", "max_output_tokens": 16,
                      "temperature": 0, "include": ["message.output_text.logprobs"],
                      "top_logprobs": 1});
    let (status, _, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{text}");
    let whole: Value = serde_json::from_str(&text).unwrap();
    assert_valid("ResponseResource", &whole);
    let part = &whole["output"][0]["content"][0];
    assert_eq!(
        joined(&list(&part["logprobs"])),
        part["text"].as_str().unwrap()
    );
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, _, text) = post(&url, &[("x-api-key", TOKEN)], &streamed).await;
    assert_eq!(status, 200, "{text}");
    let events = data(&text);
    let mut deltas = String::new();
    let mut tokens = Vec::new();
    for event in &events {
        let kind = event["type"].as_str().unwrap();
        assert_valid(event_schema(kind), event);
        if kind == "response.output_text.delta" {
            deltas.push_str(event["delta"].as_str().unwrap());
            tokens.extend(list(&event["logprobs"]));
        }
    }
    assert_eq!(joined(&tokens), deltas, "{text}");
    let done = events
        .iter()
        .find(|e| e["type"] == "response.output_text.done")
        .unwrap();
    assert_eq!(list(&done["logprobs"]), tokens, "{text}");
    for entry in &tokens {
        assert_entry(entry, 1, "responses stream");
    }
}

/// Gemini's `logprobsResult`: the chosen tokens join into the text, each the first of its
/// place's likeliest; `avgLogprobs` their mean.
async fn gemini(server: &Server) {
    let url = format!(
        "{}/v1beta/models/gemini-2.5-flash:generateContent",
        server.url
    );
    let body = json!({"contents": [{"parts": [{"text": "Say hello."}]}],
                      "generationConfig": {"temperature": 0, "maxOutputTokens": 16,
                                           "responseLogprobs": true, "logprobs": 2}});
    let (status, _, text) = post(&url, &[("x-goog-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let candidate = &v["candidates"][0];
    let result = &candidate["logprobsResult"];
    let chosen = list(&result["chosenCandidates"]);
    let said: String = chosen
        .iter()
        .map(|c| c["token"].as_str().unwrap())
        .collect();
    assert_eq!(said, candidate["content"]["parts"][0]["text"], "{v}");
    let top = list(&result["topCandidates"]);
    assert_eq!(top.len(), chosen.len(), "{v}");
    for (place, c) in top.iter().zip(&chosen) {
        assert_eq!(list(&place["candidates"]).len(), 2, "{v}");
        assert_eq!(place["candidates"][0], *c, "{v}");
    }
    let mean = candidate["avgLogprobs"].as_f64().unwrap();
    assert!(mean <= 0.0, "{v}");
}
