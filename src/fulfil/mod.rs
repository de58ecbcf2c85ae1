//! Fulfilment as a pure state machine: given the call and the answers so far, it says "send
//! this request" or "done" (or fails). It owns the repair policy and the emulation strategy,
//! which it decides from the backend's declared [`Capabilities`]. It does no I/O and knows no
//! protocol era: the driver in [`crate::service`] sends what it asks for (a sampling request
//! during the tool call, an `InputRequiredResult` round, a provider's HTTP call) and feed the
//! answer back.
//!
//! ```text
//! let machine = Machine::new(&call, backend_capabilities, Blame::Host);
//! let mut answer = None;
//! loop {
//!     match machine.step(&mut progress, answer.take())? {
//!         Step::Send(attempt) => answer = Some(backend.complete(attempt)),
//!         Step::Done(fulfilled) => return fulfilled,
//!     }
//! }
//! ```

pub mod live;
pub mod output;
pub mod written;

use crate::call::{Answer, Block, Call, Completion, Finish, Mode, ModelTool, ToolChoice, Turn};
use crate::error::{Blame, CallError, CallResult};
use crate::pyjson::{self, Style};
use output::Verdict;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The name of the single required tool that carries structured output.
pub const STRUCTURED_TOOL: &str = "structured_output";

/// What a backend can take. The strategies follow from it: there is one contract, and each
/// backend only declares what its model accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Tool definitions, tool choice and tool content in a request.
    pub tools: bool,
    /// A JSON Schema the answer must satisfy (`response_format: json_schema`, or constrained
    /// decoding): structured output is then asked for natively.
    pub json_schema: bool,
    /// `top_k` is used or carried to the model (`top_p` and `seed` always are).
    pub top_k: bool,
    /// The answer is made token by token where this server sees it, so a caller can follow
    /// it with a progress token.
    pub streams: bool,
    /// The reasoning controls (effort, budget, on or off) reach the model.
    pub reasoning: bool,
    /// A call's own context (Ollama's `num_ctx`) bounds its prompt and answer.
    pub context: bool,
}

impl Capabilities {
    /// MCP sampling: tools when the host declares them, no response schema, the tuning
    /// parameters carried in the request's metadata, whole answers.
    pub fn sampling(tools: bool) -> Self {
        Capabilities {
            tools,
            json_schema: false,
            top_k: true,
            streams: false,
            reasoning: false,
            context: false,
        }
    }

    /// What the result says of the parameters this backend could not honour as asked.
    pub fn warnings(&self, call: &Call) -> Vec<String> {
        let mut warnings = Vec::new();
        if call.request.tuning.top_k.is_some() && !self.top_k {
            warnings
                .push("`top_k` was not sent: this backend's API has no such parameter".to_owned());
        }
        if call.request.context.is_some() && !self.context {
            warnings.push(
                "`options.num_ctx` was accepted and not applied: this backend's model has a \
                 context of its own"
                    .to_owned(),
            );
        }
        let asked = call.request.reasoning;
        if !self.reasoning && (asked.enabled.is_some() || asked.budget.is_some()) {
            warnings.push(
                "the reasoning controls (`reasoning_effort`, `reasoning`, `thinking`, \
                 `thinkingConfig`) were not honoured: MCP sampling has no such parameter"
                    .to_owned(),
            );
        }
        if call.stream {
            warnings.push(if self.streams {
                "stream: true is emulated: the complete result is returned at once; pass a \
                 progress token (_meta.progressToken) to follow the text as it is made"
                    .to_owned()
            } else {
                "stream: true is emulated: the complete result is returned at once (MCP \
                 sampling returns the host's answer whole)"
                    .to_owned()
            });
        }
        warnings
    }
}

/// How the call's mode is fulfilled on this backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Text,
    /// `output_schema` sent as the response schema to a backend that enforces it.
    StructuredNative,
    /// `output_schema` as one required tool (host declared `sampling.tools`).
    StructuredByTool,
    /// `output_schema` as an instruction in the system prompt, JSON extracted from the text.
    StructuredByPrompt,
    /// The caller's tools forwarded to the host.
    ToolsNative,
    /// The host cannot take tools: they are described in the system prompt and the calls are
    /// parsed from the answer.
    ToolsByPrompt,
    /// The host cannot take tools: they were not sent, and the result says so.
    ToolsNotForwarded,
}

impl Strategy {
    /// How structured output is obtained on a host with or without `sampling.tools`.
    pub fn for_structured(sampling_tools: bool) -> Self {
        if sampling_tools {
            Strategy::StructuredByTool
        } else {
            Strategy::StructuredByPrompt
        }
    }

    /// How tools reach the model on a host with or without `sampling.tools` (when offered and
    /// emulation is on).
    pub fn for_tools(sampling_tools: bool) -> Self {
        if sampling_tools {
            Strategy::ToolsNative
        } else {
            Strategy::ToolsByPrompt
        }
    }

    pub fn for_call(call: &Call, caps: Capabilities) -> Self {
        match (&call.mode, caps.tools) {
            (Mode::Text, _) => Strategy::Text,
            (Mode::Structured(_), _) if caps.json_schema => Strategy::StructuredNative,
            (Mode::Structured(_), _) => Strategy::for_structured(caps.tools),
            (Mode::Tools { .. }, true) => Strategy::ToolsNative,
            // tool_choice "none" is honoured by not offering the tools at all.
            (
                Mode::Tools {
                    choice: ToolChoice::None,
                    ..
                },
                false,
            ) => Strategy::Text,
            (Mode::Tools { .. }, false) if call.emulate_tools => Strategy::for_tools(false),
            (Mode::Tools { .. }, false) => Strategy::ToolsNotForwarded,
        }
    }

    /// How tools reached the model, for the result's report.
    pub fn tools_via(self) -> Option<&'static str> {
        match self {
            Strategy::ToolsNative => Some("native"),
            Strategy::ToolsByPrompt => Some("prompt"),
            _ => None,
        }
    }

    /// How structured output was obtained, for the result's report.
    pub fn structured_via(self) -> Option<&'static str> {
        match self {
            Strategy::StructuredNative => Some("native"),
            Strategy::StructuredByTool => Some("tool"),
            Strategy::StructuredByPrompt => Some("prompt"),
            _ => None,
        }
    }

    pub fn warnings(self) -> Vec<String> {
        match self {
            Strategy::ToolsNotForwarded => vec![
                "tools were not forwarded: the host did not declare the sampling.tools \
                 capability, so it cannot take tools in a sampling request, and emulate_tools \
                 is false; the answer is the host model's plain text"
                    .to_owned(),
            ],
            _ => Vec::new(),
        }
    }
}

/// A rejected answer and why, fed back to the model on the next attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repair {
    pub answer: String,
    pub problem: String,
}

/// The progress of a call across attempts; on 2026-07-28 it travels in the sealed state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default)]
    pub repairs: Vec<Repair>,
}

/// Longest rejected answer echoed back to the model in a repair request, in bytes. Repairs
/// travel in the sealed state on 2026-07-28, so this bounds the state too.
pub const MAX_REPAIR_ECHO: usize = 4 * 1024;
/// Repair attempts when `max_retries` is not given, and the most allowed.
pub const DEFAULT_MAX_RETRIES: u8 = 1;
pub const MAX_MAX_RETRIES: u8 = 5;
/// Longest problem description kept for a repair, in bytes.
pub const MAX_REPAIR_PROBLEM: usize = 1024;

/// One request to the backend, in neutral form: the call's request plus what this attempt
/// adds (the emulation instruction, the repair turns, the tools it offers).
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    pub call: &'a Call,
    /// The system prompt, with the emulation instruction when there is one.
    pub system: Option<String>,
    /// Turns after the call's own: each earlier rejected answer and the request to repair it.
    pub repairs: Vec<Turn>,
    /// Tools offered natively (empty when none or when emulated), and the choice.
    pub tools: Vec<ModelTool>,
    pub tool_choice: Option<ToolChoice>,
    /// Whether tool content may travel as tool blocks (else it is written as text).
    pub tool_content: bool,
    /// The schema the answer must satisfy, for a backend that enforces it.
    pub response_schema: Option<&'a Map<String, Value>>,
}

impl Attempt<'_> {
    /// The call's turns followed by the repair turns.
    pub fn turns(&self) -> impl Iterator<Item = &Turn> {
        self.call.request.turns.iter().chain(&self.repairs)
    }
}

/// A completed call before rendering.
#[derive(Debug, Clone)]
pub struct Fulfilled {
    pub answer: Answer,
    pub strategy: Strategy,
    /// What was not honoured as asked on this backend, for the result.
    pub warnings: Vec<String>,
    pub attempts: usize,
    pub host_model: String,
    pub finish: Finish,
    /// Images and audio in the answer, returned beside the text.
    pub media: Vec<Block>,
    /// The model's reasoning, unless the caller asked not to be shown it.
    pub reasoning: Option<String>,
    /// Token counts the backend measured, summed over the attempts' last answer.
    pub usage: Option<crate::call::Usage>,
    /// The answer's tokens' log-probabilities, when asked for and reported.
    pub logprobs: Option<Vec<crate::call::TokenLogprob>>,
}

/// What to do next.
#[derive(Debug)]
pub enum Step<'a> {
    Send(Attempt<'a>),
    Done(Fulfilled),
}

/// The state machine of one call on one backend.
#[derive(Debug, Clone, Copy)]
pub struct Machine<'a> {
    call: &'a Call,
    caps: Capabilities,
    strategy: Strategy,
    /// Whose failure an unusable answer is.
    blame: Blame,
}

impl<'a> Machine<'a> {
    pub fn new(call: &'a Call, caps: Capabilities, blame: Blame) -> Self {
        Machine {
            call,
            caps,
            strategy: Strategy::for_call(call, caps),
            blame,
        }
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Whether the backend's text and tool calls are the answer's own, as the caller may see
    /// them come: plain text or calls the backend makes natively, with no persona's schema to
    /// hold the text to.
    pub fn verbatim(&self) -> bool {
        matches!(
            self.strategy,
            Strategy::Text | Strategy::ToolsNative | Strategy::ToolsNotForwarded
        ) && self.call.persona.is_none()
    }

    /// Given the progress so far and the answer to the last attempt (`None` before the first,
    /// or when it is not known yet), says what to do next. A rejected answer within the repair
    /// budget is recorded in `progress` and asked again.
    pub fn step(
        &self,
        progress: &mut Progress,
        answer: Option<Completion>,
    ) -> CallResult<Step<'a>> {
        let Some(mut completion) = answer else {
            return Ok(Step::Send(self.attempt(progress)));
        };
        if matches!(self.strategy, Strategy::Text | Strategy::ToolsNotForwarded) {
            // Most hosts ignore stop sequences: cut the text at the first one ourselves.
            completion.enforce_stop(&self.call.request.stop);
        }
        let attempts = progress.repairs.len() + 1;
        match self.persona_check(output::interpret(
            self.call,
            self.strategy,
            &completion,
            self.blame,
        )?) {
            Verdict::Accepted(answer) => Ok(Step::Done(Fulfilled {
                answer,
                strategy: self.strategy,
                warnings: [
                    self.warnings(),
                    completion.warnings.clone(),
                    self.logprobs_warning(&completion),
                ]
                .concat(),
                attempts,
                media: completion.media(),
                reasoning: completion
                    .reasoning()
                    .filter(|_| self.call.request.reasoning.shown != Some(false)),
                usage: completion.usage,
                logprobs: completion.logprobs,
                host_model: completion.model,
                finish: completion.finish,
            })),
            Verdict::Violation { answer, problem } => {
                let allowed = self.repair_budget();
                if attempts > usize::from(allowed) {
                    return Err(CallError::Rejected(format!(
                        "{problem}; gave up after {attempts} attempt(s) (max_retries {allowed})"
                    )));
                }
                progress.repairs.push(Repair {
                    answer: clip_bytes(&answer, MAX_REPAIR_ECHO),
                    problem: clip_bytes(&problem, MAX_REPAIR_PROBLEM),
                });
                Ok(Step::Send(self.attempt(progress)))
            }
        }
    }

    /// A persona's `output_schema` holds the accepted answer's text to it, with repairs like
    /// any other schema.
    fn persona_check(&self, verdict: Verdict) -> Verdict {
        let (Verdict::Accepted(answer), Some(persona)) = (&verdict, &self.call.persona) else {
            return verdict;
        };
        let text = answer.completion_text();
        match persona.output_problem(&text) {
            Some(problem) => Verdict::Violation {
                answer: text,
                problem,
            },
            None => verdict,
        }
    }

    /// Log-probabilities asked for that the answer came without: the answer is given without
    /// them (`logprobs: null`) and the result says so, rather than refused, as OpenAI-compatible
    /// servers that cannot compute them answer: the text is what a client came for, and an
    /// MCP host, which never reports them, could otherwise never answer such a call.
    fn logprobs_warning(&self, completion: &Completion) -> Vec<String> {
        if self.call.request.logprobs.is_none() || completion.logprobs.is_some() {
            return Vec::new();
        }
        vec![match self.blame {
            Blame::Host => {
                "log probabilities (`logprobs`) were not returned: MCP sampling reports none, so \
                            the answer carries none"
                    .to_owned()
            }
            Blame::Backend(backend) => format!(
                "log probabilities (`logprobs`) were not returned: the {backend} backend \
                 reported none for this answer"
            ),
        }]
    }

    /// What the result reports of how the call was honoured on this backend.
    fn warnings(&self) -> Vec<String> {
        let mut warnings = self.strategy.warnings();
        warnings.extend(self.caps.warnings(self.call));
        warnings
    }

    /// Tool calls always get one repair ("required" with no call, a call to a tool not
    /// offered, or arguments that break its schema); structured output gets `max_retries`.
    fn repair_budget(&self) -> u8 {
        if matches!(
            self.strategy,
            Strategy::ToolsByPrompt | Strategy::ToolsNative
        ) {
            self.call.max_retries.max(1)
        } else {
            self.call.max_retries
        }
    }

    /// Answers this call may take: the first and its repairs.
    pub fn attempts_allowed(&self) -> usize {
        usize::from(self.repair_budget()) + 1
    }

    /// Each rejected answer, and the request to repair it.
    fn repair_turns(&self, progress: &Progress) -> Vec<Turn> {
        progress
            .repairs
            .iter()
            .flat_map(|r| {
                [
                    Turn::text(crate::call::Role::Assistant, r.answer.clone()),
                    Turn::text(
                        crate::call::Role::User,
                        repair_instruction(&r.problem, self.strategy),
                    ),
                ]
            })
            .collect()
    }

    /// The request for the next attempt.
    fn attempt(&self, progress: &Progress) -> Attempt<'a> {
        let call = self.call;
        let repairs = self.repair_turns(progress);
        let instruction = match (self.strategy, &call.mode) {
            // Native schemas get the instruction too: a small model writes better values
            // when it reads what they are for, and the constraint keeps the shape.
            (
                Strategy::StructuredByPrompt | Strategy::StructuredNative,
                Mode::Structured(schema),
            ) => Some(json_instruction(schema.raw())),
            (Strategy::ToolsByPrompt, Mode::Tools { defs, choice }) => {
                Some(output::tools_instruction(defs, *choice))
            }
            _ => None,
        };
        let system = match (call.request.system.clone(), instruction) {
            (Some(s), Some(i)) => Some(format!("{s}\n\n{i}")),
            (s, i) => s.or(i),
        };
        let (tools, tool_choice) = match (self.strategy, &call.mode) {
            (Strategy::StructuredByTool, Mode::Structured(schema)) => (
                vec![ModelTool {
                    name: STRUCTURED_TOOL.to_owned(),
                    description: Some(
                        "Return the structured completion as this tool's input; it must \
                         satisfy the input schema."
                            .to_owned(),
                    ),
                    schema: schema.object().clone(),
                }],
                Some(ToolChoice::Required),
            ),
            (Strategy::ToolsNative, Mode::Tools { defs, choice }) => {
                (defs.iter().map(ModelTool::from).collect(), Some(*choice))
            }
            _ => (Vec::new(), None),
        };
        Attempt {
            call,
            system,
            repairs,
            tools,
            tool_choice,
            tool_content: self.caps.tools,
            response_schema: match (self.strategy, &call.mode) {
                (Strategy::StructuredNative, Mode::Structured(schema)) => Some(schema.object()),
                _ => None,
            },
        }
    }
}

/// At most `max` bytes of `s` (cut at a character boundary), marked when cut.
pub fn clip_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let at = (0..=max)
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{} [truncated]", s.get(..at).unwrap_or(""))
}

/// The instruction that asks for JSON when the backend cannot take tools.
fn json_instruction(schema: &Value) -> String {
    format!(
        "Reply with only a JSON object that satisfies this JSON Schema (Draft 2020-12), with no \
         prose before or after it:\n{}",
        pyjson::dumps(schema, Style::SORTED)
    )
}

fn repair_instruction(problem: &str, strategy: Strategy) -> String {
    let how = match strategy {
        Strategy::StructuredByTool => {
            format!("Call the {STRUCTURED_TOOL} tool again with input that satisfies its schema.")
        }
        Strategy::ToolsByPrompt => "Reply again with only the fenced JSON block of tool calls, \
                                    with arguments that satisfy each tool's input schema."
            .to_owned(),
        Strategy::ToolsNative => "Answer again, calling only the tools offered, with arguments \
                                  that satisfy each tool's input schema, or in text if no tool \
                                  may be called."
            .to_owned(),
        _ => "Reply again with only the corrected JSON object.".to_owned(),
    };
    format!("Your previous answer was rejected: {problem}. {how}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::common::tests_support::parse;
    use crate::shapes::openai_chat::ChatComplete;
    use serde_json::json;

    fn structured_call() -> Call {
        parse(
            &ChatComplete,
            json!({"messages": [{"role": "user", "content": "x"}], "max_retries": 1,
                   "output_schema": {"type": "object", "required": ["a"]}}),
        )
        .unwrap()
    }

    #[test]
    fn the_machine_asks_repairs_within_budget_then_fails() {
        let call = structured_call();
        let m = Machine::new(&call, Capabilities::sampling(false), Blame::Host);
        assert_eq!(m.strategy(), Strategy::StructuredByPrompt);
        let mut progress = Progress::default();
        let Step::Send(first) = m.step(&mut progress, None).unwrap() else {
            panic!("the first step sends")
        };
        assert!(first.system.unwrap().contains("JSON Schema"));
        assert!(first.tools.is_empty() && first.repairs.is_empty());
        let bad = Completion::text_answer("{\"b\": 1}");
        let Step::Send(second) = m.step(&mut progress, Some(bad.clone())).unwrap() else {
            panic!("a violation within budget is repaired")
        };
        assert_eq!(second.repairs.len(), 2);
        assert_eq!(progress.repairs.len(), 1);
        let e = m.step(&mut progress, Some(bad)).unwrap_err().to_string();
        assert!(e.contains("gave up after 2 attempt(s)"), "{e}");
        let good = Completion::text_answer("{\"a\": 1}");
        let mut fresh = Progress::default();
        let Step::Done(done) = m.step(&mut fresh, Some(good)).unwrap() else {
            panic!("a valid answer is done")
        };
        assert_eq!(done.answer, Answer::Json(json!({"a": 1})));
    }

    #[test]
    fn a_backend_with_tools_gets_the_structured_tool() {
        let call = structured_call();
        let m = Machine::new(&call, Capabilities::sampling(true), Blame::Host);
        let Step::Send(a) = m.step(&mut Progress::default(), None).unwrap() else {
            panic!()
        };
        assert_eq!(a.tools.len(), 1);
        assert_eq!(a.tools[0].name, STRUCTURED_TOOL);
        assert_eq!(a.tool_choice, Some(ToolChoice::Required));
        assert_eq!(a.system, None);
    }

    #[test]
    fn a_backend_that_enforces_schemas_gets_the_schema_natively() {
        let call = structured_call();
        let caps = Capabilities {
            tools: true,
            json_schema: true,
            top_k: true,
            streams: true,
            reasoning: true,
            context: false,
        };
        let m = Machine::new(&call, caps, Blame::Host);
        assert_eq!(m.strategy(), Strategy::StructuredNative);
        let Step::Send(a) = m.step(&mut Progress::default(), None).unwrap() else {
            panic!()
        };
        assert!(a.tools.is_empty());
        assert!(a.system.unwrap().contains("JSON Schema"));
        assert_eq!(
            a.response_schema.and_then(|s| s.get("required")),
            Some(&json!(["a"]))
        );
        let Step::Done(done) = m
            .step(
                &mut Progress::default(),
                Some(Completion::text_answer("{\"a\": 2}")),
            )
            .unwrap()
        else {
            panic!("valid JSON text is done")
        };
        assert_eq!(done.answer, Answer::Json(json!({"a": 2})));
        assert_eq!(done.strategy.structured_via(), Some("native"));
    }

    #[test]
    fn logprobs_asked_and_not_reported_are_said_and_reported_ones_kept() {
        let call = parse(
            &ChatComplete,
            json!({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                   "top_logprobs": 2}),
        )
        .unwrap();
        assert_eq!(call.request.logprobs, Some(2));
        let done = |blame: Blame, answer: Completion| {
            let m = Machine::new(&call, Capabilities::sampling(false), blame);
            let Step::Done(done) = m.step(&mut Progress::default(), Some(answer)).unwrap() else {
                panic!("a text answer is done")
            };
            done
        };
        let host = done(Blame::Host, Completion::text_answer("Hi"));
        assert_eq!(host.logprobs, None);
        assert!(
            host.warnings
                .iter()
                .any(|w| w.contains("MCP sampling reports none")),
            "{:?}",
            host.warnings
        );
        let provider = done(
            Blame::Backend(crate::error::Backend::Provider),
            Completion::text_answer("Hi"),
        );
        assert!(
            provider
                .warnings
                .iter()
                .any(|w| w.contains("the provider backend reported none"))
        );
        let told = vec![crate::call::TokenLogprob {
            token: "Hi".into(),
            bytes: b"Hi".to_vec(),
            logprob: -0.1,
            top: Vec::new(),
        }];
        let reported = Completion {
            logprobs: Some(told.clone()),
            ..Completion::text_answer("Hi")
        };
        let local = done(Blame::Backend(crate::error::Backend::Local), reported);
        assert_eq!(local.logprobs, Some(told));
        assert!(
            !local.warnings.iter().any(|w| w.contains("logprobs")),
            "{:?}",
            local.warnings
        );
    }

    #[test]
    fn repairs_are_clipped() {
        assert_eq!(clip_bytes("abc", 5), "abc");
        assert_eq!(clip_bytes("abcdef", 3), "abc [truncated]");
        assert_eq!(clip_bytes("ééé", 5), "éé [truncated]");
    }
}
