//! `tokitai-train eval`: a saved model on any dataset the trainer accepts,
//! forward only: its MSE loss, its routing accuracy (where the data knows
//! each sample's expert) and each expert's share of the top-2 slots.

use super::cli::{Args, Checked, MAX_VAL_SAMPLES};
use super::driver::{device, failed, hyper, model_kind, usage, Failure};
use super::run::Checkpoint;
use super::train::Trainer;
use clap::Parser;
use std::path::{Path, PathBuf};

/// Evaluate a saved model (a checkpoint written by `tokitai-train`).
#[derive(Parser, Debug)]
#[command(name = "tokitai-train eval", bin_name = "tokitai-train eval", version)]
pub struct EvalArgs {
    /// The run directory that holds `checkpoint.safetensors`.
    #[arg(long)]
    pub checkpoint_dir: PathBuf,
    /// The data to evaluate on (as `--dataset` of a run; default: the
    /// run's own).
    #[arg(long)]
    pub dataset: Option<String>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What the model did on the data.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EvalReport {
    pub checkpoint: String,
    pub step: usize,
    pub dataset: String,
    pub samples: usize,
    pub loss: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_accuracy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_share: Option<Vec<f64>>,
}

impl EvalReport {
    pub fn render(&self) -> String {
        let mut s = format!("checkpoint {} (step {})\ndataset {} ({} samples)\nloss {:.6}\n", self.checkpoint, self.step, self.dataset, self.samples, self.loss);
        if let Some(a) = self.routing_accuracy {
            s.push_str(&format!("routing accuracy {:.4}\n", a));
        }
        if let Some(share) = &self.expert_share {
            let parts: Vec<String> = share.iter().enumerate().map(|(e, v)| format!("expert {}: {:.4}", e, v)).collect();
            s.push_str(&format!("expert load (share of top-2 slots) {}\n", parts.join(", ")));
        }
        s
    }
}

/// A saved run: its checkpoint (checksum checked) and the run's flags as
/// its metadata records them, parsed and checked as a run's are, with
/// `dataset` (default: the run's own) and `device` in place of the run's.
pub(super) struct SavedRun {
    pub path: PathBuf,
    pub checkpoint: Checkpoint,
    pub checked: Checked,
}

pub(super) fn saved_run(checkpoint_dir: &Path, dataset: Option<&str>, device: &str) -> Result<SavedRun, Failure> {
    let path = checkpoint_dir.join("checkpoint.safetensors");
    let ckpt = Checkpoint::load(&path).map_err(|m| usage(format!("--checkpoint-dir: {}", m)))?;
    if ckpt.metadata.get("dry_run").is_some_and(|v| v == "true") {
        return Err(usage(format!("{}: a --dry-run checkpoint holds no weights", path.display())));
    }
    let arch: serde_json::Value = ckpt.metadata.get("arch").and_then(|a| serde_json::from_str(a).ok()).ok_or_else(|| usage(format!("{}: no architecture in its metadata", path.display())))?;
    let field = |k: &str| arch.get(k).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).ok_or_else(|| usage(format!("{}: the architecture has no `{}`", path.display(), k)));
    // The run's own dataset: its spec, before the counts.
    let own = ckpt.metadata.get("dataset").map(|d| d.split(" (").next().unwrap_or(d).to_string());
    let dataset = dataset.map(str::to_string).or(own).unwrap_or_else(|| "synth:quality:4096".into());
    let optimizer = ckpt.metadata.get("optimizer").cloned().unwrap_or_else(|| "adamw".into());
    // The model as the run built it: the run's flags, parsed and checked
    // as a run's are.
    let argv = ["tokitai-train", "--size", &field("size")?, "--seed", &field("seed")?, "--model", &field("model_kind")?, "--router", &field("router_kind")?, "--optimizer", &optimizer, "--dataset", &dataset, "--device", device];
    let args = Args::try_parse_from(argv).map_err(|er| usage(format!("{}: its architecture is not one this trainer builds: {}", path.display(), er)))?;
    let checked = args.check().map_err(usage)?;
    Ok(SavedRun { path, checkpoint: ckpt, checked })
}

/// Load the checkpoint, rebuild its model, and evaluate it on the data.
pub fn run(e: &EvalArgs) -> Result<EvalReport, Failure> {
    let SavedRun { path, checkpoint: ckpt, checked } = saved_run(&e.checkpoint_dir, e.dataset.as_deref(), &e.device)?;
    let dev = device(&checked)?;
    let mut trainer = Trainer::new(checked.args.size, model_kind(&checked), hyper(&checked, &dev), &dev).map_err(|er| failed(format!("model: {}", er)))?;
    trainer.restore(&ckpt).map_err(|er| usage(format!("{}: {}", path.display(), er)))?;
    let data = checked.data.load(checked.args.seed).map_err(|er| usage(format!("--dataset: {}", er)))?;
    let (mut loss, mut hits, mut share, mut known) = (0.0, 0.0, None::<Vec<f64>>, true);
    let all: Vec<usize> = (0..data.n).collect();
    for chunk in all.chunks(MAX_VAL_SAMPLES) {
        let r = trainer.evaluate(&data, chunk).map_err(|er| failed(format!("evaluating: {}", er)))?;
        let w = chunk.len() as f64 / data.n as f64;
        loss += r.loss * w;
        match r.routing_accuracy {
            Some(a) => hits += a * w,
            None => known = false,
        }
        if let Some(s) = r.expert_share {
            let acc = share.get_or_insert_with(|| vec![0.0; s.len()]);
            for (a, v) in acc.iter_mut().zip(s) {
                *a += v * w;
            }
        }
    }
    Ok(EvalReport {
        checkpoint: path.display().to_string(),
        step: trainer.step,
        dataset: data.source.clone(),
        samples: data.n,
        loss,
        routing_accuracy: known.then_some(hits),
        expert_share: share,
    })
}
