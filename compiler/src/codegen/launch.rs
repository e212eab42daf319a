//! What a runtime needs to launch a kernel, emitted beside its oracles: the
//! grid as a function of the dims, the kernel's parameters in signature
//! order, and (for a runtime crate) a typed launcher that checks shapes,
//! dtypes and `requires` before anything runs.

use crate::kir::{GridDim, IExpr, KParam, KernelIr};
use crate::schedule::{Rejected, Variant};
use crate::tir::{Kernel, Param, TensorRole};
use crate::types::Dtype;
use std::fmt::Write;

/// An integer expression over dims as Rust (`d` is the dims slice, in the
/// kernel's dim order), in i64.
fn rust_iexpr(k: &Kernel, ir: &KernelIr, e: &IExpr) -> String {
    let b = |x: &IExpr| rust_iexpr(k, ir, x);
    match e {
        IExpr::Const(v) => format!("{}i64", v),
        IExpr::Dim(d) => {
            let name = &ir.dims[*d];
            let pos = k.dims.iter().position(|x| &x.name == name).unwrap_or(0);
            format!("d[{}]", pos)
        }
        IExpr::Add(x, y) => format!("({} + {})", b(x), b(y)),
        IExpr::Sub(x, y) => format!("({} - {})", b(x), b(y)),
        IExpr::Mul(x, y) => format!("({} * {})", b(x), b(y)),
        IExpr::Div(x, y) => format!("({} / {})", b(x), b(y)),
        IExpr::Rem(x, y) => format!("({} % {})", b(x), b(y)),
        IExpr::Min(x, y) => format!("{}.min({})", b(x), b(y)),
        // Launch geometry depends on dims only (the schedules build it so).
        other => format!("{{ let _ = {:?}; 1i64 }}", format!("{:?}", other)),
    }
}

/// Position of each tensor parameter among the tensor parameters, and of
/// each scalar among the scalars, in signature order.
fn signature_positions(k: &Kernel) -> (Vec<usize>, Vec<usize>) {
    let tensors = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).collect();
    let scalars = k.params.iter().filter_map(|p| if let Param::Scalar(s) = p { Some(*s) } else { None }).collect();
    (tensors, scalars)
}

/// `grid`, `BLOCK`, `SHARED_BYTES`, `INDEX_BITS` and `PARAMS` for one
/// kernel module.
pub fn launch_metadata(k: &Kernel, ir: &KernelIr, variants: &[Variant], rejected: &[Rejected], fingerprint: &str) -> String {
    let mut s = String::new();
    let key = variant_key(k, ir);
    let _ = writeln!(s, "    /// What picks a variant: a row schedule's row length, a contraction's count of default output tiles (0 for other schedules).");
    let _ = writeln!(s, "    #[allow(unused_variables)]");
    let _ = writeln!(s, "    pub fn row_length(d: &[i64]) -> i64 {{ {} }}", key);
    for (i, v) in variants.iter().enumerate() {
        let _ = writeln!(s, "    /// Blocks per grid axis of variant `{}`.", v.ir.name);
        s.push_str(&grid_fn(k, &v.ir, &format!("grid_{}", i)));
    }
    let vs: Vec<String> = variants
        .iter()
        .enumerate()
        .map(|(i, variant)| {
            let (v, (lo, hi)) = (&variant.ir, variant.keys);
            let guard = match variant.guard {
                Some(g) => format!("Some(({}, {}, {}, {}))", g.dim, g.at_least, g.at_most, g.any_key_from),
                None => "None".into(),
            };
            let also = match variant.guard.and_then(|g| g.also_at_most) {
                Some((dim, most)) => format!("Some(({}, {}))", dim, most),
                None => "None".into(),
            };
            let maps: Vec<String> = v
                .tensor_maps
                .iter()
                .map(|m| format!("super::tk_info::TensorMapParam {{ tensor: {}, box_inner: {}, box_outer: {} }}", tensor_position(k, v.bufs[m.buf].tensor), m.box_inner, m.box_outer))
                .collect();
            let in_place_of = match &variant.in_place_of {
                Some((name, wave_time)) => format!("Some(({:?}, {:?}))", name, wave_time),
                None => "None".into(),
            };
            format!(
                "super::tk_info::Variant {{ name: {:?}, params: {:?}, block: {}, min_row: {}, max_row: {}, hip_source: {:?}, index_bits: {}, grid: grid_{}, dynamic_shared: {}, guard: {}, guard_also: {}, in_place_of: {}, tensor_maps: &[{}], observes: &{}, relates: &{} }}",
                v.name,
                v.params_text(),
                v.block,
                lo,
                hi,
                crate::codegen::hip::kernel_source(v),
                if v.index_ty == Dtype::I32 { 32 } else { 64 },
                i,
                if v.dynamic_shared() { v.shared_bytes() } else { 0 },
                guard,
                also,
                in_place_of,
                maps.join(", "),
                observes(k, v),
                relates(v)
            )
        })
        .collect();
    let _ = writeln!(s, "    /// This kernel at other block sizes or tiles, or on a matrix unit where a guard holds, each proved like the kernel itself (under its guard).");
    let _ = writeln!(s, "    pub const VARIANTS: &[super::tk_info::Variant] = &[{}];", vs.join(", "));
    let rejected: Vec<String> = rejected.iter().map(|r| format!("({:?}, {:?}, {:?})", r.name, r.params, r.reason)).collect();
    let _ = writeln!(s, "    /// Candidates of this kernel's tuning space that were not emitted (name, schedule, why): never launched.");
    let _ = writeln!(s, "    pub const REJECTED: &[(&str, &str, &str)] = &[{}];", rejected.join(", "));
    let _ = writeln!(s, "    /// sha256 of the kernel's name and every candidate's name and HIP source, in order: what a tuning table is keyed by.");
    let _ = writeln!(s, "    pub const FINGERPRINT: &str = {:?};", fingerprint);
    let _ = writeln!(s, "    /// The kernel's own schedule and its parameters.");
    let _ = writeln!(s, "    pub const SCHEDULE_PARAMS: &str = {:?};", ir.params_text());
    let _ = writeln!(s, "    /// Blocks per grid axis (x, y) for these dims (kernel dim order); `max_blocks` caps grid-stride axes.");
    s.push_str(&grid_fn(k, ir, "grid"));
    let _ = writeln!(s, "    /// Outputs the kernel observes for the contract monitor (positions among the tensor parameters, in the order of their observation words).");
    let _ = writeln!(s, "    pub const OBSERVES: &[usize] = &{};", observes(k, ir));
    let _ = writeln!(s, "    /// Domain relations (by index) the kernel checks on the values it stores into two observed outputs, in the order of their observation words (after the outputs').");
    let _ = writeln!(s, "    pub const RELATES: &[usize] = &{};", relates(ir));
    let _ = writeln!(s, "    /// Threads per block.");
    let _ = writeln!(s, "    pub const BLOCK: u32 = {};", ir.block);
    let _ = writeln!(s, "    /// Shared memory per block, in bytes.");
    let _ = writeln!(s, "    pub const SHARED_BYTES: u32 = {};", ir.shared_bytes());
    let _ = writeln!(s, "    /// Of it, dynamic shared memory a launch asks for (0: all static).");
    let _ = writeln!(s, "    pub const DYNAMIC_SHARED: u32 = {};", if ir.dynamic_shared() { ir.shared_bytes() } else { 0 });
    let _ = writeln!(s, "    /// Width of the dims as passed to the kernel (32 where 32-bit indexing is proved safe).");
    let _ = writeln!(s, "    pub const INDEX_BITS: u32 = {};", if ir.index_ty == Dtype::I32 { 32 } else { 64 });
    let (tensors, scalars) = signature_positions(k);
    // Tensor maps come last, per variant (`Variant::tensor_maps`).
    let params: Vec<String> = ir
        .params
        .iter()
        .filter(|p| !matches!(p, KParam::TensorMap(_) | KParam::Observations))
        .map(|p| match *p {
            KParam::Buffer(b) => format!("super::tk_info::LaunchParam::Tensor({})", tensors.iter().position(|t| *t == ir.bufs[b].tensor).unwrap_or(usize::MAX)),
            KParam::Scalar(x) => {
                let pos = scalars.iter().position(|sc| k.scalars[*sc].name == ir.scalars[x].0).unwrap_or(usize::MAX);
                format!("super::tk_info::LaunchParam::Scalar({}, {:?})", pos, ir.scalars[x].1.name())
            }
            KParam::Dim(d) => format!("super::tk_info::LaunchParam::Dim({})", k.dims.iter().position(|x| x.name == ir.dims[d]).unwrap_or(usize::MAX)),
            KParam::TensorMap(_) | KParam::Observations => unreachable!("filtered above"),
        })
        .collect();
    let sig: Vec<&str> = k.params.iter().map(|p| if matches!(p, Param::Tensor(_)) { "super::tk_info::SigParam::Tensor" } else { "super::tk_info::SigParam::Scalar" }).collect();
    let _ = writeln!(s, "    /// Tensors and scalars in the order of the source signature.");
    let _ = writeln!(s, "    pub const SIGNATURE: &[super::tk_info::SigParam] = &[{}];", sig.join(", "));
    let _ = writeln!(s, "    /// The kernel's parameters in the order of its HIP signature.");
    let _ = writeln!(s, "    pub const PARAMS: &[super::tk_info::LaunchParam] = &[{}];", params.join(", "));
    s
}

/// `KernelIr::observed` as positions among the tensor parameters, a Rust
/// array.
fn observes(k: &Kernel, ir: &KernelIr) -> String {
    format!("{:?}", ir.observed.iter().map(|b| tensor_position(k, ir.bufs[*b].tensor)).collect::<Vec<_>>())
}

/// `KernelIr::related` as the kernel's relation indices, a Rust array.
fn relates(ir: &KernelIr) -> String {
    format!("{:?}", ir.related.iter().map(|r| r.relation).collect::<Vec<_>>())
}

/// Position of tensor `t` among the tensor parameters (signature order).
pub(super) fn tensor_position(k: &Kernel, t: crate::tir::TensorId) -> usize {
    signature_positions(k).0.iter().position(|x| *x == t).unwrap_or(usize::MAX)
}

/// The value that picks among a kernel's variants (see
/// `schedule::schedule_variants`), as Rust over the dims.
fn variant_key(k: &Kernel, ir: &KernelIr) -> String {
    if let crate::kir::Schedule::Contraction { .. } | crate::kir::Schedule::TensorCore { .. } | crate::kir::Schedule::Warpgroup { .. } = ir.schedule {
        let tiles: Vec<String> = ir.grid.iter().map(|g| match g {
            GridDim::Exact(e) => rust_iexpr(k, ir, e),
            GridDim::Stride { .. } => "1i64".into(),
        }).collect();
        return format!("({})", tiles.join(" * "));
    }
    ir.reduction_loops.iter().find(|r| r.cooperative).map(|r| rust_iexpr(k, ir, &r.extent)).unwrap_or_else(|| "0i64".into())
}

/// `pub fn <name>(d, max_blocks) -> [u32; 3]`: blocks per grid axis.
fn grid_fn(k: &Kernel, ir: &KernelIr, name: &str) -> String {
    let axes: Vec<String> = (0..3)
        .map(|a| match ir.grid.get(a) {
            None => "1".to_string(),
            Some(GridDim::Exact(e)) => format!("({}).clamp(1, u32::MAX as i64) as u32", rust_iexpr(k, ir, e)),
            Some(GridDim::Stride { work, per_block }) => {
                format!("(({} + {p} - 1) / {p}).clamp(1, max_blocks.max(1)) as u32", rust_iexpr(k, ir, work), p = per_block)
            }
        })
        .collect();
    format!("    #[allow(unused_variables)]\n    pub fn {}(d: &[i64], max_blocks: i64) -> [u32; 3] {{ [{}] }}\n", name, axes.join(", "))
}

/// A typed launcher on the runtime at path `rt` (`tokitai_runtime`, or
/// `crate` inside the runtime): tensors by reference in signature order,
/// scalars by value.
pub fn launcher(k: &Kernel, rt: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "    /// This kernel for the runtime: contracts, oracles, geometry and HIP source.");
    let _ = writeln!(
        s,
        "    pub const KERNEL: {rt}::KernelDef = {rt}::KernelDef {{ info: &INFO, mirror: mirror_args, cpu: cpu_args, cpu_watched, cpu_schedule: CPU_SCHEDULE, exact, requires: check_requires, grid, params: PARAMS, signature: SIGNATURE, variants: VARIANTS, rejected: REJECTED, schedule_params: SCHEDULE_PARAMS, fingerprint: FINGERPRINT, row_length, block: BLOCK, shared_bytes: SHARED_BYTES, dynamic_shared: DYNAMIC_SHARED, index_bits: INDEX_BITS, hip_source: HIP_SOURCE, target: TARGET, observes: OBSERVES, relates: RELATES }};",
        rt = rt
    );
    let mut params = vec![format!("dev: &{}::Device", rt)];
    let mut args = Vec::new();
    for p in &k.params {
        match *p {
            Param::Tensor(t) => {
                let info = &k.tensors[t];
                if info.role == TensorRole::Input {
                    params.push(format!("{}: &{}::Tensor", info.name, rt));
                    args.push(format!("{}::Arg::In({})", rt, info.name));
                } else {
                    params.push(format!("{}: &mut {}::Tensor", info.name, rt));
                    args.push(format!("{}::Arg::Out({})", rt, info.name));
                }
            }
            Param::Scalar(sc) => {
                let info = &k.scalars[sc];
                let ty = if info.dtype.is_half() { "f32" } else { info.dtype.rust_type() };
                params.push(format!("{}: {}", info.name, ty));
                let value = if info.dtype == Dtype::Bool { format!("{} as u8 as f64", info.name) } else { format!("{} as f64", info.name) };
                args.push(format!("{}::Arg::Scalar({})", rt, value));
            }
        }
    }
    let _ = writeln!(s, "    /// Launch `{}` on `dev`: dims are read off the tensors' shapes, then shapes, dtypes and `requires` are checked.", k.name);
    let _ = writeln!(s, "    pub fn launch({}) -> Result<(), {}::Error> {{", params.join(", "), rt);
    let _ = writeln!(s, "        {}::launch(dev, &KERNEL, &mut [{}])", rt, args.join(", "));
    let _ = writeln!(s, "    }}");
    s
}
