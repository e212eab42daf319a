//! Rust bindings for one `.tk` file: the oracle runtime, and per kernel its
//! HIP source (embedded), contract metadata and oracles.

use super::{hip, oracle};
use crate::kir::KernelIr;
use crate::schedule::{Rejected, Variant};
use crate::tir::{Contract, Dim, Kernel, Param, TExprKind, TensorRole};
use std::fmt::Write;

pub const INFO_TYPES: &str = r#"
/// Static description of a kernel's signature and contracts.
#[allow(dead_code)]
pub mod tk_info {
    /// Slots of one observed output in a launch's observation words, and
    /// words per slot (`kir::OBSERVE_SLOTS`, `kir::OBSERVE_WORDS`).
    pub const OBSERVE_SLOTS: usize = 64;
    pub const OBSERVE_WORDS: usize = 3;
    /// A row schedule's observing twin is its name and this suffix
    /// (`schedule::observe::TWIN_SUFFIX`).
    pub const OBSERVING_TWIN_SUFFIX: &str = "_obs";
    #[derive(Clone, Copy, Debug)]
    pub struct TensorParam {
        pub name: &'static str,
        pub dtype: &'static str,
        /// Each axis: a dim name, or a literal length as text.
        pub shape: &'static [&'static str],
        /// "input", "inout" or "output".
        pub role: &'static str,
    }
    #[derive(Clone, Copy, Debug)]
    pub struct KernelInfo {
        pub name: &'static str,
        pub dims: &'static [&'static str],
        /// Equivalence class of each dim under `requires A == B`.
        pub dim_class: &'static [usize],
        /// A literal value or upper bound known from `requires`.
        pub dim_value: &'static [Option<i64>],
        pub dim_upper: &'static [Option<i64>],
        pub tensors: &'static [TensorParam],
        pub scalars: &'static [(&'static str, &'static str)],
        pub domain: &'static [(&'static str, f64, f64)],
        /// (output, abs, rel): |kernel - exact| <= abs + rel |exact|.
        pub tolerance: &'static [(&'static str, f64, f64)],
        /// (output, abs, rel): the derived error bound, over every launch
        /// that meets `requires` and every variant; proved within
        /// `tolerance` when the kernel was verified. Outputs the analysis
        /// could not bound are absent. Tests compare against this.
        pub bound: &'static [(&'static str, f64, f64)],
        /// Inputs whose domain scales with a magnitude (`x in [-X, X]`):
        /// (input, symbol). Symbols number the dims (each by its class,
        /// in `dims` order), then the domain entries in order.
        pub magnitudes: &'static [(&'static str, usize)],
        /// (output, abs as a polynomial over the symbols: (coefficient,
        /// symbols of the monomial)): the proved tolerance of a kernel
        /// whose bounds are in magnitudes, evaluated at each launch.
        pub tolerance_formula: &'static [(&'static str, &'static [(f64, &'static [u16])])],
        /// (polynomial, limit, what): each must be at most its limit at a
        /// launch for the bounds in magnitudes to hold (no overflow).
        pub conditions: &'static [(&'static [(f64, &'static [u16])], f64, &'static str)],
        /// Domain relations `t * t <= factor * s`, element by element
        /// (`s` rank 0 or shaped like `t`): (t, s, factor, as written).
        pub relations: &'static [(&'static str, &'static str, f64, &'static str)],
        /// Float outputs' proved ranges `ensures y in [lo, hi]` (open ends
        /// given as closed): every value a covered launch stores is inside.
        pub ensures: &'static [(&'static str, f64, f64)],
        /// Integer tensors used as indices: (tensor, upper bound dim), values in [0, dim).
        pub index_ranges: &'static [(&'static str, &'static str)],
        pub requires: &'static [&'static str],
        pub schedule: &'static str,
        pub block: u32,
    }
    /// The same kernel at another block size (row schedules) or tile
    /// (contractions), for variant keys (`row_length`) in `min_row ..=
    /// max_row`.
    #[derive(Clone, Copy, Debug)]
    pub struct Variant {
        pub name: &'static str,
        /// Its schedule and parameters (`row-reduction block=128`).
        pub params: &'static str,
        pub block: u32,
        pub min_row: i64,
        pub max_row: i64,
        pub hip_source: &'static str,
        pub index_bits: u32,
        /// Blocks per grid axis for these dims (a smaller tile needs more).
        pub grid: fn(&[i64], i64) -> [u32; 3],
        /// Dynamic shared memory a launch asks for, in bytes (0: static).
        pub dynamic_shared: u32,
        /// What it asks of a launch beyond the kernel's `requires`, proved
        /// as more: `(dim, least, most, any_key_from)`, dim `dim` (kernel
        /// dim order) at least `least` (a matrix unit's bound holds for
        /// sums that long) and at most `most` (a row cached in registers);
        /// where it is at least `any_key_from`, the variant serves every
        /// key (a long sum pays for the unit on a small output).
        pub guard: Option<(usize, i64, i64, i64)>,
        /// A second clause of the guard, `(dim, most)`: that dim at most
        /// `most` (a split-sum contraction serves outputs that narrow).
        pub guard_also: Option<(usize, i64)>,
        /// A variant on smaller tiles taken in place of the one named
        /// where that one was chosen, this one's guard holds and its
        /// waves of resident blocks end sooner: `(name, wave time)`, a
        /// wave of this one taking `wave time` of a wave of the named
        /// (`KernelDef::choose_on`).
        pub in_place_of: Option<(&'static str, f64)>,
        /// Tensor maps passed after the kernel's parameters, in order
        /// (bulk tensor copies, sm_90).
        pub tensor_maps: &'static [TensorMapParam],
        /// Outputs it observes for the contract monitor (positions among
        /// the tensor parameters): it takes the observation words after
        /// everything else, `OBSERVE_WORDS * OBSERVE_SLOTS` per output.
        pub observes: &'static [usize],
        /// Domain relations (by index among the kernel's) it checks on
        /// the values it stores into two observed outputs: a block of
        /// observation words each, after the outputs', whose third words
        /// count the blocks that stored a pair breaking it.
        pub relates: &'static [usize],
    }
    /// A tensor map a variant takes (a `CUtensorMap` built at launch): of
    /// the tensor at this position among the tensor parameters, a 2-D
    /// tensor of 16-bit elements, in boxes of `box_outer` rows of
    /// `box_inner` elements with the 128-byte swizzle. Built where the
    /// tensor's rows are whole 16-byte runs and its address 16-byte
    /// aligned (where the kernel reads through it); zeros elsewhere.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct TensorMapParam {
        pub tensor: usize,
        pub box_inner: u32,
        pub box_outer: u32,
    }
    impl Variant {
        /// Does this variant serve a launch with these dims and key?
        pub fn serves(&self, dims: &[i64], key: i64) -> bool {
            let keyed = self.min_row <= key && key <= self.max_row;
            match self.guard {
                None => keyed,
                Some((d, _, _, any_key_from)) => self.admits(dims) && (keyed || dims[d] >= any_key_from),
            }
        }
        /// May a launch with these dims take it at all? Its guard holds
        /// (what it was proved under); the keys are only a preference.
        pub fn admits(&self, dims: &[i64]) -> bool {
            let also = self.guard_also.is_none_or(|(d, most)| dims.get(d).is_some_and(|v| *v <= most));
            match self.guard {
                None => also,
                Some((d, least, most, _)) => also && dims.get(d).is_some_and(|v| *v >= least && *v <= most),
            }
        }
        /// Does it ask a sum at least so long (a matrix unit's guard)?
        pub fn asks_long_sums(&self) -> bool {
            self.guard.is_some_and(|(_, least, _, _)| least > 1)
        }
    }
    /// A polynomial of `tolerance_formula` or `conditions` at symbol values
    /// `at` (a symbol without a value counts as unbounded).
    pub fn eval_poly(p: &[(f64, &[u16])], at: &[f64]) -> f64 {
        p.iter().map(|(c, m)| m.iter().fold(*c, |acc, s| acc * at.get(*s as usize).copied().unwrap_or(f64::INFINITY))).sum()
    }
    impl KernelInfo {
        /// Every symbol's value at a launch: the dims (each by its class),
        /// then for each domain entry the largest |value| of its input,
        /// given by `largest(name)` (infinite when unknown).
        pub fn symbol_values(&self, dims: &[i64], largest: &dyn Fn(&str) -> Option<f64>) -> Vec<f64> {
            self.symbols(dims, self.domain.iter().map(|d| largest(d.0).unwrap_or(f64::INFINITY))).collect()
        }
        /// The symbols' values in their order: the dims (each by its
        /// class), then `largest`, one value per domain entry in order.
        pub fn symbols<'a>(&'a self, dims: &'a [i64], largest: impl Iterator<Item = f64> + 'a) -> impl Iterator<Item = f64> + 'a {
            (0..self.dims.len()).map(move |d| dims[self.dim_class[d]] as f64).chain(largest)
        }
        /// An output's tolerance `(abs, rel)` at symbol values `at`: the
        /// formula where the bound is in magnitudes, else the constants.
        pub fn tolerance_at(&self, output: &str, at: &[f64]) -> Option<(f64, f64)> {
            let (_, abs, rel) = self.tolerance.iter().find(|t| t.0 == output)?;
            Some((self.tolerance_formula.iter().find(|f| f.0 == output).map(|f| eval_poly(f.1, at)).unwrap_or(*abs), *rel))
        }
    }
    /// A parameter of the source signature: a tensor or a scalar.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum SigParam {
        Tensor,
        Scalar,
    }
    /// One parameter of a kernel's HIP signature.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum LaunchParam {
        /// The device address of the tensor at this position among the
        /// tensor parameters (signature order).
        Tensor(usize),
        /// The scalar at this position among the scalars, with its dtype.
        Scalar(usize, &'static str),
        /// The dim at this position among the dims, as an integer of
        /// `INDEX_BITS` bits.
        Dim(usize),
    }
}
"#;

/// How generated bindings reach their support code and a runtime.
#[derive(Clone, Debug, Default)]
pub struct BindingStyle {
    /// Path of a module holding `tk_rt` and `tk_info` (see `support_source`)
    /// shared by several files; `None` inlines them into each file.
    pub support: Option<String>,
    /// Path of the runtime crate for typed launchers (`tokitai_runtime`);
    /// `None` emits no launchers.
    pub runtime: Option<String>,
}

/// The support code (`tk_rt`, `tk_info`) for a module that several
/// generated files share through `BindingStyle::support`.
pub fn support_source() -> String {
    format!("{}{}", oracle::RUNTIME, INFO_TYPES)
}

/// The generated Rust of one file.
pub fn file_bindings(kernels: &[Kernel], irs: &[KernelIr], variants: &[Vec<Variant>], rejected: &[Vec<Rejected>], fingerprints: &[String], source_name: &str, style: &BindingStyle) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "// @generated by tokitai-compiler {} from {}; do not edit.", crate::VERSION, source_name);
    match &style.support {
        Some(path) => {
            let _ = writeln!(s, "#[allow(unused_imports)]\npub use {}::{{tk_info, tk_rt}};", path);
        }
        None => {
            s.push_str(oracle::RUNTIME);
            s.push_str(INFO_TYPES);
        }
    }
    for ((((k, ir), vs), rejected), fingerprint) in kernels.iter().zip(irs).zip(variants).zip(rejected).zip(fingerprints) {
        s.push_str(&kernel_bindings(k, ir, vs, rejected, fingerprint, style));
    }
    s.push_str("\n/// Mirror oracle: (dims, scalars, tensors in signature order).\npub type MirrorFn = fn(&[i64], &[f64], &mut [tk_rt::Buf]) -> Result<(), String>;\n");
    s.push_str("/// Exact oracle: returns every output and inout as f64.\npub type ExactFn = fn(&[i64], &[f64], &[tk_rt::Buf]) -> Result<Vec<Vec<f64>>, String>;\n");
    s.push_str("/// `requires` on dims and scalars.\npub type RequiresFn = fn(&[i64], &[f64]) -> Result<(), String>;\n");
    s.push_str("/// Every kernel of this file with its oracles.\npub const KERNELS: &[(tk_info::KernelInfo, MirrorFn, ExactFn, RequiresFn)] = &[\n");
    for k in kernels {
        let _ = writeln!(s, "    ({n}::INFO, {n}::mirror, {n}::exact, {n}::check_requires),", n = k.name);
    }
    s.push_str("];\n");
    if let Some(rt) = &style.runtime {
        let _ = writeln!(s, "/// Every kernel of this file, for the runtime.");
        let _ = writeln!(s, "pub const ALL: &[&{}::KernelDef] = &[{}];", rt, kernels.iter().map(|k| format!("&{}::KERNEL", k.name)).collect::<Vec<_>>().join(", "));
    }
    s
}

fn dim_text(k: &Kernel, d: Dim) -> String {
    k.dim_name(d)
}

/// The kernel's schedule and its variants, each with the kernel as it is
/// proved (a guarded variant's `requires` holds its guard).
fn with_kernels<'a>(k: &'a Kernel, ir: &'a KernelIr, variants: &'a [Variant]) -> Vec<(std::borrow::Cow<'a, Kernel>, &'a KernelIr)> {
    std::iter::once((std::borrow::Cow::Borrowed(k), ir)).chain(variants.iter().map(|v| (v.kernel(k), &v.ir))).collect()
}

/// Each output's derived error bound: the largest `abs` and `rel` over the
/// kernel and its variants (each variant sums in its own order).
fn derived_bounds(k: &Kernel, ir: &KernelIr, variants: &[Variant]) -> Vec<(String, f64, f64)> {
    // Bounds in magnitudes have no single number: see `tolerance_formula`.
    if k.uses_magnitudes() {
        return Vec::new();
    }
    let all: Vec<crate::accuracy::KernelAccuracy> = with_kernels(k, ir, variants).iter().map(|(k, x)| crate::timings::time(&x.name, "bindings-bound", || crate::accuracy::analyze(k, x))).collect();
    crate::accuracy::envelope_of(&all)
}

/// A polynomial as Rust: `&[(coefficient, &[symbols])]`.
fn poly_literal(p: &tokitai_contracts::fp::MagPoly) -> String {
    format!("&[{}]", p.terms().map(|(m, c)| format!("({:?}, &{:?})", c, m)).collect::<Vec<_>>().join(", "))
}

/// Each float output's `ensures` range that holds for the kernel and every
/// variant (see `accuracy::computed`); the verifier refuses a kernel whose
/// range does not, so in an emitted kernel these are all of them.
fn ensured_ranges(k: &Kernel, ir: &KernelIr, variants: &[Variant]) -> Vec<String> {
    let per_ir: Vec<Vec<crate::accuracy::computed::EnsuredRange>> = with_kernels(k, ir, variants).iter().map(|(k, x)| crate::accuracy::computed::float_ensures(k, x)).collect();
    per_ir[0]
        .iter()
        .enumerate()
        .filter(|(i, _)| per_ir.iter().all(|rs| rs[*i].holds()))
        .map(|(_, e)| format!("({:?}, {:?}, {:?})", k.tensors[e.tensor].name, e.declared.0, e.declared.2))
        .collect()
}

/// `magnitudes`, `tolerance_formula` and `conditions` of `KernelInfo`.
fn magnitude_info(k: &Kernel, ir: &KernelIr, variants: &[Variant]) -> (Vec<String>, Vec<String>, Vec<String>) {
    use crate::accuracy::magnitude;
    if !k.uses_magnitudes() {
        return (Vec::new(), Vec::new(), Vec::new());
    }
    let magnitudes = k
        .domain
        .iter()
        .enumerate()
        .filter(|(_, d)| d.magnitude.is_some())
        .map(|(i, d)| {
            let name = d.tensor.map(|t| k.tensors[t].name.clone()).or_else(|| d.scalar.map(|s| k.scalars[s].name.clone())).unwrap_or_default();
            format!("({:?}, {})", name, magnitude::symbol(k, crate::tir::Sym::Magnitude(i)))
        })
        .collect();
    let formula = k.tolerance.iter().map(|t| format!("({:?}, {})", k.tensors[t.tensor].name, poly_literal(&magnitude::tolerance_poly(k, t)))).collect();
    // Every schedule's conditions: a launch may run any of them.
    let mut conditions: Vec<magnitude::Condition> = Vec::new();
    for (k, x) in with_kernels(k, ir, variants) {
        for o in crate::timings::time(&x.name, "bindings-bound", || magnitude::analyze(&k, x)).outputs {
            for c in o.conditions {
                if !conditions.iter().any(|d| d.poly == c.poly && d.limit == c.limit) {
                    conditions.push(c);
                }
            }
        }
    }
    let conditions = conditions.iter().map(|c| format!("({}, {:?}, {:?})", poly_literal(&c.poly), c.limit, c.what)).collect();
    (magnitudes, formula, conditions)
}

fn kernel_bindings(k: &Kernel, ir: &KernelIr, variants: &[Variant], rejected: &[Rejected], fingerprint: &str, style: &BindingStyle) -> String {
    let mut s = oracle::kernel_oracles(k, ir);
    // Re-open the module to add metadata and the HIP source.
    s.truncate(s.rfind('}').unwrap_or(s.len()));
    let tensors: Vec<String> = k
        .params
        .iter()
        .filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None })
        .map(|t| {
            let info = &k.tensors[t];
            let role = match info.role {
                TensorRole::Input => "input",
                TensorRole::Inout => "inout",
                _ => "output",
            };
            format!(
                "super::tk_info::TensorParam {{ name: {:?}, dtype: {:?}, shape: &[{}], role: {:?} }}",
                info.name,
                info.dtype.name(),
                info.shape.iter().map(|d| format!("{:?}", dim_text(k, *d))).collect::<Vec<_>>().join(", "),
                role
            )
        })
        .collect();
    let scalars: Vec<String> = k.scalars.iter().map(|x| format!("({:?}, {:?})", x.name, x.dtype.name())).collect();
    let domain: Vec<String> = k
        .domain
        .iter()
        .map(|d| {
            let name = match (d.tensor, d.scalar) {
                (Some(t), _) => &k.tensors[t].name,
                (_, Some(sc)) => &k.scalars[sc].name,
                _ => "",
            };
            format!("({:?}, {:?}, {:?})", name, d.lo, d.hi)
        })
        .collect();
    let tolerance: Vec<String> = k.tolerance.iter().map(|t| format!("({:?}, {:?}, {:?})", k.tensors[t.tensor].name, t.abs, t.rel)).collect();
    let bound: Vec<String> = derived_bounds(k, ir, variants).iter().map(|(n, a, r)| format!("({:?}, {:?}, {:?})", n, a, r)).collect();
    let index_ranges: Vec<String> = k
        .requires
        .iter()
        .filter_map(|c| match c {
            Contract::Range { tensor, range } => {
                let hi = match &range.hi.kind {
                    TExprKind::Dim(d) => k.dims[*d].name.clone(),
                    TExprKind::Const(crate::tir::Const::Int(v)) => v.to_string(),
                    _ => return None,
                };
                Some(format!("({:?}, {:?})", k.tensors[*tensor].name, hi))
            }
            _ => None,
        })
        .collect();
    let requires: Vec<String> = k.requires.iter().map(|c| format!("{:?}", c.text())).collect();
    let upper: Vec<String> = (0..k.dims.len()).map(|d| format!("{:?}", k.dim_upper_bound(Dim::Sym(d)))).collect();
    let (magnitudes, formula, conditions) = magnitude_info(k, ir, variants);
    let relations: Vec<String> = k.relations.iter().map(|r| format!("({:?}, {:?}, {:?}, {:?})", k.tensors[r.square].name, k.tensors[r.bound].name, r.factor, r.text)).collect();
    let _ = writeln!(s, "    /// Signature and contracts.");
    let _ = writeln!(
        s,
        "    pub const INFO: super::tk_info::KernelInfo = super::tk_info::KernelInfo {{ name: {:?}, dims: &[{}], dim_class: &{:?}, dim_value: &{:?}, dim_upper: &[{}], tensors: &[{}], scalars: &[{}], domain: &[{}], tolerance: &[{}], bound: &[{}], magnitudes: &[{}], tolerance_formula: &[{}], conditions: &[{}], relations: &[{}], ensures: &[{}], index_ranges: &[{}], requires: &[{}], schedule: {:?}, block: {} }};",
        k.name,
        k.dims.iter().map(|d| format!("{:?}", d.name)).collect::<Vec<_>>().join(", "),
        k.dim_class,
        k.dim_value,
        upper.join(", "),
        tensors.join(", "),
        scalars.join(", "),
        domain.join(", "),
        tolerance.join(", "),
        bound.join(", "),
        magnitudes.join(", "),
        formula.join(", "),
        conditions.join(", "),
        relations.join(", "),
        ensured_ranges(k, ir, variants).join(", "),
        index_ranges.join(", "),
        requires.join(", "),
        ir.schedule.name(),
        ir.block
    );
    s.push_str(&typed_wrappers(k));
    let _ = writeln!(s, "    /// Target the source below was generated for.");
    let _ = writeln!(s, "    pub const TARGET: &str = {:?};", ir.target.to_string());
    let _ = writeln!(s, "    /// HIP C++ of this kernel (prelude included), as `tokitaic build` writes it.");
    let _ = writeln!(s, "    pub const HIP_SOURCE: &str = {:?};", hip::kernel_source(ir));
    s.push_str(&super::launch::launch_metadata(k, ir, variants, rejected, fingerprint));
    if let Some(rt) = &style.runtime {
        s.push_str(&super::launch::launcher(k, rt));
    }
    s.push_str("}\n");
    s
}

/// Typed front doors to the oracles: dims by name, tensors as slices of
/// their element types, scalars by value.
fn typed_wrappers(k: &Kernel) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "    /// The kernel's dims by name.");
    let _ = writeln!(s, "    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]");
    let _ = writeln!(s, "    pub struct Dims {{ {} }}", k.dims.iter().map(|d| format!("pub {}: i64", d.name)).collect::<Vec<_>>().join(", "));
    let _ = writeln!(s, "    impl Dims {{ pub fn to_vec(&self) -> Vec<i64> {{ vec![{}] }} }}", k.dims.iter().map(|d| format!("self.{}", d.name)).collect::<Vec<_>>().join(", "));
    let outs: Vec<usize> = k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).filter(|t| k.tensors[*t].role != TensorRole::Input).collect();
    let _ = writeln!(s, "    /// Every output and inout of the exact oracle, in f64.");
    let _ = writeln!(s, "    #[derive(Clone, Debug, PartialEq)]");
    let _ = writeln!(s, "    pub struct Exact {{ {} }}", outs.iter().map(|t| format!("pub {}: Vec<f64>", k.tensors[*t].name)).collect::<Vec<_>>().join(", "));
    let mut params = vec!["dims: Dims".to_string()];
    let mut exact_params = vec!["dims: Dims".to_string()];
    let mut bufs = Vec::new();
    let mut scalars = Vec::new();
    let mut copy_back = Vec::new();
    for p in &k.params {
        match *p {
            Param::Scalar(sc) => {
                let info = &k.scalars[sc];
                let ty = if info.dtype.is_half() { "f32" } else { info.dtype.rust_type() };
                params.push(format!("{}: {}", info.name, ty));
                exact_params.push(format!("{}: {}", info.name, ty));
                scalars.push(format!("{} as f64", if info.dtype == crate::types::Dtype::Bool { format!("{} as u8", info.name) } else { info.name.clone() }));
            }
            Param::Tensor(t) => {
                let info = &k.tensors[t];
                let variant = match info.dtype {
                    crate::types::Dtype::F16 => "F16",
                    crate::types::Dtype::Bf16 => "Bf16",
                    crate::types::Dtype::F32 => "F32",
                    crate::types::Dtype::F64 => "F64",
                    crate::types::Dtype::I32 => "I32",
                    crate::types::Dtype::U32 => "U32",
                    crate::types::Dtype::I64 => "I64",
                    crate::types::Dtype::Bool => "Bool",
                };
                let ty = info.dtype.rust_type();
                match info.role {
                    TensorRole::Input => {
                        params.push(format!("{}: &[{}]", info.name, ty));
                        exact_params.push(format!("{}: &[{}]", info.name, ty));
                        bufs.push(format!("Buf::{}({}.to_vec())", variant, info.name));
                    }
                    TensorRole::Inout => {
                        params.push(format!("{}: &mut [{}]", info.name, ty));
                        exact_params.push(format!("{}: &[{}]", info.name, ty));
                        bufs.push(format!("Buf::{}({}.to_vec())", variant, info.name));
                        copy_back.push((bufs.len() - 1, info.name.clone(), variant));
                    }
                    _ => {
                        params.push(format!("{}: &mut [{}]", info.name, ty));
                        bufs.push(format!("Buf::{}({}.to_vec())", variant, info.name));
                        copy_back.push((bufs.len() - 1, info.name.clone(), variant));
                    }
                }
            }
        }
    }
    let _ = writeln!(s, "    /// Typed mirror oracle: outputs and inouts are written in place.");
    let _ = writeln!(s, "    pub fn mirror_typed({}) -> Result<(), String> {{", params.join(", "));
    let _ = writeln!(s, "        let mut args = vec![{}];", bufs.join(", "));
    let _ = writeln!(s, "        mirror(&dims.to_vec(), &[{}], &mut args)?;", scalars.join(", "));
    for (i, name, variant) in &copy_back {
        let _ = writeln!(
            s,
            "        match &args[{i}] {{ Buf::{v}(tk_out) if tk_out.len() == {n}.len() => {n}.copy_from_slice(tk_out), _ => return Err(\"`{n}` has the wrong length\".to_string()) }}",
            i = i,
            v = variant,
            n = name
        );
    }
    let _ = writeln!(s, "        Ok(())\n    }}");
    let input_bufs: Vec<String> = bufs
        .iter()
        .zip(k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }))
        .map(|(b, t)| if k.tensors[t].role == TensorRole::Output { format!("Buf::{}(Vec::new())", b.split('(').next().unwrap_or("Buf::F32").trim_start_matches("Buf::")) } else { b.clone() })
        .collect();
    let _ = writeln!(s, "    /// Typed exact oracle (outputs need no buffers: they are returned).");
    let _ = writeln!(s, "    pub fn exact_typed({}) -> Result<Exact, String> {{", exact_params.join(", "));
    let _ = writeln!(s, "        let mut args = vec![{}];", input_bufs.join(", "));
    for t in k.params.iter().filter_map(|p| if let Param::Tensor(t) = p { Some(*t) } else { None }).enumerate() {
        let (i, t) = t;
        if k.tensors[t].role == TensorRole::Output {
            let len = k.tensors[t].shape.iter().map(|d| match d { Dim::Sym(id) => format!("dims.{}", k.dims[*id].name), Dim::Lit(v) => format!("{}i64", v) }).collect::<Vec<_>>();
            let len = if len.is_empty() { "1i64".to_string() } else { len.join(" * ") };
            let zero = match k.tensors[t].dtype {
                crate::types::Dtype::F16 => "half::f16::ZERO",
                crate::types::Dtype::Bf16 => "half::bf16::ZERO",
                crate::types::Dtype::Bool => "false",
                _ => "Default::default()",
            };
            let _ = writeln!(s, "        if let Buf::{v}(tk_out) = &mut args[{i}] {{ *tk_out = vec![{z}; ({len}).max(0) as usize]; }}", v = input_bufs[i].trim_start_matches("Buf::").split('(').next().unwrap_or(""), i = i, z = zero, len = len);
        }
    }
    let _ = writeln!(s, "        let mut outs = exact(&dims.to_vec(), &[{}], &args)?.into_iter();", scalars.join(", "));
    let _ = writeln!(s, "        Ok(Exact {{ {} }})", outs.iter().map(|t| format!("{}: outs.next().unwrap_or_default()", k.tensors[*t].name)).collect::<Vec<_>>().join(", "));
    let _ = writeln!(s, "    }}");
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_runtime_reads_observation_words_as_the_kernels_write_them() {
        let slots = format!("pub const OBSERVE_SLOTS: usize = {};", crate::kir::OBSERVE_SLOTS);
        let words = format!("pub const OBSERVE_WORDS: usize = {};", crate::kir::OBSERVE_WORDS);
        assert!(super::INFO_TYPES.contains(&slots) && super::INFO_TYPES.contains(&words), "tk_info's observation layout differs from kir's");
        let twin = format!("pub const OBSERVING_TWIN_SUFFIX: &str = {:?};", crate::schedule::observe::TWIN_SUFFIX);
        assert!(super::INFO_TYPES.contains(&twin), "tk_info names observing twins otherwise than the compiler");
    }
}
