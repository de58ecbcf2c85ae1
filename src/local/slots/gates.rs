//! What watches an answer as it is written, token by token: a limit on its reasoning, and a
//! grammar that starts when its trigger is written.

use crate::call::Stops;
use llama_cpp_2::token::LlamaToken;
use llguidance::api::TopLevelGrammar;

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
    pub(super) fn due(&mut self) -> Option<Vec<LlamaToken>> {
        (self.inside && self.left == 0 && !self.end.is_empty()).then(|| {
            self.inside = false;
            std::mem::take(&mut self.end)
        })
    }

    /// Follows the answer: `new` is one token's text.
    pub(super) fn after(&mut self, new: &str) {
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
    pub(super) grammar: Option<TopLevelGrammar>,
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
    pub(super) fn fired(&mut self, new: &str, text: &str) -> Option<usize> {
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
