//! Inference on the CPU with candle: one loaded model, one generation at a time. Tokens are
//! sampled from the model's logits, masked by a grammar when the answer must be JSON of a
//! schema or a tool call (constrained decoding with llguidance), until an end-of-turn token, a
//! stop sequence, the token limit or the grammar's end.

use crate::call::Finish;
use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::{quantized_llama, quantized_qwen2};
use llguidance::api::TopLevelGrammar;
use llguidance::{Constraint, ParserFactory};
use std::path::Path;
use std::sync::Arc;
use tokenizers::Tokenizer;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// The architectures this build can run.
pub const ARCHITECTURES: &str = "qwen2, llama";

enum Weights {
    Qwen2(quantized_qwen2::ModelWeights),
    Llama(quantized_llama::ModelWeights),
}

impl Weights {
    fn forward(&mut self, input: &Tensor, position: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Qwen2(m) => m.forward(input, position),
            Weights::Llama(m) => m.forward(input, position),
        }
    }

    fn clear(&mut self) {
        match self {
            Weights::Qwen2(m) => m.clear_kv_cache(),
            Weights::Llama(m) => m.clear_kv_cache(),
        }
    }
}

/// An error's first line: its message without the backtrace candle appends when
/// `RUST_BACKTRACE` is set (which names source files and this machine's paths).
pub fn brief(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// Prompt tokens processed in one step: about half a second of work on two cores, the longest
/// a cancelled call keeps the model busy.
const PREFILL_CHUNK: usize = 16;

/// How to sample one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub max_tokens: usize,
    /// `None` or 0: greedy.
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: u64,
    pub stop: Vec<String>,
}

/// One generated answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub text: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish: Finish,
}

/// What the model says about itself.
#[derive(Debug, Clone)]
pub struct Info {
    pub name: String,
    pub architecture: String,
    pub context: usize,
}

pub struct Engine {
    weights: Weights,
    tokenizer: Tokenizer,
    template: Option<String>,
    /// Tokens that end the assistant's turn.
    ends: Vec<u32>,
    info: Info,
    device: Device,
    /// Built on the first constrained answer (about half a second over a large vocabulary).
    guidance: Option<ParserFactory>,
    vocab: usize,
}

fn metadata_string(ct: &gguf_file::Content, key: &str) -> Option<String> {
    ct.metadata
        .get(key)
        .and_then(|v| v.to_string().ok())
        .cloned()
}

fn metadata_u32(ct: &gguf_file::Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

impl Engine {
    /// Loads a GGUF model with its tokenizer and chat template; `context` caps prompt plus
    /// answer, in tokens.
    pub fn load(path: &Path, context: usize) -> Result<Engine, String> {
        let fail = |e: candle_core::Error| {
            format!(
                "cannot load the model file {}: {} (is it a whole GGUF file? download it again)",
                path.display(),
                brief(&e)
            )
        };
        let mut file = std::fs::File::open(path)
            .map_err(|e| format!("cannot open the model {}: {e}", path.display()))?;
        let ct = gguf_file::Content::read(&mut file).map_err(fail)?;
        let architecture = metadata_string(&ct, "general.architecture").unwrap_or_default();
        let trained = metadata_u32(&ct, &format!("{architecture}.context_length"))
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(context);
        let name = metadata_string(&ct, "general.name").unwrap_or_else(|| architecture.clone());
        let template = metadata_string(&ct, "tokenizer.chat_template");
        let tokenizer = Tokenizer::from_gguf(&ct).map_err(fail)?;
        let vocab = ct
            .metadata
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
            .map_or(0, Vec::len);
        let mut ends: Vec<u32> = metadata_u32(&ct, "tokenizer.ggml.eos_token_id")
            .into_iter()
            .collect();
        for marker in ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"] {
            if let Some(id) = tokenizer.token_to_id(marker)
                && !ends.contains(&id)
            {
                ends.push(id);
            }
        }
        let device = Device::Cpu;
        let weights = match architecture.as_str() {
            "qwen2" => Weights::Qwen2(
                quantized_qwen2::ModelWeights::from_gguf(ct, &mut file, &device).map_err(fail)?,
            ),
            "llama" => Weights::Llama(
                quantized_llama::ModelWeights::from_gguf(ct, &mut file, &device).map_err(fail)?,
            ),
            other => {
                return Err(format!(
                    "{} is a {other:?} model; this build runs {ARCHITECTURES}",
                    path.display()
                ));
            }
        };
        Ok(Engine {
            weights,
            tokenizer,
            template,
            ends,
            info: Info {
                name,
                architecture,
                context: context.min(trained),
            },
            device,
            guidance: None,
            vocab,
        })
    }

    pub fn info(&self) -> &Info {
        &self.info
    }

    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// Compiles a grammar for the answer; `Err` says why it cannot be constrained.
    pub fn constraint(&mut self, grammar: TopLevelGrammar) -> Result<Constraint, String> {
        if self.guidance.is_none() {
            self.guidance = Some(self.factory()?);
        }
        let parser = self
            .guidance
            .as_ref()
            .ok_or("constrained decoding is not available")?
            .create_parser(grammar)
            .map_err(|e| {
                format!(
                    "the schema cannot be enforced while decoding: {}",
                    brief(&e)
                )
            })?;
        Ok(Constraint::new(parser))
    }

    fn factory(&self) -> Result<ParserFactory, String> {
        let json: serde_json::Value = self
            .tokenizer
            .to_string(false)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .ok_or("the tokenizer cannot be described for constrained decoding")?;
        let words = llguidance::token_bytes_from_tokenizer_json(&json)
            .map_err(|e| format!("the tokenizer's tokens cannot be read: {}", brief(&e)))?;
        let eos = self.ends.first().copied().unwrap_or(0);
        let mut info = TokRxInfo::new(
            u32::try_from(self.vocab.max(words.len())).unwrap_or(u32::MAX),
            eos,
        );
        info.tok_end_of_turn = self.ends.get(1).copied();
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Env {
            trie,
            tokenizer: self.tokenizer.clone(),
        });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| format!("constrained decoding cannot start: {}", brief(&e)))?;
        factory.quiet();
        Ok(factory)
    }

    /// Counts the tokens of a prompt.
    pub fn count(&self, prompt: &str) -> Result<usize, String> {
        self.encode(prompt).map(|ids| ids.len())
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("the prompt cannot be tokenized: {}", brief(&e)))
    }

    /// Generates one answer to `prompt`. `cancelled` is polled between tokens; `on_token`
    /// is told how many tokens have been generated.
    pub fn generate(
        &mut self,
        prompt: &str,
        params: &Params,
        mut constraint: Option<Constraint>,
        cancelled: &dyn Fn() -> bool,
        on_token: &mut dyn FnMut(usize),
    ) -> Result<Output, String> {
        let prompt_ids = self.encode(prompt)?;
        let budget = self.budget(prompt_ids.len(), params.max_tokens)?;
        let mut sampler = sampler(params);
        self.weights.clear();
        // The prompt goes in in chunks, so a cancelled call stops between two of them.
        let mut last = None;
        for (i, chunk) in prompt_ids.chunks(PREFILL_CHUNK).enumerate() {
            if cancelled() {
                return Err("the call was cancelled".into());
            }
            last = Some(self.forward(chunk, i * PREFILL_CHUNK)?);
        }
        let mut logits = last.ok_or("the prompt is empty")?;
        let mut generated: Vec<u32> = Vec::new();
        let mut finish = Finish::MaxTokens;
        let mut cut = None;
        while generated.len() < budget {
            if cancelled() {
                return Err("the call was cancelled".into());
            }
            let (next, last) = match self.pick(&logits, constraint.as_mut(), &mut sampler)? {
                Pick::End => {
                    finish = Finish::EndTurn;
                    break;
                }
                Pick::Token { id, last } => (id, last),
            };
            generated.push(next);
            on_token(generated.len());
            // The text so far is decoded only when there are stop sequences to look for.
            if !params.stop.is_empty()
                && let Some((at, stop)) = first_stop(&self.decode(&generated)?, &params.stop)
            {
                cut = Some(at);
                finish = Finish::StopSequence(Some(stop.to_owned()));
                break;
            }
            if last {
                finish = Finish::EndTurn;
                break;
            }
            if generated.len() < budget {
                logits = self.forward(&[next], prompt_ids.len() + generated.len() - 1)?;
            }
        }
        let mut text = self.decode(&generated)?;
        if let Some(at) = cut {
            text.truncate(at);
        }
        Ok(Output {
            text,
            prompt_tokens: prompt_ids.len(),
            completion_tokens: generated.len(),
            finish,
        })
    }

    fn decode(&self, tokens: &[u32]) -> Result<String, String> {
        self.tokenizer
            .decode(tokens, false)
            .map_err(|e| format!("the answer cannot be decoded: {}", brief(&e)))
    }

    /// How many tokens the answer may have: `max`, cut to what the context leaves.
    fn budget(&self, prompt: usize, max: usize) -> Result<usize, String> {
        let context = self.info.context;
        if prompt >= context {
            return Err(format!(
                "the prompt is {prompt} tokens, over the local model's context of {context} \
                 tokens (AGENT_AS_MODEL_LOCAL_CONTEXT); send a shorter conversation"
            ));
        }
        Ok(max.min(context - prompt))
    }

    /// The logits after `tokens`, which start at `position`.
    fn forward(&mut self, tokens: &[u32], position: usize) -> Result<Tensor, String> {
        Tensor::new(tokens, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .and_then(|input| self.weights.forward(&input, position))
            .map_err(|e| format!("the local model failed: {}", brief(&e)))
    }

    /// The next token: sampled from the logits, under the grammar's mask when there is one.
    fn pick(
        &self,
        logits: &Tensor,
        constraint: Option<&mut Constraint>,
        sampler: &mut LogitsProcessor,
    ) -> Result<Pick, String> {
        let fail = |e: candle_core::Error| format!("the local model failed: {}", brief(&e));
        let mut values: Vec<f32> = logits
            .squeeze(0)
            .and_then(|l| l.to_dtype(candle_core::DType::F32))
            .and_then(|l| l.to_vec1())
            .map_err(fail)?;
        let Some(c) = constraint else {
            let id = sampler
                .sample(&Tensor::new(values.as_slice(), &self.device).map_err(fail)?)
                .map_err(fail)?;
            return Ok(self.token(id, false));
        };
        let step = c
            .compute_mask()
            .map_err(|e| format!("constrained decoding failed: {}", brief(&e)))?;
        if step.is_stop() {
            return Ok(Pick::End);
        }
        if let Some(mask) = &step.sample_mask {
            for (i, v) in values.iter_mut().enumerate() {
                if !mask.get(i) {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        let masked = Tensor::new(values.as_slice(), &self.device).map_err(fail)?;
        let id = sampler.sample(&masked).map_err(fail)?;
        let commit = c
            .commit_token(Some(id))
            .map_err(|e| format!("constrained decoding failed: {}", brief(&e)))?;
        Ok(self.token(id, commit.stop))
    }

    /// A sampled token: the end of the turn, or one more token (the last when the grammar is
    /// complete).
    fn token(&self, id: u32, last: bool) -> Pick {
        if self.ends.contains(&id) {
            Pick::End
        } else {
            Pick::Token { id, last }
        }
    }
}

/// What the sampler chose.
enum Pick {
    End,
    Token { id: u32, last: bool },
}

/// Greedy without a temperature (or at 0), else sampled, with nucleus filtering for top_p.
fn sampler(params: &Params) -> LogitsProcessor {
    let sampling = match params.temperature {
        Some(t) if t > 1e-6 => match params.top_p {
            Some(p) if p > 0.0 && p < 1.0 => Sampling::TopP { p, temperature: t },
            _ => Sampling::All { temperature: t },
        },
        _ => Sampling::ArgMax,
    };
    LogitsProcessor::from_sampling(params.seed, sampling)
}

/// Where the earliest stop sequence starts in `text`, and which it is.
fn first_stop<'a>(text: &str, stops: &'a [String]) -> Option<(usize, &'a str)> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str())))
        .min_by_key(|(at, _)| *at)
}

/// The tokenizer as llguidance sees it.
struct Env {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |s| {
            self.tokenizer
                .encode(s, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_stop_wins() {
        let stops = vec!["b".to_owned(), "a".to_owned(), String::new()];
        assert_eq!(first_stop("xxab", &stops), Some((2, "a")));
        assert_eq!(first_stop("xyz", &stops), None);
    }
}
