//! The one driver of fulfilment: it runs the pure [`Machine`] for a call and does its I/O on
//! whichever backend answers — the caller's host through a front's [`Sampler`] (MCP sampling,
//! on either protocol era) or a model this server calls itself — and tells the call's event
//! [`Sink`](crate::fulfil::live::Sink) what happens (each attempt, the model's answer as it
//! comes).

use crate::backends::direct::{BoxFuture, Model, ModelRequest};
use crate::call::{Call, Completion};
use crate::error::{Blame, CallError, CallResult};
use crate::fulfil::live::{Event, Events};
use crate::fulfil::{Attempt, Capabilities, Fulfilled, Machine, Progress, Step};
use tokio_util::sync::CancellationToken;

/// How a call ends on its driver.
pub enum Outcome {
    Done(Box<Fulfilled>),
    /// The caller must answer the sampler's question and call again (MCP 2026-07-28); the
    /// sampler's front holds the question.
    Asked,
}

/// What became of one attempt sent to a [`Sampler`].
pub enum Sent {
    Answered(Completion),
    /// The attempt was handed to the caller to answer (an input-required round).
    Asked,
}

/// The caller's host answering a call's attempts: a front's sampling.
pub trait Sampler: Send + Sync {
    /// What the host can take; an error when it cannot answer at all.
    fn capabilities(&self) -> CallResult<Capabilities>;
    /// Where the call stands when it starts: on a retry, the progress carried by the caller
    /// and its answer to the last attempt; otherwise nothing yet.
    fn resume(&self) -> CallResult<(Progress, Option<Completion>)>;
    /// Has one attempt answered, or hands it to the caller.
    fn send<'a>(
        &'a self,
        attempt: &'a Attempt<'_>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, CallResult<Sent>>;
}

/// Where a call's attempts are answered.
pub enum Driver<'a> {
    Host(Box<dyn Sampler + 'a>),
    /// A model this server calls itself; a cancelled call stops its work (the provider's
    /// request is dropped and its connection closed, the local model stops within one step).
    Direct {
        model: &'a dyn Model,
        cancel: &'a CancellationToken,
    },
}

impl Driver<'_> {
    /// Fulfils one call: the machine's attempts, answered in turn, each told to `events`.
    pub async fn run(&self, call: &Call, events: Option<&Events>) -> CallResult<Outcome> {
        let machine = Machine::new(call, self.capabilities()?, self.blame());
        let (mut progress, mut answer) = self.resume()?;
        loop {
            match machine.step(&mut progress, answer.take())? {
                Step::Done(done) => return Ok(Outcome::Done(Box::new(done))),
                Step::Send(attempt) => {
                    if let Some(events) = events {
                        if let Some(shown) = progress.repairs.last().filter(|_| events.committed())
                        {
                            // The caller has been shown the answer being repaired.
                            return Err(CallError::Rejected(format!(
                                "{}; the answer was already streamed to the client, so it                                  cannot be repaired",
                                shown.problem
                            )));
                        }
                        events.event(Event::Attempt {
                            number: progress.repairs.len() + 1,
                            of: machine.attempts_allowed(),
                            budget: usize::try_from(call.request.max_tokens).ok(),
                            verbatim: machine.verbatim(),
                        });
                    }
                    match self.send(&attempt, &progress, events).await? {
                        Sent::Answered(completion) => answer = Some(completion),
                        Sent::Asked => return Ok(Outcome::Asked),
                    }
                }
            }
        }
    }

    fn blame(&self) -> Blame {
        match self {
            Driver::Host(_) => Blame::Host,
            Driver::Direct { model, .. } => Blame::Backend(model.kind()),
        }
    }

    fn capabilities(&self) -> CallResult<Capabilities> {
        match self {
            Driver::Host(sampler) => sampler.capabilities(),
            Driver::Direct { model, .. } => Ok(model.capabilities()),
        }
    }

    fn resume(&self) -> CallResult<(Progress, Option<Completion>)> {
        match self {
            Driver::Host(sampler) => sampler.resume(),
            Driver::Direct { .. } => Ok(Default::default()),
        }
    }

    async fn send(
        &self,
        attempt: &Attempt<'_>,
        progress: &Progress,
        events: Option<&Events>,
    ) -> CallResult<Sent> {
        match self {
            Driver::Host(sampler) => sampler.send(attempt, progress).await,
            Driver::Direct { model, cancel } => {
                let request = ModelRequest::from_attempt(attempt);
                tokio::select! {
                    answer = model.complete(request, events.cloned()) => answer.map(Sent::Answered),
                    () = cancel.cancelled() => Err(CallError::backend(
                        model.kind(),
                        "the tool call was cancelled by the client",
                    )),
                }
            }
        }
    }
}
