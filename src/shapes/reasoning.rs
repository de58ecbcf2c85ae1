//! The model's reasoning as each API asks for it: OpenAI chat `reasoning_effort`, Responses
//! `reasoning.effort`, Anthropic `thinking` (`enabled` with `budget_tokens`, `disabled`,
//! `adaptive`) and Gemini `generationConfig.thinkingConfig` (`thinkingBudget`,
//! `includeThoughts`, `thinkingLevel`), read into one neutral [`Reasoning`]. A backend that
//! reasons honours it (the embedded model through its chat template and a reasoning budget, a
//! provider by forwarding it); MCP sampling cannot, and says so in the warnings.

use crate::args::{self, Obj};
use crate::call::{Effort, Reasoning};
use crate::error::{CallError, CallResult};
use serde_json::Value;

/// `reasoning_effort` as OpenAI's chat API spells it: the effort names, and `none`.
const CHAT_EFFORTS: [&str; 5] = ["none", "minimal", "low", "medium", "high"];

/// An effort name as the chat API and Responses take it (`none`: no reasoning).
fn effort(name: &str) -> Reasoning {
    match Effort::parse(name) {
        Some(effort) => Reasoning {
            enabled: Some(true),
            effort: Some(effort),
            ..Reasoning::default()
        },
        None => Reasoning {
            enabled: Some(false),
            ..Reasoning::default()
        },
    }
}

/// OpenAI: `reasoning_effort` (chat) or `reasoning: {effort}` (Responses).
pub fn openai(o: &Obj<'_>) -> CallResult<Reasoning> {
    if let Some(name) = o.opt_enum("reasoning_effort", &CHAT_EFFORTS)? {
        return Ok(effort(name));
    }
    let Some(reasoning) = o.opt_object("reasoning")? else {
        return Ok(Reasoning::default());
    };
    let reasoning = Obj::new(reasoning, o.path("reasoning"));
    Ok(match reasoning.opt_enum("effort", &CHAT_EFFORTS)? {
        Some(name) => effort(name),
        None => Reasoning::default(),
    })
}

/// Anthropic: `thinking: {"type": "enabled", "budget_tokens": n}`, `{"type": "disabled"}` or
/// `{"type": "adaptive"}`.
pub fn anthropic(o: &Obj<'_>) -> CallResult<Reasoning> {
    let Some(thinking) = o.opt_object("thinking")? else {
        return Ok(Reasoning::default());
    };
    let thinking = Obj::new(thinking, o.path("thinking"));
    Ok(
        match thinking.required_enum("type", &["enabled", "disabled", "adaptive"])? {
            "enabled" => Reasoning {
                enabled: Some(true),
                budget: Some(budget(&thinking, "budget_tokens")?.ok_or_else(|| {
                    CallError::at(
                        &thinking.path("budget_tokens"),
                        "is required with \"enabled\": a positive integer",
                    )
                })?),
                ..Reasoning::default()
            },
            "disabled" => Reasoning {
                enabled: Some(false),
                ..Reasoning::default()
            },
            _ => Reasoning {
                enabled: Some(true),
                ..Reasoning::default()
            },
        },
    )
}

/// Gemini: `generationConfig.thinkingConfig` (`config` is `generationConfig`). A budget of 0
/// turns reasoning off, -1 leaves it to the model; thoughts are returned only with
/// `includeThoughts: true`.
pub fn gemini(config: &Obj<'_>) -> CallResult<Reasoning> {
    let Some(thinking) = config.opt_object("thinkingConfig")? else {
        return Ok(Reasoning {
            shown: Some(false),
            ..Reasoning::default()
        });
    };
    let thinking = Obj::new(thinking, config.path("thinkingConfig"));
    let shown = match thinking.get("includeThoughts") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(CallError::expected(
                &thinking.path("includeThoughts"),
                "a boolean",
                other,
            ));
        }
    };
    let mut reasoning = Reasoning {
        shown: Some(shown),
        ..Reasoning::default()
    };
    if let Some(level) = thinking_level(&thinking)? {
        reasoning.enabled = Some(true);
        reasoning.effort = Some(level);
    }
    match thinking.get("thinkingBudget") {
        None => {}
        Some(v) if v.as_i64() == Some(-1) => reasoning.enabled = Some(true),
        Some(v) if v.as_i64() == Some(0) => reasoning.enabled = Some(false),
        Some(_) => {
            reasoning.enabled = Some(true);
            reasoning.budget = budget(&thinking, "thinkingBudget")?;
        }
    }
    Ok(reasoning)
}

/// `thinkingLevel` as the API's enum spells it (`HIGH`; lower case is taken too);
/// `THINKING_LEVEL_UNSPECIFIED` is the model's default.
fn thinking_level(thinking: &Obj<'_>) -> CallResult<Option<Effort>> {
    const LEVELS: [&str; 5] = [
        "MINIMAL",
        "LOW",
        "MEDIUM",
        "HIGH",
        "THINKING_LEVEL_UNSPECIFIED",
    ];
    let Some(v) = thinking.get("thinkingLevel") else {
        return Ok(None);
    };
    let level = v
        .as_str()
        .map(str::to_ascii_uppercase)
        .filter(|l| LEVELS.contains(&l.as_str()))
        .ok_or_else(|| {
            CallError::expected(&thinking.path("thinkingLevel"), &args::one_of(&LEVELS), v)
        })?;
    Ok(Effort::parse(&level.to_ascii_lowercase()))
}

/// A positive token budget at `key`.
fn budget(o: &Obj<'_>, key: &str) -> CallResult<Option<u32>> {
    let Some(v) = o.get(key) else {
        return Ok(None);
    };
    v.as_u64()
        .filter(|n| *n > 0)
        .and_then(|n| u32::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| CallError::expected(&o.path(key), "a positive integer", v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(f: fn(&Obj<'_>) -> CallResult<Reasoning>, v: Value) -> CallResult<Reasoning> {
        f(&Obj::root(v.as_object().unwrap()))
    }

    #[test]
    fn each_apis_controls_read_into_one_reasoning() {
        let r = read(openai, json!({"reasoning_effort": "low"})).unwrap();
        assert_eq!((r.enabled, r.effort), (Some(true), Some(Effort::Low)));
        let r = read(openai, json!({"reasoning": {"effort": "none"}})).unwrap();
        assert_eq!(r.enabled, Some(false));
        assert_eq!(read(openai, json!({})).unwrap(), Reasoning::default());
        let r = read(
            anthropic,
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}),
        )
        .unwrap();
        assert_eq!((r.enabled, r.budget), (Some(true), Some(1024)));
        let r = read(anthropic, json!({"thinking": {"type": "disabled"}})).unwrap();
        assert_eq!(r.enabled, Some(false));
        let r = read(
            gemini,
            json!({"thinkingConfig": {"thinkingBudget": 64, "includeThoughts": true}}),
        )
        .unwrap();
        assert_eq!(
            (r.enabled, r.budget, r.shown),
            (Some(true), Some(64), Some(true))
        );
        let r = read(gemini, json!({"thinkingConfig": {"thinkingBudget": 0}})).unwrap();
        assert_eq!((r.enabled, r.shown), (Some(false), Some(false)));
        assert_eq!(read(gemini, json!({})).unwrap().shown, Some(false));
        let r = read(gemini, json!({"thinkingConfig": {"thinkingLevel": "HIGH"}})).unwrap();
        assert_eq!((r.enabled, r.effort), (Some(true), Some(Effort::High)));
    }

    #[test]
    fn bad_controls_name_the_field() {
        let e = read(openai, json!({"reasoning_effort": "max"})).unwrap_err();
        assert!(e.to_string().contains("reasoning_effort"), "{e}");
        let e = read(anthropic, json!({"thinking": {"type": "enabled"}})).unwrap_err();
        assert!(e.to_string().contains("thinking.budget_tokens"), "{e}");
        let e = read(
            gemini,
            json!({"thinkingConfig": {"thinkingBudget": "lots"}}),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("thinkingConfig.thinkingBudget"),
            "{e}"
        );
    }
}
