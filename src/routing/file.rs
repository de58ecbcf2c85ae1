//! The models file (`--models FILE`): named models, each answered by the host, the local model
//! or a provider, in TOML. Read once at start; every problem is refused with the file, the line
//! and what is wrong, and a key is named by its variable only.

use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Which backend answers an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Host,
    Local,
    Provider,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Host => "host",
            Kind::Local => "local",
            Kind::Provider => "provider",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    default: Option<Spanned<String>>,
    #[serde(default)]
    models: Vec<Spanned<RawEntry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    name: Spanned<String>,
    #[serde(default)]
    aliases: Vec<Spanned<String>>,
    backend: Kind,
    url: Option<String>,
    model: Option<String>,
    key_env: Option<Spanned<String>>,
    timeout_secs: Option<u64>,
    retries: Option<u32>,
    tools: Option<bool>,
    json_schema: Option<bool>,
    stream: Option<bool>,
    model_file: Option<PathBuf>,
    hints: Option<Vec<String>>,
    #[serde(default)]
    fallbacks: Vec<Spanned<String>>,
    cost: Option<Spanned<f64>>,
    speed: Option<Spanned<f64>>,
    intelligence: Option<Spanned<f64>>,
    max_in_flight: Option<Spanned<u32>>,
}

/// How well an entry does on each of MCP's model priorities, 0 to 1 (higher is better: a
/// `cost` of 0.9 is cheap).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scores {
    pub cost: Option<f64>,
    pub speed: Option<f64>,
    pub intelligence: Option<f64>,
}

/// A provider entry's own settings; absent ones come from the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderSpec {
    pub url: String,
    pub model: String,
    /// The key itself, read from the variable the file names.
    pub key: Option<String>,
    pub timeout_secs: Option<u64>,
    pub retries: Option<u32>,
    pub tools: Option<bool>,
    pub json_schema: Option<bool>,
    pub stream: Option<bool>,
}

/// What answers an entry.
#[derive(Clone, PartialEq)]
pub enum Answer {
    Host { hints: Vec<String> },
    Local { model_file: Option<PathBuf> },
    Provider(ProviderSpec),
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Host { hints } => f.debug_struct("Host").field("hints", hints).finish(),
            Answer::Local { model_file } => f
                .debug_struct("Local")
                .field("model_file", model_file)
                .finish(),
            Answer::Provider(p) => f
                .debug_struct("Provider")
                .field("model", &p.model)
                .field("key", &p.key.as_ref().map(|_| "(set)"))
                .finish_non_exhaustive(),
        }
    }
}

/// One named model of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub name: String,
    pub aliases: Vec<String>,
    pub answer: Answer,
    /// Entries tried in order when this one cannot answer.
    pub fallbacks: Vec<String>,
    pub scores: Scores,
    /// Calls in flight at once; more wait a bounded time.
    pub max_in_flight: Option<u32>,
}

/// The models file, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Models {
    pub default: String,
    pub entries: Vec<Spec>,
}

/// A problem with the file, at a line.
fn at(path: &Path, text: &str, offset: usize, problem: impl std::fmt::Display) -> String {
    let line = text
        .get(..offset)
        .map_or(1, |before| before.matches('\n').count() + 1);
    format!("{}:{line}: {problem}", path.display())
}

impl Models {
    /// Reads and checks the file; `env` looks up the variables that hold keys.
    pub fn read(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Models, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the models file: {e}", path.display()))?;
        Models::parse(path, &text, env)
    }

    pub fn parse(
        path: &Path,
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Models, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            at(path, text, offset, e.message())
        })?;
        let Some(first) = raw.models.first() else {
            return Err(at(path, text, 0, "no [[models]] entry: name at least one"));
        };
        let first_name = first.get_ref().name.get_ref().clone();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut entries = Vec::with_capacity(raw.models.len());
        for entry in &raw.models {
            let e = entry.get_ref();
            for name in std::iter::once(&e.name).chain(&e.aliases) {
                let n = name.get_ref().trim();
                if n.is_empty() {
                    return Err(at(
                        path,
                        text,
                        name.span().start,
                        "a name or alias is empty",
                    ));
                }
                if seen.insert(n.to_owned(), name.span().start).is_some() {
                    return Err(at(
                        path,
                        text,
                        name.span().start,
                        format!("{n:?} names two models (names and aliases must be unique)"),
                    ));
                }
            }
            entries.push(spec(path, text, entry, &env)?);
        }
        for (entry, raw) in entries.iter().zip(&raw.models) {
            for fallback in &raw.get_ref().fallbacks {
                let name = fallback.get_ref();
                if !entries.iter().any(|e| &e.name == name) {
                    return Err(at(
                        path,
                        text,
                        fallback.span().start,
                        format!("fallback {name:?} names no model of the file"),
                    ));
                }
                if name == &entry.name {
                    return Err(at(
                        path,
                        text,
                        fallback.span().start,
                        "a model cannot fall back to itself",
                    ));
                }
            }
        }
        let default = match raw.default {
            Some(d) => {
                let name = d.get_ref();
                if !entries.iter().any(|e| &e.name == name) {
                    return Err(at(
                        path,
                        text,
                        d.span().start,
                        format!("default {name:?} names no model of the file"),
                    ));
                }
                name.clone()
            }
            None => first_name,
        };
        Ok(Models { default, entries })
    }
}

/// One entry checked: the keys its backend takes, the key's variable set, scores in 0..=1.
fn spec(
    path: &Path,
    text: &str,
    entry: &Spanned<RawEntry>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Spec, String> {
    let e = entry.get_ref();
    let here = entry.span().start;
    let refuse = |offset: usize, problem: String| Err(at(path, text, offset, problem));
    let name = e.name.get_ref().trim().to_owned();
    let given = |key: &str, present: bool, allowed: &[Kind]| {
        if present && !allowed.contains(&e.backend) {
            Some(format!(
                "model {name:?}: `{key}` is not a setting of a {} model",
                e.backend.as_str()
            ))
        } else {
            None
        }
    };
    let provider_only = [
        ("url", e.url.is_some()),
        ("model", e.model.is_some()),
        ("key_env", e.key_env.is_some()),
        ("timeout_secs", e.timeout_secs.is_some()),
        ("retries", e.retries.is_some()),
        ("tools", e.tools.is_some()),
        ("json_schema", e.json_schema.is_some()),
        ("stream", e.stream.is_some()),
    ];
    for (key, present) in provider_only {
        if let Some(problem) = given(key, present, &[Kind::Provider]) {
            return refuse(here, problem);
        }
    }
    if let Some(problem) = given("model_file", e.model_file.is_some(), &[Kind::Local]) {
        return refuse(here, problem);
    }
    if let Some(problem) = given("hints", e.hints.is_some(), &[Kind::Host]) {
        return refuse(here, problem);
    }
    let answer = match e.backend {
        Kind::Host => Answer::Host {
            hints: e.hints.clone().unwrap_or_default(),
        },
        Kind::Local => Answer::Local {
            model_file: e.model_file.clone(),
        },
        Kind::Provider => {
            let (Some(url), Some(model)) = (&e.url, &e.model) else {
                return refuse(
                    here,
                    format!("model {name:?}: a provider model needs `url` and `model`"),
                );
            };
            let key = match &e.key_env {
                Some(var) => match env(var.get_ref()).filter(|k| !k.is_empty()) {
                    Some(key) => Some(key),
                    None => {
                        return refuse(
                            var.span().start,
                            format!(
                                "model {name:?}: the variable {:?} that should hold its key is \
                                 not set",
                                var.get_ref()
                            ),
                        );
                    }
                },
                None => None,
            };
            Answer::Provider(ProviderSpec {
                url: url.clone(),
                model: model.clone(),
                key,
                timeout_secs: e.timeout_secs,
                retries: e.retries,
                tools: e.tools,
                json_schema: e.json_schema,
                stream: e.stream,
            })
        }
    };
    let score = |s: &Option<Spanned<f64>>, key: &str| -> Result<Option<f64>, String> {
        match s {
            Some(v) if !(0.0..=1.0).contains(v.get_ref()) => Err(at(
                path,
                text,
                v.span().start,
                format!("model {name:?}: `{key}` is a score from 0 to 1"),
            )),
            Some(v) => Ok(Some(*v.get_ref())),
            None => Ok(None),
        }
    };
    if let Some(cap) = e.max_in_flight.as_ref().filter(|c| *c.get_ref() == 0) {
        return refuse(
            cap.span().start,
            format!("model {name:?}: `max_in_flight` must be at least 1"),
        );
    }
    Ok(Spec {
        aliases: e
            .aliases
            .iter()
            .map(|a| a.get_ref().trim().to_owned())
            .collect(),
        answer,
        fallbacks: e.fallbacks.iter().map(|f| f.get_ref().clone()).collect(),
        scores: Scores {
            cost: score(&e.cost, "cost")?,
            speed: score(&e.speed, "speed")?,
            intelligence: score(&e.intelligence, "intelligence")?,
        },
        max_in_flight: e.max_in_flight.as_ref().map(|c| *c.get_ref()),
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"default = "fast"

[[models]]
name = "fast"
aliases = ["gpt-4o-mini"]
backend = "provider"
url = "http://127.0.0.1:4000/v1"
model = "openai/gpt-4o-mini"
key_env = "TEST_KEY"
fallbacks = ["local"]
cost = 0.2
speed = 0.9

[[models]]
name = "local"
backend = "local"
"#;

    fn parse(text: &str) -> Result<Models, String> {
        Models::parse(Path::new("models.toml"), text, |var| {
            (var == "TEST_KEY").then(|| "sk-secret".to_owned())
        })
    }

    #[test]
    fn a_complete_file_is_read() {
        let m = parse(FILE).unwrap();
        assert_eq!(m.default, "fast");
        assert_eq!(m.entries.len(), 2);
        let fast = &m.entries[0];
        assert_eq!(fast.aliases, ["gpt-4o-mini"]);
        assert_eq!(fast.fallbacks, ["local"]);
        assert_eq!(fast.scores.cost, Some(0.2));
        let Answer::Provider(p) = &fast.answer else {
            panic!("a provider")
        };
        assert_eq!(p.key.as_deref(), Some("sk-secret"));
        assert!(!format!("{fast:?}").contains("sk-secret"));
        assert_eq!(m.entries[1].answer, Answer::Local { model_file: None });
    }

    #[test]
    fn problems_are_refused_with_their_line() {
        for (text, line, problem) in [
            (
                FILE.replace("cost = 0.2", "price = 0.2"),
                11,
                "unknown field `price`",
            ),
            (
                FILE.replace("name = \"local\"", "name = \"fast\""),
                15,
                "\"fast\" names two models",
            ),
            (
                FILE.replace("aliases = [\"gpt-4o-mini\"]", "aliases = [\"local\"]"),
                15,
                "\"local\" names two models",
            ),
            (
                FILE.replace("TEST_KEY", "MISSING_KEY"),
                9,
                "\"MISSING_KEY\" that should hold its key is not set",
            ),
            (
                FILE.replace("default = \"fast\"", "default = \"slow\""),
                1,
                "default \"slow\" names no model",
            ),
            (
                FILE.replace("fallbacks = [\"local\"]", "fallbacks = [\"nope\"]"),
                10,
                "fallback \"nope\" names no model",
            ),
            (
                FILE.replace("speed = 0.9", "speed = 9"),
                12,
                "`speed` is a score from 0 to 1",
            ),
            (
                FILE.replace("backend = \"local\"", "backend = \"local\"\nurl = \"x\""),
                14,
                "`url` is not a setting of a local model",
            ),
            (
                FILE.replace("backend = \"local\"", "backend = \"remote\""),
                16,
                "unknown variant `remote`",
            ),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(
                e.starts_with(&format!("models.toml:{line}: ")) && e.contains(problem),
                "{problem}: {e}"
            );
            assert!(!e.contains("sk-secret"), "{e}");
        }
    }
}
