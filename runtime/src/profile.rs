//! Host time per kernel (issue 22): while on, every launch adds the wall
//! time of its dispatch and of the contract monitor's work around it to its
//! kernel's tally. On the CPU backend a dispatch is the kernel's whole run,
//! so the tally says where a step's time goes; on a GPU it is only the
//! host's cost of queueing the launch (the device runs asynchronously).
//!
//! Off by default: a launch then pays one relaxed atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One kernel's tally.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KernelTime {
    pub launches: u64,
    /// Running the kernel (CPU) or queueing it (GPU).
    pub dispatch: Duration,
    /// The contract monitor's observation and judging around the launch.
    pub monitor: Duration,
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static TALLY: Mutex<Option<HashMap<&'static str, KernelTime>>> = Mutex::new(None);

/// Start (or restart) tallying from zero.
pub fn start() {
    if let Ok(mut t) = TALLY.lock() {
        *t = Some(HashMap::new());
    }
    ACTIVE.store(true, Ordering::Release);
}

/// Stop tallying; the kernels' tallies, slowest first.
pub fn finish() -> Vec<(&'static str, KernelTime)> {
    ACTIVE.store(false, Ordering::Release);
    let tally = TALLY.lock().ok().and_then(|mut t| t.take()).unwrap_or_default();
    let mut rows: Vec<_> = tally.into_iter().collect();
    rows.sort_by(|a, b| (b.1.dispatch + b.1.monitor).cmp(&(a.1.dispatch + a.1.monitor)).then(a.0.cmp(b.0)));
    rows
}

pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// When `active()`, the instant to measure from.
pub(crate) fn now() -> Option<Instant> {
    active().then(Instant::now)
}

/// Add one launch of `kernel`: dispatched from `dispatch_start` until
/// `monitor_start`, then monitored until now; `before`: the monitor's time
/// before the dispatch.
pub(crate) fn add(kernel: &'static str, before: Duration, dispatch_start: Instant, monitor_start: Instant) {
    let after = monitor_start.elapsed();
    if let Ok(mut t) = TALLY.lock() {
        if let Some(map) = t.as_mut() {
            let e = map.entry(kernel).or_default();
            e.launches += 1;
            e.dispatch += monitor_start - dispatch_start;
            e.monitor += before + after;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gelu::gelu_fwd;
    use crate::{Device, Tensor};

    // One test touches the global tally, so that no other test's launches
    // land in it.
    #[test]
    fn a_tally_counts_each_launch_of_each_kernel_while_on_and_none_after() {
        let dev = Device::Cpu;
        let x = Tensor::from_f16(&[64], vec![half::f16::from_f32(0.5); 64]).unwrap();
        let mut y = Tensor::zeros(&[64], crate::DType::F16, &dev).unwrap();
        start();
        for _ in 0..3 {
            gelu_fwd::launch(&dev, &x, &mut y).unwrap();
        }
        let rows = finish();
        let gelu = rows.iter().find(|r| r.0 == "gelu_fwd").expect("gelu_fwd is tallied");
        assert_eq!(gelu.1.launches, 3);
        assert!(gelu.1.dispatch > Duration::ZERO);
        gelu_fwd::launch(&dev, &x, &mut y).unwrap();
        assert!(finish().is_empty(), "nothing is tallied once finished");
    }
}
