//! `generate_content`, the Gemini shape, end to end on both eras: what reaches the host, the
//! GenerateContentResponse that comes back, structured output and repair, tools native and
//! emulated, media, stop sequences, personas, cursors and errors naming the field.

use crate::common::*;
use rmcp::model::{CreateMessageResult, SamplingMessage};
use serde_json::{Value, json};

fn contents(text: &str) -> Value {
    json!([{"role": "user", "parts": [{"text": text}]}])
}

#[tokio::test]
async fn a_gemini_request_reaches_the_host_and_comes_back_as_a_response_object() {
    for era in ERAS {
        let host = Host::text("Four.");
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "generate_content",
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "2+2?"}]},
                    {"role": "model", "parts": [{"text": "Let me think."}]},
                    {"role": "user", "parts": [{"text": "Quick."}]}
                ],
                "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Very."}]},
                "generationConfig": {"temperature": 0.5, "maxOutputTokens": 64, "topK": 5,
                                     "seed": 9},
                "model": "gemini-2.5-flash"
            }),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "Four.");
        let s = structured(&r);
        assert_eq!(s["result"], "Four.");
        assert_eq!(s["candidates"][0]["content"]["role"], "model");
        assert_eq!(s["candidates"][0]["content"]["parts"][0]["text"], "Four.");
        assert_eq!(s["candidates"][0]["finishReason"], "STOP");
        assert_eq!(s["modelVersion"], "host-model");
        assert_eq!(s["usageMetadata"]["estimated"], true);
        assert_conforms(&client, "generate_content", &r).await;
        let p = &host.seen_json()[0];
        assert_eq!(p["systemPrompt"], "Be brief.\nVery.");
        assert_eq!(p["maxTokens"], 64);
        assert_eq!(
            p["modelPreferences"]["hints"][0]["name"],
            "gemini-2.5-flash"
        );
        assert_eq!(p["metadata"], json!({"topK": 5, "seed": 9}));
        let roles: Vec<&str> = p["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn response_schema_yields_validated_json_with_repair_on_both_eras() {
    for era in ERAS {
        // The first answer breaks the schema; the repair is valid.
        let host = Host::new(false, |p| {
            Ok(reply(if p.messages.len() == 1 {
                "{\"city\": \"Paris\"}"
            } else {
                "```json\n{\"city\": \"Paris\", \"pop\": 2100000}\n```"
            }))
        });
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "generate_content",
            json!({"contents": contents("Biggest French city?"),
                   "generationConfig": {"responseMimeType": "application/json",
                       "responseSchema": {"type": "OBJECT", "properties": {
                           "city": {"type": "STRING"}, "pop": {"type": "INTEGER"}},
                           "required": ["city", "pop"]}}}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "{\"city\": \"Paris\", \"pop\": 2100000}");
        assert_eq!(
            structured(&r)["structured_output"],
            json!({"via": "prompt", "attempts": 2})
        );
        let seen = host.seen();
        assert_eq!(seen.len(), 2);
        assert!(
            seen[0]
                .system_prompt
                .as_deref()
                .unwrap()
                .contains("\"pop\": {\"type\": \"integer\"}")
        );
        assert!(last_text(&seen[1]).contains("rejected"));
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn function_declarations_go_native_or_by_prompt_and_calls_come_back_as_parts() {
    let tools = json!([{"functionDeclarations": [{"name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}},
                       "required": ["city"]}}]}]);
    for era in ERAS {
        for native in [true, false] {
            let host = Host::new(native, move |_| {
                Ok(if native {
                    let input = json!({"city": "Oslo"}).as_object().unwrap().clone();
                    CreateMessageResult::new(
                        SamplingMessage::assistant_tool_use("fc_1", "get_weather", input),
                        "host-model".into(),
                    )
                    .with_stop_reason(CreateMessageResult::STOP_REASON_TOOL_USE)
                } else {
                    reply(
                        "```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \
                         \"arguments\": {\"city\": \"Oslo\"}}]}\n```",
                    )
                })
            });
            let client = connect(host.clone(), era).await;
            let r = call(
                &client,
                "generate_content",
                json!({"contents": contents("Weather in Oslo?"), "tools": tools,
                       "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}),
            )
            .await;
            assert!(!is_error(&r), "{}", text(&r));
            let s = structured(&r);
            let part = &s["candidates"][0]["content"]["parts"][0]["functionCall"];
            assert_eq!(part["name"], "get_weather");
            assert_eq!(part["args"], json!({"city": "Oslo"}));
            assert_eq!(
                s["tool_calls_via"],
                if native { "native" } else { "prompt" }
            );
            assert_conforms(&client, "generate_content", &r).await;
            let p = &host.seen_json()[0];
            if native {
                assert_eq!(
                    p["tools"][0]["inputSchema"]["properties"]["city"]["type"],
                    "string"
                );
                assert_eq!(p["toolChoice"]["mode"], "required");
            } else {
                assert!(p.get("tools").is_none());
                assert!(p["systemPrompt"].as_str().unwrap().contains("get_weather"));
            }
            client.cancel().await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_function_response_without_id_answers_the_call_before_it() {
    for era in ERAS {
        let host = Host::new(true, |_| Ok(reply("It is 3 degrees in Oslo.")));
        let client = connect(host.clone(), era).await;
        let out = ok_text(
            &client,
            "generate_content",
            json!({"contents": [
                {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 3}}}]}
            ], "tools": [{"functionDeclarations": [{"name": "get_weather"}]}]}),
        )
        .await;
        assert_eq!(out, "It is 3 degrees in Oslo.");
        let p = &host.seen_json()[0];
        let call = &p["messages"][1]["content"];
        let result = &p["messages"][2]["content"];
        assert_eq!(call["type"], "tool_use");
        assert_eq!(result["type"], "tool_result");
        assert_eq!(result["toolUseId"], call["id"]);
        assert_eq!(result["content"][0]["text"], "{\"temp\": 3}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn media_stop_sequences_personas_and_cursors_apply() {
    for era in ERAS {
        let host = Host::text("{\"answer\": \"a cat\"} STOP and more");
        let client = connect(host.clone(), era).await;
        let args = json!({
            "contents": [{"role": "user", "parts": [
                {"text": "What is this?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]}],
            "generationConfig": {"stopSequences": ["STOP"]},
            "persona": {"name": "strict", "input_schema": {"type": "object",
                "required": ["contents", "generationConfig"],
                "properties": {"model": {"const": "agent-default"}}},
                "output_schema": {"type": "object", "required": ["answer"]}},
            "previous_response_id": ""
        });
        let r = call(&client, "generate_content", args).await;
        assert!(!is_error(&r), "{}", text(&r));
        let envelope: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(envelope["completion"], "{\"answer\": \"a cat\"} ");
        let cursor = envelope["response_id"].as_str().unwrap().to_owned();
        assert!(cursor.starts_with("cur_"));
        assert_eq!(structured(&r)["responseId"], cursor);
        let p = &host.seen_json()[0];
        assert_eq!(p["messages"][0]["content"][1]["type"], "image");
        assert_eq!(p["stopSequences"], json!(["STOP"]));
        // The cursor verifies the history it was minted over, and refuses a changed one.
        let next = |answer: &str| {
            json!({"contents": [
                {"role": "user", "parts": [
                    {"text": "What is this?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
                {"role": "model", "parts": [{"text": answer}]},
                {"role": "user", "parts": [{"text": "Sure?"}]}],
             "previous_response_id": cursor})
        };
        let ok = call(
            &client,
            "generate_content",
            next("{\"answer\": \"a cat\"} "),
        )
        .await;
        assert!(!is_error(&ok), "{}", text(&ok));
        let e = err_text(&client, "generate_content", next("a dog")).await;
        assert!(e.contains("previous_response_id"), "{e}");
        // The persona's input schema sees the Gemini request.
        let e = err_text(
            &client,
            "generate_content",
            json!({"contents": contents("x"), "model": "other",
                   "persona": {"name": "strict", "input_schema": {"type": "object",
                       "properties": {"model": {"const": "agent-default"}}}}}),
        )
        .await;
        assert!(
            e.contains("persona \"strict\"") && e.contains("/model"),
            "{e}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn bad_gemini_arguments_are_named_and_nothing_is_sent() {
    for era in ERAS {
        let host = Host::text("never");
        let client = connect(host.clone(), era).await;
        for (args, want) in [
            (json!({}), "`contents`: is required"),
            (
                json!({"contents": [{"role": "bot", "parts": [{"text": "x"}]}]}),
                "`contents[0].role`",
            ),
            (
                json!({"contents": contents("x"), "generationConfig": {"candidateCount": 3}}),
                "`generationConfig.candidateCount`",
            ),
            (
                json!({"contents": contents("x"),
                       "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "STRING"}}]}]}),
                "`tools[0].functionDeclarations[0].parameters`",
            ),
            (
                json!({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "%%%"}}]}]}),
                "`contents[0].parts[0].inlineData.data`: is not valid base64",
            ),
        ] {
            let e = err_text(&client, "generate_content", args).await;
            assert!(e.contains(want), "{e} does not contain {want}");
        }
        assert!(host.seen().is_empty());
        client.cancel().await.unwrap();
    }
}
