//! Limits on what one call may carry, so that no caller can make the server hold or process
//! unbounded data. Defaults suit real use; each is configurable (see the README).

/// The limits in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Messages (or input items) in one call.
    pub max_messages: usize,
    /// Characters of text in one message.
    pub max_message_chars: usize,
    /// Decoded bytes of one image or audio part.
    pub max_media_bytes: usize,
    /// Tool definitions in one call.
    pub max_tools: usize,
    /// Bytes of one call's arguments (as JSON). The stdio transport drops any line over four
    /// times this without reading it further.
    pub max_request_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_messages: 1000,
            max_message_chars: 1_000_000,
            max_media_bytes: 20 * 1024 * 1024,
            max_tools: 128,
            max_request_bytes: 16 * 1024 * 1024,
        }
    }
}
