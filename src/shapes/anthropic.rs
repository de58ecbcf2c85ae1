//! `messages_create`: the Anthropic messages shape.
//!
//! `messages: [{role: user|assistant, content: string | [{type: "text", text}]}]` and
//! `system: string | [{type: "text", text}]`; a block list becomes one text joined with `"\n"`.

use super::{Call, Common, Parts, ToolKind, message_objects};
use crate::args::{self, Obj, as_object, one_of};
use crate::completion::{Role, Turn};
use crate::contract::cursor::Entry;
use crate::error::{CallError, CallResult};
use serde_json::{Map, Value, json};

const ROLES: [&str; 2] = ["user", "assistant"];

/// Flattens a string or a list of text blocks at `path`.
fn flatten(v: &Value, path: &str) -> CallResult<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                let p = args::index(path, i);
                let block = Obj::new(as_object(b, &p)?, p.as_str());
                match block.required_str("type")? {
                    "text" => texts.push(block.required_str("text")?),
                    other => {
                        return Err(CallError::at(
                            &block.path("type"),
                            format!(
                                "expected \"text\", got {other:?}: only text blocks are supported"
                            ),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        other => Err(CallError::expected(
            path,
            "a string or a list of text blocks",
            other,
        )),
    }
}

pub fn parse(o: &Obj<'_>) -> CallResult<Call> {
    let messages = message_objects(o, "messages")?;
    let common = Common::parse(o, ToolKind::MessagesCreate)?;
    let system = o.get("system").map(|s| flatten(s, "system")).transpose()?;
    let mut turns = Vec::with_capacity(messages.len());
    let mut transcript = Vec::with_capacity(messages.len() + 1);
    let mut plain = Vec::with_capacity(messages.len());
    if let Some(s) = &system {
        transcript.push(Entry::new("system", s.clone()));
    }
    for (path, map) in &messages {
        let m = Obj::new(map, path.as_str());
        let role = m.opt_enum("role", &ROLES)?.ok_or_else(|| {
            CallError::at(&m.path("role"), format!("is required: {}", one_of(&ROLES)))
        })?;
        let raw = m.required("content")?;
        let content = flatten(raw, &m.path("content"))?;
        let r = if role == "user" {
            Role::User
        } else {
            Role::Assistant
        };
        turns.push(Turn::text(r, content.clone()));
        transcript.push(Entry::new(role, content));
        plain.push(json!({"role": role, "content": raw}));
    }
    let mut view = Map::new();
    view.insert("messages".into(), Value::Array(plain));
    view.insert(
        "system".into(),
        o.get("system").cloned().unwrap_or(Value::Null),
    );
    common.into_call(Parts {
        kind: ToolKind::MessagesCreate,
        system,
        turns,
        transcript,
        view,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(v: Value) -> CallResult<Call> {
        ToolKind::MessagesCreate.parse(v.as_object().unwrap())
    }

    #[test]
    fn blocks_flatten_with_newlines_and_system_leads_the_transcript() {
        let c = call(json!({
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Always."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "2+2?"}, {"type": "text", "text": "Quick."}]}]
        }))
        .unwrap();
        assert_eq!(c.request.system.as_deref(), Some("Be brief.\nAlways."));
        assert_eq!(
            c.request.turns,
            vec![Turn::text(Role::User, "2+2?\nQuick.")]
        );
        assert_eq!(c.transcript[0], Entry::new("system", "Be brief.\nAlways."));
        assert_eq!(c.transcript[1], Entry::new("user", "2+2?\nQuick."));
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "`messages[0].role`: expected one of \"user\", \"assistant\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
                "`messages[0].content[0].type`: expected \"text\", got \"image\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "`messages[0].content[0].text`: is required",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "system": 5}),
                "`system`: expected a string or a list of text blocks",
            ),
        ];
        for (args, want) in cases {
            let e = call(args).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
    }
}
