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

use crate::kir::{BufId, IExpr, KParam, KStmt, KernelIr, LocalId, Related, Schedule, VExpr, VKind};
use crate::tir::Kernel;
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
    matches!(schedule, Schedule::RowReduction { .. } | Schedule::RowCached { .. } | Schedule::ColumnReduction { .. } | Schedule::Contraction { .. } | Schedule::SplitContraction { .. } | Schedule::NarrowContraction { .. } | Schedule::TensorCore { .. } | Schedule::Warpgroup { .. })
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
/// (see `observe`), and check `k`'s domain relations between two of them
/// (see `relate`); other kernels stay as they are.
pub fn instrument(ir: &mut KernelIr, k: &Kernel) {
    if !observes(&ir.schedule) {
        return;
    }
    let observed = observable(ir);
    if !observed.is_empty() {
        observe(ir, observed);
        relate(ir, k);
    }
}

/// Check each domain relation of `k` between two observed outputs
/// (AdamW's `m * m <= 64.0 * v`, both written by it) on the values stored,
/// where every store of either output is paired with a store of the other
/// at the same element in the same statement list (`paired`): the next
/// launch that needs the relation on those tensors is judged by this
/// check instead of a probe reading both again (at tiny, AdamW's moments
/// are 680 MB; their relation probe took 0.34 ms a step on the H100).
/// A relation whose stores do not pair is left to the probes.
pub fn relate(ir: &mut KernelIr, k: &Kernel) {
    let buf_of = |t| ir.observed.iter().copied().find(|&b| ir.bufs[b].tensor == t);
    for (r, rel) in k.relations.iter().enumerate() {
        let (Some(square), Some(bound)) = (buf_of(rel.square), buf_of(rel.bound)) else { continue };
        let related = Related { relation: r, square, bound, factor: rel.factor };
        if let Some(body) = paired(&ir.body, &related, ir.related.len(), &|l| ir.locals[l].ty) {
            ir.body = body;
            ir.related.push(related);
        }
    }
}

/// `body` with a `KStmt::ObserveRelation` of fold `fold` after every pair
/// of stores of `rel`'s two outputs at one element (a scalar store of
/// each at the same index, or a vector store of each at the same base and
/// width), in the same statement list with only fresh declarations
/// between them, each storing a register the relation can read again
/// after the second store. `None` where a store of either is not paired
/// so: the check would miss values, and the relation must be probed.
fn paired(body: &[KStmt], rel: &Related, fold: usize, ty: &dyn Fn(LocalId) -> crate::types::Dtype) -> Option<Vec<KStmt>> {
    let mut out: Vec<KStmt> = Vec::with_capacity(body.len());
    // The first store of a pair, waiting for its partner (its place in `out`).
    let mut open: Option<usize> = None;
    for s in body {
        let s = match s {
            KStmt::For { var, start, end, step, unroll, body } => KStmt::For { var: *var, start: start.clone(), end: end.clone(), step: step.clone(), unroll: *unroll, body: paired(body, rel, fold, ty)? },
            KStmt::If { cond, then, els } => KStmt::If { cond: cond.clone(), then: paired(then, rel, fold, ty)?, els: paired(els, rel, fold, ty)? },
            s => s.clone(),
        };
        let stored = store_of(&s).filter(|(b, _)| *b == rel.square || *b == rel.bound);
        match (stored, open) {
            (Some(_), None) => open = Some(out.len()),
            (Some((b, second)), Some(at)) => {
                let (a, first) = store_of(&out[at])?;
                if a == b {
                    return None;
                }
                let (sq, bd) = if a == rel.square { (first, second) } else { (second, first) };
                let checks = checks(&sq, &bd, fold, ty)?;
                out.push(s);
                out.extend(checks);
                open = None;
                continue;
            }
            (None, Some(at)) => {
                // Only a fresh register between the two stores: nothing
                // the first store's value reads can change.
                let KStmt::Decl { local, .. } = &s else { return None };
                if store_of(&out[at]).is_some_and(|(_, v)| v.reads(*local)) {
                    return None;
                }
            }
            (None, None) => {}
        }
        out.push(s);
    }
    open.is_none().then_some(out)
}

/// What a store writes, as `(buffer, value)`: a scalar store's register,
/// or a vector store's array with its width and base.
fn store_of(s: &KStmt) -> Option<(BufId, Stored)> {
    match s {
        KStmt::Store { buf, index, value, .. } => Some((*buf, Stored::One { index: index.clone(), value: value.clone() })),
        KStmt::VecStore { buf, base, width, arr, .. } => Some((*buf, Stored::Run { base: base.clone(), width: *width, arr: *arr })),
        _ => None,
    }
}

/// The value(s) one store writes (see `store_of`).
#[derive(Clone)]
enum Stored {
    One { index: IExpr, value: VExpr },
    Run { base: IExpr, width: u32, arr: LocalId },
}

impl Stored {
    /// Does reading the stored value again read register `l`?
    fn reads(&self, l: LocalId) -> bool {
        match self {
            Stored::One { value, .. } => matches!(value.kind, VKind::Local(x) if x == l),
            Stored::Run { arr, .. } => *arr == l,
        }
    }
}

/// The relation's checks for one pair of stores at the same element(s):
/// a register each (`square` first), or a run of each of one width from
/// one base (a check a lane). `None` where they are not at the same
/// elements, or a scalar store's value is not a register.
fn checks(square: &Stored, bound: &Stored, fold: usize, ty: &dyn Fn(LocalId) -> crate::types::Dtype) -> Option<Vec<KStmt>> {
    match (square, bound) {
        (Stored::One { index: i, value: sq }, Stored::One { index: j, value: bd }) if i == j && is_register(sq) && is_register(bd) => Some(vec![KStmt::ObserveRelation { fold, square: sq.clone(), bound: bd.clone() }]),
        (Stored::Run { base: a, width: w, arr: sq }, Stored::Run { base: b, width: v, arr: bd }) if a == b && w == v => Some(
            (0..*w as i64)
                .map(|e| {
                    let get = |arr: LocalId| VExpr::new(VKind::ArrayGet { arr, index: IExpr::c(e) }, ty(arr));
                    KStmt::ObserveRelation { fold, square: get(*sq), bound: get(*bd) }
                })
                .collect(),
        ),
        _ => None,
    }
}

/// A value read from a register (reading it again reads the same value
/// while nothing assigns it).
fn is_register(v: &VExpr) -> bool {
    matches!(v.kind, VKind::Local(_))
}


/// A row schedule's or a contraction's observing twin (`<name>_obs`): the
/// same kernel with its outputs observed, launched in its place only
/// while the monitor hands the launch observation words (the runtime's
/// `KernelDef::observing`). They do not observe themselves (see
/// `observes`): the folds' registers would cost them with the monitor
/// off; the twin costs only launches that the monitor would otherwise
/// follow with a probe of every output. `None` where nothing can be
/// observed, and for the warp-specialised contractions (`sets_registers`).
pub fn observing_twin(ir: &KernelIr, k: &Kernel) -> Option<KernelIr> {
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
    relate(&mut twin, k);
    Some(twin)
}

/// Does `body` move registers between warpgroups (`setmaxnreg`: the
/// warp-specialised contractions)? Their consumers run at the register
/// limit, and a twin costs more than the probe of its output (about 10 us
/// for 8 MB), so they have none. Measured (tiny MoE step, Nsight Compute):
/// with a compare-and-select fold, linear_fwd_ws 62 -> 74 us a launch
/// (H100): the fold turned each guarded store of the epilogue into a
/// branch, serialising the bias loads. With the two-instruction folds the
/// stores stay predicated, yet 61 -> 70 us (H200): the consumer loop
/// already spills 3 accumulator registers a k-slab, and the folds' two
/// registers make that 7 (SASS of the NVRTC cubin, bench/RESULTS.md,
/// twenty-seventh session).
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
