//! Property tests on the stable toolchain: arbitrary JSON into every shape's parser and every
//! contract check never panics, and the JSON writer round-trips.

use agent_as_model::contract::{cursor, schema};
use agent_as_model::fulfil::output;
use agent_as_model::limits::Limits;
use agent_as_model::pyjson::{self, Style};
use agent_as_model::shapes;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Arbitrary JSON, biased towards the keys and values the tools read.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "user",
            "assistant",
            "system",
            "tool",
            "text",
            "image",
            "image_url",
            "tool_use",
            "tool_result",
            "function_call",
            "object",
            "auto",
            "required",
            "none",
            "",
            "cur_",
            "resp_0123456789abcdef0123456789abcdef",
            "data:image/png;base64,AAAA",
            "json_schema"
        ])
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "messages",
            "role",
            "content",
            "prompt",
            "input",
            "type",
            "text",
            "tools",
            "tool_calls",
            "tool_call_id",
            "function",
            "arguments",
            "name",
            "input_schema",
            "output_schema",
            "persona",
            "previous_response_id",
            "max_tokens",
            "temperature",
            "system",
            "instructions",
            "image_url",
            "url",
            "source",
            "data",
            "media_type",
            "tool_choice",
            "stop",
            "response_format",
            "json_schema",
            "schema",
            "properties",
            "required",
            "items",
            "call_id",
            "output",
            "tool_use_id",
            "id",
            "input_audio",
            "format",
            "max_retries",
            "n",
            "stream"
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn shape_parsers_never_panic(args in prop::collection::vec((key(), json_value()), 0..8)) {
        let map: Map<String, Value> = args.into_iter().collect();
        for shape in shapes::REGISTRY {
            let _ = shapes::parse(shape, &map, &Limits::default());
        }
    }

    #[test]
    fn chat_messages_never_panic(messages in prop::collection::vec(json_value(), 0..6), tools in json_value()) {
        let parse = |tool: &str, map: Value| {
            let _ = shapes::parse(shapes::find(tool).unwrap(), map.as_object().unwrap(), &Limits::default());
        };
        parse("chat_complete", json!({"messages": messages, "tools": tools}));
        parse("messages_create", json!({"messages": messages}));
        parse("responses_create", json!({"input": messages}));
        parse("generate_content", json!({"contents": messages, "tools": tools}));
    }

    #[test]
    fn contract_checks_never_panic(v in json_value(), s in "\\PC{0,80}") {
        if let Ok(compiled) = schema::compile(&v, "output_schema", &Limits::default()) {
            let _ = compiled.check(&v);
        }
        let _ = cursor::parse(Some(&s));
        let _ = output::extract_json(&s);
        let _ = output::extract_json(&v.to_string());
    }

    #[test]
    fn python_style_json_round_trips_and_is_ascii(v in json_value()) {
        for style in [Style::SORTED, Style::CANONICAL, Style::PRETTY, Style::PLAIN] {
            let text = pyjson::dumps(&v, style);
            prop_assert!(text.is_ascii());
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back, v.clone());
        }
    }
}
