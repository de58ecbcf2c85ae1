//! Stored Responses shared by replicas: a real `redis-server` (`scripts/peers` installs it), two
//! replicas of the real binary keeping Responses in it (`AGENT_AS_MODEL_RESPONSES_STORE`) behind
//! nginx (`deploy/nginx.conf`), answered by a scripted provider. A Response made through nginx
//! is read on each replica, continued on the other one than made it (the provider sees the
//! earlier turn), streamed and read on both, and deleted on one is gone on the other; the size
//! and time bounds hold in Redis; a Redis that is down, or stopped and silent, fails a request
//! with 503 within seconds while the server stays healthy, and one that comes up later is used.
//! And the memory store's count bound, and a store setting that is neither `memory` nor a Redis
//! URL refused at start.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::{Killed, free_port, http_client, peer};
use crate::http::{Replica, nginx};
use crate::http_api::{TOKEN, post, server_with};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `redis-server` the tests start: `AGENT_AS_MODEL_REDIS_SERVER`, else the one
/// `scripts/peers` links into `target/peers`.
fn redis_server_path() -> String {
    peer(
        "AGENT_AS_MODEL_REDIS_SERVER",
        &format!("{}/target/peers/redis-server", env!("CARGO_MANIFEST_DIR")),
    )
}

/// A `redis-server` of the test's own: its port, nothing saved to disk, killed when dropped.
pub(crate) struct Redis {
    child: Killed,
    pub(crate) port: u16,
    pub(crate) url: String,
}

/// A `redis-server` on `port`, once it answers `PING`.
async fn redis_on(port: u16) -> Redis {
    let exe = redis_server_path();
    let dir = std::env::temp_dir().join(format!("aam-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Killed(
        Command::new(&exe)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server at {exe} ({e}); scripts/test installs it \
                     (scripts/peers), or set AGENT_AS_MODEL_REDIS_SERVER"
                )
            }),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(reply) = try_command(port, &["PING"]).await
            && reply.starts_with("+PONG")
        {
            return Redis {
                child,
                port,
                url: format!("redis://127.0.0.1:{port}"),
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server at {exe} did not answer PING on port {port}");
}

pub(crate) async fn redis() -> Redis {
    redis_on(free_port()).await
}

/// One command sent to Redis in its own protocol: the reply's text, or `None` when nothing
/// answers within a second.
async fn try_command(port: u16, args: &[&str]) -> Option<String> {
    let work = async {
        let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let mut request = format!("*{}\r\n", args.len());
        for a in args {
            request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        socket.write_all(request.as_bytes()).await.ok()?;
        let mut reply = vec![0u8; 65536];
        let n = socket.read(&mut reply).await.ok()?;
        Some(String::from_utf8_lossy(&reply[..n]).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(1), work)
        .await
        .ok()
        .flatten()
}

pub(crate) async fn command(port: u16, args: &[&str]) -> String {
    try_command(port, args)
        .await
        .unwrap_or_else(|| panic!("redis did not answer {args:?}"))
}

/// A signal sent to a process by `kill`.
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

async fn create(base: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let (status, headers, text) = post(
        &format!("{base}/v1/responses"),
        &[("x-api-key", TOKEN)],
        body,
    )
    .await;
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, headers, body)
}

async fn get(url: &str) -> (u16, Value) {
    let r = http_client()
        .get(url)
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn delete(url: &str) -> (u16, Value) {
    let r = http_client()
        .delete(url)
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A replica answered by `provider` keeping Responses where `env` says.
async fn replica(name: &str, provider: &Scripted, env: &[(&str, &str)]) -> Replica {
    server_with(name, provider, "", env).await
}

#[tokio::test]
async fn replicas_behind_nginx_share_responses_kept_in_redis() {
    let redis = redis().await;
    let provider = Scripted::start(vec![
        Reply::json(200, &completion("Paris.")),
        Reply::json(200, &completion("Rome.")),
    ])
    .await;
    let store = [("AGENT_AS_MODEL_RESPONSES_STORE", redis.url.as_str())];
    let a = replica("store-redis-a", &provider, &store).await;
    let b = replica("store-redis-b", &provider, &store).await;
    let (_nginx, url) = nginx(&a, &b).await;

    // Made through nginx, by one of the replicas.
    let (status, headers, first) = create(
        &url,
        &json!({"model": "gpt-4o-mini", "input": "Capital of France?"}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap().to_owned();
    let upstream = headers["x-upstream"].to_str().unwrap().to_owned();
    let (maker, other) = if a.url.ends_with(&upstream) {
        (&a, &b)
    } else {
        assert!(b.url.ends_with(&upstream), "{upstream}");
        (&b, &a)
    };

    // Read on each replica directly, the response and its input alike.
    for r in [&a, &b] {
        let (status, kept) = get(&format!("{}/v1/responses/{id}", r.url)).await;
        assert_eq!(status, 200, "{} {kept}", r.url);
        assert_eq!(kept, first, "{}", r.url);
        let (status, items) = get(&format!("{}/v1/responses/{id}/input_items", r.url)).await;
        assert_eq!(status, 200, "{items}");
        assert_eq!(
            items["data"][0]["content"][0]["text"], "Capital of France?",
            "{items}"
        );
    }
    // Kept under the prefix, with the day's time to live.
    let key = format!("agent-as-model:response:{id}");
    let ttl = command(redis.port, &["PTTL", &key]).await;
    let ttl: u64 = ttl.trim().trim_start_matches(':').parse().unwrap();
    assert!(ttl > 86_000_000 && ttl <= 86_400_000, "{ttl}");

    // Continued on the replica that did not make it: the provider sees the earlier turn.
    let (status, _, second) = create(
        &other.url,
        &json!({"model": "gpt-4o-mini", "previous_response_id": id, "input": "And of Italy?"}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["previous_response_id"], id.as_str());
    assert_eq!(second["output"][0]["content"][0]["text"], "Rome.");
    let seen = provider.seen();
    assert_eq!(seen.len(), 2);
    let messages = seen[1].body["messages"].as_array().unwrap();
    let turns: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            ("user", "Capital of France?"),
            ("assistant", "Paris."),
            ("user", "And of Italy?")
        ],
        "{messages:#?}"
    );
    // The second turn, made by the other replica, is read on the maker.
    let second_id = second["id"].as_str().unwrap();
    let (status, kept) = get(&format!("{}/v1/responses/{second_id}", maker.url)).await;
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept, second);

    // A third turn streamed through nginx: stored before the stream ends, read on both.
    let (status, _, text) = post(
        &format!("{url}/v1/responses"),
        &[("x-api-key", TOKEN)],
        &json!({"model": "gpt-4o-mini", "previous_response_id": second_id,
                "input": "Thanks.", "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = crate::http_api::data(&text);
    let third = &events.last().unwrap()["response"];
    assert_eq!(third["status"], "completed", "{text}");
    for r in [&a, &b] {
        let at = format!("{}/v1/responses/{}", r.url, third["id"].as_str().unwrap());
        let (status, kept) = get(&at).await;
        assert_eq!(status, 200, "{kept}");
        assert_eq!(kept["previous_response_id"], second["id"]);
    }

    // Deleted on one replica, gone on the other.
    let (status, deleted) = delete(&format!("{}/v1/responses/{id}", maker.url)).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["deleted"], true);
    let (status, gone) = get(&format!("{}/v1/responses/{id}", other.url)).await;
    assert_eq!(status, 404, "{gone}");
    let (status, gone) = delete(&format!("{}/v1/responses/{id}", other.url)).await;
    assert_eq!(status, 404, "{gone}");
    let (status, _, refused) = create(
        &other.url,
        &json!({"model": "gpt-4o-mini", "previous_response_id": id, "input": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "previous_response_not_found");
    assert_eq!(command(redis.port, &["EXISTS", &key]).await.trim(), ":0");
}

#[tokio::test]
async fn redis_keeps_responses_within_the_size_and_for_the_time_set() {
    let redis = redis().await;
    let provider = Scripted::start(vec![Reply::json(200, &completion("Noted."))]).await;
    let r = replica(
        "store-redis-bounds",
        &provider,
        &[
            ("AGENT_AS_MODEL_RESPONSES_STORE", redis.url.as_str()),
            ("AGENT_AS_MODEL_RESPONSES_MAX_BYTES", "4000"),
            ("AGENT_AS_MODEL_RESPONSES_TTL_SECS", "1"),
        ],
    )
    .await;
    // Larger than the bound: answered, not stored.
    let (status, _, large) = create(
        &r.url,
        &json!({"model": "gpt-4o-mini", "input": "x".repeat(5000)}),
    )
    .await;
    assert_eq!(status, 200, "{large}");
    let (status, _) = get(&format!(
        "{}/v1/responses/{}",
        r.url,
        large["id"].as_str().unwrap()
    ))
    .await;
    assert_eq!(status, 404);
    // Within it: stored, then gone once its second is up.
    let (status, _, small) = create(&r.url, &json!({"model": "gpt-4o-mini", "input": "Hi"})).await;
    assert_eq!(status, 200, "{small}");
    let at = format!("{}/v1/responses/{}", r.url, small["id"].as_str().unwrap());
    assert_eq!(get(&at).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get(&at).await.0, 404);
    assert_eq!(
        command(redis.port, &["KEYS", "agent-as-model:response:*"])
            .await
            .trim(),
        "*0"
    );
}

/// How long a client of the Redis tests waits for an answer: a Redis that is down or silent
/// must fail the request before it.
const CLIENT_DEADLINE: Duration = Duration::from_secs(8);

/// The status and body of a continuation from `id` at `base`, answered before the client's
/// deadline.
async fn continued(base: &str, id: &str) -> (u16, Value) {
    let (status, headers, body) = crate::common::before(
        CLIENT_DEADLINE,
        "a continuation",
        create(
            base,
            &json!({"model": "gpt-4o-mini", "previous_response_id": id, "input": "More?"}),
        ),
    )
    .await;
    if status == 503 {
        assert_eq!(headers["retry-after"], "1", "{body}");
    }
    (status, body)
}

async fn healthy(r: &Replica) {
    let health = http_client()
        .get(format!("{}/healthz", r.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn a_redis_that_is_down_or_silent_fails_requests_within_seconds_and_the_server_lives() {
    // Started while nothing listens where Redis should be: the server comes up all the same.
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let r = replica(
        "store-redis-down",
        &provider,
        &[("AGENT_AS_MODEL_RESPONSES_STORE", url.as_str())],
    )
    .await;
    let (status, body) = continued(&r.url, "resp_earlier").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("Redis"),
        "{body}"
    );
    let (status, _) = get(&format!("{}/v1/responses/resp_earlier", r.url)).await;
    assert_eq!(status, 503);
    healthy(&r).await;

    // Redis comes up: the same server uses it.
    let redis = redis_on(port).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let made = loop {
        let (status, _, made) =
            create(&r.url, &json!({"model": "gpt-4o-mini", "input": "Hi"})).await;
        assert_eq!(status, 200, "{made}");
        let at = format!("{}/v1/responses/{}", r.url, made["id"].as_str().unwrap());
        if get(&at).await.0 == 200 {
            break made;
        }
        assert!(Instant::now() < deadline, "the server never reached Redis");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let id = made["id"].as_str().unwrap();
    let (status, body) = continued(&r.url, id).await;
    assert_eq!(status, 200, "{body}");

    // Stopped (it holds the connection and answers nothing): bounded, not a hang.
    let pid = redis.child.0.id();
    signal(pid, "STOP");
    let (status, body) = continued(&r.url, id).await;
    assert_eq!(status, 503, "{body}");
    healthy(&r).await;
    // An answer whose storing fails is still sent, before the client's deadline.
    let (status, _, answered) = crate::common::before(
        CLIENT_DEADLINE,
        "an answer whose storing fails",
        create(&r.url, &json!({"model": "gpt-4o-mini", "input": "Hi"})),
    )
    .await;
    assert_eq!(status, 200, "{answered}");

    // Killed: refused at once.
    drop(redis);
    let (status, body) = continued(&r.url, id).await;
    assert_eq!(status, 503, "{body}");
    healthy(&r).await;
}

#[tokio::test]
async fn the_memory_store_forgets_the_oldest_past_its_count() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Noted."))]).await;
    let r = replica(
        "store-memory-count",
        &provider,
        &[("AGENT_AS_MODEL_RESPONSES_MAX_ENTRIES", "2")],
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (status, _, made) = create(
            &r.url,
            &json!({"model": "gpt-4o-mini", "input": format!("turn {i}")}),
        )
        .await;
        assert_eq!(status, 200, "{made}");
        ids.push(made["id"].as_str().unwrap().to_owned());
    }
    let mut kept = Vec::new();
    for id in &ids {
        kept.push(get(&format!("{}/v1/responses/{id}", r.url)).await.0);
    }
    assert_eq!(kept, [404, 200, 200]);
}

#[test]
fn a_store_that_is_neither_memory_nor_redis_is_refused_at_start() {
    let port = free_port();
    let out = crate::common::server::Server::new()
        .command()
        .env("AGENT_AS_MODEL_HTTP", format!("127.0.0.1:{port}"))
        .env("AGENT_AS_MODEL_RESPONSES_STORE", "postgres://db:5432")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("AGENT_AS_MODEL_RESPONSES_STORE") && stderr.contains("redis://"),
        "{stderr}"
    );
    // A Redis URL that does not parse is refused without repeating its password.
    let out = crate::common::server::Server::new()
        .command()
        .env("AGENT_AS_MODEL_HTTP", format!("127.0.0.1:{port}"))
        .env("AGENT_AS_MODEL_RESPONSES_STORE", "redis://:hunter2@")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("AGENT_AS_MODEL_RESPONSES_STORE") && !stderr.contains("hunter2"),
        "{stderr}"
    );
}
