//! `tokitai-train export`: a saved model's weights with PyTorch's
//! conventions, for the reference module `runtime/python/tokitai_moe.py`.
//!
//! What changes from the checkpoint: linear weights are stored `[out, in]`
//! (ours are `[in, out]`: `y = x W + b`), the hidden layers of an MLP sit
//! under `layers.` (`experts.0.layers.1.linear.weight`; the dense model's
//! MLP is `mlp.`), and the optimiser's state is left out. Values are the
//! trained f16 weights, exactly, as f32 (default) or f16. The metadata says
//! which module to build (`tokitai.kind`, `tokitai.hidden`, `tokitai.depth`,
//! `tokitai.n_experts`) and where the weights came from.
//!
//! `--sample N` also writes `<OUT stem>.sample.safetensors`: N samples of
//! the run's dataset as the model reads them (`x`, rounded to f16), our
//! forward output on the exact oracles in f64 (`y_reference`) with its
//! top-2 routes, and in the training precision on `--device`
//! (`y_trained`), so that the module can be checked against ours
//! (`bench/export_check.py`).

use super::config::{INPUT_DIM, N_EXPERTS};
use super::driver::{device, failed, model_kind, usage, Failure};
use super::eval::{saved_run, SavedRun};
use super::model::{Dispatch, Kind, Model};
use super::run::{safetensors_bytes, write_atomic, RawTensor};
use super::train::batch_tensors;
use crate::Device;
use clap::Parser;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Export a saved model's weights for PyTorch.
#[derive(Parser, Debug)]
#[command(name = "tokitai-train export", bin_name = "tokitai-train export", version)]
pub struct ExportArgs {
    /// The run directory that holds `checkpoint.safetensors`.
    #[arg(long)]
    pub checkpoint_dir: PathBuf,
    /// The safetensors file to write (replaced atomically if it exists).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// The stored dtype: f32 or f16 (both hold the trained f16 weights
    /// exactly).
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16"])]
    pub dtype: String,
    /// Also write N samples with our forward outputs beside the weights
    /// (`<OUT stem>.sample.safetensors`), to check the module against.
    #[arg(long, default_value_t = 0)]
    pub sample: usize,
    /// The samples' dataset (default: the run's own).
    #[arg(long)]
    pub dataset: Option<String>,
    /// Where the sample's `y_trained` is computed: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// The most samples `--sample` takes (the oracles run in f64).
pub const MAX_SAMPLE: usize = 4096;

/// What was written.
#[derive(Debug)]
pub struct Exported {
    pub weights: PathBuf,
    pub tensors: usize,
    pub sample: Option<PathBuf>,
}

/// Our parameter name in the reference module.
pub fn pytorch_name(ours: &str) -> String {
    let mut parts: Vec<&str> = ours.split('.').collect();
    // experts.E.L.linear.weight -> experts.E.layers.L.linear.weight;
    // dense.L.norm.bias -> mlp.layers.L.norm.bias; dense.out.* -> mlp.out.*.
    if parts.first() == Some(&"dense") {
        parts[0] = "mlp";
    }
    let at = if parts[0] == "experts" { 2 } else { 1 };
    if parts.len() > at && parts[at].parse::<usize>().is_ok() {
        parts.insert(at, "layers");
    }
    parts.join(".")
}

/// A linear layer's weight: the one kind of tensor stored transposed.
fn is_linear_weight(name: &str, shape: &[usize]) -> bool {
    name.ends_with(".weight") && shape.len() == 2
}

/// `[rows, cols]` row-major to `[cols, rows]`.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// Where `--sample` writes, beside `out`.
pub fn sample_path(out: &Path) -> PathBuf {
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    out.with_file_name(format!("{}.sample.safetensors", stem))
}

pub fn run(e: &ExportArgs) -> Result<Exported, Failure> {
    let SavedRun { path, checkpoint, checked } = saved_run(&e.checkpoint_dir, e.dataset.as_deref(), &e.device)?;
    let kind = model_kind(&checked);
    if kind == Kind::SheafPadic {
        return Err(usage(format!("{}: a sheaf-padic router has no PyTorch reference module (the p-adic gates are ours alone); export takes the softmax-routed MoE and the dense model", path.display())));
    }
    if e.sample > MAX_SAMPLE {
        return Err(usage(format!("--sample {}: at most {} (the reference forward runs in f64)", e.sample, MAX_SAMPLE)));
    }
    let size = checked.args.size;
    // The model as the run built it, to name and shape its parameters
    // (the checkpoint's values go to the file as they are, not through it).
    let model = Model::init(size, kind, checked.args.seed, &Device::Cpu).map_err(|er| failed(format!("model: {}", er)))?;
    let mut tensors = Vec::new();
    for (name, want) in model.params.names.iter().zip(&model.params.tensors) {
        let bad = |m: String| usage(format!("{}: checkpoint: {}", path.display(), m));
        let (_, shape, data) = checkpoint.tensors.iter().find(|(n, _, _)| n == name).ok_or_else(|| bad(format!("has no tensor `{}`", name)))?;
        if shape.as_slice() != want.shape() {
            return Err(bad(format!("`{}` has shape {:?}, the model wants {:?}", name, shape, want.shape())));
        }
        let transposed;
        let (shape, data) = if is_linear_weight(name, shape) {
            transposed = transpose(data, shape[0], shape[1]);
            (vec![shape[1], shape[0]], &transposed)
        } else {
            (shape.clone(), data)
        };
        let raw = if e.dtype == "f16" { RawTensor::f16 } else { RawTensor::f32 };
        tensors.push(raw(&pytorch_name(name), &shape, data));
    }
    let hidden = model.experts[0].layers[0].0;
    let hidden = model.tensor(hidden.w).shape()[1];
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "tokitai-moe-pytorch/1".to_string());
    meta.insert("module".to_string(), "runtime/python/tokitai_moe.py".to_string());
    meta.insert("tokitai.kind".to_string(), if kind == Kind::Dense { "dense" } else { "moe" }.to_string());
    meta.insert("tokitai.hidden".to_string(), hidden.to_string());
    meta.insert("tokitai.depth".to_string(), size.n_hidden().to_string());
    meta.insert("tokitai.n_experts".to_string(), if kind == Kind::Dense { 1 } else { N_EXPERTS }.to_string());
    meta.insert("tokitai.layernorm_eps".to_string(), super::model::LAYERNORM_EPS.to_string());
    meta.insert("source_checkpoint".to_string(), path.display().to_string());
    for key in ["step", "arch"] {
        if let Some(v) = checkpoint.metadata.get(key) {
            meta.insert(format!("source_{}", key), v.clone());
        }
    }
    let bytes = safetensors_bytes(&tensors, meta).map_err(|m| failed(format!("{}: {}", e.output.display(), m)))?;
    write_atomic(&e.output, &bytes).map_err(|er| failed(format!("{}: {}", e.output.display(), er)))?;
    let sample = if e.sample > 0 { Some(write_sample(e, &checked, kind, &checkpoint, &path)?) } else { None };
    Ok(Exported { weights: e.output.clone(), tensors: tensors.len(), sample })
}

/// The top-2 experts of each sample (first and second).
type Routes = (Vec<i32>, Vec<i32>);

/// The first `e.sample` samples of the dataset, and our forward outputs on
/// them: exact (the f64 oracles) and in the training precision on
/// `e.device`.
fn write_sample(e: &ExportArgs, checked: &super::cli::Checked, kind: Kind, checkpoint: &super::run::Checkpoint, path: &Path) -> Result<PathBuf, Failure> {
    let data = checked.data.load(checked.args.seed).map_err(|er| usage(format!("--dataset: {}", er)))?;
    let n = e.sample.min(data.n);
    let idx: Vec<usize> = (0..n).collect();
    let fail = |er: crate::Error| failed(format!("sample forward: {}", er));
    let (x, _) = batch_tensors(&data, &idx, &Device::Cpu).map_err(fail)?;
    let forward = |dev: &Device| -> Result<(Vec<f64>, Option<Routes>), Failure> {
        let mut model = Model::init(checked.args.size, kind, checked.args.seed, dev).map_err(fail)?;
        model.restore_params(checkpoint, dev).map_err(|er| usage(format!("{}: {}", path.display(), er)))?;
        let fwd = model.forward(dev, &x.to_device(dev).map_err(fail)?, Dispatch::Dense).map_err(fail)?;
        Ok((fwd.y.to_f64_vec().map_err(fail)?, fwd.routes().map_err(fail)?))
    };
    let trained_on = device(checked)?;
    let (y_ref, routes) = forward(&Device::Reference)?;
    let (y_trained, _) = forward(&trained_on)?;
    let out_dim = y_ref.len() / n.max(1);
    let f32s = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    // The f64 outputs are stored as such (not through f32).
    let mut tensors = vec![
        RawTensor::f32("x", &[n, INPUT_DIM], &f32s(&x.to_f64_vec().map_err(fail)?)),
        RawTensor::f32("y_trained", &[n, out_dim], &f32s(&y_trained)),
        RawTensor::f64("y_reference", &[n, out_dim], &y_ref),
    ];
    if let Some((i0, i1)) = routes {
        tensors.push(RawTensor::f64("top2", &[n, 2], &i0.iter().zip(&i1).flat_map(|(a, b)| [*a as f64, *b as f64]).collect::<Vec<f64>>()));
    }
    let mut meta = HashMap::new();
    meta.insert("dataset".to_string(), data.source.clone());
    meta.insert("trained_device".to_string(), trained_on.describe());
    meta.insert("weights".to_string(), e.output.display().to_string());
    let bytes = safetensors_bytes(&tensors, meta).map_err(|m| failed(format!("sample: {}", m)))?;
    let out = sample_path(&e.output);
    write_atomic(&out, &bytes).map_err(|er| failed(format!("{}: {}", out.display(), er)))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_reference_module() {
        assert_eq!(pytorch_name("router.weight"), "router.weight");
        assert_eq!(pytorch_name("experts.3.0.linear.weight"), "experts.3.layers.0.linear.weight");
        assert_eq!(pytorch_name("experts.0.2.norm.bias"), "experts.0.layers.2.norm.bias");
        assert_eq!(pytorch_name("experts.1.out.bias"), "experts.1.out.bias");
        assert_eq!(pytorch_name("dense.1.linear.bias"), "mlp.layers.1.linear.bias");
        assert_eq!(pytorch_name("dense.out.weight"), "mlp.out.weight");
        assert!(is_linear_weight("experts.0.out.weight", &[64, 20]) && !is_linear_weight("experts.0.0.norm.weight", &[64]));
        assert_eq!(transpose(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(sample_path(Path::new("out/model.safetensors")), PathBuf::from("out/model.sample.safetensors"));
    }
}
