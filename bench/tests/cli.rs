//! The bench binaries' command lines (issue 24): `--help` works on a
//! machine with no GPU (this one, in CI), and a bad flag or value exits 2
//! with a message naming it, before any device is opened.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const BINS: [&str; 3] = [env!("CARGO_BIN_EXE_tokitai-bench-kernels"), env!("CARGO_BIN_EXE_tokitai-bench-moe"), env!("CARGO_BIN_EXE_tokitai-gpucheck")];

#[test]
fn help_needs_no_gpu_and_lists_the_flags() {
    for (bin, flags) in BINS.iter().zip([&["--json", "--only"][..], &["--configs", "--steps", "--contracts"], &["--soundness", "--monitor", "--small"]]) {
        let (code, out, err) = run(bin, &["--help"]);
        assert_eq!(code, 0, "{} --help: {}", bin, err);
        assert!(out.contains("Usage:"), "{}", out);
        for f in flags {
            assert!(out.contains(f), "{} --help does not list {}:\n{}", bin, f, out);
        }
    }
}

#[test]
fn a_bad_flag_or_value_exits_2_naming_it() {
    for bin in BINS {
        let (code, _, err) = run(bin, &["--no-such-flag"]);
        assert_eq!(code, 2, "{}: {}", bin, err);
        assert!(err.contains("--no-such-flag"), "{}", err);
    }
    let moe = BINS[1];
    for (args, says) in [(&["--steps", "0"][..], "positive"), (&["--configs", "tiny"], "SIZE:BATCH"), (&["--configs", "huge:128"], "unknown size"), (&["--contracts", "loud"], "off, warn or strict")] {
        let (code, _, err) = run(moe, args);
        assert_eq!(code, 2, "{:?}: {}", args, err);
        assert!(err.contains(says), "{:?}: {}", args, err);
    }
    let (code, _, err) = run(BINS[2], &["--soundness", "many"]);
    assert_eq!(code, 2, "{}", err);
    let (code, _, err) = run(BINS[2], &["--soundness", "10", "--monitor"]);
    assert_eq!(code, 2, "{}", err);
    assert!(err.contains("cannot be used with"), "{}", err);
}
