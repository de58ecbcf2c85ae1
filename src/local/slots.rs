//! The slots: several calls share one llama.cpp context, each in its own sequence, and every
//! step feeds one batch holding the next token of each answer being written and a chunk of
//! each prompt being read. A short call is not stuck behind a long prompt, and a cancelled
//! call stops within one step. A slot keeps its tokens (and their cache) after a call: the
//! next call whose prompt starts with them processes only the rest.

use super::LocalError;
use super::engine::{EngineError, Model, Output, Params, Text};
use super::prompt_cache::DiskCache;
use super::speculate::{self, Speculative};
use crate::call::{Finish, Stops, TokenLogprob};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Told, as an answer is written, how many tokens it has and the text they added.
/// What reads an answer as it is made: its text, none of which can still become a stop
/// sequence, with the answer's length in tokens so far; once the answer is done it says what it
/// read (`None`: the text is the answer as it is).
pub trait Reader {
    fn read(&mut self, tokens: usize, text: &str);
    fn end(self: Box<Self>, tokens: usize) -> Option<super::format::Answer>;
    /// Told each answer token's log-probability, when they were asked for, before its text.
    fn logprob(&mut self, _logprob: &TokenLogprob) {}
}

/// One call, ready for a slot.
pub struct Call {
    pub prompt: Vec<LlamaToken>,
    pub params: Params,
    /// Tokens the answer may have (the limit asked for, cut to what the context leaves).
    pub budget: usize,
    pub sampler: LlamaSampler,
    pub reader: Box<dyn Reader>,
    /// Control tokens shown in the answer's text (the markers its format reads).
    pub shown: Vec<LlamaToken>,
    /// The prompt left the model inside its reasoning.
    pub in_reasoning: bool,
    /// A limit on the reasoning's tokens.
    pub think: Option<Think>,
    /// A grammar that starts when its trigger is written.
    pub lazy: Option<Lazy>,
    /// Where the answer goes; closed when the call is cancelled, which is looked at before
    /// every step: a cancelled call stops and frees its slot.
    pub reply: tokio::sync::oneshot::Sender<Result<Output, LocalError>>,
}

/// What the prefix cache has done, for `list_models` and the logs; what the slots hold, for the
/// metrics.
#[derive(Debug, Default)]
pub struct Counters {
    pub calls: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens not processed because a slot held them from an earlier call.
    pub reused_tokens: AtomicU64,
    /// Slots answering a call, as of the worker's last step.
    pub busy: AtomicUsize,
    /// Bytes of the loaded model's weights.
    pub memory_bytes: AtomicU64,
    /// Tokens the busy slots' caches hold, as of the worker's last step (a free slot's cache is
    /// kept only for a later prompt that shares it, and gives way to any call).
    pub kv_tokens: AtomicUsize,
    /// Cells of the context's cache: each slot's size times the slots.
    pub kv_cells: AtomicUsize,
    /// Tokens drafted (`--speculative`), and those of them the model's samples kept.
    pub drafted: AtomicU64,
    pub accepted: AtomicU64,
}

/// A limit on the reasoning's tokens: once it is reached, the engine writes the family's
/// close of reasoning itself (as llama.cpp's `--reasoning-budget` does) and the answer follows.
pub struct Think {
    left: usize,
    inside: bool,
    open: Stops,
    close: Stops,
    /// What closes reasoning cut short, as tokens; empty once written.
    end: Vec<LlamaToken>,
}

impl Think {
    /// A limit of `budget` tokens on reasoning between `open` and `close`; `inside` when the
    /// prompt opened it; `end` the tokens that close it.
    pub fn new(budget: usize, inside: bool, open: &str, close: &str, end: Vec<LlamaToken>) -> Self {
        Think {
            left: budget,
            inside,
            open: Stops::new(&[open.to_owned()]),
            close: Stops::new(&[close.to_owned()]),
            end,
        }
    }

    /// The tokens to write now, when the reasoning is open and its budget spent.
    fn due(&mut self) -> Option<Vec<LlamaToken>> {
        (self.inside && self.left == 0 && !self.end.is_empty()).then(|| {
            self.inside = false;
            std::mem::take(&mut self.end)
        })
    }

    /// Follows the answer: `new` is one token's text.
    fn after(&mut self, new: &str) {
        if self.inside {
            if self.close.feed(new).is_some() {
                self.inside = false;
                self.end.clear();
            } else {
                self.left = self.left.saturating_sub(1);
            }
        } else if !self.end.is_empty() && self.open.feed(new).is_some() {
            self.inside = true;
        }
    }
}

/// A grammar that holds the answer from the moment its trigger is written (calls the model
/// may make): before, the answer is free.
pub struct Lazy {
    trigger: Stops,
    /// A trigger that counts only at the answer's start (blanks, and a code fence opening,
    /// before it aside).
    bare: Option<Stops>,
    grammar: Option<TopLevelGrammar>,
}

impl Lazy {
    pub fn new(trigger: &str, bare: Option<&str>, grammar: TopLevelGrammar) -> Self {
        Lazy {
            trigger: Stops::new(&[trigger.to_owned()]),
            bare: bare.map(|b| Stops::new(&[b.to_owned()])),
            grammar: Some(grammar),
        }
    }

    /// How many bytes back the trigger just written begins, when `new` (the newest text of
    /// `text`) wrote one.
    fn fired(&mut self, new: &str, text: &str) -> Option<usize> {
        let tagged = self.trigger.feed(new).map(|(back, _)| back);
        let bare = self.bare.as_mut().and_then(|bare| {
            let (back, _) = bare.feed(new)?;
            let before = text.get(..text.len().saturating_sub(back))?.trim();
            // Small models often open a code fence before the object.
            let before = match before.strip_prefix("```") {
                Some(fence) => fence.trim_start_matches("json").trim(),
                None => before,
            };
            before.is_empty().then_some(back)
        });
        tagged.or(bare)
    }
}

struct Active {
    call: Call,
    /// When the call took its slot, and when its first token was sampled.
    admitted: std::time::Instant,
    answering: Option<std::time::Instant>,
    /// Tokens the engine writes next instead of sampling (the close of reasoning).
    forced: VecDeque<LlamaToken>,
    /// Tokens drafted after `next` in this step, in the cache until a sample is not them.
    drafts: VecDeque<LlamaToken>,
    /// Prompt tokens in the cache.
    fed: usize,
    reused: usize,
    /// The token just sampled, not yet in the cache.
    next: Option<LlamaToken>,
    generated: usize,
    text: Text,
    /// Each answer token's log-probability so far, when they were asked for.
    logprobs: Vec<TokenLogprob>,
}

struct Slot {
    seq: i32,
    /// The tokens in this sequence's cache, from position 0.
    cached: Vec<LlamaToken>,
    /// When the slot last took a call (a count of calls; 0: never): among slots sharing as
    /// much with a prompt, the one used longest ago takes it, so a cache just written (an
    /// agent's conversation, between its turns) outlives an older one.
    used: u64,
    active: Option<Active>,
    /// Of `cached`, the tokens of the last prompt answered here (an answer's tokens follow).
    prompt: usize,
    /// Of `cached`, the tokens a file of the prompt cache on disk holds already.
    saved: usize,
}

pub struct Slots<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    slots: Vec<Slot>,
    batch: LlamaBatch<'static>,
    counters: Arc<Counters>,
    /// Tokens each slot's sequence holds now: grown on demand up to the model's context.
    size: usize,
    /// Seconds a token of the last big steps took, which sizes the next (see
    /// [`super::engine::STEP_SECONDS`]).
    per_token: Option<f64>,
    /// Calls admitted so far (each slot's `used` is one of these).
    admitted: u64,
    /// The prompt cache on disk, when there is one.
    disk: Option<DiskCache>,
    /// How answers draft tokens, if they do.
    speculative: Speculative,
}

/// A prompt read back from the disk must give a slot at least this many tokens more than its
/// own cache has (fewer are read faster by the model).
const RESTORE_AT_LEAST: usize = 256;
/// A call that read at least this many prompt tokens not on disk yet has its prompt saved.
const SAVE_AFTER: usize = 1024;

impl<'m> Slots<'m> {
    pub fn new(
        model: &'m Model,
        counters: Arc<Counters>,
        disk: Option<DiskCache>,
    ) -> Result<Slots<'m>, EngineError> {
        let size = super::engine::FIRST_CONTEXT.min(model.info().context);
        let ctx = model.context(size)?;
        let n = model.info().slots;
        let slots = (0..n)
            .map(|i| Slot {
                seq: i32::try_from(i).unwrap_or(0),
                cached: Vec::new(),
                used: 0,
                active: None,
                prompt: 0,
                saved: 0,
            })
            .collect();
        let slots = Slots {
            model,
            ctx,
            slots,
            batch: LlamaBatch::new(model.info().step, i32::try_from(n).unwrap_or(1)),
            counters,
            size,
            per_token: None,
            admitted: 0,
            disk,
            speculative: Speculative::None,
        };
        slots.publish();
        Ok(slots)
    }

    /// `self`, its answers drafting tokens as `speculative` says (when the model's cache can
    /// take drafts back).
    pub fn speculating(mut self, speculative: Speculative) -> Self {
        if self.model.cache_cuts() {
            self.speculative = speculative;
        }
        self
    }

    /// Tells the counters what the busy slots' caches hold now, and how much the slots could.
    pub fn publish(&self) {
        let busy = self.slots.iter().filter(|s| s.active.is_some());
        let tokens = busy.map(|s| s.cached.len()).sum();
        let cells = self.size.saturating_mul(self.slots.len());
        self.counters.kv_tokens.store(tokens, Ordering::Relaxed);
        self.counters.kv_cells.store(cells, Ordering::Relaxed);
    }

    /// Tokens each slot holds now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Grows the context, when every slot is idle, so that each slot holds `wanted` tokens:
    /// to the next power of two, at least twice today's size, at most the model's context.
    /// Without the memory for that, halves are tried down to `least` tokens. Each slot's cache
    /// is carried into the grown context (a conversation that outgrows the context keeps its
    /// prefix); one that cannot be is dropped. Returns the size each slot has now.
    pub fn grow(&mut self, wanted: usize, least: usize) -> Result<usize, EngineError> {
        let most = self.model.info().context;
        if wanted <= self.size || !self.is_idle() {
            return Ok(self.size);
        }
        let mut size = wanted
            .next_power_of_two()
            .max(self.size.saturating_mul(2))
            .min(most);
        // At the model's context already: nothing to grow (making it again would only cost).
        if size <= self.size {
            return Ok(self.size);
        }
        loop {
            let started = std::time::Instant::now();
            match self.model.context(size) {
                Ok(ctx) => {
                    self.carry(ctx);
                    tracing::info!(
                        from = self.size,
                        to = size,
                        slots = self.slots.len(),
                        seconds = started.elapsed().as_secs_f64(),
                        "local context grown"
                    );
                    self.size = size;
                    return Ok(size);
                }
                Err(e) if size / 2 >= least && size / 2 > self.size => {
                    tracing::warn!(tokens = size, problem = %e, "cannot grow the local context this far");
                    size /= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes `ctx` the slots' context, each slot's cache copied into it from the old one.
    fn carry(&mut self, mut ctx: LlamaContext<'m>) {
        let flags = llama_cpp_2::context::session::LlamaStateSeqFlags::empty();
        for slot in &mut self.slots {
            if slot.cached.is_empty() {
                continue;
            }
            let carried = self
                .ctx
                .state_seq_get(slot.seq, flags)
                .and_then(|state| ctx.state_seq_set(&state, slot.seq));
            if let Err(e) = carried {
                tracing::debug!(slot = slot.seq, problem = %e, "a slot's cache was not carried");
                let _ = ctx.clear_kv_cache_seq(Some(slot.seq as u32), None, None);
                slot.cached.clear();
            }
        }
        self.ctx = ctx;
    }

    /// Whether a step runs on the CPU (see [`Model::on_cpu`]), and so takes the pool's turn.
    pub fn on_cpu(&self) -> bool {
        self.model.on_cpu()
    }

    pub fn is_idle(&self) -> bool {
        self.slots.iter().all(|s| s.active.is_none())
    }

    pub fn has_free_slot(&self) -> bool {
        self.slots.iter().any(|s| s.active.is_none())
    }

    /// Slots answering a call.
    pub fn busy(&self) -> usize {
        self.slots.iter().filter(|s| s.active.is_some()).count()
    }

    /// Puts a call in the free slot whose cache shares the longest prefix with its prompt, of
    /// those the one used longest ago (callers look for a free slot first; without one the
    /// call is refused).
    pub fn admit(&mut self, call: Call) {
        let Some((index, shared)) = self.choose(&call.prompt) else {
            let _ = call.reply.send(Err(LocalError::NoFreeSlot));
            return;
        };
        let shared = self.restore(index, &call.prompt, shared).unwrap_or(shared);
        if call.budget == 0 {
            let output = Output {
                text: String::new(),
                read: call.reader.end(0),
                prompt_tokens: call.prompt.len(),
                cached_tokens: 0,
                completion_tokens: 0,
                finish: Finish::MaxTokens,
                in_reasoning: call.in_reasoning,
                logprobs: Vec::new(),
            };
            let _ = call.reply.send(Ok(output));
            return;
        }
        // The last prompt token is always processed again: its logits start the answer.
        let keep = shared.min(call.prompt.len().saturating_sub(1));
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let keep = cut_back(&mut self.ctx, slot, keep);
        self.admitted += 1;
        slot.used = self.admitted;
        let text = Text::new(&call.params.stop);
        slot.active = Some(Active {
            call,
            admitted: std::time::Instant::now(),
            answering: None,
            forced: VecDeque::new(),
            drafts: VecDeque::new(),
            fed: keep,
            reused: keep,
            next: None,
            generated: 0,
            text,
            logprobs: Vec::new(),
        });
        self.publish();
    }

    /// Reads into slot `index` the prompt cache on disk's longest saved prefix of `prompt`,
    /// when it holds [`RESTORE_AT_LEAST`] tokens more than the slot's own cache shares with
    /// it: the tokens the slot then shares with `prompt` (none after a file that failed).
    fn restore(&mut self, index: usize, prompt: &[LlamaToken], shared: usize) -> Option<usize> {
        // A prompt the disk cannot give enough more of is not looked up (no folder read).
        if prompt.len() < shared + RESTORE_AT_LEAST {
            return None;
        }
        let Slots {
            disk, ctx, slots, ..
        } = self;
        let (disk, slot) = (disk.as_ref()?, slots.get_mut(index)?);
        let saved = disk.find(prompt, shared + RESTORE_AT_LEAST - 1)?;
        let started = std::time::Instant::now();
        slot.cached.clear();
        let restored = match disk.restore(ctx, slot.seq, &saved, prompt) {
            Ok(tokens) => tokens,
            Err(e) => {
                tracing::warn!(file = %saved.path.display(), problem = %e,
                    "a saved prompt was not read back");
                (slot.prompt, slot.saved) = (0, 0);
                return Some(0);
            }
        };
        tracing::info!(
            slot = index,
            tokens = restored.len(),
            seconds = started.elapsed().as_secs_f64(),
            "prompt read back from the disk"
        );
        slot.cached = restored;
        (slot.prompt, slot.saved) = (slot.cached.len(), slot.cached.len());
        Some(slot.cached.len())
    }

    /// Saves slot `index`'s cache to the prompt cache on disk when its last prompt holds at
    /// least `least` tokens no file holds yet.
    fn save(&mut self, index: usize, least: usize) {
        let Slots {
            disk, ctx, slots, ..
        } = self;
        let (Some(disk), Some(slot)) = (disk.as_ref(), slots.get_mut(index)) else {
            return;
        };
        if slot.active.is_some() || slot.prompt < slot.saved + least.max(1) {
            return;
        }
        let started = std::time::Instant::now();
        match disk.save(ctx, slot.seq, &slot.cached, slot.prompt) {
            Ok(bytes) => {
                slot.saved = slot.prompt;
                tracing::info!(
                    slot = index,
                    tokens = slot.prompt,
                    bytes,
                    seconds = started.elapsed().as_secs_f64(),
                    "prompt saved to the disk"
                );
            }
            Err(e) => tracing::warn!(problem = %e, "a prompt was not saved to the disk"),
        }
    }

    /// Saves every idle slot's last prompt that no file holds yet (before the model unloads or
    /// the server stops).
    pub fn keep_on_disk(&mut self) {
        for index in 0..self.slots.len() {
            self.save(index, RESTORE_AT_LEAST);
        }
    }

    /// The free slot for `prompt` (see [`Slots::admit`]), and the tokens its cache shares.
    fn choose(&self, prompt: &[LlamaToken]) -> Option<(usize, usize)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active.is_none())
            .map(|(i, s)| (i, common_prefix(&s.cached, prompt), s.used))
            .max_by_key(|(_, n, used)| (*n, std::cmp::Reverse(*used)))
            .map(|(i, n, _)| (i, n))
    }

    /// One step: stops cancelled calls, feeds one batch, samples the next token of every
    /// sequence that reached its end, and answers the calls that are complete.
    pub fn step(&mut self) {
        for slot in &mut self.slots {
            if slot
                .active
                .as_ref()
                .is_some_and(|a| a.call.reply.is_closed())
            {
                slot.active = None;
            }
        }
        let wanted = self.fill();
        let tokens = self.batch.n_tokens();
        if tokens == 0 {
            return;
        }
        // Drafted tokens are answer tokens: they cost the step little, as its next tokens do.
        let drafted: usize = (self.slots.iter())
            .filter_map(|s| s.active.as_ref())
            .map(|a| a.drafts.len())
            .sum();
        let started = std::time::Instant::now();
        let decoded = self.ctx.decode(&mut self.batch);
        let read = tokens.saturating_sub(i32::try_from(drafted).unwrap_or(i32::MAX));
        self.timed(read, started.elapsed().as_secs_f64());
        if let Err(e) = decoded {
            let why = Arc::new(e);
            // Every sequence in the batch may be half written.
            for index in 0..self.slots.len() {
                self.fail(index, &why);
            }
            return;
        }
        // A slot's positions in order, while each sample is the token drafted after it.
        let mut ended = vec![false; self.slots.len()];
        for (index, at) in wanted {
            if ended.get(index) == Some(&false)
                && !self.sample(index, at)
                && let Some(ended) = ended.get_mut(index)
            {
                *ended = true;
            }
        }
    }

    /// Learns from a step how long a token takes. Only steps that read a prompt count: a step
    /// of a few answer tokens costs mostly the one read of the weights, not its tokens. The
    /// estimate follows the last steps, so it grows as a long prompt gets deeper.
    fn timed(&mut self, tokens: i32, seconds: f64) {
        if tokens < 8 {
            return;
        }
        let now = seconds / f64::from(tokens);
        self.per_token = Some(
            self.per_token
                .map_or(now, |before| 0.5 * before + 0.5 * now),
        );
    }

    /// Tokens the next step may take: as many as fit in [`super::engine::STEP_SECONDS`] at the
    /// last steps' pace, in whole tiles of [`super::engine::STEP_QUANTUM`], within the batch.
    fn room(&self) -> usize {
        use super::engine::{STEP_QUANTUM, STEP_SECONDS};
        let fits = self
            .per_token
            .filter(|t| *t > 0.0)
            .map_or(STEP_QUANTUM, |t| (STEP_SECONDS / t) as usize);
        ((fits / STEP_QUANTUM).max(1) * STEP_QUANTUM).min(self.model.info().step)
    }

    /// Puts in the batch the token each answer needs next, and the tokens drafted after it,
    /// within `room`; each one's place is `wanted`.
    fn next_tokens(&mut self, wanted: &mut Vec<(usize, i32)>, room: &mut usize) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            let Some(token) = active.next.take() else {
                continue;
            };
            let at = self.batch.n_tokens();
            if !add(&mut self.batch, token, slot.cached.len(), slot.seq, true) {
                continue;
            }
            slot.cached.push(token);
            wanted.push((index, at));
            *room = room.saturating_sub(1);
            let most = draft_room(self.speculative, active, slot.cached.len(), self.size);
            for draft in speculate::ngram(&slot.cached, most.min(*room)) {
                let at = self.batch.n_tokens();
                if !add(&mut self.batch, draft, slot.cached.len(), slot.seq, true) {
                    break;
                }
                slot.cached.push(draft);
                active.drafts.push_back(draft);
                wanted.push((index, at));
                *room = room.saturating_sub(1);
            }
            let drafted = active.drafts.len() as u64;
            self.counters.drafted.fetch_add(drafted, Ordering::Relaxed);
        }
    }

    /// Fills the batch: first the token each answer needs next, then chunks of prompts, the
    /// room shared among them. Returns the slots whose logits are wanted, with their place in
    /// the batch.
    fn fill(&mut self) -> Vec<(usize, i32)> {
        self.batch.clear();
        let mut wanted = Vec::new();
        let mut room = self.room();
        self.next_tokens(&mut wanted, &mut room);
        let mut reading = self
            .slots
            .iter()
            .filter(|s| {
                s.active
                    .as_ref()
                    .is_some_and(|a| a.fed < a.call.prompt.len())
            })
            .count();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            let left = active.call.prompt.len() - active.fed;
            if left == 0 || reading == 0 {
                continue;
            }
            let share = (room / reading).max(1).min(left).min(room);
            reading -= 1;
            for _ in 0..share {
                let Some(&token) = active.call.prompt.get(active.fed) else {
                    break;
                };
                let last = active.fed + 1 == active.call.prompt.len();
                let at = self.batch.n_tokens();
                if !add(&mut self.batch, token, slot.cached.len(), slot.seq, last) {
                    break;
                }
                slot.cached.push(token);
                active.fed += 1;
                room -= 1;
                if last {
                    wanted.push((index, at));
                }
            }
        }
        wanted
    }

    /// Samples a slot's next token and decides whether its answer is complete.
    /// Samples a slot's token at `at` (see [`Slots::sample_one`]); `true` when it is the token
    /// drafted there, whose cache is written, so the next position's sample follows it.
    fn sample(&mut self, index: usize, at: i32) -> bool {
        self.sample_one(index, at);
        let Slots {
            slots,
            ctx,
            counters,
            ..
        } = self;
        let Some(slot) = slots.get_mut(index) else {
            return false;
        };
        let Some(active) = slot.active.as_mut() else {
            return false;
        };
        if let Some(token) = active.next
            && active.drafts.front() == Some(&token)
        {
            active.drafts.pop_front();
            active.next = None;
            counters.accepted.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        take_back_drafts(ctx, slot);
        false
    }

    /// Samples a slot's next token and decides whether its answer is complete.
    fn sample_one(&mut self, index: usize, at: i32) {
        let model = self.model;
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let Some(active) = slot.active.as_mut() else {
            return;
        };
        if let Some(end) = active.call.think.as_mut().and_then(Think::due) {
            active.forced.extend(end);
        }
        let token = match active.forced.pop_front() {
            Some(token) => {
                active.call.sampler.accept(token);
                token
            }
            None => active.call.sampler.sample(&self.ctx, at),
        };
        if model.is_end(token) {
            return self.finish(index, Finish::EndTurn, None);
        }
        if let Some(top) = active.call.params.logprobs {
            let logits = self.ctx.get_logits_ith(at);
            let told = super::logprobs::of(model, logits, token, top, &active.call.shown);
            active.call.reader.logprob(&told);
            active.logprobs.push(told);
        }
        active.generated += 1;
        active.answering.get_or_insert_with(std::time::Instant::now);
        let (new, stop) = active.text.push(&model.piece(token, &active.call.shown));
        if let Some(think) = active.call.think.as_mut() {
            think.after(&new);
        }
        start_lazy(model, active, &new);
        let readable = active.text.unread(stop.as_ref().map(|(at, _)| *at));
        active.call.reader.read(active.generated, readable);
        if let Some((at, stop)) = stop {
            let finish = Finish::StopSequence(Some(stop));
            return self.finish(index, finish, Some(at));
        }
        if active.generated >= active.call.budget {
            return self.finish(index, Finish::MaxTokens, None);
        }
        active.next = Some(token);
    }

    fn finish(&mut self, index: usize, finish: Finish, cut: Option<usize>) {
        if let Some(slot) = self.slots.get_mut(index) {
            take_back_drafts(&mut self.ctx, slot);
        }
        let Some(active) = self.slots.get_mut(index).and_then(|s| s.active.take()) else {
            return;
        };
        let prompt = active.call.prompt.len();
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        c.reused_tokens
            .fetch_add(active.reused as u64, Ordering::Relaxed);
        tracing::info!(
            slot = index,
            prompt_tokens = prompt,
            cached_tokens = active.reused,
            completion_tokens = active.generated,
            seconds = active.admitted.elapsed().as_secs_f64(),
            answer_seconds = active
                .answering
                .map_or(0.0, |at| at.elapsed().as_secs_f64()),
            "local answer"
        );
        let (output, reply) = answered(active, finish, cut);
        if let Some(slot) = self.slots.get_mut(index) {
            slot.prompt = prompt;
        }
        // The gauge says the slot is free before its caller hears the answer (a client that
        // scrapes right after finds it so).
        self.counters.busy.store(self.busy(), Ordering::Relaxed);
        self.publish();
        let _ = reply.send(Ok(output));
        // A long prompt is kept on disk once its answer is out.
        self.save(index, SAVE_AFTER);
    }

    /// Fails a slot's call and forgets its cache, which may be half written.
    fn fail(&mut self, index: usize, why: &Arc<llama_cpp_2::DecodeError>) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        if slot.active.is_none() {
            return;
        }
        let _ = self
            .ctx
            .clear_kv_cache_seq(Some(slot.seq as u32), None, None);
        slot.cached.clear();
        if let Some(active) = slot.active.take() {
            self.counters.busy.store(self.busy(), Ordering::Relaxed);
            let _ = active.call.reply.send(Err(LocalError::Engine(why.clone())));
        }
    }
}

/// Cuts a slot's cache back to its first `keep` tokens (a cache that cannot be cut, a recurrent
/// model's, starts again); the tokens it keeps.
fn cut_back(ctx: &mut LlamaContext<'_>, slot: &mut Slot, keep: usize) -> usize {
    let keep = if keep < slot.cached.len() {
        let cut = u32::try_from(keep).unwrap_or(0);
        match ctx.clear_kv_cache_seq(Some(slot.seq as u32), Some(cut), None) {
            Ok(true) => keep,
            _ => {
                let _ = ctx.clear_kv_cache_seq(Some(slot.seq as u32), None, None);
                0
            }
        }
    } else {
        keep
    };
    slot.cached.truncate(keep);
    slot.prompt = slot.prompt.min(keep);
    slot.saved = slot.saved.min(keep);
    keep
}

/// The tokens an answer may draft after its next one, whose cache is `cached` tokens long: none
/// without `--speculative`, or while tokens are forced; else at most [`speculate::MAX_DRAFT`],
/// within what its token budget and its slot of `size` tokens leave.
fn draft_room(speculative: Speculative, active: &Active, cached: usize, size: usize) -> usize {
    if speculative == Speculative::None || !active.forced.is_empty() {
        return 0;
    }
    let left = active.call.budget.saturating_sub(active.generated + 1);
    speculate::MAX_DRAFT
        .min(left)
        .min(size.saturating_sub(cached))
}

/// Takes a slot's drafts that were not kept out of its cache.
fn take_back_drafts(ctx: &mut LlamaContext<'_>, slot: &mut Slot) {
    let Some(active) = slot.active.as_mut() else {
        return;
    };
    let drafted = active.drafts.len();
    if drafted == 0 {
        return;
    }
    active.drafts.clear();
    let kept = slot.cached.len().saturating_sub(drafted);
    slot.cached.truncate(kept);
    let from = u32::try_from(kept).unwrap_or(u32::MAX);
    if !matches!(
        ctx.clear_kv_cache_seq(Some(slot.seq as u32), Some(from), None),
        Ok(true)
    ) {
        // Not expected of a model whose cache cuts (drafting is off otherwise): start again.
        let _ = ctx.clear_kv_cache_seq(Some(slot.seq as u32), None, None);
        slot.cached.clear();
    }
}

/// A finished call's output, its text cut at `cut` and read to the end, and where it goes.
fn answered(
    active: Active,
    finish: Finish,
    cut: Option<usize>,
) -> (
    Output,
    tokio::sync::oneshot::Sender<Result<Output, LocalError>>,
) {
    let Active {
        call,
        text,
        generated,
        reused,
        logprobs,
        ..
    } = active;
    let (text, rest) = text.end(cut);
    // The model's words, as the prompt's are: at trace only.
    tracing::trace!(text = %text, "local answer text");
    let mut reader = call.reader;
    reader.read(generated, &rest);
    let output = Output {
        read: reader.end(generated),
        text,
        prompt_tokens: call.prompt.len(),
        cached_tokens: reused,
        completion_tokens: generated,
        finish,
        in_reasoning: call.in_reasoning,
        logprobs,
    };
    (output, call.reply)
}

/// Starts a lazy grammar when the answer (its newest text `new`) has just written its
/// trigger: the grammar reads the trigger and what followed it (llguidance reads bytes, so
/// these tokens need not be the ones sampled), then holds the rest of the answer. A grammar
/// that cannot start, or refuses what was written, leaves the answer free (it is still read
/// and checked).
fn start_lazy(model: &Model, active: &mut Active, new: &str) {
    let Some(lazy) = active.call.lazy.as_mut() else {
        return;
    };
    let text = active.text.as_str();
    let Some(back) = lazy.fired(new, text) else {
        return;
    };
    let Some(grammar) = lazy.grammar.take() else {
        return;
    };
    let written = text.get(text.len().saturating_sub(back)..).unwrap_or("");
    let tokens: Vec<u32> = model
        .tokens_of(written)
        .iter()
        .filter_map(|t| u32::try_from(t.0).ok())
        .collect();
    let started = model.matcher(grammar).and_then(|mut matcher| {
        matcher
            .consume_tokens(&tokens)
            .map_err(|e| EngineError::Schema {
                reason: super::engine::brief(&e),
            })?;
        Ok(matcher)
    });
    match started {
        Ok(matcher) => {
            let params = &active.call.params;
            let reseeded = Params {
                seed: params.seed ^ active.generated as u64,
                ..params.clone()
            };
            active.call.sampler =
                super::engine::sampler(&reseeded, Some(LlamaSampler::from(matcher)));
        }
        Err(e) => tracing::warn!(problem = %e, "the calls' grammar did not start"),
    }
}

/// Adds a token to the batch; false when the batch is full.
fn add(batch: &mut LlamaBatch, token: LlamaToken, position: usize, seq: i32, logits: bool) -> bool {
    let position = i32::try_from(position).unwrap_or(i32::MAX);
    batch.add(token, position, &[seq], logits).is_ok()
}

fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` one by one; where the trigger fired (the piece's index, bytes back).
    fn fired_at(pieces: &[&str]) -> Option<(usize, usize)> {
        let grammar = TopLevelGrammar::from_lark("start: \"x\"".into());
        let mut lazy = Lazy::new("<tool_call>", Some("{"), grammar);
        let mut text = String::new();
        pieces.iter().enumerate().find_map(|(i, piece)| {
            text.push_str(piece);
            lazy.fired(piece, &text).map(|back| (i, back))
        })
    }

    #[test]
    fn the_bare_trigger_fires_at_the_answers_start_or_after_a_code_fence_only() {
        assert_eq!(fired_at(&["{\"name\""]), Some((0, 7)));
        assert_eq!(fired_at(&["\n  ", "{"]), Some((1, 1)));
        // Qwen's small models open a fence before a call (Codex's first turn).
        assert_eq!(fired_at(&["```", "json\n", "{\"na"]), Some((2, 4)));
        assert_eq!(fired_at(&["```\n", "{"]), Some((1, 1)));
        assert_eq!(fired_at(&["Here: ", "{"]), None);
        assert_eq!(fired_at(&["```python\n", "{"]), None);
        // The tag counts anywhere.
        assert_eq!(
            fired_at(&["I will call it. ", "<tool_call>"]),
            Some((1, 11))
        );
    }

    #[test]
    fn a_reasoning_budget_closes_the_reasoning_once_spent_and_only_then() {
        let end = vec![LlamaToken(7), LlamaToken(8)];
        // Opened by the prompt: two tokens of reasoning, then the close is due.
        let mut think = Think::new(2, true, "<think>", "</think>", end.clone());
        assert_eq!(think.due(), None);
        think.after("Hmm");
        assert_eq!(think.due(), None);
        think.after(", four");
        assert_eq!(think.due(), Some(end.clone()));
        // Written once: the answer that follows is free.
        think.after("</think>");
        think.after("<think>");
        assert_eq!(think.due(), None);
        // Opened by the model, closed by it within the budget: nothing is written.
        let mut think = Think::new(3, false, "<think>", "</think>", end.clone());
        think.after("<th");
        think.after("ink>");
        think.after("Four.");
        think.after("</think>");
        think.after("4");
        think.after(" and more");
        assert_eq!(think.due(), None);
        // A budget of none closes reasoning the prompt opened at once.
        assert_eq!(
            Think::new(0, true, "[THINK]", "[/THINK]", end.clone()).due(),
            Some(end)
        );
    }
}
