//! The slots: several calls share one model, each in its own sequence of one cache the
//! sequences share (llama.cpp's unified KV cache), and every step feeds one batch holding the
//! next token of each answer being written (and the tokens drafted after it) and a chunk of each
//! prompt being read. Calls join and leave between steps; a short call is not stuck behind a
//! long prompt, and a cancelled call stops within one step. A slot keeps its tokens (and their
//! cache) after a call: the next call whose prompt starts with them processes only the rest,
//! until the cells are wanted by a call in progress.
//!
//! The scheduler reaches the model only through a [`Decoder`] (llama.cpp's in [`llama`]), so
//! admission, batching, drafts and their rollback are tested with a fake model.

mod decoder;
mod draft;
mod gates;
mod llama;
#[cfg(test)]
mod tests;

use decoder::wide_until;
pub use decoder::{Decoder, Layout, Media, Place, media_tokens};
pub use gates::{Lazy, Think};
pub use llama::Llama;

use super::LocalError;
use super::engine::{ANSWER_ROOM, EngineError, Output, Params, Text};
use super::prompt_cache::DiskCache;
use super::speculate::{self, Speculative};
use crate::call::{Finish, TokenLogprob};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What reads an answer as it is made: its text, none of which can still become a stop
/// sequence, with the answer's length in tokens so far; once the answer is done it says what it
/// read (`None`: the text is the answer as it is).
pub trait Reader {
    fn read(&mut self, tokens: usize, text: &str);
    fn end(self: Box<Self>, tokens: usize) -> Option<super::format::Answer>;
    /// Told each answer token's log-probability, when they were asked for, before its text.
    fn logprob(&mut self, _logprob: &TokenLogprob) {}
}

/// One call, ready for a slot; `S` picks its tokens (llama.cpp's sampler chain).
pub struct Call<S = LlamaSampler> {
    pub prompt: Vec<LlamaToken>,
    /// The images and audio in the prompt, in order: each stands in `prompt` as tokens of its
    /// own (see [`media_tokens`]), and is read in a step of its own.
    pub media: Vec<Media>,
    pub params: Params,
    /// Tokens the answer may have (the limit asked for, cut to what the context leaves).
    pub budget: usize,
    pub sampler: S,
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
    /// Cells of the shared cache.
    pub kv_cells: AtomicUsize,
    /// Tokens drafted (`--speculative`), and those of them the model's samples kept.
    pub drafted: AtomicU64,
    pub accepted: AtomicU64,
}

struct Active<S> {
    call: Call<S>,
    /// When the call took its slot, and when its first token was sampled.
    admitted: std::time::Instant,
    answering: Option<std::time::Instant>,
    /// Cells the call was given room for when it was admitted: its prompt and
    /// [`ANSWER_ROOM`] of its answer at most (an answer past that takes free cells, and ends
    /// when there are none).
    reserved: usize,
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

struct Slot<S> {
    seq: i32,
    /// The tokens in this sequence's cache, from position 0.
    cached: Vec<LlamaToken>,
    /// When the slot last took a call (a count of calls; 0: never): among slots sharing as
    /// much with a prompt, the one used longest ago takes it, so a cache just written (an
    /// agent's conversation, between its turns) outlives an older one; a free slot's cache
    /// that must give way is the one used longest ago.
    used: u64,
    active: Option<Active<S>>,
    /// Of `cached`, the tokens of the last prompt answered here (an answer's tokens follow).
    prompt: usize,
    /// Of `cached`, the tokens a file of the prompt cache on disk holds already.
    saved: usize,
    /// Cells its cache's media take beyond their positions (see [`Media::cells`]).
    wide: usize,
}

impl<S> Slot<S> {
    /// Cells the slot holds for its call: what it has written, or the room it was given.
    fn held(&self) -> usize {
        (self.active.as_ref()).map_or(0, |a| a.reserved.max(self.cells()))
    }

    /// Cells its cache takes.
    fn cells(&self) -> usize {
        self.cached.len() + self.wide
    }

    /// Empties its cache's record (the model's cache cut first).
    fn clear(&mut self) {
        self.cached.clear();
        (self.prompt, self.saved, self.wide) = (0, 0, 0);
    }
}

/// The slots of one model, stepped by its worker.
pub struct Slots<D: Decoder> {
    decoder: D,
    layout: Layout,
    slots: Vec<Slot<D::Sampler>>,
    batch: Vec<Place>,
    counters: Arc<Counters>,
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

impl<D: Decoder> Slots<D> {
    /// The slots of `layout` over `decoder`, their answers counted in `counters`, their long
    /// prompts kept on `disk` when there is one.
    pub fn new(
        decoder: D,
        layout: Layout,
        counters: Arc<Counters>,
        disk: Option<DiskCache>,
    ) -> Slots<D> {
        let slots = (0..layout.slots.max(1))
            .map(|i| Slot {
                seq: i32::try_from(i).unwrap_or(0),
                cached: Vec::new(),
                used: 0,
                active: None,
                prompt: 0,
                saved: 0,
                wide: 0,
            })
            .collect();
        let slots = Slots {
            decoder,
            layout,
            slots,
            batch: Vec::with_capacity(layout.step),
            counters,
            per_token: None,
            admitted: 0,
            disk,
            speculative: Speculative::None,
        };
        slots.publish();
        slots
    }

    /// `self`, its answers drafting tokens as `speculative` says (when the model's cache can
    /// take drafts back).
    pub fn speculating(mut self, speculative: Speculative) -> Self {
        if self.layout.cuts {
            self.speculative = speculative;
        }
        self
    }

    /// Whether a draft model drafts the answers' tokens (in the place of `speculative`'s;
    /// only where the model's cache can take drafts back).
    fn by_model(&self) -> bool {
        self.layout.cuts && self.decoder.has_drafter()
    }

    /// Tells the counters how many slots are busy, what their caches hold now, and the
    /// cache's cells.
    pub fn publish(&self) {
        let busy = self.slots.iter().filter(|s| s.active.is_some());
        let tokens = busy.map(Slot::cells).sum();
        self.counters.busy.store(self.busy(), Ordering::Relaxed);
        self.counters.kv_tokens.store(tokens, Ordering::Relaxed);
        (self.counters.kv_cells).store(self.decoder.cells(), Ordering::Relaxed);
    }

    /// Whether a step runs on the CPU, and so takes the pool's turn.
    pub fn on_cpu(&self) -> bool {
        self.layout.on_cpu
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

    /// Puts a call in a free slot when the cache has room for its prompt and its answer (its
    /// limit, [`ANSWER_ROOM`] at most) beside the calls in progress, the cache grown first when
    /// it can be; else the call is returned, to wait for a call in progress to end. A call no
    /// cache could take is answered with the error. The answer's limit is cut to what a
    /// sequence holds.
    pub fn place(&mut self, mut call: Call<D::Sampler>) -> Option<Call<D::Sampler>> {
        let prompt = call.prompt.len() + wide_until(&call.media, usize::MAX);
        let wanted = (prompt + call.budget.min(ANSWER_ROOM)).min(self.layout.context);
        let held: usize = self.slots.iter().map(Slot::held).sum();
        if held + wanted > self.decoder.cells()
            && let Err(source) = self.grow(held + wanted, held + prompt + 1)
        {
            if !self.is_idle() {
                return Some(call);
            }
            let tokens = wanted;
            let _ = call.reply.send(Err(LocalError::Grow { tokens, source }));
            return None;
        }
        let room = self.decoder.cells().saturating_sub(held);
        if room <= prompt {
            return Some(call);
        }
        call.budget = call.budget.min(self.layout.context.saturating_sub(prompt));
        self.admit(call, wanted.min(room));
        None
    }

    /// Grows the cache to hold `wanted` cells: to the next power of two, at least twice
    /// today's size, within the layout's most. Without the memory for that, halves are tried
    /// down to `least` cells. Every sequence's cache is carried into the grown one (a running
    /// call whose cache could not be is failed).
    fn grow(&mut self, wanted: usize, least: usize) -> Result<(), EngineError> {
        let now = self.decoder.cells();
        let mut cells = (wanted.next_power_of_two())
            .max(now.saturating_mul(2))
            .min(self.layout.most_cells);
        // At its most already: nothing to grow (making it again would only cost).
        if wanted <= now || cells <= now {
            return Ok(());
        }
        let keep: Vec<i32> = (self.slots.iter())
            .filter(|s| !s.cached.is_empty())
            .map(|s| s.seq)
            .collect();
        loop {
            let started = std::time::Instant::now();
            match self.decoder.resize(cells, &keep) {
                Ok(lost) => {
                    tracing::info!(
                        from = now,
                        to = cells,
                        slots = self.slots.len(),
                        seconds = started.elapsed().as_secs_f64(),
                        "local context grown"
                    );
                    self.forget(&lost);
                    self.publish();
                    return Ok(());
                }
                Err(e) if cells / 2 >= least && cells / 2 > now => {
                    tracing::warn!(tokens = cells, problem = %e, "cannot grow the local context this far");
                    cells /= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Forgets the caches of sequences `lost` (not carried into a grown cache); their calls,
    /// if any, fail.
    fn forget(&mut self, lost: &[i32]) {
        let why = Arc::new(llama_cpp_2::DecodeError::NoKvCacheSlot);
        for index in 0..self.slots.len() {
            let Some(slot) = self.slots.get_mut(index) else {
                continue;
            };
            if lost.contains(&slot.seq) {
                slot.clear();
                self.fail(index, &why);
            }
        }
    }

    /// Puts a call in the free slot whose cache shares the longest prefix with its prompt, of
    /// those the one used longest ago, with `reserved` cells of room (callers look for a free
    /// slot first; without one the call is refused).
    fn admit(&mut self, call: Call<D::Sampler>, reserved: usize) {
        let Some((index, shared)) = self.choose(&call.prompt) else {
            let _ = call.reply.send(Err(LocalError::NoFreeSlot));
            return;
        };
        // The answer starts from the logits of the prompt's last token, which media has not.
        if (call.media.last()).is_some_and(|m| m.start + m.len >= call.prompt.len()) {
            let why = "the prompt ends with an image or audio part: no text follows it";
            let _ = call.reply.send(Err(LocalError::Media(why.to_owned())));
            return;
        }
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
        // The last prompt token is always processed again: its logits start the answer. Media
        // is kept whole or read again whole.
        let keep = shared.min(call.prompt.len().saturating_sub(1));
        let keep = (call.media.iter())
            .find(|m| m.start < keep && keep < m.start + m.len)
            .map_or(keep, |m| m.start);
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let keep = cut_back(&mut self.decoder, slot, keep);
        // The media kept are the call's own (matched by content).
        slot.wide = wide_until(&call.media, keep);
        self.admitted += 1;
        slot.used = self.admitted;
        let text = Text::new(&call.params.stop);
        slot.active = Some(Active {
            call,
            admitted: std::time::Instant::now(),
            answering: None,
            reserved,
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
        let saved = self
            .disk
            .as_ref()?
            .find(prompt, shared + RESTORE_AT_LEAST - 1)?;
        let seq = self.slots.get(index)?.seq;
        self.decoder.cut(seq, 0);
        let slot = self.slots.get_mut(index)?;
        slot.clear();
        self.make_room(saved.tokens);
        let Slots {
            disk,
            decoder,
            slots,
            ..
        } = self;
        let (disk, slot) = (disk.as_ref()?, slots.get_mut(index)?);
        let started = std::time::Instant::now();
        let restored = match decoder.restore(disk, slot.seq, &saved, prompt) {
            Ok(tokens) => tokens,
            Err(e) => {
                tracing::warn!(file = %saved.path.display(), problem = %e,
                    "a saved prompt was not read back");
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
            disk,
            decoder,
            slots,
            ..
        } = self;
        let (Some(disk), Some(slot)) = (disk.as_ref(), slots.get_mut(index)) else {
            return;
        };
        if slot.active.is_some() || slot.prompt < slot.saved + least.max(1) {
            return;
        }
        let started = std::time::Instant::now();
        match decoder.save(disk, slot.seq, &slot.cached, slot.prompt) {
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

    /// Frees cells for `need` more tokens: free slots' caches give way, the one used longest
    /// ago first. Returns the cells free then.
    fn make_room(&mut self, need: usize) -> usize {
        loop {
            let used: usize = self.slots.iter().map(Slot::cells).sum();
            let free = self.decoder.cells().saturating_sub(used);
            let idle = (self.slots.iter_mut())
                .filter(|s| s.active.is_none() && !s.cached.is_empty())
                .min_by_key(|s| s.used);
            let Some(slot) = idle.filter(|_| free < need) else {
                return free;
            };
            tracing::debug!(
                slot = slot.seq,
                tokens = slot.cached.len(),
                "a free slot's cache gives way"
            );
            self.decoder.cut(slot.seq, 0);
            slot.clear();
        }
    }

    /// One step: stops cancelled calls, feeds one batch, samples the next token of every
    /// sequence that reached its end, and answers the calls that are complete.
    pub fn step(&mut self) {
        for slot in &mut self.slots {
            if (slot.active.as_ref()).is_some_and(|a| a.call.reply.is_closed()) {
                slot.active = None;
            }
        }
        if self.read_media() {
            return;
        }
        let wanted = self.fill();
        let tokens = self.batch.len();
        if tokens == 0 {
            return;
        }
        // Drafted tokens are answer tokens: they cost the step little, as its next tokens do.
        let drafted: usize = (self.slots.iter())
            .filter_map(|s| s.active.as_ref())
            .map(|a| a.drafts.len())
            .sum();
        // Prompt tokens, but a prompt's last (whose logits start the answer).
        let reading = self.batch.iter().filter(|p| !p.logits).count();
        let started = std::time::Instant::now();
        let decoded = self.decoder.decode(&self.batch);
        let read = tokens.saturating_sub(drafted);
        self.timed(reading, read, started.elapsed().as_secs_f64());
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

    /// Reads the media one prompt being read has reached, as a step of its own: `true` when
    /// there was one. A media part that cannot be read ends its call alone.
    fn read_media(&mut self) -> bool {
        let next = self.slots.iter().enumerate().find_map(|(index, slot)| {
            let active = slot.active.as_ref()?;
            let media = active.call.media.iter().find(|m| m.start == active.fed)?;
            Some((index, media.clone()))
        });
        let Some((index, media)) = next else {
            return false;
        };
        self.make_room(media.cells);
        let Some(slot) = self.slots.get_mut(index) else {
            return false;
        };
        let started = std::time::Instant::now();
        let read = self.decoder.media(slot.seq, &media);
        let Some(active) = slot.active.as_mut() else {
            return true;
        };
        match read {
            Ok(()) => {
                let tokens = active.call.prompt.get(media.start..media.start + media.len);
                slot.cached.extend(tokens.unwrap_or_default());
                slot.wide += media.wide();
                active.fed += media.len;
                tracing::debug!(
                    slot = index,
                    positions = media.len,
                    seconds = started.elapsed().as_secs_f64(),
                    "media read into a prompt"
                );
            }
            Err(why) => {
                let wide = wide_until(&active.call.media, media.start);
                cut_back(&mut self.decoder, slot, media.start);
                slot.wide = wide;
                if let Some(active) = slot.active.take() {
                    let _ = active.call.reply.send(Err(LocalError::Media(why)));
                }
                self.publish();
            }
        }
        true
    }

    /// Learns from a step of `tokens` (drafts aside), `reading` of them a prompt's, how long a
    /// token takes. Only steps that read a prompt count: a step of answer tokens alone, even
    /// one of many answers, costs mostly the one read of the weights, not its tokens (counted,
    /// eight answers' steps made prompts read 64 tokens a step). The estimate follows the last
    /// steps, so it grows as a long prompt gets deeper.
    fn timed(&mut self, reading: usize, tokens: usize, seconds: f64) {
        if reading < 8 {
            return;
        }
        let now = seconds / tokens as f64;
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
        ((fits / STEP_QUANTUM).max(1) * STEP_QUANTUM).min(self.layout.step)
    }

    /// Fills the batch: first the token each answer needs next (and its drafts), then chunks
    /// of prompts, the step's room and the free cells shared among them. Returns the places
    /// whose logits are wanted, with their slot.
    fn fill(&mut self) -> Vec<(usize, usize)> {
        self.batch.clear();
        let answers = (self.slots.iter())
            .filter(|s| s.active.as_ref().is_some_and(|a| a.next.is_some()))
            .count();
        let reading: usize = (self.slots.iter())
            .filter_map(|s| s.active.as_ref())
            .map(|a| a.call.prompt.len() - a.fed)
            .sum();
        let mut room = Room {
            batch: self.room(),
            cells: 0,
        };
        let need = answers + reading.min(room.batch);
        room.cells = self.make_room(need);
        // Answers past the room they were given take free cells; with none left, the cache
        // grows (when it can) rather than end them.
        let cells = self.decoder.cells();
        if room.cells < answers && self.grow(cells + answers, cells + answers).is_ok() {
            room.cells = self.make_room(need);
        }
        let mut wanted = Vec::new();
        self.next_tokens(&mut wanted, &mut room);
        self.prompt_chunks(&mut wanted, &mut room);
        wanted
    }

    /// Puts in the batch the token each answer needs next, and the tokens drafted after it,
    /// within `room`. An answer with no cell left for its next token (its sequence full, or
    /// the cache) ends there, as one that reached its limit.
    fn next_tokens(&mut self, wanted: &mut Vec<(usize, usize)>, room: &mut Room) {
        let mut full = Vec::new();
        let by_model = self.by_model();
        let drafting = self.speculative != Speculative::None || by_model;
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            let Some(token) = active.next else {
                continue;
            };
            if room.batch == 0 {
                continue;
            }
            if room.cells == 0 || slot.cached.len() >= self.layout.context {
                full.push(index);
                continue;
            }
            active.next = None;
            wanted.push((index, self.batch.len()));
            room.put(&mut self.batch, (slot.seq, &mut slot.cached), token, true);
            let most = draft_room(drafting, active, slot.cached.len(), self.layout.context);
            let most = most.min(room.batch).min(room.cells);
            // The draft model cannot follow a sequence with media in it; a draft never
            // proposes media's tokens.
            let drafts = if by_model && active.call.media.is_empty() {
                self.decoder.draft(slot.seq, &slot.cached, most)
            } else if by_model {
                Vec::new()
            } else {
                speculate::ngram(&slot.cached, most)
            };
            for draft in drafts.into_iter().take_while(|t| t.0 >= 0) {
                wanted.push((index, self.batch.len()));
                room.put(&mut self.batch, (slot.seq, &mut slot.cached), draft, true);
                active.drafts.push_back(draft);
            }
            let drafted = active.drafts.len() as u64;
            self.counters.drafted.fetch_add(drafted, Ordering::Relaxed);
        }
        for index in full {
            self.finish(index, Finish::MaxTokens, None);
        }
    }

    /// Puts in the batch chunks of the prompts being read, `room` shared among them.
    fn prompt_chunks(&mut self, wanted: &mut Vec<(usize, usize)>, room: &mut Room) {
        let mut reading = (self.slots.iter())
            .filter(|s| (s.active.as_ref()).is_some_and(|a| a.fed < a.call.prompt.len()))
            .count();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            // A chunk stops where media starts: media is read in a step of its own.
            let end = (active.call.media.iter())
                .map(|m| m.start)
                .find(|&start| start >= active.fed)
                .unwrap_or(active.call.prompt.len());
            let left = end - active.fed;
            if left == 0 || reading == 0 {
                continue;
            }
            let share = (room.batch / reading).max(1).min(left).min(room.left());
            reading -= 1;
            for _ in 0..share {
                let Some(&token) = active.call.prompt.get(active.fed) else {
                    break;
                };
                let last = active.fed + 1 == active.call.prompt.len();
                if last {
                    wanted.push((index, self.batch.len()));
                }
                room.put(&mut self.batch, (slot.seq, &mut slot.cached), token, last);
                active.fed += 1;
            }
        }
    }

    /// Samples a slot's token at place `at` (see [`Slots::sample_one`]); `true` when it is the
    /// token drafted there, whose cache is written, so the next place's sample follows it.
    fn sample(&mut self, index: usize, at: usize) -> bool {
        self.sample_one(index, at);
        let Slots {
            slots,
            decoder,
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
        take_back_drafts(decoder, slot);
        false
    }

    /// Samples a slot's next token and decides whether its answer is complete.
    fn sample_one(&mut self, index: usize, at: usize) {
        let Slots { decoder, slots, .. } = self;
        let Some(active) = slots.get_mut(index).and_then(|s| s.active.as_mut()) else {
            return;
        };
        if let Some(end) = active.call.think.as_mut().and_then(Think::due) {
            active.forced.extend(end);
        }
        let token = match active.forced.pop_front() {
            Some(token) => {
                decoder.accept(&mut active.call.sampler, token);
                token
            }
            None => decoder.sample(&mut active.call.sampler, at),
        };
        if decoder.is_end(token) {
            return self.finish(index, Finish::EndTurn, None);
        }
        if let Some(top) = active.call.params.logprobs {
            let shown = &active.call.shown;
            let piece = |t| decoder.piece(t, shown);
            let told = super::logprobs::of(piece, decoder.logits(at), token, top);
            active.call.reader.logprob(&told);
            active.logprobs.push(told);
        }
        active.generated += 1;
        active.answering.get_or_insert_with(std::time::Instant::now);
        let piece = decoder.piece(token, &active.call.shown);
        let (new, stop) = active.text.push(&piece);
        if let Some(think) = active.call.think.as_mut() {
            think.after(&new);
        }
        start_lazy(decoder, active, &new);
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
            take_back_drafts(&mut self.decoder, slot);
        }
        let Some(active) = self.slots.get_mut(index).and_then(|s| s.active.take()) else {
            return;
        };
        let prompt = active.call.prompt.len();
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        (c.reused_tokens).fetch_add(active.reused as u64, Ordering::Relaxed);
        tracing::info!(
            slot = index,
            prompt_tokens = prompt,
            cached_tokens = active.reused,
            completion_tokens = active.generated,
            seconds = active.admitted.elapsed().as_secs_f64(),
            answer_seconds = (active.answering).map_or(0.0, |at| at.elapsed().as_secs_f64()),
            "local answer"
        );
        let (output, reply) = answered(active, finish, cut);
        if let Some(slot) = self.slots.get_mut(index) {
            slot.prompt = prompt;
        }
        // The gauge says the slot is free before its caller hears the answer (a client that
        // scrapes right after finds it so).
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
        self.decoder.cut(slot.seq, 0);
        slot.clear();
        if let Some(active) = slot.active.take() {
            self.publish();
            let _ = active.call.reply.send(Err(LocalError::Engine(why.clone())));
        }
    }
}

/// What a step may still take: tokens in its batch, and free cells of the cache.
struct Room {
    batch: usize,
    cells: usize,
}

impl Room {
    /// Tokens that may still go in.
    fn left(&self) -> usize {
        self.batch.min(self.cells)
    }

    /// Puts `token` in `batch` at the end of sequence `seq`, which holds `cached`, taking its
    /// room.
    fn put(
        &mut self,
        batch: &mut Vec<Place>,
        (seq, cached): (i32, &mut Vec<LlamaToken>),
        token: LlamaToken,
        logits: bool,
    ) {
        batch.push(Place {
            token,
            position: cached.len(),
            seq,
            logits,
        });
        cached.push(token);
        self.batch = self.batch.saturating_sub(1);
        self.cells = self.cells.saturating_sub(1);
    }
}

/// Cuts a slot's cache back to its first `keep` tokens (a cache that cannot be cut, a recurrent
/// model's, starts again); the tokens it keeps.
fn cut_back<D: Decoder>(decoder: &mut D, slot: &mut Slot<D::Sampler>, keep: usize) -> usize {
    let keep = if keep < slot.cached.len() && !decoder.cut(slot.seq, keep) {
        decoder.cut(slot.seq, 0);
        0
    } else {
        keep
    };
    slot.cached.truncate(keep);
    slot.prompt = slot.prompt.min(keep);
    slot.saved = slot.saved.min(keep);
    keep
}

/// The tokens an answer may draft after its next one, whose sequence is `cached` tokens long:
/// none without `drafting`, or while tokens are forced; else at most
/// [`speculate::MAX_DRAFT`], within what its token budget and a sequence's `context` leave.
fn draft_room<S>(drafting: bool, active: &Active<S>, cached: usize, context: usize) -> usize {
    if !drafting || !active.forced.is_empty() {
        return 0;
    }
    let left = active.call.budget.saturating_sub(active.generated + 1);
    speculate::MAX_DRAFT
        .min(left)
        .min(context.saturating_sub(cached))
}

/// Takes a slot's drafts that were not kept out of its cache.
fn take_back_drafts<D: Decoder>(decoder: &mut D, slot: &mut Slot<D::Sampler>) {
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
    if !decoder.cut(slot.seq, kept) {
        // Not expected of a model whose cache cuts (drafting is off otherwise): start again.
        decoder.cut(slot.seq, 0);
        slot.clear();
    }
}

/// A finished call's output, its text cut at `cut` and read to the end, and where it goes.
fn answered<S>(
    active: Active<S>,
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
fn start_lazy<D: Decoder>(decoder: &D, active: &mut Active<D::Sampler>, new: &str) {
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
    let params = &active.call.params;
    let reseeded = Params {
        seed: params.seed ^ active.generated as u64,
        ..params.clone()
    };
    match decoder.constrained(grammar, written, &reseeded) {
        Ok(sampler) => active.call.sampler = sampler,
        Err(e) => tracing::warn!(problem = %e, "the calls' grammar did not start"),
    }
}

fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
