//! Hostile input over the real binary, on both eras: schemas that would stall validation,
//! regular expressions that would eat memory, lines over the limit, malformed JSON-RPC,
//! notifications first, duplicate ids, the cap on calls in flight, and shutdown.

use crate::common::raw::{Raw, tools_call};
use crate::common::*;
use serde_json::{Map, Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// 2.7 KB whose references double at each of forty levels.
fn reference_bomb() -> Value {
    let mut defs = Map::new();
    for i in 0..40 {
        let next = format!("#/$defs/L{}", i + 1);
        defs.insert(
            format!("L{i}"),
            json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert("L40".into(), json!({"type": "string"}));
    json!({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/L0"}}})
}

fn pattern_flood() -> Value {
    let mut props = Map::new();
    for i in 0..40 {
        props.insert(
            format!("p{i}"),
            json!({"type": "string", "pattern": "\\p{L}{200}"}),
        );
    }
    json!({"type": "object", "properties": props})
}

#[tokio::test]
async fn schema_bombs_are_refused_at_once_wherever_a_schema_goes() {
    for era in ERAS {
        let host = Host::text("{}").with_tools();
        let client = connect(host.clone(), era).await;
        let bomb = reference_bomb();
        let flood = pattern_flood();
        let msgs = json!([user("x")]);
        for (args, tool, want) in [
            (
                json!({"messages": msgs, "output_schema": bomb}),
                "chat_complete",
                "expand to more than",
            ),
            (
                json!({"messages": msgs, "response_format": {"type": "json_schema",
                "json_schema": {"schema": bomb}}}),
                "chat_complete",
                "expand to more than",
            ),
            (
                json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": bomb}}}),
                "responses_create",
                "expand to more than",
            ),
            (
                json!({"prompt": "x", "persona": {"name": "p", "input_schema": bomb}}),
                "generate",
                "expand to more than",
            ),
            (
                json!({"messages": msgs, "tools": [{"name": "t", "input_schema": bomb}]}),
                "messages_create",
                "expand to more than",
            ),
            (
                json!({"messages": msgs, "output_schema": flood}),
                "chat_complete",
                "cannot be compiled",
            ),
        ] {
            let e = crate::common::before(T, tool, err_text(&client, tool, args)).await;
            assert!(e.contains(want), "{tool}: {e}");
        }
        // The server still answers, and nothing reached the host.
        assert!(!client.list_all_tools().await.unwrap().is_empty());
        assert!(host.seen().is_empty());
        client.cancel().await.unwrap();
    }
}

fn modern_call(id: Value, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}},
        "name": "generate", "arguments": arguments}})
}

#[test]
fn every_request_gets_one_well_formed_reply_and_notifications_none() {
    // 2026-07-28: no handshake, and a notification may come first.
    let mut raw = Raw::spawn(&[
        ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "100000"),
        ("AGENT_AS_MODEL_MAX_MEDIA_BYTES", "100000"),
    ]);
    raw.send_line(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
    );
    raw.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    for bad in [
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":\"\\ud800\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":",
        &format!("{}1{}", "[".repeat(300), "]".repeat(300)),
    ] {
        raw.send_line(bad);
        let r = raw.recv(T).expect("a parse error reply");
        assert_eq!(r["error"]["code"], -32700, "{bad}: {r}");
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["jsonrpc"], "2.0");
    }
    // An oversized line is answered with its id, without being read.
    let huge = modern_call(json!("big"), json!({"prompt": "x".repeat(2_000_000)}));
    raw.send(&huge);
    let r = raw
        .recv_id(&json!("big"), T)
        .expect("the oversized line is answered");
    assert_eq!(r["error"]["code"], -32600);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than"),
        "{r}"
    );
    // tools/call with a bad name or arguments is -32602.
    raw.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": 5}}));
    assert_eq!(raw.recv_id(&json!(7), T).unwrap()["error"]["code"], -32602);
    raw.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                     "params": {"name": "generate", "arguments": [1]}}));
    assert_eq!(raw.recv_id(&json!(8), T).unwrap()["error"]["code"], -32602);
    // A malformed notification is not answered; the next request is.
    raw.send_line(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":5}}"#);
    raw.send(&modern_call(json!(9), json!({"prompt": "hi"})));
    let r = raw.recv(T).expect("a reply");
    assert_eq!(r["id"], 9, "the notification got no reply: {r}");
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    assert!(raw.alive());
}

#[test]
fn a_duplicate_id_in_flight_is_refused_and_the_cap_says_retry() {
    let mut raw = Raw::legacy(
        &[("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", "1")],
        json!({"sampling": {}}),
    );
    raw.send(&tools_call(json!(1), "generate", json!({"prompt": "hi"})));
    let sampling = raw
        .recv_request("sampling/createMessage", T)
        .expect("asked the host");
    raw.send(&tools_call(
        json!(1),
        "generate",
        json!({"prompt": "again"}),
    ));
    let dup = raw.recv_id(&json!(1), T).expect("the duplicate is refused");
    assert_eq!(dup["error"]["code"], -32600, "{dup}");
    assert!(
        dup["error"]["message"]
            .as_str()
            .unwrap()
            .contains("still in flight")
    );
    raw.send(&tools_call(json!(2), "generate", json!({"prompt": "more"})));
    let busy = raw.recv_id(&json!(2), T).expect("over the cap");
    assert_eq!(busy["error"]["code"], -32000);
    assert!(
        busy["error"]["message"].as_str().unwrap().contains("retry"),
        "{busy}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": sampling["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "done"}, "model": "m"}}));
    let r = raw.recv_id(&json!(1), T).expect("the first call completes");
    assert_eq!(r["result"]["content"][0]["text"], "done");
    // Its id is free again, and so is the slot.
    raw.send(&tools_call(json!(1), "generate", json!({"prompt": "next"})));
    assert!(raw.recv_request("sampling/createMessage", T).is_some());
}

#[test]
fn closing_stdin_with_calls_in_flight_exits_within_a_second() {
    let mut raw = Raw::legacy(&[], json!({"sampling": {}}));
    raw.send(&tools_call(json!(1), "generate", json!({"prompt": "hi"})));
    assert!(raw.recv_request("sampling/createMessage", T).is_some());
    raw.close_stdin();
    // Before the test's deadline of 3 s: a generous bound that the old five-second wait broke.
    let status = raw
        .wait_exit(Duration::from_secs(3))
        .expect("the process exits within 3 s");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn what_the_host_sends_back_is_checked() {
    use rmcp::model::{
        CreateMessageResult, ImageContent, SamplingMessage, SamplingMessageContentBlock,
    };
    for era in ERAS {
        for (label, answer, want) in [
            (
                "bad base64",
                SamplingMessage::new(
                    rmcp::model::Role::Assistant,
                    SamplingMessageContentBlock::Image(ImageContent::new("%%%", "image/png")),
                ),
                "not valid base64",
            ),
            (
                "unknown type",
                SamplingMessage::new(
                    rmcp::model::Role::Assistant,
                    SamplingMessageContentBlock::Image(ImageContent::new("AAAA", "image/tiff")),
                ),
                "unsupported media type",
            ),
            (
                "user role",
                SamplingMessage::user_text("I am the user"),
                "role",
            ),
        ] {
            let answer = answer.clone();
            let host = Host::new(false, move |_| {
                Ok(CreateMessageResult::new(answer.clone(), "m".into()))
            });
            let client = connect(host, era).await;
            let e = err_text(&client, "generate", json!({"prompt": "draw"})).await;
            assert!(e.contains(want), "{label}: {e}");
            client.cancel().await.unwrap();
        }
    }
}

#[test]
fn an_oversized_host_answer_fails_its_call_at_once() {
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "100000"),
            ("AGENT_AS_MODEL_MAX_MEDIA_BYTES", "100000"),
        ],
        json!({"sampling": {}}),
    );
    raw.send(&tools_call(json!(1), "generate", json!({"prompt": "hi"})));
    let sampling = raw
        .recv_request("sampling/createMessage", T)
        .expect("asked the host");
    raw.send(
        &json!({"jsonrpc": "2.0", "id": sampling["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "x".repeat(3_000_000)}, "model": "m"}}),
    );
    // The call ends before the test's deadline T.
    let r = raw.recv_id(&json!(1), T).expect("the call ends");
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("longer than"), "{text}");
    assert!(raw.alive());
}

#[tokio::test]
async fn numbers_out_of_range_and_formats_are_named() {
    for era in ERAS {
        let host = Host::new(false, |p| {
            Ok(reply(if p.messages.len() == 1 {
                "{\"when\": \"30/11/2026\"}"
            } else {
                "{\"when\": \"2026-11-30\"}"
            }))
        });
        let client = connect(host.clone(), era).await;
        for (tool, args, field) in [
            (
                "generate",
                json!({"prompt": "x", "temperature": 1e300}),
                "`temperature`",
            ),
            (
                "chat_complete",
                json!({"messages": [user("x")], "temperature": -1}),
                "`temperature`",
            ),
            (
                "generate_content",
                json!({"contents": [{"parts": [{"text": "x"}]}],
                "generationConfig": {"temperature": 9}}),
                "`generationConfig.temperature`",
            ),
        ] {
            let e = err_text(&client, tool, args).await;
            assert!(e.contains(field) && e.contains("from 0 to 2"), "{e}");
        }
        assert!(host.seen().is_empty());
        // `format: date` is a promise: the first answer breaks it and is repaired.
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("When?")],
            "output_schema": {"type": "object", "required": ["when"],
                "properties": {"when": {"type": "string", "format": "date"}}}}),
        )
        .await;
        assert_eq!(text(&r), "{\"when\": \"2026-11-30\"}");
        assert!(
            last_text(&host.seen()[1]).contains("date"),
            "the repair names the format"
        );
        client.cancel().await.unwrap();
    }
}

#[test]
fn logged_and_echoed_client_values_are_cut_short() {
    let mut raw = Raw::spawn(&[("RUST_LOG", "debug")]);
    let name = "n".repeat(1_000_000);
    raw.send(&modern_call(json!(1), json!({"prompt": "x"})));
    assert!(raw.recv_id(&json!(1), T).is_some());
    let mut params = modern_call(json!(2), json!({}));
    params["params"]["name"] = json!(name);
    raw.send(&params);
    let r = raw.recv_id(&json!(2), T).expect("answered");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.len() < 1000, "{} bytes", message.len());
    raw.close_stdin();
    let _ = raw.wait_exit(T);
    let stderr = raw.stderr();
    assert!(
        stderr.contains("DEBUG") || stderr.contains("debug"),
        "logs were captured"
    );
    assert!(
        !stderr.contains(&"n".repeat(10_000)),
        "no log line carries the name: {} bytes of logs",
        stderr.len()
    );
}

#[tokio::test]
async fn a_repair_after_a_huge_invalid_answer_keeps_a_state_the_server_accepts() {
    for era in ERAS {
        let host = Host::new(false, |p| {
            Ok(reply(&if p.messages.len() == 1 {
                // The violation message quotes the value: 1.8 MB of it (under the text limit).
                format!(
                    "{{\"city\": \"P\", \"pop\": \"{}\"}}",
                    "é".repeat(900 * 1024)
                )
            } else {
                "{\"city\": \"Paris\", \"pop\": 1}".to_owned()
            }))
        });
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "output_schema": {"type": "object",
                "required": ["city", "pop"], "properties": {"pop": {"type": "integer"}}}}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(structured(&r)["structured_output"]["attempts"], 2);
        // What went back to the host for repair is the answer's head, marked as cut.
        let echoed = host.seen()[1].messages[1]
            .content
            .first()
            .unwrap()
            .as_text()
            .unwrap()
            .text
            .clone();
        assert!(
            echoed.len() <= 4096 + 20 && echoed.ends_with("[truncated]"),
            "{}",
            echoed.len()
        );
        client.cancel().await.unwrap();
    }
}

#[test]
fn a_call_answered_right_before_stdin_closes_is_still_written() {
    let mut raw = Raw::spawn(&[]);
    raw.send(&modern_call(
        json!(1),
        json!({"prompt": "x", "temperature": 5}),
    ));
    raw.close_stdin();
    let r = raw
        .recv_id(&json!(1), T)
        .expect("the reply is flushed before exit");
    assert_eq!(r["result"]["isError"], true);
    assert!(raw.wait_exit(T).is_some_and(|s| s.success()));
}

#[test]
fn temperature_reaches_the_host_as_given_on_both_eras() {
    let mut legacy = Raw::legacy(&[], json!({"sampling": {}}));
    legacy.send(&tools_call(
        json!(1),
        "generate",
        json!({"prompt": "hi", "temperature": 0.7}),
    ));
    let request = legacy
        .recv_request("sampling/createMessage", T)
        .expect("asked the host");
    assert_eq!(
        request["params"]["temperature"].as_f64(),
        Some(0.7),
        "{request}"
    );
    let mut modern = Raw::spawn(&[]);
    modern.send(&modern_call(
        json!(1),
        json!({"prompt": "hi", "temperature": 0.7, "top_p": 0.9}),
    ));
    let r = modern.recv_id(&json!(1), T).expect("input required");
    let params = &r["result"]["inputRequests"]["sample"]["params"];
    assert_eq!(params["temperature"].as_f64(), Some(0.7), "{r}");
    assert_eq!(params["metadata"]["top_p"].as_f64(), Some(0.9), "{r}");
}

#[test]
fn a_cancelled_call_frees_its_slot() {
    let mut raw = Raw::legacy(
        &[("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", "1")],
        json!({"sampling": {}}),
    );
    raw.send(&tools_call(json!(1), "generate", json!({"prompt": "hi"})));
    assert!(raw.recv_request("sampling/createMessage", T).is_some());
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 1, "reason": "changed my mind"}}),
    );
    let told = raw.recv_matching(T, &mut Vec::new(), |v| {
        v["method"] == "notifications/cancelled"
    });
    assert!(told.is_some(), "the host is told");
    raw.send(&tools_call(
        json!(2),
        "generate",
        json!({"prompt": "again"}),
    ));
    let next = raw
        .recv_request("sampling/createMessage", T)
        .expect("the slot is free");
    assert!(next.to_string().contains("again"));
}

#[tokio::test]
async fn an_answer_too_large_to_validate_against_its_schema_is_refused_promptly() {
    // Twelve levels of doubling pass the expansion check; a 100,000-element answer against
    // them would take minutes to validate.
    let mut defs = Map::new();
    for i in 0..12 {
        let next = format!("#/$defs/L{}", i + 1);
        defs.insert(
            format!("L{i}"),
            json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert("L12".into(), json!({}));
    let schema = json!({"type": "object", "$defs": defs,
        "properties": {"x": {"type": "array", "items": {"$ref": "#/$defs/L0"}}}});
    let answer = json!({"x": vec![0; 100_000]}).to_string();
    for era in ERAS {
        let answer = answer.clone();
        let host = Host::new(false, move |_| Ok(reply(&answer)));
        let client = connect(host, era).await;
        let e = crate::common::before(
            T,
            "a schema too large to validate",
            err_text(
                &client,
                "chat_complete",
                json!({"messages": [user("x")], "output_schema": schema, "max_retries": 0}),
            ),
        )
        .await;
        assert!(e.contains("too large to validate"), "{e}");
        client.cancel().await.unwrap();
    }
}
