//! Protocol edges over stdio: notifications before the lifecycle begins, input that ends
//! before (or during) a session, and every part of a host's answer in the Gemini response.

use crate::common::raw::{Raw, tools_call};
use crate::common::*;
use rmcp::model::{
    CreateMessageResult, ImageContent, SamplingMessage, SamplingMessageContentBlock,
};
use serde_json::json;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn modern_meta() -> serde_json::Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {},
           "io.modelcontextprotocol/clientInfo": {"name": "edges", "version": "0"}})
}

#[test]
fn a_notification_after_discover_is_ignored() {
    let mut raw = Raw::spawn(&[]);
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover",
                     "params": {"_meta": modern_meta()}}),
    );
    assert!(raw.recv_id(&json!(0), Duration::from_secs(10)).is_some());
    raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 0}}),
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                     "params": {"_meta": modern_meta()}}));
    let listed = raw
        .recv_id(&json!(1), Duration::from_secs(10))
        .unwrap_or_else(|| panic!("tools/list answered; stderr: {}", raw.stderr()));
    assert!(listed["result"]["tools"].as_array().unwrap().len() >= 6);
    assert!(raw.alive());
}

/// Runs the binary with `input` on stdin (then end of input); its stdout, or `None` if it had
/// not exited after 5 s.
fn run_with_input(input: &str) -> Option<String> {
    let mut child = crate::common::server::Server::new()
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let started = Instant::now();
    let child = Killed(child);
    let mut killed = child;
    while started.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = killed.0.try_wait() {
            let mut out = String::new();
            std::io::Read::read_to_string(killed.0.stdout.as_mut().unwrap(), &mut out).unwrap();
            return Some(out);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn end_of_input_ends_the_server_whatever_came_before() {
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let discover = json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover",
                          "params": {"_meta": modern_meta()}})
    .to_string();
    let initialize = json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "edges", "version": "0"}}})
    .to_string();
    for (input, answers) in [
        (String::new(), None),
        (format!("{ping}\n"), Some("\"id\":1")),
        (format!("{discover}\n"), Some("\"id\":2")),
        (format!("{initialize}\n"), Some("\"id\":3")),
    ] {
        let out = run_with_input(&input)
            .unwrap_or_else(|| panic!("the server did not exit after input {input:?}"));
        if let Some(id) = answers {
            assert!(
                out.contains(id),
                "{input:?} was answered before exit: {out}"
            );
        }
    }
}

#[test]
fn closing_stdin_with_calls_waiting_on_the_host_exits_within_a_second() {
    let mut raw = Raw::legacy(&[], json!({"sampling": {}}));
    for id in 1..=3 {
        raw.send(&tools_call(
            json!(id),
            "generate",
            json!({"prompt": "wait"}),
        ));
    }
    for _ in 1..=3 {
        assert!(
            raw.recv_request("sampling/createMessage", Duration::from_secs(10))
                .is_some()
        );
    }
    raw.close_stdin();
    // It exits before the test's deadline of a second.
    let status = raw.wait_exit(Duration::from_secs(1));
    assert!(status.is_some(), "the server did not exit within a second");
}

#[tokio::test]
async fn a_gemini_response_holds_every_part_of_the_answer() {
    for era in ERAS {
        let host = Host::new(false, |_| {
            let mut answer = CreateMessageResult::new(
                SamplingMessage::new(
                    rmcp::model::Role::Assistant,
                    SamplingMessageContentBlock::Image(ImageContent::new("AAAA", "image/png")),
                ),
                "host-model".into(),
            );
            answer.message.content = vec![
                SamplingMessageContentBlock::text("Here it is."),
                SamplingMessageContentBlock::Image(ImageContent::new("AAAA", "image/png")),
            ]
            .into();
            Ok(answer)
        });
        let client = connect(host, era).await;
        let r = call(
            &client,
            "generate_content",
            json!({"contents": [{"parts": [{"text": "Draw a dot."}]}]}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(r.content.iter().any(|c| c.as_image().is_some()));
        let parts = &structured(&r)["candidates"][0]["content"]["parts"];
        assert_eq!(parts[0]["text"], "Here it is.", "{parts}");
        assert_eq!(
            parts[1]["inlineData"],
            json!({"mimeType": "image/png", "data": "AAAA"}),
            "{parts}"
        );
        client.cancel().await.unwrap();
    }
}
