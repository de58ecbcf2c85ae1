//! Many large tool schemas in one request compile off the async runtime's threads: `/healthz`
//! and other requests keep being answered while they compile. The requests name a model the
//! server does not have: they are parsed (their schemas compiled) and refused, so what is
//! measured is the compilation, not the provider's work.

use crate::common::http_client;
use crate::common::openai::{Reply, Scripted, completion};
use crate::http::start;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// 64 tools, each with 450 object parameters (83 KB of schema): 5.3 MB, under every limit.
/// `round` makes every schema new, so none comes from the cache.
fn request(round: usize) -> Value {
    let tools: Vec<Value> = (0..64)
        .map(|t| {
            let mut props = Map::new();
            for p in 0..450 {
                props.insert(
                    format!("r{round}_t{t}_p{p}"),
                    json!({"type": "object", "properties": {
                        "a": {"type": "integer", "minimum": 0},
                        "b": {"type": "string", "enum": ["x", "y"]},
                        "c": {"type": "array", "items": {"type": "number"}}},
                        "required": ["a"]}),
                );
            }
            json!({"type": "function", "function": {"name": format!("tool_{t}"),
                "parameters": {"type": "object", "properties": props}}})
        })
        .collect();
    json!({"model": "nobody", "messages": [{"role": "user", "content": "hi"}],
           "tools": tools})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_tool_schemas_compile_while_healthz_answers() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok"))]).await;
    let dir = std::env::temp_dir().join(format!("aam-schema-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let models = dir.join("models.toml");
    let entry = format!(
        "[[models]]\nname = \"scripted\"\nbackend = \"provider\"\nurl = \"{}\"\n\
         model = \"upstream\"\nretries = 0\n",
        provider.url
    );
    std::fs::write(&models, entry).unwrap();
    // Room for four such bodies at once (each is charged its copies and its 600,000 JSON
    // values), so that every request reaches its schemas' compilation.
    let server = start(&[
        ("AGENT_AS_MODEL_MODELS", models.to_str().unwrap()),
        ("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", "1073741824"),
    ])
    .await;
    let pid = server.child.0.id();
    let bodies: Vec<String> = (0..8).map(|r| request(r).to_string()).collect();
    assert!(
        bodies
            .iter()
            .all(|b| b.len() > 5_000_000 && b.len() < 6_000_000)
    );
    // Compiled, then refused: the model is not one of the server's.
    let refused = http_client()
        .post(format!("{}/v1/chat/completions", server.url))
        .header("content-type", "application/json")
        .body(request(99).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);

    // `/healthz`, every 100 ms, while the requests compile, each answered before the client's
    // deadline of a second.
    let done = Arc::new(AtomicBool::new(false));
    let polling = {
        let (done, url) = (done.clone(), format!("{}/healthz", server.url));
        tokio::spawn(async move {
            let mut answered = 0;
            while !done.load(Ordering::Relaxed) {
                let ok = http_client()
                    .get(&url)
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200);
                assert!(
                    ok,
                    "/healthz did not answer before the client's deadline of 1 s \
                     ({answered} answered before)"
                );
                answered += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answered
        })
    };
    // Four at a time (more than the server's async threads on a small machine), twice.
    for round in bodies.chunks(4) {
        let sent: Vec<_> = round
            .iter()
            .map(|body| {
                let (url, body) = (format!("{}/v1/chat/completions", server.url), body.clone());
                tokio::spawn(async move {
                    http_client()
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body)
                        .timeout(Duration::from_secs(120))
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                })
            })
            .collect();
        for request in sent {
            assert_eq!(request.await.unwrap().unwrap(), 404);
        }
    }
    done.store(true, Ordering::Relaxed);
    let answered = polling.await.unwrap();
    // Once the calls are freed (on blocking threads), the heap is handed back.
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "/healthz answered {answered} times; server RSS 2 s after 9 requests of 64 new schemas: {} MiB",
        crate::common::resident_kib(pid) / 1024
    );
    assert!(answered > 0, "/healthz was asked");
}
