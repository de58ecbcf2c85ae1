//! The bridge's client side: what the downstream server asks of its client. Sampling goes up
//! to the host when the host declared it on the legacy era, else it is answered by the
//! bridge's model; elicitation and roots go up when the host supports them; the downstream's
//! notifications are passed up as they are.

#![allow(deprecated)] // Sampling, roots and logging are deprecated by SEP-2577; this bridges them.

use super::Shared;
use crate::fulfil::live::{Event, Events};
use crate::mcp::host;
use crate::mcp::progress::Reporter;
use rmcp::ErrorData;
use rmcp::model::{
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientResult,
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, Implementation, ListRootsResult, LoggingMessageNotificationParam,
    ProgressNotificationParam, ResourceUpdatedNotificationParam, ServerRequest,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RoleServer,
};
use std::sync::Arc;

#[derive(Clone)]
pub struct Downstream {
    shared: Arc<Shared>,
}

impl Downstream {
    pub fn new(shared: Arc<Shared>) -> Self {
        Downstream { shared }
    }

    /// The host, when it connected on the legacy era (a 2026-07-28 host takes no requests from
    /// its server) and declared what `declared` checks.
    fn host_with(
        &self,
        declared: impl Fn(&ClientCapabilities) -> bool,
    ) -> Option<Peer<RoleServer>> {
        let host = self.shared.host()?;
        let info = host.peer_info()?;
        let legacy = info.protocol_version < rmcp::model::ProtocolVersion::V_2026_07_28;
        (legacy && declared(&info.capabilities)).then_some(host)
    }

    /// The server's limits on a tool call, applied to a downstream's sampling request: its
    /// size, its number of messages and each message's length.
    fn within_limits(&self, params: &CreateMessageRequestParams) -> Result<(), ErrorData> {
        let limits = &self.shared.limits;
        let refuse = |what: String| Err(ErrorData::invalid_params(what, None));
        if params.messages.len() > limits.max_messages {
            return refuse(format!(
                "sampling/createMessage has {} messages, over the limit of {} \
                 (AGENT_AS_MODEL_MAX_MESSAGES)",
                params.messages.len(),
                limits.max_messages
            ));
        }
        let size = serde_json::to_vec(params).map_or(usize::MAX, |v| v.len());
        if size > limits.max_request_bytes {
            return refuse(format!(
                "sampling/createMessage is {size} bytes of JSON, over the limit of {} \
                 (AGENT_AS_MODEL_MAX_REQUEST_BYTES)",
                limits.max_request_bytes
            ));
        }
        Ok(())
    }

    fn unsupported(what: &str) -> ErrorData {
        ErrorData::new(
            rmcp::model::ErrorCode(-32601),
            format!(
                "{what}: the host connected to this bridge does not support it (it did not \
                 declare the capability on the legacy era), so the bridge cannot pass it on"
            ),
            None,
        )
    }

    /// The downstream's sampling request, answered by the bridge's model; when the request
    /// carries a progress token, the downstream is told the answer's progress as it is made.
    async fn answer(
        &self,
        params: CreateMessageRequestParams,
        ctx: &RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let sample = host::Sample::new(&**self.model_for(&params), &params, &self.shared.limits)?;
        let reporter = Reporter::start(ctx.meta.get_progress_token(), &ctx.peer);
        let live = reporter.as_ref().map(|r| r.live.clone());
        if let Some(live) = &live {
            live.event(Event::Attempt {
                number: 1,
                of: 1,
                budget: usize::try_from(sample.max_tokens()).ok(),
                verbatim: true,
            });
        }
        let answer = sample
            .answer(live.map(|l| l as Events), Some(self.shared.timeout))
            .await;
        if let Some(reporter) = reporter {
            reporter.stop().await;
        }
        answer
    }
}

impl Downstream {
    /// The downstream's sampling request, sent up to the host unchanged; when the downstream
    /// cancels it, the host's request is cancelled too.
    async fn pass_up(
        &self,
        host: Peer<RoleServer>,
        params: CreateMessageRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let options = PeerRequestOptions::with_timeout(self.shared.timeout);
        let handle = host
            .send_cancellable_request(request, options)
            .await
            .map_err(upstream_error)?;
        let id = handle.id.clone();
        tokio::select! {
            answer = handle.await_response() => match answer.map_err(upstream_error)? {
                ClientResult::CreateMessageResult(result) => Ok(*result),
                _ => Err(ErrorData::internal_error(
                    "the host answered sampling/createMessage with another kind of result",
                    None,
                )),
            },
            () = ctx.ct.cancelled() => {
                let cancel = CancelledNotificationParam::new(
                    Some(id),
                    Some("the downstream server cancelled its request".into()),
                );
                let _ = host.notify_cancelled(cancel).await;
                Err(ErrorData::internal_error("cancelled by the downstream server", None))
            }
        }
    }
}

/// MCP's model preferences, for routing.
fn preferences(p: &rmcp::model::ModelPreferences) -> crate::routing::Preferences {
    crate::routing::Preferences {
        hints: p
            .hints
            .iter()
            .flatten()
            .filter_map(|h| h.name.clone())
            .collect(),
        cost: p.cost_priority,
        speed: p.speed_priority,
        intelligence: p.intelligence_priority,
    }
}

impl Downstream {
    /// The model that answers a sampling request: with a models file, the one its model
    /// preferences pick (hints, then priorities against the file's scores; a `host` model's
    /// first direct fallback, as the host cannot sample here); else the bridge's `--with`.
    fn model_for(
        &self,
        params: &CreateMessageRequestParams,
    ) -> &Arc<dyn crate::backends::direct::Model> {
        self.shared
            .models
            .as_ref()
            .and_then(|models| {
                let preferences = params.model_preferences.as_ref().map(preferences);
                models.prefer_direct(preferences.as_ref())
            })
            .unwrap_or(&self.shared.model)
    }

    /// A request to the host, bounded by the bridge's timeout, its errors as the host's.
    async fn ask_host<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, ErrorData> {
        tokio::time::timeout(self.shared.timeout, request)
            .await
            .map_err(|_| ErrorData::internal_error("the host did not answer in time", None))?
            .map_err(upstream_error)
    }
}

fn upstream_error(e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("the host: {other}"), None),
    }
}

impl rmcp::ClientHandler for Downstream {
    fn get_info(&self) -> ClientConfig {
        let tools = self.shared.model.capabilities().tools;
        let sampling = if tools {
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_sampling_tools()
                .enable_roots()
                .enable_elicitation()
                .build()
        } else {
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_roots()
                .enable_elicitation()
                .build()
        };
        ClientConfig::new(
            sampling,
            Implementation::new("agent-as-model-bridge", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        if !self.shared.serving_host() {
            return Err(ErrorData::invalid_request(
                "sampling/createMessage refused: no request from the host is in flight, and a \
                 server's sampling request must belong to one (MCP 2025-11-25)",
                None,
            ));
        }
        self.within_limits(&params)?;
        let _slot = self
            .shared
            .sampling
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                ErrorData::new(
                    rmcp::model::ErrorCode(-32000),
                    format!(
                        "bridge busy: {} sampling requests are being answered, the most at once \
                         (AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT); retry shortly",
                        self.shared.sampling_max
                    ),
                    None,
                )
            })?;
        let wants_tools = params.tools.is_some() || params.tool_choice.is_some();
        let host = self.host_with(|c| {
            c.sampling
                .as_ref()
                .is_some_and(|s| !wants_tools || s.tools.is_some())
        });
        match host {
            Some(host) => self.pass_up(host, params, ctx).await,
            None => self.answer(params, &ctx).await,
        }
    }

    async fn list_roots(
        &self,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let host = self
            .host_with(|c| c.roots.is_some())
            .ok_or_else(|| Self::unsupported("roots/list"))?;
        self.ask_host(host.list_roots()).await
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let host = self
            .host_with(|c| c.elicitation.is_some())
            .ok_or_else(|| Self::unsupported("elicitation/create"))?;
        self.ask_host(host.create_elicitation(request)).await
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        if let (Some(host), Some(_note)) = (self.shared.host(), self.shared.droppable_note()) {
            let _ = host.notify_progress(params).await;
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        if let (Some(host), Some(_note)) = (self.shared.host(), self.shared.droppable_note()) {
            let _ = host.notify_logging_message(params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        if let Some(host) = self.shared.host() {
            let _ = host.notify_resource_updated(params).await;
        }
    }

    async fn on_resource_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        if let Some(host) = self.shared.host() {
            let _ = host.notify_resource_list_changed().await;
        }
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        if let Some(host) = self.shared.host() {
            let _ = host.notify_tool_list_changed().await;
        }
    }

    async fn on_prompt_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        if let Some(host) = self.shared.host() {
            let _ = host.notify_prompt_list_changed().await;
        }
    }
}
