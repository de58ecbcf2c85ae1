//! The model APIs over HTTP under the attacks of an outside review: calls over the server's cap
//! on calls in flight, streamed calls that would keep their bodies' memory past the buffer,
//! bodies of tiny JSON values that parse to many times their size, streaming clients that
//! never read, calls that fail before their first token, and token counts that would starve
//! the embedded model's answers.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::{HealthWatch, http_client};
use crate::http_api::{
    TOKEN, chat_body, data, embedded, open_stream, post, server_with, text_chunk,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: (&str, &str) = ("x-api-key", TOKEN);

/// Waits (10 s at most) until `provider` has `n` requests open.
async fn until_open(provider: &Scripted, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.open() != n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(provider.open(), n, "requests open at the provider");
}

#[tokio::test]
async fn api_calls_over_the_servers_cap_on_calls_in_flight_are_refused_with_retry_after() {
    let provider = Scripted::start(vec![
        Reply::Silence,
        Reply::Silence,
        Reply::json(200, &completion("Paris.")),
    ])
    .await;
    let s = server_with(
        "cap",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", "2")],
    )
    .await;
    let url = format!("{}/v1/chat/completions", s.url);
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { post(&url, &[KEY], &chat_body()).await })
        })
        .collect();
    until_open(&provider, 2).await;
    // Every route that makes a call is under the cap, in its API's envelope.
    let messages = json!({"model": "gpt-4o-mini", "max_tokens": 5,
                          "messages": [{"role": "user", "content": "hi"}]});
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    for (path, body) in [
        ("/v1/chat/completions", chat_body()),
        ("/v1/messages", messages.clone()),
        ("/v1/messages/count_tokens", messages),
        ("/v1beta/models/gemini-2.5-flash:generateContent", gemini),
    ] {
        let (status, headers, text) = post(&format!("{}{path}", s.url), &[KEY], &body).await;
        assert_eq!(status, 429, "{path}: {text}");
        assert_eq!(headers["retry-after"], "1", "{path}");
        assert!(
            text.contains("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT"),
            "{path}: {text}"
        );
    }
    // The calls that end give their places back.
    for call in held {
        call.abort();
    }
    until_open(&provider, 0).await;
    let (status, _, text) = post(&url, &[KEY], &chat_body()).await;
    assert_eq!(status, 200, "{text}");
}

/// A chat body asking for a stream, with a user message of `chars` characters.
fn streamed_chat(chars: usize) -> Value {
    json!({"model": "gpt-4o-mini", "stream": true,
           "messages": [{"role": "user", "content": "a".repeat(chars)}]})
}

#[tokio::test]
async fn a_streamed_call_holds_its_bodys_share_of_the_buffer_until_it_ends() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let done = vec![
        json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        .to_string(),
        "[DONE]".to_owned(),
    ];
    let provider = Scripted::start(vec![
        Reply::Gated(vec![text_chunk("Par")], gate.clone(), done.clone()),
        Reply::Events(
            [vec![text_chunk("Paris.")], done.clone()].concat(),
            Duration::ZERO,
        ),
    ])
    .await;
    // A megabyte of text takes its bytes while read, then as parsed and copied by its call:
    // more than half of a 9 MB buffer for as long as the call lasts.
    let s = server_with(
        "held",
        &provider,
        "",
        &[("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", "9000000")],
    )
    .await;
    let url = format!("{}/v1/chat/completions", s.url);
    let health = HealthWatch::start(&s.url);
    let mut first = open_stream(&url, &streamed_chat(1_000_000)).await;
    assert_eq!(first.status(), 200);
    let chunk = first.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&chunk).contains("chat.completion.chunk"));
    // While it streams, a second body of the same size finds no room.
    let (status, headers, text) = post(&url, &[KEY], &streamed_chat(1_000_000)).await;
    assert_eq!(status, 503, "{text}");
    assert_eq!(headers["retry-after"], "1");
    assert!(
        text.contains("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES"),
        "{text}"
    );
    // Once it ends, its share is free again.
    gate.notify_one();
    while first.chunk().await.unwrap().is_some() {}
    let (status, _, text) = post(&url, &[KEY], &streamed_chat(1_000_000)).await;
    assert_eq!(status, 200, "{text}");
    health.stop().await;
    assert!(
        data(&text)
            .iter()
            .any(|c| c["choices"][0]["delta"]["content"] == "Paris."),
        "{text}"
    );
}

#[tokio::test]
async fn a_body_of_more_json_values_than_the_setting_is_413_and_memory_stays_bounded() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server_with("values", &provider, "", &[]).await;
    let url = format!("{}/v1/chat/completions", s.url);
    // 8 MB of zeros in an array: about 4 million values, which parse to some 300 MB.
    let junk = format!(
        "{{\"model\": \"gpt-4o-mini\", \"messages\": [{{\"role\": \"user\", \"content\": \"hi\"}}], \
         \"junk\": [{}0]}}",
        "0,".repeat(4_000_000)
    );
    let send = |body: String| {
        let url = url.clone();
        async move {
            let response = http_client()
                .post(&url)
                .header("x-api-key", TOKEN)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let (status, text) = send(junk.clone()).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("AGENT_AS_MODEL_MAX_JSON_VALUES"), "{text}");
    // Nine at once: each is refused before it is parsed, and the server stays small.
    let pid = s.child.0.id();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watching = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                let now = crate::common::resident_kib(pid);
                peak.fetch_max(now, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let health = HealthWatch::start(&s.url);
    let all: Vec<_> = (0..9).map(|_| tokio::spawn(send(junk.clone()))).collect();
    for one in all {
        let (status, _) = one.await.unwrap();
        assert!(status == 413 || status == 503, "{status}");
    }
    health.stop().await;
    watching.abort();
    let peak_mib = peak.load(std::sync::atomic::Ordering::Relaxed) / 1024;
    assert!(peak_mib < 512, "peak resident memory {peak_mib} MiB");
    // A body of ordinary size and shape is answered as before.
    let (status, _, text) = post(&url, &[KEY], &chat_body()).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn a_streaming_client_that_reads_nothing_is_cut_off_and_its_model_freed() {
    // A long answer, far more than the sockets between the server and the client hold.
    let piece = "word ".repeat(3200);
    let events: Vec<String> = (0..1000)
        .map(|_| text_chunk(&piece))
        .chain(["[DONE]".to_owned()])
        .collect();
    let provider = Scripted::start(vec![
        Reply::Events(events, Duration::ZERO),
        Reply::json(200, &completion("Paris.")),
    ])
    .await;
    let s = server_with(
        "idle",
        &provider,
        "max_in_flight = 1\n",
        &[
            ("AGENT_AS_MODEL_PROVIDER_MAX_RESPONSE_BYTES", "67108864"),
            ("AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS", "2"),
            ("AGENT_AS_MODEL_QUEUE_TIMEOUT_SECS", "1"),
        ],
    )
    .await;
    let url = format!("{}/v1/chat/completions", s.url);
    let health = HealthWatch::start(&s.url);
    let idle = open_stream(&url, &streamed_chat(10)).await;
    assert_eq!(idle.status(), 200);
    // The client reads nothing; within the write timeout (and the time its buffers take to
    // fill) the call is cancelled and the model's one place is free for others.
    let deadline = Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let (status, _, text) = post(&url, &[KEY], &chat_body()).await;
        if status == 200 {
            break text;
        }
        assert_eq!(status, 429, "{text}");
        assert!(
            Instant::now() < deadline,
            "the idle stream still holds the model"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(answered.contains("Paris."), "{answered}");
    assert_eq!(
        provider.open(),
        0,
        "the idle stream's provider request was closed"
    );
    health.stop().await;
    drop(idle);
}

#[tokio::test]
async fn a_streamed_call_that_fails_before_its_first_token_gets_a_real_status() {
    let provider = Scripted::start(vec![
        Reply::Answer(
            429,
            vec![("retry-after".into(), "7".into())],
            json!({"error": {"message": "slow down", "type": "rate_limit_error"}}).to_string(),
        ),
        Reply::json(
            401,
            &json!({"error": {"message": "bad key", "type": "authentication_error"}}),
        ),
    ])
    .await;
    let s = server_with("early", &provider, "", &[]).await;
    let chat = format!("{}/v1/chat/completions", s.url);
    let response = open_stream(&chat, &streamed_chat(10)).await;
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    let messages = json!({"model": "gpt-4o-mini", "max_tokens": 5, "stream": true,
                          "messages": [{"role": "user", "content": "hi"}]});
    let response = open_stream(&format!("{}/v1/messages", s.url), &messages).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
}

#[tokio::test]
async fn token_counts_share_the_embedded_model_with_answers() {
    let (_turn, s) = embedded(&[]).await;
    let count_url = format!("{}/v1/messages/count_tokens", s.url);
    // 16 million characters: more tokens than any context of the model's could hold, refused
    // by length before it is tokenized.
    let turns: Vec<Value> = (0..16)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": "word ".repeat(199_999)})
        })
        .collect();
    let huge = json!({"model": "local", "messages": turns});
    // Refused before the client's deadline of 5 s.
    let (status, _, text) = crate::common::before(
        Duration::from_secs(5),
        "counting a huge prompt",
        post(&count_url, &[], &huge),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("at least"), "{text}");
    // Three clients counting long texts without pause do not hold an answer back.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let long = json!({"model": "local", "messages": [
        {"role": "user", "content": "word ".repeat(20_000)}]});
    let counting: Vec<_> = (0..3)
        .map(|_| {
            let (url, body, stop) = (count_url.clone(), long.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    post(&url, &[], &body).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let chat = json!({"model": "local", "max_tokens": 5,
                      "messages": [{"role": "user", "content": "Capital of France?"}]});
    // Answered before the client's deadline of 15 s.
    let answer = tokio::time::timeout(
        Duration::from_secs(15),
        post(&format!("{}/v1/chat/completions", s.url), &[], &chat),
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in counting {
        c.await.unwrap();
    }
    let (status, _, text) = answer.expect("the answer came before the client's deadline of 15 s");
    assert_eq!(status, 200, "{text}");
}
