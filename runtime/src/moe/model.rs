//! The MoE model's parameters, forward pass and backward pass on the
//! runtime's generated kernels.
//!
//! Routing: `Linear(96, 4)`, softmax (f32), top-2 probabilities (not
//! renormalised). Sparse dispatch: each sample's row is gathered into the
//! buffers of its two experts, each expert runs on its rows only, and
//! `combine2` weighs the two outputs back into place. The dense form runs
//! every expert on every row (as the old crate did) for comparison. The
//! dense *model* (`ModelKind::Dense`) is one MLP of the experts' depth,
//! wide enough to hold the MoE's parameter count.
//!
//! Parameters live in one list (`Params`), router first: layers refer to
//! them by index, gradients come back in the same order, and the optimiser
//! sees them as one flat buffer.

use super::config::{Size, INPUT_DIM, N_EXPERTS, OUTPUT_DIM};
use super::sheaf;
use crate::kernels::{gelu, layernorm, linear, moe};
use crate::abi::tk_rt::Buf;
use crate::{DType, Device, Error, Result, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const LAYERNORM_EPS: f32 = 1e-5;

/// Index of a parameter tensor in `Params`.
pub type ParamId = usize;

/// The model's parameter tensors, in a fixed order, with their names (the
/// checkpoint's tensor names).
pub struct Params {
    pub names: Vec<String>,
    pub tensors: Vec<Tensor>,
}

impl Params {
    fn add(&mut self, name: String, t: Tensor) -> ParamId {
        self.names.push(name);
        self.tensors.push(t);
        self.tensors.len() - 1
    }
    pub fn len(&self) -> usize {
        self.tensors.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
    /// Elements over every parameter.
    pub fn elements(&self) -> usize {
        self.tensors.iter().map(Tensor::len).sum()
    }
}

/// `y = x W + b` with `W` stored `[in, out]`, f16.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub w: ParamId,
    pub b: ParamId,
}

#[derive(Clone, Copy, Debug)]
pub struct Norm {
    pub gamma: ParamId,
    pub beta: ParamId,
}

/// `Linear(96, h) + LayerNorm + GELU`, `n_hidden x [Linear(h, h) +
/// LayerNorm + GELU]`, `Linear(h, 20)`: an expert, or the dense model.
#[derive(Clone, Debug)]
pub struct Mlp {
    pub layers: Vec<(Linear, Norm)>,
    pub out: Linear,
}

/// What routes samples to experts.
#[derive(Clone, Debug)]
pub enum Router {
    /// `Linear(96, 4)` and a softmax.
    Softmax(Linear),
    /// `Linear(96, 6)`: p-adic gates over a binary tree of the experts,
    /// with the sheaf disagreement energy of the feature blocks (`sheaf`).
    SheafPadic(Linear),
}

impl Router {
    pub fn linear(&self) -> Linear {
        match self {
            Router::Softmax(l) | Router::SheafPadic(l) => *l,
        }
    }
}

pub struct Model {
    pub size: Size,
    /// `None` for the dense model.
    pub router: Option<Router>,
    /// The experts, or the dense model's one MLP.
    pub experts: Vec<Mlp>,
    pub params: Params,
    /// Which input column belongs to which feature block (the sheaf-padic
    /// router's cover; uploaded once).
    sheaf_blocks: Option<Tensor>,
}

/// How samples reach experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Each sample through its two experts only.
    Sparse,
    /// Every expert on every sample; the top-2 weights pick the outputs.
    Dense,
}

/// Which model: the mixture (with its router) or one dense MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Softmax router.
    Moe,
    /// Sheaf-padic router.
    SheafPadic,
    /// One dense MLP, no router.
    Dense,
}

/// Activations of one MLP that its backward pass reads.
struct MlpTape {
    z: Vec<Tensor>,
    /// LayerNorm outputs (GELU inputs), flat; none where the backward is
    /// fused (`layernorm_gelu_bwd` recomputes them).
    normed: Vec<Option<Tensor>>,
    mean: Vec<Tensor>,
    rstd: Vec<Tensor>,
    act: Vec<Tensor>,
}

impl Forward {
    /// The batch mean of the sheaf disagreement energy (sheaf-padic router;
    /// a device read).
    pub fn sheaf_energy(&self) -> Result<Option<f64>> {
        self.routing.as_ref().and_then(|r| r.sheaf.as_ref()).map(|t| t.mean_energy()).transpose()
    }
    /// Each sample's disagreement energy (sheaf-padic router), on the
    /// device.
    pub fn energy_tensor(&self) -> Option<&Tensor> {
        self.routing.as_ref().and_then(|r| r.sheaf.as_ref()).map(|t| &t.energy)
    }
    /// Each sample's two experts (`None` for the dense model; a device
    /// read).
    pub fn routes(&self) -> Result<Option<(Vec<i32>, Vec<i32>)>> {
        self.routing.as_ref().map(|r| Ok((ints(r.i0.to_buf()?)?, ints(r.i1.to_buf()?)?))).transpose()
    }
}

/// The fusions `TOKITAI_UNFUSED` turns off (a comma-separated list): an
/// ablation switch, so that a benchmark can time one step both ways in one
/// run. Read once.
fn unfused() -> &'static [String] {
    static UNFUSED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    UNFUSED.get_or_init(|| std::env::var("TOKITAI_UNFUSED").map_or(Vec::new(), |v| v.split(',').map(|s| s.trim().to_string()).collect()))
}

/// Is a hidden layer's LayerNorm and GELU one launch
/// (`layernorm_gelu_fwd`, or `layernorm_gelu_act` where the backward is
/// fused too)? Yes unless `TOKITAI_UNFUSED=layernorm_gelu`.
fn fused_layernorm_gelu() -> bool {
    !unfused().iter().any(|s| s == "layernorm_gelu")
}

/// Is a hidden layer's GELU and LayerNorm backward one launch
/// (`layernorm_gelu_bwd`)? Yes unless `TOKITAI_UNFUSED=layernorm_gelu_bwd`.
fn fused_layernorm_gelu_bwd() -> bool {
    !unfused().iter().any(|s| s == "layernorm_gelu_bwd")
}

/// One expert's share of a forward pass: its rows of the stacked output.
struct ExpertRun {
    expert: usize,
    /// First row in the stacked outputs `h`, and the number of rows.
    at: usize,
    rows: usize,
    /// The expert's input rows (`None`: the whole batch, dense form).
    input: Option<Tensor>,
    tape: MlpTape,
}

/// The routing of a batch. Everything stays on the device: reading it is
/// for after the step (`Forward::routes`).
pub struct Routing {
    pub logits: Tensor,
    pub probs: Tensor,
    /// Each sample's two experts and their weights.
    pub i0: Tensor,
    pub i1: Tensor,
    pub w0: Tensor,
    pub w1: Tensor,
    /// The experts' stacked outputs: dense form `[E, B, 20]`, sparse form
    /// expert after expert `[2B, 20]`.
    h: Tensor,
    /// The sparse form's maps between samples and rows of `h`.
    sparse: Option<SparseMaps>,
    /// The sheaf-padic router's block sections.
    sheaf: Option<sheaf::Tape>,
}

/// Where each sample's two outputs sit in the sparse form's `h`, and for
/// each row of `h` its sample and combine weight.
struct SparseMaps {
    pos0: Tensor,
    pos1: Tensor,
    src: Tensor,
    ws: Tensor,
}

/// What a forward pass computed, and what its backward pass needs.
pub struct Forward {
    pub y: Tensor,
    /// `None` for the dense model.
    pub routing: Option<Routing>,
    runs: Vec<ExpertRun>,
}

fn init_linear(p: &mut Params, rng: &mut ChaCha8Rng, name: &str, fan_in: usize, fan_out: usize, dev: &Device) -> Result<Linear> {
    // PyTorch's default for nn.Linear: uniform in +-1/sqrt(fan_in).
    let bound = 1.0 / (fan_in as f64).sqrt();
    let mut draw = |n: usize| (0..n).map(|_| rng.random_range(-bound..bound)).collect::<Vec<f64>>();
    let w = Tensor::from_f64_as(&[fan_in, fan_out], DType::F16, &draw(fan_in * fan_out))?.to_device(dev)?;
    let b = Tensor::from_f64_as(&[fan_out], DType::F16, &draw(fan_out))?.to_device(dev)?;
    Ok(Linear { w: p.add(format!("{}.weight", name), w), b: p.add(format!("{}.bias", name), b) })
}

fn init_norm(p: &mut Params, name: &str, h: usize, dev: &Device) -> Result<Norm> {
    let gamma = Tensor::full(&[h], DType::F16, 1.0, dev)?;
    let beta = Tensor::zeros(&[h], DType::F16, dev)?;
    Ok(Norm { gamma: p.add(format!("{}.weight", name), gamma), beta: p.add(format!("{}.bias", name), beta) })
}

fn init_mlp(p: &mut Params, rng: &mut ChaCha8Rng, name: &str, h: usize, n_hidden: usize, dev: &Device) -> Result<Mlp> {
    let mut layers = vec![(init_linear(p, rng, &format!("{}.0.linear", name), INPUT_DIM, h, dev)?, init_norm(p, &format!("{}.0.norm", name), h, dev)?)];
    for l in 1..=n_hidden {
        layers.push((init_linear(p, rng, &format!("{}.{}.linear", name, l), h, h, dev)?, init_norm(p, &format!("{}.{}.norm", name, l), h, dev)?));
    }
    Ok(Mlp { layers, out: init_linear(p, rng, &format!("{}.out", name), h, OUTPUT_DIM, dev)? })
}

fn rows(t: &Tensor) -> usize {
    t.shape()[0]
}

/// The widest layer the linear kernels admit (`linear_fwd` requires
/// `K <= 4096`: its tolerance proof bounds the accumulation error by K).
pub fn max_width() -> usize {
    crate::kernels::by_name("linear_fwd")
        .and_then(|k| k.info.dims.iter().position(|d| *d == "K").and_then(|i| k.info.dim_upper.get(i).copied().flatten()))
        .map_or(4096, |v| v as usize)
}

/// The width of the dense model of `size`: the MLP of the experts' depth
/// whose parameter count is nearest the MoE's, at most `max_width()`.
pub fn dense_width(size: Size) -> usize {
    let n = size.n_hidden() as f64;
    // n h^2 + (96 + 1 + 2 + 3n + 20) h + 20 = P
    let (a, b, c) = (n, (INPUT_DIM + 3 + OUTPUT_DIM) as f64 + 3.0 * n, OUTPUT_DIM as f64 - size.param_count() as f64);
    (((-b + (b * b - 4.0 * a * c).sqrt()) / (2.0 * a)).round() as usize).min(max_width())
}

/// Parameters of the dense model of `size`.
pub fn dense_params(size: Size) -> usize {
    let (h, n) = (dense_width(size), size.n_hidden());
    INPUT_DIM * h + h + 2 * h + n * (h * h + h + 2 * h) + h * OUTPUT_DIM + OUTPUT_DIM
}

/// The dense model of `size` holds the MoE's parameter count within 5%
/// (moe.md), or says why it cannot.
pub fn check_dense(size: Size) -> Result<()> {
    let (d, m) = (dense_params(size) as f64, size.param_count() as f64);
    if (d - m).abs() / m <= 0.05 {
        return Ok(());
    }
    Err(Error::Tensor(format!(
        "the dense model of size {} would need layers wider than {} to hold the MoE's {} parameters within 5% (at width {} it has {}): linear_fwd requires K <= {} (its accumulation-error proof)",
        size,
        max_width(),
        size.param_count(),
        dense_width(size),
        dense_params(size),
        max_width()
    )))
}

impl Model {
    /// Deterministic initial parameters on `dev`.
    pub fn init(size: Size, kind: Kind, seed: u64, dev: &Device) -> Result<Model> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA076_1D64_78BD_642F);
        let mut params = Params { names: Vec::new(), tensors: Vec::new() };
        let (router, experts) = match kind {
            Kind::Moe | Kind::SheafPadic => {
                let router = if kind == Kind::Moe {
                    Router::Softmax(init_linear(&mut params, &mut rng, "router", INPUT_DIM, N_EXPERTS, dev)?)
                } else {
                    Router::SheafPadic(init_linear(&mut params, &mut rng, "router", INPUT_DIM, sheaf::ROUTER_LOGITS, dev)?)
                };
                let experts = (0..N_EXPERTS).map(|e| init_mlp(&mut params, &mut rng, &format!("experts.{}", e), size.hidden(), size.n_hidden(), dev)).collect::<Result<Vec<_>>>()?;
                (Some(router), experts)
            }
            Kind::Dense => {
                check_dense(size)?;
                (None, vec![init_mlp(&mut params, &mut rng, "dense", dense_width(size), size.n_hidden(), dev)?])
            }
        };
        let sheaf_blocks = match router {
            Some(Router::SheafPadic(_)) => Some(Tensor::from_i32(&[INPUT_DIM], sheaf::block_of_columns())?.to_device(dev)?),
            _ => None,
        };
        let model = Model { size, router, experts, params, sheaf_blocks };
        crate::monitor::check_edges(&model.composed_edges())?;
        Ok(model)
    }

    /// The step's producer outputs whose proved range is a consumer's whole
    /// domain (issue 18: domains that compose), checked once when the model
    /// is built: at run time the monitor measures none of these inputs.
    fn composed_edges(&self) -> Vec<crate::monitor::Edge> {
        use crate::kernels::sheaf::{padic_gate, sheaf_energy, sheaf_energy_bwd};
        use moe::{combine2, combine_dense, combine_dense_bwd_h, router_bwd, router_softmax, top2};
        let edge = |producer, output, consumer, input| crate::monitor::Edge { producer, output, consumer, input };
        let mut edges: Vec<crate::monitor::Edge> = Vec::new();
        for w in ["w0", "w1"] {
            edges.extend([edge(&top2::INFO, w, &combine2::INFO, w), edge(&top2::INFO, w, &combine_dense::INFO, w), edge(&top2::INFO, w, &combine_dense_bwd_h::INFO, w)]);
        }
        match self.kind() {
            Kind::Moe => edges.extend([edge(&router_softmax::INFO, "p", &top2::INFO, "p"), edge(&router_softmax::INFO, "p", &router_bwd::INFO, "p")]),
            Kind::SheafPadic => edges.extend([edge(&padic_gate::INFO, "p", &top2::INFO, "p"), edge(&padic_gate::INFO, "p", &sheaf_energy::INFO, "ps"), edge(&padic_gate::INFO, "p", &sheaf_energy_bwd::INFO, "ps")]),
            Kind::Dense => edges.clear(),
        }
        edges
    }

    /// The parameters a checkpoint holds (by name, each of the shape this
    /// model's has), as f16 on `dev`.
    pub fn restore_params(&mut self, c: &super::run::Checkpoint, dev: &Device) -> Result<()> {
        let bad = |m: String| Error::Tensor(format!("checkpoint: {}", m));
        for i in 0..self.params.len() {
            let name = &self.params.names[i];
            let (_, shape, data) = c.tensors.iter().find(|(n, _, _)| n == name).ok_or_else(|| bad(format!("has no tensor `{}`", name)))?;
            let t = &self.params.tensors[i];
            if shape.as_slice() != t.shape() {
                return Err(bad(format!("`{}` has shape {:?}, the model wants {:?}", name, shape, t.shape())));
            }
            let data: Vec<f64> = data.iter().map(|v| *v as f64).collect();
            self.params.tensors[i] = Tensor::from_f64_as(shape, DType::F16, &data)?.to_device(dev)?;
        }
        Ok(())
    }

    pub fn kind(&self) -> Kind {
        match &self.router {
            None => Kind::Dense,
            Some(Router::Softmax(_)) => Kind::Moe,
            Some(Router::SheafPadic(_)) => Kind::SheafPadic,
        }
    }

    fn sheaf_blocks(&self) -> Result<&Tensor> {
        self.sheaf_blocks.as_ref().ok_or_else(|| Error::Tensor("the sheaf-padic router without its block map".into()))
    }

    pub fn tensor(&self, id: ParamId) -> &Tensor {
        &self.params.tensors[id]
    }

    fn linear(&self, dev: &Device, l: Linear, x: &Tensor) -> Result<Tensor> {
        let mut y = Tensor::output(&[rows(x), self.tensor(l.w).shape()[1]], DType::F16, dev)?;
        linear::linear_fwd::launch(dev, x, self.tensor(l.w), self.tensor(l.b), &mut y)?;
        Ok(y)
    }

    /// The hidden layers of `mlp` (not its output layer) on `x`.
    fn mlp_hidden(&self, dev: &Device, mlp: &Mlp, x: &Tensor) -> Result<MlpTape> {
        let n = rows(x);
        let mut tape = MlpTape { z: Vec::new(), normed: Vec::new(), mean: Vec::new(), rstd: Vec::new(), act: Vec::new() };
        for (lin, norm) in &mlp.layers {
            let z = self.linear(dev, *lin, tape.act.last().unwrap_or(x))?;
            let width = z.shape()[1];
            let mut act = Tensor::output(&[n, width], DType::F16, dev)?;
            let mut mean = Tensor::output(&[n], DType::F32, dev)?;
            let mut rstd = Tensor::output(&[n], DType::F32, dev)?;
            let (gamma, beta) = (self.tensor(norm.gamma), self.tensor(norm.beta));
            let normed = if fused_layernorm_gelu() && fused_layernorm_gelu_bwd() {
                // LayerNorm and GELU in one pass over each row; the fused
                // backward recomputes the normalised rows, so they are
                // neither written nor kept.
                layernorm::layernorm_gelu_act::launch(dev, &z, gamma, beta, LAYERNORM_EPS, &mut act, &mut mean, &mut rstd)?;
                None
            } else {
                let mut normed = Tensor::output(&[n, width], DType::F16, dev)?;
                if fused_layernorm_gelu() {
                    layernorm::layernorm_gelu_fwd::launch(dev, &z, gamma, beta, LAYERNORM_EPS, &mut normed, &mut act, &mut mean, &mut rstd)?;
                } else {
                    layernorm::layernorm_fwd::launch(dev, &z, gamma, beta, LAYERNORM_EPS, &mut normed, &mut mean, &mut rstd)?;
                    normed.set_shape(&[n * width])?;
                    act.set_shape(&[n * width])?;
                    gelu::gelu_fwd::launch(dev, &normed, &mut act)?;
                    act.set_shape(&[n, width])?;
                }
                Some(normed.reshape(&[n * width])?)
            };
            tape.z.push(z);
            tape.normed.push(normed);
            tape.mean.push(mean);
            tape.rstd.push(rstd);
            tape.act.push(act);
        }
        Ok(tape)
    }

    /// Expert `e` on `x`, its outputs written to rows `at..` of `h`.
    fn expert_into(&self, dev: &Device, e: usize, x: &Tensor, h: &mut Tensor, at: usize) -> Result<MlpTape> {
        let mlp = &self.experts[e];
        let tape = self.mlp_hidden(dev, mlp, x)?;
        let last = tape.act.last().unwrap_or(x);
        if dev.has_views() {
            let mut out = h.view(at * OUTPUT_DIM, &[rows(x), OUTPUT_DIM])?;
            linear::linear_fwd::launch(dev, last, self.tensor(mlp.out.w), self.tensor(mlp.out.b), &mut out)?;
        } else {
            h.copy_rows_from(at, &self.linear(dev, mlp.out, last)?)?;
        }
        Ok(tape)
    }

    /// The forward pass of a batch `x` (`[B, 96]`, f16). With dense
    /// dispatch (and for the dense model) nothing is read back to the host,
    /// so the step can be captured as a graph; sparse dispatch reads the
    /// routing to size each expert's rows.
    pub fn forward(&self, dev: &Device, x: &Tensor, dispatch: Dispatch) -> Result<Forward> {
        let b = rows(x);
        let Some(router) = &self.router else {
            let mlp = &self.experts[0];
            let tape = self.mlp_hidden(dev, mlp, x)?;
            let y = self.linear(dev, mlp.out, tape.act.last().unwrap_or(x))?;
            return Ok(Forward { y, routing: None, runs: vec![ExpertRun { expert: 0, at: 0, rows: b, input: None, tape }] });
        };
        let logits = self.linear(dev, router.linear(), x)?;
        let mut probs = Tensor::output(&[b, N_EXPERTS], DType::F32, dev)?;
        let sheaf_tape = match router {
            Router::Softmax(_) => {
                moe::router_softmax::launch(dev, &logits, &mut probs)?;
                None
            }
            Router::SheafPadic(l) => Some(sheaf::forward(dev, x, &logits, self.tensor(l.w), self.sheaf_blocks()?, &mut probs)?),
        };
        let mut i0 = Tensor::output(&[b], DType::I32, dev)?;
        let mut i1 = Tensor::output(&[b], DType::I32, dev)?;
        let mut w0 = Tensor::output(&[b], DType::F32, dev)?;
        let mut w1 = Tensor::output(&[b], DType::F32, dev)?;
        moe::top2::launch(dev, &probs, &mut i0, &mut i1, &mut w0, &mut w1)?;
        let mut runs = Vec::new();
        let mut y = Tensor::output(&[b, OUTPUT_DIM], DType::F16, dev)?;
        let (h, sparse) = match dispatch {
            Dispatch::Dense => {
                // Every row is written by its expert.
                let mut h = Tensor::output(&[N_EXPERTS * b, OUTPUT_DIM], DType::F16, dev)?;
                for e in 0..N_EXPERTS {
                    let tape = self.expert_into(dev, e, x, &mut h, e * b)?;
                    runs.push(ExpertRun { expert: e, at: e * b, rows: b, input: None, tape });
                }
                h.set_shape(&[N_EXPERTS, b, OUTPUT_DIM])?;
                moe::combine_dense::launch(dev, &h, &i0, &i1, &w0, &w1, &mut y)?;
                (h, None)
            }
            Dispatch::Sparse => {
                // One wait for the routing (four read-backs would be four).
                let [i0h, i1h, w0h, w1h]: [Buf; 4] = Tensor::read_all(&[&i0, &i1, &w0, &w1])?.try_into().map_err(|_| Error::Tensor("four routing tensors read back as another number".into()))?;
                let mut plan = sparse_plan(&ints(i0h)?, &ints(i1h)?, &w0h.to_f32(), &w1h.to_f32())?;
                // The device idles from the read-back until the first
                // launch: `src` goes up first and every expert's rows are
                // gathered (a view of `src` each); the other maps go up
                // once every expert's layers are queued (only the combine
                // reads them), so no upload waits before or between the
                // experts' launches (the timeline showed 40 us of host
                // queueing before the first expert while they went up
                // first).
                let upload_i32 = |v: Vec<i32>| -> Result<Tensor> { Tensor::from_i32(&[v.len()], v)?.to_device(dev) };
                let slots = plan.src.len();
                let src = upload_i32(plan.src.clone())?;
                let mut inputs = Vec::with_capacity(N_EXPERTS);
                for e in (0..N_EXPERTS).filter(|&e| !plan.members(e).is_empty()) {
                    let (at, members) = (plan.start[e], plan.members(e));
                    let idx = if dev.has_views() { src.view(at, &[members.len()])? } else { upload_i32(members.to_vec())? };
                    let mut xe = Tensor::output(&[members.len(), INPUT_DIM], DType::F16, dev)?;
                    moe::gather_rows::launch(dev, x, &idx, &mut xe)?;
                    inputs.push((e, xe));
                }
                let mut h = Tensor::output(&[slots, OUTPUT_DIM], DType::F16, dev)?;
                for (e, xe) in inputs {
                    let at = plan.start[e];
                    let tape = self.expert_into(dev, e, &xe, &mut h, at)?;
                    runs.push(ExpertRun { expert: e, at, rows: plan.members(e).len(), input: Some(xe), tape });
                }
                let (pos0, pos1, ws) = (std::mem::take(&mut plan.pos0), std::mem::take(&mut plan.pos1), std::mem::take(&mut plan.ws));
                let maps = SparseMaps { pos0: upload_i32(pos0)?, pos1: upload_i32(pos1)?, src, ws: Tensor::from_f32(&[slots], ws)?.to_device(dev)? };
                moe::combine2::launch(dev, &h, &maps.pos0, &maps.pos1, &w0, &w1, &mut y)?;
                (h, Some(maps))
            }
        };
        let routing = Routing { logits, probs, i0, i1, w0, w1, h, sparse, sheaf: sheaf_tape };
        Ok(Forward { y, routing: Some(routing), runs })
    }

    /// Gradients of every parameter (in `Params` order) for the output
    /// gradient `gy` (`[B, 20]`, f16, scaled by `loss_scale`). The
    /// sheaf-padic router's energy enters the objective with weight
    /// `sheaf::SHEAF_WEIGHT` (batch mean), scaled alike.
    pub fn backward(&self, dev: &Device, x: &Tensor, fwd: &Forward, gy: &Tensor, loss_scale: f32) -> Result<Vec<Tensor>> {
        let mut grads = self.params.tensors.iter().map(|t| Tensor::output(t.shape(), DType::F16, dev)).collect::<Result<Vec<_>>>()?;
        self.backward_into(dev, x, fwd, gy, loss_scale, &mut grads)?;
        Ok(grads)
    }

    /// `backward`, written into `grads` (one tensor per parameter, of its
    /// shape: the trainer passes views of its flat gradient buffer where
    /// the device has them, so nothing is packed afterwards).
    pub fn backward_into(&self, dev: &Device, x: &Tensor, fwd: &Forward, gy: &Tensor, loss_scale: f32, grads: &mut [Tensor]) -> Result<()> {
        if grads.len() != self.params.len() {
            return Err(Error::Tensor(format!("backward_into: {} gradient tensors for {} parameters", grads.len(), self.params.len())));
        }
        let mut g = Grads { tensors: grads, written: vec![false; self.params.len()] };
        match (&self.router, &fwd.routing) {
            (None, _) => {
                let run = &fwd.runs[0];
                self.mlp_backward(dev, &self.experts[0], x, &run.tape, gy, &mut g)?;
            }
            (Some(router), Some(r)) => {
                let b = rows(x);
                // To the stacked expert outputs, and to the two weights.
                let mut gw0 = Tensor::output(&[b], DType::F32, dev)?;
                let mut gw1 = Tensor::output(&[b], DType::F32, dev)?;
                let gh = match &r.sparse {
                    None => {
                        let mut gh = Tensor::output(&[N_EXPERTS, b, OUTPUT_DIM], DType::F16, dev)?;
                        moe::combine_dense_bwd_h::launch(dev, gy, &r.i0, &r.i1, &r.w0, &r.w1, &mut gh)?;
                        moe::combine_dense_bwd_w::launch(dev, &r.h, &r.i0, &r.i1, gy, &mut gw0, &mut gw1)?;
                        gh.reshape(&[N_EXPERTS * b, OUTPUT_DIM])?
                    }
                    Some(m) => {
                        let mut gh = Tensor::output(&[m.src.len(), OUTPUT_DIM], DType::F16, dev)?;
                        moe::combine2_bwd_h::launch(dev, gy, &m.src, &m.ws, &mut gh)?;
                        moe::combine2_bwd_w::launch(dev, &r.h, &m.pos0, &m.pos1, gy, &mut gw0, &mut gw1)?;
                        gh
                    }
                };
                for run in &fwd.runs {
                    let rows = if dev.has_views() { gh.view(run.at * OUTPUT_DIM, &[run.rows, OUTPUT_DIM])? } else { gh.rows(run.at, run.rows, dev)? };
                    self.mlp_backward(dev, &self.experts[run.expert], run.input.as_ref().unwrap_or(x), &run.tape, &rows, &mut g)?;
                }
                match (router, &r.sheaf) {
                    (Router::SheafPadic(lin), Some(tape)) => {
                        let scale = loss_scale * (sheaf::SHEAF_WEIGHT / b as f64) as f32;
                        let (gw, gb) = g.pair(lin.w, lin.b);
                        sheaf::backward(dev, x, self.sheaf_blocks()?, tape, &r.logits, &r.i0, &r.i1, &gw0, &gw1, scale, gw, gb)?;
                    }
                    _ => {
                        let mut gz = Tensor::output(&[b, N_EXPERTS], DType::F16, dev)?;
                        moe::router_bwd::launch(dev, &r.probs, &r.i0, &r.i1, &gw0, &gw1, &mut gz)?;
                        self.linear_param_grads(dev, router.linear(), x, &gz, &mut g)?;
                    }
                }
            }
            (Some(_), None) => return Err(Error::Tensor("a mixture's forward pass without routing".into())),
        }
        // An expert no sample chose gets zero gradients.
        for (t, written) in g.tensors.iter_mut().zip(&g.written) {
            if !written {
                t.fill_zero()?;
            }
        }
        Ok(())
    }

    fn linear_param_grads(&self, dev: &Device, l: Linear, input: &Tensor, gz: &Tensor, g: &mut Grads) -> Result<()> {
        let (gw, gb) = g.pair(l.w, l.b);
        linear::linear_bwd_w::launch(dev, input, gz, gw)?;
        linear::bias_grad::launch(dev, gz, gb)
    }

    fn mlp_backward(&self, dev: &Device, mlp: &Mlp, x: &Tensor, tape: &MlpTape, gout: &Tensor, grads: &mut Grads) -> Result<()> {
        let n = rows(x);
        let last = tape.act.last().unwrap_or(x);
        self.linear_param_grads(dev, mlp.out, last, gout, grads)?;
        // The gradient reaching the current layer's output.
        let mut g = Some(input_grad(dev, gout, self.tensor(mlp.out.w))?);
        for (l, (lin, norm)) in mlp.layers.iter().enumerate().rev() {
            let width = tape.z[l].shape()[1];
            // GELU, then LayerNorm (input and parameters), then the linear.
            let g_act = g.take().expect("set before every layer");
            let mut gz = Tensor::output(&[n, width], DType::F16, dev)?;
            let mut xhat = Tensor::output(&[n, width], DType::F16, dev)?;
            let (gamma, beta) = (self.tensor(norm.gamma), self.tensor(norm.beta));
            let gn = if fused_layernorm_gelu_bwd() {
                // One pass: GELU's slope at the recomputed normalised value.
                let mut gn = Tensor::output(&[n, width], DType::F16, dev)?;
                layernorm::layernorm_gelu_bwd::launch(dev, &tape.z[l], gamma, beta, &tape.mean[l], &tape.rstd[l], &g_act, &mut gz, &mut xhat, &mut gn)?;
                gn
            } else {
                let mut gn = Tensor::output(&[n * width], DType::F16, dev)?;
                let normed = tape.normed[l].as_ref().ok_or_else(|| Error::Tensor("the unfused GELU backward without the normalised rows on the tape".into()))?;
                gelu::gelu_bwd::launch(dev, normed, &g_act.reshape(&[n * width])?, &mut gn)?;
                let gn = gn.reshape(&[n, width])?;
                layernorm::layernorm_bwd::launch(dev, &tape.z[l], gamma, &tape.mean[l], &tape.rstd[l], &gn, &mut gz, &mut xhat)?;
                gn
            };
            let (ggamma, gbeta) = grads.pair(norm.gamma, norm.beta);
            layernorm::layernorm_bwd_params::launch(dev, &xhat, &gn, ggamma, gbeta)?;
            let input = if l == 0 { x } else { &tape.act[l - 1] };
            self.linear_param_grads(dev, *lin, input, &gz, grads)?;
            if l > 0 {
                g = Some(input_grad(dev, &gz, self.tensor(lin.w))?);
            }
        }
        Ok(())
    }
}

/// The gradient tensors being written, and which have been.
struct Grads<'a> {
    tensors: &'a mut [Tensor],
    written: Vec<bool>,
}

impl Grads<'_> {
    /// The gradients of parameters `a` and `b` (distinct), marked written.
    fn pair(&mut self, a: ParamId, b: ParamId) -> (&mut Tensor, &mut Tensor) {
        assert_ne!(a, b, "a weight and its bias are distinct parameters");
        self.written[a] = true;
        self.written[b] = true;
        if a < b {
            let (lo, hi) = self.tensors.split_at_mut(b);
            (&mut lo[a], &mut hi[0])
        } else {
            let (lo, hi) = self.tensors.split_at_mut(a);
            (&mut hi[0], &mut lo[b])
        }
    }
}

/// `gx = gz W^T`.
fn input_grad(dev: &Device, gz: &Tensor, w: &Tensor) -> Result<Tensor> {
    let mut gx = Tensor::output(&[rows(gz), w.shape()[0]], DType::F16, dev)?;
    linear::linear_bwd_x::launch(dev, gz, w, &mut gx)?;
    Ok(gx)
}

/// Where every sample's outputs go in the sparse form's stacked buffer `h`.
struct Plan {
    /// Expert `e`'s slots are `start[e]..start[e + 1]`.
    start: [usize; N_EXPERTS + 1],
    /// Each sample's slot in its first and second expert.
    pos0: Vec<i32>,
    pos1: Vec<i32>,
    /// Each slot's sample, and its weight.
    src: Vec<i32>,
    ws: Vec<f32>,
}

impl Plan {
    /// The samples expert `e` runs on, in order.
    fn members(&self, e: usize) -> &[i32] {
        &self.src[self.start[e]..self.start[e + 1]]
    }
}

/// Expert after expert, each with the samples that chose it in sample
/// order. One counting pass and one placing pass: this runs on the host
/// while the device waits (the timeline showed 140-200 us on the H200's
/// host for a pass per expert at batch 4096). A sample whose two choices
/// are one expert goes there once, as its first choice.
fn sparse_plan(i0: &[i32], i1: &[i32], w0: &[f32], w1: &[f32]) -> Result<Plan> {
    let b = i0.len();
    let expert = |v: i32, r: usize| -> Result<usize> {
        usize::try_from(v).ok().filter(|&e| e < N_EXPERTS).ok_or_else(|| Error::Tensor(format!("sample {} was routed to expert {}, outside 0..{}", r, v, N_EXPERTS)))
    };
    let mut count = [0usize; N_EXPERTS];
    for r in 0..b {
        let (e0, e1) = (expert(i0[r], r)?, expert(i1[r], r)?);
        count[e0] += 1;
        if e1 != e0 {
            count[e1] += 1;
        }
    }
    let mut start = [0usize; N_EXPERTS + 1];
    for e in 0..N_EXPERTS {
        start[e + 1] = start[e] + count[e];
    }
    let slots = start[N_EXPERTS];
    let mut p = Plan { start, pos0: vec![0; b], pos1: vec![0; b], src: vec![0; slots], ws: vec![0.0; slots] };
    let mut next = start;
    for r in 0..b {
        let (e0, e1) = (i0[r] as usize, i1[r] as usize);
        let slot = next[e0];
        next[e0] += 1;
        (p.pos0[r], p.src[slot], p.ws[slot]) = (slot as i32, r as i32, w0[r]);
        if e1 != e0 {
            let slot = next[e1];
            next[e1] += 1;
            (p.pos1[r], p.src[slot], p.ws[slot]) = (slot as i32, r as i32, w1[r]);
        }
    }
    Ok(p)
}

fn ints(b: Buf) -> Result<Vec<i32>> {
    match b {
        crate::abi::tk_rt::Buf::I32(v) => Ok(v),
        other => Err(Error::Tensor(format!("expected i32 routing indices, got {}", other.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The plan as its definition reads: expert after expert, a pass over
    /// the samples each.
    fn plan_by_definition(i0: &[i32], i1: &[i32], w0: &[f32], w1: &[f32]) -> (Vec<usize>, Vec<i32>, Vec<i32>, Vec<i32>, Vec<f32>) {
        let b = i0.len();
        let (mut start, mut pos0, mut pos1, mut src, mut ws) = (Vec::new(), vec![0; b], vec![0; b], Vec::new(), Vec::new());
        for e in 0..N_EXPERTS as i32 {
            start.push(src.len());
            for r in 0..b {
                let slot = src.len() as i32;
                if i0[r] == e {
                    pos0[r] = slot;
                    ws.push(w0[r]);
                } else if i1[r] == e {
                    pos1[r] = slot;
                    ws.push(w1[r]);
                } else {
                    continue;
                }
                src.push(r as i32);
            }
        }
        start.push(src.len());
        (start, pos0, pos1, src, ws)
    }

    proptest! {
        #[test]
        fn the_two_pass_plan_is_the_plan_by_definition(routes in proptest::collection::vec((0..N_EXPERTS as i32, 0..N_EXPERTS as i32, 0.0f32..1.0, 0.0f32..1.0), 1..300)) {
            let (i0, i1, w0, w1): (Vec<_>, Vec<_>, Vec<_>, Vec<_>) = routes.iter().fold(Default::default(), |mut acc: (Vec<i32>, Vec<i32>, Vec<f32>, Vec<f32>), r| {
                acc.0.push(r.0);
                acc.1.push(r.1);
                acc.2.push(r.2);
                acc.3.push(r.3);
                acc
            });
            let p = sparse_plan(&i0, &i1, &w0, &w1).unwrap();
            let (start, pos0, pos1, src, ws) = plan_by_definition(&i0, &i1, &w0, &w1);
            prop_assert_eq!(p.start.to_vec(), start);
            prop_assert_eq!(p.pos0, pos0);
            prop_assert_eq!(p.pos1, pos1);
            prop_assert_eq!(p.src, src);
            prop_assert_eq!(p.ws, ws);
        }
    }

    #[test]
    fn a_route_outside_the_experts_is_an_error_naming_the_sample() {
        let err = sparse_plan(&[0, 1, 4], &[1, 2, 0], &[0.5; 3], &[0.5; 3]).err().expect("expert 4 of 4 is refused");
        assert!(err.to_string().contains("sample 2 was routed to expert 4"), "{}", err);
        assert!(sparse_plan(&[0], &[-1], &[0.5], &[0.5]).is_err());
    }
}
