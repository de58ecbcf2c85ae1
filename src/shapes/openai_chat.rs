//! `chat_complete`: the OpenAI chat-completions shape.
//!
//! `messages: [{role: system|developer|user|assistant|tool, content}]`. System (and developer)
//! messages leave the list and are joined in order with a blank line into the system prompt; the
//! others become turns. Content is a string or a list of parts (`text`, `image_url` with a data
//! URL, `input_audio`); assistant messages may carry `tool_calls` and their `reasoning_content`,
//! and `tool` messages answer them by `tool_call_id`. The answer's reasoning is the message's
//! `reasoning_content`.

use super::common::{
    Common, Env, Format, Hooks, Msg, Parts, Spelling, flatten_text, message_objects,
};
use super::{Placement, Shape};
use crate::args::{self, Obj, as_object};
use crate::call::{Block, Call, Role};
use crate::contract::cursor::Entry;
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::wire::media;
use serde_json::{Map, Value, json};

/// The `chat_complete` tool.
pub struct ChatComplete;

const SPELLING: Spelling = Spelling {
    tool: "chat_complete",
    list_key: "messages",
    modes: true,
    settings: None,
    stop: Some("stop"),
    max_tokens: "max_tokens",
    max_tokens_alias: Some("max_completion_tokens"),
    format: Format::ResponseFormat,
    metadata: &[
        "top_p",
        "seed",
        "user",
        "metadata",
        "frequency_penalty",
        "presence_penalty",
    ],
    verifies_cursors: true,
    hooks: Hooks::COMMON,
};

impl Shape for ChatComplete {
    fn name(&self) -> &'static str {
        SPELLING.tool
    }

    fn definition(&self) -> &'static str {
        include_str!("tools/chat_complete.json")
    }

    fn parse(&self, o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
        parse(o, env)
    }

    fn placement(&self) -> Placement {
        Placement::Under("chat_completion")
    }
}

const ROLES: [&str; 5] = ["system", "user", "assistant", "tool", "developer"];
const PART_TYPES: [&str; 3] = ["text", "image_url", "input_audio"];

/// Content: a string or a list of parts.
fn content(v: &Value, path: &str, limits: &Limits) -> CallResult<Vec<Block>> {
    let parts = match v {
        Value::String(s) => return Ok(vec![Block::Text(s.clone())]),
        Value::Array(parts) => parts,
        other => {
            return Err(CallError::expected(
                path,
                "a string or a list of content parts",
                other,
            ));
        }
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let p = args::index(path, i);
        let part = Obj::new(as_object(part, &p)?, p.as_str());
        blocks.push(match part.required_enum("type", &PART_TYPES)? {
            "text" => Block::Text(part.required_str("text")?.to_owned()),
            "image_url" => {
                let url_path = part.path("image_url");
                let url = match part.required("image_url")? {
                    Value::String(u) => u.as_str(),
                    Value::Object(m) => Obj::new(m, url_path.as_str()).required_str("url")?,
                    other => {
                        return Err(CallError::expected(
                            &url_path,
                            "an object {\"url\": ...}",
                            other,
                        ));
                    }
                };
                media::image_url(url, &format!("{url_path}.url"), limits)?
            }
            _ => media::input_audio(&part, limits)?,
        });
    }
    Ok(flatten_text(blocks))
}

/// An assistant message's `tool_calls`: `[{id, type: "function", function: {name, arguments}}]`.
fn tool_calls(list: &[Value], path: &str) -> CallResult<Vec<Block>> {
    list.iter()
        .enumerate()
        .map(|(i, call)| {
            let p = args::index(path, i);
            let call = Obj::new(as_object(call, &p)?, p.as_str());
            let fpath = call.path("function");
            let function = Obj::new(
                as_object(call.required("function")?, &fpath)?,
                fpath.as_str(),
            );
            let input = args::json_object_string(&function, "arguments")?;
            Ok(Block::ToolUse {
                id: call.required_str("id")?.to_owned(),
                name: function.required_str("name")?.to_owned(),
                input,
            })
        })
        .collect()
}

fn parse(o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
    let messages = message_objects(o, "messages")?;
    let common = Common::read(o, &SPELLING, env)?;
    let mut system = Vec::new();
    let mut turns = Vec::new();
    let mut transcript = Vec::with_capacity(messages.len());
    let mut plain = Vec::with_capacity(messages.len());
    for (index, (path, map)) in messages.iter().enumerate() {
        let m = Obj::new(map, path.as_str());
        let role = m.required_enum("role", &ROLES)?;
        let (entry_role, turn_role, blocks) = message(&m, role, &mut system, env.limits)?;
        transcript.push(Entry::from_blocks(entry_role, &blocks));
        if common.persona.is_some() {
            plain.push(plain_message(map, role));
        }
        if let Some(role) = turn_role {
            turns.push(Msg {
                index,
                role,
                blocks,
            });
        }
    }
    let mut view = Map::new();
    if common.persona.is_some() {
        view.insert("messages".into(), Value::Array(plain));
    }
    let parts = Parts {
        list_key: "messages",
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: turns,
        transcript,
        view,
        common_view: Some(true),
    };
    common.into_call(parts, env.limits)
}

/// One message: its transcript role, its turn role (`None` for system text, which is pushed
/// onto `system`) and its blocks.
fn message(
    m: &Obj<'_>,
    role: &'static str,
    system: &mut Vec<String>,
    limits: &Limits,
) -> CallResult<(&'static str, Option<Role>, Vec<Block>)> {
    // The path is written only when it is needed: for an error, or to name a part.
    let content_path = || m.path("content");
    let mut blocks = match (role, m.get("content")) {
        ("assistant", None) => Vec::new(),
        (_, Some(Value::String(text))) => vec![Block::Text(text.clone())],
        (_, Some(v)) => content(v, &content_path(), limits)?,
        (_, None) => return Err(CallError::at(&content_path(), "is required but missing")),
    };
    match role {
        "system" | "developer" => match blocks.as_slice() {
            [Block::Text(t)] => {
                system.push(t.clone());
                Ok((role, None, blocks))
            }
            _ => Err(CallError::at(
                &content_path(),
                "system messages take text only",
            )),
        },
        "user" => Ok((role, Some(Role::User), blocks)),
        "assistant" => {
            if let Some(calls) = m.opt_array("tool_calls")? {
                blocks.retain(|b| !matches!(b, Block::Text(t) if t.is_empty()));
                blocks.extend(tool_calls(calls, &m.path("tool_calls"))?);
            }
            if blocks.is_empty() {
                return Err(CallError::at(
                    m.here(),
                    "an assistant message needs content or tool_calls",
                ));
            }
            // Its reasoning, as llama-server, vLLM and DeepSeek return it, leads the turn.
            if let Some(reasoning) = m.opt_str("reasoning_content")?
                && !reasoning.is_empty()
            {
                blocks.insert(0, Block::Reasoning(reasoning.to_owned()));
            }
            Ok((role, Some(Role::Assistant), blocks))
        }
        _ => {
            let result = Block::ToolResult {
                id: m.required_str("tool_call_id")?.to_owned(),
                content: blocks,
                is_error: false,
            };
            Ok(("tool", Some(Role::User), vec![result]))
        }
    }
}

/// The message as a persona's `input_schema` sees it.
fn plain_message(map: &Map<String, Value>, role: &str) -> Value {
    let mut item = Map::new();
    item.insert("role".into(), json!(role));
    item.insert(
        "content".into(),
        map.get("content").cloned().unwrap_or(Value::Null),
    );
    for extra in ["tool_calls", "tool_call_id"] {
        if let Some(v) = map.get(extra) {
            item.insert(extra.into(), v.clone());
        }
    }
    Value::Object(item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Mode, Turn};

    pub fn call(v: Value) -> CallResult<Call> {
        crate::shapes::common::tests_support::parse(&ChatComplete, v)
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
                json!({"messages": [{"role": "robot", "content": "x"}]}),
                "`messages[0].role`: expected one of \"system\", \"user\", \"assistant\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": 3}]}),
                "`messages[0].content`: expected a string or a list of content parts, got number 3",
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
    use crate::call::Mode;

    fn call(v: Value) -> CallResult<Call> {
        tests::call(v)
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
