//! HIP C++ printer: `KernelIr` to one source text per kernel (the portable
//! prelude, then the kernel), compiled by hipcc/hiprtc for AMD and by NVRTC
//! for NVIDIA.

use crate::kir::*;
use crate::syntax::ast::{BinOp, UnOp};
use crate::tir::{Builtin, Const};
use crate::types::Dtype;
use std::collections::{BTreeSet, HashSet};


pub const PRELUDE: &str = include_str!("prelude.hip");
/// Helpers of the residue builtins, printed before a kernel that declares
/// a `modulus` (guarded, so a module of several prints them once).
pub const RESIDUE_PRELUDE: &str = include_str!("residue.hip");

/// The prelude followed by one kernel: what the runtime compiles.
pub fn kernel_source(ir: &KernelIr) -> String {
    format!("{}\n{}", PRELUDE, print_kernel(ir))
}

/// The prelude followed by every kernel of a file.
pub fn module_source(irs: &[KernelIr]) -> String {
    let mut s = String::from(PRELUDE);
    for ir in irs {
        s.push('\n');
        s.push_str(&print_kernel(ir));
    }
    s
}

const CPP_RESERVED: &[&str] = &[
    "alignas", "alignof", "asm", "auto", "bool", "break", "case", "catch", "char", "class", "const", "constexpr", "continue", "default", "delete", "do",
    "double", "else", "enum", "explicit", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace",
    "new", "noexcept", "nullptr", "operator", "private", "protected", "public", "register", "return", "short", "signed", "sizeof", "static", "struct",
    "switch", "template", "this", "throw", "true", "try", "typedef", "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "while",
    "half", "dim3", "min", "max", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
];

/// A user name made safe for C++ (keywords and reserved prefixes get `_`).
pub fn cpp_name(name: &str) -> String {
    if CPP_RESERVED.contains(&name) || name.starts_with("tk_") || name.starts_with("__") {
        format!("{}_", name)
    } else {
        name.to_string()
    }
}

struct Printer<'a> {
    ir: &'a KernelIr,
    out: String,
    indent: usize,
    vec_arrays: HashSet<LocalId>,
    /// Shared arrays that fragments are loaded from by rows (`ldmatrix`).
    row_tiles: HashSet<SharedId>,
    /// Accumulators (and their slots) of the `Wgmma`s printed and not
    /// yet retired by a wait, by group.
    unit: WgmmaGroups<(LocalId, u32)>,
}

/// The register fold of the `j`-th observed output (`KernelIr::observed`).
fn observation_name(j: usize) -> String {
    format!("tk_obs{}", j)
}

/// The register fold of the `j`-th related pair (`KernelIr::related`).
fn relation_name(j: usize) -> String {
    format!("tk_rel{}", j)
}

pub fn print_kernel(ir: &KernelIr) -> String {
    let mut vec_arrays = HashSet::new();
    collect_vec_arrays(&ir.body, &mut vec_arrays);
    let mut row_tiles = HashSet::new();
    collect_row_tiles(&ir.body, &mut row_tiles);
    let out = if ir.modulus.is_some() { format!("{}\n", RESIDUE_PRELUDE) } else { String::new() };
    let mut p = Printer { ir, out, indent: 0, vec_arrays, row_tiles, unit: WgmmaGroups::default() };
    p.kernel();
    p.out
}

fn collect_row_tiles(body: &[KStmt], out: &mut HashSet<SharedId>) {
    for s in body {
        match s {
            KStmt::FragmentLoad { src, rows, .. } if crate::schedule::tensor_core::loads_rows(*rows, src) => {
                out.insert(src.tile);
            }
            // The unit's descriptors address 16-byte aligned core matrices.
            KStmt::Wgmma { a, b, .. } => {
                out.insert(a.tile);
                out.insert(b.tile);
            }
            KStmt::For { body, .. } => collect_row_tiles(body, out),
            KStmt::If { then, els, .. } => {
                collect_row_tiles(then, out);
                collect_row_tiles(els, out);
            }
            KStmt::SkipWhen { body, .. } => collect_row_tiles(body, out),
            _ => {}
        }
    }
}

fn collect_vec_arrays(body: &[KStmt], out: &mut HashSet<LocalId>) {
    for s in body {
        match s {
            KStmt::VecLoad { arr, .. } | KStmt::VecStore { arr, .. } | KStmt::FragmentLoad { dst: arr, .. } | KStmt::SharedVecStore { src: arr, .. } => {
                out.insert(*arr);
            }
            KStmt::For { body, .. } => collect_vec_arrays(body, out),
            KStmt::If { then, els, .. } => {
                collect_vec_arrays(then, out);
                collect_vec_arrays(els, out);
            }
            KStmt::SkipWhen { body, .. } => collect_vec_arrays(body, out),
            _ => {}
        }
    }
}

impl<'a> Printer<'a> {
    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn local(&self, l: LocalId) -> String {
        format!("{}_{}", self.ir.locals[l].name, l)
    }

    fn ivar(&self, v: IVar) -> String {
        format!("{}_{}", self.ir.ivars[v], v)
    }

    fn kernel(&mut self) {
        let ir = self.ir;
        for l in ir.doc.lines() {
            self.line(format!("/// {}", l).trim_end());
        }
        let geometry = ir
            .grid
            .iter()
            .enumerate()
            .map(|(i, g)| match g {
                GridDim::Exact(e) => format!("grid.{} = {}", ["x", "y", "z"][i], self.iexpr(e)),
                GridDim::Stride { work, per_block } => format!("grid.{} = clamp(ceil({} / {}), 1, max_blocks)", ["x", "y", "z"][i], self.iexpr(work), per_block),
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.line(&format!("// schedule: {}; block = {} threads; {}; target {}", describe(&ir.schedule), ir.block, geometry, ir.target));
        let mut params = Vec::new();
        for p in &ir.params {
            params.push(match *p {
                KParam::Buffer(b) => {
                    let buf = &ir.bufs[b];
                    let cnst = if buf.written { "" } else { "const " };
                    format!("{}{}* __restrict__ {}", cnst, buf.dtype.hip_type(), cpp_name(&buf.name))
                }
                KParam::Scalar(s) => format!("{} {}", ir.scalars[s].1.hip_type(), cpp_name(&ir.scalars[s].0)),
                KParam::Dim(d) => format!("{} {}", ir.index_ty.hip_type(), cpp_name(&ir.dims[d])),
                // By value in the parameter space, where the copy unit reads it.
                KParam::TensorMap(m) => format!("const __grid_constant__ tk_tensor_map {}", cpp_name(&ir.tensor_maps[m].name)),
                KParam::Observations => "unsigned* __restrict__ tk_obs".to_string(),
            });
        }
        if !ir.tensor_maps.is_empty() {
            // CUDA's `CUtensorMap` (opaque, 128 bytes, 64-byte aligned),
            // declared once in a module of several kernels.
            self.line("#ifndef TK_TENSOR_MAP");
            self.line("#define TK_TENSOR_MAP");
            self.line("struct __align__(64) tk_tensor_map { unsigned long long opaque[16]; };");
            self.line("#endif");
        }
        let bounds = if ir.min_blocks > 1 { format!("{}, {}", ir.block, ir.min_blocks) } else { ir.block.to_string() };
        self.line(&format!("extern \"C\" __global__ void __launch_bounds__({}) {}(", bounds, cpp_name(&ir.name)));
        self.indent += 1;
        let n = params.len();
        for (i, p) in params.into_iter().enumerate() {
            self.line(&format!("{}{}", p, if i + 1 == n { ")" } else { "," }));
        }
        self.indent -= 1;
        self.line("{");
        self.indent += 1;
        let (offsets, _) = ir.shared_offsets();
        if ir.dynamic_shared() {
            // Past 48 KB the arrays are carved from dynamic shared memory
            // (the launch asks for `shared_bytes`), each 128-byte aligned.
            // (1024 where a bulk copy swizzles into an array: the
            // swizzle's pattern repeats every 1024 bytes.)
            let align = if ir.shared.iter().any(|s| s.swizzled) { SWIZZLE_ALIGN } else { 128 };
            self.line(&format!("extern __shared__ __align__({}) unsigned char tk_shared[];", align));
        }
        for (i, s) in ir.shared.iter().enumerate() {
            // Slabs read by rows of 16 bytes start 16-byte aligned (the
            // verifier proves each row's offset a multiple of 8 elements).
            let align = if s.swizzled {
                "alignas(1024) "
            } else if self.row_tiles.contains(&i) {
                "alignas(16) "
            } else {
                ""
            };
            let mut notes = Vec::new();
            if let Some(f) = s.footprint {
                notes.push(format!("{} rows of {}, each padded to {} (the padding is never touched)", f.rows, f.width, f.stride));
            }
            if let Some(r) = s.ring {
                let k = self.ivar(r.of);
                notes.push(format!("a ring of {} stages of {}: iteration {k} reads stage ({k} / {}) % {} and fills the next", r.stages, r.stage_len, r.step, r.stages));
            }
            let mut decl = if ir.dynamic_shared() {
                format!("{}* const {} = reinterpret_cast<{}*>(tk_shared + {}); // {} elements", s.ty.hip_type(), s.name, s.ty.hip_type(), offsets[i], s.len)
            } else {
                format!("__shared__ {}{} {}[{}];", align, s.ty.hip_type(), s.name, s.len)
            };
            if !notes.is_empty() {
                decl += &format!(" // {}", notes.join("; "));
            }
            self.line(&decl);
        }
        for (m, at) in ir.mbarriers.iter().zip(ir.mbarrier_offsets()) {
            let note = format!("// {} barriers, {} arrivals a phase", m.stages, m.arrivals);
            if ir.dynamic_shared() {
                self.line(&format!("unsigned long long* const {} = reinterpret_cast<unsigned long long*>(tk_shared + {}); {}", m.name, at, note));
            } else {
                self.line(&format!("__shared__ alignas(8) unsigned long long {}[{}]; {}", m.name, m.stages, note));
            }
        }
        if !ir.observed.is_empty() {
            // Null words: the monitor is off, and the folds are skipped
            // (a uniform test a store).
            self.line("const bool tk_obs_on = tk_obs != nullptr;");
        }
        for (j, &b) in ir.observed.iter().enumerate() {
            // An f16 output's fold takes the pairs a paired store writes
            // (prelude: `tk_observed_f16`).
            let fold = if ir.bufs[b].dtype == Dtype::F16 { "tk_observed_f16" } else { "tk_observed" };
            self.line(&format!("{} {} = {}_none(); // what this thread stores to `{}`", fold, observation_name(j), fold, ir.bufs[b].name));
        }
        for (j, r) in ir.related.iter().enumerate() {
            let (sq, bd) = (&ir.bufs[r.square].name, &ir.bufs[r.bound].name);
            self.line(&format!("tk_observed {} = tk_observed_none(); // `{} * {} <= {:?} * {}` on what this thread stores", relation_name(j), sq, sq, r.factor, bd));
        }
        self.block(&ir.body);
        self.indent -= 1;
        self.line("}");
    }

    /// The thread's observation of `buf`, if the monitor observes it.
    fn observation(&self, buf: BufId) -> Option<String> {
        self.ir.observed.iter().position(|b| *b == buf).map(observation_name)
    }

    /// The shared-window address of barrier `stage` of `bar`.
    fn mbarrier(&self, bar: MbarId, stage: &IExpr) -> String {
        format!("(unsigned)__cvta_generic_to_shared(&{}[{}])", self.ir.mbarriers[bar].name, self.iexpr(stage))
    }

    fn block(&mut self, body: &[KStmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &KStmt) {
        match s {
            KStmt::Decl { local, init } => {
                let ty = self.ir.locals[*local].ty.hip_type();
                let l = match init {
                    Some(v) => format!("{} {} = {};", ty, self.local(*local), self.vexpr(v)),
                    None => format!("{} {};", ty, self.local(*local)),
                };
                self.line(&l);
            }
            KStmt::DeclArray { arr, len, init } => {
                let ty = self.ir.locals[*arr].ty.hip_type();
                let name = self.local(*arr);
                if self.vec_arrays.contains(arr) {
                    self.line(&format!("tk_vec<{}, {}> {};", ty, len, name));
                } else {
                    self.line(&format!("{} {}[{}];", ty, name, len));
                }
                if let Some(v) = init {
                    let v = self.vexpr(v);
                    let elem = if self.vec_arrays.contains(arr) { format!("{}.v[e]", name) } else { format!("{}[e]", name) };
                    self.line("#pragma unroll");
                    self.line(&format!("for (int e = 0; e < {}; ++e) {} = {};", len, elem, v));
                }
            }
            KStmt::Assign { local, value } => {
                let l = format!("{} = {};", self.local(*local), self.vexpr(value));
                self.line(&l);
            }
            KStmt::ArraySet { arr, index, value } => {
                let l = format!("{} = {};", self.array_elem(*arr, index), self.vexpr(value));
                self.line(&l);
            }
            KStmt::LetInt { var, value } => {
                let l = format!("const {} {} = {};", self.ir.index_ty.hip_type(), self.ivar(*var), self.iexpr(value));
                self.line(&l);
            }
            KStmt::For { var, start, end, step, unroll, body } => {
                if *unroll {
                    // Constant trip counts unroll fully; a strided loop over
                    // a row unrolls by 4 so that four loads are in flight
                    // per thread (the order of its accumulation is kept).
                    let constant = matches!((start, end), (IExpr::Const(_), IExpr::Const(_)));
                    self.line(if constant { "#pragma unroll" } else { "#pragma unroll 4" });
                }
                let v = self.ivar(*var);
                let step = match step {
                    IExpr::Const(1) => format!("++{}", v),
                    s => format!("{} += {}", v, self.iexpr(s)),
                };
                let l = format!("for ({} {} = {}; {} < {}; {}) {{", self.ir.index_ty.hip_type(), v, self.iexpr(start), v, self.iexpr(end), step);
                self.line(&l);
                self.indent += 1;
                self.block(body);
                self.indent -= 1;
                self.line("}");
            }
            KStmt::If { cond, then, els } => {
                let l = format!("if ({}) {{", self.cond(cond));
                self.line(&l);
                self.indent += 1;
                self.block(then);
                self.indent -= 1;
                if els.is_empty() {
                    self.line("}");
                } else {
                    self.line("} else {");
                    self.indent += 1;
                    self.block(els);
                    self.indent -= 1;
                    self.line("}");
                }
            }
            KStmt::SkipWhen { cond, body } => {
                let l = format!("if (!{}) {{", self.vexpr(cond));
                self.line(&l);
                self.indent += 1;
                self.block(body);
                self.indent -= 1;
                self.line("}");
            }
            KStmt::Store { buf, index, value, .. } => {
                let target = format!("{}[{}]", cpp_name(&self.ir.bufs[*buf].name), self.iexpr(index));
                let value = self.vexpr(value);
                let l = match self.observation(*buf) {
                    None => format!("{} = {};", target, value),
                    // The value stored, as stored, is what is observed.
                    Some(obs) => format!("{{ const {} tk_v = {}; {} = tk_v; if (tk_obs_on) tk_observe({}, tk_v); }}", self.ir.bufs[*buf].dtype.hip_type(), value, target, obs),
                };
                self.line(&l);
            }
            KStmt::VecLoad { arr, buf, base, width, .. } => {
                let b = &self.ir.bufs[*buf];
                let l = format!(
                    "{} = *reinterpret_cast<const tk_vec<{}, {}>*>({} + {});",
                    self.local(*arr),
                    b.dtype.hip_type(),
                    width,
                    cpp_name(&b.name),
                    self.iexpr(base)
                );
                self.line(&l);
            }
            KStmt::VecStore { buf, base, width, arr, .. } => {
                let b = &self.ir.bufs[*buf];
                let l = format!(
                    "*reinterpret_cast<tk_vec<{}, {}>*>({} + {}) = {};",
                    b.dtype.hip_type(),
                    width,
                    cpp_name(&b.name),
                    self.iexpr(base),
                    self.local(*arr)
                );
                self.line(&l);
                if let Some(obs) = self.observation(*buf) {
                    // Every lane of the vector (prelude: `tk_observe` of a
                    // `tk_vec`, by pairs for an f16 fold).
                    self.line(&format!("if (tk_obs_on) {{ tk_observe({}, {}); }}", obs, self.local(*arr)));
                }
            }
            KStmt::SharedVecStore { arr, base, width, src } => {
                let sh = &self.ir.shared[*arr];
                let l = format!("*reinterpret_cast<tk_vec<{}, {}>*>(&{}[{}]) = {};", sh.ty.hip_type(), width, sh.name, self.iexpr(base), self.local(*src));
                self.line(&l);
            }
            KStmt::SharedSet { arr, index, value } => {
                let l = format!("{}[{}] = {};", self.ir.shared[*arr].name, self.iexpr(index), self.vexpr(value));
                self.line(&l);
            }
            KStmt::Barrier => self.line("__syncthreads();"),
            KStmt::FragmentLoad { shape, which, src, dst, dst_at, rows } => self.fragment_load(*shape, *which, src, *dst, dst_at, *rows),
            KStmt::Mma { shape, a, a_at, b, b_at, acc, acc_at } => self.mma(*shape, (*a, a_at), (*b, b_at), *acc, acc_at),
            KStmt::Wgmma { n, a, b, acc, accumulate } => self.wgmma(*n, a, b, *acc, *accumulate),
            KStmt::WgmmaFence => self.line("asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");"),
            KStmt::WgmmaWait { pending } => {
                self.line(&format!("asm volatile(\"wgmma.commit_group.sync.aligned;\\n\\twgmma.wait_group.sync.aligned {};\" ::: \"memory\");", pending));
                // The unit writes the accumulator until the wait, which C++
                // cannot see: each register of a group the wait retires
                // passes through an empty asm after it, so no read of it
                // moves above the wait (and none of a group still running
                // does, which would make the device compiler wait for it).
                let retired: BTreeSet<(LocalId, u32)> = self.unit.wait(*pending).into_iter().flatten().collect();
                let running: Vec<LocalId> = self.unit.running().map(|(acc, _)| *acc).collect();
                for (acc, slots) in retired.into_iter().filter(|(acc, _)| !running.contains(acc)) {
                    let regs: Vec<String> = (0..slots as i64).map(|i| format!("\"+f\"({})", self.array_elem(acc, &IExpr::c(i)))).collect();
                    self.line(&format!("asm volatile(\"\" : {} :: \"memory\");", regs.join(", ")));
                }
            }
            KStmt::ObserveRelation { fold, square, bound } => {
                let l = format!("if (tk_obs_on) tk_relate({}, {}, {}, {:?});", relation_name(*fold), self.vexpr(square), self.vexpr(bound), self.ir.related[*fold].factor);
                self.line(&l);
            }
            KStmt::ObserveFlush { slot } => {
                // A null buffer: the monitor is off (the folds were
                // skipped too; their registers stay).
                self.line("if (tk_obs_on) {");
                self.indent += 1;
                let slot = self.iexpr(slot);
                let folds = (0..self.ir.observed.len()).map(observation_name).chain((0..self.ir.related.len()).map(relation_name));
                for (j, fold) in folds.enumerate() {
                    let at = j as i64 * OBSERVE_SLOTS * OBSERVE_WORDS;
                    self.line(&format!("tk_observe_flush(tk_obs + {} + {} * ({}), {});", at, OBSERVE_WORDS, slot, fold));
                }
                self.indent -= 1;
                self.line("}");
            }
            KStmt::ProxyFence => self.line("asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");"),
            KStmt::CpAsync { arr, base, buf, src, width, valid, .. } => {
                // Past the operand's end nothing is read (a source size of
                // zero fills the 16 bytes with zeros); the address given
                // then is the buffer's start, which exists. `.ca`, through
                // L1: measured on the H100 (bench/RESULTS.md), `.cg`
                // copies that bypass L1 reach L2 as one 32-byte sector per
                // 16-byte copy, twice the bytes, and ran 1.8x slower.
                let sh = &self.ir.shared[*arr];
                let bytes = width * sh.ty.size_bytes();
                let g = cpp_name(&self.ir.bufs[*buf].name);
                let l = format!(
                    "{{ const bool ok = {}; asm volatile(\"cp.async.ca.shared.global [%0], [%1], {}, %2;\" :: \"r\"((unsigned)__cvta_generic_to_shared(&{}[{}])), \"l\"(ok ? (const void*)({} + {}) : (const void*){}), \"r\"(ok ? {} : 0) : \"memory\"); }}",
                    self.cond(valid),
                    bytes,
                    sh.name,
                    self.iexpr(base),
                    g,
                    self.iexpr(src),
                    g,
                    bytes
                );
                self.line(&l);
            }
            KStmt::CpAsyncCommit => self.line("asm volatile(\"cp.async.commit_group;\" ::: \"memory\");"),
            KStmt::CpAsyncWait { pending } => self.line(&format!("asm volatile(\"cp.async.wait_group {};\" ::: \"memory\");", pending)),
            KStmt::MbarInit { bar } => {
                let m = &self.ir.mbarriers[*bar];
                for stage in 0..m.stages {
                    let at = self.mbarrier(*bar, &IExpr::c(stage as i64));
                    self.line(&format!("asm volatile(\"mbarrier.init.shared::cta.b64 [%0], {};\" :: \"r\"({}) : \"memory\");", m.arrivals, at));
                }
                // The initialisation is visible to the other threads (and
                // the asynchronous proxy) once the barrier that follows it
                // is passed.
                self.line("asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");");
            }
            KStmt::MbarArrive { bar, stage } => {
                let at = self.mbarrier(*bar, stage);
                self.line(&format!("asm volatile(\"{{\\n\\t.reg .b64 state;\\n\\tmbarrier.arrive.shared::cta.b64 state, [%0];\\n\\t}}\" :: \"r\"({}) : \"memory\");", at));
            }
            KStmt::CpAsyncArrive { bar, stage } => {
                let at = self.mbarrier(*bar, stage);
                self.line(&format!("asm volatile(\"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\" :: \"r\"({}) : \"memory\");", at));
            }
            KStmt::MbarWait { bar, stage, parity } => {
                // The labels are local to the braces: one wait's loop per
                // block of PTX.
                let at = self.mbarrier(*bar, stage);
                self.line(&format!(
                    "asm volatile(\"{{\\n\\t.reg .pred done;\\n\\tTK_WAIT:\\n\\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n\\t@!done bra TK_WAIT;\\n\\t}}\" :: \"r\"({}), \"r\"({}) : \"memory\");",
                    at,
                    self.iexpr(parity)
                ));
            }
            KStmt::MbarExpectTx { bar, stage, bytes } => {
                let at = self.mbarrier(*bar, stage);
                self.line(&format!("asm volatile(\"{{\\n\\t.reg .b64 state;\\n\\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], {};\\n\\t}}\" :: \"r\"({}) : \"memory\");", bytes, at));
            }
            KStmt::TmaLoad { map, arr, base, inner, outer, bar, stage, .. } => {
                let dst = format!("(unsigned)__cvta_generic_to_shared(&{}[{}])", self.ir.shared[*arr].name, self.iexpr(base));
                self.line(&format!(
                    "asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {{%2, %3}}], [%4];\" :: \"r\"({}), \"l\"(reinterpret_cast<unsigned long long>(&{})), \"r\"((int)({})), \"r\"((int)({})), \"r\"({}) : \"memory\");",
                    dst,
                    cpp_name(&self.ir.tensor_maps[*map].name),
                    self.iexpr(inner),
                    self.iexpr(outer),
                    self.mbarrier(*bar, stage)
                ));
            }
            KStmt::SetMaxRegisters { regs, grow } => {
                self.line(&format!("asm volatile(\"setmaxnreg.{}.sync.aligned.u32 {};\" ::: \"memory\");", if *grow { "inc" } else { "dec" }, regs));
            }
        }
    }

    /// One instruction's fragment into the lane's registers: by `ldmatrix`
    /// (8-element rows, 16-byte aligned: proved), or element by element
    /// from the layout of `schedule::tensor_core`. (NVIDIA only: the
    /// schedule is not chosen for other targets.)
    fn fragment_load(&mut self, shape: MmaShape, which: Fragment, src: &MmaOperand, dst: LocalId, dst_at: &IExpr, by_rows: bool) {
        use crate::schedule::tensor_core::{element, loads_rows, registers, tile};
        let lane = IExpr::Tid.rem(IExpr::c(shape.lanes() as i64));
        let tile_name = self.ir.shared[src.tile].name.clone();
        let n = registers(shape, which) as i64;
        if loads_rows(by_rows, src) {
            // Lane l gives the address of row l % rows, chunk l / rows of
            // the 8 x 8 matrices in the order the fragment's registers hold
            // them: A's four are (rows 0-7, k 0-7), (8-15, 0-7), (0-7,
            // 8-15), (8-15, 8-15); B's two (k 0-7), (k 8-15), transposed
            // (lanes 16-31 give addresses `.x2` ignores). The "memory"
            // clobber keeps the read after the slab's plain stores and
            // the barrier.
            let (rows, _) = tile(shape, which);
            let r = lane.clone().rem(IExpr::c(rows));
            let chunk = lane.div(IExpr::c(rows));
            let at = src.base.clone().add(r.mul(IExpr::c(src.row_stride))).add(chunk.mul(IExpr::c(8)));
            let words = n / 2;
            let (count, trans) = match which {
                Fragment::B => (words, ".trans"),
                _ => (words, ""),
            };
            let outs: Vec<String> = (0..words).map(|j| format!("\"=r\"(*reinterpret_cast<unsigned*>(&{}))", self.array_elem(dst, &dst_at.clone().add(IExpr::c(2 * j))))).collect();
            let slots: Vec<String> = (0..words).map(|j| format!("%{}", j)).collect();
            self.line(&format!(
                "asm volatile(\"ldmatrix.sync.aligned.m8n8.x{}{}.shared.b16 {{{}}}, [%{}];\" : {} : \"r\"((unsigned)__cvta_generic_to_shared(&{}[{}])) : \"memory\");",
                count,
                trans,
                slots.join(", "),
                words,
                outs.join(", "),
                tile_name,
                self.iexpr(&at)
            ));
            return;
        }
        for reg in 0..n {
            let (r, c) = element(shape, which, &lane, &IExpr::c(reg));
            let at = src.base.clone().add(r.mul(IExpr::c(src.row_stride))).add(c.mul(IExpr::c(src.col_stride)));
            let l = format!("{} = {}[{}];", self.array_elem(dst, &dst_at.clone().add(IExpr::c(reg))), tile_name, self.iexpr(&at));
            self.line(&l);
        }
    }

    /// One matrix-unit instruction on the lane's fragment registers, two
    /// 16-bit elements per 32-bit register.
    fn mma(&mut self, shape: MmaShape, a: (LocalId, &IExpr), b: (LocalId, &IExpr), acc: LocalId, acc_at: &IExpr) {
        use crate::schedule::tensor_core::registers;
        if shape == MmaShape::Mfma16x16x16 {
            return self.mfma(a, b, acc, acc_at);
        }
        let ptx = match self.ir.locals[a.0].ty {
            Dtype::Bf16 => "bf16",
            _ => "f16",
        };
        let mut regs = Vec::new();
        for (which, (arr, at)) in [(Fragment::A, a), (Fragment::B, b)] {
            for j in 0..registers(shape, which) as i64 / 2 {
                regs.push(format!("\"r\"(*reinterpret_cast<const unsigned*>(&{}))", self.array_elem(arr, &at.clone().add(IExpr::c(2 * j)))));
            }
        }
        let accs: Vec<String> = (0..registers(shape, Fragment::Acc) as i64).map(|i| format!("\"+f\"({})", self.array_elem(acc, &acc_at.clone().add(IExpr::c(i))))).collect();
        self.line(&format!(
            "asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" : {} : {});",
            accs.join(", "),
            regs.join(", "),
            t = ptx
        ));
    }

    /// One AMD MFMA (`v_mfma_f32_16x16x16f16`, or `..bf16_1k` for bf16) on
    /// the lane's four A and four B elements and four accumulator slots,
    /// moved in and out of the builtin's vector types by value (a copy of
    /// bytes: the fragments hold `__half` / `hip_bfloat16` values, the
    /// builtin takes `_Float16` / `short` vectors of the same bits).
    fn mfma(&mut self, a: (LocalId, &IExpr), b: (LocalId, &IExpr), acc: LocalId, acc_at: &IExpr) {
        let (lane_ty, builtin) = match self.ir.locals[a.0].ty {
            Dtype::Bf16 => ("short", "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k"),
            _ => ("_Float16", "__builtin_amdgcn_mfma_f32_16x16x16f16"),
        };
        let elem = |s: &Self, arr: LocalId, at: &IExpr, i: i64| s.array_elem(arr, &at.clone().add(IExpr::c(i)));
        let (a0, b0) = (elem(self, a.0, a.1, 0), elem(self, b.0, b.1, 0));
        let accs: Vec<String> = (0..4).map(|i| elem(self, acc, acc_at, i)).collect();
        self.line("{");
        self.indent += 1;
        self.line(&format!("typedef {} tk_in4 __attribute__((ext_vector_type(4)));", lane_ty));
        self.line("typedef float tk_f32x4 __attribute__((ext_vector_type(4)));");
        self.line("tk_in4 a4, b4;");
        self.line(&format!("__builtin_memcpy(&a4, &{}, 8);", a0));
        self.line(&format!("__builtin_memcpy(&b4, &{}, 8);", b0));
        self.line(&format!("tk_f32x4 c4 = {{{}}};", accs.join(", ")));
        self.line(&format!("c4 = {}(a4, b4, c4, 0, 0, 0);", builtin));
        for (i, slot) in accs.iter().enumerate() {
            self.line(&format!("{} = c4[{}];", slot, i));
        }
        self.indent -= 1;
        self.line("}");
    }

    /// A matrix descriptor (PTX ISA, "Matrix Descriptor Format"): the
    /// operand's shared address, its core matrices' distances along K
    /// (leading) and along M or N (stride), all in 16-byte units, no
    /// swizzling.
    ///
    /// With the 128-byte swizzle (layout 1 in bits 62-63) the address is
    /// the row's start plus the instruction's `k_at` (the unit swizzles
    /// the addresses it forms from it; `base` is 1024-byte aligned, so the
    /// descriptor's base offset is 0).
    fn descriptor(&self, op: &WgOperand) -> String {
        let bytes = self.ir.shared[op.tile].ty.size_bytes() as i64;
        let field = |elements: i64| ((elements * bytes) >> 4) as u64;
        let at = if op.k_at == 0 { op.base.clone() } else { op.base.clone().add(IExpr::c(op.k_at)) };
        format!(
            "((unsigned long long)((__cvta_generic_to_shared(&{}[{}]) & 0x3FFFF) >> 4) | ({}ull << 16) | ({}ull << 32){})",
            self.ir.shared[op.tile].name,
            self.iexpr(&at),
            field(op.lbo),
            field(op.sbo),
            if op.swizzle { " | (1ull << 62)" } else { "" }
        )
    }

    /// One warpgroup instruction: A and B through descriptors, B with the
    /// transpose bit where its core matrices run along N.
    fn wgmma(&mut self, n: u32, a: &WgOperand, b: &WgOperand, acc: LocalId, accumulate: bool) {
        let ptx = match self.ir.shared[a.tile].ty {
            Dtype::Bf16 => "bf16",
            _ => "f16",
        };
        let count = n as usize / 2;
        self.unit.issue((acc, n / 2));
        let slots: Vec<String> = (0..count).map(|i| format!("%{}", i)).collect();
        // Starting from zero the unit does not read the accumulator: its
        // registers are outputs only.
        let mode = if accumulate { "+f" } else { "=f" };
        let accs: Vec<String> = (0..count).map(|i| format!("\"{}\"({})", mode, self.array_elem(acc, &IExpr::c(i as i64)))).collect();
        let (da, db) = (self.descriptor(a), self.descriptor(b));
        self.line(&format!(
            "asm volatile(\"{{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %{s}, 0;\\n\\twgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{}}}, %{da_at}, %{db_at}, p, 1, 1, {ta}, {tb};\\n\\t}}\" : {} : \"l\"({}), \"l\"({}), \"n\"({}) : \"memory\");",
            slots.join(", "),
            accs.join(", "),
            da,
            db,
            accumulate as u32,
            s = count + 2,
            da_at = count,
            db_at = count + 1,
            t = ptx,
            ta = if a.k_inner { 0 } else { 1 },
            tb = if b.k_inner { 0 } else { 1 },
        ));
    }

    fn array_elem(&self, arr: LocalId, index: &IExpr) -> String {
        if self.vec_arrays.contains(&arr) {
            format!("{}.v[{}]", self.local(arr), self.iexpr(index))
        } else {
            format!("{}[{}]", self.local(arr), self.iexpr(index))
        }
    }

    fn iexpr(&self, e: &IExpr) -> String {
        match e {
            IExpr::Const(v) => int_literal(*v, self.ir.index_ty),
            IExpr::Dim(d) => cpp_name(&self.ir.dims[*d]),
            IExpr::Var(v) => self.ivar(*v),
            IExpr::Tid => "(int)threadIdx.x".into(),
            IExpr::BlockIdx(a) => format!("(int)blockIdx.{}", ["x", "y", "z"][*a as usize]),
            IExpr::GridDim(a) => format!("(int)gridDim.{}", ["x", "y", "z"][*a as usize]),
            IExpr::Add(a, b) => format!("({} + {})", self.iexpr(a), self.iexpr(b)),
            IExpr::Sub(a, b) => format!("({} - {})", self.iexpr(a), self.iexpr(b)),
            IExpr::Mul(a, b) => format!("({} * {})", self.iexpr(a), self.iexpr(b)),
            IExpr::Div(a, b) => format!("({} / {})", self.iexpr(a), self.iexpr(b)),
            IExpr::Rem(a, b) => format!("({} % {})", self.iexpr(a), self.iexpr(b)),
            IExpr::Min(a, b) => format!("tk_imin({}, {})", self.iexpr(a), self.iexpr(b)),
            IExpr::Load { buf, index, .. } => format!("(int){}[{}]", cpp_name(&self.ir.bufs[*buf].name), self.iexpr(index)),
            IExpr::Select(c, a, b) => format!("({} ? {} : {})", self.cond(c), self.iexpr(a), self.iexpr(b)),
        }
    }

    fn cond(&self, c: &Cond) -> String {
        match c {
            Cond::True => "true".into(),
            Cond::Lt(a, b) => format!("{} < {}", self.iexpr(a), self.iexpr(b)),
            Cond::Le(a, b) => format!("{} <= {}", self.iexpr(a), self.iexpr(b)),
            Cond::Eq(a, b) => format!("{} == {}", self.iexpr(a), self.iexpr(b)),
            Cond::And(a, b) => format!("({}) && ({})", self.cond(a), self.cond(b)),
            Cond::Not(a) => format!("!({})", self.cond(a)),
            Cond::Aligned(bufs, bytes) => {
                let ptrs = bufs.iter().map(|b| format!("(unsigned long long){}", cpp_name(&self.ir.bufs[*b].name))).collect::<Vec<_>>().join(" | ");
                format!("(({}) % {}ull) == 0ull", ptrs, bytes)
            }
        }
    }

    /// Does this kernel print CUDA's fast intrinsics (`KernelIr::fast_intrinsics`)?
    fn intrinsics(&self) -> bool {
        self.ir.fast_intrinsics && self.ir.target.is_cuda()
    }

    fn vexpr(&self, e: &VExpr) -> String {
        let ty = e.ty;
        match &e.kind {
            VKind::Const(c) => const_literal(*c, ty),
            VKind::Load { buf, index, .. } => format!("{}[{}]", cpp_name(&self.ir.bufs[*buf].name), self.iexpr(index)),
            VKind::Scalar(s) => cpp_name(&self.ir.scalars[*s].0),
            VKind::Int(i) => self.iexpr(i),
            VKind::Local(l) => self.local(*l),
            VKind::ArrayGet { arr, index } => self.array_elem(*arr, index),
            VKind::SharedGet { arr, index } => format!("{}[{}]", self.ir.shared[*arr].name, self.iexpr(index)),
            VKind::Unary(UnOp::Neg, a) => format!("(-{})", self.vexpr(a)),
            VKind::Unary(UnOp::Not, a) => format!("(!{})", self.vexpr(a)),
            VKind::Binary(BinOp::Div, a, b) if self.intrinsics() && ty == Dtype::F32 => format!("__fdividef({}, {})", self.vexpr(a), self.vexpr(b)),
            VKind::Binary(op, a, b) => format!("({} {} {})", self.vexpr(a), op_symbol(*op), self.vexpr(b)),
            VKind::Fma(a, b, c) => format!("{}({}, {}, {})", if ty == Dtype::F64 { "fma" } else { "fmaf" }, self.vexpr(a), self.vexpr(b), self.vexpr(c)),
            VKind::Call(f, args) if f.is_residue() => self.residue_call(*f, args),
            VKind::Call(f, args) => {
                let args: Vec<String> = args.iter().map(|a| self.vexpr(a)).collect();
                let name = if *f == Builtin::Exp && ty == Dtype::F32 && self.intrinsics() { "__expf" } else { builtin_name(*f, ty) };
                format!("{}({})", name, args.join(", "))
            }
            VKind::Cast(a) => cast(&self.vexpr(a), a.ty, ty),
            VKind::Select(c, a, b) => format!("({} ? {} : {})", self.vexpr(c), self.vexpr(a), self.vexpr(b)),
            VKind::ShflXor { value, mask } => format!("tk_shfl_xor({}, {})", self.vexpr(value), mask),
        }
    }
}

impl Printer<'_> {
    /// A residue builtin with the kernel's modulus as constants (so the
    /// device compiler turns `% q` into multiplications).
    fn residue_call(&self, f: Builtin, args: &[VExpr]) -> String {
        let m = self.ir.modulus.expect("residue builtins only in kernels with a modulus (check::residue)");
        let a: Vec<String> = args.iter().map(|x| self.vexpr(x)).collect();
        match f {
            Builtin::MulMod => format!("tk_mulmod({}, {}, {}ull)", a[0], a[1], m.q()),
            Builtin::AddMod => format!("tk_addmod({}, {}, {}ull)", a[0], a[1], m.q()),
            Builtin::Vp if m.p == 2 => format!("tk_vp2({}, {}u)", a[0], m.k),
            Builtin::Vp => format!("tk_vp({}, {}u, {}u)", a[0], m.p, m.k),
            // Where the condition holds the value is 0 modulo q (proved),
            // and is not computed.
            Builtin::SkipIf => format!("({} ? 0u : {})", a[0], a[1]),
            _ => unreachable!("not a residue builtin"),
        }
    }
}

fn op_symbol(op: BinOp) -> &'static str {
    op.symbol()
}

fn describe(s: &Schedule) -> String {
    match s {
        Schedule::Pointwise { vector, vectors: 2 } if *vector > 1 => format!("pointwise, two vectors of {} elements per thread with 16-byte accesses, half the array apart", vector),
        Schedule::Pointwise { vector, .. } if *vector > 1 => format!("pointwise, {} elements per thread with 16-byte accesses", vector),
        Schedule::Pointwise { .. } => "pointwise".into(),
        Schedule::Gather => "gather (indirect reads)".into(),
        Schedule::RowReduction { rows_rank } => format!("row reduction, one block per row (rank-{} rows)", rows_rank),
        Schedule::RowCached { rows_rank, slots, width } => format!("row reduction, one block per row (rank-{} rows), the row read once into registers: {} runs of {} elements a thread", rows_rank, slots, width),
        Schedule::Contraction { bm, bn, bk, tm, tn } => format!("contraction, {}x{} tiles, k-slabs of {}, {}x{} per thread", bm, bn, bk, tm, tn),
        Schedule::TensorCore { bm, bn, bk, shape } => format!("tensor-core contraction, {}x{} tiles, k-slabs of {}, {:?} instructions", bm, bn, bk, shape),
        Schedule::Warpgroup { bm, bn, bk, n } => format!("warpgroup tensor-core contraction, {}x{} tiles, k-slabs of {}, wgmma m64n{}k16 instructions", bm, bn, bk, n),
        Schedule::ColumnReduction { lanes, chains } => format!("column reduction, a block per {} columns, its thread groups splitting the rows, {} chains a thread", lanes, chains),
        Schedule::SplitContraction { bm, bn, bk, tm, tn, groups } => format!("split-sum contraction, {}x{} tiles, k-slabs of {} split among {} thread groups, {}x{} per thread, the groups' partials summed in a tree", bm, bn, bk, groups, tm, tn),
        Schedule::NarrowContraction { warps, rows, cols, bk } => format!("narrow contraction, {} warps a block, {} rows a warp, at most {} columns, the warp's lanes along the sum, B's slabs {} deep, the lanes' partials summed by a butterfly", warps, rows, cols, bk),
    }
}

fn builtin_name(f: Builtin, ty: Dtype) -> &'static str {
    let d = ty == Dtype::F64;
    match f {
        Builtin::Exp => if d { "exp" } else { "expf" },
        Builtin::Log => if d { "log" } else { "logf" },
        Builtin::Tanh => if d { "tanh" } else { "tanhf" },
        Builtin::Sqrt => if d { "sqrt" } else { "sqrtf" },
        Builtin::Rsqrt => if d { "rsqrt" } else { "rsqrtf" },
        Builtin::Abs if ty.is_float() => if d { "fabs" } else { "fabsf" },
        Builtin::Abs => if ty == Dtype::I64 { "llabs" } else { "abs" },
        Builtin::Min if ty.is_float() => if d { "fmin" } else { "fminf" },
        Builtin::Max if ty.is_float() => if d { "fmax" } else { "fmaxf" },
        Builtin::Min => "tk_imin",
        Builtin::Max => "tk_imax",
        Builtin::Select => "tk_select",
        Builtin::Vp | Builtin::MulMod | Builtin::AddMod | Builtin::SkipIf => unreachable!("printed by Printer::residue_call"),
    }
}

fn cast(x: &str, from: Dtype, to: Dtype) -> String {
    if from == to {
        return x.to_string();
    }
    let as_f32 = if from.is_half() { format!("tk_to_f32({})", x) } else { x.to_string() };
    match to {
        Dtype::F16 => format!("tk_f16_from({})", if from == Dtype::F32 || from.is_half() { as_f32 } else { format!("(float)({})", as_f32) }),
        Dtype::Bf16 => format!("tk_bf16_from({})", if from == Dtype::F32 || from.is_half() { as_f32 } else { format!("(float)({})", as_f32) }),
        Dtype::F32 if from.is_half() => as_f32,
        _ => format!("({})({})", to.hip_type(), as_f32),
    }
}

fn int_literal(v: i64, ty: Dtype) -> String {
    match ty {
        Dtype::I64 => {
            if v == i64::MIN {
                "(-9223372036854775807LL - 1)".into()
            } else {
                format!("{}LL", v)
            }
        }
        Dtype::U32 => format!("{}u", v),
        _ if v == i32::MIN as i64 => "(-2147483647 - 1)".into(),
        _ if v > i32::MAX as i64 || v < i32::MIN as i64 => format!("{}LL", v),
        _ => v.to_string(),
    }
}

fn const_literal(c: Const, ty: Dtype) -> String {
    match c {
        Const::Bool(b) => b.to_string(),
        Const::Int(v) if ty.is_float() => const_literal(Const::Float(v as f64), ty),
        Const::Int(v) => int_literal(v, ty),
        Const::Float(v) if ty.is_int() => int_literal(v as i64, ty),
        Const::Float(v) => {
            let f32lit = |x: f32| {
                if x.is_infinite() {
                    format!("{}__int_as_float(0x7f800000)", if x < 0.0 { "-" } else { "" })
                } else if x.is_nan() {
                    "__int_as_float(0x7fc00000)".into()
                } else {
                    let s = format!("{:?}", x);
                    let s = if s.contains('.') || s.contains('e') { s } else { format!("{}.0", s) };
                    format!("{}f", s)
                }
            };
            match ty {
                Dtype::F64 => {
                    if v.is_infinite() {
                        format!("{}__longlong_as_double(0x7ff0000000000000LL)", if v < 0.0 { "-" } else { "" })
                    } else {
                        let s = format!("{:?}", v);
                        if s.contains('.') || s.contains('e') { s } else { format!("{}.0", s) }
                    }
                }
                Dtype::F16 => format!("tk_f16_from({})", f32lit(v as f32)),
                Dtype::Bf16 => format!("tk_bf16_from({})", f32lit(v as f32)),
                _ => f32lit(v as f32),
            }
        }
    }
}

impl KernelIr {
    /// Launch geometry as human-readable formulas, for the manifest.
    pub fn grid_formulas(&self) -> Vec<String> {
        let p = Printer { ir: self, out: String::new(), indent: 0, vec_arrays: HashSet::new(), row_tiles: HashSet::new(), unit: WgmmaGroups::default() };
        self.grid
            .iter()
            .map(|g| match g {
                GridDim::Exact(e) => p.iexpr(e).replace("(int)", ""),
                GridDim::Stride { work, per_block } => format!("clamp(ceil({} / {}), 1, max_blocks)", p.iexpr(work).replace("(int)", ""), per_block),
            })
            .collect()
    }
}

