//! The Responses API to the letter of the Open Responses specification: every response object
//! (whole, each streamed event, retrieved) validates against the specification's schemas
//! (`tests/data/openresponses/openapi.json`); ids are `resp_`, `msg_`, `fc_`; the stream and the
//! whole answer agree; an answer cut by `max_output_tokens` is `incomplete`; a conversation
//! continues by `previous_response_id`, a tool call answered by its `function_call_output`; a
//! response is retrieved and deleted, and `store: false` keeps nothing. On a scripted provider
//! and on the embedded model.

use crate::common::openai::{Reply, Scripted, completion};
use crate::http_api::{TOKEN, data, embedded, post, server};
use serde_json::{Value, json};
use std::time::Duration;

/// The validator of the specification's schema `name`.
pub(crate) fn validator(name: &str) -> jsonschema::Validator {
    let doc: Value =
        serde_json::from_str(include_str!("../data/openresponses/openapi.json")).unwrap();
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"],
    });
    jsonschema::validator_for(&root).unwrap()
}

/// `value` validates against the schema `name`.
pub(crate) fn assert_valid(name: &str, value: &Value) {
    let v = validator(name);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .take(12)
        .collect();
    assert!(
        errors.is_empty(),
        "not a valid {name}:\n{}\n{value:#}",
        errors.join("\n")
    );
}

/// The schema of a streamed event of type `kind`.
pub(crate) fn event_schema(kind: &str) -> &'static str {
    match kind {
        "response.created" => "ResponseCreatedStreamingEvent",
        "response.in_progress" => "ResponseInProgressStreamingEvent",
        "response.completed" => "ResponseCompletedStreamingEvent",
        "response.incomplete" => "ResponseIncompleteStreamingEvent",
        "response.failed" => "ResponseFailedStreamingEvent",
        "response.output_item.added" => "ResponseOutputItemAddedStreamingEvent",
        "response.output_item.done" => "ResponseOutputItemDoneStreamingEvent",
        "response.content_part.added" => "ResponseContentPartAddedStreamingEvent",
        "response.content_part.done" => "ResponseContentPartDoneStreamingEvent",
        "response.output_text.delta" => "ResponseOutputTextDeltaStreamingEvent",
        "response.output_text.done" => "ResponseOutputTextDoneStreamingEvent",
        "response.function_call_arguments.delta" => {
            "ResponseFunctionCallArgumentsDeltaStreamingEvent"
        }
        "response.function_call_arguments.done" => {
            "ResponseFunctionCallArgumentsDoneStreamingEvent"
        }
        "error" => "ErrorStreamingEvent",
        other => panic!("an event the specification does not have: {other}"),
    }
}

/// A stream's events: each validates against its schema, names its type in the `event:` line
/// too, and the sequence numbers count from 0. The last event's response is returned.
fn assert_valid_stream(text: &str) -> (Vec<Value>, Value) {
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    let events = data(text);
    assert_eq!(names.len(), events.len(), "{text}");
    for (i, (name, event)) in names.iter().zip(&events).enumerate() {
        assert_eq!(event["type"], *name, "{event}");
        assert_eq!(event["sequence_number"], i, "{text}");
        assert_valid(event_schema(name), event);
    }
    let last = events.last().unwrap()["response"].clone();
    (events, last)
}

pub(crate) fn responses_url(base: &str) -> String {
    format!("{base}/v1/responses")
}

pub(crate) async fn create(base: &str, body: &Value) -> (u16, Value) {
    let (status, _, text) = post(&responses_url(base), &[("x-api-key", TOKEN)], body).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

async fn get(url: &str) -> (u16, Value) {
    let r = crate::common::http_client()
        .get(url)
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn delete(url: &str) -> (u16, Value) {
    let r = crate::common::http_client()
        .delete(url)
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn chunk(delta: Value, finish: Value) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

/// "Paris." streamed in two pieces, ended by `finish`.
pub(crate) fn streamed(finish: &str) -> Reply {
    Reply::Events(
        vec![
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Par"}), Value::Null),
            chunk(json!({"content": "is."}), Value::Null),
            chunk(json!({}), json!(finish)),
            "[DONE]".into(),
        ],
        Duration::from_millis(10),
    )
}

fn cut(text: &str) -> Value {
    let mut c = completion(text);
    c["choices"][0]["finish_reason"] = json!("length");
    c
}

fn weather_call() -> Value {
    json!({"id": "chatcmpl-tool", "object": "chat.completion", "model": "upstream",
           "choices": [{"index": 0, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": null, "tool_calls": [
                            {"id": "call_w1", "type": "function",
                             "function": {"name": "get_weather",
                                          "arguments": "{\"city\": \"Paris\"}"}}]}}],
           "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}})
}

const WEATHER_TOOL: &str = r#"{"type": "function", "name": "get_weather",
    "description": "Weather for a city", "strict": false,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}"#;

#[tokio::test]
async fn whole_streamed_and_retrieved_responses_validate_and_agree() {
    let provider = Scripted::start(vec![
        Reply::json(200, &completion("Paris.")),
        streamed("stop"),
    ])
    .await;
    let s = server("responses-valid", &provider).await;
    let body = json!({"model": "gpt-4o-mini", "input": "Capital of France?",
                      "instructions": "Be brief.", "temperature": 0.2,
                      "metadata": {"k": "v"}});
    let (status, whole) = create(&s.url, &body).await;
    assert_eq!(status, 200, "{whole}");
    assert_valid("ResponseResource", &whole);
    assert!(
        whole["id"].as_str().unwrap().starts_with("resp_"),
        "{whole}"
    );
    assert!(
        whole["output"][0]["id"]
            .as_str()
            .unwrap()
            .starts_with("msg_"),
        "{whole}"
    );
    assert_eq!(whole["status"], "completed");
    assert_eq!(whole["output"][0]["status"], "completed");
    assert_eq!(whole["output"][0]["content"][0]["text"], "Paris.");
    assert_eq!(whole["instructions"], "Be brief.");
    assert_eq!(whole["temperature"], 0.2);
    assert_eq!(whole["metadata"], json!({"k": "v"}));
    assert_eq!(whole["usage"]["input_tokens"], 11);
    assert_eq!(
        whole["usage"]["output_tokens_details"]["reasoning_tokens"],
        0
    );

    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let (status, _, text) = post(
        &responses_url(&s.url),
        &[("x-api-key", TOKEN)],
        &streamed_body,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (events, last) = assert_valid_stream(&text);
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    assert_valid("ResponseResource", &last);
    // The stream's response is the whole one's shape, under one id from start to end.
    assert_eq!(events[0]["response"]["id"], last["id"]);
    // The model is the backend's, as it reports it (the scripted provider names another in
    // its whole answer than in its stream).
    assert_eq!(events[0]["response"]["model"], "upstream");
    assert_eq!(last["model"], "upstream");
    assert_eq!(whole["model"], "scripted-model");
    assert_eq!(last["output"][0]["content"][0]["text"], "Paris.");
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&last), keys(&whole));
    assert_eq!(keys(&last["output"][0]), keys(&whole["output"][0]));

    // Both are stored and retrieved as they were sent.
    for made in [&whole, &last] {
        let url = format!("{}/{}", responses_url(&s.url), made["id"].as_str().unwrap());
        let (status, got) = get(&url).await;
        assert_eq!(status, 200, "{got}");
        assert_valid("ResponseResource", &got);
        assert_eq!(&got, made);
    }
}

#[tokio::test]
async fn an_answer_cut_by_max_output_tokens_is_incomplete_whole_and_streamed() {
    let provider = Scripted::start(vec![Reply::json(200, &cut("Par")), streamed("length")]).await;
    let s = server("responses-cut", &provider).await;
    let body = json!({"model": "gpt-4o-mini", "input": "Capital of France?",
                      "max_output_tokens": 2});
    let (status, whole) = create(&s.url, &body).await;
    assert_eq!(status, 200, "{whole}");
    assert_valid("ResponseResource", &whole);
    assert_eq!(whole["status"], "incomplete");
    assert_eq!(whole["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(whole["output"][0]["status"], "incomplete");
    assert_eq!(whole["max_output_tokens"], 2);

    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let (_, _, text) = post(
        &responses_url(&s.url),
        &[("x-api-key", TOKEN)],
        &streamed_body,
    )
    .await;
    let (events, last) = assert_valid_stream(&text);
    assert_eq!(
        events.last().unwrap()["type"],
        "response.incomplete",
        "{text}"
    );
    assert!(!text.contains("response.completed"), "{text}");
    assert_eq!(last["status"], "incomplete");
    assert_eq!(last["output"][0]["status"], "incomplete");
}

#[tokio::test]
async fn a_tool_call_is_answered_by_its_output_in_a_conversation_kept_by_the_server() {
    let provider = Scripted::start(vec![
        Reply::json(200, &weather_call()),
        Reply::json(200, &completion("It is 21 C in Paris.")),
        streamed("stop"),
    ])
    .await;
    let s = server("responses-tool", &provider).await;
    let tool: Value = serde_json::from_str(WEATHER_TOOL).unwrap();
    let (status, first) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "input": "Weather in Paris?", "tools": [tool.clone()]}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_valid("ResponseResource", &first);
    let call = &first["output"][0];
    assert_eq!(call["type"], "function_call", "{first}");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{first}");
    assert_eq!(call["status"], "completed");
    assert_eq!(first["tools"][0]["name"], "get_weather");

    // The call answered by id alone: the server has the call.
    let (status, second) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "previous_response_id": first["id"],
                "tools": [tool.clone()],
                "input": [{"type": "function_call_output", "call_id": call["call_id"],
                           "output": "21 C"}]}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_valid("ResponseResource", &second);
    assert_eq!(second["previous_response_id"], first["id"]);
    assert_eq!(
        second["output"][0]["content"][0]["text"],
        "It is 21 C in Paris."
    );

    // A third turn, streamed, continues from the second.
    let (status, _, text) = post(
        &responses_url(&s.url),
        &[("x-api-key", TOKEN)],
        &json!({"model": "gpt-4o-mini", "previous_response_id": second["id"],
                "input": "Thanks.", "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (_, third) = assert_valid_stream(&text);
    assert_eq!(third["previous_response_id"], second["id"]);

    let seen = provider.seen();
    assert_eq!(seen.len(), 3);
    let messages = &seen[1].body["messages"];
    assert_eq!(messages[0]["role"], "user", "{messages:#}");
    assert_eq!(messages[1]["role"], "assistant", "{messages:#}");
    assert_eq!(
        messages[1]["tool_calls"][0]["id"], "call_w1",
        "{messages:#}"
    );
    assert_eq!(messages[2]["role"], "tool", "{messages:#}");
    assert_eq!(messages[2]["tool_call_id"], "call_w1", "{messages:#}");
    let messages = seen[2].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5, "{messages:#?}");
    assert_eq!(messages[3]["content"], "It is 21 C in Paris.");
    assert_eq!(messages[4]["content"], "Thanks.");
}

#[tokio::test]
async fn responses_are_retrieved_deleted_and_not_kept_with_store_false() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server("responses-store", &provider).await;
    let base = responses_url(&s.url);
    let (_, kept) = create(&s.url, &json!({"model": "gpt-4o-mini", "input": "Hi"})).await;
    let id = kept["id"].as_str().unwrap();
    let (status, items) = get(&format!("{base}/{id}/input_items")).await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["object"], "list");
    // As OpenAI lists input items: an id, a status, the text as an input_text part.
    let item = &items["data"][0];
    assert_eq!(
        item["content"],
        json!([{"type": "input_text", "text": "Hi"}])
    );
    assert!(item["id"].as_str().unwrap().starts_with("msg_"), "{item}");
    assert_eq!(item["status"], "completed");
    assert_eq!(items["first_id"], item["id"]);
    let (status, deleted) = delete(&format!("{base}/{id}")).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response", "deleted": true})
    );
    let (status, gone) = get(&format!("{base}/{id}")).await;
    assert_eq!(status, 404, "{gone}");
    assert_eq!(gone["error"]["type"], "invalid_request_error");
    let (status, gone) = delete(&format!("{base}/{id}")).await;
    assert_eq!(status, 404, "{gone}");
    // Continuing from it is refused by name.
    let (status, refused) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "input": "x", "previous_response_id": id}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "previous_response_not_found");
    assert_eq!(refused["error"]["param"], "previous_response_id");
    // store: false keeps nothing (and says so).
    let (status, unkept) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "input": "Hi", "store": false}),
    )
    .await;
    assert_eq!(status, 200, "{unkept}");
    assert_eq!(unkept["store"], false);
    let (status, _) = get(&format!("{base}/{}", unkept["id"].as_str().unwrap())).await;
    assert_eq!(status, 404);
    // Background responses are not run here: refused by name, never accepted and lost.
    let (status, refused) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "input": "Hi", "background": true}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "background");
}

/// The embedded model's answers, whole, streamed and cut, are valid responses too.
#[tokio::test]
async fn the_embedded_models_responses_validate_whole_streamed_and_cut() {
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN)]).await;
    let (status, whole) = create(
        &s.url,
        &json!({"model": "local", "input": "Say hello.", "max_output_tokens": 16}),
    )
    .await;
    assert_eq!(status, 200, "{whole}");
    assert_valid("ResponseResource", &whole);
    let (status, _, text) = post(
        &responses_url(&s.url),
        &[("x-api-key", TOKEN)],
        &json!({"model": "local", "input": "Count from 1 to 20.", "max_output_tokens": 4,
                "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (events, last) = assert_valid_stream(&text);
    assert_eq!(events.last().unwrap()["type"], "response.incomplete");
    assert_eq!(last["usage"]["output_tokens"], 4);
    assert_eq!(events[0]["response"]["model"], last["model"]);
    assert_eq!(last["model"], whole["model"]);
}

/// The Open Responses compliance suite's HTTP scenarios (basic text, assistant history with
/// `phase` labels, streaming, a system message, tool calling, a multi-turn history), as its
/// requests send them, on the embedded model: each answer validates and has what the scenario
/// checks. (Its image scenario sends a remote URL, which this server never fetches: a 400
/// naming the field; its compaction and WebSocket scenarios have tests of their own.)
#[tokio::test]
async fn the_open_responses_scenarios_pass_on_the_embedded_model() {
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN)]).await;
    let user = |text: &str| json!({"type": "message", "role": "user", "content": text});
    let scenarios = [
        (
            "basic",
            json!({"input": [user("Say hello in exactly 3 words.")]}),
        ),
        (
            "assistant phase",
            json!({"input": [
                user("Hi, my name is Ann."),
                {"type": "message", "role": "assistant", "phase": "commentary",
                 "content": [{"type": "output_text", "text": "Noting the name."}]},
                {"type": "message", "role": "assistant", "phase": "final_answer",
                 "content": "Hello Ann!"},
                user("What is my name?")]}),
        ),
        (
            "system prompt",
            json!({"input": [
                {"type": "message", "role": "system", "content": "Always answer in French."},
                user("Say hello.")]}),
        ),
        (
            "tool calling",
            json!({"input": [user("What is the weather like in San Francisco?")],
                   "tools": [{"type": "function", "name": "get_weather",
                              "description": "Get the current weather for a location",
                              "parameters": {"type": "object", "properties": {
                                  "location": {"type": "string"}}, "required": ["location"]}}]}),
        ),
        (
            "multi-turn",
            json!({"input": [user("My favourite colour is blue."),
                             {"type": "message", "role": "assistant", "content": "Noted."},
                             user("What is my favourite colour?")]}),
        ),
    ];
    for (name, mut body) in scenarios {
        body["model"] = json!("local");
        body["max_output_tokens"] = json!(48);
        let (status, r) = create(&s.url, &body).await;
        assert_eq!(status, 200, "{name}: {r}");
        assert_valid("ResponseResource", &r);
        assert!(!r["output"].as_array().unwrap().is_empty(), "{name}: {r}");
        if name == "tool calling" {
            assert_eq!(r["output"][0]["type"], "function_call", "{name}: {r}");
            assert_eq!(r["output"][0]["name"], "get_weather", "{name}: {r}");
        } else {
            assert_eq!(r["output"][0]["type"], "message", "{name}: {r}");
        }
    }
    let mut body = json!({"model": "local", "stream": true, "max_output_tokens": 24,
                          "input": [user("Count from 1 to 5.")]});
    let (status, _, text) = post(&responses_url(&s.url), &[("x-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{text}");
    let (events, last) = assert_valid_stream(&text);
    assert_eq!(events[0]["type"], "response.created");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "response.output_text.delta")
    );
    assert_valid("ResponseResource", &last);
    // The image scenario's remote URL: refused by name, nothing fetched.
    body = json!({"model": "local", "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What is in this image?"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg"}]}]});
    let (status, e) = create(&s.url, &body).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "input[0].content[1].image_url");
}

/// A follow-up that names no model (Codex App sends none) continues with the model of the
/// response it follows, not the default one, over HTTP and over a chain of follow-ups.
#[tokio::test]
async fn a_follow_up_without_a_model_continues_with_the_model_it_follows() {
    let first = Scripted::start(vec![Reply::json(200, &completion("From the first."))]).await;
    let second = Scripted::start(vec![Reply::json(200, &completion("From the second."))]).await;
    let dir = std::env::temp_dir().join(format!("aam-follow-up-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    std::fs::write(
        &path,
        format!(
            "default = \"first\"\n\
             [[models]]\nname = \"first\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream-1\"\nretries = 0\n\n\
             [[models]]\nname = \"second\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream-2\"\nretries = 0\n",
            first.url, second.url
        ),
    )
    .unwrap();
    let s = crate::http::start(&[
        ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    let (status, started) = create(&s.url, &json!({"model": "second", "input": "Hi"})).await;
    assert_eq!(status, 200, "{started}");
    let mut previous = started["id"].as_str().unwrap().to_owned();
    for turn in ["And then?", "And after that?"] {
        let (status, next) = create(
            &s.url,
            &json!({"input": turn, "previous_response_id": previous}),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(
            next["output"][0]["content"][0]["text"], "From the second.",
            "{next}"
        );
        previous = next["id"].as_str().unwrap().to_owned();
    }
    assert_eq!(first.seen().len(), 0, "the default model was asked");
    assert_eq!(second.seen().len(), 3);
}
