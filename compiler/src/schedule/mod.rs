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

mod column;
mod contraction;
mod lower;
mod narrow;
pub mod observe;
mod pointwise;
mod producer_ring;
mod row;
mod row_cached;
mod split_sum;
mod tile_skip;
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

/// One of a kernel's variants: the kernel at another block size or tile,
/// or on a matrix unit for the launches a guard admits. Each is proved
/// like the kernel itself, under the kernel's `requires` and its guard.
#[derive(Clone, Debug)]
pub struct Variant {
    pub ir: KernelIr,
    /// The values of the variant key (`codegen::launch::variant_key`) it
    /// serves, `(least, most)`.
    pub keys: (i64, i64),
    pub guard: Option<Guard>,
    /// A variant on smaller tiles that a launch takes in place of the one
    /// named, where that one's key and guard chose it and this one's guard
    /// holds, when its waves of resident blocks end sooner: `(name, wave
    /// time)`, a wave of this one taking `wave time` of a wave of the
    /// named (measured). A thin last wave of large tiles leaves most
    /// multiprocessors idle (`warp_specialised_variants`).
    pub in_place_of: Option<(String, f64)>,
}

impl Variant {
    /// The kernel as this variant is proved: with its guard a `requires`
    /// more (a copy only where it has one).
    pub fn kernel<'k>(&self, k: &'k Kernel) -> std::borrow::Cow<'k, Kernel> {
        match self.guard {
            Some(g) => std::borrow::Cow::Owned(g.kernel(k)),
            None => std::borrow::Cow::Borrowed(k),
        }
    }
}

/// What a variant asks of a launch beyond the kernel's `requires`: dim
/// `dim` (an index into the kernel's dims) at least `at_least` and at most
/// `at_most`. The matrix-unit schedules' error bound holds only for sums
/// that long (`warpgroup::MIN_K`, `tensor_core::MIN_K`), so a kernel that
/// admits shorter sums gets them as a variant, proved with the guard as
/// one more `requires` and chosen at launch only where it holds; a row
/// cached in registers (`row_cached`) holds rows of at most so many
/// elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    pub dim: usize,
    /// 1 where nothing is asked (every dim is at least 1).
    pub at_least: i64,
    /// `i64::MAX` where nothing is asked.
    pub at_most: i64,
    /// A choice, not a proof obligation: where the dim is at least this,
    /// the variant serves every key, not only its `keys` (a long sum pays
    /// for the unit's larger tiles even on a small output).
    pub any_key_from: i64,
    /// A second clause, `(dim, most)`: that dim at most `most` (a
    /// split-sum contraction serves outputs that narrow, `split_variant`).
    pub also_at_most: Option<(usize, i64)>,
}

impl Guard {
    /// `k` with `requires <dim> >= <at_least>` and `requires <dim> <=
    /// <at_most>` added (each where it asks something).
    pub fn kernel(&self, k: &Kernel) -> Kernel {
        let span = k.span;
        let mut out = k.clone();
        let clause = |dim: usize, op: crate::syntax::ast::BinOp, v: i64| {
            let dim = tir::TExpr { kind: TExprKind::Dim(dim), ty: crate::types::Dtype::I32, span };
            let bound = tir::TExpr { kind: TExprKind::Const(tir::Const::Int(v)), ty: crate::types::Dtype::I32, span };
            tir::TExpr { kind: TExprKind::Binary(op, Box::new(dim), Box::new(bound)), ty: crate::types::Dtype::Bool, span }
        };
        if self.at_least > 1 {
            let expr = clause(self.dim, crate::syntax::ast::BinOp::Ge, self.at_least);
            out.requires.push(tir::Contract::Pred { expr, text: format!("{} >= {}", k.dims[self.dim].name, self.at_least), span });
        }
        if self.at_most < i64::MAX {
            let expr = clause(self.dim, crate::syntax::ast::BinOp::Le, self.at_most);
            out.requires.push(tir::Contract::Pred { expr, text: format!("{} <= {}", k.dims[self.dim].name, self.at_most), span });
        }
        if let Some((dim, most)) = self.also_at_most {
            let expr = clause(dim, crate::syntax::ast::BinOp::Le, most);
            out.requires.push(tir::Contract::Pred { expr, text: format!("{} <= {}", k.dims[dim].name, most), span });
        }
        out
    }

    /// The guard as `requires` clauses read.
    pub fn text(&self, k: &Kernel) -> String {
        let name = &k.dims[self.dim].name;
        let first = match (self.at_least > 1, self.at_most < i64::MAX) {
            (true, true) => format!("{} >= {}, {} <= {}", name, self.at_least, name, self.at_most),
            (false, true) => format!("{} <= {}", name, self.at_most),
            _ => format!("{} >= {}", name, self.at_least),
        };
        match self.also_at_most {
            Some((dim, most)) => format!("{}, {} <= {}", first, k.dims[dim].name, most),
            None => first,
        }
    }
}

/// A candidate of a kernel's tuning space that is not emitted, and why:
/// its own summation order cannot meet the declared tolerance (decided
/// here), or the build could not prove one of its obligations. A rejected
/// candidate has no code in the build, so it can never be launched; the
/// report and the tuner list it with its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub name: String,
    /// `KernelIr::params_text` of the candidate.
    pub params: String,
    pub reason: String,
}

/// A kernel's tuning space after scheduling: the candidates to prove and
/// emit (in the order an untuned launch tries them), and those rejected.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    pub variants: Vec<Variant>,
    pub rejected: Vec<Rejected>,
}

/// Alternative block sizes of the row schedule and the row lengths each
/// serves, `(block, shortest row, longest row)`; the default (`BLOCK`)
/// serves the rest. Measured on the H100 (bench/RESULTS.md, 2026-11-22):
/// rows of 1024 ran 1.2-1.7x faster with 128 threads, rows of 32000 1.5x
/// faster with 512; at 4096 the three sizes were within a few percent.
pub const ROW_VARIANTS: &[(u32, i64, i64)] = &[(128, 1, 2048), (512, 16384, i64::MAX)];

/// The cached row form's shapes (`row_cached`), `(block, slots)`, each
/// serving the rows longer than the one before serves, up to `block x
/// slots x width` columns (`width`: 16 bytes of the kernel's narrowest
/// row dtype; 8 for f16): 8192 f16 columns; longer rows take the plain
/// form (`ROW_VARIANTS`). Measured on the H100 (bench/run_cached_rows.sh,
/// bench/RESULTS.md, thirteenth session): softmax_bwd at 16384 x 4096
/// went from 86% to 98% of copy (256 x 2), row_norm_sq at 65536 x 1024
/// from 71% to 88-90% and softmax_fwd there from 54-56% to 63% (128 x 1);
/// softmax_fwd at 16384 x 4096 stayed at 59%; at 4096 x 32000 a 1024 x 4
/// form ran at 47% against the plain 512-thread form's 50%, so rows that
/// long are not cached.
pub const CACHED_ROWS: &[(u32, u32)] = &[(128, 1), (256, 1), (256, 2), (512, 2)];

/// More shapes of the cached row form, for the tuner only (an untuned
/// launch never takes them: their keys are empty): fewer threads a row
/// and more runs a thread, so that each thread has more 16-byte loads in
/// flight and a row needs fewer barriers (32 threads: one warp a row, its
/// reduction all shuffles). Each is proved like the rest before the tuner
/// may time it.
pub const TUNING_CACHED_ROWS: &[(u32, u32)] = &[(32, 4), (64, 2), (64, 4), (128, 2), (128, 4)];

/// When a matrix-unit variant is chosen: for outputs of at least
/// `MATRIX_UNIT_MIN_TILES` default (64 x 64) tiles, and for smaller ones
/// where the sum is at least `MATRIX_UNIT_LONG_SUM` long. Measured on
/// the H100 (bench/RESULTS.md, 2026-11-24): nano's weight gradient (128 x
/// 128 summed over 2048 rows) took 97 us on the SIMT `t16` tiles and 52
/// us on the unit, but nano at batch 128 (every sum 128 long, outputs of
/// 4 tiles) ran its step 24% slower with the unit's single blocks than
/// with 64 SIMT blocks.
pub const MATRIX_UNIT_MIN_TILES: i64 = 33;
/// When the warp-specialised variant is chosen: for outputs of at least
/// this many of its 256 x 128 tiles (see `warp_specialised_variants`).
/// Measured on the H100 (issue 19, bench/ws_crossover.sh, gemm_f16 at
/// K = 4096 with the form and without it in one run): 32 tiles (1024 x
/// 1024) ran at 104 TFLOP/s against the plain form's 149, 72 tiles (1536
/// x 1536) at 220 against 173, and every larger output gained (2048^2:
/// 350 against 304; 4096^3: 414 against 335). A block of 256 x 128 on
/// every other SM is where the deeper pipeline starts to pay for having
/// half as many blocks to spread.
pub const WARP_SPECIALISED_MIN_BLOCKS: i64 = 64;
pub const MATRIX_UNIT_LONG_SUM: i64 = 1024;
/// When the grouped walk of the warp-specialised form (`<kernel>_ws8`,
/// `grouped_variant`) is chosen: for outputs of at least this many of its
/// 256 x 128 tiles, where one wave of 132 resident blocks no longer holds
/// a whole band of tile rows and every column of B (measured in
/// bench/RESULTS.md, thirty-second session).
pub const GROUPED_MIN_BLOCKS: i64 = 1024;

/// A kernel's variants, in the order a launch tries them (the first whose
/// keys hold the launch's key and whose guard it meets): a contraction on
/// a matrix unit for long enough sums (`<kernel>_ws8`, `<kernel>_ws` with
/// `<kernel>_ws128` taken in its place where its waves end sooner (the
/// runtime's `KernelDef::choose_on`), `<kernel>_wg4`, then `<kernel>_wg`,
/// or `<kernel>_mma`) where the kernel itself admits shorter ones (a
/// kernel on the warpgroup unit itself: `<kernel>_wg4` where its sums may
/// be shorter than that variant's), a contraction with smaller
/// tiles (`<kernel>_t<size>`, by how many default tiles the output has), a
/// row schedule at other block sizes (`<kernel>_b<block>`, by row length).
pub fn schedule_variants(k: &Kernel, target: &Target, ir: &KernelIr) -> Result<Vec<Variant>, Diagnostic> {
    schedule_candidates(k, target, ir).map(|c| c.variants)
}

/// The kernel's tuning space: every variant of [`schedule_variants`], and
/// the candidates rejected before any proof because their summation order
/// cannot meet the declared tolerance.
pub fn schedule_candidates(k: &Kernel, target: &Target, ir: &KernelIr) -> Result<Candidates, Diagnostic> {
    let mut rejected = Vec::new();
    let mut variants = variants_of(k, target, ir, &mut rejected)?;
    if offers_intrinsics(k, target) {
        let twins: Vec<Variant> = variants.iter().filter_map(intrinsic_twin).collect();
        variants.extend(twins);
    }
    let observing = observing_twins(k, ir, &variants);
    variants.extend(observing);
    Ok(Candidates { variants, rejected })
}

/// The observing twins (`observe::observing_twin`) of a row schedule and
/// of each variant a launch takes by its key: empty keys themselves (a
/// launch takes one only in place of its original, while the monitor
/// observes), the original's guard. A variant only the tuner takes has
/// none: a launch on it is probed instead.
fn observing_twins(k: &Kernel, ir: &KernelIr, variants: &[Variant]) -> Vec<Variant> {
    let keyed = variants.iter().filter(|v| v.keys.0 <= v.keys.1).map(|v| (&v.ir, v.guard));
    std::iter::once((ir, None)).chain(keyed).filter_map(|(ir, guard)| observe::observing_twin(ir, k).map(|ir| Variant { ir, keys: (1, 0), guard, in_place_of: None })).collect()
}

/// Does `k` get fast-intrinsic candidates (`intrinsic_twin`)? On CUDA,
/// for a tolerance over a numeric domain (an intrinsic's error grows with
/// its argument, which bounds in launch-time magnitudes do not carry),
/// where the kernel has an f32 `exp` or `/` to print as one.
fn offers_intrinsics(k: &Kernel, target: &Target) -> bool {
    if !target.is_cuda() || k.uses_magnitudes() || k.tolerance.is_empty() {
        return false;
    }
    let mut uses = false;
    for s in &k.stmts {
        s.value.walk(&mut |e| {
            uses |= e.ty == crate::types::Dtype::F32 && matches!(e.kind, TExprKind::Call(tir::Builtin::Exp, _) | TExprKind::Binary(crate::syntax::ast::BinOp::Div, ..));
        });
    }
    uses
}

/// A cached row form that prints CUDA's fast intrinsics for its f32
/// `exp` and `/` (`<variant>_fi`, `KernelIr::fast_intrinsics`), for the
/// tuner only (empty keys). It is proved like the rest, its tolerance
/// under the intrinsics' documented error (`__expf`: `2 + floor(1.173
/// |x|)` ulp, `__fdividef`: 2 ulp, both flushing subnormals); the build
/// rejects it where that misses the declared tolerance. Offered where
/// `offers_intrinsics` says.
fn intrinsic_twin(v: &Variant) -> Option<Variant> {
    if !matches!(v.ir.schedule, Schedule::RowCached { .. }) {
        return None;
    }
    let mut ir = v.ir.clone();
    ir.fast_intrinsics = true;
    ir.name = format!("{}_fi", v.ir.name);
    Some(Variant { ir, keys: (1, 0), guard: v.guard, in_place_of: None })
}

fn variants_of(k: &Kernel, target: &Target, ir: &KernelIr, rejected: &mut Vec<Rejected>) -> Result<Vec<Variant>, Diagnostic> {
    if let Schedule::Warpgroup { .. } = ir.schedule {
        // On the unit already: warp specialisation for large outputs, the
        // wide promotion for long enough sums.
        let Some(plan) = contraction::detect(k) else { return Ok(Vec::new()) };
        let mut out: Vec<Variant> = narrow_variants(k, target, &plan, ir)?;
        out.extend(split_variant(k, target, &plan, ir)?);
        out.extend(grouped_variant(k, target, &plan, ir)?);
        out.extend(warp_specialised_variants(k, target, &plan, ir)?);
        out.extend(wide_promotion_variant(k, target, &plan, (i64::MIN, i64::MAX), i64::MAX)?);
        return Ok(out);
    }
    if let Schedule::Contraction { .. } = ir.schedule {
        let Some(plan) = contraction::detect(k) else { return Ok(Vec::new()) };
        let mut out: Vec<Variant> = narrow_variants(k, target, &plan, ir)?;
        out.extend(split_variant(k, target, &plan, ir)?);
        out.extend(matrix_unit_variant(k, target, &plan, ir)?);
        for &(tile, suffix, lo, hi) in contraction::SMALL_TILES {
            let mut v = contraction::schedule_with_tile(k, target, &plan, tile)?;
            v.name = format!("{}_{}", k.name, suffix);
            out.push(Variant { ir: v, keys: (lo, hi), guard: None, in_place_of: None });
        }
        return Ok(out);
    }
    let Schedule::RowReduction { rows_rank } = ir.schedule else { return Ok(Vec::new()) };
    if !ir.reduction_loops.iter().any(|r| r.cooperative) {
        return Ok(Vec::new());
    }
    let mut out = column_variants(k, target)?;
    out.extend(cached_row_variants(k, target, rows_rank as usize, rejected)?);
    for &(block, lo, hi) in ROW_VARIANTS {
        let mut v = row::schedule_with_block(k, target, rows_rank as usize, block)?;
        v.name = format!("{}_b{}", k.name, block);
        out.push(Variant { ir: v, keys: (lo, hi), guard: None, in_place_of: None });
    }
    Ok(out)
}

/// When the column form (`column`) is chosen: for launches of at least
/// this many columns (see `column_variants`). Measured on the H200
/// (bench/run_columns.sh, thirty-third session): at 4096 rows and 256
/// columns its 16 blocks took 0.0147 ms against the block a column's
/// 0.0200; at 512 columns 0.015 against 0.031. Nano's 128 columns keep
/// the row form (0.012 ms, launch-bound; the column form unmeasured there).
pub const COLUMN_MIN_COLUMNS: i64 = 256;

/// The column form of a kernel that sums down columns (`column::plan`):
/// `<kernel>_col` at `column::DEFAULT`, tried first, for launches of at
/// least `COLUMN_MIN_COLUMNS` columns (a guard: a choice, which the form
/// is proved under), where it has enough tiles to spread over the
/// multiprocessors; fewer columns keep the row schedule's block a
/// column. Then the tuner's shapes (`column::TUNING`, empty keys).
fn column_variants(k: &Kernel, target: &Target) -> Result<Vec<Variant>, Diagnostic> {
    let Some(plan @ (tir::Dim::Sym(cols), _)) = column::plan(k) else { return Ok(Vec::new()) };
    if k.dim_upper_bound(tir::Dim::Sym(cols)).is_some_and(|most| most < COLUMN_MIN_COLUMNS) {
        return Ok(Vec::new());
    }
    let guard = Some(Guard { dim: cols, at_least: COLUMN_MIN_COLUMNS, at_most: i64::MAX, any_key_from: i64::MAX, also_at_most: None });
    let mut out = Vec::new();
    let mut ir = column::schedule(k, target, plan, column::DEFAULT)?;
    ir.name = format!("{}_col", k.name);
    out.push(Variant { ir, keys: (i64::MIN, i64::MAX), guard, in_place_of: None });
    for &shape in column::TUNING {
        let mut ir = column::schedule(k, target, plan, shape)?;
        ir.name = format!("{}_col{}x{}x{}", k.name, shape.0, shape.1, shape.2);
        out.push(Variant { ir, keys: (1, 0), guard, in_place_of: None });
    }
    Ok(out)
}

/// When the narrow form (`narrow`) is chosen: outputs of at most its
/// shape's columns and sums of at least `NARROW_MIN_SUM` (its guard, a
/// choice the form is proved under), for outputs of at most
/// `NARROW_MAX_TILES` default (64 x 64) tiles. Shorter sums leave most of
/// a warp's lanes idle; they keep the split-sum form. Measured on the
/// H200 (bench/run_split.sh, bench/RESULTS.md, thirty-seventh session),
/// K = 2048: 3072 x 20 outputs 0.049 ms against the split-sum form's
/// 0.057, the router's 4096 x 4 0.049 against 0.056, 8192 x 20 even
/// (0.099), 16384 x 20 0.207 against 0.200.
pub const NARROW_MIN_SUM: i64 = 256;
pub const NARROW_MAX_TILES: i64 = 128;

/// The narrow form of a contraction whose sum runs along A's contiguous
/// axis (`<kernel>_nw`, `narrow::DEFAULT`), tried first: guarded by the
/// output's columns and the sum's length (`NARROW_MIN_SUM`), keyed by
/// the output's tiles (`NARROW_MAX_TILES`). Then the
/// tuner's shapes (`narrow::TUNING`, empty keys). None where no launch
/// can be that narrow and that long, or where the form does not apply
/// (`narrow::applies`: a weight gradient sums down A's columns; AMD's
/// 64-lane wavefronts).
fn narrow_variants(k: &Kernel, target: &Target, plan: &contraction::Plan, base: &KernelIr) -> Result<Vec<Variant>, Diagnostic> {
    if !narrow::applies(plan, target) {
        return Ok(Vec::new());
    }
    // The keys count the kernel's own tiles (`base`'s grid).
    let Some((bm, bn)) = own_tile(base) else { return Ok(Vec::new()) };
    let most = (NARROW_MAX_TILES * 64 * 64 + bm * bn - 1) / (bm * bn);
    let s = &k.stmts[0];
    let (tir::Dim::Sym(cols), tir::Dim::Sym(sum)) = (k.vars[s.vars[1]].extent, k.vars[plan.kvar].extent) else { return Ok(Vec::new()) };
    let (default, suffix) = narrow::DEFAULT;
    if k.dim_upper_bound(tir::Dim::Sym(sum)).is_some_and(|most| most < NARROW_MIN_SUM) || crate::accuracy::dim_bounds(k, cols).0 > default.cols as i64 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (shape, suffix, keys) in std::iter::once((default, suffix, (1, most))).chain(narrow::TUNING.iter().map(|&(shape, suffix)| (shape, suffix, (1, 0)))) {
        let guard = Guard { dim: sum, at_least: NARROW_MIN_SUM, at_most: i64::MAX, any_key_from: i64::MAX, also_at_most: Some((cols, shape.cols as i64)) };
        let guarded = guard.kernel(k);
        let Some(gplan) = contraction::detect(&guarded) else { return Ok(Vec::new()) };
        let mut ir = narrow::schedule(&guarded, target, &gplan, shape)?;
        ir.name = format!("{}_{}", k.name, suffix);
        out.push(Variant { ir, keys, guard: Some(guard), in_place_of: None });
    }
    Ok(out)
}

/// When the split-sum form (`split_sum`) is chosen: outputs of at most
/// `SPLIT_MAX_COLUMNS` columns and sums of at least `SPLIT_MIN_SUM` (its
/// guard, which the form is proved under: a choice), and at most as many
/// default tiles as its shapes' keys say (`split_sum::SHAPES`).
pub const SPLIT_MAX_COLUMNS: i64 = 32;
pub const SPLIT_MIN_SUM: i64 = 64;

/// The split-sum form of a contraction for narrow outputs of long sums
/// (`<kernel>_ks16`, `<kernel>_ks32`: `split_sum::SHAPES`, by how many
/// default tiles the output has), tried first: guarded by the output's
/// columns (`SPLIT_MAX_COLUMNS`) and the sum's length (`SPLIT_MIN_SUM`:
/// its order's bound, a chain of `K / 4` and two levels, is within a
/// sequential sum's from K = 4 on). Then the tuner's shapes (empty keys).
/// None for a residue contraction, or where no launch can be that narrow
/// and that long.
fn split_variant(k: &Kernel, target: &Target, plan: &contraction::Plan, base: &KernelIr) -> Result<Vec<Variant>, Diagnostic> {
    if plan.residue_term.is_some() || plan.acc_ty != crate::types::Dtype::F32 {
        return Ok(Vec::new());
    }
    let s = &k.stmts[0];
    let (tir::Dim::Sym(cols), tir::Dim::Sym(sum)) = (k.vars[s.vars[1]].extent, k.vars[plan.kvar].extent) else { return Ok(Vec::new()) };
    if k.dim_upper_bound(tir::Dim::Sym(sum)).is_some_and(|most| most < SPLIT_MIN_SUM) || crate::accuracy::dim_bounds(k, cols).0 > SPLIT_MAX_COLUMNS {
        return Ok(Vec::new());
    }
    // The keys count the kernel's own tiles (`base`'s grid).
    let Some((bm, bn)) = own_tile(base) else { return Ok(Vec::new()) };
    let in_own_tiles = |default_tiles: i64| (default_tiles * 64 * 64 + bm * bn - 1) / (bm * bn);
    let guard = Guard { dim: sum, at_least: SPLIT_MIN_SUM, at_most: i64::MAX, any_key_from: i64::MAX, also_at_most: Some((cols, SPLIT_MAX_COLUMNS)) };
    let guarded = guard.kernel(k);
    let Some(gplan) = contraction::detect(&guarded) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let mut least = 1;
    for &(shape, suffix, most) in split_sum::SHAPES {
        let mut ir = split_sum::schedule(&guarded, target, &gplan, shape)?;
        ir.name = format!("{}_{}", k.name, suffix);
        out.push(Variant { ir, keys: (least, in_own_tiles(most)), guard: Some(guard), in_place_of: None });
        least = in_own_tiles(most) + 1;
    }
    for &(shape, suffix) in split_sum::TUNING {
        let mut ir = split_sum::schedule(&guarded, target, &gplan, shape)?;
        ir.name = format!("{}_{}", k.name, suffix);
        out.push(Variant { ir, keys: (1, 0), guard: Some(guard), in_place_of: None });
    }
    Ok(out)
}

/// The cached row form at each of `CACHED_ROWS`'s shapes
/// (`<kernel>_c<block>x<slots>`), keyed by row length, where the kernel
/// fits it; none past the longest row the kernel admits. Then the
/// tuner's extra shapes (`TUNING_CACHED_ROWS`), with empty keys. Shapes
/// whose order misses the tolerance go to `rejected`.
fn cached_row_variants(k: &Kernel, target: &Target, prefix: usize, rejected: &mut Vec<Rejected>) -> Result<Vec<Variant>, Diagnostic> {
    let Some(plan) = row_cached::plan(k, prefix) else { return Ok(Vec::new()) };
    // The row length as a dim: the guard bounds it.
    let tir::Dim::Sym(dim) = plan.extent else { return Ok(Vec::new()) };
    let longest = k.dim_upper_bound(plan.extent);
    let mut out = Vec::new();
    let mut shortest = 1;
    for &(block, slots) in CACHED_ROWS {
        if longest.is_some_and(|most| most < shortest) {
            break;
        }
        let cap = (block * slots * plan.width) as i64;
        match cached_row_variant(k, target, prefix, dim, longest, block, slots, cap)? {
            CachedShape::Proposed(ir, guard) => {
                out.push(Variant { ir: *ir, keys: (shortest, cap), guard, in_place_of: None });
                shortest = cap + 1;
            }
            CachedShape::Rejected(r) => rejected.push(r),
            CachedShape::Unfit => break,
        }
    }
    for &(block, slots) in TUNING_CACHED_ROWS {
        let cap = (block * slots * plan.width) as i64;
        // A shape for rows far longer than any the kernel admits is not
        // worth its proofs.
        if longest.is_some_and(|most| most <= cap / 4) {
            continue;
        }
        match cached_row_variant(k, target, prefix, dim, longest, block, slots, cap)? {
            // Empty keys: only a tuned choice takes it.
            CachedShape::Proposed(ir, guard) => out.push(Variant { ir: *ir, keys: (1, 0), guard, in_place_of: None }),
            CachedShape::Rejected(r) => rejected.push(r),
            CachedShape::Unfit => break,
        }
    }
    Ok(out)
}

/// One shape of the cached row form for a kernel.
enum CachedShape {
    /// To prove and emit, with its guard.
    Proposed(Box<KernelIr>, Option<Guard>),
    /// Its summation order misses the declared tolerance.
    Rejected(Rejected),
    /// The kernel does not fit the cached form.
    Unfit,
}

/// The cached row form of `block` threads and `slots` runs a thread,
/// `<kernel>_c<block>x<slots>`, with its guard (rows of at most `cap`, where
/// the kernel admits longer ones); rejected where its summation order
/// misses the declared tolerance.
#[allow(clippy::too_many_arguments)]
fn cached_row_variant(k: &Kernel, target: &Target, prefix: usize, dim: usize, longest: Option<i64>, block: u32, slots: u32, cap: i64) -> Result<CachedShape, Diagnostic> {
    let guard = longest.is_none_or(|most| most > cap).then_some(Guard { dim, at_least: 1, at_most: cap, any_key_from: i64::MAX, also_at_most: None });
    let guarded = guard.map(|g| g.kernel(k));
    let kernel = guarded.as_ref().unwrap_or(k);
    let Some(mut ir) = row_cached::schedule(kernel, target, prefix, block, slots)? else { return Ok(CachedShape::Unfit) };
    ir.name = format!("{}_c{}x{}", k.name, block, slots);
    if let Some(reason) = misses_declared_tolerance(kernel, &ir) {
        return Ok(CachedShape::Rejected(Rejected { name: ir.name.clone(), params: ir.params_text(), reason }));
    }
    Ok(CachedShape::Proposed(Box::new(ir), guard))
}

/// Why a candidate schedule's own summation order misses the kernel's
/// declared tolerance, if it does (`None`: it meets it). Asked of
/// candidates that change the order (the cached rows sum runs of 8 in
/// each thread, which raises the constant part of a bound): the
/// tolerance is the kernel's contract, so a candidate that cannot meet
/// it is rejected, never the tolerance loosened for it. Decidable here
/// for tolerances in launch-time magnitudes (`accuracy::magnitude`, no
/// solver); a tolerance over a numeric domain is proved with the solver
/// at build time, where a candidate that fails is rejected there
/// (`build::compile_with`).
fn misses_declared_tolerance(k: &Kernel, ir: &crate::kir::KernelIr) -> Option<String> {
    use crate::accuracy::magnitude::Verdict;
    if !k.uses_magnitudes() {
        return None;
    }
    let a = crate::accuracy::magnitude::analyze(k, ir);
    a.outputs.iter().find_map(|o| {
        if let Some((why, _)) = &o.failure {
            return Some(format!("no error bound derived for `{}`: {}", o.output, why));
        }
        match &o.verdict {
            Some(Verdict::Within(_)) => None,
            Some(Verdict::Exceeds { at, bound, tolerance }) => {
                let point: Vec<String> = a.symbols.iter().zip(at).map(|(s, v)| format!("{} = {}", s, v)).collect();
                Some(format!("the bound derived for `{}` in this summation order, {} (= {:.3e} at {}), exceeds the declared tolerance {} (= {:.3e})", o.output, a.show(&o.abs), bound, point.join(", "), a.show(&o.tolerance.0), tolerance))
            }
            Some(Verdict::Undecided(why)) => Some(format!("the bound derived for `{}` is not shown within the declared tolerance: {}", o.output, why)),
            None => Some(format!("no verdict on `{}`'s tolerance", o.output)),
        }
    })
}

/// A matrix unit's schedule: the shortest sum its bound holds for, the
/// variant's name suffix, whether it fits, and the schedule itself.
type Unit = (i64, &'static str, fn(&Kernel, &Target, &contraction::Plan) -> bool, fn(&Kernel, &Target, contraction::Plan) -> Result<KernelIr, Diagnostic>);

/// A contraction that runs on CUDA cores because its sum may be shorter
/// than a matrix unit's bound needs: the first unit that admits it with
/// the sum at least that long, as a guarded variant (see [`Guard`]); on
/// the warpgroup unit also its wide promotion for longer sums, tried
/// first, and `mma.sync` after it for the sums the warpgroup unit's bound
/// does not cover (64 to 127: the MoE's first layer, `Linear(96, h)`,
/// ran on CUDA cores, 62-79 us a launch in the tiny step).
fn matrix_unit_variant(k: &Kernel, target: &Target, plan: &contraction::Plan, base: &KernelIr) -> Result<Vec<Variant>, Diagnostic> {
    let keys = (MATRIX_UNIT_MIN_TILES, i64::MAX);
    let mma: Unit = (tensor_core::MIN_K, "mma", tensor_core::admits, tensor_core::schedule);
    let units: [Unit; 2] = [(warpgroup::MIN_K, "wg", warpgroup::admits, warpgroup::schedule), mma];
    for unit in units {
        if let Some(v) = guarded_variant(k, target, plan, unit, keys, MATRIX_UNIT_LONG_SUM)? {
            let on_warpgroups = unit.1 == "wg";
            let mut out: Vec<Variant> = Vec::new();
            if on_warpgroups {
                out.extend(grouped_variant(k, target, plan, base)?);
                out.extend(warp_specialised_variants(k, target, plan, base)?);
                out.extend(wide_promotion_variant(k, target, plan, keys, MATRIX_UNIT_LONG_SUM)?);
            }
            out.push(v);
            if on_warpgroups {
                out.extend(guarded_variant(k, target, plan, mma, keys, MATRIX_UNIT_LONG_SUM)?);
            }
            return Ok(out);
        }
    }
    Ok(Vec::new())
}

/// The warp-specialised form (`<kernel>_ws`, `warpgroup::schedule_specialised`:
/// a producer warpgroup, 256 x 128 tiles, the wide promotion) for
/// outputs of at least `WARP_SPECIALISED_MIN_BLOCKS` of its tiles,
/// guarded by the wide promotion's shortest sum where the kernel admits
/// shorter ones. The key counts the kernel's own tiles (`base`'s grid),
/// so the threshold is converted into them. After it, the same form on
/// 128 x 128 tiles (`<kernel>_ws128`,
/// `warpgroup::schedule_specialised_rows128`) under the same guard, with
/// no keys of its own: a launch takes it only in place of `_ws`, where its
/// waves end sooner (`Variant::in_place_of`).
fn warp_specialised_variants(k: &Kernel, target: &Target, plan: &contraction::Plan, base: &KernelIr) -> Result<Vec<Variant>, Diagnostic> {
    let Some(ws) = specialised_form(k, target, plan, base, (WARP_SPECIALISED_MIN_BLOCKS, "ws", warpgroup::schedule_specialised))? else { return Ok(Vec::new()) };
    let rows128 = specialised_form(k, target, plan, base, (WARP_SPECIALISED_MIN_BLOCKS, "ws128", warpgroup::schedule_specialised_rows128))?;
    let rows128 = rows128.map(|v| Variant { keys: (1, 0), in_place_of: Some((ws.ir.name.clone(), warpgroup::ROWS128_WAVE_TIME)), ..v });
    Ok(std::iter::once(ws).chain(rows128).collect())
}

/// The warp-specialised form with its blocks walking the output in
/// groups of tile rows (`<kernel>_ws8`,
/// `warpgroup::schedule_specialised_grouped`), for outputs of at least
/// `GROUPED_MIN_BLOCKS` of its tiles, where the operands' reuse in L2
/// pays; tried before `<kernel>_ws`.
fn grouped_variant(k: &Kernel, target: &Target, plan: &contraction::Plan, base: &KernelIr) -> Result<Option<Variant>, Diagnostic> {
    specialised_form(k, target, plan, base, (GROUPED_MIN_BLOCKS, "ws8", warpgroup::schedule_specialised_grouped))
}

/// A warp-specialised form (`schedule`, 256 x 128 tiles, the wide
/// promotion) named `<kernel>_<suffix>` for outputs of at least
/// `min_blocks` of its tiles, guarded by the wide promotion's shortest
/// sum where the kernel admits shorter ones. The key counts the kernel's
/// own tiles (`base`'s grid), so the threshold is converted into them.
fn specialised_form(k: &Kernel, target: &Target, plan: &contraction::Plan, base: &KernelIr, (min_blocks, suffix, schedule): (i64, &'static str, SpecialisedSchedule)) -> Result<Option<Variant>, Diagnostic> {
    let Some((bm, bn)) = own_tile(base) else { return Ok(None) };
    let per_block = (warpgroup::SPECIALISED_TILE.0 * warpgroup::SPECIALISED_TILE.1) as i64;
    let keys = ((min_blocks * per_block + bm * bn - 1) / (bm * bn), i64::MAX);
    if contraction::sums_at_least(k, plan, warpgroup::MIN_K_WIDE) {
        if !warpgroup::admits(k, target, plan) {
            return Ok(None);
        }
        let Some(plan) = contraction::detect(k) else { return Ok(None) };
        let mut ir = schedule(k, target, plan)?;
        ir.name = format!("{}_{}", k.name, suffix);
        return Ok(Some(Variant { ir, keys, guard: None, in_place_of: None }));
    }
    guarded_variant(k, target, plan, (warpgroup::MIN_K_WIDE, suffix, warpgroup::admits, schedule), keys, i64::MAX)
}

/// The output tile of a contraction's own schedule, `(bm, bn)`: what a
/// variant's keys count (`codegen::launch::variant_key`).
fn own_tile(base: &KernelIr) -> Option<(i64, i64)> {
    match base.schedule {
        Schedule::Warpgroup { bm, bn, .. } | Schedule::Contraction { bm, bn, .. } | Schedule::TensorCore { bm, bn, .. } => Some((bm as i64, bn as i64)),
        _ => None,
    }
}

/// A schedule of the warp-specialised family.
type SpecialisedSchedule = fn(&Kernel, &Target, contraction::Plan) -> Result<KernelIr, Diagnostic>;

/// The warpgroup schedule with one promotion a slab (`<kernel>_wg4`,
/// `warpgroup::MIN_K_WIDE`), guarded by the sum's length, for a kernel
/// on the unit (or with a unit variant) whose sums may be shorter; none
/// where every sum is that long already (the kernel's own schedule
/// promotes so).
fn wide_promotion_variant(k: &Kernel, target: &Target, plan: &contraction::Plan, keys: (i64, i64), any_key_from: i64) -> Result<Option<Variant>, Diagnostic> {
    if contraction::sums_at_least(k, plan, warpgroup::MIN_K_WIDE) {
        return Ok(None);
    }
    guarded_variant(k, target, plan, (warpgroup::MIN_K_WIDE, "wg4", warpgroup::admits, warpgroup::schedule), keys, any_key_from)
}

/// `unit`'s schedule of `k` with the sum at least the unit's shortest as
/// a guard, named `<kernel>_<suffix>`; none where no sum can be that long
/// or the unit does not fit.
fn guarded_variant(k: &Kernel, target: &Target, plan: &contraction::Plan, (min_k, suffix, admits, schedule): Unit, keys: (i64, i64), any_key_from: i64) -> Result<Option<Variant>, Diagnostic> {
    let tir::Dim::Sym(dim) = k.vars[plan.kvar].extent else { return Ok(None) };
    if k.dim_upper_bound(tir::Dim::Sym(dim)).is_some_and(|most| most < min_k) {
        return Ok(None);
    }
    let guard = Guard { dim, at_least: min_k, at_most: i64::MAX, any_key_from, also_at_most: None };
    let guarded = guard.kernel(k);
    let Some(gplan) = contraction::detect(&guarded) else { return Ok(None) };
    if !admits(&guarded, target, &gplan) {
        return Ok(None);
    }
    let mut ir = schedule(&guarded, target, gplan)?;
    ir.name = format!("{}_{}", k.name, suffix);
    Ok(Some(Variant { ir, keys, guard: Some(guard), in_place_of: None }))
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
