//! Verification of `KernelIr`: obligations generated from the object the
//! HIP printer prints, discharged by Z3 (design.md, items 1 to 7).

mod completeness;
mod exec;
mod mbarrier;
pub mod float_ensures;
mod obligations;
mod protocol;
mod residue;
mod tile_skip;
pub mod mutate;
pub mod tolerance;

pub use obligations::{first_refutation, verify_kernel, KernelProofs, VerifiedObligation};

use crate::kir::KernelIr;
use crate::tir::Kernel;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tokitai_contracts::z3_backend::Config;

/// Proofs are a function of the scheduled kernel, its contracts, the
/// compiler and the solver: a kernel proved once in this process is not
/// proved again (compiling one file for several outputs, tests). Only
/// fully proved results are kept. Between processes, the outcome of each
/// obligation is kept in the persistent proof cache (`crate::cache`).
pub fn verify_cached(k: &Kernel, ir: &mut KernelIr, cfg: &Config) -> KernelProofs {
    static CACHE: OnceLock<Mutex<HashMap<String, (KernelProofs, crate::types::Dtype)>>> = OnceLock::new();
    // The whole kernel, not only `requires` and `ensures`: the tolerance
    // proofs depend on `domain` and `tolerance` too (a kernel recompiled
    // with a tighter tolerance and the same schedule was once answered
    // from this memo).
    let key = crate::codegen::manifest::sha256_hex(
        format!("{:?}\n{}\n{}\n{}\n{}", ir, crate::cache::fingerprint(k), crate::VERSION, tokitai_contracts::solver_version(), cfg.timeout_ms).as_bytes(),
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some((proofs, ty)) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        ir.index_ty = ty;
        return proofs;
    }
    let proofs = verify_kernel(k, ir, cfg);
    if proofs.all_proved() {
        if let Ok(mut c) = cache.lock() {
            c.insert(key, (proofs.clone(), ir.index_ty));
        }
    }
    proofs
}
