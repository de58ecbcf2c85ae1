//! Conversation cursors end to end (contract A6): minted like the original, verified before
//! anything is sent, on both eras.

use crate::common::*;
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

fn envelope(text: &str) -> (String, String) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v.as_object().unwrap().len(), 2, "{text}");
    (
        v["completion"].as_str().unwrap().to_owned(),
        v["response_id"].as_str().unwrap().to_owned(),
    )
}

/// The first vector of tests/data/cursors.json, computed by the original server.
const SAY_HI_CURSOR: &str = "cur_350025dc1e3b247d936f279e638ee99cd087dac8bab7a75bebfe3d5ca02e030b";

#[tokio::test]
async fn a_chain_continues_verified_and_agrees_with_the_original_on_both_eras() {
    for era in ERAS {
        let host = Host::new(false, |p| {
            Ok(reply(match last_text(p).as_str() {
                "Say hi." => "Hi.",
                _ => "Bye.",
            }))
        });
        let client = connect(host.clone(), era).await;
        let first = ok_text(
            &client,
            "chat_complete",
            json!({"messages": [user("Say hi.")], "previous_response_id": ""}),
        )
        .await;
        assert_eq!(
            first,
            r#"{"completion": "Hi.", "response_id": "cur_350025dc1e3b247d936f279e638ee99cd087dac8bab7a75bebfe3d5ca02e030b"}"#
        );
        let (_, cursor) = envelope(&first);
        assert_eq!(
            cursor, SAY_HI_CURSOR,
            "{era:?}: same cursor as the original"
        );

        let history =
            json!([user("Say hi."), {"role": "assistant", "content": "Hi."}, user("Now bye.")]);
        let second = ok_text(
            &client,
            "chat_complete",
            json!({"messages": history, "previous_response_id": cursor}),
        )
        .await;
        let (completion, next) = envelope(&second);
        assert_eq!(completion, "Bye.");
        assert_ne!(next, cursor);

        // Branch by truncation: the first cursor still continues the first turn.
        let branch =
            json!([user("Say hi."), {"role": "assistant", "content": "Hi."}, user("Again?")]);
        ok_text(
            &client,
            "chat_complete",
            json!({"messages": branch, "previous_response_id": SAY_HI_CURSOR}),
        )
        .await;
        assert_eq!(host.seen().len(), 3);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn tampering_fails_before_anything_is_sent() {
    let good = json!([user("Say hi."), {"role": "assistant", "content": "Hi."}, user("More.")]);
    let cases = [
        (
            "edited user turn",
            "chat_complete",
            json!({"messages": [user("Say HI."), {"role": "assistant", "content": "Hi."}, user("More.")], "previous_response_id": SAY_HI_CURSOR}),
        ),
        (
            "edited assistant turn",
            "chat_complete",
            json!({"messages": [user("Say hi."), {"role": "assistant", "content": "Hello."}, user("More.")], "previous_response_id": SAY_HI_CURSOR}),
        ),
        (
            "other model",
            "chat_complete",
            json!({"messages": good, "model": "gpt-4o", "previous_response_id": SAY_HI_CURSOR}),
        ),
        (
            "other tool",
            "messages_create",
            json!({"messages": good, "previous_response_id": SAY_HI_CURSOR}),
        ),
    ];
    for era in ERAS {
        let host = Host::text("never");
        let client = connect(host.clone(), era).await;
        for (label, tool, args) in &cases {
            let e = err_text(&client, tool, args.clone()).await;
            assert!(e.contains("cursor mismatch"), "{label}: {e}");
            assert!(
                e.contains(&format!("received {SAY_HI_CURSOR}")),
                "{label}: {e}"
            );
            assert!(e.contains("expected cur_"), "{label}: {e}");
        }
        let malformed = [
            "cur_123",
            "resp_xyz",
            "hello",
            "CUR_350025dc1e3b247d936f279e638ee99cd087dac8bab7a75bebfe3d5ca02e030b",
        ];
        for m in malformed {
            let e = err_text(
                &client,
                "chat_complete",
                json!({"messages": good, "previous_response_id": m}),
            )
            .await;
            assert!(
                e.contains("`previous_response_id`: unrecognized value"),
                "{m}: {e}"
            );
        }
        let e = err_text(
            &client,
            "chat_complete",
            json!({"messages": [user("x")], "previous_response_id": SAY_HI_CURSOR}),
        )
        .await;
        assert!(e.contains("no assistant turn"), "{e}");
        let e = err_text(
            &client,
            "generate",
            json!({"prompt": "x", "previous_response_id": SAY_HI_CURSOR}),
        )
        .await;
        assert!(e.contains("generate cannot verify a cur_ cursor"), "{e}");
        assert!(host.seen().is_empty(), "{era:?}: nothing reached the host");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn verification_runs_on_round_one_of_mrtr() {
    let client = connect(Host::text("x"), Era::Modern).await;
    let bad = params(
        "chat_complete",
        json!({"messages": [user("Say hi."), {"role": "assistant", "content": "Hey."}], "previous_response_id": SAY_HI_CURSOR}),
    );
    let CallToolResponse::Complete(r) = client.call_tool_once(bad).await.unwrap() else {
        panic!("a bad cursor must fail at once, not ask for input");
    };
    assert!(is_error(&r) && text(&r).contains("cursor mismatch"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn responses_ids_are_cursors_and_resp_ids_anchor() {
    for era in ERAS {
        let client = connect(Host::text("{\"a\": 1}"), era).await;
        let anchor = format!("resp_{}", "0123456789abcdef".repeat(2));
        let r = call(
            &client,
            "responses_create",
            json!({"input": [{"role": "developer", "content": "Use JSON."}, {"role": "user", "content": "x"}],
                   "model": "gpt-4o", "previous_response_id": anchor}),
        )
        .await;
        let obj: Value = serde_json::from_str(&text(&r)).unwrap();
        // The fourth vector of tests/data/cursors.json.
        assert_eq!(obj["id"], json!(vector(3)));
        let next = json!({"input": [
            {"role": "developer", "content": "Use JSON."}, {"role": "user", "content": "x"},
            {"role": "assistant", "content": "{\"a\": 1}"}, {"role": "user", "content": "again"}],
            "model": "gpt-4o", "previous_response_id": obj["id"]});
        let r2 = call(&client, "responses_create", next).await;
        assert!(!is_error(&r2), "{}", text(&r2));
        // Without previous_response_id the id is an ordinary resp_ id.
        let r3 = call(&client, "responses_create", json!({"input": "x"})).await;
        let obj3: Value = serde_json::from_str(&text(&r3)).unwrap();
        assert!(obj3["id"].as_str().unwrap().starts_with("resp_"));
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn messages_create_and_generate_mint_cursors() {
    for era in ERAS {
        let client = connect(Host::text(" there was a crate."), era).await;
        let out = ok_text(
            &client,
            "generate",
            json!({"prompt": "Once upon a time", "previous_response_id": ""}),
        )
        .await;
        // The fifth vector of tests/data/cursors.json.
        assert_eq!(envelope(&out).1, vector(4));
        client.cancel().await.unwrap();
        // The third vector: the system prompt leads the transcript as a "system" entry.
        let client = connect(Host::text("4"), era).await;
        let out = ok_text(
            &client,
            "messages_create",
            json!({"system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Always."}],
                   "messages": [{"role": "user", "content": "2+2?"}], "previous_response_id": ""}),
        )
        .await;
        assert_eq!(envelope(&out), ("4".to_owned(), vector(2)));
        client.cancel().await.unwrap();
    }
}

fn vector(i: usize) -> String {
    let v: Vec<Value> = serde_json::from_str(include_str!("../data/cursors.json")).unwrap();
    v[i]["cursor"].as_str().unwrap().to_owned()
}
