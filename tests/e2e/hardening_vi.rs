//! Hardening VI, on the real binary: what a small request can make the server hold that its
//! body did not carry is counted against the buffer requests share
//! (`AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES`) and the cap on JSON values
//! (`AGENT_AS_MODEL_MAX_JSON_VALUES`): a stored conversation a request continues, a WebSocket
//! message, the last response a WebSocket keeps, a whole answer waiting for a reader that never
//! reads (which is also cut at the write timeout). And a model list that stays linear in the
//! models file, with `/healthz` answering throughout.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::{HealthWatch, http_client};
use crate::http::Replica;
use crate::http_api::{TOKEN, open_stream, server_with, text_chunk};
use crate::http_limits::cpu_seconds;
use crate::responses_ws::{Socket, connect};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

fn responses_url(server: &Replica) -> String {
    format!("{}/v1/responses", server.url)
}

/// A `POST /v1/responses` of `body`: its status and JSON.
async fn create(server: &Replica, body: &Value) -> (u16, Value) {
    let response = http_client()
        .post(responses_url(server))
        .header("x-api-key", TOKEN)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(json!({"text": text})),
    )
}

/// About `bytes` of text as user messages of 800,000 characters (under the limit on one).
fn big_input(bytes: usize) -> Value {
    let messages: Vec<Value> = (0..bytes.div_ceil(800_000))
        .map(|_| json!({"role": "user", "content": "word ".repeat(160_000)}))
        .collect();
    Value::Array(messages)
}

/// One user message of `parts` text parts (about five JSON values each).
fn many_parts(parts: usize) -> Value {
    let content: Vec<Value> = (0..parts)
        .map(|_| json!({"type": "input_text", "text": "a"}))
        .collect();
    json!([{"role": "user", "content": content}])
}

/// A stored conversation counts against the values cap with the request that continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_conversation_counts_against_the_values_cap() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok"))]).await;
    let server = server_with(
        "vi-values",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_JSON_VALUES", "20000")],
    )
    .await;
    // 2,400 parts: about 12,000 values, stored.
    let (status, first) = create(
        &server,
        &json!({"model": "scripted", "input": many_parts(2400)}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap();
    // A small continuation fits.
    let (status, next) = create(
        &server,
        &json!({"model": "scripted", "input": "and then?", "previous_response_id": id}),
    )
    .await;
    assert_eq!(status, 200, "{next}");
    // One of 10,000 values would hold 22,000 with the conversation: refused, naming the cap.
    let (status, refused) = create(
        &server,
        &json!({"model": "scripted", "input": many_parts(2000), "previous_response_id": id}),
    )
    .await;
    assert_eq!(status, 413, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("AGENT_AS_MODEL_MAX_JSON_VALUES"),
        "{message}"
    );
    assert_eq!(refused["error"]["param"], "previous_response_id");
}

/// Requests continuing a large stored conversation hold its memory against the shared buffer:
/// while some are in flight, more are refused 503 with Retry-After naming the setting; once
/// they end, the bytes are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuing_a_large_stored_conversation_holds_the_shared_buffer() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let last = json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
                      "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let gated = Reply::Gated(
        vec![text_chunk("thinking")],
        gate.clone(),
        vec![text_chunk(" done"), last.to_string(), "[DONE]".into()],
    );
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok")), gated]).await;
    let server = server_with(
        "vi-buffer",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", "50000000")],
    )
    .await;
    // 4 MB of text, stored (its body takes about 20 MB of the 50 while it is answered).
    let (status, first) = create(
        &server,
        &json!({"model": "scripted", "input": big_input(4_000_000)}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap().to_owned();
    // Each streamed continuation holds about 20 MB while its provider is held at the gate.
    let body = json!({"model": "scripted", "input": "more", "previous_response_id": id,
                      "stream": true});
    let mut open = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..4 {
        let response = open_stream(&responses_url(&server), &body).await;
        match response.status().as_u16() {
            200 => open.push(response),
            503 => {
                assert!(response.headers().contains_key("retry-after"));
                refused.push(response.text().await.unwrap());
            }
            other => panic!("{other}: {}", response.text().await.unwrap()),
        }
    }
    assert!(!open.is_empty(), "no continuation was answered");
    assert!(
        !refused.is_empty(),
        "{} continuations of a 4 MB conversation were all held under a 50 MB buffer",
        open.len()
    );
    assert!(
        refused[0].contains("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES"),
        "{}",
        refused[0]
    );
    // Released: the streams end, and the next continuation is answered. (The provider's
    // connections wait at the gate a moment after their first event is sent.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.notify_waiters();
    for response in open {
        let events = response.text().await.unwrap();
        assert!(events.contains("response.completed"), "{events}");
    }
    // The provider holds every later request at the gate too: keep it open.
    let opener = {
        let gate = gate.clone();
        tokio::spawn(async move {
            loop {
                gate.notify_waiters();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (status, next) = create(
        &server,
        &json!({"model": "scripted", "input": "again", "previous_response_id": id}),
    )
    .await;
    opener.abort();
    assert_eq!(status, 200, "{next}");
}

/// Sends a create and reads until its last event or its refusal: that message.
async fn ws_turn(socket: &mut Socket, body: &Value) -> Value {
    let mut body = body.clone();
    body["type"] = json!("response.create");
    socket
        .send(Message::Text(body.to_string().into()))
        .await
        .unwrap();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(60), socket.next())
            .await
            .expect("no message within 60 s")
            .expect("the connection closed")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let event: Value = serde_json::from_str(text.as_str()).unwrap();
        if matches!(
            event["type"].as_str(),
            Some("error" | "response.completed" | "response.failed" | "response.incomplete")
        ) {
            return event;
        }
    }
}

/// A WebSocket message's JSON values count against the cap, as a body's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_message_is_held_to_the_values_cap() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok"))]).await;
    let server = server_with(
        "vi-ws-values",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_JSON_VALUES", "5000")],
    )
    .await;
    let mut socket = connect(&server.url).await;
    let refused = ws_turn(
        &mut socket,
        &json!({"model": "scripted", "input": many_parts(2000), "store": false}),
    )
    .await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["status"], 413, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("AGENT_AS_MODEL_MAX_JSON_VALUES"),
        "{message}"
    );
    // The connection serves the next create.
    let answered = ws_turn(
        &mut socket,
        &json!({"model": "scripted", "input": "hi", "store": false}),
    )
    .await;
    assert_eq!(answered["type"], "response.completed", "{answered}");
}

/// Each idle WebSocket keeps its last response, and holds its bytes of the shared buffer for
/// it: past the buffer, a create is refused naming the setting instead of the server growing
/// by a connection's worth each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_websockets_keep_their_last_responses_within_the_shared_buffer() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok"))]).await;
    let server = server_with(
        "vi-ws-idle",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", "40000000")],
    )
    .await;
    // 3 MB of text per create: its message takes about 15 MB while answered, and the
    // connection keeps about 3 MB after.
    let body = json!({"model": "scripted", "input": big_input(3_000_000), "store": false});
    let mut sockets = Vec::new();
    let mut refusal = None;
    for _ in 0..12 {
        let mut socket = connect(&server.url).await;
        let event = ws_turn(&mut socket, &body).await;
        sockets.push(socket);
        if event["type"] == "error" {
            refusal = Some(event);
            break;
        }
        assert_eq!(event["type"], "response.completed", "{event}");
    }
    let refusal = refusal.expect("twelve idle connections each kept 3 MB under a 40 MB buffer");
    assert_eq!(refusal["status"], 503, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES"),
        "{message}"
    );
    // The connections that went idle still continue their own responses.
    assert!(sockets.len() >= 2, "{}", sockets.len());
    // Closing them gives their bytes back: a new connection's create is answered.
    sockets.clear();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut socket = connect(&server.url).await;
    let event = ws_turn(&mut socket, &body).await;
    assert_eq!(event["type"], "response.completed", "{event}");
}

/// Pings keep a WebSocket open but do not make it idle for longer than the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_do_not_extend_a_websockets_idle_time() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok"))]).await;
    let server = server_with(
        "vi-ws-ping",
        &provider,
        "",
        &[("AGENT_AS_MODEL_WEBSOCKET_IDLE_SECS", "2")],
    )
    .await;
    let mut socket = connect(&server.url).await;
    // Pings every 300 ms at most, until the server closes the socket: it answers pings (pongs
    // come first, so the socket was open and pinged), and closes it all the same, before the
    // test's deadline.
    let pongs = crate::common::before(
        Duration::from_secs(10),
        "a pinging socket closed with a 2 s idle limit",
        async {
            let mut pongs = 0;
            loop {
                if socket.send(Message::Ping(vec![1].into())).await.is_err() {
                    break pongs;
                }
                let heard = tokio::time::timeout(Duration::from_millis(300), socket.next()).await;
                match heard {
                    Ok(None | Some(Err(_) | Ok(Message::Close(_)))) => break pongs,
                    Ok(Some(Ok(Message::Pong(_)))) => pongs += 1,
                    _ => {}
                }
            }
        },
    )
    .await;
    assert!(pongs > 0, "the socket closed before any ping was answered");
}

/// Stores a response of about `bytes` of text for the tests of whole answers.
async fn stored_of(server: &Replica, bytes: usize) -> String {
    let (status, first) = create(
        server,
        &json!({"model": "scripted", "input": big_input(bytes)}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    first["id"].as_str().unwrap().to_owned()
}

/// A `GET` of `path` on a connection that reads only the status line: its status.
fn get_unread(address: &str, path: &str) -> (TcpStream, u16) {
    let mut stream = TcpStream::connect(address).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {TOKEN}\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    let status = std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap();
    (stream, status)
}

/// Whole answers to clients that never read hold the shared buffer (more are refused 503
/// naming the setting), and are cut at the write timeout, which frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_to_clients_that_never_read_are_bounded_and_cut() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("ok"))]).await;
    let server = server_with(
        "vi-unread",
        &provider,
        "",
        &[
            ("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", "80000000"),
            ("AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS", "2"),
        ],
    )
    .await;
    let id = stored_of(&server, 12_000_000).await;
    let address = server.url.trim_start_matches("http://").to_owned();
    let path = format!("/v1/responses/{id}/input_items");
    let mut held = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let (stream, status) = tokio::task::block_in_place(|| get_unread(&address, &path));
        statuses.push(status);
        held.push(stream);
    }
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(
        statuses.contains(&503),
        "ten unread 12 MB answers were all held under an 80 MB buffer: {statuses:?}"
    );
    // The write timeout (2 s) closes the connections that read nothing: each read ends with
    // the server's close, before the client's own read deadline (30 s) would end it.
    let started = Instant::now();
    tokio::task::block_in_place(|| {
        for (stream, status) in held.iter_mut().zip(&statuses) {
            if *status != 200 {
                continue;
            }
            std::thread::sleep(Duration::from_secs(6).saturating_sub(started.elapsed()));
            let mut rest = Vec::new();
            let read = stream.read_to_end(&mut rest);
            assert!(
                !matches!(&read, Err(e) if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )),
                "the client's read deadline came before the server closed the connection"
            );
            assert!(
                read.is_err() || rest.len() < 12_000_000,
                "an unread answer was sent whole after its reader stalled"
            );
        }
    });
    // Freed: a client that reads gets the whole list.
    let response = http_client()
        .get(format!("{}{path}", server.url))
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    assert_eq!(list["object"], "list");
}

/// Listing 2,000 models takes one description of each, not one per id: two lists at once
/// answer promptly and `/healthz` answers within a second throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_two_thousand_models_is_prompt_and_leaves_health_answering() {
    let dir = std::env::temp_dir().join(format!("aam-vi-models-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    let mut text = String::new();
    for i in 0..2000 {
        text.push_str(&format!(
            "[[models]]\nname = \"m{i}\"\naliases = [\"alias-{i}\"]\nbackend = \"provider\"\n\
             url = \"http://127.0.0.1:9/v1\"\nmodel = \"upstream\"\n\n"
        ));
    }
    std::fs::write(&path, text).unwrap();
    let server = crate::http::start(&[
        ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    let watch = HealthWatch::start(&server.url);
    let list = || async {
        let response = http_client()
            .get(format!("{}/v1/models", server.url))
            .header("x-api-key", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    };
    let (a, b) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(list(), list())
    })
    .await
    .expect("two lists of 2,000 models within 30 s");
    assert_eq!(a["data"].as_array().unwrap().len(), 2000);
    assert_eq!(a, b);
    assert_eq!(a["data"][1999]["id"], "m1999");
    watch.stop().await;
}

/// An image sent to a model that takes text only is the request's fault: a 400 naming the
/// part, not a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_for_a_text_only_model_is_a_400_naming_the_part() {
    let (_turn, server) = crate::http_api::embedded(&[]).await;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let (status, refused) = create(
        &server,
        &json!({"model": "local", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{png}")}]}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["type"], "invalid_request_error",
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("image part")
            && message.contains("no vision")
            && message.contains("--mmproj"),
        "{message}"
    );
}

/// Embeddings on the embedded chat model are made one text at a time between the answers'
/// steps: a short answer asked after a request for 32 texts comes back before it; and a
/// request whose client leaves stops making texts (the server's CPU goes quiet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_share_the_worker_with_answers_and_stop_when_their_client_leaves() {
    let (_turn, server) = crate::http_api::embedded(&[]).await;
    let embeddings_url = format!("{}/v1/embeddings", server.url);
    let texts: Vec<String> = (0..32)
        .map(|i| format!("The sentence number {i} is about the weather in a city."))
        .collect();
    let embed = {
        let (url, texts) = (embeddings_url.clone(), texts.clone());
        tokio::spawn(async move {
            let r = http_client()
                .post(url)
                .json(&json!({"model": "local", "input": texts}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap(), Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let chat = http_client()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"model": "local", "max_tokens": 4,
                      "messages": [{"role": "user", "content": "Say hi."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    let answered_at = Instant::now();
    let (status, made, embedded_at) = embed.await.unwrap();
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["data"].as_array().unwrap().len(), 32);
    assert!(
        answered_at < embedded_at,
        "the answer waited for all 32 texts to be embedded"
    );
    // A client that leaves: its texts stop being made.
    let pid = server.child.0.id();
    let many: Vec<String> = (0..256).map(|i| format!("{} {i}", texts[i % 32])).collect();
    let leaving = {
        let url = embeddings_url.clone();
        tokio::spawn(async move {
            let _ = http_client()
                .post(url)
                .json(&json!({"model": "local", "input": many}))
                .send()
                .await;
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    leaving.abort();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_seconds(pid) - before;
    assert!(
        spent < 0.5,
        "{spent} s of CPU in 2 s after the embeddings' client left"
    );
}

/// A model file that can never load is a 5xx naming the model: no invitation to retry (429),
/// no path of the server's disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_cannot_load_is_a_5xx_naming_the_model_not_its_path() {
    let dir = std::env::temp_dir().join(format!("aam-vi-bogus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bogus = dir.join("bogus-weights.gguf");
    std::fs::write(&bogus, b"this is not a GGUF file").unwrap();
    let path = dir.join("models.toml");
    std::fs::write(
        &path,
        format!(
            "[[models]]\nname = \"coder\"\nbackend = \"local\"\nmodel_file = \"{}\"\n",
            bogus.display()
        ),
    )
    .unwrap();
    let server = crate::http::start(&[
        ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    for _ in 0..2 {
        let response = http_client()
            .post(format!("{}/v1/chat/completions", server.url))
            .header("x-api-key", TOKEN)
            .json(&json!({"model": "coder", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert!(!response.headers().contains_key("retry-after"));
        let body: Value = response.json().await.unwrap();
        assert!((500..600).contains(&status), "{status}: {body}");
        assert_ne!(body["error"]["type"], "rate_limit_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"coder\""), "{message}");
        assert!(!message.contains("bogus-weights"), "{message}");
    }
}

/// A provider's embeddings come back as every backend's do: unit vectors, cut to `dimensions`
/// when the upstream ignored it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_embeddings_are_unit_vectors_cut_to_the_dimensions_asked() {
    let provider = Scripted::start(vec![Reply::json(
        200,
        &json!({"object": "list", "model": "upstream",
                "data": [{"object": "embedding", "index": 0, "embedding": [3.0, 4.0, 12.0]},
                         {"object": "embedding", "index": 1, "embedding": [0.0, 0.0, 2.0]}],
                "usage": {"prompt_tokens": 4, "total_tokens": 4}}),
    )])
    .await;
    let server = server_with("vi-embed", &provider, "", &[]).await;
    let response = http_client()
        .post(format!("{}/v1/embeddings", server.url))
        .header("x-api-key", TOKEN)
        .json(&json!({"model": "scripted", "input": ["a", "b"], "dimensions": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let vector = |i: usize| -> Vec<f64> {
        body["data"][i]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let first = vector(0);
    assert_eq!(first.len(), 2, "{body}");
    assert!(
        (first[0] - 0.6).abs() < 1e-6 && (first[1] - 0.8).abs() < 1e-6,
        "{body}"
    );
    // A vector that is zero once cut stays zero.
    assert_eq!(vector(1), vec![0.0, 0.0], "{body}");
}

/// A streamed call whose provider asks for a wait past the stream's head wait, and then fails
/// again, is answered with the provider's status and wait, as the same call whole is: the head
/// waits as long as the retry does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_whose_retry_outlasts_the_head_wait_gets_the_providers_status() {
    let busy = Reply::Answer(
        429,
        vec![("Retry-After".into(), "11".into())],
        json!({"error": {"message": "slow down", "type": "rate_limit_error"}}).to_string(),
    );
    let provider = Scripted::start(vec![busy]).await;
    let dir = std::env::temp_dir().join(format!("aam-vi-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    std::fs::write(
        &path,
        format!(
            "[[models]]\nname = \"scripted\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream\"\nretries = 1\n",
            provider.url
        ),
    )
    .unwrap();
    let server = crate::http::start(&[
        ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    let body = json!({"model": "scripted", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let response = open_stream(&format!("{}/v1/chat/completions", server.url), &body).await;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    assert_eq!(status, 429, "{text}");
    assert_eq!(retry_after.as_deref(), Some("11"), "{text}");
    assert_eq!(provider.seen().len(), 2, "the retry was made");
}

/// `/v1/responses/input_tokens` counts the stored conversation `previous_response_id` names,
/// as the create it stands for reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_tokens_count_the_conversation_a_previous_response_continues() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let server = server_with("vi-count", &provider, "", &[]).await;
    let long = "Tell me about the capital of France, its history and its rivers. ".repeat(20);
    let (status, first) = create(&server, &json!({"model": "scripted", "input": long})).await;
    assert_eq!(status, 200, "{first}");
    let count = |body: Value| {
        let server = &server;
        async move {
            let response = http_client()
                .post(format!("{}/v1/responses/input_tokens", server.url))
                .header("x-api-key", TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let v: Value = response.json().await.unwrap();
            assert_eq!(v["object"], "response.input_tokens", "{v}");
            v["input_tokens"].as_u64().unwrap()
        }
    };
    let alone = count(json!({"model": "scripted", "input": "And of Italy?"})).await;
    let continued = count(json!({"model": "scripted", "input": "And of Italy?",
                                 "previous_response_id": first["id"]}))
    .await;
    assert!(continued > alone + 100, "{continued} against {alone}");
    let response = http_client()
        .post(format!("{}/v1/responses/input_tokens", server.url))
        .header("x-api-key", TOKEN)
        .json(&json!({"model": "scripted", "input": "x", "previous_response_id": "resp_gone"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["error"]["code"], "previous_response_not_found", "{v}");
}
