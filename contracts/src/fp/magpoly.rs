//! Polynomials with non-negative coefficients over non-negative symbols:
//! the algebra of error bounds that scale with a launch's sizes and
//! magnitudes (issue 18).
//!
//! A bound such as `1.2e-7 K X W + 3e-8 B + 6e-8` (`K` a dim, `X`, `W`, `B`
//! the largest magnitudes of three inputs) is a [`MagPoly`]. Every symbol
//! stands for a quantity that is at least 0 at every launch, and every
//! coefficient is at least 0, so a polynomial is non-decreasing in each
//! symbol: this is what lets [`MagPoly::dominated_by`] compare two of them
//! term by term, and lets the runtime evaluate one at a launch's measured
//! magnitudes to get that launch's proved bound.
//!
//! Coefficients are rounded up by every operation ([`super::up`]), so the
//! f64 arithmetic of the analysis never makes a bound smaller than the
//! real one.

use super::{add_up, mul_up};
use std::collections::BTreeMap;
use std::fmt;

/// A monomial: its symbols (indices into the caller's symbol table) with
/// repetition, sorted. The empty monomial is the constant 1.
pub type Monomial = Vec<u16>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MagPoly {
    terms: BTreeMap<Monomial, f64>,
}

/// What one symbol may be at a launch: `lo <= s <= hi` (`hi` infinite when
/// nothing bounds it, as for a magnitude).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SymRange {
    pub lo: f64,
    pub hi: f64,
}

impl MagPoly {
    pub fn zero() -> MagPoly {
        MagPoly::default()
    }

    pub fn constant(c: f64) -> MagPoly {
        MagPoly::zero().plus_term(Vec::new(), c)
    }

    pub fn symbol(s: u16) -> MagPoly {
        MagPoly::zero().plus_term(vec![s], 1.0)
    }

    /// `c` times the monomial `m` (symbols in any order).
    pub fn term(mut m: Monomial, c: f64) -> MagPoly {
        m.sort_unstable();
        MagPoly::zero().plus_term(m, c)
    }

    fn plus_term(mut self, m: Monomial, c: f64) -> MagPoly {
        assert!(c >= 0.0 && !c.is_nan(), "a magnitude polynomial's coefficient must be >= 0, got {}", c);
        if c == 0.0 {
            return self;
        }
        match self.terms.get_mut(&m) {
            Some(e) => *e = add_up(*e, c),
            None => {
                self.terms.insert(m, c);
            }
        }
        self
    }

    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }

    /// The constant, when the polynomial has no symbol.
    pub fn as_constant(&self) -> Option<f64> {
        match self.terms.len() {
            0 => Some(0.0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, f64)> {
        self.terms.iter().map(|(m, c)| (m, *c))
    }

    pub fn add(&self, o: &MagPoly) -> MagPoly {
        o.terms.iter().fold(self.clone(), |acc, (m, c)| acc.plus_term(m.clone(), *c))
    }

    pub fn mul(&self, o: &MagPoly) -> MagPoly {
        let mut out = MagPoly::zero();
        for (a, x) in &self.terms {
            for (b, y) in &o.terms {
                let mut m: Monomial = a.iter().chain(b).copied().collect();
                m.sort_unstable();
                out = out.plus_term(m, mul_up(*x, *y));
            }
        }
        out
    }

    /// Every coefficient times `c >= 0`.
    pub fn scale(&self, c: f64) -> MagPoly {
        self.terms.iter().fold(MagPoly::zero(), |acc, (m, x)| acc.plus_term(m.clone(), mul_up(*x, c)))
    }

    /// An upper bound of `self / s` for every value of `s >= lo > 0`: a
    /// term that has `s` loses one factor of it; a term that has none is
    /// divided by `lo` (the quotient is largest where `s` is smallest).
    pub fn div_symbol(&self, s: u16, lo: f64) -> MagPoly {
        assert!(lo > 0.0, "dividing by a symbol needs a positive lower bound, got {}", lo);
        self.terms.iter().fold(MagPoly::zero(), |acc, (m, x)| match m.iter().position(|y| *y == s) {
            Some(i) => {
                let mut q = m.clone();
                q.remove(i);
                acc.plus_term(q, *x)
            }
            None => acc.plus_term(m.clone(), super::div_up(*x, lo)),
        })
    }

    /// The value at `at` (one value per symbol, each `>= 0`), rounded up.
    /// Panics if a symbol has no value: the caller sizes `at` from the
    /// same table that numbered the symbols.
    pub fn eval(&self, at: &[f64]) -> f64 {
        self.terms.iter().fold(0.0, |acc, (m, c)| add_up(acc, m.iter().fold(*c, |p, s| mul_up(p, at[*s as usize]))))
    }

    /// The largest value over `ranges` (at every symbol's upper end, the
    /// polynomial being non-decreasing in each): infinite when a symbol
    /// it mentions is unbounded.
    pub fn max_over(&self, ranges: &[SymRange]) -> f64 {
        self.eval(&ranges.iter().map(|r| r.hi).collect::<Vec<_>>())
    }

    /// A proof that `self <= other` at every point of `ranges`, or `None`
    /// when this method cannot show it (which does not mean it is false).
    ///
    /// Each term `c m` of `self` is charged to one term `d t` of `other`
    /// whose monomial divides `m` (`m = t q`): at every point `c m <= (c
    /// max q) t`, `max q` taken at the upper ends of `q`'s symbols. A term
    /// of `other` that has symbols `m` lacks can also pay, when those
    /// symbols have positive lower bounds: `c m <= (c / min r) t` with
    /// `t = m r` (`min r` the product of their lower bounds). The claim
    /// holds when every term of `other` pays at most its coefficient.
    /// Each term goes to the term of its own monomial, or
    /// else to the payer with the most budget left after paying it.
    pub fn dominated_by(&self, other: &MagPoly, ranges: &[SymRange]) -> Option<Domination> {
        let mut charged: BTreeMap<&Monomial, f64> = BTreeMap::new();
        let mut uses = Vec::new();
        for (m, c) in &self.terms {
            let mut best: Option<(&Monomial, f64, f64)> = None;
            for (t, budget) in &other.terms {
                let Some(factor) = cover_factor(m, t, ranges) else { continue };
                // A factor of 1 is exact: no rounding up.
                let cost = if factor == 1.0 { *c } else { mul_up(*c, factor) };
                // The same monomial pays first; else the payer left with
                // the most of its budget.
                let share = if t == m { f64::NEG_INFINITY } else { (charged.get(t).copied().unwrap_or(0.0) + cost) / budget };
                if best.is_none_or(|(_, _, s)| share < s) {
                    best = Some((t, cost, share));
                }
            }
            let (t, cost, _) = best?;
            match charged.get_mut(t) {
                Some(e) => *e = add_up(*e, cost),
                None => {
                    charged.insert(t, cost);
                }
            }
            uses.push((m.clone(), t.clone(), cost));
        }
        for (t, used) in &charged {
            if *used > other.terms[*t] {
                return None;
            }
        }
        let slack = charged.iter().map(|(t, used)| used / other.terms[*t]).fold(0.0f64, f64::max);
        Some(Domination { uses, worst_share: slack })
    }

    /// Text with the symbols' names: `1.2e-7*K*X*W + 6e-8`.
    pub fn display<'a>(&'a self, names: &'a [String]) -> impl fmt::Display + 'a {
        Shown { p: self, names }
    }
}

/// How `m` can be charged to `t`: the factor `c m <= c factor t`.
fn cover_factor(m: &Monomial, t: &Monomial, ranges: &[SymRange]) -> Option<f64> {
    // Multiset difference both ways: q = m \ t (must be bounded above),
    // r = t \ m (must be bounded below by a positive number).
    let (mut i, mut j) = (0, 0);
    let mut factor = 1.0f64;
    while i < m.len() || j < t.len() {
        match (m.get(i), t.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), b) if b.is_none_or(|b| a < b) => {
                let hi = ranges.get(*a as usize)?.hi;
                if !hi.is_finite() {
                    return None;
                }
                factor = mul_up(factor, hi);
                i += 1;
            }
            (_, Some(b)) => {
                let lo = ranges.get(*b as usize)?.lo;
                if lo <= 0.0 {
                    return None;
                }
                // `t = m r` with `r >= lo`: `m <= t / lo` (a factor below
                // 1 where `lo > 1`: a sum of at least 64 terms pays a
                // term in `K` from one in `K * K` at 1/64 of its cost).
                if lo != 1.0 {
                    factor = mul_up(factor, super::div_up(1.0, lo));
                }
                j += 1;
            }
            _ => unreachable!("one of the two monomials has symbols left"),
        }
    }
    Some(factor)
}

/// The charges of a successful [`MagPoly::dominated_by`]: each term of the
/// smaller polynomial, the term of the larger one that pays for it, and
/// what it costs; and the largest share of any payer's coefficient used.
#[derive(Clone, Debug, PartialEq)]
pub struct Domination {
    pub uses: Vec<(Monomial, Monomial, f64)>,
    pub worst_share: f64,
}

struct Shown<'a> {
    p: &'a MagPoly,
    names: &'a [String],
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.p.terms.is_empty() {
            return f.write_str("0");
        }
        // Highest degree first: the term that grows fastest leads.
        let mut terms: Vec<(&Monomial, &f64)> = self.p.terms.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        for (i, (m, c)) in terms.into_iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{:.3e}", c)?;
            for s in m.iter() {
                let name = self.names.get(*s as usize).map(String::as_str).unwrap_or("?");
                write!(f, "*{}", name)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(lo: f64, hi: f64) -> SymRange {
        SymRange { lo, hi }
    }

    #[test]
    fn arithmetic_rounds_up_and_collects_like_terms() {
        let x = MagPoly::symbol(0);
        let y = MagPoly::symbol(1);
        let p = x.add(&y).mul(&x.add(&y));
        let q = MagPoly::term(vec![0, 0], 1.0).add(&MagPoly::term(vec![0, 1], 2.0)).add(&MagPoly::term(vec![1, 1], 1.0));
        // Equal up to the upward rounding of each coefficient.
        let close = |a: &MagPoly, b: &MagPoly| a.terms().zip(b.terms()).all(|((m, x), (n, y))| m == n && (x - y).abs() <= 1e-14 * y);
        assert!(close(&p, &q) && p.terms().count() == 3);
        assert!(p.eval(&[3.0, 4.0]) >= 49.0);
        assert_eq!(MagPoly::constant(2.0).as_constant(), Some(2.0));
        assert_eq!(x.as_constant(), None);
    }

    #[test]
    fn division_by_a_symbol_cancels_it_or_divides_by_its_lower_bound() {
        // (3 K X + 2 X + 4) / K with K >= 2: 3 X + X + 2.
        let p = MagPoly::term(vec![0, 1], 3.0).add(&MagPoly::term(vec![1], 2.0)).add(&MagPoly::constant(4.0));
        let q = p.div_symbol(0, 2.0);
        // Coefficients are rounded up: equal to 2 and 4 within an ulp or two.
        let got: Vec<(Monomial, f64)> = q.terms().map(|(m, c)| (m.clone(), c)).collect();
        assert_eq!(got.iter().map(|t| t.0.clone()).collect::<Vec<_>>(), vec![vec![], vec![1]]);
        assert!((2.0..2.0 + 1e-14).contains(&got[0].1) && (4.0..4.0 + 1e-14).contains(&got[1].1), "{:?}", got);
        // An upper bound of the quotient at every point with K >= 2.
        for (k, x) in [(2.0, 1.0), (3.0, 5.0), (1000.0, 0.5)] {
            assert!(q.eval(&[k, x]) >= p.eval(&[k, x]) / k);
        }
    }

    #[test]
    fn domination_charges_bounded_quotients_and_refuses_unbounded_ones() {
        // K in [1, 4096], X unbounded.
        let ranges = [r(1.0, 4096.0), r(0.0, f64::INFINITY)];
        let derived = MagPoly::term(vec![0, 1], 1e-7).add(&MagPoly::term(vec![0, 0, 1], 1e-12));
        // K^2 X 1e-12 <= 4096e-12 K X: fits in 2e-7 K X.
        assert!(derived.dominated_by(&MagPoly::term(vec![0, 1], 2e-7), &ranges).is_some());
        assert!(derived.dominated_by(&MagPoly::term(vec![0, 1], 1e-7), &ranges).is_none());
        // X is unbounded: no constant pays for a term in X.
        assert!(MagPoly::symbol(1).dominated_by(&MagPoly::constant(1e9), &ranges).is_none());
        // A constant is paid by K (K >= 1).
        assert!(MagPoly::constant(1e-9).dominated_by(&MagPoly::term(vec![0], 1e-9), &ranges).is_some());
        assert!(MagPoly::constant(1e-9).dominated_by(&MagPoly::term(vec![1], 1.0), &ranges).is_none());
    }

    /// A term that a larger-degree payer could also cover goes to the
    /// payer of its own monomial, so that both fit (E in [2, 64], A a
    /// magnitude): 4.7e-10 E^2 A + 7.8e-7 E A against 5e-10 E^2 A + 8e-7 E A.
    #[test]
    fn domination_pays_each_term_from_its_own_monomial_first() {
        let ranges = [r(2.0, 64.0), r(0.0, f64::INFINITY)];
        let bound = MagPoly::term(vec![0, 0, 1], 4.659e-10).add(&MagPoly::term(vec![0, 1], 7.752e-7)).add(&MagPoly::term(vec![0], 7e-46));
        let tol = MagPoly::term(vec![0, 0, 1], 5e-10).add(&MagPoly::term(vec![0, 1], 8e-7)).add(&MagPoly::constant(3e-8));
        assert!(bound.dominated_by(&tol, &ranges).is_some());
        let tight = MagPoly::term(vec![0, 0, 1], 4e-10).add(&MagPoly::term(vec![0, 1], 8e-7)).add(&MagPoly::constant(3e-8));
        assert!(bound.dominated_by(&tight, &ranges).is_none(), "4.659e-10 E^2 A is paid by nothing that can afford it");
    }

    #[test]
    fn a_lower_bound_above_one_pays_a_lower_degree_at_its_reciprocal() {
        // K in [64, 4096], X unbounded: 1e-6 K X <= (1e-6 / 64) K K X, so
        // 3e-8 K K X pays both it and 1e-8 K K X; with K from 1 it cannot.
        let bound = MagPoly::term(vec![0, 0, 1], 1e-8).add(&MagPoly::term(vec![0, 1], 1e-6));
        let tolerance = MagPoly::term(vec![0, 0, 1], 3e-8);
        let d = bound.dominated_by(&tolerance, &[r(64.0, 4096.0), r(0.0, f64::INFINITY)]).expect("paid");
        assert!((d.worst_share - (1e-8 + 1e-6 / 64.0) / 3e-8).abs() < 1e-9, "{}", d.worst_share);
        assert!(bound.dominated_by(&tolerance, &[r(1.0, 4096.0), r(0.0, f64::INFINITY)]).is_none());
        assert!(bound.dominated_by(&tolerance, &[r(32.0, 4096.0), r(0.0, f64::INFINITY)]).is_none(), "1e-8 + 1e-6 / 32 is above 3e-8");
    }

    #[test]
    fn display_names_symbols() {
        let p = MagPoly::term(vec![1, 0], 2.0).add(&MagPoly::constant(0.5));
        assert_eq!(p.display(&["K".into(), "X".into()]).to_string(), "2.000e0*K*X + 5.000e-1");
    }
}
