//! The answer's tokens' log-probabilities as each API writes them, whole and streamed:
//! chat completions' `logprobs.content` and the Responses API's `output_text` `logprobs` (one
//! [`Entry`] a token: its text, log-probability, bytes and likeliest alternatives), legacy
//! text completions' parallel lists ([`Legacy`]), and Ollama's list (its own
//! [`crate::shapes::ollama::Logprob`]). [`Pending`] is what a stream holds of them between the
//! pieces: each token's goes out with the first text written after it came, and what no text
//! carried goes out at the end.

use crate::call::{TokenLogprob, TopLogprob};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

/// What OpenAI writes for a token too unlikely to have a log-probability worth saying; here
/// for one that is not a finite number (JSON has no infinities).
pub const UNLIKELY: f64 = -9999.0;

/// `logprob` as JSON can carry it.
pub fn finite(logprob: f64) -> f64 {
    if logprob.is_finite() {
        logprob
    } else {
        UNLIKELY
    }
}

/// One of the likeliest tokens at a place of the answer (OpenAI's `TopLogProb`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Top {
    pub token: String,
    pub logprob: f64,
    /// The token's UTF-8 bytes (a token may hold part of a character).
    pub bytes: Vec<u8>,
}

impl From<&TopLogprob> for Top {
    fn from(t: &TopLogprob) -> Self {
        Top {
            token: t.token.clone(),
            logprob: finite(t.logprob),
            bytes: t.bytes.clone(),
        }
    }
}

/// One answer token's log-probability, as chat completions' `logprobs.content` and the
/// Responses API's `output_text` parts and `response.output_text.delta` events have it
/// (OpenAI's `ChatCompletionTokenLogprob`, the Open Responses `LogProb`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    /// The likeliest tokens at its place, most likely first (as many as asked).
    pub top_logprobs: Vec<Top>,
}

impl From<&TokenLogprob> for Entry {
    fn from(t: &TokenLogprob) -> Self {
        Entry {
            token: t.token.clone(),
            logprob: finite(t.logprob),
            bytes: t.bytes.clone(),
            top_logprobs: t.top.iter().map(Top::from).collect(),
        }
    }
}

/// The entries of `logprobs`, in order.
pub fn entries(logprobs: &[TokenLogprob]) -> Vec<Entry> {
    logprobs.iter().map(Entry::from).collect()
}

/// A chat completion choice's `logprobs`: its content's tokens (a refusal has none here).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub content: Vec<Entry>,
    pub refusal: Option<Vec<Entry>>,
}

impl Choice {
    /// The choice's `logprobs` for `logprobs`.
    pub fn of(logprobs: &[TokenLogprob]) -> Self {
        Choice {
            content: entries(logprobs),
            refusal: None,
        }
    }
}

/// The likeliest tokens at one place, as legacy completions write them: an object from each
/// token to its log-probability, most likely first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopMap(pub Vec<(String, f64)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

/// Legacy text completions' `logprobs`: each token, its log-probability, the likeliest tokens
/// at its place (the chosen one among them: OpenAI's "up to `logprobs` + 1") and where its text
/// begins in the choice's text, in characters.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Legacy {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f64>,
    pub top_logprobs: Vec<TopMap>,
    pub text_offset: Vec<usize>,
}

impl Legacy {
    /// `logprobs`, their text beginning `at` characters into the choice's text; `at` moves past
    /// them.
    pub fn of(logprobs: &[TokenLogprob], at: &mut usize) -> Self {
        let mut legacy = Legacy::default();
        for told in logprobs {
            let mut top: Vec<(String, f64)> = (told.top.iter())
                .map(|t| (t.token.clone(), finite(t.logprob)))
                .collect();
            if !top.iter().any(|(token, _)| *token == told.token) {
                top.push((told.token.clone(), finite(told.logprob)));
            }
            legacy.tokens.push(told.token.clone());
            legacy.token_logprobs.push(finite(told.logprob));
            legacy.top_logprobs.push(TopMap(top));
            legacy.text_offset.push(*at);
            *at += told.token.chars().count();
        }
        legacy
    }
}

/// What a stream holds of the answer's log-probabilities: those told and not written yet, and
/// how many were written. Only when the call `asked` for them (else nothing is held).
#[derive(Debug, Default)]
pub struct Pending {
    asked: bool,
    held: Vec<TokenLogprob>,
    written: usize,
}

impl Pending {
    pub fn new(asked: bool) -> Self {
        Pending {
            asked,
            ..Pending::default()
        }
    }

    /// Whether the call asked for log-probabilities.
    pub fn asked(&self) -> bool {
        self.asked
    }

    /// More told (they come before the text they made).
    pub fn hold(&mut self, more: Vec<TokenLogprob>) {
        if self.asked {
            self.held.extend(more);
        }
    }

    /// Those to write now, with the text written now: taken.
    pub fn take(&mut self) -> Vec<TokenLogprob> {
        let taken = std::mem::take(&mut self.held);
        self.written += taken.len();
        taken
    }

    /// At the end: what is left to write is the whole answer's log-probabilities not written
    /// yet (`finished`'s, when the answer has them; else those held), held for
    /// [`Pending::take`].
    pub fn finish(&mut self, finished: Option<&[TokenLogprob]>) {
        if let Some(all) = finished.filter(|_| self.asked) {
            self.held = all.get(self.written..).unwrap_or_default().to_vec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `token` with log-probability `logprob` and the alternatives `top`.
    pub fn told(token: &str, logprob: f64, top: &[(&str, f64)]) -> TokenLogprob {
        TokenLogprob {
            token: token.into(),
            bytes: token.as_bytes().to_vec(),
            logprob,
            top: top
                .iter()
                .map(|(t, l)| TopLogprob {
                    token: (*t).into(),
                    bytes: t.as_bytes().to_vec(),
                    logprob: *l,
                })
                .collect(),
        }
    }

    #[test]
    fn an_entry_is_openais_token_logprob_and_an_infinity_is_very_unlikely() {
        let entry = Entry::from(&told("Hi", -0.25, &[("Hi", -0.25), ("Hey", -1.5)]));
        assert_eq!(
            serde_json::to_value(&entry).unwrap(),
            json!({"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
                   "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                                    {"token": "Hey", "logprob": -1.5, "bytes": [72, 101, 121]}]})
        );
        let entry = Entry::from(&told("x", f64::NEG_INFINITY, &[]));
        assert_eq!(entry.logprob, UNLIKELY);
        assert_eq!(
            serde_json::to_value(Choice::of(&[])).unwrap(),
            json!({"content": [], "refusal": null})
        );
    }

    #[test]
    fn legacy_lists_run_in_parallel_and_the_chosen_token_is_among_the_likeliest() {
        let mut at = 3;
        let legacy = Legacy::of(
            &[
                told("é", -0.5, &[("é", -0.5), ("e", -1.0)]),
                told(" b", -2.0, &[("c", -0.1)]),
            ],
            &mut at,
        );
        assert_eq!(
            serde_json::to_value(&legacy).unwrap(),
            json!({"tokens": ["é", " b"], "token_logprobs": [-0.5, -2.0],
                   "top_logprobs": [{"é": -0.5, "e": -1.0}, {"c": -0.1, " b": -2.0}],
                   "text_offset": [3, 4]})
        );
        assert_eq!(at, 6);
    }

    #[test]
    fn a_stream_writes_each_once_and_the_rest_at_the_end() {
        let all = [
            told("a", -0.1, &[]),
            told("b", -0.2, &[]),
            told("c", -0.3, &[]),
        ];
        let mut p = Pending::new(true);
        p.hold(all[..1].to_vec());
        assert_eq!(p.take(), all[..1]);
        assert!(p.take().is_empty());
        p.hold(all[1..2].to_vec());
        // The end: what the answer has beyond what was written, whatever was held.
        p.finish(Some(&all));
        assert_eq!(p.take(), all[1..]);
        let mut not_asked = Pending::new(false);
        not_asked.hold(all.to_vec());
        not_asked.finish(Some(&all));
        assert!(not_asked.take().is_empty());
    }
}
