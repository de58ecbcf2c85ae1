//! Stored responses: what `previous_response_id` continues and `GET /v1/responses/{id}`
//! returns. Each entry is one JSON text (the response and the input it answered), kept in this
//! process's memory, bounded by count and bytes and expiring; or, with a store URL
//! (`redis://…`), in Redis, so that replicas behind one load balancer share conversations.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::config::store::{Bounds, Setting};

/// Where responses are kept.
#[derive(Clone)]
pub enum Store {
    Memory(Arc<Memory>),
    Redis(Arc<Redis>),
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

    /// The store `setting` names, with these bounds (a Redis store keeps `max_bytes` and `ttl`;
    /// Redis's own `maxmemory` bounds the rest). A Redis store connects on first use, so the
    /// server starts while Redis is down; it must be opened inside the tokio runtime.
    pub fn open(setting: &Setting, bounds: Bounds) -> Result<Store, StoreError> {
        match setting {
            Setting::Memory => Ok(Store::memory(bounds)),
            Setting::Redis(url) => Ok(Store::Redis(Arc::new(Redis::open(url, bounds)?))),
        }
    }

    /// Keeps `entry` under `id` (replacing what was there).
    pub async fn put(&self, id: &str, entry: String) -> Result<(), StoreError> {
        match self {
            Store::Memory(m) => {
                m.put(id, entry);
                Ok(())
            }
            Store::Redis(r) => r.put(id, entry).await,
        }
    }

    /// The entry kept under `id`, if any (from memory, not copied).
    pub async fn get(&self, id: &str) -> Result<Option<Arc<str>>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.get(id)),
            Store::Redis(r) => Ok(r.get(id).await?.map(Arc::from)),
        }
    }

    /// The size in bytes of the entry kept under `id`, if any: what reading it will take,
    /// known before it is read.
    pub async fn size(&self, id: &str) -> Result<Option<usize>, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.get(id).map(|entry| entry.len())),
            Store::Redis(r) => r.size(id).await,
        }
    }

    /// Whether the store's bounds let it keep no entry at all (a count or a size of 0).
    pub fn keeps_nothing(&self) -> bool {
        match self {
            Store::Memory(m) => m.bounds.max_entries == 0 || m.bounds.max_bytes == 0,
            Store::Redis(r) => r.max_bytes == 0,
        }
    }

    /// Forgets `id`; whether it was kept.
    pub async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        match self {
            Store::Memory(m) => Ok(m.delete(id)),
            Store::Redis(r) => r.delete(id).await,
        }
    }
}

/// What every key this server writes in Redis starts with (the response id follows).
pub const REDIS_PREFIX: &str = "agent-as-model:response:";

/// Longest wait for one Redis command, a connection made for it included: past it the request
/// that needed it fails (503), never waits on.
pub const REDIS_WAIT: Duration = Duration::from_secs(5);

/// Responses kept in a Redis server, shared by every replica that names it: each one
/// `SET <prefix><id> <json> PX <ttl>`, read with `GET`, forgotten with `DEL`.
pub struct Redis {
    /// One multiplexed connection, made on first use and made again when it breaks.
    connection: redis::aio::ConnectionManager,
    /// Largest entry kept (id and JSON), in bytes; a larger one is not stored.
    max_bytes: usize,
    /// How long Redis keeps an entry.
    ttl: Duration,
}

impl Redis {
    /// A store for the Redis server at `url`, connected on first use.
    fn open(url: &str, bounds: Bounds) -> Result<Redis, StoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError(format!("AGENT_AS_MODEL_RESPONSES_STORE: {e}")))?;
        // Each attempt to connect and each command is bounded, one retry at most; REDIS_WAIT
        // bounds the whole.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1));
        let connection = redis::aio::ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| StoreError(format!("Redis: {e}")))?;
        Ok(Redis {
            connection,
            max_bytes: bounds.max_bytes,
            ttl: bounds.ttl,
        })
    }

    /// `SET <prefix><id> <entry> PX <ttl>`; an entry larger than `max_bytes` is not stored.
    async fn put(&self, id: &str, entry: String) -> Result<(), StoreError> {
        if id.len().saturating_add(entry.len()) > self.max_bytes {
            return Ok(());
        }
        let millis = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut command = redis::cmd("SET");
        command
            .arg(format!("{REDIS_PREFIX}{id}"))
            .arg(entry)
            .arg("PX")
            .arg(millis);
        let mut connection = self.connection.clone();
        bounded(command.query_async::<()>(&mut connection)).await
    }

    /// `GET <prefix><id>`.
    async fn get(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut command = redis::cmd("GET");
        command.arg(format!("{REDIS_PREFIX}{id}"));
        let mut connection = self.connection.clone();
        bounded(command.query_async::<Option<String>>(&mut connection)).await
    }

    /// `STRLEN <prefix><id>` (0 for no key: no entry is empty).
    async fn size(&self, id: &str) -> Result<Option<usize>, StoreError> {
        let mut command = redis::cmd("STRLEN");
        command.arg(format!("{REDIS_PREFIX}{id}"));
        let mut connection = self.connection.clone();
        let size = bounded(command.query_async::<u64>(&mut connection)).await?;
        Ok((size > 0).then(|| usize::try_from(size).unwrap_or(usize::MAX)))
    }

    /// `DEL <prefix><id>`; whether a key was removed.
    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let mut command = redis::cmd("DEL");
        command.arg(format!("{REDIS_PREFIX}{id}"));
        let mut connection = self.connection.clone();
        let removed = bounded(command.query_async::<u64>(&mut connection)).await?;
        Ok(removed > 0)
    }
}

/// A Redis command's outcome, waited for at most [`REDIS_WAIT`].
async fn bounded<T>(
    work: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(REDIS_WAIT, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(StoreError(format!("Redis: {e}"))),
        Err(_) => Err(StoreError(format!(
            "Redis did not answer within {} s",
            REDIS_WAIT.as_secs()
        ))),
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

    fn get(&self, id: &str) -> Option<Arc<str>> {
        let mut e = self.lock();
        let kept = e.by_id.get(id)?;
        if kept.expires <= Instant::now() {
            if let Some(old) = e.by_id.remove(id) {
                e.bytes = e.bytes.saturating_sub(id.len() + old.entry.len());
            }
            return None;
        }
        Some(Arc::clone(&kept.entry))
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

    #[test]
    fn the_setting_is_memory_or_a_redis_url() {
        assert_eq!(Setting::parse("memory"), Ok(Setting::Memory));
        assert_eq!(
            Setting::parse("redis://127.0.0.1:6379/2"),
            Ok(Setting::Redis("redis://127.0.0.1:6379/2".into()))
        );
        for wrong in [
            "postgres://db",
            "Memory",
            "",
            "rediss://h:1",
            "redis://:pw@/",
        ] {
            let e = Setting::parse(wrong).unwrap_err();
            assert!(e.contains("AGENT_AS_MODEL_RESPONSES_STORE"), "{wrong}: {e}");
            assert!(!e.contains("pw"), "{e}");
        }
        assert_eq!(
            format!("{:?}", Setting::Redis("redis://:secret@h:1".into())),
            "Redis(…)"
        );
    }

    #[tokio::test]
    async fn a_redis_nobody_listens_on_fails_at_once_and_the_store_opens_all_the_same() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let setting = Setting::parse(&format!("redis://127.0.0.1:{port}")).unwrap();
        let store = Store::open(&setting, Bounds::default()).unwrap();
        let started = Instant::now();
        let e = store.get("resp_x").await.unwrap_err();
        assert!(e.to_string().contains("Redis"), "{e}");
        assert!(store.put("resp_x", "{}".into()).await.is_err());
        assert!(store.delete("resp_x").await.is_err());
        assert!(
            started.elapsed() < 3 * REDIS_WAIT,
            "{:?}",
            started.elapsed()
        );
    }

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
        assert_eq!(m.get("c").map(|e| e.len()), Some(1));
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
