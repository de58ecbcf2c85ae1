//! JSON Schema: compiling caller-supplied schemas safely and validating values against them.
//!
//! Schemas come from callers, so compiling one must not stall or exhaust the server: `pattern`
//! uses the linear-time `regex` engine, size and nesting are capped, and no `$ref` is fetched
//! (the crate is built without its HTTP and file resolvers). Compiled validators are cached by
//! the SHA-256 of the schema's canonical text, so a product that sends the same schema on every
//! call pays for compilation once.

use crate::contract::held;
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
    /// Schema nodes with every reference expanded: with the size of a value, a bound on the
    /// work of validating it.
    expanded: u64,
}

/// Why a schema does not compile here.
#[derive(Debug, thiserror::Error)]
enum Uncompiled {
    /// A reference (clipped) that does not resolve inside the schema.
    #[error(
        "the reference {0:?} does not resolve inside the schema; only local references \
         (#/..., #anchor, an embedded $id) are supported"
    )]
    Unresolved(String),
    /// The compiler refused it.
    #[error("the schema cannot be compiled: {0}")]
    Invalid(Box<jsonschema::ValidationError<'static>>),
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

    /// The first violation, if any. A value so large that validating it against this schema
    /// could take more than [`MAX_VALIDATION_WORK`] is refused without being validated.
    pub fn check(&self, instance: &Value) -> Result<(), Violation> {
        let nodes = value_nodes(instance);
        if nodes.saturating_mul(self.expanded) > MAX_VALIDATION_WORK {
            return Err(Violation {
                pointer: "/".to_owned(),
                message: format!(
                    "the value ({nodes} JSON nodes) is too large to validate against this schema \
                     ({} schema nodes with references expanded): at most {MAX_VALIDATION_WORK} \
                     node pairs are checked",
                    self.expanded
                ),
            });
        }
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

/// Nodes in a JSON value (every value, container or not, counts one).
fn value_nodes(v: &Value) -> u64 {
    match v {
        Value::Array(items) => 1 + items.iter().map(value_nodes).sum::<u64>(),
        Value::Object(map) => 1 + map.values().map(value_nodes).sum::<u64>(),
        _ => 1,
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Most schema nodes after every reference is expanded. Validation work grows with this, so a
/// schema whose references double at each level (2.7 KB of `$defs` can expand to 2^40 nodes) is
/// refused before it is compiled.
pub const MAX_EXPANDED_NODES: u64 = 100_000;
/// Most (value nodes × expanded schema nodes) one validation may cost: a large value against a
/// schema that is large after expansion could otherwise hold a worker for minutes.
pub const MAX_VALIDATION_WORK: u64 = 1_000_000_000;
/// Most `pattern` and `patternProperties` regular expressions in one schema.
pub const MAX_PATTERNS: usize = 64;
/// Compiled size limit of one regular expression (and of its lazy DFA), in bytes: ordinary
/// patterns need a few KiB; `\p{L}{200}` needs megabytes and is refused.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Weight of the validator cache, in bytes that compiling each schema allocated and kept (its
/// validator and its text as a value) plus [`REGEX_SIZE_LIMIT`] per pattern: a bound on what
/// cached validators can hold.
const CACHE_BUDGET: usize = 64 * 1024 * 1024;

/// Counts schema nodes with every local reference (`#/pointer`, `#anchor`, an embedded `$id`)
/// expanded, stopping at `MAX_EXPANDED_NODES`. A reference back into its own expansion
/// (recursion) counts once: validation of recursive schemas is bounded by the instance.
struct Expansion<'a> {
    root: &'a Value,
    anchors: HashMap<&'a str, &'a Value>,
    memo: HashMap<*const Value, u64>,
    active: Vec<*const Value>,
    patterns: usize,
}

impl<'a> Expansion<'a> {
    fn new(root: &'a Value) -> Self {
        let mut anchors = HashMap::new();
        collect_anchors(root, &mut anchors);
        Expansion {
            root,
            anchors,
            memo: HashMap::new(),
            active: Vec::new(),
            patterns: 0,
        }
    }

    fn resolve(&self, reference: &str) -> Result<&'a Value, Uncompiled> {
        let target = match reference.strip_prefix('#') {
            Some("") => Some(self.root),
            Some(pointer) if pointer.starts_with('/') => self.root.pointer(pointer),
            Some(anchor) => self.anchors.get(anchor).copied(),
            None => self.anchors.get(reference).copied(),
        };
        target.ok_or_else(|| Uncompiled::Unresolved(crate::error::clip(reference).into_owned()))
    }

    /// The expanded size of `node`, saturating at the limit.
    fn size(&mut self, node: &'a Value) -> Result<u64, Uncompiled> {
        let key = node as *const Value;
        if let Some(n) = self.memo.get(&key) {
            return Ok(*n);
        }
        if self.active.contains(&key) {
            return Ok(1);
        }
        self.active.push(key);
        let mut total: u64 = 1;
        match node {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "pattern" || k == "patternProperties" {
                        self.patterns += v.as_object().map_or(1, Map::len);
                    }
                    let child = match (k.as_str(), v) {
                        ("$ref" | "$dynamicRef", Value::String(r)) => self.resolve(r)?,
                        _ => v,
                    };
                    total = total.saturating_add(self.size(child)?);
                    if total > MAX_EXPANDED_NODES {
                        break;
                    }
                }
            }
            Value::Array(items) => {
                for v in items {
                    total = total.saturating_add(self.size(v)?);
                    if total > MAX_EXPANDED_NODES {
                        break;
                    }
                }
            }
            _ => {}
        }
        self.active.pop();
        self.memo.insert(key, total);
        Ok(total)
    }
}

fn collect_anchors<'a>(v: &'a Value, out: &mut HashMap<&'a str, &'a Value>) {
    match v {
        Value::Object(map) => {
            for key in ["$anchor", "$dynamicAnchor", "$id"] {
                if let Some(Value::String(name)) = map.get(key) {
                    out.insert(name.as_str(), v);
                }
            }
            map.values().for_each(|x| collect_anchors(x, out));
        }
        Value::Array(items) => items.iter().for_each(|x| collect_anchors(x, out)),
        _ => {}
    }
}

/// Cached validators and their total weight against [`CACHE_BUDGET`].
#[derive(Default)]
struct Cache {
    /// Each schema with its weight.
    entries: HashMap<[u8; 32], (Arc<Schema>, usize)>,
    weight: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Cache::default()))
}

fn remember(key: [u8; 32], schema: &Arc<Schema>, weight: usize) {
    let Ok(mut c) = cache().lock() else {
        return;
    };
    if weight > CACHE_BUDGET / 4 || c.entries.contains_key(&key) {
        return;
    }
    if c.entries.len() >= CACHE_CAPACITY || c.weight + weight > CACHE_BUDGET {
        c.entries.clear();
        c.weight = 0;
    }
    c.weight += weight;
    c.entries.insert(key, (schema.clone(), weight));
}

/// The root must be an object schema with `"type": "object"`, nested no deeper than the limit.
fn check_shape(schema: &Value, path: &str, limits: &Limits) -> CallResult<()> {
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
    Ok(())
}

/// The work a schema can cause is bounded: expanded size and number of patterns. Returns the
/// expanded size and the number of patterns.
fn check_budget(schema: &Value, path: &str) -> CallResult<(u64, usize)> {
    let mut expansion = Expansion::new(schema);
    let nodes = expansion
        .size(schema)
        .map_err(|problem| CallError::at(path, problem))?;
    if nodes > MAX_EXPANDED_NODES {
        return Err(CallError::at(
            path,
            format!(
                "the schema's references expand to more than {MAX_EXPANDED_NODES} schema nodes, \
                 which would make validation too costly; reference shared definitions without \
                 multiplying them"
            ),
        ));
    }
    if expansion.patterns > MAX_PATTERNS {
        return Err(CallError::at(
            path,
            format!(
                "the schema has {} regular expressions (pattern, patternProperties); at most \
                 {MAX_PATTERNS} are accepted",
                expansion.patterns
            ),
        ));
    }
    Ok((nodes, expansion.patterns))
}

/// Compiles the schema at `path` (an argument path such as `output_schema` or
/// `tools[0].input_schema`), which must be a valid Draft 2020-12 schema whose root `type` is
/// `"object"`, within the limits. `format` is asserted, not just annotated.
pub fn compile(schema: &Value, path: &str, limits: &Limits) -> CallResult<Arc<Schema>> {
    check_shape(schema, path, limits)?;
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
    let hit = cache()
        .lock()
        .ok()
        .and_then(|c| c.entries.get(&key).map(|(s, _)| s.clone()));
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let (expanded, patterns) = check_budget(schema, path)?;
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
    // What the compiled schema keeps is measured as it is built: its validator holds several
    // times its text (64 tool schemas of 80 KB kept some 0.9 GB when weighed by their text).
    let (compiled, kept) = held::kept(|| build(schema, expanded));
    let compiled = compiled.map_err(|e| CallError::at(path, e))?;
    // A pattern's lazy DFA grows as it validates, up to its limit.
    remember(key, &compiled, kept + patterns * REGEX_SIZE_LIMIT);
    Ok(compiled)
}

/// The compiled schema, or why it does not compile.
fn build(schema: &Value, expanded: u64) -> Result<Arc<Schema>, Uncompiled> {
    let patterns_options = PatternOptions::regex()
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT);
    let validator = jsonschema::draft202012::options()
        .with_pattern_options(patterns_options)
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| Uncompiled::Invalid(Box::new(e)))?;
    Ok(Arc::new(Schema {
        raw: schema.clone(),
        validator,
        expanded,
    }))
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

    /// Forty levels, each `allOf` two references to the next: 2.7 KB that expands to 2^40.
    fn doubling(levels: usize, via_anchor: bool) -> Value {
        let mut defs = Map::new();
        for i in 0..levels {
            let next = if via_anchor {
                format!("#L{}", i + 1)
            } else {
                format!("#/$defs/L{}", i + 1)
            };
            defs.insert(
                format!("L{i}"),
                json!({"$anchor": format!("L{i}"), "allOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert(
            format!("L{levels}"),
            json!({"$anchor": format!("L{levels}"), "type": "string"}),
        );
        json!({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/L0"}}})
    }

    #[test]
    fn reference_bombs_and_pattern_floods_are_refused() {
        let l = Limits::default();
        for anchor in [false, true] {
            let e = compile(&doubling(40, anchor), "output_schema", &l)
                .unwrap_err()
                .to_string();
            assert!(e.contains("expand to more than"), "{e}");
        }
        // A few levels of sharing are fine, and so is recursion.
        assert!(compile(&doubling(8, false), "output_schema", &l).is_ok());
        let tree = json!({"type": "object", "$defs": {"node": {"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}}});
        assert!(compile(&tree, "output_schema", &l).is_ok());
        let e = compile(
            &json!({"type": "object", "properties": {"a": {"$ref": "https://x/y.json"}}}),
            "output_schema",
            &l,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not resolve inside the schema"), "{e}");
        let mut props = Map::new();
        for i in 0..65 {
            props.insert(format!("p{i}"), json!({"type": "string", "pattern": "^a"}));
        }
        let e = compile(
            &json!({"type": "object", "properties": props}),
            "output_schema",
            &l,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("65 regular expressions"), "{e}");
        let e = compile(
            &json!({"type": "object", "properties": {"a": {"type": "string", "pattern": r"\p{L}{200}"}}}),
            "output_schema",
            &l,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot be compiled"), "{e}");
    }

    #[test]
    fn a_value_too_large_for_its_schema_is_not_validated() {
        let l = Limits::default();
        // 12 levels of doubling are accepted (about 25,000 expanded nodes)...
        let schema = compile(&doubling(12, false), "output_schema", &l).unwrap();
        assert!(schema.check(&json!({"x": "s"})).is_ok());
        // ...but a value of 100,000 nodes against it is refused unvalidated, and quickly.
        let big = json!({"x": vec![0; 100_000]});
        let e = schema.check(&big).unwrap_err();
        assert!(e.message.contains("too large to validate"), "{e}");
    }

    #[test]
    fn formats_are_asserted() {
        let s = compile(
            &json!({"type": "object", "properties": {
                "d": {"type": "string", "format": "date"},
                "e": {"type": "string", "format": "email"},
                "u": {"type": "string", "format": "uuid"},
                "i": {"type": "string", "format": "ipv4"}}}),
            "output_schema",
            &Limits::default(),
        )
        .unwrap();
        assert!(
            s.check(&json!({"d": "2026-11-30", "e": "a@b.co", "i": "10.0.0.1",
                                "u": "67e55044-10b1-426f-9247-bb680e5fe0c8"}))
                .is_ok()
        );
        for bad in [
            json!({"d": "30/11/2026"}),
            json!({"e": "nobody"}),
            json!({"u": "x"}),
            json!({"i": "999.1.1.1"}),
        ] {
            assert!(s.check(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_cache_weighs_what_a_compiled_schema_keeps() {
        // 400 described properties: 80 KB of text, as in a large tool's parameters.
        let mut props = Map::new();
        for p in 0..400 {
            props.insert(
                format!("weighed_{p}"),
                json!({"type": "string", "description": "d".repeat(150)}),
            );
        }
        let schema = json!({"type": "object", "properties": props});
        let text = serde_json::to_vec(&schema).unwrap();
        // What the first schema compiled in a process sets up for all (the meta-schema) is
        // kept too, but not by the schema.
        compile(
            &json!({"type": "object", "properties": {"warm": {"type": "string"}}}),
            "output_schema",
            &Limits::default(),
        )
        .unwrap();
        let (compiled, kept) =
            held::kept(|| compile(&schema, "output_schema", &Limits::default()).unwrap());
        let key: [u8; 32] = Sha256::digest(&text).into();
        let weight = cache().lock().unwrap().entries.get(&key).unwrap().1;
        // What it keeps is several times its text, and the cache counts all of it.
        assert!(kept > 2 * text.len(), "{kept} kept, {} of text", text.len());
        assert!(weight >= kept * 9 / 10, "weighed {weight}, kept {kept}");
        drop(compiled);
    }

    #[test]
    fn compiled_schemas_are_cached() {
        let schema = json!({"type": "object", "properties": {"cached": {"type": "string"}}});
        let a = compile(&schema, "output_schema", &Limits::default()).unwrap();
        let b = compile(&schema, "output_schema", &Limits::default()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
