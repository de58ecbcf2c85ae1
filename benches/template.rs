//! The chat template's render time, as the embedded model pays it before every prompt: a
//! typical chat (a system prompt, ten turns of about fifty words, two tools) rendered with
//! Qwen3's template (tests/data/templates/qwen3.jinja) on a thread, in a renderer process
//! started for each rendering (`Sandbox::render`), and in the engines' long-lived renderer
//! (`Renderer::render`, which a server's models use); each `BENCH_RENDERS` times (default 200)
//! after a few unmeasured ones, on an idle machine and with every core kept busy by a spinning
//! thread (as a model decoding on them does). Median and spread in µs.
//!
//! `cargo bench --bench template`; `BENCH_SERVER` renders in another build of the server.
//! Nothing here asserts anything about time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use agent_as_model::call::{Role, Turn};
use agent_as_model::local::template::{self, Chat, Renderer, Sandbox, SpecialTokens};
use agent_as_model::wire::openai::{Reader, Tool, messages};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The renderings not measured before each series.
const WARM_UP: usize = 5;

/// The template, as a model carries it.
fn qwen3() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/templates/qwen3.jinja"
    );
    std::fs::read_to_string(path).unwrap()
}

/// A function tool named `name` that takes a string `arg`.
fn tool(name: &str, arg: &str) -> Tool {
    let parameters = serde_json::json!({"type": "object",
        "properties": {arg: {"type": "string", "description": "What to look up."}},
        "required": [arg]});
    Tool::function(
        name,
        Some("Looks something up."),
        parameters.as_object().unwrap(),
    )
}

/// Ten turns of about fifty words each, user and assistant in turn.
fn turns() -> Vec<Turn> {
    (0..10)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            Turn::text(
                role,
                format!("turn {i}: {}", "some words of the chat ".repeat(10)),
            )
        })
        .collect()
}

/// The time of each of `runs` renderings by `render`, in µs.
fn measure(runs: usize, mut render: impl FnMut() -> String) -> Vec<f64> {
    for _ in 0..WARM_UP {
        assert!(!render().is_empty());
    }
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            assert!(!render().is_empty());
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// One line: the median, quartiles and extremes of `values`.
fn report(label: &str, values: &mut [f64]) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label:<48} median {:>9.1} µs  (p25 {:.1}, p75 {:.1}, min {:.1}, max {:.1}; {} runs)",
        at(0.5),
        at(0.25),
        at(0.75),
        at(0.0),
        at(1.0),
        values.len()
    );
}

/// Spinning threads, one a core, until the value is dropped.
struct Busy(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Busy {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Busy(stop, threads)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for thread in self.1.drain(..) {
            thread.join().unwrap();
        }
    }
}

fn main() {
    let runs = std::env::var("BENCH_RENDERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let template = qwen3();
    let m = messages(Some("You are a helpful agent."), &turns(), Reader::Template);
    let tools = [tool("search", "query"), tool("read_file", "path")];
    let special = SpecialTokens {
        eos: Some("<|im_end|>".into()),
        ..SpecialTokens::default()
    };
    let chat = Chat {
        special: Some(&special),
        ..Chat::new(&m, &tools)
    };
    let sandbox = Sandbox {
        program: std::env::var_os("BENCH_SERVER")
            .map_or_else(|| env!("CARGO_BIN_EXE_agent-as-model").into(), Into::into),
        memory: 1 << 30,
    };
    let renderer = Renderer::new(sandbox.clone());
    let prompt = template::render(Some(&template), &chat).unwrap();
    println!(
        "a chat of {} messages and {} tools, {} bytes rendered; {runs} renderings each",
        m.len(),
        tools.len(),
        prompt.len()
    );
    for busy in [false, true] {
        let _busy = busy.then(Busy::start);
        let load = if busy { "all cores busy" } else { "idle" };
        let mut thread = measure(runs, || template::render(Some(&template), &chat).unwrap());
        report(&format!("on a thread ({load})"), &mut thread);
        let mut each = measure(runs, || sandbox.render(Some(&template), &chat).unwrap());
        report(&format!("a process for each rendering ({load})"), &mut each);
        let mut kept = measure(runs, || renderer.render(Some(&template), &chat).unwrap());
        report(&format!("the long-lived renderer ({load})"), &mut kept);
        assert_eq!(renderer.spawned(), 1, "one renderer process for them all");
    }
}
