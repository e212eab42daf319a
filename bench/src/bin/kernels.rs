//! Time every workload of perf.md through the runtime on one GPU, with the
//! device's copy bandwidth measured in the same run, and the launch
//! overhead of the runtime against a bare cudarc launch.
//!
//! Usage: tokitai-bench-kernels [--json FILE] [--only TEXT...]. Prints a
//! table; the JSON holds every number (bench/report.py merges it with
//! PyTorch's).

use cudarc::driver::{CudaSlice, DevicePtr};
use std::time::Instant;
use tokitai_bench::{cuda_device_or_exit, time_ms, WORKLOADS};
use tokitai_runtime::check::{case_for, launch_on, tune_on, upload, Rng};
use tokitai_runtime::{kernels, Device};

/// Time every workload of perf.md on one NVIDIA GPU (needs one; `--help`
/// does not).
#[derive(clap::Parser)]
#[command(name = "tokitai-bench-kernels", version)]
struct Args {
    /// Write every number here as JSON (bench/report.py merges it with
    /// PyTorch's and Triton's).
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Only the workloads whose label contains one of the TEXTs (e.g.
    /// "gemm_f16 wg"), as bench/torch_ref.py and triton_ref.py take them.
    #[arg(long, value_name = "TEXT", num_args = 1..)]
    only: Vec<String>,
    /// Tune each workload first (time every proved candidate its launch
    /// admits, store the fastest in the device's tuning table), then time
    /// what a launch takes. Prints each workload's candidates.
    #[arg(long)]
    tune: bool,
    /// Write the tuner's findings here as Markdown (with `--tune`).
    #[arg(long, value_name = "FILE")]
    tune_report: Option<String>,
}

fn main() {
    let Args { json: json_path, only, tune, tune_report } = clap::Parser::parse();
    let (dev, ctx, stream) = cuda_device_or_exit();
    let Device::Cuda(cuda) = &dev else { unreachable!("cuda_device_or_exit returns a CUDA device") };

    // The ceiling: a 512 MiB device-to-device copy (bytes read + written).
    let bytes = 512usize << 20;
    let src: CudaSlice<u8> = stream.alloc_zeros(bytes).expect("alloc");
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(bytes).expect("alloc");
    let copy_ms = time_ms(&ctx, &stream, 3, 20, || stream.memcpy_dtod(&src, &mut dst).expect("copy"));
    let copy_gbs = 2.0 * bytes as f64 / (copy_ms * 1e-3) / 1e9;
    drop((src, dst));
    println!("device copy 512 MiB: {:.3} ms, {:.0} GB/s", copy_ms, copy_gbs);

    if let (true, Some(p)) = (tune, dev.tuning_table()) {
        println!("tuning table: {}", p.display());
    }
    let mut tuned_md = String::from("| workload | class | candidate | schedule | status | ms | chosen |\n|---|---|---|---|---|---:|---|\n");
    let mut rows = Vec::new();
    println!("{:<34} {:>10} {:>10} {:>8} {:>9}  ran", "workload", "ms", "GB/s", "% copy", "TFLOP/s");
    for w in WORKLOADS.iter().filter(|w| only.is_empty() || only.iter().any(|o| w.label.contains(o.as_str()))) {
        let k = kernels::by_name(w.kernel).expect("kernel exists");
        let mut rng = Rng::new(0xBE7C4 ^ w.label.len() as u64);
        let case = match case_for(k, &mut rng, w.dims) {
            Ok(c) => c,
            Err(e) => {
                println!("{:<34} not run: {}", w.label, e);
                rows.push(serde_json::json!({"label": w.label, "kernel": w.kernel, "error": e.to_string()}));
                continue;
            }
        };
        let mut tensors = upload(&dev, &case).expect("upload");
        let mut tuning = serde_json::Value::Null;
        if tune {
            match tune_on(&dev, k, &mut tensors, &case.scalars, 10) {
                Ok(t) => {
                    let class = tokitai_runtime::tune::class_text(k, &t.class);
                    for c in &t.candidates {
                        let ms = c.ms.map(|m| format!("{:.4}", m)).unwrap_or_else(|| "-".into());
                        let chosen = if c.name == t.choice { "**chosen**" } else if c.name == t.default { "default" } else { "" };
                        let status = if c.note.is_empty() { c.status.clone() } else { format!("{}: {}", c.status, c.note.replace('|', "\\|")) };
                        println!("    tune {:<28} {:<56} {:>9}  {} {}", c.name, c.schedule, ms, if c.status == "proved" { String::new() } else { status.chars().take(60).collect() }, chosen);
                        tuned_md.push_str(&format!("| {} | `{}` | `{}` | {} | {} | {} | {} |\n", w.label, class, c.name, c.schedule, status, ms, chosen));
                    }
                    tuning = serde_json::to_value(&t).unwrap_or_default();
                }
                Err(e) => println!("    tune failed: {}", e),
            }
        }
        // Bytes that must move: inputs once, outputs once, inouts twice.
        let moved: usize = k.info.tensors.iter().zip(&tensors).map(|(p, t)| t.size_bytes() * if p.role == "inout" { 2 } else { 1 }).sum();
        let mut err = None;
        let ms = time_ms(&ctx, &stream, 3, 20, || {
            if let Err(e) = launch_on(&dev, k, &mut tensors, &case.scalars) {
                err.get_or_insert(e.to_string());
            }
        });
        if let Some(e) = err {
            println!("{:<34} launch failed: {}", w.label, e);
            rows.push(serde_json::json!({"label": w.label, "kernel": w.kernel, "error": e}));
            continue;
        }
        let gbs = moved as f64 / (ms * 1e-3) / 1e9;
        let flops = if k.info.schedule.contains("contraction") { 2.0 * w.dims.iter().map(|(_, v)| *v as f64).product::<f64>() } else { 0.0 };
        let tflops = flops / (ms * 1e-3) / 1e12;
        // The schedule that ran: the kernel or the variant its dims chose.
        let ran = dev.chosen(k, &case.dims).name;
        println!("{:<34} {:>10.4} {:>10.0} {:>7.1}% {:>9.1}  {}", w.label, ms, gbs, 100.0 * gbs / copy_gbs, tflops, ran);
        rows.push(serde_json::json!({"label": w.label, "kernel": w.kernel, "ran": ran, "ms": ms, "bytes": moved, "gbs": gbs, "copy_share": gbs / copy_gbs, "tflops": tflops, "tuning": tuning}));
    }

    if let Some(p) = &tune_report {
        std::fs::write(p, &tuned_md).expect("write tuning report");
    }

    // Launch overhead: the runtime's checked launch against a bare cudarc
    // launch of the same function, host time per launch (no sync between).
    let k = kernels::by_name("gelu_fwd").expect("gelu_fwd");
    let mut rng = Rng::new(1);
    let case = case_for(k, &mut rng, &[("N", 1024)]).expect("case");
    let mut tensors = upload(&dev, &case).expect("upload");
    let n = 20000;
    launch_on(&dev, k, &mut tensors, &[]).expect("launch");
    dev.synchronize().expect("sync");
    let t = Instant::now();
    for _ in 0..n {
        launch_on(&dev, k, &mut tensors, &[]).expect("launch");
    }
    let runtime_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    dev.synchronize().expect("sync");
    let f = cuda.function(&k.primary()).expect("function");
    let x: CudaSlice<u16> = stream.alloc_zeros(1024).expect("alloc");
    let y: CudaSlice<u16> = stream.alloc_zeros(1024).expect("alloc");
    let (mut px, mut py, mut nn) = (x.device_ptr(&stream).0, y.device_ptr(&stream).0, 1024i32);
    // The kernel's last parameter: its observation words (null: the
    // monitor is off), where it observes its output.
    let mut obs = 0u64;
    let mut raw: Vec<*mut std::ffi::c_void> = vec![&mut px as *mut u64 as *mut _, &mut py as *mut u64 as *mut _, &mut nn as *mut i32 as *mut _];
    if !k.observes.is_empty() {
        raw.push(&mut obs as *mut u64 as *mut _);
    }
    let grid = (k.grid)(&[1024], cuda.max_blocks(k));
    let t = Instant::now();
    for _ in 0..n {
        unsafe { cudarc::driver::result::launch_kernel(f.cu_function(), (grid[0], grid[1], grid[2]), (k.block, 1, 1), 0, stream.cu_stream(), &mut raw) }.expect("launch");
    }
    let bare_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    dev.synchronize().expect("sync");
    println!("launch overhead: runtime {:.2} us per launch, bare cudarc {:.2} us (host time, {} launches)", runtime_us, bare_us, n);
    let doc = serde_json::json!({"device": dev.describe(), "copy_ms": copy_ms, "copy_gbs": copy_gbs, "workloads": rows, "launch_us": {"runtime": runtime_us, "bare_cudarc": bare_us}});
    if let Some(p) = json_path {
        std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap_or_default()).expect("write json");
    }
}
