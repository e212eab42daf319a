//! Element-wise domain relations `t * t <= c * s` (the compiler's
//! `tir::Relation`): the check a runtime makes before a launch and the
//! adjustment a sampler makes to drawn inputs, in one place so that both
//! read the relation the same way. `s` holds one value for every element
//! (rank 0) or one per element of `t`.

/// Does element `i` satisfy the relation? Compared in f64, where the
/// square of an f32 or f16 value is exact.
pub fn holds(t: f64, s: f64, factor: f64) -> bool {
    t * t <= factor * s
}

/// The first element of `t` (of length `n`) where the relation fails, as
/// `(index, t, s)`; `t(i)` and `s(i)` read the values (`s` broadcast when
/// `s_len` is 1). NaN never satisfies it.
pub fn first_violation(n: usize, s_len: usize, factor: f64, t: impl Fn(usize) -> f64, s: impl Fn(usize) -> f64) -> Option<(usize, f64, f64)> {
    (0..n).find_map(|i| {
        let (ti, si) = (t(i), s(if s_len == 1 { 0 } else { i }));
        (!holds(ti, si, factor)).then_some((i, ti, si))
    })
}

/// Pull each drawn `t[i]` that breaks the relation to the largest stored
/// value (by `store`, the rounding into `t`'s dtype) that keeps it, its
/// sign kept. Samplers draw `t` and `s` from their ranges independently,
/// then call this so that every draw is an input the relation admits.
pub fn enforce(t: &mut [f64], s: &[f64], factor: f64, store: impl Fn(f64) -> f64) {
    for (i, x) in t.iter_mut().enumerate() {
        let si = s[if s.len() == 1 { 0 } else { i }];
        if holds(*x, si, factor) {
            continue;
        }
        let limit = (factor * si.max(0.0)).sqrt();
        let mut y = store(limit.copysign(*x));
        // Rounding may step above the limit: walk down until it holds.
        let mut shrink = 1.0;
        while !holds(y, si, factor) && y != 0.0 {
            shrink *= 1.0 - 2f64.powi(-8);
            y = store(limit.copysign(*x) * shrink);
        }
        *x = if holds(y, si, factor) { y } else { 0.0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforced_draws_satisfy_the_relation_and_keep_what_did() {
        let f16ish = |x: f64| (x * 1024.0).round() / 1024.0;
        let s = vec![0.0, 1.0, 2.0, 1e-9, 4.0];
        let mut t = vec![0.5, -3.0, 1.0, 1.0, -1.0];
        enforce(&mut t, &s, 1.0, f16ish);
        assert_eq!(t[0], 0.0, "s = 0 forces t = 0");
        assert!(t[1] < 0.0 && t[1] * t[1] <= 1.0, "pulled in, sign kept: {}", t[1]);
        assert_eq!(t[2], 1.0, "an element that held is unchanged");
        assert!(t[3] * t[3] <= 1e-9);
        assert_eq!(t[4], -1.0);
        assert_eq!(first_violation(t.len(), s.len(), 1.0, |i| t[i], |i| s[i]), None);
    }

    #[test]
    fn the_first_violation_is_named_and_a_rank0_bound_broadcasts() {
        let t = [0.1, 0.2, 1.9, 5.0];
        assert_eq!(first_violation(4, 1, 1.0, |i| t[i], |_| 4.0), Some((3, 5.0, 4.0)));
        assert_eq!(first_violation(4, 1, 64.0, |i| t[i], |_| 4.0), None);
        assert!(first_violation(1, 1, 1.0, |_| f64::NAN, |_| 1.0).is_some_and(|(i, t, _)| i == 0 && t.is_nan()), "NaN never satisfies a relation");
    }
}
