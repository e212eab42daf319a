//! The ratio lemma: a bound on `a / (sqrt(y) + e)` that holds where `y`
//! reaches zero.
//!
//! Adam's update `m / (sqrt(v) + eps)` is the case in point. Over a box of
//! ranges it is unbounded as `v -> 0`: nothing in a box says that `m` is
//! small where `v` is. But `y` is a sum of non-negative terms, and each term
//! of `a` is dominated by one of them: the gradient `g` enters `a` linearly
//! and `y` through `g * g`, and the moment `m` is tied to `v` by the domain
//! relation `m * m <= c * v` (tir::Relation). From `y >= k t^2` follows
//! `|t| <= sqrt(y / k) <= b / sqrt(k)` with `b = sqrt(y) + e` the exact
//! divisor. So every quantity of `a` is measured in units of `b`:
//!
//! - `a` must be linear in such terms ("atoms", read at the statement's own
//!   element): each summand holds exactly one atom, times factors bounded
//!   by their boxes. Then `a / b` is bounded by evaluating `a` with each
//!   atom's range replaced by `[-1/sqrt(k), 1/sqrt(k)]`, and so is `a`'s
//!   error over `b`: the relative errors scale with the atoms, and an
//!   absolute error `d` (a subnormal floor) is at most `d / e_lo` over `b`.
//! - The divisor's own error, relative to `b`: the square root of `y`'s
//!   computed value, `y (1 + rho) + f`, is within `sqrt(y) rho / (1 +
//!   sqrt(1 - rho)) + sqrt(f)` of the exact one, then the library's
//!   `sqrt`, the error of `e` and the rounding of the sum.
//!
//! The lemma applies only when `y`'s computed value cannot be negative (a
//! sum and product of values computed non-negative), `e` is positive and
//! both the root and the sum are computed in f32 or f64.

use super::*;
use tokitai_contracts::fp::{add_up, div_up, down};

/// A value of the numerator in units of the divisor: linear in the atoms,
/// or a factor (no atom, bounded by its box).
enum Norm {
    Linear(AVal),
    Factor(AVal),
}

impl Walk<'_> {
    /// `a / b` by the ratio lemma, rounded as the kernel rounds it; `None`
    /// where the lemma does not apply.
    pub(super) fn ratio(&mut self, a: &TExpr, b: &TExpr, e: &TExpr) -> Option<AVal> {
        let compute = match format_of(e.ty)? {
            f @ (Format::F32 | Format::F64) => f,
            _ => return None,
        };
        let TExprKind::Binary(BinOp::Add, l, r) = &b.kind else { return None };
        let (root, eps) = match (&l.kind, &r.kind) {
            (TExprKind::Call(Builtin::Sqrt, args), _) => (&args[0], r.as_ref()),
            (_, TExprKind::Call(Builtin::Sqrt, args)) => (&args[0], l.as_ref()),
            _ => return None,
        };
        if format_of(l.ty) != Some(compute) || format_of(r.ty) != Some(compute) {
            return None;
        }
        let ev = self.float(eps).ok()?;
        let e_lo = ev.range.lo;
        if e_lo <= 0.0 {
            return None;
        }
        // Atoms and how strongly `y` dominates their squares.
        let frees = self.frees.clone();
        let mut atoms: Vec<(TensorId, f64)> = Vec::new();
        self.squares(root, &frees, 1.0, &mut atoms)?;
        if atoms.is_empty() || !self.computed_nonneg(root, &frees) {
            return None;
        }
        let a_n = match self.norm(a, &frees, &atoms, e_lo)? {
            Norm::Linear(v) => v,
            Norm::Factor(_) => return None,
        };
        // The divisor's error relative to `b`.
        let yv = self.float(root).ok()?;
        let (abs_y, rel_y) = yv.err.total();
        if yv.range.lo < 0.0 || rel_y >= 0.5 {
            return None;
        }
        let sigma_r = div_up(rel_y, down(1.0 + down(down(1.0 - rel_y).sqrt())));
        let d1 = add_up(sigma_r, div_up(up(abs_y.sqrt()), e_lo));
        let (r_s, a_s) = self.lib.cost(Function::Sqrt, compute);
        let d2 = add_up(add_up(d1, mul_up(r_s, add_up(1.0, d1))), div_up(a_s, e_lo));
        let d_e = div_up(ev.err.at(ev.range.mag()), e_lo);
        let (u, floor) = (compute.unit_roundoff(), compute.subnormal_abs());
        let rho_b = add_up(add_up(add_up(d2, d_e), mul_up(u, add_up(1.0, add_up(d2, d_e)))), div_up(floor, e_lo));
        let src = self.src("the divisor `sqrt(..) + e` (ratio lemma)".to_string(), b.span);
        let b_n = AVal { range: Interval::point(1.0), err: ErrBound::single(src, 0.0, rho_b) };
        let q = a_n.div(&b_n).ok()?;
        self.library(q, Function::Div, e.ty, e.span).ok()
    }

    /// Atoms `t` (tensors read at the statement's own element `frees`)
    /// with `y >= k t^2`, as `(t, k)` (the largest `k` kept). `None` when
    /// `y` is not such a sum.
    fn squares(&mut self, y: &TExpr, frees: &[VarId], w: f64, out: &mut Vec<(TensorId, f64)>) -> Option<()> {
        if w.is_nan() || w <= 0.0 {
            return Some(());
        }
        fn note(out: &mut Vec<(TensorId, f64)>, t: TensorId, k: f64) {
            match out.iter_mut().find(|(x, _)| *x == t) {
                Some(e) => e.1 = e.1.max(k),
                None => out.push((t, k)),
            }
        }
        let kernel = self.k;
        match &y.kind {
            TExprKind::Binary(BinOp::Add, p, q) => {
                // y = p + q >= p when q >= 0, and >= q when p >= 0.
                let (pr, qr) = (self.range_of(p)?, self.range_of(q)?);
                if qr.lo >= 0.0 {
                    self.squares(p, frees, w, out)?;
                }
                if pr.lo >= 0.0 {
                    self.squares(q, frees, w, out)?;
                }
                Some(())
            }
            TExprKind::Binary(BinOp::Mul, p, q) if same_expr(p, q) => {
                if let Some(t) = self.identity_load(p, frees) {
                    note(out, t, w);
                }
                Some(())
            }
            TExprKind::Binary(BinOp::Mul, p, q) => {
                let (pr, qr) = (self.range_of(p)?, self.range_of(q)?);
                if pr.lo >= 0.0 && qr.lo >= 0.0 {
                    self.squares(p, frees, down(w * qr.lo), out)?;
                    self.squares(q, frees, down(w * pr.lo), out)?;
                }
                Some(())
            }
            TExprKind::Cast(p) if format_of(p.ty).zip(format_of(y.ty)).is_some_and(|(f, t)| f.fits_in(t)) => self.squares(p, frees, w, out),
            TExprKind::Load { tensor, index } => {
                match kernel.tensors[*tensor].role {
                    TensorRole::Input | TensorRole::Inout => {
                        if index.is_empty() || self.identity_load(y, frees).is_some() {
                            for rel in kernel.relations.iter().filter(|r| r.bound == *tensor) {
                                note(out, rel.square, down(w / rel.factor));
                            }
                        }
                        Some(())
                    }
                    _ => {
                        if self.identity_load(y, frees).is_none() {
                            return Some(());
                        }
                        let st = &kernel.stmts[kernel.writer(*tensor)?];
                        self.enter(st.vars.clone());
                        let r = self.squares(&st.value, &st.vars, w, out);
                        self.leave();
                        r
                    }
                }
            }
            _ => Some(()),
        }
    }

    /// `a` in units of the divisor (see the module's comment); `None` when
    /// `a` is not linear in the atoms.
    fn norm(&mut self, a: &TExpr, frees: &[VarId], atoms: &[(TensorId, f64)], e_lo: f64) -> Option<Norm> {
        if !self.mentions_atom(a, frees, atoms) {
            return self.float(a).ok().map(Norm::Factor);
        }
        let floor = 1.0 / e_lo;
        let linear = |v: Option<AVal>| v.map(Norm::Linear);
        let kernel = self.k;
        let compute = match a.ty {
            Dtype::F64 => Format::F64,
            Dtype::F32 => Format::F32,
            _ => return None,
        };
        match &a.kind {
            TExprKind::Load { tensor, .. } => {
                let t = self.identity_load(a, frees)?;
                if let Some((_, k)) = atoms.iter().find(|(x, _)| *x == t) {
                    let r = up(1.0 / down(k.sqrt()));
                    let err = match kernel.tensors[t].role {
                        TensorRole::Input | TensorRole::Inout => ErrBound::zero(),
                        _ => match self.stmt_value(t, a.span).ok()? {
                            V::Float(v) => v.err.scaled(floor, 1.0),
                            _ => return None,
                        },
                    };
                    return linear(Some(AVal { range: Interval::new(-r, r), err }));
                }
                // An input or inout read is the launch's input value, not
                // what a statement later writes there (descending into an
                // inout's writer looped on `theta = select(.., theta)`).
                if reads_launch_input(kernel, t) {
                    return None;
                }
                let st = &kernel.stmts[kernel.writer(*tensor)?];
                self.enter(st.vars.clone());
                let v = self.norm(&st.value, &st.vars, atoms, e_lo);
                self.leave();
                let Norm::Linear(v) = v? else { return None };
                let (dt, from) = (kernel.tensors[t].dtype, format_of(st.value.ty)?);
                let to = format_of(dt)?;
                let label = format!("`{}`", kernel.tensors[t].name);
                linear(if from.fits_in(to) { Some(v) } else { self.round_scaled(v, dt, &label, st.span, floor).ok() })
            }
            TExprKind::Unary(UnOp::Neg, x) => match self.norm(x, frees, atoms, e_lo)? {
                Norm::Linear(v) => linear(Some(v.neg())),
                Norm::Factor(_) => None,
            },
            TExprKind::Cast(x) => {
                let Norm::Linear(v) = self.norm(x, frees, atoms, e_lo)? else { return None };
                let (from, to) = (format_of(x.ty)?, format_of(a.ty)?);
                linear(if from.fits_in(to) { Some(v) } else { self.round_scaled(v, a.ty, &format!("the conversion to {}", to), a.span, floor).ok() })
            }
            TExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div), x, y) => {
                let (p, q) = (self.norm(x, frees, atoms, e_lo)?, self.norm(y, frees, atoms, e_lo)?);
                let second = self.src(format!("second-order terms of `{}`", op.symbol()), a.span);
                let exact = match (op, p, q) {
                    (BinOp::Add, Norm::Linear(p), Norm::Linear(q)) => p.add(&q),
                    (BinOp::Sub, Norm::Linear(p), Norm::Linear(q)) => p.sub(&q),
                    (BinOp::Mul, Norm::Linear(p), Norm::Factor(q)) | (BinOp::Mul, Norm::Factor(q), Norm::Linear(p)) => p.mul(&q, second),
                    (BinOp::Div, Norm::Linear(p), Norm::Factor(q)) => {
                        let d = p.div(&q).ok()?;
                        let (rel, abs) = self.lib.cost(Function::Div, compute);
                        let s = self.src(format!("{} (ratio lemma, in units of the divisor)", Function::Div.c_name()), a.span);
                        return linear(d.rounded(compute, rel, mul_up(abs, floor), s).ok());
                    }
                    _ => return None,
                };
                linear(self.round_scaled(exact, a.ty, &format!("`{}`", op.symbol()), a.span, floor).ok())
            }
            TExprKind::Let { local, value, body } if !self.mentions_atom(value, frees, atoms) => {
                let v = self.eval(value).ok()?;
                self.locals[*local] = Some(v);
                self.norm(body, frees, atoms, e_lo)
            }
            _ => None,
        }
    }

    /// Does `a` read an atom at the statement's own element (directly or
    /// through intermediates read there)?
    fn mentions_atom(&self, a: &TExpr, frees: &[VarId], atoms: &[(TensorId, f64)]) -> bool {
        let mut found = false;
        a.walk(&mut |x| {
            if found {
                return;
            }
            if let Some(t) = self.identity_load(x, frees) {
                if atoms.iter().any(|(y, _)| *y == t) {
                    found = true;
                } else if reads_launch_input(self.k, t) {
                    // The input value: nothing computed here, no atom.
                } else if let Some(st) = self.k.writer(t).map(|si| &self.k.stmts[si]) {
                    found = self.mentions_atom(&st.value, &st.vars, atoms);
                }
            }
        });
        found
    }

    /// Is `y`'s computed value non-negative? Rounding is monotone, so sums
    /// and products of values computed non-negative are; so are squares,
    /// roots, and values whose whole reach is non-negative.
    fn computed_nonneg(&mut self, y: &TExpr, frees: &[VarId]) -> bool {
        match &y.kind {
            TExprKind::Binary(BinOp::Add | BinOp::Mul, p, q) if !same_expr(p, q) => self.computed_nonneg(p, frees) && self.computed_nonneg(q, frees),
            TExprKind::Binary(BinOp::Mul, _, _) => true,
            TExprKind::Call(Builtin::Sqrt | Builtin::Exp | Builtin::Abs, _) => true,
            TExprKind::Cast(p) => self.computed_nonneg(p, frees),
            TExprKind::Load { tensor, .. } if matches!(self.k.tensors[*tensor].role, TensorRole::Intermediate | TensorRole::Output) && self.identity_load(y, frees).is_some() => {
                let kernel = self.k;
                let Some(st) = kernel.writer(*tensor).map(|si| &kernel.stmts[si]) else { return false };
                self.enter(st.vars.clone());
                let r = self.computed_nonneg(&st.value, &st.vars);
                self.leave();
                r
            }
            _ => matches!(self.float(y), Ok(v) if reach(&v).lo >= 0.0),
        }
    }

    /// The exact value's range of `e` (in the statement being entered).
    fn range_of(&mut self, e: &TExpr) -> Option<Interval> {
        self.float(e).ok().map(|v| v.range)
    }

    /// The tensor `e` loads at the statement's own element (`index` is
    /// `frees` in order), if it is such a load.
    fn identity_load(&self, e: &TExpr, frees: &[VarId]) -> Option<TensorId> {
        let TExprKind::Load { tensor, index } = &e.kind else { return None };
        at_own_element(index, frees).then_some(*tensor)
    }
}

/// Does a read of `t` see the launch's input (an input or inout tensor),
/// rather than a value a statement of the kernel computed?
fn reads_launch_input(k: &Kernel, t: TensorId) -> bool {
    matches!(k.tensors[t].role, TensorRole::Input | TensorRole::Inout)
}
