//! Floating-point error model and rigorous error-bound algebra (design.md,
//! obligation 8), knowing nothing about kernels.
//!
//! - [`format`]: the binary formats and what one rounding into them costs
//!   (unit roundoff `u`, the absolute error of the subnormal range, the
//!   overflow threshold).
//! - [`library`]: each target's documented maximum error of its math
//!   library (`expf`, `tanhf`, ...), as named assumptions.
//! - [`interval`]: outward-rounded interval arithmetic on f64, the range
//!   analysis of exact (real-number) values.
//! - [`edges`]: test inputs over a domain, uniform and from its edges, that
//!   the soundness measurements of the bounds draw.
//! - [`bound`]: an error bound `|computed - exact| <= abs + rel |exact|` kept
//!   as a sum of named contributions, with sound propagation rules for
//!   every operation a kernel performs (second-order terms included, not
//!   dropped), and summation bounds that depend on the summation order.
//! - [`gelu_slope`]: the same for its derivative (a fused backward).
//! - [`tanh_gelu`]: the constants that carry a bound through the tanh form
//!   of GELU (its slope, and what an argument's relative error costs).
//!
//! Every quantity that bounds an error is computed with upward rounding
//! ([`up`]), every range endpoint outward, so that the f64 arithmetic of the
//! analysis cannot make a bound smaller than the real one.

pub mod bound;
pub mod edges;
pub mod format;
pub mod interval;
pub mod library;
pub mod magpoly;
pub mod matrix_unit;
pub mod gelu_slope;
pub mod tanh_gelu;

pub use bound::{logistic_slopes, AVal, Contribution, ErrBound, FpError, SourceId};
pub use format::Format;
pub use interval::Interval;
pub use library::{Function, LibraryTable};
pub use magpoly::{MagPoly, SymRange};

/// `x` rounded up: the next f64 above the round-to-nearest result of an
/// operation, hence at least the exact result. Non-negative inputs only
/// matter here (bounds); NaN stays NaN.
pub fn up(x: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x.next_up()
    }
}

/// `x` rounded down (see [`up`]).
pub fn down(x: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x.next_down()
    }
}

/// `a + b`, rounded up.
pub fn add_up(a: f64, b: f64) -> f64 {
    up(a + b)
}

/// `a * b` for non-negative operands, rounded up.
pub fn mul_up(a: f64, b: f64) -> f64 {
    up(a * b)
}

/// `a / b` for non-negative `a` and positive `b`, rounded up.
pub fn div_up(a: f64, b: f64) -> f64 {
    up(a / b)
}
