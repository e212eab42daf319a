//! The GPU correctness suite (run on the GPU machine, not in CI): every
//! kernel the runtime ships, on random shapes of several sizes and random
//! inputs over its domain, outputs poisoned with NaN, against its exact f64
//! oracle within the declared tolerance.
//!
//! Usage: tokitai-gpucheck [--device cuda:0] [--json FILE]
//! Exit status 0 when every check passes, 1 when one fails, 2 on errors.

use tokitai_runtime::check::{check, random_case, Rng};
use tokitai_runtime::{kernels, Device};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let dev = match Device::from_spec(&opt("--device").unwrap_or_else(|| "cuda:0".into())) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}", e);
            std::process::exit(2);
        }
    };
    println!("device: {}", dev.describe());
    let mut rows = Vec::new();
    let mut failed = 0;
    for k in kernels::all() {
        // The exact oracle runs on the CPU: keep contractions to sizes it
        // finishes quickly.
        let scales: &[i64] = if k.info.schedule == "contraction" { &[3, 61, 333] } else { &[3, 61, 333, 1500] };
        for (i, scale) in scales.iter().enumerate() {
            for seed in 0..2u64 {
                let mut rng = Rng::new(0xC0FFEE ^ (seed << 40) ^ ((i as u64) << 20) ^ k.info.name.len() as u64);
                let result = random_case(k, &mut rng, *scale).and_then(|case| check(&dev, k, &case));
                match result {
                    Ok(out) => {
                        let ok = out.passed();
                        failed += !ok as usize;
                        println!("{:<22} {:<5} dims {:<28} elements {:>9}  worst/tol {:>8.3}  {}", out.kernel, if ok { "ok" } else { "FAIL" }, format!("{:?}", out.dims), out.elements, out.worst_ratio, if ok { String::new() } else { out.worst.clone() });
                        rows.push(serde_json::json!({"kernel": out.kernel, "dims": out.dims, "elements": out.elements, "worst_ratio": if out.worst_ratio.is_finite() { serde_json::json!(out.worst_ratio) } else { serde_json::json!("inf") }, "passed": ok, "worst": out.worst}));
                    }
                    Err(e) => {
                        failed += 1;
                        println!("{:<22} ERROR {}", k.info.name, e);
                        rows.push(serde_json::json!({"kernel": k.info.name, "error": e.to_string(), "passed": false}));
                    }
                }
            }
        }
    }
    // One check per benchmark workload at its full size (contractions at
    // 1024^3: their exact oracle runs on the CPU).
    for w in tokitai_bench::WORKLOADS {
        let Some(k) = kernels::by_name(w.kernel) else { continue };
        let dims: Vec<(&str, i64)> = if k.info.schedule == "contraction" { w.dims.iter().map(|(n, _)| (*n, 1024)).collect() } else { w.dims.to_vec() };
        if k.info.schedule == "contraction" && rows.iter().any(|r| r["kernel"] == k.info.name && r["large"] == true) {
            continue;
        }
        let mut rng = Rng::new(0xB16 ^ w.label.len() as u64);
        match tokitai_runtime::check::case_for(k, &mut rng, &dims).and_then(|case| check(&dev, k, &case)) {
            Ok(out) => {
                let ok = out.passed();
                failed += !ok as usize;
                println!("{:<22} {:<5} dims {:<28} elements {:>9}  worst/tol {:>8.3}  {}", out.kernel, if ok { "ok" } else { "FAIL" }, format!("{:?}", out.dims), out.elements, out.worst_ratio, if ok { String::new() } else { out.worst.clone() });
                rows.push(serde_json::json!({"kernel": out.kernel, "dims": out.dims, "elements": out.elements, "worst_ratio": if out.worst_ratio.is_finite() { serde_json::json!(out.worst_ratio) } else { serde_json::json!("inf") }, "passed": ok, "worst": out.worst, "large": true}));
            }
            Err(e) => {
                failed += 1;
                println!("{:<22} ERROR {}", k.info.name, e);
                rows.push(serde_json::json!({"kernel": k.info.name, "error": e.to_string(), "passed": false, "large": true}));
            }
        }
    }
    // The MoE forward pass (nano and tiny, sparse and dense dispatch) on
    // this device against the same model on the CPU backend.
    for (size, batch) in [(tokitai_runtime::moe::config::Size::Nano, 128usize), (tokitai_runtime::moe::config::Size::Tiny, 512)] {
        match model_check(&dev, size, batch) {
            Ok((worst, routing_diff)) => {
                let ok = worst <= 2e-2 && routing_diff * 50 <= batch;
                failed += !ok as usize;
                println!("{:<22} {:<5} {} batch {}: max |device - cpu| {:.2e} over outputs of rows routed alike; {} rows routed differently (f16 near-ties)", "moe forward", if ok { "ok" } else { "FAIL" }, size, batch, worst, routing_diff);
                rows.push(serde_json::json!({"kernel": format!("moe forward {} b{}", size, batch), "max_abs_diff": worst, "rows_routed_differently": routing_diff, "passed": ok}));
            }
            Err(e) => {
                failed += 1;
                println!("moe forward ERROR {}", e);
                rows.push(serde_json::json!({"kernel": "moe forward", "error": e.to_string(), "passed": false}));
            }
        }
    }
    let total = rows.len();
    println!("\n{} of {} checks passed on {}", total - failed, total, dev.describe());
    if let Some(path) = opt("--json") {
        let doc = serde_json::json!({"device": dev.describe(), "checks": rows, "passed": total - failed, "total": total});
        if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap_or_default()) {
            eprintln!("error: {}: {}", path, e);
            std::process::exit(2);
        }
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

/// The nano/tiny forward pass on `dev` and on the CPU, sparse and dense:
/// the largest output difference over rows both routed alike, and how many
/// rows were routed differently.
fn model_check(dev: &Device, size: tokitai_runtime::moe::config::Size, batch: usize) -> tokitai_runtime::Result<(f64, usize)> {
    use tokitai_runtime::moe::config::{INPUT_DIM, OUTPUT_DIM};
    use tokitai_runtime::moe::model::{Dispatch, Kind, Model};
    use tokitai_runtime::{DType, Tensor};
    let data = tokitai_runtime::moe::data::synth_quality(batch, 11);
    let x: Vec<f64> = data.x.iter().map(|v| *v as f64).collect();
    let x_cpu = Tensor::from_f64_as(&[batch, INPUT_DIM], DType::F16, &x)?;
    let x_dev = x_cpu.to_device(dev)?;
    let cpu = Model::init(size, Kind::Moe, 3, &Device::Cpu)?.forward(&Device::Cpu, &x_cpu, Dispatch::Sparse)?;
    let model = Model::init(size, Kind::Moe, 3, dev)?;
    let mut worst: f64 = 0.0;
    let mut routed_differently = 0;
    let cpu_routes = cpu.routes()?;
    for dispatch in [Dispatch::Sparse, Dispatch::Dense] {
        let f = model.forward(dev, &x_dev, dispatch)?;
        dev.synchronize()?;
        let (a, b) = (f.y.to_f64_vec()?, cpu.y.to_f64_vec()?);
        let routes = f.routes()?;
        let route = |rs: &Option<(Vec<i32>, Vec<i32>)>, r: usize| rs.as_ref().map(|(p, q)| (p[r], q[r]));
        for r in 0..batch {
            if route(&routes, r) != route(&cpu_routes, r) {
                routed_differently += 1;
                continue;
            }
            for c in 0..OUTPUT_DIM {
                let d = (a[r * OUTPUT_DIM + c] - b[r * OUTPUT_DIM + c]).abs();
                worst = if d.is_nan() { f64::INFINITY } else { worst.max(d) };
            }
        }
    }
    Ok((worst, routed_differently))
}
