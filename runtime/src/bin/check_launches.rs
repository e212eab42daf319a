//! tokitai-check-launches: replay launches recorded by `tokitai-train
//! --record-launches DIR` on a device and compare each with the f64
//! oracle within the bound evaluated for that launch (its dims and
//! magnitudes). Prints one row per launch and a summary; exits 1 when a
//! launch exceeds its bound or cannot be replayed.

use clap::Parser;
use std::path::PathBuf;
use tokitai_runtime::{check, kernels, record, Device};

/// Check recorded launches against the exact oracle.
#[derive(Parser, Debug)]
#[command(name = "tokitai-check-launches", version)]
struct Cli {
    /// The directory written by `tokitai-train --record-launches`.
    dir: PathBuf,
    /// cpu, cuda, cuda:N, hip[:N] or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn main() {
    let cli = Cli::parse();
    tokitai_runtime::exit::exit(run(&cli));
}

fn run(cli: &Cli) -> Result<bool, String> {
    let dev = Device::from_spec(&cli.device).map_err(|e| format!("--device: {}", e))?;
    let files = record::list(&cli.dir).map_err(|e| e.to_string())?;
    if files.is_empty() {
        return Err(format!("{}: no recorded launches (*.safetensors)", cli.dir.display()));
    }
    println!("{:<44} {:>10} {:>12}  verdict", "launch", "elements", "worst/bound");
    let (mut passed, mut failed) = (0usize, 0usize);
    for f in &files {
        let name = f.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let outcome = record::load(f)
            .map_err(|e| e.to_string())
            .and_then(|(kernel, case)| {
                let k = kernels::by_name(&kernel).ok_or_else(|| format!("no kernel `{}` in this build", kernel))?;
                check::check(&dev, k, &case).map_err(|e| e.to_string())
            });
        match outcome {
            Ok(o) if o.passed() => {
                passed += 1;
                println!("{:<44} {:>10} {:>12.3e}  within", name, o.elements, o.worst_ratio);
            }
            Ok(o) => {
                failed += 1;
                println!("{:<44} {:>10} {:>12.3e}  EXCEEDS: {} elements over, worst {}", name, o.elements, o.worst_ratio, o.over, o.worst);
            }
            Err(e) => {
                failed += 1;
                println!("{:<44} {:>10} {:>12}  ERROR: {}", name, "-", "-", e);
            }
        }
    }
    println!("CHECKED: device={} launches={} within={} violations={}", dev.location(), files.len(), passed, failed);
    Ok(failed == 0)
}
