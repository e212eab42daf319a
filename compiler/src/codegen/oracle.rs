//! Rust CPU oracles, printed from the typed IR.
//!
//! - `exact`: every value in f64 (integers in i64), casts to floats are the
//!   identity: the real-number meaning that tolerances are measured against.
//! - `mirror`: the kernel's own dtypes (halves computed in f32 and rounded
//!   after every operation), its fused multiply-adds, and its reduction
//!   order (sequential, or the block's strided partials and butterflies as
//!   recorded in `KernelIr::reduction_order`). Library functions (exp, tanh)
//!   are Rust's, so the mirror is not bit-identical there.
//!
//! The exact oracle accepts f64 buffers for float inputs too (values off
//! the dtype's grid: finite differences of the real-valued function).
//! Both take dims, scalars and buffers dynamically (`tk_rt::Buf`), check
//! the `requires` clauses and every length, and never panic.

use crate::kir::{KernelIr, ReductionOrder};
use crate::syntax::ast::{BinOp, RedOp, UnOp};
use crate::tir::{self, Builtin, Const, Contract, Dim, Kernel, Param, TExpr, TExprKind, TensorRole};
use crate::types::Dtype;
use std::fmt::Write;

pub const RUNTIME: &str = concat!(include_str!("oracle_rt.rs.txt"), include_str!("cpu_gemm_rt.rs.txt"), include_str!("cpu_observe_rt.rs.txt"));

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Exact,
    Mirror,
}

/// `a + b mod q` on residues, widened to u64, as value type `vt`.
fn addmod_text(a: &str, b: &str, q: i64, vt: &str) -> String {
    format!("((((({}) as u64) + (({}) as u64)) % {}u64) as {})", a, b, q, vt)
}

/// The oracle module of one kernel (`pub mod NAME { ... }`).
pub fn kernel_oracles(k: &Kernel, ir: &KernelIr) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "/// Oracles of kernel `{}`.", k.name);
    for l in k.doc.lines() {
        let _ = writeln!(s, "/// {}", l);
    }
    let _ = writeln!(s, "#[allow(non_snake_case, unused_variables, unused_mut, unused_parens, clippy::all)]");
    let _ = writeln!(s, "pub mod {} {{", k.name);
    let _ = writeln!(s, "    use super::tk_rt::{{self, Buf}};");
    s.push_str(&check_requires_fn(k));
    s.push_str(&oracle_fn(k, ir, Mode::Mirror));
    s.push_str(MIRROR_ON_BUFFERS);
    s.push_str(&oracle_fn(k, ir, Mode::Exact));
    s.push_str(&super::cpu::cpu_fn(k, ir));
    s.push_str("}\n");
    s
}

/// The mirror on owned buffers (every tensor in one slice, outputs and
/// inouts overwritten), for tests and tools: moves each buffer in and back.
const MIRROR_ON_BUFFERS: &str = "    /// The mirror oracle on owned buffers, every tensor parameter in signature order; outputs and inouts are overwritten.
    pub fn mirror(dims: &[i64], scalars: &[f64], bufs: &mut [Buf]) -> Result<(), String> {
        let mut args: Vec<tk_rt::Arg<'_>> = bufs.iter_mut().map(|b| tk_rt::Arg::Own(std::mem::take(b))).collect();
        let result = mirror_args(dims, scalars, &mut args);
        for (b, a) in bufs.iter_mut().zip(args) {
            if let tk_rt::Arg::Own(x) = a {
                *b = x;
            }
        }
        result
    }
";

pub(super) fn value_type(d: Dtype, mode: Mode) -> &'static str {
    match (mode, d) {
        (_, Dtype::Bool) => "bool",
        (Mode::Exact, d) if d.is_float() => "f64",
        (Mode::Exact, _) => "i64",
        (Mode::Mirror, Dtype::F16 | Dtype::Bf16 | Dtype::F32) => "f32",
        (Mode::Mirror, Dtype::F64) => "f64",
        (Mode::Mirror, Dtype::I32) => "i32",
        (Mode::Mirror, Dtype::U32) => "u32",
        (Mode::Mirror, Dtype::I64) => "i64",
    }
}

pub(super) fn dims_prologue(k: &Kernel) -> String {
    let mut s = format!(
        "        if dims.len() != {} {{ return Err(format!(\"expected {} dims ({}), got {{}}\", dims.len())); }}\n",
        k.dims.len(),
        k.dims.len(),
        k.dims.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    for (i, d) in k.dims.iter().enumerate() {
        let _ = writeln!(s, "        let d_{}: i64 = dims[{}];", d.name, i);
    }
    let _ = writeln!(
        s,
        "        if scalars.len() != {} {{ return Err(format!(\"expected {} scalars, got {{}}\", scalars.len())); }}",
        k.scalars.len(),
        k.scalars.len()
    );
    s
}

fn check_requires_fn(k: &Kernel) -> String {
    let mut s = String::from("    /// Check the kernel's `requires` on dims and scalars.\n");
    s.push_str("    pub fn check_requires(dims: &[i64], scalars: &[f64]) -> Result<(), String> {\n");
    s.push_str(&dims_prologue(k));
    for (i, sc) in k.scalars.iter().enumerate() {
        let _ = writeln!(s, "        let sc_{}: {} = scalars[{}] as {};", sc.name, value_type(sc.dtype, Mode::Exact), i, value_type(sc.dtype, Mode::Exact));
    }
    let _ = writeln!(s, "        for (name, d) in [{}] {{ if d < 1 {{ return Err(format!(\"dimension {{}} = {{}} must be at least 1\", name, d)); }} }}", k.dims.iter().map(|d| format!("(\"{}\", d_{})", d.name, d.name)).collect::<Vec<_>>().join(", "));
    for c in &k.requires {
        if let Contract::Pred { expr, text, .. } = c {
            let g = Gen::new(k, None, Mode::Exact);
            let _ = writeln!(s, "        if !({}) {{ return Err(\"requires {} violated\".to_string()); }}", g.expr(expr), text.replace('"', "\\\""));
        }
    }
    s.push_str("        Ok(())\n    }\n");
    s
}

fn oracle_fn(k: &Kernel, ir: &KernelIr, mode: Mode) -> String {
    let mut s = String::new();
    let (name, sig) = match mode {
        Mode::Mirror => (
            "mirror_args",
            "(dims: &[i64], scalars: &[f64], args: &mut [tk_rt::Arg<'_>]) -> Result<(), String>",
        ),
        Mode::Exact => ("exact", "(dims: &[i64], scalars: &[f64], args: &[Buf]) -> Result<Vec<Vec<f64>>, String>"),
    };
    let doc = match mode {
        Mode::Mirror => "Mirror oracle: the kernel's dtypes and operation order. `args` holds every tensor parameter in signature order, inputs borrowed (a launch copies nothing); outputs and inouts are owned and overwritten.",
        Mode::Exact => "Exact oracle: real arithmetic (f64). Returns each output and inout, in signature order, as f64.",
    };
    let _ = writeln!(s, "    /// {}", doc);
    let _ = writeln!(s, "    pub fn {}{} {{", name, sig);
    s.push_str("        check_requires(dims, scalars)?;\n");
    s.push_str(&dims_prologue(k));
    let tensors: Vec<usize> = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).collect();
    let _ = writeln!(s, "        if args.len() != {} {{ return Err(format!(\"expected {} tensors, got {{}}\", args.len())); }}", tensors.len(), tensors.len());
    s.push_str(&scalars_prologue(k, mode));
    // Every tensor as a vector of value-typed elements.
    for (ai, t) in tensors.iter().enumerate() {
        let info = &k.tensors[*t];
        let len = len_expr(k, &info.shape);
        // The exact oracle also takes real-valued (f64) data for a float
        // tensor: inputs off the dtype's grid, as finite differences need.
        let also_f64 = if mode == Mode::Exact && info.dtype.is_float() && info.dtype != Dtype::F64 && info.role != TensorRole::Output { format!(" && args[{}].dtype() != \"f64\"", ai) } else { String::new() };
        let _ = writeln!(
            s,
            "        if (args[{ai}].dtype() != \"{dt}\"{also}) || args[{ai}].len() as i64 != {len} {{ return Err(format!(\"`{n}` must be {dt} with {{}} elements, got {{}} with {{}}\", {len}, args[{ai}].dtype(), args[{ai}].len())); }}",
            ai = ai,
            dt = info.dtype,
            also = also_f64,
            len = len,
            n = info.name
        );
        let vt = value_type(info.dtype, mode);
        let init = if info.role == TensorRole::Output {
            format!("vec![Default::default(); ({}) as usize]", len)
        } else {
            match (mode, vt) {
                (Mode::Exact, "f64") => format!("args[{}].to_f64()", ai),
                (Mode::Exact, _) if info.dtype == Dtype::Bool => format!("args[{}].to_i64().into_iter().map(|x| x != 0).collect()", ai),
                (Mode::Exact, _) => format!("args[{}].to_i64()", ai),
                (Mode::Mirror, "f32") => format!("args[{}].to_f32()", ai),
                (Mode::Mirror, "f64") => format!("args[{}].to_f64()", ai),
                (Mode::Mirror, "bool") => format!("args[{}].to_i64().into_iter().map(|x| x != 0).collect()", ai),
                (Mode::Mirror, other) => format!("args[{}].to_i64().into_iter().map(|x| x as {}).collect()", ai, other),
            }
        };
        let _ = writeln!(s, "        let mut t_{}: Vec<{}> = {};", info.name, vt, init);
        s.push_str(&value_range_check(k, info));
    }
    for (t, info) in k.tensors.iter().enumerate() {
        if info.role == TensorRole::Intermediate {
            let _ = writeln!(s, "        let mut t_{}: Vec<{}> = vec![Default::default(); ({}) as usize];", info.name, value_type(info.dtype, mode), len_expr(k, &info.shape));
            let _ = t;
        }
    }
    let g = Gen::new(k, Some(ir), mode);
    for st in &k.stmts {
        s.push_str(&g.statement(st));
    }
    match mode {
        Mode::Mirror => {
            for (ai, t) in tensors.iter().enumerate() {
                let info = &k.tensors[*t];
                if info.role == TensorRole::Input {
                    continue;
                }
                let n = &info.name;
                let conv = match info.dtype {
                    Dtype::F16 => format!("Buf::F16(t_{}.iter().map(|x| half::f16::from_f32(*x)).collect())", n),
                    Dtype::Bf16 => format!("Buf::Bf16(t_{}.iter().map(|x| half::bf16::from_f32(*x)).collect())", n),
                    Dtype::F32 => format!("Buf::F32(t_{})", n),
                    Dtype::F64 => format!("Buf::F64(t_{})", n),
                    Dtype::I32 => format!("Buf::I32(t_{})", n),
                    Dtype::U32 => format!("Buf::U32(t_{})", n),
                    Dtype::I64 => format!("Buf::I64(t_{})", n),
                    Dtype::Bool => format!("Buf::Bool(t_{})", n),
                };
                let _ = writeln!(s, "        args[{}] = tk_rt::Arg::Own({});", ai, conv);
            }
            s.push_str("        Ok(())\n");
        }
        Mode::Exact => {
            let outs: Vec<String> = tensors
                .iter()
                .filter(|t| k.tensors[**t].role != TensorRole::Input)
                .map(|t| {
                    let info = &k.tensors[*t];
                    if info.dtype.is_float() {
                        format!("t_{}", info.name)
                    } else if info.dtype == Dtype::Bool {
                        format!("t_{}.iter().map(|x| *x as u8 as f64).collect()", info.name)
                    } else {
                        format!("t_{}.iter().map(|x| *x as f64).collect()", info.name)
                    }
                })
                .collect();
            let _ = writeln!(s, "        Ok(vec![{}])", outs.join(", "));
        }
    }
    s.push_str("    }\n");
    s
}

/// The check of an index tensor's value contract (`requires idx in [lo,
/// hi)`) over `t_NAME`, a line; empty where it has none.
pub(super) fn value_range_check(k: &Kernel, info: &tir::TensorInfo) -> String {
    let Some(r) = &info.value_range else { return String::new() };
    let g = Gen::new(k, None, Mode::Exact);
    let (lo, hi) = (g.expr(&r.lo), g.expr(&r.hi));
    let lo_op = if r.lo_closed { "<" } else { "<=" };
    let hi_op = if r.hi_closed { ">" } else { ">=" };
    format!(
        "        for (i, x) in t_{n}.iter().enumerate() {{ let x = *x as f64; if x {lo_op} ({lo}) as f64 || x {hi_op} ({hi}) as f64 {{ return Err(format!(\"requires {text} violated: `{n}`[{{}}] = {{}}\", i, x)); }} }}\n",
        n = info.name,
        lo_op = lo_op,
        hi_op = hi_op,
        lo = lo,
        hi = hi,
        text = r.text.replace('"', "\\\"")
    )
}

/// Each scalar as a value of the type `mode` computes it in (`sc_NAME`).
pub(super) fn scalars_prologue(k: &Kernel, mode: Mode) -> String {
    let mut s = String::new();
    for (i, sc) in k.scalars.iter().enumerate() {
        let vt = value_type(sc.dtype, mode);
        let conv = match (mode, sc.dtype) {
            (Mode::Mirror, Dtype::F16) => format!("tk_rt::rf16(scalars[{}] as f32)", i),
            (Mode::Mirror, Dtype::Bf16) => format!("tk_rt::rbf16(scalars[{}] as f32)", i),
            (_, Dtype::Bool) => format!("scalars[{}] != 0.0", i),
            _ => format!("scalars[{}] as {}", i, vt),
        };
        let _ = writeln!(s, "        let sc_{}: {} = {};", sc.name, vt, conv);
    }
    s
}

pub(super) fn len_expr(k: &Kernel, shape: &[Dim]) -> String {
    if shape.is_empty() {
        return "1i64".into();
    }
    shape.iter().map(|d| dim_expr(k, *d)).collect::<Vec<_>>().join(" * ")
}

pub(super) fn dim_expr(k: &Kernel, d: Dim) -> String {
    match d {
        Dim::Sym(id) => format!("d_{}", k.dims[id].name),
        Dim::Lit(v) => format!("{}i64", v),
    }
}

pub(super) struct Gen<'a> {
    pub(super) k: &'a Kernel,
    pub(super) ir: Option<&'a KernelIr>,
    pub(super) mode: Mode,
    /// Expressions printed as a given text instead (by node address): a
    /// contraction's sum, read from its accumulator.
    pub(super) subst: std::cell::RefCell<Vec<(usize, String)>>,
    /// How the CPU schedule reads a tensor instead of the mirror's vector
    /// (`codegen::cpu`): by tensor id.
    pub(super) loads: Vec<(tir::TensorId, LoadAs)>,
    /// Print a block order's per-thread partials as blocks of consecutive
    /// indices, one a thread (the CPU schedule's row form: the same terms
    /// in the same order per thread, a loop over the threads that
    /// vectorises), instead of each thread's strided walk.
    pub(super) blocked: bool,
}

/// A tensor read in the CPU schedule (`codegen::cpu`).
#[derive(Clone, Debug)]
pub(super) enum LoadAs {
    /// From a typed slice (`tk_rt::cpu::ld`): the slice's expression and
    /// what its index is relative to (`base`: a chunk's piece), if any.
    Slice { slice: String, base: Option<String> },
    /// A local holding the element the statement computes (an
    /// intermediate, or an output read at its own element).
    Local(String),
    /// A row in an f32 buffer of the row's length, indexed by the load's
    /// last index (a variable ranging over that length: in bounds).
    Row(String),
}

impl<'a> Gen<'a> {
    pub(super) fn new(k: &'a Kernel, ir: Option<&'a KernelIr>, mode: Mode) -> Gen<'a> {
        Gen { k, ir, mode, subst: Default::default(), loads: Vec::new(), blocked: false }
    }
    /// Read these tensors as given (`LoadAs`).
    pub(super) fn reading(mut self, loads: Vec<(tir::TensorId, LoadAs)>) -> Gen<'a> {
        self.loads = loads;
        self
    }
    pub(super) fn blocked(mut self) -> Gen<'a> {
        self.blocked = true;
        self
    }
    pub(super) fn var(&self, v: tir::VarId) -> String {
        format!("v_{}_{}", self.k.vars[v].name, v)
    }

    /// Does every value of loop variable `v` (`0..extent`) fit an i32?
    /// A literal extent is read; a dim's is what the CPU schedule's tasks
    /// check before they run (`codegen::cpu::own_values`).
    fn var_fits_i32(&self, v: tir::VarId) -> bool {
        match self.k.vars[v].extent {
            tir::Dim::Lit(n) => (0..=i32::MAX as i64).contains(&n),
            tir::Dim::Sym(_) => true,
        }
    }

    pub(super) fn flat(&self, t: usize, index: &[String]) -> String {
        let shape = &self.k.tensors[t].shape;
        if shape.is_empty() {
            return "0i64".into();
        }
        let mut acc = String::new();
        for (j, (d, i)) in shape.iter().zip(index).enumerate() {
            acc = if j == 0 { format!("({})", i) } else { format!("({} * {} + ({}))", acc, dim_expr(self.k, *d), i) };
        }
        acc
    }

    /// One statement: its loop nest, in parallel over ranges of the
    /// outermost variable (each element is written once, the race rule
    /// says, so the ranges are independent); values are collected, then
    /// stored in order.
    fn statement(&self, st: &tir::Stmt) -> String {
        let mut s = String::new();
        let name = &self.k.tensors[st.target].name;
        let vt = value_type(self.k.tensors[st.target].dtype, self.mode);
        let _ = writeln!(s, "        // {}", name);
        let idx: Vec<String> = st.vars.iter().map(|v| self.var(*v)).collect();
        let value = self.expr(&st.value);
        let flat = self.flat(st.target, &idx);
        let Some((first, rest)) = st.vars.split_first() else {
            let _ = writeln!(s, "        let value = {};", value);
            let _ = writeln!(s, "        tk_rt::set(&mut t_{}, {}, value, \"{}\")?;", name, flat, name);
            return s;
        };
        if let Some(text) = self.contraction_statement(st) {
            s.push_str(&text);
            return s;
        }
        let extents: Vec<String> = st.vars.iter().map(|v| dim_expr(self.k, self.k.vars[*v].extent)).collect();
        // The work estimate that decides whether to split: elements times
        // the length of the (first) reduction each element runs.
        let mut work = extents.clone();
        if let Some(TExprKind::Reduce { var, .. }) = tir::top_reductions(&st.value).first().map(|r| &r.kind) {
            work.push(dim_expr(self.k, self.k.vars[*var].extent));
        }
        let _ = writeln!(s, "        let parts = tk_rt::par_ranges({}, {}, |lo: i64, hi: i64| -> Result<Vec<(i64, {})>, String> {{", extents[0], work.join(" * "), vt);
        let _ = writeln!(s, "            let mut out = Vec::new();");
        let _ = writeln!(s, "            for {} in lo..hi {{", self.var(*first));
        let mut indent = String::from("                ");
        for v in rest {
            let _ = writeln!(s, "{}for {} in 0..{} {{", indent, self.var(*v), dim_expr(self.k, self.k.vars[*v].extent));
            indent.push_str("    ");
        }
        let _ = writeln!(s, "{}let value = {};", indent, value);
        let _ = writeln!(s, "{}out.push(({}, value));", indent, flat);
        for _ in rest {
            indent.truncate(indent.len() - 4);
            let _ = writeln!(s, "{}}}", indent);
        }
        let _ = writeln!(s, "            }}");
        let _ = writeln!(s, "            Ok(out)");
        let _ = writeln!(s, "        }});");
        let _ = writeln!(s, "        for part in parts {{ for (i, value) in part? {{ tk_rt::set(&mut t_{}, i, value, \"{}\")?; }} }}", name, name);
        s
    }

    /// The mirror of `y[m, n] = f(sum(k) a(m, k) * b(k, n))` (sequential,
    /// fused): the same multiply-adds in the same k order per element as
    /// the per-element loop, but with k outside the m and n loops, so that b's
    /// row k is read once per chunk of m and the n loop runs over plain
    /// slices (vectorised). Results are bit-identical to the per-element
    /// form. `None` when the statement is not of that shape.
    fn contraction_statement(&self, st: &tir::Stmt) -> Option<String> {
        if self.mode != Mode::Mirror || st.vars.len() != 2 {
            return None;
        }
        let reds = tir::top_reductions(&st.value);
        let [red] = reds.as_slice() else { return None };
        let TExprKind::Reduce { op: RedOp::Sum, var: kv, body } = &red.kind else { return None };
        let (a, b) = tir::fma_operands(body)?;
        let order = self.ir.and_then(|ir| ir.reduction_order.get(kv).copied()).unwrap_or(ReductionOrder::Sequential);
        if order != ReductionOrder::Sequential {
            return None;
        }
        let (mv, nv) = (st.vars[0], st.vars[1]);
        let uses = |e: &TExpr, v: tir::VarId| {
            let mut found = false;
            e.walk(&mut |x| found |= matches!(&x.kind, TExprKind::Var(w) if *w == v));
            found
        };
        // a depends on (m, k) only, b on (k, n) only, neither reduces again.
        if uses(a, nv) || uses(b, mv) || !tir::top_reductions(a).is_empty() || !tir::top_reductions(b).is_empty() {
            return None;
        }
        let name = &self.k.tensors[st.target].name;
        let vt = value_type(self.k.tensors[st.target].dtype, self.mode);
        let bvt = self.vt(body.ty);
        let (m, n, k) = (self.var(mv), self.var(nv), self.var(*kv));
        let (me, ne, ke) = (dim_expr(self.k, self.k.vars[mv].extent), dim_expr(self.k, self.k.vars[nv].extent), dim_expr(self.k, self.k.vars[*kv].extent));
        let ident = self.identity(RedOp::Sum, body.ty);
        let (ae, be) = (self.expr(a), self.expr(b));
        self.subst.borrow_mut().push((*red as *const TExpr as usize, format!("accs[(({m} - lo) * {ne} + {n}) as usize]", m = m, ne = ne, n = n)));
        let value = self.expr(&st.value);
        self.subst.borrow_mut().pop();
        let flat = self.flat(st.target, &[m.clone(), n.clone()]);
        let mut s = String::new();
        let _ = writeln!(s, "        let parts = tk_rt::par_ranges({me}, {me} * {ne} * {ke}, |lo: i64, hi: i64| -> Result<Vec<(i64, {vt})>, String> {{", me = me, ne = ne, ke = ke, vt = vt);
        let _ = writeln!(s, "            let mut out = Vec::new();");
        let _ = writeln!(s, "            let mut accs: Vec<{bvt}> = vec![{ident}; ((hi - lo) * {ne}) as usize];", bvt = bvt, ident = ident, ne = ne);
        let _ = writeln!(s, "            let mut brow: Vec<{bvt}> = vec![{ident}; ({ne}) as usize];", bvt = bvt, ident = ident, ne = ne);
        let _ = writeln!(s, "            for {k} in 0..{ke} {{", k = k, ke = ke);
        let _ = writeln!(s, "                for {n} in 0..{ne} {{ brow[{n} as usize] = {be}; }}", n = n, ne = ne, be = be);
        let _ = writeln!(s, "                for {m} in lo..hi {{", m = m);
        let _ = writeln!(s, "                    let a: {bvt} = {ae};", bvt = bvt, ae = ae);
        let _ = writeln!(s, "                    let row = &mut accs[(({m} - lo) * {ne}) as usize..(({m} - lo + 1) * {ne}) as usize];", m = m, ne = ne);
        let _ = writeln!(s, "                    for (acc, bv) in row.iter_mut().zip(brow.iter()) {{ *acc = a.mul_add(*bv, *acc); }}");
        let _ = writeln!(s, "                }}");
        let _ = writeln!(s, "            }}");
        let _ = writeln!(s, "            for {m} in lo..hi {{ for {n} in 0..{ne} {{", m = m, n = n, ne = ne);
        let _ = writeln!(s, "                let value = {};", value);
        let _ = writeln!(s, "                out.push(({}, value));", flat);
        let _ = writeln!(s, "            }} }}");
        let _ = writeln!(s, "            Ok(out)");
        let _ = writeln!(s, "        }});");
        let _ = writeln!(s, "        for part in parts {{ for (i, value) in part? {{ tk_rt::set(&mut t_{}, i, value, \"{}\")?; }} }}", name, name);
        Some(s)
    }

    /// Round a value computed in f32 back to a half type (mirror only).
    fn round(&self, ty: Dtype, x: String) -> String {
        match (self.mode, ty) {
            (Mode::Mirror, Dtype::F16) => format!("tk_rt::rf16({})", x),
            (Mode::Mirror, Dtype::Bf16) => format!("tk_rt::rbf16({})", x),
            _ => x,
        }
    }

    pub(super) fn vt(&self, d: Dtype) -> &'static str {
        value_type(d, self.mode)
    }

    fn constant(&self, c: Const, ty: Dtype) -> String {
        let vt = self.vt(ty);
        match c {
            Const::Bool(b) => b.to_string(),
            Const::Int(v) if ty.is_float() => self.constant(Const::Float(v as f64), ty),
            Const::Float(v) if !ty.is_float() => format!("({}{})", v as i64, vt),
            Const::Int(v) => format!("({}{})", v, vt),
            Const::Float(v) => {
                let lit = if v.is_infinite() {
                    format!("{}{}::INFINITY", if v < 0.0 { "-" } else { "" }, vt)
                } else if vt == "f32" {
                    format!("({:?}f32)", v as f32)
                } else {
                    format!("({:?}f64)", v)
                };
                self.round(ty, lit)
            }
        }
    }

    pub(super) fn expr(&self, e: &TExpr) -> String {
        if let Some((_, text)) = self.subst.borrow().iter().find(|(addr, _)| *addr == e as *const TExpr as usize) {
            return text.clone();
        }
        let ty = e.ty;
        let vt = self.vt(ty);
        match &e.kind {
            TExprKind::Const(c) => self.constant(*c, ty),
            TExprKind::Load { tensor, index } => {
                let idx: Vec<String> = index.iter().map(|i| format!("(({}) as i64)", self.expr(i))).collect();
                let n = &self.k.tensors[*tensor].name;
                match self.loads.iter().find(|(t, _)| t == tensor).map(|(_, l)| l) {
                    Some(LoadAs::Local(name)) => name.clone(),
                    // A loop variable runs over `0..extent`, and every
                    // extent fits 32 bits (a literal here, a dim checked by
                    // each of the CPU schedule's tasks): its i32 round trip
                    // is the identity, and indexing by the variable itself
                    // lets the row's loops drop their bounds checks.
                    Some(LoadAs::Row(buf)) => match index.last().map(|i| &i.kind) {
                        Some(TExprKind::Var(v)) if self.var_fits_i32(*v) => format!("{}[{} as usize]", buf, self.var(*v)),
                        _ => format!("{}[({}) as usize]", buf, idx.last().map(String::as_str).unwrap_or("0")),
                    },
                    Some(LoadAs::Slice { slice, base: None }) => format!("tk_rt::cpu::ld({}, {}, \"{}\")?", slice, self.flat(*tensor, &idx), n),
                    Some(LoadAs::Slice { slice, base: Some(base) }) => format!("tk_rt::cpu::ld({}, {} - {}, \"{}\")?", slice, self.flat(*tensor, &idx), base, n),
                    None => format!("tk_rt::get(&t_{}, {}, \"{}\")?", n, self.flat(*tensor, &idx), n),
                }
            }
            TExprKind::Scalar(s) => format!("sc_{}", self.k.scalars[*s].name),
            TExprKind::Dim(d) => format!("(d_{} as {})", self.k.dims[*d].name, vt),
            TExprKind::Var(v) => format!("({} as {})", self.var(*v), vt),
            TExprKind::Local(l) => format!("l_{}_{}", self.k.locals[*l].name, l),
            TExprKind::Unary(UnOp::Neg, a) if ty.is_int() => format!("({}).wrapping_neg()", self.expr(a)),
            TExprKind::Unary(UnOp::Neg, a) => format!("(-{})", self.expr(a)),
            TExprKind::Unary(UnOp::Not, a) => format!("(!{})", self.expr(a)),
            TExprKind::Binary(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                if op.is_comparison() || op.is_logical() {
                    return format!("({} {} {})", x, op.symbol(), y);
                }
                if ty.is_int() {
                    return match op {
                        BinOp::Add => format!("({}).wrapping_add({})", x, y),
                        BinOp::Sub => format!("({}).wrapping_sub({})", x, y),
                        BinOp::Mul => format!("({}).wrapping_mul({})", x, y),
                        BinOp::Div => format!("tk_rt::idiv({}, {})", x, y),
                        _ => format!("tk_rt::irem({}, {})", x, y),
                    };
                }
                self.round(ty, format!("({} {} {})", x, op.symbol(), y))
            }
            TExprKind::Call(f, args) if f.is_residue() => self.residue_call(*f, args),
            TExprKind::Call(f, args) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                let r = match f {
                    Builtin::Exp => format!("({}).exp()", a[0]),
                    Builtin::Log => format!("({}).ln()", a[0]),
                    // f32: the runtime's own (no library call; within 1 ulp).
                    Builtin::Tanh if vt == "f32" => format!("tk_rt::tanh_f32({})", a[0]),
                    Builtin::Tanh => format!("({}).tanh()", a[0]),
                    Builtin::Sqrt => format!("({}).sqrt()", a[0]),
                    Builtin::Rsqrt => format!("(1.0 / ({}).sqrt())", a[0]),
                    Builtin::Abs if ty.is_int() => format!("({}).wrapping_abs()", a[0]),
                    Builtin::Abs => format!("({}).abs()", a[0]),
                    Builtin::Min if ty.is_int() => format!("std::cmp::min({}, {})", a[0], a[1]),
                    Builtin::Max if ty.is_int() => format!("std::cmp::max({}, {})", a[0], a[1]),
                    Builtin::Min => format!("({}).min({})", a[0], a[1]),
                    Builtin::Max => format!("({}).max({})", a[0], a[1]),
                    Builtin::Select => return format!("(if {} {{ {} }} else {{ {} }})", a[0], a[1], a[2]),
                    Builtin::Vp | Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf => unreachable!("residue_call"),
                };
                self.round(ty, r)
            }
            TExprKind::Cast(a) => {
                let x = self.expr(a);
                match (self.mode, ty) {
                    (Mode::Exact, t) if t.is_float() => format!("(({}) as f64)", x),
                    (_, Dtype::Bool) => format!("(({}) != 0)", x),
                    (_, t) if t.is_int() && a.ty == Dtype::Bool => format!("(({}) as {})", x, vt),
                    (Mode::Mirror, Dtype::F16 | Dtype::Bf16) => self.round(ty, format!("(({}) as f32)", x)),
                    _ => format!("(({}) as {})", x, vt),
                }
            }
            TExprKind::Let { local, value, body } => {
                let l = &self.k.locals[*local];
                format!("{{ let l_{}_{}: {} = {}; {} }}", l.name, local, self.vt(l.dtype), self.expr(value), self.expr(body))
            }
            TExprKind::Reduce { op, var, body } => self.reduce(*op, *var, body, ty),
        }
    }

    /// A residue builtin, exactly (u64 inside, reduced modulo `q`). The
    /// exact oracle evaluates `skip_if(c, e)` as `e`, the dense value,
    /// so that comparing a kernel with it tests the skip rule; the mirror
    /// skips as the kernel does.
    fn residue_call(&self, f: Builtin, args: &[TExpr]) -> String {
        let m = self.k.modulus.expect("residue builtins only in kernels with a modulus (check::residue)");
        let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
        // Residues are u32 in the kernel, i64 in the exact oracle.
        let vt = self.vt(Dtype::U32);
        match f {
            Builtin::MulMod => format!("(((({}) as u64) * (({}) as u64) % {}u64) as {})", a[0], a[1], m.q(), vt),
            Builtin::AddMod => addmod_text(&a[0], &a[1], m.q(), vt),
            Builtin::Vp => format!("(tk_rt::vp(({}) as u32, {}, {}) as {})", a[0], m.p, m.k, vt),
            Builtin::SkipIf if self.mode == Mode::Exact => a[1].clone(),
            Builtin::SkipIf => format!("(if {} {{ 0 as {} }} else {{ {} }})", a[0], vt, a[1]),
            _ => unreachable!("not a residue builtin"),
        }
    }

    /// `acc (op) term`, rounded as the kernel does.
    fn combine(&self, op: RedOp, ty: Dtype, acc: &str, term: &str) -> String {
        match op {
            RedOp::Sum if ty.is_int() => format!("({}).wrapping_add({})", acc, term),
            RedOp::SumMod => {
                let q = self.k.modulus.expect("summod only in kernels with a modulus (check::residue)").q();
                addmod_text(acc, term, q, self.vt(ty))
            }
            RedOp::Sum => self.round(ty, format!("({} + {})", acc, term)),
            RedOp::Max if ty.is_int() => format!("std::cmp::max({}, {})", acc, term),
            RedOp::Min if ty.is_int() => format!("std::cmp::min({}, {})", acc, term),
            // Argmax combines pairs in `reduce`; its value part is a max.
            RedOp::Max | RedOp::Argmax => format!("({}).max({})", acc, term),
            RedOp::Min => format!("({}).min({})", acc, term),
        }
    }

    pub(super) fn identity(&self, op: RedOp, ty: Dtype) -> String {
        let vt = self.vt(ty);
        match (op, ty.is_float()) {
            (RedOp::Sum, true) => format!("(0.0{})", vt),
            (RedOp::Sum | RedOp::SumMod, false) => format!("(0{})", vt),
            (RedOp::SumMod, true) => unreachable!("summod sums u32 residues"),
            (RedOp::Max | RedOp::Argmax, true) => format!("{}::NEG_INFINITY", vt),
            (RedOp::Min, true) => format!("{}::INFINITY", vt),
            (RedOp::Max | RedOp::Argmax, false) => format!("{}::MIN", vt),
            (RedOp::Min, false) => format!("{}::MAX", vt),
        }
    }

    /// A reduction's pieces as `reduce` prints them for a block order (not
    /// argmax): the step adding the term to `acc`, the identity, and the
    /// combining closure for `tk_rt::block_reduce`.
    pub(super) fn partial_pieces(&self, op: RedOp, body: &TExpr, acc: &str) -> (String, String, String) {
        let bt = body.ty;
        let bvt = self.vt(bt);
        let step = match (self.mode, op, tir::fma_operands(body)) {
            (Mode::Mirror, RedOp::Sum, Some((a, b))) => format!("{acc} = ({a}).mul_add({b}, {acc});", acc = acc, a = self.expr(a), b = self.expr(b)),
            _ => format!("let term: {} = {}; {} = {};", bvt, self.expr(body), acc, self.combine(op, bt, acc, "term")),
        };
        (step, self.identity(op, bt), format!("&|a: {t}, b: {t}| {c}", t = bvt, c = self.combine(op, bt, "a", "b")))
    }

    /// `step()` printed with every row read of `body` at `var` (a
    /// `LoadAs::Row` whose last index is `var` itself) taken from a slice
    /// of that row's block, `blk_<row>[t]`; and the slices' bindings
    /// (`&row[q0..][..len]`, for the blocked walk's `q0`, `len` and `t`).
    fn with_block_rows(&self, var: tir::VarId, body: &TExpr, step: impl FnOnce() -> String) -> (String, String) {
        let mut reads: Vec<(&TExpr, String)> = Vec::new();
        body.walk(&mut |e| {
            let TExprKind::Load { tensor, index } = &e.kind else { return };
            let Some(LoadAs::Row(buf)) = self.loads.iter().find(|(t, _)| t == tensor).map(|(_, l)| l) else { return };
            if matches!(index.last().map(|i| &i.kind), Some(TExprKind::Var(x)) if *x == var) {
                reads.push((e, buf.clone()));
            }
        });
        let mut slices = String::new();
        let mut bound: Vec<&str> = Vec::new();
        for (_, buf) in &reads {
            if !bound.contains(&buf.as_str()) {
                bound.push(buf);
                let _ = write!(slices, "let blk_{b}: &[f32] = &{b}[q0 as usize..][..len]; ", b = buf);
            }
        }
        let pushed = reads.len();
        self.subst.borrow_mut().extend(reads.iter().map(|(e, buf)| (*e as *const TExpr as usize, format!("blk_{}[t]", buf))));
        let text = step();
        let mut subst = self.subst.borrow_mut();
        let keep = subst.len() - pushed;
        subst.truncate(keep);
        (slices, text)
    }

    fn reduce(&self, op: RedOp, var: tir::VarId, body: &TExpr, ty: Dtype) -> String {
        let bt = body.ty;
        let bvt = self.vt(bt);
        let v = self.var(var);
        let ext = dim_expr(self.k, self.k.vars[var].extent);
        let ident = self.identity(op, bt);
        let it = self.vt(Dtype::I32);
        // The term for index `v`: sums of products fuse in the mirror.
        // (Printed when the step is: `with_block_rows` changes how rows read.)
        let fused = match (self.mode, op, tir::fma_operands(body)) {
            (Mode::Mirror, RedOp::Sum, Some((a, b))) => Some((a, b)),
            _ => None,
        };
        let step = |acc: &str| match fused {
            Some((a, b)) => format!("{acc} = ({a}).mul_add({b}, {acc});", acc = acc, a = self.expr(a), b = self.expr(b)),
            None if op == RedOp::Argmax => format!(
                "let term: {bvt} = {t}; let k = {v} as {it}; if term > {acc}.0 || (term == {acc}.0 && k < {acc}.1) {{ {acc}.1 = k; }} if term > {acc}.0 {{ {acc}.0 = term; }}",
                bvt = bvt,
                t = self.expr(body),
                v = v,
                it = it,
                acc = acc
            ),
            None => format!("let term: {} = {}; {} = {};", bvt, self.expr(body), acc, self.combine(op, bt, acc, "term")),
        };
        let init = if op == RedOp::Argmax { format!("({}, 0 as {})", ident, it) } else { ident.clone() };
        let result = |acc: &str| if op == RedOp::Argmax { format!("({}.1 as {})", acc, self.vt(ty)) } else { acc.to_string() };
        let order = self.ir.and_then(|ir| ir.reduction_order.get(&var).copied()).unwrap_or(ReductionOrder::Sequential);
        match (self.mode, order) {
            (Mode::Mirror, ReductionOrder::Block { threads, warp } | ReductionOrder::BlockRuns { threads, warp, .. }) => {
                let width = match order {
                    ReductionOrder::BlockRuns { width, .. } => width,
                    _ => 1,
                };
                let f = if op == RedOp::Argmax {
                    "&|a: (_, _), b: (_, _)| { let take = b.0 > a.0 || (b.0 == a.0 && b.1 < a.1); (if b.0 > a.0 { b.0 } else { a.0 }, if take { b.1 } else { a.1 }) }".to_string()
                } else {
                    format!("&|a: {t}, b: {t}| {c}", t = bvt, c = self.combine(op, bt, "a", "b"))
                };
                // Each thread's partial, as `walk`, and the threads that
                // took a term (`live`: those past it hold `init`).
                let (walk, live) = if self.blocked && op != RedOp::Argmax && width == 1 {
                    // Rows read at the reduction's variable are sliced to
                    // the block (`blk_*[t]` with `t < len`), so the loop
                    // has no bounds check and vectorises whole: indexed
                    // by `q0 + t`, LLVM kept a scalar copy for the last
                    // (up to 64) terms of every block.
                    let (slices, step) = self.with_block_rows(var, body, || step("parts[t]"));
                    (
                        format!("let mut q0: i64 = 0; while q0 < {ext} {{ let len = ((({ext}) - q0) as usize).min({threads}); {slices}for t in 0..len {{ let {v}: i64 = q0 + t as i64; {step} }} q0 += {threads}; }}", ext = ext, threads = threads, v = v, slices = slices, step = step),
                        ext.clone(),
                    )
                } else if self.blocked && op != RedOp::Argmax {
                    // Thread t's terms in order: the runs of `width` at
                    // (j * threads + t) * width for j = 0, 1, ..., as the
                    // strided walk below takes them; one block of
                    // `threads` runs at a time.
                    (
                        format!("let mut q0: i64 = 0; while q0 < {ext} {{ for t in 0..{threads}usize {{ for u in 0..{w}i64 {{ let {v}: i64 = q0 + t as i64 * {w} + u; if {v} < {ext} {{ {step} }} }} }} q0 += {threads} * {w}; }}", ext = ext, threads = threads, w = width, v = v, step = step("parts[t]")),
                        format!("(({}) + {w} - 1) / {w}", ext, w = width),
                    )
                } else {
                    let one = if width == 1 {
                        format!("let mut {v} = tid; while {v} < {ext} {{ {step} {v} += {threads}; }}", v = v, ext = ext, step = step("acc"), threads = threads)
                    } else {
                        format!("let mut run = tid * {w}; while run < {ext} {{ for {v} in run..(run + {w}).min({ext}) {{ {step} }} run += {threads} * {w}; }}", w = width, v = v, ext = ext, step = step("acc"), threads = threads)
                    };
                    (
                        format!("for tid in 0..({threads}i64).min({ext}) {{ let mut acc = {init}; {one} parts[tid as usize] = acc; }}", threads = threads, ext = ext, init = init, one = one),
                        format!("((({}) + {w} - 1) / {w})", ext, w = width),
                    )
                };
                format!(
                    "{{ let mut parts = [{init}; {threads}]; {walk} let acc = tk_rt::block_reduce(&mut parts, {warp}, ({threads}i64).min({live}) as usize, {init}, {f}); {res} }}",
                    init = init,
                    threads = threads,
                    walk = walk,
                    live = live,
                    warp = warp,
                    f = f,
                    res = result("acc")
                )
            }
            // The matrix unit as its assumption describes it (the products
            // of f16 or bf16 operands are exact in f64).
            (Mode::Mirror, ReductionOrder::MatrixUnit { k, per_promotion }) if fused.is_some() => {
                let (a, b) = fused.map(|(a, b)| (self.expr(a), self.expr(b))).expect("checked in the guard");
                format!(
                    "{{ let mut products = Vec::new(); for {v} in 0..{ext} {{ products.push(({a}) as f64 * ({b}) as f64); }} tokitai_contracts::fp::matrix_unit::emulate_sum(&products, {k}, {q}, tokitai_contracts::fp::matrix_unit::MIRROR_BLOCK) as {bvt} }}",
                    v = v,
                    ext = ext,
                    a = a,
                    b = b,
                    k = k,
                    q = per_promotion,
                    bvt = bvt
                )
            }
            // Each chain in order, a group's chains in order, the groups' tree.
            (Mode::Mirror, ReductionOrder::Columns { groups, chains }) if op != RedOp::Argmax => format!(
                "{{ let mut parts = [{init}; {groups}]; for g in 0..{groups}i64 {{ let mut total = {init}; for u in 0..{chains}i64 {{ let mut acc = {init}; let mut {v} = g + u * {groups}; while {v} < {ext} {{ {step} {v} += {stride}; }} total = {chain}; }} parts[g as usize] = total; }} let mut s = {groups} / 2; while s >= 1 {{ for g in 0..s {{ let (a, b) = (parts[g], parts[g + s]); parts[g] = {tree}; }} s /= 2; }} parts[0] }}",
                init = init,
                groups = groups,
                chains = chains,
                stride = groups * chains,
                v = v,
                ext = ext,
                step = step("acc"),
                chain = self.combine(op, bt, "total", "acc"),
                tree = self.combine(op, bt, "a", "b")
            ),
            _ => format!("{{ let mut acc = {init}; for {v} in 0..{ext} {{ {step} }} {res} }}", init = init, v = v, ext = ext, step = step("acc"), res = result("acc")),
        }
    }
}
