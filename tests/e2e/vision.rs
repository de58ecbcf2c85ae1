//! Images on the embedded model (`--mmproj`). No registry this project reaches carries a small
//! vision model with its projector, so the projector is built for the default model itself by
//! `tests/data/vision/make_color_mmproj.py` (`scripts/peers` writes it to
//! `target/peers/vision/color-mmproj.gguf`, `AGENT_AS_MODEL_TEST_MMPROJ`): its "vision tower"
//! projects each patch's mean red, green and blue onto the model's own embeddings of the words
//! " red", " green" and " blue". It is a real projector to llama.cpp's multimodal library, which
//! loads it, encodes images with it and reads them into the prompt; the answers depend on the
//! image. Through the official openai (chat and Responses), anthropic, google-genai and ollama
//! (chat and generate) Python clients
//! (`tests/data/vision/ask.py`): a red and a blue image give two answers, each naming its colour;
//! a second turn with the image still in the conversation reads it from the cache (cached tokens
//! in the usage); hostile media is refused by name before any pixel is decoded.

use crate::http::Replica;
use crate::http_api::{embedded, post};
use serde_json::{Value, json};
use std::path::PathBuf;

const TOKEN: &str = "vision-test-token";
const QUESTION: &str = "What colour is this image? Answer with one word.";

/// The colour projector for the default model: `AGENT_AS_MODEL_TEST_MMPROJ` when it names
/// another, else `tests/data/vision/color-mmproj`'s (built once the default model is cached, which
/// `scripts/peers` does when it is, and again when the model or the script is newer).
pub(crate) fn mmproj() -> String {
    let default = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/peers/vision/color-mmproj.gguf"
    );
    match std::env::var_os("AGENT_AS_MODEL_TEST_MMPROJ") {
        Some(named) if named.as_os_str() != std::ffi::OsStr::new(default) => {
            named.to_string_lossy().into_owned()
        }
        _ => built("vision/color-mmproj"),
    }
}

/// The projector `tests/data/SCRIPT` builds for the default model (fetched first): its path.
pub(crate) fn built(script: &str) -> String {
    assert!(
        crate::local::first_try().status.success(),
        "no default model"
    );
    let script = format!("{}/tests/data/{script}", env!("CARGO_MANIFEST_DIR"));
    let built = std::process::Command::new(&script).output().unwrap();
    assert!(
        built.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let path = String::from_utf8_lossy(&built.stdout).trim().to_owned();
    assert!(PathBuf::from(&path).is_file(), "{script} built no {path}");
    path
}

fn image(name: &str) -> String {
    format!("{}/tests/data/vision/{name}", env!("CARGO_MANIFEST_DIR"))
}

async fn server(more: &[(&str, &str)]) -> (tokio::sync::MutexGuard<'static, ()>, Replica) {
    let projector = mmproj();
    let mut env = vec![
        ("AGENT_AS_MODEL_MMPROJ", projector.as_str()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ];
    env.extend_from_slice(more);
    embedded(&env).await
}

/// What `sdk`'s client was handed for `picture` (and the follow-up turn when `again`).
async fn ask(s: &Replica, sdk: &str, picture: &str, again: bool) -> Value {
    let script = image("ask.py");
    let model = if sdk.starts_with("ollama") {
        "qwen2.5-coder-0.5b-instruct:latest"
    } else {
        "local"
    };
    let mut command = tokio::process::Command::new(crate::common::sdk_python());
    command
        .args([script.as_str(), sdk, &s.url, TOKEN, model])
        .args([image(picture).as_str(), QUESTION])
        .env("NO_PROXY", "127.0.0.1,localhost");
    if again {
        command.arg("--again");
    }
    client_json(command, sdk).await
}

/// The JSON line a client printed last, run within 300 seconds; `what` names it in failures.
pub(crate) async fn client_json(mut command: tokio::process::Command, what: &str) -> Value {
    let out = tokio::time::timeout(std::time::Duration::from_secs(300), command.output())
        .await
        .expect("the client took over 300 s")
        .expect("the client ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"))
}

fn said(answer: &Value) -> String {
    answer["text"].as_str().unwrap_or_default().to_lowercase()
}

#[tokio::test]
async fn an_image_reaches_the_model_through_every_clients_api_and_its_colour_is_answered() {
    let (_turn, s) = server(&[]).await;
    let sdks = [
        "openai",
        "responses",
        "anthropic",
        "genai",
        "ollama",
        "ollama_generate",
    ];
    for sdk in sdks {
        let red = ask(&s, sdk, "red.png", false).await;
        let blue = ask(&s, sdk, "blue.png", false).await;
        assert!(said(&red).contains("red"), "{sdk}: red.png: {red}");
        assert!(said(&blue).contains("blue"), "{sdk}: blue.png: {blue}");
        assert_ne!(said(&red), said(&blue), "{sdk}");
    }
}

#[tokio::test]
async fn a_second_turn_that_repeats_the_image_reads_it_from_the_cache() {
    let (_turn, s) = server(&[]).await;
    for sdk in ["openai", "responses", "anthropic", "genai"] {
        let second = ask(&s, sdk, "green.png", true).await;
        let usage = ["cached", "prompt", "first_prompt"].map(|k| second[k].as_u64());
        let [Some(cached), Some(prompt), Some(first)] = usage else {
            panic!("{sdk}: no usage: {second}");
        };
        // The whole first prompt, the image in it, came from the slot's cache (but its last
        // token, read again to start the answer).
        assert!(cached + 1 >= first && cached < prompt, "{sdk}: {second}");
    }
}

/// A chat request with `parts` as the user's content.
pub(crate) fn chat(parts: Value) -> Value {
    json!({"model": "local", "max_tokens": 4,
           "messages": [{"role": "user", "content": parts}]})
}

/// A chat image part of `bytes` as a data URL.
pub(crate) fn data_url(mime: &str, bytes: &[u8]) -> Value {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}})
}

/// The bytes of `tests/data/vision/NAME`.
pub(crate) fn file(name: &str) -> Vec<u8> {
    std::fs::read(image(name)).unwrap()
}

/// The 400 a chat request gets, its error message.
async fn refused(s: &Replica, body: &Value) -> String {
    let url = format!("{}/v1/chat/completions", s.url);
    let auth = format!("Bearer {TOKEN}");
    let (status, _, text) = post(&url, &[("authorization", auth.as_str())], body).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn hostile_media_is_refused_by_name_before_it_is_decoded() {
    let (_turn, s) = server(&[("AGENT_AS_MODEL_MAX_MEDIA_PARTS", "2")]).await;
    let question = json!({"type": "text", "text": QUESTION});
    // A PNG whose header says 100,000 by 100,000 pixels, in a few hundred bytes.
    let bomb = refused(
        &s,
        &chat(json!([question, data_url("image/png", &file("bomb.png"))])),
    )
    .await;
    assert!(
        bomb.contains("messages[0]") && bomb.contains("AGENT_AS_MODEL_MAX_MEDIA_PIXELS"),
        "{bomb}"
    );
    let cut = file("red.png");
    let cut = cut.get(..cut.len() / 2).unwrap();
    let truncated = refused(&s, &chat(json!([question, data_url("image/png", cut)]))).await;
    assert!(truncated.contains("messages[0]"), "{truncated}");
    let text = refused(
        &s,
        &chat(json!([
            question,
            data_url("image/png", &file("not-an-image.txt"))
        ])),
    )
    .await;
    assert!(
        text.contains("messages[0]") && text.contains("not a PNG"),
        "{text}"
    );
    let red = data_url("image/png", &file("red.png"));
    let many = refused(&s, &chat(json!([question, red, red, red]))).await;
    assert!(many.contains("AGENT_AS_MODEL_MAX_MEDIA_PARTS"), "{many}");
    // Audio for a projector that reads images only.
    let wav = refused(
        &s,
        &chat(json!([question, {"type": "input_audio",
                                "input_audio": {"data": "UklGRg==", "format": "wav"}}])),
    )
    .await;
    assert!(wav.contains("no audio"), "{wav}");
}

#[tokio::test]
async fn the_model_lists_vision_once_its_projector_is_loaded() {
    let (_turn, s) = server(&[]).await;
    let auth = format!("Bearer {TOKEN}");
    // A first call loads the model and its projector.
    let hello = json!({"type": "text", "text": "Hello"});
    let (status, _, text) = post(
        &format!("{}/v1/chat/completions", s.url),
        &[("authorization", auth.as_str())],
        &chat(json!([hello])),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, _, show) = post(
        &format!("{}/api/show", s.url),
        &[("authorization", auth.as_str())],
        &json!({"model": "qwen2.5-coder-0.5b-instruct"}),
    )
    .await;
    assert_eq!(status, 200, "{show}");
    let show: Value = serde_json::from_str(&show).unwrap();
    let capabilities = show["capabilities"].as_array().unwrap();
    assert!(capabilities.contains(&json!("vision")), "{show}");
    assert!(!capabilities.contains(&json!("audio")), "{show}");
    let models = crate::common::http_client()
        .get(format!("{}/v1/models", s.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        models["data"][0]["input_modalities"],
        json!(["text", "image"]),
        "{models}"
    );
}

/// A chat of about 1,500 prompt tokens of rules, then `picture` and the question.
fn long_chat_about(picture: &str) -> Value {
    use base64::Engine as _;
    let rules: String = (1..=90)
        .map(|i| {
            format!(
                "Rule {i}: the answer to question {i} is the number {}.\n",
                i * 7
            )
        })
        .collect();
    let data = base64::engine::general_purpose::STANDARD.encode(file(picture));
    json!({"model": "local", "max_tokens": 4, "temperature": 0,
           "messages": [{"role": "system", "content": rules},
                        {"role": "user", "content": [
                            {"type": "image_url",
                             "image_url": {"url": format!("data:image/png;base64,{data}")}},
                            {"type": "text", "text": QUESTION}]}]})
}

/// The answer to a long chat about `picture`, its prompt tokens and those read from a cache.
async fn ask_long(url: &str, picture: &str) -> (String, u64, u64) {
    let (status, _, body) = post(
        &format!("{url}/v1/chat/completions"),
        &[],
        &long_chat_about(picture),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let usage = &v["usage"];
    (
        text.to_lowercase(),
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
    )
}

#[tokio::test]
async fn a_restarted_server_reads_an_image_back_from_the_disk_and_never_for_another_image() {
    use crate::common::server::{HttpServer, Server};
    assert!(crate::local::first_try().status.success());
    let _turn = crate::local::TURN.lock().await;
    let dir = std::env::temp_dir().join(format!("vision-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = dir.with_extension("log");
    let projector = mmproj();
    let start = || async {
        Server::new()
            .log_level("agent_as_model=info")
            .env("AGENT_AS_MODEL_BACKEND", "local")
            .env("AGENT_AS_MODEL_MMPROJ", &projector)
            .env("AGENT_AS_MODEL_PROMPT_CACHE_DIR", &dir)
            .log_file(&log)
            .http()
            .await
    };
    let first: HttpServer = start().await;
    let (red, prompt, cold) = ask_long(&first.url, "red.png").await;
    assert!(
        red.contains("red") && cold < prompt / 2,
        "{red} {prompt} {cold}"
    );
    crate::prompt_cache::saved_once(&dir, &first).await;
    drop(first);

    // A new process: only the disk has the prompt, the image's reading in it.
    let second = start().await;
    let (again, _, cached) = ask_long(&second.url, "red.png").await;
    assert_eq!(again, red);
    assert!(
        cached + 1 >= prompt - 16,
        "{cached} of {prompt}\n{}",
        second.log()
    );
    assert!(second.log().contains("prompt read back from the disk"));
    // Another image after the same rules: the rules come from the disk, the image is read.
    let (blue, _, cached) = ask_long(&second.url, "blue.png").await;
    assert!(blue.contains("blue"), "{blue}");
    assert!(cached < prompt - 16, "{cached} of {prompt}");
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&log);
}
