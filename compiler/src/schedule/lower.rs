//! Shared lowering: typed expressions to `KernelIr` values and statements.

use super::extent_expr;
use crate::diag::Diagnostic;
use crate::kir::*;
use crate::syntax::ast::{BinOp, RedOp, UnOp};
use crate::target::Target;
use crate::tir::{self, Builtin, Const, Kernel, TExpr, TExprKind, TensorId, TensorRole, VarId};
use crate::types::Dtype;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Builds one `KernelIr`: buffers, locals, integer variables and accesses.
pub struct Builder<'k> {
    pub k: &'k Kernel,
    pub ir: KernelIr,
    pub buf_of: HashMap<TensorId, BufId>,
    /// The row loop's variable, in row schedules.
    pub row_var: Option<IVar>,
    /// Close each block reduction with a barrier (row schedules).
    pub closing_barrier: bool,
}

/// What the lowering knows at a point of the kernel body.
#[derive(Clone, Default)]
pub struct Env {
    /// Index variables bound to integer terms.
    pub vars: HashMap<VarId, IExpr>,
    /// Tensors whose element (at the current point) sits in a register.
    pub values: HashMap<TensorId, LocalId>,
    /// Tensors read from a vector register array at lane `lane`.
    pub lane_arrays: HashMap<TensorId, LocalId>,
    pub lane: Option<IExpr>,
    /// Tensors recomputed from their definition wherever they are read.
    pub inline: HashSet<TensorId>,
    /// Let-bound names of the typed IR.
    pub locals: HashMap<tir::LocalId, LocalId>,
    /// Reductions computed already (keyed by node address).
    pub reduced: HashMap<usize, VExpr>,
}

pub fn node_key(e: &TExpr) -> usize {
    e as *const TExpr as usize
}

impl<'k> Builder<'k> {
    pub fn new(k: &'k Kernel, target: &Target, schedule: Schedule, block: u32) -> Builder<'k> {
        let mut bufs = Vec::new();
        let mut buf_of = HashMap::new();
        let mut params = Vec::new();
        for p in &k.params {
            match *p {
                tir::Param::Tensor(t) => {
                    let info = &k.tensors[t];
                    let len = info.shape.iter().fold(IExpr::c(1), |acc, d| acc.mul(extent_expr(*d)));
                    buf_of.insert(t, bufs.len());
                    params.push(KParam::Buffer(bufs.len()));
                    bufs.push(Buffer {
                        name: info.name.clone(),
                        dtype: info.dtype,
                        tensor: t,
                        len,
                        read: false,
                        written: false,
                    });
                }
                tir::Param::Scalar(s) => params.push(KParam::Scalar(s)),
            }
        }
        params.extend((0..k.dims.len()).map(KParam::Dim));
        let ir = KernelIr {
            name: k.name.clone(),
            doc: k.doc.clone(),
            target: target.clone(),
            schedule,
            fast_intrinsics: false,
            index_ty: Dtype::I32,
            bufs,
            scalars: k.scalars.iter().map(|s| (s.name.clone(), s.dtype)).collect(),
            dims: k.dims.iter().map(|d| d.name.clone()).collect(),
            params,
            block,
            min_blocks: 1,
            grid: Vec::new(),
            shared: Vec::new(),
            locals: Vec::new(),
            ivars: Vec::new(),
            body: Vec::new(),
            accesses: Vec::new(),
            reduction_order: BTreeMap::new(),
            coverage: Vec::new(),
            observed: Vec::new(),
            related: Vec::new(),
            reduction_loops: Vec::new(),
            mbarriers: Vec::new(),
            tensor_maps: Vec::new(),
            modulus: k.modulus,
        };
        Builder { k, ir, buf_of, row_var: None, closing_barrier: true }
    }

    /// The kernel, its outputs observed for the contract monitor (see
    /// `observe`): every schedule's kernel ends here.
    pub fn finish(mut self) -> KernelIr {
        super::observe::instrument(&mut self.ir, self.k);
        self.ir
    }

    pub fn warp(&self) -> u32 {
        self.ir.target.warp_size()
    }

    pub fn local(&mut self, name: &str, ty: Dtype) -> LocalId {
        self.ir.locals.push(LocalDecl { name: name.to_string(), ty });
        self.ir.locals.len() - 1
    }

    pub fn ivar(&mut self, name: &str) -> IVar {
        self.ir.ivars.push(name.to_string());
        self.ir.ivars.len() - 1
    }

    pub fn shared(&mut self, name: &str, ty: Dtype, len: u32) -> SharedId {
        let name = format!("{}_{}", name, self.ir.shared.len());
        self.ir.shared.push(SharedArray { name, ty, len, footprint: None, ring: None, swizzled: false });
        self.ir.shared.len() - 1
    }

    /// `stages` barriers in shared memory, each expecting `arrivals` a
    /// phase (see [`MbarArray`]).
    pub fn mbarriers(&mut self, name: &str, stages: u32, arrivals: u32) -> MbarId {
        let name = format!("{}_{}", name, self.ir.mbarriers.len());
        self.ir.mbarriers.push(MbarArray { name, stages, arrivals });
        self.ir.mbarriers.len() - 1
    }

    /// A tensor map of buffer `buf` in boxes of `box_outer` rows of
    /// `box_inner` elements (see [`TensorMap`]), passed after the other
    /// parameters.
    pub fn tensor_map(&mut self, buf: BufId, box_inner: u32, box_outer: u32) -> TensorMapId {
        let name = format!("tma_{}", self.ir.bufs[buf].name);
        self.ir.tensor_maps.push(TensorMap { name, buf, box_inner, box_outer });
        let id = self.ir.tensor_maps.len() - 1;
        self.ir.params.push(KParam::TensorMap(id));
        id
    }

    /// A shared slab of `rows` rows of `width` elements, each row padded to
    /// `stride` (see [`Footprint`]).
    pub fn shared_padded(&mut self, name: &str, ty: Dtype, rows: u32, width: u32, stride: u32) -> SharedId {
        let id = self.shared(name, ty, rows * stride);
        if stride > width {
            self.ir.shared[id].footprint = Some(Footprint { rows, width, stride });
        }
        id
    }

    pub fn buf(&self, t: TensorId) -> BufId {
        self.buf_of[&t]
    }

    pub fn access(&mut self, buf: BufId, kind: AccessKind, span: crate::span::Span, what: String) -> AccessId {
        match kind {
            AccessKind::Read => self.ir.bufs[buf].read = true,
            AccessKind::Write => self.ir.bufs[buf].written = true,
        }
        self.ir.accesses.push(Access { buf, kind, span, what });
        self.ir.accesses.len() - 1
    }

    /// Row-major flat index of a tensor element.
    pub fn flat_index(&self, t: TensorId, idx: &[IExpr]) -> IExpr {
        let shape = &self.k.tensors[t].shape;
        let mut acc = IExpr::c(0);
        for (j, (d, i)) in shape.iter().zip(idx).enumerate() {
            acc = if j == 0 { i.clone() } else { acc.mul(extent_expr(*d)).add(i.clone()) };
        }
        acc
    }

    /// Bind `vars` to the digits of `flat` in the mixed radix of `extents`,
    /// emitting one `LetInt` per variable.
    pub fn decompose(&mut self, flat: IExpr, vars: &[VarId], env: &mut Env, out: &mut Vec<KStmt>) {
        let mut rest = flat;
        for (j, v) in vars.iter().enumerate().rev() {
            let iv = self.ivar(&self.k.vars[*v].name.clone());
            let ext = extent_expr(self.k.vars[*v].extent);
            let digit = if j == 0 { rest.clone() } else { rest.clone().rem(ext.clone()) };
            out.push(KStmt::LetInt { var: iv, value: digit });
            env.vars.insert(*v, IExpr::Var(iv));
            if j > 0 {
                rest = rest.div(ext);
            }
        }
    }

    /// Store the element of `t` the environment's variables select.
    pub fn store(&mut self, stmt: &tir::Stmt, value: VExpr, env: &Env, out: &mut Vec<KStmt>) -> AccessId {
        let idx: Vec<IExpr> = stmt.vars.iter().map(|v| env.vars[v].clone()).collect();
        let index = self.flat_index(stmt.target, &idx);
        let buf = self.buf(stmt.target);
        let what = format!("write of `{}`", self.k.tensors[stmt.target].name);
        let access = self.access(buf, AccessKind::Write, stmt.span, what);
        out.push(KStmt::Store { buf, index, axes: idx, value, access });
        access
    }

    /// Record that every element of `t` is written by `access` under `assign`.
    pub fn cover(&mut self, t: TensorId, elem: IVar, cases: Vec<CoverCase>) {
        self.cover_axes(t, vec![elem], cases)
    }

    /// Coverage over the element's multi-index (one variable per axis).
    pub fn cover_axes(&mut self, t: TensorId, elem: Vec<IVar>, cases: Vec<CoverCase>) {
        let buf = self.buf(t);
        let what = format!("every element of `{}` is written", self.k.tensors[t].name);
        self.ir.coverage.push(Cover { buf, elem, cases, what });
    }

    pub fn is_output(&self, t: TensorId) -> bool {
        matches!(self.k.tensors[t].role, TensorRole::Output | TensorRole::Inout)
    }

    pub fn lower_index(&mut self, e: &TExpr, env: &mut Env) -> Result<IExpr, Diagnostic> {
        Ok(match &e.kind {
            TExprKind::Var(v) => env.vars.get(v).cloned().ok_or_else(|| self.unsupported(e))?,
            TExprKind::Dim(d) => IExpr::Dim(*d),
            TExprKind::Const(Const::Int(v)) => IExpr::c(*v),
            TExprKind::Cast(a) if a.ty.is_int() => self.lower_index(a, env)?,
            TExprKind::Binary(op, a, b) => {
                let (a, b) = (self.lower_index(a, env)?, self.lower_index(b, env)?);
                match op {
                    BinOp::Add => a.add(b),
                    BinOp::Sub => a.sub(b),
                    BinOp::Mul => a.mul(b),
                    BinOp::Div => a.div(b),
                    BinOp::Rem => a.rem(b),
                    _ => return Err(self.unsupported(e)),
                }
            }
            TExprKind::Load { tensor, index } if !self.k.tensors[*tensor].shape.is_empty() || index.is_empty() => {
                if env.values.contains_key(tensor) || env.inline.contains(tensor) || !self.buf_of.contains_key(tensor) {
                    return Err(self.unsupported(e));
                }
                let mut idx = Vec::new();
                for i in index {
                    idx.push(self.lower_index(i, env)?);
                }
                let flat = self.flat_index(*tensor, &idx);
                let buf = self.buf(*tensor);
                let what = format!("indirect read of `{}`", self.k.tensors[*tensor].name);
                let access = self.access(buf, AccessKind::Read, e.span, what);
                IExpr::Load { buf, index: Box::new(flat), access }
            }
            _ => return Err(self.unsupported(e)),
        })
    }

    fn unsupported(&self, e: &TExpr) -> Diagnostic {
        Diagnostic::error("E0802", "this index expression cannot be scheduled", e.span)
            .with_label("not an affine term over index variables, dims and index tensors")
            .with_help("index with variables, dims, literals, `+ - * / %`, and integer input tensors")
    }

    /// Lower a value. Statements it needs (lets, sequential reductions) are
    /// appended to `out` before the value is used.
    pub fn lower(&mut self, e: &TExpr, env: &mut Env, out: &mut Vec<KStmt>) -> Result<VExpr, Diagnostic> {
        let ty = e.ty;
        if let Some(v) = env.reduced.get(&node_key(e)) {
            return Ok(v.clone());
        }
        Ok(match &e.kind {
            TExprKind::Const(c) => VExpr::new(VKind::Const(*c), ty),
            TExprKind::Scalar(s) => VExpr::new(VKind::Scalar(*s), ty),
            TExprKind::Dim(d) => VExpr::new(VKind::Int(IExpr::Dim(*d)), Dtype::I32).cast(ty),
            TExprKind::Var(v) => VExpr::new(VKind::Int(env.vars.get(v).cloned().ok_or_else(|| self.unsupported(e))?), Dtype::I32),
            TExprKind::Local(l) => VExpr::local(env.locals[l], ty),
            TExprKind::Load { tensor, index } => return self.lower_load(e, *tensor, index, env, out),
            TExprKind::Unary(op, a) => {
                let a = self.lower(a, env, out)?;
                arith(ty, |ct| VExpr::new(VKind::Unary(*op, Box::new(a.cast(ct))), if *op == UnOp::Not { Dtype::Bool } else { ct }))
            }
            TExprKind::Binary(op, a, b) => {
                let (a, b) = (self.lower(a, env, out)?, self.lower(b, env, out)?);
                if op.is_comparison() || op.is_logical() {
                    let ct = a.ty.compute_type();
                    VExpr::new(VKind::Binary(*op, Box::new(a.cast(ct)), Box::new(b.cast(ct))), Dtype::Bool)
                } else {
                    arith(ty, |ct| VExpr::new(VKind::Binary(*op, Box::new(a.cast(ct)), Box::new(b.cast(ct))), ct))
                }
            }
            TExprKind::Call(Builtin::Select, args) => {
                let c = self.lower(&args[0], env, out)?;
                let (x, y) = (self.lower(&args[1], env, out)?, self.lower(&args[2], env, out)?);
                VExpr::new(VKind::Select(Box::new(c), Box::new(x), Box::new(y)), ty)
            }
            TExprKind::Call(f, args) if f.is_residue() => {
                // Residue operands are u32 already (skip_if's condition a
                // bool): nothing to widen.
                let mut vs = Vec::new();
                for a in args {
                    vs.push(self.lower(a, env, out)?);
                }
                VExpr::new(VKind::Call(*f, vs), ty)
            }
            TExprKind::Call(f, args) => {
                let mut vs = Vec::new();
                for a in args {
                    vs.push(self.lower(a, env, out)?);
                }
                arith(ty, |ct| VExpr::new(VKind::Call(*f, vs.into_iter().map(|v| v.cast(ct)).collect()), ct))
            }
            TExprKind::Cast(a) => self.lower(a, env, out)?.cast(ty),
            TExprKind::Let { local, value, body } => {
                let v = self.lower(value, env, out)?;
                let id = self.local(&self.k.locals[*local].name.clone(), v.ty);
                out.push(KStmt::Decl { local: id, init: Some(v) });
                env.locals.insert(*local, id);
                self.lower(body, env, out)?
            }
            TExprKind::Reduce { op, var, body } => self.sequential_reduce(*op, *var, body, ty, env, out)?,
        })
    }

    fn lower_load(&mut self, e: &TExpr, t: TensorId, index: &[TExpr], env: &mut Env, out: &mut Vec<KStmt>) -> Result<VExpr, Diagnostic> {
        if let Some(l) = env.values.get(&t) {
            return Ok(VExpr::local(*l, self.k.tensors[t].dtype));
        }
        if let (Some(arr), Some(lane)) = (env.lane_arrays.get(&t), &env.lane) {
            return Ok(VExpr::new(VKind::ArrayGet { arr: *arr, index: lane.clone() }, self.k.tensors[t].dtype));
        }
        if env.inline.contains(&t) {
            // Recompute the element from its definition: reads of written
            // tensors are at plain variables (the race rule), so this is a
            // renaming of the defining statement's variables.
            let w = self.k.writer(t).ok_or_else(|| self.unsupported(e))?;
            let stmt = &self.k.stmts[w];
            let mut inner = env.clone();
            for (j, v) in stmt.vars.iter().enumerate() {
                let i = self.lower_index(&index[j], env)?;
                inner.vars.insert(*v, i);
            }
            let v = self.lower(&stmt.value, &mut inner, out)?;
            return Ok(v);
        }
        let mut idx = Vec::new();
        for i in index {
            idx.push(self.lower_index(i, env)?);
        }
        let flat = self.flat_index(t, &idx);
        let buf = self.buf(t);
        let what = format!("read of `{}`", self.k.tensors[t].name);
        let access = self.access(buf, AccessKind::Read, e.span, what);
        Ok(VExpr::new(VKind::Load { buf, index: flat, axes: idx, access }, self.k.tensors[t].dtype))
    }

    /// `acc = identity; for k in 0..K { acc = acc (op) body }` in one thread.
    fn sequential_reduce(&mut self, op: RedOp, var: VarId, body: &TExpr, ty: Dtype, env: &mut Env, out: &mut Vec<KStmt>) -> Result<VExpr, Diagnostic> {
        self.ir.reduction_order.insert(var, ReductionOrder::Sequential);
        let name = self.k.vars[var].name.clone();
        let acc_ty = body.ty;
        let acc = self.local(&format!("{}_{}", op.name(), name), acc_ty);
        out.push(KStmt::Decl { local: acc, init: Some(identity(op, acc_ty)) });
        let idx = if op == RedOp::Argmax {
            let i = self.local(&format!("argmax_{}_index", name), Dtype::I32);
            out.push(KStmt::Decl { local: i, init: Some(VExpr::zero(Dtype::I32)) });
            Some(i)
        } else {
            None
        };
        let k = self.ivar(&name);
        let mut inner = env.clone();
        inner.vars.insert(var, IExpr::Var(k));
        let mut body_out = Vec::new();
        if let (RedOp::Sum, Some((a, b))) = (op, tir::fma_operands(body)) {
            let (a, b) = (self.lower(a, &mut inner, &mut body_out)?, self.lower(b, &mut inner, &mut body_out)?);
            let fma = VExpr::new(VKind::Fma(Box::new(a.cast(acc_ty)), Box::new(b.cast(acc_ty)), Box::new(VExpr::local(acc, acc_ty))), acc_ty);
            body_out.push(KStmt::Assign { local: acc, value: fma });
        } else {
            let v = self.lower(body, &mut inner, &mut body_out)?;
            let vl = self.local(&format!("{}_term", name), acc_ty);
            body_out.push(KStmt::Decl { local: vl, init: Some(v) });
            let term = VExpr::local(vl, acc_ty);
            combine_into(op, acc, idx, acc_ty, term, VExpr::new(VKind::Int(IExpr::Var(k)), Dtype::I32), &mut body_out);
        }
        let extent = super::extent_expr(self.k.vars[var].extent);
        self.ir.reduction_loops.push(ReductionLoop { var: k, extent: extent.clone(), cooperative: false, granule: 1, name: format!("`{}`", name), span: self.k.vars[var].span, visits: None });
        out.push(KStmt::For { var: k, start: IExpr::c(0), end: extent, step: IExpr::c(1), unroll: false, body: body_out });
        Ok(match idx {
            Some(i) => VExpr::local(i, Dtype::I32),
            None => VExpr::local(acc, acc_ty).cast(ty),
        })
    }
}

/// Perform an operation of result type `ty`: half types compute in f32 and
/// round back after every operation.
fn arith(ty: Dtype, f: impl FnOnce(Dtype) -> VExpr) -> VExpr {
    let ct = ty.compute_type();
    let v = f(ct);
    if v.ty == Dtype::Bool {
        v
    } else {
        v.cast(ty)
    }
}

/// The neutral element of a reduction in `ty`.
pub fn identity(op: RedOp, ty: Dtype) -> VExpr {
    let c = match (op, ty.is_float()) {
        (RedOp::Sum, true) => Const::Float(0.0),
        (RedOp::Sum | RedOp::SumMod, false) => Const::Int(0),
        (RedOp::SumMod, true) => unreachable!("summod sums u32 residues (check::expr)"),
        (RedOp::Max | RedOp::Argmax, true) => Const::Float(f64::NEG_INFINITY),
        (RedOp::Min, true) => Const::Float(f64::INFINITY),
        (RedOp::Max | RedOp::Argmax, false) => Const::Int(match ty {
            Dtype::U32 => 0,
            Dtype::I64 => i64::MIN,
            _ => i32::MIN as i64,
        }),
        (RedOp::Min, false) => Const::Int(match ty {
            Dtype::U32 => u32::MAX as i64,
            Dtype::I64 => i64::MAX,
            _ => i32::MAX as i64,
        }),
    };
    VExpr::new(VKind::Const(c), ty)
}

/// Combine one term into an accumulator (and, for argmax, its index).
/// Argmax keeps the first maximum: a later term wins only when strictly
/// greater, or equal with a smaller index (as happens across lanes).
pub fn combine_into(op: RedOp, acc: LocalId, idx: Option<LocalId>, ty: Dtype, term: VExpr, term_index: VExpr, out: &mut Vec<KStmt>) {
    let a = VExpr::local(acc, ty);
    let ct = ty.compute_type();
    match op {
        RedOp::Sum => {
            let s = VExpr::new(VKind::Binary(BinOp::Add, Box::new(a.cast(ct)), Box::new(term.cast(ct))), ct).cast(ty);
            out.push(KStmt::Assign { local: acc, value: s });
        }
        RedOp::SumMod => {
            let s = VExpr::new(VKind::Call(Builtin::AddMod, vec![a, term.cast(ty)]), ty);
            out.push(KStmt::Assign { local: acc, value: s });
        }
        RedOp::Max | RedOp::Min => {
            let f = if op == RedOp::Max { Builtin::Max } else { Builtin::Min };
            let s = VExpr::new(VKind::Call(f, vec![a.cast(ct), term.cast(ct)]), ct).cast(ty);
            out.push(KStmt::Assign { local: acc, value: s });
        }
        RedOp::Argmax => {
            let i = idx.expect("argmax has an index accumulator");
            let iv = VExpr::local(i, Dtype::I32);
            let gt = VExpr::new(VKind::Binary(BinOp::Gt, Box::new(term.clone().cast(ct)), Box::new(a.clone().cast(ct))), Dtype::Bool);
            let eq = VExpr::new(VKind::Binary(BinOp::Eq, Box::new(term.clone().cast(ct)), Box::new(a.clone().cast(ct))), Dtype::Bool);
            let lower = VExpr::new(VKind::Binary(BinOp::Lt, Box::new(term_index.clone()), Box::new(iv.clone())), Dtype::Bool);
            let tie = VExpr::new(VKind::Binary(BinOp::And, Box::new(eq), Box::new(lower)), Dtype::Bool);
            let take = VExpr::new(VKind::Binary(BinOp::Or, Box::new(gt), Box::new(tie)), Dtype::Bool);
            // Evaluate the decision once, before either accumulator changes.
            out.push(KStmt::Assign { local: i, value: VExpr::new(VKind::Select(Box::new(take.clone()), Box::new(term_index), Box::new(iv)), Dtype::I32) });
            // The value follows with a plain `>`: on a tie the value is
            // unchanged either way, so only the index needs the tie rule.
            let take_value = VExpr::new(VKind::Binary(BinOp::Gt, Box::new(term.clone().cast(ct)), Box::new(a.clone().cast(ct))), Dtype::Bool);
            out.push(KStmt::Assign { local: acc, value: VExpr::new(VKind::Select(Box::new(take_value), Box::new(term), Box::new(a)), ty) });
        }
    }
}
