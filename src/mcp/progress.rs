//! A call's [`Live`] state, reported to an MCP peer as `notifications/progress` under the
//! progress token the peer's request carried: by the server to a host following a tool call,
//! and by the bridge to a downstream server following a sampling request it answers itself.

use crate::fulfil::live::{Event, Live};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleClient, RoleServer};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Shortest time between two progress notifications of one request.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// A peer progress notifications can be sent to; `false` once it cannot take them.
pub trait Notify: Clone + Send + Sync + 'static {
    fn progress(&self, note: ProgressNotificationParam) -> impl Future<Output = bool> + Send;
}

impl Notify for Peer<RoleServer> {
    async fn progress(&self, note: ProgressNotificationParam) -> bool {
        self.notify_progress(note).await.is_ok()
    }
}

impl Notify for Peer<RoleClient> {
    async fn progress(&self, note: ProgressNotificationParam) -> bool {
        self.notify_progress(note).await.is_ok()
    }
}

/// Sends one request's progress while its answer is made.
pub struct Reporter {
    pub live: Arc<Live>,
    task: tokio::task::JoinHandle<()>,
}

impl Reporter {
    /// Reports to `peer` under `token`; `None` (nothing to report to) without a token.
    pub fn start(token: Option<ProgressToken>, peer: &impl Notify) -> Option<Reporter> {
        let token = token?;
        let live = Live::new();
        let task = tokio::spawn(report(live.clone(), peer.clone(), token));
        Some(Reporter { live, task })
    }

    /// Stops reporting before the answer is sent, so that no progress follows it.
    pub async fn stop(self) {
        self.live.event(Event::Finished);
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn report(live: Arc<Live>, peer: impl Notify, token: ProgressToken) {
    let mut sent: Option<usize> = None;
    while let Some(now) = live.next().await {
        let progress = now.progress();
        if sent.is_some_and(|last| progress <= last) {
            continue;
        }
        let mut note = ProgressNotificationParam::new(token.clone(), progress as f64)
            .with_message(now.message());
        if let Some(total) = now.total() {
            note = note.with_total(total as f64);
        }
        if !peer.progress(note).await {
            return;
        }
        sent = Some(progress);
        tokio::time::sleep(PROGRESS_EVERY).await;
    }
}
