//! Contract-checked autotuning (issue 21).
//!
//! A kernel's candidates are its own schedule and the variants the compiler
//! emitted beside it: each generated and proved at build time, under its
//! guard. A candidate that failed a proof, or whose summation order cannot
//! meet the declared tolerance, was rejected by the compiler and has no
//! code (`KernelDef::rejected`), so no launch and no tuner can take it.
//!
//! The tuner times, for one launch's shape class, every candidate whose
//! guard admits the launch's dims (the keys that order the untuned choice
//! are preferences, not proof obligations), and keeps the fastest. The
//! table lives on disk, one file per device and driver
//! (`<cache>/tuning/<device>-driver<N>.json`, the format of
//! `tokitai_contracts::tuning`), each kernel's entries stamped with its
//! fingerprint (the sha256 of every candidate's name and source): a
//! rebuilt kernel, another GPU or another driver is tuned afresh, never
//! served a stale choice. A launch takes the table's choice for its class
//! where that choice admits its dims, else the compiler's order
//! (`KernelDef::choose`). `TOKITAI_TUNING=off` ignores the table (an
//! ablation switch, as `TOKITAI_SKIP_VARIANTS` is); `TOKITAI_TUNING=auto`
//! fills it as a run goes, tuning each kernel's shape class at its first
//! launch ([`Mode::Auto`]).

use crate::call::{Chosen, KernelDef};
use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap};
pub use tokitai_contracts::tuning::{CandidateTiming, ClassTuning};
use tokitai_contracts::tuning::{KernelTuning, TableFile, SCHEMA};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// A launch's shape class: each dim rounded up to a power of two
/// (`ceil(log2(d))`), so that launches of nearby sizes share a choice (the
/// rows routed to an expert change every step).
pub fn class_of(dims: &[i64]) -> Vec<u8> {
    dims.iter().map(|&d| dim_class(d)).collect()
}

fn dim_class(d: i64) -> u8 {
    if d <= 1 {
        0
    } else {
        (64 - (d - 1).leading_zeros()) as u8
    }
}

/// A class as people read it: `R<=65536 C<=1024`.
pub fn class_text(k: &KernelDef, class: &[u8]) -> String {
    k.info.dims.iter().zip(class).map(|(n, c)| format!("{}<={}", n, 1u64 << c)).collect::<Vec<_>>().join(" ")
}

/// Every candidate the build emitted (all of them proved): the kernel's
/// own schedule first, then its variants in the compiler's order; not
/// the observing twins (the monitor's, launched in place of a choice).
pub fn candidates(k: &KernelDef) -> Vec<Chosen> {
    k.all_compiled().into_iter().filter(|c| !crate::call::is_observing_twin(c.name)).collect()
}

/// Does a launch with `dims` admit `name` (its guard holds)? The kernel's
/// own schedule admits every launch its `requires` admits.
fn admits(k: &KernelDef, name: &str, dims: &[i64]) -> bool {
    name == k.info.name || k.variants.iter().any(|v| v.name == name && v.admits(dims))
}

/// Candidate `name` of `k`, where it is one.
fn candidate(k: &KernelDef, name: &str) -> Option<Chosen> {
    if name == k.info.name {
        return Some(k.primary());
    }
    k.variants.iter().find(|v| v.name == name).map(Chosen::of)
}

/// The schedule text of a candidate (`row-reduction block=128`).
fn params_of(k: &KernelDef, name: &str) -> &'static str {
    if name == k.info.name {
        return k.schedule_params;
    }
    k.variants.iter().find(|v| v.name == name).map(|v| v.params).unwrap_or("")
}

/// Tune one launch: time every candidate that `dims` admit with `time`
/// (the device's timer: median milliseconds of a candidate's launches),
/// list the rest with why they were not timed, and choose the fastest.
/// Only candidates with code are ever handed to `time`. `multiprocessors`:
/// the device's, for the untuned choice it reports as the default
/// ([`KernelDef::choose_on`]).
pub fn tune_with(k: &KernelDef, dims: &[i64], multiprocessors: Option<u32>, mut time: impl FnMut(&Chosen) -> Result<f64>) -> Result<ClassTuning> {
    let mut out = Vec::new();
    let mut best: Option<(f64, &'static str)> = None;
    for c in candidates(k) {
        let params = params_of(k, c.name).to_string();
        if !admits(k, c.name, dims) {
            let guard = k.variants.iter().find(|v| v.name == c.name).map(|v| guard_text(k, v)).unwrap_or_default();
            out.push(CandidateTiming { name: c.name.into(), schedule: params, status: "not admitted".into(), ms: None, note: guard });
            continue;
        }
        let ms = time(&c)?;
        if best.is_none_or(|(b, _)| ms < b) {
            best = Some((ms, c.name));
        }
        out.push(CandidateTiming { name: c.name.into(), schedule: params, status: "proved".into(), ms: Some(ms), note: String::new() });
    }
    out.extend(k.rejected.iter().map(|(name, params, why)| CandidateTiming { name: name.to_string(), schedule: params.to_string(), status: "rejected".into(), ms: None, note: why.to_string() }));
    let (_, choice) = best.ok_or_else(|| Error::Argument { kernel: k.info.name.into(), message: "no candidate to tune".into() })?;
    Ok(ClassTuning { class: class_of(dims), dims: dims.to_vec(), choice: choice.into(), default: k.choose_on(dims, multiprocessors).name.into(), candidates: out })
}

/// A variant's guard as `requires` clauses read (empty: none).
fn guard_text(k: &KernelDef, v: &crate::abi::tk_info::Variant) -> String {
    let name = |d: usize| k.info.dims.get(d).copied().unwrap_or("?");
    let mut clauses = Vec::new();
    if let Some((d, lo, hi, _)) = v.guard {
        if lo > 1 {
            clauses.push(format!("{} >= {}", name(d), lo));
        }
        if hi < i64::MAX {
            clauses.push(format!("{} <= {}", name(d), hi));
        }
    }
    if let Some((d, most)) = v.guard_also {
        clauses.push(format!("{} <= {}", name(d), most));
    }
    clauses.join(", ")
}

/// One kernel's choices in memory, by class, for the code whose
/// fingerprint (`KernelDef::fingerprint`) is `fingerprint`.
struct Choices {
    fingerprint: String,
    by_class: HashMap<Vec<u8>, String>,
}

/// The tuning table of one device, read from disk when the device opens.
pub struct Tuned {
    path: Option<PathBuf>,
    device: String,
    driver: i32,
    choices: RwLock<HashMap<String, Choices>>,
}

/// How launches use the table (`TOKITAI_TUNING`, read once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `off`: the compiler's order, the table ignored (an ablation switch).
    Off,
    /// Unset (or anything else): the table's choice where it has one.
    Table,
    /// `auto`: also, the first launch of a kernel in a shape class the
    /// table lacks times every candidate that launch admits first and
    /// records the fastest (`CudaBackend::launch`), so that a training
    /// run is tuned for the launches it makes. Not while a step is
    /// captured or rehearsed (its first eager step tunes).
    Auto,
}

pub fn mode() -> Mode {
    static MODE: std::sync::OnceLock<Mode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("TOKITAI_TUNING").as_deref() {
        Ok("off") => Mode::Off,
        Ok("auto") => Mode::Auto,
        _ => Mode::Table,
    })
}

/// Is the table used? Yes unless `TOKITAI_TUNING=off`.
fn tuning_on() -> bool {
    mode() != Mode::Off
}

/// Candidates named in `TOKITAI_FORCE` (comma-separated): a launch of the
/// kernel that owns one takes it wherever its guard admits the dims, tuned
/// or not, so that a check can run every proved candidate on the GPU
/// (`bench/run_tuning.sh`). Read once.
fn forced_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| std::env::var("TOKITAI_FORCE").map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default())
}

/// The candidate `TOKITAI_FORCE` names for this launch, if one of `k`'s
/// admits it.
pub fn forced(k: &KernelDef, dims: &[i64]) -> Option<Chosen> {
    let names = forced_names();
    if names.is_empty() {
        return None;
    }
    let name = names.iter().find(|n| admits(k, n, dims))?;
    candidate(k, name)
}

impl Tuned {
    /// The table of `device` under `driver` in `dir` (`<dir>/tuning/`): the
    /// choices stored there, or none. A file that cannot be read is
    /// reported once on stderr and ignored (tuning is an optimisation; a
    /// launch never depends on it).
    pub fn load(dir: &Path, device: &str, driver: i32) -> Tuned {
        let path = dir.join("tuning").join(format!("{}-driver{}.json", sanitize(device), driver));
        let t = Tuned { path: Some(path.clone()), device: device.into(), driver, choices: RwLock::new(HashMap::new()) };
        match std::fs::read(&path) {
            Ok(bytes) => match TableFile::parse(&bytes) {
                Ok(f) if f.device == device && f.driver == driver => {
                    if let Ok(mut c) = t.choices.write() {
                        for (name, kt) in f.kernels {
                            c.insert(name, Choices { fingerprint: kt.fingerprint, by_class: kt.classes.into_values().map(|ct| (ct.class, ct.choice)).collect() });
                        }
                    }
                }
                Ok(_) => eprintln!("warning: {}: a tuning table of another device or driver; ignored", path.display()),
                Err(e) => eprintln!("warning: {}: {}; ignored", path.display(), e),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("warning: {}: {}; tuning table ignored", path.display(), e),
        }
        t
    }

    /// Where the table is kept.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The tuned choice for this launch: the candidate stored for its
    /// class, if the table is on, the kernel's fingerprint is the stored
    /// one, the candidate exists, admits these dims and is not skipped.
    pub fn choice(&self, k: &KernelDef, dims: &[i64]) -> Option<Chosen> {
        if !tuning_on() {
            return None;
        }
        let choices = self.choices.read().ok()?;
        if choices.is_empty() {
            return None;
        }
        let c = choices.get(k.info.name).filter(|c| c.fingerprint == k.fingerprint)?;
        // The class without an allocation (this runs at every launch).
        let mut class = [0u8; 16];
        let n = dims.len().min(class.len());
        for (slot, &d) in class.iter_mut().zip(dims) {
            *slot = dim_class(d);
        }
        let name = c.by_class.get(&class[..n])?;
        if !admits(k, name, dims) || crate::call::skipped(k, name) {
            return None;
        }
        candidate(k, name)
    }

    /// Has the table a choice for this launch's class of `k` (tuned for the
    /// kernel as built)? `TOKITAI_TUNING=auto` tunes a class once.
    pub fn has_class(&self, k: &KernelDef, dims: &[i64]) -> bool {
        let Ok(choices) = self.choices.read() else { return false };
        choices.get(k.info.name).filter(|c| c.fingerprint == k.fingerprint).is_some_and(|c| c.by_class.contains_key(&class_of(dims)))
    }

    /// Keep `t` as the choice of its class for `k`, in memory and on disk
    /// (the whole file rewritten atomically; entries of kernels whose
    /// fingerprint changed are replaced).
    pub fn record(&self, k: &KernelDef, t: &ClassTuning) -> Result<()> {
        let fp = k.fingerprint;
        if let Ok(mut c) = self.choices.write() {
            let e = c.entry(k.info.name.to_string()).or_insert_with(|| Choices { fingerprint: fp.into(), by_class: HashMap::new() });
            if e.fingerprint != fp {
                *e = Choices { fingerprint: fp.into(), by_class: HashMap::new() };
            }
            e.by_class.insert(t.class.clone(), t.choice.clone());
        }
        let Some(path) = &self.path else { return Ok(()) };
        let mut file = std::fs::read(path).ok().and_then(|b| TableFile::parse(&b).ok()).unwrap_or_default();
        file.schema = SCHEMA;
        file.device = self.device.clone();
        file.driver = self.driver;
        let kt = file.kernels.entry(k.info.name.to_string()).or_default();
        if kt.fingerprint != fp {
            *kt = KernelTuning { fingerprint: fp.into(), classes: BTreeMap::new() };
        }
        kt.classes.insert(class_text(k, &t.class), t.clone());
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| Error::Tensor(format!("tuning table: {}", e)))?;
        crate::cache::write_atomic(path, &bytes).map_err(|error| Error::Io { path: path.clone(), error })
    }
}

/// A device name as a file name: letters, digits, `-` and `_` kept, the
/// rest `_`.
fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::layernorm::layernorm_fwd;
    use crate::kernels::linear::linear_fwd;
    use crate::kernels::softmax::softmax_fwd;

    /// A timer that answers from a table (unknown names: 1 ms) and keeps
    /// every name it was asked to time.
    fn fake<'a>(times: &[(&str, f64)], asked: &'a mut Vec<String>) -> impl FnMut(&Chosen) -> Result<f64> + 'a {
        let times: Vec<(String, f64)> = times.iter().map(|(n, t)| (n.to_string(), *t)).collect();
        move |c: &Chosen| {
            asked.push(c.name.to_string());
            Ok(times.iter().find(|(n, _)| n == c.name).map(|(_, t)| *t).unwrap_or(1.0))
        }
    }

    #[test]
    fn each_kernels_fingerprint_is_that_of_the_code_it_carries() {
        // The compiler stamped it; a table is keyed by it, and the report
        // recomputes it from the sources it compiles (same function).
        for k in crate::kernels::all() {
            let cands = candidates(k);
            let again = tokitai_contracts::tuning::fingerprint(k.info.name, cands.iter().map(|c| (c.name, c.hip_source)));
            assert_eq!(k.fingerprint, again, "{}", k.info.name);
        }
    }

    #[test]
    fn classes_round_each_dim_up_to_a_power_of_two() {
        assert_eq!(class_of(&[1, 2, 3, 1024, 1025, 32000]), vec![0, 1, 2, 10, 11, 15]);
        assert_eq!(class_text(&softmax_fwd::KERNEL, &class_of(&[65536, 1000])), "R<=65536 C<=1024");
    }

    #[test]
    fn the_tuner_times_every_admitted_candidate_and_no_other() {
        let k = &softmax_fwd::KERNEL;
        let mut asked = Vec::new();
        let t = tune_with(k, &[4096, 1024], None, fake(&[("softmax_fwd_c256x2", 0.5)], &mut asked)).expect("tunes");
        // Rows of 1024 fit every cached form: all candidates are timed,
        // each once, the kernel's own schedule first.
        let all: Vec<&str> = candidates(k).iter().map(|c| c.name).collect();
        assert_eq!(asked, all);
        assert_eq!(t.choice, "softmax_fwd_c256x2");
        assert_eq!(t.default, k.choose(&[4096, 1024]).name);
        // Rows of 32000 fit no cached form: those are listed, never timed.
        let mut asked = Vec::new();
        let t = tune_with(k, &[64, 32000], None, fake(&[], &mut asked)).expect("tunes");
        assert!(asked.iter().all(|n| !n.contains("_c")), "{:?}", asked);
        let skipped: Vec<&CandidateTiming> = t.candidates.iter().filter(|c| c.status == "not admitted").collect();
        assert!(!skipped.is_empty() && skipped.iter().all(|c| c.name.contains("_c") && c.ms.is_none() && c.note.starts_with("C <= ")), "{:?}", skipped);
    }

    #[test]
    fn the_default_a_tuning_reports_is_the_launch_rule_on_the_device() {
        // At 2560 x 2048 x 2048 on 132 SMs an untuned launch takes the
        // 128-row tiles in place of the 256-row ones (`choose_on`): that is
        // the default the tuning is compared with, not the compiler's
        // order alone.
        let k = &linear_fwd::KERNEL;
        let mut asked = Vec::new();
        let t = tune_with(k, &[2560, 2048, 2048], Some(132), fake(&[], &mut asked)).expect("tunes");
        assert_eq!(t.default, "linear_fwd_ws128");
        assert!(asked.iter().any(|n| n == "linear_fwd_ws128") && asked.iter().any(|n| n == "linear_fwd_ws"), "{:?}", asked);
        let t = tune_with(k, &[2560, 2048, 2048], None, fake(&[], &mut Vec::new())).expect("tunes");
        assert_eq!(t.default, "linear_fwd_ws");
    }

    #[test]
    fn a_rejected_candidate_is_listed_and_never_timed() {
        let k = &layernorm_fwd::KERNEL;
        assert!(!k.rejected.is_empty(), "layernorm_fwd's cached forms miss its tolerance");
        let mut asked = Vec::new();
        let t = tune_with(k, &[2048, 1024], None, fake(&[], &mut asked)).expect("tunes");
        for (name, _, why) in k.rejected {
            assert!(!asked.iter().any(|a| a == name), "{} was timed", name);
            let c = t.candidates.iter().find(|c| c.name == *name).expect("listed");
            assert_eq!((c.status.as_str(), c.ms, c.note.as_str()), ("rejected", None, *why));
        }
        assert!(t.candidates.iter().filter(|c| c.status == "proved").all(|c| k.rejected.iter().all(|r| r.0 != c.name)));
    }

    #[test]
    fn a_stored_choice_serves_its_class_where_its_guard_holds() {
        let dir = std::env::temp_dir().join(format!("tokitai-tune-{}-{}", std::process::id(), line!()));
        let _ = std::fs::remove_dir_all(&dir);
        let k = &linear_fwd::KERNEL;
        // Tuned at K = 128 with the warpgroup form fastest.
        let wg = k.variants.iter().find(|v| v.name == "linear_fwd_wg").expect("a warpgroup variant");
        let mut asked = Vec::new();
        let t = tune_with(k, &[2048, 128, 128], None, fake(&[(wg.name, 0.01)], &mut asked)).expect("tunes");
        assert_eq!(t.choice, "linear_fwd_wg");
        let table = Tuned::load(&dir, "GPU X", 13000);
        table.record(k, &t).expect("recorded");
        // Another process: the same class takes it.
        let again = Tuned::load(&dir, "GPU X", 13000);
        assert_eq!(again.choice(k, &[2000, 128, 100]).map(|c| c.name), Some("linear_fwd_wg"));
        // K = 100 is in the class, but the unit's guard (K >= 128) does not
        // hold: the compiler's order decides.
        assert!(!wg.admits(&[2048, 100, 128]));
        assert_eq!(again.choice(k, &[2048, 100, 128]).map(|c| c.name), None);
        // Another class, another GPU, another driver: nothing stored.
        assert_eq!(again.choice(k, &[4096, 128, 128]).map(|c| c.name), None);
        // What `TOKITAI_TUNING=auto` asks before it tunes a launch: the
        // class is known (a choice that the guard refuses included: it
        // was tuned; the compiler's order serves it), another is not.
        assert!(again.has_class(k, &[2000, 128, 100]) && again.has_class(k, &[2048, 100, 128]));
        assert!(!again.has_class(k, &[4096, 128, 128]) && !again.has_class(&softmax_fwd::KERNEL, &[2048, 128]));
        assert_eq!(Tuned::load(&dir, "GPU Y", 13000).choice(k, &[2048, 128, 128]).map(|c| c.name), None);
        assert_eq!(Tuned::load(&dir, "GPU X", 12080).choice(k, &[2048, 128, 128]).map(|c| c.name), None);
        // A table made for other code (another fingerprint) is not used.
        let path = again.path().expect("a path").to_path_buf();
        let text = std::fs::read_to_string(&path).expect("table");
        std::fs::write(&path, text.replace(k.fingerprint, &"0".repeat(64))).expect("write");
        assert_eq!(Tuned::load(&dir, "GPU X", 13000).choice(k, &[2048, 128, 128]).map(|c| c.name), None);
        // A damaged file is ignored, not fatal.
        std::fs::write(&path, b"{ not json").expect("write");
        assert_eq!(Tuned::load(&dir, "GPU X", 13000).choice(k, &[2048, 128, 128]).map(|c| c.name), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
