//! Printers from `KernelIr` and the typed IR: HIP C++, Rust oracles,
//! bindings and the manifest.

pub mod hip;
