//! `generate`: a raw prompt sent as one user message, with no system prompt and no tools.

use super::{Call, Common, Msg, Parts, ToolKind};
use crate::args::Obj;
use crate::completion::{Block, Role};
use crate::contract::cursor::Entry;
use crate::error::CallResult;
use crate::limits::Limits;
use serde_json::{Map, Value};

pub fn parse(o: &Obj<'_>, limits: &Limits) -> CallResult<Call> {
    let prompt = o.required_str("prompt")?;
    let common = Common::parse(o, ToolKind::Generate, limits)?;
    let mut view = Map::new();
    view.insert("prompt".into(), Value::String(prompt.to_owned()));
    common.into_call(Parts {
        kind: ToolKind::Generate,
        list_key: "prompt",
        system: None,
        messages: vec![Msg {
            index: 0,
            role: Role::User,
            blocks: vec![Block::Text(prompt.to_owned())],
        }],
        transcript: vec![Entry::new("user", prompt)],
        view,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::Turn;
    use serde_json::json;

    #[test]
    fn prompt_is_one_user_turn_and_tools_are_ignored() {
        let args = json!({"prompt": "Once", "max_tokens": 10, "tools": "ignored"});
        let c = ToolKind::Generate
            .parse(args.as_object().unwrap(), &Limits::default())
            .unwrap();
        assert_eq!(c.request.turns, vec![Turn::text(Role::User, "Once")]);
        assert_eq!(c.request.system, None);
        assert_eq!(c.request.max_tokens, 10);
        let e = ToolKind::Generate
            .parse(
                json!({"prompt": 1}).as_object().unwrap(),
                &Limits::default(),
            )
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("`prompt`: expected a string, got number 1")
        );
    }
}
