//! The warpgroup unit's protocol (`KStmt::Wgmma`), checked on the printed
//! KernelIr by a forward pass over every path.
//!
//! The unit runs asynchronously with the thread that issued it: it reads
//! its shared operands and its accumulator registers, and writes the
//! accumulator, at some time before the `WgmmaWait` that retires it: a
//! wait commits the instructions issued since the last one as a group and
//! leaves the newest `pending` groups running. Race-freedom
//! records its shared reads at the instruction, which is sound only if
//! the wait comes before the barrier that closes the instruction's
//! interval. So, on every path:
//!
//! 1. every issued instruction is waited for before a barrier and before
//!    the kernel ends;
//! 2. no ordinary instruction touches an accumulator while an instruction
//!    on it may still run (it would read a value the unit has not yet
//!    written, or write one the unit overwrites);
//! 3. a `WgmmaFence` precedes the first instruction, and lies between an
//!    ordinary access of any accumulator and the next instruction (PTX:
//!    `wgmma.fence` orders the registers' earlier accesses before the
//!    unit's; any accumulator, not only the instruction's own, because
//!    the device compiler may give two register arrays the same
//!    registers);
//! 4. an ordinary store into shared memory the unit reads is followed by a
//!    `ProxyFence` before the next barrier (the unit reads through the
//!    asynchronous proxy, which sees the store only after the fence).
//!
//! Asynchronous copies (`KStmt::CpAsync`) write shared memory at some time
//! before the `CpAsyncWait` that retires their group. The pass asks:
//!
//! 5. no copy is still in flight when the kernel ends (an open group, or
//!    more committed groups pending than the last wait allows);
//! 6. copies into arrays the unit reads are proxy-fenced after the wait
//!    that retires them, before the barrier that publishes them.
//!
//! A ring filled by a producer synchronises through mbarriers
//! (`verify::mbarrier` proves what they order). Here the pass asks:
//!
//! 7. the unit has finished (a `WgmmaWait`) before a thread arrives at an
//!    mbarrier, since the arrival releases the stage the unit read;
//! 8. between a wait on an mbarrier, which makes other threads' copies
//!    visible to this thread, and a wgmma that reads them lies a
//!    `ProxyFence` (as for the thread's own stores, rule 4);
//! 9. copies followed by `CpAsyncArrive` count as retired at the end: the
//!    arrival completes its phase once they land, and the consumers wait
//!    for every phase.
//!
//! When each copy has landed and been published is not a pass/fail
//! matter but the window race-freedom pairs it in ([`CopyTiming`]):
//! derived from where the ring loop commits, waits and meets the barrier,
//! so a deleted or late wait, or a barrier before the wait, widens the
//! window until the race obligations refute the kernel.
//!
//! Loops are walked twice (the second pass sees what the end of an
//! iteration leaves to the next) and may run zero times; the two arms of
//! a branch join. Each finding is a refuted structural obligation; a
//! kernel with the unit and no finding gets one proved obligation.

use crate::kir::*;
use std::collections::BTreeSet;

#[derive(Clone, PartialEq)]
struct State {
    /// Accumulators an ordinary instruction touched since the last fence.
    dirty: BTreeSet<LocalId>,
    /// A `WgmmaFence` has run on every path here.
    fenced_once: bool,
    /// Accumulators of the instructions that may still run, by group.
    unit: WgmmaGroups<LocalId>,
    /// Shared arrays the unit reads, stored into since the last proxy
    /// fence.
    unfenced: BTreeSet<SharedId>,
    /// Copies issued since the last commit.
    open: bool,
    /// Committed groups that may still be in flight, at most (`None`:
    /// unbounded).
    pending: Option<u32>,
}

impl Default for State {
    fn default() -> State {
        State { dirty: BTreeSet::new(), fenced_once: false, unit: WgmmaGroups::default(), unfenced: BTreeSet::new(), open: false, pending: Some(0) }
    }
}

impl State {
    fn join(&mut self, o: &State) {
        self.dirty.extend(o.dirty.iter().copied());
        self.fenced_once &= o.fenced_once;
        self.unit.join(&o.unit);
        self.unfenced.extend(o.unfenced.iter().copied());
        self.open |= o.open;
        self.pending = match (self.pending, o.pending) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
}

/// More pending groups than this count as unbounded (a loop's walks would
/// otherwise count up forever).
const MANY_GROUPS: u32 = 64;

/// What the pass found: the kernel uses the unit, and each violation.
pub struct Findings {
    pub uses_unit: bool,
    pub violations: Vec<String>,
}

pub fn check(ir: &KernelIr) -> Findings {
    let mut p = Pass { ir, accs: BTreeSet::new(), operands: BTreeSet::new(), copied: BTreeSet::new(), violations: Vec::new() };
    collect(&ir.body, &mut p.accs, &mut p.operands, &mut p.copied);
    if p.accs.is_empty() && p.copied.is_empty() && ir.mbarriers.is_empty() {
        return Findings { uses_unit: false, violations: Vec::new() };
    }
    let mut st = State::default();
    p.block(&ir.body, &mut st);
    if !st.unit.is_empty() {
        let names = p.running(&st);
        p.violation(format!("the kernel ends while a wgmma into {} may still run (no wait after it)", names));
    }
    if st.open || st.pending != Some(0) {
        p.violation("the kernel ends while asynchronous copies into shared memory may still land (no commit and `cp.async.wait_group 0` after them)".into());
    }
    Findings { uses_unit: true, violations: p.violations }
}

fn collect(body: &[KStmt], accs: &mut BTreeSet<LocalId>, operands: &mut BTreeSet<SharedId>, copied: &mut BTreeSet<SharedId>) {
    for s in body {
        match s {
            KStmt::Wgmma { a, b, acc, .. } => {
                accs.insert(*acc);
                operands.insert(a.tile);
                operands.insert(b.tile);
            }
            KStmt::CpAsync { arr, .. } => {
                copied.insert(*arr);
            }
            KStmt::For { body, .. } => collect(body, accs, operands, copied),
            KStmt::If { then, els, .. } => {
                collect(then, accs, operands, copied);
                collect(els, accs, operands, copied);
            }
            KStmt::SkipWhen { body, .. } => collect(body, accs, operands, copied),
            _ => {}
        }
    }
}

struct Pass<'a> {
    ir: &'a KernelIr,
    accs: BTreeSet<LocalId>,
    operands: BTreeSet<SharedId>,
    /// Arrays asynchronous copies write.
    copied: BTreeSet<SharedId>,
    violations: Vec<String>,
}

impl Pass<'_> {
    fn violation(&mut self, v: String) {
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
    }

    /// The accumulators of the instructions that may still run.
    fn running(&self, st: &State) -> String {
        self.names(&st.unit.running().copied().collect())
    }

    fn names(&self, ids: &BTreeSet<LocalId>) -> String {
        ids.iter().map(|l| format!("`{}`", self.ir.locals[*l].name)).collect::<Vec<_>>().join(", ")
    }

    fn block(&mut self, body: &[KStmt], st: &mut State) {
        for s in body {
            self.stmt(s, st);
        }
    }

    /// An ordinary access of register array `arr`.
    fn touch(&mut self, arr: LocalId, st: &mut State) {
        if !self.accs.contains(&arr) {
            return;
        }
        if st.unit.running().any(|a| *a == arr) {
            let name = &self.ir.locals[arr].name;
            self.violation(format!("`{}` is accessed while a wgmma into it may still run (no wait before the access)", name));
        }
        st.dirty.insert(arr);
    }

    fn stmt(&mut self, s: &KStmt, st: &mut State) {
        match s {
            KStmt::Wgmma { a, b, acc, .. } => {
                for tile in [a.tile, b.tile] {
                    if st.unfenced.contains(&tile) {
                        let name = &self.ir.shared[tile].name;
                        self.violation(format!("a wgmma reads `{}` after stores into it with no proxy fence between, so the unit may not see them", name));
                    }
                }
                if !st.fenced_once {
                    self.violation("a wgmma runs with no wgmma.fence before it (the first one of a warpgroup needs one)".to_string());
                }
                if !st.dirty.is_empty() {
                    // Any accumulator: the device compiler may give two
                    // register arrays the same registers (a fresh
                    // accumulator per half, each dead after its promotion).
                    let name = &self.ir.locals[*acc].name;
                    let names = self.names(&st.dirty);
                    self.violation(format!("a wgmma into `{}` follows ordinary accesses of {} with no wgmma.fence between (registers the device compiler may share)", name, names));
                }
                st.unit.issue(*acc);
            }
            KStmt::WgmmaFence => {
                st.dirty.clear();
                st.fenced_once = true;
            }
            KStmt::WgmmaWait { pending } => {
                st.unit.wait(*pending);
            }
            KStmt::ProxyFence => st.unfenced.clear(),
            KStmt::Barrier => {
                if !st.unit.is_empty() {
                    let names = self.running(st);
                    self.violation(format!("a barrier is reached while a wgmma into {} may still read its operands (no wait before the barrier)", names));
                }
                if !st.unfenced.is_empty() {
                    let names: Vec<String> = st.unfenced.iter().map(|a| format!("`{}`", self.ir.shared[*a].name)).collect();
                    self.violation(format!("stores into {} reach a barrier with no proxy fence, so the unit may not see them", names.join(", ")));
                }
            }
            KStmt::SharedSet { arr, value, .. } => {
                self.vexpr(value, st);
                if self.operands.contains(arr) {
                    st.unfenced.insert(*arr);
                }
            }
            KStmt::SharedVecStore { arr, src, .. } => {
                self.touch(*src, st);
                if self.operands.contains(arr) {
                    st.unfenced.insert(*arr);
                }
            }
            KStmt::Decl { init, .. } => {
                if let Some(v) = init {
                    self.vexpr(v, st);
                }
            }
            KStmt::DeclArray { arr, init, .. } => {
                if let Some(v) = init {
                    self.vexpr(v, st);
                    self.touch(*arr, st);
                }
            }
            KStmt::Assign { value, .. } | KStmt::Store { value, .. } => self.vexpr(value, st),
            KStmt::ArraySet { arr, value, .. } => {
                self.vexpr(value, st);
                self.touch(*arr, st);
            }
            KStmt::VecLoad { arr, .. } | KStmt::VecStore { arr, .. } => self.touch(*arr, st),
            KStmt::FragmentLoad { dst, .. } => self.touch(*dst, st),
            KStmt::Mma { a, b, acc, .. } => {
                for arr in [a, b, acc] {
                    self.touch(*arr, st);
                }
            }
            KStmt::LetInt { .. } | KStmt::ObserveFlush { .. } | KStmt::ObserveRelation { .. } => {}
            KStmt::CpAsync { .. } => st.open = true,
            KStmt::CpAsyncCommit => {
                st.pending = st.pending.map(|n| n + 1).filter(|n| *n <= MANY_GROUPS);
                st.open = false;
            }
            KStmt::CpAsyncWait { pending } => {
                st.pending = Some(st.pending.map_or(*pending, |n| n.min(*pending)));
                // What landed is ordinary stores as far as the unit is
                // concerned: fenced before the barrier that publishes it.
                st.unfenced.extend(self.copied.intersection(&self.operands).copied());
            }
            KStmt::SetMaxRegisters { .. } | KStmt::MbarInit { .. } => {}
            // A bulk copy writes through the asynchronous proxy, which the
            // unit reads through too: what lands is visible to it once the
            // barrier's phase it completes on has been waited for; it
            // opens no group of `cp.async` (the consumers' waits on every
            // slab's phase retire it: `verify::mbarrier`).
            KStmt::TmaLoad { .. } => {}
            KStmt::MbarArrive { .. } | KStmt::CpAsyncArrive { .. } | KStmt::MbarExpectTx { .. } => {
                // An arrival releases what the thread read (the stage the
                // unit read, `verify::mbarrier`): the unit must be done.
                if !st.unit.is_empty() {
                    let names = self.running(st);
                    self.violation(format!("an mbarrier arrival is reached while a wgmma into {} may still read its operands (no wait before the arrival)", names));
                }
                // The copies issued so far land before the arrival
                // completes its phase: whoever waits on the phase retires
                // them (`verify::mbarrier` proves that someone does).
                if matches!(s, KStmt::CpAsyncArrive { .. }) {
                    st.open = false;
                }
            }
            // What other threads stored before they arrived (the copies)
            // is visible to this thread now, but not yet to the unit.
            KStmt::MbarWait { .. } => st.unfenced.extend(self.copied.intersection(&self.operands).copied()),
            KStmt::If { then, els, .. } => {
                let mut other = st.clone();
                self.block(then, st);
                self.block(els, &mut other);
                st.join(&other);
            }
            // Run or not, as the value decides.
            KStmt::SkipWhen { body, .. } => {
                let skipped = st.clone();
                self.block(body, st);
                st.join(&skipped);
            }
            KStmt::For { body, .. } => {
                // Zero, one or more iterations: the entry state joined with
                // the state after one and after two passes.
                let entry = st.clone();
                self.block(body, st);
                let once = st.clone();
                self.block(body, st);
                st.join(&entry);
                st.join(&once);
            }
        }
    }

    fn vexpr(&mut self, v: &VExpr, st: &mut State) {
        match &v.kind {
            VKind::ArrayGet { arr, .. } => self.touch(*arr, st),
            VKind::Local(l) => self.touch(*l, st),
            VKind::Unary(_, a) | VKind::Cast(a) | VKind::ShflXor { value: a, .. } => self.vexpr(a, st),
            VKind::Binary(_, a, b) => {
                self.vexpr(a, st);
                self.vexpr(b, st);
            }
            VKind::Fma(a, b, c) | VKind::Select(a, b, c) => {
                self.vexpr(a, st);
                self.vexpr(b, st);
                self.vexpr(c, st);
            }
            VKind::Call(_, args) => {
                for a in args {
                    self.vexpr(a, st);
                }
            }
            VKind::Const(_) | VKind::Load { .. } | VKind::Scalar(_) | VKind::Int(_) | VKind::SharedGet { .. } => {}
        }
    }
}

/// When a ring's asynchronous copies have landed and been published
/// (`kir::Ring` with copies): read off the ring loop's body, whose
/// top-level statements carry one `CpAsyncCommit`, one `CpAsyncWait` and
/// the barriers, and off the prologue loop before it, which commits one
/// group per iteration. Anything else (a second commit or wait, one
/// nested in a branch, a missing one) leaves the timing unknown, and the
/// copies' windows unbounded.
#[derive(Clone, Debug, Default)]
pub struct CopyTiming {
    /// Top-level positions in the ring loop's body.
    commit: Option<usize>,
    wait: Option<(usize, u32)>,
    pub barriers: Vec<usize>,
    /// Groups committed before the ring loop: the prologue's iterations.
    prologue_groups: Option<i64>,
}

/// The point a copy's write is published at, or a window bound: body
/// position `at` (a barrier) of the iteration `iterations` after the
/// copy's own (for the prologue's copy of slab `j`: after iteration `j`,
/// at least iteration 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    pub iterations: i64,
    pub at: usize,
}

impl CopyTiming {
    /// The timing of `ring`'s copies in `ir`.
    pub fn of(ir: &KernelIr, ring: &Ring) -> CopyTiming {
        let mut t = CopyTiming::default();
        let Some((list, at)) = find_loop(&ir.body, ring.of) else { return t };
        let KStmt::For { body, .. } = &list[at] else { return t };
        let mut commits = Vec::new();
        let mut waits = Vec::new();
        for (i, s) in body.iter().enumerate() {
            match s {
                KStmt::CpAsyncCommit => commits.push(i),
                KStmt::CpAsyncWait { pending } => waits.push((i, *pending)),
                KStmt::Barrier => t.barriers.push(i),
                other => {
                    if nested_sync(other) {
                        return CopyTiming { barriers: t.barriers, ..Default::default() };
                    }
                }
            }
        }
        if let ([c], [w]) = (commits.as_slice(), waits.as_slice()) {
            t.commit = Some(*c);
            t.wait = Some(*w);
        }
        // The prologue: the loop just before the ring loop (nothing that
        // commits or waits between), one top-level commit an iteration.
        if let Some(p) = ring.prologue {
            let before = &list[..at];
            if let Some(i) = before.iter().rposition(|s| matches!(s, KStmt::For { var, .. } if *var == p)) {
                if let KStmt::For { start: IExpr::Const(0), end: IExpr::Const(end), step: IExpr::Const(step), body, .. } = &before[i] {
                    let one_commit = body.iter().filter(|s| matches!(s, KStmt::CpAsyncCommit)).count() == 1 && !body.iter().any(nested_sync);
                    // Nothing else before the ring loop commits or waits.
                    let quiet = before.iter().enumerate().all(|(j, s)| j == i || !(nested_sync(s) || matches!(s, KStmt::CpAsyncCommit | KStmt::CpAsyncWait { .. })));
                    if one_commit && quiet && *step > 0 {
                        t.prologue_groups = Some((end + step - 1) / step);
                    }
                }
            }
        }
        t
    }

    /// The first barrier at or after body position `from` of iteration
    /// `iterations` (the next iteration's first, else).
    fn barrier_after(&self, iterations: i64, from: usize) -> Option<Published> {
        match self.barriers.iter().find(|b| **b > from) {
            Some(b) => Some(Published { iterations, at: *b }),
            None => self.barriers.first().map(|b| Published { iterations: iterations + 1, at: *b }),
        }
    }

    /// A copy at top-level body position `pos` of the ring loop: when is
    /// it published (iterations after its own)? `None`: never in the loop.
    pub fn loop_copy(&self, pos: usize) -> Option<Published> {
        let (c, (w, n)) = (self.commit?, self.wait?);
        // Its group is committed this iteration if the copy precedes the
        // commit, else the next; the wait of iteration d after the commit
        // retires it once n newer groups are committed: d = n (the wait
        // after the commit in its body) or n + 1 (before it).
        let committed = if pos < c { 0 } else { 1 };
        let retired = committed + n as i64 + if w < c { 1 } else { 0 };
        self.barrier_after(retired, w)
    }

    /// The prologue's copy of slab `j` (of `groups` committed before the
    /// loop): retired by the wait of iteration j + n - groups + 1 (one
    /// less if the wait follows the commit in the body), published by the
    /// barrier after it; `iterations` is that offset from j.
    pub fn prologue_copy(&self) -> Option<Published> {
        let (c, (w, n), groups) = (self.commit?, self.wait?, self.prologue_groups?);
        let shift = n as i64 - groups + 1 - if c < w { 1 } else { 0 };
        self.barrier_after(shift, w)
    }
}

/// The statement list holding the loop over `var`, and its place.
fn find_loop(body: &[KStmt], var: IVar) -> Option<(&[KStmt], usize)> {
    for (i, s) in body.iter().enumerate() {
        match s {
            KStmt::For { var: v, .. } if *v == var => return Some((body, i)),
            KStmt::For { body, .. } => {
                if let Some(found) = find_loop(body, var) {
                    return Some(found);
                }
            }
            KStmt::If { then, els, .. } => {
                if let Some(found) = find_loop(then, var).or_else(|| find_loop(els, var)) {
                    return Some(found);
                }
            }
            KStmt::SkipWhen { body, .. } => {
                if let Some(found) = find_loop(body, var) {
                    return Some(found);
                }
            }
            _ => {}
        }
    }
    None
}

/// A commit or wait inside a compound statement.
fn nested_sync(s: &KStmt) -> bool {
    fn any(body: &[KStmt]) -> bool {
        body.iter().any(|s| matches!(s, KStmt::CpAsyncCommit | KStmt::CpAsyncWait { .. }) || nested_sync(s))
    }
    match s {
        KStmt::For { body, .. } => any(body),
        KStmt::If { then, els, .. } => any(then) || any(els),
        KStmt::SkipWhen { body, .. } => any(body),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gemm_f16's vector path on sm_90a, its copy ring (A's), and the ring
    /// loop's body.
    fn ring_of_gemm() -> (KernelIr, Ring) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops/matmul.tk");
        let src = crate::span::SourceFile::new(path.display().to_string(), std::fs::read_to_string(&path).expect("matmul.tk"));
        // Checked and scheduled only (the verifier's own module must not
        // reach back into `build`, which calls it).
        let program = crate::driver::check_source(&src).program.expect("matmul.tk checks");
        let kernels = crate::schedule::schedule_program(&program, &crate::target::Target::default_cuda()).expect("schedules");
        let i = program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
        let ir = kernels[i].clone();
        let ring = ir.shared.iter().find_map(|s| s.ring).expect("a ring");
        (ir, ring)
    }

    fn body_of(body: &mut [KStmt], var: IVar) -> Option<&mut Vec<KStmt>> {
        let i = body.iter().position(|s| match s {
            KStmt::For { var: v, body, .. } => *v == var || find_loop(body, var).is_some(),
            KStmt::If { then, els, .. } => find_loop(then, var).or_else(|| find_loop(els, var)).is_some(),
            _ => false,
        })?;
        let here = matches!(&body[i], KStmt::For { var: v, .. } if *v == var);
        match &mut body[i] {
            KStmt::For { body, .. } => {
                if here {
                    Some(body)
                } else {
                    body_of(body, var)
                }
            }
            KStmt::If { then, els, .. } => {
                if find_loop(then, var).is_some() {
                    body_of(then, var)
                } else {
                    body_of(els, var)
                }
            }
            _ => None,
        }
    }

    #[test]
    fn each_copy_is_published_by_the_barrier_of_its_slabs_iteration() {
        let (mut ir, ring) = ring_of_gemm();
        let body = body_of(&mut ir.body, ring.of).expect("the ring loop").clone();
        let commit = body.iter().position(|s| matches!(s, KStmt::CpAsyncCommit)).expect("a commit");
        let barrier = body.iter().position(|s| matches!(s, KStmt::Barrier)).expect("a barrier");
        let copy = body.iter().position(|s| matches!(s, KStmt::CpAsync { .. })).expect("a copy");
        assert!(copy < commit);
        let t = CopyTiming::of(&ir, &ring);
        // A copy of slab k0 + 3 (issued in iteration k0) is published by
        // the barrier of iteration k0 + 3, that slab's own; the prologue's
        // copy of slab j by the barrier of iteration j.
        assert_eq!(t.loop_copy(copy), Some(Published { iterations: ring.ahead as i64, at: barrier }));
        assert_eq!(t.prologue_copy(), Some(Published { iterations: 0, at: barrier }));
        // One group more in flight: everything lands an iteration later.
        let loop_body = body_of(&mut ir.body, ring.of).expect("the ring loop");
        for s in loop_body.iter_mut() {
            if let KStmt::CpAsyncWait { pending } = s {
                *pending += 1;
            }
        }
        let late = CopyTiming::of(&ir, &ring);
        assert_eq!(late.loop_copy(copy), Some(Published { iterations: ring.ahead as i64 + 1, at: barrier }));
        assert_eq!(late.prologue_copy(), Some(Published { iterations: 1, at: barrier }));
        // No commit in the loop: never published there.
        let loop_body = body_of(&mut ir.body, ring.of).expect("the ring loop");
        loop_body.retain(|s| !matches!(s, KStmt::CpAsyncCommit));
        let never = CopyTiming::of(&ir, &ring);
        assert_eq!(never.loop_copy(copy), None);
        assert_eq!(never.prologue_copy(), None);
    }
}
