//! Interpreting the host's answer for the call's mode: plain text, tool calls, or structured
//! output that must satisfy a schema. A violation is not returned as output: it is either
//! repaired (the fulfilment loop asks again with the problem) or reported as an error.

use crate::completion::Completion;
use crate::error::{CallError, CallResult};
use crate::shapes::{Answer, Call, Mode, ToolCall};
use serde_json::Value;

/// The name of the single required tool that carries structured output.
pub const STRUCTURED_TOOL: &str = "structured_output";

/// How the call's mode is fulfilled on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Text,
    /// `output_schema` as one required tool (host declared `sampling.tools`).
    StructuredByTool,
    /// `output_schema` as an instruction in the system prompt, JSON extracted from the text.
    StructuredByPrompt,
    /// The caller's tools forwarded to the host.
    ToolsNative,
    /// The host cannot take tools: they were not sent, and the result says so.
    ToolsNotForwarded,
}

impl Strategy {
    pub fn for_call(call: &Call, sampling_tools: bool) -> Self {
        match (&call.mode, sampling_tools) {
            (Mode::Text, _) => Strategy::Text,
            (Mode::Structured(_), true) => Strategy::StructuredByTool,
            (Mode::Structured(_), false) => Strategy::StructuredByPrompt,
            (Mode::Tools { .. }, true) => Strategy::ToolsNative,
            (Mode::Tools { .. }, false) => Strategy::ToolsNotForwarded,
        }
    }

    /// How structured output was obtained, for the result's report.
    pub fn structured_via(self) -> Option<&'static str> {
        match self {
            Strategy::StructuredByTool => Some("tool"),
            Strategy::StructuredByPrompt => Some("prompt"),
            _ => None,
        }
    }

    pub fn warnings(self) -> Vec<String> {
        match self {
            Strategy::ToolsNotForwarded => vec![
                "tools were not forwarded: the host did not declare the sampling.tools \
                 capability, so it cannot take tools in a sampling request; the answer is the \
                 host model's plain text"
                    .to_owned(),
            ],
            _ => Vec::new(),
        }
    }
}

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

pub fn interpret(call: &Call, strategy: Strategy, completion: &Completion) -> CallResult<Verdict> {
    let text = completion.text();
    let calls: Vec<ToolCall> = completion
        .tool_uses()
        .map(|(id, name, input)| ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            input: input.clone(),
        })
        .collect();
    let schema = match &call.mode {
        Mode::Structured(s) => Some(s),
        _ => None,
    };
    match (strategy, schema) {
        (Strategy::ToolsNative, _) if !calls.is_empty() => {
            Ok(Verdict::Accepted(Answer::ToolCalls { text, calls }))
        }
        (Strategy::StructuredByTool, Some(schema)) => {
            let Some(found) = calls.iter().find(|c| c.name == STRUCTURED_TOOL) else {
                return Ok(Verdict::Violation {
                    answer: text,
                    problem: format!(
                        "the host did not call the required {STRUCTURED_TOOL} tool, so it gave \
                         no structured output"
                    ),
                });
            };
            let value = Value::Object(found.input.clone());
            Ok(match schema.check(&value) {
                Ok(()) => Verdict::Accepted(Answer::Json(value)),
                Err(e) => Verdict::Violation {
                    answer: crate::pyjson::dumps(&value, crate::pyjson::Style::SORTED),
                    problem: format!("the structured output violates output_schema {e}"),
                },
            })
        }
        (Strategy::StructuredByPrompt, Some(schema)) => Ok(match extract_json(&text) {
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
        }),
        _ if !calls.is_empty() => Err(CallError::Host(
            "the host answered with tool_use content, but no tools were offered to it; \
             expected text"
                .to_owned(),
        )),
        _ => Ok(Verdict::Accepted(Answer::Text(text))),
    }
}

/// Finds the JSON in a model's text: the whole text, else the first fenced code block that
/// parses, else the first balanced JSON object or array in the text.
pub fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed)
        && (v.is_object() || v.is_array())
    {
        return Some(v);
    }
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = rest.get(start + 3..).unwrap_or("");
        // Skip the info string ("json", "JSON", ...) up to the end of the line.
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = after.get(body_start..).unwrap_or("");
        let Some(end) = body.find("```") else { break };
        if let Ok(v) = serde_json::from_str::<Value>(body.get(..end).unwrap_or("").trim()) {
            return Some(v);
        }
        rest = body.get(end + 3..).unwrap_or("");
    }
    for (i, c) in text.char_indices() {
        if c == '{' || c == '[' {
            let tail = text.get(i..).unwrap_or("");
            let mut stream = serde_json::Deserializer::from_str(tail).into_iter::<Value>();
            if let Some(Ok(v)) = stream.next() {
                return Some(v);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(extract_json("just words"), None);
    }
}
