//! A ring of slabs filled by a producer warpgroup and drained by the
//! warpgroups that run the matrix unit, each side in a loop of its own,
//! synchronised by barriers in shared memory (`mbarrier`) instead of the
//! block barrier: warp specialisation (issue 19).
//!
//! Stage `s` of the ring has two barriers: `full[s]`, which the producer's
//! 128 threads arrive at once their copies of the stage's slab have landed
//! (`KStmt::CpAsyncArrive`), and `empty[s]`, which the consumers' 256
//! threads arrive at once the unit has read the stage. Slab `j` lives in
//! stage `j % stages`; it is that stage's use `u = j / stages`, so the
//! consumer waits for the phase of `full[s]` with parity `u % 2`, and the
//! producer for the phase of `empty[s]` that the consumers completed with
//! slab `j - stages`, parity `(u - 1) % 2` (on the first use, the phase
//! before a fresh barrier's first, which counts as complete).
//! Neither side can run two phases ahead of the other's wait (each
//! waits for the other before it arrives again), so one parity bit names
//! the phase.
//!
//! Registers: the producer releases registers to the pool
//! (`setmaxnreg.dec`) and the consumers take them (`.inc`). The block is
//! launched with `__launch_bounds__(384, 1)`, so each thread enters with
//! 168; `.inc` waits until the pool holds what it asks, so the counts
//! must satisfy `128 producer + 256 consumer <= 384 * 168` or the block
//! never starts its loop (seen on the H100 with 96 / 208: a hang).
//!
//! Measured on the H100 before this was built, with hand-edited copies of
//! gemm_f16's source (bench/RESULTS.md, 2026-11-25): this form with
//! 256 x 128 tiles ran 435 / 466 TFLOP/s at 4096^3 / 8192^3, against 349
//! / 367 for the schedule in use; with 128 x 128 tiles it gained nothing.
//!
//! The verifier proves what the barriers order (`verify::mbarrier`): each
//! wait's stage and parity are its slab's, each barrier's arrivals are
//! counted, and race-freedom pairs a copy of slab `jw` only with reads of
//! the slabs `jx < jw < jx + stages` that the barriers leave unordered.
//! The ring (`kir::Ring::filled_by`) names the producer's loop for it.

use super::contraction::{copy_stage, slab_loop, Copies, VectorSlab};
use super::lower::Builder;
use crate::kir::*;
use crate::tir::VarId;

/// Registers a producer thread keeps, and a consumer thread takes
/// (`128 * 88 + 256 * 208 = 384 * 168`: see the module's documentation).
/// The producer's copies of 24 runs a slab fit 88 without spilling
/// (NVRTC sm_90a: 0 bytes; at 40 the hand-edited form spilled 236).
pub const PRODUCER_REGISTERS: u32 = 88;
pub const CONSUMER_REGISTERS: u32 = 208;
/// The register allowance a thread of a 384-thread block enters with.
pub const ENTRY_REGISTERS: u32 = 168;
// The consumers' `.inc` waits until the pool holds what it asks.
const _: () = assert!(128 * PRODUCER_REGISTERS + 256 * CONSUMER_REGISTERS <= 384 * ENTRY_REGISTERS);

/// The ring's loops and what coverage needs of them.
pub(super) struct ProducerRing {
    /// The copies of each operand's slab in the producer's loop.
    pub copies: [Copies; 2],
    /// The producer's loop variable (slab `kp / bk`).
    pub kp: IVar,
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
/// threads that run the unit (the others produce); `slab` builds one
/// slab's work on a stage (its argument) for the consumers, issue and
/// wait included, after which the stage is released. `lets`: the
/// copiers' fixed runs, bound in the producer's branch.
#[allow(clippy::too_many_arguments)]
pub(super) fn producer_ring(
    b: &mut Builder,
    (va, vb): (&VectorSlab, &VectorSlab),
    (a_stage, b_stage): (i64, i64),
    stages: u32,
    kvar: VarId,
    consumers: Cond,
    lets: Vec<KStmt>,
    slab: impl FnOnce(&mut Builder, IExpr) -> Vec<KStmt>,
) -> ProducerRing {
    let bk = va.bk() as i64;
    let stages_e = IExpr::c(stages as i64);
    let full = b.mbarriers("full", stages, va.copiers());
    let empty = b.mbarriers("empty", stages, b.ir.block - va.copiers());
    let init = vec![
        KStmt::If { cond: Cond::Eq(IExpr::Tid, IExpr::c(0)), then: vec![KStmt::MbarInit { bar: full }, KStmt::MbarInit { bar: empty }], els: vec![] },
        KStmt::Barrier,
    ];
    let kext = super::extent_expr(b.k.vars[kvar].extent);
    // The producer: wait for the stage to be released, copy the slab into
    // it, arrive when the copies land.
    let kp = b.ivar("kp");
    let mut pbody = Vec::new();
    let (slab_p, stage_p) = slab_and_stage(b, kp, bk, &stages_e, &mut pbody);
    // In every iteration: on a stage's first use the wait is for parity
    // 1, the phase before a fresh barrier's first, which counts as
    // complete, so it passes at once (and a branch around it would be a
    // second way of saying the same).
    pbody.push(KStmt::MbarWait { bar: empty, stage: IExpr::Var(stage_p), parity: IExpr::Var(slab_p).div(stages_e.clone()).add(IExpr::c(1)).rem(IExpr::c(2)) });
    let copies = copy_stage(b, (va, vb), &IExpr::Var(kp), &IExpr::Var(stage_p), (a_stage, b_stage), &mut pbody);
    pbody.push(KStmt::CpAsyncArrive { bar: full, stage: IExpr::Var(stage_p) });
    let mut producer = vec![KStmt::SetMaxRegisters { regs: PRODUCER_REGISTERS, grow: false }];
    producer.extend(lets);
    producer.push(KStmt::For { var: kp, start: IExpr::c(0), end: kext, step: IExpr::c(bk), unroll: false, body: pbody });
    // No wait at the end: its copies are never committed to a group
    // (`cp.async.wait_group` would not see them); each lands before its
    // arrival completes a phase the consumers wait for.
    // The consumers: wait for the slab, make the copies visible to the
    // unit, run the slab, release the stage.
    let k0 = b.ivar("k0");
    let mut cbody = Vec::new();
    let (slab_c, stage_c) = slab_and_stage(b, k0, bk, &stages_e, &mut cbody);
    cbody.push(KStmt::MbarWait { bar: full, stage: IExpr::Var(stage_c), parity: IExpr::Var(slab_c).div(stages_e).rem(IExpr::c(2)) });
    cbody.push(KStmt::ProxyFence);
    cbody.extend(slab(b, IExpr::Var(stage_c)));
    cbody.push(KStmt::MbarArrive { bar: empty, stage: IExpr::Var(stage_c) });
    let mut consumer = vec![KStmt::SetMaxRegisters { regs: CONSUMER_REGISTERS, grow: true }];
    consumer.push(slab_loop(b, k0, kvar, bk as u32, cbody));
    for (v, len) in [(va, a_stage), (vb, b_stage)] {
        b.ir.shared[v.tile()].ring = Some(Ring { stages, stage_len: len, of: k0, step: bk, ahead: 0, prologue: None, filled_by: Some(kp) });
    }
    ProducerRing { copies, kp, init, producer, consumer, consumers }
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
