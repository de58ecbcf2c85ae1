//! The embedded model of a server started with `--backend local` (no models file), over HTTP:
//! Ollama's unload request (`keep_alive: 0`, nothing to answer) unloads it as it does a models
//! file's entries, and the next call naming it (by the name `/api/ps` listed) loads it again; and
//! `--local-queue` bounds the calls it takes: with every slot and place held by long streams
//! whose clients read slowly or not at all, each further call is refused with a 429 at once,
//! before any stream's head, and a place given back is taken by one call only.
//!
//! Nothing here is timed: each wait is for an outcome, bounded.

use crate::common::http_client;
use crate::http_api::embedded;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest any outcome here is waited for.
const WAIT: Duration = Duration::from_secs(60);

/// The names `/api/ps` lists (without `:latest`).
async fn running(url: &str) -> Vec<String> {
    let body: Value = http_client()
        .get(format!("{url}/api/ps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let name = m["name"].as_str().unwrap();
            name.strip_suffix(":latest").unwrap_or(name).to_owned()
        })
        .collect()
}

/// Waits (bounded) until `/api/ps` lists `want`.
async fn until_running(url: &str, want: &[&str]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = running(url).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/api/ps: {now:?}, wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn generate(url: &str, body: &Value) -> (u16, Value) {
    let r = http_client()
        .post(format!("{url}/api/generate"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn keep_alive_0_unloads_the_backend_local_model_and_a_call_naming_it_loads_it_again() {
    let file = crate::local::cached_model();
    let file = file.to_str().unwrap();
    // The default model, and a model file (whose name is the one its file gives it).
    for env in [vec![], vec![("AGENT_AS_MODEL_MODEL_FILE", file)]] {
        let (turn, server) = embedded(&env).await;
        let url = server.url.clone();
        let r = http_client()
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"max_tokens": 2, "messages": [{"role": "user", "content": "Say hi."}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{env:?}: {}", r.text().await.unwrap());
        // Loaded: `/api/ps` lists it, by the name a client calls it by.
        let deadline = Instant::now() + WAIT;
        let name = loop {
            if let [name] = &running(&url).await[..] {
                break name.clone();
            }
            assert!(Instant::now() < deadline, "{env:?}: never listed as loaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (status, body) = generate(&url, &json!({"model": name, "keep_alive": 0})).await;
        assert_eq!(status, 200, "{env:?}: {body}");
        assert_eq!(body["done_reason"], "unload", "{env:?}: {body}");
        until_running(&url, &[]).await;
        // A call naming it (as `/api/ps` did) is answered, and loads it again.
        let (status, body) = generate(
            &url,
            &json!({"model": name, "prompt": "Say hi.", "stream": false,
                    "options": {"num_predict": 3}}),
        )
        .await;
        assert_eq!(status, 200, "{env:?} {name:?}: {body}");
        assert!(
            !body["response"].as_str().unwrap_or_default().is_empty(),
            "{env:?}: {body}"
        );
        until_running(&url, &[name.as_str()]).await;
        drop(server);
        drop(turn);
    }
}

/// A long streamed chat completion sent on a connection of its own (whose receive buffer is
/// small, so that a client that reads nothing soon holds the server's writes up).
async fn long_stream(url: &str) -> TcpStream {
    let address = url.trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address.parse().unwrap()).await.unwrap();
    let body = json!({"stream": true, "max_tokens": 100_000, "temperature": 0,
        "messages": [{"role": "user",
                      "content": "Count from 1 to 100000, separated by commas."}]})
    .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// The status line of a response on `stream`.
async fn status_line(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    tokio::time::timeout(WAIT, async {
        while !head.ends_with(b"\r\n") {
            let n = stream.read(&mut byte).await.unwrap();
            assert!(n > 0, "closed before its head");
            head.extend_from_slice(&byte);
        }
    })
    .await
    .expect("no head");
    String::from_utf8_lossy(&head).trim().to_owned()
}

/// The embedded model's queue depth and busy slots, as `/metrics` says.
async fn queue(url: &str) -> (u64, u64) {
    let text = crate::common::metrics_text(url).await;
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("agent_as_model_{name}{{model=\"local\"}} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    (gauge("local_queue_depth"), gauge("local_slots_busy"))
}

/// Waits (bounded) until the model has `waiting` calls queued and its one slot busy.
async fn until_queued(url: &str, waiting: u64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = queue(url).await;
        if now == (waiting, 1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue and busy slots {now:?}, wanted ({waiting}, 1)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One more call, streamed, in one of three APIs: it must be refused at once (its head a 429
/// naming the queue's setting), never admitted (a 200 head).
async fn refused(url: &str, n: usize) {
    let prompt = "Count from 1 to 100000, separated by commas.";
    let (path, body) = match n % 3 {
        0 => (
            "/v1/chat/completions",
            json!({"stream": true, "max_tokens": 100_000,
                   "messages": [{"role": "user", "content": prompt}]}),
        ),
        1 => (
            "/v1/messages",
            json!({"model": "m", "stream": true, "max_tokens": 100_000,
                   "messages": [{"role": "user", "content": prompt}]}),
        ),
        _ => (
            "/api/chat",
            json!({"model": "qwen2.5-coder-0.5b-instruct", "options": {"num_predict": 100_000},
                   "messages": [{"role": "user", "content": prompt}]}),
        ),
    };
    let r = http_client()
        .post(format!("{url}{path}"))
        .timeout(WAIT)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = if status == 429 {
        r.text().await.unwrap()
    } else {
        String::new()
    };
    assert_eq!(status, 429, "call {n} on {path} was admitted: {text}");
    assert!(
        text.contains("busy") && text.contains("AGENT_AS_MODEL_LOCAL_QUEUE"),
        "{path}: {text}"
    );
}

#[tokio::test]
async fn with_every_slot_and_place_held_by_long_streams_each_further_call_is_refused_at_once() {
    // One slot, two places in the queue.
    let (_turn, server) = embedded(&[
        ("AGENT_AS_MODEL_LOCAL_SLOTS", "1"),
        ("AGENT_AS_MODEL_LOCAL_QUEUE", "2"),
    ])
    .await;
    let url = server.url.clone();
    // The first long answer takes the slot: its head comes with its first piece. Its client
    // then reads slowly.
    let mut first = long_stream(&url).await;
    assert_eq!(status_line(&mut first).await, "HTTP/1.1 200 OK");
    let slow = tokio::spawn(async move {
        let mut chunk = [0u8; 16];
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match first.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    // Two more wait in the queue; their clients read nothing.
    let second = long_stream(&url).await;
    until_queued(&url, 1).await;
    let third = long_stream(&url).await;
    until_queued(&url, 2).await;
    // Every further call is refused, again and again, while they hold their places.
    for n in 0..6 {
        refused(&url, n).await;
        until_queued(&url, 2).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A place given back (a waiting client gone) is taken by one call, and the next is
    // refused again.
    drop(third);
    until_queued(&url, 1).await;
    let fourth = long_stream(&url).await;
    until_queued(&url, 2).await;
    for n in 0..3 {
        refused(&url, n).await;
    }
    until_queued(&url, 2).await;
    slow.abort();
    drop((second, fourth));
}
