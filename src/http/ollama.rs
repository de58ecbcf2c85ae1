//! Ollama's HTTP API, for the applications that find a local model through it (Open WebUI,
//! VS Code Copilot's Ollama provider, Continue, Zed, Home Assistant, n8n): `GET /` and
//! `/api/version` (the Ollama API version this server matches, [`VERSION`]), the model lists
//! (`/api/tags`, `/api/show`, `/api/ps`), `POST /api/chat` and `/api/generate` (answered as the
//! other APIs are, see [`crate::api::ollama`]), `POST /api/pull` (a configured model, or an
//! `hf:` file fetched into the cache with Ollama's progress lines), `DELETE /api/delete` (a
//! fetched file no configured model answers from). Errors are Ollama's `{"error": "..."}`. A
//! name resolves the same way on every Ollama route, embeddings included ([`called`]): every
//! name `/api/tags` lists, with or without `:latest`, and the default name; any other is a 404
//! `model 'NAME' not found`. A failed pull names its `hf:` file and no path of the cache.

use super::api::{
    Holding, Share, admitted_object, error, json_body, noted, parse_checked, streamed,
    with_warnings,
};
use crate::api::ollama::{Encoder, Ollama, model_named, translate};
use crate::api::{Admitted, Api, ApiError, Dialect, ErrorKind, Prepared};
use crate::backends::direct::Model;
use crate::call::Call;
use crate::config::RequestKeepAlive;
use crate::local::{fetch, hub};
use crate::metrics::Record;
use crate::routing::pulled::{DeleteError, PullError};
use crate::service::Answered;
use crate::shapes::DEFAULT_MODEL;
use crate::shapes::ollama::{
    Details, Listed, Ps, PullStatus, Running, Show, Tags, VERSION, parameter_size, timestamp,
};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// The header that carries this server's own version beside the Ollama API version.
const SERVER_VERSION: &str = "x-agent-as-model-version";

/// The dialect Ollama's errors are written in (the envelope is the same for both).
const OLLAMA: Dialect = crate::api::ollama::CHAT;

/// `GET /` (and `HEAD /`): what Ollama's clients look for to know a server is up.
pub(super) async fn running() -> Response {
    let mut response = Response::new(Body::from("Ollama is running"));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// `GET /api/version`: the Ollama API version this server matches; its own in a header.
pub(super) async fn version() -> Response {
    let mut response = json_body(json!({"version": VERSION}));
    response.headers_mut().insert(
        SERVER_VERSION,
        HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    response
}

/// An Ollama error: `{"error": message}` with `status`.
fn failure(status: u16, message: impl Into<String>) -> Response {
    let kind = match status {
        404 => ErrorKind::NotFound,
        400 => ErrorKind::InvalidRequest,
        _ => ErrorKind::Api,
    };
    error(OLLAMA, &ApiError::new(status, kind, message), &[])
}

/// The 404 for a name nothing resolves to, as Ollama words it.
fn unknown(name: &str) -> ApiError {
    ApiError::new(
        404,
        ErrorKind::NotFound,
        format!("model '{}' not found", crate::error::clip(name)),
    )
}

fn not_found(name: &str) -> Response {
    error(OLLAMA, &unknown(name), &[])
}

/// `/api/create`, `/api/copy`, `/api/push`: models are configured here, not made.
pub(super) async fn not_here(uri: axum::http::Uri) -> Response {
    failure(
        501,
        format!(
            "{} is not served here: this server's models are configured (--model, a models \
             file), not created, copied or pushed through the API; /api/pull fetches a \
             hf:OWNER/REPO/FILE.gguf file",
            uri.path()
        ),
    )
}

/// A model as the backends describe it: its name and what they say.
struct Described {
    /// The entry's name.
    id: String,
    /// Its aliases.
    aliases: Vec<String>,
    about: Value,
}

impl Described {
    fn file(&self, key: &str) -> Option<&Value> {
        self.about.get("file").and_then(|f| f.get(key))
    }

    fn local(&self) -> bool {
        self.about.get("backend").and_then(Value::as_str) == Some("local")
    }

    /// Whether this is the host's own model (MCP sampling).
    fn host(&self) -> bool {
        self.about.get("owned_by").and_then(Value::as_str) == Some("host-agent")
    }

    /// Whether the model reasons, as its backend says (the embedded model once loaded).
    fn reasons(&self) -> Option<bool> {
        self.about.pointer("/supports/reasoning")?.as_bool()
    }

    fn supports(&self, what: &str) -> bool {
        self.about
            .get("supports")
            .and_then(|s| s.get(what))
            .and_then(Value::as_bool)
            == Some(true)
    }

    fn context(&self) -> Option<u64> {
        self.about.get("context_tokens").and_then(Value::as_u64)
    }

    fn architecture(&self) -> String {
        self.file("architecture")
            .and_then(Value::as_str)
            .map_or_else(|| self.backend().to_owned(), str::to_owned)
    }

    fn backend(&self) -> &str {
        self.about
            .get("backend")
            .and_then(Value::as_str)
            .unwrap_or("provider")
    }

    fn size(&self) -> u64 {
        self.file("bytes").and_then(Value::as_u64).unwrap_or(0)
    }

    fn details(&self) -> Details {
        let family = self
            .file("architecture")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Details {
            parent_model: String::new(),
            format: if self.local() { "gguf" } else { "" }.to_owned(),
            families: if family.is_empty() {
                Vec::new()
            } else {
                vec![family.clone()]
            },
            family,
            parameter_size: self
                .file("parameters")
                .and_then(Value::as_u64)
                .map(parameter_size)
                .unwrap_or_default(),
            quantization_level: self
                .file("quantization")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        }
    }

    /// What the model can do, as `/api/show` lists it.
    fn capabilities(&self) -> Vec<&'static str> {
        // An embedding model (a models file's `embeddings = true`) makes embeddings and no
        // answers; a chat model here makes both, but is listed as Ollama lists a chat model.
        if self
            .about
            .pointer("/supports/chat")
            .and_then(Value::as_bool)
            == Some(false)
        {
            return vec!["embedding"];
        }
        let mut capabilities = vec!["completion"];
        if self.supports("tools") {
            capabilities.push("tools");
        }
        if self.supports("reasoning") {
            capabilities.push("thinking");
        }
        if self.file("fill_in_middle").and_then(Value::as_bool) == Some(true) {
            capabilities.push("insert");
        }
        if self.supports("images") {
            capabilities.push("vision");
        }
        if self.supports("audio") {
            capabilities.push("audio");
        }
        capabilities
    }
}

/// Every model the backends describe, the host's own included.
fn described(api: &Api) -> Vec<Described> {
    api.service
        .backends()
        .models()
        .into_iter()
        .filter_map(|about| {
            let id = about.get("id")?.as_str()?.to_owned();
            let aliases = super::api::aliases(&about);
            Some(Described { id, aliases, about })
        })
        .collect()
}

/// Every model a call may name, as the backends describe it: the host's own model answers MCP
/// tool calls only, never these APIs.
fn models(api: &Api) -> Vec<Described> {
    described(api).into_iter().filter(|d| !d.host()).collect()
}

/// The model `name` resolves to on every Ollama route (chat, generate, show, embed,
/// embeddings, pull, delete), and the name to call it by: an entry's name or alias, with or
/// without `:latest` (every name `/api/tags` lists), or [`DEFAULT_MODEL`] for the server's
/// default. Anything else is Ollama's 404 `model 'NAME' not found`; the host's model (MCP
/// sampling) is a 400, as it answers MCP tool calls only.
fn resolve(api: &Api, name: &str) -> Result<(Described, String), ApiError> {
    let name = name.trim();
    let bare = name.strip_suffix(":latest").unwrap_or(name);
    let all = described(api);
    let found = if bare == DEFAULT_MODEL {
        // The entry marked the default (a models file's), else the first this server runs,
        // called by its own name so that every route reaches the model described.
        let default = |d: &Described| d.about.get("default") == Some(&Value::Bool(true));
        all.iter()
            .position(|d| !d.host() && default(d))
            .or_else(|| all.iter().position(|d| !d.host()))
            .and_then(|i| Some((i, all.get(i)?.id.clone())))
            .or_else(|| all.first().map(|d| (0, d.id.clone())))
    } else {
        all.iter().enumerate().find_map(|(i, d)| {
            [name, bare]
                .into_iter()
                .find(|n| d.id == *n || d.aliases.iter().any(|a| a.as_str() == *n))
                .map(|n| (i, n.to_owned()))
        })
    };
    let Some((at, called)) = found else {
        return Err(unknown(name));
    };
    match all.into_iter().nth(at) {
        Some(d) if d.host() => Err(ApiError {
            param: Some("model".into()),
            ..ApiError::invalid(format!(
                "`model`: '{}' is the host's model (MCP sampling), which answers MCP tool calls \
                 only: it makes no embeddings and answers no Ollama request; name a model GET \
                 /api/tags lists",
                crate::error::clip(name)
            ))
        }),
        Some(d) => Ok((d, called)),
        None => Err(unknown(name)),
    }
}

/// The name a model is called by for the Ollama name `name` (see [`resolve`]), or the error
/// every Ollama route answers for it.
pub(super) fn called(api: &Api, name: &str) -> Result<String, ApiError> {
    resolve(api, name).map(|(_, called)| called)
}

/// A stand-in digest for a model: the SHA-256 of its name (the lists need one; a configured
/// model has no manifest).
fn digest(name: &str) -> String {
    hex::encode(Sha256::digest(name.as_bytes()))
}

/// When this server started listing models: their `modified_at`.
fn since() -> SystemTime {
    static SINCE: OnceLock<SystemTime> = OnceLock::new();
    *SINCE.get_or_init(SystemTime::now)
}

/// A name as Ollama's lists write it: with its tag (`:latest` when it has none).
fn tagged(name: &str) -> String {
    if name.contains(':') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

/// `GET /api/tags`: every name a call may use (each entry's name and aliases), each as it is
/// and as `name:latest`.
pub(super) async fn tags(State(api): State<Arc<Api>>) -> Response {
    let modified_at = timestamp(since());
    let mut listed = Vec::new();
    for d in models(&api) {
        let names = std::iter::once(&d.id).chain(d.aliases.iter());
        for name in names {
            let mut spellings = vec![name.clone()];
            let with_tag = tagged(name);
            if with_tag != *name {
                spellings.push(with_tag);
            }
            for spelled in spellings {
                listed.push(Listed {
                    model: spelled.clone(),
                    name: spelled,
                    modified_at: modified_at.clone(),
                    size: d.size(),
                    digest: digest(&d.id),
                    details: d.details(),
                });
            }
        }
    }
    json_body(super::api::serialized(&Tags { models: listed }))
}

/// The name a body gives in `model` (or the older `name`).
fn named(body: &Map<String, Value>) -> Result<String, ApiError> {
    let mut body = body.clone();
    if !body.contains_key("model")
        && let Some(name) = body.remove("name")
    {
        body.insert("model".into(), name);
    }
    model_named(&body)
}

/// A small request body (the model lists' and pull's) as an object.
async fn small_object(body: &Bytes) -> Result<Map<String, Value>, Response> {
    super::api::read_object(body)
        .await
        .map_err(|e| error(OLLAMA, &e, &[]))
}

/// `POST /api/show`: what a model is and can do.
pub(super) async fn show(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let body = match small_object(&body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let name = match named(&body) {
        Ok(name) => name,
        Err(e) => return error(OLLAMA, &e, &[]),
    };
    let called = match called(&api, &name) {
        Ok(called) => called,
        Err(e) => return error(OLLAMA, &e, &[]),
    };
    // What the file says is known once the model is loaded (it loads as the server starts).
    let model = api.service.backends().direct_model(&called);
    if let Some(model) = &model {
        let _ = model.ready().await;
    }
    let d = match resolve(&api, &name) {
        Ok((d, _)) => d,
        Err(e) => return error(OLLAMA, &e, &[]),
    };
    let architecture = d.architecture();
    let mut model_info = Map::new();
    model_info.insert("general.architecture".into(), json!(architecture));
    model_info.insert("general.basename".into(), json!(d.id));
    if let Some(parameters) = d.file("parameters") {
        model_info.insert("general.parameter_count".into(), parameters.clone());
    }
    if let Some(context) = d.context() {
        model_info.insert(format!("{architecture}.context_length"), json!(context));
    }
    let template = model.and_then(|m| m.chat_template()).unwrap_or_default();
    let parameters = d
        .context()
        .map(|c| format!("num_ctx {c}"))
        .unwrap_or_default();
    let show = Show {
        modelfile: format!(
            "# Served by agent-as-model {}: a {} model, configured on the server.\nFROM {}\n",
            env!("CARGO_PKG_VERSION"),
            d.backend(),
            d.id
        ),
        parameters,
        template,
        details: d.details(),
        model_info,
        capabilities: d.capabilities(),
        modified_at: timestamp(since()),
    };
    json_body(super::api::serialized(&show))
}

/// `GET /api/ps`: the loaded models (the embedded model, once loaded; it stays loaded).
pub(super) async fn ps(State(api): State<Arc<Api>>) -> Response {
    // Kept for good: a time far off, as Ollama says of `keep_alive: -1`; else its keep-alive
    // from now (it runs from the model's last call).
    let forever = SystemTime::now() + Duration::from_secs(100 * 365 * 86_400);
    let expires = |d: &Described| {
        d.about
            .get("keep_alive_secs")
            .and_then(Value::as_u64)
            .map_or(forever, |secs| {
                SystemTime::now() + Duration::from_secs(secs)
            })
    };
    let running = models(&api)
        .into_iter()
        .filter(|d| d.local() && d.about.get("status").and_then(Value::as_str) == Some("ready"))
        .map(|d| Running {
            name: tagged(&d.id),
            model: tagged(&d.id),
            size: d.size(),
            digest: digest(&d.id),
            details: d.details(),
            expires_at: timestamp(expires(&d)),
            size_vram: 0,
            context_length: usize::try_from(d.context().unwrap_or(0)).unwrap_or(0),
        })
        .collect();
    json_body(super::api::serialized(&Ps { models: running }))
}

/// `/api/chat` or `/api/generate`, as `dialect` (the route's).
pub(super) async fn answer(api: Arc<Api>, dialect: Dialect, held: Share, body: Bytes) -> Response {
    let started = Instant::now();
    let mut record = api.record(dialect);
    let response = respond(api, dialect, held, body, started, &mut record).await;
    noted(record, response)
}

/// One object, or one NDJSON line when a stream was asked for.
fn one(object: &Value, stream: bool) -> Response {
    if !stream {
        return json_body(object.clone());
    }
    let mut response = Response::new(Body::from(format!("{object}\n")));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

/// An Ollama request admitted and read: the admission, the model as asked and as this server
/// names it, and the call it makes; or the response refusing it.
async fn read_request(
    api: &Api,
    dialect: Dialect,
    body: Bytes,
) -> Result<(Admitted, String, String, Ollama), Box<Response>> {
    let (admitted, map) = admitted_object(api, dialect, body).await?;
    let asked = model_named(&map).map_err(|e| Box::new(error(dialect, &e, &[])))?;
    let (described, called) =
        resolve(api, &asked).map_err(|e| Box::new(error(dialect, &e, &[])))?;
    let ollama =
        translate(dialect, &map, &called).map_err(|e| Box::new(error(dialect, &e, &[])))?;
    refuse_thinking(api, &asked, &described, &called, &ollama).await?;
    Ok((admitted, asked, called, ollama))
}

/// Reasoning asked of a model that does not reason is refused as Ollama refuses it (a 400
/// `"NAME" does not support thinking`). The embedded model knows once it is loaded: it is
/// loaded first, as the call would load it (unless the request unloads it); a model that does
/// not say (a provider) is asked.
async fn refuse_thinking(
    api: &Api,
    asked: &str,
    described: &Described,
    called: &str,
    ollama: &Ollama,
) -> Result<(), Box<Response>> {
    if !ollama.thinks() || ollama.unload {
        return Ok(());
    }
    let mut reasons = described.reasons();
    if reasons.is_none()
        && described.local()
        && let Some(model) = api.service.backends().direct_model(called)
    {
        // A model that will not load says so when the call is made.
        let _ = model.ready().await;
        reasons = resolve(api, asked).ok().and_then(|(d, _)| d.reasons());
    }
    if reasons == Some(false) {
        let message = format!(
            "{:?} does not support thinking",
            crate::error::clip(asked).as_ref()
        );
        let e = ApiError {
            param: Some("think".into()),
            ..ApiError::invalid(message)
        };
        return Err(Box::new(error(OLLAMA, &e, &[])));
    }
    Ok(())
}

async fn respond(
    api: Arc<Api>,
    dialect: Dialect,
    held: Share,
    body: Bytes,
    started: Instant,
    record: &mut Record,
) -> Response {
    let (admitted, asked, called, mut ollama) = match read_request(&api, dialect, body).await {
        Ok(read) => read,
        Err(refused) => return *refused,
    };
    let stream = ollama.prepared.stream;
    let model = kept_alive(&api, &called, &mut ollama);
    if ollama.load {
        let encoder = Encoder::new(dialect, &asked, &[], started);
        return load_or_unload(model, &ollama, dialect, &encoder).await;
    }
    let (mut prepared, call) = match parsed(&api, dialect, &ollama).await {
        Ok(parsed) => parsed,
        Err(refused) => return *refused,
    };
    prepared.stream = stream;
    let holding = Holding {
        _call: admitted,
        _body: held,
    };
    let encoder = Encoder::new(dialect, &asked, &call.request.stop, started);
    if stream {
        prepared.warnings.extend(call.warnings.iter().cloned());
        // What the backend cannot honour is known before the answer: a stream's header says it.
        if let Some(model) = &model {
            prepared
                .warnings
                .extend(model.capabilities().warnings(&call));
        }
        let record = record.hand_on();
        return streamed(
            api,
            dialect,
            prepared,
            call,
            holding,
            Box::new(encoder),
            record,
        )
        .await;
    }
    let answer = whole(&api, &call, holding, record).await;
    let mut warnings = prepared.warnings;
    match answer {
        Ok(answered) => {
            warnings.extend(answered.report.warnings.iter().cloned());
            with_warnings(json_body(encoder.whole(&answered.finished)), &warnings)
        }
        Err(e) => error(dialect, &e, &warnings),
    }
}

/// The model `called` names, its keep-alive set as the request says (as Ollama does, a request
/// without `keep_alive` gets the model's own setting back), unless the operator keeps the models
/// loaded as configured whatever a client asks (`--request-keep-alive ignore`).
fn kept_alive(api: &Api, called: &str, ollama: &mut Ollama) -> Option<Arc<dyn Model>> {
    if api.service.backends().request_keep_alive() == RequestKeepAlive::Ignore
        && ollama.ignore_keep_alive()
    {
        tracing::info!(
            model = %crate::error::clip(called),
            "an Ollama request's keep_alive was ignored (--request-keep-alive ignore)"
        );
    }
    let model = api.service.backends().direct_model(called);
    if let Some(model) = &model {
        model.keep_alive(ollama.keep_alive);
    }
    model
}

/// The translated request parsed, Ollama's own options applied and the translation's warnings
/// put before the parser's; or the error to answer.
async fn parsed(
    api: &Arc<Api>,
    dialect: Dialect,
    ollama: &Ollama,
) -> Result<(Prepared, crate::service::Parsed), Box<Response>> {
    let arguments = ollama.prepared.arguments.clone();
    match parse_checked(api, dialect, arguments, None, false).await {
        Ok((mut prepared, mut call)) => {
            ollama.apply(&mut call.0);
            let mut warnings = ollama.prepared.warnings.clone();
            warnings.append(&mut prepared.warnings);
            prepared.warnings = warnings;
            Ok((prepared, call))
        }
        Err(refused) => {
            let mut warnings = ollama.prepared.warnings.clone();
            warnings.extend(refused.warnings);
            Err(Box::new(error(dialect, &refused.error, &warnings)))
        }
    }
}

/// A request with nothing to answer: loading is waiting until the model can answer;
/// unloading, the reply alone (the model goes once its calls are answered, by the keep-alive
/// of 0 the request set; under `--request-keep-alive ignore` it set none, and the model stays).
async fn load_or_unload(
    model: Option<Arc<dyn Model>>,
    ollama: &Ollama,
    dialect: Dialect,
    encoder: &Encoder,
) -> Response {
    if let Some(model) = model.filter(|_| !ollama.unload)
        && let Err(e) = model.ready().await
    {
        return error(dialect, &ApiError::from(e), &ollama.prepared.warnings);
    }
    let reason = if ollama.unload { "unload" } else { "load" };
    let response = one(&encoder.loaded(reason), ollama.prepared.stream);
    with_warnings(response, &ollama.prepared.warnings)
}

/// The call answered whole, noted on its record; its place is given up once answered.
async fn whole(
    api: &Api,
    call: &Call,
    holding: Holding,
    record: &mut Record,
) -> Result<Answered, ApiError> {
    let cancel = tokio_util::sync::CancellationToken::new();
    api.aim(record, call);
    let answer = api.answer(call, &cancel, None).await;
    api.note(record, &answer);
    drop(holding);
    answer
}

/// Progress lines as NDJSON, sent as they come.
fn progress_stream(mut lines: mpsc::UnboundedReceiver<Value>) -> Response {
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| {
        lines.poll_recv(cx).map(|line| {
            line.map(|l| Ok::<Bytes, std::convert::Infallible>(Bytes::from(format!("{l}\n"))))
        })
    }));
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

fn status_line(status: &PullStatus) -> Value {
    super::api::serialized(status)
}

/// `POST /api/pull`: a configured model is there already; an `hf:OWNER/REPO/FILE.gguf` file is
/// fetched into the cache unless it is there, its progress streamed as Ollama's lines
/// (`status`, `digest`, `total`, `completed`), or answered once with `"stream": false`, and
/// registered with the backends (see [`crate::routing::pulled`]): calls and the model lists
/// name it by its `hf:` name from then on.
pub(super) async fn pull(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let body = match small_object(&body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let name = match named(&body) {
        Ok(name) => name,
        Err(e) => return error(OLLAMA, &e, &[]),
    };
    let stream = match body.get("stream") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return failure(400, "`stream`: expected true or false");
        }
    };
    let (sender, lines) = mpsc::unbounded_channel();
    if name.starts_with(hub::PREFIX) {
        let file: hub::HubFile = match name.parse() {
            Ok(file) => file,
            Err(e) => return failure(400, format!("`model`: {e}")),
        };
        let Some(access) = api.hub.clone() else {
            return failure(501, "this server fetches no hf: files");
        };
        let work = pull_file(api.clone(), file, access, sender);
        if stream {
            tokio::spawn(work);
            return progress_stream(lines);
        }
        return match work.await {
            Ok(()) => json_body(json!({"status": "success"})),
            Err((status, e)) => failure(status, e),
        };
    }
    if let Err(e) = resolve(&api, &name) {
        return error(OLLAMA, &e, &[]);
    }
    if !stream {
        return json_body(json!({"status": "success"}));
    }
    for status in ["pulling manifest", "verifying sha256 digest", "success"] {
        let _ = sender.send(status_line(&PullStatus::said(status)));
    }
    drop(sender);
    progress_stream(lines)
}

/// Pulls `file` through the backends (fetched unless it is cached, then registered), telling
/// `lines` how it goes; the error's status and words (also told to `lines`, as Ollama's stream
/// ends with one), naming the `hf:` file and no path of the cache (the log has it).
async fn pull_file(
    api: Arc<Api>,
    file: hub::HubFile,
    access: hub::Access,
    lines: mpsc::UnboundedSender<Value>,
) -> Result<(), (u16, String)> {
    let said = |status: &str| {
        let _ = lines.send(status_line(&PullStatus::said(status)));
    };
    said("pulling manifest");
    let label = format!("sha256:{}", digest(&file.to_string()));
    let observed = lines.clone();
    let mut last = Instant::now();
    let observer: fetch::Observer = Box::new(move |_what, done, total| {
        // A line now and then, and the last.
        if done < total && last.elapsed() < Duration::from_millis(200) {
            return;
        }
        last = Instant::now();
        let status = PullStatus {
            status: format!("pulling {}", label.get(7..19).unwrap_or_default()),
            digest: Some(label.clone()),
            total: Some(total),
            completed: Some(done),
        };
        let _ = observed.send(status_line(&status));
    });
    let mut progress = fetch::Progress::observed(observer);
    let backends = api.service.backends();
    match backends.pull(&file, &access, &mut progress).await {
        Ok(path) => {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            if let Some(sha) = fetch::sealed(&path) {
                let status = PullStatus {
                    status: format!("pulling {}", sha.get(..12).unwrap_or_default()),
                    digest: Some(format!("sha256:{sha}")),
                    total: Some(size),
                    completed: Some(size),
                };
                let _ = lines.send(status_line(&status));
            }
            said("verifying sha256 digest");
            said("writing manifest");
            said("success");
            Ok(())
        }
        Err(e) => {
            // The log has the whole error (a path in the cache too); the client, the file's
            // name and what went wrong.
            tracing::warn!(file = %crate::error::clip(&file.to_string()), error = %e,
                "/api/pull could not pull a Hub file");
            let message = e.told(&file);
            let _ = lines.send(json!({"error": message}));
            Err((pull_status(&e), message))
        }
    }
}

/// The status of a pull that failed: the Hub's failure a 502; a model the settings cannot take
/// (too many pulled, over the memory budget) a 400; no model to start a 501.
fn pull_status(e: &PullError) -> u16 {
    match e {
        PullError::Hub(_) => 502,
        PullError::Full { .. } | PullError::TooBig { .. } => 400,
        PullError::NoLocal { .. } => 501,
        PullError::Start { .. } => 500,
    }
}

/// `DELETE /api/delete`: removes a pulled `hf:` model and its file from the cache, through the
/// backends, which refuse (a 400 naming the model, leaving the file) a file a configured model
/// answers from; a configured model is not this API's to delete.
pub(super) async fn remove(State(api): State<Arc<Api>>, body: Bytes) -> Response {
    let body = match small_object(&body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let name = match named(&body) {
        Ok(name) => name,
        Err(e) => return error(OLLAMA, &e, &[]),
    };
    if name.starts_with(hub::PREFIX) {
        let file: hub::HubFile = match name.parse() {
            Ok(file) => file,
            Err(e) => return failure(400, format!("`model`: {e}")),
        };
        return match api.service.backends().delete(&file) {
            Ok(()) => Response::new(Body::empty()),
            Err(DeleteError::NotFound { .. }) => not_found(&name),
            // A conflict with the server's configuration rather than a missing model: Ollama's
            // clients tell a 404 from any other error, and a 400 names the model as theirs do.
            Err(e @ DeleteError::InUse { .. }) => failure(400, e.to_string()),
        };
    }
    if let Err(e) = resolve(&api, &name) {
        return error(OLLAMA, &e, &[]);
    }
    failure(
        400,
        format!(
            "`model`: '{}' is configured on this server (--model or a models file), not a \
             fetched file: it is not deleted through the API",
            crate::error::clip(&name)
        ),
    )
}
