//! Symbolic execution of `KernelIr`: every access, barrier and integer
//! operation, with the path condition under which it runs, as terms over
//! dims, thread and block ids and loop variables.
//!
//! Loops: a loop variable `k` of `for (k = s; k < e; k += step)` satisfies
//! `s <= k < e`; with a constant step also `(k - s) % step == 0`. Grid-sized
//! strides (`gridDim * c`) are kept symbolic only through their divisibility
//! by `c`; what they imply (each value belongs to one thread) enters race
//! queries as the loop-form lemmas of `LoopForm`.

use crate::kir::*;
use crate::tir::{self, Kernel, TExpr, TExprKind};
use crate::types::Dtype;
use std::collections::HashMap;
use tokitai_contracts::{Formula, Term};

pub const TID: &str = "tid";
pub const BID: [&str; 3] = ["bid.x", "bid.y", "bid.z"];
pub const GDIM: [&str; 3] = ["grid.x", "grid.y", "grid.z"];

pub fn dim_var(name: &str) -> Term {
    Term::var(format!("dim.{}", name))
}

/// How a loop distributes its iterations over threads (for the lemmas).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopForm {
    /// `k = a + bid*B + tid; k += grid*B`: a value of k determines (bid, tid).
    GridStride,
    /// `k = a + bid; k += grid`: a value of k determines bid.
    BlockStride,
    /// `k = a + tid; k += B` (B the block size): a value of k determines tid.
    ThreadStride,
    /// Every thread runs every iteration.
    Uniform,
    Other,
}

#[derive(Clone, Debug)]
pub struct LoopInfo {
    pub var: String,
    /// The form, `Other` unless Z3 confirmed the canonical shape exactly.
    pub form: LoopForm,
    pub has_barrier: bool,
    pub start: Term,
    /// The statement list of its body (`Access::pos` names it).
    pub body_list: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    Global(BufId),
    /// The monitor's observation words (`KParam::Observations`), merged
    /// atomically.
    Observations,
    Shared(SharedId),
    Array(LocalId, u32),
}

#[derive(Clone, Debug)]
pub struct Access {
    pub target: Target,
    pub write: bool,
    pub index: Term,
    pub width: u32,
    pub path: Vec<Formula>,
    /// Enclosing loops, outermost first (indices into `Exec::loops`).
    pub loops: Vec<usize>,
    /// (list id, position) from the root to the access.
    pub pos: Vec<(usize, usize)>,
    pub access: Option<AccessId>,
    /// The stored value (for dtype and `ensures`).
    pub value: Option<VExpr>,
    /// The path with each thread-distributing loop replaced by the range
    /// its threads cover together (the loop-form lemmas), and every other
    /// loop encoded exactly: what coverage witnesses must satisfy.
    pub cover_path: Vec<Formula>,
    /// A store's multi-index (empty when only the flat index is known).
    pub axes: Vec<Term>,
    /// An asynchronous copy's shared write (`KStmt::CpAsync`): it may land
    /// any time until its group is retired, so race-freedom pairs it with
    /// every access in its window (`verify::protocol::copy_windows`), not
    /// only those between the same barriers.
    pub in_flight: bool,
}

/// A local's value at one assignment, with its path.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub local: LocalId,
    pub value: VExpr,
    pub path: Vec<Formula>,
}

/// A write of register-array slots: one slot (`index`) or the first
/// `width` slots (a vector load), under `path`, inside `loops`.
#[derive(Clone, Debug)]
pub struct SlotWrite {
    pub index: Option<Term>,
    pub width: u32,
    pub path: Vec<Formula>,
    pub loops: Vec<usize>,
    /// Program-order sequence number among all slot writes.
    pub seq: usize,
}

/// A read of a slot of a register array declared without a value: the slot
/// term (a fresh `slot#n` for each slot of a vector store), its range, the
/// path, and what was written before it (in program order) that may set it.
#[derive(Clone, Debug)]
pub struct SlotRead {
    /// A read (`false`), or the check at the end of a reduction loop's
    /// iteration that every slot of an accumulator was updated (`true`).
    pub accumulator: bool,
    /// The reduction (accumulators) or the vector store, where known.
    pub span: Option<crate::span::Span>,
    pub slot: Term,
    pub slot_range: Vec<Formula>,
    pub path: Vec<Formula>,
    /// For each earlier write that can be tied to this slot, the condition
    /// under which it set exactly this slot; writes inside loops already left
    /// count only when their slot names the loop variable (solved for it).
    pub set_by: Vec<Formula>,
    pub what: String,
    /// For an accumulator's check, the array: only a thread that reads it
    /// somewhere needs its every slot (`array_readers`).
    pub owner_of: Option<LocalId>,
}

/// A loop over a reduction's range, with its bounds as terms and the path
/// under which it starts.
#[derive(Clone, Debug)]
pub struct ReductionVisit {
    pub name: String,
    pub span: crate::span::Span,
    pub cooperative: bool,
    pub granule: i64,
    pub start: Term,
    pub end: Term,
    pub step: Term,
    pub extent: Term,
    pub path: Vec<Formula>,
}

/// A reduction whose iterations visit the index `at` (`kir::Visits`):
/// `path` holds where a visit happens (the lane loop's guard included),
/// `outer_path` what held on entering the visiting loops, `witness` the
/// thread and loop variables (by their names in the terms) that visit
/// index `elem`, as terms over `elem`.
#[derive(Clone, Debug)]
pub struct LaneVisit {
    pub name: String,
    pub span: crate::span::Span,
    pub extent: Term,
    pub at: Term,
    pub path: Vec<Formula>,
    pub outer_path: Vec<Formula>,
    pub elem: Term,
    pub witness: Vec<(String, Term)>,
    /// `kir::Visits::team`, a term over the thread.
    pub team: Option<Term>,
}

#[derive(Clone, Debug)]
pub struct Barrier {
    /// Every enclosing condition and loop bound, thread-uniform?
    pub uniform: bool,
    pub why_not: String,
    /// What must be reached: a barrier, or a warp-collective instruction
    /// (asked the same, which is stronger than it needs, unless `group`).
    pub what: &'static str,
    /// For a collective instruction of `group.0` consecutive threads (a
    /// warp, a warpgroup) whose only thread-dependent enclosing
    /// statements are conditions (no loop bounds), those conditions with
    /// the path to them: each must take one value across every group,
    /// which the solver is asked (a warpgroup's `if (tid < 256)` of the
    /// producer split).
    pub group: Option<(u32, Vec<Formula>, Vec<Formula>)>,
}

/// A `Wgmma` operand's descriptor as executed: its base, the path to it,
/// its shared array's name, the enclosing loops' variables, and the
/// alignment its base needs in elements: 8 (16 bytes), or 512 (1024
/// bytes) for the 128-byte swizzle.
#[derive(Clone, Debug)]
pub struct Descriptor {
    pub base: Term,
    pub path: Vec<Formula>,
    pub array: String,
    pub loops: Vec<String>,
    pub align: i64,
}

/// What an mbarrier statement does (see `KStmt::MbarInit` and the rest).
#[derive(Clone, Debug, PartialEq)]
pub enum MbarKind {
    Init,
    Arrive,
    /// `KStmt::CpAsyncArrive`: an arrival once the thread's copies land.
    CopiesArrive,
    /// `KStmt::MbarExpectTx`: an arrival that raises the bytes the phase
    /// waits for.
    ExpectTx { bytes: u32 },
    /// `KStmt::TmaLoad`: a bulk copy whose `bytes` complete on the barrier.
    Transaction { bytes: u32 },
    Wait { parity: Term },
}

/// An mbarrier statement as executed: which barrier of which array, under
/// what path, inside which loops, where (as `Access::pos`), and the
/// enclosing conditions and loop bounds that depend on the thread (who
/// arrives: `verify::mbarrier` counts them).
#[derive(Clone, Debug)]
pub struct MbarEvent {
    pub kind: MbarKind,
    pub bar: MbarId,
    /// The barrier's index in its array (`Const(0)` for an `Init`, which
    /// initialises all of them).
    pub stage: Term,
    pub path: Vec<Formula>,
    pub loops: Vec<usize>,
    pub pos: Vec<(usize, usize)>,
    /// The thread-dependent enclosing conditions' formulas; `None` where
    /// a loop bound depends on the thread (no count can be given).
    pub thread_conds: Option<Vec<Formula>>,
}

/// The run-time fact that buffer `name` is `bytes`-byte aligned.
pub fn aligned(name: &str, bytes: u32) -> Formula {
    Term::var(format!("aligned{}.{}", bytes, name)).eq(Term::c(1))
}

/// An integer variable id no `KernelIr` uses: the register of a fragment
/// while a `FragmentLoad`'s reads are recorded.
const FRAGMENT_REGISTER: IVar = usize::MAX;
/// Likewise: the k index of a `Wgmma` operand's element.
const WGMMA_K: IVar = usize::MAX - 1;

/// An integer operation to check for overflow or a defined division.
#[derive(Clone, Debug)]
pub struct IntOp {
    pub term: Term,
    pub path: Vec<Formula>,
    pub division: Option<(Term, Term)>,
    pub origin: String,
}

#[derive(Clone, Debug, Default)]
pub struct ListInfo {
    pub barriers: Vec<usize>,
    pub in_loop: bool,
}

pub struct Exec<'a> {
    pub ir: &'a KernelIr,
    pub k: &'a Kernel,
    env: HashMap<IVar, Term>,
    /// Is the term bound to an int var thread-uniform?
    uniform: HashMap<IVar, bool>,
    pub path: Vec<Formula>,
    cover_path: Vec<Formula>,
    pub loops: Vec<LoopInfo>,
    loop_stack: Vec<usize>,
    pub assignments: Vec<Assignment>,
    pos: Vec<(usize, usize)>,
    pub lists: Vec<ListInfo>,
    pub accesses: Vec<Access>,
    pub barriers: Vec<Barrier>,
    /// Each `Wgmma` operand's base (the descriptor's address), with its
    /// path: the unit asks one descriptor of the whole warpgroup, 16-byte
    /// aligned.
    pub descriptors: Vec<Descriptor>,
    pub mbar_events: Vec<MbarEvent>,
    /// Each bulk copy's tensor map as the copy needs it: the path to the
    /// copy, the map, and the tensor's row length (what must be whole
    /// 16-byte runs of a 16-byte aligned buffer for the map to exist).
    pub bulk_maps: Vec<(Vec<Formula>, TensorMapId, Term)>,
    /// Each register allowance a thread sets (`KStmt::SetMaxRegisters`),
    /// with the conditions on the threads that set it (as
    /// `MbarEvent::thread_conds`).
    pub allowances: Vec<(u32, Option<Vec<Formula>>)>,
    pub int_ops: Vec<IntOp>,
    fresh: usize,
    /// Launch assumptions: dims, ids, requires, index-tensor contracts.
    pub base: Vec<Formula>,
    /// Each enclosing condition or loop bound: thread-uniform, what it
    /// is, and for a condition its formula (negated in the else arm).
    cond_stack: Vec<(bool, String, Option<Formula>)>,
    /// For each register array, the thread-only conditions (in tid alone)
    /// on the path of each of its reads: a thread that reads it meets one
    /// of them (`completeness`: the threads whose accumulator counts).
    pub array_readers: HashMap<LocalId, Vec<Formula>>,
    /// Register arrays and their slot writes since their declaration;
    /// `uninit` the arrays declared without a value (whose reads are checked).
    slot_writes: HashMap<LocalId, Vec<SlotWrite>>,
    uninit: std::collections::HashSet<LocalId>,
    slot_seq: usize,
    /// The slot sequence number at each array's declaration.
    declared_at: HashMap<LocalId, usize>,
    /// Ids (into `loops`) of the loops that are reduction loops.
    reduction_ids: Vec<usize>,
    /// The symbolic value of each indirect-index element read so far, with
    /// the facts its tensor's contract gives about it.
    load_values: HashMap<(AccessId, String), (Term, Vec<Formula>)>,
    pub slot_reads: Vec<SlotRead>,
    pub reductions: Vec<ReductionVisit>,
    pub lane_visits: Vec<LaneVisit>,
    /// The path's length on entering each loop that is some reduction's
    /// `Visits::outer`.
    outer_marks: HashMap<IVar, usize>,
}

fn contains_barrier(body: &[KStmt]) -> bool {
    body.iter().any(|s| match s {
        KStmt::Barrier => true,
        KStmt::For { body, .. } => contains_barrier(body),
        KStmt::If { then, els, .. } => contains_barrier(then) || contains_barrier(els),
        KStmt::SkipWhen { body, .. } => contains_barrier(body),
        _ => false,
    })
}

fn mentions(t: &Term, names: &[&str]) -> bool {
    let mut v = Vec::new();
    t.vars(&mut v);
    v.iter().any(|x| names.contains(&x.as_str()))
}

impl<'a> Exec<'a> {
    pub fn run(k: &'a Kernel, ir: &'a KernelIr) -> Exec<'a> {
        let mut e = Exec {
            ir,
            k,
            env: HashMap::new(),
            uniform: HashMap::new(),
            path: Vec::new(),
            cover_path: Vec::new(),
            loops: Vec::new(),
            loop_stack: Vec::new(),
            assignments: Vec::new(),
            pos: Vec::new(),
            lists: Vec::new(),
            accesses: Vec::new(),
            barriers: Vec::new(),
            descriptors: Vec::new(),
            mbar_events: Vec::new(),
            bulk_maps: Vec::new(),
            allowances: Vec::new(),
            int_ops: Vec::new(),
            fresh: 0,
            base: Vec::new(),
            cond_stack: Vec::new(),
            array_readers: HashMap::new(),
            slot_writes: HashMap::new(),
            uninit: Default::default(),
            slot_seq: 0,
            declared_at: HashMap::new(),
            reduction_ids: Vec::new(),
            load_values: HashMap::new(),
            slot_reads: Vec::new(),
            reductions: Vec::new(),
            lane_visits: Vec::new(),
            outer_marks: HashMap::new(),
        };
        e.base = e.launch_assumptions();
        let root = e.new_list(false);
        e.block(&ir.body, root);
        e
    }

    fn new_list(&mut self, in_loop: bool) -> usize {
        self.lists.push(ListInfo { barriers: Vec::new(), in_loop });
        self.lists.len() - 1
    }

    /// dims >= 1, ids in range, the grid as launched, `requires` (its
    /// integer part), and every launch's own limits.
    fn launch_assumptions(&mut self) -> Vec<Formula> {
        let mut h = Vec::new();
        for d in &self.k.dims {
            h.push(Term::c(1).le(dim_var(&d.name)));
        }
        h.push(Term::var(TID).within(Term::c(0), Term::c(self.ir.block as i64)));
        // Launch limits of both vendors: gridDim.x < 2^31, gridDim.y and
        // gridDim.z < 2^16; an axis the kernel does not use is launched
        // with one block.
        for axis in self.ir.grid.len()..3 {
            h.push(Term::var(GDIM[axis]).eq(Term::c(1)));
            h.push(Term::var(BID[axis]).eq(Term::c(0)));
        }
        h.push(Term::var(GDIM[0]).le(Term::c((1i64 << 31) - 1)));
        h.push(Term::var(GDIM[1]).le(Term::c(65535)));
        h.push(Term::var(GDIM[2]).le(Term::c(65535)));
        // No tensor has more than 2^62 elements (no memory holds one); the
        // launcher checks every length against the index type it uses.
        for b in 0..self.ir.bufs.len() {
            h.push(self.index_len(b).le(Term::c(1i64 << 62)));
        }
        for (axis, g) in self.ir.grid.iter().enumerate() {
            let gd = Term::var(GDIM[axis]);
            h.push(Term::var(BID[axis]).within(Term::c(0), gd.clone()));
            match g {
                GridDim::Exact(e) => {
                    let t = self.iterm_pure(e);
                    h.push(gd.eq(t));
                }
                GridDim::Stride { work, per_block } => {
                    // The launcher never starts more blocks than there is work.
                    let w = self.iterm_pure(work);
                    h.push(Term::c(1).le(gd.clone()));
                    h.push(gd.le(w.add(Term::c(per_block - 1)).div(Term::c(*per_block))));
                }
            }
        }
        for c in &self.k.requires {
            if let tir::Contract::Pred { expr, .. } = c {
                if let Some(f) = contract_formula(self.k, expr) {
                    h.push(f);
                }
            }
        }
        h
    }

    /// The term of an integer expression, without recording anything.
    pub fn iterm_public(&mut self, e: &IExpr) -> Term {
        let saved = (self.path.len(), self.cover_path.len());
        let t = self.iterm_pure(e);
        self.path.truncate(saved.0);
        self.cover_path.truncate(saved.1);
        t
    }

    /// Terms of expressions that cannot load (launch geometry).
    fn iterm_pure(&mut self, e: &IExpr) -> Term {
        let saved = std::mem::take(&mut self.int_ops);
        let t = self.iterm(e);
        self.int_ops = saved;
        t
    }

    pub fn index_len(&self, buf: BufId) -> Term {
        let b = &self.ir.bufs[buf];
        let shape = &self.k.tensors[b.tensor].shape;
        shape.iter().fold(Term::c(1), |acc, d| acc.mul(dim_term(self.k, *d)))
    }

    fn int_op(&mut self, term: &Term, division: Option<(Term, Term)>, origin: &str) {
        self.int_ops.push(IntOp { term: term.clone(), path: self.path.clone(), division, origin: origin.to_string() });
    }

    /// The term of an integer expression; records every arithmetic node.
    pub fn iterm(&mut self, e: &IExpr) -> Term {
        match e {
            IExpr::Const(v) => Term::c(*v),
            IExpr::Dim(d) => dim_var(&self.ir.dims[*d]),
            IExpr::Var(v) => self.env.get(v).cloned().unwrap_or_else(|| Term::var(format!("unbound.{}", v))),
            IExpr::Tid => Term::var(TID),
            IExpr::BlockIdx(a) => Term::var(BID[*a as usize]),
            IExpr::GridDim(a) => Term::var(GDIM[*a as usize]),
            IExpr::Add(a, b) | IExpr::Sub(a, b) | IExpr::Mul(a, b) => {
                let (x, y) = (self.iterm(a), self.iterm(b));
                let t = match e {
                    IExpr::Add(..) => x.add(y),
                    IExpr::Sub(..) => x.sub(y),
                    _ => x.mul(y),
                };
                self.int_op(&t, None, "arithmetic");
                t
            }
            IExpr::Div(a, b) | IExpr::Rem(a, b) => {
                let (x, y) = (self.iterm(a), self.iterm(b));
                let t = if matches!(e, IExpr::Div(..)) { x.clone().div(y.clone()) } else { x.clone().rem(y.clone()) };
                self.int_op(&t, Some((x, y)), "division");
                t
            }
            IExpr::Min(a, b) => {
                let (x, y) = (self.iterm(a), self.iterm(b));
                x.min(y)
            }
            IExpr::Load { buf, index, access } => {
                let i = self.iterm(index);
                self.record(Target::Global(*buf), false, i.clone(), 1, Some(*access), None);
                // One element read twice (a flat index and its axes) is one
                // value: index tensors are inputs, never written by the kernel.
                let key = (*access, i.to_string());
                if let Some((v, facts)) = self.load_values.get(&key).cloned() {
                    self.path.extend(facts);
                    return v;
                }
                self.fresh += 1;
                let v = Term::var(format!("load.{}.{}", self.ir.bufs[*buf].name, self.fresh));
                let mut facts = Vec::new();
                if let Some(r) = &self.k.tensors[self.ir.bufs[*buf].tensor].value_range {
                    if let (Some(lo), Some(hi)) = (texpr_term(self.k, &r.lo), texpr_term(self.k, &r.hi)) {
                        facts.push(if r.lo_closed { lo.le(v.clone()) } else { lo.lt(v.clone()) });
                        facts.push(if r.hi_closed { v.clone().le(hi) } else { v.clone().lt(hi) });
                    }
                } else {
                    let (lo, hi) = int_range(self.ir.bufs[*buf].dtype);
                    facts.push(v.clone().within(Term::c(lo), Term::c(hi).add(Term::c(1))));
                }
                self.path.extend(facts.iter().cloned());
                self.load_values.insert(key, (v.clone(), facts));
                v
            }
            IExpr::Select(c, a, b) => {
                let f = self.cond(c);
                let (x, y) = (self.iterm(a), self.iterm(b));
                Term::Ite(Box::new(f), Box::new(x), Box::new(y))
            }
        }
    }

    pub fn cond(&mut self, c: &Cond) -> Formula {
        match c {
            Cond::True => Formula::True,
            Cond::Lt(a, b) => {
                let (x, y) = (self.iterm(a), self.iterm(b));
                x.lt(y)
            }
            Cond::Le(a, b) => {
                let (x, y) = (self.iterm(a), self.iterm(b));
                x.le(y)
            }
            Cond::Eq(a, b) => {
                let (x, y) = (self.iterm(a), self.iterm(b));
                x.eq(y)
            }
            Cond::And(a, b) => {
                let (x, y) = (self.cond(a), self.cond(b));
                Formula::and(vec![x, y])
            }
            Cond::Not(a) => self.cond(a).not(),
            // Alignment is a run-time fact about pointers: either outcome is
            // possible, so it constrains nothing here; it is one fact per
            // buffer and launch (what a bulk copy's tensor map needs,
            // `bulk_maps`, is the same fact the kernel tested).
            Cond::Aligned(bufs, bytes) => Formula::and(bufs.iter().map(|b| aligned(&self.ir.bufs[*b].name, *bytes)).collect()),
        }
    }

    fn record(&mut self, target: Target, write: bool, index: Term, width: u32, access: Option<AccessId>, value: Option<VExpr>) {
        self.accesses.push(Access {
            target,
            write,
            index,
            width,
            path: self.path.clone(),
            loops: self.loop_stack.clone(),
            pos: self.pos.clone(),
            access,
            value,
            cover_path: self.cover_path.clone(),
            axes: Vec::new(),
            in_flight: false,
        });
    }

    /// The term of a witness expression, with `elem` bound to `elem_term`.
    pub fn witness_term(&mut self, e: &IExpr, elems: &[(IVar, Term)]) -> Term {
        for (v, t) in elems {
            self.env.insert(*v, t.clone());
        }
        let saved = (self.path.len(), self.cover_path.len());
        let t = self.iterm_pure(e);
        self.path.truncate(saved.0);
        self.cover_path.truncate(saved.1);
        t
    }

    pub fn witness_cond(&mut self, c: &Cond, elems: &[(IVar, Term)]) -> Formula {
        for (v, t) in elems {
            self.env.insert(*v, t.clone());
        }
        let saved_ops = std::mem::take(&mut self.int_ops);
        let f = self.cond(c);
        self.int_ops = saved_ops;
        f
    }

    pub fn loop_var_name(&self, v: IVar) -> String {
        format!("{}#{}", self.ir.ivars[v], v)
    }

    fn block(&mut self, body: &[KStmt], list: usize) {
        for (i, s) in body.iter().enumerate() {
            self.pos.push((list, i));
            self.stmt(s, list, i);
            self.pos.pop();
        }
    }

    fn vexpr(&mut self, v: &VExpr) {
        match &v.kind {
            VKind::Load { buf, index, axes, access } => {
                let i = self.iterm(index);
                let axes: Vec<Term> = axes.iter().map(|a| self.iterm(a)).collect();
                self.record(Target::Global(*buf), false, i, 1, Some(*access), None);
                if let Some(last) = self.accesses.last_mut() {
                    last.axes = axes;
                }
            }
            VKind::Int(i) => {
                self.iterm(i);
            }
            VKind::ArrayGet { arr, index } => {
                self.array_read(*arr);
                let i = self.iterm(index);
                let len = self.array_len(*arr);
                self.record(Target::Array(*arr, len), false, i.clone(), 1, None, None);
                self.read_slot(*arr, i, vec![], None);
            }
            VKind::SharedGet { arr, index } => {
                let i = self.iterm(index);
                self.record(Target::Shared(*arr), false, i, 1, None, None);
            }
            VKind::Unary(_, a) | VKind::Cast(a) | VKind::ShflXor { value: a, .. } => self.vexpr(a),
            VKind::Binary(_, a, b) => {
                self.vexpr(a);
                self.vexpr(b);
            }
            VKind::Fma(a, b, c) | VKind::Select(a, b, c) => {
                self.vexpr(a);
                self.vexpr(b);
                self.vexpr(c);
            }
            VKind::Call(_, args) => args.iter().for_each(|a| self.vexpr(a)),
            VKind::Const(_) | VKind::Scalar(_) | VKind::Local(_) => {}
        }
    }

    pub fn array_len(&self, arr: LocalId) -> u32 {
        fn find(body: &[KStmt], arr: LocalId) -> Option<u32> {
            body.iter().find_map(|s| match s {
                KStmt::DeclArray { arr: a, len, .. } if *a == arr => Some(*len),
                KStmt::For { body, .. } => find(body, arr),
                KStmt::If { then, els, .. } => find(then, arr).or_else(|| find(els, arr)),
                KStmt::SkipWhen { body, .. } => find(body, arr),
                _ => None,
            })
        }
        find(&self.ir.body, arr).unwrap_or(0)
    }

    /// Is a term the same for every thread of a block?
    fn is_uniform(&self, t: &Term) -> bool {
        let mut v = Vec::new();
        t.vars(&mut v);
        !v.iter().any(|n| n == TID || n.starts_with("load.")) && !self.depends_on_thread(&v)
    }

    fn stmt(&mut self, s: &KStmt, list: usize, index: usize) {
        match s {
            KStmt::Decl { init, local } => {
                if let Some(v) = init {
                    self.vexpr(v);
                    self.assignments.push(Assignment { local: *local, value: v.clone(), path: self.path.clone() });
                }
            }
            KStmt::DeclArray { init, arr, .. } => {
                if let Some(v) = init {
                    self.vexpr(v);
                    self.uninit.remove(arr);
                } else {
                    // A fresh array: nothing of it is set yet.
                    self.uninit.insert(*arr);
                }
                self.slot_writes.insert(*arr, Vec::new());
                // A step of the sequence of its own: an array declared in
                // a loop's iteration is not one declared before the loop
                // (the accumulators a reduction loop must update whole).
                self.slot_seq += 1;
                self.declared_at.insert(*arr, self.slot_seq);
            }
            KStmt::Assign { value, local } => {
                self.vexpr(value);
                self.assignments.push(Assignment { local: *local, value: value.clone(), path: self.path.clone() });
            }
            KStmt::ArraySet { arr, index: i, value } => {
                self.vexpr(value);
                let t = self.iterm(i);
                let len = self.array_len(*arr);
                self.record(Target::Array(*arr, len), true, t.clone(), 1, None, None);
                self.write_slots(*arr, Some(t), 1);
            }
            KStmt::LetInt { var, value } => {
                let t = self.iterm(value);
                let u = self.is_uniform(&t);
                self.env.insert(*var, t);
                self.uniform.insert(*var, u);
            }
            KStmt::For { var, start, end, step, body, .. } => {
                let (s0, e0, st) = (self.iterm(start), self.iterm(end), self.iterm(step));
                let name = format!("{}#{}", self.ir.ivars[*var], var);
                let kv = Term::var(name.clone());
                let form = canonical(loop_form(&s0, &st, self.ir.block), &s0, &st, self.ir.block);
                let has_barrier = contains_barrier(body);
                let body_list = self.new_list(true);
                let uniform = self.is_uniform(&s0) && self.is_uniform(&e0) && self.is_uniform(&st);
                if self.ir.reduction_loops.iter().any(|r| r.visits.as_ref().is_some_and(|v| v.outer == *var)) {
                    self.outer_marks.insert(*var, self.path.len());
                }
                if let Some(r) = self.ir.reduction_loops.iter().find(|r| r.var == *var) {
                    self.reduction_ids.push(self.loops.len());
                    if r.visits.is_none() {
                        let extent = self.iterm_pure(&r.extent);
                        let visit = ReductionVisit { name: r.name.clone(), span: r.span, cooperative: r.cooperative, granule: r.granule, start: s0.clone(), end: e0.clone(), step: st.clone(), extent, path: self.path.clone() };
                        self.reductions.push(visit);
                    }
                }
                self.loops.push(LoopInfo { var: name, form, has_barrier, start: s0.clone(), body_list });
                let id = self.loops.len() - 1;
                self.env.insert(*var, kv.clone());
                self.uniform.insert(*var, uniform);
                let saved = self.path.len();
                let saved_cover = self.cover_path.len();
                self.path.push(s0.clone().le(kv.clone()));
                self.path.push(kv.clone().lt(e0.clone()));
                match form {
                    LoopForm::GridStride | LoopForm::BlockStride | LoopForm::ThreadStride => {
                        // Together the threads run every value from the
                        // thread-free part of the start up to the end.
                        let a = thread_free(&s0);
                        self.cover_path.push(a.le(kv.clone()));
                        self.cover_path.push(kv.clone().lt(e0.clone()));
                    }
                    _ => {
                        self.cover_path.push(s0.clone().le(kv.clone()));
                        self.cover_path.push(kv.clone().lt(e0.clone()));
                        self.cover_path.push(kv.clone().sub(s0.clone()).rem(st.clone()).eq(Term::c(0)));
                    }
                }
                if let Term::Const(c) = st {
                    if c > 1 {
                        self.path.push(kv.clone().sub(s0.clone()).rem(Term::c(c)).eq(Term::c(0)));
                    }
                } else if let Term::Mul(_, b) = &st {
                    if let Term::Const(c) = **b {
                        self.path.push(kv.clone().sub(s0.clone()).rem(Term::c(c)).eq(Term::c(0)));
                    }
                }
                // The guard under which an iteration of a loop with visits
                // visits an index: read once, for the visits and for the
                // accumulators below.
                let mut visiting = None;
                if let Some(r) = self.ir.reduction_loops.iter().find(|r| r.var == *var && r.visits.is_some()) {
                    visiting = self.visit_guard(body);
                    self.lane_visit(r, visiting.clone());
                }
                // The increment after the last iteration must not overflow.
                let next = kv.clone().add(st.clone());
                self.int_op(&next, None, "loop increment");
                self.cond_stack.push((uniform, format!("loop bounds of `{}`", self.ir.ivars[*var]), None));
                self.loop_stack.push(id);
                let since = self.slot_seq;
                self.block(body, body_list);
                if let Some(r) = self.ir.reduction_loops.iter().find(|r| r.var == *var) {
                    let held: &[LocalId] = r.visits.as_ref().map_or(&[], |v| &v.held);
                    // An iteration of a loop with visits that visits no
                    // index (its guard false: past the sum's end) updates
                    // nothing, as it should: asked of visiting iterations.
                    let depth = self.path.len();
                    self.path.extend(visiting);
                    self.accumulators_complete(since, &r.name, r.span, held);
                    self.path.truncate(depth);
                }
                self.loop_stack.pop();
                self.cond_stack.pop();
                self.path.truncate(saved);
                self.cover_path.truncate(saved_cover);
            }
            KStmt::If { cond, then, els } => {
                let f = self.cond(cond);
                let mut vars = Vec::new();
                f.vars(&mut vars);
                let uniform = !vars.iter().any(|v| v == TID || v.starts_with("load.")) && !self.depends_on_thread(&vars);
                let saved = (self.path.len(), self.cover_path.len());
                let tl = self.new_list(self.lists[list].in_loop);
                self.cond_stack.push((uniform, "a condition".into(), Some(f.clone())));
                self.path.push(f.clone());
                self.cover_path.push(f.clone());
                self.block(then, tl);
                self.path.truncate(saved.0);
                self.cover_path.truncate(saved.1);
                let el = self.new_list(self.lists[list].in_loop);
                // The else arm runs where the condition fails: its own
                // formula for what asks which threads are here.
                if let Some(top) = self.cond_stack.last_mut() {
                    top.2 = Some(f.clone().not());
                }
                self.path.push(f.clone().not());
                self.cover_path.push(f.not());
                self.block(els, el);
                self.path.truncate(saved.0);
                self.cover_path.truncate(saved.1);
                self.cond_stack.pop();
            }
            // The body is read as run: where the condition holds, running
            // it would change nothing the kernel keeps (`verify::tile_skip`
            // proves that). Its accesses are kept as ones that may happen;
            // the condition is per thread, so a barrier in the body is one
            // that some threads may miss.
            KStmt::SkipWhen { cond, body } => {
                self.vexpr(cond);
                let inner = self.new_list(self.lists[list].in_loop);
                self.cond_stack.push((false, "a value-dependent skip".into(), None));
                self.block(body, inner);
                self.cond_stack.pop();
            }
            KStmt::Store { buf, index: i, value, access, axes } => {
                self.vexpr(value);
                let t = self.iterm(i);
                let axes: Vec<Term> = axes.iter().map(|a| self.iterm(a)).collect();
                self.record(Target::Global(*buf), true, t, 1, Some(*access), Some(value.clone()));
                if let Some(last) = self.accesses.last_mut() {
                    last.axes = axes;
                }
            }
            KStmt::VecLoad { buf, base, axes, width, access, arr } => {
                let t = self.iterm(base);
                let axes: Vec<Term> = axes.iter().map(|a| self.iterm(a)).collect();
                self.record(Target::Global(*buf), false, t, *width, Some(*access), None);
                if let Some(last) = self.accesses.last_mut() {
                    last.axes = axes;
                }
                self.write_slots(*arr, None, *width);
            }
            KStmt::SharedVecStore { arr, base, width, src } => {
                self.array_read(*src);
                let t = self.iterm(base);
                self.record(Target::Shared(*arr), true, t, *width, None, None);
                self.fresh += 1;
                let slot = Term::var(format!("slot#{}", self.fresh));
                self.read_slot(*src, slot.clone(), vec![slot.within(Term::c(0), Term::c(*width as i64))], None);
            }
            KStmt::VecStore { buf, base, axes, width, access, arr } => {
                self.array_read(*arr);
                let t = self.iterm(base);
                let axes: Vec<Term> = axes.iter().map(|a| self.iterm(a)).collect();
                self.record(Target::Global(*buf), true, t, *width, Some(*access), None);
                if let Some(last) = self.accesses.last_mut() {
                    last.axes = axes;
                }
                self.fresh += 1;
                let slot = Term::var(format!("slot#{}", self.fresh));
                let span = Some(self.ir.accesses[*access].span);
                self.read_slot(*arr, slot.clone(), vec![slot.within(Term::c(0), Term::c(*width as i64))], span);
            }
            KStmt::SharedSet { arr, index: i, value } => {
                self.vexpr(value);
                let t = self.iterm(i);
                self.record(Target::Shared(*arr), true, t, 1, None, Some(value.clone()));
            }
            KStmt::Barrier => {
                self.lists[list].barriers.push(index);
                self.block_collective("barrier");
            }
            KStmt::FragmentLoad { shape, which, src, dst, dst_at, rows } => {
                use crate::schedule::tensor_core::{element, loads_rows, registers, tile};
                let saved = (self.path.len(), self.cover_path.len());
                if loads_rows(*rows, src) {
                    // The warp reads the tile as 8-element rows, each from
                    // one lane's address: every row (r, 8 j), 8 wide (the
                    // bounds obligation asks it 8-aligned, so 16 bytes).
                    let (nr, nc) = tile(*shape, *which);
                    self.fresh += 1;
                    let (r, j) = (Term::var(format!("frag_row#{}", self.fresh)), Term::var(format!("frag_chunk#{}", self.fresh)));
                    self.path.push(r.clone().within(Term::c(0), Term::c(nr)));
                    self.path.push(j.clone().within(Term::c(0), Term::c(nc / 8)));
                    let t = self.iterm(&src.base).add(r.mul(Term::c(src.row_stride))).add(j.mul(Term::c(8)));
                    self.record(Target::Shared(src.tile), false, t, 8, None, None);
                } else {
                    // Each lane's elements, at a symbolic register: the
                    // same map the printer unrolls.
                    let lane = IExpr::Tid.rem(IExpr::c(shape.lanes() as i64));
                    self.fresh += 1;
                    let reg = Term::var(format!("frag#{}", self.fresh));
                    self.env.insert(FRAGMENT_REGISTER, reg.clone());
                    let (r, c) = element(*shape, *which, &lane, &IExpr::Var(FRAGMENT_REGISTER));
                    let index = src.base.clone().add(r.mul(IExpr::c(src.row_stride))).add(c.mul(IExpr::c(src.col_stride)));
                    self.path.push(reg.within(Term::c(0), Term::c(registers(*shape, *which) as i64)));
                    let t = self.iterm(&index);
                    self.record(Target::Shared(src.tile), false, t, 1, None, None);
                    self.env.remove(&FRAGMENT_REGISTER);
                }
                self.path.truncate(saved.0);
                self.cover_path.truncate(saved.1);
                // The lane's registers: a whole, aligned run of the array
                // (pairs of 16-bit elements travel as 32-bit registers).
                let n = registers(*shape, *which);
                let (len, at) = (self.array_len(*dst), self.iterm(dst_at));
                self.record(Target::Array(*dst, len), true, at.clone(), n, None, None);
                self.write_slots(*dst, Some(at), n);
                self.warp_collective(shape.lanes());
            }
            KStmt::Mma { shape, a, a_at, b, b_at, acc, acc_at } => {
                use crate::schedule::tensor_core::registers;
                // The fragments, read whole from the lane's registers.
                for (which, arr, at) in [(Fragment::A, a, a_at), (Fragment::B, b, b_at)] {
                    let n = registers(*shape, which);
                    let (len, at) = (self.array_len(*arr), self.iterm(at));
                    self.record(Target::Array(*arr, len), false, at.clone(), n, None, None);
                    self.fresh += 1;
                    let slot = Term::var(format!("slot#{}", self.fresh));
                    self.read_slot(*arr, slot.clone(), vec![slot.within(at.clone(), at.add(Term::c(n as i64)))], None);
                }
                // The lane's accumulator slots, read and written.
                let len = self.array_len(*acc);
                for i in 0..registers(*shape, Fragment::Acc) as i64 {
                    let t = self.iterm(&acc_at.clone().add(IExpr::c(i)));
                    self.record(Target::Array(*acc, len), false, t.clone(), 1, None, None);
                    self.read_slot(*acc, t.clone(), vec![], None);
                    self.record(Target::Array(*acc, len), true, t.clone(), 1, None, None);
                    self.write_slots(*acc, Some(t), 1);
                }
                for arr in [a, b, acc] {
                    self.array_read(*arr);
                }
                self.warp_collective(shape.lanes());
            }
            KStmt::Wgmma { n, a, b, acc, accumulate } => {
                // The unit reads every element of both operands' tiles (A
                // 64 x 16, B n x 16, as `(r, c)` with c along k) through the
                // descriptors; recorded as each thread's read at a symbolic
                // element, so bounds, footprint, ring and race-freedom
                // cover them. The read may happen until the next wait: the
                // protocol obligations keep that wait before the barrier
                // that ends this read's interval.
                for (op, rows) in [(a, 64i64), (b, *n as i64)] {
                    let base = self.iterm(&op.base);
                    let name = self.ir.shared[op.tile].name.clone();
                    let loops = self.loop_stack.iter().map(|l| self.loops[*l].var.clone()).collect();
                    let align = if op.swizzle { SWIZZLE_ALIGN as i64 / 2 } else { 8 };
                    self.descriptors.push(Descriptor { base, path: self.path.clone(), array: name, loops, align });
                    let saved = (self.path.len(), self.cover_path.len());
                    self.fresh += 1;
                    let (r, c) = (format!("wg_row#{}", self.fresh), format!("wg_k#{}", self.fresh));
                    self.path.push(Term::var(&r).within(Term::c(0), Term::c(rows)));
                    self.path.push(Term::var(&c).within(Term::c(0), Term::c(16)));
                    self.env.insert(FRAGMENT_REGISTER, Term::var(&r));
                    self.env.insert(WGMMA_K, Term::var(&c));
                    let index = op.base.clone().add(op.offset(IExpr::Var(FRAGMENT_REGISTER), IExpr::Var(WGMMA_K)));
                    let t = self.iterm(&index);
                    self.record(Target::Shared(op.tile), false, t, 1, None, None);
                    self.env.remove(&FRAGMENT_REGISTER);
                    self.env.remove(&WGMMA_K);
                    self.path.truncate(saved.0);
                    self.cover_path.truncate(saved.1);
                }
                // The thread's accumulator slots: read (when accumulating)
                // and written, as one run.
                let (len, slots) = (self.array_len(*acc), *n / 2);
                if *accumulate {
                    self.record(Target::Array(*acc, len), false, Term::c(0), slots, None, None);
                    self.fresh += 1;
                    let slot = Term::var(format!("slot#{}", self.fresh));
                    self.read_slot(*acc, slot.clone(), vec![slot.within(Term::c(0), Term::c(slots as i64))], None);
                }
                self.record(Target::Array(*acc, len), true, Term::c(0), slots, None, None);
                self.write_slots(*acc, Some(Term::c(0)), slots);
                if *accumulate {
                    self.array_read(*acc);
                }
                self.warp_collective(128);
            }
            KStmt::WgmmaFence | KStmt::WgmmaWait { .. } => self.warp_collective(128),
            KStmt::ProxyFence => self.warp_collective(32),
            // Registers only: the values the thread just stored.
            KStmt::ObserveRelation { .. } => {}
            KStmt::ObserveFlush { slot } => {
                // Every thread of the block combines (shuffles, then
                // barriers: reached by all, as a barrier is); the first
                // thread merges each observed output's three words.
                self.block_collective("block merge of the monitor's observation");
                let slot = self.iterm(slot);
                let saved = (self.path.len(), self.cover_path.len());
                let first_thread = Term::var(TID).eq(Term::c(0));
                self.path.push(first_thread.clone());
                self.cover_path.push(first_thread);
                for j in 0..self.ir.observation_blocks() {
                    let at = Term::c(j * OBSERVE_SLOTS * OBSERVE_WORDS).add(slot.clone().mul(Term::c(OBSERVE_WORDS)));
                    self.record(Target::Observations, true, at, OBSERVE_WORDS as u32, None, None);
                }
                self.path.truncate(saved.0);
                self.cover_path.truncate(saved.1);
            }
            KStmt::CpAsync { arr, base, buf, src, axes, width, valid, access } => {
                // The global read happens only where `valid` holds; the
                // shared write (the data or zeros) always, in flight.
                let f = self.cond(valid);
                let saved = (self.path.len(), self.cover_path.len());
                self.path.push(f.clone());
                self.cover_path.push(f);
                let t = self.iterm(src);
                let axes: Vec<Term> = axes.iter().map(|a| self.iterm(a)).collect();
                self.record(Target::Global(*buf), false, t, *width, Some(*access), None);
                if let Some(last) = self.accesses.last_mut() {
                    last.axes = axes;
                }
                self.path.truncate(saved.0);
                self.cover_path.truncate(saved.1);
                let t = self.iterm(base);
                self.record(Target::Shared(*arr), true, t, *width, None, None);
                if let Some(last) = self.accesses.last_mut() {
                    last.in_flight = true;
                }
            }
            KStmt::CpAsyncCommit | KStmt::CpAsyncWait { .. } => {}
            // Every thread of a warpgroup sets the same allowance.
            KStmt::SetMaxRegisters { regs, .. } => {
                let threads = self.thread_conds();
                self.allowances.push((*regs, threads));
                self.warp_collective(128)
            }
            // What the barriers order is `verify::mbarrier`'s: here each
            // statement is recorded with its terms and place.
            KStmt::MbarInit { bar } => self.mbar_event(MbarKind::Init, *bar, Term::c(0)),
            KStmt::MbarArrive { bar, stage } => {
                let t = self.iterm(stage);
                self.mbar_event(MbarKind::Arrive, *bar, t)
            }
            KStmt::CpAsyncArrive { bar, stage } => {
                let t = self.iterm(stage);
                self.mbar_event(MbarKind::CopiesArrive, *bar, t)
            }
            KStmt::MbarExpectTx { bar, stage, bytes } => {
                let t = self.iterm(stage);
                self.mbar_event(MbarKind::ExpectTx { bytes: *bytes }, *bar, t)
            }
            KStmt::TmaLoad { map, arr, base, inner, outer, elem: (r, c), bar, stage, access } => {
                // Box element (r, c): the global element (outer + r, inner
                // + c) read where it lies inside the tensor (the map
                // carries its extents; elsewhere zeros land, nothing is
                // read), and its swizzled place written, in flight until
                // the barrier's phase completes (`verify::mbarrier`).
                let m = &self.ir.tensor_maps[*map];
                let (buf, box_inner, box_outer) = (m.buf, m.box_inner as i64, m.box_outer as i64);
                let shape = self.k.tensors[self.ir.bufs[buf].tensor].shape.clone();
                let saved = (self.path.len(), self.cover_path.len());
                for (v, extent) in [(*r, box_outer), (*c, box_inner)] {
                    let t = Term::var(self.loop_var_name(v));
                    self.env.insert(v, t.clone());
                    let within = t.within(Term::c(0), Term::c(extent));
                    self.path.push(within.clone());
                    self.cover_path.push(within);
                }
                self.bulk_maps.push((self.path[..saved.0].to_vec(), *map, dim_term(self.k, shape[shape.len() - 1])));
                let row = self.iterm(&outer.clone().add(IExpr::Var(*r)));
                let col = self.iterm(&inner.clone().add(IExpr::Var(*c)));
                let (rows, cols) = (dim_term(self.k, shape[0]), dim_term(self.k, shape[shape.len() - 1]));
                let inside = Formula::and(vec![row.clone().lt(rows), col.clone().lt(cols.clone())]);
                self.path.push(inside.clone());
                self.cover_path.push(inside);
                self.record(Target::Global(buf), false, row.clone().mul(cols).add(col.clone()), 1, Some(*access), None);
                if let Some(last) = self.accesses.last_mut() {
                    last.axes = vec![row, col];
                }
                self.path.pop();
                self.cover_path.pop();
                let t = self.iterm(&base.clone().add(swizzled_offset(IExpr::Var(*r), IExpr::Var(*c))));
                self.record(Target::Shared(*arr), true, t, 1, None, None);
                if let Some(last) = self.accesses.last_mut() {
                    last.in_flight = true;
                }
                self.path.truncate(saved.0);
                self.cover_path.truncate(saved.1);
                self.env.remove(r);
                self.env.remove(c);
                let bytes = (box_inner * box_outer) as u32 * self.ir.shared[*arr].ty.size_bytes();
                let t = self.iterm(stage);
                self.mbar_event(MbarKind::Transaction { bytes }, *bar, t)
            }
            KStmt::MbarWait { bar, stage, parity } => {
                let (t, parity) = (self.iterm(stage), self.iterm(parity));
                self.mbar_event(MbarKind::Wait { parity }, *bar, t)
            }
        }
    }

    fn mbar_event(&mut self, kind: MbarKind, bar: MbarId, stage: Term) {
        let thread_conds = self.thread_conds();
        self.mbar_events.push(MbarEvent { kind, bar, stage, path: self.path.clone(), loops: self.loop_stack.clone(), pos: self.pos.clone(), thread_conds });
    }

    /// The conditions that decide which threads are here, as formulas in
    /// `tid` alone (each with the polarity of its arm); `None` where a
    /// loop bound or a condition depends on the thread through anything
    /// else (which threads are here is then not a function of `tid`).
    fn thread_conds(&self) -> Option<Vec<Formula>> {
        let tid_only = |f: &Formula| {
            let mut vars = Vec::new();
            f.vars(&mut vars);
            !vars.is_empty() && vars.iter().all(|v| v == TID)
        };
        for (uniform, _, f) in &self.cond_stack {
            if !uniform && !f.as_ref().is_some_and(tid_only) {
                return None;
            }
        }
        Some(self.path.iter().filter(|f| tid_only(f)).cloned().collect())
    }

    /// A statement every thread of the block must reach (`what`: a
    /// barrier, or one that holds barriers).
    fn block_collective(&mut self, what: &'static str) {
        let bad = self.cond_stack.iter().find(|(u, ..)| !u).map(|(_, w, _)| w.clone());
        self.barriers.push(Barrier { uniform: bad.is_none(), why_not: bad.unwrap_or_default(), what, group: None });
    }

    /// A warp-collective instruction: every lane must reach it (asked as
    /// of a barrier: every thread of the block, which is stronger).
    fn warp_collective(&mut self, group: u32) {
        let bad = self.cond_stack.iter().find(|(u, ..)| !u).map(|(_, w, _)| w.clone());
        let conds: Option<Vec<Formula>> = self.cond_stack.iter().filter(|(u, ..)| !u).map(|(_, _, f)| f.clone()).collect();
        let group = conds.filter(|c| !c.is_empty()).map(|c| (group, c, self.path.clone()));
        self.barriers.push(Barrier { uniform: bad.is_none(), why_not: bad.unwrap_or_default(), what: "matrix-unit instruction", group });
    }

    /// A read of register array `arr`: the thread-only conditions it is
    /// read under (see `array_readers`).
    /// Record the visits of a reduction loop with `Visits`, on entering
    /// its (lane) loop: the path there, with the guard of the `If` that
    /// opens the loop's body, where one does.
    fn lane_visit(&mut self, r: &crate::kir::ReductionLoop, guard: Option<Formula>) {
        let v = r.visits.as_ref().expect("called for reductions with visits");
        let extent = self.iterm_pure(&r.extent);
        let at = self.iterm_pure(&v.at);
        let mut path = self.path.clone();
        path.extend(guard);
        let mark = self.outer_marks.get(&v.outer).copied().unwrap_or(0);
        let outer_path = self.path[..mark].to_vec();
        let elem = Term::var(format!("{}#{}", self.ir.ivars[v.elem], v.elem));
        let mut witness = Vec::new();
        for (w, e) in &v.witness {
            let name = match w {
                Witness::Var(iv) => format!("{}#{}", self.ir.ivars[*iv], iv),
                Witness::Tid => TID.to_string(),
                Witness::BlockIdx(_) => continue,
            };
            let t = self.witness_term(e, &[(v.elem, elem.clone())]);
            witness.push((name, t));
        }
        let team = v.team.as_ref().map(|t| self.iterm_pure(t));
        self.lane_visits.push(LaneVisit { name: r.name.clone(), span: r.span, extent, at, path, outer_path, elem, witness, team });
    }

    /// The guard of the `If` that opens a visiting loop's body, where one
    /// does (with no `else`): the iteration visits an index only where it
    /// holds.
    fn visit_guard(&mut self, body: &[KStmt]) -> Option<Formula> {
        let Some(KStmt::If { cond, els, .. }) = body.first() else { return None };
        if !els.is_empty() {
            return None;
        }
        let saved = std::mem::take(&mut self.int_ops);
        let f = self.cond(cond);
        self.int_ops = saved;
        Some(f)
    }

    fn array_read(&mut self, arr: LocalId) {
        let only_tid = |f: &Formula| {
            let mut vars = Vec::new();
            f.vars(&mut vars);
            !vars.is_empty() && vars.iter().all(|v| v == TID)
        };
        let owner = Formula::and(self.path.iter().filter(|f| only_tid(f)).cloned().collect());
        let readers = self.array_readers.entry(arr).or_default();
        if !readers.contains(&owner) {
            readers.push(owner);
        }
    }

    fn write_slots(&mut self, arr: LocalId, index: Option<Term>, width: u32) {
        self.slot_seq += 1;
        let w = SlotWrite { index, width, path: self.path.clone(), loops: self.loop_stack.clone(), seq: self.slot_seq };
        self.slot_writes.entry(arr).or_default().push(w);
    }

    /// Record a read of slot `slot` of `arr` (if `arr` was declared without
    /// a value) with the conditions under which earlier writes set it.
    fn read_slot(&mut self, arr: LocalId, slot: Term, slot_range: Vec<Formula>, span: Option<crate::span::Span>) {
        if !self.uninit.contains(&arr) {
            return;
        }
        let writes = self.slot_writes.get(&arr).cloned().unwrap_or_default();
        let set_by = writes.iter().filter_map(|w| self.sets_slot(w, &slot)).collect();
        let what = format!("register array `{}`", self.ir.locals[arr].name);
        self.slot_reads.push(SlotRead { accumulator: false, span, slot, slot_range, path: self.path.clone(), set_by, what, owner_of: None });
    }

    /// At the end of an iteration of a reduction loop: every array written
    /// in the iteration must have had every slot written in it (an
    /// accumulator tile updated only in part drops terms of the sum).
    /// Arrays in `held` are written one slot an iteration by design (see
    /// `kir::Visits::held`) and skipped here; their reads are checked.
    fn accumulators_complete(&mut self, since: usize, loop_name: &str, span: crate::span::Span, held: &[LocalId]) {
        // This loop's own updates: not inside a nested reduction loop (that
        // loop checks them), to arrays declared outside this iteration.
        let depth = self.loop_stack.len();
        let own = |w: &SlotWrite| w.seq > since && !w.loops[depth..].iter().any(|l| self.reduction_ids.contains(l));
        let mut arrays: Vec<LocalId> = self
            .slot_writes
            .iter()
            .filter(|(a, ws)| !held.contains(a) && self.declared_at.get(a).is_some_and(|d| *d <= since) && ws.iter().any(own))
            .map(|(a, _)| *a)
            .collect();
        arrays.sort();
        for arr in arrays {
            let writes: Vec<SlotWrite> = self.slot_writes[&arr].iter().filter(|w| own(w)).cloned().collect();
            self.fresh += 1;
            let slot = Term::var(format!("slot#{}", self.fresh));
            let len = self.array_len(arr) as i64;
            let set_by = writes.iter().filter_map(|w| self.sets_slot(w, &slot)).collect();
            let what = format!("register array `{}` in each iteration of the loop over {}", self.ir.locals[arr].name, loop_name);
            let slot_range = vec![slot.clone().within(Term::c(0), Term::c(len))];
            self.slot_reads.push(SlotRead { accumulator: true, span: Some(span), slot, slot_range, path: self.path.clone(), set_by, what, owner_of: Some(arr) });
        }
    }

    /// When did write `w` set `slot`? Variables of loops the write is in
    /// but the read is not are eliminated by solving the slot equation for
    /// the one such variable (slot `v + c`); a write that cannot be tied to
    /// the slot that way gives no credit (conservative).
    fn sets_slot(&self, w: &SlotWrite, slot: &Term) -> Option<Formula> {
        let exited: Vec<String> = w.loops.iter().filter(|l| !self.loop_stack.contains(l)).map(|l| self.loops[*l].var.clone()).collect();
        let (sub, slot_eq) = match &w.index {
            None => (vec![], slot.clone().within(Term::c(0), Term::c(w.width as i64))),
            Some(index) => {
                // A run of `width` slots starts at a multiple of the width
                // (the bounds obligation proves it), so it holds `slot`
                // exactly when it starts where `slot`'s aligned run does.
                let target = if w.width > 1 { slot.clone().sub(slot.clone().rem(Term::c(w.width as i64))) } else { slot.clone() };
                match solve_slot(index, &exited, &target) {
                    // The write at the solved iteration hits exactly `slot`.
                    Some(sub) => (sub, index.clone().eq(target)),
                    None => (vec![], index.clone().eq(target)),
                }
            }
        };
        let mut parts = w.path.clone();
        parts.push(slot_eq);
        let f = Formula::and(parts).subst(&|n| sub.iter().find(|(v, _)| v == n).map(|(_, t)| t.clone()));
        let mut vars = Vec::new();
        f.vars(&mut vars);
        (!vars.iter().any(|v| exited.contains(v))).then_some(f)
    }

    /// Does any of these variables stand for a thread-dependent loop var?
    fn depends_on_thread(&self, vars: &[String]) -> bool {
        vars.iter().any(|v| {
            self.loops.iter().any(|l| l.var == *v && matches!(l.form, LoopForm::GridStride | LoopForm::ThreadStride | LoopForm::Other) && mentions(&l.start, &[TID]))
        })
    }
}

/// Values of loop variables (of `vars`) at which a slot term `t` equals
/// `slot`: for `v + c`, `v = slot - c`; for `a * C + b`, `a = slot / C`
/// and `b = slot % C`. A witness only: the write's own path must still
/// hold at those values for the write to count.
fn solve_slot(t: &Term, vars: &[String], slot: &Term) -> Option<Vec<(String, Term)>> {
    let var = |x: &Term| match x {
        Term::Var(v) if vars.contains(v) => Some(v.clone()),
        _ => None,
    };
    // `v * C` (C > 0), or a bare `v` as `v * 1` (a 1-wide micro-tile's
    // `i * 1 + j` arrives simplified to `i + j`).
    let scaled = |x: &Term| match x {
        Term::Mul(a, c) => match (var(a), &**c, var(c), &**a) {
            (Some(v), Term::Const(k), _, _) | (_, _, Some(v), Term::Const(k)) if *k > 0 => Some((v, *k)),
            _ => None,
        },
        other => var(other).map(|v| (v, 1)),
    };
    if let Some(v) = var(t) {
        return Some(vec![(v, slot.clone())]);
    }
    if let Some((v, k)) = scaled(t) {
        return Some(vec![(v, slot.clone().div(Term::c(k)))]);
    }
    let Term::Add(a, b) = t else { return None };
    for (x, y) in [(a, b), (b, a)] {
        if let (Some(v), Term::Const(c)) = (var(x), &**y) {
            return Some(vec![(v, slot.clone().sub(Term::c(*c)))]);
        }
        if let (Some((hi, k)), Some(lo)) = (scaled(x), var(y)) {
            return Some(vec![(hi, slot.clone().div(Term::c(k))), (lo, slot.clone().rem(Term::c(k)))]);
        }
    }
    None
}

fn loop_form(start: &Term, step: &Term, block: u32) -> LoopForm {
    let has_tid = mentions(start, &[TID]);
    let has_bid = mentions(start, &BID);
    let step_is_grid = mentions(step, &GDIM);
    match (has_tid, has_bid, step_is_grid, step) {
        (true, true, true, _) => LoopForm::GridStride,
        (false, true, true, _) => LoopForm::BlockStride,
        (true, false, false, Term::Const(c)) if *c == block as i64 => LoopForm::ThreadStride,
        (false, false, false, _) => LoopForm::Uniform,
        _ => LoopForm::Other,
    }
}

/// The start of a loop with thread and block ids set to zero.
pub fn thread_free(t: &Term) -> Term {
    t.subst(&|n| if n == TID || BID.contains(&n) { Some(Term::c(0)) } else { None })
}

/// Confirm a loop's form exactly (with Z3, for every value of every
/// variable): `start == a + bid*B + tid` and `step == grid*B` for a
/// grid-stride loop, and so on. Anything else is `Other`, and no lemma
/// is used for it.
fn canonical(form: LoopForm, start: &Term, step: &Term, block: u32) -> LoopForm {
    use tokitai_contracts::z3_backend::{discharge_memo as discharge, Config};
    use tokitai_contracts::{Obligation, ObligationKind};
    let b = Term::c(block as i64);
    let a = thread_free(start);
    let (want_start, want_step) = match form {
        LoopForm::GridStride => (a.add(Term::var(BID[0]).mul(b.clone())).add(Term::var(TID)), Term::var(GDIM[0]).mul(b)),
        LoopForm::BlockStride => (a.add(Term::var(BID[0])), Term::var(GDIM[0])),
        LoopForm::ThreadStride => (a.add(Term::var(TID)), b),
        other => return other,
    };
    let ob = Obligation {
        kind: ObligationKind::Coverage,
        description: "loop form".into(),
        origin: (0, 0),
        hypotheses: vec![],
        goal: Formula::and(vec![start.clone().eq(want_start), step.clone().eq(want_step)]),
        show: vec![],
    };
    if discharge(&ob, &Config { timeout_ms: 2000 }).is_proved() {
        form
    } else {
        LoopForm::Other
    }
}

pub fn dim_term(k: &Kernel, d: tir::Dim) -> Term {
    match d {
        tir::Dim::Sym(id) => dim_var(&k.dims[id].name),
        tir::Dim::Lit(v) => Term::c(v),
    }
}

pub fn int_range(d: Dtype) -> (i64, i64) {
    match d {
        Dtype::I64 => (i64::MIN, i64::MAX),
        Dtype::U32 => (0, u32::MAX as i64),
        Dtype::Bool => (0, 1),
        _ => (i32::MIN as i64, i32::MAX as i64),
    }
}

/// The integer term of a contract expression over dims (None if it is not
/// purely integer).
pub fn texpr_term(k: &Kernel, e: &TExpr) -> Option<Term> {
    Some(match &e.kind {
        TExprKind::Const(tir::Const::Int(v)) => Term::c(*v),
        TExprKind::Dim(d) => dim_var(&k.dims[*d].name),
        TExprKind::Cast(a) if a.ty.is_int() && e.ty.is_int() => texpr_term(k, a)?,
        TExprKind::Binary(op, a, b) if e.ty.is_int() => {
            let (x, y) = (texpr_term(k, a)?, texpr_term(k, b)?);
            use crate::syntax::ast::BinOp::*;
            match op {
                Add => x.add(y),
                Sub => x.sub(y),
                Mul => x.mul(y),
                Div => x.div(y),
                Rem => x.rem(y),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The integer part of a `requires` predicate as a formula (None when it
/// speaks of floats: those never constrain indices, and dropping an
/// assumption is sound).
pub fn contract_formula(k: &Kernel, e: &TExpr) -> Option<Formula> {
    use crate::syntax::ast::{BinOp::*, UnOp};
    match &e.kind {
        TExprKind::Const(tir::Const::Bool(b)) => Some(if *b { Formula::True } else { Formula::False }),
        TExprKind::Binary(And, a, b) => Some(Formula::and(vec![contract_formula(k, a).unwrap_or(Formula::True), contract_formula(k, b).unwrap_or(Formula::True)])),
        TExprKind::Binary(Or, a, b) => Some(Formula::or(vec![contract_formula(k, a)?, contract_formula(k, b)?])),
        TExprKind::Unary(UnOp::Not, a) => Some(contract_formula(k, a)?.not()),
        TExprKind::Binary(op, a, b) if op.is_comparison() => {
            let (x, y) = (texpr_term(k, a)?, texpr_term(k, b)?);
            Some(match op {
                Lt => x.lt(y),
                Le => x.le(y),
                Gt => y.lt(x),
                Ge => y.le(x),
                Eq => x.eq(y),
                _ => x.eq(y).not(),
            })
        }
        _ => None,
    }
}
