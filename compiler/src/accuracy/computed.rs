//! Ranges of computed values: where the numbers a kernel stores can lie,
//! for `ensures y in [lo, hi]` on a float output (issue 18: domains that
//! compose, so that a consumer whose `domain` holds a producer's proved
//! range needs no check of that input at run time).
//!
//! The accuracy walk bounds the exact value and the error apart; the exact
//! range widened by the error loses what rounding keeps. Round to nearest
//! is monotone, so a computed softmax `e / sum(e)` is never above 1, while
//! "exact range plus error" reaches `1 + 1e-5`. This walk follows the
//! computed values themselves, with intervals rounded outward onto each
//! format's grid:
//!
//! - a correctly rounded operation (`+ - *`, `/` where the target's
//!   division is correctly rounded, conversions, stores) is monotone, so it
//!   maps a box of operands to the correct roundings of its corners (each
//!   computed exactly, see [`Walk::correctly_rounded`]);
//! - a library function of `k` ulps is widened by its documented error
//!   first, and keeps the sign of its exact value (a named assumption: no
//!   target's `expf` or `sqrtf` returns a negative number);
//! - a sum of `n` terms lies within `γ_h n max|t|` of the sum of its
//!   computed terms (`h` the height of the order `KernelIr` records), and a
//!   sum of non-negative terms is non-negative (so is every partial sum);
//! - the row lemmas of the exact walk hold for computed values: a term
//!   minus its row's computed maximum is at most 0 (`t <= m`, and rounding
//!   is monotone), and a non-negative term over its row's computed sum is
//!   at most 1 (each partial sum of non-negative floats is at least each of
//!   its terms, and a correctly rounded quotient `t / s` with `t <= s` is
//!   at most 1). Both need the term computed alike in both places: no
//!   multiply-add that the compiler could contract in one and not the other;
//! - a row's sum of `exp(t - max(t))` holds the term `exp(0)`, so it is at
//!   least that term's least computed value (softmax divides by no zero);
//! - a maximum over at least two elements in which `select(k == j, a, b)`
//!   replaces one element by `a` (top-2's second pick) is at least `b`'s
//!   least value: another element is a `b`.

use super::*;
use tokitai_contracts::fp::{add_up, down};


/// The computed walk's memo and locals, beside the exact walk's.
pub(crate) struct State {
    memo: StatementMemo<Interval>,
    locals: Vec<Option<Interval>>,
}

impl State {
    pub(crate) fn new(k: &Kernel) -> State {
        State { memo: StatementMemo::new(), locals: vec![None; k.locals.len()] }
    }
}

/// A float `ensures` and what the walk found for it.
#[derive(Clone, Debug)]
pub struct EnsuredRange {
    pub tensor: TensorId,
    /// The range as declared: `(lo, lo closed, hi, hi closed)`.
    pub declared: (f64, bool, f64, bool),
    pub text: String,
    pub span: Span,
    /// Where the stored values can lie, or why the walk cannot say.
    pub computed: Result<Interval, Fail>,
}

impl EnsuredRange {
    /// Is `y` inside the declared range?
    pub fn admits(&self, y: f64) -> bool {
        let (lo, lo_closed, hi, hi_closed) = self.declared;
        (if lo_closed { lo <= y } else { lo < y }) && (if hi_closed { y <= hi } else { y < hi })
    }

    /// Is every value the kernel can store inside the declared range?
    pub fn holds(&self) -> bool {
        self.computed.as_ref().is_ok_and(|c| self.admits(c.lo) && self.admits(c.hi))
    }
}

/// A bound of a float `ensures`: a number, possibly negated.
fn number(e: &TExpr) -> Option<f64> {
    match &e.kind {
        TExprKind::Const(Const::Float(v)) => Some(*v),
        TExprKind::Const(Const::Int(v)) => Some(*v as f64),
        TExprKind::Unary(UnOp::Neg, a) => number(a).map(|v| -v),
        TExprKind::Cast(a) => number(a),
        _ => None,
    }
}

/// Every `ensures` on a float output, with the range its stored values are
/// proved to lie in over every launch that meets `requires` and `domain`.
pub fn float_ensures(k: &Kernel, ir: &KernelIr) -> Vec<EnsuredRange> {
    let wanted: Vec<(TensorId, &tir::ValueRange)> = k
        .ensures
        .iter()
        .filter_map(|c| match c {
            tir::Contract::Range { tensor, range } if k.tensors[*tensor].dtype.is_float() && k.tensors[*tensor].role != TensorRole::Input => Some((*tensor, range)),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let lib = super::library_for(ir);
    let mut dims: Vec<(i64, i64)> = (0..k.dims.len()).map(|d| dim_bounds(k, d)).map(|(lo, hi)| (lo, hi.unwrap_or(i64::MAX / 4))).collect();
    for d in 0..dims.len() {
        dims[d] = dims[k.dim_class[d]];
    }
    let mut sources = Sources::default();
    wanted
        .into_iter()
        .map(|(tensor, range)| {
            let declared = match (number(&range.lo), number(&range.hi)) {
                (Some(lo), Some(hi)) => Ok((lo, range.lo_closed, hi, range.hi_closed)),
                _ => Err(("the bounds of a float `ensures` must be numbers".to_string(), range.span)),
            };
            let computed = match (&lib, &declared) {
                (Err(e), _) => Err((e.clone(), range.span)),
                (_, Err(e)) => Err(e.clone()),
                (Ok(lib), Ok(_)) => {
                    Walk::new(k, ir, lib, dims.clone(), &mut sources, Vec::new()).computed_stmt(tensor, range.span)
                }
            };
            EnsuredRange { tensor, declared: declared.unwrap_or((f64::NAN, true, f64::NAN, true)), text: range.text.clone(), span: range.span, computed }
        })
        .collect()
}

/// Does `e` hold a float product added to something: an expression the
/// compiler may contract into a multiply-add in one place and not another?
fn may_contract(e: &TExpr) -> bool {
    let mut found = false;
    e.walk(&mut |x| {
        if let TExprKind::Binary(BinOp::Add | BinOp::Sub, a, b) = &x.kind {
            let product = |y: &TExpr| matches!(y.kind, TExprKind::Binary(BinOp::Mul, _, _)) && y.ty.is_float();
            found |= product(a) || product(b);
        }
    });
    found
}

/// Does `e` read the variable `v`?
fn reads_var(e: &TExpr, v: VarId) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= matches!(x.kind, TExprKind::Var(w) if w == v));
    found
}

/// `[lo - rel |lo| - abs, hi + rel |hi| + abs]`, rounded outward.
fn widened(iv: Interval, rel: f64, abs: f64) -> Interval {
    Interval::new(down(down(iv.lo - mul_up(rel, iv.lo.abs())) - abs), add_up(add_up(iv.hi, mul_up(rel, iv.hi.abs())), abs))
}

impl Walk<'_> {
    /// The computed value of the statement writing `t`, as stored.
    fn computed_stmt(&mut self, t: TensorId, span: Span) -> Result<Interval, Fail> {
        let si = match self.computed.memo.lookup(self.k, t, span)? {
            Lookup::Known(v) => return Ok(v),
            Lookup::Evaluate(si) => si,
        };
        let stmt = &self.k.stmts[si];
        self.enter(stmt.vars.clone());
        let v = self.computed(&stmt.value);
        self.leave();
        let v = v.map(|v| match format_of(self.k.tensors[t].dtype) {
            Some(f) => f.round_nearest(v),
            None => v,
        });
        self.computed.memo.finish(t, v)
    }

    /// `x op y`, correctly rounded as the kernel rounds it (in f32 for f32
    /// and the halves, then into the half; in f64 for f64), for every
    /// operand in the boxes. The ends of computed ranges are values of the
    /// compute format, and `+ - * /` take their extremes over a box at its
    /// corners; each corner is computed exactly: f64 arithmetic on f32
    /// values rounded to f32 is the f32 operation's correct rounding
    /// (double rounding is innocuous for 53 >= 2 * 24 + 2 bits). `None`
    /// where a corner is undefined (`inf - inf`).
    fn correctly_rounded(op: fn(f64, f64) -> f64, x: Interval, y: Interval, ty: Dtype) -> Option<Interval> {
        let fmt = format_of(ty)?;
        let compute = if fmt == Format::F64 { Format::F64 } else { Format::F32 };
        let corners = [op(x.lo, y.lo), op(x.lo, y.hi), op(x.hi, y.lo), op(x.hi, y.hi)];
        if corners.iter().any(|c| c.is_nan()) {
            return None;
        }
        let lo = corners.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = corners.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(fmt.round_nearest(compute.round_nearest(Interval::new(lo, hi))))
    }

    /// A library function's computed result from its exact range.
    fn library_computed(&self, exact: Interval, f: Function, ty: Dtype) -> Interval {
        self.library_computed_at(exact, f, ty, 0.0, 0.0)
    }

    /// As [`Self::library_computed`], for an argument (a division's
    /// dividend) of magnitude at most `arg_mag` and `extra_abs` more
    /// absolute error: an intrinsic's error depends on them.
    fn library_computed_at(&self, exact: Interval, f: Function, ty: Dtype, arg_mag: f64, extra_abs: f64) -> Interval {
        let compute = if ty == Dtype::F64 { Format::F64 } else { Format::F32 };
        let mut v = if self.lib.ulps(f) == 0.0 && self.lib.grows(f).is_none() {
            compute.round_outward(exact)
        } else {
            let (rel, abs) = self.lib.cost_at(f, compute, arg_mag);
            compute.round_outward(widened(exact, rel, add_up(abs, extra_abs)))
        };
        // The sign of the exact value (the assumption named above).
        if exact.nonneg() {
            v.lo = v.lo.max(0.0);
        } else if exact.nonpos() {
            v.hi = v.hi.min(0.0);
        }
        format_of(ty).map_or(v, |f| f.round_outward(v))
    }

    /// The range of the computed value of a float (or integer) expression.
    pub(super) fn computed(&mut self, e: &TExpr) -> Result<Interval, Fail> {
        let ty = e.ty;
        if !ty.is_float() {
            return Ok(self.int(e)?.0);
        }
        Ok(match &e.kind {
            TExprKind::Const(Const::Float(c)) => {
                if c.is_nan() {
                    return fail("a NaN constant", e.span);
                }
                Interval::point(stored_literal(*c, format_of(ty).unwrap_or(Format::F64)))
            }
            TExprKind::Const(_) | TExprKind::Dim(_) | TExprKind::Var(_) => return fail("a float that is not a number", e.span),
            TExprKind::Scalar(s) => {
                let name = self.k.scalars[*s].name.clone();
                let d = self.domain(None, Some(*s), ty, &name, e.span)?;
                format_of(ty).map_or(d, |f| f.held_in(d))
            }
            TExprKind::Local(l) => match self.computed.locals[*l] {
                Some(v) => v,
                None => return fail("a local read before it is bound", e.span),
            },
            TExprKind::Load { tensor, .. } => {
                let info = &self.k.tensors[*tensor];
                match info.role {
                    TensorRole::Intermediate | TensorRole::Output => self.computed_stmt(*tensor, e.span)?,
                    TensorRole::Input | TensorRole::Inout => {
                        let name = info.name.clone();
                        let d = self.domain(Some(*tensor), None, ty, &name, e.span)?;
                        format_of(ty).map_or(d, |f| f.held_in(d))
                    }
                }
            }
            TExprKind::Unary(UnOp::Neg, a) => self.computed(a)?.neg(),
            TExprKind::Unary(UnOp::Not, _) => return fail("a boolean where a float is expected", e.span),
            TExprKind::Binary(op, a, b) => self.computed_binary(*op, a, b, e)?,
            TExprKind::Call(f, args) => self.computed_call(*f, args, e)?,
            TExprKind::Cast(a) => {
                let v = self.computed(a)?;
                let narrowing = match (format_of(a.ty), format_of(ty)) {
                    (Some(from), Some(to)) => !from.fits_in(to),
                    _ => true,
                };
                match format_of(ty) {
                    // Halves from f64 convert through f32, as printed.
                    Some(to) if narrowing => to.round_nearest(Format::F32.round_nearest(v)),
                    _ => v,
                }
            }
            TExprKind::Let { local, value, body } => {
                if value.ty.is_float() {
                    let v = self.computed(value)?;
                    self.computed.locals[*local] = Some(v);
                } else {
                    let v = self.eval(value)?;
                    self.locals[*local] = Some(v);
                }
                self.computed(body)?
            }
            TExprKind::Reduce { op, var, body } => {
                let extent = self.k.vars[*var].extent;
                let (n_lo, n_hi) = self.dim(extent);
                if n_hi < 1 {
                    return fail("a reduction over an empty range", e.span);
                }
                let saved = self.vars[*var];
                self.vars[*var] = Some(Interval::new(0.0, (n_hi - 1) as f64));
                let out = self.computed_reduce(*op, *var, body, e, n_lo.max(0), n_hi);
                self.vars[*var] = saved;
                out?
            }
        })
    }

    fn computed_binary(&mut self, op: BinOp, a: &TExpr, b: &TExpr, e: &TExpr) -> Result<Interval, Fail> {
        let (x, y) = (self.computed(a)?, self.computed(b)?);
        let ty = e.ty;
        let f: fn(f64, f64) -> f64 = match op {
            BinOp::Add => |p, q| p + q,
            BinOp::Sub => |p, q| p - q,
            BinOp::Mul => |p, q| p * q,
            BinOp::Div if y.contains_zero() => return fail("a division by a value whose range holds zero", e.span),
            BinOp::Div if self.lib.ulps(Function::Div) > 0.0 => {
                let q = x.div(&y).expect("the divisor's range holds no zero");
                let extra = super::flushed_division(self.lib, y, ty).map_err(|why| (why, e.span))?;
                return Ok(self.library_computed_at(q, Function::Div, ty, x.mag(), extra));
            }
            BinOp::Div => |p, q| p / q,
            _ => return fail(format!("`{}` where a float is expected", op.symbol()), e.span),
        };
        let mut v = Self::correctly_rounded(f, x, y, ty).ok_or_else(|| ("a value the range analysis cannot bound (an infinity minus an infinity)".to_string(), e.span))?;
        if op == BinOp::Mul && same_expr(a, b) {
            v.lo = v.lo.max(0.0);
        }
        // The row lemmas, for computed values (see the module comment).
        if !may_contract(a) {
            match (op, self.row_reduction(a, b)) {
                (BinOp::Sub, Some(RedOp::Max)) => v = v.meet(&Interval::new(f64::NEG_INFINITY, 0.0)),
                (BinOp::Sub, Some(RedOp::Min)) => v = v.meet(&Interval::new(0.0, f64::INFINITY)),
                (BinOp::Div, Some(RedOp::Sum)) if x.nonneg() => v = v.meet(&self.library_computed(Interval::new(0.0, 1.0), Function::Div, ty)),
                _ => {}
            }
        }
        // NaN ends (from `inf - inf` at a corner) compare unordered.
        if v.lo.partial_cmp(&v.hi).is_none_or(|o| o == std::cmp::Ordering::Greater) {
            return fail("a value the range analysis cannot bound", e.span);
        }
        Ok(v)
    }

    fn computed_call(&mut self, f: Builtin, args: &[TExpr], e: &TExpr) -> Result<Interval, Fail> {
        let ty = e.ty;
        // A library function: its exact range over the argument's, then its
        // documented error.
        let (func, exact): (Function, fn(&Interval) -> Option<Interval>) = match f {
            Builtin::Abs => return Ok(self.computed(&args[0])?.abs()),
            Builtin::Min => return Ok(self.computed(&args[0])?.min(&self.computed(&args[1])?)),
            Builtin::Max => return Ok(self.computed(&args[0])?.max(&self.computed(&args[1])?)),
            Builtin::Select => return Ok(self.computed(&args[1])?.hull(&self.computed(&args[2])?)),
            Builtin::Exp => (Function::Exp, |x| Some(x.exp())),
            Builtin::Tanh => (Function::Tanh, |x| Some(x.tanh())),
            Builtin::Log => (Function::Log, Interval::ln),
            Builtin::Sqrt => (Function::Sqrt, Interval::sqrt),
            Builtin::Rsqrt => (Function::Rsqrt, Interval::rsqrt),
            Builtin::Vp | Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf => return fail("residue arithmetic where a float is expected", e.span),
        };
        let x = self.computed(&args[0])?;
        match exact(&x) {
            Some(r) => Ok(self.library_computed_at(r, func, ty, x.mag(), 0.0)),
            None => fail(format!("`{}` of a range outside its domain", func.c_name()), e.span),
        }
    }

    /// A sum's term `exp(t - m)` with `m` the maximum of the row's `t`:
    /// the element where `t` is the maximum contributes `exp(0)` (the
    /// subtraction `m - m` is exact). Its computed range, or `None`.
    fn row_max_exp(&self, body: &TExpr) -> Option<Interval> {
        let TExprKind::Call(Builtin::Exp, args) = &body.kind else { return None };
        let TExprKind::Binary(BinOp::Sub, a, b) = &args[0].kind else { return None };
        (self.row_reduction(a, b) == Some(RedOp::Max) && !may_contract(a)).then(|| self.library_computed(Interval::point(1.0), Function::Exp, body.ty))
    }

    fn computed_reduce(&mut self, op: RedOp, var: VarId, body: &TExpr, e: &TExpr, n_lo: i64, n_hi: i64) -> Result<Interval, Fail> {
        match op {
            RedOp::Argmax => fail("an argmax where a float is expected", e.span),
            RedOp::SumMod => fail("a `summod` where a float is expected", e.span),
            RedOp::Max | RedOp::Min => {
                if n_lo < 1 {
                    return fail("a maximum or minimum over a range that may be empty", e.span);
                }
                // `select(k == j, a, b)`: at most one element is an `a`.
                if let TExprKind::Call(Builtin::Select, args) = &body.kind {
                    if let TExprKind::Binary(BinOp::Eq, l, r) = &args[0].kind {
                        let one_element = |v: &TExpr, w: &TExpr| v.as_var() == Some(var) && !reads_var(w, var);
                        if n_lo >= 2 && (one_element(l, r) || one_element(r, l)) {
                            let (a, b) = (self.computed(&args[1])?, self.computed(&args[2])?);
                            let all = a.hull(&b);
                            return Ok(if op == RedOp::Max { Interval::new(b.lo, all.hi) } else { Interval::new(all.lo, b.hi) });
                        }
                    }
                }
                self.computed(body)
            }
            RedOp::Sum => {
                let fmt = format_of(body.ty).unwrap_or(Format::F32);
                // The terms of a fused multiply-add are exact products.
                let term = match tir::fma_operands(body) {
                    Some((a, b)) => self.computed(a)?.mul(&self.computed(b)?),
                    None => self.computed(body)?,
                };
                let order = self.ir.reduction_order.get(&var).copied().unwrap_or(ReductionOrder::Sequential);
                if let Some(why) = super::matrix_unit_operands(order, body) {
                    return fail(why, e.span);
                }
                // Bounded by n times the largest term: the height for any signs.
                let (height, _) = summation_height(order, n_hi, false);
                let hu = height * fmt.unit_roundoff();
                let gamma = if hu < 0.5 { up(hu / down(1.0 - hu)) } else { f64::INFINITY };
                let exact = term.times_count(n_lo as f64, n_hi as f64);
                let err = mul_up(mul_up(gamma, n_hi as f64), term.mag());
                let mut v = fmt.round_outward(widened(exact, 0.0, err));
                if term.nonneg() {
                    v.lo = v.lo.max(0.0);
                    // One of the terms is `exp(0)`: every partial sum of
                    // non-negative terms is at least each of its terms.
                    if let Some(one) = self.row_max_exp(body) {
                        v.lo = v.lo.max(one.lo);
                    }
                } else if term.nonpos() {
                    v.hi = v.hi.min(0.0);
                }
                Ok(v)
            }
        }
    }
}
