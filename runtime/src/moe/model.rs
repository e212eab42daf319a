//! The MoE model's parameters and forward pass on the runtime's generated
//! kernels. Routing: `Linear(96, 4)`, softmax (f32), top-2 probabilities
//! (not renormalised). Sparse dispatch: each sample's row is gathered into
//! the buffers of its two experts, each expert runs on its rows only, and
//! `combine2` weighs the two outputs back into place. The dense form runs
//! every expert on every row (as the old crate did) for comparison.

use super::config::{Size, INPUT_DIM, N_EXPERTS, OUTPUT_DIM};
use crate::kernels::{gelu, layernorm, linear, moe};
use crate::{DType, Device, Error, Result, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const LAYERNORM_EPS: f32 = 1e-5;

/// `y = x W + b` with `W` stored `[in, out]`, f16.
pub struct Linear {
    pub w: Tensor,
    pub b: Tensor,
}

pub struct Norm {
    pub gamma: Tensor,
    pub beta: Tensor,
}

/// `Linear(96, h) + LayerNorm + GELU`, `n_hidden x [Linear(h, h) +
/// LayerNorm + GELU]`, `Linear(h, 20)`.
pub struct Expert {
    pub layers: Vec<(Linear, Norm)>,
    pub out: Linear,
}

pub struct Model {
    pub size: Size,
    pub router: Linear,
    pub experts: Vec<Expert>,
}

/// How samples reach experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Each sample through its two experts only.
    Sparse,
    /// Every expert on every sample; the top-2 weights pick the outputs.
    Dense,
}

/// What a forward pass computed (outputs, and the routing).
pub struct Forward {
    pub y: Tensor,
    pub probs: Tensor,
    pub i0: Vec<i32>,
    pub i1: Vec<i32>,
    pub w0: Tensor,
    pub w1: Tensor,
}

fn init_linear(rng: &mut ChaCha8Rng, fan_in: usize, fan_out: usize, dev: &Device) -> Result<Linear> {
    // PyTorch's default for nn.Linear: uniform in +-1/sqrt(fan_in).
    let bound = 1.0 / (fan_in as f64).sqrt();
    let mut draw = |n: usize| (0..n).map(|_| rng.random_range(-bound..bound)).collect::<Vec<f64>>();
    let w = Tensor::from_f64_as(&[fan_in, fan_out], DType::F16, &draw(fan_in * fan_out))?.to_device(dev)?;
    let b = Tensor::from_f64_as(&[fan_out], DType::F16, &draw(fan_out))?.to_device(dev)?;
    Ok(Linear { w, b })
}

fn init_norm(h: usize, dev: &Device) -> Result<Norm> {
    Ok(Norm { gamma: Tensor::full(&[h], DType::F16, 1.0, dev)?, beta: Tensor::zeros(&[h], DType::F16, dev)? })
}

fn rows(t: &Tensor) -> usize {
    t.shape()[0]
}

impl Linear {
    pub fn forward(&self, dev: &Device, x: &Tensor) -> Result<Tensor> {
        let mut y = Tensor::zeros(&[rows(x), self.w.shape()[1]], DType::F16, dev)?;
        linear::linear_fwd::launch(dev, x, &self.w, &self.b, &mut y)?;
        Ok(y)
    }
}

impl Expert {
    pub fn forward(&self, dev: &Device, x: &Tensor) -> Result<Tensor> {
        let n = rows(x);
        let mut h = None::<Tensor>;
        for (lin, norm) in &self.layers {
            let z = lin.forward(dev, h.as_ref().unwrap_or(x))?;
            let width = z.shape()[1];
            let mut normed = Tensor::zeros(&[n, width], DType::F16, dev)?;
            let mut mean = Tensor::zeros(&[n], DType::F32, dev)?;
            let mut rstd = Tensor::zeros(&[n], DType::F32, dev)?;
            layernorm::layernorm_fwd::launch(dev, &z, &norm.gamma, &norm.beta, LAYERNORM_EPS, &mut normed, &mut mean, &mut rstd)?;
            let flat = normed.reshape(&[n * width])?;
            let mut act = Tensor::zeros(&[n * width], DType::F16, dev)?;
            gelu::gelu_fwd::launch(dev, &flat, &mut act)?;
            h = Some(act.reshape(&[n, width])?);
        }
        self.out.forward(dev, h.as_ref().unwrap_or(x))
    }
}

impl Model {
    /// Deterministic initial parameters on `dev`.
    pub fn init(size: Size, seed: u64, dev: &Device) -> Result<Model> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA076_1D64_78BD_642F);
        let h = size.hidden();
        let router = init_linear(&mut rng, INPUT_DIM, N_EXPERTS, dev)?;
        let mut experts = Vec::new();
        for _ in 0..N_EXPERTS {
            let mut layers = vec![(init_linear(&mut rng, INPUT_DIM, h, dev)?, init_norm(h, dev)?)];
            for _ in 0..size.n_hidden() {
                layers.push((init_linear(&mut rng, h, h, dev)?, init_norm(h, dev)?));
            }
            experts.push(Expert { layers, out: init_linear(&mut rng, h, OUTPUT_DIM, dev)? });
        }
        Ok(Model { size, router, experts })
    }

    /// The forward pass of a batch `x` (`[B, 96]`, f16).
    pub fn forward(&self, dev: &Device, x: &Tensor, dispatch: Dispatch) -> Result<Forward> {
        let b = rows(x);
        let logits = self.router.forward(dev, x)?;
        let mut probs = Tensor::zeros(&[b, N_EXPERTS], DType::F32, dev)?;
        moe::router_softmax::launch(dev, &logits, &mut probs)?;
        let mut i0 = Tensor::zeros(&[b], DType::I32, dev)?;
        let mut i1 = Tensor::zeros(&[b], DType::I32, dev)?;
        let mut w0 = Tensor::zeros(&[b], DType::F32, dev)?;
        let mut w1 = Tensor::zeros(&[b], DType::F32, dev)?;
        moe::top2::launch(dev, &probs, &mut i0, &mut i1, &mut w0, &mut w1)?;
        let (i0v, i1v) = (ints(&i0)?, ints(&i1)?);
        let (h, pos0, pos1) = match dispatch {
            Dispatch::Dense => self.dense_outputs(dev, x, &i0v, &i1v)?,
            Dispatch::Sparse => self.sparse_outputs(dev, x, &i0v, &i1v)?,
        };
        let pos0 = Tensor::from_i32(&[b], pos0)?.to_device(dev)?;
        let pos1 = Tensor::from_i32(&[b], pos1)?.to_device(dev)?;
        let mut y = Tensor::zeros(&[b, OUTPUT_DIM], DType::F16, dev)?;
        moe::combine2::launch(dev, &h, &pos0, &pos1, &w0, &w1, &mut y)?;
        Ok(Forward { y, probs, i0: i0v, i1: i1v, w0, w1 })
    }

    /// Rows of expert e: the samples routed to it; their outputs stacked
    /// expert after expert, with each sample's two positions in the stack.
    fn sparse_outputs(&self, dev: &Device, x: &Tensor, i0: &[i32], i1: &[i32]) -> Result<(Tensor, Vec<i32>, Vec<i32>)> {
        let b = i0.len();
        let mut h = Tensor::zeros(&[2 * b, OUTPUT_DIM], DType::F16, dev)?;
        let (mut pos0, mut pos1) = (vec![0i32; b], vec![0i32; b]);
        let mut at = 0usize;
        for (e, expert) in self.experts.iter().enumerate() {
            let mine: Vec<i32> = (0..b).filter(|r| i0[*r] == e as i32 || i1[*r] == e as i32).map(|r| r as i32).collect();
            if mine.is_empty() {
                continue;
            }
            for (j, r) in mine.iter().enumerate() {
                let r = *r as usize;
                let slot = (at + j) as i32;
                if i0[r] == e as i32 {
                    pos0[r] = slot;
                } else {
                    pos1[r] = slot;
                }
            }
            let idx = Tensor::from_i32(&[mine.len()], mine.clone())?.to_device(dev)?;
            let mut xe = Tensor::zeros(&[mine.len(), INPUT_DIM], DType::F16, dev)?;
            moe::gather_rows::launch(dev, x, &idx, &mut xe)?;
            h.copy_rows_from(at, &expert.forward(dev, &xe)?)?;
            at += mine.len();
        }
        Ok((h, pos0, pos1))
    }

    /// Every expert on every sample; expert e's output for sample r at row
    /// `e * B + r`.
    fn dense_outputs(&self, dev: &Device, x: &Tensor, i0: &[i32], i1: &[i32]) -> Result<(Tensor, Vec<i32>, Vec<i32>)> {
        let b = i0.len();
        let mut h = Tensor::zeros(&[N_EXPERTS * b, OUTPUT_DIM], DType::F16, dev)?;
        for (e, expert) in self.experts.iter().enumerate() {
            h.copy_rows_from(e * b, &expert.forward(dev, x)?)?;
        }
        let pos = |ix: &[i32]| ix.iter().enumerate().map(|(r, e)| e * b as i32 + r as i32).collect();
        Ok((h, pos(i0), pos(i1)))
    }
}

fn ints(t: &Tensor) -> Result<Vec<i32>> {
    match t.to_buf()? {
        crate::abi::tk_rt::Buf::I32(v) => Ok(v),
        other => Err(Error::Tensor(format!("expected i32 routing indices, got {}", other.dtype()))),
    }
}
