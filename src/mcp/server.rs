//! The MCP handler: lists the tools and routes each `tools/call` to its shape in the registry,
//! then to the models [`crate::routing`] names for it (in order, on to the next after a
//! transient failure), then back to the shape to render. It holds no per-connection state;
//! everything a call needs arrives with the call.

use crate::backends::driver::{Driver, Outcome};
use crate::call::{Call, Reply};
use crate::contract::cursor;
use crate::error::{CallError, StartError, clip};
use crate::fulfil::Fulfilled;
use crate::limits::Limits;
use crate::mcp::gate::Gate;
use crate::mcp::progress::Reporter;
use crate::mcp::sampling::{Host, Retry, Settings};
use crate::mcp::wire;
use crate::pyjson::{self, Style};
use crate::routing::{Answerer, Backends, Entry};
use crate::shapes::{self, Shape};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone)]
pub struct Server {
    settings: Arc<Settings>,
    limits: Arc<Limits>,
    tools: Arc<Vec<Tool>>,
    backends: Arc<Backends>,
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
    pub fn new(settings: Settings, limits: Limits, backends: Backends) -> Result<Self, StartError> {
        let mut tools = Vec::with_capacity(shapes::REGISTRY.len() + 1);
        for shape in shapes::REGISTRY {
            tools.push(definition(shape.name(), shape.definition())?);
        }
        tools.push(definition("list_models", shapes::LIST_MODELS)?);
        Ok(Server {
            settings: Arc::new(settings),
            limits: Arc::new(limits),
            tools: Arc::new(tools),
            backends: Arc::new(backends),
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
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let host = Host::of(&ctx);
        let result = async {
            check_size(&arguments, self.limits.max_request_bytes)?;
            let call = shapes::parse(shape, &arguments, &self.limits)?;
            let retry = Retry {
                arguments: &arguments,
                request_state: request.request_state.as_deref(),
                input_responses: request.input_responses.as_ref(),
            };
            let chain = self.backends.route(&call.request.model, &host)?;
            // One reporter for the whole call, across fallbacks and repairs, so progress only
            // goes forward under the call's token; none when no model it may reach streams.
            let _token = self.claim_progress_token(&ctx)?;
            let reporter = chain
                .iter()
                .any(|e| e.streams())
                .then(|| Reporter::start(ctx.meta.get_progress_token(), &ctx.peer))
                .flatten();
            let live = reporter.as_ref().map(|r| r.live.clone());
            let outcome = self
                .fulfil(shape, &call, &chain, &host, retry, &ctx, live)
                .await;
            if let Some(reporter) = reporter {
                reporter.stop().await;
            }
            outcome
        }
        .await;
        result.or_else(|e| edge(shape.name(), e))
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

    /// The call answered by the first model of `chain` that can, on to the next after a
    /// transient failure while there is time.
    #[allow(clippy::too_many_arguments)]
    async fn fulfil(
        &self,
        shape: &'static dyn Shape,
        call: &Call,
        chain: &[&Entry],
        host: &Host,
        retry: Retry<'_>,
        ctx: &RequestContext<RoleServer>,
        live: Option<Arc<crate::fulfil::live::Live>>,
    ) -> Result<CallToolResponse, CallError> {
        let started = Instant::now();
        let mut fell_back_from = Vec::new();
        for (i, entry) in chain.iter().enumerate() {
            let outcome = match self
                .answer(entry, call, host, retry, ctx, live.as_ref())
                .await
            {
                Ok(outcome) => outcome,
                // Worth another model, one is left, and there is time for it.
                Err(e)
                    if e.is_transient()
                        && i + 1 < chain.len()
                        && started.elapsed() < self.settings.sampling_timeout =>
                {
                    tracing::warn!(model = %entry.name, error = %e, "falling back");
                    fell_back_from.push(json!({"model": entry.name, "error": e.to_string()}));
                    continue;
                }
                Err(e) => return Err(e),
            };
            return match outcome {
                Outcome::Ask(ask) => Ok(CallToolResponse::InputRequired(ask)),
                Outcome::Done(done) => {
                    let route = Route {
                        entry,
                        fell_back_from,
                        named: self.backends.named(),
                    };
                    finish(shape, call, done, &route).map(CallToolResponse::Complete)
                }
            };
        }
        Err(CallError::Invalid("no model can answer this call".into()))
    }

    /// One entry's answer to the call: under its cap, on its driver, with progress reported
    /// when the call asked for it and the backend makes its answer where this server sees it.
    async fn answer(
        &self,
        entry: &Entry,
        call: &Call,
        host: &Host,
        retry: Retry<'_>,
        ctx: &RequestContext<RoleServer>,
        live: Option<&Arc<crate::fulfil::live::Live>>,
    ) -> Result<Outcome, CallError> {
        let _permit = entry.admit(self.backends.queue_timeout).await?;
        let driver = match &entry.answerer {
            Answerer::Model(model) => Driver::Direct {
                model: model.as_ref(),
                ctx,
            },
            Answerer::Host { hints } => {
                Driver::sampling(call, host, ctx, retry, &self.settings, &self.limits, hints)
            }
        };
        driver.run(call, live.filter(|_| entry.streams())).await
    }
}

/// Which model answered a call, for its result.
struct Route<'a> {
    entry: &'a Entry,
    /// The models that failed before it, with their errors.
    fell_back_from: Vec<Value>,
    /// A models file names the models: every result says which answered.
    named: bool,
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
    tracing::debug!(tool, kind = e.kind(), "call failed");
    match e {
        CallError::Protocol(err) => Err(err),
        other => Ok(CallToolResult::error(vec![ContentBlock::text(other.to_string())]).into()),
    }
}

/// The cursor, the shape's rendering, and
/// what every result reports (warnings, how tools and structured output were obtained, media,
/// and which backend answered when it was not the host's sampling).
fn finish(
    shape: &dyn Shape,
    call: &Call,
    done: Fulfilled,
    route: &Route<'_>,
) -> Result<CallToolResult, CallError> {
    let completion = done.answer.completion_text();
    let minted = call.chain.is_on().then(|| {
        cursor::mint(
            &call.request.model,
            call.tool,
            &call.transcript,
            &completion,
        )
    });
    let reply = Reply {
        call,
        answer: &done.answer,
        completion: &completion,
        finish: &done.finish,
        host_model: &done.host_model,
        cursor: minted.as_deref(),
        measured: done.usage,
        media: &done.media,
    };
    let rendered = shape.render(&reply);
    let mut structured = rendered.structured;
    let mut warnings = call.warnings.clone();
    warnings.extend(done.warnings);
    if let Some(via) = done.strategy.tools_via() {
        structured.insert("tool_calls_via".into(), json!(via));
    }
    if !warnings.is_empty() {
        structured.insert("warnings".into(), json!(warnings));
    }
    let backend = route.entry.backend();
    if backend != "host" {
        structured.insert("backend".into(), json!(backend));
    }
    if route.named || !route.fell_back_from.is_empty() {
        structured.insert(
            "route".into(),
            json!({"model": route.entry.name, "backend": backend,
                   "fell_back_from": route.fell_back_from}),
        );
    }
    if let Some(via) = done.strategy.structured_via() {
        structured.insert(
            "structured_output".into(),
            json!({"via": via, "attempts": done.attempts}),
        );
    }
    tracing::debug!(tool = call.tool, attempts = done.attempts, "call completed");
    let mut content = vec![ContentBlock::text(rendered.text)];
    content.extend(done.media.into_iter().map(wire::into_content));
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(Value::Object(structured));
    Ok(result)
}

/// `list_models`: the models of the models file, or the host's model (unless another backend
/// answers every call) and the configured direct backends' models; and what the server knows
/// of the host.
fn list_models(host: &Host, backends: &Backends) -> CallToolResult {
    let models = if backends.named() {
        backends.listing()
    } else {
        flag_models(backends)
    };
    let models = Value::Array(models);
    let text = pyjson::dumps(&models, Style::PLAIN);
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    result.structured_content = Some(json!({ "result": text, "host": host.report() }));
    result
}

/// The models of `--backend` and `--fallback`, as the original listed the host's.
fn flag_models(backends: &Backends) -> Vec<Value> {
    let mut models = Vec::new();
    if backends.host_answers() {
        models.push(json!({
            "id": shapes::DEFAULT_MODEL,
            "owned_by": "host-agent",
            "description": "The connected host agent's own model, reached through MCP sampling. \
                            The host decides which model answers; a model name passed to the \
                            other tools is only a hint.",
        }));
    }
    for (role, model) in backends.direct() {
        let mut entry = model.describe();
        if let Some(o) = entry.as_object_mut() {
            o.insert("role".into(), json!(role));
        }
        models.push(entry);
    }
    models
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "agent-as-model",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                match (self.backends.host_answers(), self.backends.direct().next()) {
                    _ if self.backends.named() => {
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
        let outcome = match self.gate.as_ref().map(Gate::admit).transpose() {
            Ok(_admitted) => self.dispatch(request, ctx).await,
            Err(refused) => Err(refused),
        };
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
        .get::<hyper::http::request::Parts>()
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
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "list_models" {
            return Ok(list_models(&Host::of(&ctx), &self.backends).into());
        }
        match shapes::find(&request.name) {
            Some(shape) => self.complete(shape, request, ctx).await,
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
