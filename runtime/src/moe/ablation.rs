//! The router/model ablation: the softmax MoE, the sheaf-padic MoE and the
//! dense model trained on the same data with the same seed and budget, then
//! compared (loss, routing accuracy against the data's true expert, expert
//! balance, time per step) in a table and plots.

use super::cli::{Args, Checked};
use super::config::N_EXPERTS;
use super::driver::{self, Failure, Report};
use tokitai_contracts::plot::{line_chart, Series};
use super::run::{write_atomic, StepMetrics};
use clap::Parser;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The three contenders: (label, extra trainer flags).
pub const KINDS: [(&str, &[&str]); 3] = [
    ("softmax MoE", &["--model", "moe", "--router", "softmax"]),
    ("sheaf-padic MoE", &["--model", "moe", "--router", "sheaf-padic"]),
    ("dense", &["--model", "dense"]),
];

/// Train/compare settings shared by the three runs (trainer flags).
pub struct Plan {
    pub common: Vec<String>,
    pub out: PathBuf,
}

/// One finished contender.
pub struct Entry {
    pub label: &'static str,
    pub report: Report,
}

/// Mean of the last `n` values (or all, when fewer).
fn tail_mean(v: &[f64], n: usize) -> f64 {
    let t = &v[v.len().saturating_sub(n)..];
    if t.is_empty() {
        f64::NAN
    } else {
        t.iter().sum::<f64>() / t.len() as f64
    }
}

/// The most-loaded expert's share of the top-2 slots, in units of the fair
/// share (1 = perfectly balanced; 2 = every sample's slot on one expert).
pub fn max_load(m: &StepMetrics) -> f64 {
    m.per_expert_share.iter().cloned().fold(0.0, f64::max) * N_EXPERTS as f64
}

/// Milliseconds per step, from the elapsed times.
fn step_ms(rows: &[StepMetrics]) -> Vec<f64> {
    let mut prev = 0.0;
    rows.iter()
        .map(|m| {
            let d = m.elapsed_ms - prev;
            prev = m.elapsed_ms;
            d
        })
        .collect()
}

impl Entry {
    fn is_moe(&self) -> bool {
        self.report.arch.model_kind == "moe"
    }
}

/// Run the three trainings (each in `out/<kind>`).
pub fn run(plan: &Plan, quiet: bool) -> Result<Vec<Entry>, Failure> {
    let mut entries = Vec::new();
    for (label, flags) in KINDS {
        let dir = plan.out.join(label.replace(' ', "-"));
        let mut argv: Vec<String> = vec!["tokitai-train".into()];
        argv.extend(plan.common.iter().cloned());
        argv.extend(flags.iter().map(|s| s.to_string()));
        // The ablation owns its output directory: a second ablation
        // replaces the first's runs.
        argv.extend(["--checkpoint-dir".to_string(), dir.display().to_string(), "--checkpoint-every".into(), "0".into(), "--overwrite".into()]);
        if quiet {
            argv.push("--quiet".into());
        }
        let args = Args::try_parse_from(&argv).map_err(|e| Failure { code: 2, message: e.to_string() })?;
        let checked: Checked = args.check().map_err(|m| Failure { code: 2, message: m })?;
        if !quiet {
            eprintln!("ablation: training {} ...", label);
        }
        let report = driver::run(&checked)?;
        entries.push(Entry { label, report });
    }
    Ok(entries)
}

/// The comparison table (markdown).
pub fn table(entries: &[Entry], last: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| model | parameters | loss, first step | loss, mean of last {} | routing accuracy, last {} | max expert load (x fair), last {} | ms per step (median) |", last, last, last);
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    for e in entries {
        let rows = &e.report.rows;
        let loss: Vec<f64> = rows.iter().map(|m| m.loss).collect();
        let acc: Vec<f64> = rows.iter().filter_map(|m| m.routing_accuracy).collect();
        let load: Vec<f64> = rows.iter().map(max_load).collect();
        let mut ms = step_ms(rows);
        ms.sort_by(f64::total_cmp);
        let median = ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN);
        let moe = e.is_moe();
        let _ = writeln!(
            s,
            "| {} | {} | {:.5} | {:.5} | {} | {} | {:.2} |",
            e.label,
            e.report.arch.param_count,
            loss.first().copied().unwrap_or(f64::NAN),
            tail_mean(&loss, last),
            if moe { format!("{:.3}", tail_mean(&acc, last)) } else { "n/a (no router)".into() },
            if moe { format!("{:.3}", tail_mean(&load, last)) } else { "n/a".into() },
            median
        );
    }
    s
}

fn series(entries: &[Entry], moe_only: bool, y: impl Fn(&StepMetrics) -> Option<f64>) -> Vec<Series> {
    entries
        .iter()
        .filter(|e| !moe_only || e.is_moe())
        .map(|e| Series { name: e.label.into(), points: e.report.rows.iter().filter_map(|m| y(m).map(|v| (m.step as f64, v))).collect() })
        .collect()
}

/// Write `ablation.md`, `ablation.json` and the four plots into `out`.
pub fn write(out: &Path, entries: &[Entry], description: &str) -> Result<Vec<PathBuf>, Failure> {
    let put = |name: &str, text: String| -> Result<PathBuf, Failure> {
        let p = out.join(name);
        write_atomic(&p, text.as_bytes()).map_err(|e| Failure { code: 1, message: format!("{}: {}", p.display(), e) })?;
        Ok(p)
    };
    let last = 5;
    let mut md = format!("# Ablation: softmax MoE, sheaf-padic MoE, dense\n\n{}\n\n", description);
    md.push_str(&table(entries, last));
    md.push_str("\nRouting accuracy: share of samples whose top-1 expert is the data's true expert (chance is 0.25). Max expert load: the most-loaded expert's share of the top-2 slots times 4 (1 is perfectly balanced). Loss is the MSE (the sheaf-padic objective adds 0.01 x its disagreement energy, logged as `sheaf_energy`).\n\n![loss](loss.svg) ![routing accuracy](routing_accuracy.svg) ![expert load](expert_load.svg) ![time per step](step_time.svg)\n");
    let mut files = vec![put("ablation.md", md)?];
    let json: Vec<serde_json::Value> = entries.iter().map(|e| serde_json::json!({ "model": e.label, "arch": e.report.arch, "metrics": e.report.rows })).collect();
    files.push(put("ablation.json", serde_json::to_string_pretty(&json).unwrap_or_default())?);
    files.push(put("loss.svg", line_chart("MSE loss", "step", "loss", &series(entries, false, |m| Some(m.loss))))?);
    files.push(put("routing_accuracy.svg", line_chart("routing accuracy (true expert = top-1)", "step", "accuracy", &series(entries, true, |m| m.routing_accuracy)))?);
    files.push(put("expert_load.svg", line_chart("max expert load (x fair share)", "step", "load", &series(entries, true, |m| Some(max_load(m)))))?);
    let times: Vec<Series> = entries.iter().map(|e| Series { name: e.label.into(), points: e.report.rows.iter().zip(step_ms(&e.report.rows)).map(|(m, t)| (m.step as f64, t)).collect() }).collect();
    files.push(put("step_time.svg", line_chart("time per step", "step", "ms", &times))?);
    Ok(files)
}
