//! Gateway overhead on the model APIs over HTTP: agent-as-model and LiteLLM's proxy in front
//! of the same scripted OpenAI-compatible upstream, against the upstream itself as the floor.
//!
//! `cargo bench --bench gateway` starts, in this bench process, a minimal upstream (hyper, on a
//! runtime of its own) that answers `POST /v1/chat/completions` at once: with `stream: true` a
//! short SSE stream (a role chunk, three content chunks, a finish chunk, a usage chunk when
//! `stream_options.include_usage` asks, `[DONE]`), otherwise one `chat.completion` JSON. It then
//! starts the agent-as-model binary built with the bench (`--http` with a models file whose one
//! provider entry, `stream = true`, points at the upstream) and LiteLLM's proxy (its `litellm`
//! CLI, one `openai/` model at the same upstream, no database); both require the same bearer
//! token (LiteLLM refuses to start without a master key). Each is checked once (a streamed and
//! a non-streamed answer, assembled and compared), then driven, like the upstream directly, by
//! `clients` concurrent streaming clients (reqwest, keep-alive), each sending one request after
//! the other, for a warm-up and then a fixed measured time (what counts is every request that
//! ends inside it). Reported per target: requests/s, latency p50/p99 (send to the stream's
//! end), time to first byte p50/p99 (send to the first body chunk), errors, and the overhead:
//! each gateway minus the floor in the same run. Three runs (the order of the targets rotates),
//! then medians. Nothing here asserts anything about time.
//!
//! Environment: `BENCH_GATEWAY_SECS` (measured seconds per target, default 10),
//! `BENCH_GATEWAY_WARMUP_SECS` (default 3), `BENCH_GATEWAY_RUNS` (default 3),
//! `BENCH_GATEWAY_CLIENTS` (comma-separated levels, default `64,1`), `BENCH_SERVER` (another
//! agent-as-model binary), `BENCH_LITELLM` (another `litellm` executable; default
//! `target/peers/venv/bin/litellm`, which `scripts/test` installs), `BENCH_LITELLM_WORKERS`
//! (its `--num_workers`, default 1, LiteLLM's default).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "common/port.rs"]
mod port;
#[path = "common/rss.rs"]
mod rss;

use port::free_port;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The text the upstream streams, in three pieces.
const PIECES: [&str; 3] = ["Hello", " from", " upstream."];

/// The token both gateways require (LiteLLM's master key, agent-as-model's `--auth-token`):
/// LiteLLM refuses to start without one, and both then check it on every request.
const KEY: &str = "sk-bench-gateway-key-0123456789abcdef";

// ---------------------------------------------------------------------------------------------
// The scripted upstream.

fn chunk(delta: Value, finish: Value) -> String {
    json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000,
           "model": "upstream", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

fn usage() -> Value {
    json!({"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12})
}

/// The SSE events of one streamed answer, each a whole `data:` event.
fn stream_events(include_usage: bool) -> Vec<Bytes> {
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in PIECES {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    if include_usage {
        events.push(
            json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                   "created": 1_700_000_000, "model": "upstream", "choices": [],
                   "usage": usage()})
            .to_string(),
        );
    }
    events.push("[DONE]".to_owned());
    events
        .into_iter()
        .map(|e| Bytes::from(format!("data: {e}\n\n")))
        .collect()
}

fn completion_json() -> Bytes {
    Bytes::from(
        json!({"id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000,
               "model": "upstream",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": PIECES.concat()}}],
               "usage": usage()})
        .to_string(),
    )
}

type Frames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;
type UpstreamBody = Either<Full<Bytes>, StreamBody<Frames>>;

async fn upstream_answer(
    request: hyper::Request<hyper::body::Incoming>,
    streamed: Vec<Bytes>,
    streamed_usage: Vec<Bytes>,
    json_body: Bytes,
) -> Result<hyper::Response<UpstreamBody>, Infallible> {
    let not_found = |status: u16| {
        hyper::Response::builder()
            .status(status)
            .body(Either::Left(Full::new(Bytes::from_static(b"{}"))))
            .unwrap()
    };
    if request.method() != hyper::Method::POST
        || !request.uri().path().ends_with("/chat/completions")
    {
        return Ok(not_found(404));
    }
    let Ok(body) = request.into_body().collect().await else {
        return Ok(not_found(400));
    };
    let body: Value = serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null);
    if body["stream"] == true {
        let events = if body["stream_options"]["include_usage"] == true {
            streamed_usage
        } else {
            streamed
        };
        let frames: Vec<Result<Frame<Bytes>, Infallible>> =
            events.into_iter().map(|e| Ok(Frame::data(e))).collect();
        Ok(hyper::Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(Either::Right(StreamBody::new(futures_util::stream::iter(
                frames,
            ))))
            .unwrap())
    } else {
        Ok(hyper::Response::builder()
            .header("content-type", "application/json")
            .header("content-length", json_body.len())
            .body(Either::Left(Full::new(json_body)))
            .unwrap())
    }
}

/// Serves the upstream on `listener` (HTTP/1.1, keep-alive), on the current runtime.
async fn upstream(listener: tokio::net::TcpListener) {
    let streamed = stream_events(false);
    let streamed_usage = stream_events(true);
    let json_body = completion_json();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (streamed, streamed_usage, json_body) =
            (streamed.clone(), streamed_usage.clone(), json_body.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |r| {
                upstream_answer(
                    r,
                    streamed.clone(),
                    streamed_usage.clone(),
                    json_body.clone(),
                )
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Starts the upstream on a runtime of its own (so that it does not share worker queues with
/// the clients); returns its base URL (`…/v1`).
fn start_upstream() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("upstream")
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            upstream(tokio::net::TcpListener::from_std(listener).unwrap()).await;
        });
    });
    url
}

// ---------------------------------------------------------------------------------------------
// The gateways.

/// A started gateway; the process (and, for LiteLLM, its group) is killed on drop.
struct Gateway {
    child: std::process::Child,
    /// Base URL of the OpenAI API (`…/v1`).
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // Each gateway leads its own process group (LiteLLM's workers are its children).
        // SAFETY: kill(2) on a process group this bench created; no memory is involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` as the leader of a new process group, its output to `log`.
fn spawn_group(cmd: &mut std::process::Command, log: &std::path::Path) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::File::create(log).unwrap();
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()))
}

/// Waits (bounded) until `url` answers 200; fails at once if the process ends.
async fn wait_ready(
    client: &reqwest::Client,
    gateway: &mut Gateway,
    url: &str,
    what: &str,
    within: Duration,
    log: &std::path::Path,
) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = gateway.child.try_wait() {
            let out = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = out
                .chars()
                .rev()
                .take(3000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            panic!("{what} exited ({status}) before answering {url}:\n{tail}");
        }
        let ok = client
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not answer {url} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn bench_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-bench-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ours_binary() -> std::path::PathBuf {
    std::env::var_os("BENCH_SERVER")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-as-model").into())
}

async fn start_ours(client: &reqwest::Client, upstream: &str) -> Gateway {
    let models = bench_dir().join("models.toml");
    std::fs::write(
        &models,
        format!(
            "default = \"bench\"\n\n[[models]]\nname = \"bench\"\nbackend = \"provider\"\n\
             url = \"{upstream}\"\nmodel = \"upstream\"\nstream = true\nretries = 0\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let log = bench_dir().join("agent-as-model.log");
    let child = spawn_group(
        std::process::Command::new(ours_binary())
            .args(["--http", &format!("127.0.0.1:{port}")])
            .arg("--models")
            .arg(&models)
            .env("RUST_LOG", "error")
            .env("AGENT_AS_MODEL_AUTH_TOKEN", KEY),
        &log,
    );
    ready(
        client,
        child,
        port,
        "/healthz",
        ("agent-as-model", &log),
        30,
    )
    .await
}

fn litellm_binary() -> std::path::PathBuf {
    std::env::var_os("BENCH_LITELLM")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/peers/venv/bin/litellm")
        })
}

async fn start_litellm(client: &reqwest::Client, upstream: &str, workers: u32) -> Gateway {
    let config = bench_dir().join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: bench\n    litellm_params:\n      \
             model: openai/upstream\n      api_base: {upstream}\n      api_key: sk-none\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let exe = litellm_binary();
    let log = bench_dir().join("litellm.log");
    let child = spawn_group(
        std::process::Command::new(&exe)
            .arg("--config")
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--num_workers", &workers.to_string()])
            .env("LITELLM_LOG", "ERROR")
            // No fetch of the model price list at start.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("LITELLM_MASTER_KEY", KEY)
            .env_remove("DATABASE_URL"),
        &log,
    );
    ready(
        client,
        child,
        port,
        "/health/liveliness",
        ("LiteLLM", &log),
        180,
    )
    .await
}

/// The gateway `child` on `port` once `health` answers (at most `secs` s); `name` and its log
/// say what did not start.
async fn ready(
    client: &reqwest::Client,
    child: std::process::Child,
    port: u16,
    health: &str,
    (name, log): (&str, &std::path::Path),
    secs: u64,
) -> Gateway {
    let base = format!("http://127.0.0.1:{port}");
    let mut gateway = Gateway {
        child,
        url: format!("{base}/v1"),
    };
    wait_ready(
        client,
        &mut gateway,
        &format!("{base}{health}"),
        name,
        Duration::from_secs(secs),
        log,
    )
    .await;
    gateway
}

// ---------------------------------------------------------------------------------------------
// The clients.

fn request_body(stream: bool) -> String {
    json!({"model": "bench", "stream": stream, "max_tokens": 16,
           "messages": [{"role": "user", "content": "Say hello"}]})
    .to_string()
}

/// One check per target: a streamed answer assembles to the upstream's text and ends with
/// `[DONE]`, and a non-streamed one carries it.
async fn check(client: &reqwest::Client, base: &str, what: &str) {
    let url = format!("{base}/chat/completions");
    let post = |stream: bool| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", &format!("Bearer {KEY}"))
            .body(request_body(stream))
            .timeout(Duration::from_secs(30))
            .send()
    };
    let r = post(true).await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{what}: {status}: {text}");
    let mut shown = String::new();
    for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
        let data = data.trim();
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            shown.push_str(t);
        }
    }
    assert_eq!(shown, PIECES.concat(), "{what}: {text}");
    assert!(text.trim_end().ends_with("[DONE]"), "{what}: {text}");
    let r = post(false).await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{what}: {status}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    assert_eq!(
        v["choices"][0]["message"]["content"],
        PIECES.concat(),
        "{what}: {text}"
    );
}

/// What one request took: to the first body chunk, and to the end of the stream.
struct Sample {
    ttfb: Duration,
    total: Duration,
}

/// One streamed request, read to its end; `None` for anything but a 200 ending in `[DONE]`.
async fn one(client: &reqwest::Client, url: &str, body: &str) -> Option<Sample> {
    let started = Instant::now();
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", &format!("Bearer {KEY}"))
        .body(body.to_owned())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut ttfb = None;
    let mut tail: Vec<u8> = Vec::new();
    while let Some(bytes) = response.chunk().await.ok()? {
        ttfb.get_or_insert_with(|| started.elapsed());
        tail.extend_from_slice(&bytes);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
    }
    let total = started.elapsed();
    let done = String::from_utf8_lossy(&tail)
        .trim_end()
        .ends_with("[DONE]");
    done.then_some(Sample { ttfb: ttfb?, total })
}

struct Level {
    rate: f64,
    errors: usize,
    /// Sorted.
    total: Vec<Duration>,
    /// Sorted.
    ttfb: Vec<Duration>,
}

/// `clients` clients, one request after another each, for `warmup` then `secs`. What counts is
/// every request that ends inside the measured window, whenever it started (so a slow gateway's
/// first answers are not lost to the warm-up); the rate is their number over the window.
async fn level(base: &str, clients: usize, warmup: f64, secs: f64) -> Level {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .unwrap();
    let url = format!("{base}/chat/completions");
    let body = request_body(true);
    let measured_from = Instant::now() + Duration::from_secs_f64(warmup);
    let until = measured_from + Duration::from_secs_f64(secs);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        tasks.spawn(async move {
            let mut seen = Vec::new();
            let mut errors = 0usize;
            while Instant::now() < until {
                let sample = one(&client, &url, &body).await;
                let ended = Instant::now();
                if ended < measured_from || ended > until {
                    continue;
                }
                match sample {
                    Some(s) => seen.push(s),
                    None => errors += 1,
                }
            }
            (seen, errors)
        });
    }
    let (mut total, mut ttfb, mut errors) = (Vec::new(), Vec::new(), 0usize);
    while let Some(r) = tasks.join_next().await {
        let (seen, e) = r.unwrap();
        errors += e;
        for s in seen {
            total.push(s.total);
            ttfb.push(s.ttfb);
        }
    }
    total.sort();
    ttfb.sort();
    Level {
        rate: total.len() as f64 / secs,
        errors,
        total,
        ttfb,
    }
}

fn pct(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

/// The figures of one target at one level in one run.
#[derive(Clone, Copy)]
struct Figures {
    rate: f64,
    p50: f64,
    p99: f64,
    ttfb50: f64,
    ttfb99: f64,
    errors: usize,
    count: usize,
}

impl From<&Level> for Figures {
    fn from(l: &Level) -> Self {
        Figures {
            rate: l.rate,
            p50: pct(&l.total, 0.5),
            p99: pct(&l.total, 0.99),
            ttfb50: pct(&l.ttfb, 0.5),
            ttfb99: pct(&l.ttfb, 0.99),
            errors: l.errors,
            count: l.total.len(),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

const TARGETS: [&str; 3] = ["upstream (floor)", "agent-as-model", "LiteLLM"];

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "{cores} cores, {cpu}; load average at start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

async fn bench() {
    agent_as_model::install_tls();
    let secs = env_f64("BENCH_GATEWAY_SECS", 10.0);
    let warmup = env_f64("BENCH_GATEWAY_WARMUP_SECS", 3.0);
    let runs = env_f64("BENCH_GATEWAY_RUNS", 3.0).max(1.0) as usize;
    let workers = env_f64("BENCH_LITELLM_WORKERS", 1.0).max(1.0) as u32;
    let levels: Vec<usize> = std::env::var("BENCH_GATEWAY_CLIENTS")
        .unwrap_or_else(|_| "64,1".to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    println!("machine: {}", machine());
    println!(
        "agent-as-model: {}{}; driver and upstream: {} profile (dependencies optimised in both)",
        ours_binary().display(),
        if std::env::var_os("BENCH_SERVER").is_some() {
            " (BENCH_SERVER)"
        } else {
            " (built with this bench)"
        },
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        }
    );
    println!(
        "LiteLLM: {} --num_workers {workers}",
        litellm_binary().display()
    );
    println!(
        "{runs} runs; per target and level {warmup} s warm-up, {secs} s measured; levels {levels:?}"
    );

    let probe = reqwest::Client::new();
    let upstream = start_upstream();
    let ours = start_ours(&probe, &upstream).await;
    let started = Instant::now();
    let litellm = start_litellm(&probe, &upstream, workers).await;
    println!(
        "LiteLLM ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let bases = [upstream.clone(), ours.url.clone(), litellm.url.clone()];
    for (base, what) in bases.iter().zip(TARGETS) {
        check(&probe, base, what).await;
    }
    println!("each target checked: a streamed and a non-streamed answer, as the upstream sent it");

    // figures[level][run][target]
    let mut figures: Vec<Vec<[Figures; 3]>> = Vec::new();
    for &clients in &levels {
        let mut per_run = Vec::new();
        for run in 0..runs {
            let mut row: [Option<Figures>; 3] = [None; 3];
            // Rotate the order, so that no target is always measured first or last.
            for k in 0..3 {
                let t = (run + k) % 3;
                let l = level(&bases[t], clients, warmup, secs).await;
                row[t] = Some(Figures::from(&l));
            }
            let row = row.map(|f| f.unwrap());
            print_run(clients, run + 1, &row);
            per_run.push(row);
        }
        figures.push(per_run);
    }
    println!();
    println!(
        "peak resident memory (VmHWM): agent-as-model {:.1} MiB, LiteLLM {:.1} MiB (its main process)",
        rss::peak_mib(ours.child.id()).unwrap_or(f64::NAN),
        rss::peak_mib(litellm.child.id()).unwrap_or(f64::NAN)
    );
    for (clients, per_run) in levels.iter().zip(&figures) {
        print_summary(*clients, per_run);
    }
}

fn print_run(clients: usize, run: usize, row: &[Figures; 3]) {
    println!();
    println!("{clients} streaming clients, run {run}:");
    println!(
        "| target | requests/s | p50 | p99 | TTFB p50 | TTFB p99 | added p50 | added p99 | added TTFB p50 | requests | errors |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let floor = row[0];
    for (f, what) in row.iter().zip(TARGETS) {
        let added = |x: f64, y: f64| {
            if std::ptr::eq(f, &row[0]) {
                "—".to_owned()
            } else {
                format!("{:+.2} ms", x - y)
            }
        };
        println!(
            "| {what} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {} | {} | {} | {} | {} |",
            f.rate,
            f.p50,
            f.p99,
            f.ttfb50,
            f.ttfb99,
            added(f.p50, floor.p50),
            added(f.p99, floor.p99),
            added(f.ttfb50, floor.ttfb50),
            f.count,
            f.errors
        );
    }
    println!(
        "agent-as-model / LiteLLM throughput: {:.1}x",
        row[1].rate / row[2].rate
    );
}

fn print_summary(clients: usize, per_run: &[[Figures; 3]]) {
    let med = |f: &dyn Fn(&[Figures; 3]) -> f64| median(per_run.iter().map(f).collect());
    let spread = |f: &dyn Fn(&[Figures; 3]) -> f64| {
        let v: Vec<f64> = per_run.iter().map(f).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let show = |f: &dyn Fn(&[Figures; 3]) -> f64, digits: usize| {
        let (lo, hi) = spread(f);
        format!(
            "{:.*} ({:.*}, {:.*})",
            digits,
            med(f),
            digits,
            lo,
            digits,
            hi
        )
    };
    println!();
    println!(
        "{clients} streaming clients: median (min, max) of {} runs",
        per_run.len()
    );
    println!("| measure | upstream (floor) | agent-as-model | LiteLLM |");
    println!("| --- | --- | --- | --- |");
    type Get = fn(&Figures) -> f64;
    let measures: [(&str, Get, usize); 5] = [
        ("requests/s", |f| f.rate, 0),
        ("latency p50 (ms)", |f| f.p50, 2),
        ("latency p99 (ms)", |f| f.p99, 2),
        ("TTFB p50 (ms)", |f| f.ttfb50, 2),
        ("TTFB p99 (ms)", |f| f.ttfb99, 2),
    ];
    for (name, get, digits) in measures {
        println!(
            "| {name} | {} | {} | {} |",
            show(&|r| get(&r[0]), digits),
            show(&|r| get(&r[1]), digits),
            show(&|r| get(&r[2]), digits)
        );
    }
    let added: [(&str, Get); 3] = [
        ("added p50 (ms)", |f| f.p50),
        ("added p99 (ms)", |f| f.p99),
        ("added TTFB p50 (ms)", |f| f.ttfb50),
    ];
    for (name, get) in added {
        println!(
            "| {name} | — | {} | {} |",
            show(&|r| get(&r[1]) - get(&r[0]), 2),
            show(&|r| get(&r[2]) - get(&r[0]), 2)
        );
    }
    println!(
        "| errors (all runs) | {} | {} | {} |",
        per_run.iter().map(|r| r[0].errors).sum::<usize>(),
        per_run.iter().map(|r| r[1].errors).sum::<usize>(),
        per_run.iter().map(|r| r[2].errors).sum::<usize>()
    );
    println!(
        "agent-as-model / LiteLLM throughput: {}x",
        show(&|r| r[1].rate / r[2].rate, 1)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` and `--list` probe the binary: nothing to list.
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}
