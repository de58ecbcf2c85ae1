//! `generate_content`: Google Gemini's `models.generateContent` shape.
//!
//! `contents: [{role: user|model, parts}]` with parts `text`, `inlineData {mimeType, data}`,
//! `functionCall {name, args, id?}` and `functionResponse {name, response, id?}`;
//! `systemInstruction` (a Content or a string); `generationConfig` (`temperature`,
//! `maxOutputTokens`, `stopSequences`, `responseMimeType` with `responseSchema` (OpenAPI style)
//! or `responseJsonSchema`, `candidateCount` 1, `topP`/`topK`/`seed` and the
//! `presencePenalty`/`frequencyPenalty` typed and forwarded as metadata, `responseLogprobs`
//! with `logprobs` alternatives);
//! `tools[].functionDeclarations` and `toolConfig.functionCallingConfig` (`AUTO`/`ANY`/`NONE`,
//! `allowedFunctionNames`). The result is a `GenerateContentResponse`.
//!
//! Gemini's function calls may come without ids: a response is then paired with the earliest
//! unanswered call of the same name in the model turn before it.

use super::common::{
    self, Common, Env, Format, Hooks, Msg, Parts, Spelling, Structured, flatten_text,
};
use super::{Placement, Shape, params};
use crate::args::{self, Obj, as_object, non_empty_array};
use crate::call::{Block, Call, Role, ToolChoice, ToolDef};
use crate::contract::cursor::Entry;
use crate::contract::schema;
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use crate::wire::media;
use serde_json::{Map, Value, json};
use std::borrow::Cow;

/// The `generate_content` tool.
pub struct GenerateContent;

const TOOL: &str = "generate_content";
const ROLES: [&str; 2] = ["user", "model"];
/// `generationConfig` keys forwarded in the request metadata.
const METADATA: [&str; 5] = [
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
];
/// `generationConfig` keys this shape reads itself.
const READ: [&str; 11] = [
    "responseLogprobs",
    "logprobs",
    "temperature",
    "thinkingConfig",
    "maxOutputTokens",
    "stopSequences",
    "candidateCount",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
];
/// The top-level keys of the persona view: the request as Gemini spells it.
const VIEW_KEYS: [&str; 7] = [
    "contents",
    "model",
    "systemInstruction",
    "generationConfig",
    "tools",
    "toolConfig",
    "previous_response_id",
];

impl Shape for GenerateContent {
    fn name(&self) -> &'static str {
        TOOL
    }

    fn definition(&self) -> &'static str {
        include_str!("tools/generate_content.json")
    }

    fn parse(&self, o: &Obj<'_>, env: &Env<'_>) -> CallResult<Call> {
        let contents = non_empty_array(o.required("contents")?, &o.path("contents"))?;
        let common = Common::read(o, &SPELLING, env)?;
        let system = match o.get("systemInstruction") {
            Some(v) => Some(system_text(v, &o.path("systemInstruction"), env.limits)?),
            None => None,
        };
        let (messages, mut transcript) = conversation(contents, env.limits)?;
        if let Some(s) = &system {
            transcript.insert(0, Entry::new("system", s.clone()));
        }
        let mut view = Map::new();
        if common.persona.is_some() {
            for key in VIEW_KEYS {
                let value = match key {
                    "model" => json!(common.model),
                    _ => o.get(key).cloned().unwrap_or(Value::Null),
                };
                view.insert(key.into(), value);
            }
        }
        let parts = Parts {
            list_key: "contents",
            system,
            messages,
            transcript,
            view,
            common_view: None,
        };
        common.into_call(parts, env.limits)
    }

    fn placement(&self) -> Placement {
        Placement::Beside
    }
}

/// The arguments every shape has, as Gemini spells them: the sampling settings in
/// `generationConfig`, structured output there too, function declarations and `toolConfig`.
const SPELLING: Spelling = Spelling {
    tool: TOOL,
    list_key: "contents",
    modes: true,
    settings: Some("generationConfig"),
    stop: Some("stopSequences"),
    max_tokens: "maxOutputTokens",
    max_tokens_alias: None,
    format: Format::None,
    metadata: &METADATA,
    verifies_cursors: true,
    hooks: Hooks {
        structured: |_, config, _, limits| response_schema(config, limits),
        tools: tools_and_choice,
        extras: |o, config, _, env| {
            if o.get("cachedContent").is_some() {
                return Err(CallError::at(
                    &o.path("cachedContent"),
                    "cached content is not supported: send the content itself",
                ));
            }
            extras(o, config, env)
        },
    },
};

/// `tools[].functionDeclarations`, and `toolConfig`'s mode and the functions it allows.
fn tools_and_choice(o: &Obj<'_>, limits: &Limits) -> CallResult<common::Offer> {
    let mut tools = match o.opt_array("tools")? {
        Some(list) => Some(declarations(list, &o.path("tools"), limits)?),
        None => None,
    };
    let (choice, allowed) = tool_config(o)?;
    if let (Some(allowed), Some(defs)) = (allowed, tools.as_mut()) {
        defs.retain(|d| allowed.contains(&d.name));
        if defs.is_empty() {
            return Err(CallError::at(
                "toolConfig.functionCallingConfig.allowedFunctionNames",
                "names no function declared in `tools`",
            ));
        }
    }
    Ok((tools, choice))
}

/// What `generationConfig` and the top level contribute besides the neutral fields: metadata,
/// warnings for what has no equivalent, and errors for what cannot be honoured.
fn extras(o: &Obj<'_>, config: &Obj<'_>, env: &Env<'_>) -> CallResult<params::Extras> {
    if let Some(n) = config.get("candidateCount")
        && n.as_u64() != Some(1)
    {
        return Err(CallError::expected(
            &config.path("candidateCount"),
            "1 (each sampling request yields one completion; call again for more)",
            n,
        ));
    }
    let mut extras = params::Extras {
        logprobs: params::asked_logprobs(config, "responseLogprobs", "logprobs")?,
        tuning: params::TuningKeys {
            top_p: Some("topP"),
            top_k: Some("topK"),
            seed: Some("seed"),
        }
        .read(config)?,
        samplers: params::PenaltyKeys::CAMEL.read(config)?,
        reasoning: super::reasoning::gemini(config)?,
        ..params::Extras::default()
    };
    for key in METADATA {
        if let Some(v) = config.get(key) {
            extras.metadata.insert(key.to_owned(), v.clone());
        }
    }
    let mut keys: Vec<&String> = config.map().keys().collect();
    keys.sort();
    for key in keys {
        if !METADATA.contains(&key.as_str()) && !READ.contains(&key.as_str()) {
            extras.warnings.push(format!(
                "`generationConfig.{}` has no equivalent in MCP sampling and was ignored",
                crate::error::clip(key)
            ));
        }
    }
    if o.get("safetySettings").is_some() {
        extras.warnings.push(
            "`safetySettings` has no equivalent in MCP sampling (the host applies its own \
             policies) and was ignored"
                .to_owned(),
        );
    }
    extras
        .warnings
        .extend(params::unknown_arguments(o, env.known));
    Ok(extras)
}

/// Structured output: `responseMimeType: "application/json"` with `responseJsonSchema`,
/// `responseSchema` (OpenAPI style, converted) or neither (any JSON object).
fn response_schema<'a>(config: &Obj<'a>, limits: &Limits) -> CallResult<Option<Structured<'a>>> {
    const MIME: [&str; 2] = ["text/plain", "application/json"];
    let json = config.opt_enum("responseMimeType", &MIME)? == Some("application/json");
    let mut found = Vec::new();
    if let Some(s) = config.get("responseJsonSchema") {
        let path = config.path("responseJsonSchema");
        found.push(Structured {
            raw: None,
            schema: schema::compile(&uppercase_types_lowered(s), &path, limits)?,
            source: "generationConfig.responseJsonSchema",
        });
    }
    if let Some(s) = config.get("responseSchema") {
        let path = config.path("responseSchema");
        found.push(Structured {
            raw: None,
            schema: schema::compile(&openapi_to_json_schema(s), &path, limits)?,
            source: "generationConfig.responseSchema",
        });
    }
    if found.is_empty() && json {
        found.push(Structured {
            raw: None,
            schema: common::any_object(&config.path("responseMimeType"), limits)?,
            source: "generationConfig.responseMimeType",
        });
    }
    common::one_spelling(found)
}

/// Gemini's OpenAPI-style schema (`type: "OBJECT"`, `nullable`, `propertyOrdering`) as JSON
/// Schema: types lower-cased, `nullable: true` as a union with `"null"`, ordering hints dropped.
/// Everything else (properties, items, required, enum, format, bounds, anyOf) carries over.
pub fn openapi_to_json_schema(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let nullable = map.get("nullable") == Some(&Value::Bool(true));
            let mut out = Map::with_capacity(map.len());
            for (k, x) in map {
                match k.as_str() {
                    "nullable" | "propertyOrdering" => {}
                    "type" => {
                        let t = x
                            .as_str()
                            .map_or_else(|| x.clone(), |t| json!(t.to_lowercase()));
                        out.insert(k.clone(), if nullable { json!([t, "null"]) } else { t });
                    }
                    // Maps whose keys are names, not keywords: convert their values only.
                    "properties" => {
                        let props = x.as_object().map(|p| {
                            p.iter()
                                .map(|(name, s)| (name.clone(), openapi_to_json_schema(s)))
                                .collect::<Map<String, Value>>()
                        });
                        out.insert(k.clone(), props.map_or_else(|| x.clone(), Value::Object));
                    }
                    "enum" | "required" | "example" | "default" => {
                        out.insert(k.clone(), x.clone());
                    }
                    _ => {
                        out.insert(k.clone(), openapi_to_json_schema(x));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(openapi_to_json_schema).collect()),
        other => other.clone(),
    }
}

/// A JSON Schema as Gemini clients send it: Gemini CLI writes `responseJsonSchema` and
/// `parametersJsonSchema` with OpenAPI's uppercase types (`OBJECT`, `STRING`); such a schema
/// is converted as `responseSchema` is, any other taken as it is.
fn uppercase_types_lowered(v: &Value) -> Cow<'_, Value> {
    fn uppercase(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, x)| {
                (k == "type"
                    && x.as_str()
                        .is_some_and(|t| t.chars().any(|c| c.is_ascii_uppercase())))
                    || uppercase(x)
            }),
            Value::Array(items) => items.iter().any(uppercase),
            _ => false,
        }
    }
    if uppercase(v) {
        Cow::Owned(openapi_to_json_schema(v))
    } else {
        Cow::Borrowed(v)
    }
}

/// `tools: [{functionDeclarations: [...]}]` flattened into one checked list.
fn declarations(list: &[Value], path: &str, limits: &Limits) -> CallResult<Vec<ToolDef>> {
    let mut specs = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let tpath = args::index(path, i);
        let tool = Obj::new(as_object(tool, &tpath)?, tpath.as_str());
        if let Some(other) = tool.map().keys().find(|k| *k != "functionDeclarations") {
            return Err(CallError::at(
                &tool.path(other),
                "only functionDeclarations are supported: the host's model cannot run Google's \
                 built-in tools",
            ));
        }
        let dpath = tool.path("functionDeclarations");
        let decls = non_empty_array(tool.required("functionDeclarations")?, &dpath)?;
        for (j, d) in decls.iter().enumerate() {
            specs.push(declaration(args::index(&dpath, j), d)?);
        }
    }
    common::tool_defs(specs, path, limits)
}

/// One function declaration; `parameters` (OpenAPI style) is converted to JSON Schema, and no
/// parameters at all is an empty object schema.
fn declaration(path: String, d: &Value) -> CallResult<common::ToolSpec<'_>> {
    let obj = Obj::new(as_object(d, &path)?, path.as_str());
    let (schema, schema_path) = match (obj.get("parametersJsonSchema"), obj.get("parameters")) {
        (Some(_), Some(_)) => {
            return Err(CallError::at(
                &path,
                "`parameters` and `parametersJsonSchema` both describe the arguments; pass one",
            ));
        }
        (Some(s), None) => (uppercase_types_lowered(s), obj.path("parametersJsonSchema")),
        (None, Some(s)) => (
            Cow::Owned(openapi_to_json_schema(s)),
            obj.path("parameters"),
        ),
        (None, None) => (
            Cow::Owned(json!({"type": "object", "properties": {}})),
            obj.path("parameters"),
        ),
    };
    Ok(common::ToolSpec {
        name: obj.required_str("name")?,
        description: obj.opt_str("description")?,
        schema,
        schema_path,
        path,
    })
}

/// Keys whose values are the caller's data, not the API's fields: schemas (whose property
/// names are the caller's), a function call's arguments and a function's response.
const OPAQUE: [&str; 6] = [
    "parameters",
    "parametersJsonSchema",
    "responseSchema",
    "responseJsonSchema",
    "args",
    "response",
];

/// Gemini's fields in proto JSON's other spelling: the protocol buffer's own field names
/// (`system_instruction`, `generation_config`, `parameters_json_schema`, `inline_data`,
/// `mime_type`, …), which the API accepts as it accepts lowerCamelCase and the google-genai
/// Python SDK sends, renamed to the camelCase this shape reads, at every level of the request
/// but inside the caller's own data ([`OPAQUE`]). A field given in both spellings keeps the
/// camelCase one; the other is named in `warnings`.
pub fn camel_case_fields(body: &mut Map<String, Value>, warnings: &mut Vec<String>) {
    rename_fields(body, "", warnings);
}

fn rename_fields(object: &mut Map<String, Value>, path: &str, warnings: &mut Vec<String>) {
    let snake: Vec<String> = object.keys().filter(|k| k.contains('_')).cloned().collect();
    for key in snake {
        let camel = camel_case(&key);
        if camel == key {
            continue;
        }
        let Some(value) = object.remove(&key) else {
            continue;
        };
        if object.contains_key(&camel) {
            warnings.push(format!(
                "`{path}{}` and `{path}{camel}` are the same field; `{path}{}` was ignored",
                crate::error::clip(&key),
                crate::error::clip(&key),
            ));
        } else {
            object.insert(camel, value);
        }
    }
    for (key, value) in object.iter_mut() {
        if OPAQUE.contains(&key.as_str()) {
            continue;
        }
        let here = format!("{path}{key}");
        match value {
            Value::Object(inner) => rename_fields(inner, &format!("{here}."), warnings),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Object(inner) = item {
                        rename_fields(inner, &format!("{here}[{i}]."), warnings);
                    }
                }
            }
            _ => {}
        }
    }
}

/// `snake_case` as `lowerCamelCase` (proto JSON's rule: an underscore drops and the next letter
/// is upper case); a leading underscore stays.
fn camel_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for (i, c) in key.chars().enumerate() {
        if c == '_' && i > 0 {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// `toolConfig.functionCallingConfig`: the choice and the allowed function names.
fn tool_config(o: &Obj<'_>) -> CallResult<(Option<ToolChoice>, Option<Vec<String>>)> {
    let Some(config) = o.opt_object("toolConfig")? else {
        return Ok((None, None));
    };
    let config = Obj::new(config, "toolConfig");
    let Some(fc) = config.opt_object("functionCallingConfig")? else {
        return Ok((None, None));
    };
    let fc = Obj::new(fc, "toolConfig.functionCallingConfig");
    const MODES: [&str; 4] = ["AUTO", "ANY", "NONE", "VALIDATED"];
    let choice = match fc.opt_enum("mode", &MODES)? {
        None | Some("AUTO") | Some("VALIDATED") => None,
        Some("ANY") => Some(ToolChoice::Required),
        Some(_) => Some(ToolChoice::None),
    };
    let allowed = match fc.opt_array("allowedFunctionNames")? {
        None => None,
        Some(names) => Some(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    n.as_str().map(str::to_owned).ok_or_else(|| {
                        CallError::expected(
                            &args::index(&fc.path("allowedFunctionNames"), i),
                            "a function name",
                            n,
                        )
                    })
                })
                .collect::<CallResult<Vec<_>>>()?,
        ),
    };
    Ok((choice, allowed))
}

/// `systemInstruction`: a string, or a Content whose parts are all text (joined with `"\n"`).
fn system_text(v: &Value, path: &str, limits: &Limits) -> CallResult<String> {
    if let Value::String(s) = v {
        return Ok(s.clone());
    }
    let obj = Obj::new(as_object(v, path)?, path);
    let parts = non_empty_array(obj.required("parts")?, &obj.path("parts"))?;
    let mut pending = Vec::new();
    let blocks = content_parts(parts, &obj.path("parts"), limits, &mut pending, 0)?;
    match flatten_text(blocks).as_slice() {
        [Block::Text(t)] => Ok(t.clone()),
        _ => Err(CallError::at(
            path,
            "the system instruction takes text parts only",
        )),
    }
}

/// The contents as messages and the transcript the cursor commits to.
fn conversation(contents: &[Value], limits: &Limits) -> CallResult<(Vec<Msg>, Vec<Entry>)> {
    let mut messages = Vec::with_capacity(contents.len());
    let mut transcript = Vec::with_capacity(contents.len() + 1);
    // Calls of the previous model turn not answered yet: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (index, c) in contents.iter().enumerate() {
        let path = args::index("contents", index);
        let obj = Obj::new(as_object(c, &path)?, path.as_str());
        let role = match obj.opt_enum("role", &ROLES)? {
            Some("model") => Role::Assistant,
            _ => Role::User,
        };
        let parts = non_empty_array(obj.required("parts")?, &obj.path("parts"))?;
        if role == Role::Assistant {
            pending.clear();
        }
        let blocks = content_parts(parts, &obj.path("parts"), limits, &mut pending, index)?;
        let blocks = flatten_text(blocks);
        let entry_role = match (role, blocks.first()) {
            (Role::Assistant, _) => "assistant",
            (Role::User, Some(Block::ToolResult { .. })) => "tool",
            (Role::User, _) => "user",
        };
        transcript.push(Entry::from_blocks(entry_role, &blocks));
        messages.push(Msg {
            index,
            role,
            blocks,
        });
    }
    Ok((messages, transcript))
}

/// The parts of one Content as blocks. `pending` holds the calls of the last model turn, so
/// that responses without ids find theirs; `turn` makes ids of calls without one unique.
fn content_parts(
    parts: &[Value],
    path: &str,
    limits: &Limits,
    pending: &mut Vec<(String, String)>,
    turn: usize,
) -> CallResult<Vec<Block>> {
    let mut blocks = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let p = args::index(path, i);
        let part = Obj::new(as_object(part, &p)?, p.as_str());
        blocks.push(part_block(&part, limits, pending, (turn, i))?);
    }
    Ok(blocks)
}

/// One part: exactly one of `text`, `inlineData`, `functionCall`, `functionResponse`.
fn part_block(
    part: &Obj<'_>,
    limits: &Limits,
    pending: &mut Vec<(String, String)>,
    (turn, i): (usize, usize),
) -> CallResult<Block> {
    const KINDS: [&str; 4] = ["text", "inlineData", "functionCall", "functionResponse"];
    let present: Vec<&str> = KINDS
        .into_iter()
        .filter(|k| part.get(k).is_some())
        .collect();
    let kind = match present.as_slice() {
        [one] => *one,
        [] if part.get("fileData").is_some() => {
            return Err(CallError::at(
                &part.path("fileData"),
                "files are not fetched (this server never fetches anything): send the bytes \
                 as inlineData {mimeType, data}",
            ));
        }
        _ => {
            return Err(CallError::at(
                part.here(),
                format!("a part needs exactly one of {}", args::one_of(&KINDS)),
            ));
        }
    };
    match kind {
        // A thought the model had, sent back: its reasoning.
        "text" if part.get("thought") == Some(&Value::Bool(true)) => {
            Ok(Block::Reasoning(part.required_str("text")?.to_owned()))
        }
        "text" => Ok(Block::Text(part.required_str("text")?.to_owned())),
        "inlineData" => inline_data(part, limits),
        "functionCall" => {
            let fpath = part.path("functionCall");
            let call = Obj::new(
                as_object(part.required("functionCall")?, &fpath)?,
                fpath.as_str(),
            );
            let name = call.required_str("name")?.to_owned();
            let id = match call.opt_str("id")? {
                Some(id) => id.to_owned(),
                None => format!("{name}#{turn}.{i}"),
            };
            let input = match call.opt_object("args")? {
                Some(m) => m.clone(),
                None => Map::new(),
            };
            pending.push((id.clone(), name.clone()));
            Ok(Block::ToolUse { id, name, input })
        }
        _ => function_response(part, pending),
    }
}

fn inline_data(part: &Obj<'_>, limits: &Limits) -> CallResult<Block> {
    let dpath = part.path("inlineData");
    let data = Obj::new(
        as_object(part.required("inlineData")?, &dpath)?,
        dpath.as_str(),
    );
    let mime = data.required_str("mimeType")?;
    let kind = if mime.starts_with("audio/") {
        media::Kind::Audio
    } else {
        media::Kind::Image
    };
    media::block(
        kind,
        data.required_str("data")?,
        mime,
        &data.path("data"),
        &data.path("mimeType"),
        limits,
    )
}

/// A `functionResponse`: its id, or the earliest unanswered call of its name.
fn function_response(part: &Obj<'_>, pending: &mut Vec<(String, String)>) -> CallResult<Block> {
    let rpath = part.path("functionResponse");
    let resp = Obj::new(
        as_object(part.required("functionResponse")?, &rpath)?,
        rpath.as_str(),
    );
    let name = resp.required_str("name")?;
    let response = resp.required("response")?;
    as_object(response, &resp.path("response"))?;
    let id = match resp.opt_str("id")? {
        Some(id) => id.to_owned(),
        None => match pending.iter().position(|(_, n)| n == name) {
            Some(at) => pending.remove(at).0,
            None => {
                return Err(CallError::at(
                    &rpath,
                    format!("answers no call of {name:?} in the model turn before it"),
                ));
            }
        },
    };
    Ok(Block::ToolResult {
        id,
        content: vec![Block::Text(crate::pyjson::dumps(
            response,
            crate::pyjson::Style::SORTED,
        ))],
        is_error: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Mode, Turn};
    use crate::shapes::common::tests_support::parse;

    fn call(v: Value) -> CallResult<Call> {
        parse(&GenerateContent, v)
    }

    #[test]
    fn contents_system_and_config_map_onto_the_call() {
        let c = call(json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Hi"}, {"text": "there"}]},
                {"role": "model", "parts": [{"text": "Hello"}]},
                {"parts": [{"text": "Again"}]}
            ],
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "generationConfig": {"temperature": 0.2, "maxOutputTokens": 50,
                                 "stopSequences": ["END"], "topK": 3,
                                 "presencePenalty": 0.5, "frequencyPenalty": 1}
        }))
        .unwrap();
        assert_eq!(c.request.system.as_deref(), Some("Be brief."));
        assert_eq!(
            c.request.turns,
            vec![
                Turn::text(Role::User, "Hi\nthere"),
                Turn::text(Role::Assistant, "Hello"),
                Turn::text(Role::User, "Again")
            ]
        );
        assert_eq!(c.request.max_tokens, 50);
        assert_eq!(c.request.temperature, Some(0.2));
        assert_eq!(c.request.stop, vec!["END".to_owned()]);
        assert_eq!(c.metadata["topK"], json!(3));
        assert_eq!(c.metadata["presencePenalty"], json!(0.5));
        assert_eq!(
            (
                c.request.samplers.presence_penalty,
                c.request.samplers.frequency_penalty
            ),
            (Some(0.5), Some(1.0))
        );
        let e = call(json!({"contents": [{"parts": [{"text": "x"}]}],
                            "generationConfig": {"presencePenalty": 3}}))
        .unwrap_err()
        .to_string();
        assert!(e.contains("generationConfig.presencePenalty"), "{e}");
        assert_eq!(c.transcript[0], Entry::new("system", "Be brief."));
        assert_eq!(c.transcript[2], Entry::new("assistant", "Hello"));
        assert_eq!(c.request.logprobs, None);
        let c = call(json!({"contents": [{"parts": [{"text": "x"}]}],
                            "generationConfig": {"responseLogprobs": true, "logprobs": 4}}))
        .unwrap();
        assert_eq!(c.request.logprobs, Some(4));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn response_schema_is_converted_and_enforced() {
        let c = call(json!({
            "contents": [{"parts": [{"text": "x"}]}],
            "generationConfig": {"responseMimeType": "application/json", "responseSchema": {
                "type": "OBJECT", "properties": {"n": {"type": "INTEGER", "nullable": true}},
                "required": ["n"], "propertyOrdering": ["n"]}}
        }))
        .unwrap();
        let Mode::Structured(s) = &c.mode else {
            panic!("structured")
        };
        assert!(s.check(&json!({"n": 3})).is_ok());
        assert!(s.check(&json!({"n": null})).is_ok());
        assert!(s.check(&json!({"n": "3"})).is_err());
        let c = call(json!({"contents": [{"parts": [{"text": "x"}]}],
            "generationConfig": {"responseMimeType": "application/json"}}))
        .unwrap();
        assert!(matches!(c.mode, Mode::Structured(_)));
    }

    #[test]
    fn function_calls_pair_by_name_and_config_narrows_tools() {
        let c = call(json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Weather?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 3}}}]}
            ],
            "tools": [{"functionDeclarations": [
                {"name": "get_weather", "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}},
                {"name": "get_time"}
            ]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
        }))
        .unwrap();
        let Mode::Tools { defs, choice } = &c.mode else {
            panic!("tools")
        };
        assert_eq!(*choice, ToolChoice::Required);
        assert_eq!(defs.len(), 1);
        assert_eq!(
            defs[0].input_schema()["properties"]["city"]["type"],
            "string"
        );
        let Block::ToolUse { id, .. } = &c.request.turns[1].blocks[0] else {
            panic!("a call")
        };
        let Block::ToolResult { id: answered, .. } = &c.request.turns[2].blocks[0] else {
            panic!("a result")
        };
        assert_eq!(id, answered);
        assert_eq!(c.transcript[2].role, "tool");
    }

    #[test]
    fn snake_case_fields_are_read_as_camel_case_outside_the_callers_data() {
        let mut body = json!({
            "contents": [{"role": "user", "parts": [
                {"text": "hi"},
                {"inline_data": {"mime_type": "image/png", "data": "AA=="}}]}],
            "system_instruction": {"parts": [{"text": "Be brief."}]},
            "generation_config": {"max_output_tokens": 7, "stop_sequences": ["x"]},
            "generationConfig": {"temperature": 0.5},
            "tools": [{"function_declarations": [{"name": "f",
                "parameters_json_schema": {"type": "object",
                    "properties": {"city_name": {"type": "string"}}}}]}],
            "tool_config": {"function_calling_config": {"mode": "ANY",
                "allowed_function_names": ["f"]}}
        });
        let mut warnings = Vec::new();
        camel_case_fields(body.as_object_mut().unwrap(), &mut warnings);
        assert_eq!(body["systemInstruction"]["parts"][0]["text"], "Be brief.");
        assert_eq!(
            body["contents"][0]["parts"][1]["inlineData"]["mimeType"],
            "image/png"
        );
        let declaration = &body["tools"][0]["functionDeclarations"][0];
        assert_eq!(
            declaration["parametersJsonSchema"]["properties"]["city_name"]["type"], "string",
            "the caller's property names stay: {declaration}"
        );
        assert_eq!(
            body["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"],
            json!(["f"])
        );
        assert_eq!(body["generationConfig"], json!({"temperature": 0.5}));
        assert_eq!(
            warnings,
            [
                "`generation_config` and `generationConfig` are the same field; \
              `generation_config` was ignored"
            ]
        );
        assert_eq!(camel_case("_private"), "_private");
        assert_eq!(camel_case("thinking_budget"), "thinkingBudget");
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            (json!({}), "`contents`: is required"),
            (
                json!({"contents": []}),
                "`contents`: must contain at least one item",
            ),
            (
                json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}),
                "`contents[0].role`: expected one of \"user\", \"model\"",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x", "inlineData": {}}]}]}),
                "`contents[0].parts[0]`: a part needs exactly one of",
            ),
            (
                json!({"contents": [{"parts": [{"fileData": {"fileUri": "gs://x"}}]}]}),
                "`contents[0].parts[0].fileData`: files are not fetched",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "generationConfig": {"candidateCount": 2}}),
                "`generationConfig.candidateCount`: expected 1",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "generationConfig": {"logprobs": 3}}),
                "`generationConfig.logprobs`: needs `responseLogprobs: true`",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "generationConfig": {"responseLogprobs": true, "logprobs": 21}}),
                "`generationConfig.logprobs`: expected an integer from 0 to 20",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "generationConfig": {"responseLogprobs": "yes"}}),
                "`generationConfig.responseLogprobs`: expected a boolean",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "generationConfig": {"responseSchema": {"type": "ARRAY"}}}),
                "`generationConfig.responseSchema`: the schema's root \"type\" must be \"object\"",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "tools": [{"googleSearch": {}}]}),
                "`tools[0].googleSearch`: only functionDeclarations are supported",
            ),
            (
                json!({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}),
                "answers no call of \"f\"",
            ),
            (
                json!({"contents": [{"parts": [{"text": "x"}]}],
                       "generationConfig": {"maxOutputTokens": 0}}),
                "`generationConfig.maxOutputTokens`",
            ),
        ];
        for (args, want) in cases {
            let e = call(args).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
    }
}
