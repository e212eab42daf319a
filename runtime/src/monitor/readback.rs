//! Reading a step back into verdicts: the probes' slots and the kernels'
//! observation words, as `probe::settle_reading` copies them to the host,
//! decoded into each waiting launch's input ranges and domain relations,
//! judged (`judge::Judge::verdict`), counted, and turned into what the
//! monitor knows for the next step (`known::settled`). Pure functions of
//! the launches `probe::queue` recorded and the values read back.

use super::count_all;
use super::judge::Verdict;
use super::known;
use super::probe::{ObservedSlots, Pending, RangeSource, RelationSource, OBSERVED_WORDS};
use crate::abi::tk_info::OBSERVE_WORDS;
use crate::{Error, Result};

/// Does `t * t <= factor * s` hold for every element of a `t` with values
/// in `t_range`, `s` being one value in `s_range`? Exactly where it holds
/// at both of `t`'s extremes and `s`'s least value (`t * t` is largest at
/// an extreme; `factor > 0`), in the f64 arithmetic of
/// `tokitai_contracts::relation::holds`, which is the probes' and the
/// host's: so the verdict is the one a probe of every element gives. A
/// range that saw a NaN or an infinity decides nothing: such a launch is
/// outside its domain box anyway, and the relation is reported unchecked.
fn relation_by_ranges(t_range: Option<(f64, f64)>, s_range: Option<(f64, f64)>, factor: f64) -> std::result::Result<(), String> {
    use tokitai_contracts::relation::holds;
    let finite = |r: Option<(f64, f64)>| r.filter(|(lo, hi)| lo.is_finite() && hi.is_finite());
    match (finite(t_range), finite(s_range)) {
        (Some((lo, hi)), Some((s, _))) if holds(lo, s, factor) && holds(hi, s, factor) => Ok(()),
        (Some((lo, hi)), Some((s, _))) => Err(format!("its square reaches {:e} at the extremes [{}, {}], above {} x {}", lo.abs().max(hi.abs()).powi(2), lo, hi, factor, s)),
        _ => Err("an input it relates holds a value that is not finite (or was not measured)".into()),
    }
}

/// The range an observation read back saw: `None` where it saw a
/// non-finite value, or nothing (a kernel that did not observe: never
/// taken for a range).
pub(super) fn observed_range(i32s: &[i32], o: &ObservedSlots) -> Option<(f64, f64)> {
    let (mut hi, mut lo, mut bad) = (0u32, 0u32, 0u32);
    for w in i32s[o.at..o.at + OBSERVED_WORDS].chunks_exact(OBSERVE_WORDS) {
        hi = hi.max(w[0] as u32);
        lo = lo.max(w[1] as u32);
        bad |= w[2] as u32;
    }
    if bad != 0 || hi == 0 || lo == 0 {
        return None;
    }
    // A key's sign bit is set for a positive value (its bits follow), else
    // every bit is the value's flipped; the smallest's key is complemented.
    let value = |key: u32| f32::from_bits(if key & 0x8000_0000 != 0 { key & 0x7fff_ffff } else { !key }) as f64;
    let (lo, hi) = (value(!lo), value(hi));
    // An infinity stored is kept by the folds: non-finite, like a NaN.
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// Blocks of the launch that checked a relation into these words
/// (`KStmt::ObserveRelation`) that stored a pair breaking it (a NaN
/// included): the third words, summed.
pub(super) fn relation_broken(i32s: &[i32], o: &ObservedSlots) -> u64 {
    i32s[o.at..o.at + OBSERVED_WORDS].chunks_exact(OBSERVE_WORDS).map(|w| w[2] as u32 as u64).sum()
}

/// Judge every launch of `pending` from the slots read back, count them
/// (one lock for all), and keep the facts their covered producers
/// vouch for; in strict mode the first launch outside its bounds is the
/// error (every launch is counted first).
pub(super) fn judge_all(pending: &[Pending], f64s: &[f64], i32s: &[i32]) -> Result<()> {
    let verdicts = verdicts_of(pending, f64s, i32s);
    let covered: Vec<bool> = verdicts.iter().map(|v| v.outside.is_none()).collect();
    let verdicts = pending.iter().zip(verdicts).map(|(p, v)| (&p.kernel, Some(v)));
    let counted = count_all(verdicts);
    known::settled(|i| covered.get(i).copied().unwrap_or(false), |o| observed_range(i32s, o), |o| relation_broken(i32s, o) == 0);
    counted.map_err(|e| match e {
        Error::Contract { kernel, message } => Error::Contract { kernel, message: format!("{} (measured on the device before the launch, found when its step was read back)", message) },
        other => other,
    })
}

/// Each launch's verdict from the slots read back. Each is judged by its
/// own values, then, in order, a launch that relies on a producer's
/// `ensures` is covered only if that producer was. (On one thread: on the
/// H100 host, rayon's threads waking for a nano step's 136 launches
/// doubled the time, 45 us to 100 us.)
fn verdicts_of(pending: &[Pending], f64s: &[f64], i32s: &[i32]) -> Vec<Verdict> {
    let mut ranges = Vec::new();
    let mut covered: Vec<bool> = Vec::with_capacity(pending.len());
    pending
        .iter()
        .map(|p| {
            let mut verdict = judge_pending(p, f64s, i32s, &mut ranges);
            if verdict.outside.is_none() {
                if let Some(why) = producer_outside(p, &covered) {
                    verdict = Verdict { outside: Some(why), bounds: Vec::new() };
                }
            }
            covered.push(verdict.outside.is_none());
            verdict
        })
        .collect()
}

/// Judge a launch from its slots, taking the ranges its producers'
/// `ensures` give as they are (see [`producer_outside`]; `ranges`:
/// scratch space).
fn judge_pending(p: &Pending, f64s: &[f64], i32s: &[i32], ranges: &mut Vec<Option<(f64, f64)>>) -> Verdict {
    ranges.clear();
    ranges.extend(p.ranges.iter().map(|r| {
        r.as_ref().map(|r| match r {
            RangeSource::Slots(r) => {
                // A row with a NaN or an infinity has a non-finite count
                // (its minimum and maximum are not read). (An `or` over
                // every count, not `any`: it vectorises.)
                if i32s[r.bad..r.bad + r.rows].iter().fold(0, |a, &b| a | b) != 0 {
                    return (f64::NAN, f64::NAN);
                }
                (smallest(&f64s[r.lo..r.lo + r.rows]), largest(&f64s[r.hi..r.hi + r.rows]))
            }
            RangeSource::Proved { lo, hi, .. } => (*lo, *hi),
            // Every part's range, joined (a part that saw a NaN or nothing:
            // unknown, so NaN).
            RangeSource::Observed { parts, seen } => parts
                .iter()
                .try_fold(seen.unwrap_or((f64::INFINITY, f64::NEG_INFINITY)), |(lo, hi), o| observed_range(i32s, o).map(|(a, b)| (lo.min(a), hi.max(b))))
                .unwrap_or((f64::NAN, f64::NAN)),
        })
    }));
    let broken = p.kernel.info.relations.iter().zip(&p.relations).find_map(|((_, _, _, text), r)| match r {
        RelationSource::Probed(r) => {
            let n: i64 = i32s[r.broken..r.broken + r.rows].iter().map(|&b| b as i64).sum();
            (n > 0).then(|| format!("the domain relation `{}` fails at {} elements", text, n))
        }
        RelationSource::Observed(at) => {
            let n = relation_broken(i32s, at);
            (n > 0).then(|| format!("the domain relation `{}` fails on values stored by {} blocks of the launch that wrote both", text, n))
        }
        RelationSource::Held => None,
        RelationSource::Ranges { t, s, factor } => relation_by_ranges(ranges[*t], ranges[*s], *factor).err().map(|why| format!("the domain relation `{}` fails: {}", text, why)),
    });
    p.judge.verdict(&p.bound, ranges, broken.as_deref())
}

/// Why a launch is not covered although its values are inside: an input
/// known by a producer's `ensures`, where that producer (an earlier
/// launch of the same list; `covered[i]` for the i-th) was not covered.
fn producer_outside(p: &Pending, covered: &[bool]) -> Option<String> {
    p.ranges.iter().zip(p.kernel.info.tensors).find_map(|(r, param)| match r {
        Some(RangeSource::Proved { producer: Some(i), kernel, .. }) if !covered.get(*i).copied().unwrap_or(false) => {
            Some(format!("input `{}` was written by a launch of `{}` outside its proved bound, so its `ensures` does not hold", param.name, kernel))
        }
        _ => None,
    })
}

/// The smallest of finite values (a probe's row minima); `+inf` for none.
fn smallest(v: &[f64]) -> f64 {
    in_lanes(v, f64::INFINITY, |kept, x| if x < kept { x } else { kept })
}

/// The largest of finite values (a probe's row maxima); `-inf` for none.
fn largest(v: &[f64]) -> f64 {
    in_lanes(v, f64::NEG_INFINITY, |kept, x| if x > kept { x } else { kept })
}

/// `v` folded by `keep` from `none`, in four lanes so that the loop
/// vectorises (`keep` picks one of two finite values: any order gives the
/// same result).
fn in_lanes(v: &[f64], none: f64, keep: impl Fn(f64, f64) -> f64) -> f64 {
    let mut lanes = [none; 4];
    let chunks = v.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = keep(*l, x);
        }
    }
    rest.iter().chain(&lanes).fold(none, |a, &b| keep(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::judge::Judge;
    use super::super::probe::RangeSlots;
    use crate::call::Bound;
    use crate::abi::tk_info::OBSERVE_SLOTS;

    proptest::proptest! {
        /// A relation with one bound, decided by ranges, gives the verdict
        /// of checking every element (the probe's), f16 and f32 values,
        /// bounds from 0, factors of adamw and others.
        #[test]
        fn a_relation_decided_by_ranges_is_the_element_by_element_verdict(
            t in proptest::collection::vec(-70000.0f32..70000.0, 1..40),
            s in 0.0f32..5e9,
            factor in proptest::sample::select(vec![1.0f64, 64.0, 0.5]),
            half in proptest::bool::ANY,
        ) {
            let t: Vec<f64> = t.iter().map(|&x| if half { half::f16::from_f32(x).to_f64() } else { x as f64 }).collect();
            let s = s as f64;
            let range = (t.iter().copied().fold(f64::INFINITY, f64::min), t.iter().copied().fold(f64::NEG_INFINITY, f64::max));
            let by_elements = tokitai_contracts::relation::first_violation(t.len(), 1, factor, |i| t[i], |_| s).is_none();
            proptest::prop_assert_eq!(relation_by_ranges(Some(range), Some((s, s)), factor).is_ok(), by_elements);
        }
    }

    #[test]
    fn a_relation_decided_by_ranges_holds_at_the_boundary_and_not_past_it_or_on_nan() {
        // 8^2 = 64 * 1: holds with equality; one ulp of t more does not.
        assert!(relation_by_ranges(Some((-8.0, 3.0)), Some((1.0, 1.0)), 64.0).is_ok());
        let past = f64::from(f32::from_bits(8.0f32.to_bits() + 1));
        assert!(relation_by_ranges(Some((-past, 3.0)), Some((1.0, 1.0)), 64.0).is_err());
        // The bound's least value decides.
        assert!(relation_by_ranges(Some((0.0, 2.0)), Some((3.9, 100.0)), 1.0).is_err());
        for nan in [Some((f64::NAN, f64::NAN)), None] {
            assert!(relation_by_ranges(nan, Some((1.0, 1.0)), 1.0).is_err());
            assert!(relation_by_ranges(Some((0.0, 0.0)), nan, 1.0).is_err());
        }
    }

    #[test]
    fn a_launch_relying_on_an_uncovered_producer_is_not_covered() {
        use crate::kernels::gelu::gelu_fwd;
        // Launch 0 measures its input into rows 0..2 of the slots; launch
        // 1 reads launch 0's output by its proved `ensures` [-1, 1];
        // launch 2 by a fact whose producer was judged before this list.
        let measured = |bad: usize| Some(RangeSource::Slots(RangeSlots { lo: 0, hi: 2, bad, rows: 2 }));
        let proved = |producer| Some(RangeSource::Proved { lo: -1.0, hi: 1.0, producer, kernel: "gelu_fwd" });
        let launch = |range| Pending { kernel: gelu_fwd::KERNEL, judge: Judge::of(gelu_fwd::KERNEL.info), bound: Bound { dims: vec![512], scalars: Vec::new() }, ranges: vec![range, None], relations: Vec::new() };
        let pending = [launch(measured(0)), launch(proved(Some(0))), launch(proved(None))];
        // Row minima and maxima; row 1 of the first input is non-finite
        // where the count says so (the i32 slots from 2 on).
        let f64s = [-0.5, -7.0, 0.5, 7.5];
        let inside = verdicts_of(&pending, &f64s, &[0, 0, 0, 0]);
        assert!(inside.iter().all(|v| v.outside.is_none()), "{:?}", inside);
        let outside = verdicts_of(&pending, &[-0.5, -9.0, 0.5, 7.5], &[0, 0]);
        assert!(outside[0].outside.as_deref().is_some_and(|m| m.contains("[-9, 7.5]")), "{:?}", outside[0]);
        assert!(outside[1].outside.as_deref().is_some_and(|m| m.contains("written by a launch of `gelu_fwd` outside its proved bound")), "{:?}", outside[1]);
        assert_eq!(outside[2].outside, None, "a fact already settled holds");
        let bad = [launch(measured(2)), launch(proved(Some(0)))];
        let nonfinite = verdicts_of(&bad, &f64s, &[0, 0, 0, 3]);
        assert!(nonfinite[0].outside.as_deref().is_some_and(|m| m.contains("NaN")), "a non-finite count makes the range NaN: {:?}", nonfinite[0]);
        assert!(nonfinite[1].outside.is_some());
    }

    /// The words a kernel's observation leaves for `values`, spread over
    /// the slots as blocks would merge them (prelude.hip: `tk_observe`,
    /// `tk_observe_flush`: NaNs counted, other values, infinities too,
    /// merged by key), from word `at` of `words`.
    fn observe_on_host(values: &[f32], words: &mut [i32], at: usize) {
        let key = |v: f32| {
            let b = v.to_bits();
            if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 }
        };
        for (i, &v) in values.iter().enumerate() {
            let slot = at + (i * 7 % OBSERVE_SLOTS) * OBSERVE_WORDS;
            if v.is_nan() {
                words[slot + 2] += 1;
            } else {
                words[slot] = (words[slot] as u32).max(key(v)) as i32;
                words[slot + 1] = (words[slot + 1] as u32).max(!key(v)) as i32;
            }
        }
    }

    #[test]
    fn an_observation_reads_back_as_the_range_of_what_was_stored() {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let specials = [0.0f32, -0.0, 1e-45, -1e-45, 65504.0, -65504.0, f32::MAX, f32::MIN, 0.5, -3.25];
        for trial in 0..300 {
            let n = 1 + (rng.next_u32() % 200) as usize;
            let values: Vec<f32> = (0..n).map(|_| if rng.next_u32() % 4 == 0 { specials[(rng.next_u32() % 10) as usize] } else { (rng.next_u32() as i32 as f32) / 2f32.powi((trial % 40) as i32) }).collect();
            let mut words = vec![0i32; 5 + 2 * OBSERVED_WORDS];
            let o = ObservedSlots { at: 5 + OBSERVED_WORDS };
            observe_on_host(&values, &mut words, o.at);
            let lo = values.iter().fold(f64::INFINITY, |a, &v| a.min(v as f64));
            let hi = values.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
            assert_eq!(observed_range(&words, &o), Some((lo, hi)), "{:?}", values);
            assert_eq!(observed_range(&words, &ObservedSlots { at: 5 }), None, "words nothing was merged into say nothing");
            let mut with_nan = values.clone();
            with_nan.push([f32::NAN, f32::INFINITY, f32::NEG_INFINITY][trial % 3]);
            let mut words = vec![0i32; OBSERVED_WORDS];
            observe_on_host(&with_nan, &mut words, 0);
            assert_eq!(observed_range(&words, &ObservedSlots { at: 0 }), None, "a non-finite value makes the range unknown");
        }
    }

    #[test]
    fn the_lane_folds_find_the_extremes() {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for n in 0..40 {
            let v: Vec<f64> = (0..n).map(|_| (rng.next_u32() as f64 - 2e9) / 1e6).collect();
            assert_eq!(smallest(&v), v.iter().fold(f64::INFINITY, |a, &b| a.min(b)), "{:?}", v);
            assert_eq!(largest(&v), v.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b)), "{:?}", v);
        }
    }
}
