//! tokitai-padic: `C = A B mod p^k` with the proved valuation-skip kernel
//! (`examples/ops/padic.tk`), a product left out where `vp(a) + vp(b) >=
//! k`, and each output's certificate. A and B are text files: one row a
//! line, entries (non-negative integers) separated by spaces or commas,
//! `#` starting a comment. Prints C and the certificate's totals; exits 0,
//! or 2 on a bad file, modulus or device, naming what is wrong.

use clap::Parser;
use std::path::{Path, PathBuf};
use tokitai_runtime::padic::{matmul, Matrix};
use tokitai_runtime::Device;

/// Multiply two matrices modulo p^k, skipping products p^k divides.
#[derive(Parser, Debug)]
#[command(name = "tokitai-padic", version)]
struct Cli {
    /// Matrix A (text: one row a line).
    a: PathBuf,
    /// Matrix B.
    b: PathBuf,
    /// The modulus `p^k`: 2^16 or 3^10 (the moduli a kernel is compiled for).
    #[arg(long, default_value = "2^16")]
    modulus: String,
    /// cpu, cuda, cuda:N, hip[:N] or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Also write C and the certificate here as JSON (written whole, then renamed).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    tokitai_runtime::exit::exit(run(&cli).map(|_| true));
}

fn parse_modulus(text: &str) -> Result<(u64, u32), String> {
    let (p, k) = text.split_once('^').ok_or_else(|| format!("--modulus {}: write it as p^k, e.g. 2^16", text))?;
    let p = p.trim().parse::<u64>().map_err(|_| format!("--modulus {}: p = `{}` is not a non-negative integer", text, p.trim()))?;
    let k = k.trim().parse::<u32>().map_err(|_| format!("--modulus {}: k = `{}` is not a non-negative integer", text, k.trim()))?;
    tokitai_contracts::residue::Modulus::new(p, k).map_err(|e| format!("--modulus {}: {}", text, e))?;
    Ok((p, k))
}

/// A matrix from text, every row as long as the first.
fn read_matrix(path: &Path) -> Result<Matrix, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {}", path.display(), e))?;
    let mut rows: Vec<Vec<u64>> = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut row = Vec::new();
        for (col, word) in line.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).enumerate() {
            let v = word.parse::<u64>().map_err(|_| format!("{}:{}: entry {} (`{}`) is not a non-negative integer", path.display(), line_no + 1, col + 1, word))?;
            row.push(v);
        }
        if row.is_empty() {
            continue;
        }
        if let Some(first) = rows.first() {
            if row.len() != first.len() {
                return Err(format!("{}:{}: this row has {} entries, the first has {}", path.display(), line_no + 1, row.len(), first.len()));
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(format!("{}: no entries", path.display()));
    }
    let cols = rows[0].len();
    Ok(Matrix { rows: rows.len(), cols, data: rows.concat() })
}

fn run(cli: &Cli) -> Result<(), String> {
    let (p, k) = parse_modulus(&cli.modulus)?;
    let (a, b) = (read_matrix(&cli.a)?, read_matrix(&cli.b)?);
    let dev = Device::from_spec(&cli.device).map_err(|e| format!("--device: {}", e))?;
    let out = matmul(p, k, &a, &b, &dev).map_err(|e| e.to_string())?;
    println!("C = A B mod {}^{} ({} x {}):", p, k, out.m, out.n);
    for row in out.c.chunks(out.n) {
        println!("{}", row.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" "));
    }
    let evaluated: u64 = out.evaluated.iter().map(|&x| x as u64).sum();
    let skipped: u64 = out.skipped.iter().map(|&x| x as u64).sum();
    let closest = out.min_skipped.iter().copied().filter(|&s| s <= 2 * k).min();
    println!("certificate: {} products evaluated, {} skipped (each divisible by {}^{}: proved)", evaluated, skipped, p, k);
    match closest {
        Some(s) => println!("closest skip: vp(a) + vp(b) = {} (margin {} over k = {})", s, s as i64 - k as i64, k),
        None => println!("closest skip: none skipped"),
    }
    if let Some(path) = &cli.json {
        let text = serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?;
        tokitai_runtime::cache::write_atomic(path, text.as_bytes()).map_err(|e| format!("{}: {}", path.display(), e))?;
    }
    Ok(())
}
