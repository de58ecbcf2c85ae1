//! Every parameter a real OpenAI or Anthropic client sends gets a defined outcome: forwarded
//! (in the sampling request, some inside its `metadata`), emulated (`stream`), rejected with an
//! error (what sampling cannot do at all), or reported in `warnings` (no sampling equivalent, or
//! an argument nobody knows). The original ignored unknown arguments silently.

use crate::args::Obj;
use crate::call::{MAX_TOP_LOGPROBS, RESERVED_TEMPLATE_KWARGS, Samplers, Tuning};
use crate::error::{CallError, CallResult};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Parameters accepted for compatibility that have no equivalent in sampling.
const NO_EQUIVALENT: [&str; 7] = [
    "parallel_tool_calls",
    "store",
    "service_tier",
    "logit_bias",
    "truncation",
    "prediction",
    "stream_options",
];

/// What the Responses API's `include` names to have the answer's text carry its tokens'
/// log-probabilities.
pub const INCLUDE_LOGPROBS: &str = "message.output_text.logprobs";

/// The argument names a tool definition declares in its input schema.
pub fn declared_arguments(definition: &Value) -> HashSet<String> {
    definition
        .get("inputSchema")
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|props| props.keys().cloned().collect())
        .unwrap_or_default()
}

/// What the parameters contribute to a call.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Extras {
    /// Sent as the sampling request's `metadata`.
    pub metadata: Map<String, Value>,
    pub tuning: Tuning,
    /// OpenAI's penalties on repeated tokens, where the shape has them.
    pub samplers: Samplers,
    /// `stream: true` was asked.
    pub stream: bool,
    pub warnings: Vec<String>,
    /// What the caller asked of the model's reasoning.
    pub reasoning: crate::call::Reasoning,
    /// `chat_template_kwargs`, for a model's chat template.
    pub template_kwargs: Map<String, Value>,
    /// The answer's tokens' log-probabilities were asked for, with this many alternatives.
    pub logprobs: Option<u8>,
}

/// How a shape spells the [`Tuning`] parameters, where it has them.
#[derive(Debug, Clone, Copy, Default)]
pub struct TuningKeys {
    pub top_p: Option<&'static str>,
    pub top_k: Option<&'static str>,
    pub seed: Option<&'static str>,
}

impl TuningKeys {
    /// Every shape but Gemini's.
    pub const SNAKE: TuningKeys = TuningKeys {
        top_p: Some("top_p"),
        top_k: Some("top_k"),
        seed: Some("seed"),
    };

    /// Only the keys the tool declares (`known`): others are unknown arguments.
    pub fn declared(self, known: &HashSet<String>) -> TuningKeys {
        let keep = |key: Option<&'static str>| key.filter(|k| known.contains(*k));
        TuningKeys {
            top_p: keep(self.top_p),
            top_k: keep(self.top_k),
            seed: keep(self.seed),
        }
    }

    /// The typed parameters, each checked where it is given: `top_p` a number in 0..=1,
    /// `top_k` a non-negative integer, `seed` an integer (negative: a random draw, as
    /// llama.cpp's -1).
    pub fn read(&self, o: &Obj<'_>) -> CallResult<Tuning> {
        let given = |key: Option<&'static str>| key.and_then(|k| o.get(k).map(|v| (k, v)));
        let top_k = match given(self.top_k) {
            Some((key, v)) if !v.is_null() => Some(
                v.as_u64()
                    .map(|k| u32::try_from(k).unwrap_or(u32::MAX))
                    .ok_or_else(|| {
                        CallError::expected(&o.path(key), "a non-negative integer", v)
                    })?,
            ),
            _ => None,
        };
        let seed = match given(self.seed) {
            Some((key, v)) if !v.is_null() => Some(
                v.as_i64()
                    .ok_or_else(|| CallError::expected(&o.path(key), "an integer", v))?,
            ),
            _ => None,
        };
        Ok(Tuning {
            top_p: match self.top_p {
                Some(key) => o.opt_f64_in(key, 0.0..=1.0)?,
                None => None,
            },
            top_k,
            seed,
        })
    }
}

/// How a shape spells OpenAI's two penalties on repeated tokens.
#[derive(Debug, Clone, Copy)]
pub struct PenaltyKeys {
    pub presence: &'static str,
    pub frequency: &'static str,
}

impl PenaltyKeys {
    /// OpenAI's chat and text completions.
    pub const SNAKE: PenaltyKeys = PenaltyKeys {
        presence: "presence_penalty",
        frequency: "frequency_penalty",
    };

    /// Gemini's `generationConfig`.
    pub const CAMEL: PenaltyKeys = PenaltyKeys {
        presence: "presencePenalty",
        frequency: "frequencyPenalty",
    };

    /// The penalties where given, each a number from -2 to 2 as OpenAI takes them.
    pub fn read(&self, o: &Obj<'_>) -> CallResult<Samplers> {
        Ok(Samplers {
            presence_penalty: o.opt_f64_in(self.presence, -2.0..=2.0)?,
            frequency_penalty: o.opt_f64_in(self.frequency, -2.0..=2.0)?,
            ..Samplers::default()
        })
    }

    /// [`PenaltyKeys::read`] where the tool declares both keys (`known`); none otherwise (they
    /// are unknown arguments then).
    fn read_declared(&self, o: &Obj<'_>, known: &HashSet<String>) -> CallResult<Samplers> {
        if known.contains(self.presence) && known.contains(self.frequency) {
            self.read(o)
        } else {
            Ok(Samplers::default())
        }
    }
}

/// The typed sampling parameters among those the tool declares (`known`).
fn typed(o: &Obj<'_>, known: &HashSet<String>) -> CallResult<Extras> {
    Ok(Extras {
        tuning: TuningKeys::SNAKE.declared(known).read(o)?,
        samplers: PenaltyKeys::SNAKE.read_declared(o, known)?,
        ..Extras::default()
    })
}

/// Reads the parameters every OpenAI- and Anthropic-shaped tool may carry: `metadata_keys` are
/// forwarded, arguments outside `known` are reported.
pub fn handle(o: &Obj<'_>, metadata_keys: &[&str], known: &HashSet<String>) -> CallResult<Extras> {
    let mut extras = typed(o, known)?;
    if let Some(n) = o.get("n")
        && n.as_u64() != Some(1)
    {
        return Err(CallError::expected(
            "n",
            "1 (each call yields one completion, whichever model answers; call again for more)",
            n,
        ));
    }
    extras.logprobs = logprobs(o, known, &mut extras.warnings)?;
    let audio_out = o
        .get("modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x == "audio"));
    if audio_out || o.get("audio").is_some() {
        return Err(CallError::at(
            if audio_out { "modalities" } else { "audio" },
            "audio output cannot be requested: MCP sampling does not let the server ask for it, \
             and the local model and the provider answer in text",
        ));
    }
    match o.get("stream") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => extras.stream = true,
        Some(other) => return Err(CallError::expected("stream", "a boolean", other)),
    }
    for key in metadata_keys {
        if let Some(v) = o.get(key) {
            extras.metadata.insert((*key).to_owned(), v.clone());
        }
    }
    extras.reasoning = if known.contains("thinking") {
        super::reasoning::anthropic(o)?
    } else {
        super::reasoning::openai(o)?
    };
    if known.contains("chat_template_kwargs") {
        extras.template_kwargs = template_kwargs(o)?;
    }
    extras.warnings.extend(unknown_arguments(o, known));
    Ok(extras)
}

/// The log-probabilities asked for, as the shape's tool spells the ask: chat completions'
/// `logprobs` and `top_logprobs`, or the Responses API's `include` and `top_logprobs`. A shape
/// that declares neither asks for none (the keys are unknown arguments there).
fn logprobs(
    o: &Obj<'_>,
    known: &HashSet<String>,
    warnings: &mut Vec<String>,
) -> CallResult<Option<u8>> {
    if known.contains("logprobs") {
        asked_logprobs(o, "logprobs", "top_logprobs")
    } else if known.contains("include") && known.contains("top_logprobs") {
        responses_logprobs(o, warnings)
    } else {
        Ok(None)
    }
}

/// `ask` (a boolean) asks for the answer's tokens' log-probabilities; `top` (0 to
/// [`MAX_TOP_LOGPROBS`], only with `ask: true`) says how many likeliest alternatives each token
/// comes with: chat completions' `logprobs` and `top_logprobs` (as OpenAI takes them), Gemini's
/// `responseLogprobs` and `logprobs`.
pub fn asked_logprobs(o: &Obj<'_>, ask: &str, top: &str) -> CallResult<Option<u8>> {
    let asked = match o.get(ask) {
        None => false,
        Some(Value::Bool(asked)) => *asked,
        Some(other) => return Err(CallError::expected(&o.path(ask), "a boolean", other)),
    };
    let alternatives = alternatives(o, top)?;
    if alternatives.is_some() && !asked {
        return Err(CallError::at(
            &o.path(top),
            format!(
                "needs `{ask}: true`: the likeliest alternatives come with each token's own \
                 log-probability"
            ),
        ));
    }
    Ok(asked.then(|| alternatives.unwrap_or(0)))
}

/// `key` (the alternatives at each place), when given: an integer from 0 to
/// [`MAX_TOP_LOGPROBS`].
fn alternatives(o: &Obj<'_>, key: &str) -> CallResult<Option<u8>> {
    let Some(v) = o.get(key) else {
        return Ok(None);
    };
    (v.as_u64())
        .and_then(|n| u8::try_from(n).ok())
        .filter(|n| *n <= MAX_TOP_LOGPROBS)
        .map(Some)
        .ok_or_else(|| {
            CallError::expected(
                &o.path(key),
                &format!("an integer from 0 to {MAX_TOP_LOGPROBS}"),
                v,
            )
        })
}

/// The Responses API: `include` naming [`INCLUDE_LOGPROBS`] asks, `top_logprobs` says how many
/// alternatives; what else `include` names has nothing here to include, and `top_logprobs`
/// without the ask is ignored (as OpenAI ignores it): both are said in `warnings`.
fn responses_logprobs(o: &Obj<'_>, warnings: &mut Vec<String>) -> CallResult<Option<u8>> {
    let include = match o.get("include") {
        None => &[][..],
        Some(Value::Array(items)) => items.as_slice(),
        Some(other) => return Err(CallError::expected(&o.path("include"), "a list", other)),
    };
    let mut asked = false;
    for (i, item) in include.iter().enumerate() {
        match item.as_str() {
            Some(INCLUDE_LOGPROBS) => asked = true,
            Some(other) => warnings.push(format!(
                "`include` {:?} was ignored: this server has nothing of it to include",
                crate::error::clip(other)
            )),
            None => {
                let path = format!("{}[{i}]", o.path("include"));
                return Err(CallError::expected(&path, "a string", item));
            }
        }
    }
    let top = alternatives(o, "top_logprobs")?;
    if !asked && top.is_some_and(|n| n > 0) {
        warnings.push(format!(
            "`top_logprobs` was ignored: log-probabilities are returned when `include` names \
             {INCLUDE_LOGPROBS:?}"
        ));
    }
    Ok(asked.then(|| top.unwrap_or(0)))
}

/// `chat_template_kwargs`: an object of keyword arguments for the model's chat template (as
/// llama-server and vLLM take it), none of them a name the server sets itself.
fn template_kwargs(o: &Obj<'_>) -> CallResult<Map<String, Value>> {
    let key = "chat_template_kwargs";
    let kwargs = match o.get(key) {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(kwargs)) => kwargs,
        Some(other) => {
            return Err(CallError::expected(
                &o.path(key),
                "an object of keyword arguments for the chat template",
                other,
            ));
        }
    };
    if let Some(name) = RESERVED_TEMPLATE_KWARGS
        .iter()
        .find(|name| kwargs.contains_key(**name))
    {
        return Err(CallError::at(
            &format!("{}.{name}", o.path(key)),
            format!(
                "`{name}` is set by the server from the request itself; template arguments \
                 cannot replace {}",
                RESERVED_TEMPLATE_KWARGS.join(", ")
            ),
        ));
    }
    Ok(kwargs.clone())
}

/// Warnings for the arguments outside `known`, and for known ones that have no equivalent.
pub fn unknown_arguments(o: &Obj<'_>, known: &HashSet<String>) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut keys: Vec<&String> = o.map().keys().collect();
    keys.sort();
    for key in keys {
        if NO_EQUIVALENT.contains(&key.as_str()) && known.contains(key) {
            if o.get(key).is_some() && !(key == "stream_options" && o.get("stream").is_some()) {
                warnings.push(format!(
                    "`{key}` has no equivalent in MCP sampling and was ignored"
                ));
            }
        } else if !known.contains(key) {
            warnings.push(format!(
                "unknown argument `{}` was ignored",
                crate::error::clip(key)
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::{self, Shape};
    use serde_json::json;

    fn known(shape: &dyn Shape) -> HashSet<String> {
        declared_arguments(&serde_json::from_str(shape.definition()).unwrap())
    }

    fn run(keys: &[&str], shape: &dyn Shape, v: Value) -> CallResult<Extras> {
        handle(&Obj::root(v.as_object().unwrap()), keys, &known(shape))
    }

    const CHAT_KEYS: [&str; 3] = ["top_p", "seed", "user"];

    #[test]
    fn chat_template_kwargs_are_an_object_the_chat_shape_reads() {
        let chat = &shapes::openai_chat::ChatComplete;
        let kwargs = json!({"enable_thinking": false, "date_string": "26 Jul 2024"});
        let e = run(&CHAT_KEYS, chat, json!({"chat_template_kwargs": kwargs})).unwrap();
        assert_eq!(Value::Object(e.template_kwargs), kwargs);
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        let e = run(&CHAT_KEYS, chat, json!({"chat_template_kwargs": null})).unwrap();
        assert!(e.template_kwargs.is_empty());
        let e = run(&CHAT_KEYS, chat, json!({"chat_template_kwargs": "x"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("chat_template_kwargs") && e.contains("expected an object"),
            "{e}"
        );
        let e = run(
            &CHAT_KEYS,
            chat,
            json!({"chat_template_kwargs": {"tools": []}}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("chat_template_kwargs.tools") && e.contains("set by the server"),
            "{e}"
        );
        // Other shapes do not declare it: an unknown argument.
        let messages = &shapes::anthropic::MessagesCreate;
        let e = run(&[], messages, json!({"chat_template_kwargs": {}})).unwrap();
        assert!(e.template_kwargs.is_empty());
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("unknown argument `chat_template_kwargs`")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn each_parameter_has_an_outcome() {
        let chat = &shapes::openai_chat::ChatComplete;
        let e = run(
            &CHAT_KEYS,
            chat,
            json!({"messages": [], "top_p": 0.9, "seed": 7, "user": "u",
            "stream": true, "parallel_tool_calls": false, "frobnicate": 1}),
        )
        .unwrap();
        assert_eq!(
            e.metadata,
            json!({"top_p": 0.9, "seed": 7, "user": "u"})
                .as_object()
                .unwrap()
                .clone()
        );
        assert!(e.stream);
        assert_eq!(
            e.tuning,
            Tuning {
                top_p: Some(0.9),
                top_k: None,
                seed: Some(7)
            }
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("`parallel_tool_calls` has no equivalent"))
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("unknown argument `frobnicate`"))
        );
        assert_eq!(e.warnings.len(), 2, "{:?}", e.warnings);
        for (args, field) in [
            (json!({"n": 2}), "`n`"),
            (json!({"modalities": ["text", "audio"]}), "`modalities`"),
            (json!({"stream": "yes"}), "`stream`"),
            (json!({"top_p": 1.5}), "`top_p`"),
            (json!({"seed": "7"}), "`seed`"),
        ] {
            let err = run(&CHAT_KEYS, chat, args).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
        assert!(run(&CHAT_KEYS, chat, json!({"n": 1, "logprobs": false})).is_ok());
    }

    #[test]
    fn chat_logprobs_ask_with_their_alternatives_and_bad_ones_are_named() {
        let chat = &shapes::openai_chat::ChatComplete;
        let asked = |v: Value| run(&CHAT_KEYS, chat, v).map(|e| e.logprobs);
        assert_eq!(asked(json!({})).unwrap(), None);
        assert_eq!(asked(json!({"logprobs": false})).unwrap(), None);
        assert_eq!(asked(json!({"logprobs": true})).unwrap(), Some(0));
        let top = json!({"logprobs": true, "top_logprobs": 20});
        assert_eq!(asked(top).unwrap(), Some(20));
        let e = run(
            &CHAT_KEYS,
            chat,
            json!({"logprobs": true, "top_logprobs": 3}),
        )
        .unwrap();
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        for (args, field, expected) in [
            (json!({"logprobs": "yes"}), "`logprobs`", "a boolean"),
            (json!({"logprobs": 1}), "`logprobs`", "a boolean"),
            (
                json!({"top_logprobs": 3}),
                "`top_logprobs`",
                "needs `logprobs: true`",
            ),
            (
                json!({"logprobs": false, "top_logprobs": 0}),
                "`top_logprobs`",
                "needs `logprobs: true`",
            ),
            (
                json!({"logprobs": true, "top_logprobs": 21}),
                "`top_logprobs`",
                "an integer from 0 to 20",
            ),
            (
                json!({"logprobs": true, "top_logprobs": -1}),
                "`top_logprobs`",
                "an integer from 0 to 20",
            ),
        ] {
            let err = run(&CHAT_KEYS, chat, args).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains(expected), "{err}");
        }
        // A shape without them (Anthropic's) asks for none: they are unknown there.
        let messages = &shapes::anthropic::MessagesCreate;
        let e = run(&[], messages, json!({"logprobs": true})).unwrap();
        assert_eq!(e.logprobs, None);
        assert!(
            e.warnings[0].contains("unknown argument `logprobs`"),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn responses_logprobs_are_asked_by_include_with_top_logprobs_alternatives() {
        let responses = &shapes::responses::ResponsesCreate;
        let read = |v: Value| run(&[], responses, v).unwrap();
        let include = json!(["message.output_text.logprobs"]);
        let e = read(json!({"include": include, "top_logprobs": 2}));
        assert_eq!(e.logprobs, Some(2));
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        assert_eq!(read(json!({"include": include})).logprobs, Some(0));
        // Other values, and alternatives without the ask, are said to be ignored.
        let e = read(json!({"include": ["reasoning.encrypted_content"], "top_logprobs": 2}));
        assert_eq!(e.logprobs, None);
        let w = e.warnings.join("; ");
        assert!(
            w.contains("reasoning.encrypted_content") && w.contains("`top_logprobs`"),
            "{w}"
        );
        for (args, field) in [
            (
                json!({"include": "message.output_text.logprobs"}),
                "`include`",
            ),
            (json!({"include": [1]}), "`include[0]`"),
            (
                json!({"include": include, "top_logprobs": 30}),
                "`top_logprobs`",
            ),
        ] {
            let err = run(&[], responses, args).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
    }

    #[test]
    fn openais_penalties_reach_the_call_where_the_shape_declares_them() {
        let chat = &shapes::openai_chat::ChatComplete;
        let keys = ["presence_penalty", "frequency_penalty"];
        let e = run(
            &keys,
            chat,
            json!({"presence_penalty": 0.5, "frequency_penalty": -1}),
        )
        .unwrap();
        let expected = Samplers {
            presence_penalty: Some(0.5),
            frequency_penalty: Some(-1.0),
            ..Samplers::default()
        };
        assert_eq!(e.samplers, expected);
        assert_eq!(e.metadata.len(), 2, "{:?}", e.metadata);
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        let e = run(&keys, chat, json!({"presence_penalty": null})).unwrap();
        assert_eq!(e.samplers, Samplers::default());
        for (field, value, expected) in [
            ("presence_penalty", json!(2.5), "-2 to 2"),
            ("frequency_penalty", json!(-3), "-2 to 2"),
            ("frequency_penalty", json!("1"), "a number"),
        ] {
            let err = run(&keys, chat, json!({field: value}))
                .unwrap_err()
                .to_string();
            assert!(err.contains(field) && err.contains(expected), "{err}");
        }
        // Anthropic's shape has no penalties: an unknown argument, not applied.
        let messages = &shapes::anthropic::MessagesCreate;
        let e = run(&[], messages, json!({"presence_penalty": 1})).unwrap();
        assert_eq!(e.samplers, Samplers::default());
        assert!(
            e.warnings[0].contains("unknown argument `presence_penalty`"),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn known_arguments_come_from_the_declared_schemas() {
        let generate = &shapes::prompt::Generate;
        assert!(known(generate).contains("prompt"));
        assert!(!known(generate).contains("messages"));
        let e = run(&[], generate, json!({"prompt": "x", "tools": []})).unwrap();
        assert_eq!(
            e.warnings,
            vec!["unknown argument `tools` was ignored".to_owned()]
        );
    }
}
