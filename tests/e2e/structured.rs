//! Structured output, tool passthrough and personas end to end (contract A4, A5 and the
//! structured-output issue), on hosts with and without `sampling.tools`, on both eras.

use crate::common::*;
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, SamplingMessage};
use serde_json::{Value, json};

fn schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}, "pop": {"type": "integer"}},
           "required": ["city", "pop"], "additionalProperties": false})
}

fn tool_use(name: &str, input: Value) -> CreateMessageResult {
    CreateMessageResult::new(
        SamplingMessage::assistant_tool_use("toolu_1", name, input.as_object().unwrap().clone()),
        "host-model".into(),
    )
    .with_stop_reason(CreateMessageResult::STOP_REASON_TOOL_USE)
}

fn attempt(p: &CreateMessageRequestParams) -> usize {
    // Each repair adds the rejected answer and the repair request.
    (p.messages.len() - 1) / 2 + 1
}

#[tokio::test]
async fn output_schema_by_required_tool_on_a_tools_host() {
    for era in ERAS {
        let host = Host::new(true, |_| {
            Ok(tool_use(
                "structured_output",
                json!({"pop": 2100000, "city": "Paris"}),
            ))
        });
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("Biggest French city?")], "output_schema": schema()}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(
            text(&r),
            r#"{"city": "Paris", "pop": 2100000}"#,
            "sorted keys, Python separators"
        );
        assert_eq!(
            structured(&r)["structured_output"],
            json!({"via": "tool", "attempts": 1})
        );
        assert_conforms(&client, "chat_complete", &r).await;
        let p = &host.seen_json()[0];
        assert_eq!(p["tools"].as_array().unwrap().len(), 1);
        assert_eq!(p["tools"][0]["name"], "structured_output");
        assert_eq!(p["tools"][0]["inputSchema"], schema());
        assert_eq!(p["toolChoice"], json!({"mode": "required"}));
        // responses_create puts the JSON inside output_text.
        let r = call(
            &client,
            "responses_create",
            json!({"input": "x", "output_schema": schema()}),
        )
        .await;
        let obj: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(
            obj["output"][0]["content"][0]["text"],
            r#"{"city": "Paris", "pop": 2100000}"#
        );
        assert_conforms(&client, "responses_create", &r).await;
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_violation_names_the_location_and_is_never_returned() {
    for era in ERAS {
        let host = Host::new(true, |_| {
            Ok(tool_use(
                "structured_output",
                json!({"city": "Paris", "pop": "many"}),
            ))
        });
        let client = connect(host.clone(), era).await;
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "output_schema": schema(), "max_retries": 0}),
        )
        .await;
        assert!(e.starts_with("completion rejected"), "{e}");
        assert!(e.contains("at /pop"), "{e}");
        assert!(e.contains("after 1 attempt"), "{e}");
        assert_eq!(host.seen().len(), 1);
        // No structured_output call at all.
        let host = Host::new(true, |_| Ok(reply("I'd rather chat.")));
        let client2 = connect(host, era).await;
        let e = err_text(
            &client2,
            "messages_create",
            json!({"messages": [user("x")], "output_schema": schema(), "max_retries": 0}),
        )
        .await;
        assert!(
            e.contains("did not call the required structured_output tool"),
            "{e}"
        );
        client.cancel().await.unwrap();
        client2.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn repair_succeeds_on_the_second_attempt() {
    for era in ERAS {
        let host = Host::new(true, |p| {
            Ok(if attempt(p) == 1 {
                tool_use("structured_output", json!({"city": "Paris"}))
            } else {
                tool_use("structured_output", json!({"city": "Paris", "pop": 2}))
            })
        });
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "output_schema": schema()}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(
            structured(&r)["structured_output"],
            json!({"via": "tool", "attempts": 2})
        );
        let seen = host.seen_json();
        assert_eq!(seen.len(), 2, "{era:?}");
        let repair = seen[1]["messages"][2]["content"]["text"].as_str().unwrap();
        assert!(
            repair.contains("rejected") && repair.contains("\"pop\""),
            "{repair}"
        );
        assert_eq!(seen[1]["messages"][1]["role"], "assistant");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn repair_runs_out_and_says_how_many_attempts() {
    for era in ERAS {
        let host = Host::new(false, |_| Ok(reply("not json at all")));
        let client = connect(host.clone(), era).await;
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "output_schema": schema(), "max_retries": 2}),
        )
        .await;
        assert!(
            e.contains("no JSON object") && e.contains("after 3 attempt(s)"),
            "{e}"
        );
        assert_eq!(host.seen().len(), 3, "{era:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn output_schema_by_prompt_on_a_host_without_tools() {
    for era in ERAS {
        let host = Host::new(false, |_| {
            Ok(reply(
                "Sure!\n```json\n{\"city\": \"Lyon\", \"pop\": 500000}\n```",
            ))
        });
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [{"role": "system", "content": "Be exact."}, user("x")],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema()}}}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), r#"{"city": "Lyon", "pop": 500000}"#);
        assert_eq!(
            structured(&r)["structured_output"],
            json!({"via": "prompt", "attempts": 1})
        );
        let p = &host.seen_json()[0];
        assert!(
            p.get("tools").is_none() && p.get("toolChoice").is_none(),
            "no tools to a host without sampling.tools"
        );
        let system = p["systemPrompt"].as_str().unwrap();
        assert!(
            system.starts_with("Be exact.\n\n")
                && system.contains("\"required\": [\"city\", \"pop\"]"),
            "{system}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn bad_schemas_and_definitions_are_rejected_before_sending() {
    let cases = [
        (
            json!({"messages": [user("x")], "output_schema": {"type": "array"}}),
            "`output_schema`: the schema's root \"type\" must be \"object\"",
        ),
        (
            json!({"messages": [user("x")], "output_schema": {"type": "object", "minProperties": "two"}}),
            "not a valid Draft 2020-12 JSON Schema",
        ),
        (
            json!({"messages": [user("x")], "tools": []}),
            "`tools`: must contain at least one",
        ),
        (
            json!({"messages": [user("x")], "tools": [{"name": "a", "input_schema": {"type": "object"}}, {"name": " a", "input_schema": {"type": "object"}}]}),
            "duplicate tool name",
        ),
        (
            json!({"messages": [user("x")], "tools": [{"name": "a", "input_schema": {"type": "object"}}], "output_schema": {"type": "object"}}),
            "`tools` and `output_schema` cannot be combined",
        ),
        (
            json!({"messages": [user("x")], "tools": [{"name": "a", "input_schema": {"type": "object"}}], "tool_choice": "any"}),
            "`tool_choice`: expected one of \"auto\", \"required\", \"none\"",
        ),
        (
            json!({"messages": [user("x")], "output_schema": {"type": "object"}, "persona": {"name": "p", "output_schema": {"type": "object"}}}),
            "`output_schema` and `persona.output_schema`",
        ),
        (
            json!({"messages": [user("x")], "persona": {"name": ""}}),
            "`persona.name`: must be a non-empty string",
        ),
    ];
    for era in ERAS {
        let host = Host::text("never").with_tools();
        let client = connect(host.clone(), era).await;
        for (args, want) in &cases {
            let e = err_text(&client, "chat_complete", args.clone()).await;
            assert!(e.contains(want), "{e:?} should contain {want:?}");
        }
        assert!(host.seen().is_empty());
        client.cancel().await.unwrap();
    }
}

fn weather_tool() -> Value {
    json!([{"name": "get_weather", "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

#[tokio::test]
async fn tools_pass_through_and_calls_come_back_in_each_shape() {
    for era in ERAS {
        let host = Host::new(true, |_| {
            Ok(tool_use("get_weather", json!({"city": "Paris"})))
        });
        let client = connect(host.clone(), era).await;
        let out = ok_text(&client, "chat_complete", json!({"messages": [user("Weather?")], "tools": weather_tool(), "tool_choice": "required"})).await;
        assert_eq!(
            out,
            r#"{"text": "", "tool_calls": [{"id": "toolu_1", "input": {"city": "Paris"}, "name": "get_weather"}]}"#
        );
        let p = &host.seen_json()[0];
        assert_eq!(p["tools"][0]["name"], "get_weather");
        assert_eq!(p["tools"][0]["description"], "Weather for a city");
        assert_eq!(p["toolChoice"], json!({"mode": "required"}));
        let out = ok_text(
            &client,
            "messages_create",
            json!({"messages": [user("Weather?")], "tools": weather_tool()}),
        )
        .await;
        assert!(out.contains("\"tool_calls\""), "{out}");
        assert_eq!(
            host.seen_json()[1]["toolChoice"],
            json!({"mode": "auto"}),
            "auto by default"
        );
        let r = call(
            &client,
            "responses_create",
            json!({"input": "Weather?", "tools": weather_tool()}),
        )
        .await;
        let obj: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_conforms(&client, "responses_create", &r).await;
        assert_eq!(
            obj["output"],
            json!([{"type": "function_call", "id": "fc_toolu_1", "call_id": "toolu_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}])
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tools_not_emulated_on_request_are_reported_not_silently_dropped() {
    for era in ERAS {
        let host = Host::text("It is sunny.");
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("Weather?")], "tools": weather_tool(), "emulate_tools": false}),
        )
        .await;
        assert!(!is_error(&r));
        assert_eq!(text(&r), "It is sunny.");
        let warnings = structured(&r)["warnings"].as_array().unwrap().clone();
        assert!(
            warnings[0]
                .as_str()
                .unwrap()
                .contains("tools were not forwarded"),
            "{warnings:?}"
        );
        assert_conforms(&client, "chat_complete", &r).await;
        assert!(host.seen_json()[0].get("tools").is_none());
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_tool_call_nobody_asked_for_is_an_error() {
    let host = Host::new(true, |_| Ok(tool_use("rm_rf", json!({}))));
    let client = connect(host, Era::Legacy).await;
    let e = err_text(&client, "chat_complete", json!({"messages": [user("hi")]})).await;
    assert!(
        e.contains("tool_use content, but no tools were offered"),
        "{e}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn personas_validate_the_request_before_and_the_answer_after() {
    for era in ERAS {
        let host = Host::new(false, |p| {
            Ok(reply(if last_text(p) == "json please" {
                r#"{"mood": "glad"}"#
            } else {
                "prose"
            }))
        });
        let client = connect(host.clone(), era).await;
        let persona = json!({"name": "mood-bot",
            "input_schema": {"type": "object", "properties": {"max_tokens": {"maximum": 1000}}},
            "output_schema": {"type": "object", "required": ["mood"]}});
        let e = err_text(
            &client,
            "generate",
            json!({"prompt": "json please", "persona": persona}),
        )
        .await;
        assert!(
            e.contains("persona \"mood-bot\" input_schema") && e.contains("/max_tokens"),
            "{e}"
        );
        assert!(
            host.seen().is_empty(),
            "persona input failure sends nothing"
        );
        let out = ok_text(
            &client,
            "generate",
            json!({"prompt": "json please", "max_tokens": 100, "persona": persona}),
        )
        .await;
        assert_eq!(out, r#"{"mood": "glad"}"#);
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("hi")], "max_tokens": 100, "persona": persona}),
        )
        .await;
        assert!(
            e.contains("persona \"mood-bot\"") && e.contains("JSON"),
            "{e}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_persona_output_violation_is_repaired_like_any_schema() {
    for era in ERAS {
        let host = Host::new(false, |p| {
            Ok(reply(if last_text(p).contains("was rejected") {
                r#"{"mood": "glad"}"#
            } else {
                "prose"
            }))
        });
        let client = connect(host.clone(), era).await;
        let persona = json!({"name": "mood-bot",
            "output_schema": {"type": "object", "required": ["mood"]}});
        let r = call(
            &client,
            "chat_complete",
            json!({"messages": [user("hi")], "persona": persona}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), r#"{"mood": "glad"}"#);
        let seen = host.seen();
        assert_eq!(seen.len(), 2, "one answer and one repair");
        let asked = last_text(&seen[1]);
        assert!(asked.contains("persona \"mood-bot\""), "{asked}");
        assert_conforms(&client, "chat_complete", &r).await;
        // Without repairs the violation is the call's error, naming the persona.
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("hi")], "persona": persona, "max_retries": 0}),
        )
        .await;
        assert!(
            e.contains("persona \"mood-bot\"") && e.contains("gave up after 1 attempt(s)"),
            "{e}"
        );
        client.cancel().await.unwrap();
    }
}
