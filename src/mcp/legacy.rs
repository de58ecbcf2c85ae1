//! The legacy era (up to 2025-11-25): `sampling/createMessage` sent to the client during the
//! tool call, with a bounded wait. If the client cancels the tool call, the sampling request is
//! cancelled towards the host as well.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577.

use crate::error::{CallError, CallResult};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ServerNotification, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RoleServer, ServiceError};
use std::time::Duration;

pub async fn sample(
    ctx: &RequestContext<RoleServer>,
    params: CreateMessageRequestParams,
    timeout: Duration,
) -> CallResult<CreateMessageResult> {
    let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
    let handle = ctx
        .peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| describe(e, timeout))?;
    let id = handle.id.clone();
    let answer = tokio::select! {
        answer = handle.await_response() => answer,
        () = ctx.ct.cancelled() => {
            let cancel = CancelledNotification::new(CancelledNotificationParam::new(
                Some(id),
                Some("the tool call that asked for this completion was cancelled".into()),
            ));
            let _ = ctx.peer.send_notification(ServerNotification::CancelledNotification(cancel)).await;
            return Err(CallError::Host("the tool call was cancelled by the client".into()));
        }
    };
    match answer.map_err(|e| describe(e, timeout))? {
        ClientResult::CreateMessageResult(r) => Ok(*r),
        other => Err(CallError::Host(format!(
            "the host answered sampling/createMessage with something that is not a \
             CreateMessageResult: {}",
            serde_json::to_string(&other).unwrap_or_else(|_| "(unprintable)".into())
        ))),
    }
}

fn describe(e: ServiceError, timeout: Duration) -> CallError {
    CallError::Host(match e {
        ServiceError::McpError(err) => format!(
            "the host refused or failed sampling/createMessage with error {}: {}",
            err.code.0, err.message
        ),
        ServiceError::Timeout { .. } => format!(
            "the host did not answer sampling/createMessage within {} s (set \
             AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS to wait longer); the request was cancelled",
            timeout.as_secs()
        ),
        ServiceError::TransportClosed => {
            "the connection to the host closed before it answered sampling/createMessage".into()
        }
        other => format!("sampling/createMessage failed: {other}"),
    })
}
