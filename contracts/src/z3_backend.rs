//! Discharge obligations with Z3: assert the hypotheses and the negated
//! goal; unsat means proved, sat gives a counterexample, anything else is
//! unknown (with the solver's reason).

use crate::obligation::{Obligation, ObligationKind, Outcome};
use crate::poly::{AtomDef, Atoms, Poly};
use crate::relax::{negated_cases, Lin, Relaxation};
use crate::term::{Formula, Term};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;
use z3::ast::{Bool, Dynamic, Int, Real};
use z3::{Params, SatResult, Solver};

/// Solver settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Per-obligation budget, in milliseconds of a typical machine: it is
    /// given to Z3 as a resource limit (`RLIMIT_PER_MS` units per ms).
    pub timeout_ms: u32,
}

/// Z3 resource units per millisecond of budget, measured roughly here: a
/// query stopped at 5M units had run 0.7 s (2-core CI machine), so 10 s is
/// about 50M units.
pub const RLIMIT_PER_MS: u32 = 5000;

/// The resource limit of a budget of `ms` milliseconds, never 0: Z3 reads
/// an rlimit of 0 as no limit at all, and a part of a small budget
/// (`timeout_ms / 10` of 5 ms) rounds to 0. Found by the fuzz campaign:
/// verifying gelu.tk with a 1 ms budget ran for more than 16 minutes.
pub fn rlimit(ms: u32) -> u32 {
    ms.max(1).saturating_mul(RLIMIT_PER_MS)
}

impl Default for Config {
    fn default() -> Self {
        Config { timeout_ms: 10_000 }
    }
}

struct Enc {
    vars: HashMap<String, Int>,
}

impl Enc {
    fn var(&mut self, n: &str) -> Int {
        self.vars.entry(n.to_string()).or_insert_with(|| Int::new_const(n)).clone()
    }

    fn term(&mut self, t: &Term) -> Int {
        match t {
            Term::Const(v) => Int::from_i64(*v),
            Term::Var(n) => self.var(n),
            Term::Add(a, b) => self.term(a) + self.term(b),
            Term::Sub(a, b) => self.term(a) - self.term(b),
            Term::Mul(a, b) => self.term(a) * self.term(b),
            Term::Div(a, b) => self.term(a).div(self.term(b)),
            Term::Rem(a, b) => self.term(a).modulo(self.term(b)),
            Term::Min(a, b) => {
                let (x, y) = (self.term(a), self.term(b));
                x.lt(&y).ite(&x, &y)
            }
            Term::Ite(p, a, b) => {
                let p = self.formula(p);
                let (x, y) = (self.term(a), self.term(b));
                p.ite(&x, &y)
            }
        }
    }

    fn formula(&mut self, f: &Formula) -> Bool {
        match f {
            Formula::True => Bool::from_bool(true),
            Formula::False => Bool::from_bool(false),
            Formula::Lt(a, b) => self.term(a).lt(self.term(b)),
            Formula::Le(a, b) => self.term(a).le(self.term(b)),
            Formula::Eq(a, b) => self.term(a).eq(self.term(b)),
            Formula::And(v) => {
                let parts: Vec<Bool> = v.iter().map(|x| self.formula(x)).collect();
                Bool::and(&parts)
            }
            Formula::Or(v) => {
                let parts: Vec<Bool> = v.iter().map(|x| self.formula(x)).collect();
                Bool::or(&parts)
            }
            Formula::Not(x) => self.formula(x).not(),
            Formula::Implies(a, b) => self.formula(a).implies(self.formula(b)),
        }
    }
}

/// Prove one obligation.
/// With `TOKITAI_SMT_DUMP=DIR`, write each query as SMT-LIB 2 (with the
/// obligation's description as a comment) to `DIR/<hash>.smt2`, for
/// reproducing a slow or surprising proof with the `z3` command line.
fn dump_query(ob: &Obligation, solver: &Solver) {
    use sha2::{Digest, Sha256};
    // Read once: this runs before every solver call.
    static DIR: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| std::env::var_os("TOKITAI_SMT_DUMP")) else { return };
    let text = format!("; {}: {}\n{}(check-sat)\n", ob.kind.name(), ob.description, solver);
    let name = format!("{:x}", Sha256::digest(text.as_bytes()));
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{}.smt2", &name[..16])), text);
}

/// `discharge`, remembering decided queries for the life of the process:
/// an obligation is a closed formula, so the same kind, hypotheses and goal
/// always get the same answer. Mutation testing leans on this (a mutant
/// shares most obligations with the kernel it came from). `unknown` is not
/// kept: a later call may have a longer timeout.
pub fn discharge_memo(ob: &Obligation, cfg: &Config) -> Outcome {
    if let Some(hit) = memo_get(ob) {
        return hit;
    }
    let outcome = discharge(ob, cfg);
    memo_put(ob, &outcome);
    outcome
}

fn memo() -> &'static std::sync::Mutex<HashMap<[u8; 32], Outcome>> {
    static MEMO: std::sync::OnceLock<std::sync::Mutex<HashMap<[u8; 32], Outcome>>> = std::sync::OnceLock::new();
    MEMO.get_or_init(|| std::sync::Mutex::new(HashMap::new()))
}

fn memo_key(ob: &Obligation) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("{:?}|{:?}|{:?}", ob.kind, ob.hypotheses, ob.goal).as_bytes()).into()
}

/// The decided outcome of this query, if this process has one.
pub fn memo_get(ob: &Obligation) -> Option<Outcome> {
    memo().lock().ok().and_then(|m| m.get(&memo_key(ob)).cloned())
}

fn memo_put(ob: &Obligation, outcome: &Outcome) {
    if !matches!(outcome, Outcome::Unknown { .. }) {
        if let Ok(mut m) = memo().lock() {
            m.insert(memo_key(ob), outcome.clone());
        }
    }
}

/// The budget of [`refute_any_quickly`] per solver call, in the units of
/// [`Config::timeout_ms`]: a counterexample is found in milliseconds or
/// not cheaply at all; a query that takes longer most likely holds.
const QUICK_MS: u32 = 50;

/// The ways [`refute_any_quickly`] looks for a counterexample, cheapest
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuickTry {
    /// A nonlinear query: one model of its linear relaxation, evaluated.
    Relaxed,
    /// A linear query: decided in linear integer arithmetic (also proves).
    Exact,
    /// A nonlinear query: the variables of its products fixed to a few
    /// small values, each such linear query decided and its model checked.
    Fixed,
}

/// One obligation of [`refute_any_quickly`], prepared once for every try.
struct Suspect<'a> {
    ob: &'a Obligation,
    whole: Relaxation,
    goal: Lin,
}

impl<'a> Suspect<'a> {
    /// `Err` with the outcome when this process has refuted the query
    /// before; `Ok(None)` when there is nothing to try (proved before, or
    /// a query these tries cannot refute).
    fn new(ob: &'a Obligation) -> Result<Option<Suspect<'a>>, Outcome> {
        if ob.kind == ObligationKind::RequiresSatisfiable {
            return Ok(None);
        }
        if let Some(hit) = memo_get(ob) {
            return if hit.is_refuted() { Err(hit) } else { Ok(None) };
        }
        let Some(mut whole) = Relaxation::new(&ob.hypotheses) else { return Ok(None) };
        let Some(goal) = whole.goal(&ob.goal) else { return Ok(None) };
        Ok(Some(Suspect { ob, whole, goal }))
    }

    fn try_(&self, try_: QuickTry, cfg: &Config) -> Option<Outcome> {
        let start = Instant::now();
        let (ob, whole, goal) = (self.ob, &self.whole, &self.goal);
        let found = match (try_, whole.is_exact()) {
            // A fifth of the budget: a linear counterexample is found in
            // a millisecond or two; the queries that use it all up are race
            // queries of shared tiles that hold (measured: 54 of them cost
            // 2 s of the mutation test of linear.tk at the full budget).
            (QuickTry::Exact, true) => match check_linear(ob, whole, &[Lin::Not(Box::new(goal.clone()))], &Config { timeout_ms: cfg.timeout_ms / 5 }, Arith::Int, true) {
                (SatResult::Sat, model) => refutes(ob, model),
                (SatResult::Unsat, _) => {
                    memo_put(ob, &Outcome::Proved { seconds: start.elapsed().as_secs_f64() });
                    None
                }
                (SatResult::Unknown, _) => None,
            },
            // A probe: the relaxation's model is found at once or its
            // search is long (shared-tile race queries ran seven times past
            // the nominal budget), and the later tries remain.
            (QuickTry::Relaxed, false) => checked_counterexample(ob, whole, goal, &Config { timeout_ms: cfg.timeout_ms / 5 }),
            // The box search is left to `discharge`: an empty box costs a
            // bit-blasted search (a quarter second), and most queries here hold.
            (QuickTry::Fixed, false) => fixed_counterexample(ob, whole, cfg),
            _ => None,
        }?;
        let outcome = Outcome::Refuted { seconds: start.elapsed().as_secs_f64(), model: found };
        memo_put(ob, &outcome);
        Some(outcome)
    }
}

/// The first of `obs` refuted cheaply, with its position and outcome, or
/// `None`, which says nothing about any of them. For testing the verifier
/// by mutation: a mutant has one refutable obligation among many that
/// hold (most remembered from the kernel it came from), so every
/// obligation gets the cheapest try before any gets the next, and proving
/// the rest is left to [`discharge`].
pub fn refute_any_quickly(obs: &[&Obligation], cfg: &Config) -> Option<(usize, Outcome)> {
    let cfg = &Config { timeout_ms: QUICK_MS.min(cfg.timeout_ms) };
    z3::with_z3_config(&z3::Config::new(), || {
        let mut suspects = Vec::new();
        for (i, ob) in obs.iter().enumerate() {
            match Suspect::new(ob) {
                Err(refuted) => return Some((i, refuted)),
                Ok(Some(s)) => suspects.push((i, s)),
                Ok(None) => {}
            }
        }
        for try_ in [QuickTry::Relaxed, QuickTry::Exact, QuickTry::Fixed] {
            for (i, s) in &suspects {
                if let Some(outcome) = s.try_(try_, cfg) {
                    return Some((*i, outcome));
                }
            }
        }
        None
    })
}

/// How queries were decided in this process, for `tokitaic verify
/// --timings`: `[exact linear, proved by the linear relaxation, nonlinear]`.
pub fn route_counts() -> [u64; 3] {
    [0, 1, 2].map(|i| ROUTES[i].load(std::sync::atomic::Ordering::Relaxed))
}

static ROUTES: [std::sync::atomic::AtomicU64; 3] = [const { std::sync::atomic::AtomicU64::new(0) }; 3];

fn count(route: usize) {
    ROUTES[route].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Decide one obligation in a fresh Z3 context: the answer, and a
/// refutation's model, then depend on the query alone, not on what this
/// thread asked before (models feed snapshot-tested diagnostics).
///
/// The cheapest sound theory first:
/// 1. The query's hypotheses are cut to the goal's cone of influence
///    ([`slice`]); dropping hypotheses can only make a proof harder, so a
///    proof of the slice is a proof of the query. A counterexample is
///    always taken from the whole query.
/// 2. Linear integer arithmetic on the [`Relaxation`]. For a linear query
///    it is the query itself: unsat is a proof and sat a counterexample.
///    For a nonlinear one, unsat of every case of the negated goal is a
///    proof (see `relax.rs` for why); anything else goes on to 3.
/// 3. The whole query in nonlinear integer arithmetic, with Z3's `smt`
///    tactic: its default preprocessing for bounded nonlinear problems
///    expands a dim such as `E <= 64` into one boolean per value and was
///    slower by a factor of two to five on our obligations (measured in
///    issue 17).
pub fn discharge(ob: &Obligation, cfg: &Config) -> Outcome {
    // A fresh context per query, not one per kernel with push/pop: Z3's
    // choices (and so its models, which the diagnostics print) depend on
    // the terms a context has seen, and queries run on whichever rayon
    // thread is free; a fresh context keeps every answer a function of its
    // query. Measured in issue 17: a context costs 0.7 to 0.9 ms to make,
    // about 2 of the 33 CPU seconds of verifying every example; the cache
    // and the cheaper theories bought far more.
    z3::with_z3_config(&z3::Config::new(), || {
        let start = Instant::now();
        if let Some(outcome) = by_relaxation(ob, cfg, start) {
            return outcome;
        }
        count(2);
        match discharge_nonlinear(ob, cfg, start) {
            Outcome::Unknown { seconds, reason } if ob.kind != ObligationKind::RequiresSatisfiable => match bounded_counterexample(ob, cfg) {
                Some(model) => Outcome::Refuted { seconds: start.elapsed().as_secs_f64(), model },
                None => Outcome::Unknown { seconds, reason },
            },
            decided => decided,
        }
    })
}

/// A solver with the resource limit of `cfg`.
fn solver_for(cfg: &Config) -> Solver {
    // Equalities solved and the terms simplified before the search: a
    // relaxation defines each division's quotient and remainder by an
    // equality, and the `smt` tactic alone searched the same query for
    // 0.02 s or for 23 s depending on the order Z3 had created its terms
    // in (a shared-tile race query of the warpgroup form, measured in
    // issue 19: printed and parsed back it took 0.02 s). With the
    // equalities solved first (and the slab indices of race queries folded,
    // obligations.rs), every example verifies in 102 s instead of 254 s
    // (no cache, two cores). Both steps keep the query equivalent and
    // a model of the result extends to a model of the original.
    let solver = z3::Tactic::new("simplify").and_then(&z3::Tactic::new("solve-eqs")).and_then(&z3::Tactic::new("smt")).solver();
    let mut params = Params::new();
    // A resource limit, not Z3's `timeout`: the timeout runs on Z3's
    // scoped_timer threads, which deadlock when timers of solvers checking
    // in parallel expire together (Z3Prover/z3#5990; seen here as a verify
    // that hung idle in Z3_solver_check). The resource limit is also
    // deterministic: the same query gives the same answer on any machine.
    params.set_u32("rlimit", rlimit(cfg.timeout_ms));
    solver.set_params(&params);
    solver
}

/// The hypotheses that share a variable with the goal, directly or through
/// other hypotheses (the conjunction flattened), in their original order.
pub fn slice(hypotheses: &[Formula], goal: &Formula) -> Vec<Formula> {
    let mut parts: Vec<Formula> = Vec::new();
    for h in hypotheses {
        match Formula::and(vec![h.clone()]) {
            Formula::And(v) => parts.extend(v),
            other => parts.push(other),
        }
    }
    let vars: Vec<Vec<String>> = parts
        .iter()
        .map(|p| {
            let mut v = Vec::new();
            p.vars(&mut v);
            v
        })
        .collect();
    let mut relevant: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut g = Vec::new();
    goal.vars(&mut g);
    relevant.extend(g);
    // Variable-free hypotheses (`false`, say) are kept: they may decide
    // the query alone.
    let mut keep: Vec<bool> = vars.iter().map(|v| v.is_empty()).collect();
    loop {
        let mut changed = false;
        for (i, v) in vars.iter().enumerate() {
            if !keep[i] && v.iter().any(|x| relevant.contains(x)) {
                keep[i] = true;
                relevant.extend(v.iter().cloned());
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    parts.into_iter().zip(keep).filter(|(_, k)| *k).map(|(p, _)| p).collect()
}

/// Cases of a negated goal tried one by one; more go to the whole query.
const MAX_CASES: usize = 16;

/// Steps 1 and 2 of [`discharge`]; `None` when they decide nothing.
fn by_relaxation(ob: &Obligation, cfg: &Config, start: Instant) -> Option<Outcome> {
    let done = |route: usize, outcome: Outcome| {
        count(route);
        Some(outcome)
    };
    let secs = || start.elapsed().as_secs_f64();
    if ob.kind == ObligationKind::RequiresSatisfiable {
        // A model of a relaxation is not a model of the query: only an
        // exact (linear) query is decided here.
        let mut hyps = ob.hypotheses.clone();
        hyps.push(ob.goal.clone());
        let r = Relaxation::new(&hyps)?;
        if !r.is_exact() {
            return None;
        }
        return match check_linear(ob, &r, &[], cfg, Arith::Int, true) {
            // A model, checked by evaluating the requires themselves.
            (SatResult::Sat, model) if satisfies(ob, &model) => done(0, Outcome::Proved { seconds: secs() }),
            (SatResult::Sat, _) => None,
            (SatResult::Unsat, _) => done(0, Outcome::Refuted { seconds: secs(), model: BTreeMap::new() }),
            (SatResult::Unknown, _) => None,
        };
    }
    let sliced = slice(&ob.hypotheses, &ob.goal);
    let mut r = Relaxation::new(&sliced)?;
    let goal = r.goal(&ob.goal)?;
    if r.is_exact() {
        return match check_linear(ob, &r, &[Lin::Not(Box::new(goal))], cfg, Arith::Int, false).0 {
            SatResult::Unsat => done(0, Outcome::Proved { seconds: secs() }),
            // The counterexample of the whole query (the slice left out
            // hypotheses; they might be unsatisfiable together), with small
            // numbers when there is one (the simplex's model tends to sit
            // at the bounds, N = 2^62).
            SatResult::Sat => {
                if let Some(model) = in_box(ob, cfg, BOX_BITS[0]) {
                    return done(0, Outcome::Refuted { seconds: secs(), model });
                }
                let mut whole = Relaxation::new(&ob.hypotheses)?;
                let goal = whole.goal(&ob.goal)?;
                if !whole.is_exact() {
                    return None;
                }
                match check_linear(ob, &whole, &[Lin::Not(Box::new(goal))], cfg, Arith::Int, true) {
                    // Checked by evaluation all the same: a relaxation
                    // wrongly taken for exact must not produce a claim.
                    (SatResult::Sat, model) => done(0, Outcome::Refuted { seconds: secs(), model: refutes(ob, model)? }),
                    (SatResult::Unsat, _) => done(0, Outcome::Proved { seconds: secs() }),
                    (SatResult::Unknown, _) => None,
                }
            }
            SatResult::Unknown => None,
        };
    }
    let mut tried_counterexample = false;
    for case in negated_cases(&goal, MAX_CASES)? {
        // a. Most nonlinear queries are nonlinear only in hypotheses the
        //    goal does not need: the monomials as free variables settle them.
        if check_linear(ob, &r, &case, cfg, Arith::Int, false).0 == SatResult::Unsat {
            continue;
        }
        // b. The product lemmas over the reals: an index bound by products
        //    needs no integrality beyond what the relaxation's integer
        //    tightening (`a < b` as `a <= b - 1`) already wrote, and the
        //    simplex decides either way without branch and bound (an
        //    integer search over hundreds of lemmas took minutes when the
        //    case was satisfiable). Every integer model is a real model, so
        //    real unsat is a proof.
        let mut extra = case.clone();
        extra.extend(r.lemmas(&case));
        if check_linear(ob, &r, &extra, cfg, Arith::Real, false).0 == SatResult::Unsat {
            continue;
        }
        // c. Perhaps the query is false: a counterexample, checked by
        //    evaluating the query itself.
        if !tried_counterexample {
            tried_counterexample = true;
            let whole = Relaxation::new(&ob.hypotheses).and_then(|mut w| w.goal(&ob.goal).map(|g| (w, g)));
            let relaxed = || whole.as_ref().and_then(|(w, g)| checked_counterexample(ob, w, g, cfg));
            let fixed = || whole.as_ref().and_then(|(w, _)| fixed_counterexample(ob, w, cfg));
            // A glance at small boxes (a counterexample the two above miss
            // usually needs a nonlinear fact and shows at small sizes); the
            // longer look waits until nonlinear arithmetic has had its turn,
            // since most queries that reach here hold.
            let glance = Config { timeout_ms: cfg.timeout_ms / 10 };
            if let Some(model) = relaxed().or_else(fixed).or_else(|| bounded_counterexample(ob, &glance)) {
                return done(0, Outcome::Refuted { seconds: secs(), model });
            }
        }
        // d. The lemmas over the integers, with a part of the budget.
        let part = Config { timeout_ms: cfg.timeout_ms / 4 };
        if check_linear(ob, &r, &extra, &part, Arith::Int, false).0 != SatResult::Unsat {
            return None;
        }
    }
    done(1, Outcome::Proved { seconds: secs() })
}

/// A model of the whole query's relaxation (no slice, no lemmas) that
/// evaluates every hypothesis of the query to true and its goal to false:
/// a counterexample, found without nonlinear reasoning.
fn checked_counterexample(ob: &Obligation, whole: &Relaxation, goal: &Lin, cfg: &Config) -> Option<BTreeMap<String, i64>> {
    let part = Config { timeout_ms: cfg.timeout_ms / 10 };
    match check_linear(ob, whole, &[Lin::Not(Box::new(goal.clone()))], &part, Arith::Int, true) {
        (SatResult::Sat, model) => refutes(ob, model),
        _ => None,
    }
}

/// The values tried, in order, for every variable of a product or of a
/// divisor in [`fixed_counterexample`]: small sizes, primes and one past
/// a power of two (the ragged tile, the tail of a vector loop).
const FIXED_VALUES: [i64; 8] = [1, 2, 3, 5, 17, 65, 130, 257];

/// A counterexample with every variable of a nonlinear term fixed to one
/// small value: the query is then linear, decided exactly in linear
/// arithmetic, and its model checked by evaluation. Sizes where an index
/// bug shows are rarely special; the same value for every dim satisfies
/// the usual `requires` (products bounded, dims equal).
fn fixed_counterexample(ob: &Obligation, whole: &Relaxation, cfg: &Config) -> Option<BTreeMap<String, i64>> {
    let names = whole.nonlinear_vars();
    if names.is_empty() {
        return None;
    }
    let part = Config { timeout_ms: (cfg.timeout_ms / 20).max(1) };
    // One value for all (dims that `requires` makes equal), then distinct
    // values (a bug that swaps two dims shows only when they differ).
    let n = FIXED_VALUES.len();
    let uniform = (0..n).map(|i| vec![FIXED_VALUES[i]; names.len()]);
    let distinct = (0..n).map(|shift| (0..names.len()).map(|j| FIXED_VALUES[(shift + j) % n]).collect::<Vec<i64>>());
    for values in uniform.chain(distinct) {
        let value_of = |name: &str| names.iter().position(|x| x == name).map(|i| values[i]);
        let fix = |name: &str| value_of(name).map(Term::c);
        let hyps: Vec<Formula> = ob.hypotheses.iter().map(|h| h.subst(&fix)).collect();
        let goal = ob.goal.subst(&fix);
        let Some(mut r) = Relaxation::new(&hyps) else { continue };
        let Some(g) = r.goal(&goal) else { continue };
        if !r.is_exact() {
            continue;
        }
        if let (SatResult::Sat, mut model) = check_linear(ob, &r, &[Lin::Not(Box::new(g))], &part, Arith::Int, true) {
            for (name, v) in names.iter().zip(&values) {
                model.insert(name.clone(), *v);
            }
            if let Some(m) = refutes(ob, model) {
                return Some(m);
            }
        }
    }
    None
}

/// The goal of `ob` evaluated exactly under `model`, if every hypothesis
/// holds there (`None` otherwise, or where something is undefined).
fn goal_under(ob: &Obligation, model: &BTreeMap<String, i64>) -> Option<bool> {
    let env = |n: &str| model.get(n).map(|v| *v as i128);
    if ob.hypotheses.iter().all(|h| h.eval(&env) == Some(true)) {
        ob.goal.eval(&env)
    } else {
        None
    }
}

/// Does `model` make every hypothesis and the goal of `ob` true?
fn satisfies(ob: &Obligation, model: &BTreeMap<String, i64>) -> bool {
    goal_under(ob, model) == Some(true)
}

/// `model` if it is a counterexample of `ob`: every hypothesis true and
/// the goal false, evaluated exactly.
fn refutes(ob: &Obligation, model: BTreeMap<String, i64>) -> Option<BTreeMap<String, i64>> {
    (goal_under(ob, &model) == Some(false)).then_some(model)
}

/// The boxes [`bounded_counterexample`] searches, smallest first: a
/// counterexample with small numbers is the one a reader follows.
const BOX_BITS: [u32; 2] = [5, 16];

/// A counterexample with every variable in a small box, found by Z3's
/// default tactic (bounded nonlinear integer problems are bit-blasted,
/// which finds models in milliseconds where the unbounded search took
/// minutes); checked by evaluating the query. A bug in index arithmetic
/// shows at small sizes; nothing is concluded when the box holds none.
fn bounded_counterexample(ob: &Obligation, cfg: &Config) -> Option<BTreeMap<String, i64>> {
    BOX_BITS.iter().find_map(|bits| in_box(ob, cfg, *bits))
}

fn in_box(ob: &Obligation, cfg: &Config, bits: u32) -> Option<BTreeMap<String, i64>> {
    let solver = Solver::new();
    let mut params = Params::new();
    params.set_u32("rlimit", rlimit(cfg.timeout_ms / 10));
    solver.set_params(&params);
    let mut enc = Enc { vars: HashMap::new() };
    for h in &ob.hypotheses {
        let h = enc.formula(h);
        solver.assert(&h);
    }
    let goal = enc.formula(&ob.goal);
    solver.assert(goal.not());
    let edge = 1i64 << bits;
    let vars: Vec<Int> = enc.vars.values().cloned().collect();
    for v in &vars {
        solver.assert(v.ge(Int::from_i64(-edge)));
        solver.assert(v.le(Int::from_i64(edge)));
    }
    let t0 = Instant::now();
    let result = solver.check();
    trace(ob, "box search", result, vars.len(), t0.elapsed().as_secs_f64());
    if result != SatResult::Sat {
        return None;
    }
    let m = solver.get_model()?;
    let mut model = BTreeMap::new();
    for (name, v) in &enc.vars {
        model.insert(name.clone(), m.eval(v, true)?.as_i64()?);
    }
    refutes(ob, model)
}

/// With `TOKITAI_SOLVER_TRACE` set, one line on stderr per solver call of
/// the relaxation's stages that takes more than 50 ms: which stage, its
/// answer and time, for finding what makes a proof slow.
fn trace(ob: &Obligation, stage: &str, result: SatResult, constraints: usize, seconds: f64) {
    // `TOKITAI_SOLVER_TRACE=1` shows calls over 50 ms; a value below one
    // is the threshold in seconds. Read once: this runs after every call.
    static THRESHOLD: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    let threshold = THRESHOLD.get_or_init(|| std::env::var("TOKITAI_SOLVER_TRACE").ok().map(|v| v.parse::<f64>().ok().filter(|t| *t < 1.0).unwrap_or(0.05)));
    if threshold.is_some_and(|t| seconds > t) {
        eprintln!("solver: {} {:?} in {:.3}s ({} constraints): {}: {}", stage, result, seconds, constraints, ob.kind.name(), ob.description);
    }
}

/// Integers, or the reals (a relaxation of them).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arith {
    Int,
    Real,
}

/// Check the relaxation's hypotheses and `extra` in linear arithmetic;
/// with `want_model`, the values of the query's own variables (integers).
fn check_linear(ob: &Obligation, r: &Relaxation, extra: &[Lin], cfg: &Config, arith: Arith, want_model: bool) -> (SatResult, BTreeMap<String, i64>) {
    let t0 = Instant::now();
    let solver = solver_for(cfg);
    let mut enc = LinEnc { atoms: &r.atoms, arith, vars: HashMap::new() };
    for h in r.hypotheses.iter().chain(extra) {
        let b = enc.lin(h);
        solver.assert(&b);
    }
    dump_query(ob, &solver);
    let result = solver.check();
    let stage = match (arith, result) {
        (Arith::Int, SatResult::Unknown) => format!("linear ({}, budget {} ms)", solver.get_reason_unknown().unwrap_or_default(), cfg.timeout_ms),
        (Arith::Int, _) => "linear".to_string(),
        (Arith::Real, _) => "linear (reals)".to_string(),
    };
    trace(ob, &stage, result, r.hypotheses.len() + extra.len(), t0.elapsed().as_secs_f64());
    let mut model = BTreeMap::new();
    if want_model && arith == Arith::Int && result == SatResult::Sat {
        if let Some(m) = solver.get_model() {
            for a in 0..r.atoms.len() {
                if let AtomDef::Var(name) = r.atoms.def(a) {
                    if let Some(v) = enc.vars.get(name).and_then(|x| x.as_int()).and_then(|x| m.eval(&x, true)).and_then(|x| x.as_i64()) {
                        model.insert(name.clone(), v);
                    }
                }
            }
        }
    }
    (result, model)
}

/// Z3 terms of a relaxation: atoms that are variables keep their names;
/// other atoms and monomials are fresh variables named by their ids.
struct LinEnc<'a> {
    atoms: &'a Atoms,
    arith: Arith,
    vars: HashMap<String, Dynamic>,
}

impl LinEnc<'_> {
    fn num(&self, c: i128) -> Dynamic {
        match self.arith {
            Arith::Int => Dynamic::from_ast(&Int::from_i128(c)),
            Arith::Real => Dynamic::from_ast(&Real::from_rational_str(&c.to_string(), "1").expect("an integer literal")),
        }
    }

    fn var(&mut self, n: String) -> Dynamic {
        let arith = self.arith;
        self.vars
            .entry(n.clone())
            .or_insert_with(|| match arith {
                Arith::Int => Dynamic::from_ast(&Int::new_const(n)),
                Arith::Real => Dynamic::from_ast(&Real::new_const(n)),
            })
            .clone()
    }

    fn monomial(&mut self, m: &[usize]) -> Dynamic {
        match m {
            [a] => match self.atoms.def(*a) {
                AtomDef::Var(n) => self.var(n.clone()),
                _ => self.var(format!("rx.atom.{}", a)),
            },
            _ => self.var(format!("rx.mono.{}", m.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("."))),
        }
    }

    /// `p >= 0` or `p == 0`.
    fn atom(&mut self, p: &Poly, eq: bool) -> Bool {
        let mut parts: Vec<Dynamic> = Vec::new();
        for (m, c) in p.terms() {
            parts.push(if m.is_empty() {
                self.num(c)
            } else if c == 1 {
                self.monomial(m)
            } else {
                let (k, v) = (self.num(c), self.monomial(m));
                match self.arith {
                    Arith::Int => Dynamic::from_ast(&(k.as_int().expect("int") * v.as_int().expect("int"))),
                    Arith::Real => Dynamic::from_ast(&(k.as_real().expect("real") * v.as_real().expect("real"))),
                }
            });
        }
        let zero = self.num(0);
        match self.arith {
            Arith::Int => {
                let xs: Vec<Int> = parts.iter().filter_map(|x| x.as_int()).collect();
                let sum = if xs.is_empty() { Int::from_i64(0) } else { Int::add(&xs) };
                let z = zero.as_int().expect("int");
                if eq {
                    sum.eq(z)
                } else {
                    sum.ge(z)
                }
            }
            Arith::Real => {
                let xs: Vec<Real> = parts.iter().filter_map(|x| x.as_real()).collect();
                let sum = if xs.is_empty() { zero.as_real().expect("real") } else { Real::add(&xs) };
                let z = zero.as_real().expect("real");
                if eq {
                    sum.eq(z)
                } else {
                    sum.ge(z)
                }
            }
        }
    }

    fn lin(&mut self, f: &Lin) -> Bool {
        match f {
            Lin::True => Bool::from_bool(true),
            Lin::False => Bool::from_bool(false),
            Lin::Ge0(p) => self.atom(p, false),
            Lin::Eq0(p) => self.atom(p, true),
            Lin::And(v) => {
                let parts: Vec<Bool> = v.iter().map(|x| self.lin(x)).collect();
                Bool::and(&parts)
            }
            Lin::Or(v) => {
                let parts: Vec<Bool> = v.iter().map(|x| self.lin(x)).collect();
                Bool::or(&parts)
            }
            Lin::Not(x) => self.lin(x).not(),
        }
    }
}

/// Step 3 of [`discharge`]: the whole query, nonlinear.
fn discharge_nonlinear(ob: &Obligation, cfg: &Config, start: Instant) -> Outcome {
    let solver = solver_for(cfg);
    let mut enc = Enc { vars: HashMap::new() };
    for h in &ob.hypotheses {
        let h = enc.formula(h);
        solver.assert(&h);
    }
    let goal = enc.formula(&ob.goal);
    // Satisfiability obligations want a model; the others want none for
    // the negated goal.
    let want_sat = ob.kind == ObligationKind::RequiresSatisfiable;
    if want_sat {
        solver.assert(&goal);
    } else {
        solver.assert(goal.not());
    }
    dump_query(ob, &solver);
    let t0 = Instant::now();
    let result = solver.check();
    trace(ob, "nonlinear", result, ob.hypotheses.len() + 1, t0.elapsed().as_secs_f64());
    let seconds = start.elapsed().as_secs_f64();
    let model = || {
        let mut out = BTreeMap::new();
        if let Some(m) = solver.get_model() {
            for (name, v) in &enc.vars {
                if let Some(val) = m.eval(v, true).and_then(|x| x.as_i64()) {
                    out.insert(name.clone(), val);
                }
            }
        }
        out
    };
    match (result, want_sat) {
        (SatResult::Unsat, false) => Outcome::Proved { seconds },
        (SatResult::Sat, true) => Outcome::Proved { seconds },
        // Z3's model is of the query's own encoding; it is still checked
        // by evaluation, so that no counterexample is shown that is not one.
        (SatResult::Sat, false) => match refutes(ob, model()) {
            Some(model) => Outcome::Refuted { seconds, model },
            None => Outcome::Unknown { seconds, reason: "the solver's model does not evaluate to a counterexample".into() },
        },
        (SatResult::Unsat, true) => Outcome::Refuted { seconds, model: BTreeMap::new() },
        (SatResult::Unknown, _) => Outcome::Unknown { seconds, reason: solver.get_reason_unknown().unwrap_or_else(|| "unknown".into()) },
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_budget_never_becomes_no_limit() {
        // Z3 reads rlimit 0 as unlimited: the smallest budget, and a tenth
        // of it, are still limits.
        assert_eq!(super::rlimit(0), super::RLIMIT_PER_MS);
        assert_eq!(super::rlimit(1 / 10), super::RLIMIT_PER_MS);
        assert_eq!(super::rlimit(10_000), 10_000 * super::RLIMIT_PER_MS);
        assert_eq!(super::rlimit(u32::MAX), u32::MAX);
    }
    use super::*;

    fn ob(h: Vec<Formula>, goal: Formula) -> Obligation {
        Obligation { kind: ObligationKind::InBounds, description: "test".into(), origin: (0, 0), hypotheses: h, goal, show: vec![] }
    }

    #[test]
    fn proves_a_guarded_access_and_refutes_an_off_by_one() {
        let (i, n) = (Term::var("i"), Term::var("N"));
        let guard = vec![Term::c(0).le(i.clone()), i.clone().lt(n.clone())];
        assert!(discharge(&ob(guard.clone(), i.clone().lt(n.clone())), &Config::default()).is_proved());
        let off = discharge(&ob(guard, i.clone().add(Term::c(1)).lt(n)), &Config::default());
        match off {
            Outcome::Refuted { model, .. } => assert_eq!(model["i"] + 1, model["N"]),
            other => panic!("expected a refutation, got {:?}", other),
        }
    }

    #[test]
    fn satisfiability_obligations_want_a_model() {
        let n = Term::var("N");
        let sat = Obligation { kind: ObligationKind::RequiresSatisfiable, ..ob(vec![], Formula::and(vec![Term::c(1).le(n.clone()), n.clone().le(Term::c(4))])) };
        assert!(discharge(&sat, &Config::default()).is_proved());
        let unsat = Obligation { kind: ObligationKind::RequiresSatisfiable, ..ob(vec![], Formula::and(vec![Term::c(5).le(n.clone()), n.le(Term::c(4))])) };
        assert!(discharge(&unsat, &Config::default()).is_refuted());
    }
}

/// An f64 as an exact rational `(numerator, denominator)` in decimal.
fn exact_rational(x: f64) -> (String, String) {
    fn times_pow2(mut digits: Vec<u8>, e: u32) -> Vec<u8> {
        // Little-endian decimal digits, doubled `e` times.
        for _ in 0..e {
            let mut carry = 0;
            for d in digits.iter_mut() {
                let v = *d * 2 + carry;
                *d = v % 10;
                carry = v / 10;
            }
            if carry > 0 {
                digits.push(carry);
            }
        }
        digits
    }
    fn decimal(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while v > 0 {
            out.push((v % 10) as u8);
            v /= 10;
        }
        if out.is_empty() {
            out.push(0);
        }
        out
    }
    let text = |d: Vec<u8>| d.iter().rev().map(|c| (b'0' + c) as char).collect::<String>();
    if x == 0.0 {
        return ("0".into(), "1".into());
    }
    let bits = x.abs().to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (mut m, mut e) = if exp == 0 { (frac, -1074) } else { (frac | (1u64 << 52), exp - 1075) };
    while m % 2 == 0 && e < 0 {
        m /= 2;
        e += 1;
    }
    let sign = if x < 0.0 { "-" } else { "" };
    if e >= 0 {
        (format!("{}{}", sign, text(times_pow2(decimal(m), e as u32))), "1".into())
    } else {
        (format!("{}{}", sign, text(decimal(m))), text(times_pow2(vec![1], (-e) as u32)))
    }
}

/// One region of an error-bound check: the bound `abs + rel |exact|`
/// holds where `|exact|` is in `[lo, hi]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundRegion {
    pub abs: f64,
    pub rel: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Discharge `abs_i + rel_i x <= tol_abs + tol_rel x` for every region `i`
/// and every `x` in its `[lo, hi]`, in exact rational arithmetic: the f64
/// numbers are converted exactly, so nothing is rounded in the check.
/// Refuted: the model's `region` names a region where the bound exceeds
/// the tolerance.
pub fn prove_bound_within(regions: &[BoundRegion], tol_abs: f64, tol_rel: f64, cfg: &Config) -> Outcome {
    use z3::ast::Real;
    z3::with_z3_config(&z3::Config::new(), || {
        let start = Instant::now();
        let real = |v: f64| {
            let (n, d) = exact_rational(v);
            Real::from_rational_str(&n, &d).expect("a decimal rational")
        };
        if regions.iter().any(|r| ![r.abs, r.rel, r.lo, r.hi].iter().all(|v| v.is_finite())) || !tol_abs.is_finite() || !tol_rel.is_finite() {
            return Outcome::Unknown { seconds: 0.0, reason: "a bound or range is not finite".into() };
        }
        let solver = Solver::new();
        let mut params = Params::new();
        params.set_u32("rlimit", rlimit(cfg.timeout_ms));
        solver.set_params(&params);
        let x = Real::new_const("x");
        let region = Int::new_const("region");
        let (ta, tr) = (real(tol_abs), real(tol_rel));
        let cases: Vec<Bool> = regions
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let within = Bool::and(&[real(r.lo).le(&x), x.le(real(r.hi))]);
                let exceeds = (real(r.abs) + real(r.rel) * &x).gt(&ta + &tr * &x);
                Bool::and(&[region.eq(Int::from_i64(i as i64)), within, exceeds])
            })
            .collect();
        solver.assert(Bool::or(&cases));
        let result = solver.check();
        let seconds = start.elapsed().as_secs_f64();
        match result {
            SatResult::Unsat => Outcome::Proved { seconds },
            SatResult::Sat => {
                let mut model = BTreeMap::new();
                if let Some(i) = solver.get_model().and_then(|m| m.eval(&region, true)).and_then(|v| v.as_i64()) {
                    model.insert("region".to_string(), i);
                }
                Outcome::Refuted { seconds, model }
            }
            SatResult::Unknown => Outcome::Unknown { seconds, reason: solver.get_reason_unknown().unwrap_or_else(|| "unknown".into()) },
        }
    })
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    #[test]
    fn rationals_are_exact() {
        assert_eq!(exact_rational(0.5), ("1".into(), "2".into()));
        assert_eq!(exact_rational(3.0), ("3".into(), "1".into()));
        let (n, d) = exact_rational(0.1);
        assert_eq!(n.parse::<f64>().unwrap() / d.parse::<f64>().unwrap(), 0.1);
        assert_eq!(exact_rational(-1024.0).0, "-1024");
    }

    #[test]
    fn bounds_within_tolerance_are_proved_and_others_refuted() {
        let r = [BoundRegion { abs: 1e-6, rel: 4.9e-4, lo: 0.0, hi: 8.0 }, BoundRegion { abs: 2e-6, rel: 1e-4, lo: 0.5, hi: 1.0 }];
        assert!(prove_bound_within(&r, 1e-5, 1e-3, &Config::default()).is_proved());
        // Only the second region's bound exceeds an allowance of 1.5e-6.
        let flat = [BoundRegion { abs: 1e-6, rel: 0.0, lo: 0.0, hi: 8.0 }, BoundRegion { abs: 2e-6, rel: 0.0, lo: 0.5, hi: 1.0 }];
        match prove_bound_within(&flat, 1.5e-6, 0.0, &Config::default()) {
            Outcome::Refuted { model, .. } => assert_eq!(model.get("region"), Some(&1)),
            other => panic!("{:?}", other),
        }
    }
}
