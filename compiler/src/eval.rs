//! An evaluator of the typed IR, in the two meanings the oracles have:
//! `Exact` (real arithmetic in f64) and `Mirror` (the kernel's dtypes,
//! roundings, fused multiply-adds and reduction order). The report uses it
//! to measure observed error; a test checks it against the generated
//! oracles, so the two implementations keep each other honest.

use crate::kir::{KernelIr, ReductionOrder};
use crate::syntax::ast::{BinOp, RedOp, UnOp};
use crate::tir::{self, Builtin, Const, Dim, Kernel, TExpr, TExprKind, TensorRole};
use crate::types::Dtype;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Exact,
    Mirror,
}

/// Round a value to a dtype (mirror) or keep it (exact). Halves round from
/// f32, as the kernel converts through f32.
fn round(mode: Mode, ty: Dtype, x: f64) -> f64 {
    if mode == Mode::Exact {
        return if ty.is_int() { x.trunc() } else { x };
    }
    match ty {
        Dtype::F16 => half::f16::from_f32(x as f32).to_f64(),
        Dtype::Bf16 => half::bf16::from_f32(x as f32).to_f64(),
        Dtype::F32 => x as f32 as f64,
        Dtype::I32 => (x as i64 as i32) as f64,
        Dtype::U32 => (x as i64 as u32) as f64,
        Dtype::I64 => x.trunc(),
        _ => x,
    }
}

struct Ev<'a> {
    k: &'a Kernel,
    ir: &'a KernelIr,
    mode: Mode,
    dims: &'a [i64],
    scalars: &'a [f64],
    tensors: Vec<Vec<f64>>,
    vars: Vec<f64>,
    locals: Vec<f64>,
    /// The first error met (an index outside its tensor). The recursion
    /// returns plain values, not `Result`s (a `Result` per node cost a third
    /// of the soundness sampler's time): after an error it goes on with
    /// zeros to the end of the element, and the caller reports the error.
    error: Option<String>,
}

impl<'a> Ev<'a> {
    fn new(k: &'a Kernel, ir: &'a KernelIr, mode: Mode, dims: &'a [i64], scalars: &'a [f64]) -> Ev<'a> {
        Ev { k, ir, mode, dims, scalars, tensors: vec![Vec::new(); k.tensors.len()], vars: vec![0.0; k.vars.len()], locals: vec![0.0; k.locals.len()], error: None }
    }

    fn dim(&self, d: Dim) -> i64 {
        match d {
            Dim::Sym(id) => self.dims[id],
            Dim::Lit(v) => v,
        }
    }

    fn len(&self, t: usize) -> usize {
        self.k.tensors[t].shape.iter().map(|d| self.dim(*d)).product::<i64>().max(0) as usize
    }

    /// Perform in the compute type and round to the result type.
    fn op(&self, ty: Dtype, x: f64) -> f64 {
        round(self.mode, ty, x)
    }

    fn f32op(&self, ty: Dtype, f: impl Fn(f32) -> f32, g: impl Fn(f64) -> f64, x: f64) -> f64 {
        match (self.mode, ty) {
            (Mode::Mirror, Dtype::F16 | Dtype::Bf16 | Dtype::F32) => round(self.mode, ty, f(x as f32) as f64),
            _ => g(x),
        }
    }

    fn eval(&mut self, e: &TExpr) -> f64 {
        let ty = e.ty;
        match &e.kind {
            TExprKind::Const(Const::Float(v)) => self.op(ty, *v),
            TExprKind::Const(Const::Int(v)) => self.op(ty, *v as f64),
            TExprKind::Const(Const::Bool(b)) => *b as u8 as f64,
            TExprKind::Scalar(s) => self.op(ty, self.scalars[*s]),
            TExprKind::Dim(d) => self.dims[*d] as f64,
            TExprKind::Var(v) => self.vars[*v],
            TExprKind::Local(l) => self.locals[*l],
            TExprKind::Load { tensor, index } => {
                // `k` outlives the evaluator: its shape is borrowed, not
                // cloned (a clone per load was a fifth of the sampler's time).
                let k = self.k;
                let shape = &k.tensors[*tensor].shape;
                let mut flat: i64 = 0;
                for (j, i) in index.iter().enumerate() {
                    let iv = self.eval(i) as i64;
                    let d = self.dim(shape[j]);
                    if iv < 0 || iv >= d {
                        self.error.get_or_insert_with(|| format!("index {} out of range 0..{} on axis {} of `{}`", iv, d, j, k.tensors[*tensor].name));
                        return 0.0;
                    }
                    flat = flat * d + iv;
                }
                self.tensors[*tensor][flat as usize]
            }
            TExprKind::Unary(UnOp::Neg, a) => -self.eval(a),
            TExprKind::Unary(UnOp::Not, a) => (self.eval(a) == 0.0) as u8 as f64,
            TExprKind::Binary(op, a, b) => {
                let (x, y) = (self.eval(a), self.eval(b));
                let bool_of = |c: bool| c as u8 as f64;
                match op {
                    BinOp::Eq => bool_of(x == y),
                    BinOp::Ne => bool_of(x != y),
                    BinOp::Lt => bool_of(x < y),
                    BinOp::Le => bool_of(x <= y),
                    BinOp::Gt => bool_of(x > y),
                    BinOp::Ge => bool_of(x >= y),
                    BinOp::And => bool_of(x != 0.0 && y != 0.0),
                    BinOp::Or => bool_of(x != 0.0 || y != 0.0),
                    _ if ty.is_int() => {
                        let (x, y) = (x as i64, y as i64);
                        let r = match op {
                            BinOp::Add => x.wrapping_add(y),
                            BinOp::Sub => x.wrapping_sub(y),
                            BinOp::Mul => x.wrapping_mul(y),
                            BinOp::Div => x.checked_div(y).unwrap_or(0),
                            _ => x.checked_rem(y).unwrap_or(0),
                        };
                        self.op(ty, r as f64)
                    }
                    _ => {
                        let f32r = |x: f32, y: f32| match op {
                            BinOp::Add => x + y,
                            BinOp::Sub => x - y,
                            BinOp::Mul => x * y,
                            _ => x / y,
                        };
                        let f64r = |x: f64, y: f64| match op {
                            BinOp::Add => x + y,
                            BinOp::Sub => x - y,
                            BinOp::Mul => x * y,
                            _ => x / y,
                        };
                        match (self.mode, ty) {
                            (Mode::Mirror, Dtype::F16 | Dtype::Bf16 | Dtype::F32) => round(self.mode, ty, f32r(x as f32, y as f32) as f64),
                            _ => f64r(x, y),
                        }
                    }
                }
            }
            TExprKind::Call(f, args) => {
                // At most three arguments (`select`): no allocation per call.
                debug_assert!(args.len() <= 3, "builtins take at most three arguments");
                let mut v = [0.0f64; 3];
                for (slot, a) in v.iter_mut().zip(args) {
                    *slot = self.eval(a);
                }
                match f {
                    Builtin::Exp => self.f32op(ty, f32::exp, f64::exp, v[0]),
                    Builtin::Log => self.f32op(ty, f32::ln, f64::ln, v[0]),
                    Builtin::Tanh => self.f32op(ty, f32::tanh, f64::tanh, v[0]),
                    Builtin::Sqrt => self.f32op(ty, f32::sqrt, f64::sqrt, v[0]),
                    Builtin::Rsqrt => self.f32op(ty, |x| 1.0 / x.sqrt(), |x| 1.0 / x.sqrt(), v[0]),
                    Builtin::Abs => v[0].abs(),
                    Builtin::Min => v[0].min(v[1]),
                    Builtin::Max => v[0].max(v[1]),
                    Builtin::Select => {
                        if v[0] != 0.0 {
                            v[1]
                        } else {
                            v[2]
                        }
                    }
                    // Residues are below 2^32: exact in f64, and their
                    // products exact in u64.
                    Builtin::MulMod => ((v[0] as u64 * v[1] as u64) % self.modulus_q()) as f64,
                    Builtin::AddMod => ((v[0] as u64 + v[1] as u64) % self.modulus_q()) as f64,
                    Builtin::Vp => self.k.modulus.map_or(0, |m| m.valuation(v[0] as u64)) as f64,
                    // Exact: the dense value (what skipping must equal);
                    // mirror: as the kernel computes it.
                    Builtin::SkipIf if self.mode == Mode::Mirror && v[0] != 0.0 => 0.0,
                    Builtin::SkipIf => v[1],
                }
            }
            TExprKind::Cast(a) => {
                let x = self.eval(a);
                match (self.mode, ty) {
                    (Mode::Exact, t) if t.is_float() => x,
                    (Mode::Mirror, Dtype::F16 | Dtype::Bf16) => round(self.mode, ty, x as f32 as f64),
                    (_, Dtype::Bool) => (x != 0.0) as u8 as f64,
                    _ => round(self.mode, ty, x),
                }
            }
            TExprKind::Let { local, value, body } => {
                let v = self.eval(value);
                self.locals[*local] = v;
                self.eval(body)
            }
            TExprKind::Reduce { op, var, body } => self.reduce(*op, *var, body),
        }
    }

    fn combine(&self, op: RedOp, ty: Dtype, acc: f64, term: f64) -> f64 {
        match op {
            RedOp::Sum => match (self.mode, ty) {
                (Mode::Mirror, Dtype::F16 | Dtype::Bf16 | Dtype::F32) => round(self.mode, ty, (acc as f32 + term as f32) as f64),
                _ if ty.is_int() => (acc as i64).wrapping_add(term as i64) as f64,
                _ => acc + term,
            },
            RedOp::SumMod => ((acc as u64 + term as u64) % self.modulus_q()) as f64,
            RedOp::Max | RedOp::Argmax => acc.max(term),
            RedOp::Min => acc.min(term),
        }
    }

    /// The kernel's `p^k` (checked: residue builtins need a modulus).
    fn modulus_q(&self) -> u64 {
        self.k.modulus.map_or(1, |m| m.q() as u64)
    }

    fn term(&mut self, op: RedOp, var: usize, body: &TExpr, k: i64, acc: f64) -> f64 {
        self.vars[var] = k as f64;
        if let (Mode::Mirror, RedOp::Sum, Some((a, b))) = (self.mode, op, tir::fma_operands(body)) {
            let (x, y) = (self.eval(a), self.eval(b));
            return match body.ty {
                Dtype::F32 => (x as f32).mul_add(y as f32, acc as f32) as f64,
                _ => x.mul_add(y, acc),
            };
        }
        let t = self.eval(body);
        self.combine(op, body.ty, acc, t)
    }

    fn reduce(&mut self, op: RedOp, var: usize, body: &TExpr) -> f64 {
        let ext = self.dim(self.k.vars[var].extent);
        let bt = body.ty;
        let ident = match (op, bt.is_float()) {
            (RedOp::Sum | RedOp::SumMod, _) => 0.0,
            (RedOp::Max | RedOp::Argmax, true) => f64::NEG_INFINITY,
            (RedOp::Min, true) => f64::INFINITY,
            (RedOp::Max | RedOp::Argmax, false) => i64::MIN as f64,
            (RedOp::Min, false) => i64::MAX as f64,
        };
        if op == RedOp::Argmax {
            // The first maximum wins, in every order.
            let (mut best, mut at) = (ident, 0i64);
            for k in 0..ext {
                self.vars[var] = k as f64;
                let v = self.eval(body);
                if v > best {
                    best = v;
                    at = k;
                }
            }
            return at as f64;
        }
        let order = self.ir.reduction_order.get(&var).copied().unwrap_or(ReductionOrder::Sequential);
        match (self.mode, order) {
            (Mode::Mirror, ReductionOrder::Block { threads, warp } | ReductionOrder::BlockRuns { threads, warp, .. }) => {
                // Runs of one index (`Block`) or of `width` (`BlockRuns`).
                let width = match order {
                    ReductionOrder::BlockRuns { width, .. } => width as i64,
                    _ => 1,
                };
                let (threads, warp) = (threads as i64, warp as usize);
                let mut parts = vec![ident; threads as usize];
                for t in 0..threads {
                    let mut acc = ident;
                    let mut start = t * width;
                    while start < ext {
                        for k in start..(start + width).min(ext) {
                            acc = self.term(op, var, body, k, acc);
                        }
                        start += threads * width;
                    }
                    parts[t as usize] = acc;
                }
                let f = |a: f64, b: f64| self.combine(op, bt, a, b);
                // Lane l takes f(own, partner's) at each step; both lanes of
                // a pair are updated from their old values, in place.
                let butterfly = |vals: &mut [f64]| {
                    let mut mask = vals.len() / 2;
                    while mask >= 1 {
                        for l in 0..vals.len() {
                            let p = l ^ mask;
                            if l < p {
                                let (a, b) = (vals[l], vals[p]);
                                vals[l] = f(a, b);
                                vals[p] = f(b, a);
                            }
                        }
                        mask /= 2;
                    }
                };
                let nwarps = parts.len() / warp;
                let mut firsts = Vec::new();
                for w in 0..nwarps {
                    let mut lanes = parts[w * warp..(w + 1) * warp].to_vec();
                    butterfly(&mut lanes);
                    firsts.push(lanes[0]);
                }
                let mut lanes: Vec<f64> = (0..warp).map(|l| if l < nwarps { firsts[l] } else { ident }).collect();
                butterfly(&mut lanes);
                lanes[0]
            }
            // Each chain in order, a group's chains in order, the groups' tree.
            (Mode::Mirror, ReductionOrder::Columns { groups, chains }) => {
                let (groups, chains) = (groups as i64, chains as i64);
                let mut parts = Vec::new();
                for g in 0..groups {
                    let mut total = ident;
                    for u in 0..chains {
                        let mut acc = ident;
                        let mut k = g + u * groups;
                        while k < ext {
                            acc = self.term(op, var, body, k, acc);
                            k += groups * chains;
                        }
                        total = self.combine(op, bt, total, acc);
                    }
                    parts.push(total);
                }
                let mut s = parts.len() / 2;
                while s >= 1 {
                    for g in 0..s {
                        parts[g] = self.combine(op, bt, parts[g], parts[g + s]);
                    }
                    s /= 2;
                }
                parts[0]
            }
            // Products on the matrix unit as its assumption describes it
            // (f16 or bf16 operands: each product is exact in f64).
            (Mode::Mirror, ReductionOrder::MatrixUnit { k, per_promotion }) if op == RedOp::Sum && tir::fma_operands(body).is_some() => {
                let (a, b) = tir::fma_operands(body).expect("checked in the guard");
                let products: Vec<f64> = (0..ext)
                    .map(|i| {
                        self.vars[var] = i as f64;
                        self.eval(a) * self.eval(b)
                    })
                    .collect();
                use tokitai_contracts::fp::matrix_unit::{emulate_sum, MIRROR_BLOCK};
                emulate_sum(&products, k as usize, per_promotion as usize, MIRROR_BLOCK)
            }
            _ => {
                let mut acc = ident;
                for k in 0..ext {
                    acc = self.term(op, var, body, k, acc);
                }
                acc
            }
        }
    }
}

/// Evaluate a kernel. `tensors` holds every parameter tensor's values in
/// signature order (outputs may be empty); returns every output and inout,
/// in signature order.
pub fn run(k: &Kernel, ir: &KernelIr, mode: Mode, dims: &[i64], scalars: &[f64], tensors: &[Vec<f64>]) -> Result<Vec<Vec<f64>>, String> {
    let mut ev = Ev::new(k, ir, mode, dims, scalars);
    let params: Vec<usize> = k.params.iter().filter_map(|p| if let tir::Param::Tensor(t) = p { Some(*t) } else { None }).collect();
    for (i, t) in params.iter().enumerate() {
        let n = ev.len(*t);
        ev.tensors[*t] = if k.tensors[*t].role == TensorRole::Output { vec![0.0; n] } else { tensors.get(i).cloned().unwrap_or_default() };
        if ev.tensors[*t].len() != n {
            return Err(format!("`{}` needs {} elements, got {}", k.tensors[*t].name, n, ev.tensors[*t].len()));
        }
    }
    for (t, info) in k.tensors.iter().enumerate() {
        if info.role == TensorRole::Intermediate {
            ev.tensors[t] = vec![0.0; ev.len(t)];
        }
    }
    for s in &k.stmts {
        let extents: Vec<i64> = s.vars.iter().map(|v| ev.dim(k.vars[*v].extent)).collect();
        let total: i64 = extents.iter().product();
        for flat in 0..total {
            let mut rest = flat;
            for (j, v) in s.vars.iter().enumerate().rev() {
                ev.vars[*v] = (rest % extents[j]) as f64;
                rest /= extents[j];
            }
            let value = ev.eval(&s.value);
            if let Some(e) = ev.error.take() {
                return Err(e);
            }
            ev.tensors[s.target][flat as usize] = round(mode, k.tensors[s.target].dtype, value);
        }
    }
    Ok(params.iter().filter(|t| k.tensors[**t].role != TensorRole::Input).map(|t| ev.tensors[*t].clone()).collect())
}

/// Does a `requires` predicate hold for these dims and scalars?
pub fn holds(k: &Kernel, pred: &TExpr, dims: &[i64], scalars: &[f64]) -> bool {
    let ir_stub = KernelIr::stub();
    let mut ev = Ev::new(k, &ir_stub, Mode::Exact, dims, scalars);
    let v = ev.eval(pred);
    ev.error.is_none() && v != 0.0
}

/// The value of an integer contract bound (a dim term).
pub fn int_value(k: &Kernel, e: &TExpr, dims: &[i64]) -> Option<i64> {
    let ir_stub = KernelIr::stub();
    let mut ev = Ev::new(k, &ir_stub, Mode::Exact, dims, &[]);
    let v = ev.eval(e);
    ev.error.is_none().then_some(v as i64)
}

/// Round host values to a storage dtype (inputs must be representable).
pub fn to_storage(ty: Dtype, x: f64) -> f64 {
    round(Mode::Mirror, ty, x)
}
