//! The Responses API's tool registry as Codex sends it, made plain for models that know only
//! function tools: `namespace` groups and freeform `custom` tools (top-level, or in an
//! `additional_tools` input item), and the history that carries them (`custom_tool_call`,
//! `custom_tool_call_output`, a `function_call` with its `namespace`, `agent_message`).
//!
//! A namespaced function keeps its bare name, unless another declared tool has it too: then it
//! is `NAMESPACE__NAME` (the implicit `functions` namespace keeps the bare name); a model reads
//! the bare names as it was trained to. A custom tool becomes a function whose one argument, `input`,
//! is the raw text, its grammar (`lark` or `regex`) told in its description. [`Names`] keeps the
//! way back, so that a call comes back as the client sent the tool: a namespaced function as a
//! `function_call` with its bare `name` and its `namespace`, a custom tool as a
//! `custom_tool_call` with its raw `input`.

use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The namespace whose functions keep their bare names.
const IMPLICIT: &str = "functions";

/// What joins a namespace and a name into one function name.
const JOIN: &str = "__";

/// A tool as the client declared it, by the function name the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// Its own name.
    pub name: String,
    /// The namespace it was declared in.
    pub namespace: Option<String>,
    /// A freeform tool: its call carries raw text.
    pub custom: bool,
}

/// The tools whose calls go back under another form than the model's function call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    by_function: HashMap<String, Declared>,
    /// The function name of each tool declared in a namespace or as a custom tool.
    by_declared: HashMap<(Option<String>, String), String>,
}

impl Names {
    /// How the tool the model calls as `function` was declared; `None` for a plain function.
    pub fn declared(&self, function: &str) -> Option<&Declared> {
        self.by_function.get(function)
    }

    /// The function name the model sees for the tool `name` of `namespace`: as declared in this
    /// request, else the namespace joined to the name.
    fn function_for(&self, namespace: Option<&str>, name: &str) -> String {
        let key = (namespace.map(str::to_owned), name.to_owned());
        if let Some(function) = self.by_declared.get(&key) {
            return function.clone();
        }
        function_name(namespace, name)
    }

    fn add(&mut self, function: String, declared: Declared) {
        self.by_declared.insert(
            (declared.namespace.clone(), declared.name.clone()),
            function.clone(),
        );
        self.by_function.insert(function, declared);
    }

    pub fn is_empty(&self) -> bool {
        self.by_function.is_empty()
    }
}

/// The function name for `name` in `namespace` when the bare name is not enough (another tool
/// has it too, or the tool is not declared in the request).
pub fn function_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        None | Some(IMPLICIT) => name.to_owned(),
        Some(namespace) => format!("{namespace}{JOIN}{name}"),
    }
}

/// A custom tool's text input from the arguments the model gave its function: `input`, or the
/// arguments as written when the model gave something else.
pub fn custom_input(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => match o.get("input") {
            Some(Value::String(input)) => input.clone(),
            _ => arguments.to_owned(),
        },
        _ => arguments.to_owned(),
    }
}

/// Makes a Responses request body's tools and history plain (see the module's notes): the
/// tools of `additional_tools` items join `tools`; hosted tools are left out, each said in
/// `warnings`. Returns the way back.
pub fn flatten(body: &mut Map<String, Value>, warnings: &mut Vec<String>) -> Names {
    let mut names = Names::default();
    let mut declared: Vec<Value> = match body.remove("tools") {
        Some(Value::Array(tools)) => tools,
        Some(other) => {
            // Not a list: the parser names it.
            body.insert("tools".into(), other);
            Vec::new()
        }
        None => Vec::new(),
    };
    let mut history = Vec::new();
    if let Some(Value::Array(items)) = body.get_mut("input") {
        for item in items.drain(..) {
            if item.get("type").and_then(Value::as_str) == Some("additional_tools") {
                if let Some(Value::Array(tools)) = item.get("tools") {
                    declared.extend(tools.iter().cloned());
                }
                continue;
            }
            history.push(item);
        }
    }
    // A tool keeps its bare name unless another declared tool has it too.
    let mut counts: HashMap<String, usize> = HashMap::new();
    for tool in &declared {
        count_names(tool, &mut counts);
    }
    let mut tools = Vec::with_capacity(declared.len());
    for tool in declared {
        plain_tools(tool, None, &counts, &mut tools, &mut names, warnings);
    }
    if let Some(Value::Array(items)) = body.get_mut("input") {
        items.extend(history.into_iter().map(|item| history_item(item, &names)));
    }
    if tools.is_empty() {
        if !body.contains_key("tools") {
            body.remove("tool_choice");
        }
    } else {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = body.get_mut("tool_choice") {
            plain_choice(choice, &names);
        }
    }
    names
}

/// Counts the names of the function and custom tools `tool` declares.
fn count_names(tool: &Value, counts: &mut HashMap<String, usize>) {
    match tool.get("type").and_then(Value::as_str) {
        Some("namespace") => {
            if let Some(Value::Array(members)) = tool.get("tools") {
                for member in members {
                    count_names(member, counts);
                }
            }
        }
        Some("function" | "custom") | None => {
            if let Some(name) = tool.get("name").and_then(Value::as_str) {
                *counts.entry(name.to_owned()).or_default() += 1;
            }
        }
        Some(_) => {}
    }
}

/// The function name the model sees for `name` declared in `namespace`: the bare name when no
/// other tool has it.
fn chosen_name(counts: &HashMap<String, usize>, namespace: Option<&str>, name: &str) -> String {
    if counts.get(name).copied().unwrap_or(0) <= 1 {
        name.to_owned()
    } else {
        function_name(namespace, name)
    }
}

/// `tool` (declared in `namespace`) as the function tools the model sees, added to `tools`.
fn plain_tools(
    tool: Value,
    namespace: Option<&str>,
    counts: &HashMap<String, usize>,
    tools: &mut Vec<Value>,
    names: &mut Names,
    warnings: &mut Vec<String>,
) {
    let kind = tool.get("type").and_then(Value::as_str).map(str::to_owned);
    match kind.as_deref() {
        Some("function") | None => {
            let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) else {
                // Without a name: the parser names what is wrong.
                tools.push(tool);
                return;
            };
            tools.push(match namespace {
                Some(namespace) => namespaced_function(tool, name, namespace, counts, names),
                None => tool,
            });
        }
        Some("custom") => {
            let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) else {
                tools.push(tool);
                return;
            };
            let function = chosen_name(counts, namespace, &name);
            tools.push(custom_as_function(&tool, &function, warnings));
            names.add(
                function,
                Declared {
                    name,
                    namespace: namespace.map(str::to_owned),
                    custom: true,
                },
            );
        }
        Some("namespace") => {
            let Some(inner) = tool.get("name").and_then(Value::as_str) else {
                warnings.push("a namespace without a name was left out".into());
                return;
            };
            if let Some(Value::Array(members)) = tool.get("tools") {
                for member in members {
                    plain_tools(member.clone(), Some(inner), counts, tools, names, warnings);
                }
            }
        }
        Some(other) => warnings.push(format!(
            "the hosted tool {:?} was left out: no backend of this server runs it",
            crate::error::clip(other)
        )),
    }
}

/// A function tool declared in `namespace` as the model sees it: renamed (its own name where
/// no other tool has it), the name it was declared with kept in `names`.
fn namespaced_function(
    mut tool: Value,
    name: String,
    namespace: &str,
    counts: &HashMap<String, usize>,
    names: &mut Names,
) -> Value {
    let function = chosen_name(counts, Some(namespace), &name);
    if let Some(o) = tool.as_object_mut() {
        o.insert("name".into(), json!(function));
        o.remove("namespace");
    }
    names.add(
        function,
        Declared {
            name,
            namespace: Some(namespace.to_owned()),
            custom: false,
        },
    );
    tool
}

/// A custom tool as a function of one string argument, `input`, its format said in its
/// description and, when its grammar is a regular expression or a regular Lark grammar, held
/// by the `pattern` of `input` (a grammar this server cannot hold is said in `warnings`).
fn custom_as_function(tool: &Value, function: &str, warnings: &mut Vec<String>) -> Value {
    let mut description = tool
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !description.is_empty() {
        description.push_str("\n\n");
    }
    description.push_str(
        "This tool takes free-form text: give the whole text as the string argument `input`.",
    );
    let mut input = json!({"type": "string", "description": "The tool's input text."});
    if let Some((syntax, definition)) = grammar(tool) {
        description.push_str(&format!(
            " The text must match this {syntax} grammar:\n{definition}"
        ));
        match pattern(syntax, definition) {
            Ok(pattern) => {
                if let Some(o) = input.as_object_mut() {
                    o.insert("pattern".into(), json!(pattern));
                }
            }
            Err(why) => warnings.push(format!(
                "the {syntax} grammar of the custom tool {:?} is told to the model but not \
                 enforced: {why}",
                crate::error::clip(function)
            )),
        }
    }
    json!({
        "type": "function",
        "name": function,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {"input": input},
            "required": ["input"],
            "additionalProperties": false,
        },
    })
}

/// A custom tool's grammar: its syntax (`lark` when not said) and its definition.
fn grammar(tool: &Value) -> Option<(&str, &str)> {
    let format = tool.get("format")?;
    if format.get("type").and_then(Value::as_str) != Some("grammar") {
        return None;
    }
    let syntax = format
        .get("syntax")
        .and_then(Value::as_str)
        .unwrap_or("lark");
    Some((syntax, format.get("definition")?.as_str()?))
}

/// Why a custom tool's grammar is not enforced.
#[derive(Debug, thiserror::Error)]
enum Unenforced {
    #[error(transparent)]
    Lark(#[from] super::lark::Unsupported),
    /// The grammar's syntax (clipped) is neither `lark` nor `regex`.
    #[error("the syntax {0:?} is not known")]
    Syntax(String),
    /// The expression does not parse: the first line of the parser's message.
    #[error("the expression does not parse ({0})")]
    Regex(String),
}

/// The JSON Schema `pattern` the whole text must match under a `syntax` grammar, or why there
/// is none.
fn pattern(syntax: &str, definition: &str) -> Result<String, Unenforced> {
    let regex = match syntax {
        "regex" => definition.to_owned(),
        "lark" => super::lark::to_regex(definition)?,
        other => return Err(Unenforced::Syntax(crate::error::clip(other).into_owned())),
    };
    let pattern = format!("^(?:{regex})$");
    regex_syntax::Parser::new()
        .parse(&pattern)
        .map_err(|e| Unenforced::Regex(first_line(&e.to_string()).to_owned()))?;
    Ok(pattern)
}

fn first_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text)
}

/// A named `tool_choice` of a custom or namespaced tool, as the function the model sees.
fn plain_choice(choice: &mut Value, names: &Names) {
    let Some(o) = choice.as_object_mut() else {
        return;
    };
    let kind = o.get("type").and_then(Value::as_str).map(str::to_owned);
    let namespace = o
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(name) = o.get("name").and_then(Value::as_str).map(str::to_owned) else {
        return;
    };
    if kind.as_deref() == Some("custom") || namespace.is_some() {
        let function = names.function_for(namespace.as_deref(), &name);
        *choice = json!({"type": "function", "name": function});
    }
}

/// A history item as the model's function calls and messages carry it.
fn history_item(item: Value, names: &Names) -> Value {
    let Value::Object(mut o) = item else {
        return item;
    };
    let kind = o.get("type").and_then(Value::as_str).map(str::to_owned);
    let namespace = o
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let name = o.get("name").and_then(Value::as_str).map(str::to_owned);
    match kind.as_deref() {
        Some("custom_tool_call") => {
            let input = match o.get("input") {
                Some(Value::String(input)) => input.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let mut call = json!({"type": "function_call",
                                  "arguments": json!({"input": input}).to_string()});
            if let (Some(c), Some(id)) = (call.as_object_mut(), o.remove("call_id")) {
                c.insert("call_id".into(), id);
            }
            if let (Some(c), Some(name)) = (call.as_object_mut(), name) {
                c.insert(
                    "name".into(),
                    json!(names.function_for(namespace.as_deref(), &name)),
                );
            }
            call
        }
        Some("custom_tool_call_output") => {
            o.insert("type".into(), json!("function_call_output"));
            Value::Object(o)
        }
        Some("function_call") => {
            if let (Some(namespace), Some(name)) = (namespace, name) {
                o.insert(
                    "name".into(),
                    json!(names.function_for(Some(&namespace), &name)),
                );
            }
            o.remove("namespace");
            Value::Object(o)
        }
        Some("agent_message") => {
            let content = o
                .remove("content")
                .or_else(|| o.remove("text"))
                .or_else(|| o.remove("message"))
                .unwrap_or_else(|| json!(""));
            json!({"type": "message", "role": "assistant", "content": content})
        }
        _ => Value::Object(o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codex_body() -> Map<String, Value> {
        let body = json!({
            "model": "m",
            "tools": [{"type": "namespace", "name": "multi_agent_v1", "tools": [
                {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}]},
                {"type": "web_search"}],
            "tool_choice": {"type": "custom", "name": "apply_patch"},
            "input": [
                {"type": "additional_tools", "role": "developer", "tools": [
                    {"type": "namespace", "name": "functions", "tools": [
                        {"type": "custom", "name": "exec", "description": "Run a command.",
                         "format": {"type": "grammar", "syntax": "lark",
                                    "definition": "start: /.+/"}},
                        {"type": "function", "name": "wait", "parameters": {"type": "object"}}]}]},
                {"type": "custom", "name": "apply_patch"},
                {"role": "user", "content": "Fix it."},
                {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": "ls",
                 "namespace": "functions"},
                {"type": "custom_tool_call_output", "call_id": "c1",
                 "output": [{"type": "input_text", "text": "a.txt"}]},
                {"type": "function_call", "call_id": "c2", "name": "spawn_agent",
                 "namespace": "multi_agent_v1", "arguments": "{}"},
                {"type": "agent_message", "content": [{"type": "output_text", "text": "Done."}]},
            ],
        });
        body.as_object().unwrap().clone()
    }

    #[test]
    fn codex_tools_and_history_become_functions_and_come_back_as_declared() {
        let mut body = codex_body();
        // A stray custom tool in `input` is an item of an unknown type: left for the parser.
        let mut warnings = Vec::new();
        let names = flatten(&mut body, &mut warnings);
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["spawn_agent", "exec", "wait"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let exec = &body["tools"][1];
        assert_eq!(exec["type"], "function");
        assert_eq!(exec["parameters"]["required"], json!(["input"]));
        assert!(
            exec["description"]
                .as_str()
                .unwrap()
                .contains("start: /.+/")
        );
        assert_eq!(
            names.declared("exec"),
            Some(&Declared {
                name: "exec".into(),
                namespace: Some("functions".into()),
                custom: true
            })
        );
        assert_eq!(
            names.declared("spawn_agent").unwrap().namespace.as_deref(),
            Some("multi_agent_v1")
        );
        assert!(!names.declared("wait").unwrap().custom);
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "name": "apply_patch"})
        );
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[0]["type"], "custom");
        assert_eq!(input[2]["type"], "function_call");
        assert_eq!(input[2]["name"], "exec");
        assert_eq!(input[2]["arguments"], json!({"input": "ls"}).to_string());
        assert_eq!(input[3]["type"], "function_call_output");
        assert_eq!(input[4]["name"], "spawn_agent");
        assert!(input[4].get("namespace").is_none());
        assert_eq!(input[5]["role"], "assistant");
        assert_eq!(custom_input(r#"{"input": "echo hi"}"#), "echo hi");
        // Two tools of one name: each under its namespace.
        let mut body = json!({"input": "x", "tools": [
            {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "wait"}]},
            {"type": "namespace", "name": "b", "tools": [{"type": "function", "name": "wait"}]},
            {"type": "namespace", "name": "functions",
             "tools": [{"type": "function", "name": "wait"}]}]})
        .as_object()
        .unwrap()
        .clone();
        let names = flatten(&mut body, &mut Vec::new());
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["a__wait", "b__wait", "wait"]);
        assert_eq!(names.declared("b__wait").unwrap().name, "wait");
        assert_eq!(custom_input("not json"), "not json");
    }

    #[test]
    fn a_custom_tools_grammar_is_the_pattern_of_its_input() {
        let tool = |syntax: &str, definition: &str| {
            json!({"model": "m", "input": "x", "tools": [{"type": "custom", "name": "apply_patch",
                "format": {"type": "grammar", "syntax": syntax, "definition": definition}}]})
            .as_object()
            .unwrap()
            .clone()
        };
        let mut body = tool("lark", crate::shapes::lark::APPLY_PATCH);
        let mut warnings = Vec::new();
        flatten(&mut body, &mut warnings);
        assert!(warnings.is_empty(), "{warnings:?}");
        let parameters = &body["tools"][0]["parameters"];
        // The validator every backend's answer goes through takes the pattern.
        let schema = crate::contract::schema::compile(
            parameters,
            "tools[0].parameters",
            &crate::limits::Limits::default(),
        )
        .unwrap();
        let patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n";
        assert!(schema.check(&json!({"input": patch})).is_ok());
        assert!(schema.check(&json!({"input": "add hi to a.txt"})).is_err());
        let mut body = tool("regex", "[a-z]+ [0-9]{1,3}");
        flatten(&mut body, &mut warnings);
        let schema = crate::contract::schema::compile(
            &body["tools"][0]["parameters"],
            "tools[0].parameters",
            &crate::limits::Limits::default(),
        )
        .unwrap();
        assert!(schema.check(&json!({"input": "abc 12"})).is_ok());
        assert!(schema.check(&json!({"input": "abc 1234"})).is_err());
        // A grammar no regular expression holds is told, not enforced, and said.
        let mut body = tool("lark", "start: \"(\" start \")\" | \"x\"");
        flatten(&mut body, &mut warnings);
        assert!(
            body["tools"][0]["parameters"]["properties"]["input"]
                .get("pattern")
                .is_none()
        );
        assert!(warnings[0].contains("recursive"), "{warnings:?}");
        assert!(
            body["tools"][0]["description"]
                .as_str()
                .unwrap()
                .contains("start: \"(\"")
        );
    }
}
