//! Product shapes: each is a pair of pure functions, `parse` (tool arguments into a neutral
//! [`Call`]) and a renderer (a neutral [`Answer`] into the tool result), with no I/O.
//!
//! This module holds what the shapes share: the common arguments (`model`, `temperature`,
//! `max_tokens`, `output_schema`, `tools`, `tool_choice`, `persona`, `previous_response_id`),
//! the checks that run before anything is sent, and the text-tool renderer.

pub mod anthropic;
pub mod media;
pub mod openai_chat;
pub mod params;
pub mod prompt;
pub mod responses;

use crate::args::{self, Obj, as_object, non_empty_array};
use crate::completion::{Block, CompletionRequest, Finish, Role, ToolChoice, ToolDef, Turn};
use crate::contract::cursor::{self, Chain, Entry};
use crate::contract::persona::Persona;
use crate::contract::schema::{self, Schema};
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::pyjson::{self, Style};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// The completion tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    ChatComplete,
    MessagesCreate,
    ResponsesCreate,
    Generate,
}

impl ToolKind {
    pub const ALL: [ToolKind; 4] = [
        ToolKind::ChatComplete,
        ToolKind::MessagesCreate,
        ToolKind::ResponsesCreate,
        ToolKind::Generate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ToolKind::ChatComplete => "chat_complete",
            ToolKind::MessagesCreate => "messages_create",
            ToolKind::ResponsesCreate => "responses_create",
            ToolKind::Generate => "generate",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Parses the tool's arguments into a checked [`Call`]; nothing has been sent yet.
    pub fn parse(self, arguments: &Map<String, Value>, limits: &Limits) -> CallResult<Call> {
        let o = Obj::root(arguments);
        match self {
            ToolKind::ChatComplete => openai_chat::parse(&o, limits),
            ToolKind::MessagesCreate => anthropic::parse(&o, limits),
            ToolKind::ResponsesCreate => responses::parse(&o, limits),
            ToolKind::Generate => prompt::parse(&o, limits),
        }
    }
}

/// What kind of answer the call wants from the host.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Plain text.
    Text,
    /// JSON satisfying `output_schema`.
    Structured(Arc<Schema>),
    /// Text or calls to the caller's tools.
    Tools {
        defs: Vec<ToolDef>,
        choice: ToolChoice,
    },
}

/// A parsed and checked completion call: the neutral request plus the contract around it.
#[derive(Debug, Clone)]
pub struct Call {
    pub kind: ToolKind,
    pub request: CompletionRequest,
    pub mode: Mode,
    pub persona: Option<Persona>,
    pub chain: Chain,
    /// The conversation as the cursor commits to it.
    pub transcript: Vec<Entry>,
    /// How many times a rejected structured answer is sent back for repair.
    pub max_retries: u8,
    /// Describe tools in the prompt when the host cannot take them (default on).
    pub emulate_tools: bool,
    /// Parameters forwarded in the sampling request's `metadata`.
    pub metadata: Map<String, Value>,
    /// What the server did not honour as asked, reported in the result.
    pub warnings: Vec<String>,
}

/// The host's answer, interpreted for the call's mode.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Text(String),
    /// Validated structured output.
    Json(Value),
    /// The model called tools (never executed here).
    ToolCalls {
        text: String,
        calls: Vec<ToolCall>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Map<String, Value>,
}

impl Answer {
    /// The completion as the text tools return it and as cursors commit to it.
    pub fn completion_text(&self) -> String {
        match self {
            Answer::Text(t) => t.clone(),
            Answer::Json(v) => pyjson::dumps(v, Style::SORTED),
            Answer::ToolCalls { text, calls } => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| json!({"id": c.id, "input": c.input, "name": c.name}))
                    .collect();
                pyjson::dumps(&json!({"text": text, "tool_calls": calls}), Style::SORTED)
            }
        }
    }
}

/// A finished answer with what the renderers need to describe it.
pub struct Reply<'a> {
    pub call: &'a Call,
    pub answer: &'a Answer,
    /// `answer.completion_text()`, computed once.
    pub completion: &'a str,
    pub finish: &'a Finish,
    pub host_model: &'a str,
    /// The cursor when the chain is on.
    pub cursor: Option<&'a str>,
}

/// Sampling reports no token counts: usage figures are estimates (about four characters a
/// token), always marked `"estimated": true`.
fn estimate_tokens(chars: usize) -> usize {
    chars.div_ceil(4)
}

impl Reply<'_> {
    /// Estimated (prompt, completion) tokens.
    pub fn usage(&self) -> (usize, usize) {
        let req = &self.call.request;
        let text: usize = req
            .turns
            .iter()
            .flat_map(|t| &t.blocks)
            .map(|b| match b {
                Block::Text(t) => t.chars().count(),
                _ => 0,
            })
            .sum();
        let system = req.system.as_ref().map_or(0, |s| s.chars().count());
        (
            estimate_tokens(text + system),
            estimate_tokens(self.completion.chars().count()),
        )
    }
}

/// The arguments every completion tool shares.
struct Common<'a> {
    model: String,
    temperature: Option<f64>,
    max_tokens: u32,
    /// The structured-output schema, the `output_schema` argument itself (for the persona
    /// view; `None` when another spelling gave the schema), and the spelling used.
    output_schema: Option<(Option<&'a Value>, Arc<Schema>, &'static str)>,
    tools: Option<Vec<ToolDef>>,
    tool_choice: Option<ToolChoice>,
    persona: Option<Persona>,
    previous: Option<String>,
    max_retries: u8,
    stop: Vec<String>,
    limits: Limits,
    emulate_tools: bool,
    extras: params::Extras,
}

pub const DEFAULT_MODEL: &str = "agent-default";
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Repair attempts for structured output when `max_retries` is not given, and the most allowed.
pub const DEFAULT_MAX_RETRIES: u8 = 1;
pub const MAX_MAX_RETRIES: u8 = 5;

impl<'a> Common<'a> {
    /// Reads the common arguments; `generate` has no `output_schema`, `tools` or
    /// `tool_choice`.
    fn parse(o: &Obj<'a>, kind: ToolKind, limits: &Limits) -> CallResult<Self> {
        let modes = kind != ToolKind::Generate;
        let stop = parse_stop(o, kind)?;
        let model = o.opt_str("model")?.unwrap_or(DEFAULT_MODEL).to_owned();
        let temperature = o.opt_f64("temperature")?;
        let max_tokens = parse_max_tokens(o, kind)?;
        let extras = params::handle(o, kind)?;
        let previous = o.opt_str("previous_response_id")?.map(str::to_owned);
        let persona = Persona::parse(o)?;
        let (mut output_schema, mut tools, mut tool_choice) = (None, None, None);
        let mut max_retries = 0;
        if modes {
            max_retries = parse_max_retries(o)?;
            output_schema = structured_spec(o, kind)?;
            tools = o
                .opt_array("tools")?
                .map(|t| parse_tools(t, limits))
                .transpose()?;
            let (choice, forced) = parse_tool_choice(o)?;
            tool_choice = choice;
            if let (Some(name), Some(defs)) = (forced, tools.as_mut()) {
                defs.retain(|d: &ToolDef| d.name == name);
                if defs.is_empty() {
                    return Err(CallError::at(
                        "tool_choice",
                        format!("names the tool {name:?}, which is not in `tools`"),
                    ));
                }
            }
        }
        let emulate_tools = match o.get("emulate_tools") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(CallError::expected("emulate_tools", "a boolean", other)),
        };
        if let (Some((_, _, source)), Some(_)) = (&output_schema, &tools) {
            return Err(CallError::Invalid(format!(
                "`tools` and `{source}` cannot be combined: structured output is fulfilled as \
                 one required tool call, so other tools would contradict it. Pass one of them"
            )));
        }
        if let (Some((_, _, source)), Some(p)) = (&output_schema, &persona)
            && p.has_output_schema()
        {
            return Err(CallError::Invalid(format!(
                "`{source}` and `persona.output_schema` (persona {:?}) cannot both be given: \
                 they are two sources for the same output contract. Pass one of them",
                p.name
            )));
        }
        Ok(Common {
            model,
            temperature,
            max_tokens,
            output_schema,
            tools,
            tool_choice,
            persona,
            previous,
            max_retries,
            stop,
            limits: limits.clone(),
            emulate_tools,
            extras,
        })
    }

    /// The effective tool choice: the given one, or `auto` when tools are given.
    fn effective_choice(&self) -> Option<ToolChoice> {
        self.tool_choice
            .or(self.tools.as_ref().map(|_| ToolChoice::Auto))
    }

    /// Adds the common keys to the object a persona's `input_schema` validates.
    fn add_to_view(&self, view: &mut Map<String, Value>, modes: bool) {
        view.insert("model".into(), json!(self.model));
        view.insert("temperature".into(), json!(self.temperature));
        view.insert("max_tokens".into(), json!(self.max_tokens));
        if modes {
            view.insert(
                "output_schema".into(),
                self.output_schema
                    .as_ref()
                    .and_then(|(raw, _, _)| raw.cloned())
                    .unwrap_or(Value::Null),
            );
            let tools = self.tools.as_ref().map(|defs| {
                defs.iter()
                    .map(|d| {
                        json!({"name": d.name, "description": d.description, "input_schema": d.input_schema})
                    })
                    .collect::<Vec<_>>()
            });
            view.insert("tools".into(), json!(tools));
            view.insert(
                "tool_choice".into(),
                json!(self.effective_choice().map(ToolChoice::as_str)),
            );
        }
        view.insert("previous_response_id".into(), json!(self.previous));
    }

    /// Runs the pre-send checks (persona input, cursor) and assembles the call.
    fn into_call(self, parts: Parts) -> CallResult<Call> {
        let Parts {
            kind,
            list_key,
            system,
            messages,
            transcript,
            mut view,
        } = parts;
        let turns = assemble(list_key, messages, &self.limits)?;
        let modes = kind != ToolKind::Generate;
        // The persona request object is built only when there is a persona to check it.
        if let Some(p) = &self.persona {
            self.add_to_view(&mut view, modes);
            p.check_input(&view)?;
        }
        let chain = cursor::parse(self.previous.as_deref())?;
        cursor::verify(
            &chain,
            &self.model,
            kind.name(),
            &transcript,
            kind != ToolKind::Generate,
        )?;
        let choice = self.effective_choice();
        let mode = match (self.output_schema, self.tools) {
            (Some((_, s, _)), _) => Mode::Structured(s),
            (None, Some(defs)) => Mode::Tools {
                defs,
                choice: choice.unwrap_or(ToolChoice::Auto),
            },
            (None, None) => Mode::Text,
        };
        Ok(Call {
            kind,
            request: CompletionRequest {
                model: self.model,
                system,
                turns,
                temperature: self.temperature,
                max_tokens: self.max_tokens,
                stop: self.stop,
            },
            mode,
            persona: self.persona,
            chain,
            transcript,
            max_retries: self.max_retries,
            emulate_tools: self.emulate_tools,
            metadata: self.extras.metadata,
            warnings: self.extras.warnings,
        })
    }
}

/// What a shape contributes to a call besides the common arguments.
struct Parts {
    kind: ToolKind,
    /// The argument holding the conversation (`messages`, `input`, `prompt`), for errors.
    list_key: &'static str,
    system: Option<String>,
    messages: Vec<Msg>,
    transcript: Vec<Entry>,
    /// The shape's own keys of the persona request object (empty without a persona).
    view: Map<String, Value>,
}

/// One message of the caller's conversation, in neutral blocks, with its index for errors.
#[derive(Debug, Clone)]
struct Msg {
    index: usize,
    role: Role,
    blocks: Vec<Block>,
}

/// Joins a run of text blocks into one (with `"\n"`), as the original flattens text lists;
/// content with anything but text keeps its blocks.
fn flatten_text(blocks: Vec<Block>) -> Vec<Block> {
    if blocks.len() > 1 && blocks.iter().all(|b| matches!(b, Block::Text(_))) {
        let texts: Vec<String> = blocks
            .into_iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t),
                _ => None,
            })
            .collect();
        vec![Block::Text(texts.join("\n"))]
    } else {
        blocks
    }
}

fn ids(blocks: &[Block], uses: bool) -> Vec<&str> {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } if uses => Some(id.as_str()),
            Block::ToolResult { id, .. } if !uses => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

/// Turns the caller's messages into sampling turns: merges consecutive tool-result messages
/// (and tool calls that follow an assistant message) into one turn, enforces the limits, and
/// enforces MCP's rules for tool content: tool calls only from the assistant, a message carrying
/// tool results carries nothing else, and every tool call is answered by the next message.
fn assemble(key: &str, messages: Vec<Msg>, limits: &Limits) -> CallResult<Vec<Turn>> {
    if messages.is_empty() {
        return Err(CallError::at(
            key,
            if key == "input" {
                "needs at least one user or assistant item besides system and developer items"
            } else {
                "needs at least one user or assistant message besides system messages"
            },
        ));
    }
    if messages.len() > limits.max_messages {
        return Err(CallError::at(
            key,
            format!(
                "{} messages is over the limit of {} (AGENT_AS_MODEL_MAX_MESSAGES)",
                messages.len(),
                limits.max_messages
            ),
        ));
    }
    let mut turns: Vec<(usize, Turn)> = Vec::with_capacity(messages.len());
    for m in messages {
        let path = args::index(key, m.index);
        let chars: usize = m
            .blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) => t.chars().count(),
                _ => 0,
            })
            .sum();
        if chars > limits.max_message_chars {
            return Err(CallError::at(
                &path,
                format!(
                    "{chars} characters of text is over the limit of {} per message \
                     (AGENT_AS_MODEL_MAX_MESSAGE_CHARS)",
                    limits.max_message_chars
                ),
            ));
        }
        let results = ids(&m.blocks, false);
        match m.role {
            Role::User if !ids(&m.blocks, true).is_empty() => {
                return Err(CallError::at(
                    &path,
                    "tool calls belong in assistant messages",
                ));
            }
            Role::User if !results.is_empty() && results.len() != m.blocks.len() => {
                return Err(CallError::at(
                    &path,
                    "a message carrying tool results must carry nothing else; send the text in \
                     a message of its own after them",
                ));
            }
            Role::Assistant if !results.is_empty() => {
                return Err(CallError::at(
                    &path,
                    "tool results belong in user or tool messages",
                ));
            }
            _ => {}
        }
        let only_results = !results.is_empty();
        let only_uses = m.role == Role::Assistant
            && m.blocks.iter().all(|b| matches!(b, Block::ToolUse { .. }));
        let merge = match turns.last() {
            Some((_, last)) if last.role == m.role => match m.role {
                Role::User => only_results && ids(&last.blocks, false).len() == last.blocks.len(),
                Role::Assistant => only_uses,
            },
            _ => false,
        };
        match turns.last_mut() {
            Some((_, last)) if merge => last.blocks.extend(m.blocks),
            _ => turns.push((
                m.index,
                Turn {
                    role: m.role,
                    blocks: m.blocks,
                },
            )),
        }
    }
    for (i, (index, turn)) in turns.iter().enumerate() {
        let path = args::index(key, *index);
        let next = turns.get(i + 1);
        let uses = ids(&turn.blocks, true);
        if !uses.is_empty() {
            let answered: Vec<&str> = next.map(|(_, t)| ids(&t.blocks, false)).unwrap_or_default();
            let missing: Vec<&str> = uses
                .iter()
                .filter(|u| !answered.contains(u))
                .copied()
                .collect();
            if !missing.is_empty() {
                return Err(CallError::at(
                    &path,
                    format!(
                        "tool call(s) {missing:?} are not answered by the next message: every \
                         tool call must be answered by a tool result in the message that follows"
                    ),
                ));
            }
        }
        let results = ids(&turn.blocks, false);
        if !results.is_empty() {
            let asked: Vec<&str> = i
                .checked_sub(1)
                .and_then(|p| turns.get(p))
                .map(|(_, t)| ids(&t.blocks, true))
                .unwrap_or_default();
            if let Some(unknown) = results.iter().find(|r| !asked.contains(r)) {
                return Err(CallError::at(
                    &path,
                    format!(
                        "tool result for {unknown:?}, which no tool call in the previous \
                         assistant message has"
                    ),
                ));
            }
        }
    }
    Ok(turns.into_iter().map(|(_, t)| t).collect())
}

/// Stop sequences: `stop` (a string or a list) on `chat_complete` and `generate`,
/// `stop_sequences` (a list) on `messages_create`.
fn parse_stop(o: &Obj<'_>, kind: ToolKind) -> CallResult<Vec<String>> {
    const MAX_STOP: usize = 16;
    let key = match kind {
        ToolKind::ChatComplete | ToolKind::Generate => "stop",
        ToolKind::MessagesCreate => "stop_sequences",
        ToolKind::ResponsesCreate => return Ok(Vec::new()),
    };
    let list: Vec<&Value> = match o.get(key) {
        None => return Ok(Vec::new()),
        Some(v @ Value::String(_)) if key == "stop" => vec![v],
        Some(Value::Array(items)) => items.iter().collect(),
        Some(other) => {
            let what = if key == "stop" {
                "a string or a list of strings"
            } else {
                "a list of strings"
            };
            return Err(CallError::expected(key, what, other));
        }
    };
    if list.len() > MAX_STOP {
        return Err(CallError::at(
            key,
            format!("at most {MAX_STOP} stop sequences are accepted"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(s) if !s.is_empty() => Ok(s.to_owned()),
            _ => Err(CallError::expected(
                &args::index(key, i),
                "a non-empty string",
                v,
            )),
        })
        .collect()
}

/// The structured-output schema from whichever spelling the caller used: `output_schema`
/// (all chat-shaped tools), OpenAI's `response_format` (`chat_complete`) or the Responses
/// `text.format` (`responses_create`). Two spellings at once are an error naming both.
#[allow(clippy::type_complexity)]
fn structured_spec<'a>(
    o: &Obj<'a>,
    kind: ToolKind,
) -> CallResult<Option<(Option<&'a Value>, Arc<Schema>, &'static str)>> {
    let mut found: Vec<(Option<&'a Value>, Arc<Schema>, &'static str)> = Vec::new();
    if let Some(s) = o.get("output_schema") {
        found.push((
            Some(s),
            schema::compile(s, "output_schema")?,
            "output_schema",
        ));
    }
    let format = match kind {
        ToolKind::ChatComplete => o
            .opt_object("response_format")?
            .map(|f| (f, "response_format", "response_format.json_schema")),
        ToolKind::ResponsesCreate => match o.opt_object("text")? {
            Some(text) => Obj::new(text, "text")
                .opt_object("format")?
                .map(|f| (f, "text.format", "text.format")),
            None => None,
        },
        _ => None,
    };
    if let Some((format, name, schema_parent)) = format
        && let Some(schema) = format_schema(&Obj::new(format, name), kind, schema_parent)?
    {
        found.push((None, schema, name));
    }
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(CallError::Invalid(format!(
            "`{}` and `{}` both ask for structured output; pass one of them",
            found.first().map_or("", |f| f.2),
            found.get(1).map_or("", |f| f.2),
        ))),
    }
}

/// Reads an OpenAI format object: `{"type": "text"}` asks for nothing, `{"type":
/// "json_object"}` for any JSON object, `{"type": "json_schema", ...}` for that schema (nested
/// under `json_schema` in chat completions, inline in Responses).
fn format_schema(
    f: &Obj<'_>,
    kind: ToolKind,
    schema_parent: &str,
) -> CallResult<Option<Arc<Schema>>> {
    const TYPES: [&str; 3] = ["text", "json_object", "json_schema"];
    let Some(ty) = f.opt_enum("type", &TYPES)? else {
        return Err(CallError::at(
            &f.path("type"),
            format!("is required: {}", args::one_of(&TYPES)),
        ));
    };
    match ty {
        "text" => Ok(None),
        "json_object" => schema::compile(&json!({"type": "object"}), &f.path("type")).map(Some),
        _ => {
            let holder = if kind == ToolKind::ChatComplete {
                let inner = f.get("json_schema").ok_or_else(|| {
                    CallError::at(
                        &f.path("json_schema"),
                        "is required when type is \"json_schema\"",
                    )
                })?;
                Obj::new(as_object(inner, &f.path("json_schema"))?, schema_parent)
            } else {
                f.clone()
            };
            let schema = holder.required("schema")?;
            schema::compile(schema, &holder.path("schema")).map(Some)
        }
    }
}

/// `max_tokens`, or the API's newer name for it (`max_completion_tokens` in chat completions,
/// `max_output_tokens` in Responses); both with different values is an error.
fn parse_max_tokens(o: &Obj<'_>, kind: ToolKind) -> CallResult<u32> {
    let alias = match kind {
        ToolKind::ChatComplete => Some("max_completion_tokens"),
        ToolKind::ResponsesCreate => Some("max_output_tokens"),
        _ => None,
    };
    let given = o.get("max_tokens").is_some();
    let value = o.positive_u32_or("max_tokens", DEFAULT_MAX_TOKENS)?;
    let Some(alias) = alias.filter(|a| o.get(a).is_some()) else {
        return Ok(value);
    };
    let aliased = o.positive_u32_or(alias, DEFAULT_MAX_TOKENS)?;
    if given && aliased != value {
        return Err(CallError::Invalid(format!(
            "`max_tokens` ({value}) and `{alias}` ({aliased}) disagree; pass one of them"
        )));
    }
    Ok(aliased)
}

/// `tool_choice`: `"auto" | "required" | "none"`, or a forced tool in the OpenAI (`{"type":
/// "function", "function": {"name"}}`, Responses `{"type": "function", "name"}`) or Anthropic
/// (`{"type": "auto" | "any" | "none" | "tool", "name"?}`) spelling. A forced tool is
/// `required` with only that tool offered.
fn parse_tool_choice(o: &Obj<'_>) -> CallResult<(Option<ToolChoice>, Option<String>)> {
    let Some(v) = o.get("tool_choice") else {
        return Ok((None, None));
    };
    if let Value::String(s) = v {
        return ToolChoice::parse(s)
            .map(|c| (Some(c), None))
            .ok_or_else(|| {
                CallError::expected("tool_choice", &args::one_of(&ToolChoice::NAMES), v)
            });
    }
    let Value::Object(map) = v else {
        return Err(CallError::expected(
            "tool_choice",
            "\"auto\", \"required\", \"none\" or a tool choice object",
            v,
        ));
    };
    let obj = Obj::new(map, "tool_choice");
    let name = |obj: &Obj<'_>| -> CallResult<String> {
        match obj.opt_object("function")? {
            Some(f) => Ok(Obj::new(f, "tool_choice.function")
                .required_str("name")?
                .to_owned()),
            None => Ok(obj.required_str("name")?.to_owned()),
        }
    };
    match obj.required_str("type")? {
        "auto" => Ok((Some(ToolChoice::Auto), None)),
        "any" | "required" => Ok((Some(ToolChoice::Required), None)),
        "none" => Ok((Some(ToolChoice::None), None)),
        "tool" | "function" => Ok((Some(ToolChoice::Required), Some(name(&obj)?))),
        other => Err(CallError::at(
            "tool_choice.type",
            format!(
                "expected one of \"auto\", \"any\", \"none\", \"tool\", \"function\", got {other:?}"
            ),
        )),
    }
}

fn parse_max_retries(o: &Obj<'_>) -> CallResult<u8> {
    let Some(v) = o.get("max_retries") else {
        return Ok(DEFAULT_MAX_RETRIES);
    };
    v.as_u64()
        .and_then(|n| u8::try_from(n).ok())
        .filter(|n| *n <= MAX_MAX_RETRIES)
        .ok_or_else(|| {
            CallError::expected(
                "max_retries",
                &format!("an integer from 0 to {MAX_MAX_RETRIES}"),
                v,
            )
        })
}

fn parse_tools(items: &[Value], limits: &Limits) -> CallResult<Vec<ToolDef>> {
    if items.is_empty() {
        return Err(CallError::at(
            "tools",
            "must contain at least one tool definition (omit it or pass null for none)",
        ));
    }
    if items.len() > limits.max_tools {
        return Err(CallError::at(
            "tools",
            format!(
                "{} tool definitions is over the limit of {} (AGENT_AS_MODEL_MAX_TOOLS)",
                items.len(),
                limits.max_tools
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut defs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = args::index("tools", i);
        let obj = Obj::new(as_object(item, &path)?, path.as_str());
        let name = obj.required_str("name")?.trim();
        if name.is_empty() {
            return Err(CallError::at(
                &obj.path("name"),
                "must be a non-empty string",
            ));
        }
        if !seen.insert(name.to_owned()) {
            return Err(CallError::at(
                &obj.path("name"),
                format!("duplicate tool name {name:?}; tool names must be unique"),
            ));
        }
        let description = obj.opt_str("description")?.map(str::to_owned);
        let schema_path = obj.path("input_schema");
        let schema = obj.required("input_schema")?;
        schema::compile(schema, &schema_path)?;
        defs.push(ToolDef {
            name: name.to_owned(),
            description,
            input_schema: as_object(schema, &schema_path)?.clone(),
        });
    }
    Ok(defs)
}

/// Reads a `messages`-style list: non-empty, each item an object.
fn message_objects<'a>(
    o: &Obj<'a>,
    key: &'a str,
) -> CallResult<Vec<(String, &'a Map<String, Value>)>> {
    let list = non_empty_array(o.required(key)?, key)?;
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let path = args::index(key, i);
            let map = as_object(m, &path)?;
            Ok((path, map))
        })
        .collect()
}

/// Renders the result of a text tool (`chat_complete`, `messages_create`, `generate`): the
/// completion text (or the cursor envelope) and `{"result": text}` as structured content.
pub fn render_text(completion: &str, cursor: Option<&str>) -> (String, Map<String, Value>) {
    let text = match cursor {
        Some(c) => pyjson::dumps(
            &json!({"completion": completion, "response_id": c}),
            Style::SORTED,
        ),
        None => completion.to_owned(),
    };
    let mut structured = Map::new();
    structured.insert("result".into(), Value::String(text.clone()));
    (text, structured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_envelope_is_sorted_python_json() {
        let mut input = Map::new();
        input.insert("city".into(), json!("Zürich"));
        let a = Answer::ToolCalls {
            text: "".into(),
            calls: vec![ToolCall {
                id: "t1".into(),
                name: "weather".into(),
                input,
            }],
        };
        assert_eq!(
            a.completion_text(),
            r#"{"text": "", "tool_calls": [{"id": "t1", "input": {"city": "Z\u00fcrich"}, "name": "weather"}]}"#
        );
    }

    #[test]
    fn cursor_envelope_wraps_the_completion() {
        let (text, structured) = render_text("hi", Some("cur_x"));
        assert_eq!(text, r#"{"completion": "hi", "response_id": "cur_x"}"#);
        assert_eq!(structured["result"], json!(text));
    }

    #[test]
    fn tools_are_validated() {
        let l = Limits::default();
        let e = parse_tools(&[], &l).unwrap_err().to_string();
        assert!(e.contains("`tools`: must contain at least one"), "{e}");
        let t = json!([{"name": " a ", "input_schema": {"type": "object"}}, {"name": "a", "input_schema": {"type": "object"}}]);
        let e = parse_tools(t.as_array().unwrap(), &l)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`tools[1].name`: duplicate tool name \"a\""),
            "{e}"
        );
        let t = json!([{"name": "a", "input_schema": {"type": "string"}}]);
        let e = parse_tools(t.as_array().unwrap(), &l)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`tools[0].input_schema`"), "{e}");
        let t = json!([{"name": "  ", "input_schema": {"type": "object"}}]);
        let e = parse_tools(t.as_array().unwrap(), &l)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`tools[0].name`: must be a non-empty"), "{e}");
    }
}
