//! The CPU schedule's observation of its outputs for the contract monitor
//! (`tk_rt::cpu::Watch`, issue 18): a launch judged by an observed range
//! or relation is judged by what the writer says it stored, so what it
//! says must be what a scan of the stored data finds, on every kernel,
//! every build and shapes split across threads.

use tokitai_runtime::abi::tk_rt::cpu::Watch;
use tokitai_runtime::abi::tk_rt::{Arg, Buf};
use tokitai_runtime::check::{random_case, Case, Rng};
use tokitai_runtime::{kernels, KernelDef};

/// Run the CPU schedule over a copy of the case with `watch`: the owned
/// buffers after, in signature order (inputs as they were).
fn run_watched(k: &KernelDef, case: &Case, watch: &Watch) -> Result<Vec<Buf>, String> {
    let mut args: Vec<Arg> = Vec::new();
    for (i, (_, b)) in case.tensors.iter().enumerate() {
        args.push(if k.info.tensors[i].role == "input" { Arg::In(b) } else { Arg::Own(b.clone()) });
    }
    (k.cpu_watched)(&case.dims, &case.scalars, &mut args, watch)?;
    Ok(args.into_iter().map(|a| if let Arg::Own(b) = a { b } else { Buf::F32(Vec::new()) }).collect())
}

/// `(min, max)` of a buffer by a plain scan, both NaN where one is.
fn scanned(b: &Buf) -> Option<(f64, f64)> {
    let v = b.to_f64();
    if v.iter().any(|x| x.is_nan()) {
        return Some((f64::NAN, f64::NAN));
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (!v.is_empty()).then_some((lo, hi))
}

/// The observed fold as the stored dtype's values (what the runtime
/// records).
fn observed_as(fold: tokitai_runtime::abi::tk_rt::cpu::Fold, b: &Buf) -> Option<(f64, f64)> {
    let (lo, hi) = fold.range()?;
    let stored = |x: f32| match b {
        Buf::F16(_) => half::f16::from_f32(x).to_f64(),
        Buf::Bf16(_) => half::bf16::from_f32(x).to_f64(),
        _ => x as f64,
    };
    Some((stored(lo), stored(hi)))
}

fn same(a: Option<(f64, f64)>, b: Option<(f64, f64)>) -> bool {
    match (a, b) {
        (Some((a0, a1)), Some((b0, b1))) => (a0 == b0 || (a0.is_nan() && b0.is_nan())) && (a1 == b1 || (a1.is_nan() && b1.is_nan())),
        (None, None) => true,
        _ => false,
    }
}

#[test]
fn every_observed_range_is_the_range_of_what_was_stored() {
    let mut observing = Vec::new();
    let mut failures = Vec::new();
    for wide in [true, false] {
        tokitai_runtime::abi::tk_rt::cpu::set_wide(wide);
        for k in kernels::all() {
            for (i, scale) in [3i64, 37, 700].into_iter().enumerate() {
                let mut rng = Rng::new(0x0b5e ^ (i as u64) << 40 ^ k.info.name.len() as u64);
                let Ok(case) = random_case(k, &mut rng, scale) else { continue };
                let watch = Watch::new(k.info.tensors.len(), k.info.relations.len());
                let outs = match run_watched(k, &case, &watch) {
                    Ok(o) => o,
                    Err(e) => {
                        failures.push(format!("{}: {}", k.info.name, e));
                        continue;
                    }
                };
                for (j, p) in k.info.tensors.iter().enumerate() {
                    let Some(fold) = watch.observed(j) else { continue };
                    assert_ne!(p.role, "input", "{}: input `{}` observed", k.info.name, p.name);
                    if !observing.contains(&k.info.name) {
                        observing.push(k.info.name);
                    }
                    let (got, want) = (observed_as(fold, &outs[j]), scanned(&outs[j]));
                    if !same(got, want) {
                        failures.push(format!("{} dims {:?}: `{}` observed {:?}, stored {:?}", k.info.name, case.dims, p.name, got, want));
                    }
                }
            }
        }
    }
    tokitai_runtime::abi::tk_rt::cpu::set_wide(true);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every family of CPU schedule observes: element-wise, rows,
    // columns, contractions.
    for name in ["gelu_fwd", "adamw", "layernorm_fwd", "layernorm_bwd_params", "bias_grad", "linear_fwd", "linear_bwd_w", "row_norm_sq"] {
        assert!(observing.contains(&name), "`{}` observes nothing (observing: {:?})", name, observing);
    }
}

/// AdamW checks its domain relation `m * m <= 64 v` on the moments it
/// stores: true on a step from moments that satisfy it, false (not
/// silence) on moments that break it and that a skipped step (a
/// non-finite `nsq`) stores unchanged.
#[test]
fn adamw_reports_whether_its_moments_relation_held_on_what_it_stored() {
    let k = kernels::by_name("adamw").unwrap();
    let relation = k.info.relations.iter().position(|r| r.0 == "m" && r.1 == "v").expect("adamw states m * m <= 64 v");
    let (m, v) = (k.info.tensors.iter().position(|p| p.name == "m").unwrap(), k.info.tensors.iter().position(|p| p.name == "v").unwrap());
    let nsq = k.info.tensors.iter().position(|p| p.name == "nsq").unwrap();
    let holds = |outs: &[Buf]| (0..outs[m].len()).all(|i| outs[m].get_f64(i).powi(2) <= 64.0 * outs[v].get_f64(i));
    for scale in [3i64, 700] {
        let mut rng = Rng::new(41 + scale as u64);
        let mut case = random_case(k, &mut rng, scale).unwrap();
        let watch = Watch::new(k.info.tensors.len(), k.info.relations.len());
        let outs = run_watched(k, &case, &watch).unwrap();
        assert_eq!(watch.held(relation), Some(holds(&outs)), "scale {}: a step from admitted moments", scale);
        assert_eq!(watch.held(relation), Some(true));
        // Moments that break it, kept by a skipped step.
        if let Buf::F32(mv) = &mut case.tensors[m].1 {
            let n = mv.len();
            mv[n / 2] = 5.0;
        }
        if let Buf::F32(vv) = &mut case.tensors[v].1 {
            let n = vv.len();
            vv[n / 2] = 0.0;
        }
        case.tensors[nsq].1 = Buf::F32(vec![f32::INFINITY]);
        let watch = Watch::new(k.info.tensors.len(), k.info.relations.len());
        let outs = run_watched(k, &case, &watch).unwrap();
        assert!(!holds(&outs), "the case breaks the relation");
        assert_eq!(watch.held(relation), Some(false), "scale {}: a broken pair stored", scale);
    }
    // A call that observes nothing says nothing.
    let mut rng = Rng::new(5);
    let case = random_case(k, &mut rng, 37).unwrap();
    let off = Watch::off();
    run_watched(k, &case, &off).unwrap();
    assert_eq!(off.held(relation), None);
    assert!(off.observed(m).is_none());
}

/// The fold's extremes from integer min/max of the bits are a float
/// scan's, on signs, zeros, subnormals, infinities and NaNs of both signs,
/// in every order, merged or not.
#[test]
fn the_fold_finds_a_float_scans_extremes() {
    use tokitai_runtime::abi::tk_rt::cpu::Fold;
    let specials = [0.0f32, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, -1e-40, 3.4e38, -3.4e38, f32::INFINITY, f32::NEG_INFINITY, 0.5, -2.5, 7.0, f32::MIN_POSITIVE, -f32::MIN_POSITIVE];
    let mut rng = Rng::new(77);
    for trial in 0..3000 {
        let n = 1 + (rng.unit() * 9.0) as usize;
        let mut xs: Vec<f32> = (0..n).map(|_| specials[(rng.unit() * specials.len() as f64) as usize % specials.len()]).collect();
        if trial % 7 == 0 {
            let at = (rng.unit() * n as f64) as usize % n;
            xs[at] = if trial % 2 == 0 { f32::NAN } else { -f32::NAN };
        }
        let mut all = Fold::EMPTY;
        all.add_all(&xs);
        let (mut one, mut halves) = (Fold::EMPTY, Fold::EMPTY);
        xs.iter().for_each(|&x| one.add(x));
        let mut second = Fold::EMPTY;
        halves.add_all(&xs[..n / 2]);
        second.add_all(&xs[n / 2..]);
        halves.merge(second);
        let want = scanned(&Buf::F32(xs.clone()));
        for (how, f) in [("add_all", all), ("add", one), ("merged", halves)] {
            let got = f.range().map(|(lo, hi)| (lo as f64, hi as f64));
            assert!(same(got, want), "{}: {:?} gives {:?}, a scan {:?}", how, xs, got, want);
        }
    }
    assert_eq!(Fold::EMPTY.range(), None, "nothing seen");
}
