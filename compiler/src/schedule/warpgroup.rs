//! Contractions on the warpgroup unit (issue 19): NVIDIA `wgmma`, sm_90a.
//!
//! A block of two warpgroups (256 threads) owns a 128 x 128 output tile;
//! warpgroup `g` owns its rows `64 g ..`, all 128 columns, as one
//! accumulator of 64 x 128 (64 f32 registers a thread, laid out as
//! [`acc_element`] says). The k loop walks 64-deep slabs of both operands
//! in shared memory, stored as the unit's 8 x 8 core matrices without
//! swizzling (`SlabLayout::Cores`, `kir::WgOperand`), each operand as it
//! lies in memory: k along a core matrix's rows where k is its contiguous
//! axis (A of `x w`, B of `gy w^T`), else m or n along them (B of `x w`, A
//! of `x^T gy`; the instruction's transpose bits), so no layout needs a
//! transpose. Per slab each warpgroup issues four
//! instructions of 64 x 128 x 16, the unit reading both operands straight
//! from shared memory (no fragments in registers), two at a time into a
//! fresh accumulator each (all four back to back, one wait), the two then
//! added in order in f32 to the running sums: a promotion per two
//! instructions (`ReductionOrder::MatrixUnit { k: 16,
//! per_promotion: 2 }`, whose bound the tolerance proof derives from the
//! unit's named assumption; it holds only for sums of at least
//! [`MIN_K`]). Where every sum is at least [`MIN_K_WIDE`] long (the
//! kernel's `requires`, or the guard of its `_wg4` variant) all four go
//! into one fresh accumulator, promoted once a slab (`per_promotion: 4`):
//! half the adds and 64 registers fewer.
//!
//! Where both operands' rows are whole 16-byte runs and their buffers
//! 16-byte aligned (decided once per launch, in the kernel), the slabs
//! come through a ring of four stages filled by asynchronous 16-byte
//! copies (`cp.async`, `contraction::copy_ring`), three slabs ahead of the
//! unit (zeros past M, N or K); the ring (128 KB) and the element path's
//! slabs live in dynamic shared memory. Elsewhere each slab is loaded
//! element by element into slabs of its own (guarded, zero-padded), two
//! barriers per slab.
//!
//! The unit and the copies are asynchronous, so beside the ring and
//! race-freedom the verifier proves the protocol (`verify::protocol`):
//! every instruction is waited for before the next barrier, nothing else
//! touches its accumulator while it may run, a `wgmma.fence` lies between
//! ordinary writes of an accumulator and the instruction that reads it,
//! every shared store the unit reads (a copy: once its wait retired it)
//! is followed by a proxy fence before the barrier that publishes it, and
//! no copy is in flight at the end. Race-freedom pairs each copy with
//! every access in its window, from its issue to the barrier after the
//! wait that retires it, as the loop's commit, wait and barrier place it.

use super::contraction::{copy_ring, slab_loop, sums_at_least, tile_load, vector_decision, CopyRing, Plan, SlabLayout, Tile, VectorSlab};
use super::producer_ring::{producer_ring, BulkOperand, ProducerRing};
use super::extent_expr;
use super::lower::{node_key, Builder, Env};
use super::tensor_core::operand_dtype;
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::target::Target;
use crate::tir::Kernel;
use crate::types::Dtype;

/// The shortest sum the schedule takes: with two instructions per
/// promotion, the unit's truncation error exceeds a sequential sum's
/// tolerance below this (contracts::fp::matrix_unit::heights(K, 16, 2)
/// is 66 at K = 64, 68 at 128).
pub const MIN_K: i64 = 128;
/// The shortest sum promoted once per slab (all four instructions chained
/// through the unit, `WIDE_PROMOTION`): the height is 128 + K / 64, within
/// a sequential sum's K from K = 131 on; 192 is three slabs. Half the
/// promotion's adds and one fresh accumulator (64 registers) instead of
/// two: measured on the H100 (bench/RESULTS.md, 2026-11-24), gemm_f16
/// 4096^3 308 -> 336 TFLOP/s.
pub const MIN_K_WIDE: i64 = 192;

const BN: u32 = 128;
const BK: u32 = 64;
/// Instructions 64 x N x 16; a warpgroup's rows.
const N: u32 = 128;
const WG_ROWS: i64 = 64;
/// Instructions per promotion into the running sums: two for sums from
/// `MIN_K` on, a slab's four for sums from `MIN_K_WIDE` on.
const PER_PROMOTION: i64 = 2;
const WIDE_PROMOTION: i64 = 4;
/// Threads beside the two warpgroups that only issue the ring's copies
/// (0: none; the warpgroups copy between their instructions). A producer
/// warp (32) is scheduled and proved (`Tile::producer`, the looped copies
/// `contraction::Runs::Looped`, the verifier's warpgroup-uniform
/// conditions and accumulator owners) but left off: the hand-edited
/// ablation (bench/RESULTS.md, 2026-11-24) ran 32% faster with no copies
/// in the loop, yet a block of 288 threads is 9 warps, 3 on some SM
/// sub-partition, so ptxas caps a thread at 168 registers and the
/// warpgroups spill (NVRTC sm_90a: 1112 bytes of spill stores for
/// gemm_f16, 412 for its `_wg4` form; 256 threads allow 255). The form
/// that pays is [`SPECIALISED`]: a producer warpgroup with `setmaxnreg`,
/// in a loop of its own, synchronised with the warpgroups by mbarriers.
const PRODUCER: u32 = 0;
/// Stages of the copy ring: three slabs in flight while the unit works on
/// a fourth (4 x 32 KB of shared memory).
const RING_STAGES: u32 = 4;
/// Core matrices: 64 elements (8 rows of 16 bytes); along k they follow
/// each other (`LBO`), along m or n a row of them is `BK / 8` apart
/// (`SBO`).
const LBO: u32 = 64;
const SBO: u32 = BK * 8;
/// The ring of an operand whose contiguous axis is m or n (B as it lies
/// in memory, A of `x^T w`): rows of core matrices `SBO_PADDED` apart, 16
/// bytes more than their data, so that the 16-byte runs of one row of
/// the operand which neighbouring threads copy (a coalesced read:
/// consecutive m or n) land on distinct banks (with `SBO` all would share
/// the same four).
const SBO_PADDED: u32 = SBO + 8;
/// The ring of an operand whose contiguous axis is k (A as it lies in
/// memory, B of `gy w^T`): core matrices along k `LBO_PADDED` apart, 16
/// bytes more than their data, so that the eight 16-byte runs of one
/// 128-byte row of the operand (eight core matrices along k) land on
/// distinct banks; with `LBO` all eight share the same four (measured on
/// the H100: 8 times the shared-memory wavefronts of the copies).
const LBO_PADDED: u32 = LBO + 8;

/// An operand's slab as the unit reads it: its shared array, where slab
/// `at` begins, and the layout (k along a core matrix's rows where k is
/// the operand's contiguous axis, so the instruction reads it as it lies;
/// else along m or n, the instruction's transpose bit).
struct UnitSlab {
    tile: SharedId,
    at: IExpr,
    layout: SlabLayout,
}

impl UnitSlab {
    /// The unit's view of the slab's 16 k of instruction `i` (they start
    /// two core matrices, 2 `lbo`, after the previous instruction's); for
    /// A, the rows of warpgroup `wg` (`form.wg_rows()` a warpgroup), its
    /// instruction's `half` of them.
    fn operand(&self, rows: Option<(&IExpr, Form, i64)>, i: i64) -> WgOperand {
        if let SlabLayout::Swizzled { k_inner, bk } = self.layout {
            return self.swizzled_operand(rows, i, k_inner, bk as i64);
        }
        let SlabLayout::Cores { lbo, sbo, k_inner } = self.layout else { unreachable!("the unit reads core-matrix or swizzled slabs") };
        let step = i * 2 * lbo as i64;
        let rows = match rows {
            Some((wg, form, half)) => {
                let first = self.at.clone().add(wg.clone().mul(IExpr::c(form.wg_rows() / 8 * sbo as i64)));
                if half > 0 {
                    first.add(IExpr::c(half * WG_ROWS / 8 * sbo as i64))
                } else {
                    first
                }
            }
            None => self.at.clone(),
        };
        WgOperand { tile: self.tile, base: rows.add(IExpr::c(step)), lbo: lbo as i64, sbo: sbo as i64, k_inner, swizzle: false, k_at: 0 }
    }

    /// `op` moved to the operand's row `first` (a multiple of 64: a
    /// whole swizzle atom along m or n) of a swizzled slab: 64 rows of 64
    /// elements further where k is the contiguous axis, the box of 64
    /// holding it otherwise.
    fn rows_from(&self, op: WgOperand, first: i64) -> WgOperand {
        let SlabLayout::Swizzled { k_inner, .. } = self.layout else { unreachable!("quarters of the tile read swizzled slabs") };
        assert_eq!(first % SWIZZLE_ROW, 0, "a whole swizzle atom");
        let shift = if k_inner { first * SWIZZLE_ROW } else { first / SWIZZLE_ROW * op.lbo };
        WgOperand { base: op.base.clone().add(IExpr::c(shift)), ..op }
    }

    /// [`operand`](Self::operand) of a slab under the 128-byte swizzle
    /// (`SlabLayout::Swizzled`): K-major, the rows' start (64 elements a
    /// row, groups of eight rows 1024 bytes apart) with the instruction's
    /// 16 k at `16 i` into each row; MN-major, the box of 64 rows that
    /// holds the first row (64 x `bk` elements a box, `lbo` apart) and the
    /// instruction's 16 k rows (1024 bytes a group of eight, `sbo`).
    fn swizzled_operand(&self, rows: Option<(&IExpr, Form, i64)>, i: i64, k_inner: bool, bk: i64) -> WgOperand {
        let row = SWIZZLE_ROW;
        let group = 8 * row;
        // The operand's first row (m of A) within the slab, times `scale`.
        let first = |scale: i64| match rows {
            Some((wg, form, half)) => {
                let at = self.at.clone().add(wg.clone().mul(IExpr::c(form.wg_rows() * scale)));
                if half > 0 {
                    at.add(IExpr::c(half * WG_ROWS * scale))
                } else {
                    at
                }
            }
            None => self.at.clone(),
        };
        if k_inner {
            WgOperand { tile: self.tile, base: first(row), lbo: 8, sbo: group, k_inner, swizzle: true, k_at: i * 16 }
        } else {
            // Rows are boxes of 64: the first row's box.
            let base = first(bk).add(IExpr::c(i * 16 * row));
            WgOperand { tile: self.tile, base, lbo: row * bk, sbo: group, k_inner, swizzle: true, k_at: 0 }
        }
    }
}

/// An operand's ring of `RING_STAGES` slabs, `width` wide along m or n:
/// its core matrices' orientation follows the operand's contiguous axis,
/// and, where `padded` asks for it, padded so that the copies of one
/// 128-byte line of the operand land on distinct banks: where k is the
/// contiguous axis, core matrices along k `LBO_PADDED` apart (a line is
/// one row of eight of them), else rows of core matrices `SBO_PADDED`
/// apart. Returns the shared array, its layout and a stage's length in
/// elements. A not k-contiguous (`x^T` of `x^T gy`) is left unpadded and
/// filled in position order (`SlabLayout::in_position_order`: a quarter
/// warp's copies on eight bank groups): with the warpgroup's row offset
/// beside a padding the race queries of its ring took 276 s of solver
/// time (25 s unpadded); B's have no such offset.
fn ring(b: &mut Builder, name: &str, ty: Dtype, k_contiguous: bool, width: u32, padded: bool, stages: u32) -> (SharedId, SlabLayout, i64) {
    let (lbo, sbo, tile) = match (padded, k_contiguous) {
        (false, _) => (LBO, SBO, b.shared(name, ty, stages * width * BK)),
        // Each core matrix padded.
        (true, true) => (LBO_PADDED, BK / 8 * LBO_PADDED, b.shared_padded(name, ty, stages * width / 8 * (BK / 8), LBO, LBO_PADDED)),
        // Each row of core matrices padded.
        (true, false) => (LBO, SBO_PADDED, b.shared_padded(name, ty, stages * width / 8, SBO, SBO_PADDED)),
    };
    (tile, SlabLayout::Cores { lbo, sbo, k_inner: k_contiguous }, (width / 8 * sbo) as i64)
}

/// An operand's ring of `stages` slabs, `width` wide along m or n, as
/// bulk tensor copies fill it: unpadded rows under the 128-byte swizzle
/// (`SlabLayout::Swizzled`), the array 1024-byte aligned.
fn swizzled_ring(b: &mut Builder, name: &str, ty: Dtype, k_contiguous: bool, width: u32, stages: u32) -> (SharedId, SlabLayout, i64) {
    let tile = b.shared(name, ty, stages * width * BK);
    b.ir.shared[tile].swizzled = true;
    (tile, SlabLayout::Swizzled { k_inner: k_contiguous, bk: BK }, (width * BK) as i64)
}

/// `(row, column)` of the element of a warpgroup's 64 x n accumulator in
/// register `reg` of thread `t` of the warpgroup (PTX ISA, "wgmma
/// .m64nNk16 register fragment layout for the accumulator"): warp `t / 32`
/// owns rows `16 (t / 32) ..`, each group of four registers one 8-column
/// slice laid out as mma.m16n8's accumulator.
pub fn acc_element(t: &IExpr, reg: &IExpr) -> (IExpr, IExpr) {
    let (warp, lane) = (t.clone().div(IExpr::c(32)), t.clone().rem(IExpr::c(32)));
    let q = reg.clone().rem(IExpr::c(4));
    let row = warp.mul(IExpr::c(16)).add(lane.clone().div(IExpr::c(4))).add(q.clone().div(IExpr::c(2)).mul(IExpr::c(8)));
    let col = reg.clone().div(IExpr::c(4)).mul(IExpr::c(8)).add(lane.rem(IExpr::c(4)).mul(IExpr::c(2))).add(q.rem(IExpr::c(2)));
    (row, col)
}

/// Does the warpgroup schedule fit this contraction on this target? The
/// instruction exists on sm_90a only.
pub fn admits(k: &Kernel, target: &Target, p: &Plan) -> bool {
    let sm90 = matches!(target, Target::Cuda { sm: 90 });
    sm90 && sums_at_least(k, p, MIN_K) && p.acc_ty == Dtype::F32 && operand_dtype(p.a, p.b).is_some()
}

/// One slab's instructions for the warpgroup at `wg`: `PER_PROMOTION` at
/// a time into fresh accumulators, one per group (all issued back to
/// back, so the unit runs the slab's four without a pause), waited for
/// once, then promoted in order into the running sums: `(acc + part_0) +
/// part_1`, the order of `ReductionOrder::MatrixUnit` (a promotion per
/// group), in one pass that updates every running sum (the slab loop's
/// reduction check refutes one that skips some).
///
/// Returned in two parts, the issue (`.0`) and the wait with the
/// promotion (`.1`): the ring puts its copies of a later slab between
/// them, so the threads compute the copies' addresses while the unit
/// works (H100, gemm_f16 4096^3: the copies' issue held about a fifth of
/// the warps' stall samples when it came before the instructions).
///
/// In a form of two halves (`Form::halves`) the warpgroup's rows are two
/// instructions' 64: this builds `half`'s, promoted into its running sums
/// `acc[64 half ..]`.
fn slab_instructions(b: &mut Builder, a: &UnitSlab, bt: &UnitSlab, (wg, form, half): (&IExpr, Form, i64), acc: LocalId, per_promotion: i64) -> (Vec<KStmt>, Vec<KStmt>) {
    let groups = BK as i64 / 16 / per_promotion;
    let parts: Vec<LocalId> = (0..groups).map(|_| b.local("part", Dtype::F32)).collect();
    let mut out: Vec<KStmt> = parts.iter().map(|&arr| KStmt::DeclArray { arr, len: N / 2, init: None }).collect();
    out.push(KStmt::WgmmaFence);
    for (group, &part) in parts.iter().enumerate() {
        for j in 0..per_promotion {
            let i = group as i64 * per_promotion + j;
            let (a_op, b_op) = (a.operand(Some((wg, form, half)), i), bt.operand(None, i));
            out.push(KStmt::Wgmma { n: N, a: a_op, b: b_op, acc: part, accumulate: j > 0 });
        }
    }
    let mut finish = vec![KStmt::WgmmaWait { pending: 0 }];
    let r = b.ivar("r");
    let add = |x: VExpr, y: VExpr| VExpr::new(VKind::Binary(crate::syntax::ast::BinOp::Add, Box::new(x), Box::new(y)), Dtype::F32);
    let get = |arr: LocalId| VExpr::new(VKind::ArrayGet { arr, index: IExpr::Var(r) }, Dtype::F32);
    let slot = if half > 0 { IExpr::Var(r).add(IExpr::c(half * (N / 2) as i64)) } else { IExpr::Var(r) };
    let running = VExpr::new(VKind::ArrayGet { arr: acc, index: slot.clone() }, Dtype::F32);
    let sum = parts.iter().fold(running, |running, &part| add(running, get(part)));
    finish.push(KStmt::unrolled(r, N / 2, vec![KStmt::ArraySet { arr: acc, index: slot, value: sum }]));
    (out, finish)
}

/// The order the warp-specialised form issues a slab's four chains in:
/// (m half, n half) of the warpgroup's 128 x 128.
const QUARTERS: [(i64, i64); 4] = [(0, 0), (1, 0), (0, 1), (1, 1)];
/// The same for a warpgroup of one instruction's rows (64 x 128): its two
/// n halves.
const N_HALVES: [(i64, i64); 2] = [(0, 0), (0, 1)];
/// The columns of a quarter's instructions.
const QUARTER_N: u32 = N / 2;

/// A slab of the warp-specialised form, the unit kept busy while the
/// warpgroup promotes: its 128 x 128 of the tile as four chains of 64 x
/// 64 (four m64n64k16 instructions from zero each: the slab's 64 k),
/// issued in turn into two parts of 32 registers. After each chain's
/// commit the warpgroup waits until only that chain may still run, then
/// adds the previous chain's part to its running sums while the unit
/// works on this one; the last chain's after a full wait, before the
/// stage is released. Each running sum gets the same sum of four
/// instructions a slab as with one 64 x 128 chain a half
/// (`MatrixUnit { k: 16, per_promotion: 4 }`), in slab order, so the
/// results are the same bits; two 64 x 128 parts in flight would not fit
/// beside the 128 running sums. Measured on the H100 (an ablation,
/// bench/experiments/ws_quarters.py): 0-4% faster.
fn overlapped_chains(b: &mut Builder, a: &UnitSlab, bt: &UnitSlab, (wg, form): (&IExpr, Form), acc: LocalId) -> Vec<KStmt> {
    let instructions = BK as i64 / 16;
    let parts = [b.local("part", Dtype::F32), b.local("part", Dtype::F32)];
    let mut out: Vec<KStmt> = parts.iter().map(|&arr| KStmt::DeclArray { arr, len: QUARTER_N / 2, init: None }).collect();
    let chains: &[(i64, i64)] = if form.halves > 1 { &QUARTERS } else { &N_HALVES };
    let promote = |b: &mut Builder, q: usize| {
        let (mh, nh) = chains[q];
        let r = b.ivar("r");
        let slot = IExpr::Var(r).add(IExpr::c(mh * (N / 2) as i64 + nh * (QUARTER_N / 2) as i64));
        let running = VExpr::new(VKind::ArrayGet { arr: acc, index: slot.clone() }, Dtype::F32);
        let part = VExpr::new(VKind::ArrayGet { arr: parts[q % 2], index: IExpr::Var(r) }, Dtype::F32);
        let sum = VExpr::new(VKind::Binary(crate::syntax::ast::BinOp::Add, Box::new(running), Box::new(part)), Dtype::F32);
        KStmt::unrolled(r, QUARTER_N / 2, vec![KStmt::ArraySet { arr: acc, index: slot, value: sum }])
    };
    for (q, &(mh, nh)) in chains.iter().enumerate() {
        // After ordinary accesses of the parts (the promotions: the last
        // slab's, or chain q - 2's), not before the second chain, which
        // follows the first's issue alone.
        if q != 1 {
            out.push(KStmt::WgmmaFence);
        }
        for i in 0..instructions {
            let a_op = a.operand(Some((wg, form, mh)), i);
            let b_op = bt.rows_from(bt.operand(None, i), nh * QUARTER_N as i64);
            out.push(KStmt::Wgmma { n: QUARTER_N, a: a_op, b: b_op, acc: parts[q % 2], accumulate: i > 0 });
        }
        out.push(KStmt::WgmmaWait { pending: 1 });
        if q > 0 {
            out.push(promote(b, q - 1));
        }
    }
    out.push(KStmt::WgmmaWait { pending: 0 });
    out.push(promote(b, chains.len() - 1));
    out
}

/// The block's form: how many instructions' rows (64 each) a warpgroup
/// owns, and whether a producer warpgroup fills the ring in a loop of its
/// own (`producer_ring`) while the two warpgroups drain it in theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Form {
    halves: u32,
    producer: bool,
    /// Tile rows a group of blocks walks down before the next column
    /// (`Tile::group`, `Tile::origin`).
    group: u32,
}

impl Form {
    /// The block's rows: two warpgroups'.
    const fn bm(self) -> u32 {
        2 * WG_ROWS as u32 * self.halves
    }

    fn wg_rows(self) -> i64 {
        WG_ROWS * self.halves as i64
    }

    /// Stages of the copy ring: the 256-row form's slabs take 48 KB a
    /// stage, so three fit beside the element path's slabs.
    fn stages(self) -> u32 {
        if self.halves > 1 {
            3
        } else {
            RING_STAGES
        }
    }
}

/// The form every launch takes: one instruction's rows a warpgroup, the
/// warpgroups copying between their instructions.
const PLAIN: Form = Form { halves: 1, producer: false, group: 1 };
/// Warp specialisation (`producer_ring`): 256 x 128 tiles, each warpgroup
/// 128 rows as two halves (128 running sums a thread; one fresh
/// accumulator, reused), so only where a slab is promoted once
/// (`WIDE_PROMOTION`: two fresh accumulators would not fit beside them).
/// The ring is filled by bulk tensor copies into unpadded slabs under the
/// 128-byte swizzle (`swizzled_ring`, `SlabLayout::Swizzled`), which the
/// unit reads through swizzled descriptors.
const SPECIALISED: Form = Form { halves: 2, producer: true, group: 1 };
/// [`SPECIALISED`] with its blocks walking the output in groups of
/// [`GROUP_ROWS`] tile rows (`Tile::origin`): the 132 blocks resident at
/// once read eight tile rows of A (2048 rows) and about seventeen tile
/// columns of B, which L2 holds, where row by row they read every column
/// of B for each two tile rows (`<kernel>_ws8`).
const GROUPED: Form = Form { group: GROUP_ROWS, ..SPECIALISED };
/// Tile rows of a group in [`GROUPED`].
const GROUP_ROWS: u32 = 8;
/// [`SPECIALISED`] on 128 x 128 tiles: each warpgroup one instruction's
/// rows. Twice the blocks of the 256-row form, so a launch whose 256-row
/// tiles leave a thin last wave finishes sooner on it where its waves
/// are fewer in 256-row tiles' time (`<kernel>_ws128`, chosen at launch
/// by the waves each would run).
const SPECIALISED_ROWS128: Form = Form { halves: 1, ..SPECIALISED };
/// How long a wave of [`SPECIALISED_ROWS128`] blocks takes against a wave
/// of [`SPECIALISED`] ones (half the work a block): measured on the H200
/// (bench/run_waves.sh, thirty-fifth session), `linear_fwd` at 2304 x
/// 2048 x 2048, three waves of 128-row tiles in 0.0623 ms against two of
/// 256-row tiles in 0.0726 ms: 0.577. The smaller tile reads each operand
/// element for fewer products.
pub const ROWS128_WAVE_TIME: f64 = 0.58;
/// The warp-specialised form's output tile, rows by columns.
pub const SPECIALISED_TILE: (u32, u32) = (SPECIALISED.bm(), BN);

/// The schedule (see the module's documentation); the caller checked
/// [`admits`].
pub fn schedule(k: &Kernel, target: &Target, p: Plan) -> Result<KernelIr, Diagnostic> {
    let per_promotion = if sums_at_least(k, &p, MIN_K_WIDE) { WIDE_PROMOTION } else { PER_PROMOTION };
    schedule_form(k, target, p, PLAIN, per_promotion)
}

/// The warp-specialised form of [`schedule`] (`SPECIALISED`), promoting
/// once a slab: the caller's kernel sums at least [`MIN_K_WIDE`] (its
/// `requires` or a variant's guard; the tolerance proof refutes it
/// otherwise). Chosen per launch for large outputs
/// (`schedule::warp_specialised_variants`): on small ones its 256-row
/// tiles leave SMs idle (H100, 1000^3: 69 against 105 TFLOP/s).
pub fn schedule_specialised(k: &Kernel, target: &Target, p: Plan) -> Result<KernelIr, Diagnostic> {
    schedule_form(k, target, p, SPECIALISED, WIDE_PROMOTION)
}

/// [`schedule_specialised`] with its blocks walking the output in groups
/// of tile rows ([`GROUPED`]).
pub fn schedule_specialised_grouped(k: &Kernel, target: &Target, p: Plan) -> Result<KernelIr, Diagnostic> {
    schedule_form(k, target, p, GROUPED, WIDE_PROMOTION)
}

/// [`schedule_specialised`] on 128 x 128 tiles ([`SPECIALISED_ROWS128`]).
pub fn schedule_specialised_rows128(k: &Kernel, target: &Target, p: Plan) -> Result<KernelIr, Diagnostic> {
    schedule_form(k, target, p, SPECIALISED_ROWS128, WIDE_PROMOTION)
}

fn schedule_form(k: &Kernel, target: &Target, p: Plan, form: Form, per_promotion: i64) -> Result<KernelIr, Diagnostic> {
    let ty = operand_dtype(p.a, p.b).expect("admits() checked the operands");
    let bm = form.bm();
    let producer = if form.producer { 128 } else { PRODUCER };
    // 256 computing threads: two warpgroups (`Tile::threads`).
    let t = Tile { bm, bn: BN, bk: BK, tm: 8 * form.halves, tn: 8, producer, group: form.group, kgroups: 1 };
    let mut b = Builder::new(k, target, Schedule::Warpgroup { bm, bn: BN, bk: BK, n: N }, t.block());
    // The two warpgroups that run the unit; the producer after them.
    let computers = (t.producer > 0).then(|| IExpr::Tid.lt(IExpr::c(t.threads() as i64)));
    // Statements only the computing threads run (all of them, where no
    // producer is beside them).
    let computing = |stmts: Vec<KStmt>| match &computers {
        Some(cond) => vec![KStmt::If { cond: cond.clone(), then: stmts, els: vec![] }],
        None => stmts,
    };
    b.ir.reduction_order.insert(p.kvar, ReductionOrder::MatrixUnit { k: 16, per_promotion: per_promotion as u32 });
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let (mext, next, kext) = (extent_expr(k.vars[mvar].extent), extent_expr(k.vars[nvar].extent), extent_expr(k.vars[p.kvar].extent));
    // The element path's slabs: unpadded (its loader walks them in
    // position order); the ring's: see `ring`.
    let a_layout = SlabLayout::Cores { lbo: LBO, sbo: SBO, k_inner: p.a_k_contiguous };
    let b_layout = SlabLayout::Cores { lbo: LBO, sbo: SBO, k_inner: p.b_k_contiguous };
    let stages = form.stages();
    let ((a_ring, a_ring_layout, a_stage), (b_ring, b_ring_layout, b_stage)) = if form.producer {
        (swizzled_ring(&mut b, "a_ring", ty, p.a_k_contiguous, bm, stages), swizzled_ring(&mut b, "b_ring", ty, p.b_k_contiguous, BN, stages))
    } else {
        (ring(&mut b, "a_ring", ty, p.a_k_contiguous, bm, p.a_k_contiguous, stages), ring(&mut b, "b_ring", ty, p.b_k_contiguous, BN, true, stages))
    };
    let (a_el, b_el) = (b.shared("a_slab", ty, bm * BK), b.shared("b_slab", ty, BK * BN));
    let (m0_v, n0_v, wg_v) = (b.ivar("m0"), b.ivar("n0"), b.ivar("wg"));
    let (m0, n0, wg) = (IExpr::Var(m0_v), IExpr::Var(n0_v), IExpr::Var(wg_v));
    let (m0_e, n0_e) = t.origin();
    let origin = vec![KStmt::LetInt { var: m0_v, value: m0_e }, KStmt::LetInt { var: n0_v, value: n0_e }];
    let mut body = vec![KStmt::LetInt { var: wg_v, value: IExpr::Tid.div(IExpr::c(128)) }];
    // Vector loads where every operand's rows are whole 16-byte runs and
    // its buffer 16-byte aligned (decided once, the same for every thread).
    let vectors = vector_decision(&mut b, &p, (mvar, nvar), &mut body);
    let acc_len = N / 2 * form.halves;
    let acc = b.local("acc", Dtype::F32);
    body.push(KStmt::DeclArray { arr: acc, len: acc_len, init: Some(VExpr::zero(Dtype::F32)) });
    // Each half's (issue, wait and promotion), in order.
    let unit = |b: &mut Builder, a: &UnitSlab, bt: &UnitSlab, acc: LocalId| -> Vec<(Vec<KStmt>, Vec<KStmt>)> {
        (0..form.halves as i64).map(|half| slab_instructions(b, a, bt, (&wg, form, half), acc, per_promotion)).collect()
    };
    let in_order = |halves: Vec<(Vec<KStmt>, Vec<KStmt>)>| -> Vec<KStmt> { halves.into_iter().flat_map(|(issue, finish)| issue.into_iter().chain(finish)).collect() };
    // The vector path: a ring of copies, filled by the warpgroups between
    // their instructions (`copy_ring`: three slabs in flight while the
    // unit works on the stage of slab k0), or by a producer warpgroup
    // (`producer_ring`).
    let unit_slabs = |at: IExpr| {
        let a = UnitSlab { tile: a_ring, at: at.clone().mul(IExpr::c(a_stage)), layout: a_ring_layout };
        let bt = UnitSlab { tile: b_ring, at: at.mul(IExpr::c(b_stage)), layout: b_ring_layout };
        (a, bt)
    };
    let vector_path = if form.producer {
        let fits = BulkOperand::fits(&b, p.a, (mvar, p.kvar), a_ring, bm, BK) && BulkOperand::fits(&b, p.b, (nvar, p.kvar), b_ring, BN, BK);
        fits.then(|| {
            let oa = BulkOperand::new(&mut b, p.a, (mvar, p.kvar), a_ring, (bm, BK), &m0, a_stage);
            let ob = BulkOperand::new(&mut b, p.b, (nvar, p.kvar), b_ring, (BN, BK), &n0, b_stage);
            // The consumers' own running sums, so that nothing of the
            // element path's lives across their register allowance.
            let vacc = b.local("acc", Dtype::F32);
            let consumers = (computers.clone().expect("a producer"), t.threads());
            assert_eq!(per_promotion, BK as i64 / 16, "a chain a slab");
            let ring = producer_ring(&mut b, (&oa, &ob), stages, p.kvar, consumers, |b, at| {
                let (a, bt) = unit_slabs(at);
                overlapped_chains(b, &a, &bt, (&wg, form), vacc)
            });
            Ahead::Producer { ring, acc: vacc, operands: [oa, ob] }
        })
    } else {
        let mut pipelined = Vec::new();
        let va = VectorSlab::new(&mut b, t, a_ring_layout, p.a, a_ring, (mvar, p.kvar), bm, (&m0, &mext, &kext), &mut pipelined);
        let vb = VectorSlab::new(&mut b, t, b_ring_layout, p.b, b_ring, (nvar, p.kvar), BN, (&n0, &next, &kext), &mut pipelined);
        match (va, vb) {
            (Some(va), Some(vb)) => {
                let ring = copy_ring(&mut b, (&va, &vb), (a_stage, b_stage), stages, p.kvar, true, computers.clone(), pipelined, |b, at| {
                    let (a, bt) = unit_slabs(at);
                    let mut halves = unit(b, &a, &bt, acc);
                    let (issue, mut finish) = halves.remove(0);
                    // Later halves after the first one's wait.
                    finish.extend(in_order(halves));
                    (issue, finish)
                });
                Some(Ahead::Copies { ring, operands: Box::new([va, vb]) })
            }
            _ => None,
        }
    };
    // The element path (and the only one where runs do not fit).
    let k0_v = b.ivar("k0");
    let k0 = IExpr::Var(k0_v);
    let mut kbody = Vec::new();
    let on = Cond::Eq(IExpr::Var(vectors), IExpr::c(1));
    tile_load(&mut b, t, a_layout, p.a, a_el, mvar, p.kvar, bm, p.a_k_contiguous, &m0, &k0, &mext, &kext, &mut kbody)?;
    if let Some(ahead) = &vector_path {
        ahead.cover(&mut b, 0, on.clone());
    }
    tile_load(&mut b, t, b_layout, p.b, b_el, nvar, p.kvar, BN, p.b_k_contiguous, &n0, &k0, &next, &kext, &mut kbody)?;
    if let Some(ahead) = &vector_path {
        ahead.cover(&mut b, 1, on.clone());
    }
    kbody.push(KStmt::ProxyFence);
    kbody.push(KStmt::Barrier);
    let (a, bt) = (UnitSlab { tile: a_el, at: IExpr::c(0), layout: a_layout }, UnitSlab { tile: b_el, at: IExpr::c(0), layout: b_layout });
    let halves = unit(&mut b, &a, &bt, acc);
    kbody.extend(computing(in_order(halves)));
    kbody.push(KStmt::Barrier);
    let mut element_path = vec![slab_loop(&mut b, k0_v, p.kvar, BK, kbody)];
    // Epilogue: the statement with the sum replaced by the thread's sums;
    // each path's store is a case of the output's coverage, over one
    // element's variables.
    let elem = (b.ivar("elem_m"), b.ivar("elem_n"));
    let place = TilePlace { tile: t, m0: &m0, n0: &n0, wg: &wg, elem };
    let mut outputs = Vec::new();
    if let Some(Ahead::Producer { mut ring, acc: vacc, .. }) = vector_path {
        // Each path stores its own sums: the consumers' in their branch
        // (their register allowance), the element path's after its loop.
        let (store, cases) = stores(&mut b, k, &p, form, &place, vacc, on.clone())?;
        ring.consumer.insert(0, KStmt::DeclArray { arr: vacc, len: acc_len, init: Some(VExpr::zero(Dtype::F32)) });
        ring.consumer.extend(store);
        outputs.extend(cases);
        let (store, case) = epilogue(&mut b, k, &p, form, &place, acc, Cond::Not(Box::new(on.clone())))?;
        element_path.extend(computing(store));
        outputs.push(case);
        body.push(KStmt::If { cond: on, then: ring.assemble(), els: element_path });
    } else {
        // One store after both paths.
        match vector_path {
            Some(Ahead::Copies { ring, .. }) => body.push(KStmt::If { cond: on, then: ring.stmts, els: element_path }),
            _ => body.extend(element_path),
        }
        let (store, cases) = stores(&mut b, k, &p, form, &place, acc, Cond::True)?;
        body.extend(computing(store));
        outputs.extend(cases);
    }
    b.cover_axes(s.target, vec![elem.0, elem.1], outputs);
    b.ir.grid = t.grid(&mext, &next);
    // Walking groups of tile rows, the last group's blocks past M have
    // nothing to do: the whole block leaves at once.
    b.ir.body = origin;
    if t.group > 1 {
        b.ir.body.push(KStmt::If { cond: m0.lt(mext), then: body, els: vec![] });
    } else {
        b.ir.body.extend(body);
    }
    Ok(b.finish())
}

/// How the vector path's ring is filled, with its operands, for its
/// coverage.
enum Ahead {
    Copies { ring: CopyRing, operands: Box<[VectorSlab; 2]> },
    Producer { ring: ProducerRing, acc: LocalId, operands: [BulkOperand; 2] },
}

impl Ahead {
    /// Operand `which`'s copies as cases of the element loader's coverage
    /// (the last one pushed) where vectors are `on`.
    fn cover(&self, b: &mut Builder, which: usize, on: Cond) {
        match self {
            Ahead::Copies { ring, operands } => ring.cover(b, &operands[which], which, on),
            // Slab j in the producer's iteration j (nothing ahead).
            Ahead::Producer { ring, operands, .. } => operands[which].cover(b, on, &ring.copies[which], (ring.kp, ring.issuer)),
        }
    }
}

/// Where an epilogue stores: the block's tile origin and the thread's
/// warpgroup, and the output element's variables that every epilogue's
/// coverage case ranges over (one pair for all of them: the cases are
/// alternatives for the same element).
struct TilePlace<'a> {
    tile: Tile,
    m0: &'a IExpr,
    n0: &'a IExpr,
    wg: &'a IExpr,
    elem: (IVar, IVar),
}

/// The epilogue over running sums `acc`: every thread's sums stored (the
/// statements, for the computing threads), and the output's coverage
/// case, which holds `when`: each element by its block, warpgroup, warp,
/// lane and register (the layout's inverse; see the tests), with the
/// element's variables.
fn epilogue(b: &mut Builder, k: &Kernel, p: &Plan, form: Form, place: &TilePlace, acc: LocalId, when: Cond) -> Result<(Vec<KStmt>, CoverCase), Diagnostic> {
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let er_v = b.ivar("r");
    let gm = b.ivar(&k.vars[mvar].name.clone());
    let gn = b.ivar(&k.vars[nvar].name.clone());
    let mut env = Env::default();
    env.vars.insert(mvar, IExpr::Var(gm));
    env.vars.insert(nvar, IExpr::Var(gn));
    env.reduced.insert(node_key(p.reduce), VExpr::new(VKind::ArrayGet { arr: acc, index: IExpr::Var(er_v) }, Dtype::F32).cast(p.reduce.ty));
    let mut store = Vec::new();
    let value = b.lower(&s.value, &mut env, &mut store)?;
    let access = b.store(s, value, &env, &mut store);
    let guarded = place.inside(b.k, form, (gm, gn), &IExpr::Var(er_v), store);
    let case = place.witness(form, access, when, er_v, 1);
    Ok((vec![KStmt::unrolled(er_v, N / 2 * form.halves, guarded)], case))
}

/// The store of running sums `acc` where `when` holds: pairs of columns
/// as one 4-byte word where the output is 4-byte aligned and its rows
/// have even length (tested at run time), else element by element; the
/// two coverage cases.
fn stores(b: &mut Builder, k: &Kernel, p: &Plan, form: Form, place: &TilePlace, acc: LocalId, when: Cond) -> Result<(Vec<KStmt>, Vec<CoverCase>), Diagnostic> {
    let s = &k.stmts[0];
    let next = extent_expr(k.vars[s.vars[1]].extent);
    let out_buf = b.buf(s.target);
    let words = Cond::Aligned(vec![out_buf], PAIR_BYTES).and(Cond::Eq(next.rem(IExpr::c(2)), IExpr::c(0)));
    let (pairs, pair_case) = paired_epilogue(b, k, p, form, place, acc, when.clone().and(words.clone()))?;
    let (single, single_case) = epilogue(b, k, p, form, place, acc, when.and(Cond::Not(Box::new(words.clone()))))?;
    Ok((vec![KStmt::If { cond: words, then: pairs, els: single }], vec![pair_case, single_case]))
}

/// The bytes of a paired store: two 16-bit outputs.
const PAIR_BYTES: u32 = 4;

/// The paired epilogue (`stores`): a thread's
/// registers `2 j` and `2 j + 1` hold columns `n` and `n + 1` of one row
/// (`acc_element`; `n` even), so each pair is computed lane by lane into
/// two registers of the output's type and stored as one 4-byte word
/// where its row and first column lie inside the output (the second
/// then does too: the caller runs this only where rows have an even
/// length). One store instruction for two elements: measured on the H100,
/// gemm_f16 runs 1.11x faster at 4096^3 and 1.36x at 16384x1024x1024
/// than with the element-wise stores (bench/RESULTS.md, sixteenth
/// session). The coverage case is `epilogue`'s with the pair's index for
/// the register's.
fn paired_epilogue(b: &mut Builder, k: &Kernel, p: &Plan, form: Form, place: &TilePlace, acc: LocalId, when: Cond) -> Result<(Vec<KStmt>, CoverCase), Diagnostic> {
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let out_ty = k.tensors[s.target].dtype;
    let (pair_v, lane_v) = (b.ivar("pair"), b.ivar("lane"));
    let gm = b.ivar(&k.vars[mvar].name.clone());
    let gn = b.ivar(&k.vars[nvar].name.clone());
    let first = IExpr::Var(pair_v).mul(IExpr::c(2));
    let mut env = Env::default();
    env.vars.insert(mvar, IExpr::Var(gm));
    env.vars.insert(nvar, IExpr::Var(gn).add(IExpr::Var(lane_v)));
    env.reduced.insert(node_key(p.reduce), VExpr::new(VKind::ArrayGet { arr: acc, index: first.clone().add(IExpr::Var(lane_v)) }, Dtype::F32).cast(p.reduce.ty));
    let words = b.local(&format!("{}_pair", k.tensors[s.target].name), out_ty);
    let mut lane_body = Vec::new();
    let value = b.lower(&s.value, &mut env, &mut lane_body)?;
    lane_body.push(KStmt::ArraySet { arr: words, index: IExpr::Var(lane_v), value: value.cast(out_ty) });
    let buf = b.buf(s.target);
    let access = b.access(buf, AccessKind::Write, s.span, format!("paired write of `{}`", k.tensors[s.target].name));
    let axes = vec![IExpr::Var(gm), IExpr::Var(gn)];
    let base = b.flat_index(s.target, &axes);
    let store = vec![
        KStmt::DeclArray { arr: words, len: 2, init: None },
        KStmt::unrolled(lane_v, 2, lane_body),
        KStmt::VecStore { buf, base, axes, width: 2, arr: words, access },
    ];
    let guarded = place.inside(b.k, form, (gm, gn), &first, store);
    let case = place.witness(form, access, when, pair_v, 2);
    Ok((vec![KStmt::unrolled(pair_v, N / 4 * form.halves, guarded)], case))
}

impl TilePlace<'_> {
    /// The element that register `reg` of this thread holds, as `gm`,
    /// `gn`, and `store` run where it lies inside the output.
    fn inside(&self, k: &Kernel, form: Form, (gm, gn): (IVar, IVar), reg: &IExpr, store: Vec<KStmt>) -> Vec<KStmt> {
        let s = &k.stmts[0];
        let (mext, next) = (extent_expr(k.vars[s.vars[0]].extent), extent_expr(k.vars[s.vars[1]].extent));
        // Register r: half r / 64's register r % 64.
        let per_half = (N / 2) as i64;
        let (half, reg_in_half) = if form.halves > 1 { (Some(reg.clone().div(IExpr::c(per_half))), reg.clone().rem(IExpr::c(per_half))) } else { (None, reg.clone()) };
        let (row, col) = acc_element(&IExpr::Tid.rem(IExpr::c(128)), &reg_in_half);
        let row = match &half {
            Some(h) => h.clone().mul(IExpr::c(WG_ROWS)).add(row),
            None => row,
        };
        vec![
            KStmt::LetInt { var: gm, value: self.m0.clone().add(self.wg.clone().mul(IExpr::c(form.wg_rows()))).add(row) },
            KStmt::LetInt { var: gn, value: self.n0.clone().add(col) },
            KStmt::If { cond: IExpr::Var(gm).lt(mext).and(IExpr::Var(gn).lt(next)), then: store, els: vec![] },
        ]
    }

    /// The coverage case of a store of `per` neighbouring registers at a
    /// time, indexed by `slot` (`r / per`): each element by its block,
    /// its thread (warpgroup, warp, lane) and its slot, the layout's
    /// inverse (see the tests).
    fn witness(&self, form: Form, access: AccessId, when: Cond, slot: IVar, per: i64) -> CoverCase {
        let (m, n) = (IExpr::Var(self.elem.0), IExpr::Var(self.elem.1));
        let bm = form.bm() as i64;
        let tid = m.clone().rem(IExpr::c(bm)).div(IExpr::c(form.wg_rows())).mul(IExpr::c(128)).add(m.clone().rem(IExpr::c(WG_ROWS)).div(IExpr::c(16)).mul(IExpr::c(32))).add(m.clone().rem(IExpr::c(8)).mul(IExpr::c(4))).add(n.clone().rem(IExpr::c(8)).div(IExpr::c(2)));
        // Register (n % BN / 8) * 4 + (m % 16 / 8) * 2 + n % 2 of its half.
        let reg = n.clone().rem(IExpr::c(BN as i64)).div(IExpr::c(8)).mul(IExpr::c(4 / per)).add(m.clone().rem(IExpr::c(16)).div(IExpr::c(8)).mul(IExpr::c(2 / per)));
        let reg = if per == 1 { reg.add(n.clone().rem(IExpr::c(2))) } else { reg };
        let per_half = (N / 2) as i64 / per;
        let reg = if form.halves > 1 { m.clone().rem(IExpr::c(form.wg_rows())).div(IExpr::c(WG_ROWS)).mul(IExpr::c(per_half)).add(reg) } else { reg };
        let mut assign = self.tile.block_of(m.div(IExpr::c(bm)), n.div(IExpr::c(BN as i64)));
        assign.push((Witness::Tid, tid));
        assign.push((Witness::Var(slot), reg));
        CoverCase { when, access, assign }
    }
}

#[cfg(test)]
mod tests {
    use super::super::contraction::VECTOR;
    use super::*;

    fn constant(e: &IExpr) -> i64 {
        match e {
            IExpr::Const(v) => *v,
            other => panic!("not a constant: {:?}", other),
        }
    }

    #[test]
    fn the_accumulator_map_is_a_bijection_onto_the_warpgroups_tile() {
        let (rows, cols) = (WG_ROWS, N as i64);
        let mut owner = vec![None; (rows * cols) as usize];
        for t in 0..128 {
            for reg in 0..(N / 2) as i64 {
                let (r, c) = acc_element(&IExpr::c(t), &IExpr::c(reg));
                let (r, c) = (constant(&r), constant(&c));
                assert!((0..rows).contains(&r) && (0..cols).contains(&c), "thread {} reg {}: ({}, {})", t, reg, r, c);
                let slot = &mut owner[(r * cols + c) as usize];
                assert!(slot.is_none(), "({}, {}) held by {:?} and by thread {} reg {}", r, c, slot, t, reg);
                *slot = Some((t, reg));
            }
        }
        assert!(owner.iter().all(Option::is_some));
    }

    #[test]
    fn the_loaders_walk_core_matrices_in_position_order() {
        // The element loader's store index is the position it reads the
        // element of; the vector loader's run l lies at 8 l: both must be
        // the layout's own place for the element.
        for k_inner in [true, false] {
            let layout = SlabLayout::Cores { lbo: LBO, sbo: SBO, k_inner };
            let width = if k_inner { PLAIN.bm() } else { BN };
            for p in 0..(width * BK) as i64 {
                let (x, kk) = layout.element_at(IExpr::c(p)).expect("core layout");
                assert_eq!(constant(&layout.index(x, kk)), p, "k_inner {} position {}", k_inner, p);
            }
            for l in 0..(width * BK / VECTOR) as i64 {
                let (x, kk) = VectorSlab::place(layout, k_inner, width, BK, IExpr::c(l));
                assert_eq!(constant(&layout.index(x, kk)), l * VECTOR as i64, "k_inner {} run {}", k_inner, l);
            }
        }
    }

    #[test]
    fn neighbouring_threads_copy_one_row_of_b_onto_distinct_banks() {
        // B's runs: consecutive threads take consecutive 16-byte pieces
        // of one row of B (a coalesced read), and a quarter warp's eight
        // land on eight distinct 16-byte bank groups of the padded layout;
        // every run's place is its own.
        let layout = SlabLayout::Cores { lbo: LBO, sbo: SBO_PADDED, k_inner: false };
        let mut seen = std::collections::HashSet::new();
        for l in 0..(BN * BK / VECTOR) as i64 {
            let (x, kk) = VectorSlab::place(layout, false, BN, BK, IExpr::c(l));
            let (x, kk) = (constant(&x), constant(&kk));
            assert_eq!((x, kk), ((l % (BN / VECTOR) as i64) * VECTOR as i64, l / (BN / VECTOR) as i64), "run {}", l);
            assert!(seen.insert(constant(&layout.index(IExpr::c(x), IExpr::c(kk)))), "run {} shares a place", l);
        }
        for quarter in (0..(BN * BK / VECTOR) as i64).step_by(8) {
            let banks: std::collections::HashSet<i64> = (quarter..quarter + 8)
                .map(|l| {
                    let (x, kk) = VectorSlab::place(layout, false, BN, BK, IExpr::c(l));
                    constant(&layout.index(x, kk)) * 2 / 16 % 8
                })
                .collect();
            assert_eq!(banks.len(), 8, "runs {}..{}", quarter, quarter + 8);
        }
    }

    #[test]
    fn an_unpadded_m_contiguous_ring_is_filled_a_bank_line_at_a_time() {
        // A of `x^T gy`: its ring stays unpadded (see `ring`) and its
        // runs go in position order: a quarter warp's eight fill one
        // 128-byte line of shared memory (eight distinct 16-byte bank
        // groups); a warp reads 16 contiguous bytes of each of 32 rows of
        // the operand.
        let layout = SlabLayout::Cores { lbo: LBO, sbo: SBO, k_inner: false };
        let runs = (PLAIN.bm() * BK / VECTOR) as i64;
        let places: Vec<(i64, i64)> = (0..runs)
            .map(|l| {
                let (x, kk) = VectorSlab::place(layout, false, PLAIN.bm(), BK, IExpr::c(l));
                (constant(&x), constant(&kk))
            })
            .collect();
        for quarter in (0..runs).step_by(8) {
            let banks: std::collections::HashSet<i64> = (quarter..quarter + 8)
                .map(|l| {
                    let (x, kk) = places[l as usize];
                    constant(&layout.index(IExpr::c(x), IExpr::c(kk))) * 2 / 16 % 8
                })
                .collect();
            assert_eq!(banks.len(), 8, "runs {}..{}", quarter, quarter + 8);
        }
        for warp in (0..runs).step_by(32) {
            let rows: std::collections::BTreeSet<i64> = (warp..warp + 32).map(|l| places[l as usize].1).collect();
            let xs: std::collections::BTreeSet<i64> = (warp..warp + 32).map(|l| places[l as usize].0).collect();
            assert_eq!((rows.len(), xs.len()), (32, 1), "warp of run {}", warp);
        }
        // A padded ring keeps the walk along the operand's rows.
        let padded = SlabLayout::Cores { lbo: LBO, sbo: SBO_PADDED, k_inner: false };
        let (x1, k1) = VectorSlab::place(padded, false, BN, BK, IExpr::c(1));
        assert_eq!((constant(&x1), constant(&k1)), (VECTOR as i64, 0));
    }

    /// An index term's value for thread `tid` (the terms the loaders
    /// build: no dims, loads or loop variables).
    fn eval(e: &IExpr, tid: i64) -> i64 {
        match e {
            IExpr::Const(v) => *v,
            IExpr::Tid => tid,
            IExpr::Add(a, b) => eval(a, tid) + eval(b, tid),
            IExpr::Sub(a, b) => eval(a, tid) - eval(b, tid),
            IExpr::Mul(a, b) => eval(a, tid) * eval(b, tid),
            IExpr::Div(a, b) => eval(a, tid) / eval(b, tid),
            IExpr::Rem(a, b) => eval(a, tid) % eval(b, tid),
            other => panic!("not an index of the loaders: {:?}", other),
        }
    }

    #[test]
    fn the_producers_looped_runs_are_the_runs_of_the_walk() {
        // Each ring a producer fills (a warp beside 128-row tiles, a
        // warpgroup beside 256-row ones): run digit * hi + lo of lane t is
        // run l = t + copiers (digit * hi + lo) of the walk (`place`), and
        // in position order lies at 8 l; every run of the slab is some
        // lane's. A warpgroup's position-order walk has no digit (64 k
        // across 128 copiers): its runs stay fixed.
        for (copiers, bm) in [(32u32, PLAIN.bm()), (128, 2 * PLAIN.bm())] {
            let rings = [
                (SlabLayout::Cores { lbo: LBO_PADDED, sbo: BK / 8 * LBO_PADDED, k_inner: true }, true, bm),
                (SlabLayout::Cores { lbo: LBO, sbo: SBO_PADDED, k_inner: false }, false, BN),
                (SlabLayout::Cores { lbo: LBO, sbo: SBO, k_inner: false }, false, bm),
            ];
            let first = 256;
            for (layout, k_contiguous, width) in rings {
                let runs = (width * BK / VECTOR) as i64;
                let Some(digit) = VectorSlab::looped_digit(layout, k_contiguous, width, BK, copiers) else {
                    assert!(copiers == 128 && layout.in_position_order(), "{:?}: no digit for {} copiers", layout, copiers);
                    continue;
                };
                let per_lane = runs / copiers as i64;
                let mut seen = std::collections::HashSet::new();
                for lane in 0..copiers as i64 {
                    for hi in 0..per_lane / digit as i64 {
                        for lo in 0..digit as i64 {
                            let (x, kk, index) = VectorSlab::looped_place_in(layout, k_contiguous, (width, BK), (first, copiers), digit, (&IExpr::c(hi), &IExpr::c(lo)));
                            let tid = first as i64 + lane;
                            let l = lane + copiers as i64 * (digit as i64 * hi + lo);
                            let (px, pk) = VectorSlab::place(layout, k_contiguous, width, BK, IExpr::c(l));
                            assert_eq!((eval(&x, tid), eval(&kk, tid)), (constant(&px), constant(&pk)), "{:?} lane {} run {}", layout, lane, l);
                            if let Some(index) = index {
                                assert_eq!(eval(&index, tid), l * VECTOR as i64, "{:?} run {}", layout, l);
                            }
                            assert!(seen.insert(l));
                        }
                    }
                }
                assert_eq!(seen.len() as i64, runs);
            }
        }
    }

    #[test]
    fn core_matrix_layouts_place_every_slab_element_once() {
        for k_inner in [true, false] {
            let layout = SlabLayout::Cores { lbo: LBO, sbo: SBO, k_inner };
            let width = if k_inner { PLAIN.bm() } else { BN } as i64;
            let mut seen = vec![false; (width * BK as i64) as usize];
            for x in 0..width {
                for kk in 0..BK as i64 {
                    let at = constant(&layout.index(IExpr::c(x), IExpr::c(kk)));
                    assert!(!seen[at as usize], "k_inner {}: ({}, {}) at {} twice", k_inner, x, kk, at);
                    seen[at as usize] = true;
                }
            }
        }
    }
}
