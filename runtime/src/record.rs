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
//! run, the same ones every run), at most [`PER_KERNEL`] of them, and none
//! whose tensors exceed 64 MiB. Files are written atomically.

use crate::abi::tk_rt::Buf;
use crate::check::Case;
use crate::call::{Arg, Bound};
use crate::{DType, Error, KernelDef, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Launches larger than this are not recorded (their files would dwarf
/// the run's checkpoint).
const MAX_BYTES: usize = 64 << 20;

/// Launches recorded per kernel (its 1st, 2nd, 4th and 8th).
const PER_KERNEL: usize = 4;

struct Recorder {
    dir: PathBuf,
    launches: HashMap<&'static str, u64>,
    written: HashMap<&'static str, usize>,
    failed: Option<String>,
}

static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);
/// Whether a recorder is set: every launch asks, most runs record nothing,
/// and a launch should not take a lock to learn that.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Record a sample of every kernel's launches into `dir` (created) from
/// now on.
pub fn start(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Tensor(format!("--record-launches {}: {}", dir.display(), e)))?;
    let mut r = RECORDER.lock().map_err(|_| Error::Tensor("the launch recorder is poisoned".into()))?;
    *r = Some(Recorder { dir: dir.to_path_buf(), launches: HashMap::new(), written: HashMap::new(), failed: None });
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Stop recording; the number of launches written, and the first error if
/// writing one failed (the run goes on: a recording is a by-product).
pub fn finish() -> (usize, Option<String>) {
    ACTIVE.store(false, Ordering::Release);
    match RECORDER.lock().ok().and_then(|mut r| r.take()) {
        Some(r) => (r.written.values().sum(), r.failed),
        None => (0, None),
    }
}

/// Called before every launch: write this one if it is in the sample.
pub(crate) fn before_launch(k: &KernelDef, bound: &Bound, args: &[Arg]) {
    // A launch being captured into a graph cannot read its inputs back.
    if !ACTIVE.load(Ordering::Acquire) || crate::Device::capturing() {
        return;
    }
    let Ok(mut guard) = RECORDER.lock() else { return };
    let Some(r) = guard.as_mut() else { return };
    let name = k.info.name;
    let n = r.launches.entry(name).or_insert(0);
    *n += 1;
    let written = r.written.get(name).copied().unwrap_or(0);
    if !n.is_power_of_two() || written >= PER_KERNEL || r.failed.is_some() {
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
/// be), outputs as zeros of their shape (not read: their contents before
/// the launch do not matter).
fn capture(k: &KernelDef, bound: &Bound, args: &[Arg]) -> Result<Case> {
    let mut tensors = Vec::new();
    for (p, t) in k.info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())) {
        let buf = if p.role == "output" { crate::tensor::buf_from_f64(t.dtype(), &vec![0.0; t.len()]) } else { t.to_buf()? };
        tensors.push((t.shape().to_vec(), buf));
    }
    Ok(Case { dims: bound.dims.clone(), scalars: bound.scalars.clone(), tensors })
}

/// Our dtypes and safetensors' names for them.
const DTYPES: [(DType, safetensors::Dtype); 8] = [
    (DType::F16, safetensors::Dtype::F16),
    (DType::Bf16, safetensors::Dtype::BF16),
    (DType::F32, safetensors::Dtype::F32),
    (DType::F64, safetensors::Dtype::F64),
    (DType::I32, safetensors::Dtype::I32),
    (DType::U32, safetensors::Dtype::U32),
    (DType::I64, safetensors::Dtype::I64),
    (DType::Bool, safetensors::Dtype::BOOL),
];

fn stored_dtype(b: &Buf) -> safetensors::Dtype {
    let ours = DType::parse(b.dtype()).expect("every buffer dtype is a DType");
    DTYPES.iter().find(|(d, _)| *d == ours).map(|(_, s)| *s).expect("every DType has a safetensors name")
}

fn write(path: &Path, kernel: &str, case: &Case) -> Result<()> {
    let owned: Vec<(String, Vec<usize>, safetensors::Dtype, Vec<u8>)> =
        case.tensors.iter().enumerate().map(|(i, (shape, b))| (format!("{:02}", i), shape.clone(), stored_dtype(b), crate::backend::bytes::to_bytes(b))).collect();
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
        let dtype = DTYPES.iter().find(|(_, st)| *st == v.dtype()).map(|(d, _)| *d).ok_or_else(|| bad(format!("tensor {} has dtype {:?}, which no kernel takes", n, v.dtype())))?;
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
