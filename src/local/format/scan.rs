//! Reading a call section as far as it is written: a cursor over its text that says, at each
//! step, whether what it expects is there, not yet known (the text stops inside it), or not
//! there at all; and the JSON values and call objects the sections hold.

use super::Tools;
use serde_json::Value;

/// Why a reading stopped before the section's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The text ends before the section does: more may come.
    More,
    /// The text is not this section's syntax.
    Bad,
}

pub type Step<T> = Result<T, Stop>;

/// A call as far as it is read: its name once whole, and its arguments as JSON text, which
/// only grows (a later reading extends what an earlier one read).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Partial {
    pub name: Option<String>,
    pub args: String,
    /// The arguments are whole.
    pub done: bool,
}

/// The keys a family's call objects go by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    pub name: &'static [&'static str],
    pub args: &'static [&'static str],
}

/// `{"name": …, "arguments": …}`, with the other spellings models write.
pub const NAME_ARGS: Keys = Keys {
    name: &["name"],
    args: &["arguments", "parameters", "input"],
};

/// Command R's `{"tool_call_id": …, "tool_name": …, "parameters": …}`.
pub const COMMAND: Keys = Keys {
    name: &["tool_name", "name"],
    args: &["parameters", "arguments"],
};

/// A position in a section's text.
pub struct Cursor<'a> {
    pub text: &'a str,
    pub at: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Self {
        Cursor { text, at: 0 }
    }

    pub fn rest(&self) -> &'a str {
        self.text.get(self.at..).unwrap_or("")
    }

    pub fn at_end(&self) -> bool {
        self.at >= self.text.len()
    }

    /// Skips white space.
    pub fn ws(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Whether `lit` comes next (taken when it does); `More` while the text ends inside it.
    pub fn peek(&mut self, lit: &str) -> Step<bool> {
        let rest = self.rest();
        if rest.starts_with(lit) {
            self.at += lit.len();
            Ok(true)
        } else if lit.starts_with(rest) {
            Err(Stop::More)
        } else {
            Ok(false)
        }
    }

    /// Takes `lit`, which must come next.
    pub fn lit(&mut self, lit: &str) -> Step<()> {
        if self.peek(lit)? {
            Ok(())
        } else {
            Err(Stop::Bad)
        }
    }

    /// The text up to `end`, taking both.
    pub fn until(&mut self, end: &str) -> Step<&'a str> {
        let rest = self.rest();
        let at = rest.find(end).ok_or(Stop::More)?;
        self.at += at + end.len();
        Ok(rest.get(..at).unwrap_or(""))
    }

    /// The text up to the first of `ends`, taking the text but not the end.
    pub fn before_any(&mut self, ends: &[&str]) -> Step<&'a str> {
        let rest = self.rest();
        let at = ends
            .iter()
            .filter_map(|e| rest.find(e))
            .min()
            .ok_or(Stop::More)?;
        self.at += at;
        Ok(rest.get(..at).unwrap_or(""))
    }

    /// Skips one JSON value; its text. `More` while it is unfinished, `Bad` when it is not
    /// JSON.
    pub fn value(&mut self) -> Step<&'a str> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let first = *bytes.get(start).ok_or(Stop::More)?;
        let end = match first {
            b'{' | b'[' => nested_end(bytes, start)?,
            b'"' => string_end(bytes, start + 1)?,
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => scalar_end(bytes, start)?,
            _ => return Err(Stop::Bad),
        };
        self.at = end;
        Ok(self.text.get(start..end).unwrap_or(""))
    }
}

/// Where the string whose text begins at `from` ends (after its closing quote).
fn string_end(bytes: &[u8], from: usize) -> Step<usize> {
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Ok(i + 1),
            _ => {}
        }
    }
    Err(Stop::More)
}

/// Where the object or list at `start` ends.
fn nested_end(bytes: &[u8], start: usize) -> Step<usize> {
    let mut depth = 0u32;
    let mut i = start;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                i = string_end(bytes, i + 1)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(Stop::More)
}

/// Where a number, `true`, `false` or `null` ends: only known once something follows it.
fn scalar_end(bytes: &[u8], start: usize) -> Step<usize> {
    let len = bytes
        .iter()
        .skip(start)
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
        .count();
    if start + len >= bytes.len() {
        Err(Stop::More)
    } else {
        Ok(start + len)
    }
}

/// Reads one call object (`{"name": …, "arguments": {…}}` in `keys`' spelling), adding it to
/// `calls` as soon as it begins. `Bad` when it is whole and names no tool, or its arguments
/// are not an object.
pub fn call_object(c: &mut Cursor<'_>, calls: &mut Vec<Partial>, keys: Keys) -> Step<()> {
    c.lit("{")?;
    let index = calls.len();
    calls.push(Partial::default());
    let mut first = true;
    loop {
        c.ws();
        if c.peek("}")? {
            break;
        }
        if !first {
            c.lit(",")?;
            c.ws();
        }
        first = false;
        let key: String = serde_json::from_str(c.value()?).map_err(|_| Stop::Bad)?;
        c.ws();
        c.lit(":")?;
        c.ws();
        let start = c.at;
        let value = c.value();
        let call = calls.get_mut(index).ok_or(Stop::Bad)?;
        if keys.args.contains(&key.as_str()) && call.args.is_empty() {
            read_args(c, start, value, call)?;
        } else if keys.name.contains(&key.as_str()) && call.name.is_none() {
            call.name = Some(serde_json::from_str(value?).map_err(|_| Stop::Bad)?);
        } else {
            value?;
        }
    }
    match calls.get(index) {
        Some(Partial {
            name: Some(_),
            done,
            ..
        }) => {
            if !done && let Some(call) = calls.get_mut(index) {
                // No arguments written: none.
                call.args = "{}".into();
                call.done = true;
            }
            Ok(())
        }
        _ => Err(Stop::Bad),
    }
}

/// The arguments' value, begun at `start`: an object as it is written, or a JSON string
/// holding one, decoded once whole.
fn read_args(c: &Cursor<'_>, start: usize, value: Step<&str>, call: &mut Partial) -> Step<()> {
    let first = c.text.as_bytes().get(start).copied();
    match (first, value) {
        (Some(b'{'), Ok(text)) => {
            call.args = text.to_owned();
            call.done = true;
            Ok(())
        }
        (Some(b'{'), Err(Stop::More)) => {
            call.args = c.text.get(start..).unwrap_or("").to_owned();
            Err(Stop::More)
        }
        (Some(b'"'), Ok(text)) => {
            let inner: String = serde_json::from_str(text).map_err(|_| Stop::Bad)?;
            match serde_json::from_str::<Value>(&inner) {
                Ok(v @ Value::Object(_)) => {
                    call.args = v.to_string();
                    call.done = true;
                    Ok(())
                }
                _ => Err(Stop::Bad),
            }
        }
        (_, Err(stop)) => Err(stop),
        (_, Ok(_)) => Err(Stop::Bad),
    }
}

/// One call object or a list of them.
pub fn call_objects(c: &mut Cursor<'_>, calls: &mut Vec<Partial>, keys: Keys) -> Step<()> {
    c.ws();
    if !c.peek("[")? {
        return call_object(c, calls, keys);
    }
    c.ws();
    if c.peek("]")? {
        return Err(Stop::Bad);
    }
    loop {
        c.ws();
        call_object(c, calls, keys)?;
        c.ws();
        if c.peek("]")? {
            return Ok(());
        }
        c.lit(",")?;
    }
}

/// Arguments written as raw JSON after a call's name: read as they come.
pub fn raw_args(c: &mut Cursor<'_>, call: &mut Partial) -> Step<()> {
    let start = c.at;
    match c.value() {
        Ok(text) if text.starts_with('{') => {
            call.args = text.to_owned();
            call.done = true;
            Ok(())
        }
        Ok(_) => Err(Stop::Bad),
        Err(Stop::More) if c.rest().starts_with('{') || c.at_end() => {
            call.args = c.text.get(start..).unwrap_or("").to_owned();
            Err(Stop::More)
        }
        Err(stop) => Err(stop),
    }
}

/// Appends one parameter written as raw text (XML-like formats) to a call's arguments, typed
/// by the tool's schema: a string where it says so, else JSON when the text parses as JSON.
pub fn push_param(call: &mut Partial, tools: &Tools, key: &str, raw: &str) {
    let name = call.name.as_deref().unwrap_or("");
    let value = tools.typed(name, key, raw);
    if call.args.len() > 1 {
        call.args.push_str(", ");
    }
    call.args
        .push_str(&Value::String(key.to_owned()).to_string());
    call.args.push_str(": ");
    call.args.push_str(&value.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_end_where_json_says() {
        let mut c = Cursor::new(r#"{"a": "}\"", "b": [1, {"c": 2}]} tail"#);
        assert_eq!(c.value(), Ok(r#"{"a": "}\"", "b": [1, {"c": 2}]}"#));
        assert_eq!(c.rest(), " tail");
        assert_eq!(Cursor::new("12").value(), Err(Stop::More));
        assert_eq!(Cursor::new("12,").value(), Ok("12"));
        assert_eq!(Cursor::new(r#"{"a": "#).value(), Err(Stop::More));
        assert_eq!(Cursor::new("<x>").value(), Err(Stop::Bad));
    }

    #[test]
    fn a_call_object_is_known_as_it_is_written() {
        let full = r#"{"name": "f", "arguments": {"a": 1}}"#;
        for cut in 0..full.len() {
            let mut calls = Vec::new();
            let r = call_object(&mut Cursor::new(&full[..cut]), &mut calls, NAME_ARGS);
            assert_eq!(r, Err(Stop::More), "{cut}");
            if let Some(call) = calls.first() {
                assert!(r#"{"a": 1}"#.starts_with(&call.args), "{cut}: {call:?}");
            }
        }
        let mut calls = Vec::new();
        assert_eq!(
            call_object(&mut Cursor::new(full), &mut calls, NAME_ARGS),
            Ok(())
        );
        assert_eq!(calls[0].name.as_deref(), Some("f"));
        assert_eq!(calls[0].args, r#"{"a": 1}"#);
        let mut calls = Vec::new();
        let no_name = call_object(&mut Cursor::new(r#"{"answer": 42}"#), &mut calls, NAME_ARGS);
        assert_eq!(no_name, Err(Stop::Bad));
        let mut calls = Vec::new();
        let string_args = r#"{"name": "f", "arguments": "{\"a\": 1}"}"#;
        assert_eq!(
            call_object(&mut Cursor::new(string_args), &mut calls, NAME_ARGS),
            Ok(())
        );
        assert_eq!(calls[0].args, r#"{"a":1}"#);
    }
}
