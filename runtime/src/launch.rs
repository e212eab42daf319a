//! The one launch path every typed launcher goes through: bind the dims
//! from the tensors' shapes, check dtypes, shapes, devices and `requires`,
//! then hand the call to the device's backend.

use crate::abi::tk_info::{KernelInfo, LaunchParam, SigParam, Variant};
use crate::abi::tk_rt::Buf;
use crate::{Device, Error, Result, Tensor};

/// The mirror oracle on borrowed inputs and owned outputs (`tk_rt::Arg`).
pub type MirrorFn = fn(&[i64], &[f64], &mut [crate::abi::tk_rt::Arg<'_>]) -> std::result::Result<(), String>;
pub type ExactFn = fn(&[i64], &[f64], &[Buf]) -> std::result::Result<Vec<Vec<f64>>, String>;
pub type RequiresFn = fn(&[i64], &[f64]) -> std::result::Result<(), String>;

/// A kernel as the build script generated it (see `kernels`).
#[derive(Clone, Copy, Debug)]
pub struct KernelDef {
    pub info: &'static KernelInfo,
    pub mirror: MirrorFn,
    pub exact: ExactFn,
    pub requires: RequiresFn,
    pub grid: fn(&[i64], i64) -> [u32; 2],
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
    pub grid: fn(&[i64], i64) -> [u32; 2],
    /// Dynamic shared memory the launch asks for, in bytes (0: static).
    pub dynamic_shared: u32,
    /// Tensor maps passed after the parameters (bulk tensor copies).
    pub tensor_maps: &'static [crate::abi::tk_info::TensorMapParam],
    /// Outputs it observes: it takes the observation words (or null)
    /// after everything else.
    pub observes: &'static [usize],
}

impl Chosen {
    pub(crate) fn of(v: &Variant) -> Chosen {
        Chosen { name: v.name, block: v.block, hip_source: v.hip_source, index_bits: v.index_bits, grid: v.grid, dynamic_shared: v.dynamic_shared, tensor_maps: v.tensor_maps, observes: v.observes }
    }
}

impl KernelDef {
    /// The first variant serving these dims (by its key: row length, or a
    /// contraction's default tiles; and its guard, where it has one: a
    /// matrix unit's sum at least as long as its bound needs), else the
    /// kernel.
    pub fn choose(&self, dims: &[i64]) -> Chosen {
        let key = (self.row_length)(dims);
        let guarded = guarded_variants_on();
        match self.variants.iter().find(|v| (guarded || !v.asks_long_sums()) && !skipped(self, v.name) && v.serves(dims, key)) {
            Some(v) => Chosen::of(v),
            None => self.primary(),
        }
    }
    /// The kernel itself (no variant).
    pub fn primary(&self) -> Chosen {
        Chosen { name: self.info.name, block: self.block, hip_source: self.hip_source, index_bits: self.index_bits, grid: self.grid, dynamic_shared: self.dynamic_shared, tensor_maps: &[], observes: self.observes }
    }
    /// The kernel and every variant.
    pub fn all_compiled(&self) -> Vec<Chosen> {
        let mut v = vec![self.primary()];
        v.extend(self.variants.iter().map(Chosen::of));
        v
    }
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

/// Bind and check everything about a call that does not need a device.
pub fn bind(k: &KernelDef, args: &[Arg]) -> Result<Bound> {
    let info = k.info;
    let kernel = || info.name.to_string();
    let n_tensors = args.iter().filter(|a| a.tensor().is_some()).count();
    if n_tensors != info.tensors.len() || args.len() != info.tensors.len() + info.scalars.len() {
        return Err(Error::Argument { kernel: kernel(), message: format!("expected {} tensors and {} scalars, got {} arguments", info.tensors.len(), info.scalars.len(), args.len()) });
    }
    let mut dims: Vec<Option<(i64, &str)>> = vec![None; info.dims.len()];
    let mut scalars = Vec::new();
    for (param, t) in info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())) {
        if t.dtype().name() != param.dtype {
            return Err(Error::Dtype { kernel: kernel(), tensor: param.name.into(), expected: param.dtype.into(), got: t.dtype().name().into() });
        }
        let shape_err = |message: String| Error::Shape { kernel: kernel(), tensor: param.name.into(), message };
        if t.shape().len() != param.shape.len() {
            return Err(shape_err(format!("expected {} axes [{}], got shape {:?}", param.shape.len(), param.shape.join(", "), t.shape())));
        }
        for (axis, (name, &len)) in param.shape.iter().zip(t.shape()).enumerate() {
            let len = len as i64;
            match info.dims.iter().position(|d| d == name) {
                Some(d) => match dims[d] {
                    None => dims[d] = Some((len, param.name)),
                    Some((v, from)) if v != len => {
                        return Err(shape_err(format!("axis {} is dim {} = {}, but `{}` has {} = {}", axis, name, len, from, name, v)));
                    }
                    Some(_) => {}
                },
                None => {
                    let want: i64 = name.parse().map_err(|_| shape_err(format!("axis {} names unknown dim {}", axis, name)))?;
                    if want != len {
                        return Err(shape_err(format!("axis {} must have length {}, got {}", axis, want, len)));
                    }
                }
            }
        }
    }
    for a in args {
        if let Arg::Scalar(v) = a {
            scalars.push(*v);
        }
    }
    let dims: Vec<i64> = dims
        .iter()
        .zip(info.dims)
        .map(|(d, name)| d.map(|(v, _)| v).ok_or_else(|| Error::Argument { kernel: kernel(), message: format!("dim {} is not the length of any tensor axis", name) }))
        .collect::<Result<_>>()?;
    (k.requires)(&dims, &scalars).map_err(|message| Error::Requires { kernel: kernel(), message })?;
    Ok(Bound { dims, scalars })
}

/// Launch `k` on `dev` with `args` in signature order.
pub fn launch(dev: &Device, k: &KernelDef, args: &mut [Arg]) -> Result<()> {
    let bound = checked(dev, k, args)?;
    let ticket = crate::monitor::before_launch(dev, k, &bound, args)?;
    crate::record::before_launch(k, &bound, args);
    dispatch(dev, k, &bound, args, ticket.observe_address())?;
    crate::monitor::after_launch(k, args, ticket);
    Ok(())
}

/// Launch one of the contract monitor's own probes: every check of
/// `launch`, no monitor and no recorder; `beside`: on the device's probe
/// stream (see `Device::fork_probes`), else in the step's own order.
pub(crate) fn launch_probe(dev: &Device, k: &KernelDef, args: &mut [Arg], beside: bool) -> Result<()> {
    let bound = checked(dev, k, args)?;
    match dev {
        #[cfg(feature = "cuda")]
        Device::Cuda(c) if beside => c.launch_probe(k, &bound, args),
        _ => dispatch(dev, k, &bound, args, 0),
    }
}

/// [`bind`], and every tensor on `dev`.
pub(crate) fn checked(dev: &Device, k: &KernelDef, args: &[Arg]) -> Result<Bound> {
    let bound = bind(k, args)?;
    for (param, t) in k.info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())) {
        if !t.is_on(dev) {
            return Err(Error::WrongDevice { kernel: k.info.name.into(), tensor: param.name.into(), expected: dev.location(), got: t.location() });
        }
    }
    Ok(bound)
}

/// `observe`: the device address of the launch's observation words for
/// the contract monitor (0: none).
fn dispatch(dev: &Device, k: &KernelDef, bound: &Bound, args: &mut [Arg], observe: u64) -> Result<()> {
    match dev {
        Device::Cpu => crate::backend::cpu::run(k, bound, args),
        Device::Reference => crate::backend::reference::run(k, bound, args),
        #[cfg(feature = "cuda")]
        Device::Cuda(c) => c.launch(k, bound, args, observe),
        #[cfg(feature = "hip")]
        Device::Hip(h) => h.launch(k, bound, args, observe),
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::linear::{linear_bwd_w, linear_fwd};

    #[test]
    fn a_guarded_variant_serves_only_the_launches_its_guard_admits() {
        // linear_fwd's dims: M, K, N. On the unit from K = 128 (one
        // promotion a slab from K = 192), for outputs of at least 33
        // default tiles or sums of at least 1024; warp-specialised (from
        // K = 192 too) for outputs of at least 64 of its 256 x 128 tiles
        // (the key counts the kernel's own tiles: 2048 x 1024 is the
        // first such output of 1024 columns).
        let ran = |k: &crate::launch::KernelDef, d: &[i64]| k.choose(d).name;
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 2048, 2048]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 192, 2048]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[2048, 4096, 1024]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[1920, 4096, 1024]), "linear_fwd_wg4");
        assert_eq!(ran(&linear_fwd::KERNEL, &[1024, 2048, 1024]), "linear_fwd_wg4");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 191, 2048]), "linear_fwd_wg");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 128, 2048]), "linear_fwd_wg");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 127, 2048]), "linear_fwd");
        assert_eq!(ran(&linear_fwd::KERNEL, &[128, 128, 128]), "linear_fwd_t16");
        assert_eq!(ran(&linear_fwd::KERNEL, &[128, 1024, 128]), "linear_fwd_wg4");
        // linear_bwd_w sums over M (dims M, K, N): nano's weight gradient.
        assert_eq!(ran(&linear_bwd_w::KERNEL, &[2048, 128, 128]), "linear_bwd_w_wg4");
        assert_eq!(ran(&linear_bwd_w::KERNEL, &[100, 128, 128]), "linear_bwd_w_t16");
    }
}
