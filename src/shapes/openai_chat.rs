//! `chat_complete`: the OpenAI chat-completions shape.
//!
//! `messages: [{role: system|developer|user|assistant|tool, content}]`. System (and developer)
//! messages leave the list and are joined in order with a blank line into the system prompt; the
//! others become turns. Content is a string or a list of parts (`text`, `image_url` with a data
//! URL, `input_audio`); assistant messages may carry `tool_calls`, and `tool` messages answer
//! them by `tool_call_id`.

use super::{
    Answer, Call, Common, Msg, Parts, Reply, ToolKind, flatten_text, media, message_objects,
};
use crate::args::{self, Obj, as_object, one_of};
use crate::completion::{Block, Finish, Role};
use crate::contract::cursor::Entry;
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::pyjson::{self, Style};
use serde_json::{Map, Value, json};

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
        let ty = part.opt_enum("type", &PART_TYPES)?.ok_or_else(|| {
            CallError::at(
                &part.path("type"),
                format!("is required: {}", one_of(&PART_TYPES)),
            )
        })?;
        blocks.push(match ty {
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
            _ => {
                let audio_path = part.path("input_audio");
                let audio = Obj::new(
                    as_object(part.required("input_audio")?, &audio_path)?,
                    audio_path.as_str(),
                );
                let mime =
                    media::audio_format(audio.required_str("format")?, &audio.path("format"))?;
                media::block(
                    media::Kind::Audio,
                    audio.required_str("data")?,
                    mime,
                    &audio.path("data"),
                    &audio.path("format"),
                    limits,
                )?
            }
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
            let arguments = function.required_str("arguments")?;
            let input = match serde_json::from_str::<Value>(arguments) {
                Ok(Value::Object(m)) => m,
                _ => {
                    return Err(CallError::at(
                        &function.path("arguments"),
                        "expected a JSON object encoded as a string",
                    ));
                }
            };
            Ok(Block::ToolUse {
                id: call.required_str("id")?.to_owned(),
                name: function.required_str("name")?.to_owned(),
                input,
            })
        })
        .collect()
}

pub fn parse(o: &Obj<'_>, limits: &Limits) -> CallResult<Call> {
    let messages = message_objects(o, "messages")?;
    let common = Common::parse(o, ToolKind::ChatComplete, limits)?;
    let mut system = Vec::new();
    let mut turns = Vec::new();
    let mut transcript = Vec::with_capacity(messages.len());
    let mut plain = Vec::with_capacity(messages.len());
    for (index, (path, map)) in messages.iter().enumerate() {
        let m = Obj::new(map, path.as_str());
        let role = m.opt_enum("role", &ROLES)?.ok_or_else(|| {
            CallError::at(&m.path("role"), format!("is required: {}", one_of(&ROLES)))
        })?;
        let content_path = m.path("content");
        let mut blocks = match (role, m.get("content")) {
            ("assistant", None) => Vec::new(),
            (_, Some(v)) => content(v, &content_path, limits)?,
            (_, None) => return Err(CallError::at(&content_path, "is required but missing")),
        };
        let mut entry_role = role;
        let turn_role = match role {
            "system" | "developer" => {
                let text = match blocks.as_slice() {
                    [Block::Text(t)] => t.clone(),
                    _ => {
                        return Err(CallError::at(
                            &content_path,
                            "system messages take text only",
                        ));
                    }
                };
                system.push(text);
                None
            }
            "user" => Some(Role::User),
            "assistant" => {
                if let Some(calls) = m.opt_array("tool_calls")? {
                    blocks.retain(|b| !matches!(b, Block::Text(t) if t.is_empty()));
                    blocks.extend(tool_calls(calls, &m.path("tool_calls"))?);
                }
                if blocks.is_empty() {
                    return Err(CallError::at(
                        path,
                        "an assistant message needs content or tool_calls",
                    ));
                }
                Some(Role::Assistant)
            }
            _ => {
                entry_role = "tool";
                blocks = vec![Block::ToolResult {
                    id: m.required_str("tool_call_id")?.to_owned(),
                    content: blocks,
                    is_error: false,
                }];
                Some(Role::User)
            }
        };
        transcript.push(Entry::from_blocks(entry_role, &blocks));
        if common.persona.is_some() {
            let mut item = json!({"role": role, "content": map.get("content").cloned().unwrap_or(Value::Null)});
            for extra in ["tool_calls", "tool_call_id"] {
                if let (Some(v), Some(obj)) = (map.get(extra), item.as_object_mut()) {
                    obj.insert(extra.into(), v.clone());
                }
            }
            plain.push(item);
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
    common.into_call(Parts {
        kind: ToolKind::ChatComplete,
        list_key: "messages",
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: turns,
        transcript,
        view,
    })
}

/// The OpenAI `chat.completion` object for an answer.
pub fn completion_object(out: &Reply<'_>) -> Value {
    let (content, tool_calls) = match out.answer {
        Answer::ToolCalls { text, calls } => {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function", "function": {
                        "name": c.name,
                        "arguments": pyjson::dumps(&Value::Object(c.input.clone()), Style::SORTED),
                    }})
                })
                .collect();
            ((!text.is_empty()).then(|| text.clone()), Some(calls))
        }
        _ => (Some(out.completion.to_owned()), None),
    };
    let finish_reason = if tool_calls.is_some() {
        "tool_calls"
    } else {
        finish_reason(out.finish)
    };
    let mut message = json!({"role": "assistant", "content": content});
    if let (Some(calls), Some(m)) = (tool_calls, message.as_object_mut()) {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    let (prompt_tokens, completion_tokens) = out.usage();
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "id": out.cursor.map_or_else(|| format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()), str::to_owned),
        "object": "chat.completion",
        "created": created,
        "model": out.host_model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "estimated": true,
        },
    })
}

/// OpenAI's `finish_reason` for `generate`, which has no object of its own.
pub fn finish_reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::MaxTokens => "length",
        Finish::ToolUse => "tool_calls",
        Finish::EndTurn | Finish::StopSequence(_) => "stop",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::Turn;
    use crate::shapes::Mode;

    fn call(v: Value) -> CallResult<Call> {
        ToolKind::ChatComplete.parse(v.as_object().unwrap(), &Limits::default())
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
    use crate::shapes::Mode;

    fn call(v: Value) -> CallResult<Call> {
        ToolKind::ChatComplete.parse(v.as_object().unwrap(), &Limits::default())
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
