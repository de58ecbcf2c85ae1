//! The embedded model's own way of writing tool calls and reasoning, by family: told from its
//! chat template's text (as llama.cpp's `common/chat.cpp` tells them), read from its answer as
//! it grows ([`Parser`]), and enforced while decoding ([`grammar`]).
//!
//! A model writes calls the way it was trained to: Qwen and Hermes in `<tool_call>` tags,
//! Llama 3 as bare JSON, Mistral after `[TOOL_CALLS]`, gpt-oss in harmony channels, and so on.
//! Its template says which: it renders earlier calls the same way. A model whose template is
//! none of these is read as before (calls in `<tool_call>` tags or bare JSON), and the result
//! says so.

mod families;
pub mod grammar;
mod scan;
mod sections;

use crate::call::{Effort, ModelTool, Reasoning};
use crate::fulfil::written::{Found, Piece};
use scan::Partial;
use sections::{Kind, Section, Then};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// A family of models that writes calls one way: its format is its row of
/// [`families::FAMILIES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Hermes, Qwen 2.5 and Qwen 3: `<tool_call>{"name": …, "arguments": …}</tool_call>`.
    Hermes,
    /// Llama 3.x: `{"name": …, "parameters": …}`, or after `<|python_tag|>`.
    Llama3,
    /// Mistral Nemo and Small: `[TOOL_CALLS][{"name": …, "arguments": …}]`.
    MistralList,
    /// Devstral, Magistral, Mistral Small 3.2: `[TOOL_CALLS]NAME[ARGS]{…}`.
    MistralArgs,
    /// gpt-oss: harmony channels, calls to `functions.NAME` in the commentary channel.
    Harmony,
    /// DeepSeek R1 and V3: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and fenced JSON.
    DeepSeekR1,
    /// DeepSeek V3.1: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}`.
    DeepSeekV31,
    /// Qwen3-Coder (and Qwen 3.5, Nemotron Nano 3): XML functions and parameters.
    Qwen3Coder,
    /// Command R7B: `<|START_ACTION|>[…]<|END_ACTION|>`.
    CommandR,
    /// Granite: `<|tool_call|>[…]`.
    Granite,
    /// GLM 4.5 and 4.6: `<tool_call>NAME<arg_key>…</arg_key><arg_value>…</arg_value>`.
    Glm,
    /// Kimi K2: `<|tool_calls_section_begin|>…`.
    Kimi,
    /// Phi-4-mini: `<|tool_call|>[…]<|/tool_call|>`.
    Phi4,
    /// Not recognised: calls in `<tool_call>` tags or a bare JSON answer.
    Generic,
}

/// How a family marks its reasoning: each way is a row of [`families::REASONINGS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    None,
    /// `<think>…</think>` (Qwen 3, DeepSeek R1, SmolLM3, GLM, Granite, Kimi).
    Think,
    /// Magistral's `[THINK]…[/THINK]`.
    Mistral,
    /// Command R's `<|START_THINKING|>…<|END_THINKING|>`.
    Command,
    /// gpt-oss's analysis channel.
    Harmony,
}

/// What a marker in the text does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Calls(Kind),
    Reasoning,
    /// Dropped: a marker of the family's own that frames text.
    Drop,
}

/// The template keyword arguments a template reads to turn reasoning on or off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Switches {
    enable_thinking: bool,
    thinking: bool,
    reasoning_effort: bool,
}

/// A model's format: its family, its reasoning, and the switches its template reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub family: Family,
    pub thinking: Thinking,
    switches: Switches,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            family: Family::Generic,
            thinking: Thinking::None,
            switches: Switches::default(),
        }
    }
}

/// Whether `t` holds `phrase` starting at a word's start (`thinking`, not `enable_thinking`).
fn has_word(t: &str, phrase: &str) -> bool {
    t.match_indices(phrase).any(|(at, _)| {
        !t.get(..at)
            .and_then(|before| before.chars().next_back())
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

impl Format {
    /// The format a chat template writes (none: ChatML, read as before).
    pub fn detect(template: Option<&str>) -> Format {
        let Some(t) = template else {
            return Format::default();
        };
        let family = Family::shown_in(t);
        let thinking = family
            .format()
            .reasoning
            .unwrap_or_else(|| Thinking::shown_in(t));
        let switches = Switches {
            enable_thinking: t.contains("enable_thinking"),
            thinking: ["thinking is defined", "if thinking", "thinking =="]
                .iter()
                .any(|s| has_word(t, s)),
            reasoning_effort: t.contains("reasoning_effort"),
        };
        Format {
            family,
            thinking,
            switches,
        }
    }

    /// The format's name, as `list_models` shows it.
    pub fn name(&self) -> &'static str {
        self.family.format().name
    }

    /// Whether the template's format is one this server knows (else calls are read leniently).
    pub fn recognised(&self) -> bool {
        self.family.format().recognised
    }

    pub fn reasons(&self) -> bool {
        self.thinking != Thinking::None
    }

    /// The markers that open and close reasoning.
    pub fn reasoning_markers(&self) -> Option<(&'static str, &'static str)> {
        self.thinking.format().markers
    }

    /// What ends reasoning cut short by a budget, so that the answer follows.
    pub fn reasoning_end(&self) -> Option<&'static str> {
        self.thinking.format().end
    }

    /// Whether a prompt (rendered with the template) leaves the model inside its reasoning:
    /// some templates open `<think>` in the generation prompt.
    pub fn opens_reasoning(&self, prompt: &str) -> bool {
        self.reasoning_markers()
            .is_some_and(|(open, _)| prompt.trim_end().ends_with(open))
    }

    /// The template keyword arguments that carry the caller's reasoning controls, for the
    /// switches this template reads; `given` (the caller's own) win.
    pub fn template_kwargs(
        &self,
        reasoning: &Reasoning,
        given: &Map<String, Value>,
    ) -> Map<String, Value> {
        let mut kwargs = Map::new();
        if let Some(on) = reasoning.enabled {
            if self.switches.enable_thinking {
                kwargs.insert("enable_thinking".into(), Value::Bool(on));
            }
            if self.switches.thinking {
                kwargs.insert("thinking".into(), Value::Bool(on));
            }
        }
        if self.switches.reasoning_effort {
            let effort = match (reasoning.effort, reasoning.enabled) {
                (Some(Effort::Minimal | Effort::Low), _) | (None, Some(false)) => Some("low"),
                (Some(Effort::Medium), _) => Some("medium"),
                (Some(Effort::High), _) => Some("high"),
                (None, _) => None,
            };
            if let Some(effort) = effort {
                kwargs.insert("reasoning_effort".into(), Value::String(effort.into()));
            }
        }
        kwargs.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
        kwargs
    }

    /// The markers in the text and what each does.
    fn markers(&self) -> Vec<(&'static str, Action)> {
        let mut markers = self.family.format().markers.to_vec();
        let reasoning = self.thinking.format();
        if let Some((open, close)) = reasoning.markers
            && reasoning.parsed
        {
            markers.push((open, Action::Reasoning));
            // A close with no open: the template opened the reasoning, unseen.
            markers.push((close, Action::Drop));
        }
        markers
    }

    /// Whether an answer may be one bare (or fenced) JSON call.
    fn bare_calls(&self) -> bool {
        self.family.format().bare_calls
    }

    /// The control tokens' texts the parser reads, which the engine shows it (other control
    /// tokens are never shown).
    pub fn special_texts(&self) -> Vec<&'static str> {
        let mut texts: Vec<&'static str> = self.markers().into_iter().map(|(m, _)| m).collect();
        texts.extend(self.family.format().specials);
        texts
    }
}

/// The offered tools' parameter schemas, which type the raw values XML-like formats write.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    properties: HashMap<String, Map<String, Value>>,
}

impl Tools {
    pub fn new(tools: &[ModelTool]) -> Self {
        let properties = tools
            .iter()
            .map(|t| {
                let props = t
                    .schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                (t.name.clone(), props)
            })
            .collect();
        Tools { properties }
    }

    /// A raw value of parameter `key` of `tool`: a string where the schema says so (or the
    /// text is not JSON), else the JSON the text is.
    pub fn typed(&self, tool: &str, key: &str, raw: &str) -> Value {
        let schema = self.properties.get(tool).and_then(|p| p.get(key));
        let is_string = |t: &Value| t.as_str() == Some("string");
        let wants_string = schema.and_then(|s| s.get("type")).is_some_and(|t| match t {
            Value::Array(types) => types.iter().any(is_string) && types.len() <= 2,
            t => is_string(t),
        });
        if wants_string {
            return Value::String(raw.to_owned());
        }
        serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.to_owned()))
    }
}

/// An answer read whole: its text, its reasoning, its calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<Found>,
}

/// A call section being read.
#[derive(Debug)]
struct Open {
    kind: Kind,
    opened_by: &'static str,
    buf: String,
    /// Per call of the section told so far: its index in the answer and the bytes of its
    /// arguments told.
    told: Vec<(usize, usize)>,
}

#[derive(Debug)]
enum Mode {
    Text,
    Reasoning,
    Section(Box<Open>),
}

/// Reads a model's answer in its family's format as it grows: its text, its reasoning, and its
/// calls (each call's start, then its arguments in pieces), each told as soon as it is known.
/// Text that may begin a marker is held until it is known not to. Feeding the answer in
/// pieces or whole tells the same, and [`Parser::finish`] agrees with what was told.
#[derive(Debug)]
pub struct Parser {
    format: Format,
    /// Tools were offered: calls are read.
    calls: bool,
    markers: Vec<(&'static str, Action)>,
    tools: Tools,
    mode: Mode,
    pending: String,
    answer: Answer,
    started: usize,
    id_base: String,
    /// Nothing but white space read yet: the answer may be a bare call.
    fresh: bool,
    /// Reasoning just ended: the white space that follows it is not the answer's.
    trim: bool,
}

impl Parser {
    /// A parser of an answer in `format`, with calls of `tools` (ids `{id_base}_{n}`);
    /// `in_reasoning` when the prompt left the model inside its reasoning. Without tools
    /// (`None`) no calls are read.
    pub fn new(format: Format, tools: Option<Tools>, id_base: &str, in_reasoning: bool) -> Self {
        let calls = tools.is_some();
        let markers = format
            .markers()
            .into_iter()
            // Without tools the text is the answer, whatever it looks like; harmony's channels
            // are its text's frame.
            .filter(|(_, action)| {
                calls || format.family.format().framed || !matches!(action, Action::Calls(_))
            })
            .collect();
        Parser {
            markers,
            format,
            calls,
            tools: tools.unwrap_or_default(),
            mode: if in_reasoning {
                Mode::Reasoning
            } else {
                Mode::Text
            },
            pending: String::new(),
            answer: Answer::default(),
            started: 0,
            id_base: id_base.to_owned(),
            fresh: true,
            trim: false,
        }
    }

    /// Adds a piece of the answer; what it makes known, in order.
    pub fn feed(&mut self, piece: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        self.pending.push_str(piece);
        loop {
            let moved = match self.mode {
                Mode::Text => self.read_text(&mut out),
                Mode::Reasoning => self.read_reasoning(&mut out),
                Mode::Section(_) => self.read_section(&mut out),
            };
            if !moved {
                return out;
            }
        }
    }

    fn show(&mut self, text: &str, out: &mut Vec<Piece>) {
        let text = if self.trim { text.trim_start() } else { text };
        if !text.is_empty() {
            self.trim = false;
            self.answer.text.push_str(text);
            out.push(Piece::Text(text.to_owned()));
        }
    }

    /// Text: shown up to the first marker; `true` when a marker changed the mode.
    fn read_text(&mut self, out: &mut Vec<Piece>) -> bool {
        if self.fresh && self.calls && self.format.bare_calls() {
            let start = self.pending.trim_start();
            if start.is_empty() || (start.len() < 3 && "```".starts_with(start)) {
                return false;
            }
            if start.starts_with(['{', '[']) || start.starts_with("```") {
                self.fresh = false;
                let text = std::mem::take(&mut self.pending);
                self.open(Kind::Bare, "", text);
                return true;
            }
        }
        let pending = std::mem::take(&mut self.pending);
        let first = self
            .markers
            .iter()
            .filter_map(|&(m, action)| pending.find(m).map(|at| (at, m, action)))
            .min_by_key(|(at, m, _)| (*at, usize::MAX - m.len()));
        let Some((at, marker, action)) = first else {
            let held = self
                .markers
                .iter()
                .map(|(m, _)| crate::call::partial_suffix(&pending, m))
                .max()
                .unwrap_or(0);
            let cut = pending.len() - held;
            if pending.get(..cut).is_some_and(|t| !t.trim().is_empty()) {
                self.fresh = false;
            }
            self.show(pending.get(..cut).unwrap_or(""), out);
            self.pending = pending.get(cut..).unwrap_or("").to_owned();
            return false;
        };
        self.show(pending.get(..at).unwrap_or(""), out);
        self.fresh = false;
        let rest = pending.get(at + marker.len()..).unwrap_or("").to_owned();
        match action {
            Action::Calls(kind) => self.open(kind, marker, rest),
            Action::Reasoning => {
                self.pending = rest;
                self.mode = Mode::Reasoning;
            }
            Action::Drop => {
                self.pending = rest;
                self.trim |= self.answer.text.is_empty();
            }
        }
        true
    }

    fn open(&mut self, kind: Kind, opened_by: &'static str, text: String) {
        self.mode = Mode::Section(Box::new(Open {
            kind,
            opened_by,
            buf: text,
            told: Vec::new(),
        }));
    }

    /// The close of the reasoning now read.
    fn close(&self) -> &'static str {
        self.format
            .reasoning_markers()
            .map_or("</think>", |(_, c)| c)
    }

    fn read_reasoning(&mut self, out: &mut Vec<Piece>) -> bool {
        let pending = std::mem::take(&mut self.pending);
        let close = self.close();
        let (said, rest, ended) = match pending.find(close) {
            Some(at) => (
                pending.get(..at).unwrap_or(""),
                pending.get(at + close.len()..).unwrap_or(""),
                true,
            ),
            None => {
                let cut = pending.len() - crate::call::partial_suffix(&pending, close);
                (
                    pending.get(..cut).unwrap_or(""),
                    pending.get(cut..).unwrap_or(""),
                    false,
                )
            }
        };
        if !said.is_empty() {
            self.answer.reasoning.push_str(said);
            out.push(Piece::Reasoning(said.to_owned()));
        }
        self.pending = rest.to_owned();
        if ended {
            self.mode = Mode::Text;
            self.trim = true;
        }
        ended
    }

    /// A section: its calls told as far as they are read; `true` when it ended.
    fn read_section(&mut self, out: &mut Vec<Piece>) -> bool {
        let Mode::Section(open) = &mut self.mode else {
            return false;
        };
        open.buf.push_str(&std::mem::take(&mut self.pending));
        let section = sections::read(open.kind, open.opened_by, &open.buf, &self.tools);
        let open = match std::mem::replace(&mut self.mode, Mode::Text) {
            Mode::Section(open) => open,
            other => {
                self.mode = other;
                return false;
            }
        };
        self.settle(open, section, out, false)
    }

    /// Tells what a reading of a section adds, and closes it when it ended (or `last`, at the
    /// answer's end); `true` when it is closed.
    fn settle(
        &mut self,
        mut open: Box<Open>,
        section: Section,
        out: &mut Vec<Piece>,
        last: bool,
    ) -> bool {
        if !section.bad {
            self.tell(&mut open, &section.calls, out);
        }
        let end = match section.end {
            Some(end) if !section.bad => end,
            _ if section.bad || last => {
                self.give_up(open, &section, out, last);
                return true;
            }
            _ => {
                self.mode = Mode::Section(open);
                return false;
            }
        };
        self.keep(&open, &section.calls);
        self.pending = open.buf.get(end..).unwrap_or("").to_owned();
        self.mode = match section.then {
            Then::Text => Mode::Text,
            Then::Reasoning => Mode::Reasoning,
        };
        true
    }

    /// A section that is not its syntax, or cut off by the answer's end: the calls it told are
    /// kept as far as their arguments read. With none told, one that is not its syntax is
    /// text, and so is a bare answer that is no call; a call its marker began, cut off before
    /// it was named, is dropped (the token limit ended it).
    fn give_up(&mut self, open: Box<Open>, section: &Section, out: &mut Vec<Piece>, last: bool) {
        if open.told.is_empty() {
            let kept = if last && !section.bad {
                self.keep(&open, &section.calls)
            } else {
                0
            };
            let cut_off = last && !section.bad && !open.opened_by.is_empty();
            if kept == 0 && !cut_off {
                self.show(open.opened_by, out);
                if last {
                    let buf = open.buf.clone();
                    self.show(&buf, out);
                } else {
                    self.pending = open.buf;
                }
            }
            return;
        }
        self.keep(&open, &section.calls);
    }

    /// Tells the calls of a section read so far: each one's start once named, then its
    /// arguments as they grow.
    fn tell(&mut self, open: &mut Open, calls: &[Partial], out: &mut Vec<Piece>) {
        for (i, call) in calls.iter().enumerate() {
            let Some(name) = &call.name else {
                break;
            };
            if i >= open.told.len() {
                let index = self.started;
                self.started += 1;
                out.push(Piece::CallStart {
                    index,
                    id: self.id(index),
                    name: name.clone(),
                });
                open.told.push((index, 0));
            }
            let Some((index, told)) = open.told.get_mut(i) else {
                continue;
            };
            if let Some(more) = call.args.get(*told..).filter(|m| !m.is_empty()) {
                out.push(Piece::CallArgs {
                    index: *index,
                    fragment: more.to_owned(),
                });
                *told = call.args.len();
            }
        }
    }

    /// Adds a section's calls to the answer: those told, and the others whose arguments read
    /// as an object (they take the next indices); how many.
    fn keep(&mut self, open: &Open, calls: &[Partial]) -> usize {
        let mut kept = 0;
        for (i, call) in calls.iter().enumerate() {
            let Some(name) = &call.name else {
                continue;
            };
            let told = open.told.get(i);
            let input = match serde_json::from_str::<Map<String, Value>>(&call.args) {
                Ok(input) => input,
                // A call told but cut off stays, as it was told: the arguments' check and
                // repair see it.
                Err(_) if told.is_some() => Map::new(),
                Err(_) => continue,
            };
            let index = match told {
                Some((index, _)) => *index,
                None => {
                    self.started += 1;
                    self.started - 1
                }
            };
            self.answer.calls.push(Found {
                id: self.id(index),
                name: name.clone(),
                input,
            });
            kept += 1;
        }
        kept
    }

    fn id(&self, index: usize) -> String {
        format!("{}_{index}", self.id_base)
    }

    /// The answer's text, reasoning and calls, with what was held at the end.
    pub fn finish(self) -> Answer {
        self.end().1
    }

    /// The answer is done: what was held is read, and the pieces it makes are told with the
    /// whole reading (the text, reasoning and calls the fed pieces add up to).
    pub fn end(mut self) -> (Vec<Piece>, Answer) {
        let mut pieces = Vec::new();
        loop {
            match std::mem::replace(&mut self.mode, Mode::Text) {
                Mode::Text => {
                    let pending = std::mem::take(&mut self.pending);
                    self.show(&pending, &mut pieces);
                    break;
                }
                Mode::Reasoning => {
                    let pending = std::mem::take(&mut self.pending);
                    self.answer.reasoning.push_str(&pending);
                    break;
                }
                Mode::Section(mut open) => {
                    open.buf.push_str(&std::mem::take(&mut self.pending));
                    let section = sections::read(open.kind, open.opened_by, &open.buf, &self.tools);
                    self.settle(open, section, &mut pieces, true);
                    // What follows a section that ended is read on.
                    let more = std::mem::take(&mut self.pending);
                    if more.is_empty() && matches!(self.mode, Mode::Text) {
                        break;
                    }
                    pieces.extend(self.feed(&more));
                    self.fresh = false;
                }
            }
        }
        (pieces, self.answer)
    }

    /// Reads a whole answer at once.
    pub fn read(mut self, text: &str) -> Answer {
        self.feed(text);
        self.finish()
    }
}

#[cfg(test)]
mod tests;
