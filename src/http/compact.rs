//! `POST /v1/responses/compact` (see [`crate::api::compact`]): the conversation summarized by
//! the model the request names, under the same cap on calls in flight and the same parsing as
//! `POST /v1/responses`, answered as a `response.compaction` object. Nothing is stored.

use super::api::{
    Budgets, Holding, Loads, Share, admitted_object, error, joined, json_body, noted,
    parse_checked, previous_response, serialized, values_of, with_warnings,
};
use super::body::{Budget, Held};
use crate::api::responses::input_items;
use crate::api::{Api, ApiError};
use crate::api::{compact, responses};
use crate::metrics::Record;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `POST /v1/responses/compact`: `model` (required), `input` and/or `previous_response_id`,
/// `instructions`.
pub(super) async fn compact(
    State(api): State<Arc<Api>>,
    Extension(budget): Budgets,
    held: Share,
    body: Bytes,
) -> Response {
    let mut record = api.record(responses::DIALECT);
    let response = summarize(api, &budget, held, body, &mut record).await;
    noted(record, response)
}

async fn summarize(
    api: Arc<Api>,
    budget: &Budget,
    held: Share,
    body: Bytes,
    record: &mut Record,
) -> Response {
    let dialect = responses::DIALECT;
    let (admitted, map) = match admitted_object(&api, dialect, body).await {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let model = match map.get("model") {
        Some(Value::String(model)) if !model.trim().is_empty() => model.clone(),
        _ => {
            let e = invalid(
                "model",
                "`model` is required: the model that summarizes the conversation",
            );
            return error(dialect, &e, &[]);
        }
    };
    let loads = Loads {
        budget,
        values: values_of(&held),
    };
    let (conversation, loaded) = match conversation(&api, loads, &map).await {
        Ok(gathered) => gathered,
        Err(e) => return error(dialect, &e, &[]),
    };
    let instructions = map.get("instructions").and_then(Value::as_str);
    let request = compact::summary_request(&model, instructions, &conversation);
    drop(map);
    let (prepared, call) = match parse_checked(&api, dialect, request, None, false).await {
        Ok(parsed) => parsed,
        Err(refused) => return error(dialect, &refused.error, &refused.warnings),
    };
    let holding = Holding {
        _call: admitted,
        _body: joined(held, loaded),
    };
    let mut warnings = prepared.warnings;
    // A client that goes away drops this future, and with it the work.
    let cancel = CancellationToken::new();
    api.aim(record, &call);
    let answer = api.answer(&call, &cancel, None).await;
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

/// `field` at fault, and why.
fn invalid(field: &str, message: &str) -> ApiError {
    ApiError {
        param: Some(field.into()),
        ..ApiError::invalid(message)
    }
}

/// The conversation to compact: the stored one `previous_response_id` names (with the
/// buffer's share of it), then the request's `input`; an error when both are missing.
async fn conversation(
    api: &Api,
    loads: Loads<'_>,
    map: &serde_json::Map<String, Value>,
) -> Result<(Vec<Value>, Held), ApiError> {
    let mut conversation = Vec::new();
    let mut loaded = Held::default();
    if let Some(previous) = map.get("previous_response_id").filter(|v| !v.is_null()) {
        let (stored, share) = previous_response(api, loads, previous).await?;
        conversation = stored.conversation();
        loaded = share;
    }
    conversation.extend(input_items(map.get("input")));
    if conversation.is_empty() {
        return Err(invalid(
            "input",
            "nothing to compact: give the conversation as `input`, name a stored response by \
             `previous_response_id`, or both",
        ));
    }
    Ok((conversation, loaded))
}
