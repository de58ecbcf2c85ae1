//! Interpreting the backend's answer for the call's mode: plain text, tool calls, or structured
//! output that must satisfy a schema. A violation is not returned as output: it is either
//! repaired (the machine asks again with the problem) or reported as an error.

use super::{STRUCTURED_TOOL, Strategy};
use crate::call::{Answer, Call, Completion, Mode, ToolCall, ToolChoice, ToolDef, new_id};
use crate::contract::schema::{Schema, Violation};
use crate::error::{Blame, CallResult};
use crate::pyjson::{self, Style};
use serde_json::Value;

/// What came of one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Accepted(Answer),
    /// The structured output is missing or invalid; `answer` is what the host said, for repair.
    Violation {
        answer: String,
        problem: String,
    },
}

/// Interprets one answer for the call's mode under `strategy`.
pub fn interpret(
    call: &Call,
    strategy: Strategy,
    completion: &Completion,
    blame: Blame,
) -> CallResult<Verdict> {
    let text = completion.text();
    let calls: Vec<ToolCall> = completion
        .tool_uses()
        .map(|(id, name, input)| ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            input: input.clone(),
        })
        .collect();
    match (strategy, &call.mode) {
        (Strategy::ToolsNative | Strategy::ToolsByPrompt, Mode::Tools { defs, choice })
            if !calls.is_empty() =>
        {
            Ok(native_calls(text, calls, defs, *choice))
        }
        (Strategy::ToolsNative, Mode::Tools { choice, .. }) if *choice == ToolChoice::Required => {
            Ok(Verdict::Violation {
                answer: text,
                problem: "no tool call came back, but tool_choice requires one".to_owned(),
            })
        }
        (Strategy::ToolsByPrompt, Mode::Tools { defs, choice }) => {
            Ok(prompted_tools(text, defs, *choice))
        }
        (Strategy::StructuredByTool, Mode::Structured(schema)) => {
            Ok(structured_by_tool(text, &calls, schema))
        }
        (Strategy::StructuredByPrompt | Strategy::StructuredNative, Mode::Structured(schema)) => {
            Ok(structured_by_prompt(text, schema))
        }
        _ if !calls.is_empty() => Err(blame.failed(
            "the model answered with tool_use content, but no tools were offered to it; \
             expected text",
        )),
        _ => Ok(Verdict::Accepted(Answer::Text(text))),
    }
}

/// Tool calls the backend made natively, held to what was offered as prompted ones are: no call
/// under `tool_choice: "none"`, only tools offered, arguments that satisfy their schema.
fn native_calls(
    text: String,
    calls: Vec<ToolCall>,
    defs: &[ToolDef],
    choice: ToolChoice,
) -> Verdict {
    let shown = || {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "arguments": c.input}))
            .collect();
        let calls = pyjson::dumps(&serde_json::json!({ "tool_calls": calls }), Style::SORTED);
        if text.is_empty() {
            calls
        } else {
            format!("{text}\n{calls}")
        }
    };
    if choice == ToolChoice::None {
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        return Verdict::Violation {
            answer: shown(),
            problem: format!(
                "tool_choice is \"none\", but the answer calls {names:?}; answer in text"
            ),
        };
    }
    for c in &calls {
        let problem = match defs.iter().find(|d| d.name == c.name) {
            None => {
                let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
                format!(
                    "the answer calls a tool named {:?}, but the tools are {names:?}",
                    c.name
                )
            }
            Some(def) => match def.schema.check(&Value::Object(c.input.clone())) {
                Ok(()) => continue,
                Err(e) => format!(
                    "the arguments of the call to {:?} violate its input schema {e}",
                    c.name
                ),
            },
        };
        return Verdict::Violation {
            answer: shown(),
            problem,
        };
    }
    Verdict::Accepted(Answer::ToolCalls { text, calls })
}

/// Tool calls written in the text by a model that was offered tools in the prompt.
fn prompted_tools(text: String, defs: &[ToolDef], choice: ToolChoice) -> Verdict {
    match emulated_calls(&text, defs) {
        Emulated::Calls { calls, rest } => {
            Verdict::Accepted(Answer::ToolCalls { text: rest, calls })
        }
        Emulated::Invalid(problem) => Verdict::Violation {
            answer: text,
            problem,
        },
        Emulated::NoCall if choice == ToolChoice::Required => Verdict::Violation {
            answer: text,
            problem: "no tool call came back, but tool_choice requires one".to_owned(),
        },
        Emulated::NoCall => Verdict::Accepted(Answer::Text(text)),
    }
}

/// Structured output as the input of the required tool.
fn structured_by_tool(text: String, calls: &[ToolCall], schema: &Schema) -> Verdict {
    let Some(found) = calls.iter().find(|c| c.name == STRUCTURED_TOOL) else {
        return Verdict::Violation {
            answer: text,
            problem: format!(
                "the host did not call the required {STRUCTURED_TOOL} tool, so it gave no \
                 structured output"
            ),
        };
    };
    let value = Value::Object(found.input.clone());
    match schema.check(&value) {
        Ok(()) => Verdict::Accepted(Answer::Json(value)),
        Err(e) => Verdict::Violation {
            answer: pyjson::dumps(&value, Style::SORTED),
            problem: format!("the structured output violates output_schema {e}"),
        },
    }
}

/// Structured output as JSON found in the text.
fn structured_by_prompt(text: String, schema: &Schema) -> Verdict {
    match extract_json(&text) {
        None => Verdict::Violation {
            answer: text,
            problem: "the answer contains no JSON object".to_owned(),
        },
        Some(value) => match schema.check(&value) {
            Ok(()) => Verdict::Accepted(Answer::Json(value)),
            Err(e) => Verdict::Violation {
                answer: text,
                problem: format!("the JSON in the answer violates output_schema {e}"),
            },
        },
    }
}

/// The instruction that offers tools to a host that cannot take them.
pub fn tools_instruction(defs: &[ToolDef], choice: ToolChoice) -> String {
    let mut s = String::from(
        "You can call tools. To call one or more, reply with only this fenced JSON block and \
         nothing after it:\n```json\n{\"tool_calls\": [{\"name\": \"<tool name>\", \
         \"arguments\": {<arguments that satisfy the tool's input schema>}}]}\n```\n",
    );
    s.push_str(if choice == ToolChoice::Required {
        "You must call at least one tool.\n"
    } else {
        "If no tool is needed, answer in plain text instead.\n"
    });
    s.push_str("Tools:");
    for d in defs {
        s.push_str(&format!(
            "\n- {}: {}\n  input schema: {}",
            d.name,
            d.description.as_deref().unwrap_or("(no description)"),
            pyjson::dumps_object(d.input_schema(), Style::SORTED)
        ));
    }
    s
}

/// Tool calls found in a prompted answer.
#[derive(Debug, PartialEq)]
enum Emulated {
    Calls {
        calls: Vec<ToolCall>,
        rest: String,
    },
    /// JSON shaped like tool calls, but wrong (unknown tool, arguments violating the schema).
    Invalid(String),
    NoCall,
}

/// Reads `{"tool_calls": [{"name", "arguments"}]}` (also a bare call object, a list of them,
/// `"input"` for `"arguments"`, or arguments as a JSON string) from a prompted answer and
/// checks each call against its tool's input schema.
fn emulated_calls(text: &str, defs: &[ToolDef]) -> Emulated {
    let Some((value, span)) = extract_json_span(text) else {
        return Emulated::NoCall;
    };
    let Some(items) = super::written::call_items(&value) else {
        return Emulated::NoCall;
    };
    let calls = match items
        .into_iter()
        .map(|item| emulated_call(item, defs))
        .collect::<Result<Vec<_>, BadCall>>()
    {
        Ok(calls) => calls,
        Err(problem) => return Emulated::Invalid(problem.to_string()),
    };
    let mut rest = String::with_capacity(text.len());
    rest.push_str(text.get(..span.start).unwrap_or(""));
    rest.push_str(text.get(span.end..).unwrap_or(""));
    Emulated::Calls {
        calls,
        rest: rest.trim().to_owned(),
    }
}

/// Why a prompted call cannot be taken.
#[derive(Debug, thiserror::Error)]
enum BadCall {
    #[error("the answer calls a tool named {name:?}, but the tools are {tools:?}")]
    UnknownTool { name: String, tools: Vec<String> },
    #[error("the arguments of the call to {0:?} are not a JSON object")]
    NotAnObject(String),
    #[error("the arguments of the call to {name:?} violate its input schema {violation}")]
    Violates { name: String, violation: Violation },
}

/// One prompted call `{name, arguments | input | parameters}` (arguments possibly a JSON
/// string), checked against its tool's schema.
fn emulated_call(item: &Value, defs: &[ToolDef]) -> Result<ToolCall, BadCall> {
    let (name, args) = super::written::read_item(item);
    let Some(def) = defs.iter().find(|d| d.name == name) else {
        return Err(BadCall::UnknownTool {
            name: name.to_owned(),
            tools: defs.iter().map(|d| d.name.clone()).collect(),
        });
    };
    if !args.is_object() {
        return Err(BadCall::NotAnObject(name.to_owned()));
    }
    if let Err(violation) = def.schema.check(&args) {
        return Err(BadCall::Violates {
            name: name.to_owned(),
            violation,
        });
    }
    let Value::Object(input) = args else {
        return Err(BadCall::NotAnObject(name.to_owned()));
    };
    Ok(ToolCall {
        id: new_id("call_"),
        name: name.to_owned(),
        input,
    })
}

/// Finds the JSON in a model's text: the whole text, else the first fenced code block that
/// parses, else the first balanced JSON object or array in the text.
pub fn extract_json(text: &str) -> Option<Value> {
    extract_json_span(text).map(|(v, _)| v)
}

/// Most candidate starts tried in the balanced scan, so a hostile answer cannot make the scan
/// quadratic.
const MAX_SCAN_STARTS: usize = 64;

/// [`extract_json`] with the byte range of the text the JSON came from (the whole fence for a
/// fenced block).
pub fn extract_json_span(text: &str) -> Option<(Value, std::ops::Range<usize>)> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed)
        && (v.is_object() || v.is_array())
    {
        return Some((v, 0..text.len()));
    }
    let mut offset = 0;
    while let Some(start) = text.get(offset..).and_then(|r| r.find("```")) {
        let fence = offset + start;
        let after_start = fence + 3;
        let after = text.get(after_start..).unwrap_or("");
        // Skip the info string ("json", "JSON", ...) up to the end of the line.
        let body_start = after_start + after.find('\n').map_or(after.len(), |n| n + 1);
        let body = text.get(body_start..).unwrap_or("");
        let Some(end) = body.find("```") else { break };
        let close = body_start + end + 3;
        if let Ok(v) = serde_json::from_str::<Value>(body.get(..end).unwrap_or("").trim()) {
            return Some((v, fence..close));
        }
        offset = close;
    }
    let starts = text
        .char_indices()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .take(MAX_SCAN_STARTS);
    for (i, _) in starts {
        let tail = text.get(i..).unwrap_or("");
        let mut stream = serde_json::Deserializer::from_str(tail).into_iter::<Value>();
        if let Some(Ok(v)) = stream.next() {
            return Some((v, i..i + stream.byte_offset()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Vec<ToolDef> {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]});
        vec![ToolDef {
            name: "get_weather".into(),
            description: Some("Weather".into()),
            schema: crate::contract::schema::compile(
                &schema,
                "tools",
                &crate::limits::Limits::default(),
            )
            .unwrap(),
        }]
    }

    #[test]
    fn prompted_tool_calls_are_parsed_tolerantly_and_validated() {
        let forms = [
            "```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}\n```",
            "Let me check.\n```\n{\"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}}\n```",
            "[{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}]",
        ];
        for f in forms {
            let Emulated::Calls { calls, .. } = emulated_calls(f, &weather()) else {
                panic!("{f}");
            };
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].name, "get_weather");
            assert_eq!(calls[0].input["city"], "Paris");
            assert!(calls[0].id.starts_with("call_"));
        }
        let Emulated::Calls { rest, .. } = emulated_calls(forms[1], &weather()) else {
            panic!()
        };
        assert_eq!(rest, "Let me check.");
        assert_eq!(emulated_calls("It is sunny.", &weather()), Emulated::NoCall);
        assert_eq!(
            emulated_calls("{\"temp\": 21}", &weather()),
            Emulated::NoCall
        );
        let Emulated::Invalid(p) =
            emulated_calls("{\"name\": \"get_weather\", \"arguments\": {}}", &weather())
        else {
            panic!()
        };
        assert!(
            p.contains("violate its input schema") && p.contains("city"),
            "{p}"
        );
        let Emulated::Invalid(p) =
            emulated_calls("{\"name\": \"rm\", \"arguments\": {}}", &weather())
        else {
            panic!()
        };
        assert!(p.contains("\"rm\""), "{p}");
        assert!(tools_instruction(&weather(), ToolChoice::Required).contains("You must call"));
    }

    #[test]
    fn json_is_found_in_prose_fences_and_whole_text() {
        assert_eq!(extract_json(r#" {"a": 1} "#), Some(json!({"a": 1})));
        assert_eq!(
            extract_json("Here you go:\n```json\n{\"a\": [1, 2]}\n```\nDone."),
            Some(json!({"a": [1, 2]}))
        );
        assert_eq!(
            extract_json("Sure! The answer is {\"ok\": true, \"s\": \"}\"} as requested."),
            Some(json!({"ok": true, "s": "}"}))
        );
        assert_eq!(extract_json("no json {here"), None);
        let text = "Calling it.\n```json\n{\"a\": 1}\n```\nbye";
        let (_, span) = extract_json_span(text).unwrap();
        assert_eq!(&text[span], "```json\n{\"a\": 1}\n```");
        let text = "x {\"b\": 2} y";
        let (_, span) = extract_json_span(text).unwrap();
        assert_eq!(&text[span], "{\"b\": 2}");
        // The balanced scan tries a bounded number of starts, so a hostile answer full of
        // unterminated objects cannot make it quadratic: JSON after that many is not found.
        let mut hostile = "{\"a\": ".repeat(MAX_SCAN_STARTS);
        hostile.push_str(" {\"found\": true}");
        assert_eq!(extract_json(&hostile), None);
        let hostile = format!(
            "{}{{\"found\": true}}",
            "{\"a\": ".repeat(MAX_SCAN_STARTS - 1)
        );
        assert_eq!(
            extract_json(&hostile),
            Some(serde_json::json!({"found": true}))
        );
        assert_eq!(extract_json("just words"), None);
    }
}
