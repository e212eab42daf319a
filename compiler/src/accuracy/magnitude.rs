//! Error bounds in launch-time magnitudes (issue 18).
//!
//! A kernel may state a domain that scales (`x in [-X, X]`: `X` is the
//! launch's largest `|x|`, measured by the runtime) and a tolerance that is
//! a formula (`abs 2e-7 * K * X * W + 1e-6`). This analysis derives, for
//! every launch that meets `requires` and every value of the magnitudes,
//! a bound `|kernel - exact| <= A + R |exact|` whose `A` is a polynomial in
//! the dims and magnitudes ([`MagPoly`]) and `R` a number, and shows it is
//! within the tolerance by [`MagPoly::dominated_by`].
//!
//! The rules are those of [`super`]'s interval analysis, restated for
//! ranges of the form `|exact| <= P`: the standard model of a rounding
//! (`|fl(z) - z| <= u |z| + eta`, eta the format's subnormal error), a
//! product's second-order term kept, and a sum of `n` terms in an order of
//! height `h` (from `KernelIr`) costing `gamma_h * sum |terms|` with
//! `gamma_h = h u / (1 - h u) <= h u / (1 - h_max u)`, `h_max` from the
//! dims' upper bounds in `requires`. Terms of a sum whose signs are all
//! non-negative keep their error relative (a sum of squares); otherwise
//! nothing assumes away cancellation.
//!
//! What scales must stay polynomial: `+ - *`, sums, `max`/`min`, `abs`,
//! casts. Anything else (`exp`, a division, `sqrt`) is reported as not
//! covered by this analysis: give its inputs numeric domains instead.
//!
//! A rounding into a format is only a rounding while the value stays below
//! the format's overflow threshold. With magnitudes that is a property of
//! the launch, not of the kernel: each such requirement is returned as a
//! [`Condition`] (`P <= limit`) that the runtime checks at the launch
//! before it calls the launch covered by the proved bound.

use super::patterns::Patterns;
use super::{dim_bounds, fail, format_of, same_expr, summation_height, Fail, Lookup, StatementMemo};
use crate::kir::{KernelIr, ReductionOrder};
use crate::span::Span;
use crate::syntax::ast::{BinOp, RedOp, UnOp};
use crate::tir::{self, Builtin, Const, Dim, Kernel, Sym, TExpr, TExprKind, TensorId, TensorRole};
use crate::types::Dtype;
use tokitai_contracts::fp::magpoly::Domination;
use tokitai_contracts::fp::{add_up, mul_up, Format, Function, LibraryTable, MagPoly, SymRange};

/// A launch-time requirement of a bound: `poly <= limit` at the launch's
/// dims and magnitudes.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub poly: MagPoly,
    pub limit: f64,
    /// What stays finite: "the f16 store of `y`".
    pub what: String,
    pub span: Span,
}

/// Whether the derived bound is within the tolerance.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every term of the bound is paid for by a term of the tolerance.
    Within(Domination),
    /// At this point (one value per symbol) the bound exceeds the tolerance.
    Exceeds { at: Vec<f64>, bound: f64, tolerance: f64 },
    /// Neither shown (the bound has a term no tolerance term can pay for
    /// and no point found where it exceeds it).
    Undecided(String),
}

/// What was derived for one output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputBound {
    pub tensor: TensorId,
    pub output: String,
    pub span: Span,
    /// The derived bound: `abs + rel |exact|`.
    pub abs: MagPoly,
    pub rel: f64,
    /// The declared tolerance, as the same kind of polynomial.
    pub tolerance: (MagPoly, f64),
    pub conditions: Vec<Condition>,
    /// Why no bound was derived, and where.
    pub failure: Option<(String, Span)>,
    pub verdict: Option<Verdict>,
}

/// Everything derived for one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct MagnitudeAnalysis {
    pub kernel: String,
    /// Symbol names: the dims (in kernel order), then the magnitudes (in
    /// `domain` order, one per domain entry; unused entries are named but
    /// never appear).
    pub symbols: Vec<String>,
    pub ranges: Vec<SymRange>,
    pub outputs: Vec<OutputBound>,
}

impl MagnitudeAnalysis {
    pub fn show(&self, p: &MagPoly) -> String {
        p.display(&self.symbols).to_string()
    }
}

/// The symbol of a dim (its class representative) or of a domain's magnitude.
pub fn symbol(k: &Kernel, s: Sym) -> u16 {
    match s {
        Sym::Dim(d) => k.dim_class[d] as u16,
        Sym::Magnitude(i) => (k.dims.len() + i) as u16,
    }
}

/// A tolerance's `abs` as a polynomial over [`symbol`]s.
pub fn tolerance_poly(k: &Kernel, t: &tir::Tolerance) -> MagPoly {
    t.abs_terms.iter().fold(MagPoly::constant(t.abs), |acc, term| {
        let mut c = term.coef;
        let mut m = Vec::new();
        for s in &term.syms {
            match s {
                // A dim that `requires` fixes is a number.
                Sym::Dim(d) if k.dim_value[k.dim_class[*d]].is_some() => c *= k.dim_value[k.dim_class[*d]].unwrap_or(1) as f64,
                _ => m.push(symbol(k, *s)),
            }
        }
        acc.add(&MagPoly::term(m, c))
    })
}

/// Names and ranges of every symbol.
fn symbols(k: &Kernel) -> (Vec<String>, Vec<SymRange>) {
    let mut names: Vec<String> = k.dims.iter().map(|d| d.name.clone()).collect();
    let mut ranges: Vec<SymRange> = (0..k.dims.len())
        .map(|d| {
            let (lo, hi) = dim_bounds(k, k.dim_class[d]);
            SymRange { lo: lo.max(0) as f64, hi: hi.map(|h| h as f64).unwrap_or(f64::INFINITY) }
        })
        .collect();
    for d in &k.domain {
        names.push(d.magnitude.clone().unwrap_or_else(|| format!("|{}|", d.text)));
        ranges.push(SymRange { lo: 0.0, hi: f64::INFINITY });
    }
    (names, ranges)
}

/// A value in the analysis: `|exact| <= mag`, `exact >= 0` when `nonneg`,
/// `|computed - exact| <= err + rel |exact|`.
#[derive(Clone, Debug)]
struct PVal {
    mag: MagPoly,
    nonneg: bool,
    err: MagPoly,
    rel: f64,
}

impl PVal {
    fn exact(mag: MagPoly, nonneg: bool) -> PVal {
        PVal { mag, nonneg, err: MagPoly::zero(), rel: 0.0 }
    }

    /// The error as one polynomial (its relative part taken at `mag`).
    fn abs_err(&self) -> MagPoly {
        self.err.add(&self.mag.scale(self.rel))
    }

    /// Every value the computed result can take, in magnitude.
    fn reach(&self) -> MagPoly {
        self.mag.add(&self.abs_err())
    }
}


struct Walk<'a> {
    k: &'a Kernel,
    ir: &'a KernelIr,
    ranges: &'a [SymRange],
    locals: Vec<Option<PVal>>,
    /// `|w| <= C` for a local bound to a clamp (computed and exact alike):
    /// what GELU's derivative needs ([`Self::gelu_slope`]).
    clamped: Vec<Option<f64>>,
    memo: StatementMemo<PVal>,
    conditions: Vec<Condition>,
    /// The target's library accuracy (division, `rsqrt`), or why none
    /// applies (a fast-math flag).
    lib: &'a Result<LibraryTable, String>,
}

impl<'a> Walk<'a> {
    fn dim_poly(&self, d: Dim) -> MagPoly {
        match d {
            Dim::Lit(v) => MagPoly::constant(v.max(0) as f64),
            Dim::Sym(id) => match self.k.dim_value[self.k.dim_class[id]] {
                Some(v) => MagPoly::constant(v.max(0) as f64),
                None => MagPoly::symbol(self.k.dim_class[id] as u16),
            },
        }
    }

    /// Round `v` into `fmt`: `(1 + u) err + eta`, `(1 + u) rel + u`, valid
    /// while the computed value stays below the overflow threshold.
    fn round(&mut self, v: PVal, fmt: Format, what: &str, span: Span) -> Result<PVal, Fail> {
        self.round_eta(v, fmt, what, span, true)
    }

    /// [`Self::round`]; without the subnormal term for a sum or difference
    /// of two values of `fmt` (exact when the result is subnormal).
    fn round_eta(&mut self, v: PVal, fmt: Format, what: &str, span: Span, eta: bool) -> Result<PVal, Fail> {
        let eta = if eta { fmt.subnormal_abs() } else { 0.0 };
        self.round_with(v, fmt, fmt.unit_roundoff(), eta, what, span)
    }

    /// A result computed in `fmt` within `u |z| + eta` of the value `z`
    /// it approximates (a rounding, or a library call's documented error),
    /// valid while it stays below the overflow threshold.
    fn round_with(&mut self, v: PVal, fmt: Format, u: f64, eta: f64, what: &str, span: Span) -> Result<PVal, Fail> {
        self.stays_finite(v.reach(), fmt.max_finite(), format!("{} in {}", what, fmt), span)?;
        let onep = add_up(1.0, u);
        Ok(PVal { mag: v.mag, nonneg: v.nonneg, err: v.err.scale(onep).add(&MagPoly::constant(eta)), rel: add_up(mul_up(v.rel, onep), u) })
    }

    /// `poly <= limit`, what keeps `what` finite: refuted where `poly` is a
    /// number above it, else a launch condition where it scales.
    fn stays_finite(&mut self, poly: MagPoly, limit: f64, what: String, span: Span) -> Result<(), Fail> {
        match poly.as_constant() {
            Some(c) if c > limit => fail(format!("{} overflows: |value| reaches {:e}", what, c), span),
            Some(_) => Ok(()),
            None => {
                self.launch_condition(poly, limit, what, span);
                Ok(())
            }
        }
    }

    /// Require `poly <= limit` at the launch, where some launch may break
    /// it (once per polynomial and limit).
    fn launch_condition(&mut self, poly: MagPoly, limit: f64, what: String, span: Span) {
        if poly.max_over(self.ranges) > limit && !self.conditions.iter().any(|c| c.poly == poly && c.limit == limit) {
            self.conditions.push(Condition { poly, limit, what, span });
        }
    }

    /// An operation's result of type `ty`: rounded to f32 (f64 for f64),
    /// then to a half format when `ty` is one, as the printer computes.
    fn round_op(&mut self, v: PVal, ty: Dtype, what: &str, span: Span, additive: bool) -> Result<PVal, Fail> {
        let Some(fmt) = format_of(ty) else { return Ok(v) };
        let compute = if fmt == Format::F64 { Format::F64 } else { Format::F32 };
        let mut out = self.round_eta(v, compute, what, span, !additive)?;
        if fmt != compute {
            out = self.round(out, fmt, what, span)?;
        }
        Ok(out)
    }

    /// A library call (`x/y`, `rsqrt`) on the exact value `v`: its
    /// documented error in f32 (f64 for f64), then a rounding to a half
    /// format when `ty` is one.
    fn library(&mut self, v: PVal, f: Function, ty: Dtype, span: Span) -> Result<PVal, Fail> {
        let lib = match self.lib {
            Ok(lib) => lib,
            Err(why) => return fail(why.clone(), span),
        };
        let compute = if ty == Dtype::F64 { Format::F64 } else { Format::F32 };
        let (u, eta) = lib.cost(f, compute);
        let what = format!("`{}` ({} ulp)", f.c_name(), lib.ulps(f));
        let mut out = self.round_with(v, compute, u, eta, &what, span)?;
        if let Some(fmt) = format_of(ty).filter(|f| *f != compute) {
            out = self.round(out, fmt, &what, span)?;
        }
        Ok(out)
    }

    /// The target's library where its `tanhf` is the accurate one (a
    /// fast intrinsic's error grows with the argument, which no lemma of
    /// GELU's here follows).
    fn accurate_tanh(&self, span: Span) -> Result<&'a LibraryTable, Fail> {
        let lib = match self.lib {
            Ok(lib) => lib,
            Err(why) => return fail(why.clone(), span),
        };
        if lib.grows(Function::Tanh).is_some() {
            return fail("`tanh` as a fast intrinsic, in a bound stated in magnitudes", span);
        }
        Ok(lib)
    }

    /// The tanh form of GELU over a local `v` ([`super::gelu`]), computed
    /// in f32, where `v` is known as `|v| <= mag`, `|v' - v| <= E`:
    ///
    /// - the exact GELU moves by at most `L E` between `v` and the computed
    ///   `v'` (`L`: `tanh_gelu::slope_bound`, 1.672);
    /// - at `v'`, the computed argument's relative error `rho` (its
    ///   roundings, `gamma`) costs a constant (`tanh_gelu::argument_cost`),
    ///   and the library's `tanh` error (at most `rel + abs`, as `|tanh|
    ///   <= 1`) and the argument's subnormal slack cost `|v'| / 2` times
    ///   them;
    /// - the product `0.5 v (1 + t)` rounds `gamma_p` relative to its value,
    ///   restated at the exact GELU (the second-order term kept).
    ///
    /// `|gelu(v)| <= |v|`. The cube `c2 v^3` must stay finite: a launch
    /// condition on `|v'|` where it scales.
    fn gelu(&mut self, g: &super::gelu::TanhGelu, span: Span) -> Result<PVal, Fail> {
        use tokitai_contracts::fp::tanh_gelu::{argument_cost, slope_bound};
        use tokitai_contracts::fp::{bound::gamma, div_up, down};
        let Some(v) = self.locals[g.v].clone() else { return fail("a local read before it is bound", span) };
        let lib = self.accurate_tanh(span)?;
        let fmt = Format::F32;
        let (u, eta) = (fmt.unit_roundoff(), fmt.subnormal_abs());
        let failed = |why: tokitai_contracts::fp::FpError| (why.0, span);
        let rho = gamma(g.argument_roundings as f64, u).map_err(failed)?;
        let gamma_p = gamma(g.product_roundings as f64, u).map_err(failed)?;
        let reach = v.reach();
        let limit = down(down(div_up(fmt.max_finite(), 2.0) / g.c2.max(1.0)).cbrt() * (1.0 - 1e-12));
        self.stays_finite(reach.clone(), limit, "the cube of GELU's argument in f32".to_string(), span)?;
        let (t_rel, t_abs) = lib.cost(Function::Tanh, fmt);
        // Each of the argument's roundings may add `eta` before `c1`
        // scales it; `tanh` moves by at most that much.
        let slack = mul_up(mul_up((g.argument_roundings + 1) as f64, eta), g.c1.max(1.0));
        let per_v = mul_up(0.5, add_up(add_up(t_rel, t_abs), slack));
        let onep = add_up(1.0, gamma_p);
        let err = v.abs_err().scale(mul_up(slope_bound(), onep)).add(&reach.scale(mul_up(per_v, onep))).add(&MagPoly::constant(add_up(mul_up(argument_cost(g.c1, rho), onep), mul_up(4.0, eta))));
        let out = PVal { mag: v.mag.clone(), nonneg: false, err, rel: gamma_p };
        match g.cast {
            Some(cast) => self.converted(out, Dtype::F32, cast),
            None => Ok(out),
        }
    }

    /// GELU's derivative over a clamped local `w` ([`super::gelu::GeluSlope`]),
    /// computed in f32, where `|w| <= C` (the clamp) and `|w' - w| <= E`:
    /// `|d| <= sup |d|`, and the error is `sup |d'| E` plus the
    /// expression's roundings at `w'` (`tokitai_contracts::fp::gelu_slope`,
    /// whose suprema are over `|w| <= C`: a local that is not a clamp is
    /// refused).
    fn gelu_slope(&mut self, g: &super::gelu::GeluSlope, span: Span) -> Result<PVal, Fail> {
        use tokitai_contracts::fp::bound::gamma;
        use tokitai_contracts::fp::gelu_slope::{SlopeForm, SlopeRoundings};
        let Some(w) = self.locals[g.w].clone() else { return fail("a local read before it is bound", span) };
        let Some(c) = self.clamped[g.w] else {
            return fail("GELU's derivative of a value that is not clamped: bind it as `min(max(v, -8.0), 8.0)` (its bound in magnitudes holds where the value is bounded)", span);
        };
        let lib = self.accurate_tanh(span)?;
        let fmt = Format::F32;
        let (u, eta) = (fmt.unit_roundoff(), fmt.subnormal_abs());
        let failed = |why: tokitai_contracts::fp::FpError| (why.0, span);
        let form = SlopeForm { c1: g.c1, c2: g.c2, k: g.k, p: g.p, clamp: c };
        let sup = form.suprema().map_err(failed)?;
        let (tanh_rel, tanh_abs) = lib.cost(Function::Tanh, fmt);
        let rounds = SlopeRoundings {
            argument_rel: gamma(g.argument_roundings as f64, u).map_err(failed)?,
            // Each of the argument's roundings may add `eta` before `c1`
            // scales it (as in [`Self::gelu`]).
            argument_abs: mul_up(mul_up((g.argument_roundings + 1) as f64, eta), g.c1.max(1.0)),
            tanh_rel,
            tanh_abs,
            product_roundings: g.product_roundings,
            u,
            eta,
        };
        let cost = form.rounding_cost(&sup, &rounds).map_err(failed)?;
        let err = w.abs_err().scale(sup.slope).add(&MagPoly::constant(cost));
        Ok(PVal { mag: MagPoly::constant(sup.value), nonneg: false, err, rel: 0.0 })
    }

    /// `x / d` without rounding, for a divisor `d` that is a size (a dim,
    /// converted or not) or a positive constant, held exactly: its lower
    /// bound is known, so the quotient's bounds are the dividend's divided
    /// by `d` ([`MagPoly::div_symbol`]).
    fn divided(&mut self, x: PVal, b: &TExpr, span: Span) -> Result<PVal, Fail> {
        let y = self.float(b)?;
        if !y.err.is_zero() || y.rel != 0.0 {
            return fail("a divisor that is not held exactly: a bound in magnitudes divides by sizes and exact positive constants only", b.span);
        }
        let inner = match &b.kind {
            TExprKind::Cast(c) => c.as_ref(),
            _ => b,
        };
        let by = |p: &MagPoly, w: &Walk| -> Result<MagPoly, Fail> {
            match (&inner.kind, y.mag.as_constant()) {
                (TExprKind::Dim(_) | TExprKind::Const(_), Some(c)) if c > 0.0 && y.nonneg => Ok(p.scale(tokitai_contracts::fp::div_up(1.0, c))),
                (TExprKind::Dim(d), None) => {
                    let s = symbol(w.k, Sym::Dim(*d));
                    let lo = w.ranges[s as usize].lo;
                    if lo > 0.0 {
                        Ok(p.div_symbol(s, lo))
                    } else {
                        fail(format!("a division by `{}`, which `requires` lets be 0: add `{} >= 1`", w.k.dims[*d].name, w.k.dims[*d].name), span)
                    }
                }
                _ => fail("a divisor that is not a size or a positive constant: a bound in magnitudes divides by those only; give this value's inputs numeric domains", span),
            }
        };
        Ok(PVal { mag: by(&x.mag, self)?, nonneg: x.nonneg, err: by(&x.err, self)?, rel: x.rel })
    }

    /// `rsqrt(a)` without rounding, for `a >= lo > 0`: `|rsqrt(a)| <=
    /// lo^-1/2`. The computed argument is `a (1 + t)` with `|t| <= d = rel +
    /// err / lo`; while `d <= 1/2` (a launch-time condition when `err`
    /// scales), `|rsqrt(a (1 + t)) - rsqrt(a)| = rsqrt(a) |(1 + t)^-1/2 -
    /// 1| <= rsqrt(a) c d`, with `c = 2 (sqrt 2 - 1)` the chord of the
    /// convex `(1 - d)^-1/2 - 1` over [0, 1/2].
    fn reciprocal_sqrt(&mut self, v: PVal, lo: f64, span: Span) -> Result<PVal, Fail> {
        use tokitai_contracts::fp::{div_up, down, up};
        if lo.is_nan() || lo <= 0.0 {
            return fail("`rsqrt` of a value not bounded away from 0: a bound in magnitudes needs a positive term with a numeric domain (`var + eps`, `eps in [1e-5, 1e-5]`)", span);
        }
        if v.rel >= 0.5 {
            return fail(format!("the argument of `rsqrt` has a relative error of {:e}: no useful bound", v.rel), span);
        }
        let limit = down(down(0.5 - v.rel) * lo);
        let what = "the error of `rsqrt`'s argument below half its least value".to_string();
        match v.err.as_constant() {
            Some(c) if c > limit => return fail(format!("{}: it reaches {:e}, above {:e}", what, c, limit), span),
            Some(_) => {}
            None => self.launch_condition(v.err.clone(), limit, what, span),
        }
        const CHORD: f64 = 0.828_427_124_746_190_2; // 2 (sqrt 2 - 1), rounded up below
        let c = up(CHORD);
        let top = up(div_up(1.0, down(lo.sqrt())));
        Ok(PVal { mag: MagPoly::constant(top), nonneg: true, err: v.err.scale(div_up(mul_up(c, top), lo)), rel: mul_up(c, v.rel) })
    }

    /// A lower bound of `e`'s exact value: sums of inputs with numeric
    /// domains and constants, or 0 for any other non-negative value
    /// (`-inf` when nothing is known).
    fn lower_bound(&mut self, e: &TExpr) -> f64 {
        let from_domain = |w: &Walk, tensor: Option<TensorId>, scalar: Option<usize>| {
            w.domain_of(tensor, scalar).filter(|(_, d)| d.magnitude.is_none()).map(|(_, d)| super::stored_domain(d.lo, d.hi, e.ty).lo)
        };
        let known = match &e.kind {
            TExprKind::Binary(BinOp::Add, a, b) => Some(tokitai_contracts::fp::down(self.lower_bound(a) + self.lower_bound(b))),
            TExprKind::Const(Const::Float(c)) => Some(*c),
            TExprKind::Const(Const::Int(v)) => Some(*v as f64),
            TExprKind::Cast(a) if a.ty.is_float() => Some(self.lower_bound(a)),
            TExprKind::Scalar(s) => from_domain(self, None, Some(*s)),
            TExprKind::Load { tensor, .. } if matches!(self.k.tensors[*tensor].role, TensorRole::Input | TensorRole::Inout) => from_domain(self, Some(*tensor), None),
            _ => None,
        };
        known.unwrap_or_else(|| if matches!(self.float(e), Ok(v) if v.nonneg) { 0.0 } else { f64::NEG_INFINITY })
    }

    /// `(t(c) - m) * s`, a centred value times its row's `rsqrt(var +
    /// eps)` with `eps >= 0` ([`Patterns::normalised`]): `|product| <=
    /// sqrt(n)`, `n` the row length's upper bound.
    fn normalised_bound(&mut self, a: &TExpr, b: &TExpr) -> Option<f64> {
        let (n, eps) = Patterns { k: self.k }.normalised(a, b)?;
        if self.lower_bound(eps) < 0.0 {
            return None;
        }
        let hi = self.dim_poly(n).max_over(self.ranges);
        hi.is_finite().then(|| tokitai_contracts::fp::up(hi.sqrt()))
    }

    /// The `domain` entry of an input tensor or scalar, with its index.
    fn domain_of(&self, tensor: Option<TensorId>, scalar: Option<usize>) -> Option<(usize, &'a tir::DomainRange)> {
        self.k.domain.iter().enumerate().find(|(_, d)| (tensor.is_some() && d.tensor == tensor) || (scalar.is_some() && d.scalar == scalar))
    }

    fn input(&self, tensor: Option<TensorId>, scalar: Option<usize>, ty: Dtype, name: &str, span: Span) -> Result<PVal, Fail> {
        let Some((i, d)) = self.domain_of(tensor, scalar) else {
            return fail(format!("`{}` has no `domain`: a tolerance needs the range of every float input it depends on", name), span);
        };
        let nonneg = d.lo >= 0.0;
        Ok(match &d.magnitude {
            // The magnitude is measured on the stored values: no widening.
            Some(_) => PVal::exact(MagPoly::symbol((self.k.dims.len() + i) as u16), nonneg),
            None => {
                let r = super::stored_domain(d.lo, d.hi, ty);
                PVal::exact(MagPoly::constant(r.mag()), nonneg)
            }
        })
    }

    fn stmt_value(&mut self, t: TensorId, span: Span) -> Result<PVal, Fail> {
        let si = match self.memo.lookup(self.k, t, span)? {
            Lookup::Known(v) => return Ok(v),
            Lookup::Evaluate(si) => si,
        };
        let stmt = &self.k.stmts[si];
        let out = self.float(&stmt.value).and_then(|v| {
            let dt = self.k.tensors[t].dtype;
            match (format_of(dt), format_of(stmt.value.ty)) {
                (Some(to), Some(from)) if !from.fits_in(to) => self.round(v, to, &format!("the store of `{}`", self.k.tensors[t].name), stmt.span),
                _ => Ok(v),
            }
        });
        self.memo.finish(t, out)
    }

    fn float(&mut self, e: &TExpr) -> Result<PVal, Fail> {
        let ty = e.ty;
        match &e.kind {
            TExprKind::Const(Const::Float(c)) => {
                if !c.is_finite() {
                    return fail("a constant that is not finite, in a value with a tolerance", e.span);
                }
                let stored = super::stored_literal(*c, format_of(ty).unwrap_or(Format::F64));
                Ok(PVal { mag: MagPoly::constant(c.abs()), nonneg: *c >= 0.0, err: MagPoly::constant((stored - c).abs()), rel: 0.0 })
            }
            TExprKind::Const(Const::Int(v)) => Ok(PVal::exact(MagPoly::constant((*v as f64).abs()), *v >= 0)),
            TExprKind::Scalar(s) if ty.is_float() => {
                let name = self.k.scalars[*s].name.clone();
                self.input(None, Some(*s), ty, &name, e.span)
            }
            TExprKind::Dim(d) => Ok(PVal::exact(self.dim_poly(Dim::Sym(*d)), true)),
            // An index variable used as a value: below its extent.
            TExprKind::Var(v) => Ok(PVal::exact(self.dim_poly(self.k.vars[*v].extent), true)),
            TExprKind::Local(l) => match &self.locals[*l] {
                Some(v) => Ok(v.clone()),
                None => fail("a local read before it is bound", e.span),
            },
            TExprKind::Load { tensor, .. } => {
                let info = &self.k.tensors[*tensor];
                match info.role {
                    TensorRole::Intermediate | TensorRole::Output => self.stmt_value(*tensor, e.span),
                    TensorRole::Input | TensorRole::Inout if ty.is_float() => {
                        let name = info.name.clone();
                        self.input(Some(*tensor), None, ty, &name, e.span)
                    }
                    _ => fail(format!("`{}` is read as a value but is not a float: a magnitude bound follows float values only", info.name), e.span),
                }
            }
            TExprKind::Unary(UnOp::Neg, a) => {
                let v = self.float(a)?;
                Ok(PVal { nonneg: v.mag.is_zero(), ..v })
            }
            TExprKind::Binary(op, a, b) => self.binary(*op, a, b, e),
            TExprKind::Call(f, args) => self.call(*f, args, e),
            TExprKind::Cast(a) => self.cast(a, e),
            // An integer bound by `let` (an inlined function's index
            // argument) only decides conditions, which are not followed.
            TExprKind::Let { local, value, body } if !value.ty.is_float() => {
                self.locals[*local] = None;
                self.float(body)
            }
            TExprKind::Let { local, value, body } => {
                if let Some(g) = super::gelu::tanh_gelu(e) {
                    return self.gelu(&g, e.span);
                }
                if let Some(g) = super::gelu::gelu_slope(e) {
                    return self.gelu_slope(&g, e.span);
                }
                let v = self.float(value)?;
                self.locals[*local] = Some(v);
                self.clamped[*local] = super::gelu::clamp(value).map(|(_, lo, hi)| clamp_bound(lo, hi, value.ty));
                self.float(body)
            }
            TExprKind::Reduce { op, var, body } => self.reduce(*op, *var, body, e),
            _ => fail("a value a magnitude bound cannot follow (a comparison or an integer computation)", e.span),
        }
    }

    /// `a * b` without rounding: `|a'b' - ab| <= |b| Ea + |a| Eb + Ea Eb`
    /// with `Ea = Aa + ra |a|`: relative part `ra + rb + ra rb`, absolute
    /// part `Aa mag_b (1 + rb) + Ab mag_a (1 + ra) + Aa Ab`.
    fn product(x: &PVal, y: &PVal, square: bool) -> PVal {
        let rel = add_up(add_up(x.rel, y.rel), mul_up(x.rel, y.rel));
        let err = x.err.mul(&y.mag).scale(add_up(1.0, y.rel)).add(&y.err.mul(&x.mag).scale(add_up(1.0, x.rel))).add(&x.err.mul(&y.err));
        PVal { mag: x.mag.mul(&y.mag), nonneg: square || (x.nonneg && y.nonneg), err, rel }
    }

    /// A value that is one of `x` and `y`, computed and exact alike (or
    /// within the larger error of the two): the sums of their bounds bound
    /// it, whichever it is.
    fn either(x: &PVal, y: &PVal) -> PVal {
        PVal { mag: x.mag.add(&y.mag), nonneg: x.nonneg && y.nonneg, err: x.abs_err().add(&y.abs_err()), rel: 0.0 }
    }

    fn binary(&mut self, op: BinOp, a: &TExpr, b: &TExpr, e: &TExpr) -> Result<PVal, Fail> {
        if !e.ty.is_float() {
            return fail(format!("`{}` on integers, used as a value", op.symbol()), e.span);
        }
        let (x, y) = (self.float(a)?, self.float(b)?);
        let exact = match op {
            BinOp::Add | BinOp::Sub => {
                let mag = x.mag.add(&y.mag);
                // Two non-negative addends: each error is relative to its
                // addend, so to their sum. Otherwise no cancellation is
                // assumed away: the errors add in absolute terms.
                if op == BinOp::Add && x.nonneg && y.nonneg {
                    PVal { mag, nonneg: true, err: x.err.add(&y.err), rel: x.rel.max(y.rel) }
                } else {
                    PVal { mag, nonneg: false, err: x.abs_err().add(&y.abs_err()), rel: 0.0 }
                }
            }
            BinOp::Mul => {
                let mut p = Self::product(&x, &y, same_expr(a, b));
                if let Some(r) = self.normalised_bound(a, b) {
                    p.mag = MagPoly::constant(r);
                }
                p
            }
            BinOp::Div => {
                let v = self.divided(x, b, e.span)?;
                return self.library(v, Function::Div, e.ty, e.span);
            }
            _ => {
                return fail(
                    format!("`{}` is not polynomial: a bound in magnitudes follows + - *, sums and division by a size; give this value's inputs numeric domains", op.symbol()),
                    e.span,
                )
            }
        };
        self.round_op(exact, e.ty, &format!("`{}`", op.symbol()), e.span, op != BinOp::Mul)
    }

    fn call(&mut self, f: Builtin, args: &[TExpr], e: &TExpr) -> Result<PVal, Fail> {
        match f {
            Builtin::Abs => {
                let v = self.float(&args[0])?;
                Ok(PVal { nonneg: true, ..v })
            }
            // A clamp to constants `lo < 0 < hi`: within `max(|lo|, |hi|)`
            // computed and exact alike, and 1-Lipschitz (its constants'
            // own roundings added).
            Builtin::Min | Builtin::Max if e.ty.is_float() && super::gelu::clamp(e).is_some() => {
                let Some((x, lo, hi)) = super::gelu::clamp(e) else { unreachable!("matched just above") };
                let v = self.float(x)?;
                let fmt = format_of(e.ty).unwrap_or(Format::F64);
                let moved = |c: f64| (super::stored_literal(c, fmt) - c).abs();
                let err = v.abs_err().add(&MagPoly::constant(moved(lo).max(moved(hi))));
                Ok(PVal { mag: MagPoly::constant(clamp_bound(lo, hi, e.ty)), nonneg: false, err, rel: 0.0 })
            }
            Builtin::Min | Builtin::Max if e.ty.is_float() => {
                let (x, y) = (self.float(&args[0])?, self.float(&args[1])?);
                // `|max(a', b') - max(a, b)| <= max(|ea|, |eb|)`.
                let nonneg = if f == Builtin::Max { x.nonneg || y.nonneg } else { x.nonneg && y.nonneg };
                Ok(PVal { nonneg, ..Self::either(&x, &y) })
            }
            // A condition on integers only (`e == i0[r]`) is decided alike
            // in the kernel and exactly: the result is one operand, with
            // its error.
            Builtin::Select if e.ty.is_float() && !mentions_float(&args[0]) => {
                let (x, y) = (self.float(&args[1])?, self.float(&args[2])?);
                Ok(Self::either(&x, &y))
            }
            Builtin::Rsqrt => {
                let v = self.float(&args[0])?;
                let lo = self.lower_bound(&args[0]);
                let r = self.reciprocal_sqrt(v, lo, e.span)?;
                self.library(r, Function::Rsqrt, e.ty, e.span)
            }
            _ => fail(format!("`{}` is not polynomial: a bound in magnitudes follows + - *, sums, abs, min, max, selects on integer conditions, division by a size and rsqrt of a value bounded away from 0; give its inputs numeric domains", f.name()), e.span),
        }
    }

    fn cast(&mut self, a: &TExpr, e: &TExpr) -> Result<PVal, Fail> {
        let v = self.float(a)?;
        self.converted(v, a.ty, e)
    }

    /// `v`, a value of type `from`, converted as `e` converts it.
    fn converted(&mut self, v: PVal, from: Dtype, e: &TExpr) -> Result<PVal, Fail> {
        let to = e.ty;
        let Some(tf) = format_of(to) else { return fail(format!("a conversion to {} in a value with a tolerance", to), e.span) };
        if !from.is_float() {
            // An integer (dim, index, literal) made a float: exact while the
            // format holds every integer up to it.
            let top = v.mag.max_over(self.ranges);
            return if tf.holds_integers_up_to(top) { Ok(v) } else { self.round_op(v, to, &format!("the conversion to {}", to), e.span, false) };
        }
        let ff = format_of(from).unwrap_or(Format::F64);
        if ff.fits_in(tf) {
            return Ok(v);
        }
        // Halves convert from f64 through f32, as the printer does.
        let mut out = v;
        if ff == Format::F64 && tf != Format::F32 {
            out = self.round(out, Format::F32, "the conversion", e.span)?;
        }
        self.round(out, tf, "the conversion", e.span)
    }

    fn reduce(&mut self, op: RedOp, var: tir::VarId, body: &TExpr, e: &TExpr) -> Result<PVal, Fail> {
        let extent = self.k.vars[var].extent;
        let name = self.k.vars[var].name.clone();
        let n = self.dim_poly(extent);
        let n_hi = n.max_over(self.ranges);
        match op {
            RedOp::SumMod => fail("a `summod` in a bound stated in magnitudes", e.span),
            RedOp::Max | RedOp::Min => {
                let t = self.float(body)?;
                Ok(PVal { mag: t.mag.clone(), nonneg: t.nonneg, err: t.abs_err(), rel: 0.0 })
            }
            RedOp::Sum => {
                let fmt = format_of(body.ty).unwrap_or(Format::F32);
                if fmt != Format::F32 && fmt != Format::F64 {
                    return fail(format!("a sum accumulated in {}: accumulate in f32 (cast the terms) to get a useful bound", fmt), e.span);
                }
                if !n_hi.is_finite() {
                    return fail(format!("the error bound grows with the length of `sum({})`, which `requires` does not bound: add an upper bound on it", name), e.span);
                }
                // A centred sum of squares, `sum (t - m')^2` with `m'` the
                // computed mean of the same terms and `e = m' - m` its
                // error: `sum (t - m')^2 = sum (t - m)^2 + n e^2` exactly
                // (the deviations from the exact mean sum to zero). The
                // terms are bounded with `m'` taken as exact, anywhere in
                // its reach; `n e^2` is added after the sum.
                let centred = Patterns { k: self.k }.centred_square(body, var);
                let mean_saved = match centred {
                    Some(mean) => {
                        let m = self.stmt_value(mean, e.span)?;
                        self.memo.done.insert(mean, PVal::exact(m.reach(), m.nonneg));
                        Some((mean, m))
                    }
                    None => None,
                };
                // A fused multiply-add's product is exact: its one rounding
                // is the addition's.
                let term = match tir::fma_operands(body) {
                    Some((a, b)) => self.float(a).and_then(|x| Ok(Self::product(&x, &self.float(b)?, same_expr(a, b)))),
                    None => self.float(body),
                };
                if let Some((mean, m)) = &mean_saved {
                    self.memo.done.insert(*mean, m.clone());
                }
                let term = term?;
                let order = self.ir.reduction_order.get(&var).copied().unwrap_or(ReductionOrder::Sequential);
                if let Some(why) = super::matrix_unit_operands(order, body) {
                    return fail(why, e.span);
                }
                // Height of the summation tree, as a polynomial in `n`.
                let height = match order {
                    ReductionOrder::Sequential => n.clone(),
                    ReductionOrder::Block { threads, warp } => {
                        let levels = 2.0 * (warp as f64).log2().ceil();
                        n.scale(tokitai_contracts::fp::div_up(1.0, threads as f64)).add(&MagPoly::constant(1.0 + levels))
                    }
                    // A thread adds at most its `slots` runs of `width`
                    // (one run: `width`, whatever the row's length), and
                    // at most ceil(ceil(n / w) / t) w <= n / t + w.
                    ReductionOrder::BlockRuns { threads, warp, width, slots } => {
                        let levels = 2.0 * (warp as f64).log2().ceil();
                        if slots == 1 {
                            MagPoly::constant(width as f64 + levels)
                        } else {
                            n.scale(tokitai_contracts::fp::div_up(1.0, threads as f64)).add(&MagPoly::constant(width as f64 + levels))
                        }
                    }
                    // ceil(n / (g c)) <= n / (g c) + 1, the chains, the tree.
                    ReductionOrder::Columns { groups, chains } => {
                        let levels = (groups as f64).log2().ceil();
                        n.scale(tokitai_contracts::fp::div_up(1.0, (groups * chains) as f64)).add(&MagPoly::constant(1.0 + chains as f64 + levels))
                    }
                    // The unit's group error as roundings, then one per
                    // promotion: ceil(n / (k q)) <= n / (k q) + 1.
                    ReductionOrder::MatrixUnit { k, per_promotion } => {
                        let c = tokitai_contracts::fp::matrix_unit::coefficients(k, per_promotion);
                        let unit = if term.nonneg { c.relative } else { c.per_term };
                        n.scale(tokitai_contracts::fp::div_up(1.0, (k * per_promotion) as f64)).add(&MagPoly::constant(add_up(unit, 1.0)))
                    }
                };
                let (h_max, _) = summation_height(order, n_hi as i64, term.nonneg);
                let u = fmt.unit_roundoff();
                let hu = mul_up(h_max, u);
                if hu >= 0.5 {
                    return fail(format!("{} chained roundings of unit roundoff {:e} admit no useful bound", h_max, u), e.span);
                }
                // gamma_h <= h u / (1 - h_max u).
                let gamma = height.scale(tokitai_contracts::fp::div_up(u, tokitai_contracts::fp::down(1.0 - hu)));
                // Additions are exact when their result is subnormal; a
                // fused multiply-add is not (its product is not a float).
                let fused = tir::fma_operands(body).is_some();
                let eta = if fused { n.scale(fmt.subnormal_abs()) } else { MagPoly::zero() };
                let onep_gamma = gamma.add(&MagPoly::constant(1.0));
                let exact_mag = n.mul(&term.mag);
                // Sum of the terms' errors: n At + rt sum|t|; the rounding:
                // gamma sum|t'| <= gamma ((1 + rt) sum|t| + n At).
                let n_at = n.mul(&term.err).mul(&onep_gamma);
                let out = if term.nonneg {
                    // sum|t| = |sum t|: the error stays relative, with
                    // gamma at its largest (a number, from `requires`).
                    let g = gamma.max_over(self.ranges);
                    PVal { mag: exact_mag, nonneg: true, err: n_at.add(&eta), rel: add_up(term.rel, mul_up(g, add_up(1.0, term.rel))) }
                } else {
                    let sum_abs = exact_mag.clone();
                    let err = n_at.add(&eta).add(&sum_abs.scale(term.rel)).add(&gamma.mul(&sum_abs).scale(add_up(1.0, term.rel)));
                    PVal { mag: exact_mag, nonneg: false, err, rel: 0.0 }
                };
                let out = match &mean_saved {
                    Some((_, m)) => {
                        let e = m.abs_err();
                        PVal { err: out.err.add(&n.mul(&e).mul(&e).scale(add_up(1.0, out.rel))), ..out }
                    }
                    None => out,
                };
                // The accumulator must not overflow.
                let reach = out.reach();
                self.launch_condition(reach, fmt.max_finite(), format!("the {} sum `sum({})`", fmt, name), e.span);
                Ok(out)
            }
            RedOp::Argmax => fail("an argmax used as a value", e.span),
        }
    }
}

/// Is `d <= t` over `ranges`? A proof by [`MagPoly::dominated_by`], else a
/// point where it fails among the corners of the box (magnitudes tried at
/// several scales, where an unbounded one is the usual culprit).
fn compare(d: &MagPoly, t: &MagPoly, ranges: &[SymRange]) -> Verdict {
    if let Some(dom) = d.dominated_by(t, ranges) {
        return Verdict::Within(dom);
    }
    // Corners: every bounded symbol at its upper end, then at its lower
    // end; an unbounded one (a magnitude) at 1, 1e6 and 1e-6 in turn.
    for upper in [true, false] {
        for scale in [1.0, 1e6, 1e-6] {
            let at: Vec<f64> = ranges.iter().map(|r| if !r.hi.is_finite() { r.lo.max(scale) } else if upper { r.hi } else { r.lo }).collect();
            let (b, tol) = (d.eval(&at), t.eval(&at));
            // `eval` rounds up; the tolerance at the point is at most `tol`,
            // so a margin of one part in 1e12 keeps the claim rigorous.
            if b > tol * (1.0 + 1e-12) {
                return Verdict::Exceeds { at, bound: b, tolerance: tol };
            }
        }
    }
    Verdict::Undecided("the bound has a term that no term of the tolerance pays for, and no corner of the launch space exceeds it".into())
}

/// Does `e` compute with a float anywhere (so a rounded value might decide it)?
/// `|clamp(x)| <= C` for a clamp to `[lo, hi]`, its constants as written
/// and as stored in `ty`.
fn clamp_bound(lo: f64, hi: f64, ty: Dtype) -> f64 {
    let fmt = format_of(ty).unwrap_or(Format::F64);
    [lo, hi, super::stored_literal(lo, fmt), super::stored_literal(hi, fmt)].iter().fold(0.0f64, |m, c| m.max(c.abs()))
}

fn mentions_float(e: &TExpr) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= x.ty.is_float());
    found
}

/// Derive the bound of every output with a tolerance, in dims and magnitudes.
pub fn analyze(k: &Kernel, ir: &KernelIr) -> MagnitudeAnalysis {
    let (symbols, ranges) = symbols(k);
    // An intrinsic's error grows with its argument, which a polynomial in
    // the launch's magnitudes does not carry: not modelled here.
    let lib = super::library_for(ir).and_then(|t| if t.growth.is_empty() { Ok(t) } else { Err("bounds in launch-time magnitudes do not model the fast intrinsics".to_string()) });
    let mut outputs = Vec::new();
    for t in &k.tolerance {
        let tolerance = (tolerance_poly(k, t), t.rel);
        let mut w = Walk { k, ir, ranges: &ranges, locals: vec![None; k.locals.len()], clamped: vec![None; k.locals.len()], memo: StatementMemo::new(), conditions: Vec::new(), lib: &lib };
        let name = k.tensors[t.tensor].name.clone();
        let mut out = OutputBound { tensor: t.tensor, output: name, span: t.span, abs: MagPoly::zero(), rel: 0.0, tolerance, conditions: Vec::new(), failure: None, verdict: None };
        match w.stmt_value(t.tensor, t.span) {
            Err(f) => out.failure = Some(f),
            Ok(v) => {
                out.abs = v.err;
                out.rel = v.rel;
                out.conditions = w.conditions;
                out.verdict = Some(if out.rel > out.tolerance.1 {
                    Verdict::Exceeds { at: Vec::new(), bound: out.rel, tolerance: out.tolerance.1 }
                } else {
                    compare(&out.abs, &out.tolerance.0, &ranges)
                });
            }
        }
        outputs.push(out);
    }
    MagnitudeAnalysis { kernel: ir.name.clone(), symbols, ranges, outputs }
}

/// Every symbol's value at one launch: its dims, and each magnitude as
/// the largest `|value|` of its input (`tensors` in the order of the
/// kernel's tensor parameters, `scalars` in signature order).
pub fn symbol_values(k: &Kernel, dims: &[i64], scalars: &[f64], tensors: &[Vec<f64>]) -> Vec<f64> {
    let mut at: Vec<f64> = (0..k.dims.len()).map(|d| dims[k.dim_class[d]].max(0) as f64).collect();
    let tensor_params: Vec<TensorId> = k.params.iter().filter_map(|p| if let tir::Param::Tensor(t) = p { Some(*t) } else { None }).collect();
    let scalar_params: Vec<usize> = k.params.iter().filter_map(|p| if let tir::Param::Scalar(s) = p { Some(*s) } else { None }).collect();
    for d in &k.domain {
        let largest = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let value = match (d.tensor, d.scalar) {
            (Some(t), _) => tensor_params.iter().position(|p| *p == t).and_then(|i| tensors.get(i)).map(|v| largest(v)),
            (_, Some(s)) => scalar_params.iter().position(|p| *p == s).and_then(|i| scalars.get(i)).map(|v| v.abs()),
            _ => None,
        };
        at.push(value.unwrap_or(f64::INFINITY));
    }
    at
}

/// The derived bound of each output `(abs, rel)` at one launch, or `None`
/// when the launch breaks a condition the bounds need (or an input is not
/// finite): then no bound is claimed for it.
pub fn bound_at(k: &Kernel, a: &MagnitudeAnalysis, dims: &[i64], scalars: &[f64], tensors: &[Vec<f64>]) -> Option<crate::soundness::OutputBounds> {
    let at = symbol_values(k, dims, scalars, tensors);
    if at.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut out = Vec::new();
    for o in &a.outputs {
        if o.conditions.iter().any(|c| c.poly.eval(&at) > c.limit) {
            return None;
        }
        out.push((o.tensor, (o.failure.is_none()).then(|| (o.abs.eval(&at), o.rel))));
    }
    Some(out)
}
