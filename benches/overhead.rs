//! What agent-as-model adds to a call, measured against a do-nothing floor server.
//!
//! `cargo bench --bench overhead` starts the release binary over stdio, plays an instant
//! scripted host, and measures on each protocol era: start-up (spawn to the first answered
//! request), per-call round trips (generate; chat_complete with a 20-message history; an
//! `output_schema` of about 10 KB; a cursor to verify), throughput with 64 calls in flight, and
//! the server's peak resident memory. The same driver runs the floor, a minimal rmcp server built
//! into this bench binary (`--floor-server`) that does only the protocol work a call needs: on
//! the legacy era one sampling request and its answer, on 2026-07-28 one `InputRequiredResult`
//! and then the answer. Every figure is reported as ours, floor and ours/floor, since only
//! same-run ratios are stable on a noisy machine. Nothing here asserts anything about time.
//!
//! Environment: `BENCH_CALLS` (sequential calls per scenario, default 2000), `BENCH_THROUGHPUT`
//! (calls in the throughput run, default 4000).
#![allow(
    deprecated,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use agent_as_model::contract::cursor::{self, Entry};
use rmcp::model::*;
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, ServiceExt};
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// The floor server (shared with the HTTP bench).

#[path = "common/floor.rs"]
mod floor;
use floor::Floor;

// ---------------------------------------------------------------------------------------------
// The instant host.

#[derive(Clone)]
struct Host;

impl ClientHandler for Host {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_sampling_tools()
                .build(),
            Implementation::new("bench-host", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        p: CreateMessageRequestParams,
        _c: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        if p.tools
            .as_ref()
            .is_some_and(|t| t.iter().any(|t| t.name == "structured_output"))
        {
            return Ok(CreateMessageResult::new(
                SamplingMessage::assistant_tool_use(
                    "t1",
                    "structured_output",
                    structured_answer().as_object().unwrap().clone(),
                ),
                "bench-model".into(),
            ));
        }
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text("ok"),
            "bench-model".into(),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

#[derive(Clone, Copy, PartialEq)]
enum Era {
    Legacy,
    Modern,
}

#[derive(Clone, Copy, PartialEq)]
enum Server {
    Ours,
    Floor,
}

struct Process {
    client: Arc<RunningService<RoleClient, Host>>,
    pid: u32,
    _child: tokio::process::Child,
}

async fn start(server: Server, era: Era) -> (Process, Duration) {
    let exe = match server {
        Server::Ours => env!("CARGO_BIN_EXE_agent-as-model").into(),
        Server::Floor => std::env::current_exe().unwrap(),
    };
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(exe);
    if server == Server::Floor {
        cmd.arg("--floor-server");
    }
    let mut child = cmd
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let io = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = match era {
        Era::Legacy => Host.serve(io).await.unwrap(),
        Era::Modern => Host
            .serve_with_lifecycle(
                io,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .unwrap(),
    };
    client.list_all_tools().await.unwrap();
    let startup = started.elapsed();
    (
        Process {
            client: Arc::new(client),
            pid,
            _child: child,
        },
        startup,
    )
}

fn history(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("message number {i}: {}", "lorem ipsum ".repeat(8))}))
        .collect()
}

/// About 10 KB of JSON Schema: 60 typed, described properties.
fn big_schema() -> Value {
    let mut props = serde_json::Map::new();
    for i in 0..60 {
        props.insert(
            format!("field_{i}"),
            json!({"type": "string", "description": format!("Field {i} of the record, {}", "described at length ".repeat(4)), "maxLength": 200}),
        );
    }
    json!({"type": "object", "properties": props, "required": ["field_0"], "additionalProperties": false})
}

fn structured_answer() -> Value {
    json!({"field_0": "value", "field_1": "other"})
}

fn scenario_args(name: &str) -> (&'static str, Value) {
    match name {
        "generate" => ("generate", json!({"prompt": "Say ok."})),
        "chat 20 msgs" => ("chat_complete", json!({"messages": history(20)})),
        "schema 10 KB" => (
            "chat_complete",
            json!({"messages": history(1), "output_schema": big_schema()}),
        ),
        _ => {
            let msgs = history(20);
            let transcript: Vec<Entry> = msgs
                .iter()
                .take(20) // through the last assistant turn (index 19)
                .map(|m| Entry::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
                .collect();
            let cur = cursor::cursor("agent-default", "chat_complete", &transcript);
            (
                "chat_complete",
                json!({"messages": history(21), "previous_response_id": cur}),
            )
        }
    }
}

fn params(tool: &str, args: &Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().unwrap().clone())
}

async fn latencies(p: &Process, server: Server, name: &str, calls: usize) -> Vec<Duration> {
    let (tool, args) = scenario_args(name);
    let tool = if server == Server::Floor {
        "generate"
    } else {
        tool
    };
    let request = params(tool, &args);
    for _ in 0..calls / 10 {
        p.client.call_tool(request.clone()).await.unwrap(); // warm-up
    }
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let r = p.client.call_tool(request.clone()).await.unwrap();
        out.push(t.elapsed());
        assert_ne!(r.is_error, Some(true), "{name}: {r:?}");
    }
    out.sort();
    out
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

async fn throughput(p: &Process, server: Server, total: usize) -> f64 {
    let (tool, args) = scenario_args("generate");
    let tool = if server == Server::Floor {
        "generate"
    } else {
        tool
    };
    let request = params(tool, &args);
    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..total {
        let permit = sem.clone().acquire_owned().await.unwrap();
        let client = p.client.clone();
        let request = request.clone();
        tasks.spawn(async move {
            client.call_tool(request).await.unwrap();
            drop(permit);
        });
    }
    while tasks.join_next().await.is_some() {}
    total as f64 / started.elapsed().as_secs_f64()
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn row(label: &str, ours: f64, floor: f64, unit: &str) -> String {
    format!(
        "| {label} | {ours:.3} {unit} | {floor:.3} {unit} | {:.2}x |",
        ours / floor
    )
}

/// The server's own work for a call, in process: parsing the arguments and every pre-send
/// contract check (persona, cursor, schema compilation through the cache), plus validating the
/// structured answer. Median of many runs, and the part each scenario adds over `generate`.
fn in_process(calls: usize) {
    use agent_as_model::call::Mode;
    use agent_as_model::limits::Limits;
    use agent_as_model::shapes;
    let limits = Limits::default();
    let measure = |name: &str| -> Duration {
        let (tool, args) = scenario_args(name);
        let shape = shapes::find(tool).unwrap();
        let map = args.as_object().unwrap();
        let answer = structured_answer();
        let mut times: Vec<Duration> = (0..calls.max(200))
            .map(|_| {
                let t = Instant::now();
                let call = shapes::parse(shape, map, &limits).unwrap();
                if let Mode::Structured(schema) = &call.mode {
                    schema.check(&answer).unwrap();
                }
                t.elapsed()
            })
            .collect();
        times.sort();
        pct(&times, 0.5)
    };
    println!("### In process: parsing and contract checks per call\n");
    println!("| scenario | median | added over generate |");
    println!("| --- | --- | --- |");
    let base = measure("generate");
    for name in ["generate", "chat 20 msgs", "schema 10 KB", "cursor verify"] {
        let m = measure(name);
        println!(
            "| {name} | {:.1} µs | {:.1} µs |",
            m.as_secs_f64() * 1e6,
            (m.as_secs_f64() - base.as_secs_f64()) * 1e6
        );
    }
    println!();
}

async fn bench() {
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let total: usize = std::env::var("BENCH_THROUGHPUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    println!("calls per scenario: {calls}; throughput run: {total} calls, 64 in flight\n");
    in_process(calls);
    for (era, label) in [
        (Era::Legacy, "legacy (2025-11-25)"),
        (Era::Modern, "2026-07-28 (MRTR)"),
    ] {
        println!("### {label}\n");
        println!("| measure | ours | floor | ours/floor |");
        println!("| --- | --- | --- | --- |");
        let mut startups = [Vec::new(), Vec::new()];
        for _ in 0..10 {
            for (i, server) in [Server::Ours, Server::Floor].into_iter().enumerate() {
                let (p, t) = start(server, era).await;
                startups[i].push(t);
                drop(p); // kills the child
            }
        }
        for s in &mut startups {
            s.sort();
        }
        let (su_o, su_f) = (pct(&startups[0], 0.5), pct(&startups[1], 0.5));
        println!(
            "{}",
            row(
                "start-up to first answer (median of 10)",
                su_o.as_secs_f64() * 1e3,
                su_f.as_secs_f64() * 1e3,
                "ms"
            )
        );
        let (ours, _) = start(Server::Ours, era).await;
        let (floor, _) = start(Server::Floor, era).await;
        let ours_generate = latencies(&ours, Server::Ours, "generate", calls).await;
        let floor_generate = latencies(&floor, Server::Floor, "generate", calls).await;
        for name in ["generate", "chat 20 msgs", "schema 10 KB", "cursor verify"] {
            let o = if name == "generate" {
                ours_generate.clone()
            } else {
                latencies(&ours, Server::Ours, name, calls).await
            };
            let f = latencies(&floor, Server::Floor, name, calls).await;
            for (q, qn) in [(0.5, "median"), (0.9, "p90"), (0.99, "p99")] {
                let (a, b) = (pct(&o, q), pct(&f, q));
                println!(
                    "| {name} {qn} | {} ms | {} ms | {:.2}x |",
                    ms(a),
                    ms(b),
                    a.as_secs_f64() / b.as_secs_f64()
                );
            }
            if name != "generate" {
                // What the scenario costs us beyond a plain call, net of what the same payload
                // costs the floor (transport and JSON parsing of the larger arguments).
                let ours_added =
                    pct(&o, 0.5).as_secs_f64() - pct(&ours_generate, 0.5).as_secs_f64();
                let floor_added =
                    pct(&f, 0.5).as_secs_f64() - pct(&floor_generate, 0.5).as_secs_f64();
                println!(
                    "| {name}: added by this server (median, net of the floor's cost for the same payload) | {:.1} µs | | |",
                    (ours_added - floor_added) * 1e6
                );
            }
        }
        let (to, tf) = (
            throughput(&ours, Server::Ours, total).await,
            throughput(&floor, Server::Floor, total).await,
        );
        println!("{}", row("throughput, 64 in flight (calls/s)", to, tf, ""));
        let (mo, mf) = (peak_rss_kib(ours.pid), peak_rss_kib(floor.pid));
        println!(
            "{}",
            row(
                "peak resident memory (MiB)",
                mo as f64 / 1024.0,
                mf as f64 / 1024.0,
                "MiB"
            )
        );
        println!();
        drop((ours, floor));
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|a| a == "--floor-server") {
        runtime.block_on(async {
            let running = Floor.serve(rmcp::transport::stdio()).await.unwrap();
            let _ = running.waiting().await;
        });
        return;
    }
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` and `--list` probe the binary: nothing to list.
    }
    runtime.block_on(bench());
}
