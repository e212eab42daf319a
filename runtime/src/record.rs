//! Recorded launches (issue 18): a sample of the launches a real run makes,
//! each with its inputs as they were just before it ran, so that the
//! soundness check can draw from the workload and not only from the
//! domains: `tokitai-check-launches DIR` replays every recorded launch on
//! the CPU or the GPU and compares it with the f64 oracle within the bound
//! evaluated for that launch ([`crate::check::check`]).
//!
//! A recording is one safetensors file per launch: the tensor parameters by
//! their position and name (outputs as zeros of their shape, since their
//! contents before the launch do not matter), and in the metadata the
//! kernel's name, the dims and the scalars. Each kernel's launches number
//! 1, 2, 3, ...; launches 1, 2, 4, 8, ... are recorded (spread over the
//! run, the same ones every run), at most `per_kernel` of them, and none
//! whose tensors exceed 64 MiB. Files are written atomically.

use crate::abi::tk_rt::Buf;
use crate::check::Case;
use crate::launch::{Arg, Bound};
use crate::{Error, KernelDef, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Launches larger than this are not recorded (their files would dwarf
/// the run's checkpoint).
const MAX_BYTES: usize = 64 << 20;

struct Recorder {
    dir: PathBuf,
    per_kernel: usize,
    launches: HashMap<&'static str, u64>,
    written: HashMap<&'static str, usize>,
    failed: Option<String>,
}

static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);

/// Record a sample of every kernel's launches into `dir` (created) from
/// now on, at most `per_kernel` each.
pub fn start(dir: &Path, per_kernel: usize) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Tensor(format!("--record-launches {}: {}", dir.display(), e)))?;
    let mut r = RECORDER.lock().map_err(|_| Error::Tensor("the launch recorder is poisoned".into()))?;
    *r = Some(Recorder { dir: dir.to_path_buf(), per_kernel, launches: HashMap::new(), written: HashMap::new(), failed: None });
    Ok(())
}

/// Stop recording; the number of launches written, and the first error if
/// writing one failed (the run goes on: a recording is a by-product).
pub fn finish() -> (usize, Option<String>) {
    match RECORDER.lock().ok().and_then(|mut r| r.take()) {
        Some(r) => (r.written.values().sum(), r.failed),
        None => (0, None),
    }
}

/// Called before every launch: write this one if it is in the sample.
pub(crate) fn before_launch(k: &KernelDef, bound: &Bound, args: &[Arg]) {
    // A launch being captured into a graph cannot read its inputs back.
    if crate::Device::capturing() {
        return;
    }
    let Ok(mut guard) = RECORDER.lock() else { return };
    let Some(r) = guard.as_mut() else { return };
    let name = k.info.name;
    let n = r.launches.entry(name).or_insert(0);
    *n += 1;
    let written = r.written.get(name).copied().unwrap_or(0);
    if !n.is_power_of_two() || written >= r.per_kernel || r.failed.is_some() {
        return;
    }
    let bytes: usize = args.iter().filter_map(|a| a.tensor()).map(|t| t.size_bytes()).sum();
    if bytes > MAX_BYTES {
        return;
    }
    let path = r.dir.join(format!("{}-{:06}.safetensors", name, n));
    match capture(k, bound, args).and_then(|case| write(&path, name, &case)) {
        Ok(()) => *r.written.entry(name).or_insert(0) += 1,
        Err(e) => r.failed = Some(format!("recording {}: {}", path.display(), e)),
    }
}

/// The launch as a [`Case`]: inputs read back (from the device if need
/// be), outputs as zeros of their shape.
fn capture(k: &KernelDef, bound: &Bound, args: &[Arg]) -> Result<Case> {
    let mut tensors = Vec::new();
    for (p, t) in k.info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())) {
        let buf = if p.role == "output" { zeros_like(&t.to_buf()?) } else { t.to_buf()? };
        tensors.push((t.shape().to_vec(), buf));
    }
    Ok(Case { dims: bound.dims.clone(), scalars: bound.scalars.clone(), tensors })
}

fn zeros_like(b: &Buf) -> Buf {
    let mut z = b.clone();
    z.set_from_f64(&vec![0.0; b.len()]);
    z
}

fn dtype_of(b: &Buf) -> safetensors::Dtype {
    use safetensors::Dtype as D;
    match b {
        Buf::F16(_) => D::F16,
        Buf::Bf16(_) => D::BF16,
        Buf::F32(_) => D::F32,
        Buf::F64(_) => D::F64,
        Buf::I32(_) => D::I32,
        Buf::U32(_) => D::U32,
        Buf::I64(_) => D::I64,
        Buf::Bool(_) => D::BOOL,
    }
}

fn write(path: &Path, kernel: &str, case: &Case) -> Result<()> {
    let owned: Vec<(String, Vec<usize>, safetensors::Dtype, Vec<u8>)> =
        case.tensors.iter().enumerate().map(|(i, (shape, b))| (format!("{:02}", i), shape.clone(), dtype_of(b), crate::backend::bytes::to_bytes(b))).collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = owned
        .iter()
        .map(|(n, s, d, bytes)| safetensors::tensor::TensorView::new(*d, s.clone(), bytes).map(|v| (n.clone(), v)))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Tensor(e.to_string()))?;
    let mut meta = HashMap::new();
    meta.insert("kernel".to_string(), kernel.to_string());
    meta.insert("dims".to_string(), serde_json::to_string(&case.dims).map_err(|e| Error::Tensor(e.to_string()))?);
    meta.insert("scalars".to_string(), serde_json::to_string(&case.scalars).map_err(|e| Error::Tensor(e.to_string()))?);
    let data = safetensors::serialize(views, Some(meta)).map_err(|e| Error::Tensor(e.to_string()))?;
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, data).and_then(|_| std::fs::rename(&tmp, path)).map_err(|e| Error::Tensor(format!("{}: {}", path.display(), e)))
}

/// A recorded launch: its kernel's name and the case to replay.
pub fn load(path: &Path) -> Result<(String, Case)> {
    let bad = |what: String| Error::Tensor(format!("{}: {}", path.display(), what));
    let data = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&data).map_err(|e| bad(e.to_string()))?;
    let meta = header.metadata().clone().ok_or_else(|| bad("no metadata: not a recorded launch".into()))?;
    let field = |k: &str| meta.get(k).cloned().ok_or_else(|| bad(format!("no `{}` in the metadata", k)));
    let kernel = field("kernel")?;
    let dims: Vec<i64> = serde_json::from_str(&field("dims")?).map_err(|e| bad(format!("dims: {}", e)))?;
    let scalars: Vec<f64> = serde_json::from_str(&field("scalars")?).map_err(|e| bad(format!("scalars: {}", e)))?;
    let st = safetensors::SafeTensors::deserialize(&data).map_err(|e| bad(e.to_string()))?;
    let mut names: Vec<String> = st.names().into_iter().map(|n| n.to_string()).collect();
    names.sort();
    let mut tensors = Vec::new();
    for n in names {
        let v = st.tensor(&n).map_err(|e| bad(e.to_string()))?;
        let dtype = match v.dtype() {
            safetensors::Dtype::F16 => crate::DType::F16,
            safetensors::Dtype::BF16 => crate::DType::Bf16,
            safetensors::Dtype::F32 => crate::DType::F32,
            safetensors::Dtype::F64 => crate::DType::F64,
            safetensors::Dtype::I32 => crate::DType::I32,
            other => return Err(bad(format!("tensor {} has dtype {:?}, which no kernel takes", n, other))),
        };
        tensors.push((v.shape().to_vec(), crate::backend::bytes::from_bytes(dtype, v.data())));
    }
    Ok((kernel, Case { dims, scalars, tensors }))
}

/// Every recording in `dir`, in name order.
pub fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::Tensor(format!("{}: {}", dir.display(), e)))?;
    let mut out: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "safetensors")).collect();
    out.sort();
    Ok(out)
}
