//! The contract monitor on a GPU: before a launch whose inputs live on the
//! device, the monitor queues the probes of `examples/ops/probe.tk` (our
//! own proved kernels) in the same stream, so they read the inputs exactly
//! as the launch will. Each probe writes its rows' minimum, maximum and
//! count of non-finite elements (and, for a domain relation, the count of
//! elements that break it) into slots of two lasting device buffers. The
//! launch is judged when the step is read back ([`settle`]): one copy of
//! the used slots, then the same judgement the host inputs get.
//!
//! Graphs: probes queued while a step is captured become part of the
//! graph, and their launches a [`ProbePlan`] that each replay hands back
//! ([`replay`]), so every replayed launch is judged, with its own values.
//!
//! In a captured step the probes run beside it (on CUDA, a second stream,
//! which the graph turns into branches): a batch forks from the step's
//! stream just before the launch it measures, and the step's stream waits
//! for the probes only before it writes memory they read, before the slots
//! are read back, and at the end of the capture. The buffers they read are
//! held until then, so none is freed under them. Launched one by one, the
//! probes stay in the step's stream: there each fork and join is two more
//! driver calls on the host, which cost a small eager step more than the
//! overlap gains (H100 nano: +198% instead of +139%).
//!
//! So on a GPU a launch outside its bounds is found after the step that
//! made it, not before: strict mode fails that step when it is read back,
//! before its metrics row or any checkpoint is written.

use super::known::{self, Known, MemSpan};
use super::judge::Judge;
use crate::kernels::probe::{probe_range_bf16, probe_range_f16, probe_range_f32, probe_relation_f16_one, probe_relation_f32};
use crate::call::{Arg, Bound, Chosen, KernelDef};
use crate::launch::launch_probe;
use crate::abi::tk_info::{OBSERVE_SLOTS, OBSERVE_WORDS};
use crate::abi::tk_rt::Buf;
use crate::{DType, Device, Error, Result, Tensor};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Slots per lasting buffer: a step whose probes need more is read back
/// in the middle (or, while captured, its remaining launches go
/// unmeasured).
const F64_SLOTS: usize = 1 << 18;
const I32_SLOTS: usize = 1 << 18;

/// Where one input's range lands: `rows` minima from f64 slot `lo`,
/// maxima from `hi`, non-finite counts from i32 slot `bad`.
#[derive(Clone, Debug)]
pub(super) struct RangeSlots {
    pub(super) lo: usize,
    pub(super) hi: usize,
    pub(super) bad: usize,
    pub(super) rows: usize,
}

impl RangeSlots {
    /// The slots of a measurement of `rows` rows from slot 0 (tests).
    #[cfg(test)]
    pub(super) fn for_test(rows: usize) -> RangeSlots {
        RangeSlots { lo: 0, hi: rows, bad: 0, rows }
    }

    /// The rows of this measurement of `n` elements that hold elements
    /// `a..b` (`a < b <= n`): their range contains those elements' range.
    /// A view inside a measured tensor (one layer's weight in the packed
    /// parameters) is judged by it, with neighbours' elements in its first
    /// and last rows: a wider range, which only ever makes a bound larger
    /// or a launch uncovered, never a launch covered that is not.
    pub(super) fn within(&self, n: usize, a: usize, b: usize) -> RangeSlots {
        let row = |i: usize| {
            let mut r = 0;
            for (first, g, c) in pieces(n) {
                if i < first + g * c {
                    return r + (i - first) / c;
                }
                r += g;
            }
            r - 1
        };
        let (r0, r1) = (row(a), row(b - 1));
        RangeSlots { lo: self.lo + r0, hi: self.hi + r0, bad: self.bad + r0, rows: r1 - r0 + 1 }
    }
}

/// Where one relation's counts of broken elements land (i32 slots).
#[derive(Clone, Debug)]
pub(super) struct RelationSlots {
    pub(super) broken: usize,
    pub(super) rows: usize,
}

/// Where a launch finds whether one of its domain relations holds.
#[derive(Clone, Debug)]
pub(super) enum RelationSource {
    /// Checked by a probe before the launch.
    Probed(RelationSlots),
    /// Checked by the kernel that wrote both tensors in this step, on the
    /// values it stored (its observation words).
    Observed(ObservedSlots),
    /// Checked so in an earlier step (read back then): it held.
    Held,
    /// Decided by the ranges of the launch's inputs at positions `t` and
    /// `s` (see `readback::relation_by_ranges`): `s` is one value, so the relation
    /// holds on every element exactly where it holds at `t`'s extremes.
    Ranges { t: usize, s: usize, factor: f64 },
}


/// Where a launch's observation of one output lands: `OBSERVE_SLOTS`
/// slots of `OBSERVE_WORDS` words from i32 slot `at` (see
/// `monitor::observe`), zero before the launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObservedSlots {
    pub(super) at: usize,
}

/// Words of one observed output.
pub(super) const OBSERVED_WORDS: usize = OBSERVE_SLOTS * OBSERVE_WORDS;



/// Where a launch finds one input's range.
#[derive(Clone, Debug)]
pub(super) enum RangeSource {
    /// Measured by a probe (of this launch or of an earlier one that read
    /// the same, unwritten, tensor).
    Slots(RangeSlots),
    /// Written by `kernel`, whose proved `ensures` puts it in `[lo, hi]`
    /// if that launch (`producer`, an earlier pending launch; `None`: one
    /// already judged) was covered.
    Proved { lo: f64, hi: f64, producer: Option<usize>, kernel: &'static str },
    /// Observed by the kernels that wrote it (or its pieces, end to end):
    /// in this step (`parts`, read with the step), or in an earlier one
    /// (`seen`, read back then).
    Observed { parts: Vec<ObservedSlots>, seen: Option<(f64, f64)> },
}

/// A launch whose probes are queued: judged once its slots are read.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) kernel: KernelDef,
    pub(super) judge: &'static Judge,
    pub(super) bound: Bound,
    /// Per tensor parameter: where its range is found, where the bounds
    /// need it.
    pub(super) ranges: Vec<Option<RangeSource>>,
    /// Per domain relation of the kernel, in order.
    pub(super) relations: Vec<RelationSource>,
}

/// The launches of a captured step, with the slots their probes write at
/// each replay.
#[derive(Clone, Debug, Default)]
pub struct ProbePlan {
    launches: Vec<Pending>,
    f64_end: usize,
    i32_end: usize,
    probes: usize,
    joins: usize,
}

impl ProbePlan {
    /// How many launches each replay judges.
    pub fn launches(&self) -> usize {
        self.launches.len()
    }
    /// How many probe launches each replay runs (nodes of the graph).
    pub fn probes(&self) -> usize {
        self.probes
    }
    /// How many times each replay's step waits for the probes beside it
    /// before a write (the end of the step included).
    pub fn joins(&self) -> usize {
        self.joins
    }
    /// The f64 and i32 slots each replay's probes write (read back after
    /// each step).
    pub fn slots(&self) -> (usize, usize) {
        (self.f64_end, self.i32_end)
    }
}

/// Probe launches queued since the start (replays not counted), and those
/// queued while the step being captured was.
static PROBE_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static CAPTURED_PROBES: AtomicUsize = AtomicUsize::new(0);
/// Waits for the probes recorded in the step being captured.
static CAPTURED_JOINS: AtomicUsize = AtomicUsize::new(0);

/// Time the host spent settling launches, in nanoseconds: waiting for and
/// reading back the step with its slots, and judging the launches.
static SETTLE_NANOS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Seconds the host has spent settling launches since the start: reading
/// the step back (with the slots; the wait for the device included), and
/// judging the launches from what it read (benchmarks).
pub fn settle_seconds() -> (f64, f64) {
    let read = |i: usize| SETTLE_NANOS[i].load(Ordering::Relaxed) as f64 * 1e-9;
    (read(0), read(1))
}

fn counted(captured: bool) {
    PROBE_LAUNCHES.fetch_add(1, Ordering::Relaxed);
    if captured {
        CAPTURED_PROBES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Probe launches queued since the start, a graph's replays not counted
/// (benchmarks: probes per step launched one by one; see
/// [`ProbePlan::probes`] for a captured step's).
pub fn probe_launches() -> u64 {
    PROBE_LAUNCHES.load(Ordering::Relaxed)
}

struct Slots {
    location: String,
    f64s: Tensor,
    i32s: Tensor,
}

#[derive(Default)]
struct State {
    slots: Option<Slots>,
    f64_used: usize,
    i32_used: usize,
    /// Launches run (or queued to run) whose slots are not read yet.
    pending: Vec<Pending>,
    /// Launches recorded into the graph being captured.
    captured: Vec<Pending>,
    /// Probes queued beside the step since the step last waited for them.
    beside: Option<Beside>,
    /// A failed wait for the probes, reported at the next [`settle`].
    join_failed: Option<Error>,
    /// Observation words were handed out since the slots were last
    /// cleared: the next [`settle`] reads and clears them.
    observing: bool,
}

/// Probes queued beside a captured step and not yet waited for: their
/// device, and views of what they read (spans to wait for before a write;
/// references that keep the buffers allocated). Never empty.
struct Beside {
    dev: Device,
    reads: Vec<Tensor>,
}

static STATE: Mutex<State> = Mutex::new(State { slots: None, f64_used: 0, i32_used: 0, pending: Vec::new(), captured: Vec::new(), beside: None, join_failed: None, observing: false });

/// The step waits for the probes running beside it, then lets go of what
/// they read.
fn join(st: &mut State) -> Result<()> {
    let Some(b) = st.beside.take() else { return Ok(()) };
    if Device::capturing() {
        CAPTURED_JOINS.fetch_add(1, Ordering::Relaxed);
    }
    b.dev.join_probes()
}

/// [`join`], a failure kept for the next [`settle`] (callers that cannot
/// return an error: the write they precede is queued anyway).
fn join_or_defer(st: &mut State) {
    if let Err(e) = join(st) {
        st.join_failed.get_or_insert(e);
    }
}

/// The step waits for every probe queued so far (before its slots are
/// read, at the end of a capture).
pub fn join_probes() -> Result<()> {
    join(&mut *state()?)
}

/// [`join_probes`] for a caller that cannot fail (see [`join_or_defer`]).
pub(super) fn join_probes_or_defer() {
    if let Ok(mut st) = state() {
        join_or_defer(&mut st);
    }
}

/// Something is about to write `spans`: if a probe may still read one, the
/// step waits for the probes first (see [`join_or_defer`]).
pub(super) fn join_before_write(spans: impl IntoIterator<Item = MemSpan>) {
    let Ok(mut st) = state() else { return };
    let Some(b) = &st.beside else { return };
    let read = spans.into_iter().any(|span| b.reads.iter().any(|t| t.device_span().is_some_and(|s| s.overlaps(&span))));
    if read {
        join_or_defer(&mut st);
    }
}

fn state() -> Result<std::sync::MutexGuard<'static, State>> {
    STATE.lock().map_err(|_| Error::Tensor("the contract monitor's lock is poisoned".into()))
}

/// The state, its slots on `dev`: allocated there first if they are not
/// (launches still pending elsewhere are settled), except while a step is
/// captured (`None`: nothing can be allocated then).
fn state_with_slots(dev: &Device, capturing: bool) -> Result<Option<std::sync::MutexGuard<'static, State>>> {
    let st = state()?;
    if st.slots.as_ref().is_some_and(|s| s.location == dev.location()) {
        return Ok(Some(st));
    }
    if capturing {
        return Ok(None);
    }
    drop(st);
    settle()?;
    // Allocated without the lock: a new tensor is a write the monitor is
    // told about (`monitor::forget`), which takes it.
    let slots = Slots { location: dev.location(), f64s: Tensor::zeros_lasting(&[F64_SLOTS], DType::F64, dev)?, i32s: Tensor::zeros_lasting(&[I32_SLOTS], DType::I32, dev)? };
    let mut st = state()?;
    st.slots = Some(slots);
    Ok(Some(st))
}

/// A tensor of `n` elements as `(first element, rows, row length)` pieces
/// that `probe.tk`'s kernels take (`C <= 65536`): about 256 rows, so a
/// large tensor keeps the GPU busy, and a remainder row. Rows are at most
/// `probe_row()` long.
fn pieces(n: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let c = n.div_ceil(256).clamp(256, probe_row()).min(n).max(1);
    let g = n / c;
    let whole = (g > 0).then_some((0, g, c));
    let rest = (g * c < n).then_some((g * c, 1, n - g * c));
    whole.into_iter().chain(rest)
}

/// The longest row a probe reads (`TOKITAI_PROBE_ROW`, read once; 256 to
/// 65536, default 65536): an ablation switch. Rows of at most 8192 halves
/// fit the cached row form's variants (16-byte loads), at twice the rows
/// (slots) of an 8 MB activation; which pays is for a GPU call to time
/// (bench/experiments/probe_rows.sh).
fn probe_row() -> usize {
    static ROW: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROW.get_or_init(|| std::env::var("TOKITAI_PROBE_ROW").ok().and_then(|v| v.parse::<usize>().ok()).map_or(65536, |r| r.clamp(256, 65536)))
}

/// Rows of all pieces of `n` elements: the slots one probe output takes.
fn rows(n: usize) -> usize {
    pieces(n).map(|p| p.1).sum()
}

/// Launch `probe(first element, rows, row length, first row)` for each
/// piece of `n` elements.
fn each_piece(n: usize, mut probe: impl FnMut(usize, usize, usize, usize) -> Result<()>) -> Result<()> {
    let mut row = 0;
    for (first, g, c) in pieces(n) {
        probe(first, g, c, row)?;
        row += g;
    }
    Ok(())
}

fn range_kernel(dtype: DType) -> Option<&'static KernelDef> {
    match dtype {
        DType::F16 => Some(&probe_range_f16::KERNEL),
        DType::Bf16 => Some(&probe_range_bf16::KERNEL),
        DType::F32 => Some(&probe_range_f32::KERNEL),
        _ => None,
    }
}

/// What [`queue`] did with a launch.
pub(super) enum Queued {
    /// Its probes are queued; it is judged at [`settle`] as the launch at
    /// `index` of those waiting (of the step being captured, while one
    /// is). `observe`: where its kernel observes its outputs, if it does.
    At { index: usize, observe: Option<Observe> },
    /// Its inputs cannot be measured here (it counts as unmeasured).
    Unmeasured(String),
}

/// Where kernels observe their outputs for the monitor
/// (`TOKITAI_OBSERVE`, read once): an ablation switch, so that a
/// benchmark can time the choices on one build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Observing {
    /// Nowhere (`off`): the monitor probes every input.
    Off,
    /// Outside captured steps (`eager`, the default).
    Eager,
    /// Everywhere (`all`).
    All,
}

fn observing() -> Observing {
    static AT: std::sync::OnceLock<Observing> = std::sync::OnceLock::new();
    *AT.get_or_init(|| match std::env::var("TOKITAI_OBSERVE").as_deref() {
        Ok("off") => Observing::Off,
        Ok("all") => Observing::All,
        _ => Observing::Eager,
    })
}

/// A launch's observation: what it runs (which observes its outputs),
/// its words' device address, and where the first output's lie among the
/// i32 slots (the next outputs' follow, in `chosen.observes`' order).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Observe {
    pub(super) chosen: Chosen,
    pub(super) address: u64,
    first: usize,
}

impl Observe {
    /// The slots of the launch's observation of tensor parameter
    /// `position`, where it observes that one.
    pub(super) fn slots_of(&self, position: usize) -> Option<ObservedSlots> {
        self.chosen.observes.iter().position(|p| *p == position).map(|j| ObservedSlots { at: self.first + j * OBSERVED_WORDS })
    }
    /// The words of the launch's check of domain relation `r` (by index
    /// among its kernel's), where it checks that one: after the outputs'.
    pub(super) fn relation_slots(&self, r: usize) -> Option<ObservedSlots> {
        let outputs = self.chosen.observes.len();
        self.chosen.relates.iter().position(|x| *x == r).map(|j| ObservedSlots { at: self.first + (outputs + j) * OBSERVED_WORDS })
    }
}

/// How [`queue`] settles one domain relation of a launch.
enum Relation<'a> {
    /// Known already (see `known::relation`).
    Known(known::RelationKnown),
    /// By the launch's ranges (see [`RelationSource::Ranges`]).
    Ranges { t: usize, s: usize, factor: f64 },
    /// By this probe of `t` and `s`, with the factor as an f32.
    Probe(&'static KernelDef, &'a Tensor, &'a Tensor, f32),
}

/// Queue the probes of a launch on `dev` whose inputs are on the device,
/// skipping inputs whose range is already known (see `known`).
pub(super) fn queue(dev: &Device, k: &KernelDef, bound: &Bound, args: &[Arg], needed: &[bool]) -> Result<Queued> {
    if !dev.has_views() {
        return Ok(Queued::Unmeasured(format!("{} has no probe slots (no views of device memory)", dev.describe())));
    }
    let info = k.info;
    let tensors: Vec<&Tensor> = args.iter().filter_map(|a| a.tensor()).collect();
    let position = |name: &str| info.tensors.iter().position(|p| p.name == name);
    // What is known already, and what the launch needs measured, checked
    // before anything is queued.
    let known: Vec<Option<Known>> = tensors.iter().zip(needed).map(|(t, n)| if *n { t.device_span().and_then(|s| known::lookup(s, t.dtype().name(), t.dtype().size_bytes())) } else { None }).collect();
    let mut want_f64 = 0;
    let mut want_i32 = 0;
    for ((t, n), fact) in tensors.iter().zip(needed).zip(&known) {
        if *n && fact.is_none() {
            if range_kernel(t.dtype()).is_none() {
                return Ok(Queued::Unmeasured(format!("no probe reads {} data", t.dtype().name())));
            }
            want_f64 += 2 * rows(t.len());
            want_i32 += rows(t.len());
        }
    }
    // Each relation: known from the kernel that wrote both (checked as it
    // stored them), or probed.
    let mut relations = Vec::new();
    for (t, s, factor, text) in info.relations {
        let (Some(ti), Some(si)) = (position(t), position(s)) else { return Ok(Queued::Unmeasured(format!("relation `{}` names no tensor", text))) };
        let (tt, st) = (tensors[ti], tensors[si]);
        let spans = tt.device_span().zip(st.device_span());
        if let Some(known) = spans.and_then(|(a, b)| known::relation((a, tt.dtype().name()), (b, st.dtype().name()), *factor)) {
            relations.push(Relation::Known(known));
            continue;
        }
        // One bound for every element: the ranges the launch needs anyway
        // decide it (adamw's `g * g <= nsq`; a probe read the 170 MB
        // gradient again at tiny).
        if st.len() == 1 && needed[ti] && needed[si] && *factor > 0.0 {
            relations.push(Relation::Ranges { t: ti, s: si, factor: *factor });
            continue;
        }
        let kernel: &'static KernelDef = match (tt.dtype(), st.dtype(), st.len()) {
            (DType::F32, DType::F32, n) if n == tt.len() => &probe_relation_f32::KERNEL,
            (DType::F16, DType::F32, 1) if st.shape().is_empty() => &probe_relation_f16_one::KERNEL,
            (a, b, _) => return Ok(Queued::Unmeasured(format!("no probe checks relation `{}` on {} and {} data of these shapes", text, a.name(), b.name()))),
        };
        // The probe takes the factor as an f32: it must be one exactly.
        if (*factor as f32) as f64 != *factor {
            return Ok(Queued::Unmeasured(format!("relation `{}`: factor {} is not an f32", text, factor)));
        }
        want_i32 += rows(tt.len());
        relations.push(Relation::Probe(kernel, tt, st, *factor as f32));
    }
    // Not in a captured step (unless `TOKITAI_OBSERVE=all`): its probes
    // run beside it, off the critical path, while an observing kernel
    // lengthens its own (H100, dense graphs, one merge a block: tiny
    // +14.5% and +13.5% observing against +13.4% and +13.6% probing, 69
    // probe launches a step against 251; nano +32% and +34% against +25%
    // and +26%). Eager steps gain (tiny sparse +11% to +14% against +23%
    // to +25% probing every row kernel's output).
    let capturing = Device::capturing();
    // What the launch runs to observe: its choice, or the choice's
    // observing twin (handed to the backend with the words).
    let chosen = match (observing(), capturing) {
        (Observing::Off, _) | (Observing::Eager, true) => None,
        _ => Some(k.observing(dev.chosen(k, &bound.dims))),
    };
    let observed_words = chosen.map_or(0, |c| (c.observes.len() + c.relates.len()) * OBSERVED_WORDS);
    want_i32 += observed_words;
    if want_f64 > F64_SLOTS || want_i32 > I32_SLOTS {
        return Ok(Queued::Unmeasured(format!("its probes need {} + {} slots, more than the {} + {} there are", want_f64, want_i32, F64_SLOTS, I32_SLOTS)));
    }
    let Some(mut st) = state_with_slots(dev, capturing)? else {
        return Ok(Queued::Unmeasured("the probe slots cannot be allocated while a step is captured".into()));
    };
    if st.f64_used + want_f64 > F64_SLOTS || st.i32_used + want_i32 > I32_SLOTS {
        if capturing || !st.captured.is_empty() {
            return Ok(Queued::Unmeasured("the probe slots are full while a step is captured".into()));
        }
        drop(st);
        // Reading the slots back ends what is known of them (a fact kept
        // across the settle is re-read here).
        settle()?;
        return queue(dev, k, bound, args, needed);
    }
    let st = &mut *st;
    let slots = st.slots.as_ref().expect("allocated above");
    // The observation words first (zero since the last settle cleared them).
    let observe = if observed_words > 0 {
        let first = st.i32_used;
        st.i32_used += observed_words;
        st.observing = true;
        let address = slots.i32s.view(first, &[observed_words])?.device_span().map(|s| s.start);
        address.zip(chosen).map(|(address, chosen)| Observe { chosen, address, first })
    } else {
        None
    };
    // A captured step's probes run beside it; they read the inputs as this
    // launch will: after everything queued on the step's stream so far.
    let beside = capturing;
    if beside && want_f64 + want_i32 > observed_words {
        dev.fork_probes()?;
    }
    // What the probes read (views), held while they may run beside.
    let mut reads = Vec::new();
    let mut ranges = Vec::new();
    for ((t, n), fact) in tensors.iter().zip(needed).zip(known) {
        if !*n {
            ranges.push(None);
            continue;
        }
        match fact {
            Some(Known::Measured(at)) => {
                ranges.push(Some(RangeSource::Slots(at)));
                continue;
            }
            Some(Known::Proved { lo, hi, producer, kernel }) => {
                ranges.push(Some(RangeSource::Proved { lo, hi, producer, kernel }));
                continue;
            }
            Some(Known::Observed(at)) => {
                ranges.push(Some(RangeSource::Observed { parts: vec![at], seen: None }));
                continue;
            }
            Some(Known::Seen { lo, hi }) => {
                ranges.push(Some(RangeSource::Observed { parts: Vec::new(), seen: Some((lo, hi)) }));
                continue;
            }
            Some(Known::Pieces { observed, seen }) => {
                ranges.push(Some(RangeSource::Observed { parts: observed, seen }));
                continue;
            }
            None => {}
        }
        let at = probe_range(dev, slots, (&mut st.f64_used, &mut st.i32_used), t, beside, &mut reads)?;
        ranges.push(Some(RangeSource::Slots(at)));
    }
    let mut relation_slots = Vec::new();
    for relation in relations {
        let (kernel, t, s, factor) = match relation {
            Relation::Probe(kernel, t, s, factor) => (kernel, t, s, factor),
            Relation::Known(known::RelationKnown::Observed(at)) => {
                relation_slots.push(RelationSource::Observed(at));
                continue;
            }
            Relation::Known(known::RelationKnown::Held) => {
                relation_slots.push(RelationSource::Held);
                continue;
            }
            Relation::Ranges { t, s, factor } => {
                relation_slots.push(RelationSource::Ranges { t, s, factor });
                continue;
            }
        };
        let r = rows(t.len());
        let at = RelationSlots { broken: st.i32_used, rows: r };
        st.i32_used += r;
        each_piece(t.len(), |first, g, c, row| {
            let tv = t.view(first, &[g, c])?;
            // A bound for every element is read whole; else its rows.
            let rows_of_s;
            let sv = if s.shape().is_empty() {
                s
            } else {
                rows_of_s = s.view(first, &[g, c])?;
                &rows_of_s
            };
            let mut broken = slots.i32s.view(at.broken + row, &[g])?;
            launch_probe(dev, kernel, &mut [Arg::In(&tv), Arg::In(sv), Arg::Scalar(factor as f64), Arg::Out(&mut broken)], beside)?;
            counted(beside);
            reads.push(tv);
            Ok(())
        })?;
        reads.push(s.view(0, s.shape())?);
        relation_slots.push(RelationSource::Probed(at));
    }
    if beside && !reads.is_empty() {
        st.beside.get_or_insert_with(|| Beside { dev: dev.clone(), reads: Vec::new() }).reads.extend(reads);
    }
    let p = Pending { kernel: *k, judge: Judge::of(k.info), bound: bound.clone(), ranges, relations: relation_slots };
    let list = if capturing { &mut st.captured } else { &mut st.pending };
    list.push(p);
    Ok(Queued::At { index: list.len() - 1, observe })
}

/// Queue the range probe of `t` into the next free slots (`used`: the
/// f64 and i32 slots taken so far), remember that it is measured there,
/// and keep the views it reads in `reads`.
fn probe_range(dev: &Device, slots: &Slots, used: (&mut usize, &mut usize), t: &Tensor, beside: bool, reads: &mut Vec<Tensor>) -> Result<RangeSlots> {
    let r = rows(t.len());
    let at = RangeSlots { lo: *used.0, hi: *used.0 + r, bad: *used.1, rows: r };
    *used.0 += 2 * r;
    *used.1 += r;
    let kernel = range_kernel(t.dtype()).ok_or_else(|| Error::Tensor(format!("no probe reads {} data", t.dtype().name())))?;
    each_piece(t.len(), |first, g, c, row| {
        let x = t.view(first, &[g, c])?;
        let mut lo = slots.f64s.view(at.lo + row, &[g])?;
        let mut hi = slots.f64s.view(at.hi + row, &[g])?;
        let mut bad = slots.i32s.view(at.bad + row, &[g])?;
        launch_probe(dev, kernel, &mut [Arg::In(&x), Arg::Out(&mut lo), Arg::Out(&mut hi), Arg::Out(&mut bad)], beside)?;
        counted(beside);
        reads.push(x);
        Ok(())
    })?;
    if let Some(span) = t.device_span() {
        known::remember(span, t.dtype().name(), Known::Measured(at.clone()));
    }
    Ok(at)
}

/// Measure `t` ahead of the launches that read it (see
/// [`super::measure`]): its probes are queued now, beside a captured step,
/// and launches that read it or a view inside it before anything writes
/// it find it measured. Nothing is queued where a launch's own probes
/// would not be (no slots free while capturing, a dtype no probe reads,
/// a device without views): those launches measure for themselves.
pub(super) fn measure(dev: &Device, t: &Tensor) -> Result<()> {
    let Some(span) = t.device_span() else { return Ok(()) };
    if !dev.has_views() || range_kernel(t.dtype()).is_none() || t.is_empty() || known::lookup(span, t.dtype().name(), t.dtype().size_bytes()).is_some() {
        return Ok(());
    }
    let capturing = Device::capturing();
    let want = (2 * rows(t.len()), rows(t.len()));
    let Some(mut st) = state_with_slots(dev, capturing)? else { return Ok(()) };
    if st.f64_used + want.0 > F64_SLOTS || st.i32_used + want.1 > I32_SLOTS {
        return Ok(());
    }
    if capturing {
        dev.fork_probes()?;
    }
    let st = &mut *st;
    let mut reads = Vec::new();
    let slots = st.slots.as_ref().expect("checked above");
    probe_range(dev, slots, (&mut st.f64_used, &mut st.i32_used), t, capturing, &mut reads)?;
    if capturing {
        st.beside.get_or_insert_with(|| Beside { dev: dev.clone(), reads: Vec::new() }).reads.extend(reads);
    }
    Ok(())
}

/// The probes recorded by the capture that just ended, for [`replay`]; the
/// slots they write stay reserved until the plan is replayed and settled.
pub fn take_captured() -> ProbePlan {
    let Ok(mut st) = state() else { return ProbePlan::default() };
    let launches = std::mem::take(&mut st.captured);
    ProbePlan { launches, f64_end: st.f64_used, i32_end: st.i32_used, probes: CAPTURED_PROBES.swap(0, Ordering::Relaxed), joins: CAPTURED_JOINS.swap(0, Ordering::Relaxed) }
}

/// Replay a captured step (`launch` queues the graph) and hand its
/// launches to the monitor, to be judged at the next [`settle`]. Launches
/// still pending are settled first: the replay rewrites their slots.
pub fn replay(plan: &ProbePlan, launch: impl FnOnce() -> Result<()>) -> Result<()> {
    if super::mode() == super::Mode::Off || plan.launches.is_empty() {
        return launch();
    }
    settle()?;
    launch()?;
    let mut st = state()?;
    st.pending.extend(plan.launches.iter().cloned());
    st.f64_used = st.f64_used.max(plan.f64_end);
    st.i32_used = st.i32_used.max(plan.i32_end);
    // The replay's kernels merged into its observation words: cleared
    // once read, or the next launches (another replay, or eager ones laid
    // out otherwise) would merge into what it left.
    st.observing = true;
    Ok(())
}

/// Read back the slots of every pending launch (one wait for the device)
/// and judge each; in strict mode the first launch found outside its bounds
/// is the error (every launch is counted first).
pub fn settle() -> Result<()> {
    settle_reading(&[]).map(|_| ())
}

/// [`settle`], reading `tensors` back in the same wait (a training step's
/// metrics): their host buffers, in order.
pub fn settle_reading(tensors: &[&Tensor]) -> Result<Vec<Buf>> {
    let (pending, mut values, slots_read, clear) = {
        let mut st = state()?;
        // The slots are read on the step's stream: after the probes.
        join(&mut st)?;
        if let Some(e) = st.join_failed.take() {
            return Err(e);
        }
        let pending = std::mem::take(&mut st.pending);
        let mut read = tensors.to_vec();
        let slot_views = match (&st.slots, pending.is_empty() && !st.observing) {
            (Some(slots), false) => Some((slots.f64s.view(0, &[st.f64_used.max(1)])?, slots.i32s.view(0, &[st.i32_used.max(1)])?)),
            _ => None,
        };
        if let Some((f, i)) = &slot_views {
            read.extend([f, i]);
        }
        let start = std::time::Instant::now();
        let values = Tensor::read_all(&read);
        SETTLE_NANOS[0].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        drop(read);
        let slots_read = slot_views.is_some();
        // Observation words merge into what they hold: cleared for the
        // next launches (or replay) once read (read whenever any were
        // handed out). Probe slots are written whole; clearing them too
        // costs nothing more.
        let clear = slot_views.filter(|_| st.observing).map(|(_, i32s)| i32s);
        st.observing = false;
        // The slots are free again unless a captured graph still writes them.
        if st.captured.is_empty() {
            st.f64_used = 0;
            st.i32_used = 0;
        }
        (pending, values?, slots_read, clear)
    };
    if let Some(mut words) = clear {
        words.fill_zero()?;
    }
    // Nothing to judge and no observation to keep: the step's values only.
    if !slots_read {
        return Ok(values);
    }
    let start = std::time::Instant::now();
    let (Some(Buf::I32(i32s)), Some(Buf::F64(f64s))) = (values.pop(), values.pop()) else {
        return Err(Error::Tensor("the contract monitor's slots were read back as other dtypes".into()));
    };
    let judged = super::readback::judge_all(&pending, &f64s, &i32s);
    SETTLE_NANOS[1].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    judged.map(|_| values)
}








#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_float_input_of_a_shipped_kernel_has_a_range_probe() {
        // A launch whose input no probe reads is unmeasured on the device
        // (the bf16 contractions were, before probe_range_bf16): every
        // float dtype a kernel takes must have a probe of its own, whose
        // input is that dtype.
        for k in crate::kernels::all() {
            for t in k.info.tensors.iter().filter(|t| t.role == "input") {
                let dtype = DType::parse(t.dtype).unwrap_or_else(|| panic!("{}: dtype {}", k.info.name, t.dtype));
                if !matches!(dtype, DType::F16 | DType::Bf16 | DType::F32) {
                    continue;
                }
                let probe = range_kernel(dtype).unwrap_or_else(|| panic!("{}: no probe reads {} data (input `{}`)", k.info.name, t.dtype, t.name));
                assert_eq!(probe.info.tensors[0].dtype, t.dtype, "{}: the probe for {} reads {}", k.info.name, t.dtype, probe.info.tensors[0].dtype);
            }
        }
    }



    #[test]
    fn pieces_cover_every_element_once_in_rows_the_probes_admit() {
        for n in [1, 2, 255, 256, 257, 1000, 65536, 65537, 1 << 20, (1 << 20) + 3, 50_000_000] {
            let mut next = 0;
            for (first, g, c) in pieces(n) {
                assert_eq!(first, next, "n = {}: pieces are contiguous", n);
                assert!(g >= 1 && (1..=65536).contains(&c), "n = {}: piece {:?}", n, (first, g, c));
                next += g * c;
            }
            assert_eq!(next, n, "n = {}: every element once", n);
            // About 256 rows (more where TOKITAI_PROBE_ROW caps them shorter).
            assert!(rows(n) <= 1025.max(n / probe_row() + 2), "n = {}: {} rows", n, rows(n));
        }
        assert_eq!(pieces(0).count(), 0);
    }

    #[test]
    fn a_view_is_judged_by_exactly_the_rows_that_hold_its_elements() {
        // Each element's row, as the probes lay a tensor of n elements out.
        let rows_of = |n: usize| -> Vec<usize> {
            let mut out = Vec::new();
            let mut row = 0;
            for (_, g, c) in pieces(n) {
                for r in 0..g {
                    out.extend(std::iter::repeat_n(row + r, c));
                }
                row += g;
            }
            out
        };
        let whole = RangeSlots { lo: 10, hi: 5000, bad: 70, rows: 0 };
        for n in [1, 7, 256, 300, 1000, 65537, 100_003] {
            let row = rows_of(n);
            let cuts = [0, 1, n / 3, n / 2, n - 1].map(|x| x.min(n - 1));
            for a in cuts {
                for b in cuts.iter().map(|b| b + 1).filter(|&b| b > a) {
                    let v = whole.within(n, a, b);
                    let (r0, r1) = (row[a], row[b - 1]);
                    assert_eq!((v.lo, v.hi, v.bad, v.rows), (10 + r0, 5000 + r0, 70 + r0, r1 - r0 + 1), "n = {}, elements {}..{}", n, a, b);
                }
            }
        }
    }




}
