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
    let Monomial { coefficient: c2, power, constants, muls } = monomial(cube, v)?;
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

/// The derivative of the tanh form of GELU over a clamped local `w`, as a
/// fused backward writes it (`layernorm.tk`, `layernorm_gelu_bwd`):
///
/// ```text
/// let t = tanh(c1 * (w + c2 * w * w * w));
/// 0.5 * (1.0 + t) + 0.5 * w * (1.0 - t * t) * (c1 * (1.0 + k * w * w))
/// ```
///
/// (the second term's factors in any order and grouping). The magnitude
/// analysis carries a bound through it with the lemma of
/// `tokitai_contracts::fp::gelu_slope`, whose suprema hold only where `w`
/// is clamped; this module recognises the shape and counts the roundings.
pub(crate) struct GeluSlope {
    pub w: LocalId,
    pub c1: f64,
    pub c2: f64,
    pub argument_roundings: u32,
    /// `q = 1 + k w^2`.
    pub k: f64,
    /// The product of the second term's constants (`0.5 c1` above).
    pub p: f64,
    /// The second term's roundings besides `1 - t * t`'s: its
    /// multiplications, its constants' own, and `q`'s (the square's two
    /// multiplications, `k`'s own, the addition).
    pub product_roundings: u32,
}

/// `e` (a `let t = tanh(..); body`) as GELU's derivative, where it is one.
pub(crate) fn gelu_slope(e: &TExpr) -> Option<GeluSlope> {
    let TExprKind::Let { local: t, value, body } = &e.kind else { return None };
    let TExprKind::Call(Builtin::Tanh, args) = &value.kind else { return None };
    let (c1, c2, w, argument_roundings) = argument(args.first()?)?;
    if value.ty != Dtype::F32 || body.ty != Dtype::F32 {
        return None;
    }
    let TExprKind::Binary(BinOp::Add, x, y) = &body.kind else { return None };
    let (_, second) = if half_one_plus(x, *t) {
        (x, y)
    } else if half_one_plus(y, *t) {
        (y, x)
    } else {
        return None;
    };
    let mut factors = Vec::new();
    let muls = factors_of(second, &mut factors);
    let (mut p, mut constants, mut seen_w, mut seen_s, mut q) = (1.0, 0, false, false, None);
    for f in factors {
        match &f.kind {
            TExprKind::Const(Const::Float(c)) => {
                p *= c;
                constants += 1;
            }
            TExprKind::Local(l) if *l == w && !seen_w => seen_w = true,
            TExprKind::Binary(BinOp::Sub, one, sq) if !seen_s && is_one(one) && is_square_of(sq, *t) => seen_s = true,
            TExprKind::Binary(BinOp::Add, a, b) if q.is_none() => {
                q = match (is_one(a), is_one(b)) {
                    (true, _) => k_w_squared(b, w),
                    (_, true) => k_w_squared(a, w),
                    _ => None,
                };
                q?;
            }
            _ => return None,
        }
    }
    let (k, q_roundings) = q?;
    (p > 0.0 && seen_w && seen_s).then_some(GeluSlope { w, c1, c2, argument_roundings, k, p, product_roundings: muls + constants + q_roundings })
}

fn is_one(e: &TExpr) -> bool {
    matches!(e.kind, TExprKind::Const(Const::Float(c)) if c == 1.0)
}

fn is_local(e: &TExpr, l: LocalId) -> bool {
    matches!(e.kind, TExprKind::Local(x) if x == l)
}

/// `t * t`.
fn is_square_of(e: &TExpr, t: LocalId) -> bool {
    matches!(&e.kind, TExprKind::Binary(BinOp::Mul, a, b) if is_local(a, t) && is_local(b, t))
}

/// `0.5 * (1.0 + t)`, either order of each operation.
fn half_one_plus(e: &TExpr, t: LocalId) -> bool {
    let TExprKind::Binary(BinOp::Mul, a, b) = &e.kind else { return false };
    let half = |x: &TExpr| matches!(x.kind, TExprKind::Const(Const::Float(c)) if c == 0.5);
    let one_plus_t = |x: &TExpr| matches!(&x.kind, TExprKind::Binary(BinOp::Add, p, q) if (is_one(p) && is_local(q, t)) || (is_local(p, t) && is_one(q)));
    (half(a) && one_plus_t(b)) || (one_plus_t(a) && half(b))
}

/// `k * w * w` (any grouping, one positive constant): `k` and the
/// roundings of `1 + k w^2` (the multiplications, `k`'s own, the sum).
fn k_w_squared(e: &TExpr, w: LocalId) -> Option<(f64, u32)> {
    let Monomial { coefficient: k, power, constants, muls } = monomial(e, w)?;
    (k > 0.0 && power == 2).then_some((k, muls + constants + 1))
}

/// A product of constants and a local `v` (`c * v * v * v`, any grouping).
struct Monomial {
    /// The constants' product.
    coefficient: f64,
    /// How many times `v` is a factor.
    power: u32,
    /// How many constants (each rounded into the format once).
    constants: u32,
    /// How many multiplications the product performs.
    muls: u32,
}

/// `e` as a [`Monomial`] in `v`, where it is one.
fn monomial(e: &TExpr, v: LocalId) -> Option<Monomial> {
    let mut factors = Vec::new();
    let muls = factors_of(e, &mut factors);
    let mut m = Monomial { coefficient: 1.0, power: 0, constants: 0, muls };
    for f in factors {
        match &f.kind {
            TExprKind::Const(Const::Float(c)) => {
                m.coefficient *= c;
                m.constants += 1;
            }
            TExprKind::Local(l) if *l == v => m.power += 1,
            _ => return None,
        }
    }
    Some(m)
}

/// `min(max(x, lo), hi)` or `max(min(x, hi), lo)` with constants `lo < 0 <
/// hi` (as written): `x`, `lo` and `hi`.
pub(crate) fn clamp(e: &TExpr) -> Option<(&TExpr, f64, f64)> {
    let constant = |x: &TExpr| match &x.kind {
        TExprKind::Const(Const::Float(c)) => Some(*c),
        TExprKind::Unary(crate::syntax::ast::UnOp::Neg, a) => match a.kind {
            TExprKind::Const(Const::Float(c)) => Some(-c),
            _ => None,
        },
        _ => None,
    };
    let TExprKind::Call(outer, args) = &e.kind else { return None };
    let TExprKind::Call(inner, inner_args) = &args.first()?.kind else { return None };
    // Two operands each (the fuzzer's input 30 called `min` with one).
    if args.len() != 2 || inner_args.len() != 2 {
        return None;
    }
    let (x, c_inner, c_outer) = (&inner_args[0], constant(&inner_args[1])?, constant(&args[1])?);
    let (lo, hi) = match (outer, inner) {
        (Builtin::Min, Builtin::Max) => (c_inner, c_outer),
        (Builtin::Max, Builtin::Min) => (c_outer, c_inner),
        _ => return None,
    };
    (lo < 0.0 && hi > 0.0).then_some((x, lo, hi))
}
