//! Column schedule: sums down the columns of row-major tensors,
//! `out[c] = f(sum(r) g(t[r, c], ...))` (LayerNorm's parameter gradients,
//! a bias gradient).
//!
//! The row schedule gives each column a block whose threads stride down
//! it, so each warp's load touches 32 rows: one 2-byte element of a
//! 32-byte sector each, the other 30 bytes left to L2 and the neighbouring
//! columns' blocks (the tiny MoE step spent about 1.1 ms in
//! `layernorm_bwd_params` alone, bench/RESULTS.md). Here a block takes
//! `lanes` neighbouring columns (a tile): a warp's lanes read consecutive
//! columns of `32 / lanes` rows, whole sectors, and the block's `groups =
//! block / lanes` thread groups split the rows (64 of them at the default
//! 1024 threads), group `g` summing rows `g, g + groups, ...` into
//! `chains` interleaved chains (a row each an iteration, so that
//! `chains` loads are in flight a thread, and each chain short: the
//! declared tolerances of the row schedule's order hold for this one
//! too). A thread adds its chains in order; the groups'
//! partials meet in a tree in shared memory; the first group stores.
//!
//! Proved like the row schedule, with one more notion: the block sums
//! several values (a column each), so the completeness of a reduction is
//! asked among the threads of one column (`Visits::team`), and the loop
//! over a thread's chains must visit every chain (a reduction loop of its
//! own). The tree's pairing is not checked as data flow (as the row
//! schedule's butterflies are not): its accesses are proved in bounds and
//! race-free, and the mirror oracle and the error bound follow it.

use super::lower::{combine_into, identity, node_key, Builder, Env};
use super::row::Acc;
use super::extent_expr;
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::syntax::ast::RedOp;
use crate::target::Target;
use crate::tir::{self, Kernel, TExpr, TExprKind, VarId};
use crate::types::Dtype;

/// The form's default shape, `(block, lanes, chains)`: half a warp a
/// row, 64 thread groups of 4 chains, so 256 rows of a column in flight.
/// Measured on the H200 (bench/run_columns.sh, bench/RESULTS.md): a
/// column tile's rows are the form's only parallelism, so groups pay more
/// than chains; LayerNorm's parameter gradients at 4096 x 4096 ran 0.059
/// ms at (256, 16, 8), 0.045 at (1024, 16, 8) and 0.029 at this shape.
pub const DEFAULT: (u32, u32, u32) = (1024, 16, 4);
/// More shapes, for the tuner only: fewer groups, more chains, a warp a
/// row (each slower than the default on the measured shapes, or within a
/// few percent of it).
pub const TUNING: &[(u32, u32, u32)] = &[(256, 16, 8), (512, 16, 8), (1024, 16, 8), (1024, 32, 8)];

/// Is `k` a kernel this form serves: every statement an output with one
/// index `c`, its value built of sums down `c`'s column (`t[r, c]` of a
/// sum over `r`, all sums of one length) and of per-column values
/// (`t[c]`)? Returns the dim of the columns and the sums' length.
pub fn plan(k: &Kernel) -> Option<(tir::Dim, tir::Dim)> {
    let cols = k.vars[k.stmts.first()?.vars.first().copied()?].extent;
    let mut rows: Option<tir::Dim> = None;
    for s in &k.stmts {
        if s.vars.len() != 1 || k.tensors[s.target].role != tir::TensorRole::Output || !k.dims_equal(k.vars[s.vars[0]].extent, cols) {
            return None;
        }
        let c = s.vars[0];
        let sums = tir::top_reductions(&s.value);
        if sums.is_empty() {
            return None;
        }
        let mut red_vars = Vec::new();
        for node in &sums {
            let TExprKind::Reduce { op: RedOp::Sum, var, body } = &node.kind else { return None };
            if !body.ty.is_float() || has_reduction(body) {
                return None;
            }
            let extent = k.vars[*var].extent;
            match rows {
                Some(r) if !k.dims_equal(r, extent) => return None,
                _ => rows = Some(extent),
            }
            red_vars.push(*var);
        }
        if !loads_down_columns(&s.value, c, &red_vars) {
            return None;
        }
    }
    Some((cols, rows?))
}

fn has_reduction(e: &TExpr) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= matches!(x.kind, TExprKind::Reduce { .. }));
    found
}

/// Every load of `e` reads `t[c]` or `t[r, c]` with `r` one of the sums'
/// variables: the column is the contiguous index, the row the summed one.
fn loads_down_columns(e: &TExpr, c: VarId, sums: &[VarId]) -> bool {
    let is = |x: &TExpr, v: VarId| matches!(x.kind, TExprKind::Var(y) if y == v);
    let mut ok = true;
    e.walk(&mut |x| {
        if let TExprKind::Load { index, .. } = &x.kind {
            ok &= match index.as_slice() {
                [col] => is(col, c),
                [row, col] => is(col, c) && sums.iter().any(|r| is(row, *r)),
                _ => false,
            };
        }
    });
    ok
}

/// The column schedule of `k` at `(block, lanes, chains)`, named by the
/// caller; `(cols, rows)` is what `plan` returned for `k`.
pub fn schedule(k: &Kernel, target: &Target, (cols, rows): (tir::Dim, tir::Dim), (block, lanes, chains): (u32, u32, u32)) -> Result<KernelIr, Diagnostic> {
    let groups = block / lanes;
    let mut b = Builder::new(k, target, Schedule::ColumnReduction { lanes, chains }, block);
    let (cols, rows) = (extent_expr(cols), extent_expr(rows));
    let (g, lanes_c, chains_c) = (IExpr::c(groups as i64), IExpr::c(lanes as i64), IExpr::c(chains as i64));
    let tiles = cols.clone().add(IExpr::c(lanes as i64 - 1)).div(lanes_c.clone());
    let tile = b.ivar("tile");
    b.row_var = Some(tile);
    let mut body = Vec::new();
    let col = b.ivar("col");
    let lane = IExpr::Tid.rem(lanes_c.clone());
    body.push(KStmt::LetInt { var: col, value: IExpr::Var(tile).mul(lanes_c.clone()).add(lane.clone()) });
    let mut env = Env::default();
    for s in &k.stmts {
        env.vars.insert(s.vars[0], IExpr::Var(col));
    }
    // Each sum's chains: a register array, chain `u` at slot `u`.
    let mut sums: Vec<(Acc, LocalId)> = Vec::new();
    for s in &k.stmts {
        for node in tir::top_reductions(&s.value) {
            let TExprKind::Reduce { op, var, body: term } = &node.kind else { continue };
            let name = k.vars[*var].name.clone();
            let chain = b.local(&format!("sum_{}_chains", name), term.ty);
            body.push(KStmt::DeclArray { arr: chain, len: chains, init: Some(identity(*op, term.ty)) });
            let value = b.local(&format!("sum_{}", name), term.ty);
            b.ir.reduction_order.insert(*var, ReductionOrder::Columns { groups, chains });
            sums.push((Acc { node, op: *op, var: *var, body: term, value, index: None, ty: term.ty }, chain));
        }
    }
    // Group `tid / lanes` walks its rows, `chains` an iteration, row
    // `r0 + u groups` into chain `u`.
    let r0 = b.ivar("r0");
    let u = b.ivar("u");
    let r = IExpr::Var(r0).add(IExpr::Var(u).mul(g.clone()));
    let mut inner = env.clone();
    let mut visit = Vec::new();
    for (a, chain) in &sums {
        inner.vars.insert(a.var, r.clone());
        let slot = VExpr::new(VKind::ArrayGet { arr: *chain, index: IExpr::Var(u) }, a.ty);
        let value = match tir::fma_operands(a.body) {
            Some((x, y)) => {
                let (x, y) = (b.lower(x, &mut inner, &mut visit)?, b.lower(y, &mut inner, &mut visit)?);
                VExpr::new(VKind::Fma(Box::new(x.cast(a.ty)), Box::new(y.cast(a.ty)), Box::new(slot)), a.ty)
            }
            None => {
                let term = b.lower(a.body, &mut inner, &mut visit)?;
                VExpr::new(VKind::Binary(crate::syntax::ast::BinOp::Add, Box::new(slot), Box::new(term.cast(a.ty))), a.ty)
            }
        };
        visit.push(KStmt::ArraySet { arr: *chain, index: IExpr::Var(u), value });
    }
    let chains_loop = KStmt::unrolled(u, chains, vec![KStmt::If { cond: r.clone().lt(rows.clone()), then: visit, els: vec![] }]);
    let rows_loop = KStmt::For { var: r0, start: IExpr::Tid.div(lanes_c.clone()), end: rows.clone(), step: IExpr::c((groups * chains) as i64), unroll: false, body: vec![chains_loop] };
    body.push(KStmt::If { cond: IExpr::Var(col).lt(cols.clone()), then: vec![rows_loop], els: vec![] });
    // Row `elem` of the column is visited by group `elem % groups` of the
    // column's lane, in the iteration and chain that hold it.
    let elem = b.ivar("elem");
    let e = IExpr::Var(elem);
    let slot = e.clone().div(g.clone()).rem(chains_c.clone());
    let witness = vec![
        (Witness::Var(r0), e.clone().sub(slot.clone().mul(g.clone()))),
        (Witness::Var(u), slot),
        (Witness::Tid, e.clone().rem(g.clone()).mul(lanes_c.clone()).add(lane.clone())),
    ];
    let held = sums.iter().map(|(_, chain)| *chain).collect();
    let visits = Visits { outer: r0, at: r, elem, witness, held, team: Some(lane.clone()) };
    let (name, span) = (format!("`{}`", k.vars[sums[0].0.var].name), k.vars[sums[0].0.var].span);
    b.ir.reduction_loops.push(ReductionLoop { var: u, extent: rows, cooperative: true, granule: 1, name: name.clone(), span, visits: Some(visits) });
    // The group's chains, in order.
    let w = b.ivar("chain");
    let mut add = Vec::new();
    for (a, chain) in &sums {
        body.push(KStmt::Decl { local: a.value, init: Some(identity(a.op, a.ty)) });
        let part = VExpr::new(VKind::ArrayGet { arr: *chain, index: IExpr::Var(w) }, a.ty);
        combine_into(a.op, a.value, None, a.ty, part, VExpr::zero(Dtype::I32), &mut add);
    }
    body.push(KStmt::unrolled(w, chains, add));
    b.ir.reduction_loops.push(ReductionLoop { var: w, extent: chains_c, cooperative: false, granule: 1, name: format!("the chains of {}", name), span, visits: None });
    // The groups' partials meet in a tree in shared memory.
    let mut partials = Vec::new();
    for (a, _) in &sums {
        let arr = b.shared(&format!("{}_partials", b.ir.locals[a.value].name), a.ty, block);
        body.push(KStmt::SharedSet { arr, index: IExpr::Tid, value: VExpr::local(a.value, a.ty) });
        partials.push(arr);
    }
    body.push(KStmt::Barrier);
    let mut half = groups / 2;
    while half >= 1 {
        let reach = IExpr::c((half * lanes) as i64);
        let mut level = Vec::new();
        for ((a, _), arr) in sums.iter().zip(&partials) {
            let own = VExpr::new(VKind::SharedGet { arr: *arr, index: IExpr::Tid }, a.ty);
            let other = VExpr::new(VKind::SharedGet { arr: *arr, index: IExpr::Tid.add(reach.clone()) }, a.ty);
            let sum = VExpr::new(VKind::Binary(crate::syntax::ast::BinOp::Add, Box::new(own), Box::new(other)), a.ty);
            level.push(KStmt::SharedSet { arr: *arr, index: IExpr::Tid, value: sum });
        }
        body.push(KStmt::If { cond: IExpr::Tid.lt(reach), then: level, els: vec![] });
        // After the last level each lane reads the slot it wrote itself.
        if half > 1 {
            body.push(KStmt::Barrier);
        }
        half /= 2;
    }
    // The first group's lanes read their column's total and store it.
    let mut stores = Vec::new();
    for ((a, _), arr) in sums.iter().zip(&partials) {
        stores.push(KStmt::Assign { local: a.value, value: VExpr::new(VKind::SharedGet { arr: *arr, index: IExpr::Tid }, a.ty) });
        env.reduced.insert(node_key(a.node), VExpr::local(a.value, a.ty).cast(a.node.ty));
    }
    for s in &k.stmts {
        let value = b.lower(&s.value, &mut env, &mut stores)?;
        let access = b.store(s, value, &env, &mut stores);
        // Column `elem` is stored by lane `elem % lanes` of the first
        // group, in the block's iteration over tile `elem / lanes`.
        let x = b.ivar("elem");
        let assign = vec![(Witness::Var(tile), IExpr::Var(x).div(lanes_c.clone())), (Witness::Tid, IExpr::Var(x).rem(lanes_c.clone()))];
        b.cover(s.target, x, vec![CoverCase { when: Cond::True, access, assign }]);
    }
    body.push(KStmt::If { cond: IExpr::Tid.lt(lanes_c).and(IExpr::Var(col).lt(cols)), then: stores, els: vec![] });
    // The next tile writes the partials only after the last level read
    // them (the last level's readers are not past a barrier yet).
    body.push(KStmt::Barrier);
    b.ir.body = vec![KStmt::For { var: tile, start: IExpr::BlockIdx(0), end: tiles.clone(), step: IExpr::GridDim(0), unroll: false, body }];
    b.ir.grid = vec![GridDim::Stride { work: tiles, per_block: 1 }];
    Ok(b.finish())
}
