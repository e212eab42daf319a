//! Residue arithmetic modulo a declared `p^k` and the p-adic valuation
//! skip rule (issue 23): the logic the `padic_matmul` family stands on,
//! as obligations the Z3 backend discharges for the declared `p` and `k`.
//!
//! The claims, for residues `a, b` in `[0, p^k)`:
//!
//! - **skip rule**: when `v(a) + v(b) >= k`, `p^k` divides `a * b`, so a
//!   contraction that leaves such products out equals the dense one
//!   modulo `p^k`;
//! - **tile rule**: when the smallest valuations of two tiles sum to at
//!   least `k`, every product of an element of one with an element of the
//!   other meets the skip rule's condition;
//! - **no overflow**: the product of two residues, widened to 64 bits,
//!   and a running sum's step (a residue plus a reduced product) fit in
//!   `u64`, so reducing modulo `p^k` after each step is exact.
//!
//! `v(x)` is the valuation capped at `k` (`v(0) = k`), as the kernels
//! compute it: the largest `j <= k` with `p^j | x`, written as a chain of
//! divisibility tests ([`valuation`]).
//!
//! How the skip rule is put to Z3 matters. The direct statement (with
//! the chain for `v` and the product `a * b` under `mod p^k`) is proved
//! for `p^k = 2^4` in 0.35 s but ran for more than an hour for `2^16`
//! without an answer: nonlinear integer arithmetic with a remainder by a
//! large constant. Even split into a cover ("`v(a) + v(b) >= k` gives
//! `p^i | a` and `p^(k-i) | b` for some `i`") and per-`i` lemmas, the
//! cover took 15 s at 2^16, over the default solver budget. So it is
//! split further, into pieces that each go through in well under a
//! second, and the part that depends on a kernel is pure linear
//! arithmetic over two integers:
//!
//! 1. **skip condition** (per kernel, [`skip_condition`]): the kernel's
//!    condition, with `vp(a)` and `vp(b)` read as integers `va`, `vb` in
//!    `[0, k]`, implies `va + vb >= k`;
//! 2. **threshold split** (linear): `va + vb >= k` gives some `i` in
//!    `0..=k` with `va >= i` and `vb >= k - i`;
//! 3. **valuation lemma** `j` (one per `j`): `v(x) >= j` implies
//!    `p^j | x` for a residue `x` (what the chain means);
//! 4. **split lemma** `i` (one per `i`): `p^i | a` and `p^(k-i) | b`
//!    imply `p^k | a * b`, for `a, b` in `[0, p^k)`.
//!
//! Together: the condition gives `va + vb >= k` (1), so some `i` has
//! `v(a) >= i` and `v(b) >= k - i` (2), so `p^i | a` and `p^(k-i) | b`
//! (3), so `p^k | a * b` (4). Each is an ordinary obligation with a
//! counterexample when it fails (the mutation tests change the threshold,
//! the chain or a lemma and see each refuted).

use crate::{Formula, Obligation, ObligationKind, Term};
use std::fmt;

/// The largest modulus: residues are `u32` and the product of two is
/// computed in `u64`, so `(p^k - 1)^2` must fit 64 bits.
pub const MAX_MODULUS: u64 = 1 << 32;

/// A declared modulus `p^k`: `p` prime, `k >= 1`, `p^k <= 2^32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modulus {
    pub p: u64,
    pub k: u32,
}

/// Why `p^k` is not a modulus the residue arithmetic admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModulusError {
    /// `p` has the factor `factor` (or is below 2, with no factor).
    NotPrime { p: u64, factor: Option<u64> },
    /// `k` is 0: the ring `Z/1` has only zero.
    ZeroExponent,
    /// `p^k` exceeds [`MAX_MODULUS`]; `largest_k` is the largest `k`
    /// that fits for this `p`.
    TooLarge { p: u64, k: u32, largest_k: u32 },
}

impl fmt::Display for ModulusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModulusError::NotPrime { p, factor: Some(d) } => write!(f, "p = {} is not prime: {} = {} * {}", p, p, d, p / d),
            ModulusError::NotPrime { p, factor: None } => write!(f, "p = {} is not prime: a prime is at least 2", p),
            ModulusError::ZeroExponent => write!(f, "k = 0: the modulus p^0 = 1 leaves only the residue 0; k must be at least 1"),
            ModulusError::TooLarge { p, k, largest_k } => write!(
                f,
                "{}^{} does not fit the residue type: residues are u32 and their products u64, so p^k must be at most 2^32 (the largest k for p = {} is {})",
                p, k, p, largest_k
            ),
        }
    }
}

impl std::error::Error for ModulusError {}

/// The smallest factor of `n` above 1 (`n` itself when prime).
fn smallest_factor(n: u64) -> u64 {
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return d;
        }
        d += 1;
    }
    n
}

impl Modulus {
    pub fn new(p: u64, k: u32) -> Result<Modulus, ModulusError> {
        if p < 2 {
            return Err(ModulusError::NotPrime { p, factor: None });
        }
        if k == 0 {
            return Err(ModulusError::ZeroExponent);
        }
        // The size first: it bounds `p` by 2^32, so the trial division
        // below takes at most 2^16 steps (a p near 2^64 would take 2^32).
        let fits = |k: u32| p.checked_pow(k).is_some_and(|q| q <= MAX_MODULUS);
        if !fits(k) {
            let largest_k = (1..).take_while(|j| fits(*j)).last().unwrap_or(0);
            return Err(ModulusError::TooLarge { p, k, largest_k });
        }
        let d = smallest_factor(p);
        if d != p {
            return Err(ModulusError::NotPrime { p, factor: Some(d) });
        }
        Ok(Modulus { p, k })
    }

    /// `p^j`, for `j <= k` (fits: `p^k` does).
    pub fn power(&self, j: u32) -> i64 {
        self.p.pow(j) as i64
    }

    /// `p^k`.
    pub fn q(&self) -> i64 {
        self.power(self.k)
    }

    /// The valuation of `x` capped at `k`, on a concrete value.
    pub fn valuation(&self, mut x: u64) -> u32 {
        if x == 0 {
            return self.k;
        }
        let mut v = 0;
        while v < self.k && x.is_multiple_of(self.p) {
            x /= self.p;
            v += 1;
        }
        v
    }
}

impl fmt::Display for Modulus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}^{}", self.p, self.k)
    }
}

/// `v(x)` capped at `k`, as a term: the chain "`k` if `p^k | x`, else
/// `k - 1` if `p^(k-1) | x`, ..., else 0".
pub fn valuation(m: &Modulus, x: &Term) -> Term {
    (1..=m.k).fold(Term::c(0), |t, j| Term::Ite(Box::new(divides(m, j, x)), Box::new(Term::c(j as i64)), Box::new(t)))
}

fn residue(m: &Modulus, x: &Term) -> Formula {
    x.clone().within(Term::c(0), Term::c(m.q()))
}

fn divides(m: &Modulus, j: u32, x: &Term) -> Formula {
    x.clone().rem(Term::c(m.power(j))).eq(Term::c(0))
}

fn obligation(kind: ObligationKind, description: String, hypotheses: Vec<Formula>, goal: Formula) -> Obligation {
    let show = vec![("a".into(), "a".into()), ("b".into(), "b".into())];
    Obligation { kind, description, origin: (0, 0), hypotheses, goal, show }
}

/// The skip condition of one kernel: `condition`, a formula over the
/// integers `va` and `vb` (the kernel's `vp(a)` and `vp(b)`, each in
/// `[0, k]`), implies `va + vb >= k`. `text` is the condition as the
/// kernel prints it.
pub fn skip_condition(m: &Modulus, condition: Formula, text: &str) -> Obligation {
    let (va, vb) = (Term::var("va"), Term::var("vb"));
    let k = Term::c(m.k as i64);
    let hyps = vec![va.clone().within(Term::c(0), k.clone().add(Term::c(1))), vb.clone().within(Term::c(0), k.clone().add(Term::c(1))), condition];
    let mut ob = obligation(ObligationKind::SkipExact, format!("modulo {}: the skip condition `{}` implies vp(a) + vp(b) >= {}", m, text, m.k), hyps, k.le(va.add(vb)));
    ob.show = vec![("va".into(), "vp(a)".into()), ("vb".into(), "vp(b)".into())];
    ob
}

/// `va + vb >= threshold` (valuations in `[0, k]`) gives some `i` in
/// `0..=k` with `va >= i` and `vb >= k - i` (linear; the rule's
/// threshold is `k`).
fn threshold_split(m: &Modulus, threshold: i64) -> Obligation {
    let (va, vb) = (Term::var("va"), Term::var("vb"));
    let k = m.k as i64;
    let hyps = vec![va.clone().within(Term::c(0), Term::c(k + 1)), vb.clone().within(Term::c(0), Term::c(k + 1)), Term::c(threshold).le(va.clone().add(vb.clone()))];
    let goal = Formula::or((0..=k).map(|i| Formula::and(vec![Term::c(i).le(va.clone()), Term::c(k - i).le(vb.clone())])).collect());
    let mut ob = obligation(ObligationKind::SkipExact, format!("modulo {}: vp(a) + vp(b) >= {} gives i with vp(a) >= i and vp(b) >= {} - i", m, threshold, k), hyps, goal);
    ob.show = vec![("va".into(), "vp(a)".into()), ("vb".into(), "vp(b)".into())];
    ob
}

/// Valuation lemma `j`: `v(x) >= j` implies `p^j | x`, with `v` given
/// by `chain` (in the rule, [`valuation`]).
fn valuation_lemma(m: &Modulus, j: u32, chain: Term) -> Obligation {
    let x = Term::var("a");
    let hyps = vec![residue(m, &x), Term::c(j as i64).le(chain)];
    obligation(ObligationKind::SkipExact, format!("modulo {}: vp(a) >= {} gives p^{} | a", m, j, j), hyps, divides(m, j, &x))
}

/// Split lemma `i`: `p^i | a` and `p^(k-i) | b` imply `p^k | a * b`.
fn split_lemma(m: &Modulus, i: u32, of_b: u32) -> Obligation {
    let (a, b) = (Term::var("a"), Term::var("b"));
    let hyps = vec![residue(m, &a), residue(m, &b), divides(m, i, &a), divides(m, of_b, &b)];
    let goal = a.clone().mul(b.clone()).rem(Term::c(m.q())).eq(Term::c(0));
    obligation(ObligationKind::SkipExact, format!("modulo {}: p^{} | a and p^{} | b give p^{} | a * b", m, i, of_b, m.k), hyps, goal)
}

/// The tile rule: tiles whose smallest valuations `va`, `vb` sum to at
/// least `k` hold only pairs the skip rule admits (`va <= v(a)`,
/// `vb <= v(b)` for every element).
fn tile_rule(m: &Modulus) -> Obligation {
    let (a, b, va, vb) = (Term::var("a"), Term::var("b"), Term::var("va"), Term::var("vb"));
    let hyps = vec![
        residue(m, &a),
        residue(m, &b),
        va.clone().le(valuation(m, &a)),
        vb.clone().le(valuation(m, &b)),
        Term::c(m.k as i64).le(va.add(vb)),
    ];
    let goal = Term::c(m.k as i64).le(valuation(m, &a).add(valuation(m, &b)));
    obligation(ObligationKind::SkipExact, format!("modulo {}: a tile pair whose smallest valuations sum to k holds only skipped products", m), hyps, goal)
}

/// No overflow: the widened product of two residues and a running sum's
/// step, `acc + (a * b mod p^k)` with `acc` a residue, fit in `u64`; and
/// the capped valuation lies in `[0, k]`. (`a * b < 2^64` is written as
/// `a * b / 2^32 < 2^32`: terms are `i64` constants.)
pub fn no_overflow(m: &Modulus) -> Vec<Obligation> {
    let (a, b, acc) = (Term::var("a"), Term::var("b"), Term::var("acc"));
    let q = m.q();
    let half = Term::c(1i64 << 32);
    vec![
        obligation(
            ObligationKind::NoOverflow,
            format!("modulo {}: the product of two residues fits in u64", m),
            vec![residue(m, &a), residue(m, &b)],
            a.clone().mul(b.clone()).div(half.clone()).lt(half.clone()),
        ),
        obligation(
            ObligationKind::NoOverflow,
            format!("modulo {}: a running sum's step, a residue plus a reduced product, fits in u64", m),
            vec![residue(m, &a), residue(m, &b), residue(m, &acc)],
            acc.clone().add(a.clone().mul(b.clone()).rem(Term::c(q))).div(half.clone()).lt(half),
        ),
        obligation(
            ObligationKind::NoOverflow,
            format!("modulo {}: the capped valuation lies in [0, k]", m),
            vec![residue(m, &a)],
            valuation(m, &a).within(Term::c(0), Term::c(m.k as i64 + 1)),
        ),
    ]
}

/// Every obligation of the residue arithmetic and the skip rule for `m`
/// that does not depend on a kernel, all to be proved (a kernel that
/// skips adds its [`skip_condition`]).
pub fn obligations(m: &Modulus) -> Vec<Obligation> {
    let a = Term::var("a");
    let mut out = vec![threshold_split(m, m.k as i64), tile_rule(m)];
    out.extend((0..=m.k).map(|j| valuation_lemma(m, j, valuation(m, &a))));
    out.extend((0..=m.k).map(|i| split_lemma(m, i, m.k - i)));
    out.extend(no_overflow(m));
    out
}

/// Wrong rules the mutation test must see refuted, each with its name:
/// a kernel condition with the threshold one below `k` (`vp(a) = k - 1`,
/// `vp(b) = 0` is then skipped), a threshold split to `k - 1`, a split
/// lemma with one factor of `p` short, and a valuation chain that counts
/// one level too high (`p^j | x` read as `j + 1`).
pub fn mutants(m: &Modulus) -> Vec<(&'static str, Obligation)> {
    let a = Term::var("a");
    let high = (0..m.k).fold(Term::c(0), |t, j| Term::Ite(Box::new(divides(m, j, &a)), Box::new(Term::c(j as i64 + 1)), Box::new(t)));
    let below = Term::c(m.k as i64 - 1).le(Term::var("va").add(Term::var("vb")));
    vec![
        ("kernel threshold k - 1", skip_condition(m, below, "vp(a) + vp(b) >= k - 1")),
        ("threshold split at k - 1", threshold_split(m, m.k as i64 - 1)),
        ("split lemma one factor short", split_lemma(m, m.k - 1, 0)),
        ("valuation counted one too high", valuation_lemma(m, m.k, high)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moduli_are_checked_with_the_reason() {
        assert_eq!(Modulus::new(2, 16), Ok(Modulus { p: 2, k: 16 }));
        assert_eq!(Modulus::new(2, 32), Ok(Modulus { p: 2, k: 32 }));
        assert_eq!(Modulus::new(65521, 2), Ok(Modulus { p: 65521, k: 2 }));
        assert_eq!(Modulus::new(6, 3), Err(ModulusError::NotPrime { p: 6, factor: Some(2) }));
        assert_eq!(Modulus::new(1, 3), Err(ModulusError::NotPrime { p: 1, factor: None }));
        assert_eq!(Modulus::new(3, 0), Err(ModulusError::ZeroExponent));
        assert_eq!(Modulus::new(2, 33), Err(ModulusError::TooLarge { p: 2, k: 33, largest_k: 32 }));
        assert_eq!(Modulus::new(3, 21), Err(ModulusError::TooLarge { p: 3, k: 21, largest_k: 20 }));
        assert_eq!(Modulus::new(65537, 2), Err(ModulusError::TooLarge { p: 65537, k: 2, largest_k: 1 }));
        // A prime near 2^64 is refused for its size, without trial division.
        assert_eq!(Modulus::new(18446744073709551557, 1), Err(ModulusError::TooLarge { p: 18446744073709551557, k: 1, largest_k: 0 }));
        // Huge exponents overflow the power itself: still the same error.
        assert_eq!(Modulus::new(7, u32::MAX), Err(ModulusError::TooLarge { p: 7, k: u32::MAX, largest_k: 11 }));
        let msg = Modulus::new(91, 2).unwrap_err().to_string();
        assert!(msg.contains("91 = 7 * 13"), "{}", msg);
        let msg = Modulus::new(2, 40).unwrap_err().to_string();
        assert!(msg.contains("2^40") && msg.contains("is 32"), "{}", msg);
    }

    #[test]
    fn concrete_valuations_are_capped_at_k() {
        let m = Modulus::new(3, 4).unwrap();
        assert_eq!(m.valuation(0), 4);
        assert_eq!(m.valuation(1), 0);
        assert_eq!(m.valuation(18), 2);
        assert_eq!(m.valuation(81), 4);
        assert_eq!(m.valuation(243), 4);
    }

    /// The term chain agrees with the concrete valuation on every residue
    /// of a small modulus.
    #[test]
    fn the_chain_is_the_valuation() {
        for (p, k) in [(2u64, 5u32), (3, 3), (5, 2)] {
            let m = Modulus::new(p, k).unwrap();
            let t = valuation(&m, &Term::var("x"));
            for x in 0..m.q() {
                let v = t.eval(&|_| Some(x as i128)).expect("closed chain");
                assert_eq!(v, m.valuation(x as u64) as i128, "p={} k={} x={}", p, k, x);
            }
        }
    }
}
