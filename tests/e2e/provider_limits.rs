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
        let rss = crate::common::resident_kib(raw.child.id());
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

/// One event opening 200,000 tool calls (3.4 MB, under the answer cap): the call fails at the
/// tool-call cap, and another call on the same connection is answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_too_many_tool_calls_fails_and_the_server_keeps_answering() {
    let calls: Vec<Value> = (0..200_000).map(|i| json!({"index": i})).collect();
    let flood = json!({"choices": [{"delta": {"tool_calls": calls}}]}).to_string();
    let many: Vec<Value> = (0..200)
        .map(|i| {
            json!({"id": format!("c{i}"), "type": "function",
                        "function": {"name": "f", "arguments": "{}"}})
        })
        .collect();
    let plain = json!({"object": "chat.completion", "model": "gpt-test", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": many},
        "finish_reason": "tool_calls"}]});
    for reply in [
        Reply::Events(vec![flood, "[DONE]".into()], Duration::from_millis(1)),
        Reply::json(200, &plain),
    ] {
        let provider = Scripted::start(vec![reply]).await;
        let mut raw = Raw::legacy(
            &env(
                &provider.url,
                &[("AGENT_AS_MODEL_PROVIDER_MAX_TOOL_CALLS", "128")],
            ),
            json!({}),
        );
        raw.send(&tools_call(
            json!(1),
            "generate",
            json!({"prompt": "flood"}),
        ));
        raw.send(&tools_call(json!(2), "list_models", json!({})));
        let mut skipped = Vec::new();
        let listed = raw
            .recv_matching(Duration::from_secs(15), &mut skipped, |v| v["id"] == 2)
            .unwrap_or_else(|| panic!("list_models waited; the server said: {}", raw.stderr()));
        assert!(listed["result"].is_object(), "{listed}");
        let reply = match skipped.into_iter().find(|v| v["id"] == 1) {
            Some(v) => v,
            None => raw
                .recv_id(&json!(1), Duration::from_secs(15))
                .unwrap_or_else(|| panic!("no answer; the server said: {}", raw.stderr())),
        };
        let r = &reply["result"];
        assert_eq!(r["isError"], true, "{reply}");
        let message = r["content"][0]["text"].as_str().unwrap();
        assert!(
            message.contains("more than 128 tool calls")
                && message.contains("AGENT_AS_MODEL_PROVIDER_MAX_TOOL_CALLS"),
            "{message}"
        );
    }
}

/// Secrets in the forms that slipped past redaction: a URL query key with `+` and `/` echoed
/// as written and decoded, the key in `\u` escapes in a JSON answer, and the key split across
/// two stream deltas as the progress messages show them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_redacted_as_written_decoded_escaped_and_split() {
    const RAW: &str = "AbC+dEf/GhI=";
    const DECODED: &str = "AbC dEf/GhI=";
    let echo = format!("bad request to /v1/chat/completions?api-key={RAW} ({DECODED})");
    let provider =
        Scripted::start(vec![Reply::json(400, &json!({"error": {"message": echo}}))]).await;
    let address = provider.url.trim_start_matches("http://").to_owned();
    let url = format!("http://{address}?api-key={RAW}");
    let client = connect_with_env(Host::text("unused"), Era::Legacy, &env(&url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(
        !e.contains(RAW) && !e.contains(DECODED),
        "the query key leaked: {e}"
    );
    assert!(e.contains("[redacted]"), "{e}");
    client.cancel().await.unwrap();

    // The key written with \u escapes in a JSON answer.
    let escaped: String = KEY
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let body = completion("KEYHERE")
        .to_string()
        .replace("KEYHERE", &escaped);
    let provider = Scripted::start(vec![Reply::Answer(200, Vec::new(), body)]).await;
    let client =
        connect_with_env(Host::text("unused"), Era::Modern, &env(&provider.url, &[])).await;
    let r = call(&client, "generate", json!({"prompt": "hi"})).await;
    let everything = serde_json::to_string(&r).unwrap();
    assert!(
        !everything.contains(KEY),
        "the escaped key came back decoded: {everything}"
    );
    client.cancel().await.unwrap();

    // The key split across two deltas of a stream, followed with a progress token.
    let (head, tail) = KEY.split_at(KEY.len() / 2);
    let delta = |t: &str| json!({"choices": [{"delta": {"content": t}}]}).to_string();
    let events = vec![
        delta("the key is "),
        delta(head),
        delta(tail),
        delta(" and more text after it"),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string(),
        "[DONE]".to_owned(),
    ];
    let provider = Scripted::start(vec![Reply::Events(events, Duration::from_millis(150))]).await;
    let mut raw = Raw::legacy(&env(&provider.url, &[]), json!({}));
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "generate", "arguments": {"prompt": "hi"}, "_meta": {"progressToken": "p1"}}}),
    );
    let mut skipped = Vec::new();
    let reply = raw
        .recv_matching(Duration::from_secs(15), &mut skipped, |v| v["id"] == 1)
        .unwrap_or_else(|| panic!("no answer; the server said: {}", raw.stderr()));
    let progress: Vec<&Value> = skipped
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .collect();
    assert!(
        !progress.is_empty(),
        "no progress was reported: {skipped:?}"
    );
    for shown in progress
        .iter()
        .map(|v| v.to_string())
        .chain([reply.to_string()])
    {
        assert!(
            !shown.contains(KEY),
            "the split key reached a message whole: {shown}"
        );
    }
}

fn tool_answer(name: &str, arguments: &str) -> Value {
    json!({"object": "chat.completion", "model": "gpt-test", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": name, "arguments": arguments}}]},
        "finish_reason": "tool_calls"}]})
}

/// A provider's native tool calls are held to what was offered, as prompted ones are: a tool
/// never offered and arguments that break the schema are repaired, and under
/// `tool_choice: "none"` no call comes back.
#[tokio::test]
async fn native_tool_calls_are_checked_like_emulated_ones() {
    let weather = json!([{"name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]);
    let ask = |choice: &str| json!({"messages": [user("Weather in Paris?")], "tools": weather, "tool_choice": choice});
    for bad in [
        tool_answer("delete_all_files", "{}"),
        tool_answer("get_weather", "{\"city\": 42}"),
    ] {
        let provider = Scripted::start(vec![
            Reply::json(200, &bad),
            Reply::json(200, &tool_answer("get_weather", "{\"city\": \"Paris\"}")),
        ])
        .await;
        let client =
            connect_with_env(Host::text("unused"), Era::Modern, &env(&provider.url, &[])).await;
        let r = call(&client, "chat_complete", ask("auto")).await;
        assert!(!is_error(&r), "{}", text(&r));
        let calls = &structured(&r)["chat_completion"]["choices"][0]["message"]["tool_calls"];
        assert_eq!(calls.as_array().unwrap().len(), 1, "{calls}");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        let seen = provider.seen();
        assert_eq!(seen.len(), 2, "the bad call was not repaired");
        let repair = seen[1].body.to_string();
        assert!(
            repair.contains("delete_all_files") || repair.contains("violate its input schema"),
            "{repair}"
        );
        client.cancel().await.unwrap();
    }
    // tool_choice "none": a call is not returned, however often the provider makes one.
    let provider = Scripted::start(vec![Reply::json(
        200,
        &tool_answer("get_weather", "{\"city\": \"Paris\"}"),
    )])
    .await;
    let client =
        connect_with_env(Host::text("unused"), Era::Legacy, &env(&provider.url, &[])).await;
    let e = err_text(&client, "chat_complete", ask("none")).await;
    assert!(e.contains("tool_choice is \"none\""), "{e}");
    client.cancel().await.unwrap();
}
