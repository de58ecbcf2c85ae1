//! The embedded engine (llama.cpp) through the real binary over stdio: calls share the slots
//! of one context, a cancelled call stops and frees its slot, a conversation's next turn
//! reuses the cached prefix (seen through `list_models`' counters, not through timing), a
//! repeat penalty turns a greedy answer from what it has seen, and a second architecture,
//! Gemma 3, runs from its GGUF file.

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
pub(crate) fn local_entry(raw: &mut Raw, id: &str) -> Value {
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

/// Gemma 3 270M (Q4_K_M), which `scripts/test` assembles from its PyPI chunk packages. It fails
/// in the fast tier (`common::tier`).
pub fn gemma() -> String {
    crate::common::tier::needs_model("the Gemma 3 file");
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

/// A model file in a directory of its own, removed with it (a failed test too).
struct Templated(std::path::PathBuf);

impl Drop for Templated {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A copy of Gemma's GGUF (which carries no chat template) with `template` added as its
/// `tokenizer.chat_template`, as a GGUF from anyone may carry one; the tensor data is moved
/// along, realigned.
fn gemma_with_template(name: &str, template: &str) -> Templated {
    let bytes = std::fs::read(gemma()).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..4], b"GGUF");
    assert_eq!(u32_at(4), 3, "GGUF version");
    let (tensors, kvs) = (u64_at(8), u64_at(16));
    // The end of a value of type `kind` that starts at `at`.
    fn skip(
        kind: u32,
        at: usize,
        u32_at: &dyn Fn(usize) -> u32,
        u64_at: &dyn Fn(usize) -> usize,
    ) -> usize {
        match kind {
            0 | 1 | 7 => at + 1,
            2 | 3 => at + 2,
            4..=6 => at + 4,
            10..=12 => at + 8,
            8 => at + 8 + u64_at(at),
            9 => {
                let (inner, n) = (u32_at(at), u64_at(at + 4));
                (0..n).fold(at + 12, |at, _| skip(inner, at, u32_at, u64_at))
            }
            _ => panic!("GGUF value type {kind}"),
        }
    }
    let mut at = 24;
    for _ in 0..kvs {
        let key_end = at + 8 + u64_at(at);
        let key = std::str::from_utf8(&bytes[at + 8..key_end]).unwrap();
        assert!(
            key != "tokenizer.chat_template" && key != "general.alignment",
            "{key}"
        );
        at = skip(u32_at(key_end), key_end + 4, &u32_at, &u64_at);
    }
    let kv_end = at;
    for _ in 0..tensors {
        at += 8 + u64_at(at);
        let dims = u32_at(at) as usize;
        at += 4 + 8 * dims + 4 + 8;
    }
    let (infos_end, align) = (at, 32);
    let data = infos_end.div_ceil(align) * align;
    let mut out = bytes[..16].to_vec();
    out.extend_from_slice(&(kvs as u64 + 1).to_le_bytes());
    out.extend_from_slice(&bytes[24..kv_end]);
    let key = b"tokenizer.chat_template";
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&8u32.to_le_bytes());
    out.extend_from_slice(&(template.len() as u64).to_le_bytes());
    out.extend_from_slice(template.as_bytes());
    out.extend_from_slice(&bytes[kv_end..infos_end]);
    out.resize(out.len().div_ceil(align) * align, 0);
    out.extend_from_slice(&bytes[data..]);
    let dir = std::env::temp_dir().join(format!("aam-template-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gemma-3-270m-templated.gguf");
    let templated = Templated(path);
    std::fs::write(&templated.0, out).unwrap();
    templated
}

#[test]
fn a_models_runaway_chat_template_fails_the_call_and_the_model_answers_on() {
    let _turn = TURN.blocking_lock();
    // First a template that works, to show the copy is read and its template used: Gemma's
    // turns, written out by the template.
    let turns = "{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' \
                 else m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}\
                 <start_of_turn>model\n";
    let cases = [
        // 10^10 steps writing nothing: without fuel the call never came back.
        (
            "loop",
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            "the model's chat template ran too long",
        ),
        // 64 × 100 MB: without a cap the process aborted, allocating 6.4 GB.
        (
            "output",
            "{% for i in range(64) %}{{ 'x' * 100000000 }}{% endfor %}",
            "the model's chat template produced more than",
        ),
    ];
    let good = gemma_with_template("good", turns);
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_BACKEND", "local"),
            ("AGENT_AS_MODEL_MODEL_FILE", good.0.to_str().unwrap()),
        ],
        json!({}),
    );
    raw.send(&generate("good", "Say hi.", 3));
    let reply = raw.recv_id(&json!("good"), LONG).expect("answered");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    drop(raw);
    for (name, template, expected) in cases {
        let path = gemma_with_template(name, template);
        let mut raw = Raw::legacy(
            &[
                ("AGENT_AS_MODEL_BACKEND", "local"),
                ("AGENT_AS_MODEL_MODEL_FILE", path.0.to_str().unwrap()),
            ],
            json!({}),
        );
        // Twice: the call fails, and the model's thread is free for the next one.
        for id in ["first", "second"] {
            raw.send(&generate(id, "Say hi.", 3));
            // Answered before the test's deadline of 30 s.
            let reply = raw
                .recv_id(&json!(id), Duration::from_secs(30))
                .unwrap_or_else(|| {
                    panic!("{name}: no answer within 30 s; stderr: {}", raw.stderr())
                });
            assert_eq!(reply["result"]["isError"], true, "{name}: {reply}");
            let text = reply["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.contains(expected), "{name}: {text}");
        }
        let entry = local_entry(&mut raw, "models");
        assert_eq!(entry["status"], "ready", "{name}: {entry}");
        drop(raw);
    }
}

/// What Ollama's raw generate answers on the embedded model, greedily, for 24 tokens of
/// `prompt` with `options` besides; and the response's warnings.
async fn raw_generate(s: &crate::http::Replica, prompt: &str, options: Value) -> (String, String) {
    let mut all = json!({"temperature": 0, "num_predict": 24});
    all.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    let body = json!({"model": "qwen2.5-coder-0.5b-instruct", "prompt": prompt, "raw": true,
                      "stream": false, "options": all});
    let url = format!("{}/api/generate", s.url);
    let (status, headers, text) = crate::http_api::post(&url, &[], &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let warnings = headers
        .get("x-agent-as-model-warnings")
        .map(|w| w.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (v["response"].as_str().unwrap().to_owned(), warnings)
}

#[tokio::test]
async fn a_repeat_penalty_keeps_a_greedy_answer_from_repeating_what_it_has_seen() {
    let (_turn, s) = crate::http_api::embedded(&[]).await;
    let prompt = "apple, apple, apple, apple, apple, apple, apple, apple,";
    let apples = |text: &str| text.matches("apple").count();
    // Greedy, a small model goes on as the prompt did.
    let (plain, _) = raw_generate(&s, prompt, json!({})).await;
    assert!(apples(&plain) >= 8, "{plain:?}");
    // The penalties have seen the prompt: the same greedy pick turns away from it.
    let penalties = json!({"repeat_penalty": 1.8, "presence_penalty": 1.0, "repeat_last_n": -1});
    let (penalised, warnings) = raw_generate(&s, prompt, penalties.clone()).await;
    assert!(apples(&penalised) < 3, "{penalised:?} after {plain:?}");
    assert!(!warnings.contains("penalty"), "{warnings}");
    // Greedy stays greedy: the same answer again.
    let (again, _) = raw_generate(&s, prompt, penalties).await;
    assert_eq!(again, penalised);
}
