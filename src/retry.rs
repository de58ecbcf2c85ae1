//! Retrying with backoff: one loop for every peer this server calls again after a failure it
//! may not have next time (a provider today; the bridge's downstream and the HTTP front may
//! adopt it). The caller's attempt says whether its failure is worth another try and whether
//! the peer asked for a wait (`Retry-After`, in seconds or as an HTTP date); the loop waits
//! that, or an exponential backoff with a cap and jitter, for at most the policy's retries, a
//! longest asked-for wait, and the caller's deadline.

use std::future::Future;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How often and how long to retry.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Attempts after the first.
    pub retries: u32,
    /// The first backoff; each later one doubles.
    pub base: Duration,
    /// The longest backoff.
    pub cap: Duration,
    /// The share of each backoff that may be taken off at random, from 0 (none) to 1 (all of
    /// it), so that callers failing together do not retry together.
    pub jitter: f64,
    /// The longest wait a peer may ask for; a longer one ends the retries at once.
    pub max_retry_after: Duration,
}

impl Policy {
    /// `retries` retries after 0.5 s, 1 s, 2 s, 4 s, then 8 s each (up to a fifth less, at
    /// random), honouring a peer's wait of at most 60 s.
    pub fn new(retries: u32) -> Self {
        Policy {
            retries,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            jitter: 0.2,
            max_retry_after: Duration::from_secs(60),
        }
    }

    /// The backoff after attempt `attempt` (the first is 0) failed: `base` doubled `attempt`
    /// times, at most `cap`, less `jitter` times `draw` of it (`draw` is a random number in
    /// [0, 1]; out of range it is clamped, and not a number counts as 0).
    pub fn backoff(&self, attempt: u32, draw: f64) -> Duration {
        let full = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.cap);
        let draw = if draw.is_nan() {
            0.0
        } else {
            draw.clamp(0.0, 1.0)
        };
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        Duration::try_from_secs_f64(full.as_secs_f64() * (1.0 - jitter * draw)).unwrap_or(full)
    }

    /// What follows attempt `attempt`'s retryable failure, at `now`: the wait before the next
    /// attempt (what the peer asked for, else the backoff for `draw`), or why there is none.
    /// The retries are checked first, then the asked-for wait, then the deadline.
    pub fn next(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        now: Instant,
        deadline: Option<Instant>,
        draw: f64,
    ) -> Next {
        if attempt >= self.retries {
            return Next::Exhausted;
        }
        let wait = match retry_after {
            Some(asked) if asked > self.max_retry_after => return Next::TooLong(asked),
            Some(asked) => asked,
            None => self.backoff(attempt, draw),
        };
        match (deadline, now.checked_add(wait)) {
            (Some(deadline), Some(ready)) if ready < deadline => Next::Wait(wait),
            (Some(_), _) => Next::Deadline,
            (None, _) => Next::Wait(wait),
        }
    }
}

/// What follows a retryable failure ([`Policy::next`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Next {
    /// Wait this long, then try again.
    Wait(Duration),
    /// The retries are used up.
    Exhausted,
    /// The peer asked for this wait, longer than [`Policy::max_retry_after`].
    TooLong(Duration),
    /// The wait would end at or after the caller's deadline.
    Deadline,
}

/// How an attempt failed.
#[derive(Debug)]
pub enum Failure<E> {
    /// Another attempt would fail the same way.
    Final(E),
    /// Another attempt may succeed, after `retry_after` when the peer said how long to wait.
    Retryable {
        error: E,
        retry_after: Option<Duration>,
    },
}

/// Why [`retry`] gave up; each carries the last attempt's error.
#[derive(Debug)]
pub enum GaveUp<E> {
    /// The failure was not worth another attempt.
    Final(E),
    /// Every attempt failed (`attempts` were made).
    Exhausted { error: E, attempts: u32 },
    /// The peer asked to wait `asked`, longer than the policy allows.
    TooLong {
        error: E,
        asked: Duration,
        attempts: u32,
    },
    /// The next wait would have run past the caller's deadline.
    Deadline { error: E, attempts: u32 },
}

impl<E> GaveUp<E> {
    /// The last attempt's error.
    pub fn into_error(self) -> E {
        match self {
            GaveUp::Final(error)
            | GaveUp::Exhausted { error, .. }
            | GaveUp::TooLong { error, .. }
            | GaveUp::Deadline { error, .. } => error,
        }
    }
}

/// Runs `attempt` (given its number, from 0) until it succeeds, fails for good, or the policy
/// or `deadline` allow no more waiting.
pub async fn retry<T, E, F, Fut>(
    policy: &Policy,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<T, GaveUp<E>>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, Failure<E>>>,
{
    let mut number = 0u32;
    loop {
        let (error, retry_after) = match attempt(number).await {
            Ok(value) => return Ok(value),
            Err(Failure::Final(error)) => return Err(GaveUp::Final(error)),
            Err(Failure::Retryable { error, retry_after }) => (error, retry_after),
        };
        let attempts = number.saturating_add(1);
        let wait = match policy.next(number, retry_after, Instant::now(), deadline, draw()) {
            Next::Wait(wait) => wait,
            Next::Exhausted => return Err(GaveUp::Exhausted { error, attempts }),
            Next::TooLong(asked) => {
                return Err(GaveUp::TooLong {
                    error,
                    asked,
                    attempts,
                });
            }
            Next::Deadline => return Err(GaveUp::Deadline { error, attempts }),
        };
        tracing::debug!(attempt = number, ?wait, "retrying");
        tokio::time::sleep(wait).await;
        number = attempts;
    }
}

/// A random number in [0, 1) for the jitter; 0 (no jitter) when the system has none to give.
fn draw() -> f64 {
    // The top 53 bits: every value a double holds exactly in [0, 1).
    getrandom::u64().map_or(0.0, |bits| (bits >> 11) as f64 / (1u64 << 53) as f64)
}

/// The wait a `Retry-After` value asks for at `now`: a number of seconds, or an HTTP date (a
/// date already past asks for none). `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait an answer's `Retry-After` header asks for, now.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn policy(retries: u32) -> Policy {
        Policy::new(retries)
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_jitter_only_shortens_it() {
        let p = policy(10);
        let full: Vec<u128> = (0..7).map(|a| p.backoff(a, 0.0).as_millis()).collect();
        assert_eq!(full, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(p.backoff(u32::MAX, 0.0), Duration::from_secs(8));
        // The most jitter takes off a fifth; a draw out of range is clamped, NaN is none.
        assert_eq!(p.backoff(1, 1.0), Duration::from_millis(800));
        assert_eq!(p.backoff(1, 0.5), Duration::from_millis(900));
        assert_eq!(p.backoff(1, 7.0), Duration::from_millis(800));
        assert_eq!(p.backoff(1, -1.0), Duration::from_secs(1));
        assert_eq!(p.backoff(1, f64::NAN), Duration::from_secs(1));
        let all = Policy {
            jitter: 1.0,
            ..p.clone()
        };
        assert_eq!(all.backoff(3, 1.0), Duration::ZERO);
        let none = Policy { jitter: 0.0, ..p };
        assert_eq!(none.backoff(3, 1.0), Duration::from_secs(4));
        for _ in 0..100 {
            let d = draw();
            assert!((0.0..1.0).contains(&d), "{d}");
        }
    }

    #[test]
    fn the_next_step_checks_retries_then_the_asked_wait_then_the_deadline() {
        let p = policy(2);
        let now = Instant::now();
        let secs = Duration::from_secs;
        assert_eq!(
            p.next(0, None, now, None, 0.0),
            Next::Wait(Duration::from_millis(500))
        );
        assert_eq!(
            p.next(1, Some(secs(3)), now, None, 0.0),
            Next::Wait(secs(3))
        );
        assert_eq!(
            p.next(1, Some(secs(60)), now, None, 0.0),
            Next::Wait(secs(60))
        );
        // Used up before a wait that is too long is looked at.
        assert_eq!(p.next(2, Some(secs(61)), now, None, 0.0), Next::Exhausted);
        assert_eq!(
            p.next(0, Some(secs(61)), now, None, 0.0),
            Next::TooLong(secs(61))
        );
        // A wait must end before the deadline; one that ends on it leaves no time to try.
        let deadline = Some(now + secs(5));
        assert_eq!(
            p.next(0, Some(secs(4)), now, deadline, 0.0),
            Next::Wait(secs(4))
        );
        assert_eq!(p.next(0, Some(secs(5)), now, deadline, 0.0), Next::Deadline);
        assert_eq!(
            p.next(0, None, now + secs(5), deadline, 0.0),
            Next::Deadline
        );
        let far = Policy {
            max_retry_after: Duration::MAX,
            ..p
        };
        assert_eq!(
            far.next(0, Some(Duration::MAX), now, deadline, 0.0),
            Next::Deadline
        );
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let secs = Duration::from_secs;
        assert_eq!(parse_retry_after("120", now), Some(secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(secs(0)));
        // The three date forms HTTP allows.
        for date in [
            "Sun, 06 Nov 1994 08:50:07 GMT",
            "Sunday, 06-Nov-94 08:50:07 GMT",
            "Sun Nov  6 08:50:07 1994",
        ] {
            assert_eq!(parse_retry_after(date, now), Some(secs(30)), "{date}");
        }
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date past asks for no wait"
        );
        for bad in ["", "soon", "-1", "1.5", "Sun, 06 Nov 1994 25:00:00 GMT"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(reqwest::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(secs(7)));
    }

    /// A policy that retries at once, so the loop runs without waiting.
    fn at_once(retries: u32) -> Policy {
        Policy {
            base: Duration::ZERO,
            ..Policy::new(retries)
        }
    }

    #[tokio::test]
    async fn retry_runs_until_success_or_a_reason_to_stop() {
        let calls = Cell::new(0u32);
        let outcome: Result<u32, GaveUp<&str>> = retry(&at_once(3), None, |n| {
            calls.set(calls.get() + 1);
            async move {
                if n < 2 {
                    Err(Failure::Retryable {
                        error: "busy",
                        retry_after: None,
                    })
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!((outcome.ok(), calls.get()), (Some(2), 3));

        let always = |_| async {
            Err::<(), _>(Failure::Retryable {
                error: "busy",
                retry_after: Some(Duration::ZERO),
            })
        };
        match retry(&at_once(2), None, always).await {
            Err(GaveUp::Exhausted { error, attempts }) => {
                assert_eq!((error, attempts), ("busy", 3))
            }
            other => panic!("{other:?}"),
        }
        match retry(&at_once(0), None, always).await {
            Err(GaveUp::Exhausted { attempts, .. }) => assert_eq!(attempts, 1),
            other => panic!("{other:?}"),
        }

        let calls = Cell::new(0u32);
        let final_ = |_| {
            calls.set(calls.get() + 1);
            async { Err::<(), _>(Failure::Final("no")) }
        };
        assert!(matches!(
            retry(&at_once(5), None, final_).await,
            Err(GaveUp::Final("no"))
        ));
        assert_eq!(calls.get(), 1, "a final failure is not retried");

        let too_long = |_| async {
            Err::<(), _>(Failure::Retryable {
                error: "slow down",
                retry_after: Some(Duration::from_secs(3600)),
            })
        };
        match retry(&at_once(5), None, too_long).await {
            Err(GaveUp::TooLong {
                asked, attempts, ..
            }) => assert_eq!((asked, attempts), (Duration::from_secs(3600), 1)),
            other => panic!("{other:?}"),
        }

        // A deadline already here: no wait fits before it.
        let late = |_| async {
            Err::<(), _>(Failure::Retryable {
                error: "busy",
                retry_after: None,
            })
        };
        let outcome = retry(&at_once(5), Some(Instant::now()), late).await;
        assert!(matches!(outcome, Err(GaveUp::Deadline { attempts: 1, .. })));
        assert_eq!(outcome.err().map(GaveUp::into_error), Some("busy"));
    }
}
