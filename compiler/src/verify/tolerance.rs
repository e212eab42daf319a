//! Obligation 8: each output's derived error bound ([`crate::accuracy`]) is
//! within its declared `tolerance`, discharged by Z3 in exact rational
//! arithmetic over every region of the analysis.
//!
//! Outcomes: `proved`; `unknown` with "the derived bound exceeds the
//! tolerance" (an error, E0913: the bound is sound but the tolerance is
//! tighter than what can be shown, which is what a too-tight tolerance
//! looks like); `unknown` with "no bound derived" when the analysis cannot
//! bound the output at all (a warning, W0913: the kernel is emitted, its
//! tolerance is tested, not proved).

use super::VerifiedObligation;
use crate::accuracy::magnitude::{self, Verdict};
use crate::accuracy::{self, OutputAccuracy};
use crate::diag::Diagnostic;
use crate::kir::KernelIr;
use crate::tir::Kernel;
use tokitai_contracts::z3_backend::{prove_bound_within, BoundRegion, Config};
use tokitai_contracts::{Formula, Obligation, ObligationKind, Outcome};

/// The reason's first words when the bound exceeds the tolerance.
const EXCEEDS: &str = "the derived bound exceeds the tolerance";

/// A number rounded up to two significant digits, for a suggestion.
fn round_up_2(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let p = 10f64.powi(x.log10().floor() as i32 - 1);
    (x / p).ceil() * p
}

fn describe(o: &OutputAccuracy) -> String {
    format!("tolerance of `{}`: |kernel - exact| <= {:e} + {:e} |exact| over the domain", o.output, o.tolerance.0, o.tolerance.1)
}

/// One obligation per output with a tolerance.
pub fn tolerance_proofs(k: &Kernel, ir: &KernelIr, cfg: &Config) -> Vec<VerifiedObligation> {
    if k.uses_magnitudes() {
        return magnitude_proofs(k, ir);
    }
    let acc = crate::timings::time(&ir.name, "tolerance-derive", || accuracy::analyze(k, ir));
    acc.outputs
        .iter()
        .map(|o| {
            let obligation = Obligation { kind: ObligationKind::Tolerance, description: describe(o), origin: (o.span.lo, o.span.hi), hypotheses: vec![], goal: Formula::True, show: vec![] };
            if let Some((msg, span, region)) = &o.failure {
                let reason = format!("no bound derived: {} (at {})", msg, region);
                return VerifiedObligation { obligation, outcome: Outcome::Unknown { seconds: 0.0, reason }, span: *span, cached: false };
            }
            // A region without error meets any tolerance (abs, rel >= 0),
            // whatever its range (a masked maximum may reach -inf).
            let regions: Vec<BoundRegion> = o
                .regions
                .iter()
                .filter(|r| !r.err.is_zero())
                .map(|r| {
                    let (abs, rel) = r.err.total();
                    BoundRegion { abs, rel, lo: r.range.mig(), hi: r.range.mag() }
                })
                .collect();
            // The query is the regions' bounds against the tolerance: the
            // key is exactly that (f64 `Debug` prints every bit).
            let key = || crate::cache::Key::builder("tolerance").part(format!("{:?}|{:?}|{:?}|{}", regions, o.tolerance.0, o.tolerance.1, cfg.timeout_ms)).finish();
            let decided = |o: &Outcome| !matches!(o, Outcome::Unknown { .. });
            let (outcome, cached) = crate::cache::cached(key, decided, || crate::timings::time(&ir.name, "tolerance", || prove_bound_within(&regions, o.tolerance.0, o.tolerance.1, cfg)));
            let outcome = match outcome {
                Outcome::Refuted { seconds, model } => {
                    // Name the worst region the analysis found (the solver's
                    // witness is one failing region; the worst is more useful).
                    let (i, ratio, x) = o.worst().unwrap_or((model.get("region").copied().unwrap_or(0) as usize, f64::INFINITY, 0.0));
                    let r = &o.regions[i];
                    let (a, rl) = r.err.total();
                    let top: Vec<String> = acc.shares(r, x).iter().filter(|s| s.fraction >= 0.005).take(3).map(|s| format!("{} ({:.0}%)", s.label, s.fraction * 100.0)).collect();
                    let (ea, er) = o.envelope().unwrap_or((a, rl));
                    let reason = format!(
                        "{}: at {} the bound is {:.3e} + {:.3e} |exact|, {:.2}x the tolerance at |exact| = {:.4e}; dominated by {}; the tolerance that is proved: abs {:.1e}, rel {:.1e}",
                        EXCEEDS,
                        r.describe(),
                        a,
                        rl,
                        ratio,
                        x,
                        top.join(", "),
                        round_up_2(ea),
                        round_up_2(er)
                    );
                    Outcome::Unknown { seconds, reason }
                }
                other => other,
            };
            VerifiedObligation { obligation, outcome, span: o.span, cached }
        })
        .collect()
}

/// The obligations of a kernel whose bounds scale with dims and
/// magnitudes: the derived polynomial is within the tolerance's at every
/// launch (every dim that meets `requires`, every magnitude), as long as
/// the launch-time conditions hold (which the runtime checks).
fn magnitude_proofs(k: &Kernel, ir: &KernelIr) -> Vec<VerifiedObligation> {
    let started = std::time::Instant::now();
    let acc = crate::timings::time(&ir.name, "tolerance-derive", || magnitude::analyze(k, ir));
    let seconds = started.elapsed().as_secs_f64();
    acc.outputs
        .iter()
        .map(|o| {
            let description = format!("tolerance of `{}`: |kernel - exact| <= {} + {:e} |exact| at every launch", o.output, acc.show(&o.tolerance.0), o.tolerance.1);
            let obligation = Obligation { kind: ObligationKind::Tolerance, description, origin: (o.span.lo, o.span.hi), hypotheses: vec![], goal: Formula::True, show: vec![] };
            let conditions = if o.conditions.is_empty() {
                String::new()
            } else {
                format!("; valid while {}", o.conditions.iter().map(|c| format!("{} <= {:e} ({})", acc.show(&c.poly), c.limit, c.what)).collect::<Vec<_>>().join(", "))
            };
            let outcome = match (&o.failure, &o.verdict) {
                (Some((msg, _)), _) => Outcome::Unknown { seconds, reason: format!("no bound derived: {}", msg) },
                (None, Some(Verdict::Within(_))) => Outcome::Proved { seconds },
                (None, Some(Verdict::Exceeds { at, bound, tolerance })) => {
                    let point = if at.is_empty() {
                        "its relative part".to_string()
                    } else {
                        acc.symbols.iter().zip(at).filter(|(_, v)| v.is_finite()).map(|(n, v)| format!("{} = {}", n, v)).collect::<Vec<_>>().join(", ")
                    };
                    Outcome::Unknown {
                        seconds,
                        reason: format!(
                            "{}: the bound {} + {:e} |exact| is {:.4e} at {}, above the tolerance's {:.4e}{}; the tolerance that is proved: abs {}, rel {:.1e}",
                            EXCEEDS,
                            acc.show(&o.abs),
                            o.rel,
                            bound,
                            point,
                            tolerance,
                            conditions,
                            acc.show(&o.abs),
                            round_up_2(o.rel)
                        ),
                    }
                }
                (None, Some(Verdict::Undecided(why))) => Outcome::Unknown {
                    seconds,
                    reason: format!("{}: {}: bound {} against {}; the tolerance that is proved: abs {}, rel {:.1e}", EXCEEDS, why, acc.show(&o.abs), acc.show(&o.tolerance.0), acc.show(&o.abs), round_up_2(o.rel)),
                },
                (None, None) => Outcome::Unknown { seconds, reason: "no verdict".into() },
            };
            VerifiedObligation { obligation, outcome, span: o.span, cached: false }
        })
        .collect()
}

/// The diagnostic of a tolerance that was not proved.
pub fn diagnostic(kernel: &str, v: &VerifiedObligation, reason: &str) -> Diagnostic {
    if let Some(rest) = reason.strip_prefix(EXCEEDS) {
        let (detail, suggestion) = rest.rsplit_once("; the tolerance that is proved: ").unwrap_or((rest, ""));
        Diagnostic::error("E0913", format!("kernel `{}`: {} is not proved", kernel, v.obligation.description), v.span)
            .with_label("tighter than the derived error bound")
            .with_note(format!("{}{}", EXCEEDS, detail))
            .with_help(format!("the bound that is proved is {}; loosen the tolerance to it, narrow the `domain`, or bound the dims in `requires`", suggestion))
    } else {
        Diagnostic::warning("W0913", format!("kernel `{}`: {} is not proved: {}", kernel, v.obligation.description, reason), v.span)
            .with_label("no error bound derived here")
            .with_help("the kernel is emitted and its tolerance is tested, not proved; narrow the `domain` or bound the dims in `requires`")
    }
}
