//! Stored responses: what `previous_response_id` continues and `GET /v1/responses/{id}`
//! returns. Each entry is one JSON text (the response and the input it answered), kept in this
//! process's memory, bounded by count and bytes and expiring; or, with a store URL
//! (`redis://…`), in Redis, so that replicas behind one load balancer share conversations.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bounds of the in-memory store.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Most responses kept; the oldest goes first.
    pub max_entries: usize,
    /// Most bytes of stored JSON kept; the oldest goes first.
    pub max_bytes: usize,
    /// How long a response is kept after it was made.
    pub ttl: Duration,
}

impl Default for Bounds {
    /// 10,000 responses, 256 MiB, a day.
    fn default() -> Self {
        Bounds {
            max_entries: 10_000,
            max_bytes: 256 << 20,
            ttl: Duration::from_secs(86_400),
        }
    }
}

/// Where responses are kept.
#[derive(Clone)]
pub enum Store {
    Memory(Arc<Memory>),
}

/// A store that could not be reached or answered wrongly.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the response store failed: {}", self.0)
    }
}

impl Store {
    /// An in-memory store with these bounds.
    pub fn memory(bounds: Bounds) -> Store {
        Store::Memory(Arc::new(Memory::new(bounds)))
    }

    /// Keeps `entry` under `id` (replacing what was there).
    pub async fn put(&self, id: &str, entry: String) -> Result<(), StoreError> {
        match self {
            Store::Memory(m) => {
                m.put(id, entry);
                Ok(())
            }
        }
    }

    /// The entry kept under `id`, if any.
    pub async fn get(&self, id: &str) -> Result<Option<String>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.get(id)),
        }
    }

    /// Forgets `id`; whether it was kept.
    pub async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.delete(id)),
        }
    }
}

struct Kept {
    entry: Arc<str>,
    expires: Instant,
}

#[derive(Default)]
struct Entries {
    by_id: HashMap<String, Kept>,
    /// Ids in the order they were kept (an id forgotten early is skipped when met).
    order: VecDeque<String>,
    bytes: usize,
}

/// Responses kept in this process.
pub struct Memory {
    bounds: Bounds,
    entries: Mutex<Entries>,
}

impl Memory {
    pub fn new(bounds: Bounds) -> Memory {
        Memory {
            bounds,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn put(&self, id: &str, entry: String) {
        let size = id.len().saturating_add(entry.len());
        if size > self.bounds.max_bytes || self.bounds.max_entries == 0 {
            return;
        }
        let mut e = self.lock();
        if let Some(old) = e.by_id.remove(id) {
            e.bytes = e.bytes.saturating_sub(id.len() + old.entry.len());
        }
        let now = Instant::now();
        e.by_id.insert(
            id.to_owned(),
            Kept {
                entry: Arc::from(entry),
                expires: now + self.bounds.ttl,
            },
        );
        e.order.push_back(id.to_owned());
        e.bytes = e.bytes.saturating_add(size);
        // The oldest (and anything expired at the front) go until the bounds hold.
        while e.by_id.len() > self.bounds.max_entries
            || e.bytes > self.bounds.max_bytes
            || e.order
                .front()
                .and_then(|first| e.by_id.get(first))
                .is_some_and(|k| k.expires <= now)
        {
            let Some(first) = e.order.pop_front() else {
                break;
            };
            if let Some(old) = e.by_id.remove(&first) {
                e.bytes = e.bytes.saturating_sub(first.len() + old.entry.len());
            }
        }
        // Ids forgotten early leave their place in the order behind: drop such places when
        // they outnumber the entries.
        if e.order.len() > 2 * e.by_id.len() + 16 {
            let Entries { by_id, order, .. } = &mut *e;
            order.retain(|id| by_id.contains_key(id));
        }
    }

    fn get(&self, id: &str) -> Option<String> {
        let mut e = self.lock();
        let kept = e.by_id.get(id)?;
        if kept.expires <= Instant::now() {
            if let Some(old) = e.by_id.remove(id) {
                e.bytes = e.bytes.saturating_sub(id.len() + old.entry.len());
            }
            return None;
        }
        Some(kept.entry.to_string())
    }

    fn delete(&self, id: &str) -> bool {
        let mut e = self.lock();
        match e.by_id.remove(id) {
            Some(old) => {
                e.bytes = e.bytes.saturating_sub(id.len() + old.entry.len());
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(max_entries: usize, max_bytes: usize, ttl_ms: u64) -> Bounds {
        Bounds {
            max_entries,
            max_bytes,
            ttl: Duration::from_millis(ttl_ms),
        }
    }

    #[test]
    fn the_oldest_go_first_past_the_count_and_the_bytes() {
        let m = Memory::new(bounds(2, 1000, 60_000));
        m.put("a", "1".into());
        m.put("b", "2".into());
        m.put("c", "3".into());
        assert_eq!(m.get("a"), None);
        assert_eq!(m.get("b").as_deref(), Some("2"));
        assert_eq!(m.get("c").as_deref(), Some("3"));
        let m = Memory::new(bounds(100, 25, 60_000));
        m.put("a", "x".repeat(10));
        m.put("b", "y".repeat(10));
        m.put("c", "z".repeat(10));
        assert_eq!(m.get("a"), None);
        assert!(m.get("c").is_some());
        // One larger than the whole store is not kept.
        m.put("d", "w".repeat(30));
        assert_eq!(m.get("d"), None);
        assert!(m.get("c").is_some());
    }

    #[test]
    fn entries_expire_and_deleted_ones_are_gone() {
        let m = Memory::new(bounds(10, 1000, 30));
        m.put("a", "1".into());
        assert!(m.delete("a"));
        assert!(!m.delete("a"));
        m.put("b", "2".into());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(m.get("b"), None);
        assert_eq!(m.lock().bytes, 0);
    }

    #[test]
    fn forgotten_places_in_the_order_do_not_pile_up() {
        let m = Memory::new(bounds(1000, 1 << 20, 60_000));
        for i in 0..500 {
            let id = format!("r{i}");
            m.put(&id, "x".into());
            m.delete(&id);
        }
        assert!(m.lock().order.len() < 50);
    }
}
