//! What the monitor knows about device memory without reading it again.
//!
//! Two facts save a probe. A tensor a probe measured in this step is not
//! measured again until something writes it (a linear layer's weight is
//! read by its forward and both backward contractions; it is measured
//! once). And a tensor that a kernel with a proved float `ensures` wrote
//! holds values in that range (domains that compose: router_softmax's `p`
//! is in [0, 1], so top2's domain needs no probe), provided the producing
//! launch was itself covered: the fact names that launch, and a consumer
//! that relies on it is judged with it.
//!
//! Facts are kept per span of device memory and dropped when any write
//! overlaps it: a kernel's outputs, a copy, an upload, a clear, and a new
//! allocation over the same bytes (`Tensor` and `launch` report each).
//! Captured steps start and end with no facts, and so does each replay:
//! a graph's launches do not pass through the monitor when replayed.

use super::probe::{ObservedSlots, RangeSlots};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Bytes `start..start + bytes` of device `device`'s memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemSpan {
    pub device: usize,
    pub start: u64,
    pub bytes: usize,
}

impl MemSpan {
    pub(super) fn overlaps(&self, o: &MemSpan) -> bool {
        self.device == o.device && self.start < o.start + o.bytes as u64 && o.start < self.start + self.bytes as u64
    }

    /// Does this span hold `o` whole, at a whole number of `elem`-byte
    /// elements from its start?
    pub(super) fn holds(&self, o: &MemSpan, elem: usize) -> bool {
        self.device == o.device && self.start <= o.start && o.start + o.bytes as u64 <= self.start + self.bytes as u64 && (o.start - self.start).is_multiple_of(elem as u64)
    }
}

/// A fact about the values in a span.
#[derive(Clone, Debug)]
pub(super) enum Known {
    /// A probe queued in this step measures it into these slots.
    Measured(RangeSlots),
    /// The kernel that wrote it in this step observed every value it
    /// stored into these observation words (see `monitor::observe`).
    Observed(ObservedSlots),
    /// An observation read back when its step was: every value is in
    /// `[lo, hi]` (measured, so it depends on no launch's verdict).
    Seen { lo: f64, hi: f64 },
    /// (Only as an answer of [`lookup`], never kept.) Observations of
    /// pieces that together are the span asked for, end to end: the
    /// packed gradient, each layer's piece written by its own kernel.
    Pieces { observed: Vec<ObservedSlots>, seen: Option<(f64, f64)> },
    /// A kernel whose `ensures` is proved wrote it: every value is in
    /// `[lo, hi]` if the launch `producer` (an index into the launches
    /// waiting for their verdict) is covered; `None`: it was.
    Proved { lo: f64, hi: f64, producer: Option<usize>, kernel: &'static str },
}

/// The facts, by where their spans start. Spans never overlap (recording
/// one cuts what it overlaps, see [`cut`]), so they are ordered by their
/// ends too: the facts touching a span are a run of neighbours, found in
/// logarithmic time (a step looks facts up at every launch, and zeroed
/// activations add one each).
type Facts = BTreeMap<(usize, u64), (MemSpan, &'static str, Known)>;

static KNOWN: Mutex<Facts> = Mutex::new(BTreeMap::new());

/// The keys of the facts in `k` whose spans overlap `span`, last first.
fn overlapping(k: &Facts, span: MemSpan) -> Vec<(usize, u64)> {
    let end = span.start + span.bytes as u64;
    k.range((span.device, 0)..(span.device, end)).rev().take_while(|(_, (s, _, _))| s.start + s.bytes as u64 > span.start).map(|(key, _)| *key).collect()
}

/// A fact about a domain relation `square * square <= factor * bound`
/// between the values of two spans, each read as its dtype.
#[derive(Clone, Debug)]
pub(super) struct RelationFact {
    pub(super) square: (MemSpan, &'static str),
    pub(super) bound: (MemSpan, &'static str),
    pub(super) factor: f64,
    pub(super) known: RelationKnown,
}

/// What is known of a relation (see [`RelationFact`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RelationKnown {
    /// The kernel that wrote both in this step checked it on every pair
    /// it stored, into these observation words (`KStmt::ObserveRelation`).
    Observed(ObservedSlots),
    /// That check was read back: it held on every element.
    Held,
}

static RELATIONS: Mutex<Vec<RelationFact>> = Mutex::new(Vec::new());

fn with_relations<R>(f: impl FnOnce(&mut Vec<RelationFact>) -> R) -> Option<R> {
    RELATIONS.lock().ok().map(|mut r| f(&mut r))
}

/// Record a relation fact (replacing one about the same two spans).
pub(super) fn remember_relation(fact: RelationFact) {
    with_relations(|r| {
        r.retain(|f| !(f.square.0.overlaps(&fact.square.0) || f.bound.0.overlaps(&fact.bound.0)));
        r.push(fact);
    });
}

/// What is known of the relation `square * square <= factor * bound`
/// between these two spans (as these dtypes), if anything: a fact about
/// exactly them, neither written since.
pub(super) fn relation(square: (MemSpan, &'static str), bound: (MemSpan, &'static str), factor: f64) -> Option<RelationKnown> {
    with_relations(|r| r.iter().find(|f| f.square == square && f.bound == bound && f.factor == factor).map(|f| f.known.clone())).flatten()
}

fn with<R>(f: impl FnOnce(&mut Facts) -> R) -> Option<R> {
    KNOWN.lock().ok().map(|mut k| f(&mut k))
}

/// Something wrote `span`: what was known about it no longer holds.
pub fn forget(span: Option<MemSpan>) {
    if let Some(span) = span {
        with(|k| cut(k, span));
        with_relations(|r| r.retain(|f| !(f.square.0.overlaps(&span) || f.bound.0.overlaps(&span))));
    }
}

/// Drop what is known of `span` from `k`. A range fact about a larger
/// span stays true of the bytes outside `span` (a wider range than theirs,
/// never a wrong one), so it is kept for those: the packed gradient,
/// zeroed once, keeps its padding known as zero while each layer's piece
/// is written by its own kernel. A probe's measurement is dropped whole
/// (its rows are the whole span's).
fn cut(k: &mut Facts, span: MemSpan) {
    for key in overlapping(k, span) {
        let Some((s, d, f)) = k.remove(&key) else { continue };
        if matches!(f, Known::Seen { .. } | Known::Observed(_) | Known::Proved { .. }) {
            let end = s.start + s.bytes as u64;
            if s.start < span.start {
                let before = MemSpan { bytes: (span.start - s.start) as usize, ..s };
                k.insert((before.device, before.start), (before, d, f.clone()));
            }
            let span_end = span.start + span.bytes as u64;
            if span_end < end {
                let after = MemSpan { start: span_end, bytes: (end - span_end) as usize, ..s };
                k.insert((after.device, after.start), (after, d, f));
            }
        }
    }
}

/// `span` was just filled with `value` by the host's own hand (a clear, an
/// upload of data whose range the host scanned): known as that range, like
/// a read-back observation, until written.
pub fn filled(span: Option<MemSpan>, dtype: &'static str, lo: f64, hi: f64) {
    if let Some(span) = span.filter(|s| s.bytes > 0) {
        if lo.is_finite() && hi.is_finite() {
            remember(span, dtype, Known::Seen { lo, hi });
        }
    }
}

/// Forget everything (a capture begins or ends, a graph is replayed).
pub fn forget_all() {
    with(|k| k.clear());
    with_relations(|r| r.clear());
}

/// The fact about this span read as `dtype` (of `elem` bytes), if one is
/// known: one about exactly these bytes, else the measurement of a span
/// that holds them whole, narrowed to the rows that hold the view (see
/// `RangeSlots::within`).
pub(super) fn lookup(span: MemSpan, dtype: &'static str, elem: usize) -> Option<Known> {
    with(|k| {
        if let Some((s, d, f)) = k.get(&(span.device, span.start)) {
            if *s == span && *d == dtype {
                return Some(f.clone());
            }
        }
        // Facts are disjoint: only the last one starting at or before the
        // span can hold it.
        let holder = k.range((span.device, 0)..=(span.device, span.start)).next_back().map(|(_, fact)| fact).filter(|(s, d, _)| *d == dtype && span.bytes > 0 && s.holds(&span, elem));
        holder
            .and_then(|(s, _, f)| match f {
                Known::Measured(at) => {
                    let a = (span.start - s.start) as usize / elem;
                    Some(Known::Measured(at.within(s.bytes / elem, a, a + span.bytes / elem)))
                }
                // The whole output's range holds every view inside it (a wider
                // range: a larger bound, never a launch covered that is not).
                Known::Observed(at) => Some(Known::Observed(at.clone())),
                Known::Seen { lo, hi } => Some(Known::Seen { lo: *lo, hi: *hi }),
                _ => None,
            })
            .or_else(|| pieces(k, span, dtype))
    })
    .flatten()
}

/// The observations (in this step, or read back) of pieces that are
/// `span` end to end, read as `dtype`: a range for all of it.
fn pieces(k: &Facts, span: MemSpan, dtype: &'static str) -> Option<Known> {
    let end = span.start + span.bytes as u64;
    let inside: Vec<&(MemSpan, &'static str, Known)> = k
        .range((span.device, span.start)..(span.device, end))
        .map(|(_, fact)| fact)
        .filter(|(s, d, f)| *d == dtype && s.bytes > 0 && span.holds(s, 1) && matches!(f, Known::Observed(_) | Known::Seen { .. }))
        .collect();
    if inside.len() < 2 {
        return None;
    }
    let mut next = span.start;
    let (mut observed, mut seen): (Vec<ObservedSlots>, Option<(f64, f64)>) = (Vec::new(), None);
    for (s, _, f) in inside {
        if s.start != next {
            return None;
        }
        next = s.start + s.bytes as u64;
        match f {
            Known::Observed(at) => observed.push(at.clone()),
            Known::Seen { lo, hi } => seen = Some(seen.map_or((*lo, *hi), |(a, b)| (a.min(*lo), b.max(*hi)))),
            _ => unreachable!("filtered above"),
        }
    }
    (next == end).then_some(Known::Pieces { observed, seen })
}

/// Record a fact about `span` (replacing what was known of it; see `cut`).
pub(super) fn remember(span: MemSpan, dtype: &'static str, fact: Known) {
    if span.bytes == 0 {
        return;
    }
    with(|k| {
        cut(k, span);
        k.insert((span.device, span.start), (span, dtype, fact));
    });
}

/// The launches waiting for a verdict were judged (`covered(i)` for the
/// i-th): facts whose producer was covered hold from now on, the others
/// are dropped, and so are the measurements (their slots are reused). An
/// observation read back (`observed(at)`: its range, `None` where it saw
/// a non-finite value or nothing) holds on as that range, until the
/// tensor is written again.
pub(super) fn settled(covered: impl Fn(usize) -> bool, observed: impl Fn(&ObservedSlots) -> Option<(f64, f64)>, held: impl Fn(&ObservedSlots) -> bool) {
    // A relation checked in this step holds on from now on where it held
    // on every pair stored; else nothing is known.
    with_relations(|r| {
        r.retain_mut(|f| match &f.known {
            RelationKnown::Observed(at) if held(at) => {
                f.known = RelationKnown::Held;
                true
            }
            RelationKnown::Observed(_) => false,
            RelationKnown::Held => true,
        })
    });
    with(|k| {
        k.retain(|_, (_, _, f)| match f {
            Known::Measured(_) => false,
            Known::Observed(at) => match observed(at) {
                Some((lo, hi)) => {
                    *f = Known::Seen { lo, hi };
                    true
                }
                None => false,
            },
            Known::Seen { .. } => true,
            Known::Pieces { .. } => false,
            Known::Proved { producer, .. } => match *producer {
                Some(i) if !covered(i) => false,
                _ => {
                    *producer = None;
                    true
                }
            },
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_inside_a_known_span_keeps_the_rest_known() {
        // The packed gradient: zeroed once (known as zero), then two
        // pieces written by observing kernels, with padding between them
        // and after: the whole is known from its pieces, the padding
        // still as zero.
        forget_all();
        let whole = MemSpan { device: 0, start: 4096, bytes: 1000 };
        filled(Some(whole), "f16", 0.0, 0.0);
        let a = MemSpan { device: 0, start: 4096, bytes: 200 };
        let b = MemSpan { device: 0, start: 4396, bytes: 400 };
        remember(a, "f16", Known::Observed(ObservedSlots { at: 0 }));
        remember(b, "f16", Known::Observed(ObservedSlots { at: 192 }));
        match lookup(whole, "f16", 2) {
            Some(Known::Pieces { observed, seen }) => {
                assert_eq!(observed, vec![ObservedSlots { at: 0 }, ObservedSlots { at: 192 }]);
                assert_eq!(seen, Some((0.0, 0.0)), "the padding is known as zero");
            }
            other => panic!("the whole should be known from its pieces: {:?}", other),
        }
        // A write into the padding by a kernel that does not observe: the
        // whole is no longer known, the rest of the padding still is.
        forget(Some(MemSpan { device: 0, start: 4300, bytes: 8 }));
        assert!(lookup(whole, "f16", 2).is_none());
        let rest = MemSpan { device: 0, start: 4308, bytes: 88 };
        assert!(matches!(lookup(rest, "f16", 2), Some(Known::Seen { lo, hi }) if lo == 0.0 && hi == 0.0), "{:?}", lookup(rest, "f16", 2));
        // Non-finite or empty fills are not facts.
        forget_all();
        filled(Some(whole), "f16", f64::NAN, f64::NAN);
        filled(Some(MemSpan { bytes: 0, ..whole }), "f16", 0.0, 0.0);
        assert!(lookup(whole, "f16", 2).is_none());
        // A probe's measurement is dropped whole by a write inside it.
        remember(whole, "f16", Known::Measured(RangeSlots::for_test(4)));
        forget(Some(a));
        assert!(lookup(MemSpan { device: 0, start: 4700, bytes: 100 }, "f16", 2).is_none());
        forget_all();
    }

    #[test]
    fn a_write_anywhere_in_a_span_forgets_it() {
        let a = MemSpan { device: 0, start: 1000, bytes: 100 };
        let fact = || Known::Proved { lo: 0.0, hi: 1.0, producer: None, kernel: "k" };
        forget_all();
        remember(a, "f32", fact());
        assert!(lookup(a, "f32", 4).is_some());
        assert!(lookup(a, "f16", 2).is_none(), "the same bytes read as another dtype are another fact");
        forget(Some(MemSpan { device: 1, start: 1000, bytes: 100 }));
        assert!(lookup(a, "f32", 4).is_some(), "another device's memory");
        forget(Some(MemSpan { device: 0, start: 1100, bytes: 8 }));
        assert!(lookup(a, "f32", 4).is_some(), "the bytes just after");
        forget(Some(MemSpan { device: 0, start: 1096, bytes: 8 }));
        assert!(lookup(a, "f32", 4).is_none(), "an overlapping write");
        remember(a, "f32", Known::Proved { lo: 0.0, hi: 1.0, producer: Some(3), kernel: "k" });
        settled(|i| i != 3, |_| None, |_| false);
        assert!(lookup(a, "f32", 4).is_none(), "the producer was not covered");
        remember(a, "f32", Known::Proved { lo: 0.0, hi: 1.0, producer: Some(3), kernel: "k" });
        settled(|i| i == 3, |_| None, |_| false);
        assert!(matches!(lookup(a, "f32", 4), Some(Known::Proved { producer: None, .. })), "a covered producer's fact lasts");
        forget_all();
        // A measurement answers for views inside it, at whole elements,
        // read as the same dtype; a proved range only for its own span.
        remember(a, "f32", Known::Measured(RangeSlots::for_test(100)));
        let inside = MemSpan { device: 0, start: 1040, bytes: 40 };
        assert!(matches!(lookup(inside, "f32", 4), Some(Known::Measured(_))));
        assert!(lookup(inside, "f16", 2).is_none(), "another dtype");
        assert!(lookup(MemSpan { start: 1042, ..inside }, "f32", 4).is_none(), "not at a whole element");
        assert!(lookup(MemSpan { start: 1080, ..inside }, "f32", 4).is_none(), "running past the end");
        assert!(lookup(MemSpan { device: 1, ..inside }, "f32", 4).is_none(), "another device");
        remember(a, "f32", fact());
        assert!(lookup(inside, "f32", 4).is_none(), "a proved range holds for the span its producer wrote");
        forget_all();
    }

    #[test]
    fn a_relation_checked_by_its_writer_holds_until_either_span_is_written() {
        forget_all();
        let (m, v) = (MemSpan { device: 0, start: 8192, bytes: 400 }, MemSpan { device: 0, start: 9000, bytes: 400 });
        let fact = |known| RelationFact { square: (m, "f32"), bound: (v, "f32"), factor: 64.0, known };
        let at = ObservedSlots { at: 576 };
        remember_relation(fact(RelationKnown::Observed(at.clone())));
        assert_eq!(relation((m, "f32"), (v, "f32"), 64.0), Some(RelationKnown::Observed(at.clone())));
        assert_eq!(relation((m, "f32"), (v, "f32"), 32.0), None, "another factor");
        assert_eq!(relation((v, "f32"), (m, "f32"), 64.0), None, "the spans swapped");
        assert_eq!(relation((m, "f16"), (v, "f32"), 64.0), None, "read as another dtype");
        // Read back: it held on every pair stored.
        settled(|_| true, |_| None, |o| *o == at);
        assert_eq!(relation((m, "f32"), (v, "f32"), 64.0), Some(RelationKnown::Held));
        forget(Some(MemSpan { device: 0, start: 9396, bytes: 4 }));
        assert_eq!(relation((m, "f32"), (v, "f32"), 64.0), None, "the bound's last element written");
        remember_relation(fact(RelationKnown::Held));
        forget(Some(MemSpan { device: 0, start: 8192, bytes: 4 }));
        assert_eq!(relation((m, "f32"), (v, "f32"), 64.0), None, "the square's first element written");
        // Broken on some pair: nothing is known after the read-back.
        remember_relation(fact(RelationKnown::Observed(at.clone())));
        settled(|_| true, |_| None, |_| false);
        assert_eq!(relation((m, "f32"), (v, "f32"), 64.0), None, "it failed somewhere");
        remember_relation(fact(RelationKnown::Held));
        forget_all();
        assert_eq!(relation((m, "f32"), (v, "f32"), 64.0), None);
    }

    #[test]
    fn pieces_observed_end_to_end_answer_for_the_whole() {
        forget_all();
        let whole = MemSpan { device: 0, start: 4096, bytes: 300 };
        let piece = |start: u64, bytes: usize| MemSpan { device: 0, start, bytes };
        remember(piece(4096, 100), "f16", Known::Observed(ObservedSlots { at: 0 }));
        remember(piece(4196, 100), "f16", Known::Seen { lo: -2.0, hi: 1.0 });
        assert!(lookup(whole, "f16", 2).is_none(), "a gap at the end");
        remember(piece(4296, 100), "f16", Known::Observed(ObservedSlots { at: 192 }));
        match lookup(whole, "f16", 2) {
            Some(Known::Pieces { observed, seen }) => {
                assert_eq!(observed, vec![ObservedSlots { at: 0 }, ObservedSlots { at: 192 }]);
                assert_eq!(seen, Some((-2.0, 1.0)));
            }
            other => panic!("{:?}", other),
        }
        assert!(lookup(whole, "f32", 4).is_none(), "read as another dtype");
        forget(Some(piece(4200, 2)));
        assert!(lookup(whole, "f16", 2).is_none(), "a piece written since");
        forget_all();
    }
}
