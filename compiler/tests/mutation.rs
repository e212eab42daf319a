//! Mutation testing of the verifier: bugs injected into the `KernelIr` of
//! every example kernel (off-by-one bounds, dropped guards, wrong strides,
//! swapped dims, missing and misplaced barriers, overlapping tiles, a
//! skipped k-block) must every one be refuted, and there must be at least
//! 100 of them.

mod common;

use common::{compile_example, edit_fragment_loads};
use std::collections::BTreeMap;
use std::path::Path;
use tokitai_compiler::build::compile_source;
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;
use tokitai_compiler::verify::first_refutation;
use tokitai_compiler::verify::mutate::run_all;
use tokitai_contracts::z3_backend::Config;

/// Apply `f` to every statement of `body`, nested ones included; how many
/// it changed (it answers true for those).
fn edit(body: &mut [tokitai_compiler::kir::KStmt], f: &dyn Fn(&mut tokitai_compiler::kir::KStmt) -> bool) -> usize {
    use tokitai_compiler::kir::KStmt;
    body.iter_mut()
        .map(|s| {
            usize::from(f(s))
                + match s {
                    KStmt::For { body, .. } => edit(body, f),
                    KStmt::If { then, els, .. } => edit(then, f) + edit(els, f),
                    _ => 0,
                }
        })
        .sum()
}

#[test]
fn every_injected_bug_is_refuted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    files.sort();
    // Compiling verifies the unmutated kernels (they must be fully proved,
    // or the build fails), which also fills the solver's memo.
    let arts: Vec<_> = files
        .iter()
        .map(|f| compile_source(SourceFile::new(f.display().to_string(), std::fs::read_to_string(f).unwrap()), &Target::default_cuda()).unwrap_or_else(|e| panic!("{}", e)))
        .collect();
    let results = run_all(&arts.iter().flat_map(|a| a.proved_kernels()).collect::<Vec<_>>(), &Config { timeout_ms: 5_000 });
    let mut per_operator: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (m, killed) in &results {
        let e = per_operator.entry(m.operator).or_default();
        e.0 += 1;
        e.1 += *killed as usize;
    }
    println!("{:<20} {:>8} {:>8}", "operator", "mutants", "refuted");
    for (op, (n, k)) in &per_operator {
        println!("{:<20} {:>8} {:>8}", op, n, k);
    }
    let survivors: Vec<&str> = results.iter().filter(|(_, k)| !k).map(|(m, _)| m.description.as_str()).collect();
    println!("kill rate: {}/{}", results.len() - survivors.len(), results.len());
    assert!(results.len() >= 100, "only {} mutants", results.len());
    // Every operator the issue names is exercised.
    for op in ["off-by-one bound", "off-by-one index", "dropped guard", "wrong stride", "swapped dims", "missing barrier", "misplaced barrier", "overlapping tiles", "skipped k-block", "swapped stage", "skip threshold one low", "unconditional skip"] {
        assert!(per_operator.get(op).is_some_and(|(n, _)| *n > 0), "no mutant of kind `{}`", op);
    }
    assert!(survivors.is_empty(), "{} mutants survived:\n{}", survivors.len(), survivors.join("\n"));
}

/// The mutation test can fail: a verifier that has lost an obligation lets
/// mutants through. Removing every loop's reduction tag (so the
/// reduction-complete obligations are not generated) must let the
/// "reduction loop starts one late" mutants of softmax survive.
#[test]
fn a_weakened_verifier_lets_mutants_survive() {
    let mut arts = compile_example("softmax.tk", &Target::default_cuda());
    for ir in &mut arts.kernels {
        ir.reduction_loops.clear();
    }
    let results = run_all(&arts.proved_kernels().collect::<Vec<_>>(), &Config { timeout_ms: 5_000 });
    let survivors: Vec<&str> = results.iter().filter(|(_, k)| !k).map(|(m, _)| m.description.as_str()).collect();
    assert!(survivors.iter().any(|d| d.contains("loop `c` starts one late")), "expected survivors, got {:?}", survivors);
}

/// What a user sees when a reduction loop is wrong: the diagnostic names the
/// obligation and the index nobody visits.
#[test]
fn a_reduction_mutant_is_reported_with_its_counterexample() {
    use tokitai_compiler::verify::{mutate::mutants, KernelProofs};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops/softmax.tk");
    let src = SourceFile::new("examples/ops/softmax.tk".to_string(), std::fs::read_to_string(&path).unwrap());
    let arts = compile_source(src.clone(), &Target::default_cuda()).unwrap();
    let (k, ir) = (&arts.program.kernels[0], &arts.kernels[0]);
    let m = mutants(k, ir).into_iter().find(|m| m.description.contains("loop `c` starts one late")).expect("the mutant exists");
    let refuted = first_refutation(k, &m.ir, &Config { timeout_ms: 5_000 }).expect("refuted");
    let proofs = KernelProofs { kernel: k.name.clone(), index_ty: ir.index_ty, index_note: None, obligations: vec![refuted] };
    let text: Vec<String> = proofs.diagnostics().iter().map(|d| d.render(&src)).collect();
    // Any thread of the block is a counterexample, and which one the solver
    // names depends on what it solved before (a cold cache and a warm one
    // differ): the thread is redacted, the rest is what the user sees.
    let text: Vec<String> = text.iter().map(|t| redact_thread(t)).collect();
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("mutant__softmax_reduction_starts_late", text.join("\n"));
    });
}

/// `thread 255;` as `thread [any];`.
fn redact_thread(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("thread ") {
        let (head, tail) = rest.split_at(at + "thread ".len());
        out.push_str(head);
        let digits = tail.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 {
            out.push_str("[any]");
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// The padding of a tensor-core slab is data to the bounds check: without
/// the footprint obligation, the B fragments shifted one instruction tile
/// along n (the last warp's into the padding of `b_tile`'s rows) stay in
/// bounds and survive; with it, the shift is refuted.
#[test]
fn a_fragment_read_shifted_into_the_padding_is_refuted_by_the_footprint_only() {
    use tokitai_compiler::kir::{Fragment, IExpr};
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let (k, mut shifted) = (&arts.program.kernels[0], arts.kernels[0].clone());
    assert!(shifted.shared.iter().any(|s| s.footprint.is_some()), "the schedule pads its slabs");
    assert!(edit_fragment_loads(&mut shifted.body, Fragment::B, &|base| base.add(IExpr::c(8))), "the schedule loads B fragments");
    let cfg = Config { timeout_ms: 5_000 };
    let refuted = first_refutation(k, &shifted, &cfg).expect("refuted with the footprint");
    assert!(refuted.obligation.description.contains("in the data of its rows"), "refuted by {}", refuted.obligation.description);
    for s in &mut shifted.shared {
        s.footprint = None;
    }
    assert!(first_refutation(k, &shifted, &cfg).is_none(), "without the footprint the shifted read must survive");
}

/// A fragment loaded by rows (`ldmatrix`) reads 16-byte rows: an A
/// fragment base one element off is refuted by the bounds obligation of
/// its rows (aligned to 8 elements, inside the slab's data).
#[test]
fn a_misaligned_fragment_row_is_refuted() {
    use tokitai_compiler::kir::{Fragment, IExpr};
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let (k, mut ir) = (&arts.program.kernels[0], arts.kernels[0].clone());
    assert!(edit_fragment_loads(&mut ir.body, Fragment::A, &|base| base.add(IExpr::c(1))), "the schedule loads A fragments");
    let refuted = first_refutation(k, &ir, &Config { timeout_ms: 5_000 }).expect("refuted");
    assert!(refuted.obligation.description.contains("8-aligned"), "refuted by {}", refuted.obligation.description);
}

/// The slab loader's 16-byte vector reads: one that starts an element off,
/// and one taken without asking that rows be whole runs (`K % 8 == 0`),
/// are each refuted by the vector read's bounds and alignment.
#[test]
fn vector_reads_of_the_slab_loader_must_be_whole_aligned_runs() {
    use tokitai_compiler::kir::{Cond, IExpr, KStmt};
    fn edit(body: &mut [KStmt], f: &dyn Fn(&mut KStmt) -> bool) -> bool {
        body.iter_mut().any(|s| {
            f(s) || match s {
                KStmt::For { body, .. } => edit(body, f),
                KStmt::If { then, els, .. } => edit(then, f) || edit(els, f),
                _ => false,
            }
        })
    }
    let arts = compile_example("matmul.tk", &register_ring_target());
    let (k, ir) = (&arts.program.kernels[0], &arts.kernels[0]);
    let cfg = Config { timeout_ms: 5_000 };
    let mut off = ir.clone();
    assert!(edit(&mut off.body, &|s| match s {
        KStmt::VecLoad { base, axes, .. } => {
            *base = base.clone().add(IExpr::c(1));
            let last = axes.len() - 1;
            axes[last] = axes[last].clone().add(IExpr::c(1));
            true
        }
        _ => false,
    }));
    let refuted = first_refutation(k, &off, &cfg).expect("an unaligned run is refuted");
    assert!(refuted.obligation.description.contains("8-aligned"), "refuted by {}", refuted.obligation.description);
    let mut unasked = ir.clone();
    assert!(edit(&mut unasked.body, &|s| match s {
        KStmt::LetInt { value: IExpr::Select(cond, ..), .. } => match &mut **cond {
            Cond::And(aligned, _) => {
                **cond = (**aligned).clone();
                true
            }
            _ => false,
        },
        _ => false,
    }));
    let refuted = first_refutation(k, &unasked, &cfg).expect("runs over rows not known whole are refuted");
    assert!(refuted.obligation.description.contains("8-aligned"), "refuted by {}", refuted.obligation.description);
}

/// gemm_f16's index among the kernels, and its warp-specialised variant.
fn gemm_f16_ws(arts: &tokitai_compiler::build::Artifacts) -> (usize, &tokitai_compiler::schedule::Variant) {
    let i = arts.program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
    (i, arts.variants[i].iter().find(|v| v.ir.name == "gemm_f16_ws").expect("a warp-specialised variant"))
}

/// The target whose matrix-unit schedule fills its ring through registers
/// (vector loads, two stages): AMD's MFMA form. NVIDIA's fills it by
/// `cp.async`, whose windows the warpgroup tests below cover.
fn register_ring_target() -> Target {
    "hip-gfx942".parse().unwrap()
}

/// The pipeline's protocol: with the ring's stages swapped consistently
/// (the stage read and the stage refilled both the other one), each
/// iteration reads the stage its slab has not reached yet (the first
/// reads a stage nothing has filled) and fills the one its slab is in. No
/// two threads race on it, so only the ring obligation refutes it: without
/// the ring annotation the mutant survives. (Swapping only the stage read
/// makes it the one being refilled: a race, refuted as such.)
#[test]
fn a_swapped_stage_of_the_ring_is_refuted_by_the_ring_obligation_only() {
    use tokitai_compiler::kir::{IExpr, KStmt};
    fn swap(body: &mut [KStmt], vars: &[usize]) -> usize {
        body.iter_mut()
            .map(|s| match s {
                KStmt::LetInt { var, value } if vars.contains(var) => {
                    *value = IExpr::c(1).sub(value.clone());
                    1
                }
                KStmt::For { body, .. } => swap(body, vars),
                KStmt::If { then, els, .. } => swap(then, vars) + swap(els, vars),
                _ => 0,
            })
            .sum()
    }
    let arts = compile_example("matmul.tk", &register_ring_target());
    let (k, ir) = (&arts.program.kernels[0], &arts.kernels[0]);
    let vars: Vec<usize> = ir.ivars.iter().enumerate().filter(|(_, n)| *n == "stage" || *n == "refill").map(|(i, _)| i).collect();
    let mut swapped = ir.clone();
    assert_eq!(swap(&mut swapped.body, &vars), 2, "the ring has a stage read and a stage refilled");
    let cfg = Config { timeout_ms: 5_000 };
    let refuted = first_refutation(k, &swapped, &cfg).expect("a swapped ring is refuted");
    assert!(refuted.obligation.description.contains("ring of 2 slabs"), "refuted by {}", refuted.obligation.description);
    for s in &mut swapped.shared {
        s.ring = None;
    }
    assert!(first_refutation(k, &swapped, &cfg).is_none(), "without the ring obligation the swapped ring survives");
}

/// The warpgroup ring of a k-contiguous operand pads its core matrices
/// along k (16 bytes after each, so one line of the operand lands on
/// distinct banks): a unit instruction whose descriptor forgets it (the
/// core matrices read 128 bytes apart, `lbo` 64, where they lie 144 apart)
/// reads the padding, and is refuted by the footprint; the first version
/// of the padded schedule made the same mistake in the instructions' k
/// offsets, and the verifier refuted it the same way.
#[test]
fn a_wgmma_that_ignores_its_operands_padded_stride_is_refuted() {
    use tokitai_compiler::kir::KStmt;
    fn unpad(body: &mut [KStmt]) -> usize {
        let mut n = 0;
        for s in body {
            n += match s {
                KStmt::Wgmma { a, .. } if a.lbo != 64 => {
                    a.lbo = 64;
                    1
                }
                KStmt::For { body, .. } => unpad(body),
                KStmt::If { then, els, .. } => unpad(then) + unpad(els),
                _ => 0,
            };
        }
        n
    }
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
    let (k, mut ir) = (&arts.program.kernels[i], arts.kernels[i].clone());
    // (The build proves the kernel as generated.) Four instructions a slab read the padded A ring (the vector path).
    assert_eq!(unpad(&mut ir.body), 4, "the ring of A (k-contiguous) is padded along k");
    let refuted = first_refutation(k, &ir, &Config { timeout_ms: 5_000 }).expect("refuted");
    assert!(refuted.obligation.description.contains("in the data of its rows"), "refuted by {}", refuted.obligation.description);
}

#[test]
fn a_removed_wait_or_fence_of_the_warpgroup_unit_is_refuted_by_its_protocol() {
    use tokitai_compiler::verify::mutate::mutants;
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
    let (k, ir) = (&arts.program.kernels[i], &arts.kernels[i]);
    let cfg = Config { timeout_ms: 5_000 };
    let mut by_operator: BTreeMap<&str, usize> = BTreeMap::new();
    for m in mutants(k, ir).into_iter().filter(|m| m.operator.starts_with("missing wgmma") || m.operator == "missing proxy fence") {
        let refuted = first_refutation(k, &m.ir, &cfg).unwrap_or_else(|| panic!("{} survived", m.description));
        assert!(refuted.obligation.description.contains("warpgroup unit's protocol"), "{}: refuted by {}", m.description, refuted.obligation.description);
        *by_operator.entry(m.operator).or_default() += 1;
    }
    // Both paths (vector and element) have a wait and a wgmma.fence; the
    // proxy fences: in the copy ring's loop and in the element loop.
    assert_eq!(by_operator.get("missing wgmma wait"), Some(&2), "{:?}", by_operator);
    assert_eq!(by_operator.get("missing wgmma fence"), Some(&2), "{:?}", by_operator);
    assert_eq!(by_operator.get("missing proxy fence"), Some(&2), "{:?}", by_operator);
}

/// The copy ring's protocol: a copy wait deleted, one that lets a group
/// more in flight, one moved past the barrier after it, a commit deleted.
/// In the ring loop each makes some copy land in a stage while the unit
/// (or another copy) may use it: refuted by race-freedom, whose windows
/// for copies in flight come from where the loop commits, waits and meets
/// the barrier. The last wait's removal leaves copies in flight at the
/// kernel's end: refuted by the protocol. A copy whose predicate is
/// dropped reads past the operand's end.
#[test]
fn a_late_or_missing_copy_wait_is_refuted_by_the_copy_windows() {
    use tokitai_compiler::verify::mutate::mutants;
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
    let (k, ir) = (&arts.program.kernels[i], &arts.kernels[i]);
    let cfg = Config { timeout_ms: 5_000 };
    let mut by_operator: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let copies = ["missing copy wait", "late copy wait", "wait after barrier", "missing copy commit"];
    for m in mutants(k, ir).into_iter().filter(|m| copies.contains(&m.operator) || m.description.contains("copy of")) {
        let refuted = first_refutation(k, &m.ir, &cfg).unwrap_or_else(|| panic!("{} survived", m.description));
        by_operator.entry(m.operator).or_default().push(refuted.obligation.description.clone());
    }
    let by = |op: &str| by_operator.get(op).cloned().unwrap_or_default();
    // Two waits (the loop's, and the last one after it), each removed.
    let missing = by("missing copy wait");
    assert_eq!(missing.len(), 2, "{:?}", by_operator);
    assert!(missing.iter().any(|d| d.contains("never meet") && d.contains("ring")), "the loop's wait: {:?}", missing);
    assert!(missing.iter().any(|d| d.contains("copies into shared memory may still land")), "the last wait: {:?}", missing);
    let late = by("late copy wait");
    assert!(!late.is_empty(), "no late copy wait mutant: {:?}", by_operator);
    // The last wait made later still ends with copies in flight; every
    // other is a copy landing where the unit reads.
    assert!(late.iter().any(|d| d.contains("never meet")), "late copy wait: {:?}", late);
    // A wait moved past the barrier also lands its copies after the proxy
    // fence that precedes the barrier: a race with the unit's reads, or
    // (the protocol's finding, which comes first) stores the unit may not
    // see.
    let after = by("wait after barrier");
    assert!(!after.is_empty(), "no wait after barrier mutant: {:?}", by_operator);
    assert!(after.iter().all(|d| d.contains("never meet") || d.contains("no proxy fence between")), "wait after barrier: {:?}", after);
    // A copy never committed is never waited for (the protocol sees it
    // first; its window is unbounded too).
    let uncommitted = by("missing copy commit");
    assert_eq!(uncommitted.len(), 2, "{:?}", by_operator);
    assert!(uncommitted.iter().all(|d| d.contains("may still land") || d.contains("never meet")), "{:?}", uncommitted);
    // Eight copies in the prologue and eight in the loop (A and B, four
    // runs each), each with its predicate dropped.
    let dropped = by("dropped guard");
    assert_eq!(dropped.len(), 16, "{:?}", dropped);
    assert!(dropped.iter().all(|d| d.contains("in bounds") || d.contains("within")), "{:?}", dropped);
}

/// The wide promotion (`gemm_f16_wg4`: a slab's four instructions chained
/// through the unit before each promotion) is proved under its guard, sums
/// of at least 192, and not without it: its height, 128 + K / 64, exceeds
/// a sequential sum's K at the K = 128 the kernel itself admits, so against
/// the unguarded kernel its tolerance cannot be shown. The guard is what
/// makes the claim, not a choice of speed.
#[test]
fn the_wide_promotion_is_proved_only_under_its_guard() {
    use tokitai_compiler::verify::tolerance::tolerance_proofs;
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
    let k = &arts.program.kernels[i];
    let wide = arts.variants[i].iter().find(|v| v.ir.name == "gemm_f16_wg4").expect("a wide-promotion variant");
    assert_eq!(wide.guard.map(|g| g.at_least), Some(192));
    let cfg = Config { timeout_ms: 5_000 };
    let guarded = tolerance_proofs(&wide.kernel(k), &wide.ir, &cfg);
    assert!(!guarded.is_empty() && guarded.iter().all(|o| o.outcome.is_proved()), "under its guard: {:?}", guarded.iter().map(|o| &o.outcome).collect::<Vec<_>>());
    let unguarded = tolerance_proofs(k, &wide.ir, &cfg);
    assert!(unguarded.iter().any(|o| !o.outcome.is_proved()), "the wide promotion's tolerance holds for K >= 128 too: the guard would be needless");
    // The kernel's own schedule (two instructions a promotion) holds there.
    assert!(tolerance_proofs(k, &arts.kernels[i], &cfg).iter().all(|o| o.outcome.is_proved()));
}

/// The warpgroup schedule's warp-specialised form (`gemm_f16_ws`: a
/// producer thread filling the ring with bulk tensor copies, the two
/// warpgroups draining it, synchronised by mbarriers) is proved under its
/// guard, and every mutant of it is refuted. The mbarrier operators'
/// refutations name what they broke: a deleted wait leaves a copy and a
/// read (or two copies) of one stage unordered, which race-freedom
/// refutes; a wait for the other phase fails the parity obligation; a
/// deleted arrival leaves its barrier with no arrivals; an arrival that
/// expects fewer bytes than its copies bring fails the transaction count;
/// a copy's box moved by a 16-byte chunk leaves its stage or meets the
/// other box; an allowance beyond the pool is refuted by the register
/// budget. No mutant survives (an equivalent one would say the schedule
/// holds a statement that does nothing: the consumers' proxy fence after
/// their wait, which bulk copies do not need, is gone).
#[test]
fn the_warp_specialised_form_is_proved_and_its_mbarrier_mutants_refuted() {
    use tokitai_compiler::verify::{mutate::mutants, verify_kernel};
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let (i, ws) = gemm_f16_ws(&arts);
    assert_eq!(ws.guard.map(|g| g.at_least), Some(192), "promoted once a slab: sums of at least 192");
    let (k, ir) = (ws.kernel(&arts.program.kernels[i]), ws.ir.clone());
    // Two warpgroups consume, one produces; each side's barrier expects
    // every thread of the other side's arrivals.
    assert_eq!(ir.block, 384);
    let arrivals: Vec<(String, u32)> = ir.mbarriers.iter().map(|m| (m.name.clone(), m.arrivals)).collect();
    // `full` is armed by the one issuing thread, with the slab's bytes.
    assert_eq!(arrivals, vec![("full_0".to_string(), 1), ("empty_1".to_string(), 256)]);
    let text = tokitai_compiler::codegen::hip::print_kernel(&ir);
    for line in ["setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.inc.sync.aligned.u32 232;", "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], 49152;", "cp.async.bulk.tensor.2d", "mbarrier.try_wait.parity", "__grid_constant__ tk_tensor_map tma_x", "| (1ull << 62)", "wgmma.mma_async.sync.aligned.m64n64k16", "wgmma.wait_group.sync.aligned 1;"] {
        assert!(text.contains(line), "no `{}` in the form's source", line);
    }
    let cfg = Config { timeout_ms: 5_000 };
    let proofs = verify_kernel(&k, &mut ir.clone(), &cfg);
    let unproved: Vec<&str> = proofs.obligations.iter().filter(|o| !o.outcome.is_proved()).map(|o| o.obligation.description.as_str()).collect();
    assert!(unproved.is_empty(), "not proved: {:?}", unproved);
    for what in ["with parity", "names the stage of its iteration's slab", "in every iteration that refills a stage", "arrived at by exactly its count of threads", "bulk copies armed with exactly their bytes", "1024-byte aligned"] {
        assert!(proofs.obligations.iter().any(|o| o.obligation.description.contains(what)), "no obligation on `{}`", what);
    }
    let mut by_operator: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let all = mutants(&k, &ir);
    for m in &all {
        let refuted = first_refutation(&k, &m.ir, &cfg).unwrap_or_else(|| panic!("{} survived", m.description));
        by_operator.entry(m.operator).or_default().push(refuted.obligation.description.clone());
    }
    let by = |op: &str| by_operator.get(op).cloned().unwrap_or_default();
    // The consumers' wait on `full`, the producer's on `empty`.
    let missing = by("missing mbarrier wait");
    assert_eq!(missing.len(), 2, "{:?}", by_operator);
    assert!(missing.iter().all(|d| d.contains("never meet")), "{:?}", missing);
    let swapped = by("swapped barrier phase");
    assert_eq!(swapped.len(), 2, "{:?}", by_operator);
    assert!(swapped.iter().all(|d| d.contains("with parity")), "{:?}", swapped);
    let arrivals = by("missing mbarrier arrival");
    assert_eq!(arrivals.len(), 2, "{:?}", by_operator);
    assert!(arrivals.iter().all(|d| d.contains("arrived at by 0 statements") || d.contains("which no one arrival arms")), "{:?}", arrivals);
    assert!(arrivals.iter().any(|d| d.contains("`empty_1` is arrived at by 0 statements")), "{:?}", arrivals);
    let bytes = by("wrong transaction bytes");
    assert_eq!(bytes.len(), 1, "{:?}", by_operator);
    assert!(bytes[0].contains("expects 49136 bytes a phase, but its bulk copies bring 49152"), "{:?}", bytes);
    // A's box and B's two.
    let shifted = by("shifted bulk copy");
    assert_eq!(shifted.len(), 3, "{:?}", by_operator);
    // A deleted copy: its elements are loaded by no one, and the bytes
    // its barrier expects never all land.
    let mut dropped = ir.clone();
    assert!(drop_bulk_copy(&mut dropped.body), "the producer issues bulk copies");
    let proofs = verify_kernel(&k, &mut dropped.clone(), &cfg);
    let refuted: Vec<&str> = proofs.obligations.iter().filter(|o| o.outcome.is_refuted()).map(|o| o.obligation.description.as_str()).collect();
    assert!(refuted.iter().any(|d| d.contains("bulk copies bring")), "{:?}", refuted);
    assert!(refuted.iter().any(|d| d.contains("every element of `x`")), "{:?}", refuted);
    // The consumers promote a chain while the next runs: each wait that
    // retires one, made to leave one group more running, lets a
    // promotion read a part the unit may still write (four in the
    // vector path, two in the element path; the wait that only commits
    // a slab's first chain has no such mutant).
    let late = by("late wgmma wait");
    assert_eq!(late.len(), 6, "{:?}", by_operator);
    assert!(late.iter().all(|d| d.contains("is accessed while a wgmma into it may still run")), "{:?}", late);
    let registers = by("register allowance beyond the pool");
    assert_eq!(registers.len(), 1, "{:?}", by_operator);
    assert!(registers[0].contains("register allowances take"), "{:?}", registers);
    // The consumers releasing a stage the unit may still read: their
    // arrival moved before the last wgmma wait.
    let mut early = ir.clone();
    assert!(release_before_wait(&mut early.body), "the consumers' loop arrives after a wgmma wait");
    let refuted = first_refutation(&k, &early, &cfg).expect("an early release is refuted");
    assert!(refuted.obligation.description.contains("mbarrier arrival is reached while a wgmma"), "refuted by {}", refuted.obligation.description);
    println!("{} mutants of {}, every one refuted: {:?}", all.len(), ir.name, by_operator.iter().map(|(op, v)| (op, v.len())).collect::<Vec<_>>());
}

/// The two verifier rules that only a warp-specialised kernel reaches,
/// each shown by a hand mutant of `gemm_f16_ws`: a collective (wgmma,
/// its fence and wait: a warpgroup's instructions) under a condition that
/// splits a warpgroup, the consumers' branch narrowed from `tid < 256` to
/// `tid < 64`, is refuted by the obligation that each condition takes one
/// value across the instruction's 128 threads; and an accumulator that
/// only some of its readers update, the promotion after each slab put
/// under `tid < 128` while the epilogue reads `acc` under `tid < 256`, is
/// refuted by reduction completeness (asked of the threads that read the
/// accumulator, so the producer, which never does, is not asked).
#[test]
fn a_split_warpgroup_and_a_partial_promotion_in_the_specialised_form_are_refuted() {
    use tokitai_compiler::kir::{Cond, IExpr};
    use tokitai_compiler::verify::verify_kernel;
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let (i, ws) = gemm_f16_ws(&arts);
    let k = ws.kernel(&arts.program.kernels[i]);
    let cfg = Config { timeout_ms: 5_000 };
    let refuted_by = |ir: &tokitai_compiler::kir::KernelIr| -> Vec<String> {
        let proofs = verify_kernel(&k, &mut ir.clone(), &cfg);
        proofs.obligations.iter().filter(|o| o.outcome.is_refuted()).map(|o| format!("{}: {}", o.obligation.kind.name(), o.obligation.description)).collect()
    };
    let mut split = ws.ir.clone();
    assert!(narrow_branch(&mut split.body, 256, 64), "the consumers' branch is `tid < 256`");
    let found = refuted_by(&split);
    assert!(found.iter().any(|d| d.starts_with("barrier-uniform") && d.contains("group of 128 consecutive threads reaches this matrix-unit instruction together")), "{:?}", found);
    let mut partial = ws.ir.clone();
    assert!(guard_promotion(&mut partial.body, Cond::Lt(IExpr::Tid, IExpr::Const(128))), "a promotion loop follows the slab's wgmma wait");
    let found = refuted_by(&partial);
    assert!(found.iter().any(|d| d.starts_with("reduction-complete")), "{:?}", found);
}

/// The grouped walk of the warp-specialised form (`gemm_f16_ws8`: a
/// three-axis grid, block `(x, y, z)` on tile row `8 z + x` and column
/// `y`, blocks past M leaving at once) is proved, and so is every output
/// and operand element's coverage through its witnesses (the block's
/// indices as one remainder and one division by 8). Every generic mutant
/// of the walk (the origin's statements and the early exit's condition)
/// is refuted but the one that drops the early exit, which is equivalent
/// (it only saves work: such a block's copies land zeros and its stores
/// are guarded by m < M). Two hand mutants of the origin, the group's
/// digit dropped (every group on the same tile rows) and the two digits
/// swapped (`x + 8 z` read as `z + 8 x`), are refuted by the output's
/// coverage or race-freedom.
#[test]
fn the_grouped_walk_is_proved_and_a_wrong_origin_refuted() {
    use tokitai_compiler::kir::{Cond, GridDim, IExpr, KStmt};
    use tokitai_compiler::verify::{mutate::mutants, verify_kernel};
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "gemm_f16").expect("gemm_f16");
    let ws8 = arts.variants[i].iter().find(|v| v.ir.name == "gemm_f16_ws8").expect("a grouped variant");
    let ws = &gemm_f16_ws(&arts).1;
    assert!(ws8.keys.0 > ws.keys.0, "taken for larger outputs than _ws: {:?} {:?}", ws8.keys, ws.keys);
    assert_eq!(ws8.ir.grid.len(), 3, "a three-axis grid");
    assert!(matches!(&ws8.ir.grid[0], GridDim::Exact(IExpr::Const(8))), "eight tile rows a group: {:?}", ws8.ir.grid[0]);
    let text = tokitai_compiler::codegen::hip::print_kernel(&ws8.ir);
    assert!(text.contains("blockIdx.z"), "the group is the grid's third axis");
    let (k, ir) = (ws8.kernel(&arts.program.kernels[i]), ws8.ir.clone());
    let cfg = Config { timeout_ms: 5_000 };
    let proofs = verify_kernel(&k, &mut ir.clone(), &cfg);
    let unproved: Vec<&str> = proofs.obligations.iter().filter(|o| !o.outcome.is_proved()).map(|o| o.obligation.description.as_str()).collect();
    assert!(unproved.is_empty(), "not proved: {:?}", unproved);
    let exit = ir.body.iter().position(|s| matches!(s, KStmt::If { .. })).expect("the early exit");
    assert_eq!(exit, 2, "the origin's two statements, then the early exit");
    let of_walk = |m: &tokitai_compiler::kir::KernelIr| match (&m.body[exit], &ir.body[exit]) {
        (KStmt::If { cond: a, then: ta, .. }, KStmt::If { cond: b, then: tb, .. }) => m.body[..exit] != ir.body[..exit] || (a != b && ta == tb),
        _ => true,
    };
    let dropped_exit = |m: &tokitai_compiler::kir::KernelIr| matches!(&m.body[exit], KStmt::If { cond: Cond::True, .. }) && m.body[..exit] == ir.body[..exit];
    let (equivalent, walk): (Vec<_>, Vec<_>) = mutants(&k, &ir).into_iter().filter(|m| of_walk(&m.ir)).partition(|m| dropped_exit(&m.ir));
    assert_eq!(equivalent.len(), 1, "{:?}", equivalent.iter().map(|m| &m.description).collect::<Vec<_>>());
    assert!(walk.len() >= 2, "{:?}", walk.iter().map(|m| &m.description).collect::<Vec<_>>());
    for m in walk {
        assert!(first_refutation(&k, &m.ir, &cfg).is_some(), "{} survived", m.description);
    }
    let with_origin = |row: IExpr| {
        let mut m = ir.clone();
        let KStmt::LetInt { value, .. } = &mut m.body[0] else { panic!("the walk's origin comes first: {:?}", m.body[0]) };
        *value = row.mul(IExpr::c(256));
        m
    };
    // m0 = (x + 8 z) * 256 becomes x * 256, then (z + 8 x) * 256: each
    // leaves tile rows to no one and has two blocks store one row, so the
    // first refutation is the output's coverage or its race-freedom.
    for wrong in [IExpr::BlockIdx(0), IExpr::BlockIdx(2).add(IExpr::BlockIdx(0).mul(IExpr::c(8)))] {
        let refuted = first_refutation(&k, &with_origin(wrong.clone()), &cfg).unwrap_or_else(|| panic!("the walk {:?} survived", wrong));
        let d = &refuted.obligation.description;
        assert!(d.contains("is reached by") || d.contains("write of `y` write the same element"), "the walk {:?} refuted by {}", wrong, d);
    }
}

/// The warp-specialised form on 128 x 128 tiles (`gemm_f16_ws128`: each
/// consumer warpgroup one instruction's 64 rows, a slab's two chains
/// over the two 64-column halves) is proved; it is taken only in place of
/// `_ws` (its keys are empty: the runtime's wave rule picks it), and
/// every generic mutant of it is refuted, and so is a hand mutant of what
/// is its own: the tile rows' origin at the 256-row stride (every other
/// band of 128 rows left to no one), by the output's coverage. (Not
/// shown, for this form or any warpgroup form: a chain issued on the
/// wrong columns of B. The verifier checks the unit's reads of its slabs,
/// not which columns each accumulator slot sums; gpucheck does.)
#[test]
fn the_128_row_specialised_form_is_proved_and_its_mutants_refuted() {
    use tokitai_compiler::kir::{IExpr, KStmt};
    use tokitai_compiler::verify::{mutate::mutants, verify_kernel};
    let arts = compile_example("matmul.tk", &Target::default_cuda());
    let (i, ws) = gemm_f16_ws(&arts);
    let v = arts.variants[i].iter().find(|v| v.ir.name == "gemm_f16_ws128").expect("a 128-row variant");
    assert_eq!(v.in_place_of.as_ref().map(|(name, _)| name.as_str()), Some("gemm_f16_ws"));
    assert!(v.keys.0 > v.keys.1, "never chosen by its key: {:?}", v.keys);
    assert_eq!(v.guard, ws.guard, "the wide promotion's guard, as `_ws`");
    let text = tokitai_compiler::codegen::hip::print_kernel(&v.ir);
    for line in ["mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], 32768;", "wgmma.mma_async.sync.aligned.m64n64k16", "blockIdx.y * 128"] {
        assert!(text.contains(line), "no `{}` in the form's source", line);
    }
    let (k, ir) = (v.kernel(&arts.program.kernels[i]), v.ir.clone());
    let cfg = Config { timeout_ms: 5_000 };
    let proofs = verify_kernel(&k, &mut ir.clone(), &cfg);
    let unproved: Vec<&str> = proofs.obligations.iter().filter(|o| !o.outcome.is_proved()).map(|o| o.obligation.description.as_str()).collect();
    assert!(unproved.is_empty(), "not proved: {:?}", unproved);
    let mut by_operator: BTreeMap<&str, usize> = BTreeMap::new();
    let all = mutants(&k, &ir);
    for m in &all {
        assert!(first_refutation(&k, &m.ir, &cfg).is_some(), "{} survived", m.description);
        *by_operator.entry(m.operator).or_default() += 1;
    }
    assert!(by_operator.len() >= 5, "{:?}", by_operator);
    // m0 = blockIdx.y * 256 on a grid of 128-row tiles.
    let mut strided = ir.clone();
    let KStmt::LetInt { value, .. } = &mut strided.body[0] else { panic!("the origin comes first: {:?}", strided.body[0]) };
    *value = IExpr::BlockIdx(1).mul(IExpr::c(256));
    let refuted = first_refutation(&k, &strided, &cfg).expect("the 256-row stride is refuted");
    assert!(refuted.obligation.description.contains("is reached by") || refuted.obligation.description.contains("in bounds"), "refuted by {}", refuted.obligation.description);
    println!("{} mutants of {}, every one refuted: {:?}", all.len(), ir.name, by_operator);
}

/// Delete the first bulk tensor copy; whether there was one.
fn drop_bulk_copy(body: &mut Vec<tokitai_compiler::kir::KStmt>) -> bool {
    use tokitai_compiler::kir::KStmt;
    if let Some(i) = body.iter().position(|s| matches!(s, KStmt::TmaLoad { .. })) {
        body.remove(i);
        return true;
    }
    body.iter_mut().any(|s| match s {
        KStmt::For { body, .. } => drop_bulk_copy(body),
        KStmt::If { then, els, .. } => drop_bulk_copy(then) || drop_bulk_copy(els),
        _ => false,
    })
}

/// Turn the first `if (tid < from)` into `if (tid < to)`; whether one was found.
fn narrow_branch(body: &mut [tokitai_compiler::kir::KStmt], from: i64, to: i64) -> bool {
    use tokitai_compiler::kir::{Cond, IExpr, KStmt};
    for s in body.iter_mut() {
        let narrowed = match s {
            KStmt::If { cond: Cond::Lt(IExpr::Tid, bound), .. } if *bound == IExpr::Const(from) => {
                *bound = IExpr::Const(to);
                true
            }
            KStmt::For { body, .. } => narrow_branch(body, from, to),
            KStmt::If { then, els, .. } => narrow_branch(then, from, to) || narrow_branch(els, from, to),
            _ => false,
        };
        if narrowed {
            return true;
        }
    }
    false
}

/// Put the first loop after a `WgmmaWait` (the promotion of the slab's
/// part into the accumulator) under `cond`; whether one was found.
fn guard_promotion(body: &mut Vec<tokitai_compiler::kir::KStmt>, cond: tokitai_compiler::kir::Cond) -> bool {
    use tokitai_compiler::kir::KStmt;
    if let Some(w) = body.iter().position(|s| matches!(s, KStmt::WgmmaWait { .. })) {
        if let Some(l) = body[w..].iter().position(|s| matches!(s, KStmt::For { .. })) {
            let promotion = body.remove(w + l);
            body.insert(w + l, KStmt::If { cond, then: vec![promotion], els: vec![] });
            return true;
        }
    }
    body.iter_mut().any(|s| match s {
        KStmt::For { body, .. } => guard_promotion(body, cond.clone()),
        KStmt::If { then, els, .. } => guard_promotion(then, cond.clone()) || guard_promotion(els, cond.clone()),
        _ => false,
    })
}

/// Move the `MbarArrive` of the loop that holds one before the last
/// `WgmmaWait` before it; whether one was moved.
fn release_before_wait(body: &mut [tokitai_compiler::kir::KStmt]) -> bool {
    use tokitai_compiler::kir::KStmt;
    for s in body.iter_mut() {
        match s {
            KStmt::For { body, .. } => {
                if let Some(a) = body.iter().position(|s| matches!(s, KStmt::MbarArrive { .. })) {
                    let Some(w) = body[..a].iter().rposition(|s| matches!(s, KStmt::WgmmaWait { .. })) else { return false };
                    let arrive = body.remove(a);
                    body.insert(w, arrive);
                    return true;
                }
                if release_before_wait(body) {
                    return true;
                }
            }
            KStmt::If { then, els, .. } => {
                let moved = release_before_wait(then) || release_before_wait(els);
                if moved {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// The two-vector pointwise form (`sgd_momentum`: vectors `v` and `v +
/// half`, `half = nvec / 2`, the scalar tail from `half * 2w`) is proved,
/// and each way of getting its halves wrong is refuted: the second vector
/// one vector further on, the loop one iteration longer, `half` rounded
/// up (an odd count's last vector taken twice), the tail starting one
/// vector late.
#[test]
fn the_two_vector_form_is_proved_and_its_halves_mutants_refuted() {
    use tokitai_compiler::kir::{IExpr, KStmt, Schedule};
    let arts = compile_example("optim.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "sgd_momentum").expect("sgd_momentum");
    let (k, ir) = (&arts.program.kernels[i], &arts.kernels[i]);
    assert_eq!(ir.schedule, Schedule::Pointwise { vector: 8, vectors: 2 });
    assert!(arts.proofs[i].obligations.iter().all(|o| o.outcome.is_proved()));
    let cfg = Config { timeout_ms: 10_000 };
    // The second vector's base is the one with a sum in it: `(v + half) * 8`.
    let second = |e: &IExpr| matches!(e, IExpr::Mul(x, _) if matches!(**x, IExpr::Add(..)));
    let mut further = ir.clone();
    let n = edit(&mut further.body, &|s| match s {
        KStmt::VecLoad { base, .. } | KStmt::VecStore { base, .. } if second(base) => {
            *base = base.clone().add(IExpr::c(8));
            true
        }
        _ => false,
    });
    assert_eq!(n, 5, "three loads and two stores of the second vector");
    let mut longer = ir.clone();
    assert_eq!(
        edit(&mut longer.body, &|s| match s {
            KStmt::For { end: end @ IExpr::Var(_), body, .. } if body.iter().any(|b| matches!(b, KStmt::VecLoad { .. })) => {
                *end = end.clone().add(IExpr::c(1));
                true
            }
            _ => false,
        }),
        1
    );
    let mut rounded_up = ir.clone();
    assert_eq!(
        edit(&mut rounded_up.body, &|s| match s {
            KStmt::LetInt { value: IExpr::Div(n, two), .. } if **two == IExpr::c(2) => {
                **n = (**n).clone().add(IExpr::c(1));
                true
            }
            _ => false,
        }),
        1
    );
    let mut late_tail = ir.clone();
    assert_eq!(
        edit(&mut late_tail.body, &|s| match s {
            KStmt::For { start: start @ IExpr::Add(..), body, .. } if !body.iter().any(|b| matches!(b, KStmt::VecLoad { .. })) => {
                *start = start.clone().add(IExpr::c(8));
                true
            }
            _ => false,
        }),
        1
    );
    // The first three reach past the end (a read or write of a vector
    // beyond the array); the late tail leaves a vector unwritten.
    for (what, m, by) in [
        ("second vector further on", further, "stays within"),
        ("loop one longer", longer, "stays within"),
        ("half rounded up", rounded_up, "stays within"),
        ("tail one vector late", late_tail, "is written"),
    ] {
        let r = first_refutation(k, &m, &cfg).unwrap_or_else(|| panic!("{}: not refuted", what));
        assert!(r.obligation.description.contains(by), "{}: refuted by {}", what, r.obligation.description);
    }
}

/// The row cached in registers (`schedule::row_cached`, issue 21) is proved
/// like the plain row form, and every generic mutant of it is refuted (the
/// whole-suite test above mutates the kernels' own schedules, not their
/// variants): runs one too many, a lane loop starting late, a dropped
/// guard, a run's start one off. Three of them, named, with the
/// obligation that refutes each: the reduction's lane guard dropped
/// (visits past the row), the reduction's lanes starting one late (a
/// column unvisited), the vector path taken for rows that are not whole
/// vectors (a read past the end).
#[test]
fn the_cached_row_form_is_proved_and_its_mutants_refuted() {
    use tokitai_compiler::kir::{Cond, IExpr, KStmt, Schedule};
    use tokitai_compiler::verify::mutate::mutants;
    let arts = compile_example("softmax.tk", &Target::default_cuda());
    let cfg = Config { timeout_ms: 10_000 };
    let mut checked = 0;
    for (i, k) in arts.program.kernels.iter().enumerate() {
        for v in arts.variants[i].iter().filter(|v| v.ir.name.ends_with("_c256x2")) {
            assert!(matches!(v.ir.schedule, Schedule::RowCached { slots: 2, width: 8, .. }), "{:?}", v.ir.schedule);
            let kernel = v.kernel(k);
            // A run loop one iteration longer is an equivalent mutant, not
            // a bug: under the variant's guard (C <= 256 * 2 * 8) the extra
            // run starts at c0 >= 4096 >= C, so every one of its guards is
            // false and it does nothing (as the plain form's one-iteration
            // loops are not given a wider stride).
            let equivalent = |m: &tokitai_compiler::verify::mutate::Mutant| m.description.ends_with("loop `run` runs one iteration too far");
            let all: Vec<_> = mutants(&kernel, &v.ir).into_iter().filter(|m| !equivalent(m)).collect();
            assert!(all.len() >= 30, "{}: only {} mutants", v.ir.name, all.len());
            let survivors: Vec<String> = all.iter().filter(|m| first_refutation(&kernel, &m.ir, &cfg).is_none()).map(|m| format!("{}: {}", m.operator, m.description)).collect();
            assert!(survivors.is_empty(), "{}: {} of {} mutants survived:\n{}", v.ir.name, survivors.len(), all.len(), survivors.join("\n"));
            checked += 1;
            if k.name != "softmax_fwd" {
                continue;
            }
            // `exp(x - m)` is summed and then divided by the sum: computed
            // once, held in registers for the outputs (`row_cached::Held`).
            let hip = tokitai_compiler::codegen::hip::kernel_source(&v.ir);
            assert_eq!(hip.matches("expf(").count(), 1, "{}", hip);
            // The reduction's lanes: `for lane in 0..8 { if c0 + lane < C { .. } }`.
            let is_lane_guard = |s: &KStmt| matches!(s, KStmt::If { cond: Cond::Lt(IExpr::Add(..), IExpr::Dim(_)), els, then } if els.is_empty() && then.iter().any(|t| matches!(t, KStmt::Assign { .. })));
            let mut unguarded = v.ir.clone();
            let n = edit(&mut unguarded.body, &|s| {
                if is_lane_guard(s) {
                    if let KStmt::If { cond, .. } = s {
                        *cond = Cond::True;
                    }
                    return true;
                }
                false
            });
            assert_eq!(n, 2, "the max and the sum each guard their lanes");
            let mut late = v.ir.clone();
            let n = edit(&mut late.body, &|s| match s {
                KStmt::For { start, body, .. } if body.first().is_some_and(is_lane_guard) => {
                    *start = IExpr::c(1);
                    true
                }
                _ => false,
            });
            assert_eq!(n, 2);
            // `vec_end = aligned && C % 8 == 0 ? C : 0`, the condition dropped.
            let mut always_vectors = v.ir.clone();
            let n = edit(&mut always_vectors.body, &|s| match s {
                KStmt::LetInt { value: IExpr::Select(c, ..), .. } => {
                    **c = Cond::True;
                    true
                }
                _ => false,
            });
            assert_eq!(n, 1);
            // Past the row's end a lane reads a register no load set (or,
            // where the row fills the runs, visits a column past it).
            for (what, m, by) in [
                ("lane guard dropped", unguarded, &["visits no index outside its range", "that is read was set before"][..]),
                // (Lane 0 also never sets the held term `exp(x - m)`
                // that the outputs read: the first refutation may be that.)
                ("lanes start one late", late, &["visit every index", "`c_term_row` that is read was set before"][..]),
                ("vectors for every row", always_vectors, &["stays within"][..]),
            ] {
                let r = first_refutation(&kernel, &m, &cfg).unwrap_or_else(|| panic!("{}: not refuted", what));
                assert!(by.iter().any(|b| r.obligation.description.contains(b)), "{}: refuted by {}", what, r.obligation.description);
            }
        }
    }
    assert_eq!(checked, 2, "softmax_fwd and softmax_bwd have the 256 x 2 form");
}

/// A costly element intermediate that the reductions and the outputs read
/// (`layernorm_gelu_bwd`'s `g`, GELU's slope) is held in registers by the
/// cached row form: computed once at each visited element
/// (`row_cached::Layout::hold_intermediates`), where inlining computed
/// `tanh` four times. Its generic mutants are refuted, and so is a hold
/// that writes the slot after its own (the outputs read a slot no visit
/// set, or the last one writes past the array).
#[test]
fn a_held_intermediate_is_computed_once_and_its_mutants_refuted() {
    use tokitai_compiler::kir::{IExpr, KStmt};
    use tokitai_compiler::verify::mutate::mutants;
    let arts = compile_example("layernorm.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "layernorm_gelu_bwd").expect("layernorm_gelu_bwd");
    let v = arts.variants[i].iter().find(|v| v.ir.name == "layernorm_gelu_bwd_c256x2").expect("the 256 x 2 cached form");
    let kernel = v.kernel(&arts.program.kernels[i]);
    let hip = tokitai_compiler::codegen::hip::kernel_source(&v.ir);
    assert_eq!(hip.matches("tanhf(").count(), 1, "{}", hip);
    assert!(hip.contains("g_row"), "{}", hip);
    let cfg = Config { timeout_ms: 10_000 };
    // As for softmax's cached form: a run loop one longer does nothing
    // under the variant's guard (C <= 256 * 2 * 8).
    let equivalent = |m: &tokitai_compiler::verify::mutate::Mutant| m.description.ends_with("loop `run` runs one iteration too far");
    let all: Vec<_> = mutants(&kernel, &v.ir).into_iter().filter(|m| !equivalent(m)).collect();
    assert!(all.len() >= 30, "only {} mutants", all.len());
    let survivors: Vec<String> = all.iter().filter(|m| first_refutation(&kernel, &m.ir, &cfg).is_none()).map(|m| format!("{}: {}", m.operator, m.description)).collect();
    assert!(survivors.is_empty(), "{} of {} mutants survived:\n{}", survivors.len(), all.len(), survivors.join("\n"));
    let g_row = v.ir.locals.iter().position(|l| l.name.starts_with("g_row")).expect("the held intermediate's registers");
    let mut shifted = v.ir.clone();
    let n = edit(&mut shifted.body, &|s| match s {
        KStmt::ArraySet { arr, index, .. } if *arr == g_row => {
            *index = index.clone().add(IExpr::c(1));
            true
        }
        _ => false,
    });
    assert_eq!(n, 1, "one hold of `g`");
    let r = first_refutation(&kernel, &shifted, &cfg).expect("a hold one slot late is refuted");
    assert!(["that is read was set before", "stays within"].iter().any(|b| r.obligation.description.contains(b)), "refuted by {}", r.obligation.description);
}

/// The paired epilogue of the warp-specialised form (two outputs a 4-byte
/// store) is proved only under its test: the output's base 4-byte aligned
/// and its rows of even length. `linear_bwd_x`'s rows are `K` long, which
/// nothing else constrains. Dropping either half of the test is refuted by
/// the paired write's in-bounds obligation; runs of four from pairs two
/// apart overlap, which the race obligation on runs refutes.
#[test]
fn the_paired_epilogue_is_proved_only_under_its_word_test() {
    use tokitai_compiler::kir::{Cond, KStmt};
    use tokitai_compiler::verify::verify_kernel;
    let arts = compile_example("linear.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "linear_bwd_x").expect("linear_bwd_x");
    let ws = arts.variants[i].iter().find(|v| v.ir.name == "linear_bwd_x_ws").expect("a warp-specialised variant");
    let (k, ir) = (ws.kernel(&arts.program.kernels[i]), ws.ir.clone());
    let text = tokitai_compiler::codegen::hip::print_kernel(&ir);
    assert!(text.contains("% 4ull) == 0ull") && text.contains("tk_vec<tk_f16, 2>"), "no paired store in:\n{}", text);
    let cfg = Config { timeout_ms: 5_000 };
    let refuted_by = |ir: &tokitai_compiler::kir::KernelIr| -> Vec<String> {
        let proofs = verify_kernel(&k, &mut ir.clone(), &cfg);
        proofs.obligations.iter().filter(|o| o.outcome.is_refuted()).map(|o| o.obligation.description.clone()).collect()
    };
    assert!(refuted_by(&ir).is_empty(), "the form is not proved");
    // The word test: `aligned && K % 2 == 0`; keep one half of it.
    let keep = |which: usize| {
        let mut m = ir.clone();
        let n = edit(&mut m.body, &|s| match s {
            KStmt::If { cond: Cond::And(a, b), .. } if matches!(**a, Cond::Aligned(_, 4)) => {
                let half = if which == 0 { (**a).clone() } else { (**b).clone() };
                if let KStmt::If { cond, .. } = s {
                    *cond = half;
                }
                true
            }
            _ => false,
        });
        assert_eq!(n, 1, "one word test");
        m
    };
    for (which, why) in [(0, "odd rows"), (1, "an unaligned output")] {
        let refuted = refuted_by(&keep(which));
        assert!(refuted.iter().any(|d| d.contains("paired write of `gx`") && d.contains("stays within every axis")), "{}: {:?}", why, refuted);
    }
    // Four elements a store from pairs two columns apart.
    let mut wide = ir.clone();
    let n = edit(&mut wide.body, &|s| match s {
        KStmt::VecStore { width, .. } if *width == 2 => {
            *width = 4;
            true
        }
        _ => false,
    });
    assert_eq!(n, 1, "one paired store");
    let refuted = refuted_by(&wide);
    assert!(refuted.iter().any(|d| d.contains("no two executions of the paired write of `gx` write the same element")), "{:?}", refuted);
}

/// The tiled residue contraction (issue 23): `padic.tk`'s dense and
/// skipping products run on the contraction schedule (operand slabs in
/// shared memory; the skipping ones skip a thread's slab where its minimum
/// valuations sum to k), and every mutant of the printed IR, the
/// schedule's, the tile skip's and (in the certificate kernels) the
/// per-product rule's, is refuted.
#[test]
fn the_tiled_residue_contractions_mutants_are_refuted() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops/padic.tk");
    let arts = compile_source(SourceFile::new(f.display().to_string(), std::fs::read_to_string(&f).unwrap()), &Target::default_cuda()).unwrap_or_else(|e| panic!("{}", e));
    for name in ["padic_dense_p2", "padic_skip_p2", "padic_dense_p3", "padic_skip_p3"] {
        let ir = arts.kernels.iter().find(|ir| ir.name == name).expect(name);
        assert!(matches!(ir.schedule, tokitai_compiler::kir::Schedule::Contraction { .. }), "{}: {:?}", name, ir.schedule);
    }
    let results = run_all(&arts.proved_kernels().collect::<Vec<_>>(), &Config { timeout_ms: 5_000 });
    let on_tiles: Vec<_> = results.iter().filter(|(m, _)| m.ir.name.starts_with("padic_skip_p2") || m.ir.name.starts_with("padic_dense_p3")).collect();
    for op in ["missing barrier", "skipped k-block", "overlapping tiles", "stale valuation tile", "partial minimum", "tile skip threshold one low"] {
        assert!(on_tiles.iter().any(|(m, _)| m.operator == op), "no `{}` mutant of the tiled kernels", op);
    }
    // The per-product rule is printed by the certificate kernels (the
    // tiled ones compute every product of a slab they do not skip).
    let certified: Vec<_> = results.iter().filter(|(m, _)| m.ir.name.starts_with("padic_matmul_p")).collect();
    for op in ["skip threshold one low", "unconditional skip"] {
        assert!(certified.iter().any(|(m, _)| m.operator == op), "no `{}` mutant of the certificate kernels", op);
    }
    let survivors: Vec<&str> = results.iter().filter(|(_, k)| !k).map(|(m, _)| m.description.as_str()).collect();
    assert!(survivors.is_empty(), "{} mutants survived:\n{}", survivors.len(), survivors.join("\n"));
}

/// The tile skip (issue 23) stands on its own rule: the skipping kernels
/// prove one tile-skip obligation per modulus and schedule, and each
/// mutant of the skip (a valuation tile left stale where its operand slot
/// is written, a minimum that stops one short of the slab, a threshold one
/// low) is refuted by that obligation, naming the skip, not by another.
#[test]
fn the_tile_skip_mutants_are_refuted_by_the_tile_skip_rule() {
    use tokitai_compiler::verify::mutate::mutants;
    use tokitai_compiler::verify::verify_cached;
    let arts = compile_example("padic.tk", &Target::default_cuda());
    let cfg = Config { timeout_ms: 5_000 };
    for name in ["padic_skip_p2", "padic_skip_p3"] {
        let at = arts.kernels.iter().position(|ir| ir.name == name).expect(name);
        let (k, ir) = (&arts.program.kernels[at], &arts.kernels[at]);
        let proofs = verify_cached(k, &mut ir.clone(), &cfg);
        let tile: Vec<_> = proofs.obligations.iter().filter(|o| o.obligation.description.contains("the tile skip")).collect();
        assert!(!tile.is_empty(), "{}: no tile-skip obligation", name);
        assert!(tile.iter().all(|o| o.outcome.is_proved()), "{}: a tile-skip obligation is not proved", name);
        let mut by_operator: BTreeMap<&str, usize> = BTreeMap::new();
        for m in mutants(k, ir).into_iter().filter(|m| ["stale valuation tile", "partial minimum", "tile skip threshold one low"].contains(&m.operator)) {
            let refuted = first_refutation(k, &m.ir, &cfg).unwrap_or_else(|| panic!("{} survived", m.description));
            assert!(refuted.obligation.description.contains("tile skip"), "{} refuted by {}", m.description, refuted.obligation.description);
            *by_operator.entry(m.operator).or_default() += 1;
        }
        // Two valuation writes per operand (the element and the zero
        // padding), two loops per minimum, one skip.
        assert_eq!(by_operator.get("stale valuation tile"), Some(&4), "{}", name);
        assert_eq!(by_operator.get("partial minimum"), Some(&4), "{}", name);
        assert_eq!(by_operator.get("tile skip threshold one low"), Some(&1), "{}", name);
    }
}

/// The column form (`schedule::column`, `<kernel>_col`) of LayerNorm's
/// parameter gradients (two sums a column; the bias gradient's is the
/// same form with one): proved, and every generic mutant of it refuted, the tree's included (a shifted or
/// widened level reads past the partials or a slot another thread writes
/// in the same phase). Then the mutants its own obligations are for: a
/// group's rows starting one late (a row unvisited), a row stride of one
/// group too few (rows visited twice), a chain left out of the thread's
/// sum; and its completeness asked of the whole block instead of a
/// column's threads (no `team`), which other columns' visits refute, or of
/// a team finer or coarser than the columns, refuted as well: the team is
/// checked against the code, not trusted.
#[test]
fn the_column_form_is_proved_and_its_mutants_refuted() {
    use tokitai_compiler::kir::{IExpr, KStmt, Schedule};
    use tokitai_compiler::verify::mutate::mutants;
    let cfg = Config { timeout_ms: 10_000 };
    let mut checked = 0;
    for (file, kernel) in [("layernorm.tk", "layernorm_bwd_params")] {
        let arts = compile_example(file, &Target::default_cuda());
        let i = arts.program.kernels.iter().position(|k| k.name == kernel).expect("the kernel");
        let k = &arts.program.kernels[i];
        let v = arts.variants[i].iter().find(|v| v.ir.name == format!("{}_col", kernel)).expect("the column form is emitted: proved, its tolerance included");
        let Schedule::ColumnReduction { lanes, chains } = v.ir.schedule else { panic!("{:?}", v.ir.schedule) };
        let (groups, chains) = ((v.ir.block / lanes) as i64, chains as i64);
        let guarded = v.kernel(k);
        // A tile or row loop one iteration longer is an equivalent
        // mutant: the extra tile's columns are past C and the extra rows
        // past R, so every guard of theirs is false.
        let equivalent = |m: &tokitai_compiler::verify::mutate::Mutant| m.description.ends_with("loop `tile` runs one iteration too far") || m.description.ends_with("loop `r0` runs one iteration too far");
        let all: Vec<_> = mutants(&guarded, &v.ir).into_iter().filter(|m| !equivalent(m)).collect();
        assert!(all.len() >= 25, "{}: only {} mutants", v.ir.name, all.len());
        let survivors: Vec<String> = all.iter().filter(|m| first_refutation(&guarded, &m.ir, &cfg).is_none()).map(|m| format!("{}: {}", m.operator, m.description)).collect();
        assert!(survivors.is_empty(), "{}: {} of {} mutants survived:\n{}", v.ir.name, survivors.len(), all.len(), survivors.join("\n"));
        let refuted = |ir: &tokitai_compiler::kir::KernelIr, what: &str| {
            let r = first_refutation(&guarded, ir, &cfg).unwrap_or_else(|| panic!("{}: {} was proved", v.ir.name, what));
            assert_eq!(r.obligation.kind, tokitai_contracts::ObligationKind::ReductionComplete, "{}: {} refuted by {}", v.ir.name, what, r.obligation.description);
            r.obligation.description.clone()
        };
        // The rows' loop: `for (r0 = tid / lanes; r0 < R; r0 += groups * chains)`.
        let is_rows = |s: &KStmt| matches!(s, KStmt::For { start: IExpr::Div(..), unroll: false, .. });
        let mut late = v.ir.clone();
        assert_eq!(edit(&mut late.body, &|s| is_rows(s) && { if let KStmt::For { start, .. } = s { *start = start.clone().add(IExpr::c(1)); } true }), 1);
        let why = refuted(&late, "a late start");
        assert!(why.contains("visit every index"), "{}", why);
        let mut twice = v.ir.clone();
        assert_eq!(edit(&mut twice.body, &|s| is_rows(s) && { if let KStmt::For { step, .. } = s { *step = IExpr::c((groups - 1) * chains); } true }), 1);
        // (Rows visited twice, and so the witnesses' rows not by their
        // iteration: the first refutation is either.)
        refuted(&twice, "a short stride");
        // The thread's chains: `for (chain = 0; chain < chains; ++chain)`.
        let mut dropped = v.ir.clone();
        let chain = dropped.reduction_loops.iter().find(|r| r.name.starts_with("the chains")).expect("the chains' loop is a reduction loop").var;
        assert_eq!(edit(&mut dropped.body, &|s| matches!(s, KStmt::For { var, .. } if *var == chain) && { if let KStmt::For { end, .. } = s { *end = IExpr::c(chains - 1); } true }), 1);
        let why = refuted(&dropped, "a dropped chain");
        assert!(why.contains("visits every index"), "{}", why);
        // The team: none (the block as one sum), finer or coarser.
        for (team, what) in [(None, "no team"), (Some(IExpr::Tid), "a team a thread"), (Some(IExpr::Tid.rem(IExpr::c(8))), "a team of two columns")] {
            let mut ir = v.ir.clone();
            for r in ir.reduction_loops.iter_mut() {
                if let Some(visits) = r.visits.as_mut() {
                    visits.team = team.clone();
                }
            }
            refuted(&ir, what);
        }
        checked += 1;
    }
    assert_eq!(checked, 1);
}

/// The split-sum form of a narrow contraction (`<kernel>_ks32`, 2 x 2
/// outputs a thread): proved,
/// its tolerance included, and each mutant refuted; the completeness of
/// its sum asked among the threads of one micro-tile slot (its team):
/// with no team, or a finer or coarser one, the proof fails.
#[test]
fn the_split_sum_form_is_proved_and_its_mutants_refuted() {
    use tokitai_compiler::kir::{IExpr, Schedule};
    use tokitai_compiler::verify::mutate::mutants;
    let cfg = Config { timeout_ms: 10_000 };
    let arts = compile_example("linear.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "linear_fwd").expect("the kernel");
    let k = &arts.program.kernels[i];
    let v = arts.variants[i].iter().find(|v| v.ir.name == "linear_fwd_ks32").expect("the split-sum form is emitted: proved, its tolerance included");
    let Schedule::SplitContraction { bm, bn, tm, tn, groups, .. } = v.ir.schedule else { panic!("{:?}", v.ir.schedule) };
    let per = ((bm / tm) * (bn / tn)) as i64;
    let guarded = v.kernel(k);
    // Equivalent mutants under the guard (N <= 32, a tile 32 wide): the
    // one tile column's origin is 0 at any stride, and a store one
    // micro-tile column further lies past N; a slab loop one iteration
    // longer loads zeros and visits no index (its steps' guard is false).
    let equivalent = |m: &tokitai_compiler::verify::mutate::Mutant| {
        m.description.ends_with("tile origin `n0` advances by half a tile") || m.description.ends_with("loop `k0` runs one iteration too far") || m.description.ends_with("loop `j` runs one iteration too far")
    };
    let all: Vec<_> = mutants(&guarded, &v.ir).into_iter().filter(|m| !equivalent(m)).collect();
    assert!(all.len() >= 25, "only {} mutants", all.len());
    let survivors: Vec<String> = all.iter().filter(|m| first_refutation(&guarded, &m.ir, &cfg).is_none()).map(|m| format!("{}: {}", m.operator, m.description)).collect();
    assert!(survivors.is_empty(), "{} of {} mutants survived:\n{}", survivors.len(), all.len(), survivors.join("\n"));
    let refuted = |ir: &tokitai_compiler::kir::KernelIr, what: &str| {
        let r = first_refutation(&guarded, ir, &cfg).unwrap_or_else(|| panic!("{} was proved", what));
        assert_eq!(r.obligation.kind, tokitai_contracts::ObligationKind::ReductionComplete, "{} refuted by {}", what, r.obligation.description);
        r.obligation.description.clone()
    };
    visits_mutants_are_refuted(&v.ir, &refuted, [(None, "no team"), (Some(IExpr::Tid), "a team a thread"), (Some(IExpr::Tid.rem(IExpr::c(per / 2))), "a team of two slots")]);
    assert!(groups > 1);
}


/// The narrow form of a contraction (`<kernel>_nw`, the warp's lanes along
/// the sum): proved, its tolerance included, and each mutant refuted; the
/// completeness of its sum asked among the threads of one warp (its
/// team): with no team, or a finer or coarser one, the proof fails; a
/// butterfly level that skips a slot leaves the next level reading an
/// unset register.
#[test]
fn the_narrow_form_is_proved_and_its_mutants_refuted() {
    use tokitai_compiler::kir::{IExpr, KStmt, Schedule};
    use tokitai_compiler::verify::mutate::mutants;
    let cfg = Config { timeout_ms: 10_000 };
    let arts = compile_example("linear.tk", &Target::default_cuda());
    let i = arts.program.kernels.iter().position(|k| k.name == "linear_fwd").expect("the kernel");
    let k = &arts.program.kernels[i];
    let v = arts.variants[i].iter().find(|v| v.ir.name == "linear_fwd_nw").expect("the narrow form is emitted: proved, its tolerance included");
    let Schedule::NarrowContraction { rows, cols, .. } = v.ir.schedule else { panic!("{:?}", v.ir.schedule) };
    let guarded = v.kernel(k);
    // Equivalent mutants under the guard (N <= 32 = cols, one warp of 32
    // lanes): a slab loop one iteration longer loads zeros and visits no
    // index (its steps' guard is false); the store's column loop one
    // iteration longer stores nothing (no lane is column 32).
    let equivalent = |m: &tokitai_compiler::verify::mutate::Mutant| m.description.ends_with("loop `k0` runs one iteration too far") || m.description.ends_with("loop `col` runs one iteration too far");
    let all: Vec<_> = mutants(&guarded, &v.ir).into_iter().filter(|m| !equivalent(m)).collect();
    assert!(all.len() >= 25, "only {} mutants", all.len());
    let survivors: Vec<String> = all.iter().filter(|m| first_refutation(&guarded, &m.ir, &cfg).is_none()).map(|m| format!("{}: {}", m.operator, m.description)).collect();
    assert!(survivors.is_empty(), "{} of {} mutants survived:\n{}", survivors.len(), all.len(), survivors.join("\n"));
    let refuted_by = |ir: &tokitai_compiler::kir::KernelIr, what: &str, kind: tokitai_contracts::ObligationKind| {
        let r = first_refutation(&guarded, ir, &cfg).unwrap_or_else(|| panic!("{} was proved", what));
        assert_eq!(r.obligation.kind, kind, "{} refuted by {}", what, r.obligation.description);
        r.obligation.description.clone()
    };
    let complete = tokitai_contracts::ObligationKind::ReductionComplete;
    visits_mutants_are_refuted(&v.ir, &|ir, what| refuted_by(ir, what, complete), [(None, "no team"), (Some(IExpr::Tid), "a team a thread"), (Some(IExpr::Tid.div(IExpr::c(64))), "a team of two warps")]);
    // Each butterfly level one slot short: the next level (or the store)
    // reads the slot it left unset.
    let slots = (rows * cols) as i64;
    let levels = |s: &KStmt| matches!(s, KStmt::For { end: IExpr::Const(n), body, .. } if *n == slots && matches!(body.as_slice(), [KStmt::ArraySet { value, .. }] if format!("{:?}", value).contains("ShflXor")));
    let mut count = 0;
    loop {
        let mut ir = v.ir.clone();
        let seen = std::cell::Cell::new(0);
        let n = edit(&mut ir.body, &|s| {
            if !levels(s) {
                return false;
            }
            seen.set(seen.get() + 1);
            if seen.get() != count + 1 {
                return false;
            }
            if let KStmt::For { end, .. } = s {
                *end = IExpr::c(slots - 1);
            }
            true
        });
        if n == 0 {
            break;
        }
        let why = refuted_by(&ir, &format!("butterfly level {} one slot short", count), tokitai_contracts::ObligationKind::Initialized);
        assert!(why.contains("acc"), "{}", why);
        count += 1;
    }
    assert_eq!(count, 5, "a level for each of the warp's five masks");
}

/// The mutants of a sum whose visits are split among a team of threads
/// (`kir::Visits::team`) that its form must refute, each as incomplete
/// (`refuted` asserts how and returns the refutation): the visiting loop
/// one step short, the visit's guard one index short of the sum's end,
/// and each of `teams` in place of its own.
fn visits_mutants_are_refuted(ir: &tokitai_compiler::kir::KernelIr, refuted: &dyn Fn(&tokitai_compiler::kir::KernelIr, &str) -> String, teams: [(Option<tokitai_compiler::kir::IExpr>, &str); 3]) {
    use tokitai_compiler::kir::{Cond, IExpr, KStmt};
    let steps = ir.reduction_loops.iter().find(|r| r.visits.is_some()).expect("a loop visits the sum").var;
    // One step short of the thread's share of each slab.
    let mut short = ir.clone();
    assert_eq!(edit(&mut short.body, &|s| matches!(s, KStmt::For { var, .. } if *var == steps) && { if let KStmt::For { end, .. } = s { *end = end.clone().sub(IExpr::c(1)); } true }), 1);
    let why = refuted(&short, "a step short");
    assert!(why.contains("visit every index"), "{}", why);
    // The visit's guard one index short of the sum's end.
    let mut early = ir.clone();
    let cut = |s: &mut KStmt| {
        let KStmt::For { var, body, .. } = s else { return false };
        if *var != steps {
            return false;
        }
        let Some(KStmt::If { cond: Cond::Lt(_, end), .. }) = body.first_mut() else { return false };
        *end = end.clone().sub(IExpr::c(1));
        true
    };
    assert_eq!(edit(&mut early.body, &cut), 1);
    refuted(&early, "a guard that stops one index early");
    // The team: none (the block as one sum), finer or coarser.
    for (team, what) in teams {
        let mut other = ir.clone();
        for r in other.reduction_loops.iter_mut() {
            if let Some(visits) = r.visits.as_mut() {
                visits.team = team.clone();
            }
        }
        refuted(&other, what);
    }
}
