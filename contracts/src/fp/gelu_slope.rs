//! The derivative of the tanh form of GELU, as a fused backward computes it
//! from a clamped value (`layernorm_gelu_bwd`, issue 20), with the constants
//! that let a bound in launch-time magnitudes pass through it:
//!
//! ```text
//! d(w) = (1 + T)/2 + P w S q,   T = tanh(A),  A = c1 (w + c2 w^3),
//!                               S = 1 - T^2,  q = 1 + k w^2,
//! ```
//!
//! with `c1, c2, k, P > 0` and `|w| <= C` (the kernel clamps its argument:
//! past `|w| = 8` the tanh form's slope is 0 or 1 within 1e-19, and without
//! the clamp the library's absolute error of `tanh`, multiplied by `w q`,
//! would grow as `|w|^3`). For GELU itself `k = 3 c2` and `P = c1 / 2`;
//! nothing here needs that.
//!
//! - [`SlopeForm::suprema`]: `sup |d|`, `sup |d'|` (an error `E` of the
//!   computed `w` costs at most `sup |d'| E`, the clamp being 1-Lipschitz),
//!   `sup |P w S q|` and `sup |P w q|` over `|w| <= C`, by outward-rounded
//!   interval arithmetic on cells of width 2^-12: each cell's interval
//!   holds every value the function takes in it, so the largest over the
//!   cells bounds the supremum. `d(-w) = 1 - d(w)` (`T` odd; `S`, `q` even),
//!   so the cells cover `[0, C]` and `|d|` is taken with `|1 - d|`.
//! - [`SlopeForm::rounding_cost`]: `|computed d - d|` at a computed `w`
//!   taken as exact, for the expression's roundings in f32, derived below.
//!
//! **The roundings** (`u` = 2^-24, `eta` the subnormal floor, each rounding
//! counted as its own relative `u` even where the compiler fuses a multiply
//! and an add, which only removes roundings):
//!
//! 1. `t`: the argument is `A (1 + theta) + sigma` with `|theta| <= rho`
//!    (its roundings, the constants' own) and `|sigma|` the subnormal
//!    slack. tanh is 1-Lipschitz, and `|tanh(A (1 + theta)) - tanh(A)| <=
//!    |A| rho sech^2(xi)` with `|xi| >= (1 - rho) |A|` (sech^2 falls with
//!    `|xi|`), at most `rho / (1 - rho) sup_y y sech^2 y`; the library adds
//!    `t_rel |tanh| + t_abs <= t_rel + t_abs`. Call the sum `D_t`.
//! 2. `0.5 * (1 + t)`: `D_t + u (2 + D_t)`, halved (exact but for `eta`).
//! 3. `s = 1 - t * t`: `|t'^2 - T^2| <= D_t (2 + D_t)`, the square's
//!    rounding `u (1 + D_t)^2`, the difference's at most `2 u`.
//! 4. The product `P w s q` is `P w q s' (1 + theta)`, `|theta| <=
//!    gamma(n)` with `n` its multiplications, its constants' own roundings
//!    and `q`'s (a sum of non-negative terms): at most `sup |P w q| E_s (1
//!    + gamma) + sup |P w S q| gamma`.
//! 5. The sum: both errors, and `u` of the result (at most `sup |d|` plus
//!    them).

use super::bound::gamma;
use super::tanh_gelu::SUP_Y_SECH2;
use super::{add_up, div_up, down, mul_up, FpError, Interval};

/// The derivative's constants as the kernel writes them, and its clamp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlopeForm {
    /// `tanh`'s argument `c1 (w + c2 w^3)`.
    pub c1: f64,
    pub c2: f64,
    /// `q = 1 + k w^2`.
    pub k: f64,
    /// The product of the second term's constants.
    pub p: f64,
    /// `|w| <= clamp`.
    pub clamp: f64,
}

/// Suprema over `|w| <= C`, each rounded up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlopeSuprema {
    /// `sup |d|`.
    pub value: f64,
    /// `sup |d'|`.
    pub slope: f64,
    /// `sup |P w S q|`: the second term.
    pub term: f64,
    /// `sup |P w q| = P C (1 + k C^2)`: what multiplies `s`'s error.
    pub factor: f64,
}

/// What the computed expression's roundings are (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlopeRoundings {
    /// `tanh`'s argument: relative error (its `gamma`) and absolute slack.
    pub argument_rel: f64,
    pub argument_abs: f64,
    /// The library's `tanh`: relative and absolute error.
    pub tanh_rel: f64,
    pub tanh_abs: f64,
    /// The second term's roundings besides `s`'s (multiplications,
    /// constants, and `q`'s).
    pub product_roundings: u32,
    /// The format's unit roundoff and subnormal floor.
    pub u: f64,
    pub eta: f64,
}

/// Cells of this width cover `[0, C]` (a power of 2: every endpoint exact).
const CELL: f64 = 1.0 / 4096.0;
/// The clamps this lemma takes: beyond, the cells grow many and the
/// rounding cost (`factor ~ C^3`) useless.
pub const MAX_CLAMP: f64 = 64.0;

impl SlopeForm {
    fn check(&self) -> Result<(), FpError> {
        let positive = [self.c1, self.c2, self.k, self.p].iter().all(|c| c.is_finite() && *c > 0.0);
        if !positive {
            return Err(FpError(format!("GELU's derivative with constants c1 = {}, c2 = {}, k = {}, P = {}: each must be positive", self.c1, self.c2, self.k, self.p)));
        }
        if !(self.clamp > 0.0 && self.clamp <= MAX_CLAMP) {
            return Err(FpError(format!("GELU's derivative of a value clamped to [-{0}, {0}]: the clamp must be in (0, {1}]", self.clamp, MAX_CLAMP)));
        }
        Ok(())
    }

    /// `d`, `d'` and the second term on the cell `y` (inside `[0, C]`).
    fn on(&self, y: Interval) -> (Interval, Interval, Interval) {
        let c = Interval::point;
        let y2 = y.mul(&y);
        let a = c(self.c1).mul(&y.add(&c(self.c2).mul(&y2.mul(&y))));
        let da = c(self.c1).mul(&c(1.0).add(&c(3.0 * self.c2).mul(&y2)));
        let da = Interval::new(down(da.lo * (1.0 - 1e-15)), da.hi * (1.0 + 1e-15)); // 3 c2 rounded
        let t = a.tanh();
        let s = c(1.0).sub(&t.mul(&t)).meet(&Interval::new(0.0, 1.0));
        let q = c(1.0).add(&c(self.k).mul(&y2));
        let dq = c(2.0 * self.k).mul(&y);
        let p = c(self.p);
        let term = p.mul(&y).mul(&s).mul(&q);
        let d = c(0.5).mul(&c(1.0).add(&t)).add(&term);
        // d' = S A'/2 + P S q + P w q (-2 T S A') + P w S q'.
        let slope = c(0.5)
            .mul(&s)
            .mul(&da)
            .add(&p.mul(&s).mul(&q))
            .sub(&c(2.0).mul(&p).mul(&y).mul(&q).mul(&t).mul(&s).mul(&da))
            .add(&p.mul(&y).mul(&s).mul(&dq));
        (d, slope, term)
    }

    /// The suprema over `|w| <= C`.
    pub fn suprema(&self) -> Result<SlopeSuprema, FpError> {
        self.check()?;
        let (mut value, mut slope, mut term) = (0.0f64, 0.0f64, 0.0f64);
        let cells = (self.clamp / CELL).ceil() as usize;
        for i in 0..cells {
            let lo = i as f64 * CELL;
            let y = Interval::new(lo, (lo + CELL).min(self.clamp));
            let (d, ds, t) = self.on(y);
            let mirrored = Interval::point(1.0).sub(&d);
            value = value.max(d.mag()).max(mirrored.mag());
            slope = slope.max(ds.mag());
            term = term.max(t.mag());
        }
        let c = self.clamp;
        let factor = mul_up(mul_up(self.p, c), add_up(1.0, mul_up(self.k, mul_up(c, c))));
        if ![value, slope, term, factor].iter().all(|v| v.is_finite()) {
            return Err(FpError("GELU's derivative: a supremum that is not finite".into()));
        }
        Ok(SlopeSuprema { value, slope, term, factor })
    }

    /// `|computed d - d|` at any `|w| <= C`, the computed `w` taken as
    /// exact (its own error costs `slope` times it).
    pub fn rounding_cost(&self, s: &SlopeSuprema, r: &SlopeRoundings) -> Result<f64, FpError> {
        let rho = r.argument_rel;
        if !(0.0..0.5).contains(&rho) {
            return Err(FpError(format!("GELU's derivative: an argument's relative error of {:e} admits no useful bound", rho)));
        }
        let u = r.u;
        // 1. tanh's value.
        let dt = add_up(add_up(div_up(mul_up(rho, SUP_Y_SECH2), down(1.0 - rho)), r.argument_abs), add_up(r.tanh_rel, r.tanh_abs));
        // 2. 0.5 * (1 + t).
        let e1 = add_up(mul_up(0.5, add_up(dt, mul_up(u, add_up(2.0, dt)))), r.eta);
        // 3. 1 - t * t.
        let onep = add_up(1.0, dt);
        let es = add_up(add_up(mul_up(dt, add_up(2.0, dt)), mul_up(u, mul_up(onep, onep))), add_up(mul_up(2.0, u), mul_up(2.0, r.eta)));
        // 4. The product.
        let g = gamma(r.product_roundings as f64, u)?;
        let underflow = mul_up(mul_up(r.product_roundings as f64 + 1.0, r.eta), add_up(1.0, s.factor));
        let e2 = add_up(add_up(mul_up(mul_up(s.factor, es), add_up(1.0, g)), mul_up(s.term, g)), underflow);
        // 5. The sum.
        let both = add_up(e1, e2);
        Ok(add_up(add_up(mul_up(both, add_up(1.0, u)), mul_up(u, s.value)), r.eta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: f64 = 0.7978845608;
    const C2: f64 = 0.044715;

    fn gelu_form(clamp: f64) -> SlopeForm {
        SlopeForm { c1: C1, c2: C2, k: 0.134145, p: 0.5 * C1, clamp }
    }

    fn d(w: f64) -> f64 {
        let t = (C1 * (w + C2 * w * w * w)).tanh();
        0.5 * (1.0 + t) + 0.5 * w * (1.0 - t * t) * (C1 * (1.0 + 0.134145 * w * w))
    }

    /// The kernel's expression in f32, in the order it is written.
    fn d_f32(w: f32) -> f32 {
        let (c1, c2) = (C1 as f32, C2 as f32);
        let t = (c1 * (w + c2 * w * w * w)).tanh();
        0.5 * (1.0 + t) + 0.5 * w * (1.0 - t * t) * (c1 * (1.0 + 0.134145f32 * w * w))
    }

    /// The suprema bound the function on a dense sample and are within
    /// 1% of what the sample reaches (GELU's slope peaks near 1.129, its
    /// curvature near 0.8).
    #[test]
    fn the_suprema_bound_a_dense_sample_and_are_tight() {
        let s = gelu_form(8.0).suprema().unwrap();
        let (mut value, mut slope, mut term) = (0.0f64, 0.0f64, 0.0f64);
        let h = 1e-4;
        let mut w = -8.0;
        while w <= 8.0 {
            value = value.max(d(w).abs());
            slope = slope.max(((d(w + 1e-6) - d(w - 1e-6)) / 2e-6).abs());
            let t = (C1 * (w + C2 * w * w * w)).tanh();
            term = term.max((0.5 * C1 * w * (1.0 - t * t) * (1.0 + 0.134145 * w * w)).abs());
            w += h;
        }
        for (name, bound, seen) in [("value", s.value, value), ("slope", s.slope, slope), ("term", s.term, term)] {
            assert!(seen <= bound, "{}: sampled {} above the bound {}", name, seen, bound);
            assert!(bound <= seen * 1.01, "{}: the bound {} is not within 1% of the sampled {}", name, bound, seen);
        }
        assert!(value > 1.12 && value < 1.14, "GELU's slope peaks near 1.129: {}", value);
        // P C (1 + k C^2) at C = 8.
        assert!((s.factor - 0.5 * C1 * 8.0 * (1.0 + 0.134145 * 64.0)).abs() < 1e-9);
    }

    /// The f32 expression's error on a dense sample of `[-8, 8]` (through
    /// the host's `tanhf`, well inside 2 ulp) stays below the derived cost,
    /// and the cost is within 100x of the largest error seen.
    #[test]
    fn the_rounding_cost_bounds_the_f32_expression() {
        let form = gelu_form(8.0);
        let s = form.suprema().unwrap();
        let u = 2f64.powi(-24);
        let eta = 2f64.powi(-150);
        // The argument: 3 multiplications in the cube, the sum, the
        // product by c1, and the two constants; as the compiler counts.
        let rho = gamma(7.0, u).unwrap();
        let r = SlopeRoundings { argument_rel: rho, argument_abs: 8.0 * eta, tanh_rel: 5.0 * u, tanh_abs: 2.5 * 2f64.powi(-149), product_roundings: 3 + 2 + 4, u, eta };
        let cost = form.rounding_cost(&s, &r).unwrap();
        let mut worst = 0.0f64;
        let mut w = -8.0f32;
        while w <= 8.0 {
            worst = worst.max((d_f32(w) as f64 - d(w as f64)).abs());
            w += 1.0 / 8192.0;
        }
        assert!(worst <= cost, "{:e} seen against {:e}", worst, cost);
        assert!(cost <= 100.0 * worst, "the cost {:e} is within 100x of the error seen {:e}", cost, worst);
    }

    /// Past the clamp GELU's slope is 0 or 1 to within 1e-19: clamping at 8
    /// does not change what the derivative means. (In f64, `tanh` is 1
    /// there; `1 - T` and `S` are computed from `e^{-2A}` instead.)
    #[test]
    fn the_clamp_at_8_changes_the_slope_by_less_than_1e_19() {
        for w in [8.0f64, 9.0, 16.0, 100.0] {
            let e = (-2.0 * C1 * (w + C2 * w * w * w)).exp();
            let one_minus_t = 2.0 * e / (1.0 + e);
            let s = one_minus_t * (2.0 - one_minus_t);
            // d(w) - 1 = -(1 - T)/2 + P w S q; d(-w) = 1 - d(w).
            let gap = (-0.5 * one_minus_t + 0.5 * C1 * w * s * (1.0 + 0.134145 * w * w)).abs();
            assert!(gap < 1e-19, "|d({}) - 1| = {:e}", w, gap);
        }
    }

    #[test]
    fn a_clamp_out_of_range_or_a_negative_constant_is_an_error() {
        assert!(gelu_form(0.0).suprema().is_err());
        assert!(gelu_form(65.0).suprema().is_err());
        assert!(SlopeForm { k: -1.0, ..gelu_form(8.0) }.suprema().is_err());
    }
}
