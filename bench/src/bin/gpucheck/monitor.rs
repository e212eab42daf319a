//! `tokitai-gpucheck --monitor`: the contract monitor on the device agrees
//! with the monitor on the host. For every kernel with a domain, random
//! cases as drawn (inside the domain and its relations) and with one input
//! element broken (NaN at the first or the last element, a value beyond the domain, a
//! domain relation broken), each launched on the device under the monitor
//! (probes, read back at `synchronize`) and judged on the host from the same
//! values (`monitor::judge`). Every verdict must be the same.

use tokitai_runtime::check::{launch_on, random_case, upload, Case, Rng};
use tokitai_runtime::monitor::{self, judge, range_of, relation_violation};
use tokitai_runtime::{kernels, Bound, Device, KernelDef};

/// The ways a drawn case is broken (or not).
const VARIANTS: [&str; 5] = ["as drawn", "NaN last", "beyond the domain", "relation broken", "NaN first"];

/// One variant of `case`; `None` where it does not apply to `k`.
fn variant(k: &KernelDef, case: &Case, which: usize) -> Option<Case> {
    let info = k.info;
    let mut c = case.clone();
    let float_input = |name: &str| info.tensors.iter().position(|p| p.name == name && p.role != "output" && p.dtype.starts_with('f'));
    match which {
        0 => {}
        1 => {
            let t = info.domain.iter().find_map(|d| float_input(d.0))?;
            set_last(&mut c, t, f64::NAN);
        }
        2 => {
            // A numeric domain's upper end, doubled and past it.
            let (name, _, hi) = info.domain.iter().find(|d| float_input(d.0).is_some() && !info.magnitudes.iter().any(|m| m.0 == d.0))?;
            set_last(&mut c, float_input(name)?, hi.abs() * 2.0 + 1.0);
        }
        3 => {
            let (t, s, _, _) = info.relations.first()?;
            let (ti, si) = (float_input(t)?, float_input(s)?);
            let s_lo = info.domain.iter().find(|d| d.0 == *s).map_or(0.0, |d| d.1.max(0.0));
            let t_hi = info.domain.iter().find(|d| d.0 == *t).map_or(1.0, |d| d.2.min(1.0));
            set_last(&mut c, si, s_lo);
            set_last(&mut c, ti, t_hi);
        }
        4 => {
            let t = info.domain.iter().find_map(|d| float_input(d.0))?;
            set_at(&mut c, t, true, f64::NAN);
        }
        _ => return None,
    }
    Some(c)
}

/// Random cases of `k` at three scales (two for a contraction, whose CPU
/// oracle is slow), drawn from `seed` and the kernel.
fn drawn_cases(k: &KernelDef, seed: u64) -> Vec<Case> {
    let scales: &[i64] = if k.info.schedule == "contraction" { &[3, 61] } else { &[3, 61, 1500] };
    scales
        .iter()
        .enumerate()
        .filter_map(|(i, scale)| {
            let mut rng = Rng::new(seed ^ ((i as u64) << 16) ^ k.info.name.len() as u64);
            random_case(k, &mut rng, *scale).ok()
        })
        .collect()
}

/// The host's verdict on a case: covered?
fn host_covered(k: &KernelDef, c: &Case) -> bool {
    let hosts: Vec<_> = c.tensors.iter().map(|t| Some(&t.1)).collect();
    let ranges: Vec<_> = k.info.tensors.iter().zip(&c.tensors).map(|(p, t)| if p.role == "output" { None } else { range_of(&t.1) }).collect();
    judge(k, &Bound { dims: c.dims.clone(), scalars: c.scalars.clone() }, &ranges, relation_violation(k.info, &hosts, &[], &|_| false).as_deref()).outside.is_none()
}

/// The device's verdict: covered, outside, or an error.
fn device_covered(dev: &Device, k: &KernelDef, c: &Case) -> tokitai_runtime::Result<bool> {
    let before = monitor::coverage().get(k.info.name).cloned().unwrap_or_default();
    let mut tensors = upload(dev, c)?;
    launch_on(dev, k, &mut tensors, &c.scalars)?;
    dev.synchronize()?;
    let after = monitor::coverage().get(k.info.name).cloned().unwrap_or_default();
    if after.launches != before.launches + 1 || after.unmeasured != before.unmeasured {
        return Err(tokitai_runtime::Error::Tensor(format!("{}: the launch was not measured ({})", k.info.name, after.why_unmeasured.unwrap_or_default())));
    }
    Ok(after.covered == before.covered + 1)
}

/// Run the agreement check; the process's exit status.
pub fn run(dev: &Device) -> i32 {
    monitor::set_mode(monitor::Mode::Warn);
    let (mut cases, mut disagreements, mut errors, mut outside) = (0, 0, 0, 0);
    for k in kernels::all() {
        if k.info.domain.is_empty() || k.info.name.starts_with("probe_") {
            continue;
        }
        for drawn in drawn_cases(k, 0x3011) {
            for (which, what) in VARIANTS.iter().enumerate() {
                let Some(c) = variant(k, &drawn, which) else { continue };
                cases += 1;
                let host = host_covered(k, &c);
                outside += !host as usize;
                match device_covered(dev, k, &c) {
                    Ok(d) if d == host => {}
                    Ok(d) => {
                        disagreements += 1;
                        println!("{:<22} DISAGREE dims {:?} {}: host {}, device {}", k.info.name, c.dims, what, verdict(host), verdict(d));
                    }
                    Err(e) => {
                        errors += 1;
                        println!("{:<22} ERROR dims {:?} {}: {}", k.info.name, c.dims, what, e);
                    }
                }
            }
        }
    }
    println!("monitor on {}: {} cases ({} outside their bounds), {} disagreements with the host, {} errors", dev.describe(), cases, outside, disagreements, errors);
    if disagreements + errors == 0 && outside > 0 && outside < cases {
        0
    } else {
        1
    }
}

fn verdict(covered: bool) -> &'static str {
    if covered {
        "covered"
    } else {
        "outside"
    }
}

/// An observed output: its position among the tensors, the range the
/// monitor knows it by, and the range of the data read back (finite).
type Compared = (usize, Option<(f64, f64)>, Option<(f64, f64)>);

/// `tokitai-gpucheck --monitor`, second part: the kernels' observations of
/// their outputs agree with the data. For every kernel that observes an
/// output, random cases (as drawn, and with a NaN input where it has a
/// float input) launched under the monitor; after the step is read back,
/// each observed output's range as the monitor knows it must be exactly
/// the range of the output read back, or unknown where the output holds
/// a non-finite value. Returns (outputs checked, mismatches, errors).
pub fn observations(dev: &Device) -> (usize, usize, usize) {
    monitor::set_mode(monitor::Mode::Warn);
    let (mut checked, mut mismatches, mut errors) = (0, 0, 0);
    for k in kernels::all() {
        // It observes, or a variant of it does (a row schedule's observing
        // twin, launched in place of the choice while the monitor is on).
        if k.observes.is_empty() && k.variants.iter().all(|v| v.observes.is_empty()) {
            continue;
        }
        for drawn in drawn_cases(k, 0x0b5e) {
            for which in [0, 1] {
                let Some(c) = variant(k, &drawn, which) else { continue };
                let run = || -> tokitai_runtime::Result<Vec<Compared>> {
                    let mut tensors = upload(dev, &c)?;
                    launch_on(dev, k, &mut tensors, &c.scalars)?;
                    dev.synchronize()?;
                    k.observing(dev.chosen(k, &c.dims))
                        .observes
                        .iter()
                        .map(|&p| {
                            let host = range_of(&tensors[p].to_buf()?);
                            let finite = host.filter(|(lo, hi)| lo.is_finite() && hi.is_finite());
                            Ok((p, monitor::seen_range(&tensors[p]), finite))
                        })
                        .collect()
                };
                match run() {
                    Ok(outputs) => {
                        for (p, seen, data) in outputs {
                            checked += 1;
                            if seen != data {
                                mismatches += 1;
                                println!("{:<22} OBSERVED {} dims {:?} {}: observed {:?}, data {:?}", k.info.name, k.info.tensors[p].name, c.dims, VARIANTS[which], seen, data);
                            }
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        println!("{:<22} ERROR dims {:?} {}: {}", k.info.name, c.dims, VARIANTS[which], e);
                    }
                }
            }
        }
    }
    println!("observations on {}: {} outputs checked, {} disagree with the data, {} errors", dev.describe(), checked, mismatches, errors);
    (checked, mismatches, errors)
}

/// `tokitai-gpucheck --monitor`, third part: the kernels' checks of a
/// domain relation on what they store (AdamW's `m * m <= 64 v`) agree with
/// the data. For every kernel that checks one, random cases as drawn and
/// with the relation's inputs broken at the last element (its square at
/// the top of its domain, its bound at the bottom), each with the step
/// taken and with the step skipped (a non-finite `nsq`-like input, where
/// the kernel has one, stores the moments unchanged: the broken pair
/// stays): after the step is read back, the monitor must know the
/// relation to hold on the outputs exactly where it holds on the data
/// read back. Returns (pairs checked, of which broken, mismatches, errors).
pub fn relations(dev: &Device) -> (usize, usize, usize, usize) {
    monitor::set_mode(monitor::Mode::Warn);
    let (mut checked, mut broken, mut mismatches, mut errors) = (0, 0, 0, 0);
    for k in kernels::all() {
        if k.relates.is_empty() {
            continue;
        }
        let info = k.info;
        let position = |name: &str| info.tensors.iter().position(|p| p.name == name);
        for drawn in drawn_cases(k, 0x2e1a) {
            for &r in k.relates {
                let (t, s, factor, text) = info.relations[r];
                let (Some(ti), Some(si)) = (position(t), position(s)) else { continue };
                for (what, breaks, skips) in [("as drawn", false, false), ("broken", true, false), ("broken, step skipped", true, true)] {
                    let mut c = drawn.clone();
                    if breaks {
                        let hi = info.domain.iter().find(|d| d.0 == t).map_or(1.0, |d| d.2);
                        let lo = info.domain.iter().find(|d| d.0 == s).map_or(0.0, |d| d.1.max(0.0));
                        set_last(&mut c, ti, hi);
                        set_last(&mut c, si, lo);
                    }
                    if skips {
                        // An input that the kernel tests for being finite
                        // to skip its step: the one named `nsq` (AdamW's).
                        let Some(n) = position("nsq") else { continue };
                        set_last(&mut c, n, f64::INFINITY);
                    }
                    // A second launch on the first one's outputs is judged
                    // by the first one's check: read back before it (the
                    // check's verdict kept), or in the same step (its words).
                    let covered = || monitor::coverage().get(info.name).map_or(0, |c| c.covered);
                    let run = || -> tokitai_runtime::Result<(bool, bool, bool, bool, bool)> {
                        let mut tensors = upload(dev, &c)?;
                        launch_on(dev, k, &mut tensors, &c.scalars)?;
                        dev.synchronize()?;
                        let (tb, sb) = (tensors[ti].to_buf()?, tensors[si].to_buf()?);
                        let data = relation_holds_on(&tb, &sb, factor);
                        let known = monitor::relation_held(&tensors[ti], &tensors[si], factor);
                        let mut next = c.clone();
                        for (slot, t) in next.tensors.iter_mut().zip(&tensors) {
                            slot.1 = t.to_buf()?;
                        }
                        let host_next = host_covered(k, &next);
                        let before = covered();
                        launch_on(dev, k, &mut tensors, &c.scalars)?;
                        dev.synchronize()?;
                        let read_back = covered() > before;
                        // Both launches in one step: the second's verdict is
                        // the count's growth less the first's.
                        let mut tensors = upload(dev, &c)?;
                        let before = covered();
                        launch_on(dev, k, &mut tensors, &c.scalars)?;
                        launch_on(dev, k, &mut tensors, &c.scalars)?;
                        dev.synchronize()?;
                        let same_step = covered() - before > u64::from(host_covered(k, &c));
                        Ok((known, data, host_next, read_back, same_step))
                    };
                    match run() {
                        Ok((known, data, host_next, read_back, same_step)) => {
                            checked += 1;
                            broken += usize::from(!data);
                            if known != data || read_back != host_next || same_step != host_next {
                                mismatches += 1;
                                println!(
                                    "{:<22} RELATION `{}` dims {:?} {}: monitor knows it holds: {}, it holds on the data: {}; next launch covered: host {}, device after a read-back {}, in the same step {}",
                                    info.name, text, c.dims, what, known, data, host_next, read_back, same_step
                                );
                            }
                        }
                        Err(e) => {
                            errors += 1;
                            println!("{:<22} ERROR dims {:?} {}: {}", info.name, c.dims, what, e);
                        }
                    }
                }
            }
        }
    }
    println!("relation checks on {}: {} output pairs checked ({} broken), {} disagree with the data, {} errors", dev.describe(), checked, broken, mismatches, errors);
    (checked, broken, mismatches, errors)
}

/// Set the first (or last) element of tensor `t` of `c` to `v`.
fn set_at(c: &mut Case, t: usize, first: bool, v: f64) {
    let buf = &mut c.tensors[t].1;
    let mut vals = buf.to_f64();
    if let Some(x) = if first { vals.first_mut() } else { vals.last_mut() } {
        *x = v;
    }
    buf.set_from_f64(&vals);
}

/// Set the last element of tensor `t` of `c` to `v`.
fn set_last(c: &mut Case, t: usize, v: f64) {
    set_at(c, t, false, v)
}

/// Does `t * t <= factor * s` hold on every element of host data (in
/// f64, as the monitor compares; `s` of one element bounds them all)?
fn relation_holds_on(t: &tokitai_runtime::abi::tk_rt::Buf, s: &tokitai_runtime::abi::tk_rt::Buf, factor: f64) -> bool {
    let (t, s) = (t.to_f64(), s.to_f64());
    t.iter().enumerate().all(|(i, x)| x * x <= factor * s[if s.len() == 1 { 0 } else { i }])
}
