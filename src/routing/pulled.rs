//! Models pulled through the API. `POST /api/pull` of an `hf:OWNER/REPO/FILE.gguf` file fetches
//! it into the cache (unless it is there) and registers it under that name, so that calls and
//! the model lists name it as they name a configured model; `DELETE /api/delete` removes it and
//! its file. Both go through the [`Backends`], which know which files their configured models
//! answer from: such a file is never deleted ([`DeleteError::InUse`]).
//!
//! A pulled model is an embedded model of its own, on the server's engines: it loads on its
//! first call and unloads as the configured ones do, within the same memory budget
//! (`--local-memory`; a file that could never fit is refused at the pull), with the command
//! line's settings for the embedded model. Where a configured chat model answers from the same
//! file, the pulled name shares its engine. At most [`MAX_PULLED`] are kept.

use super::{Answerer, Backends, Entry, SetupError, entry, local_settings};
use crate::backends::direct::Model;
use crate::config::Config;
use crate::error::clip;
use crate::local::fetch::{self, Progress};
use crate::local::hub::{self, Access, HubError, HubFile};
use crate::local::pool::{Engines, NoRoom, footprint};
use crate::local::{Local, LocalError, LocalSettings, Source};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Most models pulled and kept at once: each has a worker thread (idle until its first call)
/// and a name in every model list.
pub const MAX_PULLED: usize = 64;

/// The models pulled since the server started, and the settings a new one starts with.
#[derive(Default)]
pub(super) struct Pulled {
    entries: RwLock<Vec<Arc<Entry>>>,
    /// The command line's settings for the embedded model, loaded on its first call; none for
    /// backends not made from a configuration (no model can be pulled into them).
    settings: Option<LocalSettings>,
}

/// The settings a pulled model starts with: the command line's for the embedded model (its
/// budget set on `engines`' pool), loaded on its first call rather than at once.
pub(super) fn settings(config: &Config, engines: &Engines) -> Result<LocalSettings, SetupError> {
    let mut settings = local_settings(config, engines, None, false)?;
    settings.preload = false;
    Ok(settings)
}

/// `model` as a caller wrote it (trimmed), when it names the pulled model `name`, with or
/// without Ollama's `:latest`.
pub(super) fn spelled<'a>(model: &'a str, name: &str) -> Option<&'a str> {
    let model = model.trim();
    if model == name {
        return Some(model);
    }
    model.strip_suffix(":latest").filter(|bare| *bare == name)
}

impl Pulled {
    pub(super) fn new(settings: LocalSettings) -> Self {
        Pulled {
            entries: RwLock::default(),
            settings: Some(settings),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<Arc<Entry>>> {
        self.entries.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<Arc<Entry>>> {
        self.entries.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pulled model `model` names (with or without `:latest`).
    pub(super) fn find(&self, model: &str) -> Option<Arc<Entry>> {
        self.read()
            .iter()
            .find(|e| spelled(model, &e.name).is_some())
            .cloned()
    }

    /// Their names, in the order they were pulled.
    pub(super) fn names(&self) -> Vec<String> {
        self.read().iter().map(|e| e.name.clone()).collect()
    }

    /// Their `list_models` entries, as a models file's are written (not the default, no
    /// aliases, no fallbacks).
    pub(super) fn listing(&self) -> Vec<Value> {
        self.read()
            .iter()
            .map(|e| {
                // Pulled models are embedded models: never the host's.
                let mut item = match &e.answerer {
                    Answerer::Model(model) => model.describe(),
                    Answerer::Host { .. } => Value::Null,
                };
                if let Some(o) = item.as_object_mut() {
                    o.insert("id".into(), json!(e.name));
                    o.insert("aliases".into(), json!([]));
                    o.insert("backend".into(), json!(e.backend()));
                    o.insert("default".into(), json!(false));
                    o.insert("fallbacks".into(), json!([]));
                }
                item
            })
            .collect()
    }

    /// Whether a model named `name` was pulled.
    fn has(&self, name: &str) -> bool {
        self.read().iter().any(|e| e.name == name)
    }

    /// Forgets the pulled model named `name`. Calls it is answering finish; its engine stops
    /// once they have.
    fn remove(&self, name: &str) {
        self.write().retain(|e| e.name != name);
    }
}

/// Why a model was not pulled; each names the `hf:` file.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The file could not be fetched (see [`HubError::told`] for a client's words).
    #[error(transparent)]
    Hub(#[from] HubError),
    /// Backends not made from a configuration start no model.
    #[error("{file}: this server starts no embedded model to answer with it")]
    NoLocal { file: String },
    #[error(
        "{file}: this server keeps {MAX_PULLED} pulled models, the most it keeps; delete one \
         (DELETE /api/delete) first"
    )]
    Full { file: String },
    /// The file can never be loaded within the memory budget.
    #[error("{file} was fetched, but {source}")]
    TooBig {
        file: String,
        #[source]
        source: NoRoom,
    },
    /// Its model's worker would not start.
    #[error("{file}: {source}")]
    Start {
        file: String,
        #[source]
        source: LocalError,
    },
}

impl PullError {
    /// The error as a client is told it: naming the `hf:` file and no path of this machine.
    pub fn told(&self, file: &HubFile) -> String {
        match self {
            PullError::Hub(e) => e.told(file),
            other => other.to_string(),
        }
    }
}

/// Why a model's file was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// Neither a pulled model nor a file in the cache.
    #[error("model '{file}' not found")]
    NotFound { file: String },
    /// A configured model answers from it: it would fail every call until a restart.
    #[error(
        "`model`: {file} is the file of the configured model '{entry}' (--model or a models \
         file): it is not deleted while this server answers with it"
    )]
    InUse { file: String, entry: String },
}

impl Backends {
    /// `file` fetched into the cache unless it is there (`progress` told how it goes, from
    /// `access`'s Hub), then registered as a model calls and the model lists name by its `hf:`
    /// name (see the [module's documentation](self)); pulled again, it is there already. Where
    /// the file is cached.
    pub async fn pull(
        &self,
        file: &HubFile,
        access: &Access,
        progress: &mut Progress,
    ) -> Result<PathBuf, PullError> {
        let name = file.to_string();
        // Full: refused before a download that could not be kept.
        if self.pulled.find(&name).is_none() && self.pulled.read().len() >= MAX_PULLED {
            return Err(PullError::Full {
                file: clip(&name).into_owned(),
            });
        }
        let path = hub::fetch(file, access, progress).await?;
        self.register(file, &path, access)?;
        Ok(path)
    }

    /// Registers the cached `file` (at `path`) under its `hf:` name, unless a model goes by it.
    fn register(&self, file: &HubFile, path: &Path, access: &Access) -> Result<(), PullError> {
        let name = file.to_string();
        let told = || clip(&name).into_owned();
        let Some(settings) = &self.pulled.settings else {
            return Err(PullError::NoLocal { file: told() });
        };
        let mut entries = self.pulled.write();
        if self.find(&name).is_some() || entries.iter().any(|e| e.name == name) {
            return Ok(());
        }
        if entries.len() >= MAX_PULLED {
            return Err(PullError::Full { file: told() });
        }
        let model = match self.chat_model_using(path) {
            Some(model) => model,
            None => {
                let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
                self.engines
                    .pool()
                    .fits(footprint(bytes))
                    .map_err(|source| PullError::TooBig {
                        file: told(),
                        source,
                    })?;
                let mut settings = settings.clone();
                settings.source = Source::Hub(file.clone(), access.clone());
                settings.label.clone_from(&name);
                let local = Local::start_with(settings, &self.engines).map_err(|source| {
                    PullError::Start {
                        file: told(),
                        source,
                    }
                })?;
                Arc::new(local)
            }
        };
        entries.push(Arc::new(entry(&name, Answerer::Model(model))));
        tracing::info!(model = %told(), "a model pulled through the API answers by its name");
        Ok(())
    }

    /// The engine of a configured chat model that answers from the file at `path`.
    fn chat_model_using(&self, path: &Path) -> Option<Arc<dyn Model>> {
        self.entries
            .iter()
            .filter(|e| !e.embeddings)
            .find_map(|e| match &e.answerer {
                Answerer::Model(model) if model.uses_file(path) => Some(model.clone()),
                _ => None,
            })
    }

    /// Removes the pulled model `file` names and its file from the cache, or the fetched file
    /// alone; refused, leaving both, where a configured model answers from the file.
    pub fn delete(&self, file: &HubFile) -> Result<(), DeleteError> {
        let name = file.to_string();
        let not_found = || DeleteError::NotFound {
            file: clip(&name).into_owned(),
        };
        let path = file.cached().map_err(|_| not_found())?;
        let pulled = self.pulled.has(&name);
        if !pulled && !path.is_file() {
            return Err(not_found());
        }
        // A model this server answers with would fail every call until a restart.
        if let Some(entry) = self.uses_file(&path) {
            return Err(DeleteError::InUse {
                file: clip(&name).into_owned(),
                entry: clip(entry).into_owned(),
            });
        }
        self.pulled.remove(&name);
        fetch::forget(&path);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn backends(args: &[&str]) -> (Backends, Engines) {
        let argv = std::iter::once("agent-as-model").chain(args.iter().copied());
        let config = Config::try_parse_from(argv).unwrap();
        let engines = Engines::default();
        (Backends::with_engines(&config, &engines).unwrap(), engines)
    }

    fn access() -> Access {
        Access {
            endpoint: "http://127.0.0.1:9".into(),
            token: None,
        }
    }

    /// A fake `hf:` file of `bytes` bytes, in a folder of the test's own.
    fn fetched(test: &str, bytes: usize) -> (HubFile, PathBuf) {
        let dir = std::env::temp_dir().join(format!("aam-pulled-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("coder.gguf");
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        ("hf:acme/coder-GGUF/coder.gguf".parse().unwrap(), path)
    }

    #[test]
    fn a_pulled_model_is_routed_and_listed_by_its_name_once() {
        let (backends, _engines) = backends(&["--backend", "host"]);
        let (file, path) = fetched("routed", 64);
        let name = file.to_string();
        assert_eq!(backends.entry_name(&name, false), Some("host"));
        backends.register(&file, &path, &access()).unwrap();
        let chain = backends.route(&name, false).unwrap();
        assert_eq!(chain.len(), 1);
        assert_eq!(chain[0].name, name);
        assert_eq!(chain[0].backend(), crate::config::Backend::Local);
        let latest = format!("{name}:latest");
        assert_eq!(backends.entry_name(&latest, false), Some(name.as_str()));
        assert!(backends.direct_model(&latest).is_some());
        let (entry, _) = backends.embedder(&name).unwrap();
        assert_eq!(entry.name, name);
        let models = backends.models();
        let listed = models.iter().find(|m| m["id"] == name.as_str()).unwrap();
        assert_eq!(
            (&listed["backend"], &listed["default"]),
            (&json!("local"), &json!(false))
        );
        // Another name goes where it went; pulled again, the model is there.
        assert_eq!(backends.entry_name("another", false), Some("host"));
        backends.register(&file, &path, &access()).unwrap();
        assert_eq!(backends.pulled.names(), [name]);
    }

    #[test]
    fn two_servers_in_one_process_share_no_budget_and_no_pulled_model() {
        let (small, small_engines) = backends(&["--local-memory", "1K"]);
        let (large, large_engines) = backends(&["--local-memory", "1G"]);
        let budgets = (small_engines.pool().budget(), large_engines.pool().budget());
        assert_eq!(budgets, (1 << 10, 1 << 30));
        let (file, path) = fetched("budgets", 4 << 10);
        let name = file.to_string();
        // Never to fit the small one's budget: refused, naming the file and the setting.
        let e = small.register(&file, &path, &access()).unwrap_err();
        assert!(matches!(e, PullError::TooBig { .. }), "{e}");
        let told = e.told(&file);
        assert!(
            told.contains(&name) && told.contains("AGENT_AS_MODEL_LOCAL_MEMORY"),
            "{told}"
        );
        large.register(&file, &path, &access()).unwrap();
        assert!(small.pulled.find(&name).is_none());
        assert!(large.pulled.find(&name).is_some());
    }

    #[test]
    fn the_file_of_a_configured_model_lends_its_engine_and_unknown_names_list_pulled_ones() {
        let (file, path) = fetched("lends", 64);
        let models = path.with_file_name("models.toml");
        std::fs::write(
            &models,
            format!(
                "[[models]]\nname = \"coder\"\nbackend = \"local\"\nmodel_file = {:?}\n\
                 preload = false\n",
                path.display().to_string()
            ),
        )
        .unwrap();
        let (backends, _engines) = backends(&["--models", models.to_str().unwrap()]);
        backends.register(&file, &path, &access()).unwrap();
        let name = file.to_string();
        let engine = |model: &str| Arc::as_ptr(&backends.direct_model(model).unwrap()).cast::<()>();
        assert_eq!(engine(&name), engine("coder"));
        let e = backends.route("nope", false).err().unwrap().to_string();
        assert!(e.contains("coder") && e.contains(&name), "{e}");
    }
}
