//! What the scheduler asks of a model: the one place the slots touch llama.cpp, so that
//! admission, batching, drafts and their rollback are tested with a fake model.

use super::super::engine::{EngineError, Params};
use super::super::prompt_cache::{DiskCache, RestoreError, SaveError, Saved};
use llama_cpp_2::DecodeError;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;

/// One token of a step's batch: read into sequence `seq`'s cache at `position`, its logits
/// made when `logits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub token: LlamaToken,
    pub position: usize,
    pub seq: i32,
    pub logits: bool,
}

/// An image or a clip of audio in a prompt: `len` positions from `start`, read into the
/// cache whole, in a step of its own (llama.cpp's multimodal library encodes it and decodes
/// its embeddings). The prompt holds a token no vocabulary has for each of its positions, made
/// from the media's content ([`media_tokens`]), so a slot's cache shared with a later prompt
/// is matched by content, as text is.
#[derive(Clone)]
pub struct Media {
    pub start: usize,
    pub len: usize,
    /// Cells of the cache it takes: its positions, or more for a model whose image takes fewer
    /// positions than tokens (M-RoPE: Qwen2-VL's kind).
    pub cells: usize,
    /// What llama.cpp reads (none in the scheduler's tests).
    pub chunks: Option<std::sync::Arc<llama_cpp_2::mtmd::MtmdInputChunks>>,
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (start, len, cells) = (self.start, self.len, self.cells);
        write!(f, "Media {{ start: {start}, len: {len}, cells: {cells} }}")
    }
}

impl Media {
    /// Cells it takes beyond its positions.
    pub fn wide(&self) -> usize {
        self.cells.saturating_sub(self.len)
    }
}

/// The cells beyond their positions that the media of `media` ending by position `end` take.
pub fn wide_until(media: &[Media], end: usize) -> usize {
    (media.iter())
        .filter(|m| m.start + m.len <= end)
        .map(Media::wide)
        .sum()
}

/// The tokens a media part of content hash `id` stands as in a prompt, one for each of its
/// `len` positions: negative, so no vocabulary's token is one and no draft proposes one, and
/// different for different content from the first on.
pub fn media_tokens(id: &[u8; 32], len: usize) -> Vec<LlamaToken> {
    let seed = u64::from_le_bytes(*id.first_chunk::<8>().unwrap_or(&[0; 8]));
    (0..len as u64)
        .map(|i| {
            let mixed = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let low = i32::try_from(mixed % (i32::MAX as u64)).unwrap_or(0);
            LlamaToken(-1 - low)
        })
        .collect()
}

/// What the scheduler knows of the model it steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Sequences at once (the slots).
    pub slots: usize,
    /// Tokens one step takes at most.
    pub step: usize,
    /// Tokens one sequence holds at most (a call's prompt and answer).
    pub context: usize,
    /// Cells the shared cache may grow to.
    pub most_cells: usize,
    /// Whether a sequence's cache can be cut back to a prefix (a recurrent model's cannot),
    /// as taking drafts back needs.
    pub cuts: bool,
    /// Whether a step runs on the CPU, and so takes the pool's CPU turn.
    pub on_cpu: bool,
}

/// A model with one cache shared by its sequences (llama.cpp's unified KV cache): any
/// sequence may take any free cell.
pub trait Decoder {
    /// What picks an answer's next token (llama.cpp's sampler chain, or a test's own).
    type Sampler;

    /// Reads `batch` into the cache, making the logits of the places that want them.
    fn decode(&mut self, batch: &[Place]) -> Result<(), DecodeError>;
    /// Removes sequence `seq`'s cache from position `from` on; `false` when it cannot be cut
    /// there (from 0 it always can).
    fn cut(&mut self, seq: i32, from: usize) -> bool;
    /// The token `sampler` picks at place `at` of the last batch (whose logits were made).
    fn sample(&mut self, sampler: &mut Self::Sampler, at: usize) -> LlamaToken;
    /// Tells `sampler` of a token written without it (one the engine forced).
    fn accept(&mut self, sampler: &mut Self::Sampler, token: LlamaToken);
    /// The logits at place `at` of the last batch, one per token of the vocabulary.
    fn logits(&self, at: usize) -> &[f32];
    /// Whether a token ends the answer.
    fn is_end(&self, token: LlamaToken) -> bool;
    /// The bytes a token stands for in an answer (control tokens only when `shown`).
    fn piece(&self, token: LlamaToken, shown: &[LlamaToken]) -> Vec<u8>;
    /// A sampler for `params` held by `grammar` from now on, the grammar having read
    /// `written` (the answer's text since its trigger).
    fn constrained(
        &self,
        grammar: TopLevelGrammar,
        written: &str,
        params: &Params,
    ) -> Result<Self::Sampler, EngineError>;
    /// Whether a draft model drafts the answers' tokens (`--draft-model`).
    fn has_drafter(&self) -> bool {
        false
    }
    /// Up to `most` tokens the draft model writes after sequence `seq`'s `tokens` (none
    /// without one).
    fn draft(&mut self, _seq: i32, _tokens: &[LlamaToken], _most: usize) -> Vec<LlamaToken> {
        Vec::new()
    }
    /// Reads `media` into sequence `seq`'s cache from its `start` on (its positions after
    /// the prompt tokens before it); `Err` says why it could not.
    fn media(&mut self, _seq: i32, _media: &Media) -> Result<(), String> {
        Err("this model reads no images or audio".to_owned())
    }
    /// Cells of the cache now.
    fn cells(&self) -> usize;
    /// Makes the cache `cells` big, each sequence of `keep` carried into it: the sequences
    /// whose caches could not be (their cache is empty now).
    fn resize(&mut self, cells: usize, keep: &[i32]) -> Result<Vec<i32>, EngineError>;
    /// Saves sequence `seq`, which holds `cached`, the first `prompt` of them its prompt, to
    /// the prompt cache on disk: the bytes written.
    fn save(
        &mut self,
        disk: &DiskCache,
        seq: i32,
        cached: &[llama_cpp_2::token::LlamaToken],
        prompt: usize,
    ) -> Result<u64, SaveError>;
    /// Reads `saved` from the prompt cache on disk into sequence `seq`, checked against
    /// `prompt`: the tokens the sequence holds then.
    fn restore(
        &mut self,
        disk: &DiskCache,
        seq: i32,
        saved: &Saved,
        prompt: &[LlamaToken],
    ) -> Result<Vec<LlamaToken>, RestoreError>;
}
