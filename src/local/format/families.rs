//! The families' formats, one row each: how a template shows the family, its name, the markers
//! its calls and reasoning are read by, and the grammars that write them. A new family is a
//! new row (and the grammar functions of its syntax, where no row's fit).

use super::grammar::{self, Marker, Start};
use super::scan::NAME_ARGS;
use super::sections::Kind;
use super::{Action, Family, Thinking};
use crate::call::ModelTool;

/// A grammar of one or more calls of the offered tools, written a family's way: the start
/// rule's body, with the rules it needs added to the list.
pub type CallsGrammar = fn(&[ModelTool], Marker<'_>, &mut Vec<String>) -> String;

/// A grammar of a JSON answer, from the `%json` term of its schema.
pub type JsonGrammar = fn(String, Marker<'_>) -> String;

/// A grammar of reasoning opened by its open marker (given) and closed by the rule `thought`
/// (its text and close), before the answer from `Start`: the start rule's first part, with
/// the rules it needs added to the list.
pub type ReasoningGrammar = fn(&str, Start, Marker<'_>, &mut Vec<String>) -> String;

/// What shows a family in a template's text: all the texts of any of `any`'s sets, and none
/// of `unless`.
pub struct Clues {
    any: &'static [&'static [&'static str]],
    unless: &'static [&'static str],
}

impl Clues {
    /// Whether template text `t` shows them.
    fn shown_in(&self, t: &str) -> bool {
        self.any.iter().any(|all| all.iter().all(|s| t.contains(s)))
            && !self.unless.iter().any(|s| t.contains(s))
    }
}

/// Clues that are all the texts of any of `sets`.
const fn any(sets: &'static [&'static [&'static str]]) -> Clues {
    Clues {
        any: sets,
        unless: &[],
    }
}

/// A family's format: one row of [`FAMILIES`].
pub struct FamilyFormat {
    pub family: Family,
    /// The format's name, as `list_models` shows it.
    pub name: &'static str,
    /// What shows the family in a template (families are told in [`FAMILIES`]' order).
    clues: Clues,
    /// Whether a template of the family is one this server knows (else calls are read
    /// leniently).
    pub recognised: bool,
    /// The reasoning the family writes whatever its template shows, if any.
    pub reasoning: Option<Thinking>,
    /// The markers that open the family's calls, and those of its own it drops.
    pub markers: &'static [(&'static str, Action)],
    /// The family's other control tokens that the parser reads.
    pub specials: &'static [&'static str],
    /// Whether its call markers frame its text too, so that they are read without tools.
    pub framed: bool,
    /// Whether an answer may be one bare (or fenced) JSON call.
    pub bare_calls: bool,
    /// The text whose writing starts the grammar of calls the model may make (`auto`).
    pub trigger: Option<&'static str>,
    /// The start of a bare call object, which starts that grammar too at the answer's start.
    pub bare_trigger: Option<&'static str>,
    /// The grammar of the family's calls.
    pub calls: CallsGrammar,
    /// The grammar of calls the model may make, from its trigger on, where it is not `calls`.
    pub lazy: Option<CallsGrammar>,
    /// The grammar of a JSON answer, as the family frames it.
    pub json: JsonGrammar,
}

/// Calls as JSON objects with a name and arguments, and no closing marker.
const JSON: Kind = Kind::Json {
    close: None,
    keys: NAME_ARGS,
};

/// Hermes' calls, in `<tool_call>` tags.
const HERMES: &[(&str, Action)] = &[("<tool_call>", Action::Calls(Kind::HERMES))];

/// The close of `<tool_call>`.
const TOOL_CALL_END: &[&str] = &["</tool_call>"];

/// DeepSeek's calls, in R1's and V3.1's spellings.
const DEEPSEEK: &[(&str, Action)] = &[("<｜tool▁calls▁begin｜>", Action::Calls(Kind::DeepSeek))];

/// DeepSeek's control tokens within its calls.
const DEEPSEEK_SPECIALS: &[&str] = &[
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
];

/// A row that no template shows, with no markers, a grammar of bare JSON calls and a plain JSON
/// answer: what the others change.
const BASE: FamilyFormat = FamilyFormat {
    family: Family::Generic,
    name: "generic",
    clues: any(&[]),
    recognised: true,
    reasoning: None,
    markers: &[],
    specials: &[],
    framed: false,
    bare_calls: false,
    trigger: None,
    bare_trigger: None,
    calls: grammar::generic,
    lazy: None,
    json: grammar::plain_json,
};

/// Not recognised (what no other row's clues show): calls in `<tool_call>` tags or a bare JSON
/// answer.
const GENERIC: FamilyFormat = FamilyFormat {
    recognised: false,
    markers: HERMES,
    specials: TOOL_CALL_END,
    bare_calls: true,
    ..BASE
};

/// Every family's format, in the order they are told from a template: most specific first,
/// the generic format last.
pub static FAMILIES: [FamilyFormat; 14] = [
    FamilyFormat {
        family: Family::Harmony,
        name: "gpt-oss-harmony",
        clues: any(&[&["<|channel|>"]]),
        reasoning: Some(Thinking::Harmony),
        markers: &[
            ("<|start|>", Action::Calls(Kind::Harmony)),
            ("<|channel|>", Action::Calls(Kind::Harmony)),
            ("<|end|>", Action::Drop),
            ("<|return|>", Action::Drop),
            ("<|call|>", Action::Drop),
        ],
        specials: &[
            "<|message|>",
            "<|constrain|>",
            "<|call|>",
            "<|end|>",
            "<|return|>",
        ],
        framed: true,
        trigger: Some(" to=functions."),
        calls: grammar::harmony,
        lazy: Some(grammar::harmony_lazy),
        json: grammar::harmony_json,
        ..BASE
    },
    FamilyFormat {
        family: Family::MistralArgs,
        name: "mistral-args",
        clues: any(&[&["[TOOL_CALLS]", "[ARGS]"]]),
        markers: &[("[TOOL_CALLS]", Action::Calls(Kind::MistralArgs))],
        trigger: Some("[TOOL_CALLS]"),
        calls: grammar::mistral_args,
        ..BASE
    },
    FamilyFormat {
        family: Family::MistralList,
        name: "mistral",
        clues: any(&[&["[TOOL_CALLS]"]]),
        markers: &[("[TOOL_CALLS]", Action::Calls(JSON))],
        trigger: Some("[TOOL_CALLS]"),
        calls: grammar::mistral_list,
        ..BASE
    },
    FamilyFormat {
        family: Family::Kimi,
        name: "kimi-k2",
        clues: any(&[&["<|tool_calls_section_begin|>"]]),
        markers: &[("<|tool_calls_section_begin|>", Action::Calls(Kind::Kimi))],
        specials: &[
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
            "<|tool_calls_section_end|>",
        ],
        trigger: Some("<|tool_calls_section_begin|>"),
        calls: grammar::kimi,
        ..BASE
    },
    FamilyFormat {
        family: Family::DeepSeekR1,
        name: "deepseek-r1",
        clues: any(&[&["tool▁calls▁begin", "```json"]]),
        markers: DEEPSEEK,
        specials: DEEPSEEK_SPECIALS,
        trigger: Some("<｜tool▁calls▁begin｜>"),
        calls: grammar::deepseek_r1,
        ..BASE
    },
    FamilyFormat {
        family: Family::DeepSeekV31,
        name: "deepseek-v3.1",
        clues: any(&[&["tool▁calls▁begin"]]),
        markers: DEEPSEEK,
        specials: DEEPSEEK_SPECIALS,
        trigger: Some("<｜tool▁calls▁begin｜>"),
        calls: grammar::deepseek_v31,
        ..BASE
    },
    FamilyFormat {
        family: Family::CommandR,
        name: "command-r7b",
        clues: any(&[&["<|START_ACTION|>"]]),
        markers: &[
            ("<|START_ACTION|>", Action::Calls(Kind::COMMAND_R)),
            ("<|START_RESPONSE|>", Action::Drop),
            ("<|END_RESPONSE|>", Action::Drop),
        ],
        specials: &["<|END_ACTION|>"],
        trigger: Some("<|START_ACTION|>"),
        calls: grammar::command_r,
        ..BASE
    },
    FamilyFormat {
        family: Family::Qwen3Coder,
        name: "qwen3-coder-xml",
        clues: any(&[&["<tool_call>", "<function=", "<parameter="]]),
        markers: &[("<tool_call>", Action::Calls(Kind::Coder))],
        specials: TOOL_CALL_END,
        trigger: Some("<tool_call>"),
        calls: grammar::coder,
        ..BASE
    },
    FamilyFormat {
        family: Family::Glm,
        name: "glm-4.5",
        clues: any(&[&["<arg_key>"]]),
        markers: &[("<tool_call>", Action::Calls(Kind::Glm))],
        specials: TOOL_CALL_END,
        trigger: Some("<tool_call>"),
        calls: grammar::glm,
        ..BASE
    },
    FamilyFormat {
        family: Family::Granite,
        name: "granite",
        clues: Clues {
            any: &[&["<|tool_call|>"]],
            unless: &["<|/tool_call|>"],
        },
        markers: &[
            ("<|tool_call|>", Action::Calls(JSON)),
            ("<response>", Action::Drop),
            ("</response>", Action::Drop),
        ],
        trigger: Some("<|tool_call|>"),
        calls: grammar::granite,
        ..BASE
    },
    FamilyFormat {
        family: Family::Phi4,
        name: "phi-4-mini",
        clues: any(&[
            &["<|tool_call|>"],
            &["<|tool|>", "<|/tool|>", "<|assistant|>"],
        ]),
        markers: &[(
            "<|tool_call|>",
            Action::Calls(Kind::Json {
                close: Some("<|/tool_call|>"),
                keys: NAME_ARGS,
            }),
        )],
        specials: &["<|/tool_call|>"],
        trigger: Some("<|tool_call|>"),
        calls: grammar::phi4,
        ..BASE
    },
    FamilyFormat {
        family: Family::Hermes,
        name: "hermes",
        clues: any(&[&["<tool_call>"]]),
        markers: HERMES,
        specials: TOOL_CALL_END,
        bare_calls: true,
        trigger: Some("<tool_call>"),
        bare_trigger: Some("{"),
        calls: grammar::hermes,
        lazy: Some(grammar::hermes_lazy),
        ..BASE
    },
    FamilyFormat {
        family: Family::Llama3,
        name: "llama3",
        clues: any(&[&["<|python_tag|>"], &["<|start_header_id|>", "parameters"]]),
        markers: &[("<|python_tag|>", Action::Calls(JSON))],
        bare_calls: true,
        calls: grammar::llama3,
        ..BASE
    },
    GENERIC,
];

impl Family {
    /// The family's row of [`FAMILIES`].
    pub(super) fn format(self) -> &'static FamilyFormat {
        FAMILIES
            .iter()
            .find(|row| row.family == self)
            .unwrap_or(&GENERIC)
    }

    /// The family a template's text shows, most specific first.
    pub(super) fn shown_in(template: &str) -> Family {
        FAMILIES
            .iter()
            .find(|row| row.clues.shown_in(template))
            .unwrap_or(&GENERIC)
            .family
    }
}

/// A way of marking reasoning: one row of [`REASONINGS`].
pub struct ReasoningFormat {
    pub thinking: Thinking,
    /// The texts any of which shows it in a template (ways are told in [`REASONINGS`]' order).
    shown_by: &'static [&'static str],
    /// The markers that open and close it.
    pub markers: Option<(&'static str, &'static str)>,
    /// What ends it when a budget cuts it short, so that the answer follows.
    pub end: Option<&'static str>,
    /// Whether the parser reads its markers (harmony's channels are read as its calls are).
    pub parsed: bool,
    /// The grammar of it before the answer.
    pub grammar: ReasoningGrammar,
}

/// No reasoning: what the others change.
const NO_REASONING: ReasoningFormat = ReasoningFormat {
    thinking: Thinking::None,
    shown_by: &[],
    markers: None,
    end: None,
    parsed: true,
    grammar: grammar::marked_reasoning,
};

/// Every way of marking reasoning, in the order they are told from a template.
pub static REASONINGS: [ReasoningFormat; 5] = [
    ReasoningFormat {
        thinking: Thinking::Harmony,
        markers: Some(("<|channel|>analysis<|message|>", "<|end|>")),
        end: Some("<|end|><|start|>assistant<|channel|>final<|message|>"),
        parsed: false,
        grammar: grammar::harmony_reasoning,
        ..NO_REASONING
    },
    ReasoningFormat {
        thinking: Thinking::Mistral,
        shown_by: &["[THINK]"],
        markers: Some(("[THINK]", "[/THINK]")),
        end: Some("[/THINK]"),
        ..NO_REASONING
    },
    ReasoningFormat {
        thinking: Thinking::Command,
        shown_by: &["<|START_THINKING|>"],
        markers: Some(("<|START_THINKING|>", "<|END_THINKING|>")),
        end: Some("<|END_THINKING|>"),
        ..NO_REASONING
    },
    ReasoningFormat {
        thinking: Thinking::Think,
        shown_by: &["<think>", "</think>"],
        markers: Some(("<think>", "</think>")),
        end: Some("\n</think>\n\n"),
        ..NO_REASONING
    },
    NO_REASONING,
];

impl Thinking {
    /// The way's row of [`REASONINGS`].
    pub(super) fn format(self) -> &'static ReasoningFormat {
        REASONINGS
            .iter()
            .find(|row| row.thinking == self)
            .unwrap_or(&NO_REASONING)
    }

    /// The way of marking reasoning a template's text shows.
    pub(super) fn shown_in(template: &str) -> Thinking {
        REASONINGS
            .iter()
            .find(|row| row.shown_by.iter().any(|s| template.contains(s)))
            .unwrap_or(&NO_REASONING)
            .thinking
    }
}
