//! `POST /v1/messages` with a `thread` (Anthropic's message threads, see [`crate::api::threads`]):
//! a continue's stored conversation loaded (counted against the body [`Budget`] as a
//! `previous_response_id`'s is) and put before the request's messages, the call answered as any
//! other message, whole or streamed, and the conversation with its reply kept under the reply's
//! `id` before the answer ends.

use super::api::{
    Budgets, Holding, Loads, Share, admitted_object, complete, error, joined, json_body, noted,
    parse_checked, serialized, streamed, values_of, with_warnings,
};
use super::body::{Budget, CALL_COPIES, Held};
use crate::api::threads::{self, Conversation, Keep, Thread, Threaded};
use crate::api::{Api, ApiError, Dialect, ErrorKind, Prepared, messages};
use crate::metrics::Record;
use crate::service::Parsed;
use axum::body::Bytes;
use axum::response::Response;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

const DIALECT: Dialect = messages::DIALECT;

/// `POST /v1/messages`; one with a `thread` (Anthropic's message threads) is answered by
/// the functions below.
pub(super) async fn create(
    axum::extract::State(api): axum::extract::State<Arc<Api>>,
    axum::Extension(budget): Budgets,
    held: Share,
    body: Bytes,
) -> Response {
    let mut record = api.record(DIALECT);
    let response = if may_thread(&body) {
        messages(api, &budget, held, body, &mut record).await
    } else {
        complete(api, DIALECT, body, None, false, held, &mut record).await
    };
    noted(record, response)
}

/// Whether a body may carry a `thread`: its key, in quotes, is somewhere in it. Bodies that do
/// not are answered as before, read once.
pub(super) fn may_thread(body: &[u8]) -> bool {
    body.windows(8).any(|w| w == b"\"thread\"")
}

/// Answers a `POST /v1/messages` whose body may carry a `thread`; one that carries none (or
/// `null`) is answered as any message.
pub(super) async fn messages(
    api: Arc<Api>,
    budget: &Budget,
    held: Share,
    body: Bytes,
    record: &mut Record,
) -> Response {
    let (admitted, mut map) = match admitted_object(&api, DIALECT, body.clone()).await {
        Ok(read) => read,
        Err(refused) => return *refused,
    };
    let thread = match threads::read(&mut map) {
        Ok(Some(thread)) => thread,
        Ok(None) => {
            drop((admitted, map));
            return complete(api, DIALECT, body, None, false, held, record).await;
        }
        Err(e) => return error(DIALECT, &e, &[]),
    };
    drop(body);
    if api.store.keeps_nothing() {
        return error(DIALECT, &threads::unsupported(), &[]);
    }
    let mut loaded = Held::default();
    if let Thread::Continue(previous) = &thread {
        let loads = Loads {
            budget,
            values: values_of(&held),
        };
        let (conversation, share) = match load(&api, loads, previous).await {
            Ok(found) => found,
            Err(e) => return error(DIALECT, &e, &[]),
        };
        loaded = share;
        if let Err(e) = threads::follow(&mut map, conversation) {
            return error(DIALECT, &e, &[]);
        }
    }
    let keep = Keep {
        store: api.store.clone(),
        conversation: Conversation::of_request(&map),
    };
    let (prepared, call) = match parse_checked(&api, DIALECT, map, None, false).await {
        Ok(parsed) => parsed,
        Err(refused) => return error(DIALECT, &refused.error, &refused.warnings),
    };
    let holding = Holding {
        _call: admitted,
        _body: joined(held, loaded),
    };
    answer(api, prepared, call, holding, keep, record).await
}

/// The conversation kept under the message `id`, with the buffer's share of it: its text,
/// counted before it is read from the store, and what parsing it and the call's copies of it
/// take; or `thread_not_found`.
async fn load(api: &Api, loads: Loads<'_>, id: &str) -> Result<(Conversation, Held), ApiError> {
    let failed = |e: crate::api::store::StoreError| ApiError {
        retry_after: Some(1),
        ..ApiError::new(503, ErrorKind::Overloaded, e.to_string())
    };
    let what = "the thread's stored conversation";
    let key = threads::key(id);
    let Some(size) = api.store.size(&key).await.map_err(failed)? else {
        return Err(threads::not_found(id));
    };
    let mut held = loads.budget.hold(size).map_err(|e| e.api_error(what))?;
    let Some(text) = api.store.get(&key).await.map_err(failed)? else {
        return Err(threads::not_found(id));
    };
    let copies = CALL_COPIES.saturating_sub(1);
    let parsed = loads
        .budget
        .hold_json(text.as_bytes(), copies, loads.values)
        .map_err(|e| e.api_error(what))?;
    held.join(parsed);
    let conversation = serde_json::from_str(&text).map_err(|e| {
        ApiError::new(
            500,
            ErrorKind::Api,
            format!(
                "the thread of {} could not be read: {e}",
                crate::error::clip(id)
            ),
        )
    })?;
    Ok((conversation, held))
}

/// The message, whole or streamed, its conversation kept once it is made.
async fn answer(
    api: Arc<Api>,
    mut prepared: Prepared,
    call: Parsed,
    holding: Holding,
    keep: Keep,
    record: &mut Record,
) -> Response {
    let (model, stop) = (api.model_name(&call), call.request.stop.clone());
    if prepared.stream {
        // A stream's head is written before the answer's report: what parsing set aside.
        prepared.warnings.extend(call.warnings.iter().cloned());
        let input_tokens = api
            .count_tokens(&call)
            .await
            .unwrap_or_else(|_| call.prompt_tokens_estimate());
        let encoder = messages::Encoder::new(&model, &stop, input_tokens);
        let encode = Box::new(Threaded::new(encoder, keep));
        let record = record.hand_on();
        return streamed(api, DIALECT, prepared, call, holding, encode, record).await;
    }
    let cancel = CancellationToken::new();
    let mut warnings = prepared.warnings;
    api.aim(record, &call);
    let answer = api.answer(&call, &cancel, None).await;
    api.note(record, &answer);
    drop(holding);
    match answer {
        Ok(answered) => {
            warnings.extend(answered.report.warnings);
            let message = messages::Encoder::new(&model, &stop, 0).whole(&answered.finished);
            keep.save(&message).await;
            with_warnings(json_body(serialized(&message)), &warnings)
        }
        Err(e) => error(DIALECT, &e, &warnings),
    }
}

#[cfg(test)]
mod tests {
    use super::may_thread;

    #[test]
    fn only_a_body_with_the_key_in_quotes_is_read_for_a_thread() {
        assert!(may_thread(br#"{"thread": {"type": "create"}}"#));
        assert!(!may_thread(
            br#"{"messages": [{"content": "a \"thread\" of"}]}"#
        ));
        assert!(!may_thread(b"{}"));
    }
}
