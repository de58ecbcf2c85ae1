//! Stop sequences under attack (issue #41): too many or too long ones are refused on the MCP
//! tools and the HTTP APIs alike, naming the field and the setting; and the longest allowed
//! ones, against a provider's stream of many deltas that keep them all half-matched, neither
//! stall the server (`/healthz` answers within a second throughout) nor change what is shown.

use crate::common::openai::{Reply, Scripted, completion};
use crate::common::*;
use crate::http::Replica;
use crate::http_api::TOKEN;
use serde_json::{Value, json};
use std::time::Duration;

/// A server whose one entry, `scripted` (alias `gpt-4o-mini`), is the provider at `provider`,
/// started with the variables `env` too.
async fn server(name: &str, provider: &Scripted, env: &[(&str, &str)]) -> Replica {
    crate::http_api::server_with(&format!("stops-{name}"), provider, "", env).await
}

/// The status and body of `body` posted to `url`, with the token under `header`.
async fn post_with(url: &str, header: &str, body: &Value) -> (u16, String) {
    let response = http_client()
        .post(url)
        .header(header, TOKEN)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn post(url: &str, body: &Value) -> (u16, String) {
    post_with(url, "x-api-key", body).await
}

#[tokio::test]
async fn too_many_or_too_long_stop_sequences_are_refused_on_a_tool_and_an_api() {
    let many: Vec<String> = (0..17).map(|i| format!("S{i}")).collect();
    let long = "x".repeat(501);
    let user = json!([{"role": "user", "content": "hi"}]);

    // An MCP tool call, answered by the host's sampling.
    let client = connect(Host::text("fine"), Era::Legacy).await;
    let e = err_text(
        &client,
        "chat_complete",
        json!({"messages": user, "stop": many}),
    )
    .await;
    assert!(e.contains("`stop`"), "{e}");
    assert!(
        e.contains("17 stop sequences is over the limit of 16 (AGENT_AS_MODEL_MAX_STOP_SEQUENCES)"),
        "{e}"
    );
    let e = err_text(
        &client,
        "messages_create",
        json!({"messages": user, "max_tokens": 10, "stop_sequences": ["ok", long]}),
    )
    .await;
    assert!(
        e.contains(
            "`stop_sequences[1]`: 501 characters is over the limit of 500 per stop sequence \
             (AGENT_AS_MODEL_MAX_STOP_CHARS)"
        ),
        "{e}"
    );
    // At the limits the call is answered.
    let at_limit = "x".repeat(500);
    let ok = ok_text(
        &client,
        "messages_create",
        json!({"messages": user, "max_tokens": 10, "stop_sequences": [at_limit]}),
    )
    .await;
    assert!(ok.contains("fine"), "{ok}");
    client.cancel().await.unwrap();

    // The HTTP APIs, each in its own envelope; the settings move the limits.
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server("refused", &provider, &[]).await;
    let (status, text) = post(
        &format!("{}/v1/messages", s.url),
        &json!({"model": "gpt-4o-mini", "max_tokens": 10, "messages": user,
                "stop_sequences": ["ok", long]}),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("`stop_sequences[1]`"), "{text}");
    assert!(text.contains("AGENT_AS_MODEL_MAX_STOP_CHARS"), "{text}");
    let (status, text) = post_with(
        &format!("{}/v1beta/models/gemini-2.5-flash:generateContent", s.url),
        "x-goog-api-key",
        &json!({"contents": [{"parts": [{"text": "hi"}]}],
                "generationConfig": {"stopSequences": many}}),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("`generationConfig.stopSequences`"), "{text}");
    assert!(text.contains("AGENT_AS_MODEL_MAX_STOP_SEQUENCES"), "{text}");
    drop(s);
    let s = server(
        "raised",
        &provider,
        &[
            ("AGENT_AS_MODEL_MAX_STOP_SEQUENCES", "17"),
            ("AGENT_AS_MODEL_MAX_STOP_CHARS", "501"),
        ],
    )
    .await;
    let mut raised = many.clone();
    raised[0] = long.clone();
    let (status, text) = post(
        &format!("{}/v1/chat/completions", s.url),
        &json!({"model": "gpt-4o-mini", "messages": user, "stop": raised}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("Paris."), "{text}");
    assert_eq!(provider.seen().last().unwrap().body["stop"][0], json!(long));
}

/// A chat stream's text, and its finish reasons.
fn shown(body: &str) -> (String, Vec<Value>) {
    let mut text = String::new();
    let mut finish = Vec::new();
    for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if let Some(t) = chunk["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
        let f = &chunk["choices"][0]["finish_reason"];
        if !f.is_null() {
            finish.push(f.clone());
        }
    }
    (text, finish)
}

#[tokio::test]
async fn the_longest_stop_sequences_against_a_long_stream_leave_healthz_answering() {
    // The review's attack, at the limits an operator may raise them to: 16 sequences of 100,000
    // characters that every tail of the stream begins (`aaa…a` then one other character), and a
    // provider that streams 300 deltas of 1,000 `a`s. Each delta holds back as much as any
    // sequence could still become, so a matcher that tries every prefix (K²/2 compares) spends
    // minutes per delta on the runtime's threads; two such streams at once used to stall
    // `/healthz` for many seconds.
    const CHARS: usize = 100_000;
    const DELTAS: usize = 300;
    const DELTA: usize = 1_000;
    let stops: Vec<String> = (0..16u8)
        .map(|i| "a".repeat(CHARS - 1) + &char::from(b'b' + i).to_string())
        .collect();
    let piece = "a".repeat(DELTA);
    let mut events: Vec<String> = (0..DELTAS)
        .map(|_| {
            json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
                   "choices": [{"index": 0, "delta": {"content": piece},
                                "finish_reason": null}]})
            .to_string()
        })
        .collect();
    events.push("[DONE]".to_owned());
    let provider = Scripted::start(vec![Reply::Events(events, Duration::ZERO)]).await;
    let chars = CHARS.to_string();
    let s = server(
        "attack",
        &provider,
        &[
            ("AGENT_AS_MODEL_MAX_STOP_CHARS", chars.as_str()),
            ("AGENT_AS_MODEL_MAX_STOP_SEQUENCES", "16"),
        ],
    )
    .await;
    let body = json!({"model": "gpt-4o-mini", "stream": true, "stop": stops,
                      "messages": [{"role": "user", "content": "Say a"}]});
    let url = format!("{}/v1/chat/completions", s.url);
    let watch = HealthWatch::start(&s.url);
    let streams = async {
        let (a, b) = tokio::join!(post(&url, &body), post(&url, &body));
        [a, b]
    };
    let answers = tokio::time::timeout(Duration::from_secs(180), streams)
        .await
        .expect("both streams ended within 180 s");
    watch.stop().await;
    for (status, body) in answers {
        assert_eq!(status, 200, "{}", &body[..body.len().min(500)]);
        let (text, finish) = shown(&body);
        // No sequence was met: all of the text is shown, and the finish is the provider's.
        assert_eq!(text.len(), DELTAS * DELTA);
        assert!(text.bytes().all(|b| b == b'a'));
        assert_eq!(finish, [json!("stop")]);
    }
}
