//! The device timeline and the memory high-water mark (`Device::timeline_*`,
//! `Device::memory_*`). The CUDA half needs a GPU: part of the GPU suite
//! (run through the device tool, `bench/run_gpu_tests.sh`); without one it
//! says so and checks only what a host device answers.

use half::f16;
use tokitai_runtime::kernels::gelu::gelu_fwd;
use tokitai_runtime::{DType, Device, Tensor};

#[test]
fn a_host_device_records_no_timeline_and_says_so() {
    let err = Device::Cpu.timeline_start().unwrap_err();
    assert!(err.to_string().contains("only CUDA devices"), "{}", err);
    assert!(Device::Cpu.timeline_finish().is_err());
    // Marks outside a recording, and on a host device, are nothing.
    Device::Cpu.timeline_mark("step 1").unwrap();
    assert_eq!(Device::Cpu.memory_peak().unwrap(), None);
    assert_eq!(Device::Cpu.memory_in_use().unwrap(), None);
}

fn cuda() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped (GPU suite): {}", e);
            None
        }
    }
}

#[test]
fn each_launch_is_a_span_and_a_read_back_is_named_before_the_next() {
    let Some(dev) = cuda() else { return };
    // Only the test's own launches: the contract monitor (warn by
    // default) would add its probes of `x` to the stream.
    tokitai_runtime::monitor::set_mode(tokitai_runtime::monitor::Mode::Off);
    let n = 1 << 22;
    let x = Tensor::from_f16(&[n], vec![f16::from_f32(0.25); n]).unwrap().to_device(&dev).unwrap();
    let mut y = Tensor::output(&[n], DType::F16, &dev).unwrap();
    // Compiled before the recording, so the spans time the kernel.
    gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    dev.synchronize().unwrap();

    dev.timeline_start().unwrap();
    dev.timeline_mark("first").unwrap();
    gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    let back = y.to_f32_vec().unwrap();
    gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    dev.timeline_mark("second").unwrap();
    gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    let t = dev.timeline_finish().unwrap();
    assert!((back[0] - 0.1497).abs() < 1e-3, "gelu(0.25) = {}", back[0]);

    assert_eq!(t.marks, vec!["first".to_string(), "second".to_string()]);
    assert_eq!(t.spans.len(), 4, "{:?}", t.spans);
    assert_eq!(t.spans.iter().map(|s| s.step).collect::<Vec<_>>(), vec![0, 0, 0, 1]);
    for (i, s) in t.spans.iter().enumerate() {
        assert!(s.kernel.starts_with("gelu_fwd"), "{}", s.kernel);
        assert!(s.begin_us < s.end_us, "span {} runs forward: {:?}", i, s);
        if i > 0 {
            // One stream: a kernel begins after the one before it ended
            // (events resolve to about half a microsecond).
            assert!(s.begin_us >= t.spans[i - 1].end_us - 1.0, "span {} overlaps the one before: {:?}", i, t.spans);
        }
    }
    // Only the launch after the read-back follows a wait, and it says how
    // long the host took to queue it after the wait returned.
    let waited: Vec<bool> = t.spans.iter().map(|s| !s.after_waits.is_empty()).collect();
    assert_eq!(waited, vec![false, false, true, false]);
    assert_eq!(t.spans[2].after_waits, vec!["a read-back"]);
    assert!(t.spans[2].host_after_wait_us.is_some_and(|us| us >= 0.0));
    let first = t.split(Some(0));
    assert_eq!(first.launches, 3);
    assert!(first.idle_after_wait_us > 0.0, "the device idled across the read-back: {:?}", first);
    assert!(t.report(4).contains("after a read-back"));
    // Nothing is recorded once finished.
    gelu_fwd::launch(&dev, &x, &mut y).unwrap();
    dev.synchronize().unwrap();
    assert_eq!(dev.timeline_finish().unwrap().spans.len(), 4, "the launch after finishing is not recorded");
}

#[test]
fn the_memory_peak_counts_a_tensor_held_and_the_pool_keeps_what_is_freed() {
    let Some(dev) = cuda() else { return };
    dev.synchronize().unwrap();
    dev.memory_peak_reset().unwrap();
    let before = dev.memory_in_use().unwrap().expect("stream-ordered allocation");
    let bytes = 64usize << 20;
    let held = Tensor::zeros(&[bytes / 4], DType::F32, &dev).unwrap();
    dev.synchronize().unwrap();
    let in_use = dev.memory_in_use().unwrap().unwrap();
    assert!(in_use >= before + bytes as u64, "{} in use after {} more", in_use, bytes);
    drop(held);
    dev.synchronize().unwrap();
    let after = dev.memory_in_use().unwrap().unwrap();
    assert!(after < in_use, "freed memory leaves the in-use count: {} then {}", in_use, after);
    let peak = dev.memory_peak().unwrap().unwrap();
    assert!(peak >= before + bytes as u64, "the peak {} counts the 64 MiB held", peak);
}
