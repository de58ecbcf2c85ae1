//! The floor both benches compare against: a minimal rmcp server whose one tool, `generate`,
//! does only the protocol work a call needs. On the legacy era one `sampling/createMessage` to
//! the host and its answer; on 2026-07-28 one `InputRequiredResult` asking for a sample, then
//! the answer. It passes the call's conversation through as it is (`prompt`, or each of
//! `messages` as a text message) and an `output_schema` as a `structured_output` tool, so the
//! host gets the same payload from the floor as from the server measured: no checking,
//! validation or rendering, but the same bytes to carry.

use rmcp::model::*;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;
use std::sync::Arc;

#[derive(Clone)]
pub struct Floor;

/// The sampling request for a call's arguments: the conversation and schema passed through.
fn floor_params(arguments: Option<&JsonObject>) -> CreateMessageRequestParams {
    let get = |key: &str| arguments.and_then(|a| a.get(key));
    let mut messages: Vec<SamplingMessage> = match (get("messages"), get("prompt")) {
        (Some(serde_json::Value::Array(items)), _) => items
            .iter()
            .map(|m| {
                let text = match &m["content"] {
                    serde_json::Value::String(t) => t.clone(),
                    other => other.to_string(),
                };
                if m["role"] == "assistant" {
                    SamplingMessage::assistant_text(text)
                } else {
                    SamplingMessage::user_text(text)
                }
            })
            .collect(),
        (_, Some(serde_json::Value::String(p))) => vec![SamplingMessage::user_text(p.clone())],
        _ => Vec::new(),
    };
    if messages.is_empty() {
        messages.push(SamplingMessage::user_text("x"));
    }
    let params = CreateMessageRequestParams::new(messages, 16);
    match get("output_schema").and_then(|s| s.as_object()) {
        Some(schema) => params.with_tools(vec![Tool::new(
            "structured_output",
            "the answer",
            Arc::new(schema.clone()),
        )]),
        None => params,
    }
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
                .create_message(floor_params(request.arguments.as_ref()))
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
                    InputRequest::CreateMessage(CreateMessageRequest::new(floor_params(
                        request.arguments.as_ref(),
                    ))),
                );
                Ok(InputRequiredResult::new(Some(reqs), Some("floor".into())).into())
            }
        }
    }
}
