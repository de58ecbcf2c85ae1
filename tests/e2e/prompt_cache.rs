//! The prompt cache on disk (`AGENT_AS_MODEL_PROMPT_CACHE_DIR`): a long prompt read by one server
//! is read back from the disk by the next server started on the same folder (as an agent CLI's
//! first turn after a restart), with the same greedy answer; a damaged file is ignored, with a
//! warning, and the prompt is read again with the same answer.

use crate::common::server::{HttpServer, Server};
use crate::http_api::post;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A chat of about 2,000 prompt tokens: numbered rules, then a question on one of them.
fn long_chat() -> Value {
    let rules: String = (1..=120)
        .map(|i| {
            format!(
                "Rule {i}: the answer to question {i} is the number {}.\n",
                i * 7
            )
        })
        .collect();
    json!({"model": "local", "max_tokens": 8, "temperature": 0,
           "messages": [{"role": "system", "content": rules},
                        {"role": "user", "content": "What is the answer to question 12?"}]})
}

/// A server on the embedded model with its prompt cache in `dir`, its log in `log`.
async fn server(dir: &Path, log: &Path) -> HttpServer {
    Server::new()
        .log_level("agent_as_model=info")
        .env("AGENT_AS_MODEL_BACKEND", "local")
        .env("AGENT_AS_MODEL_PROMPT_CACHE_DIR", dir)
        .log_file(log)
        .http()
        .await
}

/// The chat's answer, its prompt tokens and the tokens of it read from a cache.
async fn ask(url: &str) -> (String, u64, u64) {
    let (status, _, body) = post(&format!("{url}/v1/chat/completions"), &[], &long_chat()).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let usage = &v["usage"];
    (
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
    )
}

/// The saved prompts under `dir` (in the model's own folder).
pub(crate) fn saved(dir: &Path) -> Vec<PathBuf> {
    let Ok(models) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    models
        .filter_map(|m| std::fs::read_dir(m.ok()?.path()).ok())
        .flatten()
        .filter_map(|f| Some(f.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kv"))
        .collect()
}

/// The one saved prompt under `dir`, once the server has written it (it saves after the answer
/// is out); waits at most two minutes.
pub(crate) async fn saved_once(dir: &Path, server: &HttpServer) -> PathBuf {
    for _ in 0..1200 {
        if let [one] = saved(dir).as_slice() {
            return one.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no prompt was saved under {}:\n{}",
        dir.display(),
        server.log()
    );
}

/// Flips one byte in the middle of `file`.
fn damage(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test]
async fn a_restarted_server_reads_a_long_prompt_back_and_a_damaged_file_is_ignored() {
    assert!(crate::local::first_try().status.success());
    let _turn = crate::local::TURN.lock().await;
    let dir = std::env::temp_dir().join(format!("prompt-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = dir.with_extension("log");

    let first = server(&dir, &log).await;
    let (answer, prompt, cold) = ask(&first.url).await;
    assert!(prompt > 1024 && cold < prompt / 2, "{prompt} {cold}");
    let file = saved_once(&dir, &first).await;
    drop(first);

    // A new process: only the disk has the prompt.
    let second = server(&dir, &log).await;
    let (again, prompt_again, cached) = ask(&second.url).await;
    assert_eq!(again, answer);
    assert_eq!(prompt_again, prompt);
    assert!(
        cached * 100 >= prompt * 85,
        "{cached} of {prompt}\n{}",
        second.log()
    );
    assert!(second.log().contains("prompt read back from the disk"));
    drop(second);

    damage(&file);
    let third = server(&dir, &log).await;
    let (once_more, _, cached) = ask(&third.url).await;
    assert_eq!(once_more, answer, "the damaged file changed nothing");
    assert!(cached < prompt / 2, "the damaged file was read: {cached}");
    let text = third.log();
    assert!(text.contains("a saved prompt was not read back"), "{text}");
    assert!(text.contains("not the ones it was saved with"), "{text}");
    drop(third);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log);
}
