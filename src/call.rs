//! The neutral core: one model call and its answer, with no knowledge of product shapes or
//! protocol eras.
//!
//! Every shape parses into a [`Call`] and renders from a [`Reply`]; fulfilment and the backends
//! see only these types. Content is a list of blocks, not a string, so richer conversations are a
//! change to the shapes only.

use crate::contract::cursor::{Chain, Entry};
use crate::contract::persona::Persona;
use crate::contract::schema::Schema;
use crate::pyjson::{self, Style};
use serde_json::{Map, Value, json};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One piece of content in a turn or an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// Base64 image data with its MIME type and the SHA-256 of the decoded bytes (computed
    /// when the data is checked, so it is decoded once).
    Image {
        data: String,
        mime: String,
        sha256: [u8; 32],
    },
    /// Base64 audio data with its MIME type and the SHA-256 of the decoded bytes.
    Audio {
        data: String,
        mime: String,
        sha256: [u8; 32],
    },
    /// A tool call made by the model (assistant turns only).
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
    },
    /// The result of a tool call, sent back by the caller (user turns only).
    ToolResult {
        id: String,
        content: Vec<Block>,
        is_error: bool,
    },
}

impl Block {
    /// The block's kind as the MCP content type names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Block::Text(_) => "text",
            Block::Image { .. } => "image",
            Block::Audio { .. } => "audio",
            Block::ToolUse { .. } => "tool_use",
            Block::ToolResult { .. } => "tool_result",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub role: Role,
    pub blocks: Vec<Block>,
}

impl Turn {
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Turn {
            role,
            blocks: vec![Block::Text(text.into())],
        }
    }
}

/// A tool the model may call, validated (trimmed unique name, object-rooted schema), with its
/// compiled schema kept beside it.
#[derive(Debug, Clone)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    pub schema: Arc<Schema>,
}

impl ToolDef {
    /// The input schema as the caller gave it (always an object: [`Schema`] is object-rooted).
    pub fn input_schema(&self) -> &Map<String, Value> {
        self.schema.object()
    }
}

/// A tool as a request offers it to a model: what the model reads of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTool {
    pub name: String,
    pub description: Option<String>,
    /// The input schema, a JSON Schema object.
    pub schema: Map<String, Value>,
}

impl From<&ToolDef> for ModelTool {
    fn from(d: &ToolDef) -> Self {
        ModelTool {
            name: d.name.clone(),
            description: d.description.clone(),
            schema: d.input_schema().clone(),
        }
    }
}

impl PartialEq for ToolDef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.schema.raw() == other.schema.raw()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
}

impl ToolChoice {
    pub const NAMES: [&'static str; 3] = ["auto", "required", "none"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(ToolChoice::Auto),
            "required" => Some(ToolChoice::Required),
            "none" => Some(ToolChoice::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

/// One model call in neutral form: what the product asked for, minus the product's spelling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletionRequest {
    /// Alias the caller passed; reaches the host as a model hint.
    pub model: String,
    pub system: Option<String>,
    pub turns: Vec<Turn>,
    pub temperature: Option<f64>,
    pub max_tokens: u32,
    /// Sequences that end the completion; forwarded, and enforced by the server.
    pub stop: Vec<String>,
    pub tuning: Tuning,
}

/// Sampling parameters beyond the temperature, typed. A backend that takes them uses them (the
/// local model all three, a provider `top_p` and `seed`); MCP sampling has no fields for them,
/// so they reach the host in the request's `metadata`, as the caller spelled them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tuning {
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    pub top_p: Option<f64>,
    /// Keep only this many most likely tokens.
    pub top_k: Option<u32>,
    /// Makes a sampled answer repeatable (negative: a random draw).
    pub seed: Option<i64>,
}

/// Why the completion ended, in neutral form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    EndTurn,
    MaxTokens,
    /// A stop sequence ended it; `None` when the host says so without saying which.
    StopSequence(Option<String>),
    ToolUse,
}

/// The host's answer in neutral form.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub blocks: Vec<Block>,
    /// The model the host says it used.
    pub model: String,
    pub finish: Finish,
    /// Token counts the backend measured (a local model or a provider); sampling reports none.
    pub usage: Option<Usage>,
}

impl Completion {
    #[cfg(test)]
    pub fn text_answer(text: &str) -> Self {
        Completion {
            blocks: vec![Block::Text(text.to_owned())],
            model: "m".into(),
            finish: Finish::EndTurn,
            usage: None,
        }
    }

    /// The text blocks joined with `"\n"`, as the original joins them.
    pub fn text(&self) -> String {
        join_text(&self.blocks, "\n")
    }

    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Map<String, Value>)> {
        self.blocks.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }

    /// Cuts the text at the first of `stop` and drops what follows, as a host that honoured the
    /// stop sequence would have; the finish reason then names the sequence.
    pub fn enforce_stop(&mut self, stop: &[String]) {
        if stop.is_empty() {
            return;
        }
        let mut cut_at = None;
        for (i, block) in self.blocks.iter().enumerate() {
            if let Block::Text(t) = block
                && let Some((pos, seq)) = first_stop(t, stop)
            {
                cut_at = Some((i, pos, seq.to_owned()));
                break;
            }
        }
        let Some((i, pos, seq)) = cut_at else {
            return;
        };
        if let Some(Block::Text(t)) = self.blocks.get_mut(i) {
            t.truncate(pos);
        }
        let mut index = 0;
        self.blocks.retain(|b| {
            let keep = index <= i || !matches!(b, Block::Text(_));
            index += 1;
            keep
        });
        self.finish = Finish::StopSequence(Some(seq));
    }

    /// Image and audio blocks of the answer, returned beside the text.
    pub fn media(&self) -> Vec<Block> {
        self.blocks
            .iter()
            .filter(|b| matches!(b, Block::Image { .. } | Block::Audio { .. }))
            .cloned()
            .collect()
    }
}

/// Characters of text in `blocks`.
pub fn text_chars(blocks: &[Block]) -> usize {
    blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => t.chars().count(),
            _ => 0,
        })
        .sum()
}

/// The text blocks of `blocks` joined with `sep` (other blocks are skipped).
pub fn join_text(blocks: &[Block], sep: &str) -> String {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    texts.join(sep)
}

/// What kind of answer the call wants.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Plain text.
    Text,
    /// JSON satisfying the schema.
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
    /// The tool that was called (binds sealed state and cursors to it).
    pub tool: &'static str,
    pub request: CompletionRequest,
    pub mode: Mode,
    pub persona: Option<Persona>,
    pub chain: Chain,
    /// The conversation as the cursor commits to it.
    pub transcript: Vec<Entry>,
    /// How many times a rejected structured answer is sent back for repair.
    pub max_retries: u8,
    /// Describe tools in the prompt when the backend cannot take them (default on).
    pub emulate_tools: bool,
    /// Parameters forwarded as request metadata.
    pub metadata: Map<String, Value>,
    /// The caller asked for a stream (`stream: true`); the result is whole, and the warning
    /// says how this call's backend can be followed instead.
    pub stream: bool,
    /// What the server did not honour as asked, reported in the result.
    pub warnings: Vec<String>,
}

/// The answer, interpreted for the call's mode.
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

impl ToolCall {
    /// The call's arguments as a JSON string with sorted keys, as OpenAI-style APIs carry them.
    pub fn arguments_json(&self) -> String {
        pyjson::dumps_object(&self.input, Style::SORTED)
    }
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

/// Token counts. Sampling reports none, so there they are estimates (about four characters a
/// token), marked `"estimated": true` where they are rendered; a local model or a provider
/// counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt: usize,
    pub completion: usize,
    pub estimated: bool,
    /// Prompt tokens read from a cache rather than processed again (the local model's prefix
    /// cache, a provider's prompt cache), when the backend says.
    pub cached: Option<usize>,
}

impl Usage {
    pub fn total(self) -> usize {
        self.prompt + self.completion
    }
}

fn estimate_tokens(chars: usize) -> usize {
    chars.div_ceil(4)
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
    /// Token counts the backend measured, if it did.
    pub measured: Option<Usage>,
    /// Images and audio in the answer, besides its text.
    pub media: &'a [Block],
}

impl Call {
    /// The prompt's tokens, estimated from its characters (the usage reported when a backend
    /// does not count).
    pub fn prompt_tokens_estimate(&self) -> usize {
        let req = &self.request;
        let text: usize = req.turns.iter().map(|t| text_chars(&t.blocks)).sum();
        let system = req.system.as_ref().map_or(0, |s| s.chars().count());
        // The tools offered are read too: their names, descriptions and schemas.
        let tools: usize = match &self.mode {
            Mode::Tools { defs, .. } => defs
                .iter()
                .map(|d| {
                    d.name.len()
                        + d.description.as_ref().map_or(0, |s| s.chars().count())
                        + serde_json::to_string(d.input_schema()).map_or(0, |s| s.len())
                })
                .sum(),
            _ => 0,
        };
        estimate_tokens(text + system + tools)
    }
}

impl Reply<'_> {
    /// The usage of this call: measured by the backend, else estimated.
    pub fn usage(&self) -> Usage {
        if let Some(measured) = self.measured {
            return measured;
        }
        Usage {
            prompt: self.call.prompt_tokens_estimate(),
            completion: estimate_tokens(self.completion.chars().count()),
            estimated: true,
            cached: None,
        }
    }

    /// The id of the response object: the cursor when the chain is on, else `prefix` and a
    /// random hex id.
    pub fn response_id(&self, prefix: &str) -> String {
        self.cursor.map_or_else(|| new_id(prefix), str::to_owned)
    }
}

/// A fresh id: `prefix` and 32 random lowercase hex digits.
/// Where the earliest of `stops` begins in `text`, and which it is; an empty one never matches.
pub fn first_stop<'a>(text: &str, stops: &'a [String]) -> Option<(usize, &'a str)> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str())))
        .min_by_key(|(at, _)| *at)
}

/// How many bytes at the end of `text` begin `needle` without being all of it: the most that
/// more text could still turn into `needle` (0 when no end of `text` begins it).
pub fn partial_suffix(text: &str, needle: &str) -> usize {
    (1..needle.len())
        .rev()
        .find(|n| needle.get(..*n).is_some_and(|p| text.ends_with(p)))
        .unwrap_or(0)
}

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// Where a message of blocks enters a conversation's cursor.
impl Entry {
    /// The entry for a message of blocks: its text when it is one text block, else a list of
    /// parts `{"type": "text", "text"}`, `{"type": "image" | "audio", "mime_type", "sha256"}`
    /// (the SHA-256 of the decoded bytes, so media is committed to without being copied),
    /// `{"type": "tool_use", "id", "name", "input"}` and `{"type": "tool_result",
    /// "tool_use_id", "is_error", "content": [parts]}`.
    pub fn from_blocks(role: &str, blocks: &[Block]) -> Self {
        let content = match blocks {
            [Block::Text(t)] => Value::String(t.clone()),
            [] => Value::String(String::new()),
            blocks => Value::Array(blocks.iter().map(part).collect()),
        };
        Entry {
            role: role.to_owned(),
            content,
        }
    }
}

fn part(block: &Block) -> Value {
    match block {
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::Image { mime, sha256, .. } => {
            json!({"type": "image", "mime_type": mime, "sha256": hex::encode(sha256)})
        }
        Block::Audio { mime, sha256, .. } => {
            json!({"type": "audio", "mime_type": mime, "sha256": hex::encode(sha256)})
        }
        Block::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            id,
            content,
            is_error,
        } => json!({"type": "tool_result", "tool_use_id": id, "is_error": is_error,
                    "content": content.iter().map(part).collect::<Vec<_>>()}),
    }
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
    fn stop_sequences_cut_the_text_at_the_first_one() {
        let mut c = Completion::text_answer("one\ntwo END three STOP");
        c.enforce_stop(&["STOP".into(), "END".into()]);
        assert_eq!(c.text(), "one\ntwo ");
        assert_eq!(c.finish, Finish::StopSequence(Some("END".into())));
        let mut c = Completion::text_answer("no stop here");
        c.enforce_stop(&["STOP".into()]);
        assert_eq!(c.text(), "no stop here");
        assert_eq!(c.finish, Finish::EndTurn);
        let mut c = Completion {
            blocks: vec![Block::Text("a STOP b".into()), Block::Text("later".into())],
            model: "m".into(),
            finish: Finish::EndTurn,
            usage: None,
        };
        c.enforce_stop(&["STOP".into()]);
        assert_eq!(c.text(), "a ");
    }
}
