//! JSON Schema: compiling caller-supplied schemas safely and validating values against them.
//!
//! Schemas come from callers, so compiling one must not stall or exhaust the server: `pattern`
//! uses the linear-time `regex` engine, size and nesting are capped, and no `$ref` is fetched
//! (the crate is built without its HTTP and file resolvers). Compiled validators are cached by
//! the SHA-256 of the schema's canonical text, so a product that sends the same schema on every
//! call pays for compilation once.

use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use jsonschema::{PatternOptions, Validator};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Compiled validators kept across calls.
const CACHE_CAPACITY: usize = 256;

/// A compiled, object-rooted JSON Schema.
#[derive(Debug)]
pub struct Schema {
    raw: Value,
    validator: Validator,
}

/// The first place a value breaks a schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {pointer}: {message}")]
pub struct Violation {
    /// JSON pointer into the value (`/` for the root).
    pub pointer: String,
    pub message: String,
}

impl Schema {
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The schema as an object (it always is one: roots must be `"type": "object"`).
    pub fn object(&self) -> &Map<String, Value> {
        static EMPTY: OnceLock<Map<String, Value>> = OnceLock::new();
        self.raw
            .as_object()
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// The first violation, if any.
    pub fn check(&self, instance: &Value) -> Result<(), Violation> {
        match self.validator.iter_errors(instance).next() {
            None => Ok(()),
            Some(e) => {
                let pointer = e.instance_path().to_string();
                Err(Violation {
                    pointer: if pointer.is_empty() {
                        "/".to_owned()
                    } else {
                        pointer
                    },
                    message: e.to_string(),
                })
            }
        }
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn cache() -> &'static Mutex<HashMap<[u8; 32], Arc<Schema>>> {
    static CACHE: OnceLock<Mutex<HashMap<[u8; 32], Arc<Schema>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles the schema at `path` (an argument path such as `output_schema` or
/// `tools[0].input_schema`), which must be a valid Draft 2020-12 schema whose root `type` is
/// `"object"`.
pub fn compile(schema: &Value, path: &str, limits: &Limits) -> CallResult<Arc<Schema>> {
    let Some(map) = schema.as_object() else {
        return Err(CallError::expected(path, "a JSON Schema object", schema));
    };
    if map.get("type").and_then(Value::as_str) != Some("object") {
        return Err(CallError::at(
            path,
            format!(
                "the schema's root \"type\" must be \"object\", got {}",
                map.get("type")
                    .map_or_else(|| "no \"type\"".to_owned(), |t| t.to_string())
            ),
        ));
    }
    let max_depth = limits.max_schema_depth;
    if depth(schema) > max_depth {
        return Err(CallError::at(
            path,
            format!(
                "the schema nests deeper than {max_depth} levels (AGENT_AS_MODEL_MAX_SCHEMA_DEPTH)"
            ),
        ));
    }
    // serde_json's writer is fast; the key only needs to be stable for the same text.
    let text = serde_json::to_vec(schema).unwrap_or_default();
    let max_bytes = limits.max_schema_bytes;
    if text.len() > max_bytes {
        return Err(CallError::at(
            path,
            format!(
                "the schema is {} bytes of JSON; at most {max_bytes} are accepted \
                 (AGENT_AS_MODEL_MAX_SCHEMA_BYTES)",
                text.len()
            ),
        ));
    }
    let key: [u8; 32] = Sha256::digest(&text).into();
    if let Some(hit) = cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(hit);
    }
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        let pointer = e.instance_path().to_string();
        return Err(CallError::at(
            path,
            format!(
                "not a valid Draft 2020-12 JSON Schema (at {}): {e}",
                if pointer.is_empty() { "/" } else { &pointer }
            ),
        ));
    }
    let validator = jsonschema::draft202012::options()
        .with_pattern_options(PatternOptions::regex())
        .build(schema)
        .map_err(|e| CallError::at(path, format!("the schema cannot be compiled: {e}")))?;
    let compiled = Arc::new(Schema {
        raw: schema.clone(),
        validator,
    });
    if let Ok(mut c) = cache().lock() {
        if c.len() >= CACHE_CAPACITY {
            c.clear();
        }
        c.insert(key, compiled.clone());
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rejects_non_object_roots_and_invalid_schemas() {
        let e = compile(
            &json!({"type": "array"}),
            "output_schema",
            &Limits::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`output_schema`: the schema's root \"type\" must be \"object\"")
        );
        let e = compile(
            &json!({"type": "object", "properties": {"a": {"type": 5}}}),
            "output_schema",
            &Limits::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not a valid Draft 2020-12 JSON Schema"), "{e}");
        let e = compile(&json!("x"), "tools[0].input_schema", &Limits::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`tools[0].input_schema`: expected a JSON Schema object"),
            "{e}"
        );
    }

    #[test]
    fn violations_name_the_json_pointer() {
        let s = compile(&json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]}), "output_schema", &Limits::default())
        .unwrap();
        assert!(s.check(&json!({"a": [1, 2]})).is_ok());
        let e = s.check(&json!({"a": [1, "x"]})).unwrap_err().to_string();
        assert!(e.starts_with("at /a/1:"), "{e}");
        let e = s.check(&json!({})).unwrap_err().to_string();
        assert!(e.starts_with("at /:") && e.contains("\"a\""), "{e}");
    }

    #[test]
    fn patterns_use_the_linear_engine_and_limits_hold() {
        // A backreference is only expressible in a backtracking engine: the linear one refuses it.
        let e = compile(
            &json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}),
            "output_schema",
            &Limits::default(),
        );
        assert!(e.is_err());
        let mut deep = json!({"type": "object"});
        for _ in 0..70 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let e = compile(&deep, "output_schema", &Limits::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nests deeper"), "{e}");
    }

    #[test]
    fn compiled_schemas_are_cached() {
        let schema = json!({"type": "object", "properties": {"cached": {"type": "string"}}});
        let a = compile(&schema, "output_schema", &Limits::default()).unwrap();
        let b = compile(&schema, "output_schema", &Limits::default()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
