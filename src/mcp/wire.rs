//! MCP sampling content and the neutral blocks, both ways: the sampling backend sends turns as
//! sampling messages and reads the host's result; the reference host reads those messages and
//! answers with a result. Tool content travels as tool blocks when the host declared
//! `sampling.tools`, else as text.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.

use crate::call::{Block, Completion, Finish, Role, Turn, text_chars};
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::pyjson::{self, Style};
use crate::wire::media;
use rmcp::model::{CreateMessageResult, SamplingMessage, SamplingMessageContentBlock};

/// Reads the host's `stopReason` (an open string; missing means the turn ended).
pub fn finish(reason: Option<&str>) -> Finish {
    match reason {
        Some(CreateMessageResult::STOP_REASON_END_MAX_TOKEN) => Finish::MaxTokens,
        Some(CreateMessageResult::STOP_REASON_END_SEQUENCE) => Finish::StopSequence(None),
        Some(CreateMessageResult::STOP_REASON_TOOL_USE) => Finish::ToolUse,
        _ => Finish::EndTurn,
    }
}

/// The `stopReason` of a neutral finish.
pub fn stop_reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::EndTurn => CreateMessageResult::STOP_REASON_END_TURN,
        Finish::MaxTokens => CreateMessageResult::STOP_REASON_END_MAX_TOKEN,
        Finish::StopSequence(_) => CreateMessageResult::STOP_REASON_END_SEQUENCE,
        Finish::ToolUse => CreateMessageResult::STOP_REASON_TOOL_USE,
    }
}

/// Tool content as text, for hosts that cannot take tool blocks in sampling.
fn tool_block_as_text(block: &Block) -> String {
    match block {
        Block::ToolUse { id, name, input } => format!(
            "[called tool {name} (call id {id}) with arguments {}]",
            pyjson::dumps_object(input, Style::SORTED)
        ),
        Block::ToolResult {
            id,
            content,
            is_error,
        } => {
            let texts: Vec<String> = content
                .iter()
                .map(|b| match b {
                    Block::Text(t) => t.clone(),
                    other => format!("[{} content]", other.kind()),
                })
                .collect();
            let label = if *is_error {
                "error from tool call"
            } else {
                "result of tool call"
            };
            format!("[{label} {id}]: {}", texts.join("\n"))
        }
        other => format!("[{} content]", other.kind()),
    }
}

/// A block as MCP content (tool content, which MCP content cannot hold, as text).
pub fn into_content(block: Block) -> rmcp::model::ContentBlock {
    match block {
        Block::Text(t) => rmcp::model::ContentBlock::text(t),
        Block::Image { data, mime, .. } => rmcp::model::ContentBlock::image(data, mime),
        Block::Audio { data, mime, .. } => rmcp::model::ContentBlock::audio(data, mime),
        other => rmcp::model::ContentBlock::text(tool_block_as_text(&other)),
    }
}

/// A turn as a sampling message. Text-only turns carry one text block (hosts that keep only
/// the first block lose nothing); without `sampling.tools`, tool content travels as text.
pub fn message(turn: &Turn, tools_ok: bool) -> SamplingMessage {
    let role = match turn.role {
        Role::User => rmcp::model::Role::User,
        Role::Assistant => rmcp::model::Role::Assistant,
    };
    let mut blocks: Vec<SamplingMessageContentBlock> = Vec::with_capacity(turn.blocks.len());
    for b in &turn.blocks {
        let block = match b {
            Block::Text(t) => SamplingMessageContentBlock::text(t.clone()),
            Block::Image { data, mime, .. } => SamplingMessageContentBlock::Image(
                rmcp::model::ImageContent::new(data.clone(), mime.clone()),
            ),
            Block::Audio { data, mime, .. } => SamplingMessageContentBlock::Audio(
                rmcp::model::AudioContent::new(data.clone(), mime.clone()),
            ),
            Block::ToolUse { id, name, input } if tools_ok => SamplingMessageContentBlock::ToolUse(
                rmcp::model::ToolUseContent::new(id.clone(), name.clone(), input.clone()),
            ),
            Block::ToolResult {
                id,
                content,
                is_error,
            } if tools_ok => {
                let mut result = rmcp::model::ToolResultContent::new(
                    id.clone(),
                    content.iter().cloned().map(into_content).collect(),
                );
                if *is_error {
                    result.is_error = Some(true);
                }
                SamplingMessageContentBlock::ToolResult(result)
            }
            other => SamplingMessageContentBlock::text(tool_block_as_text(other)),
        };
        blocks.push(block);
    }
    // Without tools, consecutive texts (tool content rendered as text) become one block.
    if !tools_ok && blocks.len() > 1 && blocks.iter().all(|b| b.as_text().is_some()) {
        let joined: Vec<String> = blocks
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect();
        blocks = vec![SamplingMessageContentBlock::text(joined.join("\n\n"))];
    }
    match <[SamplingMessageContentBlock; 1]>::try_from(blocks) {
        Ok([single]) => SamplingMessage::new(role, single),
        Err(blocks) => SamplingMessage::new_multiple(role, blocks),
    }
}

/// One sampling message as a neutral turn.
pub fn turn(i: usize, message: &SamplingMessage, limits: &Limits) -> CallResult<Turn> {
    let role = match message.role {
        rmcp::model::Role::User => Role::User,
        rmcp::model::Role::Assistant => Role::Assistant,
    };
    let mut blocks = Vec::new();
    for (j, block) in message.content.clone().into_vec().into_iter().enumerate() {
        let path = format!("messages[{i}].content[{j}]");
        let media =
            |kind, data: &str, mime: &str| media::block(kind, data, mime, &path, &path, limits);
        blocks.push(match block {
            SamplingMessageContentBlock::Text(t) => Block::Text(t.text),
            SamplingMessageContentBlock::Image(m) => {
                media(media::Kind::Image, &m.data, &m.mime_type)?
            }
            SamplingMessageContentBlock::Audio(m) => {
                media(media::Kind::Audio, &m.data, &m.mime_type)?
            }
            SamplingMessageContentBlock::ToolUse(u) => Block::ToolUse {
                id: u.id,
                name: u.name,
                input: u.input,
            },
            SamplingMessageContentBlock::ToolResult(r) => Block::ToolResult {
                id: r.tool_use_id,
                content: r
                    .content
                    .iter()
                    .map(|c| match c.as_text() {
                        Some(t) => Block::Text(t.text.clone()),
                        None => Block::Text("[non-text content]".into()),
                    })
                    .collect(),
                is_error: r.is_error.unwrap_or(false),
            },
            _ => {
                return Err(CallError::at(
                    &path,
                    "content of a type this host does not know",
                ));
            }
        });
    }
    Ok(Turn { role, blocks })
}

/// A completion as the sampling result.
pub fn result(completion: Completion) -> CreateMessageResult {
    let blocks: Vec<SamplingMessageContentBlock> = completion
        .blocks
        .into_iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(SamplingMessageContentBlock::text(t)),
            Block::ToolUse { id, name, input } => Some(SamplingMessageContentBlock::ToolUse(
                rmcp::model::ToolUseContent::new(id, name, input),
            )),
            Block::Image { data, mime, .. } => Some(SamplingMessageContentBlock::Image(
                rmcp::model::ImageContent::new(data, mime),
            )),
            Block::Audio { data, mime, .. } => Some(SamplingMessageContentBlock::Audio(
                rmcp::model::AudioContent::new(data, mime),
            )),
            Block::ToolResult { .. } | Block::Reasoning(_) => None,
        })
        .collect();
    let message = match <[SamplingMessageContentBlock; 1]>::try_from(blocks) {
        Ok([one]) => SamplingMessage::new(rmcp::model::Role::Assistant, one),
        Err(many) => SamplingMessage::new_multiple(rmcp::model::Role::Assistant, many),
    };
    CreateMessageResult::new(message, completion.model)
        .with_stop_reason(stop_reason(&completion.finish))
}

/// The host's answer in neutral form; content this server cannot return is an error naming it.
/// Checked like the caller's media: accepted type, valid base64, within the media limit.
pub fn to_completion(result: CreateMessageResult, limits: &Limits) -> CallResult<Completion> {
    if result.message.role != rmcp::model::Role::Assistant {
        return Err(CallError::Host(
            "the host answered with a message whose role is not \"assistant\"".into(),
        ));
    }
    let mut blocks = Vec::new();
    for (i, block) in result.message.content.iter().enumerate() {
        let host_media = |kind, data: &str, mime: &str| {
            let path = format!("content[{i}]");
            media::block(kind, data, mime, &path, &path, limits)
                .map_err(|e| CallError::Host(format!("the host answered with unusable media: {e}")))
        };
        blocks.push(match block {
            SamplingMessageContentBlock::Text(t) => Block::Text(t.text.clone()),
            SamplingMessageContentBlock::Image(m) => {
                host_media(media::Kind::Image, &m.data, &m.mime_type)?
            }
            SamplingMessageContentBlock::Audio(m) => {
                host_media(media::Kind::Audio, &m.data, &m.mime_type)?
            }
            SamplingMessageContentBlock::ToolUse(u) => Block::ToolUse {
                id: u.id.clone(),
                name: u.name.clone(),
                input: u.input.clone(),
            },
            _ => {
                return Err(CallError::Host(
                    "the host answered with tool_result (or unknown) content, which only a \
                     caller may send"
                        .into(),
                ));
            }
        });
    }
    if blocks.is_empty() {
        return Err(CallError::Host("the host answered with no content".into()));
    }
    let chars = text_chars(&blocks);
    if chars > limits.max_message_chars {
        return Err(CallError::Host(format!(
            "the host answered with {chars} characters of text, over the limit of {} \
             (AGENT_AS_MODEL_MAX_MESSAGE_CHARS)",
            limits.max_message_chars
        )));
    }
    Ok(Completion {
        blocks,
        model: result.model,
        finish: finish(result.stop_reason.as_deref()),
        usage: None,
        warnings: Vec::new(),
        // MCP sampling's result has no log-probabilities.
        logprobs: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_both_ways() {
        assert_eq!(finish(None), Finish::EndTurn);
        assert_eq!(finish(Some("maxTokens")), Finish::MaxTokens);
        assert_eq!(finish(Some("toolUse")), Finish::ToolUse);
        assert_eq!(finish(Some("stopSequence")), Finish::StopSequence(None));
        assert_eq!(finish(Some("somethingNew")), Finish::EndTurn);
        for f in [Finish::EndTurn, Finish::MaxTokens, Finish::ToolUse] {
            assert_eq!(finish(Some(stop_reason(&f))), f);
        }
    }

    #[test]
    fn a_turn_goes_out_and_comes_back_the_same() {
        let mut input = serde_json::Map::new();
        input.insert("q".into(), serde_json::json!(1));
        let turn = Turn {
            role: Role::Assistant,
            blocks: vec![
                Block::Text("calling".into()),
                Block::ToolUse {
                    id: "t1".into(),
                    name: "f".into(),
                    input,
                },
            ],
        };
        let back = self::turn(0, &message(&turn, true), &Limits::default()).unwrap();
        assert_eq!(back, turn);
        let flat = message(&turn, false);
        assert_eq!(
            flat.content.clone().into_vec().len(),
            1,
            "without sampling.tools, text and tool content are one text block"
        );
    }
}
