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
pub mod legacy;
pub mod mrtr;
pub mod provider;
pub mod sampling;
pub mod stream;

use crate::config::Config;
use std::sync::Arc;

/// A direct backend, started: the embedded model (it begins loading at once) or the configured
/// provider.
pub fn start(config: &Config, local: bool) -> Result<Arc<dyn direct::Model>, String> {
    if local {
        Ok(Arc::new(crate::local::Local::start(
            config.local_settings(),
            None,
        )?))
    } else {
        Ok(Arc::new(provider::Provider::new(
            config.provider_settings()?,
        )?))
    }
}
