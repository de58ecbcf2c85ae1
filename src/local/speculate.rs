//! Speculative decoding by n-gram lookup (`--speculative ngram`, llama.cpp's prompt lookup):
//! the tokens that followed the latest earlier place where the sequence's last few tokens
//! appear are drafted as what comes next. The slots put the drafts in the same decode step as
//! the answer's next token, with their logits, and sample each position in turn: a sampled
//! token that is the draft there keeps the draft (its cache is already written) and goes on;
//! the first that is not ends the run, and the drafts after it leave the cache. Every token of
//! the answer is still sampled from the model, so the answer is the one decoding without drafts
//! gives; an agent's edit or rewrite, which repeats its input, is decoded several tokens a step.

pub use crate::config::Speculative;
use llama_cpp_2::token::LlamaToken;

/// The most tokens drafted a step.
pub const MAX_DRAFT: usize = 16;
/// The longest and shortest run of last tokens looked up.
const LONGEST: usize = 4;
const SHORTEST: usize = 2;

/// At most `most` tokens drafted after `tokens` (the sequence so far, its last token the one
/// about to be decoded): those that followed the latest earlier occurrence of its last
/// [`LONGEST`] tokens, else of fewer, down to [`SHORTEST`]; none when no run recurs.
pub fn ngram(tokens: &[LlamaToken], most: usize) -> Vec<LlamaToken> {
    if most == 0 {
        return Vec::new();
    }
    for n in (SHORTEST..=LONGEST).rev() {
        let Some(tail) = tokens.len().checked_sub(n).and_then(|at| tokens.get(at..)) else {
            continue;
        };
        // The latest earlier start of the same run, whose run is followed by something.
        let found = (0..tokens.len().saturating_sub(n))
            .rev()
            .find(|&start| tokens.get(start..start + n) == Some(tail));
        if let Some(start) = found {
            let from = start + n;
            let to = (from + most).min(tokens.len());
            return tokens.get(from..to).map(<[_]>::to_vec).unwrap_or_default();
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().copied().map(LlamaToken).collect()
    }

    #[test]
    fn the_tokens_after_the_latest_earlier_run_are_drafted() {
        // "1 2 3 4 5 6 … 1 2 3" drafts "4 5 6".
        let t = tokens(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3]);
        assert_eq!(ngram(&t, 3), tokens(&[4, 5, 6]));
        // At most what follows, and at most `most`.
        assert_eq!(ngram(&t, 2), tokens(&[4, 5]));
        assert_eq!(ngram(&t, 0), tokens(&[]));
        // The latest of two earlier runs.
        let t = tokens(&[7, 8, 1, 9, 9, 7, 8, 2, 7, 8]);
        assert_eq!(ngram(&t, 1), tokens(&[2]));
    }

    #[test]
    fn a_longer_run_wins_and_nothing_recurring_drafts_nothing() {
        // The last four tokens recur once, the last two more recently with another follower.
        let t = tokens(&[5, 6, 7, 8, 1, 7, 8, 2, 5, 6, 7, 8]);
        assert_eq!(ngram(&t, 1), tokens(&[1]));
        assert!(ngram(&tokens(&[1, 2, 3, 4, 5]), 4).is_empty());
        // A single token recurring is not enough.
        assert!(ngram(&tokens(&[1, 2, 3, 1]), 4).is_empty());
        assert!(ngram(&tokens(&[]), 4).is_empty());
    }

    #[test]
    fn a_run_that_ends_the_sequence_drafts_what_follows_its_earlier_place() {
        // The tail's own place is not a match; an overlapping earlier one is.
        let t = tokens(&[3, 3, 3, 3, 3]);
        assert_eq!(ngram(&t, 4), tokens(&[3]));
    }
}
