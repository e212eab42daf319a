//! The typed IR: a checked kernel with resolved names, a dtype on every
//! expression, an extent on every index variable, and a petgraph dataflow
//! graph of its statements.
//!
//! Everything here has passed name resolution, dtype rules, shape agreement
//! and the race rule; the scheduler may rely on it.

use crate::span::Span;
use crate::syntax::ast::{BinOp, RedOp, UnOp};
use crate::types::Dtype;
use petgraph::graph::DiGraph;

pub type DimId = usize;
pub type TensorId = usize;
pub type ScalarId = usize;
pub type VarId = usize;
pub type LocalId = usize;
pub type StmtId = usize;

/// One axis length: a symbolic dim (passed at launch) or a literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Sym(DimId),
    Lit(i64),
}

#[derive(Clone, Debug)]
pub struct DimInfo {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorRole {
    Input,
    Inout,
    Output,
    Intermediate,
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<Dim>,
    pub role: TensorRole,
    pub span: Span,
    /// Value contract from `requires x in [lo, hi)` (integer tensors used as indices).
    pub value_range: Option<ValueRange>,
}

#[derive(Clone, Debug)]
pub struct ScalarInfo {
    pub name: String,
    pub dtype: Dtype,
    pub span: Span,
}

/// A kernel parameter in signature order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Tensor(TensorId),
    Scalar(ScalarId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarKind {
    /// A left-hand-side index: the statement is defined for every value.
    Free,
    /// Bound by `sum(k)`, `max(k)`, ...
    Reduction,
}

#[derive(Clone, Debug)]
pub struct VarInfo {
    pub name: String,
    pub extent: Dim,
    pub kind: VarKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct LocalInfo {
    pub name: String,
    pub dtype: Dtype,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Const {
    Float(f64),
    Int(i64),
    Bool(bool),
}

/// Builtin functions after resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Exp,
    Log,
    Tanh,
    Sqrt,
    Rsqrt,
    Abs,
    Min,
    Max,
    Select,
    /// `vp(x)`: the p-adic valuation of a residue, capped at `k` (`vp(0)
    /// = k`), for the kernel's `modulus p^k`.
    Vp,
    /// `mulmod(a, b)`: `a * b mod p^k`, the product widened to 64 bits.
    MulMod,
    /// `addmod(a, b)`: `a + b mod p^k`, the sum widened to 64 bits.
    AddMod,
    /// `skip_if(c, e)`: the value of `e`, where the code may give 0
    /// instead when `c` holds. Proved per kernel: `c` implies `e = 0`
    /// modulo `p^k` (`verify::residue`).
    SkipIf,
}

impl Builtin {
    pub fn from_name(s: &str) -> Option<Builtin> {
        Some(match s {
            "exp" => Builtin::Exp,
            "log" => Builtin::Log,
            "tanh" => Builtin::Tanh,
            "sqrt" => Builtin::Sqrt,
            "rsqrt" => Builtin::Rsqrt,
            "abs" => Builtin::Abs,
            "min" => Builtin::Min,
            "max" => Builtin::Max,
            "select" => Builtin::Select,
            "vp" => Builtin::Vp,
            "mulmod" => Builtin::MulMod,
            "addmod" => Builtin::AddMod,
            "skip_if" => Builtin::SkipIf,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Exp => "exp",
            Builtin::Log => "log",
            Builtin::Tanh => "tanh",
            Builtin::Sqrt => "sqrt",
            Builtin::Rsqrt => "rsqrt",
            Builtin::Abs => "abs",
            Builtin::Min => "min",
            Builtin::Max => "max",
            Builtin::Select => "select",
            Builtin::Vp => "vp",
            Builtin::MulMod => "mulmod",
            Builtin::AddMod => "addmod",
            Builtin::SkipIf => "skip_if",
        }
    }
    /// Is this one of the residue builtins (which need a `modulus`)?
    pub fn is_residue(self) -> bool {
        matches!(self, Builtin::Vp | Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf)
    }
    pub const NAMES: [&'static str; 13] = ["exp", "log", "tanh", "sqrt", "rsqrt", "abs", "min", "max", "select", "vp", "mulmod", "addmod", "skip_if"];
}

#[derive(Clone, Debug, PartialEq)]
pub struct TExpr {
    pub kind: TExprKind,
    pub ty: Dtype,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TExprKind {
    Const(Const),
    /// Element of a tensor; every index is integer-typed.
    Load { tensor: TensorId, index: Vec<TExpr> },
    Scalar(ScalarId),
    /// A dim's value (i32).
    Dim(DimId),
    /// An index variable's value (i32).
    Var(VarId),
    Local(LocalId),
    Unary(UnOp, Box<TExpr>),
    Binary(BinOp, Box<TExpr>, Box<TExpr>),
    Call(Builtin, Vec<TExpr>),
    /// Conversion to `ty` (written, or an implicit widening).
    Cast(Box<TExpr>),
    Reduce { op: RedOp, var: VarId, body: Box<TExpr> },
    Let { local: LocalId, value: Box<TExpr>, body: Box<TExpr> },
}

impl TExpr {
    /// Visit every sub-expression, parents first.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a TExpr)) {
        f(self);
        match &self.kind {
            TExprKind::Load { index, .. } => index.iter().for_each(|e| e.walk(f)),
            TExprKind::Unary(_, a) | TExprKind::Cast(a) => a.walk(f),
            TExprKind::Binary(_, a, b) => {
                a.walk(f);
                b.walk(f);
            }
            TExprKind::Call(_, args) => args.iter().for_each(|e| e.walk(f)),
            TExprKind::Reduce { body, .. } => body.walk(f),
            TExprKind::Let { value, body, .. } => {
                value.walk(f);
                body.walk(f);
            }
            _ => {}
        }
    }

    /// Is `other` the same expression (spans aside), with each index
    /// variable `v.1` of `rename` in `other` standing for `v.0` in `self`?
    /// (A reduction's term `exp(x[r, k] - m[r])` and another statement's
    /// `exp(x[r', c] - m[r'])` are the same with `r'` for `r`, `c` for `k`.)
    pub fn same_as(&self, other: &TExpr, rename: &[(VarId, VarId)]) -> bool {
        let same = |a: &TExpr, b: &TExpr| a.same_as(b, rename);
        let all = |x: &[TExpr], y: &[TExpr]| x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b));
        if self.ty != other.ty {
            return false;
        }
        match (&self.kind, &other.kind) {
            (TExprKind::Const(x), TExprKind::Const(y)) => x == y,
            (TExprKind::Load { tensor: t1, index: i1 }, TExprKind::Load { tensor: t2, index: i2 }) => t1 == t2 && all(i1, i2),
            (TExprKind::Scalar(x), TExprKind::Scalar(y)) => x == y,
            (TExprKind::Dim(x), TExprKind::Dim(y)) => x == y,
            (TExprKind::Var(x), TExprKind::Var(y)) => x == y || rename.contains(&(*x, *y)),
            (TExprKind::Local(x), TExprKind::Local(y)) => x == y,
            (TExprKind::Unary(o1, x), TExprKind::Unary(o2, y)) => o1 == o2 && same(x, y),
            (TExprKind::Cast(x), TExprKind::Cast(y)) => same(x, y),
            (TExprKind::Binary(o1, a1, b1), TExprKind::Binary(o2, a2, b2)) => o1 == o2 && same(a1, a2) && same(b1, b2),
            (TExprKind::Call(f1, x1), TExprKind::Call(f2, x2)) => f1 == f2 && all(x1, x2),
            (TExprKind::Reduce { op: o1, var: v1, body: b1 }, TExprKind::Reduce { op: o2, var: v2, body: b2 }) => o1 == o2 && v1 == v2 && same(b1, b2),
            (TExprKind::Let { local: l1, value: v1, body: b1 }, TExprKind::Let { local: l2, value: v2, body: b2 }) => l1 == l2 && same(v1, v2) && same(b1, b2),
            _ => false,
        }
    }

    /// The plain variable if this expression is exactly an index variable.
    pub fn as_var(&self) -> Option<VarId> {
        match self.kind {
            TExprKind::Var(v) => Some(v),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub target: TensorId,
    /// Free variables, one per axis of the target.
    pub vars: Vec<VarId>,
    pub value: TExpr,
    pub span: Span,
}

/// `lo <= x < hi` (bounds as closed/open as written, normalised to half-open for ints).
#[derive(Clone, Debug, PartialEq)]
pub struct ValueRange {
    pub lo: TExpr,
    pub lo_closed: bool,
    pub hi: TExpr,
    pub hi_closed: bool,
    pub text: String,
    pub span: Span,
}

/// A `requires`/`ensures` predicate: a boolean expression over dims and
/// scalars, or a value range on a tensor.
#[derive(Clone, Debug)]
pub enum Contract {
    Pred { expr: TExpr, text: String, span: Span },
    Range { tensor: TensorId, range: ValueRange },
}

impl Contract {
    pub fn text(&self) -> String {
        match self {
            Contract::Pred { text, .. } => text.clone(),
            Contract::Range { range, .. } => range.text.clone(),
        }
    }
}

/// `x in [lo, hi]`, or with a magnitude `x in [-X, X]` / `x in [0, X]`:
/// then `lo` and `hi` are multiples of `X` (-1 or 0, and 1), and `X` is not
/// a constant but the launch's largest `|x|`, which the runtime measures.
#[derive(Clone, Debug)]
pub struct DomainRange {
    pub tensor: Option<TensorId>,
    pub scalar: Option<ScalarId>,
    pub lo: f64,
    pub hi: f64,
    /// The magnitude's name (`X`), when the range scales with one.
    pub magnitude: Option<String>,
    pub text: String,
    pub span: Span,
}

/// `square * square <= factor * bound` in a `domain`: for every element,
/// the square of `square`'s value is at most `factor` times `bound`'s value
/// at the same element (`bound` may be rank 0: one value for all). Adam's
/// `m * m <= 64.0 * v` and a clipped gradient's `g * g <= nsq` are facts
/// that no box of ranges can state; the error analysis uses them
/// (accuracy/ratio.rs) and the runtime checks them at every launch.
#[derive(Clone, Debug)]
pub struct Relation {
    pub square: TensorId,
    pub bound: TensorId,
    pub factor: f64,
    pub text: String,
    pub span: Span,
}

/// A symbol of a tolerance formula: a dim, or the magnitude of the
/// domain at this index of `Kernel::domain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sym {
    Dim(DimId),
    Magnitude(usize),
}

/// `coef * s1 * s2 * ...`, one term of a tolerance formula.
#[derive(Clone, Debug, PartialEq)]
pub struct FormulaTerm {
    pub coef: f64,
    pub syms: Vec<Sym>,
}

#[derive(Clone, Debug)]
pub struct Tolerance {
    pub tensor: TensorId,
    /// The constant part of `abs`.
    pub abs: f64,
    /// The terms of `abs` that scale with dims and magnitudes (empty for a
    /// constant tolerance).
    pub abs_terms: Vec<FormulaTerm>,
    pub rel: f64,
    pub span: Span,
}

impl Tolerance {
    /// Does `abs` scale with dims or magnitudes?
    pub fn is_formula(&self) -> bool {
        !self.abs_terms.is_empty()
    }
}

#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    pub doc: String,
    pub span: Span,
    pub dims: Vec<DimInfo>,
    pub tensors: Vec<TensorInfo>,
    pub scalars: Vec<ScalarInfo>,
    /// Signature order: inputs (tensors, inouts, scalars as declared), then outputs.
    pub params: Vec<Param>,
    pub vars: Vec<VarInfo>,
    pub locals: Vec<LocalInfo>,
    pub stmts: Vec<Stmt>,
    pub requires: Vec<Contract>,
    pub ensures: Vec<Contract>,
    pub domain: Vec<DomainRange>,
    pub relations: Vec<Relation>,
    pub tolerance: Vec<Tolerance>,
    /// The `modulus p^k` of the kernel's residue arithmetic, if declared.
    pub modulus: Option<tokitai_contracts::residue::Modulus>,
    /// Equivalence class of each dim under `requires A == B` (and `A == 4`).
    pub dim_class: Vec<usize>,
    /// Literal value known for a dim from `requires A == 4`.
    pub dim_value: Vec<Option<i64>>,
    /// Statement dataflow: an edge `w -> r` when statement `r` reads a tensor
    /// statement `w` writes; the edge weight is that tensor.
    pub graph: DiGraph<StmtId, TensorId>,
}

impl Kernel {
    /// Are two axis lengths equal for every launch that meets `requires`?
    pub fn dims_equal(&self, a: Dim, b: Dim) -> bool {
        match (a, b) {
            (Dim::Lit(x), Dim::Lit(y)) => x == y,
            (Dim::Sym(x), Dim::Sym(y)) => self.dim_class[x] == self.dim_class[y],
            (Dim::Sym(x), Dim::Lit(v)) | (Dim::Lit(v), Dim::Sym(x)) => self.dim_value[x] == Some(v),
        }
    }

    pub fn dim_name(&self, d: Dim) -> String {
        match d {
            Dim::Sym(id) => self.dims[id].name.clone(),
            Dim::Lit(v) => v.to_string(),
        }
    }

    /// The statement that writes a tensor, if any.
    pub fn writer(&self, t: TensorId) -> Option<StmtId> {
        self.stmts.iter().position(|s| s.target == t)
    }

    /// Is any bound of this kernel stated in launch-time magnitudes (a
    /// domain `[-X, X]` or a tolerance formula)? Such a kernel's bounds
    /// are derived by `accuracy::magnitude`, as polynomials.
    pub fn uses_magnitudes(&self) -> bool {
        self.domain.iter().any(|d| d.magnitude.is_some()) || self.tolerance.iter().any(|t| t.is_formula())
    }

    pub fn tolerance_of(&self, t: TensorId) -> Option<&Tolerance> {
        self.tolerance.iter().find(|x| x.tensor == t)
    }

    pub fn outputs(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.tensors.iter().enumerate().filter(|(_, t)| matches!(t.role, TensorRole::Output | TensorRole::Inout)).map(|(i, _)| i)
    }
}

/// A checked file: its kernels (helpers are inlined into them).
#[derive(Clone, Debug)]
pub struct Program {
    pub kernels: Vec<Kernel>,
}

/// A sum whose body is a product in f32 or f64 accumulates with one fused
/// multiply-add per term. The scheduler and the mirror oracle both call
/// this, so that they agree on every rounding.
pub fn fma_operands(body: &TExpr) -> Option<(&TExpr, &TExpr)> {
    match &body.kind {
        TExprKind::Binary(BinOp::Mul, a, b) if matches!(body.ty, Dtype::F32 | Dtype::F64) => Some((a, b)),
        _ => None,
    }
}

/// The reductions of an expression that are not inside another reduction.
pub fn top_reductions(e: &TExpr) -> Vec<&TExpr> {
    fn go<'a>(e: &'a TExpr, out: &mut Vec<&'a TExpr>) {
        match &e.kind {
            TExprKind::Reduce { .. } => out.push(e),
            TExprKind::Load { index, .. } => index.iter().for_each(|x| go(x, out)),
            TExprKind::Unary(_, a) | TExprKind::Cast(a) => go(a, out),
            TExprKind::Binary(_, a, b) => {
                go(a, out);
                go(b, out);
            }
            TExprKind::Call(_, args) => args.iter().for_each(|x| go(x, out)),
            TExprKind::Let { value, body, .. } => {
                go(value, out);
                go(body, out);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    go(e, &mut out);
    out
}

impl Kernel {
    /// A literal upper bound on a dim from `requires D <= n` (or `<`, `==`).
    pub fn dim_upper_bound(&self, d: Dim) -> Option<i64> {
        let id = match d {
            Dim::Lit(v) => return Some(v),
            Dim::Sym(id) => id,
        };
        if let Some(v) = self.dim_value[id] {
            return Some(v);
        }
        let mut best: Option<i64> = None;
        fn conjuncts<'a>(e: &'a TExpr, out: &mut Vec<&'a TExpr>) {
            match &e.kind {
                TExprKind::Binary(BinOp::And, a, b) => {
                    conjuncts(a, out);
                    conjuncts(b, out);
                }
                _ => out.push(e),
            }
        }
        for c in &self.requires {
            let Contract::Pred { expr, .. } = c else { continue };
            let mut parts = Vec::new();
            conjuncts(expr, &mut parts);
            for p in parts {
                let TExprKind::Binary(op, a, b) = &p.kind else { continue };
                let bound = match (op, &a.kind, &b.kind) {
                    (BinOp::Le, TExprKind::Dim(x), TExprKind::Const(Const::Int(v))) if self.dim_class[*x] == self.dim_class[id] => Some(*v),
                    (BinOp::Lt, TExprKind::Dim(x), TExprKind::Const(Const::Int(v))) if self.dim_class[*x] == self.dim_class[id] => Some(*v - 1),
                    (BinOp::Ge, TExprKind::Const(Const::Int(v)), TExprKind::Dim(x)) if self.dim_class[*x] == self.dim_class[id] => Some(*v),
                    (BinOp::Gt, TExprKind::Const(Const::Int(v)), TExprKind::Dim(x)) if self.dim_class[*x] == self.dim_class[id] => Some(*v - 1),
                    _ => None,
                };
                if let Some(b) = bound {
                    best = Some(best.map_or(b, |x: i64| x.min(b)));
                }
            }
        }
        best
    }
}
