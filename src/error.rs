//! One error type for a tool call, turned into an `isError` result or a JSON-RPC error at the
//! edge (`server.rs`). Every message names the field or location and what was expected.

use rmcp::ErrorData;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The caller's arguments are wrong; nothing was sent to the host.
    #[error("invalid argument {0}")]
    Invalid(String),
    /// The host did not produce a usable completion.
    #[error("host sampling failed: {0}")]
    Host(String),
    /// The host answered, but the answer breaks the call's contract (schema, persona).
    #[error("completion rejected: {0}")]
    Rejected(String),
    /// A protocol-level failure, answered as a JSON-RPC error (sealed state, capabilities).
    #[error("{}", .0.message)]
    Protocol(ErrorData),
}

pub type CallResult<T> = Result<T, CallError>;

impl CallError {
    /// `path: expected <what>, got <kind of value>`.
    pub fn expected(path: &str, what: &str, got: &Value) -> Self {
        CallError::Invalid(format!("`{path}`: expected {what}, got {}", describe(got)))
    }

    /// `path: <message>`.
    pub fn at(path: &str, message: impl std::fmt::Display) -> Self {
        CallError::Invalid(format!("`{path}`: {message}"))
    }
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
