//! The calls of the last minutes, for the engine view's charts (`GET /ui/engine.json`): each
//! call's end, its tokens and its times, kept for [`KEPT`] (at most [`MOST`] calls), read back
//! in buckets of time; and when each model's last call ended. The counters of the exposition
//! say how much since the server started; these say how fast, lately.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a call is kept after its end.
pub const KEPT: Duration = Duration::from_secs(15 * 60);

/// The most calls kept: past it the oldest go first.
const MOST: usize = 4096;

/// The most buckets one reading gives.
const MOST_POINTS: u64 = 600;

/// One call that ended: when, and what it made.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ended {
    pub at: Instant,
    /// Tokens the model wrote.
    pub generated: u64,
    /// From the answer's first piece (or the call's arrival, unstreamed) to its end.
    pub generating: Duration,
    /// From the call's arrival to its first piece, when it streamed one.
    pub first_token: Option<Duration>,
    /// Prompt tokens, and of them those read from a cache.
    pub prompt: u64,
    pub cached: u64,
}

/// The calls of the last [`KEPT`], oldest first, and each model's last call.
#[derive(Debug, Default)]
pub(super) struct Recent {
    calls: Mutex<VecDeque<Ended>>,
    last: Mutex<HashMap<String, Instant>>,
}

/// One bucket of time as the charts draw it: the calls that ended in it and how they went
/// (`None` where no call says).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Point {
    /// Seconds from the bucket's end to now (0: the bucket now filling).
    pub ago_secs: u64,
    pub calls: u64,
    /// The tokens written over the seconds spent writing them.
    pub tokens_per_second: Option<f64>,
    /// The mean time to the first piece of the streamed calls.
    pub first_token_seconds: Option<f64>,
    /// The share of the prompts' tokens read from a cache, 0 to 1.
    pub cached_share: Option<f64>,
}

/// What one bucket adds up.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    calls: u64,
    generated: u64,
    generating: f64,
    first_token: f64,
    streamed: u64,
    prompt: u64,
    cached: u64,
}

impl Sums {
    fn add(&mut self, call: &Ended) {
        self.calls += 1;
        self.generated += call.generated;
        self.generating += call.generating.as_secs_f64();
        if let Some(first) = call.first_token {
            self.first_token += first.as_secs_f64();
            self.streamed += 1;
        }
        self.prompt += call.prompt;
        self.cached += call.cached;
    }

    fn point(&self, ago_secs: u64) -> Point {
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        Point {
            ago_secs,
            calls: self.calls,
            tokens_per_second: ratio(self.generated as f64, self.generating)
                .filter(|_| self.generated > 0),
            first_token_seconds: ratio(self.first_token, self.streamed as f64),
            cached_share: ratio(self.cached as f64, self.prompt as f64).map(|s| s.min(1.0)),
        }
    }
}

impl Recent {
    /// `call` to the model `model` ended at `call.at`.
    pub(super) fn push(&self, model: &str, call: Ended) {
        let at = call.at;
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.insert(model.to_owned(), at);
        drop(last);
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.push_back(call);
        while calls.len() > MOST
            || calls
                .front()
                .is_some_and(|c| at.saturating_duration_since(c.at) > KEPT)
        {
            calls.pop_front();
        }
    }

    /// When the last call to `model` ended.
    pub(super) fn last(&self, model: &str) -> Option<Instant> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.get(model).copied()
    }

    /// The calls that ended in the `window` before `now`, in buckets of `bucket` (at least a
    /// second; at most [`MOST_POINTS`] buckets), oldest first.
    pub(super) fn points(&self, now: Instant, window: Duration, bucket: Duration) -> Vec<Point> {
        let size = bucket.as_secs().max(1);
        let n = (window.as_secs() / size).clamp(1, MOST_POINTS);
        let mut sums = vec![Sums::default(); usize::try_from(n).unwrap_or(1)];
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        for call in calls.iter() {
            // Buckets back from now: 0 is the one filling.
            let back = now.saturating_duration_since(call.at).as_secs() / size;
            let Some(at) = n.checked_sub(back + 1) else {
                continue;
            };
            if let Some(sum) = usize::try_from(at).ok().and_then(|i| sums.get_mut(i)) {
                sum.add(call);
            }
        }
        drop(calls);
        (0..n)
            .rev()
            .zip(sums.iter())
            .map(|(back, sum)| sum.point(back * size))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(at: Instant, generated: u64, secs: u64, first: Option<u64>) -> Ended {
        Ended {
            at,
            generated,
            generating: Duration::from_secs(secs),
            first_token: first.map(Duration::from_millis),
            prompt: 100,
            cached: 25,
        }
    }

    #[test]
    fn calls_fall_in_the_bucket_of_their_end_and_say_their_rates() {
        let recent = Recent::default();
        let now = Instant::now() + Duration::from_secs(3600);
        let ago = |s: u64| now - Duration::from_secs(s);
        recent.push("a", call(ago(5), 40, 2, Some(100)));
        recent.push("a", call(ago(7), 20, 2, Some(300)));
        recent.push("b", call(ago(25), 10, 1, None));
        // Older than the window: not read.
        recent.push("b", call(ago(95), 10, 1, None));
        let points = recent.points(now, Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(points.len(), 6);
        assert_eq!(
            points.iter().map(|p| p.ago_secs).collect::<Vec<_>>(),
            [50, 40, 30, 20, 10, 0]
        );
        let newest = points[5];
        assert_eq!(newest.calls, 2);
        assert_eq!(newest.tokens_per_second, Some(15.0));
        assert_eq!(newest.first_token_seconds, Some(0.2));
        assert_eq!(newest.cached_share, Some(0.25));
        assert_eq!(points[3].calls, 1);
        assert_eq!(points[3].first_token_seconds, None);
        assert_eq!(points[0].calls, 0);
        assert_eq!(points[0].tokens_per_second, None);
        assert_eq!(recent.last("b"), Some(ago(95)));
        assert_eq!(recent.last("c"), None);
    }

    #[test]
    fn old_calls_and_calls_past_the_most_are_dropped() {
        let recent = Recent::default();
        let now = Instant::now() + KEPT * 2;
        recent.push("a", call(now - KEPT - Duration::from_secs(1), 1, 1, None));
        recent.push("a", call(now, 1, 1, None));
        assert_eq!(recent.calls.lock().unwrap().len(), 1);
        for _ in 0..MOST + 10 {
            recent.push("a", call(now, 1, 1, None));
        }
        assert_eq!(recent.calls.lock().unwrap().len(), MOST);
        // A bucket of 0 s is a second; a window too long is cut to the most buckets.
        let points = recent.points(now, Duration::from_secs(100_000), Duration::ZERO);
        assert_eq!(points.len() as u64, MOST_POINTS);
        assert_eq!(points.last().unwrap().calls, MOST as u64);
    }
}
