//! Conversation cursors: stateless, tamper-evident commitments to a conversation.
//!
//! A cursor is `"cur_" + hex(sha256(canonical))`, canonical being
//! `{"model": alias, "tool": name, "transcript": [{"content", "role"}...]}` written exactly as
//! Python's `json.dumps(obj, sort_keys=True, separators=(",", ":"))` writes it, so cursors minted
//! by the original verify here and the other way round. The server stores nothing: the caller
//! sends the history back and the server recomputes.

use crate::error::{CallError, CallResult};
use crate::pyjson::{self, Style};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// One transcript entry: a role (`system`, `developer`, `user`, `assistant`, `tool`) and its
/// content. Text-only content is the flattened string, exactly as the original commits to it;
/// richer content is a list of canonical parts (see `Entry::from_blocks`, beside the blocks in
/// [`crate::call`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub role: String,
    pub content: Value,
}

impl Entry {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Entry {
            role: role.to_owned(),
            content: Value::String(content.into()),
        }
    }
}

/// What `previous_response_id` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chain {
    /// Absent: cursors off, results keep their plain shape.
    Off,
    /// `""` or a `resp_` id: start (or anchor) a chain at the history given; nothing to verify.
    Start,
    /// A `cur_` cursor to check against the history.
    Verify(String),
}

impl Chain {
    pub fn is_on(&self) -> bool {
        !matches!(self, Chain::Off)
    }
}

const FIELD: &str = "previous_response_id";

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Reads `previous_response_id`.
pub fn parse(previous: Option<&str>) -> CallResult<Chain> {
    let Some(prev) = previous else {
        return Ok(Chain::Off);
    };
    if prev.is_empty() {
        return Ok(Chain::Start);
    }
    if let Some(hex) = prev.strip_prefix("resp_")
        && is_lower_hex(hex, 32)
    {
        return Ok(Chain::Start);
    }
    if let Some(hex) = prev.strip_prefix("cur_")
        && is_lower_hex(hex, 64)
    {
        return Ok(Chain::Verify(prev.to_owned()));
    }
    Err(CallError::at(
        FIELD,
        format!(
            "unrecognized value {}: expected \"\" to start a chain, a cursor \"cur_\" + 64 \
             lowercase hex digits from a previous answer, or a Responses id \"resp_\" + 32 \
             lowercase hex digits to anchor a new chain",
            Value::String(prev.chars().take(80).collect())
        ),
    ))
}

/// The canonical JSON the cursor hashes, written directly in sorted-key order (`content` <
/// `role`, `model` < `tool` < `transcript`) rather than through a value tree.
pub fn canonical(model: &str, tool: &str, transcript: &[Entry]) -> String {
    String::from_utf8(canonical_bytes(model, tool, transcript)).unwrap_or_default()
}

fn canonical_bytes(model: &str, tool: &str, transcript: &[Entry]) -> Vec<u8> {
    let size: usize = transcript
        .iter()
        .map(|e| 32 + e.role.len() + e.content.as_str().map_or(64, str::len))
        .sum();
    let mut out = Vec::with_capacity(64 + model.len() + tool.len() + size);
    out.extend_from_slice(b"{\"model\":");
    pyjson::write_str(&mut out, model);
    out.extend_from_slice(b",\"tool\":");
    pyjson::write_str(&mut out, tool);
    out.extend_from_slice(b",\"transcript\":[");
    for (i, e) in transcript.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"content\":");
        pyjson::write_value(&mut out, &e.content, Style::CANONICAL);
        out.extend_from_slice(b",\"role\":");
        pyjson::write_str(&mut out, &e.role);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

pub fn cursor(model: &str, tool: &str, transcript: &[Entry]) -> String {
    let digest = Sha256::digest(canonical_bytes(model, tool, transcript));
    format!("cur_{}", hex::encode(digest))
}

/// Checks `chain` against the history the caller sent, before anything reaches the host.
/// `can_verify` is false for `generate`, which has no structured history to check.
pub fn verify(
    chain: &Chain,
    model: &str,
    tool: &str,
    transcript: &[Entry],
    can_verify: bool,
) -> CallResult<()> {
    let Chain::Verify(received) = chain else {
        return Ok(());
    };
    if !can_verify {
        return Err(CallError::at(
            FIELD,
            format!(
                "{tool} cannot verify a cur_ cursor: a raw prompt carries no conversation \
                 history to check it against. Pass \"\" to mint a cursor over this prompt and \
                 its completion, or continue the conversation with chat_complete, \
                 messages_create or responses_create"
            ),
        ));
    }
    let Some(last_assistant) = transcript.iter().rposition(|e| e.role == "assistant") else {
        return Err(CallError::at(
            FIELD,
            "a cur_ cursor continues a conversation, but the history has no assistant turn; \
             include the previous assistant answer exactly as received, or pass \"\" to start a \
             new chain",
        ));
    };
    let through = transcript.get(..=last_assistant).unwrap_or(transcript);
    let expected = cursor(model, tool, through);
    if &expected != received {
        return Err(CallError::at(
            FIELD,
            format!(
                "cursor mismatch: expected {expected} (recomputed over model {model:?}, tool \
                 {tool:?} and the history through its last assistant turn), received \
                 {received}. The history differs from the one the cursor was minted for: a \
                 turn was edited, dropped or reordered, or the model or tool changed"
            ),
        ));
    }
    Ok(())
}

/// The cursor for the history plus the new assistant answer.
pub fn mint(model: &str, tool: &str, transcript: &[Entry], completion: &str) -> String {
    let mut full = transcript.to_vec();
    full.push(Entry::new("assistant", completion));
    cursor(model, tool, &full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Vector {
        tool: String,
        model: String,
        transcript: Vec<VEntry>,
        canonical: String,
        cursor: String,
    }
    #[derive(serde::Deserialize)]
    struct VEntry {
        role: String,
        content: String,
    }

    #[test]
    fn vectors_from_the_original_match_byte_for_byte() {
        let vectors: Vec<Vector> =
            serde_json::from_str(include_str!("../../tests/data/cursors.json")).unwrap();
        assert!(vectors.len() >= 10);
        for v in vectors {
            let t: Vec<Entry> = v
                .transcript
                .iter()
                .map(|e| Entry::new(&e.role, e.content.as_str()))
                .collect();
            assert_eq!(canonical(&v.model, &v.tool, &t), v.canonical);
            assert_eq!(cursor(&v.model, &v.tool, &t), v.cursor);
        }
    }

    #[test]
    fn rich_entries_keep_text_entries_unchanged() {
        use crate::call::Block;
        let text = Entry::from_blocks("user", &[Block::Text("hi".into())]);
        assert_eq!(text, Entry::new("user", "hi"));
        let rich = Entry::from_blocks(
            "user",
            &[
                Block::Text("look".into()),
                Block::Image {
                    data: "aGk=".into(),
                    mime: "image/png".into(),
                    sha256: Sha256::digest(b"hi").into(),
                },
            ],
        );
        assert_eq!(
            canonical("m", "chat_complete", &[rich]),
            // sha256("hi") = 8f434346...
            r#"{"model":"m","tool":"chat_complete","transcript":[{"content":[{"text":"look","type":"text"},{"mime_type":"image/png","sha256":"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4","type":"image"}],"role":"user"}]}"#
        );
    }

    #[test]
    fn forms_of_previous_response_id() {
        assert_eq!(parse(None).unwrap(), Chain::Off);
        assert_eq!(parse(Some("")).unwrap(), Chain::Start);
        let resp = format!("resp_{}", "a".repeat(32));
        assert_eq!(parse(Some(&resp)).unwrap(), Chain::Start);
        let cur = format!("cur_{}", "0".repeat(64));
        assert_eq!(parse(Some(&cur)).unwrap(), Chain::Verify(cur.clone()));
        for bad in [
            "cur_ABC",
            "resp_123",
            "hello",
            &format!("cur_{}", "A".repeat(64)),
        ] {
            let e = parse(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("previous_response_id") && e.contains("cur_"),
                "{e}"
            );
        }
    }

    #[test]
    fn verification_cuts_at_last_assistant_and_detects_tampering() {
        let t = vec![Entry::new("user", "a"), Entry::new("assistant", "b")];
        let cur = cursor("m", "chat_complete", &t);
        let mut next = t.clone();
        next.push(Entry::new("user", "c"));
        let chain = Chain::Verify(cur.clone());
        assert!(verify(&chain, "m", "chat_complete", &next, true).is_ok());
        let e = verify(&chain, "other", "chat_complete", &next, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&cur) && e.contains("expected cur_"), "{e}");
        assert!(verify(&chain, "m", "messages_create", &next, true).is_err());
        let mut edited = next.clone();
        edited[0].content = serde_json::json!("A");
        assert!(verify(&chain, "m", "chat_complete", &edited, true).is_err());
        let e = verify(&chain, "m", "chat_complete", &next[..1], true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no assistant turn"), "{e}");
        let e = verify(&chain, "m", "generate", &next, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot verify"), "{e}");
        assert_eq!(mint("m", "chat_complete", &t[..1], "b"), cur);
    }
}
