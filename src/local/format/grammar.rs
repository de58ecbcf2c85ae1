//! The grammars (llguidance's Lark, arguments as `%json` schemas) that hold an answer to its
//! family's format while it is decoded: calls of the offered tools with arguments that fit
//! their schemas, written the family's way, or a JSON answer to a response schema; reasoning
//! first where the model reasons. A grammar for calls the model may make (`auto`) begins at
//! the family's trigger ([`Format::trigger`]): the engine starts it when the trigger is written.

use super::{Family, Format, Thinking};
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
        match self.family {
            Family::Hermes | Family::Qwen3Coder | Family::Glm => Some("<tool_call>"),
            Family::MistralList | Family::MistralArgs => Some("[TOOL_CALLS]"),
            Family::DeepSeekR1 | Family::DeepSeekV31 => Some("<｜tool▁calls▁begin｜>"),
            Family::Kimi => Some("<|tool_calls_section_begin|>"),
            Family::CommandR => Some("<|START_ACTION|>"),
            Family::Granite | Family::Phi4 => Some("<|tool_call|>"),
            Family::Harmony => Some(" to=functions."),
            Family::Llama3 | Family::Generic => None,
        }
    }

    /// The start of a call written as a bare JSON object, which starts the grammar of calls
    /// too when the answer begins with it: Qwen2.5's small models write their calls as bare
    /// objects, without the template's tags (llama.cpp's Hermes reader takes them too), and
    /// often in shapes of their own (`{"tool_calls": …}`, a command for a name), which the
    /// grammar turns into a call of an offered tool. An answer that may call and begins with a
    /// JSON object is taken for a call.
    pub fn bare_trigger(&self) -> Option<&'static str> {
        (self.family == Family::Hermes).then_some("{")
    }

    /// The grammar for `goal`, from `start`; special tokens as `marker` writes them.
    pub fn grammar(&self, goal: Goal<'_>, start: Start, marker: Marker<'_>) -> String {
        let mut rules = Vec::new();
        let answer = match goal {
            Goal::Calls(tools) => self.calls(tools, marker, &mut rules),
            Goal::Json(schema) => self.json_answer(schema, marker),
        };
        let reasoning = self.reasoning_rule(start, marker, &mut rules);
        rules.insert(0, format!("start: {reasoning}{answer}"));
        rules.join("\n")
    }

    /// The grammar for calls the model may make, from its trigger on (see [`Format::trigger`]).
    pub fn lazy_grammar(&self, tools: &[ModelTool], marker: Marker<'_>) -> String {
        let mut rules = Vec::new();
        let calls = if self.family == Family::Harmony {
            // Started at ` to=functions.` inside a commentary header.
            let alternatives: Vec<String> = tools
                .iter()
                .map(|t| {
                    format!(
                        "{} {} \"json\" {} %json {}",
                        q(&format!(" to=functions.{} ", t.name)),
                        marker("<|constrain|>"),
                        marker("<|message|>"),
                        args_schema(t)
                    )
                })
                .collect();
            alternatives.join(" | ")
        } else if self.family == Family::Hermes {
            // One call, in its tags or as the bare object small Qwen models write (started at
            // [`Format::bare_trigger`]); then only the end of the turn: as llama-server holds an
            // answer that may call, one call to a turn.
            let _tagged = self.calls(tools, marker, &mut rules);
            format!("call | %json {}", call_objects(tools, "name", "arguments"))
        } else {
            self.calls(tools, marker, &mut rules)
        };
        rules.insert(0, format!("start: {calls}"));
        rules.join("\n")
    }

    /// The rule before the answer: reasoning, closed by the family's marker.
    fn reasoning_rule(&self, start: Start, marker: Marker<'_>, rules: &mut Vec<String>) -> String {
        let Some((open, close)) = self.reasoning_markers() else {
            return String::new();
        };
        if start == Start::Answer {
            return String::new();
        }
        if self.thinking == Thinking::Harmony {
            rules.push(through("thought", close, marker));
            rules.push(format!(
                "reasoning: {} \"analysis\" {} thought {} \"assistant\"",
                marker("<|channel|>"),
                marker("<|message|>"),
                marker("<|start|>")
            ));
            return "reasoning? ".into();
        }
        rules.push(through("thought", close, marker));
        rules.push("GAP: /[ \\t\\n]*/".into());
        match start {
            Start::InReasoning => "thought GAP ".into(),
            _ => {
                rules.push(format!("reasoning: {} thought GAP", marker(open)));
                "reasoning? ".into()
            }
        }
    }

    /// A JSON answer, where the family frames its answer.
    fn json_answer(&self, schema: &Value, marker: Marker<'_>) -> String {
        let json = format!("%json {schema}");
        match self.family {
            Family::Harmony => format!(
                "{} \"final\" {} {json}",
                marker("<|channel|>"),
                marker("<|message|>")
            ),
            _ => json,
        }
    }

    /// One or more calls of `tools` in the family's syntax.
    fn calls(&self, tools: &[ModelTool], marker: Marker<'_>, rules: &mut Vec<String>) -> String {
        match self.family {
            Family::Qwen3Coder => xml_calls(tools, marker, rules, Xml::Coder),
            Family::Glm => xml_calls(tools, marker, rules, Xml::Glm),
            Family::MistralArgs
            | Family::Harmony
            | Family::DeepSeekR1
            | Family::DeepSeekV31
            | Family::Kimi => self.named_calls(tools, marker, rules),
            _ => self.object_calls(tools, marker, rules),
        }
    }

    /// Calls written as JSON objects naming the tool (one, or a list), after the family's
    /// marker.
    fn object_calls(&self, tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
        let objects = |args_key: &str| call_objects(tools, "name", args_key);
        match self.family {
            Family::Hermes => {
                rules.push(format!(
                    "call: {} \"\\n\" %json {} \"\\n\" {}",
                    m("<tool_call>"),
                    objects("arguments"),
                    m("</tool_call>")
                ));
                "call (\"\\n\" call)*".into()
            }
            Family::Llama3 => format!("%json {}", objects("parameters")),
            Family::MistralList => {
                format!("{} %json {}", m("[TOOL_CALLS]"), list(objects("arguments")))
            }
            Family::CommandR => {
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
            Family::Granite => format!(
                "{} %json {}",
                m("<|tool_call|>"),
                list(objects("arguments"))
            ),
            Family::Phi4 => format!(
                "{} %json {} {}",
                m("<|tool_call|>"),
                list(objects("arguments")),
                m("<|/tool_call|>")
            ),
            _ => format!("%json {}", objects("arguments")),
        }
    }

    /// Calls written as the tool's name and then its arguments, each tool an alternative that
    /// pairs its name with its schema.
    fn named_calls(&self, tools: &[ModelTool], m: Marker<'_>, rules: &mut Vec<String>) -> String {
        let one = |t: &ModelTool| -> String {
            let args = args_schema(t);
            let name = q(&t.name);
            match self.family {
                Family::MistralArgs => format!(
                    "{} {name} ({} /[a-zA-Z0-9]{{9}}/)? {} %json {args}",
                    m("[TOOL_CALLS]"),
                    m("[CALL_ID]"),
                    m("[ARGS]")
                ),
                Family::Harmony => format!(
                    "{} {} {} \"json\" {} %json {args}",
                    m("<|channel|>"),
                    q(&format!("commentary to=functions.{} ", t.name)),
                    m("<|constrain|>"),
                    m("<|message|>")
                ),
                Family::DeepSeekR1 => format!(
                    "{} \"function\" {} {name} \"\\n```json\\n\" %json {args} \"\\n```\" {}",
                    m("<｜tool▁call▁begin｜>"),
                    m("<｜tool▁sep｜>"),
                    m("<｜tool▁call▁end｜>")
                ),
                Family::DeepSeekV31 => format!(
                    "{} {name} {} %json {args} {}",
                    m("<｜tool▁call▁begin｜>"),
                    m("<｜tool▁sep｜>"),
                    m("<｜tool▁call▁end｜>")
                ),
                _ => format!(
                    "{} {} /[0-9]+/ {} %json {args} {}",
                    m("<|tool_call_begin|>"),
                    q(&format!("functions.{}:", t.name)),
                    m("<|tool_call_argument_begin|>"),
                    m("<|tool_call_end|>")
                ),
            }
        };
        let alternatives: Vec<String> = tools.iter().map(one).collect();
        rules.push(format!("call: {}", alternatives.join(" | ")));
        match self.family {
            // One call a message: the message ends the answer.
            Family::Harmony => "call".into(),
            Family::DeepSeekR1 | Family::DeepSeekV31 => format!(
                "{} call+ {}",
                m("<｜tool▁calls▁begin｜>"),
                m("<｜tool▁calls▁end｜>")
            ),
            Family::Kimi => format!(
                "{} call+ {}",
                m("<|tool_calls_section_begin|>"),
                m("<|tool_calls_section_end|>")
            ),
            _ => "call+".into(),
        }
    }
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
