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
    /// Base64 image data with its MIME type.
    Image {
        data: String,
        mime: String,
    },
    /// Base64 audio data with its MIME type.
    Audio {
        data: String,
        mime: String,
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
    /// Sequences that end the completion; forwarded, and enforced by the server.
    pub stop: Vec<String>,
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

impl Finish {
    /// Reads the host's `stopReason` (an open string; missing means the turn ended).
    pub fn from_stop_reason(reason: Option<&str>) -> Self {
        match reason {
            Some("maxTokens") => Finish::MaxTokens,
            Some("stopSequence") => Finish::StopSequence(None),
            Some("toolUse") => Finish::ToolUse,
            _ => Finish::EndTurn,
        }
    }
}

/// The host's answer in neutral form.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub blocks: Vec<Block>,
    /// The model the host says it used.
    pub model: String,
    pub finish: Finish,
}

impl Completion {
    #[cfg(test)]
    pub fn text_answer(text: &str) -> Self {
        Completion {
            blocks: vec![Block::Text(text.to_owned())],
            model: "m".into(),
            finish: Finish::EndTurn,
        }
    }

    /// The text blocks joined with `"\n"`, as the original joins them.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
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
            if let Block::Text(t) = block {
                let first = stop
                    .iter()
                    .filter_map(|s| t.find(s.as_str()).map(|pos| (pos, s)))
                    .min_by_key(|(pos, _)| *pos);
                if let Some((pos, seq)) = first {
                    cut_at = Some((i, pos, seq.clone()));
                    break;
                }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        c.enforce_stop(&["STOP".into()]);
        assert_eq!(c.text(), "a ");
    }

    #[test]
    fn stop_reasons_map_to_finishes() {
        assert_eq!(Finish::from_stop_reason(None), Finish::EndTurn);
        assert_eq!(
            Finish::from_stop_reason(Some("maxTokens")),
            Finish::MaxTokens
        );
        assert_eq!(Finish::from_stop_reason(Some("toolUse")), Finish::ToolUse);
        assert_eq!(
            Finish::from_stop_reason(Some("stopSequence")),
            Finish::StopSequence(None)
        );
        assert_eq!(
            Finish::from_stop_reason(Some("somethingNew")),
            Finish::EndTurn
        );
    }
}
