//! The completion service: one path from a parsed call to its fulfilled answer, under every
//! front (the MCP tools; the HTTP model APIs). A front parses its request with a shape, says
//! where the call came from ([`Origin`]: the caller's host if it can sample, a cancellation
//! token, an event sink), and renders what comes back; routing, caps, fallbacks, the driver and
//! the answer's assembly are here, and nothing here knows a protocol.

pub mod driver;

use crate::backends::direct::{EmbedRequest, Embeddings};
use crate::call::{Block, Call, Usage, estimate_tokens};
use crate::contract::cursor;
use crate::error::{CallError, CallResult};
use crate::fulfil::Fulfilled;
use crate::fulfil::live::Events;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::routing::{Answerer, Backends, Entry};
use crate::shapes::{self, Shape};
use driver::{Driver, Outcome, Sampler};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The caller's host, when it can answer with its own model.
pub trait HostModel: Sync {
    /// Whether the host samples at all.
    fn samples(&self) -> bool;
    /// The host's sampling for one call, with `hints` as the model hints (none: the call's
    /// `model`).
    fn sampler<'a>(&'a self, call: &'a Call, hints: &'a [String]) -> Box<dyn Sampler + 'a>;
}

/// Where a call came from.
pub struct Origin<'a> {
    /// The caller's host (MCP); none over plain HTTP.
    pub host: Option<&'a dyn HostModel>,
    /// Cancelled when the caller gives up: the work stops.
    pub cancel: &'a CancellationToken,
    /// Opens the call's event sink, asked once the route is known and only when a model that
    /// may answer makes its answer here; `None`: nobody follows the call.
    pub events: &'a (dyn Fn() -> Option<Events> + Sync),
}

/// How a call ends.
pub enum Served {
    Answered(Box<Answered>),
    /// The host's sampler handed an attempt to the caller (MCP 2026-07-28): its front holds
    /// the question.
    Asked,
}

/// A fulfilled call: the answer in neutral form, and what every front may report beside it.
pub struct Answered {
    /// The conversation cursor, when the call's chain is on (an MCP tool's `previous_response_id`
    /// continues from it): the id of the answer's object.
    pub cursor: Option<String>,
    pub report: Report,
    /// Images and audio in the answer, besides its text.
    pub media: Vec<Block>,
    /// The answer in neutral form, which each API's encoder writes its objects from.
    pub finished: Finished,
}

/// A fulfilled call in neutral form: what each API's encoder writes its objects from.
#[derive(Debug, Clone)]
pub struct Finished {
    pub answer: crate::call::Answer,
    pub finish: crate::call::Finish,
    /// Measured by the backend, else estimated.
    pub usage: crate::call::Usage,
    /// The model the backend says answered.
    pub model: String,
    /// The model's reasoning before the answer, when it is shown.
    pub reasoning: Option<String>,
    /// Each answer token's log-probability, in order, when the call asked for them and the
    /// backend reported them (`None` otherwise).
    pub logprobs: Option<Vec<crate::call::TokenLogprob>>,
}

/// What a front reports beside the API object.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was not honoured as asked.
    pub warnings: Vec<String>,
    /// How tool calls were obtained, when the call offered tools.
    pub tool_calls_via: Option<&'static str>,
    /// Which kind of backend answered.
    pub backend: crate::error::Backend,
    /// The name of the model (this server's entry) that answered.
    pub entry: String,
    /// Which model answered, when a models file names them or a fallback answered.
    pub route: Option<Value>,
    /// How structured output was obtained, and in how many attempts.
    pub structured_output: Option<Value>,
    /// The model the host or backend says answered.
    pub host_model: String,
}

/// A parsed call whose compiled schemas, once it is done with, are freed on tokio's blocking
/// threads: they are megabytes of small allocations (64 tool schemas of 80 KB take a good part
/// of a second to free), which the async runtime's threads must not spend. Outside a runtime
/// they are freed where it is dropped.
pub struct Parsed(pub Call);

impl std::ops::Deref for Parsed {
    type Target = Call;

    fn deref(&self) -> &Call {
        &self.0
    }
}

/// Freeing more than this hands the allocator's free memory back to the system.
const GIVE_BACK_OVER: usize = 16 << 20;

impl Drop for Parsed {
    fn drop(&mut self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let mode = std::mem::replace(&mut self.0.mode, crate::call::Mode::Text);
            let persona = self.0.persona.take();
            drop(runtime.spawn_blocking(move || {
                let freed = crate::contract::held::freed(|| drop((mode, persona)));
                if freed > GIVE_BACK_OVER {
                    crate::contract::held::give_back();
                }
            }));
        }
    }
}

/// The completion service (cheap to clone: what it holds is shared).
#[derive(Clone)]
pub struct Service {
    limits: Arc<Limits>,
    backends: Arc<Backends>,
    /// How long after a call began a fallback may still start.
    fallback_window: Duration,
    /// What every front records its calls in.
    metrics: Arc<Metrics>,
}

impl Service {
    pub fn new(limits: Limits, backends: Backends, fallback_window: Duration) -> Self {
        let backends = Arc::new(backends);
        Service {
            limits: Arc::new(limits),
            metrics: Arc::new(Metrics::new(backends.clone())),
            backends,
            fallback_window,
        }
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// Parses `arguments` for `shape`: refused when larger than the request limit.
    pub fn parse(&self, shape: &dyn Shape, arguments: &Map<String, Value>) -> CallResult<Call> {
        check_size(arguments, self.limits.max_request_bytes)?;
        shapes::parse(shape, arguments, &self.limits)
    }

    /// [`Service::parse`], handing `arguments` back: on tokio's blocking threads when it may take
    /// long, since parsing compiles the call's schemas (64 tool schemas of 80 KB take a second of
    /// CPU) and a large call takes long to read, which must not hold one of the async runtime's
    /// threads and every request and `/healthz` queued on it; here when the call is small and
    /// carries no schema, where a hop to another thread would cost more than the parse.
    pub async fn parse_blocking(
        &self,
        shape: &'static dyn Shape,
        arguments: Map<String, Value>,
    ) -> (CallResult<Call>, Map<String, Value>) {
        if !parses_long(&arguments) {
            let parsed = self.parse(shape, &arguments);
            return (parsed, arguments);
        }
        let service = self.clone();
        let parsing = tokio::task::spawn_blocking(move || {
            let parsed = service.parse(shape, &arguments);
            (parsed, arguments)
        });
        match parsing.await {
            Ok(done) => done,
            // Only a panic (none is expected) or a runtime shutting down end it otherwise.
            Err(e) => (
                Err(CallError::Protocol(crate::error::Fault {
                    kind: crate::error::FaultKind::Internal,
                    message: format!("parsing the call failed: {e}"),
                    data: None,
                })),
                Map::new(),
            ),
        }
    }

    /// The call answered by the first model its route names that can, on to the next after a
    /// transient failure while there is time.
    pub async fn complete(&self, call: &Call, origin: &Origin<'_>) -> CallResult<Served> {
        let samples = origin.host.is_some_and(|h| h.samples());
        let chain = self.backends.route(&call.request.model, samples)?;
        // One sink for the whole call, across fallbacks and repairs; none when no model it may
        // reach makes its answer here.
        let events = if chain.iter().any(|e| e.streams()) {
            (origin.events)()
        } else {
            None
        };
        let started = Instant::now();
        let mut fell_back_from = Vec::new();
        for (i, entry) in chain.iter().enumerate() {
            let outcome = match self.answer(entry, call, origin, events.as_ref()).await {
                Ok(outcome) => outcome,
                // Worth another model, one is left, and there is time for it.
                // Not once the caller has been shown part of this model's answer.
                Err(e)
                    if e.is_transient()
                        && i + 1 < chain.len()
                        && started.elapsed() < self.fallback_window
                        && !events.as_ref().is_some_and(|s| s.committed()) =>
                {
                    // The error's words may quote the prompt (a provider echoing it): only
                    // its kind and status at the default level, the words at debug.
                    let status = e.upstream().status;
                    tracing::warn!(model = %entry.name, kind = e.kind(), status, "falling back");
                    tracing::debug!(
                        model = %entry.name, error = %crate::error::clip(&e.to_string()),
                        "falling back"
                    );
                    fell_back_from.push(json!({"model": entry.name, "error": e.to_string()}));
                    if let Some(next) = chain.get(i + 1) {
                        self.metrics.fallback(&entry.name, &next.name);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            return Ok(match outcome {
                Outcome::Asked => Served::Asked,
                Outcome::Done(done) => {
                    let route = Route {
                        entry,
                        fell_back_from,
                        named: self.backends.named(),
                    };
                    Served::Answered(Box::new(finish(call, *done, &route)))
                }
            });
        }
        Err(CallError::Invalid("no model can answer this call".into()))
    }

    /// The embeddings of `request`'s inputs by the model `model` names (the default without
    /// one; see [`Backends::embedder`]), under that model's cap. No inputs: none, once the
    /// model is there (Ollama's way of loading a model).
    pub async fn embed(&self, model: &str, request: EmbedRequest) -> CallResult<Embeddings> {
        let (entry, embedder) = self.backends.embedder(model)?;
        let _permit = entry.admit(self.backends.queue_timeout).await?;
        if request.inputs.is_empty() {
            return Ok(Embeddings {
                model: embedder.model_name().unwrap_or_else(|| entry.name.clone()),
                vectors: Vec::new(),
                prompt_tokens: 0,
            });
        }
        embedder.embed(request).await
    }

    /// The prompt tokens of the call's first attempt on the model its route names first, for a
    /// caller without a sampling host (the HTTP APIs): counted by that model when it counts
    /// exactly (the embedded one), else estimated from the prompt's characters.
    pub async fn count_tokens(&self, call: &Call) -> CallResult<usize> {
        let chain = self.backends.route(&call.request.model, false)?;
        let counted = match chain.first().map(|entry| &entry.answerer) {
            Some(Answerer::Model(model)) => match driver::first_request(call, model.as_ref())? {
                Some(request) => model.count_tokens(request).await?,
                None => None,
            },
            Some(Answerer::Host { .. }) | None => None,
        };
        Ok(counted.unwrap_or_else(|| call.prompt_tokens_estimate()))
    }

    /// One entry's answer to the call: under its cap, on its driver.
    async fn answer(
        &self,
        entry: &Entry,
        call: &Call,
        origin: &Origin<'_>,
        events: Option<&Events>,
    ) -> CallResult<Outcome> {
        let _permit = entry.admit(self.backends.queue_timeout).await?;
        let driver = match (&entry.answerer, origin.host) {
            (Answerer::Model(model), _) => Driver::Direct {
                model: model.as_ref(),
                cancel: origin.cancel,
            },
            (Answerer::Host { hints }, Some(host)) => Driver::Host(host.sampler(call, hints)),
            (Answerer::Host { .. }, None) => {
                return Err(CallError::Host(format!(
                    "the model {:?} is the host's own model through MCP sampling, and this call \
                     did not come from an MCP host; give the server a local or provider backend",
                    entry.name
                )));
            }
        };
        driver.run(call, events.filter(|_| entry.streams())).await
    }
}

/// Which model answered a call, for its result.
struct Route<'a> {
    entry: &'a Entry,
    /// The models that failed before it, with their errors.
    fell_back_from: Vec<Value>,
    /// A models file names the models: every result says which answered.
    named: bool,
}

/// Refuses arguments larger than the limit, counting their JSON size without building it.
fn check_size(arguments: &Map<String, Value>, max: usize) -> CallResult<()> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, arguments);
    if counter.0 > max {
        return Err(CallError::Invalid(format!(
            "the arguments are {} bytes of JSON, over the limit of {max} \
             (AGENT_AS_MODEL_MAX_REQUEST_BYTES)",
            counter.0
        )));
    }
    Ok(())
}

/// The cursor, the usage, and what every result reports (warnings, how tools and structured
/// output were obtained, which model answered).
fn finish(call: &Call, done: Fulfilled, route: &Route<'_>) -> Answered {
    let completion = done.answer.completion_text();
    let cursor = call.chain.is_on().then(|| {
        cursor::mint(
            &call.request.model,
            call.tool,
            &call.transcript,
            &completion,
        )
    });
    // Measured by the backend, else estimated from the text.
    let usage = done.usage.unwrap_or_else(|| Usage {
        prompt: call.prompt_tokens_estimate(),
        completion: estimate_tokens(completion.chars().count()),
        estimated: true,
        cached: None,
    });
    let mut warnings = call.warnings.clone();
    warnings.extend(done.warnings);
    let backend = route.entry.backend();
    let report = Report {
        warnings,
        tool_calls_via: done.strategy.tools_via(),
        backend,
        entry: route.entry.name.clone(),
        route: (route.named || !route.fell_back_from.is_empty()).then(|| {
            json!({"model": route.entry.name, "backend": backend,
                   "fell_back_from": route.fell_back_from})
        }),
        structured_output: done
            .strategy
            .structured_via()
            .map(|via| json!({"via": via, "attempts": done.attempts})),
        host_model: done.host_model.clone(),
    };
    tracing::debug!(tool = call.tool, attempts = done.attempts, "call completed");
    Answered {
        cursor,
        report,
        media: done.media,
        finished: Finished {
            answer: done.answer,
            finish: done.finish,
            usage,
            model: done.host_model,
            reasoning: done.reasoning,
            logprobs: done.logprobs,
        },
    }
}

/// Calls up to this size (about, in bytes of JSON) without schemas are parsed where they
/// arrive; larger ones, and any with schemas, on tokio's blocking threads.
pub const INLINE_PARSE_BYTES: usize = 16 * 1024;

/// The members of a call (in any API's shape) that may carry JSON Schemas to compile.
const SCHEMA_MEMBERS: [&str; 6] = [
    "tools",
    "text",
    "response_format",
    "output_schema",
    "generationConfig",
    "format",
];

/// Whether parsing `call` may take long enough to hold up an async runtime's thread: it is
/// large, or it may carry schemas to compile.
pub fn parses_long(call: &Map<String, Value>) -> bool {
    SCHEMA_MEMBERS.iter().any(|k| call.contains_key(*k))
        || approximate_size(call) > INLINE_PARSE_BYTES
}

/// About how many bytes of JSON `object` is, without writing it: its strings' lengths, and a
/// few bytes for each other value (stopping early once past the inline size).
pub fn approximate_size(object: &Map<String, Value>) -> usize {
    fn size(v: &Value, budget: usize) -> usize {
        match v {
            Value::String(s) => s.len() + 2,
            Value::Array(a) => {
                let mut total = 2;
                for item in a {
                    total += size(item, budget);
                    if total > budget {
                        break;
                    }
                }
                total
            }
            Value::Object(o) => members(o, budget),
            _ => 8,
        }
    }
    fn members(o: &Map<String, Value>, budget: usize) -> usize {
        let mut total = 2;
        for (k, v) in o {
            total += k.len() + 3 + size(v, budget);
            if total > budget {
                break;
            }
        }
        total
    }
    members(object, INLINE_PARSE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::common::tests_support::parse;
    use crate::shapes::openai_chat::ChatComplete;

    #[tokio::test]
    async fn a_call_whose_model_cannot_count_is_estimated() {
        let service = Service::new(
            Limits::default(),
            Backends::default(),
            Duration::from_secs(1),
        );
        let call = parse(
            &ChatComplete,
            json!({"messages": [{"role": "user", "content": "x".repeat(400)}]}),
        )
        .unwrap();
        let counted = service.count_tokens(&call).await.unwrap();
        assert_eq!(counted, call.prompt_tokens_estimate());
        assert!(counted >= 100, "{counted}");
    }
}
