//! Reliability and security over raw stdio: host faults end only their own call, cancellation
//! reaches the host, a closed pipe shuts down cleanly, limits give clear errors, sealed state
//! resists tampering, logs carry no content, and arbitrary input never takes the server down.

use crate::common::raw::{Raw, tools_call};
use crate::common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// Sends a generate call and returns the id of the sampling request the server makes for it.
fn start_call(raw: &mut Raw, id: Value, prompt: &str) -> Value {
    raw.send(&tools_call(id, "generate", json!({"prompt": prompt})));
    let req = raw
        .recv_request("sampling/createMessage", T)
        .expect("a sampling request");
    req["id"].clone()
}

fn tool_error_text(response: &Value) -> String {
    assert_eq!(response["result"]["isError"], true, "{response}");
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn every_kind_of_host_fault_ends_only_its_call() {
    let mut raw = Raw::legacy(
        &[("AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS", "2")],
        json!({"sampling": {}}),
    );
    let faults: [(&str, Value, &str); 6] = [
        (
            "error reply",
            json!({"error": {"code": -32603, "message": "model melted"}}),
            "model melted",
        ),
        (
            "null result",
            json!({"result": null}),
            "not a CreateMessageResult",
        ),
        (
            "wrong shape",
            json!({"result": {"hello": "world"}}),
            "not a CreateMessageResult",
        ),
        (
            "string result",
            json!({"result": "just text"}),
            "not a CreateMessageResult",
        ),
        (
            "no content",
            json!({"result": {"role": "assistant", "content": [], "model": "m"}}),
            "no content",
        ),
        (
            "non-text block",
            json!({"result": {"role": "assistant", "model": "m",
            "content": {"type": "tool_result", "toolUseId": "x", "content": []}}}),
            "tool_result",
        ),
    ];
    for (i, (label, answer, want)) in faults.iter().enumerate() {
        let call_id = json!(format!("call-{i}"));
        let sid = start_call(&mut raw, call_id.clone(), label);
        let mut reply = answer.clone();
        reply["jsonrpc"] = json!("2.0");
        reply["id"] = sid;
        raw.send(&reply);
        let response = raw
            .recv_id(&call_id, T)
            .unwrap_or_else(|| panic!("{label}: answered"));
        let e = tool_error_text(&response);
        assert!(e.contains(want), "{label}: {e}");
    }
    // A line that is not JSON at all, and an answer that never comes: the call times out.
    let sid = start_call(&mut raw, json!("garbage"), "garbage");
    raw.send_line("this is not json {{{");
    let _ = sid;
    let response = raw
        .recv_id(&json!("garbage"), T)
        .expect("answered after the timeout");
    assert!(
        tool_error_text(&response).contains("did not answer"),
        "{response}"
    );
    // The connection still works.
    let sid = start_call(&mut raw, json!("good"), "hello");
    raw.send(
        &json!({"jsonrpc": "2.0", "id": sid, "result": {"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "fine"}}}),
    );
    let response = raw.recv_id(&json!("good"), T).unwrap();
    assert_eq!(response["result"]["content"][0]["text"], "fine");
    assert!(raw.alive());
}

#[test]
fn cancelling_a_call_cancels_its_sampling_request() {
    let mut raw = Raw::legacy(&[], json!({"sampling": {}}));
    let sid = start_call(&mut raw, json!(41), "slow one");
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 41, "reason": "user gave up"}}),
    );
    let mut skipped = Vec::new();
    let cancel = raw
        .recv_matching(T, &mut skipped, |v| {
            v["method"] == "notifications/cancelled"
        })
        .expect("the server cancels its sampling request");
    assert_eq!(cancel["params"]["requestId"], sid);
    // Other calls still work.
    let sid = start_call(&mut raw, json!(42), "next");
    raw.send(
        &json!({"jsonrpc": "2.0", "id": sid, "result": {"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "still here"}}}),
    );
    assert_eq!(
        raw.recv_id(&json!(42), T).unwrap()["result"]["content"][0]["text"],
        "still here"
    );
}

#[test]
fn closing_stdin_mid_call_shuts_down_cleanly() {
    let mut raw = Raw::legacy(&[], json!({"sampling": {}}));
    start_call(&mut raw, json!(1), "never answered");
    raw.close_stdin();
    let status = raw
        .wait_exit(T)
        .expect("the server exits when stdin closes");
    assert!(status.success(), "{status}");
}

#[test]
fn limits_give_clear_errors() {
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "2000"),
            ("AGENT_AS_MODEL_MAX_MESSAGES", "3"),
            ("AGENT_AS_MODEL_MAX_TOOLS", "1"),
            ("AGENT_AS_MODEL_MAX_SCHEMA_DEPTH", "3"),
            ("AGENT_AS_MODEL_MAX_MESSAGE_CHARS", "10"),
        ],
        json!({"sampling": {}}),
    );
    let msgs = |n: usize| (0..n).map(|_| user("hi")).collect::<Vec<_>>();
    let cases = [
        (
            json!({"prompt": "x".repeat(3000)}),
            "generate",
            "over the limit of 2000 (AGENT_AS_MODEL_MAX_REQUEST_BYTES)",
        ),
        (
            json!({"messages": msgs(4)}),
            "chat_complete",
            "4 messages is over the limit of 3",
        ),
        (
            json!({"messages": [user("01234567890")]}),
            "chat_complete",
            "`messages[0]`: 11 characters of text is over the limit of 10",
        ),
        (
            json!({"messages": msgs(1), "tools": [{"name": "a", "input_schema": {"type": "object"}}, {"name": "b", "input_schema": {"type": "object"}}]}),
            "chat_complete",
            "2 tool definitions is over the limit of 1",
        ),
        (
            json!({"messages": msgs(1), "output_schema": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}}}}),
            "chat_complete",
            "nests deeper than 3 levels",
        ),
    ];
    for (i, (args, tool, want)) in cases.iter().enumerate() {
        raw.send(&tools_call(json!(i), tool, args.clone()));
        let e = tool_error_text(&raw.recv_id(&json!(i), T).unwrap());
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn sealed_state_refuses_oversized_and_expired_state() {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}});
    let mut raw = Raw::spawn(&[("AGENT_AS_MODEL_STATE_TTL_SECS", "1")]);
    let call = |id: i64, extra: Value| {
        let mut params = json!({"_meta": meta, "name": "generate", "arguments": {"prompt": "hi"}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    raw.send(&call(1, json!({})));
    let first = raw.recv_id(&json!(1), T).unwrap();
    assert_eq!(first["result"]["resultType"], "input_required");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"sample": {"role": "assistant", "model": "m", "content": {"type": "text", "text": "x"}}});
    raw.send(&call(
        2,
        json!({"requestState": "x".repeat(200_000), "inputResponses": answer}),
    ));
    let r = raw.recv_id(&json!(2), T).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let truncated = &state[..state.len() - 5];
    raw.send(&call(
        3,
        json!({"requestState": truncated, "inputResponses": answer}),
    ));
    assert_eq!(raw.recv_id(&json!(3), T).unwrap()["error"]["code"], -32602);
    std::thread::sleep(Duration::from_millis(2100));
    raw.send(&call(
        4,
        json!({"requestState": state, "inputResponses": answer}),
    ));
    let r = raw.recv_id(&json!(4), T).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("expire"),
        "{r}"
    );
}

#[test]
fn default_logs_carry_no_content_schema_or_state() {
    let logs = logs_after_secret_traffic(&[]);
    assert!(!logs.contains(SECRET), "the logs leak content: {logs}");
    // The capture does see logs: at debug level the SDK prints whole messages.
    let debug = logs_after_secret_traffic(&[("RUST_LOG", "debug")]);
    assert!(
        debug.contains(SECRET),
        "stderr capture works at debug level"
    );
}

const SECRET: &str = "SECRET-7f3a";

/// Sends content, a schema and a state carrying `SECRET`, plus garbage, and returns stderr.
fn logs_after_secret_traffic(env: &[(&str, &str)]) -> String {
    let mut raw = Raw::legacy(env, json!({"sampling": {}}));
    let sid = start_call(&mut raw, json!(1), SECRET);
    raw.send(&json!({"jsonrpc": "2.0", "id": sid, "error": {"code": -32603, "message": SECRET}}));
    raw.recv_id(&json!(1), T).unwrap();
    raw.send(&tools_call(
        json!(2),
        "chat_complete",
        json!({"messages": [user(SECRET)],
        "output_schema": {"type": "object", "title": SECRET, "properties": {"a": {"type": 7}}}}),
    ));
    raw.recv_id(&json!(2), T).unwrap();
    raw.send_line(&format!("{{\"not json {SECRET}"));
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}, "name": "generate",
        "arguments": {"prompt": SECRET}, "requestState": SECRET, "inputResponses": {}}}),
    );
    raw.recv_id(&json!(3), T).unwrap();
    raw.close_stdin();
    raw.wait_exit(T);
    raw.stderr()
}

fn pick_str<'a>(rng: &mut Lcg, items: &[&'a str]) -> &'a str {
    let i = (rng.next() as usize) % items.len();
    items[i]
}

fn random_value(rng: &mut Lcg, depth: u32) -> Value {
    match rng.next() % if depth > 3 { 5 } else { 7 } {
        0 => Value::Null,
        1 => json!(rng.next().is_multiple_of(2)),
        2 => json!(rng.next() as i64 - (1 << 30)),
        3 => json!(format!("s{}\u{e9}\u{1F600}\"\\", rng.next())),
        4 => json!(rng.next() as f64 / 7.0),
        5 => Value::Array(
            (0..rng.next() % 4)
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "messages",
                "role",
                "content",
                "prompt",
                "input",
                "type",
                "text",
                "tools",
                "output_schema",
                "persona",
                "previous_response_id",
                "name",
                "max_tokens",
                "x",
            ];
            let mut m = serde_json::Map::new();
            for _ in 0..rng.next() % 5 {
                m.insert((*rng.pick(&keys)).to_owned(), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

/// Lines a hostile client sends: parse errors, batches, malformed and early notifications.
const HOSTILE_LINES: [&str; 8] = [
    "{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"ping\",\"params\":{\"a\":\"\\ud800\"}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}",
    "[{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"ping\"}]",
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"_meta\":5}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"r1\"}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\",\"params\":[]}",
    "\u{0}\u{1}\u{2}",
    "{\"jsonrpc\":\"2.0\",\"id\":{\"an\":\"object\"},\"method\":\"ping\"}",
];

/// Schemas that would stall or flood the server if they were compiled.
fn hostile_schema(rng: &mut Lcg) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..30 {
        let next = format!("#/$defs/L{}", i + 1);
        defs.insert(
            format!("L{i}"),
            json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert("L30".into(), json!({"type": "string"}));
    match rng.next() % 3 {
        0 => json!({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/L0"}}}),
        1 => {
            json!({"type": "object", "properties": {"p": {"type": "string", "pattern": "\\p{L}{200}"}}})
        }
        _ => json!({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}),
    }
}

/// One fuzz line, recording the ids of the requests it carries.
fn fuzz_line(rng: &mut Lcg, i: usize, sent: &mut HashMap<String, usize>) -> String {
    let tools: [&str; 7] = [
        "chat_complete",
        "messages_create",
        "responses_create",
        "generate",
        "generate_content",
        "list_models",
        "nope",
    ];
    let methods = [
        "tools/call",
        "tools/list",
        "ping",
        "resources/list",
        "bogus/method",
        "initialize",
    ];
    let mut request = |id: String| {
        *sent.entry(id.clone()).or_insert(0) += 1;
        id
    };
    match rng.next() % 10 {
        0 => (0..rng.next() % 200).map(|_| char::from_u32((rng.next() % 0x7f) as u32).unwrap_or('?')).collect::<String>(),
        1 => random_value(rng, 0).to_string(),
        2 => {
            let v = tools_call(json!(format!("r{i}")), pick_str(rng, &tools), random_value(rng, 0));
            let s = v.to_string();
            let keep = rng.next() as usize % s.chars().count();
            s.chars().take(keep).collect::<String>() // truncated
        }
        3 => tools_call(json!(request(format!("r{i}"))), pick_str(rng, &tools), random_value(rng, 0)).to_string(),
        4 => json!({"jsonrpc": "2.0", "method": rng.pick(&methods), "params": random_value(rng, 0)}).to_string(),
        5 => json!({"jsonrpc": "2.0", "id": request(format!("r{i}")), "method": rng.pick(&methods), "params": random_value(rng, 0)}).to_string(),
        6 => (*rng.pick(&HOSTILE_LINES)).to_owned(),
        7 => {
            let schema = hostile_schema(rng);
            tools_call(json!(request(format!("r{i}"))), "chat_complete",
                json!({"messages": [{"role": "user", "content": "x"}], "output_schema": schema})).to_string()
        }
        8 => tools_call(json!(request(format!("r{i}"))), "generate",
            json!({"prompt": "x".repeat(1_200_000)})).to_string(),
        // An id used before, possibly still in flight.
        _ => {
            let id = format!("r{}", rng.next() as usize % (i + 1));
            tools_call(json!(request(id)), "list_models", json!({})).to_string()
        }
    }
}

#[test]
fn arbitrary_lines_never_take_the_server_down() {
    let iterations: usize = std::env::var("AGENT_AS_MODEL_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let seed = crate::common::fuzz_seed(20261130);
    let mut rng = Lcg(seed);
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_SAMPLING_TIMEOUT_SECS", "1"),
            ("AGENT_AS_MODEL_MAX_REQUEST_BYTES", "20000"),
            ("AGENT_AS_MODEL_MAX_MEDIA_BYTES", "20000"),
        ],
        json!({"sampling": {"tools": {}}}),
    );
    let mut sent: HashMap<String, usize> = HashMap::new();
    // The hostile corpus cancels request "r1"; count how often.
    let mut cancels = 0usize;
    for i in 0..iterations {
        let line = fuzz_line(&mut rng, i, &mut sent);
        if line.contains("notifications/cancelled") && line.contains("\"r1\"") {
            cancels += 1;
        }
        raw.send_line(&line);
    }
    raw.send(&tools_call(json!("final"), "list_models", json!({})));
    let mut seen = Vec::new();
    let last = raw.recv_matching(Duration::from_secs(60), &mut seen, |v| v["id"] == "final");
    assert!(
        last.is_some(),
        "seed {seed}: the server answered after the noise"
    );
    // Calls waiting on the (silent) host end by their one-second timeout.
    while let Some(v) = raw.recv(Duration::from_secs(3)) {
        seen.push(v);
    }
    let mut replies: HashMap<String, usize> = HashMap::new();
    for v in &seen {
        if v.get("method").is_some() {
            continue;
        }
        assert_eq!(v["jsonrpc"], "2.0", "seed {seed}: {v}");
        assert!(
            v.get("id").is_some(),
            "seed {seed}: every reply has an id member: {v}"
        );
        match v["id"].as_str() {
            Some("final") => {}
            Some(id) => *replies.entry(id.to_owned()).or_insert(0) += 1,
            None => assert!(v["id"].is_null() || v["id"] == "h", "seed {seed}: {v}"),
        }
    }
    // A request the client cancelled may go unanswered (the spec says the receiver should not
    // answer it); every other request is answered exactly once.
    for (id, n) in &sent {
        let got = replies.get(id).copied().unwrap_or(0);
        let cancelled = if id == "r1" { cancels } else { 0 };
        assert!(
            got <= *n && got + cancelled >= *n,
            "seed {seed}: request {id} was sent {n} time(s) and answered {got} time(s)"
        );
    }
    assert!(
        replies.keys().all(|id| sent.contains_key(id)),
        "seed {seed}: a reply to an id that was not a request"
    );
    assert!(raw.alive(), "seed {seed}: the server is still running");
}
