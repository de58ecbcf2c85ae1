//! OpenAI's `POST /v1/audio/transcriptions`: the multipart form (already read whole within the
//! request-body limit, as every body is) parsed by axum's `Multipart` (multer), its parts read by
//! [`crate::api::transcriptions`], the audio made a block of a chat call to the model `model`
//! routes to, answered as a chat completion is, and its text written back as `response_format`
//! asks. Admission under the cap on calls in flight, the body's share of the buffer, metrics (as
//! `api="transcriptions"`), warnings and OpenAI's error envelope are as on the other `/v1`
//! routes.

use super::api::{Share, error, json_body, noted, with_warnings};
use crate::api::transcriptions::{self, Format, MAX_PARTS, Part};
use crate::api::{Api, ApiError, chat};
use crate::metrics::Record;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::post;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The transcription route.
pub fn routes() -> Router<Arc<Api>> {
    Router::new().route("/v1/audio/transcriptions", post(transcribe))
}

async fn transcribe(State(api): State<Arc<Api>>, held: Share, request: Request) -> Response {
    let mut record = api
        .service
        .metrics()
        .record(crate::metrics::Api::Transcriptions);
    let response = answer(&api, held, request, &mut record).await;
    noted(record, response)
}

async fn answer(api: &Api, held: Share, request: Request, record: &mut Record) -> Response {
    let dialect = chat::DIALECT;
    let _admitted = match api.admit() {
        Ok(admitted) => admitted,
        Err(e) => return error(dialect, &e, &[]),
    };
    let asked = match parts(request).await.and_then(transcriptions::read) {
        Ok(asked) => asked,
        Err(e) => return error(dialect, &e, &[]),
    };
    let mut warnings = asked.warnings.clone();
    let call = match audio_block(api, &asked)
        .await
        .and_then(|audio| transcriptions::call(api, &asked, audio))
    {
        Ok(call) => call,
        Err(e) => return error(dialect, &e, &warnings),
    };
    // A client that goes away drops this future, and with it the work.
    let cancel = CancellationToken::new();
    api.aim(record, &call);
    let answer = api.answer(&call, &cancel, None).await;
    api.note(record, &answer);
    drop(call);
    drop(held);
    let answered = match answer {
        Ok(answered) => answered,
        Err(e) => {
            let e = transcriptions::refusal(e, &asked.model);
            return error(dialect, &e, &warnings);
        }
    };
    warnings.extend(answered.report.warnings.iter().cloned());
    warnings.extend(transcriptions::cut_short(&answered));
    let text = transcriptions::text_of(&answered);
    let response = match asked.format {
        Format::Text => {
            let mut response = Response::new(Body::from(text));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
        Format::Json | Format::VerboseJson => json_body(transcriptions::object(
            &asked,
            &text,
            answered.finished.usage,
        )),
    };
    with_warnings(response, &warnings)
}

/// The form's parts, at most [`MAX_PARTS`]; a body that is not `multipart/form-data`, or not
/// well formed, is a 400.
async fn parts(request: Request) -> Result<Vec<Part>, ApiError> {
    let mut form = Multipart::from_request(request, &()).await.map_err(|e| {
        ApiError::invalid(format!(
            "the request body must be multipart/form-data, as OpenAI's audio endpoints take it \
             (a `file` part and a `model` field): {}",
            e.body_text()
        ))
    })?;
    let mut parts = Vec::new();
    while let Some(field) = form.next_field().await.map_err(malformed)? {
        if parts.len() == MAX_PARTS {
            return Err(ApiError::invalid(format!(
                "the form has more than {MAX_PARTS} parts; a transcription request has a file \
                 and a few fields"
            )));
        }
        let name = field.name().map(str::to_owned);
        let file_name = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(str::to_owned);
        let data = field.bytes().await.map_err(malformed)?;
        parts.push(Part {
            name,
            file_name,
            content_type,
            data,
        });
    }
    Ok(parts)
}

fn malformed(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::invalid(format!(
        "the multipart/form-data body is malformed: {}",
        e.body_text()
    ))
}

/// The audio as a block of the call, checked against the media limit: encoded and hashed on
/// tokio's blocking threads when it is large, which the async runtime's threads must not spend.
async fn audio_block(
    api: &Api,
    asked: &transcriptions::Asked,
) -> Result<crate::call::Block, ApiError> {
    if asked.audio.data.len() <= crate::service::INLINE_PARSE_BYTES {
        return transcriptions::audio_block(&asked.audio, api.service.limits());
    }
    let (audio, service) = (asked.audio.clone(), api.service.clone());
    tokio::task::spawn_blocking(move || transcriptions::audio_block(&audio, service.limits()))
        .await
        .unwrap_or_else(|e| {
            Err(ApiError::new(
                500,
                crate::api::ErrorKind::Api,
                format!("reading the audio failed: {e}"),
            ))
        })
}
