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

/// Until the model lands (issue 5), a training run says so plainly.
#[test]
fn a_training_run_says_it_is_not_available_yet() {
    let (code, _, err) = train(&["--size", "nano", "--checkpoint-dir", tmp("real").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("only --dry-run runs"), "{}", err);
}
