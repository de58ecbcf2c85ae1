//! Embeddings in each API's form: OpenAI's `/v1/embeddings` (and the `embeddings_create` tool,
//! which takes the same arguments), Ollama's `/api/embed` and legacy `/api/embeddings`,
//! Gemini's `:embedContent` and `:batchEmbedContents`. Each request is read into one
//! [`EmbedRequest`] for the model it names, and the vectors are written back in its API's form;
//! the service underneath is the same ([`crate::service::Service::embed`]).

use crate::backends::direct::{EmbedInput, EmbedRequest, Embeddings};
use crate::error::{CallError, CallResult};
use base64::Engine as _;
use serde_json::{Map, Value, json};

/// Inputs one request may carry at most (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// A request for embeddings, read: the model it names (empty: the default) and what to embed.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub model: String,
    pub request: EmbedRequest,
    /// OpenAI's `encoding_format: "base64"`: each vector as its little-endian `f32` bytes.
    pub base64: bool,
}

/// OpenAI's request (`model`, `input`, `encoding_format`, `dimensions`, `user`); the
/// `embeddings_create` tool's arguments are the same. A text over the model's context is
/// refused, as OpenAI does.
pub fn openai(args: &Map<String, Value>) -> CallResult<Asked> {
    let input = args
        .get("input")
        .ok_or_else(|| CallError::at("input", "is required: a string or a list of strings"))?;
    let base64 = match args.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(other) => {
            return Err(CallError::expected(
                "encoding_format",
                "\"float\" or \"base64\"",
                other,
            ));
        }
    };
    if let Some(user) = args.get("user").filter(|u| !u.is_null() && !u.is_string()) {
        return Err(CallError::expected("user", "a string", user));
    }
    Ok(Asked {
        model: model(args.get("model"), "model")?,
        request: EmbedRequest {
            inputs: inputs(input, "input")?,
            dimensions: dimensions(args.get("dimensions"), "dimensions")?,
            truncate: false,
        },
        base64,
    })
}

/// OpenAI's answer: a list of `embedding` objects in the inputs' order, and the tokens read.
pub fn openai_object(asked: &Asked, made: &Embeddings) -> Value {
    let data: Vec<Value> = made
        .vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = if asked.base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": made.model,
        "usage": {"prompt_tokens": made.prompt_tokens, "total_tokens": made.prompt_tokens},
    })
}

/// Ollama's `/api/embed` (`model`, `input`, `truncate` (default true), `dimensions`,
/// `keep_alive`, `options`).
pub fn ollama(body: &Map<String, Value>) -> CallResult<Asked> {
    let truncate = match body.get("truncate") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(CallError::expected("truncate", "a boolean", other)),
    };
    let input = match body.get("input") {
        // An empty input loads the model, as Ollama's does: nothing to embed.
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.is_empty() => Vec::new(),
        Some(input) => inputs(input, "input")?,
    };
    Ok(Asked {
        model: required_model(body)?,
        request: EmbedRequest {
            inputs: input,
            dimensions: dimensions(body.get("dimensions"), "dimensions")?,
            truncate,
        },
        base64: false,
    })
}

/// Ollama's `/api/embed` answer; durations in nanoseconds.
pub fn ollama_object(made: &Embeddings, took: std::time::Duration) -> Value {
    json!({
        "model": made.model,
        "embeddings": made.vectors,
        "total_duration": nanos(took),
        "load_duration": 0,
        "prompt_eval_count": made.prompt_tokens,
    })
}

/// Ollama's legacy `/api/embeddings` (`model`, `prompt`): one text, or none.
pub fn ollama_legacy(body: &Map<String, Value>) -> CallResult<Asked> {
    let inputs = match body.get("prompt") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(p)) if p.is_empty() => Vec::new(),
        Some(Value::String(p)) => vec![EmbedInput::Text(p.clone())],
        Some(other) => return Err(CallError::expected("prompt", "a string", other)),
    };
    Ok(Asked {
        model: required_model(body)?,
        request: EmbedRequest {
            inputs,
            dimensions: None,
            truncate: true,
        },
        base64: false,
    })
}

/// The legacy answer: `{"embedding": [...]}` (empty for no prompt).
pub fn ollama_legacy_object(made: &Embeddings) -> Value {
    json!({"embedding": made.vectors.first().cloned().unwrap_or_default()})
}

/// Gemini's `:embedContent` (`content.parts[].text`, `outputDimensionality`; `taskType` and
/// `title` are taken and have no effect on a model that has no such modes).
pub fn gemini_one(model: &str, body: &Map<String, Value>) -> CallResult<Asked> {
    let (input, dimensions) = gemini_request(body, "")?;
    Ok(Asked {
        model: model.to_owned(),
        request: EmbedRequest {
            inputs: vec![input],
            dimensions,
            truncate: true,
        },
        base64: false,
    })
}

/// Gemini's `:batchEmbedContents` (`requests`, each an `:embedContent` body naming the same
/// model as the path, if it names one).
pub fn gemini_batch(model: &str, body: &Map<String, Value>) -> CallResult<Asked> {
    let requests = match body.get("requests") {
        Some(Value::Array(r)) if !r.is_empty() && r.len() <= MAX_INPUTS => r,
        Some(Value::Array(r)) if !r.is_empty() => {
            return Err(CallError::at(
                "requests",
                format!(
                    "{} requests, over the {MAX_INPUTS} one batch takes",
                    r.len()
                ),
            ));
        }
        other => {
            return Err(CallError::expected(
                "requests",
                "a non-empty list of embedContent requests",
                other.unwrap_or(&Value::Null),
            ));
        }
    };
    let mut inputs = Vec::with_capacity(requests.len());
    let mut wanted = None;
    for (i, request) in requests.iter().enumerate() {
        let at = format!("requests[{i}]");
        let request = request
            .as_object()
            .ok_or_else(|| CallError::expected(&at, "an object", request))?;
        if let Some(named) = request.get("model").and_then(Value::as_str) {
            let named = named.strip_prefix("models/").unwrap_or(named);
            if named != model {
                return Err(CallError::at(
                    &format!("{at}.model"),
                    format!(
                        "names {named:?}; a batch's requests name the model of its path, {model:?}"
                    ),
                ));
            }
        }
        let (input, dimensions) = gemini_request(request, &format!("{at}."))?;
        if i > 0 && dimensions != wanted {
            return Err(CallError::at(
                &format!("{at}.outputDimensionality"),
                "differs from the first request's; a batch's vectors have one length",
            ));
        }
        wanted = dimensions;
        inputs.push(input);
    }
    Ok(Asked {
        model: model.to_owned(),
        request: EmbedRequest {
            inputs,
            dimensions: wanted,
            truncate: true,
        },
        base64: false,
    })
}

/// One `:embedContent` answer.
pub fn gemini_one_object(made: &Embeddings) -> Value {
    json!({"embedding": {"values": made.vectors.first().cloned().unwrap_or_default()}})
}

/// A `:batchEmbedContents` answer.
pub fn gemini_batch_object(made: &Embeddings) -> Value {
    let embeddings: Vec<Value> = made.vectors.iter().map(|v| json!({"values": v})).collect();
    json!({"embeddings": embeddings})
}

/// A Gemini content's text (its parts' texts, joined) and `outputDimensionality`; `prefix`
/// is where the request sits in its body, for errors.
fn gemini_request(
    request: &Map<String, Value>,
    prefix: &str,
) -> CallResult<(EmbedInput, Option<usize>)> {
    let at = |field: &str| format!("{prefix}{field}");
    let parts = request
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            CallError::at(
                &at("content"),
                "is required: an object with `parts`, a list of {\"text\": ...}",
            )
        })?;
    let mut text = String::new();
    for (i, part) in parts.iter().enumerate() {
        match part.get("text") {
            Some(Value::String(t)) => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
            _ => {
                return Err(CallError::expected(
                    &at(&format!("content.parts[{i}]")),
                    "a text part ({\"text\": ...}); this server embeds text only",
                    part,
                ));
            }
        }
    }
    if text.is_empty() {
        return Err(CallError::at(&at("content"), "has no text to embed"));
    }
    for (key, what) in [("taskType", "a string"), ("title", "a string")] {
        if let Some(v) = request.get(key).filter(|v| !v.is_null() && !v.is_string()) {
            return Err(CallError::expected(&at(key), what, v));
        }
    }
    let dimensions = dimensions(
        request.get("outputDimensionality"),
        &at("outputDimensionality"),
    )?;
    Ok((EmbedInput::Text(text), dimensions))
}

/// What to embed: a string, a list of strings, a list of token ids, or a list of lists of
/// token ids (OpenAI's forms), at least one and at most [`MAX_INPUTS`], none empty.
fn inputs(input: &Value, path: &str) -> CallResult<Vec<EmbedInput>> {
    let expected = "a string, a list of strings, a list of token ids or a list of lists of them";
    let items = match input {
        Value::String(text) => vec![EmbedInput::Text(text.clone())],
        Value::Array(items) if items.is_empty() => {
            return Err(CallError::at(path, format!("is empty; send {expected}")));
        }
        Value::Array(items) if items.iter().all(Value::is_number) => {
            vec![EmbedInput::Tokens(token_ids(input, path)?)]
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("{path}[{i}]");
                match item {
                    Value::String(text) => Ok(EmbedInput::Text(text.clone())),
                    Value::Array(_) => Ok(EmbedInput::Tokens(token_ids(item, &at)?)),
                    other => Err(CallError::expected(
                        &at,
                        "a string or a list of token ids",
                        other,
                    )),
                }
            })
            .collect::<CallResult<Vec<_>>>()?,
        other => return Err(CallError::expected(path, expected, other)),
    };
    if items.len() > MAX_INPUTS {
        return Err(CallError::at(
            path,
            format!(
                "{} inputs, over the {MAX_INPUTS} one request takes",
                items.len()
            ),
        ));
    }
    for (i, item) in items.iter().enumerate() {
        let empty = match item {
            EmbedInput::Text(t) => t.is_empty(),
            EmbedInput::Tokens(t) => t.is_empty(),
        };
        if empty {
            let at = match input {
                Value::Array(_) => format!("{path}[{i}]"),
                _ => path.to_owned(),
            };
            return Err(CallError::at(&at, "is empty; each input needs some text"));
        }
    }
    Ok(items)
}

/// The token ids `v` lists (`at` in the request), each a non-negative integer that fits in
/// 32 bits.
fn token_ids(v: &Value, at: &str) -> CallResult<Vec<u32>> {
    let ids = v
        .as_array()
        .ok_or_else(|| CallError::expected(at, "a list of token ids", v))?;
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            id.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| CallError::expected(&format!("{at}[{i}]"), "a token id", id))
        })
        .collect()
}

fn dimensions(value: Option<&Value>, path: &str) -> CallResult<Option<usize>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|d| *d > 0)
            .and_then(|d| usize::try_from(d).ok())
            .map(Some)
            .ok_or_else(|| CallError::expected(path, "a positive integer", v)),
    }
}

fn model(value: Option<&Value>, path: &str) -> CallResult<String> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(m)) => Ok(m.clone()),
        Some(other) => Err(CallError::expected(path, "a model's name", other)),
    }
}

/// Ollama's `model` (or the older `name`), which its API requires.
fn required_model(body: &Map<String, Value>) -> CallResult<String> {
    let named = model(body.get("model"), "model")?;
    let named = if named.is_empty() {
        model(body.get("name"), "name")?
    } else {
        named
    };
    if named.is_empty() {
        return Err(CallError::at("model", "is required: the model's name"));
    }
    Ok(named)
}

/// A duration in whole nanoseconds, as Ollama reports them.
pub fn nanos(took: std::time::Duration) -> u64 {
    u64::try_from(took.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn every_openai_input_form_is_read_and_odd_ones_are_refused_by_field() {
        let a = openai(&args(json!({"model": "m", "input": "hi"}))).unwrap();
        assert_eq!(a.request.inputs, [EmbedInput::Text("hi".into())]);
        assert!(!a.base64 && !a.request.truncate);
        let a = openai(&args(
            json!({"input": ["a", "b"], "encoding_format": "base64",
                                    "dimensions": 8}),
        ))
        .unwrap();
        assert_eq!(a.request.inputs.len(), 2);
        assert!(a.base64);
        assert_eq!(a.request.dimensions, Some(8));
        let a = openai(&args(json!({"input": [1, 2, 3]}))).unwrap();
        assert_eq!(a.request.inputs, [EmbedInput::Tokens(vec![1, 2, 3])]);
        let a = openai(&args(json!({"input": [[1], [2, 3]]}))).unwrap();
        assert_eq!(a.request.inputs.len(), 2);
        for (bad, field) in [
            (json!({}), "`input`"),
            (json!({"input": []}), "`input`"),
            (json!({"input": ["a", ""]}), "`input[1]`"),
            (json!({"input": [1, -2]}), "`input[1]`"),
            (json!({"input": ["a", 3]}), "`input[1]`"),
            (json!({"input": "a", "dimensions": 0}), "`dimensions`"),
            (
                json!({"input": "a", "encoding_format": "hex"}),
                "`encoding_format`",
            ),
            (json!({"input": "a", "model": 3}), "`model`"),
        ] {
            let e = openai(&args(bad.clone())).unwrap_err().to_string();
            assert!(e.contains(field), "{bad}: {e}");
        }
    }

    #[test]
    fn base64_is_each_vector_as_little_endian_floats() {
        let asked = openai(&args(json!({"input": "x", "encoding_format": "base64"}))).unwrap();
        let made = Embeddings {
            model: "m".into(),
            vectors: vec![vec![1.0, -0.5]],
            prompt_tokens: 3,
        };
        let object = openai_object(&asked, &made);
        let text = object["data"][0]["embedding"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        let floats: Vec<f32> = bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, [1.0, -0.5]);
        assert_eq!(object["usage"]["prompt_tokens"], 3);
        assert_eq!(object["data"][0]["index"], 0);
    }

    #[test]
    fn ollama_and_gemini_requests_are_read_with_their_defaults() {
        let a = ollama(&args(json!({"model": "m", "input": ["a", "b"]}))).unwrap();
        assert!(a.request.truncate);
        assert_eq!(a.request.inputs.len(), 2);
        let a = ollama(&args(
            json!({"model": "m", "input": "a", "truncate": false}),
        ))
        .unwrap();
        assert!(!a.request.truncate);
        assert!(
            ollama(&args(json!({"input": "a"})))
                .unwrap_err()
                .to_string()
                .contains("`model`")
        );
        assert!(
            ollama(&args(json!({"model": "m"})))
                .unwrap()
                .request
                .inputs
                .is_empty()
        );
        let a = ollama_legacy(&args(json!({"model": "m", "prompt": "p"}))).unwrap();
        assert_eq!(a.request.inputs, [EmbedInput::Text("p".into())]);
        let a = gemini_one(
            "m",
            &args(json!({"content": {"parts": [{"text": "a"}, {"text": "b"}]},
                         "outputDimensionality": 4, "taskType": "RETRIEVAL_QUERY"})),
        )
        .unwrap();
        assert_eq!(a.request.inputs, [EmbedInput::Text("a\nb".into())]);
        assert_eq!(a.request.dimensions, Some(4));
        let a = gemini_batch(
            "m",
            &args(json!({"requests": [
                {"model": "models/m", "content": {"parts": [{"text": "a"}]}},
                {"content": {"parts": [{"text": "b"}]}}]})),
        )
        .unwrap();
        assert_eq!(a.request.inputs.len(), 2);
        let e = gemini_batch(
            "m",
            &args(
                json!({"requests": [{"model": "models/x", "content": {"parts": [{"text": "a"}]}}]}),
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("requests[0].model"), "{e}");
        let e = gemini_one(
            "m",
            &args(json!({"content": {"parts": [{"inlineData": {}}]}})),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("content.parts[0]"), "{e}");
    }
}
