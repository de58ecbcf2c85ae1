//! Log-probabilities of an answer's tokens, from the logits the model gave at each place, as
//! llama-server reports them: over the whole vocabulary, before any sampler.

use crate::call::{TokenLogprob, TopLogprob};
use llama_cpp_2::token::LlamaToken;

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

#[cfg(test)]
mod tests {
    use super::*;

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
