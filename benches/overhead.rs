//! What agent-as-model adds to a call, measured against a do-nothing floor server.
//!
//! `cargo bench --bench overhead` starts the release binary over stdio, plays an instant
//! scripted host, and measures on each protocol era: start-up (spawn to the first answered
//! request), per-call round trips (generate; chat_complete with a 20-message history; an
//! `output_schema` of about 10 KB; a cursor to verify), throughput with 64 calls in flight, and
//! the server's peak resident memory (and, after the run, its anonymous and file-backed parts).
//! The same driver runs the floor, a minimal rmcp server built into this bench binary
//! (`--floor-server`) that does only the protocol work a call needs: on the legacy era one
//! sampling request and its answer, on 2026-07-28 one `InputRequiredResult` and then the answer.
//! Every figure is reported as ours, floor and ours/floor, since only same-run ratios are stable
//! on a noisy machine. Nothing here asserts anything about time.
//!
//! Then, on fresh processes, how latency and throughput grow with the payload: histories of 1,
//! 10, 100 and 1,000 messages and schemas of 1, 10 and 100 KiB, with the least-squares slope of
//! each series (ours and floor) and its R².
//!
//! Environment: `BENCH_CALLS` (sequential calls per scenario, default 2000), `BENCH_THROUGHPUT`
//! (calls in the throughput run, default 4000), `BENCH_SCALE_CALLS` (sequential calls per
//! scaling point, default 300), `BENCH_SERVER` (another build of the server to measure).
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
        Server::Ours => std::env::var_os("BENCH_SERVER")
            .map(Into::into)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-as-model").into()),
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
    schema_of(60)
}

/// A JSON Schema of `n` typed, described properties (about 170 bytes each).
fn schema_of(n: usize) -> Value {
    let mut props = serde_json::Map::new();
    for i in 0..n {
        props.insert(
            format!("field_{i}"),
            json!({"type": "string", "description": format!("Field {i} of the record, {}", "described at length ".repeat(4)), "maxLength": 200}),
        );
    }
    json!({"type": "object", "properties": props, "required": ["field_0"], "additionalProperties": false})
}

/// A schema of at least `kib` KiB, serialised.
fn schema_kib(kib: usize) -> Value {
    let mut n = kib * 1024 / 170;
    while serde_json::to_vec(&schema_of(n)).unwrap().len() < kib * 1024 {
        n += 1;
    }
    schema_of(n)
}

fn structured_answer() -> Value {
    json!({"field_0": "value", "field_1": "other"})
}

fn scenario_args(name: &str) -> (&'static str, Value) {
    if let Some(n) = name.strip_prefix("history ") {
        return (
            "chat_complete",
            json!({"messages": history(n.parse().unwrap())}),
        );
    }
    if let Some(k) = name.strip_prefix("schema KiB ") {
        let schema = schema_kib(k.parse().unwrap());
        return (
            "chat_complete",
            json!({"messages": history(1), "output_schema": schema}),
        );
    }
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

async fn throughput(p: &Process, server: Server, name: &str, total: usize) -> f64 {
    let (tool, args) = scenario_args(name);
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

/// A `kB` field of a `/proc/PID` file (`status`, `smaps_rollup`), in KiB; 0 if absent.
fn proc_kib(pid: u32, file: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn peak_rss_kib(pid: u32) -> u64 {
    proc_kib(pid, "status", "VmHWM:")
}

/// Resident memory now, split: anonymous (what the process allocated) and file-backed (pages of
/// its binary and libraries, clean and shared with the page cache), in KiB.
fn resident_split(pid: u32) -> (u64, u64) {
    let rss = proc_kib(pid, "smaps_rollup", "Rss:");
    let anon = proc_kib(pid, "smaps_rollup", "Anonymous:");
    (anon, rss.saturating_sub(anon))
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

/// Least-squares line through `(x, y)`: slope, intercept and R².
fn fit(points: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let syy: f64 = points.iter().map(|(_, y)| (y - my) * (y - my)).sum();
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        sxy * sxy / (sxx * syy)
    };
    (slope, my - slope * mx, r2)
}

const HISTORIES: [usize; 4] = [1, 10, 100, 1000];
const SCHEMA_KIB: [usize; 3] = [1, 10, 100];

/// The scaling scenarios: `(name, size)`, history lengths then schema sizes.
fn scaling_scenarios() -> Vec<(String, f64)> {
    HISTORIES
        .iter()
        .map(|n| (format!("history {n}"), *n as f64))
        .chain(
            SCHEMA_KIB
                .iter()
                .map(|k| (format!("schema KiB {k}"), *k as f64)),
        )
        .collect()
}

/// The server's own work for a call, in process: parsing the arguments and every pre-send
/// contract check (persona, cursor, schema compilation through the cache), plus validating the
/// structured answer. The scenarios are measured in turn, five rounds over; each figure is the
/// lowest of the rounds' medians, which keeps a busy neighbour on a shared machine out of it.
fn in_process(calls: usize) {
    use agent_as_model::call::Mode;
    use agent_as_model::limits::Limits;
    use agent_as_model::shapes;
    let limits = Limits::default();
    let mut names: Vec<String> = ["generate", "chat 20 msgs", "schema 10 KB", "cursor verify"]
        .map(str::to_owned)
        .to_vec();
    names.extend(scaling_scenarios().into_iter().map(|(n, _)| n));
    let prepared: Vec<_> = names
        .iter()
        .map(|name| {
            let (tool, args) = scenario_args(name);
            (shapes::find(tool).unwrap(), args)
        })
        .collect();
    let answer = structured_answer();
    let rounds = 5;
    let per_round = (calls / rounds).max(40);
    let mut best = vec![Duration::MAX; names.len()];
    for _ in 0..rounds {
        for (i, (shape, args)) in prepared.iter().enumerate() {
            let map = args.as_object().unwrap();
            let mut times: Vec<Duration> = (0..per_round)
                .map(|_| {
                    let t = Instant::now();
                    let call = shapes::parse(*shape, map, &limits).unwrap();
                    if let Mode::Structured(schema) = &call.mode {
                        schema.check(&answer).unwrap();
                    }
                    t.elapsed()
                })
                .collect();
            times.sort();
            best[i] = best[i].min(pct(&times, 0.5));
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("### In process: parsing and contract checks per call\n");
    println!("| scenario | median | added over generate |");
    println!("| --- | --- | --- |");
    for (name, t) in names.iter().zip(&best) {
        println!(
            "| {name} | {:.1} µs | {:.1} µs |",
            us(*t),
            us(*t) - us(best[0])
        );
    }
    let at = |prefix: &str| -> Vec<(f64, f64)> {
        scaling_scenarios()
            .into_iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(n, x)| (x, us(best[names.iter().position(|m| *m == n).unwrap()])))
            .collect()
    };
    for (prefix, unit) in [("history", "message"), ("schema", "KiB of schema")] {
        let (slope, intercept, r2) = fit(&at(prefix));
        println!(
            "| {prefix}: slope | {slope:.2} µs per {unit} (+ {intercept:.1} µs, R² {r2:.4}) | |"
        );
    }
    println!();
}

/// Latency and throughput as the payload grows, ours and floor in the same run: history length
/// (1 to 1,000 messages) and schema size (1 to 100 KiB), each with its least-squares slope.
async fn scaling(era: Era, calls: usize, total: usize) {
    let (ours, _) = start(Server::Ours, era).await;
    let (floor, _) = start(Server::Floor, era).await;
    println!(
        "| scenario | ours median | floor median | ours/floor | ours calls/s | floor calls/s | ours/floor |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut series: Vec<(String, f64, f64, f64)> = Vec::new();
    for (name, x) in scaling_scenarios() {
        let o = pct(&latencies(&ours, Server::Ours, &name, calls).await, 0.5);
        let f = pct(&latencies(&floor, Server::Floor, &name, calls).await, 0.5);
        let to = throughput(&ours, Server::Ours, &name, total).await;
        let tf = throughput(&floor, Server::Floor, &name, total).await;
        println!(
            "| {name} | {} ms | {} ms | {:.2}x | {to:.0} | {tf:.0} | {:.2}x |",
            ms(o),
            ms(f),
            o.as_secs_f64() / f.as_secs_f64(),
            to / tf
        );
        series.push((name, x, o.as_secs_f64() * 1e6, f.as_secs_f64() * 1e6));
    }
    for (prefix, unit) in [("history", "message"), ("schema", "KiB of schema")] {
        let pick = |ours: bool| -> Vec<(f64, f64)> {
            series
                .iter()
                .filter(|s| s.0.starts_with(prefix))
                .map(|s| (s.1, if ours { s.2 } else { s.3 }))
                .collect()
        };
        let (so, _, ro) = fit(&pick(true));
        let (sf, _, rf) = fit(&pick(false));
        println!(
            "| {prefix}: latency slope per {unit} | {so:.2} µs (R² {ro:.4}) | {sf:.2} µs (R² {rf:.4}) | {:.2}x | | | |",
            so / sf
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
    let scale_calls: usize = std::env::var("BENCH_SCALE_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
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
            throughput(&ours, Server::Ours, "generate", total).await,
            throughput(&floor, Server::Floor, "generate", total).await,
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
        let (split_o, split_f) = (resident_split(ours.pid), resident_split(floor.pid));
        for (label, o, f) in [
            ("resident after the run: anonymous", split_o.0, split_f.0),
            ("resident after the run: file-backed", split_o.1, split_f.1),
        ] {
            println!(
                "{}",
                row(label, o as f64 / 1024.0, f as f64 / 1024.0, "MiB")
            );
        }
        println!();
        drop((ours, floor));
        println!("### {label}: scaling with the payload\n");
        scaling(era, scale_calls, (total / 8).max(200)).await;
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
