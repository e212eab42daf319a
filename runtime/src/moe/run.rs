//! What a training run writes: `arch.json` (with its fingerprint),
//! `metrics.jsonl` (a row per step), a safetensors checkpoint (written
//! atomically), and the `SUMMARY:` line.

use super::config::{Size, INPUT_DIM, N_EXPERTS, OUTPUT_DIM, TOP_K};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The architecture fields of `arch.json`, in this order.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Arch {
    pub size: String,
    pub input_dim: usize,
    pub hidden_dim: usize,
    pub output_dim: usize,
    pub n_experts: usize,
    pub top_k: usize,
    pub expert_depth: usize,
    pub seed: u64,
    pub model_kind: String,
    pub router_kind: String,
    pub param_count: usize,
}

impl Arch {
    pub fn new(size: Size, seed: u64, model_kind: &str, router_kind: &str) -> Arch {
        Arch {
            size: size.name().into(),
            input_dim: INPUT_DIM,
            hidden_dim: size.hidden(),
            output_dim: OUTPUT_DIM,
            n_experts: N_EXPERTS,
            top_k: TOP_K,
            expert_depth: size.n_hidden(),
            seed,
            model_kind: model_kind.into(),
            router_kind: router_kind.into(),
            param_count: size.param_count(),
        }
    }
    /// First 16 hex digits of sha256 of the compact JSON of the fields.
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_string(self).expect("plain fields serialise");
        format!("{:x}", Sha256::digest(json.as_bytes()))[..16].to_string()
    }
    /// `arch.json`: the fields and the fingerprint.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::to_value(self).expect("plain fields serialise");
        v["fingerprint"] = serde_json::Value::String(self.fingerprint());
        serde_json::to_string_pretty(&v).expect("a JSON value prints")
    }
}

/// One row of `metrics.jsonl`.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct StepMetrics {
    pub step: usize,
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub elapsed_ms: f64,
    pub model_size: String,
    pub router_entropy_mean: f64,
    pub per_expert_share: [f64; N_EXPERTS],
    /// Share of samples whose top-1 expert is the data's true expert
    /// (synth:quality records it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_accuracy: Option<f64>,
    /// The sheaf router's disagreement energy (batch mean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheaf_energy: Option<f64>,
    /// The f16 loss scale the step ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// The step overflowed in f16: no update, the loss scale halved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// Kernel launches of this step, and how many were inside the domains
    /// of proved error bounds (`--contracts warn|strict`; absent when off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_covered: Option<u64>,
    /// Synthetic numbers of a `--dry-run`, not of training.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// On the held-out samples (`--val-samples`), at the steps
    /// `--eval-every` names and the last: the MSE loss, the routing
    /// accuracy and each expert's share of the top-2 slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_routing_accuracy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_expert_share: Option<[f64; N_EXPERTS]>,
}

pub use crate::cache::{write_atomic, write_atomic_or_crash};

/// A checkpoint: named f32 tensors (weights, optimizer moments) and
/// metadata (step, configuration).
#[derive(Debug)]
pub struct Checkpoint {
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    pub metadata: HashMap<String, String>,
}

/// The metadata key of a checkpoint's checksum ([`tensors_sha256`]).
pub const CHECKSUM_KEY: &str = "tensors_sha256";

/// sha256 of every tensor in name order: its name, its shape and its
/// little-endian bytes, each length-prefixed, so that a flipped byte, a
/// renamed tensor or a reshaped one all change it.
fn tensors_sha256(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> String {
    let mut order: Vec<&(String, Vec<usize>, Vec<f32>)> = tensors.iter().collect();
    order.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (name, shape, data) in order {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((shape.len() as u64).to_le_bytes());
        for d in shape {
            h.update((*d as u64).to_le_bytes());
        }
        h.update((data.len() as u64).to_le_bytes());
        for x in data {
            h.update(x.to_le_bytes());
        }
    }
    format!("{:x}", h.finalize())
}

/// One tensor as safetensors stores it: name, shape, dtype and the
/// little-endian bytes of its elements.
pub struct RawTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: safetensors::Dtype,
    pub bytes: Vec<u8>,
}

impl RawTensor {
    pub fn f32(name: &str, shape: &[usize], v: &[f32]) -> RawTensor {
        RawTensor { name: name.into(), shape: shape.to_vec(), dtype: safetensors::Dtype::F32, bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
    }
    pub fn f16(name: &str, shape: &[usize], v: &[f32]) -> RawTensor {
        RawTensor { name: name.into(), shape: shape.to_vec(), dtype: safetensors::Dtype::F16, bytes: v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect() }
    }
    pub fn f64(name: &str, shape: &[usize], v: &[f64]) -> RawTensor {
        RawTensor { name: name.into(), shape: shape.to_vec(), dtype: safetensors::Dtype::F64, bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
    }
}

/// A safetensors file of `tensors` and `metadata` (checkpoints, exports).
pub fn safetensors_bytes(tensors: &[RawTensor], metadata: HashMap<String, String>) -> Result<Vec<u8>, String> {
    let views = tensors
        .iter()
        .map(|t| safetensors::tensor::TensorView::new(t.dtype, t.shape.clone(), &t.bytes).map(|v| (t.name.clone(), v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    safetensors::serialize(views, Some(metadata)).map_err(|e| e.to_string())
}

impl Checkpoint {
    /// The safetensors bytes, the tensors' checksum in the metadata.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let raw: Vec<RawTensor> = self.tensors.iter().map(|(name, shape, v)| RawTensor::f32(name, shape, v)).collect();
        let mut metadata = self.metadata.clone();
        metadata.insert(CHECKSUM_KEY.to_string(), tensors_sha256(&self.tensors));
        safetensors_bytes(&raw, metadata)
    }
    /// Written atomically: the last good checkpoint survives a crash.
    /// (`TOKITAI_CRASH_IN_CHECKPOINT=STEP` aborts the process half-way
    /// through writing the checkpoint of that step: the crash test's hook.)
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let bytes = self.to_bytes()?;
        let crash = std::env::var("TOKITAI_CRASH_IN_CHECKPOINT").ok().filter(|s| self.metadata.get("step") == Some(s)).map(|_| bytes.len() / 2);
        write_atomic_or_crash(path, &bytes, crash).map_err(|e| format!("{}: {}", path.display(), e))
    }
    pub fn load(path: &Path) -> Result<Checkpoint, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {}", path.display(), e))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: not a safetensors checkpoint: {}", path.display(), e))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {}", path.display(), e))?;
        let mut tensors = Vec::new();
        for (name, view) in st.tensors() {
            let data = view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            tensors.push((name, view.shape().to_vec(), data));
        }
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let mut metadata = meta.metadata().clone().unwrap_or_default();
        // The checksum written with the tensors must match them: a file
        // damaged past its header (which safetensors cannot see) is an
        // error here, not weights that train into NaN.
        let Some(recorded) = metadata.remove(CHECKSUM_KEY) else {
            return Err(format!("{}: no `{}` in its metadata: not a checkpoint written by tokitai-train, or its header was altered", path.display(), CHECKSUM_KEY));
        };
        let actual = tensors_sha256(&tensors);
        if recorded != actual {
            return Err(format!("{}: corrupted: its tensors' sha256 is {}, not the {} recorded when it was written", path.display(), actual, recorded));
        }
        Ok(Checkpoint { tensors, metadata })
    }
}

/// The last line of a run.
#[allow(clippy::too_many_arguments)]
pub fn summary_line(arch: &Arch, final_loss: f64, steps_run: usize, seconds: f64, last_entropy: f64, checkpoint: &Path, arch_path: &Path) -> String {
    format!(
        "SUMMARY: model_size={} total_params={} final_loss={:.6} steps_run={} time_elapsed_sec={:.3} throughput_steps_per_sec={:.3} last_router_entropy={:.6} checkpoint={} arch={} fingerprint={}",
        arch.size,
        arch.param_count,
        final_loss,
        steps_run,
        seconds,
        if seconds > 0.0 { steps_run as f64 / seconds } else { 0.0 },
        last_entropy,
        checkpoint.display(),
        arch_path.display(),
        arch.fingerprint()
    )
}

/// The paths of a run's outputs.
#[derive(Clone, Debug)]
pub struct RunPaths {
    pub dir: PathBuf,
    pub metrics: PathBuf,
    pub arch: PathBuf,
    pub checkpoint: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_depends_on_every_architecture_field() {
        let a = Arch::new(Size::Nano, 42, "moe", "softmax");
        assert_eq!(a.fingerprint().len(), 16);
        assert_eq!(a.fingerprint(), Arch::new(Size::Nano, 42, "moe", "softmax").fingerprint());
        assert_ne!(a.fingerprint(), Arch::new(Size::Nano, 43, "moe", "softmax").fingerprint());
        assert_ne!(a.fingerprint(), Arch::new(Size::Nano, 42, "moe", "sheaf-padic").fingerprint());
        let json: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(json["param_count"], 195_540);
        assert_eq!(json["fingerprint"], a.fingerprint());
    }

    #[test]
    fn checkpoints_round_trip_through_safetensors() {
        let dir = std::env::temp_dir().join(format!("tokitai-ckpt-{}", std::process::id()));
        let path = dir.join("model.safetensors");
        let c = Checkpoint { tensors: vec![("w".into(), vec![2, 3], vec![1.0, -2.0, 3.5, 0.0, 1e-8, 7.0])], metadata: HashMap::from([("step".to_string(), "12".to_string())]) };
        c.save(&path).unwrap();
        let back = Checkpoint::load(&path).unwrap();
        assert_eq!(back.tensors, c.tensors);
        assert_eq!(back.metadata["step"], "12");
        assert!(Checkpoint::load(&dir.join("missing.safetensors")).is_err());
        std::fs::write(dir.join("junk.safetensors"), b"not a checkpoint").unwrap();
        assert!(Checkpoint::load(&dir.join("junk.safetensors")).unwrap_err().contains("not a safetensors checkpoint"));
    }

    #[test]
    fn a_checkpoint_damaged_past_its_header_is_refused_by_its_checksum() {
        // Issue 24: bytes flipped in the tensor data load without
        // complaint from safetensors; the checksum names the file.
        let dir = std::env::temp_dir().join(format!("tokitai-ckpt-bad-{}", std::process::id()));
        let path = dir.join("model.safetensors");
        let c = Checkpoint { tensors: vec![("a".into(), vec![4], vec![1.0, 2.0, 3.0, 4.0]), ("b".into(), vec![2], vec![0.5, -0.5])], metadata: HashMap::new() };
        c.save(&path).unwrap();
        let good = std::fs::read(&path).unwrap();
        assert!(Checkpoint::load(&path).is_ok());
        for at in [good.len() - 1, good.len() - 9, good.len() - 20] {
            let mut bad = good.clone();
            bad[at] ^= 0x5a;
            std::fs::write(&path, &bad).unwrap();
            let err = Checkpoint::load(&path).unwrap_err();
            assert!(err.contains("corrupted") && err.contains("model.safetensors"), "byte {}: {}", at, err);
        }
        // Renamed or reshaped tensors change the checksum too.
        let renamed = Checkpoint { tensors: vec![("a".into(), vec![4], vec![1.0, 2.0, 3.0, 4.0]), ("c".into(), vec![2], vec![0.5, -0.5])], metadata: HashMap::new() };
        let reshaped = Checkpoint { tensors: vec![("a".into(), vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]), ("b".into(), vec![2], vec![0.5, -0.5])], metadata: HashMap::new() };
        let sum = |c: &Checkpoint| tensors_sha256(&c.tensors);
        assert_ne!(sum(&c), sum(&renamed));
        assert_ne!(sum(&c), sum(&reshaped));
        // A file without the checksum is not taken for a good checkpoint.
        let plain = safetensors::serialize(Vec::<(String, safetensors::tensor::TensorView)>::new(), None).unwrap();
        std::fs::write(&path, plain).unwrap();
        assert!(Checkpoint::load(&path).unwrap_err().contains("tensors_sha256"));
    }
}
