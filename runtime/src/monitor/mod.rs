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
use crate::call::{Arg, Bound};
use crate::abi::tk_info::KernelInfo;
use crate::{Error, KernelDef, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

mod compose;
mod host;
mod judge;
mod known;
mod probe;
mod readback;
pub use compose::{check_edges, Edge};
pub(crate) use host::HostFacts;
pub(crate) use judge::Judge;
pub use judge::{judge, Verdict};
pub use known::MemSpan;
pub use probe::{join_probes, probe_launches, replay, settle, settle_reading, settle_seconds, take_captured, ProbePlan};

/// Something is about to write `span` (a copy, an upload, a clear, a new
/// allocation): what was known about it is gone, and probes that may still
/// read it finish first.
pub fn forget(span: Option<MemSpan>) {
    probe::join_before_write(span);
    known::forget(span);
}

/// `t` (on a device) was just filled by the host's own hand with values
/// in `[lo, hi]`: zeros, or an upload whose range the host scanned. The
/// monitor knows that range until the bytes are written (see
/// `known::filled`): the packed gradient's padding, zeroed once, and a
/// step's learning rate and bias corrections need no probe.
pub(crate) fn filled(t: &crate::Tensor, lo: f64, hi: f64) {
    if probed_dtype(t) {
        known::filled(t.device_span(), t.dtype().name(), lo, hi);
    }
}

/// Is `t` of a dtype the probes measure (so a fact about it saves one)?
fn probed_dtype(t: &crate::Tensor) -> bool {
    matches!(t.dtype(), crate::DType::F16 | crate::DType::Bf16 | crate::DType::F32)
}

/// As [`filled`], each element with its own value (`values`, in order):
/// views of single elements are judged by their own values.
pub(crate) fn filled_each(t: &crate::Tensor, values: &[f64]) {
    let (Some(span), size) = (t.device_span(), t.dtype().size_bytes()) else { return };
    if !probed_dtype(t) || values.len() * size != span.bytes {
        return;
    }
    for (i, &v) in values.iter().enumerate() {
        known::filled(Some(MemSpan { start: span.start + (i * size) as u64, bytes: size, ..span }), t.dtype().name(), v, v);
    }
}

/// Measure `t` now, ahead of the launches that read it or views inside it
/// before anything writes it: one probe instead of one per view (the
/// trainer measures its packed parameters and the optimizer's moments at
/// the start of a step, beside the forward pass). A host tensor, or one
/// the monitor cannot measure here, is left to the launches.
pub fn measure(dev: &crate::Device, t: &crate::Tensor) -> Result<()> {
    if mode() == Mode::Off {
        return Ok(());
    }
    probe::measure(dev, t)
}

/// The range the monitor knows `t` to hold from the observation of the
/// kernel that wrote it, read back with its step (after a settle, e.g.
/// `Device::synchronize`); `None` where it knows none (not written by an
/// observing kernel since, not read back yet, or a non-finite value seen).
/// For checks that observations agree with the data (gpucheck).
pub fn seen_range(t: &crate::Tensor) -> Option<(f64, f64)> {
    let span = t.device_span()?;
    match known::lookup(span, t.dtype().name(), t.dtype().size_bytes())? {
        known::Known::Seen { lo, hi } => Some((lo, hi)),
        _ => None,
    }
}

/// Does the monitor know that `t * t <= factor * s` holds on every element
/// of `t` and `s`, from the check of the kernel that wrote both, read back
/// (after a settle) and neither written since? For checks that the
/// kernels' relation checks agree with the data (gpucheck).
pub fn relation_held(t: &crate::Tensor, s: &crate::Tensor, factor: f64) -> bool {
    let (Some(ts), Some(ss)) = (t.device_span(), s.device_span()) else { return false };
    known::relation((ts, t.dtype().name()), (ss, s.dtype().name()), factor) == Some(known::RelationKnown::Held)
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
/// buffers are scanned on the CPU kernels' executor, in the chunks a
/// kernel of that length takes (rayon's threads, asleep between the
/// scans, took longer to wake than 16 threads took to scan nano's
/// activations: the monitor tripled a nano b4096 step on 16 cores).
///
/// The scan compares bit patterns, not values: a float's bits, with the
/// sign bit set on positives and every bit flipped on negatives, order as
/// the values do (infinities at the ends, -0 just below +0), so the scan is
/// integer min/max that the compiler vectorises, and only the two extremes
/// are converted. The CPU monitor reads every input of every launch: at
/// nano on 2 cores, converting each f16 to f64 cost 10-30% of the step.
pub fn range_of(b: &Buf) -> Option<(f64, f64)> {
    match b {
        Buf::F16(v) => Some(bits_range(v)),
        Buf::Bf16(v) => Some(bits_range(v)),
        Buf::F32(v) => Some(bits_range(v)),
        Buf::F64(v) => Some(bits_range(v)),
        _ => None,
    }
}

/// A float element type the host scans by its bits.
trait HostFloat: Copy + Send + Sync {
    type Bits: FloatBits;
    /// The bits of an infinity: a magnitude above them is a NaN.
    const INF: Self::Bits;
    fn bits(self) -> Self::Bits;
    /// The value of bits, in f64 (exact).
    fn value(bits: Self::Bits) -> f64;
}

macro_rules! host_float {
    ($t:ty, $bits:ty, $inf:expr, |$k:ident| $value:expr) => {
        impl HostFloat for $t {
            type Bits = $bits;
            const INF: $bits = $inf;
            fn bits(self) -> $bits {
                self.to_bits()
            }
            fn value($k: $bits) -> f64 {
                $value
            }
        }
    };
}
host_float!(half::f16, u16, 0x7c00, |k| half::f16::from_bits(k).to_f64());
host_float!(half::bf16, u16, 0x7f80, |k| half::bf16::from_bits(k).to_f64());
host_float!(f32, u32, 0x7f80_0000, |k| f32::from_bits(k) as f64);
host_float!(f64, u64, 0x7ff0_0000_0000_0000, |k| f64::from_bits(k));

/// An unsigned integer holding a float's bits (see [`range_of`]).
trait FloatBits: Copy + Ord + Send + Sync {
    const ZERO: Self;
    const MAX: Self;
    /// The ordered key of these bits, without a branch (so that the scan
    /// vectorises): the sign spread over every bit, or'ed with the sign
    /// bit, flips negatives whole and sets the sign bit of positives.
    fn key(self) -> Self;
    /// The bits of a key.
    fn unkey(self) -> Self;
    /// The bits without the sign: above an infinity's, a NaN.
    fn magnitude(self) -> Self;
}

macro_rules! float_bits {
    ($u:ty, $i:ty) => {
        impl FloatBits for $u {
            const ZERO: $u = 0;
            const MAX: $u = <$u>::MAX;
            fn key(self) -> $u {
                const SHIFT: u32 = <$u>::BITS - 1;
                self ^ ((((self as $i) >> SHIFT) as $u) | (1 << SHIFT))
            }
            fn unkey(self) -> $u {
                const SHIFT: u32 = <$u>::BITS - 1;
                // A key's sign bit is set for positives.
                self ^ (((!self as $i >> SHIFT) as $u) | (1 << SHIFT))
            }
            fn magnitude(self) -> $u {
                self & (<$u>::MAX >> 1)
            }
        }
    };
}
float_bits!(u16, i16);
float_bits!(u32, i32);
float_bits!(u64, i64);

/// `scan` over the chunks of `0..n` a kernel of `n` elements takes
/// (`tk_rt::par_ranges`), on the CPU kernels' pool, results in order.
fn par_scan<R: Send>(n: usize, scan: impl Fn(usize, usize) -> R + Sync) -> Vec<R> {
    crate::backend::cpu_pool::install();
    crate::abi::tk_rt::par_ranges(n as i64, n as i64, |lo, hi| scan(lo as usize, hi as usize))
}

/// (smallest key, largest key, largest magnitude) of a fold.
type Keys<B> = (B, B, B);

/// Nothing folded.
fn no_keys<B: FloatBits>() -> Keys<B> {
    (B::MAX, B::ZERO, B::ZERO)
}

/// The keys of the floats `c`: integer min and max only.
fn fold_keys<T: HostFloat>(c: &[T]) -> Keys<T::Bits> {
    c.iter().fold(no_keys(), |(lo, hi, mag), &x| {
        let b = x.bits();
        let k = b.key();
        (lo.min(k), hi.max(k), mag.max(b.magnitude()))
    })
}

fn join_keys<B: FloatBits>(a: Keys<B>, b: Keys<B>) -> Keys<B> {
    (a.0.min(b.0), a.1.max(b.1), a.2.max(b.2))
}

/// The range of folded keys of `T` (a magnitude above an infinity's is a
/// NaN; nothing folded: the empty range).
fn keys_range<T: HostFloat>((lo, hi, mag): Keys<T::Bits>) -> (f64, f64) {
    if mag > T::INF {
        (f64::NAN, f64::NAN)
    } else if lo > hi {
        (f64::INFINITY, f64::NEG_INFINITY)
    } else {
        (T::value(lo.unkey()), T::value(hi.unkey()))
    }
}

/// The range of the floats `v`, scanned on the executor.
fn bits_range<T: HostFloat>(v: &[T]) -> (f64, f64) {
    keys_range::<T>(par_scan(v.len(), |lo, hi| fold_keys(&v[lo..hi])).into_iter().fold(no_keys(), join_keys))
}

/// Copy `len` elements of `src` from `from` into `dst` at `at`, and the
/// range of what was copied (`range_of`'s), each piece scanned as soon as
/// it is copied, while it is in L1: the trainer copies each layer's
/// weights out of the packed parameters every CPU step, and a scan at the
/// next launch read them all again (at tiny, 5 ms a step). `None` where
/// the copy does not fit (nothing copied); `Some(None)` for integer data.
pub(crate) fn copy_with_range(dst: &mut Buf, at: usize, src: &Buf, from: usize, len: usize) -> Option<Option<(f64, f64)>> {
    /// `len` elements of each from `at` and `from` (if both hold them)
    /// copied, and their range.
    fn put<T: HostFloat>(d: &mut [T], at: usize, s: &[T], from: usize, len: usize) -> Option<(f64, f64)> {
        use rayon::prelude::*;
        /// Elements a task copies (128 KiB of halves), and a piece scanned
        /// after its copy (in L1).
        const TASK: usize = 1 << 16;
        const PIECE: usize = 4096;
        let (d, s) = (d.get_mut(at..at.checked_add(len)?)?, s.get(from..from.checked_add(len)?)?);
        let copy = |(d, s): (&mut [T], &[T])| {
            d.chunks_mut(PIECE).zip(s.chunks(PIECE)).fold(no_keys(), |acc, (d, s)| {
                d.copy_from_slice(s);
                join_keys(acc, fold_keys(d))
            })
        };
        let keys = if len >= 4 * TASK { d.par_chunks_mut(TASK).zip(s.par_chunks(TASK)).map(copy).reduce(no_keys, join_keys) } else { copy((d, s)) };
        Some(keys_range::<T>(keys))
    }
    match (dst, src) {
        (Buf::F16(d), Buf::F16(s)) => put(d, at, s, from, len).map(Some),
        (Buf::Bf16(d), Buf::Bf16(s)) => put(d, at, s, from, len).map(Some),
        (Buf::F32(d), Buf::F32(s)) => put(d, at, s, from, len).map(Some),
        (Buf::F64(d), Buf::F64(s)) => put(d, at, s, from, len).map(Some),
        (d, s) => crate::backend::bytes::copy_into(d, at, s, from, len).then_some(None),
    }
}

pub use crate::abi::tk_info::eval_poly;

/// The first domain relation (`m * m <= 64.0 * v`) the launch's inputs
/// break, in words naming the element; `None` when all hold. `hosts[i]`
/// is the i-th tensor parameter's host buffer (`None` where it is not on
/// the host, which the caller counts as unmeasured); `ranges[i]`, where
/// given, its range, known already; `known(r)`: relation `r` is known to
/// hold on these buffers (their writer checked it). What is known is not
/// scanned again.
pub fn relation_violation(info: &KernelInfo, hosts: &[Option<&Buf>], ranges: &[Option<(f64, f64)>], known: &dyn Fn(usize) -> bool) -> Option<String> {
    for (r, (t, s, factor, text)) in info.relations.iter().enumerate() {
        let position = |name: &str| info.tensors.iter().position(|p| p.name == name);
        let buf = |name: &str| position(name).and_then(|i| hosts.get(i).copied().flatten());
        let (Some(tb), Some(sb)) = (buf(t), buf(s)) else { continue };
        let t_range = position(t).and_then(|i| ranges.get(i).copied().flatten());
        if known(r) || all_hold(tb, sb, *factor, t_range) {
            continue;
        }
        if let Some((i, tv, sv)) = tokitai_contracts::relation::first_violation(tb.len(), sb.len(), *factor, |i| tb.get_f64(i), |i| sb.get_f64(i)) {
            return Some(format!("the domain relation `{}` fails at element {}: {} = {}, {} = {}", text, i, t, tv, s, sv));
        }
    }
    None
}

/// Does every element of `t` satisfy `t * t <= factor * s`? A quick
/// answer for the layouts the kernels use, exact as the element-wise
/// check is (squares of f16 and f32 values are exact in f64, and monotone
/// in |t|): against one `s`, the largest |t| decides; f32 against f32, a
/// scan without an early exit, which vectorises. `false` also means
/// "not known": the caller's element-wise scan then finds the element.
fn all_hold(t: &Buf, s: &Buf, factor: f64, t_range: Option<(f64, f64)>) -> bool {
    match (t, s) {
        (_, s) if s.len() == 1 => {
            // `t`'s range known (AdamW's gradient, scanned by the norm's
            // launch before): at tiny, scanning it again cost 5 ms a step.
            let Some((lo, hi)) = t_range.or_else(|| range_of(t)) else { return false };
            let largest = lo.abs().max(hi.abs());
            t.is_empty() || tokitai_contracts::relation::holds(largest, s.get_f64(0), factor)
        }
        (Buf::F32(t), Buf::F32(s)) if t.len() == s.len() => {
            // On the executor's threads, as `range_of`: AdamW's moments
            // at tiny are 85M elements each, and one thread scanning them
            // while fifteen waited was most of the CPU monitor's cost there.
            let holds = |(t, s): (&[f32], &[f32])| t.iter().zip(s).fold(true, |ok, (&t, &s)| ok & tokitai_contracts::relation::holds(t as f64, s as f64, factor));
            par_scan(t.len(), |lo, hi| holds((&t[lo..hi], &s[lo..hi]))).into_iter().all(|ok| ok)
        }
        _ => false,
    }
}

/// What the monitor hands a launch: where its kernel observes its
/// outputs, and what its outputs may be known by afterwards.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    standing: Standing,
    /// The launch's observation words (see `probe::Observe`), if any.
    observe: Option<probe::Observe>,
}

impl Ticket {
    fn of(standing: Standing) -> Ticket {
        Ticket { standing, observe: None }
    }
    /// What the launch runs observing its outputs, and the words it
    /// merges into (`None`: the backend chooses, with no words).
    pub(crate) fn observed(&self) -> Option<crate::call::Observed> {
        self.observe.map(|o| crate::call::Observed { chosen: o.chosen, words: o.address })
    }
}

/// What a launch's outputs may be known by (see `known`): the launch's
/// own standing when its outputs' `ensures` are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
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
        return Ok(Ticket::of(Standing::Nothing));
    }
    let info = k.info;
    let judge = judge::Judge::of(info);
    let needed = judge.needed();
    let tensors: Vec<&crate::Tensor> = args.iter().filter_map(|a| a.tensor()).collect();
    let on_host = tensors.iter().zip(needed).all(|(t, n)| t.host_buf().is_some() || !n);
    if on_host {
        // Each tensor's range known, or scanned once between writes
        // (`host_range`).
        let ranges: Vec<Option<(f64, f64)>> = tensors.iter().zip(needed).map(|(t, n)| if *n { t.host_range() } else { None }).collect();
        let relations = if info.relations.is_empty() {
            None
        } else {
            let hosts: Vec<Option<&Buf>> = tensors.iter().map(|t| t.host_buf()).collect();
            let known = |r: usize| match judge.relation(r).map(|(t, s, factor)| (tensors.get(t), tensors.get(s), factor)) {
                Some((Some(t), Some(s), factor)) => t.facts().holds_against(s.facts().version(), factor),
                _ => false,
            };
            relation_violation(info, &hosts, &ranges, &known)
        };
        let verdict = judge.verdict(bound, &ranges, relations.as_deref());
        let covered = verdict.outside.is_none();
        count(k, Some(verdict))?;
        return Ok(Ticket::of(if covered { Standing::Covered } else { Standing::Nothing }));
    }
    let queued = probe::queue(dev, k, bound, args, needed)?;
    // The launch may write what a probe still reads (an inout measured for
    // it, an input of an earlier launch): the step waits for them first.
    probe::join_before_write(written(k, args).filter_map(|(_, t)| t.device_span()));
    match queued {
        probe::Queued::At { index, observe } => Ok(Ticket { standing: Standing::Pending(index), observe }),
        // Not measurable here (a device without views, a dtype no probe
        // reads, no room while capturing): unmeasured, never covered.
        probe::Queued::Unmeasured(why) => {
            if let Ok(mut cov) = COVERAGE.lock() {
                cov.entry(k.info.name).or_default().why_unmeasured.get_or_insert(why);
            }
            count(k, None)?;
            Ok(Ticket::of(Standing::Nothing))
        }
    }
}

/// The monitor's step after a launch: what was known of its outputs'
/// memory is gone; an output with a proved `ensures` is known to lie in
/// its range (if the launch is covered), and an output the kernel
/// observed is known by its observation (whatever the launch's verdict:
/// it is a measurement).
pub(crate) fn after_launch(k: &KernelDef, args: &[Arg], ticket: Ticket) {
    let tensors = args.iter().filter_map(|a| a.tensor());
    for (position, (param, a)) in k.info.tensors.iter().zip(tensors).enumerate().filter(|(_, (p, _))| p.role != "input") {
        let Some(span) = a.device_span() else { continue };
        known::forget(Some(span));
        let producer = match ticket.standing {
            Standing::Nothing => None,
            Standing::Covered => Some(None),
            Standing::Pending(i) => Some(Some(i)),
        };
        let ensures = k.info.ensures.iter().find(|e| e.0 == param.name);
        let observed = ticket.observe.and_then(|o| o.slots_of(position));
        // An observation first: measured, it is tighter than the proved
        // range and holds whatever the launch's verdict.
        match (observed, producer, ensures) {
            (Some(at), _, _) => known::remember(span, a.dtype().name(), known::Known::Observed(at)),
            (None, Some(producer), Some((_, lo, hi))) => known::remember(span, a.dtype().name(), known::Known::Proved { lo: *lo, hi: *hi, producer, kernel: k.info.name }),
            _ => {}
        }
    }
    // The domain relations the kernel checked on what it stored into two
    // of its outputs: known by that check until either is written.
    let Some(observe) = ticket.observe.filter(|o| !o.chosen.relates.is_empty()) else { return };
    let judge = judge::Judge::of(k.info);
    let tensors: Vec<&crate::Tensor> = args.iter().filter_map(|a| a.tensor()).collect();
    for &r in observe.chosen.relates {
        let (Some(at), Some((t, s, factor))) = (observe.relation_slots(r), judge.relation(r)) else { continue };
        let (Some(t), Some(s)) = (tensors.get(t), tensors.get(s)) else { continue };
        if let (Some(ts), Some(ss)) = (t.device_span(), s.device_span()) {
            known::remember_relation(known::RelationFact { square: (ts, t.dtype().name()), bound: (ss, s.dtype().name()), factor, known: known::RelationKnown::Observed(at) });
        }
    }
}

/// Count one launch's verdict (`None`: its inputs were not measured); in
/// strict mode a launch outside its bounds is an error.
pub(crate) fn count(k: &KernelDef, verdict: Option<Verdict>) -> Result<()> {
    count_all([(k, verdict)])
}

/// Count launches' verdicts in order, under one lock (a step's launches
/// judged when it is read back); in strict mode the first launch outside
/// its bounds is the error, after every launch is counted.
pub(crate) fn count_all<'a>(verdicts: impl IntoIterator<Item = (&'a KernelDef, Option<Verdict>)>) -> Result<()> {
    let m = mode();
    let mut first_err = None;
    let mut newly_named = Vec::new();
    {
        let mut cov = COVERAGE.lock().ok();
        for (k, verdict) in verdicts {
            let name = k.info.name;
            if let Some(cov) = cov.as_mut() {
                let c = cov.entry(name).or_default();
                c.launches += 1;
                match &verdict {
                    None => c.unmeasured += 1,
                    Some(Verdict { outside: None, .. }) => c.covered += 1,
                    Some(Verdict { outside: Some(why), .. }) => {
                        if c.first_outside.is_none() {
                            c.first_outside = Some(why.clone());
                            newly_named.push((name, why.clone()));
                        }
                    }
                }
            }
            if let (Some(Verdict { outside: Some(why), .. }), Mode::Strict) = (&verdict, m) {
                first_err.get_or_insert(Error::Contract { kernel: name.into(), message: why.clone() });
            }
        }
    }
    if m == Mode::Warn {
        for (name, why) in newly_named {
            eprintln!("warning: kernel `{}` launched outside its proved bound ({}); later launches are counted, not named", name, why);
        }
    }
    first_err.map_or(Ok(()), Err)
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

    #[test]
    fn the_quick_relation_check_answers_as_the_element_wise_one() {
        use half::f16;
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut draw = |scale: f64| ((rng.next_u32() % 2001) as f64 / 1000.0 - 1.0) * scale;
        for trial in 0..300 {
            let n = 1 + trial % 9;
            let factor = [1.0, 64.0, 0.5][trial % 3];
            let t: Vec<f64> = (0..n).map(|_| draw(2.0)).collect();
            let s_each: Vec<f32> = (0..n).map(|_| draw(4.0).abs() as f32).collect();
            let s_one = draw(4.0).abs() as f32;
            let t16 = Buf::F16(t.iter().map(|&x| f16::from_f64(x)).collect());
            let t32: Vec<f32> = t.iter().map(|&x| x as f32).collect();
            let cases = [(t16, Buf::F32(vec![s_one])), (Buf::F32(t32.clone()), Buf::F32(vec![s_one])), (Buf::F32(t32), Buf::F32(s_each))];
            for (tb, sb) in cases {
                let violation = tokitai_contracts::relation::first_violation(tb.len(), sb.len(), factor, |i| tb.get_f64(i), |i| sb.get_f64(i));
                assert_eq!(all_hold(&tb, &sb, factor, None), violation.is_none(), "{:?} {:?} factor {}", tb, sb, factor);
            }
        }
        assert!(!all_hold(&Buf::F32(vec![0.0, f32::NAN]), &Buf::F32(vec![1.0]), 1.0, None), "a NaN breaks it");
        assert!(!all_hold(&Buf::F32(vec![0.0]), &Buf::F32(vec![f32::NAN]), 1.0, None), "against a NaN bound too");
        let range = range_of(&Buf::F32(vec![0.5, -3.0]));
        assert!(!all_hold(&Buf::F32(vec![0.5, -3.0]), &Buf::F32(vec![8.0]), 1.0, range), "a known range is judged as the scanned one: 9 > 8");
        assert!(all_hold(&Buf::F32(vec![0.5, -3.0]), &Buf::F32(vec![9.0]), 1.0, range));
    }

    #[test]
    fn the_bit_pattern_scan_finds_the_values_a_float_scan_does() {
        use half::{bf16, f16};
        // Signs, zeros of both signs, subnormals, the largest finite
        // values and infinities, in every order of the extremes.
        let specials = [0.0f64, -0.0, 1.0, -1.0, 5.96e-8, -5.96e-8, 1e-40, -1e-40, 65504.0, -65504.0, 3.4e38, -3.4e38, 1e300, -1e300, f64::INFINITY, f64::NEG_INFINITY, 0.1, -2.5, 7.0];
        let float_scan = |xs: &[f64]| xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for trial in 0..400 {
            let n = 1 + (rng.next_u64() % 12) as usize;
            let xs: Vec<f64> = (0..n).map(|_| if rng.next_u64() % 3 == 0 { specials[(rng.next_u64() % specials.len() as u64) as usize] } else { (rng.next_u64() as i64 as f64) / 2f64.powi(50 + (trial % 20)) }).collect();
            let as16: Vec<f16> = xs.iter().map(|&x| f16::from_f64(x)).collect();
            let asb16: Vec<bf16> = xs.iter().map(|&x| bf16::from_f64(x)).collect();
            let as32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
            let cases = [
                (range_of(&Buf::F16(as16.clone())), float_scan(&as16.iter().map(|x| x.to_f64()).collect::<Vec<_>>())),
                (range_of(&Buf::Bf16(asb16.clone())), float_scan(&asb16.iter().map(|x| x.to_f64()).collect::<Vec<_>>())),
                (range_of(&Buf::F32(as32.clone())), float_scan(&as32.iter().map(|&x| x as f64).collect::<Vec<_>>())),
                (range_of(&Buf::F64(xs.clone())), float_scan(&xs)),
            ];
            for (got, want) in cases {
                assert_eq!(got, Some(want), "{:?}", xs);
            }
        }
        for nan in [Buf::F16(vec![f16::ONE, f16::NAN]), Buf::Bf16(vec![bf16::NAN]), Buf::F32(vec![-f32::NAN, 2.0]), Buf::F64(vec![f64::NAN])] {
            assert!(range_of(&nan).is_some_and(|(lo, hi)| lo.is_nan() && hi.is_nan()), "{:?}", nan);
        }
    }
}
