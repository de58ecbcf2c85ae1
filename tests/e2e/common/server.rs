//! The one way the tests start the `agent-as-model` binary: [`Server`] collects its arguments,
//! environment and log, then gives the command to run (over stdio, or once for its output) or
//! starts it on HTTP on a free loopback port and waits until `/healthz` answers. The variables
//! and arguments go to the process in the order they were given (a later one wins), as the
//! hand-made spawns it replaces set them.

use super::{Killed, free_port, http_client};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_agent-as-model");

/// How the HTTP server is told its address.
#[derive(Debug, Clone, Copy)]
enum Listen {
    /// `AGENT_AS_MODEL_HTTP=127.0.0.1:PORT`.
    Env,
    /// `--http 127.0.0.1:PORT`, before the other arguments.
    Flag,
}

/// Where the server's log (its stderr) goes.
enum Log {
    Null,
    File(PathBuf),
    Stdio(Stdio),
}

/// The binary, its arguments and environment, and (for HTTP) where its log goes and how long it
/// may take to answer `/healthz`.
pub struct Server {
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    log: Log,
    listen: Listen,
    ready_within: Duration,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    /// The binary, nothing set (the environment is this process's).
    pub fn new() -> Self {
        Server {
            args: Vec::new(),
            env: Vec::new(),
            log: Log::Null,
            listen: Listen::Env,
            ready_within: Duration::from_secs(20),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(
        mut self,
        key: impl AsRef<std::ffi::OsStr>,
        value: impl AsRef<std::ffi::OsStr>,
    ) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Each `(key, value)` of `env`, in order.
    pub fn envs(mut self, env: &[(&str, &str)]) -> Self {
        for (k, v) in env {
            self = self.env(k, v);
        }
        self
    }

    /// The variable unset, though this process has it.
    pub fn env_remove(mut self, key: impl AsRef<std::ffi::OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// `RUST_LOG`.
    pub fn log_level(self, filter: &str) -> Self {
        self.env("RUST_LOG", filter)
    }

    /// The HTTP server's log into `path` (else it is dropped).
    pub fn log_file(mut self, path: &Path) -> Self {
        self.log = Log::File(path.to_owned());
        self
    }

    /// The HTTP server's log to `stderr` (else it is dropped).
    pub fn stderr(mut self, stderr: Stdio) -> Self {
        self.log = Log::Stdio(stderr);
        self
    }

    /// The HTTP address as `--http` before the other arguments, not as `AGENT_AS_MODEL_HTTP`.
    pub fn http_flag(mut self) -> Self {
        self.listen = Listen::Flag;
        self
    }

    /// How long the HTTP server may take to answer `/healthz` (20 s unless told; a server that
    /// loads a model before it listens needs longer). A bound on a wait, not a measurement.
    pub fn ready_within(mut self, bound: Duration) -> Self {
        self.ready_within = bound;
        self
    }

    fn apply(
        &self,
        args: &[OsString],
        env: &[(OsString, Option<OsString>)],
    ) -> std::process::Command {
        let mut command = std::process::Command::new(BIN);
        command.args(args);
        for (k, v) in env {
            match v {
                Some(v) => command.env(k, v),
                None => command.env_remove(k),
            };
        }
        command
    }

    /// The command (arguments and environment set; stdio as the caller sets it).
    pub fn command(&self) -> std::process::Command {
        self.apply(&self.args, &self.env)
    }

    /// The same command for tokio (for an MCP client over stdio).
    pub fn tokio_command(&self) -> tokio::process::Command {
        tokio::process::Command::from(self.command())
    }

    /// Starts it on HTTP at a free loopback port, its stdin and stdout closed, and waits until
    /// `/healthz` answers 200; panics with its log if it exits first or does not answer in time.
    pub async fn http(self) -> HttpServer {
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let mut args = Vec::new();
        let mut env = Vec::new();
        match self.listen {
            Listen::Env => env.push(("AGENT_AS_MODEL_HTTP".into(), Some(address.clone().into()))),
            Listen::Flag => args.extend(["--http".into(), OsString::from(&address)]),
        }
        args.extend(self.args.iter().cloned());
        env.extend(self.env.iter().cloned());
        let mut command = self.apply(&args, &env);
        let (stderr, log) = match self.log {
            Log::Null => (Stdio::null(), None),
            Log::File(path) => (
                Stdio::from(std::fs::File::create(&path).unwrap()),
                Some(path),
            ),
            Log::Stdio(stdio) => (stdio, None),
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let mut server = HttpServer {
            child: Killed(command.spawn().expect("spawn agent-as-model")),
            port,
            url: format!("http://{address}"),
            log,
        };
        let deadline = Instant::now() + self.ready_within;
        loop {
            if let Some(status) = server.child.0.try_wait().unwrap() {
                panic!(
                    "the server exited ({status}) before it answered /healthz:\n{}",
                    server.log()
                );
            }
            if let Ok(r) = http_client()
                .get(format!("{}/healthz", server.url))
                .send()
                .await
                && r.status() == 200
            {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not answer /healthz within {:?}:\n{}",
                self.ready_within,
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A server started on HTTP, killed when dropped.
pub struct HttpServer {
    pub child: Killed,
    pub port: u16,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its log file, when it writes one.
    pub log: Option<PathBuf>,
}

impl HttpServer {
    /// Its log so far (empty when it writes none to a file).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}
