//! A scripted OpenAI-compatible server, for the provider's faults: it records each request and
//! answers with the next scripted response (status, headers, body), or never answers.

use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
pub enum Reply {
    /// Status, extra headers, body.
    Answer(u16, Vec<(String, String)>, String),
    /// Hold the connection open without answering (until the client closes it).
    Silence,
    /// A 200 whose chunked body never ends.
    Endless,
    /// A 200 stream of server-sent events (each a `data:` payload), `gap` apart; the
    /// connection closes after the last, so a list without `[DONE]` is a stream cut short.
    Events(Vec<String>, Duration),
    /// A 200 stream of the first events, then (once the gate opens, within 60 s) the rest; the
    /// connection closes after the last.
    Gated(Vec<String>, Arc<tokio::sync::Notify>, Vec<String>),
    /// A 200 event stream that begins one `data:` line and never ends it: a byte every 200 ms,
    /// for at most 60 s.
    Trickle,
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Self {
        Reply::Answer(status, Vec::new(), body.to_string())
    }
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Scripted {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    open: Arc<std::sync::atomic::AtomicUsize>,
}

impl Scripted {
    /// Starts the server; the last reply repeats once the script runs out.
    pub async fn start(script: Vec<Reply>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let open: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let count = open.clone();
        // What it receives is kept with the test's requests, when they are kept.
        let kept = super::requests::folder().map(|dir| (dir, url.clone()));
        tokio::spawn(async move {
            let mut n = 0usize;
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let reply = script
                    .get(n)
                    .or(script.last())
                    .cloned()
                    .unwrap_or(Reply::Silence);
                n += 1;
                let log = log.clone();
                let count = count.clone();
                let kept = kept.clone();
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else {
                        return;
                    };
                    if let Some((dir, url)) = kept {
                        keep(&dir, &url, &request);
                    }
                    log.lock().unwrap().push(request);
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    match reply {
                        Reply::Silence => {
                            // Until the client hangs up (a read of 0 bytes), at most 120 s.
                            let mut byte = [0u8; 1];
                            let _ = tokio::time::timeout(
                                Duration::from_secs(120),
                                socket.read(&mut byte),
                            )
                            .await;
                        }
                        Reply::Endless => {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                        Transfer-Encoding: chunked\r\n\r\n";
                            let _ = socket.write_all(head.as_bytes()).await;
                            let chunk = format!("{:x}\r\n{}\r\n", 65536, "x".repeat(65536));
                            let started = std::time::Instant::now();
                            while started.elapsed() < Duration::from_secs(60) {
                                if socket.write_all(chunk.as_bytes()).await.is_err() {
                                    break;
                                }
                            }
                        }
                        Reply::Events(events, gap) => {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                                        Cache-Control: no-cache\r\nConnection: close\r\n\r\n";
                            let _ = socket.write_all(head.as_bytes()).await;
                            for event in events {
                                let line = format!("data: {event}\n\n");
                                if socket.write_all(line.as_bytes()).await.is_err() {
                                    break;
                                }
                                tokio::time::sleep(gap).await;
                            }
                            let _ = socket.shutdown().await;
                        }
                        Reply::Trickle => {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                                        Cache-Control: no-cache\r\nConnection: close\r\n\r\n\
                                        data: {\"choices\": [{\"delta\": {\"content\": \"";
                            let _ = socket.write_all(head.as_bytes()).await;
                            let started = std::time::Instant::now();
                            while started.elapsed() < Duration::from_secs(60) {
                                if socket.write_all(b"x").await.is_err() {
                                    break;
                                }
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                        }
                        Reply::Gated(first, gate, rest) => {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                                        Cache-Control: no-cache\r\nConnection: close\r\n\r\n";
                            let _ = socket.write_all(head.as_bytes()).await;
                            let send = |events: Vec<String>| {
                                events
                                    .into_iter()
                                    .map(|e| format!("data: {e}\n\n"))
                                    .collect::<String>()
                            };
                            let _ = socket.write_all(send(first).as_bytes()).await;
                            let _ = tokio::time::timeout(Duration::from_secs(60), gate.notified())
                                .await;
                            let _ = socket.write_all(send(rest).as_bytes()).await;
                            let _ = socket.shutdown().await;
                        }
                        Reply::Answer(status, headers, body) => {
                            let mut head = format!(
                                "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\n\
                                 Content-Length: {}\r\nConnection: close\r\n",
                                body.len()
                            );
                            for (k, v) in headers {
                                head.push_str(&format!("{k}: {v}\r\n"));
                            }
                            head.push_str("\r\n");
                            let _ = socket.write_all(head.as_bytes()).await;
                            let _ = socket.write_all(body.as_bytes()).await;
                            let _ = socket.shutdown().await;
                        }
                    }
                    count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        Scripted { url, seen, open }
    }

    /// Requests whose connection is still open (received, not yet answered or hung up).
    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Writes a request a scripted provider received into the test's folder of requests.
fn keep(dir: &std::path::Path, url: &str, request: &Seen) {
    let port = url.rsplit(':').next().unwrap_or_default();
    let port = port.split('/').next().unwrap_or_default();
    let text = serde_json::json!({"provider": url, "path": request.path,
        "headers": request.headers, "body": request.body});
    let file = super::requests::file(dir, &format!("provider-{port}"), "json");
    let _ = std::fs::write(
        file,
        serde_json::to_string_pretty(&text).unwrap_or_default(),
    );
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buffer[header_end..]).unwrap_or(Value::Null);
    Some(Seen {
        path,
        headers,
        body,
    })
}

/// A chat completion answering `text`, with usage.
pub fn completion(text: &str) -> Value {
    serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "scripted-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}})
}
