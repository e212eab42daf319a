//! Backends behind `Device`: each runs a checked call (`launch::Bound`).

pub mod arena;
pub mod bytes;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "hip")]
pub mod hip;
pub mod reference;

/// The cache key of a kernel's compiled code: sha256 over everything that
/// changes the binary (source, compiler version, options, target arch).
pub fn code_key(source: &str, backend: &str, options: &[String], arch: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [source, backend, env!("CARGO_PKG_VERSION"), arch] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    for o in options {
        h.update((o.len() as u64).to_le_bytes());
        h.update(o.as_bytes());
    }
    format!("{:x}", h.finalize())
}
