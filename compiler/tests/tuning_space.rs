//! The tuning space (issue 21): every candidate a kernel's schedule offers
//! is generated and proved before it can run; a candidate that fails a
//! proof, or whose summation order cannot meet the declared tolerance, is
//! rejected: no code is emitted for it, so no launch and no tuner can take
//! it, and the build and the report say which and why.

use tokitai_compiler::build::{compile_source, Artifacts, BuildError};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

/// A row sum whose tolerance (`rel 1e-6`) the plain 256-thread order meets
/// (at most 4 terms a thread, then 8 butterfly levels: about 8.4e-7) and
/// the 512-thread one too, but not 128 threads (8 terms a thread: about
/// 1.1e-6) nor the cached form (runs of 8 in each thread).
const TIGHT: &str = "kernel tight_row_sum(x: f16[R, C]) -> (s: f32[R])
    requires R >= 1, C >= 1, C <= 1024
    domain   x in [0.0, 1.0]
    tolerance s: abs 1e-40, rel 1e-6
{
    s[r] = sum(c) f32(x[r, c]);
}
";

fn compile(name: &str, text: &str) -> Artifacts {
    match compile_source(SourceFile::new(name, text), &Target::default_cuda()) {
        Ok(a) => a,
        Err(BuildError::Source { rendered, .. }) => panic!("{}", rendered),
        Err(e) => panic!("{:?}", e),
    }
}

#[test]
fn a_candidate_that_fails_its_tolerance_proof_has_no_code() {
    let arts = compile("tight.tk", TIGHT);
    let emitted: Vec<&str> = arts.variants[0].iter().map(|v| v.ir.name.as_str()).collect();
    let rejected: Vec<&str> = arts.rejected[0].iter().map(|r| r.name.as_str()).collect();
    // (With the observing twins of the kernel and of that candidate.)
    assert_eq!(emitted, ["tight_row_sum_b512", "tight_row_sum_obs", "tight_row_sum_b512_obs"], "only the candidate whose order meets the tolerance is emitted");
    // The 128-thread rows and every cached shape (runs of 8 in a thread).
    assert!(rejected.contains(&"tight_row_sum_c128x1") && rejected.contains(&"tight_row_sum_b128"), "{:?}", rejected);
    // (And their observing twins, which fail as their originals do.)
    let original = |r: &&str| -> String { r.strip_suffix(tokitai_compiler::schedule::observe::TWIN_SUFFIX).unwrap_or(r).to_string() };
    assert!(rejected.iter().all(|r| original(r) == "tight_row_sum_b128" || original(r).starts_with("tight_row_sum_c")), "{:?}", rejected);
    for r in &arts.rejected[0] {
        assert!(r.reason.contains("tolerance of `s`") && r.reason.contains("not proved"), "{}: {}", r.name, r.reason);
        // No code: not among the printed kernels, not a launchable variant.
        assert!(arts.hip.iter().all(|(n, _)| n != &r.name), "{} has code", r.name);
        assert!(!arts.bindings.contains(&format!("super::tk_info::Variant {{ name: {:?}", r.name)), "{} is a variant in the bindings", r.name);
        assert!(arts.manifest.kernels.iter().all(|k| k.name != r.name), "{} is in the manifest", r.name);
        // Listed, with the reason, where the runtime's tuner reads it.
        assert!(arts.bindings.contains(&format!("({:?}, ", r.name)), "{} missing from REJECTED", r.name);
    }
    // Missing a tolerance is what a tuning space is for: recorded, not a
    // build warning (W0930 is for any other obligation a generated form
    // fails: a compiler bug).
    assert!(arts.warnings.iter().all(|d| d.code != "W0930"), "{:?}", arts.warnings);
    // The kernel's own schedule and the emitted candidate are proved.
    assert!(arts.proofs[0].diagnostics().iter().all(|d| !d.is_error()));
    let proved: Vec<&str> = arts.variant_proofs.iter().map(|p| p.kernel.as_str()).collect();
    assert_eq!(proved, ["tight_row_sum_b512", "tight_row_sum_obs", "tight_row_sum_b512_obs"]);
}

#[test]
fn a_cached_candidate_whose_order_misses_a_magnitude_tolerance_is_rejected_before_any_proof() {
    // LayerNorm's tolerances are in launch-time magnitudes: the cached
    // form's runs of 8 raise the bound's constant part past them, which the
    // magnitude analysis decides without the solver.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/ops/layernorm.tk")).expect("layernorm.tk");
    let program = tokitai_compiler::driver::check_source(&SourceFile::new("layernorm.tk", &text)).program.expect("checks");
    let target = Target::default_cuda();
    let irs = tokitai_compiler::schedule::schedule_program(&program, &target).expect("schedules");
    let at = program.kernels.iter().position(|k| k.name == "layernorm_fwd").expect("layernorm_fwd");
    let c = tokitai_compiler::schedule::schedule_candidates(&program.kernels[at], &target, &irs[at]).expect("candidates");
    assert!(c.variants.iter().all(|v| !v.ir.name.contains("_c")), "no cached form is emitted");
    assert!(!c.rejected.is_empty());
    for r in &c.rejected {
        assert!(r.name.starts_with("layernorm_fwd_c") && r.params.contains("cached in registers"), "{:?}", r);
        assert!(r.reason.contains("exceeds the declared tolerance"), "{}", r.reason);
    }
}

/// softmax from the runtime's examples, and its candidates.
fn example(file: &str) -> Artifacts {
    let path = format!("{}/../examples/ops/{}", env!("CARGO_MANIFEST_DIR"), file);
    compile(file, &std::fs::read_to_string(path).expect("example"))
}

#[test]
fn fast_intrinsic_candidates_are_proved_under_their_documented_error_or_rejected() {
    use tokitai_compiler::accuracy::{analyze_at, envelope_of};
    let arts = example("softmax.tk");
    let at = arts.program.kernels.iter().position(|k| k.name == "softmax_fwd").expect("softmax_fwd");
    let k = &arts.program.kernels[at];
    let find = |n: &str| arts.variants[at].iter().find(|v| v.ir.name == n).unwrap_or_else(|| panic!("{} emitted", n));
    let (accurate, fast) = (find("softmax_fwd_c128x1"), find("softmax_fwd_c128x1_fi"));
    // What is printed is what was analysed: the intrinsics, and no
    // accurate `expf` or `/` left in the row's arithmetic.
    let hip = tokitai_compiler::codegen::hip::kernel_source(&fast.ir);
    assert!(hip.contains("__expf(") && hip.contains("__fdividef("), "{}", hip);
    assert!(!hip.contains(" expf("), "{}", hip);
    assert!(fast.ir.fast_intrinsics && !accurate.ir.fast_intrinsics);
    // The analysis charges the intrinsics' larger error: at one launch,
    // the fast form's bound is larger, and both within the tolerance.
    let dims = [64, 1024];
    let bound = |ir| envelope_of(&[analyze_at(k, ir, &dims)])[0].2;
    let (b_accurate, b_fast) = (bound(&accurate.ir), bound(&fast.ir));
    assert!(b_fast > b_accurate && b_fast <= 2e-3, "accurate {:e}, fast {:e}", b_accurate, b_fast);
    // router_softmax's `rel 1e-5` is tighter than `__fdividef`'s 2 ulp:
    // every fast form is rejected for its tolerance, and has no code.
    let moe = example("moe.tk");
    let r = moe.program.kernels.iter().position(|k| k.name == "router_softmax").expect("router_softmax");
    let fast: Vec<_> = moe.rejected[r].iter().filter(|x| x.name.ends_with("_fi")).collect();
    assert!(!fast.is_empty(), "{:?}", moe.rejected[r]);
    assert!(fast.iter().all(|x| x.reason.contains("tolerance of `p`")), "{:?}", fast);
    assert!(moe.variants[r].iter().all(|v| !v.ir.fast_intrinsics));
    assert!(moe.hip.iter().all(|(n, _)| !n.starts_with("router_softmax") || !n.ends_with("_fi")));
}
