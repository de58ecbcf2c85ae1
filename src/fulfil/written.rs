//! What a model wrote, in the terms every backend shares: the call objects of a JSON value
//! ([`call_items`], [`read_item`]: prompted tools, read at the end by [`super::output`]), a call
//! found in an answer ([`Found`]) and the [`Piece`]s an answer is told in as it grows. Each
//! backend reads its own answers into these: the embedded model with its family's parser
//! (`local::format::Parser`), a provider from its stream (`backends::stream`).
//!
//! Which calls are acceptable (offered tools, arguments that satisfy their schema) is the
//! machine's to judge ([`super::output`]); this module only reads what was written.

use super::live::Event;
use serde_json::{Map, Value};

/// The keys a written call's arguments go by.
const ARGUMENT_KEYS: [&str; 3] = ["arguments", "input", "parameters"];

/// The call objects in a JSON value: `{"tool_calls": [...]}` (or one call under it), one object
/// with a `name`, or a non-empty list of objects with one. `None` when it is none of these.
pub fn call_items(value: &Value) -> Option<Vec<&Value>> {
    match value {
        Value::Object(m) => match m.get("tool_calls") {
            Some(Value::Array(a)) => Some(a.iter().collect()),
            Some(single) => Some(vec![single]),
            None if m.contains_key("name") => Some(vec![value]),
            None => None,
        },
        Value::Array(a) if !a.is_empty() && a.iter().all(|i| i.get("name").is_some()) => {
            Some(a.iter().collect())
        }
        _ => None,
    }
}

/// A written call's name (empty when it has none) and arguments: under `arguments`, `input` or
/// `parameters`, decoded when they are a JSON string, `{}` when absent.
pub fn read_item(item: &Value) -> (&str, Value) {
    let name = item.get("name").and_then(Value::as_str).unwrap_or("");
    let args = ARGUMENT_KEYS
        .iter()
        .find_map(|k| item.get(*k))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let args = match args {
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        other => other,
    };
    (name, args)
}

/// A call found in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub id: String,
    pub name: String,
    pub input: Map<String, Value>,
}

/// What a piece of text added, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    /// More of the model's reasoning, apart from the answer's text.
    Reasoning(String),
    /// The call numbered `index` (from 0, in the answer's order) began.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of the call's arguments, as JSON text (the fragments join into its arguments).
    CallArgs {
        index: usize,
        fragment: String,
    },
    /// The log-probabilities of the tokens that made the text that follows (see
    /// [`Event::Logprobs`]), when the call asked for them.
    Logprobs(Vec<crate::call::TokenLogprob>),
}

impl Piece {
    /// The piece as the call's event, the answer being `tokens` tokens long.
    pub fn event(&self, tokens: usize) -> Event<'_> {
        match self {
            Piece::Text(text) => Event::Delta { tokens, text },
            Piece::Reasoning(text) => Event::Reasoning { tokens, text },
            Piece::CallStart { index, id, name } => Event::ToolCall {
                tokens,
                index: *index,
                id,
                name,
            },
            Piece::CallArgs { index, fragment } => Event::ToolArgs {
                tokens,
                index: *index,
                fragment,
            },
            Piece::Logprobs(logprobs) => Event::Logprobs { tokens, logprobs },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_call_items_of_a_value() {
        let v = json!({"tool_calls": [{"name": "a"}]});
        assert_eq!(call_items(&v).map(|i| i.len()), Some(1));
        assert_eq!(call_items(&json!({"x": 1})), None);
        assert_eq!(call_items(&json!([])), None);
        let item = json!({"name": "a", "input": "{\"k\": 1}"});
        assert_eq!(read_item(&item), ("a", json!({"k": 1})));
    }
}
