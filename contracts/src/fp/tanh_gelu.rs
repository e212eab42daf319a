//! Constants of the tanh form of GELU, `g(v) = v/2 (1 + tanh(a(v)))` with
//! `a(v) = c1 (v + c2 v^3)`, `c1, c2 > 0`, that let a bound in launch-time
//! magnitudes pass through it (the compiler's `accuracy::magnitude`, a
//! contraction with GELU in its epilogue):
//!
//! - **Its slope is bounded**, whatever `v`: `g'(v) = (1 + tanh a)/2 + v/2
//!   a'(v) sech^2(a)` and `|v| a'(v) = c1 |v| (1 + 3 c2 v^2) <= 3 |a|`, so
//!   `|g'| <= 1 + 3/2 sup_y y sech^2(y)` ([`slope_bound`]). An error `E` of
//!   the computed `v` costs at most that times `E` in `g`.
//! - **An argument computed with relative error `rho` costs a constant**:
//!   `v/2 |tanh(a') - tanh(a)| <= v/2 rho |a| sech^2(xi)` with `|xi| >= (1 -
//!   rho) |a|`, and `|v| <= |a| / c1`, so at most `rho / (2 c1 (1 -
//!   rho)^2) sup_y y^2 sech^2(y)` ([`argument_cost`]): where `v` is large
//!   the slope of tanh has long vanished.
//!
//! Both suprema have closed forms. `y sech^2 y` peaks where `y tanh y =
//! 1/2`, at `y0 - 1 / (4 y0)` (`y0 = 0.7717...`: 0.44773...);
//! `y^2 sech^2 y` where `y tanh y = 1`, at `y1^2 - 1` (`y1 = 1.1997...`:
//! 0.43923...). The constants below are those rounded up; a test checks
//! them on a fine grid with the grid's own slack.

use super::{add_up, div_up, down, mul_up};

/// An upper bound of `sup_{y >= 0} y sech^2(y)` (0.44773...).
pub const SUP_Y_SECH2: f64 = 0.4478;
/// An upper bound of `sup_{y >= 0} y^2 sech^2(y)` (0.43923...).
pub const SUP_Y2_SECH2: f64 = 0.4393;

/// An upper bound of `|g'(v)|` over every real `v`, for any `c1, c2 > 0`.
pub fn slope_bound() -> f64 {
    add_up(1.0, mul_up(1.5, SUP_Y_SECH2))
}

/// An upper bound of `|v|/2 |tanh(a') - tanh(a)|` over every real `v`,
/// where `a' = a (1 + t)`, `|t| <= rho < 1/2`.
pub fn argument_cost(c1: f64, rho: f64) -> f64 {
    let shrink = down(1.0 - rho);
    div_up(mul_up(mul_up(0.5, rho), SUP_Y2_SECH2), down(down(c1 * shrink) * shrink))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest of `f` on a grid of step `h` over `[0, 40]`, plus the
    /// most `f` can rise between grid points (`h` times a bound on `|f'|`).
    fn sup_on_grid(f: impl Fn(f64) -> f64, slope: f64) -> f64 {
        let h = 1e-5;
        let mut best: f64 = 0.0;
        let mut y = 0.0;
        while y <= 40.0 {
            best = best.max(f(y));
            y += h;
        }
        best + h * slope
    }

    fn sech2(y: f64) -> f64 {
        let c = y.cosh();
        1.0 / (c * c)
    }

    #[test]
    fn the_suprema_bound_the_functions_everywhere() {
        // |d/dy y sech^2 y| <= 1 + 2 y^2 sech^2 y <= 2; |d/dy y^2 sech^2 y|
        // <= 2 y sech^2 y + 2 y^3 sech^2 y <= 3. Beyond 40 both are below
        // 40^2 e^-80 * 4.
        let s1 = sup_on_grid(|y| y * sech2(y), 2.0);
        let s2 = sup_on_grid(|y| y * y * sech2(y), 3.0);
        assert!(s1 <= SUP_Y_SECH2 && SUP_Y_SECH2 - s1 < 1e-3, "{} against {}", s1, SUP_Y_SECH2);
        assert!(s2 <= SUP_Y2_SECH2 && SUP_Y2_SECH2 - s2 < 1e-3, "{} against {}", s2, SUP_Y2_SECH2);
        // The closed forms agree.
        let y0 = 0.771_702_2_f64;
        assert!(((y0 * y0.tanh()) - 0.5).abs() < 1e-6 && (y0 - 1.0 / (4.0 * y0) - s1).abs() < 1e-4);
    }

    /// GELU's slope and the argument's cost, sampled densely at the
    /// tokitai kernels' constants, stay below the bounds.
    #[test]
    fn the_gelu_lemmas_hold_on_a_dense_sample() {
        let (c1, c2) = (0.7978845608_f64, 0.044715_f64);
        let a = |v: f64| c1 * (v + c2 * v * v * v);
        let g = |v: f64| 0.5 * v * (1.0 + a(v).tanh());
        let rho = 7.0 * 2f64.powi(-24);
        let (mut slope, mut cost): (f64, f64) = (0.0, 0.0);
        let mut v = -60.0;
        while v <= 60.0 {
            let h = 1e-6;
            slope = slope.max(((g(v + h) - g(v - h)) / (2.0 * h)).abs());
            for t in [rho, -rho] {
                cost = cost.max(0.5 * v.abs() * ((a(v) * (1.0 + t)).tanh() - a(v).tanh()).abs());
            }
            v += 1e-3;
        }
        assert!(slope <= slope_bound(), "{} against {}", slope, slope_bound());
        assert!(slope > 1.1, "GELU's slope peaks near 1.13: {}", slope);
        let bound = argument_cost(c1, rho);
        assert!(cost <= bound, "{:e} against {:e}", cost, bound);
        assert!(cost > bound / 4.0, "the bound is within 4x of the sampled cost: {:e} against {:e}", cost, bound);
    }
}
