//! A completion tool's result, written from the service's answer. Its structured content is
//! the object the tool's API writes ([`registry::for_tool`]: the same encoder as the HTTP
//! API's whole answer) where the shape puts it, with this server's report beside it; its text
//! is the completion (in the cursor's envelope when the chain is on), or for a tool whose
//! result is the object itself (`responses_create`), that object as the original server wrote
//! it.

use crate::api::dialect::Opening;
use crate::api::registry;
use crate::mcp::wire;
use crate::pyjson::{self, Style};
use crate::service::{Answered, Report};
use crate::shapes::common::render_text;
use crate::shapes::responses::ResponsesCreate;
use crate::shapes::{Placement, Shape, tool_names};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};

/// `responses_create`: how the tools the model saw were declared (Codex's namespaces and
/// custom tools), and what flattening them could not keep.
#[derive(Default)]
pub struct Declared {
    names: tool_names::Names,
    warnings: Vec<String>,
}

impl Declared {
    /// For `responses_create`, its tools as the model sees them, flattened in `arguments`, and
    /// how they were declared; nothing for the other tools.
    pub fn flattening(shape: &dyn Shape, arguments: &mut Map<String, Value>) -> Declared {
        let mut declared = Declared::default();
        if shape.name() == ResponsesCreate.name() {
            declared.names = tool_names::flatten(arguments, &mut declared.warnings);
        }
        declared
    }
}

/// What a result is written from: the tool's arguments as parsed and how its tools were
/// declared.
pub struct Asked<'a> {
    pub call: &'a crate::call::Call,
    pub arguments: &'a Map<String, Value>,
    pub declared: Declared,
}

/// The tool result of an answered call: the text (and any media) as content; as structured
/// content the API object where the shape puts it, with what this server reports beside it
/// (warnings, how tools and structured output were obtained, which backend and model answered
/// when it was not the host's sampling).
pub fn tool_result(shape: &dyn Shape, asked: Asked<'_>, mut answered: Answered) -> CallToolResult {
    if shape.names_asked_model() {
        answered.finished.model = asked.call.request.model.clone();
    }
    let object = api_object(shape, &asked, &answered);
    let Answered {
        cursor,
        mut report,
        media,
        finished,
    } = answered;
    report.warnings.extend(asked.declared.warnings);
    let mut structured = Map::new();
    let text = match shape.placement() {
        Placement::Whole => {
            let view = original_view(&object);
            let text = pyjson::dumps(&Value::Object(view.clone()), Style::PRETTY);
            structured = view;
            structured.extend(picked(&object, &STATE_MEMBERS));
            text
        }
        placement => {
            let completion = finished.answer.completion_text();
            let text = render_text(&completion, cursor.as_deref());
            structured.insert("result".into(), json!(text));
            match placement {
                Placement::Under(key) => {
                    structured.insert(key.into(), Value::Object(object));
                }
                _ => structured.extend(object),
            }
            text
        }
    };
    if shape.reports_host_model() {
        structured.insert("host_model".into(), json!(report.host_model));
    }
    add_report(&mut structured, report);
    let mut content = vec![ContentBlock::text(text)];
    content.extend(media.into_iter().map(wire::into_content));
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(Value::Object(structured));
    result
}

/// The API object of the answer, written by the encoder of the tool's API: its id the cursor
/// when the chain is on, its model the one the answer names (the backend's or host's; the
/// alias asked for, where the original named that). A tool of no API (`generate`) has its
/// finish reason and the model's reasoning.
fn api_object(shape: &dyn Shape, asked: &Asked<'_>, answered: &Answered) -> Map<String, Value> {
    let finished = &answered.finished;
    let Some(dialect) = registry::for_tool(shape.name()) else {
        let mut object = Map::new();
        let reason = crate::wire::openai::finish_reason(&finished.finish);
        object.insert("finish_reason".into(), json!(reason));
        if let Some(reasoning) = &finished.reasoning {
            object.insert("reasoning".into(), json!(reasoning));
        }
        return object;
    };
    let opening = Opening {
        id: answered.cursor.as_deref(),
        body: Some(asked.arguments),
        names: Some(&asked.declared.names),
        ..Opening::new(&finished.model, asked.call)
    };
    match dialect.whole(&opening, answered) {
        Value::Object(object) => object,
        _ => Map::new(),
    }
}

/// What this server reports beside the API object.
fn add_report(structured: &mut Map<String, Value>, report: Report) {
    if let Some(via) = report.tool_calls_via {
        structured.insert("tool_calls_via".into(), json!(via));
    }
    if !report.warnings.is_empty() {
        structured.insert("warnings".into(), json!(report.warnings));
    }
    if report.backend != crate::error::Backend::Host {
        structured.insert("backend".into(), json!(report.backend));
    }
    if let Some(route) = report.route {
        structured.insert("route".into(), route);
    }
    if let Some(how) = report.structured_output {
        structured.insert("structured_output".into(), how);
    }
}

/// The members of each kind of output item the original server wrote, in its order.
const ITEM_MEMBERS: [(&str, &[&str]); 4] = [
    ("message", &["type", "role", "content"]),
    (
        "function_call",
        &["type", "id", "call_id", "name", "arguments", "namespace"],
    ),
    (
        "custom_tool_call",
        &["type", "id", "call_id", "name", "input", "namespace"],
    ),
    ("reasoning", &["type", "id", "summary", "content"]),
];

/// The members of the Responses object a `responses_create` result has besides the text's:
/// the answer's state and usage.
const STATE_MEMBERS: [&str; 3] = ["status", "incomplete_details", "usage"];

/// A Responses object as the original server wrote it in its text: `id`, `object`, `model`
/// and `output`, each item with the members it wrote (a message's parts with their `type` and
/// `text`).
fn original_view(object: &Map<String, Value>) -> Map<String, Value> {
    let mut view = picked(object, &["id", "object", "model"]);
    let items = object.get("output").and_then(Value::as_array);
    let output: Vec<Value> = items
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .map(|item| {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
            let members = ITEM_MEMBERS
                .iter()
                .find(|(k, _)| *k == kind)
                .map_or(&["type"][..], |(_, m)| m);
            let mut kept = picked(item, members);
            if let Some(Value::Array(parts)) = kept.get_mut("content") {
                for part in parts.iter_mut() {
                    if let Some(p) = part.as_object() {
                        *part = Value::Object(picked(p, &["type", "text"]));
                    }
                }
            }
            Value::Object(kept)
        })
        .collect();
    view.insert("output".into(), Value::Array(output));
    view
}

/// The members `keys` of `object` that it has, in that order.
fn picked(object: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| object.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::{answered, weather_call};
    use crate::call::{Answer, Finish};

    /// The result of `responses_create` for `answer`, asked with `arguments`.
    fn responses_result(arguments: Value, answer: Answer, cursor: Option<&str>) -> CallToolResult {
        let arguments = arguments.as_object().cloned().unwrap_or_default();
        let call = crate::shapes::parse(&ResponsesCreate, &arguments, &Default::default()).unwrap();
        let mut answered = answered(answer, Finish::ToolUse);
        answered.cursor = cursor.map(str::to_owned);
        let asked = Asked {
            call: &call,
            arguments: &arguments,
            declared: Declared::default(),
        };
        tool_result(&ResponsesCreate, asked, answered)
    }

    #[test]
    fn a_response_names_the_alias_and_its_calls_as_the_original_did() {
        let answer = Answer::ToolCalls {
            text: String::new(),
            calls: vec![weather_call()],
        };
        let arguments = json!({"input": "hi", "model": "gpt-4o"});
        let result = responses_result(arguments, answer, Some("cur_1"));
        let text = result.content[0].as_text().unwrap().text.clone();
        assert!(
            text.starts_with(
                "{\n  \"id\": \"cur_1\",\n  \"object\": \"response\",\n  \"model\": \"gpt-4o\""
            ),
            "{text}"
        );
        let object = result.structured_content.unwrap();
        assert_eq!(object["id"], "cur_1");
        assert_eq!(object["model"], "gpt-4o");
        let call = &object["output"][0];
        assert_eq!(call["id"], "fc_call_1");
        assert_eq!(call["call_id"], "call_1");
        assert_eq!(call["arguments"], r#"{"city": "Paris"}"#);
        assert_eq!(object["usage"]["estimated"], false);
        let shown: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            shown["output"][0],
            json!({"type": "function_call", "id": "fc_call_1",
            "call_id": "call_1", "name": "get_weather", "arguments": r#"{"city": "Paris"}"#})
        );
    }

    #[test]
    fn the_text_of_a_response_has_what_the_original_wrote() {
        let object = json!({
            "id": "resp_1", "object": "response", "created_at": 5, "status": "completed",
            "model": "m",
            "output": [
                {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
                {"type": "function_call", "id": "fc_c", "call_id": "c", "name": "f",
                 "arguments": "{}", "status": "completed"}
            ],
            "usage": {"input_tokens": 1}
        });
        let view = original_view(object.as_object().unwrap());
        assert_eq!(
            Value::Object(view),
            json!({"id": "resp_1", "object": "response", "model": "m", "output": [
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hi"}]},
                {"type": "function_call", "id": "fc_c", "call_id": "c", "name": "f",
                 "arguments": "{}"}
            ]})
        );
    }
}
