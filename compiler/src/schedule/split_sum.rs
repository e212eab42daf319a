//! Split-sum contractions: narrow outputs of long sums on CUDA cores.
//!
//! A contraction whose output is a few columns wide (the MoE head's
//! `Linear(2048, 20)`, the router's 4 experts) gives the tiled schedules
//! few blocks, each walking the whole sum one slab after another: on the
//! H200 the head's 3072 x 20 output summed over 2048 took 0.19 ms on the
//! warpgroup unit (19 blocks of 128 x 128, its slabs loaded element by
//! element: rows of 20 halves are not whole 16-byte runs) and 0.115 ms
//! on 16 x 16 SIMT tiles (128 slabs a block, two barriers each), against
//! cuBLAS's 0.027 (bench/RESULTS.md).
//!
//! Here a block's threads split each slab's k between `groups` thread
//! groups: group `g` sums the k with `k % groups == g` into its own copy of
//! the micro-tile, so a slab is `groups` times deeper for the same
//! barriers, and the block has `groups` times the threads to hide the
//! loads' latency. After the last slab the groups' partial tiles meet in
//! a tree in shared memory and the first group stores the outputs. The
//! order is `ReductionOrder::Columns { groups, chains: 1 }`, which the
//! error bound, the magnitude polynomial and both mirrors follow: a
//! chain of `ceil(K / groups)` terms a group, then `log2 groups` levels.
//!
//! Proved like the SIMT schedule (bounds, races, the operands' and the
//! output's coverage), with the column form's notion of completeness: a
//! block sums one value a micro-tile slot, so every k is asked to be
//! visited exactly once among the threads of one slot (`Visits::team`).
//! The visit is guarded by `k < K` (the slab past K is zero-filled, but
//! a visit is of an index of the sum). The loops that store and combine
//! the partial tiles must each take every slot (a reduction loop over the
//! slots); which group's slot a level adds is not checked as data flow
//! (as the column form's tree and the row schedule's butterflies are
//! not): its accesses are proved in bounds and race-free, and the mirror
//! oracle and the error bound follow its order.

use super::contraction::{fma_tile, tile_epilogue, tile_load_in_rounds, Plan, SlabLayout, Tile};
use super::extent_expr;
use super::lower::Builder;
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::target::Target;
use crate::tir::Kernel;

/// A shape of the form: the output tile and micro-tile, the groups, and
/// the k a group sums per slab (`bk = groups * per_group`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub bm: u32,
    pub bn: u32,
    pub tm: u32,
    pub tn: u32,
    pub groups: u32,
    pub per_group: u32,
}

impl Shape {
    fn tile(self) -> Tile {
        Tile { bm: self.bm, bn: self.bn, bk: self.groups * self.per_group, tm: self.tm, tn: self.tn, producer: 0, group: 1, kgroups: self.groups }
    }
}

/// The form's shapes an untuned launch takes, `(shape, suffix, most
/// keys)`, each for outputs of at most so many default (64 x 64) tiles
/// (`schedule::split_variant`), past the one before. A block of 1024
/// threads is resident alone on a multiprocessor, so the shape that
/// pays is the largest tile that still fills one wave: measured on the
/// H200 (bench/run_split.sh, bench/RESULTS.md), the head's weight
/// gradient (2048 x 20, 32 tiles) ran 0.061 ms on 16 x 32 tiles (128
/// blocks) against 0.078 on 32 x 32 (64 blocks), and its forward (3072 x
/// 20, 48 tiles) 0.055 on 32 x 32 (96 blocks) against 0.079 on 16 x 32
/// (192 blocks, two waves); at 8192 and 16384 rows 32 x 32 ran 0.097 and
/// 0.197 ms against the unit's 0.19 and 0.28.
pub const SHAPES: &[(Shape, &str, i64)] = &[
    (Shape { bm: 16, bn: 32, tm: 1, tn: 2, groups: 4, per_group: 32 }, "ks16", 33),
    (Shape { bm: 32, bn: 32, tm: 2, tn: 2, groups: 4, per_group: 16 }, "ks32", 256),
];
/// More shapes, for the tuner only: 16 x 16 tiles (the router's 4
/// columns: 0.052 and 0.056 ms against the keyed shapes' 0.056 and 0.080).
pub const TUNING: &[(Shape, &str)] = &[(Shape { bm: 16, bn: 16, tm: 1, tn: 1, groups: 4, per_group: 32 }, "ks16x16")];

/// The split-sum schedule of contraction `p` of `k` at `shape`, named by
/// the caller.
pub fn schedule(k: &Kernel, target: &Target, p: &Plan, shape: Shape) -> Result<KernelIr, Diagnostic> {
    let t = shape.tile();
    let Tile { bm, bn, bk, tm, tn, .. } = t;
    let groups = shape.groups;
    assert!(groups.is_power_of_two(), "the groups' tree halves them");
    let block = t.threads();
    // The threads of one group: a micro-tile each.
    let per = ((bm / tm) * (bn / tn)) as i64;
    let schedule = Schedule::SplitContraction { bm, bn, bk, tm, tn, groups };
    let mut b = Builder::new(k, target, schedule, block);
    b.ir.reduction_order.insert(p.kvar, ReductionOrder::Columns { groups, chains: 1 });
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let (mext, next, kext) = (extent_expr(k.vars[mvar].extent), extent_expr(k.vars[nvar].extent), extent_expr(k.vars[p.kvar].extent));
    let ty = p.acc_ty;
    // A's slab k-major with one spare column, so that the loader's
    // consecutive k (A's contiguous axis) fall on distinct banks.
    let a_layout = SlabLayout::KMajor { stride: bm + 1 };
    let b_layout = SlabLayout::KMajor { stride: bn };
    let a_sh = b.shared("a_tile", ty, bk * (bm + 1));
    let b_sh = b.shared("b_tile", ty, bk * bn);
    let (tx_v, ty_v, m0_v, n0_v) = (b.ivar("tx"), b.ivar("ty"), b.ivar("m0"), b.ivar("n0"));
    let (tx, tyy, m0, n0) = (IExpr::Var(tx_v), IExpr::Var(ty_v), IExpr::Var(m0_v), IExpr::Var(n0_v));
    // The thread's slot of the micro-tile and its group.
    let team = IExpr::Tid.rem(IExpr::c(per));
    let group = IExpr::Tid.div(IExpr::c(per));
    let (m0_e, n0_e) = t.origin();
    let mut body = vec![
        KStmt::LetInt { var: tx_v, value: IExpr::Tid.rem(IExpr::c((bn / tn) as i64)) },
        KStmt::LetInt { var: ty_v, value: team.clone().div(IExpr::c((bn / tn) as i64)) },
        KStmt::LetInt { var: m0_v, value: m0_e },
        KStmt::LetInt { var: n0_v, value: n0_e },
    ];
    let acc = b.local("acc", ty);
    body.push(KStmt::DeclArray { arr: acc, len: tm * tn, init: Some(VExpr::zero(ty)) });
    let k0_v = b.ivar("k0");
    let k0 = IExpr::Var(k0_v);
    let mut kbody = Vec::new();
    tile_load_in_rounds(&mut b, t, a_layout, p.a, a_sh, (mvar, p.kvar), bm, p.a_k_contiguous, (&m0, &k0), (&mext, &kext), &mut kbody)?;
    tile_load_in_rounds(&mut b, t, b_layout, p.b, b_sh, (nvar, p.kvar), bn, p.b_k_contiguous, (&n0, &k0), (&next, &kext), &mut kbody)?;
    kbody.push(KStmt::Barrier);
    // Step `step` of group `g` sums slab row `kk = step groups + g`.
    let j_v = b.ivar("step");
    let kk = IExpr::Var(j_v).mul(IExpr::c(groups as i64)).add(group.clone());
    let afrag = b.local("a_frag", ty);
    let bfrag = b.local("b_frag", ty);
    let (i_v, jj_v) = (b.ivar("i"), b.ivar("jj"));
    let (iv, jv) = (IExpr::Var(i_v), IExpr::Var(jj_v));
    let a_at = kk.clone().mul(IExpr::c((bm + 1) as i64)).add(tyy.clone()).add(iv.clone().mul(IExpr::c((bm / tm) as i64)));
    let b_at = kk.clone().mul(IExpr::c(bn as i64)).add(tx.clone()).add(jv.clone().mul(IExpr::c((bn / tn) as i64)));
    let step = vec![
        KStmt::DeclArray { arr: afrag, len: tm, init: None },
        KStmt::DeclArray { arr: bfrag, len: tn, init: None },
        KStmt::unrolled(i_v, tm, vec![KStmt::ArraySet { arr: afrag, index: iv.clone(), value: VExpr::new(VKind::SharedGet { arr: a_sh, index: a_at }, ty) }]),
        KStmt::unrolled(jj_v, tn, vec![KStmt::ArraySet { arr: bfrag, index: jv.clone(), value: VExpr::new(VKind::SharedGet { arr: b_sh, index: b_at }, ty) }]),
        fma_tile(t, acc, afrag, bfrag, ty, &mut b),
    ];
    let at = k0.clone().add(kk.clone());
    kbody.push(KStmt::unrolled(j_v, shape.per_group, vec![KStmt::If { cond: at.clone().lt(kext.clone()), then: step, els: vec![] }]));
    kbody.push(KStmt::Barrier);
    // Index `elem` of the sum is visited by the group `elem % groups` of
    // the thread's slot, in the slab that holds it, at step `(elem %
    // bk) / groups`.
    let elem = b.ivar("elem");
    let e = IExpr::Var(elem);
    let witness = vec![
        (Witness::Var(k0_v), e.clone().sub(e.clone().rem(IExpr::c(bk as i64)))),
        (Witness::Var(j_v), e.clone().rem(IExpr::c(bk as i64)).div(IExpr::c(groups as i64))),
        (Witness::Tid, e.clone().rem(IExpr::c(groups as i64)).mul(IExpr::c(per)).add(team.clone())),
    ];
    let visits = Visits { outer: k0_v, at, elem, witness, held: Vec::new(), team: Some(team.clone()) };
    let (kname, kspan) = (k.vars[p.kvar].name.clone(), k.vars[p.kvar].span);
    b.ir.reduction_loops.push(ReductionLoop { var: j_v, extent: kext.clone(), cooperative: true, granule: 1, name: format!("`{}`", kname), span: kspan, visits: Some(visits) });
    body.push(KStmt::For { var: k0_v, start: IExpr::c(0), end: kext, step: IExpr::c(bk as i64), unroll: false, body: kbody });
    // The groups' partial tiles, slot `s` of thread `tid` at `s block +
    // tid`, meet in a tree: level `h` adds group `g + h` into `g < h`.
    let partials = b.shared("partials", ty, tm * tn * block);
    let slot_v = b.ivar("slot");
    let at_slot = |slot: IExpr, thread: IExpr| slot.mul(IExpr::c(block as i64)).add(thread);
    let own = VExpr::new(VKind::ArrayGet { arr: acc, index: IExpr::Var(slot_v) }, ty);
    body.push(every_slot(&mut b, slot_v, tm * tn, vec![KStmt::SharedSet { arr: partials, index: at_slot(IExpr::Var(slot_v), IExpr::Tid), value: own }]));
    body.push(KStmt::Barrier);
    let mut half = groups / 2;
    while half >= 1 {
        let reach = IExpr::c(half as i64 * per);
        let level_v = b.ivar("slot");
        let here = at_slot(IExpr::Var(level_v), IExpr::Tid);
        let there = at_slot(IExpr::Var(level_v), IExpr::Tid.add(reach.clone()));
        let sum = VExpr::new(
            VKind::Binary(crate::syntax::ast::BinOp::Add, Box::new(VExpr::new(VKind::SharedGet { arr: partials, index: here.clone() }, ty)), Box::new(VExpr::new(VKind::SharedGet { arr: partials, index: there }, ty))),
            ty,
        );
        let level = vec![every_slot(&mut b, level_v, tm * tn, vec![KStmt::SharedSet { arr: partials, index: here, value: sum }])];
        body.push(KStmt::If { cond: IExpr::Tid.lt(reach), then: level, els: vec![] });
        // After the last level each thread of the first group reads the
        // slots it wrote itself.
        if half > 1 {
            body.push(KStmt::Barrier);
        }
        half /= 2;
    }
    // Epilogue, by the first group: the statement with the sum replaced by
    // the slot's total.
    let totals = |slot: IExpr| VExpr::new(VKind::SharedGet { arr: partials, index: at_slot(slot, IExpr::Tid) }, ty);
    let store = tile_epilogue(&mut b, p, t, (&m0, &n0), (&tyy, &tx), &totals)?;
    body.push(KStmt::If { cond: IExpr::Tid.lt(IExpr::c(per)), then: vec![store], els: vec![] });
    b.ir.grid = t.grid(&mext, &next);
    b.ir.body = body;
    Ok(b.finish())
}

/// A loop over the micro-tile's slots that stores or combines the
/// groups' partials: each of them must take every slot once (a slot
/// skipped drops its group's terms from the sum), which the prover asks
/// of it as of a reduction loop over `[0, slots)`.
fn every_slot(b: &mut Builder, var: IVar, slots: u32, body: Vec<KStmt>) -> KStmt {
    let span = b.k.span;
    b.ir.reduction_loops.push(ReductionLoop { var, extent: IExpr::c(slots as i64), cooperative: false, granule: 1, name: "the slots of the groups' partial tiles".into(), span, visits: None });
    KStmt::unrolled(var, slots, body)
}
