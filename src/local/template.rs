//! The chat prompt, rendered with the Jinja chat template the model carries in its metadata
//! (`tokenizer.chat_template`), as the model's own tooling would render it.

use crate::pyjson::{self, Style};
use crate::wire::openai::{Message, Tool};
use serde_json::json;

/// ChatML, for a model that carries no template.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// The prompt of a base model (one without a chat template that knows no ChatML): the
/// messages' texts, one after the other, for the model to continue.
pub fn plain(messages: &[Message]) -> String {
    messages
        .iter()
        .filter_map(Message::as_text)
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Renders the prompt, ending with the start of the assistant's turn.
pub fn render(
    template: Option<&str>,
    messages: &[Message],
    tools: &[Tool],
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
    fn chatml_and_tojson() {
        use crate::call::{Role, Turn};
        use crate::wire::openai::{Reader, messages};
        let m = messages(
            Some("sys"),
            &[Turn::text(Role::User, "hi")],
            Reader::Template,
        );
        let prompt = render(None, &m, &[]).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(plain(&m), "sys\n\nhi");
        let mut params = serde_json::Map::new();
        params.insert("a".into(), json!([1, "é"]));
        let t = "{{ tools[0].function.parameters | tojson }}";
        assert_eq!(
            render(Some(t), &m, &[Tool::function("f", None, &params)]).unwrap(),
            "{\"a\": [1, \"\\u00e9\"]}"
        );
    }
}
