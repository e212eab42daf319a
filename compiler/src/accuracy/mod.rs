//! Derived floating-point error bounds of a kernel's outputs (design.md,
//! obligation 8; issue 7).
//!
//! For every output with a `tolerance`, a rigorous bound on
//! `|kernel - exact|` over the declared `domain` and every launch that meets
//! `requires`:
//!
//! - **Range analysis**: outward-rounded intervals of every intermediate's
//!   exact value, from the input domains and the dims' bounds, with two
//!   structural facts about reductions that intervals alone lose (a term
//!   minus the maximum of its row is at most 0; a non-negative term over the
//!   sum of its row is at most 1; see [`Walk::lemma`]).
//! - **Error propagation** through every operation with the rules of
//!   [`tokitai_contracts::fp::bound`]: each rounding in the dtype the kernel
//!   computes in (`u` = 2^-24 for f32, 2^-11 for the f16 store), the target's
//!   documented library error for `expf`, `tanhf`, `sqrtf`, `rsqrtf`, `logf`
//!   and division ([`LibraryTable`]), second-order terms kept.
//! - **Summation order from `KernelIr`**: each reduction's order is the one
//!   the schedule recorded and the printer follows (`ReductionOrder`):
//!   a sequential loop of `n` terms is a chain of `n` roundings, a block
//!   reduction `ceil(n / threads)` sequential terms then two butterflies of
//!   `log2(warp)` levels. Sums of products use the kernel's fused
//!   multiply-adds (one rounding per term, not two) exactly where the
//!   kernel and its mirror do ([`tir::fma_operands`]).
//! - **Splitting**: the dims that change a bound (reduction lengths, dims
//!   used as values) are split into ranges at most 12.5% wide, so that a
//!   sum's error and the division by its length stay correlated; each range
//!   is analysed on its own and the tolerance must hold in every one.
//!
//! The analysis reads the kernel's value expressions from the typed IR (the
//! same expressions the printer lowers, unchanged apart from the order and
//! fusion that `KernelIr` records); what it does not model is listed among
//! the report's non-claims.

pub mod computed;
mod gelu;
mod logistic;
pub mod magnitude;
mod patterns;
mod ratio;
mod splitting;
use patterns::Patterns;
use splitting::{pieces, relevant_dims, split, splittable, SplitVar};

use crate::kir::{KernelIr, ReductionOrder};
use crate::span::Span;
use crate::syntax::ast::{BinOp, RedOp, UnOp};
use crate::tir::{self, Builtin, Const, Dim, Kernel, TExpr, TExprKind, TensorId, TensorRole, VarId};
use crate::types::Dtype;
use std::collections::HashMap;
use tokitai_contracts::fp::{mul_up, up, AVal, ErrBound, Format, FpError, Function, Interval, LibraryTable, SourceId};

/// One source of error, for reports: "rounding of `*` to f32".
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub label: String,
    pub span: Span,
}

/// A contribution's share of a bound at one point, for reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Share {
    pub label: String,
    pub span: Span,
    /// Its value at the point (`abs + rel |exact|`).
    pub value: f64,
    /// Fraction of the total bound at the point.
    pub fraction: f64,
}

/// The bound of one output over one range of the dims.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionBound {
    /// `K in [2048, 2303]`, for every dim that was split.
    pub dims: Vec<(String, i64, i64)>,
    /// `x in [-8, -7.67]`, for every input value that was split.
    pub values: Vec<(String, f64, f64)>,
    /// Range of the exact output.
    pub range: Interval,
    pub err: ErrBound,
}

impl RegionBound {
    pub fn describe(&self) -> String {
        RegionBound::described(&self.dims, &self.values)
    }

    fn described(dims: &[(String, i64, i64)], values: &[(String, f64, f64)]) -> String {
        let mut parts: Vec<String> = dims.iter().map(|(n, lo, hi)| if lo == hi { format!("{} = {}", n, lo) } else { format!("{} in [{}, {}]", n, lo, hi) }).collect();
        parts.extend(values.iter().map(|(n, lo, hi)| format!("{} in [{:.4}, {:.4}]", n, lo, hi)));
        if parts.is_empty() {
            "every launch".into()
        } else {
            parts.join(", ")
        }
    }
}

/// What was derived for one output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputAccuracy {
    pub tensor: TensorId,
    pub output: String,
    /// Where the output's tolerance is written.
    pub span: Span,
    /// The declared `tolerance` (abs, rel).
    pub tolerance: (f64, f64),
    /// One bound per range of the split dims; empty when `failure` is set.
    pub regions: Vec<RegionBound>,
    /// Why no bound was derived, and where.
    pub failure: Option<(String, Span, String)>,
}

impl OutputAccuracy {
    /// `(max abs, max rel)` over the regions: a bound of the form
    /// `abs + rel |exact|` that holds for every launch.
    pub fn envelope(&self) -> Option<(f64, f64)> {
        if self.failure.is_some() || self.regions.is_empty() {
            return None;
        }
        Some(self.regions.iter().map(|r| r.err.total()).fold((0.0f64, 0.0f64), |(a, r), (x, y)| (a.max(x), r.max(y))))
    }

    /// For each region, the largest `bound / tolerance` over its exact
    /// range (the check is linear in `|exact|`, so its ends suffice), and
    /// the `|exact|` where it is reached.
    pub fn ratios(&self) -> Vec<(f64, f64)> {
        let (ta, tr) = self.tolerance;
        self.regions
            .iter()
            .map(|r| {
                [r.range.mig(), r.range.mag()]
                    .into_iter()
                    .map(|x| {
                        let b = r.err.at(x);
                        let t = ta + tr * x;
                        (if b == 0.0 { 0.0 } else if t == 0.0 { f64::INFINITY } else { b / t }, x)
                    })
                    .fold((0.0f64, 0.0f64), |best, c| if c.0 > best.0 { c } else { best })
            })
            .collect()
    }

    /// The region where the bound comes closest to (or goes furthest past)
    /// the tolerance: its index, the ratio and the `|exact|` there.
    pub fn worst(&self) -> Option<(usize, f64, f64)> {
        self.ratios().into_iter().enumerate().fold(None, |best: Option<(usize, f64, f64)>, (i, (r, x))| match best {
            Some(b) if b.1 >= r => Some(b),
            _ => Some((i, r, x)),
        })
    }

    /// Is the bound within the tolerance in every region?
    pub fn within_tolerance(&self) -> bool {
        self.failure.is_none() && !self.regions.is_empty() && self.ratios().iter().all(|(r, _)| *r <= 1.0)
    }
}

/// Everything derived for one kernel (one schedule of it).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelAccuracy {
    pub kernel: String,
    /// The library assumptions used, in words.
    pub library: String,
    pub sources: Vec<Source>,
    pub outputs: Vec<OutputAccuracy>,
}

impl KernelAccuracy {
    /// The contributions of a region's bound at `|exact| = x`, largest first.
    pub fn shares(&self, region: &RegionBound, x: f64) -> Vec<Share> {
        let total = region.err.at(x);
        let mut out: Vec<Share> = region
            .err
            .parts
            .iter()
            .map(|c| {
                let v = c.abs + c.rel * x;
                let s = &self.sources[c.source];
                Share { label: s.label.clone(), span: s.span, value: v, fraction: if total > 0.0 { v / total } else { 0.0 } }
            })
            .collect();
        out.sort_by(|a, b| b.value.total_cmp(&a.value));
        out
    }
}

/// The value of one expression in the abstract.
#[derive(Clone, Debug)]
enum V {
    Float(AVal),
    /// An integer: its range, and whether the kernel computes it exactly
    /// as the real-number semantics does (false after an argmax over
    /// rounded values).
    Int { range: Interval, exact: bool },
    Bool { exact: bool },
}

pub(crate) fn format_of(ty: Dtype) -> Option<Format> {
    Some(match ty {
        Dtype::F16 => Format::F16,
        Dtype::Bf16 => Format::Bf16,
        Dtype::F32 => Format::F32,
        Dtype::F64 => Format::F64,
        _ => return None,
    })
}

/// A failure with the span of the expression it is about.
pub(crate) type Fail = (String, Span);

/// A read of a mean (see `Walk::mean_of`): the mean's tensor, the summed
/// term, the summed variable, and the mean statement's free variables
/// mapped to the read's indices.
pub(crate) fn fail<T>(msg: impl Into<String>, span: Span) -> Result<T, Fail> {
    Err((msg.into(), span))
}

/// Each statement's value, computed once per walk, and the statements being
/// computed (reading one of those again is a cycle: a checker bug). Shared
/// by this module's walk and [`magnitude`]'s.
pub(crate) struct StatementMemo<T> {
    pub(crate) done: HashMap<TensorId, T>,
    active: Vec<TensorId>,
}

/// What [`StatementMemo::lookup`] found.
pub(crate) enum Lookup<T> {
    Known(T),
    /// Evaluate this statement, then hand the result to `finish`.
    Evaluate(tir::StmtId),
}

impl<T: Clone> StatementMemo<T> {
    pub(crate) fn new() -> Self {
        StatementMemo { done: HashMap::new(), active: Vec::new() }
    }

    pub(crate) fn lookup(&mut self, k: &Kernel, t: TensorId, span: Span) -> Result<Lookup<T>, Fail> {
        if let Some(v) = self.done.get(&t) {
            return Ok(Lookup::Known(v.clone()));
        }
        if self.active.contains(&t) {
            return fail("a statement that reads itself", span);
        }
        let Some(si) = k.writer(t) else { return fail(format!("`{}` is read but never defined", k.tensors[t].name), span) };
        self.active.push(t);
        Ok(Lookup::Evaluate(si))
    }

    pub(crate) fn finish(&mut self, t: TensorId, out: Result<T, Fail>) -> Result<T, Fail> {
        self.active.pop();
        let v = out?;
        self.done.insert(t, v.clone());
        Ok(v)
    }
}

/// Error sources interned by (label, span), shared by every region.
#[derive(Default)]
struct Sources {
    list: Vec<Source>,
    index: HashMap<(String, Span), SourceId>,
}

impl Sources {
    fn id(&mut self, label: String, span: Span) -> SourceId {
        if let Some(i) = self.index.get(&(label.clone(), span)) {
            return *i;
        }
        self.list.push(Source { label: label.clone(), span });
        self.index.insert((label, span), self.list.len() - 1);
        self.list.len() - 1
    }
}

/// One analysis of a kernel for one assignment of dim ranges.
struct Walk<'a> {
    k: &'a Kernel,
    ir: &'a KernelIr,
    lib: &'a LibraryTable,
    /// Range of every dim in this region.
    dims: Vec<(i64, i64)>,
    sources: &'a mut Sources,
    vars: Vec<Option<Interval>>,
    locals: Vec<Option<V>>,
    memo: StatementMemo<V>,
    /// Sub-ranges of split input values (tensor or scalar) in this piece.
    pieces: Vec<(ValueVar, Interval)>,
    /// The free variables of the statement being evaluated (its element),
    /// and those of the statements that read it.
    frees: Vec<VarId>,
    outer_frees: Vec<Vec<VarId>>,
    /// The walk of computed values (see [`computed`]).
    computed: computed::State,
}

/// An input value the analysis may split: a float tensor read at one
/// element per output (every read has the same indices, none inside a
/// reduction), or a float scalar.
type ValueVar = (Option<TensorId>, Option<usize>);

impl<'a> Walk<'a> {
    fn new(k: &'a Kernel, ir: &'a KernelIr, lib: &'a LibraryTable, dims: Vec<(i64, i64)>, sources: &'a mut Sources, pieces: Vec<(ValueVar, Interval)>) -> Walk<'a> {
        Walk { k, ir, lib, dims, sources, vars: vec![None; k.vars.len()], locals: vec![None; k.locals.len()], memo: StatementMemo::new(), pieces, frees: Vec::new(), outer_frees: Vec::new(), computed: computed::State::new(k) }
    }

    fn dim(&self, d: Dim) -> (i64, i64) {
        match d {
            Dim::Sym(id) => self.dims[id],
            Dim::Lit(v) => (v, v),
        }
    }

    fn src(&mut self, label: String, span: Span) -> SourceId {
        self.sources.id(label, span)
    }

    fn float(&mut self, e: &TExpr) -> Result<AVal, Fail> {
        match self.eval(e)? {
            V::Float(a) => Ok(a),
            V::Int { range, exact: true } => Ok(AVal::exact(range)),
            _ => fail("a value the bound cannot follow (an index chosen by comparing rounded values)", e.span),
        }
    }

    fn int(&mut self, e: &TExpr) -> Result<(Interval, bool), Fail> {
        match self.eval(e)? {
            V::Int { range, exact } => Ok((range, exact)),
            V::Bool { exact } => Ok((Interval::new(0.0, 1.0), exact)),
            V::Float(a) => Ok((a.range, a.err.is_zero())),
        }
    }

    fn exact_flag(v: &V) -> bool {
        match v {
            V::Float(a) => a.err.is_zero(),
            V::Int { exact, .. } | V::Bool { exact } => *exact,
        }
    }

    /// Round an exact result of type `ty` as the kernel does: in f32 for
    /// f32 and the half types (which then round again to their format),
    /// in f64 for f64.
    fn round_op(&mut self, v: AVal, ty: Dtype, what: &str, span: Span) -> Result<AVal, Fail> {
        self.round_scaled(v, ty, what, span, 1.0)
    }

    /// [`Self::round_op`] with each rounding's absolute (subnormal) error
    /// times `floor` (the ratio lemma measures values in units of a divisor
    /// of at least `1 / floor`).
    fn round_scaled(&mut self, v: AVal, ty: Dtype, what: &str, span: Span, floor: f64) -> Result<AVal, Fail> {
        let Some(fmt) = format_of(ty) else { return Ok(v) };
        let compute = if fmt == Format::F64 { Format::F64 } else { Format::F32 };
        let s = self.src(format!("rounding of {} to {}", what, compute), span);
        let mut out = v.rounded(compute, compute.unit_roundoff(), mul_up(compute.subnormal_abs(), floor), s).map_err(|e| (e.0, span))?;
        if fmt != compute {
            let s = self.src(format!("rounding of {} to {}", what, fmt), span);
            out = out.rounded(fmt, fmt.unit_roundoff(), mul_up(fmt.subnormal_abs(), floor), s).map_err(|e| (e.0, span))?;
        }
        Ok(out)
    }

    /// Evaluate inside the statement whose element is `vars` (each bound
    /// to its extent); [`Self::leave`] returns to the reader.
    fn enter(&mut self, vars: Vec<VarId>) {
        for v in &vars {
            let (_, hi) = self.dim(self.k.vars[*v].extent);
            self.vars[*v] = Some(Interval::new(0.0, (hi - 1).max(0) as f64));
        }
        self.outer_frees.push(std::mem::replace(&mut self.frees, vars));
    }

    fn leave(&mut self) {
        self.frees = self.outer_frees.pop().unwrap_or_default();
    }

    /// A library call's own error on its computed result.
    fn library(&mut self, v: AVal, f: Function, ty: Dtype, span: Span) -> Result<AVal, Fail> {
        self.library_at(v, f, ty, span, 0.0, 0.0)
    }

    /// A library call whose argument (a division's dividend) is at most
    /// `arg_mag` in magnitude, with `extra_abs` more absolute error (a
    /// flushed operand): what an intrinsic's error depends on.
    fn library_at(&mut self, v: AVal, f: Function, ty: Dtype, span: Span, arg_mag: f64, extra_abs: f64) -> Result<AVal, Fail> {
        let compute = if ty == Dtype::F64 { Format::F64 } else { Format::F32 };
        let (rel, abs) = self.lib.cost_at(f, compute, arg_mag);
        let abs = tokitai_contracts::fp::add_up(abs, extra_abs);
        let ulps = match self.lib.grows(f) {
            Some(g) if g.ulps_per_arg > 0.0 => format!("{} + floor({} x {:.4e})", self.lib.ulps(f), g.ulps_per_arg, arg_mag),
            _ => self.lib.ulps(f).to_string(),
        };
        let s = self.src(format!("{} ({} ulp, {})", f.c_name(), ulps, self.lib.name.split(" (").next().unwrap_or(self.lib.name)), span);
        let mut out = v.rounded(compute, rel, abs, s).map_err(|e| (e.0, span))?;
        if let Some(fmt) = format_of(ty).filter(|f| *f != compute) {
            let s = self.src(format!("rounding of {} to {}", f.c_name(), fmt), span);
            out = out.round_to(fmt, s).map_err(|e| (e.0, span))?;
        }
        Ok(out)
    }

    /// Range of an input tensor's or scalar's values: its `domain`, widened
    /// by one rounding into its storage dtype (a value drawn inside the
    /// domain and stored may land half an ulp outside it).
    fn domain(&self, tensor: Option<TensorId>, scalar: Option<usize>, ty: Dtype, name: &str, span: Span) -> Result<Interval, Fail> {
        let mut range = match self.pieces.iter().find(|(v, _)| *v == (tensor, scalar)) {
            Some((_, r)) => *r,
            None => {
                let d = self.k.domain.iter().find(|d| (tensor.is_some() && d.tensor == tensor) || (scalar.is_some() && d.scalar == scalar));
                let Some(d) = d else {
                    return fail(format!("`{}` has no `domain`: a tolerance needs the range of every float input it depends on", name), span);
                };
                stored_domain(d.lo, d.hi, ty)
            }
        };
        // `t * t <= c * s`: |t| <= sqrt(c * s) for the largest `s` of this
        // piece (or of its domain).
        for rel in self.k.relations.iter().filter(|r| tensor == Some(r.square)) {
            let b = &self.k.tensors[rel.bound];
            let s = self.domain(Some(rel.bound), None, b.dtype, &b.name, span)?;
            let r = up(mul_up(rel.factor, s.hi.max(0.0)).sqrt());
            range = range.meet(&Interval::new(-r, r));
        }
        Ok(range)
    }

    fn stmt_value(&mut self, t: TensorId, span: Span) -> Result<V, Fail> {
        let si = match self.memo.lookup(self.k, t, span)? {
            Lookup::Known(v) => return Ok(v),
            Lookup::Evaluate(si) => si,
        };
        let out = self.stmt_value_in(t, si);
        self.memo.finish(t, out)
    }

    fn stmt_value_in(&mut self, t: TensorId, si: usize) -> Result<V, Fail> {
        let stmt = &self.k.stmts[si];
        self.enter(stmt.vars.clone());
        let v = self.eval(&stmt.value);
        self.leave();
        let mut v = v?;
        // The store rounds to the tensor's dtype (a no-op when the value
        // already has it).
        let dt = self.k.tensors[t].dtype;
        if let (V::Float(a), Some(to), Some(from)) = (&v, format_of(dt), format_of(stmt.value.ty)) {
            if !from.fits_in(to) {
                let label = format!("`{}`", self.k.tensors[t].name);
                v = V::Float(self.round_op(a.clone(), dt, &label, stmt.span)?);
            }
        }
        Ok(v)
    }

    fn eval(&mut self, e: &TExpr) -> Result<V, Fail> {
        let ty = e.ty;
        Ok(match &e.kind {
            TExprKind::Const(Const::Float(c)) => {
                let fmt = format_of(ty).unwrap_or(Format::F64);
                let stored = stored_literal(*c, fmt);
                if c.is_nan() {
                    return fail("a NaN constant in a value with a tolerance", e.span);
                }
                let mut a = AVal::exact(Interval::point(*c));
                if stored != *c {
                    // Relative to the literal, so that it scales with what
                    // the literal multiplies or divides.
                    let s = self.src(format!("the literal {} rounded to {}", c, fmt), e.span);
                    a.err = ErrBound::single(s, 0.0, tokitai_contracts::fp::div_up((stored - c).abs(), c.abs()));
                }
                V::Float(a)
            }
            TExprKind::Const(Const::Int(v)) => V::Int { range: Interval::point(*v as f64), exact: true },
            TExprKind::Const(Const::Bool(_)) => V::Bool { exact: true },
            TExprKind::Scalar(s) => {
                if ty.is_float() {
                    let name = self.k.scalars[*s].name.clone();
                    V::Float(AVal::exact(self.domain(None, Some(*s), ty, &name, e.span)?))
                } else if ty == Dtype::Bool {
                    V::Bool { exact: true }
                } else {
                    V::Int { range: Interval::new(-(2f64.powi(63)), 2f64.powi(63)), exact: true }
                }
            }
            TExprKind::Dim(d) => {
                let (lo, hi) = self.dims[*d];
                V::Int { range: Interval::new(lo as f64, hi as f64), exact: true }
            }
            TExprKind::Var(v) => match self.vars[*v] {
                Some(r) => V::Int { range: r, exact: true },
                None => return fail("an index variable outside its statement", e.span),
            },
            TExprKind::Local(l) => match &self.locals[*l] {
                Some(v) => v.clone(),
                None => return fail("a local read before it is bound", e.span),
            },
            TExprKind::Load { tensor, index } => {
                let mut exact = true;
                for i in index {
                    exact &= self.int(i)?.1;
                }
                if !exact {
                    return fail("an element chosen by an index computed from rounded values", e.span);
                }
                let info = &self.k.tensors[*tensor];
                match info.role {
                    // An output read by a later statement (layernorm's `mean`)
                    // is that statement's value, as in the kernel.
                    TensorRole::Intermediate | TensorRole::Output => self.stmt_value(*tensor, e.span)?,
                    TensorRole::Input | TensorRole::Inout => {
                        if ty.is_float() {
                            let name = info.name.clone();
                            V::Float(AVal::exact(self.domain(Some(*tensor), None, ty, &name, e.span)?))
                        } else if ty == Dtype::Bool {
                            V::Bool { exact: true }
                        } else {
                            let range = match &info.value_range {
                                Some(r) => {
                                    let (lo, _) = self.int(&r.lo)?;
                                    let (hi, _) = self.int(&r.hi)?;
                                    Interval::new(lo.lo, hi.hi.max(lo.lo))
                                }
                                None => Interval::new(-(2f64.powi(63)), 2f64.powi(63)),
                            };
                            V::Int { range, exact: true }
                        }
                    }
                }
            }
            TExprKind::Unary(UnOp::Neg, a) => match self.eval(a)? {
                V::Float(x) => V::Float(x.neg()),
                V::Int { range, exact } => V::Int { range: range.neg(), exact },
                b => b,
            },
            TExprKind::Unary(UnOp::Not, a) => {
                let v = self.eval(a)?;
                V::Bool { exact: Self::exact_flag(&v) }
            }
            TExprKind::Binary(op, a, b) => self.binary(*op, a, b, e)?,
            TExprKind::Call(f, args) => self.call(*f, args, e)?,
            TExprKind::Cast(a) => self.cast(a, e)?,
            TExprKind::Let { local, value, body } => {
                let v = self.eval(value)?;
                if let Some(s) = self.logistic(&v, *local, body, e) {
                    return s.map(V::Float);
                }
                self.locals[*local] = Some(v);
                self.eval(body)?
            }
            TExprKind::Reduce { op, var, body } => self.reduce(*op, *var, body, e)?,
        })
    }

    fn binary(&mut self, op: BinOp, a: &TExpr, b: &TExpr, e: &TExpr) -> Result<V, Fail> {
        let ty = e.ty;
        if matches!(op, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::And | BinOp::Or) {
            let (x, y) = (self.eval(a)?, self.eval(b)?);
            // A comparison of floats whose computed and exact values all lie
            // on one side of each other has one outcome for both.
            let decided = match (&x, &y) {
                (V::Float(p), V::Float(q)) => {
                    let (rp, rq) = (reach(p), reach(q));
                    rp.hi < rq.lo || rq.hi < rp.lo
                }
                _ => false,
            };
            return Ok(V::Bool { exact: decided || (Self::exact_flag(&x) && Self::exact_flag(&y)) });
        }
        if !ty.is_float() {
            let ((x, ex), (y, ey)) = (self.int(a)?, self.int(b)?);
            let wide = Interval::new(-(2f64.powi(63)), 2f64.powi(63));
            let range = match op {
                BinOp::Add => x.add(&y),
                BinOp::Sub => x.sub(&y),
                BinOp::Mul => x.mul(&y),
                BinOp::Div => x.div(&y).map(|q| Interval::new(q.lo.floor(), q.hi.ceil())).unwrap_or(wide),
                BinOp::Rem if y.lo > 0.0 && x.lo >= 0.0 => Interval::new(0.0, (y.hi - 1.0).min(x.hi)),
                _ => wide,
            };
            return Ok(V::Int { range, exact: ex && ey });
        }
        if op == BinOp::Div {
            // Where the ratio lemma applies, the tighter of its bound and
            // the ordinary one (which fails where the divisor's root
            // reaches zero).
            if let Some(q) = self.ratio(a, b, e) {
                return Ok(V::Float(match self.arith(op, a, b, e) {
                    Ok(o) if o.err.at(o.range.mag()) < q.err.at(q.range.mag()) => AVal { range: o.range.meet(&q.range), err: o.err },
                    Ok(o) => AVal { range: o.range.meet(&q.range), err: q.err },
                    Err(_) => q,
                }));
            }
        }
        self.arith(op, a, b, e).map(V::Float)
    }

    /// `a op b` on floats, op one of `+ - * /`, by the rules of
    /// [`AVal`] and the lemmas about reductions.
    fn arith(&mut self, op: BinOp, a: &TExpr, b: &TExpr, e: &TExpr) -> Result<AVal, Fail> {
        let ty = e.ty;
        let (x, y) = (self.float(a)?, self.float(b)?);
        let second = self.src(format!("second-order terms of `{}`", op.symbol()), e.span);
        let exact = match op {
            BinOp::Add => self.complementary_mix(a, b, &x, &y).unwrap_or_else(|| x.add(&y)),
            BinOp::Sub => x.sub(&y),
            // `a * a`: a square is non-negative, which intervals lose.
            BinOp::Mul if same_expr(a, b) => {
                let mut p = x.mul(&y, second);
                p.range = Interval::new(tokitai_contracts::fp::down(x.range.mig() * x.range.mig()), p.range.hi);
                p
            }
            BinOp::Mul => {
                let p = x.mul(&y, second);
                self.complementary_product((a, &x), (b, &y), p)
            }
            BinOp::Div => x.div(&y).map_err(|er| (er.0, e.span))?,
            _ => return fail(format!("`{}` on floats", op.symbol()), e.span),
        };
        let mut v = if op == BinOp::Div {
            // The divisor as computed: the computed walk knows lemmas the
            // error walk's ranges lose (a row's sum of `exp(t - max t)`
            // holds `exp(0)`, so it is at least 1 as computed).
            let divisor = if self.lib.grows(Function::Div).is_some() { self.computed(b).map(|c| c.meet(&y.reach())).unwrap_or_else(|_| y.reach()) } else { y.reach() };
            let extra = flushed_division(self.lib, divisor, ty).map_err(|why| (why, e.span))?;
            self.library_at(exact, Function::Div, ty, e.span, x.computed_mag(), extra)?
        } else if matches!(op, BinOp::Add | BinOp::Sub) && (is_zero(a) || is_zero(b)) {
            // `x + 0`, `x - 0` and `0 - x` are `x` or `-x` exactly (IEEE
            // 754: the sum is exact when it is representable; only a
            // zero's sign may differ): no rounding (sig's `exp(0.0 - t)`).
            exact
        } else {
            self.round_op(exact, ty, &format!("`{}`", op.symbol()), e.span)?
        };
        if let Some(r) = self.lemma(op, a, b) {
            v.range = v.range.meet(&r);
        }
        if op == BinOp::Mul {
            if let Some(n) = self.normalised(a, b) {
                let r = up((n as f64).sqrt());
                v.range = v.range.meet(&Interval::new(-r, r));
            }
        }
        Ok(v)
    }

    /// `sum(c) (t(c) - m)^2` with `m` the computed mean of the same terms:
    /// with `e = m' - m`, `sum (t_c - m')^2 = sum (t_c - m)^2 + n e^2`
    /// exactly (the deviations from the exact mean sum to zero), so the
    /// mean's error enters only as `n e^2`. The terms are bounded with the
    /// computed mean taken as exact (anywhere in its reach); the `n e^2`
    /// term is added on its own.
    #[allow(clippy::too_many_arguments)]
    fn centred_sum_of_squares(&mut self, mean: TensorId, body: &TExpr, var: VarId, e: &TExpr, n_lo: i64, n_hi: i64, name: &str) -> Result<V, Fail> {
        let m = match self.stmt_value(mean, e.span)? {
            V::Float(a) => a,
            _ => return fail("a mean that is not a float", e.span),
        };
        let em = m.err.at(m.range.mag());
        self.memo.done.insert(mean, V::Float(AVal::exact(reach(&m))));
        let term = self.float(body);
        self.memo.done.insert(mean, V::Float(m));
        let term = term?;
        let order = self.ir.reduction_order.get(&var).copied().unwrap_or(ReductionOrder::Sequential);
        if let Some(why) = matrix_unit_operands(order, body) {
            return fail(why, e.span);
        }
        let (height, how) = summation_height(order, n_hi, true);
        let s = self.src(format!("f32 summation of `sum({})` ({})", name, how), e.span);
        let mut v = term.sum(n_lo as f64, n_hi as f64, height, Format::F32, s).map_err(|er| (er.0, e.span))?;
        let (_, r) = v.err.total();
        let sq = tokitai_contracts::fp::mul_up(tokitai_contracts::fp::mul_up(em, em), n_hi as f64);
        let s = self.src(format!("error of `{}` in the centred sum of squares (enters as n e^2)", self.k.tensors[mean].name), e.span);
        v.err = v.err.with(s, tokitai_contracts::fp::mul_up(sq, tokitai_contracts::fp::add_up(1.0, r)), 0.0);
        Ok(V::Float(v))
    }

    fn patterns(&self) -> Patterns<'a> {
        Patterns { k: self.k }
    }

    /// `(t(c) - m) * s` normalised (see [`Patterns::normalised`]) with
    /// `eps >= 0`: `|product| <= sqrt(n)`. Returns the row length's upper
    /// bound.
    fn normalised(&mut self, a: &TExpr, b: &TExpr) -> Option<i64> {
        let (n, eps) = self.patterns().normalised(a, b)?;
        let eps_ok = matches!(self.float(eps), Ok(x) if x.range.lo >= 0.0);
        eps_ok.then_some(self.dim(n).1)
    }

    /// Facts about a term and its row's reduction that intervals lose.
    /// `b` must read an intermediate whose statement is the reduction, at
    /// the statement's own indices, and `a` must be the reduction's body
    /// with its variable replaced by a variable of the same extent (so it
    /// is one of the reduced terms):
    /// - `a - max(k) a(k) <= 0` (and `a - min(k) a(k) >= 0`);
    /// - `a / sum(k) a(k)` is in `[0, 1]` when every term is non-negative.
    fn lemma(&mut self, op: BinOp, a: &TExpr, b: &TExpr) -> Option<Interval> {
        match (op, self.row_reduction(a, b)?) {
            (BinOp::Sub, RedOp::Max) => Some(Interval::new(f64::NEG_INFINITY, 0.0)),
            (BinOp::Sub, RedOp::Min) => Some(Interval::new(0.0, f64::INFINITY)),
            (BinOp::Div, RedOp::Sum) => {
                let term = self.float(a).ok()?;
                term.range.nonneg().then(|| Interval::new(0.0, 1.0))
            }
            _ => None,
        }
    }

    /// The reduction `b` reads when `a` is one of its terms (see
    /// [`Self::lemma`]).
    fn row_reduction(&self, a: &TExpr, b: &TExpr) -> Option<RedOp> {
        let TExprKind::Load { tensor, index } = &b.kind else { return None };
        if self.k.tensors[*tensor].role != TensorRole::Intermediate {
            return None;
        }
        let stmt = &self.k.stmts[self.k.writer(*tensor)?];
        let TExprKind::Reduce { op: red, var, body } = &stmt.value.kind else { return None };
        if stmt.vars.len() != index.len() {
            return None;
        }
        let free: Vec<(VarId, &TExpr)> = stmt.vars.iter().copied().zip(index.iter()).collect();
        let mut bound_to = None;
        self.patterns().same_term(body, a, *var, &mut bound_to, &free).then_some(*red)
    }

    fn call(&mut self, f: Builtin, args: &[TExpr], e: &TExpr) -> Result<V, Fail> {
        let ty = e.ty;
        let span = e.span;
        let lib = |me: &mut Self, v: Result<AVal, FpError>, func: Function| -> Result<V, Fail> {
            let v = v.map_err(|er| (er.0, span))?;
            Ok(V::Float(me.library(v, func, ty, span)?))
        };
        match f {
            Builtin::Exp => {
                let x = self.float(&args[0])?;
                let v = x.exp();
                Ok(V::Float(self.library_at(v, Function::Exp, ty, span, x.computed_mag(), 0.0)?))
            }
            Builtin::Tanh => {
                let x = self.float(&args[0])?;
                lib(self, Ok(x.tanh()), Function::Tanh)
            }
            Builtin::Log => {
                let x = self.float(&args[0])?;
                lib(self, x.ln(), Function::Log)
            }
            Builtin::Sqrt => {
                let x = self.float(&args[0])?;
                lib(self, x.sqrt(), Function::Sqrt)
            }
            Builtin::Rsqrt => {
                let x = self.float(&args[0])?;
                lib(self, x.rsqrt(), Function::Rsqrt)
            }
            Builtin::Abs => Ok(match self.eval(&args[0])? {
                V::Float(x) => V::Float(x.abs()),
                V::Int { range, exact } => V::Int { range: range.abs(), exact },
                b => b,
            }),
            Builtin::Min | Builtin::Max => {
                let is_max = f == Builtin::Max;
                if ty.is_float() {
                    let (x, y) = (self.float(&args[0])?, self.float(&args[1])?);
                    Ok(V::Float(x.extremum(&y, is_max)))
                } else {
                    let ((x, ex), (y, ey)) = (self.int(&args[0])?, self.int(&args[1])?);
                    Ok(V::Int { range: if is_max { x.max(&y) } else { x.min(&y) }, exact: ex && ey })
                }
            }
            Builtin::Select => {
                let c = self.eval(&args[0])?;
                let c_exact = Self::exact_flag(&c);
                if ty.is_float() {
                    let (x, y) = (self.float(&args[1])?, self.float(&args[2])?);
                    if c_exact {
                        return Ok(V::Float(x.select_exact(&y)));
                    }
                    // The rounded condition may pick the other operand: the
                    // error may then be the distance between the two.
                    let hull = x.range.hull(&y.range);
                    let s = self.src("`select` on a condition computed from rounded values".into(), args[0].span);
                    let err = x.err.absolutized(x.range.mag()).join(&y.err.absolutized(y.range.mag())).with(s, hull.width(), 0.0);
                    Ok(V::Float(AVal { range: hull, err }))
                } else if ty == Dtype::Bool {
                    let (x, y) = (self.eval(&args[1])?, self.eval(&args[2])?);
                    Ok(V::Bool { exact: c_exact && Self::exact_flag(&x) && Self::exact_flag(&y) })
                } else {
                    let ((x, ex), (y, ey)) = (self.int(&args[1])?, self.int(&args[2])?);
                    Ok(V::Int { range: x.hull(&y), exact: c_exact && ex && ey })
                }
            }
            // Residue arithmetic is exact; its results lie in [0, p^k)
            // (the valuation in [0, k]). skip_if is exact too: where it
            // skips, the dense value is 0 modulo p^k (verify::residue).
            Builtin::Vp | Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf => {
                let mut exact = true;
                for a in args {
                    exact &= Self::exact_flag(&self.eval(a)?);
                }
                let m = self.k.modulus.ok_or(("a residue builtin without a modulus".to_string(), span))?;
                let hi = if f == Builtin::Vp { m.k as f64 } else { (m.q() - 1) as f64 };
                Ok(V::Int { range: Interval::new(0.0, hi), exact })
            }
        }
    }

    fn cast(&mut self, a: &TExpr, e: &TExpr) -> Result<V, Fail> {
        let (from, to) = (a.ty, e.ty);
        if to == Dtype::Bool {
            let v = self.eval(a)?;
            return Ok(V::Bool { exact: Self::exact_flag(&v) });
        }
        let Some(tf) = format_of(to) else {
            // To an integer: exact from integers and booleans only.
            let v = self.eval(a)?;
            return match v {
                V::Float(x) if !x.err.is_zero() => fail("a rounded float converted to an integer", e.span),
                V::Float(x) => Ok(V::Int { range: Interval::new(x.range.lo.floor(), x.range.hi.ceil()), exact: true }),
                V::Int { range, exact } => Ok(V::Int { range, exact }),
                V::Bool { exact } => Ok(V::Int { range: Interval::new(0.0, 1.0), exact }),
            };
        };
        let v = match self.eval(a)? {
            V::Float(x) => x,
            V::Int { range, exact: true } => {
                let x = AVal::exact(range);
                return if tf.holds_integers_up_to(range.mag()) { Ok(V::Float(x)) } else { Ok(V::Float(self.round_op(x, to, &format!("the conversion to {}", to), e.span)?)) };
            }
            V::Bool { exact: true } => return Ok(V::Float(AVal::exact(Interval::new(0.0, 1.0)))),
            _ => return fail("a conversion of a value the bound cannot follow", e.span),
        };
        let ff = format_of(from).unwrap_or(Format::F64);
        if ff.fits_in(tf) {
            return Ok(V::Float(v));
        }
        // Narrowing: halves convert through f32, as the printer does.
        let mut out = v;
        if ff == Format::F64 && tf != Format::F32 {
            let s = self.src(format!("conversion to {} (through f32)", tf), e.span);
            out = out.round_to(Format::F32, s).map_err(|er| (er.0, e.span))?;
        }
        let s = self.src(format!("conversion to {}", tf), e.span);
        Ok(V::Float(out.round_to(tf, s).map_err(|er| (er.0, e.span))?))
    }

    fn reduce(&mut self, op: RedOp, var: VarId, body: &TExpr, e: &TExpr) -> Result<V, Fail> {
        let extent = self.k.vars[var].extent;
        let (n_lo, n_hi) = self.dim(extent);
        let name = self.k.vars[var].name.clone();
        if n_hi < 1 {
            return fail(format!("`{}({})` over an empty range", op.name(), name), e.span);
        }
        let saved = self.vars[var];
        self.vars[var] = Some(Interval::new(0.0, (n_hi - 1) as f64));
        let out = self.reduce_in(op, var, body, e, n_lo.max(0), n_hi, &name);
        self.vars[var] = saved;
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_in(&mut self, op: RedOp, var: VarId, body: &TExpr, e: &TExpr, n_lo: i64, n_hi: i64, name: &str) -> Result<V, Fail> {
        match op {
            RedOp::Argmax => {
                let v = self.eval(body)?;
                Ok(V::Int { range: Interval::new(0.0, (n_hi - 1) as f64), exact: Self::exact_flag(&v) })
            }
            RedOp::Max | RedOp::Min => {
                if n_lo < 1 {
                    return fail(format!("`{}({})` over a range that may be empty (require its length >= 1)", op.name(), name), e.span);
                }
                match self.eval(body)? {
                    V::Float(t) => Ok(V::Float(t.extremum(&t, op == RedOp::Max))),
                    V::Int { range, exact } => Ok(V::Int { range, exact }),
                    b => Ok(b),
                }
            }
            RedOp::SumMod => {
                let (_, exact) = self.int(body)?;
                let m = self.k.modulus.ok_or(("`summod` without a modulus".to_string(), e.span))?;
                Ok(V::Int { range: Interval::new(0.0, (m.q() - 1) as f64), exact })
            }
            RedOp::Sum => {
                if !body.ty.is_float() {
                    let (r, exact) = self.int(body)?;
                    return Ok(V::Int { range: r.times_count(n_lo as f64, n_hi as f64), exact });
                }
                let fmt = format_of(body.ty).unwrap_or(Format::F32);
                if fmt != Format::F32 && fmt != Format::F64 {
                    return fail(format!("a sum accumulated in {}: accumulate in f32 (cast the terms) to get a useful bound", fmt), e.span);
                }
                // A centred sum of squares: the mean's error enters squared.
                if let Some(mean) = self.patterns().centred_square(body, var) {
                    return self.centred_sum_of_squares(mean, body, var, e, n_lo, n_hi, name);
                }
                // Terms of a fused multiply-add are exact products; the
                // fma's single rounding is the addition's.
                let term = match tir::fma_operands(body) {
                    Some((a, b)) => {
                        let (x, y) = (self.float(a)?, self.float(b)?);
                        let s = self.src("second-order terms of `*`".into(), body.span);
                        x.mul(&y, s)
                    }
                    None => self.float(body)?,
                };
                let order = self.ir.reduction_order.get(&var).copied().unwrap_or(ReductionOrder::Sequential);
                if let Some(why) = matrix_unit_operands(order, body) {
                    return fail(why, e.span);
                }
                let (height, how) = summation_height(order, n_hi, term.range.one_signed());
                let s = self.src(format!("{} summation of `sum({})` ({})", fmt, name, how), e.span);
                let v = term.sum(n_lo as f64, n_hi as f64, height, fmt, s).map_err(|er| (er.0, e.span))?;
                Ok(V::Float(v))
            }
        }
    }
}

/// The height of a summation tree of `n` terms in `order` (the most
/// rounded additions any term passes through), and the order in words.
/// `one_signed`: the height is used relative to the sum of terms of one
/// sign, not to `n` times the largest (it differs on a matrix unit only,
/// whose truncations are bounded by the block's largest value).
pub(crate) fn summation_height(order: ReductionOrder, n: i64, one_signed: bool) -> (f64, String) {
    match order {
        ReductionOrder::Sequential => (n as f64, format!("{} terms in sequence", n)),
        ReductionOrder::Block { threads, warp } => {
            let per = (n + threads as i64 - 1) / threads as i64;
            let levels = 2.0 * (warp as f64).log2().ceil();
            (per as f64 + levels, format!("{} per thread, then 2 x {} butterfly levels", per, levels / 2.0))
        }
        ReductionOrder::BlockRuns { threads, warp, width, slots } => {
            let per = runs_per_thread(n, threads, width).min((slots * width) as i64);
            let levels = 2.0 * (warp as f64).log2().ceil();
            (per as f64 + levels, format!("{} per thread in runs of {}, then 2 x {} butterfly levels", per, width, levels / 2.0))
        }
        // A chain's ceil(n / (groups chains)) terms, the group's chains in
        // sequence, then log2(groups) levels of the groups' tree (the first
        // addition of each sequence adds to zero: exact, counted).
        ReductionOrder::Columns { groups, chains } => {
            let per = (n + (groups * chains) as i64 - 1) / (groups * chains) as i64;
            let levels = (groups as f64).log2().ceil();
            (per as f64 + chains as f64 + levels, format!("{} per chain, {} chains in sequence, then a tree of {} groups", per, chains, groups))
        }
        ReductionOrder::MatrixUnit { k, per_promotion } => {
            let (any, relative) = tokitai_contracts::fp::matrix_unit::heights(n.max(0) as u64, k, per_promotion);
            let h = if one_signed { relative } else { any };
            (h, format!("on the matrix unit, {} products per instruction, promoted to f32 every {}: as {:.1} roundings, assuming {}", k, per_promotion, h, tokitai_contracts::fp::matrix_unit::ASSUMPTION))
        }
    }
}

/// The most terms one thread adds in sequence in `BlockRuns` order: the
/// runs of `width` that start at `(j * threads + t) * width`, at most
/// `ceil(ceil(n / width) / threads)` of them, each at most `width` long.
pub(crate) fn runs_per_thread(n: i64, threads: u32, width: u32) -> i64 {
    let (t, w) = (threads as i64, width as i64);
    let runs = (n.max(0) + w - 1) / w;
    ((runs + t - 1) / t) * w
}

/// A sum on the matrix unit multiplies f16 or bf16 values (both of one
/// dtype, widened, as the schedule's instruction takes them): its products
/// are exact only then (the assumption's first clause). `None` when the
/// operands are such; else why not.
pub(crate) fn matrix_unit_operands(order: ReductionOrder, body: &TExpr) -> Option<String> {
    let ReductionOrder::MatrixUnit { .. } = order else { return None };
    match tir::fma_operands(body) {
        Some((a, b)) if crate::schedule::tensor_core::operand_dtype(a, b).is_some() => None,
        _ => Some("a sum on the matrix unit whose terms are not products of f16 or bf16 values".into()),
    }
}

/// Every value the exact or the computed value can take.
fn reach(a: &AVal) -> Interval {
    let e = a.err.at(a.range.mag());
    Interval::new(tokitai_contracts::fp::down(a.range.lo - e), tokitai_contracts::fp::up(a.range.hi + e))
}

/// A domain `[lo, hi]` widened by one rounding into the storage dtype
/// ([`Format::stored_range`]).
pub(crate) fn stored_domain(lo: f64, hi: f64, ty: Dtype) -> Interval {
    format_of(ty).unwrap_or(Format::F64).stored_range(lo, hi)
}

/// A float literal as the kernel stores it in `fmt`.
pub(crate) fn stored_literal(c: f64, fmt: Format) -> f64 {
    match fmt {
        Format::F16 => half::f16::from_f64(c).to_f64(),
        Format::Bf16 => half::bf16::from_f64(c).to_f64(),
        Format::F32 => c as f32 as f64,
        Format::F64 => c,
    }
}

/// Structural equality, ignoring spans.
/// Do the indices `index` read the element of the statement whose free
/// variables are `frees` (each index the variable in its position)?
pub(crate) fn at_own_element(index: &[TExpr], frees: &[VarId]) -> bool {
    index.len() == frees.len() && index.iter().zip(frees).all(|(i, f)| matches!(i.kind, TExprKind::Var(x) if x == *f))
}

/// A literal zero (possibly cast to the operation's type).
fn is_zero(e: &TExpr) -> bool {
    match &e.kind {
        TExprKind::Const(Const::Float(v)) => *v == 0.0,
        TExprKind::Const(Const::Int(v)) => *v == 0,
        TExprKind::Cast(x) => is_zero(x),
        _ => false,
    }
}

pub(crate) fn same_expr(a: &TExpr, b: &TExpr) -> bool {
    a.same_as(b, &[])
}

/// A dim's bounds from `requires` (`D >= a`, `D <= b`, `D == c`), as
/// literal constants; a dim is at least 0 in any case.
pub(crate) fn dim_bounds(k: &Kernel, d: usize) -> (i64, Option<i64>) {
    let upper = k.dim_upper_bound(Dim::Sym(d));
    let mut lower = 0i64;
    if let Some(v) = k.dim_value[d] {
        return (v, Some(v));
    }
    for c in &k.requires {
        let tir::Contract::Pred { expr, .. } = c else { continue };
        let mut stack = vec![expr];
        while let Some(p) = stack.pop() {
            let TExprKind::Binary(op, a, b) = &p.kind else { continue };
            if *op == BinOp::And {
                stack.push(a);
                stack.push(b);
                continue;
            }
            let bound = match (op, &a.kind, &b.kind) {
                (BinOp::Ge, TExprKind::Dim(x), TExprKind::Const(Const::Int(v))) if k.dim_class[*x] == k.dim_class[d] => Some(*v),
                (BinOp::Gt, TExprKind::Dim(x), TExprKind::Const(Const::Int(v))) if k.dim_class[*x] == k.dim_class[d] => Some(*v + 1),
                (BinOp::Le, TExprKind::Const(Const::Int(v)), TExprKind::Dim(x)) if k.dim_class[*x] == k.dim_class[d] => Some(*v),
                (BinOp::Lt, TExprKind::Const(Const::Int(v)), TExprKind::Dim(x)) if k.dim_class[*x] == k.dim_class[d] => Some(*v + 1),
                _ => None,
            };
            if let Some(b) = bound {
                lower = lower.max(b);
            }
        }
    }
    (lower, upper)
}

/// What one walk needs besides its pieces.
struct Ctx<'a, 'b> {
    k: &'a Kernel,
    ir: &'a KernelIr,
    lib: &'a LibraryTable,
    dims: &'b [(i64, i64)],
    sources: &'b mut Sources,
}

impl Ctx<'_, '_> {
    /// The bound of output `t` in one region (and one piece of its split
    /// values).
    fn output(&mut self, t: TensorId, span: Span, pieces: Vec<(ValueVar, Interval)>, dims: &[(String, i64, i64)]) -> Result<RegionBound, Fail> {
        let names: Vec<(String, f64, f64)> = pieces
            .iter()
            .map(|((t, s), r)| (t.map(|t| self.k.tensors[t].name.clone()).or_else(|| s.map(|s| self.k.scalars[s].name.clone())).unwrap_or_default(), r.lo, r.hi))
            .collect();
        let k = self.k;
        let mut w = Walk::new(k, self.ir, self.lib, self.dims.to_vec(), self.sources, pieces);
        Ok(match w.stmt_value(t, span)? {
            V::Float(a) => RegionBound { dims: dims.to_vec(), values: names, range: a.range, err: a.err },
            _ => RegionBound { dims: dims.to_vec(), values: names, range: Interval::point(0.0), err: ErrBound::zero() },
        })
    }
}

/// Each output's bound `(name, abs, rel)` that holds for every one of
/// `analyses` (of one kernel under several schedules: the kernel and its
/// variants, each summing in its own order): the largest `abs` and `rel`.
/// An output some analysis could not bound has none.
pub fn envelope_of(analyses: &[KernelAccuracy]) -> Vec<(String, f64, f64)> {
    let Some(first) = analyses.first() else { return Vec::new() };
    let mut out = Vec::new();
    for (i, o) in first.outputs.iter().enumerate() {
        let envs: Option<Vec<(f64, f64)>> = analyses.iter().map(|a| a.outputs.get(i).and_then(|x| x.envelope())).collect();
        if let Some(envs) = envs {
            let (a, r) = envs.iter().fold((0.0f64, 0.0f64), |(a, r), (x, y)| (a.max(*x), r.max(*y)));
            out.push((o.output.clone(), a, r));
        }
    }
    out
}

/// Derive the error bound of every output with a tolerance, over every
/// launch that meets `requires` (dims split as described above).
pub fn analyze(k: &Kernel, ir: &KernelIr) -> KernelAccuracy {
    analyze_regions(k, ir, None)
}

/// The same analysis at one concrete launch (`dims` in kernel order): the
/// bound the tolerance proof would use if the dims were fixed. Used to
/// measure how tight the bounds are at the shapes that were sampled.
pub fn analyze_at(k: &Kernel, ir: &KernelIr, dims: &[i64]) -> KernelAccuracy {
    analyze_regions(k, ir, Some(dims))
}

/// The library assumptions a kernel is analysed under: its target's
/// documented accuracy for its compile flags, or CUDA's intrinsics where
/// the schedule prints them (`KernelIr::fast_intrinsics`).
pub(crate) fn library_for(ir: &KernelIr) -> Result<LibraryTable, String> {
    let table = LibraryTable::for_flags(ir.target.is_cuda(), &ir.target.compile_flags())?;
    match (ir.fast_intrinsics, ir.target.is_cuda()) {
        (false, _) => Ok(table),
        (true, true) => Ok(LibraryTable::cuda_intrinsics()),
        (true, false) => Err("fast intrinsics are modelled for CUDA only".into()),
    }
}

/// A division by `y` through an intrinsic that flushes (`__fdividef`):
/// the divisor's magnitude must lie where its bound holds, and a
/// subnormal dividend flushed to zero costs up to the smallest normal over
/// `|y|`. The extra absolute error for a quotient of type `ty`, or why the
/// bound does not hold.
pub(crate) fn flushed_division(lib: &LibraryTable, y: Interval, ty: Dtype) -> Result<f64, String> {
    let Some(g) = lib.grows(Function::Div) else { return Ok(0.0) };
    let compute = if ty == Dtype::F64 { Format::F64 } else { Format::F32 };
    if let Some((lo, hi)) = g.divisor {
        if y.mig() < lo || y.mag() > hi {
            return Err(format!("the intrinsic division's bound holds for divisors of magnitude in [{:e}, {:e}]; this divisor's range is [{:e}, {:e}]", lo, hi, y.lo, y.hi));
        }
    }
    Ok(if g.flushes { tokitai_contracts::fp::div_up(2f64.powi(compute.emin()), y.mig()) } else { 0.0 })
}

fn analyze_regions(k: &Kernel, ir: &KernelIr, at: Option<&[i64]>) -> KernelAccuracy {
    let mut sources = Sources::default();
    let lib = library_for(ir);
    let library = match &lib {
        Ok(t) => t.to_string(),
        Err(e) => e.clone(),
    };
    let mut outputs: Vec<OutputAccuracy> = k
        .tolerance
        .iter()
        .map(|t| OutputAccuracy { tensor: t.tensor, output: k.tensors[t.tensor].name.clone(), span: t.span, tolerance: (t.abs, t.rel), regions: Vec::new(), failure: None })
        .collect();
    let lib = match lib {
        Ok(l) => l,
        Err(e) => {
            for o in &mut outputs {
                o.failure = Some((e.clone(), o.span, "every launch".into()));
            }
            return KernelAccuracy { kernel: ir.name.clone(), library, sources: sources.list, outputs };
        }
    };
    // Dim ranges: fixed, or split where they matter.
    let bounds: Vec<(i64, Option<i64>)> = (0..k.dims.len()).map(|d| dim_bounds(k, d)).collect();
    let mut base: Vec<(i64, i64)> = bounds.iter().map(|(lo, hi)| (*lo, hi.unwrap_or(i64::MAX / 4))).collect();
    let mut regions: Vec<Vec<(usize, i64, i64)>> = vec![Vec::new()];
    match at {
        Some(dims) => base = dims.iter().map(|v| (*v, *v)).collect(),
        None => {
            let relevant = relevant_dims(k);
            if let Some(d) = relevant.iter().find(|d| bounds[**d].1.is_none()) {
                let name = &k.dims[*d].name;
                for o in &mut outputs {
                    o.failure = Some((format!("the error bound grows with `{}`, which `requires` does not bound: add `{} <= ...`", name, name), o.span, "every launch".into()));
                }
                return KernelAccuracy { kernel: ir.name.clone(), library, sources: sources.list, outputs };
            }
            let steps = if relevant.len() <= 1 { 8 } else if relevant.len() == 2 { 2 } else { 1 };
            for d in relevant {
                let parts = split(base[d].0, base[d].1, steps);
                regions = regions.into_iter().flat_map(|r| parts.iter().map(move |(a, b)| r.iter().copied().chain([(d, *a, *b)]).collect::<Vec<_>>())).collect();
            }
        }
    }
    let split_vars: Vec<Vec<SplitVar>> = outputs.iter().map(|o| splittable(k, o.tensor)).collect();
    for region in &regions {
        let mut dims = base.clone();
        for (d, a, b) in region {
            dims[*d] = (*a, *b);
        }
        for d in 0..dims.len() {
            dims[d] = dims[k.dim_class[d]];
        }
        let described: Vec<(String, i64, i64)> = region.iter().map(|(d, a, b)| (k.dims[*d].name.clone(), *a, *b)).collect();
        for (o, vars) in outputs.iter_mut().zip(&split_vars) {
            if o.failure.is_some() {
                continue;
            }
            let mut ctx = Ctx { k, ir, lib: &lib, dims: &dims, sources: &mut sources };
            let whole = ctx.output(o.tensor, o.span, Vec::new(), &described);
            let fits = |r: &RegionBound| OutputAccuracy { regions: vec![r.clone()], ..o.clone() }.within_tolerance();
            match whole {
                Ok(r) if vars.is_empty() || fits(&r) => o.regions.push(r),
                Err((msg, span)) if vars.is_empty() => {
                    o.failure = Some((msg, span, RegionBound::described(&described, &[])));
                    o.regions.clear();
                }
                // Refine: split the output's own input values into pieces
                // and bound each piece (each bound holds on its piece; the
                // pieces cover the domain).
                _ => {
                    for piece in pieces(vars) {
                        match ctx.output(o.tensor, o.span, piece.clone(), &described) {
                            Ok(r) => o.regions.push(r),
                            Err((msg, span)) => {
                                let values: Vec<(String, f64, f64)> = piece.iter().zip(vars).map(|((_, r), v)| (v.name.clone(), r.lo, r.hi)).collect();
                                o.failure = Some((msg, span, RegionBound::described(&described, &values)));
                                o.regions.clear();
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    KernelAccuracy { kernel: ir.name.clone(), library, sources: sources.list, outputs }
}
