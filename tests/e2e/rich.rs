//! Rich conversations end to end: images and audio in, tool-call round trips in each shape,
//! stop sequences enforced by the server, finish reasons and full response objects.

use crate::common::*;
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, SamplingMessage};
use serde_json::{Value, json};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[tokio::test]
async fn images_and_audio_reach_the_host_in_every_shape() {
    let data_url = format!("data:image/png;base64,{PNG}");
    let cases = [
        (
            "chat_complete",
            json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": data_url}},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}),
        ),
        (
            "messages_create",
            json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}),
        ),
        (
            "responses_create",
            json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": data_url}]}]}),
        ),
    ];
    for era in ERAS {
        let host = Host::text("A pixel.");
        let client = connect(host.clone(), era).await;
        for (tool, args) in &cases {
            let r = call(&client, tool, args.clone()).await;
            assert!(!is_error(&r), "{tool}: {}", text(&r));
        }
        let seen = host.seen_json();
        for (i, p) in seen.iter().enumerate() {
            let content = p["messages"][0]["content"]
                .as_array()
                .expect("several blocks");
            assert_eq!(
                content[0],
                json!({"type": "text", "text": "What is this?"}),
                "{i}"
            );
            assert_eq!(content[1]["type"], "image");
            assert_eq!(content[1]["mimeType"], "image/png");
            assert_eq!(content[1]["data"], PNG);
        }
        assert_eq!(seen[0]["messages"][0]["content"][2]["type"], "audio");
        assert_eq!(
            seen[0]["messages"][0]["content"][2]["mimeType"],
            "audio/wav"
        );
        // Remote URLs are refused with a way out; nothing is fetched or sent.
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}),
        )
        .await;
        assert!(
            e.contains("`messages[0].content[0].image_url.url`") && e.contains("data URL"),
            "{e}"
        );
        let e = err_text(&client, "messages_create", json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "%%%"}}]}]})).await;
        assert!(
            e.contains("`messages[0].content[0].source.data`: is not valid base64"),
            "{e}"
        );
        assert_eq!(host.seen().len(), 3);
        client.cancel().await.unwrap();
    }
}

fn weather() -> Value {
    json!([{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

/// A host that calls get_weather first and answers in text once it has the tool's result.
fn tool_loop_host(tools: bool) -> Host {
    Host::new(tools, |p: &CreateMessageRequestParams| {
        let last = p.messages.last().unwrap();
        let has_result = last.content.iter().any(|b| b.as_tool_result().is_some())
            || last_text(p).contains("result of tool call");
        Ok(if has_result {
            reply("It is 21 degrees in Paris.")
        } else {
            CreateMessageResult::new(
                SamplingMessage::assistant_tool_use(
                    "call_7",
                    "get_weather",
                    json!({"city": "Paris"}).as_object().unwrap().clone(),
                ),
                "host-model".into(),
            )
            .with_stop_reason(CreateMessageResult::STOP_REASON_TOOL_USE)
        })
    })
}

#[tokio::test]
async fn a_two_step_tool_loop_in_each_shape() {
    let steps = [
        (
            "chat_complete",
            json!({"tools": weather(), "messages": [
            user("Weather in Paris?"),
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_7", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": "21C, sunny"}]}),
        ),
        (
            "messages_create",
            json!({"tools": weather(), "messages": [
            user("Weather in Paris?"),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_7", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_7", "content": "21C, sunny"}]}]}),
        ),
        (
            "responses_create",
            json!({"tools": weather(), "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_7", "output": "21C, sunny"}]}),
        ),
    ];
    for era in ERAS {
        let host = tool_loop_host(true);
        let client = connect(host.clone(), era).await;
        // Step one: the model asks for the tool, in each shape's spelling.
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("Weather in Paris?")], "tools": weather()}),
        )
        .await;
        let cc = &structured(&r)["chat_completion"];
        assert_eq!(cc["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            cc["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Paris\"}"
        );
        assert_eq!(cc["choices"][0]["message"]["content"], Value::Null);
        let r = call(
            &client,
            "messages_create",
            json!({"messages": [user("Weather in Paris?")], "tools": weather()}),
        )
        .await;
        assert_eq!(structured(&r)["message"]["stop_reason"], "tool_use");
        assert_eq!(structured(&r)["message"]["content"][0]["type"], "tool_use");
        // Step two: the caller sends the call and its result back; the model answers.
        for (tool, args) in &steps {
            let r = call(&client, tool, args.clone()).await;
            assert!(!is_error(&r), "{tool}: {}", text(&r));
            assert!(text(&r).contains("21 degrees"), "{tool}: {}", text(&r));
            assert_conforms(&client, tool, &r).await;
        }
        for p in &host.seen_json()[2..] {
            let msgs = p["messages"].as_array().unwrap();
            assert_eq!(msgs.len(), 3);
            let call_block = if msgs[1]["content"].is_array() {
                &msgs[1]["content"][0]
            } else {
                &msgs[1]["content"]
            };
            assert_eq!(call_block["type"], "tool_use");
            assert_eq!(call_block["id"], "call_7");
            let result = if msgs[2]["content"].is_array() {
                &msgs[2]["content"][0]
            } else {
                &msgs[2]["content"]
            };
            assert_eq!(result["type"], "tool_result");
            assert_eq!(result["toolUseId"], "call_7");
            assert_eq!(result["content"][0]["text"], "21C, sunny");
        }
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tool_history_travels_as_text_to_a_host_without_tools() {
    let host = tool_loop_host(false);
    let client = connect(host.clone(), Era::Legacy).await;
    let out = ok_text(
        &client,
        "chat_complete",
        json!({"messages": [
        user("Weather in Paris?"),
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_7", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "21C"}]}),
    )
    .await;
    assert!(out.contains("21 degrees"));
    let p = &host.seen_json()[0];
    assert_eq!(p["messages"][1]["content"]["type"], "text");
    assert!(
        p["messages"][1]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("called tool get_weather")
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn broken_tool_sequences_name_the_message() {
    let client = connect(Host::text("never").with_tools(), Era::Legacy).await;
    let e = err_text(&client, "chat_complete", json!({"messages": [
        user("x"),
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        user("forgot the result")]})).await;
    assert!(
        e.contains("`messages[1]`: tool call(s) [\"a\"] are not answered"),
        "{e}"
    );
    let e = err_text(&client, "messages_create", json!({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "tool_result", "tool_use_id": "a", "content": "r"}]}]})).await;
    assert!(
        e.contains("`messages[1].content`: tool_result blocks come first in a user message"),
        "{e}"
    );
    let e = err_text(&client, "chat_complete", json!({"messages": [
        user("x"), {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}]})).await;
    assert!(
        e.contains("`messages[1].tool_calls[0].function.arguments`"),
        "{e}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn stop_sequences_are_forwarded_and_enforced_when_the_host_ignores_them() {
    for era in ERAS {
        let host = Host::text("one, two, three, END, four");
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("count")], "stop": ["END", "xyz"]}),
        )
        .await;
        assert_eq!(text(&r), "one, two, three, ");
        assert_eq!(
            structured(&r)["chat_completion"]["choices"][0]["finish_reason"],
            "stop"
        );
        assert_eq!(host.seen_json()[0]["stopSequences"], json!(["END", "xyz"]));
        let r = call(
            &client,
            "messages_create",
            json!({"messages": [user("count")], "stop_sequences": ["three"]}),
        )
        .await;
        assert_eq!(text(&r), "one, two, ");
        let m = &structured(&r)["message"];
        assert_eq!(
            (m["stop_reason"].as_str(), m["stop_sequence"].as_str()),
            (Some("stop_sequence"), Some("three"))
        );
        let out = ok_text(
            &client,
            "generate",
            json!({"prompt": "count", "stop": "two"}),
        )
        .await;
        assert_eq!(out, "one, ");
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "stop": [""]}),
        )
        .await;
        assert!(e.contains("`stop[0]`: expected a non-empty string"), "{e}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn finish_reasons_and_the_host_model_are_reported_in_each_shape() {
    for era in ERAS {
        let host = Host::new(false, |_| {
            Ok(CreateMessageResult::new(
                SamplingMessage::assistant_text("truncat"),
                "claude-sonnet-x".into(),
            )
            .with_stop_reason(CreateMessageResult::STOP_REASON_END_MAX_TOKEN))
        });
        let client = connect(host, era).await;
        let r = call(&client, "chat_complete", json!({"messages": [user("x")]})).await;
        let cc = &structured(&r)["chat_completion"];
        assert_eq!(cc["choices"][0]["finish_reason"], "length");
        assert_eq!(cc["model"], "claude-sonnet-x");
        assert_eq!(cc["object"], "chat.completion");
        assert_eq!(cc["usage"]["estimated"], true);
        assert_conforms(&client, "chat_complete", &r).await;
        let r = call(&client, "messages_create", json!({"messages": [user("x")]})).await;
        assert_eq!(structured(&r)["message"]["stop_reason"], "max_tokens");
        assert_eq!(structured(&r)["message"]["model"], "claude-sonnet-x");
        assert_conforms(&client, "messages_create", &r).await;
        let r = call(&client, "responses_create", json!({"input": "x"})).await;
        assert_eq!(structured(&r)["status"], "incomplete");
        assert_eq!(
            structured(&r)["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );
        assert_conforms(&client, "responses_create", &r).await;
        let r = call(&client, "generate", json!({"prompt": "x"})).await;
        assert_eq!(structured(&r)["finish_reason"], "length");
        assert_eq!(structured(&r)["host_model"], "claude-sonnet-x");
        assert_conforms(&client, "generate", &r).await;
        // The text stays exactly as before: existing callers see no change.
        assert_eq!(text(&r), "truncat");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn cursors_cover_rich_transcripts() {
    for era in ERAS {
        let client = connect(tool_loop_host(true), era).await;
        let history = json!([
            user("Weather in Paris?"),
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_7", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": "21C, sunny"}]);
        let out = ok_text(
            &client,
            "chat_complete",
            json!({"messages": history, "tools": weather(), "previous_response_id": ""}),
        )
        .await;
        let v: Value = serde_json::from_str(&out).unwrap();
        let cursor = v["response_id"].as_str().unwrap().to_owned();
        let mut next = history.as_array().unwrap().clone();
        next.push(json!({"role": "assistant", "content": v["completion"]}));
        next.push(user("Thanks."));
        let ok = call(
            &client,
            "chat_complete",
            json!({"messages": next, "tools": weather(), "previous_response_id": cursor}),
        )
        .await;
        assert!(!is_error(&ok), "{}", text(&ok));
        // Changing the tool's result breaks the chain.
        next[2]["content"] = json!("35C");
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": next, "tools": weather(), "previous_response_id": cursor}),
        )
        .await;
        assert!(e.contains("cursor mismatch"), "{e}");
        client.cancel().await.unwrap();
    }
}
