//! agent-as-model: an MCP server whose tools are shaped like model APIs (OpenAI chat
//! completions, Anthropic messages, OpenAI Responses, Google Gemini, a raw prompt) and are
//! fulfilled by the connected host's own model through MCP sampling. No API key: the agent is
//! the model.
//!
//! A call flows one way through the crate: a front parses it, the completion service answers
//! it, the front renders the answer.
//!
//! ```text
//! mcp/        the MCP front, and every file that uses rmcp: the handler, stdio framing, the
//!             host's sampling on both eras, progress, MCP content, rmcp's Streamable HTTP
//!             service as a tower service, the reference host and `try`, the bridge
//! http/       the HTTP server, and every file that uses axum or hyper: the listener, the
//!             checks every route shares, `/healthz`, `/mcp` mounted, the model APIs' routes
//! api/        the model APIs without HTTP: a body made its tool's arguments, error envelopes,
//!             each API's stream of events
//! service/    the completion service under every front: route, cap, driver, fallback, finish
//! shapes/     one file per product API: parse arguments -> call::Call, render the API object
//! contract/   schema (compile, validate, budgets), persona, cursor: the checks
//! call        the neutral core: call, mode, turns of blocks, answer, usage, finish reason
//! fulfil/     the pure state machine (strategy, repairs, output) and the event stream
//! backends/   the models this server calls itself: the Model trait, a provider
//! local/      the embedded model on llama.cpp
//! routing/    which model answers: named entries, aliases, fallbacks, caps
//! metrics     what the calls did, for `GET /metrics`: counters, histograms, the models' state
//! config      one typed configuration (command line and environment), passed down
//! launch      `launch`: an agent CLI run against this server on a loopback port
//! ```
//!
//! Nothing in [`call`], [`contract`], [`fulfil`], [`service`], [`backends`] or [`local`]
//! imports rmcp or axum: protocol eras are known in [`mcp`] alone, HTTP in [`http`] alone.
//! [`error::CallError`] is the one error type; each front renders it at its edge. [`pyjson`]
//! writes JSON texts exactly as the original Python server did, so byte comparisons and cursors
//! agree across the two.

pub mod api;
pub mod args;
pub mod backends;
pub mod call;
pub mod config;
pub mod contract;
pub mod error;
pub mod fulfil;
pub mod http;
pub mod launch;
pub mod limits;
pub mod local;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod pyjson;
pub mod retry;
pub mod routing;
pub mod service;
#[cfg(test)]
mod settings_reference;
pub mod shapes;
pub mod wire;

/// Installs rustls's crypto provider (ring) for the process, once, before any HTTP client is
/// built (the provider backend, the model fetch, the bridge's HTTP downstream). Later calls do
/// nothing.
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
