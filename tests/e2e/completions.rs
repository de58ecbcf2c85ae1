//! OpenAI's legacy text completions (`POST /v1/completions`): the official openai SDK's
//! `completions.create`, whole and streamed, against scripted providers (the prompt reaches a
//! provider as one user message, with `logprobs` asked of it and its answer's read back); what
//! one completion cannot be (n=2, several prompts, token arrays, more than 5 log-probability
//! alternatives, a suffix for a provider) refused with a 400 naming the field,
//! before anything is sent and before any stream; and on the embedded model, the prompt
//! continued as raw text (no chat template), with `echo`, `stop`, a stream that adds up to the
//! whole answer, and fill-in-the-middle with `suffix` (a 400 naming it on a model without the
//! tokens for it).

use crate::api_sdks::{ANSWER, Fixture, QUESTION, Sdk, assert_streamed, ok};
use crate::common::openai::{Reply, Scripted, completion};
use crate::http_api::{TOKEN, data, embedded, post, server};
use serde_json::{Value, json};

#[tokio::test]
async fn the_openai_sdk_gets_text_completions_whole_and_streamed() {
    let f = Fixture::start("openai-completions").await;
    let out = f
        .run(
            Sdk::OpenAi,
            &["completions", "completions_stream", "completions_refused"],
        )
        .await;
    let whole = ok(&out, "completions");
    assert_eq!(whole["text"], ANSWER, "{whole}");
    assert_eq!(whole["finish_reason"], "stop", "{whole}");
    assert_eq!(whole["object"], "text_completion", "{whole}");
    assert_eq!(whole["choices"], 1, "{whole}");
    assert_eq!(whole["index"], 0, "{whole}");
    assert_eq!(whole["logprobs"], Value::Null, "{whole}");
    assert!(
        whole["id"].as_str().unwrap().starts_with("cmpl-"),
        "{whole}"
    );
    // The model the provider says answered, as the other APIs report it.
    assert_eq!(whole["model"], "scripted-model", "{whole}");
    assert_eq!(whole["usage"]["prompt_tokens"], 11, "{whole}");
    assert_eq!(whole["usage"]["completion_tokens"], 4, "{whole}");

    let stream = ok(&out, "completions_stream");
    assert_streamed("completions_stream", stream, ANSWER);
    assert_eq!(stream["finish_reason"], "stop", "{stream}");
    assert_eq!(stream["objects"], json!(["text_completion"]), "{stream}");
    assert_eq!(stream["ids"].as_array().unwrap().len(), 1, "{stream}");
    assert!(
        stream["ids"][0].as_str().unwrap().starts_with("cmpl-"),
        "{stream}"
    );
    assert_eq!(stream["models"], json!(["upstream-paris-live"]), "{stream}");
    assert_eq!(stream["usage"]["completion_tokens"], 4, "{stream}");

    let refused = &out["completions_refused"];
    assert_eq!(refused["class"], "BadRequestError", "{refused:#}");
    assert_eq!(refused["status"], 400, "{refused:#}");
    assert_eq!(refused["body"]["param"], "n", "{refused:#}");

    // The prompt reached each provider as one user message, with the token limit asked for.
    for (provider, count) in [(&f.plain, 1), (&f.live, 1)] {
        let seen = provider.seen();
        assert_eq!(seen.len(), count, "{seen:#?}");
        let body = &seen[0].body;
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": QUESTION}]),
            "{body}"
        );
        assert_eq!(body["max_tokens"], 32, "{body}");
    }
}

/// A completion request for `prompt` to the scripted provider's entry, with `more` fields.
fn request(more: Value) -> Value {
    let mut body = json!({"model": "gpt-4o-mini", "prompt": "Say this is a test"});
    for (k, v) in more.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn what_one_completion_cannot_be_is_a_400_naming_the_field_before_anything_is_sent() {
    let provider = Scripted::start(vec![Reply::json(200, &completion("Paris."))]).await;
    let s = server("completions-refused", &provider).await;
    let url = format!("{}/v1/completions", s.url);
    let cases = [
        (json!({"n": 2}), "n"),
        (json!({"prompt": ["one", "two"]}), "prompt"),
        (json!({"prompt": [1, 2, 3]}), "prompt"),
        (json!({"prompt": [[1, 2], [3]]}), "prompt"),
        (json!({"logprobs": 6}), "logprobs"),
        (json!({"best_of": 3}), "best_of"),
        (json!({"suffix": " world"}), "suffix"),
        (json!({"suffix": " world", "stream": true}), "suffix"),
    ];
    for (more, param) in cases {
        let body = request(more);
        let (status, headers, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert_eq!(headers["content-type"], "application/json", "{body}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    let message = |more: Value| {
        let body = request(more);
        let url = url.clone();
        async move {
            let (_, _, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
            let e: Value = serde_json::from_str(&text).unwrap();
            e["error"]["message"].as_str().unwrap().to_owned()
        }
    };
    let suffix = message(json!({"suffix": "x"})).await;
    assert!(suffix.contains("fill-in-the-middle"), "{suffix}");
    let logprobs = message(json!({"logprobs": 6})).await;
    assert!(logprobs.contains("an integer from 0 to 5"), "{logprobs}");
    assert!(provider.seen().is_empty(), "{:#?}", provider.seen());
}

#[tokio::test]
async fn a_provider_gets_the_prompt_as_a_user_message_and_what_is_set_aside_is_said() {
    let mut whole = completion("Paris.");
    whole["model"] = json!("upstream");
    // The provider's log-probabilities (`logprobs: 0` asks for the chosen tokens' own).
    let token = |t: &str, logprob: f64| {
        let bytes = t.as_bytes();
        json!({"token": t, "logprob": logprob, "bytes": bytes, "top_logprobs": []})
    };
    whole["choices"][0]["logprobs"] =
        json!({"content": [token("Par", -0.5), token("is.", -0.25)], "refusal": null});
    let stream = Reply::Events(
        vec![
            json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
                   "choices": [{"index": 0, "delta": {"content": "Par"}, "finish_reason": null}]})
            .to_string(),
            json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream",
                   "choices": [{"index": 0, "delta": {"content": "is."}, "finish_reason": "length"}]})
            .to_string(),
            "[DONE]".into(),
        ],
        std::time::Duration::from_millis(5),
    );
    let provider = Scripted::start(vec![Reply::json(200, &whole), stream]).await;
    let s = server("completions-provider", &provider).await;
    let url = format!("{}/v1/completions", s.url);
    let body = request(
        json!({"prompt": ["Capital of France?"], "echo": true, "stop": ["\n"],
                              "logprobs": 0, "best_of": 1, "n": 1, "presence_penalty": 1.0,
                              "frequency_penalty": 0, "user": "u", "wibble": 1}),
    );
    let (status, headers, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "text_completion", "{v}");
    assert_eq!(v["model"], "upstream", "{v}");
    assert_eq!(v["choices"][0]["text"], "Capital of France?Paris.", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    // In the legacy form, their offsets after the echoed prompt.
    assert_eq!(
        v["choices"][0]["logprobs"],
        json!({"tokens": ["Par", "is."], "token_logprobs": [-0.5, -0.25],
               "top_logprobs": [{"Par": -0.5}, {"is.": -0.25}], "text_offset": [18, 21]}),
        "{v}"
    );
    let warnings = headers["x-agent-as-model-warnings"].to_str().unwrap();
    assert!(warnings.contains("`wibble`"), "{warnings}");
    assert!(!warnings.contains("penalty"), "{warnings}");
    let sent = &provider.seen()[0].body;
    // OpenAI's penalties are the provider's to apply.
    assert_eq!(
        (&sent["presence_penalty"], &sent["frequency_penalty"]),
        (&json!(1.0), &json!(0.0)),
        "{sent}"
    );
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "Capital of France?"}]),
        "{sent}"
    );
    // OpenAI's default token limit for a text completion.
    assert_eq!(sent["max_tokens"], 16, "{sent}");
    assert_eq!(
        (&sent["logprobs"], &sent["top_logprobs"]),
        (&json!(true), &json!(0)),
        "{sent}"
    );
    assert_eq!(sent["stop"], json!(["\n"]), "{sent}");

    let body = request(
        json!({"stream": true, "stream_options": {"include_usage": true},
                              "wibble": 1}),
    );
    let (status, headers, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(
        headers["x-agent-as-model-warnings"]
            .to_str()
            .unwrap()
            .contains("`wibble`")
    );
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let events = data(&text);
    let texts: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(texts, "Paris.", "{text}");
    assert!(
        events.iter().all(|e| e["object"] == "text_completion"),
        "{text}"
    );
    assert!(events.iter().all(|e| e["model"] == "upstream"), "{text}");
    let finishes: Vec<&Value> = events
        .iter()
        .map(|e| &e["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("length")], "{text}");
    let last = events.last().unwrap();
    assert_eq!(last["choices"], json!([]), "{text}");
    assert!(last["usage"]["total_tokens"].is_u64(), "{text}");
}

/// A completion on the embedded model, greedy: the status and the object.
async fn complete_local(url: &str, body: Value) -> Value {
    let (status, _, text) = post(url, &[("x-api-key", TOKEN)], &body).await;
    assert_eq!(status, 200, "{body}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "text_completion", "{v}");
    v
}

fn text_of(v: &Value) -> &str {
    v["choices"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn the_embedded_model_continues_the_prompt_as_raw_text_and_fills_in_the_middle() {
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN)]).await;
    let url = format!("{}/v1/completions", s.url);
    let prompt = "The capital of France is";
    let v = complete_local(
        &url,
        json!({"model": "local", "prompt": prompt, "max_tokens": 8, "temperature": 0}),
    )
    .await;
    let continued = text_of(&v).to_owned();
    assert!(continued.contains("Paris"), "{v}");
    // The prompt's own tokens only: no chat template (its system prompt and markers) around it.
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens <= 8, "a template was applied: {v}");

    // A short limit ends it by length, after exactly that many tokens.
    let v = complete_local(
        &url,
        json!({"model": "local", "prompt": prompt, "max_tokens": 2, "temperature": 0}),
    )
    .await;
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    assert!(continued.starts_with(text_of(&v)), "{v} / {continued}");

    // echo: the prompt first.
    let v = complete_local(
        &url,
        json!({"model": "local", "prompt": prompt, "max_tokens": 8, "temperature": 0,
               "echo": true}),
    )
    .await;
    assert_eq!(text_of(&v), format!("{prompt}{continued}"), "{v}");

    // stop: the text ends before the sequence, which never shows.
    let v = complete_local(
        &url,
        json!({"model": "local", "prompt": "1, 2, 3, 4, 5,", "max_tokens": 24,
               "temperature": 0, "stop": ["9"]}),
    )
    .await;
    let counted = text_of(&v);
    assert!(!counted.contains('9'), "{v}");
    assert!(counted.contains('6'), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");

    // The stream adds up to the whole answer.
    let (status, headers, text) = post(
        &url,
        &[("x-api-key", TOKEN)],
        &json!({"model": "local", "prompt": prompt, "max_tokens": 8, "temperature": 0,
                "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let events = data(&text);
    let streamed: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, continued, "{text}");
    assert!(events.len() > 2, "{text}");
    assert!(
        events.iter().all(|e| e["model"] == events[0]["model"]),
        "{text}"
    );

    // Fill-in-the-middle: the default model (Qwen2.5-Coder) has the tokens.
    let v = complete_local(
        &url,
        json!({"model": "local", "prompt": "def add(a, b):\n    return ",
               "suffix": "\n\nprint(add(1, 2))\n", "max_tokens": 16, "temperature": 0}),
    )
    .await;
    let middle = text_of(&v);
    assert!(!middle.contains("<|"), "a special token shows: {v}");
    assert!(middle.replace(' ', "").contains("a+b"), "{v}");
}

#[tokio::test]
async fn a_model_without_fill_in_the_middle_tokens_refuses_a_suffix_by_name() {
    let _turn = crate::local::TURN.lock().await;
    let gemma = crate::engine::gemma();
    let s = crate::http::start(&[
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL_FILE", &gemma),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;
    let url = format!("{}/v1/completions", s.url);
    let v = complete_local(
        &url,
        json!({"model": "local", "prompt": "The capital of France is", "max_tokens": 4,
               "temperature": 0}),
    )
    .await;
    assert!(!text_of(&v).is_empty(), "{v}");
    for stream in [false, true] {
        let body = json!({"model": "local", "prompt": "def add(a, b):\n    return ",
                          "suffix": "\n", "max_tokens": 4, "stream": stream});
        let (status, headers, text) = post(&url, &[("x-api-key", TOKEN)], &body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert_eq!(headers["content-type"], "application/json", "{body}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["param"], "suffix", "{e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains("no fill-in-the-middle tokens"), "{e}");
    }
}
