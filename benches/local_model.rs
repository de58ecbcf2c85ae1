//! The embedded model's figures: fetch (opt-in, `BENCH_FETCH=1`: downloads 491 MB into a
//! temporary cache), load, time to first token, prompt and decode tokens per second (free and
//! under a JSON-schema constraint), a 4,000-token prompt, a conversation's next turn through
//! the prefix cache, a cancelled call, a short call beside a long prompt, and peak memory.
//! `BENCH_MODEL=FILE` measures another GGUF file.
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

use agent_as_model::local::engine::{self, Model, Output, Params};
use agent_as_model::local::fetch;
use agent_as_model::local::slots::{self, Call, Counters, Llama, Slots};
use llguidance::api::TopLevelGrammar;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
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
    cached: usize,
}

type Reply = tokio::sync::oneshot::Receiver<Result<Output, agent_as_model::local::LocalError>>;

/// A reader that notes when the first token came.
struct FirstToken(Rc<Cell<Option<Instant>>>);

impl slots::Reader for FirstToken {
    fn read(&mut self, tokens: usize, _text: &str) {
        if tokens == 1 {
            self.0.set(Some(Instant::now()));
        }
    }

    fn end(self: Box<Self>, _tokens: usize) -> Option<agent_as_model::local::format::Answer> {
        None
    }
}

/// A greedy call of `prompt` (ChatML text), and the instant its first token came.
fn call(
    model: &Model,
    prompt: &str,
    max: usize,
    grammar: Option<TopLevelGrammar>,
) -> (Call, Reply, Rc<Cell<Option<Instant>>>) {
    let params = Params {
        max_tokens: max,
        temperature: None,
        top_p: None,
        top_k: None,
        seed: 1,
        stop: Vec::new(),
        ..Params::default()
    };
    let constraint = grammar.map(|g| model.constraint(g).unwrap());
    let first = Rc::new(Cell::new(None));
    let seen = first.clone();
    let (reply, answer) = tokio::sync::oneshot::channel();
    let call = Call {
        prompt: model.tokenize(prompt),
        media: Vec::new(),
        sampler: engine::sampler(&params, constraint),
        params,
        budget: max,
        reader: Box::new(FirstToken(seen)),
        shown: Vec::new(),
        in_reasoning: false,
        think: None,
        lazy: None,
        reply,
    };
    (call, answer, first)
}

/// Puts a call in the slots, which have room for it.
fn admit(slots: &mut Slots<Llama<'_>>, call: Call) {
    assert!(slots.place(call).is_none(), "no room for the call");
}

/// Steps the slots until `answer` arrives.
fn until(slots: &mut Slots<Llama<'_>>, answer: &mut Reply) -> Output {
    loop {
        if let Ok(out) = answer.try_recv() {
            return out.unwrap();
        }
        slots.step();
    }
}

fn generate(
    slots: &mut Slots<Llama<'_>>,
    model: &Model,
    prompt: &str,
    max: usize,
    grammar: Option<TopLevelGrammar>,
) -> Run {
    let (c, mut answer, first) = call(model, prompt, max, grammar);
    let started = Instant::now();
    admit(slots, c);
    let out = until(slots, &mut answer);
    let total = started.elapsed().as_secs_f64();
    let ttft = first.get().map_or(total, |t| (t - started).as_secs_f64());
    Run {
        ttft,
        prompt_tps: (out.prompt_tokens - out.cached_tokens) as f64 / ttft,
        decode_tps: (out.completion_tokens.saturating_sub(1)) as f64 / (total - ttft).max(1e-9),
        tokens: out.completion_tokens,
        cached: out.cached_tokens,
    }
}

fn chatml(system: &str, turns: &[(&str, &str)]) -> String {
    let mut text = format!("<|im_start|>system\n{system}<|im_end|>\n");
    for (role, content) in turns {
        text.push_str(&format!("<|im_start|>{role}\n{content}<|im_end|>\n"));
    }
    text.push_str("<|im_start|>assistant\n");
    text
}

/// About `tokens` tokens of varied English.
fn filler(tokens: usize) -> String {
    let words = [
        "river", "mountain", "city", "garden", "winter", "market", "engine", "letter", "harbour",
        "forest", "bridge", "station", "music", "number", "window", "paper",
    ];
    let mut text = String::new();
    for i in 0..tokens {
        text.push_str(words[(i * 7 + i / 3) % words.len()]);
        text.push(if i % 12 == 11 { '.' } else { ' ' });
    }
    text
}

fn main() {
    agent_as_model::install_tls();
    let threads = engine::physical_cores();
    println!(
        "machine: {} logical CPUs, {threads} physical cores; llama.cpp with {threads} threads, 2 slots",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
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
            "fetch + check (fresh cache)",
            "s",
            &[started.elapsed().as_secs_f64()],
        );
        let _ = std::fs::remove_dir_all(&dir);
        // SAFETY: as above.
        unsafe { std::env::remove_var("AGENT_AS_MODEL_CACHE_DIR") };
    }
    let path = std::env::var_os("BENCH_MODEL")
        .map(std::path::PathBuf::from)
        .or_else(fetch::cached_default)
        .expect("the default model is cached: run `try` once");
    println!("model file: {}", path.display());
    let step = std::env::var("BENCH_STEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(engine::STEP_TOKENS);
    println!("tokens per step: {step}");
    let settings = engine::Settings {
        context: 4608,
        slots: 2,
        threads,
        step,
        chat_template: None,
        gpu_layers: Default::default(),
    };
    let mut loads = Vec::new();
    let mut model = None;
    for _ in 0..RUNS {
        drop(model.take()); // one model in memory at a time: the peak is one model's
        let started = Instant::now();
        model = Some(Model::load(&path, &settings).unwrap());
        loads.push(started.elapsed().as_secs_f64());
    }
    let model = model.unwrap();
    let counters = Arc::new(Counters::default());
    let fresh = || {
        let (layout, first) = Llama::layout(&model);
        let decoder = Llama::new(&model, first).unwrap();
        Slots::new(decoder, layout, counters.clone(), None)
    };
    spread("load (page cache warm)", "s", &loads);
    let system = "You are a helpful assistant. Answer clearly and correctly.";
    let long = chatml(
        system,
        &[(
            "user",
            &format!(
                "{}\nSummarise the text above in detail.",
                "The quick brown fox jumps over the lazy dog near the river bank at dawn. "
                    .repeat(12)
            ),
        )],
    );
    let question = chatml(
        "You are a helpful assistant.",
        &[("user", "What is the capital of France?")],
    );
    let only = std::env::var("BENCH_ONLY").ok();
    let wants = |section: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|s| s.trim() == section))
    };
    let (mut ttft, mut prompt, mut decode, mut short) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS * usize::from(wants("basic")) {
        // New slots each run: nothing is reused from the run before.
        let r = generate(&mut fresh(), &model, &long, 64, None);
        ttft.push(r.ttft * 1000.0);
        prompt.push(r.prompt_tps);
        decode.push(r.decode_tps);
        let q = generate(&mut fresh(), &model, &question, 32, None);
        short.push(q.ttft * 1000.0);
    }
    if wants("basic") {
        basic(&model, &long, &fresh, [&ttft, &short, &prompt, &decode]);
    }
    let huge = chatml(
        system,
        &[(
            "user",
            &format!("{}\nWhat is this text about?", filler(3950)),
        )],
    );
    let huge_s = wants("long").then(|| long_prompt(&model, &huge, &fresh));
    if wants("conversation") {
        conversation(&model, system, &fresh);
    }
    if wants("slots") {
        slots_sections(&model, &huge, &question, &fresh);
    }
    spread("peak RSS (VmHWM)", "MiB", &[peak_rss_mib()]);
    if wants("basic")
        && let Ok(dir) = std::env::var("BENCH_LLAMA_CPP")
    {
        let mut ours = vec![
            Row(
                "load (page cache warm)",
                "s",
                median(&loads),
                false,
                "/load_s",
                1.0,
            ),
            Row(
                "time to first token, ~200-token prompt",
                "ms",
                median(&ttft),
                false,
                "/long/ttft_ms",
                1.0,
            ),
            Row(
                "time to first token, 25-token question",
                "ms",
                median(&short),
                false,
                "/question/ttft_ms",
                1.0,
            ),
            Row(
                "prompt processing",
                "tok/s",
                median(&prompt),
                true,
                "/long/prompt_tps",
                1.0,
            ),
            Row(
                "decode, free",
                "tok/s",
                median(&decode),
                true,
                "/long/decode_tps",
                1.0,
            ),
        ];
        if let Some(huge_s) = huge_s {
            ours.push(Row(
                "4,310-token prompt, to first token",
                "s",
                huge_s,
                false,
                "/huge/ttft_ms",
                0.001,
            ));
        }
        against_llama_cpp(&dir, &path, &ours);
    }
}

/// One measure against llama.cpp's: label, unit, ours, whether higher is better, where
/// llama.cpp's is in its report, and the factor that brings it to our unit.
struct Row(&'static str, &'static str, f64, bool, &'static str, f64);

/// Time to first token, prompt and decode rates, and decode under a JSON-schema grammar.
fn basic<'m>(
    model: &'m Model,
    long: &str,
    fresh: &dyn Fn() -> Slots<Llama<'m>>,
    [ttft, short, prompt, decode]: [&Vec<f64>; 4],
) {
    println!("prompt: {} tokens", model.count(long));
    spread("time to first token, ~200-token prompt", "ms", ttft);
    spread("time to first token, 25-token question", "ms", short);
    spread("prompt processing", "tok/s", prompt);
    spread("decode, free", "tok/s", decode);
    let schema = serde_json::json!({"type": "object", "additionalProperties": false,
        "properties": {"summary": {"type": "string"}, "words": {"type": "integer"}},
        "required": ["summary", "words"]});
    let mut constrained = Vec::new();
    let mut tokens = 0;
    for _ in 0..RUNS {
        let grammar = Some(TopLevelGrammar::from_json_schema(schema.clone()));
        let r = generate(&mut fresh(), model, long, 64, grammar);
        constrained.push(r.decode_tps);
        tokens = r.tokens;
    }
    spread(
        &format!("decode, JSON-schema constrained ({tokens} tok)"),
        "tok/s",
        &constrained,
    );
}

/// A 4,000-token prompt, whole, and its longest step.
fn long_prompt<'m>(model: &'m Model, huge: &str, fresh: &dyn Fn() -> Slots<Llama<'m>>) -> f64 {
    let huge_tokens = model.count(huge);
    let (mut whole, mut longest) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let mut slots = fresh();
        let (c, mut answer, _) = call(model, huge, 1, None);
        let started = Instant::now();
        admit(&mut slots, c);
        // A cancellation waits for the step under way at most: the longest step bounds it.
        let mut step_max: f64 = 0.0;
        while answer.try_recv().is_err() {
            let step = Instant::now();
            slots.step();
            step_max = step_max.max(step.elapsed().as_secs_f64() * 1000.0);
        }
        whole.push(started.elapsed().as_secs_f64());
        longest.push(step_max);
    }
    spread(
        &format!("{huge_tokens}-token prompt, to first token"),
        "s",
        &whole,
    );
    spread("  its longest step (bounds a cancellation)", "ms", &longest);
    median(&whole)
}

/// A conversation: the first turn with a 1,500-token history, then the next turn.
fn conversation<'m>(model: &'m Model, system: &str, fresh: &dyn Fn() -> Slots<Llama<'m>>) {
    let history = filler(1500);
    let (mut first_turn, mut second_turn, mut reused) = (Vec::new(), Vec::new(), 0);
    for _ in 0..RUNS {
        let mut slots = fresh();
        let one = chatml(
            system,
            &[("user", &format!("{history}\nName one word above."))],
        );
        first_turn.push(generate(&mut slots, model, &one, 8, None).ttft);
        let two = chatml(
            system,
            &[
                ("user", &format!("{history}\nName one word above.")),
                ("assistant", "river"),
                ("user", "Name another."),
            ],
        );
        let r = generate(&mut slots, model, &two, 8, None);
        second_turn.push(r.ttft);
        reused = r.cached;
    }
    spread(
        "conversation, 1,500-token history: first turn TTFT",
        "s",
        &first_turn,
    );
    spread(
        &format!("conversation: next turn TTFT ({reused} tokens reused)"),
        "s",
        &second_turn,
    );
    println!(
        "{:<44} {:>9.1} x",
        "  next turn faster by",
        median(&first_turn) / median(&second_turn)
    );
}

/// A cancelled 4,000-token call, and a short call beside a long prompt.
fn slots_sections<'m>(
    model: &'m Model,
    huge: &str,
    question: &str,
    fresh: &dyn Fn() -> Slots<Llama<'m>>,
) {
    // A cancelled 4,000-token call: the step after the cancellation frees its slot.
    let mut slots = fresh();
    let (c, answer, _) = call(model, huge, 16, None);
    admit(&mut slots, c);
    for _ in 0..3 {
        slots.step();
    }
    drop(answer);
    slots.step();
    assert!(
        slots.is_idle(),
        "a cancelled call frees its slot at the next step"
    );

    // A 3-token call sent while a 4,000-token prompt is being read.
    let mut beside = Vec::new();
    for _ in 0..RUNS {
        let mut slots = fresh();
        let (long_call, _long_answer, _) = call(model, huge, 4, None);
        admit(&mut slots, long_call);
        for _ in 0..3 {
            slots.step();
        }
        let (c, mut answer, _) = call(model, question, 3, None);
        let started = Instant::now();
        admit(&mut slots, c);
        until(&mut slots, &mut answer);
        beside.push(started.elapsed().as_secs_f64());
    }
    spread("3-token call beside a 4,000-token prompt", "s", &beside);
}

/// The same GGUF file, prompts and greedy decoding through llama.cpp (node-llama-cpp's prebuilt
/// CPU build, installed in `dir`), run after ours so the two never share the cores. Ratios are
/// ours/llama.cpp for times and llama.cpp/ours for rates: above 1.0x, ours is slower.
fn against_llama_cpp(dir: &str, model: &std::path::Path, ours: &[Row]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/llama_cpp.mjs");
    let out = std::process::Command::new("node")
        .args([script, dir, &model.to_string_lossy(), &RUNS.to_string()])
        .env(
            "BENCH_ONLY",
            if ours.len() > 5 {
                "basic,long"
            } else {
                "basic"
            },
        )
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
    println!(
        "\n| against llama.cpp, same GGUF ({} runs, medians) | ours | llama.cpp | slowdown |",
        runs.len()
    );
    println!("| --- | --- | --- | --- |");
    for Row(label, unit, value, rate, pointer, scale) in ours {
        let other = theirs(pointer) * scale;
        let slowdown = if *rate { other / value } else { value / other };
        println!("| {label} | {value:.2} {unit} | {other:.2} {unit} | {slowdown:.2}x |");
    }
}
