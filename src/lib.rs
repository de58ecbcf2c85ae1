//! agent-as-model: an MCP server whose tools are shaped like model APIs (OpenAI chat
//! completions, Anthropic messages, OpenAI Responses, a raw prompt) and are fulfilled by the
//! connected host's own model through MCP sampling. No API key: the agent is the model.
//!
//! A call flows one way through the crate. [`server`] receives `tools/call` and hands the
//! arguments to a product shape in [`shapes`], which parses them (pure, no I/O) into a neutral
//! [`completion`] request wrapped in a [`shapes::Call`]; the checks of [`contract`] (persona
//! input, cursor, schemas) run during parsing, before anything is sent. [`fulfil`] is the only
//! place that knows protocol eras: on the legacy era it sends `sampling/createMessage` and waits,
//! on 2026-07-28 it returns an `InputRequiredResult` with a sealed `requestState` and reads the
//! answer on the retry. The answer is interpreted by [`contract::output`] (structured output
//! validation and repair), checked against the persona, given a cursor, and rendered by the
//! shape. [`error::CallError`] is the one error type; the server turns it into an `isError`
//! result or, for protocol faults, a JSON-RPC error. [`pyjson`] writes JSON texts exactly as the
//! original Python server did, so byte comparisons and cursors agree across the two.

#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod args;
pub mod completion;
pub mod contract;
pub mod error;
pub mod fulfil;
pub mod limits;
pub mod pyjson;
pub mod server;
pub mod shapes;
