//! Legacy (stateful) sessions with a cap, for [`super::streamable`]: rmcp's local session
//! manager, which already closes a session after a quiet spell (`keep_alive`), behind a count
//! of the sessions it holds. A new session past the cap is refused; the sessions there keep
//! working.

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use std::time::Duration;

/// rmcp's local sessions, at most `max` of them at once.
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
    /// Serialises creation, so the count and the insert agree.
    creating: tokio::sync::Mutex<()>,
}

/// Why a session was not made or not reached.
#[derive(Debug)]
pub enum SessionsError {
    Full(usize),
    Inner(LocalSessionManagerError),
}

impl std::fmt::Display for SessionsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionsError::Full(max) => write!(
                f,
                "session limit reached: this server holds at most {max} sessions \
                 (AGENT_AS_MODEL_MAX_SESSIONS); retry later, or use protocol 2026-07-28, \
                 which needs no session"
            ),
            SessionsError::Inner(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SessionsError {}

impl From<LocalSessionManagerError> for SessionsError {
    fn from(e: LocalSessionManagerError) -> Self {
        SessionsError::Inner(e)
    }
}

impl CappedSessions {
    /// At most `max` sessions, each closed after `idle` without a message.
    pub fn new(max: usize, idle: Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        CappedSessions {
            inner,
            max: max.max(1),
            creating: tokio::sync::Mutex::new(()),
        }
    }

    /// Sessions held now.
    pub async fn count(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// Whether a new session would be refused.
    pub async fn full(&self) -> bool {
        self.count().await >= self.max
    }
}

type Sse = ServerSseMessage;

impl SessionManager for CappedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _one_at_a_time = self.creating.lock().await;
        if self.count().await >= self.max {
            tracing::warn!(
                max = self.max,
                "session refused: the session cap is reached"
            );
            return Err(SessionsError::Full(self.max));
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = Sse> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = Sse> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = Sse> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }

    fn event_store(
        &self,
    ) -> Option<std::sync::Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>>
    {
        self.inner.event_store()
    }
}
