//! The server's web page, `/ui`, driven in a real browser: Chromium from Debian's package
//! (`scripts/peers` installs it) through Playwright's Python API (`tests/data/ui/drive.py`),
//! against the real binary. A scripted provider behind the token: the page asks for the token
//! and uses it, streams an answer with Markdown, reasoning, a tool call and structured output,
//! stops a stream (seen cancelled on the server: its metrics count the call `cancelled` and the
//! provider's request is closed), picks another model, shows an API's error as its message and
//! keeps its conversations; and the embedded model: answered, shown loaded in the engine view,
//! unloaded by its button. The browser requests nothing from any other origin.

use crate::common::openai::{Reply, Scripted};
use crate::common::server::{HttpServer, Server};
use crate::http_api::text_chunk;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const TOKEN: &str = "ui-test-token";

/// Runs the page's `scenario` in Chromium against `url`; the script's report.
async fn drive(scenario: &str, url: &str, options: Value) -> Value {
    let script = format!("{}/tests/data/ui/drive.py", env!("CARGO_MANIFEST_DIR"));
    let run = tokio::process::Command::new(crate::common::venv_bin("python"))
        .args([script.as_str(), scenario, url, &options.to_string()])
        .kill_on_drop(true)
        .output();
    let output = crate::common::before(Duration::from_secs(300), "the browser's run", run)
        .await
        .expect("the peers' Python with playwright (scripts/peers)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the page failed in the browser:\n{stderr}\n{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("no report ({e}): {stdout}\n{stderr}"))
}

/// Where the runs leave their screenshots (`docs/src/images/` has copies).
fn screenshots() -> PathBuf {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// Every request the browser made went to the server's own origin, the page's calls among them.
fn same_origin(report: &Value, url: &str) {
    let requests: Vec<&str> = report["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    for request in &requests {
        assert!(
            request.starts_with(&format!("{url}/")),
            "a request to another origin: {request}"
        );
    }
    for path in ["/ui", "/ui/app.js", "/ui/style.css", "/ui/engine.json"] {
        assert!(
            requests
                .iter()
                .any(|r| r.ends_with(path) || r.contains(&format!("{path}#"))),
            "{path} was not requested: {requests:?}"
        );
    }
}

/// An OpenAI stream chunk with `delta`, and the stream's end with its usage.
fn chunk(delta: Value) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
           "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    .to_string()
}

fn end(prompt: u64, cached: u64, completion: u64, finish: &str) -> Vec<String> {
    vec![
        json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
               "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        .to_string(),
        json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion,
                         "prompt_tokens_details": {"cached_tokens": cached}}})
        .to_string(),
        "[DONE]".to_owned(),
    ]
}

fn events(mut chunks: Vec<String>, finish: &str) -> Reply {
    chunks.extend(end(12, 4, 5, finish));
    Reply::Events(chunks, Duration::from_millis(20))
}

/// The first provider's answers, in the order the page asks.
fn first_script() -> Vec<Reply> {
    let markdown = events(
        vec![
            chunk(json!({"reasoning_content": "The user asks for a capital."})),
            text_chunk("**Paris** is the capital, see [the page](https://example.org/paris).\n\n"),
            text_chunk("```python\nprint('Paris')\n```\n\n"),
            text_chunk("Not HTML: <img src=x onerror=alert(1)>"),
        ],
        "stop",
    );
    // Slow: the page stops it after a few words.
    let story: Vec<String> = (0..40).map(|i| text_chunk(&format!("word {i} "))).collect();
    let story = Reply::Events(story, Duration::from_millis(300));
    let call = json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": ""}}]});
    let fragment =
        |args: &str| chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}));
    let tool = events(
        vec![chunk(call), fragment("{\"city\": "), fragment("\"Paris\"}")],
        "tool_calls",
    );
    let shaped = events(
        vec![text_chunk("{\"city\": "), text_chunk("\"Paris\"}")],
        "stop",
    );
    let refused = Reply::json(
        400,
        &json!({"error": {"message": "the scripted provider refuses this one",
                          "type": "invalid_request_error"}}),
    );
    let again = events(vec![text_chunk("Paris.")], "stop");
    vec![markdown, story, tool, shaped, refused, again]
}

/// A models file of `entries` (TOML), in a folder of its own named for the test.
fn models_file(name: &str, entries: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-ui-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    std::fs::write(&path, entries).unwrap();
    path
}

/// `GET path` on the server with `headers`: its status, headers and body (a redirect not
/// followed).
async fn get(
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    agent_as_model::install_tls();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut request = client.get(format!("{url}{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// The value of the sample `series` (name and labels as written) in `/metrics`.
async fn sample(server: &HttpServer, series: &str, headers: &[(&str, &str)]) -> Option<f64> {
    let (_, _, text) = get(&server.url, "/metrics", headers).await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until `series` reads `value` (a bound on a wait, not a measurement).
async fn until_sample(server: &HttpServer, series: &str, value: f64, headers: &[(&str, &str)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = sample(server, series, headers).await;
        if now == Some(value) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {now:?}, not {value}:\n{}",
            get(&server.url, "/metrics", headers).await.2
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Without the token the page itself is served (its security policy saying it loads nothing
/// from elsewhere) and nothing else: its numbers, the APIs and `/metrics` are refused.
async fn only_the_page_without_the_token(url: &str) {
    let (status, headers, body) = get(url, "/ui", &[]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("ui/app.js"), "{body}");
    let policy = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
    ] {
        assert!(policy.contains(directive), "{policy}");
    }
    let (status, headers, _) = get(url, "/ui/markdown.js", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    let (status, headers, _) = get(url, "/ui/", &[]).await;
    assert_eq!(
        (status, headers["location"].to_str().unwrap()),
        (308, "../ui")
    );
    for path in ["/ui/engine.json", "/v1/models", "/metrics", "/api/ps"] {
        let (status, _, body) = get(url, path, &[]).await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    // A file the page does not hold is not the page: the token first, then a 404.
    let (status, _, _) = get(url, "/ui/nothing.js", &[]).await;
    assert_eq!(status, 401);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = get(url, "/ui/nothing.js", &[("authorization", &bearer)]).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn the_page_chats_with_a_scripted_provider_behind_the_token_and_a_stop_cancels_the_call() {
    let first = Scripted::start(first_script()).await;
    let second = Scripted::start(vec![events(
        vec![text_chunk("I am the second model.")],
        "stop",
    )])
    .await;
    let file = models_file(
        "provider",
        &format!(
            "default = \"scripted\"\n\
             [[models]]\nname = \"scripted\"\naliases = [\"gpt-4o-mini\"]\nbackend = \"provider\"\n\
             url = \"{}\"\nmodel = \"upstream\"\nretries = 0\n\
             [[models]]\nname = \"second\"\naliases = [\"fast\"]\nbackend = \"provider\"\n\
             url = \"{}\"\nmodel = \"second-upstream\"\nretries = 0\n",
            first.url, second.url
        ),
    );
    let log = file.with_file_name("server.log");
    let server = Server::new()
        .log_level("warn")
        .env("AGENT_AS_MODEL_MODELS", &file)
        .env("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN)
        .log_file(&log)
        .http()
        .await;
    // The start log names the page's address.
    assert!(
        server.log().contains(&format!("{}/ui", server.url)),
        "{}",
        server.log()
    );
    only_the_page_without_the_token(&server.url).await;

    let shots = screenshots();
    let options = json!({"token": TOKEN, "screenshots": shots});
    let report = drive("provider", &server.url, options).await;
    same_origin(&report, &server.url);

    // The stream stopped mid-way: the call is counted cancelled, and its request to the
    // provider was closed before the provider had written the whole story.
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let cancelled =
        r#"agent_as_model_requests_total{api="chat",model="scripted",outcome="cancelled"}"#;
    until_sample(&server, cancelled, 1.0, &auth).await;
    assert_eq!(first.open(), 0, "the provider's request is still open");
    let stopped = report["stopped_text"].as_str().unwrap();
    assert!(
        stopped.contains("word 3") && !stopped.contains("word 39"),
        "{stopped}"
    );

    // The error is the API's own message, which carries the provider's.
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("the provider answered 400") && error.contains("refuses this one"),
        "{error}"
    );
    // The model picked from the list answered (its provider's name for it was asked for), and
    // the list held every name a call may use.
    assert_eq!(second.seen().len(), 1);
    assert_eq!(second.seen()[0].body["model"], "second-upstream");
    let options = report["options"].to_string();
    for name in ["scripted", "gpt-4o-mini", "second", "fast"] {
        assert!(options.contains(name), "{options}");
    }
    // The page's settings reached the provider: the tool, then the schema.
    let seen = first.seen();
    assert_eq!(seen[2].body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(seen[3].body["response_format"]["type"], "json_schema");
    assert!(
        report["charts"][0].as_str().is_some_and(|v| !v.is_empty()),
        "{report}"
    );
}

/// A server whose models file's one entry, `local`, is the embedded model with `setting` (a
/// TOML line).
async fn local_model_page(name: &str, setting: &str) -> HttpServer {
    let entry = format!("[[models]]\nname = \"local\"\nbackend = \"local\"\n{setting}\n");
    Server::new()
        .log_level("error")
        .env("AGENT_AS_MODEL_MODELS", models_file(name, &entry))
        .ready_within(Duration::from_secs(60))
        .http()
        .await
}

#[tokio::test]
async fn the_page_is_answered_by_the_embedded_model_and_its_engine_view_loads_and_unloads_it() {
    let fetched = crate::local::first_try();
    assert!(
        fetched.status.success(),
        "the embedded model could not be fetched"
    );
    let _turn = crate::local::TURN.lock().await;
    let server = local_model_page("embedded", "keep_alive = 600").await;
    let shots = screenshots();
    let report = drive("embedded", &server.url, json!({"screenshots": shots})).await;
    same_origin(&report, &server.url);
    let answer = report["answer"].as_str().unwrap();
    assert!(answer.to_lowercase().contains("paris"), "{answer}");
    let loaded = report["loaded_row"].as_str().unwrap();
    assert!(
        loaded.contains("loaded") && loaded.contains("Unload"),
        "{loaded}"
    );
    until_sample(&server, "agent_as_model_local_models_loaded", 0.0, &[]).await;
    for shot in ["ui-chat.png", "ui-engine.png"] {
        assert!(
            shots.join(shot).metadata().unwrap().len() > 10_000,
            "{shot}"
        );
    }
}

#[tokio::test]
async fn the_page_attaches_images_for_a_model_with_vision_and_they_reach_it() {
    let projector = crate::vision::mmproj();
    let _turn = crate::local::TURN.lock().await;
    let server = local_model_page("vision", &format!("mmproj = \"{projector}\"")).await;
    let images = ["red.png", "blue.png"]
        .map(|n| format!("{}/tests/data/vision/{n}", env!("CARGO_MANIFEST_DIR")));
    let report = drive("vision", &server.url, json!({"images": images})).await;
    same_origin(&report, &server.url);
    let answers: Vec<String> = (report["answers"].as_array().unwrap().iter())
        .map(|a| a.as_str().unwrap().to_lowercase())
        .collect();
    assert!(
        answers.len() == 2 && answers[0].contains("red") && answers[1].contains("blue"),
        "{answers:?}"
    );
}
