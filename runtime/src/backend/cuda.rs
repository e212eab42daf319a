//! The CUDA backend (cudarc, libraries loaded at run time): NVRTC compiles
//! a kernel's HIP text (the prelude maps it onto CUDA) to PTX for the
//! device's architecture once per process and once per user on disk; the
//! driver loads and launches it on one stream, in process. The contract
//! monitor's probes run on a second stream beside it (see `monitor::probe`).

use super::bytes::{decode, launch_values, to_bytes, ArgValue, TensorMapBytes};
use crate::abi::tk_rt::Buf;
use crate::cache::DiskCache;
use crate::call::{Arg, Bound, Chosen, KernelDef, Observed};
use crate::tensor::Storage;
use crate::{DType, Error, Result};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr};
use crate::tune::Tuned;
use super::arena::Arena;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

const BACKEND: &str = "CUDA";

/// Timed launches of each candidate when `TOKITAI_TUNING=auto` tunes a
/// shape class (after two untimed): the median of five.
const AUTO_TUNE_REPS: usize = 5;

/// `TOKITAI_TUNING=auto` leaves launches whose inouts hold more than this
/// to the compiler's order: tuning copies them aside, and the optimizer's
/// (parameters and both moments, 850 MB at tiny) raised a run's peak
/// memory above PyTorch's (bench/RESULTS.md, thirty-eighth session).
/// `tokitai-bench-kernels --tune` still tunes them.
const AUTO_TUNE_MAX_INOUT_BYTES: usize = 64 << 20;

/// Bytes of `k`'s inout tensors in this launch (what tuning copies aside).
fn inout_bytes(k: &KernelDef, args: &[Arg]) -> usize {
    k.info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())).filter(|(p, _)| p.role == "inout").map(|(_, t)| t.size_bytes()).sum()
}

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Where the contract monitor's probes of a captured step run, beside
    /// its kernels: forked from `stream` before each batch (so a probe reads
    /// an input as the launch after it will) and joined back before
    /// anything writes what a probe reads. The graph runs them as branches
    /// on SMs a small step leaves idle, instead of lengthening it.
    probes: Arc<CudaStream>,
    fork_event: Arc<CudaEvent>,
    join_event: Arc<CudaEvent>,
    ordinal: usize,
    name: String,
    arch: String,
    sm_count: u32,
    functions: Mutex<HashMap<String, CudaFunction>>,
    by_address: Mutex<HashMap<usize, CudaFunction>>,
    cache: DiskCache,
    include: Option<PathBuf>,
    /// Where tensors are allocated while a step is rehearsed or captured
    /// into a graph (`graph`); inactive otherwise.
    pub(crate) arena: Mutex<Arena<Arc<CudaSlice<u8>>>>,
    /// Page-locked host memory that `DeviceBuf::read_many` copies into
    /// (grown on demand).
    staging: Mutex<Option<cudarc::driver::PinnedHostSlice<u8>>>,
    /// The autotuner's choices for this GPU and driver (`tune`).
    tuned: Arc<Tuned>,
    /// The device timeline, while one is recorded (`crate::timeline`).
    timeline: super::cuda_timeline::Recorder,
}

/// One tensor's bytes on the device: `bytes` bytes from byte `offset` of an
/// allocation that views and arena neighbours may share.
pub struct DeviceBuf {
    mem: Arc<CudaSlice<u8>>,
    offset: usize,
    bytes: usize,
    backend: Arc<CudaBackend>,
}

/// The CUDA driver's version (`cuDriverGetVersion`: 13000 for 13.0), 0
/// where it cannot be read: part of the tuning table's key.
fn driver_version() -> i32 {
    let mut v = 0;
    match unsafe { sys::cuDriverGetVersion(&mut v) } {
        sys::CUresult::CUDA_SUCCESS => v,
        _ => 0,
    }
}

/// Let the device's memory pool keep what a step frees. Tensors are
/// allocated and freed in stream order from the default pool, whose
/// release threshold is 0: at every synchronisation it hands its free
/// memory back to the driver, and the allocations after it map fresh
/// pages. A sparse step synchronises mid-step to read its routing, so its
/// experts' activations were mapped anew every step: the device timeline
/// showed it idle for 850 us there on the H200 (tiny, batch 4096). Kept,
/// the memory is reused as a caching allocator would; the pool's peak of
/// memory in use (`memory_peak`) does not change.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    if ctx.has_async_alloc() {
        pool_set(ctx, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)?;
    }
    Ok(())
}

/// The context's device's default memory pool (where `stream.alloc`
/// allocates).
fn default_pool(ctx: &CudaContext) -> Result<sys::CUmemoryPool> {
    let mut pool = std::ptr::null_mut();
    // SAFETY: `pool` is a live local the call writes; the device is the
    // context's own.
    let status = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
    pool_status("cuDeviceGetDefaultMemPool", status)?;
    Ok(pool)
}

fn pool_status(call: &str, status: sys::CUresult) -> Result<()> {
    match status {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(Error::Device { backend: BACKEND, call: call.into(), message: format!("{:?}", other) }),
    }
}

/// Set a 64-bit attribute of the default pool.
fn pool_set(ctx: &CudaContext, attr: sys::CUmemPool_attribute, value: u64) -> Result<()> {
    let pool = default_pool(ctx)?;
    let mut v = value;
    // SAFETY: the attributes passed here are 64-bit, and `v` a live u64.
    pool_status("cuMemPoolSetAttribute", unsafe { sys::cuMemPoolSetAttribute(pool, attr, &mut v as *mut u64 as *mut std::ffi::c_void) })
}

/// Read a 64-bit attribute of the default pool.
fn pool_get(ctx: &CudaContext, attr: sys::CUmemPool_attribute) -> Result<u64> {
    let pool = default_pool(ctx)?;
    let mut v = 0u64;
    // SAFETY: as `pool_set`: a 64-bit attribute into a live u64.
    pool_status("cuMemPoolGetAttribute", unsafe { sys::cuMemPoolGetAttribute(pool, attr, &mut v as *mut u64 as *mut std::ffi::c_void) })?;
    Ok(v)
}

pub(super) fn device_err(call: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Device { backend: BACKEND, call: call.to_string(), message: e.to_string() }
}

/// Is one of the names cudarc would load present? (cudarc panics when none
/// is; we answer with an error instead.)
fn library_present(name: &str) -> bool {
    cudarc::get_lib_name_candidates(name).iter().any(|n| unsafe { libloading::Library::new(n) }.is_ok())
}

/// Where `cuda_fp16.h` is: `$TOKITAI_CUDA_INCLUDE`, `$CUDA_HOME/include`,
/// `/usr/local/cuda/include`, or the `nvidia-cuda-runtime` pip wheel.
pub fn find_include() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    for var in ["TOKITAI_CUDA_INCLUDE", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            let p = PathBuf::from(v);
            candidates.push(p.join("include"));
            candidates.push(p);
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    for root in ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"] {
        if let Ok(entries) = std::fs::read_dir(root) {
            for e in entries.flatten() {
                let py = e.path();
                for site in ["site-packages", "dist-packages"] {
                    for sub in ["cu13", "cuda_runtime"] {
                        candidates.push(py.join(site).join("nvidia").join(sub).join("include"));
                    }
                }
            }
        }
    }
    candidates.into_iter().find(|p| p.join("cuda_fp16.h").exists())
}

impl CudaBackend {
    pub fn new(ordinal: usize) -> Result<Arc<CudaBackend>> {
        let unavailable = |reason: String| Error::DeviceUnavailable { backend: BACKEND, reason };
        if !library_present("cuda") {
            return Err(unavailable("libcuda (the NVIDIA driver library) is not installed".into()));
        }
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| unavailable("the CUDA driver library lacks a symbol this runtime needs (driver too old?)".into()))?
            .map_err(|e| unavailable(format!("device {}: {}", ordinal, e)))?;
        // One stream, so cudarc's per-buffer event tracking only costs time.
        unsafe { ctx.disable_event_tracking() };
        keep_freed_memory(&ctx)?;
        // A stream of our own: the legacy default stream cannot be captured
        // into a graph.
        let stream = ctx.new_stream().map_err(device_err("cuStreamCreate"))?;
        let probes = ctx.new_stream().map_err(device_err("cuStreamCreate"))?;
        let fork_event = Arc::new(ctx.new_event(None).map_err(device_err("cuEventCreate"))?);
        let join_event = Arc::new(ctx.new_event(None).map_err(device_err("cuEventCreate"))?);
        let (major, minor) = ctx.compute_capability().map_err(device_err("cuDeviceGetAttribute"))?;
        let sm_count = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(device_err("cuDeviceGetAttribute"))? as u32;
        let name = ctx.name().map_err(device_err("cuDeviceGetName"))?;
        let cache = DiskCache::default_location();
        let tuned = Arc::new(Tuned::load(cache.dir(), &format!("{}-sm_{}{}", name, major, minor), driver_version()));
        Ok(Arc::new(CudaBackend {
            ctx,
            stream,
            probes,
            fork_event,
            join_event,
            ordinal,
            name,
            arch: format!("sm_{}{}", major, minor),
            sm_count,
            functions: Mutex::new(HashMap::new()),
            by_address: Mutex::new(HashMap::new()),
            cache,
            include: find_include(),
            arena: Mutex::new(Arena::default()),
            staging: Mutex::new(None),
            tuned,
            timeline: Default::default(),
        }))
    }

    pub fn describe(&self) -> String {
        format!("{} {} ({}, {} SMs)", self.location(), self.name, self.arch, self.sm_count)
    }
    pub fn location(&self) -> String {
        format!("cuda:{}", self.ordinal)
    }
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    pub fn arch(&self) -> &str {
        &self.arch
    }
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// Replace the on-disk cache (tests use a private folder).
    pub fn with_cache(self: &Arc<Self>, cache: DiskCache) -> Arc<CudaBackend> {
        Arc::new(CudaBackend {
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            probes: self.probes.clone(),
            fork_event: self.fork_event.clone(),
            join_event: self.join_event.clone(),
            ordinal: self.ordinal,
            name: self.name.clone(),
            arch: self.arch.clone(),
            sm_count: self.sm_count,
            functions: Mutex::new(HashMap::new()),
            by_address: Mutex::new(HashMap::new()),
            tuned: Arc::new(Tuned::load(cache.dir(), &format!("{}-{}", self.name, self.arch), driver_version())),
            cache,
            include: self.include.clone(),
            arena: Mutex::new(Arena::default()),
            staging: Mutex::new(None),
            timeline: Default::default(),
        })
    }

    pub fn synchronize(&self) -> Result<()> {
        self.synchronize_for("a synchronisation")
    }

    /// Wait for the stream; `why` names the wait on the timeline.
    fn synchronize_for(&self, why: &'static str) -> Result<()> {
        self.stream.synchronize().map_err(device_err("cuStreamSynchronize"))?;
        self.timeline.waited(why);
        Ok(())
    }

    /// The most device memory tensors held at once since the last
    /// `memory_peak_reset` (bytes; the pool's high-water mark of memory in
    /// use, PyTorch's `max_memory_allocated`). `None` on a driver without
    /// stream-ordered allocation.
    pub fn memory_peak(&self) -> Result<Option<u64>> {
        self.pool_attribute(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// The device memory tensors hold now (bytes; as `memory_peak`).
    pub fn memory_in_use(&self) -> Result<Option<u64>> {
        self.pool_attribute(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// A 64-bit attribute of the pool tensors come from; `None` without
    /// stream-ordered allocation (no pool).
    fn pool_attribute(&self, attr: sys::CUmemPool_attribute) -> Result<Option<u64>> {
        if !self.ctx.has_async_alloc() {
            return Ok(None);
        }
        pool_get(&self.ctx, attr).map(Some)
    }

    /// Start the high-water mark again from the memory in use now.
    pub fn memory_peak_reset(&self) -> Result<()> {
        if self.ctx.has_async_alloc() {
            // The driver takes only 0 here, which resets the mark to what is in use.
            pool_set(&self.ctx, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
        }
        Ok(())
    }

    /// Record the device timeline from now (`crate::timeline`).
    pub fn timeline_start(&self) -> Result<()> {
        self.timeline.start()
    }

    /// Launches from now on belong to a step named `label`.
    pub fn timeline_mark(&self, label: &str) -> Result<()> {
        self.timeline.mark(label)
    }

    /// Stop recording; the timeline since `timeline_start`.
    pub fn timeline_finish(&self) -> Result<crate::timeline::Timeline> {
        self.timeline.finish(&self.stream)
    }

    fn owned(self: &Arc<Self>, slice: CudaSlice<u8>, bytes: usize) -> DeviceBuf {
        DeviceBuf { mem: Arc::new(slice), offset: 0, bytes, backend: self.clone() }
    }

    pub(crate) fn upload(self: &Arc<Self>, buf: &Buf) -> Result<DeviceBuf> {
        let bytes = to_bytes(buf);
        let mut out = self.uninit(bytes.len())?;
        out.write(&bytes)?;
        Ok(out)
    }

    /// `bytes` zero bytes on the device (no host buffer, no copy).
    pub(crate) fn zeros(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuf> {
        let mut out = self.uninit(bytes)?;
        out.clear()?;
        Ok(out)
    }

    /// `bytes` zero bytes that outlive any step: never from the arena, even
    /// while one is active (the contract monitor's probe slots, which every
    /// captured step writes and the host reads after each replay).
    pub(crate) fn zeros_lasting(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuf> {
        let slice = unsafe { self.stream.alloc::<u8>(bytes.max(1)) }.map_err(device_err("cuMemAlloc"))?;
        let mut out = self.owned(slice, bytes);
        out.clear()?;
        Ok(out)
    }

    /// `bytes` bytes on the device, not cleared: only for kernel outputs,
    /// which the kernel writes completely before anything reads them. From
    /// the arena while one is active (a step being rehearsed or captured).
    pub(crate) fn uninit(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuf> {
        let fresh = |size: usize| -> Result<Arc<CudaSlice<u8>>> {
            // SAFETY: the bytes are read only after a kernel whose proved
            // coverage writes every element (see `Tensor::output`), or
            // after `clear`/`write`.
            Ok(Arc::new(unsafe { self.stream.alloc::<u8>(size.max(1)) }.map_err(device_err("cuMemAlloc"))?))
        };
        let placed = self.arena()?.place(bytes, fresh, |c| c.len())?;
        Ok(match placed {
            Some((mem, offset)) => DeviceBuf { mem, offset, bytes, backend: self.clone() },
            None => {
                let slice = Arc::try_unwrap(fresh(bytes)?).unwrap_or_else(|_| unreachable!("a fresh allocation has one owner"));
                self.owned(slice, bytes)
            }
        })
    }

    fn options(&self) -> Vec<String> {
        nvrtc_options(&self.arch, self.include.as_deref())
    }

    /// The loaded function of `k`: from this process's table, else the
    /// disk cache, else NVRTC.
    pub fn function(&self, k: &Chosen) -> Result<CudaFunction> {
        // Hot path: a kernel's source is a static string; its address
        // names it within this process without hashing it again.
        let addr = k.hip_source.as_ptr() as usize;
        if let Some(f) = self.by_address.lock().ok().and_then(|m| m.get(&addr).cloned()) {
            return Ok(f);
        }
        let f = self.function_by_key(k)?;
        if let Ok(mut m) = self.by_address.lock() {
            m.insert(addr, f.clone());
        }
        Ok(f)
    }

    fn function_by_key(&self, k: &Chosen) -> Result<CudaFunction> {
        let options = self.options();
        // The include path is where the headers are, not what they say.
        let key_opts: Vec<String> = options.iter().filter(|o| !o.starts_with("-I")).cloned().collect();
        let key = super::code_key(k.hip_source, "nvrtc", &key_opts, &self.arch);
        if let Some(f) = self.functions.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(f);
        }
        let (ptx, _hit) = self.cache.get_or_build(&key, "ptx", || nvrtc_compile(k, &options).map(String::into_bytes))?;
        let text = String::from_utf8(ptx).map_err(|_| Error::Compile { kernel: k.name.into(), backend: BACKEND, log: "cached PTX is not text".into() })?;
        let module = self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(text)).map_err(device_err("cuModuleLoadData"))?;
        let f = module.load_function(k.name).map_err(device_err("cuModuleGetFunction"))?;
        if k.dynamic_shared > 0 {
            // Past 48 KB a function must be allowed its dynamic shared
            // memory before a launch may ask for it.
            use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_DYNAMIC;
            unsafe { cudarc::driver::result::function::set_function_attribute(f.cu_function(), MAX_DYNAMIC, k.dynamic_shared as i32) }.map_err(device_err("cuFuncSetAttribute"))?;
        }
        if let Ok(mut m) = self.functions.lock() {
            m.insert(key, f.clone());
        }
        Ok(f)
    }

    /// Blocks for a grid-stride axis: enough to fill every SM.
    /// The cap on blocks of a grid-stride axis. Measured on the H100
    /// (bench/RESULTS.md, 2026-11-22): for pointwise kernels a full grid
    /// (one block per block's worth of work) beat persistent grids of 8, 16
    /// or 32 blocks per SM by 5-20%; gathers ran 2.7x faster persistent (8
    /// blocks per SM). `TOKITAI_BLOCKS_PER_SM` sets the cap (for tuning).
    pub fn max_blocks(&self, k: &KernelDef) -> i64 {
        static OVERRIDE: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
        match OVERRIDE.get_or_init(|| std::env::var("TOKITAI_BLOCKS_PER_SM").ok().and_then(|v| v.parse().ok())) {
            Some(per_sm) => self.sm_count as i64 * per_sm,
            None if k.info.schedule == "gather" => self.sm_count as i64 * (2048 / k.block.max(1)) as i64,
            None => i32::MAX as i64,
        }
    }

    /// `observed`: what the contract monitor chose to run, observing, and
    /// its words; else the launch's own choice, with null words.
    pub(crate) fn launch(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], observed: Option<Observed>) -> Result<()> {
        if crate::tune::mode() == crate::tune::Mode::Auto && !self.tuned.has_class(k, &bound.dims) && crate::tune::forced(k, &bound.dims).is_none() && self.may_tune() && inout_bytes(k, args) <= AUTO_TUNE_MAX_INOUT_BYTES {
            self.tune(k, bound, args, AUTO_TUNE_REPS)?;
        }
        let (chosen, words) = observed.map_or_else(|| (self.chosen(k, &bound.dims), 0), |o| (o.chosen, o.words));
        self.launch_chosen(&self.stream, k, bound, args, chosen, words)
    }

    /// Launch one of the contract monitor's probes on the probe stream
    /// (after [`fork_probes`](Self::fork_probes)).
    pub(crate) fn launch_probe(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg]) -> Result<()> {
        self.launch_chosen(&self.probes, k, bound, args, self.chosen(k, &bound.dims), 0)
    }

    /// The probe stream waits for everything queued on the step's stream
    /// so far: probes queued next read what the step's next launch reads.
    pub(crate) fn fork_probes(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(device_err("cuCtxSetCurrent"))?;
        self.fork_event.record(&self.stream).map_err(device_err("cuEventRecord"))?;
        self.probes.wait(&self.fork_event).map_err(device_err("cuStreamWaitEvent"))
    }

    /// The step's stream waits for every probe queued so far: what comes
    /// next on it may write what they read. (While a step is captured,
    /// this is the edge that rejoins the probes' branch to the graph.)
    pub(crate) fn join_probes(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(device_err("cuCtxSetCurrent"))?;
        self.join_event.record(&self.probes).map_err(device_err("cuEventRecord"))?;
        self.stream.wait(&self.join_event).map_err(device_err("cuStreamWaitEvent"))
    }

    /// What a launch of `k` with `dims` takes: the tuned choice for its
    /// shape class, else the compiler's order.
    pub fn chosen(&self, k: &KernelDef, dims: &[i64]) -> Chosen {
        crate::tune::forced(k, dims).or_else(|| self.tuned.choice(k, dims)).unwrap_or_else(|| k.choose_on(dims, Some(self.sm_count)))
    }

    /// The tuning table of this GPU and driver.
    pub fn tuned(&self) -> &Tuned {
        &self.tuned
    }

    /// May a launch be tuned now: not while a step is captured or
    /// rehearsed (its kernels must be the step's own).
    fn may_tune(&self) -> bool {
        self.arena.lock().map(|a| a.mode() == crate::backend::arena::Mode::Off).unwrap_or(false)
    }

    /// Time every candidate of `k` that this launch admits (median of
    /// `reps` launches after two, each timed alone by events) and record
    /// the fastest for the launch's shape class. Inouts are copied aside
    /// first and put back before every launch and at the end, so each
    /// candidate sees the same inputs and the caller finds its tensors as
    /// they were. Not while a step is captured or rehearsed.
    pub(crate) fn tune(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], reps: usize) -> Result<crate::tune::ClassTuning> {
        if !self.may_tune() {
            return Err(Error::Argument { kernel: k.info.name.into(), message: "cannot tune while a step is captured or rehearsed".into() });
        }
        self.ctx.bind_to_thread().map_err(device_err("cuCtxSetCurrent"))?;
        let inouts: Vec<(sys::CUdeviceptr, usize)> = k
            .info
            .tensors
            .iter()
            .zip(args.iter().filter_map(|a| a.tensor()))
            .filter(|(p, _)| p.role == "inout")
            .filter_map(|(_, t)| match &t.storage {
                Storage::Cuda(b) => Some((b.ptr(), b.bytes)),
                _ => None,
            })
            .collect();
        let saved: Vec<CudaSlice<u8>> = inouts.iter().map(|(_, n)| self.stream.alloc_zeros::<u8>(*n).map_err(device_err("cuMemAlloc"))).collect::<Result<_>>()?;
        let copy = |dst: sys::CUdeviceptr, src: sys::CUdeviceptr, n: usize| unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, n, self.stream.cu_stream()) }.map_err(device_err("cuMemcpyDtoDAsync"));
        for ((ptr, n), s) in inouts.iter().zip(&saved) {
            copy(s.device_ptr(&self.stream).0, *ptr, *n)?;
        }
        let restore = || -> Result<()> {
            for ((ptr, n), s) in inouts.iter().zip(&saved) {
                copy(*ptr, s.device_ptr(&self.stream).0, *n)?;
            }
            Ok(())
        };
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(flags).map_err(device_err("cuEventCreate"))?;
        let end = self.ctx.new_event(flags).map_err(device_err("cuEventCreate"))?;
        let reps = reps.max(1);
        let outcome = crate::tune::tune_with(k, &bound.dims, Some(self.sm_count), |c| {
            let mut times = Vec::with_capacity(reps);
            for i in 0..reps + 2 {
                restore()?;
                start.record(&self.stream).map_err(device_err("cuEventRecord"))?;
                self.launch_chosen(&self.stream, k, bound, args, *c, 0)?;
                end.record(&self.stream).map_err(device_err("cuEventRecord"))?;
                end.synchronize().map_err(device_err("cuEventSynchronize"))?;
                if i >= 2 {
                    times.push(start.elapsed_ms(&end).map_err(device_err("cuEventElapsedTime"))? as f64);
                }
            }
            times.sort_by(f64::total_cmp);
            Ok(times[times.len() / 2])
        });
        restore()?;
        self.synchronize()?;
        let outcome = outcome?;
        self.tuned.record(k, &outcome)?;
        Ok(outcome)
    }

    fn launch_chosen(&self, stream: &CudaStream, k: &KernelDef, bound: &Bound, args: &mut [Arg], chosen: Chosen, observe: u64) -> Result<()> {
        let f = self.function(&chosen)?;
        let ptrs: Vec<u64> = args
            .iter()
            .filter_map(|a| a.tensor())
            .map(|t| match &t.storage {
                Storage::Cuda(b) => b.ptr(),
                _ => 0,
            })
            .collect();
        let mut values = launch_values(k, chosen.index_bits, bound, |i| ptrs[i]);
        for m in chosen.tensor_maps {
            let t = args.iter().filter_map(|a| a.tensor()).nth(m.tensor).ok_or_else(|| Error::Argument { kernel: chosen.name.into(), message: format!("no tensor parameter {} for its tensor map", m.tensor) })?;
            values.push(ArgValue::TensorMap(tensor_map(chosen.name, t, ptrs[m.tensor], m)?));
        }
        if !chosen.observes.is_empty() {
            values.push(ArgValue::Ptr(observe));
        }
        let mut raw: Vec<*mut std::ffi::c_void> = values.iter_mut().map(|v| v.as_ptr()).collect();
        let [gx, gy, gz] = (chosen.grid)(&bound.dims, self.max_blocks(k));
        self.ctx.bind_to_thread().map_err(device_err("cuCtxSetCurrent"))?;
        let mut launch = || unsafe { cudarc::driver::result::launch_kernel(f.cu_function(), (gx, gy, gz), (chosen.block, 1, 1), chosen.dynamic_shared, stream.cu_stream(), &mut raw) }.map_err(device_err("cuLaunchKernel"));
        // The timeline follows the main stream only, never inside a capture.
        if self.timeline.on() && std::ptr::eq(stream, &*self.stream) && !crate::Device::capturing() {
            self.timeline.around(&self.ctx, stream, chosen.name, launch)
        } else {
            launch()
        }
    }
}

/// The tensor map a variant's bulk copies read `t` through (at device
/// address `ptr`): a 2-D tensor of 16-bit elements, rows its last dim, in
/// boxes of `m.box_outer` rows of `m.box_inner` elements, the 128-byte
/// swizzle, zeros past its edges. Built exactly where the kernel takes
/// its bulk-copy path (its rows whole 16-byte runs, the buffer 16-byte
/// aligned: the verifier proves the kernel asks both first); elsewhere
/// zeros, which the kernel never reads.
fn tensor_map(kernel: &str, t: &crate::Tensor, ptr: u64, m: &crate::abi::tk_info::TensorMapParam) -> Result<TensorMapBytes> {
    use sys::{CUtensorMapDataType as Data, CUtensorMapFloatOOBfill as Fill, CUtensorMapInterleave as Interleave, CUtensorMapL2promotion as L2, CUtensorMapSwizzle as Swizzle};
    let zeros = TensorMapBytes([0; 16]);
    let data = match t.dtype() {
        DType::F16 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::Bf16 => Data::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        other => return Err(Error::Argument { kernel: kernel.into(), message: format!("a tensor map of {} elements (bulk copies read 16-bit ones)", other.name()) }),
    };
    let [rows, cols] = t.shape() else {
        return Err(Error::Argument { kernel: kernel.into(), message: format!("a tensor map of a tensor of shape {:?} (bulk copies read 2-D ones)", t.shape()) });
    };
    if !cols.is_multiple_of(8) || !ptr.is_multiple_of(16) || *rows == 0 {
        return Ok(zeros);
    }
    let dims = [*cols as u64, *rows as u64];
    let strides = [*cols as u64 * 2];
    let boxes = [m.box_inner, m.box_outer];
    let unit = [1u32, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every pointer is to a live local of the length the call reads
    // (rank 2: two dims, one stride, two box sizes, two element strides);
    // the map is written by the driver.
    let status = unsafe {
        sys::cuTensorMapEncodeTiled(map.as_mut_ptr(), data, 2, ptr as *mut std::ffi::c_void, dims.as_ptr(), strides.as_ptr(), boxes.as_ptr(), unit.as_ptr(), Interleave::CU_TENSOR_MAP_INTERLEAVE_NONE, Swizzle::CU_TENSOR_MAP_SWIZZLE_128B, L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B, Fill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::Device { backend: BACKEND, call: "cuTensorMapEncodeTiled".into(), message: format!("{:?} for {}: {} x {} elements, boxes of {} x {}", status, kernel, rows, cols, m.box_outer, m.box_inner) });
    }
    // SAFETY: written by the successful call.
    let map = unsafe { map.assume_init() };
    Ok(TensorMapBytes(map.opaque))
}

/// NVRTC options: no fma contraction (the kernel says where it fuses, and
/// the mirror oracle follows it), the architecture, the CUDA headers.
pub fn nvrtc_options(arch: &str, include: Option<&std::path::Path>) -> Vec<String> {
    // Compute capability 9.0 compiles for its architecture-specific target:
    // the sm_90 kernels may use the warpgroup unit (`wgmma`), which plain
    // sm_90 lacks; sm_90a code runs on every 9.0 device.
    let arch = if arch == "sm_90" { "sm_90a" } else { arch };
    let mut o = vec![format!("--gpu-architecture={}", arch), "--fmad=false".to_string(), "-std=c++17".to_string()];
    if let Some(inc) = include {
        o.push(format!("-I{}", inc.display()));
    }
    o
}

/// Compile a kernel's HIP text to PTX with NVRTC, in process (no GPU needed,
/// only libnvrtc). The log of a failed compile is in the error.
pub fn nvrtc_compile(k: &Chosen, options: &[String]) -> Result<String> {
    if !library_present("nvrtc") {
        return Err(Error::DeviceUnavailable { backend: BACKEND, reason: "libnvrtc (CUDA run-time compilation) is not installed".into() });
    }
    let opts = cudarc::nvrtc::CompileOptions { options: options.to_vec(), name: Some(format!("{}.cu", k.name)), ..Default::default() };
    let ptx = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(k.hip_source, opts))
        .map_err(|_| Error::DeviceUnavailable { backend: BACKEND, reason: "libnvrtc lacks a symbol this runtime needs".into() })?
        .map_err(|e| Error::Compile { kernel: k.name.into(), backend: BACKEND, log: compile_log(&e) })?;
    Ok(ptx.to_src())
}

fn compile_log(e: &cudarc::nvrtc::CompileError) -> String {
    match e {
        cudarc::nvrtc::CompileError::CompileError { log, options, .. } => format!("{}\n(options: {})", log.to_string_lossy(), options.join(" ")),
        other => format!("{:?}", other),
    }
}

impl DeviceBuf {
    pub fn ordinal(&self) -> usize {
        self.backend.ordinal
    }
    pub fn location(&self) -> String {
        self.backend.location()
    }
    /// The bytes this buffer covers, for what the contract monitor knows
    /// about them.
    pub(crate) fn span(&self) -> crate::monitor::MemSpan {
        crate::monitor::MemSpan { device: self.backend.ordinal, start: self.ptr(), bytes: self.bytes }
    }
    fn ptr(&self) -> sys::CUdeviceptr {
        self.mem.device_ptr(&self.backend.stream).0 + self.offset as u64
    }
    fn stream(&self) -> sys::CUstream {
        self.backend.stream.cu_stream()
    }
    fn bind(&self) -> Result<()> {
        self.backend.ctx.bind_to_thread().map_err(device_err("cuCtxSetCurrent"))
    }
    /// `bytes` bytes from byte `offset` of this buffer, sharing its memory.
    pub(crate) fn view(&self, offset: usize, bytes: usize) -> Result<DeviceBuf> {
        if offset + bytes > self.bytes {
            return Err(Error::Tensor(format!("a view of bytes {}..{} of a {}-byte device buffer", offset, offset + bytes, self.bytes)));
        }
        Ok(DeviceBuf { mem: self.mem.clone(), offset: self.offset + offset, bytes, backend: self.backend.clone() })
    }
    /// Device-to-device copy of `bytes` bytes of `src` from byte `from` to
    /// byte `offset`.
    pub(crate) fn copy_from(&mut self, offset: usize, src: &DeviceBuf, from: usize, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        unsafe { cudarc::driver::result::memcpy_dtod_async(self.ptr() + offset as u64, src.ptr() + from as u64, bytes, self.stream()) }.map_err(device_err("cuMemcpyDtoDAsync"))
    }
    /// Overwrite the first `data.len()` bytes from the host.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<()> {
        if data.len() > self.bytes {
            return Err(Error::Tensor(format!("{} bytes do not fit a {}-byte device buffer", data.len(), self.bytes)));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // Pageable host memory: the driver stages the bytes before the call
        // returns, so `data` may go away afterwards.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.ptr(), data, self.stream()) }.map_err(device_err("cuMemcpyHtoDAsync"))
    }
    /// Every byte zero (stream-ordered).
    pub(crate) fn clear(&mut self) -> Result<()> {
        if self.bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        unsafe { cudarc::driver::result::memset_d8_async(self.ptr(), 0, self.bytes, self.stream()) }.map_err(device_err("cuMemsetD8Async"))
    }
    /// Host copies of several buffers of one device with a single wait:
    /// every copy is queued into page-locked memory, then the stream is
    /// synchronised once (a training step's metrics are six small tensors;
    /// one wait each cost more than the rest of the host's work).
    pub(crate) fn read_many(bufs: &[(&DeviceBuf, DType, usize)]) -> Result<Vec<Buf>> {
        let Some((first, _, _)) = bufs.first() else { return Ok(Vec::new()) };
        let backend = &first.backend;
        if bufs.iter().any(|(b, _, _)| !Arc::ptr_eq(&b.backend, backend)) {
            return bufs.iter().map(|(b, dtype, len)| b.download(*dtype, *len)).collect();
        }
        let mut at = Vec::with_capacity(bufs.len());
        let mut total = 0;
        for (b, _, _) in bufs {
            at.push(total);
            total += b.bytes.div_ceil(16) * 16;
        }
        let mut staging = backend.staging.lock().map_err(|_| Error::Tensor("the host staging buffer's lock is poisoned".into()))?;
        if staging.as_ref().is_none_or(|s| s.len() < total) {
            // Not write-combined: the host reads these bytes.
            *staging = Some(unsafe { backend.ctx.alloc_pinned_with_flags::<u8>(total.max(1 << 16), 0) }.map_err(device_err("cuMemHostAlloc"))?);
        }
        let base = staging.as_mut().expect("allocated above").as_mut_ptr().map_err(device_err("cuEventSynchronize"))?;
        first.bind()?;
        for ((b, _, _), &off) in bufs.iter().zip(&at) {
            if b.bytes > 0 {
                // SAFETY: `off + bytes <= total <= len` of the staging buffer,
                // which the lock keeps ours until the copies are waited for.
                let dst = unsafe { std::slice::from_raw_parts_mut(base.add(off), b.bytes) };
                unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, b.ptr(), b.stream()) }.map_err(device_err("cuMemcpyDtoHAsync"))?;
            }
        }
        backend.synchronize_for("a read-back")?;
        Ok(bufs.iter().zip(&at).map(|((b, dtype, len), &off)| decode(*dtype, *len, unsafe { std::slice::from_raw_parts(base.add(off), b.bytes) })).collect())
    }

    pub(crate) fn download(&self, dtype: DType, len: usize) -> Result<Buf> {
        let mut bytes = vec![0u8; self.bytes];
        if !bytes.is_empty() {
            self.bind()?;
            unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut bytes, self.ptr(), self.stream()) }.map_err(device_err("cuMemcpyDtoHAsync"))?;
        }
        self.backend.synchronize_for("a read-back")?;
        Ok(decode(dtype, len, &bytes))
    }
}

/// A captured step: replaying it launches every kernel and copy of the step
/// with one call.
pub struct Graph {
    graph: cudarc::driver::CudaGraph,
}

impl Graph {
    pub fn launch(&self) -> Result<()> {
        self.graph.launch().map_err(device_err("cuGraphLaunch"))
    }
}

impl CudaBackend {
    fn arena(&self) -> Result<std::sync::MutexGuard<'_, Arena<Arc<CudaSlice<u8>>>>> {
        self.arena.lock().map_err(|_| Error::Tensor("the device arena's lock is poisoned".into()))
    }

    /// Run `f` for real with its allocations placed in the arena (growing
    /// it), so that a capture of the same work finds room for them.
    pub fn rehearse<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.arena()?.start(super::arena::Mode::Grow);
        let r = f();
        self.arena()?.stop();
        r
    }

    /// Record `f`'s launches and copies into a graph instead of running
    /// them; its allocations repeat the rehearsal's addresses. Host reads
    /// and uploads inside `f` are errors (the driver refuses them while
    /// capturing), which keeps a step that needs the host out of a graph.
    pub fn capture<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<(Graph, R)> {
        self.arena()?.start(super::arena::Mode::Fixed);
        let begun = self.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(device_err("cuStreamBeginCapture"));
        let r = begun.and_then(|_| f());
        let ended = self.stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(device_err("cuStreamEndCapture"));
        self.arena()?.stop();
        let r = r?;
        match ended? {
            Some(graph) => Ok((Graph { graph }, r)),
            None => Err(Error::Tensor("the captured step recorded no work".into())),
        }
    }

    /// Free the arena's chunks (no graph may use them any more).
    pub fn release_arena(&self) -> Result<()> {
        self.arena()?.release();
        Ok(())
    }
}

impl super::Backend for CudaBackend {
    fn run(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], observed: Option<Observed>) -> Result<()> {
        self.launch(k, bound, args, observed)
    }
}
