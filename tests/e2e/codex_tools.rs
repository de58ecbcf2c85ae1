//! Codex's tool registry over `/v1/responses`, on the real binary with a scripted provider:
//! tools in an `additional_tools` input item and top-level `namespace` groups, freeform
//! `custom` tools, and the history that carries their calls. The provider sees plain function
//! tools; the client gets each call back as it declared the tool (a `custom_tool_call` with its
//! raw input, a namespaced `function_call` with its bare name and namespace).

use crate::common::openai::{Reply, Scripted};
use crate::http_api::{TOKEN, data, post, server};
use serde_json::{Value, json};

/// A chat completion calling `name` with `arguments`.
fn calling(name: &str, arguments: &Value) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "upstream",
           "choices": [{"index": 0, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": null,
                                    "tool_calls": [{"id": "call_7", "type": "function",
                                                    "function": {"name": name,
                                                                 "arguments": arguments.to_string()}}]}}],
           "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}})
}

/// A request as Codex 0.144 and later makes it: its tools in an `additional_tools` item, a
/// freeform `exec` and a `wait` function in the implicit `functions` namespace, and a
/// top-level `multi_agent_v1` namespace.
fn codex_request(input: Vec<Value>) -> Value {
    let mut items = vec![
        json!({"type": "additional_tools", "role": "developer", "tools": [
        {"type": "namespace", "name": "functions", "tools": [
            {"type": "custom", "name": "exec", "description": "Runs a shell command.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /[^\\n]+/"}},
            {"type": "function", "name": "wait", "description": "Waits.",
             "parameters": {"type": "object", "properties": {"ms": {"type": "integer"}}}}]}]}),
    ];
    items.extend(input);
    json!({"model": "scripted", "input": items,
           "tools": [{"type": "namespace", "name": "multi_agent_v1", "tools": [
               {"type": "function", "name": "spawn_agent", "description": "Starts an agent.",
                "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]}]})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "input_text", "text": text}]})
}

async fn respond(url: &str, body: &Value) -> Value {
    let (status, _, text) = post(url, &[("x-api-key", TOKEN)], body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn codex_custom_and_namespaced_tools_come_back_as_declared() {
    let provider = Scripted::start(vec![
        Reply::json(200, &calling("exec", &json!({"input": "ls -la"}))),
        Reply::json(200, &calling("spawn_agent", &json!({"task": "review"}))),
        Reply::json(200, &crate::common::openai::completion("All done.")),
    ])
    .await;
    let s = server("codex-tools", &provider).await;
    let url = format!("{}/v1/responses", s.url);

    // A custom tool's call: its raw input.
    let first = respond(&url, &codex_request(vec![user("List the files.")])).await;
    let call = &first["output"][0];
    assert_eq!(call["type"], "custom_tool_call", "{first}");
    assert_eq!(call["name"], "exec");
    assert_eq!(call["input"], "ls -la");
    assert_eq!(call["namespace"], "functions");
    assert_eq!(call["call_id"], "call_7");
    // The provider saw plain functions under their bare names (none is declared twice).
    let seen = provider.seen();
    let tools: Vec<&str> = seen[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["spawn_agent", "exec", "wait"]);
    let exec = &seen[0].body["tools"][1]["function"];
    assert_eq!(exec["parameters"]["required"], json!(["input"]));
    assert!(
        exec["description"]
            .as_str()
            .unwrap()
            .contains("lark grammar"),
        "{exec}"
    );

    // A namespaced function's call: its bare name and its namespace.
    let second = respond(&url, &codex_request(vec![user("Start a reviewer.")])).await;
    let call = &second["output"][0];
    assert_eq!(call["type"], "function_call", "{second}");
    assert_eq!(call["name"], "spawn_agent");
    assert_eq!(call["namespace"], "multi_agent_v1");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"task": "review"}));

    // The history Codex sends back reaches the model as calls and their results.
    let history = vec![
        user("List the files, then start a reviewer."),
        json!({"type": "custom_tool_call", "call_id": "c1", "name": "exec",
               "namespace": "functions", "input": "ls -la"}),
        json!({"type": "custom_tool_call_output", "call_id": "c1",
               "output": [{"type": "input_text", "text": "a.txt b.txt"}]}),
        json!({"type": "function_call", "call_id": "c2", "name": "spawn_agent",
               "namespace": "multi_agent_v1", "arguments": "{\"task\":\"review\"}"}),
        json!({"type": "function_call_output", "call_id": "c2",
               "output": [{"type": "input_text", "text": "started"}]}),
        json!({"type": "agent_message", "content": [{"type": "output_text",
                                                     "text": "Both are under way."}]}),
        user("Anything else?"),
    ];
    let third = respond(&url, &codex_request(history)).await;
    assert_eq!(
        third["output"][0]["content"][0]["text"], "All done.",
        "{third}"
    );
    let messages = provider.seen()[2].body["messages"].clone();
    let text = messages.to_string();
    let calls: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .map(|c| c["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ["exec", "spawn_agent"], "{messages}");
    assert!(
        text.contains("a.txt b.txt") && text.contains("started"),
        "{text}"
    );
    assert!(text.contains("Both are under way."), "{text}");
}

#[tokio::test]
async fn a_streamed_custom_tool_call_ends_with_its_raw_input() {
    let provider = Scripted::start(vec![Reply::json(
        200,
        &calling("exec", &json!({"input": "cat a.txt"})),
    )])
    .await;
    let s = server("codex-tools-stream", &provider).await;
    let mut body = codex_request(vec![user("Show a.txt.")]);
    body["stream"] = json!(true);
    let (status, _, text) = post(
        &format!("{}/v1/responses", s.url),
        &[("x-api-key", TOKEN)],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = data(&text);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(
        kinds.contains(&"response.custom_tool_call_input.delta")
            && kinds.contains(&"response.custom_tool_call_input.done"),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains(&"response.function_call_arguments.delta"),
        "{kinds:?}"
    );
    let done = events
        .iter()
        .find(|e| e["type"] == "response.output_item.done")
        .unwrap();
    assert_eq!(done["item"]["type"], "custom_tool_call", "{done}");
    assert_eq!(done["item"]["input"], "cat a.txt");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output"][0]["input"], "cat a.txt");
}

/// The MCP tool `responses_create` takes Codex's registry as `/v1/responses` does: the host
/// samples plain tools (a custom tool's grammar the `pattern` of its text), and the result
/// gives each call back as it was declared, valid against the tool's `outputSchema`.
#[tokio::test]
async fn responses_create_over_mcp_takes_codex_tools_and_answers_as_declared() {
    use crate::common::{ERAS, Host, assert_conforms, call, connect, is_error, structured, text};
    use rmcp::model::{CreateMessageResult, SamplingMessage};
    let tool_use = |name: &str, input: Value| {
        CreateMessageResult::new(
            SamplingMessage::assistant_tool_use(
                "toolu_1",
                name,
                input.as_object().unwrap().clone(),
            ),
            "host-model".into(),
        )
        .with_stop_reason(CreateMessageResult::STOP_REASON_TOOL_USE)
    };
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n";
    let arguments = |history: Vec<Value>| {
        let mut input = vec![
            json!({"type": "additional_tools", "role": "developer", "tools": [
            {"type": "namespace", "name": "functions", "tools": [
                {"type": "custom", "name": "apply_patch", "description": "Edits files.",
                 "format": {"type": "grammar", "syntax": "lark",
                            "definition": include_str!("../data/apply_patch.lark")}}]},
            {"type": "namespace", "name": "collaboration", "tools": [
                {"type": "function", "name": "list_agents", "description": "Lists agents.",
                 "parameters": {"type": "object", "properties": {}}}]}]}),
        ];
        input.extend(history);
        json!({"model": "m", "input": input})
    };
    for era in ERAS {
        let host = Host::new(true, move |p| {
            Ok(if p.messages.len() == 1 {
                tool_use("apply_patch", json!({"input": patch}))
            } else {
                tool_use("list_agents", json!({}))
            })
        });
        let client = connect(host.clone(), era).await;
        let r = call(
            &client,
            "responses_create",
            arguments(vec![user("Add a.txt.")]),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        let item = &structured(&r)["output"][0];
        assert_eq!(item["type"], "custom_tool_call", "{}", text(&r));
        assert_eq!(item["name"], "apply_patch");
        assert_eq!(item["namespace"], "functions");
        assert_eq!(item["input"], patch);
        // The text is the same object.
        let object: Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(&object["output"][0], item);
        assert_conforms(&client, "responses_create", &r).await;
        let sampled = &host.seen_json()[0];
        let tools = sampled["tools"].as_array().unwrap();
        let offered = tools.iter().find(|t| t["name"] == "apply_patch").unwrap();
        let pattern = offered["inputSchema"]["properties"]["input"]["pattern"]
            .as_str()
            .unwrap();
        assert!(pattern.contains("Begin Patch"), "{pattern}");

        // A namespaced function's call, after the custom call's history.
        let history = vec![
            user("Add a.txt, then list the agents."),
            json!({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
                   "namespace": "functions", "input": patch}),
            json!({"type": "custom_tool_call_output", "call_id": "c1",
                   "output": [{"type": "input_text", "text": "Done: A a.txt"}]}),
        ];
        let r = call(&client, "responses_create", arguments(history)).await;
        assert!(!is_error(&r), "{}", text(&r));
        let item = &structured(&r)["output"][0];
        assert_eq!(item["type"], "function_call", "{}", text(&r));
        assert_eq!(item["name"], "list_agents");
        assert_eq!(item["namespace"], "collaboration");
        assert_conforms(&client, "responses_create", &r).await;
        let sampled = host.seen_json()[1].to_string();
        assert!(sampled.contains("Done: A a.txt"), "{sampled}");
        client.cancel().await.unwrap();
    }
}

/// On the embedded model, a custom tool's Lark grammar holds the call: asked for Codex's
/// `apply_patch`, the small model writes a patch Codex's own grammar takes.
#[tokio::test]
async fn the_embedded_model_writes_a_patch_that_apply_patchs_grammar_takes() {
    let (_turn, s) = crate::http_api::embedded(&[("AGENT_AS_MODEL_LOCAL_SEED", "7")]).await;
    let body = json!({"model": "local", "max_output_tokens": 160,
        "tools": [{"type": "custom", "name": "apply_patch",
                   "description": "Edits files with a patch.",
                   "format": {"type": "grammar", "syntax": "lark",
                              "definition": include_str!("../data/apply_patch.lark")}}],
        "tool_choice": {"type": "custom", "name": "apply_patch"},
        "input": [user("Create the file hello.txt with the single line: hi")]});
    let answer = respond(&format!("{}/v1/responses", s.url), &body).await;
    let call = answer["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "custom_tool_call")
        .unwrap_or_else(|| panic!("no custom_tool_call: {answer}"));
    assert_eq!(call["name"], "apply_patch");
    let patch = call["input"].as_str().unwrap();
    // What apply_patch's grammar says, checked line by line here.
    let lines: Vec<&str> = patch.trim_end_matches('\n').split('\n').collect();
    assert_eq!(lines.first(), Some(&"*** Begin Patch"), "{patch:?}");
    assert_eq!(lines.last(), Some(&"*** End Patch"), "{patch:?}");
    let hunk = lines[1];
    assert!(
        ["*** Add File: ", "*** Delete File: ", "*** Update File: "]
            .iter()
            .any(|h| hunk.starts_with(h) && hunk.len() > h.len()),
        "{patch:?}"
    );
    if hunk.starts_with("*** Add File: ") {
        for line in &lines[2..lines.len() - 1] {
            assert!(line.starts_with('+'), "{patch:?}");
        }
    }
}
