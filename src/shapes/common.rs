//! What the shapes share: the common arguments (`model`, `temperature`, `max_tokens`,
//! `output_schema`, `tools`, `tool_choice`, `persona`, `previous_response_id`, ...), how a
//! shape spells them ([`Spelling`]), the checks that run before anything is sent, turn assembly,
//! and the text-tool renderer. Nothing here names a particular shape.

use super::params;
use crate::args::{self, Obj, as_object, non_empty_array};
use crate::call::{
    Block, Call, CompletionRequest, Mode, Role, ToolChoice, ToolDef, Turn, join_text, text_chars,
};
use crate::contract::cursor::{self, Entry};
use crate::contract::persona::Persona;
use crate::contract::schema::{self, Schema};
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::pyjson::{self, Style};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

/// Where a shape takes the API's own structured-output format object from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Only `output_schema`.
    None,
    /// Chat completions: `response_format: {type, json_schema: {schema}}`.
    ResponseFormat,
    /// Responses: `text.format: {type, schema}`.
    TextFormat,
    /// Anthropic: `output_config.format: {type, schema}`.
    OutputConfig,
}

/// How a shape spells the common arguments: the table that replaces branching on the shape.
#[derive(Debug, Clone, Copy)]
pub struct Spelling {
    pub tool: &'static str,
    /// The argument holding the conversation (`messages`, `input`, `prompt`), for errors.
    pub list_key: &'static str,
    /// Takes `output_schema`, `tools`, `tool_choice` and `max_retries`.
    pub modes: bool,
    /// The object the sampling settings (temperature, token limit, stop sequences) are read
    /// from: the top level, or the object under this key (Gemini's `generationConfig`).
    pub settings: Option<&'static str>,
    /// The stop-sequence argument: `stop` (a string or a list), else a list.
    pub stop: Option<&'static str>,
    /// The token limit's argument.
    pub max_tokens: &'static str,
    /// The API's newer name for it.
    pub max_tokens_alias: Option<&'static str>,
    pub format: Format,
    /// Parameters forwarded as request metadata (hosts may ignore them).
    pub metadata: &'static [&'static str],
    /// Whether a `cur_` cursor can be verified (a raw prompt has no assistant turn).
    pub verifies_cursors: bool,
    /// How the shape reads what its API spells its own way.
    pub hooks: Hooks,
}

/// The tools a call offers (none when it offers none) and its tool choice.
pub type Offer = (Option<Vec<ToolDef>>, Option<ToolChoice>);

/// The readers of the arguments a shape may spell its own way; [`Hooks::COMMON`] reads the
/// OpenAI and Anthropic spellings.
#[derive(Debug, Clone, Copy)]
pub struct Hooks {
    /// Structured output, from the arguments or the settings object.
    pub structured:
        for<'a> fn(&Obj<'a>, &Obj<'a>, &Spelling, &Limits) -> CallResult<Option<Structured<'a>>>,
    /// The tools offered, already narrowed to what the tool choice allows, and the choice.
    pub tools: fn(&Obj<'_>, &Limits) -> CallResult<Offer>,
    /// What the other parameters contribute: metadata, tuning, `stream`, warnings.
    pub extras: fn(&Obj<'_>, &Obj<'_>, &Spelling, &Env<'_>) -> CallResult<params::Extras>,
}

impl Hooks {
    pub const COMMON: Hooks = Hooks {
        structured: |o, _, sp, limits| structured_spec(o, sp.format, limits),
        tools: common_tools,
        extras: |o, _, sp, env| params::handle(o, sp.metadata, env.known),
    };
}

/// Where the settings are read: the arguments, or the object under `key` (absent: empty).
fn settings<'a>(o: &Obj<'a>, key: Option<&str>) -> CallResult<Obj<'a>> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    Ok(match key {
        None => Obj::new(o.map(), o.here()),
        Some(key) => Obj::new(
            o.opt_object(key)?
                .unwrap_or_else(|| EMPTY.get_or_init(Map::new)),
            o.path(key),
        ),
    })
}

/// `tools` and `tool_choice` as OpenAI and Anthropic spell them; a choice that names a tool
/// keeps only that one.
fn common_tools(o: &Obj<'_>, limits: &Limits) -> CallResult<Offer> {
    let (choice, forced) = parse_tool_choice(o)?;
    let mut tools = match o.opt_array("tools")? {
        Some(items) => Some(tool_defs(tool_specs(items, "tools")?, "tools", limits)?),
        None => None,
    };
    if let (Some(name), Some(defs)) = (forced, tools.as_mut()) {
        defs.retain(|d: &ToolDef| d.name == name);
        if defs.is_empty() {
            return Err(CallError::at(
                "tool_choice",
                format!("names the tool {name:?}, which is not in `tools`"),
            ));
        }
    }
    Ok((tools, choice))
}

/// What a shape gets besides its arguments.
pub struct Env<'a> {
    pub limits: &'a Limits,
    /// The argument names the tool declares (others are reported as unknown).
    pub known: &'a HashSet<String>,
}

/// Structured output as asked: the `output_schema` argument itself (for the persona view;
/// `None` when another spelling gave the schema), the compiled schema, and the spelling used.
#[derive(Debug)]
pub struct Structured<'a> {
    pub raw: Option<&'a Value>,
    pub schema: Arc<Schema>,
    pub source: &'static str,
}

/// The arguments every completion tool shares, in neutral form.
pub struct Common<'a> {
    pub tool: &'static str,
    pub verifies_cursors: bool,
    pub model: String,
    pub temperature: Option<f64>,
    pub max_tokens: u32,
    pub output_schema: Option<Structured<'a>>,
    pub tools: Option<Vec<ToolDef>>,
    pub tool_choice: Option<ToolChoice>,
    pub persona: Option<Persona>,
    pub previous: Option<String>,
    pub max_retries: u8,
    pub stop: Vec<String>,
    pub emulate_tools: bool,
    pub extras: params::Extras,
}

pub const DEFAULT_MODEL: &str = "agent-default";
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The sampling temperatures the model APIs accept.
pub const TEMPERATURE: std::ops::RangeInclusive<f64> = 0.0..=2.0;
pub use crate::fulfil::{DEFAULT_MAX_RETRIES, MAX_MAX_RETRIES};

impl<'a> Common<'a> {
    /// Reads the common arguments as `sp` spells them.
    pub fn read(o: &Obj<'a>, sp: &Spelling, env: &Env<'_>) -> CallResult<Self> {
        let settings = settings(o, sp.settings)?;
        let stop = match sp.stop {
            Some(key) => parse_stop(&settings, key, env.limits)?,
            None => Vec::new(),
        };
        let max_tokens = parse_max_tokens(&settings, sp.max_tokens, sp.max_tokens_alias)?;
        let mut common = Common {
            tool: sp.tool,
            verifies_cursors: sp.verifies_cursors,
            model: o.opt_str("model")?.unwrap_or(DEFAULT_MODEL).to_owned(),
            temperature: settings.opt_f64_in("temperature", TEMPERATURE)?,
            max_tokens,
            output_schema: None,
            tools: None,
            tool_choice: None,
            persona: Persona::parse(o, env.limits)?,
            previous: o.opt_str("previous_response_id")?.map(str::to_owned),
            max_retries: 0,
            stop,
            emulate_tools: parse_emulate_tools(o)?,
            extras: (sp.hooks.extras)(o, &settings, sp, env)?,
        };
        if sp.modes {
            common.max_retries = parse_max_retries(o)?;
            common.output_schema = (sp.hooks.structured)(o, &settings, sp, env.limits)?;
            (common.tools, common.tool_choice) = (sp.hooks.tools)(o, env.limits)?;
        }
        common.check_conflicts()?;
        Ok(common)
    }

    /// Structured output excludes tools and a persona output schema.
    pub fn check_conflicts(&self) -> CallResult<()> {
        let Some(structured) = &self.output_schema else {
            return Ok(());
        };
        let source = structured.source;
        if self.tools.is_some() {
            return Err(CallError::Invalid(format!(
                "`tools` and `{source}` cannot be combined: structured output is fulfilled as \
                 one required tool call, so other tools would contradict it. Pass one of them"
            )));
        }
        if let Some(p) = &self.persona
            && p.has_output_schema()
        {
            return Err(CallError::Invalid(format!(
                "`{source}` and `persona.output_schema` (persona {:?}) cannot both be given: \
                 they are two sources for the same output contract. Pass one of them",
                p.name
            )));
        }
        Ok(())
    }

    /// The effective tool choice: the given one, or `auto` when tools are given.
    pub fn effective_choice(&self) -> Option<ToolChoice> {
        self.tool_choice
            .or(self.tools.as_ref().map(|_| ToolChoice::Auto))
    }

    /// Adds the common keys to the object a persona's `input_schema` validates.
    pub fn add_to_view(&self, view: &mut Map<String, Value>, modes: bool) {
        view.insert("model".into(), json!(self.model));
        view.insert("temperature".into(), json!(self.temperature));
        view.insert("max_tokens".into(), json!(self.max_tokens));
        if modes {
            view.insert(
                "output_schema".into(),
                self.output_schema
                    .as_ref()
                    .and_then(|s| s.raw.cloned())
                    .unwrap_or(Value::Null),
            );
            let tools = self.tools.as_ref().map(|defs| {
                defs.iter()
                    .map(|d| {
                        json!({"name": d.name, "description": d.description, "input_schema": d.input_schema()})
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

    /// What the answer is: structured output, tool calls, or text.
    fn mode(&mut self) -> Mode {
        match (self.output_schema.take(), self.tools.take()) {
            (Some(s), _) => Mode::Structured(s.schema),
            (None, Some(defs)) => Mode::Tools {
                defs,
                choice: self.tool_choice.unwrap_or(ToolChoice::Auto),
            },
            (None, None) => Mode::Text,
        }
    }

    /// Runs the pre-send checks (persona input, cursor) and assembles the call.
    pub fn into_call(mut self, parts: Parts, limits: &Limits) -> CallResult<Call> {
        let Parts {
            list_key,
            system,
            messages,
            transcript,
            mut view,
            common_view,
        } = parts;
        let turns = assemble(list_key, messages, limits)?;
        // The persona request object is built only when there is a persona to check it.
        if let Some(p) = &self.persona {
            if let Some(modes) = common_view {
                self.add_to_view(&mut view, modes);
            }
            p.check_input(&view)?;
        }
        let chain = cursor::parse(self.previous.as_deref())?;
        cursor::verify(
            &chain,
            &self.model,
            self.tool,
            &transcript,
            self.verifies_cursors,
        )?;
        let mode = self.mode();
        Ok(Call {
            tool: self.tool,
            request: CompletionRequest {
                model: self.model,
                system,
                turns,
                temperature: self.temperature,
                max_tokens: self.max_tokens,
                stop: self.stop,
                tuning: self.extras.tuning,
                samplers: self.extras.samplers,
                text: None,
                reasoning: self.extras.reasoning,
                template_kwargs: self.extras.template_kwargs,
                logprobs: self.extras.logprobs,
                context: None,
            },
            mode,
            persona: self.persona,
            chain,
            transcript,
            max_retries: self.max_retries,
            emulate_tools: self.emulate_tools,
            metadata: self.extras.metadata,
            stream: self.extras.stream,
            warnings: self.extras.warnings,
        })
    }
}

/// What a shape contributes to a call besides the common arguments.
pub struct Parts {
    /// The argument holding the conversation, for errors.
    pub list_key: &'static str,
    pub system: Option<String>,
    pub messages: Vec<Msg>,
    pub transcript: Vec<Entry>,
    /// The shape's own keys of the persona request object (empty without a persona).
    pub view: Map<String, Value>,
    /// Whether the common keys join the persona view, and with the mode keys (`Some(true)`).
    /// `None` when the shape writes the whole view itself.
    pub common_view: Option<bool>,
}

/// One message of the caller's conversation, in neutral blocks, with its index for errors.
#[derive(Debug, Clone)]
pub struct Msg {
    pub index: usize,
    pub role: Role,
    pub blocks: Vec<Block>,
}

/// Joins a run of text blocks into one (with `"\n"`), as the original flattens text lists;
/// content with anything but text keeps its blocks.
pub fn flatten_text(blocks: Vec<Block>) -> Vec<Block> {
    if blocks.len() > 1 && blocks.iter().all(|b| matches!(b, Block::Text(_))) {
        vec![Block::Text(join_text(&blocks, "\n"))]
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

/// Turns the caller's messages into turns: merges consecutive tool-result messages (and tool
/// calls that follow an assistant message) into one turn, enforces the limits, and enforces
/// MCP's rules for tool content: tool calls only from the assistant, a message carrying tool
/// results carries nothing else, and every tool call is answered by the next message.
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
        check_message(key, &m, limits)?;
        let merge = turns.last().is_some_and(|(_, last)| joins(last, &m));
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
        let previous = i.checked_sub(1).and_then(|p| turns.get(p)).map(|(_, t)| t);
        check_pairs(
            key,
            *index,
            turn,
            previous,
            turns.get(i + 1).map(|(_, t)| t),
        )?;
    }
    Ok(turns.into_iter().map(|(_, t)| t).collect())
}

/// Whether message `m` joins the turn before it: tool results after tool results; an
/// assistant's tool calls, or what follows its reasoning (a Responses reasoning item).
fn joins(last: &Turn, m: &Msg) -> bool {
    if last.role != m.role {
        return false;
    }
    match m.role {
        Role::User => {
            ids(&m.blocks, false).len() == m.blocks.len()
                && !m.blocks.is_empty()
                && ids(&last.blocks, false).len() == last.blocks.len()
        }
        Role::Assistant => {
            m.blocks.iter().all(|b| matches!(b, Block::ToolUse { .. }))
                || last.blocks.iter().all(|b| matches!(b, Block::Reasoning(_)))
        }
    }
}

/// The size limit and the placement of tool content in one message.
fn check_message(key: &str, m: &Msg, limits: &Limits) -> CallResult<()> {
    // The path is written only for an error: this runs for every message of every call.
    let path = || args::index(key, m.index);
    let chars = text_chars(&m.blocks);
    if chars > limits.max_message_chars {
        return Err(CallError::at(
            &path(),
            format!(
                "{chars} characters of text is over the limit of {} per message \
                 (AGENT_AS_MODEL_MAX_MESSAGE_CHARS)",
                limits.max_message_chars
            ),
        ));
    }
    let results = ids(&m.blocks, false);
    match m.role {
        Role::User if !ids(&m.blocks, true).is_empty() => Err(CallError::at(
            &path(),
            "tool calls belong in assistant messages",
        )),
        Role::User if !results.is_empty() && results.len() != m.blocks.len() => Err(CallError::at(
            &path(),
            "a message carrying tool results must carry nothing else; send the text in a \
                 message of its own after them",
        )),
        Role::Assistant if !results.is_empty() => Err(CallError::at(
            &path(),
            "tool results belong in user or tool messages",
        )),
        _ => Ok(()),
    }
}

/// Every tool call in `turn` is answered by `next`, and every tool result in it answers a call
/// of `previous`.
fn check_pairs(
    key: &str,
    index: usize,
    turn: &Turn,
    previous: Option<&Turn>,
    next: Option<&Turn>,
) -> CallResult<()> {
    let path = || args::index(key, index);
    let uses = ids(&turn.blocks, true);
    if !uses.is_empty() {
        let answered: Vec<&str> = next.map(|t| ids(&t.blocks, false)).unwrap_or_default();
        let missing: Vec<&str> = uses
            .iter()
            .filter(|u| !answered.contains(u))
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(CallError::at(
                &path(),
                format!(
                    "tool call(s) {missing:?} are not answered by the next message: every \
                     tool call must be answered by a tool result in the message that follows"
                ),
            ));
        }
    }
    let results = ids(&turn.blocks, false);
    if !results.is_empty() {
        let asked: Vec<&str> = previous.map(|t| ids(&t.blocks, true)).unwrap_or_default();
        if let Some(unknown) = results.iter().find(|r| !asked.contains(r)) {
            return Err(CallError::at(
                &path(),
                format!(
                    "tool result for {unknown:?}, which no tool call in the previous \
                     assistant message has"
                ),
            ));
        }
    }
    Ok(())
}

/// Stop sequences under `key`: `stop` takes a string or a list, any other key a list.
fn parse_stop(o: &Obj<'_>, key: &str, limits: &Limits) -> CallResult<Vec<String>> {
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
            return Err(CallError::expected(&o.path(key), what, other));
        }
    };
    stop_list(&list, &o.path(key), limits)
}

/// Checks a list of stop sequences at `path`: at most `max_stop_sequences`, each a non-empty
/// string of at most `max_stop_chars` characters (they are looked for in every streamed delta).
pub fn stop_list(list: &[&Value], path: &str, limits: &Limits) -> CallResult<Vec<String>> {
    if list.len() > limits.max_stop_sequences {
        return Err(CallError::at(
            path,
            format!(
                "{} stop sequences is over the limit of {} (AGENT_AS_MODEL_MAX_STOP_SEQUENCES)",
                list.len(),
                limits.max_stop_sequences
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(s) if !s.is_empty() => match s.chars().count() {
                chars if chars > limits.max_stop_chars => Err(CallError::at(
                    &args::index(path, i),
                    format!(
                        "{chars} characters is over the limit of {} per stop sequence \
                         (AGENT_AS_MODEL_MAX_STOP_CHARS)",
                        limits.max_stop_chars
                    ),
                )),
                _ => Ok(s.to_owned()),
            },
            _ => Err(CallError::expected(
                &args::index(path, i),
                "a non-empty string",
                v,
            )),
        })
        .collect()
}

/// The structured-output schema from whichever spelling the caller used: `output_schema`
/// (all chat-shaped tools) or the API's own format object. Two spellings at once are an error
/// naming both.
fn structured_spec<'a>(
    o: &Obj<'a>,
    format: Format,
    limits: &Limits,
) -> CallResult<Option<Structured<'a>>> {
    let mut found: Vec<Structured<'a>> = Vec::new();
    if let Some(s) = o.get("output_schema") {
        found.push(Structured {
            raw: Some(s),
            schema: schema::compile(s, "output_schema", limits)?,
            source: "output_schema",
        });
    }
    let object = match format {
        Format::ResponseFormat => o
            .opt_object("response_format")?
            .map(|f| (f, "response_format", "response_format.json_schema")),
        Format::TextFormat => match o.opt_object("text")? {
            Some(text) => Obj::new(text, "text")
                .opt_object("format")?
                .map(|f| (f, "text.format", "text.format")),
            None => None,
        },
        Format::OutputConfig => match o.opt_object("output_config")? {
            Some(config) => Obj::new(config, "output_config")
                .opt_object("format")?
                .map(|f| (f, "output_config.format", "output_config.format")),
            None => None,
        },
        Format::None => None,
    };
    if let Some((f, name, schema_parent)) = object
        && let Some(schema) = format_schema(&Obj::new(f, name), format, schema_parent, limits)?
    {
        found.push(Structured {
            raw: None,
            schema,
            source: name,
        });
    }
    one_spelling(found)
}

/// At most one of several spellings of structured output.
pub fn one_spelling(mut found: Vec<Structured<'_>>) -> CallResult<Option<Structured<'_>>> {
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(CallError::Invalid(format!(
            "`{}` and `{}` both ask for structured output; pass one of them",
            found.first().map_or("", |f| f.source),
            found.get(1).map_or("", |f| f.source),
        ))),
    }
}

/// The schema every JSON object satisfies, for "any JSON object" modes.
pub fn any_object(path: &str, limits: &Limits) -> CallResult<Arc<Schema>> {
    schema::compile(&json!({"type": "object"}), path, limits)
}

/// Reads an OpenAI format object: `{"type": "text"}` asks for nothing, `{"type":
/// "json_object"}` for any JSON object, `{"type": "json_schema", ...}` for that schema (nested
/// under `json_schema` in chat completions, inline in Responses).
fn format_schema(
    f: &Obj<'_>,
    format: Format,
    schema_parent: &str,
    limits: &Limits,
) -> CallResult<Option<Arc<Schema>>> {
    const TYPES: [&str; 3] = ["text", "json_object", "json_schema"];
    match f.required_enum("type", &TYPES)? {
        "text" => Ok(None),
        "json_object" => any_object(&f.path("type"), limits).map(Some),
        _ => {
            let holder = if format == Format::ResponseFormat {
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
            schema::compile(schema, &holder.path("schema"), limits).map(Some)
        }
    }
}

/// `max_tokens`, or the API's newer name for it; both with different values is an error.
fn parse_max_tokens(o: &Obj<'_>, key: &str, alias: Option<&str>) -> CallResult<u32> {
    let given = o.get(key).is_some();
    let value = o.positive_u32_or(key, DEFAULT_MAX_TOKENS)?;
    let Some(alias) = alias.filter(|a| o.get(a).is_some()) else {
        return Ok(value);
    };
    let aliased = o.positive_u32_or(alias, DEFAULT_MAX_TOKENS)?;
    if given && aliased != value {
        return Err(CallError::Invalid(format!(
            "`{key}` ({value}) and `{alias}` ({aliased}) disagree; pass one of them"
        )));
    }
    Ok(aliased)
}

pub fn parse_emulate_tools(o: &Obj<'_>) -> CallResult<bool> {
    match o.get("emulate_tools") {
        None => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(CallError::expected(
            &o.path("emulate_tools"),
            "a boolean",
            other,
        )),
    }
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

pub fn parse_max_retries(o: &Obj<'_>) -> CallResult<u8> {
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

/// One tool definition as a shape read it, before the common checks.
pub struct ToolSpec<'a> {
    /// Where the definition is, for errors (`tools[2]`).
    pub path: String,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub schema: Cow<'a, Value>,
    pub schema_path: String,
}

/// `{name, description?, input_schema}`: the tool definition of the OpenAI- and
/// Anthropic-shaped tools; also as the APIs themselves spell it: OpenAI chat's
/// `{type: "function", function: {name, description?, parameters}}` and Responses'
/// `{type: "function", name, description?, parameters}`.
fn tool_specs<'a>(items: &'a [Value], path: &str) -> CallResult<Vec<ToolSpec<'a>>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let item_path = args::index(path, i);
            let outer = as_object(item, &item_path)?;
            let (def, def_path) = match outer.get("function") {
                Some(inner) if outer.get("type").and_then(Value::as_str) == Some("function") => {
                    let inner_path = format!("{item_path}.function");
                    (as_object(inner, &inner_path)?, inner_path)
                }
                _ => (outer, item_path.clone()),
            };
            let obj = Obj::new(def, def_path.as_str());
            let key = if obj.get("input_schema").is_none() && obj.get("parameters").is_some() {
                "parameters"
            } else {
                "input_schema"
            };
            Ok(ToolSpec {
                name: obj.required_str("name")?,
                description: obj.opt_str("description")?,
                schema: Cow::Borrowed(obj.required(key)?),
                schema_path: obj.path(key),
                path: item_path,
            })
        })
        .collect()
}

/// The tool definitions given at `path`: not empty, within the limit, names trimmed, non-empty
/// and unique, every schema compiled.
pub fn tool_defs(
    specs: Vec<ToolSpec<'_>>,
    path: &str,
    limits: &Limits,
) -> CallResult<Vec<ToolDef>> {
    if specs.is_empty() {
        return Err(CallError::at(
            path,
            "must contain at least one tool definition (omit it or pass null for none)",
        ));
    }
    if specs.len() > limits.max_tools {
        return Err(CallError::at(
            path,
            format!(
                "{} tool definitions is over the limit of {} (AGENT_AS_MODEL_MAX_TOOLS)",
                specs.len(),
                limits.max_tools
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut defs = Vec::with_capacity(specs.len());
    for spec in specs {
        let name = spec.name.trim();
        let name_path = args::join(&spec.path, "name");
        if name.is_empty() {
            return Err(CallError::at(&name_path, "must be a non-empty string"));
        }
        if !seen.insert(name.to_owned()) {
            return Err(CallError::at(
                &name_path,
                format!("duplicate tool name {name:?}; tool names must be unique"),
            ));
        }
        defs.push(ToolDef {
            name: name.to_owned(),
            description: spec.description.map(str::to_owned),
            schema: schema::compile(&spec.schema, &spec.schema_path, limits)?,
        });
    }
    Ok(defs)
}

/// Reads a `messages`-style list: non-empty, each item an object.
pub fn message_objects<'a>(
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
pub fn render_text(completion: &str, cursor: Option<&str>) -> String {
    match cursor {
        Some(c) => pyjson::dumps(
            &json!({"completion": completion, "response_id": c}),
            Style::SORTED,
        ),
        None => completion.to_owned(),
    }
}

/// Parsing a shape's arguments in unit tests, with default limits.
#[cfg(test)]
pub mod tests_support {
    use super::*;
    use crate::shapes::Shape;

    pub fn parse(shape: &dyn Shape, v: Value) -> CallResult<Call> {
        crate::shapes::parse(shape, v.as_object().unwrap(), &Limits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_sequences_over_the_limits_are_refused_naming_the_field_and_the_setting() {
        let limits = Limits {
            max_stop_sequences: 2,
            max_stop_chars: 5,
            ..Limits::default()
        };
        let user = json!([{"role": "user", "content": "hi"}]);
        let cases = [
            (
                "chat_complete",
                json!({"messages": user, "stop": ["a", "b", "c"]}),
                "`stop`",
            ),
            (
                "generate",
                json!({"prompt": "hi", "stop": "abcdef"}),
                "`stop[0]`",
            ),
            (
                "messages_create",
                json!({"messages": user, "stop_sequences": ["ok", "é1234é"]}),
                "`stop_sequences[1]`",
            ),
            (
                "generate_content",
                json!({"contents": [{"parts": [{"text": "hi"}]}],
                       "generationConfig": {"stopSequences": ["a", "b", "c"]}}),
                "`generationConfig.stopSequences`",
            ),
        ];
        for (tool, args, field) in cases {
            let shape = crate::shapes::find(tool).unwrap();
            let e = crate::shapes::parse(shape, args.as_object().unwrap(), &limits)
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{tool}: {e}");
            let setting = if field.ends_with("]`") {
                "6 characters is over the limit of 5 per stop sequence \
                 (AGENT_AS_MODEL_MAX_STOP_CHARS)"
            } else {
                "3 stop sequences is over the limit of 2 (AGENT_AS_MODEL_MAX_STOP_SEQUENCES)"
            };
            assert!(e.contains(setting), "{tool}: {e}");
        }
        // At the limits, they are taken (characters, not bytes, are counted).
        let shape = crate::shapes::find("messages_create").unwrap();
        let args = json!({"messages": user, "stop_sequences": ["ééééé", "END"]});
        let call = crate::shapes::parse(shape, args.as_object().unwrap(), &limits).unwrap();
        assert_eq!(call.request.stop, ["ééééé", "END"]);
    }

    #[test]
    fn cursor_envelope_wraps_the_completion() {
        let text = render_text("hi", Some("cur_x"));
        assert_eq!(text, r#"{"completion": "hi", "response_id": "cur_x"}"#);
    }

    #[test]
    fn tools_are_validated() {
        let l = Limits::default();
        let list = |t: Value| {
            let items = t.as_array().unwrap().clone();
            tool_defs(tool_specs(&items, "tools").unwrap(), "tools", &l)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = list(json!([]));
        assert!(e.contains("`tools`: must contain at least one"), "{e}");
        let e = list(json!([{"name": " a ", "input_schema": {"type": "object"}},
                            {"name": "a", "input_schema": {"type": "object"}}]));
        assert!(
            e.contains("`tools[1].name`: duplicate tool name \"a\""),
            "{e}"
        );
        let e = list(json!([{"name": "a", "input_schema": {"type": "string"}}]));
        assert!(e.contains("`tools[0].input_schema`"), "{e}");
        let e = list(json!([{"name": "  ", "input_schema": {"type": "object"}}]));
        assert!(e.contains("`tools[0].name`: must be a non-empty"), "{e}");
    }
}
