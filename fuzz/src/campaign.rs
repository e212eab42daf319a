//! The campaign: inputs numbered from 0, each drawn deterministically from
//! (seed, number), half generated from the grammar and half token-mutated
//! examples; each goes through parsing, checking, and scheduling and
//! printing for every target (`compile_with` without the prover, then the
//! module's text), and every `verify_every`-th one that compiles goes
//! through the prover as well, with the solver timeout. A panic, a failure
//! without an error diagnostic, or an input that runs past the hang limit
//! is a defect; the input is kept (under `out`) to become a regression
//! test.

use crate::{grammar, mutate};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};
use serde::Serialize;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokitai_compiler::build::{compile_with, BuildError, Options};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

/// Every target a kernel is printed for.
pub fn targets() -> Vec<Target> {
    ["cuda-sm90", "cuda-sm80", "hip-gfx90a", "hip-gfx942"].iter().map(|t| t.parse().expect("a known target")).collect()
}

#[derive(Clone, Debug)]
pub struct Config {
    pub inputs: u64,
    pub seed: u64,
    /// Inputs `2 j` and `2 j + 1` (a generated and a mutated one) for
    /// every `j` a multiple of this are also verified when they compile
    /// (0: none).
    pub verify_every: u64,
    /// The solver's timeout per obligation.
    pub verify_timeout_ms: u32,
    /// An input still running after this long is a hang.
    pub hang_after: Duration,
    /// Where defective inputs are written (none: kept in the report only).
    pub out: Option<PathBuf>,
    /// Print a progress line this often.
    pub progress_every: Option<Duration>,
    /// The process's resident memory past which the inputs running are a
    /// runaway (kept and printed, exit 4), in MiB (0: no limit).
    pub max_rss_mib: u64,
}

/// The process's resident memory in MiB (Linux; 0 elsewhere).
fn rss_mib() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm").ok().and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok())).unwrap_or(0);
    pages * 4096 / (1 << 20)
}

/// Where an input came from.
#[derive(Clone, Debug)]
pub enum Origin {
    Generated,
    Mutated(String),
}

/// Input `id` of the campaign of `seed` (mutants of `examples`, the
/// kernels, and of `files`, the whole files), and where it came from.
pub fn input(seed: u64, id: u64, examples: &[(String, String)], files: &[(String, String)]) -> (String, Origin) {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&id.to_le_bytes());
    key[16..24].copy_from_slice(b"tokitaif");
    let mut runner = TestRunner::new_with_rng(PtConfig::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    let draw = |runner: &mut TestRunner, s: &dyn Fn() -> proptest::strategy::BoxedStrategy<String>| s().new_tree(runner).map(|t| t.current()).unwrap_or_default();
    if id.is_multiple_of(2) || examples.is_empty() {
        (draw(&mut runner, &|| grammar::program().boxed()), Origin::Generated)
    } else {
        // One mutant in eight is of a whole file (every kernel of it, as
        // `tokitaic` reads a file), the rest of one kernel.
        let j = (id / 2) as usize;
        let (name, text) = if j.is_multiple_of(8) && !files.is_empty() { &files[(j / 8) % files.len()] } else { &examples[j % examples.len()] };
        let text = text.clone();
        let edits = draw(&mut runner, &move || {
            let text = text.clone();
            proptest::collection::vec(mutate::edit(), 1..5).prop_map(move |e| mutate::apply(&text, &e)).boxed()
        });
        (edits, Origin::Mutated(name.clone()))
    }
}

/// How one input ended, as `tokitaic` would exit on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Outcome {
    /// Compiled (exit 0).
    Compiled,
    /// Refused with error diagnostics (exit 1).
    Diagnosed,
    /// A failure that carries no error diagnostic (a defect).
    Silent,
    /// The compiler panicked (a defect: exit 101).
    Panicked,
}

impl Outcome {
    pub fn exit_code(self) -> &'static str {
        match self {
            Outcome::Compiled => "0 (compiled)",
            Outcome::Diagnosed => "1 (error diagnostics)",
            Outcome::Silent => "1 without a diagnostic (defect)",
            Outcome::Panicked => "101 (panic: defect)",
        }
    }
}

/// A defective input.
#[derive(Clone, Debug, Serialize)]
pub struct Defect {
    pub id: u64,
    pub what: String,
    pub origin: String,
    pub file: Option<String>,
}

/// What the prover said of one sampled input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    Proved,
    /// An obligation refuted or not provable (error diagnostics).
    Refuted,
    /// The solver gave up on an obligation (W0901 `unknown`).
    Unknown,
    Panicked,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub seed: u64,
    pub inputs: u64,
    pub generated: u64,
    pub mutated: u64,
    /// Inputs that parsed, that checked, that compiled (scheduled) for
    /// every target, and that were printed per target.
    pub parsed: u64,
    pub checked: u64,
    pub scheduled_all_targets: u64,
    pub printed: BTreeMap<String, u64>,
    /// tokitaic's exit code per input (over all targets: the worst).
    pub exit_codes: BTreeMap<&'static str, u64>,
    pub verified: u64,
    pub verdicts: BTreeMap<String, u64>,
    pub slowest_front_s: f64,
    pub slowest_front_id: u64,
    pub slowest_verify_s: f64,
    pub slowest_verify_id: u64,
    pub defects: Vec<Defect>,
    pub hangs: Vec<Defect>,
    pub seconds: f64,
}

impl Report {
    pub fn clean(&self) -> bool {
        self.defects.is_empty() && self.hangs.is_empty()
    }

    pub fn render(&self) -> String {
        let mut s = format!("{} inputs (seed {}): {} generated, {} mutated, in {:.1} s\n", self.inputs, self.seed, self.generated, self.mutated, self.seconds);
        s.push_str(&format!("stages: parsed {}, checked {}, scheduled for every target {}\n", self.parsed, self.checked, self.scheduled_all_targets));
        s.push_str(&format!("printed per target: {}\n", self.printed.iter().map(|(t, n)| format!("{} {}", t, n)).collect::<Vec<_>>().join(", ")));
        s.push_str(&format!("exit codes: {}\n", self.exit_codes.iter().map(|(c, n)| format!("{}: {}", c, n)).collect::<Vec<_>>().join(", ")));
        s.push_str(&format!("verified {}: {}\n", self.verified, self.verdicts.iter().map(|(v, n)| format!("{} {}", v, n)).collect::<Vec<_>>().join(", ")));
        s.push_str(&format!("slowest: front {:.2} s (input {}), verify {:.2} s (input {})\n", self.slowest_front_s, self.slowest_front_id, self.slowest_verify_s, self.slowest_verify_id));
        s.push_str(&format!("defects: {} panics or silent failures, {} hangs\n", self.defects.len(), self.hangs.len()));
        for d in self.defects.iter().chain(&self.hangs) {
            s.push_str(&format!("  input {} ({}): {}{}\n", d.id, d.origin, d.what, d.file.as_ref().map(|f| format!(" [{}]", f)).unwrap_or_default()));
        }
        s
    }
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Panics inside the campaign are recorded, not printed.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name().is_some_and(|n| n.starts_with("fuzz-")) {
                let msg = format!("{}", info);
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
            } else {
                default(info);
            }
        }));
    });
}

fn panicked<T>(r: std::thread::Result<T>) -> Result<T, String> {
    r.map_err(|_| LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "a panic".into()))
}

/// What one input did in the front stages.
struct Front {
    parsed: bool,
    checked: bool,
    compiled: Vec<bool>,
    outcome: Outcome,
    defect: Option<String>,
}

fn front(text: &str, targets: &[Target]) -> Front {
    let file = SourceFile::new("fuzz.tk", text.to_string());
    let mut f = Front { parsed: false, checked: false, compiled: vec![false; targets.len()], outcome: Outcome::Compiled, defect: None };
    match panicked(catch_unwind(|| tokitai_compiler::syntax::parse_file(text).is_ok())) {
        Ok(p) => f.parsed = p,
        Err(m) => {
            f.outcome = Outcome::Panicked;
            f.defect = Some(format!("parse: {}", m));
            return f;
        }
    }
    match panicked(catch_unwind(AssertUnwindSafe(|| tokitai_compiler::driver::check_source(&file).program.is_some()))) {
        Ok(c) => f.checked = c,
        Err(m) => {
            f.outcome = Outcome::Panicked;
            f.defect = Some(format!("check: {}", m));
            return f;
        }
    }
    // What fails to parse or check fails before any target is looked at:
    // one compile shows its diagnostic for all.
    let targets = if f.checked { targets } else { &targets[..1] };
    for (i, t) in targets.iter().enumerate() {
        let opts = Options { verify: false, ..Options::new(t.clone()) };
        let r = panicked(catch_unwind(AssertUnwindSafe(|| match compile_with(file.clone(), &opts) {
            Ok(arts) => {
                let text = tokitai_compiler::codegen::hip::module_source(&arts.kernels);
                Ok(!text.is_empty() && !arts.bindings.is_empty())
            }
            Err(BuildError::Source { diagnostics, rendered, .. }) => Err(diagnostics.iter().any(|d| d.is_error()) && !rendered.is_empty()),
            // An I/O error compiling from memory is a defect too.
            Err(_) => Err(false),
        })));
        match r {
            Ok(Ok(printed)) => f.compiled[i] = printed,
            Ok(Err(true)) => f.outcome = f.outcome.max(Outcome::Diagnosed),
            Ok(Err(false)) => {
                f.outcome = f.outcome.max(Outcome::Silent);
                f.defect.get_or_insert(format!("{}: failed without an error diagnostic", t));
            }
            Err(m) => {
                f.outcome = Outcome::Panicked;
                f.defect = Some(format!("{}: {}", t, m));
            }
        }
    }
    f
}

/// Verify `text` for sm_90 with the solver timeout: the verdict, a
/// defect's description (a panic), and the `unknown` diagnostics (W0901)
/// where the solver gave up.
pub fn verify(text: &str, timeout_ms: u32) -> (Verdict, Option<String>, Vec<String>) {
    // Proofs are computed, never read from a cache of earlier runs.
    tokitai_compiler::cache::configure(tokitai_compiler::cache::Location::Off);
    let file = SourceFile::new("fuzz.tk", text.to_string());
    let opts = Options { verify: true, timeout_ms, ..Options::new(Target::default_cuda()) };
    match panicked(catch_unwind(AssertUnwindSafe(|| compile_with(file, &opts)))) {
        Ok(Ok(arts)) => {
            let unknown: Vec<String> = arts.warnings.iter().filter(|d| d.code == "W0901").map(|d| d.message.clone()).collect();
            (if unknown.is_empty() { Verdict::Proved } else { Verdict::Unknown }, None, unknown)
        }
        Ok(Err(BuildError::Source { diagnostics, .. })) => {
            let unknown: Vec<String> = diagnostics.iter().filter(|d| d.code == "W0901").map(|d| d.message.clone()).collect();
            let errors = diagnostics.iter().any(|d| d.is_error());
            (if errors || unknown.is_empty() { Verdict::Refuted } else { Verdict::Unknown }, None, unknown)
        }
        Ok(Err(_)) => (Verdict::Refuted, None, Vec::new()),
        Err(m) => (Verdict::Panicked, Some(format!("verify: {}", m)), Vec::new()),
    }
}

/// The kernels of `examples/ops`, each with its file's helpers: the
/// mutator's seeds, named `file#n`.
pub fn examples() -> Vec<(String, String)> {
    example_files().into_iter().flat_map(|(name, text)| mutate::kernels_of(&text).into_iter().enumerate().map(move |(i, k)| (format!("{}#{}", name, i), k)).collect::<Vec<_>>()).collect()
}

/// The `.tk` files of `examples/ops`.
pub fn example_files() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), std::fs::read_to_string(&p).ok()?))).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Write input `id` to `out/<what>-<id>.tk` (when there is an `out`): the
/// file's path.
fn keep_input(out: Option<&std::path::Path>, what: &str, id: u64, text: &str) -> Option<String> {
    let d = out?;
    let _ = std::fs::create_dir_all(d);
    let p = d.join(format!("{}-{}.tk", what, id));
    let _ = std::fs::write(&p, text);
    Some(p.display().to_string())
}

/// Per worker, the input it runs, since when, and in which stage.
type Running = BTreeMap<usize, (u64, Instant, &'static str)>;

/// Run the campaign on rayon's threads (named `fuzz-N`).
pub fn run(cfg: &Config) -> Report {
    quiet_panics();
    tokitai_compiler::cache::configure(tokitai_compiler::cache::Location::Off);
    let examples = examples();
    let files = example_files();
    let targets = targets();
    let started = Instant::now();
    let report = Mutex::new(Report { seed: cfg.seed, inputs: cfg.inputs, ..Report::default() });
    // What each worker runs now, for the watchdog: (input, since, stage).
    let running: Arc<Mutex<Running>> = Arc::new(Mutex::new(BTreeMap::new()));
    let done = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU64::new(0));
    let watchdog = {
        let (running, done, finished) = (running.clone(), done.clone(), finished.clone());
        let (hang_after, out, every, total, seed, max_rss) = (cfg.hang_after, cfg.out.clone(), cfg.progress_every, cfg.inputs, cfg.seed, cfg.max_rss_mib);
        let ex = examples.clone();
        let fx = files.clone();
        std::thread::spawn(move || {
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if every.is_some_and(|e| last.elapsed() >= e) {
                    last = Instant::now();
                    eprintln!("fuzz: {} of {} inputs", finished.load(Ordering::Relaxed), total);
                }
                let keep = |id: u64, what: &str| {
                    let (text, _) = input(seed, id, &ex, &fx);
                    let file = keep_input(out.as_deref(), what, id, &text);
                    (text, file)
                };
                let stuck: Option<(u64, &'static str)> = running.lock().ok().and_then(|r| r.values().find(|(_, since, _)| since.elapsed() > hang_after).map(|(id, _, stage)| (*id, *stage)));
                if let Some((id, stage)) = stuck {
                    // A thread cannot be stopped: keep the input, say so, exit.
                    let (text, file) = keep(id, "hang");
                    eprintln!("fuzz: input {} has run its {} stage for more than {:?}: a hang{}\n{}", id, stage, hang_after, file.map(|f| format!(" (kept in {})", f)).unwrap_or_default(), text);
                    std::process::exit(3);
                }
                let rss = rss_mib();
                if max_rss > 0 && rss > max_rss {
                    // Memory past the limit: one of the inputs running now
                    // is a runaway (each is kept; rerun them one by one).
                    let now: Vec<(u64, &'static str)> = running.lock().map(|r| r.values().map(|(id, _, stage)| (*id, *stage)).collect()).unwrap_or_default();
                    eprintln!("fuzz: resident memory {} MiB is past the limit of {} MiB while these inputs ran:", rss, max_rss);
                    for (id, stage) in now {
                        let (_, file) = keep(id, "memory");
                        eprintln!("  input {} in its {} stage{}", id, stage, file.map(|f| format!(" (kept in {})", f)).unwrap_or_default());
                    }
                    std::process::exit(4);
                }
            }
        })
    };
    let pool = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("fuzz-{}", i)).stack_size(8 << 20).build().expect("a thread pool");
    pool.install(|| {
        use rayon::prelude::*;
        (0..cfg.inputs).into_par_iter().for_each(|id| {
            let worker = rayon::current_thread_index().unwrap_or(0);
            let (text, origin) = input(cfg.seed, id, &examples, &files);
            let origin_name = match &origin {
                Origin::Generated => "generated".to_string(),
                Origin::Mutated(f) => format!("mutated {}", f),
            };
            let mark = |stage: &'static str| {
                if let Ok(mut r) = running.lock() {
                    r.insert(worker, (id, Instant::now(), stage));
                }
            };
            mark("front");
            let t0 = Instant::now();
            let f = front(&text, &targets);
            let front_s = t0.elapsed().as_secs_f64();
            let all = f.compiled.iter().all(|c| *c);
            let mut verdict = None;
            if all && cfg.verify_every > 0 && (id / 2) % cfg.verify_every == 0 {
                mark("verify");
                let t1 = Instant::now();
                let (v, defect, _) = verify(&text, cfg.verify_timeout_ms);
                verdict = Some((v, t1.elapsed().as_secs_f64(), defect));
            }
            if let Ok(mut r) = running.lock() {
                r.remove(&worker);
            }
            let keep = |what: &str| keep_input(cfg.out.as_deref(), what, id, &text);
            let mut r = report.lock().expect("the report's lock");
            match origin {
                Origin::Generated => r.generated += 1,
                Origin::Mutated(_) => r.mutated += 1,
            }
            r.parsed += f.parsed as u64;
            r.checked += f.checked as u64;
            r.scheduled_all_targets += all as u64;
            for (t, c) in targets.iter().zip(&f.compiled) {
                *r.printed.entry(t.to_string()).or_default() += *c as u64;
            }
            *r.exit_codes.entry(f.outcome.exit_code()).or_default() += 1;
            if front_s > r.slowest_front_s {
                r.slowest_front_s = front_s;
                r.slowest_front_id = id;
            }
            if let Some(what) = f.defect {
                let file = keep("defect");
                r.defects.push(Defect { id, what, origin: origin_name.clone(), file });
            }
            if let Some((v, secs, defect)) = verdict {
                r.verified += 1;
                *r.verdicts.entry(format!("{:?}", v)).or_default() += 1;
                if secs > r.slowest_verify_s {
                    r.slowest_verify_s = secs;
                    r.slowest_verify_id = id;
                }
                if let Some(what) = defect {
                    let file = keep("defect");
                    r.defects.push(Defect { id, what, origin: origin_name, file });
                }
            }
            drop(r);
            finished.fetch_add(1, Ordering::Relaxed);
        });
    });
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    let mut r = report.into_inner().expect("the report's lock");
    r.defects.sort_by_key(|d| d.id);
    r.seconds = started.elapsed().as_secs_f64();
    r
}
