//! `--model hf:OWNER/REPO/FILE.gguf`: the local model fetched from a Hugging Face endpoint
//! (`HF_ENDPOINT`, `HF_TOKEN`), against a scripted server with the Hub's URL layout: the
//! resolve URL answers a redirect to storage with the file's size and digest, storage breaks
//! off the first download half-way, and the client resumes it. The Gemma 3 file is served, so
//! the model that comes out of the cache must answer. Hostile and racing storage too: a body
//! far past the stated size is stopped at it, and two processes fetching one file at once do
//! not write the same partial download.

use crate::common::raw::{Raw, tools_call};
use crate::engine::{LONG, few_shot_paris, gemma};
use crate::local::TURN;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const TOKEN: &str = "hf_scripted_token_0123456789";
pub(crate) const REPO: &str = "acme/gemma-3-270m-GGUF";
pub(crate) const FILE: &str = "gemma-3-270m-q4_k_m.gguf";
const SIGNATURE: &str = "sig=storage-secret";

/// One request the scripted Hub saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    authorization: Option<String>,
    range: Option<String>,
}

/// How storage sends the file.
#[derive(Clone)]
enum Script {
    /// The first download breaks off half-way, as a dropped connection does; a resumed one
    /// gets the rest.
    BreakOffOnce,
    /// The file and then junk, endlessly (up to [`FLOOD`]), with no length stated: the Hub's
    /// `X-Linked-Size` is the only bound. After each write the largest file under `watch` is
    /// recorded in `largest`, and the bytes sent in `sent`.
    Flood {
        watch: std::path::PathBuf,
        largest: Arc<AtomicU64>,
        sent: Arc<AtomicU64>,
    },
    /// Two clients fetching at once, the way they overlap: the Hub states no digest (only the
    /// size, as for a file outside Git LFS); the first download sends half the file, waits (up
    /// to 5 s) for a second download to begin, then sends the rest; any later download is
    /// answered in full (a server may ignore `Range`) but its body is held until 5 s after
    /// the first ended.
    Racing {
        first_done: Arc<Mutex<Option<Instant>>>,
    },
}

/// What a flooding storage host sends at most.
const FLOOD: u64 = 256 << 20;

/// A Hub on loopback that serves its files from `/REPO/resolve/main/NAME` (the model as
/// [`FILE`]), and lists them at `/api/models/REPO`.
pub(crate) struct Hub {
    pub(crate) endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Hub {
    pub(crate) fn start(file: Vec<u8>) -> Hub {
        Hub::scripted(file, Script::BreakOffOnce)
    }

    fn scripted(file: Vec<u8>, script: Script) -> Hub {
        Hub::serving(vec![(FILE.to_owned(), file)], script)
    }

    /// A Hub whose repository holds `files` (name, bytes).
    fn serving(files: Vec<(String, Vec<u8>)>, script: Script) -> Hub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let files: Arc<Vec<Served>> = Arc::new(
            (files.into_iter())
                .map(|(name, bytes)| Served {
                    digest: hex::encode(Sha256::digest(&bytes)),
                    name,
                    bytes,
                })
                .collect(),
        );
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (files, log, script) = (files.clone(), log.clone(), script.clone());
                std::thread::spawn(move || serve(stream, port, &files, &log, &script));
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

/// A file of the scripted Hub's repository.
struct Served {
    name: String,
    bytes: Vec<u8>,
    digest: String,
}

fn serve(stream: TcpStream, port: u16, files: &[Served], log: &Mutex<Vec<Seen>>, script: &Script) {
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
        let stored = (target.strip_prefix("/storage/"))
            .and_then(|rest| files.iter().find(|f| rest.starts_with(&f.digest)));
        let reply = if target == format!("/api/models/{REPO}") {
            let siblings: Vec<_> = (files.iter())
                .map(|f| serde_json::json!({"rfilename": f.name}))
                .collect();
            let body = serde_json::json!({"id": REPO, "siblings": siblings}).to_string();
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        } else if let Some(name) = target.strip_prefix(&resolve) {
            let found = files.iter().find(|f| f.name == name);
            if authorization.as_deref() != Some(&format!("Bearer {TOKEN}")) {
                "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n".to_owned()
            } else if let Some(Served {
                bytes: file,
                digest,
                ..
            }) = found
            {
                // As the Hub does for a file in Git LFS: a redirect to storage on another
                // host, with the file's size and SHA-256.
                let etag = if matches!(script, Script::Racing { .. }) {
                    String::new()
                } else {
                    format!("x-linked-etag: \"{digest}\"\r\n")
                };
                format!(
                    "HTTP/1.1 302 Found\r\nlocation: http://localhost:{port}/storage/{digest}?{SIGNATURE}\r\n\
                     {etag}x-linked-size: {}\r\ncontent-length: 0\r\n\r\n",
                    file.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
            }
        } else if let Some(Served { bytes: file, .. }) = stored.filter(|_| !head) {
            match script {
                Script::BreakOffOnce => {}
                Script::Flood {
                    watch,
                    largest,
                    sent,
                } => {
                    flood(&mut out, file, watch, largest, sent);
                    return;
                }
                Script::Racing { first_done } => {
                    racing(&mut out, file, log, first_done);
                    return;
                }
            }
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

/// [`Script::Flood`]: a body delimited by closing the connection, so nothing bounds it but the
/// size the Hub stated.
fn flood(out: &mut TcpStream, file: &[u8], watch: &Path, largest: &AtomicU64, sent: &AtomicU64) {
    if out
        .write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
        .is_err()
    {
        return;
    }
    let junk = vec![b'x'; 64 << 10];
    let mut first = true;
    while sent.load(Ordering::SeqCst) < FLOOD {
        let chunk = if first { file } else { &junk };
        first = false;
        if out.write_all(chunk).is_err() {
            return;
        }
        sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        largest.fetch_max(largest_file(watch), Ordering::SeqCst);
    }
    let _ = out.shutdown(std::net::Shutdown::Both);
}

/// The size of the largest file under `dir`.
fn largest_file(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => largest_file(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .max()
        .unwrap_or(0)
}

/// [`Script::Racing`].
fn racing(
    out: &mut TcpStream,
    file: &[u8],
    log: &Mutex<Vec<Seen>>,
    first_done: &Mutex<Option<Instant>>,
) {
    let downloads = || {
        log.lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == "GET" && s.target.starts_with("/storage/"))
            .count()
    };
    let first = downloads() == 1;
    let headers = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        file.len()
    );
    if out.write_all(headers.as_bytes()).is_err() {
        return;
    }
    let waited = Instant::now();
    if first {
        let (head, tail) = file.split_at(file.len() / 2);
        if out.write_all(head).is_err() {
            return;
        }
        while downloads() < 2 && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Let the second client take its answer's headers first.
        std::thread::sleep(Duration::from_millis(500));
        let _ = out.write_all(tail);
        *first_done.lock().unwrap() = Some(Instant::now());
    } else {
        loop {
            let done = *first_done.lock().unwrap();
            if done.is_some_and(|t| t.elapsed() > Duration::from_secs(5))
                || waited.elapsed() > Duration::from_secs(60)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = out.write_all(file);
    }
    let _ = out.shutdown(std::net::Shutdown::Write);
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
fn a_hub_download_stops_at_the_size_the_hub_states() {
    // The Hub states 1 KiB; storage sends that and then junk until the connection closes.
    let cache = std::env::temp_dir().join(format!("aam-hub-flood-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let mut file = b"GGUF".to_vec();
    file.resize(1024, 0);
    let (largest, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let hub = Hub::scripted(
        file,
        Script::Flood {
            watch: cache.clone(),
            largest: largest.clone(),
            sent: sent.clone(),
        },
    );
    let source = format!("hf:{REPO}/{FILE}");
    let mut raw = server(&hub.endpoint, &source, Some(TOKEN), &cache);
    raw.send(&tools_call(
        json!(1),
        "generate",
        json!({"prompt": "Hi", "max_tokens": 2}),
    ));
    let reply = raw.recv_id(&json!(1), LONG).expect("answered");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    let stderr = raw.stderr();
    drop(raw);
    std::thread::sleep(Duration::from_millis(200));
    let (largest, sent) = (largest.load(Ordering::SeqCst), sent.load(Ordering::SeqCst));
    assert!(
        largest <= 1024,
        "the download grew to {largest} bytes on disk; the Hub stated 1024 ({text})"
    );
    assert!(
        sent < FLOOD / 4,
        "the client read on: {sent} bytes sent of at most {FLOOD} ({text})"
    );
    assert!(text.contains(&source), "{text}");
    assert!(text.contains("more than 1024 bytes"), "{text}");
    // Nothing is kept (the lock file, if any, is empty), and the flood is not resumed: one
    // download for each fetch (the worker fetches at start and again for the call).
    assert_eq!(largest_file(&cache), 0);
    assert!(!cache.join("models/hf").join(REPO).join(FILE).exists());
    let seen = hub.seen();
    let count = |what: &str| seen.iter().filter(|s| s.target.contains(what)).count();
    assert_eq!(count("/storage/"), count("/resolve/"), "{seen:?}");
    assert!(!stderr.contains("resuming"), "{stderr}");
    let _ = std::fs::remove_dir_all(&cache);
}

/// Over the model APIs, a Hub that sends more than it states is a bad gateway: not a rate
/// limit, which would invite the client to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_sends_more_than_it_states_is_a_502_over_the_apis() {
    let cache = std::env::temp_dir().join(format!("aam-hub-flood-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let mut file = b"GGUF".to_vec();
    file.resize(1024, 0);
    let hub = Hub::scripted(
        file,
        Script::Flood {
            watch: cache.clone(),
            largest: Arc::default(),
            sent: Arc::default(),
        },
    );
    let source = format!("hf:{REPO}/{FILE}");
    let server = crate::http::start(&[
        ("AGENT_AS_MODEL_BACKEND", "local"),
        ("AGENT_AS_MODEL_MODEL", &source),
        ("AGENT_AS_MODEL_CACHE_DIR", cache.to_str().unwrap()),
        ("HF_ENDPOINT", &hub.endpoint),
        ("HF_TOKEN", TOKEN),
    ])
    .await;
    let response = crate::common::http_client()
        .post(format!("{}/v1/chat/completions", server.url))
        .timeout(LONG)
        .json(&json!({"model": "local", "max_tokens": 2,
                      "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    let (status, retry_after) = (
        response.status().as_u16(),
        response.headers().get("retry-after").cloned(),
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["type"], "server_error", "{body}");
    assert!(retry_after.is_none(), "{retry_after:?}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("more than 1024 bytes"), "{message}");
    drop(server);
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn two_processes_fetching_one_hub_model_at_once_both_load_a_good_file() {
    let _turn = TURN.blocking_lock();
    let bytes = std::fs::read(gemma()).unwrap();
    let (size, digest) = (bytes.len() as u64, hex::encode(Sha256::digest(&bytes)));
    let first_done = Arc::new(Mutex::new(None));
    let hub = Hub::scripted(bytes, Script::Racing { first_done });
    let cache = std::env::temp_dir().join(format!("aam-hub-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let source = format!("hf:{REPO}/{FILE}");
    let start = || {
        let mut raw = server(&hub.endpoint, &source, Some(TOKEN), &cache);
        let text = few_shot_paris(&mut raw);
        (text, raw.stderr())
    };
    let answers: Vec<(String, String)> = std::thread::scope(|scope| {
        let first = scope.spawn(start);
        // The second process starts while the first holds half the file (its download is held
        // there until the second one's begins, or 5 s pass).
        let waited = Instant::now();
        while largest_file(&cache) < size / 2 && waited.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let second = scope.spawn(start);
        vec![first.join().unwrap(), second.join().unwrap()]
    });
    for (text, stderr) in &answers {
        assert!(text.contains("Paris"), "{text}\n{stderr}");
    }
    // The second waited for the first rather than writing the same partial download.
    assert!(
        answers
            .iter()
            .any(|(_, stderr)| stderr.contains("another process is fetching")),
        "{answers:?}"
    );
    let cached = cache.join("models/hf").join(REPO).join(FILE);
    let kept = std::fs::read(&cached).unwrap();
    assert_eq!(hex::encode(Sha256::digest(&kept)), digest);
    let left: Vec<String> = std::fs::read_dir(cached.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".part"))
        .collect();
    assert!(left.is_empty(), "partial downloads left: {left:?}");

    // The file was sealed as it is: the next start answers from the cache, asking no Hub.
    let mut raw = server("http://127.0.0.1:9", &source, None, &cache);
    assert!(few_shot_paris(&mut raw).contains("Paris"));
    drop(raw);
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
    let out = crate::common::server::Server::new()
        .command()
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

/// A cached `hf:` file that passed the Hub's checks but will not load is removed, so the next
/// call fetches it again, and the caller is not shown the user's cache path.
#[test]
fn a_hub_file_that_will_not_load_is_fetched_again_and_its_path_not_shown() {
    let mut junk = b"GGUF".to_vec();
    junk.extend(std::iter::repeat_n(0x5a_u8, 64 * 1024));
    let hub = Hub::start(junk);
    let cache = std::env::temp_dir().join(format!("aam-hub-junk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let source = format!("hf:{REPO}/{FILE}");
    let mut raw = server(&hub.endpoint, &source, Some(TOKEN), &cache);
    let downloads = || {
        hub.seen()
            .iter()
            .filter(|s| s.target.starts_with("/storage/") && s.range.is_none())
            .count()
    };
    let mut fetched = Vec::new();
    for id in 1..=2 {
        raw.send(&tools_call(json!(id), "generate", json!({"prompt": "hi"})));
        let reply = raw
            .recv_id(&json!(id), Duration::from_secs(60))
            .unwrap_or_else(|| panic!("no answer; the server said: {}", raw.stderr()));
        let message = reply.to_string();
        assert!(
            message.contains("fetched again on the next call"),
            "{message}"
        );
        assert!(
            !message.contains(cache.to_str().unwrap()),
            "the cache path is shown: {message}"
        );
        fetched.push(downloads());
    }
    // Each failed load removed the file, so the next load fetched it again.
    assert!(
        fetched[0] >= 1 && fetched[1] > fetched[0],
        "downloads after each call: {fetched:?}"
    );
    drop(raw);
    let _ = std::fs::remove_dir_all(&cache);
}

/// A projector beside an `hf:` model in its repository is found, fetched once into the cache
/// beside the model and loaded with it, as llama-server's `-hf` finds one: the model then takes
/// an image (Gemma 3 270M with a colour projector made for it by
/// `tests/data/vision/color-mmproj`). A restart finds it in the cache.
#[test]
fn a_projector_beside_an_hf_model_is_fetched_with_it_and_reads_its_images() {
    let _turn = TURN.blocking_lock();
    let model = gemma();
    let cache = std::env::temp_dir().join(format!("aam-hub-mmproj-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    let projector = cache.join("built-mmproj.gguf");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/vision/color-mmproj"
    );
    let built = std::process::Command::new(script)
        .arg(&model)
        .arg(&projector)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    const MMPROJ: &str = "mmproj-gemma-3-270m-f16.gguf";
    let files = vec![
        (FILE.to_owned(), std::fs::read(&model).unwrap()),
        (
            "mmproj-gemma-3-270m-q8_0.gguf".to_owned(),
            b"not this one".to_vec(),
        ),
        (MMPROJ.to_owned(), std::fs::read(&projector).unwrap()),
        ("README.md".to_owned(), b"# Gemma".to_vec()),
    ];
    let hub = Hub::serving(files, Script::BreakOffOnce);
    let source = format!("hf:{REPO}/{FILE}");
    let red = crate::vision::data_url("image/png", &crate::vision::file("red.png"));
    let ask = |raw: &mut Raw, id: &str| {
        raw.send(&tools_call(
            json!(id),
            "chat_complete",
            json!({"max_tokens": 2, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What colour is this?"}, red]}]}),
        ));
        raw.recv_id(&json!(id), LONG).expect("answered")
    };
    for run in ["first", "restarted"] {
        let mut raw = server(&hub.endpoint, &source, Some(TOKEN), &cache);
        let reply = ask(&mut raw, run);
        assert_eq!(
            reply["result"]["isError"],
            false,
            "{run}: {reply}\n{}",
            raw.stderr()
        );
        assert!(
            raw.stderr().contains("a projector beside the model"),
            "{run}: {}",
            raw.stderr()
        );
        // list_models says what the loaded projector reads.
        let listed = crate::engine::local_entry(&mut raw, "listed");
        assert_eq!(
            (&listed["supports"]["images"], &listed["supports"]["audio"]),
            (&json!(true), &json!(false)),
            "{listed}"
        );
    }
    let fetched = cache.join("models/hf").join(REPO).join(MMPROJ);
    assert_eq!(
        std::fs::read(&fetched).unwrap(),
        std::fs::read(&projector).unwrap()
    );
    // The F16 projector only, once; the listing asked on the first run only.
    let seen = hub.seen();
    let fetches = |name: &str| {
        (seen.iter())
            .filter(|s| s.method == "HEAD" && s.target.ends_with(name))
            .count()
    };
    assert_eq!((fetches(MMPROJ), fetches("q8_0.gguf")), (1, 0), "{seen:?}");
    let listings = seen.iter().filter(|s| s.target.starts_with("/api/models/"));
    assert_eq!(listings.count(), 1, "{seen:?}");
    let _ = std::fs::remove_dir_all(&cache);
}
