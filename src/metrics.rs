//! The server's metrics, served by the HTTP front at `GET /metrics` in Prometheus's text format
//! (version 0.0.4). One [`Metrics`] per server, held by the completion service, so every front
//! records into it: each call's API, model and outcome, its duration and time to first token,
//! its tokens, and the fallbacks taken. What the models hold now (the embedded model's queue,
//! slots, memory, cache; a provider's retries) is read from them at each scrape. Each embedded
//! model's queue, running calls and cache are also written under vLLM's names (`vllm:…`, by
//! `model_name`): the model server protocol an inference gateway's endpoint picker reads.
//!
//! The calls of the last minutes are kept too ([`recent`]), for the engine view's charts.
//!
//! Labels stay bounded: `model` is always the name of one of the server's models (a models
//! file's entry, or `local`, `provider`, `host` from the flags), or `unknown` for a call
//! refused before its model was known; never a name a client made up.

use crate::backends::direct::{EngineStats, Stats};
use crate::call::Usage;
use crate::error::{CallError, FaultKind};
use crate::routing::{Answerer, Backends};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod recent;

pub use recent::Point;

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
    /// `POST /v1/audio/transcriptions`.
    Transcriptions,
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
            Api::Transcriptions => "transcriptions",
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

/// A counter of calls' tokens by model, registered in `own` as `name` with `help`.
fn counter(own: &mut Registry, name: &str, help: &str) -> Family<One, Counter> {
    let family = Family::<One, Counter>::default();
    own.register(name, help, family.clone());
    family
}

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
    recent: recent::Recent,
}

const PREFIX: &str = "agent_as_model";

impl Metrics {
    /// The metrics of a server answering with `backends` (read at each scrape for what its
    /// models hold now, written under this server's names, with its prefix, and vLLM's).
    pub fn new(backends: Arc<Backends>) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Models(backends)));
        let own = registry.sub_registry_with_prefix(PREFIX);
        let requests = Family::<Three, Counter>::default();
        own.register(
            "requests",
            "Model calls answered or refused, by API, model and outcome (ok, client_error, \
             server_error, cancelled)",
            requests.clone(),
        );
        let duration = Histograms::<Two>::new_with_constructor(duration_histogram as fn() -> _);
        own.register(
            "request_duration_seconds",
            "Seconds from a call's arrival to its end, by API and model",
            duration.clone(),
        );
        let first_token = Histograms::new_with_constructor(first_token_histogram as fn() -> _);
        own.register(
            "time_to_first_token_seconds",
            "Seconds from a streamed call's arrival to the first piece of its answer, by model",
            first_token.clone(),
        );
        let prompt_tokens = counter(
            own,
            "prompt_tokens",
            "Prompt tokens of the answered calls, as their usage reports them, by model",
        );
        let cached_tokens = counter(
            own,
            "cached_tokens",
            "Prompt tokens read from a cache rather than processed again (the embedded model's \
             prefix cache, a provider's prompt cache), by model",
        );
        let generated_tokens = counter(
            own,
            "generated_tokens",
            "Tokens the models wrote in the answered calls, by model",
        );
        let fallbacks = Family::<Two, Counter>::default();
        own.register(
            "fallbacks",
            "Calls handed from a model that failed (transiently) to its fallback, by the model \
             left and the one tried next",
            fallbacks.clone(),
        );
        Metrics {
            registry,
            requests,
            duration,
            first_token,
            prompt_tokens,
            cached_tokens,
            generated_tokens,
            fallbacks,
            recent: recent::Recent::default(),
        }
    }

    /// The calls that ended in the last `window` (at most [`recent::KEPT`]), in buckets of
    /// `bucket`, oldest first: how many, how fast their tokens came, how soon the first, and
    /// how much of their prompts a cache served.
    pub fn recent(&self, window: Duration, bucket: Duration) -> Vec<Point> {
        self.recent
            .points(Instant::now(), window.min(recent::KEPT), bucket)
    }

    /// When the last call to the model `name` (one of the server's names) ended.
    pub fn last_call(&self, name: &str) -> Option<Instant> {
        self.recent.last(name)
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
        let ended = Instant::now();
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
            .observe(ended.saturating_duration_since(open.started).as_secs_f64());
        let first = open.first.get().copied();
        if let Some(first) = first {
            let seconds = first.saturating_duration_since(open.started).as_secs_f64();
            self.first_token
                .get_or_create(&[("model", model.clone())])
                .observe(seconds);
        }
        self.remember(&model, open.started, ended, first, open.usage);
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

    /// A call to `model` that arrived at `started` and ended at `ended`, kept for the charts
    /// when it made something (a first piece, usage).
    fn remember(
        &self,
        model: &str,
        started: Instant,
        ended: Instant,
        first: Option<Instant>,
        usage: Option<Usage>,
    ) {
        if first.is_none() && usage.is_none() {
            return;
        }
        let (generated, prompt, cached) = usage.map_or((0, 0, 0), |u| {
            (
                count(u.completion),
                count(u.prompt),
                count(u.cached.unwrap_or(0)),
            )
        });
        self.recent.push(
            model,
            recent::Ended {
                at: ended,
                generated,
                generating: ended.saturating_duration_since(first.unwrap_or(started)),
                first_token: first.map(|f| f.saturating_duration_since(started)),
                prompt,
                cached,
            },
        );
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
/// cache, and each provider's retries.
struct Models(Arc<Backends>);

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Models").finish_non_exhaustive()
    }
}

/// The label vLLM names a model by, on the model server protocol's metrics.
const MODEL_NAME: &str = "model_name";

/// Writes a family whose one label, `label`, names the model (nothing when it has no members).
fn by_model<V>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    label: &str,
    values: &[(&str, V)],
) -> std::fmt::Result
where
    V: EncodeGaugeValue + EncodeCounterValue + Copy,
{
    if values.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (model, value) in values {
        let labels = [(label, *model)];
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

/// One value of each engine, under its model's name.
fn each<'a, V>(
    engines: &[(&'a str, EngineStats)],
    value: impl Fn(&EngineStats) -> V,
) -> Vec<(&'a str, V)> {
    engines.iter().map(|(name, e)| (*name, value(e))).collect()
}

/// This server's name of the metric `name`.
fn own(name: &str) -> String {
    format!("{PREFIX}_{name}")
}

impl Collector for Models {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Sampled { retries, engines } = self.sample();
        let e = &mut encoder;
        by_model(
            e,
            &own("provider_retries"),
            "Requests sent to a provider again after a failure worth retrying (429, 5xx, a \
             timeout, a refused connection), by model",
            MetricType::Counter,
            "model",
            &retries,
        )?;
        engine_gauges(e, &engines)?;
        protocol(e, &engines)
    }
}

/// A gauge of each embedded model's engine: its name, its description, its value.
type EngineGauge = (&'static str, &'static str, fn(&EngineStats) -> u64);

/// This server's gauges of each embedded model's engine.
fn engine_gauges(
    e: &mut DescriptorEncoder<'_>,
    engines: &[(&str, EngineStats)],
) -> std::fmt::Result {
    let gauges: [EngineGauge; 3] = [
        (
            "local_queue_depth",
            "Calls (and token counts) waiting for the embedded model's worker, by model",
            |s| count(s.queued),
        ),
        (
            "local_slots_busy",
            "Slots of the embedded model answering a call now, by model",
            |s| count(s.busy),
        ),
        (
            "local_slots",
            "Slots of the embedded model (the calls it answers at once), by model",
            |s| count(s.slots),
        ),
    ];
    for (name, help, value) in gauges {
        by_model(
            e,
            &own(name),
            help,
            MetricType::Gauge,
            "model",
            &each(engines, value),
        )?;
    }
    let loaded: Vec<(&str, EngineStats)> =
        engines.iter().filter(|(_, s)| s.loaded).copied().collect();
    by_model(
        e,
        &own("local_model_memory_bytes"),
        "Bytes of a loaded embedded model's weights (its context's cache comes on top), by \
         model",
        MetricType::Gauge,
        "model",
        &each(&loaded, |s| s.memory_bytes),
    )?;
    ConstGauge::new(count(loaded.len())).encode(e.encode_descriptor(
        &own("local_models_loaded"),
        "Embedded models loaded and answering",
        None,
        MetricType::Gauge,
    )?)
}

/// The model server protocol's metrics under vLLM's names and label, which an inference
/// gateway's endpoint picker reads to choose a replica: each embedded model's calls waiting
/// and running, the share of its cache in use, and the cache's size.
fn protocol(e: &mut DescriptorEncoder<'_>, engines: &[(&str, EngineStats)]) -> std::fmt::Result {
    let gauge = MetricType::Gauge;
    by_model(
        e,
        "vllm:num_requests_waiting",
        "Calls waiting for the embedded model, not yet in a slot, by model",
        gauge,
        MODEL_NAME,
        &each(engines, |s| count(s.queued)),
    )?;
    by_model(
        e,
        "vllm:num_requests_running",
        "Calls in one of the embedded model's slots, by model",
        gauge,
        MODEL_NAME,
        &each(engines, |s| count(s.busy)),
    )?;
    by_model(
        e,
        "vllm:kv_cache_usage_perc",
        "Share of the embedded model's KV cache the calls in its slots hold (their tokens over \
         the context's cells), 1 being all of it, by model",
        gauge,
        MODEL_NAME,
        &each(engines, usage),
    )?;
    let counter = MetricType::Counter;
    by_model(
        e,
        "vllm:spec_decode_num_draft_tokens",
        "Tokens the embedded model drafted by speculative decoding (--speculative), by model",
        counter,
        MODEL_NAME,
        &each(engines, |s| s.drafted),
    )?;
    by_model(
        e,
        "vllm:spec_decode_num_accepted_tokens",
        "Drafted tokens the embedded model's samples kept, by model",
        counter,
        MODEL_NAME,
        &each(engines, |s| s.accepted),
    )?;
    cache_config(e, engines)
}

/// The share of an engine's cache its busy slots hold, from 0 to 1 (0 with no cache).
fn usage(s: &EngineStats) -> f64 {
    if s.kv_cells == 0 {
        return 0.0;
    }
    (s.kv_tokens as f64 / s.kv_cells as f64).min(1.0)
}

/// vLLM's info gauge of each loaded model's cache: `block_size` tokens a block (1: llama.cpp's
/// cache is per token) and `num_gpu_blocks` blocks in all (the context's cells).
fn cache_config(
    e: &mut DescriptorEncoder<'_>,
    engines: &[(&str, EngineStats)],
) -> std::fmt::Result {
    let mut with_cache = engines
        .iter()
        .filter(|(_, s)| s.loaded && s.kv_cells > 0)
        .peekable();
    if with_cache.peek().is_none() {
        return Ok(());
    }
    let mut family = e.encode_descriptor(
        "vllm:cache_config_info",
        "The embedded model's KV cache: block_size tokens a block (1: llama.cpp's cache is per \
         token), num_gpu_blocks blocks in all, by model",
        None,
        MetricType::Gauge,
    )?;
    for (name, s) in with_cache {
        let labels = [
            (MODEL_NAME, (*name).to_owned()),
            ("block_size", "1".to_owned()),
            ("num_gpu_blocks", s.kv_cells.to_string()),
        ];
        ConstGauge::new(1u64).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The models' state at a scrape, per model name.
struct Sampled<'a> {
    retries: Vec<(&'a str, u64)>,
    /// Each embedded model's engine, under the first name that uses it.
    engines: Vec<(&'a str, EngineStats)>,
}

impl Models {
    /// Reads each model's state once.
    fn sample(&self) -> Sampled<'_> {
        // Entries naming one model file share its engine: it is counted once, under the first
        // entry's name.
        let mut at: Vec<*const ()> = Vec::new();
        let mut retries = Vec::new();
        let mut engines = Vec::new();
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
            let this = Arc::as_ptr(model).cast::<()>();
            if at.contains(&this) {
                continue;
            }
            at.push(this);
            engines.push((name, engine));
        }
        Sampled { retries, engines }
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
    fn a_call_that_made_something_is_kept_for_the_charts_and_a_refusal_is_not() {
        let metrics = metrics();
        let mut refused = metrics.record(Api::Chat);
        refused.model(Some("m"));
        refused.status(400);
        drop(refused);
        assert_eq!(metrics.last_call("m"), None);
        let mut record = metrics.record(Api::Chat);
        record.first_token();
        let usage = Usage {
            prompt: 8,
            completion: 2,
            estimated: false,
            cached: Some(6),
        };
        record.answered("m", usage);
        drop(record);
        assert!(metrics.last_call("m").is_some());
        let points = metrics.recent(Duration::from_secs(60), Duration::from_secs(10));
        let now = points.last().unwrap();
        assert_eq!((now.ago_secs, now.calls), (0, 1));
        assert_eq!(now.cached_share, Some(0.75));
        assert!(now.first_token_seconds.is_some() && now.tokens_per_second.is_some());
        // A window past what is kept is cut to it.
        let all = metrics.recent(Duration::from_secs(86_400), Duration::from_secs(60));
        assert_eq!(all.len() as u64, recent::KEPT.as_secs() / 60);
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
        assert!(!text.contains("vllm:"), "{text}");
    }

    /// Engines as the protocol's metrics see them, written by themselves.
    #[derive(Debug)]
    struct Fixed(Vec<(&'static str, EngineStats)>);

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
            protocol(&mut encoder, &self.0)
        }
    }

    #[test]
    fn the_model_server_protocols_gauges_are_written_under_vllms_names() {
        let busy = EngineStats {
            loaded: true,
            queued: 2,
            busy: 1,
            slots: 4,
            memory_bytes: 1,
            kv_tokens: 1024,
            kv_cells: 4096,
            drafted: 10,
            accepted: 7,
        };
        let unloaded = EngineStats {
            queued: 1,
            slots: 4,
            ..EngineStats::default()
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(vec![("a", busy), ("b\"c", unloaded)])));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("# HELP")).collect();
        let expected = [
            "# TYPE vllm:num_requests_waiting gauge",
            r#"vllm:num_requests_waiting{model_name="a"} 2"#,
            r#"vllm:num_requests_waiting{model_name="b\"c"} 1"#,
            "# TYPE vllm:num_requests_running gauge",
            r#"vllm:num_requests_running{model_name="a"} 1"#,
            r#"vllm:num_requests_running{model_name="b\"c"} 0"#,
            "# TYPE vllm:kv_cache_usage_perc gauge",
            r#"vllm:kv_cache_usage_perc{model_name="a"} 0.25"#,
            r#"vllm:kv_cache_usage_perc{model_name="b\"c"} 0.0"#,
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            r#"vllm:spec_decode_num_draft_tokens_total{model_name="a"} 10"#,
            r#"vllm:spec_decode_num_draft_tokens_total{model_name="b\"c"} 0"#,
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            r#"vllm:spec_decode_num_accepted_tokens_total{model_name="a"} 7"#,
            r#"vllm:spec_decode_num_accepted_tokens_total{model_name="b\"c"} 0"#,
            "# TYPE vllm:cache_config_info gauge",
            r#"vllm:cache_config_info{model_name="a",block_size="1",num_gpu_blocks="4096"} 1"#,
        ];
        assert_eq!(lines, expected, "{text}");
        for name in [
            "num_requests_waiting",
            "kv_cache_usage_perc",
            "cache_config_info",
        ] {
            assert!(text.contains(&format!("# HELP vllm:{name} ")), "{text}");
        }
        // A share is at most 1, whatever the counts say.
        let over = EngineStats {
            kv_tokens: 5000,
            ..busy
        };
        assert_eq!(usage(&over), 1.0);
    }
}
