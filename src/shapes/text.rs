//! OpenAI's legacy text completions (`POST /v1/completions`) as a call: `prompt` (a string, or
//! a list of one), `suffix` for fill-in-the-middle, `echo`, and the sampling settings chat
//! completions also takes. The call carries the prompt as raw text ([`TextPrompt`]), which the
//! embedded model continues without its chat template, and as the one user message other
//! backends read. This is an HTTP API's request only: no MCP tool has this shape.

use super::common::{Common, Env, Format, Hooks, Spelling};
use super::{Placement, Shape, params};
use crate::args::Obj;
use crate::call::{Call, TextPrompt};
use crate::error::{CallError, CallResult};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::OnceLock;

/// The request of `POST /v1/completions`.
pub struct TextComplete;

/// OpenAI's default `max_tokens` for a text completion.
pub const DEFAULT_MAX_TOKENS: u32 = 16;

const SPELLING: Spelling = Spelling {
    tool: "completions",
    list_key: "prompt",
    modes: false,
    settings: None,
    stop: Some("stop"),
    max_tokens: "max_tokens",
    max_tokens_alias: None,
    format: Format::None,
    metadata: &[
        "top_p",
        "seed",
        "user",
        "presence_penalty",
        "frequency_penalty",
    ],
    verifies_cursors: false,
    hooks: Hooks::COMMON,
};

/// The fields read by [`Common`] (the others are this shape's own, or reported as unknown).
const COMMON_FIELDS: [&str; 10] = [
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "n",
    "user",
    "presence_penalty",
    "frequency_penalty",
];

/// The fields OpenAI's text completions take (`stream` and `stream_options` are read by the
/// HTTP front).
const DEFINITION: &str = r#"{
  "name": "completions",
  "description": "OpenAI's legacy text completions (POST /v1/completions): the prompt continued as text.",
  "inputSchema": {"type": "object", "properties": {
    "model": {}, "prompt": {}, "suffix": {}, "echo": {}, "logprobs": {}, "best_of": {},
    "max_tokens": {}, "temperature": {}, "top_p": {}, "stop": {}, "seed": {}, "stream": {},
    "stream_options": {}, "n": {}, "presence_penalty": {}, "frequency_penalty": {},
    "logit_bias": {}, "user": {}
  }},
  "outputSchema": {"type": "object"}
}"#;

/// The fields [`DEFINITION`] declares.
fn known() -> &'static HashSet<String> {
    static KNOWN: OnceLock<HashSet<String>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        params::declared_arguments(&serde_json::from_str(DEFINITION).unwrap_or(Value::Null))
    })
}

impl Shape for TextComplete {
    fn name(&self) -> &'static str {
        SPELLING.tool
    }

    fn definition(&self) -> &'static str {
        DEFINITION
    }

    fn parse(&self, o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
        let prompt = prompt(o)?;
        let suffix = suffix(o, env.limits)?;
        if prompt.is_empty() && suffix.is_none() {
            return Err(CallError::at(
                "prompt",
                "is empty: give the text to continue",
            ));
        }
        let echo = match o.get("echo") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(CallError::expected("echo", "a boolean", other)),
        };
        let logprobs = logprobs(o)?;
        refuse_best_of(o)?;
        let warnings = params::unknown_arguments(o, known());
        // What the common arguments are read from: the fields they spell, with OpenAI's
        // default token limit.
        let mut common: Map<String, Value> = COMMON_FIELDS
            .iter()
            .filter_map(|k| o.map().get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect();
        if o.get("max_tokens").is_none() {
            common.insert("max_tokens".into(), json!(DEFAULT_MAX_TOKENS));
        }
        let env = Env {
            limits: env.limits,
            known: known(),
        };
        let read = Common::read(&Obj::new(&common, o.here()), &SPELLING, &env)?;
        let mut call = read.into_call(super::prompt::one_user_turn(&prompt), env.limits)?;
        call.request.logprobs = logprobs;
        call.request.text = Some(TextPrompt {
            prompt,
            suffix,
            echo,
        });
        call.warnings.extend(warnings);
        Ok(call)
    }

    fn placement(&self) -> Placement {
        Placement::Beside
    }
}

/// `prompt`: a string, or a list of one string. One call yields one completion, so a list of
/// several is refused, as are token arrays (this server reads text).
fn prompt(o: &Obj<'_>) -> CallResult<String> {
    const ONE: &str = "one call yields one completion here: send one prompt, as a string (or a \
                       list of one string), and call again for another";
    match o.required("prompt")? {
        Value::String(s) => Ok(s.clone()),
        Value::Array(items) => match items.as_slice() {
            [Value::String(s)] => Ok(s.clone()),
            [] => Err(CallError::at(
                "prompt",
                "is an empty list; send the prompt as a string",
            )),
            [Value::Number(_), ..] | [Value::Array(_), ..] => Err(CallError::at(
                "prompt",
                "token arrays are not taken here: send the prompt as text",
            )),
            [other] => Err(CallError::expected("prompt", "a string", other)),
            _ => Err(CallError::at(
                "prompt",
                format!("a list of {} prompts: {ONE}", items.len()),
            )),
        },
        other => Err(CallError::expected(
            "prompt",
            "a string or a list of one string",
            other,
        )),
    }
}

/// `suffix`: a string within the message limit, if given.
fn suffix(o: &Obj<'_>, limits: &crate::limits::Limits) -> CallResult<Option<String>> {
    let suffix = match o.get("suffix") {
        None => return Ok(None),
        Some(Value::String(s)) => s,
        Some(other) => return Err(CallError::expected("suffix", "a string", other)),
    };
    let chars = suffix.chars().count();
    if chars > limits.max_message_chars {
        return Err(CallError::at(
            "suffix",
            format!(
                "{chars} characters of text is over the limit of {} \
                 (AGENT_AS_MODEL_MAX_MESSAGE_CHARS)",
                limits.max_message_chars
            ),
        ));
    }
    Ok(Some(suffix.clone()))
}

/// The most alternatives legacy completions' `logprobs` asks for (OpenAI's limit).
pub const MAX_LOGPROBS: u8 = 5;

/// `logprobs`: the answer's tokens' log-probabilities, with this many likeliest alternatives
/// (0 to [`MAX_LOGPROBS`]; 0: the chosen token's own only); absent or null asks for none.
fn logprobs(o: &Obj<'_>) -> CallResult<Option<u8>> {
    match o.get("logprobs") {
        None => Ok(None),
        Some(v) => (v.as_u64())
            .and_then(|n| u8::try_from(n).ok())
            .filter(|n| *n <= MAX_LOGPROBS)
            .map(Some)
            .ok_or_else(|| {
                CallError::expected(
                    "logprobs",
                    &format!("an integer from 0 to {MAX_LOGPROBS} (the alternatives per token)"),
                    v,
                )
            }),
    }
}

/// `best_of`: 1 only.
fn refuse_best_of(o: &Obj<'_>) -> CallResult<()> {
    if let Some(v) = o.get("best_of")
        && v.as_u64() != Some(1)
    {
        return Err(CallError::expected(
            "best_of",
            "1 (each call yields one completion, whichever model answers; call again for more)",
            v,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Role, Turn};
    use crate::shapes::common::tests_support::parse;

    fn path_of(e: CallError) -> String {
        match e {
            CallError::Argument { path, .. } => path,
            other => panic!("not an argument error: {other}"),
        }
    }

    #[test]
    fn a_prompt_is_one_user_turn_and_raw_text_with_openais_default_limit() {
        let c = parse(&TextComplete, json!({"model": "m", "prompt": ["Once"]})).unwrap();
        assert_eq!(c.request.turns, vec![Turn::text(Role::User, "Once")]);
        assert_eq!(c.request.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(c.request.logprobs, None);
        let asked = parse(&TextComplete, json!({"prompt": "a", "logprobs": 5})).unwrap();
        assert_eq!(asked.request.logprobs, Some(5));
        let null = parse(&TextComplete, json!({"prompt": "a", "logprobs": null})).unwrap();
        assert_eq!(null.request.logprobs, None);
        let text = c.request.text.unwrap();
        assert_eq!(
            (text.prompt.as_str(), text.suffix, text.echo),
            ("Once", None, false)
        );
        let c = parse(
            &TextComplete,
            json!({"prompt": "a", "suffix": "z", "echo": true, "max_tokens": 5,
                   "stop": "\n", "seed": 3, "logprobs": 0, "best_of": 1, "n": 1,
                   "presence_penalty": 0.5, "frequency_penalty": 0, "logit_bias": {"1": 2},
                   "persona": "x", "user": "u"}),
        )
        .unwrap();
        assert_eq!(c.request.max_tokens, 5);
        assert_eq!(c.request.stop, ["\n"]);
        assert_eq!(c.request.tuning.seed, Some(3));
        // The penalties are the call's, and forwarded to a sampling host as chat's are.
        assert_eq!(c.request.samplers.presence_penalty, Some(0.5));
        assert_eq!(c.request.samplers.frequency_penalty, Some(0.0));
        assert_eq!(c.metadata["presence_penalty"], 0.5);
        assert!(c.persona.is_none());
        // `logprobs: 0` asks for the chosen tokens' own; null for none.
        assert_eq!(c.request.logprobs, Some(0));
        let text = c.request.text.unwrap();
        assert_eq!((text.suffix.as_deref(), text.echo), (Some("z"), true));
        let w = c.warnings.join("; ");
        assert!(!w.contains("penalty"), "{w}");
        assert!(w.contains("logit_bias"), "{w}");
        assert!(w.contains("unknown argument `persona`"), "{w}");
    }

    #[test]
    fn what_one_completion_cannot_be_is_refused_naming_the_field() {
        for (body, field) in [
            (json!({"prompt": ["a", "b"]}), "prompt"),
            (json!({"prompt": [1, 2]}), "prompt"),
            (json!({"prompt": [[1, 2]]}), "prompt"),
            (json!({"prompt": []}), "prompt"),
            (json!({"prompt": ""}), "prompt"),
            (json!({}), "prompt"),
            (json!({"prompt": "a", "n": 2}), "n"),
            (json!({"prompt": "a", "logprobs": 6}), "logprobs"),
            (json!({"prompt": "a", "logprobs": true}), "logprobs"),
            (json!({"prompt": "a", "best_of": 2}), "best_of"),
            (json!({"prompt": "a", "echo": "yes"}), "echo"),
            (json!({"prompt": "a", "suffix": 1}), "suffix"),
            (
                json!({"prompt": "a", "presence_penalty": 2.5}),
                "presence_penalty",
            ),
            (
                json!({"prompt": "a", "frequency_penalty": "1"}),
                "frequency_penalty",
            ),
        ] {
            let e = parse(&TextComplete, body.clone()).unwrap_err();
            assert_eq!(path_of(e), field, "{body}");
        }
    }
}
