//! The embedded model, for real: the default Qwen2.5-Coder-0.5B-Instruct, fetched into the
//! cache once (by the first test that needs it, through `try`). Prompts are short and answers
//! greedy, so the suite stays fast on two cores. Tests that load the model take turns.

use crate::common::*;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The tests that run the model take turns, whether in a server they start or in a `try`
/// process: each process loads its own copy and runs llama.cpp on every core, and two such
/// processes at once on a small machine slow each other's spinning threads many times over
/// (a 5 s call took over 60 s in CI beside a `try`). Taking it fails in the fast tier
/// (`common::tier`).
pub static TURN: crate::common::tier::Turn = crate::common::tier::Turn::new();

/// `try "What is the capital of France?"`, run once: it fetches the model when it is not
/// cached, and its output is the first test's subject. It fails in the fast tier
/// (`common::tier`).
pub fn first_try() -> &'static std::process::Output {
    crate::common::tier::needs_model("the embedded model's fetch");
    static OUTPUT: OnceLock<std::process::Output> = OnceLock::new();
    OUTPUT.get_or_init(|| {
        crate::common::server::Server::new()
            .command()
            .args(["try", "What is the capital of France?"])
            .env("RUST_LOG", "warn")
            .output()
            .expect("run try")
    })
}

/// The question the tests of the engine's builds (GPU, CPU modules) ask through `try`.
pub const CAPITAL: &str = "What is the capital of France? One word.";

/// Runs `command` (a `try` of [`CAPITAL`]) and checks that it exits 0 having answered Paris;
/// its stdout and stderr.
pub fn answers_paris(command: &mut std::process::Command) -> (String, String) {
    let out = command.output().expect("run try");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{stderr}");
    assert!(stdout.contains("Paris"), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The first line of `log` that holds `needle`.
pub fn log_line<'a>(log: &'a str, needle: &str) -> &'a str {
    log.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in {log}"))
}

#[test]
fn try_answers_a_question_through_the_whole_mcp_path() {
    let out = first_try();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "try failed: {stderr}");
    assert!(
        stdout.contains("Paris"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
}

/// llama.cpp's own log lines reach the server's log when `RUST_LOG` names their target (the
/// buffers and devices of the model loaded), and none by default; either way the process ends
/// cleanly after the engine's teardown (exit 0, no signal).
#[test]
fn llama_cpps_log_is_shown_when_asked_and_the_process_exits_cleanly() {
    let _ = first_try();
    let _turn = TURN.blocking_lock();
    let run = |filter: Option<&str>| {
        let mut command = crate::common::server::Server::new().command();
        command.args(["try", "Say hi."]).env_remove("RUST_LOG");
        if let Some(filter) = filter {
            command.env("RUST_LOG", filter);
        }
        command.output().unwrap()
    };
    let quiet = run(None);
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(!stderr.contains("llama-cpp-2"), "{stderr}");
    let shown = run(Some("warn,llama-cpp-2=info"));
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    let stderr = String::from_utf8_lossy(&shown.stderr);
    assert!(
        stderr.contains("llama-cpp-2") && stderr.contains("model buffer size"),
        "{stderr}"
    );
}

#[test]
fn try_prints_the_whole_result_and_structured_output() {
    let _ = first_try();
    let _turn = TURN.blocking_lock();
    let out = crate::common::server::Server::new().command()
        .args([
            "try",
            "--json",
            "--schema",
            r#"{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}"#,
            "Alice is 30 years old.",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &result["structuredContent"];
    // The reference host declares sampling.tools: the schema travels as the structured tool,
    // which the local model answers under a grammar.
    assert_eq!(s["structured_output"]["via"], "tool", "{s}");
    let answer: Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer["age"], 30, "{answer}");
    assert!(
        answer["name"].as_str().unwrap().contains("Alice"),
        "{answer}"
    );
}

async fn local(era: Era, fallback: bool) -> Client {
    let _ = first_try();
    let (key, value) = if fallback {
        ("AGENT_AS_MODEL_FALLBACK", "local")
    } else {
        ("AGENT_AS_MODEL_BACKEND", "local")
    };
    let host = Host::text("the host must not be asked");
    let host = if fallback {
        host.without_sampling()
    } else {
        host
    };
    connect_with_env(host, era, &[(key, value)]).await
}

#[tokio::test]
async fn a_host_that_cannot_sample_is_answered_by_the_local_fallback_on_both_eras() {
    let _turn = TURN.lock().await;
    for era in ERAS {
        let client = local(era, true).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("What is the capital of France? Answer in one word.")],
                   "max_tokens": 10}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        let s = structured(&r);
        assert_eq!(s["backend"], "local");
        let body = &s["chat_completion"];
        let answer = text(&r);
        assert!(answer.contains("Paris"), "{answer}");
        assert_eq!(body["model"], "qwen2.5-coder-0.5b-instruct");
        assert_eq!(body["usage"]["estimated"], false);
        assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 10);
        assert_conforms(&client, "chat_complete", &r).await;
        let models = call(&client, "list_models", json!({})).await;
        let listed: Value = serde_json::from_str(&text(&models)).unwrap();
        assert_eq!(listed[1]["backend"], "local");
        assert_eq!(listed[1]["status"], "ready");
        assert_eq!(
            listed[1]["id"], body["model"],
            "list_models names what results report"
        );
        client.cancel().await.unwrap();
    }
}

/// `embeddings_create` on both eras, from the local fallback of a host that cannot sample:
/// OpenAI's embeddings object (valid against the tool's outputSchema), vectors of length 1,
/// identical text giving identical vectors; bad input is an error naming the field; a server
/// with only the host's sampling says it makes no embeddings.
#[tokio::test]
async fn embeddings_create_answers_from_the_local_model_on_both_eras() {
    let _turn = TURN.lock().await;
    let texts = ["a red apple", "a red apple", "the quarterly tax filing"];
    for era in ERAS {
        let client = local(era, true).await;
        let r = call(
            &client,
            "embeddings_create",
            json!({"input": texts, "model": "text-embedding-3-small"}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_conforms(&client, "embeddings_create", &r).await;
        let s = structured(&r);
        assert_eq!(s["backend"], "local");
        assert_eq!(s["object"], "list");
        assert_eq!(s["model"], "qwen2.5-coder-0.5b-instruct");
        let vectors: Vec<Vec<f64>> = s["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                d["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(vectors.len(), 3);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        for v in &vectors {
            assert!((dot(v, v) - 1.0).abs() < 1e-3);
        }
        assert_eq!(vectors[0], vectors[1], "identical text, identical vectors");
        assert!(dot(&vectors[0], &vectors[2]) < 0.999);
        assert!(s["usage"]["prompt_tokens"].as_u64().unwrap() >= 6, "{s}");
        let text_of: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(text_of["data"], s["data"], "the text is the same object");
        for (bad, field) in [
            (json!({"input": []}), "`input`"),
            (json!({"input": "x", "dimensions": 100000}), "`dimensions`"),
            (json!({"input": [1, 99999999]}), "`input[0]`"),
        ] {
            let r = call(&client, "embeddings_create", bad.clone()).await;
            assert!(is_error(&r), "{bad}");
            assert!(text(&r).contains(field), "{bad}: {}", text(&r));
        }
        client.cancel().await.unwrap();
    }
    let client = connect(Host::text("no"), Era::Legacy).await;
    let r = call(&client, "embeddings_create", json!({"input": "hi"})).await;
    assert!(is_error(&r));
    assert!(text(&r).contains("makes no embeddings"), "{}", text(&r));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn structured_output_is_schema_valid_json_by_constrained_decoding() {
    let _turn = TURN.lock().await;
    let client = local(Era::Legacy, false).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"},
        "country": {"type": "string"}, "population_millions": {"type": "number"}},
        "required": ["city", "country", "population_millions"]});
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Paris is the capital of France and has about 2.1 million people.")],
               "output_schema": schema, "max_tokens": 80}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let s = structured(&r);
    assert_eq!(s["structured_output"]["via"], "native", "{s}");
    let answer: Value = serde_json::from_str(&text(&r)).unwrap();
    assert!(jsonschema::is_valid(&schema, &answer), "{answer}");
    assert_eq!(answer["city"], "Paris");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn tool_calls_come_back_with_arguments_that_fit_the_tool() {
    let _turn = TURN.lock().await;
    let client = local(Era::Modern, false).await;
    let tools = json!([{"name": "get_weather", "description": "The current weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]);
    for choice in ["required", "auto"] {
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("What is the weather in Paris right now?")],
                   "tools": tools, "tool_choice": choice, "max_tokens": 60}),
        )
        .await;
        assert!(!is_error(&r), "{choice}: {}", text(&r));
        let body = &structured(&r)["chat_completion"];
        let message = &body["choices"][0]["message"];
        let call = &message["tool_calls"][0];
        assert_eq!(
            call["function"]["name"], "get_weather",
            "{choice}: {message}"
        );
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args["city"].as_str().unwrap().contains("Paris"), "{args}");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn token_limits_and_stop_sequences_are_honoured() {
    let _turn = TURN.lock().await;
    let client = local(Era::Legacy, false).await;
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Count from 1 to 30, separated by commas.")], "max_tokens": 6}),
    )
    .await;
    let body = &structured(&r)["chat_completion"];
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 6);
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Count from 1 to 30, separated by commas.")],
               "max_tokens": 60, "stop": ["5"]}),
    )
    .await;
    let body = &structured(&r)["chat_completion"];
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains('4') && !content.contains('5'), "{content}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    // Images cannot go to a text-only model: the error says so.
    let e = err_text(
        &client,
        "chat_complete",
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", PNG)}}]}]}),
    )
    .await;
    // The request must change: an invalid argument naming the part, not a backend failure.
    assert!(
        e.contains("invalid argument") && e.contains("image part") && e.contains("text only"),
        "{e}"
    );
    client.cancel().await.unwrap();
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// The cached default model (fetched by `first_try`).
pub(crate) fn cached_model() -> std::path::PathBuf {
    let _ = first_try();
    agent_as_model::local::fetch::cached_default().expect("the default model is cached")
}

#[tokio::test]
async fn an_emulated_tool_call_comes_back_from_a_host_that_cannot_take_tools() {
    use agent_as_model::local::{Local, LocalSettings};
    use agent_as_model::mcp::host;
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use std::sync::Arc;
    let _turn = TURN.lock().await;
    // The reference host of `try`, in this process, answering with the local model but
    // declaring sampling without tools (as VS Code does): the server describes the tools in
    // the prompt and parses the call out of the model's text.
    let settings = LocalSettings {
        embeddings_only: false,
        preload: true,
        keep_alive: None,
        label: "local".into(),
        gpu_layers: Default::default(),
        source: agent_as_model::local::Source::File(cached_model()),
        context: 4096,
        queue: 4,
        slots: 2,
        threads: 2,
        seed: None,
        chat_template: None,
        prompt_cache: None,
        speculative: Default::default(),
        draft: None,
        mmproj: None,
        limits: Default::default(),
    };
    let model = Local::start(settings).unwrap();
    model.ready().await.unwrap();
    let reference = host::Host {
        model: Arc::new(model),
        limits: Arc::default(),
        sampling_tools: false,
        live: None,
    };
    let command = crate::common::server::Server::new()
        .tokio_command()
        .configure(|c| {
            c.env("RUST_LOG", "error");
        });
    let client = reference
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap();
    let tools = json!([{"name": "get_weather", "description": "The current weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]);
    let r = client
        .call_tool(params(
            "chat_complete",
            json!({"messages": [user("What is the weather in Paris right now?")],
                   "tools": tools, "tool_choice": "required", "max_tokens": 120, "max_retries": 2}),
        ))
        .await
        .unwrap();
    validate_output(&client, "chat_complete", &r).await;
    assert!(!is_error(&r), "{}", text(&r));
    let s = structured(&r);
    assert_eq!(s["tool_calls_via"], "prompt", "{s}");
    let call = &s["chat_completion"]["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{s}");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].as_str().unwrap().contains("Paris"), "{args}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_model_file_is_used_as_given_and_a_bad_one_is_named() {
    let _turn = TURN.lock().await;
    let path = cached_model();
    let path = path.to_str().unwrap();
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL_FILE", path),
    ];
    let client = connect_with_env(Host::echo(), Era::Legacy, &env).await;
    let r = call(
        &client,
        "generate",
        json!({"prompt": "Say hello.", "max_tokens": 8}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert!(!text(&r).is_empty());
    let models = call(&client, "list_models", json!({})).await;
    let listed: Value = serde_json::from_str(&text(&models)).unwrap();
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "the host's model is not offered: {listed}"
    );
    assert_eq!(listed[0]["id"], "Qwen2.5 Coder 0.5B Instruct AWQ");
    assert_eq!(listed[0]["role"], "backend");
    client.cancel().await.unwrap();

    let bogus = std::env::temp_dir().join(format!("aam-not-a-model-{}.gguf", std::process::id()));
    std::fs::write(&bogus, b"this is not a GGUF file").unwrap();
    // With backtraces on, as a developer's shell may have them: still one clear line.
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL_FILE", bogus.to_str().unwrap()),
        ("RUST_BACKTRACE", "1"),
    ];
    let client = connect_with_env(Host::echo(), Era::Modern, &env).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(
        e.contains("local backend failed") && e.contains("cannot load"),
        "{e}"
    );
    // Named by its model, not by the path on the server's disk (which the log has).
    assert!(e.contains("of the model \"local\""), "{e}");
    assert!(!e.contains("aam-not-a-model"), "{e}");
    let models = call(&client, "list_models", json!({})).await;
    let listed: Value = serde_json::from_str(&text(&models)).unwrap();
    let status = listed[0]["status"].as_str().unwrap();
    assert!(status.starts_with("failed: cannot load"), "{listed}");
    for shown in [e.as_str(), status] {
        assert!(
            !shown.contains('\n') && !shown.contains(".rs:") && !shown.contains(".cpp:"),
            "internals shown: {shown}"
        );
    }
    client.cancel().await.unwrap();
    let _ = std::fs::remove_file(&bogus);
}

#[tokio::test]
async fn a_damaged_cached_model_is_detected_removed_and_not_shown() {
    // A cache whose default model was truncated after it was checked (its seal records the
    // size and digest it had). The fetch that follows is pointed at a closed port so that it fails
    // at once instead of downloading.
    let cache = std::env::temp_dir().join(format!("aam-damaged-cache-{}", std::process::id()));
    let models = cache.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let model = models.join("qwen2.5-coder-0.5b-instruct.gguf");
    std::fs::write(&model, b"GGUF truncated").unwrap();
    std::fs::write(
        models.join("qwen2.5-coder-0.5b-instruct.gguf.sha256"),
        format!("491400064 {} 0\n", "ab".repeat(32)),
    )
    .unwrap();
    let closed = format!("http://127.0.0.1:{}", free_port());
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_CACHE_DIR", cache.to_str().unwrap()),
        ("HTTPS_PROXY", closed.as_str()),
        ("HTTP_PROXY", closed.as_str()),
        ("RUST_BACKTRACE", "1"),
    ];
    let client = connect_with_env(Host::echo(), Era::Legacy, &env).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("could not be fetched"), "{e}");
    assert!(!model.exists(), "the damaged model was removed");
    assert!(!e.contains(cache.to_str().unwrap()), "{e}");
    client.cancel().await.unwrap();
    let _ = std::fs::remove_dir_all(&cache);
}

#[tokio::test]
async fn sampled_answers_repeat_with_a_seed_and_top_k_narrows_the_draw() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let story = json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.5});
    // top_k 1 (Anthropic's spelling) keeps only the most likely token, so two servers seeded
    // differently give the same answer at a high temperature; each asks first, with nothing
    // cached, so both read the prompt alike.
    let narrow = json!({"messages": [user("Tell me a story.")], "max_tokens": 24,
                        "temperature": 1.5, "top_k": 1});
    let server = |seed: &'static str| {
        let env = [
            ("AGENT_AS_MODEL_BACKEND", "local"),
            ("AGENT_AS_MODEL_LOCAL_SEED", seed),
        ];
        async move { connect_with_env(Host::text("no"), Era::Legacy, &env).await }
    };
    let eleven = server("11").await;
    let narrow_11 = ok_text(&eleven, "messages_create", narrow.clone()).await;
    // AGENT_AS_MODEL_LOCAL_SEED seeds the calls that give no seed: the same answer twice.
    let first = ok_text(&eleven, "generate", story.clone()).await;
    let second = ok_text(&eleven, "generate", story.clone()).await;
    assert_eq!(first, second);
    eleven.cancel().await.unwrap();
    let twelve = server("12").await;
    let narrow_12 = ok_text(&twelve, "messages_create", narrow).await;
    assert_eq!(narrow_11, narrow_12);
    // Another seed draws another answer where the draw is wide.
    let other = ok_text(&twelve, "generate", story).await;
    assert_ne!(other, first);
    twelve.cancel().await.unwrap();
}

#[tokio::test]
async fn a_chat_template_file_reads_the_special_tokens_and_the_calls_template_arguments() {
    let _turn = TURN.lock().await;
    let path = cached_model();
    // A template that refuses unless the call says `enable_thinking: false`, and says which
    // special tokens it was given.
    let template = std::env::temp_dir().join(format!("aam-template-{}.jinja", std::process::id()));
    std::fs::write(
        &template,
        "{%- if enable_thinking is not defined or enable_thinking -%}\
         {{ raise_exception('expected enable_thinking=false; eos_token=' ~ eos_token) }}\
         {%- endif -%}\
         <|im_start|>user\n{{ messages[-1].content }}<|im_end|>\n<|im_start|>assistant\n",
    )
    .unwrap();
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL_FILE", path.to_str().unwrap()),
        (
            "AGENT_AS_MODEL_CHAT_TEMPLATE_FILE",
            template.to_str().unwrap(),
        ),
    ];
    let client = connect_with_env(Host::echo(), Era::Modern, &env).await;
    let messages = json!([{"role": "user", "content": "Say hi."}]);
    let e = err_text(
        &client,
        "chat_complete",
        json!({"messages": messages, "max_tokens": 4}),
    )
    .await;
    assert!(
        e.contains("expected enable_thinking=false; eos_token=<|im_end|>"),
        "{e}"
    );
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": messages, "max_tokens": 4,
               "chat_template_kwargs": {"enable_thinking": false}}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let e = err_text(
        &client,
        "chat_complete",
        json!({"messages": messages, "chat_template_kwargs": [1]}),
    )
    .await;
    assert!(e.contains("chat_template_kwargs"), "{e}");
    client.cancel().await.unwrap();
    let _ = std::fs::remove_file(&template);
}
