//! The warpgroup unit's protocol (`KStmt::Wgmma`), checked on the printed
//! KernelIr by a forward pass over every path.
//!
//! The unit runs asynchronously with the thread that issued it: it reads
//! its shared operands and its accumulator registers, and writes the
//! accumulator, at some time before the next `WgmmaWait`. Race-freedom
//! records its shared reads at the instruction, which is sound only if
//! the wait comes before the barrier that closes the instruction's
//! interval. So, on every path:
//!
//! 1. every issued instruction is waited for before a barrier and before
//!    the kernel ends;
//! 2. no ordinary instruction touches an accumulator while an instruction
//!    on it may still run (it would read a value the unit has not yet
//!    written, or write one the unit overwrites);
//! 3. between an ordinary access of an accumulator and an instruction on
//!    it lies a `WgmmaFence` (PTX: `wgmma.fence` orders the registers'
//!    earlier accesses before the unit's);
//! 4. an ordinary store into shared memory the unit reads is followed by a
//!    `ProxyFence` before the next barrier (the unit reads through the
//!    asynchronous proxy, which sees the store only after the fence).
//!
//! Loops are walked twice (the second pass sees what the end of an
//! iteration leaves to the next) and may run zero times; the two arms of
//! a branch join. Each finding is a refuted structural obligation; a
//! kernel with the unit and no finding gets one proved obligation.

use crate::kir::*;
use std::collections::BTreeSet;

#[derive(Clone, Default, PartialEq)]
struct State {
    /// Accumulators an ordinary instruction touched since the last fence.
    dirty: BTreeSet<LocalId>,
    /// Accumulators of issued, not yet waited, instructions.
    in_flight: BTreeSet<LocalId>,
    /// Shared arrays the unit reads, stored into since the last proxy
    /// fence.
    unfenced: BTreeSet<SharedId>,
}

impl State {
    fn join(&mut self, o: &State) {
        self.dirty.extend(o.dirty.iter().copied());
        self.in_flight.extend(o.in_flight.iter().copied());
        self.unfenced.extend(o.unfenced.iter().copied());
    }
}

/// What the pass found: the kernel uses the unit, and each violation.
pub struct Findings {
    pub uses_unit: bool,
    pub violations: Vec<String>,
}

pub fn check(ir: &KernelIr) -> Findings {
    let mut p = Pass { ir, accs: BTreeSet::new(), operands: BTreeSet::new(), violations: Vec::new() };
    collect(&ir.body, &mut p.accs, &mut p.operands);
    if p.accs.is_empty() {
        return Findings { uses_unit: false, violations: Vec::new() };
    }
    let mut st = State::default();
    p.block(&ir.body, &mut st);
    if !st.in_flight.is_empty() {
        let names = p.names(&st.in_flight);
        p.violation(format!("the kernel ends while a wgmma into {} may still run (no wait after it)", names));
    }
    Findings { uses_unit: true, violations: p.violations }
}

fn collect(body: &[KStmt], accs: &mut BTreeSet<LocalId>, operands: &mut BTreeSet<SharedId>) {
    for s in body {
        match s {
            KStmt::Wgmma { a, b, acc, .. } => {
                accs.insert(*acc);
                operands.insert(a.tile);
                operands.insert(b.tile);
            }
            KStmt::For { body, .. } => collect(body, accs, operands),
            KStmt::If { then, els, .. } => {
                collect(then, accs, operands);
                collect(els, accs, operands);
            }
            _ => {}
        }
    }
}

struct Pass<'a> {
    ir: &'a KernelIr,
    accs: BTreeSet<LocalId>,
    operands: BTreeSet<SharedId>,
    violations: Vec<String>,
}

impl Pass<'_> {
    fn violation(&mut self, v: String) {
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
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
        if st.in_flight.contains(&arr) {
            let name = &self.ir.locals[arr].name;
            self.violation(format!("`{}` is accessed while a wgmma into it may still run (no wait before the access)", name));
        }
        st.dirty.insert(arr);
    }

    fn stmt(&mut self, s: &KStmt, st: &mut State) {
        match s {
            KStmt::Wgmma { acc, .. } => {
                if st.dirty.contains(acc) {
                    let name = &self.ir.locals[*acc].name;
                    self.violation(format!("a wgmma into `{}` follows ordinary accesses of it with no wgmma.fence between", name));
                }
                st.in_flight.insert(*acc);
            }
            KStmt::WgmmaFence => st.dirty.clear(),
            KStmt::WgmmaWait => st.in_flight.clear(),
            KStmt::ProxyFence => st.unfenced.clear(),
            KStmt::Barrier => {
                if !st.in_flight.is_empty() {
                    let names = self.names(&st.in_flight);
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
            KStmt::LetInt { .. } => {}
            KStmt::If { then, els, .. } => {
                let mut other = st.clone();
                self.block(then, st);
                self.block(els, &mut other);
                st.join(&other);
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
