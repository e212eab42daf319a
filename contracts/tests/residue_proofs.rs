//! The residue arithmetic's obligations (`residue.rs`) through the Z3
//! backend: every one proved for moduli beside the examples' (p = 2 and
//! odd primes, small and large k; the examples' own are proved by their
//! build), and each wrong rule of
//! `residue::mutants` refuted with a model that really is a
//! counterexample (checked here by evaluating the query at it).

#![cfg(feature = "z3")]

use tokitai_contracts::residue::{mutants, obligations, Modulus};
use tokitai_contracts::z3_backend::{discharge, Config};
use tokitai_contracts::{Formula, Outcome};

/// The examples' moduli (2^16, 3^10) are proved by the build of
/// `examples/ops/padic.tk` itself; these add small and large others.
const MODULI: [(u64, u32); 3] = [(2, 8), (7, 5), (65521, 2)];
/// The mutants are refuted at the examples' moduli too.
const MUTANT_MODULI: [(u64, u32); 5] = [(2, 8), (2, 16), (3, 10), (7, 5), (65521, 2)];

fn cfg() -> Config {
    Config { timeout_ms: 20_000 }
}

#[test]
fn every_obligation_is_proved() {
    for (p, k) in MODULI {
        let m = Modulus::new(p, k).unwrap();
        for ob in obligations(&m) {
            let out = discharge(&ob, &cfg());
            assert!(out.is_proved(), "{}: {} -> {:?}", m, ob.description, out);
        }
    }
}

#[test]
fn every_wrong_rule_is_refuted_with_a_real_counterexample() {
    for (p, k) in MUTANT_MODULI {
        let m = Modulus::new(p, k).unwrap();
        for (name, ob) in mutants(&m) {
            let Outcome::Refuted { model, .. } = discharge(&ob, &cfg()) else { panic!("{}: mutant `{}` was not refuted", m, name) };
            let at = |v: &str| model.get(v).map(|x| *x as i128);
            let holds = |f: &Formula| f.eval(&at).unwrap_or_else(|| panic!("{}: `{}`: model {:?} leaves a variable open", m, name, model));
            assert!(ob.hypotheses.iter().all(holds), "{}: `{}`: the model {:?} breaks a hypothesis", m, name, model);
            assert!(!holds(&ob.goal), "{}: `{}`: the goal holds at the model {:?}", m, name, model);
        }
    }
}
