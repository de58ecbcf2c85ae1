//! Embeddings by the models of a models file, over HTTP: a provider's `/embeddings` is passed
//! the request with its own model name and its vectors come back in the inputs' order; a
//! provider that serves none is named in a clear error; an `embeddings = true` entry (the
//! embedded model's file, loaded without a chat context) makes vectors and refuses chat; the
//! host's sampling makes none. (The vectors themselves, through the SDKs: `api_sdks.rs`.)

use crate::api_sdks::{Server, TOKEN, folder};
use crate::common::http_client;
use crate::common::openai::{Reply, Scripted};
use serde_json::{Value, json};

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = http_client()
        .post(format!("{}{path}", server.url))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_models_files_providers_and_embedding_model_make_embeddings_and_say_what_they_cannot() {
    // The provider answers out of order, as `index` allows.
    let embedder = Scripted::start(vec![Reply::json(
        200,
        &json!({"object": "list", "model": "upstream-embed-v2",
                "data": [{"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
                         {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}],
                "usage": {"prompt_tokens": 7, "total_tokens": 7}}),
    )])
    .await;
    let chat_only = Scripted::start(vec![Reply::json(
        404,
        &json!({"error": {"message": "this server has no embeddings endpoint"}}),
    )])
    .await;
    let model_file = crate::local::cached_model();
    let dir = folder("embeddings-file");
    let file = dir.join("models.toml");
    std::fs::write(
        &file,
        format!(
            r#"default = "chat"
[[models]]
name = "embed"
aliases = ["text-embedding-3-small"]
backend = "provider"
url = "{}"
model = "upstream-embed"
retries = 0

[[models]]
name = "chat"
backend = "provider"
url = "{}"
model = "upstream-chat"
retries = 0

[[models]]
name = "local-embed"
backend = "local"
model_file = {:?}
embeddings = true

[[models]]
name = "agent"
backend = "host"
"#,
            embedder.url,
            chat_only.url,
            model_file.display().to_string()
        ),
    )
    .unwrap();
    let _turn = crate::local::TURN.lock().await;
    let server = Server::start(&dir, &["--models", file.to_str().unwrap()]).await;

    let (status, body) = post(
        &server,
        "/v1/embeddings",
        json!({"model": "text-embedding-3-small", "input": ["first", "second"],
               "dimensions": 2}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["embedding"], json!([1.0, 0.0]), "{body}");
    assert_eq!(body["data"][1]["embedding"], json!([0.0, 1.0]), "{body}");
    assert_eq!(body["model"], "upstream-embed-v2");
    assert_eq!(body["usage"]["prompt_tokens"], 7);
    let seen = embedder.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/embeddings");
    assert_eq!(seen[0].body["model"], "upstream-embed");
    assert_eq!(seen[0].body["input"], json!(["first", "second"]));
    assert_eq!(seen[0].body["dimensions"], 2);

    // A provider without embeddings: its refusal, named, in OpenAI's envelope.
    let (status, body) = post(
        &server,
        "/v1/embeddings",
        json!({"model": "chat", "input": "x"}),
    )
    .await;
    assert!(status >= 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no embeddings endpoint"), "{body}");
    assert!(message.contains("404"), "{body}");

    // The embedding model makes vectors, on every route, and takes no chat.
    let (status, body) = post(
        &server,
        "/api/embed",
        json!({"model": "local-embed:latest", "input": ["hello there", "hello there"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}\n{}", server.log());
    let vectors = body["embeddings"].as_array().unwrap();
    assert_eq!(vectors.len(), 2);
    assert_eq!(vectors[0], vectors[1]);
    assert!(vectors[0].as_array().unwrap().len() >= 256);
    assert!(body["prompt_eval_count"].as_u64().unwrap() >= 4, "{body}");
    let (status, body) = post(
        &server,
        "/v1beta/models/local-embed:embedContent",
        json!({"content": {"parts": [{"text": "hello there"}]}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["embedding"]["values"], vectors[0]);
    let (status, body) = post(
        &server,
        "/v1/chat/completions",
        json!({"model": "local-embed", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("embedding model"), "{body}");
    assert_eq!(body["error"]["param"], "model");

    // Ollama's clients see an embedding model.
    let (status, body) = post(&server, "/api/show", json!({"model": "local-embed"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["capabilities"], json!(["embedding"]), "{body}");

    // The host's sampling makes none; Ollama's errors are its own shape.
    let (status, body) = post(
        &server,
        "/api/embed",
        json!({"model": "agent", "input": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("makes no embeddings"),
        "{body}"
    );
    let (status, body) = post(&server, "/api/embed", json!({"input": "x"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("`model`"),
        "{body}"
    );
    let (status, body) = post(
        &server,
        "/v1/embeddings",
        json!({"model": "nope", "input": "x"}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["param"], "model");

    // Each embeddings request is counted under `api="embeddings"`, by model and outcome.
    let scrape = http_client()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |model: &str, outcome: &str| -> f64 {
        scrape
            .lines()
            .filter(|l| l.starts_with("agent_as_model_requests_total{"))
            .filter(|l| {
                l.contains("api=\"embeddings\"")
                    && l.contains(&format!("model=\"{model}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(count("embed", "ok"), 1.0, "{scrape}");
    assert_eq!(count("local-embed", "ok"), 2.0, "{scrape}");
    // The host's model and an unknown name: no model of the server made them.
    assert_eq!(count("unknown", "client_error"), 2.0, "{scrape}");
}
