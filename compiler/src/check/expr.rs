//! Expression checking: name resolution and dtype inference.
//!
//! Literals are flexible until they meet a typed operand (`0.5 * v` is f32
//! when `v` is). Implicit conversions only widen (f16 -> f32 -> f64, i32 ->
//! i64); narrowing is written as a cast; integers and floats never mix
//! without a cast.

use super::{Entity, KernelChecker, VarUse};
use crate::diag::Diagnostic;
use crate::span::Span;
use crate::syntax::ast::{self, BinOp, ExprKind, RedOp, UnOp};
use crate::tir::*;
use crate::types::Dtype;

/// Is an inferred expression a literal whose type is not yet fixed?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flex {
    No,
    Int,
    Float,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctx {
    /// A kernel statement: tensors, scalars, dims, index variables.
    Statement,
    /// `requires`/`ensures`/ranges: dims and scalars only.
    Contract,
    /// A `fn` helper body: its parameters only.
    FnBody,
}

#[derive(Clone, Debug)]
pub(crate) struct Scope {
    pub vars: Vec<(String, VarId)>,
    pub locals: Vec<(String, LocalId)>,
    pub ctx: Ctx,
}

impl Scope {
    pub fn statement(vars: Vec<(String, VarId)>) -> Scope {
        Scope { vars, locals: Vec::new(), ctx: Ctx::Statement }
    }
    pub fn contract() -> Scope {
        Scope { vars: Vec::new(), locals: Vec::new(), ctx: Ctx::Contract }
    }
    fn var(&self, name: &str) -> Option<VarId> {
        self.vars.iter().rev().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
    fn local(&self, name: &str) -> Option<LocalId> {
        self.locals.iter().rev().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

pub(crate) type Inferred = Option<(TExpr, Flex)>;

fn mk(kind: TExprKind, ty: Dtype, span: Span) -> TExpr {
    TExpr { kind, ty, span }
}

/// Levenshtein distance, for "did you mean" suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

impl<'a> KernelChecker<'a> {
    fn suggest(&self, name: &str, scope: &Scope) -> Option<String> {
        let mut candidates: Vec<String> = scope.vars.iter().map(|(n, _)| n.clone()).collect();
        candidates.extend(scope.locals.iter().map(|(n, _)| n.clone()));
        if scope.ctx != Ctx::FnBody {
            candidates.extend(self.names.keys().cloned());
        }
        candidates.extend(Builtin::NAMES.iter().map(|s| s.to_string()));
        candidates.extend(self.fns.keys().cloned());
        candidates
            .into_iter()
            .filter(|c| c != name)
            .map(|c| (edit_distance(name, &c), c))
            .filter(|(d, c)| *d <= 2.max(c.len() / 3) && *d < c.len().max(name.len()))
            .min()
            .map(|(_, c)| c)
    }

    fn unknown_name(&mut self, name: &ast::Ident, scope: &Scope, what: &str) {
        let mut d = Diagnostic::error("E0201", format!("cannot find {} `{}` in this {}", what, name.name, match scope.ctx {
            Ctx::FnBody => "fn",
            _ => "kernel",
        }), name.span)
        .with_label("not found");
        d = match self.suggest(&name.name, scope) {
            Some(s) => d.with_help(format!("did you mean `{}`?", s)),
            None if scope.ctx == Ctx::FnBody => d.with_help("a `fn` helper sees only its own parameters"),
            None => d.with_help("names come from parameters, outputs, dims, `let`, and earlier statements"),
        };
        self.error(d);
    }

    /// Fix a flexible literal to its default type (i32, f32).
    pub fn finalize(&mut self, e: TExpr, flex: Flex) -> TExpr {
        match flex {
            Flex::No => e,
            Flex::Int => retype(e, Dtype::I32),
            Flex::Float => retype(e, Dtype::F32),
        }
    }

    /// Convert to `to`: literals adopt it, known types may only widen.
    pub fn coerce(&mut self, e: TExpr, flex: Flex, to: Dtype, what: &str, span: Span) -> Option<TExpr> {
        match flex {
            Flex::Int if to.is_int() => Some(retype(e, to)),
            Flex::Float if to.is_float() => Some(retype(e, to)),
            Flex::Int if to.is_float() => {
                self.error(
                    Diagnostic::error("E0301", format!("integer literal used where {} is {}", what, to), span)
                        .with_label(format!("this is an integer, {} is {}", what, to))
                        .with_help("write it as a float, e.g. `0.0`, or cast: `f32(...)`"),
                );
                None
            }
            Flex::Float | Flex::Int => {
                self.error(
                    Diagnostic::error("E0301", format!("{} literal used where {} is {}", if flex == Flex::Float { "float" } else { "integer" }, what, to), span)
                        .with_label(format!("{} is {}", what, to))
                        .with_help(format!("cast it explicitly: `{}(...)`", to)),
                );
                None
            }
            Flex::No if e.ty == to => Some(e),
            Flex::No if e.ty.widens_to(to) => {
                let span = e.span;
                Some(mk(TExprKind::Cast(Box::new(e)), to, span))
            }
            Flex::No => {
                let (code, msg, help) = if e.ty.is_float() == to.is_float() && e.ty != Dtype::Bool && to != Dtype::Bool {
                    (
                        "E0302",
                        format!("{} is {} but the value is {}: narrowing must be written", what, to, e.ty),
                        format!("convert explicitly: `{}(...)`", to),
                    )
                } else {
                    (
                        "E0301",
                        format!("{} is {} but the value is {}: ints, floats and bools never mix silently", what, to, e.ty),
                        format!("convert explicitly: `{}(...)`", to),
                    )
                };
                self.error(Diagnostic::error(code, msg, span).with_label(format!("this is {}", e.ty)).with_help(help));
                None
            }
        }
    }

    /// Bring two operands to one type.
    fn unify(&mut self, a: (TExpr, Flex), b: (TExpr, Flex), op_span: Span, op: &str) -> Option<(TExpr, TExpr, Flex)> {
        let (ea, fa) = a;
        let (eb, fb) = b;
        match (fa, fb) {
            (Flex::No, Flex::No) => {
                if ea.ty == eb.ty {
                    return Some((ea, eb, Flex::No));
                }
                match Dtype::join(ea.ty, eb.ty) {
                    Some(t) if ea.ty != Dtype::Bool && eb.ty != Dtype::Bool => {
                        let ea = self.coerce(ea, Flex::No, t, "the operand", op_span)?;
                        let eb = self.coerce(eb, Flex::No, t, "the operand", op_span)?;
                        Some((ea, eb, Flex::No))
                    }
                    _ => {
                        self.error(
                            Diagnostic::error("E0301", format!("`{}` between {} and {}: ints, floats and bools never mix silently", op, ea.ty, eb.ty), op_span)
                                .with_label(format!("{} {} {}", ea.ty, op, eb.ty))
                                .with_secondary(ea.span, format!("this is {}", ea.ty))
                                .with_secondary(eb.span, format!("this is {}", eb.ty))
                                .with_help(format!("cast one side, e.g. `{}(...)`", if ea.ty.is_float() { ea.ty } else { eb.ty })),
                        );
                        None
                    }
                }
            }
            (Flex::No, f) => {
                let ty = ea.ty;
                let eb = self.coerce(eb, f, ty, "the other operand", op_span)?;
                Some((ea, eb, Flex::No))
            }
            (f, Flex::No) => {
                let ty = eb.ty;
                let ea = self.coerce(ea, f, ty, "the other operand", op_span)?;
                Some((ea, eb, Flex::No))
            }
            (fa, fb) if fa == fb => Some((ea, eb, fa)),
            _ => {
                self.error(
                    Diagnostic::error("E0301", format!("`{}` between an integer and a float literal", op), op_span)
                        .with_label("mixed literals")
                        .with_help("write both as floats, e.g. `2.0`"),
                );
                None
            }
        }
    }

    pub fn infer_expr(&mut self, e: &ast::Expr, scope: &mut Scope) -> Inferred {
        let span = e.span;
        match &e.kind {
            ExprKind::Int(v) => Some((mk(TExprKind::Const(Const::Int(*v)), Dtype::I32, span), Flex::Int)),
            ExprKind::Float(v) => Some((mk(TExprKind::Const(Const::Float(*v)), Dtype::F32, span), Flex::Float)),
            ExprKind::Bool(b) => Some((mk(TExprKind::Const(Const::Bool(*b)), Dtype::Bool, span), Flex::No)),
            ExprKind::Name(id) => self.infer_name(id, scope),
            ExprKind::Index(id, idx) => self.infer_index(id, idx, span, scope),
            ExprKind::Call(id, args) => self.infer_call(id, args, span, scope),
            ExprKind::Cast(to, inner) => {
                let (x, f) = self.infer_expr(inner, scope)?;
                let x = self.finalize(x, f);
                if *to == Dtype::Bool && x.ty != Dtype::Bool {
                    self.error(
                        Diagnostic::error("E0303", format!("cannot convert {} to bool", x.ty), span)
                            .with_label("no conversion to bool")
                            .with_help("compare instead, e.g. `x != 0`"),
                    );
                    return None;
                }
                Some((mk(TExprKind::Cast(Box::new(x)), *to, span), Flex::No))
            }
            ExprKind::Unary(op, inner) => {
                let (x, f) = self.infer_expr(inner, scope)?;
                match op {
                    UnOp::Neg if x.ty != Dtype::Bool => {
                        let ty = x.ty;
                        Some((mk(TExprKind::Unary(UnOp::Neg, Box::new(x)), ty, span), f))
                    }
                    UnOp::Not if x.ty == Dtype::Bool => Some((mk(TExprKind::Unary(UnOp::Not, Box::new(x)), Dtype::Bool, span), Flex::No)),
                    _ => {
                        let (want, help) = match op {
                            UnOp::Neg => ("a number", "negation applies to numbers; for bools use `!`"),
                            UnOp::Not => ("a bool", "`!` applies to bools; for numbers use `-` or compare"),
                        };
                        self.error(
                            Diagnostic::error("E0304", format!("expected {}, found {}", want, x.ty), inner.span)
                                .with_label(format!("this is {}", x.ty))
                                .with_help(help),
                        );
                        None
                    }
                }
            }
            ExprKind::Binary(op, a, b) => self.infer_binary(*op, a, b, span, scope),
            ExprKind::Reduce { op, var, range, body } => self.infer_reduce(*op, var, range, body, span, scope),
            ExprKind::Block(lets, result) => {
                let saved = scope.locals.len();
                let mut bindings = Vec::new();
                for l in lets {
                    if self.names.contains_key(&l.name.name) && scope.ctx != Ctx::FnBody || scope.var(&l.name.name).is_some() {
                        self.error(
                            Diagnostic::error("E0204", format!("`let {}` shadows a kernel name", l.name.name), l.name.span)
                                .with_label("shadows a parameter, dim or index")
                                .with_help("choose a distinct name for the local"),
                        );
                        scope.locals.truncate(saved);
                        return None;
                    }
                    let (v, f) = self.infer_expr(&l.value, scope)?;
                    let v = match l.ty {
                        Some(t) => self.coerce(v, f, t, &format!("`{}`", l.name.name), l.value.span)?,
                        None => self.finalize(v, f),
                    };
                    let id = self.locals.len();
                    self.locals.push(LocalInfo { name: l.name.name.clone(), dtype: v.ty });
                    scope.locals.push((l.name.name.clone(), id));
                    bindings.push((id, v));
                }
                let r = self.infer_expr(result, scope);
                scope.locals.truncate(saved);
                let (mut body, flex) = r?;
                for (id, v) in bindings.into_iter().rev() {
                    let ty = body.ty;
                    body = mk(TExprKind::Let { local: id, value: Box::new(v), body: Box::new(body) }, ty, span);
                }
                Some((body, flex))
            }
        }
    }

    fn infer_name(&mut self, id: &ast::Ident, scope: &mut Scope) -> Inferred {
        let span = id.span;
        if let Some(l) = scope.local(&id.name) {
            return Some((mk(TExprKind::Local(l), self.locals[l].dtype, span), Flex::No));
        }
        if let Some(v) = scope.var(&id.name) {
            return Some((mk(TExprKind::Var(v), Dtype::I32, span), Flex::No));
        }
        if scope.ctx != Ctx::FnBody {
            match self.names.get(&id.name).copied() {
                Some(Entity::Scalar(s)) => return Some((mk(TExprKind::Scalar(s), self.scalars[s].dtype, span), Flex::No)),
                Some(Entity::Dim(d)) => return Some((mk(TExprKind::Dim(d), Dtype::I32, span), Flex::No)),
                Some(Entity::Tensor(t)) => {
                    if scope.ctx == Ctx::Contract {
                        self.error(
                            Diagnostic::error("E0206", format!("tensor `{}` cannot appear in this contract", id.name), span)
                                .with_label("a tensor")
                                .with_help(format!("contracts on values are ranges: `{} in [lo, hi)`", id.name)),
                        );
                        return None;
                    }
                    let rank = self.tensors[t].shape.len();
                    if rank != 0 {
                        self.error(
                            Diagnostic::error("E0405", format!("`{}` is a tensor of rank {}: index it", id.name, rank), span)
                                .with_label("used as a scalar")
                                .with_help(format!("write `{}[...]` with {} index{}", id.name, rank, if rank == 1 { "" } else { "es" })),
                        );
                        return None;
                    }
                    let ty = self.tensors[t].dtype;
                    return Some((mk(TExprKind::Load { tensor: t, index: vec![] }, ty, span), Flex::No));
                }
                None => {}
            }
        }
        if id.name == "inf" {
            return Some((mk(TExprKind::Const(Const::Float(f64::INFINITY)), Dtype::F32, span), Flex::Float));
        }
        self.unknown_name(id, scope, "value");
        None
    }

    fn infer_index(&mut self, id: &ast::Ident, idx: &[ast::Expr], span: Span, scope: &mut Scope) -> Inferred {
        let t = match (scope.ctx, self.names.get(&id.name).copied()) {
            (Ctx::Statement, Some(Entity::Tensor(t))) => t,
            (Ctx::Statement, Some(Entity::Scalar(_))) | (Ctx::Statement, Some(Entity::Dim(_))) => {
                self.error(
                    Diagnostic::error("E0206", format!("`{}` is not a tensor and cannot be indexed", id.name), id.span)
                        .with_label("indexed here")
                        .with_help(format!("use it directly: `{}`", id.name)),
                );
                return None;
            }
            (Ctx::Statement, None) => {
                self.unknown_name(id, scope, "tensor");
                return None;
            }
            _ => {
                self.error(
                    Diagnostic::error("E0206", format!("tensor access `{}[...]` is not allowed here", id.name), span)
                        .with_label(if scope.ctx == Ctx::FnBody { "inside a fn helper" } else { "inside a contract" })
                        .with_help(if scope.ctx == Ctx::FnBody {
                            "helpers are pure scalar functions: pass the element as an argument"
                        } else {
                            "contracts constrain dims and scalars; value ranges are written `x in [lo, hi)`"
                        }),
                );
                return None;
            }
        };
        let rank = self.tensors[t].shape.len();
        if idx.len() != rank {
            self.error(
                Diagnostic::error("E0403", format!("`{}` has rank {} but is indexed with {} index{}", id.name, rank, idx.len(), if idx.len() == 1 { "" } else { "es" }), span)
                    .with_label(format!("expected {} index{}", rank, if rank == 1 { "" } else { "es" }))
                    .with_secondary(self.tensors[t].span, "declared here")
                    .with_help("give one index per axis"),
            );
            return None;
        }
        let mut index = Vec::new();
        for (axis, ix) in idx.iter().enumerate() {
            // An unknown plain name in index position is an unbound index variable.
            if let ExprKind::Name(n) = &ix.kind {
                if scope.local(&n.name).is_none() && scope.var(&n.name).is_none() && !self.names.contains_key(&n.name) {
                    let help = format!("bind it with a reduction such as `sum({}) ...`, or put it on the left-hand side", n.name);
                    self.error(
                        Diagnostic::error("E0207", format!("unbound index variable `{}`", n.name), n.span)
                            .with_label("not bound by the left-hand side or a reduction")
                            .with_help(help),
                    );
                    return None;
                }
            }
            let (e, f) = self.infer_expr(ix, scope)?;
            let e = self.finalize(e, f);
            if !e.ty.is_int() {
                self.error(
                    Diagnostic::error("E0304", format!("tensor indices must be integers, found {}", e.ty), ix.span)
                        .with_label(format!("this is {}", e.ty))
                        .with_help("cast it: `i32(...)`"),
                );
                return None;
            }
            let dim = self.tensors[t].shape[axis];
            if let Some(v) = e.as_var() {
                self.var_uses.push(VarUse { var: v, dim, span: ix.span, what: format!("axis {} of `{}`", axis, id.name) });
            }
            if let TExprKind::Load { tensor: it, .. } = &e.kind {
                self.check_indirect(*it, dim, ix.span, &id.name, axis)?;
            } else {
                let mut indirect = None;
                e.walk(&mut |x| {
                    if let TExprKind::Load { tensor, .. } = x.kind {
                        indirect = Some(tensor);
                    }
                });
                if let Some(it) = indirect {
                    if self.tensors[it].value_range.is_none() {
                        self.missing_value_contract(it, ix.span);
                        return None;
                    }
                }
            }
            index.push(e);
        }
        let ty = self.tensors[t].dtype;
        Some((mk(TExprKind::Load { tensor: t, index }, ty, span), Flex::No))
    }

    fn missing_value_contract(&mut self, it: TensorId, span: Span) {
        let name = self.tensors[it].name.clone();
        let hint = match self.tensors[it].role {
            TensorRole::Input | TensorRole::Inout => format!("state its range: `requires {} in [0, T)`", name),
            _ => "indices computed in the same kernel cannot be bounded yet; compute them in a kernel of their own with an `ensures`".to_string(),
        };
        self.error(
            Diagnostic::error("E0701", format!("indirect index through `{}` has no value contract", name), span)
                .with_label(format!("`{}` could hold any value", name))
                .with_help(hint),
        );
    }

    /// `x[idx[r], d]`: idx's value range must match x's axis.
    fn check_indirect(&mut self, it: TensorId, dim: Dim, span: Span, tname: &str, axis: usize) -> Option<()> {
        let Some(range) = self.tensors[it].value_range.clone() else {
            self.missing_value_contract(it, span);
            return None;
        };
        let lo_ok = matches!(range.lo.kind, TExprKind::Const(Const::Int(v)) if v > 0 || (v == 0 && range.lo_closed));
        let hi_dim = match (&range.hi.kind, range.hi_closed) {
            (TExprKind::Dim(d), false) => Some(Dim::Sym(*d)),
            (TExprKind::Const(Const::Int(v)), false) => Some(Dim::Lit(*v)),
            (TExprKind::Const(Const::Int(v)), true) => Some(Dim::Lit(*v + 1)),
            _ => None,
        };
        let hi_ok = match hi_dim {
            Some(Dim::Lit(v)) => match dim {
                Dim::Lit(len) => v <= len,
                Dim::Sym(_) => self.dims_equal(Dim::Lit(v), dim),
            },
            Some(h) => self.dims_equal(h, dim),
            None => false,
        };
        if lo_ok && hi_ok {
            return Some(());
        }
        let len = self.dim_name(dim);
        self.error(
            Diagnostic::error(
                "E0702",
                format!("`{}` ranges over {} but indexes axis {} of `{}`, of length `{}`", self.tensors[it].name, range.text.split(" in ").nth(1).unwrap_or(&range.text), axis, tname, len),
                span,
            )
            .with_label("may be out of bounds")
            .with_secondary(range.span, "value contract stated here")
            .with_help(format!("the contract must fit the axis: `{} in [0, {})`, or `requires` that the bounds are equal", self.tensors[it].name, len)),
        );
        None
    }

    fn infer_binary(&mut self, op: BinOp, a: &ast::Expr, b: &ast::Expr, span: Span, scope: &mut Scope) -> Inferred {
        let ra = self.infer_expr(a, scope);
        let rb = self.infer_expr(b, scope);
        let (ea, eb, flex) = self.unify(ra?, rb?, span, op.symbol())?;
        let ty = ea.ty;
        let bad = |s: &mut Self, what: &str, help: &str| {
            s.error(
                Diagnostic::error("E0304", format!("`{}` needs {}, found {}", op.symbol(), what, ty), span)
                    .with_label(format!("operands are {}", ty))
                    .with_help(help.to_string()),
            );
            None
        };
        let out_ty = if op.is_logical() {
            if ty != Dtype::Bool {
                return bad(self, "bools", "combine comparisons, e.g. `a < b && c < d`");
            }
            Dtype::Bool
        } else if op.is_comparison() {
            if ty == Dtype::Bool && !matches!(op, BinOp::Eq | BinOp::Ne) {
                return bad(self, "numbers", "bools compare only with `==` and `!=`");
            }
            Dtype::Bool
        } else {
            if ty == Dtype::Bool {
                return bad(self, "numbers", "arithmetic does not apply to bools; use `select(c, a, b)`");
            }
            if op == BinOp::Rem && (ty.is_float() || flex == Flex::Float) {
                return bad(self, "integers", "`%` is integer remainder");
            }
            ty
        };
        let out_flex = if out_ty == Dtype::Bool { Flex::No } else { flex };
        Some((mk(TExprKind::Binary(op, Box::new(ea), Box::new(eb)), out_ty, span), out_flex))
    }

    fn infer_call(&mut self, id: &ast::Ident, args: &[ast::Expr], span: Span, scope: &mut Scope) -> Inferred {
        if let Some(b) = Builtin::from_name(&id.name) {
            let arity = match b {
                Builtin::Min | Builtin::Max | Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf => 2,
                Builtin::Select => 3,
                _ => 1,
            };
            if args.len() != arity {
                self.error(
                    Diagnostic::error("E0305", format!("`{}` takes {} argument{}, found {}", id.name, arity, if arity == 1 { "" } else { "s" }, args.len()), span)
                        .with_label("wrong number of arguments")
                        .with_help(match b {
                            Builtin::Select => "select(condition, if_true, if_false)",
                            Builtin::Min | Builtin::Max => "min(a, b) / max(a, b); a reduction is written `max(k) expr`",
                            Builtin::MulMod | Builtin::AddMod => "mulmod(a, b) / addmod(a, b): two residues",
                            Builtin::SkipIf => "skip_if(condition, value): the value, or 0 where the condition holds",
                            _ => "one argument",
                        }),
                );
                return None;
            }
            let mut inferred = Vec::new();
            for a in args {
                inferred.push(self.infer_expr(a, scope));
            }
            let inferred: Vec<(TExpr, Flex)> = inferred.into_iter().collect::<Option<_>>()?;
            return match b {
                Builtin::Exp | Builtin::Log | Builtin::Tanh | Builtin::Sqrt | Builtin::Rsqrt | Builtin::Abs => {
                    let (x, f) = inferred.into_iter().next()?;
                    let x = match f {
                        Flex::Float => retype(x, Dtype::F32),
                        Flex::Int if b == Builtin::Abs => retype(x, Dtype::I32),
                        _ => x,
                    };
                    let float_only = b != Builtin::Abs;
                    if x.ty == Dtype::Bool || (float_only && !x.ty.is_float()) || f == Flex::Int && float_only {
                        self.error(
                            Diagnostic::error("E0304", format!("`{}` needs a float, found {}", id.name, if f == Flex::Int { "an integer literal".to_string() } else { x.ty.to_string() }), args[0].span)
                                .with_label(format!("this is {}", x.ty))
                                .with_help(format!("convert first: `{}(f32(...))`", id.name)),
                        );
                        return None;
                    }
                    let ty = x.ty;
                    Some((mk(TExprKind::Call(b, vec![x]), ty, span), Flex::No))
                }
                Builtin::Min | Builtin::Max => {
                    let mut it = inferred.into_iter();
                    let (a, b2) = (it.next()?, it.next()?);
                    let (ea, eb, flex) = self.unify(a, b2, span, &id.name)?;
                    if ea.ty == Dtype::Bool {
                        self.error(Diagnostic::error("E0304", format!("`{}` needs numbers, found bool", id.name), span).with_label("bool operands").with_help("use `&&` / `||` for bools"));
                        return None;
                    }
                    let ty = ea.ty;
                    Some((mk(TExprKind::Call(b, vec![ea, eb]), ty, span), flex))
                }
                Builtin::Select => {
                    let mut it = inferred.into_iter();
                    let (c, cf) = it.next()?;
                    let c = self.coerce(c, cf, Dtype::Bool, "the condition of `select`", args[0].span)?;
                    let (x, y) = (it.next()?, it.next()?);
                    let (ex, ey, flex) = self.unify(x, y, span, "select")?;
                    let ty = ex.ty;
                    Some((mk(TExprKind::Call(b, vec![c, ex, ey]), ty, span), flex))
                }
                Builtin::Vp | Builtin::MulMod | Builtin::AddMod => {
                    // Residues are u32; `check::residue` proves each in [0, p^k).
                    let mut operands = Vec::new();
                    for ((x, f), a) in inferred.into_iter().zip(args) {
                        operands.push(self.coerce(x, f, Dtype::U32, &format!("an operand of `{}`", id.name), a.span)?);
                    }
                    Some((mk(TExprKind::Call(b, operands), Dtype::U32, span), Flex::No))
                }
                Builtin::SkipIf => {
                    let mut it = inferred.into_iter();
                    let (c, cf) = it.next()?;
                    let c = self.coerce(c, cf, Dtype::Bool, "the condition of `skip_if`", args[0].span)?;
                    let (x, xf) = it.next()?;
                    let x = self.coerce(x, xf, Dtype::U32, "the value of `skip_if`", args[1].span)?;
                    Some((mk(TExprKind::Call(b, vec![c, x]), Dtype::U32, span), Flex::No))
                }
            };
        }
        if let Some(f) = self.fns.get(&id.name).copied() {
            return self.inline_fn(f, args, span, scope);
        }
        if self.bad_fns.contains(&id.name) {
            return None; // its own errors were reported once already
        }
        self.unknown_name(id, scope, "function");
        None
    }

    fn inline_fn(&mut self, f: &ast::FnDef, args: &[ast::Expr], span: Span, scope: &mut Scope) -> Inferred {
        if self.fn_stack.contains(&f.name.name) {
            self.error(
                Diagnostic::error("E0213", format!("`{}` calls itself", f.name.name), span)
                    .with_label("recursive call")
                    .with_secondary(f.name.span, "defined here")
                    .with_help("helpers are inlined, so they cannot recurse"),
            );
            return None;
        }
        if args.len() != f.params.len() {
            self.error(
                Diagnostic::error("E0305", format!("`{}` takes {} argument{}, found {}", f.name.name, f.params.len(), if f.params.len() == 1 { "" } else { "s" }, args.len()), span)
                    .with_label("wrong number of arguments")
                    .with_secondary(f.name.span, "defined here")
                    .with_help(format!(
                        "call it as `{}({})`",
                        f.name.name,
                        f.params.iter().map(|(n, d)| format!("{}: {}", n.name, d)).collect::<Vec<_>>().join(", ")
                    )),
            );
            return None;
        }
        let mut bound = Vec::new();
        for ((pname, pty), a) in f.params.iter().zip(args) {
            let (v, fl) = self.infer_expr(a, scope)?;
            let v = self.coerce(v, fl, *pty, &format!("parameter `{}` of `{}`", pname.name, f.name.name), a.span)?;
            let id = self.locals.len();
            self.locals.push(LocalInfo { name: pname.name.clone(), dtype: *pty });
            bound.push((pname.name.clone(), id, v));
        }
        let mut inner = Scope { vars: Vec::new(), locals: bound.iter().map(|(n, id, _)| (n.clone(), *id)).collect(), ctx: Ctx::FnBody };
        self.fn_stack.push(f.name.name.clone());
        let body = self.infer_expr(&f.body, &mut inner);
        self.fn_stack.pop();
        let (body, fl) = body?;
        let mut body = self.coerce(body, fl, f.ret, &format!("the result of `{}`", f.name.name), f.body.span)?;
        for (_, id, v) in bound.into_iter().rev() {
            body = mk(TExprKind::Let { local: id, value: Box::new(v), body: Box::new(body) }, f.ret, span);
        }
        body.span = span;
        Some((body, Flex::No))
    }

    fn infer_reduce(
        &mut self,
        op: RedOp,
        var: &ast::Ident,
        range: &Option<(Box<ast::Expr>, Box<ast::Expr>)>,
        body: &ast::Expr,
        span: Span,
        scope: &mut Scope,
    ) -> Inferred {
        if scope.ctx != Ctx::Statement {
            self.error(
                Diagnostic::error("E0206", format!("`{}` reductions are not allowed here", op.name()), span)
                    .with_label(if scope.ctx == Ctx::FnBody { "inside a fn helper" } else { "inside a contract" })
                    .with_help("reductions belong in kernel statements"),
            );
            return None;
        }
        if scope.var(&var.name).is_some() || self.names.contains_key(&var.name) || scope.local(&var.name).is_some() {
            self.error(
                Diagnostic::error("E0204", format!("reduction variable `{}` shadows another name", var.name), var.span)
                    .with_label("already in scope")
                    .with_help("give the reduction its own index name"),
            );
            return None;
        }
        let extent = match range {
            None => None,
            Some((lo, hi)) => {
                if !matches!(lo.kind, ExprKind::Int(0)) {
                    self.error(
                        Diagnostic::error("E0406", "reduction ranges start at 0", lo.span)
                            .with_label("expected `0`")
                            .with_help("write `0..K` and shift the index inside the body"),
                    );
                    return None;
                }
                match &hi.kind {
                    ExprKind::Int(v) if *v >= 1 => Some(Dim::Lit(*v)),
                    ExprKind::Name(n) => match self.names.get(&n.name) {
                        Some(Entity::Dim(d)) => Some(Dim::Sym(*d)),
                        _ => {
                            self.error(
                                Diagnostic::error("E0406", format!("`{}` is not a dimension", n.name), hi.span)
                                    .with_label("reduction ranges end at a dim or a positive literal")
                                    .with_help("write `0..K` where `K` is a dimension of a parameter"),
                            );
                            return None;
                        }
                    },
                    _ => {
                        self.error(
                            Diagnostic::error("E0406", "reduction ranges end at a dim or a positive literal", hi.span)
                                .with_label("not a dim or a positive literal")
                                .with_help("write `0..K` where `K` is a dimension of a parameter"),
                        );
                        return None;
                    }
                }
            }
        };
        let v = self.new_var(var, VarKind::Reduction, extent);
        scope.vars.push((var.name.clone(), v));
        let r = self.infer_expr(body, scope);
        scope.vars.pop();
        let (b, f) = r?;
        let b = self.finalize(b, f);
        if b.ty == Dtype::Bool {
            self.error(
                Diagnostic::error("E0304", format!("`{}` over bools", op.name()), body.span)
                    .with_label("this is bool")
                    .with_help("convert first, e.g. `select(c, 1.0, 0.0)`"),
            );
            return None;
        }
        if op == RedOp::SumMod && b.ty != Dtype::U32 {
            self.error(
                Diagnostic::error("E0304", format!("`summod` over {}: it sums u32 residues", b.ty), body.span)
                    .with_label(format!("this is {}", b.ty))
                    .with_help("sum residues such as `mulmod(a[i, k], b[k, j])`; a float sum is written `sum(k)`"),
            );
            return None;
        }
        let ty = if op == RedOp::Argmax { Dtype::I32 } else { b.ty };
        Some((mk(TExprKind::Reduce { op, var: v, body: Box::new(b) }, ty, span), Flex::No))
    }

    pub fn check_fn_standalone(&mut self, f: &ast::FnDef) {
        let mut locals = Vec::new();
        for (i, (p, d)) in f.params.iter().enumerate() {
            if f.params[..i].iter().any(|(q, _)| q.name == p.name) {
                self.error(
                    Diagnostic::error("E0202", format!("parameter `{}` is declared twice", p.name), p.span)
                        .with_label("repeated")
                        .with_help("give each parameter its own name"),
                );
                return;
            }
            let id = self.locals.len();
            self.locals.push(LocalInfo { name: p.name.clone(), dtype: *d });
            locals.push((p.name.clone(), id));
        }
        let mut scope = Scope { vars: Vec::new(), locals, ctx: Ctx::FnBody };
        self.fn_stack.push(f.name.name.clone());
        if let Some((b, fl)) = self.infer_expr(&f.body, &mut scope) {
            let _ = self.coerce(b, fl, f.ret, &format!("the result of `{}`", f.name.name), f.body.span);
        }
        self.fn_stack.pop();
    }
}

/// Give a flexible literal subtree its final type.
pub(crate) fn retype(mut e: TExpr, to: Dtype) -> TExpr {
    fn go(e: &mut TExpr, to: Dtype) {
        match &mut e.kind {
            TExprKind::Const(c) => {
                if let (Const::Int(v), true) = (*c, to.is_float()) {
                    *c = Const::Float(v as f64);
                }
                e.ty = to;
            }
            TExprKind::Unary(_, a) => {
                go(a, to);
                e.ty = to;
            }
            TExprKind::Binary(op, a, b) if !op.is_comparison() && !op.is_logical() => {
                go(a, to);
                go(b, to);
                e.ty = to;
            }
            TExprKind::Call(Builtin::Min | Builtin::Max, args) => {
                args.iter_mut().for_each(|a| go(a, to));
                e.ty = to;
            }
            TExprKind::Call(Builtin::Select, args) => {
                args[1..].iter_mut().for_each(|a| go(a, to));
                e.ty = to;
            }
            TExprKind::Let { body, .. } => {
                go(body, to);
                e.ty = to;
            }
            _ => {}
        }
    }
    go(&mut e, to);
    e
}
