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

/// NVRTC, in process through cudarc, compiles the runtime's kernels for
/// sm_90 (CI installs the NVRTC wheel; scripts/test.sh points
/// `LD_LIBRARY_PATH` and `TOKITAI_CUDA_INCLUDE` at it).
///
/// Every text the runtime ships (each kernel of `examples/ops/*.tk` and
/// every variant, observing twins included) is also compiled, warnings
/// failing, by the compiler's `device_compile` test, through
/// `scripts/nvrtc_compile.py` with the same options (asserted below). So
/// this test checks what only it can: the in-process path. It compiles
/// each kernel and, of its variants, the longest text (the matrix-unit
/// forms' inline assembly where a kernel has them). Compiling all of them
/// twice cost CI about two minutes.
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
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/nvrtc_compile.py")).unwrap();
    for o in options.iter().filter(|o| !o.starts_with("-I") && !o.starts_with("--gpu-architecture=")) {
        assert!(script.contains(&format!("\"{}\"", o)), "scripts/nvrtc_compile.py does not pass {}: the two NVRTC tests would compile differently", o);
    }
    assert!(options.contains(&"--gpu-architecture=sm_90a".to_string()), "{:?}", options);
    let mut compiled = 0;
    let mut variants = 0;
    for k in kernels::all() {
        let all = k.all_compiled();
        let longest = all[1..].iter().max_by_key(|c| c.hip_source.len());
        variants += longest.is_some() as usize;
        for c in std::iter::once(&all[0]).chain(longest) {
            let ptx = nvrtc_compile(c, &options).unwrap_or_else(|e| panic!("{}", e));
            assert!(ptx.contains(&format!(".entry {}", c.name)), "{}: no entry in the PTX", c.name);
            compiled += 1;
        }
    }
    assert!(variants > 10 && compiled > 40, "{} kernels, {} of them variants", compiled, variants);
}
