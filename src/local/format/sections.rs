//! The call sections of each family, read from the text after the marker that opened them:
//! each reading starts again from the section's beginning (sections are short), so what a
//! reading of part of the text finds, a reading of more of it extends.

use super::Tools;
use super::scan::{
    COMMAND, Cursor, Keys, NAME_ARGS, Partial, Step, Stop, call_objects, push_param, raw_args,
};

/// How a section is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Call objects (one, or a list) in JSON, closed by `close` when there is one.
    Json {
        close: Option<&'static str>,
        keys: Keys,
    },
    /// A whole answer that may be a call (bare or fenced JSON): text if it is not.
    Bare,
    /// Mistral's `NAME[ARGS]{…}` (with an optional `[CALL_ID]id`).
    MistralArgs,
    /// DeepSeek's `<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>` calls, in R1's or V3.1's spelling.
    DeepSeek,
    /// Kimi K2's `<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}`.
    Kimi,
    /// Qwen3-Coder's `<function=NAME><parameter=K>V</parameter></function></tool_call>`.
    Coder,
    /// GLM's `NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`.
    Glm,
    /// A gpt-oss (harmony) message's header up to `<|message|>`, and a call's arguments.
    Harmony,
}

impl Kind {
    pub const HERMES: Kind = Kind::Json {
        close: Some("</tool_call>"),
        keys: NAME_ARGS,
    };
    pub const COMMAND_R: Kind = Kind::Json {
        close: Some("<|END_ACTION|>"),
        keys: COMMAND,
    };
}

/// What follows a section that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Text,
    /// Reasoning (a harmony analysis message), up to `<|end|>`.
    Reasoning,
}

/// A section as far as it is read.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub calls: Vec<Partial>,
    /// Bytes the section took, once it ended.
    pub end: Option<usize>,
    pub then: Then,
    /// Not this family's syntax: the section is text (and its trigger with it).
    pub bad: bool,
}

/// Reads a section's text (after its opening marker `opened_by`).
pub fn read(kind: Kind, opened_by: &str, text: &str, tools: &Tools) -> Section {
    let mut c = Cursor::new(text);
    let mut calls = Vec::new();
    let mut then = Then::Text;
    let step = match kind {
        Kind::Json { close, keys } => json(&mut c, &mut calls, close, keys),
        Kind::Bare => bare(&mut c, &mut calls),
        Kind::MistralArgs => mistral(&mut c, &mut calls),
        Kind::DeepSeek => deepseek(&mut c, &mut calls),
        Kind::Kimi => kimi(&mut c, &mut calls),
        Kind::Coder => coder(&mut c, &mut calls, tools),
        Kind::Glm => glm(&mut c, &mut calls, tools),
        Kind::Harmony => harmony(&mut c, &mut calls, opened_by, &mut then),
    };
    Section {
        end: step.is_ok().then_some(c.at),
        bad: step == Err(Stop::Bad),
        calls,
        then,
    }
}

fn json(c: &mut Cursor<'_>, calls: &mut Vec<Partial>, close: Option<&str>, keys: Keys) -> Step<()> {
    call_objects(c, calls, keys)?;
    if let Some(close) = close {
        c.ws();
        c.lit(close)?;
    }
    Ok(())
}

fn bare(c: &mut Cursor<'_>, calls: &mut Vec<Partial>) -> Step<()> {
    c.ws();
    let fenced = c.peek("```")?;
    if fenced {
        let _ = c.peek("json")?;
    }
    call_objects(c, calls, NAME_ARGS)?;
    if fenced {
        c.ws();
        c.lit("```")?;
    }
    Ok(())
}

fn mistral(c: &mut Cursor<'_>, calls: &mut Vec<Partial>) -> Step<()> {
    let name = match c.before_any(&["[ARGS]", "[CALL_ID]"]) {
        Err(Stop::More) if c.rest().contains(['{', '\n']) => return Err(Stop::Bad),
        name => name?,
    };
    if name.trim().is_empty() || name.contains(['{', '\n', '[']) {
        return Err(Stop::Bad);
    }
    calls.push(Partial {
        name: Some(name.trim().to_owned()),
        ..Partial::default()
    });
    if c.peek("[CALL_ID]")? {
        c.until("[ARGS]")?;
    } else {
        c.lit("[ARGS]")?;
    }
    let call = calls.last_mut().ok_or(Stop::Bad)?;
    raw_args(c, call)
}

const DS_CALL: &str = "<｜tool▁call▁begin｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_END: &str = "<｜tool▁calls▁end｜>";

fn deepseek(c: &mut Cursor<'_>, calls: &mut Vec<Partial>) -> Step<()> {
    loop {
        c.ws();
        if c.peek(DS_END)? {
            return Ok(());
        }
        c.lit(DS_CALL)?;
        let before = c.until(DS_SEP)?;
        // R1 and V3 write `function<sep>NAME\n```json\n{…}\n```; V3.1 writes `NAME<sep>{…}`.
        let fenced = before.trim() == "function";
        let name = if fenced {
            c.until("\n")?.trim()
        } else {
            before.trim()
        };
        calls.push(Partial {
            name: Some(name.to_owned()),
            ..Partial::default()
        });
        if fenced {
            c.ws();
            c.lit("```")?;
            let _ = c.peek("json")?;
            c.ws();
        }
        let call = calls.last_mut().ok_or(Stop::Bad)?;
        raw_args(c, call)?;
        if fenced {
            c.ws();
            c.lit("```")?;
        }
        c.ws();
        c.lit(DS_CALL_END)?;
    }
}

fn kimi(c: &mut Cursor<'_>, calls: &mut Vec<Partial>) -> Step<()> {
    loop {
        c.ws();
        if c.peek("<|tool_calls_section_end|>")? {
            return Ok(());
        }
        c.lit("<|tool_call_begin|>")?;
        let id = c.until("<|tool_call_argument_begin|>")?.trim();
        // `functions.NAME:INDEX`
        let name = id.strip_prefix("functions.").unwrap_or(id);
        let name = name.rsplit_once(':').map_or(name, |(n, _)| n);
        calls.push(Partial {
            name: Some(name.to_owned()),
            ..Partial::default()
        });
        let call = calls.last_mut().ok_or(Stop::Bad)?;
        raw_args(c, call)?;
        c.ws();
        c.lit("<|tool_call_end|>")?;
    }
}

fn coder(c: &mut Cursor<'_>, calls: &mut Vec<Partial>, tools: &Tools) -> Step<()> {
    c.ws();
    c.lit("<function=")?;
    let name = c.until(">")?;
    calls.push(Partial {
        name: Some(name.trim().to_owned()),
        args: "{".into(),
        done: false,
    });
    let call = calls.last_mut().ok_or(Stop::Bad)?;
    loop {
        c.ws();
        if c.peek("</function>")? {
            break;
        }
        c.lit("<parameter=")?;
        let key = c.until(">")?.trim();
        let raw = c.until("</parameter>")?;
        push_param(call, tools, key, trim_newline(raw));
    }
    call.args.push('}');
    call.done = true;
    c.ws();
    c.lit("</tool_call>")
}

fn glm(c: &mut Cursor<'_>, calls: &mut Vec<Partial>, tools: &Tools) -> Step<()> {
    c.ws();
    let name = c.before_any(&["\n", "<arg_key>", "</tool_call>"])?.trim();
    if name.is_empty() || name.contains(['{', '<']) {
        return Err(Stop::Bad);
    }
    calls.push(Partial {
        name: Some(name.to_owned()),
        args: "{".into(),
        done: false,
    });
    let call = calls.last_mut().ok_or(Stop::Bad)?;
    loop {
        c.ws();
        if c.peek("</tool_call>")? {
            call.args.push('}');
            call.done = true;
            return Ok(());
        }
        c.lit("<arg_key>")?;
        let key = c.until("</arg_key>")?.trim();
        c.ws();
        c.lit("<arg_value>")?;
        let raw = c.until("</arg_value>")?;
        push_param(call, tools, key, raw);
    }
}

/// A harmony header, opened by `<|start|>` (`assistant to=functions.f<|channel|>…`) or by
/// `<|channel|>` (`commentary to=functions.f <|constrain|>json`), up to `<|message|>`; a call's
/// arguments after it.
fn harmony(
    c: &mut Cursor<'_>,
    calls: &mut Vec<Partial>,
    opened_by: &str,
    then: &mut Then,
) -> Step<()> {
    let header = c.until("<|message|>")?;
    let channel_part = if opened_by == "<|channel|>" {
        header
    } else {
        header.split_once("<|channel|>").map_or("", |(_, ch)| ch)
    };
    let channel = channel_part.split([' ', '<']).next().unwrap_or("").trim();
    let recipient = header
        .split_once("to=")
        .map(|(_, r)| r.split([' ', '<']).next().unwrap_or("").trim());
    match recipient {
        Some(to) if !to.is_empty() => {
            let name = to.strip_prefix("functions.").unwrap_or(to);
            calls.push(Partial {
                name: Some(name.to_owned()),
                ..Partial::default()
            });
            let call = calls.last_mut().ok_or(Stop::Bad)?;
            c.ws();
            raw_args(c, call)?;
            c.ws();
            // `<|call|>` ends the answer; written anyway, it ends the section.
            let _ = c.peek("<|call|>")? || c.peek("<|end|>")?;
            Ok(())
        }
        _ => {
            if channel == "analysis" {
                *then = Then::Reasoning;
            }
            Ok(())
        }
    }
}

/// A raw parameter value without the line breaks that frame it.
fn trim_newline(raw: &str) -> &str {
    let raw = raw.strip_prefix('\n').unwrap_or(raw);
    raw.strip_suffix('\n').unwrap_or(raw)
}
