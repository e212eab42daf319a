//! Verification of `KernelIr`: obligations generated from the object the
//! HIP printer prints, discharged by Z3 (design.md, items 1 to 7).

mod exec;
mod obligations;

pub use obligations::{verify_kernel, KernelProofs, VerifiedObligation};
