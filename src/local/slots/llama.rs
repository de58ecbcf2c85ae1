//! The slots' decoder over llama.cpp: one context whose KV cache the sequences share.

use super::decoder::{Decoder, Layout, Media, Place};
use super::draft::Drafter;
use crate::local::engine::{self, EngineError, Model, Params};
use crate::local::prompt_cache::{DiskCache, RestoreError, SaveError, Saved};
use llama_cpp_2::DecodeError;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;

/// A model's context for the slots, with the batch each step fills.
pub struct Llama<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    cells: usize,
    /// The model's draft model, following the sequences, when it has one.
    drafter: Option<Drafter<'m>>,
}

impl<'m> Llama<'m> {
    /// A context of `cells` cells for `model`'s slots.
    pub fn new(model: &'m Model, cells: usize) -> Result<Llama<'m>, EngineError> {
        let info = model.info();
        let sequences = i32::try_from(info.slots).unwrap_or(1);
        let drafter = (model.draft())
            .map(|draft| Drafter::new(draft, cells, info.slots.max(1)))
            .transpose()?;
        Ok(Llama {
            model,
            ctx: model.context(cells)?,
            batch: LlamaBatch::new(info.step, sequences),
            cells,
            drafter,
        })
    }

    /// What the slots know of `model`: its cache starts at [`engine::FIRST_CONTEXT`] a slot
    /// (the model's context at most) and may grow to the model's context a slot.
    pub fn layout(model: &Model) -> (Layout, usize) {
        let info = model.info();
        let slots = info.slots.max(1);
        let layout = Layout {
            slots,
            step: info.step,
            context: info.context,
            most_cells: info.context.saturating_mul(slots),
            cuts: model.cache_cuts(),
            on_cpu: model.on_cpu(),
        };
        let first = engine::FIRST_CONTEXT
            .min(info.context)
            .saturating_mul(slots);
        (layout, first)
    }
}

impl Decoder for Llama<'_> {
    type Sampler = LlamaSampler;

    fn decode(&mut self, batch: &[Place]) -> Result<(), DecodeError> {
        self.batch.clear();
        for place in batch {
            let position = i32::try_from(place.position).unwrap_or(i32::MAX);
            let added = (self.batch).add(place.token, position, &[place.seq], place.logits);
            // The slots never fill a batch past its size; a token that does not fit is a step
            // that cannot be made.
            if added.is_err() {
                return Err(DecodeError::NTokensZero);
            }
        }
        self.ctx.decode(&mut self.batch)
    }

    fn cut(&mut self, seq: i32, from: usize) -> bool {
        if let Some(drafter) = self.drafter.as_mut().filter(|_| from == 0) {
            drafter.forget(seq);
        }
        let seq = u32::try_from(seq).ok();
        let from = (from > 0).then(|| u32::try_from(from).unwrap_or(u32::MAX));
        matches!(self.ctx.clear_kv_cache_seq(seq, from, None), Ok(true))
    }

    fn sample(&mut self, sampler: &mut LlamaSampler, at: usize) -> LlamaToken {
        sampler.sample(&self.ctx, i32::try_from(at).unwrap_or(i32::MAX))
    }

    fn accept(&mut self, sampler: &mut LlamaSampler, token: LlamaToken) {
        sampler.accept(token);
    }

    fn logits(&self, at: usize) -> &[f32] {
        self.ctx
            .get_logits_ith(i32::try_from(at).unwrap_or(i32::MAX))
    }

    fn is_end(&self, token: LlamaToken) -> bool {
        self.model.is_end(token)
    }

    fn piece(&self, token: LlamaToken, shown: &[LlamaToken]) -> Vec<u8> {
        self.model.piece(token, shown)
    }

    fn constrained(
        &self,
        grammar: TopLevelGrammar,
        written: &str,
        params: &Params,
    ) -> Result<LlamaSampler, EngineError> {
        let tokens: Vec<u32> = (self.model.tokens_of(written).iter())
            .filter_map(|t| u32::try_from(t.0).ok())
            .collect();
        let mut matcher = self.model.matcher(grammar)?;
        matcher
            .consume_tokens(&tokens)
            .map_err(|e| EngineError::Schema {
                reason: engine::brief(&e),
            })?;
        Ok(engine::sampler(params, Some(LlamaSampler::from(matcher))))
    }

    fn has_drafter(&self) -> bool {
        self.drafter.is_some()
    }

    fn draft(&mut self, seq: i32, tokens: &[LlamaToken], most: usize) -> Vec<LlamaToken> {
        (self.drafter.as_mut()).map_or_else(Vec::new, |d| d.draft(seq, tokens, most))
    }

    fn media(&mut self, seq: i32, media: &Media) -> Result<(), String> {
        let (Some(projector), Some(chunks)) = (self.model.projector(), media.chunks.as_deref())
        else {
            return Err("this model has no projector to read images or audio with".to_owned());
        };
        let step = self.model.info().step;
        let next = (projector.eval(chunks, &mut self.ctx, media.start, seq, step))
            .map_err(|e| e.to_string())?;
        if next != media.start + media.len {
            return Err(format!(
                "the media took positions {}..{next}, not the {} counted",
                media.start, media.len
            ));
        }
        Ok(())
    }

    fn cells(&self) -> usize {
        self.cells
    }

    fn resize(&mut self, cells: usize, keep: &[i32]) -> Result<Vec<i32>, EngineError> {
        let mut ctx = self.model.context(cells)?;
        let flags = llama_cpp_2::context::session::LlamaStateSeqFlags::empty();
        let mut lost = Vec::new();
        for &seq in keep {
            let carried = (self.ctx.state_seq_get(seq, flags))
                .and_then(|state| ctx.state_seq_set(&state, seq));
            if let Err(e) = carried {
                tracing::debug!(seq, problem = %e, "a sequence's cache was not carried");
                let _ = ctx.clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
                lost.push(seq);
            }
        }
        self.ctx = ctx;
        self.cells = cells;
        if let Some(drafter) = self.drafter.as_mut() {
            drafter.resize(cells)?;
        }
        Ok(lost)
    }

    fn save(
        &mut self,
        disk: &DiskCache,
        seq: i32,
        cached: &[LlamaToken],
        prompt: usize,
    ) -> Result<u64, SaveError> {
        disk.save(&self.ctx, seq, cached, prompt)
    }

    fn restore(
        &mut self,
        disk: &DiskCache,
        seq: i32,
        saved: &Saved,
        prompt: &[LlamaToken],
    ) -> Result<Vec<LlamaToken>, RestoreError> {
        disk.restore(&mut self.ctx, seq, saved, prompt)
    }
}
