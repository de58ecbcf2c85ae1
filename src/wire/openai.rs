//! OpenAI chat completions: messages, tool calls and tools as serde types, the neutral turns
//! as messages (for a provider's API, or for a chat template, which wants them a little
//! differently), and the finish reasons both ways.

use crate::call::{Block, Finish, Role, Turn, join_text};
use crate::pyjson::{self, Style};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    System,
    User,
    Assistant,
    Tool,
}

impl From<Role> for Speaker {
    fn from(role: Role) -> Self {
        match role {
            Role::User => Speaker::User,
            Role::Assistant => Speaker::Assistant,
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Speaker,
    /// `null` for an assistant message that only calls tools.
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The assistant's reasoning before this message, as llama-server, vLLM and DeepSeek name
    /// it (chat templates that keep reasoning in history read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl Message {
    pub fn text(role: Speaker, text: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(Content::Text(text.into())),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
    }

    /// The message's text, when its content is one string.
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            Some(Content::Text(t)) => Some(t),
            _ => None,
        }
    }
}

/// A message's content: one string, or parts (text, images, audio).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
    InputAudio { input_audio: InputAudio },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputAudio {
    pub data: String,
    pub format: String,
}

/// A call of a function tool in an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: FunctionCall,
}

impl ToolCall {
    /// A call as the API carries it: its id and its arguments as a JSON string.
    pub fn api(id: Option<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall {
            id,
            kind: function(),
            function: FunctionCall {
                name: name.into(),
                arguments: Arguments::Json(arguments.into()),
            },
        }
    }
}

fn function() -> String {
    "function".to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: Arguments,
}

/// A call's arguments: a JSON string on the API, an object for chat templates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arguments {
    Json(String),
    Object(Map<String, Value>),
}

/// A function tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: Function,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    pub name: String,
    pub description: String,
    pub parameters: Map<String, Value>,
}

impl Tool {
    pub fn function(
        name: &str,
        description: Option<&str>,
        parameters: &Map<String, Value>,
    ) -> Self {
        Tool {
            kind: function(),
            function: Function {
                name: name.to_owned(),
                description: description.unwrap_or_default().to_owned(),
                parameters: parameters.clone(),
            },
        }
    }
}

/// Who reads the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// An OpenAI-compatible API: call ids, arguments as JSON strings, media as parts, `null`
    /// content beside tool calls.
    Api,
    /// A model's chat template: text only (joined), arguments as objects, ids as
    /// [`template_id`] writes them.
    Template,
}

/// The system prompt and the turns as chat messages: tool results become `tool` messages,
/// tool uses the assistant's `tool_calls`.
pub fn messages(system: Option<&str>, turns: &[Turn], reader: Reader) -> Vec<Message> {
    let mut out = Vec::with_capacity(turns.len() + 1);
    if let Some(system) = system {
        out.push(Message::text(Speaker::System, system));
    }
    for turn in turns {
        turn_messages(turn, reader, &mut out);
    }
    out
}

/// What a chat template is given in place of an image or audio part: a marker the embedded
/// model's prompt is split at, to read the media there. It is made anew by each process, so a
/// caller's text cannot spell it.
pub fn media_marker() -> &'static str {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER.get_or_init(|| {
        let mut bytes = [0u8; 8];
        let _ = getrandom::fill(&mut bytes);
        format!("<__media_{}__>", hex::encode(bytes))
    })
}

/// A text, image or audio block as a content part (media as a marker for a template).
fn part(block: &Block, reader: Reader) -> Option<Part> {
    match block {
        Block::Text(t) => Some(Part::Text { text: t.clone() }),
        Block::Image { .. } | Block::Audio { .. } if reader == Reader::Template => {
            Some(Part::Text {
                text: media_marker().to_owned(),
            })
        }
        Block::Image { data, mime, .. } if reader == Reader::Api => Some(Part::ImageUrl {
            image_url: ImageUrl {
                url: format!("data:{mime};base64,{data}"),
            },
        }),
        Block::Audio { data, mime, .. } if reader == Reader::Api => {
            let format = mime.rsplit('/').next().unwrap_or("wav");
            let format = if format == "mpeg" { "mp3" } else { format };
            Some(Part::InputAudio {
                input_audio: InputAudio {
                    data: data.clone(),
                    format: format.to_owned(),
                },
            })
        }
        _ => None,
    }
}

fn turn_messages(turn: &Turn, reader: Reader, out: &mut Vec<Message>) {
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning: Option<String> = None;
    for block in &turn.blocks {
        match block {
            Block::Reasoning(text) => match &mut reasoning {
                Some(r) => r.push_str(text),
                None => reasoning = Some(text.clone()),
            },
            Block::Text(_) | Block::Image { .. } | Block::Audio { .. } => {
                parts.extend(part(block, reader));
            }
            Block::ToolUse { id, name, input } => calls.push(tool_call(id, name, input, reader)),
            Block::ToolResult {
                id,
                content,
                is_error,
            } => out.push(tool_result(id, content, *is_error, reader)),
        }
    }
    let content = match reader {
        Reader::Api => api_content(parts),
        Reader::Template => template_content(parts, turn.blocks.len()),
    };
    // Only templates read reasoning back: providers refuse it or ignore it.
    let reasoning = reasoning.filter(|_| reader == Reader::Template);
    if !calls.is_empty() || content.is_some() || reasoning.is_some() {
        out.push(Message {
            role: turn.role.into(),
            content: content.or_else(|| (reader == Reader::Template).then(empty)),
            tool_calls: calls,
            tool_call_id: None,
            reasoning_content: reasoning,
        });
    }
}

/// A call the model made, as `reader` reads it: its arguments as JSON text for an API, as an
/// object for a template.
fn tool_call(id: &str, name: &str, input: &Map<String, Value>, reader: Reader) -> ToolCall {
    match reader {
        Reader::Api => ToolCall::api(
            Some(id.to_owned()),
            name.to_owned(),
            pyjson::dumps_object(input, Style::PLAIN),
        ),
        Reader::Template => ToolCall {
            id: Some(template_id(id)),
            kind: function(),
            function: FunctionCall {
                name: name.to_owned(),
                arguments: Arguments::Object(input.clone()),
            },
        },
    }
}

/// A tool's result as the `tool` message answering the call `id`: its text, after `Error: `
/// when it is an error.
fn tool_result(id: &str, content: &[Block], is_error: bool, reader: Reader) -> Message {
    let text = join_text(content, "\n");
    let text = if is_error {
        format!("Error: {text}")
    } else {
        text
    };
    let mut message = Message::text(Speaker::Tool, text);
    message.tool_call_id = Some(match reader {
        Reader::Api => id.to_owned(),
        Reader::Template => template_id(id),
    });
    message
}

/// A call's id as templates are given it: nine letters and digits, the same for the same id
/// (Mistral's templates refuse any other; the others print it or leave it out).
pub fn template_id(id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    hex::encode(digest).chars().take(9).collect()
}

fn empty() -> Content {
    Content::Text(String::new())
}

/// One text part as a string, several parts as a list, none as nothing.
fn api_content(mut parts: Vec<Part>) -> Option<Content> {
    match parts.as_mut_slice() {
        [] => None,
        [Part::Text { text }] => Some(Content::Text(std::mem::take(text))),
        _ => Some(Content::Parts(parts)),
    }
}

/// The texts joined; an empty text only when the turn was all text (an empty message).
fn template_content(parts: Vec<Part>, blocks: usize) -> Option<Content> {
    let texts: Vec<String> = parts
        .into_iter()
        .filter_map(|p| match p {
            Part::Text { text } => Some(text),
            _ => None,
        })
        .collect();
    let all_text = texts.len() == blocks;
    let joined = texts.join("\n\n");
    (!joined.is_empty() || all_text).then_some(Content::Text(joined))
}

/// OpenAI's `finish_reason` for a neutral finish (also `generate`'s).
pub fn finish_reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::MaxTokens => "length",
        Finish::ToolUse => "tool_calls",
        Finish::EndTurn | Finish::StopSequence(_) => "stop",
    }
}

/// A provider's `finish_reason` in neutral form; an answer with tool calls that says `stop`
/// ended for them.
pub fn finish(reason: Option<&str>, has_calls: bool) -> Finish {
    match reason {
        Some("length") => Finish::MaxTokens,
        Some("tool_calls" | "function_call") => Finish::ToolUse,
        Some("stop") if has_calls => Finish::ToolUse,
        _ => Finish::EndTurn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_turns() -> Vec<Turn> {
        let mut input = Map::new();
        input.insert("city".into(), json!("Zürich"));
        vec![
            Turn::text(Role::User, "hi"),
            Turn {
                role: Role::Assistant,
                blocks: vec![Block::ToolUse {
                    id: "c1".into(),
                    name: "f".into(),
                    input,
                }],
            },
            Turn {
                role: Role::User,
                blocks: vec![Block::ToolResult {
                    id: "c1".into(),
                    content: vec![Block::Text("42".into())],
                    is_error: true,
                }],
            },
        ]
    }

    #[test]
    fn the_api_gets_ids_argument_strings_and_null_content_beside_calls() {
        let m = serde_json::to_value(messages(Some("sys"), &tool_turns(), Reader::Api)).unwrap();
        assert_eq!(
            m,
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "f",
                    "arguments": "{\"city\": \"Z\\u00fcrich\"}"}}]},
                {"role": "tool", "content": "Error: 42", "tool_call_id": "c1"},
            ])
        );
    }

    #[test]
    fn a_templates_call_ids_are_nine_letters_and_digits_the_same_for_the_same_id() {
        let id = template_id("call_8f0e2b7a41c94d2e9d3f6a1b5c7e9d20_0");
        assert_eq!(id.len(), 9);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
        assert_eq!(id, template_id("call_8f0e2b7a41c94d2e9d3f6a1b5c7e9d20_0"));
        assert_ne!(id, template_id("call_8f0e2b7a41c94d2e9d3f6a1b5c7e9d20_1"));
    }

    #[test]
    fn a_template_gets_argument_objects_and_media_as_its_marker() {
        let mut turns = tool_turns();
        turns.push(Turn {
            role: Role::User,
            blocks: vec![
                Block::Text("look".into()),
                Block::Image {
                    data: "AAAA".into(),
                    mime: "image/png".into(),
                    sha256: [0; 32],
                },
            ],
        });
        let m = serde_json::to_value(messages(None, &turns, Reader::Template)).unwrap();
        assert_eq!(
            m,
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": template_id("c1"),
                    "type": "function",
                    "function": {"name": "f", "arguments": {"city": "Zürich"}}}]},
                {"role": "tool", "content": "Error: 42", "tool_call_id": template_id("c1")},
                {"role": "user", "content": format!("look\n\n{}", media_marker())},
            ])
        );
        // A marker no text can spell: made anew by each process.
        assert!(media_marker().starts_with("<__media_") && media_marker().len() > 20);
    }

    #[test]
    fn finish_reasons_both_ways() {
        assert_eq!(finish_reason(&Finish::MaxTokens), "length");
        assert_eq!(finish(Some("stop"), true), Finish::ToolUse);
        assert_eq!(finish(Some("length"), false), Finish::MaxTokens);
        assert_eq!(finish(None, false), Finish::EndTurn);
    }
}
