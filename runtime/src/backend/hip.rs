//! The HIP backend for AMD GPUs: libamdhip64 and hiprtc are loaded at run
//! time (nothing links against ROCm), the kernel's HIP text is compiled by
//! hiprtc for the device, cached on disk like CUDA's PTX, and launched with
//! `hipModuleLaunchKernel`. On a machine without ROCm or without an AMD GPU,
//! `HipBackend::new` returns `Error::DeviceUnavailable`.

use super::bytes::{decode, launch_values, to_bytes};
use crate::abi::tk_rt::Buf;
use crate::cache::DiskCache;
use crate::call::{Arg, Bound, Chosen, KernelDef, Observed};
use crate::tensor::Storage;
use crate::{DType, Error, Result};
use libloading::Library;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Arc, Mutex};

const BACKEND: &str = "HIP";
type Status = c_int;
type Ptr = *mut c_void;

/// The entry points used, resolved once.
struct Api {
    _hip: Library,
    _rtc: Option<Library>,
    init: unsafe extern "C" fn(c_uint) -> Status,
    device_count: unsafe extern "C" fn(*mut c_int) -> Status,
    set_device: unsafe extern "C" fn(c_int) -> Status,
    device_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    malloc: unsafe extern "C" fn(*mut Ptr, usize) -> Status,
    free: unsafe extern "C" fn(Ptr) -> Status,
    memcpy: unsafe extern "C" fn(Ptr, *const c_void, usize, c_int) -> Status,
    synchronize: unsafe extern "C" fn() -> Status,
    module_load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> Status,
    module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Status,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> Status,
    rtc_create: unsafe extern "C" fn(*mut Ptr, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> Status,
    rtc_compile: unsafe extern "C" fn(Ptr, c_int, *const *const c_char) -> Status,
    rtc_log_size: unsafe extern "C" fn(Ptr, *mut usize) -> Status,
    rtc_log: unsafe extern "C" fn(Ptr, *mut c_char) -> Status,
    rtc_code_size: unsafe extern "C" fn(Ptr, *mut usize) -> Status,
    rtc_code: unsafe extern "C" fn(Ptr, *mut c_char) -> Status,
    rtc_destroy: unsafe extern "C" fn(*mut Ptr) -> Status,
}

const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;
const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;

fn open(names: &[&str]) -> Option<Library> {
    names.iter().find_map(|n| unsafe { Library::new(n) }.ok())
}

impl Api {
    fn load() -> std::result::Result<Api, String> {
        let hip = open(&["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"]).ok_or("libamdhip64 (the ROCm HIP runtime) is not installed")?;
        // hiprtc is its own library from ROCm 5.3 on, part of libamdhip64 before.
        let rtc = open(&["libhiprtc.so", "libhiprtc.so.6", "libhiprtc.so.5"]);
        {
            fn sym<T: Copy>(lib: &Library, name: &str) -> std::result::Result<T, String> {
                unsafe { lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| format!("symbol {} missing: {}", name, e)) }
            }
            let r = rtc.as_ref().unwrap_or(&hip);
            Ok(Api {
                init: sym(&hip, "hipInit")?,
                device_count: sym(&hip, "hipGetDeviceCount")?,
                set_device: sym(&hip, "hipSetDevice")?,
                device_name: sym(&hip, "hipDeviceGetName")?,
                error_string: sym(&hip, "hipGetErrorString")?,
                malloc: sym(&hip, "hipMalloc")?,
                free: sym(&hip, "hipFree")?,
                memcpy: sym(&hip, "hipMemcpy")?,
                synchronize: sym(&hip, "hipDeviceSynchronize")?,
                module_load_data: sym(&hip, "hipModuleLoadData")?,
                module_get_function: sym(&hip, "hipModuleGetFunction")?,
                launch: sym(&hip, "hipModuleLaunchKernel")?,
                rtc_create: sym(r, "hiprtcCreateProgram")?,
                rtc_compile: sym(r, "hiprtcCompileProgram")?,
                rtc_log_size: sym(r, "hiprtcGetProgramLogSize")?,
                rtc_log: sym(r, "hiprtcGetProgramLog")?,
                rtc_code_size: sym(r, "hiprtcGetCodeSize")?,
                rtc_code: sym(r, "hiprtcGetCode")?,
                rtc_destroy: sym(r, "hiprtcDestroyProgram")?,
                _hip: hip,
                _rtc: rtc,
            })
        }
    }

    fn check(&self, call: &str, status: Status) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        let message = unsafe { CStr::from_ptr((self.error_string)(status)) }.to_string_lossy().into_owned();
        Err(Error::Device { backend: BACKEND, call: call.into(), message: format!("{} (status {})", message, status) })
    }
}

pub struct HipBackend {
    api: Api,
    ordinal: usize,
    name: String,
    functions: Mutex<HashMap<String, usize>>,
    cache: DiskCache,
}

// The API table holds plain function pointers and the libraries; device
// calls are made with the device set on the calling thread.
unsafe impl Send for HipBackend {}
unsafe impl Sync for HipBackend {}

/// A device allocation holding one tensor's bytes.
pub struct DeviceBuf {
    ptr: usize,
    bytes: usize,
    backend: Arc<HipBackend>,
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        unsafe { (self.backend.api.free)(self.ptr as Ptr) };
    }
}

impl HipBackend {
    pub fn new(ordinal: usize) -> Result<Arc<HipBackend>> {
        let unavailable = |reason: String| Error::DeviceUnavailable { backend: BACKEND, reason };
        let api = Api::load().map_err(unavailable)?;
        if unsafe { (api.init)(0) } != 0 {
            return Err(unavailable("hipInit failed: no AMD GPU or driver on this machine".into()));
        }
        let mut count = 0;
        if unsafe { (api.device_count)(&mut count) } != 0 || count <= ordinal as c_int {
            return Err(unavailable(format!("no AMD GPU with index {} ({} found)", ordinal, count.max(0))));
        }
        api.check("hipSetDevice", unsafe { (api.set_device)(ordinal as c_int) })?;
        let mut name = vec![0 as c_char; 256];
        api.check("hipDeviceGetName", unsafe { (api.device_name)(name.as_mut_ptr(), 256, ordinal as c_int) })?;
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        Ok(Arc::new(HipBackend { api, ordinal, name, functions: Mutex::new(HashMap::new()), cache: DiskCache::default_location() }))
    }

    pub fn describe(&self) -> String {
        format!("{} {}", self.location(), self.name)
    }
    pub fn location(&self) -> String {
        format!("hip:{}", self.ordinal)
    }
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn bind(&self) -> Result<()> {
        self.api.check("hipSetDevice", unsafe { (self.api.set_device)(self.ordinal as c_int) })
    }
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.api.check("hipDeviceSynchronize", unsafe { (self.api.synchronize)() })
    }

    pub(crate) fn upload(self: &Arc<Self>, buf: &Buf) -> Result<DeviceBuf> {
        self.bind()?;
        let bytes = to_bytes(buf);
        let mut ptr: Ptr = std::ptr::null_mut();
        self.api.check("hipMalloc", unsafe { (self.api.malloc)(&mut ptr, bytes.len().max(1)) })?;
        let out = DeviceBuf { ptr: ptr as usize, bytes: bytes.len(), backend: self.clone() };
        if !bytes.is_empty() {
            self.api.check("hipMemcpy", unsafe { (self.api.memcpy)(ptr, bytes.as_ptr() as *const c_void, bytes.len(), MEMCPY_HOST_TO_DEVICE) })?;
        }
        Ok(out)
    }

    fn compile(&self, k: &Chosen) -> Result<Vec<u8>> {
        let api = &self.api;
        let compile_err = |log: String| Error::Compile { kernel: k.name.into(), backend: BACKEND, log };
        let src = CString::new(k.hip_source).map_err(|_| compile_err("source holds a NUL byte".into()))?;
        let name = CString::new(format!("{}.hip", k.name)).map_err(|_| compile_err("bad kernel name".into()))?;
        let mut prog: Ptr = std::ptr::null_mut();
        if unsafe { (api.rtc_create)(&mut prog, src.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()) } != 0 {
            return Err(compile_err("hiprtcCreateProgram failed".into()));
        }
        let opts: Vec<CString> = self.options().into_iter().filter_map(|o| CString::new(o).ok()).collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let status = unsafe { (api.rtc_compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        let result = if status != 0 {
            let mut n = 0usize;
            unsafe { (api.rtc_log_size)(prog, &mut n) };
            let mut log = vec![0 as c_char; n.max(1)];
            unsafe { (api.rtc_log)(prog, log.as_mut_ptr()) };
            Err(compile_err(unsafe { CStr::from_ptr(log.as_ptr()) }.to_string_lossy().into_owned()))
        } else {
            let mut n = 0usize;
            unsafe { (api.rtc_code_size)(prog, &mut n) };
            let mut code = vec![0u8; n];
            unsafe { (api.rtc_code)(prog, code.as_mut_ptr() as *mut c_char) };
            Ok(code)
        };
        unsafe { (api.rtc_destroy)(&mut prog) };
        result
    }

    /// hiprtc targets the current device unless `TOKITAI_HIP_ARCH` names one.
    fn options(&self) -> Vec<String> {
        let mut o = vec!["-O3".to_string(), "-ffp-contract=off".to_string()];
        if let Ok(arch) = std::env::var("TOKITAI_HIP_ARCH") {
            o.push(format!("--offload-arch={}", arch));
        }
        o
    }

    fn function(&self, k: &Chosen) -> Result<Ptr> {
        let key = super::code_key(k.hip_source, "hiprtc", &self.options(), &self.name);
        if let Some(f) = self.functions.lock().ok().and_then(|m| m.get(&key).copied()) {
            return Ok(f as Ptr);
        }
        let (code, _) = self.cache.get_or_build(&key, "hsaco", || self.compile(k))?;
        self.bind()?;
        let mut module: Ptr = std::ptr::null_mut();
        self.api.check("hipModuleLoadData", unsafe { (self.api.module_load_data)(&mut module, code.as_ptr() as *const c_void) })?;
        let mut f: Ptr = std::ptr::null_mut();
        let name = CString::new(k.name).map_err(|_| Error::Argument { kernel: k.name.into(), message: "bad kernel name".into() })?;
        self.api.check("hipModuleGetFunction", unsafe { (self.api.module_get_function)(&mut f, module, name.as_ptr()) })?;
        if let Ok(mut m) = self.functions.lock() {
            m.insert(key, f as usize);
        }
        Ok(f)
    }

    /// `observed`: what the contract monitor chose to run, observing, and
    /// its words; else the launch's own choice, with null words.
    pub(crate) fn launch(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], observed: Option<Observed>) -> Result<()> {
        let (chosen, observe) = observed.map_or_else(|| (k.choose(&bound.dims), 0), |o| (o.chosen, o.words));
        if !chosen.tensor_maps.is_empty() {
            // Bulk tensor copies are NVIDIA's (sm_90); no HIP target
            // schedules them.
            return Err(Error::Argument { kernel: chosen.name.into(), message: "this variant reads through CUDA tensor maps, which HIP cannot build".into() });
        }
        let f = self.function(&chosen)?;
        let ptrs: Vec<u64> = args
            .iter()
            .filter_map(|a| a.tensor())
            .map(|t| match &t.storage {
                Storage::Hip(b) => b.ptr as u64,
                _ => 0,
            })
            .collect();
        let mut values = launch_values(k, chosen.index_bits, bound, |i| ptrs[i]);
        if !chosen.observes.is_empty() {
            values.push(crate::backend::bytes::ArgValue::Ptr(observe));
        }
        let mut raw: Vec<Ptr> = values.iter_mut().map(|v| v.as_ptr()).collect();
        // Grid-stride axes: a generous fixed cap (CU counts are not queried).
        let [gx, gy, gz] = (chosen.grid)(&bound.dims, 1 << 16);
        self.bind()?;
        self.api.check("hipModuleLaunchKernel", unsafe { (self.api.launch)(f, gx, gy, gz, chosen.block, 1, 1, chosen.dynamic_shared, std::ptr::null_mut(), raw.as_mut_ptr(), std::ptr::null_mut()) })
    }
}

impl DeviceBuf {
    pub fn ordinal(&self) -> usize {
        self.backend.ordinal
    }
    pub fn location(&self) -> String {
        self.backend.location()
    }
    /// Device-to-device copy of `bytes` bytes of `src` to byte `offset`.
    pub(crate) fn copy_from(&mut self, offset: usize, src: &DeviceBuf, from: usize, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.backend.bind()?;
        let dst = (self.ptr + offset) as Ptr;
        self.backend.api.check("hipMemcpy", unsafe { (self.backend.api.memcpy)(dst, (src.ptr + from) as *const c_void, bytes, MEMCPY_DEVICE_TO_DEVICE) })
    }
    pub(crate) fn download(&self, dtype: DType, len: usize) -> Result<Buf> {
        self.backend.bind()?;
        let mut bytes = vec![0u8; self.bytes];
        if self.bytes > 0 {
            self.backend.api.check("hipMemcpy", unsafe { (self.backend.api.memcpy)(bytes.as_mut_ptr() as Ptr, self.ptr as *const c_void, self.bytes, MEMCPY_DEVICE_TO_HOST) })?;
        }
        Ok(decode(dtype, len, &bytes))
    }
}

impl super::Backend for HipBackend {
    fn run(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], observed: Option<Observed>) -> Result<()> {
        self.launch(k, bound, args, observed)
    }
}
