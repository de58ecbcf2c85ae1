//! Caps on tool calls in flight over HTTP: one for the whole server, one per session. A call
//! over either cap is refused at once (JSON-RPC `-32000`, "retry shortly"), never queued, so a
//! flood from one client neither grows memory nor starves the others. (Over stdio the
//! transport counts calls itself, before the SDK sees them.)

use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The caps one session's calls go through.
#[derive(Clone)]
pub struct Gate {
    global: Arc<Semaphore>,
    global_max: usize,
    session: Arc<Semaphore>,
    session_max: usize,
}

/// A call's place under both caps, given back when the call ends.
pub struct Admitted {
    _global: OwnedSemaphorePermit,
    _session: OwnedSemaphorePermit,
}

/// The server-wide cap, shared by every session's [`Gate`].
#[derive(Clone)]
pub struct GlobalCap {
    slots: Arc<Semaphore>,
    max: usize,
}

impl GlobalCap {
    pub fn new(max: usize) -> Self {
        GlobalCap::shared(GlobalCap::places(max), max)
    }

    /// `max` places for calls, to share between fronts with [`GlobalCap::shared`].
    pub fn places(max: usize) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS)))
    }

    /// The cap over `slots`, which other fronts take places from too.
    pub fn shared(slots: Arc<Semaphore>, max: usize) -> Self {
        GlobalCap {
            slots,
            max: max.clamp(1, Semaphore::MAX_PERMITS),
        }
    }

    /// A gate for one new session, with its own cap of `per_session` calls.
    pub fn session(&self, per_session: usize) -> Gate {
        let session_max = per_session.clamp(1, Semaphore::MAX_PERMITS);
        Gate {
            global: self.slots.clone(),
            global_max: self.max,
            session: Arc::new(Semaphore::new(session_max)),
            session_max,
        }
    }
}

fn busy(message: String) -> ErrorData {
    ErrorData::new(ErrorCode(-32000), message, None)
}

impl Gate {
    /// Admits a call, or says which cap is full.
    pub fn admit(&self) -> Result<Admitted, ErrorData> {
        let session = self.session.clone().try_acquire_owned().map_err(|_| {
            busy(format!(
                "server busy: this session has {} tool calls in flight, the most one session \
                 may have at once (AGENT_AS_MODEL_MAX_CALLS_PER_SESSION); retry shortly",
                self.session_max
            ))
        })?;
        let global = self.global.clone().try_acquire_owned().map_err(|_| {
            busy(format!(
                "server busy: {} tool calls are in flight, the most this server takes at once \
                 (AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT); retry shortly",
                self.global_max
            ))
        })?;
        Ok(Admitted {
            _global: global,
            _session: session,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cap_refuses_with_its_own_name_and_frees_on_drop() {
        let global = GlobalCap::new(3);
        let a = global.session(2);
        let b = global.session(2);
        let first = a.admit().unwrap();
        let _second = a.admit().unwrap();
        let refused = a.admit().err().unwrap();
        assert_eq!(refused.code.0, -32000);
        assert!(refused.message.contains("MAX_CALLS_PER_SESSION"));
        let _third = b.admit().unwrap();
        let full = b.admit().err().unwrap();
        assert!(
            full.message.contains("MAX_CALLS_IN_FLIGHT"),
            "{}",
            full.message
        );
        drop(first);
        assert!(b.admit().is_ok());
    }
}
