//! The Responses API's WebSocket mode and `POST /v1/responses/compact`, as the Open Responses
//! compliance suite checks them, on the real binary: every message validates against the
//! specification's schemas (`tests/data/openresponses/openapi.json`). The suite's seven
//! WebSocket scenarios (a response; sequential responses; a `store: false` continuation on the
//! active socket; after a reconnect, `previous_response_not_found` then a clean recovery; a
//! missing previous response; a failed continuation evicting the connection's response; a
//! compacted window starting a new chain) and its two compaction scenarios, on a scripted
//! provider (which shows what the model was sent), the first ones on the embedded model too;
//! and the bounds: a plain GET, a message that is not a create, one over the size limit, a
//! create sent while one runs.

use crate::common::openai::{Reply, Scripted, completion};
use crate::http_api::{TOKEN, embedded, post, server, server_with};
use crate::responses_api::{assert_valid, create, event_schema, responses_url, streamed};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket to `base`'s `/v1/responses`, with the token.
pub(crate) async fn connect(base: &str) -> Socket {
    let url = format!("{}/v1/responses", base.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// What one create got: the response's events and its last response, or the `error` message
/// that refused it.
struct Turn {
    events: Vec<Value>,
    response: Option<Value>,
    error: Option<Value>,
}

impl Turn {
    /// The refusal's code.
    fn code(&self) -> &str {
        self.error.as_ref().unwrap()["error"]["code"]
            .as_str()
            .unwrap()
    }

    /// The completed response.
    fn completed(&self) -> &Value {
        let response = self
            .response
            .as_ref()
            .unwrap_or_else(|| panic!("refused: {:?}", self.error));
        assert_eq!(response["status"], "completed", "{response}");
        response
    }
}

/// Sends `body` as a `response.create`.
async fn send(socket: &mut Socket, body: &Value) {
    let mut body = body.clone();
    body["type"] = json!("response.create");
    socket
        .send(Message::Text(body.to_string().into()))
        .await
        .unwrap();
}

/// Reads one create's answer: events until the response's last (each validated, numbered from
/// 0), or the one `error` message refusing it (valid as the specification's WebSocket error
/// and as a stream's error event).
async fn answer(socket: &mut Socket) -> Turn {
    let mut events: Vec<Value> = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(180), socket.next())
            .await
            .expect("no message within 180 s")
            .expect("the connection closed")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let event: Value = serde_json::from_str(text.as_str()).unwrap();
        let kind = event["type"].as_str().unwrap().to_owned();
        if kind == "error" && events.is_empty() {
            assert_valid("WebSocketErrorEvent", &event);
            assert_valid("ErrorStreamingEvent", &event);
            return Turn {
                events,
                response: None,
                error: Some(event),
            };
        }
        assert_eq!(event["sequence_number"], events.len(), "{event}");
        assert_valid(event_schema(&kind), &event);
        let last = matches!(
            kind.as_str(),
            "response.completed" | "response.incomplete" | "response.failed"
        );
        let response = last.then(|| event["response"].clone());
        events.push(event);
        if let Some(response) = response {
            assert_valid("ResponseResource", &response);
            assert_eq!(events[0]["type"], "response.created");
            assert_eq!(events[0]["response"]["id"], response["id"]);
            return Turn {
                events,
                response: Some(response),
                error: None,
            };
        }
    }
}

/// Sends a create and reads its answer.
async fn turn(socket: &mut Socket, body: &Value) -> Turn {
    send(socket, body).await;
    answer(socket).await
}

/// The text a user turn of `seen`'s chat messages carries.
fn texts(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_response_streams_over_a_websocket_as_over_sse_and_is_stored() {
    let provider = Scripted::start(vec![streamed("stop")]).await;
    let s = server("ws-response", &provider).await;
    // A plain GET is refused as before the WebSocket mode: POST creates a response.
    let r = crate::common::http_client()
        .get(responses_url(&s.url))
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(r.headers()["allow"], "POST");

    let mut socket = connect(&s.url).await;
    let t = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini",
                "input": [{"type": "message", "role": "user", "content": "Count from 1 to 3."}]}),
    )
    .await;
    let response = t.completed();
    assert_eq!(response["output"][0]["content"][0]["text"], "Paris.");
    assert!(
        t.events
            .iter()
            .any(|e| e["type"] == "response.output_text.delta")
    );
    // Stored, as a POST's response is (store defaults to true).
    let id = response["id"].as_str().unwrap();
    let got = crate::common::http_client()
        .get(format!("{}/{id}", responses_url(&s.url)))
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status().as_u16(), 200);
    let got: Value = got.json().await.unwrap();
    assert_eq!(&got, response);
}

#[tokio::test]
async fn sequential_responses_share_one_socket() {
    let provider = Scripted::start(vec![streamed("stop"), streamed("stop")]).await;
    let s = server("ws-sequential", &provider).await;
    let mut socket = connect(&s.url).await;
    let first = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "input": "Reply with exactly: first"}),
    )
    .await;
    let second = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "input": "Reply with exactly: second"}),
    )
    .await;
    assert_ne!(first.completed()["id"], second.completed()["id"]);
    assert_eq!(second.completed()["store"], false);
    assert_eq!(provider.seen().len(), 2);
}

#[tokio::test]
async fn a_store_false_response_continues_on_its_socket_with_only_the_new_input() {
    let provider = Scripted::start(vec![streamed("stop"), streamed("stop")]).await;
    let s = server("ws-continuation", &provider).await;
    let mut socket = connect(&s.url).await;
    let first = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false,
                "input": "Remember the code word: cobalt. Reply with OK."}),
    )
    .await;
    let id = first.completed()["id"].clone();
    let second = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "previous_response_id": id,
                "input": "What is the code word? Reply with only the code word."}),
    )
    .await;
    assert_eq!(second.completed()["previous_response_id"], id);
    // The model was sent the whole conversation.
    let seen = provider.seen();
    assert_eq!(
        texts(&seen[1].body["messages"]),
        [
            "Remember the code word: cobalt. Reply with OK.",
            "Paris.",
            "What is the code word? Reply with only the code word."
        ]
    );
    // Nothing was stored: over HTTP the response is not found.
    let (status, refused) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "previous_response_id": id, "input": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "previous_response_not_found");
}

#[tokio::test]
async fn after_a_reconnect_a_store_false_chain_is_not_found_and_a_new_one_starts() {
    let provider = Scripted::start(vec![streamed("stop"), streamed("stop")]).await;
    let s = server("ws-reconnect", &provider).await;
    let mut socket = connect(&s.url).await;
    let first = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false,
                "input": "Remember the code word: copper. Reply with OK."}),
    )
    .await;
    let id = first.completed()["id"].clone();
    socket.close(None).await.unwrap();
    let mut socket = connect(&s.url).await;
    let lost = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "previous_response_id": id,
                "input": "Try to continue after reconnect. Reply with exactly: reconnected"}),
    )
    .await;
    assert_eq!(lost.code(), "previous_response_not_found");
    let error = lost.error.as_ref().unwrap();
    assert_eq!(error["status"], 400);
    assert_eq!(error["error"]["param"], "previous_response_id");
    let recovered = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "input": [
            {"type": "message", "role": "user",
             "content": "Start a new response and reply with exactly: recovered"}]}),
    )
    .await;
    assert_eq!(recovered.completed()["previous_response_id"], Value::Null);
}

#[tokio::test]
async fn a_missing_previous_response_is_refused_by_name() {
    let provider = Scripted::start(vec![]).await;
    let s = server("ws-missing", &provider).await;
    let mut socket = connect(&s.url).await;
    let t = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false,
                "previous_response_id": "resp_openresponses_missing_1",
                "input": "This should fail because the previous response is missing."}),
    )
    .await;
    assert_eq!(t.code(), "previous_response_not_found");
    assert!(provider.seen().is_empty());
}

#[tokio::test]
async fn a_failed_continuation_evicts_the_connections_response() {
    let provider = Scripted::start(vec![streamed("stop")]).await;
    let s = server("ws-evict", &provider).await;
    let mut socket = connect(&s.url).await;
    let first = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false,
                "input": "Remember the code word: ember. Reply with OK."}),
    )
    .await;
    let id = first.completed()["id"].clone();
    // A tool output for a call the response never made: refused.
    let failed = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "previous_response_id": id,
                "input": [{"type": "function_call_output", "call_id": "call_openresponses_missing",
                           "output": "No matching tool call exists in the previous response."}]}),
    )
    .await;
    let error = failed.error.as_ref().expect("the continuation should fail");
    assert_eq!(error["status"], 400, "{error}");
    // The response it named is gone from the connection.
    let stale = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "previous_response_id": id,
                "input": "Try to continue after the failed turn. Reply with exactly: stale"}),
    )
    .await;
    assert_eq!(stale.code(), "previous_response_not_found");
    assert_eq!(provider.seen().len(), 1);
}

/// The suite's compaction conversation.
fn slate() -> Value {
    json!([
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Remember the compaction code word: slate."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "OK."}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Compress this conversation for later continuation."}]}
    ])
}

/// `POST /v1/responses/compact` with `body`: its status and object.
async fn compact(base: &str, body: &Value) -> (u16, Value) {
    let url = format!("{}/compact", responses_url(base));
    let (status, _, text) = post(&url, &[("x-api-key", TOKEN)], body).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

/// A compacted window, checked: valid, every item valid, its last the compaction item.
fn assert_compacted(compacted: &Value) {
    assert_valid("CompactResource", compacted);
    assert_eq!(compacted["object"], "response.compaction");
    let output = compacted["output"].as_array().unwrap();
    for item in output {
        assert_valid("ItemField", item);
    }
    let last = output.last().unwrap();
    assert_eq!(last["type"], "compaction", "{compacted}");
    assert!(last["id"].as_str().unwrap().starts_with("cmp_"));
}

#[tokio::test]
async fn a_compacted_window_starts_a_new_chain_on_a_websocket() {
    let provider = Scripted::start(vec![
        Reply::json(200, &completion("The user set the code word: slate.")),
        streamed("stop"),
    ])
    .await;
    let s = server("ws-compact", &provider).await;
    let (status, compacted) =
        compact(&s.url, &json!({"model": "gpt-4o-mini", "input": slate()})).await;
    assert_eq!(status, 200, "{compacted}");
    assert_compacted(&compacted);
    // The user's two messages are kept, the assistant's is in the summary.
    assert_eq!(compacted["output"].as_array().unwrap().len(), 3);
    assert_eq!(compacted["usage"]["input_tokens"], 11);
    // The model was asked to summarize the conversation.
    let seen = provider.seen();
    let asked = texts(&seen[0].body["messages"]);
    assert_eq!(asked[2], "OK.");
    assert!(
        asked
            .last()
            .unwrap()
            .starts_with("Summarize the conversation above")
    );

    let mut input = compacted["output"].as_array().unwrap().clone();
    input.push(json!({"type": "message", "role": "user",
                      "content": "Continue from here. Reply with exactly: compacted"}));
    let mut socket = connect(&s.url).await;
    let t = turn(
        &mut socket,
        &json!({"model": "gpt-4o-mini", "store": false, "input": input, "tools": []}),
    )
    .await;
    t.completed();
    let sent = texts(&provider.seen()[1].body["messages"]);
    assert_eq!(
        sent,
        [
            "Remember the compaction code word: slate.",
            "Compress this conversation for later continuation.",
            "Summary of the earlier conversation, compacted:\n\nThe user set the code word: slate.",
            "Continue from here. Reply with exactly: compacted"
        ]
    );
}

#[tokio::test]
async fn compact_makes_a_window_a_response_takes_back_and_wants_a_model() {
    let provider = Scripted::start(vec![
        Reply::json(200, &completion("Paris.")),
        Reply::json(200, &completion("Launch Tuesday; support first.")),
        Reply::json(200, &completion("Tuesday.")),
    ])
    .await;
    let s = server("compact-http", &provider).await;
    // The suite's request, with the conversation whole.
    let conversation = json!([
        {"type": "message", "role": "user",
         "content": "We agreed to launch on Tuesday and notify support first."},
        {"type": "message", "role": "assistant",
         "content": "Understood. The launch is Tuesday, with support notified beforehand."}
    ]);
    let (status, stored) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "input": conversation[0]["content"]}),
    )
    .await;
    assert_eq!(status, 200, "{stored}");
    // A stored response continued by the input, compacted.
    let (status, compacted) = compact(
        &s.url,
        &json!({"model": "gpt-4o-mini", "prompt_cache_key": "openresponses-compact-test",
                "previous_response_id": stored["id"],
                "input": [conversation[1].clone(),
                          {"type": "message", "role": "user", "content": "When do we launch?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{compacted}");
    assert_compacted(&compacted);
    let output = compacted["output"].as_array().unwrap();
    assert_eq!(output.len(), 3, "{compacted}");
    assert_eq!(
        output[0]["content"][0]["text"],
        "We agreed to launch on Tuesday and notify support first."
    );
    // The window is a next request's input, over HTTP too.
    let (status, next) = create(&s.url, &json!({"model": "gpt-4o-mini", "input": output})).await;
    assert_eq!(status, 200, "{next}");
    assert_valid("ResponseResource", &next);
    let sent = texts(&provider.seen()[2].body["messages"]);
    assert_eq!(
        sent.last().unwrap(),
        "Summary of the earlier conversation, compacted:\n\nLaunch Tuesday; support first."
    );

    // Without a model, or with nothing to compact: 400, naming the field.
    let (status, refused) = compact(
        &s.url,
        &json!({"input": [{"type": "message", "role": "user", "content": "Compact this conversation."}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "model");
    let (status, refused) = compact(&s.url, &json!({"model": "gpt-4o-mini"})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input");
    // A compaction item made elsewhere cannot be read: refused by name.
    let (status, refused) = create(
        &s.url,
        &json!({"model": "gpt-4o-mini", "input": [
            {"type": "compaction", "encrypted_content": "gAAAAABpM0Yj-x="},
            {"role": "user", "content": "Go on."}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input[0].encrypted_content");
    assert_eq!(provider.seen().len(), 3);
}

#[tokio::test]
async fn a_socket_is_bounded_and_answers_one_create_at_a_time() {
    let provider = Scripted::start(vec![streamed("stop"), streamed("stop")]).await;
    let s = server_with(
        "ws-bounds",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "1024")],
    )
    .await;
    let mut socket = connect(&s.url).await;
    // What is not a create is refused, and the connection goes on.
    let other = json!({"type": "session.update", "model": "gpt-4o-mini", "input": "x"});
    socket
        .send(Message::Text(other.to_string().into()))
        .await
        .unwrap();
    let t = answer(&mut socket).await;
    assert_eq!(t.error.as_ref().unwrap()["error"]["param"], "type");
    socket
        .send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    let t = answer(&mut socket).await;
    assert_eq!(t.error.as_ref().unwrap()["status"], 400);
    // Two creates sent at once are answered one after the other.
    let body = json!({"model": "gpt-4o-mini", "store": false, "input": "Hi"});
    send(&mut socket, &body).await;
    send(&mut socket, &body).await;
    let first = answer(&mut socket).await;
    let second = answer(&mut socket).await;
    assert_ne!(first.completed()["id"], second.completed()["id"]);
    // A message over the request size limit closes the connection, saying why.
    let big = "x".repeat(2 * 1024 * 1024);
    let _ = socket
        .send(Message::Text(
            json!({"type": "response.create", "input": big})
                .to_string()
                .into(),
        ))
        .await;
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(message) = socket.next().await {
            match message {
                Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .unwrap();
    assert_eq!(closed, Some(1009));
}

/// The suite's first scenarios on the embedded model: a response, then a `store: false`
/// continuation on the same socket.
#[tokio::test]
async fn the_embedded_model_answers_and_continues_over_a_websocket() {
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN)]).await;
    let mut socket = connect(&s.url).await;
    let first = turn(
        &mut socket,
        &json!({"model": "local", "store": false, "max_output_tokens": 8,
                "input": [{"type": "message", "role": "user", "content": "Count from 1 to 3."}]}),
    )
    .await;
    let response = first.response.as_ref().unwrap();
    assert_ne!(response["status"], "failed", "{response}");
    let second = turn(
        &mut socket,
        &json!({"model": "local", "store": false, "max_output_tokens": 8,
                "previous_response_id": response["id"], "input": "And then?"}),
    )
    .await;
    let next = second.response.as_ref().unwrap();
    assert_ne!(next["status"], "failed", "{next}");
    assert_eq!(next["previous_response_id"], response["id"]);
    assert!(next["usage"]["input_tokens"].as_u64() > response["usage"]["input_tokens"].as_u64());
}
