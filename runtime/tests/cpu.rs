//! The CPU backend runs every shipped kernel through its typed launch path
//! and agrees with the exact oracle within the declared tolerance, on
//! random shapes (not multiples of vector widths or tiles) with outputs
//! poisoned beforehand.

use tokitai_runtime::check::{check, random_case, Rng};
use tokitai_runtime::{kernels, Device};

#[test]
fn every_kernel_matches_its_exact_oracle_on_the_cpu() {
    let all = kernels::all();
    let ops = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/ops");
    let declared: usize = std::fs::read_dir(ops).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap().lines().filter(|l| l.starts_with("kernel ")).count()).sum();
    assert_eq!(all.len(), declared, "the runtime ships every kernel of examples/ops");
    let mut failures = Vec::new();
    for k in all {
        for (i, scale) in [3i64, 37, 130].into_iter().enumerate() {
            let mut rng = Rng::new(0x5eed ^ (i as u64) << 32 ^ k.info.name.len() as u64);
            // A kernel whose `requires` admits no dims this small (sums of
            // at least 128) is checked at the last scale, which must work.
            let case = match random_case(k, &mut rng, scale) {
                Err(_) if i < 2 => continue,
                case => case.unwrap(),
            };
            let out = check(&Device::Cpu, k, &case).unwrap();
            assert!(out.elements > 0, "{}: no output elements checked", k.info.name);
            if !out.passed() {
                failures.push(format!("{} dims {:?}: worst {} (ratio {})", out.kernel, out.dims, out.worst, out.worst_ratio));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The check itself can fail: a kernel whose output is left unwritten (the
/// NaN poison survives) is caught.
#[test]
fn an_unwritten_output_fails_the_check() {
    let k = kernels::by_name("gelu_fwd").unwrap();
    let mut rng = Rng::new(7);
    let case = random_case(k, &mut rng, 50).unwrap();
    let mut broken = tokitai_runtime::KernelDef { ..*k };
    fn no_op(_: &[i64], _: &[f64], _: &mut [tokitai_runtime::abi::tk_rt::Arg<'_>]) -> Result<(), String> {
        Ok(())
    }
    fn no_op_watched(_: &[i64], _: &[f64], _: &mut [tokitai_runtime::abi::tk_rt::Arg<'_>], _: &tokitai_runtime::abi::tk_rt::cpu::Watch) -> Result<(), String> {
        Ok(())
    }
    broken.cpu = no_op;
    broken.cpu_watched = no_op_watched;
    let out = check(&Device::Cpu, &broken, &case).unwrap();
    assert!(!out.passed(), "a kernel that writes nothing passed: {:?}", out);
}

/// The mirror of a contraction runs its k loop outside the output loops
/// (vectorised), yet performs each element's fused multiply-adds in k
/// order from zero, as the GPU kernel does: bit for bit the plain loop.
#[test]
fn the_contraction_mirror_is_the_plain_fused_loop_bit_for_bit() {
    use half::f16;
    use tokitai_runtime::{DType, Tensor};
    let (m, k, n) = (37, 53, 29);
    let mut rng = Rng::new(99);
    let mut draw = |len: usize, scale: f64| (0..len).map(|_| f16::from_f64((rng.unit() * 2.0 - 1.0) * scale)).collect::<Vec<f16>>();
    let (x, w, b) = (draw(m * k, 1.0), draw(k * n, 0.125), draw(n, 1.0));
    let mut y = Tensor::zeros(&[m, n], DType::F16, &Device::Cpu).unwrap();
    let (xt, wt, bt) = (Tensor::from_f16(&[m, k], x.clone()).unwrap(), Tensor::from_f16(&[k, n], w.clone()).unwrap(), Tensor::from_f16(&[n], b.clone()).unwrap());
    kernels::linear::linear_fwd::launch(&Device::Cpu, &xt, &wt, &bt, &mut y).unwrap();
    let got = y.to_f32_vec().unwrap();
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for l in 0..k {
                acc = x[i * k + l].to_f32().mul_add(w[l * n + j].to_f32(), acc);
            }
            let want = f16::from_f32(acc + b[j].to_f32()).to_f32();
            assert_eq!(got[i * n + j].to_bits(), want.to_bits(), "y[{}, {}]", i, j);
        }
    }
}
