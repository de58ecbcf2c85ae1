//! The MCP handler: lists the tools and routes each `tools/call` through the pipeline. It holds
//! no per-connection state; everything a call needs arrives with the call.

use crate::completion::Block;
use crate::contract::cursor;
use crate::error::CallError;
use crate::fulfil::{self, Fulfilled, Outcome, Retry, Settings};
use crate::pyjson::{self, Style};
use crate::shapes::{self, Call, ToolKind, anthropic, openai_chat, responses};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use crate::shapes::params::TOOLS_JSON;

#[derive(Clone)]
pub struct Server {
    settings: Arc<Settings>,
    tools: Arc<Vec<Tool>>,
}

impl Server {
    pub fn new(settings: Settings) -> Result<Self, String> {
        let tools: Vec<Tool> = serde_json::from_str(TOOLS_JSON)
            .map_err(|e| format!("built-in tool definitions do not parse: {e}"))?;
        Ok(Server {
            settings: Arc::new(settings),
            tools: Arc::new(tools),
        })
    }

    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    async fn complete(
        &self,
        kind: ToolKind,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let host = fulfil::Host::of(&ctx);
        let result = async {
            check_size(&arguments, self.settings.limits.max_request_bytes)?;
            let call = kind.parse(&arguments, &self.settings.limits)?;
            let retry = Retry {
                arguments: &arguments,
                request_state: request.request_state.as_deref(),
                input_responses: request.input_responses.as_ref(),
            };
            match fulfil::run(&call, &host, retry, &ctx, &self.settings).await? {
                Outcome::Ask(ask) => Ok(CallToolResponse::InputRequired(ask)),
                Outcome::Done(done) => render(&call, done).map(CallToolResponse::Complete),
            }
        }
        .await;
        result.or_else(|e| edge(kind.name(), e))
    }
}

/// Refuses arguments larger than the limit, counting their JSON size without building it.
fn check_size(arguments: &Map<String, Value>, max: usize) -> Result<(), CallError> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, arguments);
    if counter.0 > max {
        return Err(CallError::Invalid(format!(
            "the arguments are {} bytes of JSON, over the limit of {max} \
             (AGENT_AS_MODEL_MAX_REQUEST_BYTES)",
            counter.0
        )));
    }
    Ok(())
}

/// Turns a call error into what the client sees: JSON-RPC errors for protocol faults, an
/// `isError` result (readable by the calling agent) for everything else.
fn edge(tool: &str, e: CallError) -> Result<CallToolResponse, ErrorData> {
    tracing::debug!(tool, kind = error_kind(&e), "call failed");
    match e {
        CallError::Protocol(err) => Err(err),
        other => Ok(CallToolResult::error(vec![ContentBlock::text(other.to_string())]).into()),
    }
}

fn error_kind(e: &CallError) -> &'static str {
    match e {
        CallError::Invalid(_) => "invalid arguments",
        CallError::Host(_) => "host failure",
        CallError::Rejected(_) => "completion rejected",
        CallError::Protocol(_) => "protocol error",
    }
}

/// Final contract checks on the answer (persona output, cursor) and the shape's rendering.
fn render(call: &Call, done: Fulfilled) -> Result<CallToolResult, CallError> {
    let completion = done.answer.completion_text();
    if let Some(p) = &call.persona {
        p.check_output(&completion)?;
    }
    let minted = call.chain.is_on().then(|| {
        cursor::mint(
            &call.request.model,
            call.kind.name(),
            &call.transcript,
            &completion,
        )
    });
    let out = shapes::Reply {
        call,
        answer: &done.answer,
        completion: &completion,
        finish: &done.finish,
        host_model: &done.host_model,
        cursor: minted.as_deref(),
    };
    let (text, mut structured) = match call.kind {
        ToolKind::ResponsesCreate => {
            let id = minted.clone().unwrap_or_else(responses::new_response_id);
            let object = responses::response_object(&done.answer, &call.request.model, id);
            let text = responses::render(&object);
            let mut map = match object {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            map.extend(responses::status_fields(&out));
            (text, map)
        }
        _ => shapes::render_text(&completion, minted.as_deref()),
    };
    match call.kind {
        ToolKind::ChatComplete => {
            structured.insert(
                "chat_completion".into(),
                openai_chat::completion_object(&out),
            );
        }
        ToolKind::MessagesCreate => {
            structured.insert("message".into(), anthropic::message_object(&out));
        }
        ToolKind::Generate => {
            structured.insert(
                "finish_reason".into(),
                json!(openai_chat::finish_reason(&done.finish)),
            );
            structured.insert("host_model".into(), json!(done.host_model));
        }
        ToolKind::ResponsesCreate => {}
    }
    let mut warnings = call.warnings.clone();
    warnings.extend(done.strategy.warnings());
    if let Some(via) = done.strategy.tools_via() {
        structured.insert("tool_calls_via".into(), json!(via));
    }
    if !warnings.is_empty() {
        structured.insert("warnings".into(), json!(warnings));
    }
    if let Some(via) = done.strategy.structured_via() {
        structured.insert(
            "structured_output".into(),
            json!({"via": via, "attempts": done.attempts}),
        );
    }
    tracing::debug!(
        tool = call.kind.name(),
        attempts = done.attempts,
        "call completed"
    );
    let mut content = vec![ContentBlock::text(text)];
    content.extend(done.media.iter().filter_map(|b| match b {
        Block::Image { data, mime } => Some(ContentBlock::image(data.clone(), mime.clone())),
        Block::Audio { data, mime } => Some(ContentBlock::audio(data.clone(), mime.clone())),
        _ => None,
    }));
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(Value::Object(structured));
    Ok(result)
}

/// `list_models`: the one model this server offers, and what the server knows of the host.
fn list_models(host: &fulfil::Host) -> CallToolResult {
    let models = json!([{
        "id": shapes::DEFAULT_MODEL,
        "owned_by": "host-agent",
        "description": "The connected host agent's own model, reached through MCP sampling. \
                        The host decides which model answers; a model name passed to the \
                        other tools is only a hint.",
    }]);
    let text = pyjson::dumps(&models, Style::PLAIN);
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    result.structured_content = Some(json!({ "result": text, "host": host.report() }));
    result
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "agent-as-model",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Model-shaped tools (chat_complete, messages_create, responses_create, \
                 generate) answered by this host's own model through MCP sampling: no API key. \
                 The host must support sampling.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "list_models" {
            return Ok(list_models(&fulfil::Host::of(&ctx)).into());
        }
        match ToolKind::from_name(&request.name) {
            Some(kind) => self.complete(kind, request, ctx).await,
            None => Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {:?}: this server has chat_complete, messages_create, \
                     responses_create, generate and list_models",
                    request.name
                ),
                None,
            )),
        }
    }
}
