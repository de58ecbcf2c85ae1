//! A reference MCP host: a client that declares sampling (with tools) and answers the
//! server's sampling requests from a direct backend (the embedded model or a provider). `try`
//! uses it to show the whole MCP path with no host installed.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and this host answers it.

use crate::backends::direct::{Model, ModelRequest, ModelTool};
use crate::call::{Block, Completion, Finish, Role, ToolChoice, Tuning, Turn};
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::shapes::media;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ContentBlock, CreateMessageRequestParams,
    CreateMessageResult, ErrorData, Implementation, ProtocolVersion, SamplingMessage,
    SamplingMessageContentBlock, ToolChoiceMode,
};
use rmcp::service::{RequestContext, RoleClient};
use std::sync::Arc;

/// The sampling request in neutral form. Content a model cannot be given is an error naming
/// where it is.
pub fn request(params: &CreateMessageRequestParams, limits: &Limits) -> CallResult<ModelRequest> {
    let turns = params
        .messages
        .iter()
        .enumerate()
        .map(|(i, message)| turn(i, message, limits))
        .collect::<CallResult<Vec<Turn>>>()?;
    let metadata = params.metadata.as_ref();
    let given =
        |snake: &str, camel: &str| metadata.and_then(|m| m.get(snake).or_else(|| m.get(camel)));
    Ok(ModelRequest {
        model: params
            .model_preferences
            .as_ref()
            .and_then(|p| p.hints.as_ref())
            .and_then(|h| h.first())
            .and_then(|h| h.name.clone())
            .unwrap_or_default(),
        system: params.system_prompt.clone(),
        turns,
        max_tokens: params.max_tokens,
        temperature: params.temperature.map(f64::from),
        tuning: Tuning {
            top_p: given("top_p", "topP").and_then(|v| v.as_f64()),
            top_k: given("top_k", "topK")
                .and_then(|v| v.as_u64())
                .and_then(|k| u32::try_from(k).ok()),
            seed: given("seed", "seed").and_then(|v| v.as_i64()),
        },
        stop: params.stop_sequences.clone().unwrap_or_default(),
        tools: params
            .tools
            .iter()
            .flatten()
            .map(|t| ModelTool {
                name: t.name.to_string(),
                description: t.description.as_ref().map(|d| d.to_string()),
                schema: (*t.input_schema).clone(),
            })
            .collect(),
        tool_choice: params.tool_choice.as_ref().map(|c| match c.mode {
            Some(ToolChoiceMode::Required) => ToolChoice::Required,
            Some(ToolChoiceMode::None) => ToolChoice::None,
            _ => ToolChoice::Auto,
        }),
        response_schema: None,
    })
}

/// One sampling message as a neutral turn.
fn turn(i: usize, message: &SamplingMessage, limits: &Limits) -> CallResult<Turn> {
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
            Block::ToolResult { .. } => None,
        })
        .collect();
    let message = match <[SamplingMessageContentBlock; 1]>::try_from(blocks) {
        Ok([one]) => SamplingMessage::new(rmcp::model::Role::Assistant, one),
        Err(many) => SamplingMessage::new_multiple(rmcp::model::Role::Assistant, many),
    };
    let stop = match completion.finish {
        Finish::EndTurn => CreateMessageResult::STOP_REASON_END_TURN,
        Finish::MaxTokens => CreateMessageResult::STOP_REASON_END_MAX_TOKEN,
        Finish::StopSequence(_) => CreateMessageResult::STOP_REASON_END_SEQUENCE,
        Finish::ToolUse => CreateMessageResult::STOP_REASON_TOOL_USE,
    };
    CreateMessageResult::new(message, completion.model).with_stop_reason(stop)
}

/// The reference host: samples with `model`.
#[derive(Clone)]
pub struct Host {
    pub model: Arc<dyn Model>,
    pub limits: Arc<Limits>,
    /// Declare `sampling.tools` when the model takes tools (false: as VS Code, which cannot
    /// take tools in sampling, so the server emulates tools and structured output).
    pub sampling_tools: bool,
    /// Told the tokens of every answer as they are made (`try`'s progress line).
    pub live: Option<Arc<crate::fulfil::live::Live>>,
}

impl rmcp::ClientHandler for Host {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::builder().enable_sampling().build();
        if self.sampling_tools && self.model.capabilities().tools {
            caps = ClientCapabilities::builder()
                .enable_sampling()
                .enable_sampling_tools()
                .build();
        }
        ClientConfig::new(
            caps,
            Implementation::new("agent-as-model-try", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let answer = async {
            let request = request(&params, &self.limits)?;
            self.model.complete(request, self.live.clone()).await
        }
        .await;
        answer.map(result).map_err(|e: CallError| {
            ErrorData::internal_error(format!("the {} model failed: {e}", self.model.kind()), None)
        })
    }
}

/// Text of a tool result's content, for printing.
pub fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}
