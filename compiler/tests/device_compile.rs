//! Every generated kernel compiles with hipcc for gfx90a and with NVRTC for
//! sm_90a (the target compute capability 9.0 compiles for), with no warnings. `scripts/install-toolchains.sh` installs both on
//! a CPU-only machine; under CI (`CI=true`) a missing toolchain is a
//! failure, elsewhere the test says what it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use tokitai_compiler::build::compile_source;
use tokitai_compiler::codegen::hip::{PRELUDE, RESIDUE_PRELUDE};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    v.sort();
    v
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn tool_available(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// Each source file's kernels as one HIP translation unit for `target`: the
/// prelude once, then every kernel's own text. hipcc spends about 1.2 s of
/// its 1.5 s per kernel on starting and reading the HIP headers, so one
/// compile per file instead of one per kernel saves about a minute of CI
/// (NVRTC a third of its time: 3.9 s instead of 5.7 s for LayerNorm's 24).
/// Compiling the unit shows each kernel compiles alone: a kernel's text is
/// the prelude followed by exactly one `__global__` function that defines
/// nothing else another kernel could lean on (asserted here). Returns the
/// units and the names of the kernels in them, with whether each holds
/// `marker`.
fn write_units(target: &Target, dir: &Path, marker: &str) -> (Vec<PathBuf>, Vec<(String, bool)>) {
    std::fs::create_dir_all(dir).unwrap();
    let mut units = Vec::new();
    let mut kernels = Vec::new();
    for path in examples() {
        let text = std::fs::read_to_string(&path).unwrap();
        let arts = compile_source(SourceFile::new(path.display().to_string(), text), target).unwrap_or_else(|e| panic!("{}", e));
        let mut unit = String::from(PRELUDE);
        for (name, hip) in &arts.hip {
            let body = hip.strip_prefix(PRELUDE).unwrap_or_else(|| panic!("{}: the kernel text does not start with the prelude", name));
            assert_eq!(body.matches("__global__").count(), 1, "{}: one kernel per text", name);
            // Besides the residue helpers, printed guarded before a kernel
            // with a `modulus` (so that the unit's repeats are one).
            let own = body.trim_start().strip_prefix(RESIDUE_PRELUDE).unwrap_or(body);
            assert_eq!(own.matches("__device__").count(), 0, "{}: a kernel text defines no device helpers outside the prelude", name);
            unit.push_str(body);
            kernels.push((name.clone(), body.contains(marker)));
        }
        let f = dir.join(format!("{}.hip", path.file_stem().unwrap().to_string_lossy()));
        std::fs::write(&f, unit).unwrap();
        units.push(f);
    }
    (units, kernels)
}

/// Compile each unit with hipcc for `arch`'s flags, in parallel; no
/// warnings allowed.
fn hipcc_units(units: &[PathBuf], arch: &Target) {
    // One hipcc per source file, as many at once as there are cores (each
    // is a single-threaded clang).
    use rayon::prelude::*;
    units.par_iter().for_each(|f| {
        let out = Command::new("hipcc").arg("--genco").args(arch.compile_flags()).arg(f).arg("-o").arg(f.with_extension("co")).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "hipcc failed on {}:\n{}", f.display(), stderr);
        assert!(stderr.trim().is_empty(), "hipcc warned on {}:\n{}", f.display(), stderr);
        assert!(std::fs::metadata(f.with_extension("co")).unwrap().len() > 0);
    });
}

fn hipcc_available() -> bool {
    if tool_available("hipcc", "--version") {
        return true;
    }
    assert!(!in_ci(), "hipcc is missing in CI: scripts/install-toolchains.sh installs it");
    eprintln!("SKIPPED: hipcc not installed (run scripts/install-toolchains.sh)");
    false
}

#[test]
fn every_kernel_compiles_with_hipcc_for_gfx90a_without_warnings() {
    if !hipcc_available() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tokitai-hipcc-{}", std::process::id()));
    let target = Target::default_hip();
    let (units, kernels) = write_units(&target, &dir, "");
    assert!(kernels.len() >= 20, "expected every example kernel, got {}", kernels.len());
    hipcc_units(&units, &target);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The kernels generated for CDNA3 (gfx942: the MFMA schedule, which
/// gfx90a does not get) compile too. The installed hipcc (Debian's HIP
/// 5.2) does not know gfx942, so the text is compiled for gfx90a, which
/// has the same `__builtin_amdgcn_mfma_f32_16x16x16f16` and
/// `..bf16_1k` with the same operands and 64-lane wavefronts: this checks
/// the text and the instructions' selection, not gfx942's own encoding.
#[test]
fn every_kernel_for_gfx942_compiles_with_hipcc_without_warnings() {
    if !hipcc_available() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tokitai-hipcc-gfx942-{}", std::process::id()));
    let cdna3: Target = "hip-gfx942".parse().unwrap();
    let (units, kernels) = write_units(&cdna3, &dir, "");
    assert!(kernels.len() >= 20, "expected every example kernel, got {}", kernels.len());
    let mfma = units.iter().filter(|u| std::fs::read_to_string(u).unwrap().contains("__builtin_amdgcn_mfma_f32_16x16x16")).count();
    assert!(mfma >= 2, "the contractions of matmul.tk and linear.tk are on the unit; {} units are", mfma);
    hipcc_units(&units, &Target::default_hip());
    let _ = std::fs::remove_dir_all(&dir);
}

fn nvrtc_available() -> bool {
    let probe = Command::new("python3").args(["-c", "import nvidia.cu13"]).output();
    if probe.is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(!in_ci(), "the NVRTC wheels are missing in CI: scripts/install-toolchains.sh installs them");
    eprintln!("SKIPPED: NVRTC wheels not installed (run scripts/install-toolchains.sh)");
    false
}

/// Every kernel generated for `target`, compiled by NVRTC for `arch` (a
/// unit per source file, as for hipcc); the names of those whose text
/// holds `marker`.
fn nvrtc_compiles(target: &Target, arch: &str, tag: &str, marker: &str) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/nvrtc_compile.py");
    let dir = std::env::temp_dir().join(format!("tokitai-nvrtc-{}-{}", tag, std::process::id()));
    let (units, kernels) = write_units(target, &dir, marker);
    assert!(kernels.len() >= 20, "expected every example kernel, got {}", kernels.len());
    let out = Command::new("python3").arg(&script).args(["--arch", arch]).args(&units).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "NVRTC failed or warned:\n{}{}", stdout, String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), units.len(), "{}", stdout);
    let _ = std::fs::remove_dir_all(&dir);
    kernels.into_iter().filter(|(_, marked)| *marked).map(|(name, _)| name).collect()
}

#[test]
fn every_kernel_compiles_with_nvrtc_for_sm90_without_warnings() {
    if nvrtc_available() {
        nvrtc_compiles(&Target::default_cuda(), "sm_90a", "sm90", "");
    }
}

/// For GPUs without the warpgroup unit (A100, sm_80): the contractions
/// take the `mma.sync` family as their own schedule or as a variant, and
/// nothing of sm_90a's (`wgmma`, `setmaxnreg`, mbarriers) is emitted.
#[test]
fn every_kernel_compiles_with_nvrtc_for_sm80_without_warnings() {
    if !nvrtc_available() {
        return;
    }
    let on_unit = nvrtc_compiles(&Target::Cuda { sm: 80 }, "sm_80", "sm80", "mma.sync");
    assert!(on_unit.len() >= 6, "the matmul and linear kernels run on mma.sync at sm_80; only {:?} do", on_unit);
}

