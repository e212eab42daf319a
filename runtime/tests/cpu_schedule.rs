//! The CPU schedule (`cpu_args`, issue 22) computes the mirror's values in
//! a form for a CPU: for every shipped kernel with a schedule of its own,
//! on random shapes (ragged against the register tile and the chunks) and
//! large enough to split across threads, its outputs are the mirror's bit
//! for bit. Its tolerance is the mirror's proved one because of that.

use tokitai_runtime::abi::tk_rt::{Arg, Buf};
use tokitai_runtime::check::{case_for, random_case, Case, Rng};
use tokitai_runtime::{kernels, KernelDef};

/// Run `f` (a mirror or a CPU schedule) over a copy of the case: inputs
/// borrowed, outputs owned (poisoned as the case made them).
type Schedule = fn(&[i64], &[f64], &mut [Arg<'_>]) -> Result<(), String>;

fn run(k: &KernelDef, case: &Case, f: Schedule) -> Result<Vec<Buf>, String> {
    let mut owned: Vec<Buf> = case.tensors.iter().map(|(_, b)| b.clone()).collect();
    let roles: Vec<&str> = k.info.tensors.iter().map(|p| p.role).collect();
    let mut args: Vec<Arg> = Vec::new();
    let mut outs = Vec::new();
    for (i, b) in owned.iter_mut().enumerate() {
        if roles[i] == "input" {
            args.push(Arg::In(&case.tensors[i].1));
        } else {
            outs.push(i);
            args.push(Arg::Own(std::mem::take(b)));
        }
    }
    f(&case.dims, &case.scalars, &mut args)?;
    Ok(args.into_iter().filter_map(|a| if let Arg::Own(b) = a { Some(b) } else { None }).collect())
}

fn bits(b: &Buf) -> Vec<u64> {
    (0..b.len()).map(|i| b.get_f64(i).to_bits()).collect()
}

#[test]
fn every_cpu_schedule_gives_the_mirrors_bits() {
    // Both builds of the bodies: AVX-512 (where this machine has it) and
    // the plain one.
    for wide in [true, false] {
        tokitai_runtime::abi::tk_rt::cpu::set_wide(wide);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && std::env::var_os("TOKITAI_CPU_NO_AVX512").is_none() {
            assert_eq!(tokitai_runtime::abi::tk_rt::cpu::avx512(), wide, "the switch picks the build");
        }
        every_schedule_against_the_mirror(if wide { "wide" } else { "plain" });
    }
    tokitai_runtime::abi::tk_rt::cpu::set_wide(true);
}

fn every_schedule_against_the_mirror(build: &str) {
    let mut own = 0;
    let mut failures = Vec::new();
    for k in kernels::all() {
        if k.cpu_schedule == "mirror" {
            continue;
        }
        own += 1;
        for (i, scale) in [3i64, 37, 130, 700].into_iter().enumerate() {
            let mut rng = Rng::new(0xc0de ^ (i as u64) << 40 ^ k.info.name.len() as u64);
            let Ok(case) = random_case(k, &mut rng, scale) else { continue };
            let (mirror, cpu) = (run(k, &case, k.mirror), run(k, &case, k.cpu));
            match (mirror, cpu) {
                (Ok(m), Ok(c)) => {
                    for (j, (a, b)) in m.iter().zip(&c).enumerate() {
                        if a.dtype() != b.dtype() || bits(a) != bits(b) {
                            let first = (0..a.len().min(b.len())).find(|&e| a.get_f64(e).to_bits() != b.get_f64(e).to_bits());
                            failures.push(format!("{} ({} build) dims {:?}: output {} differs (lengths {} and {}, first at {:?})", k.info.name, build, case.dims, j, a.len(), b.len(), first));
                        }
                    }
                }
                (m, c) => failures.push(format!("{} dims {:?}: mirror {:?}, cpu {:?}", k.info.name, case.dims, m.err(), c.err())),
            }
        }
    }
    assert!(own >= 10, "only {} kernels have a CPU schedule of their own", own);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Column reductions take one of two forms at the call (`codegen::cpu`):
/// tasks over the block's lanes while their partials fit, else blocks of
/// columns. Random shapes are narrow, so they take the lane form; these
/// shapes take each form, both giving the mirror's bits (a few rows and
/// many columns, past the lane form's 2^20 partials, on the column form).
#[test]
fn both_column_reduction_forms_give_the_mirrors_bits() {
    let cases: [(&str, [(&str, i64); 2]); 6] = [
        ("bias_grad", [("M", 2000), ("N", 130)]),
        // tiny b128's shapes on the lane form (64 rows of 2048, partials
        // gathered 16 columns at a time; 2045 leaves a short last group).
        ("bias_grad", [("M", 64), ("N", 2045)]),
        ("layernorm_bwd_params", [("R", 70), ("C", 2048)]),
        ("bias_grad", [("M", 40), ("N", 20_000)]),
        ("layernorm_bwd_params", [("R", 1000), ("C", 70)]),
        ("layernorm_bwd_params", [("R", 33), ("C", 40_000)]),
    ];
    for (name, dims) in cases {
        assert_same_bits(name, &dims, 11);
    }
}

/// The contractions' shapes of nano's router and last layer (4 and 20
/// columns, tiled over the transposed product), and epilogues in several
/// groups of rows with a short last one (a group is 4096 elements: 204
/// rows of 20), give the mirror's bits.
#[test]
fn short_rows_and_transposed_tiles_give_the_mirrors_bits() {
    let cases: [(&str, [(&str, i64); 3]); 5] = [
        ("linear_fwd", [("M", 4100), ("K", 96), ("N", 4)]),
        ("linear_fwd", [("M", 1000), ("K", 130), ("N", 20)]),
        ("linear_bwd_w", [("M", 2000), ("K", 96), ("N", 4)]),
        ("linear_bwd_w", [("M", 700), ("K", 128), ("N", 20)]),
        ("linear_bwd_x", [("M", 1000), ("K", 128), ("N", 20)]),
    ];
    for (name, dims) in cases {
        assert_same_bits(name, &dims, 5);
    }
}

/// Kernel `name`'s CPU schedule gives the mirror's bits on a random case
/// of `dims` (drawn from `seed`).
fn assert_same_bits(name: &str, dims: &[(&str, i64)], seed: u64) {
    let k = kernels::by_name(name).unwrap();
    let case = case_for(k, &mut Rng::new(seed), dims).unwrap();
    let (m, c) = (run(k, &case, k.mirror).unwrap(), run(k, &case, k.cpu).unwrap());
    for (j, (a, b)) in m.iter().zip(&c).enumerate() {
        assert_eq!(bits(a), bits(b), "{} {:?}: output {}", name, dims, j);
    }
}

/// The comparison above can fail (a changed input changes the bits), and a
/// call whose dims disagree with its buffers is refused.
#[test]
fn the_comparison_sees_a_changed_input() {
    let k = kernels::by_name("linear_fwd").unwrap();
    let mut rng = Rng::new(3);
    let case = random_case(k, &mut rng, 37).unwrap();
    let mut short = case.clone();
    let kpos = k.info.dims.iter().position(|d| *d == "K").unwrap();
    short.dims[kpos] -= 1;
    assert!(run(k, &short, k.cpu).is_err(), "a call whose lengths disagree with its dims is refused");
    let m = run(k, &case, k.mirror).unwrap();
    let mut broken = case.clone();
    if let Buf::F16(x) = &mut broken.tensors[0].1 {
        x[0] = half::f16::from_f32(x[0].to_f32() + 0.5);
    }
    let c = run(k, &broken, k.cpu).unwrap();
    assert_ne!(bits(&m[0]), bits(&c[0]), "a changed input changes the output");
}

/// Bad input to a CPU schedule is an error naming the tensor, not a panic.
#[test]
fn a_cpu_schedule_names_a_short_buffer() {
    let k = kernels::by_name("adamw").unwrap();
    let mut rng = Rng::new(5);
    let mut case = random_case(k, &mut rng, 37).unwrap();
    let g = k.info.tensors.iter().position(|p| p.name == "g").unwrap();
    if let Buf::F16(v) = &mut case.tensors[g].1 {
        v.pop();
    }
    let err = run(k, &case, k.cpu).unwrap_err();
    assert!(err.contains("`g`"), "{}", err);
}
