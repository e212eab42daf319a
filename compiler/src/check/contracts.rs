//! `requires`, `ensures`, `domain` and `tolerance` clauses.

use super::expr::{Flex, Scope};
use super::{Entity, KernelChecker};
use crate::diag::Diagnostic;
use crate::syntax::ast::{self, BinOp, ExprKind, UnOp};
use crate::tir::*;
use crate::types::Dtype;

impl<'a> KernelChecker<'a> {
    pub(super) fn check_requires(&mut self, k: &ast::Kernel) -> Vec<Contract> {
        let mut out = Vec::new();
        for clause in &k.clauses {
            let ast::Clause::Requires(preds, _) = clause else { continue };
            for p in preds {
                match p {
                    ast::Pred::Expr(e) => {
                        if let Some(c) = self.check_pred_expr(e, "a `requires` clause") {
                            self.learn_equalities(&c);
                            out.push(Contract::Pred { text: self.src.snippet(e.span).to_string(), expr: c, span: e.span });
                        }
                    }
                    ast::Pred::Range(r) => {
                        if let Some(c) = self.check_range(r, false) {
                            out.push(c);
                        }
                    }
                }
            }
        }
        out
    }

    pub(super) fn check_ensures(&mut self, k: &ast::Kernel) -> Option<Vec<Contract>> {
        let mut out = Vec::new();
        for clause in &k.clauses {
            let ast::Clause::Ensures(preds, _) = clause else { continue };
            for p in preds {
                match p {
                    ast::Pred::Expr(e) => {
                        let c = self.check_pred_expr(e, "an `ensures` clause")?;
                        out.push(Contract::Pred { text: self.src.snippet(e.span).to_string(), expr: c, span: e.span });
                    }
                    ast::Pred::Range(r) => out.push(self.check_range(r, true)?),
                }
            }
        }
        Some(out)
    }

    fn check_pred_expr(&mut self, e: &ast::Expr, what: &str) -> Option<TExpr> {
        let (c, f) = self.infer_expr(e, &mut Scope::contract())?;
        self.coerce(c, f, Dtype::Bool, what, e.span)
    }

    /// `A == B` and `A == 4` among the top-level conjuncts join dim classes.
    fn learn_equalities(&mut self, e: &TExpr) {
        match &e.kind {
            TExprKind::Binary(BinOp::And, a, b) => {
                self.learn_equalities(a);
                self.learn_equalities(b);
            }
            TExprKind::Binary(BinOp::Eq, a, b) => match (&a.kind, &b.kind) {
                (TExprKind::Dim(x), TExprKind::Dim(y)) => {
                    let (rx, ry) = (self.dim_find(*x), self.dim_find(*y));
                    if rx != ry {
                        match (self.dim_value[rx], self.dim_value[ry]) {
                            (Some(u), Some(v)) if u != v => self.contradiction(e, u, v),
                            (vx, vy) => {
                                self.dim_parent[rx] = ry;
                                self.dim_value[ry] = vx.or(vy);
                            }
                        }
                    }
                }
                (TExprKind::Dim(x), TExprKind::Const(Const::Int(v))) | (TExprKind::Const(Const::Int(v)), TExprKind::Dim(x)) => {
                    let r = self.dim_find(*x);
                    match self.dim_value[r] {
                        Some(u) if u != *v => self.contradiction(e, u, *v),
                        _ => self.dim_value[r] = Some(*v),
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn contradiction(&mut self, e: &TExpr, u: i64, v: i64) {
        self.error(
            Diagnostic::error("E0704", "the `requires` clauses contradict each other", e.span)
                .with_label(format!("this makes a dimension both {} and {}", u, v))
                .with_help("no launch could satisfy this contract: remove one of the equalities"),
        );
    }

    /// `x in [lo, hi)` on a tensor (a value contract) or a scalar (a predicate).
    fn check_range(&mut self, r: &ast::RangePred, ensures: bool) -> Option<Contract> {
        let text = self.src.snippet(r.span).to_string();
        let entity = self.names.get(&r.name.name).copied();
        let (ty, tensor) = match entity {
            Some(Entity::Tensor(t)) => {
                let role = self.tensors[t].role;
                let allowed = if ensures { role != TensorRole::Input } else { matches!(role, TensorRole::Input | TensorRole::Inout) };
                if !allowed {
                    self.error(
                        Diagnostic::error("E0705", format!("`{}` cannot carry this value contract", r.name.name), r.name.span)
                            .with_label(if ensures { "an input: nothing to ensure" } else { "an output: its values are not known at launch" })
                            .with_help(if ensures { "`ensures` states facts about outputs" } else { "`requires` states facts about inputs; use `ensures` for outputs" }),
                    );
                    return None;
                }
                (self.tensors[t].dtype, Some(t))
            }
            Some(Entity::Scalar(s)) => (self.scalars[s].dtype, None),
            Some(Entity::Dim(_)) => (Dtype::I32, None),
            None => {
                self.error(
                    Diagnostic::error("E0201", format!("cannot find `{}` in this kernel", r.name.name), r.name.span)
                        .with_label("not a parameter, output or dim")
                        .with_help("value ranges apply to parameters and outputs"),
                );
                return None;
            }
        };
        if ty == Dtype::Bool {
            self.error(Diagnostic::error("E0304", "a bool has no range", r.span).with_label("bool").with_help("state the condition directly"));
            return None;
        }
        let mut scope = Scope::contract();
        let lo = self.infer_expr(&r.lo, &mut scope);
        let hi = self.infer_expr(&r.hi, &mut scope);
        let (lo, lf) = lo?;
        let (hi, hf) = hi?;
        let lo = self.coerce_bound(lo, lf, ty, &r.lo)?;
        let hi = self.coerce_bound(hi, hf, ty, &r.hi)?;
        let range = ValueRange { lo, lo_closed: r.lo_closed, hi, hi_closed: r.hi_closed, text: text.clone(), span: r.span };
        match tensor {
            Some(t) => {
                if !ensures {
                    if self.tensors[t].value_range.is_some() {
                        self.error(
                            Diagnostic::error("E0706", format!("`{}` has two value contracts", r.name.name), r.span)
                                .with_label("second range")
                                .with_help("state one range per tensor"),
                        );
                        return None;
                    }
                    self.tensors[t].value_range = Some(range.clone());
                }
                Some(Contract::Range { tensor: t, range })
            }
            None => {
                // A scalar or dim range is an ordinary predicate.
                let (x, _) = self.infer_expr(&ast::Expr { kind: ExprKind::Name(r.name.clone()), span: r.name.span }, &mut scope)?;
                let cmp = |op, a: TExpr, b: TExpr| TExpr { kind: TExprKind::Binary(op, Box::new(a), Box::new(b)), ty: Dtype::Bool, span: r.span };
                let lower = cmp(if r.lo_closed { BinOp::Le } else { BinOp::Lt }, range.lo, x.clone());
                let upper = cmp(if r.hi_closed { BinOp::Le } else { BinOp::Lt }, x, range.hi);
                Some(Contract::Pred { expr: cmp(BinOp::And, lower, upper), text, span: r.span })
            }
        }
    }

    fn coerce_bound(&mut self, e: TExpr, f: Flex, ty: Dtype, ast: &ast::Expr) -> Option<TExpr> {
        // Bounds may be dims (i32) for any integer tensor.
        if f == Flex::No && e.ty.is_int() && ty.is_int() {
            return Some(e);
        }
        self.coerce(e, f, ty, "the bound", ast.span)
    }

    pub(super) fn check_domain(&mut self, k: &ast::Kernel) -> Option<Vec<DomainRange>> {
        let mut out: Vec<DomainRange> = Vec::new();
        for clause in &k.clauses {
            let ast::Clause::Domain(entries, _) = clause else { continue };
            for r in entries.iter().filter_map(|e| match e {
                ast::Pred::Range(r) => Some(r),
                ast::Pred::Expr(_) => None,
            }) {
                let (tensor, scalar, ty) = match self.names.get(&r.name.name).copied() {
                    Some(Entity::Tensor(t)) if matches!(self.tensors[t].role, TensorRole::Input | TensorRole::Inout) => (Some(t), None, self.tensors[t].dtype),
                    Some(Entity::Scalar(s)) => (None, Some(s), self.scalars[s].dtype),
                    Some(Entity::Tensor(_)) => {
                        self.error(
                            Diagnostic::error("E0705", format!("`{}` is an output: a domain describes inputs", r.name.name), r.name.span)
                                .with_label("an output")
                                .with_help("bound inputs with `domain`; outputs get `tolerance` and `ensures`"),
                        );
                        return None;
                    }
                    _ => {
                        self.error(
                            Diagnostic::error("E0201", format!("cannot find input `{}` in this kernel", r.name.name), r.name.span)
                                .with_label("not an input tensor or scalar")
                                .with_help("a domain bounds the values of an input"),
                        );
                        return None;
                    }
                };
                if ty == Dtype::Bool {
                    self.error(Diagnostic::error("E0304", "a bool has no domain", r.span).with_label("bool").with_help("remove it from the domain"));
                    return None;
                }
                let (lo, hi, magnitude) = match (const_value(&r.lo), const_value(&r.hi)) {
                    (Some(lo), Some(hi)) => (lo, hi, None),
                    _ => match self.magnitude_range(r) {
                        Some((lo, name)) => (lo, 1.0, Some(name)),
                        None => {
                            self.error(
                                Diagnostic::error("E0707", "domain bounds must be numbers, or a magnitude: `[-X, X]` or `[0, X]`", r.span)
                                    .with_label("not a constant or a magnitude")
                                    .with_help("write literal bounds, e.g. `x in [-8.0, 8.0]`, or `x in [-X, X]` with a new name `X` for the launch's largest |x|"),
                            );
                            return None;
                        }
                    },
                };
                if let Some(name) = &magnitude {
                    if out.iter().any(|d| d.magnitude.as_deref() == Some(name.as_str())) {
                        self.error(
                            Diagnostic::error("E0709", format!("magnitude `{}` bounds two inputs", name), r.span)
                                .with_label("second use")
                                .with_help("give each input its own magnitude: the runtime measures each input's largest |x| on its own"),
                        );
                        return None;
                    }
                }
                if lo.is_nan() || hi.is_nan() || lo > hi {
                    self.error(
                        Diagnostic::error("E0707", format!("empty domain: {} is above {}", lo, hi), r.span)
                            .with_label("no value lies in this range")
                            .with_help("write the lower bound first"),
                    );
                    return None;
                }
                if out.iter().any(|d| d.tensor == tensor && d.scalar == scalar) {
                    self.error(
                        Diagnostic::error("E0706", format!("`{}` has two domains", r.name.name), r.span)
                            .with_label("second domain")
                            .with_help("state one range per input"),
                    );
                    return None;
                }
                out.push(DomainRange { tensor, scalar, lo, hi, magnitude, text: self.src.snippet(r.span).to_string(), span: r.span });
            }
        }
        Some(out)
    }

    /// The relations of the `domain` clauses, `t * t <= c * s` (or
    /// `t * t <= s`): for every element, `t` squared is at most `c` times
    /// `s` at the same element (`s` may be rank 0, one value for all).
    /// Both are float inputs with constant ranges in `domain`.
    pub(super) fn check_relations(&mut self, k: &ast::Kernel, domain: &[DomainRange]) -> Option<Vec<Relation>> {
        let mut out = Vec::new();
        for clause in &k.clauses {
            let ast::Clause::Domain(entries, _) = clause else { continue };
            for e in entries {
                let ast::Pred::Expr(e) = e else { continue };
                out.push(self.check_relation(e, domain)?);
            }
        }
        Some(out)
    }

    fn check_relation(&mut self, e: &ast::Expr, domain: &[DomainRange]) -> Option<Relation> {
        let shape_error = |this: &mut Self| {
            this.error(
                Diagnostic::error("E0710", "a domain relation must read `t * t <= c * s` or `t * t <= s`", e.span)
                    .with_label("not a relation between two inputs")
                    .with_help("bound an input's square by another input at the same element, e.g. `m * m <= 64.0 * v`; write ranges as `x in [lo, hi]`"),
            );
            None
        };
        let ExprKind::Binary(BinOp::Le, lhs, rhs) = &e.kind else { return shape_error(self) };
        let ExprKind::Binary(BinOp::Mul, a, b) = &lhs.kind else { return shape_error(self) };
        let (ExprKind::Name(a), ExprKind::Name(b)) = (&a.kind, &b.kind) else { return shape_error(self) };
        if a.name != b.name {
            return shape_error(self);
        }
        let (factor, bound) = match &rhs.kind {
            ExprKind::Name(s) => (1.0, s),
            ExprKind::Binary(BinOp::Mul, c, s) => match (const_value(c), &s.kind) {
                (Some(c), ExprKind::Name(s)) => (c, s),
                _ => return shape_error(self),
            },
            _ => return shape_error(self),
        };
        if !(factor.is_finite() && factor > 0.0) {
            self.error(Diagnostic::error("E0710", format!("the factor of a domain relation must be positive and finite, not {}", factor), rhs.span).with_label("this factor"));
            return None;
        }
        let tensor = |this: &mut Self, n: &ast::Ident| -> Option<TensorId> {
            let found = match this.names.get(&n.name).copied() {
                Some(Entity::Tensor(t)) if matches!(this.tensors[t].role, TensorRole::Input | TensorRole::Inout) && this.tensors[t].dtype.is_float() => Some(t),
                _ => None,
            };
            let ranged = found.filter(|t| domain.iter().any(|d| d.tensor == Some(*t) && d.magnitude.is_none()));
            if ranged.is_none() {
                this.error(
                    Diagnostic::error("E0710", format!("`{}` is not a float input tensor with a constant domain range", n.name), n.span)
                        .with_label("a relation relates two float input tensors")
                        .with_help(format!("declare `{} in [lo, hi]` in the same domain", n.name)),
                );
            }
            ranged
        };
        let square = tensor(self, a)?;
        let bound_t = tensor(self, bound)?;
        let (ss, bs) = (&self.tensors[square].shape, &self.tensors[bound_t].shape);
        if !(bs.is_empty() || ss == bs) {
            self.error(
                Diagnostic::error("E0710", format!("`{}` and `{}` have different shapes", a.name, bound.name), e.span)
                    .with_label("related element by element")
                    .with_help("relate tensors of one shape, or bound by a rank-0 tensor"),
            );
            return None;
        }
        Some(Relation { square, bound: bound_t, factor, text: self.src.snippet(e.span).to_string(), span: e.span })
    }

    /// `[-X, X]` or `[0, X]` with `X` a name that is not a dim, tensor or
    /// scalar of the kernel: the lower end as a multiple of `X`, and `X`.
    fn magnitude_range(&self, r: &ast::RangePred) -> Option<(f64, String)> {
        let ExprKind::Name(hi) = &r.hi.kind else { return None };
        if self.names.contains_key(&hi.name) || !r.lo_closed || !r.hi_closed {
            return None;
        }
        match &r.lo.kind {
            ExprKind::Unary(UnOp::Neg, a) if matches!(&a.kind, ExprKind::Name(n) if n.name == hi.name) => Some((-1.0, hi.name.clone())),
            _ if const_value(&r.lo) == Some(0.0) => Some((0.0, hi.name.clone())),
            _ => None,
        }
    }

    /// An `abs` tolerance: a constant, or a sum of terms `c * s1 * s2 ...`
    /// over dims and the magnitudes named in `domain`, every coefficient
    /// a non-negative constant. The constant part and the other terms.
    fn tolerance_formula(&mut self, e: &ast::Expr, domain: &[DomainRange]) -> Option<(f64, Vec<FormulaTerm>)> {
        let mut constant = 0.0;
        let mut terms = Vec::new();
        let mut stack = vec![e];
        while let Some(x) = stack.pop() {
            if let ExprKind::Binary(BinOp::Add, a, b) = &x.kind {
                stack.push(a);
                stack.push(b);
                continue;
            }
            let mut coef = 1.0;
            let mut syms = Vec::new();
            let mut factors = vec![x];
            while let Some(f) = factors.pop() {
                if let Some(c) = const_value(f) {
                    coef *= c;
                    continue;
                }
                match &f.kind {
                    ExprKind::Binary(BinOp::Mul, a, b) => {
                        factors.push(a);
                        factors.push(b);
                    }
                    ExprKind::Name(n) => match (self.names.get(&n.name).copied(), domain.iter().position(|d| d.magnitude.as_deref() == Some(n.name.as_str()))) {
                        (Some(Entity::Dim(d)), _) => syms.push(Sym::Dim(d)),
                        (_, Some(m)) => syms.push(Sym::Magnitude(m)),
                        _ => {
                            self.error(
                                Diagnostic::error("E0708", format!("`{}` is neither a dim nor a magnitude of this kernel", n.name), f.span)
                                    .with_label("unknown in a tolerance")
                                    .with_help("a tolerance formula multiplies constants, dims and the magnitudes its `domain` names (`x in [-X, X]`)"),
                            );
                            return None;
                        }
                    },
                    _ => {
                        self.error(
                            Diagnostic::error("E0708", "a tolerance formula is a sum of products of constants, dims and magnitudes", f.span)
                                .with_label("not a constant, dim or magnitude")
                                .with_help("write it as e.g. `abs 2e-7 * K * X * W + 1e-6`"),
                        );
                        return None;
                    }
                }
            }
            self.tolerance_value(coef, "tolerance coefficient", x.span)?;
            if syms.is_empty() {
                constant += coef;
            } else {
                syms.sort();
                terms.push(FormulaTerm { coef, syms });
            }
        }
        terms.reverse();
        Some((constant, terms))
    }

    /// A tolerance (or one coefficient of its formula) must be a finite
    /// number >= 0: it bounds |kernel - exact|.
    fn tolerance_value(&mut self, v: f64, what: &str, span: crate::span::Span) -> Option<f64> {
        if v.is_nan() || v < 0.0 || v.is_infinite() {
            self.error(
                Diagnostic::error("E0708", format!("{} {} is not a finite non-negative number", what, v), span)
                    .with_label("invalid bound")
                    .with_help("tolerances are bounds on |kernel - exact|: use a value >= 0"),
            );
            return None;
        }
        Some(v)
    }

    pub(super) fn check_tolerance(&mut self, k: &ast::Kernel, domain: &[DomainRange]) -> Option<Vec<Tolerance>> {
        let mut out: Vec<Tolerance> = Vec::new();
        let mut seen: Vec<(TensorId, String)> = Vec::new();
        for clause in &k.clauses {
            let ast::Clause::Tolerance(entries, _) = clause else { continue };
            let mut current: Option<TensorId> = None;
            for e in entries {
                if let Some(target) = &e.target {
                    let t = match self.names.get(&target.name).copied() {
                        Some(Entity::Tensor(t)) if matches!(self.tensors[t].role, TensorRole::Output | TensorRole::Inout) => t,
                        _ => {
                            self.error(
                                Diagnostic::error("E0708", format!("`{}` is not an output of this kernel", target.name), target.span)
                                    .with_label("tolerances apply to outputs")
                                    .with_help("name an output or an inout tensor"),
                            );
                            return None;
                        }
                    };
                    if !self.tensors[t].dtype.is_float() {
                        self.error(
                            Diagnostic::error("E0708", format!("`{}` is {}: integer results are exact", target.name, self.tensors[t].dtype), target.span)
                                .with_label("not a float output")
                                .with_help("remove this tolerance; integer outputs are compared exactly"),
                        );
                        return None;
                    }
                    current = Some(t);
                    if !out.iter().any(|x| x.tensor == t) {
                        out.push(Tolerance { tensor: t, abs: 0.0, abs_terms: Vec::new(), rel: 0.0, span: e.span });
                    }
                }
                let Some(t) = current else {
                    self.error(
                        Diagnostic::error("E0708", "tolerance entry without an output", e.span)
                            .with_label("which output?")
                            .with_help("name the output first: `tolerance y: abs 1e-3, rel 1e-3`"),
                    );
                    return None;
                };
                let kind = e.kind.name.as_str();
                if kind != "abs" && kind != "rel" {
                    self.error(
                        Diagnostic::error("E0708", format!("unknown tolerance kind `{}`", kind), e.kind.span)
                            .with_label("expected `abs` or `rel`")
                            .with_help("`abs A, rel R` means |kernel - exact| <= A + R * |exact|"),
                    );
                    return None;
                }
                if seen.contains(&(t, kind.to_string())) {
                    self.error(
                        Diagnostic::error("E0706", format!("`{}` tolerance of `{}` is given twice", kind, self.tensors[t].name), e.span)
                            .with_label("repeated")
                            .with_help("give each of `abs` and `rel` once per output"),
                    );
                    return None;
                }
                seen.push((t, kind.to_string()));
                let (value, terms) = if kind == "abs" {
                    self.tolerance_formula(&e.value, domain)?
                } else {
                    match const_value(&e.value) {
                        Some(v) => (v, Vec::new()),
                        None => {
                            self.error(
                                Diagnostic::error("E0708", "a `rel` tolerance is a number", e.value.span)
                                    .with_label("not a constant")
                                    .with_help("only `abs` may scale with dims and magnitudes: `rel` is already relative to |exact|"),
                            );
                            return None;
                        }
                    }
                };
                self.tolerance_value(value, "tolerance", e.span)?;
                let entry = out.iter_mut().find(|x| x.tensor == t)?;
                if kind == "abs" {
                    entry.abs = value;
                    entry.abs_terms = terms;
                } else {
                    entry.rel = value;
                }
            }
        }
        Some(out)
    }

    pub(super) fn lint_contracts(&mut self, k: &ast::Kernel, tol: &Option<Vec<Tolerance>>, dom: &Option<Vec<DomainRange>>) {
        let tol = tol.as_deref().unwrap_or_default();
        let dom = dom.as_deref().unwrap_or_default();
        for (i, t) in self.tensors.clone().iter().enumerate() {
            if matches!(t.role, TensorRole::Output | TensorRole::Inout) && t.dtype.is_float() && !tol.iter().any(|x| x.tensor == i) {
                self.error(
                    Diagnostic::warning("W0701", format!("float output `{}` has no tolerance", t.name), t.span)
                        .with_label("its error against the exact result is unchecked")
                        .with_help(format!("state it: `tolerance {}: abs 1e-3, rel 1e-3`", t.name)),
                );
            }
            if !tol.is_empty() && matches!(t.role, TensorRole::Input | TensorRole::Inout) && t.dtype.is_float() && !dom.iter().any(|d| d.tensor == Some(i)) {
                self.error(
                    Diagnostic::warning("W0702", format!("float input `{}` has no domain", t.name), t.span)
                        .with_label("tolerances are only meaningful over a bounded domain")
                        .with_help(format!("bound it: `domain {} in [-1.0, 1.0]`", t.name)),
                );
            }
        }
        let _ = k;
    }
}

/// Evaluate a constant numeric expression (literals, `inf`, + - * /).
pub(crate) fn const_value(e: &ast::Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v as f64),
        ExprKind::Float(v) => Some(*v),
        ExprKind::Name(n) if n.name == "inf" => Some(f64::INFINITY),
        ExprKind::Unary(UnOp::Neg, a) => const_value(a).map(|v| -v),
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (const_value(a)?, const_value(b)?);
            match op {
                BinOp::Add => Some(a + b),
                BinOp::Sub => Some(a - b),
                BinOp::Mul => Some(a * b),
                BinOp::Div => Some(a / b),
                _ => None,
            }
        }
        _ => None,
    }
}
