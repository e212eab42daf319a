//! What the contract monitor knows about a host tensor's values, kept on
//! the tensor until its next write: the range (scanned at the first read
//! after a write, or observed by the CPU schedule that wrote it, or by a
//! copy of a whole tensor), and the domain relations known to hold against
//! another tensor's current values (AdamW's `m * m <= 64 v`, checked by
//! the kernel that stored both).
//!
//! A relation names its partner by the partner's version: a number that
//! each write of any host tensor's data draws fresh, so a fact about a
//! partner that has been written since (or a different tensor) never
//! matches.

use crate::abi::tk_rt::Buf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The last version drawn.
static VERSIONS: AtomicU64 = AtomicU64::new(0);

fn fresh() -> u64 {
    VERSIONS.fetch_add(1, Ordering::Relaxed) + 1
}

pub(crate) struct HostFacts {
    version: u64,
    /// `(min, max)` once known (`None` inside: integer data).
    range: OnceLock<Option<(f64, f64)>>,
    /// The ranges of disjoint spans of elements `[start, end)`, sorted,
    /// as the writes that made them found them (copies into part of the
    /// tensor: the trainer packs each layer's gradient into one buffer
    /// every CPU step). Where they cover the whole tensor, its range is
    /// theirs, with no scan.
    parts: Vec<(usize, usize, (f64, f64))>,
    /// `(partner version, factor)`: `self * self <= factor * partner`
    /// holds element by element.
    holds: Vec<(u64, f64)>,
}

impl Default for HostFacts {
    fn default() -> HostFacts {
        HostFacts { version: fresh(), range: OnceLock::new(), parts: Vec::new(), holds: Vec::new() }
    }
}

/// The union of two ranges (NaN in either: NaN; `f64::min` would drop
/// it).
fn union(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    if a.0.is_nan() || a.1.is_nan() || b.0.is_nan() || b.1.is_nan() {
        (f64::NAN, f64::NAN)
    } else {
        (a.0.min(b.0), a.1.max(b.1))
    }
}

impl HostFacts {
    /// The data is being written: nothing known holds any more.
    pub(crate) fn written(&mut self) {
        *self = HostFacts::default();
    }

    /// Elements `at..at + len` were written with values in `range`
    /// (`None`: not known); what was known of the rest still holds, but
    /// not the whole range or the relations.
    /// (`n`: the tensor's length.)
    pub(crate) fn written_part(&mut self, at: usize, len: usize, n: usize, range: Option<(f64, f64)>) {
        // A known whole range is a part over everything (kept as the range
        // alone until a part is written: no allocation a launch).
        let mut parts = std::mem::take(&mut self.parts);
        if let (true, Some(whole)) = (parts.is_empty() && n > 0, self.known_range()) {
            parts.push((0, n, whole));
        }
        self.written();
        let end = at + len;
        // What a part keeps outside the write keeps the part's range: the
        // range of all of it, so it holds the remnant's values (exactly,
        // for the zeros between the packed gradient's pieces; else wider,
        // which only ever makes a bound larger or a launch uncovered,
        // never a launch covered that is not).
        let mut kept = Vec::with_capacity(parts.len() + 2);
        for (s, e, r) in parts {
            if e <= at || end <= s {
                kept.push((s, e, r));
                continue;
            }
            if s < at {
                kept.push((s, at, r));
            }
            if end < e {
                kept.push((end, e, r));
            }
        }
        self.parts = kept;
        if let Some(r) = range.filter(|_| len > 0) {
            let i = self.parts.partition_point(|&(s, _, _)| s < at);
            self.parts.insert(i, (at, end, r));
        }
    }

    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The range of `buf` (this tensor's data): known, or the union of
    /// parts that cover it, or scanned, on the first call since the last
    /// write.
    pub(crate) fn range(&self, buf: &Buf) -> Option<(f64, f64)> {
        *self.range.get_or_init(|| self.covered(buf.len()).or_else(|| super::range_of(buf)))
    }

    /// The range, if known without a scan.
    pub(crate) fn known_range(&self) -> Option<(f64, f64)> {
        self.range.get().copied().flatten()
    }

    /// The union of the parts' ranges, if they cover `0..n` end to end.
    fn covered(&self, n: usize) -> Option<(f64, f64)> {
        let mut next = 0;
        let mut range = (f64::INFINITY, f64::NEG_INFINITY);
        for &(s, e, r) in &self.parts {
            if s != next {
                return None;
            }
            next = e;
            range = union(range, r);
        }
        (next == n && n > 0).then_some(range)
    }

    /// The whole data was written with values in `range` (observed by
    /// the writer).
    pub(crate) fn observed(&mut self, range: (f64, f64)) {
        self.written();
        self.range = OnceLock::from(Some(range));
    }
    /// Is `self * self <= factor * partner` known to hold against the
    /// partner's data as it is now (`partner`: its version)?
    pub(crate) fn holds_against(&self, partner: u64, factor: f64) -> bool {
        self.holds.contains(&(partner, factor))
    }

    /// The writer checked `self * self <= factor * partner` on every pair
    /// it stored.
    pub(crate) fn held_against(&mut self, partner: u64, factor: f64) {
        self.holds.push((partner, factor));
    }
}
