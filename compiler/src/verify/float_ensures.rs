//! Obligation 7 for float outputs: `ensures y in [lo, hi]` holds for every
//! value the kernel can store, over every launch that meets `requires` and
//! `domain`. The range comes from the walk of computed values
//! ([`crate::accuracy::computed`]); the obligation compares its outward
//! rounded ends with the declared ones (exact comparisons of f64 numbers,
//! no solver needed).
//!
//! An `ensures` the walk cannot show is an error (E0910): callers and the
//! runtime rely on it (a consumer whose `domain` holds the range is not
//! checked at run time), so it is never taken on trust.

use super::VerifiedObligation;
use crate::accuracy::computed::{self, EnsuredRange};
use crate::diag::Diagnostic;
use crate::kir::KernelIr;
use crate::tir::Kernel;
use tokitai_contracts::{Formula, Obligation, ObligationKind, Outcome};

/// The reason's first words when an ensures is not shown.
const NOT_SHOWN: &str = "the stored values are not shown inside";

fn describe(k: &Kernel, e: &EnsuredRange) -> String {
    format!("ensures {}: every value stored into `{}` lies in the range", e.text, k.tensors[e.tensor].name)
}

/// One obligation per float `ensures`.
pub fn float_ensures_proofs(k: &Kernel, ir: &KernelIr) -> Vec<VerifiedObligation> {
    let started = std::time::Instant::now();
    let ranges = crate::timings::time(&ir.name, "ensures-ranges", || computed::float_ensures(k, ir));
    let seconds = started.elapsed().as_secs_f64();
    ranges
        .iter()
        .map(|e| {
            let obligation = Obligation { kind: ObligationKind::Ensures, description: describe(k, e), origin: (e.span.lo, e.span.hi), hypotheses: vec![], goal: Formula::True, show: vec![] };
            let outcome = match &e.computed {
                _ if e.holds() => Outcome::Proved { seconds },
                Ok(c) => Outcome::Unknown { seconds, reason: format!("{}: they lie in [{:e}, {:e}]", NOT_SHOWN, c.lo, c.hi) },
                Err((msg, _)) => Outcome::Unknown { seconds, reason: format!("{}: no range derived: {}", NOT_SHOWN, msg) },
            };
            let span = match &e.computed {
                Err((_, at)) => *at,
                Ok(_) => e.span,
            };
            VerifiedObligation { obligation, outcome, span, cached: false }
        })
        .collect()
}

/// Is this the reason of a float `ensures` that was not shown?
pub fn not_shown(reason: &str) -> bool {
    reason.starts_with(NOT_SHOWN)
}

/// The diagnostic of an `ensures` on a float output that was not shown.
pub fn diagnostic(kernel: &str, v: &VerifiedObligation, reason: &str) -> Diagnostic {
    Diagnostic::error("E0910", format!("kernel `{}`: {} is not proved", kernel, v.obligation.description), v.span)
        .with_label("not shown by the range analysis")
        .with_note(reason.to_string())
        .with_help("the kernel is not emitted: widen the range, narrow the `domain`, or drop the `ensures`")
}
