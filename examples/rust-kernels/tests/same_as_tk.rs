//! The `#[kernel]` and `.tk` forms of each example kernel are one kernel:
//! identical HIP (the kernel and every variant), identical oracles (bit for
//! bit on the same inputs), identical contracts, and the same results when
//! launched on the CPU backend.

use tokitai_runtime::abi::tk_rt::Buf;
use tokitai_runtime::{Device, KernelDef, Tensor};

/// (the `#[kernel]` form, the `.tk` form)
fn pairs() -> Vec<(&'static KernelDef, &'static KernelDef)> {
    use tokitai_runtime::kernels::{gelu, softmax};
    vec![
        (&tokitai_rust_kernels::gelu_fwd::KERNEL, &gelu::gelu_fwd::KERNEL),
        (&tokitai_rust_kernels::gelu_bwd::KERNEL, &gelu::gelu_bwd::KERNEL),
        (&tokitai_rust_kernels::softmax_fwd::KERNEL, &softmax::softmax_fwd::KERNEL),
        (&tokitai_rust_kernels::softmax_bwd::KERNEL, &softmax::softmax_bwd::KERNEL),
    ]
}

#[test]
fn hip_text_is_identical() {
    for (rust, tk) in pairs() {
        assert_eq!(rust.hip_source, tk.hip_source, "{}: HIP differs", tk.info.name);
        assert_eq!(rust.variants.len(), tk.variants.len(), "{}: variants", tk.info.name);
        for (a, b) in rust.variants.iter().zip(tk.variants) {
            assert_eq!((a.name, a.hip_source, a.min_row, a.max_row), (b.name, b.hip_source, b.min_row, b.max_row));
        }
        assert_eq!((rust.block, rust.shared_bytes, rust.index_bits), (tk.block, tk.shared_bytes, tk.index_bits), "{}: launch geometry", tk.info.name);
    }
}

#[test]
fn contracts_are_identical() {
    for (rust, tk) in pairs() {
        let (a, b) = (rust.info, tk.info);
        assert_eq!(a.name, b.name);
        assert_eq!(a.dims, b.dims);
        assert_eq!(a.requires, b.requires, "{}", b.name);
        assert_eq!(a.domain, b.domain, "{}", b.name);
        assert_eq!(a.tolerance, b.tolerance, "{}", b.name);
        assert_eq!(a.schedule, b.schedule, "{}", b.name);
        assert_eq!(format!("{:?}", a.tensors), format!("{:?}", b.tensors), "{}", b.name);
        // `requires` is enforced alike: a bad dim is refused by both.
        let bad = vec![0i64; a.dims.len()];
        assert!((rust.requires)(&bad, &[]).is_err() && (tk.requires)(&bad, &[]).is_err());
    }
}

/// Inputs over each tensor's domain, from a fixed seed.
fn inputs(k: &KernelDef, dims: &[i64], seed: u64) -> Vec<Buf> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    k.info
        .tensors
        .iter()
        .map(|t| {
            let len: i64 = t.shape.iter().map(|d| dims[k.info.dims.iter().position(|x| x == d).expect("a named dim")]).product();
            let (lo, hi) = k.info.domain.iter().find(|d| d.0 == t.name).map(|d| (d.1, d.2)).unwrap_or((-1.0, 1.0));
            Buf::F16((0..len).map(|_| half::f16::from_f64(lo + (hi - lo) * next())).collect())
        })
        .collect()
}

/// A kernel's mirror on owned buffers, every one overwritten in place.
fn mirror_on(k: &KernelDef, dims: &[i64], bufs: &mut Vec<tokitai_runtime::abi::tk_rt::Buf>) {
    use tokitai_runtime::abi::tk_rt::Arg;
    let mut args: Vec<Arg<'_>> = bufs.drain(..).map(Arg::Own).collect();
    (k.mirror)(dims, &[], &mut args).unwrap();
    *bufs = args.into_iter().map(|a| a.buf().clone()).collect();
}

fn dims_of(k: &KernelDef) -> Vec<i64> {
    k.info.dims.iter().map(|d| if *d == "C" { 300 } else { 37 }).collect()
}

#[test]
fn oracles_agree_bit_for_bit() {
    for (rust, tk) in pairs() {
        let dims = dims_of(tk);
        for seed in 0..3 {
            let args = inputs(tk, &dims, seed);
            let (mut a, mut b) = (args.clone(), args.clone());
            mirror_on(rust, &dims, &mut a);
            mirror_on(tk, &dims, &mut b);
            assert_eq!(format!("{:?}", a), format!("{:?}", b), "{}: mirror oracles differ", tk.info.name);
            let ea = (rust.exact)(&dims, &[], &args).unwrap();
            let eb = (tk.exact)(&dims, &[], &args).unwrap();
            assert_eq!(ea, eb, "{}: exact oracles differ", tk.info.name);
        }
    }
}

#[test]
fn the_typed_launchers_run_on_the_cpu() {
    let dev = Device::Cpu;
    let xs: Vec<f64> = (0..64).map(|i| (i as f64 - 32.0) / 8.0).collect();
    let x = Tensor::from_f64_as(&[64], tokitai_runtime::DType::F16, &xs).unwrap();
    let mut y = Tensor::zeros(&[64], tokitai_runtime::DType::F16, &dev).unwrap();
    let mut want = Tensor::zeros(&[64], tokitai_runtime::DType::F16, &dev).unwrap();
    tokitai_rust_kernels::gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    tokitai_runtime::kernels::gelu::gelu_fwd::launch(&dev, &x, &mut want).unwrap();
    assert_eq!(y.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    // GELU(2) is about 1.9546.
    assert!((y.to_f64_vec().unwrap()[48] - 1.9546).abs() < 2e-3);
    let r = Tensor::from_f64_as(&[4, 16], tokitai_runtime::DType::F16, &xs).unwrap();
    let mut p = Tensor::zeros(&[4, 16], tokitai_runtime::DType::F16, &dev).unwrap();
    tokitai_rust_kernels::softmax_fwd::launch(&dev, &r, &mut p).unwrap();
    for row in p.to_f64_vec().unwrap().chunks(16) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-2, "a softmax row sums to 1");
    }
    // Shapes and `requires` are checked at launch.
    let mut wrong = Tensor::zeros(&[63], tokitai_runtime::DType::F16, &dev).unwrap();
    let e = tokitai_rust_kernels::gelu_fwd::launch(&dev, &x, &mut wrong).unwrap_err().to_string();
    assert!(e.contains("gelu_fwd"), "{}", e);
}

#[test]
fn the_device_check_passes_on_the_cpu() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rust-kernels-check")).args(["--device", "cpu"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text);
    assert!(text.contains("16 of 16 checks passed"), "{}", text);
}
