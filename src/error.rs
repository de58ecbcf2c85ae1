//! Typed errors. A call's error carries what went wrong and where (the argument path); it is
//! rendered only at a front's edge: by the MCP handler as an `isError` result or a JSON-RPC
//! error. Every message names the field or location and what was expected. [`Backend`], the
//! kind of backend an error blames, is here too, below the configuration that reads it.

use serde_json::Value;
use std::time::Duration;

/// Which kind of backend answers: the one name for it on the command line (`--backend`), in a
/// models file (`backend = "…"`), in errors and in results (`"backend"`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Deserialize,
    serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The connected host's own model, through MCP sampling.
    #[default]
    Host,
    /// The embedded model, in this process (fetched once on first use).
    Local,
    /// An OpenAI-compatible API (--provider-url, --provider-model).
    Provider,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Local => "local",
            Backend::Provider => "provider",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// An argument is wrong; nothing was sent. `path` is the argument path, e.g.
    /// `messages[2].content`.
    #[error("invalid argument `{path}`: {problem}")]
    Argument { path: String, problem: String },
    /// The call's `model` names no model of this server.
    #[error("invalid argument `model`: {name:?} names no model of this server; it has {known}")]
    UnknownModel { name: String, known: String },
    /// The arguments are wrong as a whole (two that conflict, a size over a limit); nothing was
    /// sent.
    #[error("invalid argument {0}")]
    Invalid(String),
    /// The host did not produce a usable completion.
    #[error("host sampling failed: {0}")]
    Host(String),
    /// A backend this server calls itself (the local model, a provider) failed.
    #[error("{backend} backend failed: {message}")]
    Backend {
        backend: Backend,
        message: String,
        /// Worth trying another model: the backend could not be reached, was overloaded (429,
        /// 5xx after its retries, a full queue) or timed out; not a refusal of the request.
        transient: bool,
        /// What the backend's peer said besides its words, when one answered.
        upstream: Upstream,
    },
    /// The prompt is longer than the model's context: the caller must send less.
    #[error("{backend} backend failed: {problem}")]
    OverContext {
        backend: Backend,
        tokens: usize,
        context: usize,
        problem: String,
    },
    /// The host answered, but the answer breaks the call's contract (schema, persona).
    #[error("completion rejected: {0}")]
    Rejected(String),
    /// A fault in how the call was made rather than in what it asks (a sealed state that does
    /// not open, a client capability missing): the MCP front answers it as a JSON-RPC error.
    #[error("{}", .0.message)]
    Protocol(Fault),
}

/// What a backend's peer (a provider) answered when it failed, apart from the message: the
/// logs show it where they never show the peer's words at their default level, and the API
/// edge tells the client the wait the peer asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Upstream {
    /// The HTTP status the peer answered.
    pub status: Option<u16>,
    /// The wait before another try the peer asked for and this server did not take.
    pub retry_after: Option<Duration>,
}

/// See [`CallError::Protocol`].
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub message: String,
    /// Machine-readable detail (the capabilities required).
    pub data: Option<Value>,
}

/// The kinds of [`Fault`], each one JSON-RPC error code at the MCP edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The request's parameters cannot be used (`-32602`).
    InvalidParams,
    /// This server could not do its part (`-32603`).
    Internal,
    /// The client lacks a capability the call needs (`-32021`).
    MissingCapability,
}

impl CallError {
    /// A [`CallError::Protocol`] fault.
    pub fn fault(kind: FaultKind, message: impl Into<String>) -> Self {
        CallError::Protocol(Fault {
            kind,
            message: message.into(),
            data: None,
        })
    }
}

/// Who answered an attempt: whose failure an answer nobody can use is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The host's model, through MCP sampling.
    Host,
    /// A backend this server calls itself (`local`, `provider`).
    Backend(Backend),
}

impl Blame {
    /// The failure of whoever answered.
    pub fn failed(self, message: impl Into<String>) -> CallError {
        match self {
            Blame::Host => CallError::Host(message.into()),
            Blame::Backend(backend) => CallError::backend(backend, message),
        }
    }
}

pub type CallResult<T> = Result<T, CallError>;

impl CallError {
    /// `path: expected <what>, got <kind of value>`.
    pub fn expected(path: &str, what: &str, got: &Value) -> Self {
        CallError::at(path, format!("expected {what}, got {}", describe(got)))
    }

    /// `path: <problem>`.
    pub fn at(path: &str, problem: impl std::fmt::Display) -> Self {
        CallError::Argument {
            path: path.to_owned(),
            problem: problem.to_string(),
        }
    }

    /// A failure of the `backend` backend.
    pub fn backend(backend: Backend, message: impl Into<String>) -> Self {
        CallError::Backend {
            backend,
            message: message.into(),
            transient: false,
            upstream: Upstream::default(),
        }
    }

    /// A failure of the `backend` backend that another model might not have (unreachable,
    /// overloaded, too slow).
    pub fn unavailable(backend: Backend, message: impl Into<String>) -> Self {
        CallError::Backend {
            backend,
            message: message.into(),
            transient: true,
            upstream: Upstream::default(),
        }
    }

    /// This error with what the backend's peer answered (a backend failure only).
    pub fn with_upstream(mut self, said: Upstream) -> Self {
        if let CallError::Backend { upstream, .. } = &mut self {
            *upstream = said;
        }
        self
    }

    /// What the backend's peer answered, when this is a backend failure it answered.
    pub fn upstream(&self) -> Upstream {
        match self {
            CallError::Backend { upstream, .. } => *upstream,
            _ => Upstream::default(),
        }
    }

    /// Whether another model might answer where this failed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            CallError::Backend {
                transient: true,
                ..
            }
        )
    }

    /// A short name of the kind of failure, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Argument { .. } | CallError::Invalid(_) | CallError::UnknownModel { .. } => {
                "invalid arguments"
            }
            CallError::Host(_) => "host failure",
            CallError::Backend { .. } | CallError::OverContext { .. } => "backend failure",
            CallError::Rejected(_) => "completion rejected",
            CallError::Protocol(_) => "protocol error",
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the built-in definition of tool {tool} does not parse: {problem}")]
    Definition { tool: String, problem: String },
    #[error("{0}")]
    Key(String),
}

/// Longest client- or host-supplied value echoed into a log line or an error message.
pub const MAX_ECHO_CHARS: usize = 120;

/// `s` cut to [`MAX_ECHO_CHARS`] characters, marked when cut: values from clients and hosts
/// never make a log line or an error long.
pub fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(MAX_ECHO_CHARS) {
        None => std::borrow::Cow::Borrowed(s),
        Some((at, _)) => std::borrow::Cow::Owned(format!(
            "{}… ({} bytes in all)",
            s.get(..at).unwrap_or(""),
            s.len()
        )),
    }
}

/// Longest list of names (models, aliases) an error message carries, in bytes, before the
/// count of those left out: a models file with huge or many names never makes an error long.
pub const MAX_LIST_BYTES: usize = 2000;

/// `items` joined with `", "` while the list stays within `budget` bytes (the first always
/// shown), and how many were left out. Callers [`clip`] each item first.
pub fn bounded_list<S: AsRef<str>>(
    items: impl IntoIterator<Item = S>,
    budget: usize,
) -> (String, usize) {
    let mut list = String::new();
    let mut left_out = 0usize;
    for item in items {
        let item = item.as_ref();
        if left_out > 0 || (!list.is_empty() && list.len() + 2 + item.len() > budget) {
            left_out += 1;
            continue;
        }
        if !list.is_empty() {
            list.push_str(", ");
        }
        list.push_str(item);
    }
    (list, left_out)
}

/// A short description of a JSON value for error messages: its type, and for short strings the
/// value itself.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("string {v}"),
        Value::String(_) => "a string".into(),
        Value::Array(a) => format!("an array of {} item(s)", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_path_and_render_it() {
        let e = CallError::at("messages[0].role", "is required");
        assert!(matches!(&e, CallError::Argument { path, .. } if path == "messages[0].role"));
        assert_eq!(
            e.to_string(),
            "invalid argument `messages[0].role`: is required"
        );
        assert_eq!(clip("short"), "short");
        let long = "x".repeat(10_000);
        let c = clip(&long);
        assert!(c.len() < 200 && c.contains("10000 bytes"), "{c}");
    }

    #[test]
    fn a_list_stops_at_its_budget_and_counts_the_rest() {
        assert_eq!(bounded_list(["a", "b"], 100), ("a, b".to_owned(), 0));
        let names: Vec<String> = (0..1000).map(|i| format!("model-{i}")).collect();
        let (list, left) = bounded_list(&names, 50);
        assert!(
            list.len() <= 50 && list.starts_with("model-0, model-1"),
            "{list}"
        );
        assert_eq!(list.split(", ").count() + left, 1000);
        // The first is shown even when over the budget on its own.
        assert_eq!(bounded_list(["long-name"], 3), ("long-name".to_owned(), 0));
    }
}
