//! Splitting (see the module's doc): the dims that change a bound and
//! the input values a bound depends on are cut into ranges, each analysed
//! on its own, so that a sum's error and the division by its length (or a
//! value and what it scales) stay correlated.

use super::*;

/// The dims (class representatives) whose value changes a bound: lengths
/// of reductions, dims used as values, extents of variables used as values.
pub(super) fn relevant_dims(k: &Kernel) -> Vec<usize> {
    let mut out = Vec::new();
    let mut add = |d: Dim| {
        if let Dim::Sym(id) = d {
            let c = k.dim_class[id];
            if k.dim_value[c].is_none() && !out.contains(&c) {
                out.push(c);
            }
        }
    };
    fn walk(k: &Kernel, e: &TExpr, in_index: bool, add: &mut dyn FnMut(Dim)) {
        match &e.kind {
            TExprKind::Reduce { var, body, .. } => {
                add(k.vars[*var].extent);
                walk(k, body, in_index, add);
            }
            TExprKind::Dim(d) if !in_index => add(Dim::Sym(*d)),
            TExprKind::Var(v) if !in_index => add(k.vars[*v].extent),
            TExprKind::Load { index, .. } => index.iter().for_each(|i| walk(k, i, true, add)),
            TExprKind::Unary(_, a) | TExprKind::Cast(a) => walk(k, a, in_index, add),
            TExprKind::Binary(_, a, b) => {
                walk(k, a, in_index, add);
                walk(k, b, in_index, add);
            }
            TExprKind::Call(_, args) => args.iter().for_each(|a| walk(k, a, in_index, add)),
            TExprKind::Let { value, body, .. } => {
                walk(k, value, in_index, add);
                walk(k, body, in_index, add);
            }
            _ => {}
        }
    }
    for s in &k.stmts {
        walk(k, &s.value, false, &mut add);
    }
    out
}

/// Split `[lo, hi]` into ranges whose ends differ by at most `1/steps` of
/// the lower end (and single values below `steps`).
pub(super) fn split(lo: i64, hi: i64, steps: i64) -> Vec<(i64, i64)> {
    // Saturating: a bound near i64::MAX (`requires E <= 9223372036854775807`,
    // found by the fuzz campaign) once wrapped `b` negative, so every later
    // range was one value wide and the list grew until memory ran out.
    let mut out = Vec::new();
    let mut a = lo.max(0);
    while a <= hi {
        let b = a.saturating_add((a / steps).max(1) - 1).min(hi).max(a);
        out.push((a, b));
        if b == hi {
            break;
        }
        a = b + 1;
    }
    out
}

/// The input values of output `t` that may be split (see [`ValueVar`]),
/// at most two, widest domain first, with their stored domains and names.
pub(super) fn splittable(k: &Kernel, t: TensorId) -> Vec<SplitVar> {
    /// An index in a form comparable across statements: a statement's
    /// free variable by its position.
    fn canon(e: &TExpr, frees: &[VarId]) -> String {
        match &e.kind {
            TExprKind::Var(v) => match frees.iter().position(|f| f == v) {
                Some(j) => format!("${}", j),
                None => format!("v{}", v),
            },
            TExprKind::Const(Const::Int(c)) => c.to_string(),
            TExprKind::Binary(op, a, b) => format!("({}{}{})", canon(a, frees), op.symbol(), canon(b, frees)),
            _ => format!("{:?}", std::mem::discriminant(&e.kind)) + &format!("@{}", e.span.lo),
        }
    }
    struct Reads {
        /// (tensor, canonical indices or None when read at many elements)
        loads: Vec<(TensorId, Option<Vec<String>>)>,
        scalars: Vec<usize>,
        seen: Vec<TensorId>,
    }
    fn walk(k: &Kernel, e: &TExpr, frees: &[VarId], many: bool, r: &mut Reads) {
        match &e.kind {
            TExprKind::Load { tensor, index } => {
                let info = &k.tensors[*tensor];
                let canonical: Vec<String> = index.iter().map(|i| canon(i, frees)).collect();
                match info.role {
                    TensorRole::Input | TensorRole::Inout => r.loads.push((*tensor, if many && !index.is_empty() { None } else { Some(canonical) })),
                    _ => {
                        // Read at this statement's own element: its reads are
                        // this element's too; anywhere else: many elements.
                        let identity = !many && at_own_element(index, frees);
                        if !r.seen.contains(tensor) || !identity {
                            r.seen.push(*tensor);
                            if let Some(si) = k.writer(*tensor) {
                                let st = &k.stmts[si];
                                walk(k, &st.value, &st.vars, !identity, r);
                            }
                        }
                    }
                }
                index.iter().for_each(|i| walk(k, i, frees, many, r));
            }
            TExprKind::Scalar(s) if e.ty.is_float() => r.scalars.push(*s),
            TExprKind::Unary(_, a) | TExprKind::Cast(a) => walk(k, a, frees, many, r),
            TExprKind::Binary(_, a, b) => {
                walk(k, a, frees, many, r);
                walk(k, b, frees, many, r);
            }
            TExprKind::Call(_, args) => args.iter().for_each(|a| walk(k, a, frees, many, r)),
            TExprKind::Let { value, body, .. } => {
                walk(k, value, frees, many, r);
                walk(k, body, frees, many, r);
            }
            TExprKind::Reduce { body, .. } => walk(k, body, frees, true, r),
            _ => {}
        }
    }
    let Some(si) = k.writer(t) else { return Vec::new() };
    let mut r = Reads { loads: Vec::new(), scalars: Vec::new(), seen: vec![t] };
    walk(k, &k.stmts[si].value, &k.stmts[si].vars, false, &mut r);
    let mut out: Vec<(ValueVar, Interval, String)> = Vec::new();
    let mut tensors: Vec<TensorId> = r.loads.iter().map(|l| l.0).collect();
    tensors.sort();
    tensors.dedup();
    for tid in tensors {
        let info = &k.tensors[tid];
        let mine: Vec<&Option<Vec<String>>> = r.loads.iter().filter(|l| l.0 == tid).map(|l| &l.1).collect();
        let one_element = mine.iter().all(|m| m.is_some() && *m == mine[0]);
        // The square side of a relation is narrowed by its bound's pieces,
        // not split itself.
        if !info.dtype.is_float() || !one_element || k.relations.iter().any(|r| r.square == tid) {
            continue;
        }
        if let Some(d) = k.domain.iter().find(|d| d.tensor == Some(tid)).filter(|d| d.hi > d.lo) {
            out.push(((Some(tid), None), stored_domain(d.lo, d.hi, info.dtype), info.name.clone()));
        }
    }
    r.scalars.sort();
    r.scalars.dedup();
    for s in r.scalars {
        if let Some(d) = k.domain.iter().find(|d| d.scalar == Some(s)).filter(|d| d.hi > d.lo) {
            out.push(((None, Some(s)), stored_domain(d.lo, d.hi, k.scalars[s].dtype), k.scalars[s].name.clone()));
        }
    }
    // The bound side of a relation first: its pieces narrow the related
    // input too (see `Walk::domain`), which a box cannot.
    let is_bound = |v: &ValueVar| v.0.is_some_and(|t| k.relations.iter().any(|r| r.bound == t));
    out.sort_by(|a, b| is_bound(&b.0).cmp(&is_bound(&a.0)).then(b.1.width().total_cmp(&a.1.width())));
    out.truncate(2);
    out.into_iter().map(|(var, range, name)| SplitVar { from_zero: is_bound(&var) && range.lo >= 0.0, var, range, name }).collect()
}

/// An input value split into pieces, with its stored domain and name.
/// `from_zero`: cut geometrically down to tiny values, the first piece
/// ending far below the rest (the bound of a relation, whose small values
/// make the related input small).
pub(super) struct SplitVar {
    pub(super) var: ValueVar,
    pub(super) range: Interval,
    pub(super) name: String,
    pub(super) from_zero: bool,
}

/// The pieces of a split: 48 parts of the first value, 12 of the second
/// (their union is each value's whole domain). A positive domain spanning
/// more than a factor of 4 is cut geometrically, so that every piece's ends
/// are within a constant factor (magnitudes stay correlated).
pub(super) fn pieces(vars: &[SplitVar]) -> Vec<Vec<(ValueVar, Interval)>> {
    let cuts = |v: &SplitVar, n: usize| -> Vec<Interval> {
        let r = v.range;
        // From zero: the first piece [lo, bottom], then a factor of 10 each.
        let bottom = if v.from_zero && r.hi > 0.0 && r.lo < r.hi * 10f64.powi(1 - n as i32) { Some(r.hi * 10f64.powi(1 - n as i32)) } else { None };
        let geometric = r.lo > 0.0 && r.hi / r.lo > 4.0;
        let at = |i: usize| -> f64 {
            if i == 0 {
                r.lo
            } else if i == n {
                r.hi
            } else if let Some(b) = bottom {
                b * (r.hi / b).powf((i - 1) as f64 / (n - 1) as f64)
            } else if geometric {
                r.lo * (r.hi / r.lo).powf(i as f64 / n as f64)
            } else {
                r.lo + (r.hi - r.lo) * (i as f64 / n as f64)
            }
        };
        (0..n).map(|i| Interval::new(tokitai_contracts::fp::down(at(i)), tokitai_contracts::fp::up(at(i + 1)))).collect()
    };
    let mut out: Vec<Vec<(ValueVar, Interval)>> = vec![Vec::new()];
    for (i, v) in vars.iter().enumerate() {
        let parts = cuts(v, if i == 0 { 48 } else { 12 });
        out = out.into_iter().flat_map(|p| parts.iter().map(move |c| p.iter().copied().chain([(v.var, *c)]).collect::<Vec<_>>())).collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_split_up_to_the_largest_bound_stays_short() {
        for (lo, hi) in [(1, i64::MAX), (0, i64::MAX - 1), (i64::MAX - 3, i64::MAX)] {
            let parts = split(lo, hi, 8);
            assert!(parts.len() < 400, "{} parts", parts.len());
            assert_eq!((parts[0].0, parts.last().unwrap().1), (lo, hi));
            assert!(parts.windows(2).all(|w| w[1].0 == w[0].1 + 1 && w[0].0 <= w[0].1));
        }
    }

    #[test]
    fn splits_cover_the_range_without_gaps() {
        for (lo, hi) in [(1, 1), (1, 4096), (0, 100), (7, 65536)] {
            let parts = split(lo, hi, 8);
            assert_eq!(parts[0].0, lo.max(0));
            assert_eq!(parts.last().unwrap().1, hi);
            for w in parts.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
            for (a, b) in &parts {
                assert!(b - a <= (a / 8).max(1));
            }
        }
    }
}
