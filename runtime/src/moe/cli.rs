//! The trainer's command line (moe.md, "Command line"): every flag of the
//! old crate with its check and default, plus `--device`, `--router`,
//! `--model` and `--resume`.

use super::config::Size;
use super::data::DataSpec;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Optimizer {
    Adamw,
    Sgd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RouterKind {
    Softmax,
    SheafPadic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ContractsMode {
    Off,
    Warn,
    Strict,
}

impl ContractsMode {
    pub fn monitor(self) -> crate::monitor::Mode {
        match self {
            ContractsMode::Off => crate::monitor::Mode::Off,
            ContractsMode::Warn => crate::monitor::Mode::Warn,
            ContractsMode::Strict => crate::monitor::Mode::Strict,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelKind {
    Moe,
    Dense,
}

impl Optimizer {
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::Sgd => "sgd",
        }
    }
}

impl RouterKind {
    pub fn name(self) -> &'static str {
        match self {
            RouterKind::Softmax => "softmax",
            RouterKind::SheafPadic => "sheaf-padic",
        }
    }
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Moe => "moe",
            ModelKind::Dense => "dense",
        }
    }
}

/// Train the quality-decision Mixture-of-Experts model on kernels generated
/// and verified by tokitai.
#[derive(Clone, Debug, Parser)]
#[command(name = "tokitai-train", version, allow_negative_numbers = true)]
pub struct Args {
    /// synth:quality:N, synth:regression:N, a ledger directory (a value
    /// outside its documented range is an error naming the row), or
    /// clamp:DIR (such values clamped, as the older crate did).
    #[arg(long, default_value = "synth:quality:512")]
    pub dataset: String,
    #[arg(long, default_value = "tiny")]
    pub size: Size,
    /// Training steps (default: 20 nano, 50 tiny, 100 medium and full).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Samples per step (any positive number: the kernels' contracts admit it).
    #[arg(long, default_value_t = 128)]
    pub batch: usize,
    #[arg(long, default_value_t = 0.001)]
    pub lr: f64,
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: Optimizer,
    /// SGD momentum, in [0, 1).
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f64,
    /// Learning-rate multiplier of the router's parameters, in [0, 10].
    #[arg(long, default_value_t = 0.1)]
    pub router_lr_scale: f64,
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f64,
    /// Global L2 gradient-norm limit (positive).
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Default: ./var/training/<unix time>.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Default: <checkpoint dir>/metrics.jsonl.
    #[arg(long)]
    pub metrics_path: Option<PathBuf>,
    /// Default: <checkpoint dir>/arch.json.
    #[arg(long)]
    pub arch_path: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// No forward or backward: synthetic metrics and a checkpoint without weights.
    #[arg(long)]
    pub dry_run: bool,
    /// One step in the training precision and in f32; compare the gradients.
    #[arg(long)]
    pub diagnose: bool,
    #[arg(long, default_value_t = 5)]
    pub warmup_steps: usize,
    /// Cosine decay ends at lr * this, in [0, 1].
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_ratio: f64,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, value_enum, default_value = "softmax")]
    pub router: RouterKind,
    #[arg(long, value_enum, default_value = "moe")]
    pub model: ModelKind,
    /// Check every launch against the domains its error bounds were proved
    /// for: off, warn (count, name the first launch outside per kernel) or
    /// strict (stop before a launch outside them). Default: warn, or
    /// $TOKITAI_CONTRACTS.
    #[arg(long, value_enum)]
    pub contracts: Option<ContractsMode>,
    /// Record a sample of the run's launches (each kernel's 1st, 2nd, 4th,
    /// 8th.. launch, at most 4 each) with their inputs into this directory,
    /// for `tokitai-check-launches DIR` to replay against the f64 oracle.
    #[arg(long, value_name = "DIR")]
    pub record_launches: Option<std::path::PathBuf>,
    /// Continue from the checkpoint in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
    /// Start afresh in a --checkpoint-dir that holds a run, replacing its
    /// checkpoint and metrics (without it, such a directory is refused).
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// How samples reach experts: each through its top-2 experts only
    /// (sparse), or every expert on every sample (dense, as the old crate).
    /// auto: dense on a GPU up to batch 1024 (static shapes, so the step is
    /// captured once and replayed as a graph), sparse otherwise.
    #[arg(long, value_enum, default_value = "auto")]
    pub dispatch: DispatchKind,
    /// Launch every kernel of every step instead of replaying a captured
    /// step (for comparison).
    #[arg(long)]
    pub no_graphs: bool,
    /// Write a checkpoint every N steps (and always at the end; 0: only at
    /// the end).
    #[arg(long, default_value_t = 10)]
    pub checkpoint_every: usize,
    /// Held-out samples for evaluation (0: none). Synthetic data draws
    /// them after the training samples, from the same task (training sees
    /// exactly the samples it would without them); a ledger keeps that
    /// many of its rows out of training (at most a fifth), chosen by
    /// --seed.
    #[arg(long, default_value_t = 256)]
    pub val_samples: usize,
    /// Evaluate on the held-out samples every N steps and after the last
    /// (0: after the last only): val_loss, val_routing_accuracy and
    /// val_expert_share in metrics.jsonl.
    #[arg(long, default_value_t = 10)]
    pub eval_every: usize,
    /// Stop after step N as an interruption would (checkpoint written);
    /// `--resume` continues the same run.
    #[arg(long)]
    pub stop_after: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DispatchKind {
    Auto,
    Sparse,
    Dense,
}

/// A checked configuration, and the warnings worth printing.
/// The most held-out samples (they are evaluated as one batch), and the
/// batch `tokitai-train eval` evaluates at once.
pub const MAX_VAL_SAMPLES: usize = 4096;

#[derive(Clone, Debug)]
pub struct Checked {
    pub args: Args,
    pub steps: usize,
    pub data: DataSpec,
    pub warnings: Vec<String>,
}

fn in_range(name: &str, v: f64, lo: f64, hi: f64, hi_open: bool) -> Result<(), String> {
    let ok = v.is_finite() && v >= lo && if hi_open { v < hi } else { v <= hi };
    if ok {
        Ok(())
    } else {
        Err(format!("--{} must be in [{}, {}{}, got {}", name, lo, hi, if hi_open { ")" } else { "]" }, v))
    }
}

impl Args {
    /// Every check of moe.md; the first failure is the error.
    pub fn check(self) -> Result<Checked, String> {
        if self.batch == 0 {
            return Err("--batch must be positive, got 0".into());
        }
        if self.steps == Some(0) {
            return Err("--steps must be positive, got 0".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(format!("--lr must be positive and finite, got {}", self.lr));
        }
        in_range("momentum", self.momentum, 0.0, 1.0, true)?;
        in_range("router-lr-scale", self.router_lr_scale, 0.0, 10.0, false)?;
        in_range("min-lr-ratio", self.min_lr_ratio, 0.0, 1.0, false)?;
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(format!("--weight-decay must be finite and at least 0, got {}", self.weight_decay));
        }
        if !(self.grad_clip.is_finite() && self.grad_clip > 0.0) {
            return Err(format!("--grad-clip must be positive and finite, got {}", self.grad_clip));
        }
        if self.dry_run && self.diagnose {
            return Err("--dry-run and --diagnose cannot be combined (a dry run computes nothing to diagnose)".into());
        }
        if self.stop_after == Some(0) {
            return Err("--stop-after must be positive, got 0".into());
        }
        if self.val_samples > MAX_VAL_SAMPLES {
            return Err(format!("--val-samples {} is more than {} (the held-out samples are evaluated as one batch)", self.val_samples, MAX_VAL_SAMPLES));
        }
        if self.resume && self.checkpoint_dir.is_none() {
            return Err("--resume needs --checkpoint-dir (the run to continue)".into());
        }
        let dev_kind = self.device.split(':').next().unwrap_or("");
        if !["cpu", "cuda", "hip", "auto"].contains(&dev_kind) {
            return Err(format!("--device must be cpu, cuda[:N], hip[:N] or auto, got `{}`", self.device));
        }
        let data = DataSpec::parse(&self.dataset).map_err(|e| format!("--dataset: {}", e))?;
        let mut warnings = Vec::new();
        if self.optimizer == Optimizer::Sgd && self.lr < 0.01 {
            warnings.push(format!("SGD with --lr {} (< 0.01) barely moves; SGD usually wants 0.01 to 0.1", self.lr));
        }
        let steps = self.steps.unwrap_or(self.size.default_steps());
        Ok(Checked { args: self, steps, data, warnings })
    }
}
