//! Where kernels run: the CPU (default), an NVIDIA GPU through CUDA, or an
//! AMD GPU through HIP.

use crate::Result;
use std::sync::Arc;

#[derive(Clone)]
pub enum Device {
    /// The generated CPU code (mirror oracles), on rayon's threads.
    Cpu,
    /// Every kernel by its exact oracle, in f64 (no roundings): the
    /// reference that gradient checks and `--diagnose` compare against.
    Reference,
    #[cfg(feature = "cuda")]
    Cuda(Arc<crate::backend::cuda::CudaBackend>),
    #[cfg(feature = "hip")]
    Hip(Arc<crate::backend::hip::HipBackend>),
}

impl Device {
    /// What runs this device's launches.
    pub(crate) fn backend(&self) -> &dyn crate::backend::Backend {
        match self {
            Device::Cpu => &crate::backend::cpu::Cpu,
            Device::Reference => &crate::backend::reference::Reference,
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.as_ref(),
            #[cfg(feature = "hip")]
            Device::Hip(h) => h.as_ref(),
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}

impl Device {
    /// The first usable GPU (CUDA, then HIP), else the CPU; `reasons` says
    /// why each GPU backend was passed over.
    pub fn auto() -> (Device, Vec<String>) {
        let mut reasons = Vec::new();
        #[cfg(feature = "cuda")]
        match Device::cuda(0) {
            Ok(d) => return (d, reasons),
            Err(e) => reasons.push(e.to_string()),
        }
        #[cfg(feature = "hip")]
        match Device::hip(0) {
            Ok(d) => return (d, reasons),
            Err(e) => reasons.push(e.to_string()),
        }
        (Device::Cpu, reasons)
    }

    /// CUDA device `ordinal`; an error (never a panic) when libcuda, the
    /// driver or the device is missing.
    #[cfg(feature = "cuda")]
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Ok(Device::Cuda(crate::backend::cuda::CudaBackend::new(ordinal)?))
    }

    /// HIP device `ordinal`; an error when libamdhip64 or the GPU is missing.
    #[cfg(feature = "hip")]
    pub fn hip(ordinal: usize) -> Result<Device> {
        Ok(Device::Hip(crate::backend::hip::HipBackend::new(ordinal)?))
    }

    /// Parse `cpu`, `cuda`, `cuda:N`, `hip`, `hip:N` or `auto`.
    pub fn from_spec(spec: &str) -> Result<Device> {
        let (kind, ordinal) = match spec.split_once(':') {
            Some((k, n)) => (k, n.parse::<usize>().map_err(|_| crate::Error::Tensor(format!("device `{}`: `{}` is not a device number", spec, n)))?),
            None => (spec, 0),
        };
        match kind {
            "cpu" => Ok(Device::Cpu),
            "reference" => Ok(Device::Reference),
            "auto" => Ok(Device::auto().0),
            #[cfg(feature = "cuda")]
            "cuda" => Device::cuda(ordinal),
            #[cfg(feature = "hip")]
            "hip" => Device::hip(ordinal),
            other => Err(crate::Error::Tensor(format!("unknown device `{}` (expected cpu, cuda[:N], hip[:N] or auto)", other))),
        }
    }

    /// "cpu (16 threads)", "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)".
    pub fn describe(&self) -> String {
        match self {
            Device::Cpu => format!("cpu ({} threads)", rayon::current_num_threads()),
            Device::Reference => "reference (exact oracles in f64)".into(),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.describe(),
            #[cfg(feature = "hip")]
            Device::Hip(h) => h.describe(),
        }
    }

    /// "host", "cuda:0", "hip:0": where this device's tensors live.
    pub fn location(&self) -> String {
        match self {
            Device::Cpu | Device::Reference => "host".into(),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.location(),
            #[cfg(feature = "hip")]
            Device::Hip(h) => h.location(),
        }
    }

    /// Wait for every queued launch and copy; report an asynchronous
    /// failure. The contract monitor then judges the launches it measured
    /// on the device (`monitor::settle`).
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Device::Cpu | Device::Reference => Ok(()),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.synchronize(),
            #[cfg(feature = "hip")]
            Device::Hip(h) => h.synchronize(),
        }?;
        crate::monitor::settle()
    }

    /// What a launch of `k` with these dims takes on this device: the
    /// autotuner's choice for its shape class where one is stored, else
    /// the compiler's order (`KernelDef::choose`). The CPU backends run
    /// their own code whatever a GPU would choose.
    pub fn chosen(&self, k: &crate::KernelDef, dims: &[i64]) -> crate::Chosen {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.chosen(k, dims),
            _ => k.choose(dims),
        }
    }

    /// Tune `k` for this launch's shape class (see [`crate::tune`]): time
    /// every proved candidate the launch admits, store the fastest in this
    /// device's tuning table, and say what was found. The arguments are
    /// checked as for a launch; inouts are left as they were. Needs a
    /// CUDA device (HIP cannot be timed here).
    pub fn tune(&self, k: &crate::KernelDef, args: &mut [crate::Arg], reps: usize) -> Result<crate::tune::ClassTuning> {
        let bound = crate::launch::checked(self, k, args)?;
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.tune(k, &bound, args, reps),
            _ => Err(crate::Error::Argument { kernel: k.info.name.into(), message: format!("tuning needs a CUDA device, not {}", self.describe()) }),
        }
    }

    /// Where this device's tuning table is kept (a CUDA device).
    pub fn tuning_table(&self) -> Option<std::path::PathBuf> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.tuned().path().map(|p| p.to_path_buf()),
            _ => None,
        }
    }

    pub fn is_gpu(&self) -> bool {
        !matches!(self, Device::Cpu | Device::Reference)
    }

    /// Can tensors on this device share memory (`Tensor::view`)?
    pub fn has_views(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(_) = self {
            return true;
        }
        false
    }

    /// Can this device replay a captured step (`capture`)?
    pub fn has_graphs(&self) -> bool {
        self.has_views()
    }

    /// Run `f` for real, its allocations placed where a capture of the
    /// same work will place them (see `backend::arena`). Other devices just
    /// run it.
    pub fn rehearse<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        match self {
            #[cfg(feature = "cuda")]
            // (No probe runs beside the step outside a capture, and a
            // capture ends with them joined: nothing reads the arena.)
            Device::Cuda(c) => c.rehearse(f),
            _ => f(),
        }
    }

    /// Record `f`'s device work as a graph to replay (`StepGraph::launch`)
    /// instead of running it; `f` must have been rehearsed just before.
    pub fn capture<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<(StepGraph, R)> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => {
                // The capture's facts about memory are its own (see
                // `monitor::known`): none from before, none kept after.
                crate::monitor::forget_all();
                CAPTURING.with(|x| x.set(true));
                // The monitor's probes branch off the step's stream; the
                // capture ends only once every branch has rejoined it.
                let r = c.capture(|| {
                    let r = f();
                    let joined = crate::monitor::join_probes();
                    r.and_then(|r| joined.map(|_| r))
                });
                CAPTURING.with(|x| x.set(false));
                crate::monitor::forget_all();
                r.map(|(g, r)| (StepGraph::Cuda(g), r))
            }
            _ => Err(crate::Error::Tensor(format!("{} cannot capture graphs", self.describe()))),
        }
    }

    /// Is this thread inside [`Device::capture`]? Launches there are
    /// recorded into a graph, and reading a tensor back is refused.
    pub fn capturing() -> bool {
        CAPTURING.with(|x| x.get())
    }

    /// The contract monitor's probe stream waits for the work queued so
    /// far (a device without one: nothing to do).
    pub(crate) fn fork_probes(&self) -> Result<()> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.fork_probes(),
            _ => Ok(()),
        }
    }

    /// The work queued next waits for every probe queued so far.
    pub(crate) fn join_probes(&self) -> Result<()> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.join_probes(),
            _ => Ok(()),
        }
    }

    /// The most device memory this device's tensors held at once since
    /// the last `memory_peak_reset` (bytes); `None` where it is not known
    /// (host devices, drivers without stream-ordered allocation).
    pub fn memory_peak(&self) -> Result<Option<u64>> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.memory_peak(),
            _ => Ok(None),
        }
    }

    /// The device memory this device's tensors hold now (bytes; `None`
    /// as for `memory_peak`).
    pub fn memory_in_use(&self) -> Result<Option<u64>> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.memory_in_use(),
            _ => Ok(None),
        }
    }

    /// Start the high-water mark of `memory_peak` again from now.
    pub fn memory_peak_reset(&self) -> Result<()> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.memory_peak_reset(),
            _ => Ok(()),
        }
    }

    /// Record the device timeline from now (`crate::timeline`): only a
    /// CUDA device has one; elsewhere an error saying so.
    pub fn timeline_start(&self) -> Result<()> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.timeline_start(),
            _ => Err(self.no_timeline()),
        }
    }

    /// Launches from now on belong to a step named `label` on the timeline
    /// (nothing while none is recorded).
    pub fn timeline_mark(&self, label: &str) -> Result<()> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.timeline_mark(label),
            _ => Ok(()),
        }
    }

    /// Stop recording; the timeline since `timeline_start`.
    pub fn timeline_finish(&self) -> Result<crate::timeline::Timeline> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.timeline_finish(),
            _ => Err(self.no_timeline()),
        }
    }

    /// What a device without a timeline answers `timeline_start` and `_finish`.
    fn no_timeline(&self) -> crate::Error {
        crate::Error::Tensor(format!("{} records no device timeline (only CUDA devices do)", self.describe()))
    }

    /// Give back the memory of captured steps (their graphs must be gone).
    pub fn release_graph_memory(&self) -> Result<()> {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => c.release_arena(),
            _ => Ok(()),
        }
    }
}

/// A captured step (see `Device::capture`).
pub enum StepGraph {
    #[cfg(feature = "cuda")]
    Cuda(crate::backend::cuda::Graph),
}

impl StepGraph {
    /// Queue one replay of the step.
    pub fn launch(&self) -> Result<()> {
        match self {
            // The graph writes memory the monitor does not see.
            #[cfg(feature = "cuda")]
            StepGraph::Cuda(g) => {
                crate::monitor::forget_all();
                g.launch()
            }
            #[allow(unreachable_patterns)]
            _ => Ok(()),
        }
    }
}

thread_local! {
    /// Set while this thread captures a graph (see [`Device::capturing`]).
    static CAPTURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
