//! Symbolic integer terms and formulas. Integers are mathematical (unbounded);
//! machine ranges are stated as explicit obligations.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Term {
    Const(i64),
    /// A named unknown: a dim, a thread or block id, a loop variable.
    Var(String),
    Add(Box<Term>, Box<Term>),
    Sub(Box<Term>, Box<Term>),
    Mul(Box<Term>, Box<Term>),
    /// Floor division (equal to C's for non-negative operands).
    Div(Box<Term>, Box<Term>),
    /// Non-negative remainder (equal to C's for non-negative operands).
    Rem(Box<Term>, Box<Term>),
    Min(Box<Term>, Box<Term>),
    Ite(Box<Formula>, Box<Term>, Box<Term>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Formula {
    True,
    False,
    Lt(Term, Term),
    Le(Term, Term),
    Eq(Term, Term),
    And(Vec<Formula>),
    Or(Vec<Formula>),
    Not(Box<Formula>),
    Implies(Box<Formula>, Box<Formula>),
}

/// Builders named after the operators they build (not the operators: a
/// term is data, and `a.add(b)` folds constants).
#[allow(clippy::should_implement_trait)]
impl Term {
    pub fn var(name: impl Into<String>) -> Term {
        Term::Var(name.into())
    }
    pub fn c(v: i64) -> Term {
        Term::Const(v)
    }
    pub fn add(self, o: Term) -> Term {
        match (&self, &o) {
            (Term::Const(0), _) => o,
            (_, Term::Const(0)) => self,
            (Term::Const(a), Term::Const(b)) => a.checked_add(*b).map(Term::Const).unwrap_or(Term::Add(Box::new(self), Box::new(o))),
            _ => Term::Add(Box::new(self), Box::new(o)),
        }
    }
    pub fn sub(self, o: Term) -> Term {
        match (&self, &o) {
            (_, Term::Const(0)) => self,
            (Term::Const(a), Term::Const(b)) => a.checked_sub(*b).map(Term::Const).unwrap_or(Term::Sub(Box::new(self), Box::new(o))),
            _ => Term::Sub(Box::new(self), Box::new(o)),
        }
    }
    pub fn mul(self, o: Term) -> Term {
        match (&self, &o) {
            (Term::Const(1), _) => o,
            (_, Term::Const(1)) => self,
            (Term::Const(0), _) | (_, Term::Const(0)) => Term::Const(0),
            (Term::Const(a), Term::Const(b)) => a.checked_mul(*b).map(Term::Const).unwrap_or(Term::Mul(Box::new(self), Box::new(o))),
            _ => Term::Mul(Box::new(self), Box::new(o)),
        }
    }
    pub fn div(self, o: Term) -> Term {
        match (&self, &o) {
            // (x * c) / c is x (floor division, exact).
            (Term::Mul(x, c), Term::Const(d)) if *d > 0 && **c == Term::Const(*d) => (**x).clone(),
            _ => Term::Div(Box::new(self), Box::new(o)),
        }
    }
    pub fn rem(self, o: Term) -> Term {
        match (&self, &o) {
            // (x * c) mod c is 0.
            (Term::Mul(_, c), Term::Const(d)) if *d > 0 && **c == Term::Const(*d) => Term::Const(0),
            _ => Term::Rem(Box::new(self), Box::new(o)),
        }
    }
    pub fn min(self, o: Term) -> Term {
        Term::Min(Box::new(self), Box::new(o))
    }
    pub fn lt(self, o: Term) -> Formula {
        Formula::Lt(self, o)
    }
    pub fn le(self, o: Term) -> Formula {
        Formula::Le(self, o)
    }
    pub fn eq(self, o: Term) -> Formula {
        Formula::Eq(self, o)
    }
    pub fn ge(self, o: Term) -> Formula {
        Formula::Le(o, self)
    }
    /// `lo <= self < hi`
    pub fn within(self, lo: Term, hi: Term) -> Formula {
        Formula::and(vec![lo.le(self.clone()), self.lt(hi)])
    }
    /// Rename every variable (used to build two copies of one execution).
    pub fn rename(&self, f: &dyn Fn(&str) -> String) -> Term {
        self.subst(&|n| Some(Term::Var(f(n))))
    }
    /// Replace variables by terms.
    pub fn subst(&self, f: &dyn Fn(&str) -> Option<Term>) -> Term {
        let b = |t: &Term| Box::new(t.subst(f));
        match self {
            Term::Const(v) => Term::Const(*v),
            Term::Var(n) => f(n).unwrap_or_else(|| Term::Var(n.clone())),
            Term::Add(a, c) => Term::Add(b(a), b(c)),
            Term::Sub(a, c) => Term::Sub(b(a), b(c)),
            Term::Mul(a, c) => Term::Mul(b(a), b(c)),
            Term::Div(a, c) => Term::Div(b(a), b(c)),
            Term::Rem(a, c) => Term::Rem(b(a), b(c)),
            Term::Min(a, c) => Term::Min(b(a), b(c)),
            Term::Ite(p, a, c) => Term::Ite(Box::new(p.subst(f)), b(a), b(c)),
        }
    }
    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Term::Const(_) => {}
            Term::Var(n) => {
                if !out.contains(n) {
                    out.push(n.clone())
                }
            }
            Term::Add(a, c) | Term::Sub(a, c) | Term::Mul(a, c) | Term::Div(a, c) | Term::Rem(a, c) | Term::Min(a, c) => {
                a.vars(out);
                c.vars(out);
            }
            Term::Ite(p, a, c) => {
                p.vars(out);
                a.vars(out);
                c.vars(out);
            }
        }
    }
}

impl Term {
    /// The value under `env`, in exact integer arithmetic with the solver's
    /// semantics (floor division and a non-negative remainder, as SMT-LIB's
    /// `div`/`mod`); `None` for an unknown variable, a division by zero
    /// (which SMT-LIB leaves unspecified) or a value beyond `i128`.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i128>) -> Option<i128> {
        Some(match self {
            Term::Const(v) => *v as i128,
            Term::Var(n) => env(n)?,
            Term::Add(a, b) => a.eval(env)?.checked_add(b.eval(env)?)?,
            Term::Sub(a, b) => a.eval(env)?.checked_sub(b.eval(env)?)?,
            Term::Mul(a, b) => a.eval(env)?.checked_mul(b.eval(env)?)?,
            Term::Div(a, b) => {
                let d = b.eval(env)?;
                if d == 0 {
                    return None;
                }
                a.eval(env)?.checked_div_euclid(d)?
            }
            Term::Rem(a, b) => {
                let d = b.eval(env)?;
                if d == 0 {
                    return None;
                }
                a.eval(env)?.checked_rem_euclid(d)?
            }
            Term::Min(a, b) => a.eval(env)?.min(b.eval(env)?),
            Term::Ite(c, a, b) => {
                if c.eval(env)? {
                    a.eval(env)?
                } else {
                    b.eval(env)?
                }
            }
        })
    }
}

impl Formula {
    /// The truth value under `env` (see [`Term::eval`]); `None` when a term
    /// has no value.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i128>) -> Option<bool> {
        Some(match self {
            Formula::True => true,
            Formula::False => false,
            Formula::Lt(a, b) => a.eval(env)? < b.eval(env)?,
            Formula::Le(a, b) => a.eval(env)? <= b.eval(env)?,
            Formula::Eq(a, b) => a.eval(env)? == b.eval(env)?,
            Formula::And(v) => {
                for x in v {
                    if !x.eval(env)? {
                        return Some(false);
                    }
                }
                true
            }
            Formula::Or(v) => {
                for x in v {
                    if x.eval(env)? {
                        return Some(true);
                    }
                }
                false
            }
            Formula::Not(x) => !x.eval(env)?,
            Formula::Implies(a, b) => !a.eval(env)? || b.eval(env)?,
        })
    }

    pub fn and(parts: Vec<Formula>) -> Formula {
        let mut v: Vec<Formula> = Vec::new();
        for p in parts {
            match p {
                Formula::True => {}
                Formula::And(inner) => v.extend(inner),
                other => v.push(other),
            }
        }
        match v.len() {
            0 => Formula::True,
            1 => v.pop().unwrap_or(Formula::True),
            _ => Formula::And(v),
        }
    }
    pub fn or(parts: Vec<Formula>) -> Formula {
        let v: Vec<Formula> = parts.into_iter().filter(|p| *p != Formula::False).collect();
        match v.len() {
            0 => Formula::False,
            1 => v.into_iter().next().unwrap_or(Formula::False),
            _ => Formula::Or(v),
        }
    }
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Formula {
        match self {
            Formula::True => Formula::False,
            Formula::False => Formula::True,
            Formula::Not(f) => *f,
            f => Formula::Not(Box::new(f)),
        }
    }
    pub fn implies(self, o: Formula) -> Formula {
        Formula::Implies(Box::new(self), Box::new(o))
    }
    pub fn rename(&self, f: &dyn Fn(&str) -> String) -> Formula {
        self.subst(&|n| Some(Term::Var(f(n))))
    }
    pub fn subst(&self, f: &dyn Fn(&str) -> Option<Term>) -> Formula {
        match self {
            Formula::True => Formula::True,
            Formula::False => Formula::False,
            Formula::Lt(a, b) => Formula::Lt(a.subst(f), b.subst(f)),
            Formula::Le(a, b) => Formula::Le(a.subst(f), b.subst(f)),
            Formula::Eq(a, b) => Formula::Eq(a.subst(f), b.subst(f)),
            Formula::And(v) => Formula::And(v.iter().map(|x| x.subst(f)).collect()),
            Formula::Or(v) => Formula::Or(v.iter().map(|x| x.subst(f)).collect()),
            Formula::Not(x) => Formula::Not(Box::new(x.subst(f))),
            Formula::Implies(a, b) => Formula::Implies(Box::new(a.subst(f)), Box::new(b.subst(f))),
        }
    }
    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Formula::True | Formula::False => {}
            Formula::Lt(a, b) | Formula::Le(a, b) | Formula::Eq(a, b) => {
                a.vars(out);
                b.vars(out);
            }
            Formula::And(v) | Formula::Or(v) => v.iter().for_each(|x| x.vars(out)),
            Formula::Not(x) => x.vars(out),
            Formula::Implies(a, b) => {
                a.vars(out);
                b.vars(out);
            }
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Const(v) => write!(f, "{}", v),
            Term::Var(n) => write!(f, "{}", n),
            Term::Add(a, b) => write!(f, "({} + {})", a, b),
            Term::Sub(a, b) => write!(f, "({} - {})", a, b),
            Term::Mul(a, b) => write!(f, "{} * {}", a, b),
            Term::Div(a, b) => write!(f, "{} / {}", a, b),
            Term::Rem(a, b) => write!(f, "{} % {}", a, b),
            Term::Min(a, b) => write!(f, "min({}, {})", a, b),
            Term::Ite(p, a, b) => write!(f, "({} ? {} : {})", p, a, b),
        }
    }
}

impl fmt::Display for Formula {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |f: &mut fmt::Formatter<'_>, v: &[Formula], op: &str| -> fmt::Result {
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    write!(f, " {} ", op)?;
                }
                write!(f, "({})", x)?;
            }
            Ok(())
        };
        match self {
            Formula::True => write!(f, "true"),
            Formula::False => write!(f, "false"),
            Formula::Lt(a, b) => write!(f, "{} < {}", a, b),
            Formula::Le(a, b) => write!(f, "{} <= {}", a, b),
            Formula::Eq(a, b) => write!(f, "{} == {}", a, b),
            Formula::And(v) => join(f, v, "&&"),
            Formula::Or(v) => join(f, v, "||"),
            Formula::Not(x) => write!(f, "!({})", x),
            Formula::Implies(a, b) => write!(f, "({}) => ({})", a, b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluation_follows_smt_lib_integer_semantics() {
        let env = |n: &str| match n {
            "x" => Some(-7),
            "d" => Some(2),
            "z" => Some(0),
            _ => None,
        };
        let (x, d) = (Term::var("x"), Term::var("d"));
        assert_eq!(x.clone().div(d.clone()).eval(&env), Some(-4));
        assert_eq!(x.clone().rem(d.clone()).eval(&env), Some(1));
        assert_eq!(x.clone().div(Term::var("z")).eval(&env), None, "division by zero has no value");
        assert_eq!(Term::var("unknown").eval(&env), None);
        let f = Formula::and(vec![x.clone().lt(d.clone()), Formula::or(vec![Formula::False, d.clone().eq(Term::c(2))])]);
        assert_eq!(f.eval(&env), Some(true));
        assert_eq!(x.lt(d).implies(Formula::False).eval(&env), Some(false));
    }
}
