//! The embeddings routes: OpenAI's `POST /v1/embeddings`, Ollama's `POST /api/embed` and legacy
//! `POST /api/embeddings`; Gemini's `:embedContent` and `:batchEmbedContents` are methods of
//! its model paths, answered in `super::api`. Each reads its body with [`crate::api::embeddings`],
//! has the service make the vectors, and writes them (or its API's error) back. Ollama's two
//! resolve the model's name as its other routes do (`super::ollama::called`): the same names,
//! the same 404.

use super::api::{error, json_body, read_object};
use crate::api::embeddings::{self, Asked};
use crate::api::{Api, ApiError};
use crate::backends::direct::Embeddings;
use crate::error::CallResult;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;

/// The embeddings routes of OpenAI and Ollama.
pub fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/v1/embeddings", post(openai))
        .route("/api/embed", post(ollama))
        .route("/api/embeddings", post(ollama_legacy))
}

/// How a request of one API is read and answered.
struct Form {
    read: fn(&Map<String, Value>) -> CallResult<Asked>,
    write: fn(&Asked, &Embeddings, std::time::Duration) -> Value,
    /// Errors as Ollama writes them (`{"error": "..."}`) rather than in OpenAI's envelope.
    ollama: bool,
}

async fn openai(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let form = Form {
        read: embeddings::openai,
        write: |asked, made, _| embeddings::openai_object(asked, made),
        ollama: false,
    };
    answer(&api, &form, body).await
}

async fn ollama(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let form = Form {
        read: embeddings::ollama,
        write: |_, made, took| embeddings::ollama_object(made, took),
        ollama: true,
    };
    answer(&api, &form, body).await
}

async fn ollama_legacy(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let form = Form {
        read: embeddings::ollama_legacy,
        write: |_, made, _| embeddings::ollama_legacy_object(made),
        ollama: true,
    };
    answer(&api, &form, body).await
}

async fn answer(api: &Api, form: &Form, body: Bytes) -> Response {
    let started = Instant::now();
    let made = async {
        let _admitted = api.admit()?;
        let mut asked = (form.read)(&read_object(&body).await?)?;
        drop(body);
        if form.ollama {
            // Ollama's names resolve here as on its other routes: the same models, the same
            // 404 for a name none of them goes by.
            asked.model = super::ollama::called(api, &asked.model).inspect_err(|e| {
                let mut record = api
                    .service
                    .metrics()
                    .record(crate::metrics::Api::Embeddings);
                record.status(e.status);
            })?;
        }
        let made = api.embed(&asked).await?;
        Ok::<_, ApiError>((asked, made))
    };
    match made.await {
        Ok((asked, made)) => json_body((form.write)(&asked, &made, started.elapsed())),
        Err(e) if form.ollama => ollama_error(&e),
        Err(e) => error(crate::api::chat::DIALECT, &e, &[]),
    }
}

/// An error as Ollama's API writes it: the status, and `{"error": message}`.
pub(super) fn ollama_error(e: &ApiError) -> Response {
    let mut response = json_body(json!({"error": e.message}));
    *response.status_mut() =
        StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
}
