//! Without a GPU (CI), asking for one is an ordinary error, never a panic,
//! `Device::auto()` falls back to the CPU and says why; the CUDA and HIP
//! code paths still compile every kernel where their compilers exist.

use tokitai_runtime::{kernels, Device, Error};

#[test]
fn a_missing_gpu_is_an_error_and_auto_picks_the_cpu() {
    if std::path::Path::new("/dev/nvidia0").exists() || std::path::Path::new("/dev/kfd").exists() {
        eprintln!("a GPU is present; this test is about machines without one");
        return;
    }
    let e = Device::cuda(0).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { backend: "CUDA", .. }), "{:?}", e);
    let e = Device::hip(0).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { backend: "HIP", .. }), "{:?}", e);
    let (dev, reasons) = Device::auto();
    assert!(matches!(dev, Device::Cpu));
    assert_eq!(reasons.len(), 2, "{:?}", reasons);
    assert!(dev.describe().starts_with("cpu"));
    assert!(Device::from_spec("tpu").is_err());
    assert!(matches!(Device::from_spec("cpu").unwrap(), Device::Cpu));
}

/// NVRTC, in process through cudarc, compiles every kernel the runtime
/// ships for sm_90 (CI installs the NVRTC wheel; scripts/test.sh points
/// `LD_LIBRARY_PATH` and `TOKITAI_CUDA_INCLUDE` at it).
#[test]
fn nvrtc_compiles_every_kernel_in_process() {
    use tokitai_runtime::backend::cuda::{find_include, nvrtc_compile, nvrtc_options};
    let include = find_include();
    if std::env::var_os("CI").is_none() && include.is_none() {
        eprintln!("skipped: no CUDA headers here (CI installs them)");
        return;
    }
    let include = include.expect("cuda_fp16.h: set TOKITAI_CUDA_INCLUDE or install the nvidia-cuda-runtime wheel");
    let options = nvrtc_options("sm_90", Some(&include));
    let mut compiled = 0;
    for c in kernels::all().into_iter().flat_map(|k| k.all_compiled()) {
        let ptx = nvrtc_compile(&c, &options).unwrap_or_else(|e| panic!("{}", e));
        assert!(ptx.contains(&format!(".entry {}", c.name)), "{}: no entry in the PTX", c.name);
        compiled += 1;
    }
    assert!(compiled > 20, "the row kernels' variants are compiled too");
}
