//! The provider backend: an OpenAI-compatible chat completions API (Ollama, llama.cpp's
//! server, vLLM, LM Studio, OpenRouter, Groq, OpenAI…). Tools and `response_format:
//! json_schema` are sent natively where the provider takes them (configurable), otherwise the
//! machine's prompt paths apply. Every wait is bounded; 429 and 5xx are retried with backoff
//! ([`crate::retry`]), honouring `Retry-After` (seconds or an HTTP date). The key is sent as a
//! bearer token and never logged or echoed.

use super::answer::{
    AnswerCall, Arguments, ChatCompletion, ErrorAnswer, ErrorObject, Field, UsageCounts,
};
use super::direct::{
    BoxFuture, EmbedInput, EmbedRequest, Embeddings, Model, ModelRequest, ModelTool, Stats,
};
use super::stream::StreamError;
use crate::call::{Block, Completion, Samplers, Usage};
use crate::config::Config;
use crate::error::{Backend, CallError, CallResult, Upstream, clip};
use crate::fulfil::Capabilities;
use crate::fulfil::live::{Event, Events, Sink};
use crate::fulfil::written::Piece;
use crate::retry::{self, Failure, GaveUp};
use crate::wire::openai::{self, Reader};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How to reach the provider.
#[derive(Clone)]
pub struct ProviderSettings {
    /// Base URL of the API, e.g. `https://api.openai.com/v1` (`/chat/completions` is added).
    pub base_url: String,
    pub model: String,
    pub key: Option<String>,
    pub tools: bool,
    pub json_schema: bool,
    /// The longest wait for the first byte of an answer, and between two of its parts.
    pub timeout: Duration,
    /// The longest a call may take in all: its attempts, the waits between them, and the
    /// whole answer however steadily it arrives.
    pub deadline: Duration,
    pub retries: u32,
    /// The longest `Retry-After` honoured; a longer one fails the call at once.
    pub max_retry_after: Duration,
    /// The largest answer read, in bytes.
    pub max_response: usize,
    /// The most tool calls read from one answer.
    pub max_tool_calls: usize,
    /// Ask for the answer as a stream of events (`stream: true`), read as it is made.
    pub stream: bool,
    /// The most tokens the provider's model writes in one answer: a call asking for more is
    /// sent this many (a provider refuses a larger `max_tokens` than its model's limit).
    pub max_tokens: Option<u32>,
    /// Where the timeout was set, as an error names it: the environment variable, or a models
    /// file's setting.
    pub timeout_source: String,
}

/// Why a provider cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "the provider backend needs --provider-url (AGENT_AS_MODEL_PROVIDER_URL) \
         and --provider-model (AGENT_AS_MODEL_PROVIDER_MODEL)"
    )]
    Missing,
    /// The base URL is not one (`shown` is the URL without its secrets).
    #[error("the provider URL {problem}: {shown}")]
    Url { problem: UrlProblem, shown: String },
    #[error("cannot start the HTTP client: {0}")]
    Client(Arc<reqwest::Error>),
}

/// The callers that start a backend speak in messages.
impl From<SetupError> for String {
    fn from(e: SetupError) -> String {
        e.to_string()
    }
}

/// What is wrong with a provider's base URL, said without repeating it (it may carry a
/// password or a key).
#[derive(Debug, Clone, thiserror::Error)]
pub enum UrlProblem {
    #[error("must start with http:// or https:// and name a host")]
    NotHttp,
    #[error("is not a URL ({0})")]
    NotUrl(UrlParseError),
}

/// Why a text is not a URL.
pub type UrlParseError = <reqwest::Url as std::str::FromStr>::Err;

impl ProviderSettings {
    /// The provider's settings; `Err` names what is missing.
    pub fn from_config(config: &Config) -> Result<ProviderSettings, SetupError> {
        let p = &config.provider;
        let (Some(base_url), Some(model)) = (&p.provider_url, &p.provider_model) else {
            return Err(SetupError::Missing);
        };
        let key = p.provider_key.clone().filter(|k| !k.is_empty());
        Ok(ProviderSettings::at(config, base_url, model, key))
    }

    /// A provider at `base_url` answering as `model`, with the command line's other settings
    /// (a models file's entry overrides some of them).
    pub fn at(config: &Config, base_url: &str, model: &str, key: Option<String>) -> Self {
        let p = &config.provider;
        ProviderSettings {
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            key,
            tools: p.provider_tools,
            json_schema: p.provider_json_schema,
            timeout: Duration::from_secs(p.provider_timeout_secs),
            deadline: Duration::from_secs(p.provider_deadline_secs),
            retries: p.provider_retries,
            max_retry_after: Duration::from_secs(60),
            max_response: usize::try_from(p.provider_max_response_bytes).unwrap_or(usize::MAX),
            max_tool_calls: usize::try_from(p.provider_max_tool_calls).unwrap_or(usize::MAX),
            stream: p.provider_stream,
            max_tokens: p.provider_max_tokens,
            timeout_source: "AGENT_AS_MODEL_PROVIDER_TIMEOUT_SECS".to_owned(),
        }
    }
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("base_url", &shown_url(&self.base_url))
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "(set)"))
            .finish_non_exhaustive()
    }
}

pub struct Provider {
    settings: ProviderSettings,
    client: reqwest::Client,
    endpoint: reqwest::Url,
    /// `/embeddings` beside `/chat/completions`.
    embeddings: reqwest::Url,
    /// The URL as shown to clients and in errors: scheme, host, port and path only.
    shown: String,
    /// What must never reach a caller: the key, and the URL's password and query values.
    secrets: Vec<String>,
    /// The last call's failure (redacted), shown by `list_models` until a call succeeds.
    last_error: std::sync::Mutex<Option<String>>,
    /// Requests sent again after a failure worth retrying, for the metrics.
    retries: AtomicU64,
}

/// What a stream keeps back from the caller until the next piece shows it is no secret: the end
/// of the text, and the end of one tool call's arguments (by the call's index).
#[derive(Default)]
struct Held {
    text: String,
    args: Option<(usize, String)>,
}

/// The HTTP client every provider shares (a models file may name thousands: one client each
/// held its own connection pool and TLS settings). Each request carries its provider's timeout.
/// Redirects are followed only within the origin of the request's first URL, at most 5: the
/// prompt (and the key) never go to another host.
fn shared_client() -> Result<reqwest::Client, SetupError> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, Arc<reqwest::Error>>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .user_agent(concat!("agent-as-model/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::custom(|attempt| {
                    let first = attempt.previous().first().map(reqwest::Url::origin);
                    if attempt.previous().len() >= 5 || first != Some(attempt.url().origin()) {
                        attempt.stop()
                    } else {
                        attempt.follow()
                    }
                }))
                .build()
                .map_err(Arc::new)
        })
        .clone()
        .map_err(SetupError::Client)
}

/// What must never reach a caller: the key, the URL's password and query values, each as
/// written (percent-escapes, `+`) and decoded, longest first so that no part of one is left.
fn secrets(key: Option<&str>, url: &reqwest::Url) -> Vec<String> {
    let mut secrets: Vec<String> = key.iter().map(|k| (*k).to_owned()).collect();
    if let Some(password) = url.password() {
        secrets.push(password.to_owned());
        secrets.extend(
            reqwest::Url::parse(&format!("http://x/?p={password}"))
                .ok()
                .and_then(|u| u.query_pairs().next().map(|(_, v)| v.into_owned())),
        );
    }
    secrets.extend(url.query_pairs().map(|(_, v)| v.into_owned()));
    secrets.extend(
        url.query()
            .unwrap_or_default()
            .split('&')
            .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_owned())),
    );
    secrets.retain(|s| s.len() >= 4);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// A URL as it may be shown: scheme, host, port and path, without credentials or query.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path().trim_end_matches('/')
        ),
        Err(_) => "(an unparsable URL)".to_owned(),
    }
}

/// `url` parsed as a provider's base URL; `Err` says what is wrong without repeating it (it may
/// carry a password or a key).
pub fn http_url(url: &str) -> Result<reqwest::Url, UrlProblem> {
    match reqwest::Url::parse(url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(u),
        Ok(_) => Err(UrlProblem::NotHttp),
        Err(e) => Err(UrlProblem::NotUrl(e)),
    }
}

impl Provider {
    pub fn new(settings: ProviderSettings) -> Result<Self, SetupError> {
        let mut endpoint = http_url(&settings.base_url).map_err(|problem| SetupError::Url {
            problem,
            shown: shown_url(&settings.base_url),
        })?;
        // `/chat/completions` goes after the path; a query string stays a query string.
        let base = endpoint.path().trim_end_matches('/').to_owned();
        let mut embeddings = endpoint.clone();
        embeddings.set_path(&format!("{base}/embeddings"));
        endpoint.set_path(&format!("{base}/chat/completions"));
        let secrets = secrets(settings.key.as_deref(), &endpoint);
        let client = shared_client()?;
        Ok(Provider {
            shown: shown_url(&settings.base_url),
            settings,
            client,
            endpoint,
            embeddings,
            secrets,
            last_error: std::sync::Mutex::default(),
            retries: AtomicU64::new(0),
        })
    }

    /// `text` with every secret replaced, before anything is clipped or parsed.
    fn scrub(&self, text: String) -> String {
        if !self.secrets.iter().any(|s| text.contains(s.as_str())) {
            return text;
        }
        self.secrets
            .iter()
            .fold(text, |t, s| t.replace(s.as_str(), "[redacted]"))
    }

    /// A parsed answer with every secret replaced in its decoded strings too (a key written
    /// with `\u` escapes is whole only once decoded).
    fn scrub_decoded(&self, answer: Value) -> CallResult<Value> {
        let text = answer.to_string();
        if !self.secrets.iter().any(|s| text.contains(s.as_str())) {
            return Ok(answer);
        }
        serde_json::from_str(&self.scrub(text))
            .map_err(|e| fail(format!("the provider's answer: {e}")))
    }

    /// The text of a stream that may be shown now: `held` and `text` scrubbed, less an end that
    /// could still become a secret with the next delta (kept in `held`).
    fn release(&self, held: &mut String, text: &str) -> String {
        held.push_str(text);
        let scrubbed = self.scrub(std::mem::take(held));
        let keep = self
            .secrets
            .iter()
            .map(|secret| crate::call::partial_suffix(&scrubbed, secret))
            .max()
            .unwrap_or(0);
        let cut = scrubbed.len().saturating_sub(keep);
        match (scrubbed.get(..cut), scrubbed.get(cut..)) {
            (Some(shown), Some(rest)) => {
                *held = rest.to_owned();
                shown.to_owned()
            }
            _ => scrubbed,
        }
    }

    /// The answer's body, at most `max_response` bytes (a declared longer one is refused before
    /// it is read), with the secrets scrubbed.
    async fn read(&self, mut response: reqwest::Response, deadline: Instant) -> CallResult<String> {
        let max = self.settings.max_response;
        let too_long = || {
            fail(format!(
                "the provider's answer is longer than {max} bytes, the most this server reads \
                 (AGENT_AS_MODEL_PROVIDER_MAX_RESPONSE_BYTES)"
            ))
        };
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_long());
        }
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk(&mut response, deadline).await? {
            if body.len().saturating_add(chunk.len()) > max {
                return Err(too_long());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(self.scrub(String::from_utf8_lossy(&body).into_owned()))
    }

    /// The provider's answer to `body`, retried with backoff while it fails in a way it may
    /// not next time (429, 5xx, a timeout, a refused connection), all of it within the call's
    /// deadline: no wait runs past it, and a wait asked for that would ends the retries.
    async fn call(
        &self,
        url: &reqwest::Url,
        body: Value,
        live: Option<&dyn Sink>,
    ) -> CallResult<Value> {
        let policy = retry::Policy {
            max_retry_after: self.settings.max_retry_after,
            ..retry::Policy::new(self.settings.retries)
        };
        // Written once, and shared by every attempt rather than copied for each: a long
        // conversation is held once as sent.
        let body = bytes::Bytes::from(body.to_string());
        let started = Instant::now();
        // The setting is at most a week; a deadline past the clock's end is a week.
        let deadline = started
            .checked_add(self.settings.deadline)
            .or_else(|| started.checked_add(Duration::from_secs(MAX_DEADLINE_SECS)))
            .unwrap_or(started);
        retry::retry(&policy, Some(deadline), |number| {
            if number > 0 {
                self.retries.fetch_add(1, Ordering::Relaxed);
            }
            self.attempt(url, &body, live, deadline)
        })
        .await
        .map_err(|gave_up| self.gave_up(gave_up))
    }

    /// Sends the request: the response's head within the timeout and before `deadline`; a
    /// timeout, or a connection that fails, is worth another try.
    async fn send(
        &self,
        url: &reqwest::Url,
        body: &bytes::Bytes,
        deadline: Instant,
    ) -> Result<reqwest::Response, Failure<Failed>> {
        let mut request = self
            .client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        if let Some(key) = &self.settings.key {
            request = request.bearer_auth(key);
        }
        match tokio::time::timeout_at(self.by(deadline), request.send()).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) if e.is_timeout() || e.is_connect() => Err(Failure::Retryable {
                error: Failed::Transport(e),
                retry_after: None,
            }),
            Ok(Err(e)) => Err(Failed::call(self.failure(e))),
            // Silent past the timeout: worth another try while the deadline allows one.
            Err(_) => Err(Failure::Retryable {
                error: Failed::Call(self.timed_out(deadline, Waited::First)),
                retry_after: None,
            }),
        }
    }

    /// One request and its answer: its first byte within the timeout, each later part within
    /// the timeout of the one before, and all of it before `deadline`.
    async fn attempt(
        &self,
        url: &reqwest::Url,
        body: &bytes::Bytes,
        live: Option<&dyn Sink>,
        deadline: Instant,
    ) -> Result<Value, Failure<Failed>> {
        let response = self.send(url, body, deadline).await?;
        let status = response.status();
        let retry_after = retry::retry_after(response.headers());
        if status.is_redirection() {
            return Err(Failed::call(self.redirect_refused(&response)));
        }
        if status.is_success() && is_event_stream(&response) {
            return self
                .stream(response, live, deadline)
                .await
                .map_err(Failed::call);
        }
        let text = self.read(response, deadline).await.map_err(Failed::call)?;
        if status.is_success() {
            return self.answer(status, &text).map_err(Failed::call);
        }
        let error = Failed::Status {
            status,
            text,
            retry_after,
        };
        if status.as_u16() == 429 || status.is_server_error() {
            // A wait the retry will honour: a caller holding its head for the first piece
            // holds it as long.
            if let (Some(live), Some(wait)) = (live, retry_after)
                && wait <= self.settings.max_retry_after
            {
                live.retrying(wait);
            }
            Err(Failure::Retryable { error, retry_after })
        } else {
            Err(Failure::Final(error))
        }
    }

    /// A whole answer's body, parsed, with the secrets scrubbed from its decoded strings.
    fn answer(&self, status: reqwest::StatusCode, text: &str) -> CallResult<Value> {
        let answer = serde_json::from_str(text).map_err(|e| {
            fail(format!(
                "the provider answered {status} with a body that is not JSON ({e}): {}",
                clip(text)
            ))
        })?;
        self.scrub_decoded(answer)
    }

    /// The error for a call whose attempts ended without an answer. A wait the provider asked
    /// for and this server did not take is said, and kept for the client with the status.
    fn gave_up(&self, gave_up: GaveUp<Failed>) -> CallError {
        let (error, asked, why) = match gave_up {
            GaveUp::Exhausted { error, attempts } => (error, None, Ended::Attempts(attempts)),
            GaveUp::Deadline { error, attempts } => (error, None, Ended::Deadline(attempts)),
            GaveUp::TooLong { error, asked, .. } => (error, Some(asked), Ended::TooLong),
            GaveUp::Final(error) => (error, None, Ended::Final),
        };
        let (status, text, retry_after) = match error {
            Failed::Call(e) => return e,
            Failed::Transport(e) => return self.failure(e),
            Failed::Status {
                status,
                text,
                retry_after,
            } => (status, text, asked.or(retry_after)),
        };
        let said = provider_message(&text);
        let wait = retry_after.map(|w| w.as_secs()).unwrap_or_default();
        let message = match (why, retry_after) {
            // A status not worth retrying.
            (Ended::Final, _) => {
                return fail(format!("the provider answered {status}: {said}")).with_upstream(
                    Upstream {
                        status: Some(status.as_u16()),
                        retry_after: None,
                    },
                );
            }
            (Ended::TooLong, _) => format!(
                "the provider answered {status} and asked to retry after {wait} s, longer than \
                 this server waits ({} s): {said}",
                self.settings.max_retry_after.as_secs(),
            ),
            (Ended::Deadline(attempts), Some(_)) => format!(
                "the provider answered {status} after {attempts} attempt(s) and asked to retry \
                 after {wait} s, past the {} s a provider call may take \
                 (AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS): {said}",
                self.settings.deadline.as_secs(),
            ),
            (Ended::Attempts(attempts), Some(_)) => format!(
                "the provider answered {status} after {attempts} attempt(s) and asks to retry \
                 after {wait} s: {said}"
            ),
            (Ended::Attempts(attempts) | Ended::Deadline(attempts), None) => {
                format!("the provider answered {status} after {attempts} attempt(s): {said}")
            }
        };
        unavailable(message).with_upstream(Upstream {
            status: Some(status.as_u16()),
            retry_after,
        })
    }

    /// Reads a streamed answer as it arrives (bounded like a whole one), telling `live` its
    /// text, and assembles the chat completion.
    async fn stream(
        &self,
        mut response: reqwest::Response,
        live: Option<&dyn Sink>,
        deadline: Instant,
    ) -> CallResult<Value> {
        let max = self.settings.max_response;
        let mut assembly = super::stream::Assembly::new(self.settings.max_tool_calls);
        let mut read = 0usize;
        let mut held = Held::default();
        // The timeout runs from the last complete event, not the last byte: a provider that
        // trickles one endless line is cut as one that sends nothing is.
        let mut heard = Instant::now();
        while let Some(chunk) = self.chunk_since(&mut response, heard, deadline).await? {
            read = read.saturating_add(chunk.len());
            if read > max {
                return Err(fail(format!(
                    "the provider's answer is longer than {max} bytes, the most this server \
                     reads (AGENT_AS_MODEL_PROVIDER_MAX_RESPONSE_BYTES)"
                )));
            }
            let added = assembly.feed(&chunk).map_err(stream_failure)?;
            if added.events > 0 {
                heard = Instant::now();
            }
            // A large chunk is work: let the other calls (and this call's timeout) run.
            tokio::task::yield_now().await;
            if let Some(live) = live.filter(|_| added.any) {
                self.tell(live, assembly.deltas, &mut held, added.pieces);
            }
        }
        if let Some(live) = live {
            self.flush(live, assembly.deltas, &mut held);
        }
        let answer = assembly.finish().map_err(stream_failure)?;
        let text = self.scrub(answer.to_string());
        serde_json::from_str(&text).map_err(|e| fail(format!("the provider's answer: {e}")))
    }

    /// Tells `live` what a piece of the stream added, in order, with the secrets scrubbed: the
    /// end of a text, or of a call's arguments, that could still become a secret with the next
    /// piece waits in `held`, told before anything else is (a client joins the pieces, so a
    /// secret split across two would reach it whole).
    fn tell(&self, live: &dyn Sink, tokens: usize, held: &mut Held, pieces: Vec<Piece>) {
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    self.flush_args(live, tokens, held);
                    live.event(Event::Delta {
                        tokens,
                        text: &self.release(&mut held.text, &text),
                    });
                }
                Piece::Reasoning(text) => {
                    self.flush_args(live, tokens, held);
                    live.event(Event::Reasoning {
                        tokens,
                        text: &self.scrub(text),
                    });
                }
                Piece::CallStart { index, id, name } => {
                    self.flush(live, tokens, held);
                    live.event(Event::ToolCall {
                        tokens,
                        index,
                        id: &self.scrub(id),
                        name: &self.scrub(name),
                    });
                }
                // Before the text they made (which may wait in `held`), as they came.
                Piece::Logprobs(logprobs) => live.event(Event::Logprobs {
                    tokens,
                    logprobs: &logprobs,
                }),
                Piece::CallArgs { index, fragment } => {
                    if held.args.as_ref().is_some_and(|(i, _)| *i != index) {
                        self.flush_args(live, tokens, held);
                    }
                    let (_, args) = held.args.get_or_insert_with(|| (index, String::new()));
                    let fragment = self.release(args, &fragment);
                    if !fragment.is_empty() {
                        live.event(Event::ToolArgs {
                            tokens,
                            index,
                            fragment: &fragment,
                        });
                    }
                }
            }
        }
    }

    /// Tells `live` everything `held` keeps back, scrubbed.
    fn flush(&self, live: &dyn Sink, tokens: usize, held: &mut Held) {
        self.flush_args(live, tokens, held);
        if !held.text.is_empty() {
            live.event(Event::Delta {
                tokens,
                text: &self.scrub(std::mem::take(&mut held.text)),
            });
        }
    }

    fn flush_args(&self, live: &dyn Sink, tokens: usize, held: &mut Held) {
        if let Some((index, args)) = held.args.take().filter(|(_, a)| !a.is_empty()) {
            live.event(Event::ToolArgs {
                tokens,
                index,
                fragment: &self.scrub(args),
            });
        }
    }

    /// When a wait for the provider ends: the timeout from now, and never past `deadline`.
    fn by(&self, deadline: Instant) -> Instant {
        self.after(Instant::now(), deadline)
    }

    /// The timeout from `since`, and never past `deadline`.
    fn after(&self, since: Instant, deadline: Instant) -> Instant {
        since
            .checked_add(self.settings.timeout)
            .map_or(deadline, |idle| idle.min(deadline))
    }

    /// The next part of a streamed answer (`None` at its end), waited for until the timeout from
    /// `heard` (the last complete event) and never past `deadline`.
    async fn chunk_since(
        &self,
        response: &mut reqwest::Response,
        heard: Instant,
        deadline: Instant,
    ) -> CallResult<Option<bytes::Bytes>> {
        match tokio::time::timeout_at(self.after(heard, deadline), response.chunk()).await {
            Ok(chunk) => chunk.map_err(|e| self.failure(e)),
            Err(_) => Err(self.timed_out(deadline, Waited::Next)),
        }
    }

    /// The next part of an answer's body (`None` at its end), waited for at most the timeout
    /// and never past `deadline`: an answer that keeps arriving is read to its end.
    async fn chunk(
        &self,
        response: &mut reqwest::Response,
        deadline: Instant,
    ) -> CallResult<Option<bytes::Bytes>> {
        match tokio::time::timeout_at(self.by(deadline), response.chunk()).await {
            Ok(chunk) => chunk.map_err(|e| self.failure(e)),
            Err(_) => Err(self.timed_out(deadline, Waited::Next)),
        }
    }

    /// The error for a wait that ran out: the call's deadline, or the timeout for the first
    /// byte or the next part.
    fn timed_out(&self, deadline: Instant, waited: Waited) -> CallError {
        let idle = self.settings.timeout.as_secs();
        let source = &self.settings.timeout_source;
        let what = if Instant::now() >= deadline {
            format!(
                "had not finished answering after {} s, the most a provider call may take, \
                 retries included (AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS)",
                self.settings.deadline.as_secs()
            )
        } else if waited == Waited::First {
            format!("did not answer within {idle} s ({source})")
        } else {
            format!(
                "sent nothing for {idle} s in the middle of its answer, or no complete event \
                 ({source})"
            )
        };
        unavailable(format!("the provider at {} {what}", self.shown))
    }

    /// The error for a redirect that is not followed (it leaves the provider's origin), naming
    /// where it led without the URL's secrets.
    fn redirect_refused(&self, response: &reqwest::Response) -> CallError {
        let to = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| shown_url(&self.endpoint.join(l).map(String::from).unwrap_or_default()))
            .unwrap_or_default();
        fail(format!(
            "the provider answered {}, a redirect to {to}, which is not followed: it leaves \
             the provider's origin (set the provider URL to where the API is)",
            response.status()
        ))
    }

    /// The secrets never reach a caller, even when a provider echoes them in an error.
    fn redact(&self, e: CallError) -> CallError {
        match e {
            CallError::Backend {
                backend,
                message,
                transient,
                upstream,
            } => CallError::Backend {
                backend,
                message: self.scrub(message),
                transient,
                upstream,
            },
            e => e,
        }
    }

    /// A transport failure, said without its URL (which may carry credentials).
    fn failure(&self, e: reqwest::Error) -> CallError {
        let e = e.without_url();
        let what = if e.is_connect() {
            "could not be reached (is it running, and is the URL right?)".to_owned()
        } else if e.is_timeout() {
            format!(
                "did not answer within {} s ({})",
                self.settings.timeout.as_secs(),
                self.settings.timeout_source
            )
        } else {
            format!("failed: {e}")
        };
        let message = format!("the provider at {} {what}", self.shown);
        if e.is_timeout() || e.is_connect() {
            unavailable(message)
        } else {
            fail(message)
        }
    }
}

/// How one request to the provider failed.
#[derive(Debug)]
enum Failed {
    /// For good, and said.
    Call(CallError),
    /// The provider answered this status with this body (worth retrying when 429 or 5xx),
    /// and asked for this wait before another try.
    Status {
        status: reqwest::StatusCode,
        text: String,
        retry_after: Option<Duration>,
    },
    /// The request timed out or could not connect.
    Transport(reqwest::Error),
}

impl Failed {
    fn call(e: CallError) -> Failure<Failed> {
        Failure::Final(Failed::Call(e))
    }
}

/// Why the attempts ended ([`Provider::gave_up`]).
#[derive(Clone, Copy)]
enum Ended {
    /// The failure was not worth another attempt.
    Final,
    /// The retries were used up after this many attempts.
    Attempts(u32),
    /// The next wait would have run past the call's deadline, after this many attempts.
    Deadline(u32),
    /// The provider asked for a wait longer than this server takes.
    TooLong,
}

/// The longest `AGENT_AS_MODEL_PROVIDER_DEADLINE_SECS` (a week).
pub const MAX_DEADLINE_SECS: u64 = 7 * 86_400;

/// What a timed-out wait was for.
#[derive(Clone, Copy, PartialEq)]
enum Waited {
    /// The answer's first byte.
    First,
    /// The next part of an answer begun.
    Next,
}

fn fail(message: String) -> CallError {
    CallError::backend(Backend::Provider, message)
}

/// A failure another model might not have: overloaded, unreachable, too slow, cut off.
fn unavailable(message: String) -> CallError {
    CallError::unavailable(Backend::Provider, message)
}

/// A stream that cannot be read, transient when it was cut off.
fn stream_failure(e: StreamError) -> CallError {
    let message = e.to_string();
    if e.is_transient() {
        unavailable(message)
    } else {
        fail(message)
    }
}

/// Whether an answer is a stream of server-sent events.
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The provider's own error message when its body is an OpenAI error object, else the body.
fn provider_message(body: &str) -> String {
    let said = serde_json::from_str::<Field<ErrorAnswer>>(body)
        .ok()
        .and_then(Field::into_option)
        .and_then(|answer| match answer.error {
            // The first of `error.message`, `error` and `message` that is there, if it is text.
            Field::Present(Some(Value::String(text))) => Some(text),
            Field::Present(error) => error.as_ref().and_then(ErrorObject::message),
            Field::Absent => answer.message.into_option(),
        });
    clip(said.as_deref().unwrap_or(body)).into_owned()
}

impl Model for Provider {
    fn kind(&self) -> Backend {
        Backend::Provider
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            tools: self.settings.tools,
            json_schema: self.settings.json_schema,
            // Not part of the OpenAI chat API, which refuses it.
            top_k: false,
            streams: true,
            reasoning: true,
            context: false,
        }
    }

    fn model_name(&self) -> Option<String> {
        Some(self.settings.model.clone())
    }

    fn stats(&self) -> Stats {
        Stats {
            retries: Some(self.retries.load(Ordering::Relaxed)),
            engine: None,
        }
    }

    fn describe(&self) -> Value {
        json!({
            "id": self.settings.model,
            "owned_by": "provider",
            "backend": "provider",
            "description": format!(
                "{} at {}, an OpenAI-compatible API this server calls directly.",
                self.settings.model, self.shown
            ),
            "supports": {"tools": self.settings.tools, "json_schema": self.settings.json_schema,
                         "images": true, "stop_sequences": true},
            "last_error": *self.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        })
    }

    fn embed(&self, request: EmbedRequest) -> BoxFuture<'_, CallResult<Embeddings>> {
        Box::pin(self.embeddings(request))
    }

    fn complete(
        &self,
        request: ModelRequest,
        live: Option<Events>,
    ) -> BoxFuture<'_, CallResult<Completion>> {
        Box::pin(async move {
            let mut body = body(&self.settings.model, &request);
            if let Some(cap) = self
                .settings
                .max_tokens
                .filter(|c| *c < request.base.max_tokens)
                && let Some(fields) = body.as_object_mut()
            {
                fields.insert("max_tokens".into(), json!(cap));
            }
            if let Some(fields) = body.as_object_mut().filter(|_| self.settings.stream) {
                fields.insert("stream".into(), json!(true));
                fields.insert("stream_options".into(), json!({"include_usage": true}));
            }
            let unsent = unsent(&request);
            // The request as built is not needed once it is written.
            drop(request);
            let answer = match self.call(&self.endpoint, body, live.as_deref()).await {
                Ok(answer) => {
                    completion(&answer, &self.settings.model, self.settings.max_tool_calls)
                }
                Err(e) => Err(e),
            }
            .map(|mut completion| {
                completion.warnings.extend(unsent);
                completion
            })
            .map_err(|e| self.redact(e));
            *self
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                answer.as_ref().err().map(ToString::to_string);
            answer
        })
    }
}

impl Provider {
    /// Embeddings from the provider's `/embeddings`, in OpenAI's form: the texts (or token
    /// arrays) sent as they came, with its own model's name and `dimensions`.
    async fn embeddings(&self, request: EmbedRequest) -> CallResult<Embeddings> {
        let input: Vec<Value> = request
            .inputs
            .iter()
            .map(|i| match i {
                EmbedInput::Text(text) => json!(text),
                EmbedInput::Tokens(tokens) => json!(tokens),
            })
            .collect();
        let mut body = json!({"model": self.settings.model, "input": input,
                              "encoding_format": "float"});
        if let (Some(d), Some(fields)) = (request.dimensions, body.as_object_mut()) {
            fields.insert("dimensions".into(), json!(d));
        }
        let answer = self
            .call(&self.embeddings, body, None)
            .await
            .map_err(|e| self.redact(e))?;
        let mut made = embedded(&answer, &self.settings.model, request.inputs.len())?;
        // As every backend's: unit vectors, cut to `dimensions` by an upstream that ignored it.
        for vector in &mut made.vectors {
            if let Some(wanted) = request.dimensions
                && wanted < vector.len()
            {
                vector.truncate(wanted);
            }
            *vector = super::direct::normalized(vector);
        }
        Ok(made)
    }
}

/// A provider's `/embeddings` answer: one vector an input, in the inputs' order (by `index`).
pub fn embedded(answer: &Value, model: &str, inputs: usize) -> CallResult<Embeddings> {
    let bad = |what: &str| fail(format!("the provider's embeddings answer {what}"));
    let data = answer
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("has no `data` list"))?;
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (position, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(position);
        let vector = item
            .get("embedding")
            .and_then(Value::as_array)
            .and_then(|v| {
                v.iter()
                    .map(|x| x.as_f64().map(|x| x as f32))
                    .collect::<Option<Vec<f32>>>()
            })
            .ok_or_else(|| {
                bad(&format!(
                    "`data[{position}].embedding` is not a list of numbers"
                ))
            })?;
        match vectors.get_mut(index) {
            Some(slot) => *slot = Some(vector),
            None => return Err(bad(&format!("has an index {index} for {inputs} inputs"))),
        }
    }
    let vectors = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| bad(&format!("has no embedding for input {i}"))))
        .collect::<CallResult<Vec<_>>>()?;
    let usage = |key: &str| {
        answer
            .pointer(&format!("/usage/{key}"))
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
    };
    Ok(Embeddings {
        model: answer
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(model)
            .to_owned(),
        vectors,
        prompt_tokens: usage("prompt_tokens")
            .or(usage("total_tokens"))
            .unwrap_or(0),
    })
}

/// The chat completions request body.
pub fn body(model: &str, request: &ModelRequest) -> Value {
    let messages = openai::messages(
        request.base.system.as_deref(),
        &request.base.turns,
        Reader::Api,
    );
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), json!(messages));
    body.insert("max_tokens".into(), json!(request.base.max_tokens));
    if let Some(t) = request.base.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = request.base.tuning.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(s) = request.base.tuning.seed {
        body.insert("seed".into(), json!(s));
    }
    // Of the samplers, OpenAI's API takes the two penalties (`Samplers::OPENAI`).
    let samplers = &request.base.samplers;
    if let Some(p) = samplers.presence_penalty {
        body.insert("presence_penalty".into(), json!(p));
    }
    if let Some(p) = samplers.frequency_penalty {
        body.insert("frequency_penalty".into(), json!(p));
    }
    if !request.base.stop.is_empty() {
        body.insert("stop".into(), json!(request.base.stop));
    }
    // Passed on as OpenAI takes them; what comes back is read into the answer.
    if let Some(top) = request.base.logprobs {
        body.insert("logprobs".into(), json!(true));
        body.insert("top_logprobs".into(), json!(top));
    }
    reasoning_controls(&request.base, &mut body);
    if !request.tools.is_empty() {
        let tools: Vec<openai::Tool> = request.tools.iter().map(ModelTool::openai).collect();
        body.insert("tools".into(), json!(tools));
        if let Some(choice) = request.tool_choice {
            body.insert("tool_choice".into(), json!(choice.as_str()));
        }
    }
    if let Some(schema) = &request.response_schema {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema",
                   "json_schema": {"name": "output", "schema": schema, "strict": false}}),
        );
    }
    Value::Object(body)
}

/// The warnings for llama.cpp's samplers the request asks for that OpenAI's API has no
/// parameter for (only its two penalties are sent); one given at the value that turns it off
/// asks for nothing.
fn unsent(request: &ModelRequest) -> Vec<String> {
    let off = |name: &str, value: &Value| {
        let off = match name {
            "repeat_penalty" | "typical_p" => 1.0,
            "min_p" | "mirostat" => 0.0,
            _ => return false,
        };
        value.as_f64() == Some(off)
    };
    request
        .base
        .samplers
        .named()
        .into_iter()
        .filter(|(name, value)| !Samplers::OPENAI.contains(name) && !off(name, value))
        .map(|(name, _)| {
            format!("`{name}` was not sent: an OpenAI-compatible API has no such parameter")
        })
        .collect()
}

/// The reasoning controls as OpenAI-compatible servers take them: `reasoning_effort` (OpenAI,
/// vLLM, llama-server; `none` turns reasoning off) and `chat_template_kwargs` (vLLM,
/// llama-server, SGLang: the template's own switches, such as `enable_thinking`).
fn reasoning_controls(base: &crate::call::CompletionRequest, body: &mut Map<String, Value>) {
    let reasoning = base.reasoning;
    let effort = match (reasoning.enabled, reasoning.effort) {
        (_, Some(effort)) => Some(effort.as_str()),
        (Some(false), None) => Some("none"),
        _ => None,
    };
    if let Some(effort) = effort {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    if !base.template_kwargs.is_empty() {
        body.insert(
            "chat_template_kwargs".into(),
            Value::Object(base.template_kwargs.clone()),
        );
    }
}

/// The provider's answer in neutral form.
pub fn completion(answer: &Value, model: &str, max_tool_calls: usize) -> CallResult<Completion> {
    let bad = |what: &str| {
        fail(format!(
            "the provider's answer is not a chat completion: {what}; it was {}",
            clip(&answer.to_string())
        ))
    };
    let read = Field::<ChatCompletion>::read(answer).unwrap_or_default();
    let choice = read
        .choices
        .into_option()
        .and_then(|choices| choices.into_iter().next())
        .ok_or_else(|| bad("choices[0] is missing"))?
        .into_option()
        .unwrap_or_default();
    let message = match choice.message {
        Field::Absent => return Err(bad("choices[0].message is missing")),
        Field::Present(message) => message.unwrap_or_default(),
    };
    let calls = message.tool_calls.into_option().unwrap_or_default();
    if calls.len() > max_tool_calls {
        return Err(too_many_calls(max_tool_calls));
    }
    let mut blocks = Vec::new();
    if let Some(reasoning) = message
        .reasoning_content
        .into_option()
        .or_else(|| message.reasoning.into_option())
        .filter(|r| !r.is_empty())
    {
        blocks.push(Block::Reasoning(reasoning));
    }
    if let Some(text) = message.content.into_option()
        && !text.is_empty()
    {
        blocks.push(Block::Text(text));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let call = call.into_option().unwrap_or_default();
        blocks.push(tool_call(i, call).map_err(|what| bad(&what.to_string()))?);
    }
    if blocks.is_empty() {
        blocks.push(Block::Text(String::new()));
    }
    let finish = openai::finish(
        choice.finish_reason.get().map(String::as_str),
        blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })),
    );
    Ok(Completion {
        blocks,
        model: read.model.into_option().unwrap_or_else(|| model.to_owned()),
        finish,
        usage: usage(read.usage.get()),
        warnings: Vec::new(),
        logprobs: (choice.logprobs.into_option()).and_then(super::answer::ChoiceLogprobs::tokens),
    })
}

/// The error for an answer with more tool calls than this server reads.
pub(super) fn too_many_calls(max: usize) -> CallError {
    stream_failure(StreamError::TooManyCalls(max))
}

/// What is wrong with one of the answer's `tool_calls` (its index).
#[derive(Debug, thiserror::Error)]
enum ToolCallProblem {
    #[error("tool_calls[{0}].function.name is missing")]
    NameMissing(usize),
    #[error("tool_calls[{0}].function.arguments is not a JSON object")]
    ArgumentsNotObject(usize),
}

/// One of the answer's `tool_calls` as a tool use; `Err` says what is wrong with it.
fn tool_call(i: usize, call: AnswerCall) -> Result<Block, ToolCallProblem> {
    let function = call.function.into_option().unwrap_or_default();
    let name = function
        .name
        .into_option()
        .ok_or(ToolCallProblem::NameMissing(i))?;
    let input = match function.arguments.into_option() {
        Some(Arguments::Text(s)) if s.trim().is_empty() => Map::new(),
        Some(Arguments::Text(s)) => serde_json::from_str::<Map<String, Value>>(&s)
            .map_err(|_| ToolCallProblem::ArgumentsNotObject(i))?,
        Some(Arguments::Object(o)) => o,
        None => Map::new(),
    };
    let id = call
        .id
        .into_option()
        .unwrap_or_else(|| crate::call::new_id("call_"));
    Ok(Block::ToolUse { id, name, input })
}

/// The provider's token counts, when it reports both.
fn usage(usage: Option<&UsageCounts>) -> Option<Usage> {
    let count = |n: &Field<u64>| n.get().and_then(|n| usize::try_from(*n).ok());
    let usage = usage?;
    Some(Usage {
        prompt: count(&usage.prompt_tokens)?,
        completion: count(&usage.completion_tokens)?,
        estimated: false,
        cached: usage.cached_tokens(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CompletionRequest, Finish, Role, Samplers, Tuning, Turn};

    #[test]
    fn requests_carry_every_parameter_and_tool_content() {
        let base = CompletionRequest {
            model: "hint".into(),
            system: Some("be brief".into()),
            turns: vec![
                Turn::text(Role::User, "weather?"),
                Turn {
                    role: Role::Assistant,
                    blocks: vec![Block::ToolUse {
                        id: "c1".into(),
                        name: "weather".into(),
                        input: json!({"city": "Paris"}).as_object().unwrap().clone(),
                    }],
                },
                Turn {
                    role: Role::User,
                    blocks: vec![Block::ToolResult {
                        id: "c1".into(),
                        content: vec![Block::Text("sunny".into())],
                        is_error: false,
                    }],
                },
            ],
            max_tokens: 50,
            temperature: Some(0.5),
            tuning: Tuning {
                top_p: Some(0.9),
                top_k: None,
                seed: Some(7),
            },
            stop: vec!["END".into()],
            text: None,
            ..CompletionRequest::default()
        };
        let request = ModelRequest {
            base,
            response_schema: Some(json!({"type": "object"}).as_object().unwrap().clone()),
            ..Default::default()
        };
        let b = body("gpt-x", &request);
        assert_eq!(b["model"], "gpt-x");
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            b["messages"][1],
            json!({"role": "user", "content": "weather?"})
        );
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Paris\"}"
        );
        assert_eq!(
            b["messages"][3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
        );
        assert_eq!(
            (
                &b["temperature"],
                &b["top_p"],
                &b["seed"],
                &b["stop"],
                &b["max_tokens"]
            ),
            (
                &json!(0.5),
                &json!(0.9),
                &json!(7),
                &json!(["END"]),
                &json!(50)
            )
        );
        assert_eq!(b["response_format"]["type"], "json_schema");
    }

    #[test]
    fn openais_penalties_are_sent_and_llama_cpps_other_samplers_are_said_not_to_be() {
        let mut request = ModelRequest::default();
        request.base.samplers = Samplers {
            presence_penalty: Some(0.5),
            repeat_penalty: Some(1.1),
            min_p: Some(0.05),
            ..Samplers::default()
        };
        let b = body("gpt-x", &request);
        assert_eq!(b["presence_penalty"], json!(0.5));
        for absent in ["frequency_penalty", "repeat_penalty", "min_p"] {
            assert!(b.get(absent).is_none(), "{absent}: {b}");
        }
        let warned = unsent(&request);
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(
            warned[0].contains("`repeat_penalty` was not sent") && warned[1].contains("`min_p`"),
            "{warned:?}"
        );
        assert!(unsent(&ModelRequest::default()).is_empty());
        request.base.samplers = Samplers {
            repeat_penalty: Some(1.0),
            mirostat: Some(0),
            ..Samplers::default()
        };
        assert!(unsent(&request).is_empty());
    }

    #[test]
    fn reasoning_controls_reach_the_provider_as_openai_compatible_servers_take_them() {
        let mut base = CompletionRequest::default();
        base.reasoning.enabled = Some(false);
        base.template_kwargs
            .insert("enable_thinking".into(), json!(false));
        let request = ModelRequest {
            base,
            tools: Vec::new(),
            tool_choice: None,
            response_schema: None,
        };
        let b = body("m", &request);
        assert_eq!(b["reasoning_effort"], "none");
        assert_eq!(b["chat_template_kwargs"], json!({"enable_thinking": false}));
        let mut request = request;
        request.base.reasoning.effort = Some(crate::call::Effort::High);
        assert_eq!(body("m", &request)["reasoning_effort"], "high");
        request.base = CompletionRequest::default();
        let b = body("m", &request);
        assert!(b.get("reasoning_effort").is_none() && b.get("chat_template_kwargs").is_none());
    }

    #[test]
    fn answers_become_completions_with_real_usage() {
        let answer = json!({"model": "m1", "choices": [{"finish_reason": "tool_calls",
            "message": {"content": null, "tool_calls": [{"id": "x", "type": "function",
            "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3}});
        let c = completion(&answer, "fallback", 128).unwrap();
        assert_eq!(c.model, "m1");
        assert_eq!(c.finish, Finish::ToolUse);
        assert_eq!(c.usage.map(|u| (u.prompt, u.completion)), Some((12, 3)));
        assert!(matches!(&c.blocks[0], Block::ToolUse { name, .. } if name == "f"));
        let broken = json!({"choices": [{"message": {"tool_calls": [
            {"function": {"name": "f", "arguments": "{oops"}}]}}]});
        let e = completion(&broken, "m", 128).unwrap_err().to_string();
        assert!(e.contains("tool_calls[0].function.arguments"), "{e}");
        assert!(completion(&json!({"error": "x"}), "m", 128).is_err());
        // Reasoning, as vLLM and llama-server name it, and as OpenRouter does.
        for key in ["reasoning_content", "reasoning"] {
            let answer = json!({"choices": [{"finish_reason": "stop",
                "message": {"content": "Paris.", key: "The capital."}}]});
            let c = completion(&answer, "m", 8).unwrap();
            assert_eq!(c.blocks[0], Block::Reasoning("The capital.".into()));
            assert_eq!(c.blocks[1], Block::Text("Paris.".into()));
        }
    }

    #[test]
    fn logprobs_are_asked_of_the_provider_and_read_from_its_answer() {
        let mut request = ModelRequest::default();
        let b = body("m", &request);
        assert!(b.get("logprobs").is_none() && b.get("top_logprobs").is_none());
        request.base.logprobs = Some(3);
        let b = body("m", &request);
        assert_eq!(
            (&b["logprobs"], &b["top_logprobs"]),
            (&json!(true), &json!(3))
        );
        let answer = json!({"choices": [{"finish_reason": "stop",
            "message": {"content": "Hi"},
            "logprobs": {"content": [
                {"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
                 "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                                  {"token": "Hey", "logprob": -2.0, "bytes": null}]},
                {"token": "!", "logprob": null, "top_logprobs": "odd"},
                "not a token"],
                "refusal": null}}]});
        let c = completion(&answer, "m", 8).unwrap();
        let logprobs = c.logprobs.unwrap();
        assert_eq!(logprobs.len(), 2);
        assert_eq!(
            (logprobs[0].token.as_str(), logprobs[0].logprob),
            ("Hi", -0.25)
        );
        assert_eq!(logprobs[0].top[1].bytes, b"Hey");
        // Read leniently: no log-probability is an impossible token, no bytes its text's.
        assert_eq!(logprobs[1].logprob, f64::NEG_INFINITY);
        assert_eq!(
            (logprobs[1].bytes.as_slice(), logprobs[1].top.len()),
            (&b"!"[..], 0)
        );
        let none = json!({"choices": [{"message": {"content": "Hi"}, "logprobs": null}]});
        assert_eq!(completion(&none, "m", 8).unwrap().logprobs, None);
    }

    #[test]
    fn odd_fields_read_as_absent_and_every_form_of_arguments_is_taken() {
        // Nulls and values of another type leave a field unset; they are not errors.
        let answer = json!({"model": 7, "choices": [{"finish_reason": 5, "message": {
            "content": null, "tool_calls": [
                {"id": "a", "function": {"name": "f", "arguments": {"x": 1}}},
                {"id": 9, "function": {"name": "g", "arguments": " "}},
                {"function": {"name": "h"}, "extra": true}]}}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2,
                      "prompt_tokens_details": {"cached_tokens": 3}}});
        let c = completion(&answer, "fallback", 128).unwrap();
        assert_eq!(c.model, "fallback");
        // An answer with calls that gives no reason ended for them (as `openai::finish` says).
        assert_eq!(c.finish, Finish::EndTurn);
        assert_eq!(c.usage.map(|u| (u.prompt, u.completion)), Some((4, 2)));
        let inputs: Vec<_> = c
            .blocks
            .iter()
            .map(|b| match b {
                Block::ToolUse { id, name, input } => (id.len(), name.clone(), input.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            inputs[0],
            (1, "f".into(), json!({"x": 1}).as_object().unwrap().clone())
        );
        assert_eq!((&inputs[1].1, inputs[1].2.is_empty()), (&"g".into(), true));
        assert!(inputs[1].0 > 1, "a call without a text id gets a new one");
        assert_eq!((&inputs[2].1, inputs[2].2.is_empty()), (&"h".into(), true));
        // A null message is an empty answer; a missing one, or a call that is not an object,
        // is said.
        let empty = completion(&json!({"choices": [{"message": null}]}), "m", 8).unwrap();
        assert!(matches!(&empty.blocks[..], [Block::Text(t)] if t.is_empty()));
        let e = completion(&json!({"choices": [null]}), "m", 8).unwrap_err();
        assert!(
            e.to_string().contains("choices[0].message is missing"),
            "{e}"
        );
        let e = completion(&json!([{"choices": []}]), "m", 8).unwrap_err();
        assert!(e.to_string().contains("choices[0] is missing"), "{e}");
        let e = completion(
            &json!({"choices": [{"message": {"tool_calls": [["f"]]}}]}),
            "m",
            8,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("tool_calls[0].function.name is missing"),
            "{e}"
        );
        // Only one usage count is no usage.
        let half = json!({"choices": [{"message": {"content": "hi"}}],
                          "usage": {"prompt_tokens": 4, "completion_tokens": "2"}});
        assert!(completion(&half, "m", 8).unwrap().usage.is_none());
    }

    #[test]
    fn a_providers_error_message_is_found_where_it_puts_it() {
        for (body, said) in [
            (
                r#"{"error": {"message": "bad key", "code": 401}}"#,
                "bad key",
            ),
            (r#"{"error": "overloaded"}"#, "overloaded"),
            (r#"{"message": "no route"}"#, "no route"),
            // Where the first that is there is not text, the body is said.
            (
                r#"{"error": {"message": 5}, "message": "m"}"#,
                r#"{"error": {"message": 5}, "message": "m"}"#,
            ),
            (
                r#"{"error": {"code": 1}, "message": "m"}"#,
                r#"{"error": {"code": 1}, "message": "m"}"#,
            ),
            (
                r#"{"error": null, "message": "m"}"#,
                r#"{"error": null, "message": "m"}"#,
            ),
            (r#"["bad key"]"#, r#"["bad key"]"#),
            ("Bad Gateway", "Bad Gateway"),
        ] {
            assert_eq!(provider_message(body), said, "{body}");
        }
    }

    #[test]
    fn typed_errors_say_what_the_messages_said() {
        assert_eq!(
            SetupError::Missing.to_string(),
            "the provider backend needs --provider-url (AGENT_AS_MODEL_PROVIDER_URL) and \
             --provider-model (AGENT_AS_MODEL_PROVIDER_MODEL)"
        );
        let problem = http_url("ftp://user:secret@example.com/v1").unwrap_err();
        assert_eq!(
            problem.to_string(),
            "must start with http:// or https:// and name a host"
        );
        let shown = String::from(SetupError::Url {
            problem,
            shown: shown_url("ftp://user:secret@example.com/v1"),
        });
        assert_eq!(
            shown,
            "the provider URL must start with http:// or https:// and name a host: \
             ftp://example.com/v1"
        );
        assert_eq!(
            http_url("not a url").unwrap_err().to_string(),
            "is not a URL (relative URL without a base)"
        );
        let e = Provider::new(ProviderSettings {
            base_url: "http://".into(),
            model: "m".into(),
            key: None,
            tools: true,
            json_schema: true,
            timeout: Duration::from_secs(1),
            deadline: Duration::from_secs(1),
            retries: 0,
            max_retry_after: Duration::from_secs(1),
            max_response: 1024,
            max_tool_calls: 1,
            stream: false,
            max_tokens: None,
            timeout_source: String::new(),
        })
        .err()
        .unwrap();
        assert!(
            e.to_string().starts_with("the provider URL is not a URL ("),
            "{e}"
        );
        assert_eq!(
            ToolCallProblem::NameMissing(2).to_string(),
            "tool_calls[2].function.name is missing"
        );
        assert_eq!(
            too_many_calls(3).to_string(),
            "provider backend failed: the provider's answer has more than 3 tool calls, the \
             most this server reads (AGENT_AS_MODEL_PROVIDER_MAX_TOOL_CALLS)"
        );
    }
}
