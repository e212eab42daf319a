//! `tokitaic` as scripts see it: outputs, messages and exit codes.

use std::path::Path;
use std::process::Command;

/// `tokitaic` with a proof cache of this test process's own (not the
/// user's cache directory).
fn tokitaic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tokitaic"));
    c.env("TOKITAI_CACHE_DIR", std::env::temp_dir().join(format!("tokitaic-cli-cache-{}", std::process::id())));
    c
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops").join(name).display().to_string()
}

#[test]
fn build_writes_kernels_bindings_and_a_manifest() {
    let out = std::env::temp_dir().join(format!("tokitaic-cli-{}", std::process::id()));
    let o = tokitaic().args(["build", &example("moe.tk"), "-o"]).arg(&out).args(["--target", "hip-gfx90a"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for k in ["top2", "gather_rows", "combine2"] {
        let hip = std::fs::read_to_string(out.join("kernels").join(format!("{}.hip", k))).unwrap();
        assert!(hip.contains(&format!("__global__ void __launch_bounds__(256) {}(", k)));
    }
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["target"], "hip-gfx90a");
    // Ten kernels, two block-size variants of each of the four row
    // reductions (router_softmax, combine2_bwd_w, combine_dense_bwd_w,
    // router_bwd), and router_softmax's row cached in registers (E <= 64:
    // one 128-thread shape; router_bwd's runs would not meet its declared
    // tolerance, the combines' reads are indirect); and the observing twin
    // of each row reduction and of each of its keyed variants (13).
    assert_eq!(manifest["kernels"].as_array().unwrap().len(), 32);
    assert!(manifest["kernels"].as_array().unwrap().iter().any(|k| k["name"] == "router_softmax_c128x1_obs"));
    assert!(manifest["kernels"].as_array().unwrap().iter().any(|k| k["name"] == "router_softmax_c128x1"));
    assert_eq!(manifest["source"]["sha256"].as_str().unwrap().len(), 64);
    assert!(std::fs::read_to_string(out.join("moe.rs")).unwrap().contains("pub mod top2"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_source_error_exits_1_with_the_diagnostic() {
    let dir = std::env::temp_dir().join(format!("tokitaic-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.tk");
    std::fs::write(&f, "kernel f(x: f32[N]) -> (y: f16[N]) { y[i] = x[i]; }\n").unwrap();
    for sub in ["check", "build"] {
        let o = tokitaic().arg(sub).arg(&f).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", sub);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("E0302") && err.contains("bad.tk:1:"), "{}", err);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_exits_3_and_a_bad_flag_exits_2() {
    let o = tokitaic().args(["check", "/nonexistent/x.tk"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read /nonexistent/x.tk"));
    let o = tokitaic().args(["build", &example("gelu.tk"), "--target", "sm90"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown target `sm90`"));
    // A run's counts that are not a contracts.json: named, exit 2.
    let dir = std::env::temp_dir().join(format!("tokitaic-runcov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("contracts.json");
    std::fs::write(&bad, "{\"mode\": 3}").unwrap();
    let o = tokitaic().args(["verify", &example("gelu.tk"), "--no-mutants", "--report"]).arg(dir.join("report")).arg("--run-coverage").arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--run-coverage") && err.contains("contracts.json: not a run's contracts.json"), "{}", err);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["build", "check", "emit-hip"] {
        let o = tokitaic().args([sub, "--help"]).output().unwrap();
        assert!(o.status.success());
        assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: tokitaic"));
    }
}
