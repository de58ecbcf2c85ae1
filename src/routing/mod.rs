//! Which model answers a call. The server has an ordered set of named models, each answered
//! by the host's sampling, the local model or a provider: from `--backend`/`--fallback` (one or
//! two entries), or from a models file (`--models`, see [`file`](mod@file)). A call's `model` argument
//! picks an entry by name or alias; without one the default answers; an entry that cannot
//! answer (a host that does not sample) or fails for a reason worth retrying elsewhere hands
//! the call to its fallbacks, in order. Models pulled through the API since the server started
//! (`POST /api/pull` of an `hf:` file) answer by their `hf:` names too (see [`pulled`]).

pub mod file;
pub mod pulled;

use crate::backends::direct::Model;
use crate::backends::provider::{Provider, ProviderSettings};
use crate::config::{Backend, Config, Direct, Fallback, RequestKeepAlive};
use crate::error::{CallError, CallResult, MAX_LIST_BYTES, bounded_list, clip};
use crate::local::pool::Engines;
use crate::local::{Local, LocalError, LocalSettings};
use crate::shapes::DEFAULT_MODEL;
use file::{Answer, Models, Scores};
use pulled::Pulled;
use serde_json::{Value, json};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Who answers an entry.
#[derive(Clone)]
pub enum Answerer {
    /// The host's model through MCP sampling, when the host samples; `hints` are sent as the
    /// request's model hints (else the caller's `model`).
    Host { hints: Vec<String> },
    /// A model this server calls itself: it always can.
    Model(Arc<dyn Model>),
}

/// A sampling request's model preferences: hints (names, most preferred first) and the
/// priorities, each from 0 to 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preferences {
    pub hints: Vec<String>,
    pub cost: Option<f32>,
    pub speed: Option<f32>,
    pub intelligence: Option<f32>,
}

/// One named model.
pub struct Entry {
    pub name: String,
    pub aliases: Vec<String>,
    pub answerer: Answerer,
    /// Entries tried in order when this one cannot answer.
    fallbacks: Vec<usize>,
    scores: Scores,
    /// Calls in flight at once, and the permits.
    cap: Option<(u32, Arc<Semaphore>)>,
    /// An embedding model: it makes embeddings, and answers no chat.
    pub embeddings: bool,
}

impl Entry {
    /// The entry a models file's `spec` describes, answered by `answerer`, falling back to the
    /// entries at `fallbacks`.
    fn of(spec: &file::Spec, answerer: Answerer, fallbacks: Vec<usize>) -> Entry {
        Entry {
            name: spec.name.clone(),
            aliases: spec.aliases.clone(),
            answerer,
            fallbacks,
            scores: spec.scores,
            cap: spec
                .max_in_flight
                .map(|n| (n, Arc::new(Semaphore::new(n as usize)))),
            embeddings: spec.embeddings,
        }
    }

    /// Whether this entry's model makes its answer token by token here (not through a host's
    /// sampling), so that a caller following the call's progress has something to see.
    pub fn streams(&self) -> bool {
        match &self.answerer {
            Answerer::Model(model) => model.capabilities().streams,
            Answerer::Host { .. } => false,
        }
    }

    /// Which kind of backend answers.
    pub fn backend(&self) -> Backend {
        match &self.answerer {
            Answerer::Host { .. } => Backend::Host,
            Answerer::Model(model) => model.kind(),
        }
    }

    /// Waits (at most `wait`) for room under this entry's cap; the permit is held for the call.
    pub async fn admit(&self, wait: Duration) -> CallResult<Option<OwnedSemaphorePermit>> {
        let Some((cap, permits)) = &self.cap else {
            return Ok(None);
        };
        match tokio::time::timeout(wait, permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            _ => Err(CallError::unavailable(
                self.backend(),
                format!(
                    "the model {:?} is answering {cap} calls, its max_in_flight, and none ended \
                     within {} s; retry shortly",
                    self.name,
                    wait.as_secs()
                ),
            )),
        }
    }
}

/// An entry a call goes to: a configured one (lent by the backends), or one pulled since the
/// server started (shared: `/api/delete` may remove it while the call is answered).
pub enum Chosen<'a> {
    Configured(&'a Entry),
    Pulled(Arc<Entry>),
}

impl Deref for Chosen<'_> {
    type Target = Entry;

    fn deref(&self) -> &Entry {
        match self {
            Chosen::Configured(entry) => entry,
            Chosen::Pulled(entry) => entry,
        }
    }
}

/// Which entry a call's `model` picks: a configured one (by its place) or a pulled one.
enum Pick {
    At(usize),
    Pulled(Arc<Entry>),
}

/// The models this server answers with.
pub struct Backends {
    entries: Vec<Entry>,
    default: usize,
    /// Named by a models file: a call's `model` must name an entry (or reach a sampling host
    /// as a hint). From the flags, `model` is only a hint, as in the original.
    named: bool,
    /// Longest wait for room under an entry's cap.
    pub queue_timeout: Duration,
    /// What an Ollama request's `keep_alive` may do (`--request-keep-alive`).
    request_keep_alive: RequestKeepAlive,
    /// The server's embedded models' pool, workers and template sandbox, which its local
    /// entries (and the models pulled later) share.
    engines: Engines,
    /// The models pulled through the API since the server started.
    pulled: Pulled,
}

impl Default for Backends {
    /// The host's model alone, as the original server (no model can be pulled).
    fn default() -> Self {
        Backends {
            entries: vec![entry("host", Answerer::Host { hints: Vec::new() })],
            default: 0,
            named: false,
            queue_timeout: Duration::from_secs(30),
            request_keep_alive: RequestKeepAlive::default(),
            engines: Engines::default(),
            pulled: Pulled::default(),
        }
    }
}

fn entry(name: &str, answerer: Answerer) -> Entry {
    Entry {
        name: name.to_owned(),
        aliases: Vec::new(),
        answerer,
        fallbacks: Vec::new(),
        scores: Scores::default(),
        cap: None,
        embeddings: false,
    }
}

/// Why the models could not be set up: the models file was refused, or a direct backend's
/// settings are wrong or it would not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    File(#[from] file::FileError),
    /// The local model's settings.
    #[error(transparent)]
    LocalSettings(#[from] crate::local::SettingsError),
    /// The local model would not start, or (waited for) load.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// The provider's settings, or its HTTP client.
    #[error(transparent)]
    Provider(#[from] crate::backends::provider::SetupError),
}

/// A direct backend, started: the embedded model (it begins loading at once, on `engines`) or
/// the configured provider. The one way the server, the bridge and `try` start theirs.
pub fn start_with(
    config: &Config,
    which: Direct,
    engines: &Engines,
) -> Result<Started, SetupError> {
    Ok(match which {
        Direct::Local => Started::Local(Box::new(Local::start_with(
            local_settings(config, engines, None, false)?,
            engines,
        )?)),
        Direct::Provider => {
            let settings = ProviderSettings::from_config(config)?;
            Started::Provider(Box::new(Provider::new(settings)?))
        }
    })
}

/// A direct backend [`start_with`] started.
pub enum Started {
    Local(Box<Local>),
    Provider(Box<Provider>),
}

impl Started {
    /// The model, to answer with (the local one answers once it has loaded).
    pub fn model(self) -> Arc<dyn Model> {
        match self {
            Started::Local(local) => Arc::new(*local),
            Started::Provider(provider) => Arc::new(*provider),
        }
    }

    /// The model once it can answer: the local one loaded (fetched first if needed).
    pub async fn ready(self) -> Result<Arc<dyn Model>, SetupError> {
        if let Started::Local(local) = &self {
            local.ready().await?;
        }
        Ok(self.model())
    }
}

/// Most model names an error lists.
const NAMES_SHOWN: usize = 20;

/// The embedded model of a models file's local entry, started on `engines`: the
/// configuration's settings for it, with the entry's name and its own model file, preload,
/// keep-alive, GPU layers and prompt cache.
fn start_local(
    config: &Config,
    engines: &Engines,
    spec: &file::Spec,
    local: &file::LocalSpec,
) -> Result<Local, SetupError> {
    let model_file = local.model_file.as_deref();
    let mut settings = local_settings(config, engines, model_file, spec.embeddings)?;
    settings.preload = local.preload;
    settings.gpu_layers = local.gpu_layers.unwrap_or(settings.gpu_layers);
    settings.label.clone_from(&spec.name);
    if let Some(secs) = local.keep_alive {
        settings.keep_alive = u64::try_from(secs).ok().map(Duration::from_secs);
    }
    settings.speculative = local.speculative.unwrap_or(settings.speculative);
    if let Some(draft) = &local.draft_model {
        settings.draft = Some(crate::local::file_source(config, draft)?);
    }
    if let Some(mmproj) = &local.mmproj {
        settings.mmproj = Some(crate::local::file_source(config, mmproj)?);
    }
    if let Some(dir) = &local.prompt_cache_dir {
        settings.prompt_cache =
            (!dir.as_os_str().is_empty()).then(|| crate::local::prompt_cache::Settings {
                dir: dir.clone(),
                max_bytes: config.local.prompt_cache_max_bytes,
            });
    }
    Ok(Local::start_with(settings, engines)?)
}

impl Backends {
    /// The models file when one is given, else `--backend` (one entry that answers every call)
    /// and `--fallback` (answers for a host that cannot sample). Direct backends start now, the
    /// embedded models on `engines` (the server's: `main` makes them), as do the models pulled
    /// later.
    pub fn with_engines(config: &Config, engines: &Engines) -> Result<Self, SetupError> {
        let mut backends = match &config.models {
            Some(path) => {
                let models = Models::read(path, |var| std::env::var(var).ok())?;
                Backends::from_file(&models, config, engines)?
            }
            None => Backends::from_flags(config, engines)?,
        };
        backends.queue_timeout = Duration::from_secs(config.queue_timeout_secs);
        backends.request_keep_alive = config.local.request_keep_alive;
        backends.engines = engines.clone();
        backends.pulled = Pulled::new(pulled::settings(config, engines)?);
        Ok(backends)
    }

    fn from_flags(config: &Config, engines: &Engines) -> Result<Self, SetupError> {
        let direct = |which: Direct| -> Result<Entry, SetupError> {
            let name = match which {
                Direct::Local => "local",
                Direct::Provider => "provider",
            };
            let model = start_with(config, which, engines)?.model();
            Ok(entry(name, Answerer::Model(model)))
        };
        let host = || entry("host", Answerer::Host { hints: Vec::new() });
        let mut entries = match (config.backend, config.fallback) {
            (Backend::Local, _) => vec![direct(Direct::Local)?],
            (Backend::Provider, _) => vec![direct(Direct::Provider)?],
            (Backend::Host, Fallback::None) => vec![host()],
            (Backend::Host, Fallback::Local) => vec![host(), direct(Direct::Local)?],
            (Backend::Host, Fallback::Provider) => vec![host(), direct(Direct::Provider)?],
        };
        if let Some(first) = entries
            .first_mut()
            .filter(|_| config.fallback != Fallback::None)
        {
            first.fallbacks = vec![1];
        }
        Ok(Backends {
            entries,
            ..Backends::default()
        })
    }

    fn from_file(models: &Models, config: &Config, engines: &Engines) -> Result<Self, SetupError> {
        let positions: std::collections::HashMap<&str, usize> = models
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.as_str(), i))
            .collect();
        let index = |name: &str| positions.get(name).copied();
        // Entries naming the same model file share one engine (its weights and slots).
        // (An embedding model's engine makes no chat context: it is one of its own.)
        let mut shared: std::collections::HashMap<
            (Option<std::path::PathBuf>, bool),
            Arc<dyn Model>,
        > = std::collections::HashMap::new();
        let mut entries = Vec::with_capacity(models.entries.len());
        for spec in &models.entries {
            let answerer = match &spec.answer {
                Answer::Host { hints } => Answerer::Host {
                    hints: hints.clone(),
                },
                Answer::Local(local) => {
                    let key = (local.model_file.clone(), spec.embeddings);
                    Answerer::Model(match shared.get(&key) {
                        Some(engine) => engine.clone(),
                        None => {
                            let engine: Arc<dyn Model> =
                                Arc::new(start_local(config, engines, spec, local)?);
                            shared.insert(key, engine.clone());
                            engine
                        }
                    })
                }
                Answer::Provider(p) => Answerer::Model(provider(config, p)?),
            };
            let fallbacks = spec.fallbacks.iter().filter_map(|f| index(f)).collect();
            entries.push(Entry::of(spec, answerer, fallbacks));
        }
        Ok(Backends {
            entries,
            default: index(&models.default).unwrap_or(0),
            named: true,
            ..Backends::default()
        })
    }

    /// What an Ollama request's `keep_alive` may do (`--request-keep-alive`).
    pub fn request_keep_alive(&self) -> RequestKeepAlive {
        self.request_keep_alive
    }

    /// The first configured entry whose model answers from the file at `path` (an `hf:` file
    /// in the cache, or a model file), if one does.
    pub fn uses_file(&self, path: &std::path::Path) -> Option<&str> {
        self.entries.iter().find_map(|e| match &e.answerer {
            Answerer::Model(model) if model.uses_file(path) => Some(e.name.as_str()),
            _ => None,
        })
    }

    /// Whether a models file names the models.
    pub fn named(&self) -> bool {
        self.named
    }

    /// Every configured model, in order (not the pulled ones).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The name of the model a call for `model` goes to first (one of this server's names,
    /// never the caller's own words unless they name a model); `None` when none would take it.
    pub fn entry_name<'a>(&'a self, model: &'a str, host_samples: bool) -> Option<&'a str> {
        let chain = self.route(model, host_samples).ok()?;
        match chain.into_iter().next()? {
            Chosen::Configured(e) => Some(e.name.as_str()),
            // A pulled model's name is the one the caller gave (but for a `:latest`).
            Chosen::Pulled(e) => pulled::spelled(model, &e.name),
        }
    }

    /// The name the model that would answer a call for `model` without a sampling host goes by
    /// (what its backend reports: the embedded model's, the provider's model): the name the
    /// model APIs report before the answer says. `None` when no direct model would answer.
    pub fn answering_model(&self, model: &str) -> Option<String> {
        self.direct_model(model)?.model_name()
    }

    /// The model a call for `model` goes to first without a sampling host; `None` when no
    /// direct model would answer it.
    pub fn direct_model(&self, model: &str) -> Option<Arc<dyn Model>> {
        let chain = self.route(model, false).ok()?;
        match &chain.first()?.answerer {
            Answerer::Model(m) => Some(m.clone()),
            Answerer::Host { .. } => None,
        }
    }

    /// The entries that may answer a call for `model`, in order: the one it names (or the
    /// default) and its fallbacks, without host entries when the host cannot sample (unless
    /// nothing else is left, so that the call gets the host's -32021). A pulled model has no
    /// fallbacks.
    pub fn route(&self, model: &str, host_samples: bool) -> CallResult<Vec<Chosen<'_>>> {
        let chosen = match self.choose(model, host_samples)? {
            Pick::At(i) => i,
            Pick::Pulled(entry) => return Ok(vec![Chosen::Pulled(entry)]),
        };
        if let Some(e) = self.entries.get(chosen).filter(|e| e.embeddings) {
            return Err(CallError::at(
                "model",
                format!(
                    "{:?} is an embedding model: it makes embeddings (`/v1/embeddings`, \
                     `embeddings_create`), not answers; name a chat model",
                    e.name
                ),
            ));
        }
        let mut chain: Vec<&Entry> = Vec::new();
        for i in std::iter::once(chosen).chain(self.fallbacks_of(chosen)) {
            if let Some(e) = self.entries.get(i)
                && !chain.iter().any(|c| std::ptr::eq(*c, e))
            {
                chain.push(e);
            }
        }
        let usable: Vec<&Entry> = chain
            .iter()
            .copied()
            .filter(|e| host_samples || !matches!(e.answerer, Answerer::Host { .. }))
            .collect();
        let chain = if usable.is_empty() {
            chain.into_iter().take(1).collect()
        } else {
            usable
        };
        Ok(chain.into_iter().map(Chosen::Configured).collect())
    }

    /// The model that makes the embeddings a request for `model` asks for: the entry it names
    /// (or the default), or, where that is the host's (sampling makes none), its first
    /// fallback this server runs. No other fallback: another model's vectors are not
    /// comparable with these.
    pub fn embedder(&self, model: &str) -> CallResult<(Chosen<'_>, Arc<dyn Model>)> {
        let chosen = match self.choose(model, false)? {
            Pick::At(i) => i,
            Pick::Pulled(entry) => {
                let Answerer::Model(m) = &entry.answerer else {
                    return Err(no_embedder());
                };
                let m = m.clone();
                return Ok((Chosen::Pulled(entry), m));
            }
        };
        let found = std::iter::once(chosen)
            .chain(self.fallbacks_of(chosen))
            .filter_map(|i| self.entries.get(i))
            .find_map(|e| match &e.answerer {
                Answerer::Model(m) => Some((Chosen::Configured(e), m.clone())),
                Answerer::Host { .. } => None,
            });
        found.ok_or_else(no_embedder)
    }

    fn fallbacks_of(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.entries
            .get(i)
            .into_iter()
            .flat_map(|e| e.fallbacks.iter().copied())
    }

    /// The entry `model` names: by name or alias (a configured entry first, then a pulled
    /// model); the default without one (or from the flags, unless it names a pulled model); an
    /// unknown name goes to a sampling host as a hint, else is refused with the names.
    fn choose(&self, model: &str, host_samples: bool) -> CallResult<Pick> {
        let model = model.trim();
        if model.is_empty() || model == DEFAULT_MODEL {
            return Ok(Pick::At(self.default));
        }
        if self.named
            && let Some(i) = self.find(model)
        {
            return Ok(Pick::At(i));
        }
        if let Some(entry) = self.pulled.find(model) {
            return Ok(Pick::Pulled(entry));
        }
        if !self.named {
            return Ok(Pick::At(self.default));
        }
        let host_entry = self
            .entries
            .iter()
            .position(|e| matches!(e.answerer, Answerer::Host { .. }));
        match host_entry {
            Some(i) if host_samples => Ok(Pick::At(i)),
            _ => Err(CallError::UnknownModel {
                name: clip(model).into_owned(),
                known: self.names(),
            }),
        }
    }

    /// The entry named `name` (or an alias); Ollama's clients write `name:latest` for a name
    /// without a tag, which finds it too.
    fn find(&self, name: &str) -> Option<usize> {
        let found = |name: &str| {
            self.entries
                .iter()
                .position(|e| e.name == name || e.aliases.iter().any(|a| a == name))
        };
        found(name).or_else(|| name.strip_suffix(":latest").and_then(found))
    }

    /// The names, with their aliases: the first [`NAMES_SHOWN`] (each clipped, the list within
    /// [`MAX_LIST_BYTES`]), then how many more `list_models` lists.
    fn names(&self) -> String {
        let pulled = self.pulled.names();
        let all = self
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.aliases.as_slice()));
        let all = all.chain(pulled.iter().map(|n| (n.as_str(), &[][..])));
        let shown = all.clone().take(NAMES_SHOWN).map(|(name, aliases)| {
            let name = clip(name);
            if aliases.is_empty() {
                return name.into_owned();
            }
            let aliases = aliases.iter().map(|a| clip(a));
            match bounded_list(aliases, MAX_LIST_BYTES / 4) {
                (aliases, 0) => format!("{name} (also {aliases})"),
                (aliases, more) => format!("{name} (also {aliases} and {more} more)"),
            }
        });
        let (names, cut) = bounded_list(shown, MAX_LIST_BYTES);
        let more = all.count().saturating_sub(NAMES_SHOWN).saturating_add(cut);
        if more > 0 {
            format!("{names} and {more} more (list_models lists them all)")
        } else {
            names
        }
    }

    /// The entry a sampling request's model preferences pick: the first hint that a name or
    /// alias contains (or that contains one), else the entry whose scores best meet the
    /// priorities, else the default.
    fn preferred(&self, preferences: Option<&Preferences>) -> usize {
        let pick = preferences.and_then(|p| {
            let by_hint = p.hints.iter().find_map(|hint| {
                let hint = hint.trim();
                (!hint.is_empty()).then_some(())?;
                self.entries.iter().position(|e| {
                    std::iter::once(&e.name)
                        .chain(&e.aliases)
                        .any(|n| n.contains(hint) || hint.contains(n.as_str()))
                })
            });
            by_hint.or_else(|| self.by_priorities(p))
        });
        pick.unwrap_or(self.default)
    }

    /// The model a sampling request's preferences pick where the host cannot answer: the
    /// [`Backends::preferred`] entry's own model, or its first fallback that has one.
    pub fn prefer_direct(&self, preferences: Option<&Preferences>) -> Option<&Arc<dyn Model>> {
        let i = self.preferred(preferences);
        std::iter::once(i)
            .chain(self.fallbacks_of(i))
            .filter_map(|i| self.entries.get(i))
            .find_map(|e| match &e.answerer {
                Answerer::Model(model) => Some(model),
                Answerer::Host { .. } => None,
            })
    }

    fn by_priorities(&self, p: &Preferences) -> Option<usize> {
        let weights = [
            p.cost.unwrap_or(0.0),
            p.speed.unwrap_or(0.0),
            p.intelligence.unwrap_or(0.0),
        ];
        if weights.iter().all(|w| *w <= 0.0) {
            return None;
        }
        let value = |s: &Scores| {
            [s.cost, s.speed, s.intelligence]
                .iter()
                .zip(weights)
                .map(|(score, w)| f64::from(w) * score.unwrap_or(0.5))
                .sum::<f64>()
        };
        let mut best: Option<(usize, f64)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let v = value(&e.scores);
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Whether the host's model answers any call.
    pub fn host_answers(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.answerer, Answerer::Host { .. }))
    }

    /// The direct backends, each with its role: `backend` when it answers every call,
    /// `fallback` when it answers for a host that cannot sample (the flags' roles).
    pub fn direct(&self) -> impl Iterator<Item = (&'static str, &Arc<dyn Model>)> {
        let role = if self.host_answers() {
            "fallback"
        } else {
            "backend"
        };
        self.entries.iter().filter_map(move |e| match &e.answerer {
            Answerer::Host { .. } => None,
            Answerer::Model(model) => Some((role, model)),
        })
    }

    /// The models a call may name: a models file's, or the host's model (unless another
    /// backend answers every call) and the direct backends of `--backend` and `--fallback`,
    /// each with its role, as the original listed the host's; then the models pulled since the
    /// server started, as a models file's entries are listed.
    pub fn models(&self) -> Vec<Value> {
        let mut models = if self.named {
            self.listing()
        } else {
            self.flagged()
        };
        models.extend(self.pulled.listing());
        models
    }

    /// The models of `--backend` and `--fallback` (see [`Backends::models`]).
    fn flagged(&self) -> Vec<Value> {
        let mut models = Vec::new();
        if self.host_answers() {
            models.push(json!({
                "id": DEFAULT_MODEL,
                "owned_by": "host-agent",
                "description": "The connected host agent's own model, reached through MCP \
                                sampling. The host decides which model answers; a model name \
                                passed to the other tools is only a hint.",
            }));
        }
        for (role, model) in self.direct() {
            let mut entry = model.describe();
            if let Some(o) = entry.as_object_mut() {
                o.insert("role".into(), json!(role));
            }
            models.push(entry);
        }
        models
    }

    /// The `list_models` entries of a models file: each model with its aliases, backend, what
    /// it supports and its status (no URL credentials, no keys).
    fn listing(&self) -> Vec<Value> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut item = match &e.answerer {
                    Answerer::Host { hints } => json!({
                        "owned_by": "host-agent",
                        "description": "The connected host agent's own model, through MCP \
                                        sampling (when the host samples).",
                        "hints": hints,
                    }),
                    Answerer::Model(model) => model.describe(),
                };
                if let Some(o) = item.as_object_mut() {
                    o.insert("id".into(), json!(e.name));
                    o.insert("aliases".into(), json!(e.aliases));
                    o.insert("backend".into(), json!(e.backend()));
                    o.insert("default".into(), json!(i == self.default));
                    let fallbacks: Vec<&str> = self
                        .fallbacks_of(i)
                        .filter_map(|f| self.entries.get(f).map(|e| e.name.as_str()))
                        .collect();
                    o.insert("fallbacks".into(), json!(fallbacks));
                    if let Some((cap, permits)) = &e.cap {
                        o.insert(
                            "in_flight".into(),
                            json!({"max": cap, "now": cap.saturating_sub(permits.available_permits() as u32)}),
                        );
                    }
                }
                item
            })
            .collect()
    }
}

/// The embedded model's error for a call that asks the host's model for embeddings.
fn no_embedder() -> CallError {
    CallError::at(
        "model",
        "the host's model (MCP sampling) makes no embeddings; run this server with \
         --backend local or a provider, or name an embedding model of the models file",
    )
}

/// A local entry's model: the command line's, or the entry's own file; the budget of
/// `engines`' pool set from `--local-memory`.
fn local_settings(
    config: &Config,
    engines: &Engines,
    model_file: Option<&std::path::Path>,
    embeddings: bool,
) -> Result<LocalSettings, SetupError> {
    engines.pool().set_budget(
        config
            .local
            .local_memory
            .unwrap_or_else(crate::local::pool::default_budget),
    );
    let mut settings = LocalSettings::from_config(config)?;
    settings.embeddings_only = embeddings;
    if let Some(path) = model_file {
        settings = settings.with_model_file(config, path)?;
    }
    Ok(settings)
}

/// A provider entry: its own URL, model and key, the command line's other settings.
fn provider(config: &Config, p: &file::ProviderSpec) -> Result<Arc<dyn Model>, SetupError> {
    let mut settings = ProviderSettings::at(config, &p.url, &p.model, p.key.clone());
    settings.tools = p.tools.unwrap_or(settings.tools);
    settings.json_schema = p.json_schema.unwrap_or(settings.json_schema);
    settings.stream = p.stream.unwrap_or(settings.stream);
    settings.max_tokens = p.max_tokens.or(settings.max_tokens);
    settings.retries = p.retries.unwrap_or(settings.retries);
    if let Some(secs) = p.timeout_secs {
        settings.timeout = Duration::from_secs(secs);
        settings.timeout_source = format!("the models file's timeout_secs of {:?}", p.name);
    }
    Ok(Arc::new(Provider::new(settings)?))
}
