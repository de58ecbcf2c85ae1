//! The models file (`--models FILE`): named models, each answered by the host, the local model
//! or a provider, in TOML. Read once at start; every problem is refused with the file, the line
//! and what is wrong, and a key is named by its variable only.

use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use toml::Spanned;

use crate::config::Backend;

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
    backend: Backend,
    url: Option<Spanned<String>>,
    model: Option<String>,
    key_env: Option<Spanned<String>>,
    timeout_secs: Option<Spanned<u64>>,
    retries: Option<Spanned<u32>>,
    tools: Option<bool>,
    json_schema: Option<bool>,
    stream: Option<bool>,
    max_tokens: Option<Spanned<u32>>,
    model_file: Option<PathBuf>,
    hints: Option<Vec<String>>,
    #[serde(default)]
    fallbacks: Vec<Spanned<String>>,
    cost: Option<Spanned<f64>>,
    speed: Option<Spanned<f64>>,
    intelligence: Option<Spanned<f64>>,
    max_in_flight: Option<Spanned<u32>>,
    /// An embedding model: it answers embeddings, and no chat.
    #[serde(default)]
    embeddings: bool,
    /// A local model loaded at start rather than on its first call.
    preload: Option<bool>,
    /// Seconds a local model stays loaded with no call; negative: for good.
    keep_alive: Option<i64>,
    /// A local model's layers on a GPU: `"auto"` or a number.
    gpu_layers: Option<Spanned<toml::Value>>,
    /// A local model's prompt cache on disk: a folder, or `""` for none.
    prompt_cache_dir: Option<PathBuf>,
    /// How a local model drafts tokens: `"ngram"` or `"none"`.
    speculative: Option<crate::config::Speculative>,
    /// A local model's draft model: a GGUF file or `hf:OWNER/REPO/FILE.gguf`.
    draft_model: Option<PathBuf>,
    /// A local model's multimodal projector: a GGUF file or `hf:OWNER/REPO/FILE.gguf`.
    mmproj: Option<PathBuf>,
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
    /// The entry's name, for errors about its settings.
    pub name: String,
    pub url: String,
    pub model: String,
    /// The key itself, read from the variable the file names.
    pub key: Option<String>,
    pub timeout_secs: Option<u64>,
    pub retries: Option<u32>,
    pub tools: Option<bool>,
    pub json_schema: Option<bool>,
    pub stream: Option<bool>,
    pub max_tokens: Option<u32>,
}

/// A local entry's own settings; absent ones come from the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalSpec {
    pub model_file: Option<PathBuf>,
    /// Loaded at start (`preload = true`), else on its first call.
    pub preload: bool,
    /// Seconds it stays loaded with no call (negative: for good); `None`: the setting's.
    pub keep_alive: Option<i64>,
    /// Layers on a GPU; `None`: the setting's.
    pub gpu_layers: Option<crate::config::GpuLayers>,
    /// Its prompt cache's folder (empty: none); `None`: the setting's.
    pub prompt_cache_dir: Option<PathBuf>,
    /// How it drafts tokens; `None`: the setting's.
    pub speculative: Option<crate::config::Speculative>,
    /// Its draft model; `None`: the setting's.
    pub draft_model: Option<PathBuf>,
    /// Its multimodal projector; `None`: the setting's.
    pub mmproj: Option<PathBuf>,
}

/// What answers an entry.
#[derive(Clone, PartialEq)]
pub enum Answer {
    Host { hints: Vec<String> },
    Local(LocalSpec),
    Provider(ProviderSpec),
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Host { hints } => f.debug_struct("Host").field("hints", hints).finish(),
            Answer::Local(local) => local.fmt(f),
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
    /// An embedding model (`embeddings = true`): embeddings requests only.
    pub embeddings: bool,
}

/// The models file, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Models {
    pub default: String,
    pub entries: Vec<Spec>,
}

/// The largest models file read (a special file such as /dev/zero never ends).
const MAX_FILE_BYTES: u64 = 4 << 20;

/// The most retries a provider entry may ask for (each waits longer than the last).
const MAX_RETRIES: u32 = 10;

/// A problem with the file, at a byte offset of it.
struct Problem(usize, String);

impl Problem {
    fn at(offset: usize, problem: impl std::fmt::Display) -> Self {
        Problem(offset, problem.to_string())
    }

    /// The problem at its line of the file.
    fn shown(self, path: &Path, text: &str) -> FileError {
        let line = text
            .get(..self.0)
            .map_or(1, |before| before.matches('\n').count() + 1);
        FileError::At {
            path: path.to_owned(),
            line,
            problem: self.1,
        }
    }
}

/// Why the models file was refused, shown as `FILE: …` or `FILE:LINE: …`.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: cannot read the models file: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: the models file is larger than {} MiB, the most this server reads",
        path.display(),
        MAX_FILE_BYTES >> 20
    )]
    TooLarge { path: PathBuf },
    #[error("{}:{line}: {problem}", path.display())]
    At {
        path: PathBuf,
        line: usize,
        problem: String,
    },
}

impl Models {
    /// Reads and checks the file; `env` looks up the variables that hold keys.
    pub fn read(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Models, FileError> {
        use std::io::Read as _;
        let cannot = |source: std::io::Error| FileError::Read {
            path: path.to_owned(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(cannot)?
            .take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(cannot)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(FileError::TooLarge {
                path: path.to_owned(),
            });
        }
        Models::parse(path, &text, env)
    }

    pub fn parse(
        path: &Path,
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Models, FileError> {
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            Problem::at(at, without_value(e.message(), key_at(text, at))).shown(path, text)
        })?;
        Models::check(&raw, &env).map_err(|p| p.shown(path, text))
    }

    fn check(raw: &Raw, env: &impl Fn(&str) -> Option<String>) -> Result<Models, Problem> {
        unique_names(&raw.models)?;
        let mut entries = raw
            .models
            .iter()
            .map(|entry| spec(entry, env))
            .collect::<Result<Vec<Spec>, Problem>>()?;
        // A name or an alias, as the entry's name.
        let known = |name: &Spanned<String>, what: &str| {
            let n = name.get_ref().trim();
            if let Some(e) = entries
                .iter()
                .find(|e| e.name == n || e.aliases.iter().any(|a| a == n))
            {
                Ok(e.name.clone())
            } else {
                Err(Problem::at(
                    name.span().start,
                    format!("{what} {:?} names no model of the file", name.get_ref()),
                ))
            }
        };
        let mut resolved = Vec::with_capacity(entries.len());
        for (entry, raw) in entries.iter().zip(&raw.models) {
            let mut fallbacks = Vec::new();
            for fallback in &raw.get_ref().fallbacks {
                let name = known(fallback, "fallback")?;
                if name == entry.name {
                    return Err(Problem::at(
                        fallback.span().start,
                        "a model cannot fall back to itself",
                    ));
                }
                fallbacks.push(name);
            }
            resolved.push(fallbacks);
        }
        let default = match (&raw.default, entries.first()) {
            (Some(d), _) => known(d, "default")?,
            (None, Some(first)) => first.name.clone(),
            (None, None) => {
                return Err(Problem::at(0, "no [[models]] entry: name at least one"));
            }
        };
        for (entry, fallbacks) in entries.iter_mut().zip(resolved) {
            entry.fallbacks = fallbacks;
        }
        Ok(Models { default, entries })
    }
}

/// The key of the `key = value` line `offset` falls in, if it has one.
fn key_at(text: &str, offset: usize) -> Option<&str> {
    let before = text.get(..offset)?;
    let line = before.rsplit('\n').next()?;
    let (key, _) = line.rsplit_once('=')?;
    let key = key.trim_end();
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let start = key.rfind(|c: char| !bare(c)).map_or(0, |i| i + 1);
    key.get(start..).filter(|k| !k.is_empty())
}

/// A TOML or serde message without the value it quotes (a key typed into another setting must
/// not be printed): "invalid type: string \"sk-…\", expected u64" becomes "`timeout_secs`:
/// expected u64, found a string (the value is not shown)".
fn without_value(message: &str, key: Option<&str>) -> String {
    let field = key.map_or_else(String::new, |k| format!("`{}`: ", crate::error::clip(k)));
    let message = message.trim();
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        let Some((found, expected)) = rest.rsplit_once(", expected ") else {
            return format!(
                "{field}{} (the value is not shown)",
                prefix.trim_end_matches(": ")
            );
        };
        // The kind alone: `string "…"`, `integer `5``, `floating point `1.5`` lose the value.
        let kind = found.split(['"', '`']).next().unwrap_or_default().trim();
        return format!("{field}expected {expected}, found {kind} (the value is not shown)");
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let expected = rest.split_once(", ").map_or("", |(_, e)| e);
        return format!("{field}unknown variant (the value is not shown), {expected}");
    }
    format!("{field}{message}")
}

/// Every name and alias is non-empty and names one model.
fn unique_names(models: &[Spanned<RawEntry>]) -> Result<(), Problem> {
    let mut seen: HashSet<String> = HashSet::new();
    for entry in models {
        let e = entry.get_ref();
        for name in std::iter::once(&e.name).chain(&e.aliases) {
            let n = name.get_ref().trim();
            if n.is_empty() {
                return Err(Problem::at(name.span().start, "a name or alias is empty"));
            }
            if !seen.insert(n.to_owned()) {
                return Err(Problem::at(
                    name.span().start,
                    format!("{n:?} names two models (names and aliases must be unique)"),
                ));
            }
        }
    }
    Ok(())
}

/// One entry checked: the keys its backend takes, the key's variable set, scores in 0..=1.
fn spec(entry: &Spanned<RawEntry>, env: &impl Fn(&str) -> Option<String>) -> Result<Spec, Problem> {
    let e = entry.get_ref();
    let name = e.name.get_ref().trim().to_owned();
    settings_of_its_backend(e, &name, entry.span().start)?;
    let answer = match e.backend {
        Backend::Host => Answer::Host {
            hints: e.hints.clone().unwrap_or_default(),
        },
        Backend::Local => Answer::Local(LocalSpec {
            model_file: e.model_file.clone(),
            preload: e.preload.unwrap_or(false),
            keep_alive: e.keep_alive,
            gpu_layers: e
                .gpu_layers
                .as_ref()
                .map(|v| gpu_layers(v, &name))
                .transpose()?,
            prompt_cache_dir: e.prompt_cache_dir.clone(),
            speculative: e.speculative,
            draft_model: e.draft_model.clone(),
            mmproj: e.mmproj.clone(),
        }),
        Backend::Provider => Answer::Provider(provider(e, &name, env).map_err(|p| match p {
            Problem(0, problem) => Problem::at(entry.span().start, problem),
            located => located,
        })?),
    };
    let score = |s: &Option<Spanned<f64>>, key: &str| match s {
        Some(v) if !(0.0..=1.0).contains(v.get_ref()) => Err(Problem::at(
            v.span().start,
            format!("model {name:?}: `{key}` is a score from 0 to 1"),
        )),
        Some(v) => Ok(Some(*v.get_ref())),
        None => Ok(None),
    };
    if let Some(cap) = e.max_in_flight.as_ref().filter(|c| *c.get_ref() == 0) {
        return Err(Problem::at(
            cap.span().start,
            format!("model {name:?}: `max_in_flight` must be at least 1"),
        ));
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
        embeddings: e.embeddings,
        name,
    })
}

/// A local entry's `gpu_layers` (`"auto"` or a number), read as `--gpu-layers` reads it.
fn gpu_layers(v: &Spanned<toml::Value>, name: &str) -> Result<crate::config::GpuLayers, Problem> {
    let text = match v.get_ref() {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        other => format!("{other:?}"),
    };
    crate::config::gpu_layers(&text).map_err(|problem| {
        Problem::at(
            v.span().start,
            format!("model {name:?}: `gpu_layers`: {problem}"),
        )
    })
}

/// Refuses a setting another backend's entries take (`url` on a local model, ...), as a
/// problem of the entry at `at`.
fn settings_of_its_backend(e: &RawEntry, name: &str, at: usize) -> Result<(), Problem> {
    let keys = [
        ("url", e.url.is_some(), Backend::Provider),
        ("model", e.model.is_some(), Backend::Provider),
        ("key_env", e.key_env.is_some(), Backend::Provider),
        ("timeout_secs", e.timeout_secs.is_some(), Backend::Provider),
        ("retries", e.retries.is_some(), Backend::Provider),
        ("tools", e.tools.is_some(), Backend::Provider),
        ("json_schema", e.json_schema.is_some(), Backend::Provider),
        ("stream", e.stream.is_some(), Backend::Provider),
        ("max_tokens", e.max_tokens.is_some(), Backend::Provider),
        ("model_file", e.model_file.is_some(), Backend::Local),
        ("preload", e.preload.is_some(), Backend::Local),
        ("keep_alive", e.keep_alive.is_some(), Backend::Local),
        ("gpu_layers", e.gpu_layers.is_some(), Backend::Local),
        (
            "prompt_cache_dir",
            e.prompt_cache_dir.is_some(),
            Backend::Local,
        ),
        ("speculative", e.speculative.is_some(), Backend::Local),
        ("draft_model", e.draft_model.is_some(), Backend::Local),
        ("mmproj", e.mmproj.is_some(), Backend::Local),
        ("hints", e.hints.is_some(), Backend::Host),
    ];
    match keys
        .iter()
        .find(|(_, given, kind)| *given && *kind != e.backend)
    {
        Some((key, ..)) => Err(Problem::at(
            at,
            format!(
                "model {name:?}: `{key}` is not a setting of a {} model",
                e.backend.as_str()
            ),
        )),
        None => Ok(()),
    }
}

/// Whether `s` can be an environment variable's name (what else it is, maybe a key, is never
/// shown).
fn is_variable_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A provider entry's settings, its key read from the variable it names. A problem at offset
/// 0 belongs to the entry as a whole.
fn provider(
    e: &RawEntry,
    name: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<ProviderSpec, Problem> {
    let (Some(url), Some(model)) = (&e.url, &e.model) else {
        return Err(Problem::at(
            0,
            format!("model {name:?}: a provider model needs `url` and `model`"),
        ));
    };
    // The URL itself is not shown: it may carry a password or a key.
    crate::backends::provider::http_url(url.get_ref()).map_err(|problem| {
        Problem::at(url.span().start, format!("model {name:?}: `url` {problem}"))
    })?;
    check_limits(e, name)?;
    Ok(ProviderSpec {
        name: name.to_owned(),
        url: url.get_ref().trim().to_owned(),
        model: model.clone(),
        key: key(e, name, env)?,
        timeout_secs: e.timeout_secs.as_ref().map(|t| *t.get_ref()),
        retries: e.retries.as_ref().map(|r| *r.get_ref()),
        tools: e.tools,
        json_schema: e.json_schema,
        stream: e.stream,
        max_tokens: e.max_tokens.as_ref().map(|m| *m.get_ref()),
    })
}

/// A provider entry's timeout is at least a second, its retries at most [`MAX_RETRIES`], and
/// its `max_tokens` at least 1.
fn check_limits(e: &RawEntry, name: &str) -> Result<(), Problem> {
    if let Some(t) = e.timeout_secs.as_ref().filter(|t| *t.get_ref() == 0) {
        return Err(Problem::at(
            t.span().start,
            format!("model {name:?}: `timeout_secs` must be at least 1"),
        ));
    }
    if let Some(r) = e.retries.as_ref().filter(|r| *r.get_ref() > MAX_RETRIES) {
        return Err(Problem::at(
            r.span().start,
            format!("model {name:?}: `retries` may be at most {MAX_RETRIES}"),
        ));
    }
    if let Some(m) = e.max_tokens.as_ref().filter(|m| *m.get_ref() == 0) {
        return Err(Problem::at(
            m.span().start,
            format!("model {name:?}: `max_tokens` must be at least 1"),
        ));
    }
    Ok(())
}

/// The key read from the variable `key_env` names; what `key_env` holds is never shown unless
/// it is a variable's name.
fn key(
    e: &RawEntry,
    name: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, Problem> {
    let Some(var) = &e.key_env else {
        return Ok(None);
    };
    if !is_variable_name(var.get_ref()) {
        return Err(Problem::at(
            var.span().start,
            format!(
                "model {name:?}: key_env must name an environment variable (letters, digits \
                 and _), and what it holds is not one (not shown: is it the key itself? put \
                 the key in a variable and name that)"
            ),
        ));
    }
    env(var.get_ref())
        .filter(|k| !k.is_empty())
        .map(Some)
        .ok_or_else(|| {
            Problem::at(
                var.span().start,
                format!(
                    "model {name:?}: the variable {:?} that should hold its key is not set",
                    var.get_ref()
                ),
            )
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
        .map_err(|e| e.to_string())
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
        assert_eq!(m.entries[1].answer, Answer::Local(LocalSpec::default()));
    }

    #[test]
    fn a_fallback_may_name_an_alias_and_a_huge_file_is_not_read() {
        let text = FILE.replace("fallbacks = [\"local\"]", "").replace(
            "backend = \"local\"",
            "backend = \"local\"\naliases = [\"here\"]\nfallbacks = [\"gpt-4o-mini\"]",
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.entries[1].fallbacks, ["fast"]);
        let e = Models::read(Path::new("/dev/zero"), |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than 4 MiB"), "{e}");
    }

    #[test]
    fn a_local_entry_takes_its_pool_and_gpu_settings() {
        let text = FILE.replace(
            "backend = \"local\"",
            "backend = \"local\"\npreload = true\nkeep_alive = 600\ngpu_layers = 12\nembeddings = true\n\
             prompt_cache_dir = \"/var/cache/prompts\"\nspeculative = \"ngram\"",
        );
        let m = parse(&text).unwrap();
        assert_eq!(
            m.entries[1].answer,
            Answer::Local(LocalSpec {
                preload: true,
                keep_alive: Some(600),
                gpu_layers: Some(crate::config::GpuLayers::Count(12)),
                prompt_cache_dir: Some("/var/cache/prompts".into()),
                speculative: Some(crate::config::Speculative::Ngram),
                ..LocalSpec::default()
            })
        );
        assert!(m.entries[1].embeddings);
        let auto = FILE.replace(
            "backend = \"local\"",
            "backend = \"local\"\ngpu_layers = \"auto\"",
        );
        assert!(matches!(
            parse(&auto).unwrap().entries[1].answer,
            Answer::Local(LocalSpec {
                gpu_layers: Some(crate::config::GpuLayers::Auto),
                ..
            })
        ));
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
                FILE.replace("cost = 0.2", "timeout_secs = 0"),
                11,
                "`timeout_secs` must be at least 1",
            ),
            (
                FILE.replace("cost = 0.2", "retries = 4294967295"),
                11,
                "`retries` may be at most 10",
            ),
            (
                FILE.replace("http://127.0.0.1:4000/v1", "http://[bad host/v1"),
                7,
                "`url` is not a URL",
            ),
            (
                FILE.replace("http://127.0.0.1:4000/v1", "ftp://127.0.0.1/v1"),
                7,
                "`url` must start with http:// or https://",
            ),
            (
                FILE.replace("\"TEST_KEY\"", "\"sk-secret-typed-here\""),
                9,
                "key_env must name an environment variable",
            ),
            (
                FILE.replace("default = \"fast\"", "default = \"slow\""),
                1,
                "default \"slow\" names no model",
            ),
            (
                FILE.replace(
                    "backend = \"local\"",
                    "backend = \"local\"\ngpu_layers = \"most\"",
                ),
                17,
                "`gpu_layers`: expected `auto` or a number of layers",
            ),
            (
                FILE.replace("cost = 0.2", "keep_alive = 60"),
                3,
                "`keep_alive` is not a setting of a provider model",
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
                "`backend`: unknown variant (the value is not shown), expected one of `host`",
            ),
            (
                FILE.replace("cost = 0.2", "timeout_secs = \"sk-secret-typed-here\""),
                11,
                "`timeout_secs`: expected u64, found string (the value is not shown)",
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
