//! Models from Hugging Face: `--model hf:OWNER/REPO/FILE.gguf` is fetched once from the Hub's
//! resolve URL (`{HF_ENDPOINT}/OWNER/REPO/resolve/main/FILE`) the way its own client does: a
//! first request without following redirects reads the file's size and digest (`X-Linked-Size`,
//! `X-Linked-Etag`) and where it is stored, then the file is downloaded from there, resumed after
//! a break, and checked. No byte is written past the size the Hub states (or the length storage
//! states, or [`fetch::MAX_DOWNLOAD_BYTES`]), and processes sharing the cache fetch one file at
//! a time under a lock. `HF_TOKEN` is sent to the Hub only, never to a storage host it
//! redirects to. Once cached the model is used offline.

use super::fetch::{self, FetchError, Progress};
use std::path::{Path, PathBuf};
use std::time::Instant;
use url::Url;

/// A GGUF file in a Hub repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubFile {
    /// `OWNER/REPO`.
    pub repo: String,
    /// The file's path in the repository.
    pub file: String,
}

/// Where the Hub is and how to sign in.
#[derive(Clone, PartialEq, Eq)]
pub struct Access {
    /// `HF_ENDPOINT`, e.g. `https://huggingface.co`.
    pub endpoint: String,
    /// `HF_TOKEN`.
    pub token: Option<String>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .finish()
    }
}

/// The prefix of a Hub source.
pub const PREFIX: &str = "hf:";

/// What a Hub source looks like, for errors.
const EXPECTED: &str = "expected hf:OWNER/REPO/FILE.gguf, e.g. \
                        hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf";

/// Why a Hub source was not read; each names the source as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Not `hf:` followed by an owner and a repository.
    #[error("`{given}`: {EXPECTED}")]
    Shape { given: String },
    #[error(
        "`{given}`: the owner and repository are names of letters, digits, `.`, `_` and `-`; \
         {EXPECTED}"
    )]
    Name { given: String },
    #[error("`{given}`: no file named; {EXPECTED}")]
    NoFile { given: String },
    #[error("`{given}`: the file must be a .gguf; {EXPECTED}")]
    NotGguf { given: String },
    /// A part of the path no Hub file has, or one the cache could not hold.
    #[error("`{given}`: {why}; {EXPECTED}")]
    Odd { given: String, why: String },
}

/// The longest part (a folder's or a file's name) of a Hub path, in bytes: what a file system
/// takes.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// The longest `hf:` source, in bytes: a bound on the path of its file in the cache, well
/// within what a system takes (`PATH_MAX`).
pub const MAX_SOURCE_BYTES: usize = 1024;

/// Why `segment` (a part of the file's path) is no name for a file of the cache, if it is not.
fn odd_segment(segment: &str) -> Option<&'static str> {
    let bytes = segment.as_bytes();
    let escaped = bytes
        .windows(3)
        .any(|w| matches!(w, [b'%', a, b] if a.is_ascii_hexdigit() && b.is_ascii_hexdigit()));
    if segment.is_empty() {
        Some("the path has an empty part (`//`, or a `/` at an end)")
    } else if segment == "." || segment == ".." {
        Some("the path has a `.` or `..` part")
    } else if escaped {
        Some("the path has a percent-encoded part (`%2e`, …): write its names as they are")
    } else if segment.contains('\\') || segment.chars().any(char::is_control) {
        Some("the path has a backslash or a control character")
    } else if bytes.len() > MAX_SEGMENT_BYTES {
        Some("a part of the path is over 255 bytes")
    } else {
        None
    }
}

/// Why a file could not be fetched from the Hub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The cache, or the HTTP client, failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(
        "HF_ENDPOINT `{endpoint}` is not a URL ({source}); expected the Hub's address, e.g. \
         https://huggingface.co"
    )]
    EndpointNotUrl {
        endpoint: String,
        source: url::ParseError,
    },
    #[error(
        "HF_ENDPOINT `{endpoint}` is not an http or https URL; expected the Hub's address, \
         e.g. https://huggingface.co"
    )]
    EndpointScheme { endpoint: String },
    #[error("the Hub redirected {file} to `{location}`, which is not a URL: {source}")]
    BadLocation {
        file: HubFile,
        location: String,
        source: url::ParseError,
    },
    #[error("cannot reach the Hub at {endpoint}: {source}")]
    Unreachable {
        endpoint: String,
        source: reqwest::Error,
    },
    #[error("the Hub redirected {file} without a location")]
    NoLocation { file: HubFile },
    #[error("the Hub redirected {file} too many times")]
    Redirects { file: HubFile },
    #[error(
        "{file} needs a Hugging Face token (the Hub answered {status}): set HF_TOKEN, and \
         accept the model's terms on its page if it is gated"
    )]
    NeedsToken {
        file: HubFile,
        status: reqwest::StatusCode,
    },
    #[error(
        "{file}: the Hub refused HF_TOKEN ({status}); check the token and that it may read \
         this repository (a gated model's terms must be accepted on its page)"
    )]
    TokenRefused {
        file: HubFile,
        status: reqwest::StatusCode,
    },
    #[error(
        "{file} was not found on the Hub ({status}): check the owner, repository and file name"
    )]
    NotFound {
        file: HubFile,
        status: reqwest::StatusCode,
    },
    #[error("{file}: the Hub answered {status}")]
    Status {
        file: HubFile,
        status: reqwest::StatusCode,
    },
    #[error("{file}: {error}")]
    Download {
        file: HubFile,
        #[source]
        error: Box<FetchError>,
    },
    #[error("{file}: the download is {size} bytes, the Hub says {expected}; it was discarded")]
    Size {
        file: HubFile,
        size: u64,
        expected: u64,
    },
    #[error("{file}: the download has SHA-256 {digest}, the Hub says {expected}; it was discarded")]
    Digest {
        file: HubFile,
        digest: String,
        expected: String,
    },
}

impl HubError {
    /// The error as a client is told it: what went wrong fetching `file`, naming it, and no
    /// path of this machine (the cache's paths are the server's log's to show).
    pub fn told(&self, file: &HubFile) -> String {
        let local = match self {
            HubError::Fetch(e) => e.in_cache(),
            HubError::Download { error, .. } => error.in_cache(),
            _ => None,
        };
        let text = local.unwrap_or_else(|| self.to_string());
        let name = file.to_string();
        if text.contains(&name) {
            text
        } else {
            format!("{name}: {text}")
        }
    }

    /// Whether another attempt may mend it: not when storage sent more than the Hub stated
    /// (or a server states more than a download may be).
    pub(crate) fn again(&self) -> bool {
        match self {
            HubError::Fetch(e) => e.again(),
            HubError::Download { error, .. } => error.again(),
            _ => true,
        }
    }
}

impl std::str::FromStr for HubFile {
    type Err = SourceError;

    /// Reads `hf:OWNER/REPO/FILE.gguf` (the file may be in a folder of the repository). Each
    /// part of the path is a name as it is: none empty, `.`, `..`, percent-encoded or over
    /// [`MAX_SEGMENT_BYTES`], the whole within [`MAX_SOURCE_BYTES`], so that the file's place
    /// in the cache is known before anything is made there.
    fn from_str(source: &str) -> Result<HubFile, SourceError> {
        let given = || crate::error::clip(source).into_owned();
        let rest = source
            .strip_prefix(PREFIX)
            .ok_or_else(|| SourceError::Shape { given: given() })?;
        if source.len() > MAX_SOURCE_BYTES {
            return Err(SourceError::Odd {
                given: given(),
                why: format!(
                    "{} bytes, over the {MAX_SOURCE_BYTES} a Hub source may be",
                    source.len()
                ),
            });
        }
        let parts: Vec<&str> = rest.split('/').collect();
        let (Some(owner), Some(repo)) = (parts.first(), parts.get(1)) else {
            return Err(SourceError::Shape { given: given() });
        };
        let file = parts.get(2..).unwrap_or_default();
        let name_ok = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.len() <= MAX_SEGMENT_BYTES
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !name_ok(owner) || !name_ok(repo) {
            return Err(SourceError::Name { given: given() });
        }
        if file.is_empty() || file.iter().all(|s| s.is_empty()) {
            return Err(SourceError::NoFile { given: given() });
        }
        if let Some(why) = file.iter().find_map(|s| odd_segment(s)) {
            return Err(SourceError::Odd {
                given: given(),
                why: why.to_owned(),
            });
        }
        let file = file.join("/");
        if !file.to_ascii_lowercase().ends_with(".gguf") {
            return Err(SourceError::NotGguf { given: given() });
        }
        Ok(HubFile {
            repo: format!("{owner}/{repo}"),
            file,
        })
    }
}

impl std::fmt::Display for HubFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PREFIX}{}/{}", self.repo, self.file)
    }
}

impl HubFile {
    /// The file's name without its folders, as results name the model until it is loaded.
    pub fn name(&self) -> &str {
        self.file.rsplit('/').next().unwrap_or(&self.file)
    }

    /// Where the file is cached: `models/hf/OWNER/REPO/FILE` under the cache directory.
    pub fn cached(&self) -> Result<PathBuf, FetchError> {
        let mut path = fetch::cache_dir()?.join("models").join("hf");
        for segment in self.repo.split('/').chain(self.file.split('/')) {
            path.push(segment);
        }
        Ok(path)
    }

    /// The resolve URL under the Hub's `endpoint`: `OWNER/REPO/resolve/main/FILE` after its
    /// path, each segment percent-encoded.
    fn url(&self, endpoint: &Url) -> Result<Url, HubError> {
        let mut url = endpoint.clone();
        url.path_segments_mut()
            .map_err(|()| HubError::EndpointScheme {
                endpoint: endpoint.to_string(),
            })?
            .pop_if_empty()
            .extend(self.repo.split('/'))
            .extend(["resolve", "main"])
            .extend(self.file.split('/'));
        Ok(url)
    }
}

/// `HF_ENDPOINT`: an http or https URL.
fn endpoint(access: &Access) -> Result<Url, HubError> {
    let url = Url::parse(&access.endpoint).map_err(|source| HubError::EndpointNotUrl {
        endpoint: access.endpoint.clone(),
        source,
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(HubError::EndpointScheme {
            endpoint: access.endpoint.clone(),
        });
    }
    Ok(url)
}

/// What the Hub says of a file before it is downloaded.
#[derive(Debug)]
struct Metadata {
    /// Where the bytes are: the resolve URL itself or the storage host it redirects to.
    location: Url,
    size: Option<u64>,
    /// The SHA-256 of a file stored with Git LFS (its `X-Linked-Etag`).
    sha256: Option<String>,
}

/// The file, fetched into the cache unless it is there already.
pub async fn fetch(
    source: &HubFile,
    access: &Access,
    progress: &mut Progress,
) -> Result<PathBuf, HubError> {
    let path = source.cached()?;
    if fetch::sealed(&path).is_some() {
        return Ok(path);
    }
    let hub = endpoint(access)?;
    // One process fetches the file at a time (the partial download is one file): the others
    // wait here, then find it fetched. The lock makes the file's folders, and when it is
    // released removes its file and the folders it made that are still empty: a fetch that
    // fails leaves the cache as it found it (but for a partial download, resumed next time).
    let _lock = fetch::lock(&path, &source.to_string(), progress).await?;
    if fetch::sealed(&path).is_some() {
        return Ok(path);
    }
    let started = Instant::now();
    progress.line(&format!(
        "agent-as-model: fetching {source} from {} (once) into {}",
        access.endpoint,
        path.display()
    ));
    let metadata = metadata(source, access, &hub).await?;
    let partial = path.with_extension("gguf.part");
    let client = fetch::client(None)?;
    let url = &metadata.location;
    let token = access
        .token
        .as_deref()
        .filter(|_| url.origin() == hub.origin());
    let downloaded = fetch::download_resuming(
        &client,
        url.as_str(),
        token,
        &partial,
        metadata.size,
        source.name(),
        progress,
    )
    .await;
    if downloaded.is_err() {
        // Bytes are kept for the next fetch to resume from; an empty part is nothing.
        fetch::discard_empty(&partial);
    }
    downloaded.map_err(|error| HubError::Download {
        file: source.clone(),
        error: Box::new(error),
    })?;
    check(source, &metadata, &partial, &path)?;
    progress.line(&format!(
        "agent-as-model: {source} ready in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(path)
}

/// Bytes of the Hub's description of a repository read at most (its file list).
const MAX_LISTING_BYTES: usize = 4 << 20;

/// The multimodal projector (`mmproj*.gguf`) in `source`'s repository, as llama-server's `-hf`
/// finds one beside a model: one already fetched into the cache, else the one the Hub lists
/// (the F16 one first, then Q8_0, then the first by name). `None` when the repository has none
/// or the Hub cannot be asked (the model then takes text only; the log says why).
pub async fn projector_beside(source: &HubFile, access: &Access) -> Option<HubFile> {
    let named = |file: String| HubFile {
        repo: source.repo.clone(),
        file,
    };
    let mut folder = fetch::cache_dir().ok()?.join("models").join("hf");
    folder.extend(source.repo.split('/'));
    let cached = std::fs::read_dir(&folder).ok().and_then(|entries| {
        let names = entries.filter_map(|e| e.ok()?.file_name().into_string().ok());
        let names: Vec<String> = names
            .filter(|n| fetch::sealed(&folder.join(n)).is_some())
            .collect();
        choose_projector(&names)
    });
    if let Some(file) = cached {
        return Some(named(file));
    }
    match listing(source, access).await {
        Ok(files) => choose_projector(&files).map(named),
        Err(why) => {
            tracing::info!(repo = %source.repo, problem = %why,
                "the Hub's file list was not read: no projector is looked for beside the model");
            None
        }
    }
}

/// The projector among a repository's `files`, if any.
fn choose_projector(files: &[String]) -> Option<String> {
    let mut found: Vec<&String> = (files.iter())
        .filter(|f| {
            let lower = f.to_ascii_lowercase();
            let fetchable = !f.contains('/') && odd_segment(f).is_none();
            lower.starts_with("mmproj") && lower.ends_with(".gguf") && fetchable
        })
        .collect();
    found.sort_by_key(|f| {
        let lower = f.to_ascii_lowercase();
        (
            !lower.contains("f16"),
            !lower.contains("q8_0"),
            (*f).clone(),
        )
    });
    found.first().map(|f| (*f).clone())
}

/// The files of `source`'s repository, as the Hub's API lists them (`siblings`).
async fn listing(source: &HubFile, access: &Access) -> Result<Vec<String>, String> {
    let hub = endpoint(access).map_err(|e| e.to_string())?;
    let mut url = hub.clone();
    url.path_segments_mut()
        .map_err(|()| "the endpoint is no base URL".to_owned())?
        .pop_if_empty()
        .extend(["api", "models"])
        .extend(source.repo.split('/'));
    let client = fetch::client(None).map_err(|e| e.to_string())?;
    let mut request = client.get(url);
    if let Some(token) = &access.token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the Hub answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_LISTING_BYTES {
            return Err(format!("the file list is over {MAX_LISTING_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let about: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let siblings = about.get("siblings").and_then(serde_json::Value::as_array);
    Ok(siblings
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("rfilename")?.as_str().map(str::to_owned))
        .collect())
}

/// Checks the downloaded file's size and digest against the Hub's and keeps it.
fn check(source: &HubFile, meta: &Metadata, partial: &Path, path: &Path) -> Result<(), HubError> {
    let size = std::fs::metadata(partial).map_or(0, |m| m.len());
    if let Some(expected) = meta.size.filter(|s| *s != size) {
        let _ = std::fs::remove_file(partial);
        return Err(HubError::Size {
            file: source.clone(),
            size,
            expected,
        });
    }
    let digest = fetch::sha256_file(partial)?;
    if let Some(expected) = meta.sha256.as_ref().filter(|d| **d != digest) {
        let _ = std::fs::remove_file(partial);
        return Err(HubError::Digest {
            file: source.clone(),
            digest,
            expected: expected.clone(),
        });
    }
    std::fs::rename(partial, path).map_err(|source| FetchError::Keep {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(fetch::seal(path, &digest)?)
}

/// Where a redirect from `from` to `location` leads.
#[derive(Debug, PartialEq, Eq)]
enum Redirect {
    /// A relative redirect on the Hub (a renamed repository's): asked again.
    Hub(Url),
    /// Anywhere else: where the bytes are stored.
    Storage(Url),
}

fn redirect(from: &Url, location: &str) -> Result<Redirect, url::ParseError> {
    let to = from.join(location)?;
    let relative = matches!(
        Url::parse(location),
        Err(url::ParseError::RelativeUrlWithoutBase)
    );
    // `//host/…` is relative too, but leads to another host.
    Ok(if relative && to.origin() == from.origin() {
        Redirect::Hub(to)
    } else {
        Redirect::Storage(to)
    })
}

/// Asks the Hub (at `hub`) for the file without following redirects to storage (relative
/// redirects, a renamed repository's, are followed), as the Hub's own client does.
async fn metadata(source: &HubFile, access: &Access, hub: &Url) -> Result<Metadata, HubError> {
    let client = fetch::client(Some(reqwest::redirect::Policy::none()))?;
    let mut url = source.url(hub)?;
    let (mut size, mut sha256) = (None, None);
    for _ in 0..5 {
        let mut request = client
            .head(url.clone())
            .header(reqwest::header::ACCEPT_ENCODING, "identity");
        if let Some(token) = &access.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| HubError::Unreachable {
            endpoint: access.endpoint.clone(),
            source: e,
        })?;
        let headers = response.headers();
        size = size.or_else(|| header(headers, "x-linked-size").and_then(|s| s.parse().ok()));
        sha256 = sha256.or_else(|| linked_sha256(headers));
        let status = response.status();
        if status.is_redirection() {
            let location = header(headers, "location").ok_or_else(|| HubError::NoLocation {
                file: source.clone(),
            })?;
            match redirect(&url, &location).map_err(|e| HubError::BadLocation {
                file: source.clone(),
                location: location.clone(),
                source: e,
            })? {
                Redirect::Hub(next) => {
                    url = next;
                    continue;
                }
                Redirect::Storage(location) => {
                    return Ok(Metadata {
                        location,
                        size,
                        sha256,
                    });
                }
            }
        }
        if status.is_success() {
            if size.is_none() {
                size = response.content_length().filter(|n| *n > 0);
            }
            return Ok(Metadata {
                location: url,
                size,
                sha256,
            });
        }
        return Err(refused(source, access, status));
    }
    Err(HubError::Redirects {
        file: source.clone(),
    })
}

/// A response header's value, trimmed of a weak marker and quotes (as the Hub writes ETags).
fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(|v| {
        v.trim()
            .trim_start_matches("W/")
            .trim_matches('"')
            .to_owned()
    })
}

/// The file's SHA-256 as the Hub states it (`X-Linked-Etag` of an LFS file), lower-cased.
fn linked_sha256(headers: &reqwest::header::HeaderMap) -> Option<String> {
    header(headers, "x-linked-etag")
        .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|d| d.to_ascii_lowercase())
}

fn refused(source: &HubFile, access: &Access, status: reqwest::StatusCode) -> HubError {
    let file = source.clone();
    match status.as_u16() {
        401 | 403 if access.token.is_none() => HubError::NeedsToken { file, status },
        401 | 403 => HubError::TokenRefused { file, status },
        404 => HubError::NotFound { file, status },
        _ => HubError::Status { file, status },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_read_and_bad_ones_say_what_is_expected() {
        let file: HubFile = "hf:unsloth/gemma-3-270m-it-GGUF/sub dir/gemma-3-270m-it-Q4_K_M.gguf"
            .parse()
            .unwrap();
        assert_eq!(file.repo, "unsloth/gemma-3-270m-it-GGUF");
        assert_eq!(file.file, "sub dir/gemma-3-270m-it-Q4_K_M.gguf");
        assert_eq!(file.name(), "gemma-3-270m-it-Q4_K_M.gguf");
        let access = Access {
            endpoint: "http://127.0.0.1:9/".into(),
            token: None,
        };
        assert_eq!(
            file.url(&endpoint(&access).unwrap()).unwrap().as_str(),
            "http://127.0.0.1:9/unsloth/gemma-3-270m-it-GGUF/resolve/main/sub%20dir/\
             gemma-3-270m-it-Q4_K_M.gguf"
        );
        // Under an endpoint with a path (a mirror's), after it.
        let mirror = Access {
            endpoint: "https://mirror.example/hf".into(),
            token: None,
        };
        assert_eq!(
            file.url(&endpoint(&mirror).unwrap()).unwrap().as_str(),
            "https://mirror.example/hf/unsloth/gemma-3-270m-it-GGUF/resolve/main/sub%20dir/\
             gemma-3-270m-it-Q4_K_M.gguf"
        );
        for bad in [
            "huggingface.co",
            "ftp://huggingface.co",
            "mailto:hub@example.com",
        ] {
            let access = Access {
                endpoint: bad.into(),
                token: None,
            };
            let e = endpoint(&access).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("HF_ENDPOINT `{bad}` is not")) && e.contains("https://"),
                "{e}"
            );
        }
        for bad in [
            "unsloth/x/y.gguf",
            "hf:unsloth/x",
            "hf:unsloth/x/",
            "hf:unsloth/x/y.bin",
            "hf:../x/y.gguf",
            "hf:a/b/../y.gguf",
            "hf:a b/c/y.gguf",
            "hf:a/b/%2e%2e/y.gguf",
            "hf:a/b/x%2Fy.gguf",
            "hf:a/b//y.gguf",
            "hf:a/b/c/",
        ] {
            let e = bad.parse::<HubFile>().unwrap_err().to_string();
            assert!(e.contains("expected hf:OWNER/REPO/FILE.gguf"), "{bad}: {e}");
            assert!(e.starts_with(&format!("`{bad}`: ")), "{e}");
        }
    }

    #[test]
    fn long_names_are_refused_before_the_cache_is_touched() {
        for bad in [
            format!("hf:a/b/{}.gguf", "x".repeat(MAX_SEGMENT_BYTES)),
            format!("hf:a/{}/y.gguf", "r".repeat(MAX_SEGMENT_BYTES + 1)),
            format!("hf:a/b/{}y.gguf", "d/".repeat(MAX_SOURCE_BYTES / 2)),
        ] {
            let e = bad.parse::<HubFile>().unwrap_err().to_string();
            assert!(e.contains("expected hf:OWNER/REPO/FILE.gguf"), "{e}");
            assert!(e.len() < 600, "the name is echoed whole: {e}");
        }
        let longest = format!("hf:a/b/{}.gguf", "x".repeat(MAX_SEGMENT_BYTES - 5));
        assert!(longest.parse::<HubFile>().is_ok());
    }

    #[test]
    fn the_token_goes_to_the_hub_only() {
        let url = |u: &str| Url::parse(u).unwrap();
        let hub = url("https://huggingface.co");
        for (other, same) in [
            ("https://huggingface.co/a/b/resolve/main/c.gguf", true),
            ("https://HuggingFace.co:443/a", true),
            ("https://cdn-lfs.hf.co/repos/x?sig=1", false),
            ("http://huggingface.co/a", false),
            ("https://huggingface.co:8443/a", false),
        ] {
            assert_eq!(url(other).origin() == hub.origin(), same, "{other}");
        }
        // Relative redirects stay on the Hub; the rest lead to storage, which gets no token.
        let from = url("https://huggingface.co/a/b/resolve/main/c.gguf");
        for (location, expected) in [
            (
                "/a/renamed/resolve/main/c.gguf",
                Redirect::Hub(url("https://huggingface.co/a/renamed/resolve/main/c.gguf")),
            ),
            (
                "https://cdn-lfs.hf.co/repos/x?sig=1",
                Redirect::Storage(url("https://cdn-lfs.hf.co/repos/x?sig=1")),
            ),
            (
                "//elsewhere.example/x",
                Redirect::Storage(url("https://elsewhere.example/x")),
            ),
        ] {
            assert_eq!(redirect(&from, location).unwrap(), expected, "{location}");
        }
        assert!(redirect(&from, "http://[::1").is_err());
        let debug = format!(
            "{:?}",
            Access {
                endpoint: hub.into(),
                token: Some("hf_secret".into())
            }
        );
        assert!(!debug.contains("hf_secret"), "{debug}");
    }
}
