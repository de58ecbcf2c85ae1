//! The embedded models of one server, as a pool: each is loaded when first needed and unloaded
//! when idle past its keep-alive, or, least recently used first, when another would not fit in
//! the memory budget (`--local-memory`); and they take turns at the CPU, one step of one model
//! at a time, so two models on a 2-core machine do not run 4 threads.
//!
//! Each model's worker joins the pool ([`Pool::join`]) and asks for room before loading
//! ([`Member::reserve`]); the pool picks which idle models to unload, asks their workers
//! (through [`Member::evicted`], which the worker sees when its queue is nudged) and waits,
//! bounded, for their memory to be given back ([`Member::release`]).
//!
//! The pool is one server's, not the process's: it is part of the server's [`Engines`], which
//! `main` makes and hands to the backends it builds, so that two servers in one process (a
//! library's tests) neither share a budget nor stop each other's models.

use super::template::{Renderer, Sandbox};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest a model waits for others to unload to make room for it.
pub const ROOM_WAIT: Duration = Duration::from_secs(60);

/// The longest the last owner of a server's [`Engines`] waits, once it lets them go, for their
/// workers to free their models (as [`Engines::shutdown`] waits at the end of `main`).
pub const STOP_WAIT: Duration = Duration::from_secs(10);

/// The embedded models of one server: the [`Pool`] they share (the memory budget, the CPU's
/// turns), their workers (stopped together when the server ends, see [`Engines::shutdown`]),
/// and where their chat templates render (in the [`Renderer`] of the [`Sandbox`] `main` sets up,
/// whose process serves every model's renderings, else on a thread).
/// `main` makes one and hands it down to the backends it builds; cheap to clone (what it holds
/// is shared). The default has no budget, no sandbox, and workers of its own.
#[derive(Clone, Default)]
pub struct Engines {
    pool: Arc<Pool>,
    workers: Arc<Workers>,
    renderer: Option<Renderer>,
}

impl std::fmt::Debug for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engines")
            .field("budget", &self.pool.budget())
            .field("workers", &self.workers.lock().len())
            .field("renderer", &self.renderer)
            .finish()
    }
}

impl Engines {
    /// Engines whose chat templates render in `sandbox` (`None`: on a thread, unbounded in
    /// memory; only Linux limits a sandbox's memory, elsewhere templates render on a thread).
    pub fn new(sandbox: Option<Sandbox>) -> Self {
        Engines {
            renderer: sandbox.map(Renderer::new),
            ..Engines::default()
        }
    }

    /// The pool the models share.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Where chat templates render: in the sandbox's renderer (its processes started when first
    /// needed and kept), or (`None`) on a thread.
    pub fn renderer(&self) -> Option<&Renderer> {
        self.renderer.as_ref()
    }

    /// The workers, kept while a model started from these engines lives (so that the last of
    /// them to go stops and waits for the rest, see [`Workers`]).
    pub(crate) fn workers(&self) -> &Arc<Workers> {
        &self.workers
    }

    /// Stops every model's worker started from these engines and waits, `within` at most, for
    /// each to free its model and context: the process then ends with no engine left running,
    /// on a GPU too, where the device's own teardown at exit must not find the model's buffers
    /// still in use. Jobs still queued are refused; calls in progress end when their callers
    /// are gone.
    pub fn shutdown(&self, within: Duration) {
        self.workers.stop(within);
    }
}

/// One model's worker: how to close its queue (its jobs refused, the worker told to stop once
/// its calls are answered), and its thread.
struct Worker {
    close: Box<dyn Fn() + Send + Sync>,
    thread: JoinHandle<()>,
}

/// The workers of one server's models. Dropped (the server and its models gone), it stops
/// those still running and waits, [`STOP_WAIT`] at most, for them, as [`Engines::shutdown`]
/// does.
#[derive(Default)]
pub struct Workers(Mutex<Vec<Worker>>);

impl Workers {
    fn lock(&self) -> MutexGuard<'_, Vec<Worker>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A model's worker started: `close` closes its queue, `thread` runs it. The workers of
    /// models gone before (their threads ended) are forgotten.
    pub(crate) fn add(&self, close: Box<dyn Fn() + Send + Sync>, thread: JoinHandle<()>) {
        let mut running = self.lock();
        running.retain(|w| !w.thread.is_finished());
        running.push(Worker { close, thread });
    }

    /// Closes every worker's queue and waits, `within` at most, for each thread to end.
    fn stop(&self, within: Duration) {
        let started = Instant::now();
        let running = std::mem::take(&mut *self.lock());
        for worker in &running {
            (worker.close)();
        }
        for Worker { thread, .. } in running {
            while !thread.is_finished() && started.elapsed() < within {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                tracing::warn!(
                    "a local model was still answering when the process ended: its engine was \
                     not freed"
                );
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop(STOP_WAIT);
    }
}

/// The models of one server, as a pool (see the module's documentation).
#[derive(Default)]
pub struct Pool {
    members: Mutex<Vec<Entry>>,
    /// Told when memory is given back.
    freed: Condvar,
    /// Bytes the loaded models may take together; 0: no budget.
    budget: AtomicU64,
    next: AtomicU64,
    /// Held by a model's worker around each step: one model at a time uses the CPU's threads.
    cpu: Mutex<()>,
}

struct Entry {
    id: u64,
    name: String,
    /// Bytes its loaded model takes; 0 while it is not loaded.
    bytes: u64,
    busy: bool,
    last_used: Instant,
    member: Arc<Shared>,
}

/// What a worker and the pool share.
#[derive(Default)]
pub struct Shared {
    /// The pool asks the worker to unload its model (when idle).
    evict: AtomicBool,
    /// How to wake the worker to see it.
    nudge: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

/// A worker's place in the pool; leaving it (dropped) gives its memory back.
pub struct Member {
    pool: Arc<Pool>,
    id: u64,
    shared: Arc<Shared>,
}

/// Why a model cannot be loaded now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRoom {
    #[error(
        "the model needs about {} and the local models' memory budget is {} \
         (AGENT_AS_MODEL_LOCAL_MEMORY, --local-memory): raise it, or use a smaller model",
        gib(*.needed), gib(*.budget)
    )]
    TooBig { needed: u64, budget: u64 },
    #[error(
        "the model needs about {} of the local models' memory budget of {} \
         (AGENT_AS_MODEL_LOCAL_MEMORY), and {busy} busy with calls hold the rest; retry \
         shortly",
        gib(*.needed), gib(*.budget)
    )]
    Busy {
        needed: u64,
        budget: u64,
        busy: String,
    },
}

/// The bytes of the budget a model whose file is `file_bytes` long is given room for before it
/// loads: the weights (mapped) and a tenth more for the context.
pub fn footprint(file_bytes: u64) -> u64 {
    file_bytes.saturating_add(file_bytes / 10)
}

/// Bytes as GiB, one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the memory budget (0: none).
    pub fn set_budget(&self, bytes: u64) {
        self.budget.store(bytes, Ordering::Relaxed);
    }

    pub fn budget(&self) -> u64 {
        self.budget.load(Ordering::Relaxed)
    }

    /// Whether a model of `bytes` could ever load within the budget (others unloaded).
    pub fn fits(&self, bytes: u64) -> Result<(), NoRoom> {
        let budget = self.budget();
        if budget > 0 && bytes > budget {
            return Err(NoRoom::TooBig {
                needed: bytes,
                budget,
            });
        }
        Ok(())
    }

    /// A model's worker joins, under `name`; `nudge` wakes it.
    pub fn join(self: &Arc<Self>, name: &str, nudge: Box<dyn Fn() + Send + Sync>) -> Member {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            evict: AtomicBool::new(false),
            nudge: Mutex::new(Some(nudge)),
        });
        self.lock().push(Entry {
            id,
            name: name.to_owned(),
            bytes: 0,
            busy: false,
            last_used: Instant::now(),
            member: shared.clone(),
        });
        Member {
            pool: self.clone(),
            id,
            shared,
        }
    }

    /// The CPU, for one step of one model.
    pub fn cpu(&self) -> MutexGuard<'_, ()> {
        self.cpu.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Names and bytes of the loaded models, most recently used first.
    pub fn loaded(&self) -> Vec<(String, u64)> {
        let members = self.lock();
        let mut loaded: Vec<&Entry> = members.iter().filter(|e| e.bytes > 0).collect();
        loaded.sort_by_key(|e| std::cmp::Reverse(e.last_used));
        loaded.iter().map(|e| (e.name.clone(), e.bytes)).collect()
    }
}

impl Member {
    /// Room for `bytes` more: idle models are unloaded, least recently used first, until they
    /// fit (waiting at most `wait` for them to go); then the bytes count as this model's.
    pub fn reserve(&self, bytes: u64, wait: Duration) -> Result<(), NoRoom> {
        let pool = &self.pool;
        let budget = pool.budget();
        pool.fits(bytes)?;
        let deadline = Instant::now() + wait;
        let mut members = pool.lock();
        loop {
            let used: u64 = members
                .iter()
                .filter(|e| e.id != self.id)
                .map(|e| e.bytes)
                .sum();
            if budget == 0 || used + bytes <= budget {
                if let Some(me) = members.iter_mut().find(|e| e.id == self.id) {
                    me.bytes = bytes;
                    me.last_used = Instant::now();
                }
                return Ok(());
            }
            self.evict_idle(&members, used, bytes, budget);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let busy: Vec<String> = members
                    .iter()
                    .filter(|e| e.id != self.id && e.bytes > 0)
                    .map(|e| format!("{:?}", e.name))
                    .collect();
                return Err(NoRoom::Busy {
                    needed: bytes,
                    budget,
                    busy: busy.join(", "),
                });
            }
            members = pool
                .freed
                .wait_timeout(members, left.min(Duration::from_millis(250)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Asks the idle models to unload, least recently used first, until `bytes` more fit
    /// beside the `used` of the others.
    fn evict_idle(&self, members: &[Entry], used: u64, bytes: u64, budget: u64) {
        let mut idle: Vec<&Entry> = members
            .iter()
            .filter(|e| e.id != self.id && e.bytes > 0 && !e.busy)
            .collect();
        idle.sort_by_key(|e| e.last_used);
        let mut freeing = used;
        for e in idle {
            if freeing + bytes <= budget {
                break;
            }
            freeing -= e.bytes;
            if !e.member.evict.swap(true, Ordering::Relaxed) {
                tracing::info!(model = %e.name, "unloading a local model to make room");
                if let Some(nudge) = &*e
                    .member
                    .nudge
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                {
                    nudge();
                }
            }
        }
    }

    /// This model's memory is given back (it unloaded).
    pub fn release(&self) {
        let pool = &self.pool;
        if let Some(me) = pool.lock().iter_mut().find(|e| e.id == self.id) {
            me.bytes = 0;
            me.busy = false;
        }
        self.shared.evict.store(false, Ordering::Relaxed);
        pool.freed.notify_all();
    }

    /// Notes whether the model is answering calls now (a busy model is never unloaded for
    /// another), and that it was used.
    pub fn busy(&self, busy: bool) {
        if let Some(me) = self.pool.lock().iter_mut().find(|e| e.id == self.id) {
            if me.busy != busy || busy {
                me.last_used = Instant::now();
            }
            me.busy = busy;
        }
    }

    /// Whether the pool asked this model to unload.
    pub fn evicted(&self) -> bool {
        self.shared.evict.load(Ordering::Relaxed)
    }

    /// The CPU, for one step.
    pub fn cpu(&self) -> MutexGuard<'_, ()> {
        self.pool.cpu()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        *self
            .shared
            .nudge
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.pool.lock().retain(|e| e.id != self.id);
        self.pool.freed.notify_all();
    }
}

/// The machine's memory (`MemTotal`), when it can be read.
pub fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The default budget: three quarters of the machine's memory (none where it is unknown).
pub fn default_budget() -> u64 {
    machine_memory().map_or(0, |m| m / 4 * 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn pool(budget: u64) -> Arc<Pool> {
        let pool = Arc::new(Pool::default());
        pool.set_budget(budget);
        pool
    }

    #[test]
    fn models_fit_the_budget_by_unloading_the_least_recently_used_idle_one() {
        let pool = pool(10);
        let nudged = Arc::new(AtomicUsize::new(0));
        let n = nudged.clone();
        let a = pool.join(
            "a",
            Box::new(move || {
                n.fetch_add(1, Ordering::Relaxed);
            }),
        );
        let b = pool.join("b", Box::new(|| {}));
        a.reserve(6, Duration::ZERO).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        b.reserve(3, Duration::ZERO).unwrap();
        assert_eq!(pool.loaded(), [("b".to_owned(), 3), ("a".to_owned(), 6)]);
        // c needs 5: a (least recently used) is asked to go; it gives its room back.
        let c = pool.join("c", Box::new(|| {}));
        let release = std::thread::spawn(move || {
            while !a.evicted() {
                std::thread::sleep(Duration::from_millis(1));
            }
            a.release();
            a
        });
        c.reserve(5, Duration::from_secs(5)).unwrap();
        let a = release.join().unwrap();
        assert_eq!(nudged.load(Ordering::Relaxed), 1);
        assert!(!a.evicted());
        let mut loaded = pool.loaded();
        loaded.sort();
        assert_eq!(loaded, [("b".to_owned(), 3), ("c".to_owned(), 5)]);
    }

    #[test]
    fn a_model_over_the_budget_or_behind_busy_ones_is_refused_naming_the_budget() {
        let pool = pool(10 << 30);
        let big = pool.join("big", Box::new(|| {}));
        let e = big.reserve(11 << 30, Duration::ZERO).unwrap_err();
        assert!(matches!(e, NoRoom::TooBig { .. }));
        assert!(e.to_string().contains("10.0 GiB"), "{e}");
        let a = pool.join("a", Box::new(|| {}));
        a.reserve(8 << 30, Duration::ZERO).unwrap();
        a.busy(true);
        let b = pool.join("b", Box::new(|| {}));
        let e = b.reserve(4 << 30, Duration::from_millis(20)).unwrap_err();
        assert!(e.to_string().contains("\"a\""), "{e}");
        assert!(!a.evicted(), "a busy model is not asked to go");
        // Gone, its room is free.
        drop(a);
        b.reserve(4 << 30, Duration::ZERO).unwrap();
    }

    #[test]
    fn each_servers_engines_have_a_budget_of_their_own_and_stop_their_own_workers() {
        let (a, b) = (Engines::default(), Engines::default());
        a.pool().set_budget(1 << 30);
        b.pool().set_budget(2 << 30);
        assert_eq!((a.pool().budget(), b.pool().budget()), (1 << 30, 2 << 30));
        // A worker that runs until its queue is closed.
        let worker = |engines: &Engines| {
            let closed = Arc::new(AtomicBool::new(false));
            let seen = closed.clone();
            let thread = std::thread::spawn(move || {
                while !seen.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            let close = closed.clone();
            let close = Box::new(move || close.store(true, Ordering::Relaxed));
            engines.workers().add(close, thread);
            closed
        };
        let (in_a, in_b) = (worker(&a), worker(&b));
        a.shutdown(Duration::from_secs(5));
        assert!(in_a.load(Ordering::Relaxed));
        assert!(
            !in_b.load(Ordering::Relaxed),
            "one server's shutdown stopped another's"
        );
        // The last owner of b's engines gone, its worker is stopped (and waited for).
        let kept = b.clone();
        drop(b);
        assert!(!in_b.load(Ordering::Relaxed));
        drop(kept);
        assert!(in_b.load(Ordering::Relaxed));
    }
}
