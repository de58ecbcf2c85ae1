//! The 2026-07-28 era: sealed `requestState` between rounds of a multi round-trip request.
//!
//! Round one answers with an `InputRequiredResult` asking for `sampling/createMessage` under the
//! key `"sample"`, and a `requestState` sealed with HMAC-SHA256 (rmcp's `RequestStateCodec`).
//! The seal is bound to the tool name and a digest of the exact arguments, and expires, so a
//! state cannot be replayed on another tool, other arguments, or much later. The state is
//! authenticated, not encrypted: it holds only the round's progress (repair attempts), which
//! the client has seen anyway.

#![allow(deprecated)] // MCP sampling is deprecated by SEP-2577, and it is what this server is.

use crate::error::{CallError, FaultKind, StartError};
use crate::fulfil::Progress;
use crate::pyjson::{self, Style};
use rmcp::model::{
    CreateMessageRequest, CreateMessageRequestParams, InputRequest, InputRequests,
    InputRequiredResult, RequestStateCodec, SealOptions,
};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The `inputRequests` key of the sampling request.
pub const SAMPLE_KEY: &str = "sample";

/// Largest `requestState` accepted: more than the server ever issues (five repairs of at most
/// 5 KiB each, even if every byte needs a six-byte JSON escape, base64-encoded), so a larger
/// one is refused before it is decoded.
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// What a sealed state is bound to: the tool and a digest of its exact arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding(String);

/// Seals and opens `requestState`.
#[derive(Clone)]
pub struct Sealer {
    codec: RequestStateCodec,
    ttl: Duration,
}

/// How the sealing key was chosen; reported in the startup log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    Environment,
    RandomPerProcess,
}

impl Sealer {
    /// `keys`: the sealing key first, then older keys still accepted for verification (key
    /// rotation). With no keys, a random per-process key is used: states then do not survive a
    /// restart, which is harmless for a stdio server whose host restarts the whole call.
    pub fn new(keys: &[Vec<u8>], ttl: Duration) -> Result<(Self, KeySource), StartError> {
        let (codec, source) = match keys {
            [] => {
                let mut key = vec![0u8; 32];
                getrandom::fill(&mut key).map_err(|e| {
                    StartError::Key(format!("no random source for the state key: {e}"))
                })?;
                let codec =
                    RequestStateCodec::try_new(key).map_err(|e| StartError::Key(e.to_string()))?;
                (codec, KeySource::RandomPerProcess)
            }
            keys => {
                // A key's id is derived from the key, so ids stay stable when keys rotate.
                let kid = |k: &[u8]| {
                    hex::encode(Sha256::digest(k))
                        .chars()
                        .take(12)
                        .collect::<String>()
                };
                let active = keys.first().map(|k| kid(k)).unwrap_or_default();
                let ring = keys.iter().map(|k| (kid(k), k.clone()));
                let codec = RequestStateCodec::new_with_keyring(active, ring).map_err(|e| {
                    StartError::Key(format!("state keys must each be at least 32 bytes: {e}"))
                })?;
                (codec, KeySource::Environment)
            }
        };
        Ok((Sealer { codec, ttl }, source))
    }

    /// The associated data binding a state to one tool and its exact arguments; computed once
    /// per request and used to open the retry's state and to seal the next one.
    pub fn binding(tool: &str, arguments: &Map<String, Value>) -> Binding {
        let canonical = pyjson::dumps_object(arguments, Style::CANONICAL);
        let digest = hex::encode(Sha256::digest(canonical.as_bytes()));
        Binding(format!("agent-as-model/1|{tool}|{digest}"))
    }

    /// An `InputRequiredResult` asking the client for one sampling call.
    pub fn ask(
        &self,
        binding: &Binding,
        progress: &Progress,
        params: CreateMessageRequestParams,
    ) -> Result<InputRequiredResult, CallError> {
        let sealed = self
            .codec
            .seal_json_with(
                progress,
                &SealOptions::new()
                    .associated_data(binding.0.as_bytes())
                    .ttl(self.ttl),
            )
            .map_err(|e| {
                CallError::fault(
                    FaultKind::Internal,
                    format!("could not seal requestState: {e}"),
                )
            })?;
        let mut requests = InputRequests::new();
        requests.insert(
            SAMPLE_KEY.to_owned(),
            InputRequest::CreateMessage(CreateMessageRequest::new(params)),
        );
        Ok(InputRequiredResult::new(Some(requests), Some(sealed)))
    }

    /// Opens the state of a retry. `Err` is a `-32602` JSON-RPC error: missing, tampered,
    /// expired or bound to another call.
    pub fn open(
        &self,
        binding: &Binding,
        state: Option<&str>,
        has_responses: bool,
    ) -> Result<Option<Progress>, CallError> {
        let Some(state) = state else {
            if has_responses {
                return Err(CallError::fault(
                    FaultKind::InvalidParams,
                    "inputResponses were sent without requestState: echo the requestState of \
                     the InputRequiredResult they answer",
                ));
            }
            return Ok(None);
        };
        if state.len() > MAX_STATE_BYTES {
            return Err(CallError::fault(
                FaultKind::InvalidParams,
                format!(
                    "requestState rejected: {} bytes is more than this server ever issues \
                     ({MAX_STATE_BYTES})",
                    state.len()
                ),
            ));
        }
        self.codec
            .open_json_with::<Progress>(state, binding.0.as_bytes())
            .map(Some)
            .map_err(|e| {
                CallError::fault(
                    FaultKind::InvalidParams,
                    format!(
                        "requestState rejected ({e}): it must be echoed unchanged, for the same \
                         tool and arguments, before it expires; start the call again without \
                         requestState"
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn state_round_trips_and_is_bound_to_tool_and_arguments() {
        let (sealer, source) = Sealer::new(&[], Duration::from_secs(60)).unwrap();
        assert_eq!(source, KeySource::RandomPerProcess);
        let a = args(json!({"prompt": "hi"}));
        let params = CreateMessageRequestParams::new(vec![], 10);
        let progress = Progress::default();
        let ir = sealer
            .ask(&Sealer::binding("generate", &a), &progress, params)
            .unwrap();
        let state = ir.request_state.unwrap();
        let opened = sealer
            .open(&Sealer::binding("generate", &a), Some(&state), true)
            .unwrap();
        assert_eq!(opened, Some(progress));
        let other = args(json!({"prompt": "bye"}));
        assert!(
            sealer
                .open(&Sealer::binding("generate", &other), Some(&state), true)
                .is_err()
        );
        assert!(
            sealer
                .open(&Sealer::binding("chat_complete", &a), Some(&state), true)
                .is_err()
        );
        let mut tampered = state.clone();
        tampered.push('x');
        assert!(
            sealer
                .open(&Sealer::binding("generate", &a), Some(&tampered), true)
                .is_err()
        );
        assert!(
            sealer
                .open(&Sealer::binding("generate", &a), None, true)
                .is_err()
        );
        assert_eq!(
            sealer
                .open(&Sealer::binding("generate", &a), None, false)
                .unwrap(),
            None
        );
    }

    #[test]
    fn configured_keys_rotate_and_short_keys_are_refused() {
        let old = vec![b'o'; 32];
        let new = vec![b'n'; 32];
        let (old_sealer, src) =
            Sealer::new(std::slice::from_ref(&old), Duration::from_secs(60)).unwrap();
        assert_eq!(src, KeySource::Environment);
        let a = args(json!({"prompt": "hi"}));
        let ir = old_sealer
            .ask(
                &Sealer::binding("generate", &a),
                &Progress::default(),
                CreateMessageRequestParams::new(vec![], 1),
            )
            .unwrap();
        let state = ir.request_state.unwrap();
        // After rotation the new key seals and the old one still verifies.
        let (rotated, _) = Sealer::new(&[new.clone(), old], Duration::from_secs(60)).unwrap();
        assert!(
            rotated
                .open(&Sealer::binding("generate", &a), Some(&state), true)
                .is_ok()
        );
        let (dropped, _) = Sealer::new(&[new], Duration::from_secs(60)).unwrap();
        assert!(
            dropped
                .open(&Sealer::binding("generate", &a), Some(&state), true)
                .is_err()
        );
        assert!(Sealer::new(&[vec![1u8; 8]], Duration::from_secs(1)).is_err());
    }

    #[test]
    fn the_largest_state_the_server_issues_is_one_it_accepts() {
        use crate::fulfil::{MAX_MAX_RETRIES, MAX_REPAIR_ECHO, MAX_REPAIR_PROBLEM, Repair};
        let (sealer, _) = Sealer::new(&[], Duration::from_secs(60)).unwrap();
        let a = args(json!({"prompt": "hi"}));
        let binding = Sealer::binding("generate", &a);
        // Control characters are the worst case: each becomes a six-byte escape in JSON.
        let worst = |n: usize| "\u{1}".repeat(n) + " [truncated]";
        let progress = Progress {
            repairs: (0..MAX_MAX_RETRIES)
                .map(|_| Repair {
                    answer: worst(MAX_REPAIR_ECHO),
                    problem: worst(MAX_REPAIR_PROBLEM),
                })
                .collect(),
        };
        let ir = sealer
            .ask(
                &binding,
                &progress,
                CreateMessageRequestParams::new(vec![], 1),
            )
            .unwrap();
        let state = ir.request_state.unwrap();
        assert!(state.len() <= MAX_STATE_BYTES, "{}", state.len());
        assert_eq!(
            sealer.open(&binding, Some(&state), true).unwrap(),
            Some(progress)
        );
    }

    #[test]
    fn expired_state_is_rejected() {
        let (sealer, _) = Sealer::new(&[], Duration::from_millis(1)).unwrap();
        let a = args(json!({"prompt": "hi"}));
        let ir = sealer
            .ask(
                &Sealer::binding("generate", &a),
                &Progress::default(),
                CreateMessageRequestParams::new(vec![], 1),
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let e = sealer
            .open(
                &Sealer::binding("generate", &a),
                ir.request_state.as_deref(),
                true,
            )
            .unwrap_err();
        assert!(e.to_string().contains("requestState rejected"), "{e}");
    }
}
