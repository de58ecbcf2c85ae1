//! Ollama's HTTP API on the wire: the objects `/api/chat`, `/api/generate`, `/api/tags`,
//! `/api/show`, `/api/ps`, `/api/version` and `/api/pull` answer with, as the `ollama` clients
//! (Python and JavaScript) read them, and the names of the `options` a request may carry. No MCP
//! tool has this shape: a request is translated into chat completions' arguments
//! ([`crate::api::ollama`]) and answered as those are.

use serde::Serialize;
use serde_json::{Map, Value};

/// The Ollama API version `GET /api/version` reports: what this server's API matches (clients
/// refuse servers that report less than they need: VS Code Copilot wants 0.6.4 or later).
pub const VERSION: &str = "0.12.0";

/// The `options` applied to the answer (llama.cpp's samplers from `repeat_penalty` on by the
/// embedded model; a provider's result says which it was not sent).
pub const APPLIED_OPTIONS: [&str; 16] = [
    "num_ctx",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "num_predict",
    "stop",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "min_p",
    "typical_p",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
];

/// A tool call's function: its name and its arguments as an object (not a JSON string, as
/// OpenAI's are).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Function {
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// A tool call in an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub function: Function,
}

/// The assistant's message, whole or a piece of it in a streamed line.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
    /// The model's reasoning (Ollama's `think`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// What the last line (or the whole answer) says of the time taken and the tokens, in
/// nanoseconds and tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Timings {
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: usize,
    pub prompt_eval_duration: u64,
    pub eval_count: usize,
    pub eval_duration: u64,
}

/// One of the likeliest tokens at a place of the answer, as Ollama writes it (`bytes` left
/// out when empty).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<u8>,
}

/// One answer token's log-probability and the likeliest tokens at its place (`logprobs:
/// true`, `top_logprobs`), as Ollama's `logprobs` list has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Logprob {
    pub token: String,
    pub logprob: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<u8>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_logprobs: Vec<TokenLogprob>,
}

/// A line of `/api/chat`'s stream, or its whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatResponse {
    pub model: String,
    pub created_at: String,
    pub message: Message,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<&'static str>,
    /// The log-probabilities of the tokens of this line's text (of the whole answer's), when
    /// asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<Logprob>>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

/// A line of `/api/generate`'s stream, or its whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerateResponse {
    pub model: String,
    pub created_at: String,
    pub response: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<&'static str>,
    /// As [`ChatResponse::logprobs`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<Logprob>>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

/// What a model is, as the lists and `/api/show` say it.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Details {
    pub parent_model: String,
    pub format: String,
    pub family: String,
    pub families: Vec<String>,
    pub parameter_size: String,
    pub quantization_level: String,
}

/// One model of `GET /api/tags`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listed {
    pub name: String,
    pub model: String,
    pub modified_at: String,
    pub size: u64,
    pub digest: String,
    pub details: Details,
}

/// `GET /api/tags`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tags {
    pub models: Vec<Listed>,
}

/// One loaded model of `GET /api/ps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Running {
    pub name: String,
    pub model: String,
    pub size: u64,
    pub digest: String,
    pub details: Details,
    pub expires_at: String,
    pub size_vram: u64,
    pub context_length: usize,
}

/// `GET /api/ps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ps {
    pub models: Vec<Running>,
}

/// `POST /api/show`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Show {
    pub modelfile: String,
    pub parameters: String,
    pub template: String,
    pub details: Details,
    pub model_info: Map<String, Value>,
    pub capabilities: Vec<&'static str>,
    pub modified_at: String,
}

/// A line of `/api/pull`'s progress (Ollama's `ProgressResponse`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PullStatus {
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
}

impl PullStatus {
    /// A status line with no bytes.
    pub fn said(status: impl Into<String>) -> Self {
        PullStatus {
            status: status.into(),
            digest: None,
            total: None,
            completed: None,
        }
    }
}

/// A time as Ollama writes it: RFC 3339 in UTC, with nanoseconds.
pub fn timestamp(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_nanos()
    )
}

/// The date of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A count of parameters as Ollama shows it: `494.03M`, `7.6B`.
pub fn parameter_size(parameters: u64) -> String {
    let p = parameters as f64;
    if parameters >= 1_000_000_000 {
        format!("{:.1}B", p / 1e9)
    } else if parameters >= 1_000_000 {
        format!("{:.2}M", p / 1e6)
    } else if parameters >= 1_000 {
        format!("{:.2}K", p / 1e3)
    } else {
        parameters.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_rfc3339_in_utc_with_nanoseconds() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::new(1_767_225_599, 5);
        assert_eq!(timestamp(at), "2025-12-31T23:59:59.000000005Z");
        assert_eq!(
            timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    #[test]
    fn sizes_read_as_ollama_writes_them() {
        assert_eq!(parameter_size(494_032_768), "494.03M");
        assert_eq!(parameter_size(7_615_616_512), "7.6B");
        assert_eq!(parameter_size(12), "12");
    }

    #[test]
    fn the_last_line_carries_its_timings_beside_the_message() {
        let r = ChatResponse {
            model: "m".into(),
            created_at: "t".into(),
            message: Message {
                role: "assistant",
                ..Message::default()
            },
            done: true,
            done_reason: Some("stop"),
            logprobs: None,
            timings: Some(Timings {
                eval_count: 3,
                ..Timings::default()
            }),
        };
        let v = serde_json::to_value(r).unwrap();
        assert_eq!(v["eval_count"], 3);
        assert_eq!(v["done_reason"], "stop");
        assert_eq!(v["message"], json!({"role": "assistant", "content": ""}));
        let piece = GenerateResponse {
            model: "m".into(),
            created_at: "t".into(),
            response: "a".into(),
            thinking: None,
            done: false,
            done_reason: None,
            logprobs: None,
            timings: None,
        };
        let v = serde_json::to_value(piece).unwrap();
        assert!(v.get("eval_count").is_none() && v.get("done_reason").is_none());
        assert!(v.get("logprobs").is_none());
    }
}
