use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn main() {
    // Generate the `.tk` parser from src/syntax/grammar.lalrpop into OUT_DIR.
    lalrpop::Configuration::new()
        .use_cargo_dir_conventions()
        .emit_rerun_directives(true)
        .process()
        .expect("lalrpop failed to generate the .tk parser");
    source_fingerprint();
}

/// `TOKITAI_SOURCE_FINGERPRINT`: a hash of the compiler's and the prover's
/// sources, part of the proof cache's version, so that a build whose
/// obligations or solver pipeline changed (a development build keeps its
/// version number) never reads outcomes another build computed.
fn source_fingerprint() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let roots = [manifest.join("src"), manifest.join("../contracts/src")];
    let mut files = Vec::new();
    for root in &roots {
        if root.is_dir() {
            println!("cargo:rerun-if-changed={}", root.display());
            collect(root, &mut files);
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in &files {
        let rel = f.strip_prefix(&manifest).unwrap_or(f);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(std::fs::read(f).unwrap_or_default());
        h.update([0]);
    }
    let hex: String = h.finalize().iter().take(8).map(|b| format!("{:02x}", b)).collect();
    println!("cargo:rustc-env=TOKITAI_SOURCE_FINGERPRINT={}", hex);
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "lalrpop") {
            out.push(p);
        }
    }
}
