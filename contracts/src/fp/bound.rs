//! Error bounds and their propagation.
//!
//! An [`AVal`] describes one value of a kernel: the range of its exact
//! (real-number) value and a bound on how far the computed value can be
//! from it, `|computed - exact| <= abs + rel |exact|`. The bound is kept as
//! a sum of [`Contribution`]s, one per source of error (a rounding, a
//! library call, a summation), so that a report can say which terms
//! dominate; the total is the sum of the parts, always.
//!
//! The rules are rigorous, not first-order: products keep their
//! second-order term (as a contribution of its own), quotients, square
//! roots and exponentials carry exact factors such as `1/(1 - rho)` and
//! `(e^D - 1)/D`. The price is a bound slightly above the first-order one;
//! the report shows the second-order share, which is tiny in practice.

use super::format::Format;
use super::interval::Interval;
use super::{add_up, div_up, down, mul_up, up};
use std::fmt;

/// An index into the caller's table of error sources.
pub type SourceId = usize;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Contribution {
    pub source: SourceId,
    pub abs: f64,
    pub rel: f64,
}

/// A bound `sum over parts of (abs + rel |exact|)`, sorted by source.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrBound {
    pub parts: Vec<Contribution>,
}

/// Why no bound could be derived, in words (the caller adds where).
#[derive(Clone, Debug, PartialEq)]
pub struct FpError(pub String);

impl fmt::Display for FpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ErrBound {
    pub fn zero() -> ErrBound {
        ErrBound::default()
    }
    pub fn is_zero(&self) -> bool {
        self.parts.iter().all(|c| c.abs == 0.0 && c.rel == 0.0)
    }
    pub fn single(source: SourceId, abs: f64, rel: f64) -> ErrBound {
        ErrBound::zero().with(source, abs, rel)
    }

    /// Add `abs + rel |exact|` to `source`'s part.
    pub fn with(mut self, source: SourceId, abs: f64, rel: f64) -> ErrBound {
        if abs == 0.0 && rel == 0.0 {
            return self;
        }
        match self.parts.binary_search_by_key(&source, |c| c.source) {
            Ok(i) => {
                self.parts[i].abs = add_up(self.parts[i].abs, abs);
                self.parts[i].rel = add_up(self.parts[i].rel, rel);
            }
            Err(i) => self.parts.insert(i, Contribution { source, abs, rel }),
        }
        self
    }

    /// The sum of two bounds (part by part).
    pub fn plus(&self, o: &ErrBound) -> ErrBound {
        o.parts.iter().fold(self.clone(), |acc, c| acc.with(c.source, c.abs, c.rel))
    }

    /// Part-by-part maximum: a bound on `max(e1, e2)` whenever `self` bounds
    /// `e1` and `o` bounds `e2` relative to the same exact value.
    pub fn join(&self, o: &ErrBound) -> ErrBound {
        let mut out = self.clone();
        for c in &o.parts {
            match out.parts.binary_search_by_key(&c.source, |x| x.source) {
                Ok(i) => {
                    out.parts[i].abs = out.parts[i].abs.max(c.abs);
                    out.parts[i].rel = out.parts[i].rel.max(c.rel);
                }
                Err(i) => out.parts.insert(i, *c),
            }
        }
        out
    }

    /// Every part's `abs` times `fa` and `rel` times `fr`.
    pub fn scaled(&self, fa: f64, fr: f64) -> ErrBound {
        ErrBound { parts: self.parts.iter().map(|c| Contribution { source: c.source, abs: mul_up(c.abs, fa), rel: mul_up(c.rel, fr) }).collect() }
    }

    /// Relative parts made absolute for values of magnitude at most `mag`.
    pub fn absolutized(&self, mag: f64) -> ErrBound {
        ErrBound { parts: self.parts.iter().map(|c| Contribution { source: c.source, abs: add_up(c.abs, mul_up(c.rel, mag)), rel: 0.0 }).collect() }
    }

    /// Absolute parts made relative for values of magnitude at least `mig > 0`.
    pub fn relativized(&self, mig: f64) -> ErrBound {
        ErrBound { parts: self.parts.iter().map(|c| Contribution { source: c.source, abs: 0.0, rel: add_up(c.rel, div_up(c.abs, mig)) }).collect() }
    }

    /// `(sum of abs, sum of rel)`.
    pub fn total(&self) -> (f64, f64) {
        self.parts.iter().fold((0.0, 0.0), |(a, r), c| (add_up(a, c.abs), add_up(r, c.rel)))
    }

    /// The bound at an exact value of magnitude `mag`.
    pub fn at(&self, mag: f64) -> f64 {
        let (a, r) = self.total();
        // No relative part adds nothing, even at an infinite magnitude (a
        // range reaching -inf: `max(e) select(.., -inf, p)`), where the
        // product would be 0 * inf = NaN.
        if r == 0.0 {
            return a;
        }
        add_up(a, mul_up(r, mag))
    }
}

/// A value: the range of its exact value and the bound on its error.
#[derive(Clone, Debug, PartialEq)]
pub struct AVal {
    pub range: Interval,
    pub err: ErrBound,
}

/// Upper bounds on the logistic function's slope `s'(x) = 1 / (4
/// cosh^2(x / 2))` and on `s'(x) |x|` over `r`. The slope falls as `|x|`
/// grows; `s'(x) |x|` rises to about 0.224 near `|x| = 2.4` and then falls
/// (it is below `|x| e^-|x|`). The second is bounded piecewise: on each of
/// 1024 pieces `[p, q]` of `|x|`'s range up to 64, by `q s'(p)`, and beyond
/// 64 by `64 e^-64`. Every step rounds up, and `cosh` is taken `2^-48`
/// lower than computed (libm's error is far smaller).
pub fn logistic_slopes(r: Interval) -> (f64, f64) {
    let slope_at = |m: f64| -> f64 {
        let c = down((m / 2.0).cosh() * (1.0 - 2f64.powi(-48)));
        up(1.0 / down(4.0 * down(c * c))).min(0.25)
    };
    let (m, big) = (r.mig(), r.mag());
    let s0 = slope_at(m);
    let top = big.min(64.0);
    let mut s1 = if big > 64.0 { up(64.0 * up((-64f64).exp() * (1.0 + 2f64.powi(-48)))) } else { 0.0 };
    if top > m {
        const PIECES: usize = 1024;
        let w = (top - m) / PIECES as f64;
        for i in 0..PIECES {
            let p = down(m + w * i as f64).max(m);
            let q = if i + 1 == PIECES { top } else { up(m + w * (i + 1) as f64) };
            s1 = s1.max(mul_up(q, slope_at(p)));
        }
    } else {
        s1 = s1.max(mul_up(top, s0));
    }
    (s0, s1)
}

/// `gamma_h = h u / (1 - h u)`: the relative error of `h` chained roundings.
pub fn gamma(h: f64, u: f64) -> Result<f64, FpError> {
    let hu = mul_up(h, u);
    if hu >= 0.5 {
        return Err(FpError(format!("{} chained roundings of unit roundoff {:e} admit no useful bound", h, u)));
    }
    Ok(div_up(hu, down(1.0 - hu)))
}

impl AVal {
    /// A value computed without error (an input, an exact conversion).
    pub fn exact(range: Interval) -> AVal {
        AVal { range, err: ErrBound::zero() }
    }

    /// Every value the exact or the computed value can take.
    pub fn reach(&self) -> Interval {
        let e = self.err.at(self.range.mag());
        Interval::new(down(self.range.lo - e), up(self.range.hi + e))
    }

    /// Largest magnitude the computed value can take.
    pub fn computed_mag(&self) -> f64 {
        add_up(self.range.mag(), self.err.at(self.range.mag()))
    }

    /// One rounding (or library call) with relative error `rel` and
    /// absolute error `abs` on the computed value, into `fmt`:
    /// `|fl(v') - v| <= (1 + rel) |v' - v| + rel |v| + abs`.
    pub fn rounded(&self, fmt: Format, rel: f64, abs: f64, source: SourceId) -> Result<AVal, FpError> {
        let reach = self.computed_mag();
        if reach >= fmt.overflow_threshold() || !reach.is_finite() {
            return Err(FpError(format!("may overflow {}: the value reaches {:.4e} (largest finite {:.4e})", fmt, reach, fmt.max_finite())));
        }
        let f = add_up(1.0, rel);
        Ok(AVal { range: self.range, err: self.err.scaled(f, f).with(source, abs, rel) })
    }

    /// Rounding of an arithmetic result into `fmt` (round to nearest).
    pub fn round_to(&self, fmt: Format, source: SourceId) -> Result<AVal, FpError> {
        self.rounded(fmt, fmt.unit_roundoff(), fmt.subnormal_abs(), source)
    }

    pub fn neg(&self) -> AVal {
        AVal { range: self.range.neg(), err: self.err.clone() }
    }

    pub fn abs(&self) -> AVal {
        AVal { range: self.range.abs(), err: self.err.clone() }
    }

    /// The exact sum; relative parts survive where both operands have one
    /// sign (then `|a| <= |a + b|`).
    pub fn add(&self, o: &AVal) -> AVal {
        let same_sign = (self.range.nonneg() && o.range.nonneg()) || (self.range.nonpos() && o.range.nonpos());
        let ea = if same_sign { self.err.clone() } else { self.err.absolutized(self.range.mag()) };
        let eb = if same_sign { o.err.clone() } else { o.err.absolutized(o.range.mag()) };
        AVal { range: self.range.add(&o.range), err: ea.plus(&eb) }
    }

    pub fn sub(&self, o: &AVal) -> AVal {
        self.add(&o.neg())
    }

    /// The exact product: `|a'b' - ab| <= |b| e_a + |a| e_b + e_a e_b`, the
    /// last term charged to `second_order`.
    pub fn mul(&self, o: &AVal, second_order: SourceId) -> AVal {
        let (ma, mb) = (self.range.mag(), o.range.mag());
        let side = |x: &AVal, other_mag: f64| ErrBound { parts: x.err.parts.iter().map(|c| Contribution { source: c.source, abs: mul_up(c.abs, other_mag), rel: c.rel }).collect() };
        let (ea, eb) = (side(self, mb), side(o, ma));
        let mut err = ea.plus(&eb);
        let ((aa, ra), (ab, rb)) = (self.err.total(), o.err.total());
        let cross_abs = add_up(add_up(mul_up(aa, ab), mul_up(mul_up(aa, rb), mb)), mul_up(mul_up(ra, ab), ma));
        err = err.with(second_order, cross_abs, mul_up(ra, rb));
        AVal { range: self.range.mul(&o.range), err }
    }

    /// The exact quotient. With `rho` the divisor's relative error
    /// (`< 1`), `|a'/b' - a/b| <= (e_a / |b| + |a/b| e_b/|b|) / (1 - rho)`.
    pub fn div(&self, o: &AVal) -> Result<AVal, FpError> {
        let range = self.range.div(&o.range).ok_or_else(|| FpError(format!("division by a value whose range {} holds zero", o.range)))?;
        let mig = o.range.mig();
        let eb = o.err.relativized(mig);
        let rho = eb.total().1;
        if rho >= 0.5 {
            return Err(FpError(format!("the divisor's error may reach {:.2}% of its size", rho * 100.0)));
        }
        let q = div_up(1.0, down(1.0 - rho));
        let ea = ErrBound { parts: self.err.parts.iter().map(|c| Contribution { source: c.source, abs: mul_up(div_up(c.abs, mig), q), rel: mul_up(c.rel, q) }).collect() };
        Ok(AVal { range, err: ea.plus(&eb.scaled(0.0, q)) })
    }

    /// The exact error of the input spread over its parts: each part's
    /// share of `D = e(max |x|)`, for rules of the form `g(D) <= f D`.
    fn shares(&self) -> (f64, Vec<(SourceId, f64)>) {
        let mag = self.range.mag();
        let parts: Vec<(SourceId, f64)> = self.err.parts.iter().map(|c| (c.source, add_up(c.abs, mul_up(c.rel, mag)))).collect();
        (parts.iter().fold(0.0, |s, p| add_up(s, p.1)), parts)
    }

    /// `exp` of the value, before the library's own error:
    /// `|e^{x'} - e^x| <= e^x (e^D - 1)`, spread as `(e^D - 1)/D` per unit of D.
    pub fn exp(&self) -> AVal {
        let (d, parts) = self.shares();
        let range = self.range.exp();
        if d == 0.0 {
            return AVal::exact(range);
        }
        let f = div_up(up(up(d.exp_m1()) * (1.0 + 2f64.powi(-48))), d);
        let err = parts.into_iter().fold(ErrBound::zero(), |e, (s, di)| e.with(s, 0.0, mul_up(di, f)));
        AVal { range, err }
    }

    /// `tanh`: the slope is at most `sech^2` of the smallest magnitude the
    /// exact or computed argument can take.
    pub fn tanh(&self) -> AVal {
        let (d, parts) = self.shares();
        let range = self.range.tanh();
        if d == 0.0 {
            return AVal::exact(range);
        }
        let reach = Interval::new(down(self.range.lo - d), up(self.range.hi + d));
        let c = reach.mig().cosh();
        let slope = up(up(1.0 / down(c * c)) * (1.0 + 2f64.powi(-48))).min(1.0);
        let err = parts.into_iter().fold(ErrBound::zero(), |e, (s, di)| e.with(s, mul_up(di, slope), 0.0));
        AVal { range, err }
    }

    /// The logistic function `s(x) = 1 / (1 + e^-x)` of the value, before
    /// the roundings of its own evaluation: by the mean value theorem
    /// `|s(x') - s(x)| = s'(xi) |x' - x|` for some `xi` in the reach, and
    /// with `|x| <= |xi| + D` each part's `abs + rel |x|` costs at most
    /// `abs S0 + rel (S1 + D S0)`, where `S0` and `S1` bound `s'(xi)` and
    /// `s'(xi) |xi|` over the reach ([`logistic_slopes`]). Where `x` is
    /// large, so that its relative error is large in absolute terms, the
    /// slope is tiny (`s'(xi) |xi| <= 0.224`): a relative error of `x` costs
    /// at most about a quarter of itself, not `|x|` times itself as it would
    /// through `exp(-x)` and a division. The result's error is absolute.
    pub fn logistic(&self) -> AVal {
        let range = self.range.logistic();
        if self.err.is_zero() {
            return AVal::exact(range);
        }
        let d = self.err.at(self.range.mag());
        let (s0, s1) = logistic_slopes(self.reach());
        let per_rel = add_up(s1, mul_up(d, s0));
        let err = ErrBound { parts: self.err.parts.iter().map(|c| Contribution { source: c.source, abs: add_up(mul_up(c.abs, s0), mul_up(c.rel, per_rel)), rel: 0.0 }).collect() };
        AVal { range, err }
    }

    /// The input's error as a relative one, for functions defined on
    /// positive values: `rho < 1/2` and the computed value positive.
    fn relative_input(&self, what: &str) -> Result<(f64, ErrBound), FpError> {
        let mig = self.range.mig();
        if self.range.lo <= 0.0 {
            return Err(FpError(format!("{} of a value whose range {} is not positive", what, self.range)));
        }
        let e = self.err.relativized(mig);
        let rho = e.total().1;
        if rho >= 0.5 {
            return Err(FpError(format!("{} of a value whose error may reach {:.2}% of it", what, rho * 100.0)));
        }
        Ok((rho, e))
    }

    /// `sqrt`: `|sqrt(1+t) - 1| <= |t| / (1 + sqrt(1 - rho))`. At a range
    /// that reaches zero: `|sqrt(x') - sqrt(x)| <= sqrt(|x' - x|)`.
    pub fn sqrt(&self) -> Result<AVal, FpError> {
        let range = self.range.sqrt().ok_or_else(|| FpError(format!("square root of a value whose range {} holds negative numbers", self.range)))?;
        if self.err.is_zero() {
            return Ok(AVal::exact(range));
        }
        if self.range.lo == 0.0 {
            let d = self.err.at(self.range.mag());
            return Err(FpError(format!("square root at zero of a value with error up to {:.3e}: the computed argument may be negative", d)));
        }
        let (rho, e) = self.relative_input("square root")?;
        let f = div_up(1.0, down(1.0 + down(down(1.0 - rho).sqrt())));
        Ok(AVal { range, err: e.scaled(0.0, f) })
    }

    /// `1/sqrt`: `|(1+t)^(-1/2) - 1| <= ((1 - rho)^(-1/2) - 1)/rho * |t|`.
    pub fn rsqrt(&self) -> Result<AVal, FpError> {
        let range = self.range.rsqrt().ok_or_else(|| FpError(format!("1/sqrt of a value whose range {} is not positive", self.range)))?;
        if self.err.is_zero() {
            return Ok(AVal::exact(range));
        }
        let (rho, e) = self.relative_input("1/sqrt")?;
        let g = up(up(1.0 / down(down(1.0 - rho).sqrt())) - 1.0);
        let f = if rho > 0.0 { div_up(g, rho) } else { 0.5 };
        Ok(AVal { range, err: e.scaled(0.0, up(f * (1.0 + 2f64.powi(-40)))) })
    }

    /// `ln`: `|ln(1+t)| <= -ln(1 - rho)/rho * |t|` (absolute).
    pub fn ln(&self) -> Result<AVal, FpError> {
        let range = self.range.ln().ok_or_else(|| FpError(format!("logarithm of a value whose range {} is not positive", self.range)))?;
        if self.err.is_zero() {
            return Ok(AVal::exact(range));
        }
        let (rho, e) = self.relative_input("logarithm")?;
        let f = if rho > 0.0 { div_up(up(-(down(1.0 - rho).ln())) * (1.0 + 2f64.powi(-40)), rho) } else { 1.0 };
        let err = ErrBound { parts: e.parts.iter().map(|c| Contribution { source: c.source, abs: mul_up(c.rel, f), rel: 0.0 }).collect() };
        Ok(AVal { range, err })
    }

    /// `max(a, b)` (`is_max`) or `min(a, b)`: `|max(a',b') - max(a,b)| <=
    /// max(e_a, e_b)`; relative parts survive where every operand is no
    /// larger in magnitude than the result (all non-negative for max,
    /// all non-positive for min), and where all operands have one sign
    /// (see `min_of`).
    pub fn extremum(&self, o: &AVal, is_max: bool) -> AVal {
        if is_max {
            // max(a, b) = -min(-a, -b); negation keeps errors.
            return self.neg().min_of(&o.neg()).neg();
        }
        self.min_of(o)
    }

    fn min_of(&self, o: &AVal) -> AVal {
        // One operand always wins, computed and exact alike: it is the result.
        let (ra, rb) = (self.reach(), o.reach());
        if ra.hi < rb.lo {
            return self.clone();
        }
        if rb.hi < ra.lo {
            return o.clone();
        }
        let range = self.range.min(&o.range);
        if self.range.nonpos() && o.range.nonpos() {
            return AVal { range, err: self.err.join(&o.err) };
        }
        // Both non-negative, each within `rho_x x + alpha_x` with rho_x < 1:
        // min(a', b') <= min(a(1+rho) + alpha, b(1+rho) + alpha) =
        // min(a, b)(1 + rho) + alpha, and likewise from below (x(1 - rho)
        // grows with x), rho and alpha the larger operand's. So relative
        // parts stay relative to the result.
        if self.range.nonneg() && o.range.nonneg() && self.err.total().1 < 1.0 && o.err.total().1 < 1.0 {
            return AVal { range, err: self.err.join(&o.err) };
        }
        // An operand's error matters only where it (computed or exact) is
        // chosen, hence at most the other's largest reach: b <= a_max in
        // exact terms, or b' <= a'_max, so b <= (a_max + A_b) / (1 - R_b).
        let capped = |x: &AVal, other: &Interval| -> f64 {
            let (ab, rb) = x.err.total();
            if rb >= 1.0 {
                return x.range.mag();
            }
            let top = div_up(add_up(other.hi, ab), down(1.0 - rb));
            let clipped = Interval { lo: x.range.lo, hi: x.range.hi.min(top).max(x.range.lo) };
            clipped.mag()
        };
        let ea = self.err.absolutized(capped(self, &rb));
        let eb = o.err.absolutized(capped(o, &ra));
        AVal { range, err: ea.join(&eb) }
    }

    /// `select(c, a, b)` with a condition computed exactly: the result is
    /// one operand, computed and exact alike, so its error is that
    /// operand's (relative to itself).
    pub fn select_exact(&self, o: &AVal) -> AVal {
        AVal { range: self.range.hull(&o.range), err: self.err.join(&o.err) }
    }

    /// The worst-case sum of `n` terms (`n` in `[n_lo, n_hi]`), each like
    /// `self`, where no term passes through more than `height` rounded
    /// additions in `fmt` (the summation tree's height: the term count for
    /// a sequential loop, fewer for a tree):
    /// `|s' - s| <= (1 + g) sum e_i + g sum |t_i|` with `g = gamma(height)`.
    /// Terms of one sign make both sums relative to `|s|`.
    pub fn sum(&self, n_lo: f64, n_hi: f64, height: f64, fmt: Format, source: SourceId) -> Result<AVal, FpError> {
        let g = gamma(height, fmt.unit_roundoff())?;
        let range = self.range.times_count(n_lo, n_hi);
        let one_signed = self.range.one_signed();
        let f = add_up(1.0, g);
        let eta = mul_up(height, fmt.subnormal_abs());
        let err = if one_signed {
            self.err.scaled(mul_up(n_hi, f), f).with(source, eta, g)
        } else {
            let mag = self.range.mag();
            self.err.absolutized(mag).scaled(mul_up(n_hi, f), 0.0).with(source, add_up(mul_up(mul_up(g, n_hi), mag), eta), 0.0)
        };
        let out = AVal { range, err };
        let reach = out.computed_mag();
        if reach >= fmt.overflow_threshold() || !reach.is_finite() {
            return Err(FpError(format!("the sum may overflow {}: it reaches {:.4e}", fmt, reach)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_value_reaching_minus_infinity_keeps_a_defined_range() {
        // `max(e) select(e == i0, -inf, p)` (moe.tk's top2): the terms'
        // range reaches -inf with no error; the maximum must stay exact
        // and its range an interval, not [NaN, NaN] (0 * inf).
        let t = AVal::exact(Interval::new(f64::NEG_INFINITY, 1.0));
        assert_eq!(t.err.at(f64::INFINITY), 0.0);
        let m = t.extremum(&t, true);
        assert_eq!((m.range.lo, m.range.hi), (f64::NEG_INFINITY, 1.0));
        assert_eq!(m.err.at(m.range.mag()), 0.0);
    }

    fn sample(r: &mut impl FnMut() -> f64, i: &Interval) -> f64 {
        i.lo + (i.hi - i.lo) * r()
    }

    fn rng() -> impl FnMut() -> f64 {
        let mut s = 0x2545f4914f6cdd1du64;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Perturb an exact value by at most its bound, in a random direction.
    fn perturb(r: &mut impl FnMut() -> f64, v: &AVal, x: f64) -> f64 {
        let e = v.err.at(x.abs());
        x + e * (2.0 * r() - 1.0)
    }

    /// Each rule holds for random values perturbed within their bounds:
    /// a check of the algebra, independent of any kernel.
    #[test]
    fn rules_bound_perturbed_operations() {
        let mut r = rng();
        for _ in 0..20000 {
            let a = AVal { range: Interval::new(0.5, 4.0), err: ErrBound::single(0, 1e-3 * r(), 1e-3 * r()) };
            let b = AVal { range: Interval::new(-3.0, 2.0), err: ErrBound::single(1, 1e-3 * r(), 1e-3 * r()) };
            let (x, y) = (sample(&mut r, &a.range), sample(&mut r, &b.range));
            let (x2, y2) = (perturb(&mut r, &a, x), perturb(&mut r, &b, y));
            let check = |v: AVal, exact: f64, computed: f64, what: &str| {
                assert!((computed - exact).abs() <= v.err.at(exact.abs()) * (1.0 + 1e-12), "{}: {} vs {}", what, computed, exact);
                assert!(v.range.lo <= exact && exact <= v.range.hi, "{} range", what);
            };
            check(a.add(&b), x + y, x2 + y2, "add");
            check(a.sub(&b), x - y, x2 - y2, "sub");
            check(a.mul(&b, 9), x * y, x2 * y2, "mul");
            check(b.div(&a).unwrap(), y / x, y2 / x2, "div");
            check(b.exp(), y.exp(), y2.exp(), "exp");
            check(b.tanh(), y.tanh(), y2.tanh(), "tanh");
            check(a.sqrt().unwrap(), x.sqrt(), x2.sqrt(), "sqrt");
            check(a.rsqrt().unwrap(), 1.0 / x.sqrt(), 1.0 / x2.sqrt(), "rsqrt");
            check(a.ln().unwrap(), x.ln(), x2.ln(), "ln");
            check(a.extremum(&b, true), x.max(y), x2.max(y2), "max");
        }
    }

    /// The logistic rule on arguments whose relative error is large in
    /// absolute terms (`|x|` up to 40): the perturbed logistic stays within
    /// the bound, and the bound is far below `|x|` times the relative error.
    #[test]
    fn the_logistic_rule_bounds_perturbed_arguments() {
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        let mut r = rng();
        for range in [Interval::new(-40.0, 40.0), Interval::new(2.0, 3.0), Interval::new(-0.5, 0.25), Interval::new(30.0, 31.0)] {
            let v = AVal { range, err: ErrBound::single(0, 1e-6, 1e-4) };
            let out = v.logistic();
            // The slope is at most 1/4 and s'(x)|x| at most 0.2239 (the
            // piecewise bound adds up to 3%).
            assert!(out.err.at(0.0) <= 0.25 * 1e-6 + 1.04 * 0.2241e-4 + 1e-7, "{:?}", out.err);
            for _ in 0..20000 {
                let x = sample(&mut r, &range);
                let x2 = perturb(&mut r, &v, x);
                // Near 1, through the complement (f64 would round the difference away).
                let diff = if x > 0.0 { s(-x) - s(-x2) } else { s(x2) - s(x) };
                assert!(diff.abs() <= out.err.at(s(x)), "s({}) vs s({}): {:?}", x2, x, out.err);
                assert!(out.range.lo <= s(x) && s(x) <= out.range.hi);
            }
        }
    }

    /// The slope bounds hold at every sampled point of their interval, and
    /// are tight (within 3%) where the interval is wide.
    #[test]
    fn logistic_slopes_bound_the_slope() {
        let slope = |x: f64| { let e = (-x.abs()).exp(); e / ((1.0 + e) * (1.0 + e)) };
        for (lo, hi) in [(-32.0, 32.0), (0.0, 1.0), (3.0, 70.0), (-80.0, -65.0), (2.4, 2.4), (-1.0, 5.0)] {
            let (s0, s1) = logistic_slopes(Interval::new(lo, hi));
            let (mut m0, mut m1) = (0.0f64, 0.0f64);
            for i in 0..=100000 {
                let x = lo + (hi - lo) * i as f64 / 100000.0;
                m0 = m0.max(slope(x));
                m1 = m1.max(slope(x) * x.abs());
            }
            assert!(s0 >= m0 && s1 >= m1, "[{}, {}]: {} {} against {} {}", lo, hi, s0, s1, m0, m1);
            assert!(s0 <= m0 * 1.03 + 1e-300 && (s1 <= m1 * 1.03 + 1e-25), "[{}, {}]: {} {} against {} {}", lo, hi, s0, s1, m0, m1);
        }
    }

    /// Recursive f32 summation of terms of mixed sign against the bound.
    #[test]
    fn sum_bounds_real_f32_summation() {
        let mut r = rng();
        let t = AVal::exact(Interval::new(-1.0, 1.0));
        for n in [1usize, 7, 100, 4096] {
            let s = t.sum(n as f64, n as f64, n as f64, Format::F32, 0).unwrap();
            for _ in 0..20 {
                let xs: Vec<f32> = (0..n).map(|_| (2.0 * r() - 1.0) as f32).collect();
                let exact: f64 = xs.iter().map(|x| *x as f64).sum();
                let got = xs.iter().fold(0f32, |a, x| a + x) as f64;
                assert!((got - exact).abs() <= s.err.at(exact.abs()));
            }
        }
        let pos = AVal::exact(Interval::new(0.0, 1.0));
        let s = pos.sum(1.0, 1000.0, 1000.0, Format::F32, 0).unwrap();
        assert!(s.err.parts[0].abs >= 1000.0 * Format::F32.subnormal_abs());
        assert!(s.err.parts[0].rel > 0.0, "one-signed terms keep a relative bound");
    }

    #[test]
    fn overflow_and_bad_divisors_are_refused() {
        let big = AVal::exact(Interval::new(0.0, 70000.0));
        assert!(big.round_to(Format::F16, 0).is_err());
        assert!(big.round_to(Format::F32, 0).is_ok());
        let around_zero = AVal::exact(Interval::new(-1.0, 1.0));
        assert!(big.div(&around_zero).is_err());
        assert!(around_zero.sqrt().is_err());
    }
}
