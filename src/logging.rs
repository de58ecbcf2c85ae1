//! Logging to stderr with every line bounded: values from clients and hosts (tool names,
//! messages the SDK prints at debug level) can be megabytes, and a log line never is.

use std::io::Write;

/// Longest log line written, in bytes; the rest of a longer one is replaced by a note.
pub const MAX_LOG_LINE: usize = 2048;

/// A `MakeWriter` for stderr that cuts each event to [`MAX_LOG_LINE`] bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClippedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for ClippedStderr {
    type Writer = ClippedStderr;

    fn make_writer(&'a self) -> Self::Writer {
        ClippedStderr
    }
}

impl Write for ClippedStderr {
    /// One call carries one formatted event.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut err = std::io::stderr().lock();
        match buf.get(..MAX_LOG_LINE) {
            Some(head) if buf.len() > MAX_LOG_LINE => {
                err.write_all(head)?;
                writeln!(err, " … ({} more bytes cut)", buf.len() - MAX_LOG_LINE)?;
            }
            _ => err.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The log filter: `RUST_LOG` (else `warn`, `info` for JSON lines), with llama.cpp's lines at
/// `error` unless it names their target.
fn filter_directives(asked: Option<&str>, json: bool) -> String {
    let base = asked.unwrap_or(if json { "info" } else { "warn" });
    if base.contains(LLAMA_TARGET) {
        base.to_owned()
    } else {
        format!("{base},{LLAMA_TARGET}=error")
    }
}

/// The target llama.cpp's log lines come under.
const LLAMA_TARGET: &str = "llama-cpp-2";

/// Logs to stderr at `RUST_LOG` (default `warn`, or `info` for JSON lines, which carry the
/// per-call records operators collect), without colour, lines bounded. llama.cpp's own lines
/// (target `llama-cpp-2`: hundreds at `info` for each model loaded) show from `error` unless
/// `RUST_LOG` names the target.
pub fn init(format: crate::config::LogFormat) {
    let json = format == crate::config::LogFormat::Json;
    let asked = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let directives = filter_directives(asked.as_deref(), json);
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter_directives(None, json)));
    let builder = tracing_subscriber::fmt()
        .with_writer(ClippedStderr)
        .with_ansi(false)
        .with_env_filter(filter);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        builder.init();
    }
}
