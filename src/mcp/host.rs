//! A reference MCP host: a client that declares sampling (with tools) and answers the
//! server's sampling requests from a direct backend (the embedded model or a provider). `try`
//! uses it to show the whole MCP path with no host installed.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and this host answers it.

use crate::backends::direct::{Model, ModelRequest, ModelTool};
use crate::call::{CompletionRequest, ToolChoice, Tuning, Turn};
use crate::error::{CallError, CallResult};
use crate::fulfil::live::Events;
use crate::limits::Limits;
use crate::mcp::wire;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ContentBlock, CreateMessageRequestParams,
    CreateMessageResult, ErrorData, Implementation, ProtocolVersion, ToolChoiceMode,
};
use rmcp::service::{RequestContext, RoleClient};
use std::sync::Arc;
use std::time::Duration;

/// The sampling request in neutral form. Content a model cannot be given is an error naming
/// where it is.
pub fn request(params: &CreateMessageRequestParams, limits: &Limits) -> CallResult<ModelRequest> {
    let turns = params
        .messages
        .iter()
        .enumerate()
        .map(|(i, message)| wire::turn(i, message, limits))
        .collect::<CallResult<Vec<Turn>>>()?;
    let metadata = params.metadata.as_ref();
    let given =
        |snake: &str, camel: &str| metadata.and_then(|m| m.get(snake).or_else(|| m.get(camel)));
    let base = CompletionRequest {
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
            seed: metadata
                .and_then(|m| m.get("seed"))
                .and_then(|v| v.as_i64()),
        },
        stop: params.stop_sequences.clone().unwrap_or_default(),
        text: None,
        ..CompletionRequest::default()
    };
    Ok(ModelRequest {
        base,
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

/// A sampling request a direct model answers, shared by the reference host and the bridge:
/// the request made neutral (content a model cannot be given is refused as invalid params),
/// then completed and given back in MCP's form.
pub struct Sample<'m> {
    model: &'m dyn Model,
    request: ModelRequest,
}

impl<'m> Sample<'m> {
    pub fn new(
        model: &'m dyn Model,
        params: &CreateMessageRequestParams,
        limits: &Limits,
    ) -> Result<Self, ErrorData> {
        let request =
            request(params, limits).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        Ok(Sample { model, request })
    }

    /// The most tokens the answer may take.
    pub fn max_tokens(&self) -> u32 {
        self.request.base.max_tokens
    }

    /// The model's answer, its tokens told to `live` as they are made, within `deadline` when
    /// one is given.
    pub async fn answer(
        self,
        live: Option<Events>,
        deadline: Option<Duration>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let kind = self.model.kind();
        let completion = self.model.complete(self.request, live);
        let completion = match deadline {
            Some(deadline) => tokio::time::timeout(deadline, completion)
                .await
                .map_err(|_| {
                    ErrorData::internal_error(
                        format!("the {kind} model did not answer in time"),
                        None,
                    )
                })?,
            None => completion.await,
        };
        completion.map(wire::result).map_err(|e: CallError| {
            ErrorData::internal_error(format!("the {kind} model failed: {e}"), None)
        })
    }
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
        Sample::new(&*self.model, &params, &self.limits)?
            .answer(self.live.clone().map(|l| l as Events), None)
            .await
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
