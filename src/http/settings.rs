//! The HTTP server's settings, read from the configuration.

use crate::config::Config;
use std::net::SocketAddr;
use std::time::Duration;

/// How the HTTP server listens and whom it lets in.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    pub bind: SocketAddr,
    /// `Host` values accepted (names or `name:port`; a name alone is any port); loopback names
    /// by default.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers (`scheme://host:port`, `scheme://host:*`); none
    /// means any request carrying an `Origin` header is refused.
    pub allowed_origins: Vec<String>,
    /// A token every request (but `/healthz`) must carry.
    pub auth_token: Option<String>,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// How long in-flight requests may finish after a stop signal.
    pub shutdown_grace: Duration,
    /// Most connections held open; one more is answered at once and closed.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers (and stay idle between
    /// requests).
    pub header_timeout: Duration,
    /// How long a request body may go without a byte arriving.
    pub body_timeout: Duration,
    /// How long a whole request body may take.
    pub body_deadline: Duration,
    /// Most bytes of request bodies held at once, across every connection: their text, what
    /// parsing it builds, and the copies a call holds until its answer is sent.
    pub max_body_buffer: usize,
    /// Most JSON values one request body may hold.
    pub max_json_values: usize,
    /// How long an answer waits for a client that reads none of it.
    pub write_timeout: Duration,
    /// How long a Responses WebSocket waits between creates.
    pub websocket_idle: Duration,
    /// SIGTERM and Ctrl-C stop the server (not while `launch` runs a CLI in the terminal, which
    /// takes Ctrl-C for itself).
    pub signals: bool,
}

impl HttpSettings {
    /// The HTTP server's settings, when `--http` is given.
    pub fn from_config(config: &Config) -> Option<HttpSettings> {
        let bind = config.http?;
        let mut hosts: Vec<String> = if config.allowed_hosts.is_empty() {
            ["localhost", "127.0.0.1", "::1", "[::1]"]
                .map(str::to_owned)
                .to_vec()
        } else {
            config
                .allowed_hosts
                .iter()
                // `name:*` is the name on any port, as is a name without one.
                .map(|h| h.trim().trim_end_matches(":*").to_owned())
                .collect()
        };
        if config.allowed_hosts.is_empty() {
            hosts.push(bind.ip().to_string());
        }
        Some(HttpSettings {
            bind,
            allowed_hosts: hosts,
            allowed_origins: origins(config, bind),
            auth_token: config.auth_token.clone().filter(|t| !t.is_empty()),
            max_body: config.limits.max_request_bytes.saturating_add(1024 * 1024),
            shutdown_grace: Duration::from_secs(10),
            max_connections: config
                .max_connections
                .map_or_else(default_max_connections, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
            header_timeout: Duration::from_secs(config.header_timeout_secs),
            body_timeout: Duration::from_secs(config.body_timeout_secs),
            body_deadline: Duration::from_secs(config.body_deadline_secs),
            max_body_buffer: usize::try_from(config.max_body_buffer_bytes).unwrap_or(usize::MAX),
            max_json_values: usize::try_from(config.max_json_values).unwrap_or(usize::MAX),
            write_timeout: Duration::from_secs(config.stream_write_timeout_secs),
            websocket_idle: Duration::from_secs(config.websocket_idle_secs),
            signals: true,
        })
    }
}

/// Origins accepted over HTTP: those given, or else pages served by this very address (a
/// loopback name on the listening port), which a rebinding attack cannot forge.
fn origins(config: &Config, bind: SocketAddr) -> Vec<String> {
    if !config.allowed_origins.is_empty() {
        return config
            .allowed_origins
            .iter()
            .map(|o| o.trim().to_owned())
            .collect();
    }
    let port = bind.port();
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|host| ["http", "https"].map(|s| format!("{s}://{host}:{port}")))
        .collect()
}

#[cfg(unix)]
fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and reads nothing else.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0;
    if !read {
        return 512;
    }
    usize::try_from(limit.rlim_cur / 2)
        .unwrap_or(4096)
        .clamp(16, 4096)
}

/// Windows has no descriptor limit of this kind (sockets are handles).
#[cfg(not(unix))]
fn default_max_connections() -> usize {
    1024
}
