//! The link to a downstream server the bridge starts: its stdin and stdout as JSON-RPC lines,
//! read with the bounds of the server's own stdio. A line longer than the limit is never held;
//! when its head shows it is the answer to one of the bridge's requests, that request fails at
//! once with an error saying why (the host's call is answered instead of waiting out the
//! timeout), and a request of the downstream's that is too long is refused to it.

use crate::mcp::stdio::{Head, Sort, read_line};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use std::future::Future;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, mpsc};

/// Messages read ahead of the SDK before the child's output is left unread (back-pressure).
const READ_AHEAD: usize = 64;

/// A running downstream process, killed when this is dropped.
pub struct Child {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    reader: tokio::task::JoinHandle<()>,
    _process: tokio::process::Child,
}

impl Child {
    /// Starts `command` with piped stdin and stdout (stderr is the bridge's), reading lines of
    /// at most `max_line` bytes.
    pub fn spawn(mut command: Command, max_line: usize) -> io::Result<Child> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut process = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(io::Error::other(
                "the downstream server's pipes were not made",
            ));
        };
        let stdin = Arc::new(Mutex::new(Some(stdin)));
        let (to_sdk, incoming) = mpsc::channel(READ_AHEAD);
        let reader = tokio::spawn(read(stdout, to_sdk, stdin.clone(), max_line));
        Ok(Child {
            incoming,
            stdin,
            reader,
            _process: process,
        })
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Writes one line to the child's stdin; an error once it is closed.
async fn write_line(stdin: &Mutex<Option<ChildStdin>>, line: &[u8]) -> io::Result<()> {
    let mut stdin = stdin.lock().await;
    let pipe = stdin.as_mut().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotConnected,
            "the downstream server's input is closed",
        )
    })?;
    pipe.write_all(line).await?;
    pipe.flush().await
}

/// Reads the child's stdout until it ends, handing each message to the SDK.
async fn read(
    stdout: ChildStdout,
    to_sdk: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    max_line: usize,
) {
    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        let read = match read_line(&mut stdout, max_line, &mut line).await {
            Ok(Some(read)) => read,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "reading the downstream server's output failed");
                return;
            }
        };
        let message = match read {
            Ok(()) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(()) => match serde_json::from_slice(&line) {
                Ok(message) => message,
                Err(e) => {
                    tracing::warn!(error = %e, "the downstream server sent a line that is not a JSON-RPC message; skipped");
                    continue;
                }
            },
            Err(head) => match oversized(&head, max_line) {
                Oversized::Answer(message) => *message,
                Oversized::Request(refusal) => {
                    let _ = write_line(&stdin, &refusal).await;
                    continue;
                }
                Oversized::Other => {
                    tracing::warn!(
                        max_line,
                        "the downstream server sent a message longer than the limit; skipped"
                    );
                    continue;
                }
            },
        };
        if to_sdk.send(message).await.is_err() {
            return;
        }
    }
}

enum Oversized {
    /// The answer to one of the bridge's requests, replaced by an error for that request.
    Answer(Box<RxJsonRpcMessage<RoleClient>>),
    /// A request of the downstream's: the refusal to write back to it.
    Request(Vec<u8>),
    /// A notification, or no id to be seen: dropped.
    Other,
}

/// What to do with a line over the limit, judged by its first bytes.
fn oversized(head: &[u8], max_line: usize) -> Oversized {
    let head = Head::of(head);
    let Some(id) = head.id else {
        return Oversized::Other;
    };
    match head.sort {
        Sort::Response => match serde_json::from_value(answer_too_long(id, max_line)) {
            Ok(message) => Oversized::Answer(Box::new(message)),
            Err(_) => Oversized::Other,
        },
        Sort::Request => {
            let refusal = json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32600,
                "message": format!("invalid request: the message is longer than {max_line} \
                                    bytes, the most the bridge reads \
                                    (AGENT_AS_MODEL_MAX_REQUEST_BYTES); it was not read")}});
            let mut line = serde_json::to_vec(&refusal).unwrap_or_default();
            line.push(b'\n');
            Oversized::Request(line)
        }
        Sort::Unknown => Oversized::Other,
    }
}

/// The error that stands for an answer too long to read.
fn answer_too_long(id: Value, max_line: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": -32603,
        "message": format!("the downstream server's answer is longer than {max_line} bytes, the \
                            most the bridge reads (AGENT_AS_MODEL_MAX_REQUEST_BYTES, \
                            AGENT_AS_MODEL_MAX_MEDIA_BYTES); it was not read")}})
}

impl Transport<RoleClient> for Child {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let stdin = self.stdin.clone();
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write_line(&stdin, &line).await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl Future<Output = io::Result<()>> + Send {
        self.incoming.close();
        let stdin = self.stdin.clone();
        async move {
            // Closing its input is how a stdio server is asked to exit.
            stdin.lock().await.take();
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_answer_becomes_an_error_for_its_request() {
        let head = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"xxxx"#;
        let Oversized::Answer(message) = oversized(head, 100) else {
            panic!("not taken for an answer");
        };
        let v = serde_json::to_value(&message).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], -32603);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("longer than 100 bytes")
        );
    }

    #[test]
    fn an_oversized_request_is_refused_and_a_notification_dropped() {
        let head = br#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"#;
        let Oversized::Request(line) = oversized(head, 100) else {
            panic!("not taken for a request");
        };
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (json!("s1"), json!(-32600))
        );
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"#;
        assert!(matches!(oversized(note, 100), Oversized::Other));
    }
}
