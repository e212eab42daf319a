//! What a launch is, apart from running it: the kernel as generated
//! (`KernelDef`), its arguments (`Arg`), the checked call (`Bound`), and
//! the code a GPU runs for it (`Chosen`). The backends take these; `launch`
//! checks a call and hands it to the device's backend.

use crate::abi::tk_info::{KernelInfo, LaunchParam, SigParam, Variant};
use crate::abi::tk_rt::Buf;
use crate::Tensor;

/// The mirror oracle on borrowed inputs and owned outputs (`tk_rt::Arg`).
pub type MirrorFn = fn(&[i64], &[f64], &mut [crate::abi::tk_rt::Arg<'_>]) -> std::result::Result<(), String>;
/// The CPU schedule, folding what it stores into the contract monitor's
/// watch (`tk_rt::cpu::Watch`).
pub type CpuWatchedFn = fn(&[i64], &[f64], &mut [crate::abi::tk_rt::Arg<'_>], &crate::abi::tk_rt::cpu::Watch) -> std::result::Result<(), String>;
pub type ExactFn = fn(&[i64], &[f64], &[Buf]) -> std::result::Result<Vec<Vec<f64>>, String>;
pub type RequiresFn = fn(&[i64], &[f64]) -> std::result::Result<(), String>;

/// A kernel as the build script generated it (see `kernels`).
#[derive(Clone, Copy, Debug)]
pub struct KernelDef {
    pub info: &'static KernelInfo,
    pub mirror: MirrorFn,
    /// What the CPU backend runs (`codegen::cpu`): the mirror's values in
    /// a form for a CPU, or the mirror itself.
    pub cpu: MirrorFn,
    /// `cpu`, observing its outputs for the contract monitor (the mirror
    /// observes none).
    pub cpu_watched: CpuWatchedFn,
    /// The CPU schedule's family, in words (`"mirror"` where it is the
    /// mirror).
    pub cpu_schedule: &'static str,
    pub exact: ExactFn,
    pub requires: RequiresFn,
    pub grid: fn(&[i64], i64) -> [u32; 3],
    pub params: &'static [LaunchParam],
    pub signature: &'static [SigParam],
    /// The kernel at other block sizes, by row length.
    pub variants: &'static [Variant],
    /// Candidates of the tuning space that were not emitted (name,
    /// schedule, why): no code exists for them, so no launch takes one.
    pub rejected: &'static [(&'static str, &'static str, &'static str)],
    /// The kernel's own schedule and its parameters.
    pub schedule_params: &'static str,
    /// sha256 of the kernel's name and every candidate's name and source
    /// (`tokitai_contracts::tuning::fingerprint`, computed by the compiler
    /// that generated them): what a tuning table is keyed by.
    pub fingerprint: &'static str,
    pub row_length: fn(&[i64]) -> i64,
    pub block: u32,
    pub shared_bytes: u32,
    /// Dynamic shared memory a launch asks for, in bytes (0: static).
    pub dynamic_shared: u32,
    pub index_bits: u32,
    pub hip_source: &'static str,
    pub target: &'static str,
    /// Outputs the kernel observes for the contract monitor (positions
    /// among the tensor parameters; see `monitor::observe`).
    pub observes: &'static [usize],
    /// Domain relations it checks on what it stores (see `Chosen::relates`).
    pub relates: &'static [usize],
}

/// One argument in signature order.
pub enum Arg<'a> {
    In(&'a Tensor),
    Out(&'a mut Tensor),
    Scalar(f64),
}

impl Arg<'_> {
    pub(crate) fn tensor(&self) -> Option<&Tensor> {
        match self {
            Arg::In(t) => Some(t),
            Arg::Out(t) => Some(t),
            Arg::Scalar(_) => None,
        }
    }
}

/// A checked call: dims in the kernel's dim order, scalars in signature
/// order.
#[derive(Clone, Debug)]
pub struct Bound {
    pub dims: Vec<i64>,
    pub scalars: Vec<f64>,
}

/// What a GPU launches for a call: the kernel itself or one of its variants.
#[derive(Clone, Copy, Debug)]
pub struct Chosen {
    pub name: &'static str,
    pub block: u32,
    pub hip_source: &'static str,
    pub index_bits: u32,
    /// Blocks per grid axis for the call's dims.
    pub grid: fn(&[i64], i64) -> [u32; 3],
    /// Dynamic shared memory the launch asks for, in bytes (0: static).
    pub dynamic_shared: u32,
    /// Tensor maps passed after the parameters (bulk tensor copies).
    pub tensor_maps: &'static [crate::abi::tk_info::TensorMapParam],
    /// Outputs it observes: it takes the observation words (or null)
    /// after everything else.
    pub observes: &'static [usize],
    /// Domain relations (by index) it checks on the values it stores into
    /// two observed outputs: their words follow the outputs'.
    pub relates: &'static [usize],
}

/// A launch the contract monitor observes: what it runs (`chosen`, which
/// observes its outputs: see [`KernelDef::observing`]) and the device
/// address of its observation words.
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    pub chosen: Chosen,
    pub words: u64,
}

impl Chosen {
    pub(crate) fn of(v: &Variant) -> Chosen {
        Chosen { name: v.name, block: v.block, hip_source: v.hip_source, index_bits: v.index_bits, grid: v.grid, dynamic_shared: v.dynamic_shared, tensor_maps: v.tensor_maps, observes: v.observes, relates: v.relates }
    }
}

impl KernelDef {
    /// The first variant serving these dims (by its key: row length, or a
    /// contraction's default tiles; and its guard, where it has one: a
    /// matrix unit's sum at least as long as its bound needs), else the
    /// kernel.
    pub fn choose(&self, dims: &[i64]) -> Chosen {
        self.choose_on(dims, None)
    }
    /// [`KernelDef::choose`] on a device of `multiprocessors`: where the
    /// variant chosen has one on smaller tiles that may take its place
    /// (`Variant::in_place_of`) and whose guard holds, that one where its
    /// waves of resident blocks end sooner (a thin last wave of large
    /// tiles leaves most multiprocessors idle). Both forms hold one block
    /// a multiprocessor. `None`: the compiler's order alone.
    pub fn choose_on(&self, dims: &[i64], multiprocessors: Option<u32>) -> Chosen {
        let key = (self.row_length)(dims);
        let guarded = guarded_variants_on();
        let Some(v) = self.variants.iter().find(|v| (guarded || !v.asks_long_sums()) && !skipped(self, v.name) && v.serves(dims, key)) else { return self.primary() };
        // The grids are evaluated only where such a variant exists.
        let finer = multiprocessors.and_then(|sms| {
            let w = self.variants.iter().find(|w| w.in_place_of.is_some_and(|(of, _)| of == v.name) && !skipped(self, w.name) && w.admits(dims))?;
            let (_, wave_time) = w.in_place_of?;
            let waves = |v: &Variant| blocks(v, dims).div_ceil(sms.max(1) as u64) as f64;
            (waves(w) * wave_time < waves(v)).then_some(w)
        });
        Chosen::of(finer.unwrap_or(v))
    }
    /// What a launch takes in place of `chosen` while the monitor hands it
    /// observation words: `chosen` where it observes its outputs, else its
    /// observing twin (`<name>_obs`, a row schedule's, see the compiler's
    /// `schedule::observe`) where the build emitted one, else `chosen`
    /// (whose outputs the monitor then probes where they are read).
    pub fn observing(&self, chosen: Chosen) -> Chosen {
        if !chosen.observes.is_empty() {
            return chosen;
        }
        self.variants.iter().find(|v| is_twin_of(v.name, chosen.name)).map(Chosen::of).unwrap_or(chosen)
    }
    /// The kernel itself (no variant).
    pub fn primary(&self) -> Chosen {
        Chosen { name: self.info.name, block: self.block, hip_source: self.hip_source, index_bits: self.index_bits, grid: self.grid, dynamic_shared: self.dynamic_shared, tensor_maps: &[], observes: self.observes, relates: self.relates }
    }
    /// The kernel and every variant.
    pub fn all_compiled(&self) -> Vec<Chosen> {
        let mut v = vec![self.primary()];
        v.extend(self.variants.iter().map(Chosen::of));
        v
    }
}

/// The blocks a launch of `v` with these dims runs.
fn blocks(v: &Variant, dims: &[i64]) -> u64 {
    (v.grid)(dims, i64::from(u32::MAX)).iter().map(|&n| u64::from(n)).product()
}

/// Is variant `name` the observing twin of `of`?
fn is_twin_of(name: &str, of: &str) -> bool {
    name.strip_suffix(crate::abi::tk_info::OBSERVING_TWIN_SUFFIX) == Some(of)
}

/// Is variant `name` an observing twin (launched only in place of its
/// original while the monitor observes; never a tuning candidate)?
pub(crate) fn is_observing_twin(name: &str) -> bool {
    name.ends_with(crate::abi::tk_info::OBSERVING_TWIN_SUFFIX)
}

/// Are guarded variants (contractions on a matrix unit) chosen? Yes
/// unless `TOKITAI_GUARDED_VARIANTS=off`: an ablation switch, so that a
/// benchmark can time the same step with and without them in one run.
/// Read once.
fn guarded_variants_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TOKITAI_GUARDED_VARIANTS").map_or(true, |v| v != "off"))
}

/// Is variant `name` of `k` skipped (`TOKITAI_SKIP_VARIANTS`)?
pub(crate) fn skipped(k: &KernelDef, name: &str) -> bool {
    name.strip_prefix(k.info.name).and_then(|rest| rest.strip_prefix('_')).is_some_and(|suffix| skipped_variants().iter().any(|s| s == suffix))
}

/// Variants never chosen, by their name's suffix (`ws` for
/// `<kernel>_ws`): `TOKITAI_SKIP_VARIANTS=ws,wg4`, an ablation switch like
/// `TOKITAI_GUARDED_VARIANTS`, so that a benchmark can time one shape
/// with and without a form in one run. Read once.
fn skipped_variants() -> &'static [String] {
    static SKIP: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SKIP.get_or_init(|| std::env::var("TOKITAI_SKIP_VARIANTS").map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default())
}
