//! `POST /v1/responses/compact` as the Open Responses specification has it: a conversation (the
//! request's `input`, after the stored response its `previous_response_id` names) made short.
//! The model the request names is asked to summarize it; the compacted window keeps the
//! conversation's user messages and adds one `compaction` item carrying the summary, which a
//! next `/v1/responses` request takes back as input (the model reads it as a user turn leading
//! with the summary). The summary is not encrypted: the specification's `encrypted_content` is
//! opaque to clients, and here it is the summary's text, base64-encoded
//! ([`crate::shapes::responses::compaction_content`]).

use super::responses::Usage;
use crate::call::Answer;
use crate::pyjson::{self, Style};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// What the summarizing call is told, after the request's own instructions.
const INSTRUCTIONS: &str = "You compact conversations. The conversation so far is given; a \
    later turn will continue it from your summary alone, without the turns you summarize.";

/// What the model is asked after the conversation.
const ASK: &str = "Summarize the conversation above so that it can be continued from the \
    summary alone. Keep every fact, name, number, code word, decision and open question, what \
    the user asked for and how, the tool calls made and what they returned, and what the \
    assistant said it would do next. Write only the summary, in plain sentences or short \
    bullet points.";

/// The longest summary, in tokens.
pub const MAX_SUMMARY_TOKENS: u64 = 1024;

/// The compacted conversation: the specification's `CompactResource`.
#[derive(Debug, Clone, Serialize)]
pub struct CompactResource {
    pub id: String,
    pub object: &'static str,
    pub created_at: u64,
    /// The conversation's user messages, then the compaction item.
    pub output: Vec<Value>,
    /// What the summarizing call took and made.
    pub usage: Usage,
}

/// The Responses request that summarizes `conversation` (input items) with `model`: the
/// conversation, then the question; `instructions` (the compact request's) lead the system
/// prompt, before what the summarizing call is told. The conversation keeps its places in
/// `input`, so an error in one of its items names it as the client sent it.
pub fn summary_request(
    model: &str,
    instructions: Option<&str>,
    conversation: &[Value],
) -> Map<String, Value> {
    let instructions = match instructions {
        Some(theirs) if !theirs.trim().is_empty() => format!("{theirs}\n\n{INSTRUCTIONS}"),
        _ => INSTRUCTIONS.to_owned(),
    };
    let mut input = conversation.to_vec();
    input.push(json!({"type": "message", "role": "user", "content": ASK}));
    let mut request = Map::new();
    request.insert("model".into(), json!(model));
    request.insert("instructions".into(), json!(instructions));
    request.insert("input".into(), Value::Array(input));
    request.insert("max_output_tokens".into(), json!(MAX_SUMMARY_TOKENS));
    request.insert("store".into(), json!(false));
    request
}

/// The summary an answer gives.
pub fn summary_of(answer: &Answer) -> String {
    let text = match answer {
        Answer::Text(text) | Answer::ToolCalls { text, .. } => text.clone(),
        Answer::Json(v) => pyjson::dumps(v, Style::SORTED),
    };
    text.trim().to_owned()
}

/// The compacted window: `conversation`'s user messages as output items (an earlier
/// compaction item is left out: the new summary has what it said), then the compaction item
/// carrying `summary`.
pub fn compacted(conversation: &[Value], summary: &str) -> Vec<Value> {
    let mut output: Vec<Value> = conversation.iter().filter_map(user_message).collect();
    output.push(json!({
        "type": "compaction",
        "id": crate::call::new_id("cmp_"),
        "encrypted_content": crate::shapes::responses::compaction_content(summary),
    }));
    output
}

/// The compacted conversation of `output`, its summary made with `usage`.
pub fn resource(output: Vec<Value>, usage: Usage) -> CompactResource {
    CompactResource {
        id: crate::call::new_id("resp_"),
        object: "response.compaction",
        created_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        output,
        usage,
    }
}

/// A user message of the conversation as an output item (the specification's `Message`: with
/// its id, status and content parts); `None` for any other item.
fn user_message(item: &Value) -> Option<Value> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    if kind != "message" || item.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let text_part = |text: &str| json!({"type": "input_text", "text": text});
    let content: Vec<Value> = match item.get("content")? {
        Value::String(text) => vec![text_part(text)],
        Value::Array(parts) => parts
            .iter()
            .map(|part| {
                let text = part
                    .get("text")
                    .or_else(|| part.get("input_text"))
                    .and_then(Value::as_str);
                match (part.get("type").and_then(Value::as_str), text) {
                    (Some("input_text" | "text" | "output_text"), Some(text)) => text_part(text),
                    _ => part.clone(),
                }
            })
            .collect(),
        _ => return None,
    };
    Some(json!({
        "type": "message",
        "id": crate::call::new_id("msg_"),
        "status": "completed",
        "role": "user",
        "content": content,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::responses::compaction_summary;

    #[test]
    fn the_window_keeps_the_user_messages_and_ends_with_the_summary() {
        let conversation = vec![
            json!({"role": "user", "content": "Launch on Tuesday."}),
            json!({"type": "message", "role": "assistant", "content": "Understood."}),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "And notify support."}]}),
            json!({"type": "compaction", "encrypted_content": "old"}),
        ];
        let output = compacted(&conversation, "Launch Tuesday; notify support first.");
        assert_eq!(output.len(), 3, "{output:#?}");
        assert_eq!(output[0]["role"], "user");
        assert_eq!(output[0]["status"], "completed");
        assert_eq!(
            output[0]["content"],
            json!([{"type": "input_text", "text": "Launch on Tuesday."}])
        );
        assert!(output[1]["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(output[2]["type"], "compaction");
        assert!(output[2]["id"].as_str().unwrap().starts_with("cmp_"));
        assert_eq!(
            compaction_summary(output[2]["encrypted_content"].as_str().unwrap()).as_deref(),
            Some("Launch Tuesday; notify support first.")
        );
    }

    #[test]
    fn the_summarizing_request_asks_after_the_conversation_in_its_places() {
        let conversation = vec![json!({"role": "user", "content": "Hi"})];
        let r = summary_request("m", Some("Be terse."), &conversation);
        assert_eq!(r["input"][0], conversation[0]);
        assert_eq!(r["input"][1]["role"], "user");
        assert!(
            r["instructions"]
                .as_str()
                .unwrap()
                .starts_with("Be terse.\n\n")
        );
        assert_eq!(r["store"], false);
        assert_eq!(r["max_output_tokens"], MAX_SUMMARY_TOKENS);
    }
}
