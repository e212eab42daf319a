//! Row schedule, cached form: one block per row, the row's inputs read
//! from global memory once, by 16-byte loads, into registers; every pass
//! over the row (each group of reductions, the output elements) reads the
//! registers. The plain row schedule (`row`) reads a row once per pass
//! with 2-byte loads, which held softmax and LayerNorm at 51-75% of copy
//! bandwidth on the H100 (bench/RESULTS.md, issue 21).
//!
//! Layout: thread `t` holds `slots` runs of `width` consecutive elements,
//! run `j` starting at column `c0 = (j * block + t) * width`, in register
//! slots `[j * width, (j + 1) * width)`. A run is loaded as one vector
//! where the row is whole vectors and every row buffer is 16-byte aligned
//! (`vec_end`, asked once at the kernel's start), else element by element
//! with a guard per element. Reductions sum each thread's runs in order
//! (`ReductionOrder::BlockRuns`), then reduce across the block as the plain
//! form does. The prover checks the visits through `kir::Visits`: every
//! column is visited by exactly one thread and lane, and nothing past the
//! row.
//!
//! Terms computed again where the row is read (`Held`): a reduction's
//! costly term that the outputs recompute (softmax's `exp(x - m)`), and a
//! costly element intermediate that a reduction reads (GELU's slope in
//! `layernorm_gelu_bwd`), are computed once, in the pass that first needs
//! them, into registers at the element's slot, and read there afterwards.
//!
//! A kernel fits when its row tensors are read only at the statement's own
//! element (`x[r, c]` in an element statement, `x[r, k]` in a reduction
//! over `k`), element statements hold no reductions, and no output is
//! read: then a register slot holds exactly the element each read asks
//! for. The variant serves rows of at most `slots * block * width`
//! elements (its key range, `schedule::cached_row_variants`).

use super::extent_expr;
use super::lower::{node_key, Builder, Env};
use super::row::{self, Acc};
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::target::Target;
use crate::tir::{self, Dim, Kernel, StmtId, TExpr, TExprKind, TensorId, TensorRole};

/// How a kernel's rows are cached: the row length, the input tensors read
/// as rows (into registers), the outputs written as rows, and the run
/// width (16 bytes of the narrowest of them).
pub struct CachePlan {
    pub extent: Dim,
    pub cached: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    pub width: u32,
}

/// The cached form of the row schedule with `block` threads and `slots`
/// runs a thread, where the kernel fits it.
pub fn schedule(k: &Kernel, target: &Target, prefix: usize, block: u32, slots: u32) -> Result<Option<KernelIr>, Diagnostic> {
    let Some(plan) = plan(k, prefix) else { return Ok(None) };
    row::build(k, target, prefix, block, Some((&plan, slots))).map(Some)
}

/// Does the kernel fit the cached form (see the module's doc)?
pub fn plan(k: &Kernel, prefix: usize) -> Option<CachePlan> {
    // A whole-tensor reduction (no row variables) is not a row to cache.
    if prefix == 0 {
        return None;
    }
    let mut extent: Option<Dim> = None;
    let mut same_extent = |d: Dim| match extent {
        None => {
            extent = Some(d);
            true
        }
        Some(e) => k.dims_equal(e, d),
    };
    for s in &k.stmts {
        if s.vars.len() > prefix + 1 || s.vars.len() < prefix {
            return None;
        }
        if s.vars.len() == prefix + 1 && !same_extent(k.vars[s.vars[prefix]].extent) {
            return None;
        }
        let mut ok = true;
        s.value.walk(&mut |e| {
            if let TExprKind::Reduce { var, .. } = &e.kind {
                ok &= s.vars.len() == prefix && same_extent(k.vars[*var].extent);
            }
        });
        if !ok {
            return None;
        }
    }
    let extent = extent?;
    let mut cached = Vec::new();
    for s in &k.stmts {
        let own = (s.vars.len() == prefix + 1).then(|| s.vars[prefix]);
        if !reads_fit(k, s, prefix, extent, &s.value, own, &mut cached) {
            return None;
        }
    }
    let row_shaped = |t: TensorId| {
        let shape = &k.tensors[t].shape;
        shape.len() == prefix + 1 && k.dims_equal(shape[prefix], extent)
    };
    let mut outputs = Vec::new();
    for s in &k.stmts {
        if s.vars.len() == prefix + 1 && k.tensors[s.target].role != TensorRole::Intermediate {
            if !row_shaped(s.target) || read_anywhere(k, s.target) {
                return None;
            }
            outputs.push(s.target);
        }
    }
    if cached.is_empty() {
        return None;
    }
    let narrowest = cached.iter().chain(&outputs).map(|t| k.tensors[*t].dtype.size_bytes()).min()?;
    if narrowest >= 16 {
        return None;
    }
    Some(CachePlan { extent, cached, outputs, width: 16 / narrowest })
}

/// Every read of a row tensor in `e` is of the statement's own element
/// along `inner` (the enclosing reduction's variable, or the element
/// statement's own): `x[<the statement's row variables>, inner]`. Input
/// row tensors read so are collected into `cached`; intermediates are
/// recomputed at the same element; reads of anything else must not be
/// indirect. Nested reductions do not fit.
fn reads_fit(k: &Kernel, s: &tir::Stmt, prefix: usize, extent: Dim, e: &TExpr, inner: Option<tir::VarId>, cached: &mut Vec<TensorId>) -> bool {
    match &e.kind {
        TExprKind::Reduce { var, body, .. } => {
            let mut nested = false;
            body.walk(&mut |x| nested |= matches!(x.kind, TExprKind::Reduce { .. }));
            !nested && inner.is_none() && reads_fit(k, s, prefix, extent, body, Some(*var), cached)
        }
        TExprKind::Load { tensor, index } => {
            let info = &k.tensors[*tensor];
            let row_tensor = info.shape.len() == prefix + 1 && k.dims_equal(info.shape[prefix], extent);
            let mut indirect = false;
            for i in index {
                i.walk(&mut |x| indirect |= matches!(x.kind, TExprKind::Load { .. }));
            }
            if indirect {
                return false;
            }
            if !row_tensor {
                return true;
            }
            let own = index.len() == prefix + 1
                && index[..prefix].iter().zip(&s.vars[..prefix]).all(|(i, v)| i.as_var() == Some(*v))
                && inner.is_some()
                && index[prefix].as_var() == inner;
            match info.role {
                TensorRole::Input if own => {
                    if !cached.contains(tensor) {
                        cached.push(*tensor);
                    }
                    true
                }
                TensorRole::Intermediate => own,
                _ => false,
            }
        }
        TExprKind::Unary(_, a) | TExprKind::Cast(a) => reads_fit(k, s, prefix, extent, a, inner, cached),
        TExprKind::Binary(_, a, b) => reads_fit(k, s, prefix, extent, a, inner, cached) && reads_fit(k, s, prefix, extent, b, inner, cached),
        TExprKind::Call(_, args) => args.iter().all(|a| reads_fit(k, s, prefix, extent, a, inner, cached)),
        TExprKind::Let { value, body, .. } => reads_fit(k, s, prefix, extent, value, inner, cached) && reads_fit(k, s, prefix, extent, body, inner, cached),
        _ => true,
    }
}

fn read_anywhere(k: &Kernel, t: TensorId) -> bool {
    let mut found = false;
    for s in &k.stmts {
        s.value.walk(&mut |e| found |= matches!(&e.kind, TExprKind::Load { tensor, .. } if *tensor == t));
    }
    found
}

/// The cached form while a kernel is built: where each cached tensor's
/// registers are, and the kernel-wide facts the passes share.
pub struct Layout {
    slots: u32,
    width: u32,
    extent: IExpr,
    /// The row's length where every run may be read as a vector (whole
    /// vectors, every row buffer 16-byte aligned), else 0.
    vec_end: IVar,
    cached: Vec<TensorId>,
    /// Each cached tensor's registers, once the row's load declares them.
    regs: Vec<(TensorId, LocalId)>,
    prefix: usize,
    /// Reduction terms held in registers for the element statements.
    held: Vec<Held>,
    /// Costly element intermediates held in registers (see
    /// [`Self::hold_intermediates`]): read there by every later pass.
    intermediates: Vec<(TensorId, LocalId)>,
}

/// A reduction's term that an element statement computes again at the
/// same element (softmax's `exp(x[r, k] - m[r])`, summed, then divided
/// by the sum): computed once, in the reduction's pass, into registers
/// `arr` at the element's slot, and read there by the element loop
/// wherever one of `nodes` (by `node_key`) is lowered. The same value
/// either way: the same operations on the same operands, so nothing the
/// accuracy analysis sees changes; the register slots are proved set
/// before they are read like the row's own.
struct Held {
    arr: LocalId,
    nodes: Vec<usize>,
}

/// Is a term worth registers? Where it calls a function or divides: a
/// load or a conversion is as cheap to redo as to keep.
fn costly(e: &TExpr) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= matches!(x.kind, TExprKind::Call(..) | TExprKind::Binary(crate::syntax::ast::BinOp::Div, ..)));
    found
}

impl Layout {
    /// Ask once, at the kernel's start, whether runs may be vectors.
    pub fn new(b: &mut Builder, plan: &CachePlan, prefix: usize, slots: u32, top: &mut Vec<KStmt>) -> Layout {
        let extent = extent_expr(plan.extent);
        let bufs: Vec<BufId> = plan.cached.iter().chain(&plan.outputs).map(|t| b.buf(*t)).collect();
        let mut whole = Cond::Aligned(bufs, 16);
        let rest = extent.clone().rem(IExpr::c(plan.width as i64));
        if rest != IExpr::c(0) {
            whole = whole.and(Cond::Eq(rest, IExpr::c(0)));
        }
        let vec_end = b.ivar("vec_end");
        top.push(KStmt::LetInt { var: vec_end, value: IExpr::Select(Box::new(whole), Box::new(extent.clone()), Box::new(IExpr::c(0))) });
        Layout { slots, width: plan.width, extent, vec_end, cached: plan.cached.clone(), regs: Vec::new(), prefix, held: Vec::new(), intermediates: Vec::new() }
    }

    /// `c0 = (j * block + tid) * width`: where run `j` of this thread starts.
    fn run_start(&self, b: &mut Builder, j: IVar, name: &str, out: &mut Vec<KStmt>) -> IVar {
        let c0 = b.ivar(name);
        let block = b.ir.block as i64;
        out.push(KStmt::LetInt { var: c0, value: IExpr::Var(j).mul(IExpr::c(block)).add(IExpr::Tid).mul(IExpr::c(self.width as i64)) });
        c0
    }

    /// Register slot `j * width + lane`.
    fn slot(&self, j: IVar, lane: IVar) -> IExpr {
        IExpr::Var(j).mul(IExpr::c(self.width as i64)).add(IExpr::Var(lane))
    }

    /// The row's element `c` of tensor `t` (its multi-index and flat index),
    /// the row's variables as `env` binds them.
    fn element(&self, b: &Builder, t: TensorId, prefix: usize, env: &Env, c: IExpr) -> (Vec<IExpr>, IExpr) {
        let first = &b.k.stmts[0].vars[..prefix];
        let mut idx: Vec<IExpr> = first.iter().map(|v| env.vars[v].clone()).collect();
        idx.push(c);
        let flat = b.flat_index(t, &idx);
        (idx, flat)
    }

    /// Declare the registers and read the row into them: each run as a
    /// vector where it may be, else element by element up to the row's end.
    pub fn load(&mut self, b: &mut Builder, prefix: usize, env: &Env, out: &mut Vec<KStmt>) {
        let w = self.width;
        let mut regs = Vec::new();
        for &t in &self.cached {
            let arr = b.local(&format!("{}_row", b.k.tensors[t].name), b.k.tensors[t].dtype);
            out.push(KStmt::DeclArray { arr, len: self.slots * w, init: None });
            regs.push((t, arr));
        }
        let j = b.ivar("run");
        let mut body = Vec::new();
        let c0 = self.run_start(b, j, "c0", &mut body);
        let (mut vector, mut lanes) = (Vec::new(), Vec::new());
        let (vl, sl) = (b.ivar("lane"), b.ivar("lane"));
        let mut copy = Vec::new();
        for &(t, arr) in &regs {
            let name = b.k.tensors[t].name.clone();
            let buf = b.buf(t);
            let span = b.k.tensors[t].span;
            let run = b.local(&format!("{}_run", name), b.k.tensors[t].dtype);
            let (axes, base) = self.element(b, t, prefix, env, IExpr::Var(c0));
            let access = b.access(buf, AccessKind::Read, span, format!("vector read of `{}`", name));
            vector.push(KStmt::DeclArray { arr: run, len: w, init: None });
            vector.push(KStmt::VecLoad { arr: run, buf, base, axes, width: w, access });
            copy.push(KStmt::ArraySet { arr, index: self.slot(j, vl), value: VExpr::new(VKind::ArrayGet { arr: run, index: IExpr::Var(vl) }, b.k.tensors[t].dtype) });
            let (axes, index) = self.element(b, t, prefix, env, IExpr::Var(c0).add(IExpr::Var(sl)));
            let access = b.access(buf, AccessKind::Read, span, format!("read of `{}`", name));
            lanes.push(KStmt::ArraySet { arr, index: self.slot(j, sl), value: VExpr::new(VKind::Load { buf, index, axes, access }, b.k.tensors[t].dtype) });
        }
        vector.push(KStmt::unrolled(vl, w, copy));
        let inside = IExpr::Var(c0).add(IExpr::Var(sl)).lt(self.extent.clone());
        let scalar = vec![KStmt::unrolled(sl, w, vec![KStmt::If { cond: inside, then: lanes, els: vec![] }])];
        body.push(KStmt::If { cond: IExpr::Var(c0).lt(IExpr::Var(self.vec_end)), then: vector, els: scalar });
        out.push(KStmt::unrolled(j, self.slots, body));
        self.regs = regs;
    }

    /// Environment for lane `lane` of run `j`: the cached tensors from
    /// their registers, `vars` (the reduction's, or the statement's own
    /// element variable) at column `c0 + lane`.
    fn lane_env(&self, env: &Env, j: IVar, lane: IVar, c: IExpr, vars: &[tir::VarId]) -> Env {
        let mut inner = env.clone();
        for &(t, arr) in self.regs.iter().chain(&self.intermediates) {
            inner.lane_arrays.insert(t, arr);
        }
        inner.lane = Some(self.slot(j, lane));
        for v in vars {
            inner.vars.insert(*v, c.clone());
        }
        inner
    }

    /// One group's reductions over the registers: runs in order, lanes in
    /// order, every lane up to the row's end.
    pub(super) fn reduction_loop(&mut self, b: &mut Builder, group: &[&Acc], env: &Env, out: &mut Vec<KStmt>) -> Result<(), Diagnostic> {
        let k = b.k;
        let var = group[0].var;
        let name = k.vars[var].name.clone();
        let j = b.ivar("run");
        let mut body = Vec::new();
        let c0 = self.run_start(b, j, &format!("{}0", name), &mut body);
        let lane = b.ivar("lane");
        let c = IExpr::Var(c0).add(IExpr::Var(lane));
        let vars: Vec<tir::VarId> = group.iter().map(|a| a.var).collect();
        let mut inner = self.lane_env(env, j, lane, c.clone(), &vars);
        let mut visit = Vec::new();
        let held_from = self.held.len();
        let held_intermediates = self.hold_intermediates(b, group, &mut inner, j, lane, c.clone(), &mut visit, out)?;
        for a in group {
            b.ir.reduction_order.insert(a.var, ReductionOrder::BlockRuns { threads: b.ir.block, warp: b.warp(), width: self.width, slots: self.slots });
            if let Some(nodes) = self.recomputed_at_elements(k, a) {
                let arr = b.local(&format!("{}_term_row", name), a.body.ty);
                out.push(KStmt::DeclArray { arr, len: self.slots * self.width, init: None });
                let v = b.lower(a.body, &mut inner, &mut visit)?;
                visit.push(KStmt::ArraySet { arr, index: self.slot(j, lane), value: v });
                inner.reduced.insert(node_key(a.body), VExpr::new(VKind::ArrayGet { arr, index: self.slot(j, lane) }, a.body.ty));
                self.held.push(Held { arr, nodes });
            }
            row::accumulate(b, a, c.clone(), &mut inner, &mut visit)?;
        }
        body.push(KStmt::unrolled(lane, self.width, vec![KStmt::If { cond: c.clone().lt(self.extent.clone()), then: visit, els: vec![] }]));
        out.push(KStmt::unrolled(j, self.slots, body));
        let elem = b.ivar("elem");
        let (e, w, block) = (IExpr::Var(elem), self.width as i64, b.ir.block as i64);
        let witness = vec![
            (Witness::Var(j), e.clone().div(IExpr::c(w)).div(IExpr::c(block))),
            (Witness::Tid, e.clone().div(IExpr::c(w)).rem(IExpr::c(block))),
            (Witness::Var(lane), e.rem(IExpr::c(w))),
        ];
        let held = self.held[held_from..].iter().map(|h| h.arr).chain(held_intermediates).collect();
        let visits = Visits { outer: j, at: c, elem, witness, held, team: None };
        let span = k.vars[var].span;
        b.ir.reduction_loops.push(ReductionLoop { var: lane, extent: self.extent.clone(), cooperative: true, granule: 1, name: format!("`{}`", name), span, visits: Some(visits) });
        Ok(())
    }

    /// The costly element intermediates (a call or a division in their
    /// value: `layernorm_gelu_bwd`'s `g`, GELU's slope) that this group's
    /// terms read, directly or through other intermediates, and that no
    /// earlier pass holds: each computed once at the visited element, in
    /// dependency order, into registers at the element's slot, and read
    /// there by the group's terms and by every later pass (the other
    /// groups, the element statements), where inlining computed it at
    /// every read (four times a pass, twice over, for the fused backward).
    /// The same operations on the same operands: nothing the accuracy
    /// analysis sees changes. Returns the arrays (written one slot a
    /// visit: `Visits::held`).
    #[allow(clippy::too_many_arguments)]
    fn hold_intermediates(&mut self, b: &mut Builder, group: &[&Acc], inner: &mut Env, j: IVar, lane: IVar, c: IExpr, visit: &mut Vec<KStmt>, out: &mut Vec<KStmt>) -> Result<Vec<LocalId>, Diagnostic> {
        let k = b.k;
        let mut wanted = Vec::new();
        for a in group {
            self.costly_intermediates(k, a.body, &mut wanted);
        }
        let mut arrays = Vec::new();
        for t in wanted {
            let Some(w) = k.writer(t) else { continue };
            let stmt = &k.stmts[w];
            let ty = k.tensors[t].dtype;
            let arr = b.local(&format!("{}_row", k.tensors[t].name), ty);
            out.push(KStmt::DeclArray { arr, len: self.slots * self.width, init: None });
            let mut at = inner.clone();
            at.vars.insert(stmt.vars[self.prefix], c.clone());
            let v = b.lower(&stmt.value, &mut at, visit)?;
            visit.push(KStmt::ArraySet { arr, index: self.slot(j, lane), value: v.cast(ty) });
            inner.lane_arrays.insert(t, arr);
            self.intermediates.push((t, arr));
            arrays.push(arr);
        }
        Ok(arrays)
    }

    /// The costly element intermediates `e` reads (through other
    /// intermediates too), dependencies first, not yet held.
    fn costly_intermediates(&self, k: &Kernel, e: &TExpr, found: &mut Vec<TensorId>) {
        let mut loads = Vec::new();
        e.walk(&mut |x| {
            if let TExprKind::Load { tensor, .. } = &x.kind {
                if k.tensors[*tensor].role == TensorRole::Intermediate && !loads.contains(tensor) {
                    loads.push(*tensor);
                }
            }
        });
        for t in loads {
            let Some(w) = k.writer(t) else { continue };
            let stmt = &k.stmts[w];
            if stmt.vars.len() != self.prefix + 1 || found.contains(&t) || self.intermediates.iter().any(|(h, _)| *h == t) {
                continue;
            }
            self.costly_intermediates(k, &stmt.value, found);
            if costly(&stmt.value) && !found.contains(&t) {
                found.push(t);
            }
        }
    }

    /// Where the element statements compute `a`'s term again at their
    /// own element (its variable for theirs), if anywhere and if the term
    /// is costly: those nodes, by `node_key`. Not for a sum of products
    /// (it accumulates by multiply-adds, with no term of its own).
    fn recomputed_at_elements(&self, k: &Kernel, a: &Acc) -> Option<Vec<usize>> {
        if !costly(a.body) || (a.op == crate::syntax::ast::RedOp::Sum && tir::fma_operands(a.body).is_some()) {
            return None;
        }
        // The statement the reduction is in: its row variables are the
        // other statements' under other names.
        let within = |s: &tir::Stmt| {
            let mut found = false;
            s.value.walk(&mut |e| found |= node_key(e) == node_key(a.node));
            found
        };
        let home = k.stmts.iter().find(|s| within(s))?;
        let mut nodes = Vec::new();
        for s in k.stmts.iter().filter(|s| s.vars.len() == self.prefix + 1) {
            let mut rename: Vec<(tir::VarId, tir::VarId)> = home.vars[..self.prefix].iter().copied().zip(s.vars[..self.prefix].iter().copied()).collect();
            rename.push((a.var, s.vars[self.prefix]));
            s.value.walk(&mut |e| {
                if a.body.same_as(e, &rename) {
                    nodes.push(node_key(e));
                }
            });
        }
        (!nodes.is_empty()).then_some(nodes)
    }

    /// The held terms read at slot `j * width + lane` (see [`Held`]).
    fn hold(&self, env: &mut Env, j: IVar, lane: IVar, b: &Builder) {
        for h in &self.held {
            let ty = b.ir.locals[h.arr].ty;
            for &n in &h.nodes {
                env.reduced.insert(n, VExpr::new(VKind::ArrayGet { arr: h.arr, index: self.slot(j, lane) }, ty));
            }
        }
    }

    /// Output element statements over the registers: each run computed
    /// lane by lane and stored as one vector where it may be, else each
    /// element up to the row's end stored alone.
    pub fn element_loop(&self, b: &mut Builder, stmts: &[StmtId], prefix: usize, env: &Env, out: &mut Vec<KStmt>) -> Result<(), Diagnostic> {
        let k = b.k;
        let w = self.width;
        let j = b.ivar("run");
        let mut body = Vec::new();
        let c0 = self.run_start(b, j, "c0", &mut body);
        let (vl, sl) = (b.ivar("lane"), b.ivar("lane"));
        let (mut vector, mut vector_lane, mut scalar_lane) = (Vec::new(), Vec::new(), Vec::new());
        let mut results = Vec::new();
        for s in stmts {
            let stmt = &k.stmts[*s];
            let t = stmt.target;
            let own = &stmt.vars[prefix..];
            // A run's lanes, computed into registers, then one vector store.
            let arr = b.local(&format!("{}_run", k.tensors[t].name), k.tensors[t].dtype);
            vector.push(KStmt::DeclArray { arr, len: w, init: None });
            let mut inner = self.lane_env(env, j, vl, IExpr::Var(c0).add(IExpr::Var(vl)), own);
            self.hold(&mut inner, j, vl, b);
            let v = b.lower(&stmt.value, &mut inner, &mut vector_lane)?;
            vector_lane.push(KStmt::ArraySet { arr, index: IExpr::Var(vl), value: v.cast(k.tensors[t].dtype) });
            // One element, stored alone.
            let mut inner = self.lane_env(env, j, sl, IExpr::Var(c0).add(IExpr::Var(sl)), own);
            self.hold(&mut inner, j, sl, b);
            let v = b.lower(&stmt.value, &mut inner, &mut scalar_lane)?;
            let scalar_access = b.store(stmt, v, &inner, &mut scalar_lane);
            results.push((t, arr, scalar_access, stmt.span));
        }
        vector.push(KStmt::unrolled(vl, w, vector_lane));
        let mut vector_stores = Vec::new();
        for &(t, arr, _, span) in &results {
            let buf = b.buf(t);
            let (axes, base) = self.element(b, t, prefix, env, IExpr::Var(c0));
            let access = b.access(buf, AccessKind::Write, span, format!("vector write of `{}`", k.tensors[t].name));
            vector.push(KStmt::VecStore { buf, base, axes, width: w, arr, access });
            vector_stores.push(access);
        }
        let inside = IExpr::Var(c0).add(IExpr::Var(sl)).lt(self.extent.clone());
        let scalar = vec![KStmt::unrolled(sl, w, vec![KStmt::If { cond: inside, then: scalar_lane, els: vec![] }])];
        body.push(KStmt::If { cond: IExpr::Var(c0).lt(IExpr::Var(self.vec_end)), then: vector, els: scalar });
        out.push(KStmt::unrolled(j, self.slots, body));
        // Element x of an output: row x / C, column x % C, in run
        // (x % C) / w of thread ((x % C) / w) % block, lane (x % C) % w.
        let row = b.row_var.expect("row schedules set their row variable");
        let (wi, block) = (w as i64, b.ir.block as i64);
        for ((t, _, scalar_access, _), vector_access) in results.into_iter().zip(vector_stores) {
            let x = b.ivar("elem");
            let col = IExpr::Var(x).rem(self.extent.clone());
            let q = col.clone().div(IExpr::c(wi));
            let run = vec![(Witness::Var(row), IExpr::Var(x).div(self.extent.clone())), (Witness::Var(j), q.clone().div(IExpr::c(block))), (Witness::Tid, q.clone().rem(IExpr::c(block)))];
            let vector_run = q.clone().mul(IExpr::c(wi)).lt(IExpr::Var(self.vec_end));
            let mut lane = run.clone();
            lane.push((Witness::Var(sl), col.rem(IExpr::c(wi))));
            let cases = vec![
                CoverCase { when: vector_run.clone(), access: vector_access, assign: run },
                CoverCase { when: Cond::Not(Box::new(vector_run)), access: scalar_access, assign: lane },
            ];
            b.cover(t, x, cases);
        }
        Ok(())
    }
}
