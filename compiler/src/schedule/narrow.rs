//! Narrow contractions with the warp's lanes along the sum: `y[m, n] =
//! f(sum(k) a(m, k) * b(k, n), m, n)` for outputs a few columns wide (N at
//! most a shape's `cols`) whose sum runs along A's contiguous axis: the
//! MoE experts' output layers, `Linear(2048, 20)` over each expert's rows.
//!
//! The tiled forms spend such a kernel on tiles it cannot fill. The
//! split-sum form (`split_sum`) ran the tiny step's output layers at
//! 192 us a step, about a tenth of copy speed (H200, bench/RESULTS.md,
//! thirty-sixth session): a 32 x 32 tile for 20 columns, both operands
//! through shared memory, a tree in shared memory at the end. Here A is
//! read once, straight from global memory into registers, as a copy would
//! read it:
//! - each warp owns `rows` rows of the output (all `cols` columns of them);
//!   lane `l` sums the k with `k % warp == l`, so a warp's loads of one row
//!   are `warp` consecutive elements;
//! - B's slab (`bk` k by `cols` columns, zero past N) sits in shared memory
//!   as f32, k-major with one spare column, so that the lanes' `warp`
//!   consecutive k fall on distinct banks (stride `cols + 1`, odd);
//! - each lane keeps `rows x cols` f32 partial sums: every B element it
//!   reads from shared memory serves `rows` products;
//! - after the last slab a butterfly of shuffles (`warp / 2`, ..., 1) gives
//!   every lane each total, and lane `c` stores column `c` of its rows.
//!
//! The order is `ReductionOrder::Columns { groups: warp, chains: 1 }`: a
//! lane's chain of the k with `k % warp == l`, in order, then the lanes'
//! partials in a tree. A butterfly is that tree: at mask `s` the lanes
//! `l < s` add lane `l + s` (`l ^ s`), and the lanes past them compute
//! the same sums, which addition's commutativity makes equal to the
//! tree's. The error bound, the magnitude polynomial and both mirrors
//! follow that order, as for the split-sum form.
//!
//! Proved like the split-sum form: bounds and races of every access, the
//! output written once per element (its coverage), every element of A
//! read (its coverage), and the sum complete among the threads of one
//! warp (`Visits::team`: the warp sums its rows' values, each k by one
//! lane). The butterfly's data flow is not checked (as the row schedule's
//! is not); each of its levels writes a register array of its own, so
//! that a level that skips a slot leaves an unset register read.

use super::contraction::{tile_load_in_rounds, Plan, SlabLayout, Tile};
use super::extent_expr;
use super::lower::{node_key, Builder, Env};
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::syntax::ast::BinOp;
use crate::target::Target;
use crate::tir::Kernel;
use crate::types::Dtype;

/// A shape of the form: `warps` warps a block, `rows` output rows a warp,
/// outputs of at most `cols` columns, B's slabs `bk` deep (a multiple of
/// the warp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub warps: u32,
    pub rows: u32,
    pub cols: u32,
    pub bk: u32,
}

/// The shape an untuned launch takes (`schedule::narrow_variants`), with
/// its suffix.
pub const DEFAULT: (Shape, &str) = (Shape { warps: 8, rows: 2, cols: 32, bk: 128 }, "nw");

/// More shapes, for the tuner only: fewer rows a warp (more blocks, fewer
/// registers), deeper slabs (fewer barriers).
pub const TUNING: &[(Shape, &str)] = &[
    (Shape { warps: 4, rows: 4, cols: 32, bk: 128 }, "nw4x4"),
    (Shape { warps: 8, rows: 1, cols: 32, bk: 128 }, "nw8x1"),
    (Shape { warps: 8, rows: 2, cols: 32, bk: 256 }, "nw8x2d256"),
];

/// Does the form apply to contraction `p` on `target`? A float sum of
/// products along A's contiguous axis (a warp's lanes then read
/// consecutive elements), on 32-lane warps. The shapes are measured on
/// NVIDIA only; on AMD's 64-lane wavefronts their blocks would be twice
/// as large, and the prover's race queries for a 512-thread block's B
/// loader ran for more than 15 CPU minutes (a 16-warp shape tried on
/// NVIDIA), so AMD keeps the split-sum form until a shape set of its own
/// is measured there.
pub fn applies(p: &Plan, target: &Target) -> bool {
    p.residue_term.is_none() && p.acc_ty == Dtype::F32 && p.a_k_contiguous && target.warp_size() == 32
}

/// The narrow form of contraction `p` of `k` at `shape`, named by the
/// caller. `k` carries the form's guard (N at most `shape.cols`).
pub fn schedule(k: &Kernel, target: &Target, p: &Plan, shape: Shape) -> Result<KernelIr, Diagnostic> {
    let Shape { warps, rows, cols, bk } = shape;
    let warp = target.warp_size();
    assert!(bk.is_multiple_of(warp) && cols <= warp, "a slab is whole steps of the warp, and a lane stores each column");
    let block = warps * warp;
    let block_rows = (warps * rows) as i64;
    let ty = p.acc_ty;
    let mut b = Builder::new(k, target, Schedule::NarrowContraction { warps, rows, cols, bk }, block);
    b.ir.reduction_order.insert(p.kvar, ReductionOrder::Columns { groups: warp, chains: 1 });
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let (mext, next, kext) = (extent_expr(k.vars[mvar].extent), extent_expr(k.vars[nvar].extent), extent_expr(k.vars[p.kvar].extent));
    let lane = IExpr::Tid.rem(IExpr::c(warp as i64));
    // The warp: the rows a thread sums into (its team).
    let team = IExpr::Tid.div(IExpr::c(warp as i64));
    let m0_v = b.ivar("m0");
    let m0 = IExpr::Var(m0_v);
    let mut body = vec![KStmt::LetInt { var: m0_v, value: IExpr::BlockIdx(0).mul(IExpr::c(block_rows)).add(team.clone().mul(IExpr::c(rows as i64))) }];
    let acc = b.local("acc", ty);
    body.push(KStmt::DeclArray { arr: acc, len: rows * cols, init: Some(VExpr::zero(ty)) });
    let slot_of = |r: IExpr, c: IExpr| r.mul(IExpr::c(cols as i64)).add(c);

    // A's elements of a slab, one register per step and row (`steps x
    // rows`), zero past M and K: a thread's loads of slab `k0`, all in
    // flight before the first is used.
    let steps = bk / warp;
    let (kk_of, a_slot) = (|step: IExpr| step.mul(IExpr::c(warp as i64)).add(lane.clone()), |step: IExpr, r: IExpr| step.mul(IExpr::c(rows as i64)).add(r));
    let a_loads = |b: &mut Builder, arr: LocalId, k0: &IExpr, out: &mut Vec<KStmt>| -> Result<(Option<AccessId>, IVar, IVar), Diagnostic> {
        let (step_v, r_v, gm_v, gk_v) = (b.ivar("step"), b.ivar("r"), b.ivar(&k.vars[mvar].name.clone()), b.ivar(&k.vars[p.kvar].name.clone()));
        let mut env = Env::default();
        env.vars.insert(mvar, IExpr::Var(gm_v));
        env.vars.insert(p.kvar, IExpr::Var(gk_v));
        let mut load = Vec::new();
        let value = b.lower(p.a, &mut env, &mut load)?.cast(ty);
        let access = first_load(&value);
        let at = a_slot(IExpr::Var(step_v), IExpr::Var(r_v));
        load.push(KStmt::ArraySet { arr, index: at.clone(), value });
        let fill = vec![
            KStmt::LetInt { var: gm_v, value: m0.clone().add(IExpr::Var(r_v)) },
            KStmt::If { cond: IExpr::Var(gm_v).lt(mext.clone()).and(IExpr::Var(gk_v).lt(kext.clone())), then: load, els: vec![KStmt::ArraySet { arr, index: at, value: VExpr::zero(ty) }] },
        ];
        let step = vec![KStmt::LetInt { var: gk_v, value: k0.clone().add(kk_of(IExpr::Var(step_v))) }, KStmt::unrolled(r_v, rows, fill)];
        out.push(KStmt::unrolled(step_v, steps, step));
        Ok((access, step_v, r_v))
    };
    // Slab 0's elements before the loop; in the loop, the slab's elements
    // move to `a_now` and the next slab's loads are issued before B's slab
    // is staged, so that their latency hides behind this slab's work.
    let a_next = b.local("a_next", ty);
    let a_now = b.local("a_now", ty);
    let (ahead, k0_v) = (b.ivar("k_ahead"), b.ivar("k0"));
    let k0 = IExpr::Var(k0_v);
    body.push(KStmt::DeclArray { arr: a_next, len: steps * rows, init: None });
    let (first_access, first_step, first_r) = a_loads(&mut b, a_next, &IExpr::c(0), &mut body)?;
    let mut kbody = Vec::new();
    let i_v = b.ivar("i");
    kbody.push(KStmt::DeclArray { arr: a_now, len: steps * rows, init: None });
    kbody.push(KStmt::unrolled(i_v, steps * rows, vec![KStmt::ArraySet { arr: a_now, index: IExpr::Var(i_v), value: VExpr::new(VKind::ArrayGet { arr: a_next, index: IExpr::Var(i_v) }, ty) }]));
    kbody.push(KStmt::LetInt { var: ahead, value: k0.clone().add(IExpr::c(bk as i64)) });
    let (next_access, next_step, next_r) = a_loads(&mut b, a_next, &IExpr::Var(ahead), &mut kbody)?;

    // B's slab, loaded by every thread in rounds (the loader's tile: the
    // slab `cols` wide and `bk` deep, as one output tile column at 0).
    let stride = cols + 1;
    let b_sh = b.shared("b_tile", ty, bk * stride);
    let loader = Tile { bm: warps * rows, bn: cols, bk, tm: warps * rows, tn: cols, producer: 0, group: 1, kgroups: block };
    debug_assert_eq!(loader.block(), block);
    tile_load_in_rounds(&mut b, loader, SlabLayout::KMajor { stride }, p.b, b_sh, (nvar, p.kvar), cols, p.b_k_contiguous, (&IExpr::c(0), &k0), (&next, &kext), &mut kbody)?;
    kbody.push(KStmt::Barrier);

    // Step `step` of lane `l` sums slab row `kk = step warp + l`: each
    // column's B element times each of its rows' A elements.
    let step_v = b.ivar("step");
    let kk = kk_of(IExpr::Var(step_v));
    let at = k0.clone().add(kk.clone());
    let (c_v, r2_v) = (b.ivar("c"), b.ivar("r"));
    let b_el = b.local("b_el", ty);
    let slot = slot_of(IExpr::Var(r2_v), IExpr::Var(c_v));
    let fma = VExpr::new(
        VKind::Fma(
            Box::new(VExpr::new(VKind::ArrayGet { arr: a_now, index: a_slot(IExpr::Var(step_v), IExpr::Var(r2_v)) }, ty)),
            Box::new(VExpr::local(b_el, ty)),
            Box::new(VExpr::new(VKind::ArrayGet { arr: acc, index: slot.clone() }, ty)),
        ),
        ty,
    );
    let column = vec![
        KStmt::Decl { local: b_el, init: Some(VExpr::new(VKind::SharedGet { arr: b_sh, index: kk.clone().mul(IExpr::c(stride as i64)).add(IExpr::Var(c_v)) }, ty)) },
        KStmt::unrolled(r2_v, rows, vec![KStmt::ArraySet { arr: acc, index: slot, value: fma }]),
    ];
    kbody.push(KStmt::unrolled(step_v, steps, vec![KStmt::If { cond: at.clone().lt(kext.clone()), then: vec![KStmt::unrolled(c_v, cols, column)], els: vec![] }]));
    kbody.push(KStmt::Barrier);

    // Index `elem` of the sum is visited by lane `elem % warp` of each
    // warp, in the slab that holds it, at step `(elem % bk) / warp`.
    let elem = b.ivar("elem");
    let e = IExpr::Var(elem);
    let witness = vec![
        (Witness::Var(k0_v), e.clone().sub(e.clone().rem(IExpr::c(bk as i64)))),
        (Witness::Var(step_v), e.clone().rem(IExpr::c(bk as i64)).div(IExpr::c(warp as i64))),
        (Witness::Tid, team.clone().mul(IExpr::c(warp as i64)).add(e.clone().rem(IExpr::c(warp as i64)))),
    ];
    let visits = Visits { outer: k0_v, at, elem, witness, held: Vec::new(), team: Some(team.clone()) };
    let (kname, kspan) = (k.vars[p.kvar].name.clone(), k.vars[p.kvar].span);
    b.ir.reduction_loops.push(ReductionLoop { var: step_v, extent: kext.clone(), cooperative: true, granule: 1, name: format!("`{}`", kname), span: kspan, visits: Some(visits) });
    body.push(KStmt::For { var: k0_v, start: IExpr::c(0), end: kext, step: IExpr::c(bk as i64), unroll: false, body: kbody });
    if let (Some(first), Some(next)) = (first_access, next_access) {
        cover_a(&mut b, p, (first, next), shape, warp, (k0_v, [(first_step, first_r), (next_step, next_r)]));
    }

    // The lanes' partials meet in a butterfly: every lane ends with every
    // total of its warp. Each level writes a register array of its own,
    // declared unset, and reads the level before: a level that skipped a
    // slot would leave the next level (or the epilogue) reading an unset
    // register, which the prover refutes.
    let mut sums = acc;
    let mut mask = warp / 2;
    while mask >= 1 {
        let level = b.local(&format!("acc_x{}", mask), ty);
        let slot_v = b.ivar("slot");
        let own = VExpr::new(VKind::ArrayGet { arr: sums, index: IExpr::Var(slot_v) }, ty);
        let theirs = VExpr::new(VKind::ShflXor { value: Box::new(own.clone()), mask }, ty);
        let sum = VExpr::new(VKind::Binary(BinOp::Add, Box::new(own), Box::new(theirs)), ty);
        body.push(KStmt::DeclArray { arr: level, len: rows * cols, init: None });
        body.push(KStmt::unrolled(slot_v, rows * cols, vec![KStmt::ArraySet { arr: level, index: IExpr::Var(slot_v), value: sum }]));
        sums = level;
        mask /= 2;
    }

    // Epilogue: lane `c` stores column `c` of each of its warp's rows, the
    // statement with the sum replaced by its total.
    let (er_v, ec_v) = (b.ivar("row"), b.ivar("col"));
    let (om_v, on_v) = (b.ivar(&k.vars[mvar].name.clone()), b.ivar(&k.vars[nvar].name.clone()));
    let mut env = Env::default();
    env.vars.insert(mvar, IExpr::Var(om_v));
    env.vars.insert(nvar, IExpr::Var(on_v));
    let total = VExpr::new(VKind::ArrayGet { arr: sums, index: slot_of(IExpr::Var(er_v), IExpr::Var(ec_v)) }, ty);
    env.reduced.insert(node_key(p.reduce), total.cast(p.reduce.ty));
    let mut store = Vec::new();
    let value = b.lower(&s.value, &mut env, &mut store)?;
    let access = b.store(s, value, &env, &mut store);
    let guarded = vec![
        KStmt::LetInt { var: om_v, value: m0.add(IExpr::Var(er_v)) },
        KStmt::LetInt { var: on_v, value: IExpr::Var(ec_v) },
        KStmt::If { cond: lane.clone().eq(IExpr::Var(ec_v)).and(IExpr::Var(om_v).lt(mext.clone())).and(IExpr::Var(on_v).lt(next)), then: store, els: vec![] },
    ];
    body.push(KStmt::unrolled(er_v, rows, vec![KStmt::unrolled(ec_v, cols, guarded)]));
    // Element (m, n) of the output: the block of row m, the warp of its
    // rows there, lane n; row slot m % rows, column n.
    let (xm, xn) = (b.ivar("elem_m"), b.ivar("elem_n"));
    let (m, n) = (IExpr::Var(xm), IExpr::Var(xn));
    let assign = vec![
        (Witness::BlockIdx(0), m.clone().div(IExpr::c(block_rows))),
        (Witness::Tid, m.clone().rem(IExpr::c(block_rows)).div(IExpr::c(rows as i64)).mul(IExpr::c(warp as i64)).add(n.clone())),
        (Witness::Var(er_v), m.rem(IExpr::c(rows as i64))),
        (Witness::Var(ec_v), n),
    ];
    b.cover_axes(s.target, vec![xm, xn], vec![CoverCase { when: Cond::True, access, assign }]);
    b.ir.grid = vec![GridDim::Exact(mext.ceil_div(block_rows))];
    b.ir.body = body;
    Ok(b.finish())
}

/// The access of the first tensor load in `v` (under casts).
fn first_load(v: &VExpr) -> Option<AccessId> {
    match &v.kind {
        VKind::Load { access, .. } => Some(*access),
        VKind::Cast(a) | VKind::Unary(_, a) => first_load(a),
        _ => None,
    }
}

/// Every element of a plain A operand `t[m, k]` is read: element (m, k) by
/// the block and warp of row m, lane `k % warp`, at step `(k % bk) /
/// warp` and row `m % rows` of the loads of its slab: slab 0's before the
/// loop (`first`), slab `s > 0`'s in the iteration of slab `s - 1`
/// (`next`).
fn cover_a(b: &mut Builder, p: &Plan, (first, next): (AccessId, AccessId), shape: Shape, warp: u32, (k0_v, loads): (IVar, [(IVar, IVar); 2])) {
    let mvar = b.k.stmts[0].vars[0];
    let Some((tensor, true)) = super::contraction::plain_operand(p.a, mvar, p.kvar) else { return };
    let block_rows = (shape.warps * shape.rows) as i64;
    let axes = [b.ivar("elem_0"), b.ivar("elem_1")];
    let (m, kx) = (IExpr::Var(axes[0]), IExpr::Var(axes[1]));
    let bk = shape.bk as i64;
    let case = |access: AccessId, (step_v, r_v): (IVar, IVar), when: Cond, slab: Option<IExpr>| {
        let mut assign = vec![
            (Witness::BlockIdx(0), m.clone().div(IExpr::c(block_rows))),
            (Witness::Tid, m.clone().rem(IExpr::c(block_rows)).div(IExpr::c(shape.rows as i64)).mul(IExpr::c(warp as i64)).add(kx.clone().rem(IExpr::c(warp as i64)))),
            (Witness::Var(r_v), m.clone().rem(IExpr::c(shape.rows as i64))),
            (Witness::Var(step_v), kx.clone().rem(IExpr::c(bk)).div(IExpr::c(warp as i64))),
        ];
        assign.extend(slab.map(|k0| (Witness::Var(k0_v), k0)));
        CoverCase { when, access, assign }
    };
    let in_first = kx.clone().lt(IExpr::c(bk));
    let earlier_slab = kx.clone().sub(kx.clone().rem(IExpr::c(bk))).sub(IExpr::c(bk));
    let cases = vec![case(first, loads[0], in_first.clone(), None), case(next, loads[1], Cond::Not(Box::new(in_first)), Some(earlier_slab))];
    let buf = b.buf(tensor);
    let what = format!("every element of `{}` is read (every row, every k)", b.k.tensors[tensor].name);
    b.ir.coverage.push(Cover { buf, elem: axes.to_vec(), cases, what });
}
