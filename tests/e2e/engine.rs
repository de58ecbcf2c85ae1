//! The embedded engine (llama.cpp) through the real binary over stdio: calls share the slots
//! of one context, a cancelled call stops and frees its slot, a conversation's next turn
//! reuses the cached prefix (seen through `list_models`' counters, not through timing), and a
//! second architecture, Gemma 3, runs from its GGUF file.

use crate::common::raw::{Raw, tools_call};
use crate::local::{TURN, first_try};
use serde_json::{Value, json};
use std::time::Duration;

pub const LONG: Duration = Duration::from_secs(240);

/// A server answering with the embedded model, with `env` on top.
fn server(env: &[(&str, &str)]) -> Raw {
    let _ = first_try();
    let mut all = vec![("AGENT_AS_MODEL_BACKEND", "local")];
    all.extend_from_slice(env);
    Raw::legacy(&all, json!({}))
}

/// About `words` words of varied English (a little over one token each).
fn filler(words: usize) -> String {
    let pool = [
        "river", "mountain", "city", "garden", "winter", "market", "engine", "letter", "harbour",
        "forest", "bridge", "station", "music", "number", "window", "paper",
    ];
    (0..words)
        .map(|i| *pool.get((i * 7 + i / 3) % pool.len()).unwrap())
        .collect::<Vec<_>>()
        .join(" ")
}

fn generate(id: &str, prompt: &str, max_tokens: u32) -> Value {
    tools_call(
        json!(id),
        "generate",
        json!({"prompt": prompt, "max_tokens": max_tokens}),
    )
}

/// The local model's entry of `list_models`.
fn local_entry(raw: &mut Raw, id: &str) -> Value {
    raw.send(&tools_call(json!(id), "list_models", json!({})));
    let reply = raw.recv_id(&json!(id), LONG).expect("list_models answered");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    let listed: Value = serde_json::from_str(text).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["backend"] == "local")
        .cloned()
        .unwrap_or_else(|| panic!("no local model in {listed}"))
}

/// The ids of the next `n` replies, in the order they came.
fn reply_order(raw: &mut Raw, n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| {
            let reply = raw
                .recv_matching(LONG, &mut Vec::new(), |v| v.get("id").is_some())
                .unwrap_or_else(|| panic!("a reply came; stderr: {}", raw.stderr()));
            assert!(reply.get("result").is_some(), "{reply}");
            reply["id"].clone()
        })
        .collect()
}

#[test]
fn a_short_call_is_answered_beside_a_long_prompt_in_its_own_slot() {
    let _turn = TURN.blocking_lock();
    let mut raw = server(&[]);
    let engine = &local_entry(&mut raw, "models")["engine"];
    assert_eq!(engine["name"], "llama.cpp", "{engine}");
    assert_eq!(engine["slots"], 2, "{engine}");
    // A prompt of about 1,200 tokens (several seconds to read), then a short one.
    raw.send(&generate("long", &filler(1000), 1));
    std::thread::sleep(Duration::from_millis(300));
    raw.send(&generate("short", "Say hi.", 3));
    assert_eq!(
        reply_order(&mut raw, 2),
        vec![json!("short"), json!("long")],
        "the short call did not wait for the long prompt"
    );
}

#[test]
fn a_cancelled_call_stops_and_frees_its_only_slot() {
    let _turn = TURN.blocking_lock();
    // One slot: a call behind a long prompt waits for it, unless the long call is cancelled.
    let mut raw = server(&[("AGENT_AS_MODEL_LOCAL_SLOTS", "1")]);
    raw.send(&generate("long", &filler(1500), 1));
    std::thread::sleep(Duration::from_millis(500));
    raw.send(&generate("short", "Say hi.", 3));
    std::thread::sleep(Duration::from_millis(500));
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": "long", "reason": "the user moved on"}}),
    );
    assert_eq!(reply_order(&mut raw, 1), vec![json!("short")]);
    // Had the long call gone on, it would have ended first (one slot, in turn): only the short
    // call was ever completed.
    let cache = &local_entry(&mut raw, "models")["prefix_cache"];
    assert_eq!(cache["calls"], 1, "{cache}");
    assert!(cache["prompt_tokens"].as_u64().unwrap() < 100, "{cache}");
}

#[test]
fn a_conversations_next_turn_reuses_the_cached_prefix() {
    let _turn = TURN.blocking_lock();
    let mut raw = server(&[]);
    let system = format!(
        "You are a careful reader. Here is a text to answer questions about: {}",
        filler(300)
    );
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Which word comes first in the text?"}),
    ];
    let first = chat(&mut raw, "t1", &messages);
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let answer = first["choices"][0]["message"]["content"].clone();
    messages.push(json!({"role": "assistant", "content": answer}));
    messages.push(json!({"role": "user", "content": "And which word comes last?"}));
    let second = chat(&mut raw, "t2", &messages);
    let second_prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cache = &local_entry(&mut raw, "models")["prefix_cache"];
    assert_eq!(cache["calls"], 2, "{cache}");
    assert_eq!(
        cache["prompt_tokens"].as_u64().unwrap(),
        first_prompt + second_prompt,
        "{cache}"
    );
    // The second turn read only what the first had not: its whole first prompt was reused.
    let reused = cache["reused_tokens"].as_u64().unwrap();
    assert!(
        reused >= first_prompt,
        "{reused} tokens reused; the first prompt had {first_prompt}: {cache}"
    );
}

fn chat(raw: &mut Raw, id: &str, messages: &[Value]) -> Value {
    raw.send(&tools_call(
        json!(id),
        "chat_complete",
        json!({"messages": messages, "max_tokens": 12}),
    ));
    let reply = raw
        .recv_id(&json!(id), LONG)
        .expect("chat_complete answered");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    reply["result"]["structuredContent"]["chat_completion"].clone()
}

/// Asks a base model (no chat template: the prompt is given as it is, and continued) the
/// capital of France after one example; returns the answer, checked to be cut at the stop
/// sequence.
pub fn few_shot_paris(raw: &mut Raw) -> String {
    let few_shot = "Q: What is the capital of Germany?\nA: Berlin.\n\
                    Q: What is the capital of France?\nA:";
    raw.send(&tools_call(
        json!("paris"),
        "chat_complete",
        json!({"messages": [{"role": "user", "content": few_shot}], "stop": ["\n"],
               "max_tokens": 8}),
    ));
    let reply = raw.recv_id(&json!("paris"), LONG).expect("answered");
    let body = &reply["result"]["structuredContent"]["chat_completion"];
    let text = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {reply}"));
    assert!(!text.contains('\n'), "cut at the stop sequence: {text:?}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    text.to_owned()
}

/// Gemma 3 270M (Q4_K_M), which `scripts/test` assembles from its PyPI chunk packages.
pub fn gemma() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/peers/gemma-3-270m-q4_k_m.gguf"
    );
    assert!(
        std::path::Path::new(path).is_file(),
        "{path} is missing: scripts/test fetches it"
    );
    path.to_owned()
}

#[test]
fn gemma_3_a_second_architecture_answers_a_few_shot_prompt() {
    let _turn = TURN.blocking_lock();
    let path = gemma();
    let mut raw = server(&[("AGENT_AS_MODEL_MODEL_FILE", &path)]);
    let text = few_shot_paris(&mut raw);
    assert!(text.contains("Paris"), "{text}");
    let entry = local_entry(&mut raw, "models");
    assert_eq!(entry["status"], "ready", "{entry}");
    assert!(
        entry["id"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("gemma"),
        "{entry}"
    );
}
