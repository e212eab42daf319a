//! Binary floating-point formats and the cost of one rounding into them.
//!
//! Round to nearest (the only mode kernels use): for a real `v` whose
//! rounding `fl(v)` is finite, `|fl(v) - v| <= u |v| + eta`, where `u` is
//! the unit roundoff `2^-p` (`p` the precision, hidden bit included) and
//! `eta` half the spacing of the subnormal range (the absolute error when
//! `v` lies below the smallest normal). Either term alone suffices in its
//! range; their sum is a bound everywhere.

use super::interval::Interval;
use super::{down, up};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    F16,
    Bf16,
    F32,
    F64,
}

impl Format {
    /// Precision in bits, the hidden bit included.
    pub fn precision(self) -> i32 {
        match self {
            Format::F16 => 11,
            Format::Bf16 => 8,
            Format::F32 => 24,
            Format::F64 => 53,
        }
    }

    /// The smallest normal exponent (`2^emin` is the smallest normal).
    pub fn emin(self) -> i32 {
        match self {
            Format::F16 => -14,
            Format::Bf16 | Format::F32 => -126,
            Format::F64 => -1022,
        }
    }

    /// Unit roundoff `u = 2^-p`: fp16 2^-11, bf16 2^-8, fp32 2^-24.
    pub fn unit_roundoff(self) -> f64 {
        2f64.powi(-self.precision())
    }

    /// Half the subnormal spacing `2^(emin - p + 1) / 2`: the largest
    /// absolute error of rounding a value below the smallest normal.
    pub fn subnormal_abs(self) -> f64 {
        2f64.powi(self.emin() - self.precision())
    }

    /// The smallest positive subnormal (one ulp of the subnormal range).
    pub fn min_subnormal(self) -> f64 {
        2f64.powi(self.emin() - self.precision() + 1)
    }

    /// The largest finite value.
    pub fn max_finite(self) -> f64 {
        match self {
            Format::F16 => 65504.0,
            Format::Bf16 => 3.3895313892515355e38,
            Format::F32 => f32::MAX as f64,
            Format::F64 => f64::MAX,
        }
    }

    /// Reals at or above this magnitude round to infinity: the largest
    /// finite value plus half its ulp.
    pub fn overflow_threshold(self) -> f64 {
        let ulp = 2f64.powi(self.max_exponent() - self.precision() + 1);
        self.max_finite() + ulp / 2.0
    }

    fn max_exponent(self) -> i32 {
        match self {
            Format::F16 => 15,
            Format::Bf16 | Format::F32 => 127,
            Format::F64 => 1023,
        }
    }

    /// Can every integer of magnitude at most `n` be represented exactly?
    pub fn holds_integers_up_to(self, n: f64) -> bool {
        n <= 2f64.powi(self.precision())
    }

    /// The format of a dtype name (`f16`, `bf16`, `f32`, `f64`).
    pub fn from_name(name: &str) -> Option<Format> {
        [Format::F16, Format::Bf16, Format::F32, Format::F64].into_iter().find(|f| f.name() == name)
    }

    /// A domain `[lo, hi]` widened by one rounding into this format: a
    /// value chosen inside the domain and stored may land half an ulp
    /// outside it. Rounding never changes a sign, so neither does the
    /// widening. The bounds that proofs assume, and the ranges the runtime
    /// accepts as inside a domain, are both this one.
    pub fn stored_range(self, lo: f64, hi: f64) -> Interval {
        let w = |x: f64| x.abs() * self.unit_roundoff() + self.subnormal_abs();
        let lo2 = if lo == 0.0 { 0.0 } else if lo > 0.0 { down(lo - w(lo)).max(0.0) } else { down(lo - w(lo)) };
        let hi2 = if hi == 0.0 { 0.0 } else if hi < 0.0 { up(hi + w(hi)).min(0.0) } else { up(hi + w(hi)) };
        Interval::new(lo2, hi2)
    }

    /// The spacing of this format's values around `x` (finite, or the
    /// largest binade's spacing beyond it): one ulp at `|x|`.
    fn spacing_at(self, x: f64) -> f64 {
        let binade = ((x.abs().to_bits() >> 52) & 0x7ff) as i32 - 1023;
        2f64.powi(binade.clamp(self.emin(), self.max_exponent()) - self.precision() + 1)
    }

    /// The largest value of this format at or below `x` (`-inf` below the
    /// most negative finite value). Exact: `x / spacing` is a power-of-two
    /// scaling, and `floor` of it an integer of at most `p` bits.
    pub fn floor_to(self, x: f64) -> f64 {
        if self == Format::F64 || x.is_nan() || x.is_infinite() {
            return x;
        }
        if x > self.max_finite() {
            return self.max_finite();
        }
        if x < -self.max_finite() {
            return f64::NEG_INFINITY;
        }
        let s = self.spacing_at(x);
        (x / s).floor() * s
    }

    /// The smallest value of this format at or above `x` (`+inf` above the
    /// largest finite value).
    pub fn ceil_to(self, x: f64) -> f64 {
        -self.floor_to(-x)
    }

    /// `x` rounded to nearest, ties to even, as the hardware rounds
    /// (`inf` at and beyond the overflow threshold). Exact.
    pub fn nearest(self, x: f64) -> f64 {
        if self == Format::F64 || x.is_nan() || x.is_infinite() {
            return x;
        }
        if x.abs() >= self.overflow_threshold() {
            return f64::INFINITY.copysign(x);
        }
        let (lo, hi) = (self.floor_to(x), self.ceil_to(x));
        let (below, above) = (x - lo, hi - x);
        if below < above {
            lo
        } else if above < below {
            hi
        } else {
            // A tie: the neighbour whose last significand bit is even.
            let s = self.spacing_at(lo.abs().max(hi.abs()).min(self.max_finite()));
            if (lo / s).rem_euclid(2.0) == 0.0 {
                lo
            } else {
                hi
            }
        }
    }

    /// Where `x`'s rounding to nearest lies for every real `x` in `iv`:
    /// between its ends' roundings (rounding is monotone).
    pub fn round_nearest(self, iv: Interval) -> Interval {
        Interval::new(self.nearest(iv.lo), self.nearest(iv.hi))
    }

    /// Where values of this format computed by rounding (to nearest) a
    /// real in `iv` can lie: rounding is monotone, so between the format's
    /// neighbours of the ends. Ends the format holds stay where they are.
    pub fn round_outward(self, iv: Interval) -> Interval {
        Interval::new(self.floor_to(iv.lo), self.ceil_to(iv.hi))
    }

    /// Values of this format known to lie in `iv`: between the format's
    /// values just inside its ends (a stored `f32` at most `1 + 2^-24` is
    /// at most 1).
    pub fn held_in(self, iv: Interval) -> Interval {
        let (lo, hi) = (self.ceil_to(iv.lo), self.floor_to(iv.hi));
        if lo <= hi {
            Interval::new(lo, hi)
        } else {
            iv
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::F16 => "f16",
            Format::Bf16 => "bf16",
            Format::F32 => "f32",
            Format::F64 => "f64",
        }
    }

    /// Is every value of `self` exactly representable in `other`?
    pub fn fits_in(self, other: Format) -> bool {
        self == other || (self.precision() <= other.precision() && self.emin() >= other.emin() && self.max_exponent() <= other.max_exponent())
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_functions_find_the_formats_neighbours() {
        assert_eq!(Format::F32.floor_to(1.0), 1.0);
        assert_eq!(Format::F32.floor_to(1.0 + 2f64.powi(-24)), 1.0);
        assert_eq!(Format::F32.ceil_to(1.0 + 2f64.powi(-24)), 1.0 + 2f64.powi(-23));
        assert_eq!(Format::F32.floor_to(-0.999_999_99), -1.0);
        assert_eq!(Format::F16.floor_to(65504.5), 65504.0);
        assert_eq!(Format::F16.ceil_to(65504.5), f64::INFINITY);
        assert_eq!(Format::F16.ceil_to(1e-9), Format::F16.min_subnormal());
        assert_eq!(Format::F16.floor_to(1e-9), 0.0);
        for x in [0.1f64, -3.7, 1234.5678, 6.1e-5, -2.0e-6] {
            for f in [Format::F16, Format::Bf16, Format::F32] {
                let (lo, hi) = (f.floor_to(x), f.ceil_to(x));
                assert!(lo <= x && x <= hi && hi - lo <= f.spacing_at(x), "{} {}: [{}, {}]", f, x, lo, hi);
                assert_eq!(f.floor_to(lo), lo, "{} holds its own floor of {}", f, x);
            }
            assert_eq!(Format::F32.floor_to(x), (x as f32) as f64 - if ((x as f32) as f64) > x { Format::F32.spacing_at(x) } else { 0.0 });
        }
        assert_eq!(Format::F32.held_in(Format::F32.stored_range(0.0, 1.0)), Interval::new(0.0, 1.0));
        for x in [0.1f64, -3.7, 1.0 + 2f64.powi(-24), 1.0 + 3.0 * 2f64.powi(-24), 1e30, -7.0e-40, 3.4e38, 3.5e38] {
            assert_eq!(Format::F32.nearest(x), (x as f32) as f64, "{}", x);
        }
        assert_eq!(Format::F16.nearest(65520.0), f64::INFINITY);
        assert_eq!(Format::F16.nearest(65519.0), 65504.0);
        assert_eq!(Format::F16.nearest(2049.0), 2048.0, "a tie goes to the even neighbour");
        assert_eq!(Format::F16.nearest(2051.0), 2052.0, "a tie goes to the even neighbour");
    }

    #[test]
    fn unit_roundoffs_are_the_documented_ones() {
        assert_eq!(Format::F16.unit_roundoff(), 2f64.powi(-11));
        assert_eq!(Format::Bf16.unit_roundoff(), 2f64.powi(-8));
        assert_eq!(Format::F32.unit_roundoff(), 2f64.powi(-24));
        assert_eq!(Format::F16.subnormal_abs(), 2f64.powi(-25));
        assert_eq!(Format::F32.subnormal_abs(), 2f64.powi(-150));
        assert_eq!(Format::F16.overflow_threshold(), 65520.0);
        assert!(Format::F16.fits_in(Format::F32) && !Format::Bf16.fits_in(Format::F16) && Format::Bf16.fits_in(Format::F32));
    }

    /// The rounding model against real roundings: every f32 to f16 and bf16
    /// conversion of a sweep of values, subnormals included.
    #[test]
    fn rounding_model_bounds_real_roundings() {
        let mut x = 1e-9f32;
        while x < 70000.0 {
            for v in [x, -x, x * 1.37, x * 0.917] {
                let h = half::f16::from_f32(v).to_f32();
                if h.is_finite() {
                    let err = (h as f64 - v as f64).abs();
                    assert!(err <= Format::F16.unit_roundoff() * (v as f64).abs() + Format::F16.subnormal_abs(), "{} -> {}", v, h);
                }
                let b = half::bf16::from_f32(v).to_f32();
                let err = (b as f64 - v as f64).abs();
                assert!(err <= Format::Bf16.unit_roundoff() * (v as f64).abs() + Format::Bf16.subnormal_abs());
            }
            x *= 1.0137;
        }
    }
}
