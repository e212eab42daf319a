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
