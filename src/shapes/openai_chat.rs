//! `chat_complete`: the OpenAI chat-completions shape.
//!
//! `messages: [{role: system|user|assistant, content: string}]`. System messages leave the list
//! and are joined in order with a blank line into the system prompt; the others become turns.

use super::{Call, Common, Parts, ToolKind, message_objects};
use crate::args::{Obj, one_of};
use crate::completion::{Role, Turn};
use crate::contract::cursor::Entry;
use crate::error::{CallError, CallResult};
use serde_json::{Map, Value, json};

const ROLES: [&str; 3] = ["system", "user", "assistant"];

pub fn parse(o: &Obj<'_>) -> CallResult<Call> {
    let messages = message_objects(o, "messages")?;
    let common = Common::parse(o, ToolKind::ChatComplete)?;
    let mut system = Vec::new();
    let mut turns = Vec::new();
    let mut transcript = Vec::with_capacity(messages.len());
    let mut plain = Vec::with_capacity(messages.len());
    for (path, map) in &messages {
        let m = Obj::new(map, path.as_str());
        let role = m.opt_enum("role", &ROLES)?.ok_or_else(|| {
            CallError::at(&m.path("role"), format!("is required: {}", one_of(&ROLES)))
        })?;
        let content = m.required_str("content")?;
        match role {
            "system" => system.push(content),
            "user" => turns.push(Turn::text(Role::User, content)),
            _ => turns.push(Turn::text(Role::Assistant, content)),
        }
        transcript.push(Entry::new(role, content));
        plain.push(json!({"role": role, "content": content}));
    }
    if turns.is_empty() {
        return Err(CallError::at(
            "messages",
            "needs at least one user or assistant message besides system messages",
        ));
    }
    let mut view = Map::new();
    view.insert("messages".into(), Value::Array(plain));
    common.into_call(Parts {
        kind: ToolKind::ChatComplete,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        turns,
        transcript,
        view,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::Mode;

    fn call(v: Value) -> CallResult<Call> {
        ToolKind::ChatComplete.parse(v.as_object().unwrap())
    }

    #[test]
    fn system_messages_fold_into_the_system_prompt() {
        let c = call(json!({"messages": [
            {"role": "system", "content": "A"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "B"},
            {"role": "assistant", "content": "yo"},
        ], "temperature": 0.5, "model": "gpt-x"}))
        .unwrap();
        assert_eq!(c.request.system.as_deref(), Some("A\n\nB"));
        assert_eq!(
            c.request.turns,
            vec![
                Turn::text(Role::User, "hi"),
                Turn::text(Role::Assistant, "yo")
            ]
        );
        assert_eq!(c.request.max_tokens, 4096);
        assert_eq!(c.request.temperature, Some(0.5));
        assert_eq!(c.request.model, "gpt-x");
        assert_eq!(c.transcript.len(), 4);
        assert!(matches!(c.mode, Mode::Text));
    }

    #[test]
    fn no_system_message_means_no_system_prompt() {
        let c = call(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(c.request.system, None);
        assert_eq!(c.request.model, "agent-default");
    }

    #[test]
    fn bad_messages_name_the_field() {
        let cases = [
            (json!({}), "`messages`: is required"),
            (
                json!({"messages": []}),
                "`messages`: must contain at least one item",
            ),
            (
                json!({"messages": "hi"}),
                "`messages`: expected a non-empty array, got string",
            ),
            (
                json!({"messages": [{"role": "tool", "content": "x"}]}),
                "`messages[0].role`: expected one of \"system\", \"user\", \"assistant\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": 3}]}),
                "`messages[0].content`: expected a string, got number 3",
            ),
            (
                json!({"messages": [{"content": "x"}]}),
                "`messages[0].role`: is required",
            ),
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "besides system messages",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                "`max_tokens`",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
                "`temperature`: expected a number or null",
            ),
        ];
        for (args, want) in cases {
            let e = call(args).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
    }

    #[test]
    fn conflicts_are_named() {
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "output_schema": {"type": "object"},
            "tools": [{"name": "t", "input_schema": {"type": "object"}}]}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`tools` and `output_schema`"), "{e}");
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "output_schema": {"type": "object"},
            "persona": {"name": "p", "output_schema": {"type": "object"}}}))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`output_schema` and `persona.output_schema`"),
            "{e}"
        );
    }

    #[test]
    fn persona_sees_exactly_the_documented_keys() {
        // additionalProperties false over exactly the A5 key set must accept the request.
        let keys = [
            "messages",
            "model",
            "temperature",
            "max_tokens",
            "output_schema",
            "tools",
            "tool_choice",
            "previous_response_id",
        ];
        let props: Map<String, Value> = keys.iter().map(|k| (k.to_string(), json!({}))).collect();
        let c = call(json!({"messages": [{"role": "user", "content": "x"}],
            "persona": {"name": "strict", "input_schema": {"type": "object", "properties": props,
                "required": keys, "additionalProperties": false}}}));
        assert!(c.is_ok(), "{:?}", c.err());
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "persona": {"name": "strict", "input_schema": {"type": "object",
                "properties": {"max_tokens": {"maximum": 100}}}}}))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("persona \"strict\"") && e.contains("/max_tokens"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;
    use crate::shapes::Mode;

    fn call(v: Value) -> CallResult<Call> {
        ToolKind::ChatComplete.parse(v.as_object().unwrap())
    }

    #[test]
    fn response_format_maps_onto_output_schema() {
        let c = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
                "schema": {"type": "object", "required": ["a"]}}}}))
        .unwrap();
        let Mode::Structured(s) = &c.mode else {
            panic!()
        };
        assert_eq!(s.raw()["required"], json!(["a"]));
        let c = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_object"}}))
        .unwrap();
        let Mode::Structured(s) = &c.mode else {
            panic!()
        };
        assert!(s.check(&json!({"anything": 1})).is_ok() && s.check(&json!([1])).is_err());
        let c = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "text"}}))
        .unwrap();
        assert!(matches!(c.mode, Mode::Text));
    }

    #[test]
    fn two_spellings_or_a_bad_format_are_named() {
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "output_schema": {"type": "object"}, "response_format": {"type": "json_object"}}))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`output_schema` and `response_format` both ask"),
            "{e}"
        );
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`response_format.json_schema.schema`"), "{e}");
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema"}}))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`response_format.json_schema`: is required"),
            "{e}"
        );
        let e = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "yaml"}}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`response_format.type`"), "{e}");
        let e = call(json!({"messages": [{"role": "user", "content": "x"}], "max_retries": 9}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`max_retries`: expected an integer from 0 to 5"),
            "{e}"
        );
    }

    #[test]
    fn new_arguments_stay_out_of_the_persona_view() {
        let c = call(json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_object"}, "max_retries": 2,
            "persona": {"name": "p", "input_schema": {"type": "object",
                "properties": {"output_schema": {"type": "null"}},
                "propertyNames": {"enum": ["messages", "model", "temperature", "max_tokens",
                    "output_schema", "tools", "tool_choice", "previous_response_id"]}}}}));
        assert!(c.is_ok(), "{:?}", c.err());
        assert_eq!(c.unwrap().max_retries, 2);
    }
}
