//! The persistent proof cache: outcomes of proofs, tolerance checks,
//! report sampling and mutation tests, kept between runs so that a kernel
//! that did not change is not proved again.
//!
//! One SQLite database, `proofs.sqlite`, in the cache directory. SQLite
//! gives what a cache shared by several tokitaic processes (a build script,
//! a proc macro and the command line at once) needs: every write is an
//! atomic transaction, readers never see half a row, and writers wait for
//! each other (WAL journal, busy timeout).
//!
//! Nothing read back is trusted blindly:
//! - each row carries the version of the tool that wrote it (compiler
//!   version, a fingerprint of the prover's sources, the Z3 version); a row
//!   of another version is ignored, recomputed and replaced;
//! - each row carries the SHA-256 of its value; a value that does not match
//!   (a torn or edited row) or does not parse is recomputed and replaced;
//! - a database that is not one (truncated, overwritten) is moved aside and
//!   started afresh; a directory that cannot be created or written gives a
//!   warning and verification without the cache, never a failure.
//!
//! The key is a hash of everything the value depends on, chosen by the
//! caller (see [`Key`]); the version is deliberately not part of it, so that
//! a new version replaces the rows of the old one instead of piling up.

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde::{de::DeserializeOwned, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The file name of the database inside the cache directory.
pub const DB_FILE: &str = "proofs.sqlite";

/// The environment variable that names the cache directory.
pub const DIR_ENV: &str = "TOKITAI_CACHE_DIR";

/// The version a row must carry to be read: the compiler's version, a
/// fingerprint of the sources of the compiler and the prover (so that a
/// development build with a changed prover never reads what another
/// build proved), and the solver's version.
pub fn tool_version() -> String {
    format!("tokitai-compiler {} (sources {}) / {}", crate::VERSION, env!("TOKITAI_SOURCE_FINGERPRINT"), tokitai_contracts::solver_version())
}

/// A cache key: SHA-256 over a namespace and length-prefixed parts, so that
/// no two different sequences of parts collide by concatenation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key([u8; 32]);

/// Builds a [`Key`] part by part.
pub struct KeyBuilder(Sha256);

impl Key {
    pub fn builder(namespace: &str) -> KeyBuilder {
        KeyBuilder(Sha256::new()).part(namespace)
    }
}

impl KeyBuilder {
    pub fn part(mut self, bytes: impl AsRef<[u8]>) -> KeyBuilder {
        let bytes = bytes.as_ref();
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub fn finish(self) -> Key {
        Key(self.0.finalize().into())
    }
}

/// The `Debug` text of an IR value without its source positions (every
/// `Span { lo: .., hi: .. }`), for keys: a proof does not depend on where
/// in its file a kernel sits, and editing one kernel moves every kernel
/// after it.
pub fn without_spans(debug: &str) -> String {
    const OPEN: &str = "Span { lo: ";
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        match after.find('}') {
            Some(end) if after[OPEN.len()..end].chars().all(|c| c.is_ascii_digit() || ", hi:".contains(c)) => {
                out.push_str("Span");
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(OPEN);
                rest = &after[OPEN.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A key part naming an IR value (a kernel, its schedule) by its content,
/// without source positions.
pub fn fingerprint(value: &impl std::fmt::Debug) -> String {
    let text = without_spans(&format!("{:?}", value));
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{:02x}", b)).collect()
}

/// Where the cache lives.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// `$TOKITAI_CACHE_DIR`, else the user's cache directory
    /// (`$XDG_CACHE_HOME/tokitai`, else `~/.cache/tokitai`).
    Default,
    Dir(PathBuf),
    Off,
}

/// What this process read and wrote, for the summary line.
#[derive(Debug, Default)]
pub struct Stats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Rows of another version (recomputed and replaced).
    pub stale: AtomicU64,
    /// Rows whose value did not match its checksum or did not parse.
    pub corrupt: AtomicU64,
    pub writes: AtomicU64,
}

/// An open cache.
pub struct Cache {
    dir: PathBuf,
    conn: Mutex<Connection>,
    version: String,
    pub stats: Stats,
    /// Warn once about a failing read or write, not once per row.
    warned: std::sync::atomic::AtomicBool,
}

/// Why a cache could not be opened.
#[derive(Debug)]
pub struct OpenError {
    pub dir: PathBuf,
    pub reason: String,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the proof cache in {} cannot be used ({}); verifying without it", self.dir.display(), self.reason)
    }
}

impl Location {
    /// The directory this location names, or why there is none.
    pub fn dir(&self) -> Result<Option<PathBuf>, String> {
        match self {
            Location::Off => Ok(None),
            Location::Dir(d) => Ok(Some(d.clone())),
            Location::Default => {
                if let Some(d) = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
                    return Ok(Some(PathBuf::from(d)));
                }
                if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
                    return Ok(Some(PathBuf::from(d).join("tokitai")));
                }
                match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
                    Some(h) => Ok(Some(PathBuf::from(h).join(".cache").join("tokitai"))),
                    None => Err(format!("neither {} nor XDG_CACHE_HOME nor HOME is set", DIR_ENV)),
                }
            }
        }
    }
}

impl Cache {
    /// Open (creating) the cache in `dir`. A file there that is not a
    /// database is moved aside to `proofs.sqlite.corrupt` and replaced.
    pub fn open(dir: &Path) -> Result<Cache, OpenError> {
        let fail = |reason: String| OpenError { dir: dir.to_path_buf(), reason };
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create the directory: {}", e)))?;
        let path = dir.join(DB_FILE);
        let conn = match open_db(&path) {
            Ok(c) => c,
            Err(e) if is_corruption(&e) => {
                let aside = dir.join(format!("{}.corrupt", DB_FILE));
                std::fs::rename(&path, &aside).map_err(|r| fail(format!("{}; moving it aside failed: {}", e, r)))?;
                for suffix in ["-wal", "-shm"] {
                    let _ = std::fs::remove_file(dir.join(format!("{}{}", DB_FILE, suffix)));
                }
                eprintln!("warning: the proof cache {} was not a readable database ({}); moved to {} and started afresh", path.display(), e, aside.display());
                open_db(&path).map_err(|e| fail(e.to_string()))?
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        Ok(Cache { dir: dir.to_path_buf(), conn: Mutex::new(conn), version: tool_version(), stats: Stats::default(), warned: Default::default() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The value stored under `key` by this version, if it is intact.
    pub fn get<T: DeserializeOwned>(&self, key: &Key) -> Option<T> {
        let row: Option<(String, Vec<u8>, Vec<u8>)> = {
            let conn = self.conn.lock().ok()?;
            let found = conn
                .prepare_cached("SELECT version, value, checksum FROM entries WHERE key = ?1")
                .and_then(|mut s| s.query_row(params![&key.0[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional());
            match found {
                Ok(row) => row,
                Err(e) => {
                    self.warn_once(&format!("reading failed: {}", e));
                    None
                }
            }
        };
        let Some((version, value, checksum)) = row else {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if version != self.version {
            self.stats.stale.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if Sha256::digest(&value)[..] != checksum[..] {
            self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match serde_json::from_slice(&value) {
            Ok(v) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(v)
            }
            Err(_) => {
                self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Store `value` under `key` for this version, replacing any row there.
    /// Best effort: a cache that cannot be written only costs time.
    pub fn put<T: Serialize + DeserializeOwned>(&self, key: &Key, value: &T) {
        let Ok(bytes) = serde_json::to_vec(value) else { return };
        // JSON has no infinities or NaNs (they become `null`): a value that
        // does not read back is not stored, rather than read as damaged.
        if serde_json::from_slice::<T>(&bytes).is_err() {
            return;
        }
        let checksum = Sha256::digest(&bytes).to_vec();
        let Ok(conn) = self.conn.lock() else { return };
        let written = conn
            .prepare_cached("INSERT OR REPLACE INTO entries (key, version, value, checksum) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![&key.0[..], &self.version, bytes, checksum]));
        match written {
            Ok(_) => {
                self.stats.writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                drop(conn);
                self.warn_once(&format!("writing failed: {}", e));
            }
        }
    }

    /// One line for the end of a run.
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut line = format!("proof cache {}: {} reused, {} computed", self.dir.display(), n(&s.hits), n(&s.misses) + n(&s.stale) + n(&s.corrupt));
        if n(&s.stale) > 0 {
            line += &format!(" ({} from another version replaced)", n(&s.stale));
        }
        if n(&s.corrupt) > 0 {
            line += &format!(" ({} damaged entries recomputed)", n(&s.corrupt));
        }
        line
    }

    fn warn_once(&self, what: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!("warning: proof cache {}: {}; going on without it where it fails", self.dir.display(), what);
        }
    }

    /// Overwrite the value of every row with `bytes` (tests of the
    /// corruption check).
    #[doc(hidden)]
    pub fn damage_every_value_for_tests(&self, bytes: &[u8]) {
        if let Ok(conn) = self.conn.lock() {
            let _ = conn.execute("UPDATE entries SET value = ?1", params![bytes]);
        }
    }

    /// Mark every row as written by another version (tests).
    #[doc(hidden)]
    pub fn age_every_row_for_tests(&self) {
        if let Ok(conn) = self.conn.lock() {
            let _ = conn.execute("UPDATE entries SET version = 'an older tokitai'", []);
        }
    }
}

/// Open (creating) the database. Switching a new file to WAL takes a lock
/// that SQLite does not wait for: several processes opening the same new
/// cache at once see "database is locked", so that is retried for a while.
fn open_db(path: &Path) -> rusqlite::Result<Connection> {
    let mut tries = 0;
    loop {
        match open_db_once(path) {
            Err(e) if tries < 50 && matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20 * tries));
            }
            other => return other,
        }
    }
}

fn open_db_once(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    // Other processes may hold the write lock for a moment.
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // WAL: readers and one writer at once; NORMAL synchronisation keeps
    // every transaction atomic (a crash loses at most the last ones, which
    // are then recomputed) without an fsync per row.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS entries (
            key BLOB PRIMARY KEY,
            version TEXT NOT NULL,
            value BLOB NOT NULL,
            checksum BLOB NOT NULL
        ) WITHOUT ROWID;",
    )?;
    Ok(conn)
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt))
}

static GLOBAL: OnceLock<Option<Cache>> = OnceLock::new();

/// Choose the process's cache, once; a later call changes nothing and
/// returns `false`. An unusable location prints a warning and leaves the
/// process without a cache. Never called: the cache named by
/// `$TOKITAI_CACHE_DIR`, or none.
pub fn configure(location: Location) -> bool {
    let mut first = false;
    GLOBAL.get_or_init(|| {
        first = true;
        open_location(&location)
    });
    first
}

fn open_location(location: &Location) -> Option<Cache> {
    let dir = match location.dir() {
        Ok(d) => d?,
        Err(reason) => {
            eprintln!("warning: no proof cache: {}", reason);
            return None;
        }
    };
    match Cache::open(&dir) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("warning: {}", e);
            None
        }
    }
}

/// The process's cache, if it has one.
pub fn global() -> Option<&'static Cache> {
    GLOBAL
        .get_or_init(|| {
            let from_env = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty())?;
            open_location(&Location::Dir(PathBuf::from(from_env)))
        })
        .as_ref()
}

/// `compute()` unless the process's cache holds the value for `key`;
/// computed values that `keep` accepts are stored. Returns the value and
/// whether it came from the cache.
pub fn cached<T: Serialize + DeserializeOwned>(key: impl FnOnce() -> Key, keep: impl FnOnce(&T) -> bool, compute: impl FnOnce() -> T) -> (T, bool) {
    let Some(cache) = global() else { return (compute(), false) };
    let key = key();
    if let Some(v) = cache.get(&key) {
        return (v, true);
    }
    let v = compute();
    if keep(&v) {
        cache.put(&key, &v);
    }
    (v, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::builder("test").part(s).finish()
    }

    #[test]
    fn keys_ignore_source_positions_only() {
        let a = "Access { buf: 0, span: Span { lo: 10, hi: 20 }, what: \"x\" }";
        let b = "Access { buf: 0, span: Span { lo: 110, hi: 120 }, what: \"x\" }";
        let c = "Access { buf: 1, span: Span { lo: 10, hi: 20 }, what: \"x\" }";
        assert_eq!(without_spans(a), "Access { buf: 0, span: Span, what: \"x\" }");
        assert_eq!(without_spans(a), without_spans(b));
        assert_ne!(without_spans(a), without_spans(c));
        // Text that only looks like the start of a span is kept.
        assert_eq!(without_spans("Span { lo: x }"), "Span { lo: x }");
    }

    #[test]
    fn keys_separate_their_parts() {
        let ab_c = Key::builder("n").part("ab").part("c").finish();
        let a_bc = Key::builder("n").part("a").part("bc").finish();
        assert_ne!(ab_c, a_bc);
        assert_eq!(ab_c, Key::builder("n").part("ab").part("c").finish());
    }

    #[test]
    fn stores_reads_back_and_survives_reopening() {
        let dir = tempdir("roundtrip");
        let c = Cache::open(&dir).unwrap();
        assert_eq!(c.get::<Vec<i32>>(&key("a")), None);
        c.put(&key("a"), &vec![1, 2, 3]);
        assert_eq!(c.get::<Vec<i32>>(&key("a")), Some(vec![1, 2, 3]));
        // An infinity does not survive JSON: not stored, not misread.
        c.put(&key("inf"), &f64::INFINITY);
        assert_eq!(c.get::<f64>(&key("inf")), None);
        assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 0);
        drop(c);
        let c = Cache::open(&dir).unwrap();
        assert_eq!(c.get::<Vec<i32>>(&key("a")), Some(vec![1, 2, 3]));
        assert_eq!(c.stats.hits.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_damaged_value_is_not_trusted() {
        let dir = tempdir("damaged");
        let c = Cache::open(&dir).unwrap();
        c.put(&key("a"), &vec![1, 2, 3]);
        // Same length, other content: only the checksum can tell.
        c.damage_every_value_for_tests(b"[1,2,4]");
        assert_eq!(c.get::<Vec<i32>>(&key("a")), None);
        assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 1);
        c.put(&key("a"), &vec![1, 2, 3]);
        assert_eq!(c.get::<Vec<i32>>(&key("a")), Some(vec![1, 2, 3]));
    }

    #[test]
    fn a_row_of_another_version_is_ignored_and_replaced() {
        let dir = tempdir("stale");
        let c = Cache::open(&dir).unwrap();
        c.put(&key("a"), &7u32);
        c.age_every_row_for_tests();
        assert_eq!(c.get::<u32>(&key("a")), None);
        assert_eq!(c.stats.stale.load(Ordering::Relaxed), 1);
        c.put(&key("a"), &8u32);
        assert_eq!(c.get::<u32>(&key("a")), Some(8));
    }

    #[test]
    fn a_file_that_is_not_a_database_is_moved_aside() {
        let dir = tempdir("notadb");
        std::fs::write(dir.join(DB_FILE), vec![0x5a; 4096]).unwrap();
        let c = Cache::open(&dir).unwrap();
        c.put(&key("a"), &1u8);
        assert_eq!(c.get::<u8>(&key("a")), Some(1));
        assert!(dir.join(format!("{}.corrupt", DB_FILE)).exists());
    }

    #[test]
    fn a_directory_that_cannot_be_created_is_an_error_not_a_panic() {
        let dir = tempdir("blocked");
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let err = Cache::open(&file.join("cache")).err().expect("a directory under a file cannot be created");
        assert!(err.to_string().contains("cannot create the directory"), "{}", err);
    }

    #[test]
    fn two_handles_on_one_database_see_each_others_writes() {
        let dir = tempdir("shared");
        let a = Cache::open(&dir).unwrap();
        let b = Cache::open(&dir).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| (0..200).for_each(|i| a.put(&key(&format!("a{}", i)), &i)));
            s.spawn(|| (0..200).for_each(|i| b.put(&key(&format!("b{}", i)), &i)));
        });
        assert_eq!(a.get::<i32>(&key("b199")), Some(199));
        assert_eq!(b.get::<i32>(&key("a199")), Some(199));
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tokitai-cache-test-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
