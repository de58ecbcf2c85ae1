//! Ollama's names and pulls hardened (issue 55) on the real binary: a name resolves the same way
//! on every Ollama route (`/api/chat`, `/api/generate`, `/api/show`, `/api/embed`,
//! `/api/embeddings`, `/api/pull`, `/api/delete`): every name `/api/tags` lists (with or
//! without `:latest`, aliases too) and the default name reach the model, and any other name is
//! the same 404 on all of them, on a server of one backend (flags), of one provider entry and
//! of two. A pull of an `hf:` file that fails (an odd name, a Hub that refuses or is not there,
//! a cache it cannot write) leaves the cache as it was and names the file, never a path of the
//! cache.

use crate::common::http_client;
use crate::common::openai::{Reply, Scripted};
use crate::http::{Replica, start, start_logging};
use crate::http_api::{TOKEN, server_with};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const ANSWER: &str = "The capital of France is Paris.";

/// A provider's answer that serves as a chat completion and as an embeddings list alike (the
/// scripted provider answers every path with it).
fn both() -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "upstream",
           "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": ANSWER}}],
           "data": [{"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}],
           "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}})
}

fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-ollama-names-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A request with the server's token: the status and the body's text.
async fn call(
    server: &Replica,
    method: reqwest::Method,
    path: &str,
    body: &Value,
) -> (u16, String) {
    let r = http_client()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

async fn post(server: &Replica, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = call(server, reqwest::Method::POST, path, body).await;
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
    (status, body)
}

/// Every name `/api/tags` lists.
async fn listed(server: &Replica) -> Vec<String> {
    let r = http_client()
        .get(format!("{}/api/tags", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let tags: Value = r.json().await.unwrap();
    tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The bodies each route is asked with, for the model `name`.
fn requests(name: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "/api/chat",
            json!({"model": name, "stream": false,
                   "messages": [{"role": "user", "content": "Capital of France?"}]}),
        ),
        (
            "/api/generate",
            json!({"model": name, "stream": false, "prompt": "Capital of France?"}),
        ),
        ("/api/show", json!({"model": name})),
        ("/api/embed", json!({"model": name, "input": "Paris"})),
        ("/api/embeddings", json!({"model": name, "prompt": "Paris"})),
        ("/api/pull", json!({"model": name, "stream": false})),
    ]
}

/// Every name the server lists, and the default name, answers on every route; names it does
/// not list are the same 404 on every route.
async fn names_agree(server: &Replica, what: &str, unknown: &[&str]) {
    let mut names = listed(server).await;
    assert!(!names.is_empty(), "{what}: nothing listed");
    names.extend([
        "agent-default".to_owned(),
        "agent-default:latest".to_owned(),
    ]);
    for name in &names {
        for (path, body) in requests(name) {
            let (status, answer) = post(server, path, &body).await;
            assert_eq!(status, 200, "{what}: {path} of {name:?}: {answer}");
            match path {
                "/api/chat" => assert_eq!(answer["message"]["content"], ANSWER, "{answer}"),
                "/api/generate" => assert_eq!(answer["response"], ANSWER, "{answer}"),
                "/api/embed" => {
                    let vectors = answer["embeddings"].as_array().unwrap();
                    assert_eq!(vectors.len(), 1, "{answer}");
                    assert_eq!(vectors[0].as_array().unwrap().len(), 2, "{answer}");
                }
                "/api/embeddings" => {
                    assert_eq!(answer["embedding"].as_array().unwrap().len(), 2, "{answer}");
                }
                "/api/pull" => assert_eq!(answer, json!({"status": "success"})),
                _ => {}
            }
        }
        // A configured model is known to delete too: not the API's to delete, but no 404.
        let (status, text) = call(
            server,
            reqwest::Method::DELETE,
            "/api/delete",
            &json!({"model": name}),
        )
        .await;
        assert_eq!(status, 400, "{what}: delete of {name:?}: {text}");
    }
    for name in unknown {
        let expected = json!({"error": format!("model '{name}' not found")});
        for (path, body) in requests(name) {
            let (status, answer) = post(server, path, &body).await;
            assert_eq!(
                (status, &answer),
                (404, &expected),
                "{what}: {path} of {name:?}"
            );
        }
        let (status, text) = call(
            server,
            reqwest::Method::DELETE,
            "/api/delete",
            &json!({"model": name}),
        )
        .await;
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (status, answer),
            (404, expected),
            "{what}: delete of {name:?}"
        );
    }
    // The loaded models (none of a provider) are listed under names that resolve.
    let r = http_client()
        .get(format!("{}/api/ps", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ps: Value = r.json().await.unwrap();
    for running in ps["models"].as_array().unwrap() {
        let name = running["name"].as_str().unwrap();
        let (status, answer) = post(server, "/api/show", &json!({"model": name})).await;
        assert_eq!(status, 200, "{what}: ps lists {name:?}: {answer}");
    }
}

#[tokio::test]
async fn every_ollama_route_resolves_a_name_as_the_others_do() {
    let provider = Scripted::start(vec![Reply::json(200, &both())]).await;
    let unknown = ["nope", "nope:latest", "upstream:7b", "scripted:7b"];

    // One backend, from the flags: the provider's model is the one name.
    let flags = start(&[
        ("AGENT_AS_MODEL_BACKEND", "provider"),
        ("AGENT_AS_MODEL_PROVIDER_URL", provider.url.as_str()),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "upstream"),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    assert!(listed(&flags).await.contains(&"upstream:latest".to_owned()));
    names_agree(&flags, "one backend", &unknown).await;
    drop(flags);

    // One provider entry of a models file, with two aliases.
    let one = server_with("ollama-names-one", &provider, "", &[]).await;
    names_agree(&one, "one entry", &unknown).await;
    drop(one);

    // Two entries; the default is the second, one of whose aliases carries a tag.
    let dir = folder("two");
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "default = \"weather\"\n\n[[models]]\nname = \"paris\"\naliases = [\"llama3.2\"]\n\
             backend = \"provider\"\nurl = \"{0}\"\nmodel = \"upstream-paris\"\nretries = 0\n\n\
             [[models]]\nname = \"weather\"\naliases = [\"helper:7b\"]\nbackend = \"provider\"\n\
             url = \"{0}\"\nmodel = \"upstream-weather\"\nretries = 0\n",
            provider.url
        ),
    )
    .unwrap();
    let two = start(&[
        ("AGENT_AS_MODEL_MODELS", models.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    let names = listed(&two).await;
    for name in ["paris", "llama3.2:latest", "weather:latest", "helper:7b"] {
        assert!(names.contains(&name.to_owned()), "{name}: {names:?}");
    }
    names_agree(
        &two,
        "two entries",
        &[unknown.as_slice(), &["helper"]].concat(),
    )
    .await;
    // The default name reaches the default entry.
    let before = provider.seen().len();
    let (status, _) = post(
        &two,
        "/api/generate",
        &json!({"model": "agent-default", "stream": false, "prompt": "hi"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(provider.seen()[before].body["model"], "upstream-weather");
}

/// Every file and folder under `dir`, relative to it (folders end in `/`), sorted.
fn snapshot(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                out.push(format!("{relative}/"));
                walk(root, &path, out);
            } else {
                out.push(relative);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A pull, whole (`stream: false`): the status and the body.
async fn pull_whole(server: &Replica, name: &str) -> (u16, Value) {
    post(
        server,
        "/api/pull",
        &json!({"model": name, "stream": false}),
    )
    .await
}

/// A pull, streamed: the status and the lines (or the one error object).
async fn pull_streamed(server: &Replica, name: &str) -> (u16, Vec<Value>) {
    let (status, text) = call(
        server,
        reqwest::Method::POST,
        "/api/pull",
        &json!({"model": name}),
    )
    .await;
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (status, lines)
}

/// A cache with a fetched file in it, and an empty folder of its own.
fn cache_in(dir: &Path) -> PathBuf {
    let cache = dir.join("cache");
    let kept = cache.join("models/hf/acme/kept-GGUF/kept.gguf");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    std::fs::write(&kept, b"GGUF kept").unwrap();
    std::fs::create_dir_all(cache.join("models/hf/emptied")).unwrap();
    cache
}

#[tokio::test]
async fn failed_pulls_leave_the_cache_as_it_was() {
    let dir = folder("pull-fails");
    let cache = cache_in(&dir);
    let before = snapshot(&cache);
    let hub = crate::hub::Hub::start(b"GGUF".to_vec());
    let provider = Scripted::start(vec![Reply::json(200, &both())]).await;
    let cache_dir = cache.to_str().unwrap();

    // Odd names are refused before anything is made, naming `model`.
    let odd = [
        "hf:o/r/%2e%2e/x.gguf".to_owned(),
        "hf:o/r/%2E%2e/%2e%2e/x.gguf".to_owned(),
        "hf:o/r/a%2fb.gguf".to_owned(),
        "hf:o/r//x.gguf".to_owned(),
        "hf:o/r/a//x.gguf".to_owned(),
        format!("hf:o/r/{}.gguf", "a".repeat(300)),
        format!("hf:o/{}/x.gguf", "r".repeat(300)),
        format!("hf:o/r/{}x.gguf", "d/".repeat(2100)),
        format!("hf:o/r/{}x.gguf", "abcdefgh/".repeat(200)),
    ];
    // The Hub is not there (a closed port).
    let closed = server_with(
        "ollama-names-closed",
        &provider,
        "",
        &[
            ("AGENT_AS_MODEL_CACHE_DIR", cache_dir),
            ("HF_ENDPOINT", "http://127.0.0.1:9"),
        ],
    )
    .await;
    for name in &odd {
        let (status, e) = pull_whole(&closed, name).await;
        assert_eq!(status, 400, "{name}: {e}");
        let message = e["error"].as_str().unwrap();
        assert!(message.starts_with("`model`: "), "{message}");
        let (status, lines) = pull_streamed(&closed, name).await;
        assert_eq!(status, 400, "{name}: {lines:?}");
    }
    for name in [
        "hf:o/r/x.gguf",
        "hf:emptied/r/sub/x.gguf",
        "hf:acme/kept-GGUF/other.gguf",
    ] {
        let (status, e) = pull_whole(&closed, name).await;
        assert_eq!(status, 502, "{name}: {e}");
        let message = e["error"].as_str().unwrap();
        assert!(message.contains(name), "{message}");
        assert!(!message.contains(cache_dir), "{message}");
        let (status, lines) = pull_streamed(&closed, name).await;
        assert_eq!(status, 200);
        let last = lines.last().unwrap();
        let message = last["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{lines:?}"));
        assert!(message.contains(name), "{message}");
        assert!(!message.contains(cache_dir), "{message}");
    }
    drop(closed);
    assert_eq!(
        snapshot(&cache),
        before,
        "after pulls from a Hub that is not there"
    );

    // The Hub refuses: without a token, and a file it does not have.
    for token in ["", crate::hub::TOKEN] {
        let refused = server_with(
            "ollama-names-refused",
            &provider,
            "",
            &[
                ("AGENT_AS_MODEL_CACHE_DIR", cache_dir),
                ("HF_ENDPOINT", &hub.endpoint),
                ("HF_TOKEN", token),
            ],
        )
        .await;
        for name in [
            format!("hf:{}/{}", crate::hub::REPO, crate::hub::FILE),
            format!("hf:{}/missing.gguf", crate::hub::REPO),
            "hf:acme/elsewhere/deep/er/x.gguf".to_owned(),
        ] {
            // With the token the Hub's one file would be fetched.
            if !token.is_empty() && name.ends_with(crate::hub::FILE) {
                continue;
            }
            let (status, e) = pull_whole(&refused, &name).await;
            assert_eq!(status, 502, "{name}: {e}");
            let message = e["error"].as_str().unwrap();
            assert!(message.contains(&name), "{message}");
            assert!(!message.contains(cache_dir), "{message}");
            let (_, lines) = pull_streamed(&refused, &name).await;
            assert!(lines.last().unwrap()["error"].is_string(), "{lines:?}");
        }
        drop(refused);
        assert_eq!(snapshot(&cache), before, "after pulls the Hub refused");
    }
}

/// A cache the server cannot write: the pull's error names the `hf:` file and what went wrong,
/// the log the path.
#[tokio::test]
async fn a_failed_pull_names_the_file_and_no_path_of_the_cache() {
    let dir = folder("pull-path");
    let cache = cache_in(&dir);
    // Where the file's folder would be, a file: no folder can be made there.
    std::fs::write(cache.join("models/hf/blocked"), b"not a folder").unwrap();
    let before = snapshot(&cache);
    let cache_dir = cache.to_str().unwrap();
    let provider = Scripted::start(vec![Reply::json(200, &both())]).await;
    let models = crate::http_api::models_file("ollama-names-path", &provider);
    let log = dir.join("server.log");
    let server = start_logging(
        &[
            ("AGENT_AS_MODEL_MODELS", models.to_str().unwrap()),
            ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
            ("AGENT_AS_MODEL_CACHE_DIR", cache_dir),
            ("HF_ENDPOINT", "http://127.0.0.1:9"),
            ("RUST_LOG", "warn"),
        ],
        std::fs::File::create(&log).unwrap().into(),
    )
    .await;
    let name = "hf:blocked/r/x.gguf";
    let (status, e) = pull_whole(&server, name).await;
    assert_eq!(status, 502, "{e}");
    let message = e["error"].as_str().unwrap();
    assert!(message.starts_with(&format!("{name}: ")), "{message}");
    assert!(message.contains("model cache"), "{message}");
    assert!(!message.contains(cache_dir), "{message}");
    let (status, lines) = pull_streamed(&server, name).await;
    assert_eq!(status, 200);
    let message = lines.last().unwrap()["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(message.starts_with(&format!("{name}: ")), "{message}");
    assert!(!message.contains(cache_dir), "{message}");
    drop(server);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains(cache_dir),
        "the log names no path: {logged}"
    );
    assert_eq!(snapshot(&cache), before);
}
