//! One training step and the optimiser state: forward, MSE loss, backward,
//! the global gradient norm (two levels: row partials, then their sum), and
//! AdamW or SGD over every parameter in one launch, with the loss scale
//! removed and the clip applied inside the optimiser kernel.
//!
//! Parameters stay in their own tensors for the layers' kernels; the
//! optimiser works on a flat copy (router first, each tensor padded to a
//! multiple of `ROW` elements, so that the norm's first level is a row
//! reduction and each row has one learning-rate multiplier).
//! Gradients are packed into the flat buffer, updated weights unpacked back:
//! two device copies per tensor per step.

use super::cli::Optimizer;
use super::data::Dataset;
use super::model::{Dispatch, Forward, Kind, Model};
use super::config::{Size, INPUT_DIM, N_EXPERTS, OUTPUT_DIM};
use super::run::Checkpoint;
use super::schedule::learning_rate;
use crate::kernels::{loss, optim};
use crate::{DType, Device, Error, Result, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// Row length of the flat buffers as the norm's first level sees them.
pub const ROW: usize = 1024;
/// Initial loss scale: f16 gradients of an MSE over 20 outputs are small;
/// scaled, they stay normal. Halved whenever a step overflows.
pub const INITIAL_LOSS_SCALE: f32 = 1024.0;
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const ADAM_EPS: f32 = 1e-8;

/// The optimisation settings of a run.
#[derive(Clone, Debug)]
pub struct Hyper {
    pub optimizer: Optimizer,
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub grad_clip: f64,
    pub router_lr_scale: f64,
    pub warmup_steps: usize,
    pub min_lr_ratio: f64,
    pub steps: usize,
    pub batch: usize,
    pub seed: u64,
    pub dispatch: Dispatch,
}

/// What one step measured.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    pub step: usize,
    pub loss: f64,
    /// Of the true (unscaled) gradient, before clipping.
    pub grad_norm: f64,
    pub lr: f64,
    /// Mean entropy (nats) of the router's probabilities.
    pub router_entropy: f64,
    /// Share of the top-2 slots each expert received.
    pub expert_share: [f64; N_EXPERTS],
    /// Share of samples whose top-1 expert is the data's true expert.
    pub routing_accuracy: Option<f64>,
    pub loss_scale: f32,
    /// Sheaf disagreement energy (sheaf-padic router).
    pub sheaf_energy: Option<f64>,
    /// The step overflowed in f16 and was skipped (scale halved).
    pub skipped: bool,
}

/// Where each parameter sits in the flat buffers.
struct Layout {
    offsets: Vec<usize>,
    total: usize,
}

impl Layout {
    fn of(model: &Model) -> Layout {
        let mut offsets = Vec::new();
        let mut at = 0;
        for t in &model.params.tensors {
            offsets.push(at);
            at += t.len().div_ceil(ROW) * ROW;
        }
        Layout { offsets, total: at.max(ROW) }
    }
}

enum State {
    Adamw { m: Tensor, v: Tensor },
    Sgd { buf: Tensor },
}

pub struct Trainer {
    pub model: Model,
    pub hyper: Hyper,
    dev: Device,
    layout: Layout,
    /// Flat buffers as `[rows, ROW]`: weights, gradients, and each row's
    /// learning-rate multiplier (the router's rows: the router scale).
    theta: Tensor,
    grad: Tensor,
    lrs: Tensor,
    state: State,
    /// Steps completed.
    pub step: usize,
    /// Optimiser updates applied (skipped steps excluded): AdamW's t.
    pub updates: usize,
    pub loss_scale: f32,
}

/// Samples of step `step`: a permutation of the dataset per epoch, seeded,
/// so that a resumed run sees exactly the batches of an uninterrupted one.
pub fn batch_indices(seed: u64, step: usize, n: usize, batch: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(batch);
    let mut pos = (step - 1) * batch;
    while out.len() < batch {
        let (epoch, offset) = (pos / n, pos % n);
        let mut perm: Vec<usize> = (0..n).collect();
        perm.shuffle(&mut ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9).wrapping_add(epoch as u64)));
        let take = (batch - out.len()).min(n - offset);
        out.extend_from_slice(&perm[offset..offset + take]);
        pos += take;
    }
    out
}

/// The batch of `idx` as f16 tensors on `dev`: inputs `[B, 96]`, targets
/// `[B, 20]`.
pub fn batch_tensors(data: &Dataset, idx: &[usize], dev: &Device) -> Result<(Tensor, Tensor)> {
    let x: Vec<f64> = idx.iter().flat_map(|&i| data.x[i * INPUT_DIM..(i + 1) * INPUT_DIM].iter().map(|v| *v as f64)).collect();
    let t: Vec<f64> = idx.iter().flat_map(|&i| data.y[i * OUTPUT_DIM..(i + 1) * OUTPUT_DIM].iter().map(|v| *v as f64)).collect();
    Ok((Tensor::from_f64_as(&[idx.len(), INPUT_DIM], DType::F16, &x)?.to_device(dev)?, Tensor::from_f64_as(&[idx.len(), OUTPUT_DIM], DType::F16, &t)?.to_device(dev)?))
}

/// Loss and loss-scaled output gradient of a forward pass.
/// (The kernels see `y` and `t` flat; their shapes are restored.)
pub fn mse(dev: &Device, y: &mut Tensor, t: &mut Tensor, loss_scale: f32) -> Result<(f64, Tensor)> {
    let (n, shape) = (y.len(), y.shape().to_vec());
    y.set_shape(&[n])?;
    t.set_shape(&[n])?;
    let mut l = Tensor::output(&[], DType::F32, dev)?;
    let mut g = Tensor::output(&[n], DType::F16, dev)?;
    let launched = loss::mse_loss::launch(dev, y, t, &mut l).and_then(|_| loss::mse_grad::launch(dev, y, t, loss_scale * 2.0 / n as f32, &mut g));
    y.set_shape(&shape)?;
    t.set_shape(&shape)?;
    launched?;
    Ok((l.to_f64_vec()?[0], g.reshape(&shape)?))
}

impl Trainer {
    pub fn new(size: Size, kind: Kind, hyper: Hyper, dev: &Device) -> Result<Trainer> {
        let model = Model::init(size, kind, hyper.seed, dev)?;
        let layout = Layout::of(&model);
        let p = [layout.total / ROW, ROW];
        let state = match hyper.optimizer {
            Optimizer::Adamw => State::Adamw { m: Tensor::zeros(&p, DType::F32, dev)?, v: Tensor::zeros(&p, DType::F32, dev)? },
            Optimizer::Sgd => State::Sgd { buf: Tensor::zeros(&p, DType::F32, dev)? },
        };
        let mut lrs = vec![1.0f32; p[0]];
        for (i, (name, t)) in model.params.names.iter().zip(&model.params.tensors).enumerate() {
            if name.starts_with("router.") {
                let first = layout.offsets[i] / ROW;
                lrs[first..first + t.len().div_ceil(ROW)].fill(hyper.router_lr_scale as f32);
            }
        }
        let lrs = Tensor::from_f32(&[p[0]], lrs)?.to_device(dev)?;
        let mut t = Trainer {
            model,
            hyper,
            dev: dev.clone(),
            layout,
            theta: Tensor::zeros(&p, DType::F16, dev)?,
            grad: Tensor::zeros(&p, DType::F16, dev)?,
            lrs,
            state,
            step: 0,
            updates: 0,
            loss_scale: INITIAL_LOSS_SCALE,
        };
        t.pack_params()?;
        Ok(t)
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    fn pack_params(&mut self) -> Result<()> {
        for (t, &at) in self.model.params.tensors.iter().zip(&self.layout.offsets) {
            self.theta.copy_elements(at, t, 0, t.len())?;
        }
        Ok(())
    }

    fn unpack_params(&mut self) -> Result<()> {
        for (t, &at) in self.model.params.tensors.iter_mut().zip(&self.layout.offsets) {
            let len = t.len();
            t.copy_elements(0, &self.theta, at, len)?;
        }
        Ok(())
    }

    /// Forward and backward of one batch: the MSE loss, the forward pass
    /// and every parameter's (loss-scaled) gradient of the objective (the
    /// MSE, plus the sheaf energy term for the sheaf-padic router).
    pub fn gradients(&self, x: &Tensor, t: &mut Tensor) -> Result<(f64, Forward, Vec<Tensor>)> {
        let mut fwd = self.model.forward(&self.dev, x, self.hyper.dispatch)?;
        let (loss, gy) = mse(&self.dev, &mut fwd.y, t, self.loss_scale)?;
        let grads = self.model.backward(&self.dev, x, &fwd, &gy, self.loss_scale)?;
        Ok((loss, fwd, grads))
    }

    /// Squared norm of the packed (scaled) gradient, on the device.
    fn grad_norm_sq(&mut self) -> Result<Tensor> {
        let mut part = Tensor::output(&[self.layout.total / ROW], DType::F32, &self.dev)?;
        loss::row_norm_sq::launch(&self.dev, &self.grad, &mut part)?;
        let mut nsq = Tensor::output(&[], DType::F32, &self.dev)?;
        loss::sum_f32::launch(&self.dev, &part, &mut nsq)?;
        Ok(nsq)
    }

    /// One training step on the batch of step `self.step + 1`.
    pub fn step(&mut self, data: &Dataset) -> Result<StepStats> {
        let step = self.step + 1;
        let h = self.hyper.clone();
        let lr = learning_rate(step, h.steps, h.lr, h.warmup_steps, h.min_lr_ratio);
        let idx = batch_indices(h.seed, step, data.n, h.batch);
        let (x, mut t) = batch_tensors(data, &idx, &self.dev)?;
        let (loss, fwd, grads) = self.gradients(&x, &mut t)?;
        for (g, &at) in grads.iter().zip(&self.layout.offsets) {
            self.grad.copy_elements(at, g, 0, g.len())?;
        }
        let nsq = self.grad_norm_sq()?;
        let scaled_norm = nsq.to_f64_vec()?[0].sqrt();
        let grad_norm = scaled_norm / self.loss_scale as f64;
        let mut stats = routing_stats(&fwd, data, &idx)?;
        stats.step = step;
        stats.loss = loss;
        stats.grad_norm = grad_norm;
        stats.lr = lr;
        stats.loss_scale = self.loss_scale;
        if !scaled_norm.is_finite() {
            // An f16 overflow somewhere in the backward pass: skip the
            // update, halve the scale (the loss itself is still reported).
            stats.skipped = true;
            self.loss_scale /= 2.0;
        } else {
            self.apply(lr, &nsq)?;
        }
        self.step = step;
        Ok(stats)
    }

    fn apply(&mut self, lr: f64, nsq: &Tensor) -> Result<()> {
        self.updates += 1;
        let h = &self.hyper;
        let inv_scale = 1.0 / self.loss_scale;
        match &mut self.state {
            State::Adamw { m, v } => {
                let bc1 = 1.0 / (1.0 - BETA1.powi(self.updates as i32));
                let bc2 = 1.0 / (1.0 - BETA2.powi(self.updates as i32));
                optim::adamw::launch(&self.dev, &mut self.theta, m, v, &self.grad, &self.lrs, nsq, lr as f32, BETA1 as f32, BETA2 as f32, ADAM_EPS, h.weight_decay as f32, bc1 as f32, bc2 as f32, inv_scale, h.grad_clip as f32)?;
            }
            State::Sgd { buf } => {
                optim::sgd_momentum::launch(&self.dev, &mut self.theta, buf, &self.grad, &self.lrs, nsq, lr as f32, h.momentum as f32, h.weight_decay as f32, inv_scale, h.grad_clip as f32)?;
            }
        }
        self.unpack_params()
    }

    /// Weights and optimiser state as a checkpoint (f32 tensors: f16
    /// weights convert exactly), with the step and settings as metadata.
    pub fn checkpoint(&self, mut metadata: HashMap<String, String>) -> Result<Checkpoint> {
        let mut tensors = Vec::new();
        for (name, t) in self.model.params.names.iter().zip(&self.model.params.tensors) {
            tensors.push((name.clone(), t.shape().to_vec(), t.to_f32_vec()?));
        }
        let flat = |t: &Tensor| -> Result<(Vec<usize>, Vec<f32>)> { Ok((t.shape().to_vec(), t.to_f32_vec()?)) };
        match &self.state {
            State::Adamw { m, v } => {
                for (name, t) in [("optimizer.adamw.m", m), ("optimizer.adamw.v", v)] {
                    let (s, d) = flat(t)?;
                    tensors.push((name.into(), s, d));
                }
            }
            State::Sgd { buf } => {
                let (s, d) = flat(buf)?;
                tensors.push(("optimizer.sgd.momentum".into(), s, d));
            }
        }
        metadata.insert("step".into(), self.step.to_string());
        metadata.insert("updates".into(), self.updates.to_string());
        metadata.insert("loss_scale".into(), self.loss_scale.to_string());
        Ok(Checkpoint { tensors, metadata })
    }

    /// Continue from a checkpoint of the same architecture and optimiser.
    pub fn restore(&mut self, c: &Checkpoint) -> Result<()> {
        let bad = |m: String| Error::Tensor(format!("checkpoint: {}", m));
        let find = |name: &str| c.tensors.iter().find(|(n, _, _)| n == name).ok_or_else(|| bad(format!("has no tensor `{}`", name)));
        let meta = |key: &str| c.metadata.get(key).ok_or_else(|| bad(format!("metadata has no `{}`", key)));
        for i in 0..self.model.params.len() {
            let name = self.model.params.names[i].clone();
            let (_, shape, data) = find(&name)?;
            let t = &self.model.params.tensors[i];
            if shape.as_slice() != t.shape() {
                return Err(bad(format!("`{}` has shape {:?}, the model wants {:?}", name, shape, t.shape())));
            }
            let data: Vec<f64> = data.iter().map(|v| *v as f64).collect();
            self.model.params.tensors[i] = Tensor::from_f64_as(shape, DType::F16, &data)?.to_device(&self.dev)?;
        }
        let load = |name: &str, p: [usize; 2], dev: &Device| -> Result<Tensor> {
            let (_, shape, data) = find(name)?;
            if shape.as_slice() != p {
                return Err(bad(format!("`{}` has shape {:?}, expected {:?}", name, shape, p)));
            }
            Tensor::from_f32(&p, data.clone())?.to_device(dev)
        };
        let p = [self.layout.total / ROW, ROW];
        self.state = match self.hyper.optimizer {
            Optimizer::Adamw => State::Adamw { m: load("optimizer.adamw.m", p, &self.dev)?, v: load("optimizer.adamw.v", p, &self.dev)? },
            Optimizer::Sgd => State::Sgd { buf: load("optimizer.sgd.momentum", p, &self.dev)? },
        };
        let parse = |key: &str| -> Result<f64> { meta(key)?.parse::<f64>().map_err(|_| bad(format!("metadata `{}` is not a number", key))) };
        self.step = parse("step")? as usize;
        self.updates = parse("updates")? as usize;
        self.loss_scale = parse("loss_scale")? as f32;
        self.pack_params()
    }
}

/// Router entropy, expert shares and routing accuracy of a forward pass.
fn routing_stats(fwd: &Forward, data: &Dataset, idx: &[usize]) -> Result<StepStats> {
    let mut s = StepStats { step: 0, loss: 0.0, grad_norm: 0.0, lr: 0.0, router_entropy: 0.0, expert_share: [0.0; N_EXPERTS], routing_accuracy: None, loss_scale: 0.0, sheaf_energy: fwd.sheaf_energy(), skipped: false };
    let Some(r) = &fwd.routing else { return Ok(s) };
    let p = r.probs.to_f64_vec()?;
    let b = idx.len();
    s.router_entropy = p.iter().map(|v| if *v > 0.0 { -v * v.ln() } else { 0.0 }).sum::<f64>() / b as f64;
    for (&a, &c) in r.i0.iter().zip(&r.i1) {
        s.expert_share[a as usize] += 0.5 / b as f64;
        s.expert_share[c as usize] += 0.5 / b as f64;
    }
    if let Some(truth) = &data.true_expert {
        let hits = r.i0.iter().zip(idx).filter(|(e, i)| **e as u8 == truth[**i]).count();
        s.routing_accuracy = Some(hits as f64 / b as f64);
    }
    Ok(s)
}

