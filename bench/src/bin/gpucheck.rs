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
                let mut rng = Rng(0xC0FFEE ^ (seed << 40) ^ ((i as u64) << 20) ^ k.info.name.len() as u64);
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
        let mut rng = Rng(0xB16 ^ w.label.len() as u64);
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
