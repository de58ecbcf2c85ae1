//! The provider backend under attack and under cancellation: cancelled calls stop their
//! requests, answers are bounded, redirects stay on the provider's origin, and no secret (the
//! key, the URL's password or query) reaches a client.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::raw::{Raw, tools_call};
use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const KEY: &str = "sk-limits-secret-key-0123456789";

fn env<'a>(url: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("AGENT_AS_MODEL_BACKEND", "provider"),
        ("AGENT_AS_MODEL_PROVIDER_URL", url),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "gpt-test"),
        ("AGENT_AS_MODEL_PROVIDER_KEY", KEY),
        ("AGENT_AS_MODEL_PROVIDER_RETRIES", "0"),
    ];
    env.extend_from_slice(extra);
    env
}

fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_closes_its_provider_request_before_its_slot_is_free() {
    let provider = Scripted::start(vec![Reply::Silence]).await;
    let mut raw = Raw::legacy(
        &env(
            &provider.url,
            &[("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", "2")],
        ),
        json!({}),
    );
    let mut refused = 0;
    for i in 0..40 {
        raw.send(&tools_call(json!(i), "generate", json!({"prompt": "hang"})));
        tokio::time::sleep(Duration::from_millis(50)).await;
        raw.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": i, "reason": "test"}}),
        );
        // A cancelled call gets no answer; a refused one (still stopping) gets -32000.
        if let Some(reply) = raw.recv(Duration::from_millis(20)) {
            assert_eq!(reply["error"]["code"], -32000, "{reply}");
            refused += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_millis(500);
    while provider.open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        provider.open(),
        0,
        "provider requests left open by cancelled calls"
    );
    assert!(refused < 40, "most calls were admitted ({refused} refused)");
    assert!(provider.seen().len() >= 20, "{}", provider.seen().len());
    // The slots are free again: a call is admitted (and waits on the silent provider).
    raw.send(&tools_call(
        json!("after"),
        "generate",
        json!({"prompt": "x"}),
    ));
    assert!(raw.recv(Duration::from_millis(500)).is_none(), "admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_bounded_by_a_setting() {
    let big = completion(&"y".repeat(3 * 1024 * 1024));
    for reply in [Reply::json(200, &big), Reply::Endless] {
        let provider = Scripted::start(vec![reply]).await;
        let mut raw = Raw::legacy(
            &env(
                &provider.url,
                &[("AGENT_AS_MODEL_PROVIDER_MAX_RESPONSE_BYTES", "1048576")],
            ),
            json!({}),
        );
        raw.send(&tools_call(json!(1), "generate", json!({"prompt": "big"})));
        let reply = raw
            .recv_id(&json!(1), Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no answer; the server said: {}", raw.stderr()));
        let r = &reply["result"];
        assert_eq!(r["isError"], true, "{reply}");
        let message = r["content"][0]["text"].as_str().unwrap();
        assert!(
            message.contains("longer than 1048576 bytes")
                && message.contains("AGENT_AS_MODEL_PROVIDER_MAX_RESPONSE_BYTES"),
            "{message}"
        );
        let rss = resident_kib(raw.child.id());
        eprintln!("resident after an oversized answer: {} KiB", rss);
        assert!(
            rss < 100 * 1024,
            "resident {rss} KiB after an oversized answer"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_not_followed() {
    let elsewhere = Scripted::start(vec![Reply::json(200, &completion("stolen"))]).await;
    let location = format!("{}/chat/completions", elsewhere.url);
    let provider = Scripted::start(vec![Reply::Answer(
        307,
        vec![("Location".into(), location)],
        String::new(),
    )])
    .await;
    let client =
        connect_with_env(Host::text("unused"), Era::Legacy, &env(&provider.url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "secret prompt"})).await;
    assert!(e.contains("307") && e.contains("not followed"), "{e}");
    assert!(
        elsewhere.seen().is_empty(),
        "the prompt went to another origin"
    );
    assert_eq!(provider.seen().len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn secrets_in_the_provider_url_are_neither_listed_nor_repeated() {
    let provider = Scripted::start(vec![Reply::Silence]).await;
    let address = provider.url.trim_start_matches("http://").to_owned();
    let url = format!("http://user:pw-secret-4242@{address}?api-key=q-secret-9191");
    let client = connect_with_env(
        Host::text("unused"),
        Era::Modern,
        &env(&url, &[("AGENT_AS_MODEL_PROVIDER_TIMEOUT_SECS", "1")]),
    )
    .await;
    let listed = ok_text(&client, "list_models", json!({})).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    for shown in [&listed, &e] {
        for secret in ["pw-secret-4242", "q-secret-9191", "user:", KEY] {
            assert!(!shown.contains(secret), "{secret} shown in {shown}");
        }
    }
    assert!(listed.contains(&format!("http://{address}")), "{listed}");
    assert!(e.contains("did not answer within 1 s"), "{e}");
    // The query string stays a query string, after the path.
    let seen = provider.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions?api-key=q-secret-9191");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_key_is_redacted_wherever_the_provider_echoes_it() {
    // In an error body, past the point where the message is clipped.
    let padded = format!("{} {KEY}", "filler ".repeat(400));
    let provider = Scripted::start(vec![Reply::json(
        401,
        &json!({"error": {"message": padded}}),
    )])
    .await;
    let client =
        connect_with_env(Host::text("unused"), Era::Legacy, &env(&provider.url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(!e.contains(&KEY[..12]), "a part of the key leaked: {e}");
    client.cancel().await.unwrap();
    // In a successful answer.
    let mut echoed = completion(&format!("your key is {KEY}"));
    echoed["model"] = json!(KEY);
    let provider = Scripted::start(vec![Reply::json(200, &echoed)]).await;
    let client =
        connect_with_env(Host::text("unused"), Era::Modern, &env(&provider.url, &[])).await;
    let r = call(&client, "chat_complete", json!({"messages": [user("hi")]})).await;
    assert!(!is_error(&r), "{}", text(&r));
    let everything = serde_json::to_string(&r).unwrap();
    assert!(!everything.contains(KEY), "{everything}");
    assert!(text(&r).contains("[redacted]"), "{}", text(&r));
    let model: &Value = &structured(&r)["chat_completion"]["model"];
    assert_eq!(model, "[redacted]");
    client.cancel().await.unwrap();
}
