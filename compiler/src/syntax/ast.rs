//! The abstract syntax of `.tk`, exactly as written, with spans.

use crate::span::Span;
use crate::types::Dtype;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct File {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Kernel(Kernel),
    Fn(FnDef),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub docs: Vec<String>,
    pub name: Ident,
    pub params: Vec<Param>,
    pub outputs: Vec<Param>,
    pub clauses: Vec<Clause>,
    pub body: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub inout: bool,
    pub dtype: Dtype,
    pub dtype_span: Span,
    /// `None` for a scalar (`lr: f32`); `Some(vec![])` for `f32[]`.
    pub shape: Option<Vec<DimExpr>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DimExpr {
    Named(Ident),
    Lit(i64, Span),
}

impl DimExpr {
    pub fn span(&self) -> Span {
        match self {
            DimExpr::Named(i) => i.span,
            DimExpr::Lit(_, s) => *s,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Clause {
    Requires(Vec<Pred>, Span),
    /// Ranges (`x in [lo, hi]`) and relations between inputs
    /// (`m * m <= 64.0 * v`).
    Domain(Vec<Pred>, Span),
    Tolerance(Vec<TolEntry>, Span),
    Ensures(Vec<Pred>, Span),
    /// `modulus p^k`: the kernel's residue arithmetic (`mulmod`, `addmod`,
    /// `summod`, `vp`) is modulo `p^k` (checked by
    /// `tokitai_contracts::residue::Modulus::new`).
    Modulus { p: i64, k: i64, span: Span },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pred {
    Expr(Expr),
    Range(RangePred),
}

/// `name in [lo, hi)`; each end open or closed.
#[derive(Clone, Debug, PartialEq)]
pub struct RangePred {
    pub name: Ident,
    pub lo: Expr,
    pub lo_closed: bool,
    pub hi: Expr,
    pub hi_closed: bool,
    pub span: Span,
}

/// One `abs 4e-3` or `y: abs 4e-3` entry of a tolerance clause; entries
/// without a target belong to the last named one. An `abs` value may be a
/// formula in dims and magnitudes (`abs 2e-7 * K * X * W + 1e-6`).
#[derive(Clone, Debug, PartialEq)]
pub struct TolEntry {
    pub target: Option<Ident>,
    pub kind: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub target: Ident,
    /// `None` for `loss = ...` (a rank-0 tensor).
    pub indices: Option<Vec<Ident>>,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDef {
    pub docs: Vec<String>,
    pub name: Ident,
    pub params: Vec<(Ident, Dtype)>,
    pub ret: Dtype,
    pub body: Expr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedOp {
    Sum,
    /// A sum of residues modulo the kernel's `modulus`, reduced after
    /// every step (`addmod`).
    SumMod,
    Max,
    Min,
    Argmax,
}

impl RedOp {
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::SumMod => "summod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Argmax => "argmax",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Let {
    pub name: Ident,
    pub ty: Option<Dtype>,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Name(Ident),
    Index(Ident, Vec<Expr>),
    Call(Ident, Vec<Expr>),
    Cast(Dtype, Box<Expr>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Reduce { op: RedOp, var: Ident, range: Option<(Box<Expr>, Box<Expr>)>, body: Box<Expr> },
    Block(Vec<Let>, Box<Expr>),
}

/// Build a binary expression (used by the grammar's actions).
pub fn bin(op: BinOp, a: Expr, b: Expr, lo: usize, hi: usize) -> Expr {
    Expr { kind: ExprKind::Binary(op, Box::new(a), Box::new(b)), span: Span::new(lo, hi) }
}

/// Build a reduction expression (used by the grammar's actions).
pub fn reduction(op: RedOp, tail: (Ident, Option<(Expr, Expr)>, Expr), lo: usize, hi: usize) -> Expr {
    let (var, range, body) = tail;
    Expr {
        kind: ExprKind::Reduce { op, var, range: range.map(|(a, b)| (Box::new(a), Box::new(b))), body: Box::new(body) },
        span: Span::new(lo, hi),
    }
}
