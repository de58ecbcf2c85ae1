//! `messages_create`: the Anthropic messages shape.
//!
//! `messages: [{role: user|assistant, content: string | blocks}]` and `system: string | text
//! blocks`; a list of text blocks becomes one text joined with `"\n"`. Blocks are `text`,
//! `image` (base64 source), `tool_use` (assistant) and `tool_result` (user). An assistant's
//! `thinking` blocks, which Anthropic asks clients to send back, are read back into the turn as
//! its reasoning when their signature is this server's ([`signature`]); others (another
//! server's, Claude's own, `redacted_thinking`) are accepted and left out, as the debug log
//! says. A user message whose `tool_result` blocks are followed by text (Anthropic's order) becomes the
//! tool results and then a user turn.

use super::common::{
    Common, Env, Format, Hooks, Msg, Parts, Spelling, flatten_text, message_objects,
};
use super::{Placement, Shape};
use crate::args::{self, Obj, as_object, one_of};
use crate::call::{Block, Call, Role};
use crate::contract::cursor::Entry;
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::wire::media;
use serde_json::{Map, Value, json};

/// The `messages_create` tool.
pub struct MessagesCreate;

const SPELLING: Spelling = Spelling {
    tool: "messages_create",
    list_key: "messages",
    modes: true,
    settings: None,
    stop: Some("stop_sequences"),
    max_tokens: "max_tokens",
    max_tokens_alias: None,
    format: Format::OutputConfig,
    metadata: &["top_p", "top_k", "metadata"],
    verifies_cursors: true,
    hooks: Hooks::COMMON,
};

impl Shape for MessagesCreate {
    fn name(&self) -> &'static str {
        SPELLING.tool
    }

    fn definition(&self) -> &'static str {
        include_str!("tools/messages_create.json")
    }

    fn parse(&self, o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
        parse(o, env)
    }

    fn placement(&self) -> Placement {
        Placement::Under("message")
    }
}

const ROLES: [&str; 2] = ["user", "assistant"];
const BLOCK_TYPES: [&str; 6] = [
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
];

fn image(block: &Obj<'_>, limits: &Limits) -> CallResult<Block> {
    let spath = block.path("source");
    let source = Obj::new(
        as_object(block.required("source")?, &spath)?,
        spath.as_str(),
    );
    match source.required_str("type")? {
        "base64" => media::block(
            media::Kind::Image,
            source.required_str("data")?,
            source.required_str("media_type")?,
            &source.path("data"),
            &source.path("media_type"),
            limits,
        ),
        "url" => Err(CallError::at(
            &source.path("type"),
            "remote image URLs are not fetched (this server never fetches anything): send the \
             image as {\"type\": \"base64\", \"media_type\", \"data\"}",
        )),
        other => Err(CallError::at(
            &source.path("type"),
            format!("expected \"base64\", got {other:?}"),
        )),
    }
}

/// Content: a string or a list of blocks; `nested` is true inside a `tool_result`, which holds
/// text and images only.
fn content(v: &Value, path: &str, limits: &Limits, nested: bool) -> CallResult<Vec<Block>> {
    let list = match v {
        Value::String(s) => return Ok(vec![Block::Text(s.clone())]),
        Value::Array(list) => list,
        other => {
            return Err(CallError::expected(
                path,
                "a string or a list of content blocks",
                other,
            ));
        }
    };
    let allowed: &[&str] = if nested {
        &["text", "image"]
    } else {
        &BLOCK_TYPES
    };
    let mut blocks = Vec::with_capacity(list.len());
    for (i, b) in list.iter().enumerate() {
        let p = args::index(path, i);
        let block = Obj::new(as_object(b, &p)?, p.as_str());
        let ty = block.required_str("type")?;
        blocks.push(match ty {
            "text" => Block::Text(block.required_str("text")?.to_owned()),
            "image" => image(&block, limits)?,
            "tool_use" if !nested => Block::ToolUse {
                id: block.required_str("id")?.to_owned(),
                name: block.required_str("name")?.to_owned(),
                input: args::as_object(block.required("input")?, &block.path("input"))?.clone(),
            },
            "tool_result" if !nested => tool_result(&block, limits)?,
            "thinking" if !nested && signed(&block) => {
                Block::Reasoning(block.required_str("thinking")?.to_owned())
            }
            "thinking" | "redacted_thinking" if !nested => {
                tracing::debug!(
                    block = %p,
                    "a {ty} block in the history is left out: it is not signed by this server"
                );
                continue;
            }
            other => {
                return Err(CallError::at(
                    &block.path("type"),
                    format!("expected {}, got {other:?}", one_of(allowed)),
                ));
            }
        });
    }
    Ok(flatten_text(blocks))
}

/// A `tool_result` block: the id of the call it answers, its content (text and images) and
/// whether it is an error.
fn tool_result(block: &Obj<'_>, limits: &Limits) -> CallResult<Block> {
    Ok(Block::ToolResult {
        id: block.required_str("tool_use_id")?.to_owned(),
        content: match block.get("content") {
            Some(c) => content(c, &block.path("content"), limits, true)?,
            None => Vec::new(),
        },
        is_error: block
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// A user message's `tool_result` blocks apart from what follows them: Anthropic's order is
/// the results first, then any text. `None` when the message has no results or nothing else.
#[allow(clippy::type_complexity)]
fn tool_results_first(
    blocks: Vec<Block>,
    m: &Obj<'_>,
) -> CallResult<(Option<Vec<Block>>, Vec<Block>)> {
    let is_result = |b: &Block| matches!(b, Block::ToolResult { .. });
    let leading = blocks.iter().take_while(|b| is_result(b)).count();
    let results = blocks.iter().filter(|b| is_result(b)).count();
    if results == 0 || results == blocks.len() {
        return Ok((None, blocks));
    }
    if leading != results {
        return Err(CallError::at(
            &m.path("content"),
            "tool_result blocks come first in a user message, before any other content \
             (Anthropic's order); move them to the front",
        ));
    }
    let mut results = blocks;
    let rest = results.split_off(leading);
    Ok((Some(results), rest))
}

/// The system prompt: a string or text blocks joined with `"\n"`.
/// What Claude Code puts first in its system prompt: billing metadata for Anthropic's API, with
/// a value that can change from one request to the next. It tells a model nothing, and left in it
/// would make every prompt differ from its first line, so no prefix of it could be reused (the
/// embedded model's cache, a provider's prompt cache).
const BILLING_HEADER: &str = "x-anthropic-billing-header:";

fn system_text(v: &Value, limits: &Limits) -> CallResult<String> {
    match content(v, "system", limits, true)?.as_slice() {
        [Block::Text(t)] if t.starts_with(BILLING_HEADER) => {
            Ok(t.split_once('\n').map_or("", |(_, rest)| rest).to_owned())
        }
        [Block::Text(t)] => Ok(t.clone()),
        [] => Ok(String::new()),
        _ => Err(CallError::at(
            "system",
            "expected a string or a list of text blocks",
        )),
    }
}

fn parse(o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
    let limits = env.limits;
    let messages = message_objects(o, "messages")?;
    let common = Common::read(o, &SPELLING, env)?;
    let system = o
        .get("system")
        .map(|s| system_text(s, limits))
        .transpose()?;
    let mut turns = Vec::with_capacity(messages.len());
    let mut transcript = Vec::with_capacity(messages.len() + 1);
    let mut plain = Vec::with_capacity(messages.len());
    if let Some(s) = &system {
        transcript.push(Entry::new("system", s.clone()));
    }
    for (index, (path, map)) in messages.iter().enumerate() {
        let m = Obj::new(map, path.as_str());
        let role = m.required_enum("role", &ROLES)?;
        let raw = m.required("content")?;
        let blocks = content(raw, &m.path("content"), limits, false)?;
        let r = if role == "user" {
            Role::User
        } else {
            Role::Assistant
        };
        transcript.push(Entry::from_blocks(role, &blocks));
        if common.persona.is_some() {
            plain.push(json!({"role": role, "content": raw}));
        }
        let (results, rest) = tool_results_first(blocks, &m)?;
        if let Some(results) = results {
            turns.push(Msg {
                index,
                role: r,
                blocks: results,
            });
        }
        turns.push(Msg {
            index,
            role: r,
            blocks: rest,
        });
    }
    let mut view = Map::new();
    if common.persona.is_some() {
        view.insert("messages".into(), Value::Array(plain));
        view.insert(
            "system".into(),
            o.get("system").cloned().unwrap_or(Value::Null),
        );
    }
    let parts = Parts {
        list_key: "messages",
        system,
        messages: turns,
        transcript,
        view,
        common_view: Some(true),
    };
    common.into_call(parts, limits)
}

/// The key thinking blocks are signed with: `AGENT_AS_MODEL_THINKING_KEY` (the same on every
/// replica behind one address), else one drawn when the server starts.
fn signing_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        use sha2::Digest;
        match std::env::var("AGENT_AS_MODEL_THINKING_KEY") {
            Ok(key) if !key.is_empty() => sha2::Sha256::digest(key.as_bytes()).into(),
            _ => {
                let mut key = [0u8; 32];
                let _ = getrandom::fill(&mut key);
                key
            }
        }
    })
}

/// The signature of a thinking block this server wrote: an HMAC-SHA-256 of its text, so a block
/// sent back unchanged is known as the model's own reasoning, and one edited or from elsewhere
/// is not.
pub fn signature(thinking: &str) -> String {
    use sha2::Digest;
    let key = signing_key();
    let pad = |byte: u8| key.iter().map(move |k| k ^ byte).collect::<Vec<u8>>();
    let inner = sha2::Sha256::new()
        .chain_update(pad(0x36))
        .chain_update([0x36u8; 32])
        .chain_update(thinking.as_bytes())
        .finalize();
    let outer = sha2::Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update([0x5cu8; 32])
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}

/// Whether a thinking block carries this server's signature of its text.
fn signed(block: &Obj<'_>) -> bool {
    match (block.get("thinking"), block.get("signature")) {
        (Some(Value::String(thinking)), Some(Value::String(sig))) => *sig == signature(thinking),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Turn;

    fn call(v: Value) -> CallResult<Call> {
        crate::shapes::common::tests_support::parse(&MessagesCreate, v)
    }

    #[test]
    fn blocks_flatten_with_newlines_and_system_leads_the_transcript() {
        let c = call(json!({
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Always."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "2+2?"}, {"type": "text", "text": "Quick."}]}]
        }))
        .unwrap();
        assert_eq!(c.request.system.as_deref(), Some("Be brief.\nAlways."));
        assert_eq!(
            c.request.turns,
            vec![Turn::text(Role::User, "2+2?\nQuick.")]
        );
        assert_eq!(c.transcript[0], Entry::new("system", "Be brief.\nAlways."));
        assert_eq!(c.transcript[1], Entry::new("user", "2+2?\nQuick."));
    }

    #[test]
    fn claude_codes_billing_header_is_not_part_of_the_system_prompt() {
        let c = call(json!({
            "system": [
                {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=93ab1;"},
                {"type": "text", "text": "You are a Claude agent."}],
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        assert_eq!(c.request.system.as_deref(), Some("You are a Claude agent."));
    }

    #[test]
    fn a_thinking_block_this_server_signed_comes_back_as_reasoning() {
        let ours = signature("I should call the tool.");
        let c = call(json!({"messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": ours},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "21C"}]}
        ]}))
        .unwrap();
        let blocks = &c.request.turns[1].blocks;
        assert_eq!(
            blocks[0],
            Block::Reasoning("I should call the tool.".into())
        );
        assert!(matches!(blocks[1], Block::ToolUse { .. }));
        // Edited, it is not ours any more.
        let c = call(json!({"messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should lie.", "signature": ours},
                {"type": "text", "text": "Sunny."}]},
            {"role": "user", "content": "Thanks"}
        ]}))
        .unwrap();
        assert_eq!(
            c.request.turns[1].blocks,
            vec![Block::Text("Sunny.".into())]
        );
        assert_eq!(signature("a").len(), 64);
        assert_ne!(signature("a"), signature("b"));
    }

    #[test]
    fn thinking_history_is_left_out_and_results_followed_by_text_split() {
        let c = call(json!({"messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "21C"},
                {"type": "text", "text": "Answer in French."}]}
        ]}))
        .unwrap();
        let turns = &c.request.turns;
        assert_eq!(turns.len(), 4, "{turns:?}");
        assert!(matches!(
            turns[1].blocks.as_slice(),
            [Block::ToolUse { id, .. }] if id == "t1"
        ));
        assert!(matches!(
            turns[2].blocks.as_slice(),
            [Block::ToolResult { id, .. }] if id == "t1"
        ));
        assert_eq!(turns[3], Turn::text(Role::User, "Answer in French."));
        let e = call(json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}
        ]}))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`messages[1].content`: tool_result blocks come first"),
            "{e}"
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "`messages[0].role`: expected one of \"user\", \"assistant\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "video"}]}]}),
                "`messages[0].content[0].type`: expected one of \"text\", \"image\", \"tool_use\", \"tool_result\", \"thinking\", \"redacted_thinking\", got \"video\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}]}]}),
                "`messages[0].content[0].source.type`: remote image URLs are not fetched",
            ),
            (
                json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}]}),
                "`messages[0]`: tool call(s) [\"t1\"] are not answered by the next message",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}]}),
                "`messages[0]`: tool result for \"t9\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "`messages[0].content[0].text`: is required",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "system": 5}),
                "`system`: expected a string or a list of content blocks",
            ),
        ];
        for (args, want) in cases {
            let e = call(args).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
    }
}
