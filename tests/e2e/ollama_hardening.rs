//! Ollama's API hardened (issue 55) on the real binary: `DELETE /api/delete` refuses the `hf:`
//! file a configured model answers from (by its `hf:` name, or through a link) and still
//! deletes a fetched file no model uses; `--request-keep-alive ignore` keeps a client's
//! `keep_alive` (an unload request's `0`) from changing how long a model stays loaded for
//! everyone; `logprobs` and `top_logprobs` reach a provider as chat completions' (a bad one is
//! refused naming the field, as Ollama refuses it);
//! `think` asked of a model that does not reason is refused as Ollama refuses it (the embedded
//! model, which says so once loaded), while `think: false` or none keeps working.
//!
//! The first three need no model loaded (the local entries are never called: `preload =
//! false`, their files fakes in a cache of the test's own); the last loads the embedded model.

use crate::api_sdks::{Server, TOKEN, folder};
use crate::common::http_client;
use crate::common::openai::{Reply, Scripted, completion};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ANSWER: &str = "The capital of France is Paris.";

/// A request with the server's token: status, headers and the body as JSON (null if none).
pub async fn send(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = http_client()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let json = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (status, headers, json)
}

async fn post(
    server: &Server,
    path: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    send(server, reqwest::Method::POST, path, body).await
}

async fn delete(server: &Server, name: &str) -> (u16, Value) {
    let (status, _, body) = send(
        server,
        reqwest::Method::DELETE,
        "/api/delete",
        &json!({"model": name}),
    )
    .await;
    (status, body)
}

/// A fake `hf:` file in `cache`, as a fetch leaves it: `models/hf/OWNER/REPO/FILE`.
fn cached_hf(cache: &Path, repo: &str, file: &str) -> PathBuf {
    let path = cache.join("models/hf").join(repo).join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"GGUF not really a model").unwrap();
    path
}

/// The models as the MCP tool `list_models` describes them (over `/mcp`), by name.
async fn described(server: &Server, name: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"_meta": crate::http::meta(), "name": "list_models", "arguments": {}}});
    let r = http_client()
        .post(format!("{}/mcp", server.url))
        .bearer_auth(TOKEN)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "list_models")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let messages = crate::http::messages(&r.text().await.unwrap());
    let reply = messages.iter().find(|m| m["id"] == 1).unwrap();
    let text = reply["result"]["structuredContent"]["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"));
    let models: Vec<Value> = serde_json::from_str(text).unwrap();
    models
        .into_iter()
        .find(|m| m["id"] == name)
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test]
async fn delete_refuses_the_hf_file_a_configured_model_uses_and_deletes_one_none_uses() {
    let dir = folder("ollama-delete-used");
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let used = cached_hf(&cache, "acme/coder-GGUF", "coder.gguf");
    let linked = cached_hf(&cache, "acme/linked-GGUF", "q4/linked.gguf");
    let spare = cached_hf(&cache, "acme/spare-GGUF", "spare.gguf");
    // A second entry answers from the cached file through a link of its own.
    let link = dir.join("linked.gguf");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&linked, &link).unwrap();
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"coder\"\nbackend = \"local\"\n\
             model_file = \"hf:acme/coder-GGUF/coder.gguf\"\npreload = false\n\n\
             [[models]]\nname = \"linked\"\nbackend = \"local\"\nmodel_file = {:?}\n\
             preload = false\n",
            link.display().to_string()
        ),
    )
    .unwrap();
    let server = Server::with_env(
        &dir,
        &["--models", models.to_str().unwrap()],
        &[("AGENT_AS_MODEL_CACHE_DIR", cache.to_str().unwrap())],
    )
    .await;
    for (name, entry, path) in [
        ("hf:acme/coder-GGUF/coder.gguf", "coder", &used),
        ("hf:acme/linked-GGUF/q4/linked.gguf", "linked", &linked),
    ] {
        let (status, body) = delete(&server, name).await;
        assert_eq!(status, 400, "{name}: {body}");
        let message = body["error"].as_str().unwrap_or_else(|| panic!("{body}"));
        assert!(
            message.contains(&format!("'{entry}'")) && message.contains(name),
            "{message}"
        );
        assert_eq!(body.as_object().unwrap().len(), 1, "Ollama's shape: {body}");
        assert!(path.is_file(), "{name} was deleted");
    }
    // A fetched file no model answers from is the API's to delete.
    let (status, body) = delete(&server, "hf:acme/spare-GGUF/spare.gguf").await;
    assert_eq!(status, 200, "{body}");
    assert!(!spare.exists());
    // By its name, a configured model is refused as before.
    assert_eq!(delete(&server, "coder").await.0, 400);
}

/// A models file with one local entry, never loaded, that stays loaded 600 s with no call.
fn kept_model(name: &str) -> (PathBuf, PathBuf) {
    let dir = folder(name);
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"coder\"\nbackend = \"local\"\nmodel_file = {:?}\n\
             preload = false\nkeep_alive = 600\n",
            dir.join("never-loaded.gguf").display().to_string()
        ),
    )
    .unwrap();
    (dir, models)
}

#[tokio::test]
async fn an_operator_may_have_a_requests_keep_alive_ignored() {
    let unload = json!({"model": "coder", "keep_alive": 0, "stream": false});
    let (dir, models) = kept_model("ollama-keep-ignored");
    let server = Server::with_env(
        &dir,
        &["--models", models.to_str().unwrap()],
        &[("AGENT_AS_MODEL_REQUEST_KEEP_ALIVE", "ignore")],
    )
    .await;
    assert_eq!(described(&server, "coder").await["keep_alive_secs"], 600);
    for path in ["/api/chat", "/api/generate"] {
        let (status, headers, body) = post(&server, path, &unload).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["done"], true, "{body}");
        // The model keeps its own keep-alive: nobody unloaded it for the others.
        assert_eq!(described(&server, "coder").await["keep_alive_secs"], 600);
        let warning = headers["x-agent-as-model-warnings"].to_str().unwrap();
        assert!(
            warning.contains("keep_alive") && warning.contains("--request-keep-alive"),
            "{warning}"
        );
    }
    assert!(
        server.log().contains("keep_alive was ignored"),
        "{}",
        server.log()
    );
    drop(server);
    // Honoured, as by default, the same request sets it to 0 (unloaded once idle).
    let (dir, models) = kept_model("ollama-keep-honoured");
    let server = Server::start(&dir, &["--models", models.to_str().unwrap()]).await;
    let (status, headers, body) = post(&server, "/api/generate", &unload).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.get("x-agent-as-model-warnings").is_none());
    assert_eq!(described(&server, "coder").await["keep_alive_secs"], 0);
}

#[tokio::test]
async fn logprobs_reach_a_provider_bad_ones_are_named_and_think_still_reaches_it() {
    let provider = Scripted::start(vec![Reply::json(200, &completion(ANSWER))]).await;
    let dir = folder("ollama-logprobs");
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"paris\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream\"\nretries = 0\n",
            provider.url
        ),
    )
    .unwrap();
    let server = Server::start(&dir, &["--models", models.to_str().unwrap()]).await;
    let question = json!([{"role": "user", "content": "Capital of France?"}]);
    for (path, body, field) in [
        (
            "/api/chat",
            json!({"model": "paris", "messages": question, "logprobs": "yes"}),
            "logprobs",
        ),
        (
            "/api/chat",
            json!({"model": "paris", "messages": question, "logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (
            "/api/generate",
            json!({"model": "paris", "prompt": "Capital of France?", "logprobs": true,
                   "top_logprobs": -1}),
            "top_logprobs",
        ),
    ] {
        let (status, _, answer) = post(&server, path, &body).await;
        assert_eq!(status, 400, "{path} {body}: {answer}");
        let message = answer["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        assert!(message.starts_with(&format!("`{field}`")), "{message}");
        assert_eq!(answer.as_object().unwrap().len(), 1, "{answer}");
    }
    assert!(provider.seen().is_empty(), "a refused request reached it");
    // Asked for, they are asked of the provider; this one returns none, and the answer says so.
    let (status, headers, answer) = post(
        &server,
        "/api/generate",
        &json!({"model": "paris", "prompt": "Capital of France?", "stream": false,
                "logprobs": true, "top_logprobs": 2}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("logprobs").is_none(), "{answer}");
    let warnings = headers["x-agent-as-model-warnings"].to_str().unwrap();
    assert!(warnings.contains("reported none"), "{warnings}");
    let sent = &provider.seen()[0].body;
    assert_eq!(
        (&sent["logprobs"], &sent["top_logprobs"]),
        (&json!(true), &json!(2))
    );
    // Turned off, they ask for nothing; a provider, which does not say whether it reasons, is
    // asked to think, and `think: false` (or none) works as before.
    for think in [json!(true), json!(false), Value::Null] {
        let (status, headers, answer) = post(
            &server,
            "/api/chat",
            &json!({"model": "paris", "messages": question, "stream": false, "think": think,
                    "logprobs": false, "top_logprobs": 0}),
        )
        .await;
        assert_eq!(status, 200, "{think}: {answer}");
        assert_eq!(answer["message"]["content"], ANSWER);
        assert!(
            headers.get("x-agent-as-model-warnings").is_none(),
            "{headers:?}"
        );
    }
    assert_eq!(provider.seen().len(), 4);
}

/// The loaded models, as `/api/ps` lists them.
async fn running(server: &Server) -> Vec<String> {
    let r = http_client()
        .get(format!("{}/api/ps", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    body["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_embedded_model_refuses_think_and_stays_loaded_when_keep_alive_is_ignored() {
    let file = crate::local::cached_model();
    let dir = folder("ollama-embedded-hardening");
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"coder\"\nbackend = \"local\"\nmodel_file = {:?}\n\
             preload = false\n",
            file.display().to_string()
        ),
    )
    .unwrap();
    let _turn = crate::local::TURN.lock().await;
    let server = Server::with_env(
        &dir,
        &[
            "--models",
            models.to_str().unwrap(),
            "--local-context",
            "1024",
        ],
        &[("AGENT_AS_MODEL_REQUEST_KEEP_ALIVE", "ignore")],
    )
    .await;
    let question = json!([{"role": "user", "content": "Say hi."}]);
    // Qwen2.5-Coder does not reason: asked to, it is refused as Ollama refuses it (it is loaded
    // to know).
    for (path, body) in [
        (
            "/api/chat",
            json!({"model": "coder", "messages": question, "think": true}),
        ),
        (
            "/api/generate",
            json!({"model": "coder:latest", "prompt": "Say hi.", "think": "high"}),
        ),
    ] {
        let (status, _, answer) = post(&server, path, &body).await;
        let asked = body["model"].as_str().unwrap();
        assert_eq!(
            (status, answer),
            (
                400,
                json!({"error": format!("\"{asked}\" does not support thinking")})
            ),
            "{path}"
        );
    }
    for think in [json!(false), Value::Null] {
        let (status, _, answer) = post(
            &server,
            "/api/chat",
            &json!({"model": "coder", "messages": question, "stream": false, "think": think,
                    "options": {"num_predict": 2}}),
        )
        .await;
        assert_eq!(status, 200, "{think}: {answer}");
    }
    // `options.num_ctx` is the call's own context, within the model's: a prompt over it is
    // refused by name, and an answer ends where the context does.
    let count = json!([{"role": "user", "content": "Count from one to fifty in words."}]);
    let ask = |options: Value| json!({"model": "coder", "messages": count, "stream": false, "options": options});
    let (status, _, answer) = post(&server, "/api/chat", &ask(json!({"num_ctx": 8}))).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("num_ctx"),
        "{answer}"
    );
    let (status, _, whole) = post(&server, "/api/chat", &ask(json!({"num_predict": 40}))).await;
    assert_eq!(status, 200, "{whole}");
    let prompt = whole["prompt_eval_count"].as_u64().unwrap();
    assert!(whole["eval_count"].as_u64().unwrap() > 6, "{whole}");
    let (status, _, cut) = post(&server, "/api/chat", &ask(json!({"num_ctx": prompt + 6}))).await;
    assert_eq!(status, 200, "{cut}");
    assert_eq!(
        (cut["eval_count"].as_u64(), cut["done_reason"].as_str()),
        (Some(6), Some("length")),
        "{cut}"
    );
    assert_eq!(running(&server).await, ["coder:latest"]);
    // Ollama's unload request, ignored: the model stays loaded.
    let (status, _, answer) = post(
        &server,
        "/api/generate",
        &json!({"model": "coder", "keep_alive": 0, "stream": false}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(
            running(&server).await,
            ["coder:latest"],
            "unloaded:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
