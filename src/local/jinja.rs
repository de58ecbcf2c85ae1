//! The environment chat templates run in, built on minijinja to render as Hugging Face
//! transformers renders them (`apply_chat_template`): jinja2's `ImmutableSandboxedEnvironment`
//! with `trim_blocks`, `lstrip_blocks`, loop controls and the `{% generation %}` tag, the
//! filter `tojson` as `json.dumps`, the globals `raise_exception` and `strftime_now`, Python's
//! string and dict methods (`minijinja_contrib::pycompat`), and values written as Python's
//! `str()` writes them (`None`, `True`, `['a']`).
//!
//! minijinja's values cannot be changed, as the immutable sandbox's cannot (`list.append`
//! fails in both). Where the two still differ, the real templates in `tests/data/templates`
//! (compared with jinja2 byte for byte) do not lean on it: `~` and `join` write values as
//! minijinja does (`true`, not `True`); Python methods pycompat lacks (`rsplit`, `partition`)
//! fail; a `{% set %}` inside `{% generation %}` is seen after it; and `strftime_now` reads
//! the clock in UTC, not in the server's time zone.

use crate::pyjson::{self, Style};
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use std::borrow::Cow;
use std::fmt::Write as _;

/// Sets up `env` as transformers sets up jinja2 for chat templates. The caller adds its own
/// formatter, which should write values with [`python_str`].
pub fn configure(env: &mut Environment<'_>) {
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_filter("string", |value: Value| python_str(&value));
    // jinja2's tests ask Python: `len()` and indexing for a sequence (strings and dicts
    // too), `iter()` for an iterable (not `None`, which minijinja iterates as empty).
    env.add_test("sequence", |value: Value| {
        matches!(
            value.kind(),
            ValueKind::Seq | ValueKind::String | ValueKind::Map
        )
    });
    env.add_test("iterable", |value: Value| {
        matches!(
            value.kind(),
            ValueKind::Seq
                | ValueKind::String
                | ValueKind::Map
                | ValueKind::Iterable
                | ValueKind::Undefined
        )
    });
    env.add_function("raise_exception", |message: String| -> Result<String, _> {
        Err(Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", |format: String| {
        strftime(&format, &Utc::now())
    });
}

/// The template with transformers' `{% generation %}` … `{% endgeneration %}` tags (which
/// mark the assistant's text for training masks and render their body as it is) rewritten as
/// `{% if true %}` … `{% endif %}`, whitespace control kept.
pub fn without_generation_tags(template: &str) -> Cow<'_, str> {
    if !template.contains("generation") {
        return Cow::Borrowed(template);
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{%") {
        let after = rest.get(start + 2..).unwrap_or("");
        let Some(end) = after.find("%}") else { break };
        let inner = after.get(..end).unwrap_or("");
        let lead = inner.get(..1).filter(|c| *c == "-" || *c == "+");
        let trail = inner
            .get(inner.len().saturating_sub(1)..)
            .filter(|c| *c == "-" || *c == "+");
        let word = inner.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(rest.get(..start).unwrap_or(""));
        let tag = match word {
            "generation" => "if true",
            "endgeneration" => "endif",
            _ => {
                out.push_str(rest.get(start..start + 2 + end + 2).unwrap_or(""));
                rest = after.get(end + 2..).unwrap_or("");
                continue;
            }
        };
        let _ = write!(
            out,
            "{{%{} {tag} {}%}}",
            lead.unwrap_or(""),
            trail.unwrap_or("")
        );
        rest = after.get(end + 2..).unwrap_or("");
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`: transformers'
/// filter, `json.dumps` with those arguments.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = kwargs
        .get::<Option<Value>>("indent")?
        .filter(|v| !v.is_none());
    let indent =
        match indent {
            None => None,
            Some(v) => Some(v.as_usize().ok_or_else(|| {
                invalid(format!("tojson: indent must be a whole number, not {v}"))
            })?),
        };
    let separators = kwargs
        .get::<Option<Value>>("separators")?
        .filter(|v| !v.is_none());
    let separators = match &separators {
        None => None,
        Some(v) => Some(pair(v)?),
    };
    kwargs.assert_all_used()?;
    if value.is_undefined() {
        return Err(invalid("tojson: the value is undefined".into()));
    }
    let json = serde_json::to_value(value).map_err(|e| invalid(format!("tojson: {e}")))?;
    let separators = separators.as_ref().map(|(a, b)| (a.as_str(), b.as_str()));
    Ok(pyjson::dumps(
        &json,
        Style::dumps(ensure_ascii, indent, separators, sort_keys),
    ))
}

/// `separators`: an item separator and a key separator.
fn pair(value: &Value) -> Result<(String, String), Error> {
    let expected = || {
        invalid(format!(
            "tojson: separators must be two strings, not {value}"
        ))
    };
    let items: Vec<Value> = value.try_iter().map_err(|_| expected())?.collect();
    match items.as_slice() {
        [a, b] => match (a.as_str(), b.as_str()) {
            (Some(a), Some(b)) => Ok((a.to_owned(), b.to_owned())),
            _ => Err(expected()),
        },
        _ => Err(expected()),
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// What Python's `str()` writes for a value: strings as they are, `None`, `True` and
/// `False`, floats as `repr`, lists and dicts with their items' `repr` (`['a', 1]`), and an
/// undefined value as nothing (jinja2's `Undefined`).
pub fn python_str(value: &Value) -> String {
    match value.as_str() {
        Some(s) => s.to_owned(),
        None if value.is_undefined() => String::new(),
        None => {
            let mut out = String::new();
            python_repr(&mut out, value);
            out
        }
    }
}

/// Python's `repr()` of a value, appended to `out`.
fn python_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::String => repr_str(out, value.as_str().unwrap_or("")),
        ValueKind::Number => {
            // minijinja writes integers as digits and floats with a point or an exponent.
            let shown = value.to_string();
            match f64::try_from(value.clone()) {
                Ok(f) if !shown.bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
                    out.push_str(&pyjson::python_float_repr(f));
                }
                _ => out.push_str(&shown),
            }
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = value.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    python_repr(out, &key);
                    out.push_str(": ");
                    let item = value.get_item(&key).unwrap_or(Value::UNDEFINED);
                    python_repr(out, &item);
                }
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = value.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    python_repr(out, &item);
                }
            }
            out.push(']');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// Python's `repr()` of a string: in single quotes, or double ones when it holds a single
/// quote and no double one; backslashes, the quote and control characters escaped.
fn repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// A moment in UTC, split into the fields `strftime` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Utc {
    year: i64,
    /// 1 to 12.
    month: u32,
    /// 1 to 31.
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    /// 0 (Monday) to 6.
    weekday: u32,
    /// 1 to 366.
    yearday: u32,
}

impl Utc {
    fn now() -> Utc {
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Utc::at(i64::try_from(seconds).unwrap_or(i64::MAX))
    }

    /// The moment `seconds` after 1970-01-01T00:00:00Z (days to dates after Howard Hinnant's
    /// `civil_from_days`).
    fn at(seconds: i64) -> Utc {
        let days = seconds.div_euclid(86_400);
        let time = seconds.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let month_index = usize::try_from(month - 1).unwrap_or(0);
        let yearday =
            before.get(month_index).copied().unwrap_or(0) + day + i64::from(leap && month > 2);
        let field = |v: i64| u32::try_from(v).unwrap_or(0);
        Utc {
            year,
            month: field(month),
            day: field(day),
            hour: field(time / 3600),
            minute: field(time % 3600 / 60),
            second: field(time % 60),
            // 1970-01-01 was a Thursday.
            weekday: field((days + 3).rem_euclid(7)),
            yearday: field(yearday),
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `datetime.strftime(format)` for the directives chat templates use (in the C locale, as
/// Python writes them); another directive is an error that names it.
fn strftime(format: &str, t: &Utc) -> Result<String, Error> {
    let month = MONTHS
        .get(usize::try_from(t.month).unwrap_or(0).wrapping_sub(1))
        .copied()
        .unwrap_or("");
    let weekday = WEEKDAYS
        .get(usize::try_from(t.weekday).unwrap_or(0))
        .copied()
        .unwrap_or("");
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // `%-d`: glibc's flag for a number without padding, which Python passes through.
        let mut directive = chars.next();
        let padded = directive != Some('-');
        if !padded {
            directive = chars.next();
        }
        let number = |out: &mut String, value: i64, width: usize| {
            let _ = if padded {
                write!(out, "{value:0width$}")
            } else {
                write!(out, "{value}")
            };
        };
        match directive {
            Some('Y') => number(&mut out, t.year, 4),
            Some('y') => number(&mut out, t.year.rem_euclid(100), 2),
            Some('m') => number(&mut out, t.month.into(), 2),
            Some('d') => number(&mut out, t.day.into(), 2),
            Some('e') => {
                let _ = write!(out, "{:>2}", t.day);
            }
            Some('j') => number(&mut out, t.yearday.into(), 3),
            Some('H') => number(&mut out, t.hour.into(), 2),
            Some('I') => number(&mut out, ((t.hour + 11) % 12 + 1).into(), 2),
            Some('M') => number(&mut out, t.minute.into(), 2),
            Some('S') => number(&mut out, t.second.into(), 2),
            Some('p') => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(month),
            Some('b' | 'h') => out.push_str(month.get(..3).unwrap_or("")),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(weekday.get(..3).unwrap_or("")),
            Some('%') => out.push('%'),
            other => {
                return Err(invalid(format!(
                    "strftime_now: the directive %{} is not supported (expected one of \
                     %Y %y %m %d %e %j %H %I %M %S %p %B %b %A %a %%)",
                    other.map(String::from).unwrap_or_default()
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_as_strftime_writes_them() {
        // 2024-07-26T13:25:09Z, a Friday, the 208th day of a leap year.
        let t = Utc::at(1_722_000_309);
        assert_eq!(
            (t.year, t.month, t.day, t.hour, t.minute, t.second),
            (2024, 7, 26, 13, 25, 9)
        );
        assert_eq!(
            strftime("%d %b %Y|%B %-d, %Y|%A %a %j|%I%p %y-%m-%d %%", &t).unwrap(),
            "26 Jul 2024|July 26, 2024|Friday Fri 208|01PM 24-07-26 %"
        );
        let t = Utc::at(0);
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %A", &t).unwrap(),
            "1970-01-01 00:00:00 Thursday"
        );
        let t = Utc::at(951_782_400); // 2000-02-29
        assert_eq!(strftime("%Y-%m-%d %j", &t).unwrap(), "2000-02-29 060");
        let e = strftime("%Q", &t).unwrap_err().to_string();
        assert!(e.contains("%Q is not supported"), "{e}");
    }

    #[test]
    fn generation_tags_become_plain_blocks() {
        let t = "a{% generation %}b{%- endgeneration -%}c{{ 'generation' }}{% if x %}{% endif %}";
        assert_eq!(
            without_generation_tags(t),
            "a{% if true %}b{%- endif -%}c{{ 'generation' }}{% if x %}{% endif %}"
        );
        assert!(matches!(
            without_generation_tags("{{ x }}"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn values_are_written_as_python_writes_them() {
        let v = Value::from_serialize(serde_json::json!(
            {"a": [1, 2.5, 1e20, true, null, "it's", "q\"'\n"], "b": {}}
        ));
        assert_eq!(
            python_str(&v),
            r#"{'a': [1, 2.5, 1e+20, True, None, "it's", 'q"\'\n'], 'b': {}}"#
        );
        assert_eq!(python_str(&Value::from(false)), "False");
        assert_eq!(python_str(&Value::UNDEFINED), "");
        assert_eq!(python_str(&Value::from(3.0)), "3.0");
    }
}
