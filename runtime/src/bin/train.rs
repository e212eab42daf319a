//! tokitai-train: the MoE trainer's command line (see `moe::cli`).
//!
//! Exit status: 0 on success; 1 when the run failed (non-finite final loss,
//! fewer steps than asked, no metrics written); 2 for bad flags or data.

use clap::Parser;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use tokitai_runtime::moe::cli::{Args, Checked};
use tokitai_runtime::moe::config::N_EXPERTS;
use tokitai_runtime::moe::run::{summary_line, write_atomic, Arch, Checkpoint, StepMetrics};
use tokitai_runtime::moe::schedule::learning_rate;

fn fail(code: i32, message: impl std::fmt::Display) -> ! {
    eprintln!("error: {}", message);
    std::process::exit(code);
}

fn main() {
    let checked = Args::parse().check().unwrap_or_else(|e| fail(2, e));
    for w in &checked.warnings {
        eprintln!("warning: {}", w);
    }
    let code = match run(&checked) {
        Ok(code) => code,
        Err((code, e)) => fail(code, e),
    };
    std::process::exit(code);
}

fn run(c: &Checked) -> Result<i32, (i32, String)> {
    let a = &c.args;
    let io = |p: &PathBuf| {
        let p = p.clone();
        move |e: std::io::Error| (1, format!("{}: {}", p.display(), e))
    };
    let dir = a.checkpoint_dir.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from("var/training").join(t.to_string())
    });
    let metrics_path = a.metrics_path.clone().unwrap_or_else(|| dir.join("metrics.jsonl"));
    let arch_path = a.arch_path.clone().unwrap_or_else(|| dir.join("arch.json"));
    let checkpoint_path = dir.join("checkpoint.safetensors");
    let arch = Arch::new(a.size, a.seed, a.model.name(), a.router.name());
    if !a.dry_run {
        // The model, its kernels and the training loop are the rest of
        // issue 5; until they land only dry runs are offered.
        return Err((2, "training is not available yet in this build: only --dry-run runs (the model lands with issue 5)".into()));
    }
    let data = c.data.load(a.seed).map_err(|e| (2, format!("--dataset: {}", e)))?;
    write_atomic(&arch_path, arch.to_json().as_bytes()).map_err(io(&arch_path))?;
    let start = Instant::now();
    let mut rows = Vec::new();
    let mut last = None;
    for step in 1..=c.steps {
        // A dry run: synthetic numbers, marked as such (no forward/backward).
        let m = StepMetrics {
            step,
            loss: 1.0 / step as f64,
            grad_norm: 0.0,
            lr: learning_rate(step, c.steps, a.lr, a.warmup_steps, a.min_lr_ratio),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
            model_size: a.size.name().into(),
            router_entropy_mean: (N_EXPERTS as f64).ln(),
            per_expert_share: [1.0 / N_EXPERTS as f64; N_EXPERTS],
            dry_run: true,
        };
        rows.push(serde_json::to_string(&m).map_err(|e| (1, e.to_string()))?);
        last = Some(m);
    }
    let text = rows.iter().map(|r| format!("{}\n", r)).collect::<String>();
    write_atomic(&metrics_path, text.as_bytes()).map_err(io(&metrics_path))?;
    let mut meta = std::collections::HashMap::new();
    meta.insert("step".to_string(), c.steps.to_string());
    meta.insert("arch".to_string(), serde_json::to_string(&arch).map_err(|e| (1, e.to_string()))?);
    meta.insert("dry_run".to_string(), "true".to_string());
    meta.insert("dataset".to_string(), format!("{} ({} samples, {} skipped)", data.source, data.n, data.skipped));
    Checkpoint { tensors: Vec::new(), metadata: meta }.save(&checkpoint_path).map_err(|e| (1, e))?;
    let Some(last) = last else { return Ok(1) };
    let seconds = start.elapsed().as_secs_f64();
    let line = summary_line(&arch, last.loss, c.steps, seconds, last.router_entropy_mean, &checkpoint_path, &arch_path);
    let _ = writeln!(std::io::stdout().lock(), "{}", line);
    Ok(if last.loss.is_finite() && rows.len() == c.steps { 0 } else { 1 })
}
