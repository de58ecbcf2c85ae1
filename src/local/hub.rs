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
}

/// Why a file could not be fetched from the Hub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The cache, or the HTTP client, failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
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

impl std::str::FromStr for HubFile {
    type Err = SourceError;

    /// Reads `hf:OWNER/REPO/FILE.gguf` (the file may be in a folder of the repository).
    fn from_str(source: &str) -> Result<HubFile, SourceError> {
        let given = || source.to_owned();
        let rest = source
            .strip_prefix(PREFIX)
            .ok_or_else(|| SourceError::Shape { given: given() })?;
        let parts: Vec<&str> = rest.split('/').collect();
        let (Some(owner), Some(repo)) = (parts.first(), parts.get(1)) else {
            return Err(SourceError::Shape { given: given() });
        };
        let file = parts.get(2..).unwrap_or_default();
        let name_ok = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !name_ok(owner) || !name_ok(repo) {
            return Err(SourceError::Name { given: given() });
        }
        let segment_ok = |s: &&str| !s.is_empty() && *s != "." && *s != ".." && !s.contains('\\');
        if file.is_empty() || !file.iter().all(segment_ok) {
            return Err(SourceError::NoFile { given: given() });
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

    /// The resolve URL on the Hub (each path segment percent-encoded).
    fn url(&self, access: &Access) -> String {
        let file: Vec<String> = self.file.split('/').map(encode).collect();
        format!(
            "{}/{}/resolve/main/{}",
            access.endpoint.trim_end_matches('/'),
            self.repo,
            file.join("/")
        )
    }
}

fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What the Hub says of a file before it is downloaded.
#[derive(Debug, Default)]
struct Metadata {
    /// Where the bytes are: the resolve URL itself or the storage host it redirects to.
    location: String,
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
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| FetchError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    // One process fetches the file at a time (the partial download is one file): the others
    // wait here, then find it fetched.
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
    let metadata = metadata(source, access).await?;
    let partial = path.with_extension("gguf.part");
    let client = fetch::client(None)?;
    let url = metadata.location.clone();
    let token = access
        .token
        .as_deref()
        .filter(|_| same_origin(&url, &access.endpoint));
    fetch::download_resuming(
        &client,
        &url,
        token,
        &partial,
        metadata.size,
        source.name(),
        progress,
    )
    .await
    .map_err(|error| HubError::Download {
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

/// Asks the Hub for the file without following redirects to storage (relative redirects, a
/// renamed repository's, are followed), as the Hub's own client does.
async fn metadata(source: &HubFile, access: &Access) -> Result<Metadata, HubError> {
    let client = fetch::client(Some(reqwest::redirect::Policy::none()))?;
    let mut url = source.url(access);
    let mut found = Metadata::default();
    for _ in 0..5 {
        let mut request = client
            .head(&url)
            .header(reqwest::header::ACCEPT_ENCODING, "identity");
        if let Some(token) = &access.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| HubError::Unreachable {
            endpoint: access.endpoint.clone(),
            source: e,
        })?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    v.trim()
                        .trim_start_matches("W/")
                        .trim_matches('"')
                        .to_owned()
                })
        };
        if found.size.is_none() {
            found.size = header("x-linked-size").and_then(|s| s.parse().ok());
        }
        if found.sha256.is_none() {
            found.sha256 = header("x-linked-etag")
                .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(|d| d.to_ascii_lowercase());
        }
        let status = response.status();
        if status.is_redirection() {
            let location = header("location").ok_or_else(|| HubError::NoLocation {
                file: source.clone(),
            })?;
            if location.starts_with('/') {
                url = format!("{}{location}", origin(&url));
                continue;
            }
            found.location = location;
            return Ok(found);
        }
        if status.is_success() {
            if found.size.is_none() {
                found.size = response.content_length().filter(|n| *n > 0);
            }
            found.location = url;
            return Ok(found);
        }
        return Err(refused(source, access, status));
    }
    Err(HubError::Redirects {
        file: source.clone(),
    })
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

/// `scheme://host:port` of a URL.
fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url
        .get(after..)
        .and_then(|rest| rest.find('/'))
        .map_or(url.len(), |i| after + i);
    url.get(..end).unwrap_or(url)
}

fn same_origin(url: &str, endpoint: &str) -> bool {
    origin(url).eq_ignore_ascii_case(origin(endpoint.trim_end_matches('/')))
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
            file.url(&access),
            "http://127.0.0.1:9/unsloth/gemma-3-270m-it-GGUF/resolve/main/sub%20dir/\
             gemma-3-270m-it-Q4_K_M.gguf"
        );
        for bad in [
            "unsloth/x/y.gguf",
            "hf:unsloth/x",
            "hf:unsloth/x/",
            "hf:unsloth/x/y.bin",
            "hf:../x/y.gguf",
            "hf:a/b/../y.gguf",
            "hf:a b/c/y.gguf",
        ] {
            let e = bad.parse::<HubFile>().unwrap_err().to_string();
            assert!(e.contains("expected hf:OWNER/REPO/FILE.gguf"), "{bad}: {e}");
            assert!(e.starts_with(&format!("`{bad}`: ")), "{e}");
        }
    }

    #[test]
    fn the_token_goes_to_the_hub_only() {
        let hub = "https://huggingface.co";
        assert!(same_origin(
            "https://huggingface.co/a/b/resolve/main/c.gguf",
            hub
        ));
        assert!(!same_origin("https://cdn-lfs.hf.co/repos/x?sig=1", hub));
        assert!(!same_origin("http://huggingface.co/a", hub));
        assert_eq!(origin("http://localhost:8080"), "http://localhost:8080");
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
