//! JSON text written exactly as Python's `json.dumps` writes it.
//!
//! The original server wrote every JSON text it produced with `json.dumps`: sorted keys, `", "`
//! and `": "` separators (or `","` and `":"` for cursors), every non-ASCII character escaped as
//! `\uXXXX` and floats in Python's `repr` form. Chat templates' `tojson` writes with the
//! arguments the template passes ([`Style::dumps`]). Callers compare those texts byte for byte and
//! recompute cursors from them. This module is `serde_json`'s serializer with a [`Formatter`]
//! that writes Python's separators, escapes and floats, over a view of the value with its keys
//! sorted when the style asks for it.

use serde::ser::{Serialize, SerializeMap, SerializeSeq};
use serde_json::ser::{CharEscape, Formatter, Serializer};
use serde_json::{Map, Value};
use std::io::{self, Write};
/// How to lay the text out: the presets the server writes with, or [`Style::dumps`] for the
/// arguments a chat template passes to `tojson`.
#[derive(Debug, Clone, Copy)]
pub struct Style<'a> {
    item_sep: &'a str,
    key_sep: &'a str,
    indent: Option<usize>,
    sort_keys: bool,
    /// Non-ASCII characters as `\uXXXX` escapes (`ensure_ascii=True`) or as themselves.
    ensure_ascii: bool,
}

impl<'a> Style<'a> {
    /// `json.dumps(v, ensure_ascii=.., indent=.., separators=.., sort_keys=..)`: without
    /// separators, `(", ", ": ")`, or `(",", ": ")` with an indent, as Python picks them.
    pub fn dumps(
        ensure_ascii: bool,
        indent: Option<usize>,
        separators: Option<(&'a str, &'a str)>,
        sort_keys: bool,
    ) -> Self {
        let (item_sep, key_sep) = separators.unwrap_or(match indent {
            Some(_) => (",", ": "),
            None => (", ", ": "),
        });
        Style {
            item_sep,
            key_sep,
            indent,
            sort_keys,
            ensure_ascii,
        }
    }
}

impl Style<'static> {
    /// `json.dumps(v, sort_keys=True, separators=(",", ":"))`: the canonical cursor form.
    pub const CANONICAL: Style<'static> = Style {
        item_sep: ",",
        key_sep: ":",
        indent: None,
        sort_keys: true,
        ensure_ascii: true,
    };
    /// `json.dumps(v, sort_keys=True)`: envelopes, structured output, tool-call arguments.
    pub const SORTED: Style<'static> = Style {
        item_sep: ", ",
        key_sep: ": ",
        indent: None,
        sort_keys: true,
        ensure_ascii: true,
    };
    /// `json.dumps(v)`: keys in the order they were built.
    pub const PLAIN: Style<'static> = Style {
        item_sep: ", ",
        key_sep: ": ",
        indent: None,
        sort_keys: false,
        ensure_ascii: true,
    };
    /// `json.dumps(v, indent=2)`: the Responses object, keys in the order they were built.
    pub const PRETTY: Style<'static> = Style {
        item_sep: ",",
        key_sep: ": ",
        indent: Some(2),
        sort_keys: false,
        ensure_ascii: true,
    };
}

/// Writes `value` in the given style.
pub fn dumps(value: &Value, style: Style<'_>) -> String {
    text(&Styled::Value(value, style.sort_keys), style)
}

/// Writes an object in the given style without wrapping it in a `Value`.
pub fn dumps_object(map: &Map<String, Value>, style: Style<'_>) -> String {
    text(&Styled::Object(map, style.sort_keys), style)
}

/// Appends `value` to `out` in the given style (for writers that lay out the outer object
/// themselves). The bytes are ASCII.
pub fn write_value(out: &mut Vec<u8>, value: &Value, style: Style<'_>) {
    write(out, &Styled::Value(value, style.sort_keys), style);
}

/// Appends a JSON string literal, escaped as Python's `ensure_ascii` does.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    write(out, &s, Style::SORTED);
}

fn text(value: &impl Serialize, style: Style<'_>) -> String {
    let mut bytes = Vec::new();
    write(&mut bytes, value, style);
    // The formatter writes whole UTF-8 characters.
    String::from_utf8(bytes).unwrap_or_default()
}

fn write(out: &mut Vec<u8>, value: &impl Serialize, style: Style<'_>) {
    let formatter = Python {
        style,
        level: 0,
        has_value: false,
    };
    // Writing to a Vec cannot fail.
    let _ = value.serialize(&mut Serializer::with_formatter(out, formatter));
}

/// A value seen with its object keys sorted (Python sorts `str` keys by code point, which is
/// UTF-8 byte order) or in insertion order.
enum Styled<'a> {
    Value(&'a Value, bool),
    Object(&'a Map<String, Value>, bool),
}

impl Serialize for Styled<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (map, sorted) = match self {
            Styled::Value(Value::Object(map), sorted) => (map, *sorted),
            Styled::Object(map, sorted) => (*map, *sorted),
            Styled::Value(Value::Array(items), sorted) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(&Styled::Value(item, *sorted))?;
                }
                return seq.end();
            }
            Styled::Value(scalar, _) => return scalar.serialize(serializer),
        };
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        if sorted {
            entries.sort_by(|a, b| a.0.cmp(b.0));
        }
        let mut out = serializer.serialize_map(Some(entries.len()))?;
        for (key, item) in entries {
            out.serialize_entry(key, &Styled::Value(item, sorted))?;
        }
        out.end()
    }
}

/// Python's separators, indentation, escapes and float form.
struct Python<'a> {
    style: Style<'a>,
    level: usize,
    /// Whether the container being written has an element yet (an empty one stays `[]`).
    has_value: bool,
}

impl Python<'_> {
    fn newline<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        match self.style.indent {
            Some(width) => {
                w.write_all(b"\n")?;
                w.write_all(" ".repeat(width * self.level).as_bytes())
            }
            None => Ok(()),
        }
    }

    fn open<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level = self.level.saturating_sub(1);
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(bracket)
    }

    fn element<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(self.style.item_sep.as_bytes())?;
        }
        self.newline(w)
    }
}

impl Formatter for Python<'_> {
    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(python_float_repr(value).as_bytes())
    }

    fn write_f32<W: ?Sized + Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(w, f64::from(value))
    }

    /// `ensure_ascii`: everything outside printable ASCII as `\uXXXX` (UTF-16 units);
    /// without it, the characters themselves (the escapes of quotes, backslashes and control
    /// characters are `write_char_escape`'s).
    fn write_string_fragment<W: ?Sized + Write>(&mut self, w: &mut W, s: &str) -> io::Result<()> {
        if !self.style.ensure_ascii || s.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return w.write_all(s.as_bytes());
        }
        let mut start = 0;
        for (i, c) in s.char_indices() {
            if (' '..='~').contains(&c) {
                continue;
            }
            w.write_all(s.get(start..i).unwrap_or("").as_bytes())?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(w, "\\u{unit:04x}")?;
            }
            start = i + c.len_utf8();
        }
        w.write_all(s.get(start..).unwrap_or("").as_bytes())
    }

    fn write_char_escape<W: ?Sized + Write>(&mut self, w: &mut W, e: CharEscape) -> io::Result<()> {
        match e {
            CharEscape::Quote => w.write_all(b"\\\""),
            CharEscape::ReverseSolidus => w.write_all(b"\\\\"),
            CharEscape::Solidus => w.write_all(b"/"),
            CharEscape::Backspace => w.write_all(b"\\b"),
            CharEscape::FormFeed => w.write_all(b"\\f"),
            CharEscape::LineFeed => w.write_all(b"\\n"),
            CharEscape::CarriageReturn => w.write_all(b"\\r"),
            CharEscape::Tab => w.write_all(b"\\t"),
            CharEscape::AsciiControl(byte) => write!(w, "\\u{byte:04x}"),
        }
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.element(w, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.element(w, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(self.style.key_sep.as_bytes())
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
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
