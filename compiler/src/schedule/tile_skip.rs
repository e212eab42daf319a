//! Per-tile skipping for the residue contraction (issue 23).
//!
//! A product `a b` with `vp(a) + vp(b) >= k` is 0 modulo `p^k`; so is every
//! product of a slab whose smallest valuations sum to `k` or more. Each
//! thread skips the slab's products for its micro-tile when
//! `min vp(a) + min vp(b) >= k`, the minima over exactly the operand
//! elements its products read. Computing a valuation per element read
//! would cost as much as the products; instead each operand slab has a
//! valuation tile beside it in shared memory, written by the loader right
//! after each element (`vtile[i] = vp(tile[i])`, one valuation per element
//! per block), and a thread's minimum folds the valuation tile over its
//! fragment reads.
//!
//! Nothing here is trusted: `verify::tile_skip` proves on the printed IR
//! that the valuation tiles are staged with their operand tiles, that each
//! minimum covers every element the skipped products read, and that the
//! condition then implies `vp(a) + vp(b) >= k` for each of them.
//! Skipping is per thread: a warp whose threads disagree runs the body for
//! those that need it (no barrier inside, nothing lost).

use super::contraction::Tile;
use super::lower::Builder;
use crate::kir::*;
use crate::syntax::ast::BinOp;
use crate::tir::{Builtin, Const};
use crate::types::Dtype;

/// The valuation tiles of the two operand slabs.
#[derive(Clone, Copy)]
pub(super) struct ValuationTiles {
    pub a: SharedId,
    pub b: SharedId,
}

impl ValuationTiles {
    /// Beside operand slabs of `bk * bm` and `bk * bn` elements.
    pub(super) fn new(b: &mut Builder, t: Tile) -> ValuationTiles {
        let a = b.shared("a_vp", Dtype::U32, t.bk * t.bm);
        let bt = b.shared("b_vp", Dtype::U32, t.bk * t.bn);
        ValuationTiles { a, b: bt }
    }
}

/// After every write `tile[i] = v` in the loader's statements, the write
/// `vtile[i] = vp(tile[i])`: the valuation of the element just stored, at
/// its index, with nothing between.
pub(super) fn stage_valuations(stmts: &mut Vec<KStmt>, tile: SharedId, vtile: SharedId, ty: Dtype) {
    let mut at = 0;
    while at < stmts.len() {
        match &mut stmts[at] {
            KStmt::SharedSet { arr, index, .. } if *arr == tile => {
                let index = index.clone();
                let element = VExpr::new(VKind::SharedGet { arr: tile, index: index.clone() }, ty);
                let valuation = VExpr::new(VKind::Call(Builtin::Vp, vec![element]), Dtype::U32);
                stmts.insert(at + 1, KStmt::SharedSet { arr: vtile, index, value: valuation });
                at += 1;
            }
            KStmt::For { body, .. } => stage_valuations(body, tile, vtile, ty),
            KStmt::If { then, els, .. } => {
                stage_valuations(then, tile, vtile, ty);
                stage_valuations(els, tile, vtile, ty);
            }
            _ => {}
        }
        at += 1;
    }
}

/// The slab's products under the skip: a thread's minimum valuation of
/// each operand over its fragment reads (`a_at(kk, i)`, `b_at(kk, j)`:
/// the same index functions the fragment loads use), then `slab` unless
/// they sum to `k` or more.
pub(super) fn skip_slab(b: &mut Builder, t: Tile, k: u32, v: ValuationTiles, a_at: &dyn Fn(IExpr, IExpr) -> IExpr, b_at: &dyn Fn(IExpr, IExpr) -> IExpr, slab: KStmt) -> Vec<KStmt> {
    let mut out = Vec::new();
    let a_min = fold_min(b, "a_min", v.a, t.bk, t.tm, k, a_at, &mut out);
    let b_min = fold_min(b, "b_min", v.b, t.bk, t.tn, k, b_at, &mut out);
    let u32v = |e: VKind| VExpr::new(e, Dtype::U32);
    let sum = u32v(VKind::Binary(BinOp::Add, Box::new(u32v(VKind::Local(a_min))), Box::new(u32v(VKind::Local(b_min)))));
    let cond = VExpr::new(VKind::Binary(BinOp::Ge, Box::new(sum), Box::new(u32v(VKind::Const(Const::Int(k as i64))))), Dtype::Bool);
    out.push(KStmt::SkipWhen { cond, body: vec![slab] });
    out
}

/// `m = k; for kk < bk, for r < regs: m = min(m, vtile[at(kk, r)])`: the
/// smallest valuation among the `bk * regs` elements a thread reads
/// (every valuation is at most `k`).
#[allow(clippy::too_many_arguments)]
fn fold_min(b: &mut Builder, name: &str, vtile: SharedId, bk: u32, regs: u32, k: u32, at: &dyn Fn(IExpr, IExpr) -> IExpr, out: &mut Vec<KStmt>) -> LocalId {
    let m = b.local(name, Dtype::U32);
    let (kk, r) = (b.ivar("kk"), b.ivar("r"));
    let read = VExpr::new(VKind::SharedGet { arr: vtile, index: at(IExpr::Var(kk), IExpr::Var(r)) }, Dtype::U32);
    let folded = VExpr::new(VKind::Call(Builtin::Min, vec![VExpr::local(m, Dtype::U32), read]), Dtype::U32);
    out.push(KStmt::Decl { local: m, init: Some(VExpr::new(VKind::Const(Const::Int(k as i64)), Dtype::U32)) });
    out.push(KStmt::unrolled(kk, bk, vec![KStmt::unrolled(r, regs, vec![KStmt::Assign { local: m, value: folded }])]));
    m
}
