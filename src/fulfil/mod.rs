//! Fulfilment: getting a completion from the host, on either protocol era.
//!
//! This is the one place that looks at protocol versions and client capabilities. A call runs
//! as a loop of attempts (more than one only when structured output needs repair): build the
//! sampling request, obtain the host's answer, interpret it. On the legacy era the answer is
//! obtained by sending `sampling/createMessage` and waiting (bounded); on 2026-07-28 the loop
//! either finds the answer in the retry's `inputResponses` or stops and returns an
//! `InputRequiredResult` carrying the request and the sealed progress.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.

pub mod legacy;
pub mod mrtr;

use crate::completion::{Block, Completion, Finish, Role, Turn};
use crate::contract::output::{self, STRUCTURED_TOOL, Strategy, Verdict};
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::shapes::{Call, Mode};
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ErrorCode,
    InputRequiredResult, ModelHint, ModelPreferences, ProtocolVersion, SamplingMessage,
    SamplingMessageContentBlock, Tool, ToolChoice as McpToolChoice,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// What the server knows about the client on this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// 2026-07-28 or later: no server-to-client requests, MRTR instead.
    pub modern: bool,
    pub protocol_version: Option<String>,
    pub sampling: bool,
    pub sampling_tools: bool,
    /// The client's name and version, when it sent them.
    pub client: Option<(String, String)>,
}

impl Host {
    /// What the server knows about the client on this request and what it will emulate: the
    /// `host` report of `list_models`.
    pub fn report(&self) -> Value {
        // The same decisions the calls make (`Strategy`), reported ahead of time.
        let structured = Strategy::for_structured(self.sampling_tools).structured_via();
        let tools = Strategy::for_tools(self.sampling_tools).tools_via();
        let emulated: Vec<&str> = if self.sampling && !self.sampling_tools {
            vec!["structured_output_by_prompt", "tool_calls_by_prompt"]
        } else {
            Vec::new()
        };
        serde_json::json!({
            "protocol_version": self.protocol_version,
            "era": if self.modern { "2026-07-28 (input required rounds)" } else { "legacy (sampling requests)" },
            "sampling": self.sampling,
            "sampling_tools": self.sampling_tools,
            "client": self.client.as_ref().map(|(name, version)| serde_json::json!({"name": name, "version": version})),
            "completions": if self.sampling { "available" } else { "unavailable: the client did not declare the sampling capability" },
            "structured_output": structured.filter(|_| self.sampling),
            "tool_calls": tools.filter(|_| self.sampling),
            "emulated": emulated,
        })
    }

    pub fn of(ctx: &RequestContext<RoleServer>) -> Self {
        let version = ctx.protocol_version();
        let caps = ctx.client_capabilities().unwrap_or_default();
        let sampling = caps.sampling.as_ref();
        Host {
            modern: version
                .as_ref()
                .is_some_and(|v| *v >= ProtocolVersion::V_2026_07_28),
            protocol_version: version.map(|v| v.to_string()),
            sampling: sampling.is_some(),
            sampling_tools: sampling.is_some_and(|s| s.tools.is_some()),
            client: ctx
                .client_info()
                .map(|i| (i.name.clone(), i.version.clone())),
        }
    }

    /// `-32021` when the client cannot sample: nothing this server does can work then.
    pub fn require_sampling(&self) -> CallResult<()> {
        if self.sampling {
            return Ok(());
        }
        let mut required = ClientCapabilities::default();
        required.sampling = Some(Default::default());
        Err(CallError::Protocol(ErrorData::new(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability: sampling. agent-as-model answers every call \
             with the host's own model through MCP sampling, and this client did not declare \
             the sampling capability. Use a host that samples (VS Code with GitHub Copilot, \
             Goose, fast-agent, GitHub Copilot CLI) and allow this server to use its model (in \
             VS Code: MCP: List Servers > agent-as-model > Configure Model Access). Claude \
             Code, Cursor and Claude Desktop do not support sampling.",
            Some(serde_json::json!({"requiredCapabilities": required})),
        )))
    }
}

/// Settings that apply to every call.
#[derive(Clone)]
pub struct Settings {
    /// Longest wait for the host's answer on the legacy era.
    pub sampling_timeout: Duration,
    pub sealer: mrtr::Sealer,
    pub limits: Limits,
}

/// A rejected structured answer and why, fed back to the host on the next attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repair {
    pub answer: String,
    pub problem: String,
}

/// The progress of a call across attempts; on 2026-07-28 it travels in the sealed state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default)]
    pub repairs: Vec<Repair>,
}

/// Longest rejected answer echoed back to the host in a repair request.
const MAX_REPAIR_ECHO: usize = 8 * 1024;

/// The retry fields of a `tools/call`.
pub struct Retry<'a> {
    pub arguments: &'a Map<String, Value>,
    pub request_state: Option<&'a str>,
    pub input_responses: Option<&'a rmcp::model::InputResponses>,
}

/// A completed call before rendering.
#[derive(Debug, Clone)]
pub struct Fulfilled {
    pub answer: crate::shapes::Answer,
    pub strategy: Strategy,
    pub attempts: usize,
    pub host_model: String,
    pub finish: Finish,
    /// Images and audio in the host's answer, returned beside the text.
    pub media: Vec<Block>,
}

pub enum Outcome {
    Done(Fulfilled),
    Ask(InputRequiredResult),
}

/// Runs the attempts of one call on whichever era the request belongs to.
pub async fn run(
    call: &Call,
    host: &Host,
    retry: Retry<'_>,
    ctx: &RequestContext<RoleServer>,
    settings: &Settings,
) -> CallResult<Outcome> {
    host.require_sampling()?;
    let strategy = Strategy::for_call(call, host.sampling_tools);
    let mut response = None;
    let mut progress = Progress::default();
    let binding = host
        .modern
        .then(|| mrtr::Sealer::binding(call.kind, retry.arguments));
    if let Some(binding) = &binding {
        let has_responses = retry.input_responses.is_some();
        if let Some(p) = settings
            .sealer
            .open(binding, retry.request_state, has_responses)?
        {
            progress = p;
            response = retry
                .input_responses
                .and_then(|r| r.get(mrtr::SAMPLE_KEY))
                .cloned();
        }
    }
    loop {
        // The sampling request is built only when it is sent: on a retry that carries the
        // answer, the request it answers is not needed again.
        let params = || sampling_params(call, strategy, &progress.repairs, host.sampling_tools);
        let result = match (&binding, response.take()) {
            (Some(_), Some(value)) => parse_response(value)?,
            // First round, or a retry without the "sample" answer: ask (again).
            (Some(binding), None) => {
                return settings
                    .sealer
                    .ask(binding, &progress, params())
                    .map(Outcome::Ask);
            }
            (None, _) => legacy::sample(ctx, params(), settings.sampling_timeout).await?,
        };
        let mut completion = to_completion(result)?;
        if matches!(strategy, Strategy::Text | Strategy::ToolsNotForwarded) {
            // Most hosts ignore stop sequences: cut the text at the first one ourselves.
            completion.enforce_stop(&call.request.stop);
        }
        match output::interpret(call, strategy, &completion)? {
            Verdict::Accepted(answer) => {
                return Ok(Outcome::Done(Fulfilled {
                    answer,
                    strategy,
                    attempts: progress.repairs.len() + 1,
                    media: completion.media(),
                    host_model: completion.model,
                    finish: completion.finish,
                }));
            }
            Verdict::Violation { answer, problem } => {
                let attempts = progress.repairs.len() + 1;
                // Prompted tool calls always get one repair ("required" with no call, or a
                // malformed call); structured output gets max_retries.
                let allowed = if strategy == Strategy::ToolsByPrompt {
                    call.max_retries.max(1)
                } else {
                    call.max_retries
                };
                if attempts > usize::from(allowed) {
                    return Err(CallError::Rejected(format!(
                        "{problem}; gave up after {attempts} attempt(s) (max_retries {allowed})"
                    )));
                }
                let mut echo: String = answer.chars().take(MAX_REPAIR_ECHO).collect();
                if echo.len() < answer.len() {
                    echo.push_str(" [truncated]");
                }
                progress.repairs.push(Repair {
                    answer: echo,
                    problem,
                });
            }
        }
    }
}

/// The instruction that asks for JSON when the host cannot take tools.
fn json_instruction(schema: &Value) -> String {
    format!(
        "Reply with only a JSON object that satisfies this JSON Schema (Draft 2020-12), with no \
         prose before or after it:\n{}",
        crate::pyjson::dumps(schema, crate::pyjson::Style::SORTED)
    )
}

fn repair_instruction(problem: &str, strategy: Strategy) -> String {
    let how = match strategy {
        Strategy::StructuredByTool => {
            format!("Call the {STRUCTURED_TOOL} tool again with input that satisfies its schema.")
        }
        Strategy::ToolsByPrompt => "Reply again with only the fenced JSON block of tool calls, \
                                    with arguments that satisfy each tool's input schema."
            .to_owned(),
        _ => "Reply again with only the corrected JSON object.".to_owned(),
    };
    format!("Your previous answer was rejected: {problem}. {how}")
}

/// Tool content as text, for hosts that cannot take tool blocks in sampling.
fn tool_block_as_text(block: &Block) -> String {
    match block {
        Block::ToolUse { id, name, input } => format!(
            "[called tool {name} (call id {id}) with arguments {}]",
            crate::pyjson::dumps(&Value::Object(input.clone()), crate::pyjson::Style::SORTED)
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

fn content_block(block: &Block) -> rmcp::model::ContentBlock {
    match block {
        Block::Text(t) => rmcp::model::ContentBlock::text(t.clone()),
        Block::Image { data, mime } => rmcp::model::ContentBlock::image(data.clone(), mime.clone()),
        Block::Audio { data, mime } => rmcp::model::ContentBlock::audio(data.clone(), mime.clone()),
        other => rmcp::model::ContentBlock::text(tool_block_as_text(other)),
    }
}

/// A turn as a sampling message. Text-only turns carry one text block (hosts that keep only
/// the first block lose nothing); without `sampling.tools`, tool content travels as text.
fn message(turn: &Turn, tools_ok: bool) -> SamplingMessage {
    let role = match turn.role {
        Role::User => rmcp::model::Role::User,
        Role::Assistant => rmcp::model::Role::Assistant,
    };
    let mut blocks: Vec<SamplingMessageContentBlock> = Vec::with_capacity(turn.blocks.len());
    for b in &turn.blocks {
        let block = match b {
            Block::Text(t) => SamplingMessageContentBlock::text(t.clone()),
            Block::Image { data, mime } => SamplingMessageContentBlock::Image(
                rmcp::model::ImageContent::new(data.clone(), mime.clone()),
            ),
            Block::Audio { data, mime } => SamplingMessageContentBlock::Audio(
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
                    content.iter().map(content_block).collect(),
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

/// The `sampling/createMessage` parameters for one attempt.
pub fn sampling_params(
    call: &Call,
    strategy: Strategy,
    repairs: &[Repair],
    tools_ok: bool,
) -> CreateMessageRequestParams {
    let req = &call.request;
    let mut messages: Vec<SamplingMessage> =
        req.turns.iter().map(|t| message(t, tools_ok)).collect();
    for r in repairs {
        messages.push(SamplingMessage::assistant_text(r.answer.clone()));
        messages.push(SamplingMessage::user_text(repair_instruction(
            &r.problem, strategy,
        )));
    }
    let mut system = req.system.clone();
    let instruction = match (strategy, &call.mode) {
        (Strategy::StructuredByPrompt, Mode::Structured(schema)) => {
            Some(json_instruction(schema.raw()))
        }
        (Strategy::ToolsByPrompt, Mode::Tools { defs, choice }) => {
            Some(output::tools_instruction(defs, *choice))
        }
        _ => None,
    };
    if let Some(instruction) = instruction {
        system = Some(match system {
            Some(s) => format!("{s}\n\n{instruction}"),
            None => instruction,
        });
    }
    let mut params = CreateMessageRequestParams::new(messages, req.max_tokens)
        .with_model_preferences(
            ModelPreferences::new().with_hints(vec![ModelHint::new(req.model.clone())]),
        );
    if let Some(s) = system {
        params = params.with_system_prompt(s);
    }
    if let Some(t) = req.temperature {
        params = params.with_temperature(t as f32);
    }
    if !req.stop.is_empty() {
        params = params.with_stop_sequences(req.stop.clone());
    }
    if !call.metadata.is_empty() {
        params = params.with_metadata(Value::Object(call.metadata.clone()));
    }
    match (strategy, &call.mode) {
        (Strategy::StructuredByTool, Mode::Structured(schema)) => {
            let input_schema = schema.raw().as_object().cloned().unwrap_or_default();
            params = params
                .with_tools(vec![Tool::new(
                    STRUCTURED_TOOL,
                    "Return the structured completion as this tool's input; it must satisfy the \
                     input schema.",
                    Arc::new(input_schema),
                )])
                .with_tool_choice(McpToolChoice::required());
        }
        (Strategy::ToolsNative, Mode::Tools { defs, choice }) => {
            let tools = defs
                .iter()
                .map(|d| {
                    let mut t = Tool::new(
                        d.name.clone(),
                        d.description.clone().unwrap_or_default(),
                        Arc::new(d.input_schema.clone()),
                    );
                    if d.description.is_none() {
                        t.description = None;
                    }
                    t
                })
                .collect();
            let choice = match choice {
                crate::completion::ToolChoice::Auto => McpToolChoice::auto(),
                crate::completion::ToolChoice::Required => McpToolChoice::required(),
                crate::completion::ToolChoice::None => McpToolChoice::none(),
            };
            params = params.with_tools(tools).with_tool_choice(choice);
        }
        _ => {}
    }
    params
}

/// Reads the `"sample"` input response of a 2026-07-28 retry.
fn parse_response(value: Value) -> CallResult<CreateMessageResult> {
    if value.is_null() {
        return Err(CallError::Host(
            "the client answered the sampling request with null instead of a \
             CreateMessageResult"
                .into(),
        ));
    }
    serde_json::from_value(value).map_err(|e| {
        CallError::Host(format!(
            "inputResponses.sample is not a CreateMessageResult ({e}); expected {{\"role\": \
             \"assistant\", \"content\": ..., \"model\": ...}}"
        ))
    })
}

/// The host's answer in neutral form; content this server cannot return is an error naming it.
pub fn to_completion(result: CreateMessageResult) -> CallResult<Completion> {
    let mut blocks = Vec::new();
    for block in result.message.content.iter() {
        blocks.push(match block {
            SamplingMessageContentBlock::Text(t) => Block::Text(t.text.clone()),
            SamplingMessageContentBlock::Image(i) => Block::Image {
                data: i.data.clone(),
                mime: i.mime_type.clone(),
            },
            SamplingMessageContentBlock::Audio(a) => Block::Audio {
                data: a.data.clone(),
                mime: a.mime_type.clone(),
            },
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
    Ok(Completion {
        blocks,
        model: result.model,
        finish: Finish::from_stop_reason(result.stop_reason.as_deref()),
    })
}
