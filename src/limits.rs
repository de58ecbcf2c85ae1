//! Limits on what one call may carry, so that no caller can make the server hold or process
//! unbounded data. Defaults suit real use; each is a flag and an environment variable.

/// A limit's value that is not a positive whole number.
#[derive(Debug, thiserror::Error)]
#[error("expected a positive whole number, got {0:?}")]
pub struct NotPositive(String);

/// A positive whole number (a limit of 0 would refuse everything).
fn positive(s: &str) -> Result<usize, NotPositive> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(NotPositive(s.to_owned())),
    }
}

/// The limits in force.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Limits {
    /// Most messages (or input items) in one call
    #[arg(long, env = "AGENT_AS_MODEL_MAX_MESSAGES", default_value_t = 1000, value_parser = positive)]
    pub max_messages: usize,
    /// Most characters of text in one message
    #[arg(long, env = "AGENT_AS_MODEL_MAX_MESSAGE_CHARS", default_value_t = 1_000_000, value_parser = positive)]
    pub max_message_chars: usize,
    /// Largest image or audio part, in decoded bytes
    #[arg(long, env = "AGENT_AS_MODEL_MAX_MEDIA_BYTES", default_value_t = 20 * 1024 * 1024, value_parser = positive)]
    pub max_media_bytes: usize,
    /// Most pixels (width × height) of one image, read from its header before any pixel is
    /// decoded (an image that says it is larger is refused without being decoded)
    #[arg(long, env = "AGENT_AS_MODEL_MAX_MEDIA_PIXELS", default_value_t = 16_777_216, value_parser = positive)]
    pub max_media_pixels: usize,
    /// Most image and audio parts in one call
    #[arg(long, env = "AGENT_AS_MODEL_MAX_MEDIA_PARTS", default_value_t = 32, value_parser = positive)]
    pub max_media_parts: usize,
    /// Longest audio part, in seconds: read from a WAV's header before it is decoded, counted
    /// while an MP3 is decoded (which stops as soon as it passes)
    #[arg(long, env = "AGENT_AS_MODEL_MAX_AUDIO_SECONDS", default_value_t = 600, value_parser = positive)]
    pub max_audio_seconds: usize,
    /// Most tool definitions in one call
    #[arg(long, env = "AGENT_AS_MODEL_MAX_TOOLS", default_value_t = 128, value_parser = positive)]
    pub max_tools: usize,
    /// Largest arguments of one tool call, in bytes of JSON. A stdio line longer than this or
    /// the base64 of the media limit, whichever is larger, plus 1 MiB, is not read (a request
    /// gets -32600)
    #[arg(long, env = "AGENT_AS_MODEL_MAX_REQUEST_BYTES", default_value_t = 16 * 1024 * 1024, value_parser = positive)]
    pub max_request_bytes: usize,
    /// Largest JSON Schema accepted, in bytes
    #[arg(long, env = "AGENT_AS_MODEL_MAX_SCHEMA_BYTES", default_value_t = 256 * 1024, value_parser = positive)]
    pub max_schema_bytes: usize,
    /// Deepest nesting accepted in a JSON Schema
    #[arg(long, env = "AGENT_AS_MODEL_MAX_SCHEMA_DEPTH", default_value_t = 64, value_parser = positive)]
    pub max_schema_depth: usize,
    /// Most stop sequences in one call (`stop`, `stop_sequences`, `stopSequences`)
    #[arg(long, env = "AGENT_AS_MODEL_MAX_STOP_SEQUENCES", default_value_t = 16, value_parser = positive)]
    pub max_stop_sequences: usize,
    /// Longest stop sequence, in characters
    #[arg(long, env = "AGENT_AS_MODEL_MAX_STOP_CHARS", default_value_t = 500, value_parser = positive)]
    pub max_stop_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_messages: 1000,
            max_message_chars: 1_000_000,
            max_media_bytes: 20 * 1024 * 1024,
            max_media_pixels: 16_777_216,
            max_media_parts: 32,
            max_audio_seconds: 600,
            max_tools: 128,
            max_request_bytes: 16 * 1024 * 1024,
            max_schema_bytes: 256 * 1024,
            max_schema_depth: 64,
            max_stop_sequences: 16,
            max_stop_chars: 500,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Probe {
        #[command(flatten)]
        limits: Limits,
    }

    #[test]
    fn the_command_line_defaults_are_the_defaults() {
        let probe = Probe::try_parse_from(["x"]).unwrap();
        assert_eq!(probe.limits, Limits::default());
        assert!(Probe::try_parse_from(["x", "--max-tools", "0"]).is_err());
        let p = Probe::try_parse_from(["x", "--max-tools", "3"]).unwrap();
        assert_eq!(p.limits.max_tools, 3);
    }
}
