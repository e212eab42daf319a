//! Bounds in launch-time magnitudes (issue 18): a domain `x in [-X, X]`
//! and a tolerance formula in dims and magnitudes are proved for every
//! launch; a formula missing a magnitude, or with a coefficient too small,
//! is refuted with a point where the derived bound exceeds it; bad
//! formulas are clear errors; and sampled launches at very different
//! scales stay within the bound evaluated at each.

use tokitai_compiler::accuracy::magnitude;
use tokitai_compiler::build::{compile_source, BuildError};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;
use tokitai_contracts::ObligationKind;

fn dot(tolerance: &str) -> String {
    format!(
        "kernel dot(x: f16[R, K], w: f16[K]) -> (y: f16[R])\n    requires R >= 1, K >= 1, K <= 1024, R * K <= 1000000\n    domain   x in [-X, X], w in [-W, W]\n    tolerance y: {}\n{{\n    y[r] = f16(sum(k) f32(x[r, k]) * f32(w[k]));\n}}\n",
        tolerance
    )
}

fn compile(text: &str) -> Result<tokitai_compiler::build::Artifacts, String> {
    compile_for(text, &Target::default_cuda())
}

fn compile_for(text: &str, target: &Target) -> Result<tokitai_compiler::build::Artifacts, String> {
    match compile_source(SourceFile::new("mag.tk", text), target) {
        Ok(a) => Ok(a),
        Err(BuildError::Source { rendered, .. }) => Err(rendered),
        Err(e) => Err(format!("{:?}", e)),
    }
}

#[test]
fn a_magnitude_tolerance_is_proved_for_every_launch() {
    let arts = compile(&dot("abs 1.3e-6 * K * X * W + 3e-8, rel 1e-3")).unwrap_or_else(|e| panic!("{}", e));
    let tol: Vec<_> = arts.proofs[0].obligations.iter().filter(|o| o.obligation.kind == ObligationKind::Tolerance).collect();
    assert_eq!(tol.len(), 1);
    assert!(tol[0].outcome.is_proved(), "{:?}", tol[0].outcome);
    assert!(tol[0].obligation.description.contains("K*X*W"), "{}", tol[0].obligation.description);
    // The derived bound is Higham's gamma_h sum |x||w| with the height h =
    // K/256 + 11 of the block reduction the schedule chose, so about
    // u (K/256 + 11) K X W, and the f16 store's subnormal error as its
    // constant; it holds while the f16 result is finite.
    let k = &arts.program.kernels[0];
    let a = magnitude::analyze(k, &arts.kernels[0]);
    let o = &a.outputs[0];
    let shown = a.show(&o.abs);
    assert!(shown.starts_with("2.32") && shown.contains("*K*K*X*W") && shown.contains("6.56"), "{}", shown);
    assert!(o.conditions.iter().any(|c| c.limit == 65504.0), "{:?}", o.conditions);
}

/// Mutants of the bound's form: a term without `W`, a coefficient ten times
/// too small, no constant for the subnormal error, a `rel` below the f16
/// rounding. Each is refuted with a point of the launch space. (The same
/// kernel proved with the right tolerance earlier in this process must not
/// answer for them: the in-process memo keys on the whole kernel.)
#[test]
fn a_wrong_magnitude_term_is_refuted() {
    compile(&dot("abs 1.3e-6 * K * X * W + 3e-8, rel 1e-3")).unwrap_or_else(|e| panic!("{}", e));
    for wrong in ["abs 1.3e-6 * K * X + 3e-8, rel 1e-3", "abs 1.3e-7 * K * X * W + 3e-8, rel 1e-3", "abs 1.3e-6 * K * X * W, rel 1e-3", "abs 1.3e-6 * K * X * W + 3e-8, rel 1e-4"] {
        let rendered = compile(&dot(wrong)).err().unwrap_or_else(|| panic!("`{}` was proved", wrong));
        assert!(rendered.contains("E0913") && rendered.contains("exceeds the tolerance"), "{}:\n{}", wrong, rendered);
        assert!(rendered.contains("the bound that is proved is abs ") && rendered.contains("*K*K*X*W"), "{}:\n{}", wrong, rendered);
    }
}

#[test]
fn bad_formulas_are_clear_errors() {
    for (tol, says) in [
        ("abs 1e-7 * K * Z, rel 1e-3", "`Z` is neither a dim nor a magnitude"),
        ("abs 1e-7 * K * X, rel 1e-3 * K", "a `rel` tolerance is a number"),
        ("abs -1e-7 * K * X, rel 1e-3", "is not a finite non-negative number"),
        ("abs 1e-7 * exp(X), rel 1e-3", "a tolerance formula is a sum of products"),
    ] {
        let rendered = compile(&dot(tol)).err().unwrap_or_else(|| panic!("`{}` compiled", tol));
        assert!(rendered.contains(says), "{}:\n{}", tol, rendered);
    }
    let twice = "kernel f(x: f32[N], y: f32[N]) -> (z: f32[N])\n    requires N >= 1\n    domain x in [-X, X], y in [-X, X]\n    tolerance z: abs 1e-7 * X, rel 1e-6\n{\n    z[i] = x[i] + y[i];\n}\n";
    assert!(compile(twice).err().unwrap_or_default().contains("magnitude `X` bounds two inputs"));
}

/// What the analysis cannot follow in magnitudes is named, not guessed.
#[test]
fn a_non_polynomial_use_of_a_magnitude_is_not_proved() {
    let text = "kernel f(x: f32[N]) -> (y: f32[N])\n    requires N >= 1\n    domain x in [-X, X]\n    tolerance y: abs 1e-6 * X, rel 1e-5\n{\n    y[i] = exp(x[i]);\n}\n";
    let arts = compile(text);
    let found = match arts {
        Ok(a) => a.warnings.iter().map(|w| w.message.clone()).collect::<Vec<_>>().join("\n"),
        Err(e) => e,
    };
    assert!(found.contains("`exp` is not polynomial"), "{}", found);
}

/// The soundness sampler draws magnitude domains at scales 1, 2^-10, 8 and
/// 2^-20, and checks every element against the bound at its launch.
#[test]
fn sampled_launches_at_every_scale_stay_within_their_bound() {
    let arts = compile(&dot("abs 1.3e-6 * K * X * W + 3e-8, rel 1e-3")).unwrap_or_else(|e| panic!("{}", e));
    let rows = tokitai_compiler::soundness::sample(&arts.program.kernels[0], &arts.kernels[0], 20_000);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].elements >= 200, "{:?}", rows[0]);
    assert_eq!(rows[0].violations, 0, "{}", rows[0].worst);
}

const LAYERNORM: &str = include_str!("../../examples/ops/layernorm.tk");

/// LayerNorm's bounds in magnitudes: the forward follows a mean (a sum
/// divided by the row length), the centred sum of squares and `rsqrt(var +
/// eps)`; the backward is a polynomial in four magnitudes. Every tolerance
/// is proved, and the forward's needs the launch condition that keeps
/// `rsqrt`'s argument within half of `eps`.
#[test]
fn layernorm_is_proved_in_magnitudes() {
    let arts = compile(LAYERNORM).unwrap_or_else(|e| panic!("{}", e));
    for (k, proofs) in arts.program.kernels.iter().zip(&arts.proofs) {
        let tol: Vec<_> = proofs.obligations.iter().filter(|o| o.obligation.kind == ObligationKind::Tolerance).collect();
        assert!(!tol.is_empty() && tol.iter().all(|o| o.outcome.is_proved()), "{}: {:?}", k.name, tol.iter().map(|o| &o.outcome).collect::<Vec<_>>());
    }
    let fwd = arts.program.kernels.iter().position(|k| k.name == "layernorm_fwd").unwrap();
    let a = magnitude::analyze(&arts.program.kernels[fwd], &arts.kernels[fwd]);
    let rstd = a.outputs.iter().find(|o| o.output == "rstd").unwrap();
    assert!(rstd.conditions.iter().any(|c| c.what.contains("rsqrt") && c.limit < 1e-5 && c.limit > 4e-6), "{:?}", rstd.conditions);
    // The mean's error enters var squared (the centred sum of squares), so
    // rstd's error is of order X^2, not X^2 / eps times the mean's error.
    assert!(a.show(&rstd.abs).contains("*X*X") && !a.show(&rstd.abs).contains("X*X*X"), "{}", a.show(&rstd.abs));
}

/// Mutants of LayerNorm's tolerance: the forward without its X^3 term (the
/// error of rstd where var is near 0, times |x - mean|), rstd's X^2 term ten
/// times too small, the backward without its X^2 S^3 G term. Each is
/// refuted with a point.
#[test]
fn a_wrong_layernorm_term_is_refuted() {
    for (right, wrong) in [
        (" + 7.5e-5 * X * X * X\n", "\n"),
        ("+ 2e-5 * X * X + 1.3e-30 * X", "+ 2e-6 * X * X + 1.3e-30 * X"),
        ("2.5e-6 * X * X * S * S * S * G + ", ""),
    ] {
        assert!(LAYERNORM.contains(right), "the mutant's anchor `{}` is gone from layernorm.tk", right);
        let rendered = compile(&LAYERNORM.replacen(right, wrong, 1)).err().unwrap_or_else(|| panic!("without `{}` it was proved", right));
        assert!(rendered.contains("E0913") && rendered.contains("exceeds the tolerance"), "{}:\n{}", right, rendered);
    }
}

/// Division and `rsqrt` are followed only where their bounds are known: a
/// divisor that is a size at least 1 or a positive constant, an argument
/// bounded away from 0 by a term with a numeric domain. Anything else is
/// named.
#[test]
fn division_and_rsqrt_outside_their_rules_are_named() {
    let case = |requires: &str, body: &str| {
        format!("kernel f(x: f32[R, N], eps: f32) -> (y: f32[R])\n    requires R >= 1, {}, N <= 4096\n    domain x in [-X, X], eps in [0.00001, 0.00001]\n    tolerance y: abs 1e-6 * X, rel 1e-5\n{{\n    y[r] = {};\n}}\n", requires, body)
    };
    for (text, says) in [
        (case("N >= 0", "(sum(c) x[r, c]) / f32(N)"), "lets be 0"),
        (case("N >= 1", "(sum(c) x[r, c]) / x[r, 0]"), "not a size or a positive constant"),
        (case("N >= 1", "rsqrt((sum(c) x[r, c] * x[r, c]) / f32(N))"), "not bounded away from 0"),
    ] {
        let found = match compile(&text) {
            Ok(a) => a.warnings.iter().map(|w| w.message.clone()).collect::<Vec<_>>().join("\n"),
            Err(e) => e,
        };
        assert!(found.contains(says), "{}\n{}", text, found);
    }
    // With eps the same rsqrt is proved. A sum of squares (not centred)
    // keeps its error relative, so rsqrt's is relative too: no term in X.
    let proved = compile(&case("N >= 1", "rsqrt((sum(c) x[r, c] * x[r, c]) / f32(N) + eps)").replace("abs 1e-6 * X, rel 1e-5", "abs 1e-30, rel 4e-6"));
    let arts = proved.unwrap_or_else(|e| panic!("{}", e));
    assert!(arts.proofs[0].obligations.iter().filter(|o| o.obligation.kind == ObligationKind::Tolerance).all(|o| o.outcome.is_proved()));
}

/// The sampler's coherent draws put whole rows near one value (var near 0,
/// where rstd is largest and the mean's error matters most), at X from
/// 2^-20 to 8: every element within the bound of its launch.
#[test]
fn sampled_layernorm_launches_stay_within_their_bound() {
    let arts = compile(LAYERNORM).unwrap_or_else(|e| panic!("{}", e));
    for name in ["layernorm_fwd", "layernorm_gelu_fwd", "layernorm_bwd", "layernorm_gelu_bwd"] {
        let i = arts.program.kernels.iter().position(|k| k.name == name).unwrap();
        let rows = tokitai_compiler::soundness::sample(&arts.program.kernels[i], &arts.kernels[i], 20_000);
        assert!(!rows.is_empty());
        for r in rows {
            assert!(r.elements >= 100, "{:?}", r);
            assert_eq!(r.violations, 0, "{}", r.worst);
        }
    }
}

/// A gradient times GELU's derivative (a function, as the fused backward
/// `layernorm_gelu_bwd` writes it) at `bind`, as a one-kernel program
/// with tolerance `tolerance`.
fn gelu_slope(bind: &str, tolerance: &str) -> String {
    format!(
        "fn gelu_slope(w: f32) -> f32 {{\n    let t = tanh(0.7978845608 * (w + 0.044715 * w * w * w));\n    0.5 * (1.0 + t) + 0.5 * w * (1.0 - t * t) * (0.7978845608 * (1.0 + 0.134145 * w * w))\n}}\n\nkernel gs(x: f16[R], g: f16[R]) -> (y: f16[R])\n    requires R >= 1, R <= 1000000\n    domain   x in [-X, X], g in [-G, G]\n    tolerance y: {}\n{{\n    y[r] = f16(f32(g[r]) * gelu_slope({}));\n}}\n",
        tolerance, bind
    )
}

/// GELU's derivative is proved in magnitudes where its argument is clamped
/// (`fp::gelu_slope`): the result is at most 1.13 G whatever X is, and its
/// error a constant times G (the derivative's roundings; `w` is exact
/// here). Unclamped, clamped beyond the lemma's 64, or of another shape,
/// it gets no bound in magnitudes; a coefficient below the derived one is
/// refuted.
#[test]
fn gelu_slope_is_proved_in_magnitudes_where_clamped() {
    let clamped = "min(max(f32(x[r]), -8.0), 8.0)";
    let right = "abs 5.1e-5 * G + 3e-8, rel 1e-3";
    for target in [Target::default_cuda(), "hip-gfx942".parse().unwrap()] {
        let arts = compile_for(&gelu_slope(clamped, right), &target).unwrap_or_else(|e| panic!("{}", e));
        let a = magnitude::analyze(&arts.program.kernels[0], &arts.kernels[0]);
        let o = &a.outputs[0];
        assert!(o.failure.is_none(), "{:?}", o.failure);
        let shown = a.show(&o.abs);
        assert!(shown.contains("e-5*G") && !shown.contains('X'), "{}", shown);
        // The f16 store's finiteness: 1.129 G.
        assert!(o.conditions.iter().any(|c| a.show(&c.poly).starts_with("1.129")), "{:?}", o.conditions);
    }
    let rendered = compile(&gelu_slope(clamped, "abs 5e-6 * G + 3e-8, rel 1e-3")).err().expect("a coefficient ten times too small is refuted");
    assert!(rendered.contains("E0913") && rendered.contains("exceeds the tolerance"), "{}", rendered);
    for (bind, says) in [
        ("f32(x[r])", "not clamped"),
        ("min(max(f32(x[r]), -100.0), 100.0)", "the clamp must be in (0, 64]"),
        ("max(f32(x[r]), -8.0)", "not clamped"),
    ] {
        let arts = compile(&gelu_slope(bind, right)).unwrap_or_else(|e| panic!("{}", e));
        let failure = magnitude::analyze(&arts.program.kernels[0], &arts.kernels[0]).outputs[0].failure.clone();
        assert!(failure.as_ref().is_some_and(|(why, _)| why.contains(says)), "{}: {:?}", bind, failure);
    }
    // `k w` where the derivative has `k w^2`: not the form.
    let other = gelu_slope(clamped, right).replace("0.134145 * w * w", "0.134145 * w");
    let arts = compile(&other).unwrap_or_else(|e| panic!("{}", e));
    let failure = magnitude::analyze(&arts.program.kernels[0], &arts.kernels[0]).outputs[0].failure.clone();
    assert!(failure.as_ref().is_some_and(|(why, _)| why.contains("`tanh` is not polynomial")), "{:?}", failure);
}

/// The linear layer with GELU in its epilogue (`linear_gelu_fwd`, the
/// tanh form), as a one-kernel program with tolerance `tolerance`.
fn linear_gelu(tolerance: &str) -> String {
    format!(
        "kernel lg(x: f16[M, K], w: f16[K, N], b: f16[N]) -> (y: f16[M, N])\n    requires M >= 1, N >= 1, K >= 1, K <= 4096, M * K <= 1000000000, K * N <= 1000000000, M * N <= 1000000000\n    domain   x in [-X, X], w in [-W, W], b in [-B, B]\n    tolerance y: {}\n{{\n    y[m, n] = {{\n        let v = sum(k) f32(x[m, k]) * f32(w[k, n]) + f32(b[n]);\n        let t = tanh(0.7978845608 * (v + 0.044715 * v * v * v));\n        f16(0.5 * v * (1.0 + t))\n    }};\n}}\n",
        tolerance
    )
}

/// GELU in a contraction's epilogue is proved in magnitudes: the sum's
/// error passes through GELU's slope (1.672 times the linear layer's
/// `K K X W` term), the argument's roundings and `tanh`'s library error
/// cost `K X W` and `B` terms and a constant, and the cube of the argument
/// must stay finite (a launch condition). Without the `B` term, or with
/// the slope's coefficient missing, it is refuted; a GELU of another shape
/// (`v * v` in place of the cube) gets no bound in magnitudes.
#[test]
fn gelu_in_the_epilogue_is_proved_in_magnitudes() {
    let right = "abs 5e-7 * K * K * X * W + 4e-7 * B + 1e-6, rel 1e-3";
    for target in [Target::default_cuda(), "hip-gfx942".parse().unwrap()] {
        let arts = compile_for(&linear_gelu(right), &target).unwrap_or_else(|e| panic!("{}", e));
        let a = magnitude::analyze(&arts.program.kernels[0], &arts.kernels[0]);
        let o = &a.outputs[0];
        assert!(o.failure.is_none(), "{:?}", o.failure);
        let shown = a.show(&o.abs);
        // 1.672 x (the plain layer's 5.96e-8) and the B term.
        assert!(shown.starts_with("9.97") && shown.contains("*K*K*X*W") && shown.contains("*B"), "{}", shown);
        assert!(o.conditions.iter().any(|c| c.what.contains("the cube of GELU's argument")), "{:?}", o.conditions);
    }
    for wrong in ["abs 5e-7 * K * K * X * W + 1e-6, rel 1e-3", "abs 6e-8 * K * K * X * W + 4e-7 * B + 1e-6, rel 1e-3"] {
        let rendered = compile(&linear_gelu(wrong)).err().unwrap_or_else(|| panic!("`{}` was proved", wrong));
        assert!(rendered.contains("E0913") && rendered.contains("exceeds the tolerance"), "{}:\n{}", wrong, rendered);
    }
    // Emitted with a warning (W0913): its tolerance is tested, not proved.
    let arts = compile(&linear_gelu(right).replace("0.044715 * v * v * v", "0.044715 * v * v")).unwrap_or_else(|e| panic!("{}", e));
    let failure = magnitude::analyze(&arts.program.kernels[0], &arts.kernels[0]).outputs[0].failure.clone();
    assert!(failure.as_ref().is_some_and(|(why, _)| why.contains("`tanh` is not polynomial")), "{:?}", failure);
}

/// Sampled launches of the fused layer at every scale stay within the
/// bound evaluated at each (the f64 oracle against the CPU schedule).
#[test]
fn sampled_gelu_epilogue_launches_stay_within_their_bound() {
    let arts = compile(&linear_gelu("abs 5e-7 * K * K * X * W + 4e-7 * B + 1e-6, rel 1e-3")).unwrap_or_else(|e| panic!("{}", e));
    let rows = tokitai_compiler::soundness::sample(&arts.program.kernels[0], &arts.kernels[0], 20_000);
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r.elements >= 100, "{:?}", r);
        assert_eq!(r.violations, 0, "{}", r.worst);
    }
}
