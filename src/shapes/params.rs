//! Every parameter a real OpenAI or Anthropic client sends gets a defined outcome: forwarded
//! (in the sampling request, some inside its `metadata`), emulated (`stream`), rejected with an
//! error (what sampling cannot do at all), or reported in `warnings` (no sampling equivalent, or
//! an argument nobody knows). The original ignored unknown arguments silently.

use super::ToolKind;
use crate::args::Obj;
use crate::error::{CallError, CallResult};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::OnceLock;

/// The tool definitions: names, descriptions, input and output schemas.
pub const TOOLS_JSON: &str = include_str!("../tools.json");

/// Parameters forwarded in the sampling request's `metadata` (hosts may ignore them).
fn metadata_keys(kind: ToolKind) -> &'static [&'static str] {
    match kind {
        ToolKind::ChatComplete => &[
            "top_p",
            "seed",
            "user",
            "metadata",
            "frequency_penalty",
            "presence_penalty",
        ],
        ToolKind::MessagesCreate => &["top_p", "top_k", "metadata"],
        ToolKind::ResponsesCreate => &["top_p", "user", "metadata"],
        ToolKind::Generate => &["top_p", "seed", "user", "metadata"],
    }
}

/// Parameters accepted for compatibility that have no equivalent in sampling.
const NO_EQUIVALENT: [&str; 11] = [
    "parallel_tool_calls",
    "store",
    "service_tier",
    "reasoning_effort",
    "reasoning",
    "logit_bias",
    "truncation",
    "include",
    "thinking",
    "prediction",
    "stream_options",
];

/// The argument names a tool declares in its input schema.
pub fn known_arguments(kind: ToolKind) -> &'static HashSet<String> {
    static KNOWN: OnceLock<Vec<(String, HashSet<String>)>> = OnceLock::new();
    static EMPTY: OnceLock<HashSet<String>> = OnceLock::new();
    let all = KNOWN.get_or_init(|| {
        let tools: Vec<Value> = serde_json::from_str(TOOLS_JSON).unwrap_or_default();
        tools
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?.to_owned();
                let props = t.get("inputSchema")?.get("properties")?.as_object()?;
                Some((name, props.keys().cloned().collect()))
            })
            .collect()
    });
    all.iter()
        .find(|(name, _)| name == kind.name())
        .map(|(_, k)| k)
        .unwrap_or_else(|| EMPTY.get_or_init(HashSet::new))
}

/// What the parameters contribute to a call.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Extras {
    /// Sent as the sampling request's `metadata`.
    pub metadata: Map<String, Value>,
    pub warnings: Vec<String>,
}

pub fn handle(o: &Obj<'_>, kind: ToolKind) -> CallResult<Extras> {
    let mut extras = Extras::default();
    if let Some(n) = o.get("n")
        && n.as_u64() != Some(1)
    {
        return Err(CallError::expected(
            "n",
            "1 (each sampling request yields one completion; call again for more)",
            n,
        ));
    }
    if o.get("logprobs").is_some_and(|v| v != &Value::Bool(false)) {
        return Err(CallError::at(
            "logprobs",
            "log probabilities are not available: MCP sampling does not report them",
        ));
    }
    if o.get("top_logprobs").is_some() {
        return Err(CallError::at(
            "top_logprobs",
            "log probabilities are not available: MCP sampling does not report them",
        ));
    }
    let audio_out = o
        .get("modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x == "audio"));
    if audio_out || o.get("audio").is_some() {
        return Err(CallError::at(
            if audio_out { "modalities" } else { "audio" },
            "audio output cannot be requested: MCP sampling does not let the server ask for it",
        ));
    }
    match o.get("stream") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => extras.warnings.push(
            "stream: true is emulated: sampling is not incremental, so the complete result is \
             returned at once"
                .into(),
        ),
        Some(other) => return Err(CallError::expected("stream", "a boolean", other)),
    }
    for key in metadata_keys(kind) {
        if let Some(v) = o.get(key) {
            extras.metadata.insert((*key).to_owned(), v.clone());
        }
    }
    let known = known_arguments(kind);
    let mut keys: Vec<&String> = o.map().keys().collect();
    keys.sort();
    for key in keys {
        if NO_EQUIVALENT.contains(&key.as_str()) && known.contains(key) {
            if o.get(key).is_some() && !(key == "stream_options" && o.get("stream").is_some()) {
                extras.warnings.push(format!(
                    "`{key}` has no equivalent in MCP sampling and was ignored"
                ));
            }
        } else if !known.contains(key) {
            extras
                .warnings
                .push(format!("unknown argument `{key}` was ignored"));
        }
    }
    Ok(extras)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(kind: ToolKind, v: Value) -> CallResult<Extras> {
        handle(&Obj::root(v.as_object().unwrap()), kind)
    }

    #[test]
    fn each_parameter_has_an_outcome() {
        let e = run(
            ToolKind::ChatComplete,
            json!({"messages": [], "top_p": 0.9, "seed": 7, "user": "u",
            "stream": true, "parallel_tool_calls": false, "frobnicate": 1}),
        )
        .unwrap();
        assert_eq!(
            e.metadata,
            json!({"top_p": 0.9, "seed": 7, "user": "u"})
                .as_object()
                .unwrap()
                .clone()
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("stream: true is emulated"))
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("`parallel_tool_calls` has no equivalent"))
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("unknown argument `frobnicate`"))
        );
        assert_eq!(e.warnings.len(), 3, "{:?}", e.warnings);
        for (args, field) in [
            (json!({"n": 2}), "`n`"),
            (json!({"logprobs": true}), "`logprobs`"),
            (json!({"top_logprobs": 3}), "`top_logprobs`"),
            (json!({"modalities": ["text", "audio"]}), "`modalities`"),
            (json!({"stream": "yes"}), "`stream`"),
        ] {
            let err = run(ToolKind::ChatComplete, args).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
        assert!(run(ToolKind::ChatComplete, json!({"n": 1, "logprobs": false})).is_ok());
    }

    #[test]
    fn known_arguments_come_from_the_declared_schemas() {
        assert!(known_arguments(ToolKind::Generate).contains("prompt"));
        assert!(!known_arguments(ToolKind::Generate).contains("messages"));
        let e = run(ToolKind::Generate, json!({"prompt": "x", "tools": []})).unwrap();
        assert_eq!(
            e.warnings,
            vec!["unknown argument `tools` was ignored".to_owned()]
        );
    }
}
