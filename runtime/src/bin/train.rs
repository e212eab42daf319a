//! tokitai-train: the MoE trainer's command line (see `moe::cli` for the
//! flags, `moe::driver` for the run); `tokitai-train eval --checkpoint-dir
//! DIR [--dataset D] [--json]` evaluates a saved model (`moe::eval`);
//! `tokitai-train export --checkpoint-dir DIR -o FILE` writes its weights
//! for the PyTorch reference module (`moe::export`).
//!
//! Exit status: 0 on success; 1 when the run failed (fewer steps than
//! asked, no metrics written, a kernel or I/O error); 2 for bad flags or
//! data; 3 when the run diverged (a non-finite loss, or gradients that
//! overflow even unscaled: the step and the tensor are named, and the last
//! good checkpoint is kept as it was).

use clap::Parser;
use std::io::Write;
use tokitai_runtime::moe::cli::Args;
use tokitai_runtime::moe::{diagnose, driver, eval, export};

fn fail(code: i32, message: impl std::fmt::Display) -> ! {
    eprintln!("error: {}", message);
    std::process::exit(code);
}

fn main() {
    // `tokitai-train eval ...`: a saved model on a dataset.
    if std::env::args().nth(1).as_deref() == Some("eval") {
        let e = eval::EvalArgs::parse_from(std::env::args().skip(1));
        match eval::run(&e) {
            Ok(report) => {
                let text = if e.json { serde_json::to_string_pretty(&report).unwrap_or_default() + "\n" } else { report.render() };
                let _ = write!(std::io::stdout().lock(), "{}", text);
                std::process::exit(0);
            }
            Err(f) => fail(f.code, f.message),
        }
    }
    // `tokitai-train export ...`: a saved model's weights for PyTorch.
    if std::env::args().nth(1).as_deref() == Some("export") {
        let e = export::ExportArgs::parse_from(std::env::args().skip(1));
        match export::run(&e) {
            Ok(done) => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "wrote {} ({} tensors, PyTorch names and layouts; module: runtime/python/tokitai_moe.py)", done.weights.display(), done.tensors);
                if let Some(s) = done.sample {
                    let _ = writeln!(out, "wrote {} (inputs and our forward outputs, to check the module against)", s.display());
                }
                std::process::exit(0);
            }
            Err(f) => fail(f.code, f.message),
        }
    }
    let checked = Args::parse().check().unwrap_or_else(|e| fail(2, e));
    for w in &checked.warnings {
        eprintln!("warning: {}", w);
    }
    if checked.args.diagnose {
        match diagnose::run(&checked) {
            Ok(report) => {
                let _ = write!(std::io::stdout().lock(), "{}", report.render());
                std::process::exit(0);
            }
            Err(f) => fail(f.code, f.message),
        }
    }
    let result = if checked.args.dry_run { driver::dry_run(&checked) } else { driver::run(&checked) };
    match result {
        Ok(report) => {
            let _ = writeln!(std::io::stdout().lock(), "{}", report.summary());
            std::process::exit(report.exit_code());
        }
        Err(f) => fail(f.code, f.message),
    }
}
