//! Printers from `KernelIr` and the typed IR: HIP C++, Rust oracles,
//! bindings and the manifest.

pub mod bindings;
pub mod cpu;
pub mod hip;
pub mod launch;
pub mod manifest;
pub mod oracle;
