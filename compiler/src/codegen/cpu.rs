//! The CPU schedule (issue 22): what the CPU backend runs, printed beside
//! the oracles from the same typed IR, for the schedule families where the
//! mirror's form costs the most:
//!
//! - **element-wise** (`Pointwise`, `Gather`): every statement of an
//!   element computed in one pass, intermediates in locals, inputs read in
//!   place from the call's buffers (no f32 copies), outputs and inouts
//!   written in place; the outermost axis split into chunks on the
//!   executor, each chunk writing its own piece of every output;
//! - **contractions** summed in k order (the SIMT schedule's
//!   `Sequential`): both operands packed in f32 panels, a register tile
//!   of fused multiply-add chains picked for the machine
//!   (`tk_rt::cpu::contract_rows`: 8 or 12 x 32 on AVX-512, 6 x 16 on AVX2), the
//!   rest of the statement applied per element as the mirror does.
//!
//! Every other kernel's CPU schedule is its mirror.
//!
//! Why its bounds are the proved ones: the CPU schedule computes each
//! value with the mirror's expressions (the same roundings, fused
//! multiply-adds and library calls) and sums in the order the primary
//! `KernelIr` records (`Sequential` for the contractions it takes), the
//! order the accuracy analysis derived the kernel's bound for. So its
//! results are the mirror's bits, which `runtime/tests/cpu_schedule.rs`
//! checks on every kernel with a schedule of its own. Its accesses: an
//! input is read through the checked accessor (an index out of bounds is
//! an error, never a read), an output written at its statement's own
//! element (the race rule), and a contraction's operands checked once a
//! call against their strides (`Operand::covers`).

use super::oracle::{dim_expr, dims_prologue, len_expr, scalars_prologue, value_range_check, value_type, Gen, LoadAs, Mode};
use crate::kir::{KernelIr, ReductionOrder, Schedule};
use crate::syntax::ast::RedOp;
use crate::tir::{self, Dim, Kernel, Param, TExpr, TExprKind, TensorId, TensorRole, VarId};
use crate::types::Dtype;
use std::fmt::Write;

/// Which CPU schedule a kernel gets.
enum Form<'k> {
    Columns,
    Staged,
    Elementwise,
    Rows,
    Contraction(Gemm<'k>),
    Mirror,
}

/// A contraction the packed register tile computes: `y[i, j] = f(sum(k)
/// a[i, k] * b[k, j])` with both operands plain loads of input tensors
/// (widened to f32, or f32), at strides read off their shapes.
struct Gemm<'k> {
    reduce: &'k TExpr,
    k: VarId,
    a: (TensorId, String, String),
    b: (TensorId, String, String),
}

/// The name of the CPU schedule a kernel gets, for its `CPU_SCHEDULE`.
pub fn schedule_name(k: &Kernel, ir: &KernelIr) -> &'static str {
    match form(k, ir) {
        Form::Columns => "column reductions: tasks over the block's lanes (whole rows), or over blocks of columns a row at a time (vectorised)",
        Form::Staged => "element-wise, fused, in blocks widened to f32 (vectorised)",
        Form::Elementwise => "element-wise, fused, in place",
        Form::Rows => "rows, every statement of a row in turn, in place",
        Form::Contraction(_) => "contraction, packed f32 panels, 4 x 16 register tile, k in order",
        Form::Mirror => "mirror",
    }
}

fn form<'k>(k: &'k Kernel, ir: &KernelIr) -> Form<'k> {
    match ir.schedule {
        Schedule::Pointwise { .. } | Schedule::Gather if elementwise(k) && staged(k) => Form::Staged,
        Schedule::Pointwise { .. } | Schedule::Gather if elementwise(k) => Form::Elementwise,
        Schedule::RowReduction { .. } if column_reductions(k, ir).is_some() => Form::Columns,
        Schedule::RowReduction { .. } | Schedule::RowCached { .. } if rows(k) => Form::Rows,
        Schedule::Contraction { .. } => gemm(k, ir).map_or(Form::Mirror, Form::Contraction),
        _ => Form::Mirror,
    }
}

/// Is `index` exactly the statement's variables, in order (the element
/// the statement writes)?
fn own_element(index: &[TExpr], vars: &[VarId]) -> bool {
    index.len() == vars.len() && index.iter().zip(vars).all(|(i, v)| i.as_var() == Some(*v))
}

/// Can every statement run per element in one pass? All statements range
/// over the same extents, none reduces, and every read of a tensor the
/// kernel writes (output, inout, intermediate) is of the reading
/// statement's own element, so that the statements of one element need
/// nothing from another.
fn elementwise(k: &Kernel) -> bool {
    let Some(first) = k.stmts.first() else { return false };
    let extents = |s: &tir::Stmt| s.vars.iter().map(|v| k.vars[*v].extent).collect::<Vec<Dim>>();
    let shape = extents(first);
    if shape.is_empty() {
        return false;
    }
    k.stmts.iter().all(|s| {
        let mut ok = extents(s) == shape && k.tensors[s.target].shape == shape;
        s.value.walk(&mut |e| match &e.kind {
            TExprKind::Reduce { .. } => ok = false,
            TExprKind::Load { tensor, index } if k.tensors[*tensor].role != TensorRole::Input => ok &= own_element(index, &s.vars),
            _ => {}
        });
        ok
    })
}

/// Can the statements run a row at a time? Every statement ranges over
/// the same first axis (the rows) and at most one more, the same for all
/// (the columns); every read of a tensor the kernel writes is of the
/// reading statement's own row, so a row needs nothing from another, and
/// an earlier statement has computed the whole row before a later one
/// reads it (statements run in order, each over the whole row).
fn rows(k: &Kernel) -> bool {
    let Some(first) = k.stmts.first() else { return false };
    let Some(&r0) = first.vars.first() else { return false };
    let rows = k.vars[r0].extent;
    let mut cols: Option<Dim> = None;
    k.stmts.iter().all(|s| {
        let mut ok = !s.vars.is_empty() && s.vars.len() <= 2 && k.vars[s.vars[0]].extent == rows;
        if let Some(&c) = s.vars.get(1) {
            let e = k.vars[c].extent;
            ok &= *cols.get_or_insert(e) == e;
        }
        let exts: Vec<Dim> = s.vars.iter().map(|v| k.vars[*v].extent).collect();
        let target = &k.tensors[s.target];
        ok &= target.shape == exts;
        // A row over the columns lives in an f32 buffer.
        ok &= s.vars.len() == 1 || matches!(target.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32);
        s.value.walk(&mut |e| {
            if let TExprKind::Load { tensor, index } = &e.kind {
                let info = &k.tensors[*tensor];
                if info.role != TensorRole::Input {
                    ok &= index.first().and_then(|i| i.as_var()) == Some(s.vars[0]) && index.len() <= 2;
                    // Read from its row buffer by a variable over its length.
                    ok &= index.len() < 2 || var_over(k, &index[1], info.shape[1]);
                }
            }
        });
        ok
    })
}

/// How the staged form reads a tensor that statement `s` loads at `index`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StagedRead {
    /// The element the statement computes, from a block widened to f32.
    Own,
    /// One value for the whole call (a tensor of no axes).
    Call,
    /// One value a row (indexed by the row alone, of a statement over two
    /// axes).
    Row,
    /// `t[g[r], c]` of a statement over `(r, c)`: another row of `t`,
    /// picked by the integer input `g` read once a row, at the statement's
    /// column; a block of that row widened to f32 (the expert layers'
    /// gathers and combines).
    Gathered(TensorId),
}

fn staged_read(k: &Kernel, s: &tir::Stmt, tensor: TensorId, index: &[TExpr]) -> Option<StagedRead> {
    let info = &k.tensors[tensor];
    if own_element(index, &s.vars) {
        return matches!(info.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32).then_some(StagedRead::Own);
    }
    if index.is_empty() {
        return Some(StagedRead::Call);
    }
    if s.vars.len() != 2 || info.role != TensorRole::Input {
        return None;
    }
    match index {
        [r] if r.as_var() == Some(s.vars[0]) => Some(StagedRead::Row),
        [g, c] if matches!(info.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32) && c.as_var() == Some(s.vars[1]) && var_over(k, c, info.shape[1]) => {
            let TExprKind::Load { tensor: by, index: at } = &g.kind else { return None };
            let by_info = &k.tensors[*by];
            let row_of = matches!(at.as_slice(), [r] if r.as_var() == Some(s.vars[0]));
            (row_of && by_info.role == TensorRole::Input && by_info.dtype.is_int()).then_some(StagedRead::Gathered(*by))
        }
        _ => None,
    }
}

/// The gathered reads (`StagedRead::Gathered`) of a kernel's statements.
struct Gathers<'k> {
    /// `(tensor, index tensor)` pairs, each once: a staged block each.
    pairs: Vec<(TensorId, TensorId)>,
    /// Each read's expression, with its pair's position in `pairs`.
    reads: Vec<(&'k TExpr, usize)>,
}

fn gathered_reads(k: &Kernel) -> Gathers<'_> {
    let mut pairs: Vec<(TensorId, TensorId)> = Vec::new();
    let mut reads = Vec::new();
    for st in &k.stmts {
        st.value.walk(&mut |e| {
            let TExprKind::Load { tensor, index } = &e.kind else { return };
            if let Some(StagedRead::Gathered(by)) = staged_read(k, st, *tensor, index) {
                let at = pairs.iter().position(|p| *p == (*tensor, by)).unwrap_or_else(|| {
                    pairs.push((*tensor, by));
                    pairs.len() - 1
                });
                reads.push((e, at));
            }
        });
    }
    Gathers { pairs, reads }
}

/// Can the element-wise form run in blocks widened to f32, with an inner
/// loop of plain arithmetic the compiler vectorises? One or two axes;
/// every tensor read at the statement's own element (a float, widened a
/// block at a time), or once a call (no axes), or once a row; every
/// tensor written a float (narrowed a block at a time).
fn staged(k: &Kernel) -> bool {
    k.stmts.iter().all(|s| {
        let mut ok = s.vars.len() <= 2 && matches!(k.tensors[s.target].dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32);
        s.value.walk(&mut |e| {
            if let TExprKind::Load { tensor, index } = &e.kind {
                if matches!(k.tensors[*tensor].role, TensorRole::Input | TensorRole::Inout) {
                    ok &= staged_read(k, s, *tensor, index).is_some();
                }
            }
        });
        ok
    })
}

/// `e` as a plain load of an input tensor of a float dtype read in f32
/// (`f32(x[..])` of a half, or an f32 `x[..]`), indexed by two variables.
fn plain_operand(k: &Kernel, e: &TExpr) -> Option<(TensorId, VarId, VarId)> {
    let load = match &e.kind {
        TExprKind::Cast(a) if e.ty == Dtype::F32 && matches!(a.ty, Dtype::F16 | Dtype::Bf16 | Dtype::F32) => a,
        _ if e.ty == Dtype::F32 => e,
        _ => return None,
    };
    let TExprKind::Load { tensor, index } = &load.kind else { return None };
    if k.tensors[*tensor].role != TensorRole::Input || index.len() != 2 {
        return None;
    }
    Some((*tensor, index[0].as_var()?, index[1].as_var()?))
}

/// A contraction of the form [`Gemm`] summed in k order.
fn gemm<'k>(k: &'k Kernel, ir: &KernelIr) -> Option<Gemm<'k>> {
    let [s] = k.stmts.as_slice() else { return None };
    let [i, j] = s.vars.as_slice() else { return None };
    let reds = tir::top_reductions(&s.value);
    let [reduce] = reds.as_slice() else { return None };
    let TExprKind::Reduce { op: RedOp::Sum, var: kv, body } = &reduce.kind else { return None };
    if body.ty != Dtype::F32 || !matches!(ir.reduction_order.get(kv).copied().unwrap_or(ReductionOrder::Sequential), ReductionOrder::Sequential) {
        return None;
    }
    let (x, y) = tir::fma_operands(body)?;
    // The operand reading (i, k) is A, the one reading (k, j) is B: strides
    // of a row-major [d0, d1] tensor are (d1, 1).
    let strides = |(t, v0, v1): (TensorId, VarId, VarId), row: VarId| -> Option<(TensorId, String, String)> {
        let inner = dim_expr(k, k.tensors[t].shape[1]);
        if v0 == row && v1 == *kv {
            Some((t, inner, "1i64".into()))
        } else if v0 == *kv && v1 == row {
            Some((t, "1i64".into(), inner))
        } else {
            None
        }
    };
    let (ox, oy) = (plain_operand(k, x)?, plain_operand(k, y)?);
    let (a, b) = match (strides(ox, *i), strides(oy, *j)) {
        (Some(a), Some(b)) => (a, b),
        _ => (strides(oy, *i)?, strides(ox, *j)?),
    };
    Some(Gemm { reduce, k: *kv, a, b })
}

/// `pub fn cpu_args(..)`: the kernel's CPU schedule, with the mirror's
/// signature (`tk_rt::Arg`s in signature order, outputs owned).
pub fn cpu_fn(k: &Kernel, ir: &KernelIr) -> String {
    let form = form(k, ir);
    let mut s = String::new();
    let _ = writeln!(s, "    /// CPU schedule: {}.", schedule_name(k, ir));
    let _ = writeln!(s, "    pub const CPU_SCHEDULE: &str = \"{}\";", schedule_name(k, ir));
    let _ = writeln!(s, "    /// What the CPU backend runs: the mirror's values and order (the same bits), in a form for a CPU (`codegen::cpu`).");
    let body = match form {
        Form::Mirror => {
            let _ = writeln!(s, "    pub fn cpu_args(dims: &[i64], scalars: &[f64], args: &mut [tk_rt::Arg<'_>]) -> Result<(), String> {{");
            s.push_str("        mirror_args(dims, scalars, args)\n    }\n");
            s.push_str("    /// The mirror observes nothing: the monitor scans what it needs.\n");
            let _ = writeln!(s, "    pub fn cpu_watched(dims: &[i64], scalars: &[f64], args: &mut [tk_rt::Arg<'_>], _watch: &tk_rt::cpu::Watch) -> Result<(), String> {{");
            s.push_str("        mirror_args(dims, scalars, args)\n    }\n");
            return s;
        }
        Form::Columns => columns_body(k, ir),
        Form::Staged => staged_body(k, ir),
        Form::Elementwise => elementwise_body(k, ir),
        Form::Rows => rows_body(k, ir),
        Form::Contraction(g) => contraction_body(k, ir, &g),
    };
    // The body once, as a macro expanded in two functions: the plain one,
    // and one built for AVX-512F that the call takes where the machine
    // has it. Closures defined in a `#[target_feature]` function are
    // built with its features, so the chunks' loops run 16 lanes wide
    // there (8 with the build's AVX2). Lane width changes no value: the
    // loops are IEEE operations element by element, and a multiply-add
    // is fused exactly where the source says `mul_add`.
    let _ = writeln!(s, "    macro_rules! cpu_body {{ ($dims:ident, $scalars:ident, $args:ident, $watch:ident) => {{{{");
    s.push_str("        let (dims, scalars, args, watch): (&[i64], &[f64], &mut [tk_rt::Arg<'_>], &tk_rt::cpu::Watch) = ($dims, $scalars, $args, $watch);\n");
    s.push_str("        let _ = watch;\n");
    s.push_str("        check_requires(dims, scalars)?;\n");
    s.push_str(&dims_prologue(k));
    s.push_str(&scalars_prologue(k, Mode::Mirror));
    s.push_str(&views(k));
    s.push_str(&body);
    s.push_str("    }}}\n");
    let _ = writeln!(s, "    pub fn cpu_args(dims: &[i64], scalars: &[f64], args: &mut [tk_rt::Arg<'_>]) -> Result<(), String> {{");
    s.push_str("        cpu_watched(dims, scalars, args, &tk_rt::cpu::Watch::off())\n");
    s.push_str("    }\n");
    let observed: Vec<&str> = observed_outputs(k, ir).iter().map(|t| k.tensors[*t].name.as_str()).collect();
    let _ = writeln!(s, "    /// `cpu_args`, folding what it stores into `watch` (observed: {}).", if observed.is_empty() { "nothing".to_string() } else { observed.join(", ") });
    let _ = writeln!(s, "    pub fn cpu_watched(dims: &[i64], scalars: &[f64], args: &mut [tk_rt::Arg<'_>], watch: &tk_rt::cpu::Watch) -> Result<(), String> {{");
    s.push_str("        #[cfg(target_arch = \"x86_64\")]\n");
    s.push_str("        if tk_rt::cpu::avx512() {\n");
    s.push_str("            // SAFETY: the machine has AVX-512F (detected).\n");
    s.push_str("            return unsafe { cpu_args_avx512(dims, scalars, args, watch) };\n");
    s.push_str("        }\n");
    s.push_str("        cpu_body!(dims, scalars, args, watch)\n");
    s.push_str("    }\n");
    s.push_str("    #[cfg(target_arch = \"x86_64\")]\n");
    s.push_str("    #[target_feature(enable = \"avx512f\")]\n");
    s.push_str("    unsafe fn cpu_args_avx512(dims: &[i64], scalars: &[f64], args: &mut [tk_rt::Arg<'_>], watch: &tk_rt::cpu::Watch) -> Result<(), String> {\n");
    s.push_str("        cpu_body!(dims, scalars, args, watch)\n");
    s.push_str("    }\n");
    s
}

/// The outputs a CPU schedule observes for the contract monitor
/// (`tk_rt::cpu::Watch`): float ones whose every element the kernel
/// writes (their coverage is proved), the GPU observation's rule
/// (`schedule::observe`), so that a finished call's fold is the range of
/// the whole tensor.
fn observed_outputs(k: &Kernel, ir: &KernelIr) -> Vec<TensorId> {
    written(k)
        .into_iter()
        .filter(|t| matches!(k.tensors[*t].dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32))
        .filter(|t| ir.bufs.iter().enumerate().any(|(b, buf)| buf.tensor == *t && buf.written && ir.coverage.iter().any(|c| c.buf == b)))
        .collect()
}

/// The kernel's domain relations (by index) between two of its f32
/// outputs that it observes, each checked on the values stored (AdamW's
/// `m * m <= 64 v`: its next launch reads them as its inputs). f32 only:
/// the stored value is the computed one, so the check is the monitor's.
fn observed_relations<'k>(k: &'k Kernel, ir: &KernelIr) -> Vec<(usize, &'k tir::Relation)> {
    let observed = observed_outputs(k, ir);
    let f32_observed = |t: TensorId| observed.contains(&t) && k.tensors[t].dtype == Dtype::F32;
    k.relations.iter().enumerate().filter(|(_, r)| f32_observed(r.square) && f32_observed(r.bound)).collect()
}

/// Each tensor parameter as a typed slice: `t_NAME` for inputs, `o_NAME`
/// for outputs and inouts; index tensors' value contracts checked.
fn views(k: &Kernel) -> String {
    let mut s = String::new();
    let tensors: Vec<TensorId> = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).collect();
    let _ = writeln!(s, "        if args.len() != {n} {{ return Err(format!(\"expected {n} tensors, got {{}}\", args.len())); }}", n = tensors.len());
    let _ = writeln!(s, "        let mut views = tk_rt::cpu::views(args);");
    for t in tensors {
        let info = &k.tensors[t];
        let (et, len) = (info.dtype.rust_type(), len_expr(k, &info.shape));
        match info.role {
            TensorRole::Input => {
                let _ = writeln!(s, "        let t_{n}: &[{et}] = tk_rt::cpu::input(views.next(), \"{n}\", {len})?;", n = info.name, et = et, len = len);
            }
            role => {
                let _ = writeln!(s, "        let o_{n}: &mut [{et}] = tk_rt::cpu::output(views.next(), \"{n}\", {len}, {resize})?;", n = info.name, et = et, len = len, resize = role == TensorRole::Output);
            }
        }
        s.push_str(&value_range_check(k, info));
    }
    s
}

/// An input of one axis widened to f32 once a call, as `col_NAME` (`len`
/// elements, a `usize` expression).
fn widened_once(n: &str, len: &str) -> String {
    format!(
        "        let mut colv_{n} = tk_rt::cpu::Rows::overwritten({len});\n        let col_{n}: &[f32] = tk_rt::cpu::stage(t_{n}, 0, {len}, &mut colv_{n}, \"{n}\")?;\n",
        n = n,
        len = len
    )
}

/// Tensors the kernel writes through its parameters, in signature order.
fn written(k: &Kernel) -> Vec<TensorId> {
    k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).filter(|t| k.tensors[*t].role != TensorRole::Input).collect()
}

/// Split every written tensor into the chunks' pieces (`p_NAME`), each
/// chunk an outer range of its rows (`inner_NAME` elements a row), and
/// open the chunk loop: inside, `lo..hi` is the chunk's outer range and
/// `c_NAME` its piece of each written tensor, whose first element is
/// `lo * inner_NAME`.
fn chunks_open(k: &Kernel, ir: &KernelIr, outer: &str, work: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "        let ranges = tk_rt::chunk_ranges({}, {});", outer, work);
    s.push_str(&pieces_open(k, ir));
    let _ = writeln!(s, "        tk_rt::run_jobs(ranges.len(), &|c: usize| errors.keep((|| -> Result<(), String> {{");
    s.push_str(&chunk_start(k));
    s
}

/// Split every written tensor into the pieces of `ranges` (`p_NAME`,
/// `inner_NAME` elements a row), and the chunks' first error.
fn pieces_open(k: &Kernel, ir: &KernelIr) -> String {
    let mut s = String::new();
    let observed = observed_outputs(k, ir);
    for t in written(k) {
        let info = &k.tensors[t];
        let inner = if info.shape.len() > 1 { len_expr(k, &info.shape[1..]) } else { "1i64".into() };
        let _ = writeln!(s, "        let inner_{n}: i64 = {inner};", n = info.name, inner = inner);
        let sink = if observed.contains(&t) { format!("watch.output({})", super::launch::tensor_position(k, t)) } else { "None".to_string() };
        let _ = writeln!(s, "        let p_{n} = tk_rt::cpu::split_out(o_{n}, ranges.iter().map(|(lo, hi)| (hi - lo) * inner_{n}), {sink});", n = info.name, sink = sink);
    }
    let _ = writeln!(s, "        let errors = tk_rt::cpu::FirstError::default();");
    s
}

/// Inside chunk `c`: its range `lo..hi` and its piece `c_NAME` of each
/// written tensor.
fn chunk_start(k: &Kernel) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "            let (lo, hi) = ranges[c];");
    s.push_str(&own_values(k, "            "));
    for t in written(k) {
        let _ = writeln!(s, "            #[allow(unused_mut)]");
        let _ = writeln!(s, "            let mut c_{n} = tk_rt::cpu::take(&p_{n}, c)?;", n = k.tensors[t].name);
    }
    s
}

/// The dims and scalars as a task's own values: the closure would read
/// them through references, which the loops' stores might alias as far
/// as the compiler knows, so it reloaded each one per element and left
/// the loop scalar (AdamW: 5 ns an element on two threads).
fn own_values(k: &Kernel, pad: &str) -> String {
    let mut s = String::new();
    for d in &k.dims {
        let _ = writeln!(s, "{pad}let d_{n}: i64 = d_{n};", pad = pad, n = d.name);
        // Told to the optimiser: indices below a dim survive the kernel's
        // 32-bit index arithmetic unchanged, so a row's loop needs no
        // bounds check per element (the dims' own check is the launch's:
        // `requires` bounds them far below this).
        let _ = writeln!(s, "{pad}if !(0..=i32::MAX as i64).contains(&d_{n}) {{ return Err(format!(\"dimension {n} = {{}} is outside 32-bit indexing\", d_{n})); }}", pad = pad, n = d.name);
    }
    for sc in &k.scalars {
        let _ = writeln!(s, "{pad}let sc_{n} = sc_{n};", pad = pad, n = sc.name);
    }
    s
}

/// Where a chunk's piece of written tensor `t` starts, as an element
/// index of the whole tensor.
fn piece_base(k: &Kernel, t: TensorId) -> String {
    format!("(lo * inner_{})", k.tensors[t].name)
}

fn chunks_close() -> String {
    "            Ok(())\n        })()));\n        errors.result()\n".to_string()
}

/// Loop headers over `vars` (the first over `lo..hi`), the element's flat
/// index as `flat`; returns the text and the indentation inside.
fn element_loops(k: &Kernel, vars: &[VarId], names: &[String]) -> (String, String) {
    let mut s = String::new();
    let mut indent = String::from("            ");
    for (j, v) in vars.iter().enumerate() {
        let range = if j == 0 { "lo..hi".to_string() } else { format!("0..{}", dim_expr(k, k.vars[*v].extent)) };
        let _ = writeln!(s, "{}for {} in {} {{", indent, names[j], range);
        indent.push_str("    ");
    }
    let mut flat = String::new();
    for (j, v) in vars.iter().enumerate() {
        flat = if j == 0 { names[0].clone() } else { format!("({} * {} + {})", flat, dim_expr(k, k.vars[*v].extent), names[j]) };
    }
    let _ = writeln!(s, "{}let flat: i64 = {};", indent, flat);
    (s, indent)
}

fn element_loops_close(rank: usize) -> String {
    let mut s = String::new();
    for j in (0..rank).rev() {
        let _ = writeln!(s, "            {}}}", "    ".repeat(j));
    }
    s
}

/// The chunk loop of the element-wise forms: chunks of the first axis,
/// weighed by a row's cost.
fn element_chunks_open(k: &Kernel, ir: &KernelIr) -> String {
    let outer = dim_expr(k, k.vars[k.stmts[0].vars[0]].extent);
    chunks_open(k, ir, &outer, &format!("{} * {}", outer, row_cost(k)))
}

/// The element-wise form: per element, each statement in order.
fn elementwise_body(k: &Kernel, ir: &KernelIr) -> String {
    let first = &k.stmts[0];
    let rank = first.vars.len();
    let mut s = element_chunks_open(k, ir);
    let names: Vec<String> = (0..rank).map(|j| format!("e{}", j)).collect();
    let (loops, indent) = element_loops(k, &first.vars, &names);
    s.push_str(&loops);
    // Reads: inputs from their slices; what the kernel writes, from the
    // element's local once a statement has computed it, else (an inout
    // before its first write) from the chunk's piece.
    let mut loads: Vec<(TensorId, LoadAs)> = Vec::new();
    for (t, info) in k.tensors.iter().enumerate() {
        match info.role {
            TensorRole::Input => loads.push((t, LoadAs::Slice { slice: format!("t_{}", info.name), base: None })),
            TensorRole::Inout => loads.push((t, LoadAs::Slice { slice: format!("&*c_{}", info.name), base: Some(piece_base(k, t)) })),
            _ => {}
        }
    }
    for st in &k.stmts {
        let g = Gen::new(k, Some(ir), Mode::Mirror).reading(loads.clone());
        let info = &k.tensors[st.target];
        let vt = value_type(info.dtype, Mode::Mirror);
        let _ = writeln!(s, "{}// {}", indent, info.name);
        let aliases: Vec<String> = st.vars.iter().zip(&names).map(|(v, e)| format!("let {}: i64 = {};", g.var(*v), e)).collect();
        let local = format!("l_t_{}", info.name);
        let _ = writeln!(s, "{}let {}: {} = {{ {} {} }};", indent, local, vt, aliases.join(" "), g.expr(&st.value));
        if info.role != TensorRole::Intermediate {
            let _ = writeln!(s, "{}c_{n}.st(flat - {b}, {l}, \"{n}\")?;", indent, n = info.name, b = piece_base(k, st.target), l = local);
        }
        loads.retain(|(t, _)| *t != st.target);
        loads.push((st.target, LoadAs::Local(local)));
    }
    s.push_str(&element_loops_close(rank));
    s.push_str(&chunks_close());
    s
}

/// The contraction form: the sums by the register tile in tasks on the
/// executor (`tk_rt::cpu::contract_rows`), each block of rows finished by
/// the rest of the statement per element as soon as its sums are done
/// (in the task that summed them, where tasks are whole rows), into its
/// piece of the output.
fn contraction_body(k: &Kernel, ir: &KernelIr, g: &Gemm) -> String {
    let st = &k.stmts[0];
    let (i, j) = (st.vars[0], st.vars[1]);
    let (me, ne, ke) = (dim_expr(k, k.vars[i].extent), dim_expr(k, k.vars[j].extent), dim_expr(k, k.vars[g.k].extent));
    let (ta, sai, sak) = &g.a;
    let (tb, sbj, sbk) = &g.b;
    let (an, bn) = (&k.tensors[*ta].name, &k.tensors[*tb].name);
    let mut s = String::new();
    let _ = writeln!(s, "        let op_a = tk_rt::cpu::Operand {{ data: t_{}, si: {}, sk: {} }};", an, sai, sak);
    let _ = writeln!(s, "        let op_b = tk_rt::cpu::Operand {{ data: t_{}, si: {}, sk: {} }};", bn, sbj, sbk);
    let _ = writeln!(s, "        op_a.covers({me}, {ke}, \"{an}\")?;", me = me, ke = ke, an = an);
    let _ = writeln!(s, "        op_b.covers({ne}, {ke}, \"{bn}\")?;", ne = ne, ke = ke, bn = bn);
    let _ = writeln!(s, "        let plan = tk_rt::cpu::plan({}, {}, {});", me, ne, ke);
    match epilogue_reads(k, st, g.reduce) {
        Some(reads) => s.push_str(&staged_epilogue(k, ir, g, &reads, &ne)),
        None => s.push_str(&plain_epilogue(k, ir, g, &ne)),
    }
    s
}

/// The plan's row blocks as the chunks, and the contraction opened: inside,
/// block `c` (`lo..hi`, its pieces `c_NAME`) with its sums `accs` (`(i -
/// lo) * N + j`).
fn finish_open(k: &Kernel, ir: &KernelIr) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "        let ranges: &[(i64, i64)] = plan.blocks();");
    s.push_str(&pieces_open(k, ir));
    let _ = writeln!(s, "        tk_rt::cpu::contract_rows(&plan, op_a, op_b, &|c: usize, accs: &[f32]| errors.keep((|| -> Result<(), String> {{");
    s.push_str(&chunk_start(k));
    s
}

/// How the epilogue of a contraction (the statement outside its sum)
/// reads a tensor, in the staged form.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EpilogueRead {
    /// `t[i, j]`, a row at a time, widened.
    Own,
    /// `t[j]` (a bias), widened once a call.
    Col,
    /// `t[i]`, once a row.
    Row,
    /// `t[]`, once a call.
    Call,
}

/// Every read of the epilogue (outside the sum) as an [`EpilogueRead`] of
/// a float input; `None` when one is not such.
fn epilogue_reads(k: &Kernel, st: &tir::Stmt, reduce: &TExpr) -> Option<Vec<(TensorId, EpilogueRead)>> {
    fn go(k: &Kernel, st: &tir::Stmt, reduce: &TExpr, e: &TExpr, out: &mut Vec<(TensorId, EpilogueRead)>, ok: &mut bool) {
        if std::ptr::eq(e, reduce) {
            return;
        }
        match &e.kind {
            TExprKind::Load { tensor, index } => {
                let info = &k.tensors[*tensor];
                let vars: Vec<Option<VarId>> = index.iter().map(|x| x.as_var()).collect();
                let read = match vars.as_slice() {
                    [] => Some(EpilogueRead::Call),
                    [Some(a)] if *a == st.vars[1] => Some(EpilogueRead::Col),
                    [Some(a)] if *a == st.vars[0] => Some(EpilogueRead::Row),
                    [Some(a), Some(b)] if *a == st.vars[0] && *b == st.vars[1] => Some(EpilogueRead::Own),
                    _ => None,
                };
                match read {
                    Some(r) if info.role == TensorRole::Input && matches!(info.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32) => {
                        if !out.iter().any(|(t, _)| t == tensor) {
                            out.push((*tensor, r));
                        } else if !out.contains(&(*tensor, r)) {
                            *ok = false;
                        }
                    }
                    _ => *ok = false,
                }
            }
            TExprKind::Reduce { .. } => *ok = false,
            TExprKind::Unary(_, a) | TExprKind::Cast(a) => go(k, st, reduce, a, out, ok),
            TExprKind::Binary(_, a, b) => {
                go(k, st, reduce, a, out, ok);
                go(k, st, reduce, b, out, ok);
            }
            TExprKind::Call(_, args) => args.iter().for_each(|x| go(k, st, reduce, x, out, ok)),
            TExprKind::Let { value, body, .. } => {
                go(k, st, reduce, value, out, ok);
                go(k, st, reduce, body, out, ok);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut ok = matches!(k.tensors[st.target].dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32);
    go(k, st, reduce, &st.value, &mut out, &mut ok);
    ok.then_some(out)
}

/// The epilogue in groups of rows: the rows' sums, their own-element
/// reads widened, a bias widened once a call, then per row a loop of plain
/// arithmetic (vectorised) into the group's rows, narrowed after. A group
/// is up to `EPILOGUE_GROUP` elements (in L1): a stage and a narrowing a
/// row cost more than the row's arithmetic where rows are short (nano's
/// router writes 4 columns a row, its last layer 20).
fn staged_epilogue(k: &Kernel, ir: &KernelIr, g: &Gemm, reads: &[(TensorId, EpilogueRead)], ne: &str) -> String {
    let st = &k.stmts[0];
    let info = &k.tensors[st.target];
    let name = |t: &TensorId| k.tensors[*t].name.clone();
    let mut s = String::new();
    let _ = writeln!(s, "        let nn = ({}) as usize;", ne);
    let _ = writeln!(s, "        let per = ({} / nn.max(1)).max(1);", EPILOGUE_GROUP);
    for (t, r) in reads {
        match r {
            EpilogueRead::Col => {
                s.push_str(&widened_once(&name(t), "nn"));
            }
            EpilogueRead::Call => {
                let _ = writeln!(s, "        let h_{n}: f32 = tk_rt::cpu::ld(t_{n}, 0i64, \"{n}\")?;", n = name(t));
            }
            _ => {}
        }
    }
    s.push_str(&finish_open(k, ir));
    for (t, r) in reads {
        if *r == EpilogueRead::Own {
            let _ = writeln!(s, "            let mut in_{} = tk_rt::cpu::Rows::overwritten(per * nn);", name(t));
        }
    }
    let _ = writeln!(s, "            let mut out_rows = tk_rt::cpu::Rows::overwritten(per * nn);");
    let _ = writeln!(s, "            let mut e = lo;");
    let _ = writeln!(s, "            while e < hi {{");
    let _ = writeln!(s, "                let rows = ((hi - e) as usize).min(per);");
    let _ = writeln!(s, "                let len = rows * nn;");
    let _ = writeln!(s, "                let first = ((e - lo) * {}) as usize;", ne);
    let _ = writeln!(s, "                let sums_all: &[f32] = accs.get(first..first + len).ok_or_else(|| \"the sums are short\".to_string())?;");
    for (t, r) in reads {
        if *r == EpilogueRead::Own {
            let _ = writeln!(s, "                let g_{n}: &[f32] = &tk_rt::cpu::stage(t_{n}, e * {ne}, len, &mut in_{n}, \"{n}\")?[..len];", n = name(t), ne = ne);
        }
    }
    let _ = writeln!(s, "                for ((r, w), sums) in out_rows[..len].chunks_exact_mut(nn.max(1)).enumerate().zip(sums_all.chunks_exact(nn.max(1))) {{");
    let _ = writeln!(s, "                    let e0 = e + r as i64;");
    let mut loads: Vec<(TensorId, LoadAs)> = Vec::new();
    for (t, r) in reads {
        let n = name(t);
        match r {
            EpilogueRead::Own => {
                let _ = writeln!(s, "                    let s_{n} = &g_{n}[r * nn..][..nn];", n = n);
                loads.push((*t, LoadAs::Local(format!("s_{}[c]", n))));
            }
            EpilogueRead::Row => {
                let _ = writeln!(s, "                    let h_{n}: f32 = tk_rt::cpu::ld(t_{n}, e0, \"{n}\")?;", n = n);
                loads.push((*t, LoadAs::Local(format!("h_{}", n))));
            }
            EpilogueRead::Col => {
                let _ = writeln!(s, "                    let col_{n} = &col_{n}[..nn];", n = n);
                loads.push((*t, LoadAs::Local(format!("col_{}[c]", n))));
            }
            EpilogueRead::Call => loads.push((*t, LoadAs::Local(format!("h_{}", n)))),
        }
    }
    let gen = Gen::new(k, Some(ir), Mode::Mirror).reading(loads);
    gen.subst.borrow_mut().push((g.reduce as *const TExpr as usize, "sums[c]".to_string()));
    let _ = writeln!(s, "                    let w = &mut w[..nn];");
    let _ = writeln!(s, "                    let sums = &sums[..nn];");
    let _ = writeln!(s, "                    for c in 0..nn {{");
    let _ = writeln!(
        s,
        "                        w[c] = {{ let {}: i64 = e0; let {}: i64 = c as i64; {} }};",
        gen.var(st.vars[0]),
        gen.var(st.vars[1]),
        value_for_narrowing(&gen, k, 0)
    );
    let _ = writeln!(s, "                    }}");
    let _ = writeln!(s, "                }}");
    let _ = writeln!(s, "                c_{n}.unstage(&out_rows[..len], e * {ne} - {b}, \"{n}\")?;", n = info.name, ne = ne, b = piece_base(k, st.target));
    let _ = writeln!(s, "                e += rows as i64;");
    let _ = writeln!(s, "            }}");
    s.push_str(&chunks_close());
    s
}

/// Elements of a contraction epilogue's group of rows (16 KB of f32).
const EPILOGUE_GROUP: usize = 4096;

/// The epilogue per element, reads checked one by one.
fn plain_epilogue(k: &Kernel, ir: &KernelIr, g: &Gemm, ne: &str) -> String {
    let st = &k.stmts[0];
    let (i, j) = (st.vars[0], st.vars[1]);
    let mut s = finish_open(k, ir);
    let names = vec!["e0".to_string(), "e1".to_string()];
    let (loops, indent) = element_loops(k, &st.vars, &names);
    s.push_str(&loops);
    let loads: Vec<(TensorId, LoadAs)> = k.tensors.iter().enumerate().filter(|(_, t)| t.role == TensorRole::Input).map(|(t, info)| (t, LoadAs::Slice { slice: format!("t_{}", info.name), base: None })).collect();
    let gen = Gen::new(k, Some(ir), Mode::Mirror).reading(loads);
    gen.subst.borrow_mut().push((g.reduce as *const TExpr as usize, format!("tk_rt::get(accs, flat - lo * {}, \"the sums\")?", ne)));
    let info = &k.tensors[st.target];
    let _ = writeln!(
        s,
        "{}let value: {} = {{ let {}: i64 = e0; let {}: i64 = e1; {} }};",
        indent,
        value_type(info.dtype, Mode::Mirror),
        gen.var(i),
        gen.var(j),
        gen.expr(&st.value)
    );
    let _ = writeln!(s, "{}c_{n}.st(flat - {b}, value, \"{n}\")?;", indent, n = info.name, b = piece_base(k, st.target));
    s.push_str(&element_loops_close(2));
    s.push_str(&chunks_close());
    s
}

/// A row's cost in elements' work, for the split into chunks: per
/// statement, its elements in a row (the extents past the first) times
/// the length of each reduction it runs (a reduction per element runs per
/// element), plus sixteen an element for each library call (a `tanhf`
/// costs about as much as sixteen multiply-adds), so that a kernel of few
/// but costly elements (GELU's 32k) runs on every thread.
fn row_cost(k: &Kernel) -> String {
    let mut terms = Vec::new();
    for s in &k.stmts {
        let mut factors: Vec<String> = s.vars.iter().skip(1).map(|v| dim_expr(k, k.vars[*v].extent)).collect();
        let mut calls = 0;
        s.value.walk(&mut |e| match &e.kind {
            TExprKind::Call(tir::Builtin::Exp | tir::Builtin::Log | tir::Builtin::Tanh, _) => calls += 1,
            TExprKind::Reduce { var, .. } => factors.push(dim_expr(k, k.vars[*var].extent)),
            _ => {}
        });
        factors.push(format!("{}i64", 1 + 16 * calls));
        terms.push(factors.join(" * "));
    }
    format!("({})", terms.join(" + "))
}

/// How the row form reads an input tensor (every read of it alike).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RowsRead {
    /// `t[r, v]`: the row widened to f32 once a row, indexed by a
    /// variable over the row's length.
    Row,
    /// `t[r]`: once a row.
    PerRow,
    /// `t[v]`: widened once a call, indexed by a variable over its length.
    Columns,
    /// `t[]`: once a call.
    Call,
    /// Anything else: each read checked.
    Checked,
}

/// Is `e` a variable ranging over exactly `extent` (an index in bounds of
/// an axis of that length)?
fn var_over(k: &Kernel, e: &TExpr, extent: Dim) -> bool {
    e.as_var().is_some_and(|v| k.vars[v].extent == extent)
}

fn rows_read(k: &Kernel, t: TensorId) -> RowsRead {
    let info = &k.tensors[t];
    let float = matches!(info.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32);
    let mut class: Option<RowsRead> = None;
    for s in &k.stmts {
        s.value.walk(&mut |e| {
            let TExprKind::Load { tensor, index } = &e.kind else { return };
            if *tensor != t {
                return;
            }
            let this = match index.as_slice() {
                [] => RowsRead::Call,
                [r] if r.as_var() == Some(s.vars[0]) => RowsRead::PerRow,
                [c] if float && var_over(k, c, info.shape[0]) => RowsRead::Columns,
                [r, c] if float && r.as_var() == Some(s.vars[0]) && var_over(k, c, info.shape[1]) => RowsRead::Row,
                _ => RowsRead::Checked,
            };
            class = Some(match class {
                None => this,
                Some(c) if c == this => c,
                _ => RowsRead::Checked,
            });
        });
    }
    class.unwrap_or(RowsRead::Checked)
}

/// The row form: per row, each statement in turn; a statement over the
/// columns fills the row (an intermediate's or an output's, in an f32 row
/// buffer; an output's narrowed into its piece after), a statement of the
/// row alone a local. Inputs read a row at a time are widened once a row,
/// those read by column once a call, those read once a row or a call
/// hoisted, so that the loops over a row read buffers and locals only.
/// Reductions are the mirror's (the block's order), printed with each
/// thread's partial over blocks of consecutive indices (`Gen::blocked`).
fn rows_body(k: &Kernel, ir: &KernelIr) -> String {
    let first = &k.stmts[0];
    let rows = dim_expr(k, k.vars[first.vars[0]].extent);
    let cols_dim = k.stmts.iter().find_map(|s| s.vars.get(1)).map(|c| k.vars[*c].extent);
    let cols = cols_dim.map(|d| dim_expr(k, d));
    let width = cols.clone().unwrap_or_else(|| "1i64".into());
    let work = format!("{} * {}", rows, row_cost(k));
    let name = |t: TensorId| k.tensors[t].name.clone();
    let inputs: Vec<(TensorId, RowsRead)> = k.tensors.iter().enumerate().filter(|(_, i)| i.role == TensorRole::Input).map(|(t, _)| (t, rows_read(k, t))).collect();
    let mut s = String::new();
    let mut loads: Vec<(TensorId, LoadAs)> = Vec::new();
    for (t, r) in &inputs {
        let info = &k.tensors[*t];
        match r {
            RowsRead::Columns => {
                s.push_str(&widened_once(&info.name, &format!("({}) as usize", dim_expr(k, info.shape[0]))));
                loads.push((*t, LoadAs::Row(format!("col_{}", info.name))));
            }
            RowsRead::Call => {
                let _ = writeln!(s, "        let h_{n}: {vt} = tk_rt::cpu::ld(t_{n}, 0i64, \"{n}\")?;", n = info.name, vt = value_type(info.dtype, Mode::Mirror));
                loads.push((*t, LoadAs::Local(format!("h_{}", info.name))));
            }
            RowsRead::Row => loads.push((*t, LoadAs::Row(format!("srow_{}", info.name)))),
            RowsRead::PerRow => loads.push((*t, LoadAs::Local(format!("h_{}", info.name)))),
            RowsRead::Checked => loads.push((*t, LoadAs::Slice { slice: format!("t_{}", info.name), base: None })),
        }
    }
    for (t, info) in k.tensors.iter().enumerate() {
        if info.role == TensorRole::Inout {
            loads.push((t, LoadAs::Slice { slice: format!("&*c_{}", info.name), base: Some(piece_base(k, t)) }));
        }
    }
    s.push_str(&chunks_open(k, ir, &rows, &work));
    for (t, r) in &inputs {
        if *r == RowsRead::Row {
            let _ = writeln!(s, "            let mut in_{n} = tk_rt::cpu::Rows::overwritten(({len}) as usize);", n = name(*t), len = dim_expr(k, k.tensors[*t].shape[1]));
        }
    }
    // A row of each tensor the statements write over the columns.
    for st in &k.stmts {
        if st.vars.len() == 2 {
            let _ = writeln!(s, "            let mut rb_{} = tk_rt::cpu::Rows::overwritten(({}) as usize);", name(st.target), width);
        }
    }
    let _ = writeln!(s, "            for e0 in lo..hi {{");
    for (t, r) in &inputs {
        let info = &k.tensors[*t];
        match r {
            RowsRead::Row => {
                let len = dim_expr(k, info.shape[1]);
                let _ = writeln!(s, "                let srow_{n}: &[f32] = &tk_rt::cpu::stage(t_{n}, e0 * {len}, ({len}) as usize, &mut in_{n}, \"{n}\")?[..({len}) as usize];", n = info.name, len = len);
            }
            RowsRead::PerRow => {
                let _ = writeln!(s, "                let h_{n}: {vt} = tk_rt::cpu::ld(t_{n}, e0, \"{n}\")?;", n = info.name, vt = value_type(info.dtype, Mode::Mirror));
            }
            _ => {}
        }
    }
    for (i, st) in k.stmts.iter().enumerate() {
        let info = &k.tensors[st.target];
        let g = Gen::new(k, Some(ir), Mode::Mirror).reading(loads.clone()).blocked();
        let vt = value_type(info.dtype, Mode::Mirror);
        let _ = writeln!(s, "                // {}", info.name);
        let row_alias = format!("let {}: i64 = e0;", g.var(st.vars[0]));
        let next = if st.vars.len() == 2 {
            let c = cols.as_ref().expect("a statement over two axes has columns");
            // The loop runs over `0..n` in usize, and the row and every
            // buffer read only at the column are sliced to `n` before it:
            // so the loop has no bounds check and vectorises whole (with
            // checks, LLVM ran the last vector's worth of every row as
            // scalar code).
            let _ = writeln!(s, "                {{");
            let _ = writeln!(s, "                    let n: usize = ({}) as usize;", c);
            let _ = writeln!(s, "                    let row = &mut rb_{}[..n];", info.name);
            for buf in rows_read_at(&loads, &st.value, st.vars[1]) {
                let _ = writeln!(s, "                    let {b}: &[f32] = &{b}[..n];", b = buf);
            }
            let _ = writeln!(s, "                    for e1 in 0..n {{");
            let _ = writeln!(s, "                        row[e1] = {{ {} let {}: i64 = e1 as i64; {} }};", row_alias, g.var(st.vars[1]), value_for_narrowing(&g, k, i));
            let _ = writeln!(s, "                    }}");
            let _ = writeln!(s, "                }}");
            if info.role != TensorRole::Intermediate {
                let _ = writeln!(s, "                c_{n}.unstage(&rb_{n}, e0 * {c} - {b}, \"{n}\")?;", n = info.name, c = c, b = piece_base(k, st.target));
            }
            LoadAs::Row(format!("rb_{}", info.name))
        } else {
            let local = format!("l_t_{}", info.name);
            let _ = writeln!(s, "                let {}: {} = {{ {} {} }};", local, vt, row_alias, g.expr(&st.value));
            if info.role != TensorRole::Intermediate {
                let _ = writeln!(s, "                c_{n}.st(e0 - {b}, {l}, \"{n}\")?;", n = info.name, b = piece_base(k, st.target), l = local);
            }
            LoadAs::Local(local)
        };
        loads.retain(|(t, _)| *t != st.target);
        loads.push((st.target, next));
    }
    let _ = writeln!(s, "            }}");
    s.push_str(&chunks_close());
    s
}

/// The rounding that ends statement `i`'s value (through its `let`s),
/// where the narrowing after the loop repeats it: the target is an f16
/// or bf16 tensor the kernel writes (`unstage` rounds the f32 block to
/// nearest even, as `rf16`/`rbf16` do, NaN and overflow alike), and no
/// later statement reads the value before it is narrowed. Printed without
/// its `rf16`, the loop loses a dozen vector operations an element and
/// the bits stay the mirror's: rounding twice to one format is rounding
/// once.
fn rounding_left_to_narrowing(k: &Kernel, i: usize) -> Option<&TExpr> {
    let st = &k.stmts[i];
    let info = &k.tensors[st.target];
    if info.role == TensorRole::Intermediate || !matches!(info.dtype, Dtype::F16 | Dtype::Bf16) {
        return None;
    }
    let read_later = k.stmts[i + 1..].iter().any(|later| {
        let mut reads = false;
        later.value.walk(&mut |e| reads |= matches!(&e.kind, TExprKind::Load { tensor, .. } if *tensor == st.target));
        reads
    });
    if read_later {
        return None;
    }
    let mut tail = &st.value;
    while let TExprKind::Let { body, .. } = &tail.kind {
        tail = body;
    }
    matches!(tail.kind, TExprKind::Cast(_) if tail.ty == info.dtype).then_some(tail)
}

/// `value` printed by `g`, without the rounding that `rounding_left_to_narrowing`
/// found (if any).
fn value_for_narrowing(g: &Gen<'_>, k: &Kernel, i: usize) -> String {
    let st = &k.stmts[i];
    let Some(cast) = rounding_left_to_narrowing(k, i) else { return g.expr(&st.value) };
    let TExprKind::Cast(operand) = &cast.kind else { unreachable!("rounding_left_to_narrowing returns casts") };
    let unrounded = format!("(({}) as f32)", g.expr(operand));
    g.subst.borrow_mut().push((cast as *const TExpr as usize, unrounded));
    let text = g.expr(&st.value);
    g.subst.borrow_mut().pop();
    text
}

/// The row buffers (`LoadAs::Row`) that `value` reads at `col` alone
/// (every read's last index the variable itself): those a loop over the
/// columns may slice to the row's length.
fn rows_read_at(loads: &[(TensorId, LoadAs)], value: &TExpr, col: VarId) -> Vec<String> {
    let mut at_col: Vec<String> = Vec::new();
    let mut elsewhere: Vec<String> = Vec::new();
    value.walk(&mut |e| {
        let TExprKind::Load { tensor, index } = &e.kind else { return };
        let Some((_, LoadAs::Row(buf))) = loads.iter().find(|(t, _)| t == tensor) else { return };
        let list = if matches!(index.last().map(|i| &i.kind), Some(TExprKind::Var(v)) if *v == col) { &mut at_col } else { &mut elsewhere };
        if !list.contains(buf) {
            list.push(buf.clone());
        }
    });
    at_col.retain(|b| !elsewhere.contains(b));
    at_col
}

/// Elements a block of the staged form (its buffers: 2 KB each).
const BLOCK: usize = 512;

/// The staged element-wise form: rows (one, the chunk, for one axis) in
/// blocks of [`BLOCK`]; each block's own-element reads widened to f32
/// first, the values computed by a loop of plain arithmetic (vectorised:
/// no call, no branch, no failure path inside), each written tensor's
/// block narrowed after. Once-a-call and once-a-row reads are read before
/// the loops.
fn staged_body(k: &Kernel, ir: &KernelIr) -> String {
    let first = &k.stmts[0];
    let rank = first.vars.len();
    let exts: Vec<String> = first.vars.iter().map(|v| dim_expr(k, k.vars[*v].extent)).collect();
    let mut s = element_chunks_open(k, ir);
    // What is read how: own-element reads of inputs and inouts (staged),
    // once-a-call and once-a-row reads (hoisted), by tensor.
    let mut own: Vec<TensorId> = Vec::new();
    let mut call: Vec<TensorId> = Vec::new();
    let mut row: Vec<TensorId> = Vec::new();
    for st in &k.stmts {
        st.value.walk(&mut |e| {
            if let TExprKind::Load { tensor, index } = &e.kind {
                if matches!(k.tensors[*tensor].role, TensorRole::Input | TensorRole::Inout) {
                    let list = match staged_read(k, st, *tensor, index) {
                        Some(StagedRead::Own) => &mut own,
                        Some(StagedRead::Call) => &mut call,
                        Some(StagedRead::Gathered(_)) => return,
                        _ => &mut row,
                    };
                    if !list.contains(tensor) {
                        list.push(*tensor);
                    }
                }
            }
        });
    }
    for t in &own {
        let _ = writeln!(s, "            let mut in_{} = tk_rt::cpu::Rows::overwritten({});", k.tensors[*t].name, BLOCK);
    }
    let Gathers { pairs: gathers, reads: gathered } = gathered_reads(k);
    for (j, _) in gathers.iter().enumerate() {
        let _ = writeln!(s, "            let mut in_g{} = tk_rt::cpu::Rows::overwritten({});", j, BLOCK);
    }
    for t in &written(k) {
        let _ = writeln!(s, "            let mut out_{} = tk_rt::cpu::Rows::overwritten({});", k.tensors[*t].name, BLOCK);
    }
    let relations = observed_relations(k, ir);
    for (i, _) in &relations {
        let _ = writeln!(s, "            let mut holds_{i} = tk_rt::cpu::Holds::new(watch.relation({i}));", i = i);
    }
    let name = |t: &TensorId| k.tensors[*t].name.clone();
    let hoist = |t: &TensorId, index: &str| -> String {
        let info = &k.tensors[*t];
        let slice = if info.role == TensorRole::Input { format!("t_{}", info.name) } else { format!("&*c_{}", info.name) };
        let at = if info.role == TensorRole::Input { index.to_string() } else { format!("{} - {}", index, piece_base(k, *t)) };
        format!("let h_{n}: {vt} = tk_rt::cpu::ld({slice}, {at}, \"{n}\")?;", n = info.name, vt = value_type(info.dtype, Mode::Mirror), slice = slice, at = at)
    };
    for t in &call {
        let _ = writeln!(s, "            {}", hoist(t, "0i64"));
    }
    let (row_loop, col_lo, col_hi, flat0, e_outer) = if rank == 2 {
        ("for e0 in lo..hi {".to_string(), "0i64".to_string(), exts[1].clone(), format!("e0 * {} + b0", exts[1]), "let e1: i64 = b0 + i as i64;".to_string())
    } else {
        ("{".to_string(), "lo".to_string(), "hi".to_string(), "b0".to_string(), "let e0: i64 = b0 + i as i64;".to_string())
    };
    let _ = writeln!(s, "            {}", row_loop);
    for t in &row {
        let _ = writeln!(s, "                {}", hoist(t, "e0"));
    }
    let _ = writeln!(s, "                let mut b0: i64 = {};", col_lo);
    let _ = writeln!(s, "                while b0 < {} {{", col_hi);
    let _ = writeln!(s, "                    let n = (({} - b0) as usize).min({});", col_hi, BLOCK);
    let _ = writeln!(s, "                    let flat0: i64 = {};", flat0);
    for t in &own {
        let info = &k.tensors[*t];
        let (slice, at) = if info.role == TensorRole::Input { (format!("t_{}", info.name), "flat0".to_string()) } else { (format!("&*c_{}", info.name), format!("flat0 - {}", piece_base(k, *t))) };
        // Sliced to `n` here, where the loop can see it: a length it can
        // see is what lets it drop the per-element bounds checks and
        // vectorise (AdamW's moments, read in place, ran scalar).
        let _ = writeln!(s, "                    let s_{n}: &[f32] = &tk_rt::cpu::stage({slice}, {at}, n, &mut in_{n}, \"{n}\")?[..n];", n = info.name, slice = slice, at = at);
    }
    // A gathered read's block: row `g[r]` of the tensor from the block's
    // first column (`stage` checks it lies inside the tensor; the kernel's
    // requires bound `g`).
    for (j, (t, by)) in gathers.iter().enumerate() {
        let info = &k.tensors[*t];
        let _ = writeln!(
            s,
            "                    let s_g{j}: &[f32] = &tk_rt::cpu::stage(t_{n}, (h_{g} as i64) * {w} + b0, n, &mut in_g{j}, \"{n}\")?[..n];",
            j = j,
            n = info.name,
            g = k.tensors[*by].name,
            w = dim_expr(k, info.shape[1])
        );
    }
    let outs = written(k);
    // The loop: reads are locals and block elements; values into blocks.
    let _ = writeln!(s, "                    {{");
    for t in &outs {
        let _ = writeln!(s, "                        let w_{n}: &mut [f32] = &mut out_{n}[..n];", n = name(t));
    }
    let _ = writeln!(s, "                        for i in 0..n {{");
    let _ = writeln!(s, "                            {}", e_outer);
    let mut loads: Vec<(TensorId, LoadAs)> = Vec::new();
    for t in &own {
        loads.push((*t, LoadAs::Local(format!("s_{}[i]", name(t)))));
    }
    for t in call.iter().chain(&row) {
        loads.push((*t, LoadAs::Local(format!("h_{}", name(t)))));
    }
    // An inout read both at its own element and hoisted cannot be: a row
    // or call read of a tensor written per element would read the block
    // being written. `staged` admits row reads of inputs only, and a
    // tensor of no axes has no element statement.
    for (i, st) in k.stmts.iter().enumerate() {
        let info = &k.tensors[st.target];
        let g = Gen::new(k, Some(ir), Mode::Mirror).reading(loads.clone());
        g.subst.borrow_mut().extend(gathered.iter().map(|(e, j)| (*e as *const TExpr as usize, format!("s_g{}[i]", j))));
        let aliases: Vec<String> = st.vars.iter().enumerate().map(|(j, v)| format!("let {}: i64 = e{};", g.var(*v), j)).collect();
        let local = format!("l_t_{}", info.name);
        let _ = writeln!(s, "                            let {}: {} = {{ {} {} }};", local, value_type(info.dtype, Mode::Mirror), aliases.join(" "), value_for_narrowing(&g, k, i));
        if info.role != TensorRole::Intermediate {
            let _ = writeln!(s, "                            w_{}[i] = {};", info.name, local);
        }
        loads.retain(|(t, _)| *t != st.target);
        loads.push((st.target, LoadAs::Local(local)));
    }
    let _ = writeln!(s, "                        }}");
    let _ = writeln!(s, "                    }}");
    for (i, r) in &relations {
        let _ = writeln!(s, "                    holds_{i}.check(&out_{t}[..n], &out_{b}[..n], {f:?});", i = i, t = name(&r.square), b = name(&r.bound), f = r.factor);
    }
    for t in &outs {
        let _ = writeln!(s, "                    c_{n}.unstage(&out_{n}[..n], flat0 - {b}, \"{n}\")?;", n = name(t), b = piece_base(k, *t));
    }
    let _ = writeln!(s, "                    b0 += n as i64;");
    let _ = writeln!(s, "                }}");
    let _ = writeln!(s, "            }}");
    s.push_str(&chunks_close());
    s
}

/// A reduction of a column reduction: the statement it is in, the
/// reduction node, its variable (over the rows) and the block order's
/// threads and warp.
struct ColumnSum<'k> {
    stmt: usize,
    node: &'k TExpr,
    op: RedOp,
    var: VarId,
    body: &'k TExpr,
    threads: u32,
    warp: u32,
}

/// Column reductions (`gb[c] = sum(r) f(x[r, c], ..)`): every statement is
/// over one axis (the columns), its reductions are top-level sums, maxima
/// or minima in the block order over a row variable, and everything read
/// is a float input `t[r, c]` inside a reduction (`r` its variable, `c`
/// the statement's); nothing is read outside them.
fn column_reductions<'k>(k: &'k Kernel, ir: &KernelIr) -> Option<Vec<ColumnSum<'k>>> {
    let cols = k.vars[*k.stmts.first()?.vars.first()?].extent;
    let mut rows: Option<Dim> = None;
    let mut out = Vec::new();
    for (si, s) in k.stmts.iter().enumerate() {
        let [c] = s.vars.as_slice() else { return None };
        let target = &k.tensors[s.target];
        if k.vars[*c].extent != cols || target.role == TensorRole::Intermediate || !matches!(target.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32) {
            return None;
        }
        let reds = tir::top_reductions(&s.value);
        if reds.is_empty() {
            return None;
        }
        for node in reds {
            let TExprKind::Reduce { op, var, body } = &node.kind else { return None };
            let Some(ReductionOrder::Block { threads, warp }) = ir.reduction_order.get(var).copied() else { return None };
            if *op == RedOp::Argmax || *rows.get_or_insert(k.vars[*var].extent) != k.vars[*var].extent {
                return None;
            }
            let mut ok = true;
            body.walk(&mut |e| match &e.kind {
                TExprKind::Load { tensor, index } => {
                    let info = &k.tensors[*tensor];
                    ok &= info.role == TensorRole::Input
                        && matches!(info.dtype, Dtype::F16 | Dtype::Bf16 | Dtype::F32)
                        && index.len() == 2
                        && index[0].as_var() == Some(*var)
                        && index[1].as_var() == Some(*c)
                        && info.shape[1] == cols;
                }
                TExprKind::Reduce { .. } => ok = false,
                _ => {}
            });
            if !ok {
                return None;
            }
            out.push(ColumnSum { stmt: si, node, op: *op, var: *var, body, threads, warp });
        }
        // Nothing read outside the reductions.
        let mut outside = false;
        fn loads_outside(e: &TExpr, reds: &[&TExpr], found: &mut bool) {
            if reds.iter().any(|r| std::ptr::eq(*r, e)) {
                return;
            }
            match &e.kind {
                TExprKind::Load { .. } | TExprKind::Reduce { .. } => *found = true,
                TExprKind::Unary(_, a) | TExprKind::Cast(a) => loads_outside(a, reds, found),
                TExprKind::Binary(_, a, b) => {
                    loads_outside(a, reds, found);
                    loads_outside(b, reds, found);
                }
                TExprKind::Call(_, args) => args.iter().for_each(|x| loads_outside(x, reds, found)),
                TExprKind::Let { value, body, .. } => {
                    loads_outside(value, reds, found);
                    loads_outside(body, reds, found);
                }
                _ => {}
            }
        }
        loads_outside(&s.value, &tir::top_reductions(&s.value), &mut outside);
        if outside {
            return None;
        }
    }
    Some(out)
}

/// Columns a block of the column form.
const COLUMNS: usize = 64;

/// The lane form serves a call when its partials (`lanes x columns` f32s)
/// take at most this many: 4 MB.
const LANE_FORM_PARTIALS: usize = 1 << 20;

/// A column reduction's CPU schedule, one of two forms picked at the call:
///
/// - the **lane form** (the partials of every column fit in
///   `LANE_FORM_PARTIALS`): tasks over the block's threads ("lanes"), each
///   lane `t` summing the rows `t, t + threads, ...` in order over whole
///   rows (each row widened once, its columns vectorised), into its own
///   row of partials; then tasks over the columns reduce each column's
///   partials as the block does. A few columns over many rows (a layer's
///   bias and norm gradients: 128 columns, 2048 rows) get a task per
///   group of lanes, where the column form had one per 16 columns;
/// - the **column form**: a block of columns at a time, the rows in
///   order, each row's block of every read tensor widened once; thread
///   `t`'s partial of column `j` held at `[t][j]`, so that a row's step
///   runs over contiguous columns; then each column's partials reduced.
///
/// Both hold thread `t`'s partial as the kernel's thread sums it (the same
/// rows, the same order), and reduce the partials with `block_reduce`:
/// the same bits.
fn columns_body(k: &Kernel, ir: &KernelIr) -> String {
    let sums = column_reductions(k, ir).expect("checked by `form`");
    let rows = dim_expr(k, k.vars[sums[0].var].extent);
    let g = Gen::new(k, Some(ir), Mode::Mirror);
    let mut s = String::new();
    for (i, c) in sums.iter().enumerate() {
        let _ = writeln!(s, "        let live_{i}: usize = ({t}i64).min({rows}) as usize;", i = i, t = c.threads, rows = rows);
        let _ = writeln!(s, "        let lanes_{i}_live: usize = live_{i}.div_ceil({w}) * {w};", i = i, w = c.warp);
    }
    // The lane form needs one lane-to-rows map: every sum's block of the
    // same threads.
    if sums.iter().all(|c| c.threads == sums[0].threads) {
        let cols = dim_expr(k, k.vars[k.stmts[0].vars[0]].extent);
        let _ = writeln!(s, "        if ({cols}.max(0) as usize).saturating_mul(lanes_0_live) <= {max} {{", cols = cols, max = LANE_FORM_PARTIALS);
        s.push_str(&indent(&lane_form(k, ir, &sums, &g), 4));
        let _ = writeln!(s, "        }} else {{");
        s.push_str(&indent(&column_form(k, ir, &sums, &g), 4));
        let _ = writeln!(s, "        }}");
    } else {
        s.push_str(&column_form(k, ir, &sums, &g));
    }
    s
}

/// `text` with every non-empty line indented by `by` more spaces.
fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| if l.is_empty() { "\n".to_string() } else { format!("{}{}\n", pad, l) }).collect()
}

/// The tensors the column reductions read, in first-read order.
fn column_reads(sums: &[ColumnSum]) -> Vec<TensorId> {
    let mut read: Vec<TensorId> = Vec::new();
    for c in sums {
        c.body.walk(&mut |e| {
            if let TExprKind::Load { tensor, .. } = &e.kind {
                if !read.contains(tensor) {
                    read.push(*tensor);
                }
            }
        });
    }
    read
}

/// The statements' values for column `e0` from the reductions' results
/// `red_0, red_1, ..`, each stored to its output's piece.
fn column_stores(k: &Kernel, ir: &KernelIr, sums: &[ColumnSum], pad: &str) -> String {
    let mut s = String::new();
    for (si, st) in k.stmts.iter().enumerate() {
        let gen = Gen::new(k, Some(ir), Mode::Mirror);
        for (i, c) in sums.iter().enumerate().filter(|(_, c)| c.stmt == si) {
            gen.subst.borrow_mut().push((c.node as *const TExpr as usize, format!("red_{}", i)));
        }
        let info = &k.tensors[st.target];
        let _ = writeln!(s, "{}let value: {} = {{ let {}: i64 = e0; {} }};", pad, value_type(info.dtype, Mode::Mirror), gen.var(st.vars[0]), gen.expr(&st.value));
        let _ = writeln!(s, "{}c_{n}.st(e0 - {b}, value, \"{n}\")?;", pad, n = info.name, b = piece_base(k, st.target));
    }
    s
}

/// Each reduction's gathered columns, `cols_i[j][l]` = lane `l`'s partial
/// of column `j` of a group. Lanes past `lanes_i_live` hold the identity
/// throughout: never gathered, and `block_reduce` leaves their warps alone.
fn gathered_columns_decl(sums: &[ColumnSum], g: &Gen) -> String {
    let mut s = String::new();
    for (i, c) in sums.iter().enumerate() {
        let (_, init, _) = g.partial_pieces(c.op, c.body, "x");
        let _ = writeln!(s, "            let mut cols_{}: [[f32; {}]; {}] = [[{}; {}]; {}];", i, c.threads, GATHERED, init, c.threads, GATHERED);
    }
    s
}

/// Where a form's partials of a group of columns lie: lane `l`'s partial
/// of column `j` at `parts_i[l * stride + j]`, the columns
/// `first..first + count` (Rust expressions, `usize`), output columns
/// from `e0_first` (`i64`).
#[derive(Clone, Copy)]
struct PartialColumns<'a> {
    stride: &'a str,
    first: &'a str,
    count: &'a str,
    e0_first: &'a str,
}

/// The columns of `at`, each reduced as the block does into `red_i` and
/// stored. Both column forms gather their partials `GATHERED` columns at
/// a time, a lane's run of them one cache line: a column's lanes one by
/// one lie a row of partials apart (8 KB at tiny's 2048 columns in the
/// lane form, all in one L1 set), and that gather was 80% of tiny's
/// parameter gradients.
fn reduce_gathered_columns(k: &Kernel, ir: &KernelIr, sums: &[ColumnSum], g: &Gen, at: &PartialColumns, pad: &str) -> String {
    let PartialColumns { stride, first, count, e0_first } = *at;
    let mut s = String::new();
    let _ = writeln!(s, "{pad}let mut b0 = 0usize;", pad = pad);
    let _ = writeln!(s, "{pad}while b0 < {count} {{", pad = pad, count = count);
    let _ = writeln!(s, "{pad}    let nb = ({count} - b0).min({g});", pad = pad, count = count, g = GATHERED);
    for i in 0..sums.len() {
        let _ = writeln!(s, "{pad}    for l in 0..lanes_{i}_live {{ for (col, v) in cols_{i}[..nb].iter_mut().zip(&parts_{i}[l * {stride} + {first} + b0..][..nb]) {{ col[l] = *v; }} }}", pad = pad, i = i, stride = stride, first = first);
    }
    let _ = writeln!(s, "{pad}    for jj in 0..nb {{", pad = pad);
    let _ = writeln!(s, "{pad}        let e0: i64 = {e0} + (b0 + jj) as i64;", pad = pad, e0 = e0_first);
    for (i, c) in sums.iter().enumerate() {
        let (_, init, f) = g.partial_pieces(c.op, c.body, "x");
        let _ = writeln!(s, "{pad}        let red_{i}: f32 = tk_rt::block_reduce(&mut cols_{i}[jj], {w}, live_{i}, {init}, {f});", pad = pad, i = i, w = c.warp, init = init, f = f);
    }
    s.push_str(&column_stores(k, ir, sums, &format!("{}        ", pad)));
    let _ = writeln!(s, "{pad}    }}", pad = pad);
    let _ = writeln!(s, "{pad}    b0 += nb;", pad = pad);
    let _ = writeln!(s, "{pad}}}", pad = pad);
    s
}

/// See [`columns_body`]. Threads past the rows hold the identity
/// throughout (`block_reduce` skips their warps and never reads their
/// lanes): only the live ones' partials are kept and gathered.
fn lane_form(k: &Kernel, ir: &KernelIr, sums: &[ColumnSum], g: &Gen) -> String {
    let cols = dim_expr(k, k.vars[k.stmts[0].vars[0]].extent);
    let rows = dim_expr(k, k.vars[sums[0].var].extent);
    let read = column_reads(sums);
    let name = |t: &TensorId| k.tensors[*t].name.clone();
    let mut s = String::new();
    let _ = writeln!(s, "        let width: usize = {}.max(0) as usize;", cols);
    for (i, c) in sums.iter().enumerate() {
        let (_, init, _) = g.partial_pieces(c.op, c.body, "x");
        let _ = writeln!(s, "        let mut parts_{} = tk_rt::cpu::Rows::filled(lanes_{}_live * width, {});", i, i, init);
    }
    // Phase 1: each task a range of lanes, each lane its rows in order.
    let _ = writeln!(s, "        {{");
    let _ = writeln!(s, "            let lane_ranges = tk_rt::chunk_ranges(live_0 as i64, {} * {} * {});", rows, cols, sums.len());
    for i in 0..sums.len() {
        let _ = writeln!(s, "            let q_{i} = tk_rt::cpu::split(&mut parts_{i}[..], lane_ranges.iter().map(|(lo, hi)| (hi - lo) * width as i64));", i = i);
    }
    let _ = writeln!(s, "            let errors = tk_rt::cpu::FirstError::default();");
    let _ = writeln!(s, "            tk_rt::run_jobs(lane_ranges.len(), &|c: usize| errors.keep((|| -> Result<(), String> {{");
    let _ = writeln!(s, "                let (t0, t1) = lane_ranges[c];");
    s.push_str(&own_values(k, "                "));
    let _ = writeln!(s, "                let width: usize = width;");
    for i in 0..sums.len() {
        let _ = writeln!(s, "                let w_{i} = tk_rt::cpu::take(&q_{i}, c)?;", i = i);
    }
    for t in &read {
        let _ = writeln!(s, "                let mut in_{} = tk_rt::cpu::Rows::overwritten(width);", name(t));
    }
    let loads: Vec<(TensorId, LoadAs)> = read.iter().map(|t| (*t, LoadAs::Local(format!("s_{}[j]", name(t))))).collect();
    let gl = Gen::new(k, Some(ir), Mode::Mirror).reading(loads);
    let _ = writeln!(s, "                for t in t0..t1 {{");
    let _ = writeln!(s, "                    let at = (t - t0) as usize * width;");
    let _ = writeln!(s, "                    let mut r = t;");
    let _ = writeln!(s, "                    while r < {} {{", rows);
    for t in &read {
        let _ = writeln!(s, "                        let s_{n}: &[f32] = &tk_rt::cpu::stage(t_{n}, r * {cols}, width, &mut in_{n}, \"{n}\")?[..width];", n = name(t), cols = cols);
    }
    for (i, c) in sums.iter().enumerate() {
        let (step, _, _) = gl.partial_pieces(c.op, c.body, "p[j]");
        let stv = k.stmts[c.stmt].vars[0];
        let _ = writeln!(s, "                        {{");
        let _ = writeln!(s, "                            let p = &mut w_{}[at..at + width];", i);
        let _ = writeln!(s, "                            for j in 0..width {{ let {}: i64 = r; let {}: i64 = j as i64; {} }}", gl.var(c.var), gl.var(stv), step);
        let _ = writeln!(s, "                        }}");
    }
    let _ = writeln!(s, "                        r += {};", sums[0].threads);
    let _ = writeln!(s, "                    }}");
    let _ = writeln!(s, "                }}");
    let _ = writeln!(s, "                Ok(())");
    let _ = writeln!(s, "            }})()));");
    let _ = writeln!(s, "            errors.result()?;");
    let _ = writeln!(s, "        }}");
    // Phase 2: each task a range of columns, reduced and stored.
    s.push_str(&chunks_open(k, ir, &cols, &format!("{} * lanes_0_live as i64 * {}", cols, sums.len())));
    s.push_str(&gathered_columns_decl(sums, g));
    s.push_str(&reduce_gathered_columns(k, ir, sums, g, &PartialColumns { stride: "width", first: "lo as usize", count: "(hi - lo) as usize", e0_first: "lo" }, "            "));
    s.push_str(&chunks_close());
    s
}

/// Columns of partials gathered at a time (a cache line of f32).
const GATHERED: usize = 16;

/// See [`columns_body`].
fn column_form(k: &Kernel, ir: &KernelIr, sums: &[ColumnSum], g: &Gen) -> String {
    let cols = dim_expr(k, k.vars[k.stmts[0].vars[0]].extent);
    let rows = dim_expr(k, k.vars[sums[0].var].extent);
    let read = column_reads(sums);
    let name = |t: &TensorId| k.tensors[*t].name.clone();
    let mut s = chunks_open(k, ir, &cols, &format!("{} * {} * {}", cols, rows, sums.len()));
    for t in &read {
        let _ = writeln!(s, "            let mut in_{} = tk_rt::cpu::Rows::overwritten({});", name(t), COLUMNS);
    }
    let loads: Vec<(TensorId, LoadAs)> = read.iter().map(|t| (*t, LoadAs::Local(format!("s_{}[j]", name(t))))).collect();
    let gl = Gen::new(k, Some(ir), Mode::Mirror).reading(loads);
    for (i, c) in sums.iter().enumerate() {
        let (_, init, _) = g.partial_pieces(c.op, c.body, "x");
        let _ = writeln!(s, "            let mut parts_{} = tk_rt::cpu::Rows::filled(lanes_{}_live * {}, {});", i, i, COLUMNS, init);
    }
    s.push_str(&gathered_columns_decl(sums, g));
    let _ = writeln!(s, "            let mut cb0 = lo;");
    let _ = writeln!(s, "            while cb0 < hi {{");
    let _ = writeln!(s, "                let cbn = ((hi - cb0) as usize).min({});", COLUMNS);
    for (i, c) in sums.iter().enumerate() {
        let (_, init, _) = g.partial_pieces(c.op, c.body, "x");
        let _ = writeln!(s, "                parts_{}.fill({});", i, init);
    }
    let _ = writeln!(s, "                for r in 0..{} {{", rows);
    for t in &read {
        let _ = writeln!(s, "                    let s_{n}: &[f32] = &tk_rt::cpu::stage(t_{n}, r * {cols} + cb0, cbn, &mut in_{n}, \"{n}\")?[..cbn];", n = name(t), cols = cols);
    }
    for (i, c) in sums.iter().enumerate() {
        let (step, _, _) = gl.partial_pieces(c.op, c.body, "p[j]");
        let stv = k.stmts[c.stmt].vars[0];
        let _ = writeln!(s, "                    {{");
        let _ = writeln!(s, "                        let t = (r % {}) as usize;", c.threads);
        let _ = writeln!(s, "                        let p = &mut parts_{}[t * {cb}..t * {cb} + cbn];", i, cb = COLUMNS);
        let _ = writeln!(s, "                        for j in 0..cbn {{ let {}: i64 = r; let {}: i64 = cb0 + j as i64; {} }}", gl.var(c.var), gl.var(stv), step);
        let _ = writeln!(s, "                    }}");
    }
    let _ = writeln!(s, "                }}");
    let stride = COLUMNS.to_string();
    s.push_str(&reduce_gathered_columns(k, ir, sums, g, &PartialColumns { stride: &stride, first: "0", count: "cbn", e0_first: "cb0" }, "                "));
    let _ = writeln!(s, "                cb0 += cbn as i64;");
    let _ = writeln!(s, "            }}");
    s.push_str(&chunks_close());
    s
}
