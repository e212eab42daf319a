//! Every launch is checked before it runs: wrong dtypes, shapes, dims that
//! disagree between tensors and violated `requires` come back as typed
//! errors naming the kernel, the tensor and the condition.

use half::f16;
use tokitai_runtime::{kernels, Device, Error, Tensor};

fn f16s(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f16(shape, vec![f16::from_f32(0.5); n]).unwrap()
}

#[test]
fn a_wrong_dtype_is_named() {
    let x = Tensor::from_f32(&[8], vec![0.0; 8]).unwrap();
    let mut y = f16s(&[8]);
    let e = kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut y).unwrap_err();
    assert!(matches!(e, Error::Dtype { .. }), "{:?}", e);
    assert_eq!(e.to_string(), "kernel `gelu_fwd`: tensor `x` must be f16, got f32");
}

#[test]
fn dims_that_disagree_between_tensors_are_named() {
    let x = f16s(&[8]);
    let mut y = f16s(&[9]);
    let e = kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut y).unwrap_err();
    assert_eq!(e.to_string(), "kernel `gelu_fwd`: tensor `y`: axis 0 is dim N = 9, but `x` has N = 8");
}

#[test]
fn a_wrong_rank_is_named() {
    let x = f16s(&[2, 4]);
    let mut y = f16s(&[8]);
    let e = kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut y).unwrap_err();
    assert_eq!(e.to_string(), "kernel `gelu_fwd`: tensor `x`: expected 1 axes [N], got shape [2, 4]");
}

#[test]
fn a_violated_requires_is_named() {
    // linear_fwd requires K <= 4096.
    let (m, k, n) = (1, 4097, 1);
    let x = f16s(&[m, k]);
    let w = f16s(&[k, n]);
    let b = f16s(&[n]);
    let mut y = f16s(&[m, n]);
    let e = kernels::linear::linear_fwd::launch(&Device::Cpu, &x, &w, &b, &mut y).unwrap_err();
    assert!(matches!(e, Error::Requires { .. }), "{:?}", e);
    assert!(e.to_string().contains("K <= 4096"), "{}", e);
}

#[test]
fn a_scalar_outside_requires_is_named() {
    // mse_grad requires scale >= 0.
    let y = f16s(&[4]);
    let t = f16s(&[4]);
    let mut g = f16s(&[4]);
    let e = kernels::loss::mse_grad::launch(&Device::Cpu, &y, &t, -1.0, &mut g).unwrap_err();
    assert!(e.to_string().contains("scale >= 0"), "{}", e);
}

#[test]
fn tensors_report_bad_data_lengths() {
    let e = Tensor::from_f32(&[2, 3], vec![0.0; 5]).unwrap_err();
    assert_eq!(e.to_string(), "shape [2, 3] holds 6 elements, the data has 5");
}

#[test]
fn a_launch_writes_its_output() {
    let x = Tensor::from_f16(&[3], vec![f16::from_f32(-1.0), f16::from_f32(0.0), f16::from_f32(2.0)]).unwrap();
    let mut y = Tensor::full(&[3], tokitai_runtime::DType::F16, f64::NAN, &Device::Cpu).unwrap();
    kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut y).unwrap();
    let v = y.to_f32_vec().unwrap();
    assert!((v[0] - -0.1588).abs() < 2e-3 && v[1] == 0.0 && (v[2] - 1.9546).abs() < 2e-3, "{:?}", v);
}
