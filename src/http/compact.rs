//! `POST /v1/responses/compact` (see [`crate::api::compact`]): the conversation summarized by
//! the model the request names, under the same cap on calls in flight and the same parsing as
//! `POST /v1/responses`, answered as a `response.compaction` object. Nothing is stored.

use super::api::{
    Holding, Share, admitted_object, error, json_body, noted, parse_checked, previous_response,
    serialized, with_warnings,
};
use crate::api::compact;
use crate::api::responses::input_items;
use crate::api::{Api, ApiError, Dialect};
use crate::metrics::Record;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `POST /v1/responses/compact`: `model` (required), `input` and/or `previous_response_id`,
/// `instructions`.
pub(super) async fn compact(State(api): State<Arc<Api>>, held: Share, body: Bytes) -> Response {
    let mut record = api.record(Dialect::Responses);
    let response = summarize(api, held, body, &mut record).await;
    noted(record, response)
}

async fn summarize(api: Arc<Api>, held: Share, body: Bytes, record: &mut Record) -> Response {
    let dialect = Dialect::Responses;
    let (admitted, map) = match admitted_object(&api, dialect, body).await {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let param = |name: &str, message: &str| ApiError {
        param: Some(name.into()),
        ..ApiError::invalid(message)
    };
    let model = match map.get("model") {
        Some(Value::String(model)) if !model.trim().is_empty() => model.clone(),
        _ => {
            let e = param(
                "model",
                "`model` is required: the model that summarizes the conversation",
            );
            return error(dialect, &e, &[]);
        }
    };
    let mut conversation = Vec::new();
    if let Some(previous) = map.get("previous_response_id").filter(|v| !v.is_null()) {
        match previous_response(&api, previous).await {
            Ok(stored) => conversation = stored.conversation(),
            Err(e) => return error(dialect, &e, &[]),
        }
    }
    conversation.extend(input_items(map.get("input")));
    if conversation.is_empty() {
        let e = param(
            "input",
            "nothing to compact: give the conversation as `input`, name a stored response by \
             `previous_response_id`, or both",
        );
        return error(dialect, &e, &[]);
    }
    let instructions = map.get("instructions").and_then(Value::as_str);
    let request = compact::summary_request(&model, instructions, &conversation);
    drop(map);
    let (prepared, call) = match parse_checked(&api, dialect, request, None, false).await {
        Ok(parsed) => parsed,
        Err(refused) => return error(dialect, &refused.error, &refused.warnings),
    };
    let holding = Holding {
        _call: admitted,
        _body: held,
    };
    let mut warnings = prepared.warnings;
    // A client that goes away drops this future, and with it the work.
    let cancel = CancellationToken::new();
    api.aim(record, &call);
    let answer = api.answer(dialect, &call, &cancel, None).await;
    api.note(record, &answer);
    drop(holding);
    match answer {
        Ok(answered) => {
            warnings.extend(answered.report.warnings);
            let summary = compact::summary_of(&answered.finished.answer);
            let output = compact::compacted(&conversation, &summary);
            let resource = compact::resource(output, answered.finished.usage.into());
            with_warnings(json_body(serialized(&resource)), &warnings)
        }
        Err(e) => error(dialect, &e, &warnings),
    }
}
