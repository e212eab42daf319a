//! Proof obligations and their outcomes.

use crate::term::Formula;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What an obligation establishes (design.md, "What the prover must show").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObligationKind {
    /// `requires` admits at least one launch.
    RequiresSatisfiable,
    /// A load or store stays inside its buffer.
    InBounds,
    /// Index arithmetic stays inside the index type.
    NoOverflow,
    /// Division and remainder see a non-negative dividend and positive divisor.
    DivisionDefined,
    /// No two executions of a launch write the same element.
    RaceFree,
    /// Threads of a block never touch one shared element, one writing,
    /// between two barriers.
    SharedRaceFree,
    /// Every thread of a block reaches every barrier.
    BarrierUniform,
    /// Every output element is written.
    Coverage,
    /// Stored values have the buffer's dtype.
    Dtype,
    /// An `ensures` clause.
    Ensures,
    /// Every register slot that is read was set before, on every path.
    Initialized,
    /// A reduction loop visits every index of its range exactly once.
    ReductionComplete,
    /// An output's derived error bound is within its `tolerance` over the
    /// domain (design.md, obligation 8).
    Tolerance,
    /// A product the p-adic skip rule leaves out is zero modulo `p^k`
    /// (`residue`).
    SkipExact,
}

impl ObligationKind {
    pub fn name(self) -> &'static str {
        match self {
            ObligationKind::RequiresSatisfiable => "requires-satisfiable",
            ObligationKind::InBounds => "in-bounds",
            ObligationKind::NoOverflow => "no-overflow",
            ObligationKind::DivisionDefined => "division-defined",
            ObligationKind::RaceFree => "race-free",
            ObligationKind::SharedRaceFree => "shared-race-free",
            ObligationKind::BarrierUniform => "barrier-uniform",
            ObligationKind::Coverage => "coverage",
            ObligationKind::Dtype => "dtype",
            ObligationKind::Ensures => "ensures",
            ObligationKind::Initialized => "initialized",
            ObligationKind::ReductionComplete => "reduction-complete",
            ObligationKind::Tolerance => "tolerance",
            ObligationKind::SkipExact => "skip-exact",
        }
    }
}

/// `hypotheses => goal`, to hold for every assignment of its variables.
/// For `RequiresSatisfiable` the goal is instead to be satisfiable.
#[derive(Clone, Debug)]
pub struct Obligation {
    pub kind: ObligationKind,
    /// One line for humans: "read of `x` at x[i] is within 0..N".
    pub description: String,
    /// An opaque reference the producer uses to place diagnostics
    /// (the compiler stores a source span here).
    pub origin: (usize, usize),
    pub hypotheses: Vec<Formula>,
    pub goal: Formula,
    /// Variables that a counterexample should show first, with labels.
    pub show: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    Proved { seconds: f64 },
    /// A concrete assignment under which the goal fails.
    Refuted { seconds: f64, model: BTreeMap<String, i64> },
    Unknown { seconds: f64, reason: String },
}

impl Outcome {
    pub fn is_proved(&self) -> bool {
        matches!(self, Outcome::Proved { .. })
    }
    pub fn is_refuted(&self) -> bool {
        matches!(self, Outcome::Refuted { .. })
    }
    pub fn seconds(&self) -> f64 {
        match self {
            Outcome::Proved { seconds } | Outcome::Refuted { seconds, .. } | Outcome::Unknown { seconds, .. } => *seconds,
        }
    }
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Proved { .. } => "proved",
            Outcome::Refuted { .. } => "refuted",
            Outcome::Unknown { .. } => "unknown",
        }
    }
}

/// An obligation with its outcome.
#[derive(Clone, Debug)]
pub struct Proof {
    pub obligation: Obligation,
    pub outcome: Outcome,
}
