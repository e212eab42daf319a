//! The solver pipeline against brute force. Random small queries over
//! boxed integer variables (sums, products, division and remainder by
//! constants and by variables, minimum, conditionals) are decided by
//! enumerating every point of the box; `discharge` and the mutation test's
//! `refute_any_quickly` must agree wherever they answer: a proof only of a
//! query that holds at every point, a refutation only with a model that
//! really is a counterexample. The relaxation, the slicing, the fixed-value
//! and box searches and the memo all sit on this path, so an unsound
//! shortcut in any of them shows here.

#![cfg(feature = "z3")]

use proptest::prelude::*;
use tokitai_contracts::z3_backend::{discharge, refute_any_quickly, Config};
use tokitai_contracts::{Formula, Obligation, ObligationKind, Outcome, Term};

/// Variables `a`..`d`: `a`, `b` range over `[lo, lo + span]` with `lo` in
/// {-3, 0}; `c`, `d` (divisors) over `[1, 1 + span]`.
const VARS: [&str; 4] = ["a", "b", "c", "d"];

fn term(depth: u32) -> BoxedStrategy<Term> {
    let leaf = prop_oneof![(0usize..4).prop_map(|i| Term::var(VARS[i])), (-4i64..9).prop_map(Term::c),];
    if depth == 0 {
        return leaf.boxed();
    }
    let sub = term(depth - 1);
    let divisor = prop_oneof![(2usize..4).prop_map(|i| Term::var(VARS[i])), (1i64..6).prop_map(Term::c),];
    prop_oneof![
        2 => leaf,
        2 => (sub.clone(), sub.clone()).prop_map(|(x, y)| x.add(y)),
        1 => (sub.clone(), sub.clone()).prop_map(|(x, y)| x.sub(y)),
        2 => (sub.clone(), sub.clone()).prop_map(|(x, y)| x.mul(y)),
        1 => (sub.clone(), divisor.clone()).prop_map(|(x, d)| x.div(d)),
        1 => (sub.clone(), divisor).prop_map(|(x, d)| x.rem(d)),
        1 => (sub.clone(), sub.clone()).prop_map(|(x, y)| x.min(y)),
        1 => (sub.clone(), sub.clone(), sub).prop_map(|(x, y, z)| Term::Ite(Box::new(x.clone().lt(y.clone())), Box::new(x), Box::new(y.add(z)))),
    ]
    .boxed()
}

fn atom() -> BoxedStrategy<Formula> {
    (term(2), term(2), 0u8..3)
        .prop_map(|(x, y, op)| match op {
            0 => x.lt(y),
            1 => x.le(y),
            _ => x.eq(y),
        })
        .boxed()
}

fn query() -> impl Strategy<Value = Obligation> {
    (prop_oneof![Just(-3i64), Just(0)], 1i64..5, proptest::collection::vec(atom(), 0..3), atom(), any::<bool>()).prop_map(|(lo, span, extra, goal, negate)| {
        let mut hypotheses = Vec::new();
        for (i, v) in VARS.iter().enumerate() {
            let low = if i < 2 { lo } else { 1 };
            hypotheses.push(Term::var(*v).within(Term::c(low), Term::c(low + span + 1)));
        }
        hypotheses.extend(extra);
        let goal = if negate { goal.not() } else { goal };
        Obligation { kind: ObligationKind::InBounds, description: "random".into(), origin: (0, 0), hypotheses, goal, show: vec![] }
    })
}

/// Brute force over the box: `Some(point)` of a counterexample, `None` if
/// the query holds everywhere.
fn counterexample(ob: &Obligation) -> Option<[i64; 4]> {
    let range = |h: &Formula| -> (i64, i64) {
        match h {
            Formula::And(parts) => match (&parts[0], &parts[1]) {
                (Formula::Le(Term::Const(lo), _), Formula::Lt(_, Term::Const(hi))) => (*lo, *hi),
                _ => panic!("unexpected box {:?}", h),
            },
            _ => panic!("unexpected box {:?}", h),
        }
    };
    let boxes: Vec<(i64, i64)> = ob.hypotheses[..4].iter().map(range).collect();
    for a in boxes[0].0..boxes[0].1 {
        for b in boxes[1].0..boxes[1].1 {
            for c in boxes[2].0..boxes[2].1 {
                for d in boxes[3].0..boxes[3].1 {
                    let p = [a, b, c, d];
                    if holds_at(ob, &p) == Some(false) {
                        return Some(p);
                    }
                }
            }
        }
    }
    None
}

/// The query at one point: `Some(false)` when every hypothesis holds and
/// the goal fails.
fn holds_at(ob: &Obligation, p: &[i64; 4]) -> Option<bool> {
    let env = |n: &str| VARS.iter().position(|v| *v == n).map(|i| p[i] as i128);
    for h in &ob.hypotheses {
        if !h.eval(&env)? {
            return Some(true);
        }
    }
    ob.goal.eval(&env)
}

fn model_refutes(ob: &Obligation, model: &std::collections::BTreeMap<String, i64>) -> bool {
    let p = VARS.map(|v| *model.get(v).unwrap_or(&0));
    holds_at(ob, &p) == Some(false)
}

/// Brute force: is there a point of the box where every hypothesis and
/// the goal hold (what a `requires-satisfiable` obligation claims)?
fn satisfiable(ob: &Obligation) -> bool {
    let mut flipped = ob.clone();
    flipped.goal = ob.goal.clone().not();
    counterexample(&flipped).is_some()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn discharge_agrees_with_brute_force(ob in query()) {
        // The box guarantees every hypothesis and the goal is defined
        // (divisors are at least 1) where the brute force looks.
        let truth = counterexample(&ob);
        let cfg = Config { timeout_ms: 2_000 };
        match discharge(&ob, &cfg) {
            Outcome::Proved { .. } => prop_assert!(truth.is_none(), "proved, but fails at {:?}: {:?}", truth, ob),
            Outcome::Refuted { model, .. } => {
                prop_assert!(truth.is_some(), "refuted a query that holds: {:?}", ob);
                prop_assert!(model_refutes(&ob, &model), "the model {:?} is not a counterexample of {:?}", model, ob);
            }
            Outcome::Unknown { .. } => {}
        }
        if let Some((_, Outcome::Refuted { model, .. })) = refute_any_quickly(&[&ob], &cfg) {
            prop_assert!(truth.is_some() && model_refutes(&ob, &model), "quick refutation {:?} of {:?}", model, ob);
        }
    }

    #[test]
    fn satisfiability_agrees_with_brute_force(ob in query()) {
        let ob = Obligation { kind: ObligationKind::RequiresSatisfiable, ..ob };
        let truth = satisfiable(&ob);
        match discharge(&ob, &Config { timeout_ms: 2_000 }) {
            Outcome::Proved { .. } => prop_assert!(truth, "claimed satisfiable, but no point satisfies {:?}", ob),
            Outcome::Refuted { .. } => prop_assert!(!truth, "claimed unsatisfiable, but a point satisfies {:?}", ob),
            Outcome::Unknown { .. } => {}
        }
    }
}
