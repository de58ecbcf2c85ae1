//! The embedded model's figures: fetch (opt-in, `BENCH_FETCH=1`: downloads 491 MB into a
//! temporary cache), load, time to first token, prompt and decode tokens per second (free and
//! under a JSON-schema constraint), and peak memory.
//!
//! `cargo bench --bench local_model` (the default model must be cached: run `try` once).
//! `BENCH_LLAMA_CPP=DIR` adds the same measures through llama.cpp on the same GGUF file, from
//! node-llama-cpp installed in DIR (`npm install --prefix DIR node-llama-cpp@3.22.1`, which
//! brings llama.cpp prebuilt for the CPU), and the slowdown of ours against it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use agent_as_model::local::engine::{Engine, Params};
use agent_as_model::local::fetch;
use llguidance::api::TopLevelGrammar;
use std::time::Instant;

const RUNS: usize = 3;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

fn median(values: &[f64]) -> f64 {
    sorted(values)[values.len() / 2]
}

fn spread(label: &str, unit: &str, values: &[f64]) {
    let v = sorted(values);
    let median = median(values);
    println!(
        "{label:<44} {median:>9.2} {unit:<6} (min {:.2}, max {:.2}, {} runs)",
        v[0],
        v[v.len() - 1],
        v.len()
    );
}

struct Run {
    ttft: f64,
    prompt_tps: f64,
    decode_tps: f64,
    tokens: usize,
}

fn generate(
    engine: &mut Engine,
    prompt: &str,
    max: usize,
    grammar: Option<TopLevelGrammar>,
) -> Run {
    let params = Params {
        max_tokens: max,
        temperature: None,
        top_p: None,
        seed: 1,
        stop: Vec::new(),
    };
    let constraint = grammar.map(|g| engine.constraint(g).unwrap());
    let started = Instant::now();
    let mut first = None;
    let out = engine
        .generate(prompt, &params, constraint, &|| false, &mut |n| {
            if n == 1 {
                first = Some(started.elapsed().as_secs_f64());
            }
        })
        .unwrap();
    let total = started.elapsed().as_secs_f64();
    let ttft = first.unwrap_or(total);
    Run {
        ttft,
        prompt_tps: out.prompt_tokens as f64 / ttft,
        decode_tps: (out.completion_tokens.saturating_sub(1)) as f64 / (total - ttft).max(1e-9),
        tokens: out.completion_tokens,
    }
}

fn main() {
    agent_as_model::install_tls();
    println!(
        "machine: {} cores available, RAYON_NUM_THREADS={}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into())
    );
    if std::env::var("BENCH_FETCH").is_ok_and(|v| v == "1") {
        let dir = std::env::temp_dir().join(format!("aam-bench-fetch-{}", std::process::id()));
        // SAFETY: set before any other thread reads the environment.
        unsafe { std::env::set_var("AGENT_AS_MODEL_CACHE_DIR", &dir) };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let started = Instant::now();
        runtime
            .block_on(fetch::default_model(&mut fetch::Progress::new()))
            .unwrap();
        spread(
            "fetch + check + convert (fresh cache)",
            "s",
            &[started.elapsed().as_secs_f64()],
        );
        let _ = std::fs::remove_dir_all(&dir);
        // SAFETY: as above.
        unsafe { std::env::remove_var("AGENT_AS_MODEL_CACHE_DIR") };
    }
    let path = fetch::cached_default().expect("the default model is cached: run `try` once");
    let mut loads = Vec::new();
    let mut engine = None;
    for _ in 0..RUNS {
        drop(engine.take()); // one model in memory at a time: the peak is one model's
        let started = Instant::now();
        engine = Some(Engine::load(&path, 4096).unwrap());
        loads.push(started.elapsed().as_secs_f64());
    }
    let mut engine = engine.unwrap();
    spread("load (page cache warm)", "s", &loads);
    let system = "You are a helpful assistant. Answer clearly and correctly.";
    let long = format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{}\nSummarise the text above \
         in detail.<|im_end|>\n<|im_start|>assistant\n",
        "The quick brown fox jumps over the lazy dog near the river bank at dawn. ".repeat(12)
    );
    let question = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\
                    What is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let mut ttft = Vec::new();
    let mut prompt = Vec::new();
    let mut decode = Vec::new();
    let mut short = Vec::new();
    for _ in 0..RUNS {
        let r = generate(&mut engine, &long, 64, None);
        ttft.push(r.ttft * 1000.0);
        prompt.push(r.prompt_tps);
        decode.push(r.decode_tps);
        let q = generate(&mut engine, question, 32, None);
        short.push(q.ttft * 1000.0);
    }
    println!("prompt: {} tokens", engine.count(&long).unwrap());
    spread("time to first token, ~200-token prompt", "ms", &ttft);
    spread("time to first token, 25-token question", "ms", &short);
    spread("prompt processing", "tok/s", &prompt);
    spread("decode, free", "tok/s", &decode);
    let schema = serde_json::json!({"type": "object", "additionalProperties": false,
        "properties": {"summary": {"type": "string"}, "words": {"type": "integer"}},
        "required": ["summary", "words"]});
    let mut constrained = Vec::new();
    let mut tokens = 0;
    for _ in 0..RUNS {
        let r = generate(
            &mut engine,
            &long,
            64,
            Some(TopLevelGrammar::from_json_schema(schema.clone())),
        );
        constrained.push(r.decode_tps);
        tokens = r.tokens;
    }
    spread(
        &format!("decode, JSON-schema constrained ({tokens} tok)"),
        "tok/s",
        &constrained,
    );
    spread("peak RSS (VmHWM)", "MiB", &[peak_rss_mib()]);
    if let Ok(dir) = std::env::var("BENCH_LLAMA_CPP") {
        let ours = [
            ("load (page cache warm)", "s", median(&loads), false),
            (
                "time to first token, ~200-token prompt",
                "ms",
                median(&ttft),
                false,
            ),
            (
                "time to first token, 25-token question",
                "ms",
                median(&short),
                false,
            ),
            ("prompt processing", "tok/s", median(&prompt), true),
            ("decode, free", "tok/s", median(&decode), true),
        ];
        against_llama_cpp(&dir, &path, &ours);
    }
}

/// The same GGUF file, prompts and greedy decoding through llama.cpp (node-llama-cpp's prebuilt
/// CPU build, installed in `dir`), run after ours so the two never share the cores. Ratios are
/// ours/llama.cpp for times and llama.cpp/ours for rates: above 1.0x, ours is slower.
fn against_llama_cpp(dir: &str, model: &std::path::Path, ours: &[(&str, &str, f64, bool)]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/llama_cpp.mjs");
    let out = std::process::Command::new("node")
        .args([script, dir, &model.to_string_lossy(), &RUNS.to_string()])
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let theirs = |pointer: &str| -> f64 {
        median(
            &runs
                .iter()
                .filter_map(|r| r.pointer(pointer).and_then(serde_json::Value::as_f64))
                .collect::<Vec<_>>(),
        )
    };
    let pointers = [
        "/load_s",
        "/long/ttft_ms",
        "/question/ttft_ms",
        "/long/prompt_tps",
        "/long/decode_tps",
    ];
    println!(
        "\n| against llama.cpp, same GGUF ({} runs, medians) | ours | llama.cpp | slowdown |",
        runs.len()
    );
    println!("| --- | --- | --- | --- |");
    for ((label, unit, value, rate), pointer) in ours.iter().zip(pointers) {
        let other = theirs(pointer);
        let slowdown = if *rate { other / value } else { value / other };
        println!("| {label} | {value:.2} {unit} | {other:.2} {unit} | {slowdown:.2}x |");
    }
}
