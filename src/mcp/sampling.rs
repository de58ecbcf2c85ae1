//! The sampling backend: the connected host's own model through MCP sampling, on either
//! protocol era. This is the one place that looks at protocol versions and client
//! capabilities.
//!
//! The completion service's driver runs the fulfilment machine on it ([`Caller`] is the
//! service's [`HostModel`]): on the legacy era each attempt is sent as `sampling/createMessage`
//! and awaited (bounded, see [`super::legacy`]); on 2026-07-28 the answer is read from the
//! retry's `inputResponses`, or the call stops and returns an `InputRequiredResult` carrying
//! the request and the sealed progress (see [`super::mrtr`]). Here too: what the host can take,
//! and the sampling request for an attempt.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.

use super::{legacy, mrtr};
use crate::backends::direct::BoxFuture;
use crate::call::{Call, Completion, ToolChoice};
use crate::error::{CallError, CallResult, Fault, FaultKind};
use crate::fulfil::{Attempt, Capabilities, Progress, Strategy};
use crate::limits::Limits;
use crate::mcp::wire;
use crate::service::HostModel;
use crate::service::driver::{Sampler, Sent};
use rmcp::model::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, InputRequiredResult,
    ModelHint, ModelPreferences, ProtocolVersion, SamplingMessage, Tool,
    ToolChoice as McpToolChoice,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::Deserialize as _;
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
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
        Err(CallError::Protocol(Fault {
            kind: FaultKind::MissingCapability,
            message:
            "Missing required client capability: sampling. agent-as-model answers every call \
             with the host's own model through MCP sampling, and this client did not declare \
             the sampling capability. Use a host that samples (VS Code with GitHub Copilot, \
             GitHub Copilot CLI, fast-agent) and allow this server to use its model (in VS \
             Code: MCP: List Servers > agent-as-model > Configure Model Access). Claude Code, \
             Cursor, Claude Desktop, Goose, Codex, Zed and Gemini CLI do not sample: there, start this \
             server with --fallback local (an embedded model, fetched once, no key) or \
             --fallback provider (an OpenAI-compatible API), or set AGENT_AS_MODEL_FALLBACK."
                .to_owned(),
            data: Some(serde_json::json!({"requiredCapabilities": required})),
        }))
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
                    t.name.clone(),
                    t.description.clone().unwrap_or_default(),
                    Arc::new(t.schema.clone()),
                );
                tool.description = t.description.clone().map(Into::into);
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

/// The client of one tool call, as the completion service sees its host: whether it samples,
/// and its sampling for the call's attempts on the request's era.
pub struct Caller<'a> {
    pub host: Host,
    ctx: &'a RequestContext<RoleServer>,
    retry: Retry<'a>,
    settings: &'a Settings,
    limits: &'a Limits,
    /// The question of a 2026-07-28 round, once asked: the tool call's answer.
    asked: Mutex<Option<InputRequiredResult>>,
}

impl<'a> Caller<'a> {
    pub fn new(
        ctx: &'a RequestContext<RoleServer>,
        retry: Retry<'a>,
        settings: &'a Settings,
        limits: &'a Limits,
    ) -> Self {
        Caller {
            host: Host::of(ctx),
            ctx,
            retry,
            settings,
            limits,
            asked: Mutex::new(None),
        }
    }

    /// The input-required round the call ended on, if it did.
    pub fn take_asked(&self) -> Option<InputRequiredResult> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl HostModel for Caller<'_> {
    fn samples(&self) -> bool {
        self.host.sampling
    }

    fn sampler<'b>(&'b self, call: &'b Call, hints: &'b [String]) -> Box<dyn Sampler + 'b> {
        let binding = self
            .host
            .modern
            .then(|| mrtr::Sealer::binding(call.tool, self.retry.arguments));
        Box::new(Sampling {
            caller: self,
            hints,
            binding,
        })
    }
}

/// The host's sampling for one call: a request during the call (legacy) or an input-required
/// round (2026-07-28).
struct Sampling<'a> {
    caller: &'a Caller<'a>,
    /// The model hints sent (none: the caller's `model`).
    hints: &'a [String],
    /// What the sealed state of a 2026-07-28 round is bound to (the tool and its arguments).
    binding: Option<mrtr::Binding>,
}

impl Sampler for Sampling<'_> {
    fn capabilities(&self) -> CallResult<Capabilities> {
        self.caller.host.require_sampling()?;
        Ok(self.caller.host.capabilities())
    }

    /// On a 2026-07-28 retry, the sealed progress and the host's answer to the last round.
    fn resume(&self) -> CallResult<(Progress, Option<Completion>)> {
        let Some(binding) = &self.binding else {
            return Ok(Default::default());
        };
        let c = self.caller;
        let responses = c.retry.input_responses;
        let opened = c
            .settings
            .sealer
            .open(binding, c.retry.request_state, responses.is_some())?;
        let Some(progress) = opened else {
            return Ok(Default::default());
        };
        let answer = match responses.and_then(|r| r.get(mrtr::SAMPLE_KEY)) {
            Some(value) => Some(wire::to_completion(parse_response(value)?, c.limits)?),
            // A retry without the "sample" answer: ask again.
            None => None,
        };
        Ok((progress, answer))
    }

    fn send<'b>(
        &'b self,
        attempt: &'b Attempt<'_>,
        progress: &'b Progress,
    ) -> BoxFuture<'b, CallResult<Sent>> {
        Box::pin(async move {
            let c = self.caller;
            let params = sampling_params(attempt, self.hints);
            if let Some(binding) = &self.binding {
                let ask = c.settings.sealer.ask(binding, progress, params)?;
                *c.asked
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(ask);
                return Ok(Sent::Asked);
            }
            let result = legacy::sample(c.ctx, params, c.settings.sampling_timeout).await?;
            wire::to_completion(result, c.limits).map(Sent::Answered)
        })
    }
}
