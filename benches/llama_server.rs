//! The embedded model over `/v1/chat/completions`, streamed, against llama.cpp's own
//! `llama-server` on the same GGUF file: time to first token, decode tokens per second, and a
//! conversation's second turn's time to first token (what a prefix cache saves), decode speed
//! over a long answer, plus each server's start-up and peak memory. The two servers run one
//! after the other, never at once.
//!
//! Then concurrent streams: each server started again with as many slots as streams (and
//! llama-server's cache unified, as ours is), `n` long answers at once, each its own
//! conversation: aggregate decode tokens/s and the time to first token, at each `n` of
//! `BENCH_STREAMS` (default `1,4,8`; `none` skips them).
//!
//! Between the two, with `BENCH_MMPROJ=FILE` (a projector for the model; without it that
//! table is skipped), images: both servers started again with `--mmproj FILE` ([`SLOTS`]
//! slots), and for each image of `BENCH_IMAGES` (paths, comma-separated; default the five of
//! `tests/data/vision`), `BENCH_RUNS` runs on each, alternating: a user turn asking the
//! image's colour, the question (which starts with a tag of the request's own, so no cache
//! serves what follows) before the image, streamed; the same turn without the image; the
//! tokens the image adds to `usage.prompt_tokens` and to the time to the first token (its cold
//! cost: decoding, resizing, encoding, reading the embeddings); then the turn with the image
//! sent again, unchanged: its first token and its `cached_tokens`. Ours logs at debug level
//! there, and its own time for each image read (its `media read into a prompt` line) is shown
//! beside. `BENCH_ONLY_IMAGES` runs the images alone; `BENCH_ONLY_STREAMS` skips the
//! conversations only.
//!
//! `BENCH_LLAMA_SERVER=path/to/llama-server cargo bench --bench llama_server` (BENCHMARKS.md
//! says how that binary was built). The default model must be cached (run `try` once), or
//! `BENCH_MODEL=FILE`. `BENCH_RUNS` (default 5) conversations (and rounds of streams) per
//! server, alternating; `BENCH_SERVER` another agent-as-model binary.
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

use agent_as_model::local::{engine, fetch};
use base64::Engine as _;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONTEXT: u32 = 4096;
const SLOTS: u32 = 2;
const MAX_TOKENS: u32 = 256;
/// The pause before each conversation (see its use).
const SETTLE: Duration = Duration::from_secs(2);

/// A server under test, killed (with its process group) when dropped.
struct Server {
    name: &'static str,
    child: Child,
    url: String,
    started: Duration,
    /// Where its standard output and error go.
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` and waits (at most 120 s) until `health` answers 200 and a first chat
/// completion comes back (the model loaded, the first call's set-up done).
async fn start(
    client: &reqwest::Client,
    name: &'static str,
    command: &mut Command,
    port: u16,
    health: &str,
) -> Server {
    let log = std::env::temp_dir().join(format!("aam-bench-{name}-{}.log", std::process::id()));
    let out = std::fs::File::create(&log).unwrap();
    let began = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let mut server = Server {
        name,
        child,
        url: format!("http://127.0.0.1:{port}"),
        started: Duration::ZERO,
        log: log.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "{name} exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        let up = client
            .get(format!("{}{health}", server.url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if up
            && turn(client, &server.url, &conversation("warm-up", None))
                .await
                .is_some()
        {
            break;
        }
        assert!(Instant::now() < deadline, "{name} was not ready in 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.started = began.elapsed();
    server
}

/// What one streamed turn showed: the time to its first token, its tokens, when it ended.
struct Turn {
    /// When the request was sent, and its first and last tokens came (after sending).
    sent: Instant,
    first: Duration,
    last: Duration,
    /// Content chunks streamed (a token each).
    chunks: u32,
    decode_tps: f64,
    text: String,
    /// The prompt's tokens, and how many of them the server found cached (its usage).
    prompt: u64,
    cached: u64,
}

/// A conversation of `tag`'s own (so no turn finds another's prefix cached): a system prompt,
/// a question, and, with `answer`, the assistant's answer and a second question.
fn conversation(tag: &str, answer: Option<&str>) -> Value {
    let system = format!(
        "Conversation {tag}. You are a careful assistant for a physics class. Answer in plain \
         sentences, without lists or headings, and keep every answer short and exact."
    );
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Why is the sky blue? Explain it in three sentences."}),
    ];
    if let Some(answer) = answer {
        messages.push(json!({"role": "assistant", "content": answer}));
        messages.push(json!({"role": "user", "content": "And why are sunsets red?"}));
    }
    json!({"model": "local", "messages": messages, "stream": true, "temperature": 0,
           "max_tokens": MAX_TOKENS, "stream_options": {"include_usage": true}})
}

/// A request for a long answer (it runs to `MAX_TOKENS`): decode speed over many steps, where
/// a step that waits for a core shows.
fn long_answer(tag: &str) -> Value {
    let messages = [
        json!({"role": "system", "content": format!("Story {tag}. You are a storyteller.")}),
        json!({"role": "user", "content": "Tell a long story about a lighthouse keeper and \
                                            the ships she saw, in plain sentences."}),
    ];
    json!({"model": "local", "messages": messages, "stream": true, "temperature": 0,
           "max_tokens": MAX_TOKENS, "stream_options": {"include_usage": true}})
}

/// One streamed chat completion: `None` when the server did not answer 200.
async fn turn(client: &reqwest::Client, url: &str, body: &Value) -> Option<Turn> {
    let sent = Instant::now();
    let mut response = client
        .post(format!("{url}/v1/chat/completions"))
        .header("authorization", "Bearer bench")
        .json(body)
        .send()
        .await
        .inspect_err(|e| eprintln!("{url}: {e}"))
        .ok()?;
    if !response.status().is_success() {
        eprintln!("{url}: {}", response.status());
        return None;
    }
    let (mut buffer, mut text) = (String::new(), String::new());
    let (mut first, mut last, mut chunks) = (None, Duration::ZERO, 0u32);
    let (mut prompt, mut cached) = (0, 0);
    loop {
        let bytes = match response.chunk().await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => break,
            Err(e) => {
                eprintln!("{url}: {e}");
                return None;
            }
        };
        buffer.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(t) = v
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                let now = sent.elapsed();
                first.get_or_insert(now);
                last = now;
                chunks += 1;
                text.push_str(t);
            }
            if v.pointer("/usage/completion_tokens").is_some() {
                let count = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
                prompt = count("/usage/prompt_tokens");
                cached = count("/usage/prompt_tokens_details/cached_tokens");
            }
        }
    }
    let Some(first) = first else {
        eprintln!("{url}: no token came");
        return None;
    };
    // Decode speed is the content chunks streamed after the first, over the time from the first
    // to the last: what a reader sees, and the same measure for both servers (their usage does
    // not count alike: llama-server's completion_tokens includes the end-of-turn token, ours
    // does not, as OpenAI's does not), and free of what follows the last token.
    let decoding = (last - first).as_secs_f64();
    Some(Turn {
        sent,
        first,
        last,
        chunks,
        decode_tps: f64::from(chunks.saturating_sub(1)) / decoding,
        text,
        prompt,
        cached,
    })
}

/// One conversation of two turns, then a long answer: the first turn's time to first token
/// (ms), its decode tokens/s, the second turn's time to first token (ms), the long answer's
/// decode tokens/s.
async fn conversation_row(client: &reqwest::Client, server: &Server, run: usize) -> [f64; 4] {
    // The same length for both servers (their prompts are then the same tokens long, and a
    // greedy answer is the same text), different for each.
    let tag = format!("{}-{run}-{}", &server.name[..1], std::process::id());
    let one = turn(client, &server.url, &conversation(&tag, None))
        .await
        .unwrap_or_else(|| panic!("{}: the first turn failed", server.name));
    let two = turn(client, &server.url, &conversation(&tag, Some(&one.text)))
        .await
        .unwrap_or_else(|| panic!("{}: the second turn failed", server.name));
    let long = turn(client, &server.url, &long_answer(&tag))
        .await
        .unwrap_or_else(|| panic!("{}: the long answer failed", server.name));
    println!(
        "{:<15} run {run}: first turn {:.0} ms ({} prompt tokens, {} cached), {:.1} tokens/s; \
         second turn {:.0} ms ({} prompt tokens, {} cached); long answer {:.1} tokens/s",
        server.name,
        one.first.as_secs_f64() * 1e3,
        one.prompt,
        one.cached,
        one.decode_tps,
        two.first.as_secs_f64() * 1e3,
        two.prompt,
        two.cached,
        long.decode_tps
    );
    [
        one.first.as_secs_f64() * 1e3,
        one.decode_tps,
        two.first.as_secs_f64() * 1e3,
        long.decode_tps,
    ]
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn show((m, lo, hi): (f64, f64, f64)) -> String {
    format!("{m:.1} ({lo:.1}, {hi:.1})")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    agent_as_model::install_tls();
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let bench = Bench::from_env(runs);
    let only_images = std::env::var_os("BENCH_ONLY_IMAGES").is_some();
    if !only_images && std::env::var_os("BENCH_ONLY_STREAMS").is_none() {
        conversations(&bench, runs).await;
    }
    match std::env::var_os("BENCH_MMPROJ") {
        Some(mmproj) => images_table(&bench, Path::new(&mmproj), &image_files(), runs).await,
        None => println!("\nno images table: BENCH_MMPROJ (a projector for the model) is not set"),
    }
    if only_images {
        return;
    }
    let streams = std::env::var("BENCH_STREAMS").unwrap_or_else(|_| "1,4,8".to_owned());
    let levels: Vec<u32> = streams
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    if !levels.is_empty() {
        streams_table(&bench, &levels, runs).await;
    }
}

/// The conversations' table (`BENCH_ONLY_STREAMS` or `BENCH_ONLY_IMAGES` skips it).
async fn conversations(bench: &Bench, runs: usize) {
    // Both are started (one at a time), then their conversations alternate, so a machine
    // that drifts (other load, clock) drifts for both; only one of them works at any time.
    let servers = bench.start_both(SLOTS, None).await;
    let client = &bench.client;
    let mut rows = vec![Vec::new(), Vec::new()];
    for run in 0..runs {
        for (server, rows) in servers.iter().zip(rows.iter_mut()) {
            // llama.cpp's threads spin a while after a call (ggml's polling): the other
            // server's threads must be asleep before a conversation is timed.
            tokio::time::sleep(SETTLE).await;
            rows.push(conversation_row(client, server, run).await);
        }
    }
    let results: Vec<_> = servers
        .iter()
        .zip(rows)
        .map(|(s, rows)| {
            let peak = rss::peak_mib(s.child.id()).unwrap_or(f64::NAN);
            (s.name, s.started.as_secs_f64(), rows, peak)
        })
        .collect();
    print_table(&results);
}

/// What both servers are started with.
struct Bench {
    client: reqwest::Client,
    model: PathBuf,
    threads: String,
    gpu_layers: Option<String>,
    ours: PathBuf,
    theirs: PathBuf,
}

impl Bench {
    /// The servers, model, threads and GPU layers the environment names (the top comment),
    /// printed; exits when `BENCH_LLAMA_SERVER` is not set.
    fn from_env(runs: usize) -> Self {
        let Some(theirs) = std::env::var_os("BENCH_LLAMA_SERVER") else {
            eprintln!("set BENCH_LLAMA_SERVER to a llama-server binary (BENCHMARKS.md)");
            std::process::exit(2);
        };
        let model = std::env::var_os("BENCH_MODEL")
            .map(PathBuf::from)
            .or_else(fetch::cached_default)
            .expect("the default model is cached: run `try` once");
        let threads = engine::physical_cores().to_string();
        // On a GPU build: the layers both put on the device (`auto`, both servers' default, or
        // a number), BENCHMARKS.md's GPU procedure.
        let gpu_layers = std::env::var("BENCH_GPU_LAYERS").ok();
        let ours = std::env::var_os("BENCH_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-as-model").into());
        println!(
            "model {}; {threads} threads, {SLOTS} slots of {CONTEXT} tokens each, greedy, \
             {MAX_TOKENS} tokens at most, {runs} conversations each, GPU layers: {}",
            model.display(),
            gpu_layers.as_deref().unwrap_or("each server's default")
        );
        // A new connection for every request, for both (llama-server closes a streamed one).
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let theirs = theirs.into();
        Self {
            client,
            model,
            threads,
            gpu_layers,
            ours,
            theirs,
        }
    }

    /// Starts ours, then llama-server, each with `slots` slots of [`CONTEXT`] tokens (one
    /// cache the slots share: ours always, llama-server's asked for), and `mmproj`'s
    /// projector when given (ours then logs at debug level: its line for each image read).
    async fn start_both(&self, slots: u32, mmproj: Option<&Path>) -> Vec<Server> {
        let mut servers = Vec::new();
        for name in ["agent-as-model", "llama-server"] {
            let port = free_port();
            let (mut command, health) = if name == "agent-as-model" {
                (self.ours_command(port, slots), "/healthz")
            } else {
                (self.theirs_command(port, slots), "/health")
            };
            if let Some(mmproj) = mmproj {
                command.arg("--mmproj").arg(mmproj);
                if name == "agent-as-model" {
                    command.env("RUST_LOG", "error,agent_as_model=debug");
                }
            }
            servers.push(start(&self.client, name, &mut command, port, health).await);
        }
        servers
    }

    fn ours_command(&self, port: u16, slots: u32) -> Command {
        let mut command = Command::new(&self.ours);
        command
            .args(["--http", &format!("127.0.0.1:{port}"), "--backend", "local"])
            .arg("--model-file")
            .arg(&self.model)
            .env("AGENT_AS_MODEL_LOCAL_THREADS", &self.threads)
            .env("AGENT_AS_MODEL_LOCAL_SLOTS", slots.to_string())
            .env("AGENT_AS_MODEL_LOCAL_CONTEXT", CONTEXT.to_string())
            .env("RUST_LOG", "error");
        if let Some(layers) = &self.gpu_layers {
            command.env("AGENT_AS_MODEL_GPU_LAYERS", layers);
        }
        command
    }

    fn theirs_command(&self, port: u16, slots: u32) -> Command {
        let mut command = Command::new(&self.theirs);
        command
            .arg("-m")
            .arg(&self.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "-t",
                &self.threads,
                "-np",
                &slots.to_string(),
                "--kv-unified",
            ])
            .args(["-c", &(CONTEXT * slots).to_string(), "--no-webui"]);
        if let Some(layers) = self.gpu_layers.as_deref().filter(|l| *l != "auto") {
            command.args(["-ngl", layers]);
        }
        command
    }
}

/// `n` long answers at once on `server`, each its own conversation: the aggregate decode
/// tokens/s (every stream's tokens after its first, over the time from the first stream's
/// first token to the last stream's last) and the median time to first token (ms).
async fn streams_row(client: &reqwest::Client, server: &Server, n: u32, run: usize) -> [f64; 2] {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (client, url) = (client.clone(), server.url.clone());
        let tag = format!("{}-{n}-{run}-{i}-{}", &server.name[..1], std::process::id());
        set.spawn(async move { turn(&client, &url, &long_answer(&tag)).await });
    }
    let turns: Vec<Turn> = set
        .join_all()
        .await
        .into_iter()
        .map(|t| t.unwrap_or_else(|| panic!("{}: a stream failed", server.name)))
        .collect();
    let begun = turns.iter().map(|t| t.sent + t.first).min().unwrap();
    let ended = turns.iter().map(|t| t.sent + t.last).max().unwrap();
    let tokens: u32 = turns.iter().map(|t| t.chunks.saturating_sub(1)).sum();
    let firsts: Vec<f64> = turns.iter().map(|t| t.first.as_secs_f64() * 1e3).collect();
    let tps = f64::from(tokens) / (ended - begun).as_secs_f64();
    let ttft = median(firsts).0;
    println!(
        "{:<15} {n} streams, round {run}: {tps:.1} tokens/s, first token {ttft:.0} ms",
        server.name
    );
    [tps, ttft]
}

/// The streams' table: at each level, both servers started with that many slots, their
/// rounds alternating.
async fn streams_table(bench: &Bench, levels: &[u32], runs: usize) {
    let mut table = Vec::new();
    for &n in levels {
        let servers = bench.start_both(n, None).await;
        let mut rows = vec![Vec::new(), Vec::new()];
        for run in 0..runs {
            for (server, rows) in servers.iter().zip(rows.iter_mut()) {
                tokio::time::sleep(SETTLE).await;
                rows.push(streams_row(&bench.client, server, n, run).await);
            }
        }
        table.push((n, rows));
    }
    println!(
        "\n| streams | decode, all streams (tokens/s): ours | llama-server | against | first token (ms): ours | llama-server | against |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (n, rows) in table {
        let col = |r: &[[f64; 2]], i: usize| median(r.iter().map(|row| row[i]).collect());
        let (tps, theirs_tps) = (col(&rows[0], 0), col(&rows[1], 0));
        let (ttft, theirs_ttft) = (col(&rows[0], 1), col(&rows[1], 1));
        println!(
            "| {n} | {} | {} | {:.2}x | {} | {} | {:.2}x |",
            show(tps),
            show(theirs_tps),
            tps.0 / theirs_tps.0,
            show(ttft),
            show(theirs_ttft),
            theirs_ttft.0 / ttft.0
        );
    }
}

type Results<'a> = [(&'a str, f64, Vec<[f64; 4]>, f64)];

fn print_table(results: &Results) {
    let col = |r: &[[f64; 4]], i: usize| median(r.iter().map(|row| row[i]).collect());
    println!("\n| measure | agent-as-model | llama-server | ours against llama-server |");
    println!("| --- | --- | --- | --- |");
    let (ours, theirs) = (&results[0].2, &results[1].2);
    for (label, i, higher_better) in [
        ("time to first token, first turn (ms)", 0, false),
        ("decode (tokens/s)", 1, true),
        ("time to first token, second turn (ms)", 2, false),
        ("decode, a long answer (tokens/s)", 3, true),
    ] {
        let (a, b) = (col(ours, i), col(theirs, i));
        let ratio = if higher_better { a.0 / b.0 } else { b.0 / a.0 };
        println!("| {label} | {} | {} | {ratio:.2}x |", show(a), show(b));
    }
    println!(
        "| start-up to a first answer (s) | {:.2} | {:.2} | |",
        results[0].1, results[1].1
    );
    println!(
        "| peak resident memory (MiB) | {:.0} | {:.0} | |",
        results[0].3, results[1].3
    );
    println!(
        "\nmedian (min, max); against: theirs / ours for times, ours / theirs for tokens/s, so \
         1.00x or more means ours is at least as fast"
    );
}

/// The images of `BENCH_IMAGES` (paths, comma-separated), by default the five of
/// `tests/data/vision` the vision tests and `benches/vision_llama_server.sh` use.
fn image_files() -> Vec<PathBuf> {
    if let Ok(list) = std::env::var("BENCH_IMAGES") {
        let files = list.split(',').map(str::trim).filter(|f| !f.is_empty());
        return files.map(PathBuf::from).collect();
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vision");
    let names = [
        "red.png",
        "green.png",
        "blue.png",
        "blue.jpg",
        "gradient-640x480.png",
    ];
    names.iter().map(|name| dir.join(name)).collect()
}

/// The image file at `path` as a data URL, its type told by its name.
fn data_url(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let jpeg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"));
    let mime = if jpeg { "image/jpeg" } else { "image/png" };
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:{mime};base64,{data}")
}

/// A tag for the next request (`next` counts them): the count's digits, lowest first, then
/// the process: a tag differs from the last ten requests' from its first character, so no
/// prefix cache serves anything after the template's start (digits are a token each in the
/// default model's vocabulary, so every tag is as many tokens long).
fn run_tag(next: &mut u32) -> String {
    *next += 1;
    let digits: String = format!("{:06}", *next).chars().rev().collect();
    format!("{digits}-{}", std::process::id())
}

/// A user turn asking the colour of `image` (a data URL), or the same turn without it: the
/// question, which starts with `tag`, before the image; greedy, streamed, a few tokens.
fn image_chat(tag: &str, image: Option<&str>) -> Value {
    let question = format!("Run {tag}. What colour is this image? Answer with one word.");
    let mut content = vec![json!({"type": "text", "text": question})];
    if let Some(url) = image {
        content.push(json!({"type": "image_url", "image_url": {"url": url}}));
    }
    json!({"model": "local", "messages": [{"role": "user", "content": content}],
           "stream": true, "temperature": 0, "max_tokens": 4,
           "stream_options": {"include_usage": true}})
}

/// One streamed request that must succeed.
async fn ask(client: &reqwest::Client, server: &Server, body: &Value) -> Turn {
    turn(client, &server.url, body)
        .await
        .unwrap_or_else(|| panic!("{}: an image request failed", server.name))
}

/// The log's length now (where a request's lines will start).
fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

/// The time (ms) the server's log gives for reading an image in its lines after byte `from`:
/// ours logs `media read into a prompt … seconds=S` at debug level (the projector's encoding
/// and the model reading the embeddings); none for llama-server, whose log says nothing at
/// its default verbosity.
fn logged_ms(log: &Path, from: u64) -> Option<f64> {
    let text = std::fs::read(log).ok()?;
    let lines = String::from_utf8_lossy(text.get(usize::try_from(from).ok()?..)?).into_owned();
    let line = lines
        .lines()
        .find(|l| l.contains("media read into a prompt"))?;
    let seconds = line.split_once("seconds=")?.1.split_whitespace().next()?;
    seconds.parse::<f64>().ok().map(|s| s * 1e3)
}

/// One run of one image on one server.
struct ImageRun {
    /// The answer (does it name the image's colour?).
    answer: String,
    /// The prompt's tokens with the image less those without it.
    tokens: f64,
    /// Time to first token (ms) with the image, without it, and with it again.
    with: f64,
    without: f64,
    again: f64,
    /// The repeated request's prompt tokens and how many of them were cached.
    prompt: f64,
    cached: f64,
    /// Reading the image (ms) as the server's own log has it: ours only.
    logged: Option<f64>,
}

/// One run of an image (`url`) on `server`: the turn without the image, then with it (each
/// its own tag), then the turn with it again, unchanged.
async fn image_run(
    client: &reqwest::Client,
    server: &Server,
    url: &str,
    next: &mut u32,
) -> ImageRun {
    let without = ask(client, server, &image_chat(&run_tag(next), None)).await;
    let body = image_chat(&run_tag(next), Some(url));
    let from = log_len(&server.log);
    let with = ask(client, server, &body).await;
    let logged = logged_ms(&server.log, from);
    let again = ask(client, server, &body).await;
    let ms = |t: &Turn| t.first.as_secs_f64() * 1e3;
    let tokens = |t: &Turn| t.prompt as f64;
    ImageRun {
        answer: with.text.trim().to_owned(),
        tokens: tokens(&with) - tokens(&without),
        with: ms(&with),
        without: ms(&without),
        again: ms(&again),
        prompt: tokens(&again),
        cached: again.cached as f64,
        logged,
    }
}

impl ImageRun {
    /// The run as one line of the bench's log.
    fn line(&self) -> String {
        let logged = self
            .logged
            .map_or(String::new(), |ms| format!("; its log: read in {ms:.1} ms"));
        format!(
            "{:?}, {} tokens an image; first token {:.1} ms with it, {:.1} ms without \
             ({:.1} ms); again {:.1} ms, {}/{} cached{logged}",
            self.answer,
            self.tokens,
            self.with,
            self.without,
            self.with - self.without,
            self.again,
            self.cached,
            self.prompt
        )
    }
}

/// The images table (`BENCH_MMPROJ`; `BENCH_ONLY_IMAGES` runs it alone): both servers started
/// with the projector, then for each image `runs` runs on each, the servers alternating.
async fn images_table(bench: &Bench, mmproj: &Path, files: &[PathBuf], runs: usize) {
    let servers = bench.start_both(SLOTS, Some(mmproj)).await;
    let urls: Vec<String> = files.iter().map(|f| data_url(f)).collect();
    let mut next = 0;
    for (server, url) in servers.iter().zip(urls.iter().cycle()) {
        // The first image a server reads sets up what its projector needs: not measured.
        ask(
            &bench.client,
            server,
            &image_chat(&run_tag(&mut next), Some(url)),
        )
        .await;
    }
    let mut table = Vec::new();
    for (file, url) in files.iter().zip(&urls) {
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut rows = vec![Vec::new(), Vec::new()];
        for run in 0..runs {
            for (server, rows) in servers.iter().zip(rows.iter_mut()) {
                tokio::time::sleep(SETTLE).await;
                let row = image_run(&bench.client, server, url, &mut next).await;
                println!("{:<15} {name} run {run}: {}", server.name, row.line());
                rows.push(row);
            }
        }
        table.push((name, rows));
    }
    print_images(&table);
}

type ImageTable = [(String, Vec<Vec<ImageRun>>)];

/// The median (min, max) of `f` over `rows`.
fn image_col(rows: &[ImageRun], f: impl Fn(&ImageRun) -> f64) -> (f64, f64, f64) {
    median(rows.iter().map(f).collect())
}

/// A count: its median, and its range where the runs differed.
fn count((m, lo, hi): (f64, f64, f64)) -> String {
    if lo == hi {
        format!("{m:.0}")
    } else {
        format!("{m:.0} ({lo:.0}, {hi:.0})")
    }
}

/// The images' tables: the first request with each image, then the same request again.
fn print_images(table: &ImageTable) {
    print_first_reads(table);
    print_again(table);
    println!(
        "\nmedian (min, max); an image's cost: the first token's time with it less without it, \
         each run; against: theirs / ours, so 1.00x or more means ours is at least as fast"
    );
}

/// The tokens an image costs, the first token with it and what it adds to that.
fn print_first_reads(table: &ImageTable) {
    println!(
        "\n| image | tokens an image: ours | llama-server | first token with it (ms): ours | llama-server | the image's cost (ms): ours | llama-server | against | ours' log: read in (ms) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, rows) in table {
        let (ours, theirs) = (&rows[0], &rows[1]);
        let cost = |r: &[ImageRun]| image_col(r, |run| run.with - run.without);
        let (a, b) = (cost(ours), cost(theirs));
        let logged: Vec<f64> = ours.iter().filter_map(|r| r.logged).collect();
        let logged = if logged.is_empty() {
            "n/a".to_owned()
        } else {
            show(median(logged))
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.2}x | {logged} |",
            count(image_col(ours, |r| r.tokens)),
            count(image_col(theirs, |r| r.tokens)),
            show(image_col(ours, |r| r.with)),
            show(image_col(theirs, |r| r.with)),
            show(a),
            show(b),
            b.0 / a.0
        );
    }
}

/// The same request again: its first token and the prompt tokens it found cached.
fn print_again(table: &ImageTable) {
    println!(
        "\n| image | the same request again, first token (ms): ours | llama-server | against | cached of its prompt tokens: ours | llama-server |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, rows) in table {
        let (ours, theirs) = (&rows[0], &rows[1]);
        let (a, b) = (image_col(ours, |r| r.again), image_col(theirs, |r| r.again));
        let cached = |r: &[ImageRun]| {
            let (cached, prompt) = (
                image_col(r, |run| run.cached),
                image_col(r, |run| run.prompt),
            );
            format!("{} of {}", count(cached), count(prompt))
        };
        println!(
            "| {name} | {} | {} | {:.2}x | {} | {} |",
            show(a),
            show(b),
            b.0 / a.0,
            cached(ours),
            cached(theirs)
        );
    }
}
