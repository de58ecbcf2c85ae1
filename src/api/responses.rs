//! The OpenAI Responses API as the Open Responses specification has it: the response object
//! ([`Resource`], every field its `ResponseResource` schema requires), its output items, and the
//! stream of `response.*` events, all written from typed values by one [`Encoder`]. The whole
//! answer is the encoder's last event's response: what a stream ends with and what a
//! non-streamed call returns are one value. Responses are stored (see [`super::store`]) with the
//! input they answered, so that `previous_response_id` continues a conversation.

use super::dialect::{self, Dialect, Endpoint, Method, Opening, Route, Wire};
use super::gate::TextGate;
use super::logprobs::{Entry, Pending, entries};
use super::{ApiError, Encode, ErrorKind, Prepared};
use crate::call::Finish;
use crate::fulfil::written::Piece;
use crate::service::Answered;
use crate::service::Finished;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// A response's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    InProgress,
    Completed,
    Incomplete,
    Failed,
}

/// Why a response is incomplete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncompleteDetails {
    pub reason: String,
}

/// Why a response failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

/// A part of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
    pub annotations: Vec<Value>,
    /// The text's tokens' log-probabilities, when asked for (`include:
    /// ["message.output_text.logprobs"]`) and reported.
    #[serde(default)]
    pub logprobs: Vec<Entry>,
}

impl OutputText {
    fn new(text: String) -> Self {
        OutputText {
            kind: "output_text".into(),
            text,
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }
}

/// A reasoning item's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningText {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

/// An output item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    /// The model's reasoning before its answer, as `reasoning_text` content.
    Reasoning {
        id: String,
        summary: Vec<Value>,
        content: Vec<ReasoningText>,
    },
    Message {
        id: String,
        status: Status,
        role: String,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: Status,
        /// The namespace the function was declared in (Codex's `namespace` tools).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    /// A call of a freeform (`custom`) tool: its raw text input.
    CustomToolCall {
        id: String,
        call_id: String,
        name: String,
        input: String,
        status: Status,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
}

impl Item {
    /// The item's id.
    pub fn id(&self) -> &str {
        match self {
            Item::Reasoning { id, .. }
            | Item::Message { id, .. }
            | Item::FunctionCall { id, .. }
            | Item::CustomToolCall { id, .. } => id,
        }
    }

    fn set_status(&mut self, to: Status) {
        match self {
            Item::Message { status, .. }
            | Item::FunctionCall { status, .. }
            | Item::CustomToolCall { status, .. } => *status = to,
            // A reasoning item has no status.
            Item::Reasoning { .. } => {}
        }
    }

    /// The item as a next request's input item carries it.
    pub fn as_input(&self) -> Value {
        match self {
            Item::Reasoning { content, .. } => json!({
                "type": "reasoning", "summary": [],
                "content": content.iter()
                    .map(|part| json!({"type": "reasoning_text", "text": part.text}))
                    .collect::<Vec<_>>(),
            }),
            Item::Message { content, .. } => json!({
                "type": "message", "role": "assistant",
                "content": content.iter()
                    .map(|part| json!({"type": "output_text", "text": part.text}))
                    .collect::<Vec<_>>(),
            }),
            Item::FunctionCall {
                call_id,
                name,
                arguments,
                namespace,
                ..
            } => {
                let mut call = json!({"type": "function_call", "call_id": call_id, "name": name,
                                      "arguments": arguments});
                if let (Some(namespace), Some(o)) = (namespace, call.as_object_mut()) {
                    o.insert("namespace".into(), json!(namespace));
                }
                call
            }
            Item::CustomToolCall {
                call_id,
                name,
                input,
                namespace,
                ..
            } => {
                let mut call = json!({"type": "custom_tool_call", "call_id": call_id,
                                      "name": name, "input": input});
                if let (Some(namespace), Some(o)) = (namespace, call.as_object_mut()) {
                    o.insert("namespace".into(), json!(namespace));
                }
                call
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub total_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens_details: OutputTokensDetails,
    /// Counted by this server from the text, not by the model.
    pub estimated: bool,
}

impl From<crate::call::Usage> for Usage {
    fn from(u: crate::call::Usage) -> Self {
        Usage {
            input_tokens: u.prompt,
            output_tokens: u.completion,
            total_tokens: u.total(),
            input_tokens_details: InputTokensDetails {
                cached_tokens: u.cached.unwrap_or(0),
            },
            output_tokens_details: OutputTokensDetails {
                reasoning_tokens: 0,
            },
            estimated: u.estimated,
        }
    }
}

/// What a response repeats of the request that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Echo {
    pub previous_response_id: Option<String>,
    pub instructions: Option<String>,
    pub tools: Vec<Value>,
    pub tool_choice: Value,
    pub truncation: String,
    pub parallel_tool_calls: bool,
    pub text: Value,
    pub top_p: f64,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    pub top_logprobs: u64,
    pub temperature: f64,
    pub reasoning: Option<Value>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub store: bool,
    pub background: bool,
    pub service_tier: String,
    pub metadata: Value,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
}

impl Echo {
    /// The fields of a request body (as the client sent it) a response repeats, each in the
    /// form the specification gives it; the defaults where the request has none. The body is
    /// checked elsewhere: what is of the wrong type here takes the default.
    pub fn read(body: &Map<String, Value>) -> Echo {
        let string = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
        let number = |k: &str, default: f64| body.get(k).and_then(Value::as_f64).unwrap_or(default);
        let count = |k: &str| body.get(k).and_then(Value::as_u64);
        let tools = echo_tools(body);
        let tool_choice = match body.get("tool_choice") {
            Some(Value::String(s)) if ["none", "auto", "required"].contains(&s.as_str()) => {
                json!(s)
            }
            Some(Value::Object(o)) => Value::Object(o.clone()),
            _ => json!("auto"),
        };
        Echo {
            previous_response_id: string("previous_response_id"),
            instructions: string("instructions"),
            tools,
            tool_choice,
            truncation: match string("truncation").as_deref() {
                Some("auto") => "auto".into(),
                _ => "disabled".into(),
            },
            parallel_tool_calls: body
                .get("parallel_tool_calls")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            text: json!({"format": text_format(body.get("text").and_then(|t| t.get("format")))}),
            top_p: number("top_p", 1.0),
            presence_penalty: number("presence_penalty", 0.0),
            frequency_penalty: number("frequency_penalty", 0.0),
            top_logprobs: count("top_logprobs").unwrap_or(0),
            temperature: number("temperature", 1.0),
            reasoning: body.get("reasoning").filter(|r| r.is_object()).map(|r| {
                json!({"effort": r.get("effort").cloned().unwrap_or(Value::Null),
                       "summary": r.get("summary").cloned().unwrap_or(Value::Null)})
            }),
            max_output_tokens: count("max_output_tokens").or_else(|| count("max_tokens")),
            max_tool_calls: count("max_tool_calls"),
            store: body.get("store").and_then(Value::as_bool).unwrap_or(true),
            background: false,
            service_tier: "default".into(),
            metadata: body
                .get("metadata")
                .filter(|m| m.is_object())
                .cloned()
                .unwrap_or_else(|| json!({})),
            safety_identifier: string("safety_identifier"),
            prompt_cache_key: string("prompt_cache_key"),
        }
    }
}

/// The request's function tools as a response repeats them, a namespace's tools among them,
/// each with its name, description, parameters and strictness.
fn echo_tools(body: &Map<String, Value>) -> Vec<Value> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|t| match t.get("type").and_then(Value::as_str) {
            Some("namespace") => t
                .get("tools")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => vec![t.clone()],
        })
        .filter(|t| t.get("type").and_then(Value::as_str).unwrap_or("function") == "function")
        .map(|t| {
            json!({"type": "function", "name": t.get("name").cloned().unwrap_or(json!("")),
                   "description": t.get("description").cloned().unwrap_or(Value::Null),
                   "parameters": t.get("parameters").cloned().unwrap_or(Value::Null),
                   "strict": t.get("strict").cloned().unwrap_or(Value::Null)})
        })
        .collect()
}

/// `text.format` as the response repeats it: `text`, `json_object`, or `json_schema` with its
/// name, description and strictness. (The specification's `JsonSchemaResponseFormat` has the
/// schema itself as `null`.)
fn text_format(format: Option<&Value>) -> Value {
    match format.and_then(|f| f.get("type")).and_then(Value::as_str) {
        Some("json_object") => json!({"type": "json_object"}),
        Some("json_schema") => {
            let f = format.cloned().unwrap_or_default();
            json!({"type": "json_schema",
                   "name": f.get("name").and_then(Value::as_str).unwrap_or("response"),
                   "description": f.get("description").and_then(Value::as_str),
                   "schema": null,
                   "strict": f.get("strict").and_then(Value::as_bool).unwrap_or(false)})
        }
        _ => json!({"type": "text"}),
    }
}

/// The response object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub id: String,
    pub object: String,
    pub created_at: u64,
    pub completed_at: Option<u64>,
    pub status: Status,
    pub incomplete_details: Option<IncompleteDetails>,
    pub model: String,
    pub output: Vec<Item>,
    pub error: Option<ResponseError>,
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub echo: Echo,
}

/// A response as it is stored: with the input it answered (the conversation before it, as
/// input items), which a next request's `previous_response_id` continues.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stored {
    pub response: Resource,
    pub input: Vec<Value>,
    /// The model the request named (the response's `model` is the backend's name for it): a
    /// follow-up that names none continues with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_model: Option<String>,
}

impl Stored {
    /// The conversation up to and with this response, as the input items of a next request.
    pub fn conversation(&self) -> Vec<Value> {
        let mut items = self.input.clone();
        items.extend(self.response.output.iter().map(Item::as_input));
        items
    }
}

/// How `GET /v1/responses/{id}/input_items` pages the items (OpenAI's query parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    /// Newest first (`order=desc`, the default) or oldest first (`asc`).
    pub newest_first: bool,
    /// Most items in one page (`limit`, 1 to 100, 20 by default).
    pub limit: usize,
    /// The item the page starts after (`after`).
    pub after: Option<String>,
}

impl Paging {
    /// Reads `order`, `limit` and `after` from a query string; a wrong value is named.
    pub fn from_query(query: Option<&str>) -> Result<Paging, String> {
        let mut paging = Paging {
            newest_first: true,
            limit: 20,
            after: None,
        };
        let pairs = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes());
        for (name, value) in pairs {
            match name.as_ref() {
                "order" => {
                    paging.newest_first = match value.as_ref() {
                        "desc" => true,
                        "asc" => false,
                        other => {
                            return Err(format!(
                                "`order`: expected \"asc\" or \"desc\", got {:?}",
                                crate::error::clip(other)
                            ));
                        }
                    }
                }
                "limit" => {
                    paging.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "`limit`: expected a whole number from 1 to 100, got {:?}",
                                crate::error::clip(&value)
                            )
                        })?;
                }
                "after" => paging.after = Some(value.into_owned()),
                _ => {}
            }
        }
        Ok(paging)
    }
}

/// The input items a stored response answered, as OpenAI lists them: each with an id (a
/// message's `msg_…`, stable for the response), a message's `status` and its text as content
/// parts (`input_text`, or `output_text` for the assistant's), one page of them.
pub fn input_item_list(response_id: &str, input: &[Value], paging: &Paging) -> Value {
    let stem = response_id.strip_prefix("resp_").unwrap_or(response_id);
    let mut items: Vec<Value> = input
        .iter()
        .enumerate()
        .map(|(i, item)| listed_item(stem, i, item))
        .collect();
    if paging.newest_first {
        items.reverse();
    }
    let start = paging.after.as_deref().map_or(0, |after| {
        items
            .iter()
            .position(|item| item.get("id").and_then(Value::as_str) == Some(after))
            .map_or(items.len(), |at| at + 1)
    });
    let rest: Vec<Value> = items.into_iter().skip(start).collect();
    let has_more = rest.len() > paging.limit;
    let data: Vec<Value> = rest.into_iter().take(paging.limit).collect();
    json!({"object": "list",
           "first_id": data.first().and_then(|d| d.get("id")),
           "last_id": data.last().and_then(|d| d.get("id")),
           "has_more": has_more,
           "data": data})
}

/// One input item as listed: see [`input_item_list`].
fn listed_item(stem: &str, i: usize, item: &Value) -> Value {
    let mut item = item.clone();
    let Some(o) = item.as_object_mut() else {
        return item;
    };
    let kind = o
        .entry("type")
        .or_insert_with(|| json!("message"))
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let prefix = match kind.as_str() {
        "message" => "msg",
        "function_call" => "fc",
        "function_call_output" => "fco",
        "reasoning" => "rs",
        _ => "item",
    };
    o.entry("id")
        .or_insert_with(|| json!(format!("{prefix}_{stem}_{i}")));
    if kind == "message" {
        let assistant = o.get("role").and_then(Value::as_str) == Some("assistant");
        let part = if assistant {
            "output_text"
        } else {
            "input_text"
        };
        if let Some(Value::String(text)) = o.get("content") {
            let content = json!([{"type": part, "text": text}]);
            o.insert("content".into(), content);
        }
        o.entry("status").or_insert_with(|| json!("completed"));
    }
    item
}

/// A request's `input` as a list of items (a string is one user message).
pub fn input_items(input: Option<&Value>) -> Vec<Value> {
    match input {
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One `response.*` event.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Event<'a> {
    #[serde(rename = "response.created")]
    Created {
        sequence_number: u64,
        response: &'a Resource,
    },
    #[serde(rename = "response.in_progress")]
    InProgress {
        sequence_number: u64,
        response: &'a Resource,
    },
    #[serde(rename = "response.completed")]
    Completed {
        sequence_number: u64,
        response: &'a Resource,
    },
    #[serde(rename = "response.incomplete")]
    Incomplete {
        sequence_number: u64,
        response: &'a Resource,
    },
    #[serde(rename = "response.failed")]
    Failed {
        sequence_number: u64,
        response: &'a Resource,
    },
    #[serde(rename = "response.output_item.added")]
    ItemAdded {
        sequence_number: u64,
        output_index: usize,
        item: &'a Item,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone {
        sequence_number: u64,
        output_index: usize,
        item: &'a Item,
    },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        part: &'a OutputText,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        part: &'a OutputText,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        delta: &'a str,
        logprobs: Vec<Entry>,
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        text: &'a str,
        logprobs: &'a [Entry],
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        text: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgsDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgsDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        name: &'a str,
        arguments: &'a str,
    },
    #[serde(rename = "response.custom_tool_call_input.delta")]
    InputDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.custom_tool_call_input.done")]
    InputDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: usize,
        input: &'a str,
    },
    #[serde(rename = "error")]
    Error {
        sequence_number: u64,
        error: ErrorPayload<'a>,
    },
}

#[derive(Serialize)]
struct ErrorPayload<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    code: Option<&'a str>,
    message: &'a str,
    param: Option<&'a str>,
}

impl Event<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Event::Created { .. } => "response.created",
            Event::InProgress { .. } => "response.in_progress",
            Event::Completed { .. } => "response.completed",
            Event::Incomplete { .. } => "response.incomplete",
            Event::Failed { .. } => "response.failed",
            Event::ItemAdded { .. } => "response.output_item.added",
            Event::ItemDone { .. } => "response.output_item.done",
            Event::PartAdded { .. } => "response.content_part.added",
            Event::PartDone { .. } => "response.content_part.done",
            Event::TextDelta { .. } => "response.output_text.delta",
            Event::TextDone { .. } => "response.output_text.done",
            Event::ReasoningDelta { .. } => "response.reasoning_text.delta",
            Event::ReasoningDone { .. } => "response.reasoning_text.done",
            Event::ArgsDelta { .. } => "response.function_call_arguments.delta",
            Event::ArgsDone { .. } => "response.function_call_arguments.done",
            Event::InputDelta { .. } => "response.custom_tool_call_input.delta",
            Event::InputDone { .. } => "response.custom_tool_call_input.done",
            Event::Error { .. } => "error",
        }
    }

    /// The event as server-sent event text.
    fn frame(&self) -> String {
        let data = serde_json::to_string(self).unwrap_or_default();
        format!("event: {}\ndata: {data}\n\n", self.kind())
    }
}

/// The `response.output_item.done` event of the item at `slot`.
fn item_done(sequence_number: u64, slot: usize, item: &Item) -> String {
    Event::ItemDone {
        sequence_number,
        output_index: slot,
        item,
    }
    .frame()
}

/// A tool call shown as it was made.
struct LiveCall {
    call_id: String,
    slot: usize,
}

/// One response, written as its events while it is made and as its object when done.
pub struct Encoder {
    resource: Resource,
    sequence: u64,
    gate: TextGate,
    /// The open message item: its place in the output.
    text_slot: Option<usize>,
    /// The open reasoning item: its place in the output.
    reasoning_slot: Option<usize>,
    calls: Vec<LiveCall>,
    /// Whether a tool call is shown as it is made.
    live_calls: bool,
    /// How the tools the model called were declared (namespaces, custom tools).
    names: super::tool_names::Names,
    /// The log-probabilities told and not written yet (only a call that asked for them is
    /// told any, and only its answer has them).
    logprobs: Pending,
}

impl Encoder {
    /// A response to a request repeating `echo`, answered by `model`, its text stopped at
    /// `stop`.
    pub fn new(echo: Echo, model: &str, stop: &[String]) -> Self {
        Encoder {
            resource: Resource {
                id: crate::call::new_id("resp_"),
                object: "response".into(),
                created_at: now(),
                completed_at: None,
                status: Status::InProgress,
                incomplete_details: None,
                model: model.to_owned(),
                output: Vec::new(),
                error: None,
                usage: None,
                echo,
            },
            sequence: 0,
            gate: TextGate::new(stop),
            text_slot: None,
            reasoning_slot: None,
            calls: Vec::new(),
            live_calls: true,
            names: super::tool_names::Names::default(),
            logprobs: Pending::new(true),
        }
    }

    /// `self` answering calls as `names` says the tools were declared: a namespaced function
    /// with its bare name and namespace, a custom tool as a `custom_tool_call`.
    pub fn with_names(mut self, names: super::tool_names::Names) -> Self {
        self.names = names;
        self
    }

    /// `self` with the id `id` when one is given.
    pub fn named(mut self, id: Option<&str>) -> Self {
        if let Some(id) = id {
            self.resource.id = id.to_owned();
        }
        self
    }

    /// The output item of a call of `function` by the model, its arguments not given yet.
    fn call_item(&self, call_id: &str, function: &str) -> Item {
        let declared = self.names.declared(function);
        let namespace = declared.and_then(|d| d.namespace.clone());
        let name = declared.map_or_else(|| function.to_owned(), |d| d.name.clone());
        if declared.is_some_and(|d| d.custom) {
            return Item::CustomToolCall {
                id: format!("ctc_{call_id}"),
                call_id: call_id.to_owned(),
                name,
                input: String::new(),
                status: Status::InProgress,
                namespace,
            };
        }
        Item::FunctionCall {
            id: format!("fc_{call_id}"),
            call_id: call_id.to_owned(),
            name,
            arguments: String::new(),
            status: Status::InProgress,
            namespace,
        }
    }

    /// The response as it stands (whole once [`Encoder::finish`] has run).
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The whole response to `finished`: the object the stream of the same answer ends with.
    pub fn whole(mut self, finished: &Finished) -> Resource {
        self.finish(finished);
        self.resource
    }

    fn next(&mut self) -> u64 {
        let n = self.sequence;
        self.sequence += 1;
        n
    }

    /// What opens the stream.
    pub fn start(&mut self) -> Vec<String> {
        let (a, b) = (self.next(), self.next());
        vec![
            Event::Created {
                sequence_number: a,
                response: &self.resource,
            }
            .frame(),
            Event::InProgress {
                sequence_number: b,
                response: &self.resource,
            }
            .frame(),
        ]
    }

    /// What a piece of the answer shows, as the model made it.
    pub fn piece(&mut self, piece: Piece) -> Vec<String> {
        match piece {
            Piece::Text(text) => {
                let show = self.gate.feed(&text);
                self.show(&show)
            }
            Piece::CallStart { index, id, name } => self.call_start(index, &id, &name),
            Piece::CallArgs { index, fragment } => self.call_args(index, &fragment),
            Piece::Reasoning(text) => self.think(&text),
            Piece::Logprobs(told) => {
                self.logprobs.hold(told);
                Vec::new()
            }
        }
    }

    /// Adds an item to the output: its place.
    fn add(&mut self, item: Item, out: &mut Vec<String>) -> usize {
        let slot = self.resource.output.len();
        self.resource.output.push(item);
        let n = self.next();
        if let Some(item) = self.resource.output.get(slot) {
            out.push(
                Event::ItemAdded {
                    sequence_number: n,
                    output_index: slot,
                    item,
                }
                .frame(),
            );
        }
        slot
    }

    /// Shows more of the model's reasoning, in a reasoning item opened for it.
    fn think(&mut self, text: &str) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let slot = match self.reasoning_slot {
            Some(slot) => slot,
            None => {
                let item = Item::Reasoning {
                    id: crate::call::new_id("rs_"),
                    summary: Vec::new(),
                    content: Vec::new(),
                };
                let slot = self.add(item, &mut out);
                self.reasoning_slot = Some(slot);
                slot
            }
        };
        let n = self.next();
        if let Some(Item::Reasoning { id, content, .. }) = self.resource.output.get_mut(slot) {
            match content.first_mut() {
                Some(part) => part.text.push_str(text),
                None => content.push(ReasoningText {
                    kind: "reasoning_text".into(),
                    text: text.to_owned(),
                }),
            }
            out.push(
                Event::ReasoningDelta {
                    sequence_number: n,
                    item_id: id,
                    output_index: slot,
                    content_index: 0,
                    delta: text,
                }
                .frame(),
            );
        }
        out
    }

    /// Closes the open reasoning item: its text's and its own `.done` events.
    fn close_reasoning(&mut self, out: &mut Vec<String>) {
        let Some(slot) = self.reasoning_slot.take() else {
            return;
        };
        let (a, b) = (self.next(), self.next());
        let Some(item) = self.resource.output.get(slot) else {
            return;
        };
        if let Item::Reasoning { id, content, .. } = item
            && let Some(part) = content.first()
        {
            out.push(
                Event::ReasoningDone {
                    sequence_number: a,
                    item_id: id,
                    output_index: slot,
                    content_index: 0,
                    text: &part.text,
                }
                .frame(),
            );
        }
        out.push(item_done(b, slot, item));
    }

    fn show(&mut self, text: &str) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        self.close_reasoning(&mut out);
        let slot = self.open_text(&mut out);
        let n = self.next();
        let logprobs = entries(&self.logprobs.take());
        if let Some(Item::Message { id, content, .. }) = self.resource.output.get_mut(slot) {
            if let Some(part) = content.first_mut() {
                part.text.push_str(text);
                part.logprobs.extend(logprobs.iter().cloned());
            }
            out.push(
                Event::TextDelta {
                    sequence_number: n,
                    item_id: id,
                    output_index: slot,
                    content_index: 0,
                    delta: text,
                    logprobs,
                }
                .frame(),
            );
        }
        out
    }

    /// The log-probabilities no text carried (a tool call's tokens, or the last ones of the
    /// text held for a stop sequence) join the open message's text part, for its `.done`
    /// events.
    fn keep_left(&mut self) {
        let left = entries(&self.logprobs.take());
        let slot = self
            .text_slot
            .and_then(|slot| self.resource.output.get_mut(slot));
        if let Some(Item::Message { content, .. }) = slot
            && let Some(part) = content.first_mut()
        {
            part.logprobs.extend(left);
        }
    }

    /// The open message item's place, opened (with its text part) when none is.
    fn open_text(&mut self, out: &mut Vec<String>) -> usize {
        if let Some(slot) = self.text_slot {
            return slot;
        }
        let item = Item::Message {
            id: crate::call::new_id("msg_"),
            status: Status::InProgress,
            role: "assistant".into(),
            content: Vec::new(),
        };
        let slot = self.add(item, out);
        self.text_slot = Some(slot);
        let n = self.next();
        if let Some(Item::Message { id, content, .. }) = self.resource.output.get_mut(slot) {
            content.push(OutputText::new(String::new()));
            if let Some(part) = content.first() {
                out.push(
                    Event::PartAdded {
                        sequence_number: n,
                        item_id: id,
                        output_index: slot,
                        content_index: 0,
                        part,
                    }
                    .frame(),
                );
            }
        }
        slot
    }

    /// Closes the open message item: its text's, its part's and its own `.done` events.
    fn close_text(&mut self, status: Status, out: &mut Vec<String>) {
        let Some(slot) = self.text_slot.take() else {
            return;
        };
        let (a, b, c) = (self.next(), self.next(), self.next());
        let Some(item) = self.resource.output.get_mut(slot) else {
            return;
        };
        item.set_status(status);
        if let Item::Message { id, content, .. } = &*item
            && let Some(part) = content.first()
        {
            out.push(
                Event::TextDone {
                    sequence_number: a,
                    item_id: id,
                    output_index: slot,
                    content_index: 0,
                    text: &part.text,
                    logprobs: &part.logprobs,
                }
                .frame(),
            );
            out.push(
                Event::PartDone {
                    sequence_number: b,
                    item_id: id,
                    output_index: slot,
                    content_index: 0,
                    part,
                }
                .frame(),
            );
        }
        out.push(item_done(c, slot, item));
    }

    /// The model began its call numbered `index`: its item is added at once, the text before
    /// it closed. A call out of order is shown at the end.
    fn call_start(&mut self, index: usize, call_id: &str, name: &str) -> Vec<String> {
        // A custom tool's raw input is shown whole, at the end (the model writes it as JSON).
        let custom = self.names.declared(name).is_some_and(|d| d.custom);
        if !self.live_calls || index != self.calls.len() || custom {
            return Vec::new();
        }
        // Text held for a stop sequence that did not come before the call.
        let held = self.gate.release();
        let mut out = self.show(&held);
        self.close_reasoning(&mut out);
        self.close_text(Status::Completed, &mut out);
        let item = self.call_item(call_id, name);
        let slot = self.add(item, &mut out);
        self.calls.push(LiveCall {
            call_id: call_id.to_owned(),
            slot,
        });
        out
    }

    fn call_args(&mut self, index: usize, fragment: &str) -> Vec<String> {
        let Some(slot) = self.calls.get(index).map(|c| c.slot) else {
            return Vec::new();
        };
        let n = self.next();
        match self.resource.output.get_mut(slot) {
            Some(Item::FunctionCall { id, arguments, .. }) => {
                arguments.push_str(fragment);
                vec![
                    Event::ArgsDelta {
                        sequence_number: n,
                        item_id: id,
                        output_index: slot,
                        delta: fragment,
                    }
                    .frame(),
                ]
            }
            _ => Vec::new(),
        }
    }

    /// A call's arguments' `.done` and its item's, with the arguments as the answer has them.
    fn call_done(&mut self, slot: usize, final_arguments: String, out: &mut Vec<String>) {
        let (a, b) = (self.next(), self.next());
        let Some(item) = self.resource.output.get_mut(slot) else {
            return;
        };
        match item {
            Item::FunctionCall {
                id,
                name,
                arguments,
                status,
                ..
            } => {
                *arguments = final_arguments;
                *status = Status::Completed;
                out.push(
                    Event::ArgsDone {
                        sequence_number: a,
                        item_id: id,
                        output_index: slot,
                        name,
                        arguments,
                    }
                    .frame(),
                );
            }
            Item::CustomToolCall {
                id, input, status, ..
            } => {
                *input = super::tool_names::custom_input(&final_arguments);
                *status = Status::Completed;
                out.push(
                    Event::InputDone {
                        sequence_number: a,
                        item_id: id,
                        output_index: slot,
                        input,
                    }
                    .frame(),
                );
            }
            _ => {}
        }
        out.push(item_done(b, slot, item));
    }

    /// What closes the stream: the text and calls not shown yet, each item done, and the
    /// response `completed` (or `incomplete`, cut by `max_output_tokens`) with its usage.
    pub fn finish(&mut self, finished: &Finished) -> Vec<String> {
        let (text, calls) = super::sse::text_and_calls(&finished.answer);
        let cut = matches!(finished.finish, Finish::MaxTokens);
        let mut out = Vec::new();
        // Reasoning not shown while it was made (an attempt that was not the answer's own).
        if let Some(reasoning) = &finished.reasoning
            && self.resource.output.is_empty()
        {
            out.extend(self.think(reasoning));
        }
        self.close_reasoning(&mut out);
        let rest = self.gate.rest(&text);
        self.logprobs.finish(finished.logprobs.as_deref());
        out.extend(self.show(&rest));
        // A text answer always has its message, if empty.
        let no_message = !self
            .resource
            .output
            .iter()
            .any(|i| matches!(i, Item::Message { .. }));
        if calls.is_empty() && no_message {
            self.open_text(&mut out);
        }
        self.keep_left();
        let text_status = if cut && calls.is_empty() {
            Status::Incomplete
        } else {
            Status::Completed
        };
        self.close_text(text_status, &mut out);
        for call in calls {
            let arguments = call.arguments_json();
            let slot = match self.calls.iter().find(|c| c.call_id == call.id) {
                Some(shown) => shown.slot,
                None => self.add_whole_call(call, &arguments, &mut out),
            };
            self.call_done(slot, arguments, &mut out);
        }
        self.close_dropped_calls(&mut out);
        self.close_response(finished, cut, &mut out);
        out
    }

    /// A call the stream has not shown: its item added and its arguments in one delta; its slot.
    fn add_whole_call(
        &mut self,
        call: &crate::call::ToolCall,
        arguments: &str,
        out: &mut Vec<String>,
    ) -> usize {
        let item = self.call_item(&call.id, &call.name);
        let slot = self.add(item, out);
        let n = self.next();
        match self.resource.output.get(slot) {
            Some(Item::FunctionCall { id, .. }) => out.push(
                Event::ArgsDelta {
                    sequence_number: n,
                    item_id: id,
                    output_index: slot,
                    delta: arguments,
                }
                .frame(),
            ),
            Some(Item::CustomToolCall { id, .. }) => out.push(
                Event::InputDelta {
                    sequence_number: n,
                    item_id: id,
                    output_index: slot,
                    delta: &super::tool_names::custom_input(arguments),
                }
                .frame(),
            ),
            _ => {}
        }
        slot
    }

    /// Calls shown as they were made that the answer does not have (a repair dropped them) are
    /// done as they stand.
    fn close_dropped_calls(&mut self, out: &mut Vec<String>) {
        let dropped: Vec<(usize, String)> = self
            .resource
            .output
            .iter()
            .enumerate()
            .filter_map(|(slot, item)| match item {
                Item::FunctionCall {
                    status: Status::InProgress,
                    arguments,
                    ..
                } => Some((slot, arguments.clone())),
                _ => None,
            })
            .collect();
        for (slot, arguments) in dropped {
            self.call_done(slot, arguments, out);
        }
    }

    /// The response's last state, `completed` or (`cut`) `incomplete`, as the closing event.
    fn close_response(&mut self, finished: &Finished, cut: bool, out: &mut Vec<String>) {
        self.resource.model = finished.model.clone();
        self.resource.usage = Some(finished.usage.into());
        self.resource.completed_at = Some(now());
        let n = self.next();
        if cut {
            self.resource.status = Status::Incomplete;
            self.resource.incomplete_details = Some(IncompleteDetails {
                reason: "max_output_tokens".into(),
            });
            out.push(
                Event::Incomplete {
                    sequence_number: n,
                    response: &self.resource,
                }
                .frame(),
            );
        } else {
            self.resource.status = Status::Completed;
            out.push(
                Event::Completed {
                    sequence_number: n,
                    response: &self.resource,
                }
                .frame(),
            );
        }
    }

    /// An error after the stream began: the `error` event, then the response `failed`.
    pub fn error(&mut self, e: &ApiError) -> Vec<String> {
        let (a, b) = (self.next(), self.next());
        let kind = e.openai_type();
        let code = e.code.as_deref();
        let error = Event::Error {
            sequence_number: a,
            error: ErrorPayload {
                kind,
                code,
                message: &e.message,
                param: e.param.as_deref(),
            },
        }
        .frame();
        self.resource.status = Status::Failed;
        self.resource.error = Some(ResponseError {
            code: code.unwrap_or(kind).to_owned(),
            message: e.message.clone(),
        });
        let failed = Event::Failed {
            sequence_number: b,
            response: &self.resource,
        }
        .frame();
        vec![error, failed]
    }

    /// The response's id.
    pub fn id(&self) -> &str {
        &self.resource.id
    }
}

/// Where a response is kept once made, with the input it answered; `None`: not kept
/// (`store: false`).
pub struct Keep {
    pub store: super::store::Store,
    pub input: Vec<Value>,
    /// The model the request named.
    pub asked_model: Option<String>,
}

impl Keep {
    /// Stores `response`; a store that fails is logged (the answer is sent all the same).
    pub async fn save(self, response: Resource) {
        let id = response.id.clone();
        let stored = Stored {
            response,
            input: self.input,
            asked_model: self.asked_model,
        };
        let text = match serde_json::to_string(&stored) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %e, "a response could not be written for the store");
                return;
            }
        };
        if let Err(e) = self.store.put(&id, text).await {
            tracing::warn!(error = %e, response = %id, "a response was not stored");
        }
    }
}

/// A streamed response: the encoder, and where the response is kept when done.
pub struct Streamed {
    pub encoder: Encoder,
    pub keep: Option<Keep>,
    /// The answer ended: the response is whole.
    done: bool,
}

impl Streamed {
    pub fn new(encoder: Encoder, keep: Option<Keep>) -> Self {
        Streamed {
            encoder,
            keep,
            done: false,
        }
    }
}

impl super::Encode for Streamed {
    fn start(&mut self) -> Vec<String> {
        self.encoder.start()
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        self.encoder.piece(piece)
    }

    fn finish(&mut self, answered: &crate::service::Answered) -> Vec<String> {
        self.done = true;
        self.encoder.finish(&answered.finished)
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        self.encoder.error(e)
    }

    fn save(&mut self) -> Option<futures_util::future::BoxFuture<'static, ()>> {
        if !self.done {
            return None;
        }
        let keep = self.keep.take()?;
        let response = self.encoder.resource().clone();
        Some(Box::pin(keep.save(response)))
    }
}

/// OpenAI Responses in the registry ([`super::dialect`]).
pub const DIALECT: Dialect = dialect::of(&Responses);

/// OpenAI's Responses API: `/v1/responses` (over HTTP or a WebSocket), its stored responses,
/// token count and compaction.
pub struct Responses;

impl Wire for Responses {
    fn id(&self) -> &'static str {
        "responses"
    }

    fn metric(&self) -> crate::metrics::Api {
        crate::metrics::Api::Responses
    }

    fn shape(&self) -> &'static dyn crate::shapes::Shape {
        &crate::shapes::responses::ResponsesCreate
    }

    fn routes(&self) -> &'static [Route] {
        const ROUTES: &[Route] = &[
            Route::get("/v1/responses", Endpoint::ResponsesSocket),
            Route::post("/v1/responses", Endpoint::ResponsesCreate),
            Route::post("/v1/responses/compact", Endpoint::ResponsesCompact),
            Route::post("/v1/responses/input_tokens", Endpoint::ResponsesTokens),
            Route::get("/v1/responses/{id}", Endpoint::ResponsesGet),
            Route {
                method: Method::Delete,
                path: "/v1/responses/{id}",
                endpoint: Endpoint::ResponsesDelete,
            },
            Route::get(
                "/v1/responses/{id}/input_items",
                Endpoint::ResponsesInputItems,
            ),
        ];
        ROUTES
    }

    fn claims(&self, path: &str) -> bool {
        path.starts_with("/v1/responses")
    }

    fn error_body(&self, e: &ApiError) -> Value {
        super::chat::openai_error(e)
    }

    fn unrouted(&self) -> ErrorKind {
        ErrorKind::InvalidRequest
    }

    fn prepare(&self, body: &mut Map<String, Value>, _model: Option<&str>, p: &mut Prepared) {
        p.names = super::tool_names::flatten(body, &mut p.warnings);
    }

    fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
        let encoder = Encoder::new(Echo::read(&Map::new()), o.model, &o.call.request.stop);
        Box::new(Streamed::new(encoder, None))
    }

    fn whole(&self, o: &Opening<'_>, answered: &Answered) -> Value {
        let echo = Echo::read(o.body.unwrap_or(&Map::new()));
        let encoder = Encoder::new(echo, o.model, &o.call.request.stop)
            .with_names(o.names.cloned().unwrap_or_default())
            .named(o.id);
        dialect::to_json(&encoder.whole(&answered.finished))
    }

    fn tokens_object(&self, tokens: usize) -> Value {
        json!({"object": "response.input_tokens", "input_tokens": tokens})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::*;

    #[test]
    fn input_items_are_listed_as_openai_lists_them_and_paged() {
        let input = vec![
            json!({"role": "user", "content": "Hi"}),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"role": "assistant", "content": "Hello"}),
        ];
        let paging = Paging::from_query(None).unwrap();
        let list = input_item_list("resp_ab", &input, &paging);
        assert_eq!(list["object"], "list");
        assert_eq!(list["has_more"], false);
        // Newest first by default.
        assert_eq!(list["data"][0]["content"][0]["type"], "output_text");
        let first = &list["data"][2];
        assert_eq!(first["id"], "msg_ab_0");
        assert_eq!(first["type"], "message");
        assert_eq!(first["status"], "completed");
        assert_eq!(
            first["content"],
            json!([{"type": "input_text", "text": "Hi"}])
        );
        assert_eq!(list["data"][1]["id"], "fc_ab_1");
        assert_eq!(list["first_id"], "msg_ab_2");
        assert_eq!(list["last_id"], "msg_ab_0");
        let paging = Paging::from_query(Some("order=asc&limit=1&after=msg_ab_0")).unwrap();
        let page = input_item_list("resp_ab", &input, &paging);
        assert_eq!(page["data"].as_array().unwrap().len(), 1);
        assert_eq!(page["data"][0]["id"], "fc_ab_1");
        assert_eq!(page["has_more"], true);
        for wrong in ["order=up", "limit=0", "limit=101", "limit=x"] {
            let e = Paging::from_query(Some(wrong)).unwrap_err();
            assert!(e.contains(wrong.split('=').next().unwrap()), "{e}");
        }
    }
    use crate::call::Answer;

    fn streamed(answered: &crate::service::Answered, pieces: Vec<Piece>) -> Vec<Value> {
        let mut s = Streamed::new(Encoder::new(Echo::read(&Map::new()), "m", &[]), None);
        run(&mut s, pieces, answered)
    }

    #[test]
    fn a_call_is_an_item_done_with_the_answers_arguments_and_the_stream_ends_with_the_whole() {
        let answered = answered(text_and_call(), Finish::ToolUse);
        let events = streamed(&answered, pieces());
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
        // The message is done before the call is added, and the call's pieces follow it.
        assert!(at("response.output_item.done") < at("response.function_call_arguments.delta"));
        let deltas = kinds
            .iter()
            .filter(|k| **k == "response.function_call_arguments.delta")
            .count();
        assert_eq!(deltas, 3);
        assert!(
            events
                .iter()
                .enumerate()
                .all(|(i, e)| e["sequence_number"] == i)
        );
        let last = &events.last().unwrap()["response"];
        assert_eq!(kinds.last(), Some(&"response.completed"));
        let whole = serde_json::to_value(
            Encoder::new(Echo::read(&Map::new()), "m", &[]).whole(&answered.finished),
        )
        .unwrap();
        // The same output, item for item, but for the ids each response mints.
        let strip = |v: &Value| {
            let mut v = v.clone();
            for item in v["output"].as_array_mut().unwrap() {
                item["id"] = Value::Null;
            }
            for k in ["id", "created_at", "completed_at"] {
                v[k] = Value::Null;
            }
            v
        };
        assert_eq!(strip(last), strip(&whole));
        assert_eq!(last["output"][1]["arguments"], "{\"city\": \"Paris\"}");
        assert!(
            last["output"][0]["id"]
                .as_str()
                .unwrap()
                .starts_with("msg_")
        );
        assert!(last["output"][1]["id"].as_str().unwrap().starts_with("fc_"));
        assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 4);
    }

    #[test]
    fn a_cut_answer_is_incomplete_and_an_error_fails_the_response() {
        let answered = answered(Answer::Text("1 2".into()), Finish::MaxTokens);
        let events = streamed(&answered, vec![Piece::Text("1 2".into())]);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        assert_eq!(last["response"]["output"][0]["status"], "incomplete");
        let mut e = Encoder::new(Echo::read(&Map::new()), "m", &[]);
        e.start();
        let failed =
            data(&e.error(&ApiError::invalid("too long").with_code("context_length_exceeded")));
        assert_eq!(failed[0]["type"], "error");
        assert_eq!(failed[0]["error"]["code"], "context_length_exceeded");
        assert_eq!(failed[1]["type"], "response.failed");
        assert_eq!(failed[1]["response"]["status"], "failed");
        assert_eq!(failed[1]["sequence_number"], 3);
    }

    #[test]
    fn a_stored_response_continues_as_the_turns_before_and_its_output() {
        let answered = answered(text_and_call(), Finish::ToolUse);
        let response = Encoder::new(Echo::read(&Map::new()), "m", &[]).whole(&answered.finished);
        let stored = Stored {
            response,
            input: input_items(Some(&json!("Weather?"))),
            asked_model: None,
        };
        let text = serde_json::to_string(&stored).unwrap();
        let back: Stored = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back.conversation(),
            vec![
                json!({"role": "user", "content": "Weather?"}),
                json!({"type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": "Sure."}]}),
                json!({"type": "function_call", "call_id": "call_1", "name": "get_weather",
                       "arguments": "{\"city\": \"Paris\"}"}),
            ]
        );
    }

    #[test]
    fn reasoning_is_a_reasoning_item_with_its_own_events_before_the_message() {
        let (pieces, answered) = reasoned(answered(text_and_call(), Finish::ToolUse));
        let mut e = Encoder::new(Echo::read(&Map::new()), "m", &[]);
        let mut frames = e.start();
        for piece in pieces {
            frames.extend(e.piece(piece));
        }
        frames.extend(e.finish(&answered.finished));
        let events = data(&frames);
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            &kinds[2..7],
            [
                "response.output_item.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.output_item.done",
            ]
        );
        assert_eq!(events[2]["item"]["type"], "reasoning");
        assert_eq!(events[5]["text"], "Think.");
        let whole = Encoder::new(Echo::read(&Map::new()), "m", &[]).whole(&answered.finished);
        let whole = serde_json::to_value(whole).unwrap();
        assert_eq!(whole["output"][0]["type"], "reasoning");
        assert_eq!(
            whole["output"][0]["content"],
            json!([{"type": "reasoning_text", "text": "Think."}])
        );
        assert_eq!(whole["output"][1]["type"], "message");
        assert_eq!(whole["output"][2]["type"], "function_call");
    }

    #[test]
    fn logprobs_ride_the_text_deltas_and_the_text_part_holds_them_all() {
        let (pieces, answered) =
            told_pieces(answered(Answer::Text(String::new()), Finish::EndTurn));
        let mut s = Streamed::new(
            Encoder::new(Echo::read(&Map::new()), "m", &["END".into()]),
            None,
        );
        let events = run(&mut s, pieces, &answered);
        let of =
            |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["type"] == kind).collect() };
        let tokens = |list: &Value| -> String {
            (list.as_array().into_iter().flatten())
                .map(|e| e["token"].as_str().unwrap())
                .collect()
        };
        let deltas = of("response.output_text.delta");
        let shown: Vec<(&str, String)> = deltas
            .iter()
            .map(|d| (d["delta"].as_str().unwrap(), tokens(&d["logprobs"])))
            .collect();
        assert_eq!(
            shown,
            [
                ("Hello", "Hello".into()),
                (" ", " E".into()),
                ("Ex", "x".into())
            ]
        );
        assert_eq!(
            tokens(&of("response.output_text.done")[0]["logprobs"]),
            "Hello Ex"
        );
        assert_eq!(
            tokens(&of("response.content_part.done")[0]["part"]["logprobs"]),
            "Hello Ex"
        );
        let last = &events.last().unwrap()["response"];
        let part = &last["output"][0]["content"][0];
        assert_eq!(
            part["logprobs"][0],
            json!({"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111],
                   "top_logprobs": [
                       {"token": "Hello", "logprob": -0.5, "bytes": [72, 101, 108, 108, 111]},
                       {"token": "x", "logprob": -1.5, "bytes": [120]}]})
        );
        let whole = Encoder::new(Echo::read(&Map::new()), "m", &[]).whole(&answered.finished);
        let whole = serde_json::to_value(whole).unwrap();
        assert_eq!(
            whole["output"][0]["content"][0]["logprobs"],
            part["logprobs"]
        );
        // Stored, and read back; a next request's input has none.
        let response: Resource = serde_json::from_value(whole).unwrap();
        let stored = Stored {
            response,
            input: Vec::new(),
            asked_model: None,
        };
        assert_eq!(
            stored.response.output[0].as_input()["content"][0].get("logprobs"),
            None
        );
    }
}
