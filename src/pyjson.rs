//! JSON text written exactly as Python's `json.dumps` writes it.
//!
//! The original server wrote every JSON text it produced with `json.dumps`: sorted keys, `", "`
//! and `": "` separators (or `","` and `":"` for cursors), every non-ASCII character escaped as
//! `\uXXXX` and floats in Python's `repr` form. Callers compare those texts byte for byte and
//! recompute cursors from them, so this module reproduces that writer instead of using
//! `serde_json`'s, which differs in escapes, separators and float forms.

use serde_json::{Map, Value};
use std::fmt::Write as _;

/// How to lay the text out; the three presets are the only ones the server uses.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    item_sep: &'static str,
    key_sep: &'static str,
    indent: Option<usize>,
    sort_keys: bool,
}

impl Style {
    /// `json.dumps(v, sort_keys=True, separators=(",", ":"))`: the canonical cursor form.
    pub const CANONICAL: Style = Style {
        item_sep: ",",
        key_sep: ":",
        indent: None,
        sort_keys: true,
    };
    /// `json.dumps(v, sort_keys=True)`: envelopes, structured output, tool-call arguments.
    pub const SORTED: Style = Style {
        item_sep: ", ",
        key_sep: ": ",
        indent: None,
        sort_keys: true,
    };
    /// `json.dumps(v)`: keys in the order they were built.
    pub const PLAIN: Style = Style {
        item_sep: ", ",
        key_sep: ": ",
        indent: None,
        sort_keys: false,
    };
    /// `json.dumps(v, indent=2)`: the Responses object, keys in the order they were built.
    pub const PRETTY: Style = Style {
        item_sep: ",",
        key_sep: ": ",
        indent: Some(2),
        sort_keys: false,
    };
}

/// Writes `value` in the given style.
pub fn dumps(value: &Value, style: Style) -> String {
    let mut out = String::new();
    write_value(&mut out, value, style, 0);
    out
}

/// Writes an object in the given style without wrapping it in a `Value`.
pub fn dumps_object(map: &Map<String, Value>, style: Style) -> String {
    let mut out = String::new();
    write_object(&mut out, map, style, 0);
    out
}

/// Appends `value` to `out` in the given style (for writers that lay out the outer object
/// themselves).
pub fn dump_into(out: &mut String, value: &Value, style: Style) {
    write_value(out, value, style, 0);
}

/// Appends a JSON string literal, escaped as Python's `ensure_ascii` does.
pub fn dump_str_into(out: &mut String, s: &str) {
    write_string(out, s);
}

fn newline(out: &mut String, style: Style, level: usize) {
    if let Some(width) = style.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', width * level));
    }
}

fn write_value(out: &mut String, value: &Value, style: Style, level: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep(style));
                }
                newline(out, style, level + 1);
                write_value(out, item, style, level + 1);
            }
            newline(out, style, level);
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, style, level),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>, style: Style, level: usize) {
    if map.is_empty() {
        out.push_str("{}");
        return;
    }
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    if style.sort_keys {
        // Python sorts str keys by code point; UTF-8 byte order is the same order.
        entries.sort_by(|a, b| a.0.cmp(b.0));
    }
    out.push('{');
    for (i, (key, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push_str(item_sep(style));
        }
        newline(out, style, level + 1);
        write_string(out, key);
        out.push_str(style.key_sep);
        write_value(out, item, style, level + 1);
    }
    newline(out, style, level);
    out.push('}');
}

/// With an indent Python drops the trailing space of the item separator.
fn item_sep(style: Style) -> &'static str {
    if style.indent.is_some() {
        style.item_sep.trim_end()
    } else {
        style.item_sep
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if n.is_i64() || n.is_u64() {
        out.push_str(&n.to_string());
    } else if let Some(f) = n.as_f64() {
        out.push_str(&python_float_repr(f));
    } else {
        out.push_str(&n.to_string());
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, written in fixed notation when
/// the decimal exponent is in `-4..16` and as `d.ddde+XX` otherwise.
pub fn python_float_repr(f: f64) -> String {
    if !f.is_finite() {
        // JSON input cannot hold these; Python would write the bare words.
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let mut s = String::from(sign);
        if exp < 0 {
            s.push_str("0.");
            s.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            s.push_str(&digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                s.push_str(&digits);
                s.extend(std::iter::repeat_n('0', point - digits.len()));
                s.push_str(".0");
            } else {
                let (int_part, frac) = digits.split_at(point);
                s.push_str(int_part);
                s.push('.');
                s.push_str(frac);
            }
        }
        s
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

/// Python's `ensure_ascii=True` string escaping.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_match_python_repr() {
        // Expected strings are what CPython 3.11 prints for json.dumps of the same floats.
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (1e300, "1e+300"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (2.5e-7, "2.5e-07"),
            (1.0, "1.0"),
            (-12.75, "-12.75"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "repr of {f}");
        }
    }

    #[test]
    fn sorted_style_matches_json_dumps() {
        let v = json!({"b": [1, 2.5, null, true], "a": {"é": "ü\n"}});
        assert_eq!(
            dumps(&v, Style::SORTED),
            r#"{"a": {"\u00e9": "\u00fc\n"}, "b": [1, 2.5, null, true]}"#
        );
        assert_eq!(
            dumps(&v, Style::CANONICAL),
            r#"{"a":{"\u00e9":"\u00fc\n"},"b":[1,2.5,null,true]}"#
        );
    }

    #[test]
    fn pretty_style_matches_indent_2() {
        let v = json!({"id": "x", "output": [{"a": []}, {}]});
        assert_eq!(
            dumps(&v, Style::PRETTY),
            "{\n  \"id\": \"x\",\n  \"output\": [\n    {\n      \"a\": []\n    },\n    {}\n  ]\n}"
        );
    }

    #[test]
    fn escapes_del_and_astral_like_python() {
        assert_eq!(
            dumps(&json!("\u{7f}\u{1F600}\u{0}"), Style::SORTED),
            "\"\\u007f\\ud83d\\ude00\\u0000\""
        );
    }
}
