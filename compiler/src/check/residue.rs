//! Residue arithmetic (issue 23): the `modulus p^k` clause and the rule
//! that every operand of a residue builtin is a residue.
//!
//! `mulmod`, `addmod`, `vp` and `summod` compute on `u32` residues in
//! `[0, p^k)`, widening to 64 bits inside: `tokitai_contracts::residue`
//! proves for the declared modulus that nothing overflows and that the
//! valuation is what it says, but only for operands in `[0, p^k)`. So an
//! operand must be known to lie there, by one of:
//!
//! - an input tensor with `requires a in [0, Q)` for `Q <= p^k` (checked
//!   at every launch, like an index tensor's range);
//! - the result of `mulmod`, `addmod`, `skip_if` or `summod` (reduced);
//! - an integer literal in `[0, p^k)`.
//!
//! Anything else (a sum of residues, a cast, an unchecked tensor) is an
//! error that says which operand and how to make it a residue.

use super::KernelChecker;
use crate::diag::Diagnostic;
use crate::span::Span;
use crate::syntax::ast::{self, RedOp};
use crate::tir::{Builtin, Const, LocalId, Stmt, TExpr, TExprKind, TensorInfo};
use tokitai_contracts::residue::Modulus;

impl KernelChecker<'_> {
    /// The kernel's `modulus` clause, checked: one at most, `p` prime,
    /// `k >= 1`, `p^k <= 2^32`.
    pub(super) fn check_modulus(&mut self, k: &ast::Kernel) -> Option<Modulus> {
        let mut found: Option<(Modulus, Span)> = None;
        for clause in &k.clauses {
            let ast::Clause::Modulus { p, k: e, span } = clause else { continue };
            if let Some((_, first)) = found {
                self.error(
                    Diagnostic::error("E0330", format!("kernel `{}` declares its modulus twice", k.name.name), *span)
                        .with_label("second `modulus`")
                        .with_secondary(first, "first declared here")
                        .with_help("a kernel computes modulo one `p^k`; split it to use two"),
                );
                continue;
            }
            let m = match (u64::try_from(*p), u32::try_from(*e)) {
                (Ok(p), Ok(e)) => Modulus::new(p, e).map_err(|err| err.to_string()),
                (Err(_), _) => Err(format!("p = {} is not prime: a prime is at least 2", p)),
                (_, Err(_)) => Err(format!("k = {} is not an exponent the residue type admits (0 < k, p^k <= 2^32)", e)),
            };
            match m {
                Ok(m) => found = Some((m, *span)),
                Err(why) => self.error(
                    Diagnostic::error("E0330", format!("`modulus {}^{}` is not a modulus: {}", p, e, why), *span)
                        .with_label("declared here")
                        .with_help("write `modulus p^k` with p prime and p^k at most 2^32, e.g. `modulus 2^16` or `modulus 3^10`"),
                ),
            }
        }
        found.map(|(m, _)| m)
    }

    /// Every residue builtin and `summod` has a modulus to work in, and
    /// every operand they compute on is a residue.
    pub(super) fn check_residues(&mut self, kernel_name: &str, modulus: Option<Modulus>, stmts: &[Stmt]) {
        let mut diags = Vec::new();
        for s in stmts {
            let walk = Walk { modulus, tensors: &self.tensors, kernel: kernel_name, locals: Vec::new() };
            walk.expr(&s.value, &mut diags);
        }
        for d in diags {
            self.error(d);
        }
    }
}

struct Walk<'a> {
    modulus: Option<Modulus>,
    tensors: &'a [TensorInfo],
    kernel: &'a str,
    /// Helper parameters in scope, and whether each is bound to a residue.
    locals: Vec<(LocalId, bool)>,
}

impl Walk<'_> {
    fn expr(&self, e: &TExpr, out: &mut Vec<Diagnostic>) {
        match &e.kind {
            TExprKind::Call(b, args) if b.is_residue() => {
                let Some(m) = self.needs_modulus(b.name(), e.span, out) else { return };
                // skip_if's condition is any bool; its value and every
                // other builtin's operands are residues.
                let operands = if *b == Builtin::SkipIf { &args[1..] } else { &args[..] };
                for a in operands {
                    self.operand(&m, b.name(), a, out);
                }
                args.iter().for_each(|a| self.expr(a, out));
            }
            TExprKind::Reduce { op: RedOp::SumMod, body, .. } => {
                let Some(m) = self.needs_modulus("summod", e.span, out) else { return };
                self.operand(&m, "summod", body, out);
                self.expr(body, out);
            }
            TExprKind::Let { local, value, body } => {
                self.expr(value, out);
                let mut inner = Walk { modulus: self.modulus, tensors: self.tensors, kernel: self.kernel, locals: self.locals.clone() };
                inner.locals.push((*local, self.modulus.is_some_and(|m| self.is_residue(&m, value))));
                inner.expr(body, out);
            }
            TExprKind::Load { index, .. } => index.iter().for_each(|x| self.expr(x, out)),
            TExprKind::Unary(_, a) | TExprKind::Cast(a) => self.expr(a, out),
            TExprKind::Binary(_, a, b) => {
                self.expr(a, out);
                self.expr(b, out);
            }
            TExprKind::Call(_, args) => args.iter().for_each(|a| self.expr(a, out)),
            TExprKind::Reduce { body, .. } => self.expr(body, out),
            _ => {}
        }
    }

    fn needs_modulus(&self, what: &str, span: Span, out: &mut Vec<Diagnostic>) -> Option<Modulus> {
        if self.modulus.is_none() {
            out.push(
                Diagnostic::error("E0331", format!("`{}` in kernel `{}`, which declares no modulus", what, self.kernel), span)
                    .with_label("residue arithmetic needs `modulus p^k`")
                    .with_help("declare the ring after the signature, e.g. `modulus 2^16`"),
            );
        }
        self.modulus
    }

    fn operand(&self, m: &Modulus, what: &str, e: &TExpr, out: &mut Vec<Diagnostic>) {
        if self.is_residue(m, e) {
            return;
        }
        let help = match &e.kind {
            TExprKind::Load { tensor, .. } => format!("state its range: `requires {} in [0, {})`", self.tensors[*tensor].name, m.q()),
            _ => "reduce it first, e.g. with `mulmod`, `addmod` or `summod`; or read it from a tensor whose `requires` puts it in [0, p^k)".to_string(),
        };
        out.push(
            Diagnostic::error("E0332", format!("an operand of `{}` is not known to be a residue modulo {} (in [0, {}))", what, m, m.q()), e.span)
                .with_label("not proved to lie in [0, p^k)")
                .with_help(help),
        );
    }

    fn is_residue(&self, m: &Modulus, e: &TExpr) -> bool {
        let q = m.q();
        match &e.kind {
            TExprKind::Const(Const::Int(v)) => (0..q).contains(v),
            TExprKind::Load { tensor, .. } => self.tensors[*tensor].value_range.as_ref().is_some_and(|r| {
                let int = |x: &TExpr| match x.kind {
                    TExprKind::Const(Const::Int(v)) => Some(v),
                    _ => None,
                };
                // Ranges are half-open for integers after checking.
                let lo = int(&r.lo).map(|v| if r.lo_closed { v } else { v + 1 });
                let hi = int(&r.hi).map(|v| if r.hi_closed { v + 1 } else { v });
                matches!((lo, hi), (Some(lo), Some(hi)) if lo >= 0 && hi <= q)
            }),
            TExprKind::Call(Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf, _) => true,
            TExprKind::Reduce { op: RedOp::SumMod, .. } => true,
            TExprKind::Local(l) => self.locals.iter().rev().find(|(x, _)| x == l).is_some_and(|(_, r)| *r),
            TExprKind::Let { body, local, value } => {
                let mut inner = Walk { modulus: self.modulus, tensors: self.tensors, kernel: self.kernel, locals: self.locals.clone() };
                inner.locals.push((*local, self.is_residue(m, value)));
                inner.is_residue(m, body)
            }
            _ => false,
        }
    }
}
