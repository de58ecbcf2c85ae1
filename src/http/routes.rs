//! The routes of the model APIs, Ollama's and the embeddings beside `/mcp`: which path each
//! handler answers ([`super::api`] for OpenAI's, Anthropic's and Gemini's, [`super::ollama`],
//! [`super::embeddings`], the Responses WebSocket and `/compact`), behind the APIs' token.

use super::Routes;
use super::api;
use crate::api::Api;
use axum::Router;
use axum::routing::{get, post};
use std::sync::Arc;

/// The model APIs' routes, answered by `api`.
pub fn routes(state: Arc<Api>) -> Routes {
    let router = Router::new()
        .merge(super::ollama::router())
        .route("/v1/chat/completions", post(api::chat))
        .route("/v1/completions", post(api::text_completions))
        .route(
            "/v1/responses",
            get(super::responses_ws::upgrade).post(api::responses),
        )
        .route("/v1/responses/compact", post(super::compact::compact))
        .route("/v1/responses/input_tokens", post(api::responses_tokens))
        .route(
            "/v1/responses/{id}",
            get(api::responses_get).delete(api::responses_delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(api::responses_input_items),
        )
        .route("/v1/messages", post(api::messages))
        .route("/v1/messages/count_tokens", post(api::messages_tokens))
        .route("/v1/models", get(api::models))
        .route("/v1/models/{name}", get(api::model).post(api::gemini))
        .route("/v1beta/models", get(api::gemini_models))
        .route(
            "/v1beta/models/{name}",
            get(api::gemini_model).post(api::gemini),
        )
        .route("/metrics", get(api::metrics))
        .merge(super::embeddings::routes())
        .method_not_allowed_fallback(api::wrong_method)
        .with_state(state);
    Routes {
        router,
        auth: api::api_key,
        unknown: Some(api::unknown_route),
    }
}
