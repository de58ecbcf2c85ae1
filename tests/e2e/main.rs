//! End-to-end tests: the real `agent-as-model` binary over stdio, driven by a scripted host on
//! both protocol eras, plus property tests of the library. One test crate, so the tests link
//! once on a small machine.
//!
//! Tests may unwrap, expect, panic and index (clippy.toml allows it in `#[test]` functions; the
//! helpers here share the allowance below). Sampling is deprecated by SEP-2577, and testing it
//! is the point.
#![allow(
    dead_code,
    deprecated,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

mod anthropic_threads;
mod api_clis;
mod api_letter;
mod api_sdks;
mod audio;
// Built with `--features dynamic-backends` only (scripts/test runs it).
#[cfg(all(
    feature = "dynamic-backends",
    target_os = "linux",
    target_arch = "x86_64"
))]
mod backends;
mod bridge;
mod bridge_limits;
mod build;
mod chat_template;
mod cli;
mod cli_cache;
mod codex_tools;
mod completions;
mod conformance;
mod cursors;
mod edges;
mod embeddings;
mod engine;
mod eras;
mod faults;
mod formats;
mod gemini;
mod hardening;
mod hardening_vi;
mod hosts;
mod http;
mod http_api;
mod http_attacks;
mod http_limits;
mod http_ops;
mod hub;
mod install;
mod launch;
mod litellm;
mod local;
mod local_pool_vi;
mod local_queue;
mod logprobs;
mod metrics;
mod ollama;
mod ollama_hardening;
mod ollama_names;
mod ollama_pull;
mod packaging;
mod pool;
mod prompt_cache;
mod properties;
mod provider;
mod provider_limits;
mod provider_waits;
mod responses_api;
mod responses_store;
mod responses_ws;
mod rich;
mod routing;
mod schema_load;
mod speculative;
mod stops;
mod streaming;
mod structured;
mod templates;
mod tools;
mod transcriptions;
mod ui;
mod vision;
// Built with `--features vulkan` only (scripts/test runs it on Mesa's lavapipe).
#[cfg(feature = "vulkan")]
mod vulkan;
