//! Closed intervals of reals with outward rounding: the range analysis of
//! exact values. Every endpoint computed here is rounded away from the
//! interval's inside, so the real result always lies inside.
//!
//! Transcendental endpoints come from the host's f64 `exp`, `tanh` and `ln`
//! (accurate to about 1 ulp); they are widened by a relative `2^-48`, far
//! more than that error.

use super::{down, up};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

/// Widening of a libm result: relative 2^-48, plus the smallest normal.
fn widen_up(x: f64) -> f64 {
    up(x + x.abs() * 2f64.powi(-48) + f64::MIN_POSITIVE)
}
fn widen_down(x: f64) -> f64 {
    down(x - x.abs() * 2f64.powi(-48) - f64::MIN_POSITIVE)
}

impl Interval {
    pub fn new(lo: f64, hi: f64) -> Interval {
        debug_assert!(lo <= hi, "empty interval [{}, {}]", lo, hi);
        Interval { lo, hi }
    }
    pub fn point(x: f64) -> Interval {
        Interval { lo: x, hi: x }
    }
    pub fn is_finite(&self) -> bool {
        self.lo.is_finite() && self.hi.is_finite()
    }
    /// Largest magnitude `max |x|`.
    pub fn mag(&self) -> f64 {
        self.lo.abs().max(self.hi.abs())
    }
    /// Smallest magnitude `min |x|` (0 when the interval holds 0).
    pub fn mig(&self) -> f64 {
        if self.lo <= 0.0 && self.hi >= 0.0 {
            0.0
        } else {
            self.lo.abs().min(self.hi.abs())
        }
    }
    pub fn contains_zero(&self) -> bool {
        self.lo <= 0.0 && self.hi >= 0.0
    }
    pub fn nonneg(&self) -> bool {
        self.lo >= 0.0
    }
    pub fn nonpos(&self) -> bool {
        self.hi <= 0.0
    }
    /// Every element has one sign (zero allowed).
    pub fn one_signed(&self) -> bool {
        self.nonneg() || self.nonpos()
    }
    pub fn hull(&self, o: &Interval) -> Interval {
        Interval { lo: self.lo.min(o.lo), hi: self.hi.max(o.hi) }
    }
    /// The intersection, or `self` if they are disjoint (callers intersect
    /// with facts known to hold, so disjointness cannot happen).
    pub fn meet(&self, o: &Interval) -> Interval {
        let (lo, hi) = (self.lo.max(o.lo), self.hi.min(o.hi));
        if lo <= hi {
            Interval { lo, hi }
        } else {
            *self
        }
    }
    pub fn width(&self) -> f64 {
        up(self.hi - self.lo)
    }

    pub fn neg(&self) -> Interval {
        Interval { lo: -self.hi, hi: -self.lo }
    }
    pub fn abs(&self) -> Interval {
        Interval { lo: self.mig(), hi: self.mag() }
    }
    pub fn add(&self, o: &Interval) -> Interval {
        Interval { lo: down(self.lo + o.lo), hi: up(self.hi + o.hi) }
    }
    pub fn sub(&self, o: &Interval) -> Interval {
        Interval { lo: down(self.lo - o.hi), hi: up(self.hi - o.lo) }
    }
    pub fn mul(&self, o: &Interval) -> Interval {
        let p = [self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi];
        let lo = p.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Interval { lo: down(lo), hi: up(hi) }
    }
    /// `self / o`; `None` when `o` holds zero.
    pub fn div(&self, o: &Interval) -> Option<Interval> {
        if o.contains_zero() {
            return None;
        }
        let q = [self.lo / o.lo, self.lo / o.hi, self.hi / o.lo, self.hi / o.hi];
        let lo = q.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = q.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Interval { lo: down(lo), hi: up(hi) })
    }
    /// `n * self` for a count `n` in `[n_lo, n_hi]` (non-negative).
    pub fn times_count(&self, n_lo: f64, n_hi: f64) -> Interval {
        self.mul(&Interval::new(n_lo, n_hi))
    }
    pub fn max(&self, o: &Interval) -> Interval {
        Interval { lo: self.lo.max(o.lo), hi: self.hi.max(o.hi) }
    }
    pub fn min(&self, o: &Interval) -> Interval {
        Interval { lo: self.lo.min(o.lo), hi: self.hi.min(o.hi) }
    }
    pub fn exp(&self) -> Interval {
        Interval { lo: widen_down(self.lo.exp()).max(0.0), hi: widen_up(self.hi.exp()) }
    }
    pub fn tanh(&self) -> Interval {
        Interval { lo: widen_down(self.lo.tanh()).max(-1.0), hi: widen_up(self.hi.tanh()).min(1.0) }
    }
    /// The logistic function `1 / (1 + e^-x)`, increasing.
    pub fn logistic(&self) -> Interval {
        let f = |x: f64| 1.0 / (1.0 + (-x).exp());
        Interval { lo: widen_down(f(self.lo)).max(0.0), hi: widen_up(f(self.hi)).min(1.0) }
    }
    /// `None` unless the interval is non-negative.
    pub fn sqrt(&self) -> Option<Interval> {
        if self.lo < 0.0 {
            return None;
        }
        Some(Interval { lo: down(self.lo.sqrt()), hi: up(self.hi.sqrt()) })
    }
    /// `1/sqrt(x)`; `None` unless the interval is positive.
    pub fn rsqrt(&self) -> Option<Interval> {
        if self.lo <= 0.0 {
            return None;
        }
        Some(Interval { lo: down(down(1.0 / up(self.hi.sqrt()))), hi: up(up(1.0 / down(self.lo.sqrt()))) })
    }
    /// `ln(x)`; `None` unless the interval is positive.
    pub fn ln(&self) -> Option<Interval> {
        if self.lo <= 0.0 {
            return None;
        }
        Some(Interval { lo: widen_down(self.lo.ln()), hi: widen_up(self.hi.ln()) })
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:.4e}, {:.4e}]", self.lo, self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random points of random intervals: every operation's result lies in
    /// the operation's interval.
    #[test]
    fn operations_enclose_their_points() {
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut r = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..20000 {
            let (a, b) = ((r() - 0.5) * 20.0, (r() - 0.5) * 20.0);
            let x = Interval::new(a.min(b), a.max(b));
            let (c, d) = ((r() - 0.3) * 8.0, (r() - 0.3) * 8.0);
            let y = Interval::new(c.min(d), c.max(d));
            let px = x.lo + (x.hi - x.lo) * r();
            let py = y.lo + (y.hi - y.lo) * r();
            let inside = |i: Interval, v: f64| i.lo <= v && v <= i.hi;
            assert!(inside(x.add(&y), px + py));
            assert!(inside(x.sub(&y), px - py));
            assert!(inside(x.mul(&y), px * py));
            if let Some(q) = x.div(&y) {
                assert!(inside(q, px / py));
            }
            assert!(inside(x.exp(), px.exp()));
            assert!(inside(x.tanh(), px.tanh()));
            assert!(inside(x.abs(), px.abs()));
            if let Some(s) = x.sqrt() {
                assert!(inside(s, px.sqrt()));
            }
            if let Some(s) = x.rsqrt() {
                assert!(inside(s, 1.0 / px.sqrt()));
            }
            if let Some(s) = x.ln() {
                assert!(inside(s, px.ln()));
            }
        }
    }
}
