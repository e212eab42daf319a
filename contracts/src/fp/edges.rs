//! Inputs that put an error bound to the test: values drawn over a domain
//! `[lo, hi]` uniformly and from its edges. The compiler's soundness
//! sampler (mirror against exact) and the runtime's checks (GPU against
//! exact) draw through these, so that both measure the same way.

/// A source of uniform random numbers (each user brings its generator).
pub trait Draws {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64;
    /// Uniform in [lo, hi].
    fn range(&mut self, lo: i64, hi: i64) -> i64;
}

/// `2 - 2^-10` times a power of two: every f16 mantissa bit set (products
/// and sums of such values round worst).
fn all_mantissa_bits(sign: f64, binade: i32) -> f64 {
    sign * (2.0 - 2f64.powi(-10)) * 2f64.powi(binade - 1)
}

/// One value over `[lo, hi]`: uniform most of the time (7 in 10),
/// otherwise an edge: either end, a tiny value (subnormal in f16), or a
/// value with every f16 mantissa bit set in one of the top six binades.
pub fn value(rng: &mut impl Draws, lo: f64, hi: f64) -> f64 {
    let sign = if rng.unit() < 0.5 { -1.0 } else { 1.0 };
    let v = match rng.range(0, 9) {
        0 => lo,
        1 => hi,
        2 => sign * 2f64.powi(-(rng.range(14, 26) as i32)),
        3 => {
            let m = hi.abs().max(lo.abs()).max(f64::MIN_POSITIVE);
            all_mantissa_bits(sign, (m.log2().floor() as i32) - rng.range(0, 6) as i32)
        }
        _ => lo + (hi - lo) * rng.unit(),
    };
    v.clamp(lo, hi)
}

/// The edge a whole tensor is drawn at (see [`near_edge`]): either end
/// where the domain has both signs, else its far end.
pub fn tensor_edge(rng: &mut impl Draws, lo: f64, hi: f64) -> f64 {
    if lo < 0.0 && hi > 0.0 {
        if rng.unit() < 0.5 {
            lo
        } else {
            hi
        }
    } else if hi.abs() >= lo.abs() {
        hi
    } else {
        lo
    }
}

/// One element of a tensor drawn coherently at `edge`: of the edge's sign
/// and within a quarter of its magnitude, one in four with every f16
/// mantissa bit set. Reductions are at their worst on such tensors: no
/// cancellation, every partial sum as large as the domain allows, which is
/// the case a worst-case bound is derived for.
pub fn near_edge(rng: &mut impl Draws, edge: f64, lo: f64, hi: f64) -> f64 {
    let v = if rng.range(0, 3) == 0 {
        all_mantissa_bits(edge.signum(), edge.abs().max(f64::MIN_POSITIVE).log2().floor() as i32)
    } else {
        edge * (1.0 - 0.25 * rng.unit())
    };
    v.clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lcg(u64);
    impl Draws for Lcg {
        fn unit(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
        fn range(&mut self, lo: i64, hi: i64) -> i64 {
            lo + (self.unit() * (hi - lo + 1) as f64) as i64
        }
    }

    #[test]
    fn every_draw_stays_in_its_domain_and_edges_are_drawn() {
        let mut rng = Lcg(7);
        for (lo, hi) in [(-4.0, 4.0), (1e-4, 1.0), (-16.0, -0.5), (0.0, 0.0)] {
            let values: Vec<f64> = (0..4000).map(|_| value(&mut rng, lo, hi)).collect();
            assert!(values.iter().all(|v| (lo..=hi).contains(v)), "{:?}", (lo, hi));
            assert!(values.contains(&lo) && values.contains(&hi));
            let edge = tensor_edge(&mut rng, lo, hi);
            assert!(edge == lo || edge == hi);
            let tensor: Vec<f64> = (0..1000).map(|_| near_edge(&mut rng, edge, lo, hi)).collect();
            assert!(tensor.iter().all(|v| (lo..=hi).contains(v) && v.signum() == edge.signum() || *v == 0.0));
            assert!(tensor.iter().all(|v| v.abs() >= 0.75 * edge.abs() - 1e-12));
        }
    }

    #[test]
    fn mixed_sign_domains_draw_both_edges() {
        let mut rng = Lcg(3);
        let edges: Vec<f64> = (0..64).map(|_| tensor_edge(&mut rng, -2.0, 3.0)).collect();
        assert!(edges.contains(&-2.0) && edges.contains(&3.0));
        assert_eq!(tensor_edge(&mut rng, 1e-4, 1.0), 1.0);
        assert_eq!(tensor_edge(&mut rng, -8.0, -1.0), -8.0);
    }
}
