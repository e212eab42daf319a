//! Where valuation skipping pays (issue 23): the skipping product
//! (`padic_skip_p*`) against the dense modular product (`padic_dense_p*`)
//! on the GPU, in one run, as the share of high-valuation entries grows.
//!
//! A share `s` of A's entries has valuation at least `ceil(k / 2)` and a
//! share `s` of B's at least `floor(k / 2)`, so about `s^2` of the products
//! are skipped. Three layouts: `scattered` (entries drawn one by one),
//! `rows` (whole rows of A and of B) and `blocks` (whole 64 x 64 blocks of
//! each: a block-structured operand, the case the tile skip is for: a
//! thread skips a slab's products when its minima sum to k). Prints a
//! table (milliseconds, skip/dense) and the crossover: the smallest share
//! at which skipping was faster.
//!
//! Usage: tokitai-bench-padic [--size N] [--json FILE]

use tokitai_bench::{cuda_device_or_exit, time_ms};
use tokitai_runtime::check::Rng;
use tokitai_runtime::padic::{launch_product, operands, reference, Form, Matrix, MODULI};

#[derive(clap::Parser)]
#[command(name = "tokitai-bench-padic", version)]
struct Args {
    /// M = K = N.
    #[arg(long, default_value_t = 2048)]
    size: usize,
    /// Write the rows here as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
}

const SHARES: [f64; 8] = [0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0];

/// A residue of valuation at least `at_least` (a unit times `p^j`).
fn high(p: u64, k: u32, at_least: u32, rng: &mut Rng) -> u64 {
    let q = p.pow(k);
    let j = rng.range(at_least as i64, k as i64) as u32;
    p.pow(j) * rng.range(1, (q / p.pow(j)).max(2) as i64 - 1) as u64 % q
}

/// A residue of valuation 0.
fn unit(p: u64, k: u32, rng: &mut Rng) -> u64 {
    loop {
        let x = rng.range(1, p.pow(k) as i64 - 1) as u64;
        if !x.is_multiple_of(p) {
            return x;
        }
    }
}

/// Where the high-valuation entries lie.
#[derive(Clone, Copy)]
enum Layout {
    /// Entry by entry.
    Scattered,
    /// Whole rows of A and of B.
    Rows,
    /// Whole 64 x 64 blocks of each (aligned to the default tile).
    Blocks,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Scattered => "scattered",
            Layout::Rows => "rows",
            Layout::Blocks => "blocks",
        }
    }
}

const BLOCK: usize = 64;

fn matrices(p: u64, k: u32, n: usize, share: f64, layout: Layout, rng: &mut Rng) -> (Matrix, Matrix) {
    let make = |at_least: u32, rng: &mut Rng| {
        let rows_high: Vec<bool> = (0..n).map(|_| rng.unit() < share).collect();
        let per_side = n.div_ceil(BLOCK);
        let blocks_high: Vec<bool> = (0..per_side * per_side).map(|_| rng.unit() < share).collect();
        let data = (0..n * n)
            .map(|i| {
                let is_high = match layout {
                    Layout::Scattered => rng.unit() < share,
                    Layout::Rows => rows_high[i / n],
                    Layout::Blocks => blocks_high[(i / n / BLOCK) * per_side + (i % n) / BLOCK],
                };
                if is_high {
                    high(p, k, at_least, rng)
                } else {
                    unit(p, k, rng)
                }
            })
            .collect();
        Matrix { rows: n, cols: n, data }
    };
    let a = make(k.div_ceil(2), rng);
    let b = make(k / 2, rng);
    (a, b)
}

fn main() {
    let args: Args = clap::Parser::parse();
    let (dev, ctx, stream) = cuda_device_or_exit();
    let n = args.size;
    println!("{:<6} {:<10} {:>6} {:>9} {:>10} {:>10} {:>11} {:>10}", "mod", "layout", "share", "skipped", "dense ms", "skip ms", "skip/dense", "Gprod/s");
    let mut rows = Vec::new();
    let mut rng = Rng::new(23);
    for (p, k) in MODULI {
        for layout in [Layout::Scattered, Layout::Rows, Layout::Blocks] {
            let mut crossover = None;
            for share in SHARES {
                let (a, b) = matrices(p, k, n, share, layout, &mut rng);
                // The skipped share, counted on the host on a corner of
                // the product (the whole would take minutes on one core).
                let corner = 64.min(n);
                let sub_a = Matrix { rows: corner, cols: n, data: a.data[..corner * n].to_vec() };
                let sub_b = Matrix { rows: n, cols: corner, data: (0..n * corner).map(|i| b.data[(i / corner) * n + i % corner]).collect() };
                let cert = reference(p, k, &sub_a, &sub_b);
                let skipped = cert.skipped.iter().map(|&s| s as f64).sum::<f64>() / (corner * corner * n) as f64;
                let (ta, tb, mut c) = match operands(p, k, &a, &b, &dev) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("error: {}", e);
                        std::process::exit(2);
                    }
                };
                let mut time = |form| {
                    let mut err = None;
                    let ms = time_ms(&ctx, &stream, 2, 7, || {
                        if let Err(e) = launch_product(form, p, &dev, &ta, &tb, &mut c) {
                            err.get_or_insert(e.to_string());
                        }
                    });
                    if let Some(e) = err {
                        eprintln!("error: {:?} launch: {}", form, e);
                        std::process::exit(2);
                    }
                    ms
                };
                let (dense, skip) = (time(Form::Dense), time(Form::Skip));
                let gprod = (n * n * n) as f64 / (skip * 1e-3) / 1e9;
                if skip < dense && crossover.is_none() {
                    crossover = Some(share);
                }
                println!("{:<6} {:<10} {:>6.2} {:>8.1}% {:>10.3} {:>10.3} {:>11.3} {:>10.1}", format!("{}^{}", p, k), layout.name(), share, skipped * 100.0, dense, skip, skip / dense, gprod);
                rows.push(serde_json::json!({"p": p, "k": k, "layout": layout.name(), "share": share, "skipped": skipped, "dense_ms": dense, "skip_ms": skip, "n": n}));
            }
            match crossover {
                Some(s) => println!("  crossover {}^{} {}: skipping was faster from share {:.2} on", p, k, layout.name(), s),
                None => println!("  crossover {}^{} {}: skipping was never faster", p, k, layout.name()),
            }
        }
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"device": dev.describe(), "size": n, "rows": rows});
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default()) {
            eprintln!("error: {}: {}", path, e);
            std::process::exit(2);
        }
    }
}
