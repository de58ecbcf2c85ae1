//! The provider backend against a scripted OpenAI-compatible server: what is forwarded, what
//! comes back, and every fault (429 with Retry-After, 5xx, timeouts, bad JSON, the key).

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::*;
use serde_json::{Value, json};

const KEY: &str = "sk-test-secret-key-0123456789";

fn env<'a>(url: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("AGENT_AS_MODEL_BACKEND", "provider"),
        ("AGENT_AS_MODEL_PROVIDER_URL", url),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "gpt-test"),
        ("AGENT_AS_MODEL_PROVIDER_KEY", KEY),
        ("AGENT_AS_MODEL_PROVIDER_RETRIES", "2"),
    ];
    env.extend_from_slice(extra);
    env
}

#[tokio::test]
async fn every_parameter_is_forwarded_and_usage_is_real_on_both_eras() {
    for era in ERAS {
        let server = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
        let host = Host::text("the host must not be asked");
        let client = connect_with_env(host.clone(), era, &env(&server.url, &[])).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [{"role": "system", "content": "Be brief."}, user("Capital of France?")],
                   "temperature": 0.25, "top_p": 0.5, "seed": 42, "stop": ["\n\n"], "max_tokens": 33}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(host.seen().is_empty(), "the host was not sampled");
        let s = structured(&r);
        assert_eq!(s["backend"], "provider");
        assert_eq!(text(&r), "Paris.");
        let body = &s["chat_completion"];
        assert_eq!(body["choices"][0]["message"]["content"], "Paris.");
        assert_eq!(body["model"], "scripted-model");
        assert_eq!(
            body["usage"],
            json!({"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15, "estimated": false})
        );
        assert_conforms(&client, "chat_complete", &r).await;
        let seen = server.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/v1/chat/completions");
        assert_eq!(
            seen[0].header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
        let sent = &seen[0].body;
        assert_eq!(sent["model"], "gpt-test");
        assert_eq!(
            sent["messages"],
            json!([{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Capital of France?"}])
        );
        assert_eq!(
            (
                &sent["temperature"],
                &sent["top_p"],
                &sent["seed"],
                &sent["stop"],
                &sent["max_tokens"]
            ),
            (
                &json!(0.25),
                &json!(0.5),
                &json!(42),
                &json!(["\n\n"]),
                &json!(33)
            )
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tools_and_schemas_go_natively_or_by_prompt_as_configured() {
    let call_answer = json!({"model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}}]});
    let server = Scripted::start(vec![
        Reply::json(200, &call_answer),
        Reply::json(200, &completion("{\"city\": \"Paris\"}")),
    ])
    .await;
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &[])).await;
    let tools = json!([{"name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]);
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Weather in Paris?")], "tools": tools, "tool_choice": "required"}),
    )
    .await;
    let body = &structured(&r)["chat_completion"];
    let tool_call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(tool_call["id"], "call_9");
    assert_eq!(tool_call["function"]["arguments"], "{\"city\": \"Paris\"}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let schema =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Which city?")], "output_schema": schema}),
    )
    .await;
    assert_eq!(structured(&r)["structured_output"]["via"], "native");
    let seen = server.seen();
    assert_eq!(seen[0].body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(seen[0].body["tool_choice"], "required");
    assert_eq!(
        seen[1].body["response_format"]["json_schema"]["schema"],
        schema
    );
    client.cancel().await.unwrap();

    // Configured off: the schema travels as the structured tool, or without tools either, in
    // the prompt.
    let call_answer = json!({"model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "structured_output", "arguments": "{\"city\": \"Rome\"}"}}]}}]});
    let server = Scripted::start(vec![Reply::json(200, &call_answer)]).await;
    let extra = [("AGENT_AS_MODEL_PROVIDER_JSON_SCHEMA", "false")];
    let client = connect_with_env(Host::echo(), Era::Modern, &env(&server.url, &extra)).await;
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Which city?")], "output_schema": schema}),
    )
    .await;
    assert_eq!(structured(&r)["structured_output"]["via"], "tool");
    assert_eq!(text(&r), "{\"city\": \"Rome\"}");
    assert_eq!(server.seen()[0].body["tool_choice"], "required");
    client.cancel().await.unwrap();

    let server = Scripted::start(vec![Reply::json(200, &completion("{\"city\": \"Oslo\"}"))]).await;
    let extra = [
        ("AGENT_AS_MODEL_PROVIDER_JSON_SCHEMA", "false"),
        ("AGENT_AS_MODEL_PROVIDER_TOOLS", "false"),
    ];
    let client = connect_with_env(Host::echo(), Era::Modern, &env(&server.url, &extra)).await;
    let r = call(
        &client,
        "chat_complete",
        json!({"messages": [user("Which city?")], "output_schema": schema}),
    )
    .await;
    assert_eq!(structured(&r)["structured_output"]["via"], "prompt");
    let sent = &server.seen()[0].body;
    assert!(sent.get("response_format").is_none() && sent.get("tools").is_none());
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("JSON Schema")
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_time_the_provider_asks() {
    use std::time::Duration;
    // The provider asks for 2 s, four times the first backoff the server would take unasked.
    let limited = Reply::Answer(
        429,
        vec![("Retry-After".into(), "2".into())],
        json!({"error": {"message": "slow down"}}).to_string(),
    );
    let server = Scripted::start(vec![limited, Reply::json(200, &completion("ok"))]).await;
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &[])).await;
    // The order of events: the 429, then the test's marker 1 s later, then the retry. A
    // server that did not wait as asked would retry before the marker.
    let marker = async {
        crate::common::before(Duration::from_secs(30), "the first request", async {
            while server.seen().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.seen().len()
    };
    let (r, seen_at_marker) =
        tokio::join!(call(&client, "generate", json!({"prompt": "hi"})), marker);
    assert_eq!(
        seen_at_marker, 1,
        "the retry came before the marker: Retry-After was not honoured"
    );
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(text(&r), "ok");
    assert_eq!(server.seen().len(), 2);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_retry_after_date_is_honoured_and_one_too_far_off_fails_at_once() {
    use std::time::{Duration, SystemTime};
    let limited = |at: SystemTime| {
        Reply::Answer(
            429,
            vec![("Retry-After".into(), httpdate::fmt_http_date(at))],
            json!({"error": {"message": "slow down"}}).to_string(),
        )
    };
    // A date already past asks for no wait: retried at once, and answered.
    let server = Scripted::start(vec![
        limited(SystemTime::UNIX_EPOCH),
        Reply::json(200, &completion("ok")),
    ])
    .await;
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &[])).await;
    let r = call(&client, "generate", json!({"prompt": "hi"})).await;
    assert_eq!(text(&r), "ok");
    assert_eq!(server.seen().len(), 2);
    client.cancel().await.unwrap();
    // A date an hour off is a wait longer than the server's: the call fails at once.
    let hour = SystemTime::now() + Duration::from_secs(3600);
    let server = Scripted::start(vec![limited(hour)]).await;
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(
        e.contains("429") && e.contains("asked to retry after 35"),
        "{e}"
    );
    assert!(
        e.contains("longer than this server waits (60 s): slow down"),
        "{e}"
    );
    assert_eq!(server.seen().len(), 1, "not retried");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_without_the_key() {
    let echoing = json!({"error": {"message": format!("upstream broke for key {KEY}")}});
    let server = Scripted::start(vec![Reply::json(503, &echoing)]).await;
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("provider backend failed"), "{e}");
    assert!(e.contains("503") && e.contains("after 3 attempt(s)"), "{e}");
    assert!(e.contains("upstream broke for key [redacted]"), "{e}");
    assert!(!e.contains(KEY), "the key never reaches the caller: {e}");
    assert_eq!(server.seen().len(), 3, "one try and two retries");
    client.cancel().await.unwrap();

    // A client error is not retried.
    let server = Scripted::start(vec![Reply::json(
        401,
        &json!({"error": {"message": "Incorrect API key"}}),
    )])
    .await;
    let client = connect_with_env(Host::echo(), Era::Modern, &env(&server.url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("401") && e.contains("Incorrect API key"), "{e}");
    assert_eq!(server.seen().len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn silence_times_out_and_bad_bodies_are_named() {
    let server = Scripted::start(vec![Reply::Silence]).await;
    let extra = [
        ("AGENT_AS_MODEL_PROVIDER_TIMEOUT_SECS", "1"),
        ("AGENT_AS_MODEL_PROVIDER_RETRIES", "0"),
    ];
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &extra)).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("did not answer within 1 s"), "{e}");
    client.cancel().await.unwrap();

    let server = Scripted::start(vec![
        Reply::Answer(200, Vec::new(), "<html>not json</html>".into()),
        Reply::json(200, &json!({"choices": []})),
    ])
    .await;
    let client = connect_with_env(Host::echo(), Era::Legacy, &env(&server.url, &[])).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("not JSON") && e.contains("<html>"), "{e}");
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("choices[0] is missing"), "{e}");
    client.cancel().await.unwrap();

    // Nothing listening at all.
    let client = connect_with_env(
        Host::echo(),
        Era::Legacy,
        &env(
            "http://127.0.0.1:9/v1",
            &[("AGENT_AS_MODEL_PROVIDER_RETRIES", "0")],
        ),
    )
    .await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("could not be reached"), "{e}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_host_that_cannot_sample_falls_back_to_the_provider_only_when_asked() {
    let server = Scripted::start(vec![Reply::json(200, &completion("from the provider"))]).await;
    for era in ERAS {
        let mut with = env(&server.url, &[("AGENT_AS_MODEL_FALLBACK", "provider")]);
        with.retain(|(k, _)| *k != "AGENT_AS_MODEL_BACKEND");
        let client = connect_with_env(Host::echo().without_sampling(), era, &with).await;
        let r = call(&client, "generate", json!({"prompt": "hi"})).await;
        assert_eq!(text(&r), "from the provider");
        assert_eq!(structured(&r)["backend"], "provider");
        let models = call(&client, "list_models", json!({})).await;
        let listed: Value = serde_json::from_str(&text(&models)).unwrap();
        assert_eq!(listed[0]["owned_by"], "host-agent");
        assert_eq!(listed[1]["backend"], "provider");
        assert_eq!(listed[1]["role"], "fallback");
        client.cancel().await.unwrap();

        // A host that samples is still asked.
        let host = Host::text("from the host");
        let client = connect_with_env(host.clone(), era, &with).await;
        let r = call(&client, "generate", json!({"prompt": "hi"})).await;
        assert_eq!(text(&r), "from the host");
        assert!(structured(&r).get("backend").is_none());
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn without_a_fallback_the_error_says_how_to_turn_one_on() {
    for era in ERAS {
        let client = connect(Host::echo().without_sampling(), era).await;
        let e = try_call(&client, "generate", json!({"prompt": "hi"}))
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32021);
        assert!(e.to_string().contains("--fallback local"), "{e}");
        client.cancel().await.unwrap();
    }
}

#[test]
fn a_provider_without_url_or_model_is_refused_at_startup() {
    let out = crate::common::server::Server::new()
        .command()
        .env("AGENT_AS_MODEL_BACKEND", "provider")
        .env_remove("AGENT_AS_MODEL_PROVIDER_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--provider-url"), "{stderr}");
}

#[tokio::test]
async fn a_providers_bad_answer_is_the_providers_error_not_the_hosts() {
    // A tool call nobody offered: the machine's error names the model and the provider that
    // answered, not a host that was never asked.
    let answer = json!({"model": "scripted-model", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "rm_rf", "arguments": "{}"}}]}}]});
    let server = Scripted::start(vec![Reply::json(200, &answer)]).await;
    for era in ERAS {
        let client = connect_with_env(Host::echo(), era, &env(&server.url, &[])).await;
        let e = err_text(&client, "chat_complete", json!({"messages": [user("hi")]})).await;
        assert!(
            e.contains("provider backend failed: the model answered with tool_use content, but no tools were offered"),
            "{e}"
        );
        assert!(!e.contains("host"), "{e}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tuning_the_provider_cannot_take_is_reported_and_the_stream_warning_names_progress() {
    let server = Scripted::start(vec![Reply::json(200, &completion("Sure."))]).await;
    let client = connect_with_env(Host::echo(), Era::Modern, &env(&server.url, &[])).await;
    let r = call(
        &client,
        "messages_create",
        json!({"messages": [user("hi")], "max_tokens": 20, "top_k": 40, "top_p": 0.75,
               "stream": true}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    let warnings = structured(&r)["warnings"].to_string();
    assert!(warnings.contains("`top_k` was not sent"), "{warnings}");
    assert!(
        warnings.contains("stream: true is emulated") && warnings.contains("progressToken"),
        "{warnings}"
    );
    let sent = &server.seen()[0].body;
    assert_eq!(sent["top_p"], json!(0.75));
    assert!(sent.get("top_k").is_none(), "{sent}");
    assert_conforms(&client, "messages_create", &r).await;
    // A value out of its range is the caller's error, named, and nothing is sent.
    let e = err_text(
        &client,
        "chat_complete",
        json!({"messages": [user("hi")], "top_p": 1.5}),
    )
    .await;
    assert!(e.contains("`top_p`") && e.contains("from 0 to 1"), "{e}");
    assert_eq!(server.seen().len(), 1);
    client.cancel().await.unwrap();
}
