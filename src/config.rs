//! The one typed configuration: every setting and limit, from flags or environment variables,
//! read once at startup and passed down. Nothing reads the environment after this.

use crate::limits::Limits;
use clap::Parser;
use std::time::Duration;

/// How the server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// JSON-RPC lines on stdin and stdout: what MCP hosts start.
    Stdio,
}

/// An MCP server whose tools are shaped like model APIs and are answered by the connected
/// host's own model through MCP sampling: no API key.
///
/// Serves MCP over stdio: add it to a sampling-capable host (VS Code, Goose, fast-agent) rather
/// than running it by hand. Logs go to stderr; set RUST_LOG=debug for more.
#[derive(Debug, Clone, Parser)]
#[command(name = "agent-as-model", version)]
pub struct Config {
    /// Longest wait for the host's answer to one sampling request (legacy era), in seconds
    #[arg(long, env = "AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sampling_timeout_secs: u64,

    /// How long a sealed requestState stays valid (2026-07-28 era), in seconds
    #[arg(long, env = "AGENT_AS_MODEL_STATE_TTL_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub state_ttl_secs: u64,

    /// Key that seals requestState (at least 32 bytes); random per process when unset
    #[arg(long, env = "AGENT_AS_MODEL_STATE_KEY", hide_env_values = true)]
    pub state_key: Option<String>,

    /// Older sealing keys still accepted for verification, comma-separated (key rotation)
    #[arg(
        long,
        env = "AGENT_AS_MODEL_STATE_KEYS_PREVIOUS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub state_keys_previous: Vec<String>,

    /// How the server is reached
    #[arg(long, env = "AGENT_AS_MODEL_TRANSPORT", value_enum, default_value_t = Transport::Stdio)]
    pub transport: Transport,

    /// Most tool calls in flight at once; beyond it a call is refused at once with "retry"
    #[arg(long, env = "AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_calls_in_flight: u64,

    #[command(flatten)]
    pub limits: Limits,
}

impl Config {
    pub fn sampling_timeout(&self) -> Duration {
        Duration::from_secs(self.sampling_timeout_secs)
    }

    /// The stdio framing limits: a line holds a call's arguments, or a host's answer with
    /// media in it, plus the envelope.
    pub fn framing(&self) -> crate::transport::Framing {
        let l = &self.limits;
        let media_base64 = l.max_media_bytes.saturating_mul(4) / 3;
        crate::transport::Framing {
            max_line: l
                .max_request_bytes
                .max(media_base64)
                .saturating_add(1024 * 1024),
            max_calls: usize::try_from(self.max_calls_in_flight).unwrap_or(usize::MAX),
        }
    }

    pub fn state_ttl(&self) -> Duration {
        Duration::from_secs(self.state_ttl_secs)
    }

    /// The sealing keys: the active one first, then those that only verify.
    pub fn state_keys(&self) -> Vec<Vec<u8>> {
        let previous = self.state_keys_previous.iter().map(|k| k.trim());
        self.state_key
            .as_deref()
            .into_iter()
            .chain(previous)
            .filter(|k| !k.is_empty())
            .map(|k| k.as_bytes().to_vec())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_active_first_and_blank_ones_are_skipped() {
        let c = Config::try_parse_from([
            "agent-as-model",
            "--state-key",
            "k1",
            "--state-keys-previous",
            "k2, ,k3",
        ])
        .unwrap();
        assert_eq!(
            c.state_keys(),
            vec![b"k1".to_vec(), b"k2".to_vec(), b"k3".to_vec()]
        );
        assert_eq!(c.sampling_timeout(), Duration::from_secs(300));
        assert_eq!(c.transport, Transport::Stdio);
    }
}
