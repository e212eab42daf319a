//! `tokitaic verify --report`: what was proved, what was measured, on which
//! compiler, solver and target, and what is not claimed.

use crate::build::Artifacts;
use crate::codegen::manifest::{fingerprint, sha256_hex};
use crate::eval::{self, Mode};
use crate::kir::KernelIr;
use crate::tir::{Contract, Kernel, Param, TensorRole};
use tokitai_contracts::report::*;

/// Reproducible data: seeded from the kernel's name.
use crate::rng::SplitMix as Rng;

/// Dims and scalars that satisfy `requires`, drawn at random.
fn sample_launch(k: &Kernel, rng: &mut Rng, scale: i64) -> Option<(Vec<i64>, Vec<f64>)> {
    for attempt in 0..400 {
        let mut dims = vec![1i64; k.dims.len()];
        for d in 0..dims.len() {
            let class = k.dim_class[d];
            dims[d] = match k.dim_value[d] {
                Some(v) => v,
                None if class < d => dims[class],
                None => {
                    let upper = k.dim_upper_bound(crate::tir::Dim::Sym(d)).unwrap_or(i64::MAX);
                    rng.range(1, upper.min(scale + attempt / 8).max(1))
                }
            };
        }
        for d in 0..dims.len() {
            dims[d] = dims[k.dim_class[d]];
        }
        let scalars: Vec<f64> = k
            .scalars
            .iter()
            .enumerate()
            .map(|(i, sc)| {
                let (lo, hi) = k.domain.iter().find(|x| x.scalar == Some(i)).map(|x| (x.lo, x.hi)).unwrap_or((0.5, 1.0));
                eval::to_storage(sc.dtype, lo + (hi - lo) * rng.unit())
            })
            .collect();
        let ok = k.requires.iter().all(|c| match c {
            Contract::Pred { expr, .. } => eval::holds(k, expr, &dims, &scalars),
            Contract::Range { .. } => true,
        });
        if ok {
            return Some((dims, scalars));
        }
    }
    None
}

/// Observed error of the mirror against the exact oracle, per output.
fn observed_errors(k: &Kernel, ir: &KernelIr) -> (Vec<ErrorRow>, Vec<String>) {
    let mut rng = Rng::seeded(&k.name);
    let outputs: Vec<usize> = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).filter(|t| k.tensors[*t].role != TensorRole::Input).collect();
    let mut rows: Vec<ErrorRow> = outputs
        .iter()
        .map(|t| {
            let (a, r) = k.tolerance_of(*t).map(|x| (x.abs, x.rel)).unwrap_or((0.0, 0.0));
            ErrorRow { output: k.tensors[*t].name.clone(), tolerance_abs: a, tolerance_rel: r, max_abs_error: 0.0, worst_ratio: 0.0, elements: 0, within: true }
        })
        .collect();
    let mut shapes = Vec::new();
    for scale in [7, 33, 65, 130] {
        let Some((dims, scalars)) = sample_launch(k, &mut rng, scale) else { continue };
        let mut inputs = Vec::new();
        for p in &k.params {
            let Param::Tensor(t) = p else { continue };
            let info = &k.tensors[*t];
            let n: i64 = info.shape.iter().map(|d| match d {
                crate::tir::Dim::Sym(id) => dims[*id],
                crate::tir::Dim::Lit(v) => *v,
            }).product();
            let vals: Vec<f64> = if info.role == TensorRole::Output {
                Vec::new()
            } else if let Some(r) = &info.value_range {
                let lo = eval::int_value(k, &r.lo, &dims).unwrap_or(0);
                let hi = eval::int_value(k, &r.hi, &dims).unwrap_or(1);
                let hi = if r.hi_closed { hi } else { hi - 1 };
                (0..n).map(|_| rng.range(lo, hi) as f64).collect()
            } else {
                let (lo, hi) = k.domain.iter().find(|d| d.tensor == Some(*t)).map(|d| (d.lo, d.hi)).unwrap_or((-1.0, 1.0));
                let mut v: Vec<f64> = (0..n).map(|_| eval::to_storage(info.dtype, lo + (hi - lo) * rng.unit())).collect();
                // The domain's edges too.
                if n >= 2 {
                    v[0] = eval::to_storage(info.dtype, lo);
                    v[1] = eval::to_storage(info.dtype, hi);
                }
                v
            };
            inputs.push(vals);
        }
        let (Ok(exact), Ok(mirror)) = (eval::run(k, ir, Mode::Exact, &dims, &scalars, &inputs), eval::run(k, ir, Mode::Mirror, &dims, &scalars, &inputs)) else { continue };
        shapes.push(k.dims.iter().zip(&dims).map(|(d, v)| format!("{}={}", d.name, v)).collect::<Vec<_>>().join(","));
        for (row, (e, m)) in rows.iter_mut().zip(exact.iter().zip(&mirror)) {
            for (x, y) in e.iter().zip(m) {
                let err = (x - y).abs();
                let allowed = row.tolerance_abs + row.tolerance_rel * x.abs();
                let ratio = if err == 0.0 { 0.0 } else if allowed == 0.0 { f64::INFINITY } else { err / allowed };
                row.max_abs_error = row.max_abs_error.max(err);
                row.worst_ratio = row.worst_ratio.max(ratio);
                row.elements += 1;
                row.within &= err <= allowed || err == 0.0;
            }
        }
    }
    (rows, shapes)
}

/// Build the report of every compiled file.
pub fn build(files: &[Artifacts], target: &str, mutation: Option<MutationSummary>) -> Report {
    let solver = tokitai_contracts::solver_version();
    let mut kernels = Vec::new();
    for arts in files {
        let source_sha = sha256_hex(arts.source.text.as_bytes());
        for ((k, ir), proofs) in arts.program.kernels.iter().zip(&arts.kernels).zip(&arts.proofs) {
            let (errors, shapes) = observed_errors(k, ir);
            kernels.push(KernelReport {
                name: k.name.clone(),
                file: arts.source.name.clone(),
                doc: k.doc.clone(),
                schedule: ir.schedule.name().to_string(),
                index_type: ir.index_ty.to_string(),
                requires: k.requires.iter().map(|c| c.text()).collect(),
                ensures: k.ensures.iter().map(|c| c.text()).collect(),
                domain: k.domain.iter().map(|d| d.text.clone()).collect(),
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
                    .map(|o| ObligationRow { kind: o.obligation.kind.name().to_string(), description: o.obligation.description.clone(), status: o.outcome.status().to_string(), seconds: o.outcome.seconds() })
                    .collect(),
                errors,
                shapes_sampled: shapes,
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
        evidence: vec![
            "Every obligation is generated from KernelIr, the object the HIP printer prints, and discharged by Z3 for every launch that meets `requires` (symbolic dims, grid, block and thread ids).".into(),
            "Thread-distributing loops use loop-form lemmas (a grid-stride, block-stride or thread-stride variable determines its thread; together the threads run the whole range), applied only to loops whose exact form Z3 confirmed.".into(),
            "Coverage is proved through the schedule's witness (the inverse map from an element to the execution that writes it), checked against the exact loop encoding.".into(),
            "Observed errors compare the dtype-faithful CPU mirror (the kernel's dtypes, fused multiply-adds and reduction order) with the exact f64 oracle on deterministic random inputs of several shapes, domain edges included.".into(),
        ],
        non_claims: vec![
            "Tolerances are not proved: a derived error bound is a later issue; the errors above are measured, not bounded.".into(),
            "Errors are measured on the CPU mirror, not on a GPU, whose library functions (expf, tanhf) differ by a few ulp.".into(),
            "Functional correctness beyond the listed obligations (that the kernel computes its statement) is tested against the oracles, not proved.".into(),
            "The HIP and CUDA compilers themselves are trusted, as are the launcher's checks of `requires`, tensor lengths and 16-byte alignment of vector paths.".into(),
        ],
    }
}
