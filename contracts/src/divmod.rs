//! Folding divisions and remainders by constants before a query.
//!
//! A coverage witness inverts a thread layout, and the solver then meets
//! terms such as `((W * 32 + L) / 32) / 2` with `L` a lane's offset in
//! `[0, 31]`: each division is a fresh integer with two inequalities, and
//! a 128 x 128 tile's output map nests enough of them for Z3 to search
//! for a minute (measured: 40-58 s for one obligation against 1.6 s at
//! 64 x 64). The identities below remove them first; each holds for
//! every integer value of the floor division and non-negative remainder
//! that [`Term`] denotes, given the bounds the caller states for its
//! variables (and it must state only bounds the query's hypotheses
//! imply), so the folded query is equivalent to the original:
//!
//! - `(A c + R) / c = A + R / c` and `(A c + R) % c = R % c` (any `A`);
//! - `R / c = 0` and `R % c = R` when `0 <= R < c`;
//! - `(x / a) / b = x / (a b)`, and `(x % a) % b = x % b` when `b`
//!   divides `a`;
//! - in a sum, a number's digits put back together: `k (x % b) + k b ((x
//!   % a) / b) = k (x % a)` when `b` divides `a`, and `k (x % a) + k a (x
//!   / a) = k x` (a row index the witness rebuilt from its tile, warp and
//!   lane digits is the row again; Z3 4.8 searched one such sum of five
//!   digits past its resource limit).

use crate::term::{Formula, Term};

/// A variable's known bounds, `(lowest, highest)` (`None`: unbounded).
pub type Bounds<'a> = &'a dyn Fn(&str) -> (Option<i64>, Option<i64>);

/// The constant bounds that `hypotheses` state of single variables (`c <=
/// v`, `v < c` and the like, in conjunctions), as [`Bounds`] needs them:
/// each implied by the hypotheses, so a fold under them is equivalent
/// given the hypotheses.
pub fn stated_bounds(hypotheses: &[Formula]) -> std::collections::HashMap<String, (Option<i64>, Option<i64>)> {
    fn walk(f: &Formula, out: &mut std::collections::HashMap<String, (Option<i64>, Option<i64>)>) {
        let mut lower = |v: &str, c: i64| {
            let e = out.entry(v.to_string()).or_insert((None, None));
            e.0 = Some(e.0.map_or(c, |x| x.max(c)));
        };
        match f {
            Formula::And(v) => v.iter().for_each(|x| walk(x, out)),
            Formula::Le(Term::Const(c), Term::Var(v)) => lower(v, *c),
            Formula::Lt(Term::Const(c), Term::Var(v)) => {
                if let Some(c) = c.checked_add(1) {
                    lower(v, c)
                }
            }
            Formula::Le(Term::Var(v), Term::Const(c)) | Formula::Lt(Term::Var(v), Term::Const(c)) => {
                let c = if matches!(f, Formula::Lt(..)) { c.checked_sub(1) } else { Some(*c) };
                if let Some(c) = c {
                    let e = out.entry(v.to_string()).or_insert((None, None));
                    e.1 = Some(e.1.map_or(c, |x| x.min(c)));
                }
            }
            _ => {}
        }
    }
    let mut out = std::collections::HashMap::new();
    for f in hypotheses {
        walk(f, &mut out);
    }
    out
}

/// The formula with its divisions and remainders by positive constants
/// folded (see the module's documentation).
pub fn fold(f: &Formula, bounds: Bounds) -> Formula {
    match f {
        Formula::True | Formula::False => f.clone(),
        Formula::Lt(a, b) => Formula::Lt(term(a, bounds), term(b, bounds)),
        Formula::Le(a, b) => Formula::Le(term(a, bounds), term(b, bounds)),
        Formula::Eq(a, b) => Formula::Eq(term(a, bounds), term(b, bounds)),
        Formula::And(v) => Formula::And(v.iter().map(|x| fold(x, bounds)).collect()),
        Formula::Or(v) => Formula::Or(v.iter().map(|x| fold(x, bounds)).collect()),
        Formula::Not(x) => Formula::Not(Box::new(fold(x, bounds))),
        Formula::Implies(a, b) => Formula::Implies(Box::new(fold(a, bounds)), Box::new(fold(b, bounds))),
    }
}

/// The term with its divisions and remainders folded, bottom-up.
pub fn term(t: &Term, bounds: Bounds) -> Term {
    match t {
        Term::Const(_) | Term::Var(_) => t.clone(),
        // A whole sum at once: its digits are put back together at its
        // top, not again at every partial sum inside it.
        Term::Add(..) | Term::Sub(..) => recompose(sum(t, bounds)),
        Term::Mul(a, b) => term(a, bounds).mul(term(b, bounds)),
        Term::Min(a, b) => term(a, bounds).min(term(b, bounds)),
        Term::Ite(p, a, b) => Term::Ite(Box::new(fold(p, bounds)), Box::new(term(a, bounds)), Box::new(term(b, bounds))),
        Term::Div(x, c) => match term(c, bounds) {
            Term::Const(c) if c > 0 => div(term(x, bounds), c, bounds),
            c => term(x, bounds).div(c),
        },
        Term::Rem(x, c) => match term(c, bounds) {
            Term::Const(c) if c > 0 => rem(term(x, bounds), c, bounds),
            c => term(x, bounds).rem(c),
        },
    }
}

/// A sum's summands folded, the sum itself rebuilt as it was.
fn sum(t: &Term, bounds: Bounds) -> Term {
    match t {
        Term::Add(a, b) => sum(a, bounds).add(sum(b, bounds)),
        Term::Sub(a, b) => sum(a, bounds).sub(sum(b, bounds)),
        other => term(other, bounds),
    }
}

fn div(x: Term, c: i64, bounds: Bounds) -> Term {
    if let Term::Div(inner, a) = &x {
        if let Term::Const(a) = **a {
            if a > 0 {
                if let Some(ac) = a.checked_mul(c) {
                    return div((**inner).clone(), ac, bounds);
                }
            }
        }
    }
    let (whole, rest) = split(&x, c);
    let rest_div = if fits(&rest, c, bounds) { Term::c(0) } else { rest.div(Term::c(c)) };
    whole.add(rest_div)
}

fn rem(x: Term, c: i64, bounds: Bounds) -> Term {
    if let Term::Rem(inner, a) = &x {
        if let Term::Const(a) = **a {
            if a > 0 && a % c == 0 {
                return rem((**inner).clone(), c, bounds);
            }
        }
    }
    let (_, rest) = split(&x, c);
    if fits(&rest, c, bounds) {
        rest
    } else {
        rest.rem(Term::c(c))
    }
}

/// A sum with its digits put back together (see the module's
/// documentation); the sum itself where none pair up.
fn recompose(t: Term) -> Term {
    let mut parts = Vec::new();
    linear(&t, 1, &mut parts);
    let mut merged = false;
    // `(i, j, whole)`: the remainder `parts[i]` and the digit above it
    // `parts[j]` make `whole`, times the remainder's coefficient.
    let pair = |parts: &[(i64, Option<Term>)]| {
        for (i, (k, low)) in parts.iter().enumerate() {
            let Some(Term::Rem(x, b)) = low else { continue };
            let Term::Const(b) = **b else { continue };
            for (j, (kj, high)) in parts.iter().enumerate() {
                let Some(Term::Div(inner, d)) = high else { continue };
                if j == i || **d != Term::Const(b) || k.checked_mul(b) != Some(*kj) {
                    continue;
                }
                let whole = match &**inner {
                    y if y == &**x => Some((**x).clone()),
                    Term::Rem(y, a) if **y == **x && matches!(**a, Term::Const(a) if a > 0 && a % b == 0) => Some((**inner).clone()),
                    _ => None,
                };
                if let Some(w) = whole {
                    return Some((i, j, w));
                }
            }
        }
        None
    };
    while let Some((i, j, whole)) = pair(&parts) {
        let k = parts[i].0;
        let (first, second) = (i.max(j), i.min(j));
        parts.remove(first);
        parts.remove(second);
        linear(&whole, k, &mut parts);
        merged = true;
    }
    if !merged {
        return t;
    }
    parts.into_iter().fold(Term::c(0), |sum, (k, atom)| match atom {
        None => sum.add(Term::c(k)),
        Some(a) if k == 1 => sum.add(a),
        Some(a) => sum.add(Term::c(k).mul(a)),
    })
}

/// `x` as `A c + R`: `(A, R)`, `A` gathering the summands whose constant
/// factor `c` divides (and the constant's multiple of `c`).
fn split(x: &Term, c: i64) -> (Term, Term) {
    let mut parts = Vec::new();
    linear(x, 1, &mut parts);
    let (mut whole, mut rest) = (Term::c(0), Term::c(0));
    for (k, atom) in parts {
        match atom {
            None => {
                let q = k.div_euclid(c);
                whole = whole.add(Term::c(q));
                rest = rest.add(Term::c(k - q * c));
            }
            Some(a) if k % c == 0 => whole = whole.add(Term::c(k / c).mul(a)),
            Some(a) => rest = rest.add(Term::c(k).mul(a)),
        }
    }
    (whole, rest)
}

/// `x` as a sum of `k * atom` (`None`: the constant 1), scaled by `s`.
fn linear(x: &Term, s: i64, out: &mut Vec<(i64, Option<Term>)>) {
    match x {
        Term::Const(v) => match v.checked_mul(s) {
            Some(k) => out.push((k, None)),
            None => out.push((s, Some(x.clone()))),
        },
        Term::Add(a, b) => {
            linear(a, s, out);
            linear(b, s, out);
        }
        Term::Sub(a, b) => {
            linear(a, s, out);
            match s.checked_neg() {
                Some(n) => linear(b, n, out),
                None => out.push((1, Some(Term::c(0).sub((**b).clone()).mul(Term::c(s))))),
            }
        }
        Term::Mul(a, b) => match (&**a, &**b) {
            (Term::Const(k), other) | (other, Term::Const(k)) if s.checked_mul(*k).is_some() => linear(other, s * k, out),
            _ => out.push((s, Some(x.clone()))),
        },
        _ => out.push((s, Some(x.clone()))),
    }
}

/// Is `0 <= r < c` for every value the bounds allow?
fn fits(r: &Term, c: i64, bounds: Bounds) -> bool {
    matches!(interval(r, bounds), (Some(lo), Some(hi)) if lo >= 0 && hi < c)
}

/// Bounds of a term's values (`None`: unbounded that way).
fn interval(t: &Term, bounds: Bounds) -> (Option<i64>, Option<i64>) {
    let both = |a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> Option<i64>| a.zip(b).and_then(|(x, y)| f(x, y));
    match t {
        Term::Const(v) => (Some(*v), Some(*v)),
        Term::Var(n) => bounds(n),
        Term::Add(a, b) => {
            let ((al, ah), (bl, bh)) = (interval(a, bounds), interval(b, bounds));
            (both(al, bl, i64::checked_add), both(ah, bh, i64::checked_add))
        }
        Term::Sub(a, b) => {
            let ((al, ah), (bl, bh)) = (interval(a, bounds), interval(b, bounds));
            (both(al, bh, i64::checked_sub), both(ah, bl, i64::checked_sub))
        }
        Term::Mul(a, b) => match (&**a, &**b) {
            (Term::Const(k), other) | (other, Term::Const(k)) => {
                let (lo, hi) = interval(other, bounds);
                let (lo, hi) = (lo.and_then(|v| v.checked_mul(*k)), hi.and_then(|v| v.checked_mul(*k)));
                if *k >= 0 {
                    (lo, hi)
                } else {
                    (hi, lo)
                }
            }
            _ => (None, None),
        },
        Term::Div(x, c) => match (interval(x, bounds), &**c) {
            ((lo, hi), Term::Const(c)) if *c > 0 => (lo.map(|v| v.div_euclid(*c)), hi.map(|v| v.div_euclid(*c))),
            _ => (None, None),
        },
        Term::Rem(x, c) => match &**c {
            Term::Const(c) if *c > 0 => match interval(x, bounds) {
                (Some(lo), Some(hi)) if lo >= 0 && hi < *c => (Some(lo), Some(hi)),
                _ => (Some(0), Some(c - 1)),
            },
            _ => (None, None),
        },
        Term::Min(a, b) => {
            let ((al, ah), (bl, bh)) = (interval(a, bounds), interval(b, bounds));
            (both(al, bl, |x, y| Some(x.min(y))), match (ah, bh) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            })
        }
        Term::Ite(..) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stated_bounds_are_read_off_conjunctions_of_comparisons_with_constants() {
        let t = Term::var("t");
        let hyps = vec![Formula::and(vec![Term::c(0).le(t.clone()), t.clone().lt(Term::c(384))]), Term::c(256).le(t.clone()), Term::var("k").lt(Term::var("n"))];
        let b = stated_bounds(&hyps);
        assert_eq!(b.get("t"), Some(&(Some(256), Some(383))));
        assert_eq!(b.get("k"), None);
        // Folded under them: (t % 128) is below 128, so a multiple of 72
        // plus it, modulo 72, is the remainder alone only where it fits.
        let bounds = |n: &str| b.get(n).copied().unwrap_or((None, None));
        let x = Term::c(72).mul(Term::var("q")).add(t.clone().rem(Term::c(8)));
        assert_eq!(term(&x.rem(Term::c(72)), &bounds), t.rem(Term::c(8)));
    }

    fn nonneg(_: &str) -> (Option<i64>, Option<i64>) {
        (Some(0), None)
    }

    fn free(_: &str) -> (Option<i64>, Option<i64>) {
        (None, None)
    }

    #[test]
    fn a_row_rebuilt_from_its_digits_is_the_row() {
        // The warpgroup schedule's witness for output row e: tile, warp
        // group, warp, row pair and row digits, in the order it sums them.
        let e = v("e");
        let digits = e.clone().div(Term::c(128)).mul(Term::c(128))
            .add(e.clone().rem(Term::c(128)).div(Term::c(64)).mul(Term::c(64)))
            .add(e.clone().rem(Term::c(64)).div(Term::c(16)).mul(Term::c(16)))
            .add(e.clone().rem(Term::c(16)).div(Term::c(8)).mul(Term::c(8)))
            .add(e.clone().rem(Term::c(8)));
        assert_eq!(term(&digits, &free), e);
        // Scaled, and beside other summands.
        let scaled = digits.clone().mul(Term::c(3)).add(v("y"));
        let folded = term(&scaled, &free);
        assert!(!format!("{}", folded).contains('/') && !format!("{}", folded).contains('%'), "{}", folded);
        // A digit missing, or one of another number, stays a sum.
        let gap = e.clone().div(Term::c(128)).mul(Term::c(128)).add(e.clone().rem(Term::c(64)));
        assert_ne!(term(&gap, &free), e);
        let other = e.clone().div(Term::c(8)).mul(Term::c(8)).add(v("f").rem(Term::c(8)));
        assert_ne!(term(&other, &free), e);
        // Every value agrees with the unfolded sum (floor division, a
        // non-negative remainder), negative ones included.
        for x in -300..300i64 {
            let at = |t: &Term| t.eval(&|n: &str| Some(if n == "e" { x as i128 } else { 5 }));
            assert_eq!(at(&term(&digits, &free)), at(&digits), "e = {}", x);
            assert_eq!(at(&folded), at(&scaled), "e = {}", x);
        }
    }

    fn v(n: &str) -> Term {
        Term::var(n)
    }

    /// Every fold agrees with the original term on a grid of values.
    fn agrees(t: &Term, vars: &[&str]) {
        let folded = term(t, &nonneg);
        for m in 0..300i128 {
            for n in [0i128, 1, 7, 8, 63, 64, 100, 129] {
                let env = |x: &str| match vars.iter().position(|y| *y == x) {
                    Some(0) => Some(m),
                    Some(_) => Some(n),
                    None => None,
                };
                assert_eq!(t.eval(&env), folded.eval(&env), "{} vs {} at {}, {}", t, folded, m, n);
            }
        }
    }

    #[test]
    fn a_lane_offset_below_the_divisor_vanishes() {
        // tid = W * 32 + L with L = (m % 8) * 4 + (n % 8) / 2 < 32.
        let w = v("m").rem(Term::c(128)).div(Term::c(64)).mul(Term::c(2)).add(v("n").rem(Term::c(128)).div(Term::c(64)));
        let l = v("m").rem(Term::c(8)).mul(Term::c(4)).add(v("n").rem(Term::c(8)).div(Term::c(2)));
        let tid = w.clone().mul(Term::c(32)).add(l.clone());
        let warp_row = tid.clone().div(Term::c(32)).div(Term::c(2));
        assert_eq!(term(&warp_row, &nonneg), v("m").rem(Term::c(128)).div(Term::c(64)));
        let lane = tid.rem(Term::c(32));
        let folded = term(&lane, &nonneg).to_string();
        assert!(!folded.contains("32"), "the lane's remainder by 32 is folded away: {}", folded);
        agrees(&warp_row, &["m", "n"]);
        agrees(&lane, &["m", "n"]);
    }

    #[test]
    fn nothing_is_folded_without_bounds() {
        // L may be negative or large: `(W * 32 + L) / 32` must keep L.
        let t = v("w").mul(Term::c(32)).add(v("l")).div(Term::c(32));
        let folded = term(&t, &|_| (None, None));
        assert_eq!(folded, v("w").add(v("l").div(Term::c(32))));
        for w in -5..5i128 {
            for l in -70..70i128 {
                let env = |x: &str| Some(if x == "w" { w } else { l });
                assert_eq!(t.eval(&env), folded.eval(&env));
            }
        }
    }

    #[test]
    fn nested_divisions_and_remainders_agree_with_the_original() {
        let cases = [
            v("m").div(Term::c(4)).div(Term::c(8)),
            v("m").rem(Term::c(64)).rem(Term::c(16)),
            v("m").rem(Term::c(16)).rem(Term::c(64)),
            v("m").mul(Term::c(6)).add(Term::c(-7)).div(Term::c(3)),
            v("m").sub(v("n")).rem(Term::c(8)),
            v("m").mul(Term::c(24)).add(v("n").rem(Term::c(24))).rem(Term::c(24)),
        ];
        for t in &cases {
            agrees(t, &["m", "n"]);
        }
    }
}
