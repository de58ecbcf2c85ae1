//! The floor both benches compare against: a minimal rmcp server whose one tool, `generate`,
//! does only the protocol work a call needs. On the legacy era one `sampling/createMessage` to
//! the host and its answer; on 2026-07-28 one `InputRequiredResult` asking for a sample, then
//! the answer. No parsing, checking or rendering.

use rmcp::model::*;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;
use std::sync::Arc;

#[derive(Clone)]
pub struct Floor;

fn floor_params() -> CreateMessageRequestParams {
    CreateMessageRequestParams::new(vec![SamplingMessage::user_text("x")], 16)
}

fn text_of(r: &CreateMessageResult) -> String {
    r.message
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

impl ServerHandler for Floor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("floor", "0"))
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"}).as_object().unwrap().clone();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "generate",
            "floor",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if !modern {
            let r = ctx
                .peer
                .create_message(floor_params())
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            return Ok(CallToolResult::success(vec![ContentBlock::text(text_of(&r))]).into());
        }
        match request
            .input_responses
            .as_ref()
            .and_then(|r| r.get("sample"))
        {
            Some(v) => {
                let r: CreateMessageResult = serde_json::from_value(v.clone())
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
                Ok(CallToolResult::success(vec![ContentBlock::text(text_of(&r))]).into())
            }
            None => {
                let mut reqs = InputRequests::new();
                reqs.insert(
                    "sample".into(),
                    InputRequest::CreateMessage(CreateMessageRequest::new(floor_params())),
                );
                Ok(InputRequiredResult::new(Some(reqs), Some("floor".into())).into())
            }
        }
    }
}
