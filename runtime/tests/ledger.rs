//! The SQLite ledger dataset: a good ledger loads (first outcome per group,
//! a decision without an outcome skipped and counted, out-of-range values
//! clamped under `clamp:DIR`), and every kind of bad ledger gets an error
//! naming the file, table, row and column.

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

/// An outcomes file with one good row (for a test of the decisions file).
fn write_ledger_outcomes_only(d: &Path) {
    let o = Connection::open(d.join("quality_outcomes.db")).unwrap();
    o.execute_batch("CREATE TABLE quality_outcomes (decision_group_id INTEGER, outcome_kind INTEGER, observed_at TEXT, metric_value REAL, confidence REAL, aux_metrics_json TEXT);").unwrap();
    o.execute("INSERT INTO quality_outcomes VALUES (1, 1, 't', 0.5, 0.9, ?1)", [aux(0.5)]).unwrap();
}

fn aux(v: f64) -> String {
    format!("[{}]", vec![v.to_string(); 8].join(","))
}

#[test]
fn a_good_ledger_loads_with_skips_counted() {
    let d = dir("good");
    write_ledger(
        &d,
        &[(1, cat(3), num(500.0)), (2, cat(0), num(1000.0)), (3, cat(73), num(0.0))],
        &[(1, 4, "2026-01-02", aux(0.25)), (1, 9, "2026-01-03", aux(0.9)), (3, 11, "2026-01-01", aux(1.0))],
    );
    let data = DataSpec::parse(d.to_str().unwrap()).unwrap().load(0).unwrap();
    assert_eq!((data.n, data.skipped), (2, 1));
    assert_eq!((data.x[3], data.x[74], data.y[4], data.y[12]), (1.0, 0.5, 1.0, 0.25));
    assert_eq!((data.y[20 + 11], data.y[20 + 12], data.x[96 + 74]), (1.0, 1.0, 0.0));
}

/// `clamp:DIR` reads a ledger as the older crate did: values outside their
/// ranges clamped into them, any nonzero categorical value read as 1.
#[test]
fn a_clamped_ledger_loads_as_the_older_crate_read_it() {
    let d = dir("clamped");
    let odd_cat = cat(3).replacen("1", "2.5", 1);
    write_ledger(
        &d,
        &[(1, odd_cat, num(500.0)), (2, cat(0), num(2000.0)), (3, cat(73), num(-5.0))],
        &[(1, 4, "2026-01-02", aux(0.25)), (1, 9, "2026-01-03", aux(0.9)), (3, 40, "2026-01-01", aux(7.0))],
    );
    let data = DataSpec::parse(&format!("clamp:{}", d.display())).unwrap().load(0).unwrap();
    assert_eq!(data.source, format!("clamp:{}", d.display()), "the source names the reading, so eval reads it the same way");
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

    // Values outside their documented ranges: refused, naming the row,
    // the column, the element and the value.
    type Case = (&'static str, (i64, String, String), (i64, i64, String), &'static str);
    let cases: [Case; 7] = [
        ("numhigh", (21, cat(1), num(1000.5)), (21, 2, aux(0.5)), "decision_group_id 21: column `numerical_json`: element 0 is 1000.5, outside [0, 1000]"),
        ("numneg", (22, cat(1), num(-0.25)), (22, 2, aux(0.5)), "decision_group_id 22: column `numerical_json`: element 0 is -0.25, outside [0, 1000]"),
        ("auxhigh", (23, cat(1), num(1.0)), (23, 2, aux(1.5)), "table `quality_outcomes`, decision_group_id 23: column `aux_metrics_json`: element 0 is 1.5, outside [0, 1]"),
        ("kind", (24, cat(1), num(1.0)), (24, 12, aux(0.5)), "decision_group_id 24: column `outcome_kind`: is 12, outside 0..=11"),
        ("kindneg", (25, cat(1), num(1.0)), (25, -1, aux(0.5)), "decision_group_id 25: column `outcome_kind`: is -1, outside 0..=11"),
        ("cat", (26, cat(1).replacen("1", "0.5", 1), num(1.0)), (26, 2, aux(0.5)), "decision_group_id 26: column `categorical_json`: element 1 is 0.5, not 0 or 1"),
        ("nan", (27, cat(1), num(1.0).replacen("1", "NaN", 1)), (27, 2, aux(0.5)), "decision_group_id 27: column `numerical_json`: malformed JSON"),
    ];
    for (tag, dec, (oid, kind, a), want) in cases {
        let d = dir(tag);
        write_ledger(&d, &[dec], &[(oid, kind, "t", a)]);
        let e = load_ledger(&d).unwrap_err().to_string();
        assert!(e.contains(want), "{}: {}", tag, e);
    }
    // An outcome_kind that is not an integer.
    let d = dir("kindtext");
    write_ledger(&d, &[(28, cat(1), num(1.0))], &[(28, 2, "t", aux(0.5))]);
    Connection::open(d.join("quality_outcomes.db")).unwrap().execute("UPDATE quality_outcomes SET outcome_kind = 'three'", []).unwrap();
    let e = load_ledger(&d).unwrap_err().to_string();
    assert!(e.contains("decision_group_id 28: column `outcome_kind`: is the text \"three\", not an integer outcome class"), "{}", e);
    // A column missing from the schema.
    let d = dir("schema");
    Connection::open(d.join("quality_decisions.db")).unwrap().execute_batch("CREATE TABLE quality_decisions (decision_group_id INTEGER, categorical_json TEXT);").unwrap();
    write_ledger_outcomes_only(&d);
    let e = load_ledger(&d).unwrap_err().to_string();
    assert!(e.starts_with(&d.join("quality_decisions.db").display().to_string()) && e.contains("numerical_json"), "{}", e);

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
    // Resuming the good run on a ledger with an out-of-range value: exit
    // 2 naming the row, and nothing of the run directory touched.
    let range = dir("train-range");
    write_ledger(&range, &[(5, cat(2), num(1e6))], &[(5, 1, "2026-01-02", aux(0.5))]);
    let files = |p: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file()).map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect();
        v.sort();
        v
    };
    let before = files(&d.join("run"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokitai-train"))
        .args(["--size", "nano", "--steps", "5", "--batch", "16", "--quiet", "--resume", "--dataset"])
        .arg(&range)
        .arg("--checkpoint-dir")
        .arg(d.join("run"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("decision_group_id 5: column `numerical_json`: element 0 is 1000000, outside [0, 1000]"), "{}", err);
    assert_eq!(files(&d.join("run")), before, "the run directory is as it was");
}
