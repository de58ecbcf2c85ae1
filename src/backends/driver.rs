//! The one driver of fulfilment: it runs the pure [`Machine`] for a call and does its I/O on
//! whichever backend answers — the host's model through MCP sampling (a request during the
//! tool call on the legacy era, an input-required round on 2026-07-28) or a model this server
//! calls itself — and tells an optional [`Live`] sink what happens (each attempt, the model's
//! text as it comes, the end). The MCP handler only chooses the backend and renders the
//! outcome.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.

use super::direct::{Model, ModelRequest};
use crate::call::{Call, Completion};
use crate::error::{CallError, CallResult};
use crate::fulfil::live::{Event, Live};
use crate::fulfil::{Attempt, Capabilities, Fulfilled, Machine, Progress, Step};
use crate::limits::Limits;
use crate::mcp::legacy;
use crate::mcp::mrtr::{self, Binding};
use crate::mcp::sampling::{self, Host, Retry, Settings};
use crate::mcp::wire;
use rmcp::model::InputRequiredResult;
use rmcp::service::{RequestContext, RoleServer};
use std::sync::Arc;

/// How a call ends on its driver.
pub enum Outcome {
    Done(Fulfilled),
    /// 2026-07-28: the client must answer these requests and retry the call.
    Ask(InputRequiredResult),
}

/// What became of one attempt.
enum Sent {
    Answered(Completion),
    Asked(InputRequiredResult),
}

/// The host's sampling, on the era of the request being answered.
pub struct Sampling<'a> {
    host: &'a Host,
    ctx: &'a RequestContext<RoleServer>,
    retry: Retry<'a>,
    settings: &'a Settings,
    limits: &'a Limits,
    /// The model hints sent (none: the caller's `model`).
    hints: &'a [String],
    /// What the sealed state of a 2026-07-28 round is bound to (the tool and its arguments).
    binding: Option<Binding>,
}

/// Where a call's attempts are answered.
pub enum Driver<'a> {
    Sampling(Sampling<'a>),
    /// A model this server calls itself; a cancelled tool call stops its work (the provider's
    /// request is dropped and its connection closed, the local model stops within one step).
    Direct {
        model: &'a dyn Model,
        ctx: &'a RequestContext<RoleServer>,
    },
}

impl<'a> Driver<'a> {
    pub fn sampling(
        call: &Call,
        host: &'a Host,
        ctx: &'a RequestContext<RoleServer>,
        retry: Retry<'a>,
        settings: &'a Settings,
        limits: &'a Limits,
        hints: &'a [String],
    ) -> Self {
        let binding = host
            .modern
            .then(|| mrtr::Sealer::binding(call.tool, retry.arguments));
        Driver::Sampling(Sampling {
            host,
            ctx,
            retry,
            settings,
            limits,
            hints,
            binding,
        })
    }

    /// The backend reported in results, when it is not the host's sampling.
    pub fn backend(&self) -> Option<&'static str> {
        match self {
            Driver::Sampling(_) => None,
            Driver::Direct { model, .. } => Some(model.kind()),
        }
    }

    /// Fulfils one call: the machine's attempts, answered in turn, each told to `events`.
    pub async fn run(&self, call: &Call, events: Option<&Arc<Live>>) -> CallResult<Outcome> {
        let machine = Machine::new(call, self.capabilities()?);
        let (mut progress, mut answer) = self.resume()?;
        let outcome = loop {
            let step = machine
                .step(&mut progress, answer.take())
                .map_err(|e| self.blame(e))?;
            match step {
                Step::Done(done) => break Outcome::Done(done),
                Step::Send(attempt) => {
                    if let Some(live) = events {
                        live.event(Event::Attempt {
                            number: progress.repairs.len() + 1,
                            of: machine.attempts_allowed(),
                            budget: usize::try_from(call.request.max_tokens).ok(),
                        });
                    }
                    match self.send(&attempt, &progress, events).await? {
                        Sent::Answered(completion) => answer = Some(completion),
                        Sent::Asked(ask) => break Outcome::Ask(ask),
                    }
                }
            }
        };
        // The end is told by whoever follows the whole call (one reporter across fallbacks).
        Ok(outcome)
    }

    fn capabilities(&self) -> CallResult<Capabilities> {
        match self {
            Driver::Sampling(s) => {
                s.host.require_sampling()?;
                Ok(s.host.capabilities())
            }
            Driver::Direct { model, .. } => Ok(model.capabilities()),
        }
    }

    /// Where the call stands when it starts: on a 2026-07-28 retry, the sealed progress and
    /// the host's answer to the last round; otherwise nothing yet.
    fn resume(&self) -> CallResult<(Progress, Option<Completion>)> {
        let Driver::Sampling(s) = self else {
            return Ok(Default::default());
        };
        let Some(binding) = &s.binding else {
            return Ok(Default::default());
        };
        let responses = s.retry.input_responses;
        let opened = s
            .settings
            .sealer
            .open(binding, s.retry.request_state, responses.is_some())?;
        let Some(progress) = opened else {
            return Ok(Default::default());
        };
        let answer = match responses.and_then(|r| r.get(mrtr::SAMPLE_KEY)) {
            Some(value) => Some(wire::to_completion(
                sampling::parse_response(value)?,
                s.limits,
            )?),
            // A retry without the "sample" answer: ask again.
            None => None,
        };
        Ok((progress, answer))
    }

    /// Has one attempt answered, or (2026-07-28) asks the client for it.
    async fn send(
        &self,
        attempt: &Attempt<'_>,
        progress: &Progress,
        events: Option<&Arc<Live>>,
    ) -> CallResult<Sent> {
        match self {
            Driver::Sampling(s) => {
                let params = sampling::sampling_params(attempt, s.hints);
                if let Some(binding) = &s.binding {
                    return s
                        .settings
                        .sealer
                        .ask(binding, progress, params)
                        .map(Sent::Asked);
                }
                let result = legacy::sample(s.ctx, params, s.settings.sampling_timeout).await?;
                wire::to_completion(result, s.limits).map(Sent::Answered)
            }
            Driver::Direct { model, ctx } => {
                let request = ModelRequest::from_attempt(attempt);
                tokio::select! {
                    answer = model.complete(request, events.cloned()) => answer.map(Sent::Answered),
                    () = ctx.ct.cancelled() => Err(CallError::backend(
                        model.kind(),
                        "the tool call was cancelled by the client",
                    )),
                }
            }
        }
    }

    /// An answer the machine cannot use is the failure of whichever model gave it: the
    /// machine reports it as the host's, which answers on the sampling path.
    fn blame(&self, e: CallError) -> CallError {
        match (self, e) {
            (Driver::Direct { model, .. }, CallError::Host(message)) => {
                CallError::backend(model.kind(), message)
            }
            (_, e) => e,
        }
    }
}
