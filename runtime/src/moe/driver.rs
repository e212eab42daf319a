//! A whole training run as the command line asks for it: outputs, resume,
//! checkpoints, progress, the loss plot and the summary; `--diagnose` and
//! `--dry-run` too. The binary `tokitai-train` is a thin shell over `run`.

use super::cli::{Checked, DispatchKind, ModelKind, RouterKind};
use super::config::N_EXPERTS;
use super::data::Dataset;
use super::model::{Dispatch, Kind};
use tokitai_contracts::plot::{line_chart, Series};
use super::run::{summary_line, write_atomic, Arch, Checkpoint, StepMetrics};
use super::schedule::learning_rate;
use super::train::{Hyper, StepStats, Trainer};
use crate::Device;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Why a run stopped early: the exit code and the message.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub(super) fn usage(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}
pub(super) fn failed(message: impl Into<String>) -> Failure {
    Failure { code: 1, message: message.into() }
}

/// The exit status of a run stopped because it diverged (a non-finite
/// loss, or gradients that overflow even unscaled): the last good
/// checkpoint is kept as it was.
pub const DIVERGED: i32 = 3;

/// A diverged run's error: what went non-finite at which step, the first
/// parameter or gradient holding such a value, and the checkpoint kept.
fn diverged(t: &Trainer, what: String, checkpoint: &Path) -> Failure {
    let tensor = match t.first_non_finite() {
        Ok(Some(name)) => format!("; {} holds a non-finite value", name),
        Ok(None) => "; every parameter and gradient is finite (the forward pass overflowed)".into(),
        Err(e) => format!("; its tensors could not be read: {}", e),
    };
    let kept = match Checkpoint::load(checkpoint) {
        Ok(c) => format!("the last good checkpoint, step {}, is kept: {} (continue with --resume, e.g. at a lower --lr)", c.metadata.get("step").map(String::as_str).unwrap_or("?"), checkpoint.display()),
        Err(_) => "no checkpoint had been written".into(),
    };
    Failure { code: DIVERGED, message: format!("the run diverged: {}{}; {}", what, tensor, kept) }
}

/// Where a run writes.
#[derive(Clone, Debug)]
pub struct Paths {
    pub dir: PathBuf,
    pub metrics: PathBuf,
    pub arch: PathBuf,
    pub checkpoint: PathBuf,
    pub plot: PathBuf,
    /// The contract monitor's counts per kernel (`tokitaic verify
    /// --run-coverage` puts them in the report).
    pub contracts: PathBuf,
}

impl Paths {
    pub fn of(c: &Checked) -> Paths {
        let a = &c.args;
        let dir = a.checkpoint_dir.clone().unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            PathBuf::from("var/training").join(t.to_string())
        });
        Paths {
            metrics: a.metrics_path.clone().unwrap_or_else(|| dir.join("metrics.jsonl")),
            arch: a.arch_path.clone().unwrap_or_else(|| dir.join("arch.json")),
            checkpoint: dir.join("checkpoint.safetensors"),
            plot: dir.join("loss.svg"),
            contracts: dir.join("contracts.json"),
            dir,
        }
    }
}

/// What a finished run reports.
pub struct Report {
    pub arch: Arch,
    pub rows: Vec<StepMetrics>,
    pub seconds: f64,
    pub paths: Paths,
    /// Steps this invocation was asked to reach.
    pub target: usize,
}

impl Report {
    pub fn summary(&self) -> String {
        let last = self.rows.last();
        let line = summary_line(&self.arch, last.map_or(f64::NAN, |m| m.loss), self.rows.len(), self.seconds, last.map_or(f64::NAN, |m| m.router_entropy_mean), &self.paths.checkpoint, &self.paths.arch);
        if self.rows.iter().any(|r| r.dry_run) {
            return line;
        }
        // SUMMARY stays the last line (moe.md: scripts read it there).
        format!("{}\n{}", contracts_line(), line)
    }
    /// moe.md's rules: non-zero when the final loss is not finite, fewer
    /// steps ran than asked, or no metrics were written.
    pub fn exit_code(&self) -> i32 {
        match self.rows.last() {
            Some(m) if m.loss.is_finite() && self.rows.len() >= self.target => 0,
            _ => 1,
        }
    }
}

pub fn model_kind(c: &Checked) -> Kind {
    match (c.args.model, c.args.router) {
        (ModelKind::Dense, _) => Kind::Dense,
        (ModelKind::Moe, RouterKind::Softmax) => Kind::Moe,
        (ModelKind::Moe, RouterKind::SheafPadic) => Kind::SheafPadic,
    }
}

/// The largest batch `--dispatch auto` runs dense on a GPU: there the step
/// is launch-bound and dense dispatch makes it one graph; beyond it the
/// dense form's extra work (every expert on every sample) costs more than
/// the launches (bench/RESULTS.md).
pub const AUTO_DENSE_MAX_BATCH: usize = 1024;

pub fn hyper(c: &Checked, dev: &Device) -> Hyper {
    let a = &c.args;
    Hyper {
        optimizer: a.optimizer,
        lr: a.lr,
        momentum: a.momentum,
        weight_decay: a.weight_decay,
        grad_clip: a.grad_clip,
        router_lr_scale: a.router_lr_scale,
        warmup_steps: a.warmup_steps,
        min_lr_ratio: a.min_lr_ratio,
        steps: c.steps,
        batch: a.batch,
        seed: a.seed,
        dispatch: match a.dispatch {
            DispatchKind::Sparse => Dispatch::Sparse,
            DispatchKind::Dense => Dispatch::Dense,
            DispatchKind::Auto if dev.has_graphs() && !a.no_graphs && a.batch <= AUTO_DENSE_MAX_BATCH => Dispatch::Dense,
            DispatchKind::Auto => Dispatch::Sparse,
        },
        graphs: !a.no_graphs,
    }
}

/// The settings of a `tokitai-train` run given no flags (moe.md's
/// defaults), for drivers that set only a few of them.
pub fn default_hyper() -> Hyper {
    use clap::Parser;
    let args = super::cli::Args::parse_from(["tokitai-train"]);
    hyper(&args.check().expect("the defaults pass the checks"), &Device::Cpu)
}

/// The largest batch every kernel of a step admits: the weight-gradient
/// contraction reduces over the batch and states its limit.
pub fn max_batch() -> Option<i64> {
    let k = crate::kernels::by_name("linear_bwd_w")?;
    let m = k.info.dims.iter().position(|d| *d == "M")?;
    k.info.dim_upper.get(m).copied().flatten()
}

/// Write `bytes` to `path` atomically; an I/O error names the path.
fn put(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    write_atomic(path, bytes).map_err(|e| failed(format!("{}: {}", path.display(), e)))
}

/// `metrics.jsonl`'s text for `rows`.
fn metrics_text(rows: &[StepMetrics]) -> String {
    rows.iter().map(|m| format!("{}\n", serde_json::to_string(m).unwrap_or_default())).collect()
}

/// Checkpoint metadata every run writes: the architecture, its
/// fingerprint, the data.
fn run_metadata(arch: &Arch, data: &Dataset) -> HashMap<String, String> {
    HashMap::from([
        ("fingerprint".to_string(), arch.fingerprint()),
        ("arch".to_string(), serde_json::to_string(arch).unwrap_or_default()),
        ("dataset".to_string(), format!("{} ({} samples, {} skipped)", data.source, data.n, data.skipped)),
    ])
}

pub(super) fn device(c: &Checked) -> Result<Device, Failure> {
    Device::from_spec(&c.args.device).map_err(|e| usage(format!("--device {}: {}", c.args.device, e)))
}

fn metrics_row(stats: &StepStats, elapsed_ms: f64, size: &str) -> StepMetrics {
    StepMetrics {
        step: stats.step,
        loss: stats.loss,
        grad_norm: stats.grad_norm,
        lr: stats.lr,
        elapsed_ms,
        model_size: size.into(),
        router_entropy_mean: stats.router_entropy,
        per_expert_share: stats.expert_share,
        routing_accuracy: stats.routing_accuracy,
        sheaf_energy: stats.sheaf_energy,
        loss_scale: Some(stats.loss_scale as f64),
        skipped: stats.skipped,
        launches: None,
        launches_covered: None,
        dry_run: false,
        val_loss: None,
        val_routing_accuracy: None,
        val_expert_share: None,
    }
}

/// The contract monitor's line for the end of a run: launches covered by a
/// proved bound, and each kernel with launches outside, with the first.
pub fn contracts_line() -> String {
    use crate::monitor;
    if monitor::mode() == monitor::Mode::Off {
        return "CONTRACTS: mode=off (launches not checked)".into();
    }
    let cov = monitor::coverage();
    let (launches, covered) = monitor::totals();
    let share = if launches > 0 { 100.0 * covered as f64 / launches as f64 } else { 100.0 };
    let mut s = format!("CONTRACTS: mode={} launches={} covered={} ({:.2}%)", monitor::mode().name(), launches, covered, share);
    for (name, c) in cov.iter().filter(|(_, c)| c.covered < c.launches) {
        let why = c.first_outside.clone().unwrap_or_else(|| format!("{} launches not measured: {}", c.unmeasured, c.why_unmeasured.as_deref().unwrap_or("unknown")));
        s.push_str(&format!("\n  {}: {} of {} launches outside; first: {}", name, c.launches - c.covered, c.launches, why));
    }
    s
}

/// The metrics rows already written (a partial last line from a crash is
/// dropped).
pub fn read_metrics(path: &Path) -> Vec<StepMetrics> {
    std::fs::read_to_string(path).map(|t| t.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()).unwrap_or_default()
}

/// The loss curve of a run, as SVG.
pub fn loss_plot(title: &str, rows: &[StepMetrics]) -> String {
    let series = Series { name: "loss".into(), points: rows.iter().map(|m| (m.step as f64, m.loss)).collect() };
    line_chart(title, "step", "MSE loss", &[series])
}

/// A progress bar on stderr when it is a terminal and not `--quiet`.
fn progress(quiet: bool, total: usize, done: usize) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(total as u64);
    pb.set_style(indicatif::ProgressStyle::with_template("{spinner} step {pos}/{len} [{bar:30}] {msg} ({elapsed} elapsed, {eta} left)").unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()).progress_chars("=> "));
    pb.set_position(done as u64);
    pb
}

fn save_checkpoint(t: &Trainer, c: &Checked, arch: &Arch, data: &Dataset, elapsed_ms: f64, path: &Path) -> Result<(), Failure> {
    let mut meta = run_metadata(arch, data);
    meta.insert("optimizer".to_string(), c.args.optimizer.name().to_string());
    meta.insert("steps".to_string(), c.steps.to_string());
    meta.insert("elapsed_ms".to_string(), format!("{}", elapsed_ms));
    let ckpt = t.checkpoint(meta).map_err(|e| failed(format!("checkpoint: {}", e)))?;
    // A state that is not finite never replaces the last good one.
    if let Some((name, ..)) = ckpt.tensors.iter().find(|(_, _, v)| v.iter().any(|x| !x.is_finite())) {
        return Err(diverged(t, format!("after step {}, `{}` is not finite", t.step, name), path));
    }
    ckpt.save(path).map_err(failed)
}

/// A fresh run does not replace one: where the directory already holds a
/// checkpoint or metrics, it needs `--resume` (continue it) or
/// `--overwrite` (replace it), checked before anything is written.
fn refuse_to_replace(c: &Checked, paths: &Paths) -> Result<(), Failure> {
    if c.args.resume || c.args.overwrite {
        return Ok(());
    }
    let held: Vec<String> = [&paths.checkpoint, &paths.metrics].into_iter().filter(|p| p.exists()).map(|p| p.display().to_string()).collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(usage(format!("{} holds a run ({}): pass --resume to continue it, or --overwrite to start afresh and replace it", paths.dir.display(), held.join(", "))))
}

/// Train as `c` says. Prints warnings and the progress bar on stderr; the
/// caller prints the summary.
pub fn run(c: &Checked) -> Result<Report, Failure> {
    let a = &c.args;
    let paths = Paths::of(c);
    refuse_to_replace(c, &paths)?;
    if let Some(max) = max_batch() {
        if a.batch as i64 > max {
            return Err(usage(format!("--batch {} is more than the kernels admit: linear_bwd_w reduces over the batch and requires M <= {}", a.batch, max)));
        }
    }
    if model_kind(c) == Kind::Dense {
        super::model::check_dense(a.size).map_err(|e| usage(format!("--model dense: {}", e)))?;
    }
    let (data, held_out) = c.data.load_split(a.seed, a.val_samples).map_err(|e| usage(format!("--dataset: {}", e)))?;
    if let Some(m) = a.contracts {
        crate::monitor::set_mode(m.monitor());
    }
    crate::monitor::reset();
    if let Some(dir) = &a.record_launches {
        crate::record::start(dir).map_err(|e| usage(e.to_string()))?;
    }
    let dev = device(c)?;
    let mut trainer = Trainer::new(a.size, model_kind(c), hyper(c, &dev), &dev).map_err(|e| failed(format!("model: {}", e)))?;
    let mut arch = Arch::new(a.size, a.seed, a.model.name(), a.router.name());
    arch.param_count = trainer.model.params.elements();
    let mut elapsed_before = 0.0;
    let mut rows = Vec::new();
    if a.resume {
        let ckpt = Checkpoint::load(&paths.checkpoint).map_err(|e| usage(format!("--resume: {}", e)))?;
        let fp = ckpt.metadata.get("fingerprint").cloned().unwrap_or_default();
        if fp != arch.fingerprint() {
            return Err(usage(format!("--resume: {} was written by architecture {} but these flags describe {} (size, seed, model and router must match)", paths.checkpoint.display(), fp, arch.fingerprint())));
        }
        let opt = a.optimizer.name().to_string();
        if ckpt.metadata.get("optimizer") != Some(&opt) {
            return Err(usage(format!("--resume: the checkpoint's optimizer is {}, not {}", ckpt.metadata.get("optimizer").map(String::as_str).unwrap_or("unknown"), opt)));
        }
        trainer.restore(&ckpt).map_err(|e| usage(format!("--resume: {}", e)))?;
        elapsed_before = ckpt.metadata.get("elapsed_ms").and_then(|v| v.parse().ok()).unwrap_or(0.0);
        // Rows past the checkpoint (a crash after them) are run again.
        rows = read_metrics(&paths.metrics).into_iter().filter(|m| m.step <= trainer.step).collect();
    }
    put(&paths.arch, arch.to_json().as_bytes())?;
    put(&paths.metrics, metrics_text(&rows).as_bytes())?;
    let mut metrics = std::fs::OpenOptions::new().append(true).open(&paths.metrics).map_err(|e| failed(format!("{}: {}", paths.metrics.display(), e)))?;
    let target = a.stop_after.map_or(c.steps, |s| s.min(c.steps));
    let pb = progress(a.quiet, c.steps, trainer.step);
    let start = Instant::now();
    let elapsed = |start: &Instant| elapsed_before + start.elapsed().as_secs_f64() * 1e3;
    while trainer.step < target {
        let before = crate::monitor::totals();
        let stats = trainer.step(&data).map_err(|e| failed(format!("step {}: {}", trainer.step + 1, e)))?;
        // A non-finite loss is divergence; non-finite gradients are an f16
        // overflow the loss scale absorbs (the step is skipped and the
        // scale halved) until the scale falls below 1.
        if !stats.loss.is_finite() {
            pb.finish_and_clear();
            return Err(diverged(&trainer, format!("at step {} the loss is {}", stats.step, stats.loss), &paths.checkpoint));
        }
        if stats.skipped && trainer.loss_scale() < 1.0 {
            pb.finish_and_clear();
            return Err(diverged(&trainer, format!("at step {} the gradients are not finite even unscaled (loss scale {})", stats.step, trainer.loss_scale()), &paths.checkpoint));
        }
        let mut row = metrics_row(&stats, elapsed(&start), a.size.name());
        if crate::monitor::mode() != crate::monitor::Mode::Off {
            let after = crate::monitor::totals();
            row.launches = Some(after.0 - before.0);
            row.launches_covered = Some(after.1 - before.1);
        }
        if let Some(v) = &held_out {
            let last = trainer.step == target || trainer.step == c.steps;
            if last || (a.eval_every > 0 && trainer.step % a.eval_every == 0) {
                let idx: Vec<usize> = (0..v.n).collect();
                let e = trainer.evaluate(v, &idx).map_err(|e| failed(format!("step {}: evaluating on the held-out samples: {}", trainer.step, e)))?;
                row.val_loss = Some(e.loss);
                row.val_routing_accuracy = e.routing_accuracy;
                row.val_expert_share = e.expert_share;
            }
        }
        writeln!(metrics, "{}", serde_json::to_string(&row).unwrap_or_default()).and_then(|_| metrics.flush()).map_err(|e| failed(format!("{}: {}", paths.metrics.display(), e)))?;
        pb.inc(1);
        pb.set_message(format!("loss {:.5}", row.loss));
        rows.push(row);
        if a.checkpoint_every > 0 && trainer.step % a.checkpoint_every == 0 && trainer.step < target {
            save_checkpoint(&trainer, c, &arch, &data, elapsed(&start), &paths.checkpoint)?;
        }
    }
    pb.finish_and_clear();
    // Launches measured on a device after the last step's read, if any.
    crate::monitor::settle().map_err(|e| failed(format!("contracts: {}", e)))?;
    if let Some(dir) = &a.record_launches {
        match crate::record::finish() {
            (n, None) => eprintln!("recorded {} launches in {} (replay them: tokitai-check-launches {})", n, dir.display(), dir.display()),
            (n, Some(e)) => eprintln!("warning: recorded {} launches in {}, then stopped: {}", n, dir.display(), e),
        }
    }
    save_checkpoint(&trainer, c, &arch, &data, elapsed(&start), &paths.checkpoint)?;
    if crate::monitor::mode() != crate::monitor::Mode::Off {
        let run = crate::monitor::run_coverage(&dev.describe());
        put(&paths.contracts, serde_json::to_string_pretty(&run).unwrap_or_default().as_bytes())?;
    }
    let title = format!("{} {} ({}), {}", a.size.name(), a.model.name(), a.router.name(), a.dataset);
    put(&paths.plot, loss_plot(&title, &rows).as_bytes())?;
    Ok(Report { arch, rows, seconds: elapsed(&start) / 1e3, paths, target })
}

/// `--dry-run`: no forward or backward; synthetic metrics (marked) and a
/// checkpoint without weights, at any size.
pub fn dry_run(c: &Checked) -> Result<Report, Failure> {
    let a = &c.args;
    let paths = Paths::of(c);
    refuse_to_replace(c, &paths)?;
    let data = c.data.load(a.seed).map_err(|e| usage(format!("--dataset: {}", e)))?;
    let arch = Arch::new(a.size, a.seed, a.model.name(), a.router.name());
    put(&paths.arch, arch.to_json().as_bytes())?;
    let start = Instant::now();
    let rows: Vec<StepMetrics> = (1..=c.steps)
        .map(|step| StepMetrics {
            step,
            loss: 1.0 / step as f64,
            grad_norm: 0.0,
            lr: learning_rate(step, c.steps, a.lr, a.warmup_steps, a.min_lr_ratio),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
            model_size: a.size.name().into(),
            router_entropy_mean: (N_EXPERTS as f64).ln(),
            per_expert_share: [1.0 / N_EXPERTS as f64; N_EXPERTS],
            routing_accuracy: None,
            sheaf_energy: None,
            loss_scale: None,
            skipped: false,
            launches: None,
            launches_covered: None,
            dry_run: true,
            val_loss: None,
            val_routing_accuracy: None,
            val_expert_share: None,
        })
        .collect();
    put(&paths.metrics, metrics_text(&rows).as_bytes())?;
    let mut meta = run_metadata(&arch, &data);
    meta.insert("step".to_string(), c.steps.to_string());
    meta.insert("dry_run".to_string(), "true".to_string());
    Checkpoint { tensors: Vec::new(), metadata: meta }.save(&paths.checkpoint).map_err(failed)?;
    put(&paths.plot, loss_plot("dry run (synthetic numbers)", &rows).as_bytes())?;
    Ok(Report { arch, seconds: start.elapsed().as_secs_f64(), rows, paths, target: c.steps })
}
