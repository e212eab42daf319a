//! The trainer's command line: a dry run writes every output (arch.json
//! with its fingerprint, metrics.jsonl, a loadable checkpoint, the SUMMARY
//! line); every bad flag is refused with a message naming it and exit 2.

use std::path::PathBuf;
use std::process::Command;
use tokitai_runtime::moe::run::{Arch, Checkpoint};

fn train(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokitai-train")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tokitai-train-{}-{}", tag, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_dry_run_writes_every_output() {
    let dir = tmp("dry");
    let (code, out, err) = train(&["--dry-run", "--size", "nano", "--checkpoint-dir", dir.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{}", err);
    let summary = out.lines().last().unwrap();
    assert!(summary.starts_with("SUMMARY: model_size=nano total_params=195540 final_loss="), "{}", summary);
    assert!(summary.contains("steps_run=20 "), "{}", summary);
    let arch: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("arch.json")).unwrap()).unwrap();
    let fp = Arch::new(tokitai_runtime::moe::config::Size::Nano, 42, "moe", "softmax").fingerprint();
    assert_eq!(arch["fingerprint"], fp.as_str());
    assert!(summary.ends_with(&format!("fingerprint={}", fp)));
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 20);
    assert_eq!(rows[0]["dry_run"], true);
    assert_eq!(rows[19]["per_expert_share"].as_array().unwrap().len(), 4);
    let ckpt = Checkpoint::load(&dir.join("checkpoint.safetensors")).unwrap();
    assert!(ckpt.tensors.is_empty(), "a dry run's checkpoint has no weights");
    assert_eq!(ckpt.metadata["step"], "20");
}

#[test]
fn every_bad_flag_is_refused_with_its_name() {
    let cases: &[(&[&str], &str)] = &[
        (&["--batch", "0"], "--batch must be positive"),
        (&["--steps", "0"], "--steps must be positive"),
        (&["--lr", "-1"], "--lr must be positive and finite"),
        (&["--lr", "nan"], "--lr must be positive and finite"),
        (&["--momentum", "1"], "--momentum must be in [0, 1)"),
        (&["--router-lr-scale", "11"], "--router-lr-scale must be in [0, 10]"),
        (&["--weight-decay", "-0.5"], "--weight-decay must be finite and at least 0"),
        (&["--grad-clip", "0"], "--grad-clip must be positive and finite"),
        (&["--min-lr-ratio", "2"], "--min-lr-ratio must be in [0, 1]"),
        (&["--size", "huge"], "unknown size `huge`"),
        (&["--optimizer", "adam"], "invalid value 'adam'"),
        (&["--router", "random"], "invalid value 'random'"),
        (&["--device", "tpu"], "--device must be cpu, cuda[:N], hip[:N] or auto"),
        (&["--dataset", "synth:quality:0"], "`0` is not a positive sample count"),
        (&["--resume"], "--resume needs --checkpoint-dir"),
        (&["--dry-run", "--diagnose"], "cannot be combined"),
        (&["--batch", "many"], "invalid value 'many'"),
    ];
    for (args, want) in cases {
        let (code, _, err) = train(args);
        assert_eq!(code, 2, "{:?}: {}", args, err);
        assert!(err.contains(want), "{:?}: expected `{}` in:\n{}", args, want, err);
    }
}

#[test]
fn a_missing_ledger_is_a_clear_error() {
    let dir = tmp("ledger");
    let missing = dir.join("nowhere");
    let (code, _, err) = train(&["--dry-run", "--dataset", missing.to_str().unwrap(), "--checkpoint-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains(&format!("dataset directory {} does not exist", missing.display())), "{}", err);
}

#[test]
fn sgd_with_a_tiny_learning_rate_is_warned_about() {
    let dir = tmp("sgd");
    let (code, _, err) = train(&["--dry-run", "--size", "nano", "--optimizer", "sgd", "--lr", "0.001", "--checkpoint-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{}", err);
    assert!(err.contains("warning: SGD with --lr 0.001 (< 0.01)"), "{}", err);
}

fn metrics(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn nano(dir: &std::path::Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--size", "nano", "--quiet", "--checkpoint-dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    train(&args)
}

/// The curve of a run, step by step: loss, gradient norm, learning rate.
fn curve(rows: &[serde_json::Value]) -> Vec<(u64, f64, f64, f64)> {
    rows.iter().map(|r| (r["step"].as_u64().unwrap(), r["loss"].as_f64().unwrap(), r["grad_norm"].as_f64().unwrap(), r["lr"].as_f64().unwrap())).collect()
}

#[test]
fn nano_on_the_cpu_lowers_the_loss_and_writes_every_output() {
    let dir = tmp("nano");
    let (code, out, err) = nano(&dir, &["--dataset", "synth:quality:512", "--steps", "30"]);
    assert_eq!(code, 0, "{}", err);
    // Every launch inside a proved bound (issue 18): the monitor warns
    // about none, and nothing else is printed off a terminal.
    assert!(err.is_empty(), "no progress bar or warnings off a terminal: {}", err);
    let summary = out.lines().find(|l| l.starts_with("SUMMARY:")).unwrap();
    let contracts = out.lines().find(|l| l.starts_with("CONTRACTS: mode=warn launches=")).unwrap_or_else(|| panic!("{}", out));
    assert!(contracts.ends_with("(100.00%)"), "{}", contracts);
    // The same counts per kernel, for the report (`--run-coverage`).
    let run: tokitai_contracts::report::RunCoverage = serde_json::from_str(&std::fs::read_to_string(dir.join("contracts.json")).unwrap()).unwrap();
    let (launches, covered) = run.totals();
    assert!(contracts.contains(&format!("launches={} covered={} ", launches, covered)), "{} vs {:?}", contracts, run.totals());
    assert!(run.kernels.len() >= 15 && run.kernels.values().all(|k| k.launches > 0 && k.covered == k.launches), "{:?}", run);
    assert!(summary.starts_with("SUMMARY: model_size=nano total_params=195540 ") && summary.contains("steps_run=30 "), "{}", summary);
    let rows = metrics(&dir);
    assert_eq!(rows.len(), 30);
    let loss: Vec<f64> = rows.iter().map(|r| r["loss"].as_f64().unwrap()).collect();
    let last3 = loss[27..].iter().sum::<f64>() / 3.0;
    assert!(last3 < 0.6 * loss[0], "loss {} -> {} (last three)", loss[0], last3);
    for r in &rows {
        assert!(r["routing_accuracy"].as_f64().is_some() && r["per_expert_share"].as_array().unwrap().len() == 4);
    }
    let svg = std::fs::read_to_string(dir.join("loss.svg")).unwrap();
    assert!(svg.contains("<polyline"));
    let ckpt = Checkpoint::load(&dir.join("checkpoint.safetensors")).unwrap();
    assert_eq!(ckpt.metadata["step"], "30");
    assert!(ckpt.tensors.iter().any(|(n, _, _)| n == "router.weight"));
    assert!(ckpt.tensors.iter().any(|(n, _, _)| n == "optimizer.adamw.v"));
}

#[test]
fn resuming_reproduces_the_uninterrupted_run() {
    let whole = tmp("whole");
    let (code, _, err) = nano(&whole, &["--steps", "8", "--checkpoint-every", "0"]);
    assert_eq!(code, 0, "{}", err);
    let parts = tmp("parts");
    let (code, _, err) = nano(&parts, &["--steps", "8", "--stop-after", "3"]);
    assert_eq!(code, 0, "{}", err);
    assert_eq!(metrics(&parts).len(), 3);
    let (code, out, err) = nano(&parts, &["--steps", "8", "--resume"]);
    assert_eq!(code, 0, "{}", err);
    assert!(out.contains("steps_run=8 "), "{}", out);
    // The CPU backend is deterministic: the same numbers, bit for bit.
    assert_eq!(curve(&metrics(&parts)), curve(&metrics(&whole)));
    // SGD's momentum buffer resumes too.
    let opt = ["--optimizer", "sgd", "--lr", "0.05"];
    let (w, p) = (tmp("whole-sgd"), tmp("parts-sgd"));
    assert_eq!(nano(&w, &[&["--steps", "5"][..], &opt].concat()).0, 0);
    assert_eq!(nano(&p, &[&["--steps", "5", "--stop-after", "2"][..], &opt].concat()).0, 0);
    assert_eq!(nano(&p, &[&["--steps", "5", "--resume"][..], &opt].concat()).0, 0);
    assert_eq!(curve(&metrics(&p)), curve(&metrics(&w)));
}

#[test]
fn a_crash_while_writing_a_checkpoint_leaves_the_last_good_one() {
    let whole = tmp("crash-ref");
    assert_eq!(nano(&whole, &["--steps", "6", "--checkpoint-every", "0"]).0, 0);
    let dir = tmp("crash");
    // The process aborts half-way through writing step 4's checkpoint.
    let out = Command::new(env!("CARGO_BIN_EXE_tokitai-train"))
        .args(["--size", "nano", "--quiet", "--steps", "6", "--checkpoint-every", "2", "--checkpoint-dir", dir.to_str().unwrap()])
        .env("TOKITAI_CRASH_IN_CHECKPOINT", "4")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the injected crash happened");
    let ckpt = Checkpoint::load(&dir.join("checkpoint.safetensors")).expect("the last good checkpoint loads");
    assert_eq!(ckpt.metadata["step"], "2");
    let partial: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".tmp.")).collect();
    assert_eq!(partial.len(), 1, "the interrupted write is a temporary file beside it");
    // Resuming continues from step 2 and ends where the uninterrupted run did.
    let (code, _, err) = nano(&dir, &["--steps", "6", "--resume"]);
    assert_eq!(code, 0, "{}", err);
    assert_eq!(curve(&metrics(&dir)), curve(&metrics(&whole)));
}

#[test]
fn bad_runs_are_refused_with_a_clear_error() {
    let dir = tmp("bad");
    let d = dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--batch", "5000"], "--batch 5000 is more than the kernels admit: linear_bwd_w reduces over the batch and requires M <= 4096"),
        (&["--stop-after", "0"], "--stop-after must be positive"),
        (&["--resume"], "--resume"),
        (&["--device", "cuda:x"], "is not a device number"),
        (&["--dataset", "synth:nothing:5"], "--dataset"),
    ];
    let (code, _, err) = train(&["--size", "medium", "--model", "dense", "--checkpoint-dir", d]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("linear_fwd requires K <= 4096"), "{}", err);
    for (args, want) in cases {
        let (code, _, err) = nano(&dir, args);
        assert_eq!(code, 2, "{:?}: {}", args, err);
        assert!(err.contains(want), "{:?}: expected `{}` in:\n{}", args, want, err);
    }
    // A checkpoint of another architecture is not resumed.
    assert_eq!(nano(&dir, &["--steps", "2"]).0, 0);
    // Nor is a run replaced by a fresh one without saying so (issue 24):
    // the checkpoint and metrics stay as they were.
    let before = (std::fs::read(dir.join("checkpoint.safetensors")).unwrap(), std::fs::read(dir.join("metrics.jsonl")).unwrap());
    for args in [&["--steps", "3"][..], &["--steps", "3", "--dry-run"]] {
        let (code, _, err) = nano(&dir, args);
        assert_eq!(code, 2, "{:?}: {}", args, err);
        assert!(err.contains("holds a run") && err.contains("--resume") && err.contains("--overwrite"), "{}", err);
    }
    assert_eq!((std::fs::read(dir.join("checkpoint.safetensors")).unwrap(), std::fs::read(dir.join("metrics.jsonl")).unwrap()), before);
    let (code, _, err) = nano(&dir, &["--steps", "3", "--resume", "--overwrite"]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("cannot be used with"), "{}", err);
    let (code, _, err) = nano(&dir, &["--steps", "4", "--resume", "--seed", "7"]);
    assert_eq!(code, 2);
    assert!(err.contains("was written by architecture"), "{}", err);
    let (code, _, err) = nano(&dir, &["--steps", "4", "--resume", "--optimizer", "sgd", "--lr", "0.05"]);
    assert_eq!(code, 2);
    assert!(err.contains("the checkpoint's optimizer is adamw, not sgd"), "{}", err);
    // `--overwrite` starts afresh.
    let (code, _, err) = nano(&dir, &["--steps", "3", "--overwrite"]);
    assert_eq!(code, 0, "{}", err);
    assert_eq!(metrics(&dir).len(), 3);
}

/// `--device auto` takes a GPU when there is one, else the CPU (here).
#[test]
fn device_auto_falls_back_to_the_cpu() {
    let dir = tmp("auto");
    let (code, out, err) = nano(&dir, &["--steps", "2", "--device", "auto"]);
    assert_eq!(code, 0, "{}", err);
    assert!(out.contains("steps_run=2 "), "{}", out);
}

/// A diverging run stops at the step where it diverged (issue 24), names
/// the step and a tensor holding the non-finite value, exits 3, and keeps
/// the last good checkpoint as it was: `--resume` from it works.
#[test]
fn a_run_whose_loss_diverges_stops_and_keeps_the_last_good_checkpoint() {
    let dir = tmp("diverge");
    let wild = ["--lr", "1e3", "--warmup-steps", "0", "--grad-clip", "1e9", "--checkpoint-every", "1"];
    let (code, out, err) = nano(&dir, &[&["--steps", "12"][..], &wild].concat());
    assert_eq!(code, 3, "{}\n{}", out, err);
    assert!(!out.contains("SUMMARY:"), "no summary of a diverged run: {}", out);
    assert!(err.contains("the run diverged: ") && err.contains("at step ") || err.contains("after step "), "{}", err);
    assert!(err.contains("holds a non-finite value") || err.contains("is not finite") || err.contains("forward pass overflowed"), "{}", err);
    assert!(err.contains("the last good checkpoint, step "), "{}", err);
    // The kept checkpoint loads, is finite, and is the step the error names.
    let ckpt = Checkpoint::load(&dir.join("checkpoint.safetensors")).expect("the last good checkpoint loads");
    assert!(ckpt.tensors.iter().all(|(_, _, v)| v.iter().all(|x| x.is_finite())), "a non-finite checkpoint was written");
    assert!(err.contains(&format!("the last good checkpoint, step {}, is kept", ckpt.metadata["step"])), "{}", err);
    // Every metrics row written is of a step with a finite loss.
    assert!(metrics(&dir).iter().all(|r| r["loss"].as_f64().is_some_and(f64::is_finite)));
}

#[test]
fn diagnose_compares_one_step_with_the_f64_reference() {
    let (code, out, err) = train(&["--size", "nano", "--diagnose", "--batch", "16"]);
    assert_eq!(code, 0, "{}", err);
    assert!(out.contains("router.weight") && out.contains("experts.3.out.bias"), "{}", out);
    assert!(out.contains("verdict: fine"), "{}", out);
    assert!(out.contains("router top-2 disagreements"), "{}", out);
}

fn check_launches(dir: &std::path::Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokitai-check-launches")).arg(dir).output().unwrap();
    (out.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Issue 18: a strict run records a sample of its real launches, and every
/// one replays within the bound evaluated for it; a damaged recording is
/// named, and counts as a failure.
#[test]
fn recorded_launches_replay_within_their_bounds() {
    let dir = tmp("record");
    let rec = dir.join("launches");
    let (code, out, err) = nano(&dir, &["--steps", "4", "--contracts", "strict", "--record-launches", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{}{}", out, err);
    assert!(err.contains("recorded ") && err.contains("tokitai-check-launches"), "{}", err);
    let files: Vec<_> = std::fs::read_dir(&rec).unwrap().map(|e| e.unwrap().path()).collect();
    // Launches 1, 2 and 4 of each kernel that runs once a step.
    assert!(files.iter().any(|f| f.ends_with("adamw-000004.safetensors")), "{:?}", files);
    assert!(files.iter().any(|f| f.ends_with("linear_fwd-000001.safetensors")), "{:?}", files);
    let (code, report) = check_launches(&rec);
    assert_eq!(code, 0, "{}", report);
    let last = report.lines().last().unwrap();
    assert!(last.starts_with("CHECKED: device=host") && last.ends_with(&format!("launches={} within={} violations=0", files.len(), files.len())), "{}", last);
    // Damage one recording past its header.
    let victim = rec.join("adamw-000004.safetensors");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&victim, bytes).unwrap();
    let (code, report) = check_launches(&rec);
    assert_eq!(code, 1, "{}", report);
    assert!(report.lines().any(|l| l.starts_with("adamw-000004.safetensors") && l.contains("ERROR")), "{}", report);
    assert!(report.lines().last().unwrap().ends_with("violations=1"), "{}", report);
}

/// Nothing lost to a kill (issue 24, item 7): a run killed with SIGKILL
/// at 20 moments spread over its life always leaves a checkpoint that
/// loads (or none yet), and continuing it (`--resume`, or `--overwrite`
/// where no checkpoint was written) ends with the uninterrupted run's
/// metrics, bit for bit, on the CPU.
#[test]
fn a_run_killed_at_any_moment_resumes_to_the_same_metrics() {
    use std::time::Instant;
    let steps = ["--steps", "8", "--checkpoint-every", "1"];
    let whole = tmp("kill-ref");
    // A run's life: the shorter of two whole runs, so that a moment of
    // load on the machine during one does not put most kills past the
    // later runs' ends (seen in CI with the machine also building).
    let timed = |dir: &std::path::Path| {
        let started = Instant::now();
        assert_eq!(nano(dir, &steps).0, 0);
        started.elapsed()
    };
    let life = timed(&whole).min(timed(&tmp("kill-ref-again")));
    let reference = curve(&metrics(&whole));
    let (mut killed_running, mut resumed) = (0, 0);
    for i in 0..20u32 {
        let dir = tmp(&format!("kill-{}", i));
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokitai-train"))
            .args(["--size", "nano", "--quiet", "--checkpoint-dir", dir.to_str().unwrap()])
            .args(steps)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Moments from the start to past the end of a whole run.
        std::thread::sleep(life.mul_f64(f64::from(i) / 18.0));
        if child.try_wait().unwrap().is_none() {
            killed_running += 1;
        }
        child.kill().ok(); // SIGKILL on Unix
        child.wait().unwrap();
        let ckpt = dir.join("checkpoint.safetensors");
        let how = if ckpt.exists() {
            let c = Checkpoint::load(&ckpt).unwrap_or_else(|e| panic!("kill {}: the checkpoint left behind does not load: {}", i, e));
            assert!(c.tensors.iter().all(|(_, _, v)| v.iter().all(|x| x.is_finite())));
            resumed += 1;
            "--resume"
        } else {
            "--overwrite"
        };
        let (code, _, err) = nano(&dir, &[&steps[..], &[how]].concat());
        assert_eq!(code, 0, "kill {}: continuing with {} failed: {}", i, how, err);
        assert_eq!(curve(&metrics(&dir)), reference, "kill {}: continued with {}", i, how);
    }
    // The kills fell while the runs were running, some after a checkpoint.
    assert!(killed_running >= 10 && resumed >= 5, "{} kills while running, {} resumed from a checkpoint", killed_running, resumed);
}

/// Held-out evaluation (issue 24, item 1): synthetic held-out samples are
/// drawn after the training samples, so training is the same bit for bit
/// with or without them; they are evaluated every `--eval-every` steps and
/// after the last, into metrics.jsonl.
#[test]
fn held_out_samples_are_evaluated_without_changing_training() {
    let (with, without) = (tmp("val"), tmp("noval"));
    assert_eq!(nano(&with, &["--steps", "12", "--eval-every", "5"]).0, 0);
    assert_eq!(nano(&without, &["--steps", "12", "--val-samples", "0"]).0, 0);
    assert_eq!(curve(&metrics(&with)), curve(&metrics(&without)));
    let rows = metrics(&with);
    let evaluated: Vec<&serde_json::Value> = rows.iter().filter(|r| r.get("val_loss").is_some()).collect();
    assert_eq!(evaluated.iter().map(|r| r["step"].as_u64().unwrap()).collect::<Vec<_>>(), [5, 10, 12]);
    for r in evaluated {
        assert!(r["val_loss"].as_f64().is_some_and(|v| v.is_finite() && v > 0.0), "{}", r);
        assert!(r["val_routing_accuracy"].as_f64().is_some_and(|v| (0.0..=1.0).contains(&v)), "{}", r);
        let share: f64 = r["val_expert_share"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum();
        assert!((share - 1.0).abs() < 1e-9, "{}", r);
    }
    assert!(metrics(&without).iter().all(|r| r.get("val_loss").is_none()));
    let (code, _, err) = nano(&tmp("val-bad"), &["--val-samples", "5000"]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("--val-samples 5000"), "{}", err);
}

/// `tokitai-train eval` (issue 24, item 1): a saved model's loss, routing
/// accuracy and expert load on its own dataset or another one, as text or
/// JSON; bad input exits 2 naming it.
#[test]
fn eval_reports_a_saved_model_on_any_dataset() {
    let dir = tmp("eval");
    assert_eq!(nano(&dir, &["--steps", "5"]).0, 0);
    let d = dir.to_str().unwrap();
    let eval = |extra: &[&str]| train(&[&["eval", "--checkpoint-dir", d][..], extra].concat());
    let (code, out, err) = eval(&["--json"]);
    assert_eq!(code, 0, "{}", err);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{}: {}", e, out));
    assert_eq!(r["step"], 5);
    assert!(r["loss"].as_f64().is_some_and(|v| v.is_finite() && v > 0.0), "{}", r);
    assert!(r["routing_accuracy"].as_f64().is_some_and(|v| (0.0..=1.0).contains(&v)), "{}", r);
    let share: f64 = r["expert_share"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9, "{}", r);
    let (code, out, err) = eval(&["--dataset", "synth:quality:300"]);
    assert_eq!(code, 0, "{}", err);
    assert!(out.contains("(300 samples)") && out.contains("loss ") && out.contains("routing accuracy"), "{}", out);
    for (args, says) in [(&["--dataset", "synth:nothing:3"][..], "--dataset"), (&["--device", "cuda:x"], "--device")] {
        let (code, _, err) = eval(args);
        assert_eq!(code, 2, "{:?}: {}", args, err);
        assert!(err.contains(says), "{:?}: {}", args, err);
    }
    let (code, _, err) = train(&["eval", "--checkpoint-dir", tmp("eval-none").to_str().unwrap()]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("checkpoint.safetensors"), "{}", err);
}
