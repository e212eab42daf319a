//! The MoE training benchmark and the CPU-vs-GPU agreement check (run on
//! the GPU machine): milliseconds per training step of our trainer at the
//! sizes of perf.md, and nano's loss curve on the CPU and on the GPU.
//!
//! Usage: tokitai-bench-moe [--device cuda:0] [--configs nano:128,nano:4096,tiny:4096]
//!        [--steps N] [--curve-steps N] [--contracts off,warn] [--json FILE]
//! (`--help` lists them). Exit status 0 when the curves agree, 1 when they
//! do not, 2 on errors (a bad flag included).

use std::time::Instant;
use tokitai_runtime::moe::config::Size;
use tokitai_runtime::moe::data::synth_quality;
use tokitai_runtime::moe::driver::default_hyper;
use tokitai_runtime::moe::model::{Dispatch, Kind};
use tokitai_runtime::moe::train::{Hyper, Trainer};
use tokitai_runtime::{monitor, Device};

/// `tokitai-train`'s defaults (AdamW, lr 1e-3, seed 42, ...) at this size.
fn hyper(steps: usize, batch: usize, dispatch: Dispatch, graphs: bool) -> Hyper {
    Hyper { steps, batch, dispatch, graphs, ..default_hyper() }
}

/// How a step is run: dispatch, and whether it is captured and replayed.
#[derive(Clone, Copy)]
struct Mode {
    dispatch: Dispatch,
    graphs: bool,
}

impl Mode {
    fn label(self) -> &'static str {
        match (self.dispatch, self.graphs) {
            (Dispatch::Sparse, _) => "sparse",
            (Dispatch::Dense, false) => "dense",
            (Dispatch::Dense, true) => "dense-graph",
        }
    }
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {}", e);
    std::process::exit(2);
}

/// The loss and gradient norm of each of `steps` steps of nano at batch
/// 128, and how many steps were replayed from a captured graph.
fn curve(dev: &Device, steps: usize, mode: Mode) -> (Vec<(f64, f64)>, usize) {
    let data = synth_quality(512, 42);
    let mut t = Trainer::new(Size::Nano, Kind::Moe, hyper(steps, 128, mode.dispatch, mode.graphs), dev).unwrap_or_else(|e| fail(e));
    let c = (0..steps).map(|_| t.step(&data).map(|s| (s.loss, s.grad_norm)).unwrap_or_else(|e| fail(e))).collect();
    (c, t.replays)
}

/// Milliseconds per training step at each configuration, and nano's loss
/// curve on the CPU against the device's. Exit status 0 when the curves
/// agree, 1 when they do not, 2 on errors.
#[derive(clap::Parser)]
#[command(name = "tokitai-bench-moe", version)]
struct Args {
    /// The device to time (`cuda:N`; `cpu` times the CPU backend).
    #[arg(long, default_value = "cuda:0")]
    device: String,
    /// SIZE:BATCH pairs to time, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_config, default_value = "nano:128,nano:4096,tiny:4096")]
    configs: Vec<(Size, usize)>,
    /// Timed steps per configuration (after 3 warm-up steps).
    #[arg(long, default_value_t = 20, value_parser = parse_positive)]
    steps: usize,
    /// Steps of the CPU-against-device loss curve.
    #[arg(long, default_value_t = 20, value_parser = parse_positive)]
    curve_steps: usize,
    /// Contract-monitor modes to time each configuration under,
    /// comma-separated (`off,warn` measures the monitor's cost); default:
    /// the environment's (`TOKITAI_CONTRACTS`, else warn).
    #[arg(long, value_delimiter = ',', value_parser = parse_monitor)]
    contracts: Vec<monitor::Mode>,
    /// Write every number here as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// After each configuration, each kernel's host time per timed step
    /// (on the CPU: where the step's time goes).
    #[arg(long)]
    profile: bool,
    /// After each eager configuration, three more steps with the device
    /// timeline on: each step's kernel time and idle gaps printed, and an
    /// SVG picture of them written into this folder.
    #[arg(long, value_name = "DIR")]
    timeline: Option<std::path::PathBuf>,
}

/// The kernels' host time per step, slowest first, and the time outside
/// launches (the trainer's own host work).
fn print_profile(label: &str, rows: &[(&'static str, tokitai_runtime::profile::KernelTime)], steps: usize, step_ms: f64) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3 / steps as f64;
    let mut in_launches = 0.0;
    println!("{:<28} profile, per step: kernel, launches, run ms, monitor ms, share of the step", label);
    for (name, t) in rows {
        in_launches += ms(t.dispatch) + ms(t.monitor);
        println!("    {:<26} {:>6} {:>9.3} {:>9.3} {:>6.1}%", name, t.launches / steps as u64, ms(t.dispatch), ms(t.monitor), 100.0 * (ms(t.dispatch) + ms(t.monitor)) / step_ms);
    }
    let outside = step_ms - in_launches;
    println!("    {:<26} {:>6} {:>9.3} {:>9} {:>6.1}%", "(outside launches)", "", outside, "", 100.0 * outside / step_ms);
}

/// Three steps of `t` with the device timeline on (untimed: the events
/// cost the host time): the report printed, the picture written.
fn record_timeline(dev: &Device, t: &mut Trainer, data: &tokitai_runtime::moe::data::Dataset, dir: &std::path::Path, label: &str) {
    dev.timeline_start().unwrap_or_else(|e| fail(e));
    for s in 1..=3 {
        dev.timeline_mark(&format!("step {}", s)).unwrap_or_else(|e| fail(e));
        t.step(data).unwrap_or_else(|e| fail(e));
    }
    let timeline = dev.timeline_finish().unwrap_or_else(|e| fail(e));
    println!("{:<28} device timeline:\n{}", label, timeline.report(12));
    std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(e));
    let path = dir.join(format!("{}.svg", label.replace([' ', '='], "_")));
    tokitai_runtime::cache::write_atomic(&path, timeline.svg().as_bytes()).unwrap_or_else(|e| fail(e));
    println!("{:<28} timeline picture: {}", label, path.display());
}

fn parse_config(s: &str) -> Result<(Size, usize), String> {
    let (size, batch) = s.split_once(':').ok_or_else(|| format!("`{}` is not SIZE:BATCH (e.g. tiny:4096)", s))?;
    let batch = batch.parse().ok().filter(|b| *b > 0).ok_or_else(|| format!("`{}`: the batch is not a positive integer", s))?;
    Ok((size.parse()?, batch))
}

fn parse_positive(s: &str) -> Result<usize, String> {
    s.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("`{}` is not a positive integer", s))
}

fn parse_monitor(s: &str) -> Result<monitor::Mode, String> {
    monitor::Mode::parse(s).ok_or_else(|| format!("`{}` is not off, warn or strict", s))
}

fn main() {
    let args: Args = clap::Parser::parse();
    let dev = Device::from_spec(&args.device).unwrap_or_else(|e| fail(e));
    let (steps, curve_steps) = (args.steps, args.curve_steps);
    println!("device: {}", dev.describe());
    let mut json = serde_json::Map::new();

    // The same run on the CPU (sparse, as `--dispatch auto` runs there) and
    // on the device as auto runs it there (dense, captured and replayed):
    // the loss curves agree.
    let graph = Mode { dispatch: Dispatch::Dense, graphs: true };
    let eager = Mode { dispatch: Dispatch::Dense, graphs: false };
    let (cpu, _) = curve(&Device::Cpu, curve_steps, Mode { dispatch: Dispatch::Sparse, graphs: false });
    let (gpu, replays) = curve(&dev, curve_steps, graph);
    let (gpu_eager, _) = curve(&dev, curve_steps, eager);
    let mut worst: f64 = 0.0;
    for (s, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
        let rel = (a.0 - b.0).abs() / a.0.abs().max(1e-12);
        worst = worst.max(if rel.is_nan() { f64::INFINITY } else { rel });
        println!("curve step {:>3}: cpu {:.6}  {} {:.6}  rel diff {:.2e}", s + 1, a.0, dev.location(), b.0, rel);
    }
    // f16 activations on two backends (different exp/tanh libraries, the
    // same fma order): a few 1e-3 relative, growing slowly with the steps.
    let agree = worst <= 2e-2;
    println!("curve: worst relative loss difference {:.3e} over {} steps: {}", worst, curve_steps, if agree { "agree" } else { "DISAGREE" });
    // Replaying the captured step must be the step: the same kernels in the
    // same order, so bit-identical losses and norms.
    // (A device without graphs runs the "graph" mode eagerly: nothing to replay.)
    let identical = gpu == gpu_eager && (replays + 1 == curve_steps || !dev.has_graphs());
    println!("graph replay: {} of {} steps replayed; losses and norms {} to launching every kernel", replays, curve_steps, if gpu == gpu_eager { "bit-identical" } else { "DIFFERENT" });
    json.insert("curve".into(), serde_json::json!({"cpu": cpu, "device": gpu, "device_eager": gpu_eager, "replays": replays, "worst_rel": worst, "agree": agree, "graph_identical": identical}));
    let agree = agree && identical;

    // Milliseconds per step (each step ends with the loss and norm read
    // back, so the device is idle between steps: wall time is step time).
    // The contract monitor's modes to time each configuration under
    // (`off,warn` measures its cost); else the environment's.
    let monitors: Vec<monitor::Mode> = if args.contracts.is_empty() { vec![monitor::mode()] } else { args.contracts.clone() };
    for &(size, batch) in &args.configs {
        let data = synth_quality(batch.max(512) * 2, 7);
        for (mode, contracts) in [Mode { dispatch: Dispatch::Sparse, graphs: false }, eager, graph].into_iter().flat_map(|m| monitors.iter().map(move |c| (m, *c))) {
            monitor::set_mode(contracts);
            // The peak is this configuration's own: the last one's memory
            // is freed once the stream reaches its frees, and what is
            // still held (the curves' data) is not counted.
            dev.synchronize().unwrap_or_else(|e| fail(e));
            dev.memory_peak_reset().unwrap_or_else(|e| fail(e));
            let held_before = dev.memory_in_use().unwrap_or_else(|e| fail(e)).unwrap_or(0);
            let mut t = Trainer::new(size, Kind::Moe, hyper(steps + 3, batch, mode.dispatch, mode.graphs), &dev).unwrap_or_else(|e| fail(e));
            let mut times = Vec::new();
            let mut last = 0.0;
            let mut probes_before = 0;
            let mut settle_before = (0.0, 0.0);
            for s in 0..steps + 3 {
                if s == 3 {
                    probes_before = monitor::probe_launches();
                    settle_before = monitor::settle_seconds();
                    if args.profile {
                        tokitai_runtime::profile::start();
                    }
                }
                let start = Instant::now();
                last = t.step(&data).unwrap_or_else(|e| fail(e)).loss;
                dev.synchronize().unwrap_or_else(|e| fail(e));
                if s >= 3 {
                    times.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
            let profile = args.profile.then(tokitai_runtime::profile::finish);
            let mean = times.iter().sum::<f64>() / times.len() as f64;
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            let label = if monitors.len() > 1 { format!("{} {} ours-{} contracts={}", size, batch, mode.label(), contracts.name()) } else { format!("{} {} ours-{}", size, batch, mode.label()) };
            // The monitor's probe launches per step: those each replay of
            // the captured step runs, else those launched one by one.
            let plan = t.captured_probes();
            let probes = plan.map_or(((monitor::probe_launches() - probes_before) / steps as u64) as usize, |p| p.probes());
            if let Some(p) = plan.filter(|p| p.probes() > 0) {
                println!("{:<28} the captured step's probes: {} launches, {} waits for them, {} f64 and {} i32 slots read back", label, p.probes(), p.joins(), p.slots().0, p.slots().1);
            }
            let settle = monitor::settle_seconds();
            let per_step_us = |now: f64, before: f64| (now - before) * 1e6 / steps as f64;
            println!("{:<28} {:>9.3} ms/step (median of {}, min {:.3}; last loss {:.5}; {} probe launches per step; monitor read-back {:.0} us and judging {:.0} us per step)", label, median, times.len(), times[0], last, probes, per_step_us(settle.0, settle_before.0), per_step_us(settle.1, settle_before.1));
            if let Some(rows) = &profile {
                print_profile(&label, rows, steps, mean);
            }
            if let Some(peak) = dev.memory_peak().unwrap_or_else(|e| fail(e)) {
                let mib = peak.saturating_sub(held_before) as f64 / (1 << 20) as f64;
                println!("{:<28} peak device memory {:.1} MiB (parameters, optimizer state, gradients and activations)", label, mib);
                json.insert(format!("{} peak MiB", label), serde_json::json!(mib));
            }
            json.insert(format!("{} probes", label), serde_json::json!(probes));
            json.insert(label.clone(), serde_json::json!(median));
            json.insert(format!("{} min", label), serde_json::json!(times[0]));
            if let (Some(dir), false) = (&args.timeline, mode.graphs) {
                record_timeline(&dev, &mut t, &data, dir, &label);
            }
            // The device's own time per step: the captured step replayed
            // back to back, nothing read in between.
            let start = Instant::now();
            if t.replay_captured(steps).unwrap_or_else(|e| fail(e)) {
                let replay = start.elapsed().as_secs_f64() * 1e3 / steps as f64;
                println!("{:<28} {:>9.3} ms/step (graph replays back to back, {} of them)", format!("{} replay-only", label), replay, steps);
                json.insert(format!("{} replay-only", label), serde_json::json!(replay));
            }
            // Its graphs go with it; then their arena's memory.
            drop(t);
            dev.release_graph_memory().unwrap_or_else(|e| fail(e));
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&serde_json::Value::Object(json)).unwrap_or_default()).unwrap_or_else(|e| fail(e));
    }
    std::process::exit(if agree { 0 } else { 1 });
}
