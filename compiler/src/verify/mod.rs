//! Verification of `KernelIr`: obligations generated from the object the
//! HIP printer prints, discharged by Z3 (design.md, items 1 to 7).

mod completeness;
mod exec;
mod obligations;
pub mod mutate;
pub mod tolerance;

pub use obligations::{first_refutation, verify_kernel, KernelProofs, VerifiedObligation};

use crate::kir::KernelIr;
use crate::tir::Kernel;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tokitai_contracts::z3_backend::Config;

static DISK_CACHE: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Also keep fully proved results on disk under `dir` (one small file per
/// kernel fingerprint), so that a later process (the next build of a crate
/// whose `#[kernel]` functions did not change) proves nothing again. A hit
/// returns the kernel's index type and no obligations (nothing to report).
/// Set once per process; `false` if it was already set elsewhere.
pub fn set_proof_cache_dir(dir: std::path::PathBuf) -> bool {
    DISK_CACHE.set(dir).is_ok()
}

fn disk_hit(key: &str, kernel: &str) -> Option<KernelProofs> {
    let text = std::fs::read_to_string(DISK_CACHE.get()?.join(format!("{}.proved", key))).ok()?;
    let index_ty = match text.lines().next()? {
        "i32" => crate::types::Dtype::I32,
        "i64" => crate::types::Dtype::I64,
        _ => return None,
    };
    Some(KernelProofs { kernel: kernel.to_string(), index_ty, index_note: None, obligations: Vec::new() })
}

fn disk_store(key: &str, proofs: &KernelProofs) {
    let Some(dir) = DISK_CACHE.get() else { return };
    let ty = if proofs.index_ty == crate::types::Dtype::I32 { "i32" } else { "i64" };
    let text = format!("{}\n{} obligations proved for {}\n", ty, proofs.obligations.len(), proofs.kernel);
    // Best effort: a cache that cannot be written only costs time.
    let _ = std::fs::create_dir_all(dir).and_then(|_| crate::build::write_atomic(&dir.join(format!("{}.proved", key)), text.as_bytes()).map_err(|e| std::io::Error::other(e.to_string())));
}

/// Proofs are a function of the scheduled kernel, its contracts, the
/// compiler and the solver: a kernel proved once in this process is not
/// proved again (compiling one file for several outputs, tests). Only
/// fully proved results are kept (and on disk, see `set_proof_cache_dir`).
pub fn verify_cached(k: &Kernel, ir: &mut KernelIr, cfg: &Config) -> KernelProofs {
    static CACHE: OnceLock<Mutex<HashMap<String, (KernelProofs, crate::types::Dtype)>>> = OnceLock::new();
    let contracts: Vec<String> = k.requires.iter().chain(&k.ensures).map(|c| c.text()).collect();
    let key = crate::codegen::manifest::sha256_hex(
        format!("{:?}\n{:?}\n{}\n{}\n{}", ir, contracts, crate::VERSION, tokitai_contracts::solver_version(), cfg.timeout_ms).as_bytes(),
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some((proofs, ty)) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        ir.index_ty = ty;
        return proofs;
    }
    if let Some(proofs) = disk_hit(&key, &k.name) {
        ir.index_ty = proofs.index_ty;
        return proofs;
    }
    let proofs = verify_kernel(k, ir, cfg);
    if proofs.all_proved() {
        disk_store(&key, &proofs);
        if let Ok(mut c) = cache.lock() {
            c.insert(key, (proofs.clone(), ir.index_ty));
        }
    }
    proofs
}
