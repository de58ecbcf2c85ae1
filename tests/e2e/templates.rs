//! Real chat templates (tests/data/templates) rendered by the server's renderer and by jinja2
//! set up as transformers' `apply_chat_template` sets it up (tests/data/templates/render.py),
//! for a table of conversations: the two agree byte for byte, or both refuse.

use crate::common::{peer, venv_bin};
use agent_as_model::local::template;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const TEMPLATES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/templates");

/// The tools the conversations offer.
fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city, now.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "A city, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}}])
}

/// An assistant turn that calls the tool (arguments as an object, as templates read them).
fn calling() -> Value {
    json!({"role": "assistant", "content": "", "tool_calls": [{"id": "a1b2c3d4e",
        "type": "function", "function": {"name": "get_weather",
        "arguments": {"city": "Zürich", "unit": "celsius"}}}]})
}

/// An assistant turn that calls the tool twice.
fn two_calls() -> Value {
    let mut turn = calling();
    let call = turn["tool_calls"][0].clone();
    let mut second = call.clone();
    second["id"] = json!("f6g7h8i9j");
    second["function"]["arguments"] = json!({"city": "Bern", "unit": "fahrenheit"});
    turn["tool_calls"] = json!([call, second]);
    turn
}

/// The conversations, by name: messages, tools, add_generation_prompt, template arguments.
fn cases() -> Vec<(&'static str, Value)> {
    let system = json!({"role": "system", "content": "You are terse. Ünïcödé is fine."});
    let user = json!({"role": "user", "content": "Hi! What is 2+2?"});
    let answer = json!({"role": "assistant", "content": "4."});
    let again = json!({"role": "user", "content": "And 3+3?"});
    let weather = json!({"role": "user", "content": "Weather in Zürich?"});
    let result = json!({"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather",
        "content": "{\"temperature\": 21, \"sky\": \"clear\"}"});
    let thought = json!({"role": "assistant", "content": "4.",
        "reasoning_content": "2+2=4, simple arithmetic."});
    // As API clients send a turn that only calls tools.
    let mut silent = calling();
    silent["content"] = Value::Null;
    let case = |messages: Value, tools: Option<Value>, generation: bool, kwargs: Value| {
        let mut context = json!({"bos_token": "<s>", "eos_token": "</s>"});
        let object = context.as_object_mut().unwrap();
        object.extend(kwargs.as_object().unwrap().clone());
        object.insert("messages".into(), messages);
        object.insert("tools".into(), tools.unwrap_or(Value::Null));
        object.insert("documents".into(), Value::Null);
        object.insert("add_generation_prompt".into(), json!(generation));
        context
    };
    let none = json!({});
    vec![
        (
            "system+user",
            case(json!([system, user]), None, true, none.clone()),
        ),
        ("user", case(json!([user]), None, true, none.clone())),
        (
            "turns",
            case(
                json!([system, user, answer, again]),
                None,
                true,
                none.clone(),
            ),
        ),
        (
            "no generation prompt",
            case(json!([user, answer]), None, false, none.clone()),
        ),
        (
            "tools offered",
            case(json!([system, weather]), Some(tools()), true, none.clone()),
        ),
        (
            "tool call and result",
            case(
                json!([system, weather, calling(), result]),
                Some(tools()),
                true,
                none.clone(),
            ),
        ),
        (
            "two calls",
            case(
                json!([weather, two_calls(), result, result]),
                Some(tools()),
                true,
                none.clone(),
            ),
        ),
        (
            "null content beside a call",
            case(
                json!([weather, silent, result]),
                Some(tools()),
                true,
                none.clone(),
            ),
        ),
        (
            "reasoning in history",
            case(json!([user, thought, again]), None, true, none.clone()),
        ),
        (
            "enable_thinking false",
            case(
                json!([system, user]),
                None,
                true,
                json!({"enable_thinking": false}),
            ),
        ),
        (
            "date_string given",
            case(
                json!([system, user]),
                None,
                true,
                json!({"date_string": "26 Jul 2024"}),
            ),
        ),
    ]
}

/// Every template in the folder, by file name.
fn templates() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir(TEMPLATES)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jinja"))
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    found.sort();
    assert!(found.len() >= 16, "templates missing: {found:?}");
    found
}

/// What jinja2 renders for each job, through render.py in one process (in UTC, as the
/// server's `strftime_now` reads the clock).
fn python(jobs: &Value) -> Vec<Result<String, String>> {
    let python = peer("AGENT_AS_MODEL_PYTHON", &venv_bin("python"));
    let script = Path::new(TEMPLATES).join("render.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python} (scripts/peers installs it): {e}"));
    let input = serde_json::to_vec(jobs).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "{python} {}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    results
        .into_iter()
        .map(|r| match (r.get("ok"), r.get("error")) {
            (Some(Value::String(text)), _) => Ok(text.clone()),
            (_, Some(e)) => Err(e.as_str().unwrap_or_default().to_owned()),
            _ => panic!("render.py answered {r}"),
        })
        .collect()
}

/// Where two texts first differ, with some of each around it.
fn difference(ours: &str, theirs: &str) -> String {
    let at = ours
        .char_indices()
        .zip(theirs.chars())
        .find(|((_, a), b)| a != b)
        .map_or(ours.len().min(theirs.len()), |((i, _), _)| i);
    let around = |s: &str| {
        let text: String = s
            .char_indices()
            .filter(|(i, _)| *i + 40 >= at && *i < at + 80)
            .map(|(_, c)| c)
            .collect();
        format!("{text:?}")
    };
    format!(
        "first difference at byte {at}:\n  ours:   {}\n  jinja2: {}",
        around(ours),
        around(theirs)
    )
}

/// Renders the table both ways; the problems, and a line per template of the cases it refused.
fn compare() -> (Vec<String>, Vec<String>) {
    let templates = templates();
    let cases = cases();
    let jobs: Vec<Value> = templates
        .iter()
        .flat_map(|(_, t)| {
            cases
                .iter()
                .map(move |(_, c)| json!({"template": t, "context": c}))
        })
        .collect();
    let theirs = python(&Value::Array(jobs));
    let mut problems = Vec::new();
    let mut refusals = Vec::new();
    let mut theirs = theirs.into_iter();
    for (name, text) in &templates {
        let mut refused = Vec::new();
        for (case, context) in &cases {
            let ours = template::render_context(text, context.clone());
            let theirs = theirs.next().unwrap();
            match (ours, theirs) {
                (Ok(a), Ok(b)) if a == b => {}
                (Ok(a), Ok(b)) => problems.push(format!("{name} / {case}: {}", difference(&a, &b))),
                (Err(_), Err(_)) => refused.push(*case),
                (Ok(_), Err(e)) => {
                    problems.push(format!("{name} / {case}: jinja2 raised ({e}), we rendered"))
                }
                (Err(e), Ok(_)) => {
                    problems.push(format!("{name} / {case}: we failed ({e}), jinja2 rendered"))
                }
            }
        }
        refusals.push(format!("{name}: refuses {refused:?}"));
    }
    (problems, refusals)
}

#[test]
fn real_templates_render_as_transformers_renders_them() {
    // `strftime_now` writes today's date on both sides: at midnight they may read two days.
    let day = || template::render_context("{{ strftime_now('%Y-%m-%d') }}", json!({})).unwrap();
    let before = day();
    let (mut problems, mut refusals) = compare();
    if day() != before {
        (problems, refusals) = compare();
    }
    eprintln!("{}", refusals.join("\n"));
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
