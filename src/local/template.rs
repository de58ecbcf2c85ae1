//! The chat prompt, rendered with the Jinja chat template the model carries in its metadata
//! (`tokenizer.chat_template`), as the model's own tooling would render it.

use crate::call::{Block, Role, Turn, join_text};
use crate::pyjson::{self, Style};
use serde_json::{Value, json};

/// ChatML, for a model that carries no template.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// The messages and tools in the form chat templates expect (OpenAI's).
pub fn messages(system: Option<&str>, turns: &[Turn]) -> Vec<Value> {
    let mut out = Vec::with_capacity(turns.len() + 1);
    if let Some(system) = system {
        out.push(json!({"role": "system", "content": system}));
    }
    for turn in turns {
        let role = match turn.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut calls = Vec::new();
        let mut texts = Vec::new();
        for block in &turn.blocks {
            match block {
                Block::Text(t) => texts.push(t.as_str()),
                Block::ToolUse { name, input, .. } => {
                    calls.push(json!({"type": "function",
                        "function": {"name": name, "arguments": input}}));
                }
                Block::ToolResult {
                    content, is_error, ..
                } => {
                    let text = join_text(content, "\n");
                    let text = if *is_error {
                        format!("Error: {text}")
                    } else {
                        text
                    };
                    out.push(json!({"role": "tool", "content": text}));
                }
                Block::Image { .. } | Block::Audio { .. } => {}
            }
        }
        let content = texts.join("\n\n");
        if !calls.is_empty() {
            out.push(json!({"role": role, "content": content, "tool_calls": calls}));
        } else if !content.is_empty() || texts.len() == turn.blocks.len() {
            out.push(json!({"role": role, "content": content}));
        }
    }
    out
}

/// The prompt of a base model (one without a chat template that knows no ChatML): the
/// messages' texts, one after the other, for the model to continue.
pub fn plain(messages: &[Value]) -> String {
    messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Renders the prompt, ending with the start of the assistant's turn.
pub fn render(
    template: Option<&str>,
    messages: &[Value],
    tools: &[Value],
) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.add_filter("tojson", |value: minijinja::Value| {
        serde_json::to_value(&value)
            .map(|v| pyjson::dumps(&v, Style::PLAIN))
            .map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
            })
    });
    env.add_function("raise_exception", |message: String| -> Result<String, _> {
        Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            message,
        ))
    });
    let tools = (!tools.is_empty()).then_some(tools);
    let context = json!({"messages": messages, "tools": tools, "add_generation_prompt": true});
    env.render_str(template.unwrap_or(CHATML), context)
        .map_err(|e| format!("the model's chat template failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_with_tool_turns() {
        let turns = vec![
            Turn::text(Role::User, "hi"),
            Turn {
                role: Role::Assistant,
                blocks: vec![Block::ToolUse {
                    id: "1".into(),
                    name: "f".into(),
                    input: serde_json::Map::new(),
                }],
            },
            Turn {
                role: Role::User,
                blocks: vec![Block::ToolResult {
                    id: "1".into(),
                    content: vec![Block::Text("42".into())],
                    is_error: false,
                }],
            },
        ];
        let m = messages(Some("sys"), &turns);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(m[3], json!({"role": "tool", "content": "42"}));
        let prompt = render(None, &m[..2], &[]).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(plain(&m[..2]), "sys\n\nhi");
        let t = "{{ tools[0] | tojson }}";
        assert_eq!(
            render(Some(t), &m, &[json!({"a": [1, "é"]})]).unwrap(),
            "{\"a\": [1, \"\\u00e9\"]}"
        );
    }
}
