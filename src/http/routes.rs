//! The routes of the model APIs beside `/mcp`, behind the APIs' token: every route each API of
//! the registry ([`crate::api::registry::ALL`]) declares, answered by the handler its endpoint
//! names (the ones every API shares in [`super::api`]; an API's own in its file:
//! [`super::ollama`], the Responses WebSocket and `/compact`), with the embeddings,
//! `/metrics` and the web page ([`super::ui`], whose own files need no token).

use super::Routes;
use super::api::{self, Share};
use crate::api::dialect::{Endpoint, Method, Route};
use crate::api::registry;
use crate::api::{Api, Dialect};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::routing::{MethodFilter, MethodRouter, get, on};
use std::sync::Arc;

/// The model APIs' routes, answered by `api`.
pub fn routes(state: Arc<Api>) -> Routes {
    Routes {
        router: router(state, registry::ALL),
        auth: super::ui::page_or_api_key,
        unknown: Some(api::unknown_route),
        page: Some("/ui"),
    }
}

/// The routes of every API in `registry`, then the embeddings, `/metrics` and the page; a
/// method a route does not take is a 405 in the envelope of the API the path is `registry`'s.
pub fn router(state: Arc<Api>, registry: &'static [Dialect]) -> Router {
    let mut router = Router::new();
    for dialect in registry {
        for route in dialect.routes() {
            router = router.route(route.path, handler(route, *dialect));
        }
    }
    router
        .route("/metrics", get(api::metrics))
        .merge(super::embeddings::routes())
        .merge(super::transcriptions::routes())
        .merge(super::ui::routes())
        .method_not_allowed_fallback(move |method, uri: Uri, headers: HeaderMap| {
            api::wrong_method(registry, method, uri, headers)
        })
        .with_state(state)
}

/// The handler of `route`, an endpoint of `dialect`.
fn handler(route: &Route, dialect: Dialect) -> MethodRouter<Arc<Api>> {
    let filter = match route.method {
        Method::Get => MethodFilter::GET,
        Method::Head => MethodFilter::HEAD,
        Method::Post => MethodFilter::POST,
        Method::Delete => MethodFilter::DELETE,
    };
    shared(filter, route.endpoint, dialect).unwrap_or_else(|| own(filter, route.endpoint, dialect))
}

/// The handlers every API may use, answering as `dialect`.
fn shared(filter: MethodFilter, endpoint: Endpoint, d: Dialect) -> Option<MethodRouter<Arc<Api>>> {
    Some(match endpoint {
        Endpoint::Create => on(
            filter,
            move |State(api): State<Arc<Api>>, held: Share, body: Bytes| {
                api::create(api, d, held, body)
            },
        ),
        Endpoint::CountTokens => on(filter, move |State(api): State<Arc<Api>>, body: Bytes| {
            api::count(api, d, body, None)
        }),
        Endpoint::Models => on(filter, move |State(api): State<Arc<Api>>| {
            api::models_of(api, d)
        }),
        Endpoint::Model => on(
            filter,
            move |State(api): State<Arc<Api>>, Path(name): Path<String>| async move {
                api::model_of(api, d, &name).await
            },
        ),
        Endpoint::ModelsByHeader => on(filter, api::models),
        Endpoint::ModelByHeader => on(filter, api::model),
        Endpoint::OllamaAnswer => on(
            filter,
            move |State(api): State<Arc<Api>>, held: Share, body: Bytes| {
                super::ollama::answer(api, d, held, body)
            },
        ),
        _ => return None,
    })
}

/// The handlers of one API's own endpoints.
fn own(filter: MethodFilter, endpoint: Endpoint, d: Dialect) -> MethodRouter<Arc<Api>> {
    use super::ollama;
    match endpoint {
        Endpoint::ResponsesCreate => on(filter, api::responses),
        Endpoint::ResponsesSocket => on(filter, super::responses_ws::upgrade),
        Endpoint::ResponsesCompact => on(filter, super::compact::compact),
        Endpoint::ResponsesTokens => on(filter, api::responses_tokens),
        Endpoint::ResponsesGet => on(filter, api::responses_get),
        Endpoint::ResponsesDelete => on(filter, api::responses_delete),
        Endpoint::ResponsesInputItems => on(filter, api::responses_input_items),
        Endpoint::MessagesCreate => on(filter, super::threads::create),
        Endpoint::GeminiMethod => on(filter, api::gemini),
        Endpoint::OllamaRunning => on(filter, ollama::running),
        Endpoint::OllamaVersion => on(filter, ollama::version),
        Endpoint::OllamaTags => on(filter, ollama::tags),
        Endpoint::OllamaShow => on(filter, ollama::show),
        Endpoint::OllamaPs => on(filter, ollama::ps),
        Endpoint::OllamaPull => on(filter, ollama::pull),
        Endpoint::OllamaDelete => on(filter, ollama::remove),
        Endpoint::OllamaNotHere => on(filter, ollama::not_here),
        // The shared endpoints, answered by [`shared`].
        Endpoint::Create
        | Endpoint::CountTokens
        | Endpoint::Models
        | Endpoint::Model
        | Endpoint::ModelsByHeader
        | Endpoint::ModelByHeader
        | Endpoint::OllamaAnswer => shared(filter, endpoint, d).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApiError, Encode, Opening, Prepared, Wire};
    use crate::service::Answered;
    use axum::body::Body;
    use axum::http::Request;
    use serde_json::{Map, Value, json};
    use tower::ServiceExt;

    /// A sixth API, all in this module: one route, its own envelope, a step before parsing.
    struct Echo;

    impl Wire for Echo {
        fn id(&self) -> &'static str {
            "echo"
        }
        fn metric(&self) -> crate::metrics::Api {
            crate::metrics::Api::Chat
        }
        fn shape(&self) -> &'static dyn crate::shapes::Shape {
            &crate::shapes::openai_chat::ChatComplete
        }
        fn routes(&self) -> &'static [Route] {
            const ROUTES: &[Route] = &[Route::post("/v1/echo", Endpoint::Create)];
            ROUTES
        }
        fn claims(&self, path: &str) -> bool {
            path.starts_with("/v1/echo")
        }
        fn error_body(&self, e: &ApiError) -> Value {
            json!({"echo_error": {"status": e.status, "said": e.message}})
        }
        fn prepare(&self, _body: &mut Map<String, Value>, _model: Option<&str>, p: &mut Prepared) {
            p.warnings.push("prepared by echo".into());
        }
        fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
            crate::api::chat::DIALECT.encoder(o)
        }
        fn whole(&self, _o: &Opening<'_>, answered: &Answered) -> Value {
            json!({"echo": answered.report.entry})
        }
    }

    const ECHO: Dialect = crate::api::dialect::of(&Echo);

    fn app(registry: &'static [Dialect]) -> Router {
        let service = crate::service::Service::new(
            crate::limits::Limits::default(),
            crate::routing::Backends::default(),
            std::time::Duration::from_secs(1),
        );
        let api = Api::new(
            Arc::new(service),
            Arc::new(tokio::sync::Semaphore::new(4)),
            4,
            std::time::Duration::from_secs(5),
        );
        router(Arc::new(api), registry)
    }

    async fn send(app: Router, method: &str, path: &str) -> (u16, Option<String>, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
            ))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let warnings = response
            .headers()
            .get("x-agent-as-model-warnings")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            warnings,
            serde_json::from_slice(&body).unwrap_or_default(),
        )
    }

    /// A sixth API is its module and one line of the registry: its route is served, its
    /// request prepared by it, its errors (a 405 and a path of its own no route serves)
    /// written in its envelope.
    #[tokio::test]
    async fn a_sixth_api_is_one_line_of_the_registry() {
        let mut registry = registry::ALL.to_vec();
        registry.insert(registry.len() - 1, ECHO);
        let registry: &'static [Dialect] = Vec::leak(registry);

        // No backend answers here: the request reaches its parse, refused in its envelope.
        let (status, warnings, body) = send(app(registry), "POST", "/v1/echo").await;
        assert_eq!(status, 501, "{body}");
        assert_eq!(body["echo_error"]["status"], 501, "{body}");
        assert_eq!(warnings.as_deref(), Some("prepared by echo"));

        let (status, _, body) = send(app(registry), "GET", "/v1/echo").await;
        assert_eq!(status, 405);
        assert!(
            body["echo_error"]["said"]
                .as_str()
                .unwrap()
                .contains("GET /v1/echo")
        );

        let has = |_: &str| false;
        assert_eq!(registry::of_path(registry, "/v1/echo/x", &has), Some(ECHO));
        // Without its line, the API is not there: its path is OpenAI's 404.
        assert_eq!(
            registry::of_path(registry::ALL, "/v1/echo/x", &has),
            Some(crate::api::chat::DIALECT)
        );
        // (The server's fallback writes that 404; the routes alone have none.)
        let (status, _, body) = send(app(registry::ALL), "POST", "/v1/echo").await;
        assert_eq!(status, 404, "{body}");
    }

    /// The registry's routes and claims give the dialect of each path as before.
    #[test]
    fn each_path_has_the_dialect_it_had() {
        let none = |_: &str| false;
        let of = |path| registry::of_path(registry::ALL, path, &none);
        assert_eq!(of("/api/tags"), Some(crate::api::ollama::CHAT));
        assert_eq!(of("/"), Some(crate::api::ollama::CHAT));
        assert_eq!(of("/v1/messages/x"), Some(crate::api::messages::DIALECT));
        assert_eq!(of("/v1beta/models"), Some(crate::api::gemini::DIALECT));
        assert_eq!(
            of("/v1/models/m:generateContent"),
            Some(crate::api::gemini::DIALECT)
        );
        assert_eq!(of("/v1/responses/x"), Some(crate::api::responses::DIALECT));
        assert_eq!(of("/v1/completions/x"), Some(crate::api::chat::DIALECT));
        assert_eq!(of("/v1/models"), Some(crate::api::chat::DIALECT));
        let goog = |h: &str| h == "x-goog-api-key";
        let anthropic = |h: &str| h == "anthropic-version";
        assert_eq!(
            registry::of_path(registry::ALL, "/v1/models/x", &goog),
            Some(crate::api::gemini::DIALECT)
        );
        assert_eq!(
            registry::of_path(registry::ALL, "/v1/models", &anthropic),
            Some(crate::api::messages::DIALECT)
        );
    }
}
