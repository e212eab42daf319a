//! tokitai-fuzz: the compiler's fuzz campaign. Prints the report (inputs
//! per stage, the exit-code histogram, the prover's verdicts, the slowest
//! inputs, every defect) and writes it as JSON with `--json`.
//!
//! Exit status: 0 no defect; 1 a panic or a failure without a diagnostic
//! (the inputs kept under `--out`); 2 bad flags; 3 a hang (the input kept
//! and printed); 4 memory past `--max-rss-mib` (the inputs running kept).

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use tokitai_fuzz::campaign::{run, Config};

/// Fuzz the tokitai compiler with generated and mutated .tk programs.
#[derive(Parser, Debug)]
#[command(name = "tokitai-fuzz", version)]
struct Args {
    /// How many inputs.
    #[arg(long, default_value_t = 100_000)]
    inputs: u64,
    /// The campaign's seed (inputs are deterministic from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Verify the inputs 2j and 2j + 1 for every j a multiple of N, when
    /// they compile (0: none).
    #[arg(long, default_value_t = 250)]
    verify_every: u64,
    /// The solver's timeout per obligation, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u32,
    /// Seconds an input may run before it counts as a hang.
    #[arg(long, default_value_t = 60)]
    hang_after: u64,
    /// Resident memory (MiB) past which the running inputs are a runaway
    /// (0: no limit).
    #[arg(long, default_value_t = 8192)]
    max_rss_mib: u64,
    /// Where defective inputs are kept.
    #[arg(long, default_value = "target/fuzz")]
    out: PathBuf,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() {
    let a = Args::parse();
    let cfg = Config {
        inputs: a.inputs,
        seed: a.seed,
        verify_every: a.verify_every,
        verify_timeout_ms: a.timeout_ms,
        hang_after: Duration::from_secs(a.hang_after),
        out: Some(a.out.clone()),
        progress_every: Some(Duration::from_secs(10)),
        max_rss_mib: a.max_rss_mib,
    };
    let report = run(&cfg);
    print!("{}", report.render());
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: {}: {}", path.display(), e);
            std::process::exit(1);
        }
    }
    std::process::exit(if report.clean() { 0 } else { 1 });
}
