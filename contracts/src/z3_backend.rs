//! Discharge obligations with Z3: assert the hypotheses and the negated
//! goal; unsat means proved, sat gives a counterexample, anything else is
//! unknown (with the solver's reason).

use crate::obligation::{Obligation, ObligationKind, Outcome};
use crate::term::{Formula, Term};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;
use z3::ast::{Bool, Int};
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
    let Some(dir) = std::env::var_os("TOKITAI_SMT_DUMP") else { return };
    let text = format!("; {}: {}\n{}(check-sat)\n", ob.kind.name(), ob.description, solver);
    let name = format!("{:x}", Sha256::digest(text.as_bytes()));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{}.smt2", &name[..16])), text);
}

/// `discharge`, remembering decided queries for the life of the process:
/// an obligation is a closed formula, so the same kind, hypotheses and goal
/// always get the same answer. Mutation testing leans on this (a mutant
/// shares most obligations with the kernel it came from). `unknown` is not
/// kept: a later call may have a longer timeout.
pub fn discharge_memo(ob: &Obligation, cfg: &Config) -> Outcome {
    use sha2::{Digest, Sha256};
    use std::sync::{Mutex, OnceLock};
    static MEMO: OnceLock<Mutex<HashMap<[u8; 32], Outcome>>> = OnceLock::new();
    let key: [u8; 32] = Sha256::digest(format!("{:?}|{:?}|{:?}", ob.kind, ob.hypotheses, ob.goal).as_bytes()).into();
    let memo = MEMO.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hit) = memo.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return hit;
    }
    let outcome = discharge(ob, cfg);
    if !matches!(outcome, Outcome::Unknown { .. }) {
        if let Ok(mut m) = memo.lock() {
            m.insert(key, outcome.clone());
        }
    }
    outcome
}

/// Decide one obligation in a fresh Z3 context: the answer, and a
/// refutation's model, then depend on the query alone, not on what this
/// thread asked before (models feed snapshot-tested diagnostics).
pub fn discharge(ob: &Obligation, cfg: &Config) -> Outcome {
    z3::with_z3_config(&z3::Config::new(), || discharge_here(ob, cfg))
}

fn discharge_here(ob: &Obligation, cfg: &Config) -> Outcome {
    let start = Instant::now();
    let solver = Solver::new();
    let mut params = Params::new();
    // A resource limit, not Z3's `timeout`: the timeout runs on Z3's
    // scoped_timer threads, which deadlock when timers of solvers checking
    // in parallel expire together (Z3Prover/z3#5990; seen here as a verify
    // that hung idle in Z3_solver_check). The resource limit is also
    // deterministic: the same query gives the same answer on any machine.
    params.set_u32("rlimit", cfg.timeout_ms.saturating_mul(RLIMIT_PER_MS));
    solver.set_params(&params);
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
    let result = solver.check();
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
        (SatResult::Sat, false) => Outcome::Refuted { seconds, model: model() },
        (SatResult::Unsat, true) => Outcome::Refuted { seconds, model: BTreeMap::new() },
        (SatResult::Unknown, _) => Outcome::Unknown { seconds, reason: solver.get_reason_unknown().unwrap_or_else(|| "unknown".into()) },
    }
}

#[cfg(test)]
mod tests {
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
        params.set_u32("rlimit", cfg.timeout_ms.saturating_mul(RLIMIT_PER_MS));
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
