//! The contract monitor (issue 18): is each launch covered by a proved
//! error bound?
//!
//! A kernel's tolerance is proved over its `domain`. A numeric domain
//! (`x in [-1.0, 1.0]`) covers a launch whose inputs lie in it; a domain in
//! a magnitude (`x in [-X, X]`) covers every launch, with the bound a
//! formula evaluated at the launch's magnitudes, as long as the launch
//! meets the conditions the bound needs (nothing overflows). Before each
//! launch the monitor measures the inputs' ranges, decides coverage and
//! evaluates the launch's bound; it counts covered launches per kernel.
//!
//! Modes: `off` (nothing measured), `warn` (the default: count, and name
//! the first uncovered launch of each kernel on stderr), `strict` (refuse
//! an uncovered launch with [`Error::Contract`] naming the kernel, the
//! input, the domain and the observed range). Set by [`set_mode`] or the
//! environment variable `TOKITAI_CONTRACTS`.
//!
//! Inputs are measured where they live: host tensors directly, before the
//! launch; tensors on a GPU by our own probe kernels queued before the
//! launch on the device, judged when the step is read back (see `probe`).
//! A launch whose inputs cannot be measured counts as unmeasured, never as
//! covered.

use crate::abi::tk_rt::Buf;
use crate::launch::{Arg, Bound};
use crate::abi::tk_info::KernelInfo;
use crate::{Error, KernelDef, Result};
use std::collections::BTreeMap;
use tokitai_contracts::fp::Format;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

mod compose;
mod known;
mod probe;
pub use compose::{check_edges, Edge};
pub use known::MemSpan;
pub use probe::{join_probes, replay, settle, settle_reading, take_captured, ProbePlan};

/// Something is about to write `span` (a copy, an upload, a clear, a new
/// allocation): what was known about it is gone, and probes that may still
/// read it finish first.
pub fn forget(span: Option<MemSpan>) {
    probe::join_before_write(span);
    known::forget(span);
}

/// Forget everything (a capture begins or ends, a graph is replayed, the
/// mode changes); the step waits for every probe first.
pub fn forget_all() {
    probe::join_probes_or_defer();
    known::forget_all();
}

/// The tensors a launch writes (outputs and inouts), with their parameters.
fn written<'a>(k: &KernelDef, args: &'a [Arg<'a>]) -> impl Iterator<Item = (&'static crate::abi::tk_info::TensorParam, &'a crate::Tensor)> {
    k.info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())).filter(|(p, _)| p.role != "input")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Off,
    Warn,
    Strict,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "off" => Some(Mode::Off),
            "warn" => Some(Mode::Warn),
            "strict" => Some(Mode::Strict),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Warn => "warn",
            Mode::Strict => "strict",
        }
    }
}

/// 0: not yet read from the environment; else `Mode as u8 + 1`.
static MODE: AtomicU8 = AtomicU8::new(0);

/// The monitor's mode: set by [`set_mode`], else `TOKITAI_CONTRACTS`, else
/// `warn`. An unknown value in the environment is reported once and read
/// as `warn`.
pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Off,
        2 => Mode::Warn,
        3 => Mode::Strict,
        _ => {
            let m = match std::env::var("TOKITAI_CONTRACTS") {
                Ok(v) => Mode::parse(&v).unwrap_or_else(|| {
                    eprintln!("warning: TOKITAI_CONTRACTS={:?} is not off, warn or strict; using warn", v);
                    Mode::Warn
                }),
                Err(_) => Mode::Warn,
            };
            set_mode(m);
            m
        }
    }
}

pub fn set_mode(m: Mode) {
    MODE.store(m as u8 + 1, Ordering::Relaxed);
    forget_all();
}

/// Counts of one kernel's launches, in the form a run's `contracts.json`
/// keeps them.
pub use tokitai_contracts::report::KernelRunCoverage as KernelCoverage;

static COVERAGE: Mutex<BTreeMap<&'static str, KernelCoverage>> = Mutex::new(BTreeMap::new());

/// Every kernel's counts since the start (or the last [`reset`]).
pub fn coverage() -> BTreeMap<&'static str, KernelCoverage> {
    COVERAGE.lock().map(|c| c.clone()).unwrap_or_default()
}

/// The counts so far in the form a report reads (`contracts.json`).
pub fn run_coverage(device: &str) -> tokitai_contracts::report::RunCoverage {
    use tokitai_contracts::report::RunCoverage;
    let kernels = coverage().into_iter().map(|(name, c)| (name.to_string(), c)).collect();
    RunCoverage { mode: mode().name().to_string(), device: device.to_string(), kernels }
}

pub fn reset() {
    if let Ok(mut c) = COVERAGE.lock() {
        c.clear();
    }
}

/// Launches in all, and covered, over every kernel.
pub fn totals() -> (u64, u64) {
    COVERAGE.lock().map(|c| c.values().fold((0, 0), |(l, c), k| (l + k.launches, c + k.covered))).unwrap_or_default()
}

/// `(min, max)` of a float buffer; `None` for integer data (no domains).
/// A NaN anywhere gives `(NaN, NaN)` (never inside a domain). Large
/// buffers are scanned on rayon's threads (the kernels that read them are).
pub fn range_of(b: &Buf) -> Option<(f64, f64)> {
    use rayon::prelude::*;
    /// `(min, max, saw a NaN)` of a slice.
    fn scan<T: Copy>(v: &[T], f: impl Fn(T) -> f64) -> (f64, f64, bool) {
        v.iter().fold((f64::INFINITY, f64::NEG_INFINITY, false), |(lo, hi, nan), x| {
            let x = f(*x);
            (lo.min(x), hi.max(x), nan || x.is_nan())
        })
    }
    fn fold<T: Copy + Sync>(v: &[T], f: impl Fn(T) -> f64 + Sync) -> (f64, f64) {
        const CHUNK: usize = 1 << 15;
        let (lo, hi, nan) = if v.len() <= CHUNK {
            scan(v, f)
        } else {
            v.par_chunks(CHUNK).map(|c| scan(c, &f)).reduce(|| (f64::INFINITY, f64::NEG_INFINITY, false), |a, b| (a.0.min(b.0), a.1.max(b.1), a.2 || b.2))
        };
        if nan {
            (f64::NAN, f64::NAN)
        } else {
            (lo, hi)
        }
    }
    Some(match b {
        Buf::F16(v) => fold(v, |x| x.to_f64()),
        Buf::Bf16(v) => fold(v, |x| x.to_f64()),
        Buf::F32(v) => fold(v, |x| x as f64),
        Buf::F64(v) => fold(v, |x| x),
        _ => return None,
    })
}

pub use crate::abi::tk_info::eval_poly;

/// The first domain relation (`m * m <= 64.0 * v`) the launch's inputs
/// break, in words naming the element; `None` when all hold. `hosts[i]`
/// is the i-th tensor parameter's host buffer (`None` where it is not on
/// the host, which the caller counts as unmeasured).
pub fn relation_violation(info: &KernelInfo, hosts: &[Option<&Buf>]) -> Option<String> {
    for (t, s, factor, text) in info.relations {
        let buf = |name: &str| info.tensors.iter().position(|p| p.name == name).and_then(|i| hosts.get(i).copied().flatten());
        let (Some(tb), Some(sb)) = (buf(t), buf(s)) else { continue };
        if let Some((i, tv, sv)) = tokitai_contracts::relation::first_violation(tb.len(), sb.len(), *factor, |i| tb.get_f64(i), |i| sb.get_f64(i)) {
            return Some(format!("the domain relation `{}` fails at element {}: {} = {}, {} = {}", text, i, t, tv, s, sv));
        }
    }
    None
}

/// What the monitor found for one launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `None`: covered; else why not, in words.
    pub outside: Option<String>,
    /// Each output's bound at this launch `(output, abs, rel)` when covered.
    pub bounds: Vec<(&'static str, f64, f64)>,
}

/// Judge one launch from its inputs' ranges: `ranges[i]` is `(min, max)`
/// of the i-th tensor parameter (`None` for outputs and integer tensors);
/// `relations_outside` says which domain relation the inputs break, if
/// one does ([`relation_violation`]).
pub fn judge(k: &KernelDef, bound: &Bound, ranges: &[Option<(f64, f64)>], relations_outside: Option<&str>) -> Verdict {
    let info = k.info;
    // Each domain input's observed `(min, max)` and dtype.
    let observed = |name: &str| -> (Option<(f64, f64)>, &'static str) {
        match info.tensors.iter().position(|t| t.name == name) {
            Some(i) => (ranges.get(i).copied().flatten(), info.tensors[i].dtype),
            None => match info.scalars.iter().position(|s| s.0 == name) {
                Some(i) => (bound.scalars.get(i).map(|v| (*v, *v)), info.scalars[i].1),
                None => (None, "f64"),
            },
        }
    };
    let at = info.symbol_values(&bound.dims, &|name| observed(name).0.map(|(min, max)| min.abs().max(max.abs())));
    let mut outside = None;
    for (name, lo, hi) in info.domain {
        let (Some((min, max)), dtype) = observed(name) else { continue };
        let magnitude = info.magnitudes.iter().any(|m| m.0 == *name);
        let inside = if magnitude {
            min.is_finite() && max.is_finite() && (*lo < 0.0 || min >= 0.0)
        } else {
            // As the proofs take a numeric domain: widened by one rounding
            // into the input's dtype (a literal `1e-5` stored as an f32 is
            // still inside `[1e-5, 1e-5]`).
            let r = Format::from_name(dtype).unwrap_or(Format::F64).stored_range(*lo, *hi);
            r.lo <= min && max <= r.hi
        };
        if !inside {
            let domain = if magnitude { format!("[{}, X] (finite)", if *lo >= 0.0 { "0" } else { "-X" }) } else { format!("[{}, {}]", lo, hi) };
            outside = Some(format!("input `{}` has values in [{}, {}], outside its domain {}", name, min, max, domain));
            break;
        }
    }
    if outside.is_none() {
        outside = relations_outside.map(str::to_string);
    }
    if outside.is_none() {
        for (poly, limit, what) in info.conditions {
            let v = eval_poly(poly, &at);
            // NaN (an input not measured) is not below the limit either.
            if v.is_nan() || v > *limit {
                outside = Some(format!("the bound needs {} to stay finite: its reach {:e} is above {:e}", what, v, limit));
                break;
            }
        }
    }
    let mut bounds = Vec::new();
    if outside.is_none() {
        for (out, _, _) in info.tolerance {
            if let Some((abs, rel)) = info.tolerance_at(out, &at) {
                bounds.push((*out, abs, rel));
            }
        }
    }
    Verdict { outside, bounds }
}

/// The inputs a kernel's bounds depend on: `needed[i]` for the i-th tensor
/// parameter (an input with a domain).
pub(crate) fn needed(info: &KernelInfo) -> Vec<bool> {
    info.tensors.iter().map(|p| p.role != "output" && info.domain.iter().any(|d| d.0 == p.name)).collect()
}

/// What a launch's outputs may be known by (see `known`): the launch's
/// own standing when its outputs' `ensures` are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ticket {
    /// Not monitored, unmeasured or outside its bounds: nothing follows.
    Nothing,
    /// Judged covered before it ran (its inputs were on the host).
    Covered,
    /// Waiting for its verdict, as the launch at this index.
    Pending(usize),
}

/// The monitor's step before a launch: measure, judge, count; in strict
/// mode an uncovered launch is an error. Host inputs are judged here;
/// inputs on a GPU are measured there by probes queued before the launch
/// and judged when the step is read back ([`settle`]).
pub(crate) fn before_launch(dev: &crate::Device, k: &KernelDef, bound: &Bound, args: &[Arg]) -> Result<Ticket> {
    if mode() == Mode::Off {
        return Ok(Ticket::Nothing);
    }
    let info = k.info;
    let hosts: Vec<Option<&Buf>> = args.iter().filter_map(|a| a.tensor()).map(|t| t.host_buf()).collect();
    let needed = needed(info);
    let on_host = hosts.iter().zip(&needed).all(|(h, n)| h.is_some() || !n);
    if on_host {
        let ranges: Vec<Option<(f64, f64)>> = hosts.iter().zip(&needed).map(|(h, n)| h.filter(|_| *n).and_then(range_of)).collect();
        let verdict = judge(k, bound, &ranges, relation_violation(info, &hosts).as_deref());
        let covered = verdict.outside.is_none();
        count(k, Some(verdict))?;
        return Ok(if covered { Ticket::Covered } else { Ticket::Nothing });
    }
    let queued = probe::queue(dev, k, bound, args, &needed)?;
    // The launch may write what a probe still reads (an inout measured for
    // it, an input of an earlier launch): the step waits for them first.
    probe::join_before_write(written(k, args).filter_map(|(_, t)| t.device_span()));
    match queued {
        probe::Queued::At(i) => Ok(Ticket::Pending(i)),
        // Not measurable here (a device without views, a dtype no probe
        // reads, no room while capturing): unmeasured, never covered.
        probe::Queued::Unmeasured(why) => {
            if let Ok(mut cov) = COVERAGE.lock() {
                cov.entry(k.info.name).or_default().why_unmeasured.get_or_insert(why);
            }
            count(k, None)?;
            Ok(Ticket::Nothing)
        }
    }
}

/// The monitor's step after a launch: what was known of its outputs'
/// memory is gone, and an output with a proved `ensures` is known to lie
/// in its range (if the launch is covered).
pub(crate) fn after_launch(k: &KernelDef, args: &[Arg], ticket: Ticket) {
    for (param, a) in written(k, args) {
        let Some(span) = a.device_span() else { continue };
        known::forget(Some(span));
        let producer = match ticket {
            Ticket::Nothing => continue,
            Ticket::Covered => None,
            Ticket::Pending(i) => Some(i),
        };
        if let Some((_, lo, hi)) = k.info.ensures.iter().find(|e| e.0 == param.name) {
            known::remember(span, a.dtype().name(), known::Known::Proved { lo: *lo, hi: *hi, producer, kernel: k.info.name });
        }
    }
}

/// Count one launch's verdict (`None`: its inputs were not measured); in
/// strict mode a launch outside its bounds is an error.
pub(crate) fn count(k: &KernelDef, verdict: Option<Verdict>) -> Result<()> {
    let m = mode();
    let name = k.info.name;
    let mut first = None;
    if let Ok(mut cov) = COVERAGE.lock() {
        let c = cov.entry(name).or_default();
        c.launches += 1;
        match &verdict {
            None => c.unmeasured += 1,
            Some(Verdict { outside: None, .. }) => c.covered += 1,
            Some(Verdict { outside: Some(why), .. }) => {
                if c.first_outside.is_none() {
                    c.first_outside = Some(why.clone());
                    first = Some(why.clone());
                }
            }
        }
    }
    match (&verdict, m) {
        (Some(Verdict { outside: Some(why), .. }), Mode::Strict) => Err(Error::Contract { kernel: name.into(), message: why.clone() }),
        _ => {
            if let (Some(why), Mode::Warn) = (first, m) {
                eprintln!("warning: kernel `{}` launched outside its proved bound ({}); later launches are counted, not named", name, why);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_anywhere_makes_the_range_nan_in_small_and_parallel_scans() {
        assert!(range_of(&Buf::F32(vec![f32::NAN, 1.0, 2.0])).is_some_and(|(lo, hi)| lo.is_nan() && hi.is_nan()), "a NaN before finite values is kept");
        assert_eq!(range_of(&Buf::F32(vec![3.0, -1.5, 2.0])), Some((-1.5, 3.0)));
        let mut big: Vec<f32> = (0..200_000).map(|i| (i % 1000) as f32 - 500.0).collect();
        assert_eq!(range_of(&Buf::F32(big.clone())), Some((-500.0, 499.0)));
        big[70_000] = f32::NAN;
        assert!(range_of(&Buf::F32(big)).is_some_and(|(lo, _)| lo.is_nan()), "a NaN inside one chunk of a parallel scan is kept");
        assert_eq!(range_of(&Buf::I32(vec![1, 2])), None);
    }
}
