//! The second turn of each agent CLI reads its prompt from the embedded model's cache: two
//! recorded turns of Claude Code (all its tools), Codex CLI and Gemini CLI (`tests/data/cli-cache/`,
//! recorded by `scripts/bench-cli-cache --record`: turn 1 is the CLI's first request, turn 2 the
//! one carrying its tool's result back, each as the CLI sent it with nothing switched off) are
//! replayed against the real binary on the embedded model, and the second turn's cached tokens
//! (the server's `local answer` log line, the figure each API's usage reports) must be at least
//! 90% of its prompt.
//!
//! At full size the three first prompts are about 36,000 tokens, many minutes on two cores; the
//! benchmark (`scripts/bench-cli-cache`, BENCHMARKS.md) reads them whole. Here each long text is
//! cut the same way in both turns: a line the other turn also has is kept only while the text's
//! kept lines of that kind stay short, and a line only one turn has (what varies between the
//! turns, or what the second turn added) is always kept, where it was; and a list of tools keeps
//! its first four and the one the second turn carries a call of. So what changes between the
//! turns, and where it sits, is what the CLIs send; only what the turns share is shorter (about
//! 1,300 to 1,800 tokens a first turn). `full_size_*` (ignored; `--ignored` runs it) replays the
//! turns whole.

use crate::http_api::embedded;
use serde_json::{Value, json};
use std::collections::HashSet;

/// Bytes of shared lines a text keeps when cut.
const SHARED_BYTES: usize = 160;

/// The answer's limit in the replayed turns: the prompt is the subject, not the answer (a call
/// cut short is refused, which [`replay`] allows).
const ANSWER_TOKENS: u64 = 8;

/// Tools a shortened turn keeps from the head of its list.
const TOOLS_KEPT: usize = 4;

/// A CLI's two recorded requests: their path and body.
fn recorded(cli: &str) -> [(String, Value); 2] {
    let file = format!(
        "{}/tests/data/cli-cache/{cli}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let turns: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(turns.len(), 2, "{file}: two turns");
    let turn = |v: &Value| (v["path"].as_str().unwrap().to_owned(), v["body"].clone());
    [turn(&turns[0]), turn(&turns[1])]
}

/// Every line of every string in `v`.
fn lines(v: &Value, into: &mut HashSet<String>) {
    match v {
        Value::String(s) => into.extend(s.lines().map(str::to_owned)),
        Value::Array(items) => items.iter().for_each(|i| lines(i, into)),
        Value::Object(map) => map.values().for_each(|i| lines(i, into)),
        _ => {}
    }
}

/// Cuts every string of `v`: of the lines `shared` also has, only the first
/// [`SHARED_BYTES`] bytes (the same in both turns); every other line kept.
fn cut(v: &mut Value, shared: &HashSet<String>) {
    match v {
        Value::String(s) if s.len() > SHARED_BYTES => {
            let mut budget = SHARED_BYTES;
            let mut kept = Vec::new();
            for line in s.lines() {
                if !shared.contains(line) {
                    kept.push(line.to_owned());
                } else if budget > 0 {
                    let mut end = line.len().min(budget);
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    kept.push(line[..end].to_owned());
                    budget -= end.max(1).min(budget);
                }
            }
            *s = kept.join("\n");
        }
        Value::Array(items) => items.iter_mut().for_each(|i| cut(i, shared)),
        Value::Object(map) => map.values_mut().for_each(|i| cut(i, shared)),
        _ => {}
    }
}

/// The names of the tools `body` (a second turn) carries calls of: Anthropic `tool_use`
/// blocks, Responses `function_call` items (Gemini's one list of declarations is kept whole).
fn called(body: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let items = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .chain(body["input"].as_array().into_iter().flatten());
    for item in items {
        if matches!(item["type"].as_str(), Some("tool_use" | "function_call")) {
            names.extend(item["name"].as_str().map(str::to_owned));
        }
    }
    names
}

/// `body`'s tools: the first [`TOOLS_KEPT`] and those named in `called`.
fn fewer_tools(body: &mut Value, called: &[String]) {
    if let Some(tools) = body.get_mut("tools").and_then(Value::as_array_mut) {
        let mut index = 0;
        tools.retain(|t| {
            index += 1;
            index <= TOOLS_KEPT
                || t["name"]
                    .as_str()
                    .is_some_and(|n| called.iter().any(|c| c == n))
        });
    }
}

/// The two turns with their shared text cut ([`cut`]) and fewer tools ([`fewer_tools`]).
fn shortened([(p1, mut b1), (p2, mut b2)]: [(String, Value); 2]) -> [(String, Value); 2] {
    let (mut l1, mut l2) = (HashSet::new(), HashSet::new());
    lines(&b1, &mut l1);
    lines(&b2, &mut l2);
    cut(&mut b1, &l2);
    cut(&mut b2, &l1);
    let calls = called(&b2);
    fewer_tools(&mut b1, &calls);
    fewer_tools(&mut b2, &calls);
    [(p1, b1), (p2, b2)]
}

/// A turn as this test sends it: not streamed, a short answer.
fn request(path: &str, body: &Value) -> (String, Value) {
    let mut body = body.clone();
    let map = body.as_object_mut().unwrap();
    map.remove("stream");
    let path = if path.starts_with("/v1/messages") {
        map.insert("max_tokens".into(), json!(ANSWER_TOKENS));
        path.to_owned()
    } else if path.starts_with("/v1/responses") {
        map.insert("max_output_tokens".into(), json!(ANSWER_TOKENS));
        path.to_owned()
    } else {
        let config = map.entry("generationConfig").or_insert_with(|| json!({}));
        config["maxOutputTokens"] = json!(ANSWER_TOKENS);
        path.replace(":streamGenerateContent", ":generateContent")
            .replace("?alt=sse", "")
    };
    (path, body)
}

/// The embedded model's answers so far, from the server's log (`local answer` lines): each
/// one's prompt tokens and those read from the cache.
fn answers(log: &std::path::Path) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let field = |line: &str, key: &str| -> Option<u64> {
        let at = line.find(&format!(" {key}="))? + key.len() + 2;
        line[at..].split(' ').next()?.parse().ok()
    };
    text.lines()
        .filter(|l| l.contains("local answer"))
        .filter_map(|l| Some((field(l, "prompt_tokens")?, field(l, "cached_tokens")?)))
        .collect()
}

/// Replays `turns` against `url` and checks the second turn's cache, read from the server's
/// `log`: the first answer the second turn had (the model's answer itself may be refused, a
/// 0.5B model's call failing its tool's schema; its prompt was read all the same).
async fn replay(url: &str, log: &std::path::Path, cli: &str, turns: &[(String, Value); 2]) {
    let mut seen = [(0, 0); 2];
    for (i, (path, body)) in turns.iter().enumerate() {
        let before = answers(log).len();
        let (path, body) = request(path, body);
        let response = crate::common::http_client()
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        // The log line is written before the answer is sent.
        let all = answers(log);
        assert!(
            all.len() > before,
            "{cli} turn {}: no answer of the model in the log ({status} {text})",
            i + 1
        );
        seen[i] = all[before];
    }
    let (prompt, cached) = seen[1];
    eprintln!(
        "{cli}: turn 1 {} tokens; turn 2 {prompt} tokens, {cached} cached",
        seen[0].0
    );
    assert!(
        cached * 10 >= prompt * 9,
        "{cli}: the second turn read {cached} of its {prompt} prompt tokens from the cache, \
         under 90% (turn 1: {} tokens)",
        seen[0].0
    );
}

async fn second_turns_are_cached(full: bool) {
    let fetched = crate::local::first_try();
    assert!(
        fetched.status.success(),
        "the embedded model could not be fetched"
    );
    let _turn = crate::local::TURN.lock().await;
    let log = std::env::temp_dir().join(format!("aam-cli-cache-{}-{full}.log", std::process::id()));
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_LOCAL_SEED", "7"),
        ("RUST_LOG", "info"),
    ];
    let server =
        crate::http::start_logging(&env, std::fs::File::create(&log).unwrap().into()).await;
    for cli in ["claude", "codex", "gemini"] {
        let turns = recorded(cli);
        let turns = if full { turns } else { shortened(turns) };
        replay(&server.url, &log, cli, &turns).await;
    }
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn each_clis_second_turn_reads_its_prompt_from_the_cache() {
    second_turns_are_cached(false).await;
}

#[tokio::test]
#[ignore = "about 36,000 prompt tokens: many minutes on two cores (scripts/bench-cli-cache)"]
async fn full_size_each_clis_second_turn_reads_its_prompt_from_the_cache() {
    second_turns_are_cached(true).await;
}

/// A conversation that outgrows the context keeps its cache: the first turn fits the first
/// context (4,096 tokens a slot), the second asks for more room for its answer than that
/// leaves, so the context grows before the second turn is read, and the slot's cache is carried
/// into the grown context.
#[tokio::test]
async fn a_turn_that_grows_the_context_still_reads_its_prefix_from_the_cache() {
    let (_turn, server) = embedded(&[("AGENT_AS_MODEL_LOCAL_SEED", "7")]).await;
    let notes: Vec<String> = (1..=150)
        .map(|i| {
            format!(
                "{i}. The note for day {i} says the kettle is in cupboard {}.",
                i % 7
            )
        })
        .collect();
    let mut messages = vec![
        json!({"role": "system", "content": notes.join("\n")}),
        json!({"role": "user", "content": "Which cupboard on day 12?"}),
    ];
    let mut usages = Vec::new();
    for max_tokens in [8, 3000] {
        // A stop at the first line's end keeps the answer short whatever room it is given.
        let body = json!({"model": "local", "messages": messages, "max_tokens": max_tokens,
                          "stop": ["\n"]});
        let (status, _, text) =
            crate::http_api::post(&format!("{}/v1/chat/completions", server.url), &[], &body).await;
        assert_eq!(status, 200, "{text}");
        let answer: Value = serde_json::from_str(&text).unwrap();
        let u = &answer["usage"];
        usages.push((
            u["prompt_tokens"].as_u64().unwrap(),
            u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
        ));
        messages.push(json!({"role": "assistant", "content": "Cupboard 5."}));
        messages.push(json!({"role": "user", "content": "And on day 13? One word."}));
    }
    let (first, (prompt, cached)) = (usages[0].0, usages[1]);
    assert!(
        first + 8 <= 4096 && prompt + 3000 > 4096,
        "the turns no longer straddle the first context: {usages:?}"
    );
    assert!(
        cached * 10 >= prompt * 9,
        "the second turn read {cached} of its {prompt} prompt tokens from the cache after the \
         context grew: {usages:?}"
    );
}
