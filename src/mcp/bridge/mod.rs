//! `agent-as-model bridge -- COMMAND ARGS…` (or `--url` for a Streamable HTTP server): an MCP
//! server towards the host and an MCP client towards another MCP server (the downstream), for
//! hosts that cannot sample.
//!
//! Everything the downstream offers — tools, resources and templates, prompts, completions,
//! logging — is passed through unchanged (schemas, annotations, results and errors); the
//! downstream's notifications (list changes, progress, log messages, resource updates) go up and
//! the host's roots changes go down. The downstream's sampling requests are answered here: by
//! the host when it declared
//! sampling on the legacy era (passed up unchanged), otherwise by the embedded model or a
//! provider. The bridge declares sampling (with tools when its model takes them) to the
//! downstream on both eras: legacy requests during a call, and 2026-07-28 input-required rounds,
//! which it answers and retries itself with the `requestState` unchanged. Elicitation and roots
//! go up to a host that supports them, else fail saying so. Every wait is bounded; a downstream
//! that exits is restarted with backoff, and calls meanwhile say so.

mod child;
mod downstream;
mod upstream;

use crate::backends::direct::Model;
use crate::config::{BridgeArgs, Config, DownstreamEra};
use crate::limits::Limits;
use crate::mcp::stdio::Framing;
use downstream::Downstream;
use rmcp::model::ServerPeerInfo as ServerInfo;
use rmcp::service::{
    Peer, RoleClient, RoleServer, RunningService, RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, Transport};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

type Client = RunningService<RoleClient, Downstream>;

/// A handshake with the downstream in progress, whichever transport it runs on.
type Connecting = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<Client, rmcp::service::ClientInitializeError>>
            + Send,
    >,
>;

/// What both sides share: the host's peer once it is known, the model that answers sampling
/// when the host cannot, the limits, and the current downstream connection.
pub struct Shared {
    host: RwLock<Option<Peer<RoleServer>>>,
    /// Answers the downstream's sampling when the host cannot (`--with`).
    model: Arc<dyn Model>,
    /// A models file's models: a sampling request's model preferences pick among them.
    models: Option<crate::routing::Backends>,
    limits: Arc<Limits>,
    link: RwLock<Link>,
    timeout: Duration,
    /// The host's requests in flight downstream: a downstream's sampling must belong to one.
    host_requests: std::sync::atomic::AtomicUsize,
    /// Sampling requests the bridge's model may answer at once (the server's cap on calls).
    sampling: Arc<tokio::sync::Semaphore>,
    sampling_max: usize,
    /// Notifications on their way up to the host; past [`MAX_PENDING_NOTES`], progress and log
    /// messages are dropped (said once in the log).
    pending_notes: std::sync::atomic::AtomicUsize,
    dropped_notes: std::sync::atomic::AtomicBool,
    /// Longest line read from a downstream process (the server's own stdio limit).
    max_line: usize,
}

/// Notifications waiting for the host at once before progress and log messages are dropped.
pub const MAX_PENDING_NOTES: usize = 256;

/// A request of the host's, counted while it is in flight downstream.
pub struct HostRequest<'a>(&'a Shared);

impl Drop for HostRequest<'_> {
    fn drop(&mut self) {
        self.0
            .host_requests
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A notification's place in the queue towards the host.
pub struct PendingNote<'a>(&'a Shared);

impl Drop for PendingNote<'_> {
    fn drop(&mut self) {
        self.0
            .pending_notes
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The downstream connection: up, or down with the reason (while it restarts, or for good).
enum Link {
    Up(Arc<Client>),
    Down(String),
}

impl Shared {
    /// The downstream client, or an error saying why there is none.
    fn client(&self) -> Result<Arc<Client>, rmcp::ErrorData> {
        match &*self.link.read().map_err(|_| poisoned())? {
            Link::Up(client) => Ok(client.clone()),
            Link::Down(why) => Err(rmcp::ErrorData::internal_error(why.clone(), None)),
        }
    }

    fn set_link(&self, link: Link) {
        if let Ok(mut l) = self.link.write() {
            *l = link;
        }
    }

    /// The host's peer, from its latest request (or its `initialized`).
    fn remember_host(&self, peer: Peer<RoleServer>) {
        if let Ok(mut host) = self.host.write() {
            *host = Some(peer);
        }
    }

    fn host(&self) -> Option<Peer<RoleServer>> {
        self.host.read().ok().and_then(|h| h.clone())
    }

    /// Counts one of the host's requests while it is in flight.
    fn host_request(&self) -> HostRequest<'_> {
        self.host_requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        HostRequest(self)
    }

    fn serving_host(&self) -> bool {
        self.host_requests.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    /// A place in the queue towards the host for a notification that may be dropped, or `None`
    /// when the queue is full (the first drop is logged).
    fn droppable_note(&self) -> Option<PendingNote<'_>> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.pending_notes.fetch_add(1, SeqCst) >= MAX_PENDING_NOTES {
            self.pending_notes.fetch_sub(1, SeqCst);
            if !self.dropped_notes.swap(true, SeqCst) {
                tracing::warn!(
                    "the downstream server sends notifications faster than the host reads them; \
                     progress and log messages past {MAX_PENDING_NOTES} waiting are dropped"
                );
            }
            return None;
        }
        Some(PendingNote(self))
    }
}

fn poisoned() -> rmcp::ErrorData {
    rmcp::ErrorData::internal_error("the bridge's state is unusable after a panic", None)
}

/// Starts (or reaches) the downstream server and connects to it on the era asked for.
/// Why the bridge has no downstream connection.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("bridge: name the downstream server's command after --, or --url")]
    NoDownstream,
    #[error("cannot start the downstream server {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error(
        "the downstream server {name} did not finish its handshake (initialize or discover) \
         within {} s",
        HANDSHAKE_TIMEOUT.as_secs()
    )]
    Handshake { name: String },
    #[error("cannot connect to the downstream server {name}: {problem}")]
    Connect { name: String, problem: String },
    #[error("the downstream server {name} sent no server information")]
    NoInfo { name: String },
}

async fn connect(
    args: &BridgeArgs,
    shared: &Arc<Shared>,
) -> Result<(Client, Arc<ServerInfo>, CancellationToken), LinkError> {
    let handler = Downstream::new(shared.clone());
    let ended = CancellationToken::new();
    let lifecycle = lifecycle(args.downstream_era);
    let (name, connecting) = match (&args.url, args.command.split_first()) {
        (Some(url), _) => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(token) = args.url_token.as_ref().filter(|t| !t.is_empty()) {
                config = config.auth_header(token.clone());
            }
            let transport =
                Watched::new(StreamableHttpClientTransport::from_config(config), &ended);
            let connecting: Connecting =
                Box::pin(handler.serve_with_lifecycle(transport, lifecycle));
            (url.clone(), connecting)
        }
        (None, Some((program, rest))) => {
            let command = tokio::process::Command::new(program).configure(|c| {
                c.args(rest);
            });
            let transport = child::Child::spawn(command, shared.max_line).map_err(|source| {
                LinkError::Spawn {
                    program: format!("{program:?}"),
                    source,
                }
            })?;
            let transport = Watched::new(transport, &ended);
            let connecting: Connecting =
                Box::pin(handler.serve_with_lifecycle(transport, lifecycle));
            (format!("{program:?}"), connecting)
        }
        (None, None) => return Err(LinkError::NoDownstream),
    };
    let client = tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting)
        .await
        .map_err(|_| LinkError::Handshake { name: name.clone() })?
        .map_err(|e| LinkError::Connect {
            name: name.clone(),
            problem: e.to_string(),
        })?;
    let info = client.peer_info().ok_or(LinkError::NoInfo { name })?;
    Ok((client, info, ended))
}

/// A transport that says when it has ended: the downstream closed it, or the client's service
/// stopped using it (which closes it).
struct Watched<T> {
    inner: T,
    ended: CancellationToken,
}

impl<T> Watched<T> {
    fn new(inner: T, ended: &CancellationToken) -> Self {
        Watched {
            inner,
            ended: ended.clone(),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if message.is_none() {
            self.ended.cancel();
        }
        message
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.inner.close().await;
        self.ended.cancel();
        closed
    }
}

/// How the bridge opens its session with the downstream server.
fn lifecycle(era: DownstreamEra) -> ClientLifecycleMode {
    let modern = rmcp::model::ProtocolVersion::V_2026_07_28;
    let legacy = rmcp::model::ProtocolVersion::V_2025_11_25;
    match era {
        DownstreamEra::Legacy => ClientLifecycleMode::Initialize,
        DownstreamEra::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![modern],
        },
        DownstreamEra::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![modern, legacy.clone()],
            legacy_version: Some(legacy),
        },
    }
}

/// The most downstream sampling requests answered at once: the server's cap on calls.
fn sampling_max(config: &Config) -> usize {
    usize::try_from(config.max_calls_in_flight)
        .unwrap_or(usize::MAX)
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS)
}

/// How long the downstream's handshake may take before the bridge gives up and says why.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the bridge stopped short.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// Its model, or the models file, could not be set up.
    #[error(transparent)]
    Setup(#[from] crate::routing::SetupError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("serving the host: {0}")]
    Serve(Box<dyn std::error::Error>),
}

/// Runs the bridge until the host disconnects; its embedded models run on `engines`.
pub async fn run(
    config: &Config,
    args: &BridgeArgs,
    engines: &crate::local::pool::Engines,
) -> Result<(), BridgeError> {
    let shared = Arc::new(Shared {
        host: RwLock::new(None),
        model: crate::routing::start_with(config, args.with, engines)?.model(),
        models: match &config.models {
            Some(_) => Some(crate::routing::Backends::with_engines(config, engines)?),
            None => None,
        },
        limits: Arc::new(config.limits.clone()),
        link: RwLock::new(Link::Down("the downstream server is starting".into())),
        timeout: Duration::from_secs(args.timeout_secs),
        host_requests: Default::default(),
        sampling: Arc::new(tokio::sync::Semaphore::new(sampling_max(config))),
        sampling_max: sampling_max(config),
        pending_notes: Default::default(),
        dropped_notes: Default::default(),
        max_line: Framing::from_config(config).max_line,
    });
    let (client, info, ended) = connect(args, &shared).await?;
    tracing::info!(server = ?info.server_info, "downstream connected");
    shared.set_link(Link::Up(Arc::new(client)));
    let supervisor = tokio::spawn(supervise(args.clone(), shared.clone(), ended));
    // The host's side is framed and bounded as the server's own stdio is.
    let served = crate::mcp::stdio::serve_stdio(
        |done| upstream::Upstream::new(shared.clone(), info, done),
        Framing::from_config(config),
    )
    .await
    .map_err(BridgeError::Serve);
    supervisor.abort();
    // Ends the downstream process (the child is killed when its transport drops).
    shared.set_link(Link::Down("the bridge stopped".into()));
    served
}

/// Waits for the downstream connection to end (`ended`); then restarts the server with backoff
/// (half a second, doubling to 30 s) up to `args.restarts` times. Calls meanwhile get an error
/// that says so.
async fn supervise(args: BridgeArgs, shared: Arc<Shared>, ended: CancellationToken) {
    let mut restarts = 0u32;
    // The connection being watched; none after a failed restart (which counts as one more).
    let mut watched = Some(ended);
    loop {
        if let Some(ended) = watched.take() {
            ended.cancelled().await;
        }
        if restarts >= args.restarts {
            let why = format!(
                "the downstream server exited and was restarted {restarts} times; the bridge \
                 gave up (--restarts)"
            );
            tracing::error!("{why}");
            shared.set_link(Link::Down(why));
            return;
        }
        restarts += 1;
        let wait = Duration::from_millis(500u64.saturating_mul(1 << restarts.min(6)))
            .min(Duration::from_secs(30));
        tracing::warn!(restarts, ?wait, "the downstream server exited; restarting");
        shared.set_link(Link::Down(format!(
            "the downstream server exited; restarting it (attempt {restarts} of {}), retry shortly",
            args.restarts
        )));
        tokio::time::sleep(wait).await;
        match connect(&args, &shared).await {
            Ok((client, _, ended)) => {
                shared.set_link(Link::Up(Arc::new(client)));
                watched = Some(ended);
            }
            Err(e) => {
                tracing::warn!("{e}");
                shared.set_link(Link::Down(format!("{e}; retrying")));
            }
        }
    }
}
