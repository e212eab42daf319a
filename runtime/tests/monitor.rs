//! The contract monitor in strict mode (issue 18): an AdamW launch from a
//! real first-step state (m = v = 0) is covered; one whose moments break
//! Adam's relation `m * m <= 64.0 * v` is stopped before it runs, with the
//! relation, the element and the values named, and the inputs untouched.

use tokitai_runtime::kernels::optim;
use tokitai_runtime::monitor::{self, Mode};
use tokitai_runtime::{Device, Error, Tensor};

fn launch(m0: f32, v0: f32) -> (tokitai_runtime::Result<()>, Vec<f32>) {
    let dev = Device::Cpu;
    let (g_rows, c) = (2usize, 8usize);
    let n = g_rows * c;
    let grads: Vec<f32> = (0..n).map(|i| (i as f32 - 7.5) * 0.25).collect();
    let nsq: f32 = grads.iter().map(|x| half::f16::from_f32(*x).to_f32().powi(2)).sum();
    let mut theta = Tensor::from_f16(&[g_rows, c], vec![half::f16::from_f32(0.5); n]).unwrap();
    let mut m = Tensor::from_f32(&[g_rows, c], vec![m0; n]).unwrap();
    let mut v = Tensor::from_f32(&[g_rows, c], vec![v0; n]).unwrap();
    let g = Tensor::from_f16(&[g_rows, c], grads.iter().map(|x| half::f16::from_f32(*x)).collect()).unwrap();
    let lrs = Tensor::from_f32(&[g_rows], vec![1.0; g_rows]).unwrap();
    let nsq = Tensor::from_f32(&[], vec![nsq]).unwrap();
    let (lr, bc1, bc2) = (Tensor::from_f32(&[], vec![0.001]).unwrap(), Tensor::from_f32(&[], vec![10.0]).unwrap(), Tensor::from_f32(&[], vec![1000.0]).unwrap());
    let r = optim::adamw::launch(&dev, &mut theta, &mut m, &mut v, &g, &lrs, &nsq, &lr, &bc1, &bc2, 0.9, 0.999, 1e-8, 0.01, 1.0, 1.0);
    (r, m.to_f32_vec().unwrap())
}

#[test]
fn adam_from_zero_moments_is_covered_and_a_broken_relation_is_stopped() {
    monitor::set_mode(Mode::Strict);
    monitor::reset();
    let (r, m) = launch(0.0, 0.0);
    r.expect("the first step's state is inside the domain");
    assert!(m.iter().any(|x| *x != 0.0), "the step ran");
    assert_eq!(monitor::coverage()["adamw"].covered, 1);
    let (r, m) = launch(0.5, 0.0);
    match r {
        Err(Error::Contract { kernel, message }) => {
            assert_eq!(kernel, "adamw");
            assert!(message.contains("m * m <= 64.0 * v") && message.contains("element 0") && message.contains("m = 0.5") && message.contains("v = 0"), "{}", message);
        }
        other => panic!("not stopped: {:?}", other.map(|_| ())),
    }
    assert!(m.iter().all(|x| *x == 0.5), "a stopped launch changes nothing");
    let c = &monitor::coverage()["adamw"];
    assert_eq!((c.launches, c.covered), (2, 1));
}
