//! `--model hf:OWNER/REPO/FILE.gguf`: the local model fetched from a Hugging Face endpoint
//! (`HF_ENDPOINT`, `HF_TOKEN`), against a scripted server with the Hub's URL layout: the
//! resolve URL answers a redirect to storage with the file's size and digest, storage breaks
//! off the first download half-way, and the client resumes it. The Gemma 3 file is served, so
//! the model that comes out of the cache must answer.

use crate::common::raw::{Raw, tools_call};
use crate::engine::{LONG, few_shot_paris, gemma};
use crate::local::TURN;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

const TOKEN: &str = "hf_scripted_token_0123456789";
const REPO: &str = "acme/gemma-3-270m-GGUF";
const FILE: &str = "gemma-3-270m-q4_k_m.gguf";
const SIGNATURE: &str = "sig=storage-secret";

/// One request the scripted Hub saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    authorization: Option<String>,
    range: Option<String>,
}

/// A Hub on loopback that serves one file from `/REPO/resolve/main/FILE`.
struct Hub {
    endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Hub {
    fn start(file: Vec<u8>) -> Hub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let digest = hex::encode(Sha256::digest(&file));
        let file = Arc::new(file);
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (file, log, digest) = (file.clone(), log.clone(), digest.clone());
                std::thread::spawn(move || serve(stream, port, &file, &digest, &log));
            }
        });
        Hub {
            endpoint: format!("http://127.0.0.1:{port}"),
            seen,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, port: u16, file: &[u8], digest: &str, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let (method, target) = (
            words.next().unwrap_or("").to_owned(),
            words.next().unwrap_or("").to_owned(),
        );
        let (mut authorization, mut range) = (None, None);
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((&header, ""));
            match name.trim().to_ascii_lowercase().as_str() {
                "authorization" => authorization = Some(value.trim().to_owned()),
                "range" => range = Some(value.trim().to_owned()),
                _ => {}
            }
        }
        log.lock().unwrap().push(Seen {
            method: method.clone(),
            target: target.clone(),
            authorization: authorization.clone(),
            range: range.clone(),
        });
        let head = method == "HEAD";
        let resolve = format!("/{REPO}/resolve/main/");
        let reply = if let Some(name) = target.strip_prefix(&resolve) {
            if authorization.as_deref() != Some(&format!("Bearer {TOKEN}")) {
                "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n".to_owned()
            } else if name != FILE {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
            } else {
                // As the Hub does for a file in Git LFS: a redirect to storage on another
                // host, with the file's size and SHA-256.
                format!(
                    "HTTP/1.1 302 Found\r\nlocation: http://localhost:{port}/storage/{digest}?{SIGNATURE}\r\n\
                     x-linked-etag: \"{digest}\"\r\nx-linked-size: {}\r\ncontent-length: 0\r\n\r\n",
                    file.len()
                )
            }
        } else if target.starts_with("/storage/") && !head {
            let from: usize = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.trim_end_matches('-').parse().ok())
                .unwrap_or(0);
            let rest = file.get(from..).unwrap_or_default();
            let status = if from > 0 {
                format!(
                    "206 Partial Content\r\ncontent-range: bytes {from}-{}/{}",
                    file.len() - 1,
                    file.len()
                )
            } else {
                "200 OK".to_owned()
            };
            let headers = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n",
                rest.len()
            );
            if out.write_all(headers.as_bytes()).is_err() {
                return;
            }
            // The first download breaks off half-way, as a dropped connection does.
            let send = if from == 0 {
                &rest[..rest.len() / 2]
            } else {
                rest
            };
            let _ = out.write_all(send);
            if from == 0 {
                let _ = out.shutdown(std::net::Shutdown::Both);
                return;
            }
            continue;
        } else {
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
        };
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn server(hub: &str, model: &str, token: Option<&str>, cache: &std::path::Path) -> Raw {
    let cache = cache.to_str().unwrap();
    let mut env = vec![
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL", model),
        ("AGENT_AS_MODEL_CACHE_DIR", cache),
        ("HF_ENDPOINT", hub),
        ("RUST_LOG", "info"),
    ];
    env.extend(token.map(|t| ("HF_TOKEN", t)));
    Raw::legacy(&env, json!({}))
}

#[test]
fn a_hub_model_is_fetched_resumed_checked_cached_and_answers() {
    let _turn = TURN.blocking_lock();
    let bytes = std::fs::read(gemma()).unwrap();
    let size = bytes.len();
    let hub = Hub::start(bytes);
    let cache = std::env::temp_dir().join(format!("aam-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let source = format!("hf:{REPO}/{FILE}");

    let mut raw = server(&hub.endpoint, &source, Some(TOKEN), &cache);
    let text = few_shot_paris(&mut raw);
    assert!(text.contains("Paris"), "{text}");
    let stderr = raw.stderr();
    drop(raw);

    let seen = hub.seen();
    let resolve: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.target.contains("/resolve/"))
        .collect();
    assert_eq!(resolve.len(), 1, "{seen:?}");
    assert_eq!(resolve[0].method, "HEAD", "{seen:?}");
    assert_eq!(
        resolve[0].authorization.as_deref(),
        Some(&*format!("Bearer {TOKEN}"))
    );
    let storage: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.target.starts_with("/storage/"))
        .collect();
    assert_eq!(
        storage.len(),
        2,
        "one broken download, one resumed: {seen:?}"
    );
    assert_eq!(storage[0].range, None, "{seen:?}");
    assert_eq!(
        storage[1].range.as_deref(),
        Some(&*format!("bytes={}-", size / 2)),
        "resumed where it broke off: {seen:?}"
    );
    assert!(
        storage.iter().all(|s| s.authorization.is_none()),
        "the token went to storage: {seen:?}"
    );
    let cached = cache.join("models/hf").join(REPO).join(FILE);
    assert_eq!(std::fs::metadata(&cached).unwrap().len() as usize, size);
    assert!(!stderr.contains(TOKEN), "{stderr}");
    assert!(!stderr.contains(SIGNATURE), "{stderr}");

    // Cached: the next start answers without asking the Hub (here, one that is not there).
    let mut raw = server("http://127.0.0.1:9", &source, None, &cache);
    assert!(few_shot_paris(&mut raw).contains("Paris"));
    drop(raw);
    assert_eq!(hub.seen().len(), seen.len(), "the Hub was asked again");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn a_missing_file_and_a_missing_token_are_named() {
    let hub = Hub::start(b"GGUF".to_vec());
    let cache = std::env::temp_dir().join(format!("aam-hub-missing-{}", std::process::id()));
    for (model, token, expected) in [
        (
            format!("hf:{REPO}/missing.gguf"),
            Some(TOKEN),
            "was not found on the Hub",
        ),
        (
            format!("hf:{REPO}/{FILE}"),
            None,
            "needs a Hugging Face token",
        ),
        (
            format!("hf:{REPO}/{FILE}"),
            Some("hf_wrong"),
            "the Hub refused HF_TOKEN",
        ),
    ] {
        let mut raw = server(&hub.endpoint, &model, token, &cache);
        raw.send(&tools_call(
            json!(1),
            "generate",
            json!({"prompt": "Hi", "max_tokens": 2}),
        ));
        let reply = raw.recv_id(&json!(1), LONG).expect("answered");
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        let text = reply["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(expected), "{model}: {text}");
        assert!(text.contains(&model), "{text}");
        assert!(!raw.stderr().contains("hf_wrong"));
    }
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn a_malformed_hub_source_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent-as-model"))
        .args(["--model", "hf:only-an-owner"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--model"), "{stderr}");
    assert!(
        stderr.contains("expected hf:OWNER/REPO/FILE.gguf"),
        "{stderr}"
    );
}
