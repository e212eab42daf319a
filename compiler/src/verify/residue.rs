//! Residue arithmetic and the valuation skip rule (issue 23), proved on
//! the printed `KernelIr`.
//!
//! Every `skip_if(c, e)` the kernel prints (`(c ? 0u : e)`) must leave out
//! only values that are 0 modulo `p^k`. The rule this module knows is the
//! p-adic one: `e` is `mulmod(a, b)` and `c` implies `vp(a) + vp(b) >= k`.
//! The condition is read off the IR as it is printed: `vp(a)` and `vp(b)`
//! become the integers `va` and `vb`, and the kernel's obligation is that
//! the condition implies `va + vb >= k` (linear; `residue::skip_condition`).
//! The rest of the argument does not depend on the kernel and is proved
//! once per modulus (`residue::obligations`: the valuation chain means
//! divisibility, a threshold split, the split lemmas, no overflow), its
//! outcomes kept in the proof cache for every kernel of that modulus.
//!
//! A `skip_if` whose value is not a `mulmod` of two operands, or whose
//! condition reads anything but their valuations and constants, is an
//! obligation that fails with the reason: nothing is skipped on trust.

use super::obligations::discharge_scoped;
use super::VerifiedObligation;
use crate::kir::{KStmt, KernelIr, VExpr, VKind};
use crate::span::Span;
use crate::syntax::ast::{BinOp, UnOp};
use crate::tir::{Builtin, Const, Kernel, TExprKind};
use tokitai_contracts::residue::{self, Modulus};
use tokitai_contracts::z3_backend::Config;
use tokitai_contracts::{Formula, Obligation, ObligationKind, Term};

/// The obligations of the kernel's residue arithmetic: one per distinct
/// `skip_if`, and the modulus's lemmas where it uses any residue builtin.
pub fn residue_proofs(k: &Kernel, ir: &KernelIr, cfg: &Config, progress: &crate::progress::Task) -> Vec<VerifiedObligation> {
    let calls = residue_calls(ir);
    let tile_skips = super::tile_skip::has_skips(ir);
    if calls.is_empty() && !tile_skips {
        return Vec::new();
    }
    let at = skip_span(k);
    let own: Vec<(Obligation, Span)> = obligations_of(ir, &calls).into_iter().map(|o| (o, at)).collect();
    let mut out = discharge_scoped(&crate::cache::fingerprint(ir), &ir.name, own, cfg, progress);
    if let Some(m) = ir.modulus {
        // A kernel that skips stands on the whole rule; one that only
        // computes with residues on its no-overflow part.
        let skips = tile_skips || calls.iter().any(|c| matches!(c.kind, VKind::Call(Builtin::SkipIf, _)));
        let lemmas = if skips { residue::obligations(&m) } else { residue::no_overflow(&m) };
        let lemmas = lemmas.into_iter().map(|o| (o, modulus_span(k))).collect();
        out.extend(discharge_scoped(&format!("residue lemmas modulo {}", m), &ir.name, lemmas, cfg, progress));
    }
    out
}

/// Where a skip obligation points: the first `skip_if` of the source
/// (the IR keeps no spans), else the kernel.
fn skip_span(k: &Kernel) -> Span {
    let mut at = None;
    for s in &k.stmts {
        s.value.walk(&mut |e| {
            if at.is_none() && matches!(e.kind, TExprKind::Call(Builtin::SkipIf, _)) {
                at = Some(e.span);
            }
        });
    }
    at.unwrap_or(k.span)
}

/// Where a lemma of the modulus points: the kernel (its `modulus` clause
/// is not kept with a span).
fn modulus_span(k: &Kernel) -> Span {
    k.span
}

/// Every residue builtin call the kernel prints, in order.
fn residue_calls(ir: &KernelIr) -> Vec<&VExpr> {
    let mut calls = Vec::new();
    each_vexpr(&ir.body, &mut |e| collect_residue_calls(e, &mut calls));
    calls
}

/// The obligations that depend on this kernel: each distinct `skip_if`'s
/// condition (and a failing one where residue builtins appear without a
/// modulus, which the checker refuses: a schedule that invents one is a
/// bug). The mutation test looks for a refutation among these.
pub fn kernel_obligations(ir: &KernelIr) -> Vec<Obligation> {
    obligations_of(ir, &residue_calls(ir))
}

fn obligations_of(ir: &KernelIr, calls: &[&VExpr]) -> Vec<Obligation> {
    let tile_skips = super::tile_skip::has_skips(ir);
    if calls.is_empty() && !tile_skips {
        return Vec::new();
    }
    let Some(m) = ir.modulus else {
        return vec![unprovable("a residue builtin or a tile skip in a kernel without a modulus".into())];
    };
    let mut out: Vec<Obligation> = Vec::new();
    for call in calls.iter().filter(|c| matches!(c.kind, VKind::Call(Builtin::SkipIf, _))) {
        let ob = skip_obligation(&m, call);
        if !out.iter().any(|o| o.description == ob.description && o.hypotheses == ob.hypotheses) {
            out.push(ob);
        }
    }
    out.extend(super::tile_skip::obligations(ir, &m));
    out
}

/// The obligation of one printed `skip_if(c, mulmod(a, b))`.
fn skip_obligation(m: &Modulus, call: &VExpr) -> Obligation {
    let VKind::Call(Builtin::SkipIf, args) = &call.kind else { unreachable!("called on skip_if") };
    let (cond, value) = (&args[0], &args[1]);
    let VKind::Call(Builtin::MulMod, operands) = &value.kind else {
        return unprovable(format!("modulo {}: a skip_if whose value is not `mulmod(a, b)`: only products are skipped by valuation", m));
    };
    let factors = Factors { a: &operands[0], b: &operands[1], k: m.k };
    let read = Reader { leaves: &factors };
    match read.formula(cond) {
        Ok(f) => residue::skip_condition(m, f, &read.text(cond)),
        Err(why) => unprovable(format!("modulo {}: the skip condition is not over vp(a) and vp(b) of the product's factors: {}", m, why)),
    }
}

/// An obligation that cannot hold, carrying the reason in its description.
pub(super) fn unprovable(description: String) -> Obligation {
    Obligation { kind: ObligationKind::SkipExact, description, origin: (0, 0), hypotheses: vec![], goal: Formula::False, show: vec![] }
}

/// The values a condition may read, each an integer variable of its
/// formula: a skip's valuations of the product's factors, a tile skip's
/// minima.
pub(super) trait Leaves {
    /// The term of a leaf and its largest value; `None` where `e` is not
    /// a leaf, an error where it is one the condition may not read.
    fn leaf(&self, e: &VExpr) -> Option<Result<(Term, i128), String>>;
    /// How a reader of the kernel names the leaf.
    fn name(&self, e: &VExpr) -> Option<String>;
}

/// A product's factors: `vp(a)` and `vp(b)` are `va` and `vb`.
struct Factors<'a> {
    a: &'a VExpr,
    b: &'a VExpr,
    /// The modulus's exponent: each valuation lies in `[0, k]`.
    k: u32,
}

impl Leaves for Factors<'_> {
    fn leaf(&self, e: &VExpr) -> Option<Result<(Term, i128), String>> {
        let k = self.k as i128;
        match &e.kind {
            VKind::Call(Builtin::Vp, x) if same_value(&x[0], self.a) => Some(Ok((Term::var("va"), k))),
            VKind::Call(Builtin::Vp, x) if same_value(&x[0], self.b) => Some(Ok((Term::var("vb"), k))),
            VKind::Call(Builtin::Vp, _) => Some(Err("`vp` of a value other than the product's factors".into())),
            _ => None,
        }
    }
    fn name(&self, e: &VExpr) -> Option<String> {
        match &e.kind {
            VKind::Call(Builtin::Vp, x) if same_value(&x[0], self.a) => Some("vp(a)".into()),
            VKind::Call(Builtin::Vp, x) if same_value(&x[0], self.b) => Some("vp(b)".into()),
            _ => None,
        }
    }
}

/// Reads a condition as a linear formula over its leaves.
pub(super) struct Reader<'a> {
    pub leaves: &'a dyn Leaves,
}

impl Reader<'_> {
    /// The term of an integer value, and its largest value: every value
    /// here is unsigned and kept below 2^31, so that the machine's
    /// arithmetic (u32, or i32 after a cast) is the term's, with no wrap.
    fn term(&self, e: &VExpr) -> Result<(Term, i128), String> {
        if let Some(leaf) = self.leaves.leaf(e) {
            return leaf;
        }
        let (t, most) = match &e.kind {
            VKind::Const(Const::Int(v)) if *v >= 0 => (Term::c(*v), *v as i128),
            VKind::Cast(x) if x.ty.is_int() && e.ty.is_int() => self.term(x)?,
            VKind::Binary(BinOp::Add, x, y) => {
                let ((x, mx), (y, my)) = (self.term(x)?, self.term(y)?);
                (x.add(y), mx + my)
            }
            VKind::Binary(BinOp::Mul, x, y) => {
                let ((x, mx), (y, my)) = (self.term(x)?, self.term(y)?);
                (x.mul(y), mx * my)
            }
            _ => return Err(format!("it reads `{}` (conditions add and multiply valuations and constants)", self.text(e))),
        };
        if most >= 1 << 31 {
            return Err(format!("`{}` may wrap around", self.text(e)));
        }
        Ok((t, most))
    }

    pub(super) fn formula(&self, e: &VExpr) -> Result<Formula, String> {
        let cmp = |x: &VExpr, y: &VExpr| -> Result<(Term, Term), String> { Ok((self.term(x)?.0, self.term(y)?.0)) };
        Ok(match &e.kind {
            VKind::Const(Const::Bool(b)) => if *b { Formula::True } else { Formula::False },
            VKind::Binary(BinOp::And, x, y) => Formula::and(vec![self.formula(x)?, self.formula(y)?]),
            VKind::Binary(BinOp::Or, x, y) => Formula::or(vec![self.formula(x)?, self.formula(y)?]),
            VKind::Unary(UnOp::Not, x) => self.formula(x)?.not(),
            VKind::Binary(op, x, y) if op.is_comparison() => {
                let (l, r) = cmp(x, y)?;
                match op {
                    BinOp::Lt => l.lt(r),
                    BinOp::Le => l.le(r),
                    BinOp::Gt => r.lt(l),
                    BinOp::Ge => r.le(l),
                    BinOp::Eq => l.eq(r),
                    _ => l.eq(r).not(),
                }
            }
            _ => return Err(format!("it reads `{}`", self.text(e))),
        })
    }

    /// The condition as a reader of the kernel would write it.
    pub(super) fn text(&self, e: &VExpr) -> String {
        if let Some(name) = self.leaves.name(e) {
            return name;
        }
        match &e.kind {
            VKind::Const(Const::Int(v)) => v.to_string(),
            VKind::Const(Const::Bool(b)) => b.to_string(),
            VKind::Cast(x) => self.text(x),
            VKind::Binary(op, x, y) => format!("{} {} {}", self.text(x), op.symbol(), self.text(y)),
            VKind::Unary(UnOp::Not, x) => format!("!({})", self.text(x)),
            VKind::Load { .. } => "a tensor element".into(),
            _ => "a value".into(),
        }
    }
}

/// Are two values the same computation? Loads of one element are, though
/// each load has its own access id.
pub(super) fn same_value(x: &VExpr, y: &VExpr) -> bool {
    fn erase(e: &VExpr) -> VExpr {
        let b = |x: &VExpr| Box::new(erase(x));
        let kind = match &e.kind {
            VKind::Load { buf, index, axes, .. } => VKind::Load { buf: *buf, index: index.clone(), axes: axes.clone(), access: 0 },
            VKind::Unary(op, a) => VKind::Unary(*op, b(a)),
            VKind::Cast(a) => VKind::Cast(b(a)),
            VKind::Binary(op, x, y) => VKind::Binary(*op, b(x), b(y)),
            VKind::Fma(x, y, z) => VKind::Fma(b(x), b(y), b(z)),
            VKind::Select(x, y, z) => VKind::Select(b(x), b(y), b(z)),
            VKind::Call(f, args) => VKind::Call(*f, args.iter().map(erase).collect()),
            VKind::ShflXor { value, mask } => VKind::ShflXor { value: b(value), mask: *mask },
            other => other.clone(),
        };
        VExpr::new(kind, e.ty)
    }
    erase(x) == erase(y)
}

fn collect_residue_calls<'a>(e: &'a VExpr, out: &mut Vec<&'a VExpr>) {
    e.walk(&mut |x| {
        if matches!(&x.kind, VKind::Call(b, _) if b.is_residue()) {
            out.push(x);
        }
    });
}

/// Every value expression of the statements, in order.
fn each_vexpr<'a>(body: &'a [KStmt], f: &mut dyn FnMut(&'a VExpr)) {
    for s in body {
        match s {
            KStmt::Decl { init: Some(v), .. } | KStmt::DeclArray { init: Some(v), .. } => f(v),
            KStmt::Assign { value, .. } | KStmt::ArraySet { value, .. } | KStmt::Store { value, .. } | KStmt::SharedSet { value, .. } => f(value),
            KStmt::ObserveRelation { square, bound, .. } => {
                f(square);
                f(bound);
            }
            KStmt::For { body, .. } => each_vexpr(body, f),
            KStmt::If { then, els, .. } => {
                each_vexpr(then, f);
                each_vexpr(els, f);
            }
            KStmt::SkipWhen { cond, body } => {
                f(cond);
                each_vexpr(body, f);
            }
            _ => {}
        }
    }
}
