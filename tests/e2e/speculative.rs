//! Speculative decoding, by n-gram lookup (`AGENT_AS_MODEL_SPECULATIVE=ngram`) and by a draft
//! model (`AGENT_AS_MODEL_DRAFT_MODEL`): a greedy answer that rewrites its input is the same
//! with drafts as without, and the drafts and the tokens kept of them are counted on
//! `/metrics` under vLLM's names.

use crate::common::metrics_text;
use crate::common::server::{HttpServer, Server};
use crate::http_api::post;
use serde_json::{Value, json};

/// Code the model is asked to write out again with one name changed: most of the answer
/// repeats the prompt, which is what n-gram drafts find.
const CODE: &str = "def area(width, height):\n    return width * height\n\n\
def perimeter(width, height):\n    return 2 * (width + height)\n\n\
def describe(width, height):\n    a = area(width, height)\n    p = perimeter(width, height)\n    \
return f\"{width}x{height}: area {a}, perimeter {p}\"\n";

fn rewrite() -> Value {
    json!({"model": "local", "max_tokens": 96, "temperature": 0,
           "messages": [{"role": "user", "content": format!(
               "Write this Python code out again exactly, with `describe` renamed to `summary`. \
                Answer with the code only.\n\n{CODE}")}]})
}

async fn server(speculative: &str) -> HttpServer {
    Server::new()
        .env("AGENT_AS_MODEL_BACKEND", "local")
        .env("AGENT_AS_MODEL_SPECULATIVE", speculative)
        .http()
        .await
}

/// The embedded model with a draft model, the file `draft`, its log in `log`.
async fn drafted_by(draft: &std::path::Path, log: &std::path::Path) -> HttpServer {
    Server::new()
        .log_level("agent_as_model=info")
        .env("AGENT_AS_MODEL_BACKEND", "local")
        .env("AGENT_AS_MODEL_DRAFT_MODEL", draft)
        .log_file(log)
        .http()
        .await
}

async fn answer(server: &HttpServer) -> String {
    let url = format!("{}/v1/chat/completions", server.url);
    let (status, _, body) = post(&url, &[], &rewrite()).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The value of the metric line starting with `name` (and a label set) on `/metrics`.
async fn metric(server: &HttpServer, name: &str) -> f64 {
    let text = metrics_text(&server.url).await;
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[tokio::test]
async fn ngram_drafts_keep_a_greedy_rewrite_and_are_counted() {
    assert!(crate::local::first_try().status.success());
    let _turn = crate::local::TURN.lock().await;
    let plain = server("none").await;
    let expected = answer(&plain).await;
    assert_eq!(
        metric(&plain, "vllm:spec_decode_num_draft_tokens_total").await,
        0.0
    );
    drop(plain);

    let drafting = server("ngram").await;
    let drafted_answer = answer(&drafting).await;
    assert_eq!(drafted_answer, expected, "drafts changed the answer");
    let drafted = metric(&drafting, "vllm:spec_decode_num_draft_tokens_total").await;
    let accepted = metric(&drafting, "vllm:spec_decode_num_accepted_tokens_total").await;
    assert!(drafted > 0.0, "nothing was drafted");
    assert!(
        accepted > 0.0 && accepted <= drafted,
        "{accepted} of {drafted}"
    );
    // The answer repeats the code (what the drafts were looked up in).
    assert!(expected.contains("perimeter(width, height)"), "{expected}");
}

/// A draft model of the same vocabulary (here the model itself, the one small model of its
/// vocabulary this machine has) drafts the tokens: the greedy answer is the same, its drafts
/// are counted, and a draft model is sure of them, so nearly all are kept. A draft model of
/// another vocabulary (Gemma 3's) is refused by name, and the model answers alone.
#[tokio::test]
async fn a_draft_models_drafts_keep_a_greedy_rewrite_and_are_counted() {
    assert!(crate::local::first_try().status.success());
    let _turn = crate::local::TURN.lock().await;
    let plain = server("none").await;
    let expected = answer(&plain).await;
    drop(plain);

    let logs = std::env::temp_dir().join(format!("draft-model-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    let model = crate::local::cached_model();
    let drafting = drafted_by(&model, &logs.join("drafted.log")).await;
    assert_eq!(
        answer(&drafting).await,
        expected,
        "drafts changed the answer"
    );
    let drafted = metric(&drafting, "vllm:spec_decode_num_draft_tokens_total").await;
    let accepted = metric(&drafting, "vllm:spec_decode_num_accepted_tokens_total").await;
    assert!(drafted >= 32.0, "{drafted} drafted");
    assert!(
        accepted >= 0.9 * drafted && accepted <= drafted,
        "{accepted} of {drafted}"
    );
    drop(drafting);

    let gemma = std::path::PathBuf::from(crate::engine::gemma());
    let mismatched = drafted_by(&gemma, &logs.join("mismatched.log")).await;
    assert_eq!(answer(&mismatched).await, expected);
    let drafted = metric(&mismatched, "vllm:spec_decode_num_draft_tokens_total").await;
    assert_eq!(drafted, 0.0);
    let log = mismatched.log();
    assert!(
        log.contains("the draft model cannot draft for this model") && log.contains("vocabulary"),
        "{log}"
    );
    drop(mismatched);
    let _ = std::fs::remove_dir_all(&logs);
}
