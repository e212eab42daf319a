//! Tensor-core contractions (issue 19): the matrix unit's fragment layouts.
//!
//! A warp instruction of the unit (`KStmt::Mma`) spreads its operands and
//! its accumulator over the warp's 32 lanes in a fixed layout. The layouts
//! live here, once: the HIP printer loads each lane's fragments by them,
//! and the verifier reads the same maps to prove every fragment load in
//! bounds and race-free. For `m16n8k16` (NVIDIA's PTX ISA, "Matrix
//! Fragments for mma.m16n8k16 with floating point type"), with
//! `g = lane / 4` and `t = lane % 4`:
//!
//! - A (16 x 16, row-major): register `i` of 8 holds `(g + 8 ((i / 2) % 2),
//!   2 t + i % 2 + 8 (i / 4))`;
//! - B (16 x 8, column-major): register `i` of 4 holds `(2 t + i % 2 + 8 (i
//!   / 2), g)`;
//! - C and D (16 x 8): register `i` of 4 holds `(g + 8 (i / 2), 2 t + i % 2)`.
//!
//! On AMD (`MmaShape::Mfma16x16x16`: `v_mfma_f32_16x16x16f16` and its
//! bf16 form, CDNA's 64-lane wavefronts; AMD's matrix instruction
//! calculator), lane `l` holds A's `(l % 16, 4 (l / 16) + i)`, B's
//! `(4 (l / 16) + i, l % 16)` and the accumulator's `(4 (l / 16) + i, l %
//! 16)` in its register `i` of 4.
//!
//! Each map is a bijection from (lane, register) onto its tile: the tests
//! below check it over every lane and register.
//!
//! The schedule is one for both vendors, its warps laid out by
//! [`Layout`]; on AMD four wavefronts of 64 own 64 x 64 each, their
//! fragments read element by element (AMD has no `ldmatrix`). Described
//! here for NVIDIA: a block of eight warps owns a 128 x 128
//! output tile; the k loop walks 16-deep slabs of both operands in shared
//! memory, each row padded by 16 bytes. Where both operands' rows are
//! whole 16-byte runs and their buffers 16-byte aligned (decided once per
//! launch, in the kernel), the slabs come through a ring: on NVIDIA three
//! stages filled by asynchronous 16-byte copies (`cp.async`,
//! `contraction::copy_ring`), two slabs ahead of the unit, the sm_80
//! form's multi-stage pipeline; on AMD two stages, each thread moving one
//! run of each slab through registers, the runs of slab k + 1 fetched
//! before the unit works on slab k and stored into the other stage after
//! it, one barrier per slab (zeros past M, N or K). The pipeline's
//! protocol is proved: race-freedom (no stage refilled while a warp may
//! still read it; a copy's write may land any time until the wait that
//! retires it) and the ring obligation (`kir::Ring`: each iteration reads
//! the stage of its own slab and fills the stage ahead). Elsewhere each
//! slab is loaded element by element into slabs of its own (guarded,
//! zero-padded: the SIMT schedule's loader), two barriers per slab. Each
//! warp owns 64 x 32 of the tile. Per 16 of k a warp loads its four A fragments and
//! four B fragments once (`KStmt::FragmentLoad`, printed as `ldmatrix`,
//! its rows proved 16-byte aligned and inside the slab's data) and runs
//! its 4 x 4 instructions on them, each into a fresh accumulator that is
//! then added in f32 to the warp's running sums (a promotion per
//! instruction: the order `ReductionOrder::MatrixUnit { k: 16,
//! per_promotion: 1 }` whose bound the tolerance proof derives from the
//! unit's named assumption). The epilogue stores each lane's sums where
//! the accumulator layout puts them, guarded by M and N. It is chosen
//! only where the proof can hold: NVIDIA sm_80 and later or AMD CDNA3 and
//! later ([`layout`]), both operands f16 (or both bf16), and `requires` keeping the
//! summed dim at least [`MIN_K`] (below that, truncation's error exceeds
//! what a sequential sum's tolerance allows).

use super::contraction::{copy_ring, ring_pipeline, slab_loop, sums_at_least, tile_load, vector_decision, Plan, SlabLayout, Tile, VectorSlab, STAGES};
use super::lower::{node_key, Builder, Env};
use super::extent_expr;
use crate::diag::Diagnostic;
use crate::kir::*;
pub use crate::kir::Fragment;
use crate::target::Target;
use crate::tir::{Kernel, TExpr, TExprKind};
use crate::types::Dtype;

/// The shortest sum the schedule takes (see the module's documentation).
pub const MIN_K: i64 = 64;

/// Stages of the vector path's ring on NVIDIA: two slabs in flight
/// (`cp.async`) while the unit works on a third. Three fit the static 48
/// KB beside the element path's slabs (four would not). AMD has no
/// asynchronous copy into shared memory that the printer emits: there
/// the ring has `contraction::STAGES` (two) stages, filled through
/// registers.
const RING_STAGES: u32 = 3;

/// Output tile and slab depth: 128 x 128 per block, 16 of k per slab.
const BM: u32 = 128;
const BN: u32 = 128;
const BK: u32 = 16;
/// How a block's 256 threads share its tile on one vendor's unit: warps
/// (wavefronts) of `shape.lanes()`, `warps_n` of them along n, each owning
/// `wm x wn` of the tile as `wm / m x wn / n` instructions (per 16 of k:
/// one A fragment per row of instructions and one B fragment per column,
/// each loaded once).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub shape: MmaShape,
    warps_n: i64,
    wm: i64,
    wn: i64,
    /// Fragments loaded as 8-element rows (`ldmatrix`: NVIDIA only).
    rows: bool,
    /// The vector path's ring filled by asynchronous copies (`cp.async`:
    /// NVIDIA only), else through registers.
    async_copies: bool,
}

/// NVIDIA: eight warps, 2 along m by 4 along n, each 64 x 32 as 4 x 4
/// instructions of 16 x 8.
const NVIDIA: Layout = Layout { shape: MmaShape::M16N8K16, warps_n: 4, wm: 64, wn: 32, rows: true, async_copies: true };
/// AMD: four wavefronts of 64, 2 by 2, each 64 x 64 as 4 x 4 instructions
/// of 16 x 16; fragments loaded element by element (no `ldmatrix`; a
/// lane's four A elements are one 8-byte run, which the compiler merges).
const AMD: Layout = Layout { shape: MmaShape::Mfma16x16x16, warps_n: 2, wm: 64, wn: 64, rows: false, async_copies: false };

/// The unit's layout on `target`, where the schedule's bound holds there:
/// NVIDIA sm_80 and later; AMD where the MFMA keeps subnormal f16 and bf16
/// operands (`Target::mfma_keeps_subnormals`: not CDNA2, whose unit
/// flushes them, an error no tolerance relative to the operands'
/// magnitudes absorbs).
pub fn layout(target: &Target) -> Option<Layout> {
    match target {
        Target::Cuda { sm } if *sm >= 80 => Some(NVIDIA),
        Target::Hip { .. } if target.mfma_keeps_subnormals() => Some(AMD),
        _ => None,
    }
}
/// Shared slabs, each row padded by 8 elements (16 bytes) so that the 8
/// rows of an `ldmatrix` (16 bytes each) fall on distinct banks: A with k
/// contiguous (rows of 16 padded to 24: rows 48 bytes apart), B k-major
/// (rows of 128 padded to 136: 272 bytes apart). The padding is a
/// [`Footprint`]: the verifier proves no access touches it, so a fragment
/// read shifted into it is refuted (it would be in bounds).
const A_STRIDE: u32 = BK + 8;
const B_STRIDE: u32 = BN + 8;

/// `(row, column)` of the element that `lane`'s register `reg` holds in
/// `which` operand of `shape` (terms over the lane and the register, so
/// that a symbolic lane gives the verifier its terms and constants give
/// the printer its indices).
pub fn element(shape: MmaShape, which: Fragment, lane: &IExpr, reg: &IExpr) -> (IExpr, IExpr) {
    if shape == MmaShape::Mfma16x16x16 {
        // Lane l holds row (or column) l % 16 and, along k (or m for the
        // accumulator), the run of four from 4 (l / 16).
        let across = lane.clone().rem(IExpr::c(16));
        let along = lane.clone().div(IExpr::c(16)).mul(IExpr::c(4)).add(reg.clone());
        return match which {
            Fragment::A => (across, along),
            Fragment::B | Fragment::Acc => (along, across),
        };
    }
    let g = lane.clone().div(IExpr::c(4));
    let t = lane.clone().rem(IExpr::c(4));
    let low = reg.clone().rem(IExpr::c(2));
    let pair_col = t.mul(IExpr::c(2)).add(low);
    match which {
        Fragment::A => {
            let row = g.add(reg.clone().div(IExpr::c(2)).rem(IExpr::c(2)).mul(IExpr::c(8)));
            (row, pair_col.add(reg.clone().div(IExpr::c(4)).mul(IExpr::c(8))))
        }
        Fragment::B => (pair_col.add(reg.clone().div(IExpr::c(2)).mul(IExpr::c(8))), g),
        Fragment::Acc => (g.add(reg.clone().div(IExpr::c(2)).mul(IExpr::c(8))), pair_col),
    }
}

/// The inverse of the accumulator's map: the lane and register that hold
/// element `(r, c)` of one instruction's output tile (`r`, `c` within
/// it). The epilogue's coverage witness; the tests check it against
/// [`element`].
pub fn acc_owner(shape: MmaShape, r: &IExpr, c: &IExpr) -> (IExpr, IExpr) {
    match shape {
        MmaShape::M16N8K16 => {
            let lane = r.clone().rem(IExpr::c(8)).mul(IExpr::c(4)).add(c.clone().div(IExpr::c(2)));
            (lane, r.clone().div(IExpr::c(8)).mul(IExpr::c(2)).add(c.clone().rem(IExpr::c(2))))
        }
        MmaShape::Mfma16x16x16 => (c.clone().add(r.clone().div(IExpr::c(4)).mul(IExpr::c(16))), r.clone().rem(IExpr::c(4))),
    }
}

/// The registers per lane of `which` operand.
pub fn registers(shape: MmaShape, which: Fragment) -> u32 {
    let (a, b, acc) = shape.regs();
    match which {
        Fragment::A => a,
        Fragment::B => b,
        Fragment::Acc => acc,
    }
}

/// Is a fragment loaded as 8-element rows (`ldmatrix`)? Asked for, and
/// possible: the rows must run along the slab's contiguous axis. The
/// printer and the verifier both ask here.
pub fn loads_rows(rows: bool, src: &MmaOperand) -> bool {
    rows && src.col_stride == 1
}

/// `(rows, columns)` of `which` operand's tile.
pub fn tile(shape: MmaShape, which: Fragment) -> (i64, i64) {
    let (m, n, k) = shape.mnk();
    match which {
        Fragment::A => (m, k),
        Fragment::B => (k, n),
        Fragment::Acc => (m, n),
    }
}

/// The dtype both operands are read in, when each is a plain f16 or bf16
/// value widened (the unit multiplies those exactly; the tolerance proof
/// asks the same of a sum on the unit).
pub(crate) fn operand_dtype(a: &TExpr, b: &TExpr) -> Option<Dtype> {
    let narrow = |e: &TExpr| match &e.kind {
        TExprKind::Cast(inner) if matches!(inner.ty, Dtype::F16 | Dtype::Bf16) => Some(inner.ty),
        _ => None,
    };
    match (narrow(a), narrow(b)) {
        (Some(x), Some(y)) if x == y => Some(x),
        _ => None,
    }
}

/// Does the tensor-core schedule fit this contraction on this target?
pub fn admits(k: &Kernel, target: &Target, p: &Plan) -> bool {
    layout(target).is_some() && sums_at_least(k, p, MIN_K) && p.acc_ty == Dtype::F32 && operand_dtype(p.a, p.b).is_some()
}

/// What the matrix-unit steps of a slab work on: the two slabs, the warp's
/// place in the tile, the running sums, the operands' dtype.
struct Slabs {
    a: SharedId,
    b: SharedId,
    /// Where the slab starts in each array (the stage of a ring).
    a_at: IExpr,
    b_at: IExpr,
    wm: IExpr,
    wn: IExpr,
    acc: LocalId,
    ty: Dtype,
    unit: Layout,
}

/// The matrix unit on the slab in shared memory: per 16 of k, the warp's A
/// fragments (one per row of instructions) and B fragments (one per
/// column), then every instruction of the warp's share (`q`: row
/// `q / tiles_n`, column `q % tiles_n`), each into a fresh accumulator
/// promoted to the running sums `acc[q * 4 + r]`.
fn compute_slab(b: &mut Builder, s: &Slabs, kvar: crate::tir::VarId) -> Vec<KStmt> {
    let Layout { shape, wm: warp_m, wn: warp_n, rows, .. } = s.unit;
    let (in_m, in_n, in_k) = shape.mnk();
    let (tiles_m, tiles_n) = (warp_m / in_m, warp_n / in_n);
    let (a_regs, b_regs, acc_regs) = (registers(shape, Fragment::A) as i64, registers(shape, Fragment::B) as i64, registers(shape, Fragment::Acc) as i64);
    let (kq_v, fi_v, fj_v, q_v, ti_v, tj_v, r_v) = (b.ivar("kq"), b.ivar("fi"), b.ivar("fj"), b.ivar("q"), b.ivar("ti"), b.ivar("tj"), b.ivar("r"));
    let (kq, q, ti, tj, r) = (IExpr::Var(kq_v), IExpr::Var(q_v), IExpr::Var(ti_v), IExpr::Var(tj_v), IExpr::Var(r_v));
    let (fi, fj) = (IExpr::Var(fi_v), IExpr::Var(fj_v));
    let (a_frag, b_frag, part) = (b.local("a_frag", s.ty), b.local("b_frag", s.ty), b.local("part", Dtype::F32));
    let kk = kq.clone().mul(IExpr::c(in_k));
    let (sa, sb) = (A_STRIDE as i64, B_STRIDE as i64);
    let a_src = MmaOperand { tile: s.a, base: s.a_at.clone().add(s.wm.clone().mul(IExpr::c(warp_m)).add(fi.clone().mul(IExpr::c(in_m))).mul(IExpr::c(sa)).add(kk.clone())), row_stride: sa, col_stride: 1 };
    let b_src = MmaOperand { tile: s.b, base: s.b_at.clone().add(kk.mul(IExpr::c(sb))).add(s.wn.clone().mul(IExpr::c(warp_n))).add(fj.clone().mul(IExpr::c(in_n))), row_stride: sb, col_stride: 1 };
    let acc = s.acc;
    let running = q.clone().mul(IExpr::c(acc_regs)).add(r.clone());
    let promote = KStmt::ArraySet {
        arr: acc,
        index: running.clone(),
        value: VExpr::new(
            VKind::Binary(crate::syntax::ast::BinOp::Add, Box::new(VExpr::new(VKind::ArrayGet { arr: acc, index: running }, Dtype::F32)), Box::new(VExpr::new(VKind::ArrayGet { arr: part, index: r }, Dtype::F32))),
            Dtype::F32,
        ),
    };
    let instruction = vec![
        KStmt::LetInt { var: ti_v, value: q.clone().div(IExpr::c(tiles_n)) },
        KStmt::LetInt { var: tj_v, value: q.rem(IExpr::c(tiles_n)) },
        KStmt::DeclArray { arr: part, len: acc_regs as u32, init: Some(VExpr::zero(Dtype::F32)) },
        KStmt::Mma { shape, a: a_frag, a_at: ti.mul(IExpr::c(a_regs)), b: b_frag, b_at: tj.mul(IExpr::c(b_regs)), acc: part, acc_at: IExpr::c(0) },
        KStmt::unrolled(r_v, acc_regs as u32, vec![promote]),
    ];
    let step = vec![
        KStmt::DeclArray { arr: a_frag, len: (tiles_m * a_regs) as u32, init: None },
        KStmt::DeclArray { arr: b_frag, len: (tiles_n * b_regs) as u32, init: None },
        KStmt::unrolled(fi_v, tiles_m as u32, vec![KStmt::FragmentLoad { shape, which: Fragment::A, src: a_src, dst: a_frag, dst_at: fi.mul(IExpr::c(a_regs)), rows }]),
        KStmt::unrolled(fj_v, tiles_n as u32, vec![KStmt::FragmentLoad { shape, which: Fragment::B, src: b_src, dst: b_frag, dst_at: fj.mul(IExpr::c(b_regs)), rows }]),
        KStmt::unrolled(q_v, (tiles_m * tiles_n) as u32, instruction),
    ];
    let per_slab = (BK as i64) / in_k;
    let kname = b.k.vars[kvar].name.clone();
    b.ir.reduction_loops.push(ReductionLoop { var: kq_v, extent: IExpr::c(per_slab), cooperative: false, granule: 1, name: format!("`{}` within a slab", kname), span: b.k.vars[kvar].span, visits: None });
    vec![KStmt::unrolled(kq_v, per_slab as u32, step)]
}

/// The vector path's ring: filled by asynchronous copies or through
/// registers.
enum Ahead {
    Copies(super::contraction::CopyRing),
    Registers(super::contraction::RingPipeline),
}

impl Ahead {
    /// Operand `which`'s fetches as cases of the element loader's coverage
    /// where vectors are `on`.
    fn cover(&self, b: &mut Builder, v: &VectorSlab, which: usize, on: Cond) {
        match self {
            Ahead::Copies(r) => r.cover(b, v, which, on),
            Ahead::Registers(r) => r.cover(b, v, which, on),
        }
    }

    fn stmts(self) -> Vec<KStmt> {
        match self {
            Ahead::Copies(r) => r.stmts,
            Ahead::Registers(r) => r.stmts,
        }
    }
}

/// The schedule (see the module's documentation); the caller checked
/// [`admits`].
pub fn schedule(k: &Kernel, target: &Target, p: Plan) -> Result<KernelIr, Diagnostic> {
    let unit = layout(target).expect("admits() checked the target");
    let Layout { shape, warps_n, wm: warp_m, wn: warp_n, .. } = unit;
    let lanes = shape.lanes() as i64;
    let (in_m, in_n, in_k) = shape.mnk();
    let ty = operand_dtype(p.a, p.b).expect("admits() checked the operands");
    // The SIMT loader's view of the tile: 256 threads.
    let t = Tile { bm: BM, bn: BN, bk: BK, tm: 8, tn: 8, producer: 0, group: 1, kgroups: 1 };
    let mut b = Builder::new(k, target, Schedule::TensorCore { bm: BM, bn: BN, bk: BK, shape }, t.threads());
    b.ir.reduction_order.insert(p.kvar, ReductionOrder::MatrixUnit { k: in_k as u32, per_promotion: 1 });
    // Two blocks per multiprocessor: at 132 registers a thread only one
    // fit, and the other block is what hides a block's barriers and
    // fragment loads (measured with Nsight Compute: 12.5% occupancy, 44%
    // of stalls on shared-memory reads).
    b.ir.min_blocks = 2;
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let mext = extent_expr(k.vars[mvar].extent);
    let next = extent_expr(k.vars[nvar].extent);
    let kext = extent_expr(k.vars[p.kvar].extent);
    // The pipelined path's ring: two stages of each slab, one after the
    // other in one array (it fills one while the matrix unit reads the
    // other). The element path has slabs of its own: the ring obligation
    // covers every access of a ring's array, and the other path's would
    // not obey it (nor would a write of it one slab too far be refuted,
    // landing in the second stage).
    // Only where both operands can take it (a kernel that cannot declares
    // no ring and decides nothing: NVRTC warns of what it never uses).
    let (a_layout, b_layout) = (SlabLayout::KContiguous { stride: A_STRIDE }, SlabLayout::KMajor { stride: B_STRIDE });
    let fits = VectorSlab::fits(&b, t, a_layout, p.a, ty, (mvar, p.kvar), BM) && VectorSlab::fits(&b, t, b_layout, p.b, ty, (nvar, p.kvar), BN);
    let stages = if unit.async_copies { RING_STAGES } else { STAGES };
    let rings = fits.then(|| (b.shared_padded("a_ring", ty, stages * BM, BK, A_STRIDE), b.shared_padded("b_ring", ty, stages * BK, BN, B_STRIDE)));
    let (a_stage, b_stage) = ((BM * A_STRIDE) as i64, (BK * B_STRIDE) as i64);
    let (a_el, b_el) = (b.shared_padded("a_slab", ty, BM, BK, A_STRIDE), b.shared_padded("b_slab", ty, BK, BN, B_STRIDE));
    let (m0_v, n0_v, wm_v, wn_v) = (b.ivar("m0"), b.ivar("n0"), b.ivar("wm"), b.ivar("wn"));
    let (m0, n0, wm, wn) = (IExpr::Var(m0_v), IExpr::Var(n0_v), IExpr::Var(wm_v), IExpr::Var(wn_v));
    let warp = IExpr::Tid.div(IExpr::c(lanes));
    let (m0_e, n0_e) = t.origin();
    let mut body = vec![
        KStmt::LetInt { var: m0_v, value: m0_e },
        KStmt::LetInt { var: n0_v, value: n0_e },
        KStmt::LetInt { var: wm_v, value: warp.clone().div(IExpr::c(warps_n)) },
        KStmt::LetInt { var: wn_v, value: warp.rem(IExpr::c(warps_n)) },
    ];
    // Vector loads where every operand's rows are whole 16-byte runs and
    // its buffer 16-byte aligned (decided once, the same for every thread).
    let on = rings.map(|_| Cond::Eq(IExpr::Var(vector_decision(&mut b, &p, (mvar, nvar), &mut body)), IExpr::c(1)));
    let (tiles_m, tiles_n) = (warp_m / in_m, warp_n / in_n);
    let acc_regs = registers(shape, Fragment::Acc) as i64;
    let acc = b.local("acc", Dtype::F32);
    body.push(KStmt::DeclArray { arr: acc, len: (tiles_m * tiles_n * acc_regs) as u32, init: Some(VExpr::zero(Dtype::F32)) });
    let slabs = |a: SharedId, b: SharedId, stage: IExpr| Slabs { a, b, a_at: stage.clone().mul(IExpr::c(a_stage)), b_at: stage.mul(IExpr::c(b_stage)), wm: wm.clone(), wn: wn.clone(), acc, ty, unit };
    // The vector path. NVIDIA: a ring of `RING_STAGES` stages filled by
    // asynchronous copies (`copy_ring`), two slabs ahead of the unit: each
    // iteration waits for its own slab's copies, meets the others at one
    // barrier, issues the copies of slab k0 + 2 BK into the stage the last
    // iteration read, then runs the unit on stage (k0 / BK) % 3 while
    // they fly. AMD: two stages through registers (`ring_pipeline`): the
    // unit works on stage (k0 / BK) % 2, then the runs of slab k0 + BK
    // fetched before it are stored into the other.
    let mut pipelined = Vec::new();
    let vector_path = match rings {
        Some((a_sh, b_sh)) => {
            let va = VectorSlab::new(&mut b, t, a_layout, p.a, a_sh, (mvar, p.kvar), BM, (&m0, &mext, &kext), &mut pipelined).expect("fits() said it does");
            let vb = VectorSlab::new(&mut b, t, b_layout, p.b, b_sh, (nvar, p.kvar), BN, (&n0, &next, &kext), &mut pipelined).expect("fits() said it does");
            let ring = if unit.async_copies {
                Ahead::Copies(copy_ring(&mut b, (&va, &vb), (a_stage, b_stage), stages, p.kvar, false, None, pipelined, |b, stage| (Vec::new(), compute_slab(b, &slabs(a_sh, b_sh, stage), p.kvar))))
            } else {
                Ahead::Registers(ring_pipeline(&mut b, (&va, &vb), (a_stage, b_stage), p.kvar, false, pipelined, |b, stage, stores| {
                    let mut work = compute_slab(b, &slabs(a_sh, b_sh, stage), p.kvar);
                    work.extend(stores);
                    work
                }))
            };
            Some((va, vb, ring))
        }
        None => None,
    };
    // The element path (and the only one where runs do not fit): each
    // slab loaded element by element with guards, then the matrix unit.
    let k0_v = b.ivar("k0");
    let k0 = IExpr::Var(k0_v);
    let mut kbody = Vec::new();
    // Slabs: A as a_tile[m * A_STRIDE + kk], B as b_tile[kk * B_STRIDE + n];
    // each operand's coverage gets the vector path's cases beside its own.
    tile_load(&mut b, t, SlabLayout::KContiguous { stride: A_STRIDE }, p.a, a_el, mvar, p.kvar, BM, p.a_k_contiguous, &m0, &k0, &mext, &kext, &mut kbody)?;
    if let (Some((va, _, ring)), Some(on)) = (&vector_path, &on) {
        ring.cover(&mut b, va, 0, on.clone());
    }
    tile_load(&mut b, t, SlabLayout::KMajor { stride: B_STRIDE }, p.b, b_el, nvar, p.kvar, BN, p.b_k_contiguous, &n0, &k0, &next, &kext, &mut kbody)?;
    if let (Some((_, vb, ring)), Some(on)) = (&vector_path, &on) {
        ring.cover(&mut b, vb, 1, on.clone());
    }
    kbody.push(KStmt::Barrier);
    kbody.extend(compute_slab(&mut b, &slabs(a_el, b_el, IExpr::c(0)), p.kvar));
    kbody.push(KStmt::Barrier);
    let element_path = vec![slab_loop(&mut b, k0_v, p.kvar, BK, kbody)];
    match (vector_path, on) {
        (Some((.., ring)), Some(on)) => body.push(KStmt::If { cond: on, then: ring.stmts(), els: element_path }),
        _ => body.extend(element_path),
    }
    // Epilogue: the statement with the sum replaced by the lane's sums.
    let (ei_v, ej_v, er_v) = (b.ivar("ti"), b.ivar("tj"), b.ivar("r"));
    let gm = b.ivar(&k.vars[mvar].name.clone());
    let gn = b.ivar(&k.vars[nvar].name.clone());
    let mut env = Env::default();
    env.vars.insert(mvar, IExpr::Var(gm));
    env.vars.insert(nvar, IExpr::Var(gn));
    let here = IExpr::Var(ei_v).mul(IExpr::c(tiles_n)).add(IExpr::Var(ej_v)).mul(IExpr::c(acc_regs)).add(IExpr::Var(er_v));
    env.reduced.insert(node_key(p.reduce), VExpr::new(VKind::ArrayGet { arr: acc, index: here }, Dtype::F32).cast(p.reduce.ty));
    let mut store = Vec::new();
    let value = b.lower(&s.value, &mut env, &mut store)?;
    let access = b.store(s, value, &env, &mut store);
    let lane = IExpr::Tid.rem(IExpr::c(lanes));
    let (row, col) = element(shape, Fragment::Acc, &lane, &IExpr::Var(er_v));
    // Output element (m, n): its block, warp, instruction tile, lane and
    // register, from the layout's inverse (see the tests).
    let (xm, xn) = (b.ivar("elem_m"), b.ivar("elem_n"));
    let (m, n) = (IExpr::Var(xm), IExpr::Var(xn));
    let warp_of = m.clone().rem(IExpr::c(BM as i64)).div(IExpr::c(warp_m)).mul(IExpr::c(warps_n)).add(n.clone().rem(IExpr::c(BN as i64)).div(IExpr::c(warp_n)));
    let (lane_of, reg_of) = acc_owner(shape, &m.clone().rem(IExpr::c(in_m)), &n.clone().rem(IExpr::c(in_n)));
    let mut assign = t.block_of(m.clone().div(IExpr::c(BM as i64)), n.clone().div(IExpr::c(BN as i64)));
    assign.extend([
        (Witness::Tid, warp_of.mul(IExpr::c(lanes)).add(lane_of)),
        (Witness::Var(ei_v), m.clone().rem(IExpr::c(warp_m)).div(IExpr::c(in_m))),
        (Witness::Var(ej_v), n.clone().rem(IExpr::c(warp_n)).div(IExpr::c(in_n))),
        (Witness::Var(er_v), reg_of),
    ]);
    b.cover_axes(s.target, vec![xm, xn], vec![CoverCase { when: Cond::True, access, assign }]);
    let guarded = vec![
        KStmt::LetInt { var: gm, value: m0.add(wm.mul(IExpr::c(warp_m))).add(IExpr::Var(ei_v).mul(IExpr::c(in_m))).add(row) },
        KStmt::LetInt { var: gn, value: n0.add(wn.mul(IExpr::c(warp_n))).add(IExpr::Var(ej_v).mul(IExpr::c(in_n))).add(col) },
        KStmt::If { cond: IExpr::Var(gm).lt(mext.clone()).and(IExpr::Var(gn).lt(next.clone())), then: store, els: vec![] },
    ];
    body.push(KStmt::unrolled(ei_v, tiles_m as u32, vec![KStmt::unrolled(ej_v, tiles_n as u32, vec![KStmt::unrolled(er_v, acc_regs as u32, guarded)])]));
    b.ir.grid = t.grid(&mext, &next);
    b.ir.body = body;
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant term's value (the maps of constant lanes and registers
    /// fold to constants).
    fn constant(e: &IExpr) -> Option<i64> {
        match e {
            IExpr::Const(v) => Some(*v),
            _ => None,
        }
    }

    const SHAPES: [MmaShape; 2] = [MmaShape::M16N8K16, MmaShape::Mfma16x16x16];

    #[test]
    fn every_fragment_map_is_a_bijection_onto_its_tile() {
        for (shape, which) in SHAPES.into_iter().flat_map(|s| [Fragment::A, Fragment::B, Fragment::Acc].map(|w| (s, w))) {
            let (rows, cols) = tile(shape, which);
            let mut owner = vec![None; (rows * cols) as usize];
            for lane in 0..shape.lanes() as i64 {
                for reg in 0..registers(shape, which) as i64 {
                    let (r, c) = element(shape, which, &IExpr::c(lane), &IExpr::c(reg));
                    let (r, c) = (constant(&r).expect("constant"), constant(&c).expect("constant"));
                    assert!((0..rows).contains(&r) && (0..cols).contains(&c), "{:?} lane {} reg {}: ({}, {})", which, lane, reg, r, c);
                    let slot = &mut owner[(r * cols + c) as usize];
                    assert!(slot.is_none(), "{:?}: ({}, {}) held by {:?} and by lane {} reg {}", which, r, c, slot, lane, reg);
                    *slot = Some((lane, reg));
                }
            }
            assert!(owner.iter().all(Option::is_some), "{:?} {:?}: an element no lane holds", shape, which);
        }
    }

    #[test]
    fn the_accumulators_owner_inverts_its_map() {
        for shape in SHAPES {
            for lane in 0..shape.lanes() as i64 {
                for reg in 0..registers(shape, Fragment::Acc) as i64 {
                    let (r, c) = element(shape, Fragment::Acc, &IExpr::c(lane), &IExpr::c(reg));
                    let (l, g) = acc_owner(shape, &r, &c);
                    assert_eq!((constant(&l), constant(&g)), (Some(lane), Some(reg)), "{:?} lane {} reg {}", shape, lane, reg);
                }
            }
        }
    }

    #[test]
    fn the_amd_unit_holds_runs_of_four_along_k_and_along_m() {
        // v_mfma_f32_16x16x16f16 (AMD's matrix instruction calculator):
        // lane l holds A[l % 16][4 (l / 16) + i], B[4 (l / 16) + i][l % 16]
        // and D[4 (l / 16) + i][l % 16].
        let shape = MmaShape::Mfma16x16x16;
        let at = |which, lane: i64, reg: i64| {
            let (r, c) = element(shape, which, &IExpr::c(lane), &IExpr::c(reg));
            (constant(&r).unwrap(), constant(&c).unwrap())
        };
        assert_eq!(at(Fragment::A, 37, 2), (5, 10));
        assert_eq!(at(Fragment::B, 37, 2), (10, 5));
        assert_eq!(at(Fragment::Acc, 63, 3), (15, 15));
        assert_eq!(at(Fragment::Acc, 16, 0), (4, 0));
    }

    #[test]
    fn registers_pair_along_the_contiguous_axis() {
        // Registers 2j and 2j + 1 are neighbours along k for A and B (so
        // that a lane packs them into one 32-bit register), and along n
        // for the accumulator.
        let shape = MmaShape::M16N8K16;
        for lane in 0..32 {
            for (which, along_rows) in [(Fragment::A, false), (Fragment::B, true), (Fragment::Acc, false)] {
                for j in 0..registers(shape, which) as i64 / 2 {
                    let at = |reg: i64| {
                        let (r, c) = element(shape, which, &IExpr::c(lane), &IExpr::c(reg));
                        (constant(&r).unwrap(), constant(&c).unwrap())
                    };
                    let ((r0, c0), (r1, c1)) = (at(2 * j), at(2 * j + 1));
                    if along_rows {
                        assert_eq!((r1, c1), (r0 + 1, c0), "{:?} lane {} pair {}", which, lane, j);
                    } else {
                        assert_eq!((r1, c1), (r0, c0 + 1), "{:?} lane {} pair {}", which, lane, j);
                    }
                }
            }
        }
    }
}
