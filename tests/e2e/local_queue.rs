//! The embedded model's queue through the real binary over stdio: calls the client cancelled
//! while they waited for a slot no longer count against `AGENT_AS_MODEL_LOCAL_QUEUE`, so a
//! burst of cancelled calls does not make the next live call fail with "busy".
//!
//! Nothing here is timed. The order of events is seen in what the server sends: a call's
//! progress says it has reached the model (its first notification is sent as it is handed to
//! the model; a later one, with tokens, that it is being answered), and the stdio transport's
//! cap of calls in flight (`AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT`) frees a cancelled call's place
//! only once its work has stopped, so a call admitted under the cap shows that one has.

use crate::common::raw::{Raw, tools_call};
use crate::engine::LONG;
use crate::local::{TURN, first_try};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A generate call following its progress under the token `id`.
fn followed(id: &str, prompt: &str, max_tokens: u32) -> Value {
    let mut call = tools_call(
        json!(id),
        "generate",
        json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}),
    );
    call["params"]["_meta"] = json!({"progressToken": id});
    call
}

fn cancel(raw: &mut Raw, id: &str) {
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": id, "reason": "the user moved on"}}),
    );
}

/// Reads until a progress notification under `token` with at least `progress` comes; every
/// other message is kept in `seen`.
fn await_progress(raw: &Raw, token: &str, progress: f64, seen: &mut Vec<Value>) {
    raw.recv_matching(LONG, seen, |v| {
        v["method"] == "notifications/progress"
            && v["params"]["progressToken"] == token
            && v["params"]["progress"]
                .as_f64()
                .is_some_and(|p| p >= progress)
    })
    .unwrap_or_else(|| {
        panic!(
            "no progress {progress} for {token}; stderr: {}",
            raw.stderr()
        )
    });
}

#[test]
fn cancelled_calls_do_not_hold_the_local_models_queue() {
    let _turn = TURN.blocking_lock();
    let _ = first_try();
    // One slot, two places in the queue, three calls in flight.
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_BACKEND", "local"),
            ("AGENT_AS_MODEL_LOCAL_SLOTS", "1"),
            ("AGENT_AS_MODEL_LOCAL_QUEUE", "2"),
            ("AGENT_AS_MODEL_MAX_CALLS_IN_FLIGHT", "3"),
        ],
        json!({}),
    );
    let mut seen = Vec::new();
    // A long answer takes the only slot: its tokens are being made.
    raw.send(&followed(
        "long",
        "Count from 1 to 100000, separated by commas.",
        3000,
    ));
    await_progress(&raw, "long", 1.0, &mut seen);
    // Two calls fill the queue (each has reached the model when its first progress comes),
    // and are cancelled there.
    for id in ["waiting-1", "waiting-2"] {
        raw.send(&followed(id, "Say hi.", 3));
        await_progress(&raw, id, 0.0, &mut seen);
    }
    for id in ["waiting-1", "waiting-2"] {
        cancel(&mut raw, id);
    }
    // The cap of three calls in flight refuses more until a cancelled call's work has
    // stopped; `list_models` is let in once one has.
    let deadline = Instant::now() + LONG;
    for n in 0.. {
        assert!(
            Instant::now() < deadline,
            "the cancelled calls never stopped; stderr: {}",
            raw.stderr()
        );
        let id = json!(format!("models-{n}"));
        raw.send(&tools_call(id.clone(), "list_models", json!({})));
        let reply = raw
            .recv_matching(LONG, &mut seen, |v| {
                v.get("id") == Some(&id) && v.get("method").is_none()
            })
            .expect("list_models answered");
        if reply.get("result").is_some() {
            break;
        }
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("server busy"), "{reply}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A new call is admitted, though the long answer still holds the slot, and answered once
    // the long one is cancelled.
    raw.send(&followed("after", "Say hi.", 3));
    let is_reply = |v: &Value| v["id"] == "after" && v.get("method").is_none();
    // It has reached the model when its progress comes (or its answer: a refusal).
    let first = raw
        .recv_matching(LONG, &mut seen, |v| {
            is_reply(v)
                || (v["method"] == "notifications/progress"
                    && v["params"]["progressToken"] == "after")
        })
        .unwrap_or_else(|| panic!("the new call was not taken; stderr: {}", raw.stderr()));
    cancel(&mut raw, "long");
    let reply = if is_reply(&first) {
        first
    } else {
        raw.recv_matching(LONG, &mut seen, is_reply)
            .unwrap_or_else(|| panic!("the new call was not answered; stderr: {}", raw.stderr()))
    };
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{reply}");
    // Neither the long call nor the cancelled ones were answered: the long one was still
    // going when the new call came (else the queue would have emptied on its own).
    let answered: Vec<&Value> = seen
        .iter()
        .filter(|v| v.get("id").is_some() && v.get("method").is_none())
        .filter(|v| {
            v["id"]
                .as_str()
                .is_some_and(|id| id == "long" || id.starts_with("waiting"))
        })
        .collect();
    assert!(answered.is_empty(), "{answered:?}");
}
