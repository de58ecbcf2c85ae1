//! Personas: a per-call contract `{name, input_schema?, output_schema?}` supplied by the caller.
//!
//! The request object (the tool's arguments with defaults applied, see the shapes) must satisfy
//! `input_schema` before anything is sent; the completion text must parse as JSON satisfying
//! `output_schema` after the host answers. The server keeps no persona registry.

use super::schema::{self, Schema};
use crate::args::{Obj, as_object};
use crate::error::{CallError, CallResult};
use crate::limits::Limits;
use serde_json::{Map, Value};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Persona {
    pub name: String,
    input: Option<Arc<Schema>>,
    output: Option<Arc<Schema>>,
}

impl Persona {
    /// Reads and validates the `persona` argument, if any.
    pub fn parse(args: &Obj<'_>, limits: &Limits) -> CallResult<Option<Persona>> {
        let Some(value) = args.get("persona") else {
            return Ok(None);
        };
        let path = args.path("persona");
        let obj = Obj::new(as_object(value, &path)?, path.as_str());
        let name = obj.required_str("name")?;
        if name.trim().is_empty() {
            return Err(CallError::at(
                &obj.path("name"),
                "must be a non-empty string",
            ));
        }
        let compile = |key: &str| -> CallResult<Option<Arc<Schema>>> {
            obj.get(key)
                .map(|s| schema::compile(s, &obj.path(key), limits))
                .transpose()
        };
        Ok(Some(Persona {
            name: name.to_owned(),
            input: compile("input_schema")?,
            output: compile("output_schema")?,
        }))
    }

    pub fn has_output_schema(&self) -> bool {
        self.output.is_some()
    }

    /// Checks the request object against `input_schema`.
    pub fn check_input(&self, request: &Map<String, Value>) -> CallResult<()> {
        let Some(schema) = &self.input else {
            return Ok(());
        };
        schema.check(&Value::Object(request.clone())).map_err(|e| {
            CallError::Invalid(format!(
                "request rejected by persona {:?} input_schema {e}; nothing was sent to the host",
                self.name
            ))
        })
    }

    /// What is wrong with the completion text against `output_schema`, if anything.
    pub fn output_problem(&self, completion: &str) -> Option<String> {
        let schema = self.output.as_ref()?;
        let parsed: Value = match serde_json::from_str(completion) {
            Ok(v) => v,
            Err(e) => {
                return Some(format!(
                    "persona {:?} output_schema requires the completion to be JSON, but it does \
                     not parse ({e})",
                    self.name
                ));
            }
        };
        schema.check(&parsed).err().map(|e| {
            format!(
                "completion violates persona {:?} output_schema {e}",
                self.name
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn persona(v: Value) -> CallResult<Option<Persona>> {
        let args = json!({ "persona": v });
        Persona::parse(&Obj::root(args.as_object().unwrap()), &Limits::default())
    }

    #[test]
    fn name_is_required_and_non_empty() {
        let e = persona(json!({"name": "  "})).unwrap_err().to_string();
        assert!(
            e.contains("`persona.name`: must be a non-empty string"),
            "{e}"
        );
        let e = persona(json!({})).unwrap_err().to_string();
        assert!(e.contains("`persona.name`: is required"), "{e}");
        let e = persona(json!({"name": "x", "output_schema": {"type": "string"}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`persona.output_schema`"), "{e}");
    }

    #[test]
    fn input_and_output_checks_name_the_persona() {
        let p = persona(json!({
            "name": "pirate",
            "input_schema": {"type": "object", "properties": {"model": {"const": "agent-default"}}},
            "output_schema": {"type": "object", "required": ["arr"]}
        }))
        .unwrap()
        .unwrap();
        let ok = json!({"model": "agent-default"});
        assert!(p.check_input(ok.as_object().unwrap()).is_ok());
        let bad = json!({"model": "gpt"});
        let e = p
            .check_input(bad.as_object().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"pirate\"") && e.contains("at /model"), "{e}");
        assert_eq!(p.output_problem(r#"{"arr": 1}"#), None);
        let e = p.output_problem("ahoy").unwrap();
        assert!(e.contains("\"pirate\"") && e.contains("JSON"), "{e}");
        let e = p.output_problem("{}").unwrap();
        assert!(e.contains("\"pirate\"") && e.contains("at /"), "{e}");
    }
}
