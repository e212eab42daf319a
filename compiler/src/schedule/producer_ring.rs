//! A ring of slabs filled by a producer warpgroup and drained by the
//! warpgroups that run the matrix unit, each side in a loop of its own,
//! synchronised by barriers in shared memory (`mbarrier`) instead of the
//! block barrier: warp specialisation (issue 19).
//!
//! The producer's first thread fills the ring with bulk tensor copies
//! (TMA, `KStmt::TmaLoad`): each slab of each operand is one box (or a
//! few, `BulkOperand`) 64 elements wide along the operand's contiguous
//! axis, read through a tensor map the launch passes and laid out with
//! the 128-byte swizzle, which the unit's descriptors read as it lies. The
//! copy unit zero-fills what lies past M, N or K, so ragged tiles need no
//! predicate.
//!
//! Stage `s` of the ring has two barriers: `full[s]`, which the issuing
//! thread arms with the slab's bytes (`KStmt::MbarExpectTx`, its one
//! arrival a phase) before it issues the slab's copies, whose bytes
//! complete the phase as they land; and `empty[s]`, which the consumers'
//! 256 threads arrive at once the unit has read the stage. Slab `j` lives
//! in stage `j % stages`; it is that stage's use `u = j / stages`, so the
//! consumer waits for the phase of `full[s]` with parity `u % 2`, and the
//! producer for the phase of `empty[s]` that the consumers completed with
//! slab `j - stages`, parity `(u - 1) % 2` (on the first use, the phase
//! before a fresh barrier's first, which counts as complete).
//! Neither side can run two phases ahead of the other's wait (each
//! waits for the other before it arrives again), so one parity bit names
//! the phase.
//!
//! Measured on the H100 with hand-edited copies of the generated kernel
//! (bench/experiments/ws_tma.py, bench/RESULTS.md 2026-11-25): bulk
//! copies with the 128-byte swizzle ran the form 1.10-1.24x faster than
//! 128 threads' 16-byte `cp.async` copies (whose shared-memory stores were
//! the bottleneck), with outputs bitwise equal; 16-byte-wide boxes into
//! the unswizzled core matrices ran at 0.4-0.7x.
//!
//! Registers: the producer releases registers to the pool
//! (`setmaxnreg.dec`) and the consumers take them (`.inc`). The block is
//! launched with `__launch_bounds__(384, 1)`, so each thread enters with
//! 168; `.inc` waits until the pool holds what it asks, so the counts
//! must satisfy `128 producer + 256 consumer <= 384 * 168` or the block
//! never starts its loop (seen on the H100 with 96 / 208: a hang). One
//! thread issuing a few bulk copies a slab needs few registers, so the
//! producer keeps 40 and the consumers take 232 (H100, both in one run:
//! gemm_f16 1.0-2.5% faster than at 88 / 208, the linear layers within
//! 1%; bench/RESULTS.md, 2026-11-26).
//!
//! Measured on the H100 before this was built, with hand-edited copies of
//! gemm_f16's source (bench/RESULTS.md, 2026-11-25): this form with
//! 256 x 128 tiles ran 435 / 466 TFLOP/s at 4096^3 / 8192^3, against 349
//! / 367 for the schedule in use; with 128 x 128 tiles it gained nothing.
//!
//! The verifier proves what the barriers order (`verify::mbarrier`): each
//! wait's, arrival's and copy's stage and parity are its slab's, each
//! barrier's arrivals are counted, the bytes `full` expects are exactly
//! its copies', and race-freedom pairs a copy of slab `jw` only with reads
//! of the slabs `jx < jw < jx + stages` that the barriers leave unordered.
//! The ring (`kir::Ring::filled_by`) names the producer's loop for it. A
//! copy's reads are modelled element by element inside the tensor (the
//! map's extents), its writes at their swizzled places, the unit's reads
//! at the places its swizzled descriptors name (`kir::WgOperand`).

use super::contraction::{plain_operand, slab_loop};
use super::lower::Builder;
use crate::kir::*;
use crate::tir::{self, TExpr, VarId};

/// Registers a producer thread keeps, and a consumer thread takes
/// (`128 * 40 + 256 * 232 = 384 * 168`: see the module's documentation).
pub const PRODUCER_REGISTERS: u32 = 40;
pub const CONSUMER_REGISTERS: u32 = 232;
/// The register allowance a thread of a 384-thread block enters with.
pub const ENTRY_REGISTERS: u32 = 168;
// The consumers' `.inc` waits until the pool holds what it asks.
const _: () = assert!(128 * PRODUCER_REGISTERS + 256 * CONSUMER_REGISTERS <= 384 * ENTRY_REGISTERS);

/// Elements along a box's contiguous axis: one 128-byte row of the
/// swizzle.
const BOX_INNER: u32 = SWIZZLE_ROW as u32;

/// One operand's slabs as bulk tensor copies bring them: a 2-D tensor
/// read through its tensor map, in boxes 64 elements wide along its
/// contiguous axis with the 128-byte swizzle (`SlabLayout::Swizzled`).
/// Where k is that axis (`k_contiguous`), one box of `width` rows (m or n)
/// by 64 k a slab; else `width / 64` boxes of 64 k rows by 64 m or n.
pub(super) struct BulkOperand {
    tensor: tir::TensorId,
    k_contiguous: bool,
    map: TensorMapId,
    tile: SharedId,
    width: u32,
    bk: u32,
    /// The tile's first index along the operand's output axis.
    origin: IExpr,
    /// Elements a stage of the ring.
    stage_len: i64,
}

impl BulkOperand {
    /// Can bulk copies bring this operand's slabs into a slab of `tile`'s
    /// dtype? A plain 2-D load of that dtype (16-bit), whose boxes fit
    /// the copy unit (at most 256 rows) and tile the slab.
    pub(super) fn fits(b: &Builder, operand: &TExpr, (out_var, kvar): (VarId, VarId), tile: SharedId, width: u32, bk: u32) -> bool {
        let Some((tensor, k_contiguous)) = plain_operand(operand, out_var, kvar) else { return false };
        let ty = b.ir.shared[tile].ty;
        let rows = if k_contiguous { width } else { bk };
        let along = if k_contiguous { bk } else { width };
        b.k.tensors[tensor].dtype == ty && ty.size_bytes() == 2 && b.k.tensors[tensor].shape.len() == 2 && rows <= 256 && along % BOX_INNER == 0 && (k_contiguous || bk == BOX_INNER)
    }

    /// The operand (which [`fits`](Self::fits)) with its tensor map.
    pub(super) fn new(b: &mut Builder, operand: &TExpr, (out_var, kvar): (VarId, VarId), tile: SharedId, (width, bk): (u32, u32), origin: &IExpr, stage_len: i64) -> BulkOperand {
        let (tensor, k_contiguous) = plain_operand(operand, out_var, kvar).expect("fits() checked the operand");
        let buf = b.buf(tensor);
        let map = b.tensor_map(buf, BOX_INNER, if k_contiguous { width } else { bk });
        BulkOperand { tensor, k_contiguous, map, tile, width, bk, origin: origin.clone(), stage_len }
    }

    fn boxes(&self) -> u32 {
        if self.k_contiguous {
            1
        } else {
            self.width / BOX_INNER
        }
    }

    /// Bytes a slab brings.
    fn bytes(&self, b: &Builder) -> u32 {
        self.width * self.bk * b.ir.shared[self.tile].ty.size_bytes()
    }

    /// The copies of slab `kp` into stage `stage` of the ring, completing
    /// on barrier `stage` of `bar`: each box's access and element
    /// variables (row, column), for coverage.
    fn copy(&self, b: &mut Builder, kp: &IExpr, (bar, stage): (MbarId, &IExpr), out: &mut Vec<KStmt>) -> Vec<BulkCopy> {
        let name = b.k.tensors[self.tensor].name.clone();
        let span = b.k.tensors[self.tensor].span;
        let buf = b.buf(self.tensor);
        (0..self.boxes() as i64)
            .map(|j| {
                let (r, c) = (b.ivar("box_row"), b.ivar("box_col"));
                let access = b.access(buf, AccessKind::Read, span, format!("bulk tensor copy of `{}`", name));
                let at = stage.clone().mul(IExpr::c(self.stage_len));
                let (base, inner, outer) = if self.k_contiguous {
                    (at, kp.clone(), self.origin.clone())
                } else {
                    let box_len = (BOX_INNER * self.bk) as i64;
                    (at.add(IExpr::c(j * box_len)), self.origin.clone().add(IExpr::c(j * BOX_INNER as i64)), kp.clone())
                };
                out.push(KStmt::TmaLoad { map: self.map, arr: self.tile, base, inner, outer, elem: (r, c), bar, stage: stage.clone(), access });
                BulkCopy { access, elem: (r, c), box_index: j }
            })
            .collect()
    }

    /// Coverage of the operand where the ring is `on`: element (o, k),
    /// in slab `k / bk`, is read by the copy of the box that holds it, in
    /// the producer's iteration of that slab, by the issuing thread, as
    /// the box's element (row, column). Added as cases to the element
    /// loader's coverage (the last one pushed), whose own case then holds
    /// where the ring is off.
    pub(super) fn cover(&self, b: &mut Builder, on: Cond, copies: &[BulkCopy], (kp, issuer): (IVar, u32)) {
        let Some(cover) = b.ir.coverage.last_mut() else { return };
        let Some(base) = cover.cases.first().cloned() else { return };
        cover.cases[0].when = Cond::Not(Box::new(on.clone()));
        let (e_o, e_k) = if self.k_contiguous { (IExpr::Var(cover.elem[0]), IExpr::Var(cover.elem[1])) } else { (IExpr::Var(cover.elem[1]), IExpr::Var(cover.elem[0])) };
        let bk = self.bk as i64;
        let x = e_o.rem(IExpr::c(self.width as i64));
        let kk = e_k.clone().rem(IExpr::c(bk));
        let blocks: Vec<(Witness, IExpr)> = base.assign.iter().filter(|(wit, _)| matches!(wit, Witness::BlockIdx(_))).cloned().collect();
        for copy in copies {
            let (row, col, when) = if self.k_contiguous {
                (x.clone(), kk.clone(), on.clone())
            } else {
                let inner = BOX_INNER as i64;
                (kk.clone(), x.clone().rem(IExpr::c(inner)), on.clone().and(Cond::Eq(x.clone().div(IExpr::c(inner)), IExpr::c(copy.box_index))))
            };
            let mut assign = blocks.clone();
            assign.push((Witness::Tid, IExpr::c(issuer as i64)));
            assign.push((Witness::Var(kp), e_k.clone().div(IExpr::c(bk)).mul(IExpr::c(bk))));
            assign.push((Witness::Var(copy.elem.0), row));
            assign.push((Witness::Var(copy.elem.1), col));
            cover.cases.push(CoverCase { when, access: copy.access, assign });
        }
    }
}

/// One box's copy: its read access, its element variables (row, column)
/// and which box of the slab it is.
pub(super) struct BulkCopy {
    access: AccessId,
    elem: (IVar, IVar),
    box_index: i64,
}

/// The ring's loops and what coverage needs of them.
pub(super) struct ProducerRing {
    /// The copies of each operand's slab in the producer's loop.
    pub copies: [Vec<BulkCopy>; 2],
    /// The producer's loop variable (slab `kp / bk`).
    pub kp: IVar,
    /// The thread that issues the copies.
    pub issuer: u32,
    /// The barriers' initialisation, before the split.
    pub init: Vec<KStmt>,
    /// The producer's branch, and the consumers' (which the caller may
    /// extend: the epilogue).
    pub producer: Vec<KStmt>,
    pub consumer: Vec<KStmt>,
    /// Which threads consume.
    pub consumers: Cond,
}

impl ProducerRing {
    /// The ring's statements: the initialisation, then the two branches.
    pub fn assemble(self) -> Vec<KStmt> {
        let mut out = self.init;
        out.push(KStmt::If { cond: self.consumers, then: self.consumer, els: self.producer });
        out
    }
}

/// The ring (see the module's documentation): `consumers` names the
/// `consuming` threads that run the unit (the others produce, and the
/// first of them, `issuer`, issues the copies); `slab` builds one slab's
/// work on a stage (its argument) for the consumers, issue and wait
/// included, after which the stage is released.
#[allow(clippy::too_many_arguments)]
pub(super) fn producer_ring(
    b: &mut Builder,
    (oa, ob): (&BulkOperand, &BulkOperand),
    stages: u32,
    kvar: VarId,
    (consumers, consuming): (Cond, u32),
    slab: impl FnOnce(&mut Builder, IExpr) -> Vec<KStmt>,
) -> ProducerRing {
    let bk = oa.bk as i64;
    let stages_e = IExpr::c(stages as i64);
    let issuer = consuming;
    // One arrival a phase: the issuer's, with the slab's bytes.
    let full = b.mbarriers("full", stages, 1);
    let empty = b.mbarriers("empty", stages, consuming);
    let init = vec![
        KStmt::If { cond: Cond::Eq(IExpr::Tid, IExpr::c(0)), then: vec![KStmt::MbarInit { bar: full }, KStmt::MbarInit { bar: empty }], els: vec![] },
        KStmt::Barrier,
    ];
    let kext = super::extent_expr(b.k.vars[kvar].extent);
    // The producer: wait for the stage to be released, arm its barrier
    // with the slab's bytes, copy the slab into it.
    let kp = b.ivar("kp");
    let mut pbody = Vec::new();
    let (slab_p, stage_p) = slab_and_stage(b, kp, bk, &stages_e, &mut pbody);
    // In every iteration: on a stage's first use the wait is for parity
    // 1, the phase before a fresh barrier's first, which counts as
    // complete, so it passes at once (and a branch around it would be a
    // second way of saying the same).
    pbody.push(KStmt::MbarWait { bar: empty, stage: IExpr::Var(stage_p), parity: IExpr::Var(slab_p).div(stages_e.clone()).add(IExpr::c(1)).rem(IExpr::c(2)) });
    pbody.push(KStmt::MbarExpectTx { bar: full, stage: IExpr::Var(stage_p), bytes: oa.bytes(b) + ob.bytes(b) });
    let stage = IExpr::Var(stage_p);
    let copies = [oa.copy(b, &IExpr::Var(kp), (full, &stage), &mut pbody), ob.copy(b, &IExpr::Var(kp), (full, &stage), &mut pbody)];
    let producer = vec![
        KStmt::SetMaxRegisters { regs: PRODUCER_REGISTERS, grow: false },
        KStmt::If { cond: Cond::Eq(IExpr::Tid, IExpr::c(issuer as i64)), then: vec![KStmt::For { var: kp, start: IExpr::c(0), end: kext, step: IExpr::c(bk), unroll: false, body: pbody }], els: vec![] },
    ];
    // The consumers: wait for the slab (what the copies wrote through the
    // asynchronous proxy is the unit's to read once the phase is seen: no
    // proxy fence), run it, release the stage.
    let k0 = b.ivar("k0");
    let mut cbody = Vec::new();
    let (slab_c, stage_c) = slab_and_stage(b, k0, bk, &stages_e, &mut cbody);
    cbody.push(KStmt::MbarWait { bar: full, stage: IExpr::Var(stage_c), parity: IExpr::Var(slab_c).div(stages_e).rem(IExpr::c(2)) });
    cbody.extend(slab(b, IExpr::Var(stage_c)));
    cbody.push(KStmt::MbarArrive { bar: empty, stage: IExpr::Var(stage_c) });
    let mut consumer = vec![KStmt::SetMaxRegisters { regs: CONSUMER_REGISTERS, grow: true }];
    consumer.push(slab_loop(b, k0, kvar, bk as u32, cbody));
    for o in [oa, ob] {
        b.ir.shared[o.tile].ring = Some(Ring { stages, stage_len: o.stage_len, of: k0, step: bk, ahead: 0, prologue: None, filled_by: Some(kp) });
    }
    ProducerRing { copies, kp, issuer, init, producer, consumer, consumers }
}

/// The slab a loop over `k` (stepping by `bk`) is at, and its stage of
/// the ring, bound in `out`.
fn slab_and_stage(b: &mut Builder, k: IVar, bk: i64, stages: &IExpr, out: &mut Vec<KStmt>) -> (IVar, IVar) {
    let (slab, stage) = (b.ivar("slab"), b.ivar("stage"));
    out.push(KStmt::LetInt { var: slab, value: IExpr::Var(k).div(IExpr::c(bk)) });
    out.push(KStmt::LetInt { var: stage, value: IExpr::Var(slab).rem(stages.clone()) });
    (slab, stage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_register_counts_fit_the_pool_the_block_enters_with() {
        // (That the counts fit the pool the block enters with is a
        // compile-time assertion beside them.)
        // The counts setmaxnreg takes: multiples of 8 in [24, 256].
        for regs in [PRODUCER_REGISTERS, CONSUMER_REGISTERS] {
            assert!(regs % 8 == 0 && (24..=256).contains(&regs), "{}", regs);
        }
        // 384 threads of 65536 registers: ptxas's cap at entry.
        assert_eq!(ENTRY_REGISTERS, 65536 / 384 / 8 * 8);
    }
}
