//! Streamable HTTP throughput and latency, against a do-nothing rmcp HTTP server.
//!
//! `cargo bench --bench http` starts the release binary with `--http` and, in the same run, a
//! floor: rmcp's `StreamableHttpService` built into this bench binary (`--floor-http PORT`) on
//! the same hyper server, serving the stdio bench's floor (`common/floor.rs`), whose one tool
//! does only the protocol work a 2026-07-28 call needs (an `InputRequiredResult` asking for one
//! sample, then the answer). A client does
//! whole calls (both MRTR rounds, two POSTs, answering the sample instantly) with 1, 16 and 256
//! clients at once, each client calling one after the other; reported as calls per second and
//! per-call latency (p50, p99), ours, floor and ours/floor, and each server's peak resident
//! memory. Nothing here asserts anything about time.
//!
//! Environment: `BENCH_HTTP_SECS` (seconds per level, default 5).
#![allow(
    deprecated,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/floor.rs"]
mod floor;
#[path = "common/rss.rs"]
mod rss;
use floor::Floor;

/// The floor: rmcp's HTTP service on hyper, nothing in front.
async fn floor_http(port: u16) {
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(true);
    let service = StreamableHttpService::new(
        || Ok(Floor),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let _ = stream.set_nodelay(true); // as the product does
        let service = service.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |r| {
                use tower_service::Service as _;
                let mut service = service.clone();
                async move { service.call(r).await }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

struct Process {
    child: tokio::process::Child,
    url: String,
}

async fn start(ours: bool) -> Process {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = if ours {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-as-model"));
        c.args(["--http", &format!("127.0.0.1:{port}")]);
        c
    } else {
        let mut c = tokio::process::Command::new(std::env::current_exe().unwrap());
        c.args(["--floor-http", &port.to_string()]);
        c
    };
    let child = cmd
        .env("RUST_LOG", "error")
        .env("AGENT_AS_MODEL_MAX_CALLS_PER_SESSION", "100000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Process { child, url }
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
           "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"}})
}

async fn post(client: &reqwest::Client, url: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let text = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "generate")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let json = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("data:")
                .filter(|d| d.trim().starts_with('{'))
        })
        .unwrap_or(&text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// One whole call: the first round, then the retry with the sample's answer.
async fn call(client: &reqwest::Client, url: &str) {
    let arguments = json!({"prompt": "x"});
    let first = post(
        client,
        url,
        json!({"_meta": meta(), "name": "generate", "arguments": arguments}),
    )
    .await;
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"sample": {"role": "assistant", "model": "m",
                                   "content": {"type": "text", "text": "ok"}}});
    let done = post(
        client,
        url,
        json!({"_meta": meta(), "name": "generate", "arguments": arguments,
               "requestState": state, "inputResponses": answer}),
    )
    .await;
    assert_eq!(done["result"]["content"][0]["text"], "ok", "{done}");
}

/// `clients` callers for `secs` seconds: calls per second, and every call's latency.
async fn level(url: &str, clients: usize, secs: f64) -> (f64, Vec<Duration>) {
    agent_as_model::install_tls();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .unwrap();
    call(&client, url).await; // warm the connection
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (client, url) = (client.clone(), url.to_owned());
        tasks.spawn(async move {
            let mut seen = Vec::new();
            while Instant::now() < until {
                let t = Instant::now();
                call(&client, &url).await;
                seen.push(t.elapsed());
            }
            seen
        });
    }
    let mut all = Vec::new();
    while let Some(seen) = tasks.join_next().await {
        all.extend(seen.unwrap());
    }
    all.sort();
    (all.len() as f64 / started.elapsed().as_secs_f64(), all)
}

fn pct(sorted: &[Duration], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

fn row(label: &str, ours: f64, floor: f64, unit: &str) {
    println!(
        "| {label} | {ours:.2} {unit} | {floor:.2} {unit} | {:.2}x |",
        ours / floor
    );
}

async fn bench() {
    let secs: f64 = std::env::var("BENCH_HTTP_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let ours = start(true).await;
    let floor = start(false).await;
    println!("| 2026-07-28 calls over HTTP (two POSTs each) | ours | floor | ours/floor |");
    println!("|---|---|---|---|");
    for clients in [1, 16, 256] {
        let (o_rate, o) = level(&ours.url, clients, secs).await;
        let (f_rate, f) = level(&floor.url, clients, secs).await;
        row(&format!("{clients} clients: calls/s"), o_rate, f_rate, "");
        row(
            &format!("{clients} clients: p50"),
            pct(&o, 0.5),
            pct(&f, 0.5),
            "ms",
        );
        row(
            &format!("{clients} clients: p99"),
            pct(&o, 0.99),
            pct(&f, 0.99),
            "ms",
        );
    }
    row(
        "peak resident memory",
        ours.child.id().and_then(rss::peak_mib).unwrap_or(0.0),
        floor.child.id().and_then(rss::peak_mib).unwrap_or(0.0),
        "MiB",
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let args: Vec<String> = std::env::args().collect();
    if let Some(port) = args
        .iter()
        .position(|a| a == "--floor-http")
        .and_then(|i| args.get(i + 1))
    {
        runtime.block_on(floor_http(port.parse().unwrap()));
        return;
    }
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` and `--list` probe the binary: nothing to list.
    }
    runtime.block_on(bench());
}
