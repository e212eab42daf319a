//! Lemmas about the logistic function `s(t) = 1 / (1 + exp(0.0 - t))`
//! (sheaf.tk's `sig`, inlined as `let t = value; 1.0 / (1.0 + exp(0.0 -
//! t))`) that a walk of intervals loses (issue 23: `padic_gate_bwd`'s bound
//! was 127-248x the largest error observed):
//!
//! - **The argument's error.** Through `exp(-t)` and the division a
//!   relative error of `t` stays relative, so a rounding of `t = a - b`
//!   (`u |t|`, up to `32 u` over the gate's domain) became an error of up to
//!   `32 u` in `s(t)`. But where `|t|` is large the slope `s'(t)` is tiny:
//!   by the mean value theorem the error is `s'(xi) |t' - t|`, and
//!   `s'(xi) |xi| <= 0.224` everywhere ([`AVal::logistic`]). The kernel's
//!   own roundings (the library's `exp`, the sum, the division) are bounded
//!   by the same walk at an exact argument anywhere in the computed
//!   argument's reach; their relative part, relative to `s(t')`, costs a
//!   second-order term to restate relative to `s(t)`.
//! - **`s(t) s(-t) = s'(t) <= 1/4`** (the two-way softmax's Jacobian), where
//!   intervals give `[0, 1]`.
//! - **`a s(t) + b s(-t)` lies between `a` and `b`**: `s(t) + s(-t) = 1`,
//!   so it is a convex combination, where intervals give `|a| + |b|`; and
//!   the terms' relative errors, weighted by `s` and `1 - s`, cost the
//!   larger of the two rather than their sum.
//! - **A logistic's own `exp` error is weighted by `1 - s`** (see
//!   [`Walk::own_exp`]): in `s(t) s(-t)` the two factors' shares sum to
//!   one, and in `p s(t) + q s(-t)` they are weighted by `s (1 - s) <=
//!   1/4`.

use super::*;
use crate::tir::LocalId;
use tokitai_contracts::fp::{add_up, div_up, logistic_slopes};

/// Where `body` is the logistic function of the local `t`, `1 / (1 +
/// exp(0 - t))` or `1 / (1 + exp(-t))` in either order of the sum: its
/// `exp` call.
fn logistic_exp(body: &TExpr, t: LocalId) -> Option<&TExpr> {
    let is_float = |e: &TExpr, v: f64| matches!(e.kind, TExprKind::Const(Const::Float(c)) if c == v);
    let TExprKind::Binary(BinOp::Div, one, den) = &body.kind else { return None };
    let TExprKind::Binary(BinOp::Add, x, y) = &den.kind else { return None };
    let exp = match (is_float(x, 1.0), is_float(y, 1.0)) {
        (true, _) => y,
        (_, true) => x,
        _ => return None,
    };
    let TExprKind::Call(Builtin::Exp, args) = &exp.kind else { return None };
    let is_t = |e: &TExpr| matches!(e.kind, TExprKind::Local(l) if l == t);
    let negated_t = match &args[0].kind {
        TExprKind::Binary(BinOp::Sub, z, v) => is_float(z, 0.0) && is_t(v),
        TExprKind::Unary(UnOp::Neg, v) => is_t(v),
        _ => false,
    };
    (is_float(one, 1.0) && negated_t).then_some(exp.as_ref())
}

/// `(abs, rel)` of `source`'s part of `v`'s error (zero where it has none).
fn part(v: &AVal, source: SourceId) -> (f64, f64) {
    v.err.parts.iter().find(|c| c.source == source).map_or((0.0, 0.0), |c| (c.abs, c.rel))
}

/// The argument of `e` when `e` is an inlined logistic function.
fn logistic_argument(e: &TExpr) -> Option<&TExpr> {
    let TExprKind::Let { local, value, body } = &e.kind else { return None };
    logistic_exp(body, *local).map(|_| value.as_ref())
}

/// `a` and `b` are `p - q` and `q - p`, or `t` and `-t`.
fn negations(a: &TExpr, b: &TExpr) -> bool {
    match (&a.kind, &b.kind) {
        (TExprKind::Binary(BinOp::Sub, p, q), TExprKind::Binary(BinOp::Sub, q2, p2)) => same_expr(p, p2) && same_expr(q, q2),
        (TExprKind::Unary(UnOp::Neg, x), _) => same_expr(x, b),
        (_, TExprKind::Unary(UnOp::Neg, y)) => same_expr(a, y),
        _ => false,
    }
}

/// `s(t)` and `s(-t)`: the argument `t`.
fn complementary<'e>(a: &'e TExpr, b: &TExpr) -> Option<&'e TExpr> {
    let (x, y) = (logistic_argument(a)?, logistic_argument(b)?);
    negations(x, y).then_some(x)
}

/// `p * s(t)` (either order): `p` and `s(t)`.
fn scaled_logistic(e: &TExpr) -> Option<(&TExpr, &TExpr)> {
    let TExprKind::Binary(BinOp::Mul, x, y) = &e.kind else { return None };
    match (logistic_argument(x), logistic_argument(y)) {
        (Some(_), _) => Some((y, x)),
        (_, Some(_)) => Some((x, y)),
        _ => None,
    }
}

impl Walk<'_> {
    /// `let t = value; s(t)` when `body` is the logistic function of `t`
    /// and `x` (the value) carries an error: see the module's doc. `None`
    /// where the lemma does not apply.
    pub(super) fn logistic(&mut self, x: &V, local: LocalId, body: &TExpr, e: &TExpr) -> Option<Result<AVal, Fail>> {
        let V::Float(x) = x else { return None };
        if x.err.is_zero() || logistic_exp(body, local).is_none() {
            return None;
        }
        self.locals[local] = Some(V::Float(AVal::exact(x.reach())));
        let own = self.float(body);
        self.locals[local] = Some(V::Float(x.clone()));
        let own = match own {
            Ok(o) => o,
            Err(f) => return Some(Err(f)),
        };
        let shift = x.logistic();
        let moved = shift.err.at(0.0);
        let (_, rel) = own.err.total();
        let s = self.src("second-order terms of the logistic function's argument error".into(), e.span);
        Some(Ok(AVal { range: shift.range.meet(&own.range), err: shift.err.plus(&own.err).with(s, mul_up(rel, moved), 0.0) }))
    }

    /// The sources of `s(t)`'s own `exp` error, where that error may be
    /// weighted by `1 - s`: the `exp`'s error has a relative part and no
    /// other part of `s(t)` (its argument) carries the same sources. Then
    /// the walk's part for such a source, `r s`, overstates the truth by a
    /// factor: `exp`'s relative error `r` reaches the divisor `1 + e^-t` as
    /// `r e^-t / (1 + e^-t) = r (1 - s)`, and every later rule is linear in
    /// it, so the true contribution is at most `r s (1 - s)`.
    fn own_exp(&mut self, logistic: &TExpr) -> Option<OwnExp> {
        let TExprKind::Let { local, value, body } = &logistic.kind else { return None };
        let exp = logistic_exp(body, *local)?;
        let t = self.float(value).ok()?;
        self.locals[*local] = Some(V::Float(AVal::exact(t.reach())));
        let e = self.float(exp);
        self.locals[*local] = Some(V::Float(t.clone()));
        let e = e.ok()?;
        // An absolute part `a` (a subnormal result) reaches the divisor,
        // which is at least 1, as at most `a` relative, unweighted: the
        // weight `1 - s` becomes `1 - s + a / r` at worst.
        let mut kappa = 0.0f64;
        for c in &e.err.parts {
            if c.rel <= 0.0 {
                return None;
            }
            kappa = kappa.max(div_up(c.abs, c.rel));
        }
        let sources: Vec<SourceId> = e.err.parts.iter().map(|c| c.source).collect();
        if t.err.parts.iter().any(|c| sources.contains(&c.source)) {
            return None;
        }
        Some(OwnExp { sources, slope: logistic_slopes(t.reach()).0, kappa })
    }

    /// The exp sources of both of `s(t)` and `s(-t)` (see [`Self::own_exp`]),
    /// the larger slope bound and `kappa`, provided `others` (the values
    /// they are combined with) carry none of them.
    fn own_exps(&mut self, sa: &TExpr, sb: &TExpr, others: &[&AVal]) -> Option<OwnExp> {
        let (a, b) = (self.own_exp(sa)?, self.own_exp(sb)?);
        let mut sources = a.sources;
        sources.extend(b.sources);
        sources.sort();
        sources.dedup();
        if others.iter().any(|o| o.err.parts.iter().any(|c| sources.contains(&c.source))) {
            return None;
        }
        Some(OwnExp { sources, slope: a.slope.max(b.slope), kappa: a.kappa.max(b.kappa) })
    }

    /// The exact `s(t) * s(-t)` from its factors `x = s(t)`, `y = s(-t)`
    /// (the values of `a` and `b`) and their exact product `prod`: it is
    /// `s'(t)`, at most `1 / (4 cosh^2(t / 2))` over `t`'s range (intervals
    /// give 1); and the factors' own `exp` errors, `r_a (1 - s)` and `r_b s`
    /// relative (see [`Self::own_exp`]), cost at most the larger of `r_a`
    /// and `r_b` relative to the product, not their sum.
    pub(super) fn complementary_product(&mut self, (a, x): (&TExpr, &AVal), (b, y): (&TExpr, &AVal), mut prod: AVal) -> AVal {
        let Some(t) = complementary(a, b) else { return prod };
        if let Ok(tv) = self.float(t) {
            prod.range = prod.range.meet(&Interval::new(0.0, logistic_slopes(tv.range).0));
        }
        if let Some(own) = self.own_exps(a, b, &[]) {
            let xs: Vec<f64> = own.sources.iter().map(|s| part(x, *s).1).collect();
            let ys: Vec<f64> = own.sources.iter().map(|s| part(y, *s).1).collect();
            let shares = larger_of(&xs, &ys);
            for c in prod.err.parts.iter_mut() {
                if let Some(i) = own.sources.iter().position(|s| *s == c.source) {
                    // The product's part is x's plus y's (`AVal::mul` keeps
                    // relative parts): `r_x (1 - s + kappa) + r_y (s +
                    // kappa)` is at most the larger plus kappa times both.
                    let weighted = add_up(shares[i], mul_up(add_up(xs[i], ys[i]), own.kappa));
                    c.rel = c.rel.min(weighted);
                }
            }
        }
        prod
    }

    /// The exact `p s(t) + q s(-t)` from the computed terms `x = p s(t)`
    /// and `y = q s(-t)`: a convex combination of `p` and `q`, so its
    /// range is their hull. The terms' relative errors, `r_x |p| s + r_y
    /// |q| (1 - s)` with `s` in [0, 1], cost at most `max(R_x, R_y)` with
    /// `R_x` the sum of `r_x |p|` over the sources (intervals charge `R_x +
    /// R_y`); the logistics' own `exp` errors, weighted by `s (1 - s)`
    /// (see [`Self::own_exp`]), cost at most `S0 (R_x + R_y)` for them.
    /// `None` where `a + b` is not of that shape.
    pub(super) fn complementary_mix(&mut self, a: &TExpr, b: &TExpr, x: &AVal, y: &AVal) -> Option<AVal> {
        let ((p, sa), (q, sb)) = (scaled_logistic(a)?, scaled_logistic(b)?);
        complementary(sa, sb)?;
        let (pv, qv) = (self.float(p).ok()?, self.float(q).ok()?);
        let (pm, qm) = (pv.range.mag(), qv.range.mag());
        let own = self.own_exps(sa, sb, &[&pv, &qv]);
        let exps = own.as_ref().map_or(Vec::new(), |o| o.sources.clone());
        // The weight of an exp source: `s (1 - s) + kappa`, at most 1.
        let weight = own.as_ref().map_or(1.0, |o| add_up(o.slope, o.kappa).min(1.0));
        let mut err = ErrBound::zero();
        let mut sources: Vec<SourceId> = x.err.parts.iter().chain(&y.err.parts).map(|c| c.source).collect();
        sources.sort();
        sources.dedup();
        let rel = |v: &AVal, s: SourceId| part(v, s).1;
        let abs = |v: &AVal, s: SourceId| part(v, s).0;
        let (rest, weighted): (Vec<SourceId>, Vec<SourceId>) = sources.iter().partition(|s| !exps.contains(s));
        let xs: Vec<f64> = rest.iter().map(|s| mul_up(rel(x, *s), pm)).collect();
        let ys: Vec<f64> = rest.iter().map(|s| mul_up(rel(y, *s), qm)).collect();
        for (s, share) in rest.iter().zip(larger_of(&xs, &ys)) {
            err = err.with(*s, share, 0.0);
        }
        for s in weighted {
            err = err.with(s, mul_up(add_up(mul_up(rel(x, s), pm), mul_up(rel(y, s), qm)), weight), 0.0);
        }
        for s in sources {
            err = err.with(s, add_up(abs(x, s), abs(y, s)), 0.0);
        }
        Some(AVal { range: Interval::new(pv.range.lo.min(qv.range.lo), pv.range.hi.max(qv.range.hi)), err })
    }
}

/// A logistic's own `exp` error (see [`Walk::own_exp`]): its sources, a
/// bound on `s (1 - s)` over the argument's reach, and `kappa`, the
/// largest ratio of the `exp`'s absolute to relative error.
struct OwnExp {
    sources: Vec<SourceId>,
    slope: f64,
    kappa: f64,
}

/// Shares of `max(sum xs, sum ys)` in proportion to `xs[i] + ys[i]` (each
/// rounded up, so that they sum to at least the maximum): a bound on
/// `sum xs[i] w + ys[i] (1 - w)` for every `w` in [0, 1], told per source.
fn larger_of(xs: &[f64], ys: &[f64]) -> Vec<f64> {
    let (sx, sy) = (xs.iter().fold(0.0, |a, b| add_up(a, *b)), ys.iter().fold(0.0, |a, b| add_up(a, *b)));
    let total = add_up(sx, sy);
    if total == 0.0 {
        return vec![0.0; xs.len()];
    }
    let f = div_up(sx.max(sy), tokitai_contracts::fp::down(total));
    xs.iter().zip(ys).map(|(x, y)| mul_up(add_up(*x, *y), f)).collect()
}

#[cfg(test)]
mod tests {
    use crate::driver::check_source;
    use crate::span::SourceFile;
    use crate::target::Target;

    /// The bound of `y` for a kernel over `x, w in [-16, 16]`.
    fn bound(body: &str) -> (f64, f64) {
        let text = format!(
            "fn sig(t: f32) -> f32 {{ 1.0 / (1.0 + exp(0.0 - t)) }}\nkernel k(x: f16[N], w: f16[N], g: f32[N]) -> (y: f32[N])\n requires N >= 1\n domain x in [-16.0, 16.0], w in [-16.0, 16.0], g in [-4.0, 4.0]\n tolerance y: abs 1.0, rel 1.0\n{{ y[i] = {}; }}\n",
            body
        );
        let checked = check_source(&SourceFile::new("k.tk", &text));
        let program = checked.program.expect("checks");
        let irs = crate::schedule::schedule_program(&program, &Target::default_cuda()).unwrap();
        super::super::analyze(&program.kernels[0], &irs[0]).outputs[0].envelope().expect("a bound")
    }

    const U: f64 = 5.960464477539063e-8;

    /// The rounding of `x - w` (up to 32 u) no longer passes through whole:
    /// the logistic's error is a few units of f32 roundoff.
    #[test]
    fn a_logistic_of_a_rounded_difference_costs_a_few_roundings() {
        let (abs, rel) = bound("sig(f32(x[i]) - f32(w[i]))");
        assert!(abs + rel < 8.0 * U, "{} + {} |y|", abs, rel);
    }

    /// `s(t) s(-t) <= 1/4` and `g s(t) + g s(-t)` within `|g|`: the
    /// product's error scales with the narrowed ranges. Without the lemmas
    /// the same expressions are bounded with ranges [0, 1] and [-8, 8].
    #[test]
    fn complementary_logistics_are_bounded_together() {
        let (abs, _) = bound("sig(f32(x[i]) - f32(w[i])) * sig(f32(w[i]) - f32(x[i])) * (g[i] * sig(f32(x[i]) - f32(w[i])) + g[i] * sig(f32(w[i]) - f32(x[i])))");
        let (abs_apart, _) = bound("sig(f32(x[i]) - f32(w[i])) * sig(f32(x[i]) - f32(w[i])) * (g[i] * sig(f32(x[i]) - f32(w[i])) + g[i] * sig(f32(x[i]) - f32(w[i])))");
        assert!(abs * 2.0 < abs_apart, "{} against {}", abs, abs_apart);
    }
}
