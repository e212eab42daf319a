//! Scheduling: typed IR to `KernelIr`.
//!
//! The schedule is chosen from the kernel's shape:
//! - one statement `y[m, n] = f(sum(k) a(m, k) * b(k, n), ...)`: a tiled
//!   contraction;
//! - every statement over the same index space: pointwise (vectorised when
//!   every access is the thread's own element; gather when indices are
//!   indirect), small reductions run sequentially per thread;
//! - statements over a common row prefix, or reductions along a tensor's
//!   contiguous axis: one block per row with fused block reductions.

mod contraction;
mod lower;
mod pointwise;
mod row;
pub mod tensor_core;
pub mod warpgroup;

pub use lower::{Builder, Env};

use crate::diag::Diagnostic;
use crate::kir::{KernelIr, Schedule};
use crate::target::Target;
use crate::tir::{self, Dim, Kernel, TExprKind};

/// Threads per block for pointwise and row schedules.
pub const BLOCK: u32 = 256;
/// Reductions no longer than this run sequentially inside one thread.
pub const SMALL_REDUCTION: i64 = 64;

/// Schedule every kernel of a program for one target.
pub fn schedule_program(p: &tir::Program, target: &Target) -> Result<Vec<KernelIr>, Vec<Diagnostic>> {
    let mut out = Vec::new();
    let mut errs = Vec::new();
    for k in &p.kernels {
        match schedule_kernel(k, target) {
            Ok(ir) => out.push(ir),
            Err(d) => errs.push(d),
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(errs)
    }
}

/// Alternative block sizes of the row schedule and the row lengths each
/// serves, `(block, shortest row, longest row)`; the default (`BLOCK`)
/// serves the rest. Measured on the H100 (bench/RESULTS.md, 2026-11-22):
/// rows of 1024 ran 1.2-1.7x faster with 128 threads, rows of 32000 1.5x
/// faster with 512; at 4096 the three sizes were within a few percent.
pub const ROW_VARIANTS: &[(u32, i64, i64)] = &[(128, 1, 2048), (512, 16384, i64::MAX)];

/// A kernel's variants, each with the range of its variant key it serves
/// (`variant_key`): a row schedule at other block sizes (`<kernel>_b<block>`,
/// by row length), a contraction with smaller tiles (`<kernel>_t<size>`,
/// by how many default tiles the output has).
pub fn schedule_variants(k: &Kernel, target: &Target, ir: &KernelIr) -> Result<Vec<(KernelIr, i64, i64)>, Diagnostic> {
    if let Schedule::Contraction { .. } = ir.schedule {
        let Some(plan) = contraction::detect(k) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for &(tile, suffix, lo, hi) in contraction::SMALL_TILES {
            let mut v = contraction::schedule_with_tile(k, target, &plan, tile)?;
            v.name = format!("{}_{}", k.name, suffix);
            out.push((v, lo, hi));
        }
        return Ok(out);
    }
    let Schedule::RowReduction { rows_rank } = ir.schedule else { return Ok(Vec::new()) };
    if !ir.reduction_loops.iter().any(|r| r.cooperative) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for &(block, lo, hi) in ROW_VARIANTS {
        let mut v = row::schedule_with_block(k, target, rows_rank as usize, block)?;
        v.name = format!("{}_b{}", k.name, block);
        out.push((v, lo, hi));
    }
    Ok(out)
}

pub fn schedule_kernel(k: &Kernel, target: &Target) -> Result<KernelIr, Diagnostic> {
    if let Some(plan) = contraction::detect(k) {
        if warpgroup::admits(k, target, &plan) {
            return warpgroup::schedule(k, target, plan);
        }
        if tensor_core::admits(k, target, &plan) {
            return tensor_core::schedule(k, target, plan);
        }
        return contraction::schedule(k, target, plan);
    }
    let ranks: Vec<usize> = k.stmts.iter().map(|s| s.vars.len()).collect();
    let min_rank = ranks.iter().copied().min().unwrap_or(0);
    let max_rank = ranks.iter().copied().max().unwrap_or(0);
    let prefix_agrees = |p: usize| {
        let first = &k.stmts.iter().find(|s| s.vars.len() >= p).map(|s| s.vars[..p].to_vec()).unwrap_or_default();
        k.stmts.iter().all(|s| {
            s.vars.len() >= p && s.vars[..p].iter().zip(first).all(|(a, b)| k.dims_equal(k.vars[*a].extent, k.vars[*b].extent))
        })
    };
    if min_rank == max_rank && prefix_agrees(min_rank) {
        if has_row_reduction(k) {
            return row::schedule(k, target, min_rank);
        }
        return pointwise::schedule(k, target);
    }
    if prefix_agrees(min_rank) {
        return row::schedule(k, target, min_rank);
    }
    let s = &k.stmts[ranks.iter().position(|r| *r == min_rank).unwrap_or(0)];
    Err(Diagnostic::error("E0801", format!("no schedule fits kernel `{}`", k.name), s.span)
        .with_label("this statement's index space does not share a prefix with the others")
        .with_help("statements of one kernel must run over the same index space, or over a common row prefix; split the kernel in two"))
}

/// Does some reduction run along a tensor's contiguous (last) axis over a
/// range that is not known to be small? Then one block per output is best.
fn has_row_reduction(k: &Kernel) -> bool {
    let (mut rows, mut columns, mut mixed) = (false, false, false);
    for s in &k.stmts {
        s.value.walk(&mut |e| {
            let TExprKind::Reduce { var, body, .. } = &e.kind else { return };
            let extent = k.vars[*var].extent;
            if k.dim_upper_bound(extent).is_some_and(|b| b <= SMALL_REDUCTION) {
                return;
            }
            // Row-like: the variable indexes only the last (contiguous) axis
            // of every tensor it indexes.
            let (mut last, mut other) = (false, false);
            body.walk(&mut |x| {
                if let TExprKind::Load { index, .. } = &x.kind {
                    for (j, i) in index.iter().enumerate() {
                        if i.as_var() == Some(*var) {
                            if j + 1 == index.len() {
                                last = true;
                            } else {
                                other = true;
                            }
                        }
                    }
                }
            });
            rows |= last && !other;
            columns |= other && !last;
            mixed |= last && other;
        });
    }
    // A reduction along the last axis reads rows. A kernel whose every
    // large reduction runs along leading axes only (a column sum: bias and
    // router gradients) gets a block per output too: its reads are
    // strided, but a sequential loop per output thread is latency-bound
    // (one block for 128 outputs of 4096 rows). Mixed uses stay pointwise.
    !mixed && (rows != columns)
}

/// The integer term for an extent.
pub fn extent_expr(d: Dim) -> crate::kir::IExpr {
    match d {
        Dim::Sym(id) => crate::kir::IExpr::Dim(id),
        Dim::Lit(v) => crate::kir::IExpr::Const(v),
    }
}
