//! `generate`: a raw prompt sent as one user message, with no system prompt and no tools.

use super::common::{Common, Env, Format, Hooks, Msg, Parts, Spelling};
use super::{Placement, Shape};
use crate::args::Obj;
use crate::call::{Block, Call, Role};
use crate::contract::cursor::Entry;
use crate::error::CallResult;
use serde_json::{Map, Value};

/// The `generate` tool.
pub struct Generate;

const SPELLING: Spelling = Spelling {
    tool: "generate",
    list_key: "prompt",
    modes: false,
    settings: None,
    stop: Some("stop"),
    max_tokens: "max_tokens",
    max_tokens_alias: None,
    format: Format::None,
    metadata: &["top_p", "seed", "user", "metadata"],
    verifies_cursors: false,
    hooks: Hooks::COMMON,
};

impl Shape for Generate {
    fn name(&self) -> &'static str {
        SPELLING.tool
    }

    fn definition(&self) -> &'static str {
        include_str!("tools/generate.json")
    }

    fn parse(&self, o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
        let prompt = o.required_str("prompt")?;
        let common = Common::read(o, &SPELLING, env)?;
        common.into_call(one_user_turn(prompt), env.limits)
    }

    fn placement(&self) -> Placement {
        Placement::Beside
    }

    fn reports_host_model(&self) -> bool {
        true
    }
}

/// A raw prompt as the call's parts: one user message, no system prompt, the prompt as its view.
pub fn one_user_turn(prompt: &str) -> Parts {
    let mut view = Map::new();
    view.insert("prompt".into(), Value::String(prompt.to_owned()));
    Parts {
        list_key: "prompt",
        system: None,
        messages: vec![Msg {
            index: 0,
            role: Role::User,
            blocks: vec![Block::Text(prompt.to_owned())],
        }],
        transcript: vec![Entry::new("user", prompt)],
        view,
        common_view: Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Turn;
    use crate::shapes::common::tests_support::parse;
    use serde_json::json;

    #[test]
    fn prompt_is_one_user_turn_and_tools_are_ignored() {
        let args = json!({"prompt": "Once", "max_tokens": 10, "tools": "ignored"});
        let c = parse(&Generate, args).unwrap();
        assert_eq!(c.request.turns, vec![Turn::text(Role::User, "Once")]);
        assert_eq!(c.request.system, None);
        assert_eq!(c.request.max_tokens, 10);
        let e = parse(&Generate, json!({"prompt": 1})).unwrap_err();
        assert!(
            e.to_string()
                .contains("`prompt`: expected a string, got number 1")
        );
    }
}
