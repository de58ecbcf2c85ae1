//! The neutral completion request and answer that every product shape translates to and from.
//!
//! Shapes never build MCP types and the fulfilment step never sees a product shape: this module
//! is the seam between them. Content is a list of blocks, not a string, so richer conversations
//! are a change to the shapes only.

use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One piece of content in a turn or an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// A tool call made by the model.
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
    },
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

/// A tool the model may call, validated (trimmed unique name, object-rooted schema).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Map<String, Value>,
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
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// Alias the caller passed; reaches the host as a model hint.
    pub model: String,
    pub system: Option<String>,
    pub turns: Vec<Turn>,
    pub temperature: Option<f64>,
    pub max_tokens: u32,
}

/// The host's answer in neutral form.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub blocks: Vec<Block>,
    /// The model the host says it used.
    pub model: String,
    pub stop_reason: Option<String>,
}

impl Completion {
    /// The text blocks joined with `"\n"`, as the original joins them.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                Block::ToolUse { .. } => None,
            })
            .collect();
        texts.join("\n")
    }

    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Map<String, Value>)> {
        self.blocks.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            Block::Text(_) => None,
        })
    }
}
