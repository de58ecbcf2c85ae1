//! The embedded model speaks the tool-call format its chat template names, over HTTP: the
//! default model's weights (Qwen's) given Mistral's, Llama 3's and Qwen3-Coder's templates
//! make their calls in those formats, held there by the grammar, and a client sees the calls as
//! OpenAI tool calls, whole and streamed; a template that opens `<think>` has its reasoning
//! kept out of the answer's text; a template with no known format is said to be one.

use crate::http_api::{data, embedded, post};
use serde_json::{Value, json};

/// A real chat template of tests/data/templates.
fn template(file: &str) -> String {
    format!("{}/tests/data/templates/{file}", env!("CARGO_MANIFEST_DIR"))
}

fn weather_body(stream: bool) -> Value {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"},
                        "days": {"type": "integer"}}, "required": ["city", "days"]});
    json!({"model": "local", "stream": stream, "max_tokens": 80, "seed": 1, "temperature": 0,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "messages": [{"role": "user",
                      "content": "What will the weather be in Paris for the next 3 days?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "description": "The weather in a city for some days", "parameters": schema}}]})
}

/// The arguments fit the tool's schema: a city and a whole number of days, nothing else.
fn fits(args: &Value) -> bool {
    let schema = json!({"type": "object", "additionalProperties": false,
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]});
    jsonschema::is_valid(&schema, args)
}

#[tokio::test]
async fn the_weights_of_one_family_write_the_call_format_their_template_names() {
    for (file, format) in [
        ("mistral-small-3.2.jinja", "mistral-args"),
        ("llama3.1.jinja", "llama3"),
        ("qwen3-coder.jinja", "qwen3-coder-xml"),
    ] {
        let path = template(file);
        let (_turn, s) = embedded(&[("AGENT_AS_MODEL_CHAT_TEMPLATE_FILE", &path)]).await;
        let url = format!("{}/v1/chat/completions", s.url);
        // Whole: the parser of this format alone read the call (another format's call would be
        // text), and the grammar held its name and arguments to the tool.
        let (status, headers, text) = post(&url, &[], &weather_body(false)).await;
        assert_eq!(status, 200, "{file}: {text}");
        assert!(headers.get("x-agent-as-model-warnings").is_none(), "{file}");
        let body: Value = serde_json::from_str(&text).unwrap();
        let message = &body["choices"][0]["message"];
        let call = &message["tool_calls"][0]["function"];
        assert_eq!(call["name"], "get_weather", "{file}: {text}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(fits(&args), "{file}: {args}");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls", "{file}");
        let content = message["content"].as_str().unwrap_or("");
        assert!(
            !content.contains("[TOOL_CALLS]") && !content.contains("<function="),
            "{file}: {content:?}"
        );
        // The call and its result back in the history: the template renders them (Mistral's
        // refuses call ids that are not nine letters and digits, as OpenAI's are not).
        let mut next = weather_body(false);
        let id = message["tool_calls"][0]["id"].clone();
        let history = next["messages"].as_array_mut().unwrap();
        history.push(message.clone());
        history
            .push(json!({"role": "tool", "tool_call_id": id, "content": "{\"sky\": \"clear\"}"}));
        next["tool_choice"] = json!("none");
        next["max_tokens"] = json!(8);
        let (status, _, text) = post(&url, &[], &next).await;
        assert_eq!(status, 200, "{file}: the next turn: {text}");
        // The format detected is the template's (the model is loaded now).
        let models: Value = crate::common::http_client()
            .get(format!("{}/v1/models", s.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let model = &models["data"][0];
        assert_eq!(model["format"]["tool_calls"], format, "{file}: {models}");
        assert!(model["context_length"].as_u64().is_some(), "{models}");
        // Where it runs: this build has no GPU backend.
        assert_eq!(model["engine"]["device"], "CPU", "{models}");
        assert_eq!(model["engine"]["gpu_layers"], "0", "{models}");
        // Streamed: the call's start, then its arguments in pieces that join into them.
        let (status, _, text) = post(&url, &[], &weather_body(true)).await;
        assert_eq!(status, 200, "{file}: {text}");
        let calls: Vec<Value> = data(&text)
            .into_iter()
            .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0").cloned())
            .filter(|c| c["index"] == 0)
            .collect();
        assert_eq!(
            calls.first().map(|c| &c["function"]["name"]),
            Some(&json!("get_weather"))
        );
        let joined: String = calls
            .iter()
            .filter_map(|c| c["function"]["arguments"].as_str())
            .collect();
        let streamed: Value = serde_json::from_str(&joined).expect(&joined);
        assert!(fits(&streamed), "{file}: {streamed}");
    }
}

#[tokio::test]
async fn reasoning_a_template_opens_is_kept_out_of_the_answer() {
    // A ChatML template whose generation prompt opens `<think>`, as reasoning models' do.
    let dir = std::env::temp_dir().join(format!("aam-think-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("think.jinja");
    std::fs::write(
        &path,
        "{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}\
         <|im_end|>\n{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n\
         {% endif %}",
    )
    .unwrap();
    let (_turn, s) =
        embedded(&[("AGENT_AS_MODEL_CHAT_TEMPLATE_FILE", path.to_str().unwrap())]).await;
    let messages = json!([
        {"role": "system", "content": "Think briefly inside <think></think>, then answer with one number."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nTwo plus two is four.\n</think>\n\n4"},
        {"role": "user", "content": "What is 3+3?"}]);
    let url = format!("{}/v1/chat/completions", s.url);
    let body = json!({"model": "local", "max_tokens": 40, "temperature": 0, "messages": messages});
    let (status, _, text) = post(&url, &[], &body).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        !content.contains("think>") && content.contains('6'),
        "{text}"
    );
    // The reasoning took tokens the text does not show.
    assert!(
        answer["usage"]["completion_tokens"].as_u64().unwrap() > 3,
        "{text}"
    );
    let body = json!({"model": "local", "max_tokens": 40, "temperature": 0, "stream": true,
                      "messages": messages});
    let (_, _, text) = post(&url, &[], &body).await;
    let shown: String = data(&text)
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert!(!shown.contains("think>") && shown.contains('6'), "{text}");
    // A schema holds the answer after the reasoning, which the grammar lets come first.
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                        "required": ["n"]});
    let body = json!({"model": "local", "max_tokens": 60, "temperature": 0, "messages": messages,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}});
    let (status, _, text) = post(&url, &[], &body).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    let json: Value = serde_json::from_str(content).expect(content);
    assert!(json["n"].is_i64(), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_template_in_no_known_format_is_said_to_be_one() {
    let path = template("gemma3.jinja");
    let (_turn, s) = embedded(&[("AGENT_AS_MODEL_CHAT_TEMPLATE_FILE", &path)]).await;
    let body = json!({"model": "local", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]});
    let (status, headers, text) = post(&format!("{}/v1/chat/completions", s.url), &[], &body).await;
    assert_eq!(status, 200, "{text}");
    let warning = headers
        .get("x-agent-as-model-warnings")
        .and_then(|w| w.to_str().ok())
        .unwrap_or("");
    assert!(
        warning.contains("qwen2.5-coder-0.5b-instruct") && warning.contains("no format"),
        "{warning:?}"
    );
}
