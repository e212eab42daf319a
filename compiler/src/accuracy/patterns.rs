//! Relational facts about LayerNorm-shaped statements that a value
//! analysis loses: a row's mean, the centred sum of squares around it, and
//! a centred value times the row's `rsqrt(var + eps)`. Both error analyses
//! (intervals in [`super`], magnitudes in [`super::magnitude`]) recognise
//! these shapes here, so that they agree on what each lemma applies to.

use super::{at_own_element, same_expr};
use crate::syntax::ast::{BinOp, RedOp};
use crate::tir::{Builtin, Dim, Kernel, TExpr, TExprKind, TensorId, TensorRole, VarId};

/// A read of a row mean: the mean's tensor, the summed term, the sum's
/// variable, and the statement's free variables mapped to the read's indices.
pub(crate) type MeanRead<'a, 'e> = (TensorId, &'a TExpr, VarId, Vec<(VarId, &'e TExpr)>);

/// The shapes of one kernel.
pub(crate) struct Patterns<'a> {
    pub k: &'a Kernel,
}

impl<'a> Patterns<'a> {
    /// `m[idx]` where `m`'s statement is a mean, `(sum(v) t(v)) / f32(n)`
    /// over the whole extent `n` of `v`: the term `t`, the variable, the
    /// extent, and the statement's free variables mapped to `idx`.
    pub(crate) fn mean_of<'e>(&self, load: &'e TExpr) -> Option<MeanRead<'a, 'e>> {
        let TExprKind::Load { tensor, index } = &load.kind else { return None };
        if !matches!(self.k.tensors[*tensor].role, TensorRole::Intermediate | TensorRole::Output) {
            return None;
        }
        let st = &self.k.stmts[self.k.writer(*tensor)?];
        let TExprKind::Binary(BinOp::Div, sum, count) = &st.value.kind else { return None };
        let TExprKind::Reduce { op: RedOp::Sum, var, body } = &sum.kind else { return None };
        let TExprKind::Cast(c) = &count.kind else { return None };
        let TExprKind::Dim(d) = c.kind else { return None };
        if !self.k.dims_equal(Dim::Sym(d), self.k.vars[*var].extent) || st.vars.len() != index.len() {
            return None;
        }
        Some((*tensor, body, *var, st.vars.iter().copied().zip(index.iter()).collect()))
    }

    /// `t(w) - m[idx]` with `m` the mean of `t` over its row: the mean's
    /// tensor and the variable `w` the term is taken at.
    pub(crate) fn centred(&self, e: &TExpr) -> Option<(TensorId, VarId)> {
        let TExprKind::Binary(BinOp::Sub, t, m) = &e.kind else { return None };
        let (mean, pat, v, free) = self.mean_of(m)?;
        let mut bound_to = None;
        (self.same_term(pat, t, v, &mut bound_to, &free)).then_some(())?;
        Some((mean, bound_to?))
    }

    /// A sum's body `d * d` (or `let l = d; l * l`) with `d` centred at the
    /// sum's own variable: the mean's tensor.
    pub(crate) fn centred_square(&self, body: &TExpr, var: VarId) -> Option<TensorId> {
        let d = match &body.kind {
            TExprKind::Let { local, value, body: inner } => match &inner.kind {
                TExprKind::Binary(BinOp::Mul, x, y) if matches!((&x.kind, &y.kind), (TExprKind::Local(p), TExprKind::Local(q)) if p == local && q == local) => value.as_ref(),
                _ => return None,
            },
            TExprKind::Binary(BinOp::Mul, x, y) if same_expr(x, y) => x.as_ref(),
            _ => return None,
        };
        let (mean, w) = self.centred(d)?;
        // One mean for every term: its indices do not involve the sum's variable.
        let TExprKind::Binary(_, _, m) = &d.kind else { return None };
        let TExprKind::Load { index, .. } = &m.kind else { return None };
        let mut mentions = false;
        index.iter().for_each(|i| i.walk(&mut |x| mentions |= matches!(x.kind, TExprKind::Var(v) if v == var)));
        (w == var && !mentions).then_some(mean)
    }

    /// The mean read by a centred square (see [`Self::centred_square`]) is
    /// read at the row `frees` (the statement's own variables).
    pub(crate) fn mean_read_at(body: &TExpr, frees: &[VarId]) -> bool {
        let d = match &body.kind {
            TExprKind::Let { value, .. } => value.as_ref(),
            TExprKind::Binary(BinOp::Mul, x, _) => x.as_ref(),
            _ => return false,
        };
        let TExprKind::Binary(BinOp::Sub, _, m) = &d.kind else { return false };
        let TExprKind::Load { index, .. } = &m.kind else { return false };
        at_own_element(index, frees)
    }

    /// `(t(c) - m) * s` with `s = rsqrt(var + eps)`, `var` the mean of the
    /// squared deviations from the same mean over the same row and
    /// `eps >= 0`: `(t_c - m)^2 <= n var`, so `|product| <= sqrt(n)`.
    /// Returns the row length `n` and the `eps` expression (the caller
    /// shows `eps >= 0` with its own analysis).
    pub(crate) fn normalised(&self, a: &TExpr, b: &TExpr) -> Option<(Dim, &'a TExpr)> {
        let (mean, w) = self.centred(a)?;
        let TExprKind::Load { tensor: rs, index: rs_idx } = &b.kind else { return None };
        let TExprKind::Binary(BinOp::Sub, _, m_load) = &a.kind else { return None };
        let TExprKind::Load { index: m_idx, .. } = &m_load.kind else { return None };
        // Same row: `m` and `s` read at the same indices.
        if rs_idx.len() != m_idx.len() || !rs_idx.iter().zip(m_idx.iter()).all(|(x, y)| same_expr(x, y)) {
            return None;
        }
        let rs_st = &self.k.stmts[self.k.writer(*rs)?];
        let TExprKind::Call(Builtin::Rsqrt, args) = &rs_st.value.kind else { return None };
        let TExprKind::Binary(BinOp::Add, var_load, eps) = &args[0].kind else { return None };
        let TExprKind::Load { tensor: vt, index: v_idx } = &var_load.kind else { return None };
        if !at_own_element(v_idx, &rs_st.vars) {
            return None;
        }
        let var_st = &self.k.stmts[self.k.writer(*vt)?];
        let TExprKind::Binary(BinOp::Div, sum, count) = &var_st.value.kind else { return None };
        let TExprKind::Reduce { op: RedOp::Sum, var: sv, body } = &sum.kind else { return None };
        let TExprKind::Cast(c) = &count.kind else { return None };
        let TExprKind::Dim(d) = c.kind else { return None };
        let n = Dim::Sym(d);
        if !self.k.dims_equal(n, self.k.vars[*sv].extent) || !self.k.dims_equal(n, self.k.vars[w].extent) {
            return None;
        }
        if self.centred_square(body, *sv)? != mean || !Self::mean_read_at(body, &var_st.vars) {
            return None;
        }
        Some((n, eps.as_ref()))
    }

    /// Is `e` the expression `pat` with the reduction variable `var`
    /// replaced by one variable of the same extent, and each of the
    /// statement's free variables replaced by its index expression?
    pub(crate) fn same_term(&self, pat: &TExpr, e: &TExpr, var: VarId, bound_to: &mut Option<VarId>, free: &[(VarId, &TExpr)]) -> bool {
        if pat.ty != e.ty {
            return false;
        }
        match (&pat.kind, &e.kind) {
            (TExprKind::Var(p), _) if *p == var => {
                let TExprKind::Var(w) = e.kind else { return false };
                if !self.k.dims_equal(self.k.vars[var].extent, self.k.vars[w].extent) {
                    return false;
                }
                match bound_to {
                    Some(x) => *x == w,
                    None => {
                        *bound_to = Some(w);
                        true
                    }
                }
            }
            (TExprKind::Var(p), _) => match free.iter().find(|(v, _)| v == p) {
                Some((_, img)) => same_expr(img, e),
                None => matches!(e.kind, TExprKind::Var(q) if q == *p),
            },
            (TExprKind::Load { tensor: t1, index: i1 }, TExprKind::Load { tensor: t2, index: i2 }) => {
                t1 == t2 && i1.len() == i2.len() && i1.iter().zip(i2).all(|(x, y)| self.same_term(x, y, var, bound_to, free))
            }
            (TExprKind::Unary(o1, x1), TExprKind::Unary(o2, x2)) => o1 == o2 && self.same_term(x1, x2, var, bound_to, free),
            (TExprKind::Cast(x1), TExprKind::Cast(x2)) => self.same_term(x1, x2, var, bound_to, free),
            (TExprKind::Binary(o1, a1, b1), TExprKind::Binary(o2, a2, b2)) => {
                o1 == o2 && self.same_term(a1, a2, var, bound_to, free) && self.same_term(b1, b2, var, bound_to, free)
            }
            (TExprKind::Call(f1, x1), TExprKind::Call(f2, x2)) => {
                f1 == f2 && x1.len() == x2.len() && x1.iter().zip(x2).all(|(x, y)| self.same_term(x, y, var, bound_to, free))
            }
            _ => same_expr(pat, e),
        }
    }

}
