//! tokitai-ablate: train the softmax MoE, the sheaf-padic MoE and the dense
//! model on the same data, seed and budget, and compare them (a markdown
//! table, JSON, and SVG plots of loss, routing accuracy, expert load and
//! time per step). Exit status as tokitai-train's.

use clap::Parser;
use std::path::PathBuf;
use tokitai_runtime::moe::ablation::{self, Plan};

/// Compare the three router/model kinds on one budget.
#[derive(Parser, Debug)]
#[command(name = "tokitai-ablate", version)]
struct Cli {
    #[arg(long, default_value = "synth:quality:4096")]
    dataset: String,
    #[arg(long, default_value = "nano")]
    size: String,
    #[arg(long, default_value_t = 100)]
    steps: usize,
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 0.003)]
    lr: f64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Default: ./var/ablation/<unix time>.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long)]
    quiet: bool,
}

fn main() {
    let cli = Cli::parse();
    let out = cli.out.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from("var/ablation").join(t.to_string())
    });
    let common: Vec<String> = [
        ("--dataset", cli.dataset.clone()),
        ("--size", cli.size.clone()),
        ("--steps", cli.steps.to_string()),
        ("--batch", cli.batch.to_string()),
        ("--lr", cli.lr.to_string()),
        ("--seed", cli.seed.to_string()),
        ("--device", cli.device.clone()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    let plan = Plan { common: common.clone(), out: out.clone() };
    let entries = ablation::run(&plan, cli.quiet).unwrap_or_else(|f| {
        eprintln!("error: {}", f.message);
        std::process::exit(f.code);
    });
    let description = format!("Trained with `tokitai-train {}` (AdamW, warm-up and cosine schedule, the trainer's defaults otherwise), {}.", common.join(" "), cli.device);
    match ablation::write(&out, &entries, &description) {
        Ok(files) => {
            print!("{}", ablation::table(&entries, 5));
            for f in files {
                println!("wrote {}", f.display());
            }
            let ok = entries.iter().all(|e| e.report.exit_code() == 0);
            std::process::exit(if ok { 0 } else { 1 });
        }
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::exit(f.code);
        }
    }
}
