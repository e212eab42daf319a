//! Row schedule: one block per row of the common prefix. Each group of
//! independent row reductions runs in one strided pass over the row, then
//! one block reduction: a butterfly of warp shuffles, each warp's result
//! through shared memory, and a second butterfly in every warp so that all
//! threads hold the total (no broadcast round). Element statements run in a
//! strided loop; element intermediates are recomputed where they are read.

use super::lower::{combine_into, identity, node_key, Builder, Env};
use super::row_cached::{self, CachePlan};
use super::{extent_expr, BLOCK};
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::syntax::ast::RedOp;
use crate::target::Target;
use crate::tir::{self, Kernel, StmtId, TExpr, TExprKind};
use crate::types::Dtype;
use petgraph::algo::has_path_connecting;
use petgraph::graph::NodeIndex;

pub(super) enum Item {
    /// Row statements whose top-level reductions share one pass.
    Reductions(Vec<StmtId>),
    /// A row statement without reductions.
    Scalar(StmtId),
    /// Output element statements sharing one loop.
    Elements(Vec<StmtId>),
}

pub fn schedule(k: &Kernel, target: &Target, prefix: usize) -> Result<KernelIr, Diagnostic> {
    schedule_with_block(k, target, prefix, BLOCK)
}

/// The row schedule with `block` threads per row.
pub fn schedule_with_block(k: &Kernel, target: &Target, prefix: usize, block: u32) -> Result<KernelIr, Diagnostic> {
    build(k, target, prefix, block, None)
}

/// The row schedule with `block` threads per row, the row's inputs read
/// once into registers where `cache` says how (`row_cached`).
pub(super) fn build(k: &Kernel, target: &Target, prefix: usize, block: u32, cache: Option<(&CachePlan, u32)>) -> Result<KernelIr, Diagnostic> {
    let schedule = match cache {
        Some((plan, slots)) => Schedule::RowCached { rows_rank: prefix as u32, slots, width: plan.width },
        None => Schedule::RowReduction { rows_rank: prefix as u32 },
    };
    let mut b = Builder::new(k, target, schedule, block);
    let first = &k.stmts[0].vars[..prefix];
    let rows = first.iter().fold(IExpr::c(1), |acc, v| acc.mul(extent_expr(k.vars[*v].extent)));
    let mut top = Vec::new();
    let mut layout = cache.map(|(plan, slots)| row_cached::Layout::new(&mut b, plan, prefix, slots, &mut top));
    let row = b.ivar("row");
    b.row_var = Some(row);
    let mut env = Env::default();
    let mut body = Vec::new();
    b.decompose(IExpr::Var(row), first, &mut env, &mut body);
    if let Some(l) = layout.as_mut() {
        l.load(&mut b, prefix, &env, &mut body);
    }
    for s in &k.stmts {
        for (j, v) in s.vars[..prefix].iter().enumerate() {
            let e = env.vars[&first[j]].clone();
            env.vars.insert(*v, e);
        }
        if s.vars.len() > prefix {
            env.inline.insert(s.target);
        }
    }
    let items = plan(k, prefix);
    // Shared memory is reused by the next row only after a barrier. With two
    // passes or more, the next pass's own barrier separates them, so only a
    // single-pass row needs a closing barrier.
    let passes = items.iter().filter(|i| matches!(i, Item::Reductions(_))).count();
    b.closing_barrier = passes == 1;
    for item in items {
        match (item, layout.as_mut()) {
            (Item::Reductions(stmts), l) => reduction_pass(&mut b, &stmts, &mut env, &mut body, l)?,
            (Item::Scalar(s), _) => row_statement(&mut b, s, &mut env, &mut body)?,
            (Item::Elements(stmts), None) => element_loop(&mut b, &stmts, prefix, &mut env, &mut body)?,
            (Item::Elements(stmts), Some(l)) => l.element_loop(&mut b, &stmts, prefix, &env, &mut body)?,
        }
    }
    top.push(KStmt::For { var: row, start: IExpr::BlockIdx(0), end: rows.clone(), step: IExpr::GridDim(0), unroll: false, body });
    b.ir.body = top;
    b.ir.grid = vec![GridDim::Stride { work: rows, per_block: 1 }];
    Ok(b.finish())
}

/// Group statements: independent reduction statements fuse into one pass;
/// consecutive output element statements share one loop.
pub(super) fn plan(k: &Kernel, prefix: usize) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    let depends = |a: StmtId, b: StmtId| has_path_connecting(&k.graph, NodeIndex::new(a), NodeIndex::new(b), None);
    for (si, s) in k.stmts.iter().enumerate() {
        if s.vars.len() > prefix {
            if k.tensors[s.target].role == tir::TensorRole::Intermediate {
                continue;
            }
            if let Some(Item::Elements(v)) = items.last_mut() {
                if same_extents(k, v[0], si, prefix) {
                    v.push(si);
                    continue;
                }
            }
            items.push(Item::Elements(vec![si]));
        } else if tir::top_reductions(&s.value).is_empty() {
            items.push(Item::Scalar(si));
        } else {
            if let Some(Item::Reductions(v)) = items.last_mut() {
                if v.iter().all(|o| !depends(*o, si)) {
                    v.push(si);
                    continue;
                }
            }
            items.push(Item::Reductions(vec![si]));
        }
    }
    items
}

fn same_extents(k: &Kernel, a: StmtId, b: StmtId, prefix: usize) -> bool {
    let (va, vb) = (&k.stmts[a].vars[prefix..], &k.stmts[b].vars[prefix..]);
    va.len() == vb.len() && va.iter().zip(vb).all(|(x, y)| k.dims_equal(k.vars[*x].extent, k.vars[*y].extent))
}

pub(super) struct Acc<'t> {
    pub(super) node: &'t TExpr,
    pub(super) op: RedOp,
    pub(super) var: tir::VarId,
    pub(super) body: &'t TExpr,
    pub(super) value: LocalId,
    pub(super) index: Option<LocalId>,
    pub(super) ty: Dtype,
}

/// One term of a reduction into its accumulator, at index `c` (the
/// environment binds the reduction's variable): a fused multiply-add for
/// sums of products, else the term and a combine.
pub(super) fn accumulate(b: &mut Builder, a: &Acc, c: IExpr, inner: &mut Env, body: &mut Vec<KStmt>) -> Result<(), Diagnostic> {
    if let (RedOp::Sum, Some((x, y))) = (a.op, tir::fma_operands(a.body)) {
        let (x, y) = (b.lower(x, inner, body)?, b.lower(y, inner, body)?);
        let fma = VExpr::new(VKind::Fma(Box::new(x.cast(a.ty)), Box::new(y.cast(a.ty)), Box::new(VExpr::local(a.value, a.ty))), a.ty);
        body.push(KStmt::Assign { local: a.value, value: fma });
    } else {
        let v = b.lower(a.body, inner, body)?;
        let term = b.local(&format!("{}_term", b.k.vars[a.var].name), a.ty);
        body.push(KStmt::Decl { local: term, init: Some(v) });
        combine_into(a.op, a.value, a.index, a.ty, VExpr::local(term, a.ty), VExpr::new(VKind::Int(c), Dtype::I32), body);
    }
    Ok(())
}

/// One pass computing every top-level reduction of `stmts` (strided over
/// the row, or over its registers with `cache`), then the block
/// reduction, then the statements' row values.
fn reduction_pass(b: &mut Builder, stmts: &[StmtId], env: &mut Env, out: &mut Vec<KStmt>, mut cache: Option<&mut row_cached::Layout>) -> Result<(), Diagnostic> {
    let k = b.k;
    let mut accs: Vec<Acc> = Vec::new();
    for s in stmts {
        for node in tir::top_reductions(&k.stmts[*s].value) {
            let TExprKind::Reduce { op, var, body } = &node.kind else { continue };
            let name = k.vars[*var].name.clone();
            let ty = body.ty;
            let value = b.local(&format!("{}_{}", op.name(), name), ty);
            out.push(KStmt::Decl { local: value, init: Some(identity(*op, ty)) });
            let index = if *op == RedOp::Argmax {
                let i = b.local(&format!("argmax_{}_index", name), Dtype::I32);
                out.push(KStmt::Decl { local: i, init: Some(VExpr::zero(Dtype::I32)) });
                Some(i)
            } else {
                None
            };
            accs.push(Acc { node, op: *op, var: *var, body, value, index, ty });
        }
    }
    // Passes over rows of different lengths cannot share a loop.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, a) in accs.iter().enumerate() {
        match groups.iter_mut().find(|g| k.dims_equal(k.vars[accs[g[0]].var].extent, k.vars[a.var].extent)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    for g in &groups {
        if let Some(l) = cache.as_deref_mut() {
            let group: Vec<&Acc> = g.iter().map(|&i| &accs[i]).collect();
            l.reduction_loop(b, &group, env, out)?;
            continue;
        }
        let extent = extent_expr(k.vars[accs[g[0]].var].extent);
        let c = b.ivar(&k.vars[accs[g[0]].var].name.clone());
        let mut body = Vec::new();
        for &i in g {
            let a = &accs[i];
            b.ir.reduction_order.insert(a.var, ReductionOrder::Block { threads: b.ir.block, warp: b.warp() });
            let mut inner = env.clone();
            inner.vars.insert(a.var, IExpr::Var(c));
            accumulate(b, a, IExpr::Var(c), &mut inner, &mut body)?;
        }
        let name = format!("`{}`", k.vars[accs[g[0]].var].name);
        b.ir.reduction_loops.push(ReductionLoop { var: c, extent: extent.clone(), cooperative: true, granule: 1, name, span: k.vars[accs[g[0]].var].span, visits: None });
        out.push(KStmt::For { var: c, start: IExpr::Tid, end: extent, step: IExpr::c(b.ir.block as i64), unroll: true, body });
    }
    block_reduce(b, &accs, out);
    for a in &accs {
        let v = match a.index {
            Some(i) => VExpr::local(i, Dtype::I32),
            None => VExpr::local(a.value, a.ty).cast(a.node.ty),
        };
        env.reduced.insert(node_key(a.node), v);
    }
    for s in stmts {
        row_statement(b, *s, env, out)?;
    }
    Ok(())
}

/// Butterfly within each warp; lane 0 of each warp writes shared memory;
/// every warp reads all warps' results and butterflies again.
fn block_reduce(b: &mut Builder, accs: &[Acc], out: &mut Vec<KStmt>) {
    let warp = b.warp();
    let nwarps = b.ir.block / warp;
    let lane = IExpr::Tid.rem(IExpr::c(warp as i64));
    let warp_id = IExpr::Tid.div(IExpr::c(warp as i64));
    butterfly(accs, warp, out);
    let mut shared = Vec::new();
    let mut write = Vec::new();
    for a in accs {
        let sv = b.shared(&format!("{}_partials", b.ir.locals[a.value].name), a.ty, nwarps);
        write.push(KStmt::SharedSet { arr: sv, index: warp_id.clone(), value: VExpr::local(a.value, a.ty) });
        let si = a.index.map(|i| {
            let s = b.shared(&format!("{}_partials", b.ir.locals[i].name), Dtype::I32, nwarps);
            write.push(KStmt::SharedSet { arr: s, index: warp_id.clone(), value: VExpr::local(i, Dtype::I32) });
            s
        });
        shared.push((sv, si));
    }
    out.push(KStmt::If { cond: lane.clone().eq(IExpr::c(0)), then: write, els: vec![] });
    out.push(KStmt::Barrier);
    let mut read = Vec::new();
    let mut reset = Vec::new();
    for (a, (sv, si)) in accs.iter().zip(&shared) {
        reset.push(KStmt::Assign { local: a.value, value: identity(a.op, a.ty) });
        read.push(KStmt::Assign { local: a.value, value: VExpr::new(VKind::SharedGet { arr: *sv, index: lane.clone() }, a.ty) });
        if let (Some(i), Some(s)) = (a.index, si) {
            reset.push(KStmt::Assign { local: i, value: VExpr::zero(Dtype::I32) });
            read.push(KStmt::Assign { local: i, value: VExpr::new(VKind::SharedGet { arr: *s, index: lane.clone() }, Dtype::I32) });
        }
    }
    out.push(KStmt::If { cond: lane.lt(IExpr::c(nwarps as i64)), then: read, els: reset });
    butterfly(accs, warp, out);
    if b.closing_barrier {
        // The next row reuses shared memory only after every warp has read.
        out.push(KStmt::Barrier);
    }
}

fn butterfly(accs: &[Acc], warp: u32, out: &mut Vec<KStmt>) {
    let mut mask = warp / 2;
    while mask >= 1 {
        for a in accs {
            let other = VExpr::new(VKind::ShflXor { value: Box::new(VExpr::local(a.value, a.ty)), mask }, a.ty);
            let other_index = a.index.map(|i| VExpr::new(VKind::ShflXor { value: Box::new(VExpr::local(i, Dtype::I32)), mask }, Dtype::I32));
            combine_into(a.op, a.value, a.index, a.ty, other, other_index.unwrap_or_else(|| VExpr::zero(Dtype::I32)), out);
        }
        mask /= 2;
    }
}

/// A row statement: its value (reductions already reduced) in a uniform
/// register; an output is stored by thread 0.
pub(super) fn row_statement(b: &mut Builder, si: StmtId, env: &mut Env, out: &mut Vec<KStmt>) -> Result<(), Diagnostic> {
    let stmt = &b.k.stmts[si];
    let value = b.lower(&stmt.value, env, out)?;
    let l = b.local(&b.k.tensors[stmt.target].name.clone(), value.ty);
    out.push(KStmt::Decl { local: l, init: Some(value) });
    env.values.insert(stmt.target, l);
    if b.is_output(stmt.target) {
        let mut then = Vec::new();
        let access = b.store(stmt, VExpr::local(l, b.k.tensors[stmt.target].dtype), env, &mut then);
        out.push(KStmt::If { cond: IExpr::Tid.eq(IExpr::c(0)), then, els: vec![] });
        // Row `elem` is written by thread 0 of the block that runs it.
        let elem = b.ivar("elem");
        let row = b.row_var.expect("row schedules set their row variable");
        b.cover(stmt.target, elem, vec![CoverCase { when: Cond::True, access, assign: vec![(Witness::Var(row), IExpr::Var(elem)), (Witness::Tid, IExpr::c(0))] }]);
    }
    Ok(())
}

/// A strided loop over the row's elements storing each output statement.
fn element_loop(b: &mut Builder, stmts: &[StmtId], prefix: usize, env: &mut Env, out: &mut Vec<KStmt>) -> Result<(), Diagnostic> {
    let k = b.k;
    let vars = k.stmts[stmts[0]].vars[prefix..].to_vec();
    let extent = vars.iter().fold(IExpr::c(1), |acc, v| acc.mul(extent_expr(k.vars[*v].extent)));
    let e = b.ivar("elem");
    let mut inner = env.clone();
    let mut body = Vec::new();
    b.decompose(IExpr::Var(e), &vars, &mut inner, &mut body);
    for s in stmts {
        let stmt = &k.stmts[*s];
        for (j, v) in stmt.vars[prefix..].iter().enumerate() {
            let x = inner.vars[&vars[j]].clone();
            inner.vars.insert(*v, x);
        }
        let value = b.lower(&stmt.value, &mut inner, &mut body)?;
        let access = b.store(stmt, value, &inner, &mut body);
        // Element x of the output is row x / E, element x % E of the row.
        let x = b.ivar("elem");
        let row = b.row_var.expect("row schedules set their row variable");
        let assign = vec![(Witness::Var(row), IExpr::Var(x).div(extent.clone())), (Witness::Var(e), IExpr::Var(x).rem(extent.clone()))];
        b.cover(stmt.target, x, vec![CoverCase { when: Cond::True, access, assign }]);
    }
    out.push(KStmt::For { var: e, start: IExpr::Tid, end: extent, step: IExpr::c(b.ir.block as i64), unroll: true, body });
    Ok(())
}
