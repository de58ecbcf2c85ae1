//! Drafts by a small model of the same vocabulary (`--draft-model`): it follows each sequence
//! in a cache of its own and writes the next tokens greedily while it is sure of them.

use crate::local::engine::{EngineError, Model};
use llama_cpp_2::DecodeError;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

/// A token is drafted only while the draft model gives it at least this probability
/// (llama.cpp's `--draft-p-min`): an unlikely draft is seldom kept, and costs a step.
const SURE: f64 = 0.75;

/// The draft model with its own cache, as big as the model's, for the same sequences.
pub struct Drafter<'m> {
    model: &'m Model,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Each sequence's tokens in the drafter's cache.
    cached: Vec<Vec<LlamaToken>>,
    /// The place in the last batch whose logits were made.
    last: i32,
}

impl<'m> Drafter<'m> {
    /// A drafter of `cells` cells for `sequences` sequences.
    pub fn new(model: &'m Model, cells: usize, sequences: usize) -> Result<Self, EngineError> {
        let step = model.info().step;
        Ok(Drafter {
            model,
            ctx: model.context(cells)?,
            batch: LlamaBatch::new(step, i32::try_from(sequences).unwrap_or(1)),
            cached: vec![Vec::new(); sequences],
            last: 0,
        })
    }

    /// Makes its cache `cells` big; it follows the sequences anew.
    pub fn resize(&mut self, cells: usize) -> Result<(), EngineError> {
        self.ctx = self.model.context(cells)?;
        self.cached.iter_mut().for_each(Vec::clear);
        Ok(())
    }

    /// Forgets sequence `seq`.
    pub fn forget(&mut self, seq: i32) {
        let _ = (self.ctx).clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
        if let Some(cached) = usize::try_from(seq)
            .ok()
            .and_then(|s| self.cached.get_mut(s))
        {
            cached.clear();
        }
    }

    /// Up to `most` tokens the draft model writes after sequence `seq`'s `tokens`, while it
    /// is sure of them.
    pub fn draft(&mut self, seq: i32, tokens: &[LlamaToken], most: usize) -> Vec<LlamaToken> {
        let mut drafts = Vec::new();
        if most == 0 || tokens.is_empty() {
            return drafts;
        }
        if let Err(e) = self.follow(seq, tokens) {
            tracing::debug!(seq, problem = %e, "the draft model could not follow a sequence");
            self.forget(seq);
            return drafts;
        }
        while let Some(token) = self.sure() {
            drafts.push(token);
            if drafts.len() >= most || self.feed(seq, &[token]).is_err() {
                break;
            }
        }
        drafts
    }

    /// Brings sequence `seq`'s cache to `tokens`, the logits of the last one made.
    fn follow(&mut self, seq: i32, tokens: &[LlamaToken]) -> Result<(), DecodeError> {
        let index = usize::try_from(seq).map_err(|_| DecodeError::NTokensZero)?;
        let cached = self.cached.get_mut(index).ok_or(DecodeError::NTokensZero)?;
        let shared = cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // The last token is read again: its logits start the drafts.
        let keep = shared.min(tokens.len() - 1);
        let from = u32::try_from(keep).ok().filter(|k| *k > 0);
        if !matches!(
            (self.ctx).clear_kv_cache_seq(u32::try_from(seq).ok(), from, None),
            Ok(true)
        ) {
            return Err(DecodeError::NTokensZero);
        }
        cached.truncate(keep);
        let step = self.model.info().step.max(1);
        for chunk in tokens.get(keep..).unwrap_or_default().chunks(step) {
            self.feed(seq, chunk)?;
        }
        Ok(())
    }

    /// Reads `tokens` at the end of sequence `seq`, the last one's logits made.
    fn feed(&mut self, seq: i32, tokens: &[LlamaToken]) -> Result<(), DecodeError> {
        let index = usize::try_from(seq).map_err(|_| DecodeError::NTokensZero)?;
        let cached = self.cached.get_mut(index).ok_or(DecodeError::NTokensZero)?;
        self.batch.clear();
        for (i, &token) in tokens.iter().enumerate() {
            let position = i32::try_from(cached.len() + i).unwrap_or(i32::MAX);
            let last = i + 1 == tokens.len();
            if self.batch.add(token, position, &[seq], last).is_err() {
                return Err(DecodeError::NTokensZero);
            }
        }
        self.ctx.decode(&mut self.batch)?;
        cached.extend_from_slice(tokens);
        self.last = self.batch.n_tokens() - 1;
        Ok(())
    }

    /// The draft model's likeliest next token, when it is sure of it and it does not end the
    /// answer.
    fn sure(&self) -> Option<LlamaToken> {
        let logits = self.ctx.get_logits_ith(self.last);
        let (token, probability) = crate::local::logprobs::likeliest_one(logits)?;
        (probability >= SURE && !self.model.is_end(token)).then_some(token)
    }
}
