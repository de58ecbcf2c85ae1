//! The calls waiting for the local model's worker (for a slot, or to have their prompt's tokens
//! counted), bounded. A call in the queue is held by its [`Ticket`], which the caller's future
//! owns: when the caller goes away (the client cancelled the call, or an HTTP client
//! disconnected) the ticket is dropped and the call leaves the queue at once, so only calls
//! still wanted count against the bound.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Why an item was not queued; the item comes back.
#[derive(Debug)]
pub enum Refused<T> {
    /// As many items as the bound allows are waiting.
    Full(T),
    /// The queue is closed: its worker has stopped.
    Closed(T),
}

pub struct Queue<T> {
    state: Mutex<State<T>>,
    /// Told when an item is pushed or the queue closes.
    changed: Condvar,
    limit: usize,
}

struct State<T> {
    waiting: VecDeque<(u64, T)>,
    next: u64,
    closed: bool,
    /// The worker was asked to look at its state (see [`Queue::nudge`]).
    nudged: bool,
}

/// What [`Queue::take_within`] found.
#[derive(Debug)]
pub enum Taken<T> {
    Item(T),
    /// Nothing came within the wait.
    TimedOut,
    /// Someone asked the worker to look at its state ([`Queue::nudge`]).
    Nudged,
    /// The queue is closed and empty.
    Closed,
}

/// An item's place in the queue: dropping it takes the item out, unless the worker took it.
#[must_use = "dropping the ticket takes the item out of the queue"]
pub struct Ticket<T> {
    queue: Arc<Queue<T>>,
    id: u64,
}

impl<T> Queue<T> {
    /// A queue of at most `limit` waiting items (at least one).
    pub fn new(limit: usize) -> Arc<Queue<T>> {
        Arc::new(Queue {
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                next: 0,
                closed: false,
                nudged: false,
            }),
            changed: Condvar::new(),
            limit: limit.max(1),
        })
    }

    /// A poisoned lock is taken as it is: every change to the state is a single step.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` at the back, unless the queue is full or closed.
    pub fn push(self: &Arc<Self>, item: T) -> Result<Ticket<T>, Refused<T>> {
        let mut state = self.lock();
        if state.closed {
            return Err(Refused::Closed(item));
        }
        if state.waiting.len() >= self.limit {
            return Err(Refused::Full(item));
        }
        let id = state.next;
        state.next = state.next.wrapping_add(1);
        state.waiting.push_back((id, item));
        drop(state);
        self.changed.notify_one();
        Ok(Ticket {
            queue: self.clone(),
            id,
        })
    }

    /// The item at the front, waiting for one; `None` once the queue is closed and empty.
    pub fn take(&self) -> Option<T> {
        let mut state = self.lock();
        loop {
            if let Some((_, item)) = state.waiting.pop_front() {
                return Some(item);
            }
            if state.closed {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The item at the front, waiting for one at most `wait` (`None`: as long as it takes), or
    /// until the queue is nudged.
    pub fn take_within(&self, wait: Option<Duration>) -> Taken<T> {
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let mut state = self.lock();
        loop {
            if let Some((_, item)) = state.waiting.pop_front() {
                return Taken::Item(item);
            }
            if state.closed {
                return Taken::Closed;
            }
            if std::mem::take(&mut state.nudged) {
                return Taken::Nudged;
            }
            state = match deadline {
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Taken::TimedOut;
                    }
                    self.changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Wakes the worker waiting in [`Queue::take_within`] (once), to look at its state.
    pub fn nudge(&self) {
        self.lock().nudged = true;
        self.changed.notify_all();
    }

    /// The item at the front, if one is waiting.
    pub fn try_take(&self) -> Option<T> {
        self.lock().waiting.pop_front().map(|(_, item)| item)
    }

    /// The first waiting item that `wanted` picks, if there is one; the items before it keep
    /// their places.
    pub fn take_first(&self, wanted: impl Fn(&T) -> bool) -> Option<T> {
        let mut state = self.lock();
        let at = state.waiting.iter().position(|(_, item)| wanted(item))?;
        state.waiting.remove(at).map(|(_, item)| item)
    }

    /// How many items are waiting.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Refuses items from now on; those waiting are still taken.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Closes the queue and hands back the items that were waiting.
    pub fn close_and_drain(&self) -> Vec<T> {
        let mut state = self.lock();
        state.closed = true;
        let left = state.waiting.drain(..).map(|(_, item)| item).collect();
        drop(state);
        self.changed.notify_all();
        left
    }
}

impl<T> Drop for Ticket<T> {
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        let at = state.waiting.iter().position(|(id, _)| *id == self.id);
        // The item is dropped after the lock is released.
        let item = at.and_then(|at| state.waiting.remove(at));
        drop(state);
        drop(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_ticket_frees_its_place_and_a_taken_item_is_not_counted() {
        let queue = Queue::new(2);
        let first = queue.push(1).unwrap();
        let second = queue.push(2).unwrap();
        assert!(matches!(queue.push(3), Err(Refused::Full(3))));
        drop(first);
        assert_eq!(queue.waiting(), 1);
        let third = queue.push(3).unwrap();
        assert_eq!(queue.try_take(), Some(2));
        // A ticket whose item was taken takes nothing out when dropped.
        drop(second);
        assert_eq!(queue.waiting(), 1);
        let _fourth = queue.push(4).unwrap();
        assert_eq!(queue.take(), Some(3));
        drop(third);
        assert_eq!(queue.take(), Some(4));
        assert_eq!(queue.try_take(), None);
    }

    #[test]
    fn an_item_taken_from_the_middle_leaves_the_others_in_order() {
        let queue = Queue::new(4);
        let _a = queue.push(1).unwrap();
        let b = queue.push(2).unwrap();
        let _c = queue.push(3).unwrap();
        assert_eq!(queue.take_first(|n| n % 2 == 0), Some(2));
        assert_eq!(queue.take_first(|n| *n > 5), None);
        // Its ticket, dropped, takes nothing else out.
        drop(b);
        assert_eq!(queue.waiting(), 2);
        assert_eq!(queue.take(), Some(1));
        assert_eq!(queue.take(), Some(3));
    }

    #[test]
    fn a_closed_queue_refuses_and_is_taken_until_empty() {
        let queue = Queue::new(4);
        let _kept = queue.push("a").unwrap();
        queue.close();
        assert!(matches!(queue.push("b"), Err(Refused::Closed("b"))));
        assert_eq!(queue.take(), Some("a"));
        assert_eq!(queue.take(), None);
        let queue = Queue::new(4);
        let _kept = queue.push("c").unwrap();
        assert_eq!(queue.close_and_drain(), vec!["c"]);
        assert_eq!(queue.take(), None);
    }

    #[test]
    fn a_waiting_taker_is_woken_by_a_push_and_by_closing() {
        let queue = Queue::<u8>::new(1);
        let taker = {
            let queue = queue.clone();
            std::thread::spawn(move || (queue.take(), queue.take()))
        };
        let _ticket = queue.push(7).unwrap();
        // Whether the taker waited before the push or not, it has the item; closing ends
        // its second wait.
        queue.close();
        assert_eq!(taker.join().unwrap(), (Some(7), None));
    }
}
