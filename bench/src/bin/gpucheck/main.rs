//! The GPU correctness suite (run on the GPU machine, not in CI): every
//! kernel the runtime ships, on random shapes of several sizes and random
//! inputs over its domain, outputs poisoned with NaN, against its exact f64
//! oracle within the declared tolerance.
//!
//! Usage: tokitai-gpucheck [--device cuda:0] [--json FILE] [--only TEXT] [--soundness N | --monitor]
//! Exit status 0 when every check passes, 1 when one fails, 2 on errors.
//!
//! `--soundness N` instead samples every kernel on at least N input values
//! (random and the domain's edges) and compares every output element with
//! the error bound the compiler derived (`KernelInfo::bound`, proved within
//! the tolerance; for a tolerance in launch-time magnitudes, the formula
//! at the case's own dims and magnitudes, as the contract monitor judges a
//! launch): a table of elements, violations, bound/observed and the
//! variants that ran (`--only TEXT`: the kernels whose name holds it).
//!
//! `--monitor` checks that the contract monitor reaches the same verdict on
//! the device (probe kernels) as on the host, and that the kernels'
//! observations of their outputs are the outputs' ranges (monitor.rs).

mod monitor;
mod padic;

use tokitai_runtime::check::{check, check_within, make_coherent, random_case, Rng};
use tokitai_runtime::{kernels, Device};

/// Every kernel the runtime ships, on the device, against its exact f64
/// oracle within its declared tolerance. Exit status 0 when every check
/// passes, 1 when one fails, 2 on errors (a bad flag included).
#[derive(clap::Parser)]
#[command(name = "tokitai-gpucheck", version)]
struct Args {
    /// The device to check (`cuda:N`).
    #[arg(long, default_value = "cuda:0")]
    device: String,
    /// Write every check here as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Only the kernels and workloads whose name contains TEXT (and no
    /// model check), e.g. for runs under compute-sanitizer.
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// No full-size workload checks (runs under compute-sanitizer).
    #[arg(long)]
    small: bool,
    /// Instead: sample every kernel on at least N inputs and compare each
    /// output element with the error bound the compiler derived.
    #[arg(long, value_name = "N", conflicts_with = "monitor", value_parser = clap::value_parser!(u64).range(1..))]
    soundness: Option<u64>,
    /// Instead: check that the contract monitor reaches the same verdict
    /// on the device as on the host.
    #[arg(long)]
    monitor: bool,
}

fn main() {
    let args: Args = clap::Parser::parse();
    let dev = match Device::from_spec(&args.device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}", e);
            std::process::exit(2);
        }
    };
    println!("device: {}", dev.describe());
    if args.monitor {
        let verdicts = monitor::run(&dev);
        let (checked, mismatches, errors) = monitor::observations(&dev);
        // Relation checks: some pairs must break it, or the comparison
        // shows nothing.
        let (pairs, broken, rel_mismatches, rel_errors) = monitor::relations(&dev);
        let relations_ok = pairs > broken && broken > 0 && rel_mismatches + rel_errors == 0;
        std::process::exit(if verdicts == 0 && checked > 0 && mismatches + errors == 0 && relations_ok { 0 } else { 1 });
    }
    if let Some(n) = args.soundness {
        std::process::exit(soundness(&dev, n, args.json.clone(), args.only.clone()));
    }
    // `--only <text>`: the kernels and workloads whose name holds it (and
    // no model check), for runs under compute-sanitizer.
    let only = args.only.clone();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let mut rows = Vec::new();
    let mut failed = 0;
    for k in kernels::all().into_iter().filter(|k| wanted(k.info.name)) {
        // The exact oracle runs on the CPU: keep contractions to sizes it
        // finishes quickly.
        let scales: &[i64] = if k.info.schedule.contains("contraction") { &[3, 61, 333] } else { &[3, 61, 333, 1500] };
        for (i, scale) in scales.iter().enumerate() {
            for seed in 0..2u64 {
                let mut rng = Rng::new(0xC0FFEE ^ (seed << 40) ^ ((i as u64) << 20) ^ k.info.name.len() as u64);
                let case = random_case(k, &mut rng, *scale);
                // A kernel whose `requires` admits no dims this small (a
                // sum of at least 128) is checked at the larger scales.
                if case.is_err() && i + 1 < scales.len() {
                    println!("{:<22} skip  scale {}: `requires` admits no dims this small", k.info.name, scale);
                    continue;
                }
                let result = case.and_then(|case| check(&dev, k, &case));
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
    // Tensor-core schedules take 16-byte vector loads (or bulk tensor
    // copies) only where every operand's rows are whole runs of 8 (the
    // last dims multiples of 8): ragged shapes that are (tiles not full,
    // vectors on) beside the random ones above (mostly vectors off). Also
    // for kernels whose variants read through tensor maps (`_ws`, taken
    // where `TOKITAI_FORCE` names it: K = 264 admits its guard).
    let on_unit = |k: &tokitai_runtime::KernelDef| k.info.schedule.contains("tensor-core") || k.variants.iter().any(|v| !v.tensor_maps.is_empty());
    for k in kernels::all().into_iter().filter(|k| wanted(k.info.name) && on_unit(k)) {
        for (i, shape) in [&[200i64, 136, 72][..], &[136, 264, 200], &[8, 128, 8]].iter().enumerate() {
            failed += !check_shape(&dev, k, shape, Rng::new(0x7EC7 ^ i as u64), "vector_loads", &mut rows) as usize;
        }
    }
    // Column sums (`<kernel>_col`, for launches of at least 256 columns):
    // ragged column tiles (C not a multiple of 16), rows fewer than a
    // group's chains, and the longest sums, beside the workloads below.
    let column_form = |k: &tokitai_runtime::KernelDef| k.variants.iter().any(|v| v.name.ends_with("_col")) && k.info.dims.len() == 2;
    for k in kernels::all().into_iter().filter(|k| wanted(k.info.name) && column_form(k)) {
        for (i, shape) in [&[1000i64, 1037][..], &[3, 1024], &[4096, 1025]].iter().enumerate() {
            failed += !check_shape(&dev, k, shape, Rng::new(0xC01 ^ i as u64), "column_sums", &mut rows) as usize;
        }
    }
    // Narrow outputs of long sums (`<kernel>_ks16`, `_ks32`,
    // `schedule::split_sum`):
    // the column dim at most 32 and the sum at least 64 (the variant's
    // guard names both), rows ragged against the 16-row tiles, sums
    // ragged against the 64-deep slabs, a single column.
    for k in kernels::all().into_iter().filter(|k| wanted(k.info.name)) {
        let Some(split) = k.variants.iter().find(|v| v.name.contains("_ks")) else { continue };
        let (Some((sum, ..)), Some((cols, _))) = (split.guard, split.guard_also) else { continue };
        for (i, (rows_n, sum_n, cols_n)) in [(1000i64, 2048i64, 20i64), (37, 100, 3), (333, 64, 32), (17, 1000, 1)].into_iter().enumerate() {
            let shape: Vec<i64> = (0..k.info.dims.len()).map(|d| if d == sum { sum_n } else if d == cols { cols_n } else { rows_n }).collect();
            // A shorter sum than the kernel itself admits (`gemm_f16`:
            // K >= 128) is not a case of it.
            if let Err(why) = (k.requires)(&shape, &[]) {
                println!("{:<22} skip  dims {:?}: {}", k.info.name, shape, why);
                continue;
            }
            failed += !check_shape(&dev, k, &shape, Rng::new(0x5B1 ^ i as u64), "split_sums", &mut rows) as usize;
        }
    }
    // One check per benchmark workload at its full size (contractions at
    // 1024^3: their exact oracle runs on the CPU).
    // (`--small`: none, for runs under compute-sanitizer.)
    let small = args.small;
    for w in tokitai_bench::WORKLOADS.iter().filter(|w| wanted(w.label) && !small) {
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
    let models = if only.is_some() { &[][..] } else { &[(tokitai_runtime::moe::config::Size::Nano, 128usize), (tokitai_runtime::moe::config::Size::Tiny, 512)][..] };
    for &(size, batch) in models {
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
    // The p-adic products against the host's dense product (adversarial
    // inputs the random cases above almost never draw).
    if wanted("padic") {
        for (label, ok) in padic::run(&dev, args.small) {
            failed += !ok as usize;
            rows.push(serde_json::json!({"kernel": label, "passed": ok}));
        }
    }
    let total = rows.len();
    println!("\n{} of {} checks passed on {}", total - failed, total, dev.describe());
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"device": dev.describe(), "checks": rows, "passed": total - failed, "total": total});
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default()) {
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

/// The kernels of examples/ops (read from the working tree) with their
/// schedules for the runtime's target: the kernel and every variant, since
/// a launch may run any of them.
fn schedules() -> Vec<(String, Vec<(tokitai_compiler::tir::Kernel, tokitai_compiler::kir::KernelIr)>)> {
    use tokitai_compiler::{driver, schedule, span::SourceFile, target::Target};
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("examples/ops") else { return out };
    let mut files: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    files.sort();
    let target = Target::default_cuda();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        let Some(program) = driver::check_source(&SourceFile::new(f.display().to_string(), text)).program else { continue };
        let Ok(irs) = schedule::schedule_program(&program, &target) else { continue };
        for (k, ir) in program.kernels.into_iter().zip(irs) {
            // Each with the kernel as it is proved (a guarded variant's
            // `requires` holds its guard).
            let mut all: Vec<_> = schedule::schedule_variants(&k, &target, &ir).unwrap_or_default().into_iter().map(|v| (v.kernel(&k).into_owned(), v.ir)).collect();
            all.insert(0, (k.clone(), ir));
            out.push((k.name.clone(), all));
        }
    }
    out
}

/// The bound of each output at these dims for the schedule the runtime
/// launches there (`launched`, by name); the largest over the kernel's
/// schedules if none has that name.
fn bounds_at(schedules: &[(tokitai_compiler::tir::Kernel, tokitai_compiler::kir::KernelIr)], dims: &[i64], launched: &str) -> Vec<(String, f64, f64)> {
    use tokitai_compiler::accuracy::{analyze_at, envelope_of};
    let chosen: Vec<_> = schedules.iter().filter(|(_, ir)| ir.name == launched).map(|(k, ir)| analyze_at(k, ir, dims)).collect();
    envelope_of(&if chosen.is_empty() { schedules.iter().map(|(k, ir)| analyze_at(k, ir, dims)).collect() } else { chosen })
}

/// Every kernel on at least `min_inputs` input values: elements compared,
/// elements above the bound derived for their launch's own dims (the
/// stronger test; the kernel's envelope `KernelInfo::bound` where the
/// source is not at hand), and the bound over the observed error at the
/// element closest to its bound (the tightness).
fn soundness(dev: &Device, min_inputs: u64, json: Option<String>, only: Option<String>) -> i32 {
    let sources = schedules();
    println!("error analysis at each launch's dims for {} kernels of examples/ops", sources.len());
    let mut rows = Vec::new();
    let mut violations_total = 0usize;
    println!("{:<22} {:>10} {:>10} {:>10} {:>16}", "kernel", "inputs", "elements", "violations", "bound/observed");
    for k in kernels::all() {
        // A bound in launch-time magnitudes (issue 18) has no fixed
        // envelope: each case is judged by it at its own dims and
        // magnitudes, as the contract monitor judges a launch.
        let magnitudes = !k.info.tolerance_formula.is_empty();
        if (k.info.bound.is_empty() && !magnitudes) || only.as_deref().is_some_and(|o| !k.info.name.contains(o)) {
            continue;
        }
        // Contractions up to 640: outputs of 33 and more 64 x 64 tiles and
        // sums of 192 and more, where the matrix-unit variants run.
        let scales: &[i64] = if k.info.schedule.contains("contraction") { &[61, 200, 333, 640] } else { &[61, 333, 1500, 4000] };
        let (mut inputs, mut elements, mut over, mut worst, mut cases) = (0u64, 0u64, 0usize, 0.0f64, 0u64);
        let mut worst_text = String::new();
        let mut error = None;
        // The kernel and variants the cases ran (each schedule sampled).
        let mut ran = std::collections::BTreeSet::new();
        let mut unusable = std::collections::BTreeSet::new();
        while inputs < min_inputs && cases < 20_000 {
            let scale = scales[cases as usize % scales.len()];
            if unusable.contains(&scale) {
                cases += 1;
                continue;
            }
            let mut rng = Rng::new(0x50_0D ^ (cases << 24) ^ k.info.name.len() as u64);
            cases += 1;
            let case = match random_case(k, &mut rng, scale) {
                // Every third case, from the second on (a kernel with large
                // cases has only a few), with whole tensors at one edge.
                Ok(mut c) if cases % 3 == 2 => {
                    make_coherent(k, &mut rng, &mut c);
                    c
                }
                Ok(c) => c,
                // A scale whose dims the `requires` rules out (gemm_f16's
                // K >= 128 at 61) is skipped; an error only when none is
                // left.
                Err(e) => {
                    unusable.insert(scale);
                    if unusable.len() == scales.len() {
                        error = Some(e.to_string());
                        break;
                    }
                    continue;
                }
            };
            let drawn: u64 = case.tensors.iter().zip(k.info.tensors).filter(|(_, t)| t.role != "output").map(|((shape, _), _)| shape.iter().product::<usize>() as u64).sum::<u64>() + case.scalars.len() as u64;
            let chosen = dev.chosen(k, &case.dims).name;
            ran.insert(chosen);
            let own = if magnitudes { None } else { sources.iter().find(|(name, _)| name == k.info.name).map(|(_, irs)| bounds_at(irs, &case.dims, chosen)) };
            let result = match &own {
                Some(b) => {
                    let b: Vec<(&str, f64, f64)> = b.iter().map(|(n, a, r)| (n.as_str(), *a, *r)).collect();
                    check_within(dev, k, &case, &b)
                }
                None => check(dev, k, &case),
            };
            match result {
                Ok(out) => {
                    inputs += drawn;
                    elements += out.elements as u64;
                    over += out.over;
                    if out.worst_ratio > worst {
                        worst = out.worst_ratio;
                        worst_text = out.worst.clone();
                    }
                }
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
        violations_total += over + error.is_some() as usize;
        let tight = if worst > 0.0 { format!("{:.3}", 1.0 / worst) } else { "no error".into() };
        match &error {
            Some(e) => println!("{:<22} ERROR {}", k.info.name, e),
            None => println!("{:<22} {:>10} {:>10} {:>10} {:>16}  ran {}{}", k.info.name, inputs, elements, over, tight, ran.iter().copied().collect::<Vec<_>>().join(", "), if over > 0 { format!("; {}", worst_text) } else { String::new() }),
        }
        rows.push(serde_json::json!({"kernel": k.info.name, "inputs": inputs, "elements": elements, "violations": over, "bound_over_observed": if worst > 0.0 { serde_json::json!(1.0 / worst) } else { serde_json::json!(null) }, "worst": worst_text, "error": error, "ran": ran.iter().collect::<Vec<_>>(), "bound": if magnitudes { "tolerance formula at the case's magnitudes" } else { "derived at the case's dims" }}));
    }
    println!("\n{} kernels sampled on {}; {} violations", rows.len(), dev.describe(), violations_total);
    if let Some(path) = json {
        let doc = serde_json::json!({"device": dev.describe(), "min_inputs": min_inputs, "kernels": rows, "violations": violations_total});
        if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap_or_default()) {
            eprintln!("error: {}: {}", path, e);
            return 2;
        }
    }
    if violations_total == 0 { 0 } else { 1 }
}

/// Check `k` at `shape` (its dims in order), printing a line and adding a
/// row tagged `tag` (what the shape exercises); whether it passed.
fn check_shape(dev: &Device, k: &tokitai_runtime::KernelDef, shape: &[i64], mut rng: Rng, tag: &str, rows: &mut Vec<serde_json::Value>) -> bool {
    let named: Vec<(&str, i64)> = k.info.dims.iter().zip(shape).map(|(d, v)| (*d, *v)).collect();
    match tokitai_runtime::check::case_for(k, &mut rng, &named).and_then(|case| check(dev, k, &case)) {
        Ok(out) => {
            let ok = out.passed();
            println!("{:<22} {:<5} dims {:<28} elements {:>9}  worst/tol {:>8.3}  {}", out.kernel, if ok { "ok" } else { "FAIL" }, format!("{:?}", out.dims), out.elements, out.worst_ratio, if ok { format!("({})", tag.replace('_', " ")) } else { out.worst.clone() });
            rows.push(serde_json::json!({"kernel": out.kernel, "dims": out.dims, "elements": out.elements, "worst_ratio": out.worst_ratio, "passed": ok, tag: true}));
            ok
        }
        Err(e) => {
            println!("{:<22} ERROR {}", k.info.name, e);
            rows.push(serde_json::json!({"kernel": k.info.name, "error": e.to_string(), "passed": false}));
            false
        }
    }
}
