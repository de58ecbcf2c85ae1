//! The two protocol eras on the wire (contract A3, A7): MRTR rounds and sealed state on
//! 2026-07-28, capability errors on both, host faults, concurrency.

use crate::common::*;
use rmcp::model::{
    CallToolResponse, CreateMessageResult, ErrorData, ImageContent, InputRequest, InputResponses,
    SamplingMessage, SamplingMessageContentBlock,
};
use serde_json::{Value, json};
use std::time::Duration;

fn generate(prompt: &str) -> rmcp::model::CallToolRequestParams {
    params(
        "generate",
        json!({"prompt": prompt, "max_tokens": 77, "model": "m-hint"}),
    )
}

fn sample_response(text: &str) -> InputResponses {
    let mut r = InputResponses::new();
    r.insert("sample".into(), serde_json::to_value(reply(text)).unwrap());
    r
}

#[tokio::test]
async fn modern_round_one_carries_the_sampling_request_and_round_two_completes() {
    let host = Host::text("unused");
    let client = connect(host.clone(), Era::Modern).await;
    let CallToolResponse::InputRequired(ir) = client.call_tool_once(generate("hi")).await.unwrap()
    else {
        panic!("round one must be an InputRequiredResult");
    };
    let wire = serde_json::to_value(&ir).unwrap();
    assert_eq!(wire["resultType"], "input_required");
    let req = &wire["inputRequests"]["sample"];
    assert_eq!(req["method"], "sampling/createMessage");
    assert_eq!(req["params"]["maxTokens"], 77);
    assert_eq!(
        req["params"]["modelPreferences"]["hints"],
        json!([{"name": "m-hint"}])
    );
    assert_eq!(
        req["params"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "hi"}}])
    );
    let state = ir.request_state.clone().expect("a sealed requestState");
    assert!(
        state.starts_with("rs1.") || state.starts_with("rs2."),
        "{state}"
    );
    assert!(matches!(
        ir.input_requests.as_ref().unwrap()["sample"],
        InputRequest::CreateMessage(_)
    ));

    let done = client
        .call_tool_once(
            generate("hi")
                .with_input_responses(sample_response("round two answer"))
                .with_request_state(state),
        )
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("round two completes")
    };
    assert_eq!(text(&result), "round two answer");
    assert_eq!(structured(&result)["result"], json!("round two answer"));
    assert_eq!(structured(&result)["host_model"], json!("host-model"));
    assert!(
        host.seen().is_empty(),
        "the server never sent a request on 2026-07-28"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn sealed_state_rejects_tampering_replay_and_absence() {
    let client = connect(Host::text("x"), Era::Modern).await;
    let CallToolResponse::InputRequired(ir) = client.call_tool_once(generate("hi")).await.unwrap()
    else {
        panic!()
    };
    let state = ir.request_state.unwrap();
    let mut tampered = state.clone();
    tampered.insert(10, 'A');
    let cases = [
        (
            "tampered",
            generate("hi")
                .with_request_state(tampered)
                .with_input_responses(sample_response("x")),
        ),
        (
            "other arguments",
            generate("bye")
                .with_request_state(state.clone())
                .with_input_responses(sample_response("x")),
        ),
        (
            "other tool",
            params("chat_complete", json!({"messages": [user("hi")]}))
                .with_request_state(state.clone())
                .with_input_responses(sample_response("x")),
        ),
        (
            "missing",
            generate("hi").with_input_responses(sample_response("x")),
        ),
        (
            "garbage",
            generate("hi")
                .with_request_state("not-a-state")
                .with_input_responses(sample_response("x")),
        ),
    ];
    for (label, p) in cases {
        let e = client.call_tool_once(p).await.expect_err(label);
        assert_eq!(rpc_code(&e), -32602, "{label}: {e}");
        assert!(e.to_string().contains("requestState"), "{label}: {e}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_retry_without_the_sample_answer_is_asked_again() {
    let client = connect(Host::text("x"), Era::Modern).await;
    let CallToolResponse::InputRequired(ir) = client.call_tool_once(generate("hi")).await.unwrap()
    else {
        panic!()
    };
    let mut other = InputResponses::new();
    other.insert("unrelated".into(), json!({"x": 1}));
    let again = client
        .call_tool_once(
            generate("hi")
                .with_input_responses(other)
                .with_request_state(ir.request_state.unwrap()),
        )
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir2) = again else {
        panic!("asked again, not an error")
    };
    assert!(ir2.input_requests.unwrap().contains_key("sample"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_without_sampling_gets_32021_on_both_eras() {
    for era in ERAS {
        let host = Host::text("x").without_sampling();
        let client = connect(host, era).await;
        let e = try_call(&client, "chat_complete", json!({"messages": [user("hi")]}))
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32021, "{era:?}");
        let rmcp::ServiceError::McpError(data) = &e else {
            unreachable!()
        };
        assert_eq!(
            data.data.as_ref().unwrap()["requiredCapabilities"],
            json!({"sampling": {}})
        );
        assert!(
            data.message.contains("Configure Model Access"),
            "says what to do: {}",
            data.message
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn bad_inputs_responses_end_the_call_with_a_named_error() {
    let client = connect(Host::text("x"), Era::Modern).await;
    let bad = [
        (Value::Null, "null"),
        (json!({"hello": "world"}), "not a CreateMessageResult"),
        (json!("just a string"), "not a CreateMessageResult"),
    ];
    for (value, want) in bad {
        let CallToolResponse::InputRequired(ir) =
            client.call_tool_once(generate("hi")).await.unwrap()
        else {
            panic!()
        };
        let mut r = InputResponses::new();
        r.insert("sample".into(), value);
        let done = client
            .call_tool_once(
                generate("hi")
                    .with_input_responses(r)
                    .with_request_state(ir.request_state.unwrap()),
            )
            .await
            .unwrap();
        let CallToolResponse::Complete(result) = done else {
            panic!()
        };
        assert!(is_error(&result));
        assert!(text(&result).contains(want), "{}", text(&result));
    }
    client.cancel().await.unwrap();
}

fn image_answer() -> CreateMessageResult {
    let image = ImageContent::new("AAAA", "image/png");
    CreateMessageResult::new(
        SamplingMessage::new(
            rmcp::model::Role::Assistant,
            SamplingMessageContentBlock::Image(image),
        ),
        "host-model".into(),
    )
}

#[tokio::test]
async fn host_errors_end_only_that_call_and_media_answers_come_back() {
    for era in ERAS {
        let host = Host::new(false, |p| match last_text(p).as_str() {
            "fail" => Err(ErrorData::internal_error("model overloaded", None)),
            "image" => Ok(image_answer()),
            other => Ok(reply(&format!("fine: {other}"))),
        });
        let client = connect(host, era).await;
        if era == Era::Legacy {
            // On 2026-07-28 a failing host simply never retries; on legacy the error comes back.
            let e = err_text(&client, "generate", json!({"prompt": "fail"})).await;
            assert!(
                e.contains("model overloaded") && e.contains("-32603"),
                "{e}"
            );
        }
        // An image answer comes back as image content beside the (empty) text.
        let r = call(&client, "generate", json!({"prompt": "image"})).await;
        assert!(!is_error(&r));
        let image = r
            .content
            .get(1)
            .and_then(|c| c.as_image())
            .expect("an image block");
        assert_eq!(
            (image.data.as_str(), image.mime_type.as_str()),
            ("AAAA", "image/png")
        );
        assert_eq!(
            ok_text(&client, "generate", json!({"prompt": "after"})).await,
            "fine: after"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_silent_host_times_out_and_the_server_stays_up() {
    let host = Host::slow(false, |p| {
        Box::pin(async move {
            if last_text(&p) == "hang" {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Ok(reply("awake"))
        })
    });
    let client = connect_with_env(
        host,
        Era::Legacy,
        &[("AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS", "1")],
    )
    .await;
    let e = err_text(&client, "generate", json!({"prompt": "hang"})).await;
    assert!(
        e.contains("did not answer") && e.contains("within 1 s"),
        "{e}"
    );
    assert_eq!(
        ok_text(&client, "generate", json!({"prompt": "next"})).await,
        "awake"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn fifty_concurrent_calls_each_get_their_own_answer() {
    for era in ERAS {
        let host = Host::slow(false, |p| {
            Box::pin(async move {
                let t = last_text(&p);
                let n: u64 = t.trim_start_matches("call ").parse().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis((n * 7919) % 50)).await;
                Ok(reply(&format!("answer to {t}")))
            })
        });
        let client = std::sync::Arc::new(connect(host.clone(), era).await);
        let mut tasks = Vec::new();
        for i in 0..50 {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let args = json!({"messages": [user(&format!("call {i}"))]});
                (i, ok_text(&client, "chat_complete", args).await)
            }));
        }
        for t in tasks {
            let (i, out) = t.await.unwrap();
            assert_eq!(out, format!("answer to call {i}"), "{era:?}");
        }
        assert_eq!(host.seen().len(), 50);
    }
}

#[tokio::test]
async fn a_thousand_concurrent_calls_with_mixed_outcomes() {
    for era in ERAS {
        let host = Host::slow(false, |p| {
            Box::pin(async move {
                let t = last_text(&p);
                let n: u64 = t
                    .rsplit(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis((n * 7919) % 20)).await;
                if t.starts_with("bad-host") {
                    return Ok(CreateMessageResult::new(
                        SamplingMessage::assistant_tool_use("t", "f", serde_json::Map::new()),
                        "host-model".into(),
                    ));
                }
                Ok(reply(&format!("answer to {t}")))
            })
        });
        let client = std::sync::Arc::new(connect(host.clone(), era).await);
        let mut tasks = Vec::new();
        for i in 0..1000u64 {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let args = match i % 10 {
                    3 => json!({"messages": [{"role": "robot", "content": format!("call {i}")}]}),
                    7 => json!({"messages": [user(&format!("bad-host {i}"))]}),
                    _ => json!({"messages": [user(&format!("call {i}"))]}),
                };
                (i, call(&client, "chat_complete", args).await)
            }));
        }
        for t in tasks {
            let (i, r) = t.await.unwrap();
            match i % 10 {
                3 => assert!(
                    is_error(&r) && text(&r).contains("`messages[0].role`"),
                    "{i}: {}",
                    text(&r)
                ),
                7 => assert!(
                    is_error(&r) && text(&r).contains("no tools were offered"),
                    "{i}: {}",
                    text(&r)
                ),
                _ => assert_eq!(text(&r), format!("answer to call {i}"), "{era:?} {i}"),
            }
        }
        assert_eq!(
            host.seen().len(),
            900,
            "{era:?}: bad arguments never reach the host"
        );
    }
}
