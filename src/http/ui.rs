//! The server's own web page, `GET /ui`: a chat with any model a call may name, answered over
//! the chat completions API as it streams, and a view of the engine (the models loaded, their
//! queues, and charts of the last minutes). Its files are plain ES modules and CSS under
//! `src/http/ui/`, built into the binary; the page loads nothing from any other origin, and its
//! Content-Security-Policy says so.
//!
//! The page's files are served without the token (the page asks for it and sends it with each
//! call, as the APIs take it); everything they call is behind it: the model APIs, and
//! `GET /ui/engine.json`, the numbers of the engine view as JSON, read from the backends and
//! the server's metrics.

use super::Token;
use crate::api::Api;
use crate::backends::direct::EngineStats;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What the page may load and call: its own files and APIs, the images a user attaches (read
/// in the browser as `data:` and `blob:` URLs), nothing else; no frame may hold it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The charts' span, and the time each of their points covers.
const WINDOW: Duration = Duration::from_secs(10 * 60);
const BUCKET: Duration = Duration::from_secs(10);

/// One file of the page: its name under `/ui/` (the page itself is `/ui`), its type, its text.
struct Asset {
    name: &'static str,
    kind: &'static str,
    text: &'static str,
}

impl Asset {
    const fn new(name: &'static str, kind: &'static str, text: &'static str) -> Asset {
        Asset { name, kind, text }
    }
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// The page's files.
const ASSETS: [Asset; 8] = [
    Asset::new("", HTML, include_str!("ui/index.html")),
    Asset::new("style.css", CSS, include_str!("ui/style.css")),
    Asset::new("app.js", JS, include_str!("ui/app.js")),
    Asset::new("api.js", JS, include_str!("ui/api.js")),
    Asset::new("chat.js", JS, include_str!("ui/chat.js")),
    Asset::new("markdown.js", JS, include_str!("ui/markdown.js")),
    Asset::new("engine.js", JS, include_str!("ui/engine.js")),
    Asset::new("chart.js", JS, include_str!("ui/chart.js")),
];

/// The page's size: every file's bytes.
pub fn page_bytes() -> usize {
    ASSETS.iter().map(|a| a.text.len()).sum()
}

/// The page's routes: `/ui` and its files (answered without the token, see
/// [`page_or_api_key`]), `/ui/` sent to `/ui`, and `/ui/engine.json`.
pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route(
            "/ui",
            get(|headers: HeaderMap| async move { serve(0, &headers) }),
        )
        .route("/ui/", get(|| async { moved() }))
        .route("/ui/engine.json", get(engine))
        .route("/ui/{file}", get(file))
}

/// The model APIs' token check ([`super::api::api_key`]), but for the page's own files, which
/// are served to anyone who passes the Host and Origin checks: they hold no secret, and the page
/// asks for the token before it calls anything.
pub(super) fn page_or_api_key(request: &Request, token: &Token) -> Option<Response> {
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    if read && is_page(request.uri().path()) {
        return None;
    }
    super::api::api_key(request, token)
}

/// Whether `path` is the page or one of its files.
fn is_page(path: &str) -> bool {
    match path.strip_prefix("/ui") {
        Some("" | "/") => true,
        Some(rest) => rest
            .strip_prefix('/')
            .is_some_and(|name| find(name).is_some()),
        None => false,
    }
}

/// The index of the file called `name`.
fn find(name: &str) -> Option<usize> {
    ASSETS
        .iter()
        .position(|a| !a.name.is_empty() && a.name == name)
}

/// `/ui/` is the page at `/ui` (relative, so that a proxy's prefix stays).
fn moved() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, HeaderValue::from_static("../ui"))],
    )
        .into_response()
}

/// `GET /ui/{file}`: one of the page's files, or a 404 naming the page.
async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match find(&name) {
        Some(at) => serve(at, &headers),
        None => (
            StatusCode::NOT_FOUND,
            "not found: the page is at /ui and holds no such file\n",
        )
            .into_response(),
    }
}

/// Each file's entity tag: a digest of its text, made once.
fn tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = Sha256::digest(a.text.as_bytes());
                format!("\"{}\"", hex::encode(digest.get(..12).unwrap_or_default()))
            })
            .collect()
    })
}

/// The file at `at` with its headers: its type, its tag (a 304 when the browser has it), no
/// caching without asking again, the security policy, and no sniffing or referrer.
fn serve(at: usize, headers: &HeaderMap) -> Response {
    let (Some(asset), Some(tag)) = (ASSETS.get(at), tags().get(at)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        Response::new(Body::from(asset.text))
    };
    let set = response.headers_mut();
    set.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.kind));
    if let Ok(tag) = HeaderValue::from_str(tag) {
        set.insert(header::ETAG, tag);
    }
    set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(set);
    response
}

/// The headers every answer of the page carries.
fn secure(set: &mut HeaderMap) {
    set.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    set.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    set.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    set.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// `GET /ui/engine.json`: every model a call may name, with what it can do and, for an
/// embedded model, its engine now (loaded or not, device, layers on the GPU, context, memory,
/// keep-alive left, queue and busy slots); the queue across the engines; and the calls of the
/// last ten minutes in ten-second points (tokens per second, time to the first token, the
/// share of the prompts a cache served).
async fn engine(State(api): State<Arc<Api>>) -> Response {
    let backends = api.service.backends();
    let metrics = api.service.metrics();
    let mut models = Vec::new();
    let mut engines: Vec<(*const (), EngineStats)> = Vec::new();
    for about in backends.models() {
        let Some(id) = about.get("id").and_then(Value::as_str) else {
            continue;
        };
        // The host's model answers MCP tool calls only, never these APIs.
        if about.get("owned_by").and_then(Value::as_str) == Some("host-agent") {
            continue;
        }
        let model = backends.direct_model(id);
        let stats = model.as_ref().and_then(|m| m.stats().engine);
        if let (Some(m), Some(s)) = (&model, stats) {
            let at = Arc::as_ptr(m).cast::<()>();
            if !engines.iter().any(|(seen, _)| *seen == at) {
                engines.push((at, s));
            }
        }
        let last = metrics.last_call(id).map(|t| t.elapsed());
        models.push(model_view(id, &about, stats, last));
    }
    let sum = |f: fn(&EngineStats) -> usize| engines.iter().map(|(_, s)| f(s)).sum::<usize>();
    let body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "models": models,
        "queue": {"waiting": sum(|s| s.queued), "busy": sum(|s| s.busy),
                  "slots": sum(|s| s.slots)},
        "recent": {"window_secs": WINDOW.as_secs(), "bucket_secs": BUCKET.as_secs(),
                   "points": metrics.recent(WINDOW, BUCKET)},
    });
    let mut response = super::api::json_body(body);
    let set = response.headers_mut();
    set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secure(set);
    response
}

/// One model as the page shows it: `about` is what its backend says of it, `stats` its engine
/// now (an embedded model's), `idle` the time since its last call ended.
fn model_view(
    id: &str,
    about: &Value,
    stats: Option<EngineStats>,
    idle: Option<Duration>,
) -> Value {
    let supports = |what: &str| about.get("supports").and_then(|s| s.get(what));
    let says = |what: &str| supports(what).and_then(Value::as_bool);
    let keep = about.get("keep_alive_secs").and_then(Value::as_u64);
    let loaded = stats.is_some_and(|s| s.loaded);
    // Seconds it stays loaded with no call (from its last call, else from now); null: for good.
    let left = keep
        .filter(|_| loaded)
        .map(|k| k.saturating_sub(idle.map_or(0, |d| d.as_secs())));
    json!({
        "id": id,
        "aliases": super::api::aliases(about),
        "backend": about.get("backend").and_then(Value::as_str).unwrap_or("provider"),
        "default": about.get("default").and_then(Value::as_bool).unwrap_or(false),
        "status": about.get("status"),
        "capabilities": {
            "chat": says("chat") != Some(false),
            "tools": says("tools") == Some(true),
            "structured_output": says("json_schema") == Some(true),
            "reasoning": says("reasoning"),
            "vision": says("images") == Some(true),
            "audio": says("audio") == Some(true),
            "embeddings": says("embeddings") == Some(true),
        },
        "context_tokens": about.get("context_tokens"),
        "device": about.pointer("/engine/device"),
        "gpu_layers": about.pointer("/engine/gpu_layers"),
        "keep_alive_secs": keep,
        "keep_alive_left_secs": left,
        "file_bytes": about.pointer("/file/bytes"),
        "engine": stats.map(|s| json!({
            "loaded": s.loaded, "queued": s.queued, "busy": s.busy, "slots": s.slots,
            "memory_bytes": s.memory_bytes, "kv_tokens": s.kv_tokens, "kv_cells": s.kv_cells,
        })),
    })
}

/// The page's URL as the start log names it: `path` at the listening address, a loopback one
/// when it listens on every address.
pub fn address(bind: std::net::SocketAddr, path: &str) -> String {
    let mut shown = bind;
    if bind.ip().is_unspecified() {
        let loopback: std::net::IpAddr = match bind {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        shown.set_ip(loopback);
    }
    format!("http://{shown}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_files_are_known_and_nothing_else() {
        for path in [
            "/ui",
            "/ui/",
            "/ui/app.js",
            "/ui/style.css",
            "/ui/markdown.js",
        ] {
            assert!(is_page(path), "{path}");
        }
        for path in [
            "/ui/engine.json",
            "/ui/nope.js",
            "/uix",
            "/ui//app.js",
            "/v1/models",
            "/",
        ] {
            assert!(!is_page(path), "{path}");
        }
    }

    #[test]
    fn a_file_has_its_type_tag_and_policy_and_a_known_tag_is_a_304() {
        let response = serve(find("app.js").unwrap(), &HeaderMap::new());
        assert_eq!(response.status(), 200);
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_TYPE], JS);
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let tag = headers[header::ETAG].clone();
        let mut asked = HeaderMap::new();
        asked.insert(header::IF_NONE_MATCH, tag);
        assert_eq!(serve(find("app.js").unwrap(), &asked).status(), 304);
    }

    /// Everything the page loads is its own: no URL of another origin in any file, no inline
    /// script or style (the policy would refuse them), and every module it imports is served.
    #[test]
    fn the_page_loads_only_its_own_files() {
        for asset in &ASSETS {
            for scheme in ["http://", "https://", "//cdn", "@import"] {
                assert!(
                    !asset.text.contains(scheme),
                    "{} holds {scheme}",
                    asset.name
                );
            }
            for (at, _) in asset.text.match_indices("from \"./") {
                let rest = &asset.text[at + 8..];
                let name = &rest[..rest.find('"').unwrap()];
                assert!(find(name).is_some(), "{} imports {name}", asset.name);
            }
        }
        let html = ASSETS[0].text;
        assert!(!html.contains("style=\""), "an inline style");
        assert!(!html.contains("<script>"), "an inline script");
        assert!(!html.contains("onclick"), "an inline handler");
        // Small: the README states its size.
        assert!(page_bytes() < 96 * 1024, "{}", page_bytes());
    }

    /// The README and the book say how big the page is, as it is now.
    #[test]
    fn the_readme_and_the_book_state_the_pages_size() {
        let digits = page_bytes().to_string();
        let mut spelled = String::new();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                spelled.push(',');
            }
            spelled.push(digit);
        }
        let said = format!("{spelled} bytes");
        for (name, text) in [
            ("README.md", include_str!("../../README.md")),
            ("docs/src/ui.md", include_str!("../../docs/src/ui.md")),
        ] {
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(text.contains(&said), "{name} does not say {said}");
        }
    }

    #[test]
    fn a_model_view_says_what_it_can_do_and_how_long_it_stays() {
        let about = json!({"id": "m", "aliases": ["a"], "backend": "local", "status": "ready",
            "keep_alive_secs": 300, "context_tokens": 4096,
            "engine": {"device": "CPU", "gpu_layers": "0"},
            "supports": {"tools": true, "json_schema": true, "images": false,
                         "reasoning": null, "embeddings": true, "chat": true}});
        let stats = EngineStats {
            loaded: true,
            slots: 2,
            busy: 1,
            memory_bytes: 7,
            ..EngineStats::default()
        };
        let view = model_view("m", &about, Some(stats), Some(Duration::from_secs(100)));
        assert_eq!(view["keep_alive_left_secs"], 200);
        assert_eq!(view["aliases"], json!(["a"]));
        assert_eq!(view["device"], "CPU");
        assert_eq!(view["engine"]["busy"], 1);
        assert_eq!(
            view["capabilities"],
            json!({"chat": true, "tools": true, "structured_output": true, "reasoning": null,
                   "vision": false, "audio": false, "embeddings": true})
        );
        // A provider: no engine, nothing about keep-alive; an embedding model makes no chat.
        let provider = json!({"id": "p", "supports": {"images": true}});
        let view = model_view("p", &provider, None, None);
        assert_eq!(view["backend"], "provider");
        assert_eq!(view["engine"], Value::Null);
        assert_eq!(view["keep_alive_left_secs"], Value::Null);
        assert_eq!(view["capabilities"]["vision"], true);
        let embedder = json!({"id": "e", "supports": {"chat": false, "embeddings": true}});
        assert_eq!(
            model_view("e", &embedder, None, None)["capabilities"]["chat"],
            false
        );
    }

    #[test]
    fn the_start_log_names_a_browsable_address() {
        assert_eq!(
            address("0.0.0.0:8000".parse().unwrap(), "/ui"),
            "http://127.0.0.1:8000/ui"
        );
        assert_eq!(
            address("[::]:9".parse().unwrap(), "/ui"),
            "http://[::1]:9/ui"
        );
        assert_eq!(
            address("192.0.2.1:80".parse().unwrap(), "/ui"),
            "http://192.0.2.1:80/ui"
        );
    }
}
