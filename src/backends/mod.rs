//! Backends: the drivers that do the I/O of fulfilment. Each runs the pure
//! [`crate::fulfil::Machine`], declares what its model can take, and turns the machine's
//! attempts into requests and the model's answers into neutral completions.
//!
//! The host's model through MCP sampling, on both protocol eras: [`sampling`] is the driver,
//! [`legacy`] sends `sampling/createMessage` during the tool call, [`mrtr`] seals the state of
//! 2026-07-28 input-required rounds. Models this server calls itself: [`direct`] is their
//! driver and trait, [`provider`] an OpenAI-compatible API, [`crate::local`] the embedded
//! model.

pub mod direct;
pub mod driver;
pub mod legacy;
pub mod mrtr;
pub mod progress;
pub mod provider;
pub mod sampling;
pub mod stream;
