//! Compiled kernel code on disk, shared by every process of the user:
//! `<dir>/<sha256 key>.<ext>`. Builders of one key serialise on an
//! exclusive file lock (`<key>.lock`), re-check after taking it, and publish
//! by an atomic rename, so readers never see half a file and a crash leaves
//! nothing behind but a stale lock file (which is harmless).

use crate::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

/// Where code is cached: `$TOKITAI_CACHE_DIR`, else `$XDG_CACHE_HOME/tokitai`,
/// else `~/.cache/tokitai`, else a folder in the temporary directory.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TOKITAI_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tokitai");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("tokitai");
    }
    std::env::temp_dir().join("tokitai-cache")
}

impl DiskCache {
    pub fn new(dir: impl AsRef<Path>) -> DiskCache {
        DiskCache { dir: dir.as_ref().to_path_buf() }
    }
    pub fn default_location() -> DiskCache {
        DiskCache::new(default_dir())
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn path(&self, key: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{}", key, ext))
    }

    /// The cached bytes of `key`, building and publishing them first if no
    /// process has. `build` runs at most once per key across processes
    /// (unless a builder dies mid-way; the next one then builds again).
    pub fn get_or_build(&self, key: &str, ext: &str, build: impl FnOnce() -> Result<Vec<u8>>) -> Result<(Vec<u8>, bool)> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| Error::Io { path, error }
        };
        let path = self.path(key, ext);
        if let Ok(bytes) = std::fs::read(&path) {
            return Ok((bytes, true));
        }
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let lock_path = self.path(key, "lock");
        let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        // Another process may have published while we waited.
        if let Ok(bytes) = std::fs::read(&path) {
            return Ok((bytes, true));
        }
        let bytes = build()?;
        let tmp = self.dir.join(format!(".{}.{}.{}.tmp", key, std::process::id(), unique()));
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&bytes).and_then(|_| f.sync_all()).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        drop(lock);
        Ok((bytes, false))
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Write `bytes` to `path` so that a crash leaves the old file or the new
/// one, never a mix: a temporary sibling, flushed to disk, then renamed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_or_crash(path, bytes, None)
}

/// `write_atomic`, except that with `crash_after = Some(n)` the process
/// aborts after writing `n` bytes of the temporary file: a crash in the
/// middle of a write, for the tests that prove it loses nothing.
pub fn write_atomic_or_crash(path: &Path, bytes: &[u8], crash_after: Option<usize>) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    if let Some(n) = crash_after {
        f.write_all(&bytes[..n.min(bytes.len())])?;
        f.sync_all()?;
        std::process::abort();
    }
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}
