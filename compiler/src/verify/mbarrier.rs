//! The protocol of a ring filled by a producer's loop and drained by the
//! consumers' loop (`kir::Ring::filled_by`, `schedule::producer_ring`),
//! synchronised through barriers in shared memory (`mbarrier`), proved on
//! the printed KernelIr.
//!
//! Slab `j` lives in stage `j % S` of the ring: it is that stage's use
//! `u = j / S`. Two barrier arrays carry the protocol. They are told apart
//! by who arrives where, not by their names:
//!
//! - `full`: the producer's threads arrive (`CpAsyncArrive`) at the end of
//!   each iteration of their loop, once their copies have landed. The
//!   consumers wait for it before they read the slab.
//! - `empty`: the consumers' threads arrive (`MbarArrive`) once they, and
//!   the unit on their behalf, have finished reading a slab. The producer
//!   waits for it before it refills the stage.
//!
//! Each wait buys an order (happens-before, through the barrier's phase
//! and program order):
//!
//! - published: the copies of slab `jw` land before the consumers read
//!   any slab `jx >= jw`. The arrival for `jx` follows the thread's copies
//!   of every earlier slab, and `noinc` arrives only once they have
//!   landed.
//! - released: the consumers' reads of slab `jx` end before the producer
//!   writes any slab `jw >= jx + S`.
//!
//! So the copy of slab `jw` and a read of slab `jx` can meet only where
//! `jx < jw < jx + S`. Race-freedom asks about that window
//! ([`Handshake::copy_read_window`]), and the ring obligation puts the two
//! accesses in different stages there. A deleted or misplaced wait or
//! arrival drops its half of the window, and the races are refuted.
//!
//! A ring filled by bulk tensor copies (TMA, `KStmt::TmaLoad`) arms
//! `full` instead: one producer thread arrives with the bytes its copies
//! will bring (`MbarExpectTx`), then issues them, each completing its bytes
//! on the barrier of its slab's stage. The phase completes only once every
//! byte has landed, so each copy issued after the arrival in its iteration
//! is published by that phase. This module checks that the bytes the
//! arrival expects are exactly the iteration's copies' bytes (fewer and
//! the phase could complete while a copy is in flight; more and it never
//! would), and that the copies follow the arrival in the loop's body, once
//! an iteration.
//!
//! One parity bit names the right phase only because neither side runs
//! two phases ahead of the other. That holds because each side waits
//! before it arrives again. The solver proves that each wait's stage and
//! parity are its slab's ([`goals`]). This module checks the rest by
//! structure ([`findings`]):
//!
//! - each barrier is initialised once, by one thread, before a block
//!   barrier;
//! - each arrival is counted: exactly the barrier's `arrivals` threads
//!   arrive, each once an iteration;
//! - the two loops walk the same slabs;
//! - the register allowances fit what the block enters with.
//!   `setmaxnreg.inc` waits for registers that the pool must hold, so this
//!   is a liveness condition; on the H100 a miss was seen as a hang.

use super::exec::{Exec, MbarEvent, MbarKind, TID};
use crate::kir::*;
use tokitai_contracts::{Formula, ObligationKind, Term};

/// Where a producer ring's synchronisation lies, read off its two loops:
/// top-level positions in each loop's body. `None` means not found, or
/// not where the protocol needs it.
#[derive(Clone, Debug, Default)]
pub struct Handshake {
    pub full: Option<MbarId>,
    pub empty: Option<MbarId>,
    /// The producer's arrival at `full`, and its wait on `empty`.
    producer_arrive: Option<usize>,
    /// Where `full` is armed with bytes (`MbarExpectTx`): the positions of
    /// the producer's bulk copies that complete on it.
    bulk_copies: Option<Vec<usize>>,
    producer_wait: Option<usize>,
    /// The consumers' wait on `full`, and their arrival at `empty`.
    consumer_wait: Option<usize>,
    consumer_arrive: Option<usize>,
}

/// The index into `Exec::loops` of the loop over `var`.
fn loop_id(exec: &Exec, var: IVar) -> Option<usize> {
    let name = exec.loop_var_name(var);
    exec.loops.iter().position(|l| l.var == name)
}

/// An event's top-level position in the body of loop `id`, if it lies in
/// that loop.
fn position_in(exec: &Exec, e: &MbarEvent, id: usize) -> Option<usize> {
    let list = exec.loops[id].body_list;
    e.pos.iter().find(|(l, _)| *l == list).map(|(_, at)| *at)
}

/// The event is a statement of loop `id`'s body itself, not nested in a
/// condition or an inner loop: every thread that runs an iteration runs
/// it once.
fn directly_in(exec: &Exec, e: &MbarEvent, id: usize) -> bool {
    e.pos.last().is_some_and(|(l, _)| *l == exec.loops[id].body_list)
}

impl Handshake {
    /// The handshake of `ring`, or `None` for a ring that no producer fills.
    pub fn of(exec: &Exec, ring: &Ring) -> Option<Handshake> {
        let producer = ring.filled_by?;
        let mut h = Handshake::default();
        let (Some(p), Some(c)) = (loop_id(exec, producer), loop_id(exec, ring.of)) else { return Some(h) };
        let events = |id: usize, pick: &dyn Fn(&MbarEvent) -> bool| -> Vec<&MbarEvent> { exec.mbar_events.iter().filter(|e| e.loops.contains(&id) && pick(e)).collect() };
        if let [e] = events(p, &|e| matches!(e.kind, MbarKind::CopiesArrive | MbarKind::ExpectTx { .. }))[..] {
            if directly_in(exec, e, p) {
                h.full = Some(e.bar);
                h.producer_arrive = position_in(exec, e, p);
                if matches!(e.kind, MbarKind::ExpectTx { .. }) {
                    let copies = events(p, &|c| matches!(c.kind, MbarKind::Transaction { .. }) && c.bar == e.bar);
                    h.bulk_copies = Some(copies.iter().filter(|c| directly_in(exec, c, p)).filter_map(|c| position_in(exec, c, p)).collect());
                }
            }
        }
        if let [e] = events(c, &|e| e.kind == MbarKind::Arrive)[..] {
            if directly_in(exec, e, c) && Some(e.bar) != h.full {
                h.empty = Some(e.bar);
                h.consumer_arrive = position_in(exec, e, c);
            }
        }
        let waits_on = |bar: Option<MbarId>| move |e: &MbarEvent| matches!(e.kind, MbarKind::Wait { .. }) && Some(e.bar) == bar;
        // The consumers wait in every iteration; the producer, under a
        // condition that the solver proves holds from the second use of
        // a stage on (`goals`).
        if let [e] = events(c, &waits_on(h.full))[..] {
            if directly_in(exec, e, c) {
                h.consumer_wait = position_in(exec, e, c);
            }
        }
        if let [e] = events(p, &waits_on(h.empty))[..] {
            h.producer_wait = position_in(exec, e, p);
        }
        Some(h)
    }

    /// The producer's copy at position `pw` has landed before the
    /// consumers pass their wait.
    ///
    /// A copy by `cp.async` lands before its thread's arrival after it
    /// completes the phase; a bulk copy after the arrival that armed the
    /// barrier with its bytes, before the phase completes.
    fn lands(&self, pw: usize) -> bool {
        let arrival_covers = match &self.bulk_copies {
            Some(copies) => copies.contains(&pw) && self.producer_arrive.is_some_and(|a| a < pw),
            None => self.producer_arrive.is_some_and(|a| a > pw),
        };
        arrival_covers && self.consumer_wait.is_some()
    }

    /// Published: the copy at producer position `pw` of slab `jw` lands
    /// before the consumers' access at position `px` of any slab
    /// `jx >= jw`.
    fn published(&self, pw: usize, px: usize) -> bool {
        self.lands(pw) && self.consumer_wait.is_some_and(|w| w < px)
    }

    /// Released: the consumers' access at position `px` of slab `jx` ends
    /// before the producer's copy at position `pw` of any slab
    /// `jw >= jx + S`.
    fn released(&self, px: usize, pw: usize) -> bool {
        self.consumer_arrive.is_some_and(|a| a > px) && self.producer_wait.is_some_and(|w| w < pw)
    }

    /// The copy at producer position `p1` of slab `j1` lands before the
    /// copy at `p2` of any slab `j2 >= j1 + S` is issued (through the
    /// consumers' wait and arrival in between).
    fn recycled(&self, p1: usize, p2: usize) -> bool {
        let consumed = matches!((self.consumer_wait, self.consumer_arrive), (Some(w), Some(a)) if w < a);
        self.lands(p1) && consumed && self.producer_wait.is_some_and(|w| w < p2)
    }

    /// When the copy of slab `jw` (at producer position `pw`) may meet the
    /// consumers' access of slab `jx` (at position `px`): the window of
    /// the module's documentation, each half only where its order holds.
    pub fn copy_read_window(&self, (jw, pw): (Term, usize), (jx, px): (Term, usize), stages: u32) -> Formula {
        let mut window = Vec::new();
        if self.published(pw, px) {
            window.push(jx.clone().lt(jw.clone()));
        }
        if self.released(px, pw) {
            window.push(jw.lt(jx.add(Term::c(stages as i64))));
        }
        Formula::and(window)
    }

    /// When two of the producer's copies (slabs `j1` and `j2`, at
    /// positions `p1` and `p2`) may both be in flight: within `S` slabs of
    /// each other, each bound only where its order holds.
    pub fn copy_copy_window(&self, (j1, p1): (Term, usize), (j2, p2): (Term, usize), stages: u32) -> Formula {
        let s = Term::c(stages as i64);
        let mut window = Vec::new();
        if self.recycled(p1, p2) {
            window.push(j2.clone().lt(j1.clone().add(s.clone())));
        }
        if self.recycled(p2, p1) {
            window.push(j1.lt(j2.add(s)));
        }
        Formula::and(window)
    }
}

/// An obligation of the protocol for the solver.
pub struct Goal {
    pub kind: ObligationKind,
    pub description: String,
    pub path: Vec<Formula>,
    pub goal: Formula,
}

/// The solver's part of the protocol:
///
/// - every barrier a statement names lies in its array;
/// - each wait and arrival of a producer ring's handshake names its
///   slab's stage;
/// - each wait names its slab's parity: the consumers wait for the phase
///   of use `u`, parity `u % 2`, and the producer for the phase the
///   consumers completed with the stage's previous slab, parity
///   `(u + 1) % 2`;
/// - the producer waits in every iteration from a stage's second use on.
pub fn goals(exec: &Exec) -> Vec<Goal> {
    let ir = exec.ir;
    let mut out = Vec::new();
    for e in exec.mbar_events.iter().filter(|e| e.kind != MbarKind::Init) {
        let m = &ir.mbarriers[e.bar];
        out.push(Goal {
            kind: ObligationKind::InBounds,
            description: format!("the {} at `{}[{}]` stays within the array's {} barriers", what(&e.kind), m.name, e.stage, m.stages),
            path: e.path.clone(),
            goal: e.stage.clone().within(Term::c(0), Term::c(m.stages as i64)),
        });
    }
    let mut seen = Vec::new();
    for ring in ir.shared.iter().filter_map(|s| s.ring) {
        let Some(producer) = ring.filled_by else { continue };
        if seen.contains(&(ring.of, producer)) {
            continue;
        }
        seen.push((ring.of, producer));
        let (Some(p), Some(c)) = (loop_id(exec, producer), loop_id(exec, ring.of)) else { continue };
        let h = Handshake::of(exec, &ring).unwrap_or_default();
        let stages = Term::c(ring.stages as i64);
        let slab = |id: usize| Term::var(&exec.loops[id].var).div(Term::c(ring.step));
        let in_loop = |id: usize, pick: &dyn Fn(&MbarEvent) -> bool| exec.mbar_events.iter().filter(|e| e.loops.contains(&id) && pick(e)).cloned().collect::<Vec<_>>();
        // Both sides' statements on the handshake's barriers.
        for (id, side) in [(p, "producer's"), (c, "consumers'")] {
            for e in in_loop(id, &|e| e.kind != MbarKind::Init && (Some(e.bar) == h.full || Some(e.bar) == h.empty)) {
                let name = &ir.mbarriers[e.bar].name;
                out.push(Goal {
                    kind: ObligationKind::SharedRaceFree,
                    description: format!("mbarrier protocol: the {}'s {} at `{}[{}]` names the stage of its iteration's slab", side, what(&e.kind), name, e.stage),
                    path: e.path.clone(),
                    goal: e.stage.clone().eq(slab(id).rem(stages.clone())),
                });
                let MbarKind::Wait { parity } = &e.kind else { continue };
                let (expected, phase) = if id == c {
                    (slab(id).div(stages.clone()).rem(Term::c(2)), "the phase its slab's copies complete")
                } else {
                    (slab(id).div(stages.clone()).add(Term::c(1)).rem(Term::c(2)), "the phase the consumers completed with the stage's previous slab")
                };
                out.push(Goal {
                    kind: ObligationKind::SharedRaceFree,
                    description: format!("mbarrier protocol: the {} wait on `{}[{}]` with parity {} waits for {}", side, name, e.stage, parity, phase),
                    path: e.path.clone(),
                    goal: parity.clone().eq(expected),
                });
            }
        }
        // The producer's wait runs from each stage's second use on.
        let arrive = in_loop(p, &|e| matches!(e.kind, MbarKind::CopiesArrive | MbarKind::ExpectTx { .. }) && Some(e.bar) == h.full);
        let wait = in_loop(p, &|e| matches!(e.kind, MbarKind::Wait { .. }) && Some(e.bar) == h.empty);
        if let ([a], [w]) = (&arrive[..], &wait[..]) {
            let mut path = a.path.clone();
            path.push(stages.le(slab(p)));
            out.push(Goal {
                kind: ObligationKind::SharedRaceFree,
                description: format!("mbarrier protocol: the producer waits on `{}` in every iteration that refills a stage (slab {} and later)", ir.mbarriers[w.bar].name, ring.stages),
                path,
                goal: Formula::and(w.path.clone()),
            });
        }
    }
    out
}

fn what(kind: &MbarKind) -> &'static str {
    match kind {
        MbarKind::Init => "initialisation",
        MbarKind::Arrive => "arrival",
        MbarKind::CopiesArrive => "arrival once the copies land",
        MbarKind::ExpectTx { .. } => "arrival that expects the bulk copies' bytes",
        MbarKind::Transaction { .. } => "bulk copy",
        MbarKind::Wait { .. } => "wait",
    }
}

/// The threads of a block of `block` for which every one of `conds` (in
/// `tid` alone) holds; `None` where one cannot be evaluated.
fn threads(conds: &[Formula], block: u32) -> Option<u32> {
    let mut n = 0;
    for t in 0..block as i128 {
        let env = |v: &str| (v == TID).then_some(t);
        let mut all = true;
        for c in conds {
            all &= c.eval(&env)?;
        }
        n += all as u32;
    }
    Some(n)
}

/// The register allowance a thread of a block of `block` threads enters
/// with: `__launch_bounds__(block, 1)` caps it at the register file's
/// 65536 over the block, in the allocation's units of 8, at most 255.
pub fn entry_registers(block: u32) -> u32 {
    (65536 / block.max(1) / 8 * 8).min(255)
}

/// The structural part of the protocol (see the module's documentation):
/// each violation, in words.
pub fn findings(exec: &Exec) -> Vec<String> {
    let ir = exec.ir;
    let mut out = Vec::new();
    for (bar, m) in ir.mbarriers.iter().enumerate() {
        let events: Vec<&MbarEvent> = exec.mbar_events.iter().filter(|e| e.bar == bar).collect();
        let inits: Vec<&&MbarEvent> = events.iter().filter(|e| e.kind == MbarKind::Init).collect();
        match inits[..] {
            [init] => {
                if !init.loops.is_empty() || init.thread_conds.as_ref().and_then(|c| threads(c, ir.block)) != Some(1) {
                    out.push(format!("`{}` is not initialised by exactly one thread, once", m.name));
                } else if !published_by_barrier(exec, init, &events) {
                    out.push(format!("`{}` is used before a block barrier publishes its initialisation", m.name));
                }
            }
            _ => out.push(format!("`{}` is initialised {} times, not once", m.name, inits.len())),
        }
        let arrivals: Vec<&&MbarEvent> = events.iter().filter(|e| matches!(e.kind, MbarKind::Arrive | MbarKind::CopiesArrive | MbarKind::ExpectTx { .. })).collect();
        out.extend(transaction_findings(exec, m, &events, &arrivals));
        let [arrive] = arrivals[..] else {
            out.push(format!("`{}` is arrived at by {} statements, not one", m.name, arrivals.len()));
            continue;
        };
        let counted = arrive.thread_conds.as_ref().and_then(|c| threads(c, ir.block));
        if counted != Some(m.arrivals) {
            let n = counted.map_or("an uncounted number of".to_string(), |n| n.to_string());
            out.push(format!("{} threads arrive at `{}`, which completes a phase after {} arrivals", n, m.name, m.arrivals));
        }
        let once = arrive.loops.last().is_some_and(|l| directly_in(exec, arrive, *l) && ring_loop(ir, exec, *l));
        if !once {
            out.push(format!("the arrival at `{}` is not a statement of a ring's loop body (once an iteration for each thread)", m.name));
        }
        for e in events.iter().filter(|e| matches!(e.kind, MbarKind::Wait { .. })) {
            if !e.loops.last().is_some_and(|l| ring_loop(ir, exec, *l)) {
                out.push(format!("a wait on `{}` lies outside a ring's loops", m.name));
            }
        }
    }
    for ring in ir.shared.iter().filter_map(|s| s.ring) {
        let Some(producer) = ring.filled_by else { continue };
        let bounds = |v: IVar| find_for(&ir.body, v);
        if bounds(producer).is_none() || bounds(producer) != bounds(ring.of) {
            out.push(format!("the producer's loop `{}` and the consumers' `{}` do not walk the same slabs", ir.ivars[producer], ir.ivars[ring.of]));
        }
    }
    out.extend(register_budget(exec));
    out.sort();
    out.dedup();
    out
}

/// The bulk copies completing on barrier `m` (see the module's
/// documentation): armed by its one arrival, with exactly their bytes a
/// phase (the arrival's bytes times the threads that arrive, against each
/// copy's bytes times the threads that issue it), each a statement of the
/// arrival's loop body after it.
fn transaction_findings(exec: &Exec, m: &MbarArray, events: &[&MbarEvent], arrivals: &[&&MbarEvent]) -> Vec<String> {
    let copies: Vec<&&MbarEvent> = events.iter().filter(|e| matches!(e.kind, MbarKind::Transaction { .. })).collect();
    if copies.is_empty() {
        return Vec::new();
    }
    let block = exec.ir.block;
    let count = |e: &MbarEvent| e.thread_conds.as_ref().and_then(|c| threads(c, block));
    let [arrive] = arrivals else { return vec![format!("bulk copies complete on `{}`, which no one arrival arms with their bytes", m.name)] };
    let MbarKind::ExpectTx { bytes: expected } = arrive.kind else { return vec![format!("bulk copies complete on `{}`, whose arrival does not expect their bytes", m.name)] };
    let mut out = Vec::new();
    let mut landing: Option<u64> = Some(0);
    for c in &copies {
        let MbarKind::Transaction { bytes } = c.kind else { continue };
        landing = landing.zip(count(c)).map(|(sum, n)| sum + bytes as u64 * n as u64);
        let Some(&l) = arrive.loops.last() else { continue };
        let after = position_in(exec, c, l).zip(position_in(exec, arrive, l)).is_some_and(|(pc, pa)| pc > pa);
        if !(directly_in(exec, c, l) && after) {
            out.push(format!("a bulk copy completing on `{}` is not a statement of its arrival's loop body after the arrival (once an iteration, armed before it lands)", m.name));
        }
    }
    let armed = count(arrive).map(|n| expected as u64 * n as u64);
    if landing.is_none() || landing != armed {
        let say = |v: Option<u64>| v.map_or("an uncounted number of".to_string(), |b| b.to_string());
        out.push(format!("`{}` expects {} bytes a phase, but its bulk copies bring {}", m.name, say(armed), say(landing)));
    }
    out
}

/// Is loop `id` a producer ring's loop, filling or draining it?
fn ring_loop(ir: &KernelIr, exec: &Exec, id: usize) -> bool {
    ir.shared.iter().filter_map(|s| s.ring).filter(|r| r.filled_by.is_some()).any(|r| [Some(r.of), r.filled_by].into_iter().flatten().any(|v| exec.loop_var_name(v) == exec.loops[id].var))
}

/// A block barrier follows the initialisation (in a statement list that
/// holds it) before every other statement on the barrier.
fn published_by_barrier(exec: &Exec, init: &MbarEvent, events: &[&MbarEvent]) -> bool {
    init.pos.iter().any(|(list, at)| {
        exec.lists[*list].barriers.iter().filter(|b| **b > *at).any(|b| {
            events.iter().filter(|e| e.kind != MbarKind::Init).all(|e| e.pos.iter().any(|(l, j)| l == list && j > b))
        })
    })
}

/// The bounds of the loop over `var`: start, end and step.
fn find_for(body: &[KStmt], var: IVar) -> Option<(IExpr, IExpr, IExpr)> {
    body.iter().find_map(|s| match s {
        KStmt::For { var: v, start, end, step, .. } if *v == var => Some((start.clone(), end.clone(), step.clone())),
        KStmt::For { body, .. } => find_for(body, var),
        KStmt::If { then, els, .. } => find_for(then, var).or_else(|| find_for(els, var)),
        KStmt::SkipWhen { body, .. } => find_for(body, var),
        _ => None,
    })
}

/// The registers the threads' allowances take, against what the block
/// enters with: `setmaxnreg.inc` waits until the pool holds what it asks.
fn register_budget(exec: &Exec) -> Vec<String> {
    let ir = exec.ir;
    if exec.allowances.is_empty() {
        return Vec::new();
    }
    let entry = entry_registers(ir.block);
    let mut total: u64 = 0;
    for t in 0..ir.block as i128 {
        let env = |v: &str| (v == TID).then_some(t);
        let mut regs = entry;
        for (r, conds) in &exec.allowances {
            let Some(conds) = conds else { return vec!["a register allowance is set under conditions that do not name its threads by `tid` alone".into()] };
            let mut holds = true;
            for c in conds {
                match c.eval(&env) {
                    Some(b) => holds &= b,
                    None => return vec!["a register allowance is set under conditions that cannot be evaluated for each thread".into()],
                }
            }
            if holds {
                regs = *r;
            }
        }
        total += regs as u64;
    }
    let pool = ir.block as u64 * entry as u64;
    if total > pool {
        vec![format!("the threads' register allowances take {} registers, more than the {} the block enters with ({} a thread): `setmaxnreg.inc` would wait for ever", total, pool, entry)]
    } else {
        Vec::new()
    }
}
