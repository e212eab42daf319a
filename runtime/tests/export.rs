//! `tokitai-train export` (issue 24, item 2): a saved model's weights with
//! PyTorch's names and layouts. The test reads the exported file as the
//! reference module (`runtime/python/tokitai_moe.py`) does and runs that
//! module's forward here, in f64 with PyTorch's conventions (`y = x W^T +
//! b`, LayerNorm, tanh GELU, softmax top-2), written independently of the
//! runtime: it must give our exact forward (`y_reference` in the sample)
//! to f64 rounding. The same check with PyTorch itself runs on the GPU
//! machine (`bench/export_check.py`, recorded in bench/RESULTS.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use tokitai_runtime::moe::run::Checkpoint;

fn train(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokitai-train")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tokitai-export-{}-{}", tag, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A short nano run into `dir` (extra flags: the model's kind).
fn trained(dir: &Path, extra: &[&str]) {
    let d = dir.to_str().unwrap();
    let (code, _, err) = train(&[&["--size", "nano", "--steps", "3", "--batch", "32", "--quiet", "--val-samples", "0", "--checkpoint-dir", d][..], extra].concat());
    assert_eq!(code, 0, "{}", err);
}

/// Tensors (as f64, with shapes) and metadata of a safetensors file.
struct File {
    tensors: HashMap<String, (Vec<usize>, Vec<f64>)>,
    dtypes: HashMap<String, safetensors::Dtype>,
    meta: HashMap<String, String>,
}

fn read(path: &Path) -> File {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (mut tensors, mut dtypes) = (HashMap::new(), HashMap::new());
    for (name, v) in st.tensors() {
        let d = v.data();
        let vals: Vec<f64> = match v.dtype() {
            safetensors::Dtype::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            safetensors::Dtype::F16 => d.chunks_exact(2).map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect(),
            safetensors::Dtype::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            other => panic!("unexpected dtype {:?}", other),
        };
        dtypes.insert(name.clone(), v.dtype());
        tensors.insert(name, (v.shape().to_vec(), vals));
    }
    File { tensors, dtypes, meta: meta.metadata().clone().unwrap_or_default() }
}

/// The reference module's forward, as PyTorch computes it, in f64.
struct Module<'a> {
    t: &'a HashMap<String, (Vec<usize>, Vec<f64>)>,
    depth: usize,
    eps: f64,
}

impl Module<'_> {
    /// `nn.Linear`: `x W^T + b`, `W` stored `[out, in]`.
    fn linear(&self, name: &str, x: &[f64], n: usize) -> Vec<f64> {
        let (shape, w) = &self.t[&format!("{}.weight", name)];
        let (_, b) = &self.t[&format!("{}.bias", name)];
        let (out, inp) = (shape[0], shape[1]);
        assert_eq!(x.len(), n * inp, "{}: input width", name);
        let mut y = vec![0.0; n * out];
        for r in 0..n {
            for o in 0..out {
                y[r * out + o] = b[o] + (0..inp).map(|i| x[r * inp + i] * w[o * inp + i]).sum::<f64>();
            }
        }
        y
    }

    /// `nn.LayerNorm` (biased variance) then GELU's tanh form.
    fn norm_gelu(&self, name: &str, z: &[f64], n: usize) -> Vec<f64> {
        let (_, g) = &self.t[&format!("{}.weight", name)];
        let (_, b) = &self.t[&format!("{}.bias", name)];
        let c = g.len();
        let mut y = vec![0.0; z.len()];
        for r in 0..n {
            let row = &z[r * c..(r + 1) * c];
            let mean = row.iter().sum::<f64>() / c as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
            for j in 0..c {
                let v = (row[j] - mean) / (var + self.eps).sqrt() * g[j] + b[j];
                y[r * c + j] = 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
            }
        }
        y
    }

    fn mlp(&self, prefix: &str, x: &[f64], n: usize) -> Vec<f64> {
        let mut h = x.to_vec();
        for l in 0..=self.depth {
            let z = self.linear(&format!("{}.layers.{}.linear", prefix, l), &h, n);
            h = self.norm_gelu(&format!("{}.layers.{}.norm", prefix, l), &z, n);
        }
        self.linear(&format!("{}.out", prefix), &h, n)
    }

    /// `(y, top-2 experts per sample)`: softmax of the router's logits,
    /// the two largest probabilities weighing their experts' outputs.
    fn moe(&self, x: &[f64], n: usize) -> (Vec<f64>, Vec<[usize; 2]>) {
        let logits = self.linear("router", x, n);
        let e = logits.len() / n;
        let outs: Vec<Vec<f64>> = (0..e).map(|k| self.mlp(&format!("experts.{}", k), x, n)).collect();
        let d = outs[0].len() / n;
        let (mut y, mut routes) = (vec![0.0; n * d], Vec::new());
        for r in 0..n {
            let row = &logits[r * e..(r + 1) * e];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            let p: Vec<f64> = row.iter().map(|v| (v - m).exp() / s).collect();
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|a, b| p[*b].total_cmp(&p[*a]));
            let (i0, i1) = (order[0], order[1]);
            for j in 0..d {
                y[r * d + j] = p[i0] * outs[i0][r * d + j] + p[i1] * outs[i1][r * d + j];
            }
            routes.push([i0, i1]);
        }
        (y, routes)
    }
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Rename our parameter as the module names it (the mapping the export
/// documents, restated here so that a change to it shows).
fn module_name(ours: &str) -> String {
    let p: Vec<&str> = ours.split('.').collect();
    match p.as_slice() {
        ["experts", e, l, rest @ ..] if l.parse::<usize>().is_ok() => format!("experts.{}.layers.{}.{}", e, l, rest.join(".")),
        ["dense", l, rest @ ..] if l.parse::<usize>().is_ok() => format!("mlp.layers.{}.{}", l, rest.join(".")),
        ["dense", rest @ ..] => format!("mlp.{}", rest.join(".")),
        _ => ours.to_string(),
    }
}

#[test]
fn exported_weights_give_our_forward_under_pytorch_conventions() {
    let dir = tmp("moe");
    trained(&dir, &[]);
    let out = dir.join("export/model.safetensors");
    let d = dir.to_str().unwrap();
    let (code, stdout, err) = train(&["export", "--checkpoint-dir", d, "-o", out.to_str().unwrap(), "--sample", "48"]);
    assert_eq!(code, 0, "{}", err);
    assert!(stdout.contains("model.sample.safetensors"), "{}", stdout);
    let f = read(&out);
    assert_eq!(f.meta["format"], "tokitai-moe-pytorch/1");
    assert_eq!((f.meta["tokitai.kind"].as_str(), f.meta["tokitai.depth"].as_str(), f.meta["tokitai.n_experts"].as_str()), ("moe", "2", "4"), "nano: two hidden layers after the first");
    // Every parameter of the checkpoint, renamed, linear weights
    // transposed, values exact; nothing else (no optimiser state).
    let ckpt = Checkpoint::load(&dir.join("checkpoint.safetensors")).unwrap();
    let params: Vec<_> = ckpt.tensors.iter().filter(|(n, _, _)| !n.starts_with("optimizer.")).collect();
    assert_eq!(f.tensors.len(), params.len());
    for (name, shape, data) in params {
        let (eshape, evals) = f.tensors.get(&module_name(name)).unwrap_or_else(|| panic!("`{}` is not exported as `{}`", name, module_name(name)));
        assert_eq!(f.dtypes[&module_name(name)], safetensors::Dtype::F32);
        if shape.len() == 2 {
            assert_eq!(eshape, &vec![shape[1], shape[0]], "{}: [out, in]", name);
            for i in 0..shape[0] {
                for o in 0..shape[1] {
                    assert_eq!(evals[o * shape[0] + i], data[i * shape[1] + o] as f64, "{}[{}, {}]", name, i, o);
                }
            }
        } else {
            assert_eq!((eshape, evals), (shape, &data.iter().map(|v| *v as f64).collect::<Vec<_>>()), "{}", name);
        }
    }
    // The module's forward on the sample gives our exact forward.
    let s = read(&dir.join("export/model.sample.safetensors"));
    let (xs, x) = &s.tensors["x"];
    let n = xs[0];
    assert_eq!(n, 48);
    let module = Module { t: &f.tensors, depth: 2, eps: f.meta["tokitai.layernorm_eps"].parse().unwrap() };
    let (y, routes) = module.moe(x, n);
    let y_ref = &s.tensors["y_reference"].1;
    let scale = y_ref.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let diff = max_abs_diff(&y, y_ref);
    assert!(diff <= 1e-9 * scale, "the module's forward is {} from ours (scale {})", diff, scale);
    let top2 = &s.tensors["top2"].1;
    for (r, [a, b]) in routes.iter().enumerate() {
        let mut ours = [top2[2 * r] as usize, top2[2 * r + 1] as usize];
        let mut theirs = [*a, *b];
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "sample {}: the same two experts", r);
    }
    // Our training-precision forward is near (f16), not equal.
    let trained = &s.tensors["y_trained"].1;
    let d16 = max_abs_diff(trained, y_ref);
    assert!(d16 > 0.0 && d16 < 0.05 * scale, "f16 forward {} from exact (scale {})", d16, scale);
    // A wrong layout is caught by the same check: the module's forward
    // with one weight left untransposed (read as [out, in] of the other
    // shape) is far from ours.
    let mut wrong = f.tensors.clone();
    let (shape, w) = wrong["experts.0.layers.1.linear.weight"].clone();
    let (rows, cols) = (shape[0], shape[1]);
    let back: Vec<f64> = (0..rows * cols).map(|k| w[(k % cols) * rows + k / cols]).collect();
    wrong.insert("experts.0.layers.1.linear.weight".into(), (shape, back));
    let (yw, _) = Module { t: &wrong, depth: 2, eps: 1e-5 }.moe(x, n);
    assert!(max_abs_diff(&yw, y_ref) > 1e-4 * scale, "a transposed hidden weight must change the outputs");

    // f16 storage holds the same values.
    let out16 = dir.join("export/model16.safetensors");
    let (code, _, err) = train(&["export", "--checkpoint-dir", d, "-o", out16.to_str().unwrap(), "--dtype", "f16"]);
    assert_eq!(code, 0, "{}", err);
    let f16 = read(&out16);
    assert!(!dir.join("export/model16.sample.safetensors").exists(), "no sample unless asked");
    for (name, (shape, vals)) in &f.tensors {
        assert_eq!(f16.dtypes[name], safetensors::Dtype::F16);
        assert_eq!(&f16.tensors[name], &(shape.clone(), vals.clone()), "{}", name);
    }
}

#[test]
fn the_dense_model_exports_and_bad_input_exits_2() {
    let dir = tmp("dense");
    trained(&dir, &["--model", "dense"]);
    let out = dir.join("dense.safetensors");
    let (code, _, err) = train(&["export", "--checkpoint-dir", dir.to_str().unwrap(), "-o", out.to_str().unwrap(), "--sample", "16"]);
    assert_eq!(code, 0, "{}", err);
    let f = read(&out);
    assert_eq!(f.meta["tokitai.kind"], "dense");
    assert!(f.tensors.keys().all(|k| k.starts_with("mlp.")), "{:?}", f.tensors.keys());
    let s = read(&dir.join("dense.sample.safetensors"));
    let (xs, x) = &s.tensors["x"];
    let module = Module { t: &f.tensors, depth: f.meta["tokitai.depth"].parse().unwrap(), eps: 1e-5 };
    let y = module.mlp("mlp", x, xs[0]);
    let y_ref = &s.tensors["y_reference"].1;
    let scale = y_ref.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    assert!(max_abs_diff(&y, y_ref) <= 1e-9 * scale);
    assert!(!s.tensors.contains_key("top2"), "no routes without a router");

    let sheaf = tmp("sheaf");
    trained(&sheaf, &["--router", "sheaf-padic"]);
    let (code, _, err) = train(&["export", "--checkpoint-dir", sheaf.to_str().unwrap(), "-o", sheaf.join("m.safetensors").to_str().unwrap()]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("sheaf-padic router has no PyTorch reference module"), "{}", err);
    assert!(!sheaf.join("m.safetensors").exists());
    let none = tmp("none");
    let (code, _, err) = train(&["export", "--checkpoint-dir", none.to_str().unwrap(), "-o", none.join("m.safetensors").to_str().unwrap()]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("checkpoint.safetensors"), "{}", err);
    for (args, says) in [(&["--sample", "5000"][..], "--sample 5000: at most 4096"), (&["--dtype", "f64"], "invalid value 'f64'"), (&["--device", "cuda:x", "--sample", "4"], "--device")] {
        let (code, _, err) = train(&[&["export", "--checkpoint-dir", dir.to_str().unwrap(), "-o", dir.join("x.safetensors").to_str().unwrap()][..], args].concat());
        assert_eq!(code, 2, "{:?}: {}", args, err);
        assert!(err.contains(says), "{:?}: {}", args, err);
    }
    let (code, out, _) = train(&["export", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--checkpoint-dir") && out.contains("--sample"), "{}", out);
}
