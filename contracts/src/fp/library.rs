//! The math library's documented accuracy on each target, as named
//! assumptions (design.md, obligation 8: "the target's documented ulp
//! figures ... as named assumptions").
//!
//! An error of `k` ulp of the result becomes a relative error of
//! `(2k + 1) u` (one ulp is at most `2u` of the value; the extra `u`
//! covers tables that measure against the correctly rounded result rather
//! than the real one), plus `k + 1/2` subnormal ulps near zero. A function
//! documented as correctly rounded (`0` ulp) costs one rounding, `u`.
//!
//! - CUDA (NVRTC with its defaults: `-prec-div=true`, `-prec-sqrt=true`,
//!   `-ftz=false`, no `--use_fast_math`): CUDA C++ Programming Guide,
//!   "Mathematical Functions", single precision: `x/y` 0 ulp, `sqrtf` 0,
//!   `rsqrtf` 2, `expf` 2, `logf` 1, `tanhf` 2. NVIDIA notes that these
//!   figures come from extensive but not exhaustive testing.
//! - HIP (hipcc/hiprtc, clang's default correctly rounded f32 division and
//!   square root): the ROCm "HIP math API" page gives expf 1, logf 2,
//!   tanhf 2, sqrtf 1, measured against the host's C++ standard library
//!   rather than the real result. The host library's own documented error
//!   (glibc: expf 1, logf 1, tanhf 2, sqrtf 0) is added, so the
//!   assumptions are expf 2, logf 3, tanhf 4, sqrtf 1, rsqrtf 2.
//!
//! Fast-math intrinsics (`__expf`, `--use_fast_math`, `-ffast-math`) have
//! much larger, range-dependent errors: a target whose flags turn them on
//! gets no table ([`LibraryTable::for_flags`] refuses), so no tolerance is
//! proved for it.

use super::format::Format;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Function {
    Div,
    Sqrt,
    Rsqrt,
    Exp,
    Log,
    Tanh,
}

impl Function {
    pub fn c_name(self) -> &'static str {
        match self {
            Function::Div => "x/y",
            Function::Sqrt => "sqrtf",
            Function::Rsqrt => "rsqrtf",
            Function::Exp => "expf",
            Function::Log => "logf",
            Function::Tanh => "tanhf",
        }
    }
}

/// One assumption: `function` is accurate to `ulps` ulp of its result.
#[derive(Clone, Debug, PartialEq)]
pub struct Assumption {
    pub function: Function,
    pub ulps: f64,
    /// Where the figure comes from, in words.
    pub source: &'static str,
}

/// How an intrinsic's error grows: `ulps_per_arg` ulp more for each unit
/// of the argument's magnitude, rounded down (`__expf`'s `2 + floor(1.173
/// |x|)`); where it `flushes`, results below the smallest normal number
/// may come back as 0 (an absolute error up to that number), and so may
/// subnormal operands.
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    pub function: Function,
    pub ulps_per_arg: f64,
    pub flushes: bool,
    /// The divisor's magnitude must lie in `[lo, hi]` (`__fdividef`).
    pub divisor: Option<(f64, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LibraryTable {
    /// "CUDA (NVRTC defaults)", "HIP (ROCm)".
    pub name: &'static str,
    pub assumptions: Vec<Assumption>,
    /// Functions whose error grows with the argument or that flush
    /// (the intrinsics); none for the accurate libraries.
    pub growth: Vec<Growth>,
}

impl LibraryTable {
    pub fn cuda() -> LibraryTable {
        let doc = "CUDA C++ Programming Guide, single-precision mathematical functions";
        LibraryTable {
            name: "CUDA (NVRTC defaults: -prec-div=true, -prec-sqrt=true, no fast math)",
            assumptions: vec![
                Assumption { function: Function::Div, ulps: 0.0, source: doc },
                Assumption { function: Function::Sqrt, ulps: 0.0, source: doc },
                Assumption { function: Function::Rsqrt, ulps: 2.0, source: doc },
                Assumption { function: Function::Exp, ulps: 2.0, source: doc },
                Assumption { function: Function::Log, ulps: 1.0, source: doc },
                Assumption { function: Function::Tanh, ulps: 2.0, source: doc },
            ],
            growth: Vec::new(),
        }
    }

    /// CUDA with the fast intrinsics `__expf` and `__fdividef` in place
    /// of `expf` and the correctly rounded f32 `/` (a schedule candidate
    /// that prints them, `KernelIr::fast_intrinsics`; everything else as
    /// [`LibraryTable::cuda`]). CUDA C++ Programming Guide, "Intrinsic
    /// Functions", single precision: `__expf(x)` has at most `2 +
    /// floor(abs(1.173 * x))` ulp of error; `__fdividef(x, y)` at most 2
    /// ulp for `|y|` in `[2^-126, 2^126]`; both flush subnormal results
    /// (and operands) to zero.
    pub fn cuda_intrinsics() -> LibraryTable {
        let doc = "CUDA C++ Programming Guide, single-precision intrinsic functions";
        let mut t = LibraryTable::cuda();
        t.name = "CUDA intrinsics (__expf, __fdividef; the rest NVRTC defaults)";
        for a in &mut t.assumptions {
            match a.function {
                Function::Div | Function::Exp => {
                    a.ulps = 2.0;
                    a.source = doc;
                }
                _ => {}
            }
        }
        t.growth = vec![
            Growth { function: Function::Exp, ulps_per_arg: 1.173, flushes: true, divisor: None },
            Growth { function: Function::Div, ulps_per_arg: 0.0, flushes: true, divisor: Some((2f64.powi(-126), 2f64.powi(126))) },
        ];
        t
    }

    pub fn hip() -> LibraryTable {
        let doc = "ROCm HIP math API page (measured against the host C++ library) plus glibc's documented error";
        LibraryTable {
            name: "HIP (ROCm device libraries, correctly rounded f32 division)",
            assumptions: vec![
                Assumption { function: Function::Div, ulps: 0.0, source: "clang's HIP default: correctly rounded f32 division" },
                Assumption { function: Function::Sqrt, ulps: 1.0, source: doc },
                Assumption { function: Function::Rsqrt, ulps: 2.0, source: doc },
                Assumption { function: Function::Exp, ulps: 2.0, source: doc },
                Assumption { function: Function::Log, ulps: 3.0, source: doc },
                Assumption { function: Function::Tanh, ulps: 4.0, source: doc },
            ],
            growth: Vec::new(),
        }
    }

    /// The table for a target's compile flags: `None` when a flag turns on
    /// approximate math, for which no documented bound applies.
    pub fn for_flags(cuda: bool, flags: &[String]) -> Result<LibraryTable, String> {
        let fast = ["--use_fast_math", "-use_fast_math", "-ffast-math", "--prec-div=false", "-prec-div=false", "--prec-sqrt=false", "-prec-sqrt=false", "-ftz=true", "--ftz=true", "-fgpu-approx-transcendentals"];
        if let Some(f) = flags.iter().find(|f| fast.contains(&f.as_str())) {
            return Err(format!("the compile flag `{}` selects approximate math, whose error is not documented as a bound", f));
        }
        Ok(if cuda { LibraryTable::cuda() } else { LibraryTable::hip() })
    }

    pub fn ulps(&self, f: Function) -> f64 {
        self.assumptions.iter().find(|a| a.function == f).map(|a| a.ulps).unwrap_or(f64::INFINITY)
    }

    /// The relative and absolute error of one call in `fmt`.
    pub fn cost(&self, f: Function, fmt: Format) -> (f64, f64) {
        self.cost_at(f, fmt, 0.0)
    }

    /// Does `f`'s error here depend on its argument or flush (an
    /// intrinsic)? Then callers must use [`Self::cost_at`].
    pub fn grows(&self, f: Function) -> Option<&Growth> {
        self.growth.iter().find(|g| g.function == f)
    }

    /// The relative and absolute error of one call in `fmt` whose
    /// argument is at most `max_abs_arg` in magnitude (for a division, the
    /// dividend's: its flushed operands). A flushing intrinsic adds the
    /// smallest normal number to the absolute error.
    pub fn cost_at(&self, f: Function, fmt: Format, max_abs_arg: f64) -> (f64, f64) {
        let growth = self.grows(f);
        let extra = growth.map_or(0.0, |g| (g.ulps_per_arg * max_abs_arg).floor());
        let k = self.ulps(f) + extra;
        let u = fmt.unit_roundoff();
        let (rel, mut abs) = if k == 0.0 { (u, fmt.subnormal_abs()) } else { ((2.0 * k + 1.0) * u, (k + 0.5) * fmt.min_subnormal()) };
        if growth.is_some_and(|g| g.flushes) {
            abs += 2f64.powi(fmt.emin());
        }
        (rel, abs)
    }
}

impl fmt::Display for LibraryTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name)?;
        let parts: Vec<String> = self.assumptions.iter().map(|a| format!("{} {} ulp", a.function.c_name(), a.ulps)).collect();
        f.write_str(&parts.join(", "))
    }
}
