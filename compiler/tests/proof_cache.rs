//! The persistent proof cache as a user meets it through `tokitaic verify`:
//! a second run reuses every outcome and says so in the report, an edited
//! kernel is proved again while its neighbours are not, and a cache that
//! cannot be used costs a warning, never a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tokitai-proof-cache-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn gelu_source() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops/gelu.tk")).unwrap()
}

/// `tokitaic verify FILE --report DIR/report --no-mutants` plus `args`.
fn verify(file: &Path, dir: &Path, args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_tokitaic"))
        .arg("verify")
        .arg(file)
        .arg("--report")
        .arg(dir.join("report"))
        .arg("--no-mutants")
        .args(args)
        .env_remove("TOKITAI_CACHE_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "verify failed:\n{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    o
}

/// Per kernel: (obligations proved, of which taken from the cache).
fn cached_per_kernel(dir: &Path) -> Vec<(String, usize, usize)> {
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("report/report.json")).unwrap()).unwrap();
    assert_eq!(r["schema_version"], tokitai_contracts::report::SCHEMA_VERSION);
    r["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let obs = k["obligations"].as_array().unwrap();
            let proved = obs.iter().filter(|o| o["status"] == "proved").count();
            let cached = obs.iter().filter(|o| o["cached"] == true).count();
            (k["name"].as_str().unwrap().to_string(), proved, cached)
        })
        .collect()
}

#[test]
fn a_warm_cache_reuses_every_solver_outcome_and_an_edit_reproves_only_its_kernel() {
    let dir = scratch("warm");
    let file = dir.join("gelu.tk");
    std::fs::write(&file, gelu_source()).unwrap();
    let cache = dir.join("cache");
    let cache_arg = ["--cache", cache.to_str().unwrap()];

    verify(&file, &dir, &cache_arg);
    let cold = cached_per_kernel(&dir);
    assert!(cold.iter().all(|(_, proved, cached)| *proved > 10 && *cached == 0), "a cold run reuses nothing: {:?}", cold);

    let o = verify(&file, &dir, &cache_arg);
    let warm = cached_per_kernel(&dir);
    // Everything but the structural checks (barriers, dtypes), which ask
    // no solver, comes from the cache; the outcomes are the same.
    for ((name, proved, cached), (_, cold_proved, _)) in warm.iter().zip(&cold) {
        assert_eq!(proved, cold_proved, "{}", name);
        assert!(*cached + 2 >= *proved && *cached > 10, "{}: {} of {} from the cache", name, cached, proved);
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("proof cache") && stderr.contains("0 computed"), "{}", stderr);
    let md = std::fs::read_to_string(dir.join("report/report.md")).unwrap();
    assert!(md.contains("earlier (cache)"), "the markdown report says where an outcome came from");

    // Edit the first kernel (a constant of its body): it is proved again,
    // the second, whose text moved but did not change, is not.
    let edited = gelu_source().replacen("0.044715 * v * v * v));\n        f16(", "0.0447151 * v * v * v));\n        f16(", 1);
    assert_ne!(edited, gelu_source());
    std::fs::write(&file, edited).unwrap();
    verify(&file, &dir, &cache_arg);
    let after = cached_per_kernel(&dir);
    let fwd = after.iter().find(|k| k.0 == "gelu_fwd").unwrap();
    let bwd = after.iter().find(|k| k.0 == "gelu_bwd").unwrap();
    let warm_bwd = warm.iter().find(|k| k.0 == "gelu_bwd").unwrap();
    assert_eq!(fwd.2, 0, "the edited kernel is proved again: {:?}", fwd);
    assert_eq!(bwd.2, warm_bwd.2, "its neighbour comes from the cache: {:?}", bwd);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_cache_proves_everything_and_writes_nothing() {
    let dir = scratch("off");
    let file = dir.join("gelu.tk");
    std::fs::write(&file, gelu_source()).unwrap();
    let home = dir.join("home");
    let o = Command::new(env!("CARGO_BIN_EXE_tokitaic"))
        .args(["verify", file.to_str().unwrap(), "--no-cache"])
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join("xdg"))
        .env_remove("TOKITAI_CACHE_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!home.exists(), "--no-cache wrote into the cache directory");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("from cache"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_environment_variable_names_the_cache() {
    let dir = scratch("env");
    let file = dir.join("gelu.tk");
    std::fs::write(&file, gelu_source()).unwrap();
    let cache = dir.join("from-env");
    let run = || Command::new(env!("CARGO_BIN_EXE_tokitaic")).args(["verify", file.to_str().unwrap()]).env("TOKITAI_CACHE_DIR", &cache).output().unwrap();
    assert!(run().status.success());
    assert!(cache.join("proofs.sqlite").exists());
    let second = run();
    assert!(String::from_utf8_lossy(&second.stdout).contains("from cache"), "{}", String::from_utf8_lossy(&second.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unusable_cache_directory_is_a_warning_not_a_failure() {
    let dir = scratch("unusable");
    let file = dir.join("gelu.tk");
    std::fs::write(&file, gelu_source()).unwrap();
    // A directory cannot be created under a regular file.
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let o = verify(&file, &dir, &["--cache", blocker.join("cache").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("warning") && stderr.contains("verifying without it"), "{}", stderr);
    let after = cached_per_kernel(&dir);
    assert!(after.iter().all(|(_, proved, cached)| *proved > 10 && *cached == 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_database_is_moved_aside_and_everything_proved_again() {
    let dir = scratch("damaged");
    let file = dir.join("gelu.tk");
    std::fs::write(&file, gelu_source()).unwrap();
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    // A truncated or overwritten database: not SQLite at all.
    std::fs::write(cache.join("proofs.sqlite"), vec![0xA5u8; 8192]).unwrap();
    let o = verify(&file, &dir, &["--cache", cache.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("not a readable database"), "{}", stderr);
    assert!(cache.join("proofs.sqlite.corrupt").exists());
    assert!(cached_per_kernel(&dir).iter().all(|(_, _, cached)| *cached == 0));
    // The fresh database works: the next run is warm.
    verify(&file, &dir, &["--cache", cache.to_str().unwrap()]);
    assert!(cached_per_kernel(&dir).iter().all(|(_, _, cached)| *cached > 10));
    let _ = std::fs::remove_dir_all(&dir);
}
