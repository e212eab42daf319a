//! The SQLite ledger dataset: a good ledger loads (first outcome per group,
//! clamping, a decision without an outcome skipped and counted), and every
//! kind of bad ledger gets an error naming the file, table, row and column.

use rusqlite::Connection;
use std::path::{Path, PathBuf};
use tokitai_runtime::moe::data::{load_ledger, DataSpec};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tokitai-ledger-{}-{}", tag, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cat(hot: usize) -> String {
    let v: Vec<String> = (0..74).map(|i| if i == hot { "1".into() } else { "0".into() }).collect();
    format!("[{}]", v.join(","))
}

fn num(v: f64) -> String {
    format!("[{}]", vec![v.to_string(); 22].join(","))
}

fn write_ledger(d: &Path, decisions: &[(i64, String, String)], outcomes: &[(i64, i64, &str, String)]) {
    let c = Connection::open(d.join("quality_decisions.db")).unwrap();
    c.execute_batch("CREATE TABLE quality_decisions (decision_group_id INTEGER, workflow_kind TEXT, stage TEXT, reason TEXT, host_key TEXT, recorded_at TEXT, categorical_json TEXT, numerical_json TEXT);").unwrap();
    for (id, c_json, n_json) in decisions {
        c.execute("INSERT INTO quality_decisions VALUES (?1, 'w', 's', 'r', 'h', '2026-01-01', ?2, ?3)", rusqlite::params![id, c_json, n_json]).unwrap();
    }
    let o = Connection::open(d.join("quality_outcomes.db")).unwrap();
    o.execute_batch("CREATE TABLE quality_outcomes (decision_group_id INTEGER, outcome_kind INTEGER, observed_at TEXT, metric_value REAL, confidence REAL, aux_metrics_json TEXT);").unwrap();
    for (id, kind, at, aux) in outcomes {
        o.execute("INSERT INTO quality_outcomes VALUES (?1, ?2, ?3, 0.5, 0.9, ?4)", rusqlite::params![id, kind, at, aux]).unwrap();
    }
}

fn aux(v: f64) -> String {
    format!("[{}]", vec![v.to_string(); 8].join(","))
}

#[test]
fn a_good_ledger_loads_with_skips_counted() {
    let d = dir("good");
    write_ledger(
        &d,
        &[(1, cat(3), num(500.0)), (2, cat(0), num(2000.0)), (3, cat(73), num(-5.0))],
        &[(1, 4, "2026-01-02", aux(0.25)), (1, 9, "2026-01-03", aux(0.9)), (3, 40, "2026-01-01", aux(7.0))],
    );
    let data = DataSpec::parse(d.to_str().unwrap()).unwrap().load(0).unwrap();
    assert_eq!((data.n, data.skipped), (2, 1));
    // Decision 1: the first outcome (kind 4), numericals 500/1000.
    assert_eq!(data.x[3], 1.0);
    assert_eq!(data.x[74], 0.5);
    assert_eq!(data.y[4], 1.0);
    assert_eq!(data.y[12], 0.25);
    // Decision 3: kind 40 clamped to 11, aux clamped to 1, numericals to 0.
    assert_eq!(data.y[20 + 11], 1.0);
    assert_eq!(data.y[20 + 12], 1.0);
    assert_eq!(data.x[96 + 74], 0.0);
}

#[test]
fn bad_ledgers_get_clear_errors() {
    let missing = std::env::temp_dir().join("tokitai-no-such-ledger");
    assert_eq!(load_ledger(&missing).unwrap_err().to_string(), format!("dataset directory {} does not exist", missing.display()));

    let d = dir("nofile");
    let e = load_ledger(&d).unwrap_err().to_string();
    assert_eq!(e, format!("dataset file {} does not exist", d.join("quality_decisions.db").display()));

    let d = dir("notable");
    Connection::open(d.join("quality_decisions.db")).unwrap().execute_batch("CREATE TABLE other (a INTEGER);").unwrap();
    Connection::open(d.join("quality_outcomes.db")).unwrap().execute_batch("CREATE TABLE other (a INTEGER);").unwrap();
    assert_eq!(load_ledger(&d).unwrap_err().to_string(), format!("{}: no table `quality_decisions`", d.join("quality_decisions.db").display()));

    let d = dir("json");
    write_ledger(&d, &[(7, "[1, 2".into(), num(1.0))], &[(7, 1, "t", aux(0.5))]);
    let e = load_ledger(&d).unwrap_err().to_string();
    assert!(e.contains("decision_group_id 7: column `categorical_json`: malformed JSON"), "{}", e);

    let d = dir("len");
    write_ledger(&d, &[(8, cat(0), "[1, 2, 3]".into())], &[(8, 1, "t", aux(0.5))]);
    let e = load_ledger(&d).unwrap_err().to_string();
    assert!(e.ends_with("decision_group_id 8: column `numerical_json`: expected an array of 22 numbers, got 3"), "{}", e);

    let d = dir("auxlen");
    write_ledger(&d, &[(9, cat(0), num(1.0))], &[(9, 1, "t", "[0.5]".into())]);
    let e = load_ledger(&d).unwrap_err().to_string();
    assert!(e.contains("table `quality_outcomes`, decision_group_id 9: column `aux_metrics_json`: expected an array of 8 numbers, got 1"), "{}", e);

    let d = dir("none");
    write_ledger(&d, &[(1, cat(0), num(1.0))], &[]);
    assert!(load_ledger(&d).unwrap_err().to_string().contains("no decision has an outcome (1 skipped)"));
}

/// The trainer runs on a ledger as on the synthetic data; a bad ledger is
/// refused before training with exit 2.
#[test]
fn the_trainer_trains_on_a_ledger_and_refuses_a_bad_one() {
    let d = dir("train");
    let decisions: Vec<(i64, String, String)> = (0..40).map(|i| (i, cat((i * 7 % 74) as usize), num((i * 25) as f64))).collect();
    let outcomes: Vec<(i64, i64, &str, String)> = (0..40).map(|i| (i, i % 12, "2026-01-02", aux((i % 5) as f64 / 4.0))).collect();
    write_ledger(&d, &decisions, &outcomes);
    let run = |dataset: &Path, out: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tokitai-train"))
            .args(["--size", "nano", "--steps", "3", "--batch", "16", "--quiet", "--dataset"])
            .arg(dataset)
            .arg("--checkpoint-dir")
            .arg(out)
            .output()
            .unwrap()
    };
    let out = run(&d, &d.join("run"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("steps_run=3 "));
    let bad = dir("train-bad");
    write_ledger(&bad, &[(1, "[1, 2".into(), num(1.0))], &[(1, 1, "2026-01-02", aux(0.5))]);
    let out = run(&bad, &bad.join("run"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--dataset") && err.contains("categorical_json"), "{}", err);
}
