//! `--diagnose`: one forward and backward step in the training precision
//! (f16 storage, f32 arithmetic, loss-scaled gradients, on the chosen
//! device) and in the reference (every kernel's exact oracle in f64, same
//! parameters, same batch), compared parameter by parameter. No checkpoint.

use super::cli::Checked;
use super::driver::{hyper, model_kind, Failure};
use super::model::{Forward, Model};
use super::sheaf::SHEAF_WEIGHT;
use super::train::{batch_indices, batch_tensors, mse, INITIAL_LOSS_SCALE};
use crate::{Device, Tensor};
use std::fmt::Write;

/// One parameter tensor's gradient, training precision against reference.
pub struct ParamDiag {
    pub name: String,
    pub norm: f64,
    pub reference_norm: f64,
    /// `norm / reference_norm`.
    pub ratio: f64,
    /// L2 norm of the difference, and that over the reference norm.
    pub abs_diff: f64,
    pub rel_diff: f64,
    pub cosine: f64,
}

pub struct Diagnosis {
    pub device: String,
    pub batch: usize,
    pub loss: f64,
    pub reference_loss: f64,
    pub params: Vec<ParamDiag>,
    pub max_output_diff: f64,
    pub max_logit_diff: f64,
    /// Samples whose top-2 expert set differs from the reference's.
    pub topk_disagreements: usize,
}

fn values(t: &Tensor) -> Result<Vec<f64>, Failure> {
    t.to_f64_vec().map_err(|e| Failure { code: 1, message: e.to_string() })
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) })
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// The loss, forward pass and unscaled gradients of one step on `dev`.
fn step(model: &Model, dev: &Device, x: &Tensor, t: &Tensor, c: &Checked, scale: f32) -> crate::Result<(f64, Forward, Vec<Vec<f64>>)> {
    let x = x.to_device(dev)?;
    let mut t = t.to_device(dev)?;
    let mut fwd = model.forward(dev, &x, hyper(c, dev).dispatch)?;
    let (loss, gy) = mse(dev, &mut fwd.y, &mut t, scale)?;
    let grads = model.backward(dev, &x, &fwd, &gy, scale)?;
    let grads = grads.iter().map(|g| g.to_f64_vec().map(|v| v.iter().map(|x| x / scale as f64).collect())).collect::<crate::Result<Vec<_>>>()?;
    Ok((loss + fwd.sheaf_energy()?.map_or(0.0, |e| SHEAF_WEIGHT * e), fwd, grads))
}

pub fn run(c: &Checked) -> Result<Diagnosis, Failure> {
    let a = &c.args;
    let fail = |e: crate::Error| Failure { code: 1, message: e.to_string() };
    let dev = Device::from_spec(&a.device).map_err(|e| Failure { code: 2, message: format!("--device {}: {}", a.device, e) })?;
    let data = c.data.load(a.seed).map_err(|e| Failure { code: 2, message: format!("--dataset: {}", e) })?;
    let idx = batch_indices(a.seed, 1, data.n, a.batch);
    let (x, t) = batch_tensors(&data, &idx, &Device::Cpu).map_err(fail)?;
    let kind = model_kind(c);
    let model = Model::init(a.size, kind, a.seed, &dev).map_err(fail)?;
    let reference = Model::init(a.size, kind, a.seed, &Device::Reference).map_err(fail)?;
    let (loss, fwd, grads) = step(&model, &dev, &x, &t, c, INITIAL_LOSS_SCALE).map_err(fail)?;
    let (reference_loss, rfwd, rgrads) = step(&reference, &Device::Reference, &x, &t, c, 1.0).map_err(fail)?;
    let mut params = Vec::new();
    for (i, name) in model.params.names.iter().enumerate() {
        let (g, r) = (&grads[i], &rgrads[i]);
        let (n, rn) = (norm(g), norm(r));
        let diff: Vec<f64> = g.iter().zip(r).map(|(a, b)| a - b).collect();
        let dot: f64 = g.iter().zip(r).map(|(a, b)| a * b).sum();
        params.push(ParamDiag {
            name: name.clone(),
            norm: n,
            reference_norm: rn,
            ratio: if rn > 0.0 { n / rn } else if n == 0.0 { 1.0 } else { f64::INFINITY },
            abs_diff: norm(&diff),
            rel_diff: if rn > 0.0 { norm(&diff) / rn } else { norm(&diff) },
            cosine: if n > 0.0 && rn > 0.0 { dot / (n * rn) } else if n == rn { 1.0 } else { 0.0 },
        });
    }
    let max_output_diff = max_diff(&values(&fwd.y)?, &values(&rfwd.y)?);
    let (mut max_logit_diff, mut topk_disagreements) = (0.0, 0);
    if let (Some(r), Some(rr)) = (&fwd.routing, &rfwd.routing) {
        max_logit_diff = max_diff(&values(&r.logits)?, &values(&rr.logits)?);
        let ((a0, a1), (b0, b1)) = (fwd.routes().map_err(fail)?.unwrap_or_default(), rfwd.routes().map_err(fail)?.unwrap_or_default());
        for s in 0..idx.len() {
            let (mut p, mut q) = ([a0[s], a1[s]], [b0[s], b1[s]]);
            p.sort();
            q.sort();
            topk_disagreements += usize::from(p != q);
        }
    }
    Ok(Diagnosis { device: dev.describe(), batch: idx.len(), loss, reference_loss, params, max_output_diff, max_logit_diff, topk_disagreements })
}

impl Diagnosis {
    /// The worst gradient-norm ratio either way (1 is perfect).
    pub fn worst_ratio(&self) -> f64 {
        self.params.iter().filter(|p| p.reference_norm > 0.0 || p.norm > 0.0).map(|p| if p.ratio > 0.0 { p.ratio.max(1.0 / p.ratio) } else { f64::INFINITY }).fold(1.0, f64::max)
    }
    /// moe.md's verdict: within 2x fine, within 5x moderate, else major.
    pub fn verdict(&self) -> &'static str {
        match self.worst_ratio() {
            r if r <= 2.0 => "fine",
            r if r <= 5.0 => "moderate",
            _ => "major",
        }
    }
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "diagnose: one step on {} (f16 storage, f32 arithmetic, loss scale {}) against the f64 reference (exact oracles), batch {}", self.device, INITIAL_LOSS_SCALE, self.batch);
        let _ = writeln!(s, "loss {:.6} (reference {:.6}, difference {:.2e})", self.loss, self.reference_loss, (self.loss - self.reference_loss).abs());
        let _ = writeln!(s, "{:32} {:>11} {:>11} {:>8} {:>11} {:>9} {:>9}", "parameter", "grad norm", "reference", "ratio", "abs diff", "rel diff", "cosine");
        for p in &self.params {
            let _ = writeln!(s, "{:32} {:>11.4e} {:>11.4e} {:>8.4} {:>11.3e} {:>9.2e} {:>9.6}", p.name, p.norm, p.reference_norm, p.ratio, p.abs_diff, p.rel_diff, p.cosine);
        }
        let _ = writeln!(s, "largest output difference {:.3e}; largest router logit difference {:.3e}; router top-2 disagreements {} of {}", self.max_output_diff, self.max_logit_diff, self.topk_disagreements, self.batch);
        let _ = writeln!(s, "verdict: {} (worst gradient-norm ratio {:.4}; within 2x fine, within 5x moderate, beyond major)", self.verdict(), self.worst_ratio());
        s
    }
}
