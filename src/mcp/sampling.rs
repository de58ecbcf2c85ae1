//! The sampling backend: the connected host's own model through MCP sampling, on either
//! protocol era. This is the one place that looks at protocol versions and client
//! capabilities.
//!
//! [`super::driver`] runs the fulfilment machine on it: on the legacy era each attempt is sent
//! as `sampling/createMessage` and awaited (bounded, see [`super::legacy`]); on 2026-07-28 the
//! answer is read from the retry's `inputResponses`, or the driver stops and returns an
//! `InputRequiredResult` carrying the request and the sealed progress (see [`super::mrtr`]).
//! Here: what the host can take, and sampling messages to and from neutral turns.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.

use super::mrtr;
use crate::call::ToolChoice;
use crate::error::{CallError, CallResult};
use crate::fulfil::{Attempt, Capabilities, Strategy};
use crate::mcp::wire;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ErrorCode, ModelHint,
    ModelPreferences, ProtocolVersion, SamplingMessage, Tool, ToolChoice as McpToolChoice,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::Deserialize as _;
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

    /// What the host's sampling can take.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities::sampling(self.sampling_tools)
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
             GitHub Copilot CLI, fast-agent) and allow this server to use its model (in VS \
             Code: MCP: List Servers > agent-as-model > Configure Model Access). Claude Code, \
             Cursor, Claude Desktop, Goose, Codex, Zed and Gemini CLI do not sample: there, start this \
             server with --fallback local (an embedded model, fetched once, no key) or \
             --fallback provider (an OpenAI-compatible API), or set AGENT_AS_MODEL_FALLBACK.",
            Some(serde_json::json!({"requiredCapabilities": required})),
        )))
    }
}

/// Settings of the sampling backend.
#[derive(Clone)]
pub struct Settings {
    /// Longest wait for the host's answer on the legacy era.
    pub sampling_timeout: Duration,
    pub sealer: mrtr::Sealer,
}

/// The retry fields of a `tools/call`.
#[derive(Clone, Copy)]
pub struct Retry<'a> {
    pub arguments: &'a Map<String, Value>,
    pub request_state: Option<&'a str>,
    pub input_responses: Option<&'a rmcp::model::InputResponses>,
}

/// The `sampling/createMessage` parameters for one attempt.
/// `hints` are the model hints sent (none: the caller's `model`).
pub fn sampling_params(attempt: &Attempt<'_>, hints: &[String]) -> CreateMessageRequestParams {
    let req = &attempt.call.request;
    let messages: Vec<SamplingMessage> = attempt
        .turns()
        .map(|t| wire::message(t, attempt.tool_content))
        .collect();
    let mut params = CreateMessageRequestParams::new(messages, req.max_tokens)
        .with_model_preferences(ModelPreferences::new().with_hints(if hints.is_empty() {
            vec![ModelHint::new(req.model.clone())]
        } else {
            hints.iter().map(|h| ModelHint::new(h.clone())).collect()
        }));
    if let Some(s) = &attempt.system {
        params = params.with_system_prompt(s.clone());
    }
    if let Some(t) = req.temperature {
        params = params.with_temperature(t as f32);
    }
    if !req.stop.is_empty() {
        params = params.with_stop_sequences(req.stop.clone());
    }
    if !attempt.call.metadata.is_empty() {
        params = params.with_metadata(Value::Object(attempt.call.metadata.clone()));
    }
    if !attempt.tools.is_empty() {
        let tools = attempt
            .tools
            .iter()
            .map(|t| {
                let mut tool = Tool::new(
                    t.name.to_owned(),
                    t.description.unwrap_or_default().to_owned(),
                    Arc::new(t.input_schema.clone()),
                );
                tool.description = t.description.map(|d| d.to_owned().into());
                tool
            })
            .collect();
        params = params.with_tools(tools);
    }
    if let Some(choice) = attempt.tool_choice {
        params = params.with_tool_choice(match choice {
            ToolChoice::Auto => McpToolChoice::auto(),
            ToolChoice::Required => McpToolChoice::required(),
            ToolChoice::None => McpToolChoice::none(),
        });
    }
    params
}

/// Reads the `"sample"` input response of a 2026-07-28 retry.
/// Read in place: the answer may carry megabytes of media, so it is not copied first.
pub(crate) fn parse_response(value: &Value) -> CallResult<CreateMessageResult> {
    if value.is_null() {
        return Err(CallError::Host(
            "the client answered the sampling request with null instead of a \
             CreateMessageResult"
                .into(),
        ));
    }
    CreateMessageResult::deserialize(value).map_err(|e| {
        CallError::Host(format!(
            "inputResponses.sample is not a CreateMessageResult ({e}); expected {{\"role\": \
             \"assistant\", \"content\": ..., \"model\": ...}}"
        ))
    })
}
