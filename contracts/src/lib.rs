//! tokitai-contracts: logic, not kernels.
//!
//! A small language of symbolic integer terms and boolean formulas
//! ([`term`]), proof obligations over them with their outcome
//! ([`obligation`]), a Z3 backend ([`z3_backend`], feature `z3`), and
//! report writers. It knows nothing about kernels: the compiler turns a
//! kernel into obligations and hands them here.

pub mod divmod;
pub mod fp;
pub mod obligation;
pub mod plot;
pub mod poly;
pub mod relation;
pub mod relax;
pub mod residue;
pub mod report;
pub mod term;
pub mod tuning;
#[cfg(feature = "z3")]
pub mod z3_backend;

pub use obligation::{Obligation, ObligationKind, Outcome, Proof};
pub use term::{Formula, Term};

/// The solver's version, for fingerprints and reports.
pub fn solver_version() -> String {
    #[cfg(feature = "z3")]
    {
        format!("Z3 {}", z3::full_version())
    }
    #[cfg(not(feature = "z3"))]
    {
        "none (built without the `z3` feature)".to_string()
    }
}
