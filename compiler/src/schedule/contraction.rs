//! Contraction schedule: `y[m, n] = f(sum(k) a(m, k) * b(k, n), m, n)`.
//!
//! Each block owns a BM x BN output tile; 256 threads (16 x 16) each own a
//! TM x TN micro-tile strided by 16 (conflict-free shared reads, coalesced
//! stores). The k loop walks BK-deep slabs: both operands are loaded into
//! shared memory (guarded, zero-padded; the loader's fastest index follows
//! each operand's contiguous axis, so transposed operands stay coalesced),
//! a barrier, TM x TN fused multiply-adds per k, a barrier. The epilogue
//! applies the rest of the statement per element, guarded by M and N.
//! SIMT for now; tensor-core instructions are a later schedule.

use super::lower::{node_key, Builder, Env};
use super::tile_skip::{skip_slab, stage_valuations, ValuationTiles};
use super::extent_expr;
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::syntax::ast::{BinOp, RedOp};
use crate::target::Target;
use crate::tir::{self, Builtin, Kernel, TExpr, TExprKind, VarId};
use crate::types::Dtype;

/// The output tile of a block and each thread's micro-tile: `bm x bn`
/// outputs per block, `tm x tn` per thread, `bk`-deep slabs of k. Always
/// 16 x 16 threads (`bm / tm = bn / tn = 16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub tm: u32,
    pub tn: u32,
    /// Threads beside the tile's own that only copy operands into shared
    /// memory (a producer warp, `schedule::warpgroup`): they follow the
    /// `threads()` that compute, and fill the copy ring alone.
    pub producer: u32,
    /// Blocks walk the output tiles in groups of this many tile rows
    /// ([`Tile::origin`]); 1: row by row.
    pub group: u32,
    /// Thread groups that split each slab's k between them, each holding
    /// the whole micro-tile's partial sums (`schedule::split_sum`); 1:
    /// every thread sums all of k.
    pub kgroups: u32,
}

impl Tile {
    /// The threads that compute the tile: `tm x tn` outputs each, in
    /// `kgroups` groups.
    pub(super) fn threads(self) -> u32 {
        (self.bm / self.tm) * (self.bn / self.tn) * self.kgroups
    }
    /// The block: the computing threads and the producer's.
    pub(super) fn block(self) -> u32 {
        self.threads() + self.producer
    }
    /// The block's output tile as `(tile row, tile column)`.
    ///
    /// Row by row (`group` 1), block `(x, y)` owns tile `(y, x)`: the
    /// blocks resident at once read a few tile rows of A and every tile
    /// column of B. In groups of `g` tile rows the grid has a third axis:
    /// block `(x, y, z)` owns tile row `g z + x` and column `y`, so
    /// consecutive blocks (x runs fastest, then y) walk down `g` tile rows
    /// of one column before the next column, and a wave of resident blocks
    /// reads `g` tile rows of A and the few columns of B it needs, which
    /// L2 holds. Every term is linear in the block's indices: the coverage
    /// witnesses ([`Tile::block_of`]) invert it with one division and one
    /// remainder by the constant `g`. (An earlier two-axis walk, `x % g`
    /// and `x / g` inside the origin, left the prover a Diophantine step
    /// per witness and made the build prove for more than 30 CPU
    /// minutes.) A block whose row lies past M has nothing to do.
    pub(super) fn origin(self) -> (IExpr, IExpr) {
        let g = self.group as i64;
        let (row, col) = if g > 1 { (IExpr::BlockIdx(0).add(IExpr::BlockIdx(2).mul(IExpr::c(g))), IExpr::BlockIdx(1)) } else { (IExpr::BlockIdx(1), IExpr::BlockIdx(0)) };
        (row.mul(IExpr::c(self.bm as i64)), col.mul(IExpr::c(self.bn as i64)))
    }

    /// The grid for outputs of `mext x next` ([`Tile::origin`]'s walk).
    pub(super) fn grid(self, mext: &IExpr, next: &IExpr) -> Vec<GridDim> {
        let (rows, cols) = (mext.clone().ceil_div(self.bm as i64), next.clone().ceil_div(self.bn as i64));
        let g = self.group as i64;
        if g > 1 {
            vec![GridDim::Exact(IExpr::c(g)), GridDim::Exact(cols), GridDim::Exact(rows.ceil_div(g))]
        } else {
            vec![GridDim::Exact(cols), GridDim::Exact(rows)]
        }
    }

    /// The block that owns tile `(row, col)` (the inverse of
    /// [`Tile::origin`]), as coverage witnesses.
    pub(super) fn block_of(self, row: IExpr, col: IExpr) -> Vec<(Witness, IExpr)> {
        let g = self.group as i64;
        if g > 1 {
            vec![(Witness::BlockIdx(0), row.clone().rem(IExpr::c(g))), (Witness::BlockIdx(1), col), (Witness::BlockIdx(2), row.div(IExpr::c(g)))]
        } else {
            vec![(Witness::BlockIdx(1), row), (Witness::BlockIdx(0), col)]
        }
    }

    /// The threads that issue the ring's copies, `(first thread id,
    /// count)`: the producer where there is one, else every thread.
    pub(super) fn copiers(self) -> (u32, u32) {
        if self.producer > 0 {
            (self.threads(), self.producer)
        } else {
            (0, self.threads())
        }
    }
}

/// The default tile: 64 x 64 outputs per block, 4 x 4 per thread.
pub const TILE: Tile = Tile { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4, producer: 0, group: 1, kgroups: 1 };

/// Smaller tiles for outputs that the default tile would cover with too few
/// blocks to fill the device, `(tile, suffix, most default tiles served)`:
/// a 128 x 128 output is 4 default tiles (4 of 132 SMs busy) but 64 tiles
/// of 16 x 16. Chosen by how many default tiles the output has; measured
/// in bench/RESULTS.md.
pub const SMALL_TILES: &[(Tile, &str, i64, i64)] = &[
    (Tile { bm: 16, bn: 16, bk: 16, tm: 1, tn: 1, producer: 0, group: 1, kgroups: 1 }, "t16", 1, 32),
    (Tile { bm: 32, bn: 32, bk: 16, tm: 2, tn: 2, producer: 0, group: 1, kgroups: 1 }, "t32", 33, 132),
];

pub struct Plan<'k> {
    pub(super) reduce: &'k TExpr,
    pub(super) kvar: VarId,
    pub(super) a: &'k TExpr,
    pub(super) b: &'k TExpr,
    /// Is k the contiguous (last) index of the A operand's tensor?
    pub(super) a_k_contiguous: bool,
    pub(super) b_k_contiguous: bool,
    pub(super) acc_ty: Dtype,
    /// A residue contraction (`summod(k) t`, issue 23): the summed term
    /// `t`, `mulmod(a, b)` or that under a `skip_if` on the two factors'
    /// valuations. Each step of the micro-tile adds `t` of the two
    /// fragments' registers with `addmod` (see [`residue_step`]).
    pub(super) residue_term: Option<&'k TExpr>,
}

/// Is the summed dim at least `min` for every launch `requires` admits?
/// (The matrix-unit schedules' bound holds only for sums that long.)
pub(super) fn sums_at_least(k: &Kernel, p: &Plan, min: i64) -> bool {
    match k.vars[p.kvar].extent {
        tir::Dim::Sym(d) => crate::accuracy::dim_bounds(k, d).0 >= min,
        tir::Dim::Lit(v) => v >= min,
    }
}

/// Vars an expression reads tensors with (plain index variables only).
fn load_vars(e: &TExpr, ok: &mut bool) -> Vec<(VarId, bool)> {
    let mut out = Vec::new();
    e.walk(&mut |x| match &x.kind {
        TExprKind::Load { index, .. } => {
            for (j, i) in index.iter().enumerate() {
                match i.as_var() {
                    Some(v) => out.push((v, j + 1 == index.len())),
                    None => *ok = false,
                }
            }
        }
        TExprKind::Reduce { .. } => *ok = false,
        _ => {}
    });
    out
}

pub fn detect(k: &Kernel) -> Option<Plan<'_>> {
    if k.stmts.len() != 1 || k.stmts[0].vars.len() != 2 {
        return None;
    }
    let s = &k.stmts[0];
    let reds = tir::top_reductions(&s.value);
    let [reduce] = reds.as_slice() else { return None };
    let TExprKind::Reduce { op, var, body } = &reduce.kind else { return None };
    let (a, b, residue_term) = match op {
        RedOp::Sum => {
            let (a, b) = tir::fma_operands(body)?;
            (a, b, None)
        }
        RedOp::SumMod => {
            let (a, b) = residue_operands(body)?;
            (a, b, Some(body.as_ref()))
        }
        _ => return None,
    };
    let (m, n) = (s.vars[0], s.vars[1]);
    let mut ok = true;
    let va = load_vars(a, &mut ok);
    let vb = load_vars(b, &mut ok);
    let only = |vs: &[(VarId, bool)], x: VarId| vs.iter().all(|(v, _)| *v == x || *v == *var) && vs.iter().any(|(v, _)| *v == x) && vs.iter().any(|(v, _)| v == var);
    if !ok || !only(&va, m) || !only(&vb, n) {
        return None;
    }
    // The rest of the statement may use m and n but no other reduction.
    let contiguous = |vs: &[(VarId, bool)]| vs.iter().any(|(v, last)| v == var && *last);
    Some(Plan { reduce, kvar: *var, a, b, a_k_contiguous: contiguous(&va), b_k_contiguous: contiguous(&vb), acc_ty: body.ty, residue_term })
}

/// The factors of a residue term: `mulmod(a, b)`, or `skip_if(c,
/// mulmod(a, b))` whose condition reads no tensor element but `a` and `b`
/// (their valuations), each a load of its own tensor (a step binds each
/// tensor's element to one register).
fn residue_operands(term: &TExpr) -> Option<(&TExpr, &TExpr)> {
    let product = match &term.kind {
        TExprKind::Call(Builtin::SkipIf, args) => &args[1],
        _ => term,
    };
    let TExprKind::Call(Builtin::MulMod, f) = &product.kind else { return None };
    let (a, b) = (&f[0], &f[1]);
    let (TExprKind::Load { tensor: ta, .. }, TExprKind::Load { tensor: tb, .. }) = (&a.kind, &b.kind) else { return None };
    if ta == tb {
        return None;
    }
    if let TExprKind::Call(Builtin::SkipIf, args) = &term.kind {
        let mut only_factors = true;
        args[0].walk(&mut |x| {
            if matches!(x.kind, TExprKind::Load { .. }) && !x.same_as(a, &[]) && !x.same_as(b, &[]) {
                only_factors = false;
            }
        });
        if !only_factors {
            return None;
        }
    }
    Some((a, b))
}

pub fn schedule(k: &Kernel, target: &Target, p: Plan) -> Result<KernelIr, Diagnostic> {
    schedule_with_tile(k, target, &p, TILE)
}

pub fn schedule_with_tile(k: &Kernel, target: &Target, p: &Plan, t: Tile) -> Result<KernelIr, Diagnostic> {
    let Tile { bm, bn, bk, tm, tn, .. } = t;
    let schedule = Schedule::Contraction { bm, bn, bk, tm, tn };
    let mut b = Builder::new(k, target, schedule, t.threads());
    b.ir.reduction_order.insert(p.kvar, ReductionOrder::Sequential);
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let mext = extent_expr(k.vars[mvar].extent);
    let next = extent_expr(k.vars[nvar].extent);
    let kext = extent_expr(k.vars[p.kvar].extent);
    let ty = p.acc_ty;
    let a_sh = b.shared("a_tile", ty, bk * bm);
    let b_sh = b.shared("b_tile", ty, bk * bn);
    let tx_v = b.ivar("tx");
    let ty_v = b.ivar("ty");
    let m0_v = b.ivar("m0");
    let n0_v = b.ivar("n0");
    let (tx, tyy, m0, n0) = (IExpr::Var(tx_v), IExpr::Var(ty_v), IExpr::Var(m0_v), IExpr::Var(n0_v));
    let (m0_e, n0_e) = t.origin();
    let mut body = vec![
        KStmt::LetInt { var: tx_v, value: IExpr::Tid.rem(IExpr::c((bn / tn) as i64)) },
        KStmt::LetInt { var: ty_v, value: IExpr::Tid.div(IExpr::c((bn / tn) as i64)) },
        KStmt::LetInt { var: m0_v, value: m0_e },
        KStmt::LetInt { var: n0_v, value: n0_e },
    ];
    let acc = b.local("acc", ty);
    body.push(KStmt::DeclArray { arr: acc, len: tm * tn, init: Some(VExpr::zero(ty)) });
    let k0_v = b.ivar("k0");
    let k0 = IExpr::Var(k0_v);
    let mut kbody = Vec::new();
    // Operand tiles: A[bk][bm] from a(m, k), B[bk][bn] from b(k, n).
    tile_load(&mut b, t, SlabLayout::KMajor { stride: bm }, p.a, a_sh, mvar, p.kvar, bm, p.a_k_contiguous, &m0, &k0, &mext, &kext, &mut kbody)?;
    tile_load(&mut b, t, SlabLayout::KMajor { stride: bn }, p.b, b_sh, nvar, p.kvar, bn, p.b_k_contiguous, &n0, &k0, &next, &kext, &mut kbody)?;
    let valuations = skips_tiles(p, &b).then(|| ValuationTiles::new(&mut b, t));
    if let Some(v) = valuations {
        stage_valuations(&mut kbody, a_sh, v.a, ty);
        stage_valuations(&mut kbody, b_sh, v.b, ty);
    }
    kbody.push(KStmt::Barrier);
    let kk_v = b.ivar("kk");
    let kk = IExpr::Var(kk_v);
    let afrag = b.local("a_frag", ty);
    let bfrag = b.local("b_frag", ty);
    let i_v = b.ivar("i");
    let j_v = b.ivar("j");
    let (iv, jv) = (IExpr::Var(i_v), IExpr::Var(j_v));
    // Where a thread's fragments lie in the slabs: row i of its micro-tile
    // at step kk, and column j.
    let a_at = |kk: IExpr, i: IExpr| kk.mul(IExpr::c(bm as i64)).add(tyy.clone()).add(i.mul(IExpr::c((bm / tm) as i64)));
    let b_at = |kk: IExpr, j: IExpr| kk.mul(IExpr::c(bn as i64)).add(tx.clone()).add(j.mul(IExpr::c((bn / tn) as i64)));
    let inner = vec![
        KStmt::unrolled(i_v, tm, vec![KStmt::ArraySet { arr: afrag, index: iv.clone(), value: VExpr::new(VKind::SharedGet { arr: a_sh, index: a_at(kk.clone(), iv.clone()) }, ty) }]),
        KStmt::unrolled(j_v, tn, vec![KStmt::ArraySet { arr: bfrag, index: jv.clone(), value: VExpr::new(VKind::SharedGet { arr: b_sh, index: b_at(kk.clone(), jv.clone()) }, ty) }]),
        match p.residue_term {
            None => fma_tile(t, acc, afrag, bfrag, ty, &mut b),
            Some(term) => {
                let tile_skip_k = valuations.and(b.ir.modulus).map(|m| m.k);
                residue_step(t, acc, (afrag, bfrag), p, computed_term(term, p, tile_skip_k), &mut b)?
            }
        },
    ];
    let frags = vec![KStmt::DeclArray { arr: afrag, len: tm, init: None }, KStmt::DeclArray { arr: bfrag, len: tn, init: None }];
    let kname = b.k.vars[p.kvar].name.clone();
    b.ir.reduction_loops.push(ReductionLoop { var: kk_v, extent: IExpr::c(bk as i64), cooperative: false, granule: 1, name: format!("`{}` within a slab", kname), span: b.k.vars[p.kvar].span, visits: None });
    b.ir.reduction_loops.push(ReductionLoop { var: k0_v, extent: kext.clone(), cooperative: false, granule: bk as i64, name: format!("the slabs of `{}`", kname), span: b.k.vars[p.kvar].span, visits: None });
    let slab = KStmt::unrolled(kk_v, bk, [frags, inner].concat());
    match (valuations, b.ir.modulus) {
        (Some(v), Some(m)) => kbody.extend(skip_slab(&mut b, t, m.k, v, &a_at, &b_at, slab)),
        _ => kbody.push(slab),
    }
    kbody.push(KStmt::Barrier);
    body.push(KStmt::For { var: k0_v, start: IExpr::c(0), end: kext, step: IExpr::c(bk as i64), unroll: false, body: kbody });
    // Epilogue: the statement with the sum replaced by the accumulator.
    let sums = |slot: IExpr| VExpr::new(VKind::ArrayGet { arr: acc, index: slot }, ty);
    body.push(tile_epilogue(&mut b, p, t, (&m0, &n0), (&tyy, &tx), &sums)?);
    b.ir.grid = t.grid(&mext, &next);
    b.ir.body = body;
    Ok(b.finish())
}

/// The SIMT tile's epilogue: each thread's `tm x tn` outputs, at rows
/// `m0 + ty + 16 i` and columns `n0 + tx + 16 j` (16: `bm / tm`, `bn /
/// tn`), the statement with the sum replaced by `sums(slot)` (slot `i tn +
/// j`), each stored where it lies in the output, and the output's
/// coverage: element (m, n) by the block of tile (m / bm, n / bn), the
/// thread (m % 16, n % 16) (of the first thread group, where groups
/// split the sum), micro-tile slot ((m % bm) / 16, (n % bn) / 16).
pub(super) fn tile_epilogue(b: &mut Builder, p: &Plan, t: Tile, (m0, n0): (&IExpr, &IExpr), (ty, tx): (&IExpr, &IExpr), sums: &dyn Fn(IExpr) -> VExpr) -> Result<KStmt, Diagnostic> {
    let Tile { bm, bn, tm, tn, .. } = t;
    let k = b.k;
    let s = &k.stmts[0];
    let (mvar, nvar) = (s.vars[0], s.vars[1]);
    let (mext, next) = (extent_expr(k.vars[mvar].extent), extent_expr(k.vars[nvar].extent));
    let ei = b.ivar("i");
    let ej = b.ivar("j");
    let gm = b.ivar(&k.vars[mvar].name.clone());
    let gn = b.ivar(&k.vars[nvar].name.clone());
    let mut env = Env::default();
    env.vars.insert(mvar, IExpr::Var(gm));
    env.vars.insert(nvar, IExpr::Var(gn));
    let slot = IExpr::Var(ei).mul(IExpr::c(tn as i64)).add(IExpr::Var(ej));
    env.reduced.insert(node_key(p.reduce), sums(slot).cast(p.reduce.ty));
    let mut store = Vec::new();
    let value = b.lower(&s.value, &mut env, &mut store)?;
    let access = b.store(s, value, &env, &mut store);
    let (xm, xn) = (b.ivar("elem_m"), b.ivar("elem_n"));
    let (m, n) = (IExpr::Var(xm), IExpr::Var(xn));
    let step_m = (bm / tm) as i64;
    let step_n = (bn / tn) as i64;
    let mut assign = t.block_of(m.clone().div(IExpr::c(bm as i64)), n.clone().div(IExpr::c(bn as i64)));
    assign.extend([
        (Witness::Tid, m.clone().rem(IExpr::c(step_m)).mul(IExpr::c(step_n)).add(n.clone().rem(IExpr::c(step_n)))),
        (Witness::Var(ei), m.rem(IExpr::c(bm as i64)).div(IExpr::c(step_m))),
        (Witness::Var(ej), n.rem(IExpr::c(bn as i64)).div(IExpr::c(step_n))),
    ]);
    b.cover_axes(s.target, vec![xm, xn], vec![CoverCase { when: Cond::True, access, assign }]);
    let guarded = vec![
        KStmt::LetInt { var: gm, value: m0.clone().add(ty.clone()).add(IExpr::Var(ei).mul(IExpr::c(step_m))) },
        KStmt::LetInt { var: gn, value: n0.clone().add(tx.clone()).add(IExpr::Var(ej).mul(IExpr::c(step_n))) },
        KStmt::If { cond: IExpr::Var(gm).lt(mext).and(IExpr::Var(gn).lt(next)), then: store, els: vec![] },
    ];
    Ok(KStmt::unrolled(ei, tm, vec![KStmt::unrolled(ej, tn, guarded)]))
}

/// The term a step computes. Under the tile skip, a slab that is not
/// skipped computes every product: `skip_if(c, e)` permits 0 where `c`
/// holds but always admits `e`, and on SIMT lanes one product's valuations
/// cost more than the product (measured, bench/RESULTS.md: per-product
/// skipping was 2x the dense time at 2^16 and 6x at 3^10 with no slab
/// skipped). What skipping saves, it saves whole slabs at a time.
/// Only a condition that is the rule itself (`vp(a) + vp(b) >= c`, `c >=
/// k`, so valid with nothing to prove) is left out: any other stays
/// printed, so that the prover proves or refutes it as written
/// (`examples/invalid/skip_below_threshold.tk`).
fn computed_term<'k>(term: &'k TExpr, p: &Plan, tile_skip_k: Option<u32>) -> &'k TExpr {
    match (&term.kind, tile_skip_k) {
        (TExprKind::Call(Builtin::SkipIf, args), Some(k)) if is_the_rule(&args[0], p, k) => &args[1],
        _ => term,
    }
}

/// Is a skip condition `vp(a) + vp(b) >= c` over the plan's factors, with
/// `c >= k`?
fn is_the_rule(cond: &TExpr, p: &Plan, k: u32) -> bool {
    let TExprKind::Binary(BinOp::Ge, sum, bound) = &cond.kind else { return false };
    let TExprKind::Const(tir::Const::Int(c)) = &bound.kind else { return false };
    let TExprKind::Binary(BinOp::Add, x, y) = &sum.kind else { return false };
    let of = |e: &TExpr, f: &TExpr| matches!(&e.kind, TExprKind::Call(Builtin::Vp, v) if v[0].same_as(f, &[]));
    *c >= k as i64 && ((of(x, p.a) && of(y, p.b)) || (of(x, p.b) && of(y, p.a)))
}

/// Does the contraction skip slabs? Where its term is a `skip_if` (the
/// kernel asks for skipping; a dense residue product computes every
/// product) and the kernel has a modulus.
fn skips_tiles(p: &Plan, b: &Builder) -> bool {
    matches!(p.residue_term.map(|t| &t.kind), Some(TExprKind::Call(Builtin::SkipIf, _))) && b.ir.modulus.is_some()
}

pub(super) fn fma_tile(t: Tile, acc: LocalId, afrag: LocalId, bfrag: LocalId, ty: Dtype, b: &mut Builder) -> KStmt {
    let Tile { tm, tn, .. } = t;
    let i_v = b.ivar("i");
    let j_v = b.ivar("j");
    let slot = IExpr::Var(i_v).mul(IExpr::c(tn as i64)).add(IExpr::Var(j_v));
    let fma = VExpr::new(
        VKind::Fma(
            Box::new(VExpr::new(VKind::ArrayGet { arr: afrag, index: IExpr::Var(i_v) }, ty)),
            Box::new(VExpr::new(VKind::ArrayGet { arr: bfrag, index: IExpr::Var(j_v) }, ty)),
            Box::new(VExpr::new(VKind::ArrayGet { arr: acc, index: slot.clone() }, ty)),
        ),
        ty,
    );
    KStmt::unrolled(i_v, tm, vec![KStmt::unrolled(j_v, tn, vec![KStmt::ArraySet { arr: acc, index: slot, value: fma }])])
}

/// One k step of a residue contraction's micro-tile: `acc[i][j] =
/// addmod(acc[i][j], t)` with the term `t` over the registers `a_el =
/// a_frag[i]` and `b_el = b_frag[j]`. A `skip_if`'s valuations read the
/// same registers, so the prover reads the condition off the printed term
/// exactly as for a product of two loads; the fragments are unrolled, so
/// the compiler computes each register's valuation once per step, `tm +
/// tn` of them for `tm * tn` products.
fn residue_step(t: Tile, acc: LocalId, (afrag, bfrag): (LocalId, LocalId), p: &Plan, term: &TExpr, b: &mut Builder) -> Result<KStmt, Diagnostic> {
    let Tile { tm, tn, .. } = t;
    let ty = p.acc_ty;
    let (TExprKind::Load { tensor: ta, .. }, TExprKind::Load { tensor: tb, .. }) = (&p.a.kind, &p.b.kind) else { unreachable!("residue_operands returns loads") };
    let (a_el, b_el) = (b.local("a_el", ty), b.local("b_el", ty));
    let mut env = Env::default();
    env.values.insert(*ta, a_el);
    env.values.insert(*tb, b_el);
    let mut lets = Vec::new();
    let value = b.lower(term, &mut env, &mut lets)?;
    let i_v = b.ivar("i");
    let j_v = b.ivar("j");
    let slot = IExpr::Var(i_v).mul(IExpr::c(tn as i64)).add(IExpr::Var(j_v));
    let running = VExpr::new(VKind::ArrayGet { arr: acc, index: slot.clone() }, ty);
    let sum = VExpr::new(VKind::Call(Builtin::AddMod, vec![running, value]), ty);
    let mut step = vec![KStmt::Decl { local: b_el, init: Some(VExpr::new(VKind::ArrayGet { arr: bfrag, index: IExpr::Var(j_v) }, ty)) }];
    step.extend(lets);
    step.push(KStmt::ArraySet { arr: acc, index: slot, value: sum });
    let row = vec![KStmt::Decl { local: a_el, init: Some(VExpr::new(VKind::ArrayGet { arr: afrag, index: IExpr::Var(i_v) }, ty)) }, KStmt::unrolled(j_v, tn, step)];
    Ok(KStmt::unrolled(i_v, tm, row))
}

/// How a slab sits in shared memory: `tile[kk * stride + x]` (k-major, the
/// SIMT schedule's with `stride` the tile's width: a thread's micro-tile
/// reads along x), or `tile[x * stride + kk]` (k contiguous). A stride
/// padded past the width keeps a warp's matrix-unit fragment reads off
/// each other's banks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlabLayout {
    KMajor { stride: u32 },
    KContiguous { stride: u32 },
    /// The warpgroup unit's core matrices (`kir::WgOperand`): element
    /// (x, kk) at `(x / 8) * sbo + (kk / 8) * lbo` plus, within its 8 x 8
    /// core matrix, `(x % 8) * 8 + kk % 8` where k runs along the core
    /// matrix's rows (`k_inner`), else `(kk % 8) * 8 + x % 8`.
    Cores { lbo: u32, sbo: u32, k_inner: bool },
    /// Rows of 64 elements under the 128-byte swizzle, as bulk tensor
    /// copies lay a box (`kir::swizzled_offset`): where k is the
    /// operand's contiguous axis (`k_inner`), row x holds its 64 k; else
    /// boxes of 64 x (one after another, each `64 * bk` elements), row kk
    /// of a box holding its 64 x.
    Swizzled { k_inner: bool, bk: u32 },
}

impl SlabLayout {
    /// Where element (x, kk) of the slab lies.
    pub(super) fn index(self, x: IExpr, kk: IExpr) -> IExpr {
        match self {
            SlabLayout::KMajor { stride } => kk.mul(IExpr::c(stride as i64)).add(x),
            SlabLayout::KContiguous { stride } => x.mul(IExpr::c(stride as i64)).add(kk),
            SlabLayout::Cores { lbo, sbo, k_inner } => core_offset(x, kk, lbo as i64, sbo as i64, k_inner),
            SlabLayout::Swizzled { k_inner, bk } => swizzled_slab_offset(x, kk, k_inner, SWIZZLE_ROW * bk as i64, 8 * SWIZZLE_ROW),
        }
    }
    /// Into core matrices, slab position `p` (the layout's image of one
    /// (x, kk)) and back: `(x, kk)` of position `p`. The loaders walk
    /// core-matrix slabs in position order, so that a store's index is
    /// its position (linear in the thread id: race-freedom needs no
    /// reasoning about the layout's divisions) and its element follows
    /// from it. Needs core matrices that follow each other along k (`lbo`
    /// 64) in rows of `sbo / 64` of them.
    pub(super) fn element_at(self, p: IExpr) -> Option<(IExpr, IExpr)> {
        let SlabLayout::Cores { lbo: 64, sbo, k_inner } = self else { return None };
        if sbo % 64 != 0 {
            // Padded rows of core matrices: positions are not slots.
            return None;
        }
        let (c8, row8) = (p.clone().rem(IExpr::c(8)), p.clone().div(IExpr::c(8)).rem(IExpr::c(8)));
        let chunk = p.clone().div(IExpr::c(64)).rem(IExpr::c(sbo as i64 / 64));
        let group = p.div(IExpr::c(sbo as i64));
        let (x_in, k_in) = if k_inner { (row8, c8) } else { (c8, row8) };
        Some((group.mul(IExpr::c(8)).add(x_in), chunk.mul(IExpr::c(8)).add(k_in)))
    }

    /// Do the vector loaders fill this slab in position order (run `l` at
    /// position `8 l`, a row of a core matrix)? Core matrices back to
    /// back along k in unpadded rows: eight consecutive runs then fill one
    /// 128-byte line of shared memory (eight distinct bank groups), and a
    /// store's index is linear in the thread id. A padded `lbo` or `sbo`
    /// spreads one line of the operand over the banks instead, and its
    /// runs follow the operand's rows. (With m or n along the core
    /// matrices' rows a warp's runs read 16 bytes of each of 32 rows of
    /// the operand; walking its rows instead put every run of a quarter
    /// warp on the same four banks, and a walk that does both took the
    /// race queries from 25 to 275 s.)
    pub(super) fn in_position_order(self) -> bool {
        matches!(self, SlabLayout::Cores { lbo: 64, sbo, .. } if sbo % 64 == 0)
    }

    /// Does k run along the slab's contiguous axis?
    fn k_contiguous(self) -> bool {
        match self {
            SlabLayout::KMajor { .. } => false,
            SlabLayout::KContiguous { .. } => true,
            SlabLayout::Cores { k_inner, .. } | SlabLayout::Swizzled { k_inner, .. } => k_inner,
        }
    }
}

/// Load one operand slab into shared memory in `layout`, `x` the tile's
/// output-axis offset. The thread-to-element map makes the fastest-varying
/// thread index follow the operand's contiguous axis.
#[allow(clippy::too_many_arguments)]
pub(super) fn tile_load(
    b: &mut Builder,
    t: Tile,
    layout: SlabLayout,
    operand: &TExpr,
    tile: SharedId,
    out_var: VarId,
    kvar: VarId,
    width: u32,
    k_contiguous: bool,
    origin: &IExpr,
    k0: &IExpr,
    out_ext: &IExpr,
    kext: &IExpr,
    out: &mut Vec<KStmt>,
) -> Result<(), Diagnostic> {
    load_slab(b, t, layout, operand, tile, (out_var, kvar), width, k_contiguous, (origin, k0), (out_ext, kext), false, out)
}

/// [`tile_load`] in a constant count of rounds where the block divides
/// the slab (else as `tile_load`): round `r` of thread `tid` loads
/// position `tid + r block`, the rounds unrolled, so that every load of
/// a thread is in flight before its first store (a loop from `tid` has
/// no count the compiler knows, and each round's load waited for the
/// previous round's store).
#[allow(clippy::too_many_arguments)]
pub(super) fn tile_load_in_rounds(
    b: &mut Builder,
    t: Tile,
    layout: SlabLayout,
    operand: &TExpr,
    tile: SharedId,
    vars: (VarId, VarId),
    width: u32,
    k_contiguous: bool,
    at: (&IExpr, &IExpr),
    exts: (&IExpr, &IExpr),
    out: &mut Vec<KStmt>,
) -> Result<(), Diagnostic> {
    load_slab(b, t, layout, operand, tile, vars, width, k_contiguous, at, exts, true, out)
}

#[allow(clippy::too_many_arguments)]
fn load_slab(
    b: &mut Builder,
    t: Tile,
    layout: SlabLayout,
    operand: &TExpr,
    tile: SharedId,
    (out_var, kvar): (VarId, VarId),
    width: u32,
    k_contiguous: bool,
    (origin, k0): (&IExpr, &IExpr),
    (out_ext, kext): (&IExpr, &IExpr),
    rounds: bool,
    out: &mut Vec<KStmt>,
) -> Result<(), Diagnostic> {
    let bk = t.bk;
    let rounds = (rounds && (width * bk) % t.block() == 0).then(|| (b.ivar("r"), width * bk / t.block()));
    let l_v = b.ivar("l");
    let l = IExpr::Var(l_v);
    let x_v = b.ivar("x");
    let kk_v = b.ivar("kk");
    let (xo, kko) = if let Some(at) = layout.element_at(l.clone()) {
        at
    } else if k_contiguous {
        (l.clone().div(IExpr::c(bk as i64)), l.clone().rem(IExpr::c(bk as i64)))
    } else {
        (l.clone().rem(IExpr::c(width as i64)), l.clone().div(IExpr::c(width as i64)))
    };
    let g_v = b.ivar(&b.k.vars[out_var].name.clone());
    let gk_v = b.ivar(&b.k.vars[kvar].name.clone());
    let mut env = Env::default();
    env.vars.insert(out_var, IExpr::Var(g_v));
    env.vars.insert(kvar, IExpr::Var(gk_v));
    let mut then = Vec::new();
    let v = b.lower(operand, &mut env, &mut then)?.cast(b.ir.shared[tile].ty);
    // The loader position of a slab element: round and thread, or the
    // strided loop's variable.
    let position: Box<dyn Fn(IExpr) -> Vec<(Witness, IExpr)>> = match rounds {
        Some((r_v, _)) => {
            let block = t.block() as i64;
            Box::new(move |l: IExpr| vec![(Witness::Var(r_v), l.clone().div(IExpr::c(block))), (Witness::Tid, l.rem(IExpr::c(block)))])
        }
        None => Box::new(move |l: IExpr| vec![(Witness::Var(l_v), l)]),
    };
    operand_cover(b, t, operand, &v, (out_var, kvar), width, layout, k_contiguous, &*position, k0);
    // Into core matrices the loader walks positions (see `element_at`).
    let index = if layout.element_at(l.clone()).is_some() { l.clone() } else { layout.index(IExpr::Var(x_v), IExpr::Var(kk_v)) };
    then.push(KStmt::SharedSet { arr: tile, index: index.clone(), value: v });
    let zero = vec![KStmt::SharedSet { arr: tile, index, value: VExpr::zero(b.ir.shared[tile].ty) }];
    let mut body = vec![
        KStmt::LetInt { var: x_v, value: xo },
        KStmt::LetInt { var: kk_v, value: kko },
        KStmt::LetInt { var: g_v, value: origin.clone().add(IExpr::Var(x_v)) },
        KStmt::LetInt { var: gk_v, value: k0.clone().add(IExpr::Var(kk_v)) },
        KStmt::If { cond: IExpr::Var(g_v).lt(out_ext.clone()).and(IExpr::Var(gk_v).lt(kext.clone())), then, els: zero },
    ];
    match rounds {
        Some((r_v, count)) => {
            body.insert(0, KStmt::LetInt { var: l_v, value: IExpr::Tid.add(IExpr::Var(r_v).mul(IExpr::c(t.block() as i64))) });
            out.push(KStmt::unrolled(r_v, count, body));
        }
        None => out.push(KStmt::For { var: l_v, start: IExpr::Tid, end: IExpr::c((width * bk) as i64), step: IExpr::c(t.block() as i64), unroll: false, body }),
    }
    Ok(())
}

/// Every element of a plain operand `t[o, k]` or `t[k, o]` is loaded into a
/// tile: every tile and every k-slab is covered. Element x of `t` is the
/// pair (o, k); the block whose tile holds o loads it in slab k / bk, at
/// loop position l of the loader.
#[allow(clippy::too_many_arguments)]
fn operand_cover(b: &mut Builder, t: Tile, operand: &TExpr, v: &VExpr, (out_var, kvar): (VarId, VarId), width: u32, layout: SlabLayout, k_contiguous: bool, position: &dyn Fn(IExpr) -> Vec<(Witness, IExpr)>, k0: &IExpr) {
    let Tile { bm, bk, .. } = t;
    // Only a (cast) load of one tensor indexed by plain (o, k) or (k, o).
    let mut inner = operand;
    while let TExprKind::Cast(a) = &inner.kind {
        inner = a;
    }
    let TExprKind::Load { tensor, index } = &inner.kind else { return };
    let vars: Vec<Option<VarId>> = index.iter().map(|i| i.as_var()).collect();
    let o_first = match vars.as_slice() {
        [Some(a), Some(c)] if *a == out_var && *c == kvar => true,
        [Some(a), Some(c)] if *a == kvar && *c == out_var => false,
        _ => return,
    };
    let mut access = None;
    fn find(v: &VExpr, out: &mut Option<AccessId>) {
        match &v.kind {
            VKind::Load { access, .. } => *out = Some(*access),
            VKind::Cast(a) | VKind::Unary(_, a) => find(a, out),
            _ => {}
        }
    }
    find(v, &mut access);
    let (Some(access), IExpr::Var(k0_v)) = (access, k0.clone()) else { return };
    // The element as its two axes: no division by a dim in the witness.
    let axes = [b.ivar("elem_0"), b.ivar("elem_1")];
    let (o, k) = if o_first { (IExpr::Var(axes[0]), IExpr::Var(axes[1])) } else { (IExpr::Var(axes[1]), IExpr::Var(axes[0])) };
    let (xo, kk) = (o.clone().rem(IExpr::c(width as i64)), k.clone().rem(IExpr::c(bk as i64)));
    let l = if layout.element_at(IExpr::c(0)).is_some() {
        layout.index(xo, kk)
    } else if k_contiguous {
        xo.mul(IExpr::c(bk as i64)).add(kk)
    } else {
        kk.mul(IExpr::c(width as i64)).add(xo)
    };
    // The first block whose tile holds o: in the tile row of o and the
    // first column (A), or the column of o and the first row (B).
    let tile = o.div(IExpr::c(width as i64));
    let a_side = width == bm && out_var != kvar && b.k.stmts[0].vars[0] == out_var;
    let (row, col) = if a_side { (tile, IExpr::c(0)) } else { (IExpr::c(0), tile) };
    let mut assign = t.block_of(row, col);
    assign.push((Witness::Var(k0_v), k.div(IExpr::c(bk as i64)).mul(IExpr::c(bk as i64))));
    assign.extend(position(l));
    let buf = b.buf(*tensor);
    let what = format!("every element of `{}` is loaded into a tile (every tile, every k)", b.k.tensors[*tensor].name);
    b.ir.coverage.push(Cover { buf, elem: axes.to_vec(), cases: vec![CoverCase { when: Cond::True, access, assign }], what });
}

/// The plain tensor an operand reads, `t[o, k]` (o first) or `t[k, o]`,
/// under casts: `(tensor, o_first)`.
pub(super) fn plain_operand(operand: &TExpr, out_var: VarId, kvar: VarId) -> Option<(tir::TensorId, bool)> {
    let mut inner = operand;
    while let TExprKind::Cast(a) = &inner.kind {
        inner = a;
    }
    let TExprKind::Load { tensor, index } = &inner.kind else { return None };
    match index.iter().map(|i| i.as_var()).collect::<Vec<_>>().as_slice() {
        [Some(a), Some(c)] if *a == out_var && *c == kvar => Some((*tensor, true)),
        [Some(a), Some(c)] if *a == kvar && *c == out_var => Some((*tensor, false)),
        _ => None,
    }
}

/// The launch's choice of slab loader, made once in the kernel and the
/// same for every thread: `vectors` is 1 where every plain operand's rows
/// are whole 16-byte runs (its last dim a multiple of [`VECTOR`]) and
/// every buffer 16-byte aligned, else 0 (the element loader).
pub(super) fn vector_decision(b: &mut Builder, p: &Plan, (mvar, nvar): (VarId, VarId), out: &mut Vec<KStmt>) -> IVar {
    let vectors = b.ivar("vectors");
    let mut whole_runs = Cond::True;
    let mut bufs = Vec::new();
    for (operand, out_var) in [(p.a, mvar), (p.b, nvar)] {
        if let Some((tensor, _)) = plain_operand(operand, out_var, p.kvar) {
            let last = extent_expr(b.k.tensors[tensor].shape[1]);
            whole_runs = whole_runs.and(Cond::Eq(last.rem(IExpr::c(VECTOR as i64)), IExpr::c(0)));
            bufs.push(b.buf(tensor));
        }
    }
    bufs.dedup();
    let use_vectors = Cond::Aligned(bufs, 16).and(whole_runs);
    out.push(KStmt::LetInt { var: vectors, value: IExpr::Select(Box::new(use_vectors), Box::new(IExpr::c(1)), Box::new(IExpr::c(0))) });
    vectors
}

/// The loop over the slabs of the summed dim `kvar`, `bk` at a time (a
/// reduction loop: the verifier proves it visits every slab once).
pub(super) fn slab_loop(b: &mut Builder, k0: IVar, kvar: VarId, bk: u32, body: Vec<KStmt>) -> KStmt {
    let kext = extent_expr(b.k.vars[kvar].extent);
    let (name, span) = (format!("the slabs of `{}`", b.k.vars[kvar].name), b.k.vars[kvar].span);
    b.ir.reduction_loops.push(ReductionLoop { var: k0, extent: kext.clone(), cooperative: false, granule: bk as i64, name, span, visits: None });
    KStmt::For { var: k0, start: IExpr::c(0), end: kext, step: IExpr::c(bk as i64), unroll: false, body }
}

/// Stages of a slab ring ([`ring_pipeline`]); the schedules size their
/// ring arrays by it.
pub(super) const STAGES: u32 = 2;

/// The vector path of a tensor-core schedule, pipelined through registers
/// over a ring of two stages per operand (each array `stage_len`
/// elements a stage): slab 0 fetched and stored into stage 0 before the
/// loop; the iteration of slab k0 fetches slab k0 + bk, and `slab` builds
/// the work on stage `(k0 / bk) % 2` given the stores of the fetched runs
/// into the other stage (placed where the schedule's protocol allows),
/// then one barrier. `proxy_fence`: the matrix unit reads the slabs
/// through the asynchronous proxy, so every batch of stores is followed
/// by a proxy fence. Marks both arrays as rings (`kir::Ring`): a stage is
/// refilled only after the barrier that follows its last read (the
/// race-freedom proof), and each stage is read and filled only in the
/// iterations of its slabs (the ring obligation). The last iteration
/// fetches the (zero) slab past K: cheaper than a guard, and one guard
/// fewer to get wrong.
pub(super) struct RingPipeline {
    /// The fetches' accesses (per operand) before the loop and in it, for
    /// coverage ([`VectorSlab::cover`]).
    pub first: [Vec<AccessId>; 2],
    pub ahead: [Vec<AccessId>; 2],
    pub k0: IVar,
    pub stmts: Vec<KStmt>,
}

impl RingPipeline {
    /// Operand `which`'s fetches (`v`'s) as cases of the element loader's
    /// coverage where vectors are `on`.
    pub(super) fn cover(&self, b: &mut Builder, v: &VectorSlab, which: usize, on: Cond) {
        v.cover(b, on, &self.first[which], &self.ahead[which], self.k0);
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn ring_pipeline(
    b: &mut Builder,
    (va, vb): (&VectorSlab, &VectorSlab),
    (a_stage, b_stage): (i64, i64),
    kvar: VarId,
    proxy_fence: bool,
    mut stmts: Vec<KStmt>,
    slab: impl FnOnce(&mut Builder, IExpr, Vec<KStmt>) -> Vec<KStmt>,
) -> RingPipeline {
    let bk = va.bk;
    let zero = IExpr::c(0);
    let (ra, rb) = (va.registers(b, &mut stmts), vb.registers(b, &mut stmts));
    let first = [va.fetch(b, &ra, &zero, &mut stmts), vb.fetch(b, &rb, &zero, &mut stmts)];
    va.store(&ra, &zero, &mut stmts);
    vb.store(&rb, &zero, &mut stmts);
    if proxy_fence {
        stmts.push(KStmt::ProxyFence);
    }
    stmts.push(KStmt::Barrier);
    let k0 = b.ivar("k0");
    let ahead_k = IExpr::Var(k0).add(IExpr::c(bk as i64));
    let (stage_v, refill_v) = (b.ivar("stage"), b.ivar("refill"));
    let mut kbody = vec![
        KStmt::LetInt { var: stage_v, value: IExpr::Var(k0).div(IExpr::c(bk as i64)).rem(IExpr::c(STAGES as i64)) },
        KStmt::LetInt { var: refill_v, value: ahead_k.clone().div(IExpr::c(bk as i64)).rem(IExpr::c(STAGES as i64)) },
    ];
    let (ra, rb) = (va.registers(b, &mut kbody), vb.registers(b, &mut kbody));
    let ahead = [va.fetch(b, &ra, &ahead_k, &mut kbody), vb.fetch(b, &rb, &ahead_k, &mut kbody)];
    let mut stores = Vec::new();
    va.store(&ra, &IExpr::Var(refill_v).mul(IExpr::c(a_stage)), &mut stores);
    vb.store(&rb, &IExpr::Var(refill_v).mul(IExpr::c(b_stage)), &mut stores);
    if proxy_fence {
        stores.push(KStmt::ProxyFence);
    }
    kbody.extend(slab(b, IExpr::Var(stage_v), stores));
    kbody.push(KStmt::Barrier);
    b.ir.shared[va.tile].ring = Some(Ring { stages: STAGES, stage_len: a_stage, of: k0, step: bk as i64, ahead: 1, prologue: None, filled_by: None });
    b.ir.shared[vb.tile].ring = Some(Ring { stages: STAGES, stage_len: b_stage, of: k0, step: bk as i64, ahead: 1, prologue: None, filled_by: None });
    stmts.push(slab_loop(b, k0, kvar, bk, kbody));
    RingPipeline { first, ahead, k0, stmts }
}

/// The vector path of a tensor-core schedule over a ring of `stages`
/// stages filled by asynchronous copies (`cp.async`), `stages - 1` slabs
/// ahead of the matrix unit: a prologue loop copies slabs 0 .. ahead into
/// their stages, one group each; the iteration of slab k0 waits until its
/// own slab's group has landed (at most `ahead - 1` younger ones still in
/// flight), proxy-fences (`proxy_fence`: the unit reads through the
/// asynchronous proxy), meets the others at its one barrier (after which
/// nobody reads the stage the last iteration read), and runs `slab` on the
/// stage of slab k0: its first part (the unit's issue), the copies of slab
/// k0 + ahead into the stage the last iteration read and their commit,
/// then its second part (the wait and what follows it), so the copies'
/// issue overlaps the unit's work. After the loop the thread waits for
/// every copy (the last ones, past K, fill zeros). With `computers`, the
/// threads it names run `slab` (both parts, back to back) while the
/// others, a producer (`Tile::producer`), issue every copy, in the same
/// places of the loop. The ring is marked with its depth and
/// prologue (`kir::Ring`); when each copy has landed and been published is
/// derived by the verifier from this loop's commit, wait and barrier
/// (`verify::protocol::CopyTiming`).
pub(super) struct CopyRing {
    pub first: [Copies; 2],
    pub ahead: [Copies; 2],
    pub prologue: IVar,
    pub k0: IVar,
    pub lookahead: i64,
    pub stmts: Vec<KStmt>,
}

impl CopyRing {
    /// Operand `which`'s copies (`v`'s) as cases of the element loader's
    /// coverage where vectors are `on`.
    pub(super) fn cover(&self, b: &mut Builder, v: &VectorSlab, which: usize, on: Cond) {
        v.cover_ahead(b, on, (&self.first[which], Some(self.prologue)), &self.ahead[which], (self.k0, self.lookahead));
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn copy_ring(
    b: &mut Builder,
    (va, vb): (&VectorSlab, &VectorSlab),
    (a_stage, b_stage): (i64, i64),
    stages: u32,
    kvar: VarId,
    proxy_fence: bool,
    computers: Option<Cond>,
    mut stmts: Vec<KStmt>,
    slab: impl FnOnce(&mut Builder, IExpr) -> (Vec<KStmt>, Vec<KStmt>),
) -> CopyRing {
    let bk = va.bk as i64;
    let ahead = stages as i64 - 1;
    let p = b.ivar("p");
    let mut copies = Vec::new();
    let at = IExpr::Var(p).div(IExpr::c(bk));
    let first = copy_stage(b, (va, vb), &IExpr::Var(p), &at, (a_stage, b_stage), &mut copies);
    let mut pro = match &computers {
        Some(c) => vec![KStmt::If { cond: Cond::Not(Box::new(c.clone())), then: copies, els: vec![] }],
        None => copies,
    };
    pro.push(KStmt::CpAsyncCommit);
    stmts.push(KStmt::For { var: p, start: IExpr::c(0), end: IExpr::c(ahead * bk), step: IExpr::c(bk), unroll: false, body: pro });
    let k0 = b.ivar("k0");
    let ahead_k = IExpr::Var(k0).add(IExpr::c(ahead * bk));
    let (stage_v, refill_v) = (b.ivar("stage"), b.ivar("refill"));
    let mut kbody = vec![KStmt::CpAsyncWait { pending: ahead as u32 - 1 }];
    if proxy_fence {
        kbody.push(KStmt::ProxyFence);
    }
    kbody.push(KStmt::Barrier);
    kbody.push(KStmt::LetInt { var: stage_v, value: IExpr::Var(k0).div(IExpr::c(bk)).rem(IExpr::c(stages as i64)) });
    kbody.push(KStmt::LetInt { var: refill_v, value: ahead_k.clone().div(IExpr::c(bk)).rem(IExpr::c(stages as i64)) });
    let (issue, finish) = slab(b, IExpr::Var(stage_v));
    let refill = IExpr::Var(refill_v);
    let mut copies = Vec::new();
    let ahead_acc = copy_stage(b, (va, vb), &ahead_k, &refill, (a_stage, b_stage), &mut copies);
    match computers {
        // The computing threads run the slab while the producer copies.
        Some(cond) => {
            kbody.push(KStmt::If { cond, then: issue.into_iter().chain(finish).collect(), els: copies });
            kbody.push(KStmt::CpAsyncCommit);
        }
        None => {
            kbody.extend(issue);
            kbody.extend(copies);
            kbody.push(KStmt::CpAsyncCommit);
            kbody.extend(finish);
        }
    }
    for (v, len) in [(va, a_stage), (vb, b_stage)] {
        b.ir.shared[v.tile].ring = Some(Ring { stages, stage_len: len, of: k0, step: bk, ahead: ahead as u32, prologue: Some(p), filled_by: None });
    }
    stmts.push(slab_loop(b, k0, kvar, bk as u32, kbody));
    stmts.push(KStmt::CpAsyncWait { pending: 0 });
    CopyRing { first, ahead: ahead_acc, prologue: p, k0, lookahead: ahead, stmts }
}

/// Both operands' slab `k_s` copied into ring stage `stage` (each operand's
/// stage `*_stage` elements long), A's copies first.
pub(super) fn copy_stage(b: &mut Builder, (va, vb): (&VectorSlab, &VectorSlab), k_s: &IExpr, stage: &IExpr, (a_stage, b_stage): (i64, i64), out: &mut Vec<KStmt>) -> [Copies; 2] {
    [va.copy(b, k_s, &stage.clone().mul(IExpr::c(a_stage)), out), vb.copy(b, k_s, &stage.clone().mul(IExpr::c(b_stage)), out)]
}

/// The copies of one operand's slab at one place of the kernel: their
/// read accesses, one a run, or one for all where an unrolled loop over
/// `run` walks the thread's runs (`Runs::Looped`).
pub(super) struct Copies {
    pub accesses: Vec<AccessId>,
    /// The looped copy's digits `(hi, lo)`: its run is `digit * hi + lo`.
    pub run: Option<(IVar, IVar)>,
}

/// A thread's runs of a slab.
enum Runs {
    /// Each run's place (x, kk), bound once before the loop.
    Fixed(Vec<(IVar, IVar)>),
    /// `count` runs, placed by two unrolled loops at each copy, run
    /// `digit * hi + lo`: a producer warp copies 32 runs of each operand
    /// a thread, and one copy site instead of 32 keeps the verifier's
    /// race pairs few. The digits are chosen so that every index is linear
    /// in them (`VectorSlab::looped_place_in`): with one run counter the
    /// padded layouts' divisions of `lane + 32 run` left Z3 undecided.
    Looped { count: u32, digit: u32 },
}

/// Elements per vector of the vectorised slab loader: 16 bytes of 16-bit
/// elements.
pub const VECTOR: u32 = 8;

/// One operand's slab moved by 16-byte vectors through registers, `runs`
/// runs of [`VECTOR`] elements per thread: [`VectorSlab::fetch`] reads the
/// thread's runs of slab `k_s` into its registers, [`VectorSlab::store`]
/// writes them into shared memory (zeros past M, N or K). Between the two
/// the thread may run the matrix unit on the previous slab, so the global
/// read's latency hides behind it (the schedule's software pipeline).
/// The caller takes vectors only where the operand's last dim is a
/// multiple of [`VECTOR`] and its buffer 16-byte aligned: the verifier
/// asks both of every vector read.
///
/// Run `l` of the slab is copier `l % threads`'s run `l / threads` (the
/// copiers: every thread, or a producer's, `Tile::copiers`). Runs
/// follow the operand's contiguous axis; into core matrices with k along
/// their rows ([`SlabLayout::Cores`], A) unpadded, eight consecutive runs
/// fill the eight rows of one core matrix (128 contiguous bytes: a
/// quarter warp's stores on distinct banks); everywhere else consecutive
/// runs are consecutive 16-byte pieces of one row of the operand
/// (coalesced reads), each in a different core matrix (the layout's
/// padded strides, `lbo` along k or `sbo` along m or n, spread them over
/// the banks).
pub(super) struct VectorSlab {
    tensor: tir::TensorId,
    o_first: bool,
    k_contiguous: bool,
    buf: BufId,
    tile: SharedId,
    layout: SlabLayout,
    out_var: VarId,
    kvar: VarId,
    width: u32,
    bk: u32,
    /// The copying threads: `threads` of them from thread id `first` on
    /// (`Tile::copiers`).
    first: u32,
    threads: u32,
    /// Each run's place in the slab: (x, kk) of its first element.
    runs: Runs,
    /// The tile's first index along the operand's output axis, and the
    /// extents of that axis and of k.
    origin: IExpr,
    out_ext: IExpr,
    kext: IExpr,
}

impl VectorSlab {
    /// The thread's runs (`x`, `kk` from the thread id) and their
    /// registers; `None` where the slab's contiguous axis is not the
    /// operand's, the operand is not a plain load of the slab's dtype, or
    /// the runs do not split evenly over the threads.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(b: &mut Builder, t: Tile, layout: SlabLayout, operand: &TExpr, tile: SharedId, (out_var, kvar): (VarId, VarId), width: u32, (origin, out_ext, kext): (&IExpr, &IExpr, &IExpr), out: &mut Vec<KStmt>) -> Option<VectorSlab> {
        let ty = b.ir.shared[tile].ty;
        if !Self::fits(b, t, layout, operand, ty, (out_var, kvar), width) {
            return None;
        }
        let (tensor, o_first) = plain_operand(operand, out_var, kvar)?;
        let k_contiguous = o_first;
        let total = width * t.bk / VECTOR;
        let (first, threads) = t.copiers();
        let looped = if t.producer > 0 { Self::looped_digit(layout, k_contiguous, width, t.bk, threads) } else { None };
        let runs = if let Some(digit) = looped.filter(|d| (total / threads).is_multiple_of(*d)) {
            Runs::Looped { count: total / threads, digit }
        } else {
            let mut runs = Vec::new();
            for r in 0..total / threads {
                let (x, kk) = (b.ivar("x"), b.ivar("kk"));
                let l = Self::copier(first, threads).add(IExpr::c((r * threads) as i64));
                let (xo, kko) = Self::place(layout, k_contiguous, width, t.bk, l);
                out.push(KStmt::LetInt { var: x, value: xo });
                out.push(KStmt::LetInt { var: kk, value: kko });
                runs.push((x, kk));
            }
            Runs::Fixed(runs)
        };
        let buf = b.buf(tensor);
        Some(VectorSlab { tensor, o_first, k_contiguous, buf, tile, layout, out_var, kvar, width, bk: t.bk, first, threads, runs, origin: origin.clone(), out_ext: out_ext.clone(), kext: kext.clone() })
    }

    /// Would [`VectorSlab::new`] give runs for this operand, into a slab of
    /// `ty`? Asked before a schedule declares the ring the runs fill, so
    /// that a kernel whose operands cannot take the vector path declares
    /// no ring it never uses.
    pub(super) fn fits(b: &Builder, t: Tile, layout: SlabLayout, operand: &TExpr, ty: Dtype, (out_var, kvar): (VarId, VarId), width: u32) -> bool {
        let Some((tensor, k_contiguous)) = plain_operand(operand, out_var, kvar) else { return false };
        let along = if k_contiguous { t.bk } else { width };
        let total = width * t.bk / VECTOR;
        let (_, threads) = t.copiers();
        layout.k_contiguous() == k_contiguous && b.k.tensors[tensor].dtype == ty && along % VECTOR == 0 && total.is_multiple_of(threads)
    }

    /// The thread's place among the copiers that start at thread `first`:
    /// `tid % threads` where the copiers begin at a multiple of their
    /// count (a producer beside the warpgroups), which is `tid - first` for
    /// them and lets the device compiler see a value that is never
    /// negative: its divisions are shifts (measured on the H100 with the
    /// warp-specialised form, bench/RESULTS.md 2026-11-25: with `tid -
    /// 256` the producer's signed divisions cost a fifth of the kernel's
    /// speed).
    fn copier(first: u32, threads: u32) -> IExpr {
        if first > 0 && first.is_multiple_of(threads) {
            IExpr::Tid.rem(IExpr::c(threads as i64))
        } else {
            IExpr::Tid.sub(IExpr::c(first as i64))
        }
    }

    /// (x, kk) of run `l`'s first element.
    pub(super) fn place(layout: SlabLayout, k_contiguous: bool, width: u32, bk: u32, l: IExpr) -> (IExpr, IExpr) {
        let w = VECTOR as i64;
        if layout.in_position_order() {
            // Position order: the eight rows of a core matrix (eight x
            // where k runs along them, else eight k), then the core
            // matrices along k, then the next eight x.
            let kc = bk as i64 / 8;
            let hi = l.clone().div(IExpr::c(8 * kc));
            if !layout.k_contiguous() {
                // The k digits together are `l % (8 kc)`: one remainder,
                // not two, which Z3 decides at once where it stalled on
                // the pair.
                return (hi.mul(IExpr::c(8)), l.rem(IExpr::c(8 * kc)));
            }
            let (lo, mid) = (l.clone().rem(IExpr::c(8)), l.div(IExpr::c(8)).rem(IExpr::c(kc)));
            return (hi.mul(IExpr::c(8)).add(lo), mid.mul(IExpr::c(w)));
        }
        let per = (if k_contiguous { bk } else { width } / VECTOR) as i64;
        let (across, along) = (l.clone().div(IExpr::c(per)), l.rem(IExpr::c(per)).mul(IExpr::c(w)));
        if k_contiguous {
            (across, along)
        } else {
            (along, across)
        }
    }

    /// The run that holds slab element (xo, kk): the inverse of `place`.
    fn run_of(&self, xo: IExpr, kk: IExpr) -> IExpr {
        let w = VECTOR as i64;
        if self.layout.in_position_order() {
            // The inverse of `place`'s position order.
            let kc = self.bk as i64 / 8;
            let lo = if self.layout.k_contiguous() { xo.clone().rem(IExpr::c(8)) } else { kk.clone().rem(IExpr::c(8)) };
            return xo.div(IExpr::c(8)).mul(IExpr::c(8 * kc)).add(kk.div(IExpr::c(8)).mul(IExpr::c(8))).add(lo);
        }
        let per = (if self.k_contiguous { self.bk } else { self.width } / VECTOR) as i64;
        let (across, along) = if self.k_contiguous { (xo, kk) } else { (kk, xo) };
        across.mul(IExpr::c(per)).add(along.div(IExpr::c(w)))
    }

    /// Registers for the thread's runs, declared where their fetch and
    /// store both see them (in the loop, one per iteration: the registers
    /// carry a slab from its fetch to its store, not a sum across
    /// iterations).
    pub(super) fn registers(&self, b: &mut Builder, out: &mut Vec<KStmt>) -> Vec<LocalId> {
        let name = format!("{}_run", b.k.tensors[self.tensor].name);
        let ty = b.ir.shared[self.tile].ty;
        (0..self.fixed_runs().len())
            .map(|_| {
                let run = b.local(&name, ty);
                out.push(KStmt::DeclArray { arr: run, len: VECTOR, init: None });
                run
            })
            .collect()
    }

    /// Read the thread's runs of slab `k_s` into its registers, zeros
    /// where a run lies past the operand's end (so the store needs no
    /// guard of its own); the reads' access ids, for coverage.
    pub(super) fn fetch(&self, b: &mut Builder, regs: &[LocalId], k_s: &IExpr, out: &mut Vec<KStmt>) -> Vec<AccessId> {
        let mut accesses = Vec::new();
        for (&(x, kk), &run) in self.fixed_runs().iter().zip(regs) {
            let (inside, axes, base, access) = self.source(b, (x, kk), k_s, "vector read", out);
            let e = b.ivar("e");
            let ty = b.ir.shared[self.tile].ty;
            let zero = KStmt::unrolled(e, VECTOR, vec![KStmt::ArraySet { arr: run, index: IExpr::Var(e), value: VExpr::zero(ty) }]);
            out.push(KStmt::If { cond: inside, then: vec![KStmt::VecLoad { arr: run, buf: self.buf, base, axes, width: VECTOR, access }], els: vec![zero] });
            accesses.push(access);
        }
        accesses
    }

    /// Copy the thread's runs of slab `k_s` straight into the slab that
    /// starts at element `at` of the array, asynchronously (`cp.async`;
    /// zeros where a run lies past the operand's end, nothing read
    /// there); the reads' access ids, for coverage.
    pub(super) fn copy(&self, b: &mut Builder, k_s: &IExpr, at: &IExpr, out: &mut Vec<KStmt>) -> Copies {
        let mut accesses = Vec::new();
        match &self.runs {
            Runs::Fixed(runs) => {
                for (r, &(x, kk)) in runs.iter().enumerate() {
                    let (valid, axes, src, access) = self.source(b, (x, kk), k_s, "asynchronous copy", out);
                    let base = at.clone().add(self.store_index(IExpr::c(r as i64), x, kk));
                    out.push(KStmt::CpAsync { arr: self.tile, base, buf: self.buf, src, axes, width: VECTOR, valid, access });
                    accesses.push(access);
                }
                Copies { accesses, run: None }
            }
            &Runs::Looped { count, digit } => {
                let (hi, lo, x, kk) = (b.ivar("run_hi"), b.ivar("run_lo"), b.ivar("x"), b.ivar("kk"));
                let (xo, kko, index) = Self::looped_place_in(self.layout, self.k_contiguous, (self.width, self.bk), (self.first, self.threads), digit, (&IExpr::Var(hi), &IExpr::Var(lo)));
                let mut body = vec![KStmt::LetInt { var: x, value: xo }, KStmt::LetInt { var: kk, value: kko }];
                let (valid, axes, src, access) = self.source(b, (x, kk), k_s, "asynchronous copy", &mut body);
                let base = at.clone().add(index.unwrap_or_else(|| self.layout.index(IExpr::Var(x), IExpr::Var(kk))));
                body.push(KStmt::CpAsync { arr: self.tile, base, buf: self.buf, src, axes, width: VECTOR, valid, access });
                let inner = KStmt::For { var: lo, start: IExpr::c(0), end: IExpr::c(digit as i64), step: IExpr::c(1), unroll: true, body };
                out.push(KStmt::For { var: hi, start: IExpr::c(0), end: IExpr::c((count / digit) as i64), step: IExpr::c(1), unroll: true, body: vec![inner] });
                Copies { accesses: vec![access], run: Some((hi, lo)) }
            }
        }
    }

    /// The runs bound once before the loop (the register pipeline's).
    fn fixed_runs(&self) -> &[(IVar, IVar)] {
        match &self.runs {
            Runs::Fixed(runs) => runs,
            Runs::Looped { .. } => unreachable!("a producer's runs only feed a copy ring"),
        }
    }

    /// The low digit's range for looped runs (`Runs::Looped`), where the
    /// walk allows digits that keep the indices linear: in position order
    /// the copiers' runs together fill whole rows of core matrices (`bk`
    /// runs, 8 of x by all of k or all of k by 8 of x); along the
    /// operand's rows they cover whole rows (`per` runs a row), and a
    /// whole number of them make eight rows (`8 / rows` runs a `hi`) or
    /// they make a whole number of eight rows (one run a `hi`).
    pub(super) fn looped_digit(layout: SlabLayout, k_contiguous: bool, width: u32, bk: u32, threads: u32) -> Option<u32> {
        if layout.in_position_order() {
            return bk.is_multiple_of(threads).then(|| bk / threads);
        }
        let per = if k_contiguous { bk } else { width } / VECTOR;
        let rows = threads.checked_div(per).filter(|g| *g > 0 && threads.is_multiple_of(per))?;
        if rows.is_multiple_of(8) {
            return Some(1);
        }
        8u32.is_multiple_of(rows).then(|| 8 / rows)
    }

    /// `(x, kk)` of run `digit * hi + lo` of the copier, in a slab `width x
    /// bk` in `layout` copied by `threads` threads from `first` on, as
    /// [`place`] puts run `l = lane + threads (digit * hi + lo)` (a test
    /// checks it), and in position order its index (`8 l`), in terms
    /// linear in the digits: along the rows, `l / per` is `step hi + rows
    /// lo + lane / per`, `step` eight rows a `hi` (or the copiers' rows,
    /// where they are more); in position order `l / bk` is `hi`.
    pub(super) fn looped_place_in(layout: SlabLayout, k_contiguous: bool, (width, bk): (u32, u32), (first, threads): (u32, u32), digit: u32, (hi, lo): (&IExpr, &IExpr)) -> (IExpr, IExpr, Option<IExpr>) {
        let lane = Self::copier(first, threads);
        let threads = threads as i64;
        let w = VECTOR as i64;
        if layout.in_position_order() {
            let index = Self::position_index(lane.clone(), threads, hi.clone().mul(IExpr::c(digit as i64)).add(lo.clone()));
            let within = lo.clone().mul(IExpr::c(threads)).add(lane);
            let (x, kk) = if layout.k_contiguous() {
                (hi.clone().mul(IExpr::c(8)).add(within.clone().rem(IExpr::c(8))), within.div(IExpr::c(8)).mul(IExpr::c(w)))
            } else {
                (hi.clone().mul(IExpr::c(8)), within)
            };
            return (x, kk, Some(index));
        }
        let per = (if k_contiguous { bk } else { width } / VECTOR) as i64;
        let rows = threads / per;
        let across = hi.clone().mul(IExpr::c(rows.max(8))).add(lo.clone().mul(IExpr::c(rows))).add(lane.clone().div(IExpr::c(per)));
        let along = lane.rem(IExpr::c(per)).mul(IExpr::c(w));
        let (x, kk) = if k_contiguous { (across, along) } else { (along, across) };
        (x, kk, None)
    }

    /// Where in the operand the run at slab `(x, kk)` of slab `k_s` starts
    /// (its indices bound in `out`): whether it lies inside the operand,
    /// its multi-index and flat index, and a new read access (`what`).
    fn source(&self, b: &mut Builder, (x, kk): (IVar, IVar), k_s: &IExpr, what: &str, out: &mut Vec<KStmt>) -> (Cond, Vec<IExpr>, IExpr, AccessId) {
        let g_v = b.ivar(&b.k.vars[self.out_var].name.clone());
        let gk_v = b.ivar(&b.k.vars[self.kvar].name.clone());
        out.push(KStmt::LetInt { var: g_v, value: self.origin.clone().add(IExpr::Var(x)) });
        out.push(KStmt::LetInt { var: gk_v, value: k_s.clone().add(IExpr::Var(kk)) });
        let (g, gk) = (IExpr::Var(g_v), IExpr::Var(gk_v));
        let inside = g.clone().lt(self.out_ext.clone()).and(gk.clone().lt(self.kext.clone()));
        let axes = if self.o_first { vec![g, gk] } else { vec![gk, g] };
        let flat = axes[0].clone().mul(extent_expr(b.k.tensors[self.tensor].shape[1])).add(axes[1].clone());
        let access = b.access(self.buf, AccessKind::Read, b.k.tensors[self.tensor].span, format!("{} of `{}`", what, b.k.tensors[self.tensor].name));
        (inside, axes, flat, access)
    }

    /// Where run `r` (first element at slab `(x, kk)`) lies in the slab.
    fn store_index(&self, r: IExpr, x: IVar, kk: IVar) -> IExpr {
        if self.layout.in_position_order() {
            Self::position_index(Self::copier(self.first, self.threads), self.threads as i64, r)
        } else {
            self.layout.index(IExpr::Var(x), IExpr::Var(kk))
        }
    }

    /// In position order, the index of run `r` of the copier at `lane`
    /// (`copier`): run `l = lane + threads r` lies at position 8 l
    /// (`place` walks the slab in position order; a test checks it),
    /// linear in the thread id.
    fn position_index(lane: IExpr, threads: i64, r: IExpr) -> IExpr {
        lane.add(r.mul(IExpr::c(threads))).mul(IExpr::c(VECTOR as i64))
    }

    /// Write the thread's registers (fetched for the next slab) into the
    /// slab that starts at element `at` of the array (a stage of a ring).
    pub(super) fn store(&self, regs: &[LocalId], at: &IExpr, out: &mut Vec<KStmt>) {
        for (r, (&(x, kk), &run)) in self.fixed_runs().iter().zip(regs).enumerate() {
            let index = self.store_index(IExpr::c(r as i64), x, kk);
            out.push(KStmt::SharedVecStore { arr: self.tile, base: at.clone().add(index), width: VECTOR, src: run });
        }
    }

    /// Coverage of the operand when vectors are on (`on`): element (o, k)
    /// of slab 0 is read by the fetch before the loop (`first`), of slab
    /// j > 0 by the fetch in the loop's iteration j - 1 (`ahead`, in loop
    /// `k0`), each by the thread and run that hold it. Added as cases to
    /// the element loader's coverage (the last one pushed), whose own case
    /// then holds where vectors are off.
    pub(super) fn cover(&self, b: &mut Builder, on: Cond, first: &[AccessId], ahead: &[AccessId], k0: IVar) {
        let (first, ahead) = (Copies { accesses: first.to_vec(), run: None }, Copies { accesses: ahead.to_vec(), run: None });
        self.cover_ahead(b, on, (&first, None), &ahead, (k0, 1));
    }

    /// [`cover`](Self::cover) for a ring `lookahead` slabs deep: slab j <
    /// lookahead is read by the fetch before the loop (`first`), in
    /// iteration `j * bk` of the prologue loop where there is one; slab j
    /// >= lookahead in the loop's iteration j - lookahead.
    pub(super) fn cover_ahead(&self, b: &mut Builder, on: Cond, (first, prologue): (&Copies, Option<IVar>), ahead: &Copies, (k0, lookahead): (IVar, i64)) {
        let Some(cover) = b.ir.coverage.last_mut() else { return };
        let Some(base) = cover.cases.first().cloned() else { return };
        cover.cases[0].when = Cond::Not(Box::new(on.clone()));
        let (e_o, e_k) = if self.o_first { (IExpr::Var(cover.elem[0]), IExpr::Var(cover.elem[1])) } else { (IExpr::Var(cover.elem[1]), IExpr::Var(cover.elem[0])) };
        let bk = self.bk as i64;
        let l = self.run_of(e_o.rem(IExpr::c(self.width as i64)), e_k.clone().rem(IExpr::c(bk)));
        let threads = self.threads as i64;
        let tid = l.clone().rem(IExpr::c(threads)).add(IExpr::c(self.first as i64));
        let blocks: Vec<(Witness, IExpr)> = base.assign.iter().filter(|(wit, _)| matches!(wit, Witness::BlockIdx(_))).cloned().collect();
        let slab = e_k.div(IExpr::c(bk));
        let first_slab = Cond::Lt(slab.clone(), IExpr::c(lookahead));
        // A looped copy's digits: its run `l / threads` as `digit * hi + lo`.
        let digit = match self.runs {
            Runs::Looped { digit, .. } => digit as i64,
            Runs::Fixed(_) => 1,
        };
        let run = l.clone().div(IExpr::c(threads));
        let digits = |copies: &Copies| copies.run.map(|(hi, lo)| [(Witness::Var(hi), run.clone().div(IExpr::c(digit))), (Witness::Var(lo), run.clone().rem(IExpr::c(digit)))]).into_iter().flatten();
        for (r, (&first_access, &ahead_access)) in first.accesses.iter().zip(&ahead.accesses).enumerate() {
            // Only the run that holds the element (when there are several
            // sites; a looped copy's run is its loop's iteration).
            let this_run = if first.accesses.len() == 1 { on.clone() } else { on.clone().and(Cond::Eq(run.clone(), IExpr::c(r as i64))) };
            let mut first_assign = blocks.clone();
            first_assign.push((Witness::Tid, tid.clone()));
            first_assign.extend(digits(first));
            if let Some(p) = prologue {
                first_assign.push((Witness::Var(p), slab.clone().mul(IExpr::c(bk))));
            }
            let mut ahead_assign = blocks.clone();
            ahead_assign.push((Witness::Tid, tid.clone()));
            ahead_assign.extend(digits(ahead));
            ahead_assign.push((Witness::Var(k0), slab.clone().sub(IExpr::c(lookahead)).mul(IExpr::c(bk))));
            cover.cases.push(CoverCase { when: this_run.clone().and(first_slab.clone()), access: first_access, assign: first_assign });
            cover.cases.push(CoverCase { when: this_run.and(Cond::Not(Box::new(first_slab.clone()))), access: ahead_access, assign: ahead_assign });
        }
    }
}
