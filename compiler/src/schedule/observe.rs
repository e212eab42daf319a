//! The contract monitor's observation of a kernel's outputs (issue 18).
//!
//! Before, the monitor measured every input a launch's bound needs by
//! probe kernels that read the tensor again: a second pass over each
//! activation of a training step, 13-27% of the step on the H100. The
//! kernel that writes a tensor has every value in registers as it stores
//! it, so it folds them into the tensor's range: each thread keeps the
//! smallest and largest value it stored and whether it stored a NaN, and
//! at the end each block merges its threads' folds into the launch's
//! observation buffer (`KStmt::ObserveFlush`). A later launch that reads
//! the tensor is judged by that range (an infinity in it: not finite, so
//! not covered).
//!
//! Only outputs whose every element the kernel writes are observed (their
//! coverage is proved), so the range is the whole tensor's; and only f16,
//! bf16 and f32 ones, whose values an f32 order key holds exactly.

use crate::kir::{BufId, IExpr, KParam, KStmt, KernelIr, Schedule};
use crate::types::Dtype;

/// Do kernels of this schedule observe their outputs? Element-wise ones
/// (pointwise, gather): memory-bound, with registers to spare, the folds
/// cost nothing measurable (H100: gelu_fwd and adamw at 2^26 the same
/// speed with them). Not the row schedules and contractions themselves:
/// their register budgets are tuned to the limit, and the folds'
/// registers cost them even when skipped at run time (H100, monitor off:
/// softmax_fwd and layernorm_fwd at 16384x4096 -20%, gemm_f16_ws 4096^3
/// -12%, the tiny MoE contractions -6 to -9%). They observe through twins
/// instead (`observing_twin`).
fn observes(schedule: &Schedule) -> bool {
    matches!(schedule, Schedule::Pointwise { .. } | Schedule::Gather)
}

/// Do observing twins (`observing_twin`) exist for this schedule? For the
/// row reductions and the contractions (each output element stored once
/// from registers in the epilogue).
fn twin_observes(schedule: &Schedule) -> bool {
    matches!(schedule, Schedule::RowReduction { .. } | Schedule::RowCached { .. } | Schedule::Contraction { .. } | Schedule::TensorCore { .. } | Schedule::Warpgroup { .. })
}

/// The outputs of `ir` the monitor can observe: float ones written whole.
/// None in blocks of partial warps (the merge combines warps by shuffles).
fn observable(ir: &KernelIr) -> Vec<BufId> {
    if !ir.block.is_multiple_of(32) {
        return Vec::new();
    }
    (0..ir.bufs.len())
        .filter(|&b| ir.bufs[b].written && matches!(ir.bufs[b].dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32) && ir.coverage.iter().any(|c| c.buf == b))
        .collect()
}

/// Observe `ir`'s observable outputs where its schedule observes itself
/// (see `observe`); other kernels stay as they are.
pub fn instrument(ir: &mut KernelIr) {
    if !observes(&ir.schedule) {
        return;
    }
    let observed = observable(ir);
    if !observed.is_empty() {
        observe(ir, observed);
    }
}

/// A row schedule's or a contraction's observing twin (`<name>_obs`): the
/// same kernel with its outputs observed, launched in its place only
/// while the monitor hands the launch observation words (the runtime's
/// `KernelDef::observing`). They do not observe themselves (see
/// `observes`): the folds' registers would cost them with the monitor
/// off; the twin costs only launches that the monitor would otherwise
/// follow with a probe of every output. `None` where nothing can be
/// observed, and for the warp-specialised contractions (`sets_registers`).
pub fn observing_twin(ir: &KernelIr) -> Option<KernelIr> {
    if !twin_observes(&ir.schedule) || !ir.observed.is_empty() || sets_registers(&ir.body) {
        return None;
    }
    let observed = observable(ir);
    if observed.is_empty() {
        return None;
    }
    let mut twin = ir.clone();
    twin.name = format!("{}{}", ir.name, TWIN_SUFFIX);
    observe(&mut twin, observed);
    Some(twin)
}

/// Does `body` move registers between warpgroups (`setmaxnreg`: the
/// warp-specialised contractions)? Their consumers run at the register
/// limit with the epilogue as the bottleneck, and a twin's folds there
/// cost them 12-19% (H100, tiny MoE step, Nsight Compute: linear_fwd_ws
/// 62 -> 74 us a launch): more than the probe of their output, which runs
/// at about 7 us. So they have none.
fn sets_registers(body: &[KStmt]) -> bool {
    body.iter().any(|s| match s {
        KStmt::SetMaxRegisters { .. } => true,
        KStmt::For { body, .. } => sets_registers(body),
        KStmt::If { then, els, .. } => sets_registers(then) || sets_registers(els),
        _ => false,
    })
}

/// The suffix of an observing twin's name (no other variant's name ends
/// so: theirs end in their shape, `_b128`, `_c256x2`, `_wg4`).
pub const TWIN_SUFFIX: &str = "_obs";

/// Is variant `name` an observing twin? Not a tuning candidate: the
/// tuner times the originals, and a launch takes a twin in its
/// original's place.
pub fn is_twin(name: &str) -> bool {
    name.ends_with(TWIN_SUFFIX)
}

/// Observe `observed` (some outputs): the observation buffer as the last
/// parameter, and the block's merge at the end of the body, where every
/// thread of the block arrives (the body has no early exit; the prover
/// checks it as it checks a barrier).
fn observe(ir: &mut KernelIr, observed: Vec<BufId>) {
    ir.observed = observed;
    ir.params.push(KParam::Observations);
    // `(bid.x + 3 bid.y) % 64`, each block index first taken mod 64 (the
    // same slot): no product that could leave 32 bits, which would cost
    // the kernel its 32-bit indexing.
    let slots = crate::kir::OBSERVE_SLOTS;
    let mut slot = IExpr::BlockIdx(0).rem(IExpr::c(slots));
    if ir.grid.len() > 1 {
        slot = slot.add(IExpr::BlockIdx(1).rem(IExpr::c(slots)).mul(IExpr::c(3)));
    }
    let slot = slot.rem(IExpr::c(slots));
    ir.body.push(KStmt::ObserveFlush { slot });
}
