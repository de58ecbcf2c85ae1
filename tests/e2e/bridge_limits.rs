//! The bridge against a hostile downstream (`tests/data/hostile_downstream.py`): sampling
//! outside any call of the host's is refused, oversized sampling gets the server's limits, and
//! a flood of notifications leaves the bridge's memory bounded.

use crate::common::Lcg;
use crate::common::raw::{Raw, tools_call};
use serde_json::{Value, json};
use std::time::Duration;

const DOWNSTREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/hostile_downstream.py"
);

fn start() -> Raw {
    start_with(&[])
}

fn start_with(env: &[(&str, &str)]) -> Raw {
    // A provider nobody listens on answers for the bridge: no model is loaded in the process
    // whose memory is measured.
    let mut env = env.to_vec();
    env.extend([
        ("AGENT_AS_MODEL_PROVIDER_URL", "http://127.0.0.1:9/v1"),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "none"),
    ]);
    let mut raw = Raw::spawn_args(
        &["bridge", "--with", "provider", "--", "python3", DOWNSTREAM],
        &env,
    );
    raw.send(
        &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    let init = raw
        .recv_id(&json!("init"), Duration::from_secs(20))
        .expect("initialize answered");
    assert_eq!(init["result"]["serverInfo"]["name"], "hostile-downstream");
    raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Its sampling request outside any call is answered before the first call is sent (else
    // the call would be in flight when it comes).
    let mut said = String::new();
    for _ in 0..400 {
        said.push_str(&raw.stderr());
        if said.contains("hostile-downstream: outside answered") {
            return raw;
        }
    }
    panic!("the downstream's first sampling request was not answered: {said}");
}

/// The text of a tool call's result, through the bridge.
fn call_text(raw: &mut Raw, id: u64, tool: &str, arguments: Value) -> String {
    raw.send(&tools_call(json!(id), tool, arguments));
    let reply = raw
        .recv_id(&json!(id), Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{tool} answered; stderr: {}", raw.stderr()));
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_owned()
}

#[test]
fn sampling_outside_a_call_and_oversized_sampling_are_refused() {
    let mut raw = start();
    let outside: Value =
        serde_json::from_str(&call_text(&mut raw, 1, "outside", json!({}))).unwrap();
    assert_eq!(outside["error"]["code"], -32600, "{outside}");
    assert!(
        outside["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no request from the host is in flight"),
        "{outside}"
    );
    let big: Value = serde_json::from_str(&call_text(&mut raw, 2, "big", json!({}))).unwrap();
    assert_eq!(big["error"]["code"], -32602, "{big}");
    assert!(
        big["error"]["message"]
            .as_str()
            .unwrap()
            .contains("AGENT_AS_MODEL_MAX_MESSAGES"),
        "{big}"
    );
}

#[test]
fn a_flood_of_notifications_leaves_the_bridge_bounded() {
    let mut raw = start();
    let pid = raw.child.id();
    // The host reads nothing while the downstream floods; then the call's answer still comes.
    raw.send(&tools_call(json!(1), "flood", json!({"n": 100000})));
    std::thread::sleep(Duration::from_secs(3));
    let peak = crate::common::resident_kib(pid);
    let mut skipped = Vec::new();
    let done = raw
        .recv_matching(Duration::from_secs(120), &mut skipped, |v| v["id"] == 1)
        .expect("the flood call answered");
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
    let peak = peak.max(crate::common::resident_kib(pid));
    eprintln!("bridge resident peak during the flood: {peak} KiB");
    assert!(
        peak < 200 * 1024,
        "the bridge held {peak} KiB during the flood"
    );
    assert!(
        skipped.len() < 100000,
        "some log messages were dropped rather than queued: {} passed",
        skipped.len()
    );
}

/// Lines of at most 1 MiB and a few KiB (the request limit, or the media limit's base64,
/// whichever is larger, plus 1 MiB).
const SMALL_LIMITS: [(&str, &str); 2] = [
    ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "1000"),
    ("AGENT_AS_MODEL_MAX_MEDIA_BYTES", "1000"),
];

#[test]
fn a_downstream_answer_over_the_line_limit_fails_the_call_at_once() {
    let mut raw = start_with(&SMALL_LIMITS);
    raw.send(&tools_call(json!(1), "huge", json!({"n": 3_000_000})));
    // Answered before the test's deadline of 20 s.
    let reply = raw
        .recv_id(&json!(1), Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no answer within 20 s; stderr: {}", raw.stderr()));
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("answer is longer than") && message.contains("MAX_REQUEST_BYTES"),
        "{message}"
    );
    // The downstream is still there for the next call.
    assert_eq!(call_text(&mut raw, 2, "huge", json!({"n": 5})), "zzzzz");
}

#[test]
fn the_host_side_is_framed_like_the_servers_own_stdio() {
    let mut raw = start_with(&SMALL_LIMITS);
    raw.send_line("{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": ");
    let parse = raw.recv(Duration::from_secs(10)).expect("a parse error");
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null, "{parse}");
    let long = tools_call(json!("long"), "huge", json!({"pad": "p".repeat(2_000_000)}));
    raw.send(&long);
    let refused = raw
        .recv_id(&json!("long"), Duration::from_secs(10))
        .expect("the oversized request answered with its id");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("AGENT_AS_MODEL_MAX_REQUEST_BYTES"),
        "{refused}"
    );
    raw.send_line("[1, 2]");
    let batch = raw.recv(Duration::from_secs(10)).expect("a batch refused");
    assert_eq!(batch["error"]["code"], -32600, "{batch}");
    assert_eq!(call_text(&mut raw, 3, "huge", json!({"n": 2})), "zz");
}

/// One step of the bridge's fuzz corpus: the line the host sends, and what the reply with
/// `id` must be (`None` for lines the bridge answers without an id).
/// What a reply must satisfy.
type Check = Box<dyn Fn(&Value) -> bool>;

fn bridge_step(rng: &mut Lcg, id: u64) -> (String, Check) {
    match rng.next() % 8 {
        0 | 1 => {
            let n = rng.next() % 5000;
            let line = tools_call(json!(id), "flood", json!({"n": n})).to_string();
            (
                line,
                Box::new(|r| r["result"]["content"][0]["text"] == "done"),
            )
        }
        2 => {
            let n = 1_200_000 + rng.next() % 2_000_000;
            let line = tools_call(json!(id), "huge", json!({"n": n})).to_string();
            (line, Box::new(|r| r["error"]["code"] == -32603))
        }
        3 => {
            let n = (rng.next() % 1000) as usize;
            let line = tools_call(json!(id), "huge", json!({"n": n})).to_string();
            (
                line,
                Box::new(move |r| {
                    r["result"]["content"][0]["text"].as_str() == Some(&"z".repeat(n))
                }),
            )
        }
        4 => {
            let line = tools_call(json!(id), "big", json!({})).to_string();
            (
                line,
                Box::new(|r| {
                    let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
                    text.contains("-32602") && text.contains("AGENT_AS_MODEL_MAX_MESSAGES")
                }),
            )
        }
        5 => {
            let pad = "p".repeat(1_100_000 + (rng.next() % 1_000_000) as usize);
            let line = tools_call(json!(id), "huge", json!({"pad": pad})).to_string();
            (line, Box::new(|r| r["error"]["code"] == -32600))
        }
        6 => {
            let line = json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
            (line, Box::new(|r| r["result"] == json!({})))
        }
        _ => {
            let bad = [
                "{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": ",
                "[1, 2]",
                "\u{0}\u{1}",
            ];
            let line = (*rng.pick(&bad)).to_owned();
            (
                line,
                Box::new(|r| r["id"].is_null() && r.get("error").is_some()),
            )
        }
    }
}

/// The fuzz corpus for the bridge: a seeded mix of floods, downstream answers over the line
/// limit, oversized sampling, host lines over the limit and malformed ones, and plain calls,
/// a few at a time while the host does not read. Every request is answered once, as it should
/// be, the bridge's memory stays bounded and it is still running at the end.
/// `AGENT_AS_MODEL_FUZZ_SEED` replays a seed.
#[test]
fn a_seeded_mix_of_hostile_traffic_leaves_the_bridge_answering() {
    let seed = crate::common::fuzz_seed(20261201);
    let mut raw = start_with(&SMALL_LIMITS);
    let pid = raw.child.id();
    let mut rng = Lcg(seed);
    let mut peak = 0;
    let mut id = 100;
    for round in 0..12 {
        let mut expected: Vec<(Option<u64>, String, Check)> = Vec::new();
        for _ in 0..1 + rng.next() % 4 {
            id += 1;
            let (line, check) = bridge_step(&mut rng, id);
            raw.send_line(&line);
            let keyed = line.contains(&format!("\"id\":{id}"));
            let what: String = line.chars().take(60).collect();
            expected.push((keyed.then_some(id), what, check));
        }
        std::thread::sleep(Duration::from_millis(300));
        peak = peak.max(crate::common::resident_kib(pid));
        let mut replies = Vec::new();
        let wanted = expected.len();
        while replies.len() < wanted {
            let reply = raw
                .recv_matching(Duration::from_secs(60), &mut Vec::new(), |v| {
                    v.get("method").is_none()
                })
                .unwrap_or_else(|| {
                    panic!(
                        "seed {seed} round {round}: a reply missing; stderr: {}",
                        raw.stderr()
                    )
                });
            replies.push(reply);
        }
        for (want_id, what, check) in &expected {
            let reply = match want_id {
                Some(i) => replies.iter().find(|r| r["id"] == *i),
                None => replies.iter().find(|r| r["id"].is_null()),
            };
            let reply = reply.unwrap_or_else(|| {
                panic!("seed {seed} round {round}: no reply to {what}: {replies:?}")
            });
            let shown: String = reply.to_string().chars().take(300).collect();
            assert!(
                check(reply),
                "seed {seed} round {round}: {what} got {shown}"
            );
        }
    }
    eprintln!("seed {seed}: bridge resident peak {peak} KiB");
    assert!(peak < 200 * 1024, "seed {seed}: the bridge held {peak} KiB");
    assert!(raw.alive(), "seed {seed}: the bridge is still running");
}
