//! The linear layer's three contractions on the CPU backend, at the shapes
//! a MoE step launches (one expert's share of a batch), in GFLOP/s, and
//! GELU forward and backward in ns an element: where a CPU step's time
//! goes, without the rest of the step; LayerNorm forward and backward
//! over nano's 128-column rows beside them.
//! `bench/torch_cpu_contractions.py` times `torch.matmul` on the same
//! shapes and thread count for the side-by-side figure.
//!
//! Usage: tokitai-bench-cpu-contractions [--reps N] [--shapes M:K:N,...] [--cold]

use std::time::Instant;
use tokitai_runtime::kernels::gelu::{gelu_bwd, gelu_fwd};
use tokitai_runtime::kernels::layernorm::{layernorm_bwd, layernorm_fwd};
use tokitai_runtime::kernels::linear::{linear_bwd_w, linear_bwd_x, linear_fwd};
use tokitai_runtime::{DType, Device, Tensor};

#[derive(clap::Parser)]
#[command(name = "tokitai-bench-cpu-contractions", version)]
struct Args {
    /// Timed repetitions of each contraction (after one warm-up).
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// M:K:N triples (x is M x K, w is K x N): defaults are one of four
    /// experts' rows at nano b4096 (2048 x 128 x 128), tiny b128 (64 x
    /// 2048 x 2048) and tiny b4096 (2048 x 2048 x 2048).
    #[arg(long, default_value = "2048:128:128,64:2048:2048,2048:2048:2048")]
    shapes: String,
    /// Operands from memory, not the caches, as in a training step: each
    /// launch reads its own copy of x, w and gy, cycling through enough
    /// copies (64 MiB and more) that a launch's operands have left the
    /// last-level cache since they were read.
    #[arg(long)]
    cold: bool,
}

/// A contraction's name and one launch of it.
type Timed<'a> = (&'static str, Box<dyn FnMut() + 'a>);

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {}", e);
    std::process::exit(2);
}

/// A tensor of small deterministic values (the bits do not matter here).
fn filled(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|i| ((i * 7919 % 2003) as f64 / 2003.0 - 0.5) * 0.25).collect();
    Tensor::from_f64_as(shape, DType::F16, &data).unwrap_or_else(|e| fail(e))
}

/// Median milliseconds of `reps` runs of `f` after one warm-up.
fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let dev = Device::Cpu;
    println!("{}", dev.describe());
    // GELU, the element-wise kernel a step spends most on (its tanh), at
    // 2^20 elements: nano b4096's hidden activations are 2^20 a layer.
    let n = 1usize << 20;
    let x = filled(&[n]);
    let mut y = Tensor::output(&[n], DType::F16, &dev).unwrap_or_else(|e| fail(e));
    let fwd = median_ms(args.reps, || gelu_fwd::launch(&dev, &x, &mut y).unwrap_or_else(|e| fail(e)));
    let bwd = median_ms(args.reps, || gelu_bwd::launch(&dev, &x, &x, &mut y).unwrap_or_else(|e| fail(e)));
    for (name, ms) in [("gelu_fwd", fwd), ("gelu_bwd", bwd)] {
        println!("{:<13} {:>21}  {:9.3} ms  {:7.2} ns an element", name, n, ms, ms * 1e6 / n as f64);
    }
    // LayerNorm over nano's rows (128 columns), the same 2^20 elements.
    let (r, c) = (n / 128, 128);
    let (x, gamma, beta) = (filled(&[r, c]), filled(&[c]), filled(&[c]));
    let out = |shape: &[usize], dt: DType| Tensor::output(shape, dt, &dev).unwrap_or_else(|e| fail(e));
    let (mut y, mut mean, mut rstd) = (out(&[r, c], DType::F16), out(&[r], DType::F32), out(&[r], DType::F32));
    let (mut gx, mut xhat) = (out(&[r, c], DType::F16), out(&[r, c], DType::F16));
    let fwd = median_ms(args.reps, || layernorm_fwd::launch(&dev, &x, &gamma, &beta, 1e-5, &mut y, &mut mean, &mut rstd).unwrap_or_else(|e| fail(e)));
    let bwd = median_ms(args.reps, || layernorm_bwd::launch(&dev, &x, &gamma, &mean, &rstd, &y, &mut gx, &mut xhat).unwrap_or_else(|e| fail(e)));
    for (name, ms) in [("layernorm_fwd", fwd), ("layernorm_bwd", bwd)] {
        println!("{:<13} {:>10} x {:>8}  {:9.3} ms  {:7.2} ns an element", name, r, c, ms, ms * 1e6 / n as f64);
    }
    for spec in args.shapes.split(',') {
        let dims: Vec<usize> = spec.split(':').map(|d| d.trim().parse().unwrap_or_else(|_| fail(format!("bad shape `{}`: want M:K:N", spec)))).collect();
        let [m, k, n] = dims[..] else { fail(format!("bad shape `{}`: want M:K:N", spec)) };
        let bytes = 2 * (m * k + k * n + m * n);
        let copies = if args.cold { (64usize << 20).div_ceil(bytes).max(2) } else { 1 };
        let xs: Vec<Tensor> = (0..copies).map(|_| filled(&[m, k])).collect();
        let ws: Vec<Tensor> = (0..copies).map(|_| filled(&[k, n])).collect();
        let gys: Vec<Tensor> = (0..copies).map(|_| filled(&[m, n])).collect();
        let b = filled(&[n]);
        let turn = std::cell::Cell::new(0usize);
        let next = || {
            let t = turn.get();
            turn.set((t + 1) % copies);
            t
        };
        let mut y = Tensor::output(&[m, n], DType::F16, &dev).unwrap_or_else(|e| fail(e));
        let mut gx = Tensor::output(&[m, k], DType::F16, &dev).unwrap_or_else(|e| fail(e));
        let mut gw = Tensor::output(&[k, n], DType::F16, &dev).unwrap_or_else(|e| fail(e));
        let flop = 2.0 * (m * k * n) as f64;
        let runs: [Timed; 3] = [
            ("linear_fwd", Box::new(|| {
                let t = next();
                linear_fwd::launch(&dev, &xs[t], &ws[t], &b, &mut y).unwrap_or_else(|e| fail(e))
            })),
            ("linear_bwd_x", Box::new(|| {
                let t = next();
                linear_bwd_x::launch(&dev, &gys[t], &ws[t], &mut gx).unwrap_or_else(|e| fail(e))
            })),
            ("linear_bwd_w", Box::new(|| {
                let t = next();
                linear_bwd_w::launch(&dev, &xs[t], &gys[t], &mut gw).unwrap_or_else(|e| fail(e))
            })),
        ];
        for (name, mut f) in runs {
            let ms = median_ms(args.reps, &mut f);
            println!("{:<13} {:>5} x {:>5} x {:>5}  {:9.3} ms  {:7.1} GFLOP/s{}", name, m, k, n, ms, flop / ms / 1e6, if args.cold { "  (cold)" } else { "" });
        }
    }
}
