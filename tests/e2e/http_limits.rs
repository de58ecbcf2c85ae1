//! Streamable HTTP against hostile connections and malformed requests, over raw TCP: idle
//! connections past the descriptor limit, stalled and oversized bodies, bad chunk sizes, and
//! the header details a careful server checks (the bearer scheme's case, repeated or
//! mismatched `Host`, absolute-form targets, unknown sessions).

use crate::common::{Killed, Lcg, free_port};
use crate::http::{meta, post};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::server::BIN;

/// The server under `ulimit -n files`, with `env`; its address once `/healthz` answers.
fn start_limited(files: u32, env: &[(&str, &str)]) -> (Killed, String) {
    let port = free_port();
    let mut command = Command::new("sh");
    command
        .args(["-c", &format!("ulimit -n {files} && exec \"$0\""), BIN])
        .env("AGENT_AS_MODEL_HTTP", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let child = Killed(command.spawn().unwrap());
    let address = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        // The probe asks the server to close and waits for it, so its connection does not
        // hold a slot of the cap a test then fills.
        if let Ok(mut probe) = TcpStream::connect(&address) {
            probe
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut answer = Vec::new();
            let closed = probe
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .and_then(|()| probe.read_to_end(&mut answer))
                .is_ok();
            if closed && answer.starts_with(b"HTTP/1.1 200") {
                std::thread::sleep(Duration::from_millis(50));
                return (child, address);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the HTTP server did not come up");
}

/// Sends `request` on a new connection and reads the response's status and text until the
/// server closes or `secs` pass; `None` when nothing came back.
fn exchange(address: &str, request: &[u8], secs: u64) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(secs)))
        .unwrap();
    stream.write_all(request).ok()?;
    read_response(&mut stream)
}

/// A response's status and text, read until the server closes, a pause, or the headers and a
/// declared body have arrived.
fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&seen);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
            });
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text))
}

/// CPU seconds the process has used (user + system), from /proc.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;

fn tools_list_request() -> Vec<u8> {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/list\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{TOOLS_LIST}",
        TOOLS_LIST.len()
    )
    .into_bytes()
}

#[test]
fn idle_connections_past_the_descriptor_limit_leave_the_server_answering() {
    // 256 descriptors, so the default cap is 128; 400 connections that never send a byte.
    let (child, address) = start_limited(256, &[("AGENT_AS_MODEL_HEADER_TIMEOUT_SECS", "6")]);
    let pid = child.0.id();
    let idle: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    assert!(idle.len() >= 300, "the kernel took the connections");
    std::thread::sleep(Duration::from_millis(300));
    // Not spinning on accept errors: well under a core over two seconds.
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(pid) - before;
    assert!(
        used < 0.5,
        "the server used {used} s of CPU in 2 s while flooded"
    );
    assert!(
        open_descriptors(pid) < 240,
        "descriptors held: {}",
        open_descriptors(pid)
    );
    // The health check answers while the cap is reached; MCP is told to come back.
    let deadline = Instant::now() + Duration::from_secs(5);
    let health = loop {
        let got = exchange(
            &address,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            3,
        );
        if got.is_some() || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(health.map(|h| h.0), Some(200), "/healthz while flooded");
    let (status, text) = exchange(&address, &tools_list_request(), 3).expect("an answer");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("AGENT_AS_MODEL_MAX_CONNECTIONS"), "{text}");
    // Connections that never send their headers are closed after the header timeout, and
    // the server serves again.
    std::thread::sleep(Duration::from_secs(6));
    let mut closed = 0;
    for mut stream in idle {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        if matches!(stream.read(&mut byte), Ok(0)) || matches!(stream.read(&mut byte), Ok(0)) {
            closed += 1;
        }
    }
    assert!(closed >= 300, "{closed} idle connections were closed");
    let (status, text) = exchange(&address, &tools_list_request(), 5).expect("an answer");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("chat_complete"), "{text}");
}

/// With the cap reached and idle connections still arriving (each new batch fills the few
/// answered past the cap), a health check is answered within a second, as a load balancer
/// needs: a new connection ends the oldest past the cap instead of being closed unanswered.
#[test]
fn healthz_answers_within_a_second_while_idle_connections_keep_arriving() {
    // 256 descriptors, so the default cap is 128.
    let (_child, address) = start_limited(256, &[]);
    let mut idle: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    assert!(idle.len() >= 300, "the kernel took the connections");
    for round in 0..3 {
        idle.extend((0..40).filter_map(|_| TcpStream::connect(&address).ok()));
        let health = exchange(
            &address,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            1,
        );
        assert_eq!(
            health.map(|h| h.0),
            Some(200),
            "round {round}: /healthz with {} idle connections",
            idle.len()
        );
    }
}

#[test]
fn the_connection_cap_is_a_setting() {
    let (_child, address) = start_limited(1024, &[("AGENT_AS_MODEL_MAX_CONNECTIONS", "4")]);
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&address).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (status, text) = exchange(&address, &tools_list_request(), 3).expect("an answer");
    assert_eq!(status, 503, "{text}");
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let (status, _) = exchange(&address, &tools_list_request(), 3).expect("an answer");
    assert_eq!(status, 200);
}

#[test]
fn a_body_that_stops_arriving_is_answered_408() {
    let (child, address) = start_limited(1024, &[("AGENT_AS_MODEL_BODY_TIMEOUT_SECS", "1")]);
    // Twenty bodies declared at 16 MB, each stalled after a few bytes.
    let mut stalled: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(&address).unwrap();
            s.write_all(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Accept: application/json, text/event-stream\r\n\
                  Content-Length: 16000000\r\n\r\n{\"jsonrpc\": ",
            )
            .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        })
        .collect();
    // Each answer comes before the client's own read deadline (5 s), from the server's timer
    // (the 408 names the setting), not from the client giving up.
    for stream in &mut stalled {
        let (status, text) = read_response(stream).expect("an answer to a stalled body");
        assert_eq!(status, 408, "{text}");
        assert!(text.contains("AGENT_AS_MODEL_BODY_TIMEOUT_SECS"), "{text}");
    }
    // And the connections are closed, not held.
    std::thread::sleep(Duration::from_millis(300));
    assert!(open_descriptors(child.0.id()) < 30);
}

#[test]
fn a_declared_length_over_the_limit_is_413_before_the_body() {
    let (_child, address) = start_limited(1024, &[("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "1000")]);
    let (status, text) = exchange(
        &address,
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Accept: application/json, text/event-stream\r\nContent-Length: 500000000\r\n\r\n",
        3,
    )
    .expect("an answer without sending the body");
    assert_eq!(status, 413, "{text}");
    // A chunked body whose size overflows is the client's fault.
    let (status, text) = exchange(
        &address,
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n\
          fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
        3,
    )
    .expect("an answer");
    assert_eq!(status, 400, "{text}");
}

#[test]
fn host_and_authorization_headers_are_read_as_the_rfcs_say() {
    let (_child, address) = start_limited(1024, &[("AGENT_AS_MODEL_AUTH_TOKEN", "s3cret")]);
    let port = address.rsplit(':').next().unwrap();
    let request = |target: &str, headers: &str| {
        let text = format!(
            "POST {target} HTTP/1.1\r\n{headers}Content-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/list\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{TOOLS_LIST}",
            TOOLS_LIST.len()
        );
        exchange(&address, text.as_bytes(), 3).expect("an answer").0
    };
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{host}Authorization: {scheme} s3cret\r\n");
        assert_eq!(request("/mcp", &auth), 200, "scheme {scheme}");
    }
    let auth = "Authorization: Bearer s3cret\r\n";
    assert_eq!(
        request("/mcp", &format!("{host}Authorization: Basic s3cret\r\n")),
        401
    );
    // Two Host headers: which one is meant is ambiguous.
    assert_eq!(
        request("/mcp", &format!("{host}Host: evil.example\r\n{auth}")),
        400
    );
    // Loopback names on any port (a reverse proxy passing its own, nginx's `$http_host`), as
    // the official MCP SDKs' defaults; another name is refused.
    assert_eq!(
        request("/mcp", &format!("Host: 127.0.0.1:8080\r\n{auth}")),
        200
    );
    assert_eq!(
        request("/mcp", &format!("Host: localhost:1\r\n{auth}")),
        200
    );
    assert_eq!(
        request("/mcp", &format!("Host: evil.example:{port}\r\n{auth}")),
        403
    );
    assert_eq!(request("/mcp", &format!("Host: 127.0.0.1\r\n{auth}")), 200);
    // An absolute-form target is judged by its own authority.
    assert_ne!(
        request("http://evil.example/mcp", &format!("{host}{auth}")),
        200
    );
    assert_eq!(
        request(
            &format!("http://127.0.0.1:{port}/mcp"),
            &format!("{host}{auth}")
        ),
        200
    );
}

#[tokio::test]
async fn an_unknown_session_and_a_mistyped_request_state_are_refused_plainly() {
    let server = crate::http::start(&[]).await;
    let response = crate::common::http_client()
        .delete(format!("{}/mcp", server.url))
        .header("Mcp-Session-Id", "no-such-session")
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "generate"),
    ];
    for state in [json!(42), json!({"a": 1}), json!(["x"])] {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "_meta": meta(), "name": "generate", "arguments": {"prompt": "hi"},
            "requestState": state, "inputResponses": {}}});
        let (status, replies, _) = post(&server.url, &headers, &body).await;
        assert_eq!(status, 200, "{state}");
        let reply = replies.iter().find(|m| m["id"] == 9).unwrap();
        assert_eq!(reply["error"]["code"], -32602, "{state}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("requestState"),
            "{reply}"
        );
    }
}

/// One hostile connection of the seeded mix, and what a real client may see on it.
fn hostile_connection(rng: &mut Lcg) -> (&'static str, Vec<u8>) {
    const HEAD: &str = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                        Accept: application/json, text/event-stream\r\n";
    match rng.next() % 9 {
        0 => ("idle", Vec::new()),
        1 => (
            "headers stop",
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty".to_vec(),
        ),
        2 => (
            "body stops",
            format!("{HEAD}Content-Length: 50000\r\n\r\n{{\"jsonrpc\": ").into_bytes(),
        ),
        3 => (
            "chunk stops",
            format!("{HEAD}Transfer-Encoding: chunked\r\n\r\n100000\r\n{{\"jsonrpc\"").into_bytes(),
        ),
        4 => (
            "declared too long",
            format!("{HEAD}Content-Length: 500000000\r\n\r\n").into_bytes(),
        ),
        5 => (
            "bad chunk size",
            format!(
                "{HEAD}Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n{{}}\r\n0\r\n\r\n"
            )
            .into_bytes(),
        ),
        6 => (
            "two hosts",
            format!("{HEAD}Host: 127.0.0.2\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes(),
        ),
        7 => {
            let mut junk: Vec<u8> = (0..rng.next() % 300).map(|_| rng.next() as u8).collect();
            junk.extend_from_slice(b"\r\n\r\n");
            ("garbage", junk)
        }
        _ => ("real", tools_list_request()),
    }
}

/// The fuzz corpus over HTTP: a seeded mix of the hostile connections above (idle, headers or
/// bodies that stop, oversized declared lengths, bad chunk sizes, repeated hosts, garbage)
/// among real requests, at about 50 connections a second. `/healthz` answers throughout, every
/// connection gets its status or is closed (none is left hanging), and once the timeouts have
/// run the server holds no connection of the flood and serves again.
/// `AGENT_AS_MODEL_FUZZ_SEED` replays a seed.
#[test]
fn a_seeded_mix_of_hostile_connections_leaves_the_server_serving() {
    let seed = crate::common::fuzz_seed(20261201);
    let (child, address) = start_limited(
        256,
        &[
            ("AGENT_AS_MODEL_HEADER_TIMEOUT_SECS", "2"),
            ("AGENT_AS_MODEL_BODY_TIMEOUT_SECS", "2"),
            ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "100000"),
            ("AGENT_AS_MODEL_MAX_CONNECTIONS", "64"),
        ],
    );
    let pid = child.0.id();
    let baseline = open_descriptors(pid);
    let mut rng = Lcg(seed);
    let mut flood: Vec<(&str, TcpStream)> = Vec::new();
    for i in 0..300 {
        let mut stream = TcpStream::connect(&address).expect("the kernel takes the connection");
        let (kind, bytes) = hostile_connection(&mut rng);
        // A server that has closed may refuse the rest of a request: that is its right.
        let _ = stream.write_all(&bytes);
        flood.push((kind, stream));
        if i % 60 == 59 {
            let health = exchange(
                &address,
                b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                5,
            );
            assert_eq!(
                health.map(|h| h.0),
                Some(200),
                "seed {seed}: /healthz at {i}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut served = 0;
    let mut tally = std::collections::BTreeMap::new();
    for (kind, mut stream) in flood {
        stream
            .set_read_timeout(Some(Duration::from_secs(6)))
            .unwrap();
        let answer = read_response(&mut stream).map(|(status, _)| status);
        let allowed: &[u16] = match kind {
            "real" => &[200],
            "declared too long" => &[413],
            "bad chunk size" | "two hosts" | "garbage" => &[400],
            "body stops" | "chunk stops" => &[408],
            _ => &[408],
        };
        // Past the cap a connection is answered 503, or closed unanswered once the server has
        // answered its quota; an idle one may be closed without a word.
        assert!(
            answer.is_none_or(|s| allowed.contains(&s) || s == 503),
            "seed {seed}: a {kind} connection was answered {answer:?}"
        );
        // Whatever was said, the server has closed the connection by now.
        let mut byte = [0u8; 1];
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert!(
            matches!(stream.read(&mut byte), Ok(0) | Err(_)),
            "seed {seed}: a {kind} connection was left open"
        );
        if kind == "real" && answer == Some(200) {
            served += 1;
        }
        *tally.entry(format!("{kind}: {answer:?}")).or_insert(0) += 1;
    }
    eprintln!("seed {seed}: {tally:?}");
    assert!(
        served > 0,
        "seed {seed}: no real request was served during the flood"
    );
    std::thread::sleep(Duration::from_millis(300));
    let held = open_descriptors(pid);
    assert!(
        held <= baseline + 2,
        "seed {seed}: {held} descriptors held after the flood, {baseline} before"
    );
    let (status, text) = exchange(&address, &tools_list_request(), 5).expect("an answer");
    assert_eq!(status, 200, "seed {seed}: {text}");
}

/// `--allowed-hosts` takes `name:*`, the name on any port.
#[test]
fn an_allowed_host_may_name_any_port() {
    let (_child, address) = start_limited(
        1024,
        &[("AGENT_AS_MODEL_ALLOWED_HOSTS", "proxy.internal:*,127.0.0.1")],
    );
    let request = |host: &str| {
        let text = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/list\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{TOOLS_LIST}",
            TOOLS_LIST.len()
        );
        exchange(&address, text.as_bytes(), 3).expect("an answer").0
    };
    assert_eq!(request("proxy.internal:9443"), 200);
    assert_eq!(request("proxy.internal"), 200);
    assert_eq!(request("other.internal:9443"), 403);
}

/// Bodies held across connections are bounded (a setting), and a body that keeps trickling in
/// under the idle timeout still meets an overall deadline (a setting).
#[test]
fn request_bodies_share_a_memory_bound_and_meet_a_deadline() {
    let (_child, address) = start_limited(
        1024,
        &[
            ("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES", "4194304"),
            ("AGENT_AS_MODEL_BODY_DEADLINE_SECS", "3"),
            ("AGENT_AS_MODEL_BODY_TIMEOUT_SECS", "10"),
        ],
    );
    // Ten bodies declared at 8 MB, each sending 1 MiB and then trickling.
    let chunk = vec![b' '; 1024 * 1024];
    let mut held: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut s = TcpStream::connect(&address).unwrap();
            s.write_all(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Accept: application/json, text/event-stream\r\n\
                  Content-Length: 8000000\r\n\r\n",
            )
            .unwrap();
            let _ = s.write_all(&chunk);
            s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
            s
        })
        .collect();
    // A byte a second, under the idle timeout.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(1));
        for s in &mut held {
            let _ = s.write_all(b" ");
        }
    }
    let mut statuses = Vec::new();
    for stream in &mut held {
        let (status, text) = read_response(stream).expect("an answer to a trickling body");
        match status {
            503 => assert!(
                text.contains("AGENT_AS_MODEL_MAX_BODY_BUFFER_BYTES"),
                "{text}"
            ),
            408 => assert!(text.contains("AGENT_AS_MODEL_BODY_DEADLINE_SECS"), "{text}"),
            _ => panic!("{status}: {text}"),
        }
        statuses.push(status);
    }
    assert!(
        statuses.contains(&503),
        "no body was refused for the shared bound: {statuses:?}"
    );
    // The 408s name the 3 s deadline, not the 10 s idle timeout: the deadline ended them first,
    // and each answer came before the client's own read deadline (8 s).
    assert!(
        statuses.contains(&408),
        "no body met the deadline: {statuses:?}"
    );
    // The bound is released: a small request is answered.
    let (status, _) = exchange(&address, &tools_list_request(), 3).expect("an answer");
    assert_eq!(status, 200);
}
