//! One training step and the optimiser state: forward, MSE loss, backward,
//! the global gradient norm (two levels: row partials, then their sum), and
//! AdamW or SGD over every parameter in one launch, with the loss scale
//! removed and the clip applied inside the optimiser kernel.
//!
//! The optimiser works on flat buffers (router first, each tensor padded to
//! a multiple of `ROW` elements, so that the norm's first level is a row
//! reduction and each row has one learning-rate multiplier). On a GPU the
//! layers' parameter and gradient tensors are views into those buffers, so
//! nothing is copied; on the host (whose tensors own their buffers)
//! gradients are packed in and updated weights unpacked back.
//!
//! Nothing inside a step is read back to the host: the loss, the norm and
//! the routing are read after it, the overflow skip happens inside the
//! optimiser kernel, and the values that change every step (learning rate,
//! bias corrections, the batch) are written into tensors before it. That
//! lets a GPU capture the step once as a graph and replay it (see
//! `Capture`); a change of the loss scale, which kernels take as a scalar,
//! captures it again.

use super::cli::Optimizer;
use super::data::Dataset;
use super::model::{Dispatch, Forward, Kind, Model};
use super::config::{Size, INPUT_DIM, N_EXPERTS, OUTPUT_DIM};
use super::run::Checkpoint;
use super::schedule::learning_rate;
use crate::kernels::{loss, moe, optim};
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
    /// Capture the step as a graph and replay it, where the device can and
    /// the step's shapes do not depend on the data (dense dispatch or the
    /// dense model).
    pub graphs: bool,
}

/// The model on held-out samples ([`Trainer::evaluate`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    pub loss: f64,
    pub routing_accuracy: Option<f64>,
    /// Each expert's share of the top-2 slots (`None` for the dense model).
    pub expert_share: Option<[f64; N_EXPERTS]>,
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

impl State {
    /// The optimizer's state tensors.
    fn tensors(&self) -> Vec<&Tensor> {
        match self {
            State::Adamw { m, v } => vec![m, v],
            State::Sgd { buf } => vec![buf],
        }
    }
}

/// This step's learning rate and AdamW bias corrections, as tensors the
/// optimiser kernel reads (a captured step replays with new values). On a
/// GPU the three are views of one buffer: one upload per step.
struct Schedule {
    all: Option<Tensor>,
    lr: Tensor,
    bc1: Tensor,
    bc2: Tensor,
}

impl Schedule {
    fn new(dev: &Device) -> Result<Schedule> {
        if dev.has_views() {
            let all = Tensor::zeros(&[3], DType::F32, dev)?;
            return Ok(Schedule { lr: all.view(0, &[])?, bc1: all.view(1, &[])?, bc2: all.view(2, &[])?, all: Some(all) });
        }
        let zero = || Tensor::zeros(&[], DType::F32, dev);
        Ok(Schedule { all: None, lr: zero()?, bc1: zero()?, bc2: zero()? })
    }

    fn set(&mut self, lr: f32, bc1: f32, bc2: f32) -> Result<()> {
        match &mut self.all {
            Some(all) => all.write(&Tensor::from_f32(&[3], vec![lr, bc1, bc2])?),
            None => {
                self.lr.write(&Tensor::from_f32(&[], vec![lr])?)?;
                self.bc1.write(&Tensor::from_f32(&[], vec![bc1])?)?;
                self.bc2.write(&Tensor::from_f32(&[], vec![bc2])?)
            }
        }
    }
}

/// What a step leaves on the device for the host to read afterwards.
pub struct StepOutputs {
    /// MSE loss (f32 scalar).
    pub loss: Tensor,
    /// Squared norm of the loss-scaled gradient.
    pub nsq: Tensor,
    pub forward: Forward,
}

/// What `finish_step` needs to describe a step.
struct Read<'a> {
    data: &'a Dataset,
    idx: &'a [usize],
    lr: f64,
}

/// A step captured as a graph, with the tensors its replays write.
struct Capture {
    graph: crate::StepGraph,
    outputs: StepOutputs,
    /// The loss scale it was captured with (kernels take it as a scalar).
    loss_scale: f32,
    /// The contract monitor's probes in the graph (see `monitor::replay`).
    probes: crate::monitor::ProbePlan,
}

/// The dataset on the device, uploaded once: a step gathers its batch with
/// `gather_rows` from the sample indices, the only upload a step makes
/// (converting and uploading a batch of 4096 rows each step cost more than
/// the step's kernels).
struct Resident {
    /// The dataset it holds: address and length of its inputs.
    key: (usize, usize),
    /// Inputs `[n, 96]` and targets `[n, 20]`, f16.
    x: Tensor,
    y: Tensor,
}

/// A step's sample indices (`[B]`, i32): a fixed buffer written before each
/// step when steps are captured (a graph reads it at a fixed address).
struct Batch {
    idx: Tensor,
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
    /// Where the backward pass writes each parameter's gradient: views of
    /// `grad` on a GPU, own tensors (packed after) on the host.
    grads: Vec<Tensor>,
    lrs: Tensor,
    schedule: Schedule,
    state: State,
    batch: Option<Batch>,
    resident: Option<Resident>,
    capture: Option<Capture>,
    /// Steps completed.
    pub step: usize,
    /// Optimiser updates applied (skipped steps excluded): AdamW's t.
    pub updates: usize,
    pub loss_scale: f32,
    /// Steps replayed from a captured graph, and captures made.
    pub replays: usize,
    pub captures: usize,
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

/// Loss and loss-scaled output gradient of a forward pass, the loss left
/// on the device (`[]`, f32). (The kernels see `y` and `t` flat; their
/// shapes are restored.)
pub fn mse_on_device(dev: &Device, y: &mut Tensor, t: &mut Tensor, loss_scale: f32) -> Result<(Tensor, Tensor)> {
    let (n, shape) = (y.len(), y.shape().to_vec());
    y.set_shape(&[n])?;
    t.set_shape(&[n])?;
    let mut l = Tensor::output(&[], DType::F32, dev)?;
    let mut g = Tensor::output(&[n], DType::F16, dev)?;
    let launched = loss::mse_loss::launch(dev, y, t, &mut l).and_then(|_| loss::mse_grad::launch(dev, y, t, loss_scale * 2.0 / n as f32, &mut g));
    y.set_shape(&shape)?;
    t.set_shape(&shape)?;
    launched?;
    Ok((l, g.reshape(&shape)?))
}

/// `mse_on_device` with the loss read back.
pub fn mse(dev: &Device, y: &mut Tensor, t: &mut Tensor, loss_scale: f32) -> Result<(f64, Tensor)> {
    let (l, g) = mse_on_device(dev, y, t, loss_scale)?;
    Ok((l.to_f64_vec()?[0], g))
}

/// A finite squared norm, as the optimiser kernels test it (`finite` in
/// optim.tk): overflowed gradients give inf or NaN.
fn finite_norm(nsq: f64) -> bool {
    nsq <= 3.0e38
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
        let grad = Tensor::zeros(&p, DType::F16, dev)?;
        let grads = model
            .params
            .tensors
            .iter()
            .zip(&layout.offsets)
            .map(|(t, &at)| if dev.has_views() { grad.view(at, t.shape()) } else { Tensor::zeros(t.shape(), DType::F16, dev) })
            .collect::<Result<Vec<_>>>()?;
        let mut t = Trainer {
            model,
            hyper,
            dev: dev.clone(),
            layout,
            theta: Tensor::zeros(&p, DType::F16, dev)?,
            grad,
            grads,
            lrs,
            schedule: Schedule::new(dev)?,
            state,
            batch: None,
            resident: None,
            capture: None,
            step: 0,
            updates: 0,
            loss_scale: INITIAL_LOSS_SCALE,
            replays: 0,
            captures: 0,
        };
        t.pack_params()?;
        Ok(t)
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Copy the parameters into the flat buffer; on a GPU the parameters
    /// then become views of it (the optimiser's updates are the layers'
    /// weights, with no copy back).
    fn pack_params(&mut self) -> Result<()> {
        for (t, &at) in self.model.params.tensors.iter().zip(&self.layout.offsets) {
            self.theta.copy_elements(at, t, 0, t.len())?;
        }
        if self.dev.has_views() {
            for (t, &at) in self.model.params.tensors.iter_mut().zip(&self.layout.offsets) {
                *t = self.theta.view(at, t.shape())?;
            }
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

    /// Upload `data` unless it is the dataset already on the device.
    fn make_resident(&mut self, data: &Dataset) -> Result<()> {
        let key = (data.x.as_ptr() as usize, data.n);
        if self.resident.as_ref().is_some_and(|r| r.key == key) {
            return Ok(());
        }
        // A captured step reads the old dataset's addresses.
        self.capture = None;
        let all: Vec<usize> = (0..data.n).collect();
        let (x, y) = batch_tensors(data, &all, &self.dev)?;
        self.resident = Some(Resident { key, x, y });
        Ok(())
    }

    /// Can this run's step be captured and replayed?
    pub fn uses_graphs(&self) -> bool {
        self.hyper.graphs && self.dev.has_graphs() && (self.hyper.dispatch == Dispatch::Dense || self.model.kind() == Kind::Dense)
    }

    /// The device work of one step on batch `b`: forward, loss, backward,
    /// norm and optimiser, with nothing read back.
    fn device_step(&mut self, b: &Batch) -> Result<StepOutputs> {
        let dev = self.dev.clone();
        let r = self.resident.as_ref().ok_or_else(|| Error::Tensor("a step before its dataset was uploaded".into()))?;
        let n = b.idx.len();
        let mut x = Tensor::output(&[n, INPUT_DIM], DType::F16, &dev)?;
        moe::gather_rows::launch(&dev, &r.x, &b.idx, &mut x)?;
        let mut t = Tensor::output(&[n, OUTPUT_DIM], DType::F16, &dev)?;
        moe::gather_rows::launch(&dev, &r.y, &b.idx, &mut t)?;
        // The contract monitor measures the packed parameters (every
        // layer's weight and bias is a view of them) and the optimizer's
        // state once, here, beside the forward pass: not one probe per
        // view, and none left for the optimizer's launch to wait on but
        // the gradient's.
        if dev.has_views() {
            crate::monitor::measure(&dev, &self.theta)?;
            for t in self.state.tensors() {
                crate::monitor::measure(&dev, t)?;
            }
        }
        let mut fwd = self.model.forward(&dev, &x, self.hyper.dispatch)?;
        let (loss, gy) = mse_on_device(&dev, &mut fwd.y, &mut t, self.loss_scale)?;
        self.model.backward_into(&dev, &x, &fwd, &gy, self.loss_scale, &mut self.grads)?;
        if !dev.has_views() {
            for (g, &at) in self.grads.iter().zip(&self.layout.offsets) {
                self.grad.copy_elements(at, g, 0, g.len())?;
            }
        }
        let nsq = self.grad_norm_sq()?;
        self.apply(&nsq)?;
        if !dev.has_views() {
            self.unpack_params()?;
        }
        Ok(StepOutputs { loss, nsq, forward: fwd })
    }

    /// Squared norm of the packed (scaled) gradient, on the device.
    fn grad_norm_sq(&mut self) -> Result<Tensor> {
        let mut part = Tensor::output(&[self.layout.total / ROW], DType::F32, &self.dev)?;
        loss::row_norm_sq::launch(&self.dev, &self.grad, &mut part)?;
        let mut nsq = Tensor::output(&[], DType::F32, &self.dev)?;
        loss::sum_f32::launch(&self.dev, &part, &mut nsq)?;
        Ok(nsq)
    }

    /// The optimiser kernel (it leaves everything as it was when `nsq` is
    /// not finite).
    fn apply(&mut self, nsq: &Tensor) -> Result<()> {
        let h = &self.hyper;
        let inv_scale = 1.0 / self.loss_scale;
        let s = &self.schedule;
        match &mut self.state {
            State::Adamw { m, v } => optim::adamw::launch(&self.dev, &mut self.theta, m, v, &self.grad, &self.lrs, nsq, &s.lr, &s.bc1, &s.bc2, BETA1 as f32, BETA2 as f32, ADAM_EPS, h.weight_decay as f32, inv_scale, h.grad_clip as f32),
            State::Sgd { buf } => optim::sgd_momentum::launch(&self.dev, &mut self.theta, buf, &self.grad, &self.lrs, nsq, &s.lr, h.momentum as f32, h.weight_decay as f32, inv_scale, h.grad_clip as f32),
        }
    }

    /// One training step on the batch of step `self.step + 1`.
    pub fn step(&mut self, data: &Dataset) -> Result<StepStats> {
        let step = self.step + 1;
        let h = self.hyper.clone();
        let lr = learning_rate(step, h.steps, h.lr, h.warmup_steps, h.min_lr_ratio);
        // The corrections of the update this step makes if it does not
        // overflow (the kernel makes none if it does).
        let t = self.updates as i32 + 1;
        let (bc1, bc2) = (1.0 / (1.0 - BETA1.powi(t)), 1.0 / (1.0 - BETA2.powi(t)));
        self.schedule.set(lr as f32, bc1 as f32, bc2 as f32)?;
        let idx = batch_indices(h.seed, step, data.n, h.batch);
        self.make_resident(data)?;
        let idx_host = Tensor::from_i32(&[idx.len()], idx.iter().map(|&i| i as i32).collect())?;
        let read = Read { data, idx: &idx, lr };
        let stats = if self.uses_graphs() {
            self.replay_or_capture(&idx_host, &read)?
        } else {
            self.capture = None;
            let b = Batch { idx: idx_host.to_device(&self.dev)? };
            let out = self.device_step(&b)?;
            self.finish_step(&out, &read)?
        };
        self.step = step;
        Ok(stats)
    }

    /// Replay the captured step when it is current; else run the step for
    /// real (its tensors placed where a capture will put them) and capture
    /// it for the steps after. The batch goes into fixed buffers first.
    fn replay_or_capture(&mut self, idx: &Tensor, read: &Read) -> Result<StepStats> {
        let b = match self.batch.take() {
            Some(mut b) if b.idx.shape() == idx.shape() => {
                b.idx.write(idx)?;
                b
            }
            _ => {
                self.capture = None;
                Batch { idx: idx.to_device(&self.dev)? }
            }
        };
        let result = self.replay_or_capture_on(&b, read);
        self.batch = Some(b);
        result
    }

    fn replay_or_capture_on(&mut self, b: &Batch, read: &Read) -> Result<StepStats> {
        if let Some(c) = self.capture.take() {
            if c.loss_scale == self.loss_scale {
                crate::monitor::replay(&c.probes, || c.graph.launch())?;
                self.replays += 1;
                let stats = self.finish_step(&c.outputs, read);
                self.capture = Some(c);
                return stats;
            }
        }
        // No graph may use the arena while it is reused.
        self.dev.release_graph_memory()?;
        let dev = self.dev.clone();
        let out = dev.rehearse(|| self.device_step(b))?;
        let stats = self.finish_step(&out, read)?;
        drop(out);
        // Captured with the scale the next step will use (`finish_step`
        // halved it after an overflow).
        let loss_scale = self.loss_scale;
        crate::monitor::take_captured();
        let captured = dev.capture(|| self.device_step(b));
        // The monitor's probes recorded into the graph, judged at each replay.
        let probes = crate::monitor::take_captured();
        let (graph, outputs) = captured?;
        self.capture = Some(Capture { graph, outputs, loss_scale, probes });
        self.captures += 1;
        Ok(stats)
    }

    /// The contract monitor's probes in the captured step (`None`: no
    /// step is captured).
    pub fn captured_probes(&self) -> Option<&crate::monitor::ProbePlan> {
        self.capture.as_ref().map(|c| &c.probes)
    }

    /// Replay the captured step `n` times without reading anything back
    /// (benchmarks: the device's own time per step). Each replay trains
    /// on the batch and schedule values last written. `false` when no step
    /// is captured.
    pub fn replay_captured(&mut self, n: usize) -> Result<bool> {
        let Some(c) = &self.capture else { return Ok(false) };
        for _ in 0..n {
            crate::monitor::replay(&c.probes, || c.graph.launch())?;
        }
        self.dev.synchronize()?;
        Ok(true)
    }

    /// Read what the step left on the device; count the update, or halve
    /// the loss scale after an overflow (the kernel skipped the update).
    fn finish_step(&mut self, out: &StepOutputs, read: &Read) -> Result<StepStats> {
        // Everything in one read (one wait for the device), with the slots
        // of the contract monitor's probes: it judges the step's launches
        // (strict: a launch outside its bounds fails the step).
        let fwd = &out.forward;
        let mut tensors = vec![&out.loss, &out.nsq];
        if let Some(r) = &fwd.routing {
            tensors.extend([&r.probs, &r.i0, &r.i1]);
        }
        if let Some(e) = fwd.energy_tensor() {
            tensors.push(e);
        }
        let values: Vec<Vec<f64>> = crate::monitor::settle_reading(&tensors)?.iter().map(|b| b.to_f64()).collect();
        let nsq = values[1][0];
        let mut stats = StepStats { step: self.step + 1, loss: values[0][0], grad_norm: nsq.sqrt() / self.loss_scale as f64, lr: 0.0, router_entropy: 0.0, expert_share: [0.0; N_EXPERTS], routing_accuracy: None, loss_scale: 0.0, sheaf_energy: None, skipped: false };
        if fwd.routing.is_some() {
            let ints = |v: &[f64]| v.iter().map(|x| *x as i32).collect::<Vec<i32>>();
            routing_stats(&mut stats, &values[2], &ints(&values[3]), &ints(&values[4]), read.data, read.idx);
        }
        if fwd.energy_tensor().is_some() {
            stats.sheaf_energy = Some(super::sheaf::batch_mean(values.last().expect("pushed above")));
        }
        stats.lr = read.lr;
        stats.loss_scale = self.loss_scale;
        if finite_norm(nsq) {
            self.updates += 1;
        } else {
            stats.skipped = true;
            self.loss_scale /= 2.0;
        }
        Ok(stats)
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

    /// The model as it stands on the samples `idx` of `data`, forward
    /// only (nothing is updated): the MSE loss, the share of samples
    /// routed top-1 to their true expert (where the data knows it), and
    /// each expert's share of the top-2 slots.
    pub fn evaluate(&self, data: &Dataset, idx: &[usize]) -> Result<Evaluation> {
        let dev = self.dev.clone();
        let (x, mut t) = batch_tensors(data, idx, &dev)?;
        let mut fwd = self.model.forward(&dev, &x, self.hyper.dispatch)?;
        let (loss, _) = mse_on_device(&dev, &mut fwd.y, &mut t, 1.0)?;
        let mut stats = StepStats { step: self.step, loss: loss.to_f64_vec()?[0], grad_norm: 0.0, lr: 0.0, router_entropy: 0.0, expert_share: [0.0; N_EXPERTS], routing_accuracy: None, loss_scale: 1.0, sheaf_energy: None, skipped: false };
        if let Some(r) = &fwd.routing {
            let ints = |t: &Tensor| -> Result<Vec<i32>> { Ok(t.to_f64_vec()?.iter().map(|v| *v as i32).collect()) };
            routing_stats(&mut stats, &r.probs.to_f64_vec()?, &ints(&r.i0)?, &ints(&r.i1)?, data, idx);
        }
        Ok(Evaluation { loss: stats.loss, routing_accuracy: stats.routing_accuracy, expert_share: fwd.routing.is_some().then_some(stats.expert_share) })
    }

    /// The current loss scale (halved after each step whose gradients
    /// overflowed).
    pub fn loss_scale(&self) -> f32 {
        self.loss_scale
    }

    /// The first parameter, else the first parameter's gradient, holding
    /// a value that is not finite: what a diverged run names.
    pub fn first_non_finite(&self) -> Result<Option<String>> {
        let names = &self.model.params.names;
        for (name, t) in names.iter().zip(&self.model.params.tensors) {
            if t.to_f32_vec()?.iter().any(|x| !x.is_finite()) {
                return Ok(Some(format!("parameter `{}`", name)));
            }
        }
        for (name, g) in names.iter().zip(&self.grads) {
            if g.to_f32_vec()?.iter().any(|x| !x.is_finite()) {
                return Ok(Some(format!("the gradient of `{}`", name)));
            }
        }
        Ok(None)
    }

    /// Continue from a checkpoint of the same architecture and optimiser.
    pub fn restore(&mut self, c: &Checkpoint) -> Result<()> {
        let bad = |m: String| Error::Tensor(format!("checkpoint: {}", m));
        let find = |name: &str| c.tensors.iter().find(|(n, _, _)| n == name).ok_or_else(|| bad(format!("has no tensor `{}`", name)));
        let meta = |key: &str| c.metadata.get(key).ok_or_else(|| bad(format!("metadata has no `{}`", key)));
        self.model.restore_params(c, &self.dev)?;
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
        // The optimiser state has moved: a captured step would write the old.
        self.capture = None;
        self.pack_params()
    }
}

/// Router entropy, expert shares and routing accuracy of a batch from its
/// probabilities and top-2 experts.
fn routing_stats(s: &mut StepStats, p: &[f64], i0: &[i32], i1: &[i32], data: &Dataset, idx: &[usize]) {
    let b = idx.len();
    s.router_entropy = p.iter().map(|v| if *v > 0.0 { -v * v.ln() } else { 0.0 }).sum::<f64>() / b as f64;
    for (&a, &c) in i0.iter().zip(i1) {
        s.expert_share[a as usize] += 0.5 / b as f64;
        s.expert_share[c as usize] += 0.5 / b as f64;
    }
    if let Some(truth) = &data.true_expert {
        let hits = i0.iter().zip(idx).filter(|(e, i)| **e as u8 == truth[**i]).count();
        s.routing_accuracy = Some(hits as f64 / b as f64);
    }
}

