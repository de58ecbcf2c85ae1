//! The embedded models as a pool: a models file with three local models starts without
//! loading any, each is loaded by its first call, the least recently used idle one is
//! unloaded when another would not fit the memory budget, a keep-alive unloads an idle one
//! (and Ollama's `keep_alive: 0` at once), and a model over the budget is refused naming it.
//! Three names for the one cached file make three engines (each entry's own file path).

use crate::api_sdks::{Server, TOKEN, folder};
use crate::common::http_client;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn chat(server: &Server, model: &str) -> (u16, Value) {
    let r = http_client()
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"model": model, "max_tokens": 2,
                      "messages": [{"role": "user", "content": "Say hi."}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The loaded models, as Ollama's `/api/ps` lists them (names without `:latest`), sorted.
async fn loaded(server: &Server) -> Vec<String> {
    let r = http_client()
        .get(format!("{}/api/ps", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    let mut names: Vec<String> = body["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let name = m["name"].as_str().unwrap();
            name.strip_suffix(":latest").unwrap_or(name).to_owned()
        })
        .collect();
    names.sort();
    names
}

/// Waits (up to 30 s) until the loaded models are `want`.
async fn until_loaded(server: &Server, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = loaded(server).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "loaded {now:?}, wanted {want:?}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn local_models_load_on_demand_and_unload_by_keep_alive_and_for_room() {
    let file = crate::local::cached_model();
    let bytes = std::fs::metadata(&file).unwrap().len();
    let dir = folder("pool");
    for name in ["a", "b", "c"] {
        let link = dir.join(format!("{name}.gguf"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).unwrap();
    }
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "default = \"a\"\n\
             [[models]]\nname = \"a\"\nbackend = \"local\"\nmodel_file = {a:?}\n\
             [[models]]\nname = \"b\"\nbackend = \"local\"\nmodel_file = {b:?}\ngpu_layers = 0\n\
             [[models]]\nname = \"c\"\nbackend = \"local\"\nmodel_file = {c:?}\nkeep_alive = 3\n",
            a = dir.join("a.gguf").display().to_string(),
            b = dir.join("b.gguf").display().to_string(),
            c = dir.join("c.gguf").display().to_string(),
        ),
    )
    .unwrap();
    // Room for two of the three (each counts its file and a tenth more).
    let budget = (bytes + bytes / 10) * 2 + (bytes / 20);
    let _turn = crate::local::TURN.lock().await;
    let server = Server::start(
        &dir,
        &[
            "--models",
            models.to_str().unwrap(),
            "--local-memory",
            &budget.to_string(),
        ],
    )
    .await;
    // Nothing is loaded at start: the server listened before it loaded any model.
    assert!(loaded(&server).await.is_empty());

    let (status, body) = chat(&server, "a").await;
    assert_eq!(status, 200, "{body}");
    until_loaded(&server, &["a"]).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (status, body) = chat(&server, "b").await;
    assert_eq!(status, 200, "{body}");
    until_loaded(&server, &["a", "b"]).await;
    // The layers on a GPU, said as each model is ready: none here (no GPU, or `0` asked).
    assert!(server.log().contains("gpu_layers=0"), "{}", server.log());
    // c does not fit beside both: a, the least recently used, makes room.
    let (status, body) = chat(&server, "c").await;
    assert_eq!(status, 200, "{body}");
    until_loaded(&server, &["b", "c"]).await;
    assert!(
        server
            .log()
            .contains("unloading a local model to make room"),
        "{}",
        server.log()
    );
    // c's keep-alive (3 s) runs out: it is unloaded, b (kept for good) stays.
    until_loaded(&server, &["b"]).await;
    // Ollama's keep_alive 0 unloads b once it has answered.
    let r = http_client()
        .post(format!("{}/api/generate", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "b", "keep_alive": 0}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["done_reason"], "unload", "{body}");
    until_loaded(&server, &[]).await;
    // Loaded again by a call, and kept as its settings say (for good): the unload was once.
    let (status, body) = chat(&server, "b").await;
    assert_eq!(status, 200, "{body}");
    until_loaded(&server, &["b"]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(loaded(&server).await, ["b"]);
    drop(server);

    // A budget smaller than the model: refused, naming the budget.
    let server = Server::start(
        &folder("pool-small"),
        &[
            "--models",
            models.to_str().unwrap(),
            "--local-memory",
            "64M",
        ],
    )
    .await;
    let (status, body) = chat(&server, "a").await;
    assert!(status >= 500 || status == 429, "{status} {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("AGENT_AS_MODEL_LOCAL_MEMORY") && message.contains("0.1 GiB"),
        "{body}"
    );
}
