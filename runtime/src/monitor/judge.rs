//! Judging one launch: are its inputs inside the domain its bounds were
//! proved for, and what is its bound there?
//!
//! A kernel's judgement is prepared once per process ([`Judge::of`]):
//! names resolved to parameter positions, each numeric domain widened to
//! the range its dtype stores, each output's tolerance formula found. A
//! GPU step is judged after each read-back, about 136 launches at nano,
//! and resolving names per launch was most of the host's time there.

use crate::abi::tk_info::{eval_poly, KernelInfo};
use crate::call::Bound;
use crate::KernelDef;
use std::sync::Mutex;
use tokitai_contracts::fp::Format;

/// What the monitor found for one launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `None`: covered; else why not, in words.
    pub outside: Option<String>,
    /// Each output's bound at this launch `(output, abs, rel)` when covered.
    pub bounds: Vec<(&'static str, f64, f64)>,
}

/// A polynomial over a kernel's symbols (see `eval_poly`).
type Poly = &'static [(f64, &'static [u16])];

/// Where a domain entry's value is observed.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// The tensor parameter at this position (its range).
    Tensor(usize),
    /// The scalar at this position (its value).
    Scalar(usize),
    /// Neither (never observed: the entry is not checked).
    Absent,
}

/// One domain entry, ready to check.
#[derive(Debug)]
struct DomainCheck {
    name: &'static str,
    source: Source,
    /// Declared `[lo, hi]` (the message names it).
    lo: f64,
    hi: f64,
    /// In a magnitude (`x in [-X, X]`): any finite range inside the sign
    /// the entry admits.
    magnitude: bool,
    /// A numeric domain as the proofs take it: widened by one rounding
    /// into the input's dtype (a literal `1e-5` stored as an f32 is still
    /// inside `[1e-5, 1e-5]`).
    stored: (f64, f64),
}

/// A kernel's judgement with its names resolved.
#[derive(Debug)]
pub(crate) struct Judge {
    info: &'static KernelInfo,
    domain: Vec<DomainCheck>,
    /// Per output with a tolerance: `(output, abs, rel, abs as a formula
    /// in the launch's magnitudes)`.
    tolerance: Vec<(&'static str, f64, f64, Option<Poly>)>,
    /// Per tensor parameter: is it an input the bounds depend on (one
    /// with a domain)?
    needed: Vec<bool>,
    /// Per domain relation `t * t <= factor * s`: the positions of `t`
    /// and `s` among the tensor parameters, and the factor (`None`: a
    /// name that is no parameter).
    relations: Vec<Option<(usize, usize, f64)>>,
}

/// Every judgement prepared so far, by the address of its kernel's info
/// (a kernel's info is a constant: it may have a few addresses, one per
/// place that takes it, so the list stays as short as the code).
static JUDGES: Mutex<Vec<(usize, &'static Judge)>> = Mutex::new(Vec::new());

impl Judge {
    /// The judgement of `info`'s kernel, prepared on first use and kept
    /// (one per kernel the process launches).
    pub(crate) fn of(info: &'static KernelInfo) -> &'static Judge {
        let key = info as *const KernelInfo as usize;
        let mut judges = JUDGES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, j)) = judges.iter().find(|(k, _)| *k == key) {
            return j;
        }
        let j: &'static Judge = Box::leak(Box::new(Judge::new(info)));
        judges.push((key, j));
        j
    }

    fn new(info: &'static KernelInfo) -> Judge {
        let domain = info
            .domain
            .iter()
            .map(|&(name, lo, hi)| {
                let (source, dtype) = match info.tensors.iter().position(|t| t.name == name) {
                    Some(i) => (Source::Tensor(i), info.tensors[i].dtype),
                    None => match info.scalars.iter().position(|s| s.0 == name) {
                        Some(i) => (Source::Scalar(i), info.scalars[i].1),
                        None => (Source::Absent, "f64"),
                    },
                };
                let r = Format::from_name(dtype).unwrap_or(Format::F64).stored_range(lo, hi);
                DomainCheck { name, source, lo, hi, magnitude: info.magnitudes.iter().any(|m| m.0 == name), stored: (r.lo, r.hi) }
            })
            .collect();
        let tolerance = info.tolerance.iter().map(|&(out, abs, rel)| (out, abs, rel, info.tolerance_formula.iter().find(|f| f.0 == out).map(|f| f.1))).collect();
        let needed = info.tensors.iter().map(|p| p.role != "output" && info.domain.iter().any(|d| d.0 == p.name)).collect();
        let position = |name: &str| info.tensors.iter().position(|p| p.name == name);
        let relations = info.relations.iter().map(|&(t, s, factor, _)| Some((position(t)?, position(s)?, factor))).collect();
        Judge { info, domain, tolerance, needed, relations }
    }

    /// Per tensor parameter: does the launch's judgement need its range?
    pub(crate) fn needed(&self) -> &[bool] {
        &self.needed
    }

    /// Domain relation `r` as `(t, s, factor)`: `t * t <= factor * s`,
    /// `t` and `s` positions among the tensor parameters.
    pub(crate) fn relation(&self, r: usize) -> Option<(usize, usize, f64)> {
        self.relations.get(r).copied().flatten()
    }

    /// Judge one launch from its inputs' ranges: `ranges[i]` is `(min,
    /// max)` of the i-th tensor parameter (`None` for outputs and integer
    /// tensors); `relations_outside` says which domain relation the inputs
    /// break, if one does.
    pub(crate) fn verdict(&self, bound: &Bound, ranges: &[Option<(f64, f64)>], relations_outside: Option<&str>) -> Verdict {
        let info = self.info;
        let observed = |c: &DomainCheck| match c.source {
            Source::Tensor(i) => ranges.get(i).copied().flatten(),
            Source::Scalar(i) => bound.scalars.get(i).map(|v| (*v, *v)),
            Source::Absent => None,
        };
        // Every symbol's value: the dims (each by its class), then each
        // domain entry's largest |value| (infinite when not observed).
        // (On the stack where they fit: a step judges each launch.)
        let symbols = info.symbols(&bound.dims, self.domain.iter().map(|c| observed(c).map_or(f64::INFINITY, |(min, max)| min.abs().max(max.abs()))));
        let n = info.dims.len() + self.domain.len();
        let (mut stack, heap): ([f64; 16], Vec<f64>);
        let at: &[f64] = if n <= 16 {
            stack = [0.0; 16];
            for (slot, v) in stack.iter_mut().zip(symbols) {
                *slot = v;
            }
            &stack[..n]
        } else {
            heap = symbols.collect();
            &heap
        };
        let mut outside = None;
        for c in &self.domain {
            let Some((min, max)) = observed(c) else { continue };
            let inside = if c.magnitude { min.is_finite() && max.is_finite() && (c.lo < 0.0 || min >= 0.0) } else { c.stored.0 <= min && max <= c.stored.1 };
            if !inside {
                let domain = if c.magnitude { format!("[{}, X] (finite)", if c.lo >= 0.0 { "0" } else { "-X" }) } else { format!("[{}, {}]", c.lo, c.hi) };
                outside = Some(format!("input `{}` has values in [{}, {}], outside its domain {}", c.name, min, max, domain));
                break;
            }
        }
        if outside.is_none() {
            outside = relations_outside.map(str::to_string);
        }
        if outside.is_none() {
            for (poly, limit, what) in info.conditions {
                let v = eval_poly(poly, at);
                // NaN (an input not measured) is not below the limit either.
                if v.is_nan() || v > *limit {
                    outside = Some(format!("the bound needs {} to stay finite: its reach {:e} is above {:e}", what, v, limit));
                    break;
                }
            }
        }
        let bounds = match outside {
            Some(_) => Vec::new(),
            None => self.tolerance.iter().map(|&(out, abs, rel, formula)| (out, formula.map_or(abs, |f| eval_poly(f, at)), rel)).collect(),
        };
        Verdict { outside, bounds }
    }
}

/// Judge one launch of `k` (see [`Judge::verdict`]).
pub fn judge(k: &KernelDef, bound: &Bound, ranges: &[Option<(f64, f64)>], relations_outside: Option<&str>) -> Verdict {
    Judge::of(k.info).verdict(bound, ranges, relations_outside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{gelu::gelu_fwd, linear::linear_fwd};

    fn bound(dims: &[i64]) -> Bound {
        Bound { dims: dims.to_vec(), scalars: Vec::new() }
    }

    #[test]
    fn a_bound_in_magnitudes_is_its_formula_at_the_launch() {
        // linear_fwd: abs 6e-8 * K * K * X * W + 3e-8, with M, K, N.
        let (k, x, w) = (64.0, 2.5, 0.5);
        let v = judge(&linear_fwd::KERNEL, &bound(&[128, 64, 32]), &[Some((-x, 1.0)), Some((-0.25, w)), Some((0.0, 0.1)), None], None);
        assert_eq!(v.outside, None);
        let (out, abs, rel) = v.bounds[0];
        assert_eq!((out, rel), ("y", 1e-3));
        let want = 6e-8 * k * k * x * w + 3e-8;
        assert!((abs - want).abs() <= 1e-12 * want, "{} against {}", abs, want);
        // The largest |value| counts, whichever end holds it.
        let flipped = judge(&linear_fwd::KERNEL, &bound(&[128, 64, 32]), &[Some((-1.0, x)), Some((-w, 0.25)), Some((0.0, 0.1)), None], None);
        assert_eq!(flipped.bounds, v.bounds);
    }

    #[test]
    fn a_magnitude_domain_refuses_what_is_not_finite_and_what_overflows() {
        let b = bound(&[128, 64, 32]);
        let nan = judge(&linear_fwd::KERNEL, &b, &[Some((f64::NAN, f64::NAN)), Some((0.0, 1.0)), Some((0.0, 1.0)), None], None);
        assert!(nan.outside.as_deref().is_some_and(|m| m.contains("input `x`") && m.contains("(finite)")), "{:?}", nan.outside);
        assert!(nan.bounds.is_empty(), "no bound for a launch outside");
        // Finite inputs whose products overflow the f16 output's range.
        let huge = judge(&linear_fwd::KERNEL, &b, &[Some((-1e4, 1e4)), Some((0.0, 1e4)), Some((0.0, 1.0)), None], None);
        assert!(huge.outside.as_deref().is_some_and(|m| m.contains("to stay finite")), "{:?}", huge.outside);
    }

    #[test]
    fn a_numeric_domain_is_taken_as_its_dtype_stores_it() {
        let b = bound(&[8192]);
        assert_eq!(judge(&gelu_fwd::KERNEL, &b, &[Some((-8.0, 8.0)), None], None).outside, None, "the ends are inside");
        let past = judge(&gelu_fwd::KERNEL, &b, &[Some((-8.0, 8.0078125)), None], None);
        assert_eq!(past.outside.as_deref(), Some("input `x` has values in [-8, 8.0078125], outside its domain [-8, 8]"));
        let relation = judge(&gelu_fwd::KERNEL, &b, &[Some((0.0, 1.0)), None], Some("a relation fails"));
        assert_eq!(relation.outside.as_deref(), Some("a relation fails"), "a broken relation is named when the ranges are inside");
    }

    #[test]
    fn a_kernel_is_prepared_once() {
        let info = gelu_fwd::KERNEL.info;
        assert!(std::ptr::eq(Judge::of(info), Judge::of(info)));
        assert!(!std::ptr::eq(Judge::of(info), Judge::of(linear_fwd::KERNEL.info)));
    }
}
