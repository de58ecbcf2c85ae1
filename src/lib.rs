//! agent-as-model: an MCP server whose tools are shaped like model APIs (OpenAI chat
//! completions, Anthropic messages, OpenAI Responses, Google Gemini, a raw prompt) and are
//! fulfilled by the connected host's own model through MCP sampling. No API key: the agent is
//! the model.
//!
//! A call flows one way through the crate:
//!
//! ```text
//! server      routes tools/call to a shape in the registry; renders errors at the edge
//! shapes/     one file per product API: parse arguments -> call::Call, render call::Reply
//! contract/   schema (compile, validate, budgets), persona, cursor, media: the checks
//! call        the neutral core: call, mode, turns of blocks, answer, usage, finish reason
//! fulfil/     the pure state machine: strategy from backend capabilities, repairs, output
//! backends/   the drivers doing I/O: host sampling on the legacy era and in MRTR rounds,
//!             or a model the server calls itself (a provider; local/, the embedded model)
//! config      one typed configuration (command line and environment), passed down
//! transport   stdio framing: bounded lines, one well-formed reply per request
//! http/       Streamable HTTP at /mcp (rmcp's service on hyper): auth, Host/Origin, health,
//!             capped legacy sessions, request ids; gate caps calls in flight per session
//! host        a reference host answering sampling from a direct backend (`try`)
//! bridge/     another MCP server served to hosts that cannot sample (`bridge -- CMD`)
//! ```
//!
//! Nothing in [`call`], [`contract`] or [`fulfil`] imports a shape, and only [`backends`] knows
//! protocol eras. [`error::CallError`] is the one error type; the server turns it into an
//! `isError` result or, for protocol faults, a JSON-RPC error. [`pyjson`] writes JSON texts
//! exactly as the original Python server did, so byte comparisons and cursors agree across the
//! two.

pub mod args;
pub mod backends;
pub mod bridge;
pub mod call;
pub mod config;
pub mod contract;
pub mod error;
pub mod fulfil;
pub mod gate;
pub mod host;
pub mod http;
pub mod limits;
pub mod local;
pub mod logging;
pub mod pyjson;
pub mod retry;
pub mod routing;
pub mod server;
pub mod shapes;
pub mod transport;
pub mod try_command;
pub mod wire;

/// Installs rustls's crypto provider (ring) for the process, once, before any HTTP client is
/// built (the provider backend, the model fetch, the bridge's HTTP downstream). Later calls do
/// nothing.
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
