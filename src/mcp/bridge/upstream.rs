//! The bridge's server side: what the host asks, passed to the downstream server unchanged,
//! with the downstream's answers and errors passed back as they are. Input-required rounds of a
//! 2026-07-28 downstream are driven here (the bridge answers them), so the host sees finished
//! results on either era.

#![allow(deprecated)] // Logging and resource subscriptions are deprecated by SEP-2577.

use super::Shared;
use crate::mcp::server::{Done, OnDone};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
    CancelledNotificationParam, ClientRequest, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig, ServerPeerInfo,
    ServerResult, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RoleServer};
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub struct Upstream {
    shared: Arc<Shared>,
    info: Arc<ServerPeerInfo>,
    /// Told when a tool call has ended, so the stdio framing frees its slot.
    on_done: OnDone,
}

impl Upstream {
    pub fn new(shared: Arc<Shared>, info: Arc<ServerPeerInfo>, on_done: OnDone) -> Self {
        Upstream {
            shared,
            info,
            on_done,
        }
    }

    /// Runs `request` against the downstream, bounded by the bridge's timeout; the host's peer
    /// is remembered first, so the downstream's requests and notifications can reach it.
    async fn forward<T, F, Fut>(
        &self,
        ctx: &RequestContext<RoleServer>,
        request: F,
    ) -> Result<T, ErrorData>
    where
        F: FnOnce(Arc<super::Client>) -> Fut,
        Fut: Future<Output = Result<T, rmcp::ServiceError>>,
    {
        self.shared.remember_host(ctx.peer.clone());
        let _in_flight = self.shared.host_request();
        let client = self.shared.client()?;
        match tokio::time::timeout(self.shared.timeout, request(client)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(rmcp::ServiceError::McpError(e))) => Err(e),
            Ok(Err(other)) => Err(ErrorData::internal_error(
                format!("the downstream server: {other}"),
                None,
            )),
            Err(_) => Err(ErrorData::internal_error(
                format!(
                    "the downstream server did not answer within {} s",
                    self.shared.timeout.as_secs()
                ),
                None,
            )),
        }
    }
}

/// One tool call downstream. On a 2026-07-28 downstream rmcp's client drives the
/// input-required rounds; on a legacy one the call is sent so that a cancellation by the host
/// is passed on (`notifications/cancelled`), and the downstream then cancels its own sampling.
async fn call_downstream(
    client: Arc<super::Client>,
    params: CallToolRequestParams,
    cancelled: CancellationToken,
) -> Result<CallToolResult, rmcp::ServiceError> {
    let modern = client
        .peer_info()
        .is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28);
    if modern {
        return client.call_tool(params).await;
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await?;
    let id = handle.id.clone();
    tokio::select! {
        answer = handle.await_response() => match answer? {
            ServerResult::CallToolResult(result) => Ok(result),
            _ => Err(rmcp::ServiceError::UnexpectedResponse),
        },
        () = cancelled.cancelled() => {
            let reason = Some("cancelled by the host".to_owned());
            let notice = CancelledNotificationParam::new(Some(id), reason.clone());
            let _ = client.notify_cancelled(notice).await;
            Err(rmcp::ServiceError::Cancelled { reason })
        }
    }
}

impl rmcp::ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        // The downstream's own name and version, so the host sees the server it asked for.
        let server = self.info.server_info.clone().unwrap_or_else(|| {
            Implementation::new("agent-as-model-bridge", env!("CARGO_PKG_VERSION"))
        });
        let mut config = ServerConfig::new(self.info.capabilities.clone()).with_server_info(server);
        if let Some(instructions) = &self.info.instructions {
            config = config.with_instructions(instructions.clone());
        }
        config
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        self.shared.remember_host(ctx.peer);
    }

    /// The host's roots changed: the downstream hears it too.
    async fn on_roots_list_changed(&self, _ctx: NotificationContext<RoleServer>) {
        if let Ok(client) = self.shared.client() {
            let _ = client.notify_roots_list_changed().await;
        }
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.forward(&ctx, |c| async move { c.list_tools(params).await })
            .await
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _done = Done(Some(&self.on_done), &ctx.id);
        let cancelled = ctx.ct.clone();
        self.forward(&ctx, |c| call_downstream(c, params, cancelled))
            .await
            .map(CallToolResponse::Complete)
    }

    async fn list_resources(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.forward(&ctx, |c| async move { c.list_resources(params).await })
            .await
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.forward(
            &ctx,
            |c| async move { c.list_resource_templates(params).await },
        )
        .await
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.forward(&ctx, |c| async move { c.read_resource(params).await })
            .await
            .map(ReadResourceResponse::Complete)
    }

    async fn subscribe(
        &self,
        params: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(&ctx, |c| async move { c.subscribe(params).await })
            .await
    }

    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(&ctx, |c| async move { c.unsubscribe(params).await })
            .await
    }

    async fn list_prompts(
        &self,
        params: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.forward(&ctx, |c| async move { c.list_prompts(params).await })
            .await
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.forward(&ctx, |c| async move { c.get_prompt(params).await })
            .await
            .map(GetPromptResponse::Complete)
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.forward(&ctx, |c| async move { c.complete(params).await })
            .await
    }

    async fn set_level(
        &self,
        params: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(&ctx, |c| async move { c.set_level(params).await })
            .await
    }
}
