//! The matrix-unit family on AMD (issue 19): `v_mfma_f32_16x16x16f16` and
//! its bf16 form on CDNA3 (gfx942), scheduled, proved and printed like the
//! NVIDIA `mma.sync` family, with 64-lane wavefronts. None of it can run
//! here (no AMD GPU): what is shown is the schedule's choice, its proofs
//! on the printed KernelIr, the verifier refuting its broken fragment
//! reads, and (tests/device_compile.rs) hipcc compiling it.

mod common;

use common::{compile_example, edit_fragment_loads};
use tokitai_compiler::accuracy::magnitude::{self, Verdict};
use tokitai_compiler::kir::{Fragment, IExpr, MmaShape, ReductionOrder, Schedule};
use tokitai_compiler::target::Target;
use tokitai_compiler::verify::first_refutation;
use tokitai_contracts::z3_backend::Config;

fn cdna3() -> Target {
    "hip-gfx942".parse().unwrap()
}

#[test]
fn contractions_on_cdna3_take_the_mfma_unit_and_are_proved() {
    // Compiling verifies: every obligation of every kernel and variant is
    // proved, or the build fails.
    let arts = compile_example("matmul.tk", &cdna3());
    for ir in &arts.kernels {
        assert!(matches!(ir.schedule, Schedule::TensorCore { shape: MmaShape::Mfma16x16x16, .. }), "{}: {:?}", ir.name, ir.schedule);
        assert_eq!(ir.block, 256, "{}: four wavefronts", ir.name);
        assert_eq!(ir.reduction_order.values().copied().collect::<Vec<_>>(), [ReductionOrder::MatrixUnit { k: 16, per_promotion: 1 }], "{}", ir.name);
    }
    for (k, ir) in arts.program.kernels.iter().zip(&arts.kernels) {
        let a = magnitude::analyze(k, ir);
        assert!(matches!(a.outputs[0].verdict, Some(Verdict::Within(_))), "{}: {:?}", k.name, a.outputs[0]);
    }
    let text = &arts.hip.iter().find(|(n, _)| n == "matmul_f16").unwrap().1;
    assert!(text.contains("__builtin_amdgcn_mfma_f32_16x16x16f16("), "{}", text);
    let text = &arts.hip.iter().find(|(n, _)| n == "gemm_bf16").unwrap().1;
    assert!(text.contains("__builtin_amdgcn_mfma_f32_16x16x16bf16_1k("), "{}", text);
    // No NVIDIA instruction leaks into the AMD text.
    assert!(arts.hip.iter().all(|(_, t)| !t.contains("mma.sync") && !t.contains("ldmatrix") && !t.contains("wgmma")));
}

#[test]
fn the_linear_layers_get_the_unit_as_a_guarded_variant_on_cdna3() {
    // `linear_fwd` admits sums of any length: the kernel stays on the
    // SIMT schedule and the unit is its variant for sums of at least 64.
    let arts = compile_example("linear.tk", &cdna3());
    let at = arts.program.kernels.iter().position(|k| k.name == "linear_fwd").unwrap();
    assert!(matches!(arts.kernels[at].schedule, Schedule::Contraction { .. }));
    let v = arts.variants[at].iter().find(|v| v.ir.name == "linear_fwd_mma").expect("an MFMA variant");
    assert!(matches!(v.ir.schedule, Schedule::TensorCore { shape: MmaShape::Mfma16x16x16, .. }));
    assert_eq!(v.guard.map(|g| g.at_least), Some(64));
    // No warpgroup variants on AMD.
    assert!(arts.variants.iter().flatten().all(|v| !matches!(v.ir.schedule, Schedule::Warpgroup { .. })));
}

#[test]
fn cdna2_keeps_the_simt_schedule_because_its_unit_flushes_subnormals() {
    // MI200's MFMA flushes subnormal f16 and bf16 operands: a product of a
    // subnormal and a large value is lost whole, which no tolerance in the
    // operands' magnitudes absorbs, so gfx90a is not given the unit.
    let gfx90a = Target::default_hip();
    assert!(!gfx90a.mfma_keeps_subnormals() && cdna3().mfma_keeps_subnormals());
    let arts = compile_example("matmul.tk", &gfx90a);
    assert!(arts.kernels.iter().all(|ir| matches!(ir.schedule, Schedule::Contraction { .. })));
    assert!(arts.variants.iter().flatten().all(|v| !matches!(v.ir.schedule, Schedule::TensorCore { .. })));
}

#[test]
fn a_shifted_fragment_read_of_the_mfma_schedule_is_refuted() {
    // The wavefront's fragments are read element by element at the map's
    // indices (64 lanes): one instruction tile along n for B (the last
    // wavefront's reads land in the padding of the slab's rows, or past
    // the last row's data into the next stage) and one
    // element along k for A (lanes 48-63 read past their row's 16) are
    // each refuted with a counterexample.
    let arts = compile_example("matmul.tk", &cdna3());
    let (k, ir) = (&arts.program.kernels[0], &arts.kernels[0]);
    let cfg = Config { timeout_ms: 5_000 };
    for (which, by) in [(Fragment::B, 16), (Fragment::A, 1)] {
        let mut shifted = ir.clone();
        assert!(edit_fragment_loads(&mut shifted.body, which, &|base| base.add(IExpr::c(by))), "the schedule loads {:?} fragments", which);
        let refuted = first_refutation(k, &shifted, &cfg).unwrap_or_else(|| panic!("{:?} shifted by {} was not refuted", which, by));
        // The footprint (a read in a row's padding) or, for B, the ring (a
        // read past the stage's data, which the shifted last wavefront's
        // is): whichever the solver reaches first.
        let d = &refuted.obligation.description;
        assert!(d.contains("in the data of its rows") || d.contains("lies in the stage of the iteration's slab"), "{:?} refuted by {}", which, d);
        let tokitai_contracts::obligation::Outcome::Refuted { model, .. } = &refuted.outcome else { panic!("not refuted") };
        assert!(!model.is_empty(), "{:?}: a counterexample", which);
    }
}
