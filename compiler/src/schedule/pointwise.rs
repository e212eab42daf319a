//! Pointwise and gather schedules: one thread per element of the common
//! index space, in a grid-stride loop. When every access is the thread's own
//! element (same shape, identity index, no reductions), or an element of a
//! tensor over a prefix of the index space that the whole vector shares
//! (adamw's per-row `lrs[r]`), each thread handles a vector of elements
//! with 16-byte loads and stores, and a scalar tail covers the remainder,
//! misaligned buffers and rows that are not whole vectors.
//!
//! The vector of elements `[base, base + w)` lies in one row when the
//! innermost extent is a multiple of `w` (asked at launch, in the vector
//! loop's condition): the index variables are decomposed once a vector,
//! the innermost one stepping with the lane, in place of a division and a
//! remainder by a runtime extent per element (which made adamw and
//! sgd_momentum issue-bound at 72% of copy bandwidth once their
//! parameters became rows with a learning-rate multiplier each).

use super::lower::{Builder, Env};
use super::{extent_expr, BLOCK};
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::target::Target;
use crate::tir::{Kernel, TExprKind, TensorId};
use std::collections::BTreeSet;

pub fn schedule(k: &Kernel, target: &Target) -> Result<KernelIr, Diagnostic> {
    let vector = vector_width(k);
    let gather = has_indirect(k);
    let vectors = match vector {
        Some(w) if two_vectors_pay(k, w) => 2,
        _ => 1,
    };
    let schedule = if gather { Schedule::Gather } else { Schedule::Pointwise { vector: vector.unwrap_or(1), vectors } };
    let mut b = Builder::new(k, target, schedule, BLOCK);
    let vars0 = &k.stmts[0].vars;
    let total = vars0.iter().fold(IExpr::c(1), |acc, v| acc.mul(extent_expr(k.vars[*v].extent)));
    let gtid = IExpr::BlockIdx(0).mul(IExpr::c(BLOCK as i64)).add(IExpr::Tid);
    let gstride = IExpr::GridDim(0).mul(IExpr::c(BLOCK as i64));
    let mut body = Vec::new();
    // Per vector of an iteration: its stores, and where a vector's index
    // is found from the loop variable (`v`, or `v + half` for the second).
    let mut vector_stores: Vec<Vec<(TensorId, AccessId)>> = Vec::new();
    let mut vector_loop = None;
    let tail_start = match vector {
        Some(w) => {
            let bufs = vector_tensors(k).into_iter().map(|t| b.buf(t)).collect::<Vec<_>>();
            let nvec = b.ivar("nvec");
            let mut aligned = Cond::Aligned(bufs, 16);
            if has_row_loads(k) {
                let inner = extent_expr(k.vars[*vars0.last().expect("vector_width needs an index space")].extent);
                // (Nothing to ask where the extent is a constant multiple.)
                let rest = inner.rem(IExpr::c(w as i64));
                if rest != IExpr::c(0) {
                    aligned = aligned.and(Cond::Eq(rest, IExpr::c(0)));
                }
            }
            body.push(KStmt::LetInt {
                var: nvec,
                value: IExpr::Select(Box::new(aligned), Box::new(total.clone().div(IExpr::c(w as i64))), Box::new(IExpr::c(0))),
            });
            let v = b.ivar("v");
            // With two vectors an iteration the loop runs over the first
            // half of the vectors, each iteration also taking the vector
            // `half` further on: each load instruction stays coalesced
            // across the warp, and a thread has twice the bytes in flight.
            // An odd last vector goes to the scalar tail.
            let (end, bases) = if vectors == 2 {
                let half = b.ivar("half");
                body.push(KStmt::LetInt { var: half, value: IExpr::Var(nvec).div(IExpr::c(2)) });
                (IExpr::Var(half), vec![IExpr::Var(v), IExpr::Var(v).add(IExpr::Var(half))])
            } else {
                (IExpr::Var(nvec), vec![IExpr::Var(v)])
            };
            let vbody = vector_body(&mut b, w, &bases, &mut vector_stores)?;
            vector_loop = Some((v, end.clone(), w));
            body.push(KStmt::For { var: v, start: gtid.clone(), end: end.clone(), step: gstride.clone(), unroll: false, body: vbody });
            end.mul(IExpr::c((w * vectors) as i64))
        }
        None => IExpr::c(0),
    };
    let f = b.ivar("i_flat");
    let mut env = Env::default();
    let mut sbody = Vec::new();
    b.decompose(IExpr::Var(f), vars0, &mut env, &mut sbody);
    let scalar_stores = element_body(&mut b, &mut env, &mut sbody)?;
    // Coverage: element e is the flat index of the thread's element; with
    // vectors, elements below end * w * vectors are in vector q = e / w,
    // the loop's `v = q` (first vector) or `v = q - end` (second vector).
    for (t, access) in scalar_stores {
        let elem = b.ivar("elem");
        let e = IExpr::Var(elem);
        let mut cases = Vec::new();
        let tail_when = match vector_loop.clone() {
            Some((v, end, w)) => {
                let q = e.clone().div(IExpr::c(w as i64));
                for (i, stores) in vector_stores.iter().enumerate() {
                    let first = if i == 0 { IExpr::c(0) } else { end.clone().mul(IExpr::c(i as i64)) };
                    let below = q.clone().lt(first.clone().add(end.clone()));
                    let when = if i == 0 { below } else { Cond::Le(first.clone(), q.clone()).and(below) };
                    if let Some((_, va)) = stores.iter().find(|(vt, _)| *vt == t) {
                        cases.push(CoverCase { when, access: *va, assign: vec![(Witness::Var(v), q.clone().sub(first))] });
                    }
                }
                Cond::Not(Box::new(e.clone().lt(tail_start.clone())))
            }
            None => Cond::True,
        };
        cases.push(CoverCase { when: tail_when, access, assign: vec![(Witness::Var(f), e.clone())] });
        b.cover(t, elem, cases);
    }
    body.push(KStmt::For { var: f, start: tail_start.add(gtid), end: total.clone(), step: gstride, unroll: false, body: sbody });
    let per_block = BLOCK as i64 * vector.unwrap_or(1) as i64 * vectors as i64;
    b.ir.grid = vec![GridDim::Stride { work: total, per_block }];
    b.ir.body = body;
    Ok(b.finish())
}

/// Two vectors an iteration pay where a thread's vector loads are 48 to
/// 64 bytes, measured on the H100 with `tokitai-bench-kernels`, 2^26
/// elements, the monitor off, both forms alternating twice in one call
/// (bench/RESULTS.md, twelfth session): sgd_momentum (16 + 32 + 16 bytes)
/// 89.3-89.9% -> 98.1-98.4% of copy; gelu_fwd (16), gelu_bwd and mse_grad
/// (32) already reach 91-99% with one and did not gain (mse_grad 0.8%
/// slower); adamw (96) lost 1-3% in the eleventh session's ablation.
/// `TOKITAI_TWO_VECTOR_BYTES=N` moves the window to [1, N] (0: one vector
/// everywhere), for measuring the rule again.
fn two_vectors_pay(k: &Kernel, w: u32) -> bool {
    let bytes: u32 = vector_tensors(k).into_iter().filter(|t| read_before_write(k, *t)).map(|t| k.tensors[t].dtype.size_bytes() * w).sum();
    let (lo, hi) = two_vector_window();
    bytes > 0 && (lo..=hi).contains(&bytes)
}

fn two_vector_window() -> (u32, u32) {
    match std::env::var("TOKITAI_TWO_VECTOR_BYTES").ok().and_then(|v| v.parse().ok()) {
        Some(n) => (1, n),
        None => (48, 64),
    }
}

/// Every statement in order, for the element the environment's variables
/// select: each result goes to a register; outputs are stored.
fn element_body(b: &mut Builder, env: &mut Env, out: &mut Vec<KStmt>) -> Result<Vec<(TensorId, AccessId)>, Diagnostic> {
    let mut stores = Vec::new();
    for (si, stmt) in b.k.stmts.iter().enumerate() {
        // Statements share one index space: rename this statement's free
        // variables to the first statement's.
        if si > 0 {
            for (j, v) in stmt.vars.iter().enumerate() {
                let first = b.k.stmts[0].vars[j];
                let e = env.vars[&first].clone();
                env.vars.insert(*v, e);
            }
        }
        let value = b.lower(&stmt.value, env, out)?;
        let name = b.k.tensors[stmt.target].name.clone();
        let l = b.local(&name, value.ty);
        out.push(KStmt::Decl { local: l, init: Some(value) });
        env.values.insert(stmt.target, l);
        if b.is_output(stmt.target) {
            let a = b.store(stmt, VExpr::local(l, b.k.tensors[stmt.target].dtype), env, out);
            stores.push((stmt.target, a));
        }
    }
    Ok(stores)
}

/// The vector loop body for the vectors at `bases` (vector indices): load
/// every vector operand of every vector first, then compute each lane and
/// store every vector result, vector by vector. `stores` gets each
/// vector's stores, in the order of `bases`.
fn vector_body(b: &mut Builder, w: u32, bases: &[IExpr], stores: &mut Vec<Vec<(TensorId, AccessId)>>) -> Result<Vec<KStmt>, Diagnostic> {
    let k = b.k;
    let mut out = Vec::new();
    let mut envs = Vec::new();
    // Inputs read before any statement writes them come from vector loads.
    for v in bases {
        let base = v.clone().mul(IExpr::c(w as i64));
        let mut env = Env::default();
        for t in vector_tensors(k) {
            if !read_before_write(k, t) {
                continue;
            }
            let buf = b.buf(t);
            let arr = b.local(&format!("{}_vec", k.tensors[t].name), k.tensors[t].dtype);
            let span = k.tensors[t].span;
            let access = b.access(buf, AccessKind::Read, span, format!("vector read of `{}`", k.tensors[t].name));
            out.push(KStmt::DeclArray { arr, len: w, init: None });
            out.push(KStmt::VecLoad { arr, buf, base: base.clone(), axes: Vec::new(), width: w, access });
            env.lane_arrays.insert(t, arr);
        }
        envs.push((base, env));
    }
    for (base, mut env) in envs {
        let mut vector_stores = Vec::new();
        vector_compute(b, w, base, &mut env, &mut out, &mut vector_stores)?;
        stores.push(vector_stores);
    }
    Ok(out)
}

/// One vector's lanes, computed from its loaded operands (`env`), and its
/// results stored.
fn vector_compute(b: &mut Builder, w: u32, base: IExpr, env: &mut Env, out: &mut Vec<KStmt>, stores: &mut Vec<(TensorId, AccessId)>) -> Result<(), Diagnostic> {
    let k = b.k;
    let mut results = Vec::new();
    for s in &k.stmts {
        if b.is_output(s.target) {
            let arr = b.local(&format!("{}_out", k.tensors[s.target].name), k.tensors[s.target].dtype);
            out.push(KStmt::DeclArray { arr, len: w, init: None });
            results.push((s.target, arr, s.span));
        }
    }
    let lane = b.ivar("lane");
    env.lane = Some(IExpr::Var(lane));
    let mut lane_body = Vec::new();
    let uses_vars = k.stmts.iter().any(|s| uses_var_as_value(&s.value));
    if has_row_loads(k) {
        // The vector lies in one row (the loop's condition asks the
        // innermost extent to be a multiple of w): the row's variables
        // once a vector, and the innermost, where a statement uses it as a
        // value, stepping with the lane.
        let vars = k.stmts[0].vars.clone();
        let (inner, outer) = vars.split_last().expect("vector_width needs an index space");
        let inner_ext = extent_expr(k.vars[*inner].extent);
        b.decompose(base.clone().div(inner_ext.clone()), outer, env, out);
        if uses_vars {
            let first = b.ivar(&k.vars[*inner].name.clone());
            out.push(KStmt::LetInt { var: first, value: base.clone().rem(inner_ext) });
            env.vars.insert(*inner, IExpr::Var(first).add(IExpr::Var(lane)));
        }
    } else if uses_vars {
        // Index variables, where a statement uses them as values.
        b.decompose(base.clone().add(IExpr::Var(lane)), &k.stmts[0].vars.clone(), env, &mut lane_body);
    }
    for (si, stmt) in k.stmts.iter().enumerate() {
        if si > 0 {
            for (j, var) in stmt.vars.iter().enumerate() {
                if let Some(e) = env.vars.get(&k.stmts[0].vars[j]).cloned() {
                    env.vars.insert(*var, e);
                }
            }
        }
        let value = b.lower(&stmt.value, env, &mut lane_body)?;
        let l = b.local(&k.tensors[stmt.target].name.clone(), value.ty);
        lane_body.push(KStmt::Decl { local: l, init: Some(value) });
        env.values.insert(stmt.target, l);
        if let Some((_, arr, _)) = results.iter().find(|(t, _, _)| *t == stmt.target) {
            lane_body.push(KStmt::ArraySet { arr: *arr, index: IExpr::Var(lane), value: VExpr::local(l, k.tensors[stmt.target].dtype) });
        }
    }
    out.push(KStmt::unrolled(lane, w, lane_body));
    for (t, arr, span) in results {
        let buf = b.buf(t);
        let access = b.access(buf, AccessKind::Write, span, format!("vector write of `{}`", k.tensors[t].name));
        out.push(KStmt::VecStore { buf, base: base.clone(), axes: Vec::new(), width: w, arr, access });
        stores.push((t, access));
    }
    Ok(())
}

/// Is `t` read by some statement at or before the one that writes it (so
/// its old value is needed)?
fn read_before_write(k: &Kernel, t: TensorId) -> bool {
    let w = k.writer(t).unwrap_or(usize::MAX);
    k.stmts.iter().enumerate().any(|(si, s)| {
        let mut reads = false;
        s.value.walk(&mut |e| {
            if matches!(&e.kind, TExprKind::Load { tensor, .. } if *tensor == t) {
                reads = true;
            }
        });
        reads && si <= w
    })
}

fn has_indirect(k: &Kernel) -> bool {
    let mut found = false;
    for s in &k.stmts {
        s.value.walk(&mut |e| {
            if let TExprKind::Load { index, .. } = &e.kind {
                for i in index {
                    i.walk(&mut |x| {
                        if matches!(x.kind, TExprKind::Load { .. }) {
                            found = true;
                        }
                    });
                }
            }
        });
    }
    found
}

/// Is a tensor over a proper prefix of the index space read (one element
/// per row, shared by a vector's lanes)?
fn has_row_loads(k: &Kernel) -> bool {
    k.stmts.iter().any(|s| {
        let mut found = false;
        s.value.walk(&mut |e| {
            if let TExprKind::Load { tensor, index } = &e.kind {
                if !index.is_empty() && row_load(k, s, *tensor, index) {
                    found = true;
                }
            }
        });
        found
    })
}

/// Is `tensor[index]` in statement `s` a load of a tensor over a proper
/// prefix of `s`'s index space, indexed by those variables in order?
fn row_load(k: &Kernel, s: &crate::tir::Stmt, tensor: TensorId, index: &[crate::tir::TExpr]) -> bool {
    let shape = &k.tensors[tensor].shape;
    index.len() < s.vars.len()
        && index.len() == shape.len()
        && index.iter().zip(&s.vars).all(|(i, v)| i.as_var() == Some(*v))
        && shape.iter().zip(&s.vars).all(|(d, v)| k.dims_equal(*d, k.vars[*v].extent))
}

/// Tensors accessed as whole vectors: every non-scalar parameter tensor
/// over the whole index space (row loads are read per vector, not as
/// vectors).
fn vector_tensors(k: &Kernel) -> Vec<TensorId> {
    let mut set = BTreeSet::new();
    for s in &k.stmts {
        if k.tensors[s.target].role != crate::tir::TensorRole::Intermediate {
            set.insert(s.target);
        }
        s.value.walk(&mut |e| {
            if let TExprKind::Load { tensor, index } = &e.kind {
                if !index.is_empty() && k.tensors[*tensor].role != crate::tir::TensorRole::Intermediate && !row_load(k, s, *tensor, index) {
                    set.insert(*tensor);
                }
            }
        });
    }
    set.into_iter().collect()
}

/// Elements per thread when every access is the thread's own element of
/// one common shape and nothing reduces: 16 bytes of the narrowest type.
fn vector_width(k: &Kernel) -> Option<u32> {
    let vars0 = &k.stmts[0].vars;
    if vars0.is_empty() {
        return None;
    }
    let shape0: Vec<_> = vars0.iter().map(|v| k.vars[*v].extent).collect();
    let same_shape = |t: TensorId| {
        let s = &k.tensors[t].shape;
        s.len() == shape0.len() && s.iter().zip(&shape0).all(|(a, b)| k.dims_equal(*a, *b))
    };
    let mut ok = true;
    let mut min_bytes = 16;
    for s in &k.stmts {
        if !same_shape(s.target) {
            ok = false;
        }
        min_bytes = min_bytes.min(k.tensors[s.target].dtype.size_bytes());
        s.value.walk(&mut |e| match &e.kind {
            TExprKind::Reduce { .. } => ok = false,
            TExprKind::Load { tensor, index } if !index.is_empty() => {
                let identity = index.len() == s.vars.len() && index.iter().zip(&s.vars).all(|(i, v)| i.as_var() == Some(*v));
                if row_load(k, s, *tensor, index) {
                    // One element a row: read per vector, not a vector.
                } else if !identity || !same_shape(*tensor) {
                    ok = false;
                } else {
                    min_bytes = min_bytes.min(k.tensors[*tensor].dtype.size_bytes());
                }
            }
            _ => {}
        });
    }
    if ok && min_bytes < 16 {
        Some(16 / min_bytes)
    } else {
        None
    }
}

/// Does an index variable appear as a value (not only inside an index)?
fn uses_var_as_value(e: &crate::tir::TExpr) -> bool {
    match &e.kind {
        TExprKind::Var(_) => true,
        TExprKind::Load { .. } => false,
        TExprKind::Unary(_, a) | TExprKind::Cast(a) => uses_var_as_value(a),
        TExprKind::Binary(_, a, b) => uses_var_as_value(a) || uses_var_as_value(b),
        TExprKind::Call(_, args) => args.iter().any(uses_var_as_value),
        TExprKind::Reduce { body, .. } => uses_var_as_value(body),
        TExprKind::Let { value, body, .. } => uses_var_as_value(value) || uses_var_as_value(body),
        _ => false,
    }
}
