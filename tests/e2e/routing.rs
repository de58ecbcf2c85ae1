//! Many models behind one server: a models file (`--models`) names two scripted
//! OpenAI-compatible providers, LiteLLM's proxy, the embedded model and the host; a call's
//! `model` argument reaches the one it names on every shape and both eras, aliases and the
//! default work, a failing provider falls back to the next and the result says so, a model at
//! its cap refuses with "retry", bad files are refused with their line, and keys appear in no
//! result, listing or log line.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::*;
use serde_json::{Value, json};
use std::path::PathBuf;

use crate::common::server::BIN;
const KEY: &str = "sk-route-secret-0123456789abcdef";

/// A models file in a fresh directory.
fn models_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-routing-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn server(path: &PathBuf) -> tokio::process::Command {
    let mut cmd = crate::common::server::Server::new().tokio_command();
    cmd.arg("--models")
        .arg(path)
        .env("ROUTE_KEY", KEY)
        .env("RUST_LOG", "info");
    cmd
}

/// Two scripted providers, `fast` (alias `gpt-4o-mini`, the default) and `smart`.
async fn two_providers() -> (Scripted, Scripted, String) {
    let fast = Scripted::start(vec![Reply::json(200, &completion("Paris (fast)."))]).await;
    let smart = Scripted::start(vec![Reply::json(200, &completion("Paris (smart)."))]).await;
    let file = format!(
        r#"default = "fast"

[[models]]
name = "fast"
aliases = ["gpt-4o-mini"]
backend = "provider"
url = "{}"
model = "upstream-fast"
key_env = "ROUTE_KEY"
retries = 0

[[models]]
name = "smart"
backend = "provider"
url = "{}"
model = "upstream-smart"
retries = 0
"#,
        fast.url, smart.url
    );
    (fast, smart, file)
}

#[tokio::test]
async fn the_model_argument_reaches_the_model_it_names_on_every_shape_and_both_eras() {
    let (fast, smart, file) = two_providers().await;
    let path = models_file("names", &file);
    for era in ERAS {
        let host = Host::text("the host must not be asked");
        let client = connect_command(host.clone(), era, server(&path)).await;
        let told = client.peer_info().and_then(|i| i.instructions.clone());
        assert!(told.unwrap_or_default().contains("pass `model`"));
        for tool in SHAPES {
            for (model, entry, answer) in [
                (Some("smart"), "smart", "Paris (smart)."),
                (Some("gpt-4o-mini"), "fast", "Paris (fast)."),
                (Some("fast"), "fast", "Paris (fast)."),
                (None, "fast", "Paris (fast)."),
            ] {
                let r = call(&client, tool, question(tool, model)).await;
                assert!(!is_error(&r), "{tool} {model:?}: {}", text(&r));
                assert!(text(&r).contains(answer), "{tool} {model:?}: {}", text(&r));
                let route = &structured(&r)["route"];
                assert_eq!(route["model"], entry, "{tool} {model:?}: {route}");
                assert_eq!(route["backend"], "provider", "{tool}: {route}");
                assert_eq!(route["fell_back_from"], json!([]), "{tool}: {route}");
                assert_conforms(&client, tool, &r).await;
            }
        }
        assert!(host.seen().is_empty(), "the host was not sampled");
        client.cancel().await.unwrap();
    }
    // Each provider got its own upstream model name, and only `fast` the key.
    let (f, s) = (fast.seen(), smart.seen());
    assert_eq!(f.len(), 2 * 5 * 3);
    assert_eq!(s.len(), 2 * 5);
    assert!(f.iter().all(|r| r.body["model"] == "upstream-fast"));
    assert!(s.iter().all(|r| r.body["model"] == "upstream-smart"));
    assert_eq!(
        f[0].header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(s[0].header("authorization"), None);
}

#[tokio::test]
async fn an_unknown_model_is_refused_with_the_names_unless_a_sampling_host_takes_the_hint() {
    let (_fast, _smart, file) = two_providers().await;
    let path = models_file("unknown", &file);
    let client = connect_command(Host::text("host"), Era::Legacy, server(&path)).await;
    let e = err_text(
        &client,
        "chat_complete",
        question("chat_complete", Some("gpt-5")),
    )
    .await;
    assert!(
        e.contains("`model`")
            && e.contains("\"gpt-5\" names no model")
            && e.contains("fast (also gpt-4o-mini), smart"),
        "{e}"
    );
    client.cancel().await.unwrap();
    // With a host entry, a host that samples gets the unknown name as its hint.
    let with_host = format!("{file}\n[[models]]\nname = \"agent\"\nbackend = \"host\"\n");
    let path = models_file("hint", &with_host);
    for era in ERAS {
        let host = Host::text("Paris (host).");
        let client = connect_command(host.clone(), era, server(&path)).await;
        let r = call(
            &client,
            "chat_complete",
            question("chat_complete", Some("gpt-5")),
        )
        .await;
        assert_eq!(text(&r), "Paris (host).", "{r:?}");
        assert_eq!(structured(&r)["route"]["model"], "agent");
        assert_eq!(structured(&r)["route"]["backend"], "host");
        let seen = host.seen_json();
        assert_eq!(seen[0]["modelPreferences"]["hints"][0]["name"], "gpt-5");
        client.cancel().await.unwrap();
        // A host that cannot sample gets the refusal.
        let client = connect_command(Host::text("x").without_sampling(), era, server(&path)).await;
        let e = err_text(
            &client,
            "chat_complete",
            question("chat_complete", Some("gpt-5")),
        )
        .await;
        assert!(e.contains("names no model"), "{e}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_failing_provider_falls_back_to_the_next_and_the_result_says_so() {
    let down = Scripted::start(vec![Reply::json(
        503,
        &json!({"error": {"message": "overloaded"}}),
    )])
    .await;
    let refusing = Scripted::start(vec![Reply::json(
        400,
        &json!({"error": {"message": "bad request"}}),
    )])
    .await;
    let backup = Scripted::start(vec![Reply::json(200, &completion("Paris (backup)."))]).await;
    let file = format!(
        r#"[[models]]
name = "primary"
backend = "provider"
url = "{}"
model = "m"
retries = 1
fallbacks = ["closed", "backup"]

[[models]]
name = "closed"
backend = "provider"
url = "http://127.0.0.1:{}/v1"
model = "m"
retries = 0

[[models]]
name = "picky"
backend = "provider"
url = "{}"
model = "m"
retries = 0
fallbacks = ["backup"]

[[models]]
name = "backup"
backend = "provider"
url = "{}"
model = "m"
key_env = "ROUTE_KEY"
"#,
        down.url,
        free_port(),
        refusing.url,
        backup.url
    );
    let path = models_file("fallback", &file);
    let log = path.with_file_name("server.log");
    for era in ERAS {
        // The server's log, at its most detailed, goes to a file that is searched for the key.
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(format!("exec \"$0\" \"$@\" 2>>'{}'", log.display()))
            .arg(BIN)
            .arg("--models")
            .arg(&path)
            .env("ROUTE_KEY", KEY)
            .env("RUST_LOG", "debug");
        let client = connect_command(Host::text("no"), era, cmd).await;
        let r = call(&client, "chat_complete", question("chat_complete", None)).await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "Paris (backup).");
        let route = &structured(&r)["route"];
        assert_eq!(route["model"], "backup", "{route}");
        let from = route["fell_back_from"].as_array().unwrap();
        assert_eq!(from.len(), 2, "{route}");
        assert_eq!(from[0]["model"], "primary");
        assert!(
            from[0]["error"].as_str().unwrap().contains("503"),
            "{route}"
        );
        assert_eq!(from[1]["model"], "closed");
        assert!(
            from[1]["error"]
                .as_str()
                .unwrap()
                .contains("could not be reached"),
            "{route}"
        );
        assert!(!route.to_string().contains(KEY));
        assert_conforms(&client, "chat_complete", &r).await;
        // The listing shows which model is failing, and why.
        let listed = call(&client, "list_models", json!({})).await;
        let models: Value = serde_json::from_str(&text(&listed)).unwrap();
        assert!(
            models[0]["last_error"].as_str().unwrap().contains("503"),
            "{models}"
        );
        assert_eq!(models[3]["last_error"], Value::Null, "{models}");
        assert!(!text(&listed).contains(KEY));
        // A 4xx about the request is the caller's: no fallback.
        let e = err_text(
            &client,
            "chat_complete",
            question("chat_complete", Some("picky")),
        )
        .await;
        assert!(e.contains("400") && e.contains("bad request"), "{e}");
        client.cancel().await.unwrap();
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("falling back"), "{logged}");
    assert!(!logged.contains(KEY), "the key is in the log");
    assert_eq!(down.seen().len(), 2 * 2, "one try and one retry per era");
    assert_eq!(refusing.seen().len(), 2);
    assert_eq!(backup.seen().len(), 2);
}

#[tokio::test]
async fn the_embedded_model_and_litellm_answer_by_name_and_list_models_shows_every_entry() {
    assert!(
        crate::local::first_try().status.success(),
        "the model could not be fetched"
    );
    let _turn = crate::local::TURN.lock().await;
    let port = free_port();
    let _litellm = crate::litellm::start(port);
    crate::litellm::wait_until_up(port).await;
    let file = format!(
        r#"default = "proxy"

[[models]]
name = "proxy"
aliases = ["mock-text"]
backend = "provider"
url = "http://127.0.0.1:{port}/v1"
model = "mock-text"
key_env = "ROUTE_KEY"
cost = 0.2

[[models]]
name = "private"
backend = "local"
max_in_flight = 2
"#
    );
    let path = models_file("real", &file);
    let mut cmd = server(&path);
    cmd.env("ROUTE_KEY", crate::litellm::MASTER_KEY);
    let client = connect_command(Host::text("no").without_sampling(), Era::Modern, cmd).await;
    let r = call(&client, "chat_complete", question("chat_complete", None)).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(text(&r), "The capital of France is Paris.");
    assert_eq!(structured(&r)["route"]["model"], "proxy");
    let r = call(&client, "generate", question("generate", Some("private"))).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("Paris"), "{}", text(&r));
    assert_eq!(structured(&r)["route"]["backend"], "local");
    let listed = call(&client, "list_models", json!({})).await;
    let models: Value = serde_json::from_str(&text(&listed)).unwrap();
    let names: Vec<&str> = models
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["proxy", "private"]);
    assert_eq!(models[0]["aliases"], json!(["mock-text"]));
    assert_eq!(models[0]["backend"], "provider");
    assert_eq!(models[0]["default"], true);
    assert_eq!(models[1]["backend"], "local");
    assert_eq!(models[1]["in_flight"]["max"], 2);
    assert!(
        !text(&listed).contains(crate::litellm::MASTER_KEY),
        "{}",
        text(&listed)
    );
    assert_conforms(&client, "list_models", &listed).await;
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_model_at_its_cap_refuses_with_retry_after_a_bounded_wait() {
    let slow = Scripted::start(vec![Reply::Silence]).await;
    let file = format!(
        "[[models]]\nname = \"slow\"\nbackend = \"provider\"\nurl = \"{}\"\nmodel = \"m\"\n\
         retries = 0\ntimeout_secs = 4\nmax_in_flight = 1\n",
        slow.url
    );
    let path = models_file("cap", &file);
    let mut cmd = server(&path);
    cmd.env("AGENT_AS_MODEL_QUEUE_TIMEOUT_SECS", "1");
    let client = std::sync::Arc::new(connect_command(Host::text("no"), Era::Modern, cmd).await);
    let first = {
        let client = client.clone();
        tokio::spawn(async move { err_text(&client, "generate", question("generate", None)).await })
    };
    // The first holds the only place; the second waits a second and is refused.
    while slow.seen().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let e = err_text(&client, "generate", question("generate", None)).await;
    assert!(e.contains("max_in_flight") && e.contains("retry"), "{e}");
    let first = first.await.unwrap();
    assert!(first.contains("did not answer within 4 s"), "{first}");
    assert_eq!(slow.seen().len(), 1, "the refused call sent nothing");
}

#[test]
fn bad_files_are_refused_at_start_with_their_line() {
    for (name, text, expected) in [
        (
            "unknown",
            "[[models]]\nname = \"a\"\nbackend = \"local\"\ncolour = 1\n",
            ":4: unknown field `colour`",
        ),
        (
            "duplicate",
            "[[models]]\nname = \"a\"\nbackend = \"local\"\n\n[[models]]\nname = \"a\"\nbackend = \"local\"\n",
            ":6: \"a\" names two models",
        ),
        (
            "key",
            "[[models]]\nname = \"p\"\nbackend = \"provider\"\nurl = \"http://x/v1\"\nmodel = \"m\"\nkey_env = \"NO_SUCH_ROUTE_KEY\"\n",
            ":6: model \"p\": the variable \"NO_SUCH_ROUTE_KEY\"",
        ),
        (
            "default",
            "default = \"b\"\n[[models]]\nname = \"a\"\nbackend = \"local\"\n",
            ":1: default \"b\" names no model",
        ),
        (
            "timeout",
            "[[models]]\nname = \"p\"\nbackend = \"provider\"\nurl = \"http://x/v1\"\nmodel = \"m\"\ntimeout_secs = 0\n",
            ":6: model \"p\": `timeout_secs` must be at least 1",
        ),
        (
            "retries",
            "[[models]]\nname = \"p\"\nbackend = \"provider\"\nurl = \"http://x/v1\"\nmodel = \"m\"\nretries = 4294967295\n",
            ":6: model \"p\": `retries` may be at most 10",
        ),
        (
            "url",
            "[[models]]\nname = \"p\"\nbackend = \"provider\"\nurl = \"http://[oops/v1?key=sk-typed-in\"\nmodel = \"m\"\n",
            ":4: model \"p\": `url` is not a URL",
        ),
        (
            "key-in-timeout",
            "[[models]]\nname = \"p\"\nbackend = \"provider\"\nurl = \"http://x/v1\"\nmodel = \"m\"\ntimeout_secs = \"sk-typed-in-0123\"\n",
            ":6: `timeout_secs`: expected u64, found string (the value is not shown)",
        ),
        (
            "key-in-backend",
            "[[models]]\nname = \"p\"\nbackend = \"sk-typed-in-0123\"\n",
            ":3: `backend`: unknown variant (the value is not shown), expected one of",
        ),
        (
            "key-in-key-env",
            "[[models]]\nname = \"p\"\nbackend = \"provider\"\nurl = \"http://x/v1\"\nmodel = \"m\"\nkey_env = \"sk-typed-in-0123\"\n",
            ":6: model \"p\": key_env must name an environment variable",
        ),
    ] {
        let path = models_file(name, text);
        let out = crate::common::server::Server::new()
            .command()
            .arg("--models")
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{}{expected}", path.display())),
            "{name}: {stderr}"
        );
        assert!(
            !stderr.contains("sk-typed-in"),
            "{name}: a key is echoed: {stderr}"
        );
    }
    // A special file that never ends is not read to the end.
    let out = crate::common::server::Server::new()
        .command()
        .args(["--models", "/dev/zero"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("larger than 4 MiB"), "{stderr}");
}

/// A timeout set in the models file is named as the file's setting, not the environment's.
#[tokio::test]
async fn a_timeout_from_the_models_file_is_named_as_its_setting() {
    let silent = Scripted::start(vec![Reply::Silence]).await;
    let path = models_file(
        "timeout-source",
        &format!(
            "[[models]]\nname = \"slow\"\nbackend = \"provider\"\nurl = \"{}\"\nmodel = \"m\"\ntimeout_secs = 1\nretries = 0\n",
            silent.url
        ),
    );
    let client = connect_command(Host::text("unused"), Era::Modern, server(&path)).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(
        e.contains("did not answer within 1 s (the models file's timeout_secs of \"slow\")"),
        "{e}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bridged_servers_model_preferences_choose_among_the_models() {
    // The downstream (the official Python SDK) asks the bridge for completions with model
    // preferences; the host cannot sample, so the bridge answers with the model they pick.
    let cheap = Scripted::start(vec![Reply::json(200, &completion("Paris (cheap)."))]).await;
    let clever = Scripted::start(vec![Reply::json(200, &completion("Paris (clever)."))]).await;
    let file = format!(
        r#"default = "cheap"

[[models]]
name = "cheap"
backend = "provider"
url = "{}"
model = "m"
cost = 0.9
intelligence = 0.2

[[models]]
name = "clever"
aliases = ["claude-opus"]
backend = "provider"
url = "{}"
model = "m"
cost = 0.1
intelligence = 0.95
"#,
        cheap.url, clever.url
    );
    let path = models_file("prefs", &file);
    let mut cmd = crate::common::bridge_to_sdk_downstream();
    cmd.env("AGENT_AS_MODEL_MODELS", &path)
        .env("RUST_LOG", "error");
    let client = connect_command(Host::text("no").without_sampling(), Era::Legacy, cmd).await;
    for (prefs, answer) in [
        (json!({"hints": ["claude-opus"]}), "Paris (clever)."),
        (json!({"hints": ["gpt-unknown", "cheap"]}), "Paris (cheap)."),
        (json!({"intelligence": 0.9, "cost": 0.1}), "Paris (clever)."),
        (json!({"cost": 1.0}), "Paris (cheap)."),
        (json!({}), "Paris (cheap)."),
    ] {
        let mut args = json!({"question": "Capital of France?", "max_tokens": 16});
        args.as_object_mut()
            .unwrap()
            .extend(prefs.as_object().unwrap().clone());
        let r = call(&client, "ask", args).await;
        assert!(!is_error(&r), "{prefs}: {r:?}");
        let report: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(report["answer"], answer, "{prefs}: {report}");
    }
    assert_eq!(cheap.seen().len(), 3);
    assert_eq!(clever.seen().len(), 2);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn model_hints_of_this_server_behind_the_bridge_choose_on_both_eras() {
    // This server behind the bridge asks for completions with the caller's `model` as its
    // hint: during the call on the legacy era, in an input-required round on 2026-07-28. The
    // host cannot sample, so the bridge answers with the model of its file the hint names.
    let cheap = Scripted::start(vec![Reply::json(200, &completion("Paris (cheap)."))]).await;
    let clever = Scripted::start(vec![Reply::json(200, &completion("Paris (clever)."))]).await;
    let file = format!(
        "default = \"cheap\"\n\n[[models]]\nname = \"cheap\"\nbackend = \"provider\"\n\
         url = \"{}\"\nmodel = \"m\"\n\n[[models]]\nname = \"clever\"\n\
         aliases = [\"claude-opus\"]\nbackend = \"provider\"\nurl = \"{}\"\nmodel = \"m\"\n",
        cheap.url, clever.url
    );
    let path = models_file("hints", &file);
    for down in ["legacy", "modern"] {
        // The file is the bridge's (a flag, not the environment its downstream inherits).
        let mut cmd = crate::common::server::Server::new().tokio_command();
        cmd.arg("--models")
            .arg(&path)
            .args(["bridge", "--downstream-era", down, "--", BIN])
            .env("RUST_LOG", "error");
        let client = connect_command(Host::text("no").without_sampling(), Era::Legacy, cmd).await;
        for (model, answer) in [
            (Some("claude-opus-4"), "Paris (clever)."),
            (Some("something-else"), "Paris (cheap)."),
            (None, "Paris (cheap)."),
        ] {
            let r = call(&client, "chat_complete", question("chat_complete", model)).await;
            assert!(!is_error(&r), "{down} {model:?}: {}", text(&r));
            assert_eq!(text(&r), answer, "{down} {model:?}");
        }
        client.cancel().await.unwrap();
    }
    assert_eq!(clever.seen().len(), 2);
    assert_eq!(cheap.seen().len(), 4);
}

/// Progress under one token only goes forward: a streamed answer that breaks off falls back to
/// the next model, whose progress continues from where the first stopped and whose messages
/// do not show the abandoned text. Two calls in flight may not share a token, and a token that
/// is neither a string nor an integer is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_goes_forward_across_a_fallback_and_tokens_are_checked() {
    use crate::common::raw::Raw;
    use std::time::Duration;
    let delta = |t: &str| json!({"choices": [{"delta": {"content": t}}]}).to_string();
    // The first provider streams some words and breaks off (no end): a transient failure.
    let first: Vec<String> = (0..6).map(|i| delta(&format!("abandoned{i} "))).collect();
    let mut second: Vec<String> = (0..4).map(|i| delta(&format!("kept{i} "))).collect();
    second.push(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string());
    second.push("[DONE]".into());
    let gap = Duration::from_millis(150);
    let broken = Scripted::start(vec![Reply::Events(first, gap)]).await;
    let good = Scripted::start(vec![Reply::Events(second, gap)]).await;
    let file = models_file(
        "progress",
        &format!(
            r#"default = "broken"

[[models]]
name = "broken"
backend = "provider"
url = "{}"
model = "m1"
retries = 0
fallbacks = ["good"]

[[models]]
name = "good"
backend = "provider"
url = "{}"
model = "m2"
retries = 0
"#,
            broken.url, good.url
        ),
    );
    let path = file.to_str().unwrap().to_owned();
    let mut raw = Raw::legacy(&[("AGENT_AS_MODEL_MODELS", path.as_str())], json!({}));
    let call = |id: i64, token: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "generate", "arguments": {"prompt": "hi"}, "_meta": {"progressToken": token}}})
    };
    raw.send(&call(1, json!("p1")));
    // A second call under the same token while the first is in flight.
    tokio::time::sleep(Duration::from_millis(100)).await;
    raw.send(&call(2, json!("p1")));
    raw.send(&call(3, json!({"not": "a token"})));
    let mut seen = Vec::new();
    let answer = raw
        .recv_matching(Duration::from_secs(20), &mut seen, |v| v["id"] == 1)
        .unwrap_or_else(|| panic!("no answer; the server said: {}", raw.stderr()));
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("kept3"),
        "{answer}"
    );
    for (id, expected) in [
        (2, "already used by a call in flight"),
        (3, "string or an integer"),
    ] {
        let reply = seen
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no answer to call {id}: {seen:?}"));
        assert!(reply.to_string().contains(expected), "{reply}");
    }
    let progress: Vec<&Value> = seen
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .map(|v| &v["params"])
        .collect();
    assert!(progress.len() >= 3, "too little progress: {progress:?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress went back: {values:?}"
    );
    let after: Vec<&&Value> = progress
        .iter()
        .filter(|p| p["message"].as_str().unwrap().contains("kept"))
        .collect();
    assert!(
        !after.is_empty(),
        "no progress from the second model: {progress:?}"
    );
    for p in after {
        assert!(
            !p["message"].as_str().unwrap().contains("abandoned"),
            "the abandoned text is shown: {p}"
        );
    }
}

/// Entries naming the same model file share one engine: four local entries hold about what
/// one does, and each answers.
#[tokio::test]
async fn local_entries_of_one_model_file_share_an_engine() {
    assert!(
        crate::local::first_try().status.success(),
        "the model could not be fetched"
    );
    let _turn = crate::local::TURN.lock().await;
    let one = "[[models]]\nname = \"a\"\nbackend = \"local\"\n".to_owned();
    let four: String = ["a", "b", "c", "d"]
        .iter()
        .map(|n| format!("[[models]]\nname = \"{n}\"\nbackend = \"local\"\n\n"))
        .collect();
    let mut resident = Vec::new();
    for (label, file, names) in [
        ("one", one, vec!["a"]),
        ("four", four, vec!["a", "b", "c", "d"]),
    ] {
        let path = models_file(&format!("share-{label}"), &file);
        let mut cmd = server(&path);
        cmd.env("AGENT_AS_MODEL_LOCAL_SLOTS", "1");
        let client = connect_command(Host::text("no").without_sampling(), Era::Modern, cmd).await;
        for name in &names {
            let r = call(&client, "generate", question("generate", Some(name))).await;
            assert!(!is_error(&r), "{name}: {}", text(&r));
            assert!(text(&r).contains("Paris"), "{name}: {}", text(&r));
        }
        // The server is the process whose command line names this models file.
        resident.push(
            std::process::Command::new("pgrep")
                .args(["-f", &format!("{}", path.display())])
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .map(str::to_owned)
                })
                .and_then(|p| p.trim().parse::<u32>().ok())
                .map(resident_kib)
                .unwrap(),
        );
        client.cancel().await.unwrap();
    }
    eprintln!(
        "resident: one local entry {} KiB, four {} KiB",
        resident[0], resident[1]
    );
    assert!(
        resident[1] < resident[0] + resident[0] / 2,
        "four entries of one file hold {} KiB, one holds {} KiB",
        resident[1],
        resident[0]
    );
}

/// A models file of 10,000 providers starts in bounded memory (they share one HTTP client), and
/// an unknown model's error lists a few names, not all.
#[tokio::test]
async fn ten_thousand_models_start_lean_and_an_unknown_name_gets_a_short_error() {
    use std::fmt::Write as _;
    let mut file = String::from("default = \"m0\"\n");
    for i in 0..10_000 {
        let _ = write!(
            file,
            "[[models]]\nname = \"m{i}\"\nbackend = \"provider\"\nurl = \"http://127.0.0.1:9/v1\"\n\
             model = \"x{i}\"\nfallbacks = [\"m{}\"]\n\n",
            (i + 1) % 10_000
        );
    }
    let path = models_file("ten-thousand", &file);
    let path = path.to_str().unwrap().to_owned();
    let mut raw =
        crate::common::raw::Raw::legacy(&[("AGENT_AS_MODEL_MODELS", path.as_str())], json!({}));
    let rss = crate::common::resident_kib(raw.child.id());
    eprintln!("resident with 10,000 models: {rss} KiB");
    assert!(rss < 300 * 1024, "resident {rss} KiB with 10,000 models");
    raw.send(&crate::common::raw::tools_call(
        json!(1),
        "generate",
        json!({"prompt": "hi", "model": "no-such-model"}),
    ));
    let reply = raw
        .recv_id(&json!(1), std::time::Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no answer; the server said: {}", raw.stderr()));
    let message = reply.to_string();
    assert!(
        message.contains("and 9980 more"),
        "{}",
        &message[..message.len().min(2000)]
    );
    assert!(message.len() < 4096, "an error of {} bytes", message.len());
}

/// A models file with a 1 MB alias and long names: an unknown model's 404 (by a call or by
/// `GET /v1/models/{id}`) clips each name and bounds the list, instead of echoing megabytes.
#[tokio::test]
async fn huge_names_in_the_models_file_leave_unknown_model_errors_short() {
    use std::fmt::Write as _;
    let mut file = format!(
        "[[models]]\nname = \"a\"\naliases = [\"{}\"]\nbackend = \"provider\"\n\
         url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
        "x".repeat(1 << 20)
    );
    for i in 0..15 {
        let _ = write!(
            file,
            "[[models]]\nname = \"n{i}-{}\"\nbackend = \"provider\"\n\
             url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
            "y".repeat(100_000)
        );
    }
    let path = models_file("huge-names", &file);
    let s = crate::http::start(&[("AGENT_AS_MODEL_MODELS", path.to_str().unwrap())]).await;
    let client = http_client();
    let body = json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]});
    let call = client
        .post(format!("{}/v1/chat/completions", s.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let lookup = client
        .get(format!("{}/v1/models/nope", s.url))
        .send()
        .await
        .unwrap();
    for response in [call, lookup] {
        assert_eq!(response.status(), 404);
        let text = response.text().await.unwrap();
        assert!(text.len() < 8192, "a 404 of {} bytes", text.len());
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"nope\" names no model"), "{message}");
        assert!(message.contains(" more"), "{message}");
    }
}
