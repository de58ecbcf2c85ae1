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

/// The request the call's first attempt would send to `model`, built but not sent: the call's
/// own plus what the machine adds on this model (its tools offered natively, an instruction
/// for structured output or emulated tools). `None` if the machine would not send one.
pub fn first_request(call: &Call, model: &dyn Model) -> CallResult<Option<ModelRequest>> {
    let machine = Machine::new(call, model.capabilities(), Blame::Backend(model.kind()));
    Ok(match machine.step(&mut Progress::default(), None)? {
        Step::Send(attempt) => Some(ModelRequest::from_attempt(&attempt)),
        Step::Done(_) => None,
    })
}

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
        if call
            .request
            .text
            .as_ref()
            .is_some_and(|t| t.suffix.is_some())
            && !self.fills_middle()
        {
            return Err(CallError::at(
                "suffix",
                "this model has no fill-in-the-middle tokens: a suffix is taken by the embedded \
                 model (--backend local) when its vocabulary has them, not by a provider's chat \
                 API or the host's sampling; leave `suffix` out",
            ));
        }
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

    /// Whether the backend may take a text completion's `suffix`: the embedded model does when
    /// its vocabulary has fill-in-the-middle tokens (it says so itself when not).
    fn fills_middle(&self) -> bool {
        matches!(self, Driver::Direct { model, .. } if model.kind() == crate::config::Backend::Local)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Backend;
    use crate::shapes::common::tests_support::parse;
    use crate::shapes::openai_chat::ChatComplete;
    use serde_json::{Value, json};

    /// A model that only declares what it takes.
    struct Declares(Capabilities);

    impl Model for Declares {
        fn kind(&self) -> Backend {
            Backend::Provider
        }
        fn capabilities(&self) -> Capabilities {
            self.0
        }
        fn describe(&self) -> Value {
            Value::Null
        }
        fn complete(
            &self,
            _request: ModelRequest,
            _live: Option<Events>,
        ) -> BoxFuture<'_, CallResult<Completion>> {
            Box::pin(async { Err(CallError::backend(Backend::Provider, "not asked")) })
        }
    }

    fn caps(tools: bool, json_schema: bool) -> Capabilities {
        Capabilities {
            tools,
            json_schema,
            top_k: false,
            streams: false,
            reasoning: false,
            context: false,
        }
    }

    #[test]
    fn the_first_request_carries_what_the_machine_adds_on_its_model() {
        let tools = parse(
            &ChatComplete,
            json!({"messages": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "weather?"}],
                   "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}),
        )
        .unwrap();
        let native = first_request(&tools, &Declares(caps(true, true)))
            .unwrap()
            .unwrap();
        assert_eq!(native.tools.len(), 1);
        assert_eq!(native.base.system.as_deref(), Some("Be brief."));
        // Without native tools the machine describes them in the system prompt instead.
        let emulated = first_request(&tools, &Declares(caps(false, false)))
            .unwrap()
            .unwrap();
        assert!(emulated.tools.is_empty());
        let system = emulated.base.system.unwrap();
        assert!(
            system.starts_with("Be brief.") && system.contains("get_weather"),
            "{system}"
        );
        let structured = parse(
            &ChatComplete,
            json!({"messages": [{"role": "user", "content": "x"}],
                   "output_schema": {"type": "object", "required": ["a"]}}),
        )
        .unwrap();
        let request = first_request(&structured, &Declares(caps(true, true)))
            .unwrap()
            .unwrap();
        assert!(request.response_schema.is_some());
        assert!(request.base.system.unwrap().contains("JSON Schema"));
    }

    #[tokio::test]
    async fn a_model_that_cannot_count_says_so() {
        let model = Declares(caps(true, true));
        let counted = model.count_tokens(ModelRequest::default()).await.unwrap();
        assert_eq!(counted, None);
    }

    /// A model that streams a call to a tool nobody offered, `text` in front of it.
    struct WrongCall(&'static str);

    impl Model for WrongCall {
        fn kind(&self) -> Backend {
            Backend::Provider
        }
        fn capabilities(&self) -> Capabilities {
            caps(true, false)
        }
        fn describe(&self) -> Value {
            Value::Null
        }
        fn complete(
            &self,
            _request: ModelRequest,
            live: Option<Events>,
        ) -> BoxFuture<'_, CallResult<Completion>> {
            Box::pin(async move {
                if let Some(live) = live.filter(|_| !self.0.is_empty()) {
                    live.event(Event::Delta {
                        tokens: 1,
                        text: self.0,
                    });
                }
                Ok(Completion {
                    blocks: vec![
                        crate::call::Block::Text(self.0.to_owned()),
                        crate::call::Block::ToolUse {
                            id: "c".into(),
                            name: "nope".into(),
                            input: Default::default(),
                        },
                    ],
                    model: "m".into(),
                    finish: crate::call::Finish::ToolUse,
                    usage: None,
                    warnings: Vec::new(),
                    logprobs: None,
                })
            })
        }
    }

    /// A caller's stream: it has shown the answer once a piece of text came.
    #[derive(Default)]
    struct Shown(std::sync::atomic::AtomicUsize);

    impl crate::fulfil::live::Sink for Shown {
        fn event(&self, event: Event<'_>) {
            if let Event::Delta { .. } = event {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        fn committed(&self) -> bool {
            self.0.load(std::sync::atomic::Ordering::Relaxed) > 0
        }
    }

    #[tokio::test]
    async fn an_answer_the_caller_has_been_shown_is_not_repaired() {
        let call = parse(
            &ChatComplete,
            json!({"messages": [{"role": "user", "content": "weather?"}],
                   "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}),
        )
        .unwrap();
        let cancel = CancellationToken::new();
        let shown: Events = std::sync::Arc::new(Shown::default());
        let model = WrongCall("Let me call a tool.");
        let driver = Driver::Direct {
            model: &model,
            cancel: &cancel,
        };
        let Err(CallError::Rejected(problem)) = driver.run(&call, Some(&shown)).await else {
            panic!("a shown answer that breaks the contract fails the call");
        };
        assert!(problem.contains("\"nope\""), "{problem}");
        assert!(problem.contains("already streamed"), "{problem}");
        // Nothing shown: the same answer is asked to be repaired, and fails only after that.
        let quiet = WrongCall("");
        let driver = Driver::Direct {
            model: &quiet,
            cancel: &cancel,
        };
        let unshown: Events = std::sync::Arc::new(Shown::default());
        let Err(CallError::Rejected(problem)) = driver.run(&call, Some(&unshown)).await else {
            panic!("a call to a tool not offered is rejected");
        };
        assert!(problem.contains("gave up after 2 attempt(s)"), "{problem}");
    }
}
