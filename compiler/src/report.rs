//! `tokitaic verify --report`: what was proved, what was measured, on which
//! compiler, solver and target, and what is not claimed.

use crate::build::Artifacts;
use crate::codegen::manifest::{fingerprint, sha256_hex};
use crate::eval::{self, Mode};
use crate::kir::KernelIr;
use crate::tir::{Kernel, Param, TensorRole};
use tokitai_contracts::report::*;

/// Reproducible data: seeded from the kernel's name.
use crate::rng::SplitMix as Rng;

use crate::soundness::{draw_inputs, sample_launch};

/// Observed error of the mirror against the exact oracle, per output.
fn observed_errors(k: &Kernel, ir: &KernelIr, source: &str) -> (Vec<ErrorRow>, Vec<String>) {
    let mut rng = Rng::seeded(&k.name);
    let outputs: Vec<usize> = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).filter(|t| k.tensors[*t].role != TensorRole::Input).collect();
    let mut rows: Vec<ErrorRow> = outputs
        .iter()
        .map(|t| {
            let (a, r) = k.tolerance_of(*t).map(|x| (x.abs, x.rel)).unwrap_or((0.0, 0.0));
            ErrorRow {
                output: k.tensors[*t].name.clone(),
                tolerance_abs: a,
                tolerance_rel: r,
                max_abs_error: 0.0,
                worst_ratio: 0.0,
                elements: 0,
                within: true,
                bound: BoundRow { status: "none".into(), form: "none".into(), abs: None, rel: None, dominant: vec![], note: "no tolerance declared".into() },
                sampled: SampledRow { elements: 0, violations: 0, proved_over_observed: None, max_error: 0.0 },
            }
        })
        .collect();
    let mut shapes = Vec::new();
    let observe_start = std::time::Instant::now();
    for scale in [7, 33, 65, 130] {
        let Some((dims, scalars)) = sample_launch(k, &mut rng, scale) else { continue };
        let inputs = draw_inputs(k, &dims, &mut rng, 1.0, |rng, ty, lo, hi, n| {
            let mut v: Vec<f64> = (0..n).map(|_| eval::to_storage(ty, lo + (hi - lo) * rng.unit())).collect();
            // The domain's edges too.
            if n >= 2 {
                v[0] = eval::to_storage(ty, lo);
                v[1] = eval::to_storage(ty, hi);
            }
            v
        });
        let (Ok(exact), Ok(mirror)) = (eval::run(k, ir, Mode::Exact, &dims, &scalars, &inputs), eval::run(k, ir, Mode::Mirror, &dims, &scalars, &inputs)) else { continue };
        shapes.push(k.dims.iter().zip(&dims).map(|(d, v)| format!("{}={}", d.name, v)).collect::<Vec<_>>().join(","));
        // A tolerance in magnitudes is evaluated at this launch.
        let at = crate::accuracy::magnitude::symbol_values(k, &dims, &scalars, &inputs);
        for ((row, t), (e, m)) in rows.iter_mut().zip(&outputs).zip(exact.iter().zip(&mirror)) {
            let abs = k.tolerance_of(*t).map(|x| crate::accuracy::magnitude::tolerance_poly(k, x).eval(&at)).unwrap_or(row.tolerance_abs);
            for (x, y) in e.iter().zip(m) {
                let err = (x - y).abs();
                let allowed = abs + row.tolerance_rel * x.abs();
                let ratio = if err == 0.0 { 0.0 } else if allowed == 0.0 { f64::INFINITY } else { err / allowed };
                row.max_abs_error = row.max_abs_error.max(err);
                row.worst_ratio = row.worst_ratio.max(ratio);
                row.elements += 1;
                row.within &= err <= allowed || err == 0.0;
            }
        }
    }
    crate::timings::record(&ir.name, "report-observe", observe_start.elapsed().as_secs_f64());
    bounds(k, ir, source, &mut rows);
    (rows, shapes)
}

/// `observed_errors`, kept in the proof cache: the sampling is seeded, so
/// it is a function of the kernel, its schedule, the source (the bound's
/// notes cite its lines) and the number of samples.
fn cached_observed_errors(k: &Kernel, ir: &KernelIr, source: &str) -> (Vec<ErrorRow>, Vec<String>) {
    let key = || crate::cache::Key::builder("report-errors").part(crate::cache::fingerprint(k)).part(crate::cache::fingerprint(ir)).part(source).part(report_samples().to_string()).finish();
    crate::cache::cached(key, |_| true, || observed_errors(k, ir, source)).0
}

/// Elements sampled per kernel for the report's soundness columns (the
/// test suite samples 10^6; `TOKITAI_REPORT_SAMPLES` overrides).
fn report_samples() -> u64 {
    std::env::var("TOKITAI_REPORT_SAMPLES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// The derived bound of each output, and its soundness and tightness on
/// sampled inputs.
fn bounds(k: &Kernel, ir: &KernelIr, source: &str, rows: &mut [ErrorRow]) {
    let line = |lo: usize| source.get(..lo).map(|t| t.matches('\n').count() + 1).unwrap_or(0);
    let sampled = crate::timings::time(&ir.name, "report-sample", || crate::soundness::sample(k, ir, report_samples()));
    if k.uses_magnitudes() {
        magnitude_bounds(k, ir, rows);
    } else {
        domain_bounds(k, ir, rows, &line);
    }
    for row in rows.iter_mut() {
        if let Some(sm) = sampled.iter().find(|s| s.output == row.output) {
            row.sampled = SampledRow { elements: sm.elements, violations: sm.violations, proved_over_observed: (sm.worst_fraction > 0.0).then(|| sm.tightness()), max_error: sm.max_error };
        }
    }
}

/// Bounds in launch-time magnitudes: the derived formula (in the note, with
/// the conditions it needs), its `rel` part; `abs` has no single value.
fn magnitude_bounds(k: &Kernel, ir: &KernelIr, rows: &mut [ErrorRow]) {
    use crate::accuracy::magnitude::{self, Verdict};
    let acc = crate::timings::time(&ir.name, "report-derive", || magnitude::analyze(k, ir));
    for row in rows.iter_mut() {
        let Some(o) = acc.outputs.iter().find(|o| o.output == row.output) else { continue };
        row.bound = match (&o.failure, &o.verdict) {
            (Some((msg, _)), _) => BoundRow { status: "unknown".into(), form: "magnitude".into(), abs: None, rel: None, dominant: vec![], note: format!("no bound derived: {}", msg) },
            (None, v) => {
                let conditions: Vec<String> = o.conditions.iter().map(|c| format!("{} <= {:e} ({})", acc.show(&c.poly), c.limit, c.what)).collect();
                BoundRow {
                    status: if matches!(v, Some(Verdict::Within(_))) { "proved".into() } else { "exceeds".into() },
                    form: "magnitude".into(),
                    abs: None,
                    rel: Some(o.rel),
                    dominant: vec![],
                    note: format!("abs {} at every launch{}", acc.show(&o.abs), if conditions.is_empty() { String::new() } else { format!(" while {}", conditions.join(", ")) }),
                }
            }
        };
    }
}

/// Bounds over the declared numeric `domain`.
fn domain_bounds(k: &Kernel, ir: &KernelIr, rows: &mut [ErrorRow], line: &dyn Fn(usize) -> usize) {
    let acc = crate::timings::time(&ir.name, "report-derive", || crate::accuracy::analyze(k, ir));
    for row in rows.iter_mut() {
        let Some(o) = acc.outputs.iter().find(|o| o.output == row.output) else { continue };
        row.bound = match (&o.failure, o.envelope(), o.worst()) {
            (Some((msg, _, at)), _, _) => BoundRow { status: "unknown".into(), form: "domain".into(), abs: None, rel: None, dominant: vec![], note: format!("no bound derived: {} (at {})", msg, at) },
            (None, Some((a, r)), Some((i, ratio, x))) => BoundRow {
                status: if o.within_tolerance() { "proved".into() } else { "exceeds".into() },
                form: "domain".into(),
                abs: Some(a),
                rel: Some(r),
                dominant: acc.shares(&o.regions[i], x).iter().filter(|s| s.fraction >= 0.005).take(3).map(|s| format!("{} at line {} ({:.0}%)", s.label, line(s.span.lo), s.fraction * 100.0)).collect(),
                note: format!("closest to the tolerance at {} ({:.2} of it)", o.regions[i].describe(), ratio),
            },
            _ => BoundRow { status: "unknown".into(), form: "domain".into(), abs: None, rel: None, dominant: vec![], note: String::new() },
        };
    }
}

/// A training run's `contracts.json`; the error names the file and what is
/// wrong with it.
pub fn read_run_coverage(path: &std::path::Path) -> Result<tokitai_contracts::report::RunCoverage, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {}", path.display(), e))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not a run's contracts.json: {}", path.display(), e))
}

/// Kernel `i`'s tuning space: its emitted variants with the obligations
/// each proved, then the rejected candidates with the reason.
fn candidate_rows(arts: &Artifacts, i: usize) -> Vec<CandidateRow> {
    let k = &arts.program.kernels[i];
    let proved = |name: &str| arts.variant_proofs.iter().find(|p| p.kernel == name).map(|p| p.obligations.iter().filter(|o| o.outcome.status() == "proved").count()).unwrap_or(0);
    let mut rows: Vec<CandidateRow> = arts.variants[i]
        .iter()
        .map(|v| CandidateRow { name: v.ir.name.clone(), schedule: v.ir.params_text(), guard: v.guard.map(|g| g.text(k)).unwrap_or_default(), status: "proved".into(), proved: proved(&v.ir.name), reason: String::new() })
        .collect();
    rows.extend(arts.rejected[i].iter().map(|r| CandidateRow { name: r.name.clone(), schedule: r.params.clone(), guard: String::new(), status: "rejected".into(), proved: 0, reason: r.reason.clone() }));
    rows
}

/// A device's tuning table (written by the runtime's tuner, e.g.
/// `tokitai-bench-kernels --tune`), as the report shows it: each kernel's
/// entries, marked current where the table's fingerprint is that of the
/// candidates compiled here (the same sources the runtime hashes).
pub fn read_tuning(path: &std::path::Path, files: &[Artifacts]) -> Result<TuningSummary, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {}", path.display(), e))?;
    let table = tokitai_contracts::tuning::TableFile::parse(&bytes).map_err(|e| format!("{}: {}", path.display(), e))?;
    let mut kernels = Vec::new();
    for (name, kt) in &table.kernels {
        let here = files.iter().find_map(|a| a.program.kernels.iter().position(|k| &k.name == name).map(|i| (a, i)));
        let current = here.is_some_and(|(a, i)| a.fingerprints[i] == kt.fingerprint);
        let classes = kt
            .classes
            .iter()
            .map(|(class, c)| {
                let timed = c.candidates.iter().filter(|x| x.ms.is_some()).count();
                TunedClass { class: class.clone(), choice: c.choice.clone(), default: c.default.clone(), speedup: c.speedup(), timed, untimed: c.candidates.len() - timed }
            })
            .collect();
        kernels.push(TunedKernel { name: name.clone(), current, classes });
    }
    Ok(TuningSummary { device: table.device, driver: table.driver, kernels })
}

/// Build the report of every compiled file.
pub fn build(files: &[Artifacts], target: &str, mutation: Option<MutationSummary>) -> Report {
    let solver = tokitai_contracts::solver_version();
    let mut kernels = Vec::new();
    for arts in files {
        let source_sha = sha256_hex(arts.source.text.as_bytes());
        for (i, ((k, ir), proofs)) in arts.program.kernels.iter().zip(&arts.kernels).zip(&arts.proofs).enumerate() {
            let (errors, shapes) = cached_observed_errors(k, ir, &arts.source.text);
            kernels.push(KernelReport {
                name: k.name.clone(),
                file: arts.source.name.clone(),
                doc: k.doc.clone(),
                schedule: ir.schedule.name().to_string(),
                index_type: ir.index_ty.to_string(),
                requires: k.requires.iter().map(|c| c.text()).collect(),
                ensures: k.ensures.iter().map(|c| c.text()).collect(),
                domain: k.domain.iter().map(|d| d.text.clone()).chain(k.relations.iter().map(|r| r.text.clone())).collect(),
                fingerprints: Fingerprints {
                    source_sha256: source_sha.clone(),
                    compiler_version: crate::VERSION.to_string(),
                    solver_version: solver.clone(),
                    target: target.to_string(),
                    kernel: fingerprint(&source_sha, target, &ir.target.compile_flags(), &k.name),
                },
                obligations: proofs
                    .obligations
                    .iter()
                    .map(|o| ObligationRow { kind: o.obligation.kind.name().to_string(), description: o.obligation.description.clone(), status: o.outcome.status().to_string(), seconds: o.outcome.seconds(), cached: o.cached })
                    .collect(),
                errors,
                shapes_sampled: shapes,
                candidates: candidate_rows(arts, i),
            });
        }
    }
    Report {
        schema_version: SCHEMA_VERSION,
        tool: format!("tokitai-compiler {}", crate::VERSION),
        solver,
        target: target.to_string(),
        kernels,
        mutation,
        run: None,
        tuning: None,
        evidence: vec![
            "Every obligation is generated from KernelIr, the object the HIP printer prints, and discharged by Z3 for every launch that meets `requires` (symbolic dims, grid, block and thread ids).".into(),
            "Thread-distributing loops use loop-form lemmas (a grid-stride, block-stride or thread-stride variable determines its thread; together the threads run the whole range), applied only to loops whose exact form Z3 confirmed.".into(),
            "Coverage is proved through the schedule's witness (the inverse map from an element to the execution that writes it), checked against the exact loop encoding.".into(),
            "Observed errors compare the dtype-faithful CPU mirror (the kernel's dtypes, fused multiply-adds and reduction order) with the exact f64 oracle on deterministic random inputs of several shapes, domain edges included.".into(),
            "Tolerances are proved (obligation `tolerance`): a rigorous bound on |kernel - exact| is derived by interval range analysis and error propagation with every rounding of the kernel's dtypes, its fused multiply-adds, the summation order KernelIr records (sequential chains, block butterflies) and the target's documented library accuracy as named assumptions; dims that change the bound are split into ranges at most 12.5% wide and input values into pieces where that helps; Z3 then checks bound <= tolerance in exact rational arithmetic over every region.".into(),
            "Each bound is checked against sampled inputs (random, domain ends, tiny values, values with every mantissa bit set): no sampled error may exceed the bound derived for its launch's dims; the table gives proved/observed at the element closest to its bound.".into(),
        ],
        non_claims: vec![
            "The error analysis reads each value's expression from the typed IR and its summation order and fusion from KernelIr; that the printed loops follow that order is checked by the reduction-complete obligation and by bit-exact mirror tests, not proved. The library accuracy figures (CUDA's, ROCm's plus the host library's) are vendor documentation from extensive but not exhaustive testing, taken as assumptions.".into(),
            "Inputs outside the declared `domain` (its ranges and its relations, such as adamw's `m * m <= 64.0 * v`) are not covered; the runtime's contract monitor counts the launches that leave it.".into(),
            "Errors in this report are sampled on the CPU mirror; the GPU's own errors are sampled through the device tool (bench/RESULTS.md).".into(),
            "Functional correctness beyond the listed obligations (that the kernel computes its statement) is tested against the oracles, not proved.".into(),
            "The HIP and CUDA compilers themselves are trusted, as are the launcher's checks of `requires`, tensor lengths and 16-byte alignment of vector paths.".into(),
            "Tuning candidates that print CUDA's fast intrinsics (`_fi`: `__expf`, `__fdividef`) are proved under NVIDIA's documented intrinsic error figures (`2 + floor(1.173 |x|)` ulp and 2 ulp, both flushing subnormals), taken as named assumptions like the library's; they are offered only for tolerances over a numeric domain and were checked on the GPU by the soundness sampler (bench/RESULTS.md). The tuner's choice among proved candidates is a measurement, not a claim.".into(),
            "Bulk tensor copies (TMA, the `_ws` contractions on sm_90) are modelled by the PTX ISA's semantics, taken as a named assumption: box element (r, c) is the tensor's element (outer + r, inner + c) where that lies inside the tensor map's extents, else zero, landing at its 128-byte-swizzled place and completing its bytes on the named barrier; the unit reads a swizzled descriptor at the place the same pattern gives. That the map describes the launch's own buffer and dims is the runtime's (it builds the map at each launch from the tensor it passes, exactly where the kernel takes the copies: the map's alignment requirements are proved to be the kernel's own test); the descriptor and swizzle layouts were checked bit for bit on the GPU, not proved from the hardware.".into(),
            "The contract monitor's observation of a kernel's outputs (each store folds its value into the thread's smallest, largest and non-finite count; each block merges them into the launch's observation words at the end of the body) is proved in bounds, and reached by every thread of the block, as a barrier is; that every store folds its value is how the printer prints a store to an observed output (checked on every example's text by a test, not proved), the merge's shuffles, its 32 shared entries and its atomics are the prelude's code (`tk_observe_flush`) under CUDA's and HIP's documented semantics, and the ranges read back were checked against the data on the GPU (tokitai-gpucheck --monitor). Element-wise kernels observe themselves; a row reduction or a contraction and each of its keyed variants has an observing twin (`_obs`, proved like every variant, not a tuning candidate; none for the warp-specialised contractions, whose outputs are probed) that a launch takes in its place only while the monitor hands it observation words, so a launch with the monitor off runs the unobserved code.".into(),
            "Sheaf gluing (`tokitai-glue`) decides each overlap from `overlap_residual`'s computed residual and the bound proved for that launch: the decision is as sound as that bound. The site's values are rounded to f16 when the file is read (the residual is of the rounded sections), the site's validation and obstructions are host code tested against hand-built sites, and the global section copies values, computing nothing.".into(),
            "The p-adic valuation-skip product (`examples/ops/padic.tk`, issue 23): obligation `skip-exact` proves, for each `skip_if` the KernelIr prints, that its condition implies vp(a) + vp(b) >= k over the product's factors, and for the declared modulus that the capped valuation means divisibility and p^i | a, p^(k-i) | b give p^k | a b; obligation `no-overflow` that products and sums of residues fit in 64 bits (the prelude uses 32 where q <= 2^16 for products and q <= 2^31 for sums, where they fit by the same bound on the operands; that choice is not proved). That `tk_vp`/`tk_vp2`, `tk_mulmod` and `tk_addmod` (residue.hip) compute the valuation, product and sum as the chain and the terms say is the prelude's code under the vendors' documented integer semantics, tested against the host on the GPU (tokitai-gpucheck, adversarial inputs), not proved. The certificate's counts (`evaluated`, `skipped`, `min_skipped`, `margin`) are plain integer reductions, tested against the host's, not proved; the dense and skipping products run on the tiled contraction schedule; the skipping ones skip per tile (a thread's slab where the minima of its staged valuation tiles sum to k), each skip proved on the printed KernelIr (`skip-exact`: the valuation tile is staged with its operand tile, each minimum covers every slot the skipped products read, so every skipped product has vp(a) + vp(b) >= k); that the loader writes every slot the products read is not proved (for any tiled schedule). Input entries outside [0, p^k) are refused by `tokitai-padic` and `padic::matmul` on the host; a raw launch does not check them.".into(),
            "Kernels generated for AMD (hip-gfx90a, and on hip-gfx942 the MFMA schedule) are proved and compiled by hipcc, never run: no AMD GPU is available, so neither their results nor the MFMA's accumulation (taken to satisfy the same named matrix-unit assumption as NVIDIA's) has been checked on the hardware. gfx942's text is compiled for gfx90a, the newest architecture the installed hipcc knows (same MFMA builtins). On gfx90a contractions stay on the SIMT schedule: its MFMA flushes subnormal f16 and bf16 operands to zero (AMD's MIOpen documentation).".into(),
        ],
    }
}
