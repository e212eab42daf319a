//! `KernelIr`: the scheduled kernel. The HIP printer prints it and the
//! obligation generator (issue 3) proves things about it; nothing about a
//! kernel's safety is argued from the source program alone.
//!
//! Integer index arithmetic (`IExpr`) is kept apart from per-thread values
//! (`VExpr`) so that every address is a symbolic term over dims, block and
//! thread ids and loop variables, and every guard is a `Cond` over them.

use crate::span::Span;
use crate::syntax::ast::{BinOp, UnOp};
use crate::target::Target;
use crate::tir::{Builtin, Const, DimId, ScalarId, TensorId, VarId};
use crate::types::Dtype;
use std::collections::{BTreeMap, BTreeSet};

pub type BufId = usize;

/// The most shared memory a block may declare statically (CUDA and HIP):
/// 48 KB. Past it a kernel's arrays live in dynamic shared memory.
pub const STATIC_SHARED_LIMIT: u32 = 48 * 1024;
pub type IVar = usize;
pub type LocalId = usize;
pub type SharedId = usize;
/// An array of barriers in shared memory (`KernelIr::mbarriers`).
pub type MbarId = usize;
pub type AccessId = usize;

/// Integer terms: addresses, loop bounds, guards.
#[derive(Clone, Debug, PartialEq)]
pub enum IExpr {
    Const(i64),
    Dim(DimId),
    Var(IVar),
    /// `threadIdx.x`
    Tid,
    /// `blockIdx.{x,y,z}`
    BlockIdx(u8),
    /// `gridDim.{x,y,z}`
    GridDim(u8),
    Add(Box<IExpr>, Box<IExpr>),
    Sub(Box<IExpr>, Box<IExpr>),
    Mul(Box<IExpr>, Box<IExpr>),
    /// Division of non-negative terms (rounds down).
    Div(Box<IExpr>, Box<IExpr>),
    Rem(Box<IExpr>, Box<IExpr>),
    Min(Box<IExpr>, Box<IExpr>),
    /// An integer tensor's element used as an index (indirect indexing).
    Load { buf: BufId, index: Box<IExpr>, access: AccessId },
    Select(Box<Cond>, Box<IExpr>, Box<IExpr>),
}

#[allow(clippy::should_implement_trait)]
impl IExpr {
    pub fn c(v: i64) -> IExpr {
        IExpr::Const(v)
    }
    pub fn add(self, o: IExpr) -> IExpr {
        match (&self, &o) {
            (IExpr::Const(0), _) => o,
            (_, IExpr::Const(0)) => self,
            (IExpr::Const(a), IExpr::Const(b)) => IExpr::Const(a + b),
            _ => IExpr::Add(Box::new(self), Box::new(o)),
        }
    }
    pub fn sub(self, o: IExpr) -> IExpr {
        match (&self, &o) {
            (_, IExpr::Const(0)) => self,
            (IExpr::Const(a), IExpr::Const(b)) => IExpr::Const(a - b),
            _ => IExpr::Sub(Box::new(self), Box::new(o)),
        }
    }
    pub fn mul(self, o: IExpr) -> IExpr {
        match (&self, &o) {
            (IExpr::Const(1), _) => o,
            (_, IExpr::Const(1)) => self,
            (IExpr::Const(0), _) | (_, IExpr::Const(0)) => IExpr::Const(0),
            (IExpr::Const(a), IExpr::Const(b)) => IExpr::Const(a * b),
            _ => IExpr::Mul(Box::new(self), Box::new(o)),
        }
    }
    pub fn div(self, o: IExpr) -> IExpr {
        match (&self, &o) {
            (_, IExpr::Const(1)) => self,
            (IExpr::Const(a), IExpr::Const(b)) if *b > 0 => IExpr::Const(a / b),
            // (x * c) / c is x, exactly.
            (IExpr::Mul(x, c), IExpr::Const(d)) if *d > 0 && **c == IExpr::Const(*d) => (**x).clone(),
            _ => IExpr::Div(Box::new(self), Box::new(o)),
        }
    }
    pub fn rem(self, o: IExpr) -> IExpr {
        match (&self, &o) {
            (_, IExpr::Const(1)) => IExpr::Const(0),
            (IExpr::Const(a), IExpr::Const(b)) if *b > 0 => IExpr::Const(a % b),
            // (x * c) % c is 0.
            (IExpr::Mul(_, c), IExpr::Const(d)) if *d > 0 && **c == IExpr::Const(*d) => IExpr::Const(0),
            _ => IExpr::Rem(Box::new(self), Box::new(o)),
        }
    }
    pub fn min(self, o: IExpr) -> IExpr {
        IExpr::Min(Box::new(self), Box::new(o))
    }
    /// `ceil(self / d)` for positive `d`.
    pub fn ceil_div(self, d: i64) -> IExpr {
        self.add(IExpr::c(d - 1)).div(IExpr::c(d))
    }
    pub fn lt(self, o: IExpr) -> Cond {
        Cond::Lt(self, o)
    }
    pub fn eq(self, o: IExpr) -> Cond {
        Cond::Eq(self, o)
    }
    /// The expression with every `var` replaced by `by`.
    pub fn subst_var(&self, var: IVar, by: &IExpr) -> IExpr {
        let s = |e: &IExpr| Box::new(e.subst_var(var, by));
        match self {
            IExpr::Var(v) if *v == var => by.clone(),
            IExpr::Add(a, b) => IExpr::Add(s(a), s(b)),
            IExpr::Sub(a, b) => IExpr::Sub(s(a), s(b)),
            IExpr::Mul(a, b) => IExpr::Mul(s(a), s(b)),
            IExpr::Div(a, b) => IExpr::Div(s(a), s(b)),
            IExpr::Rem(a, b) => IExpr::Rem(s(a), s(b)),
            IExpr::Min(a, b) => IExpr::Min(s(a), s(b)),
            IExpr::Load { buf, index, access } => IExpr::Load { buf: *buf, index: s(index), access: *access },
            IExpr::Select(c, a, b) => IExpr::Select(Box::new(c.subst_var(var, by)), s(a), s(b)),
            other => other.clone(),
        }
    }
    /// Does the expression read `var`?
    pub fn mentions(&self, var: IVar) -> bool {
        match self {
            IExpr::Var(v) => *v == var,
            IExpr::Add(a, b) | IExpr::Sub(a, b) | IExpr::Mul(a, b) | IExpr::Div(a, b) | IExpr::Rem(a, b) | IExpr::Min(a, b) => a.mentions(var) || b.mentions(var),
            IExpr::Load { index, .. } => index.mentions(var),
            IExpr::Select(c, a, b) => c.mentions(var) || a.mentions(var) || b.mentions(var),
            _ => false,
        }
    }
}

/// Integer conditions: guards and loop tests.
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    True,
    Lt(IExpr, IExpr),
    Le(IExpr, IExpr),
    Eq(IExpr, IExpr),
    And(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
    /// Every listed buffer's base address is a multiple of `bytes`.
    Aligned(Vec<BufId>, u32),
}

impl Cond {
    /// The condition with every `var` replaced by `by`.
    pub fn subst_var(&self, var: IVar, by: &IExpr) -> Cond {
        let s = |e: &IExpr| e.subst_var(var, by);
        match self {
            Cond::Lt(a, b) => Cond::Lt(s(a), s(b)),
            Cond::Le(a, b) => Cond::Le(s(a), s(b)),
            Cond::Eq(a, b) => Cond::Eq(s(a), s(b)),
            Cond::And(a, b) => Cond::And(Box::new(a.subst_var(var, by)), Box::new(b.subst_var(var, by))),
            Cond::Not(a) => Cond::Not(Box::new(a.subst_var(var, by))),
            other => other.clone(),
        }
    }
    /// Does the condition read `var`?
    pub fn mentions(&self, var: IVar) -> bool {
        match self {
            Cond::Lt(a, b) | Cond::Le(a, b) | Cond::Eq(a, b) => a.mentions(var) || b.mentions(var),
            Cond::And(a, b) => a.mentions(var) || b.mentions(var),
            Cond::Not(a) => a.mentions(var),
            _ => false,
        }
    }
    pub fn and(self, o: Cond) -> Cond {
        match (&self, &o) {
            (Cond::True, _) => o,
            (_, Cond::True) => self,
            _ => Cond::And(Box::new(self), Box::new(o)),
        }
    }
}

/// A per-thread value with its dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct VExpr {
    pub kind: VKind,
    pub ty: Dtype,
}

#[derive(Clone, Debug, PartialEq)]
pub enum VKind {
    Const(Const),
    /// `axes` is the element's multi-index, `index` its row-major image
    /// (what is printed); the prover checks both and reasons per axis.
    Load { buf: BufId, index: IExpr, axes: Vec<IExpr>, access: AccessId },
    Scalar(ScalarId),
    /// An integer term used as a value (an index variable's value, a dim).
    Int(IExpr),
    Local(LocalId),
    ArrayGet { arr: LocalId, index: IExpr },
    SharedGet { arr: SharedId, index: IExpr },
    Unary(UnOp, Box<VExpr>),
    Binary(BinOp, Box<VExpr>, Box<VExpr>),
    /// `a * b + c` with one rounding.
    Fma(Box<VExpr>, Box<VExpr>, Box<VExpr>),
    Call(Builtin, Vec<VExpr>),
    Cast(Box<VExpr>),
    Select(Box<VExpr>, Box<VExpr>, Box<VExpr>),
    /// The value of `value` in lane `lane ^ mask` of this warp.
    ShflXor { value: Box<VExpr>, mask: u32 },
}

impl VExpr {
    pub fn new(kind: VKind, ty: Dtype) -> VExpr {
        VExpr { kind, ty }
    }
    pub fn local(id: LocalId, ty: Dtype) -> VExpr {
        VExpr::new(VKind::Local(id), ty)
    }
    pub fn cast(self, to: Dtype) -> VExpr {
        if self.ty == to {
            self
        } else {
            VExpr::new(VKind::Cast(Box::new(self)), to)
        }
    }
    /// Visit the value and every value it is made of, outermost first.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a VExpr)) {
        f(self);
        match &self.kind {
            VKind::Unary(_, a) | VKind::Cast(a) => a.walk(f),
            VKind::ShflXor { value, .. } => value.walk(f),
            VKind::Binary(_, a, b) => {
                a.walk(f);
                b.walk(f);
            }
            VKind::Fma(a, b, c) | VKind::Select(a, b, c) => {
                a.walk(f);
                b.walk(f);
                c.walk(f);
            }
            VKind::Call(_, args) => args.iter().for_each(|a| a.walk(f)),
            _ => {}
        }
    }
    pub fn zero(ty: Dtype) -> VExpr {
        let c = if ty.is_float() { Const::Float(0.0) } else if ty == Dtype::Bool { Const::Bool(false) } else { Const::Int(0) };
        VExpr::new(VKind::Const(c), ty)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum KStmt {
    /// A scalar register, optionally initialised.
    Decl { local: LocalId, init: Option<VExpr> },
    /// A register array of `len` elements, every element set to `init`.
    DeclArray { arr: LocalId, len: u32, init: Option<VExpr> },
    Assign { local: LocalId, value: VExpr },
    ArraySet { arr: LocalId, index: IExpr, value: VExpr },
    /// An immutable integer binding.
    LetInt { var: IVar, value: IExpr },
    /// `for (var = start; var < end; var += step)`.
    For { var: IVar, start: IExpr, end: IExpr, step: IExpr, unroll: bool, body: Vec<KStmt> },
    If { cond: Cond, then: Vec<KStmt>, els: Vec<KStmt> },
    /// Run `body` unless the value `cond` holds: a per-thread branch around
    /// work that, where `cond` holds, would change nothing the kernel
    /// keeps (the residue contraction's tile skip,
    /// `schedule::tile_skip`). The verifier proves that
    /// (`verify::tile_skip`); every other pass reads the body as run.
    SkipWhen { cond: VExpr, body: Vec<KStmt> },
    /// `axes` is the element's multi-index (the flat `index` is their
    /// row-major image); the prover reasons per axis where it can.
    Store { buf: BufId, index: IExpr, axes: Vec<IExpr>, value: VExpr, access: AccessId },
    /// Load `width` consecutive elements starting at `base` into array `arr`;
    /// `axes`, when given, the first element's multi-index (`base` its
    /// row-major image), the run lying along the last axis.
    VecLoad { arr: LocalId, buf: BufId, base: IExpr, axes: Vec<IExpr>, width: u32, access: AccessId },
    /// Store array `arr` to `width` consecutive elements starting at `base`;
    /// `axes`, when given, the first element's multi-index (as `VecLoad`).
    VecStore { buf: BufId, base: IExpr, axes: Vec<IExpr>, width: u32, arr: LocalId, access: AccessId },
    SharedSet { arr: SharedId, index: IExpr, value: VExpr },
    /// Store array `src` to `width` consecutive elements of shared `arr`
    /// from `base` (one 16-byte store for eight 16-bit elements).
    SharedVecStore { arr: SharedId, base: IExpr, width: u32, src: LocalId },
    /// Block-wide barrier (`__syncthreads()`).
    Barrier,
    /// One instruction's fragment of operand `which` (A or B), loaded from
    /// shared memory into the lane's registers `dst[dst_at ..]` as the
    /// instruction lays it out (`schedule::tensor_core::element`).
    /// Warp-collective. `rows`: loaded as 8-element rows (`ldmatrix`, its
    /// `.trans` form for B), each row 16-byte aligned (the verifier proves
    /// it); otherwise element by element.
    FragmentLoad { shape: MmaShape, which: Fragment, src: MmaOperand, dst: LocalId, dst_at: IExpr, rows: bool },
    /// One warp instruction of the matrix unit: `acc[acc_at ..] += A * B`
    /// for one `shape` tile, A and B from the lane's fragment registers
    /// `a[a_at ..]` and `b[b_at ..]`, the accumulator slots laid out as the
    /// instruction lays them. Warp-collective: every lane of the warp runs
    /// it.
    Mma { shape: MmaShape, a: LocalId, a_at: IExpr, b: LocalId, b_at: IExpr, acc: LocalId, acc_at: IExpr },
    /// One warpgroup instruction of the matrix unit (NVIDIA `wgmma`,
    /// sm_90a): `acc[0 .. n / 2] (+)= A * B` for a 64 x `n` x 16 tile, A
    /// and B read by the unit straight from shared memory through
    /// descriptors (`a`, `b`), the accumulator slots laid out as
    /// `schedule::warpgroup::acc_element` says; `accumulate: false` starts
    /// from zero. Asynchronous: its reads of shared memory and of `acc`
    /// may happen until the `WgmmaWait` that retires it, and it sees `acc` only as
    /// of the last `WgmmaFence` (the verifier's protocol obligations).
    /// Warpgroup-collective.
    Wgmma { n: u32, a: WgOperand, b: WgOperand, acc: LocalId, accumulate: bool },
    /// `wgmma.fence`: the unit sees the registers as ordinary instructions
    /// left them.
    WgmmaFence,
    /// Commit the warpgroup's `Wgmma`s issued since the last commit as
    /// one group (`wgmma.commit_group`), then wait until at most
    /// `pending` of its committed groups may still run
    /// (`wgmma.wait_group`): the older ones are done, their accumulators
    /// written and their operands read.
    WgmmaWait { pending: u32 },
    /// `fence.proxy.async.shared::cta`: this thread's ordinary shared
    /// stores become visible to the unit's (asynchronous proxy's) reads
    /// once a barrier follows.
    ProxyFence,
    /// An asynchronous copy of `width` elements (16 bytes) from global
    /// `src` (its multi-index `axes`) into shared `arr[base ..]` when
    /// `valid`, else zeros there with nothing read (NVIDIA `cp.async`,
    /// sm_80 and later). The shared write may land at any time until the
    /// `CpAsyncWait` that retires the copy's group (the verifier's race
    /// windows, `verify::protocol::copy_windows`).
    CpAsync { arr: SharedId, base: IExpr, buf: BufId, src: IExpr, axes: Vec<IExpr>, width: u32, valid: Cond, access: AccessId },
    /// Close the thread's copies issued since the last commit into one
    /// group (`cp.async.commit_group`).
    CpAsyncCommit,
    /// Wait until at most `pending` of the thread's committed groups are
    /// still in flight (`cp.async.wait_group`): the older ones have landed.
    CpAsyncWait { pending: u32 },
    /// Initialise every barrier of `bar` (`mbarrier.init`) to expect its
    /// `arrivals` a phase, in phase 0. Run by one thread, before a block
    /// barrier that publishes the barriers to the others.
    MbarInit { bar: MbarId },
    /// Arrive at barrier `stage` of `bar` (`mbarrier.arrive`): one of the
    /// arrivals its current phase waits for. The thread's earlier shared
    /// accesses (the unit's reads, once waited for) happen before the
    /// phase completes.
    MbarArrive { bar: MbarId, stage: IExpr },
    /// Arrive at barrier `stage` of `bar` once every asynchronous copy this
    /// thread issued before has landed (`cp.async.mbarrier.arrive.noinc`:
    /// the arrival counts toward the phase's `arrivals`).
    CpAsyncArrive { bar: MbarId, stage: IExpr },
    /// Wait until the phase of barrier `stage` of `bar` whose parity is
    /// `parity` has completed (`mbarrier.try_wait.parity`, retried): what
    /// its arrivals did before arriving happens before what follows.
    MbarWait { bar: MbarId, stage: IExpr, parity: IExpr },
    /// Arrive at barrier `stage` of `bar` and raise the bytes its current
    /// phase waits for by `bytes` (`mbarrier.arrive.expect_tx`): the phase
    /// completes once its arrivals have come and that many bytes of bulk
    /// copies (`TmaLoad`) naming it have landed.
    MbarExpectTx { bar: MbarId, stage: IExpr, bytes: u32 },
    /// A bulk tensor copy (TMA, `cp.async.bulk.tensor.2d`, sm_90): the box
    /// of tensor map `map` at `(inner, outer)` (its first column and row)
    /// lands in shared `arr[base ..]`, laid out with the 128-byte swizzle
    /// ([`swizzled_offset`]), and completes its bytes on barrier `stage` of
    /// `bar`. Box element `(r, c)` (`elem`: row `r` along the outer axis,
    /// column `c` along the contiguous one) is global element `(outer + r,
    /// inner + c)` where that lies inside the tensor, else zero, nothing
    /// read (the map carries the tensor's extents). Issued by one thread;
    /// its writes land at any time until the barrier's phase completes.
    TmaLoad { map: TensorMapId, arr: SharedId, base: IExpr, inner: IExpr, outer: IExpr, elem: (IVar, IVar), bar: MbarId, stage: IExpr, access: AccessId },
    /// The contract monitor's observation of the launch's outputs
    /// (`KernelIr::observed`): each thread has folded every value it
    /// stored into one of them (smallest, largest, whether a NaN, in
    /// registers); the block combines its threads' folds (shuffles, then
    /// barriers) and its first thread merges them, atomically, into slot
    /// `slot` of that output's `OBSERVE_SLOTS` in the observation buffer
    /// (`KParam::Observations`; nothing where the launch passes none).
    /// Block-collective, as a barrier: every thread of the block runs it.
    /// Atomic merges commute, so slots shared by blocks never race.
    ObserveFlush { slot: IExpr },
    /// The contract monitor's check of a domain relation between two
    /// observed outputs (`KernelIr::related[fold]`, `square * square <=
    /// factor * bound`) on the values this thread just stored into both
    /// at one element: a failure sets the fold's non-finite word, merged
    /// by `ObserveFlush` after the outputs' (registers only; placed by
    /// `schedule::observe::relate`, after the second of the two stores).
    ObserveRelation { fold: usize, square: VExpr, bound: VExpr },
    /// Set the thread's register allowance (`setmaxnreg`, sm_90a),
    /// growing it or releasing registers to the block's pool.
    /// Warpgroup-collective: every thread of the warpgroup runs it with
    /// the same count.
    SetMaxRegisters { regs: u32, grow: bool },
}

/// The warpgroup unit's commit groups along a walk of the statements, as
/// `KStmt::WgmmaWait` leaves them: what was issued since the last commit,
/// and each committed group that may still run, oldest first. `T` names
/// an instruction's accumulator (the verifier's protocol pass keeps the
/// array, the printer the array and its slots).
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaGroups<T: Ord> {
    issued: BTreeSet<T>,
    committed: Vec<BTreeSet<T>>,
}

impl<T: Ord> Default for WgmmaGroups<T> {
    fn default() -> Self {
        WgmmaGroups { issued: BTreeSet::new(), committed: Vec::new() }
    }
}

impl<T: Ord + Clone> WgmmaGroups<T> {
    /// A `Wgmma` into `acc` is issued.
    pub fn issue(&mut self, acc: T) {
        self.issued.insert(acc);
    }

    /// A `WgmmaWait { pending }`: what was issued becomes a group, and
    /// every group but the newest `pending` is done; those, oldest first.
    pub fn wait(&mut self, pending: u32) -> Vec<BTreeSet<T>> {
        let issued = std::mem::take(&mut self.issued);
        if !issued.is_empty() {
            self.committed.push(issued);
        }
        let keep = (pending as usize).min(self.committed.len());
        self.committed.drain(..self.committed.len() - keep).collect()
    }

    /// Accumulators an instruction that may still run writes.
    pub fn running(&self) -> impl Iterator<Item = &T> {
        self.committed.iter().flatten().chain(&self.issued)
    }

    pub fn is_empty(&self) -> bool {
        self.issued.is_empty() && self.committed.is_empty()
    }

    /// Where two paths meet: an instruction that may run on either may
    /// run after, groups matched newest with newest.
    pub fn join(&mut self, o: &WgmmaGroups<T>) {
        self.issued.extend(o.issued.iter().cloned());
        let mine = std::mem::take(&mut self.committed);
        let len = mine.len().max(o.committed.len());
        let from_end = |g: &Vec<BTreeSet<T>>, back: usize| if back <= g.len() { g[g.len() - back].clone() } else { BTreeSet::new() };
        self.committed = (0..len)
            .map(|i| {
                let mut set = from_end(&mine, len - i);
                set.extend(from_end(&o.committed, len - i));
                set
            })
            .collect();
    }
}

/// A `Wgmma` operand in shared memory, in the unit's layout without
/// swizzling: 8 x 8 "core matrices" of 128 contiguous bytes; element `(r,
/// c)` (`r` along M for A or N for B, `c` along K, 0..16) lies at `base +
/// (r / 8) * sbo + (c / 8) * lbo + inner`, `inner` being `(r % 8) * 8 + c %
/// 8` when k runs along a core matrix's rows (`k_inner`: "K-major", A as
/// stored) and `(c % 8) * 8 + r % 8` otherwise ("MN-major", B with the
/// instruction's transpose bit). Offsets in elements.
///
/// `swizzle`: the 128-byte swizzle instead (a bulk tensor copy's layout,
/// [`swizzled_offset`]): the operand lies in rows of 64 elements (128
/// bytes) whose 16-byte chunks are permuted by the row's place in its
/// group of eight; `base` is 1024-byte aligned (the verifier proves it),
/// and the instruction starts `k_at` elements into each row (K-major: the
/// descriptor's address is `base + k_at`, and the unit swizzles the
/// address it forms, so column `c` of the instruction is column `k_at + c`
/// of the row). K-major: row `r` of the operand is row `r` of the slab
/// (`sbo` apart a group of eight). MN-major: row `c` (k) of a box of 64
/// m or n, boxes `lbo` apart.
#[derive(Clone, Debug, PartialEq)]
pub struct WgOperand {
    pub tile: SharedId,
    pub base: IExpr,
    pub lbo: i64,
    pub sbo: i64,
    pub k_inner: bool,
    pub swizzle: bool,
    pub k_at: i64,
}

impl WgOperand {
    /// The offset of element `(r, c)` from `base`.
    pub fn offset(&self, r: IExpr, c: IExpr) -> IExpr {
        if !self.swizzle {
            return core_offset(r, c, self.lbo, self.sbo, self.k_inner);
        }
        swizzled_slab_offset(r, c.add(IExpr::c(self.k_at)), self.k_inner, self.lbo, self.sbo)
    }
}

/// Where element `(r, c)` (`r` along M or N, `c` along K) of a slab under
/// the 128-byte swizzle lies (see [`WgOperand`]): K-major (`k_inner`), row
/// `r` holds its k, groups of eight rows `sbo` apart; MN-major, row `c`
/// of a box of 64 m or n, boxes `lbo` apart, groups of eight k rows `sbo`
/// apart. With `sbo` 512 (eight rows of 64) both are the places a bulk
/// copy's boxes lay the elements in ([`swizzled_offset`]).
pub fn swizzled_slab_offset(r: IExpr, c: IExpr, k_inner: bool, lbo: i64, sbo: i64) -> IExpr {
    if k_inner {
        r.clone().div(IExpr::c(8)).mul(IExpr::c(sbo)).add(swizzled_offset(r.rem(IExpr::c(8)), c))
    } else {
        let box_of = r.clone().div(IExpr::c(SWIZZLE_ROW)).mul(IExpr::c(lbo));
        box_of.add(c.clone().div(IExpr::c(8)).mul(IExpr::c(sbo))).add(swizzled_offset(c.rem(IExpr::c(8)), r.rem(IExpr::c(SWIZZLE_ROW))))
    }
}

/// Bytes a swizzled array's start is aligned to: the 128-byte swizzle's
/// pattern repeats every eight rows of 128 bytes.
pub const SWIZZLE_ALIGN: u32 = 1024;

/// Elements of 16 bits in one row of the 128-byte swizzle.
pub const SWIZZLE_ROW: i64 = 64;

/// Where element `(row, col)` of a box of 64-element (128-byte) rows lies
/// under the 128-byte swizzle (PTX ISA, "Tensor-map swizzling modes";
/// CUDA's `CU_TENSOR_MAP_SWIZZLE_128B`), in elements of 16 bits from the
/// box's 1024-byte aligned start: row `row` at `64 row`, its 16-byte
/// chunk `col / 8` moved to chunk `(col / 8) xor (row % 8)`.
pub fn swizzled_offset(row: IExpr, col: IExpr) -> IExpr {
    let chunk = xor_bits(col.clone().div(IExpr::c(8)), row.clone().rem(IExpr::c(8)), 3);
    row.mul(IExpr::c(SWIZZLE_ROW)).add(chunk.mul(IExpr::c(8))).add(col.rem(IExpr::c(8)))
}

/// `a xor b` over their low `bits` bits, for `a`, `b` >= 0, written in
/// the integer terms the prover reads: bit `i` is `((a / 2^i + b / 2^i)
/// % 2)`.
pub fn xor_bits(a: IExpr, b: IExpr, bits: u32) -> IExpr {
    let bit = |i: u32| a.clone().div(IExpr::c(1 << i)).add(b.clone().div(IExpr::c(1 << i))).rem(IExpr::c(2)).mul(IExpr::c(1 << i));
    (1..bits).fold(bit(0), |acc, i| acc.add(bit(i)))
}

/// The offset of element `(r, c)` (`r` along M or N, `c` along K) in
/// core matrices `lbo` apart along K and `sbo` apart along M or N (see
/// [`WgOperand`]).
pub fn core_offset(r: IExpr, c: IExpr, lbo: i64, sbo: i64, k_inner: bool) -> IExpr {
    let eight = || IExpr::c(8);
    let inner = if k_inner { r.clone().rem(eight()).mul(eight()).add(c.clone().rem(eight())) } else { c.clone().rem(eight()).mul(eight()).add(r.clone().rem(eight())) };
    r.div(eight()).mul(IExpr::c(sbo)).add(c.div(eight()).mul(IExpr::c(lbo))).add(inner)
}

/// The operands of a matrix-unit instruction (their fragment layouts are
/// in `schedule::tensor_core`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    A,
    B,
    Acc,
}

/// The matrix unit's warp instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MmaShape {
    /// NVIDIA `mma.sync.aligned.m16n8k16.row.col.f32` with f16 or bf16
    /// operands (sm_80 and later): A 16 x 16, B 16 x 8, C 16 x 8.
    M16N8K16,
    /// AMD `v_mfma_f32_16x16x16f16` / `v_mfma_f32_16x16x16bf16_1k` (CDNA2
    /// and later, a wavefront of 64 lanes): A 16 x 16, B 16 x 16, C 16 x
    /// 16, four elements of each a lane.
    Mfma16x16x16,
}

impl MmaShape {
    /// `(m, n, k)` of one instruction.
    pub fn mnk(self) -> (i64, i64, i64) {
        match self {
            MmaShape::M16N8K16 => (16, 8, 16),
            MmaShape::Mfma16x16x16 => (16, 16, 16),
        }
    }
    /// Registers per lane of A, B and the accumulator.
    pub fn regs(self) -> (u32, u32, u32) {
        match self {
            MmaShape::M16N8K16 => (8, 4, 4),
            MmaShape::Mfma16x16x16 => (4, 4, 4),
        }
    }
    /// Lanes that run one instruction together (a warp, a wavefront).
    pub fn lanes(self) -> u32 {
        match self {
            MmaShape::M16N8K16 => 32,
            MmaShape::Mfma16x16x16 => 64,
        }
    }
}

/// Where an operand of an `Mma` lives: its element `(r, c)` (A is m x k,
/// B is k x n) at `tile[base + r * row_stride + c * col_stride]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MmaOperand {
    pub tile: SharedId,
    pub base: IExpr,
    pub row_stride: i64,
    pub col_stride: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub dtype: Dtype,
    pub tensor: TensorId,
    /// Number of elements: the product of the tensor's dims.
    pub len: IExpr,
    pub read: bool,
    pub written: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LocalDecl {
    pub name: String,
    pub ty: Dtype,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SharedArray {
    pub name: String,
    pub ty: Dtype,
    pub len: u32,
    /// Where the data lies, when rows are padded (`None`: every slot).
    pub footprint: Option<Footprint>,
    /// The array's place in a ring of slabs, if it is one.
    pub ring: Option<Ring>,
    /// Filled by bulk tensor copies with the 128-byte swizzle
    /// (`KStmt::TmaLoad`): it starts 1024-byte aligned, as the swizzle's
    /// pattern repeats.
    pub swizzled: bool,
}

/// A ring of `stages` slabs in one array, `stage_len` elements each, that
/// a pipelined loop `of` (stepping by `step`) cycles through: iteration
/// `of` reads the stage of slab `of` and fills the stage of slab
/// `of + step`, where slab `j` lives in stage `(j / step) % stages`
/// (elements `stage * stage_len ..`); before the loop only stage 0 is
/// filled (slab 0), and nothing outside the loop reads the ring. The
/// verifier proves every access of the array obeys this (the ring
/// obligation), so a read of a stage before its slab has been stored
/// there, or a fill of the stage being read, is refuted; with
/// race-freedom and the loads' coverage, each iteration reads its own
/// slab.
///
/// A deeper ring runs `ahead` slabs ahead: iteration `of` fills the stage
/// of slab `of + ahead * step`, and a prologue loop (`prologue`, stepping
/// by `step` from 0) fills the stages of slabs `0 .. ahead` before it
/// (its iteration `p` the stage of slab `p`).
///
/// A ring `filled_by` a producer's loop (warp specialisation,
/// `schedule::producer_ring`) is filled there instead: that loop's
/// iteration `p` (stepping by `step` from 0, like `of`) writes the stage
/// of slab `p`, and nothing else writes the ring; the two loops meet only
/// at the mbarriers, whose protocol `verify::mbarrier` proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    pub stages: u32,
    pub stage_len: i64,
    pub of: IVar,
    pub step: i64,
    pub ahead: u32,
    pub prologue: Option<IVar>,
    pub filled_by: Option<IVar>,
}

/// `stages` barriers in shared memory (`mbarrier`, 8 bytes each), each
/// completing a phase when `arrivals` arrivals have reached it (see
/// `KStmt::MbarArrive`, `KStmt::CpAsyncArrive`); what a ring's stage of
/// slabs is waited on (`schedule::producer_ring`).
#[derive(Clone, Debug, PartialEq)]
pub struct MbarArray {
    pub name: String,
    pub stages: u32,
    pub arrivals: u32,
}

/// A padded slab: `rows` rows of `width` data slots, `stride` apart. The
/// slots past `width` in each row are padding (it spreads a lane group's
/// reads over distinct banks); the verifier proves that no access touches
/// them, so a read shifted into the padding (in bounds, but reading what
/// nobody wrote) is refuted like one past the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub rows: u32,
    pub width: u32,
    pub stride: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessKind {
    Read,
    Write,
}

/// Where an access came from, for diagnostics that point at the source.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub buf: BufId,
    pub kind: AccessKind,
    pub span: Span,
    pub what: String,
}

/// One launch dimension of the grid.
#[derive(Clone, Debug, PartialEq)]
pub enum GridDim {
    /// Exactly this many blocks (tiles owned by blocks).
    Exact(IExpr),
    /// A grid-stride loop covers `work` items at `per_block` per block: any
    /// number of blocks >= 1 is correct; the launcher uses
    /// `clamp(ceil(work / per_block), 1, max_blocks)`.
    Stride { work: IExpr, per_block: i64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Schedule {
    /// One thread per element, grid-stride; `vector` elements per thread
    /// with 16-byte accesses when every access is the thread's own element;
    /// `vectors` of them an iteration (2: the vectors `u` and `u + half`,
    /// half the array apart, both loaded before either is computed).
    Pointwise { vector: u32, vectors: u32 },
    /// Pointwise with indirect (gathered) reads.
    Gather,
    /// One block per row, fused block reductions (warp shuffles, then
    /// shared memory across warps).
    RowReduction { rows_rank: u32 },
    /// One block per row, the row's inputs read once into registers by
    /// 16-byte loads (`slots` runs of `width` elements a thread), every
    /// pass over the row reading the registers.
    RowCached { rows_rank: u32, slots: u32, width: u32 },
    /// Shared-memory tiled contraction (SIMT), `bm x bn` tiles, `bk` deep,
    /// `tm x tn` outputs per thread.
    Contraction { bm: u32, bn: u32, bk: u32, tm: u32, tn: u32 },
    /// Shared-memory tiled contraction on the matrix unit: `bm x bn` tiles,
    /// `bk` deep, four warps of `bm / 2 x bn / 2`, `shape` instructions.
    TensorCore { bm: u32, bn: u32, bk: u32, shape: MmaShape },
    /// Shared-memory tiled contraction on the warpgroup unit (`wgmma`,
    /// sm_90a): `bm x bn` tiles, `bk` deep, one warpgroup per 64 rows,
    /// instructions 64 x `n` x 16.
    Warpgroup { bm: u32, bn: u32, bk: u32, n: u32 },
    /// Reductions down the columns of row-major tensors: a block per
    /// `lanes` neighbouring columns (a warp's lanes read consecutive
    /// columns of one row), the block's `block / lanes` thread groups
    /// splitting the rows, each thread summing `chains` interleaved chains
    /// (`schedule::column`).
    ColumnReduction { lanes: u32, chains: u32 },
    /// Shared-memory tiled contraction (SIMT) whose threads split the sum:
    /// `bm x bn` tiles, `bk`-deep slabs, `tm x tn` outputs per thread, in
    /// `groups` thread groups, group `g` summing the slab's k with `k %
    /// groups == g`; the groups' partial tiles meet in a tree in shared
    /// memory (`schedule::split_sum`).
    SplitContraction { bm: u32, bn: u32, bk: u32, tm: u32, tn: u32, groups: u32 },
    /// Contraction for outputs at most `cols` wide with the warp's lanes
    /// along the sum (`schedule::narrow`): `warps` warps a block, `rows`
    /// output rows a warp, B's slabs `bk` deep in shared memory, the
    /// lanes' partials summed by a butterfly.
    NarrowContraction { warps: u32, rows: u32, cols: u32, bk: u32 },
}

impl Schedule {
    pub fn name(&self) -> &'static str {
        match self {
            Schedule::Pointwise { .. } => "pointwise",
            Schedule::Gather => "gather",
            Schedule::RowReduction { .. } => "row-reduction",
            Schedule::RowCached { .. } => "row-reduction, cached in registers",
            Schedule::Contraction { .. } => "contraction",
            Schedule::TensorCore { .. } => "tensor-core contraction",
            Schedule::Warpgroup { .. } => "warpgroup tensor-core contraction",
            Schedule::ColumnReduction { .. } => "column reduction",
            Schedule::SplitContraction { .. } => "split-sum contraction",
            Schedule::NarrowContraction { .. } => "narrow contraction",
        }
    }

    /// The schedule's parameters as `name=value` pairs, in a fixed order:
    /// what a tuning candidate is (with the block size, `KernelIr::block`).
    pub fn params(&self) -> Vec<(&'static str, u32)> {
        match *self {
            Schedule::Pointwise { vector, vectors } => vec![("vector", vector), ("vectors", vectors)],
            Schedule::Gather => vec![],
            Schedule::RowReduction { .. } => vec![],
            Schedule::RowCached { slots, width, .. } => vec![("runs", slots), ("width", width)],
            Schedule::Contraction { bm, bn, bk, tm, tn } => vec![("bm", bm), ("bn", bn), ("bk", bk), ("tm", tm), ("tn", tn)],
            Schedule::TensorCore { bm, bn, bk, .. } => vec![("bm", bm), ("bn", bn), ("bk", bk)],
            Schedule::Warpgroup { bm, bn, bk, n } => vec![("bm", bm), ("bn", bn), ("bk", bk), ("n", n)],
            Schedule::ColumnReduction { lanes, chains } => vec![("lanes", lanes), ("chains", chains)],
            Schedule::SplitContraction { bm, bn, bk, tm, tn, groups } => vec![("bm", bm), ("bn", bn), ("bk", bk), ("tm", tm), ("tn", tn), ("groups", groups)],
            Schedule::NarrowContraction { warps, rows, cols, bk } => vec![("warps", warps), ("rows", rows), ("cols", cols), ("bk", bk)],
        }
    }
}

impl KernelIr {
    /// The schedule and its parameters in one line (`row-reduction
    /// block=128`), as the tuner's report names a candidate.
    pub fn params_text(&self) -> String {
        let mut s = format!("{} block={}", self.schedule.name(), self.block);
        for (n, v) in self.schedule.params() {
            s.push_str(&format!(" {}={}", n, v));
        }
        s
    }
}

/// How a reduction's terms are combined, so that the mirror oracle can
/// follow the kernel's own order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReductionOrder {
    /// In index order by one thread (`fma` for sums of products in f32/f64).
    Sequential,
    /// Strided partials over `threads` threads, then a butterfly within each
    /// warp of `warp` lanes, then a butterfly over the warps' results.
    Block { threads: u32, warp: u32 },
    /// As `Block`, with the thread's partial taken over runs of `width`
    /// consecutive indices: thread `t` sums, in order, the runs that start
    /// at `(j * threads + t) * width` for `j = 0, 1, ...` (a row cached in
    /// registers by 16-byte loads).
    /// At most `slots` runs a thread (the registers that hold them).
    BlockRuns { threads: u32, warp: u32, width: u32, slots: u32 },
    /// On a matrix unit (tensor cores): `k` products per instruction,
    /// `per_promotion` instructions chained through the unit's accumulator
    /// from zero, each chain's result then added in f32 (to nearest) to
    /// the thread's running sum, in index order. The unit's own rounding
    /// is a named assumption (`tokitai_contracts::fp::matrix_unit`).
    MatrixUnit { k: u32, per_promotion: u32 },
    /// Down a column by `groups` thread groups of `chains` chains each:
    /// chain `u` of group `g` adds the terms `g + u groups + j groups
    /// chains`, `j = 0, 1, ...`, in order from zero; the group adds its
    /// chains in order from zero; then the groups' partials meet in a
    /// tree, `p[g] += p[g + s]` for `g < s`, `s = groups / 2, ..., 1`.
    /// Also the order of a split-sum contraction (`schedule::split_sum`,
    /// one chain a group: group `g` sums the k with `k % groups == g`).
    Columns { groups: u32, chains: u32 },
}

/// An execution variable a coverage witness assigns.
#[derive(Clone, Debug, PartialEq)]
pub enum Witness {
    Var(IVar),
    Tid,
    BlockIdx(u8),
}

/// Elements satisfying `when` are written (or read) by the execution of
/// `access` that `assign` describes, as terms over the element.
#[derive(Clone, Debug, PartialEq)]
pub struct CoverCase {
    pub when: Cond,
    pub access: AccessId,
    pub assign: Vec<(Witness, IExpr)>,
}

/// The schedule's inverse map for one buffer: for every element `elem` (a
/// flat index), which execution reaches it. The prover checks it, so a
/// wrong witness can only fail a proof, never fake one.
#[derive(Clone, Debug, PartialEq)]
pub struct Cover {
    pub buf: BufId,
    /// The element: one variable, its flat index; or one per axis.
    pub elem: Vec<IVar>,
    pub cases: Vec<CoverCase>,
    /// "every element of `y` is written", "every k of every tile is loaded".
    pub what: String,
}

impl KStmt {
    /// `for (var = 0; var < n; ++var)`, fully unrolled (register tiles,
    /// vector lanes: constant trip counts).
    pub fn unrolled(var: IVar, n: u32, body: Vec<KStmt>) -> KStmt {
        KStmt::For { var, start: IExpr::c(0), end: IExpr::c(n as i64), step: IExpr::c(1), unroll: true, body }
    }
}

/// A loop that visits the index range of a reduction: the prover checks
/// that it visits every index in `[0, extent)` exactly once and nothing
/// outside it, and that every accumulator slot it updates is updated in
/// every iteration; the visits are either in one
/// thread (`cooperative == false`: each thread reduces the whole range) or
/// spread over the threads of a block (`true`: each index by one thread,
/// whose partials the block then combines).
#[derive(Clone, Debug, PartialEq)]
pub struct ReductionLoop {
    pub var: IVar,
    pub extent: IExpr,
    pub cooperative: bool,
    /// Indices per iteration: 1, or the depth of a k-slab (the loop visits
    /// `[v, v + granule)` at `v`, the rest of the slab being inner loops).
    pub granule: i64,
    /// The reduction's source variable and where it is bound, for diagnostics.
    pub name: String,
    pub span: Span,
    /// Where the loop's variable is not the index it visits (a row cached
    /// in registers: slot loop, then lane loop), what the iterations visit.
    pub visits: Option<Visits>,
}

/// The indices a cooperative reduction's iterations visit when its loop
/// variable is not the index: in the iteration of the lane loop (the
/// `ReductionLoop`'s `var`) where the loop body's guard holds (the `If`
/// that is the body's first statement, if any), the thread visits index
/// `at`, a term over the enclosing loops' variables and the thread. The
/// prover checks that every index of the range is visited by the thread
/// and the iteration `witness` names for it (as terms over `elem`), that
/// no two visits of one row hit one index, and that nothing outside the
/// range is visited. `outer` is the outermost loop of the visiting
/// iterations: what holds on entering it holds for every thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Visits {
    pub outer: IVar,
    pub at: IExpr,
    pub elem: IVar,
    pub witness: Vec<(Witness, IExpr)>,
    /// Register arrays each visiting iteration writes at its own slot (a
    /// term held for the element statements, `row_cached::Held`): not
    /// accumulators, so not asked to be updated whole in every iteration;
    /// every read of them is proved set before, as for the row's own
    /// registers.
    pub held: Vec<LocalId>,
    /// Where the block's threads sum into several values (a column each:
    /// `schedule::column`), the value a thread sums into, a term over the
    /// thread: visits are complete and unique among the threads of equal
    /// `team`, not the whole block. `None`: the block sums one value.
    pub team: Option<IExpr>,
}

/// A kernel parameter in signature order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KParam {
    Buffer(BufId),
    Scalar(ScalarId),
    Dim(DimId),
    /// A tensor map (`KernelIr::tensor_maps`), passed by value.
    TensorMap(TensorMapId),
    /// The contract monitor's observation buffer (`KStmt::ObserveFlush`):
    /// `OBSERVE_WORDS * OBSERVE_SLOTS` 32-bit words per observed output,
    /// or null. Passed last.
    Observations,
}

/// Slots of one observed output: blocks merge into slot `block %
/// OBSERVE_SLOTS`, so that no slot is a hot spot for the atomics.
pub const OBSERVE_SLOTS: i64 = 64;
/// Words of one slot: the largest value's order key, the smallest's
/// complemented key, and the count of blocks that stored a NaN (all zero:
/// nothing stored).
pub const OBSERVE_WORDS: i64 = 3;

pub type TensorMapId = usize;

/// A tensor map the launch passes (`CUtensorMap`, 128 bytes, built by the
/// runtime from the launch's own buffer): buffer `buf`, a 2-D tensor of
/// 16-bit elements, in boxes of `box_outer` rows of `box_inner` elements
/// of its contiguous axis, with the 128-byte swizzle (so `box_inner` is
/// 64). The runtime builds it only where the kernel takes its vector path
/// (rows whole 16-byte runs, the buffer 16-byte aligned: what the map
/// needs); elsewhere it passes zeros, which the kernel never reads.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMap {
    pub name: String,
    pub buf: BufId,
    pub box_inner: u32,
    pub box_outer: u32,
}

#[derive(Clone, Debug)]
pub struct KernelIr {
    pub name: String,
    pub doc: String,
    pub target: Target,
    pub schedule: Schedule,
    /// Print CUDA's fast intrinsics (`__expf`, `__fdividef`) for f32 `exp`
    /// and `/`: a tuning candidate, analysed under their documented error
    /// (`LibraryTable::cuda_intrinsics`), rejected where that misses the
    /// declared tolerance.
    pub fast_intrinsics: bool,
    /// Integer type of index arithmetic.
    pub index_ty: Dtype,
    pub bufs: Vec<Buffer>,
    pub scalars: Vec<(String, Dtype)>,
    pub dims: Vec<String>,
    pub params: Vec<KParam>,
    /// Threads per block (1-D blocks).
    pub block: u32,
    /// Blocks the schedule wants resident per multiprocessor (a register
    /// cap for the device compiler: `__launch_bounds__`'s second value);
    /// 1 asks nothing.
    pub min_blocks: u32,
    pub grid: Vec<GridDim>,
    pub shared: Vec<SharedArray>,
    /// Barriers in shared memory, after the arrays.
    pub mbarriers: Vec<MbarArray>,
    /// Tensor maps the launch passes (`KParam::TensorMap`).
    pub tensor_maps: Vec<TensorMap>,
    pub locals: Vec<LocalDecl>,
    pub ivars: Vec<String>,
    pub body: Vec<KStmt>,
    pub accesses: Vec<Access>,
    pub reduction_order: BTreeMap<VarId, ReductionOrder>,
    /// Coverage witnesses, one per output (and per contraction operand).
    pub coverage: Vec<Cover>,
    /// Outputs whose stored values the contract monitor observes
    /// (`KStmt::ObserveFlush`): every store to one also folds the stored
    /// value into the thread's observation of it.
    pub observed: Vec<BufId>,
    /// Domain relations between two observed outputs that the kernel
    /// checks on the values it stores (`KStmt::ObserveRelation`); each
    /// has its block of observation words after the outputs'.
    pub related: Vec<Related>,
    pub reduction_loops: Vec<ReductionLoop>,
    /// The modulus of the residue builtins (`mulmod`, `addmod`, `vp`,
    /// `skip_if`), printed into each call as constants.
    pub modulus: Option<tokitai_contracts::residue::Modulus>,
}

/// A domain relation `square * square <= factor * bound` (the kernel's
/// relation number `relation`) that a kernel checks on the values it
/// stores into two observed outputs (see `KernelIr::related`).
#[derive(Clone, Debug, PartialEq)]
pub struct Related {
    pub relation: usize,
    pub square: BufId,
    pub bound: BufId,
    pub factor: f64,
}

impl KernelIr {
    /// Blocks of `OBSERVE_SLOTS * OBSERVE_WORDS` observation words the
    /// kernel merges into: one per observed output, then one per related
    /// pair.
    pub fn observation_blocks(&self) -> i64 {
        (self.observed.len() + self.related.len()) as i64
    }

    /// An empty kernel (for evaluating contracts, which need no schedule).
    pub fn stub() -> KernelIr {
        KernelIr {
            name: String::new(),
            doc: String::new(),
            target: Target::default_cuda(),
            schedule: Schedule::Pointwise { vector: 1, vectors: 1 },
            fast_intrinsics: false,
            index_ty: Dtype::I64,
            bufs: vec![],
            scalars: vec![],
            dims: vec![],
            params: vec![],
            block: 1,
            min_blocks: 1,
            grid: vec![],
            shared: vec![],
            locals: vec![],
            ivars: vec![],
            body: vec![],
            accesses: vec![],
            reduction_order: BTreeMap::new(),
            coverage: vec![],
            observed: vec![],
            related: vec![],
            reduction_loops: vec![],
            mbarriers: vec![],
            tensor_maps: vec![],
            modulus: None,
        }
    }

    pub fn shared_bytes(&self) -> u32 {
        if self.dynamic_shared() {
            return self.shared_offsets().1;
        }
        self.static_shared_bytes()
    }

    fn static_shared_bytes(&self) -> u32 {
        self.shared.iter().map(|s| s.len * s.ty.size_bytes()).sum::<u32>() + self.mbarrier_bytes()
    }

    fn mbarrier_bytes(&self) -> u32 {
        self.mbarriers.iter().map(|m| 8 * m.stages).sum()
    }

    /// Do the shared arrays need dynamic shared memory (more than a block
    /// may declare statically)? Then the launch asks for
    /// [`shared_bytes`](Self::shared_bytes) of it.
    pub fn dynamic_shared(&self) -> bool {
        self.static_shared_bytes() > STATIC_SHARED_LIMIT
    }

    /// Each shared array's byte offset in dynamic shared memory (every one
    /// 128-byte aligned), and the bytes in all (the barriers' included).
    pub fn shared_offsets(&self) -> (Vec<u32>, u32) {
        let (offsets, at) = self.array_offsets();
        (offsets, at + self.mbarrier_bytes())
    }

    /// Each barrier array's byte offset in dynamic shared memory: after the
    /// arrays, 8-byte aligned (the arrays end 128-byte aligned).
    pub fn mbarrier_offsets(&self) -> Vec<u32> {
        let mut at = self.array_offsets().1;
        self.mbarriers
            .iter()
            .map(|m| {
                let here = at;
                at += 8 * m.stages;
                here
            })
            .collect()
    }

    fn array_offsets(&self) -> (Vec<u32>, u32) {
        let mut at: u32 = 0;
        let offsets = self
            .shared
            .iter()
            .map(|s| {
                let here: u32 = if s.swizzled { at.next_multiple_of(SWIZZLE_ALIGN) } else { at };
                at = (here + s.len * s.ty.size_bytes()).next_multiple_of(128);
                here
            })
            .collect();
        (offsets, at)
    }
}
