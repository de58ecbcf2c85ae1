//! Pulling and deleting models go through the backends, on the real binary: an `hf:` file
//! `POST /api/pull` fetched is a model from then on (listed by `/api/tags`, routed by name on
//! `/api/chat`) until `DELETE /api/delete` removes it and its file; a file a configured local
//! model answers from is not deleted, even once pulled. The first two run no model (the
//! scripted Hub's file is none, and a call that reaches it is told so, naming it); the last
//! pulls the embedded model's file under an `hf:` name and chats with it.

use crate::api_sdks::{Server, folder};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A request with the server's token: its status and JSON body (null if none).
async fn call(server: &Server, method: reqwest::Method, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, json) = crate::ollama_hardening::send(server, method, path, body).await;
    (status, json)
}

async fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    call(server, reqwest::Method::POST, path, body).await
}

async fn pull(server: &Server, name: &str) -> (u16, Value) {
    post(
        server,
        "/api/pull",
        &json!({"model": name, "stream": false}),
    )
    .await
}

async fn delete(server: &Server, name: &str) -> (u16, Value) {
    let body = json!({"model": name});
    call(server, reqwest::Method::DELETE, "/api/delete", &body).await
}

/// The names `/api/tags` lists.
async fn tags(server: &Server) -> Vec<String> {
    let (status, body) = call(server, reqwest::Method::GET, "/api/tags", &Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let models = body["models"].as_array().unwrap();
    let names = models
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned());
    names.collect()
}

/// A chat of one question for `model`, answered whole.
async fn chat(server: &Server, model: &str) -> (u16, Value) {
    let body = json!({"model": model, "stream": false, "options": {"num_predict": 8},
                      "messages": [{"role": "user", "content": "Say hi."}]});
    post(server, "/api/chat", &body).await
}

/// A models file whose one provider is never asked, and the server on it with `cache` and the
/// scripted Hub at `hub` (if any).
async fn server(dir: &Path, cache: &Path, hub: Option<&str>, args: &[&str]) -> Server {
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        "[[models]]\nname = \"paris\"\nbackend = \"provider\"\n\
         url = \"http://127.0.0.1:9/v1\"\nmodel = \"upstream\"\n",
    )
    .unwrap();
    let mut env = vec![("AGENT_AS_MODEL_CACHE_DIR", cache.to_str().unwrap())];
    if let Some(endpoint) = hub {
        env.extend([("HF_ENDPOINT", endpoint), ("HF_TOKEN", crate::hub::TOKEN)]);
    }
    let mut all = vec!["--models", models.to_str().unwrap()];
    all.extend_from_slice(args);
    Server::with_env(dir, &all, &env).await
}

/// The scripted Hub's file's name, and where the cache under `dir` keeps it.
fn hub_file(dir: &Path) -> (String, PathBuf) {
    let name = format!("hf:{}/{}", crate::hub::REPO, crate::hub::FILE);
    let cache = dir.join("cache").join("models/hf").join(crate::hub::REPO);
    (name, cache.join(crate::hub::FILE))
}

#[tokio::test]
async fn a_pulled_file_is_listed_routed_and_deleted_through_the_backends() {
    let hub = crate::hub::Hub::start(b"not a model, only bytes".repeat(40_000));
    let dir = folder("pull-routed");
    let _ = std::fs::remove_dir_all(dir.join("cache"));
    let server = server(&dir, &dir.join("cache"), Some(&hub.endpoint), &[]).await;
    let (name, cached) = hub_file(&dir);
    // Not a model of this server yet.
    let (status, body) = chat(&server, &name).await;
    assert_eq!(status, 404, "{body}");
    assert!(!tags(&server).await.contains(&name));
    assert_eq!(
        pull(&server, &name).await,
        (200, json!({"status": "success"}))
    );
    assert!(cached.is_file());
    // Pulled, it is listed, and routed by its name: an unload asks nothing of it, and a call
    // reaches it (the file is no model: a 502 says so, naming it, as for a configured model).
    assert!(
        tags(&server).await.contains(&name),
        "{:?}",
        tags(&server).await
    );
    let unload = json!({"model": name, "keep_alive": 0, "stream": false});
    let (status, body) = post(&server, "/api/chat", &unload).await;
    assert_eq!(
        (status, &body["done_reason"]),
        (200, &json!("unload")),
        "{body}"
    );
    let (status, body) = chat(&server, &name).await;
    let error = body["error"].as_str().unwrap_or_else(|| panic!("{body}"));
    assert!(status == 502 && error.contains(&name), "{status}: {body}");
    // Deleted: gone from the lists, the routes and the cache.
    let (status, body) = delete(&server, &name).await;
    assert_eq!(status, 200, "{body}");
    assert!(!cached.exists());
    assert!(!tags(&server).await.contains(&name));
    assert_eq!(chat(&server, &name).await.0, 404);
    assert_eq!(delete(&server, &name).await.0, 404);
}

#[tokio::test]
async fn the_file_of_a_configured_local_model_is_not_deleted_even_once_pulled() {
    let hub = crate::hub::Hub::start(b"not a model either".repeat(40_000));
    let dir = folder("pull-in-use");
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let (name, cached) = hub_file(&dir);
    // A local model answers from the Hub's file. It loads on its first call (none comes): a
    // file that will not load is removed when it fails to, and this one is no model.
    let env = [
        ("AGENT_AS_MODEL_CACHE_DIR", cache.to_str().unwrap()),
        ("HF_ENDPOINT", hub.endpoint.as_str()),
        ("HF_TOKEN", crate::hub::TOKEN),
    ];
    let models = dir.join("models.toml");
    let entry =
        format!("[[models]]\nname = \"local\"\nbackend = \"local\"\nmodel_file = \"{name}\"\n");
    std::fs::write(&models, entry).unwrap();
    let args = ["--models", models.to_str().unwrap()];
    let server = Server::with_env(&dir, &args, &env).await;
    // Pulled, the name shares the backend's engine; deleted, it is refused with Ollama's
    // shape, naming the file and the model, and the file stays.
    assert_eq!(
        pull(&server, &name).await,
        (200, json!({"status": "success"}))
    );
    assert!(tags(&server).await.contains(&name));
    let (status, body) = delete(&server, &name).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"].as_str().unwrap_or_else(|| panic!("{body}"));
    assert!(
        message.contains(&name) && message.contains("'local'"),
        "{message}"
    );
    assert_eq!(body.as_object().unwrap().len(), 1, "Ollama's shape: {body}");
    assert!(cached.is_file(), "the file in use was deleted");
    assert!(tags(&server).await.contains(&name));
}

/// The embedded model's file in the cache under `cache` as an `hf:` file, fetched and checked
/// (a link, and its seal): its name and the link.
fn embedded_as_hub_file(cache: &Path) -> (String, PathBuf) {
    let model = crate::local::cached_model();
    let folder = cache.join("models/hf/acme/coder-GGUF");
    std::fs::create_dir_all(&folder).unwrap();
    let link = folder.join("coder.gguf");
    std::os::unix::fs::symlink(&model, &link).unwrap();
    let seal = std::fs::read_to_string(model.with_extension("gguf.sha256")).unwrap();
    std::fs::write(link.with_extension("gguf.sha256"), seal).unwrap();
    ("hf:acme/coder-GGUF/coder.gguf".to_owned(), link)
}

#[tokio::test]
async fn a_pulled_model_answers_an_ollama_chat() {
    let dir = folder("pull-chat");
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let (name, link) = embedded_as_hub_file(&cache);
    let _turn = crate::local::TURN.lock().await;
    let server = server(&dir, &cache, None, &["--local-context", "1024"]).await;
    assert_eq!(
        pull(&server, &name).await,
        (200, json!({"status": "success"}))
    );
    let (status, body) = chat(&server, &name).await;
    assert_eq!(status, 200, "{body}");
    let text = body["message"]["content"].as_str().unwrap_or_default();
    assert!(!text.trim().is_empty(), "{body}");
    // Deleted: the link goes, the embedded model's own file stays.
    assert_eq!(delete(&server, &name).await.0, 200);
    assert!(!link.exists() && crate::local::cached_model().is_file());
    assert_eq!(chat(&server, &name).await.0, 404);
}
