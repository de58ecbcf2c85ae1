//! The grammars (llguidance's Lark, arguments as `%json` schemas) that hold an answer to its
//! family's format while it is decoded: calls of the offered tools with arguments that fit
//! their schemas, written the family's way, or a JSON answer to a response schema; reasoning
//! first where the model reasons. A grammar for calls the model may make (`auto`) begins at
//! the family's trigger ([`Format::trigger`]): the engine starts it when the trigger is written.

#[cfg(test)]
use super::Family;
use super::Format;
use crate::call::ModelTool;
use serde_json::{Value, json};

/// How a marker is written in a grammar: the special token it is in this model's vocabulary
/// (`<[id]>`), or its text.
pub type Marker<'a> = &'a dyn Fn(&str) -> String;

/// What the grammar holds the answer to.
#[derive(Debug, Clone, Copy)]
pub enum Goal<'a> {
    /// One or more calls of these tools (the answer is nothing else).
    Calls(&'a [ModelTool]),
    /// JSON that satisfies this schema.
    Json(&'a Value),
}

/// Where the answer begins, as far as reasoning goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The model may reason first.
    MayReason,
    /// The prompt opened the reasoning: the answer begins inside it.
    InReasoning,
    /// No reasoning.
    Answer,
}

/// A text as a Lark string literal.
pub fn literal(text: &str) -> String {
    q(text)
}

fn q(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

impl Format {
    /// The text whose writing starts the grammar of calls the model may make (`auto`), for
    /// families whose calls begin with a marker.
    pub fn trigger(&self) -> Option<&'static str> {
        self.family.format().trigger
    }

    /// The start of a call written as a bare JSON object, which starts the grammar of calls
    /// too when the answer begins with it: Qwen2.5's small models write their calls as bare
    /// objects, without the template's tags (llama.cpp's Hermes reader takes them too), and
    /// often in shapes of their own (`{"tool_calls": …}`, a command for a name), which the
    /// grammar turns into a call of an offered tool. An answer that may call and begins with a
    /// JSON object is taken for a call.
    pub fn bare_trigger(&self) -> Option<&'static str> {
        self.family.format().bare_trigger
    }

    /// The grammar for `goal`, from `start`; special tokens as `marker` writes them.
    pub fn grammar(&self, goal: Goal<'_>, start: Start, marker: Marker<'_>) -> String {
        let family = self.family.format();
        let mut rules = Vec::new();
        let answer = match goal {
            Goal::Calls(tools) => (family.calls)(tools, marker, &mut rules),
            Goal::Json(schema) => (family.json)(format!("%json {schema}"), marker),
        };
        let reasoning = self.reasoning_rule(start, marker, &mut rules);
        rules.insert(0, format!("start: {reasoning}{answer}"));
        rules.join("\n")
    }

    /// The grammar for calls the model may make, from its trigger on (see [`Format::trigger`]).
    pub fn lazy_grammar(&self, tools: &[ModelTool], marker: Marker<'_>) -> String {
        let family = self.family.format();
        let mut rules = Vec::new();
        let calls = family.lazy.unwrap_or(family.calls)(tools, marker, &mut rules);
        rules.insert(0, format!("start: {calls}"));
        rules.join("\n")
    }

    /// The rule before the answer: reasoning, closed by its marker (the rule `thought`, what
    /// the way it is marked writes around it).
    fn reasoning_rule(&self, start: Start, marker: Marker<'_>, rules: &mut Vec<String>) -> String {
        let reasoning = self.thinking.format();
        match reasoning.markers {
            Some((open, close)) if start != Start::Answer => {
                rules.push(through("thought", close, marker));
                (reasoning.grammar)(open, start, marker, rules)
            }
            _ => String::new(),
        }
    }
}

/// Reasoning in gpt-oss's analysis channel, which may come first.
pub(super) fn harmony_reasoning(
    _: &str,
    _: Start,
    marker: Marker<'_>,
    rules: &mut Vec<String>,
) -> String {
    rules.push(format!(
        "reasoning: {} \"analysis\" {} thought {} \"assistant\"",
        marker("<|channel|>"),
        marker("<|message|>"),
        marker("<|start|>")
    ));
    "reasoning? ".into()
}

/// Reasoning after its `open` marker, and the white space after it: first if the model may
/// reason, or from the start (without its open marker) when the prompt opened it.
pub(super) fn marked_reasoning(
    open: &str,
    start: Start,
    marker: Marker<'_>,
    rules: &mut Vec<String>,
) -> String {
    rules.push("GAP: /[ \\t\\n]*/".into());
    match start {
        Start::InReasoning => "thought GAP ".into(),
        _ => {
            rules.push(format!("reasoning: {} thought GAP", marker(open)));
            "reasoning? ".into()
        }
    }
}

/// A JSON answer as it is.
pub(super) fn plain_json(json: String, _: Marker<'_>) -> String {
    json
}

/// A JSON answer in gpt-oss's final channel.
pub(super) fn harmony_json(json: String, m: Marker<'_>) -> String {
    format!("{} \"final\" {} {json}", m("<|channel|>"), m("<|message|>"))
}

/// Hermes's calls: each object on its own line between `<tool_call>` tags.
pub(super) fn hermes(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    rules.push(format!(
        "call: {} \"\\n\" %json {} \"\\n\" {}",
        m("<tool_call>"),
        call_objects(tools, "name", "arguments"),
        m("</tool_call>")
    ));
    "call (\"\\n\" call)*".into()
}

/// One Hermes call, in its tags or as the bare object small Qwen models write (started at
/// [`Format::bare_trigger`]); then only the end of the turn: as llama-server holds an answer
/// that may call, one call to a turn.
pub(super) fn hermes_lazy(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    let _tagged = hermes(tools, m, rules);
    format!("call | %json {}", call_objects(tools, "name", "arguments"))
}

/// One bare call object, its arguments under `arguments`.
pub(super) fn generic(tools: &[ModelTool], _: Marker<'_>, _: &mut Vec<String>) -> String {
    format!("%json {}", call_objects(tools, "name", "arguments"))
}

/// Llama 3's one bare call object, its arguments under `parameters`.
pub(super) fn llama3(tools: &[ModelTool], _: Marker<'_>, _: &mut Vec<String>) -> String {
    format!("%json {}", call_objects(tools, "name", "parameters"))
}

/// Mistral's list of call objects after `[TOOL_CALLS]`.
pub(super) fn mistral_list(tools: &[ModelTool], m: Marker<'_>, _: &mut Vec<String>) -> String {
    listed(tools, m, "[TOOL_CALLS]", None)
}

/// Granite's list of call objects after `<|tool_call|>`.
pub(super) fn granite(tools: &[ModelTool], m: Marker<'_>, _: &mut Vec<String>) -> String {
    listed(tools, m, "<|tool_call|>", None)
}

/// Phi-4's list of call objects between `<|tool_call|>` and `<|/tool_call|>`.
pub(super) fn phi4(tools: &[ModelTool], m: Marker<'_>, _: &mut Vec<String>) -> String {
    listed(tools, m, "<|tool_call|>", Some("<|/tool_call|>"))
}

/// A list of call objects after marker `open`, and before `close` where there is one.
fn listed(tools: &[ModelTool], m: Marker<'_>, open: &str, close: Option<&str>) -> String {
    let objects = list(call_objects(tools, "name", "arguments"));
    match close {
        Some(close) => format!("{} %json {objects} {}", m(open), m(close)),
        None => format!("{} %json {objects}", m(open)),
    }
}

/// Command R's list of actions between `<|START_ACTION|>` and `<|END_ACTION|>`.
pub(super) fn command_r(tools: &[ModelTool], m: Marker<'_>, _: &mut Vec<String>) -> String {
    let items: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({"type": "object", "additionalProperties": false,
                "required": ["tool_call_id", "tool_name", "parameters"],
                "properties": {"tool_call_id": {"type": "string", "pattern": "^[0-9]{1,3}$"},
                    "tool_name": {"const": t.name}, "parameters": closed_schema(t)}})
        })
        .collect();
    format!(
        "{} %json {} {}",
        m("<|START_ACTION|>"),
        list(json!({"anyOf": items})),
        m("<|END_ACTION|>")
    )
}

/// Adds the rule `call` of calls written as the tool's name and then its arguments, each tool
/// an alternative that `one` writes from it, its name as a literal and its argument schema.
fn named(
    tools: &[ModelTool],
    rules: &mut Vec<String>,
    one: impl Fn(&ModelTool, String, String) -> String,
) {
    let alternatives: Vec<String> = tools
        .iter()
        .map(|t| one(t, q(&t.name), args_schema(t)))
        .collect();
    rules.push(format!("call: {}", alternatives.join(" | ")));
}

/// Calls between a section's `open` and `close` markers.
fn section(m: Marker<'_>, open: &str, close: &str) -> String {
    format!("{} call+ {}", m(open), m(close))
}

/// Mistral's `[TOOL_CALLS]NAME[ARGS]{…}` calls, with an optional `[CALL_ID]`.
pub(super) fn mistral_args(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    named(tools, rules, |_, name, args| {
        format!(
            "{} {name} ({} /[a-zA-Z0-9]{{9}}/)? {} %json {args}",
            m("[TOOL_CALLS]"),
            m("[CALL_ID]"),
            m("[ARGS]")
        )
    });
    "call+".into()
}

/// gpt-oss's call in the commentary channel: one a message, and the message ends the answer.
pub(super) fn harmony(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    named(tools, rules, |t, _, _| {
        format!("{} {}", m("<|channel|>"), harmony_call(t, m, "commentary "))
    });
    "call".into()
}

/// gpt-oss's call from its trigger ` to=functions.` on, inside a commentary header.
pub(super) fn harmony_lazy(tools: &[ModelTool], m: Marker<'_>, _: &mut Vec<String>) -> String {
    let alternatives: Vec<String> = tools.iter().map(|t| harmony_call(t, m, " ")).collect();
    alternatives.join(" | ")
}

/// A harmony call of `tool` from the header's `lead` on: its recipient, the JSON constraint
/// and the arguments.
fn harmony_call(tool: &ModelTool, m: Marker<'_>, lead: &str) -> String {
    format!(
        "{} {} \"json\" {} %json {}",
        q(&format!("{lead}to=functions.{} ", tool.name)),
        m("<|constrain|>"),
        m("<|message|>"),
        args_schema(tool)
    )
}

/// DeepSeek R1's calls: `function`, the name, and the arguments fenced as JSON.
pub(super) fn deepseek_r1(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    deepseek(tools, m, rules, true)
}

/// DeepSeek V3.1's calls: the name and the arguments.
pub(super) fn deepseek_v31(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    deepseek(tools, m, rules, false)
}

/// DeepSeek's calls in their section, each between its markers: in R1's spelling where
/// `fenced`, else in V3.1's.
fn deepseek(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>, fenced: bool) -> String {
    named(tools, rules, |_, name, args| {
        let sep = m("<｜tool▁sep｜>");
        let call = if fenced {
            format!("\"function\" {sep} {name} \"\\n```json\\n\" %json {args} \"\\n```\"")
        } else {
            format!("{name} {sep} %json {args}")
        };
        format!(
            "{} {call} {}",
            m("<｜tool▁call▁begin｜>"),
            m("<｜tool▁call▁end｜>")
        )
    });
    section(m, "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
}

/// Kimi K2's calls: `functions.NAME:INDEX` and the arguments.
pub(super) fn kimi(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    named(tools, rules, |t, _, args| {
        format!(
            "{} {} /[0-9]+/ {} %json {args} {}",
            m("<|tool_call_begin|>"),
            q(&format!("functions.{}:", t.name)),
            m("<|tool_call_argument_begin|>"),
            m("<|tool_call_end|>")
        )
    });
    section(
        m,
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
    )
}

/// Qwen3-Coder's XML calls.
pub(super) fn coder(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    xml_calls(tools, m, rules, Xml::Coder)
}

/// GLM's XML-like calls.
pub(super) fn glm(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
    xml_calls(tools, m, rules, Xml::Glm)
}

/// A tool's argument schema, closed (see [`crate::local::closed`]).
fn closed_schema(tool: &ModelTool) -> Value {
    crate::local::closed(&Value::Object(tool.schema.clone()))
}

fn args_schema(tool: &ModelTool) -> String {
    closed_schema(tool).to_string()
}

/// The call objects `{name_key: NAME, args_key: {…}}` of any of the tools.
fn call_objects(tools: &[ModelTool], name_key: &str, args_key: &str) -> Value {
    let calls: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({"type": "object", "additionalProperties": false,
                "required": [name_key, args_key],
                "properties": {name_key: {"const": t.name}, args_key: closed_schema(t)}})
        })
        .collect();
    json!({"anyOf": calls})
}

/// A non-empty list of `item`s.
fn list(item: Value) -> Value {
    json!({"type": "array", "minItems": 1, "items": item})
}

/// The XML-like families.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Xml {
    Coder,
    Glm,
}

/// Calls whose parameters are written one by one as raw text: strings as they are, other
/// values as JSON; the required parameters in the schema's order, the others optional.
fn xml_calls(tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>, xml: Xml) -> String {
    let mut alternatives = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let schema = closed_schema(tool);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = schema.get("properties").and_then(Value::as_object);
        let mut params = Vec::new();
        for (j, (key, prop)) in props.into_iter().flatten().enumerate() {
            let rule = format!("p{i}_{j}");
            let is_string = prop.get("type").and_then(Value::as_str) == Some("string");
            let (open, close) = match xml {
                Xml::Coder => (format!("<parameter={key}>\n"), "\n</parameter>\n"),
                Xml::Glm => (
                    format!("<arg_key>{key}</arg_key>\n<arg_value>"),
                    "</arg_value>\n",
                ),
            };
            if is_string {
                rules.push(format!("{rule}_v[lazy]: /(.|\\n)*{}/", regex_escape(close)));
                rules.push(format!("{rule}: {} {rule}_v", q(&open)));
            } else {
                rules.push(format!("{rule}: {} %json {prop} {}", q(&open), q(close)));
            }
            let optional = if required.contains(&key.as_str()) {
                ""
            } else {
                "?"
            };
            params.push(format!("{rule}{optional}"));
        }
        let params = params.join(" ");
        alternatives.push(match xml {
            Xml::Coder => format!(
                "{} {} {params} {}",
                m("<tool_call>"),
                q(&format!("\n<function={}>\n", tool.name)),
                q("</function>\n</tool_call>")
            ),
            Xml::Glm => format!(
                "{} {} {params} {}",
                m("<tool_call>"),
                q(&format!("{}\n", tool.name)),
                m("</tool_call>")
            ),
        });
    }
    rules.push(format!("call: {}", alternatives.join(" | ")));
    "call (\"\\n\" call)*".into()
}

/// A rule `name` of any text through the first `close`: a special token after free text, or
/// text that ends at the first `close` written.
fn through(name: &str, close: &str, marker: Marker<'_>) -> String {
    let closing = marker(close);
    if closing.starts_with("<[") {
        format!("{name}: /(.|\\n)*/ {closing}")
    } else {
        format!("{name}[lazy]: /(.|\\n)*{}/", regex_escape(close))
    }
}

/// `text` as a regular expression that matches it alone.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if "\\.+*?()|[]{}^$#&-~/\"".contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::format::Thinking;
    use llguidance::api::TopLevelGrammar;
    use llguidance::toktrie::ApproximateTokEnv;
    use llguidance::{Matcher, ParserFactory};

    fn tools() -> Vec<ModelTool> {
        let schema = |v: Value| v.as_object().cloned().unwrap_or_default();
        vec![
            ModelTool {
                name: "get_weather".into(),
                description: None,
                schema: schema(json!({"type": "object", "required": ["city"],
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}})),
            },
            ModelTool {
                name: "ping".into(),
                description: None,
                schema: schema(json!({"type": "object", "properties": {}})),
            },
        ]
    }

    /// Whether the grammar admits `tokens` whole, in a byte-level vocabulary whose special
    /// tokens include `<|tool|>` (256) and `<|/tool|>` (257).
    fn admits_tokens(grammar: &str, tokens: &[u32]) -> bool {
        let env = ApproximateTokEnv::single_byte_env();
        let mut factory = ParserFactory::new_simple(&env).unwrap();
        factory.quiet();
        let parser = factory
            .create_parser(TopLevelGrammar::from_lark(grammar.to_owned()))
            .unwrap_or_else(|e| panic!("{e}\n{grammar}"));
        let mut matcher = Matcher::new(Ok(parser));
        matcher.consume_tokens(tokens).is_ok() && matcher.is_accepting().unwrap_or(false)
    }

    /// Whether the grammar admits `text` whole, a token per byte.
    fn admits(grammar: &str, text: &str) -> bool {
        let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
        admits_tokens(grammar, &tokens)
    }

    fn text(m: &str) -> String {
        q(m)
    }

    fn f(family: Family, thinking: Thinking) -> Format {
        Format {
            family,
            thinking,
            ..Format::default()
        }
    }

    #[test]
    fn each_familys_calls_are_its_grammar() {
        let tools = tools();
        let cases = [
            (
                f(Family::Hermes, Thinking::None),
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            ),
            (
                f(Family::Llama3, Thinking::None),
                "{\"name\": \"ping\", \"parameters\": {}}",
            ),
            (
                f(Family::Generic, Thinking::None),
                "{\"name\": \"ping\", \"arguments\": {}}",
            ),
            (
                f(Family::MistralList, Thinking::None),
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
            ),
            (
                f(Family::MistralArgs, Thinking::None),
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]ping[CALL_ID]a1b2c3d4e[ARGS]{}",
            ),
            (
                f(Family::Harmony, Thinking::Harmony),
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
            ),
            (
                f(Family::DeepSeekR1, Thinking::None),
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            (
                f(Family::DeepSeekV31, Thinking::None),
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>ping<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            (
                f(Family::Kimi, Thinking::None),
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.ping:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            ),
            (
                f(Family::CommandR, Thinking::None),
                "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"ping\", \"parameters\": {}}]<|END_ACTION|>",
            ),
            (
                f(Family::Granite, Thinking::None),
                "<|tool_call|>[{\"name\": \"ping\", \"arguments\": {}}]",
            ),
            (
                f(Family::Phi4, Thinking::None),
                "<|tool_call|>[{\"name\": \"ping\", \"arguments\": {}}]<|/tool_call|>",
            ),
            (
                f(Family::Qwen3Coder, Thinking::None),
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis, <b>France</b>\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            ),
            (
                f(Family::Glm, Thinking::None),
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
            ),
        ];
        for (format, answer) in cases {
            let g = format.grammar(Goal::Calls(&tools), Start::Answer, &text);
            assert!(
                admits(&g, answer),
                "{:?} refuses {answer:?}\n{g}",
                format.family
            );
            // A tool not offered, or arguments that break the schema, are refused.
            let wrong = answer
                .replace("get_weather", "delete_all")
                .replace("ping", "delete_all");
            assert!(!admits(&g, &wrong), "{:?} admits {wrong:?}", format.family);
            assert!(!admits(&g, "Sure, here it is."), "{:?}", format.family);
        }
        let hermes =
            f(Family::Hermes, Thinking::None).grammar(Goal::Calls(&tools), Start::Answer, &text);
        assert!(!admits(
            &hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": 1}}\n</tool_call>"
        ));
    }

    #[test]
    fn reasoning_comes_before_the_answer_a_grammar_holds() {
        let tools = tools();
        let qwen3 = f(Family::Hermes, Thinking::Think);
        let call = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
        let g = qwen3.grammar(Goal::Calls(&tools), Start::MayReason, &text);
        assert!(
            admits(&g, &format!("<think>\nA ping, < or >.\n</think>\n\n{call}")),
            "{g}"
        );
        assert!(admits(&g, call));
        let g = qwen3.grammar(Goal::Calls(&tools), Start::InReasoning, &text);
        assert!(
            admits(&g, &format!("Just ping.\n</think>\n\n{call}")),
            "{g}"
        );
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let g = qwen3.grammar(Goal::Json(&schema), Start::MayReason, &text);
        assert!(admits(&g, "<think>Four.</think>\n{\"n\": 4}"), "{g}");
        assert!(!admits(&g, "<think>Four.</think>\n{\"n\": \"4\"}"));
        let oss = f(Family::Harmony, Thinking::Harmony);
        let g = oss.grammar(Goal::Json(&schema), Start::MayReason, &text);
        assert!(
            admits(
                &g,
                "<|channel|>analysis<|message|>Four.<|end|><|start|>assistant<|channel|>final<|message|>{\"n\": 4}"
            ),
            "{g}"
        );
        // A closing marker that is a special token is named by its id.
        let magistral = f(Family::MistralArgs, Thinking::Mistral);
        let special = |m: &str| {
            if m == "[/THINK]" {
                "<[257]>".to_owned()
            } else {
                q(m)
            }
        };
        let g = magistral.grammar(Goal::Json(&schema), Start::MayReason, &special);
        let bytes = |t: &str| t.bytes().map(u32::from).collect::<Vec<_>>();
        let tokens = [bytes("[THINK]Four."), vec![257], bytes("{\"n\": 4}")].concat();
        assert!(admits_tokens(&g, &tokens), "{g}");
        assert!(!admits(&g, "[THINK]Four.[/THINK]{\"n\": 4}"), "{g}");
    }

    #[test]
    fn a_lazy_grammar_starts_at_the_trigger() {
        let tools = tools();
        for family in [
            Family::Hermes,
            Family::MistralArgs,
            Family::Qwen3Coder,
            Family::Harmony,
        ] {
            let format = f(family, Thinking::None);
            let g = format.lazy_grammar(&tools, &text);
            let call = match family {
                Family::Hermes => {
                    "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"
                }
                Family::MistralArgs => "[TOOL_CALLS]ping[ARGS]{}",
                Family::Qwen3Coder => "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
                _ => " to=functions.ping <|constrain|>json<|message|>{}",
            };
            assert!(call.starts_with(format.trigger().unwrap_or("")));
            assert!(admits(&g, call), "{family:?} {g}");
        }
    }

    #[test]
    fn a_hermes_answer_that_calls_makes_one_call_tagged_or_bare() {
        let format = f(Family::Hermes, Thinking::None);
        let g = format.lazy_grammar(&tools(), &text);
        let tagged = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
        let bare = "{\"name\": \"ping\", \"arguments\": {}}";
        assert!(bare.starts_with(format.bare_trigger().unwrap_or("-")));
        assert!(admits(&g, tagged), "{g}");
        assert!(admits(&g, bare), "{g}");
        assert!(!admits(&g, &format!("{tagged}\n{tagged}")), "{g}");
        assert!(!admits(&g, &format!("{bare}\n{bare}")), "{g}");
        assert!(
            !admits(&g, "{\"name\": \"cat hello.txt\", \"arguments\": {}}"),
            "{g}"
        );
        assert_eq!(f(Family::Llama3, Thinking::None).bare_trigger(), None);
    }
}
