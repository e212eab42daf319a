//! Verification reports: one data model, four writers (Markdown, JSON with
//! a versioned schema, LaTeX tables a paper can `\input`, an SVG plot).
//!
//! Deterministic apart from solver timings: writers take a `redact_times`
//! flag so that snapshots and diffs can ignore them.

use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// Bumped on any change a reader of `report.json` would notice.
pub const SCHEMA_VERSION: u32 = 6;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub tool: String,
    pub solver: String,
    pub target: String,
    pub kernels: Vec<KernelReport>,
    pub mutation: Option<MutationSummary>,
    /// A training run's launches and how many a proved bound covered
    /// (`--run-coverage`), where one was given.
    pub run: Option<RunCoverage>,
    /// A device's tuning table (`--tuning`): which proved candidate the
    /// tuner chose for each shape class, where one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningSummary>,
    pub evidence: Vec<String>,
    pub non_claims: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Fingerprints {
    pub source_sha256: String,
    pub compiler_version: String,
    pub solver_version: String,
    pub target: String,
    pub kernel: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ObligationRow {
    pub kind: String,
    pub description: String,
    /// "proved", "refuted" or "unknown"
    pub status: String,
    /// Seconds the solver took, in the run that decided it.
    pub seconds: f64,
    /// Taken from the persistent proof cache (decided by an earlier run of
    /// this tool and solver version on this kernel's printed IR), not in
    /// this run. Schema version 3.
    pub cached: bool,
}

/// Error of the CPU mirror (the kernel's dtypes and order) against the
/// exact f64 oracle, over the sampled inputs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorRow {
    pub output: String,
    pub tolerance_abs: f64,
    pub tolerance_rel: f64,
    pub max_abs_error: f64,
    /// max over elements of |err| / (abs + rel |exact|); <= 1 means within tolerance.
    pub worst_ratio: f64,
    pub elements: u64,
    pub within: bool,
    /// The derived error bound (issue 7).
    pub bound: BoundRow,
    /// The bound's soundness and tightness on sampled inputs.
    pub sampled: SampledRow,
}

/// The derived error bound of one output, over every launch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BoundRow {
    /// "proved" (within the tolerance), "exceeds" (derived, but above the
    /// tolerance) or "unknown" (no bound derived).
    pub status: String,
    /// "domain" (over the declared numeric domain; `abs` a number),
    /// "magnitude" (`abs` a formula in dims and launch-time magnitudes,
    /// given in `note`) or "none".
    pub form: String,
    pub abs: Option<f64>,
    pub rel: Option<f64>,
    /// The largest contributions at the worst region: "f32 summation ... (97%)".
    pub dominant: Vec<String>,
    /// Where the worst region is, or why no bound was derived.
    pub note: String,
}

/// Sampled inputs against the bound derived for each launch's dims.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SampledRow {
    pub elements: u64,
    pub violations: u64,
    /// Bound over error at the element closest to its bound (None: no error seen).
    pub proved_over_observed: Option<f64>,
    pub max_error: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelReport {
    pub name: String,
    pub file: String,
    pub doc: String,
    pub schedule: String,
    pub index_type: String,
    pub requires: Vec<String>,
    pub ensures: Vec<String>,
    pub domain: Vec<String>,
    pub fingerprints: Fingerprints,
    pub obligations: Vec<ObligationRow>,
    pub errors: Vec<ErrorRow>,
    pub shapes_sampled: Vec<String>,
    /// The kernel's tuning space: every candidate form beside the kernel's
    /// own, proved (and emitted) or rejected (never launched).
    pub candidates: Vec<CandidateRow>,
}

/// A device's tuning table as the report shows it.
#[derive(Clone, Debug, Serialize)]
pub struct TuningSummary {
    pub device: String,
    pub driver: i32,
    pub kernels: Vec<TunedKernel>,
}

/// One kernel's tuned choices.
#[derive(Clone, Debug, Serialize)]
pub struct TunedKernel {
    pub name: String,
    /// Was the table made for these candidates (the fingerprint matches)?
    /// A stale entry is shown but a launch would not use it.
    pub current: bool,
    pub classes: Vec<TunedClass>,
}

/// One shape class: the choice, the untuned default, and the choice's
/// speed over the default's, as timed.
#[derive(Clone, Debug, Serialize)]
pub struct TunedClass {
    pub class: String,
    pub choice: String,
    pub default: String,
    pub speedup: Option<f64>,
    /// Candidates timed, and how many were listed but not timed (not
    /// admitted by their guard, or rejected).
    pub timed: usize,
    pub untimed: usize,
}

/// One candidate of a kernel's tuning space (a variant).
#[derive(Clone, Debug, Serialize)]
pub struct CandidateRow {
    pub name: String,
    /// The schedule and its parameters (`row-reduction block=128`).
    pub schedule: String,
    /// What it asks of a launch beyond `requires` (`C <= 1024`), proved as
    /// one more `requires`; empty where nothing.
    pub guard: String,
    /// "proved" (emitted; the tuner may time and choose it) or
    /// "rejected" (no code emitted).
    pub status: String,
    /// Obligations proved, for a proved candidate.
    pub proved: usize,
    /// Why it was rejected.
    pub reason: String,
}

/// What the runtime's contract monitor counted over one training run; the
/// trainer writes it as `contracts.json` beside its checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCoverage {
    /// `off`, `warn` or `strict`.
    pub mode: String,
    /// The device the run launched on, in words.
    pub device: String,
    pub kernels: std::collections::BTreeMap<String, KernelRunCoverage>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelRunCoverage {
    pub launches: u64,
    /// Launches inside the domains of every bound, their conditions met.
    pub covered: u64,
    /// Launches whose inputs could not be measured.
    pub unmeasured: u64,
    /// Why the first of them could not be.
    #[serde(default)]
    pub why_unmeasured: Option<String>,
    /// The first launch outside its bounds, in words.
    pub first_outside: Option<String>,
}

impl RunCoverage {
    /// `(launches, covered)` over every kernel.
    pub fn totals(&self) -> (u64, u64) {
        self.kernels.values().fold((0, 0), |(l, c), k| (l + k.launches, c + k.covered))
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MutationSummary {
    pub mutants: usize,
    pub refuted: usize,
    pub by_operator: Vec<(String, usize, usize)>,
    pub survivors: Vec<String>,
}

impl KernelReport {
    pub fn count(&self, status: &str) -> usize {
        self.obligations.iter().filter(|o| o.status == status).count()
    }
    pub fn seconds(&self) -> f64 {
        self.obligations.iter().map(|o| o.seconds).sum()
    }
    /// Obligations whose outcome came from the proof cache.
    pub fn cached(&self) -> usize {
        self.obligations.iter().filter(|o| o.cached).count()
    }
}

fn time(t: f64, redact: bool) -> String {
    if redact {
        "[time]".into()
    } else {
        format!("{:.3}", t)
    }
}

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{:.2e}", x)
    }
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{}\"}}", e))
    }

    pub fn to_markdown(&self, redact_times: bool) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Verification report\n");
        let _ = writeln!(s, "Tool: {}. Solver: {}. Target: {}. Schema version {}.\n", self.tool, self.solver, self.target, self.schema_version);
        let _ = writeln!(s, "## Summary\n");
        let _ = writeln!(s, "| kernel | schedule | index | proved | refuted | unknown | from cache | solver s | max error / tolerance |");
        let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|---:|---:|");
        for k in &self.kernels {
            let worst = k.errors.iter().map(|e| e.worst_ratio).fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                k.name,
                k.schedule,
                k.index_type,
                k.count("proved"),
                k.count("refuted"),
                k.count("unknown"),
                if redact_times { "[n]".to_string() } else { k.cached().to_string() },
                time(k.seconds(), redact_times),
                if k.errors.is_empty() { "n/a".into() } else { format!("{:.3}", worst) }
            );
        }
        if let Some(m) = &self.mutation {
            let _ = writeln!(s, "\n## Mutation testing of the verifier\n");
            let _ = writeln!(s, "{} of {} injected bugs refuted ({:.1}%).\n", m.refuted, m.mutants, 100.0 * m.refuted as f64 / m.mutants.max(1) as f64);
            let _ = writeln!(s, "| operator | mutants | refuted |\n|---|---:|---:|");
            for (op, n, r) in &m.by_operator {
                let _ = writeln!(s, "| {} | {} | {} |", op, n, r);
            }
            for sv in &m.survivors {
                let _ = writeln!(s, "- survived: {}", sv);
            }
        } else {
            let _ = writeln!(s, "\n## Mutation testing of the verifier\n\nNot run for this report (`--no-mutants`).");
        }
        if let Some(run) = &self.run {
            self.write_run(&mut s, run);
        }
        if let Some(t) = &self.tuning {
            let _ = writeln!(s, "\n## Tuned choices ({}, driver {})\n", t.device, t.driver);
            let _ = writeln!(s, "The tuner times only proved candidates that a launch's guard admits; each choice below is one of the kernel's proved candidates.\n");
            let _ = writeln!(s, "| kernel | shape class | choice | untuned default | speed over default | timed / listed | table current |\n|---|---|---|---|---:|---:|---|");
            for k in &t.kernels {
                for c in &k.classes {
                    let speed = c.speedup.map(|x| format!("{:.2}x", x)).unwrap_or_else(|| "n/a".into());
                    let _ = writeln!(s, "| `{}` | `{}` | `{}` | `{}` | {} | {} / {} | {} |", k.name, c.class, c.choice, c.default, speed, c.timed, c.timed + c.untimed, if k.current { "yes" } else { "**no: made for other code, not used**" });
                }
            }
        }
        for k in &self.kernels {
            let _ = writeln!(s, "\n## `{}` ({})\n", k.name, k.file);
            if !k.doc.is_empty() {
                let _ = writeln!(s, "{}\n", k.doc);
            }
            let _ = writeln!(s, "- requires: {}", if k.requires.is_empty() { "(none)".into() } else { k.requires.iter().map(|r| format!("`{}`", r)).collect::<Vec<_>>().join(", ") });
            if !k.ensures.is_empty() {
                let _ = writeln!(s, "- ensures: {}", k.ensures.iter().map(|r| format!("`{}`", r)).collect::<Vec<_>>().join(", "));
            }
            if !k.domain.is_empty() {
                let _ = writeln!(s, "- domain: {}", k.domain.iter().map(|r| format!("`{}`", r)).collect::<Vec<_>>().join(", "));
            }
            let f = &k.fingerprints;
            let _ = writeln!(s, "- fingerprint: `{}` (source sha256 `{}`, compiler {}, {}, target {})\n", f.kernel, f.source_sha256, f.compiler_version, f.solver_version, f.target);
            if !k.errors.is_empty() {
                let _ = writeln!(s, "| output | tolerance abs | tolerance rel | max abs error | worst error / tolerance | elements | within |\n|---|---:|---:|---:|---:|---:|---|");
                for e in &k.errors {
                    let _ = writeln!(s, "| `{}` | {} | {} | {} | {:.3} | {} | {} |", e.output, sci(e.tolerance_abs), sci(e.tolerance_rel), sci(e.max_abs_error), e.worst_ratio, e.elements, if e.within { "yes" } else { "**no**" });
                }
                let _ = writeln!(s, "\nShapes sampled: {}.\n", k.shapes_sampled.join("; "));
                let _ = writeln!(s, "| output | derived bound | status | dominated by | sampled | violations | proved / observed |\n|---|---|---|---|---:|---:|---:|");
                for e in &k.errors {
                    let b = &e.bound;
                    let bound = match (b.abs, b.rel) {
                        (Some(a), Some(r)) => format!("{} + {} \\|x\\|", sci(a), sci(r)),
                        (None, Some(r)) if b.form == "magnitude" => format!("formula in magnitudes (note) + {} \\|x\\|", sci(r)),
                        _ => "none".into(),
                    };
                    let tight = e.sampled.proved_over_observed.map(|t| format!("{:.2}", t)).unwrap_or_else(|| "no error".into());
                    let _ = writeln!(s, "| `{}` | {} | {} | {} | {} | {} | {} |", e.output, bound, b.status, b.dominant.join("; ").replace('|', "\\|"), e.sampled.elements, e.sampled.violations, tight);
                }
                let notes: Vec<String> = k.errors.iter().filter(|e| !e.bound.note.is_empty()).map(|e| format!("- `{}`: {}", e.output, e.bound.note)).collect();
                if !notes.is_empty() {
                    let _ = writeln!(s, "\n{}\n", notes.join("\n"));
                }
            }
            if !k.candidates.is_empty() {
                let _ = writeln!(s, "Tuning candidates (the tuner times only proved ones; a rejected one has no code):\n\n| candidate | schedule | guard | status | obligations proved / why rejected |\n|---|---|---|---|---|");
                for c in &k.candidates {
                    let detail = if c.status == "proved" { c.proved.to_string() } else { c.reason.replace('|', "\\|") };
                    let _ = writeln!(s, "| `{}` | {} | {} | {} | {} |", c.name, c.schedule, if c.guard.is_empty() { "-".to_string() } else { format!("`{}`", c.guard) }, c.status, detail);
                }
                let _ = writeln!(s);
            }
            let _ = writeln!(s, "| obligation | status | seconds | decided |\n|---|---|---:|---|");
            for o in &k.obligations {
                // Like the times, where an outcome came from varies between
                // runs: redacted output leaves it out.
                let decided = match (redact_times, o.cached) {
                    (true, _) => "[run]",
                    (false, true) => "earlier (cache)",
                    (false, false) => "this run",
                };
                let _ = writeln!(s, "| {}: {} | {} | {} | {} |", o.kind, o.description.replace('|', "\\|"), o.status, time(o.seconds, redact_times), decided);
            }
        }
        let _ = writeln!(s, "\n## Evidence\n");
        for e in &self.evidence {
            let _ = writeln!(s, "- {}", e);
        }
        let _ = writeln!(s, "\n## Not claimed\n");
        for e in &self.non_claims {
            let _ = writeln!(s, "- {}", e);
        }
        s
    }

    /// The recorded run's section: per kernel, the bound's form and the
    /// share of its launches a proved bound covered.
    fn write_run(&self, s: &mut String, run: &RunCoverage) {
        let (launches, covered) = run.totals();
        let share = |l: u64, c: u64| if l == 0 { "n/a".to_string() } else { format!("{:.2}%", 100.0 * c as f64 / l as f64) };
        let _ = writeln!(s, "\n## Launches of a recorded run\n");
        let _ = writeln!(s, "Contract monitor `{}` on {}: {} launches, {} covered by a proved bound ({}).\n", run.mode, run.device, launches, covered, share(launches, covered));
        let _ = writeln!(s, "| kernel | bound | launches | covered | share | first launch outside |\n|---|---|---:|---:|---:|---|");
        for (name, c) in &run.kernels {
            let form = match self.kernels.iter().find(|k| &k.name == name) {
                Some(k) if k.errors.iter().any(|e| e.bound.form == "magnitude") => "magnitude formula",
                Some(k) if k.domain.is_empty() => "no domain",
                Some(_) => "domain",
                None => "(not in this report)",
            };
            let outside = match (&c.first_outside, c.unmeasured) {
                (Some(w), _) => w.replace('|', "\\|"),
                (None, 0) => String::new(),
                (None, n) => format!("{} launches not measured: {}", n, c.why_unmeasured.as_deref().unwrap_or("unknown").replace('|', "\\|")),
            };
            let _ = writeln!(s, "| `{}` | {} | {} | {} | {} | {} |", name, form, c.launches, c.covered, share(c.launches, c.covered), outside);
        }
    }

    /// booktabs tables: the summary and the observed errors.
    pub fn to_latex(&self, redact_times: bool) -> String {
        let esc = |t: &str| t.replace('\\', "\\textbackslash{}").replace('_', "\\_").replace('&', "\\&").replace('%', "\\%").replace('#', "\\#");
        let mut s = String::new();
        let _ = writeln!(s, "% Generated by {}; \\input this file (needs \\usepackage{{booktabs}}).", esc(&self.tool));
        let _ = writeln!(s, "\\begin{{table}}[t]\n\\centering\n\\caption{{Obligations proved per kernel ({}; target {}).}}\n\\label{{tab:tokitai-obligations}}", esc(&self.solver), esc(&self.target));
        let _ = writeln!(s, "\\begin{{tabular}}{{llrrrr}}\n\\toprule\nKernel & Schedule & Proved & Refuted & Unknown & Solver (s) \\\\\n\\midrule");
        for k in &self.kernels {
            let _ = writeln!(s, "\\texttt{{{}}} & {} & {} & {} & {} & {} \\\\", esc(&k.name), esc(&k.schedule), k.count("proved"), k.count("refuted"), k.count("unknown"), time(k.seconds(), redact_times).replace('[', "{[").replace(']', "]}"));
        }
        let _ = writeln!(s, "\\bottomrule\n\\end{{tabular}}\n\\end{{table}}\n");
        let _ = writeln!(s, "\\begin{{table}}[t]\n\\centering\n\\caption{{Observed error of the dtype-faithful CPU mirror against the exact oracle, relative to the declared tolerance.}}\n\\label{{tab:tokitai-errors}}");
        let _ = writeln!(s, "\\begin{{tabular}}{{llrrrr}}\n\\toprule\nKernel & Output & Abs. tol. & Rel. tol. & Max abs. error & Error/tol. \\\\\n\\midrule");
        for k in &self.kernels {
            for e in &k.errors {
                let _ = writeln!(s, "\\texttt{{{}}} & \\texttt{{{}}} & {} & {} & {} & {:.3} \\\\", esc(&k.name), esc(&e.output), sci(e.tolerance_abs), sci(e.tolerance_rel), sci(e.max_abs_error), e.worst_ratio);
            }
        }
        let _ = writeln!(s, "\\bottomrule\n\\end{{tabular}}\n\\end{{table}}");
        let _ = writeln!(s, "\n\\begin{{table}}[t]\n\\centering\n\\caption{{Derived error bounds (abs + rel $|x|$, over every launch that meets \\texttt{{requires}}) and their tightness on sampled inputs.}}\n\\label{{tab:tokitai-bounds}}");
        let _ = writeln!(s, "\\begin{{tabular}}{{llrrlrr}}\n\\toprule\nKernel & Output & Bound abs. & Bound rel. & Status & Sampled & Proved/obs. \\\\\n\\midrule");
        for k in &self.kernels {
            for e in &k.errors {
                let tight = e.sampled.proved_over_observed.map(|t| format!("{:.2}", t)).unwrap_or_else(|| "--".into());
                let _ = writeln!(s, "\\texttt{{{}}} & \\texttt{{{}}} & {} & {} & {} & {} & {} \\\\", esc(&k.name), esc(&e.output), e.bound.abs.map(sci).unwrap_or_else(|| "--".into()), e.bound.rel.map(sci).unwrap_or_else(|| "--".into()), esc(&e.bound.status), e.sampled.elements, tight);
            }
        }
        let _ = writeln!(s, "\\bottomrule\n\\end{{tabular}}\n\\end{{table}}");
        if let Some(m) = &self.mutation {
            let _ = writeln!(s, "\n\\begin{{table}}[t]\n\\centering\n\\caption{{Mutation testing of the verifier: {} of {} injected bugs refuted.}}", m.refuted, m.mutants);
            let _ = writeln!(s, "\\begin{{tabular}}{{lrr}}\n\\toprule\noperator & mutants & refuted \\\\\n\\midrule");
            for (op, n, r) in &m.by_operator {
                let _ = writeln!(s, "{} & {} & {} \\\\", esc(op), n, r);
            }
            let _ = writeln!(s, "\\bottomrule\n\\end{{tabular}}\n\\end{{table}}");
        }
        s
    }

    /// Log-log scatter, one point per kernel output: the largest observed
    /// error against the bound proved for that element's launch, at the
    /// element closest to its bound. Every point must lie below the
    /// diagonal (sound); its distance from it is the tightness. Outputs
    /// whose every sampled error was 0 are listed instead.
    pub fn bounds_plot_svg(&self) -> String {
        let pts: Vec<(String, f64, f64)> = self
            .kernels
            .iter()
            .flat_map(|k| k.errors.iter().map(move |e| (format!("{}.{}", k.name, e.output), e)))
            .filter_map(|(n, e)| {
                let t = e.sampled.proved_over_observed?;
                let observed = e.sampled.max_error;
                (observed > 0.0 && t.is_finite()).then_some((n, observed, observed * t))
            })
            .collect();
        let exact: Vec<String> = self.kernels.iter().flat_map(|k| k.errors.iter().filter(|e| e.sampled.proved_over_observed.is_none()).map(move |e| format!("{}.{}", k.name, e.output))).collect();
        let notes: Vec<String> = exact.chunks(3).map(|c| format!("no error observed: {}", c.join(", "))).collect();
        crate::plot::loglog_scatter("Proved bound against largest observed error (below the diagonal = sound)", "observed |mirror - exact|", "proved bound", &pts, &notes)
    }

    /// Horizontal bars: worst observed error as a fraction of the tolerance,
    /// per kernel output (1.0 is the declared tolerance).
    pub fn error_plot_svg(&self) -> String {
        let rows: Vec<(String, f64)> = self.kernels.iter().flat_map(|k| k.errors.iter().map(move |e| (format!("{}.{}", k.name, e.output), e.worst_ratio))).collect();
        crate::plot::bars("Observed error / declared tolerance (mirror vs exact oracle)", &rows, 1.0, "tolerance")
    }
}
