//! insta snapshots (under `snapshots/` at the repository root) of the HIP
//! C++ of every example for both targets, of the generated oracles, and of
//! the manifest.

use std::path::{Path, PathBuf};
use tokitai_compiler::build::compile_source;
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

pub fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    v.sort();
    v
}

fn compile(path: &Path, target: &Target) -> tokitai_compiler::build::Artifacts {
    let text = std::fs::read_to_string(path).unwrap();
    let name = format!("examples/ops/{}", path.file_name().unwrap().to_string_lossy());
    compile_source(SourceFile::new(name, text), target).unwrap_or_else(|e| panic!("{}", e))
}

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, $value);
        });
    };
}

#[test]
fn hip_of_every_example_for_both_targets() {
    for target in [Target::default_cuda(), Target::default_hip()] {
        for path in examples() {
            let arts = compile(&path, &target);
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            // The kernels, then their block-size variants.
            let all: Vec<_> = arts.kernels.iter().cloned().chain(arts.variants.iter().flatten().map(|v| v.ir.clone())).collect();
            let text = tokitai_compiler::codegen::hip::module_source(&all);
            snap!(format!("hip__{}__{}", target, stem), text);
        }
    }
}

/// The contractions on AMD's matrix unit (CDNA3 only: gfx90a keeps the
/// SIMT schedule, see `Target::mfma_keeps_subnormals`).
#[test]
fn hip_of_the_contractions_on_cdna3() {
    let target: Target = "hip-gfx942".parse().unwrap();
    for path in examples().into_iter().filter(|p| p.ends_with("matmul.tk") || p.ends_with("linear.tk")) {
        let arts = compile(&path, &target);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let all: Vec<_> = arts.kernels.iter().cloned().chain(arts.variants.iter().flatten().map(|v| v.ir.clone())).collect();
        let text = tokitai_compiler::codegen::hip::module_source(&all);
        snap!(format!("hip__{}__{}", target, stem), text);
    }
}

#[test]
fn oracles_of_every_example() {
    for path in examples() {
        let arts = compile(&path, &Target::default_cuda());
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text: String = arts
            .program
            .kernels
            .iter()
            .zip(&arts.kernels)
            .map(|(k, ir)| tokitai_compiler::codegen::oracle::kernel_oracles(k, ir))
            .collect();
        snap!(format!("oracle__{}", stem), text);
    }
}

#[test]
fn manifest_of_an_example() {
    let arts = compile(&examples().into_iter().find(|p| p.ends_with("moe.tk")).unwrap(), &Target::default_cuda());
    let json = serde_json::to_string_pretty(&arts.manifest).unwrap();
    snap!("manifest__moe", json);
}
