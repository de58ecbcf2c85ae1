//! The MCP front: every file that speaks MCP through rmcp. The handler ([`server`]) parses a
//! `tools/call` and hands it to the completion service, and [`result`] writes the tool's result
//! from the answer; stdio framing ([`stdio`]); the host's
//! sampling on both protocol eras ([`sampling`], [`legacy`], [`mrtr`]); progress notifications
//! ([`progress`]); MCP content ([`wire`]); the per-session call cap ([`gate`]); rmcp's
//! Streamable HTTP service with capped legacy sessions, as a tower service the HTTP server
//! mounts at `/mcp` ([`streamable`], [`sessions`]); the reference host and `try` ([`host`],
//! [`try_command`]); the bridge ([`bridge`]).

pub mod bridge;
pub mod gate;
pub mod host;
pub mod legacy;
pub mod mrtr;
pub mod progress;
pub mod result;
pub mod sampling;
pub mod server;
mod sessions;
pub mod stdio;
pub mod streamable;
pub mod try_command;
pub mod wire;
