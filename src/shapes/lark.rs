//! A freeform tool's Lark grammar (the Responses API's `format: {type: "grammar", syntax:
//! "lark"}`) as one regular expression, when the grammar is regular: its rules inlined from
//! `start`, none of them recursive. The expression goes into the tool's JSON Schema as the
//! `pattern` of its text, where a grammar-constrained decoder (llguidance on the embedded
//! model) holds the call to it inside the JSON string, and a validator checks a provider's call.
//!
//! What a regular expression cannot say is refused with the reason: a recursive rule, `%ignore`
//! (tokens skipped between any two others), a name neither defined nor in Lark's `common`
//! library, llguidance's own extensions (`%json`, `%llguidance`, …).

use std::collections::HashMap;

/// The most bytes the inlined expression may have (rules used many times are copied where used).
pub const MAX_PATTERN_BYTES: usize = 64 * 1024;

/// Why a Lark grammar has no regular expression here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

fn unsupported<T>(why: impl Into<String>) -> Result<T, Unsupported> {
    Err(Unsupported(why.into()))
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Literal(String, bool),
    Regex(String, String),
    Op(char),
    Arrow,
    Range,
    Number(u32),
    Statement(String),
}

/// The grammar `definition` as a regular expression (Rust `regex` syntax) matching what its
/// `start` rule derives, unanchored.
pub fn to_regex(definition: &str) -> Result<String, Unsupported> {
    let tokens = tokens(definition)?;
    let rules = definitions(&tokens)?;
    let mut out = Inliner {
        rules: &rules,
        stack: Vec::new(),
    };
    let start = out.reference("start")?;
    if start.len() > MAX_PATTERN_BYTES {
        return unsupported(format!(
            "its rules inlined are over {MAX_PATTERN_BYTES} bytes"
        ));
    }
    Ok(start)
}

/// The grammar's tokens; comments and line ends dropped, `%` statements kept whole.
fn tokens(text: &str) -> Result<Vec<Token>, Unsupported> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    // Only blanks since the line began: a `?` or `!` here is a rule's modifier.
    let mut line_start = true;
    while let Some(&c) = chars.get(i) {
        i += 1;
        let at_line_start = std::mem::replace(&mut line_start, c == '\n');
        match c {
            c if c.is_whitespace() => line_start = line_start || at_line_start,
            '/' if chars.get(i) == Some(&'/') => i = line_end(&chars, i),
            '#' => i = line_end(&chars, i),
            '%' => {
                let start = i;
                i = line_end(&chars, i);
                out.push(Token::Statement(chars_between(&chars, start, i)));
            }
            '"' => i = literal(&chars, i, &mut out)?,
            '/' => i = regex_token(&chars, i, &mut out)?,
            '-' if chars.get(i) == Some(&'>') => {
                i += 1;
                out.push(Token::Arrow);
            }
            '.' if chars.get(i) == Some(&'.') => {
                i += 1;
                out.push(Token::Range);
            }
            c if c.is_ascii_digit() => i = number(&chars, i - 1, &mut out)?,
            '?' | '!' if at_line_start => i = name(&chars, i, &mut out),
            c if c.is_alphabetic() || c == '_' => i = name(&chars, i - 1, &mut out),
            ':' | '|' | '(' | ')' | '[' | ']' | '*' | '+' | '~' | ',' | '.' | '?' => {
                out.push(Token::Op(c));
            }
            other => return unsupported(format!("the character {other:?} is not Lark")),
        }
    }
    Ok(out)
}

/// Where the line that `i` is on ends (at its `\n`, or the text's end).
fn line_end(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|&c| c != '\n') {
        i += 1;
    }
    i
}

/// A quoted literal after its opening quote at `start - 1`, with its `i` flag; returns where
/// it ends.
fn literal(chars: &[char], start: usize, out: &mut Vec<Token>) -> Result<usize, Unsupported> {
    let (literal, mut i) = quoted(chars, start, '"')?;
    let insensitive = chars.get(i) == Some(&'i');
    if insensitive {
        i += 1;
    }
    out.push(Token::Literal(literal, insensitive));
    Ok(i)
}

/// A regular expression after its opening slash at `start - 1`, with its flags; returns where
/// it ends.
fn regex_token(chars: &[char], start: usize, out: &mut Vec<Token>) -> Result<usize, Unsupported> {
    let (regex, mut i) = regex(chars, start)?;
    let mut flags = String::new();
    while let Some(&f) = chars.get(i).filter(|c| c.is_ascii_lowercase()) {
        flags.push(f);
        i += 1;
    }
    out.push(Token::Regex(regex, flags));
    Ok(i)
}

/// A repeat count from `start`; returns where it ends.
fn number(chars: &[char], start: usize, out: &mut Vec<Token>) -> Result<usize, Unsupported> {
    let mut i = start + 1;
    while chars.get(i).is_some_and(char::is_ascii_digit) {
        i += 1;
    }
    let n = chars_between(chars, start, i)
        .parse()
        .map_err(|_| Unsupported("a repeat count too large".into()))?;
    out.push(Token::Number(n));
    Ok(i)
}

fn chars_between(chars: &[char], start: usize, end: usize) -> String {
    chars.get(start..end).unwrap_or_default().iter().collect()
}

/// A rule or terminal name from `start` (a `.N` priority after it skipped); returns where it
/// ends.
fn name(chars: &[char], start: usize, out: &mut Vec<Token>) -> usize {
    let mut i = start;
    while chars
        .get(i)
        .is_some_and(|&c| c.is_alphanumeric() || c == '_')
    {
        i += 1;
    }
    out.push(Token::Name(chars_between(chars, start, i)));
    // A priority (`name.2:`) says nothing a regular expression keeps.
    if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
        i += 1;
        while chars.get(i).is_some_and(char::is_ascii_digit) {
            i += 1;
        }
    }
    i
}

/// A string literal after its opening quote: its text, and where it ends.
fn quoted(chars: &[char], mut i: usize, close: char) -> Result<(String, usize), Unsupported> {
    let mut text = String::new();
    while let Some(&c) = chars.get(i) {
        i += 1;
        if c == close {
            return Ok((text, i));
        }
        if c != '\\' {
            text.push(c);
            continue;
        }
        let Some(&e) = chars.get(i) else { break };
        i += 1;
        text.push(match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'f' => '\u{c}',
            '0' => '\0',
            other => other,
        });
    }
    unsupported("a string literal is not closed")
}

/// A regular expression after its opening slash: its text (escaped slashes unescaped), and
/// where it ends.
fn regex(chars: &[char], mut i: usize) -> Result<(String, usize), Unsupported> {
    let mut text = String::new();
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '/' => return Ok((text, i)),
            '\\' if chars.get(i) == Some(&'/') => {
                text.push('/');
                i += 1;
            }
            '\\' => {
                text.push('\\');
                if let Some(&e) = chars.get(i) {
                    text.push(e);
                    i += 1;
                }
            }
            '\n' => break,
            c => text.push(c),
        }
    }
    unsupported("a regular expression is not closed")
}

/// A piece of a rule's body.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Alternatives(Vec<Node>),
    Sequence(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
    Literal(String, bool),
    Regex(String, String),
    Span(char, char),
    Reference(String),
}

/// The rules and terminals by name, and the names imported from Lark's `common`.
#[derive(Debug, Default)]
struct Rules {
    bodies: HashMap<String, Node>,
}

/// Splits the tokens at each `NAME :` into definitions and parses each body.
fn definitions(tokens: &[Token]) -> Result<Rules, Unsupported> {
    let mut rules = Rules::default();
    let mut heads = Vec::new();
    for (i, pair) in tokens.windows(2).enumerate() {
        if let [Token::Name(_), Token::Op(':')] = pair {
            heads.push(i);
        }
    }
    let first = heads.first().copied().unwrap_or(tokens.len());
    statements(tokens.get(..first).unwrap_or_default(), &mut rules)?;
    for (n, &head) in heads.iter().enumerate() {
        let end = heads.get(n + 1).copied().unwrap_or(tokens.len());
        let Some(Token::Name(name)) = tokens.get(head) else {
            continue;
        };
        let body = tokens.get(head + 2..end).unwrap_or_default();
        // Statements written after the rule's last line belong to no rule.
        let split = body
            .iter()
            .position(|t| matches!(t, Token::Statement(_)))
            .unwrap_or(body.len());
        let (expression, after) = body.split_at(split);
        let mut parser = Parser {
            tokens: expression,
            at: 0,
        };
        let node = parser.alternatives()?;
        if let Some(extra) = parser.tokens.get(parser.at) {
            return unsupported(format!("{extra:?} in the rule {name} is not understood"));
        }
        rules.bodies.insert(name.clone(), node);
        statements(after, &mut rules)?;
    }
    Ok(rules)
}

/// `%import common.NAME` (and `%import common (A, B)`) make Lark's common terminals known; the
/// statements a regular expression cannot hold are refused.
fn statements(tokens: &[Token], rules: &mut Rules) -> Result<(), Unsupported> {
    for token in tokens {
        let Token::Statement(text) = token else {
            return unsupported(format!("{token:?} stands outside any rule"));
        };
        let mut words = text.split_whitespace();
        match words.next() {
            Some("import") => {
                let rest: String = words.collect::<Vec<_>>().join(" ");
                for name in imported(&rest)? {
                    let Some(regex) = common(&name) else {
                        return unsupported(format!("common.{name} is not known here"));
                    };
                    rules
                        .bodies
                        .insert(name, Node::Regex(regex.to_owned(), String::new()));
                }
            }
            Some(other) => {
                return unsupported(format!("%{other} has no regular expression"));
            }
            None => return unsupported("an empty % statement"),
        }
    }
    Ok(())
}

/// The names an `%import` of Lark's `common` brings.
fn imported(rest: &str) -> Result<Vec<String>, Unsupported> {
    if let Some(list) = rest.strip_prefix("common") {
        let list = list.trim();
        if let Some(name) = list.strip_prefix('.') {
            if name.contains("->") {
                return unsupported("an import under another name");
            }
            return Ok(vec![name.trim().to_owned()]);
        }
        if let Some(inner) = list.strip_prefix('(').and_then(|l| l.strip_suffix(')')) {
            return Ok(inner
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect());
        }
    }
    unsupported(format!("%import {rest} is not of Lark's common library"))
}

/// Lark's `common` terminals, as regular expressions.
fn common(name: &str) -> Option<&'static str> {
    Some(match name {
        "LF" => r"\n",
        "CR" => r"\r",
        "NEWLINE" => r"(?:\r?\n)+",
        "WS" => r"[ \t\x0c\r\n]+",
        "WS_INLINE" => r"[ \t]+",
        "DIGIT" => "[0-9]",
        "HEXDIGIT" => "[a-fA-F0-9]",
        "INT" => "[0-9]+",
        "SIGNED_INT" => "[+-]?[0-9]+",
        "DECIMAL" => r"(?:[0-9]+\.[0-9]*|\.[0-9]+)",
        "FLOAT" => r"(?:[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)",
        "NUMBER" => {
            r"(?:[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+)"
        }
        "LETTER" => "[A-Za-z]",
        "LCASE_LETTER" => "[a-z]",
        "UCASE_LETTER" => "[A-Z]",
        "WORD" => "[A-Za-z]+",
        "CNAME" => "[_A-Za-z][_A-Za-z0-9]*",
        "ESCAPED_STRING" => r#""(?:[^"\\]|\\.)*""#,
        "SH_COMMENT" => r"#[^\n]*",
        "CPP_COMMENT" => r"//[^\n]*",
        _ => return None,
    })
}

/// A recursive-descent reader of one rule's body.
struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, op: char) -> bool {
        let found = self.peek() == Some(&Token::Op(op));
        if found {
            self.at += 1;
        }
        found
    }

    /// `a | b | …`, each maybe with `-> alias` (which a regular expression does not keep).
    fn alternatives(&mut self) -> Result<Node, Unsupported> {
        let mut options = vec![self.sequence()?];
        loop {
            if self.peek() == Some(&Token::Arrow) {
                self.at += 1;
                match self.peek() {
                    Some(Token::Name(_)) => self.at += 1,
                    _ => return unsupported("`->` without a name"),
                }
            }
            if !self.eat('|') {
                break;
            }
            options.push(self.sequence()?);
        }
        Ok(match options.len() {
            1 => options.pop().unwrap_or(Node::Sequence(Vec::new())),
            _ => Node::Alternatives(options),
        })
    }

    fn sequence(&mut self) -> Result<Node, Unsupported> {
        let mut items = Vec::new();
        while let Some(item) = self.item()? {
            items.push(item);
        }
        Ok(match items.len() {
            1 => items.pop().unwrap_or(Node::Sequence(Vec::new())),
            _ => Node::Sequence(items),
        })
    }

    /// An atom and its operator (`?`, `*`, `+`, `~ n`, `~ n..m`); `None` at a sequence's end.
    fn item(&mut self) -> Result<Option<Node>, Unsupported> {
        let Some(atom) = self.atom()? else {
            return Ok(None);
        };
        let node = if self.eat('?') {
            Node::Repeat(Box::new(atom), 0, Some(1))
        } else if self.eat('*') {
            Node::Repeat(Box::new(atom), 0, None)
        } else if self.eat('+') {
            Node::Repeat(Box::new(atom), 1, None)
        } else if self.eat('~') {
            let low = self.number()?;
            let high = if self.peek() == Some(&Token::Range) {
                self.at += 1;
                self.number()?
            } else {
                low
            };
            Node::Repeat(Box::new(atom), low, Some(high))
        } else {
            atom
        };
        Ok(Some(node))
    }

    fn number(&mut self) -> Result<u32, Unsupported> {
        match self.peek() {
            Some(&Token::Number(n)) => {
                self.at += 1;
                Ok(n)
            }
            _ => unsupported("`~` without a count"),
        }
    }

    fn atom(&mut self) -> Result<Option<Node>, Unsupported> {
        let Some(token) = self.peek().cloned() else {
            return Ok(None);
        };
        let node = match token {
            Token::Op('(') => self.group(')')?,
            Token::Op('[') => Node::Repeat(Box::new(self.group(']')?), 0, Some(1)),
            Token::Literal(text, insensitive) => {
                self.at += 1;
                self.span(text, insensitive)?
            }
            Token::Regex(regex, flags) => {
                self.at += 1;
                Node::Regex(regex, flags)
            }
            Token::Name(name) => {
                self.at += 1;
                Node::Reference(name)
            }
            _ => return Ok(None),
        };
        Ok(Some(node))
    }

    /// A literal, or a span of characters (`"a".."z"`).
    fn span(&mut self, text: String, insensitive: bool) -> Result<Node, Unsupported> {
        if self.peek() != Some(&Token::Range) {
            return Ok(Node::Literal(text, insensitive));
        }
        self.at += 1;
        let Some(Token::Literal(high, _)) = self.peek().cloned() else {
            return unsupported("`..` without a closing literal");
        };
        self.at += 1;
        let mut low_chars = text.chars();
        let mut high_chars = high.chars();
        match (
            low_chars.next(),
            low_chars.next(),
            high_chars.next(),
            high_chars.next(),
        ) {
            (Some(low), None, Some(high), None) if low <= high => Ok(Node::Span(low, high)),
            _ => unsupported("a span of characters between more than one character"),
        }
    }

    fn group(&mut self, close: char) -> Result<Node, Unsupported> {
        self.at += 1;
        let inner = self.alternatives()?;
        if !self.eat(close) {
            return unsupported(format!("a group is not closed by {close:?}"));
        }
        Ok(inner)
    }
}

/// Writes a rule's body as a regular expression, its references inlined.
struct Inliner<'a> {
    rules: &'a Rules,
    /// The rules being written (a rule met again is recursive).
    stack: Vec<String>,
}

impl Inliner<'_> {
    fn reference(&mut self, name: &str) -> Result<String, Unsupported> {
        if self.stack.iter().any(|n| n == name) {
            return unsupported(format!("the rule {name} is recursive"));
        }
        let Some(body) = self.rules.bodies.get(name) else {
            return unsupported(format!("{name} is not defined"));
        };
        self.stack.push(name.to_owned());
        let written = self.write(body);
        self.stack.pop();
        written
    }

    fn write(&mut self, node: &Node) -> Result<String, Unsupported> {
        let out = match node {
            Node::Alternatives(options) => {
                let written = options
                    .iter()
                    .map(|o| self.write(o))
                    .collect::<Result<Vec<_>, _>>()?;
                format!("(?:{})", written.join("|"))
            }
            Node::Sequence(items) => items
                .iter()
                .map(|i| self.write(i))
                .collect::<Result<String, _>>()?,
            Node::Repeat(inner, low, high) => {
                let inner = self.write(inner)?;
                let times = match (low, high) {
                    (0, Some(1)) => "?".to_owned(),
                    (0, None) => "*".to_owned(),
                    (1, None) => "+".to_owned(),
                    (low, None) => format!("{{{low},}}"),
                    (low, Some(high)) if low == high => format!("{{{low}}}"),
                    (low, Some(high)) => format!("{{{low},{high}}}"),
                };
                format!("(?:{inner}){times}")
            }
            Node::Literal(text, false) => escape(text),
            Node::Literal(text, true) => format!("(?i:{})", escape(text)),
            Node::Regex(regex, flags) => {
                let flags: String = flags.chars().filter(|f| "imsx".contains(*f)).collect();
                format!("(?{flags}:{regex})")
            }
            Node::Span(low, high) => format!("[{}-{}]", escape_char(*low), escape_char(*high)),
            Node::Reference(name) => format!("(?:{})", self.reference(name)?),
        };
        if out.len() > MAX_PATTERN_BYTES {
            return unsupported(format!(
                "its rules inlined are over {MAX_PATTERN_BYTES} bytes"
            ));
        }
        Ok(out)
    }
}

/// `text` matched literally, in a syntax both Rust's `regex` and ECMAScript read (JSON Schema
/// validators take ECMAScript patterns).
fn escape(text: &str) -> String {
    text.chars().map(escape_char).collect()
}

fn escape_char(c: char) -> String {
    match c {
        '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
        | '/' | '-' => format!("\\{c}"),
        '\n' => "\\n".into(),
        '\t' => "\\t".into(),
        '\r' => "\\r".into(),
        c if c.is_control() && (c as u32) < 0x100 => format!("\\x{:02x}", c as u32),
        c => c.to_string(),
    }
}

/// Codex's `apply_patch` grammar, as Codex CLI sends it.
#[cfg(test)]
pub const APPLY_PATCH: &str = include_str!("../../tests/data/apply_patch.lark");

#[cfg(test)]
mod tests {
    use super::*;

    use super::APPLY_PATCH;

    fn matches(grammar: &str, text: &str) -> bool {
        let pattern = format!("^(?:{})$", to_regex(grammar).unwrap());
        regex::Regex::new(&pattern).unwrap().is_match(text)
    }

    #[test]
    fn codex_apply_patch_grammar_is_one_expression() {
        let patch = "*** Begin Patch\n*** Update File: src/a.py\n@@ def f():\n-    pass\n+    return 1\n*** Add File: b.txt\n+hello\n*** End Patch";
        assert!(matches(APPLY_PATCH, patch));
        assert!(matches(APPLY_PATCH, &format!("{patch}\n")));
        assert!(!matches(APPLY_PATCH, "*** Begin Patch\n*** End Patch"));
        assert!(!matches(APPLY_PATCH, "diff --git a/x b/x"));
        assert!(!matches(
            APPLY_PATCH,
            "*** Begin Patch\n*** Add File: b.txt\nhello\n*** End Patch"
        ));
    }

    #[test]
    fn codex_exec_grammar_takes_a_pragma_line_or_plain_source() {
        let exec = "\nstart: pragma_source | plain_source\npragma_source: PRAGMA_LINE NEWLINE SOURCE\nplain_source: SOURCE\n\nPRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\nNEWLINE: /\\r?\\n/\nSOURCE: /[\\s\\S]+/\n";
        assert!(matches(exec, "// @exec: {\"yield_time_ms\": 10}\ntext(1)"));
        assert!(matches(exec, "text(await tools.exec_command({cmd: 'ls'}))"));
        assert!(!matches(exec, ""));
    }

    #[test]
    fn lark_operators_imports_and_flags_become_their_regex() {
        let g = "start: greeting (\",\" NAME)~1..2 [\"!\"] \"x\"i\nNAME: (\"a\"..\"c\")+\n?greeting: /hel+o/i | DIGIT\n%import common (DIGIT, WS)\n// a comment";
        assert!(matches(g, "HELLO,ab,cX"));
        assert!(matches(g, "7,a!x"));
        assert!(!matches(g, "hello"));
        assert!(!matches(g, "hello,a,b,c,x"));
        assert!(!matches(g, "hello,d,x"));
    }

    #[test]
    fn what_a_regex_cannot_say_is_refused_with_its_reason() {
        let recursive = to_regex("start: \"(\" start \")\" | \"x\"").unwrap_err();
        assert!(recursive.0.contains("recursive"), "{recursive}");
        let ignored = to_regex("start: WORD+\n%import common.WORD\n%ignore \" \"").unwrap_err();
        assert!(ignored.0.contains("%ignore"), "{ignored}");
        let unknown = to_regex("start: thing").unwrap_err();
        assert!(unknown.0.contains("thing"), "{unknown}");
        let json = to_regex("start: %json {\"type\": \"object\"}").unwrap_err();
        assert!(json.0.contains("%json"), "{json}");
        // Many uses of a rule of many uses grow past the bound rather than without one.
        let mut g = String::from("start: r0\n");
        for i in 0..24 {
            g.push_str(&format!("r{i}: r{n} r{n}\n", n = i + 1));
        }
        g.push_str("r24: \"ab\"\n");
        assert!(to_regex(&g).unwrap_err().0.contains("bytes"));
    }
}
