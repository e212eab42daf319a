//! tokitai-compiler: `.tk` source to verified-ready `KernelIr`, HIP C++,
//! Rust CPU oracles, typed bindings and a manifest.
//!
//! Pipeline (see `shared/docs/design.md`):
//! `source --lalrpop--> AST --check--> typed IR --schedule--> KernelIr --print--> HIP / oracle / bindings`.
// Diagnostics are rich values (spans, labels, notes), returned by value
// as rustc's are; boxing them everywhere would buy nothing measurable.
#![allow(clippy::result_large_err)]

pub mod diag;
pub mod span;
pub mod syntax;
pub mod types;
pub mod check;
pub mod tir;
pub mod driver;
pub mod kir;
pub mod target;
pub mod schedule;
pub mod codegen;
pub mod build;
#[cfg(feature = "verify")]
pub mod cache;
#[cfg(feature = "verify")]
pub mod progress;
#[cfg(feature = "verify")]
pub mod verify;
#[cfg(feature = "verify")]
pub mod report;
pub mod rng;
pub use build::Build;

/// This compiler's version, part of every fingerprint.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub mod eval;
pub mod accuracy;
pub mod soundness;
pub mod timings;
