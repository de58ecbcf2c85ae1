//! The neutral core: one model call and its answer, with no knowledge of product shapes or
//! protocol eras.
//!
//! Every shape parses into a [`Call`], and every API writes its objects from the answer the
//! service makes of it; fulfilment and the backends see only these types. Content is a list of
//! blocks, not a string, so richer conversations are a change to the shapes only.

use crate::contract::cursor::{Chain, Entry};
use crate::contract::persona::Persona;
use crate::contract::schema::Schema;
use crate::pyjson::{self, Style};
use serde_json::{Map, Value, json};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One piece of content in a turn or an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// Base64 image data with its MIME type and the SHA-256 of the decoded bytes (computed
    /// when the data is checked, so it is decoded once).
    Image {
        data: String,
        mime: String,
        sha256: [u8; 32],
    },
    /// Base64 audio data with its MIME type and the SHA-256 of the decoded bytes.
    Audio {
        data: String,
        mime: String,
        sha256: [u8; 32],
    },
    /// A tool call made by the model (assistant turns only).
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
    },
    /// The result of a tool call, sent back by the caller (user turns only).
    ToolResult {
        id: String,
        content: Vec<Block>,
        is_error: bool,
    },
    /// The model's reasoning before its answer (assistant turns only): apart from the answer's
    /// text, never part of what a schema validates.
    Reasoning(String),
}

impl Block {
    /// The block's kind as the MCP content type names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Block::Text(_) => "text",
            Block::Image { .. } => "image",
            Block::Audio { .. } => "audio",
            Block::ToolUse { .. } => "tool_use",
            Block::ToolResult { .. } => "tool_result",
            Block::Reasoning(_) => "reasoning",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub role: Role,
    pub blocks: Vec<Block>,
}

impl Turn {
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Turn {
            role,
            blocks: vec![Block::Text(text.into())],
        }
    }
}

/// A tool the model may call, validated (trimmed unique name, object-rooted schema), with its
/// compiled schema kept beside it.
#[derive(Debug, Clone)]
pub struct ToolDef {
    pub name: String,
    pub description: Option<String>,
    pub schema: Arc<Schema>,
}

impl ToolDef {
    /// The input schema as the caller gave it (always an object: [`Schema`] is object-rooted).
    pub fn input_schema(&self) -> &Map<String, Value> {
        self.schema.object()
    }
}

/// A tool as a request offers it to a model: what the model reads of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTool {
    pub name: String,
    pub description: Option<String>,
    /// The input schema, a JSON Schema object.
    pub schema: Map<String, Value>,
}

impl From<&ToolDef> for ModelTool {
    fn from(d: &ToolDef) -> Self {
        ModelTool {
            name: d.name.clone(),
            description: d.description.clone(),
            schema: d.input_schema().clone(),
        }
    }
}

impl PartialEq for ToolDef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.schema.raw() == other.schema.raw()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
}

impl ToolChoice {
    pub const NAMES: [&'static str; 3] = ["auto", "required", "none"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(ToolChoice::Auto),
            "required" => Some(ToolChoice::Required),
            "none" => Some(ToolChoice::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

/// One model call in neutral form: what the product asked for, minus the product's spelling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletionRequest {
    /// Alias the caller passed; reaches the host as a model hint.
    pub model: String,
    pub system: Option<String>,
    pub turns: Vec<Turn>,
    pub temperature: Option<f64>,
    pub max_tokens: u32,
    /// Sequences that end the completion; forwarded, and enforced by the server.
    pub stop: Vec<String>,
    pub tuning: Tuning,
    /// llama.cpp's samplers beyond top-k and top-p: penalties on repeated tokens, min-p,
    /// typical sampling and mirostat.
    pub samplers: Samplers,
    /// A legacy text completion (`POST /v1/completions`): the prompt continued as raw text
    /// where the backend can (the embedded model); `None` for a conversation.
    pub text: Option<TextPrompt>,
    /// What the caller asked of the model's reasoning (effort, budget, on or off).
    pub reasoning: Reasoning,
    /// Keyword arguments for the model's chat template (`chat_template_kwargs`, as llama-server
    /// and vLLM take them), merged into its context.
    pub template_kwargs: Map<String, Value>,
    /// The most tokens the call's prompt and answer may take together (Ollama's `num_ctx`),
    /// within the model's own context; `None`: the model's.
    pub context: Option<u32>,
    /// Log-probabilities of the answer's tokens, asked for with this many likeliest
    /// alternatives at each place (`None`: not asked; at most [`MAX_TOP_LOGPROBS`]).
    pub logprobs: Option<u8>,
}

/// The most alternatives a caller may ask at each place of the answer (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// One answer token's log-probability (natural log, over the model's whole vocabulary, before
/// any sampler), and the likeliest tokens at its place, as the APIs report them.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    /// The token's bytes (a token may hold part of a character).
    pub bytes: Vec<u8>,
    pub logprob: f64,
    /// The likeliest tokens at this place, most likely first.
    pub top: Vec<TopLogprob>,
}

/// One of the likeliest tokens at a place of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f64,
}

/// The chat template's arguments that transformers sets itself, from the request, which
/// [`Request::template_kwargs`] cannot replace.
pub const RESERVED_TEMPLATE_KWARGS: [&str; 4] =
    ["messages", "tools", "documents", "add_generation_prompt"];

/// What the caller asked of the model's reasoning, from each API's own controls (OpenAI
/// `reasoning_effort` and `reasoning.effort`, Anthropic `thinking`, Gemini `thinkingConfig`).
/// All `None`: the model's own default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reasoning {
    /// `Some(false)`: no reasoning (Anthropic `disabled`, effort `none`, a budget of 0);
    /// `Some(true)`: reasoning asked for.
    pub enabled: Option<bool>,
    pub effort: Option<Effort>,
    /// The most tokens the reasoning may take; the answer follows when it is reached.
    pub budget: Option<u32>,
    /// `Some(false)`: the reasoning is not returned (Gemini `includeThoughts` unset or false).
    pub shown: Option<bool>,
}

/// How hard the model is asked to think, as the OpenAI APIs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

impl Effort {
    pub const NAMES: [&'static str; 4] = ["minimal", "low", "medium", "high"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "minimal" => Some(Effort::Minimal),
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

/// A legacy text completion's prompt. The embedded model continues it as raw text, without
/// its chat template; other backends read it as the one user message of the request's turns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextPrompt {
    pub prompt: String,
    /// Fill-in-the-middle: the text the completion leads into, after the prompt (taken by a
    /// model whose vocabulary has fill-in-the-middle tokens).
    pub suffix: Option<String>,
    /// The answer's text is shown after the prompt (`echo`): the encoder's concern, not a
    /// backend's.
    pub echo: bool,
}

/// Sampling parameters beyond the temperature, typed. A backend that takes them uses them (the
/// local model all three, a provider `top_p` and `seed`); MCP sampling has no fields for them,
/// so they reach the host in the request's `metadata`, as the caller spelled them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tuning {
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    pub top_p: Option<f64>,
    /// Keep only this many most likely tokens.
    pub top_k: Option<u32>,
    /// Makes a sampled answer repeatable (negative: a random draw).
    pub seed: Option<i64>,
}

/// llama.cpp's samplers beyond the temperature, top-k and top-p, as llama-server and Ollama
/// take them (all `None`: none of them). The embedded model applies them all; a provider is
/// sent the two OpenAI's API has (`presence_penalty`, `frequency_penalty`) and the result says
/// the others were not sent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Samplers {
    /// A token among the last `repeat_last_n` has its logit divided by this (multiplied when
    /// negative); 1 is no penalty.
    pub repeat_penalty: Option<f64>,
    /// How many of the last tokens (the prompt's, then the answer's) the penalties look at:
    /// 0 none, -1 the whole context, 64 when not given.
    pub repeat_last_n: Option<i32>,
    /// Taken from the logit of a token seen among the last `repeat_last_n`.
    pub presence_penalty: Option<f64>,
    /// Taken from the logit of a token as many times as it was seen among the last
    /// `repeat_last_n`.
    pub frequency_penalty: Option<f64>,
    /// Keep only the tokens at least this fraction as likely as the most likely one.
    pub min_p: Option<f64>,
    /// Locally typical sampling: keep the tokens whose surprise is closest to the expected
    /// one, up to this probability mass (1: off).
    pub typical_p: Option<f64>,
    /// Mirostat (1 or 2; 0: off) draws the token itself, aiming at a surprise of
    /// `mirostat_tau`, learning at `mirostat_eta`: top-k, top-p, min-p and typical sampling
    /// are not used then.
    pub mirostat: Option<u8>,
    pub mirostat_tau: Option<f64>,
    pub mirostat_eta: Option<f64>,
}

impl Samplers {
    /// The two OpenAI's API has (the others are llama.cpp's and Ollama's).
    pub const OPENAI: [&'static str; 2] = ["presence_penalty", "frequency_penalty"];

    /// The samplers asked for, each by its llama.cpp (and Ollama) name, with its value.
    pub fn named(&self) -> Vec<(&'static str, Value)> {
        let number = |name: &'static str, n: Option<f64>| n.map(|n| (name, json!(n)));
        [
            number("repeat_penalty", self.repeat_penalty),
            self.repeat_last_n.map(|n| ("repeat_last_n", json!(n))),
            number("presence_penalty", self.presence_penalty),
            number("frequency_penalty", self.frequency_penalty),
            number("min_p", self.min_p),
            number("typical_p", self.typical_p),
            self.mirostat.map(|m| ("mirostat", json!(m))),
            number("mirostat_tau", self.mirostat_tau),
            number("mirostat_eta", self.mirostat_eta),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Why the completion ended, in neutral form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    EndTurn,
    MaxTokens,
    /// A stop sequence ended it; `None` when the host says so without saying which.
    StopSequence(Option<String>),
    ToolUse,
}

/// The host's answer in neutral form.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub blocks: Vec<Block>,
    /// The model the host says it used.
    pub model: String,
    pub finish: Finish,
    /// Token counts the backend measured (a local model or a provider); sampling reports none.
    pub usage: Option<Usage>,
    /// What the backend could not honour as asked, for the result (e.g. a local model whose
    /// tool-call format is not recognised).
    pub warnings: Vec<String>,
    /// Each answer token's log-probability, in order, when they were asked for
    /// ([`CompletionRequest::logprobs`]) and the backend reports them; `None` otherwise.
    pub logprobs: Option<Vec<TokenLogprob>>,
}

impl Completion {
    #[cfg(test)]
    pub fn text_answer(text: &str) -> Self {
        Completion {
            blocks: vec![Block::Text(text.to_owned())],
            model: "m".into(),
            finish: Finish::EndTurn,
            usage: None,
            warnings: Vec::new(),
            logprobs: None,
        }
    }

    /// The text blocks joined with `"\n"`, as the original joins them.
    pub fn text(&self) -> String {
        join_text(&self.blocks, "\n")
    }

    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Map<String, Value>)> {
        self.blocks.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }

    /// Cuts the text at the first of `stop` and drops what follows, as a host that honoured the
    /// stop sequence would have; the finish reason then names the sequence.
    pub fn enforce_stop(&mut self, stop: &[String]) {
        if stop.is_empty() {
            return;
        }
        let mut cut_at = None;
        for (i, block) in self.blocks.iter().enumerate() {
            if let Block::Text(t) = block
                && let Some((pos, seq)) = first_stop(t, stop)
            {
                cut_at = Some((i, pos, seq.to_owned()));
                break;
            }
        }
        let Some((i, pos, seq)) = cut_at else {
            return;
        };
        if let Some(Block::Text(t)) = self.blocks.get_mut(i) {
            t.truncate(pos);
        }
        let mut index = 0;
        self.blocks.retain(|b| {
            let keep = index <= i || !matches!(b, Block::Text(_));
            index += 1;
            keep
        });
        self.finish = Finish::StopSequence(Some(seq));
    }

    /// The model's reasoning before its answer, when it reasoned.
    pub fn reasoning(&self) -> Option<String> {
        let texts: Vec<&str> = self
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Reasoning(r) => Some(r.as_str()),
                _ => None,
            })
            .collect();
        let joined = texts.concat();
        (!joined.is_empty()).then_some(joined)
    }

    /// Image and audio blocks of the answer, returned beside the text.
    pub fn media(&self) -> Vec<Block> {
        self.blocks
            .iter()
            .filter(|b| matches!(b, Block::Image { .. } | Block::Audio { .. }))
            .cloned()
            .collect()
    }
}

/// Characters of text in `blocks`.
pub fn text_chars(blocks: &[Block]) -> usize {
    blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => t.chars().count(),
            _ => 0,
        })
        .sum()
}

/// The text blocks of `blocks` joined with `sep` (other blocks are skipped).
pub fn join_text(blocks: &[Block], sep: &str) -> String {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    texts.join(sep)
}

/// What kind of answer the call wants.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Plain text.
    Text,
    /// JSON satisfying the schema.
    Structured(Arc<Schema>),
    /// Text or calls to the caller's tools.
    Tools {
        defs: Vec<ToolDef>,
        choice: ToolChoice,
    },
}

/// A parsed and checked completion call: the neutral request plus the contract around it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool that was called (binds sealed state and cursors to it).
    pub tool: &'static str,
    pub request: CompletionRequest,
    pub mode: Mode,
    pub persona: Option<Persona>,
    pub chain: Chain,
    /// The conversation as the cursor commits to it.
    pub transcript: Vec<Entry>,
    /// How many times a rejected structured answer is sent back for repair.
    pub max_retries: u8,
    /// Describe tools in the prompt when the backend cannot take them (default on).
    pub emulate_tools: bool,
    /// Parameters forwarded as request metadata.
    pub metadata: Map<String, Value>,
    /// The caller asked for a stream (`stream: true`); the result is whole, and the warning
    /// says how this call's backend can be followed instead.
    pub stream: bool,
    /// What the server did not honour as asked, reported in the result.
    pub warnings: Vec<String>,
}

/// The answer, interpreted for the call's mode.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Text(String),
    /// Validated structured output.
    Json(Value),
    /// The model called tools (never executed here).
    ToolCalls {
        text: String,
        calls: Vec<ToolCall>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Map<String, Value>,
}

impl ToolCall {
    /// The call's arguments as a JSON string with sorted keys, as OpenAI-style APIs carry them.
    pub fn arguments_json(&self) -> String {
        pyjson::dumps_object(&self.input, Style::SORTED)
    }
}

impl Answer {
    /// The completion as the text tools return it and as cursors commit to it.
    pub fn completion_text(&self) -> String {
        match self {
            Answer::Text(t) => t.clone(),
            Answer::Json(v) => pyjson::dumps(v, Style::SORTED),
            Answer::ToolCalls { text, calls } => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| json!({"id": c.id, "input": c.input, "name": c.name}))
                    .collect();
                pyjson::dumps(&json!({"text": text, "tool_calls": calls}), Style::SORTED)
            }
        }
    }
}

/// Token counts. Sampling reports none, so there they are estimates (about four characters a
/// token), marked `"estimated": true` where they are rendered; a local model or a provider
/// counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt: usize,
    pub completion: usize,
    pub estimated: bool,
    /// Prompt tokens read from a cache rather than processed again (the local model's prefix
    /// cache, a provider's prompt cache), when the backend says.
    pub cached: Option<usize>,
}

impl Usage {
    pub fn total(self) -> usize {
        self.prompt + self.completion
    }
}

/// About how many tokens `chars` characters are (four a token).
pub fn estimate_tokens(chars: usize) -> usize {
    chars.div_ceil(4)
}

impl Call {
    /// The prompt's tokens, estimated from its characters (the usage reported when a backend
    /// does not count).
    pub fn prompt_tokens_estimate(&self) -> usize {
        let req = &self.request;
        let text: usize = req.turns.iter().map(|t| text_chars(&t.blocks)).sum();
        let system = req.system.as_ref().map_or(0, |s| s.chars().count());
        // The tools offered are read too: their names, descriptions and schemas.
        let tools: usize = match &self.mode {
            Mode::Tools { defs, .. } => defs
                .iter()
                .map(|d| {
                    d.name.len()
                        + d.description.as_ref().map_or(0, |s| s.chars().count())
                        + serde_json::to_string(d.input_schema()).map_or(0, |s| s.len())
                })
                .sum(),
            _ => 0,
        };
        estimate_tokens(text + system + tools)
    }
}

/// Where the earliest of `stops` begins in `text`, and which it is (the first listed when two
/// begin at the same place); an empty one never matches. One pass over `text` for all of them.
pub fn first_stop<'a>(text: &str, stops: &'a [String]) -> Option<(usize, &'a str)> {
    let matcher = Stops::new(stops);
    let (at, index) = matcher.find(text)?;
    let seq = matcher.index.get(index).and_then(|i| stops.get(*i))?;
    Some((at, seq.as_str()))
}

/// How many bytes at the end of `text` begin `needle` without being all of it: the most that
/// more text could still turn into `needle` (0 when no end of `text` begins it). Linear in
/// `needle`'s length, however long `text` is.
pub fn partial_suffix(text: &str, needle: &str) -> usize {
    let needle = needle.as_bytes();
    held_by(text.as_bytes(), needle, &failure(needle))
}

/// The KMP failure function of `needle`: for each prefix `needle[..=i]`, the length of its
/// longest proper prefix that is also its suffix.
fn failure(needle: &[u8]) -> Vec<usize> {
    let mut fail = vec![0; needle.len()];
    let mut k = 0;
    for (i, &b) in needle.iter().enumerate().skip(1) {
        while k > 0 && needle.get(k) != Some(&b) {
            k = fail.get(k - 1).copied().unwrap_or(0);
        }
        if needle.get(k) == Some(&b) {
            k += 1;
        }
        if let Some(f) = fail.get_mut(i) {
            *f = k;
        }
    }
    fail
}

/// The longest proper prefix of `needle` that ends `text`, found by running the KMP automaton
/// over the last `needle.len() - 1` bytes of `text` (no longer suffix can be a proper prefix).
/// Over valid UTF-8 the result is a character boundary of `text`: the suffix starts where
/// `needle`'s first character does.
fn held_by(text: &[u8], needle: &[u8], fail: &[usize]) -> usize {
    let Some(most) = needle.len().checked_sub(1) else {
        return 0;
    };
    let tail = text
        .get(text.len().saturating_sub(most)..)
        .unwrap_or_default();
    let mut k = 0;
    for &b in tail {
        while k > 0 && needle.get(k) != Some(&b) {
            k = fail.get(k - 1).copied().unwrap_or(0);
        }
        if needle.get(k) == Some(&b) {
            k += 1;
        }
    }
    k
}

/// A call's stop sequences, ready to be looked for, in a whole text or in one that arrives in
/// pieces. In a whole text one Aho–Corasick automaton finds the earliest of them in one pass.
/// In a text that grows ([`Stops::feed`]), each sequence keeps its KMP state (the longest
/// prefix of it that ends the text so far), so a piece costs its own length per sequence,
/// however long the sequences are, and how much of the text could still become one is known
/// without looking back ([`Stops::held`]).
#[derive(Debug, Clone, Default)]
pub struct Stops {
    /// The non-empty sequences, in the caller's order.
    seqs: Vec<String>,
    /// Where each of `seqs` is in the list the matcher was made from.
    index: Vec<usize>,
    /// Leftmost-first: the earliest start, and the first listed of those starting there.
    automaton: Option<aho_corasick::AhoCorasick>,
    /// Each sequence's KMP failure function.
    fail: Vec<Vec<usize>>,
    /// Each sequence's KMP state: how many of its bytes end the text fed so far.
    states: Vec<usize>,
}

impl Stops {
    pub fn new(stops: &[String]) -> Self {
        let (index, seqs): (Vec<usize>, Vec<String>) = stops
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
            .map(|(i, s)| (i, s.clone()))
            .unzip();
        let automaton = if seqs.is_empty() {
            None
        } else {
            // The NFA, not a DFA: its construction is linear in the sequences' length (a DFA's
            // is quadratic for one like `aaa…ab`). A build error (an automaton too large)
            // leaves the plain search per sequence, linear too; the limits keep it away.
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                .kind(Some(aho_corasick::AhoCorasickKind::NoncontiguousNFA))
                .build(&seqs)
                .ok()
        };
        Stops {
            fail: seqs.iter().map(|s| failure(s.as_bytes())).collect(),
            states: vec![0; seqs.len()],
            seqs,
            index,
            automaton,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Where the earliest sequence begins in `text`, and its place among the non-empty ones.
    fn find(&self, text: &str) -> Option<(usize, usize)> {
        match &self.automaton {
            Some(ac) => ac.find(text).map(|m| (m.start(), m.pattern().as_usize())),
            None => self
                .seqs
                .iter()
                .enumerate()
                .filter_map(|(i, s)| text.find(s.as_str()).map(|at| (at, i)))
                .min_by_key(|(at, _)| *at),
        }
    }

    /// Where the earliest sequence begins in `text`, and which it is.
    pub fn first<'a>(&'a self, text: &str) -> Option<(usize, &'a str)> {
        let (at, i) = self.find(text)?;
        Some((at, self.seqs.get(i)?.as_str()))
    }

    /// Adds `new` to the text fed so far. When a sequence is now complete, returns the
    /// earliest (the first listed of those starting at the same place): how many bytes before
    /// the end of the text, `new` included, it begins, and which it is. Costs `new`'s length
    /// per sequence (amortized), whatever their lengths.
    pub fn feed(&mut self, new: &str) -> Option<(usize, &str)> {
        let mut found: Option<(usize, usize)> = None;
        for (i, ((seq, fail), state)) in self
            .seqs
            .iter()
            .zip(&self.fail)
            .zip(self.states.iter_mut())
            .enumerate()
        {
            let needle = seq.as_bytes();
            let mut k = *state;
            let mut ended = false;
            for (j, &b) in new.as_bytes().iter().enumerate() {
                while k > 0 && needle.get(k) != Some(&b) {
                    k = fail.get(k - 1).copied().unwrap_or(0);
                }
                if needle.get(k) == Some(&b) {
                    k += 1;
                }
                if k == needle.len() {
                    // The first end of this sequence is its earliest start; the text after
                    // it is `new[j + 1..]`.
                    let back = new.len() - (j + 1) + needle.len();
                    if !ended && found.is_none_or(|(most, _)| back > most) {
                        found = Some((back, i));
                    }
                    ended = true;
                    k = fail.get(k - 1).copied().unwrap_or(0);
                }
            }
            *state = k;
        }
        let (back, i) = found?;
        Some((back, self.seqs.get(i)?.as_str()))
    }

    /// How many bytes at the end of the text fed so far could still become a sequence: the
    /// longest proper prefix of any of them that ends it (a character boundary of the text).
    pub fn held(&self) -> usize {
        self.states.iter().copied().max().unwrap_or(0)
    }
}

/// A fresh id: `prefix` and 32 random lowercase hex digits.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// Where a message of blocks enters a conversation's cursor.
impl Entry {
    /// The entry for a message of blocks: its text when it is one text block, else a list of
    /// parts `{"type": "text", "text"}`, `{"type": "image" | "audio", "mime_type", "sha256"}`
    /// (the SHA-256 of the decoded bytes, so media is committed to without being copied),
    /// `{"type": "tool_use", "id", "name", "input"}` and `{"type": "tool_result",
    /// "tool_use_id", "is_error", "content": [parts]}`.
    pub fn from_blocks(role: &str, blocks: &[Block]) -> Self {
        let content = match blocks {
            [Block::Text(t)] => Value::String(t.clone()),
            [] => Value::String(String::new()),
            blocks => Value::Array(blocks.iter().map(part).collect()),
        };
        Entry {
            role: role.to_owned(),
            content,
        }
    }
}

fn part(block: &Block) -> Value {
    match block {
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::Image { mime, sha256, .. } => {
            json!({"type": "image", "mime_type": mime, "sha256": hex::encode(sha256)})
        }
        Block::Audio { mime, sha256, .. } => {
            json!({"type": "audio", "mime_type": mime, "sha256": hex::encode(sha256)})
        }
        Block::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            id,
            content,
            is_error,
        } => json!({"type": "tool_result", "tool_use_id": id, "is_error": is_error,
                    "content": content.iter().map(part).collect::<Vec<_>>()}),
        Block::Reasoning(text) => json!({"type": "reasoning", "text": text}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_envelope_is_sorted_python_json() {
        let mut input = Map::new();
        input.insert("city".into(), json!("Zürich"));
        let a = Answer::ToolCalls {
            text: "".into(),
            calls: vec![ToolCall {
                id: "t1".into(),
                name: "weather".into(),
                input,
            }],
        };
        assert_eq!(
            a.completion_text(),
            r#"{"text": "", "tool_calls": [{"id": "t1", "input": {"city": "Z\u00fcrich"}, "name": "weather"}]}"#
        );
    }

    #[test]
    fn stop_sequences_cut_the_text_at_the_first_one() {
        let mut c = Completion::text_answer("one\ntwo END three STOP");
        c.enforce_stop(&["STOP".into(), "END".into()]);
        assert_eq!(c.text(), "one\ntwo ");
        assert_eq!(c.finish, Finish::StopSequence(Some("END".into())));
        let mut c = Completion::text_answer("no stop here");
        c.enforce_stop(&["STOP".into()]);
        assert_eq!(c.text(), "no stop here");
        assert_eq!(c.finish, Finish::EndTurn);
        let mut c = Completion {
            blocks: vec![Block::Text("a STOP b".into()), Block::Text("later".into())],
            model: "m".into(),
            finish: Finish::EndTurn,
            usage: None,
            warnings: Vec::new(),
            logprobs: None,
        };
        c.enforce_stop(&["STOP".into()]);
        assert_eq!(c.text(), "a ");
    }

    /// The matchers as they were: a search per sequence, and every prefix length tried.
    fn naive_first<'a>(text: &str, stops: &'a [String]) -> Option<(usize, &'a str)> {
        stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str())))
            .min_by_key(|(at, _)| *at)
    }

    fn naive_partial(text: &str, needle: &str) -> usize {
        (1..needle.len())
            .rev()
            .find(|n| needle.get(..*n).is_some_and(|p| text.ends_with(p)))
            .unwrap_or(0)
    }

    /// Short strings over a few characters (one of them two bytes, one four), so that matches,
    /// overlaps and prefixes are common.
    fn small() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::collection::vec(proptest::sample::select(vec!['a', 'b', 'é', '🦀']), 0..12)
            .prop_map(|cs| cs.into_iter().collect())
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_linear_matchers_agree_with_the_naive_ones(
            text in small(),
            stops in proptest::collection::vec(small(), 0..5),
        ) {
            prop_assert_eq!(first_stop(&text, &stops), naive_first(&text, &stops));
            let matcher = Stops::new(&stops);
            prop_assert_eq!(matcher.first(&text), naive_first(&text, &stops));
            for s in &stops {
                prop_assert_eq!(partial_suffix(&text, s), naive_partial(&text, s));
            }
        }

        #[test]
        fn a_text_fed_in_pieces_finds_what_the_whole_text_would(
            pieces in proptest::collection::vec(small(), 0..6),
            stops in proptest::collection::vec(small(), 0..5),
        ) {
            let mut matcher = Stops::new(&stops);
            let mut text = String::new();
            for piece in &pieces {
                text.push_str(piece);
                let found = matcher.feed(piece).map(|(back, s)| (text.len() - back, s));
                prop_assert_eq!(found, naive_first(&text, &stops));
                if found.is_some() {
                    break;
                }
                let held = matcher.held();
                let naive = stops.iter().map(|s| naive_partial(&text, s)).max().unwrap_or(0);
                prop_assert_eq!(held, naive);
                prop_assert!(text.is_char_boundary(text.len() - held));
            }
        }
    }

    #[test]
    fn a_long_stop_sequence_is_matched_in_linear_time() {
        // The review's case: a sequence of a million characters against as many `a`s, which
        // took K²/2 comparisons (minutes); this is a few million steps.
        let needle = format!("{}b", "a".repeat(1_000_000));
        let text = "a".repeat(900_000);
        assert_eq!(partial_suffix(&text, &needle), 900_000);
        let mut stops = Stops::new(&[needle]);
        assert_eq!(stops.first(&text), None);
        for piece in text.as_bytes().chunks(1000) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert_eq!(stops.feed(piece), None);
        }
        assert_eq!(stops.held(), 900_000);
        assert_eq!(stops.feed(&"a".repeat(100_000)), None);
        let (back, seq) = stops.feed("b").unwrap();
        assert_eq!((back, seq.len()), (1_000_001, 1_000_001));
    }
}
