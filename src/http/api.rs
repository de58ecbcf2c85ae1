//! The model APIs' handlers (their paths are in [`super::routes`]): OpenAI chat completions, legacy text completions and Responses,
//! Anthropic messages, Gemini `generateContent`, their token counts and model lists, as a base URL
//! for any SDK or agent CLI (Ollama's API beside them, in [`super::ollama`]); and `GET /metrics`,
//! behind the same token. Each handler reads the
//! JSON body, hands it to [`crate::api`] (which answers it as the tool of the same shape is
//! answered) and writes the API object, the API's stream of events, or the API's error envelope.
//! The token is taken in every spelling the clients use. Each model call is counted in the
//! server's metrics by a [`Record`] kept from its arrival to its end (handed to a stream's task).

use crate::api::dialect::Opening;
use crate::api::registry;
use crate::api::responses::{self as resp, Echo, Encoder, Keep, Stored, Streamed};
use crate::api::{self, Admitted, Api, ApiError, Dialect, Encode, ErrorKind, Prepared};
use crate::api::{chat, gemini};
use crate::call::Call;
use crate::fulfil::live::{Event, Sink};
use crate::fulfil::written::Piece;
use crate::metrics::Record;
use crate::service::Answered;
use crate::service::Parsed;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::body::{Budget, CALL_COPIES, Held};
use super::{Token, bearer_credentials};

/// The header that says what a backend could not do as asked.
const WARNINGS: &str = "x-agent-as-model-warnings";

/// How often an Anthropic stream says `ping` while the answer is made.
const PING_EVERY: Duration = Duration::from_secs(10);

/// The longest a stream's head waits for the answer's first piece: until then a call that
/// fails (refused by its model's queue, a provider's 429 or 401, a prompt over the context) is
/// answered with a real HTTP status instead of an error event after a 200. While a provider's
/// retry waits (its `Retry-After`), the head waits that long more.
const HEAD_WAIT: Duration = PING_EVERY;

/// Frames of a streamed answer waiting for the client; when they are this many, the answer
/// waits for the client (for `Api::stream_write_timeout`, then it is cancelled).
const STREAM_BUFFER: usize = 64;

/// `GET /metrics`: the server's metrics in Prometheus's text format (behind the token, as the
/// APIs are).
pub(super) async fn metrics(State(api): State<Arc<Api>>) -> Response {
    let mut response = Response::new(Body::from(api.service.metrics().render()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    response
}

/// A path under `/v1` or `/v1beta` that no route serves: a 404 in the API's JSON envelope
/// (OpenAI's "Invalid URL (POST /v1/…)"), as a client's error handling expects of the API.
pub(super) fn unknown_route(request: &Request) -> Option<Response> {
    let path = request.uri().path();
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if !under("/v1") && !under("/v1beta") && !under("/api") {
        return None;
    }
    let dialect = dialect_of(registry::ALL, path, request.headers());
    Some(route_error(
        dialect,
        404,
        request.method(),
        path,
        "Invalid URL",
    ))
}

/// A method a route does not take (`GET /v1/chat/completions`): a 405 in the envelope of the
/// path's API in `registry`.
pub(super) async fn wrong_method(
    registry: &'static [Dialect],
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let dialect = dialect_of(registry, uri.path(), &headers);
    route_error(dialect, 405, &method, uri.path(), "Method not allowed")
}

/// The error for a request no route answers: OpenAI says `invalid_request_error` with a null
/// code, Anthropic `not_found_error`, Gemini `NOT_FOUND` (or the status's own name).
fn route_error(dialect: Dialect, status: u16, method: &Method, path: &str, what: &str) -> Response {
    let kind = match status {
        405 => ErrorKind::InvalidRequest,
        _ => dialect.unrouted(),
    };
    let e = ApiError::new(
        status,
        kind,
        format!("{what} ({method} {})", crate::error::clip(path)),
    );
    error(dialect, &e, &[])
}

/// The dialect a request's errors are written in, from its path and headers (see
/// [`registry::of_path`]).
fn dialect_of(registry: &[Dialect], path: &str, headers: &HeaderMap) -> Dialect {
    let has = |name: &str| headers.contains_key(name);
    registry::of_path(registry, path, &has).unwrap_or(chat::DIALECT)
}

/// Whose model list a `GET /v1/models` wants (see [`registry::for_model_list`]): Gemini's with
/// `x-goog-api-key`, Anthropic's with `anthropic-version` or `x-api-key`, OpenAI's otherwise.
fn models_dialect(headers: &HeaderMap) -> Dialect {
    registry::for_model_list(registry::ALL, &|name| headers.contains_key(name))
}

/// The token as `Authorization: Bearer`, `x-api-key`, `x-goog-api-key` or `?key=` (any of
/// them, percent-decoded); a missing or wrong one is a 401 in the API's envelope.
pub(super) fn api_key(request: &Request, token: &Token) -> Option<Response> {
    let headers = request.headers();
    let header_value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Every `key=` of the query, percent-decoded (`+` as a space), as a form decodes it.
    let query_keys = request.uri().query().into_iter().flat_map(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .filter(|(name, _)| name == "key")
            .map(|(_, value)| value.into_owned())
    });
    let presented = [
        bearer_credentials(headers).map(str::to_owned),
        header_value("x-api-key").map(str::to_owned),
        header_value("x-goog-api-key").map(str::to_owned),
    ];
    let mut presented = presented.into_iter().flatten().chain(query_keys);
    if presented.any(|t| token.matches(t.trim())) {
        return None;
    }
    let dialect = dialect_of(registry::ALL, request.uri().path(), headers);
    let e = ApiError::new(
        401,
        ErrorKind::Authentication,
        "missing or wrong API key: pass the server's --auth-token as the API key",
    );
    Some(error(dialect, &e, &[]))
}

/// An error in `dialect`'s envelope.
pub(super) fn error(dialect: Dialect, e: &ApiError, warnings: &[String]) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_body(e.body(dialect));
    *response.status_mut() = status;
    if let Some(secs) = e.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    with_warnings(response, warnings)
}

/// `response` with the warnings header, when there are warnings: one line, ASCII.
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    if warnings.is_empty() {
        return response;
    }
    let line: String = warnings
        .join("; ")
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(4096)
        .collect();
    if let Ok(value) = HeaderValue::from_str(&line) {
        response.headers_mut().insert(WARNINGS, value);
    }
    response
}

/// A JSON response.
pub(super) fn json_body(body: Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The request body as a JSON object.
fn object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::invalid("the request body must be a JSON object")),
        Err(e) => Err(ApiError::invalid(format!(
            "the request body is not JSON: {e}"
        ))),
    }
}

/// The body's share of the server's buffer, which a call keeps until its answer is sent.
pub(super) type Share = Option<Extension<Held>>;

/// The buffer requests share, which a call's other data (a stored conversation it loads) is
/// counted against too.
pub(super) type Budgets = Extension<Arc<Budget>>;

/// `share` holding `more` too.
pub(super) fn joined(share: Share, more: Held) -> Share {
    let mut held = share.map(|Extension(h)| h).unwrap_or_default();
    held.join(more);
    Some(Extension(held))
}

/// The JSON values a body's share counts.
pub(super) fn values_of(share: &Share) -> usize {
    share.as_ref().map_or(0, |Extension(h)| h.values())
}

/// A request body answered by `dialect`'s tool (its `Create` routes: chat completions, text
/// completions).
pub(super) async fn create(api: Arc<Api>, dialect: Dialect, held: Share, body: Bytes) -> Response {
    let mut record = api.record(dialect);
    let response = complete(api, dialect, body, None, false, held, &mut record).await;
    noted(record, response)
}

/// `response`, its status told to the call's record (unless the record knows how the call
/// ended, or was handed to the stream that answers it).
pub(super) fn noted(mut record: Record, response: Response) -> Response {
    record.status(response.status().as_u16());
    response
}

/// `POST /v1/responses`: a conversation continued from a stored response when the request
/// names one (`previous_response_id`), answered as the other APIs are, written by the
/// Responses encoder, and stored unless `store: false`.
pub(super) async fn responses(
    State(api): State<Arc<Api>>,
    Extension(budget): Budgets,
    held: Share,
    body: Bytes,
) -> Response {
    let mut record = api.record(resp::DIALECT);
    let response = respond(api, &budget, held, body, &mut record).await;
    noted(record, response)
}

async fn respond(
    api: Arc<Api>,
    budget: &Budget,
    held: Share,
    body: Bytes,
    record: &mut Record,
) -> Response {
    let dialect = resp::DIALECT;
    let (admitted, map) = match admitted_object(&api, dialect, body).await {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let loads = Loads {
        budget,
        values: values_of(&held),
    };
    let turn = match responses_turn(&api, loads, map, None).await {
        Ok(turn) => turn,
        Err(refused) => return error(dialect, &refused.error, &refused.warnings),
    };
    let ResponsesTurn {
        prepared,
        call,
        encoder,
        keep,
        held: loaded,
        ..
    } = turn;
    let holding = Holding {
        _call: admitted,
        _body: joined(held, loaded),
    };
    if prepared.stream {
        let encode = Box::new(Streamed::new(encoder, keep));
        let record = record.hand_on();
        return streamed(api, dialect, prepared, call, holding, encode, record).await;
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
            let resource = encoder.whole(&answered.finished);
            if let Some(keep) = keep {
                keep.save(resource.clone()).await;
            }
            with_warnings(json_body(serialized(&resource)), &warnings)
        }
        Err(e) => error(dialect, &e, &warnings),
    }
}

/// A Responses request read and made ready to answer (over HTTP or a WebSocket).
pub(super) struct ResponsesTurn {
    pub(super) prepared: Prepared,
    pub(super) call: Parsed,
    pub(super) encoder: Encoder,
    /// Where the response is stored once made; `None` with `store: false`.
    pub(super) keep: Option<Keep>,
    /// The input items the response answers: the conversation it continues, then the request's
    /// own input.
    pub(super) input: Vec<Value>,
    /// The buffer's share of the conversation loaded (none when none was).
    pub(super) held: Held,
    /// The model the request named (or the one it continues with).
    pub(super) model: Option<String>,
}

/// What loading a stored conversation for a request is counted against: the shared buffer, and
/// the JSON values the request already holds.
#[derive(Clone, Copy)]
pub(super) struct Loads<'a> {
    pub(super) budget: &'a Budget,
    pub(super) values: usize,
}

/// A connection's last response (WebSocket mode), kept as its stored JSON text with the
/// buffer's share of it.
pub(super) struct Cached {
    pub(super) id: String,
    pub(super) text: Arc<str>,
    pub(super) _held: Held,
}

/// Why a request is not answered: the error, and the warnings said before it.
pub(super) struct Refused {
    pub(super) error: ApiError,
    pub(super) warnings: Vec<String>,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Refused {
            error,
            warnings: Vec::new(),
        }
    }
}

/// Makes a Responses request body ready: `background` refused, the conversation a
/// `previous_response_id` names put before the input (from `cached`, a WebSocket's last
/// response, when it is that one, else from the store), the call parsed, and its encoder.
pub(super) async fn responses_turn(
    api: &Arc<Api>,
    loads: Loads<'_>,
    mut map: Map<String, Value>,
    cached: Option<&Cached>,
) -> Result<ResponsesTurn, Refused> {
    if map.get("background") == Some(&Value::Bool(true)) {
        return Err(ApiError {
            param: Some("background".into()),
            ..ApiError::invalid(
                "`background`: background responses are not run here; leave it out (or false) \
                 and wait for the answer, or stream it",
            )
        }
        .into());
    }
    let echo = Echo::read(&map);
    let mut input = resp::input_items(map.get("input"));
    let mut held = Held::default();
    if let Some(previous) = map.remove("previous_response_id").filter(|v| !v.is_null()) {
        let (stored, loaded) = match cached.filter(|c| previous.as_str() == Some(c.id.as_str())) {
            Some(cached) => read_stored(loads, &cached.text, &cached.id)?,
            None => previous_response(api, loads, &previous).await?,
        };
        held = loaded;
        // A follow-up that names no model continues with the model of the response it follows
        // (Codex App sends none).
        if asked_model(&map).is_none() {
            let model = stored
                .asked_model
                .clone()
                .unwrap_or_else(|| stored.response.model.clone());
            map.insert("model".into(), Value::String(model));
        }
        let mut conversation = stored.conversation();
        drop(stored);
        conversation.append(&mut input);
        input = conversation;
        map.insert("input".into(), Value::Array(input.clone()));
    }
    let asked = asked_model(&map);
    let keep = echo.store.then(|| Keep {
        store: api.store.clone(),
        input: input.clone(),
        asked_model: asked.clone(),
    });
    let (prepared, call) = parse_checked(api, resp::DIALECT, map, None, false).await?;
    let encoder = Encoder::new(echo, &api.model_name(&call), &call.request.stop)
        .with_names(prepared.names.clone());
    Ok(ResponsesTurn {
        prepared,
        call,
        encoder,
        keep,
        input,
        held,
        model: asked,
    })
}

/// The model a request body names, if it names one.
pub(super) fn asked_model(map: &Map<String, Value>) -> Option<String> {
    map.get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
        .map(str::to_owned)
}

/// A typed API object as JSON.
pub(super) fn serialized(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// The stored response `previous_response_id` names, with the buffer's share of it, or the
/// error saying it is not there (or that it is too large to hold now).
pub(super) async fn previous_response(
    api: &Api,
    loads: Loads<'_>,
    previous: &Value,
) -> Result<(Stored, Held), ApiError> {
    let param = |e: ApiError| ApiError {
        param: Some("previous_response_id".into()),
        ..e
    };
    let Some(id) = previous.as_str() else {
        return Err(param(ApiError::invalid(
            "`previous_response_id`: expected the id of a stored response (a string)",
        )));
    };
    match stored_response(api, loads, CALL_COPIES, id)
        .await
        .map_err(param)?
    {
        Some(stored) => Ok(stored),
        None => Err(param(
            ApiError::invalid(format!(
                "Previous response with id '{}' not found: it was never stored here (store: \
                 false), it expired or was deleted, or another store holds it",
                crate::error::clip(id)
            ))
            .with_code("previous_response_not_found"),
        )),
    }
}

/// The response stored under `id`, if any, with the buffer's share of it: its text, counted
/// before it is read from the store, and what parsing it and `copies` copies of it take.
async fn stored_response(
    api: &Api,
    loads: Loads<'_>,
    copies: usize,
    id: &str,
) -> Result<Option<(Stored, Held)>, ApiError> {
    let failed = |e: crate::api::store::StoreError| ApiError {
        retry_after: Some(1),
        ..ApiError::new(503, ErrorKind::Overloaded, e.to_string())
    };
    let what = "the stored response";
    // The store holds Anthropic's threads too: not responses.
    if id.starts_with(crate::api::threads::KEY_PREFIX) {
        return Ok(None);
    }
    let Some(size) = api.store.size(id).await.map_err(failed)? else {
        return Ok(None);
    };
    let mut held = loads.budget.hold(size).map_err(|e| e.api_error(what))?;
    let Some(text) = api.store.get(id).await.map_err(failed)? else {
        return Ok(None);
    };
    let (stored, parsed) = read_stored_copies(loads, &text, id, copies)?;
    held.join(parsed);
    Ok(Some((stored, held)))
}

/// The stored JSON `text` of the response `id` parsed, with the buffer's share of what that
/// takes (and of the copies of it a call makes).
pub(super) fn read_stored(
    loads: Loads<'_>,
    text: &str,
    id: &str,
) -> Result<(Stored, Held), ApiError> {
    read_stored_copies(loads, text, id, CALL_COPIES).map_err(|e| ApiError {
        param: Some("previous_response_id".into()),
        ..e
    })
}

fn read_stored_copies(
    loads: Loads<'_>,
    text: &str,
    id: &str,
    copies: usize,
) -> Result<(Stored, Held), ApiError> {
    let held = loads
        .budget
        .hold_json(text.as_bytes(), copies.saturating_sub(1), loads.values)
        .map_err(|e| e.api_error("the stored response"))?;
    let stored = serde_json::from_str(text).map_err(|e| {
        ApiError::new(
            500,
            ErrorKind::Api,
            format!(
                "the stored response {} could not be read: {e}",
                crate::error::clip(id)
            ),
        )
    })?;
    Ok((stored, held))
}

/// The 404 for a response id no store here holds.
fn no_response(id: &str) -> ApiError {
    ApiError {
        param: Some("response_id".into()),
        ..ApiError::new(
            404,
            ErrorKind::NotFound,
            format!("No response found with id '{}'.", crate::error::clip(id)),
        )
        .with_code("not_found")
    }
}

/// `GET /v1/responses/{id}`: a stored response.
pub(super) async fn responses_get(
    State(api): State<Arc<Api>>,
    Extension(budget): Budgets,
    Path(id): Path<String>,
) -> Response {
    let loads = Loads {
        budget: &budget,
        values: 0,
    };
    match stored_response(&api, loads, 1, &id).await {
        Ok(Some((stored, _held))) => json_body(serialized(&stored.response)),
        Ok(None) => error(resp::DIALECT, &no_response(&id), &[]),
        Err(e) => error(resp::DIALECT, &e, &[]),
    }
}

/// `GET /v1/responses/{id}/input_items`: the input a stored response answered, as OpenAI
/// lists it (`order`, `limit`, `after`).
pub(super) async fn responses_input_items(
    State(api): State<Arc<Api>>,
    Extension(budget): Budgets,
    Path(id): Path<String>,
    uri: Uri,
) -> Response {
    let paging = match resp::Paging::from_query(uri.query()) {
        Ok(paging) => paging,
        Err(message) => {
            return error(resp::DIALECT, &ApiError::invalid(message), &[]);
        }
    };
    let loads = Loads {
        budget: &budget,
        values: 0,
    };
    match stored_response(&api, loads, 1, &id).await {
        Ok(Some((stored, _held))) => json_body(resp::input_item_list(&id, &stored.input, &paging)),
        Ok(None) => error(resp::DIALECT, &no_response(&id), &[]),
        Err(e) => error(resp::DIALECT, &e, &[]),
    }
}

/// `DELETE /v1/responses/{id}`: forgets a stored response.
pub(super) async fn responses_delete(
    State(api): State<Arc<Api>>,
    Path(id): Path<String>,
) -> Response {
    if id.starts_with(crate::api::threads::KEY_PREFIX) {
        return error(resp::DIALECT, &no_response(&id), &[]);
    }
    match api.store.delete(&id).await {
        Ok(true) => json_body(json!({"id": id, "object": "response", "deleted": true})),
        Ok(false) => error(resp::DIALECT, &no_response(&id), &[]),
        Err(e) => error(
            resp::DIALECT,
            &ApiError::new(503, ErrorKind::Overloaded, e.to_string()),
            &[],
        ),
    }
}

/// `POST …/models/{model}:{action}`: `generateContent`, `streamGenerateContent` (SSE with
/// `?alt=sse`, else one JSON array) or `countTokens`.
pub(super) async fn gemini(
    State(api): State<Arc<Api>>,
    Path(name): Path<String>,
    uri: axum::http::Uri,
    held: Share,
    body: Bytes,
) -> Response {
    let Some((model, action)) = name.rsplit_once(':') else {
        return error(
            gemini::DIALECT,
            &ApiError::new(404, ErrorKind::NotFound, format!("no such method: {name}")),
            &[],
        );
    };
    let dialect = gemini::DIALECT;
    match action {
        "generateContent" => {
            let mut record = api.record(dialect);
            let response = complete(api, dialect, body, Some(model), false, held, &mut record);
            let response = response.await;
            noted(record, response)
        }
        "streamGenerateContent" => {
            let sse = uri
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
            let mut record = api.record(dialect);
            let response = if sse {
                complete(api, dialect, body, Some(model), true, held, &mut record).await
            } else {
                gemini_array(api, body, model, &mut record).await
            };
            noted(record, response)
        }
        "countTokens" => count(api, dialect, body, Some(model)).await,
        "embedContent" => gemini_embed(&api, model, false, body).await,
        "batchEmbedContents" => gemini_embed(&api, model, true, body).await,
        other => error(
            dialect,
            &ApiError::new(
                404,
                ErrorKind::NotFound,
                format!(
                    "no such method {:?}: generateContent, streamGenerateContent, countTokens, \
                     embedContent or batchEmbedContents",
                    crate::error::clip(other)
                ),
            ),
            &[],
        ),
    }
}

/// Gemini's `:embedContent` (`batch` false) and `:batchEmbedContents` for `model` (see
/// [`api::embeddings`]).
async fn gemini_embed(api: &Api, model: &str, batch: bool, body: Bytes) -> Response {
    let (_admitted, map) = match admitted_object(api, gemini::DIALECT, body).await {
        Ok(read) => read,
        Err(response) => return *response,
    };
    let asked = if batch {
        api::embeddings::gemini_batch(model, &map)
    } else {
        api::embeddings::gemini_one(model, &map)
    };
    let made = match asked {
        Ok(asked) => api.embed(&asked).await,
        Err(e) => Err(ApiError::from(e)),
    };
    match made {
        Ok(made) if batch => json_body(api::embeddings::gemini_batch_object(&made)),
        Ok(made) => json_body(api::embeddings::gemini_one_object(&made)),
        Err(e) => error(gemini::DIALECT, &e, &[]),
    }
}

/// Runs `work` where parsing of this size belongs: here when it is quick, else on tokio's
/// blocking threads.
async fn parse_where<T: Send + 'static>(
    long: bool,
    dialect: Dialect,
    work: impl FnOnce() -> Result<T, Box<Response>> + Send + 'static,
) -> Result<T, Box<Response>> {
    if !long {
        return work();
    }
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        let e = ApiError::new(
            500,
            ErrorKind::Api,
            format!("parsing the request failed: {e}"),
        );
        Err(Box::new(error(dialect, &e, &[])))
    })
}

/// A place under the cap of calls in flight and the body as a JSON object (the bytes freed once
/// read), or the error to send in `dialect`'s envelope.
pub(super) async fn admitted_object(
    api: &Api,
    dialect: Dialect,
    body: Bytes,
) -> Result<(Admitted, Map<String, Value>), Box<Response>> {
    let admitted = api.admit().map_err(|e| Box::new(error(dialect, &e, &[])))?;
    let map = read_object(&body)
        .await
        .map_err(|e| Box::new(error(dialect, &e, &[])))?;
    Ok((admitted, map))
}

/// The request body as a JSON object, read where its size says (see [`parse_where`]).
pub(super) async fn read_object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    let body = body.clone();
    parse_where(
        body.len() > crate::service::INLINE_PARSE_BYTES,
        chat::DIALECT,
        move || Ok(object(&body)),
    )
    .await
    .unwrap_or_else(|_| {
        Err(ApiError::new(
            500,
            ErrorKind::Api,
            "parsing the request failed",
        ))
    })
}

/// A request object made ready and parsed, or the error to send: a large one, or one with
/// schemas to compile (64 tool schemas of 80 KB take a second of CPU), on tokio's blocking
/// threads, which must not hold one of the async runtime's threads and every request queued
/// on it.
async fn parse_map(
    api: &Arc<Api>,
    dialect: Dialect,
    body: Map<String, Value>,
    model: Option<&str>,
    stream: bool,
) -> Result<(Prepared, Parsed), Box<Response>> {
    parse_checked(api, dialect, body, model, stream)
        .await
        .map_err(|refused| Box::new(error(dialect, &refused.error, &refused.warnings)))
}

/// A request object made ready and parsed, or why not (read where [`parse_map`] says).
pub(super) async fn parse_checked(
    api: &Arc<Api>,
    dialect: Dialect,
    body: Map<String, Value>,
    model: Option<&str>,
    stream: bool,
) -> Result<(Prepared, Parsed), Refused> {
    let long = crate::service::parses_long(&body);
    let (api, model) = (Arc::clone(api), model.map(str::to_owned));
    let parsed = parse_where(long, dialect, move || {
        let prepared = api::prepare(dialect, body, model.as_deref(), stream);
        Ok(match api.parse(dialect, &prepared) {
            Ok(call) => Ok((prepared, Parsed(call))),
            Err(error) => Err(Refused {
                error,
                warnings: prepared.warnings,
            }),
        })
    })
    .await;
    parsed.unwrap_or_else(|_| {
        Err(ApiError::new(500, ErrorKind::Api, "parsing the request failed").into())
    })
}

/// The request made ready and parsed, or the error to send (see [`parse_map`]).
async fn parse(
    api: &Arc<Api>,
    dialect: Dialect,
    body: &Bytes,
    model: Option<&str>,
    stream: bool,
) -> Result<(Prepared, Parsed), Box<Response>> {
    let map = read_object(body)
        .await
        .map_err(|e| Box::new(error(dialect, &e, &[])))?;
    parse_map(api, dialect, map, model, stream).await
}

/// What a call holds until its answer is sent: its place under the cap on calls in flight,
/// and its body's share of the buffer (for the memory the call keeps).
pub(super) struct Holding {
    pub(super) _call: Admitted,
    pub(super) _body: Share,
}

pub(super) async fn complete(
    api: Arc<Api>,
    dialect: Dialect,
    body: Bytes,
    model: Option<&str>,
    stream: bool,
    held: Share,
    record: &mut Record,
) -> Response {
    let admitted = match api.admit() {
        Ok(admitted) => admitted,
        Err(e) => return error(dialect, &e, &[]),
    };
    let (mut prepared, call) = match parse(&api, dialect, &body, model, stream).await {
        Ok(parsed) => parsed,
        Err(response) => return *response,
    };
    drop(body);
    let holding = Holding {
        _call: admitted,
        _body: held,
    };
    if prepared.stream {
        // A stream's head is written before the answer's report: what parsing set aside.
        prepared.warnings.extend(call.warnings.iter().cloned());
        let encode = stream_encoder(&api, dialect, &prepared, &call).await;
        let record = record.hand_on();
        return streamed(api, dialect, prepared, call, holding, encode, record).await;
    }
    let answer = whole(&api, dialect, prepared, &call, record, |object| object).await;
    drop(holding);
    answer
}

/// The whole answer, as `body` makes the response's body of the answer's API object.
async fn whole(
    api: &Api,
    dialect: Dialect,
    prepared: Prepared,
    call: &Call,
    record: &mut Record,
    body: impl FnOnce(Value) -> Value,
) -> Response {
    // A client that goes away drops this future, and with it the work.
    let cancel = CancellationToken::new();
    let mut warnings = prepared.warnings;
    api.aim(record, call);
    let answer = api.answer(call, &cancel, None).await;
    api.note(record, &answer);
    match answer {
        Ok(answered) => {
            warnings.extend(answered.report.warnings.iter().cloned());
            let object = whole_object(api, dialect, call, &answered);
            with_warnings(json_body(body(object)), &warnings)
        }
        Err(e) => error(dialect, &e, &warnings),
    }
}

/// The API object of a whole answer, written by the dialect's encoder.
fn whole_object(api: &Api, dialect: Dialect, call: &Call, answered: &Answered) -> Value {
    let model = api.model_name(call);
    dialect.whole(&Opening::new(&model, call), answered)
}

/// The encoder of a streamed answer in `dialect`. A stream that says how long the prompt is
/// first (Anthropic's `message_start`) has it counted by the embedded model, estimated for
/// others.
async fn stream_encoder(
    api: &Api,
    dialect: Dialect,
    prepared: &Prepared,
    call: &Call,
) -> Box<dyn Encode> {
    let model = api.model_name(call);
    let prompt_tokens = if dialect.counts_prompt() {
        api.count_tokens(call)
            .await
            .unwrap_or_else(|_| call.prompt_tokens_estimate())
    } else {
        0
    };
    dialect.encoder(&Opening {
        include_usage: prepared.include_usage,
        prompt_tokens,
        ..Opening::new(&model, call)
    })
}

/// Gemini's `streamGenerateContent` without `?alt=sse`: the answer as a JSON array of one
/// response.
async fn gemini_array(api: Arc<Api>, body: Bytes, model: &str, record: &mut Record) -> Response {
    let _admitted = match api.admit() {
        Ok(admitted) => admitted,
        Err(e) => return error(gemini::DIALECT, &e, &[]),
    };
    let (prepared, call) = match parse(&api, gemini::DIALECT, &body, Some(model), false).await {
        Ok(parsed) => parsed,
        Err(response) => return *response,
    };
    drop(body);
    whole(&api, gemini::DIALECT, prepared, &call, record, |object| {
        json!([object])
    })
    .await
}

/// What a call's answer shows while it is made (its text, the tool calls it begins and their
/// arguments), handed to the stream's task; an attempt whose output is not the answer's own
/// (JSON written for a schema, calls written in text) is not shown.
struct Deltas {
    sender: mpsc::UnboundedSender<Piece>,
    /// The current attempt's output is the answer's own.
    verbatim: AtomicBool,
    /// The API shows tool calls as they are made (Gemini sends them whole, at the end).
    calls: bool,
    /// The caller is shown the model's reasoning (Gemini only with `includeThoughts`).
    reasoning: bool,
    /// Something has been handed on: the client may have seen it.
    sent: AtomicBool,
    /// Until when the backend waits to try again (a provider's asked wait), if it does.
    retry_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Deltas {
    /// What `call`'s answer shows in `dialect`'s stream, handed to `sender`.
    fn new(sender: mpsc::UnboundedSender<Piece>, dialect: Dialect, call: &Call) -> Self {
        Deltas {
            sender,
            verbatim: AtomicBool::new(false),
            calls: dialect.streams_calls(),
            reasoning: call.request.reasoning.shown != Some(false),
            sent: AtomicBool::new(false),
            retry_until: std::sync::Mutex::new(None),
        }
    }

    /// When the head stops waiting for the first piece: [`HEAD_WAIT`] after `started`, or as
    /// long as a retry the backend said it waits for, and the retry's own head wait after it.
    fn head_deadline(&self, started: tokio::time::Instant) -> tokio::time::Instant {
        let retry = *self
            .retry_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let first = started + HEAD_WAIT;
        retry.map_or(first, |until| first.max(until + HEAD_WAIT))
    }

    fn hand_on(&self, piece: Piece) {
        self.sent.store(true, Ordering::Relaxed);
        let _ = self.sender.send(piece);
    }
}

impl Sink for Deltas {
    fn event(&self, event: Event<'_>) {
        if let Event::Attempt { verbatim, .. } = event {
            self.verbatim.store(verbatim, Ordering::Relaxed);
        }
        if !self.verbatim.load(Ordering::Relaxed) {
            return;
        }
        match event {
            Event::Delta { text, .. } if !text.is_empty() => {
                self.hand_on(Piece::Text(text.to_owned()));
            }
            Event::Reasoning { text, .. } if self.reasoning && !text.is_empty() => {
                self.hand_on(Piece::Reasoning(text.to_owned()));
            }
            Event::Logprobs { logprobs, .. } if !logprobs.is_empty() => {
                self.hand_on(Piece::Logprobs(logprobs.to_vec()));
            }
            Event::ToolCall { .. } | Event::ToolArgs { .. } if !self.calls => {}
            Event::ToolCall {
                index, id, name, ..
            } => self.hand_on(Piece::CallStart {
                index,
                id: id.to_owned(),
                name: name.to_owned(),
            }),
            Event::ToolArgs {
                index, fragment, ..
            } => self.hand_on(Piece::CallArgs {
                index,
                fragment: fragment.to_owned(),
            }),
            _ => {}
        }
    }

    fn committed(&self) -> bool {
        self.sent.load(Ordering::Relaxed)
    }

    fn retrying(&self, after: Duration) {
        let until = tokio::time::Instant::now() + after;
        let mut retry = self
            .retry_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *retry = Some(retry.map_or(until, |known| known.max(until)));
    }
}

/// The answer as the API's stream of server-sent events. The work runs on a task of its own,
/// bounded by its own timeouts whether or not the client reads, and hands its frames over a
/// bounded buffer; a client that reads none of them for `Api::stream_write_timeout`, or goes
/// away, cancels it, and the call's place, model and memory are freed. The head waits for the
/// answer's first piece (at most [`HEAD_WAIT`]), so a call that fails before it is answered with
/// its HTTP status.
pub(super) async fn streamed(
    api: Arc<Api>,
    dialect: Dialect,
    prepared: Prepared,
    call: Parsed,
    holding: Holding,
    encode: Box<dyn Encode>,
    record: Record,
) -> Response {
    let (frames, mut out) = mpsc::channel::<Bytes>(STREAM_BUFFER);
    let (head, began) = oneshot::channel();
    let warnings = prepared.warnings;
    drop(prepared.arguments);
    tokio::spawn(async move {
        stream_answer(api, dialect, encode, call, frames, head, record).await;
        drop(holding);
    });
    match began.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return error(dialect, &e, &warnings),
        Err(_) => {
            let e = ApiError::new(500, ErrorKind::Api, "the answer ended before it began");
            return error(dialect, &e, &warnings);
        }
    }
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| {
        out.poll_recv(cx)
            .map(|frame| frame.map(Ok::<Bytes, std::convert::Infallible>))
    }));
    let mut response = Response::new(body);
    // Ollama's stream is a JSON object a line; the others' server-sent events.
    let content_type = HeaderValue::from_static(dialect.stream_content_type());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_warnings(response, &warnings)
}

/// Hands `list` to the client's buffer, waiting at most `within` for room for each frame;
/// `false` when the client is gone or reads nothing.
async fn hand_over(frames: &mpsc::Sender<Bytes>, list: Vec<String>, within: Duration) -> bool {
    for frame in list {
        match tokio::time::timeout(within, frames.send(Bytes::from(frame))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return false,
            Err(_) => {
                tracing::warn!(
                    waited_secs = within.as_secs(),
                    "a streaming client read nothing for AGENT_AS_MODEL_STREAM_WRITE_TIMEOUT_SECS: \
                     its call is cancelled"
                );
                return false;
            }
        }
    }
    true
}

/// How a streamed answer's beginning went: it ended before it showed anything, or it began
/// (with its first piece, or with none by [`HEAD_WAIT`], or by the end of a retry's wait).
enum Early<T> {
    Ended(T),
    Began(Option<Piece>),
}

/// How an answer ended: made, or the error it ended with.
type Outcome = Result<Answered, ApiError>;

/// Answers the call, telling `head` whether it began (or the error to answer with instead of
/// a stream) and then handing each event's frames to `frames`; returns (dropping the work) as
/// soon as nobody reads them.
pub(super) async fn stream_answer(
    api: Arc<Api>,
    dialect: Dialect,
    mut stream: Box<dyn Encode>,
    call: Parsed,
    frames: mpsc::Sender<Bytes>,
    head: oneshot::Sender<Result<(), ApiError>>,
    mut record: Record,
) {
    api.aim(&mut record, &call);
    let within = api.stream_write_timeout;
    let (deltas, mut pieces) = mpsc::unbounded_channel();
    let shown = Arc::new(Deltas::new(deltas, dialect, &call));
    let sink: crate::fulfil::live::Events = shown.clone();
    let cancel = CancellationToken::new();
    // However this ends, the work stops with it.
    let _stop = cancel.clone().drop_guard();
    let answer = api.answer(&call, &cancel, Some(sink));
    tokio::pin!(answer);
    let mut head = head;
    let Some(early) = first_sign(answer.as_mut(), &mut pieces, &shown, &mut head).await else {
        return;
    };
    let Some((ended, first)) = send_head(&api, &mut record, early, head) else {
        return;
    };
    if !hand_over(&frames, stream.start(), within).await {
        return;
    }
    if let Some(piece) = first {
        record.first_token();
        if !hand_over(&frames, stream.piece(piece), within).await {
            return;
        }
    }
    let result = match ended {
        Some(result) => result,
        None => {
            let relayed = relay(answer, &mut pieces, &frames, &mut stream, within, &record).await;
            match relayed {
                Some(result) => {
                    api.note(&mut record, &result);
                    result
                }
                None => return,
            }
        }
    };
    end_stream(stream.as_mut(), &mut pieces, result, &frames, within).await;
}

/// Waits until the head can go out: the first piece, the answer's end, or [`HEAD_WAIT`]
/// (longer while the backend waits to try again). `None` when the client is gone first.
async fn first_sign<F>(
    mut answer: std::pin::Pin<&mut F>,
    pieces: &mut mpsc::UnboundedReceiver<Piece>,
    shown: &Deltas,
    head: &mut oneshot::Sender<Result<(), ApiError>>,
) -> Option<Early<F::Output>>
where
    F: std::future::Future,
{
    let started = tokio::time::Instant::now();
    let early = loop {
        let deadline = shown.head_deadline(started);
        tokio::select! {
            result = &mut answer => break Early::Ended(result),
            Some(piece) = pieces.recv() => break Early::Began(Some(piece)),
            () = tokio::time::sleep_until(deadline) => {
                if shown.head_deadline(started) <= deadline {
                    break Early::Began(None);
                }
            }
            () = head.closed() => return None,
        }
    };
    Some(early)
}

/// Tells `head` how the answer began (an answer that ended already noted in `record`): the
/// error it ended with, answered instead of a stream, or that the stream begins. Returns the
/// answer when it ended already, and the first piece when there is one; `None` when nothing
/// more is to be sent.
fn send_head(
    api: &Api,
    record: &mut Record,
    early: Early<Outcome>,
    head: oneshot::Sender<Result<(), ApiError>>,
) -> Option<(Option<Outcome>, Option<Piece>)> {
    let (ended, first) = match early {
        Early::Ended(result) => {
            api.note(record, &result);
            match result {
                // Nothing was sent: the error is the answer's status.
                Err(e) => {
                    let _ = head.send(Err(e));
                    return None;
                }
                Ok(answered) => (Some(Ok(answered)), None),
            }
        }
        Early::Began(first) => (None, first),
    };
    if head.send(Ok(())).is_err() {
        return None;
    }
    Some((ended, first))
}

/// The stream's end, once the answer is made: the pieces still queued, then its last frames
/// (the whole answer's, or the error's), after the response is saved where it is kept.
async fn end_stream(
    stream: &mut dyn Encode,
    pieces: &mut mpsc::UnboundedReceiver<Piece>,
    result: Result<Answered, ApiError>,
    frames: &mpsc::Sender<Bytes>,
    within: Duration,
) {
    while let Ok(piece) = pieces.try_recv() {
        if !hand_over(frames, stream.piece(piece), within).await {
            return;
        }
    }
    let last = match result {
        Ok(answered) => stream.finish(&answered),
        Err(e) => stream.error(&e),
    };
    if let Some(saving) = stream.save() {
        saving.await;
    }
    hand_over(frames, last, within).await;
}

/// Hands the answer's pieces (and Anthropic's pings) to the client while it is made; its
/// result, or `None` when the client is gone or reads nothing.
async fn relay<F>(
    mut answer: std::pin::Pin<&mut F>,
    pieces: &mut mpsc::UnboundedReceiver<Piece>,
    frames: &mpsc::Sender<Bytes>,
    stream: &mut Box<dyn Encode>,
    within: Duration,
    record: &Record,
) -> Option<F::Output>
where
    F: std::future::Future,
{
    // The first ping is due in PING_EVERY. (An interval's first tick is "now", which the timer
    // rounds up to its next millisecond.)
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            result = &mut answer => return Some(result),
            Some(piece) = pieces.recv() => {
                record.first_token();
                if !hand_over(frames, stream.piece(piece), within).await {
                    return None;
                }
            }
            _ = ping.tick() => {
                if !hand_over(frames, stream.ping().into_iter().collect(), within).await {
                    return None;
                }
            }
            () = frames.closed() => return None,
        }
    }
}

/// The prompt tokens a request would read: counted by the embedded model's tokenizer, estimated
/// for other models.
pub(super) async fn count(
    api: Arc<Api>,
    dialect: Dialect,
    body: Bytes,
    model: Option<&str>,
) -> Response {
    let _admitted = match api.admit() {
        Ok(admitted) => admitted,
        Err(e) => return error(dialect, &e, &[]),
    };
    let (prepared, call) = match parse(&api, dialect, &body, model, false).await {
        Ok(parsed) => parsed,
        Err(response) => return *response,
    };
    drop(body);
    let tokens = match api.count_tokens(&call).await {
        Ok(tokens) => tokens,
        Err(e) => return error(dialect, &e, &prepared.warnings),
    };
    json_body(dialect.tokens_object(tokens))
}

/// `POST /v1/responses/input_tokens`: the prompt a `POST /v1/responses` of the same body would
/// read, the stored conversation its `previous_response_id` names included (loaded and counted
/// against the buffer as a create's is).
pub(super) async fn responses_tokens(
    State(api): State<Arc<Api>>,
    Extension(budget): Budgets,
    held: Share,
    body: Bytes,
) -> Response {
    let dialect = resp::DIALECT;
    let (_admitted, map) = match admitted_object(&api, dialect, body).await {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let loads = Loads {
        budget: &budget,
        values: values_of(&held),
    };
    let turn = match responses_turn(&api, loads, map, None).await {
        Ok(turn) => turn,
        Err(refused) => return error(dialect, &refused.error, &refused.warnings),
    };
    match api.count_tokens(&turn.call).await {
        Ok(tokens) => json_body(dialect.tokens_object(tokens)),
        Err(e) => error(dialect, &e, &turn.prepared.warnings),
    }
}

/// The models calls may name: `(id, aliases, what the backends say of it)`, each described once
/// (describing a model is not free: a listing that described each model again per id was
/// quadratic in the models file).
fn names(api: &Api) -> Vec<(String, Vec<String>, Value)> {
    api.service
        .backends()
        .models()
        .into_iter()
        .filter_map(|m| Some((m.get("id")?.as_str()?.to_owned(), aliases(&m), m)))
        .collect()
}

/// The aliases a model's `list_models` entry lists.
pub(super) fn aliases(about: &Value) -> Vec<String> {
    about
        .get("aliases")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The list in `dialect`'s shape.
fn model_list(api: &Api, dialect: Dialect) -> Value {
    let all = names(api);
    let ids: Vec<&str> = all.iter().map(|(id, _, _)| id.as_str()).collect();
    let data: Vec<Value> = all
        .iter()
        .map(|(id, _, about)| dialect.model_object(id, Some(about)))
        .collect();
    dialect.model_list(&ids, data)
}

/// `GET /v1/models`: the list of the API whose headers the request carries.
pub(super) async fn models(State(api): State<Arc<Api>>, headers: HeaderMap) -> Response {
    json_body(model_list(&api, models_dialect(&headers)))
}

/// The model list of `dialect` (its `Models` route).
pub(super) async fn models_of(api: Arc<Api>, dialect: Dialect) -> Response {
    json_body(model_list(&api, dialect))
}

/// `GET /v1/models/{id}`: the model by name or alias, or a 404 listing the names.
fn one_model(api: &Api, dialect: Dialect, name: &str) -> Response {
    let name = name.strip_prefix("models/").unwrap_or(name);
    let all = names(api);
    match all
        .iter()
        .find(|(id, aliases, _)| id == name || aliases.iter().any(|a| a == name))
    {
        Some((id, _, about)) => json_body(dialect.model_object(id, Some(about))),
        None => {
            let ids = all.iter().map(|(id, _, _)| crate::error::clip(id));
            let known = match crate::error::bounded_list(ids, crate::error::MAX_LIST_BYTES) {
                (known, 0) => known,
                (known, more) => format!("{known} and {more} more (GET /v1/models lists them all)"),
            };
            let e = ApiError::from(crate::error::CallError::UnknownModel {
                name: crate::error::clip(name).into_owned(),
                known,
            });
            error(dialect, &e, &[])
        }
    }
}

pub(super) async fn model(
    State(api): State<Arc<Api>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    one_model(&api, models_dialect(&headers), &name)
}

/// One model of `dialect`'s list (its `Model` route).
pub(super) async fn model_of(api: Arc<Api>, dialect: Dialect, name: &str) -> Response {
    one_model(&api, dialect, name)
}
