//! What of a streamed answer's text may be shown yet: text that could still become one of the
//! call's stop sequences is held back until it cannot, and nothing after a stop sequence is
//! ever shown. Every encoder of a stream of events shows text through one.

use crate::call::Stops;

/// The text of one streamed answer: what was shown, what is held.
pub struct TextGate {
    stop: Stops,
    /// Received and not yet shown: it could still become a stop sequence.
    held: String,
    /// Shown so far.
    shown: String,
    /// A stop sequence was met: nothing more is shown.
    stopped: bool,
}

impl TextGate {
    pub fn new(stops: &[String]) -> Self {
        TextGate {
            stop: Stops::new(stops),
            held: String::new(),
            shown: String::new(),
            stopped: false,
        }
    }

    /// What may be shown now that `delta` came: the text held before it and the part of it that
    /// can no longer become a stop sequence (empty when nothing can).
    pub fn feed(&mut self, delta: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(delta);
        // The matcher reads the delta only: the work is the delta's length per sequence.
        let safe = match self.stop.feed(delta).map(|(back, _)| back) {
            Some(back) => {
                self.held.truncate(self.held.len().saturating_sub(back));
                self.stopped = true;
                self.held.len()
            }
            None => self.held.len().saturating_sub(self.stop.held()),
        };
        // A boundary: a stop sequence begins at one (`held` is whole characters).
        let Some((show, keep)) = self.held.split_at_checked(safe) else {
            return String::new();
        };
        let (show, keep) = (show.to_owned(), keep.to_owned());
        self.held = keep;
        self.shown.push_str(&show);
        show
    }

    /// The text held for a stop sequence that did not come (a tool call began instead).
    pub fn release(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        self.shown.push_str(&held);
        held
    }

    /// The part of the answer's whole `text` not shown yet, now shown. A stream that showed
    /// text the answer does not begin with (white space the answer trimmed) shows no more.
    pub fn rest(&mut self, text: &str) -> String {
        self.held.clear();
        match text.strip_prefix(self.shown.as_str()) {
            Some(rest) => {
                self.shown.push_str(rest);
                rest.to_owned()
            }
            None => {
                if !self.shown.trim().starts_with(text.trim()) {
                    tracing::warn!("the streamed text is not the start of the answer");
                }
                String::new()
            }
        }
    }

    /// Whether a stop sequence was met.
    pub fn stopped(&self) -> bool {
        self.stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_sequence_split_across_deltas_is_never_shown() {
        let mut g = TextGate::new(&["END".into()]);
        let shown: String = ["Hello E", "N", "D and more"]
            .iter()
            .map(|d| g.feed(d))
            .collect();
        assert_eq!(shown, "Hello ");
        assert!(g.stopped());
    }

    #[test]
    fn held_text_is_released_or_shown_with_the_rest() {
        let mut g = TextGate::new(&["END".into()]);
        assert_eq!(g.feed("ab E"), "ab ");
        assert_eq!(g.release(), "E");
        assert_eq!(g.rest("ab Ex"), "x");
        let mut g = TextGate::new(&["END".into()]);
        assert_eq!(g.feed("ab E"), "ab ");
        assert_eq!(g.rest("ab Ex"), "Ex");
        assert_eq!(g.rest("ab Ex"), "");
    }
}
