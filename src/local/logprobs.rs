//! Log-probabilities of an answer's tokens, from the logits the model gave at each place, as
//! llama-server reports them: over the whole vocabulary, before any sampler.

use crate::call::{TokenLogprob, TopLogprob};
use llama_cpp_2::token::LlamaToken;
use std::collections::VecDeque;

/// `token`'s log-probability among `logits` (the model's at its place), with the `top`
/// likeliest tokens there; `piece` gives a token's bytes in the answer.
pub fn of(
    piece: impl Fn(LlamaToken) -> Vec<u8>,
    logits: &[f32],
    token: LlamaToken,
    top: usize,
) -> TokenLogprob {
    let total = log_sum_exp(logits);
    let described = |t: LlamaToken| {
        let bytes = piece(t);
        let logit = usize::try_from(t.0).ok().and_then(|i| logits.get(i));
        TopLogprob {
            token: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            logprob: logit.map_or(f64::NEG_INFINITY, |l| f64::from(*l) - total),
        }
    };
    let TopLogprob {
        token: text,
        bytes,
        logprob,
    } = described(token);
    TokenLogprob {
        token: text,
        bytes,
        logprob,
        top: likeliest(logits, top).into_iter().map(described).collect(),
    }
}

/// The likeliest token among `logits`, with its probability.
pub fn likeliest_one(logits: &[f32]) -> Option<(LlamaToken, f64)> {
    let token = *likeliest(logits, 1).first()?;
    let logit = logits.get(usize::try_from(token.0).ok()?)?;
    Some((token, (f64::from(*logit) - log_sum_exp(logits)).exp()))
}

/// The log of the sum of the logits' exponentials (the softmax's denominator), kept finite.
fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return 0.0;
    }
    let max = f64::from(max);
    let sum: f64 = logits.iter().map(|l| (f64::from(*l) - max).exp()).sum();
    max + sum.ln()
}

/// The `n` likeliest tokens, most likely first (of equals, the lower id first).
fn likeliest(logits: &[f32], n: usize) -> Vec<LlamaToken> {
    let mut best: Vec<(f32, usize)> = Vec::with_capacity(n + 1);
    for (i, &logit) in logits.iter().enumerate() {
        let better = best.len() < n || best.last().is_some_and(|(b, _)| logit > *b);
        if better && !logit.is_nan() {
            let at = best.partition_point(|(b, _)| *b >= logit);
            best.insert(at, (logit, i));
            best.truncate(n);
        }
    }
    (best.into_iter())
        .filter_map(|(_, i)| i32::try_from(i).ok().map(LlamaToken))
        .collect()
}

/// The log-probabilities of a streamed answer's tokens, told by the slots before each token's
/// text, held until that text has been read (the slots hold text back while it could still be
/// a stop sequence): each is handed on with the text it made, and a token whose text a stop
/// sequence cut is never read, so never handed on, as the whole answer leaves it out
/// ([`within`]).
#[derive(Debug, Default)]
pub struct Told {
    /// Tokens told and not handed on yet, each with where its bytes end in the answer.
    pending: VecDeque<(usize, TokenLogprob)>,
    /// Bytes of the answer's tokens told so far.
    told: usize,
    /// Bytes of the answer's text read so far.
    read: usize,
}

impl Told {
    /// One more token of the answer.
    pub fn token(&mut self, logprob: &TokenLogprob) {
        self.told += logprob.bytes.len();
        self.pending.push_back((self.told, logprob.clone()));
    }

    /// More of the answer's text was read.
    pub fn read(&mut self, text: &str) {
        self.read += text.len();
    }

    /// Tells `live` the tokens whose text has been read, if any, taken.
    pub fn tell(&mut self, live: &dyn crate::fulfil::live::Sink, tokens: usize) {
        let ready = self.ready();
        if !ready.is_empty() {
            live.event(crate::fulfil::live::Event::Logprobs {
                tokens,
                logprobs: &ready,
            });
        }
    }

    /// The tokens whose text has been read, in order, taken.
    pub fn ready(&mut self) -> Vec<TokenLogprob> {
        let read = self.read;
        let n = self
            .pending
            .iter()
            .take_while(|(end, _)| *end <= read)
            .count();
        self.pending.drain(..n).map(|(_, told)| told).collect()
    }
}

/// The answer's tokens whose bytes lie within its `text_len` bytes of text, in order: those a
/// stop sequence cut off (the sequence's own tokens, and one it begins inside of) are left
/// out, as llama-server leaves them out.
pub fn within(logprobs: Vec<TokenLogprob>, text_len: usize) -> Vec<TokenLogprob> {
    let mut end = 0;
    (logprobs.into_iter())
        .take_while(|told| {
            end += told.bytes.len();
            end <= text_len
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(token: &str) -> TokenLogprob {
        TokenLogprob {
            token: token.into(),
            bytes: token.as_bytes().to_vec(),
            logprob: -0.5,
            top: Vec::new(),
        }
    }

    fn tokens(logprobs: &[TokenLogprob]) -> Vec<&str> {
        logprobs.iter().map(|t| t.token.as_str()).collect()
    }

    #[test]
    fn a_tokens_logprob_is_ready_once_its_text_is_read_and_a_cut_one_never() {
        let mut t = Told::default();
        t.token(&told("Hel"));
        assert!(t.ready().is_empty(), "nothing read yet");
        t.token(&told("lo"));
        t.read("He");
        assert!(t.ready().is_empty(), "`Hel` is not all read");
        t.read("llo");
        assert_eq!(tokens(&t.ready()), ["Hel", "lo"]);
        // " EN" and "D" make the stop sequence "END" after " ": only " " is read.
        t.token(&told(" EN"));
        t.token(&told("D"));
        t.read(" ");
        assert!(t.ready().is_empty());
        let all = vec![told("Hel"), told("lo"), told(" EN"), told("D")];
        assert_eq!(tokens(&within(all, "Hello ".len())), ["Hel", "lo"]);
    }

    #[test]
    fn the_likeliest_tokens_come_most_likely_first_and_no_more_than_asked() {
        let logits = [0.5, 3.0, -1.0, 3.0, 2.0, f32::NAN];
        let ids = |n| {
            likeliest(&logits, n)
                .iter()
                .map(|t| t.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(0), Vec::<i32>::new());
        assert_eq!(ids(1), vec![1]);
        assert_eq!(ids(3), vec![1, 3, 4]);
        assert_eq!(ids(10), vec![1, 3, 4, 0, 2]);
    }

    #[test]
    fn log_probabilities_sum_to_one_and_survive_large_logits() {
        let logits = [1000.0, 1000.0, 998.0];
        let total = log_sum_exp(&logits);
        let sum: f64 = logits.iter().map(|l| (f64::from(*l) - total).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
        let half = (f64::from(logits[0]) - total).exp();
        assert!(
            (half - 1.0 / (2.0 + (-2.0f64).exp())).abs() < 1e-9,
            "{half}"
        );
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY]), 0.0);
    }
}
