//! The tanh form of GELU as a statement writes it (`gelu.tk`, a
//! contraction's epilogue):
//!
//! ```text
//! let t = tanh(c1 * (v + c2 * v * v * v));
//! 0.5 * v * (1.0 + t)        // or f16(...) of it
//! ```
//!
//! with `v` a local and `c1, c2 > 0`. The magnitude analysis
//! ([`super::magnitude`]) carries a bound through it with the lemmas of
//! `tokitai_contracts::fp::tanh_gelu`; this module only recognises the
//! shape and counts the roundings the printed code performs in it.

use crate::syntax::ast::BinOp;
use crate::tir::{Builtin, Const, LocalId, TExpr, TExprKind};
use crate::types::Dtype;

/// A recognised GELU over local `v`.
pub(crate) struct TanhGelu<'e> {
    pub v: LocalId,
    pub c1: f64,
    pub c2: f64,
    /// Roundings between the exact `c1 (v + c2 v^3)` and the computed
    /// argument of `tanh`: each multiplication, the addition, and each
    /// constant's own rounding into the format.
    pub argument_roundings: u32,
    /// Roundings of the product `0.5 * v * (1.0 + t)` around `1 + t`:
    /// each multiplication, the addition, each constant.
    pub product_roundings: u32,
    /// The conversion around the product, where there is one (`f16(...)`).
    pub cast: Option<&'e TExpr>,
}

/// `e` (a `let t = tanh(..); body`) as a GELU, where it is one.
pub(crate) fn tanh_gelu(e: &TExpr) -> Option<TanhGelu<'_>> {
    let TExprKind::Let { local: t, value, body } = &e.kind else { return None };
    let TExprKind::Call(Builtin::Tanh, args) = &value.kind else { return None };
    let (c1, c2, v, argument_roundings) = argument(&args[0])?;
    let (cast, product) = match &body.kind {
        TExprKind::Cast(inner) => (Some(body.as_ref()), inner.as_ref()),
        _ => (None, body.as_ref()),
    };
    // Computed in f32 throughout (the lemmas' roundings are f32's).
    if value.ty != Dtype::F32 || product.ty != Dtype::F32 {
        return None;
    }
    // 0.5 * v * (1 + t), its factors in any order.
    let mut factors = Vec::new();
    let muls = factors_of(product, &mut factors);
    let (mut half, mut seen_v, mut one_plus_t, mut constants) = (1.0, false, false, 0);
    for f in factors {
        match &f.kind {
            TExprKind::Const(Const::Float(c)) => {
                half *= c;
                constants += 1;
            }
            TExprKind::Local(l) if *l == v && !seen_v => seen_v = true,
            TExprKind::Binary(BinOp::Add, x, y) if !one_plus_t => {
                let one = |e: &TExpr| matches!(e.kind, TExprKind::Const(Const::Float(c)) if c == 1.0);
                let is_t = |e: &TExpr| matches!(e.kind, TExprKind::Local(l) if l == *t);
                one_plus_t = (one(x) && is_t(y)) || (is_t(x) && one(y));
                if !one_plus_t {
                    return None;
                }
            }
            _ => return None,
        }
    }
    (half == 0.5 && seen_v && one_plus_t).then_some(TanhGelu { v, c1, c2, argument_roundings, product_roundings: muls + 1 + constants, cast })
}

/// `c1 * (v + c2 * v * v * v)` (either order of each operation): `c1`,
/// `c2`, `v` and the roundings from the exact value to the computed one.
fn argument(e: &TExpr) -> Option<(f64, f64, LocalId, u32)> {
    let TExprKind::Binary(BinOp::Mul, x, y) = &e.kind else { return None };
    let (c1, sum) = match (&x.kind, &y.kind) {
        (TExprKind::Const(Const::Float(c)), _) => (*c, y.as_ref()),
        (_, TExprKind::Const(Const::Float(c))) => (*c, x.as_ref()),
        _ => return None,
    };
    let TExprKind::Binary(BinOp::Add, p, q) = &sum.kind else { return None };
    let (v, cube) = match (&p.kind, &q.kind) {
        (TExprKind::Local(v), _) => (*v, q.as_ref()),
        (_, TExprKind::Local(v)) => (*v, p.as_ref()),
        _ => return None,
    };
    let mut factors = Vec::new();
    let muls = factors_of(cube, &mut factors);
    let (mut c2, mut power, mut constants) = (1.0, 0, 0);
    for f in factors {
        match &f.kind {
            TExprKind::Const(Const::Float(c)) => {
                c2 *= c;
                constants += 1;
            }
            TExprKind::Local(l) if *l == v => power += 1,
            _ => return None,
        }
    }
    // The cube's roundings, the sum's (no cancellation: both terms have
    // v's sign), the product by c1 and c1's own.
    (c1 > 0.0 && c2 > 0.0 && power == 3).then_some((c1, c2, v, muls + constants + 1 + 2))
}

/// The factors of a product tree (`a * b * c` in any grouping), and how
/// many multiplications it performs.
fn factors_of<'e>(e: &'e TExpr, out: &mut Vec<&'e TExpr>) -> u32 {
    match &e.kind {
        TExprKind::Binary(BinOp::Mul, a, b) => 1 + factors_of(a, out) + factors_of(b, out),
        _ => {
            out.push(e);
            0
        }
    }
}
