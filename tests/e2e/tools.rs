//! Every tool, on both eras, through the real binary: what the host receives and what the
//! caller gets back (contract A1, A2).

use crate::common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn server_info_and_tool_list_match_the_original() {
    let host = Host::text("x");
    for era in ERAS {
        let client = connect(host.clone(), era).await;
        let info = client.peer_info().unwrap();
        let server = info.server_info.as_ref().expect("serverInfo");
        assert_eq!(server.name, "agent-as-model");
        assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "chat_complete",
                "messages_create",
                "responses_create",
                "generate",
                "generate_content",
                "list_models",
                "embeddings_create"
            ]
        );
        let original: Vec<Value> =
            serde_json::from_str(include_str!("../data/original-tools.json")).unwrap();
        assert_eq!(original.len(), 5);
        for theirs in &original {
            let ours = tools
                .iter()
                .find(|t| t.name == theirs["name"].as_str().unwrap())
                .unwrap();
            assert!(ours.description.as_ref().is_some_and(|d| d.len() > 20));
            // Every argument the original has is here, with the same type and default.
            let ours_props = ours.input_schema["properties"].as_object().unwrap();
            for (name, schema) in theirs["inputSchema"]["properties"].as_object().unwrap() {
                let mine = &ours_props[name];
                assert_eq!(
                    mine.get("default"),
                    schema.get("default"),
                    "{} {name}",
                    ours.name
                );
                assert_eq!(mine.get("type"), schema.get("type"), "{} {name}", ours.name);
                // Every form the original accepts is still accepted (tool_choice also takes
                // the OpenAI and Anthropic object forms).
                if let Some(theirs_any) = schema.get("anyOf").and_then(Value::as_array) {
                    let mine_any = mine["anyOf"].as_array().unwrap();
                    for alt in theirs_any {
                        assert!(mine_any.contains(alt), "{} {name} accepts {alt}", ours.name);
                    }
                }
            }
            assert_eq!(
                ours.input_schema.get("required"),
                theirs["inputSchema"].get("required")
            );
            assert!(
                ours.output_schema.is_some(),
                "{} declares an outputSchema",
                ours.name
            );
        }
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn chat_complete_folds_system_messages_and_sends_parameters() {
    for era in ERAS {
        let host = Host::text("Hello there.");
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "chat_complete",
            json!({
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Explain MCP."},
                    {"role": "assistant", "content": "A protocol."},
                    {"role": "system", "content": "Use English."},
                    {"role": "user", "content": "More?"}
                ],
                "model": "gpt-4o",
                "temperature": 0.5,
                "max_tokens": 500
            }),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "Hello there.");
        assert_eq!(structured(&r)["result"], json!("Hello there."));
        assert_conforms(&client, "chat_complete", &r).await;
        let seen = host.seen_json();
        assert_eq!(seen.len(), 1, "{era:?}: one sampling request");
        let p = &seen[0];
        assert_eq!(p["systemPrompt"], "You are terse.\n\nUse English.");
        assert_eq!(p["maxTokens"], 500);
        assert_eq!(p["temperature"], 0.5);
        assert_eq!(p["modelPreferences"]["hints"], json!([{"name": "gpt-4o"}]));
        assert_eq!(
            p["messages"],
            json!([
                {"role": "user", "content": {"type": "text", "text": "Explain MCP."}},
                {"role": "assistant", "content": {"type": "text", "text": "A protocol."}},
                {"role": "user", "content": {"type": "text", "text": "More?"}}
            ])
        );
        assert!(p.get("tools").is_none() && p.get("toolChoice").is_none());
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn defaults_are_the_originals() {
    for era in ERAS {
        let host = Host::text("ok");
        let client = connect(host.clone(), era).await;
        ok_text(&client, "chat_complete", json!({"messages": [user("hi")]})).await;
        let p = &host.seen_json()[0];
        assert_eq!(p["maxTokens"], 4096);
        assert!(
            p.get("temperature").is_none(),
            "temperature omitted when null"
        );
        assert!(
            p.get("systemPrompt").is_none(),
            "no system message, no systemPrompt"
        );
        assert_eq!(
            p["modelPreferences"]["hints"],
            json!([{"name": "agent-default"}])
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn messages_create_flattens_blocks_and_system() {
    for era in ERAS {
        let host = Host::text("4");
        let client = connect(host.clone(), era).await;
        let out = ok_text(
            &client,
            "messages_create",
            json!({
                "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Always."}],
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "2+2?"}, {"type": "text", "text": "Just the number."}
                ]}]
            }),
        )
        .await;
        assert_eq!(out, "4");
        let p = &host.seen_json()[0];
        assert_eq!(p["systemPrompt"], "Be brief.\nAlways.");
        assert_eq!(
            p["messages"][0]["content"]["text"],
            "2+2?\nJust the number."
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn responses_create_returns_a_response_object() {
    for era in ERAS {
        let host = Host::text("Paris.");
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "responses_create",
            json!({
                "instructions": "Answer briefly.",
                "input": [
                    {"role": "developer", "content": "Cite nothing."},
                    {"role": "user", "content": [{"type": "input_text", "text": "Capital of France?"}]}
                ],
                "model": "gpt-4.1"
            }),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        let obj: Value = serde_json::from_str(&text(&r)).unwrap();
        let id = obj["id"].as_str().unwrap();
        assert!(id.starts_with("resp_") && id.len() == 37, "{id}");
        assert_eq!(obj["object"], "response");
        assert_eq!(obj["model"], "gpt-4.1");
        assert_eq!(
            obj["output"],
            json!([{"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Paris."}]}])
        );
        assert!(
            text(&r).starts_with("{\n  \"id\": "),
            "pretty-printed with indent 2"
        );
        let s = structured(&r);
        for key in ["id", "object", "model", "output"] {
            assert_eq!(
                s[key], obj[key],
                "structuredContent carries the same object"
            );
        }
        assert_eq!(s["status"], "completed");
        assert_eq!(s["host_model"], "host-model");
        assert_conforms(&client, "responses_create", &r).await;
        let p = &host.seen_json()[0];
        assert_eq!(p["systemPrompt"], "Answer briefly.\n\nCite nothing.");
        assert_eq!(p["messages"][0]["content"]["text"], "Capital of France?");
        // A string input is one user message; ids differ per call.
        let r2 = call(&client, "responses_create", json!({"input": "hi"})).await;
        let obj2: Value = serde_json::from_str(&text(&r2)).unwrap();
        assert_ne!(obj2["id"], obj["id"]);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn generate_sends_one_user_message_and_nothing_else() {
    for era in ERAS {
        let host = Host::text(" there was a crate.");
        let client = connect(host.clone(), era).await;
        let out = ok_text(
            &client,
            "generate",
            json!({"prompt": "Once upon a time", "max_tokens": 64, "temperature": 1.0}),
        )
        .await;
        assert_eq!(out, " there was a crate.");
        let p = &host.seen_json()[0];
        assert_eq!(
            p["messages"],
            json!([{"role": "user", "content": {"type": "text", "text": "Once upon a time"}}])
        );
        assert!(p.get("systemPrompt").is_none());
        assert!(p.get("tools").is_none());
        assert_eq!(p["maxTokens"], 64);
        assert_eq!(p["temperature"], 1.0);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn list_models_returns_the_one_alias_without_sampling() {
    for era in ERAS {
        // list_models needs no sampling at all.
        let host = Host::text("unused").without_sampling();
        let client = connect(host.clone(), era).await;
        let r = call(&client, "list_models", json!({})).await;
        assert!(!is_error(&r));
        let models: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(models.as_array().unwrap().len(), 1);
        assert_eq!(models[0]["id"], "agent-default");
        assert_eq!(models[0]["owned_by"], "host-agent");
        assert!(
            models[0]["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty())
        );
        assert!(
            text(&r).starts_with(
                r#"[{"id": "agent-default", "owned_by": "host-agent", "description": "#
            )
        );
        assert_eq!(structured(&r)["result"], json!(text(&r)));
        assert_conforms(&client, "list_models", &r).await;
        assert!(host.seen().is_empty());
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn bad_arguments_are_named_and_nothing_is_sent() {
    let cases = [
        ("chat_complete", json!({}), "`messages`: is required"),
        (
            "chat_complete",
            json!({"messages": []}),
            "`messages`: must contain at least one item",
        ),
        (
            "chat_complete",
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            "`messages[0].role`: expected one of",
        ),
        (
            "chat_complete",
            json!({"messages": [{"role": "user", "content": 7}]}),
            "`messages[0].content`: expected a string or a list of content parts",
        ),
        (
            "chat_complete",
            json!({"messages": [user("x")], "max_tokens": "many"}),
            "`max_tokens`: expected a positive integer",
        ),
        (
            "messages_create",
            json!({"messages": [{"role": "system", "content": "x"}]}),
            "`messages[0].role`",
        ),
        (
            "responses_create",
            json!({"input": [{"role": "user", "content": [{"type": "input_video"}]}]}),
            "`input[0].content[0].type`",
        ),
        (
            "responses_create",
            json!({"input": []}),
            "`input`: must contain at least one item",
        ),
        (
            "generate",
            json!({"prompt": 42}),
            "`prompt`: expected a string, got number 42",
        ),
        ("generate", json!({}), "`prompt`: is required"),
    ];
    for era in ERAS {
        let host = Host::text("never");
        let client = connect(host.clone(), era).await;
        for (tool, args, want) in &cases {
            let e = err_text(&client, tool, args.clone()).await;
            assert!(
                e.contains(want),
                "{era:?} {tool}: {e:?} should contain {want:?}"
            );
            assert!(e.starts_with("invalid argument"), "{e}");
        }
        assert!(host.seen().is_empty(), "{era:?}: nothing reached the host");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn unknown_tool_is_a_protocol_error() {
    let client = connect(Host::text("x"), Era::Legacy).await;
    let e = try_call(&client, "images_generate", json!({}))
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -32602);
    assert!(e.to_string().contains("images_generate"));
    // The error names the tools there are.
    assert!(e.to_string().contains("embeddings_create"), "{e}");
    client.cancel().await.unwrap();
}
