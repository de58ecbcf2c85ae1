//! Reading tool arguments with errors that name the field.
//!
//! Arguments arrive as untyped JSON from an agent. Rather than deserialize into structs (whose
//! errors say "invalid type: integer, expected a string" without saying where), each shape reads
//! its fields through [`Obj`], which knows the path of every value it hands out.

use crate::error::{CallError, CallResult};
use serde_json::{Map, Value};

/// A JSON object together with its path from the arguments' root (`""` for the root).
#[derive(Clone)]
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

/// The path of `key` inside the object at `base`.
pub fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// The path of item `index` inside the array at `base`.
pub fn index(base: &str, index: usize) -> String {
    format!("{base}[{index}]")
}

impl<'a> Obj<'a> {
    pub fn root(map: &'a Map<String, Value>) -> Self {
        Obj {
            map,
            path: String::new(),
        }
    }

    pub fn new(map: &'a Map<String, Value>, path: impl Into<String>) -> Self {
        Obj {
            map,
            path: path.into(),
        }
    }

    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    pub fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// This object's own path.
    pub fn here(&self) -> &str {
        &self.path
    }

    /// The value at `key`, treating JSON `null` as absent (the original's optional fields all
    /// default to `null`).
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A field that must be present and not `null`.
    pub fn required(&self, key: &str) -> CallResult<&'a Value> {
        self.get(key).ok_or_else(|| match self.map.get(key) {
            Some(v) => CallError::expected(&self.path(key), "a value", v),
            None => CallError::at(&self.path(key), "is required but missing"),
        })
    }

    pub fn required_str(&self, key: &str) -> CallResult<&'a str> {
        let v = self.required(key)?;
        v.as_str()
            .ok_or_else(|| CallError::expected(&self.path(key), "a string", v))
    }

    pub fn opt_str(&self, key: &str) -> CallResult<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(CallError::expected(&self.path(key), "a string or null", v)),
        }
    }

    pub fn opt_f64(&self, key: &str) -> CallResult<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(v) => Err(CallError::expected(&self.path(key), "a number or null", v)),
        }
    }

    /// A number within `range` (finite by construction), or `None` when absent.
    pub fn opt_f64_in(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<f64>,
    ) -> CallResult<Option<f64>> {
        match self.opt_f64(key)? {
            Some(n) if !range.contains(&n) => Err(CallError::expected(
                &self.path(key),
                &format!("a number from {} to {}", range.start(), range.end()),
                self.map.get(key).unwrap_or(&Value::Null),
            )),
            other => Ok(other),
        }
    }

    /// A positive integer that fits in `u32`, or `default` when absent.
    pub fn positive_u32_or(&self, key: &str, default: u32) -> CallResult<u32> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        let as_int = v.as_u64().or_else(|| {
            // 4096.0 is an integer to Python's validator too.
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX))
                .map(|f| f as u64)
        });
        match as_int.and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => Ok(n),
            _ => Err(CallError::expected(
                &self.path(key),
                &format!("a positive integer up to {}", u32::MAX),
                v,
            )),
        }
    }

    pub fn opt_object(&self, key: &str) -> CallResult<Option<&'a Map<String, Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(CallError::expected(&self.path(key), "an object or null", v)),
        }
    }

    pub fn opt_array(&self, key: &str) -> CallResult<Option<&'a Vec<Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(CallError::expected(&self.path(key), "an array or null", v)),
        }
    }

    /// A string field restricted to `allowed`.
    pub fn opt_enum(
        &self,
        key: &str,
        allowed: &[&'static str],
    ) -> CallResult<Option<&'static str>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let found = v
            .as_str()
            .and_then(|s| allowed.iter().find(|a| **a == s).copied());
        found
            .map(Some)
            .ok_or_else(|| CallError::expected(&self.path(key), &one_of(allowed), v))
    }
}

impl<'a> Obj<'a> {
    /// A string field that must be present and one of `allowed`.
    pub fn required_enum(&self, key: &str, allowed: &[&'static str]) -> CallResult<&'static str> {
        self.opt_enum(key, allowed)?.ok_or_else(|| {
            CallError::at(&self.path(key), format!("is required: {}", one_of(allowed)))
        })
    }
}

/// A JSON object encoded in the string field `key` (tool-call arguments in OpenAI shapes).
pub fn json_object_string(o: &Obj<'_>, key: &str) -> CallResult<Map<String, Value>> {
    match serde_json::from_str::<Value>(o.required_str(key)?) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(CallError::at(
            &o.path(key),
            "expected a JSON object encoded as a string",
        )),
    }
}

/// `one of "a", "b", "c"`.
pub fn one_of(allowed: &[&str]) -> String {
    let quoted: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    format!("one of {}", quoted.join(", "))
}

/// The object at `path`, or an error naming it.
pub fn as_object<'a>(v: &'a Value, path: &str) -> CallResult<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| CallError::expected(path, "an object", v))
}

/// A non-empty array at `path`.
pub fn non_empty_array<'a>(v: &'a Value, path: &str) -> CallResult<&'a Vec<Value>> {
    match v {
        Value::Array(a) if !a.is_empty() => Ok(a),
        Value::Array(_) => Err(CallError::at(path, "must contain at least one item")),
        other => Err(CallError::expected(path, "a non-empty array", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: &Value) -> &Map<String, Value> {
        v.as_object().unwrap()
    }

    #[test]
    fn errors_name_the_field_and_expectation() {
        let v = json!({"max_tokens": -3, "model": 5, "tool_choice": "maybe"});
        let o = Obj::new(obj(&v), "");
        let e = o
            .positive_u32_or("max_tokens", 4096)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`max_tokens`") && e.contains("positive integer"),
            "{e}"
        );
        let e = o.opt_str("model").unwrap_err().to_string();
        assert!(
            e.contains("`model`: expected a string or null, got number 5"),
            "{e}"
        );
        let e = o
            .opt_enum("tool_choice", &["auto", "none"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(r#"one of "auto", "none", got string "maybe""#),
            "{e}"
        );
        let e = o.required("messages").unwrap_err().to_string();
        assert!(e.contains("`messages`: is required but missing"), "{e}");
    }

    #[test]
    fn integral_floats_are_integers_and_null_is_absent() {
        let v = json!({"max_tokens": 512.0, "temperature": null});
        let o = Obj::root(obj(&v));
        assert_eq!(o.positive_u32_or("max_tokens", 1).ok(), Some(512));
        assert_eq!(o.opt_f64("temperature").ok(), Some(None));
        assert_eq!(o.positive_u32_or("missing", 7).ok(), Some(7));
    }
}
