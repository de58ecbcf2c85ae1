//! The MCP handler: lists the tools, parses each `tools/call` with its shape in the registry,
//! hands the call to the completion service ([`crate::service`]) with the client as its host,
//! and renders what comes back as the tool's result (the shape's API object with this
//! server's own keys around it) or a JSON-RPC error. It holds no per-connection state beyond
//! the progress tokens in flight; everything a call needs arrives with the call.

use crate::error::{CallError, FaultKind, StartError, clip};
use crate::fulfil::live::Events;
use crate::mcp::gate::Gate;
use crate::mcp::progress::Reporter;
use crate::mcp::result::{Asked, Declared, tool_result};
use crate::mcp::sampling::{Caller, Host, Retry, Settings};
use crate::metrics::{self, Outcome, Record};
use crate::pyjson::{self, Style};
use crate::routing::Backends;
use crate::service::{HostModel, Origin, Served, Service};
use crate::shapes::{self, Shape};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

#[derive(Clone)]
pub struct Server {
    settings: Arc<Settings>,
    service: Arc<Service>,
    tools: Arc<Vec<Tool>>,
    /// Caps on calls in flight, over HTTP (stdio's transport counts its own).
    gate: Option<Gate>,
    /// The progress tokens of the calls in flight on this connection (or HTTP session): two
    /// calls may not report under one.
    progress_tokens: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Told, with the request's id, when a call's work has ended (answered, failed or stopped
    /// after a cancellation): stdio's transport frees the call's slot then.
    on_done: Option<OnDone>,
}

/// See [`Server::on_done`].
pub type OnDone = Arc<dyn Fn(&rmcp::model::RequestId) + Send + Sync>;

/// Calls [`OnDone`] when dropped: however the call's future ends, even when it is dropped.
pub(crate) struct Done<'a>(
    pub(crate) Option<&'a OnDone>,
    pub(crate) &'a rmcp::model::RequestId,
);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0 {
            f(self.1);
        }
    }
}

fn definition(name: &str, text: &str) -> Result<Tool, StartError> {
    serde_json::from_str(text).map_err(|e| StartError::Definition {
        tool: name.to_owned(),
        problem: e.to_string(),
    })
}

impl Server {
    /// The MCP tools, answered by `service` (the one the model APIs answer with too).
    pub fn new(settings: Settings, service: Arc<Service>) -> Result<Self, StartError> {
        let mut tools = Vec::with_capacity(shapes::REGISTRY.len() + 1);
        for shape in shapes::REGISTRY {
            tools.push(definition(shape.name(), shape.definition())?);
        }
        tools.push(definition("list_models", shapes::LIST_MODELS)?);
        tools.push(definition("embeddings_create", shapes::EMBEDDINGS_CREATE)?);
        Ok(Server {
            settings: Arc::new(settings),
            service,
            tools: Arc::new(tools),
            gate: None,
            progress_tokens: Arc::default(),
            on_done: None,
        })
    }

    /// This server for one HTTP session, its calls under `gate`.
    pub fn with_gate(&self, gate: Gate) -> Server {
        Server {
            gate: Some(gate),
            progress_tokens: Arc::default(),
            ..self.clone()
        }
    }

    /// This server, telling `on_done` when each call's work has ended.
    pub fn on_done(mut self, on_done: OnDone) -> Server {
        self.on_done = Some(on_done);
        self
    }

    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    async fn complete(
        &self,
        shape: &'static dyn Shape,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
        record: &mut Record,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut arguments = request.arguments.unwrap_or_default();
        let declared = Declared::flattening(shape, &mut arguments);
        let (parsed, arguments) = self.service.parse_blocking(shape, arguments).await;
        let cancelled = ctx.ct.clone();
        let result = async {
            let call = crate::service::Parsed(parsed?);
            let retry = Retry {
                arguments: &arguments,
                request_state: request.request_state.as_deref(),
                input_responses: request.input_responses.as_ref(),
            };
            let caller = Caller::new(&ctx, retry, &self.settings, self.service.limits());
            let _token = self.claim_progress_token(&ctx)?;
            // One reporter for the whole call, across fallbacks and repairs, so progress only
            // goes forward under the call's token; started only when the service opens the
            // call's events (a model it may reach makes its answer here).
            let reporter: Mutex<Option<Reporter>> = Mutex::new(None);
            let open = || {
                let started = Reporter::start(ctx.meta.get_progress_token(), &ctx.peer)?;
                let live: Events = started.live.clone();
                *reporter.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
                Some(live)
            };
            let origin = Origin {
                host: Some(&caller),
                cancel: &ctx.ct,
                events: &open,
            };
            let samples = caller.samples();
            record.model(
                self.service
                    .backends()
                    .entry_name(&call.request.model, samples),
            );
            let served = self.service.complete(&call, &origin).await;
            stop_reporting(&reporter).await;
            let asked = Asked {
                call: &call,
                arguments: &arguments,
                declared,
            };
            response(shape, served?, &caller, record, asked)
        }
        .await;
        result.or_else(|e| {
            record.outcome(if cancelled.is_cancelled() {
                Outcome::Cancelled
            } else {
                Outcome::of_error(&e)
            });
            edge(shape.name(), e)
        })
    }
}

/// Stops the call's progress reporter, if the service started one.
async fn stop_reporting(reporter: &Mutex<Option<Reporter>>) {
    let started = reporter
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(reporter) = started {
        reporter.stop().await;
    }
}

/// The tool's response to what the service made of a call: its result, or the input-required
/// round the caller made.
fn response(
    shape: &'static dyn Shape,
    served: Served,
    caller: &Caller<'_>,
    record: &mut Record,
    asked: Asked<'_>,
) -> Result<CallToolResponse, CallError> {
    match served {
        Served::Answered(answered) => {
            let usage = answered.finished.usage;
            record.answered(&answered.report.entry, usage);
            Ok(tool_result(shape, asked, *answered).into())
        }
        Served::Asked => caller
            .take_asked()
            .map(CallToolResponse::InputRequired)
            .ok_or_else(|| {
                CallError::fault(
                    FaultKind::Internal,
                    "the call stopped for an input-required round that was not made",
                )
            }),
    }
}

/// A progress token held by a call in flight; let go when the call ends.
struct Claimed {
    tokens: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    key: String,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.key);
    }
}

impl Server {
    /// The call's progress token, checked: a string or an integer (MCP), not one a call in
    /// flight reports under.
    fn claim_progress_token(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Option<Claimed>, CallError> {
        let Some(token) = ctx.meta.0.get("progressToken") else {
            return Ok(None);
        };
        let key = match token {
            Value::String(_) => token.to_string(),
            Value::Number(n) if n.is_i64() || n.is_u64() => token.to_string(),
            _ => {
                return Err(CallError::Invalid(format!(
                    "_meta.progressToken must be a string or an integer, got {}",
                    clip(&token.to_string())
                )));
            }
        };
        let mut tokens = self
            .progress_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !tokens.insert(key.clone()) {
            return Err(CallError::Invalid(format!(
                "_meta.progressToken {} is already used by a call in flight; give each \
                 request its own",
                clip(&key)
            )));
        }
        Ok(Some(Claimed {
            tokens: self.progress_tokens.clone(),
            key,
        }))
    }
}

/// Turns a call error into what the client sees: JSON-RPC errors for protocol faults, an
/// `isError` result (readable by the calling agent) for everything else.
fn edge(tool: &str, e: CallError) -> Result<CallToolResponse, ErrorData> {
    tracing::debug!(tool, kind = e.kind(), "call failed");
    match e {
        CallError::Protocol(fault) => {
            let code = match fault.kind {
                FaultKind::InvalidParams => ErrorCode::INVALID_PARAMS,
                FaultKind::Internal => ErrorCode::INTERNAL_ERROR,
                FaultKind::MissingCapability => ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            };
            Err(ErrorData::new(code, fault.message, fault.data))
        }
        other => Ok(CallToolResult::error(vec![ContentBlock::text(other.to_string())]).into()),
    }
}

impl Server {
    /// `embeddings_create`: OpenAI's embeddings object as structured content (and its JSON as
    /// the text), with the backend (and, from a models file, the model) that made it.
    async fn embeddings(
        &self,
        arguments: &Map<String, Value>,
    ) -> Result<CallToolResult, CallError> {
        let asked = crate::api::embeddings::openai(arguments)?;
        let backends = self.service.backends();
        let (entry, model) = backends.embedder(&asked.model)?;
        let (entry, backend) = (entry.name.clone(), model.kind());
        let made = self
            .service
            .embed(&asked.model, asked.request.clone())
            .await?;
        let mut object = crate::api::embeddings::openai_object(&asked, &made);
        let text = object.to_string();
        if let Some(fields) = object.as_object_mut() {
            fields.insert("backend".into(), json!(backend));
            if backends.named() {
                fields.insert("route".into(), json!({"model": entry}));
            }
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(object);
        Ok(result)
    }
}

/// `list_models`: the models calls may name, and what the server knows of the host.
fn list_models(host: &Host, backends: &Backends) -> CallToolResult {
    let models = Value::Array(backends.models());
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
                match (
                    self.service.backends().host_answers(),
                    self.service.backends().direct().next(),
                ) {
                    _ if self.service.backends().named() => {
                        "Model-shaped tools (chat_complete, messages_create, responses_create, \
                     generate, generate_content) answered by several models: pass `model` with \
                     a name or alias that list_models lists (without one, the default answers); \
                     each result's structuredContent.route says which model answered."
                    }
                    (false, _) => {
                        "Model-shaped tools (chat_complete, messages_create, responses_create, \
                     generate, generate_content) answered by a model this server runs or calls \
                     itself (see list_models): no sampling needed."
                    }
                    (true, Some(_)) => {
                        "Model-shaped tools (chat_complete, messages_create, responses_create, \
                     generate, generate_content) answered by this host's own model through MCP \
                     sampling, or, when the host cannot sample, by the fallback model listed \
                     by list_models."
                    }
                    (true, None) => {
                        "Model-shaped tools (chat_complete, messages_create, responses_create, \
                     generate, generate_content) answered by this host's own model through MCP \
                     sampling: no API key. The host must support sampling (VS Code, GitHub \
                     Copilot CLI, fast-agent); elsewhere start the server with --fallback local."
                    }
                },
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
        // The call's record is made only when someone reads it (JSON logs, or RUST_LOG=info).
        let record = tracing::enabled!(tracing::Level::INFO).then(|| {
            (
                Instant::now(),
                request_id(&ctx),
                ctx.id.clone(),
                clip(&request.name).to_string(),
            )
        });
        let rpc_id = ctx.id.clone();
        let _done = Done(self.on_done.as_ref(), &rpc_id);
        // A model call (not `list_models`, not an unknown tool) is counted in the metrics.
        let mut counted = match shapes::find(&request.name) {
            Some(_) => self.service.metrics().record(metrics::Api::Mcp),
            None => Record::default(),
        };
        let outcome = match self.gate.as_ref().map(Gate::admit).transpose() {
            Ok(_admitted) => self.dispatch(request, ctx, &mut counted).await,
            Err(refused) => {
                counted.outcome(Outcome::ServerError);
                Err(refused)
            }
        };
        if let Ok(CallToolResponse::InputRequired(_)) = &outcome {
            counted.outcome(Outcome::Ok);
        }
        if let Some((started, request_id, rpc_id, tool)) = record {
            let (result, code) = match &outcome {
                Ok(CallToolResponse::InputRequired(_)) => ("input_required", None),
                Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => {
                    ("tool_error", None)
                }
                Ok(_) => ("ok", None),
                Err(e) => ("error", Some(e.code.0)),
            };
            tracing::info!(
                request_id = %request_id, rpc_id = %rpc_id, tool = %tool, outcome = result,
                code, duration_ms = started.elapsed().as_secs_f64() * 1000.0, "tool call"
            );
        }
        outcome
    }
}

/// The id a call is logged under: the HTTP request's `X-Request-Id` (set by a proxy, or by
/// this server's HTTP front), else a fresh one.
fn request_id(ctx: &RequestContext<RoleServer>) -> String {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get("x-request-id"))
        .and_then(|v| v.to_str().ok())
        .map(|v| clip(v).to_string())
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

impl Server {
    /// Routes one call: `list_models`, a shape, or an error naming the tools there are.
    async fn dispatch(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
        record: &mut Record,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "list_models" {
            return Ok(list_models(&Host::of(&ctx), self.service.backends()).into());
        }
        if request.name == "embeddings_create" {
            let arguments = request.arguments.unwrap_or_default();
            return match self.embeddings(&arguments).await {
                Ok(result) => Ok(result.into()),
                Err(e) => edge("embeddings_create", e),
            };
        }
        match shapes::find(&request.name) {
            Some(shape) => self.complete(shape, request, ctx, record).await,
            None => {
                let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
                Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool {:?}: this server has {}",
                        clip(&request.name),
                        names.join(", ")
                    ),
                    None,
                ))
            }
        }
    }
}
