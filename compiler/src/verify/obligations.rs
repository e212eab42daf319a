//! Obligation generation and discharge for one kernel.

use super::exec::{self, Access, Exec, LoopForm, Target, BID, TID};
use super::mbarrier::{self, Handshake};
use super::protocol::CopyTiming;
use crate::diag::Diagnostic;
use crate::kir::KernelIr;
use crate::span::Span;
use crate::tir::Kernel;
use crate::types::Dtype;
use crate::kir::{VExpr, VKind, Witness};
use crate::tir::{Contract, TensorRole};
use std::collections::{BTreeMap, HashMap, HashSet};
use tokitai_contracts::z3_backend::{discharge_memo as discharge, Config};
use tokitai_contracts::{Formula, Obligation, ObligationKind, Outcome, Term};

/// An obligation, its outcome and where in the source it comes from.
#[derive(Clone, Debug)]
pub struct VerifiedObligation {
    pub obligation: Obligation,
    pub outcome: Outcome,
    pub span: Span,
    /// The outcome was taken from the persistent proof cache, not
    /// computed in this run.
    pub cached: bool,
}

/// Everything proved (or not) about one kernel.
#[derive(Clone, Debug)]
pub struct KernelProofs {
    pub kernel: String,
    pub index_ty: Dtype,
    /// Why 64-bit indexing was chosen, when it was.
    pub index_note: Option<String>,
    pub obligations: Vec<VerifiedObligation>,
}

impl KernelProofs {
    pub fn refuted(&self) -> impl Iterator<Item = &VerifiedObligation> {
        self.obligations.iter().filter(|o| o.outcome.is_refuted())
    }
    pub fn all_proved(&self) -> bool {
        self.obligations.iter().all(|o| o.outcome.is_proved())
    }

    /// One diagnostic per refuted or unknown obligation, with the
    /// counterexample in words.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        for v in &self.obligations {
            match &v.outcome {
                Outcome::Refuted { model, .. } => {
                    let code = match v.obligation.kind {
                        ObligationKind::RequiresSatisfiable => "E0901",
                        ObligationKind::InBounds => "E0902",
                        ObligationKind::NoOverflow => "E0903",
                        ObligationKind::DivisionDefined => "E0904",
                        ObligationKind::RaceFree => "E0905",
                        ObligationKind::SharedRaceFree => "E0906",
                        ObligationKind::BarrierUniform => "E0907",
                        ObligationKind::Coverage => "E0908",
                        ObligationKind::Dtype => "E0909",
                        ObligationKind::Ensures => "E0910",
                        ObligationKind::Initialized => "E0911",
                        ObligationKind::ReductionComplete => "E0912",
                        ObligationKind::Tolerance => "E0913",
                        ObligationKind::SkipExact => "E0914",
                    };
                    let mut d = Diagnostic::error(code, format!("kernel `{}`: {} refuted: {}", self.kernel, v.obligation.kind.name(), v.obligation.description), v.span)
                        .with_label("this access or contract fails")
                        .with_help("the kernel is not emitted: fix the program or strengthen `requires`");
                    let words = counterexample_words(model, &v.obligation.show);
                    if !words.is_empty() {
                        d = d.with_note(format!("counterexample: {}", words));
                    }
                    out.push(d);
                }
                Outcome::Unknown { reason, .. } if v.obligation.kind == ObligationKind::Tolerance => out.push(super::tolerance::diagnostic(&self.kernel, v, reason)),
                Outcome::Unknown { reason, .. } if super::float_ensures::not_shown(reason) => out.push(super::float_ensures::diagnostic(&self.kernel, v, reason)),
                Outcome::Unknown { reason, seconds } => out.push(
                    Diagnostic::warning("W0901", format!("kernel `{}`: {} unknown after {:.1}s ({}): {}", self.kernel, v.obligation.kind.name(), seconds, reason, v.obligation.description), v.span)
                        .with_label("not proved")
                        .with_help("raise the solver timeout, or add `requires` bounds that make the proof easier"),
                ),
                Outcome::Proved { .. } => {}
            }
        }
        out
    }
}

/// The alignments a kernel tests buffers for (`Cond::Aligned`): a vector
/// word's need is met by any of them at least as large.
const ALIGNMENTS: [u32; 3] = [4, 8, 16];

fn counterexample_words(model: &BTreeMap<String, i64>, show: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    let dims: Vec<String> = model.iter().filter(|(k, _)| k.starts_with("dim.")).map(|(k, v)| format!("{} = {}", &k[4..], v)).collect();
    if !dims.is_empty() {
        parts.push(format!("dims {}", dims.join(", ")));
    }
    let ids = |suffix: &str| -> Option<String> {
        let t = model.get(&format!("{}{}", TID, suffix))?;
        let b = model.get(&format!("{}{}", BID[0], suffix)).copied().unwrap_or(0);
        let by = model.get(&format!("{}{}", BID[1], suffix)).copied();
        // The third axis is named only off its first block (a kernel
        // without one launches a single block along it).
        let bz = model.get(&format!("{}{}", BID[2], suffix)).copied().filter(|z| *z != 0);
        Some(match (by, bz) {
            (y, Some(z)) => format!("block ({}, {}, {}) thread {}", b, y.unwrap_or(0), z, t),
            (Some(y), None) => format!("block ({}, {}) thread {}", b, y, t),
            (None, None) => format!("block {} thread {}", b, t),
        })
    };
    if let Some(a) = ids("") {
        parts.push(a);
    }
    if let Some(b) = ids("'") {
        parts.push(format!("and {}", b));
    }
    if let Some(g) = model.get("grid.x") {
        parts.push(format!("grid of {} block{}", g, if *g == 1 { "" } else { "s" }));
    }
    for (var, label) in show {
        if let Some(v) = model.get(var) {
            parts.push(format!("{} = {}", label, v));
        }
    }
    // Values read from index tensors: `load.<tensor>.<n>`.
    let loaded: Vec<String> = model
        .iter()
        .filter(|(k, _)| k.starts_with("load.") && !k.ends_with('\''))
        .map(|(k, v)| format!("`{}` holds {}", k[5..].rsplit_once('.').map(|(t, _)| t).unwrap_or(&k[5..]), v))
        .collect();
    if !loaded.is_empty() {
        parts.push(format!("the element read from {}", loaded.join(", ")));
    }
    let loops: Vec<String> = model
        .iter()
        .filter(|(k, _)| k.contains('#') && !k.ends_with('\''))
        .map(|(k, v)| format!("{} = {}", k.split('#').next().unwrap_or(k), v))
        .collect();
    if !loops.is_empty() {
        parts.push(format!("loop variables {}", loops.join(", ")));
    }
    parts.join("; ")
}

pub(super) struct Gen<'a> {
    pub(super) exec: Exec<'a>,
    obs: Vec<(Obligation, Span)>,
    seen: HashSet<String>,
}

impl<'a> Gen<'a> {
    pub(super) fn push(&mut self, kind: ObligationKind, description: String, span: Span, path: &[Formula], goal: Formula, show: Vec<(String, String)>) {
        let key = format!("{:?}|{}|{}|{:?}", kind, goal, Formula::and(path.to_vec()), span);
        if !self.seen.insert(key) {
            return;
        }
        let mut hypotheses = self.exec.base.clone();
        hypotheses.extend(path.iter().cloned());
        self.obs.push((Obligation { kind, description, origin: (span.lo, span.hi), hypotheses, goal, show }, span));
    }

    fn span_of(&self, a: &Access) -> (Span, String) {
        match a.access {
            Some(id) => (self.exec.ir.accesses[id].span, self.exec.ir.accesses[id].what.clone()),
            None => (
                self.exec.k.span,
                match &a.target {
                    Target::Shared(s) => format!("{} of shared `{}`", if a.write { "write" } else { "read" }, self.exec.ir.shared[*s].name),
                    Target::Array(l, _) => format!("{} of register array `{}`", if a.write { "write" } else { "read" }, self.exec.ir.locals[*l].name),
                    Target::Global(b) => format!("access of `{}`", self.exec.ir.bufs[*b].name),
                    Target::Observations => "merge into the monitor's observation of the outputs".to_string(),
                },
            ),
        }
    }

    fn requires_satisfiable(&mut self) {
        let k = self.exec.k;
        let goal = Formula::and(self.exec.base.clone());
        let text = k.requires.iter().map(|c| c.text()).collect::<Vec<_>>().join(", ");
        self.obs.push((
            Obligation {
                kind: ObligationKind::RequiresSatisfiable,
                description: format!("some launch satisfies `requires {}`", if text.is_empty() { "true".into() } else { text }),
                origin: (k.span.lo, k.span.hi),
                hypotheses: vec![],
                goal,
                show: vec![],
            },
            k.span,
        ));
    }

    fn in_bounds(&mut self) {
        for a in self.exec.accesses.clone() {
            let (span, what) = self.span_of(&a);
            // Per axis for tensors of two or more axes (one axis is its flat index).
            if let (Target::Global(b), true) = (&a.target, a.axes.len() > 1) {
                // Per axis, then the flat index as the row-major image of the
                // axes (the row-major lemma: in-range axes give an in-range,
                // distinct flat index).
                let shape = self.exec.k.tensors[self.exec.ir.bufs[*b].tensor].shape.clone();
                let mut goal = Vec::new();
                let mut horner = Term::c(0);
                let w = a.width as i64;
                let last = a.axes.len().saturating_sub(1);
                for (j, (ax, d)) in a.axes.iter().zip(&shape).enumerate() {
                    let dt = exec::dim_term(self.exec.k, *d);
                    if j == last && w > 1 {
                        // A run along the last axis: all of it inside, and
                        // aligned: its start a multiple of the width, and
                        // so every row's (the last dim a multiple too).
                        goal.push(Term::c(0).le(ax.clone()));
                        goal.push(ax.clone().add(Term::c(w)).le(dt.clone()));
                        goal.push(ax.clone().rem(Term::c(w)).eq(Term::c(0)));
                        if a.axes.len() > 1 {
                            goal.push(dt.clone().rem(Term::c(w)).eq(Term::c(0)));
                        }
                    } else {
                        goal.push(ax.clone().within(Term::c(0), dt.clone()));
                    }
                    horner = if j == 0 { ax.clone() } else { horner.mul(dt).add(ax.clone()) };
                }
                if !a.axes.is_empty() {
                    goal.push(a.index.clone().eq(horner));
                    goal.extend(self.base_aligned(&a));
                    let run = if w > 1 { format!(" ({} elements along the last axis, {}-aligned)", w, w) } else { String::new() };
                    let desc = format!("{} at ({}) stays within every axis of `{}`{}", what, a.axes.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "), self.exec.ir.bufs[*b].name, run);
                    // A copy's axes are digits of the thread index (row,
                    // 16-byte chunk): folded as a slab's index is. Measured:
                    // the producer's copy of an m-major `x` ran past Z3's
                    // resource limit unfolded (the limit is not polled
                    // everywhere: it never returned).
                    let goal = self.folded(&a.path, goal);
                    self.push(ObligationKind::InBounds, desc, span, &a.path, goal, vec![]);
                    continue;
                }
            }
            let (len, len_text) = match &a.target {
                Target::Global(b) => (self.exec.index_len(*b), format!("the {} elements of `{}`", self.exec.k.tensors[self.exec.ir.bufs[*b].tensor].shape.iter().map(|d| self.exec.k.dim_name(*d)).collect::<Vec<_>>().join("*"), self.exec.ir.bufs[*b].name)),
                Target::Shared(s) => (Term::c(self.exec.ir.shared[*s].len as i64), format!("shared `{}[{}]`", self.exec.ir.shared[*s].name, self.exec.ir.shared[*s].len)),
                Target::Array(l, n) => (Term::c(*n as i64), format!("register array `{}[{}]`", self.exec.ir.locals[*l].name, n)),
                Target::Observations => {
                    let words = self.exec.ir.observation_blocks() * crate::kir::OBSERVE_SLOTS * crate::kir::OBSERVE_WORDS;
                    (Term::c(words), format!("the {} observation words the launch passes", words))
                }
            };
            let w = a.width as i64;
            let mut goal = vec![Term::c(0).le(a.index.clone()), a.index.clone().add(Term::c(w)).le(len)];
            if w > 1 {
                goal.push(a.index.clone().rem(Term::c(w)).eq(Term::c(0)));
            }
            goal.extend(self.base_aligned(&a));
            // A padded slab: the access stays within one row's data.
            let footprint = match &a.target {
                Target::Shared(s) => self.exec.ir.shared[*s].footprint,
                _ => None,
            };
            let data = footprint.map(|f| {
                goal.push(a.index.clone().rem(Term::c(f.stride as i64)).add(Term::c(w)).le(Term::c(f.width as i64)));
                format!(", in the data of its rows ({} of {} slots)", f.width, f.stride)
            });
            let data = data.unwrap_or_default();
            // A slab's index is a sum of digits (stage, row of core
            // matrices, row, column): fold its divisions and remainders
            // under the bounds the path states. Measured: the 256-row
            // ring's footprint queries took 150-180 s each unfolded.
            let goal = match a.target {
                Target::Shared(_) => self.folded(&a.path, goal),
                _ => Formula::and(goal),
            };
            let desc = if w > 1 {
                format!("{} of {} elements at {} stays within {}{} (and is {}-aligned)", what, w, a.index, len_text, data, w)
            } else {
                format!("{} at {} stays within {}{}", what, a.index, len_text, data)
            };
            self.push(ObligationKind::InBounds, desc, span, &a.path, goal, vec![("__index".into(), "index".into())]);
        }
    }

    /// A run of global memory moved as words (one of `width` elements, or
    /// 16-byte ones) needs its buffer's base aligned to the word (the
    /// run's index, a multiple of the width, does the rest): where the
    /// kernel tested it at run time (`Cond::Aligned`), to the word's bytes
    /// or more. Without it a misaligned launch would fault, not take the
    /// element path.
    fn base_aligned(&self, a: &Access) -> Option<Formula> {
        let Target::Global(b) = a.target else { return None };
        if a.width <= 1 {
            return None;
        }
        let buf = &self.exec.ir.bufs[b];
        // Wider runs move as 16-byte words (the prelude's `tk_vec`).
        let need = (a.width * buf.dtype.size_bytes()).min(16);
        let facts = ALIGNMENTS.iter().filter(|bytes| **bytes >= need).map(|bytes| exec::aligned(&buf.name, *bytes)).collect();
        Some(Formula::or(facts))
    }

    /// The conjunction of `goal` with its divisions and remainders by
    /// constants folded under the bounds that the hypotheses and `path`
    /// state (equivalent under them: see `divmod`).
    fn folded(&self, path: &[Formula], goal: Vec<Formula>) -> Formula {
        let mut hyps = self.exec.base.clone();
        hyps.extend(path.iter().cloned());
        let stated = tokitai_contracts::divmod::stated_bounds(&hyps);
        tokitai_contracts::divmod::fold(&Formula::and(goal), &|n: &str| stated.get(n).copied().unwrap_or((None, None)))
    }

    fn overflow(&mut self, ty: Dtype) {
        let (lo, hi) = exec::int_range(ty);
        let k = self.exec.k;
        for op in self.exec.int_ops.clone() {
            if let Some((x, y)) = &op.division {
                self.push(
                    ObligationKind::DivisionDefined,
                    format!("{} divides a non-negative value by a positive one", op.term),
                    k.span,
                    &op.path,
                    Formula::and(vec![Term::c(0).le(x.clone()), Term::c(1).le(y.clone())]),
                    vec![],
                );
            } else {
                if let Term::Const(_) = op.term {
                    continue;
                }
                self.push(
                    ObligationKind::NoOverflow,
                    format!("{} {} fits in {}", op.origin, op.term, ty),
                    k.span,
                    &op.path,
                    op.term.clone().within(Term::c(lo), Term::c(hi).add(Term::c(1))),
                    vec![],
                );
            }
        }
    }

    /// A launch-wide condition (no thread's or block's own variable) on
    /// the path to one access whose negation is on the path to the other:
    /// the two never run in one launch.
    fn exclusive(a: &[Formula], b: &[Formula]) -> Option<Formula> {
        a.iter()
            .find(|f| {
                let mut vars = Vec::new();
                f.vars(&mut vars);
                !vars.iter().any(|n| Gen::is_private(n)) && b.contains(&(*f).clone().not())
            })
            .cloned()
    }

    /// Variables private to one execution (renamed in the second copy).
    fn is_private(name: &str) -> bool {
        name == TID || BID.contains(&name) || name.contains('#') || name.starts_with("load.")
    }

    fn second(f: &Formula) -> Formula {
        f.rename(&|n| if Gen::is_private(n) { format!("{}'", n) } else { n.to_string() })
    }

    fn second_t(t: &Term) -> Term {
        t.rename(&|n| if Gen::is_private(n) { format!("{}'", n) } else { n.to_string() })
    }

    /// The loop-form lemmas: a value of a thread-distributing loop variable
    /// belongs to one thread (`k = a + bid*B + tid + j*grid*B` determines
    /// bid and tid, and so on).
    fn lemmas(&self, loops: &[usize]) -> Vec<Formula> {
        let mut out = Vec::new();
        for l in loops {
            let info = &self.exec.loops[*l];
            let k = Term::var(&info.var);
            let k2 = Gen::second_t(&k);
            let same = |n: &str| Term::var(n).eq(Term::var(format!("{}'", n)));
            let then = match info.form {
                LoopForm::GridStride => Formula::and(vec![same(TID), same(BID[0])]),
                LoopForm::BlockStride => same(BID[0]),
                LoopForm::ThreadStride => same(TID),
                _ => continue,
            };
            out.push(k.eq(k2).implies(then));
        }
        out
    }

    fn races(&mut self) {
        let writes: Vec<Access> = self.exec.accesses.iter().filter(|a| a.write && matches!(a.target, Target::Global(_))).cloned().collect();
        for (i, a) in writes.iter().enumerate() {
            for b in &writes[i..] {
                if a.target != b.target {
                    continue;
                }
                let same_site = std::ptr::eq(a, b);
                let mut path = a.path.clone();
                path.extend(b.path.iter().map(Gen::second));
                path.extend(self.exec.base.iter().map(Gen::second));
                let common: Vec<usize> = a.loops.iter().filter(|l| b.loops.contains(l)).copied().collect();
                path.extend(self.lemmas(&common));
                if same_site {
                    let mut params = vec![TID.to_string()];
                    params.extend(BID.iter().map(|b| b.to_string()));
                    params.extend(a.loops.iter().map(|l| self.exec.loops[*l].var.clone()));
                    path.push(Formula::or(params.iter().map(|p| Term::var(p.clone()).eq(Term::var(format!("{}'", p))).not()).collect()));
                }
                // Two arms of one launch-wide decision (an alignment test,
                // the vector path) never run in one launch: the pair of
                // conditions alone is the hypothesis, which the solver
                // refutes at once (with every other hypothesis beside it,
                // measured: 7-95 s for the paired and the single store of
                // linear_fwd_ws, which would not always finish).
                if let Some(f) = Gen::exclusive(&a.path, &b.path) {
                    path = vec![f.clone(), f.not()];
                }
                let last = a.axes.len().saturating_sub(1);
                let goal = if !a.axes.is_empty() && a.axes.len() == b.axes.len() {
                    // Distinct multi-indices have distinct flat indices
                    // (row-major lemma); a run along the last axis covers
                    // `width` of it, so there the runs must not overlap.
                    Formula::or(
                        a.axes
                            .iter()
                            .zip(&b.axes)
                            .enumerate()
                            .map(|(j, (x, y))| {
                                let y = Gen::second_t(y);
                                if j == last && (a.width > 1 || b.width > 1) {
                                    Formula::or(vec![x.clone().add(Term::c(a.width as i64)).le(y.clone()), y.add(Term::c(b.width as i64)).le(x.clone())])
                                } else {
                                    x.clone().eq(y).not()
                                }
                            })
                            .collect(),
                    )
                } else {
                    let (ia, ib) = (a.index.clone(), Gen::second_t(&b.index));
                    Formula::or(vec![ia.clone().add(Term::c(a.width as i64)).le(ib.clone()), ib.add(Term::c(b.width as i64)).le(ia)])
                };
                let (span, what) = self.span_of(a);
                let other = self.span_of(b).1;
                let desc = if same_site {
                    format!("no two executions of the {} write the same element", what)
                } else {
                    format!("the {} and the {} never write the same element", what, other)
                };
                self.push(ObligationKind::RaceFree, desc, span, &path, goal, vec![]);
            }
        }
    }

    /// Two accesses are separated by a barrier on every path between them
    /// (conservatively: top-level barriers of their common statement list).
    fn separated(&self, a: &Access, b: &Access) -> (bool, bool) {
        let d = a.pos.iter().zip(&b.pos).take_while(|(x, y)| x == y).count();
        if d == a.pos.len() || d == b.pos.len() {
            return (false, false);
        }
        let (list, pa) = a.pos[d];
        let pb = b.pos[d].1;
        let (lo, hi) = (pa.min(pb), pa.max(pb));
        let barriers = &self.exec.lists[list].barriers;
        let forward = barriers.iter().any(|p| *p > lo && *p < hi);
        let in_loop = self.exec.lists[list].in_loop;
        let wrap = !in_loop || barriers.iter().any(|p| *p < lo || *p > hi);
        (forward, wrap)
    }

    /// Every access of a ring of slabs happens where the ring says
    /// (`kir::Ring`): in loop iteration `k` reads inside the stage of slab
    /// `k`, writes inside the stage of slab `k + step`; before the loop
    /// writes inside stage 0; no read outside the loop.
    fn descriptors(&mut self) {
        let span = self.exec.k.span;
        for exec::Descriptor { base, path, array: name, loops, align } in self.exec.descriptors.clone() {
            let what = format!("the wgmma descriptor of `{}` at {}", name, base);
            // 16-byte aligned (the descriptor drops the address's low 4
            // bits): a multiple of 8 two-byte elements; a swizzled
            // operand's rows start 1024-byte aligned (the array does), so
            // the unit's swizzle matches the copy's.
            let aligned = base.clone().rem(Term::c(align)).eq(Term::c(0));
            self.push(ObligationKind::InBounds, format!("{} is {}-byte aligned", what, align * 2), span, &path, aligned, vec![]);
            // One value for the four warps of a warpgroup.
            let mut both = path.clone();
            both.extend(path.iter().map(Gen::second));
            both.extend(self.exec.base.iter().map(Gen::second));
            both.extend(BID.iter().map(|b| Term::var(*b).eq(Term::var(format!("{}'", b)))));
            both.push(Term::var(TID).div(Term::c(128)).eq(Term::var(format!("{}'", TID)).div(Term::c(128))));
            // The same instance of the instruction: every enclosing loop
            // in the same iteration.
            for l in &loops {
                both.push(Term::var(l).eq(Gen::second_t(&Term::var(l))));
            }
            let same = base.clone().eq(Gen::second_t(&base));
            self.push(ObligationKind::SharedRaceFree, format!("{} is the same for every thread of the warpgroup", what), span, &both, same, vec![]);
        }
    }

    /// A bulk copy reads through a tensor map that the launch can build:
    /// the tensor's rows whole 16-byte runs of a 16-byte aligned buffer
    /// (`cuTensorMapEncodeTiled`'s requirements; the runtime builds the
    /// map exactly then, and passes zeros otherwise). Asked under the
    /// copy's path: the kernel must take the copy only where its own test
    /// of the same facts holds.
    fn bulk_maps(&mut self) {
        let span = self.exec.k.span;
        for (path, map, cols) in self.exec.bulk_maps.clone() {
            let m = &self.exec.ir.tensor_maps[map];
            let name = self.exec.ir.bufs[m.buf].name.clone();
            let bytes = self.exec.ir.bufs[m.buf].dtype.size_bytes() as i64;
            let goal = Formula::and(vec![exec::aligned(&name, 16), cols.clone().rem(Term::c(16 / bytes)).eq(Term::c(0))]);
            self.push(ObligationKind::InBounds, format!("the bulk copy through `{}` runs where its tensor map exists: `{}` 16-byte aligned, its rows ({}) whole 16-byte runs", m.name, name, cols), span, &path, goal, vec![]);
        }
    }

    /// What the ring obligation asks of an access of a ring's array (see
    /// `rings`), with its wording; `None` for other arrays.
    fn ring_goal(&self, a: &Access) -> Option<(Formula, &'static str)> {
        let Target::Shared(s) = a.target else { return None };
        let ring = self.exec.ir.shared[s].ring?;
        // The access's first and last element both in stage `stage`.
        let last = a.index.clone().add(Term::c(a.width as i64 - 1));
        let within = |stage: Term| Formula::and(vec![a.index.clone().div(Term::c(ring.stage_len)).eq(stage.clone()), last.clone().div(Term::c(ring.stage_len)).eq(stage)]);
        Some(match self.ring_stage(a) {
            Some((stage, when)) => (within(stage), when),
            None if a.write => (Formula::False, "is outside the loop that fills the ring: nothing there may write it"),
            None => (Formula::False, "is outside the loop: nothing there may read the ring"),
        })
    }

    /// The stage of its ring an access must lie in (see `ring_goal`),
    /// with the rule's wording; `None` for a read outside the ring loop
    /// (or an access of another array).
    fn ring_stage(&self, a: &Access) -> Option<(Term, &'static str)> {
        let Target::Shared(s) = a.target else { return None };
        let ring = self.exec.ir.shared[s].ring?;
        let name = self.exec.loop_var_name(ring.of);
        let inside = a.loops.iter().any(|l| self.exec.loops[*l].var == name);
        let stage_of = |slab: Term| slab.div(Term::c(ring.step)).rem(Term::c(ring.stages as i64));
        let k = Term::var(&name);
        let prologue = ring.prologue.map(|p| self.exec.loop_var_name(p)).filter(|p| a.loops.iter().any(|l| self.exec.loops[*l].var == *p));
        if let Some(producer) = ring.filled_by {
            // Only the producer's loop writes, each iteration its own
            // slab's stage; only the consumers' loop reads.
            let filler = self.exec.loop_var_name(producer);
            let in_filler = a.loops.iter().any(|l| self.exec.loops[*l].var == filler);
            return match (a.write, inside, in_filler) {
                (false, true, _) => Some((stage_of(k), "lies in the stage of the iteration's slab")),
                (true, false, true) => Some((stage_of(Term::var(filler)), "in the producer's loop lies in the stage of its iteration's slab")),
                _ => None,
            };
        }
        match (inside, a.write) {
            (true, false) => Some((stage_of(k), "lies in the stage of the iteration's slab")),
            (true, true) if ring.ahead == 1 => Some((stage_of(k.add(Term::c(ring.step))), "lies in the stage of the next slab")),
            (true, true) => Some((stage_of(k.add(Term::c(ring.step * ring.ahead as i64))), "lies in the stage of the slab the ring runs ahead to")),
            (false, true) => match prologue {
                Some(p) => Some((stage_of(Term::var(p)), "in the prologue lies in the stage of the prologue's slab")),
                None => Some((Term::c(0), "before the loop lies in stage 0")),
            },
            (false, false) => None,
        }
    }

    fn rings(&mut self) {
        for a in self.exec.accesses.clone() {
            let Some((goal, when)) = self.ring_goal(&a) else { continue };
            let (span, what) = self.span_of(&a);
            let stages = match a.target {
                Target::Shared(s) => self.exec.ir.shared[s].ring.map_or(0, |r| r.stages),
                _ => 0,
            };
            let desc = format!("ring of {} slabs: the {} at {} {}", stages, what, a.index, when);
            self.push(ObligationKind::SharedRaceFree, desc, span, &a.path, goal, vec![]);
        }
    }

    fn shared_races(&mut self) {
        let acc: Vec<Access> = self.exec.accesses.iter().filter(|a| matches!(a.target, Target::Shared(_))).cloned().collect();
        // Each access's ring stage (see below), built once, not per pair.
        let stages: Vec<Option<Term>> = acc.iter().map(|a| self.ring_stage(a).map(|(t, _)| t)).collect();
        // Each ring's copy timing, read off the IR once.
        let timings: Vec<Option<CopyTiming>> = self.exec.ir.shared.iter().map(|s| s.ring.map(|r| CopyTiming::of(self.exec.ir, &r))).collect();
        // A producer ring's, from its mbarriers.
        let handshakes: Vec<Option<Handshake>> = self.exec.ir.shared.iter().map(|s| s.ring.and_then(|r| Handshake::of(&self.exec, &r))).collect();
        let windows = Windows { timings, handshakes };
        for (i, a) in acc.iter().enumerate() {
            for (j, b) in acc.iter().enumerate().skip(i) {
                if a.target != b.target || !(a.write || b.write) {
                    continue;
                }
                let copies = a.in_flight || b.in_flight;
                let (forward, wrap) = self.separated(a, b);
                if forward && wrap && !copies {
                    continue;
                }
                let mut path = a.path.clone();
                path.extend(b.path.iter().map(Gen::second));
                path.extend(self.exec.base.iter().map(Gen::second));
                path.extend(BID.iter().map(|b| Term::var(*b).eq(Term::var(format!("{}'", b)))));
                // A thread-distributing loop's value names its thread.
                let common: Vec<usize> = a.loops.iter().filter(|l| b.loops.contains(l)).copied().collect();
                path.extend(self.lemmas(&common));
                if copies {
                    // A copy in flight meets any access in its window, of
                    // any thread, its own included (only the same
                    // execution of one copy is not a pair).
                    let window = Formula::or(vec![if a.in_flight { self.copy_window(&windows, a, false, b, true) } else { Formula::False }, if b.in_flight { self.copy_window(&windows, b, true, a, false) } else { Formula::False }]);
                    if window == Formula::False {
                        continue;
                    }
                    path.push(window);
                    if i == j {
                        let mut params = vec![TID.to_string()];
                        params.extend(a.loops.iter().map(|l| self.exec.loops[*l].var.clone()));
                        path.push(Formula::or(params.iter().map(|p| Term::var(p.clone()).eq(Term::var(format!("{}'", p))).not()).collect()));
                    }
                } else {
                    path.push(Term::var(TID).eq(Term::var(format!("{}'", TID))).not());
                }
                // Threads between the same two barriers are in the same
                // iteration of every enclosing loop that holds a barrier.
                if !forward && !copies {
                    for l in a.loops.iter().filter(|l| b.loops.contains(l)) {
                        if self.exec.loops[*l].has_barrier {
                            let v = Term::var(&self.exec.loops[*l].var);
                            path.push(v.clone().eq(Gen::second_t(&v)));
                        }
                    }
                }
                // On a ring, the ring obligation (discharged on its own,
                // under the same path) puts each access inside its stage:
                // two accesses in different stages cannot meet, which the
                // solver sees from the stages' slabs alone, without the
                // slab layouts' divisions; in one stage their indices
                // must differ.
                let apart = a.index.clone().eq(Gen::second_t(&b.index)).not();
                let goal = match (&stages[i], &stages[j]) {
                    (Some(sa), Some(sb)) => Formula::or(vec![sa.clone().eq(Gen::second_t(sb)).not(), apart]),
                    _ => apart,
                };
                // Two slab indices, digits of two threads' indices: folded
                // as an in-bounds goal is (measured: the warpgroup forms'
                // pairs took 25-65 s of solver time per kernel unfolded).
                let goal = self.folded(&path, vec![goal]);
                let (span, what) = self.span_of(a);
                let other = self.span_of(b).1;
                self.push(ObligationKind::SharedRaceFree, format!("two threads of a block never meet at one element: {} and {} between the same barriers", what, other), span, &path, goal, vec![]);
            }
        }
    }

    /// Where an access lies with respect to `ring`'s loops: in the ring
    /// loop (its variable and the top-level body position it lies in), in
    /// the prologue loop (its variable), or elsewhere.
    fn ring_place(&self, a: &Access, ring: &crate::kir::Ring, second: bool) -> RingPlace {
        let name = |t: String| if second { Gen::second_t(&Term::var(t)) } else { Term::var(t) };
        for l in &a.loops {
            let info = &self.exec.loops[*l];
            if info.var == self.exec.loop_var_name(ring.of) {
                if let Some((_, at)) = a.pos.iter().find(|(list, _)| *list == info.body_list) {
                    return RingPlace::Loop(name(info.var.clone()), *at);
                }
            }
            if ring.prologue.is_some_and(|p| info.var == self.exec.loop_var_name(p)) {
                return RingPlace::Prologue(name(info.var.clone()));
            }
            if ring.filled_by.is_some_and(|p| info.var == self.exec.loop_var_name(p)) {
                if let Some((_, at)) = a.pos.iter().find(|(list, _)| *list == info.body_list) {
                    return RingPlace::Producer(name(info.var.clone()), *at);
                }
            }
        }
        RingPlace::Other
    }

    /// When access `x` may meet the in-flight write of copy `w` (`*_second`:
    /// whether each is the pair's renamed copy): from after the barrier
    /// before the copy's issue to the barrier that publishes it
    /// (`protocol::CopyTiming`); anywhere, where the timing is unknown.
    fn copy_window(&self, windows: &Windows, w: &Access, w_second: bool, x: &Access, x_second: bool) -> Formula {
        let Target::Shared(s) = w.target else { return Formula::True };
        let Some(ring) = self.exec.ir.shared[s].ring else { return Formula::True };
        let step = ring.step;
        if let Some(h) = &windows.handshakes[s] {
            // A producer ring: ordered by its mbarriers (`verify::mbarrier`).
            let slab = |k: Term| k.div(Term::c(step));
            return match (self.ring_place(w, &ring, w_second), self.ring_place(x, &ring, x_second)) {
                (RingPlace::Producer(kw, pw), RingPlace::Loop(kx, px)) => h.copy_read_window((slab(kw), pw), (slab(kx), px), ring.stages),
                (RingPlace::Producer(k1, p1), RingPlace::Producer(k2, p2)) => h.copy_copy_window((slab(k1), p1), (slab(k2), p2), ring.stages),
                _ => Formula::True,
            };
        }
        let Some(timing) = &windows.timings[s] else { return Formula::True };
        // (iteration k, position p) strictly before (k2, p2).
        let before = |k: Term, p: usize, k2: Term, p2: usize| if p < p2 { k.le(k2) } else { k.lt(k2) };
        match (self.ring_place(w, &ring, w_second), self.ring_place(x, &ring, x_second)) {
            (RingPlace::Loop(kw, pw), x_place) => {
                // Issued after the last barrier before it in its iteration
                // (or the previous iteration's last one).
                let last_before = timing.barriers.iter().rev().find(|b| **b < pw).copied();
                match x_place {
                    RingPlace::Loop(kx, px) => {
                        let lower = match (last_before, timing.barriers.last()) {
                            (Some(b0), _) => before(kw.clone(), b0, kx.clone(), px),
                            (None, Some(&b_last)) => before(kw.clone().sub(Term::c(step)), b_last, kx.clone(), px),
                            (None, None) => Formula::True,
                        };
                        let upper = match timing.loop_copy(pw) {
                            Some(p) => before(kx, px, kw.add(Term::c(p.iterations * step)), p.at),
                            None => Formula::True,
                        };
                        Formula::and(vec![lower, upper])
                    }
                    // The prologue ran before the barrier that precedes
                    // the copy's issue.
                    RingPlace::Prologue(_) if last_before.is_some() => Formula::False,
                    _ => Formula::True,
                }
            }
            (RingPlace::Prologue(pw), RingPlace::Loop(kx, px)) => match timing.prologue_copy() {
                // Published in iteration max(0, slab + shift).
                Some(p) => Formula::or(vec![before(kx.clone(), px, pw.add(Term::c(p.iterations * step)), p.at), before(kx, px, Term::c(0), p.at)]),
                None => Formula::True,
            },
            _ => Formula::True,
        }
    }

    /// The warpgroup unit's protocol (`verify::protocol`): structural,
    /// decided from the IR with no solver query.
    fn protocol(&self) -> Vec<VerifiedObligation> {
        let k = self.exec.k;
        let found = super::protocol::check(self.exec.ir);
        let one = |description: String, holds: bool| {
            let ob = Obligation { kind: ObligationKind::SharedRaceFree, description, origin: (k.span.lo, k.span.hi), hypotheses: vec![], goal: Formula::True, show: vec![] };
            let outcome = if holds { Outcome::Proved { seconds: 0.0 } } else { Outcome::Refuted { seconds: 0.0, model: BTreeMap::new() } };
            VerifiedObligation { obligation: ob, outcome, span: k.span, cached: false }
        };
        if !found.uses_unit {
            return Vec::new();
        }
        let mut out = if found.violations.is_empty() {
            vec![one("the warpgroup unit's protocol: every wgmma is waited for before the next barrier, mbarrier arrival and the kernel's end, its accumulator untouched meanwhile and fenced (wgmma.fence) after ordinary accesses, every shared store it reads proxy-fenced before the barrier that publishes it or the wgmma that reads it".into(), true)]
        } else {
            found.violations.into_iter().map(|v| one(format!("the warpgroup unit's protocol: {}", v), false)).collect()
        };
        if !self.exec.ir.mbarriers.is_empty() {
            let findings = mbarrier::findings(&self.exec);
            if findings.is_empty() {
                out.push(one("mbarrier protocol: each barrier initialised once by one thread before a block barrier, arrived at by exactly its count of threads once an iteration, bulk copies armed with exactly their bytes before they are issued, the producer's and the consumers' loops over the same slabs, the register allowances within what the block enters with".into(), true));
            }
            out.extend(findings.into_iter().map(|v| one(format!("mbarrier protocol: {}", v), false)));
        }
        out
    }

    /// The mbarrier protocol's obligations for the solver
    /// (`verify::mbarrier::goals`).
    fn mbarriers(&mut self) {
        let span = self.exec.k.span;
        for g in mbarrier::goals(&self.exec) {
            self.push(g.kind, g.description, span, &g.path, g.goal, vec![]);
        }
    }

    fn barriers(&mut self) -> Vec<VerifiedObligation> {
        let k = self.exec.k;
        // A collective of a group of threads under thread-dependent
        // conditions: each condition takes one value across every group
        // (asked of the solver; the structural answer below would refute
        // it).
        for b in self.exec.barriers.clone() {
            let Some((size, conds, path)) = b.group else { continue };
            let tid2 = Term::var(format!("{}'", TID));
            let mut hyps = path.clone();
            hyps.push(tid2.clone().within(Term::c(0), Term::c(self.exec.ir.block as i64)));
            hyps.push(Term::var(TID).div(Term::c(size as i64)).eq(tid2.div(Term::c(size as i64))));
            let other = |f: &Formula| f.rename(&|n| if n == TID { format!("{}'", TID) } else { n.to_string() });
            let goal = Formula::and(conds.iter().map(other).collect());
            let desc = format!("every thread of each group of {} consecutive threads reaches this {} together (the conditions around it take one value across the group)", size, b.what);
            self.push(ObligationKind::BarrierUniform, desc, k.span, &hyps, goal, vec![]);
        }
        self.exec
            .barriers
            .iter()
            .filter(|b| b.uniform || b.group.is_none())
            .map(|b| {
                let ob = Obligation {
                    kind: ObligationKind::BarrierUniform,
                    description: if b.uniform {
                        format!("every thread of the block reaches this {} (its conditions and loop bounds are thread-uniform)", b.what)
                    } else {
                        format!("every thread of the block reaches this {}, but {} depends on the thread", b.what, b.why_not)
                    },
                    origin: (k.span.lo, k.span.hi),
                    hypotheses: vec![],
                    goal: Formula::True,
                    show: vec![],
                };
                // Structural: decided from the IR, no solver query.
                let outcome = if b.uniform { Outcome::Proved { seconds: 0.0 } } else { Outcome::Refuted { seconds: 0.0, model: BTreeMap::new() } };
                VerifiedObligation { obligation: ob, outcome, span: k.span, cached: false }
            })
            .collect()
    }
}

impl<'a> Gen<'a> {
    /// Each coverage witness: for every element, the named execution exists
    /// (its path holds with the witness values) and its access covers the
    /// element; and the witness cases cover every element.
    fn coverage(&mut self) {
        let ir = self.exec.ir;
        for cover in ir.coverage.clone() {
            let tensor = ir.bufs[cover.buf].tensor;
            let shape = self.exec.k.tensors[tensor].shape.clone();
            // The element: a flat index, or one variable per axis.
            let per_axis = cover.elem.len() > 1 && cover.elem.len() == shape.len();
            let elems: Vec<(usize, Term)> = cover.elem.iter().enumerate().map(|(j, v)| (*v, Term::var(if per_axis { format!("elem.{}", j) } else { "elem".to_string() }))).collect();
            let range = if per_axis {
                Formula::and(elems.iter().zip(&shape).map(|((_, e), d)| e.clone().within(Term::c(0), exec::dim_term(self.exec.k, *d))).collect())
            } else {
                Term::var("elem").within(Term::c(0), self.exec.index_len(cover.buf))
            };
            let mut whens = Vec::new();
            let span = self.exec.k.tensors[tensor].span;
            for case in &cover.cases {
                let when = self.exec.witness_cond(&case.when, &elems);
                whens.push(when.clone());
                let Some(acc) = self.exec.accesses.iter().find(|a| a.access == Some(case.access)).cloned() else {
                    self.push(ObligationKind::Coverage, format!("{}: the witness names an access that does not exist", cover.what), span, &[], Formula::False, vec![]);
                    continue;
                };
                let mut map: HashMap<String, Term> = HashMap::new();
                for (w, x) in &case.assign {
                    let t = self.exec.witness_term(x, &elems);
                    let name = match w {
                        Witness::Var(v) => self.exec.loop_var_name(*v),
                        Witness::Tid => TID.to_string(),
                        Witness::BlockIdx(a) => BID[*a as usize].to_string(),
                    };
                    map.insert(name, t);
                }
                let sub = |f: &Formula| f.subst(&|n| map.get(n).cloned());
                let mut goal: Vec<Formula> = acc.cover_path.iter().map(sub).collect();
                // The witness's launch: a launch assumption that names no
                // variable the witness assigns is the hypothesis itself
                // (`push` assumes every one), so only the others are asked.
                // (Restated, `requires M * K <= 10^9` put a product the
                // solver must match against itself into the goal: a
                // coverage query of linear_bwd_w's matrix-unit variant ran
                // past its resource limit.)
                let assigns = |f: &Formula| {
                    let mut v = Vec::new();
                    f.vars(&mut v);
                    v.iter().any(|n| map.contains_key(n.as_str()))
                };
                goal.extend(self.exec.base.iter().filter(|f| assigns(f)).map(sub));
                if per_axis && acc.axes.len() == elems.len() {
                    let last = elems.len() - 1;
                    for (j, (a, (_, e))) in acc.axes.iter().zip(&elems).enumerate() {
                        let a = a.subst(&|n| map.get(n).cloned());
                        if j == last && acc.width > 1 {
                            // A run along the last axis covers `width` of it.
                            goal.push(a.clone().le(e.clone()));
                            goal.push(e.clone().lt(a.add(Term::c(acc.width as i64))));
                        } else {
                            goal.push(a.eq(e.clone()));
                        }
                    }
                } else {
                    // The flat element: the row-major image of the axes.
                    let e = if per_axis {
                        elems.iter().zip(&shape).skip(1).fold(elems[0].1.clone(), |h, ((_, x), d)| h.mul(exec::dim_term(self.exec.k, *d)).add(x.clone()))
                    } else {
                        Term::var("elem")
                    };
                    let idx = acc.index.subst(&|n| map.get(n).cloned());
                    goal.push(idx.clone().le(e.clone()));
                    goal.push(e.lt(idx.add(Term::c(acc.width as i64))));
                }
                let what = self.span_of(&acc).1;
                // Facts about loaded index values are data, not choices.
                let mut hyps = vec![range.clone(), when];
                hyps.extend(acc.path.iter().filter(|f| {
                    let mut v = Vec::new();
                    f.vars(&mut v);
                    v.iter().any(|n| n.starts_with("load."))
                }).cloned());
                // The witness inverts a thread layout: fold its divisions
                // first (the element is non-negative: `range` says so).
                let elem_bounds = |n: &str| if n == "elem" || n.starts_with("elem.") { (Some(0), None) } else { (None, None) };
                let goal = tokitai_contracts::divmod::fold(&Formula::and(goal), &elem_bounds);
                self.push(ObligationKind::Coverage, format!("{}: element e is reached by the {} the schedule assigns to it", cover.what, what), span, &hyps, goal, vec![("elem".into(), "element".into())]);
            }
            self.push(ObligationKind::Coverage, format!("{}: the witness cases cover every element", cover.what), span, &[range], Formula::or(whens), vec![("elem".into(), "element".into())]);
        }
    }

    /// Stored values have the dtype of what they are stored into.
    fn dtypes(&self) -> Vec<VerifiedObligation> {
        let ir = self.exec.ir;
        let mut out = Vec::new();
        for a in &self.exec.accesses {
            if !a.write {
                continue;
            }
            let (have, want, name) = match (&a.target, &a.value) {
                (Target::Global(b), Some(v)) => (v.ty, ir.bufs[*b].dtype, ir.bufs[*b].name.clone()),
                (Target::Shared(sh), Some(v)) => (v.ty, ir.shared[*sh].ty, ir.shared[*sh].name.clone()),
                _ => continue,
            };
            let (span, what) = self.span_of(a);
            let ob = Obligation {
                kind: ObligationKind::Dtype,
                description: format!("the {} stores a {} value into {} `{}`", what, have, want, name),
                origin: (span.lo, span.hi),
                hypotheses: vec![],
                goal: Formula::True,
                show: vec![],
            };
            let outcome = if have == want { Outcome::Proved { seconds: 0.0 } } else { Outcome::Refuted { seconds: 0.0, model: BTreeMap::new() } };
            out.push(VerifiedObligation { obligation: ob, outcome, span, cached: false });
        }
        out
    }

    /// Every value a stored expression can take, with the path it is taken
    /// under (None when a value cannot be followed).
    fn value_terms(&mut self, v: &VExpr, path: &[Formula], seen: &mut HashSet<usize>) -> Option<Vec<(Term, Vec<Formula>)>> {
        Some(match &v.kind {
            VKind::Const(crate::tir::Const::Int(c)) => vec![(Term::c(*c), path.to_vec())],
            VKind::Int(i) => vec![(self.exec.iterm_public(i), path.to_vec())],
            VKind::Cast(a) if a.ty.is_int() => self.value_terms(a, path, seen)?,
            VKind::ShflXor { value, .. } => self.value_terms(value, path, seen)?,
            VKind::Select(_, a, b) => {
                let mut x = self.value_terms(a, path, seen)?;
                x.extend(self.value_terms(b, path, seen)?);
                x
            }
            VKind::Local(l) => {
                if !seen.insert(*l) {
                    return Some(vec![]);
                }
                let mut out = Vec::new();
                for asg in self.exec.assignments.clone().iter().filter(|x| x.local == *l) {
                    out.extend(self.value_terms(&asg.value, &asg.path, seen)?);
                }
                out
            }
            VKind::SharedGet { arr, .. } => {
                let mut out = Vec::new();
                for a in self.exec.accesses.clone().iter().filter(|a| a.write && a.target == Target::Shared(*arr)) {
                    out.extend(self.value_terms(a.value.as_ref()?, &a.path, seen)?);
                }
                out
            }
            _ => return None,
        })
    }

    fn ensures(&mut self) {
        let k = self.exec.k;
        for c in &k.ensures {
            let Contract::Range { tensor, range } = c else {
                // Predicates over dims alone follow from `requires` or not at all.
                if let Contract::Pred { expr, text, span } = c {
                    let goal = super::exec::contract_formula(k, expr).unwrap_or(Formula::False);
                    self.push(ObligationKind::Ensures, format!("ensures {}", text), *span, &[], goal, vec![]);
                }
                continue;
            };
            // Float outputs: the range of computed values (`float_ensures`).
            if k.tensors[*tensor].role == TensorRole::Input || k.tensors[*tensor].dtype.is_float() {
                continue;
            }
            let (Some(lo), Some(hi)) = (super::exec::texpr_term(k, &range.lo), super::exec::texpr_term(k, &range.hi)) else {
                self.push(ObligationKind::Ensures, format!("ensures {}: bounds must be integer terms over dims", range.text), range.span, &[], Formula::False, vec![]);
                continue;
            };
            let writes: Vec<Access> = self.exec.accesses.iter().filter(|a| a.write && matches!(a.target, Target::Global(b) if self.exec.ir.bufs[b].tensor == *tensor)).cloned().collect();
            for w in writes {
                let Some(v) = w.value.clone() else { continue };
                match self.value_terms(&v, &w.path, &mut HashSet::new()) {
                    Some(cases) => {
                        for (t, path) in cases {
                            let lo_f = if range.lo_closed { lo.clone().le(t.clone()) } else { lo.clone().lt(t.clone()) };
                            let hi_f = if range.hi_closed { t.clone().le(hi.clone()) } else { t.clone().lt(hi.clone()) };
                            self.push(ObligationKind::Ensures, format!("ensures {}: a stored value {} is in range", range.text, t), range.span, &path, Formula::and(vec![lo_f, hi_f]), vec![]);
                        }
                    }
                    None => self.push(ObligationKind::Ensures, format!("ensures {}: the stored value cannot be bounded", range.text), range.span, &w.path, Formula::False, vec![]),
                }
            }
        }
    }
}

/// Discharge independent queries on every core (each rayon thread has its
/// own Z3 context); the order of the result is the order of `obs`. Decided
/// outcomes are kept in the persistent proof cache under the kernel's
/// printed IR and the query (see `cache.rs`).
/// What bounds a copy's window on each ring, read off the IR once: a
/// ring's commits and waits, or a producer ring's mbarriers.
struct Windows {
    timings: Vec<Option<CopyTiming>>,
    handshakes: Vec<Option<Handshake>>,
}

/// See [`Gen::ring_place`].
enum RingPlace {
    Loop(Term, usize),
    Prologue(Term),
    /// In the loop of the producer that fills the ring.
    Producer(Term, usize),
    Other,
}

fn discharge_all(ir: &KernelIr, obs: Vec<(Obligation, Span)>, cfg: &Config, progress: &crate::progress::Task) -> Vec<VerifiedObligation> {
    discharge_scoped(&crate::cache::fingerprint(ir), &ir.name, obs, cfg, progress)
}

/// Discharge obligations in parallel, each outcome kept in the proof
/// cache under `scope` (what the obligations depend on beyond their own
/// text: the kernel's printed IR, or nothing for a lemma that holds for
/// every kernel) and the query. `name` labels the timings.
pub(super) fn discharge_scoped(scope: &str, name: &str, obs: Vec<(Obligation, Span)>, cfg: &Config, progress: &crate::progress::Task) -> Vec<VerifiedObligation> {
    use rayon::prelude::*;
    progress.add(obs.len());
    obs.into_par_iter()
        .map(|(obligation, span)| {
            let key = || {
                crate::cache::Key::builder("obligation")
                    .part(scope)
                    .part(obligation.kind.name())
                    .part(&obligation.description)
                    .part(format!("{:?}|{:?}|{}", obligation.hypotheses, obligation.goal, cfg.timeout_ms))
                    .finish()
            };
            let decided = |o: &Outcome| !matches!(o, Outcome::Unknown { .. });
            let solve = || {
                let start = std::time::Instant::now();
                let outcome = discharge(&obligation, cfg);
                let seconds = start.elapsed().as_secs_f64();
                crate::timings::record(name, obligation.kind.name(), seconds);
                crate::timings::record_obligation(name, &format!("{}: {}", obligation.kind.name(), obligation.description), seconds);
                outcome
            };
            let (outcome, cached) = crate::cache::cached(key, decided, solve);
            progress.step();
            VerifiedObligation { obligation, outcome, span, cached }
        })
        .collect()
}

/// Prove every obligation of a kernel. Index arithmetic is tried in i32;
/// if that is not proved safe, the kernel switches to i64 (and says why).
pub fn verify_kernel(k: &Kernel, ir: &mut KernelIr, cfg: &Config) -> KernelProofs {
    let progress = crate::progress::task(format!("proving {}", ir.name));
    let mut note = None;
    let mut overflow_i32 = {
        let mut g = Gen { exec: crate::timings::time(&ir.name, "exec", || Exec::run(k, ir)), obs: Vec::new(), seen: HashSet::new() };
        g.overflow(Dtype::I32);
        discharge_all(ir, g.obs, cfg, &progress)
    };
    if overflow_i32.iter().any(|o| !o.outcome.is_proved()) {
        let first = overflow_i32.iter().find(|o| !o.outcome.is_proved()).map(|o| o.obligation.description.clone()).unwrap_or_default();
        note = Some(format!("32-bit index arithmetic is not proved safe ({}); the kernel indexes with i64. Bound the dims in `requires` to get 32-bit indexing.", first));
        ir.index_ty = Dtype::I64;
        let mut g = Gen { exec: crate::timings::time(&ir.name, "exec", || Exec::run(k, ir)), obs: Vec::new(), seen: HashSet::new() };
        g.overflow(Dtype::I64);
        overflow_i32 = discharge_all(ir, g.obs, cfg, &progress);
    }
    let mut g = Gen { exec: crate::timings::time(&ir.name, "exec", || Exec::run(k, ir)), obs: Vec::new(), seen: HashSet::new() };
    g.requires_satisfiable();
    g.in_bounds();
    g.races();
    g.shared_races();
    g.rings();
    g.mbarriers();
    g.descriptors();
    g.bulk_maps();
    g.coverage();
    g.registers_initialized();
    g.reductions_complete();
    g.lane_visits_complete();
    g.ensures();
    let barriers = g.barriers();
    let protocol = g.protocol();
    let dtypes = g.dtypes();
    let mut obligations = discharge_all(ir, g.obs, cfg, &progress);
    obligations.extend(super::residue::residue_proofs(k, ir, cfg, &progress));
    obligations.extend(super::tolerance::tolerance_proofs(k, ir, cfg));
    obligations.extend(super::float_ensures::float_ensures_proofs(k, ir));
    obligations.extend(overflow_i32);
    obligations.extend(barriers);
    obligations.extend(protocol);
    obligations.extend(dtypes);
    let proved = obligations.iter().filter(|o| o.outcome.is_proved()).count();
    let cached = obligations.iter().filter(|o| o.cached).count();
    progress.finish(&format!("{} of {} obligations proved, {} from the cache", proved, obligations.len(), cached));
    KernelProofs { kernel: k.name.clone(), index_ty: ir.index_ty, index_note: note, obligations }
}

/// The first refuted obligation of a kernel as it stands (no change of
/// index type), cheapest first; None when none is refuted. Used to test the
/// verifier by mutation.
pub fn first_refutation(k: &Kernel, ir: &KernelIr, cfg: &Config) -> Option<VerifiedObligation> {
    let mut g = Gen { exec: Exec::run(k, ir), obs: Vec::new(), seen: HashSet::new() };
    let structural: Vec<VerifiedObligation> = g.barriers().into_iter().chain(g.protocol()).chain(g.dtypes()).collect();
    if let Some(r) = structural.into_iter().find(|o| o.outcome.is_refuted()) {
        return Some(r);
    }
    g.in_bounds();
    g.shared_races();
    g.rings();
    g.mbarriers();
    g.descriptors();
    g.bulk_maps();
    g.races();
    g.registers_initialized();
    g.reductions_complete();
    g.lane_visits_complete();
    g.coverage();
    g.ensures();
    g.overflow(ir.index_ty);
    g.requires_satisfiable();
    g.obs.extend(super::residue::kernel_obligations(ir).into_iter().map(|o| (o, Span::default())));
    // A refutation is what a mutant should have: look for one cheaply in
    // every obligation before proving any (most of a mutant's obligations
    // hold, and proving them first was most of the cost).
    let all: Vec<&Obligation> = g.obs.iter().map(|(o, _)| o).collect();
    if let Some((i, outcome)) = tokitai_contracts::z3_backend::refute_any_quickly(&all, cfg) {
        let (obligation, span) = g.obs.swap_remove(i);
        return Some(VerifiedObligation { obligation, outcome, span, cached: false });
    }
    for (obligation, span) in g.obs {
        let outcome = discharge(&obligation, cfg);
        if outcome.is_refuted() {
            return Some(VerifiedObligation { obligation, outcome, span, cached: false });
        }
    }
    None
}
