//! Domain relations and the ratio lemma (issue 18): `a / (sqrt(y) + eps)`
//! is bounded where `y` reaches zero when each term of `a` is dominated by
//! a term of `y` (a square, or a relation `m * m <= c * v`). Without the
//! relation the same tolerance is not proved; a numerator with a term no
//! part of `y` dominates is not bounded by the lemma; bad relations are
//! clear errors; and the verifier's soundness sampler, drawing inputs that
//! the relation admits, stays within the proved bound.

use tokitai_compiler::build::{compile_source, BuildError};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;
use tokitai_contracts::ObligationKind;

/// Adam's update in one statement: `m1 / (sqrt(v1) + eps)` with `m1` and
/// `v1` the new moments, `v` from 0.
fn adam(relation: &str, numerator: &str, tolerance: &str) -> String {
    format!(
        "kernel upd(m: f32[N], v: f32[N], g: f32[N]) -> (q: f32[N])\n    requires N >= 1, N <= 1000000\n    domain   m in [-10.0, 10.0], v in [0.0, 100.0], g in [-10.0, 10.0]{}\n    tolerance q: {}\n{{\n    m1[i] = 0.9 * m[i] + 0.1 * g[i];\n    v1[i] = 0.999 * v[i] + 0.001 * (g[i] * g[i]);\n    q[i] = ({}) / (sqrt(v1[i]) + 0.00000001);\n}}\n",
        relation, tolerance, numerator
    )
}

fn compile(text: &str) -> Result<tokitai_compiler::build::Artifacts, String> {
    match compile_source(SourceFile::new("ratio.tk", text), &Target::default_cuda()) {
        Ok(a) => Ok(a),
        Err(BuildError::Source { rendered, .. }) => Err(rendered),
        Err(e) => Err(format!("{:?}", e)),
    }
}

fn tolerance_proved(arts: &tokitai_compiler::build::Artifacts) -> bool {
    arts.proofs[0].obligations.iter().filter(|o| o.obligation.kind == ObligationKind::Tolerance).all(|o| o.outcome.is_proved())
}

#[test]
fn the_update_is_bounded_where_v_reaches_zero() {
    let arts = compile(&adam(",\n             m * m <= 64.0 * v", "m1[i]", "abs 1e-5, rel 1e-5")).unwrap_or_else(|e| panic!("{}", e));
    assert!(tolerance_proved(&arts));
    // |m1| / sqrt(v1) <= 0.9 sqrt(64 / 0.999) + 0.1 sqrt(1 / 0.001) = 10.37:
    // the derived bound is a few ulps of that.
    let acc = tokitai_compiler::accuracy::analyze(&arts.program.kernels[0], &arts.kernels[0]);
    let (abs, rel) = acc.outputs[0].envelope().expect("a bound");
    assert!(abs + rel * 10.4 < 1e-5 && abs + rel * 10.4 > 10.0 * 6e-8, "abs {:e} rel {:e}", abs, rel);
}

/// Not proved: no bound could be derived (the kernel builds, with a
/// warning, its tolerance tested rather than proved).
fn unbounded(text: &str) {
    let arts = compile(text).unwrap_or_else(|e| panic!("{}", e));
    assert!(!tolerance_proved(&arts), "proved:\n{}", text);
    let acc = tokitai_compiler::accuracy::analyze(&arts.program.kernels[0], &arts.kernels[0]);
    let failure = acc.outputs[0].failure.as_ref().map(|f| f.0.clone()).unwrap_or_default();
    assert!(failure.contains("square root at zero"), "{}", failure);
}

#[test]
fn without_the_relation_the_same_tolerance_is_not_proved() {
    unbounded(&adam("", "m1[i]", "abs 1e-5, rel 1e-5"));
}

#[test]
fn a_term_that_nothing_in_the_divisor_dominates_is_not_bounded_by_the_lemma() {
    // `m1 + 1.0`: the constant stays 1 while the divisor falls to eps.
    unbounded(&adam(",\n             m * m <= 64.0 * v", "m1[i] + 1.0", "abs 1e-5, rel 1e-5"));
    // `m1 * g`: quadratic in the atoms.
    unbounded(&adam(",\n             m * m <= 64.0 * v", "m1[i] * g[i]", "abs 1e-5, rel 1e-5"));
}

#[test]
fn bad_relations_are_clear_errors() {
    for (relation, says) in [
        (",\n             m * g <= v", "must read `t * t <= c * s`"),
        (",\n             m * m <= -1.0 * v", "positive and finite"),
        (",\n             m * m <= 64.0 * w", "`w` is not a float input tensor"),
        (",\n             m * m <= 64.0 * q", "`q` is not a float input tensor"),
    ] {
        let rendered = compile(&adam(relation, "m1[i]", "abs 1e-5, rel 1e-5")).err().unwrap_or_else(|| panic!("`{}` was accepted", relation));
        assert!(rendered.contains("E0710") && rendered.contains(says), "{}:\n{}", relation, rendered);
    }
}

#[test]
fn sampled_launches_that_the_relation_admits_stay_within_the_bound() {
    let arts = compile(&adam(",\n             m * m <= 64.0 * v", "m1[i]", "abs 1e-5, rel 1e-5")).unwrap_or_else(|e| panic!("{}", e));
    let rows = tokitai_compiler::soundness::sample(&arts.program.kernels[0], &arts.kernels[0], 20_000);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].elements >= 200, "{:?}", rows[0]);
    assert_eq!(rows[0].violations, 0, "{:?}", rows[0]);
    assert!(rows[0].worst_fraction > 0.0, "nothing was compared: {:?}", rows[0]);
}
