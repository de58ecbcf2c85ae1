//! `responses_create`: the OpenAI Responses shape.
//!
//! `input` is a string (one user message) or a non-empty list of items: messages `{role:
//! user|assistant|system|developer, content: string | parts}` (parts `input_text`/`text`/
//! `output_text`, `input_image` with a data URL, `input_audio`), `function_call` items (the
//! model's earlier tool calls), `function_call_output` items (their results) and `compaction` items (a summary of
//! an earlier conversation that `POST /v1/responses/compact` made here, read as a user turn) and
//! `reasoning` items (their `reasoning_text` content is the assistant's reasoning; the answer's
//! own reasoning is a `reasoning` output item before its message).
//! `instructions` lead the system prompt; system and developer items follow it, joined with a
//! blank line. The result is a Responses object.

use super::common::{Common, Env, Format, Hooks, Msg, Parts, Spelling, flatten_text};
use super::{Placement, Shape};
use crate::args::{self, Obj, as_object, non_empty_array};
use crate::call::{Block, Call, Role};
use crate::contract::cursor::Entry;
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::wire::media;
use serde_json::{Map, Value, json};

/// The `responses_create` tool.
pub struct ResponsesCreate;

const SPELLING: Spelling = Spelling {
    tool: "responses_create",
    list_key: "input",
    modes: true,
    settings: None,
    stop: None,
    max_tokens: "max_tokens",
    max_tokens_alias: Some("max_output_tokens"),
    format: Format::TextFormat,
    metadata: &["top_p", "user", "metadata"],
    verifies_cursors: true,
    hooks: Hooks::COMMON,
};

impl Shape for ResponsesCreate {
    fn name(&self) -> &'static str {
        SPELLING.tool
    }

    fn definition(&self) -> &'static str {
        include_str!("tools/responses_create.json")
    }

    fn parse(&self, o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
        parse(o, env)
    }

    fn placement(&self) -> Placement {
        Placement::Whole
    }

    fn names_asked_model(&self) -> bool {
        true
    }

    fn reports_host_model(&self) -> bool {
        true
    }
}

const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];
const PART_TYPES: [&str; 6] = [
    "input_text",
    "text",
    "output_text",
    "input_image",
    "input_audio",
    "input_file",
];
const ITEM_TYPES: [&str; 5] = [
    "message",
    "function_call",
    "function_call_output",
    "compaction",
    "reasoning",
];

/// How a compaction item's `encrypted_content` made here begins: what follows is the summary,
/// base64-encoded. (It is not encrypted: the client may read it, as it could read the
/// conversation it summarizes.)
const COMPACTION_PREFIX: &str = "aam-compaction-v1:";

/// What leads a compaction item's summary in the turn the model reads.
const COMPACTION_LEAD: &str = "Summary of the earlier conversation, compacted:";

/// A compaction item's `encrypted_content` for `summary`.
pub fn compaction_content(summary: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(summary);
    format!("{COMPACTION_PREFIX}{encoded}")
}

/// The summary a compaction item made here carries; `None` for content made elsewhere.
pub fn compaction_summary(content: &str) -> Option<String> {
    use base64::Engine as _;
    let encoded = content.strip_prefix(COMPACTION_PREFIX)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

fn content(v: &Value, path: &str, limits: &Limits) -> CallResult<Vec<Block>> {
    match v {
        Value::String(s) => Ok(vec![Block::Text(s.clone())]),
        Value::Array(_) => {
            let parts = non_empty_array(v, path)?;
            let mut blocks = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let p = args::index(path, i);
                let part = Obj::new(as_object(part, &p)?, p.as_str());
                match part.required_enum("type", &PART_TYPES)? {
                    "input_image" => {
                        let url = part.required_str("image_url")?;
                        blocks.push(media::image_url(url, &part.path("image_url"), limits)?);
                        continue;
                    }
                    "input_audio" => {
                        blocks.push(media::input_audio(&part, limits)?);
                        continue;
                    }
                    "input_file" => {
                        blocks.push(media::text_file(&part, limits)?);
                        continue;
                    }
                    _ => {}
                }
                let text = match (part.opt_str("input_text")?, part.opt_str("text")?) {
                    (Some(t), _) | (None, Some(t)) => t,
                    (None, None) => {
                        return Err(CallError::at(
                            &p,
                            "a text part needs its text in \"text\" or \"input_text\"",
                        ));
                    }
                };
                blocks.push(Block::Text(text.to_owned()));
            }
            Ok(flatten_text(blocks))
        }
        other => Err(CallError::expected(
            path,
            "a string or a list of input_text parts",
            other,
        )),
    }
}

fn parse(o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
    let input = o.required("input")?;
    let common = Common::read(o, &SPELLING, env)?;
    let instructions = o.opt_str("instructions")?;
    let mut system: Vec<String> = instructions.iter().map(|s| s.to_string()).collect();
    let mut turns = Vec::new();
    let mut transcript: Vec<Entry> = instructions
        .iter()
        .map(|s| Entry::new("system", *s))
        .collect();
    match input {
        Value::String(s) => {
            turns.push(Msg {
                index: 0,
                role: Role::User,
                blocks: vec![Block::Text(s.clone())],
            });
            transcript.push(Entry::new("user", s.clone()));
        }
        Value::Array(_) => {
            for (index, item) in non_empty_array(input, "input")?.iter().enumerate() {
                let path = args::index("input", index);
                let item = Obj::new(as_object(item, &path)?, path.as_str());
                let (role, entry_role, blocks) = input_item(&item, &mut system, env.limits)?;
                transcript.push(Entry::from_blocks(entry_role, &blocks));
                if let Some(role) = role {
                    turns.push(Msg {
                        index,
                        role,
                        blocks,
                    });
                }
            }
        }
        other => {
            return Err(CallError::expected(
                "input",
                "a string or a non-empty list of input items",
                other,
            ));
        }
    }
    let mut view = Map::new();
    if common.persona.is_some() {
        view.insert("input".into(), input.clone());
        view.insert("instructions".into(), json!(instructions));
    }
    let parts = Parts {
        list_key: "input",
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: turns,
        transcript,
        view,
        common_view: Some(true),
    };
    common.into_call(parts, env.limits)
}

/// One input item: its turn role (`None` for system text, pushed onto `system`), its
/// transcript role and its blocks.
fn input_item(
    item: &Obj<'_>,
    system: &mut Vec<String>,
    limits: &Limits,
) -> CallResult<(Option<Role>, &'static str, Vec<Block>)> {
    match item.opt_enum("type", &ITEM_TYPES)?.unwrap_or("message") {
        "function_call" => {
            let block = Block::ToolUse {
                id: item.required_str("call_id")?.to_owned(),
                name: item.required_str("name")?.to_owned(),
                input: args::json_object_string(item, "arguments")?,
            };
            Ok((Some(Role::Assistant), "assistant", vec![block]))
        }
        "function_call_output" => {
            let output = match item.required("output")? {
                Value::String(s) => vec![Block::Text(s.clone())],
                other => content(other, &item.path("output"), limits)?,
            };
            let block = Block::ToolResult {
                id: item.required_str("call_id")?.to_owned(),
                content: output,
                is_error: false,
            };
            Ok((Some(Role::User), "tool", vec![block]))
        }
        "reasoning" => {
            let blocks = reasoning_item(item)?;
            let role = (!blocks.is_empty()).then_some(Role::Assistant);
            Ok((role, "assistant", blocks))
        }
        "compaction" => Ok((Some(Role::User), "user", vec![compaction_item(item)?])),
        _ => {
            let role = item.required_enum("role", &ROLES)?;
            let blocks = content(item.required("content")?, &item.path("content"), limits)?;
            match (role, blocks.as_slice()) {
                ("user", _) => Ok((Some(Role::User), role, blocks)),
                ("assistant", _) => Ok((Some(Role::Assistant), role, blocks)),
                (_, [Block::Text(t)]) => {
                    system.push(t.clone());
                    Ok((None, role, blocks))
                }
                _ => Err(CallError::at(
                    &item.path("content"),
                    "system and developer items take text only",
                )),
            }
        }
    }
}

/// A compaction item this server made: the conversation's summary, after its lead, as the
/// user's text.
fn compaction_item(item: &Obj<'_>) -> CallResult<Block> {
    let content = item.required_str("encrypted_content")?;
    let Some(summary) = compaction_summary(content) else {
        return Err(CallError::at(
            &item.path("encrypted_content"),
            "a compaction item this server did not make: its content cannot be read here; \
             compact the conversation with this server's POST /v1/responses/compact, or send \
             the conversation itself",
        ));
    };
    Ok(Block::Text(format!("{COMPACTION_LEAD}\n\n{summary}")))
}

/// A reasoning item sent back: its `reasoning_text` content as the assistant's reasoning (a
/// chat template that keeps reasoning in history reads it). One with none (only a summary, or
/// content encrypted elsewhere) adds nothing.
fn reasoning_item(item: &Obj<'_>) -> CallResult<Vec<Block>> {
    let Some(content) = item.opt_array("content")? else {
        return Ok(Vec::new());
    };
    let mut text = String::new();
    for (i, part) in content.iter().enumerate() {
        let path = args::index(&item.path("content"), i);
        let part = Obj::new(as_object(part, &path)?, path.as_str());
        if part.required_enum("type", &["reasoning_text"])? == "reasoning_text" {
            text.push_str(part.required_str("text")?);
        }
    }
    Ok(if text.is_empty() {
        Vec::new()
    } else {
        vec![Block::Reasoning(text)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Turn;

    pub fn call(v: Value) -> CallResult<Call> {
        crate::shapes::common::tests_support::parse(&ResponsesCreate, v)
    }

    #[test]
    fn an_audio_part_becomes_an_audio_block_of_its_format() {
        let c = call(json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "Transcribe."},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}))
        .unwrap();
        let blocks = &c.request.turns[0].blocks;
        assert!(
            matches!(&blocks[1], Block::Audio { data, mime, .. }
                if data == "UklGRg==" && mime == "audio/wav"),
            "{blocks:?}"
        );
    }

    #[test]
    fn instructions_lead_and_developer_items_fold_in() {
        let c = call(json!({
            "instructions": "Lead.",
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "input_text": "Use JSON."}]},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                {"role": "system", "content": "Sys."}
            ]
        }))
        .unwrap();
        assert_eq!(
            c.request.system.as_deref(),
            Some("Lead.\n\nUse JSON.\n\nSys.")
        );
        assert_eq!(c.request.turns, vec![Turn::text(Role::User, "a\nb")]);
        let roles: Vec<&str> = c.transcript.iter().map(|e| e.role.as_str()).collect();
        assert_eq!(roles, ["system", "developer", "user", "system"]);
    }

    #[test]
    fn a_text_file_is_read_into_the_turn_by_data_url_or_by_its_name() {
        // "name,score\n" and "a,1" in base64.
        let c = call(json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "Sum the scores."},
            {"type": "input_file", "filename": "scores.csv",
             "file_data": "data:text/csv;base64,bmFtZSxzY29yZQo="},
            {"type": "input_file", "filename": "more.csv", "file_data": "YSwx"}]}]}))
        .unwrap();
        assert_eq!(
            c.request.turns,
            vec![Turn::text(
                Role::User,
                "Sum the scores.\n<file name=\"scores.csv\">\nname,score\n\n</file>\n\
                 <file name=\"more.csv\">\na,1\n</file>"
            )]
        );
        let e = call(json!({"input": [{"role": "user", "content": [
            {"type": "input_file", "filename": "x.bin", "file_data": "AAEC"}]}]}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("a file of type \"x.bin\" cannot be read"), "{e}");
    }

    #[test]
    fn a_compaction_item_made_here_is_its_summary_as_a_user_turn_and_others_are_refused() {
        let content = compaction_content("The code word is slate.");
        assert!(content.starts_with(COMPACTION_PREFIX));
        assert_eq!(
            compaction_summary(&content).as_deref(),
            Some("The code word is slate.")
        );
        let c = call(json!({"input": [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": content},
            {"role": "user", "content": "Go on."}
        ]}))
        .unwrap();
        assert_eq!(
            c.request.turns,
            vec![
                Turn::text(
                    Role::User,
                    "Summary of the earlier conversation, compacted:\n\nThe code word is slate."
                ),
                Turn::text(Role::User, "Go on.")
            ]
        );
        let e = call(json!({"input": [
            {"type": "compaction", "encrypted_content": "gAAAAABpM0Yj-x="}
        ]}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`input[0].encrypted_content`"), "{e}");
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        let c = call(json!({"input": "hello"})).unwrap();
        assert_eq!(c.request.turns, vec![Turn::text(Role::User, "hello")]);
        assert_eq!(c.request.system, None);
    }

    #[test]
    fn non_text_parts_and_empty_lists_are_rejected() {
        let cases = [
            (
                json!({"input": []}),
                "`input`: must contain at least one item",
            ),
            (
                json!({"input": [{"role": "user", "content": []}]}),
                "`input[0].content`: must contain at least one item",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_video", "file_id": "x"}]}]}),
                "`input[0].content[0].type`: expected one of \"input_text\", \"text\"",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]}),
                "`input[0].content[0].file_id`: a file is read from its file_data",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file", "filename": "a.pdf",
                    "file_data": "data:application/pdf;base64,JVBERg=="}]}]}),
                "`input[0].content[0].file_data`: a file of type application/pdf cannot be read",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file",
                    "file_url": "https://x/a.txt"}]}]}),
                "`input[0].content[0].file_url`: file URLs are not fetched",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]}),
                "`input[0].content[0].image_url`: remote image URLs are not fetched",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
                "`input[0].content[0]`: a text part needs its text",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_audio",
                    "input_audio": {"data": "AAAA", "format": "flac"}}]}]}),
                "`input[0].content[0].input_audio.format`: unsupported audio format \"flac\"",
            ),
            (
                json!({"input": 5}),
                "`input`: expected a string or a non-empty list",
            ),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "`input[0].role`",
            ),
        ];
        for (args, want) in cases {
            let e = call(args).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;
    use crate::call::Mode;
    use tests::call;

    #[test]
    fn text_format_maps_onto_output_schema() {
        let args = json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}});
        let c = call(args).unwrap();
        let Mode::Structured(s) = &c.mode else {
            panic!()
        };
        assert!(s.check(&json!({"a": "no"})).is_err());
        let args = json!({"input": "x", "output_schema": {"type": "object"},
            "text": {"format": {"type": "json_object"}}});
        let e = call(args).unwrap_err().to_string();
        assert!(e.contains("`output_schema` and `text.format`"), "{e}");
        let args = json!({"input": "x", "text": {"format": {"type": "json_schema"}}});
        let e = call(args).unwrap_err().to_string();
        assert!(e.contains("`text.format.schema`: is required"), "{e}");
    }
}
