//! Gradients against finite differences of the f64 oracle.
//!
//! Every backward kernel (run on the CPU, in its own precision: linear,
//! layernorm, gelu, softmax, router, combine, loss, the sheaf router's gate
//! and energy) is compared
//! with central differences of its forward kernel evaluated by the exact
//! oracle (`Device::Reference`: real arithmetic, no roundings), element by
//! element. The whole model's gradients (CPU, f16, loss-scaled) are compared
//! with central differences of the reference model's loss along a random
//! direction per parameter tensor; the reference model's own backward pass
//! (exact oracles of the backward kernels) must match those differences to
//! near f64 precision, which pins the backward's mathematics exactly.

use tokitai_runtime::check::Rng;
use tokitai_runtime::kernels::{gelu, layernorm, linear, loss, moe, softmax};
use tokitai_runtime::moe::config::{Size, INPUT_DIM, OUTPUT_DIM};
use tokitai_runtime::moe::data::synth_quality;
use tokitai_runtime::moe::model::{Dispatch, Kind, Model};
use tokitai_runtime::moe::sheaf::SHEAF_WEIGHT;
use tokitai_runtime::moe::train::{batch_tensors, mse};
use tokitai_runtime::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;
const REF: Device = Device::Reference;

fn random(rng: &mut Rng, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| lo + (hi - lo) * rng.unit()).collect();
    Tensor::from_f64_as(shape, dtype, &v).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

/// `sum(w * f(inputs))` on the reference device, for finite differences.
fn weighted(out: &Tensor, w: &[f64]) -> f64 {
    values(out).iter().zip(w).map(|(a, b)| a * b).sum()
}

/// Central differences of `f` in every element of input `which`, against
/// `analytic` (the backward kernel's result). Tolerance: `rel` of the
/// element plus `rel` of the largest difference (f16 outputs).
fn check_input(what: &str, inputs: &[Tensor], which: usize, analytic: &[f64], rel: f64, f: impl Fn(&[Tensor]) -> f64) {
    let base: Vec<Vec<f64>> = inputs.iter().map(values).collect();
    let h = 1e-4;
    let mut fd = Vec::new();
    for i in 0..base[which].len() {
        let at = |delta: f64| {
            let mut v = base[which].clone();
            v[i] += delta;
            let mut ins: Vec<Tensor> = inputs.iter().map(|t| t.to_device(&REF).unwrap()).collect();
            ins[which] = Tensor::exact(inputs[which].shape(), inputs[which].dtype(), &v).unwrap();
            f(&ins)
        };
        fd.push((at(h) - at(-h)) / (2.0 * h));
    }
    let scale = fd.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert_eq!(fd.len(), analytic.len(), "{}: gradient length", what);
    for (i, (a, d)) in analytic.iter().zip(&fd).enumerate() {
        assert!((a - d).abs() <= rel * (d.abs() + scale) + 1e-9, "{}: element {}: kernel {} vs finite difference {} (scale {})", what, i, a, d, scale);
    }
    assert!(scale > 0.0, "{}: a zero gradient checks nothing", what);
}

#[test]
fn linear_gradients_match_finite_differences() {
    let mut rng = Rng::new(1);
    let (m, k, n) = (5, 7, 6);
    let x = random(&mut rng, &[m, k], DType::F16, -1.0, 1.0);
    let w = random(&mut rng, &[k, n], DType::F16, -0.5, 0.5);
    let b = random(&mut rng, &[n], DType::F16, -1.0, 1.0);
    let gy = random(&mut rng, &[m, n], DType::F16, -1.0, 1.0);
    let gyv = values(&gy);
    let f = |ins: &[Tensor]| {
        let mut y = Tensor::zeros(&[m, n], DType::F16, &REF).unwrap();
        linear::linear_fwd::launch(&REF, &ins[0], &ins[1], &ins[2], &mut y).unwrap();
        weighted(&y, &gyv)
    };
    let mut gx = Tensor::zeros(&[m, k], DType::F16, &CPU).unwrap();
    linear::linear_bwd_x::launch(&CPU, &gy, &w, &mut gx).unwrap();
    let mut gw = Tensor::zeros(&[k, n], DType::F16, &CPU).unwrap();
    linear::linear_bwd_w::launch(&CPU, &x, &gy, &mut gw).unwrap();
    let mut gb = Tensor::zeros(&[n], DType::F16, &CPU).unwrap();
    linear::bias_grad::launch(&CPU, &gy, &mut gb).unwrap();
    let ins = [x, w, b];
    check_input("linear dx", &ins, 0, &values(&gx), 2e-3, f);
    check_input("linear dw", &ins, 1, &values(&gw), 2e-3, f);
    check_input("linear db", &ins, 2, &values(&gb), 2e-3, f);
}

#[test]
fn layernorm_gradients_match_finite_differences() {
    let mut rng = Rng::new(2);
    let (r, c) = (4, 9);
    let x = random(&mut rng, &[r, c], DType::F16, -2.0, 2.0);
    let gamma = random(&mut rng, &[c], DType::F16, 0.5, 1.5);
    let beta = random(&mut rng, &[c], DType::F16, -0.5, 0.5);
    let gy = random(&mut rng, &[r, c], DType::F16, -1.0, 1.0);
    let gyv = values(&gy);
    let eps = 1e-5f32;
    let f = |ins: &[Tensor]| {
        let mut y = Tensor::zeros(&[r, c], DType::F16, &REF).unwrap();
        let mut mean = Tensor::zeros(&[r], DType::F32, &REF).unwrap();
        let mut rstd = Tensor::zeros(&[r], DType::F32, &REF).unwrap();
        layernorm::layernorm_fwd::launch(&REF, &ins[0], &ins[1], &ins[2], eps, &mut y, &mut mean, &mut rstd).unwrap();
        weighted(&y, &gyv)
    };
    let mut y = Tensor::zeros(&[r, c], DType::F16, &CPU).unwrap();
    let mut mean = Tensor::zeros(&[r], DType::F32, &CPU).unwrap();
    let mut rstd = Tensor::zeros(&[r], DType::F32, &CPU).unwrap();
    layernorm::layernorm_fwd::launch(&CPU, &x, &gamma, &beta, eps, &mut y, &mut mean, &mut rstd).unwrap();
    let mut gx = Tensor::zeros(&[r, c], DType::F16, &CPU).unwrap();
    let mut xhat = Tensor::zeros(&[r, c], DType::F16, &CPU).unwrap();
    layernorm::layernorm_bwd::launch(&CPU, &x, &gamma, &mean, &rstd, &gy, &mut gx, &mut xhat).unwrap();
    let mut gg = Tensor::zeros(&[c], DType::F16, &CPU).unwrap();
    let mut gb = Tensor::zeros(&[c], DType::F16, &CPU).unwrap();
    layernorm::layernorm_bwd_params::launch(&CPU, &xhat, &gy, &mut gg, &mut gb).unwrap();
    let ins = [x, gamma, beta];
    check_input("layernorm dx", &ins, 0, &values(&gx), 5e-3, f);
    check_input("layernorm dgamma", &ins, 1, &values(&gg), 5e-3, f);
    check_input("layernorm dbeta", &ins, 2, &values(&gb), 5e-3, f);
}

/// The fused backward of a hidden layer's LayerNorm and GELU
/// (`layernorm_gelu_bwd`: GELU's slope at the recomputed normalised value,
/// then LayerNorm's backward) against differences of the fused forward's
/// `act`, for the input and both parameters. A row with an outlier
/// reaches past the slope's clamp at 8 (its normalised value near
/// sqrt(C - 1) = 5.4, times gamma near 2).
#[test]
fn fused_layernorm_gelu_gradients_match_finite_differences() {
    let mut rng = Rng::new(5);
    let (r, c) = (4, 30);
    let mut xv: Vec<f64> = (0..r * c).map(|_| -2.0 + 4.0 * rng.unit()).collect();
    xv[c - 1] = 30.0;
    let x = Tensor::from_f64_as(&[r, c], DType::F16, &xv).unwrap();
    let gamma = random(&mut rng, &[c], DType::F16, 1.0, 2.0);
    let beta = random(&mut rng, &[c], DType::F16, 0.0, 2.0);
    let gact = random(&mut rng, &[r, c], DType::F16, -1.0, 1.0);
    let gv = values(&gact);
    let eps = 1e-5f32;
    let f = |ins: &[Tensor]| {
        let out = |shape: &[usize], dt| Tensor::zeros(shape, dt, &REF).unwrap();
        let (mut y, mut act, mut mean, mut rstd) = (out(&[r, c], DType::F16), out(&[r, c], DType::F16), out(&[r], DType::F32), out(&[r], DType::F32));
        layernorm::layernorm_gelu_fwd::launch(&REF, &ins[0], &ins[1], &ins[2], eps, &mut y, &mut act, &mut mean, &mut rstd).unwrap();
        weighted(&act, &gv)
    };
    let out = |shape: &[usize], dt| Tensor::zeros(shape, dt, &CPU).unwrap();
    let (mut y, mut act, mut mean, mut rstd) = (out(&[r, c], DType::F16), out(&[r, c], DType::F16), out(&[r], DType::F32), out(&[r], DType::F32));
    layernorm::layernorm_gelu_fwd::launch(&CPU, &x, &gamma, &beta, eps, &mut y, &mut act, &mut mean, &mut rstd).unwrap();
    assert!(values(&y).iter().any(|v| v.abs() > 8.0), "some value is past the slope's clamp");
    let (mut gx, mut xhat, mut gy) = (out(&[r, c], DType::F16), out(&[r, c], DType::F16), out(&[r, c], DType::F16));
    layernorm::layernorm_gelu_bwd::launch(&CPU, &x, &gamma, &beta, &mean, &rstd, &gact, &mut gx, &mut xhat, &mut gy).unwrap();
    let (mut gg, mut gb) = (out(&[c], DType::F16), out(&[c], DType::F16));
    layernorm::layernorm_bwd_params::launch(&CPU, &xhat, &gy, &mut gg, &mut gb).unwrap();
    let ins = [x, gamma, beta];
    check_input("fused layernorm-gelu dx", &ins, 0, &values(&gx), 5e-3, f);
    check_input("fused layernorm-gelu dgamma", &ins, 1, &values(&gg), 5e-3, f);
    check_input("fused layernorm-gelu dbeta", &ins, 2, &values(&gb), 5e-3, f);
}

#[test]
fn gelu_and_softmax_gradients_match_finite_differences() {
    let mut rng = Rng::new(3);
    let x = random(&mut rng, &[40], DType::F16, -4.0, 4.0);
    let gy = random(&mut rng, &[40], DType::F16, -1.0, 1.0);
    let gyv = values(&gy);
    let mut gx = Tensor::zeros(&[40], DType::F16, &CPU).unwrap();
    gelu::gelu_bwd::launch(&CPU, &x, &gy, &mut gx).unwrap();
    check_input("gelu dx", &[x], 0, &values(&gx), 2e-3, |ins| {
        let mut y = Tensor::zeros(&[40], DType::F16, &REF).unwrap();
        gelu::gelu_fwd::launch(&REF, &ins[0], &mut y).unwrap();
        weighted(&y, &gyv)
    });

    let (r, c) = (3, 11);
    let z = random(&mut rng, &[r, c], DType::F16, -4.0, 4.0);
    let g = random(&mut rng, &[r, c], DType::F16, -1.0, 1.0);
    let gv = values(&g);
    let mut s = Tensor::zeros(&[r, c], DType::F16, &CPU).unwrap();
    softmax::softmax_fwd::launch(&CPU, &z, &mut s).unwrap();
    let mut dz = Tensor::zeros(&[r, c], DType::F16, &CPU).unwrap();
    softmax::softmax_bwd::launch(&CPU, &s, &g, &mut dz).unwrap();
    // The VJP reads the f16-rounded forward output: 1e-2 of the scale.
    check_input("softmax dx", &[z], 0, &values(&dz), 1e-2, |ins| {
        let mut y = Tensor::zeros(&[r, c], DType::F16, &REF).unwrap();
        softmax::softmax_fwd::launch(&REF, &ins[0], &mut y).unwrap();
        weighted(&y, &gv)
    });
}

#[test]
fn router_and_combine_gradients_match_finite_differences() {
    let mut rng = Rng::new(4);
    let (b, e, d) = (6, 4, 5);
    let z = random(&mut rng, &[b, e], DType::F16, -2.0, 2.0);
    let gw0 = random(&mut rng, &[b], DType::F32, -1.0, 1.0);
    let gw1 = random(&mut rng, &[b], DType::F32, -1.0, 1.0);
    let (g0, g1) = (values(&gw0), values(&gw1));
    // Routing: softmax, then the top-2 probabilities as weights.
    let route = |dev: &Device, z: &Tensor| {
        let mut p = Tensor::zeros(&[b, e], DType::F32, dev).unwrap();
        moe::router_softmax::launch(dev, z, &mut p).unwrap();
        let mut outs: Vec<Tensor> = [DType::I32, DType::I32, DType::F32, DType::F32].iter().map(|t| Tensor::zeros(&[b], *t, dev).unwrap()).collect();
        let [i0, i1, w0, w1] = &mut outs[..] else { unreachable!() };
        moe::top2::launch(dev, &p, i0, i1, w0, w1).unwrap();
        (p, outs)
    };
    let (p, outs) = route(&CPU, &z);
    let mut gz = Tensor::zeros(&[b, e], DType::F16, &CPU).unwrap();
    moe::router_bwd::launch(&CPU, &p, &outs[0], &outs[1], &gw0, &gw1, &mut gz).unwrap();
    check_input("router dz", &[z], 0, &values(&gz), 5e-3, |ins| {
        let (_, o) = route(&REF, &ins[0]);
        weighted(&o[2], &g0) + weighted(&o[3], &g1)
    });

    // combine2 over a stacked buffer: sample r's outputs at slots pos0/pos1.
    let s = 2 * b;
    let h = random(&mut rng, &[s, d], DType::F16, -2.0, 2.0);
    let pos0: Vec<i32> = (0..b as i32).map(|r| 2 * r + 1).collect();
    let pos1: Vec<i32> = (0..b as i32).map(|r| 2 * r).collect();
    let src: Vec<i32> = (0..s as i32).map(|q| q / 2).collect();
    let w0 = random(&mut rng, &[b], DType::F32, 0.0, 1.0);
    let w1 = random(&mut rng, &[b], DType::F32, 0.0, 1.0);
    let ws: Vec<f32> = (0..s).map(|q| if q % 2 == 1 { values(&w0)[q / 2] as f32 } else { values(&w1)[q / 2] as f32 }).collect();
    let gy = random(&mut rng, &[b, d], DType::F16, -1.0, 1.0);
    let gyv = values(&gy);
    let ints = |v: &Vec<i32>| Tensor::from_i32(&[v.len()], v.clone()).unwrap();
    let (p0, p1) = (ints(&pos0), ints(&pos1));
    let mut dh = Tensor::zeros(&[s, d], DType::F16, &CPU).unwrap();
    moe::combine2_bwd_h::launch(&CPU, &gy, &ints(&src), &Tensor::from_f32(&[s], ws).unwrap(), &mut dh).unwrap();
    let mut dw0 = Tensor::zeros(&[b], DType::F32, &CPU).unwrap();
    let mut dw1 = Tensor::zeros(&[b], DType::F32, &CPU).unwrap();
    moe::combine2_bwd_w::launch(&CPU, &h, &p0, &p1, &gy, &mut dw0, &mut dw1).unwrap();
    let f = |ins: &[Tensor]| {
        let mut y = Tensor::zeros(&[b, d], DType::F16, &REF).unwrap();
        moe::combine2::launch(&REF, &ins[0], &p0, &p1, &ins[1], &ins[2], &mut y).unwrap();
        weighted(&y, &gyv)
    };
    let ins = [h, w0, w1];
    check_input("combine2 dh", &ins, 0, &values(&dh), 2e-3, f);
    check_input("combine2 dw0", &ins, 1, &values(&dw0), 2e-3, f);
    check_input("combine2 dw1", &ins, 2, &values(&dw1), 2e-3, f);
}

#[test]
fn mse_gradient_matches_finite_differences() {
    let mut rng = Rng::new(5);
    let y = random(&mut rng, &[30], DType::F16, -2.0, 2.0);
    let t = random(&mut rng, &[30], DType::F16, 0.0, 1.0);
    let mut g = Tensor::zeros(&[30], DType::F16, &CPU).unwrap();
    loss::mse_grad::launch(&CPU, &y, &t, 2.0 / 30.0, &mut g).unwrap();
    check_input("mse dy", &[y, t], 0, &values(&g), 2e-3, |ins| {
        let mut l = Tensor::zeros(&[], DType::F32, &REF).unwrap();
        loss::mse_loss::launch(&REF, &ins[0], &ins[1], &mut l).unwrap();
        values(&l)[0]
    });
}

/// The loss of `model` on a batch, on its device.
fn model_loss(model: &Model, dev: &Device, x: &Tensor, t: &Tensor, dispatch: Dispatch) -> (f64, Vec<i32>) {
    let mut fwd = model.forward(dev, &x.to_device(dev).unwrap(), dispatch).unwrap();
    let mut t = t.to_device(dev).unwrap();
    let (loss, _) = mse(dev, &mut fwd.y, &mut t, 1.0).unwrap();
    let loss = loss + fwd.sheaf_energy().unwrap().map_or(0.0, |e| SHEAF_WEIGHT * e);
    let routing = fwd.routes().unwrap().map(|(a, b)| [a, b].concat()).unwrap_or_default();
    (loss, routing)
}

/// The model's gradients on `dev` (loss scale removed).
fn model_grads(model: &Model, dev: &Device, x: &Tensor, t: &Tensor, dispatch: Dispatch, scale: f32) -> Vec<Vec<f64>> {
    let x = x.to_device(dev).unwrap();
    let mut fwd = model.forward(dev, &x, dispatch).unwrap();
    let mut t = t.to_device(dev).unwrap();
    let (_, gy) = mse(dev, &mut fwd.y, &mut t, scale).unwrap();
    model.backward(dev, &x, &fwd, &gy, scale).unwrap().iter().map(|g| values(g).iter().map(|v| v / scale as f64).collect()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Directional finite differences of the reference model's loss, one
/// random direction per parameter tensor, against the CPU model's
/// gradients and the reference model's own backward pass.
fn check_model(kind: Kind, dispatch: Dispatch) {
    let b = 12;
    let data = synth_quality(64, 9);
    let idx: Vec<usize> = (0..b).collect();
    let (x, t) = batch_tensors(&data, &idx, &CPU).unwrap();
    let cpu_model = Model::init(Size::Nano, kind, 7, &CPU).unwrap();
    let mut ref_model = Model::init(Size::Nano, kind, 7, &REF).unwrap();
    let cpu = model_grads(&cpu_model, &CPU, &x, &t, dispatch, 1024.0);
    let exact = model_grads(&ref_model, &REF, &x, &t, dispatch, 1.0);
    let (_, routing) = model_loss(&ref_model, &REF, &x, &t, dispatch);
    let mut rng = Rng::new(11);
    // The direction has norm sqrt(len): a small step keeps the truncation
    // error of the central difference far below the checks.
    let h = 1e-6;
    let mut checked = 0;
    for i in 0..ref_model.params.len() {
        let name = ref_model.params.names[i].clone();
        let base = values(ref_model.tensor(i));
        let (shape, dtype) = (ref_model.tensor(i).shape().to_vec(), ref_model.tensor(i).dtype());
        let dir: Vec<f64> = (0..base.len()).map(|_| if rng.unit() < 0.5 { -1.0 } else { 1.0 }).collect();
        let mut at = |delta: f64| {
            let v: Vec<f64> = base.iter().zip(&dir).map(|(a, d)| a + delta * d).collect();
            ref_model.params.tensors[i] = Tensor::exact(&shape, dtype, &v).unwrap();
            model_loss(&ref_model, &REF, &x, &t, dispatch)
        };
        let ((lp, rp), (lm, rm)) = (at(h), at(-h));
        ref_model.params.tensors[i] = Tensor::exact(&shape, dtype, &base).unwrap();
        if rp != routing || rm != routing {
            continue; // a routing tie within h: the loss is not differentiable there
        }
        let fd = (lp - lm) / (2.0 * h);
        let (dc, de) = (dot(&cpu[i], &dir), dot(&exact[i], &dir));
        assert!((de - fd).abs() <= 1e-5 * fd.abs() + 1e-8, "{}: reference backward {} vs finite difference {}", name, de, fd);
        // f16 activations and gradients: measured errors are below 2e-4 of
        // the gradient's L1 norm along these directions.
        let size = exact[i].iter().map(|v| v.abs()).sum::<f64>();
        assert!((dc - fd).abs() <= 5e-3 * size + 1e-6, "{}: CPU backward {} vs finite difference {} (gradient L1 {})", name, dc, fd, size);
        eprintln!("{:28} fd {:+.6e}  reference {:+.3e}  cpu {:+.3e}  (cpu err / L1 {:.2e})", name, fd, (de - fd) / fd.abs().max(1e-12), dc, (dc - fd).abs() / size);
        checked += 1;
    }
    assert!(checked + 2 >= ref_model.params.len(), "only {} of {} parameter tensors checked", checked, ref_model.params.len());
    let _ = (INPUT_DIM, OUTPUT_DIM);
}

#[test]
fn whole_model_gradients_match_finite_differences_sparse() {
    check_model(Kind::Moe, Dispatch::Sparse);
}

#[test]
fn whole_model_gradients_match_finite_differences_dense_dispatch() {
    check_model(Kind::Moe, Dispatch::Dense);
}

#[test]
fn sheaf_padic_router_gradients_match_finite_differences() {
    check_model(Kind::SheafPadic, Dispatch::Sparse);
}

#[test]
fn dense_model_gradients_match_finite_differences() {
    check_model(Kind::Dense, Dispatch::Sparse);
}

#[test]
fn sheaf_gate_and_energy_gradients_match_finite_differences() {
    use tokitai_runtime::kernels::sheaf;
    let mut rng = Rng::new(6);
    let r = 5;
    let z = random(&mut rng, &[r, 6], DType::F16, -3.0, 3.0);
    let gp = random(&mut rng, &[r, 4], DType::F32, -1.0, 1.0);
    let gpv = values(&gp);
    let mut gz = Tensor::zeros(&[r, 6], DType::F32, &CPU).unwrap();
    sheaf::padic_gate_bwd::launch(&CPU, &z, &gp, &mut gz).unwrap();
    check_input("padic gate dz", &[z], 0, &values(&gz), 1e-4, |ins| {
        let mut p = Tensor::zeros(&[r, 4], DType::F32, &REF).unwrap();
        sheaf::padic_gate::launch(&REF, &ins[0], &mut p).unwrap();
        weighted(&p, &gpv)
    });

    let b = 3;
    let ps = random(&mut rng, &[b, 9, 4], DType::F32, 0.0, 1.0);
    let mut gps = Tensor::zeros(&[b, 9, 4], DType::F32, &CPU).unwrap();
    sheaf::sheaf_energy_bwd::launch(&CPU, &ps, 0.5, &mut gps).unwrap();
    check_input("sheaf energy dps", &[ps], 0, &values(&gps), 1e-4, |ins| {
        let mut en = Tensor::zeros(&[b], DType::F32, &REF).unwrap();
        sheaf::sheaf_energy::launch(&REF, &ins[0], &mut en).unwrap();
        0.5 * values(&en).iter().sum::<f64>()
    });
}
