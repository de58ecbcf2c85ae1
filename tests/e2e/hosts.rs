//! Scripted hosts that imitate real hosts' quirks: no tools in sampling (VS Code, Goose), stop
//! sequences ignored, one content block kept, prose where a tool call was asked for. The
//! contract must hold on each, or the result must say where it could not.

use crate::common::*;
use rmcp::model::CreateMessageRequestParams;
use serde_json::{Value, json};

fn weather() -> Value {
    json!([{"name": "get_weather", "description": "Current weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
           {"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}])
}

fn system(p: &CreateMessageRequestParams) -> String {
    p.system_prompt.clone().unwrap_or_default()
}

/// Like VS Code: no sampling.tools; answers tool requests by following the prompt's format.
fn vscode_like() -> Host {
    Host::new(false, |p| {
        Ok(reply(
            if system(p).contains("You can call tools") && last_text(p).contains("weather") {
                "I'll look that up.\n```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}\n```"
            } else {
                "Plain answer."
            },
        ))
    })
}

#[tokio::test]
async fn emulated_tool_calls_round_trip_in_all_three_shapes() {
    for era in ERAS {
        let host = vscode_like();
        let client = connect(host.clone(), era).await;
        let ask = |tool: &str| match tool {
            "responses_create" => json!({"input": "weather in Paris?", "tools": weather()}),
            _ => json!({"messages": [user("weather in Paris?")], "tools": weather()}),
        };
        let r = call(&client, "chat_complete", ask("chat_complete")).await;
        let env: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(env["text"], "I'll look that up.");
        assert_eq!(env["tool_calls"][0]["name"], "get_weather");
        assert_eq!(env["tool_calls"][0]["input"], json!({"city": "Paris"}));
        assert_eq!(structured(&r)["tool_calls_via"], "prompt");
        assert_eq!(
            structured(&r)["chat_completion"]["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert_conforms(&client, "chat_complete", &r).await;
        let r = call(&client, "messages_create", ask("messages_create")).await;
        assert_eq!(structured(&r)["message"]["content"][1]["type"], "tool_use");
        let r = call(&client, "responses_create", ask("responses_create")).await;
        let obj: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(obj["output"][1]["type"], "function_call");
        assert_eq!(obj["output"][1]["arguments"], "{\"city\": \"Paris\"}");
        for p in host.seen() {
            assert!(
                p.tools.is_none() && p.tool_choice.is_none(),
                "no tools to a host without sampling.tools"
            );
            assert!(
                system(&p).contains("- get_weather: Current weather"),
                "{}",
                system(&p)
            );
        }
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tool_choice_is_honoured_when_emulating() {
    for era in ERAS {
        // "required": prose first, then the call after one repair.
        let host = Host::new(false, |p| {
            Ok(reply(if p.messages.len() == 1 {
                "The weather is probably fine."
            } else {
                "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
            }))
        });
        let client = connect(host.clone(), era).await;
        let out = ok_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "tools": weather(), "tool_choice": "required"}),
        )
        .await;
        assert!(out.contains("\"Oslo\""), "{out}");
        let seen = host.seen_json();
        assert_eq!(seen.len(), 2);
        assert!(
            seen[0]["systemPrompt"]
                .as_str()
                .unwrap()
                .contains("You must call at least one tool")
        );
        assert!(
            seen[1]["messages"][2]["content"]["text"]
                .as_str()
                .unwrap()
                .contains("no tool call came back")
        );
        client.cancel().await.unwrap();

        // "required" with a host that never complies: a clear error after the repair.
        let host = Host::text("Never.");
        let client = connect(host.clone(), era).await;
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "tools": weather(), "tool_choice": "required"}),
        )
        .await;
        assert!(
            e.contains("no tool call came back") && e.contains("after 2 attempt(s)"),
            "{e}"
        );
        // "none": the tools are not offered at all; "auto" with prose: plain text.
        let out = ok_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "tools": weather(), "tool_choice": "none"}),
        )
        .await;
        assert_eq!(out, "Never.");
        assert!(
            !host
                .seen()
                .last()
                .map(system)
                .unwrap_or_default()
                .contains("You can call tools")
        );
        let out = ok_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "tools": weather()}),
        )
        .await;
        assert_eq!(out, "Never.");
        // A forced tool (OpenAI object form) offers only that tool.
        // (This host never calls a tool, so the forced call fails after its repair.)
        err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "tools": weather(),
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
        )
        .await;
        let s = system(host.seen().last().unwrap());
        assert!(
            s.contains("- get_time") && !s.contains("- get_weather"),
            "{s}"
        );
        let e = err_text(
            &client,
            "messages_create",
            json!({"messages": [user("x")], "tools": weather(),
            "tool_choice": {"type": "tool", "name": "nope"}}),
        )
        .await;
        assert!(e.contains("`tool_choice`: names the tool \"nope\""), "{e}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn invalid_emulated_arguments_are_repaired_or_named() {
    let host = Host::text("{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}");
    let client = connect(host.clone(), Era::Legacy).await;
    let e = err_text(
        &client,
        "chat_complete",
        json!({"messages": [user("x")], "tools": weather()}),
    )
    .await;
    assert!(
        e.contains("violate its input schema") && e.contains("city"),
        "{e}"
    );
    assert_eq!(host.seen().len(), 2, "one repair");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn every_parameter_has_a_defined_outcome() {
    for era in ERAS {
        let host = Host::text("ok");
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({
            "messages": [user("x")], "max_completion_tokens": 321, "top_p": 0.5, "seed": 42,
            "user": "u-1", "metadata": {"team": "a"}, "stream": true, "parallel_tool_calls": true,
            "frobnicate": true, "n": 1, "logprobs": true, "top_logprobs": 2}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "ok");
        let p = &host.seen_json()[0];
        assert_eq!(p["maxTokens"], 321);
        assert_eq!(
            p["metadata"],
            json!({"top_p": 0.5, "seed": 42, "user": "u-1", "metadata": {"team": "a"}})
        );
        let warnings: Vec<String> =
            serde_json::from_value(structured(&r)["warnings"].clone()).unwrap();
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        // The host has no log-probabilities: the answer comes without them, and says so.
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("`logprobs`") && w.contains("MCP sampling reports none")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("stream: true is emulated"))
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("`parallel_tool_calls` has no equivalent"))
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("unknown argument `frobnicate`"))
        );
        assert_conforms(&client, "chat_complete", &r).await;
        let r = call(
            &client,
            "responses_create",
            json!({"input": "x", "max_output_tokens": 99}),
        )
        .await;
        assert!(!is_error(&r));
        assert_eq!(host.seen_json()[1]["maxTokens"], 99);
        for (args, want) in [
            (json!({"messages": [user("x")], "n": 3}), "`n`: expected 1"),
            (
                json!({"messages": [user("x")], "top_logprobs": 3}),
                "`top_logprobs`: needs `logprobs: true`",
            ),
            (
                json!({"messages": [user("x")], "modalities": ["text", "audio"]}),
                "`modalities`: audio output",
            ),
            (
                json!({"messages": [user("x")], "max_tokens": 10, "max_completion_tokens": 20}),
                "disagree",
            ),
        ] {
            let e = err_text(&client, "chat_complete", args).await;
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(host.seen().len(), 2, "rejected parameters send nothing");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn multi_part_text_reaches_single_block_hosts_whole() {
    // Goose keeps only the first content block of a message: text parts travel as one block.
    let host = Host::new(false, |p| {
        let first = p.messages[0]
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone());
        Ok(reply(&first.unwrap_or_default()))
    });
    let client = connect(host, Era::Modern).await;
    let out = ok_text(
        &client,
        "chat_complete",
        json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}]}),
    )
    .await;
    assert_eq!(out, "part one\npart two");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn list_models_reports_the_host() {
    let cases = [
        (Era::Legacy, Host::text("x").with_tools(), "native"),
        (Era::Modern, Host::text("x"), "prompt"),
    ];
    for (era, host, tool_calls) in cases {
        let client = connect(host, era).await;
        let r = call(&client, "list_models", json!({})).await;
        let report = &structured(&r)["host"];
        assert_eq!(report["sampling"], true);
        assert_eq!(report["tool_calls"], tool_calls);
        assert_eq!(report["client"]["name"], "scripted-host");
        let version = if era == Era::Modern {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(report["protocol_version"], version);
        let emulated = report["emulated"].as_array().unwrap();
        assert_eq!(emulated.is_empty(), tool_calls == "native", "{report}");
        assert_conforms(&client, "list_models", &r).await;
        client.cancel().await.unwrap();
    }
    let client = connect(Host::text("x").without_sampling(), Era::Modern).await;
    let r = call(&client, "list_models", json!({})).await;
    assert_eq!(structured(&r)["host"]["sampling"], false);
    assert!(
        structured(&r)["host"]["completions"]
            .as_str()
            .unwrap()
            .starts_with("unavailable")
    );
    client.cancel().await.unwrap();
}
