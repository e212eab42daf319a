//! Polynomial normal form of integer [`Term`]s.
//!
//! A polynomial is a sum of monomials with exact (`i128`) coefficients; a
//! monomial is a product of *atoms*. An atom is a variable, or a term the
//! polynomial view keeps opaque (floor division, remainder, minimum,
//! conditional), with its operands normalised in turn. Atoms are interned
//! in an [`Atoms`] table, so two occurrences of the same term are the same
//! atom and the same product of atoms is the same monomial: that is what
//! lets the linear relaxation ([`crate::relax`]) treat each monomial as one
//! variable consistently.
//!
//! Every operation is checked: a coefficient that does not fit `i128`
//! makes the conversion fail (`None`), and callers fall back to the solver
//! on the original term.

use crate::term::{Formula, Term};
use std::collections::{BTreeMap, HashMap};

/// Index of an atom in its [`Atoms`] table.
pub type AtomId = usize;

/// A product of atoms: sorted atom ids, repeated for powers; empty for
/// the constant monomial.
pub type Monomial = Vec<AtomId>;

/// `Σ coefficient · monomial`, no zero coefficients stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Poly {
    terms: BTreeMap<Monomial, i128>,
}

impl Poly {
    pub fn zero() -> Poly {
        Poly::default()
    }

    pub fn constant(c: i128) -> Poly {
        let mut p = Poly::zero();
        if c != 0 {
            p.terms.insert(Vec::new(), c);
        }
        p
    }

    pub fn atom(a: AtomId) -> Poly {
        let mut p = Poly::zero();
        p.terms.insert(vec![a], 1);
        p
    }

    /// The monomials with their coefficients, in a fixed order.
    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, i128)> {
        self.terms.iter().map(|(m, c)| (m, *c))
    }

    pub fn as_const(&self) -> Option<i128> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// The largest monomial degree (0 for constants).
    pub fn degree(&self) -> usize {
        self.terms.keys().map(|m| m.len()).max().unwrap_or(0)
    }

    /// The coefficient of the constant monomial.
    pub fn constant_part(&self) -> i128 {
        self.terms.get(&Vec::new()).copied().unwrap_or(0)
    }

    fn add_term(&mut self, m: Monomial, c: i128) -> Option<()> {
        if c == 0 {
            return Some(());
        }
        let e = self.terms.entry(m).or_insert(0);
        *e = e.checked_add(c)?;
        if *e == 0 {
            self.terms.retain(|_, v| *v != 0);
        }
        Some(())
    }

    pub fn add(&self, o: &Poly) -> Option<Poly> {
        let mut out = self.clone();
        for (m, c) in &o.terms {
            out.add_term(m.clone(), *c)?;
        }
        Some(out)
    }

    pub fn scale(&self, k: i128) -> Option<Poly> {
        let mut out = Poly::zero();
        for (m, c) in &self.terms {
            out.add_term(m.clone(), c.checked_mul(k)?)?;
        }
        Some(out)
    }

    pub fn sub(&self, o: &Poly) -> Option<Poly> {
        self.add(&o.scale(-1)?)
    }

    pub fn mul(&self, o: &Poly) -> Option<Poly> {
        let mut out = Poly::zero();
        for (m1, c1) in &self.terms {
            for (m2, c2) in &o.terms {
                let mut m: Monomial = m1.iter().chain(m2).copied().collect();
                m.sort_unstable();
                out.add_term(m, c1.checked_mul(*c2)?)?;
            }
        }
        Some(out)
    }

    /// The monomials of degree two or more.
    pub fn nonlinear(&self) -> impl Iterator<Item = &Monomial> {
        self.terms.keys().filter(|m| m.len() >= 2)
    }

    /// Every atom this polynomial mentions.
    pub fn atoms(&self, out: &mut Vec<AtomId>) {
        for m in self.terms.keys() {
            for a in m {
                if !out.contains(a) {
                    out.push(*a);
                }
            }
        }
    }
}

/// What an atom stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AtomDef {
    Var(String),
    /// Floor division `a / b` (Z3's `div`, C's for non-negative operands).
    Div(Poly, Poly),
    /// Non-negative remainder `a % b`.
    Rem(Poly, Poly),
    Min(Poly, Poly),
    Ite(Formula, Poly, Poly),
}

/// The atoms of one query, interned.
#[derive(Clone, Debug, Default)]
pub struct Atoms {
    defs: Vec<AtomDef>,
    ids: HashMap<AtomDef, AtomId>,
}

impl Atoms {
    pub fn new() -> Atoms {
        Atoms::default()
    }

    pub fn intern(&mut self, d: AtomDef) -> AtomId {
        if let Some(id) = self.ids.get(&d) {
            return *id;
        }
        self.defs.push(d.clone());
        self.ids.insert(d, self.defs.len() - 1);
        self.defs.len() - 1
    }

    pub fn def(&self, a: AtomId) -> &AtomDef {
        &self.defs[a]
    }

    pub fn len(&self) -> usize {
        self.defs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// The polynomial of a term; `None` when a coefficient overflows.
    pub fn poly(&mut self, t: &Term) -> Option<Poly> {
        Some(match t {
            Term::Const(c) => Poly::constant(*c as i128),
            Term::Var(n) => Poly::atom(self.intern(AtomDef::Var(n.clone()))),
            Term::Add(a, b) => self.poly(a)?.add(&self.poly(b)?)?,
            Term::Sub(a, b) => self.poly(a)?.sub(&self.poly(b)?)?,
            Term::Mul(a, b) => self.poly(a)?.mul(&self.poly(b)?)?,
            Term::Div(a, b) | Term::Rem(a, b) => {
                let (pa, pb) = (self.poly(a)?, self.poly(b)?);
                let div = matches!(t, Term::Div(..));
                match (pa.as_const(), pb.as_const()) {
                    // Fold what is constant (floor semantics, divisor > 0).
                    (Some(x), Some(y)) if y > 0 => Poly::constant(if div { x.div_euclid(y) } else { x.rem_euclid(y) }),
                    (_, Some(1)) => {
                        if div {
                            pa
                        } else {
                            Poly::zero()
                        }
                    }
                    _ => Poly::atom(self.intern(if div { AtomDef::Div(pa, pb) } else { AtomDef::Rem(pa, pb) })),
                }
            }
            Term::Min(a, b) => {
                let (pa, pb) = (self.poly(a)?, self.poly(b)?);
                if pa == pb {
                    pa
                } else {
                    Poly::atom(self.intern(AtomDef::Min(pa, pb)))
                }
            }
            Term::Ite(c, a, b) => {
                let (pa, pb) = (self.poly(a)?, self.poly(b)?);
                if pa == pb {
                    pa
                } else {
                    Poly::atom(self.intern(AtomDef::Ite((**c).clone(), pa, pb)))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: &str) -> Term {
        Term::var(n)
    }

    #[test]
    fn equal_terms_have_equal_polynomials() {
        let mut atoms = Atoms::new();
        // (a + b) * c  ==  c*b + a*c
        let x = atoms.poly(&v("a").add(v("b")).mul(v("c"))).unwrap();
        let y = atoms.poly(&v("c").mul(v("b")).add(v("a").mul(v("c")))).unwrap();
        assert_eq!(x, y);
        assert_eq!(x.degree(), 2);
        assert_eq!(x.nonlinear().count(), 2);
    }

    #[test]
    fn differences_cancel_and_constants_fold() {
        let mut atoms = Atoms::new();
        let p = atoms.poly(&v("x").mul(Term::c(3)).sub(v("x").add(v("x")).add(v("x")))).unwrap();
        assert_eq!(p.as_const(), Some(0));
        let q = atoms.poly(&Term::Div(Box::new(Term::c(-7)), Box::new(Term::c(2)))).unwrap();
        assert_eq!(q.as_const(), Some(-4), "floor division, as Z3's div");
        let r = atoms.poly(&Term::Rem(Box::new(Term::c(-7)), Box::new(Term::c(2)))).unwrap();
        assert_eq!(r.as_const(), Some(1));
    }

    #[test]
    fn divisions_are_atoms_shared_between_occurrences() {
        let mut atoms = Atoms::new();
        let a = atoms.poly(&v("i").div(v("D")).mul(v("D"))).unwrap();
        let b = atoms.poly(&v("D").mul(v("i").div(v("D")))).unwrap();
        assert_eq!(a, b);
        assert_eq!(atoms.len(), 3, "i, D and i / D");
    }

    #[test]
    fn overflowing_coefficients_give_none() {
        let mut atoms = Atoms::new();
        let big = Term::c(i64::MAX);
        let t = big.clone().mul(v("a")).mul(big.clone()).mul(big.clone());
        assert!(atoms.poly(&t).is_none());
    }
}
