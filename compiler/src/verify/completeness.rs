//! Obligations that a value is computed from all of its inputs: every
//! register slot read was set before (a vector store of a lane array reads
//! every lane), every reduction loop visits each index of its range exactly
//! once and nothing outside it, and every accumulator slot is updated in
//! every iteration of a reduction. Bounds and races alone miss these bugs: a
//! lane loop that starts one late, or a reduction that strides twice as
//! far, stays in bounds and race-free while computing the wrong value.

use super::exec::{thread_free, TID};
use super::obligations::Gen;
use tokitai_contracts::{Formula, ObligationKind, Term};

impl<'a> Gen<'a> {
    pub(super) fn registers_initialized(&mut self) {
        for r in self.exec.slot_reads.clone() {
            let span = r.span.unwrap_or(self.exec.k.span);
            let mut hyps = r.path.clone();
            hyps.extend(r.slot_range.iter().cloned());
            // An accumulator counts only for the threads that read it: a
            // producer warp beside the unit's warpgroups never updates the
            // sums, and never reads them. Every read's thread-only
            // conditions (`array_readers`; none: every thread reads it).
            if let Some(readers) = r.owner_of.and_then(|arr| self.exec.array_readers.get(&arr)) {
                if !readers.is_empty() && !readers.contains(&Formula::True) {
                    hyps.push(Formula::or(readers.clone()));
                }
            }
            let goal = Formula::or(r.set_by.clone());
            let (kind, desc) = if r.accumulator {
                (ObligationKind::ReductionComplete, format!("every slot of the {} is updated", r.what))
            } else {
                (ObligationKind::Initialized, format!("every slot of the {} that is read was set before", r.what))
            };
            let show = match &r.slot {
                Term::Var(v) => vec![(v.clone(), "slot".to_string())],
                _ => vec![],
            };
            self.push(kind, desc, span, &hyps, goal, show);
        }
    }

    /// Per-thread reduction: every `c` of `[0, extent)` lies in the granule
    /// of the iteration `v = c - (c - start) mod granule`, which the loop
    /// runs (its step is the granule). Block-cooperative: the thread
    /// `t = (c - a) mod step` (`a` the start at thread 0) runs `c`, and no
    /// two threads run one `c`. Both: no visited index lies outside the range.
    pub(super) fn reductions_complete(&mut self) {
        let block = self.exec.ir.block as i64;
        for (n, r) in self.exec.reductions.clone().into_iter().enumerate() {
            let span = r.span;
            let var = format!("reduction{}.index", n);
            let c = Term::var(&var);
            let show = vec![(var.clone(), format!("index of {}", r.name))];
            let in_range = c.clone().within(Term::c(0), r.extent.clone());
            let runs = |at: &Term, start: &Term, end: &Term| {
                Formula::and(vec![start.clone().le(at.clone()), at.clone().lt(end.clone()), at.clone().sub(start.clone()).rem(r.step.clone()).eq(Term::c(0))])
            };
            // Nothing outside: an index this thread visits is in range.
            let desc = format!("the loop over {} visits no index outside its range", r.name);
            let hyps = [r.path.clone(), vec![runs(&c, &r.start, &r.end)]].concat();
            self.push(ObligationKind::ReductionComplete, desc, span, &hyps, in_range.clone(), show.clone());
            if !r.cooperative {
                let v = c.clone().sub(c.clone().sub(r.start.clone()).rem(Term::c(r.granule)));
                let goal = Formula::and(vec![r.step.clone().eq(Term::c(r.granule)), runs(&v, &r.start, &r.end)]);
                let desc = format!("the loop over {} visits every index of its range", r.name);
                self.push(ObligationKind::ReductionComplete, desc, span, &[r.path.clone(), vec![in_range]].concat(), goal, show);
                continue;
            }
            let at = |t: &Term| {
                let t = t.clone();
                move |n: &str| (n == TID).then(|| t.clone())
            };
            let a = thread_free(&r.start);
            let owner = c.clone().sub(a.clone()).rem(r.step.clone());
            let mut goal = vec![Term::c(1).le(r.step.clone()), a.le(c.clone()), owner.clone().within(Term::c(0), Term::c(block))];
            goal.push(runs(&c, &r.start.subst(&at(&owner)), &r.end.subst(&at(&owner))));
            goal.extend(r.path.iter().map(|f| f.subst(&at(&owner))));
            let desc = format!("the threads of a block together visit every index of {}", r.name);
            // Hypothesis: some thread reaches the loop; goal: so does the owner.
            self.push(ObligationKind::ReductionComplete, desc, span, &[r.path.clone(), vec![in_range]].concat(), Formula::and(goal), show.clone());
            // Exactly once: two threads reaching one index are the same.
            let other = Term::var(format!("{}'", TID));
            let mut hyps = r.path.clone();
            hyps.extend(r.path.iter().map(|f| f.subst(&at(&other))));
            hyps.push(other.clone().within(Term::c(0), Term::c(block)));
            hyps.push(runs(&c, &r.start, &r.end));
            hyps.push(runs(&c, &r.start.subst(&at(&other)), &r.end.subst(&at(&other))));
            let desc = format!("no index of {} is visited by two threads", r.name);
            self.push(ObligationKind::ReductionComplete, desc, span, &hyps, Term::var(TID).eq(other), show);
        }
    }

    /// A reduction whose iterations visit index `at` (a row cached in
    /// registers): nothing outside the range is visited; every index of
    /// the range is visited by the thread and iteration its witness names
    /// (given that some thread enters the visiting loops); and two visits
    /// of one index are one visit (the same thread and iteration).
    pub(super) fn lane_visits_complete(&mut self) {
        for (n, r) in self.exec.lane_visits.clone().into_iter().enumerate() {
            let span = r.span;
            let Term::Var(elem) = &r.elem else { continue };
            let show = vec![(elem.clone(), format!("index of {}", r.name))];
            let in_range = r.elem.clone().within(Term::c(0), r.extent.clone());
            let desc = format!("the loop over {} visits no index outside its range", r.name);
            let hyps = [r.path.clone(), vec![r.at.clone().eq(r.elem.clone())]].concat();
            self.push(ObligationKind::ReductionComplete, desc, span, &hyps, in_range.clone(), show.clone());
            // Every index: the witness's thread and iteration reach the
            // visit, and visit exactly it.
            let witness = r.witness.clone();
            let by_witness = |f: &Formula| f.subst(&|v: &str| witness.iter().find(|(w, _)| w == v).map(|(_, t)| t.clone()));
            let mut goal: Vec<Formula> = r.path.iter().map(&by_witness).collect();
            goal.push(by_witness(&r.at.clone().eq(r.elem.clone())));
            // The witness's thread is one of the block's.
            let block = self.exec.ir.block as i64;
            if let Some((_, t)) = witness.iter().find(|(w, _)| w == TID) {
                goal.push(t.clone().within(Term::c(0), Term::c(block)));
            }
            // Of the asking thread's team: the index is visited for the
            // value this thread sums into.
            if let Some(team) = &r.team {
                goal.push(team.subst(&|v: &str| witness.iter().find(|(w, _)| w == v).map(|(_, t)| t.clone())).eq(team.clone()));
            }
            let desc = format!("the threads of a block together visit every index of {}", r.name);
            self.push(ObligationKind::ReductionComplete, desc, span, &[r.outer_path.clone(), vec![in_range]].concat(), Formula::and(goal), show.clone());
            // Exactly once: rename the thread and the visiting loops'
            // variables, and ask the two visits of one index to agree.
            let renamed = |v: &str| format!("{}'{}", v, n);
            let names: Vec<String> = r.witness.iter().map(|(w, _)| w.clone()).collect();
            let other = |f: &Formula| f.subst(&|v: &str| names.iter().any(|w| w == v).then(|| Term::var(renamed(v))));
            let mut hyps = r.path.clone();
            hyps.extend(r.path.iter().map(&other));
            hyps.push(r.at.clone().eq(r.elem.clone()));
            hyps.push(other(&r.at.clone().eq(r.elem.clone())));
            if names.iter().any(|v| v == TID) {
                hyps.push(Term::var(renamed(TID)).within(Term::c(0), Term::c(block)));
            }
            // Two visits for one value: threads of one team.
            if let Some(team) = &r.team {
                hyps.push(team.subst(&|v: &str| names.iter().any(|w| w == v).then(|| Term::var(renamed(v)))).eq(team.clone()));
            }
            let goal = Formula::and(names.iter().map(|v| Term::var(v.clone()).eq(Term::var(renamed(v)))).collect());
            let desc = format!("no index of {} is visited twice", r.name);
            self.push(ObligationKind::ReductionComplete, desc, span, &hyps, goal, show);
        }
    }
}
