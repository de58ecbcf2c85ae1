//! The prompt cache on disk (`--prompt-cache-dir`): a sequence's KV cache saved to a file, so a
//! later call whose prompt starts with the same tokens (an agent CLI's next session, after the
//! server restarted or the model was unloaded for room) reads it back instead of processing
//! the prompt again.
//!
//! Each model has a folder of its own, named by its identity ([`identity`]: the weights' size
//! and ends, llama.cpp's version, the cache's layout), so a file made for another model or
//! build is never looked at. A file is named `TOKENS-PREFIX-CONTENT.kv`: the prompt tokens it
//! holds, the SHA-256 of those tokens (how a prompt finds it without reading it), and the
//! SHA-256 of its own bytes (checked before it is read: a damaged file is ignored with a
//! warning and removed). Files are written under a temporary name and renamed, so a reader
//! never sees half of one and replicas may share the folder. The folder is kept under its
//! byte limit by removing the files used longest ago.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Hex digits of a hash kept in a file's name.
const NAMED_DIGITS: usize = 32;

/// Bytes read from each end of the weights for their identity.
const ENDS: u64 = 1 << 20;

/// Where the prompt cache is, and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

/// One model's prompt cache on disk.
#[derive(Debug)]
pub struct DiskCache {
    /// The model's own folder.
    dir: PathBuf,
    max_bytes: u64,
}

/// A saved prompt, found for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub path: PathBuf,
    /// The prompt tokens it holds.
    pub tokens: usize,
    /// The SHA-256 of the file's bytes, in hex (its name's share).
    content: String,
}

/// Why a saved prompt could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("reading it: {0}")]
    Read(#[from] std::io::Error),
    #[error("its bytes are not the ones it was saved with")]
    Damaged,
    #[error("llama.cpp did not take it: {0}")]
    Engine(#[from] llama_cpp_2::context::session::LoadSeqStateError),
    #[error("its tokens are not the prompt's")]
    Foreign,
}

/// Why a prompt could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("writing it: {0}")]
    Write(#[from] std::io::Error),
    #[error("llama.cpp did not write it: {0}")]
    Engine(#[from] llama_cpp_2::context::session::SaveSeqStateError),
}

impl DiskCache {
    /// The cache of the model in `weights` under `settings.dir` (its folder made if need be).
    pub fn open(settings: &Settings, weights: &Path) -> std::io::Result<DiskCache> {
        let dir = settings.dir.join(identity(weights)?);
        std::fs::create_dir_all(&dir)?;
        Ok(DiskCache {
            dir,
            max_bytes: settings.max_bytes,
        })
    }

    /// The saved prompt that `prompt` starts with and that holds the most of it, when it holds
    /// more than `more_than` tokens.
    pub fn find(&self, prompt: &[LlamaToken], more_than: usize) -> Option<Saved> {
        let mut saved: Vec<(Saved, String)> = std::fs::read_dir(&self.dir)
            .ok()?
            .filter_map(|entry| named(&entry.ok()?.path()))
            .filter(|(s, _)| s.tokens > more_than && s.tokens <= prompt.len())
            .collect();
        // Longest first; the prompt's prefixes hashed once each.
        saved.sort_by_key(|(s, _)| std::cmp::Reverse(s.tokens));
        let mut hashed: Option<(usize, String)> = None;
        saved.into_iter().find_map(|(s, prefix)| {
            if hashed.as_ref().is_none_or(|(n, _)| *n != s.tokens) {
                hashed = Some((s.tokens, tokens_hash(prompt.get(..s.tokens)?)));
            }
            hashed.as_ref().filter(|(_, h)| *h == prefix).map(|_| s)
        })
    }

    /// Reads `saved` into sequence `seq` of `ctx`, checked first against its bytes' hash and
    /// then against `prompt`'s tokens; the sequence holds its prompt tokens after, nothing on
    /// failure. A damaged or foreign file is removed.
    pub fn restore(
        &self,
        ctx: &mut LlamaContext<'_>,
        seq: i32,
        saved: &Saved,
        prompt: &[LlamaToken],
    ) -> Result<Vec<LlamaToken>, RestoreError> {
        let read = self.read_checked(ctx, seq, saved, prompt);
        match &read {
            Ok(_) => touch(&saved.path),
            Err(e) => {
                let _ = ctx.clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
                // A file that is not what it says is never tried again; one this context
                // could not take (too long for it now) may be read by a later one.
                if matches!(e, RestoreError::Damaged | RestoreError::Foreign) {
                    let _ = std::fs::remove_file(&saved.path);
                }
            }
        }
        read
    }

    fn read_checked(
        &self,
        ctx: &mut LlamaContext<'_>,
        seq: i32,
        saved: &Saved,
        prompt: &[LlamaToken],
    ) -> Result<Vec<LlamaToken>, RestoreError> {
        if file_hash(&saved.path)? != saved.content {
            return Err(RestoreError::Damaged);
        }
        let _ = ctx.clear_kv_cache_seq(u32::try_from(seq).ok(), None, None);
        let most = ctx.n_ctx() as usize;
        let (mut tokens, _) = ctx.state_seq_load_file(&saved.path, seq, most)?;
        if tokens.get(..saved.tokens) != prompt.get(..saved.tokens) {
            return Err(RestoreError::Foreign);
        }
        // The answer that followed the prompt is not kept: the next prompt renders it anew.
        let kept = u32::try_from(saved.tokens).unwrap_or(u32::MAX);
        if tokens.len() > saved.tokens {
            let _ = ctx.clear_kv_cache_seq(u32::try_from(seq).ok(), Some(kept), None);
        }
        tokens.truncate(saved.tokens);
        Ok(tokens)
    }

    /// Saves sequence `seq` of `ctx`, which holds `cached` tokens of which the first `prompt`
    /// were the prompt, under a name a later prompt finds; then keeps the folder under its
    /// limit.
    pub fn save(
        &self,
        ctx: &LlamaContext<'_>,
        seq: i32,
        cached: &[LlamaToken],
        prompt: usize,
    ) -> Result<u64, SaveError> {
        let prefix = tokens_hash(cached.get(..prompt).unwrap_or(cached));
        let temporary = self
            .dir
            .join(format!(".{}.partial", crate::call::new_id("")));
        let written = ctx.state_seq_save_file(&temporary, seq, cached);
        let renamed = written.map_err(SaveError::from).and_then(|bytes| {
            let content = file_hash(&temporary)?;
            let name = format!("{prompt}-{prefix}-{content}.kv");
            std::fs::rename(&temporary, self.dir.join(name))?;
            Ok(bytes as u64)
        });
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        let bytes = renamed?;
        self.evict();
        Ok(bytes)
    }

    /// Removes the files used longest ago until the folder is within its limit.
    fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let meta = e.metadata().ok()?;
                let used = meta.modified().ok()?;
                Some((used, meta.len(), e.path()))
            })
            .filter(|(_, _, p)| p.extension().is_some_and(|x| x == "kv"))
            .collect();
        let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }
}

/// A saved prompt by its file's name, and the hash of its prompt tokens.
fn named(path: &Path) -> Option<(Saved, String)> {
    if path.extension()? != "kv" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    let mut parts = stem.split('-');
    let tokens = parts.next()?.parse().ok()?;
    let prefix = parts.next().filter(|h| h.len() == NAMED_DIGITS)?;
    let content = parts.next().filter(|h| h.len() == NAMED_DIGITS)?;
    let saved = Saved {
        path: path.to_owned(),
        tokens,
        content: content.to_owned(),
    };
    Some((saved, prefix.to_owned()))
}

/// The SHA-256 of `tokens` (each as four little-endian bytes), in hex, as names carry it.
fn tokens_hash(tokens: &[LlamaToken]) -> String {
    let mut hash = Sha256::new();
    for token in tokens {
        hash.update(token.0.to_le_bytes());
    }
    named_hex(&hash.finalize())
}

/// The SHA-256 of a file's bytes, in hex, as names carry it.
fn file_hash(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        let Some(read) = buffer.get(..n).filter(|r| !r.is_empty()) else {
            break;
        };
        hash.update(read);
    }
    Ok(named_hex(&hash.finalize()))
}

fn named_hex(digest: &[u8]) -> String {
    let mut text = hex::encode(digest);
    text.truncate(NAMED_DIGITS);
    text
}

/// Marks a file as just used (the eviction removes the files used longest ago).
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// The identity of the model in `weights` as a KV cache depends on it: the file's size and
/// the SHA-256 of its first and last MiB (a GGUF's header, tensor table and last weights),
/// the llama.cpp this binary was built with, and the cache's layout.
pub fn identity(weights: &Path) -> std::io::Result<String> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(weights)?;
    let len = file.metadata()?.len();
    let mut hash = Sha256::new();
    hash.update(len.to_le_bytes());
    hash.update(env!("LLAMA_CPP_SYS_VERSION").as_bytes());
    hash.update(b"kv:f16;swa_full");
    let mut head = Vec::new();
    (&mut file).take(ENDS).read_to_end(&mut head)?;
    hash.update(&head);
    file.seek(SeekFrom::Start(len.saturating_sub(ENDS)))?;
    let mut tail = Vec::new();
    file.take(ENDS).read_to_end(&mut tail)?;
    hash.update(&tail);
    Ok(named_hex(&hash.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().copied().map(LlamaToken).collect()
    }

    /// A cache in a fresh folder, holding files named for `saved` (tokens of each).
    fn cache_with(saved: &[&[i32]], max_bytes: u64) -> (tempdir::Dir, DiskCache) {
        let dir = tempdir::Dir::new();
        let cache = DiskCache {
            dir: dir.0.clone(),
            max_bytes,
        };
        for ids in saved {
            let prefix = tokens_hash(&tokens(ids));
            let path = dir.0.join("bytes");
            std::fs::write(&path, format!("{ids:?}")).unwrap();
            let content = file_hash(&path).unwrap();
            let name = format!("{}-{prefix}-{content}.kv", ids.len());
            std::fs::rename(&path, dir.0.join(name)).unwrap();
        }
        (dir, cache)
    }

    mod tempdir {
        /// A folder removed when dropped.
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let path = std::env::temp_dir().join(crate::call::new_id("prompt-cache-"));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn a_prompt_finds_the_longest_saved_prefix_it_starts_with() {
        let (_dir, cache) = cache_with(&[&[1, 2], &[1, 2, 3, 4], &[1, 2, 9, 9, 9], &[7]], 1 << 20);
        let found = cache.find(&tokens(&[1, 2, 3, 4, 5, 6]), 0).unwrap();
        assert_eq!(found.tokens, 4);
        // Nothing that holds no more than the slot already does.
        assert!(cache.find(&tokens(&[1, 2, 3, 4, 5, 6]), 4).is_none());
        assert_eq!(cache.find(&tokens(&[1, 2, 8]), 0).unwrap().tokens, 2);
        assert!(cache.find(&tokens(&[5, 5, 5]), 0).is_none());
        // A saved prompt longer than the prompt is not its prefix.
        assert!(cache.find(&tokens(&[7]), 1).is_none());
    }

    #[test]
    fn names_that_are_not_saved_prompts_are_passed_over() {
        let (dir, cache) = cache_with(&[&[1, 2]], 1 << 20);
        for name in ["x.kv", "2-abc-def.kv", ".partial", "2-0-0.txt"] {
            std::fs::write(dir.0.join(name), "x").unwrap();
        }
        assert_eq!(cache.find(&tokens(&[1, 2, 3]), 0).unwrap().tokens, 2);
    }

    #[test]
    fn the_folder_is_kept_under_its_limit_oldest_first() {
        let (dir, cache) = cache_with(&[&[1], &[1, 2], &[1, 2, 3]], 1 << 20);
        let mut files: Vec<_> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        // The first is used longest ago.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        let first = std::fs::File::options()
            .append(true)
            .open(&files[0])
            .unwrap();
        first.set_modified(old).unwrap();
        let len = |p: &PathBuf| std::fs::metadata(p).unwrap().len();
        // Room for all but the first.
        let cache = DiskCache {
            max_bytes: files.iter().map(len).sum::<u64>() - len(&files[0]),
            ..cache
        };
        cache.evict();
        assert!(!files[0].exists());
        assert!(files[1].exists() && files[2].exists());
    }

    #[test]
    fn identity_follows_the_weights_bytes() {
        let dir = tempdir::Dir::new();
        let (a, b) = (dir.0.join("a.gguf"), dir.0.join("b.gguf"));
        std::fs::write(&a, vec![1u8; 3 << 20]).unwrap();
        std::fs::write(&b, vec![1u8; 3 << 20]).unwrap();
        assert_eq!(identity(&a).unwrap(), identity(&b).unwrap());
        let mut changed = vec![1u8; 3 << 20];
        changed[(3 << 20) - 1] = 2;
        std::fs::write(&b, changed).unwrap();
        assert_ne!(identity(&a).unwrap(), identity(&b).unwrap());
    }
}
