//! Linear relaxation of an integer query, the cheap first attempt of the
//! solver (see [`crate::z3_backend::discharge`]).
//!
//! Index obligations are mostly linear, but the interesting ones multiply
//! symbolic dims (`row * N + col < 2^31` under `M * N <= 10^9`, a flat
//! index split into axes by `/` and `%` by dims). Z3's nonlinear integer
//! engine takes seconds on those; the argument a human gives is a line of
//! products of bounds. This module gives the solver that line, in linear
//! arithmetic:
//!
//! 1. Every term becomes a polynomial over atoms ([`crate::poly`]); each
//!    product of two or more atoms (a *monomial*) becomes one fresh integer
//!    variable; each division, remainder, minimum and conditional atom
//!    becomes a variable with its defining constraints (for `a / d`,
//!    `a % d`: `a = d*q + r, 0 <= r < d`, exact when `d` is a positive
//!    constant, and asserted only under `d >= 1` otherwise).
//! 2. Facts `p >= 0` from the hypotheses' top-level conjunction, from those
//!    definitions and from the negated goal are multiplied pairwise
//!    (`p >= 0, q >= 0` give `p*q >= 0`: the reformulation-linearization
//!    technique), and monomials whose atoms have non-negative lower bounds
//!    get those bounds' product as a lower bound. Each such lemma is a valid
//!    consequence of the hypotheses.
//!
//! Why this is sound: mapping every monomial variable to the value of its
//! product and every atom variable to the value of its term turns any model
//! of the original query into a model of the relaxed one (the lemmas hold in
//! it, being consequences). So "relaxed query unsatisfiable" proves the
//! original. When the query has no monomial of degree two and divides only
//! by positive constants, the relaxation *is* the query (every definition is
//! exact, no lemma is needed), and a model of it is a counterexample.

use crate::poly::{AtomDef, AtomId, Atoms, Monomial, Poly};
use crate::term::Formula;
use std::collections::{BTreeSet, HashSet};

/// A quantifier-free formula over linear constraints of the relaxation's
/// variables (atoms, and monomials read as variables).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Lin {
    True,
    False,
    /// `p >= 0`
    Ge0(Poly),
    /// `p == 0`
    Eq0(Poly),
    And(Vec<Lin>),
    Or(Vec<Lin>),
    Not(Box<Lin>),
}

impl Lin {
    fn ge(a: Poly, b: &Poly) -> Option<Lin> {
        Some(Lin::Ge0(a.sub(b)?))
    }
}

/// Lemmas per query at most: a few hundred keep the linear query in the
/// milliseconds; the cut is deterministic (first in fact order).
const MAX_LEMMAS: usize = 1500;

/// Facts with a coefficient above this are left out of products: their
/// lemmas are valid, but they slow the simplex down with bignum pivots,
/// and the bounds that index proofs multiply (dims, `2^31`, products of
/// dims bounded by `10^9`) are all below it.
const MAX_PRODUCT_COEFF: i128 = 1 << 33;

/// One query, relaxed.
#[derive(Clone, Debug)]
pub struct Relaxation {
    pub atoms: Atoms,
    /// The relaxed hypotheses, then the definitions of every atom used.
    pub hypotheses: Vec<Lin>,
    /// Top-level facts `p >= 0` (hypotheses and exact definitions).
    facts: Vec<Poly>,
    defined: HashSet<AtomId>,
    /// Stays true while the relaxation is equisatisfiable with the query.
    exact: bool,
}

impl Relaxation {
    /// Relax the hypotheses (their conjunction). `None` when a coefficient
    /// overflows `i128`.
    pub fn new(hypotheses: &[Formula]) -> Option<Relaxation> {
        let mut r = Relaxation { atoms: Atoms::new(), hypotheses: Vec::new(), facts: Vec::new(), defined: HashSet::new(), exact: true };
        for h in hypotheses {
            let lin = r.formula(h)?;
            r.add_facts(&lin);
            r.hypotheses.push(lin);
        }
        r.define_atoms()?;
        Some(r)
    }

    /// Is the relaxation the query itself (no products of atoms, no division
    /// by anything but a positive constant)?
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// Relax a formula (its atoms' definitions are added by
    /// [`Relaxation::define_atoms`]).
    pub fn formula(&mut self, f: &Formula) -> Option<Lin> {
        Some(match f {
            Formula::True => Lin::True,
            Formula::False => Lin::False,
            Formula::Lt(a, b) => {
                let (pa, pb) = (self.poly(a)?, self.poly(b)?);
                Lin::Ge0(pb.sub(&pa)?.sub(&Poly::constant(1))?)
            }
            Formula::Le(a, b) => {
                let (pa, pb) = (self.poly(a)?, self.poly(b)?);
                Lin::ge(pb, &pa)?
            }
            Formula::Eq(a, b) => {
                let (pa, pb) = (self.poly(a)?, self.poly(b)?);
                Lin::Eq0(pa.sub(&pb)?)
            }
            Formula::And(v) => Lin::And(v.iter().map(|x| self.formula(x)).collect::<Option<_>>()?),
            Formula::Or(v) => Lin::Or(v.iter().map(|x| self.formula(x)).collect::<Option<_>>()?),
            Formula::Not(x) => Lin::Not(Box::new(self.formula(x)?)),
            Formula::Implies(a, b) => Lin::Or(vec![Lin::Not(Box::new(self.formula(a)?)), self.formula(b)?]),
        })
    }

    fn poly(&mut self, t: &crate::term::Term) -> Option<Poly> {
        let p = self.atoms.poly(t)?;
        if p.degree() >= 2 {
            self.exact = false;
        }
        Some(p)
    }

    /// Top-level facts of a relaxed formula.
    fn add_facts(&mut self, f: &Lin) {
        let mut found = Vec::new();
        collect_facts(f, &mut found);
        for p in found {
            self.push_fact(p);
        }
    }

    fn push_fact(&mut self, p: Poly) {
        if p.as_const().is_none() && !self.facts.contains(&p) {
            self.facts.push(p);
        }
    }

    /// Add the defining constraints of every atom not yet defined.
    pub fn define_atoms(&mut self) -> Option<()> {
        let mut a = 0;
        while a < self.atoms.len() {
            if self.defined.insert(a) {
                let def = self.atoms.def(a).clone();
                // A product inside an atom (`(a*a) / 4`, a branch of a
                // conditional) is a fresh variable here as anywhere.
                let nonlinear = match &def {
                    AtomDef::Var(_) => false,
                    AtomDef::Div(x, y) | AtomDef::Rem(x, y) | AtomDef::Min(x, y) | AtomDef::Ite(_, x, y) => x.degree() >= 2 || y.degree() >= 2,
                };
                if nonlinear {
                    self.exact = false;
                }
                match def {
                    AtomDef::Var(_) => {}
                    AtomDef::Div(x, d) | AtomDef::Rem(x, d) => {
                        let q = self.atoms.intern(AtomDef::Div(x.clone(), d.clone()));
                        let r = self.atoms.intern(AtomDef::Rem(x.clone(), d.clone()));
                        self.defined.insert(q);
                        self.defined.insert(r);
                        let (pq, pr) = (Poly::atom(q), Poly::atom(r));
                        // x = d*q + r, 0 <= r <= d - 1: floor division and
                        // the non-negative remainder for d >= 1 (Z3's
                        // `div`/`mod` and C's for the non-negative operands
                        // the kernels use).
                        let euclid = Lin::And(vec![Lin::Eq0(x.sub(&d.mul(&pq)?)?.sub(&pr)?), Lin::Ge0(pr.clone()), Lin::ge(d.sub(&Poly::constant(1))?, &pr)?]);
                        match d.as_const() {
                            Some(c) if c >= 1 => {
                                self.add_facts(&euclid);
                                self.hypotheses.push(euclid);
                            }
                            _ => {
                                // Only for d >= 1; for other d the atoms are
                                // left free (an over-approximation).
                                self.exact = false;
                                if d.degree() >= 1 && self.lower_bound(&d).is_some_and(|lo| lo >= 1) {
                                    self.add_facts(&euclid);
                                    self.hypotheses.push(euclid);
                                } else {
                                    let guard = Lin::Ge0(d.sub(&Poly::constant(1))?);
                                    self.hypotheses.push(Lin::Or(vec![Lin::Not(Box::new(guard)), euclid]));
                                }
                            }
                        }
                    }
                    AtomDef::Min(x, y) => {
                        let v = Poly::atom(a);
                        let first = Lin::And(vec![Lin::ge(y.clone(), &x)?, Lin::Eq0(v.sub(&x)?)]);
                        let second = Lin::And(vec![Lin::Not(Box::new(Lin::ge(y.clone(), &x)?)), Lin::Eq0(v.sub(&y)?)]);
                        // The minimum is at most either operand.
                        let below = Lin::And(vec![Lin::ge(x.clone(), &v)?, Lin::ge(y.clone(), &v)?]);
                        self.add_facts(&below);
                        self.hypotheses.push(Lin::Or(vec![first, second]));
                        self.hypotheses.push(below);
                    }
                    AtomDef::Ite(c, x, y) => {
                        let v = Poly::atom(a);
                        let cond = self.formula(&c)?;
                        let then = Lin::And(vec![cond.clone(), Lin::Eq0(v.sub(&x)?)]);
                        let els = Lin::And(vec![Lin::Not(Box::new(cond)), Lin::Eq0(v.sub(&y)?)]);
                        self.hypotheses.push(Lin::Or(vec![then, els]));
                    }
                }
            }
            a += 1;
        }
        Some(())
    }

    /// The variables that occur in a monomial of degree two or more, or in
    /// a divisor that is not constant (fixing them makes the query linear).
    pub fn nonlinear_vars(&self) -> Vec<String> {
        let mut atoms: Vec<AtomId> = Vec::new();
        let mut monos = BTreeSet::new();
        for h in &self.hypotheses {
            monomials_of(h, &mut monos);
        }
        for m in &monos {
            atoms.extend(m.iter().copied());
        }
        for a in 0..self.atoms.len() {
            if let AtomDef::Div(_, d) | AtomDef::Rem(_, d) = self.atoms.def(a) {
                if d.as_const().is_none() {
                    d.atoms(&mut atoms);
                }
            }
        }
        // Atoms that are terms stand for their variables.
        let mut names = Vec::new();
        let mut stack = atoms;
        let mut seen = HashSet::new();
        while let Some(a) = stack.pop() {
            if !seen.insert(a) {
                continue;
            }
            match self.atoms.def(a) {
                AtomDef::Var(n) => {
                    if !names.contains(n) {
                        names.push(n.clone());
                    }
                }
                AtomDef::Div(x, y) | AtomDef::Rem(x, y) | AtomDef::Min(x, y) | AtomDef::Ite(_, x, y) => {
                    x.atoms(&mut stack);
                    y.atoms(&mut stack);
                }
            }
        }
        names.sort();
        names
    }

    /// Relax the goal and define the atoms it brings in.
    pub fn goal(&mut self, goal: &Formula) -> Option<Lin> {
        let lin = self.formula(goal)?;
        self.define_atoms()?;
        Some(lin)
    }

    /// A lower bound of a polynomial from the atoms' bounds, if finite.
    fn lower_bound(&self, p: &Poly) -> Option<i128> {
        let bounds = Bounds::of(&self.facts, self.atoms.len());
        bounds.poly_range(p).0
    }

    /// Valid lemmas for the relaxed query with the extra facts of one case:
    /// products of pairs of facts that mention a monomial of the query, and
    /// product bounds of monomials.
    pub fn lemmas(&self, case: &[Lin]) -> Vec<Lin> {
        let mut facts = self.facts.clone();
        let mut case_facts = Vec::new();
        for f in case {
            collect_facts(f, &mut case_facts);
        }
        for p in case_facts {
            if p.as_const().is_none() && !facts.contains(&p) {
                facts.push(p);
            }
        }
        // The monomials the query talks about, and their sub-products.
        let mut targets: BTreeSet<Monomial> = BTreeSet::new();
        let mut all_lin: Vec<&Lin> = self.hypotheses.iter().collect();
        all_lin.extend(case.iter());
        for l in &all_lin {
            monomials_of(l, &mut targets);
        }
        let mut subs = BTreeSet::new();
        for m in &targets {
            if m.len() >= 3 {
                for skip in 0..m.len() {
                    let s: Monomial = m.iter().enumerate().filter(|(i, _)| *i != skip).map(|(_, a)| *a).collect();
                    subs.insert(s);
                }
            }
        }
        targets.extend(subs);
        if targets.is_empty() {
            return Vec::new();
        }
        let bounds = Bounds::of(&facts, self.atoms.len());
        let mut out = Vec::new();
        // Product bounds of monomials with non-negative atoms.
        for m in &targets {
            let los: Option<Vec<i128>> = m.iter().map(|a| bounds.lo[*a].filter(|v| *v >= 0)).collect();
            if let Some(los) = los {
                let lo = los.iter().try_fold(1i128, |acc, v| acc.checked_mul(*v));
                if let (Some(lo), Some(mono)) = (lo, monomial_poly(m)) {
                    if let Some(p) = mono.sub(&Poly::constant(lo)) {
                        facts.push(p.clone());
                        out.push(Lin::Ge0(p));
                    }
                }
            }
        }
        let small = |p: &Poly| p.terms().all(|(_, c)| c.abs() <= MAX_PRODUCT_COEFF);
        let usable: Vec<&Poly> = facts.iter().filter(|p| small(p) && p.degree() <= 2).collect();
        let mut seen: HashSet<Poly> = HashSet::new();
        'pairs: for i in 0..usable.len() {
            for j in i..usable.len() {
                if out.len() >= MAX_LEMMAS {
                    break 'pairs;
                }
                let Some(prod) = usable[i].mul(usable[j]) else { continue };
                if !prod.nonlinear().any(|m| targets.contains(m)) || !seen.insert(prod.clone()) {
                    continue;
                }
                out.push(Lin::Ge0(prod));
            }
        }
        out
    }
}

fn monomial_poly(m: &Monomial) -> Option<Poly> {
    m.iter().try_fold(Poly::constant(1), |acc, a| acc.mul(&Poly::atom(*a)))
}

fn collect_facts(f: &Lin, out: &mut Vec<Poly>) {
    match f {
        Lin::Ge0(p) => out.push(p.clone()),
        Lin::Eq0(p) => {
            out.push(p.clone());
            if let Some(n) = p.scale(-1) {
                out.push(n);
            }
        }
        Lin::And(v) => v.iter().for_each(|x| collect_facts(x, out)),
        _ => {}
    }
}

fn monomials_of(f: &Lin, out: &mut BTreeSet<Monomial>) {
    match f {
        Lin::Ge0(p) | Lin::Eq0(p) => out.extend(p.nonlinear().cloned()),
        Lin::And(v) | Lin::Or(v) => v.iter().for_each(|x| monomials_of(x, out)),
        Lin::Not(x) => monomials_of(x, out),
        Lin::True | Lin::False => {}
    }
}

/// The cases of `¬f`: a disjunction of conjunctions (each conjunction a
/// list), at most `max` of them, negations pushed onto the atoms
/// (`¬(p >= 0)` is `-p - 1 >= 0` over the integers). `None` when the
/// negation is not that small.
pub fn negated_cases(f: &Lin, max: usize) -> Option<Vec<Vec<Lin>>> {
    dnf(f, false, max)
}

fn dnf(f: &Lin, positive: bool, max: usize) -> Option<Vec<Vec<Lin>>> {
    let neg_atom = |p: &Poly| -> Option<Lin> { Some(Lin::Ge0(p.scale(-1)?.sub(&Poly::constant(1))?)) };
    Some(match (f, positive) {
        (Lin::True, true) | (Lin::False, false) => vec![vec![]],
        (Lin::True, false) | (Lin::False, true) => vec![],
        (Lin::Ge0(p), true) => vec![vec![Lin::Ge0(p.clone())]],
        (Lin::Ge0(p), false) => vec![vec![neg_atom(p)?]],
        (Lin::Eq0(p), true) => vec![vec![Lin::Eq0(p.clone())]],
        // p != 0: p >= 1 or p <= -1.
        (Lin::Eq0(p), false) => vec![vec![Lin::Ge0(p.sub(&Poly::constant(1))?)], vec![neg_atom(p)?]],
        (Lin::Not(x), pos) => dnf(x, !pos, max)?,
        // A disjunction (Or, or a negated And): the union of the cases.
        (Lin::Or(v), true) | (Lin::And(v), false) => {
            let mut out = Vec::new();
            for x in v {
                out.extend(dnf(x, positive, max)?);
                if out.len() > max {
                    return None;
                }
            }
            out
        }
        // A conjunction: the product of the cases.
        (Lin::And(v), true) | (Lin::Or(v), false) => {
            let mut out: Vec<Vec<Lin>> = vec![vec![]];
            for x in v {
                let cases = dnf(x, positive, max)?;
                let mut next = Vec::new();
                for a in &out {
                    for b in &cases {
                        next.push(a.iter().chain(b).cloned().collect());
                    }
                }
                if next.len() > max {
                    return None;
                }
                out = next;
            }
            out
        }
    })
}

/// Integer bounds of atoms, propagated through linear facts.
struct Bounds {
    lo: Vec<Option<i128>>,
    hi: Vec<Option<i128>>,
}

impl Bounds {
    fn of(facts: &[Poly], atoms: usize) -> Bounds {
        let mut b = Bounds { lo: vec![None; atoms], hi: vec![None; atoms] };
        let linear: Vec<&Poly> = facts.iter().filter(|p| p.degree() == 1).collect();
        // A few rounds reach what index queries need (a variable bounded
        // by a dim bounded by a constant); no fixpoint is required for
        // soundness, every bound derived is valid.
        for _ in 0..4 {
            let mut changed = false;
            for p in &linear {
                for (m, c) in p.terms() {
                    if m.len() != 1 {
                        continue;
                    }
                    // c*x + rest >= 0  =>  c*x >= -max(rest)
                    let rest = p.terms().filter(|(m2, _)| *m2 != m).try_fold(0i128, |acc, (m2, c2)| {
                        if m2.is_empty() {
                            return acc.checked_add(c2);
                        }
                        let a = m2[0];
                        let hi = if c2 > 0 { b.hi[a] } else { b.lo[a] }?;
                        acc.checked_add(c2.checked_mul(hi)?)
                    });
                    let Some(rest) = rest else { continue };
                    let x = m[0];
                    if c > 0 {
                        // x >= ceil(-rest / c)
                        let v = (-rest).div_euclid(c) + if (-rest).rem_euclid(c) != 0 { 1 } else { 0 };
                        if !matches!(b.lo[x], Some(old) if old >= v) {
                            b.lo[x] = Some(v);
                            changed = true;
                        }
                    } else {
                        // -|c| x >= -rest  =>  x <= floor(rest / |c|)
                        let v = rest.div_euclid(-c);
                        if !matches!(b.hi[x], Some(old) if old <= v) {
                            b.hi[x] = Some(v);
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        b
    }

    /// (lower, upper) of a polynomial of degree at most one.
    fn poly_range(&self, p: &Poly) -> (Option<i128>, Option<i128>) {
        let mut lo = Some(0i128);
        let mut hi = Some(0i128);
        for (m, c) in p.terms() {
            match m.len() {
                0 => {
                    lo = lo.and_then(|v| v.checked_add(c));
                    hi = hi.and_then(|v| v.checked_add(c));
                }
                1 => {
                    let (a, b) = (self.lo[m[0]], self.hi[m[0]]);
                    let (l, h) = if c > 0 { (a, b) } else { (b, a) };
                    lo = lo.and_then(|v| v.checked_add(c.checked_mul(l?)?));
                    hi = hi.and_then(|v| v.checked_add(c.checked_mul(h?)?));
                }
                _ => return (None, None),
            }
        }
        (lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::Term;

    fn v(n: &str) -> Term {
        Term::var(n)
    }

    #[test]
    fn linear_queries_are_exact_and_products_are_not() {
        let r = Relaxation::new(&[Term::c(0).le(v("i")), v("i").lt(v("N"))]).unwrap();
        assert!(r.is_exact());
        let r = Relaxation::new(&[v("i").lt(v("M").mul(v("N")))]).unwrap();
        assert!(!r.is_exact());
        let r = Relaxation::new(&[v("i").div(Term::c(16)).lt(v("N"))]).unwrap();
        assert!(r.is_exact(), "division by a positive constant is exact");
        // Found by the brute-force property test: a product inside a
        // conditional's branch or a division's dividend is not exact.
        let ite = Term::Ite(Box::new(Term::var("c").lt(Term::var("a"))), Box::new(Term::var("c")), Box::new(Term::var("a").mul(Term::var("a"))));
        let mut r = Relaxation::new(&[]).unwrap();
        r.goal(&ite.lt(Term::var("a"))).unwrap();
        assert!(!r.is_exact(), "a product in a conditional's branch");
        let mut r = Relaxation::new(&[]).unwrap();
        r.goal(&Term::var("a").mul(Term::var("b")).div(Term::c(4)).lt(Term::var("a"))).unwrap();
        assert!(!r.is_exact(), "a product in a dividend");
        let r = Relaxation::new(&[v("i").div(v("D")).lt(v("N"))]).unwrap();
        assert!(!r.is_exact());
    }

    #[test]
    fn the_negated_goal_splits_into_cases() {
        let mut r = Relaxation::new(&[]).unwrap();
        let mut cases_of = |g: Formula| negated_cases(&r.goal(&g).unwrap(), 8).unwrap();
        // ¬(0 <= i < N) is two cases; ¬(a == b) is two cases.
        assert_eq!(cases_of(v("i").within(Term::c(0), v("N"))).len(), 2);
        assert_eq!(cases_of(v("a").eq(v("b"))).len(), 2);
        // ¬(x || y) is one case of two facts.
        let cases = cases_of(Formula::or(vec![v("a").lt(v("b")), v("c").lt(v("d"))]));
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0].len(), 2);
    }

    #[test]
    fn the_row_major_product_lemma_is_generated() {
        // row < M, col < N, 1 <= N: the lemma (M - 1 - row) * (N - 1) >= 0
        // mentions row*N, the goal's monomial.
        let hyps = [Term::c(0).le(v("row")), v("row").lt(v("M")), Term::c(0).le(v("col")), v("col").lt(v("N")), Term::c(1).le(v("N")), v("M").mul(v("N")).le(Term::c(1_000_000_000))];
        let mut r = Relaxation::new(&hyps).unwrap();
        let goal = v("row").mul(v("N")).add(v("col")).lt(Term::c(1 << 31));
        let g = r.goal(&goal).unwrap();
        let cases = negated_cases(&g, 8).unwrap();
        let lemmas = r.lemmas(&cases[0]);
        let mut atoms = r.atoms.clone();
        let want = atoms.poly(&v("M").sub(Term::c(1)).sub(v("row")).mul(v("N").sub(Term::c(1)))).unwrap();
        assert!(lemmas.contains(&Lin::Ge0(want)), "{:?}", lemmas.len());
    }

    #[test]
    fn bounds_propagate_through_linear_facts() {
        let mut atoms = Atoms::new();
        let f1 = atoms.poly(&v("N").sub(Term::c(1))).unwrap(); // N >= 1
        let f2 = atoms.poly(&Term::c(64).sub(v("N"))).unwrap(); // N <= 64
        let f3 = atoms.poly(&v("N").sub(Term::c(1)).sub(v("i"))).unwrap(); // i <= N - 1
        let b = Bounds::of(&[f1, f2, f3], atoms.len());
        let (n, i) = (0, 1);
        assert_eq!((b.lo[n], b.hi[n]), (Some(1), Some(64)));
        assert_eq!(b.hi[i], Some(63));
    }
}
