//! Product shapes. Each shape is one file that owns its API's spellings, parsing (tool
//! arguments into a neutral [`Call`]), where its result puts the API object (which the API's
//! encoder writes, see [`crate::mcp::result`]), its persona view and its tool definition,
//! behind the [`Shape`] trait. [`REGISTRY`] lists them;
//! the server only routes. What the shapes share lives in [`common`].
//!
//! Adding a shape is one new file, a line in [`REGISTRY`] and its tool definition in `tools/`.

pub mod anthropic;
pub mod common;
pub mod gemini;
pub mod lark;
pub mod ollama;
pub mod openai_chat;
pub mod params;
pub mod prompt;
pub mod reasoning;
pub mod responses;
pub mod text;
pub mod tool_names;

use crate::args::Obj;
use crate::call::Call;
use crate::error::CallResult;
use crate::limits::Limits;
pub use common::{DEFAULT_MAX_RETRIES, DEFAULT_MAX_TOKENS, DEFAULT_MODEL, Env, MAX_MAX_RETRIES};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::OnceLock;

/// Where a tool result's structured content puts the shape's API object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Under this key, beside `result`.
    Under(&'static str),
    /// Its keys beside `result`.
    Beside,
    /// Its keys alone: the object is the result (`responses_create`).
    Whole,
}

/// One product API's tool.
pub trait Shape: Sync {
    /// The tool's name (as in its definition).
    fn name(&self) -> &'static str;

    /// The tool definition as MCP lists it: name, description, input and output schemas.
    fn definition(&self) -> &'static str;

    /// Parses the tool's arguments into a checked [`Call`]; nothing has been sent yet.
    fn parse(&self, args: &Obj<'_>, env: &Env<'_>) -> CallResult<Call>;

    /// Where the tool result puts the API object.
    fn placement(&self) -> Placement;

    /// Whether the tool result says which model the host or backend reports (`host_model`).
    fn reports_host_model(&self) -> bool {
        false
    }

    /// Whether the API object names the model the call asked for (the original's
    /// `responses_create`), not the one the host or backend says answered.
    fn names_asked_model(&self) -> bool {
        false
    }
}

/// Every completion shape, in the order `tools/list` shows them.
pub static REGISTRY: [&dyn Shape; 5] = [
    &openai_chat::ChatComplete,
    &anthropic::MessagesCreate,
    &responses::ResponsesCreate,
    &prompt::Generate,
    &gemini::GenerateContent,
];

/// The shape serving tool `name`.
pub fn find(name: &str) -> Option<&'static dyn Shape> {
    REGISTRY.iter().copied().find(|s| s.name() == name)
}

/// The argument names `shape`'s definition declares (others are reported as unknown); read
/// from the definitions once.
pub fn known_arguments(shape: &dyn Shape) -> &'static HashSet<String> {
    static KNOWN: OnceLock<Vec<(&'static str, HashSet<String>)>> = OnceLock::new();
    static NONE: OnceLock<HashSet<String>> = OnceLock::new();
    let all = KNOWN.get_or_init(|| {
        REGISTRY
            .iter()
            .map(|s| {
                let def = serde_json::from_str(s.definition()).unwrap_or(Value::Null);
                (s.name(), params::declared_arguments(&def))
            })
            .collect()
    });
    all.iter()
        .find(|(name, _)| *name == shape.name())
        .map(|(_, known)| known)
        .unwrap_or_else(|| NONE.get_or_init(HashSet::new))
}

/// Parses `arguments` for `shape` under `limits`.
pub fn parse(
    shape: &dyn Shape,
    arguments: &Map<String, Value>,
    limits: &Limits,
) -> CallResult<Call> {
    let env = Env {
        limits,
        known: known_arguments(shape),
    };
    shape.parse(&Obj::root(arguments), &env)
}

/// The definition of `list_models`, which is not a product shape.
pub const LIST_MODELS: &str = include_str!("tools/list_models.json");
/// The `embeddings_create` tool: OpenAI's embeddings request as arguments.
pub const EMBEDDINGS_CREATE: &str = include_str!("tools/embeddings_create.json");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_definition_names_its_shape() {
        for shape in REGISTRY {
            let def: Value = serde_json::from_str(shape.definition()).unwrap();
            assert_eq!(def["name"], shape.name());
            assert!(def["inputSchema"]["properties"].is_object());
            assert_eq!(def["outputSchema"]["type"], "object");
        }
    }
}
