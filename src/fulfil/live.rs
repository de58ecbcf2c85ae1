//! What a caller sees of an answer while it is made. The driver tells each attempt and the
//! backend every piece of the answer, in order, to the call's [`Sink`]. [`Live`] is the lossy
//! consumer: a reporter (the MCP front's `notifications/progress`) reads the latest state when
//! it is ready to send, so a fast model never queues more than one update and memory stays
//! bounded by the clipped text.

use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// Characters of the answer's end kept for the progress message.
pub const TAIL_CHARS: usize = 240;

/// What happens while a call is fulfilled: the driver tells attempts and the end, the
/// backend the model's output as it comes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// An attempt starts: the first answer (number 1) or a repair, with its token budget.
    Attempt {
        number: usize,
        of: usize,
        budget: Option<usize>,
        /// Whether what the backend makes in this attempt is the answer's own text and tool
        /// calls, as a caller may be shown them while they come (not JSON written for a
        /// schema, or calls written in text for a backend that cannot take tools).
        verbatim: bool,
    },
    /// The answer has `tokens` tokens now, `text` the newest of them.
    Delta { tokens: usize, text: &'a str },
    /// The log-probabilities of answer tokens (asked for by the call), told just before the
    /// [`Event::Delta`] whose text they made. A backend tells each token once, in order; one
    /// whose text is not the answer's (reasoning, a tool call's markup) comes before the next
    /// text, or last of all with none.
    Logprobs {
        tokens: usize,
        logprobs: &'a [crate::call::TokenLogprob],
    },
    /// More of the answer's reasoning (the model's thinking, apart from its text).
    Reasoning { tokens: usize, text: &'a str },
    /// The model began its call numbered `index` (from 0, in the answer's order), of the tool
    /// `name`; `id` is the call's id in the answer.
    ToolCall {
        tokens: usize,
        index: usize,
        id: &'a str,
        name: &'a str,
    },
    /// More of the arguments of the call numbered `index`, as JSON text: the fragments of a call
    /// join into its arguments.
    ToolArgs {
        tokens: usize,
        index: usize,
        fragment: &'a str,
    },
    /// Nothing follows: the reporter ends after what it is sending.
    Finished,
}

/// Where a call's events go, in order, as they happen.
pub trait Sink: Send + Sync {
    fn event(&self, event: Event<'_>);

    /// Whether the caller has been shown part of an answer that cannot be taken back (a
    /// stream's text): another model must not start the answer again then.
    fn committed(&self) -> bool {
        false
    }

    /// The backend will try again after `after` (a provider's 429 or 5xx asked for that wait):
    /// a caller that holds its answer's head for the first piece may hold it that much longer,
    /// so that a call whose retries fail is answered with their status, not an error event.
    fn retrying(&self, _after: std::time::Duration) {}
}

/// A call's sink, shared by the driver and the backend.
pub type Events = Arc<dyn Sink>;

impl Sink for Live {
    fn event(&self, event: Event<'_>) {
        Live::event(self, event);
    }
}

/// Appends to the tail and keeps its last [`TAIL_CHARS`] characters.
fn push_tail(tail: &mut String, text: &str) {
    tail.push_str(text);
    let chars = tail.chars().count();
    if chars > TAIL_CHARS {
        let cut = tail
            .char_indices()
            .nth(chars - TAIL_CHARS)
            .map_or(0, |(i, _)| i);
        tail.drain(..cut);
    }
}

/// The latest state of one answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Tokens made by the attempts before this one.
    pub before: usize,
    /// Tokens made so far in this attempt.
    pub tokens: usize,
    /// The attempt's token budget, when known.
    pub total: Option<usize>,
    /// The attempt (1 for the first answer, more for repairs) and how many are allowed.
    pub attempt: usize,
    pub attempts: usize,
    /// The end of the text so far.
    pub tail: String,
}

impl Snapshot {
    /// Tokens made in all, which only grows (MCP's `progress`).
    pub fn progress(&self) -> usize {
        self.before + self.tokens
    }

    /// What `progress` will be at most when this attempt ends, when its budget is known.
    pub fn total(&self) -> Option<usize> {
        self.total.map(|t| self.before + t)
    }

    /// The progress message: the text so far, and during a repair which attempt it is.
    pub fn message(&self) -> String {
        let text = if self.tail.is_empty() {
            "…".to_owned()
        } else {
            self.tail.clone()
        };
        if self.attempt > 1 {
            format!(
                "repairing: attempt {} of {}: {text}",
                self.attempt, self.attempts
            )
        } else {
            text
        }
    }
}

#[derive(Debug, Default)]
struct State {
    now: Snapshot,
    /// Whether `now` changed since it was last taken.
    changed: bool,
    closed: bool,
}

/// One answer's live state, shared by the backend that writes it and the reporter.
#[derive(Debug, Default)]
pub struct Live {
    state: Mutex<State>,
    notify: Notify,
}

impl Live {
    pub fn new() -> Arc<Live> {
        Arc::default()
    }

    fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut state.now);
        state.changed = true;
        drop(state);
        self.notify.notify_one();
    }

    /// Tells the caller's view what happened.
    pub fn event(&self, event: Event<'_>) {
        match event {
            Event::Attempt {
                number, of, budget, ..
            } => self.update(|s| {
                *s = Snapshot {
                    before: s.before + s.tokens,
                    attempt: number,
                    attempts: of,
                    total: budget,
                    ..Snapshot::default()
                };
            }),
            Event::Delta { tokens, text } => self.update(|s| {
                s.tokens = tokens;
                push_tail(&mut s.tail, text);
            }),
            Event::Reasoning { tokens, .. } => self.update(|s| s.tokens = tokens),
            // The text that follows them updates the view.
            Event::Logprobs { .. } => {}
            Event::ToolCall { tokens, name, .. } => self.update(|s| {
                s.tokens = tokens;
                push_tail(&mut s.tail, &format!("[calling {name}] "));
            }),
            Event::ToolArgs {
                tokens, fragment, ..
            } => self.update(|s| {
                s.tokens = tokens;
                push_tail(&mut s.tail, fragment);
            }),
            Event::Finished => {
                self.state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .closed = true;
                self.notify.notify_one();
            }
        }
    }

    /// Waits for a change and takes it; `None` once closed.
    pub async fn next(&self) -> Option<Snapshot> {
        loop {
            {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.closed {
                    return None;
                }
                if state.changed {
                    state.changed = false;
                    return Some(state.now.clone());
                }
            }
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn updates_fold_into_the_latest_and_the_tail_is_clipped() {
        let live = Live::new();
        live.event(Event::Attempt {
            number: 1,
            of: 2,
            budget: Some(100),
            verbatim: true,
        });
        for i in 0..500 {
            live.event(Event::Delta {
                tokens: i + 1,
                text: "é",
            });
        }
        let now = live.next().await.unwrap();
        assert_eq!(now.tokens, 500);
        assert_eq!(now.total, Some(100));
        assert_eq!(now.tail.chars().count(), TAIL_CHARS);
        assert_eq!(now.message(), now.tail);
        live.event(Event::Attempt {
            number: 2,
            of: 2,
            budget: None,
            verbatim: false,
        });
        live.event(Event::Delta {
            tokens: 1,
            text: "{\"a\"",
        });
        let repair = live.next().await.unwrap();
        assert_eq!(repair.message(), "repairing: attempt 2 of 2: {\"a\"");
        assert_eq!((repair.progress(), repair.total()), (501, None));
        live.event(Event::ToolCall {
            tokens: 2,
            index: 0,
            id: "c",
            name: "f",
        });
        live.event(Event::ToolArgs {
            tokens: 3,
            index: 0,
            fragment: "{\"x\"",
        });
        assert!(
            live.next()
                .await
                .unwrap()
                .tail
                .ends_with("[calling f] {\"x\"")
        );
        live.event(Event::Finished);
        assert_eq!(live.next().await, None);
    }
}
