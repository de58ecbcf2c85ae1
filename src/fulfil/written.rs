//! Tool calls a model wrote in its text, read one way for every backend: the call objects of a
//! JSON value ([`call_items`], [`read_item`]), and a [`Reader`] that finds them in a text as it
//! grows (Qwen's and Hermes' `<tool_call>` tags, or a whole answer that is a call), telling each
//! piece (text, a call's start, a fragment of its arguments) as soon as it is known.
//!
//! Which calls are acceptable (offered tools, arguments that satisfy their schema) is the
//! machine's to judge ([`super::output`]); this module only reads what was written.

use super::live::Event;
use crate::call::partial_suffix;
use serde_json::{Map, Value};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// The keys a written call's arguments go by.
const ARGUMENT_KEYS: [&str; 3] = ["arguments", "input", "parameters"];

/// The call objects in a JSON value: `{"tool_calls": [...]}` (or one call under it), one object
/// with a `name`, or a non-empty list of objects with one. `None` when it is none of these.
pub fn call_items(value: &Value) -> Option<Vec<&Value>> {
    match value {
        Value::Object(m) => match m.get("tool_calls") {
            Some(Value::Array(a)) => Some(a.iter().collect()),
            Some(single) => Some(vec![single]),
            None if m.contains_key("name") => Some(vec![value]),
            None => None,
        },
        Value::Array(a) if !a.is_empty() && a.iter().all(|i| i.get("name").is_some()) => {
            Some(a.iter().collect())
        }
        _ => None,
    }
}

/// A written call's name (empty when it has none) and arguments: under `arguments`, `input` or
/// `parameters`, decoded when they are a JSON string, `{}` when absent.
pub fn read_item(item: &Value) -> (&str, Value) {
    let name = item.get("name").and_then(Value::as_str).unwrap_or("");
    let args = ARGUMENT_KEYS
        .iter()
        .find_map(|k| item.get(*k))
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let args = match args {
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        other => other,
    };
    (name, args)
}

/// A call found in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub id: String,
    pub name: String,
    pub input: Map<String, Value>,
}

/// What a piece of text added, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    /// More of the model's reasoning, apart from the answer's text.
    Reasoning(String),
    /// The call numbered `index` (from 0, in the answer's order) began.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of the call's arguments, as JSON text (the fragments join into its arguments).
    CallArgs {
        index: usize,
        fragment: String,
    },
}

impl Piece {
    /// The piece as the call's event, the answer being `tokens` tokens long.
    pub fn event(&self, tokens: usize) -> Event<'_> {
        match self {
            Piece::Text(text) => Event::Delta { tokens, text },
            Piece::Reasoning(text) => Event::Reasoning { tokens, text },
            Piece::CallStart { index, id, name } => Event::ToolCall {
                tokens,
                index: *index,
                id,
                name,
            },
            Piece::CallArgs { index, fragment } => Event::ToolArgs {
                tokens,
                index: *index,
                fragment,
            },
        }
    }
}

/// Where the text reads it is.
#[derive(Debug)]
enum State {
    Text,
    /// The answer began like a bare call (JSON or a fence): nothing is shown until the end.
    Held,
    /// Inside a call object (after an opening tag, or the whole answer under a grammar).
    Call(Box<Scan>),
    /// After a tagged call, up to its closing tag.
    AfterCall,
}

/// Reads the tool calls in a model's answer as it grows. Feeding the text in pieces or at once
/// finds the same calls with the same ids, so the answer read at the end agrees with what was
/// told while it was made.
#[derive(Debug)]
pub struct Reader {
    state: State,
    /// The text outside calls, shown.
    text: String,
    /// Text not yet shown: it could still begin a tag (or, held, a bare call).
    pending: String,
    calls: Vec<Found>,
    /// Calls whose start was told.
    started: usize,
    id_base: String,
}

impl Reader {
    /// A reader of an answer that may hold calls among text; ids are `{id_base}_{n}`.
    pub fn new(id_base: &str) -> Self {
        Reader {
            state: State::Text,
            text: String::new(),
            pending: String::new(),
            calls: Vec::new(),
            started: 0,
            id_base: id_base.to_owned(),
        }
    }

    /// A reader of an answer that is one call object (a grammar requires it).
    pub fn call(id_base: &str) -> Self {
        Reader {
            state: State::Call(Box::default()),
            ..Reader::new(id_base)
        }
    }

    fn id(&self, index: usize) -> String {
        format!("{}_{index}", self.id_base)
    }

    /// Adds a piece of the answer; what it makes known, in order.
    pub fn feed(&mut self, piece: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        self.pending.push_str(piece);
        loop {
            let before = (self.pending.len(), self.calls.len(), self.started);
            match self.state {
                State::Text => self.read_text(&mut out),
                State::Held => return out,
                State::Call(_) => self.read_call(&mut out),
                State::AfterCall => self.read_after_call(),
            }
            if before == (self.pending.len(), self.calls.len(), self.started)
                || self.pending.is_empty()
            {
                return out;
            }
        }
    }

    fn show(&mut self, text: &str, out: &mut Vec<Piece>) {
        if !text.is_empty() {
            self.text.push_str(text);
            out.push(Piece::Text(text.to_owned()));
        }
    }

    fn read_text(&mut self, out: &mut Vec<Piece>) {
        let pending = std::mem::take(&mut self.pending);
        if self.text.is_empty() && self.calls.is_empty() {
            let start = pending.trim_start();
            if start.starts_with('{') {
                // Perhaps a bare call: read as one, and as text if it is not.
                self.pending = pending;
                self.state = State::Call(Box::new(Scan {
                    bare: true,
                    ..Scan::default()
                }));
                return;
            }
            if start.starts_with(['[', '`']) {
                self.pending = pending;
                self.state = State::Held;
                return;
            }
            if start.is_empty() {
                // Only white space so far: what follows decides.
                self.pending = pending;
                return;
            }
        }
        if let Some(at) = pending.find(OPEN) {
            self.show(pending.get(..at).unwrap_or(""), out);
            self.pending = pending.get(at + OPEN.len()..).unwrap_or("").to_owned();
            self.state = State::Call(Box::default());
            return;
        }
        let cut = pending.len() - partial_suffix(&pending, OPEN);
        self.show(pending.get(..cut).unwrap_or(""), out);
        self.pending = pending.get(cut..).unwrap_or("").to_owned();
    }

    fn read_call(&mut self, out: &mut Vec<Piece>) {
        let State::Call(scan) = &mut self.state else {
            return;
        };
        scan.buf.push_str(&std::mem::take(&mut self.pending));
        scan.advance();
        if scan.live.is_none()
            && let (Some(name), Some(start)) = (&scan.name, scan.args_start)
        {
            let index = self.started;
            out.push(Piece::CallStart {
                index,
                id: format!("{}_{index}", self.id_base),
                name: name.clone(),
            });
            scan.live = Some(index);
            scan.emitted = start;
            self.started += 1;
        }
        if let Some(index) = scan.live {
            let limit = scan.args_end.unwrap_or(scan.pos);
            if let Some(fragment) = scan.buf.get(scan.emitted..limit).filter(|f| !f.is_empty()) {
                out.push(Piece::CallArgs {
                    index,
                    fragment: fragment.to_owned(),
                });
                scan.emitted = limit;
            }
        }
        if let Some(end) = scan.end {
            let rest = scan.buf.get(end..).unwrap_or("").to_owned();
            let scan = std::mem::take(scan);
            let found = self.close_call(&scan, out);
            self.pending = rest;
            self.state = if scan.bare {
                if !found {
                    self.show(scan.buf.get(..end).unwrap_or(""), out);
                }
                State::Text
            } else {
                State::AfterCall
            };
        }
    }

    /// A call object is complete: its calls join the answer, and those not told yet are told
    /// whole; whether it held any.
    fn close_call(&mut self, scan: &Scan, out: &mut Vec<Piece>) -> bool {
        let before = self.calls.len();
        for (i, (name, input)) in scan.calls().into_iter().enumerate() {
            let index = match scan.live.filter(|_| i == 0) {
                Some(told) => told,
                None => {
                    let index = self.started;
                    self.started += 1;
                    out.push(Piece::CallStart {
                        index,
                        id: self.id(index),
                        name: name.clone(),
                    });
                    out.push(Piece::CallArgs {
                        index,
                        fragment: Value::Object(input.clone()).to_string(),
                    });
                    index
                }
            };
            let id = self.id(index);
            self.calls.push(Found { id, name, input });
        }
        self.calls.len() > before
    }

    fn read_after_call(&mut self) {
        match self.pending.find(CLOSE) {
            Some(at) => {
                self.pending = self
                    .pending
                    .get(at + CLOSE.len()..)
                    .unwrap_or("")
                    .to_owned();
                self.state = State::Text;
            }
            None => {
                // Keep only what could begin the closing tag.
                let cut = self.pending.len() - partial_suffix(&self.pending, CLOSE);
                self.pending = self.pending.get(cut..).unwrap_or("").to_owned();
            }
        }
    }

    /// The answer's text outside calls, and its calls.
    pub fn finish(mut self) -> (String, Vec<Found>) {
        let mut ignored = Vec::new();
        match std::mem::replace(&mut self.state, State::AfterCall) {
            State::Text => {
                let pending = std::mem::take(&mut self.pending);
                self.text.push_str(&pending);
            }
            State::Held => {
                let held = std::mem::take(&mut self.pending);
                let mut scan = Scan {
                    buf: held.clone(),
                    ..Scan::default()
                };
                scan.unfence();
                if !self.close_call(&scan, &mut ignored) {
                    self.text.push_str(&held);
                }
            }
            State::Call(mut scan) => {
                // A call cut off by the end of the answer: what of it reads as one.
                scan.buf.push_str(&std::mem::take(&mut self.pending));
                scan.advance();
                if !self.close_call(&scan, &mut ignored) && scan.bare {
                    self.text.push_str(&scan.buf);
                }
            }
            State::AfterCall => {}
        }
        (self.text, self.calls)
    }

    /// Reads a whole answer at once.
    pub fn read(mut self, text: &str) -> (String, Vec<Found>) {
        self.feed(text);
        self.finish()
    }
}

/// One call object as it arrives: the bytes scanned once, tracking strings and nesting, so its
/// name and where its arguments begin and end are known as soon as they are written.
#[derive(Debug, Default)]
struct Scan {
    buf: String,
    /// Bytes scanned.
    pos: usize,
    depth: u32,
    in_string: bool,
    escaped: bool,
    string_start: usize,
    /// The last string at the top level that may be a key.
    last_string: Option<(usize, usize)>,
    /// The top-level key whose value is being read.
    key: Option<String>,
    name: Option<String>,
    /// Where the object-valued arguments begin and end.
    args_start: Option<usize>,
    args_end: Option<usize>,
    /// Where the object (or list) begins and ends.
    start: Option<usize>,
    end: Option<usize>,
    /// The call's index once its start was told, and the arguments told so far.
    live: Option<usize>,
    emitted: usize,
    /// The object began an answer untagged: it is text if it is not a call.
    bare: bool,
}

impl Scan {
    fn advance(&mut self) {
        while self.end.is_none()
            && let Some(&b) = self.buf.as_bytes().get(self.pos)
        {
            let i = self.pos;
            self.pos += 1;
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => {
                        self.in_string = false;
                        self.string_ended(i + 1);
                    }
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    self.string_start = i;
                }
                b':' if self.depth == 1 => {
                    self.key = self.last_string.take().and_then(|(a, z)| {
                        serde_json::from_str(self.buf.get(a..z).unwrap_or("")).ok()
                    });
                }
                b',' if self.depth == 1 => self.key = None,
                b'{' | b'[' => {
                    if self.depth == 0 {
                        self.start = Some(i);
                    }
                    self.depth += 1;
                    if self.depth == 2
                        && b == b'{'
                        && self
                            .key
                            .as_deref()
                            .is_some_and(|k| ARGUMENT_KEYS.contains(&k))
                    {
                        self.args_start = Some(i);
                    }
                }
                b'}' | b']' if self.depth > 0 => {
                    self.depth -= 1;
                    if self.depth == 1 && self.args_start.is_some() && self.args_end.is_none() {
                        self.args_end = Some(i + 1);
                    }
                    if self.depth == 0 {
                        self.end = Some(i + 1);
                    }
                }
                _ => {}
            }
        }
    }

    /// A string closed at `end`: at the top level, a key or a value.
    fn string_ended(&mut self, end: usize) {
        if self.depth != 1 {
            return;
        }
        let range = (self.string_start, end);
        match self.key.take() {
            Some(key) if key == "name" && self.name.is_none() => {
                self.name = serde_json::from_str(self.buf.get(range.0..range.1).unwrap_or("")).ok();
            }
            Some(_) => {}
            None => self.last_string = Some(range),
        }
    }

    /// Takes a fence's marks off a call that was not scanned as it came.
    fn unfence(&mut self) {
        let body = self.buf.trim();
        let body = body
            .strip_prefix("```json")
            .or_else(|| body.strip_prefix("```"))
            .map_or(body, |b| b.trim_end().trim_end_matches("```"))
            .trim()
            .to_owned();
        self.buf = body;
    }

    /// The calls the object holds: those naming a tool with object arguments.
    fn calls(&self) -> Vec<(String, Map<String, Value>)> {
        let body = match (self.start, self.end) {
            (Some(a), Some(z)) => self.buf.get(a..z),
            (Some(a), None) => self.buf.get(a..),
            (None, _) => Some(self.buf.as_str()),
        }
        .unwrap_or("");
        let value = serde_json::from_str::<Value>(body.trim()).ok().or_else(|| {
            // A told call whose object does not parse keeps the arguments that do.
            let name = self.name.clone()?;
            let args = self.buf.get(self.args_start?..self.args_end?)?;
            let args: Value = serde_json::from_str(args).ok()?;
            Some(serde_json::json!({"name": name, "arguments": args}))
        });
        let Some(value) = value else {
            return Vec::new();
        };
        call_items(&value)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|item| match read_item(item) {
                ("", _) => None,
                (name, Value::Object(input)) => Some((name.to_owned(), input)),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The text the pieces show.
    fn texts(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn pieces_of(reader: &mut Reader, text: &str, step: usize) -> Vec<Piece> {
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(step)
            .flat_map(|c| reader.feed(&c.iter().collect::<String>()))
            .collect()
    }

    #[test]
    fn calls_are_found_in_tags_fences_and_bare_json() {
        let read = |t: &str| Reader::new("c").read(t);
        let (text, calls) = read(
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        );
        assert_eq!(text, "Let me check.\n");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].id, "c_0");
        assert_eq!(calls[0].input["city"], "Paris");
        let (text, calls) = read(
            "```json\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}\n```",
        );
        assert_eq!(
            (text.as_str(), calls[0].input["city"].as_str()),
            ("", Some("Oslo"))
        );
        let (_, calls) = read("[{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\"}]");
        assert_eq!(
            calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let (text, calls) = read("{\"answer\": 42}");
        assert_eq!((text.as_str(), calls.len()), ("{\"answer\": 42}", 0));
        let (text, calls) = read("plain text with { braces }");
        assert_eq!(
            (text.as_str(), calls.len()),
            ("plain text with { braces }", 0)
        );
    }

    #[test]
    fn a_tagged_call_is_told_as_it_is_written_and_agrees_with_the_whole_read() {
        let text = "Sure.<tool_call>{\"name\": \"write\", \"arguments\": {\"path\": \"a}\\\"b\", \"n\": [1, {\"x\": 2}]}}</tool_call> Done.";
        for step in [1, 2, 3, 7, 100] {
            let mut reader = Reader::new("id");
            let pieces = pieces_of(&mut reader, text, step);
            let (final_text, calls) = reader.finish();
            let shown = texts(&pieces);
            let args: String = pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::CallArgs { index: 0, fragment } => Some(fragment.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(shown, "Sure. Done.", "step {step}");
            assert_eq!(final_text, "Sure. Done.");
            assert!(pieces.contains(&Piece::CallStart {
                index: 0,
                id: "id_0".into(),
                name: "write".into()
            }));
            let args: Value = serde_json::from_str(&args).unwrap();
            assert_eq!(args, json!({"path": "a}\"b", "n": [1, {"x": 2}]}));
            assert_eq!(Value::Object(calls[0].input.clone()), args);
            assert_eq!(calls[0].id, "id_0");
            if step == 1 {
                let fragments = pieces
                    .iter()
                    .filter(|p| matches!(p, Piece::CallArgs { .. }))
                    .count();
                assert!(fragments > 10, "arguments told in pieces: {fragments}");
            }
        }
    }

    #[test]
    fn a_required_call_is_read_from_the_first_byte_and_arguments_before_the_name_are_told_once_named()
     {
        let mut reader = Reader::call("r");
        let pieces = pieces_of(
            &mut reader,
            "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
            4,
        );
        assert_eq!(
            pieces.first(),
            Some(&Piece::CallStart {
                index: 0,
                id: "r_0".into(),
                name: "f".into()
            })
        );
        let (_, calls) = reader.finish();
        assert_eq!(calls[0].input["a"], 1);
        let mut reader = Reader::call("r");
        let pieces = pieces_of(
            &mut reader,
            "{\"arguments\": {\"a\": 1}, \"name\": \"f\"}",
            4,
        );
        assert_eq!(
            pieces,
            vec![
                Piece::CallStart {
                    index: 0,
                    id: "r_0".into(),
                    name: "f".into()
                },
                Piece::CallArgs {
                    index: 0,
                    fragment: "{\"a\": 1}".into()
                },
            ]
        );
    }

    #[test]
    fn a_bare_call_is_told_as_it_is_written_and_other_json_stays_text() {
        let mut reader = Reader::new("b");
        let text = "\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}";
        let pieces = pieces_of(&mut reader, text, 3);
        let fragments = pieces
            .iter()
            .filter(|p| matches!(p, Piece::CallArgs { .. }))
            .count();
        assert!(fragments > 2, "{pieces:?}");
        let (rest, calls) = reader.finish();
        assert_eq!((rest.trim(), calls[0].name.as_str()), ("", "f"));
        let mut reader = Reader::new("b");
        let pieces = pieces_of(&mut reader, "{\"answer\": 42} and so on", 2);
        let shown = texts(&pieces);
        assert_eq!(shown, "{\"answer\": 42} and so on");
        assert_eq!(
            reader.finish(),
            ("{\"answer\": 42} and so on".to_owned(), Vec::new())
        );
    }

    #[test]
    fn text_that_only_looks_like_a_tag_is_shown_once_it_cannot_be_one() {
        let mut reader = Reader::new("t");
        let mut pieces = reader.feed("a <tool");
        assert_eq!(pieces, vec![Piece::Text("a ".into())]);
        pieces = reader.feed("box> b");
        assert_eq!(pieces, vec![Piece::Text("<toolbox> b".into())]);
        assert_eq!(reader.finish().0, "a <toolbox> b");
    }

    #[test]
    fn the_call_items_of_a_value() {
        let v = json!({"tool_calls": [{"name": "a"}]});
        assert_eq!(call_items(&v).map(|i| i.len()), Some(1));
        assert_eq!(call_items(&json!({"x": 1})), None);
        assert_eq!(call_items(&json!([])), None);
        let item = json!({"name": "a", "input": "{\"k\": 1}"});
        assert_eq!(read_item(&item), ("a", json!({"k": 1})));
    }
}
