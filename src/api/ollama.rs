//! Ollama's `POST /api/chat` and `POST /api/generate`: a request becomes the arguments of
//! `chat_complete` (its messages, tools, `format` as `response_format`, `options` as the
//! sampling settings), answered as chat completions are, and the answer is written as Ollama's
//! objects by one [`Encoder`]: a line of NDJSON per piece while it is made (streaming is
//! Ollama's default), then a last line with `done: true`, the reason and the timings; or one
//! object with `"stream": false`.
//!
//! What chat completions' arguments cannot say is applied to the parsed call ([`Ollama::apply`]):
//! `options.top_k`, llama.cpp's other samplers in `options` (`repeat_penalty`, `repeat_last_n`,
//! `presence_penalty`, `frequency_penalty`, `min_p`, `typical_p`, `mirostat` and its `tau` and
//! `eta`), `think: true`, and a generate request's `raw` prompt or `suffix`, which the
//! embedded model continues as text (fill-in-the-middle with the vocabulary's tokens for a
//! suffix), as OpenAI's text completions are.
//!
//! Ollama's messages carry no ids: the assistant's tool calls are given ids here, and a
//! `role: "tool"` message answers the first call not yet answered with its `tool_name` (or the
//! first not yet answered, without one).

use super::dialect::{self, Dialect, Endpoint, Method, Opening, Route, Wire};
use super::gate::TextGate;
use super::sse::text_and_calls;
use super::{ApiError, Encode, Prepared};
use crate::call::{Call, Finish, Samplers, TextPrompt};
use crate::fulfil::written::Piece;
use crate::service::{Answered, Finished};
use crate::shapes::ollama::{
    APPLIED_OPTIONS, ChatResponse, Function, GenerateResponse, Logprob, Message, Timings,
    TokenLogprob, ToolCall, timestamp,
};
use base64::Engine as _;
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

/// Options Ollama takes that no backend here applies: accepted, and said in the warnings.
const UNAPPLIED_OPTIONS: [&str; 12] = [
    "num_keep",
    "tfs_z",
    "penalize_newline",
    "numa",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "use_mmap",
    "use_mlock",
    "num_thread",
    "low_vram",
    "vocab_only",
];

/// The fields of `/api/chat` read here (others are reported as unknown).
const CHAT_FIELDS: [&str; 12] = [
    "model",
    "messages",
    "tools",
    "format",
    "options",
    "stream",
    "keep_alive",
    "think",
    "template",
    "truncate",
    "logprobs",
    "top_logprobs",
];

/// The fields of `/api/generate` read here.
const GENERATE_FIELDS: [&str; 17] = [
    "model",
    "prompt",
    "suffix",
    "system",
    "template",
    "context",
    "stream",
    "raw",
    "format",
    "images",
    "options",
    "keep_alive",
    "think",
    "tools",
    "truncate",
    "logprobs",
    "top_logprobs",
];

/// An Ollama request, translated.
#[derive(Debug, Default)]
pub struct Ollama {
    /// The arguments of `chat_complete`, with the stream asked for and what was set aside.
    pub prepared: Prepared,
    /// `options.top_k`.
    pub top_k: Option<u32>,
    /// `options.num_ctx`: the call's prompt and answer in tokens at most.
    pub num_ctx: Option<u32>,
    /// llama.cpp's other samplers in `options`.
    pub samplers: Samplers,
    /// `think: true`: reasoning asked for, at the model's own effort.
    pub think: bool,
    /// A generate request's raw prompt or fill-in-the-middle (`suffix`).
    pub text: Option<TextPrompt>,
    /// Nothing to answer (no messages, an empty prompt): the request loads the model.
    pub load: bool,
    /// `keep_alive` is 0: the request unloads the model.
    pub unload: bool,
    /// `keep_alive`, when given: how long the model stays loaded after this request (`None`
    /// inside: for good).
    pub keep_alive: Option<Option<std::time::Duration>>,
}

impl Ollama {
    /// Whether the request asks for reasoning: `think: true` or an effort (`false` is
    /// reasoning turned off).
    pub fn thinks(&self) -> bool {
        self.think
            || self
                .prepared
                .arguments
                .get("reasoning_effort")
                .and_then(Value::as_str)
                .is_some_and(|effort| effort != "none")
    }

    /// The request's `keep_alive` set aside (`--request-keep-alive ignore`): the model keeps
    /// its own, and a request to unload it is answered without unloading it. Whether it gave
    /// one (then the warning says so).
    pub fn ignore_keep_alive(&mut self) -> bool {
        if self.keep_alive.take().is_none() {
            return false;
        }
        self.prepared.warnings.push(
            "`keep_alive` was ignored: this server keeps its models loaded as it is configured \
             (--request-keep-alive ignore)"
                .into(),
        );
        true
    }

    /// What the translated arguments cannot say, applied to the parsed call.
    pub fn apply(&self, call: &mut Call) {
        if self.top_k.is_some() {
            call.request.tuning.top_k = self.top_k;
        }
        call.request.context = self.num_ctx;
        // The embedded model applies them; an MCP host is sent them in the sampling request's
        // metadata, as chat completions' penalties are.
        call.request.samplers = self.samplers;
        for (name, value) in self.samplers.named() {
            call.metadata.insert(name.to_owned(), value);
        }
        if self.think {
            call.request.reasoning.enabled = Some(true);
        }
        if self.text.is_some() {
            call.request.text = self.text.clone();
        }
    }
}

/// A 400 naming `field`.
fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError {
        param: Some(field.to_owned()),
        ..ApiError::invalid(format!("`{field}`: {message}"))
    }
}

/// What a JSON value is, for errors.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A string field, if given (null is absent).
fn opt_str<'a>(body: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(
            field,
            format!("expected a string, got {}", kind_of(other)),
        )),
    }
}

/// A boolean field, if given.
fn opt_bool(body: &Map<String, Value>, field: &str) -> Result<Option<bool>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(invalid(
            field,
            format!("expected true or false, got {}", kind_of(other)),
        )),
    }
}

/// The model a request names (required, as Ollama requires it).
pub fn model_named(body: &Map<String, Value>) -> Result<String, ApiError> {
    match opt_str(body, "model")? {
        Some(name) if !name.trim().is_empty() => Ok(name.to_owned()),
        _ => Err(invalid(
            "model",
            "is required: name a model GET /api/tags lists",
        )),
    }
}

/// `keep_alive` as Ollama takes it: seconds as a number, or a duration (`"5m"`, `"1h30m"`,
/// `"90s"`, `"0"`); negative keeps the model loaded for good (`Some(None)`). Absent: `None`.
fn keep_alive(body: &Map<String, Value>) -> Result<Option<Option<std::time::Duration>>, ApiError> {
    let secs = |secs: f64| {
        if secs < 0.0 {
            None
        } else {
            Some(std::time::Duration::from_secs_f64(secs.min(1e9)))
        }
    };
    let bad = |what: &Value| {
        invalid(
            "keep_alive",
            format!(
                "expected a duration (\"5m\", \"1h\", 0 or -1 seconds), got {}",
                kind_of(what)
            ),
        )
    };
    match body.get("keep_alive") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(|n| Some(secs(n)))
            .ok_or_else(|| bad(&Value::Null)),
        Some(v @ Value::String(s)) => {
            let text = s.trim();
            let (sign, text) = match text.strip_prefix('-') {
                Some(rest) => (-1.0, rest),
                None => (1.0, text),
            };
            if let Ok(n) = text.parse::<f64>() {
                return Ok(Some(secs(sign * n)));
            }
            // Go's durations: numbers each with a unit, `h`, `m`, `s`, `ms`.
            let mut total = 0.0;
            let mut rest = text;
            while !rest.is_empty() {
                let digits = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .ok_or_else(|| bad(v))?;
                let (number, after) = rest.split_at(digits);
                let unit_len = after
                    .find(|c: char| c.is_ascii_digit() || c == '.')
                    .unwrap_or(after.len());
                let (unit, after) = after.split_at(unit_len);
                let n: f64 = number.parse().map_err(|_| bad(v))?;
                total += n * match unit {
                    "h" => 3600.0,
                    "m" => 60.0,
                    "s" => 1.0,
                    "ms" => 0.001,
                    _ => return Err(bad(v)),
                };
                rest = after;
            }
            Ok(Some(secs(sign * total)))
        }
        Some(other) => Err(bad(other)),
    }
}

/// Refuses what no backend here can do, naming the field.
fn refuse(body: &Map<String, Value>) -> Result<(), ApiError> {
    if body.get("template").is_some_and(|t| !t.is_null()) {
        return Err(invalid(
            "template",
            "a Go template of the prompt is not taken here: the model's own chat template \
             renders the prompt; send `raw: true` with the whole prompt written out instead",
        ));
    }
    if body.get("context").is_some_and(|c| !c.is_null()) {
        return Err(invalid(
            "context",
            "the token context of an earlier answer is not kept here: send the conversation as \
             messages to /api/chat instead",
        ));
    }
    Ok(())
}

/// Translates an `/api/chat` (`dialect` [`CHAT`]) or `/api/generate` body into
/// `chat_complete`'s arguments for `model` (the name it resolved to).
pub fn translate(
    dialect: Dialect,
    body: &Map<String, Value>,
    model: &str,
) -> Result<Ollama, ApiError> {
    refuse(body)?;
    let mut warnings = ignored(dialect, body);
    let mut args = Map::new();
    args.insert("model".into(), json!(model));
    let keep = keep_alive(body)?;
    let mut out = Ollama {
        unload: keep == Some(Some(std::time::Duration::ZERO)),
        keep_alive: keep,
        ..Ollama::default()
    };
    let messages = if dialect == CHAT {
        chat_messages(body)?
    } else {
        generate_messages(body, &mut out, &mut warnings)?
    };
    out.load = messages.is_empty() && out.text.is_none();
    args.insert("messages".into(), Value::Array(messages));
    match body.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) if tools.is_empty() => {}
        Some(Value::Array(tools)) => {
            args.insert("tools".into(), Value::Array(tools.clone()));
        }
        Some(other) => {
            return Err(invalid(
                "tools",
                format!("expected a list of tools, got {}", kind_of(other)),
            ));
        }
    }
    if let Some(format) = response_format(body.get("format"))? {
        args.insert("response_format".into(), format);
    }
    options(body.get("options"), &mut args, &mut out, &mut warnings)?;
    think(body.get("think"), &mut args, &mut out)?;
    logprobs(body, &mut args, &mut warnings)?;
    let stream = opt_bool(body, "stream")?.unwrap_or(true);
    out.prepared = Prepared {
        arguments: args,
        stream,
        include_usage: false,
        warnings,
        system_messages: 0,
        names: super::tool_names::Names::default(),
    };
    Ok(out)
}

/// The warnings for the fields of `body` this server does not take.
fn ignored(dialect: Dialect, body: &Map<String, Value>) -> Vec<String> {
    let fields: &[&str] = if dialect == CHAT {
        &CHAT_FIELDS
    } else {
        &GENERATE_FIELDS
    };
    let mut warnings: Vec<String> = body
        .keys()
        .filter(|k| !fields.contains(&k.as_str()))
        .map(|key| format!("unknown field `{}` was ignored", crate::error::clip(key)))
        .collect();
    if body.get("truncate").is_some() {
        warnings.push("`truncate` was ignored: a prompt over the context is refused".into());
    }
    warnings
}

/// `logprobs` (a boolean) and `top_logprobs` (0 to 20, as Ollama checks it), as chat
/// completions' `logprobs` and `top_logprobs`. Ollama reports none without `logprobs: true`,
/// whatever `top_logprobs` says: then it is ignored, and the warnings say so.
fn logprobs(
    body: &Map<String, Value>,
    args: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let asked = opt_bool(body, "logprobs")?.unwrap_or(false);
    let top = match body.get("top_logprobs") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            (v.as_u64())
                .filter(|n| *n <= u64::from(crate::call::MAX_TOP_LOGPROBS))
                .ok_or_else(|| {
                    invalid(
                        "top_logprobs",
                        format!(
                            "must be between 0 and {}, got {}",
                            crate::call::MAX_TOP_LOGPROBS,
                            crate::error::clip(&v.to_string())
                        ),
                    )
                })?,
        ),
    };
    if asked {
        args.insert("logprobs".into(), json!(true));
        args.insert("top_logprobs".into(), json!(top.unwrap_or(0)));
    } else if top.is_some_and(|n| n > 0) {
        warnings.push("`top_logprobs` was ignored: it takes `logprobs: true`".into());
    }
    Ok(())
}

/// `think`: `true` asks for the reasoning back as `thinking`; `false` or a level is the
/// call's `reasoning_effort`.
fn think(
    think: Option<&Value>,
    args: &mut Map<String, Value>,
    out: &mut Ollama,
) -> Result<(), ApiError> {
    match think {
        None | Some(Value::Null) => {}
        Some(Value::Bool(true)) => out.think = true,
        Some(Value::Bool(false)) => {
            args.insert("reasoning_effort".into(), json!("none"));
        }
        Some(Value::String(level)) if ["low", "medium", "high"].contains(&level.as_str()) => {
            args.insert("reasoning_effort".into(), json!(level));
        }
        Some(other) => {
            return Err(invalid(
                "think",
                format!(
                    "expected true, false, \"low\", \"medium\" or \"high\", got {}",
                    crate::error::clip(&other.to_string())
                ),
            ));
        }
    }
    Ok(())
}

/// `format`: `"json"` (any JSON object) or a JSON Schema, as `response_format`.
fn response_format(format: Option<&Value>) -> Result<Option<Value>, ApiError> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(json!({"type": "json_object"}))),
        Some(Value::Object(schema)) => Ok(Some(json!({"type": "json_schema", "json_schema": {
            "name": "format", "schema": schema, "strict": true}}))),
        Some(other) => Err(invalid(
            "format",
            format!(
                "expected \"json\" or a JSON Schema object, got {}",
                crate::error::clip(&other.to_string())
            ),
        )),
    }
}

/// `options`: the sampling settings, as `chat_complete` spells them; `top_k` and llama.cpp's
/// other samplers kept for the call.
fn options(
    options: Option<&Value>,
    args: &mut Map<String, Value>,
    out: &mut Ollama,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let options = match options {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(invalid(
                "options",
                format!("expected an object, got {}", kind_of(other)),
            ));
        }
    };
    for (key, v) in options {
        if v.is_null() || sampler_option(key, v, &mut out.samplers)? {
            continue;
        }
        option(key, v, args, out, warnings)?;
    }
    Ok(())
}

/// One setting of `options` (not null, not a sampler [`sampler_option`] keeps): put in `args`
/// as `chat_complete` spells it, kept in `out` (`top_k`), or noted in `warnings` as not applied.
fn option(
    key: &str,
    v: &Value,
    args: &mut Map<String, Value>,
    out: &mut Ollama,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let number = |key: &str, v: &Value| {
        v.as_f64()
            .map(|_| v.clone())
            .ok_or_else(|| invalid(&format!("options.{key}"), "expected a number"))
    };
    match key {
        "temperature" | "top_p" => {
            args.insert(key.to_owned(), number(key, v)?);
        }
        "seed" => {
            let seed = v
                .as_i64()
                .ok_or_else(|| invalid("options.seed", "expected an integer"))?;
            args.insert("seed".into(), json!(seed));
        }
        "top_k" => out.top_k = Some(count(key, v, 0)?),
        "num_ctx" => out.num_ctx = Some(count(key, v, 1)?),
        "num_predict" => {
            let n = v
                .as_i64()
                .ok_or_else(|| invalid("options.num_predict", "expected an integer"))?;
            // -1 (and -2): as many as the context holds, this server's default limit.
            if n > 0 {
                args.insert("max_tokens".into(), json!(n));
            }
        }
        "stop" => match v {
            Value::String(_) | Value::Array(_) => {
                args.insert("stop".into(), v.clone());
            }
            other => {
                return Err(invalid(
                    "options.stop",
                    format!("expected a list of strings, got {}", kind_of(other)),
                ));
            }
        },
        other if UNAPPLIED_OPTIONS.contains(&other) => warnings.push(format!(
            "`options.{other}` was accepted and not applied: this server applies {}",
            APPLIED_OPTIONS.join(", ")
        )),
        other => warnings.push(format!(
            "unknown option `options.{}` was ignored",
            crate::error::clip(other)
        )),
    }
    Ok(())
}

/// `options.{key}`, an integer of at least `least`.
fn count(key: &str, v: &Value, least: u64) -> Result<u32, ApiError> {
    let n = (v.as_u64()).filter(|n| *n >= least).ok_or_else(|| {
        let expected = match least {
            0 => "expected a non-negative integer",
            _ => "expected a positive integer",
        };
        invalid(&format!("options.{key}"), expected)
    })?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// One of llama.cpp's samplers in `options` (not null), checked and kept in `samplers`; `false`
/// when `key` names none of them. The ranges are llama.cpp's: a repeat penalty above 0 (1 is
/// none), a window of -1 (the whole context) or more tokens, min-p and typical-p from 0 to 1,
/// mirostat 0 (off), 1 or 2 with a `tau` and `eta` of 0 or more.
fn sampler_option(key: &str, v: &Value, samplers: &mut Samplers) -> Result<bool, ApiError> {
    let bad = |expected: &str| {
        invalid(
            &format!("options.{key}"),
            format!(
                "expected {expected}, got {}",
                crate::error::clip(&v.to_string())
            ),
        )
    };
    let number = |within: fn(f64) -> bool, expected: &str| {
        v.as_f64()
            .filter(|n| within(*n))
            .ok_or_else(|| bad(expected))
    };
    let fraction = |n: f64| (0.0..=1.0).contains(&n);
    let any = |_| true;
    match key {
        "repeat_penalty" => {
            samplers.repeat_penalty =
                Some(number(|n| n > 0.0, "a number above 0 (1 is no penalty)")?);
        }
        "repeat_last_n" => {
            let n = v
                .as_i64()
                .filter(|n| *n >= -1)
                .ok_or_else(|| bad("an integer of -1 (the whole context) or more"))?;
            samplers.repeat_last_n = Some(i32::try_from(n).unwrap_or(i32::MAX));
        }
        "presence_penalty" => samplers.presence_penalty = Some(number(any, "a number")?),
        "frequency_penalty" => samplers.frequency_penalty = Some(number(any, "a number")?),
        "min_p" => samplers.min_p = Some(number(fraction, "a number from 0 to 1")?),
        "typical_p" => samplers.typical_p = Some(number(fraction, "a number from 0 to 1")?),
        "mirostat" => {
            let m = v
                .as_u64()
                .and_then(|m| u8::try_from(m).ok())
                .filter(|m| *m <= 2)
                .ok_or_else(|| bad("0 (off), 1 or 2"))?;
            samplers.mirostat = Some(m);
        }
        "mirostat_tau" => samplers.mirostat_tau = Some(number(|n| n >= 0.0, "0 or more")?),
        "mirostat_eta" => samplers.mirostat_eta = Some(number(|n| n >= 0.0, "0 or more")?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// An image as Ollama sends it (base64, no media type) as an `image_url` part with a data URL
/// of the type its first bytes say.
fn image_part(image: &Value, path: &str) -> Result<Value, ApiError> {
    let Value::String(data) = image else {
        return Err(invalid(
            path,
            format!("expected a base64 image, got {}", kind_of(image)),
        ));
    };
    if data.starts_with("data:") {
        return Ok(json!({"type": "image_url", "image_url": {"url": data}}));
    }
    let head: String = data
        .chars()
        .filter(|c| !c.is_whitespace())
        .take(16)
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(head.as_bytes())
        .unwrap_or_default();
    let mime = if bytes.starts_with(&[0x89, b'P', b'N', b'G']) {
        "image/png"
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        "image/jpeg"
    } else if bytes.starts_with(b"GIF8") {
        "image/gif"
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP".as_slice()) {
        "image/webp"
    } else {
        return Err(invalid(
            path,
            "is not a base64 PNG, JPEG, GIF or WebP image",
        ));
    };
    Ok(json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}}))
}

/// A message's content with its images, as `chat_complete` content: the text alone, or parts.
fn with_images(text: &str, images: Option<&Value>, path: &str) -> Result<Value, ApiError> {
    let images = match images {
        None | Some(Value::Null) => return Ok(json!(text)),
        Some(Value::Array(images)) if images.is_empty() => return Ok(json!(text)),
        Some(Value::Array(images)) => images,
        Some(other) => {
            return Err(invalid(
                path,
                format!("expected a list of base64 images, got {}", kind_of(other)),
            ));
        }
    };
    let mut parts = vec![json!({"type": "text", "text": text})];
    for (i, image) in images.iter().enumerate() {
        parts.push(image_part(image, &format!("{path}[{i}]"))?);
    }
    Ok(Value::Array(parts))
}

/// `/api/chat`'s messages as `chat_complete`'s.
fn chat_messages(body: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
    let list = match body.get("messages") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(invalid(
                "messages",
                format!("expected a list of messages, got {}", kind_of(other)),
            ));
        }
    };
    // The calls not answered yet: (id, name), in order.
    let mut pending: VecDeque<(String, String)> = VecDeque::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, message) in list.iter().enumerate() {
        let path = format!("messages[{i}]");
        let Value::Object(m) = message else {
            return Err(invalid(
                &path,
                format!("expected a message object, got {}", kind_of(message)),
            ));
        };
        let field = |name: &str| format!("{path}.{name}");
        let role = message_role(m, &field("role"))?;
        let content = message_content(m, &field("content"))?;
        match role {
            "assistant" => out.push(assistant_turn(m, content, i, &path, &mut pending)?),
            "tool" => {
                let id = answered_call(m, &mut pending, &path)?;
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            role => {
                let content = with_images(content, m.get("images"), &field("images"))?;
                out.push(json!({"role": role, "content": content}));
            }
        }
    }
    Ok(out)
}

/// A message's `role`: system, user, assistant or tool (`path` names the field).
fn message_role<'a>(m: &'a Map<String, Value>, path: &str) -> Result<&'a str, ApiError> {
    match m.get("role") {
        Some(Value::String(r)) if ["system", "user", "assistant", "tool"].contains(&r.as_str()) => {
            Ok(r.as_str())
        }
        Some(other) => Err(invalid(
            path,
            format!(
                "expected \"system\", \"user\", \"assistant\" or \"tool\", got {}",
                crate::error::clip(&other.to_string())
            ),
        )),
        None => Err(invalid(path, "is required")),
    }
}

/// A message's text `content` (none: empty).
fn message_content<'a>(m: &'a Map<String, Value>, path: &str) -> Result<&'a str, ApiError> {
    match m.get("content") {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(other) => Err(invalid(
            path,
            format!("expected a string, got {}", kind_of(other)),
        )),
    }
}

/// The `i`th message, an assistant's, as chat completions' turn: its thinking as
/// `reasoning_content`, its calls given ids (which become the calls `pending` an answer).
fn assistant_turn(
    m: &Map<String, Value>,
    content: &str,
    i: usize,
    path: &str,
    pending: &mut VecDeque<(String, String)>,
) -> Result<Value, ApiError> {
    let mut turn = Map::new();
    turn.insert("role".into(), json!("assistant"));
    if let Some(Value::String(thinking)) = m.get("thinking")
        && !thinking.is_empty()
    {
        turn.insert("reasoning_content".into(), json!(thinking));
    }
    let calls = assistant_calls(m.get("tool_calls"), i, &format!("{path}.tool_calls"))?;
    if calls.is_empty() {
        turn.insert("content".into(), json!(content));
        return Ok(Value::Object(turn));
    }
    let content = if content.is_empty() {
        Value::Null
    } else {
        json!(content)
    };
    turn.insert("content".into(), content);
    *pending = calls
        .iter()
        .map(|c| {
            let id = c.get("id").and_then(Value::as_str).unwrap_or_default();
            let name = c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            (id.to_owned(), name.to_owned())
        })
        .collect();
    turn.insert("tool_calls".into(), Value::Array(calls));
    Ok(Value::Object(turn))
}

/// An assistant message's `tool_calls` as chat completions': each given an id
/// (`call_{message}_{call}`), its arguments (an object, or a JSON string) as a JSON string.
fn assistant_calls(
    calls: Option<&Value>,
    message: usize,
    path: &str,
) -> Result<Vec<Value>, ApiError> {
    let calls = match calls {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(other) => {
            return Err(invalid(
                path,
                format!("expected a list of tool calls, got {}", kind_of(other)),
            ));
        }
    };
    calls
        .iter()
        .enumerate()
        .map(|(k, call)| {
            let here = format!("{path}[{k}].function");
            let function = call
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    invalid(&here, "is required: {\"name\": ..., \"arguments\": {...}}")
                })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| invalid(&format!("{here}.name"), "is required: a string"))?;
            let arguments = match function.get("arguments") {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(Value::Object(a)) => Value::Object(a.clone()).to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => {
                    return Err(invalid(
                        &format!("{here}.arguments"),
                        format!("expected an object, got {}", kind_of(other)),
                    ));
                }
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{message}_{k}"), str::to_owned);
            Ok(json!({"id": id, "type": "function",
                      "function": {"name": name, "arguments": arguments}}))
        })
        .collect()
}

/// The id of the call a `role: "tool"` message answers: its `tool_call_id` when it gives one,
/// else the first call not yet answered with its `tool_name` (or the first, without one).
fn answered_call(
    m: &Map<String, Value>,
    pending: &mut VecDeque<(String, String)>,
    path: &str,
) -> Result<String, ApiError> {
    if let Some(Value::String(id)) = m.get("tool_call_id") {
        pending.retain(|(pending_id, _)| pending_id != id);
        return Ok(id.clone());
    }
    let name = match m.get("tool_name").or_else(|| m.get("name")) {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) => Some(n.as_str()),
        Some(other) => {
            return Err(invalid(
                &format!("{path}.tool_name"),
                format!("expected a string, got {}", kind_of(other)),
            ));
        }
    };
    let at = match name {
        Some(name) => pending.iter().position(|(_, n)| n == name),
        None => (!pending.is_empty()).then_some(0),
    };
    match at.and_then(|i| pending.remove(i)) {
        Some((id, _)) => Ok(id),
        None => Err(invalid(
            &format!("{path}.tool_name"),
            match name {
                Some(name) => format!(
                    "{:?} answers no tool call of the assistant message before it (each call \
                     is answered once, in order)",
                    crate::error::clip(name)
                ),
                None => "a tool result with no tool call before it left to answer".to_owned(),
            },
        )),
    }
}

/// `/api/generate`'s prompt as `chat_complete` messages (a system message, then the prompt as
/// the user's), and as raw text when `raw` or a `suffix` asks the model to continue it as it is.
fn generate_messages(
    body: &Map<String, Value>,
    out: &mut Ollama,
    warnings: &mut Vec<String>,
) -> Result<Vec<Value>, ApiError> {
    let prompt = opt_str(body, "prompt")?.unwrap_or_default();
    let suffix = opt_str(body, "suffix")?.filter(|s| !s.is_empty());
    let raw = opt_bool(body, "raw")?.unwrap_or(false);
    let system = opt_str(body, "system")?.filter(|s| !s.is_empty());
    if prompt.is_empty() && suffix.is_none() {
        return Ok(Vec::new());
    }
    if raw || suffix.is_some() {
        if body
            .get("images")
            .is_some_and(|i| i.as_array().is_some_and(|a| !a.is_empty()))
        {
            return Err(invalid(
                "images",
                "a raw prompt (or fill-in-the-middle) is continued as text: send images without \
                 `raw` and `suffix`, or to /api/chat",
            ));
        }
        if system.is_some() {
            warnings.push(
                "`system` was set aside: a raw prompt (or fill-in-the-middle) is read as it is"
                    .into(),
            );
        }
        out.text = Some(TextPrompt {
            prompt: prompt.to_owned(),
            suffix: suffix.map(str::to_owned),
            echo: false,
        });
        // Other backends read the prompt as one user message.
        return Ok(vec![json!({"role": "user", "content": prompt})]);
    }
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(json!({"role": "system", "content": system}));
    }
    let content = with_images(prompt, body.get("images"), "images")?;
    messages.push(json!({"role": "user", "content": content}));
    Ok(messages)
}

/// Why the answer ended, as Ollama says it.
fn done_reason(finished: &Finished) -> &'static str {
    match finished.finish {
        Finish::MaxTokens => "length",
        Finish::EndTurn | Finish::StopSequence(_) | Finish::ToolUse => "stop",
    }
}

/// Nanoseconds of a duration.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One answer to `/api/chat` or `/api/generate`, as its lines while it is made and as its
/// object when done.
pub struct Encoder {
    dialect: Dialect,
    /// The model as the request named it (Ollama answers with the name asked).
    model: String,
    /// When the request came.
    started: Instant,
    /// When the first piece came, while streaming.
    first: Option<Instant>,
    gate: TextGate,
    /// Reasoning was shown as it was made.
    reasoned: bool,
    /// The log-probabilities told and not written yet (only a call that asked for them is
    /// told any).
    logprobs: super::logprobs::Pending,
}

impl Encoder {
    /// An answer for `dialect` named `model`, its text stopped at `stop`, timed from `started`.
    pub fn new(dialect: Dialect, model: &str, stop: &[String], started: Instant) -> Self {
        Encoder {
            dialect,
            model: model.to_owned(),
            started,
            first: None,
            gate: TextGate::new(stop),
            reasoned: false,
            logprobs: super::logprobs::Pending::new(true),
        }
    }

    /// The timings of the answer: the prompt's share until the first piece came (or, for a
    /// whole answer, its share of the tokens), the rest the answer's.
    fn timings(&self, finished: &Finished) -> Timings {
        let total = nanos(self.started.elapsed());
        let usage = finished.usage;
        let prompt_share = match self.first {
            Some(first) => nanos(first.duration_since(self.started)),
            None => {
                let all = usage.total().max(1) as u128;
                u64::try_from(u128::from(total) * usage.prompt as u128 / all).unwrap_or(total)
            }
        };
        let prompt_share = prompt_share.min(total);
        Timings {
            total_duration: total,
            load_duration: 0,
            prompt_eval_count: usage.prompt,
            prompt_eval_duration: prompt_share.max(u64::from(usage.prompt > 0)),
            eval_count: usage.completion,
            eval_duration: total
                .saturating_sub(prompt_share)
                .max(u64::from(usage.completion > 0)),
        }
    }

    /// A chat message of `content`, `thinking` and `calls`.
    fn message(content: String, thinking: Option<String>, calls: Vec<ToolCall>) -> Message {
        Message {
            role: "assistant",
            content,
            thinking,
            tool_calls: calls,
        }
    }

    /// An object of this answer: a piece (`done` false, no reason) or the last, with the
    /// log-probabilities of its text's tokens when there are any.
    fn object(
        &self,
        content: String,
        thinking: Option<String>,
        calls: Vec<ToolCall>,
        last: Option<(&'static str, Timings)>,
        logprobs: &[crate::call::TokenLogprob],
    ) -> Value {
        let logprobs = (!logprobs.is_empty()).then(|| logprobs.iter().map(logprob).collect());
        let created_at = timestamp(SystemTime::now());
        let (done_reason, timings) = match last {
            Some((reason, timings)) => (Some(reason), Some(timings)),
            None => (None, None),
        };
        let object = if self.dialect == CHAT {
            serde_json::to_value(ChatResponse {
                model: self.model.clone(),
                created_at,
                message: Self::message(content, thinking, calls),
                done: last.is_some(),
                done_reason,
                logprobs,
                timings,
            })
        } else {
            serde_json::to_value(GenerateResponse {
                model: self.model.clone(),
                created_at,
                response: content,
                thinking,
                done: last.is_some(),
                done_reason,
                logprobs,
                timings,
            })
        };
        object.unwrap_or_default()
    }

    /// The whole answer as one object.
    pub fn whole(&self, finished: &Finished) -> Value {
        let (text, calls) = text_and_calls(&finished.answer);
        let calls = calls.iter().map(tool_call).collect();
        let last = (done_reason(finished), self.timings(finished));
        let logprobs = finished.logprobs.as_deref().unwrap_or_default();
        self.object(
            text,
            finished.reasoning.clone(),
            calls,
            Some(last),
            logprobs,
        )
    }

    /// The object answering a request that only loads (or unloads) the model.
    pub fn loaded(&self, reason: &'static str) -> Value {
        let timings = Timings {
            total_duration: nanos(self.started.elapsed()),
            ..Timings::default()
        };
        self.object(
            String::new(),
            None,
            Vec::new(),
            Some((reason, timings)),
            &[],
        )
    }

    fn line(object: &Value) -> String {
        let mut line = object.to_string();
        line.push('\n');
        line
    }

    /// A line of `text`, with the log-probabilities held.
    fn text(&mut self, text: String) -> Vec<String> {
        if text.is_empty() {
            return Vec::new();
        }
        let logprobs = self.logprobs.take();
        vec![Self::line(&self.object(
            text,
            None,
            Vec::new(),
            None,
            &logprobs,
        ))]
    }

    fn thinking(&self, text: String) -> String {
        Self::line(&self.object(String::new(), Some(text), Vec::new(), None, &[]))
    }
}

/// A token's log-probability as Ollama writes it.
fn logprob(t: &crate::call::TokenLogprob) -> Logprob {
    let finite = super::logprobs::finite;
    Logprob {
        token: t.token.clone(),
        logprob: finite(t.logprob),
        bytes: t.bytes.clone(),
        top_logprobs: (t.top.iter())
            .map(|top| TokenLogprob {
                token: top.token.clone(),
                logprob: finite(top.logprob),
                bytes: top.bytes.clone(),
            })
            .collect(),
    }
}

/// A tool call as Ollama writes it: its arguments as an object.
fn tool_call(c: &crate::call::ToolCall) -> ToolCall {
    ToolCall {
        function: Function {
            name: c.name.clone(),
            arguments: c.input.clone(),
        },
    }
}

impl Encode for Encoder {
    fn start(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        self.first.get_or_insert_with(Instant::now);
        match piece {
            Piece::Text(text) => {
                let show = self.gate.feed(&text);
                self.text(show)
            }
            Piece::Reasoning(text) if !text.is_empty() => {
                self.reasoned = true;
                vec![self.thinking(text)]
            }
            Piece::Logprobs(told) => {
                self.logprobs.hold(told);
                Vec::new()
            }
            // Ollama sends each call whole, at the end.
            Piece::Reasoning(_) | Piece::CallStart { .. } | Piece::CallArgs { .. } => Vec::new(),
        }
    }

    fn finish(&mut self, answered: &Answered) -> Vec<String> {
        let finished = &answered.finished;
        let (text, calls) = text_and_calls(&finished.answer);
        let rest = self.gate.rest(&text);
        self.logprobs.finish(finished.logprobs.as_deref());
        let mut out = Vec::new();
        // Reasoning not shown while it was made (an attempt that was not the answer's own).
        if let Some(reasoning) = finished.reasoning.clone().filter(|_| !self.reasoned) {
            out.push(self.thinking(reasoning));
        }
        out.extend(self.text(rest));
        let calls: Vec<ToolCall> = calls.iter().map(tool_call).collect();
        if !calls.is_empty() {
            out.push(Self::line(&self.object(
                String::new(),
                None,
                calls,
                None,
                &[],
            )));
        }
        let last = (done_reason(finished), self.timings(finished));
        // What no text carried (a tool call's tokens) goes with the last line.
        let left = self.logprobs.take();
        out.push(Self::line(&self.object(
            String::new(),
            None,
            Vec::new(),
            Some(last),
            &left,
        )));
        out
    }

    fn error(&mut self, e: &ApiError) -> Vec<String> {
        vec![Self::line(&e.body(self.dialect))]
    }
}

/// Ollama's `/api/chat` in the registry ([`super::dialect`]); its errors are the whole
/// Ollama API's.
pub const CHAT: Dialect = dialect::of(&OllamaApi { generate: false });

/// Ollama's `/api/generate` in the registry.
pub const GENERATE: Dialect = dialect::of(&OllamaApi { generate: true });

/// Ollama's API: `/api/chat` (with the rest of `/` and `/api/*`), or `/api/generate`.
pub struct OllamaApi {
    generate: bool,
}

impl OllamaApi {
    fn dialect(&self) -> Dialect {
        if self.generate { GENERATE } else { CHAT }
    }
}

/// Ollama's routes besides `/api/generate`.
const ROUTES: &[Route] = &[
    Route::get("/", Endpoint::OllamaRunning),
    Route {
        method: Method::Head,
        path: "/",
        endpoint: Endpoint::OllamaRunning,
    },
    Route::get("/api/version", Endpoint::OllamaVersion),
    Route::get("/api/tags", Endpoint::OllamaTags),
    Route::post("/api/show", Endpoint::OllamaShow),
    Route::get("/api/ps", Endpoint::OllamaPs),
    Route::post("/api/chat", Endpoint::OllamaAnswer),
    Route::post("/api/pull", Endpoint::OllamaPull),
    Route {
        method: Method::Delete,
        path: "/api/delete",
        endpoint: Endpoint::OllamaDelete,
    },
    Route::post("/api/create", Endpoint::OllamaNotHere),
    Route::post("/api/copy", Endpoint::OllamaNotHere),
    Route::post("/api/push", Endpoint::OllamaNotHere),
];

impl Wire for OllamaApi {
    fn id(&self) -> &'static str {
        if self.generate {
            "ollama_generate"
        } else {
            "ollama_chat"
        }
    }

    fn metric(&self) -> crate::metrics::Api {
        crate::metrics::Api::Ollama
    }

    /// Ollama's requests are translated into chat completions' ([`translate`]).
    fn shape(&self) -> &'static dyn crate::shapes::Shape {
        &crate::shapes::openai_chat::ChatComplete
    }

    fn routes(&self) -> &'static [Route] {
        const GENERATE_ROUTES: &[Route] = &[Route::post("/api/generate", Endpoint::OllamaAnswer)];
        if self.generate {
            GENERATE_ROUTES
        } else {
            ROUTES
        }
    }

    fn claims(&self, path: &str) -> bool {
        !self.generate && (path == "/" || path == "/api" || path.starts_with("/api/"))
    }

    fn error_body(&self, e: &ApiError) -> Value {
        json!({"error": e.message})
    }

    fn streams_calls(&self) -> bool {
        false
    }

    fn stream_content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    fn encoder(&self, o: &Opening<'_>) -> Box<dyn Encode> {
        let stop = &o.call.request.stop;
        Box::new(Encoder::new(self.dialect(), o.model, stop, o.started))
    }

    fn whole(&self, o: &Opening<'_>, answered: &Answered) -> Value {
        let encoder = Encoder::new(self.dialect(), o.model, &o.call.request.stop, o.started);
        encoder.whole(&answered.finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sse::tests_support::*;
    use crate::call::Answer;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn lines(frames: &[String]) -> Vec<Value> {
        frames
            .iter()
            .flat_map(|f| f.lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_chat_request_becomes_chat_completions_arguments() {
        let t = translate(
            Dialect::OllamaChat,
            &body(json!({"model": "m:latest", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "thinking": "hmm",
                 "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                                {"function": {"name": "get_time", "arguments": {}}}]},
                {"role": "tool", "tool_name": "get_time", "content": "noon"},
                {"role": "tool", "content": "sunny"}],
                "format": {"type": "object"}, "think": false, "keep_alive": "5m",
                "options": {"temperature": 0, "top_k": 3, "num_predict": 7, "stop": ["\n"],
                            "seed": 1, "num_ctx": 4096, "repeat_penalty": 1.1}})),
            "m",
        )
        .unwrap();
        let a = &t.prepared.arguments;
        assert_eq!(a["model"], "m");
        assert_eq!(a["max_tokens"], 7);
        assert_eq!(a["temperature"], 0);
        assert_eq!(a["seed"], 1);
        assert_eq!(a["stop"], json!(["\n"]));
        assert_eq!(a["reasoning_effort"], "none");
        assert_eq!(a["response_format"]["type"], "json_schema");
        assert_eq!(t.top_k, Some(3));
        assert!(t.prepared.stream && !t.load && !t.unload);
        let m = a["messages"].as_array().unwrap();
        assert_eq!(m[2]["tool_calls"][0]["id"], "call_2_0");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(m[2]["reasoning_content"], "hmm");
        // By name, then the first left.
        assert_eq!(m[3]["tool_call_id"], "call_2_1");
        assert_eq!(m[4]["tool_call_id"], "call_2_0");
        assert_eq!(t.samplers.repeat_penalty, Some(1.1));
        let w = t.prepared.warnings.join("; ");
        assert_eq!(t.num_ctx, Some(4096));
        assert!(
            !w.contains("options.num_ctx") && !w.contains("options.repeat_penalty"),
            "{w}"
        );
    }

    #[test]
    fn llama_cpps_samplers_in_options_reach_the_call_and_its_metadata() {
        let options = json!({"repeat_penalty": 1.3, "repeat_last_n": -1,
                             "presence_penalty": 0.5, "frequency_penalty": -0.5, "min_p": 0.05,
                             "typical_p": 0.9, "mirostat": 2, "mirostat_tau": 4.5,
                             "mirostat_eta": 0.2, "tfs_z": 1});
        let t = translate(
            Dialect::OllamaChat,
            &body(json!({"messages": [{"role": "user", "content": "Hi."}], "options": options})),
            "m",
        )
        .unwrap();
        let expected = Samplers {
            repeat_penalty: Some(1.3),
            repeat_last_n: Some(-1),
            presence_penalty: Some(0.5),
            frequency_penalty: Some(-0.5),
            min_p: Some(0.05),
            typical_p: Some(0.9),
            mirostat: Some(2),
            mirostat_tau: Some(4.5),
            mirostat_eta: Some(0.2),
        };
        assert_eq!(t.samplers, expected);
        // Only the option no backend applies is said to be set aside.
        let w = &t.prepared.warnings;
        assert!(w.len() == 1 && w[0].contains("`options.tfs_z`"), "{w:?}");
        let shape = &crate::shapes::openai_chat::ChatComplete;
        let mut call = crate::shapes::common::tests_support::parse(
            shape,
            Value::Object(t.prepared.arguments.clone()),
        )
        .unwrap();
        t.apply(&mut call);
        assert_eq!(call.request.samplers, expected);
        assert_eq!(call.metadata["repeat_penalty"], json!(1.3));
        assert_eq!(call.metadata["mirostat"], json!(2));
        assert_eq!(call.metadata.len(), 9, "{:?}", call.metadata);
    }

    #[test]
    fn a_generate_request_is_a_prompt_raw_text_or_fill_in_the_middle() {
        let t = translate(
            Dialect::OllamaGenerate,
            &body(
                json!({"model": "m", "prompt": "def f(", "suffix": "    return x\n",
                         "stream": false}),
            ),
            "m",
        )
        .unwrap();
        let text = t.text.unwrap();
        assert_eq!(text.suffix.as_deref(), Some("    return x\n"));
        assert!(!t.prepared.stream);
        let t = translate(
            Dialect::OllamaGenerate,
            &body(json!({"model": "m", "prompt": "Hi", "system": "Be brief."})),
            "m",
        )
        .unwrap();
        assert!(t.text.is_none());
        assert_eq!(t.prepared.arguments["messages"][0]["role"], "system");
        let t = translate(
            Dialect::OllamaGenerate,
            &body(json!({"model": "m", "keep_alive": 0})),
            "m",
        )
        .unwrap();
        assert!(t.load && t.unload);
    }

    #[test]
    fn keep_alive_is_read_as_ollama_reads_it() {
        let read = |v: Value| keep_alive(&body(json!({"keep_alive": v})));
        let secs = |n: u64| Some(Some(std::time::Duration::from_secs(n)));
        assert_eq!(read(json!(30)).unwrap(), secs(30));
        assert_eq!(read(json!("5m")).unwrap(), secs(300));
        assert_eq!(read(json!("1h30m")).unwrap(), secs(5400));
        assert_eq!(read(json!("0")).unwrap(), secs(0));
        assert_eq!(read(json!("0s")).unwrap(), secs(0));
        assert_eq!(read(json!(-1)).unwrap(), Some(None));
        assert_eq!(read(json!("-1m")).unwrap(), Some(None));
        assert_eq!(read(Value::Null).unwrap(), None);
        for bad in [json!("soon"), json!("5x"), json!([1]), json!(true)] {
            let e = read(bad.clone()).unwrap_err();
            assert!(e.message.contains("keep_alive"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn samplers_out_of_llama_cpps_ranges_are_refused_naming_the_option() {
        for (option, value, expected) in [
            ("repeat_last_n", json!(-2), "-1 (the whole context) or more"),
            ("repeat_penalty", json!(0), "above 0"),
            ("min_p", json!(1.5), "from 0 to 1"),
            ("typical_p", json!(-0.1), "from 0 to 1"),
            ("mirostat", json!(3), "0 (off), 1 or 2"),
            ("mirostat_tau", json!("5"), "0 or more"),
            ("mirostat_eta", json!(-1), "0 or more"),
            ("presence_penalty", json!("high"), "a number"),
        ] {
            let request = body(json!({"options": {option: value}}));
            let e = translate(Dialect::OllamaChat, &request, "m").unwrap_err();
            let field = format!("options.{option}");
            assert_eq!((e.status, e.param.as_deref()), (400, Some(field.as_str())));
            assert!(
                e.message.contains(&field) && e.message.contains(expected),
                "{}",
                e.message
            );
        }
        // The edges are taken.
        let edges = json!({"repeat_last_n": -1, "min_p": 0, "typical_p": 1, "mirostat": 0,
                           "repeat_penalty": 0.5, "frequency_penalty": 3});
        let t = translate(Dialect::OllamaChat, &body(json!({"options": edges})), "m").unwrap();
        assert_eq!(t.samplers.mirostat, Some(0));
    }

    #[test]
    fn what_cannot_be_done_is_refused_naming_the_field() {
        for (dialect, b, field) in [
            (
                Dialect::OllamaGenerate,
                json!({"prompt": "a", "template": "{{ .Prompt }}"}),
                "template",
            ),
            (
                Dialect::OllamaGenerate,
                json!({"prompt": "a", "context": [1, 2]}),
                "context",
            ),
            (Dialect::OllamaGenerate, json!({"prompt": 1}), "prompt"),
            (
                Dialect::OllamaGenerate,
                json!({"prompt": "a", "raw": true, "images": ["iVBORw0KGgo="]}),
                "images",
            ),
            (
                Dialect::OllamaGenerate,
                json!({"prompt": "a", "format": "xml"}),
                "format",
            ),
            (
                Dialect::OllamaChat,
                json!({"messages": [{"role": "bot"}]}),
                "messages[0].role",
            ),
            (
                Dialect::OllamaChat,
                json!({"messages": [{"role": "tool", "tool_name": "x"}]}),
                "messages[0].tool_name",
            ),
            (
                Dialect::OllamaChat,
                json!({"messages": [{"role": "user", "content": "a",
                                                      "images": ["bm90IGFuIGltYWdl"]}]}),
                "messages[0].images[0]",
            ),
            (
                Dialect::OllamaChat,
                json!({"options": {"top_k": -1}}),
                "options.top_k",
            ),
            (Dialect::OllamaChat, json!({"think": "very"}), "think"),
            (Dialect::OllamaChat, json!({"stream": "yes"}), "stream"),
            (Dialect::OllamaChat, json!({"logprobs": "yes"}), "logprobs"),
            (
                Dialect::OllamaGenerate,
                json!({"prompt": "a", "logprobs": true, "top_logprobs": 21}),
                "top_logprobs",
            ),
            (
                Dialect::OllamaChat,
                json!({"logprobs": true, "top_logprobs": -1}),
                "top_logprobs",
            ),
        ] {
            let e = translate(dialect, &body(b.clone()), "m").unwrap_err();
            assert_eq!(e.status, 400, "{b}");
            assert_eq!(e.param.as_deref(), Some(field), "{b}: {}", e.message);
            assert!(e.message.contains(field), "{}", e.message);
            assert_eq!(e.body(dialect), json!({"error": e.message}));
        }
        assert!(model_named(&body(json!({}))).is_err());
        // Turned off or zero, they ask for nothing and are taken without a warning.
        let t = translate(
            Dialect::OllamaChat,
            &body(json!({"logprobs": false, "top_logprobs": 0})),
            "m",
        )
        .unwrap();
        assert!(t.prepared.warnings.is_empty(), "{:?}", t.prepared.warnings);
        assert!(!t.prepared.arguments.contains_key("logprobs"));
    }

    #[test]
    fn logprobs_become_chat_completions_and_top_logprobs_alone_is_ignored() {
        let read = |b: Value| translate(Dialect::OllamaGenerate, &body(b), "m").unwrap();
        let t = read(json!({"prompt": "a", "logprobs": true, "top_logprobs": 3}));
        assert_eq!(t.prepared.arguments["logprobs"], true);
        assert_eq!(t.prepared.arguments["top_logprobs"], 3);
        let t = read(json!({"prompt": "a", "logprobs": true}));
        assert_eq!(t.prepared.arguments["top_logprobs"], 0);
        let t = read(json!({"prompt": "a", "top_logprobs": 3}));
        assert!(!t.prepared.arguments.contains_key("logprobs"));
        assert!(
            t.prepared.warnings[0].contains("top_logprobs"),
            "{:?}",
            t.prepared.warnings
        );
    }

    #[test]
    fn each_line_carries_the_logprobs_of_its_text_and_the_whole_answer_all() {
        use crate::call::{TokenLogprob, TopLogprob};
        let told = |token: &str| TokenLogprob {
            token: token.into(),
            bytes: token.as_bytes().to_vec(),
            logprob: -0.5,
            top: vec![TopLogprob {
                token: token.into(),
                bytes: token.as_bytes().to_vec(),
                logprob: -0.5,
            }],
        };
        let mut done = answered(Answer::Text("Hi there".into()), Finish::EndTurn);
        done.finished.logprobs = Some(vec![told("Hi"), told(" there")]);
        let started = Instant::now();
        let whole = Encoder::new(CHAT, "m", &[], started).whole(&done.finished);
        assert_eq!(
            whole["logprobs"],
            json!([{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                    "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]},
                   {"token": " there", "logprob": -0.5, "bytes": [32, 116, 104, 101, 114, 101],
                    "top_logprobs": [{"token": " there", "logprob": -0.5,
                                      "bytes": [32, 116, 104, 101, 114, 101]}]}])
        );
        let mut e = Encoder::new(GENERATE, "m", &[], started);
        let mut lines = Vec::new();
        for piece in [
            Piece::Logprobs(vec![told("Hi")]),
            Piece::Text("Hi".into()),
            Piece::Logprobs(vec![told(" there")]),
        ] {
            lines.extend(e.piece(piece));
        }
        lines.extend(e.finish(&done));
        let lines: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let tokens = |line: &Value| -> Vec<String> {
            line["logprobs"].as_array().map_or_else(Vec::new, |l| {
                l.iter()
                    .map(|e| e["token"].as_str().unwrap().to_owned())
                    .collect()
            })
        };
        assert_eq!(lines[0]["response"], "Hi");
        assert_eq!(tokens(&lines[0]), ["Hi"]);
        assert_eq!(lines[1]["response"], " there");
        assert_eq!(tokens(&lines[1]), [" there"]);
        assert!(lines.last().unwrap().get("logprobs").is_none());
        // Not asked for: no line says anything of them.
        let plain = answered(Answer::Text("Hi".into()), Finish::EndTurn);
        let whole = Encoder::new(CHAT, "m", &[], started).whole(&plain.finished);
        assert!(whole.get("logprobs").is_none(), "{whole}");
    }

    #[test]
    fn thinking_asked_for_and_keep_alive_set_aside_are_told_apart() {
        let read = |b: Value| translate(Dialect::OllamaChat, &body(b), "m").unwrap();
        for (think, thinks) in [
            (json!(true), true),
            (json!("high"), true),
            (json!(false), false),
            (Value::Null, false),
        ] {
            assert_eq!(read(json!({"think": think})).thinks(), thinks, "{think}");
        }
        let mut t = read(json!({"keep_alive": 0}));
        assert!(t.ignore_keep_alive());
        assert!(t.keep_alive.is_none() && t.unload && t.load);
        assert!(t.prepared.warnings[0].contains("keep_alive"));
        let mut t = read(json!({}));
        assert!(!t.ignore_keep_alive());
        assert!(t.prepared.warnings.is_empty());
    }

    #[test]
    fn images_become_data_urls_of_their_type() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk";
        let v = with_images("look", Some(&json!([png])), "images").unwrap();
        assert_eq!(
            v[1]["image_url"]["url"],
            format!("data:image/png;base64,{png}")
        );
    }

    #[test]
    fn a_streamed_chat_folds_into_the_whole_answer_with_calls_as_objects() {
        let (pieces, answered) = reasoned(answered(text_and_call(), Finish::ToolUse));
        let mut e = Encoder::new(Dialect::OllamaChat, "m:latest", &[], Instant::now());
        let mut frames = e.start();
        for piece in pieces {
            frames.extend(e.piece(piece));
        }
        frames.extend(e.finish(&answered));
        assert!(
            frames
                .iter()
                .all(|f| f.ends_with('\n') && f.matches('\n').count() == 1)
        );
        let lines = lines(&frames);
        let text: String = lines
            .iter()
            .filter_map(|l| l["message"]["content"].as_str())
            .collect();
        let thinking: String = lines
            .iter()
            .filter_map(|l| l["message"]["thinking"].as_str())
            .collect();
        assert_eq!((text.as_str(), thinking.as_str()), ("Sure.", "Think."));
        let calls: Vec<&Value> = lines
            .iter()
            .filter_map(|l| l["message"]["tool_calls"].as_array())
            .flatten()
            .collect();
        assert_eq!(
            calls,
            [&json!({"function": {"name": "get_weather",
                                                  "arguments": {"city": "Paris"}}})]
        );
        let last = lines.last().unwrap();
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "stop");
        assert_eq!(last["model"], "m:latest");
        assert_eq!(
            (
                last["prompt_eval_count"].as_u64(),
                last["eval_count"].as_u64()
            ),
            (Some(12), Some(7))
        );
        assert!(last["eval_duration"].as_u64().unwrap() > 0);
        assert!(
            lines[..lines.len() - 1]
                .iter()
                .all(|l| l["done"] == false && l.get("done_reason").is_none())
        );
        let whole = e.whole(&answered.finished);
        assert_eq!(whole["message"]["content"], "Sure.");
        assert_eq!(whole["message"]["thinking"], "Think.");
        assert_eq!(
            whole["message"]["tool_calls"][0]["function"]["arguments"]["city"],
            "Paris"
        );
    }

    #[test]
    fn a_generate_answer_is_its_response_and_a_limit_is_length() {
        let answered = answered(Answer::Text("Paris".into()), Finish::MaxTokens);
        let mut e = Encoder::new(Dialect::OllamaGenerate, "m", &[], Instant::now());
        let frames = e.finish(&answered);
        let lines = lines(&frames);
        assert_eq!(lines[0]["response"], "Paris");
        assert_eq!(lines[1]["done_reason"], "length");
        assert_eq!(e.whole(&answered.finished)["response"], "Paris");
        assert_eq!(e.loaded("load")["done_reason"], "load");
        assert_eq!(e.loaded("unload")["response"], "");
        let error = e.error(&ApiError::invalid("no"));
        assert_eq!(error, ["{\"error\":\"no\"}\n"]);
    }
}
