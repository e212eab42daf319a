//! The contract monitor's observation of a kernel's outputs (issue 18).
//!
//! Before, the monitor measured every input a launch's bound needs by
//! probe kernels that read the tensor again: a second pass over each
//! activation of a training step, 13-27% of the step on the H100. The
//! kernel that writes a tensor has every value in registers as it stores
//! it, so it folds them into the tensor's range: each thread keeps the
//! smallest and largest value it stored and whether it stored a NaN, and
//! at the end each warp merges its lanes' folds into the launch's
//! observation buffer (`KStmt::ObserveFlush`). A later launch that reads
//! the tensor is judged by that range (an infinity in it: not finite, so
//! not covered).
//!
//! Only outputs whose every element the kernel writes are observed (their
//! coverage is proved), so the range is the whole tensor's; and only f16,
//! bf16 and f32 ones, whose values an f32 order key holds exactly.

use crate::kir::{BufId, IExpr, KParam, KStmt, KernelIr, Schedule};
use crate::types::Dtype;

/// Warps per block assumed by the slot a warp merges into: any value keeps
/// the slot in range; this one spreads the warps of a few blocks over all
/// the slots.
const WARPS_SPREAD: i64 = 8;

/// Do kernels of this schedule observe their outputs? Element-wise ones
/// (pointwise, gather): memory-bound, with registers to spare, the folds
/// cost nothing measurable (H100: gelu_fwd and adamw at 2^26 the same
/// speed with them). Not the row schedules and contractions: their
/// register budgets are tuned to the limit, and the folds' registers cost
/// them even when skipped at run time (H100, monitor off: softmax_fwd and
/// layernorm_fwd at 16384x4096 -20%, gemm_f16_ws 4096^3 -12%, the tiny
/// MoE contractions -6 to -9%), more than the probes they save.
fn observes(schedule: &Schedule) -> bool {
    matches!(schedule, Schedule::Pointwise { .. } | Schedule::Gather)
}

/// The outputs of `ir` the monitor can observe.
fn observable(ir: &KernelIr) -> Vec<BufId> {
    if !observes(&ir.schedule) {
        return Vec::new();
    }
    (0..ir.bufs.len())
        .filter(|&b| ir.bufs[b].written && matches!(ir.bufs[b].dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32) && ir.coverage.iter().any(|c| c.buf == b))
        .collect()
}

/// Observe `ir`'s observable outputs: the observation buffer as the last
/// parameter, and the warps' merge at the end of the body, where every
/// thread of the block arrives (the body has no early exit). Blocks of
/// whole warps only (the merge is warp-collective); others stay as they are.
pub fn instrument(ir: &mut KernelIr) {
    let observed = observable(ir);
    if observed.is_empty() || !ir.block.is_multiple_of(32) {
        return;
    }
    ir.observed = observed;
    ir.params.push(KParam::Observations);
    let warp = IExpr::Tid.div(IExpr::c(32));
    let mut block = IExpr::BlockIdx(0).mul(IExpr::c(WARPS_SPREAD));
    if ir.grid.len() > 1 {
        block = block.add(IExpr::BlockIdx(1).mul(IExpr::c(3 * WARPS_SPREAD)));
    }
    let slot = block.add(warp).rem(IExpr::c(crate::kir::OBSERVE_SLOTS));
    ir.body.push(KStmt::ObserveFlush { slot });
}
