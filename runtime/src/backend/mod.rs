//! Backends behind `Device`: each runs a checked call (`call::Bound`)
//! through one trait, which `launch` calls (`Device::backend`); a backend
//! knows the call's types (`call`), never the launch path.

use crate::call::{Arg, Bound, KernelDef, Observed};
use crate::Result;

/// What runs a checked call on a device.
pub trait Backend {
    /// Run `k` on `args` as `bound` checked it. `observed`: where the
    /// contract monitor observes the launch, what it runs and the words
    /// it merges into (the monitor chose; only GPU backends have device
    /// memory to pass); else the backend chooses.
    fn run(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], observed: Option<Observed>) -> Result<()>;
}

pub mod arena;
pub mod bytes;
pub mod cpu;
pub mod cpu_pool;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
mod cuda_timeline;
#[cfg(feature = "hip")]
pub mod hip;
pub mod host_pool;
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
