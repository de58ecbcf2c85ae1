//! What an agent CLI sends that would keep its turns from sharing a prompt prefix, or its side
//! calls from being answered, set straight before the request is parsed (measured with
//! `scripts/bench-cli-cache`, BENCHMARKS.md: "Agent CLIs at full size").
//!
//! Within a session each of Claude Code, Codex CLI and Gemini CLI resends its earlier turns as
//! they were and appends the new ones, so the embedded model's slot reads the second turn's
//! prompt from its cache as far as the first turn's. What varies from one request to the next is
//! Claude Code's billing header (`x-anthropic-billing-header: cc_version=…; cch=…`, the first
//! line of its system prompt), which `shapes::anthropic` leaves out of the prompt. Claude Code's
//! title call sends `tools: []`, which Anthropic takes as no tools: it is taken so here (the
//! tools contract refuses an empty list), so that call is answered rather than refused.

use super::Dialect;
use serde_json::{Map, Value};

/// Sets `body` straight for `dialect` (see the module's text).
pub fn steady(dialect: Dialect, body: &mut Map<String, Value>) {
    if dialect == Dialect::Messages && body.get("tools").is_some_and(is_empty_list) {
        body.remove("tools");
    }
}

fn is_empty_list(v: &Value) -> bool {
    v.as_array().is_some_and(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_list_of_anthropic_tools_is_no_tools() {
        let mut body = json!({"model": "m", "tools": [], "messages": []});
        let map = body.as_object_mut().unwrap();
        steady(Dialect::Messages, map);
        assert!(!map.contains_key("tools"));
        let mut chat = json!({"tools": []});
        let map = chat.as_object_mut().unwrap();
        steady(Dialect::Chat, map);
        assert!(map.contains_key("tools"));
    }
}
