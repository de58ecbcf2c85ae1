//! The server's metrics, served by the HTTP front at `GET /metrics` in Prometheus's text format
//! (version 0.0.4). One [`Metrics`] per server, held by the completion service, so every front
//! records into it: each call's API, model and outcome, its duration and time to first token,
//! its tokens, and the fallbacks taken. What the models hold now (the embedded model's queue,
//! slots, memory; a provider's retries) is read from them at each scrape.
//!
//! Labels stay bounded: `model` is always the name of one of the server's models (a models
//! file's entry, or `local`, `provider`, `host` from the flags), or `unknown` for a call
//! refused before its model was known; never a name a client made up.

use crate::backends::direct::Stats;
use crate::call::Usage;
use crate::error::{CallError, FaultKind};
use crate::routing::{Answerer, Backends};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The label of a call whose model is not known (refused before it was read).
pub const UNKNOWN: &str = "unknown";

/// The API a call came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/responses` (over HTTP or a WebSocket) and `/v1/responses/compact`.
    Responses,
    /// `POST /v1/messages`.
    Messages,
    /// Gemini's `generateContent` and `streamGenerateContent`.
    Gemini,
    /// Ollama's `POST /api/chat` and `POST /api/generate`.
    Ollama,
    /// Embeddings over HTTP: `/v1/embeddings`, Ollama's `/api/embed` and `/api/embeddings`,
    /// Gemini's `embedContent` and `batchEmbedContents`.
    Embeddings,
    /// An MCP tool call (stdio or `/mcp`).
    Mcp,
}

impl Api {
    pub fn label(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
            Api::Gemini => "gemini",
            Api::Ollama => "ollama",
            Api::Embeddings => "embeddings",
            Api::Mcp => "mcp",
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered.
    Ok,
    /// Refused for what the caller sent: a malformed request, an unknown model, a prompt over
    /// the context, a missing token.
    ClientError,
    /// Not answered for the server's or a backend's sake: a failure, a timeout, or no room
    /// (a 429 for a cap reached is the server's capacity, not the caller's fault).
    ServerError,
    /// The caller went away before the answer was made.
    Cancelled,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ClientError => "client_error",
            Outcome::ServerError => "server_error",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// The outcome an HTTP status says: a 4xx but 429 is the caller's, a 429 or 5xx the
    /// server's.
    pub fn of_status(status: u16) -> Outcome {
        match status {
            ..400 => Outcome::Ok,
            429 => Outcome::ServerError,
            400..500 => Outcome::ClientError,
            _ => Outcome::ServerError,
        }
    }

    /// The outcome of a call that failed with `e` (as the HTTP APIs give it a status).
    pub fn of_error(e: &CallError) -> Outcome {
        match e {
            CallError::Argument { .. }
            | CallError::UnknownModel { .. }
            | CallError::Invalid(_)
            | CallError::OverContext { .. } => Outcome::ClientError,
            CallError::Protocol(fault) => match fault.kind {
                FaultKind::InvalidParams | FaultKind::MissingCapability => Outcome::ClientError,
                FaultKind::Internal => Outcome::ServerError,
            },
            CallError::Host(_) | CallError::Backend { .. } | CallError::Rejected(_) => {
                Outcome::ServerError
            }
        }
    }
}

/// Seconds a whole call may take: from a fast refusal to a long answer.
const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// Seconds to a streamed answer's first piece.
const FIRST_TOKEN_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn first_token_histogram() -> Histogram {
    Histogram::new(FIRST_TOKEN_BUCKETS)
}

type One = [(&'static str, String); 1];
type Two = [(&'static str, String); 2];
type Three = [(&'static str, String); 3];
type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

/// The server's metrics: its registry, and the families the fronts and the service record in.
pub struct Metrics {
    registry: Registry,
    requests: Family<Three, Counter>,
    duration: Histograms<Two>,
    first_token: Histograms<One>,
    prompt_tokens: Family<One, Counter>,
    cached_tokens: Family<One, Counter>,
    generated_tokens: Family<One, Counter>,
    fallbacks: Family<Two, Counter>,
}

const PREFIX: &str = "agent_as_model";

impl Metrics {
    /// The metrics of a server answering with `backends` (read at each scrape for what its
    /// models hold now).
    pub fn new(backends: Arc<Backends>) -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::<Three, Counter>::default();
        registry.register(
            "requests",
            "Model calls answered or refused, by API, model and outcome (ok, client_error, \
             server_error, cancelled)",
            requests.clone(),
        );
        let duration = Histograms::<Two>::new_with_constructor(duration_histogram as fn() -> _);
        registry.register(
            "request_duration_seconds",
            "Seconds from a call's arrival to its end, by API and model",
            duration.clone(),
        );
        let first_token =
            Histograms::<One>::new_with_constructor(first_token_histogram as fn() -> _);
        registry.register(
            "time_to_first_token_seconds",
            "Seconds from a streamed call's arrival to the first piece of its answer, by model",
            first_token.clone(),
        );
        let prompt_tokens = Family::<One, Counter>::default();
        registry.register(
            "prompt_tokens",
            "Prompt tokens of the answered calls, as their usage reports them, by model",
            prompt_tokens.clone(),
        );
        let cached_tokens = Family::<One, Counter>::default();
        registry.register(
            "cached_tokens",
            "Prompt tokens read from a cache rather than processed again (the embedded model's \
             prefix cache, a provider's prompt cache), by model",
            cached_tokens.clone(),
        );
        let generated_tokens = Family::<One, Counter>::default();
        registry.register(
            "generated_tokens",
            "Tokens the models wrote in the answered calls, by model",
            generated_tokens.clone(),
        );
        let fallbacks = Family::<Two, Counter>::default();
        registry.register(
            "fallbacks",
            "Calls handed from a model that failed (transiently) to its fallback, by the model \
             left and the one tried next",
            fallbacks.clone(),
        );
        registry.register_collector(Box::new(Models(backends)));
        Metrics {
            registry,
            requests,
            duration,
            first_token,
            prompt_tokens,
            cached_tokens,
            generated_tokens,
            fallbacks,
        }
    }

    /// The metrics in Prometheus's text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String fails only if an encoder says so; what was written stands.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
        {
            tracing::warn!(error = %e, "the metrics could not all be written");
        }
        text
    }

    /// A record of one call of `api`, starting now: counted when it is dropped.
    pub fn record(self: &Arc<Self>, api: Api) -> Record {
        Record(Some(Open {
            metrics: self.clone(),
            api,
            model: None,
            started: Instant::now(),
            first: OnceLock::new(),
            usage: None,
            outcome: None,
        }))
    }

    /// A call left the model `from` for `to` after a transient failure.
    pub fn fallback(&self, from: &str, to: &str) {
        self.fallbacks
            .get_or_create(&[("from", from.to_owned()), ("to", to.to_owned())])
            .inc();
    }

    fn end(&self, open: Open) {
        let model = open.model.unwrap_or_else(|| UNKNOWN.to_owned());
        let outcome = open.outcome.unwrap_or(Outcome::Cancelled);
        let api = open.api.label();
        self.requests
            .get_or_create(&[
                ("api", api.to_owned()),
                ("model", model.clone()),
                ("outcome", outcome.label().to_owned()),
            ])
            .inc();
        self.duration
            .get_or_create(&[("api", api.to_owned()), ("model", model.clone())])
            .observe(open.started.elapsed().as_secs_f64());
        if let Some(first) = open.first.get() {
            let seconds = first.saturating_duration_since(open.started).as_secs_f64();
            self.first_token
                .get_or_create(&[("model", model.clone())])
                .observe(seconds);
        }
        if let Some(usage) = open.usage {
            let by_model: One = [("model", model)];
            self.prompt_tokens
                .get_or_create(&by_model)
                .inc_by(count(usage.prompt));
            self.cached_tokens
                .get_or_create(&by_model)
                .inc_by(count(usage.cached.unwrap_or(0)));
            self.generated_tokens
                .get_or_create(&by_model)
                .inc_by(count(usage.completion));
        }
    }
}

/// One call as the metrics see it, from its arrival: the model it went to, its first piece,
/// its usage and outcome. It is counted when dropped; one dropped before its outcome was
/// told is a call whose caller went away (`cancelled`). The default record counts nothing.
#[must_use = "a record is counted when it is dropped"]
#[derive(Default)]
pub struct Record(Option<Open>);

struct Open {
    metrics: Arc<Metrics>,
    api: Api,
    model: Option<String>,
    started: Instant,
    first: OnceLock<Instant>,
    usage: Option<Usage>,
    outcome: Option<Outcome>,
}

impl Record {
    /// The model the call goes to: one of the server's model names (see the module's note).
    pub fn model(&mut self, name: Option<&str>) {
        if let (Some(open), Some(name)) = (self.0.as_mut(), name) {
            open.model = Some(name.to_owned());
        }
    }

    /// The answer's first piece is out (the first one counts).
    pub fn first_token(&self) {
        if let Some(open) = &self.0 {
            let _ = open.first.get_or_init(Instant::now);
        }
    }

    /// The call was answered by the model `name`, with `usage`.
    pub fn answered(&mut self, name: &str, usage: Usage) {
        self.model(Some(name));
        if let Some(open) = self.0.as_mut() {
            open.usage = Some(usage);
            open.outcome = Some(Outcome::Ok);
        }
    }

    /// How the call ended, unless that was already told.
    pub fn outcome(&mut self, outcome: Outcome) {
        if let Some(open) = self.0.as_mut() {
            open.outcome.get_or_insert(outcome);
        }
    }

    /// How the call ended, as the HTTP status it was answered with says, unless that was
    /// already told.
    pub fn status(&mut self, status: u16) {
        self.outcome(Outcome::of_status(status));
    }

    /// This record, handed to whoever finishes the call (a stream's task); what is left here
    /// counts nothing.
    pub fn hand_on(&mut self) -> Record {
        Record(self.0.take())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(open) = self.0.take() {
            let metrics = open.metrics.clone();
            metrics.end(open);
        }
    }
}

/// What the models hold now, read at each scrape: the embedded model's queue, slots, memory,
/// and each provider's retries.
struct Models(Arc<Backends>);

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Models").finish_non_exhaustive()
    }
}

/// Writes a family with one `model` label (nothing when it has no members).
fn by_model(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    values: &[(&str, u64)],
) -> std::fmt::Result {
    if values.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (model, value) in values {
        let labels = [("model", *model)];
        let member = family.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(*value).encode(member)?,
            _ => ConstGauge::new(*value).encode(member)?,
        }
    }
    Ok(())
}

/// A count as a metric's value.
fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl Collector for Models {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Sampled {
            retries,
            queued,
            busy,
            slots,
            memory,
            loaded,
        } = self.sample();
        let e = &mut encoder;
        by_model(
            e,
            "provider_retries",
            "Requests sent to a provider again after a failure worth retrying (429, 5xx, a \
             timeout, a refused connection), by model",
            MetricType::Counter,
            &retries,
        )?;
        by_model(
            e,
            "local_queue_depth",
            "Calls (and token counts) waiting for the embedded model's worker, by model",
            MetricType::Gauge,
            &queued,
        )?;
        by_model(
            e,
            "local_slots_busy",
            "Slots of the embedded model answering a call now, by model",
            MetricType::Gauge,
            &busy,
        )?;
        by_model(
            e,
            "local_slots",
            "Slots of the embedded model (the calls it answers at once), by model",
            MetricType::Gauge,
            &slots,
        )?;
        by_model(
            e,
            "local_model_memory_bytes",
            "Bytes of a loaded embedded model's weights (its context's cache comes on top), by \
             model",
            MetricType::Gauge,
            &memory,
        )?;
        ConstGauge::new(loaded).encode(encoder.encode_descriptor(
            "local_models_loaded",
            "Embedded models loaded and answering",
            None,
            MetricType::Gauge,
        )?)
    }
}

/// The models' state at a scrape, per model name.
struct Sampled<'a> {
    retries: Vec<(&'a str, u64)>,
    queued: Vec<(&'a str, u64)>,
    busy: Vec<(&'a str, u64)>,
    slots: Vec<(&'a str, u64)>,
    memory: Vec<(&'a str, u64)>,
    loaded: u64,
}

impl Models {
    /// Reads each model's state once.
    fn sample(&self) -> Sampled<'_> {
        // Entries naming one model file share its engine: it is counted once, under the first
        // entry's name.
        let mut engines: Vec<*const ()> = Vec::new();
        let mut retries = Vec::new();
        let mut queued = Vec::new();
        let mut busy = Vec::new();
        let mut slots = Vec::new();
        let mut memory = Vec::new();
        let mut loaded = 0u64;
        for entry in self.0.entries() {
            let Answerer::Model(model) = &entry.answerer else {
                continue;
            };
            let name = entry.name.as_str();
            let Stats {
                retries: retried,
                engine,
            } = model.stats();
            if let Some(n) = retried {
                retries.push((name, n));
            }
            let Some(engine) = engine else {
                continue;
            };
            let at = Arc::as_ptr(model).cast::<()>();
            if engines.contains(&at) {
                continue;
            }
            engines.push(at);
            queued.push((name, count(engine.queued)));
            busy.push((name, count(engine.busy)));
            slots.push((name, count(engine.slots)));
            if engine.loaded {
                loaded += 1;
                memory.push((name, engine.memory_bytes));
            }
        }
        Sampled {
            retries,
            queued,
            busy,
            slots,
            memory,
            loaded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new(Arc::new(Backends::default())))
    }

    /// The value of the sample `line` starts with (name and labels as written).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn a_record_counts_its_call_once_with_its_model_outcome_and_usage() {
        let metrics = metrics();
        let mut record = metrics.record(Api::Chat);
        record.model(Some("m"));
        record.first_token();
        let usage = Usage {
            prompt: 10,
            completion: 3,
            estimated: false,
            cached: Some(4),
        };
        record.answered("m", usage);
        // A status told after the answer does not change its outcome.
        record.status(500);
        drop(record);
        let text = metrics.render();
        let ok = r#"agent_as_model_requests_total{api="chat",model="m",outcome="ok"}"#;
        assert_eq!(sample(&text, ok), Some(1.0), "{text}");
        assert_eq!(
            sample(&text, r#"agent_as_model_prompt_tokens_total{model="m"}"#),
            Some(10.0)
        );
        assert_eq!(
            sample(&text, r#"agent_as_model_cached_tokens_total{model="m"}"#),
            Some(4.0)
        );
        assert_eq!(
            sample(&text, r#"agent_as_model_generated_tokens_total{model="m"}"#),
            Some(3.0)
        );
        let count = r#"agent_as_model_request_duration_seconds_count{api="chat",model="m"}"#;
        assert_eq!(sample(&text, count), Some(1.0), "{text}");
        let first = r#"agent_as_model_time_to_first_token_seconds_count{model="m"}"#;
        assert_eq!(sample(&text, first), Some(1.0), "{text}");
        assert!(
            text.contains("# TYPE agent_as_model_requests_total counter"),
            "{text}"
        );
        assert!(text.contains("# TYPE agent_as_model_request_duration_seconds histogram"));
    }

    #[test]
    fn a_call_dropped_untold_is_cancelled_and_a_refused_one_has_no_model_or_tokens() {
        let metrics = metrics();
        drop(metrics.record(Api::Messages));
        let mut refused = metrics.record(Api::Gemini);
        refused.status(400);
        drop(refused);
        let mut busy = metrics.record(Api::Mcp);
        busy.outcome(Outcome::ServerError);
        drop(busy);
        let text = metrics.render();
        for (api, outcome) in [
            ("messages", "cancelled"),
            ("gemini", "client_error"),
            ("mcp", "server_error"),
        ] {
            let series = format!(
                r#"agent_as_model_requests_total{{api="{api}",model="unknown",outcome="{outcome}"}}"#
            );
            assert_eq!(sample(&text, &series), Some(1.0), "{series}: {text}");
        }
        assert!(!text.contains("prompt_tokens"), "{text}");
        assert!(!text.contains("time_to_first_token"), "{text}");
    }

    #[test]
    fn a_record_handed_on_is_counted_once_by_its_new_holder() {
        let metrics = metrics();
        let mut record = metrics.record(Api::Responses);
        let mut handed = record.hand_on();
        // What is left here counts nothing, whatever it is told.
        record.status(200);
        drop(record);
        handed.status(503);
        drop(handed);
        let text = metrics.render();
        let series = r#"agent_as_model_requests_total{api="responses",model="unknown",outcome="server_error"}"#;
        assert_eq!(sample(&text, series), Some(1.0), "{text}");
        assert_eq!(text.matches("agent_as_model_requests_total{").count(), 1);
        // Nothing counts in the default record.
        drop(Record::default());
        assert_eq!(metrics.render(), text);
    }

    #[test]
    fn statuses_and_errors_say_whose_the_failure_was() {
        assert_eq!(Outcome::of_status(200), Outcome::Ok);
        assert_eq!(Outcome::of_status(400), Outcome::ClientError);
        assert_eq!(Outcome::of_status(404), Outcome::ClientError);
        assert_eq!(Outcome::of_status(429), Outcome::ServerError);
        assert_eq!(Outcome::of_status(502), Outcome::ServerError);
        assert_eq!(
            Outcome::of_error(&CallError::Invalid("x".into())),
            Outcome::ClientError
        );
        let busy = CallError::unavailable(crate::config::Backend::Local, "busy");
        assert_eq!(Outcome::of_error(&busy), Outcome::ServerError);
        // The HTTP APIs give each error a status; the two agree.
        for e in [
            CallError::at("messages", "bad"),
            CallError::UnknownModel {
                name: "x".into(),
                known: "a".into(),
            },
            CallError::unavailable(crate::config::Backend::Provider, "busy"),
            CallError::backend(crate::config::Backend::Local, "broken"),
            CallError::Host("gone".into()),
        ] {
            let outcome = Outcome::of_error(&e);
            let status = crate::api::ApiError::from(e).status;
            assert_eq!(outcome, Outcome::of_status(status), "{status}");
        }
    }

    #[test]
    fn fallbacks_and_the_models_state_are_written_and_labels_escaped() {
        let metrics = metrics();
        metrics.fallback("a\"b", "c\\d");
        let mut record = metrics.record(Api::Chat);
        record.model(Some("line\nbreak"));
        record.status(200);
        drop(record);
        let text = metrics.render();
        let series = r#"agent_as_model_fallbacks_total{from="a\"b",to="c\\d"}"#;
        assert_eq!(sample(&text, series), Some(1.0), "{text}");
        assert!(text.contains(r#"model="line\nbreak""#), "{text}");
        // The host's sampling alone: no provider, no embedded model, none loaded.
        assert_eq!(
            sample(&text, "agent_as_model_local_models_loaded"),
            Some(0.0)
        );
        assert!(!text.contains("provider_retries"), "{text}");
        assert!(!text.contains("local_slots"), "{text}");
    }
}
