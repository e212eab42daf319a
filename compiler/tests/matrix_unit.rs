//! The matrix unit's accumulation order in the tolerance proof (issue 19):
//! a contraction whose `KernelIr` records `ReductionOrder::MatrixUnit` is
//! bounded by the unit's named assumption (`fp::matrix_unit`), the mirror
//! oracle computes it as the assumption describes, and a sum whose terms
//! are not products of f16 or bf16 values is refused. The declared
//! `linear_fwd` tolerance admits the unit for long sums only: truncation
//! errs twice what rounding to nearest does, so a short sum is where the
//! unit loses to the sequential loop.

use tokitai_compiler::accuracy::magnitude::{self, Verdict};
use tokitai_compiler::build::{compile_source, Artifacts, BuildError};
use tokitai_compiler::eval::{self, Mode};
use tokitai_compiler::kir::{KernelIr, ReductionOrder};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

fn linear(k_at_least: u32, operand: &str) -> String {
    format!(
        "kernel lin(x: {t}[M, K], w: {t}[K, N]) -> (y: f16[M, N])\n    requires M >= 1, N >= 1, K >= {k}, K <= 4096, M * K <= 1000000000, K * N <= 1000000000, M * N <= 1000000000\n    domain   x in [-X, X], w in [-W, W]\n    tolerance y: abs 6e-8 * K * K * X * W + 3e-8, rel 1e-3\n{{\n    y[m, n] = f16(sum(k) f32(x[m, k]) * f32(w[k, n]));\n}}\n",
        t = operand,
        k = k_at_least
    )
}

fn compile(text: &str) -> Artifacts {
    match compile_source(SourceFile::new("lin.tk", text), &Target::default_cuda()) {
        Ok(a) => a,
        Err(BuildError::Source { rendered, .. }) => panic!("{}", rendered),
        Err(e) => panic!("{:?}", e),
    }
}

/// The kernel's IR with its contraction on the unit.
fn on_unit(ir: &KernelIr, per_promotion: u32) -> KernelIr {
    let mut ir = ir.clone();
    assert!(!ir.reduction_order.is_empty());
    for order in ir.reduction_order.values_mut() {
        *order = ReductionOrder::MatrixUnit { k: 16, per_promotion };
    }
    ir
}

fn verdict(arts: &Artifacts, ir: &KernelIr) -> (Verdict, Vec<String>) {
    let a = magnitude::analyze(&arts.program.kernels[0], ir);
    let o = &a.outputs[0];
    assert!(o.failure.is_none(), "{:?}", o.failure);
    (o.verdict.clone().expect("a verdict"), a.symbols.clone())
}

#[test]
fn the_declared_linear_tolerance_admits_the_unit_for_long_sums_only() {
    // For every K >= 1 the sequential schedule is proved (the build did)
    // but the unit is refuted, at a short sum.
    let all = compile(&linear(1, "f16"));
    let (v, symbols) = verdict(&all, &on_unit(&all.kernels[0], 1));
    let Verdict::Exceeds { at, .. } = v else { panic!("the unit was not refuted for K >= 1: {:?}", v) };
    let k = at[symbols.iter().position(|s| s == "K").expect("a symbol K")];
    assert!(k < 36.0, "refuted at K = {}", k);
    // From K = 64 on, a promotion after every instruction is within it
    // (a height of at most 32 + K/16 + 1) ...
    let long = compile(&linear(64, "f16"));
    let (v, _) = verdict(&long, &on_unit(&long.kernels[0], 1));
    assert!(matches!(v, Verdict::Within(_)), "{:?}", v);
    // ... but not a promotion every second instruction (64 + K/32 + 1 is
    // above K at K = 64).
    let (v, _) = verdict(&long, &on_unit(&long.kernels[0], 2));
    assert!(matches!(v, Verdict::Exceeds { .. }), "{:?}", v);
}

#[test]
fn a_sum_on_the_unit_must_multiply_f16_or_bf16_values() {
    let wide = compile(&linear(64, "f32"));
    let a = magnitude::analyze(&wide.program.kernels[0], &on_unit(&wide.kernels[0], 1));
    let why = a.outputs[0].failure.as_ref().map(|f| f.0.clone()).unwrap_or_default();
    assert!(why.contains("not products of f16 or bf16"), "{:?}", a.outputs[0]);
    let bf = compile(&linear(64, "bf16"));
    assert!(magnitude::analyze(&bf.program.kernels[0], &on_unit(&bf.kernels[0], 1)).outputs[0].failure.is_none());
}

#[test]
fn the_mirror_computes_the_sum_as_the_assumption_describes() {
    use tokitai_contracts::fp::matrix_unit::{emulate_sum, MIRROR_BLOCK};
    let arts = compile(&linear(1, "f16"));
    let k = &arts.program.kernels[0];
    let ir = on_unit(&arts.kernels[0], 1);
    // One row of x, one column of w, K = 48: 16 products of 1 - 2^-11,
    // then 32 of 15 * 2^-24 (each below the lsb of a run in [8, 16), so
    // a chained unit would drop them; promoted after every instruction
    // they are summed in a group of their own).
    let big = 1.0 - 2f64.powi(-11);
    let small = 15.0 * 2f64.powi(-24);
    let x: Vec<f64> = (0..48).map(|i| if i < 16 { big } else { small }).collect();
    let w = vec![1.0; 48];
    let products: Vec<f64> = x.clone();
    let dims = [1, 48, 1];
    let got = eval::run(k, &ir, Mode::Mirror, &dims, &[], &[x.clone(), w.clone()]).expect("runs")[0][0];
    let want = half::f16::from_f64(emulate_sum(&products, 16, 1, MIRROR_BLOCK)).to_f64();
    assert_eq!(got, want);
    // Chained through the unit, the small products are lost whole.
    let chained = emulate_sum(&products, 16, 4, MIRROR_BLOCK);
    assert_eq!(chained, 16.0 * big);
    assert!(emulate_sum(&products, 16, 1, MIRROR_BLOCK) > chained);
}

#[test]
fn a_contraction_that_admits_short_sums_gets_the_unit_as_a_guarded_variant() {
    use tokitai_compiler::kir::Schedule;
    // `K >= 1`: the kernel itself stays on CUDA cores (the unit's bound
    // does not hold for every sum it admits) ...
    let arts = compile(&linear(1, "f16"));
    let k = &arts.program.kernels[0];
    assert!(!matches!(arts.kernels[0].schedule, Schedule::Warpgroup { .. }));
    // ... and the warpgroup schedule is a variant guarded by K >= 128,
    // after its wide promotion guarded by K >= 192, and before both the
    // warp-specialised form of the wide promotion, for large outputs, and
    // before that its grouped walk, for larger ones still (a launch takes
    // the first variant that admits it; the form on 128-row tiles after
    // it is taken only in its place, by the waves each would run).
    // (Their observing twins, for the contract monitor, share the guards;
    // the warp-specialised form has none.) The narrow form for narrow
    // outputs (`N <= 32`, sums of at least 256), then the split-sum form
    // (sums of at least 64), come before them all.
    let names: Vec<&str> = arts.variants[0].iter().filter(|v| v.guard.is_some()).map(|v| v.ir.name.as_str()).collect();
    // Sums of 64 to 127 take mma.sync, after them.
    assert_eq!(names, ["lin_nw", "lin_nw4x4", "lin_nw8x1", "lin_nw8x2d256", "lin_ks16", "lin_ks32", "lin_ks16x16", "lin_ws8", "lin_ws", "lin_ws128", "lin_wg4", "lin_wg", "lin_mma", "lin_nw_obs", "lin_ks16_obs", "lin_ks32_obs", "lin_wg4_obs", "lin_wg_obs", "lin_mma_obs"]);
    let narrow = arts.variants[0].iter().find(|v| v.ir.name == "lin_nw").expect("the narrow form");
    let g = narrow.guard.expect("guarded");
    assert_eq!((k.dims[g.dim].name.as_str(), g.at_least, g.also_at_most.map(|(d, most)| (k.dims[d].name.as_str(), most))), ("K", 256, Some(("N", 32))));
    let split = arts.variants[0].iter().find(|v| v.ir.name == "lin_ks16").expect("the split-sum form");
    let g = split.guard.expect("guarded");
    assert_eq!((k.dims[g.dim].name.as_str(), g.at_least, g.also_at_most.map(|(d, most)| (k.dims[d].name.as_str(), most))), ("K", 64, Some(("N", 32))));
    for wide in &arts.variants[0][7..11] {
        assert_eq!(wide.guard.map(|g| g.at_least), Some(192), "{}", wide.ir.name);
        assert_eq!(wide.ir.reduction_order.values().copied().collect::<Vec<_>>(), [ReductionOrder::MatrixUnit { k: 16, per_promotion: 4 }], "{}", wide.ir.name);
    }
    let v = arts.variants[0].iter().find(|v| v.ir.name == "lin_wg").expect("a warpgroup variant");
    assert_eq!(v.ir.reduction_order.values().copied().collect::<Vec<_>>(), [ReductionOrder::MatrixUnit { k: 16, per_promotion: 2 }]);
    assert!(matches!(v.ir.schedule, Schedule::Warpgroup { .. }), "{:?}", v.ir.schedule);
    let g = v.guard.expect("the variant is guarded");
    assert_eq!((k.dims[g.dim].name.as_str(), g.at_least), ("K", 128));
    // Proved under its guard: the declared tolerance pays for the unit's
    // bound with the guard as a `requires`, and not without it.
    let guarded = v.kernel(k);
    assert!(guarded.requires.iter().any(|c| c.text() == "K >= 128"));
    let within = magnitude::analyze(&guarded, &v.ir);
    assert!(matches!(within.outputs[0].verdict, Some(Verdict::Within(_))), "{:?}", within.outputs[0]);
    let without = magnitude::analyze(k, &v.ir);
    assert!(matches!(without.outputs[0].verdict, Some(Verdict::Exceeds { .. })), "{:?}", without.outputs[0]);
    // Sums too short for the warpgroup unit's bound but not for mma.sync's
    // (one promotion per instruction: K >= 64) get that unit instead;
    // sums shorter than both, no guarded variant; a kernel whose every
    // sum is long enough is on the unit itself.
    let middle = compile(&linear(1, "f16").replace("K <= 4096", "K <= 100"));
    let mma = middle.variants[0].iter().find(|v| v.guard.is_some() && !v.ir.name.contains("_ks")).expect("an mma.sync variant");
    assert_eq!((mma.ir.name.as_str(), mma.guard.map(|g| g.at_least)), ("lin_mma", Some(64)));
    assert!(matches!(mma.ir.schedule, Schedule::TensorCore { .. }), "{:?}", mma.ir.schedule);
    let short = compile(&linear(1, "f16").replace("K <= 4096", "K <= 50"));
    assert!(short.variants[0].iter().all(|v| v.guard.is_none()));
    // On the unit itself from K >= 128, with the wide promotion (and its
    // warp-specialised form) as its variants; from K >= 192 the kernel's
    // own schedule promotes once a slab, and the warp-specialised form
    // needs no guard.
    let long = compile(&linear(128, "f16"));
    assert!(matches!(long.kernels[0].schedule, Schedule::Warpgroup { .. }));
    // (Then the observing twins of the kernel and of each of these.)
    let names: Vec<(&str, Option<i64>)> = long.variants[0].iter().map(|v| (v.ir.name.as_str(), v.guard.map(|g| g.at_least))).collect();
    // (The narrow and split-sum forms first, for narrow outputs: see above.)
    let narrow = [("lin_nw", Some(256)), ("lin_nw4x4", Some(256)), ("lin_nw8x1", Some(256)), ("lin_nw8x2d256", Some(256)), ("lin_ks16", Some(64)), ("lin_ks32", Some(64)), ("lin_ks16x16", Some(64))];
    assert_eq!(names[..7], narrow);
    assert_eq!(names[7..], [("lin_ws8", Some(192)), ("lin_ws", Some(192)), ("lin_ws128", Some(192)), ("lin_wg4", Some(192)), ("lin_obs", None), ("lin_nw_obs", Some(256)), ("lin_ks16_obs", Some(64)), ("lin_ks32_obs", Some(64)), ("lin_wg4_obs", Some(192))]);
    let longer = compile(&linear(192, "f16"));
    let names: Vec<(&str, Option<i64>)> = longer.variants[0].iter().map(|v| (v.ir.name.as_str(), v.guard.map(|g| g.at_least))).collect();
    assert_eq!(names[..7], narrow);
    assert_eq!(names[7..], [("lin_ws8", None), ("lin_ws", None), ("lin_ws128", None), ("lin_obs", None), ("lin_nw_obs", Some(256)), ("lin_ks16_obs", Some(64)), ("lin_ks32_obs", Some(64))]);
    assert_eq!(longer.kernels[0].reduction_order.values().copied().collect::<Vec<_>>(), [ReductionOrder::MatrixUnit { k: 16, per_promotion: 4 }]);
}
