//! Soundness and tightness of the derived error bounds, measured: the
//! dtype-faithful mirror (the kernel's roundings, fused multiply-adds and
//! summation order, on the CPU) against the exact f64 oracle, on inputs
//! drawn at random and from the domain's edges (values, and every third
//! launch whole tensors at one edge), each error compared with
//! the bound derived for the launch's own dims ([`accuracy::analyze_at`]).
//!
//! A violation (an observed error above its proved bound) is a bug in the
//! error analysis or in an assumption; the tests require none. The ratio
//! proved/observed says how tight the bounds are.

use std::collections::HashMap;

use tokitai_contracts::fp::edges;

use crate::accuracy::magnitude;
use crate::accuracy;
use crate::eval::{self, Mode};
use crate::kir::KernelIr;
use crate::rng::SplitMix as Rng;
use crate::tir::{Contract, Dim, Kernel, Param, TensorId, TensorRole};
use crate::types::Dtype;

/// Each output's bound envelope `(abs, rel)` at one launch's dims.
pub type OutputBounds = Vec<(TensorId, Option<(f64, f64)>)>;

/// What sampling found for one output.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    pub kernel: String,
    pub output: String,
    /// Output elements compared.
    pub elements: u64,
    /// Input values drawn for the launches compared (every element of
    /// every input tensor, and the scalars).
    pub inputs: u64,
    /// Elements whose error exceeded the bound proved for their launch.
    pub violations: u64,
    /// Largest `observed / bound` (at most 1 when sound).
    pub worst_fraction: f64,
    /// Largest observed `|mirror - exact|`.
    pub max_error: f64,
    /// The bound at the element with the largest `observed / bound`.
    pub bound_there: f64,
    /// The worst element, in words.
    pub worst: String,
    /// Mirror values outside the output's float `ensures` range (0 when
    /// the range analysis is sound), and the first, in words.
    pub outside_ensures: u64,
    pub first_outside: String,
}

impl Sampled {
    /// Proved over observed at the tightest element (infinite when every
    /// error was zero).
    pub fn tightness(&self) -> f64 {
        if self.worst_fraction > 0.0 {
            1.0 / self.worst_fraction
        } else {
            f64::INFINITY
        }
    }
}

/// Dims and scalars that satisfy `requires`, drawn at random with each
/// dim at most `scale` (and its bound).
pub fn sample_launch(k: &Kernel, rng: &mut Rng, scale: i64) -> Option<(Vec<i64>, Vec<f64>)> {
    for attempt in 0..400 {
        let mut dims = vec![1i64; k.dims.len()];
        for d in 0..dims.len() {
            let class = k.dim_class[d];
            dims[d] = match k.dim_value[d] {
                Some(v) => v,
                None if class < d => dims[class],
                None => {
                    let upper = k.dim_upper_bound(Dim::Sym(d)).unwrap_or(i64::MAX);
                    rng.range(1, upper.min(scale + attempt / 8).max(1))
                }
            };
        }
        for d in 0..dims.len() {
            dims[d] = dims[k.dim_class[d]];
        }
        let scalars: Vec<f64> = k
            .scalars
            .iter()
            .enumerate()
            .map(|(i, sc)| {
                let (lo, hi) = k.domain.iter().find(|x| x.scalar == Some(i)).map(|x| (x.lo, x.hi)).unwrap_or((0.5, 1.0));
                let v = match rng.range(0, 9) {
                    0 => lo,
                    1 => hi,
                    _ => lo + (hi - lo) * rng.unit(),
                };
                eval::to_storage(sc.dtype, v).clamp(eval::to_storage(sc.dtype, lo), eval::to_storage(sc.dtype, hi))
            })
            .collect();
        let ok = k.requires.iter().all(|c| match c {
            Contract::Pred { expr, .. } => eval::holds(k, expr, &dims, &scalars),
            Contract::Range { .. } => true,
        });
        if ok {
            return Some((dims, scalars));
        }
    }
    None
}

impl edges::Draws for Rng {
    fn unit(&mut self) -> f64 {
        Rng::unit(self)
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        Rng::range(self, lo, hi)
    }
}

/// The input tensors of one launch at `dims`, in parameter order (outputs
/// empty): index tensors uniform over their declared value range, other
/// integer tensors 0 or 1, float tensors by `float(rng, dtype, lo, hi, n)`
/// over their `domain` (`[-1, 1]` without one), `n` values each.
///
/// A domain in a magnitude (`[-X, X]`) is drawn at `X = magnitude`.
pub fn draw_inputs(k: &Kernel, dims: &[i64], rng: &mut Rng, magnitude: f64, mut float: impl FnMut(&mut Rng, Dtype, f64, f64, usize) -> Vec<f64>) -> Vec<Vec<f64>> {
    let mut inputs = Vec::new();
    for p in &k.params {
        let Param::Tensor(t) = p else { continue };
        let info = &k.tensors[*t];
        let n: i64 = info
            .shape
            .iter()
            .map(|d| match d {
                Dim::Sym(id) => dims[*id],
                Dim::Lit(v) => *v,
            })
            .product();
        let vals: Vec<f64> = if info.role == TensorRole::Output {
            Vec::new()
        } else if let Some(r) = &info.value_range {
            let lo = eval::int_value(k, &r.lo, dims).unwrap_or(0);
            let hi = eval::int_value(k, &r.hi, dims).unwrap_or(1);
            let hi = if r.hi_closed { hi } else { hi - 1 };
            (0..n).map(|_| rng.range(lo, hi) as f64).collect()
        } else if info.dtype.is_float() {
            let (lo, hi) = k.domain.iter().find(|d| d.tensor == Some(*t)).map(|d| if d.magnitude.is_some() { (d.lo * magnitude, d.hi * magnitude) } else { (d.lo, d.hi) }).unwrap_or((-1.0, 1.0));
            float(rng, info.dtype, lo, hi, n as usize)
        } else {
            (0..n).map(|_| rng.range(0, 1) as f64).collect()
        };
        inputs.push(vals);
    }
    // Drawn independently, then pulled inside the domain's relations.
    let position = |t: TensorId| k.params.iter().filter(|p| matches!(p, Param::Tensor(_))).position(|p| *p == Param::Tensor(t));
    for rel in &k.relations {
        let (Some(ti), Some(si)) = (position(rel.square), position(rel.bound)) else { continue };
        let bound = inputs[si].clone();
        let ty = k.tensors[rel.square].dtype;
        tokitai_contracts::relation::enforce(&mut inputs[ti], &bound, rel.factor, |x| eval::to_storage(ty, x));
    }
    inputs
}

/// `n` values over `[lo, hi]` in storage type `ty`: each uniform or at an
/// edge ([`edges::value`]), or, `coherent`, the whole tensor at one edge
/// ([`edges::near_edge`]). Rounding into the storage type may step half an
/// ulp outside the domain; the analysis allows for exactly that.
fn draw_tensor(rng: &mut Rng, ty: Dtype, lo: f64, hi: f64, n: usize, coherent: bool) -> Vec<f64> {
    if coherent {
        let edge = edges::tensor_edge(rng, lo, hi);
        (0..n).map(|_| eval::to_storage(ty, edges::near_edge(rng, edge, lo, hi))).collect()
    } else {
        (0..n).map(|_| eval::to_storage(ty, edges::value(rng, lo, hi))).collect()
    }
}

/// Sample `k` (scheduled as `ir`) until at least `min_inputs` input values
/// have been drawn and every output with a tolerance compared on at least
/// `min_inputs / 100` elements (a reduction has few outputs per input).
pub fn sample(k: &Kernel, ir: &KernelIr, min_inputs: u64) -> Vec<Sampled> {
    let mut rng = Rng::seeded(&format!("soundness {}", k.name));
    let params: Vec<usize> = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).collect();
    let outputs: Vec<usize> = params.iter().copied().filter(|t| k.tensors[*t].role != TensorRole::Input).collect();
    let mut rows: Vec<Sampled> = outputs
        .iter()
        .filter(|t| k.tolerance_of(**t).is_some())
        .map(|t| Sampled { kernel: k.name.clone(), output: k.tensors[*t].name.clone(), elements: 0, inputs: 0, violations: 0, worst_fraction: 0.0, max_error: 0.0, bound_there: 0.0, worst: String::new(), outside_ensures: 0, first_outside: String::new() })
        .collect();
    if rows.is_empty() {
        return rows;
    }
    let scales = [4i64, 17, 64, 100, 160, 256, 400];
    let mut round = 0usize;
    // The bound depends on the dims only: derive it once per shape.
    let mut bounds: HashMap<Vec<i64>, OutputBounds> = HashMap::new();
    let magnitudes = k.uses_magnitudes().then(|| magnitude::analyze(k, ir));
    let ensured = accuracy::computed::float_ensures(k, ir);
    let mut drawn = 0u64;
    while (drawn < min_inputs || rows.iter().any(|r| r.elements < min_inputs / 100)) && round < 100_000 {
        let scale = scales[round % scales.len()];
        round += 1;
        // Every third launch draws each input tensor coherently at an edge.
        let coherent = round % 3 == 1;
        let Some((dims, scalars)) = sample_launch(k, &mut rng, scale) else { continue };
        // A domain in magnitudes is drawn at several scales: the bound
        // must hold at each, evaluated at the launch's own magnitudes.
        let x_scale = [1.0, 2f64.powi(-10), 8.0, 2f64.powi(-20)][round % 4];
        let inputs = draw_inputs(k, &dims, &mut rng, x_scale, |rng, ty, lo, hi, n| draw_tensor(rng, ty, lo, hi, n, coherent));
        let acc = match &magnitudes {
            Some(m) => match magnitude::bound_at(k, m, &dims, &scalars, &inputs) {
                Some(b) => b,
                // Outside the conditions the bound is valid under: the
                // launch is not covered, so nothing is claimed for it.
                None => continue,
            },
            None => bounds.entry(dims.clone()).or_insert_with(|| accuracy::analyze_at(k, ir, &dims).outputs.iter().map(|o| (o.tensor, o.envelope())).collect()).clone(),
        };
        let (Ok(exact), Ok(mirror)) = (eval::run(k, ir, Mode::Exact, &dims, &scalars, &inputs), eval::run(k, ir, Mode::Mirror, &dims, &scalars, &inputs)) else { continue };
        let launch_inputs = inputs.iter().map(|v| v.len() as u64).sum::<u64>() + scalars.len() as u64;
        drawn += launch_inputs;
        for ((t, e), m) in outputs.iter().zip(&exact).zip(&mirror) {
            let name = &k.tensors[*t].name;
            let Some(row) = rows.iter_mut().find(|r| &r.output == name) else { continue };
            row.inputs += launch_inputs;
            for e in ensured.iter().filter(|e| e.tensor == *t) {
                for (i, y) in m.iter().enumerate() {
                    if !e.admits(*y) {
                        row.outside_ensures += 1;
                        if row.first_outside.is_empty() {
                            row.first_outside = format!("{}[{}] = {:e} outside `{}` at dims {:?}", name, i, y, e.text, dims);
                        }
                    }
                }
            }
            let bound = acc.iter().find(|o| o.0 == *t).and_then(|o| o.1);
            let Some((ba, br)) = bound else {
                // No bound at these dims: nothing to check (the proof
                // obligation reports it).
                continue;
            };
            for (i, (x, y)) in e.iter().zip(m).enumerate() {
                let err = (x - y).abs();
                let allowed = ba + br * x.abs();
                row.elements += 1;
                let within = err <= allowed || (x.is_infinite() && x == y);
                if !within {
                    row.violations += 1;
                }
                let frac = if err == 0.0 { 0.0 } else if allowed > 0.0 { err / allowed } else { f64::INFINITY };
                row.max_error = row.max_error.max(err);
                if frac > row.worst_fraction || row.worst.is_empty() {
                    row.worst_fraction = row.worst_fraction.max(frac);
                    row.bound_there = allowed;
                    let shape: Vec<String> = k.dims.iter().zip(&dims).map(|(d, v)| format!("{}={}", d.name, v)).collect();
                    row.worst = format!("{}[{}] = {:e} against exact {:e} (bound {:e}) at {}", name, i, y, x, allowed, shape.join(","));
                }
            }
        }
    }
    rows
}
