//! Each family's format told from real templates, and its answers read whole and in pieces.

use super::*;
use serde_json::json;

fn tool(name: &str, schema: Value) -> ModelTool {
    ModelTool {
        name: name.into(),
        description: None,
        schema: schema.as_object().cloned().unwrap_or_default(),
    }
}

fn tools() -> Tools {
    Tools::new(&[
        tool(
            "get_weather",
            json!({"type": "object", "properties": {"city": {"type": "string"},
                   "days": {"type": "integer"}}}),
        ),
        tool(
            "write",
            json!({"type": "object", "properties": {"path": {"type": "string"},
                   "text": {"type": "string"}, "lines": {"type": "array"}}}),
        ),
    ])
}

fn format(family: Family, thinking: Thinking) -> Format {
    Format {
        family,
        thinking,
        switches: Switches::default(),
    }
}

/// The pieces with neighbours of one kind joined (how they are split varies with the feed).
fn folded(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for piece in pieces {
        match (out.last_mut(), piece) {
            (Some(Piece::Text(a)), Piece::Text(b))
            | (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
            (
                Some(Piece::CallArgs {
                    index: i,
                    fragment: a,
                }),
                Piece::CallArgs {
                    index: j,
                    fragment: b,
                },
            ) if *i == j => a.push_str(&b),
            (_, piece) => out.push(piece),
        }
    }
    out
}

/// Reads `text` whole, cut in two at every character boundary, and a character at a time:
/// every feed tells the same and reads the same answer, and what is told agrees with it.
fn read(format: Format, in_reasoning: bool, text: &str) -> Answer {
    let parser = || Parser::new(format, Some(tools()), "c", in_reasoning);
    let mut whole = parser();
    let told = folded(whole.feed(text));
    let answer = whole.finish();
    let mut cuts: Vec<Vec<&str>> = text
        .char_indices()
        .map(|(i, _)| vec![&text[..i], &text[i..]])
        .collect();
    cuts.push(
        text.char_indices()
            .map(|(i, c)| &text[i..i + c.len_utf8()])
            .collect(),
    );
    for pieces in cuts {
        let mut p = parser();
        let mut got = Vec::new();
        for piece in &pieces {
            got.extend(p.feed(piece));
        }
        assert_eq!(folded(got), told, "fed as {pieces:?}");
        assert_eq!(p.finish(), answer, "fed as {pieces:?}");
    }
    // What was told is the answer: its text (up to what was held at the end), reasoning and
    // calls, with arguments that join into each call's input.
    let mut args: HashMap<usize, String> = HashMap::new();
    for piece in &told {
        match piece {
            Piece::Text(t) => assert!(answer.text.contains(t.as_str()), "{t:?}"),
            Piece::Reasoning(r) => assert!(answer.reasoning.contains(r.as_str()), "{r:?}"),
            Piece::CallStart { index, id, name } => {
                let call = answer.calls.iter().find(|c| &c.id == id);
                assert_eq!(
                    call.map(|c| c.name.as_str()),
                    Some(name.as_str()),
                    "{index}"
                );
            }
            Piece::CallArgs { index, fragment } => {
                args.entry(*index).or_default().push_str(fragment);
            }
            Piece::Logprobs(_) => panic!("a parser tells no log-probabilities"),
        }
    }
    for (index, joined) in args {
        let call = answer.calls.iter().find(|c| c.id == format!("c_{index}"));
        // Arguments cut off by the answer's end are read as none.
        let parsed: Value = serde_json::from_str(&joined).unwrap_or(json!({}));
        assert_eq!(
            Some(&parsed),
            call.map(|c| Value::Object(c.input.clone())).as_ref()
        );
    }
    answer
}

/// The calls' names and inputs.
fn calls(answer: &Answer) -> Vec<(String, Value)> {
    answer
        .calls
        .iter()
        .map(|c| (c.name.clone(), Value::Object(c.input.clone())))
        .collect()
}

fn paris() -> (String, Value) {
    ("get_weather".into(), json!({"city": "Paris"}))
}

#[test]
fn hermes_and_qwen3_calls_and_thinking() {
    let f = format(Family::Hermes, Thinking::Think);
    let a = read(
        f,
        false,
        "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"write\", \"arguments\": {\"path\": \"a}\\\"b\"}}\n</tool_call>",
    );
    assert_eq!(a.reasoning, "\nThe user wants the weather.\n");
    assert_eq!(a.text, "Let me check.\n\n");
    assert_eq!(calls(&a)[0], paris());
    assert_eq!(calls(&a)[1].1, json!({"path": "a}\"b"}));
    assert_eq!(a.calls[1].id, "c_1");
    // The template opened the reasoning: the answer starts inside it.
    let a = read(f, true, "Hmm, Paris.\n</think>\n\nIt is sunny.");
    assert_eq!(
        (a.reasoning.as_str(), a.text.as_str()),
        ("Hmm, Paris.\n", "It is sunny.")
    );
    // Text that only looks like a tag, and a tag that holds no call, stay text.
    let a = read(f, false, "a <toolbox> b <tool_call>not json</tool_call>");
    assert_eq!(a.text, "a <toolbox> b <tool_call>not json</tool_call>");
    assert!(a.calls.is_empty());
}

#[test]
fn generic_answers_are_read_as_before() {
    let f = Format::default();
    let a = read(
        f,
        false,
        "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
    );
    assert_eq!((a.text.as_str(), calls(&a)), ("", vec![paris()]));
    let a = read(
        f,
        false,
        "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
    );
    assert_eq!(calls(&a), vec![paris()]);
    let a = read(f, false, "{\"answer\": 42} and so on");
    assert_eq!(
        (a.text.as_str(), a.calls.len()),
        ("{\"answer\": 42} and so on", 0)
    );
    let a = read(
        f,
        false,
        "[{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\"}]",
    );
    assert_eq!(
        a.calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
}

#[test]
fn llama3_bare_and_python_tag_calls() {
    let f = format(Family::Llama3, Thinking::None);
    let a = read(
        f,
        false,
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
    );
    assert_eq!(calls(&a), vec![paris()]);
    let a = read(
        f,
        false,
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
    );
    assert_eq!((a.text.as_str(), calls(&a)), ("", vec![paris()]));
}

#[test]
fn mistral_calls_in_both_spellings_and_magistral_thinking() {
    let f = format(Family::MistralList, Thinking::None);
    let a = read(
        f,
        false,
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"write\", \"arguments\": {\"path\": \"x\", \"lines\": [1, 2]}}]",
    );
    assert_eq!(calls(&a).len(), 2);
    assert_eq!(calls(&a)[0], paris());
    let f = format(Family::MistralArgs, Thinking::Mistral);
    let a = read(
        f,
        false,
        "[THINK]Weather, so a call.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]write[CALL_ID]a1b2c3d4e[ARGS]{\"path\": \"p\"}",
    );
    assert_eq!(a.reasoning, "Weather, so a call.");
    assert_eq!(a.text, "Checking.");
    assert_eq!(
        calls(&a),
        vec![paris(), ("write".into(), json!({"path": "p"}))]
    );
    // A marker followed by what is no call is text.
    let a = read(f, false, "[TOOL_CALLS]what\nis this");
    assert_eq!(a.text, "[TOOL_CALLS]what\nis this");
}

#[test]
fn gpt_oss_harmony_channels() {
    let f = format(Family::Harmony, Thinking::Harmony);
    let a = read(
        f,
        false,
        "<|channel|>analysis<|message|>Need weather for Paris.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
    );
    assert_eq!(a.reasoning, "Need weather for Paris.");
    assert_eq!((a.text.as_str(), calls(&a)), ("", vec![paris()]));
    let a = read(
        f,
        false,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
    );
    assert_eq!(
        (a.reasoning.as_str(), a.text.as_str()),
        ("Easy.", "It is 4.")
    );
    // The recipient may come before the channel.
    let a = read(
        f,
        false,
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}",
    );
    assert_eq!(calls(&a), vec![paris()]);
}

#[test]
fn deepseek_r1_and_v3_1_calls() {
    let f = format(Family::DeepSeekR1, Thinking::Think);
    let a = read(
        f,
        true,
        "I should call it.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    );
    assert_eq!(a.reasoning, "I should call it.\n");
    assert_eq!((a.text.as_str(), calls(&a)), ("", vec![paris()]));
    let f = format(Family::DeepSeekV31, Thinking::Think);
    let a = read(
        f,
        false,
        "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>write<｜tool▁sep｜>{\"path\": \"é\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    );
    assert_eq!(a.text, "Sure.");
    assert_eq!(
        calls(&a),
        vec![paris(), ("write".into(), json!({"path": "é"}))]
    );
}

#[test]
fn qwen3_coder_xml_is_json_typed_by_the_schema() {
    let f = format(Family::Qwen3Coder, Thinking::None);
    let a = read(
        f,
        false,
        "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write>\n<parameter=path>\n42\n</parameter>\n<parameter=lines>\n[1, 2]\n</parameter>\n<parameter=text>\na\nb <x>\n</parameter>\n</function>\n</tool_call>",
    );
    assert_eq!(a.text, "I'll check.\n\n");
    assert_eq!(
        calls(&a),
        vec![
            ("get_weather".into(), json!({"city": "Paris", "days": 3})),
            (
                "write".into(),
                json!({"path": "42", "lines": [1, 2], "text": "a\nb <x>"})
            ),
        ]
    );
}

#[test]
fn command_r7b_actions_and_thinking() {
    let f = format(Family::CommandR, Thinking::Command);
    let a = read(
        f,
        false,
        "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>",
    );
    assert_eq!(a.reasoning, "I will look it up.");
    assert_eq!((a.text.as_str(), calls(&a)), ("", vec![paris()]));
    let a = read(f, false, "<|START_RESPONSE|>Hello there.<|END_RESPONSE|>");
    assert_eq!(a.text, "Hello there.");
}

#[test]
fn granite_phi4_glm_and_kimi_calls() {
    let granite = format(Family::Granite, Thinking::Think);
    let a = read(
        granite,
        false,
        "<think>Weather.</think><response>On it.</response><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
    );
    assert_eq!(
        (a.reasoning.as_str(), a.text.as_str()),
        ("Weather.", "On it.")
    );
    assert_eq!(calls(&a), vec![paris()]);
    let phi = format(Family::Phi4, Thinking::None);
    let a = read(
        phi,
        false,
        "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]<|/tool_call|>",
    );
    assert_eq!(calls(&a), vec![paris()]);
    let glm = format(Family::Glm, Thinking::Think);
    let a = read(
        glm,
        false,
        "<think>Call it.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    );
    assert_eq!(a.reasoning, "Call it.");
    assert_eq!(
        calls(&a),
        vec![("get_weather".into(), json!({"city": "Paris", "days": 2}))]
    );
    let kimi = format(Family::Kimi, Thinking::Think);
    let a = read(
        kimi,
        false,
        "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.write:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
    );
    assert_eq!(a.text, "Checking.");
    assert_eq!(calls(&a), vec![paris(), ("write".into(), json!({}))]);
}

/// Every family whose calls the parser reads.
const FAMILIES: [Family; 13] = [
    Family::Hermes,
    Family::Llama3,
    Family::MistralList,
    Family::MistralArgs,
    Family::Harmony,
    Family::DeepSeekR1,
    Family::Qwen3Coder,
    Family::CommandR,
    Family::Granite,
    Family::Glm,
    Family::Kimi,
    Family::Phi4,
    Family::Generic,
];

#[test]
fn each_family_is_one_row_of_the_table() {
    let rows = &families::FAMILIES;
    let mut names: Vec<&str> = rows.iter().map(|row| row.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), rows.len());
    for family in FAMILIES.into_iter().chain([Family::DeepSeekV31]) {
        assert_eq!(family.format().family, family);
    }
    // What shows no other family is generic.
    assert_eq!(rows.last().map(|row| row.family), Some(Family::Generic));
    for row in &families::REASONINGS {
        assert_eq!(row.thinking.format().thinking, row.thinking);
    }
}

/// Feeds `text` to a parser in two pieces at every cut, then whole.
fn feed_at_every_cut(f: Format, text: &str) {
    for (i, _) in text.char_indices() {
        let mut p = Parser::new(f, Some(tools()), "c", false);
        p.feed(&text[..i]);
        p.feed(&text[i..]);
        p.finish();
    }
    Parser::new(f, Some(tools()), "c", false).read(text);
}

#[test]
fn malformed_and_cut_off_calls_never_panic() {
    let texts = [
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
        "[TOOL_CALLS]get_weather[ARGS]{\"city\"",
        "<|channel|>commentary to=functions.x<|message|>[1,",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>x<｜tool▁sep｜>{]}",
        "<|START_ACTION|>[{]<|END_ACTION|>",
        "{\"name\": 3}",
        "<think>never closed",
        "}}]]\"\"``` <|tool_call|>\u{0}",
    ];
    // Fed at every cut (a call told before its syntax broke stays told, so the feeds may
    // differ), and whole: no panic, and what is no call is text.
    for family in FAMILIES {
        for text in texts {
            feed_at_every_cut(format(family, Thinking::Think), text);
        }
    }
    let a = Parser::new(
        format(Family::DeepSeekV31, Thinking::None),
        Some(tools()),
        "c",
        false,
    )
    .read(texts[4]);
    assert_eq!((a.text.as_str(), a.calls.len()), (texts[4], 0));
    // A call cut off before it was named is dropped; a bare answer that is no call is text.
    let f = format(Family::MistralArgs, Thinking::None);
    let a = read(f, false, "Checking.[TOOL_CALLS]get_weather[CALL");
    assert_eq!((a.text.as_str(), a.calls.len()), ("Checking.", 0));
    let a = read(Format::default(), false, "{\"answer\": 4");
    assert_eq!(a.text, "{\"answer\": 4");
    // A cut-off call is kept as it was told, with its arguments as far as they read.
    let a = Parser::new(
        format(Family::Hermes, Thinking::None),
        Some(tools()),
        "c",
        false,
    )
    .read("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}");
    assert_eq!(calls(&a), vec![paris()]);
}

/// A real chat template from tests/data/templates.
fn template(file: &str) -> String {
    let path = format!("{}/tests/data/templates/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn formats_are_told_from_real_templates() {
    let cases = [
        ("qwen2.5.jinja", Family::Hermes, Thinking::None),
        ("qwen3.jinja", Family::Hermes, Thinking::Think),
        ("qwen3-coder.jinja", Family::Qwen3Coder, Thinking::None),
        ("llama3.1.jinja", Family::Llama3, Thinking::None),
        ("llama3.2.jinja", Family::Llama3, Thinking::None),
        (
            "mistral-small-3.2.jinja",
            Family::MistralArgs,
            Thinking::None,
        ),
        ("devstral-small.jinja", Family::MistralArgs, Thinking::None),
        ("gpt-oss.jinja", Family::Harmony, Thinking::Harmony),
        (
            "deepseek-r1-distill-qwen.jinja",
            Family::DeepSeekR1,
            Thinking::Think,
        ),
        ("phi4-mini.jinja", Family::Phi4, Thinking::None),
        ("granite-3.3.jinja", Family::Granite, Thinking::Think),
        ("granite-4.0.jinja", Family::Hermes, Thinking::None),
        ("glm-4.6.jinja", Family::Glm, Thinking::Think),
        // Unsloth's SmolLM3 template renders no tools: its calls are read leniently.
        ("smollm3.jinja", Family::Generic, Thinking::Think),
        ("gemma3.jinja", Family::Generic, Thinking::None),
    ];
    for (file, family, thinking) in cases {
        let f = Format::detect(Some(&template(file)));
        assert_eq!((f.family, f.thinking), (family, thinking), "{file}");
        assert_eq!(f.recognised(), family != Family::Generic, "{file}");
    }
    let qwen3 = Format::detect(Some(&template("qwen3.jinja")));
    assert!(qwen3.switches.enable_thinking && !qwen3.switches.thinking);
    let oss = Format::detect(Some(&template("gpt-oss.jinja")));
    assert!(oss.switches.reasoning_effort);
    assert_eq!(Format::detect(None), Format::default());
}

#[test]
fn formats_are_told_from_the_lines_of_templates_not_stored_here() {
    // The lines that write an assistant's calls and reasoning, as llama.cpp's copies of these
    // templates (models/templates/) write them.
    let cases = [
        (
            "{%- if message.tool_calls %}{{- '[TOOL_CALLS][' }}{%- for tool_call in message.tool_calls %}",
            Family::MistralList,
            Thinking::None,
        ),
        (
            "{{- '[TOOL_CALLS]' + tool_call.function.name + '[ARGS]' + arguments }}{{- '[THINK]' + message.reasoning_content + '[/THINK]' }}",
            Family::MistralArgs,
            Thinking::Mistral,
        ),
        (
            "{{ '<|START_THINKING|>' + message.tool_plan + '<|END_THINKING|>' }}{{ '<|START_ACTION|>[' }}",
            Family::CommandR,
            Thinking::Command,
        ),
        (
            "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}{%- if thinking %}<think>",
            Family::DeepSeekV31,
            Thinking::Think,
        ),
        (
            "<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}<|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>",
            Family::Kimi,
            Thinking::None,
        ),
    ];
    for (line, family, thinking) in cases {
        let f = Format::detect(Some(line));
        assert_eq!((f.family, f.thinking), (family, thinking), "{line}");
    }
    let v31 = Format::detect(Some(cases[3].0));
    assert!(v31.switches.thinking && !v31.switches.enable_thinking);
}

#[test]
fn reasoning_switches_reach_the_templates_that_read_them() {
    let qwen3 = Format::detect(Some(
        "{%- if enable_thinking is defined and enable_thinking is false %}<think>",
    ));
    let off = Reasoning {
        enabled: Some(false),
        ..Reasoning::default()
    };
    assert_eq!(
        qwen3.template_kwargs(&off, &Map::new()),
        json!({"enable_thinking": false})
            .as_object()
            .cloned()
            .unwrap()
    );
    let given = json!({"enable_thinking": true})
        .as_object()
        .cloned()
        .unwrap();
    assert_eq!(
        qwen3.template_kwargs(&off, &given)["enable_thinking"],
        json!(true)
    );
    let oss = Format::detect(Some("<|channel|> reasoning_effort"));
    let high = Reasoning {
        effort: Some(Effort::High),
        ..Reasoning::default()
    };
    assert_eq!(
        oss.template_kwargs(&high, &Map::new())["reasoning_effort"],
        json!("high")
    );
    assert!(qwen3.opens_reasoning("<|im_start|>assistant\n<think>\n"));
    assert!(!qwen3.opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}
