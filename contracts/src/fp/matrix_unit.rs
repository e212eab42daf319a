//! How a matrix unit (NVIDIA tensor cores; issue 19) accumulates, as a
//! named assumption, and the error bound of a dot product computed on it.
//!
//! Tensor cores do not round like a chain of IEEE fused multiply-adds.
//! Fasi, Higham, Mikaitis and Pranesh ("Numerical behavior of NVIDIA tensor
//! cores", PeerJ Computer Science 7:e330, 2021) found by experiment that
//! with f16 inputs and f32 accumulation the products are exact, the
//! products of a block and the running value are aligned to the largest
//! exponent among them with the bits below the accumulator's precision
//! truncated, added, and the sum normalised with truncation; the block is
//! 4 products on the V100, 8 on the A100 (later work reports 16 on the
//! H100). NVIDIA documents none of it. [`ASSUMPTION`] states what the
//! bound takes, deliberately weaker than any of those findings:
//!
//! - every product of two f16 (or bf16) values is exact, or errs by at most
//!   [`UNDERFLOW`] when it is below f32's normal range;
//! - an instruction of `k` products adds them to its accumulator input in
//!   blocks of `b` products, `b` one of 1, 2, 4, 8, 16 (the bound takes the
//!   worst): the running value and the block's products are each truncated
//!   to a multiple of `2^(e - 23)`, `e` the largest exponent among them,
//!   summed exactly, and the sum truncated to 24 significant bits (or
//!   flushed to zero, within [`UNDERFLOW`]);
//! - rounding to nearest at either step, or keeping more bits, errs less.
//!
//! A schedule on the unit runs a sum of `n` products as groups of `q`
//! instructions chained through the unit's accumulator from zero, each
//! group's result then added in f32 (rounded to nearest) to the thread's
//! running sum: "promotion", as DeepGEMM does for FP8. [`coefficients`]
//! bounds one group's error per product; [`heights`] turns it into the
//! height of an IEEE summation that errs at least as much, so the rest of
//! the analysis (`gamma_h` of Higham's model) applies unchanged. With
//! `a` the group's coefficient and `b = ceil(n / (q k))` the promotions,
//! `a u + gamma_b (1 + a u) <= gamma_{a + b}`: the unit's error plus the
//! promotions' (on values that carry it) is within a summation of height
//! `a + b`.

use super::{add_up, mul_up};

/// The assumption, in the words the report uses.
pub const ASSUMPTION: &str = "matrix-unit accumulation (Fasi, Higham, Mikaitis and Pranesh 2021): products exact; each block of at most 16 products and the running value aligned to their largest exponent with truncation to 24 bits, summed exactly, the sum truncated to 24 bits";

/// Block sizes the bound considers (it takes the worst).
pub const BLOCKS: [u32; 5] = [1, 2, 4, 8, 16];

/// f32's unit roundoff: a truncation to 24 bits errs by less than twice it.
const U: f64 = 1.0 / (1u64 << 24) as f64;

/// An absolute error per product and per block sum for values below f32's
/// normal range (a product flushed to zero, a block sum flushed): at most
/// the smallest normal f32.
pub const UNDERFLOW: f64 = 1.1754943508222875e-38;

/// One group's error, in units of `u = 2^-24`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coefficients {
    /// Per product, relative to the largest product's magnitude `T`: a
    /// group of `m` products errs by at most `per_term * u * m * T`.
    pub per_term: f64,
    /// For products of one sign, relative to their sum: a group errs by at
    /// most `relative * u * sum |p|`.
    pub relative: f64,
}

/// The bound of one group of `q` instructions of `k` products each (see
/// the module's documentation), the worst over every block size in
/// [`BLOCKS`] that divides `k` and every number of products in the group.
pub fn coefficients(k: u32, q: u32) -> Coefficients {
    let mut out = Coefficients { per_term: 0.0, relative: 0.0 };
    for b in BLOCKS.into_iter().filter(|b| k.is_multiple_of(*b)) {
        for m in 1..=q * k {
            out.per_term = out.per_term.max(group_error(m, k, b, Magnitudes::EachAtMost) / (m as f64 * U));
            out.relative = out.relative.max(group_error(m, k, b, Magnitudes::OneSigned) / U);
        }
    }
    // Outward: the divisions above round to nearest.
    Coefficients { per_term: mul_up(out.per_term, 1.0 + 1e-12), relative: mul_up(out.relative, 1.0 + 1e-12) }
}

/// What a group's bound is relative to.
#[derive(Clone, Copy, PartialEq)]
enum Magnitudes {
    /// Every product at most 1 in magnitude; the bound is absolute.
    EachAtMost,
    /// Products of one sign summing to 1; the bound is relative to that.
    OneSigned,
}

/// An upper bound on the error of `m` products added from zero, `k` per
/// instruction in blocks of `b`.
fn group_error(m: u32, k: u32, b: u32, mags: Magnitudes) -> f64 {
    let two_u = 2.0 * U;
    // `run`: a bound on the running value's magnitude (its error
    // included); `err`: on its error; `done`: products added so far.
    let (mut run, mut err, mut done) = (0.0f64, 0.0f64, 0u32);
    while done < m {
        // A block ends at b products or at the instruction's end.
        let in_instr = done % k;
        let c = b.min(k - in_instr).min(m - done);
        // The block's products add at most c (each at most 1), or,
        // one-signed, the exact partial sum stays at most the whole (1).
        let (largest, exact_after) = match mags {
            Magnitudes::EachAtMost => (run.max(1.0), add_up(run, c as f64)),
            Magnitudes::OneSigned => (add_up(1.0, err), add_up(1.0, err)),
        };
        // Alignment: each value but the one with the largest exponent
        // (at most 24 significant bits: the running value, or a product of
        // 22) loses less than 2^(e - 23) <= 2u times the block's largest
        // magnitude; the running value is an exact zero at the start.
        let truncated = if done == 0 { c - 1 } else { c };
        let align = add_up(mul_up(mul_up(truncated as f64, two_u), largest), mul_up(c as f64, UNDERFLOW));
        // Normalisation: less than 2u of the aligned block sum's magnitude.
        let sum = add_up(exact_after, align);
        let norm = add_up(mul_up(two_u, sum), UNDERFLOW);
        err = add_up(err, add_up(align, norm));
        run = add_up(sum, norm);
        done += c;
    }
    err
}

/// The heights of IEEE f32 summations (to nearest, `gamma_h`) that err at
/// least as much as `n` products on the unit, `k` per instruction, `q`
/// instructions per promotion: `(for any products, for products of one
/// sign)`.
pub fn heights(n: u64, k: u32, q: u32) -> (f64, f64) {
    let c = coefficients(k, q);
    let promotions = n.div_ceil(u64::from(k) * u64::from(q)) as f64;
    (c.per_term + promotions, c.relative + promotions)
}

/// The unit as the assumption describes it, for tests and oracles: `c`
/// plus the products `a[i] * b[i]` (values of f16, so every product is
/// exact in f64) in blocks of `block`, each aligned with truncation, summed
/// exactly and truncated to 24 bits. `k` products per instruction: the
/// caller passes one instruction's worth.
pub fn emulate_instruction(c: f64, products: &[f64], block: usize) -> f64 {
    let mut run = c;
    for chunk in products.chunks(block.max(1)) {
        let largest = chunk.iter().chain(std::iter::once(&run)).filter(|v| **v != 0.0).map(|v| exponent(*v)).max();
        let Some(e) = largest else { continue };
        let lsb = (2.0f64).powi(e - 23);
        // Multiples of `lsb` below 2^(e + 6): the sum is exact in f64.
        let sum: f64 = chunk.iter().chain(std::iter::once(&run)).map(|v| (v / lsb).trunc() * lsb).sum();
        run = truncate_to_24_bits(sum);
    }
    run
}

/// The block size a mirror of the unit uses (the H100's, as later work
/// reports; the bound takes the worst of every size).
pub const MIRROR_BLOCK: usize = 16;

/// A sum of `products` (exact products of f16 or bf16 values) as a schedule
/// on the unit computes it under the assumption, with blocks of `block`:
/// groups of `k * per_promotion` products chained through the unit from
/// zero, each group's result added to an f32 running sum, to nearest.
pub fn emulate_sum(products: &[f64], k: usize, per_promotion: usize, block: usize) -> f64 {
    let group = (k * per_promotion).max(1);
    products
        .chunks(group)
        .fold(0.0f32, |acc, g| {
            let unit = g.chunks(k.max(1)).fold(0.0, |run, instruction| emulate_instruction(run, instruction, block));
            acc + unit as f32
        })
        .into()
}

/// `floor(log2 |v|)` of a nonzero finite value.
fn exponent(v: f64) -> i32 {
    ((v.abs().to_bits() >> 52) as i32) - 1023
}

fn truncate_to_24_bits(v: f64) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let lsb = (2.0f64).powi(exponent(v) - 23);
    (v / lsb).trunc() * lsb
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// xorshift, reproducible.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// An f16 with a random sign, significand and exponent in `[-e, e]`.
    fn draw(r: &mut impl FnMut() -> u64, e: i32, signed: bool) -> f64 {
        let m = 1.0 + (r() % 1024) as f64 / 1024.0;
        let x = m * 2f64.powi((r() % (2 * e as u64 + 1)) as i32 - e);
        let x = if signed && r().is_multiple_of(2) { -x } else { x };
        f16::from_f64(x).to_f64()
    }

    /// The exact sum of products of f16 values: each is an integer times
    /// 2^-48 below 2^64, so an i128 fixed point holds the sum exactly.
    fn exact(products: &[f64]) -> f64 {
        let sum: i128 = products.iter().map(|p| (p * 2f64.powi(48)) as i128).sum();
        sum as f64 / 2f64.powi(48)
    }

    #[test]
    fn the_emulator_truncates_where_the_assumption_says() {
        // 1 + 2^-24 + 2^-24: each small term is below the lsb of 1's
        // alignment (2^-23), so in one block both are lost ...
        let tiny = 2f64.powi(-24);
        assert_eq!(emulate_instruction(1.0, &[tiny, tiny], 16), 1.0);
        // ... and a run of 1 - 2^-24 (exact in f32) loses its last bit
        // when a product of 1 joins it.
        assert_eq!(emulate_instruction(1.0 - tiny, &[1.0], 16), 2.0 - 2.0 * tiny);
        // Exact cases stay exact.
        assert_eq!(emulate_instruction(0.0, &[0.5, 0.25, -0.125], 4), 0.625);
        assert_eq!(emulate_instruction(0.0, &[3.0], 1), 3.0);
    }

    #[test]
    fn the_bound_holds_for_every_block_size_and_group() {
        // Random and adversarial (wide exponent ranges, cancellation, one
        // sign) groups: the emulated error stays within the coefficients.
        let mut r = rng(0x9e37_79b9_7f4a_7c15);
        for &(k, q) in &[(16u32, 1u32), (16, 2), (16, 4), (8, 2)] {
            let c = coefficients(k, q);
            for trial in 0..4000 {
                let m = 1 + (r() % (k * q) as u64) as usize;
                let spread = [2, 8, 14][trial % 3];
                let signed = trial % 4 != 0;
                let products: Vec<f64> = (0..m).map(|_| draw(&mut r, spread / 2, signed) * draw(&mut r, spread / 2, true).abs()).collect();
                let block = BLOCKS[(r() % BLOCKS.len() as u64) as usize].min(k) as usize;
                let mut run = 0.0;
                for instr in products.chunks(k as usize) {
                    run = emulate_instruction(run, instr, block);
                }
                let error = (run - exact(&products)).abs();
                let largest = products.iter().fold(0.0f64, |a, p| a.max(p.abs()));
                let abs_bound = c.per_term * U * m as f64 * largest;
                assert!(error <= abs_bound, "k {} q {} b {} m {}: error {:e} above {:e}", k, q, block, m, error, abs_bound);
                if !signed {
                    let rel_bound = c.relative * U * products.iter().map(|p| p.abs()).sum::<f64>();
                    assert!(error <= rel_bound, "one sign, k {} q {} b {}: error {:e} above {:e}", k, q, block, error, rel_bound);
                }
            }
        }
    }

    #[test]
    fn the_bound_is_not_vacuous_and_grows_with_chaining() {
        let one = coefficients(16, 1);
        let two = coefficients(16, 2);
        let four = coefficients(16, 4);
        assert!(one.per_term < two.per_term && two.per_term < four.per_term, "{:?} {:?} {:?}", one, two, four);
        // Truncation errs up to twice what rounding to nearest does: a
        // group of 16 products from zero is worth at most a sequential
        // IEEE sum of 32 (the worst block size, 1, is that chain) ...
        assert!(one.per_term < 32.001 && one.per_term > 16.0, "{:?}", one);
        // ... so a short sum is where the unit loses to the sequential
        // loop (height n), and a long one where it wins: promoted after
        // every instruction it is ahead from 36 products on, and 4096
        // products are within a height of 288, not 4096.
        assert!(heights(35, 16, 1).0 > 35.0 && heights(36, 16, 1).0 <= 36.0, "{:?} {:?}", heights(35, 16, 1), heights(36, 16, 1));
        let (abs, rel) = heights(4096, 16, 1);
        assert!(abs < 289.0 && rel > abs, "{} {}", abs, rel);
        // Promoting every second instruction halves the promotions.
        assert!(heights(4096, 16, 2).0 < abs);
    }

    #[test]
    fn a_worst_case_comes_close_to_the_bound() {
        // The bound is not loose by orders of magnitude: a run just below
        // a power of two, joined by products that each lose almost 2u of
        // it, reaches a sizeable share of it.
        let c = coefficients(16, 2);
        // After 16 products of 1 - 2^-11 the run is in [8, 16): its lsb is
        // 2^-20, and products of 15 * 2^-24 are truncated away whole.
        let mut products = vec![1.0 - 2f64.powi(-11); 16];
        products.extend(std::iter::repeat_n(15.0 * 2f64.powi(-24), 16));
        let f16s: Vec<f64> = products.iter().map(|p| f16::from_f64(*p).to_f64()).collect();
        let mut run = 0.0;
        for instr in f16s.chunks(16) {
            run = emulate_instruction(run, instr, 1);
        }
        let error = (run - exact(&f16s)).abs();
        let bound = c.per_term * U * 32.0;
        assert!(error > bound / 64.0, "error {:e}, bound {:e}", error, bound);
    }

    /// The chain of instructions over `products`, `k` per instruction.
    fn emulate(products: &[f64], k: usize, block: usize) -> f64 {
        products.chunks(k).fold(0.0, |run, instr| emulate_instruction(run, instr, block))
    }

    #[test]
    fn a_greedy_adversary_gets_close_to_the_bound_and_never_past_it() {
        // Each next product is the one of 96 random candidates that makes
        // the emulated error largest: the search finds inputs near the
        // worst case, so a bound four times too small would be broken.
        let mut r = rng(0x51f1_5eed);
        let mut closest = 0.0f64;
        for &(k, q) in &[(16u32, 1u32), (16, 2)] {
            let c = coefficients(k, q);
            for &block in &BLOCKS {
                for signed in [false, true] {
                    let mut products: Vec<f64> = Vec::new();
                    for _ in 0..k * q {
                        let mut best = (f64::NEG_INFINITY, 0.0);
                        for _ in 0..96 {
                            // A product of two f16 near 2 (22 significant
                            // bits, all near the largest magnitude).
                            let near_two = |r: &mut dyn FnMut() -> u64| f16::from_f64(1.9 + (r() % 1024) as f64 / 10240.0).to_f64();
                            let sign = if signed && r().is_multiple_of(2) { -1.0 } else { 1.0 };
                            let p = sign * near_two(&mut r) * near_two(&mut r);
                            products.push(p);
                            let error = (emulate(&products, k as usize, block as usize) - exact(&products)).abs();
                            products.pop();
                            if error > best.0 {
                                best = (error, p);
                            }
                        }
                        products.push(best.1);
                        let largest = products.iter().fold(0.0f64, |a, p| a.max(p.abs()));
                        let bound = c.per_term * U * products.len() as f64 * largest;
                        assert!(best.0 <= bound, "k {} q {} b {}: error {:e} above {:e} at {:?}", k, q, block, best.0, bound, products);
                        closest = closest.max(best.0 / bound);
                    }
                }
            }
        }
        // (It reaches about 0.28: the bound charges every block a
        // normalisation, which loses bits only when the sum carries into a
        // higher binade.)
        assert!(closest > 0.25, "the worst case found reaches {:.3} of the bound", closest);
    }
}
