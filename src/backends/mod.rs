//! Backends: the I/O of fulfilment. [`driver`] runs the pure [`crate::fulfil::Machine`] for
//! every call and turns its attempts into requests and the model's answers into neutral
//! completions, telling a [`crate::fulfil::live::Live`] what happens ([`progress`] reports it
//! to an MCP peer).
//!
//! The host's model through MCP sampling, on both protocol eras: [`sampling`] says what the
//! host can take and builds the request, [`legacy`] sends `sampling/createMessage` during the
//! tool call, [`mrtr`] seals the state of 2026-07-28 input-required rounds. Models this server
//! calls itself: [`direct`] is their trait, [`provider`] an OpenAI-compatible API (streamed
//! with [`stream`]), [`crate::local`] the embedded model.

mod answer;
pub mod direct;
pub mod provider;
pub mod stream;
