//! The `#[kernel]` example kernels on a device (the GPU suite runs it on
//! the H100 through the device tool; CI runs it on the CPU): each kernel on
//! random shapes of several sizes and random inputs over its domain,
//! outputs poisoned with NaN, against its exact f64 oracle within the
//! declared tolerance.
//!
//! Usage: rust-kernels-check [--device cpu|cuda:0]
//! Exit status 0 when every check passes, 1 when one fails, 2 on errors.

use tokitai_runtime::check::{check, random_case, Rng};
use tokitai_runtime::Device;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let spec = args.iter().position(|a| a == "--device").and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| "cpu".into());
    let dev = Device::from_spec(&spec).unwrap_or_else(|e| {
        eprintln!("error: {}", e);
        std::process::exit(2)
    });
    println!("device: {}", dev.describe());
    let (mut passed, mut failed) = (0, 0);
    for k in tokitai_rust_kernels::ALL {
        for (i, scale) in [3i64, 61, 333, 1500].into_iter().enumerate() {
            let mut rng = Rng::new(0xBEEF ^ ((i as u64) << 16) ^ k.info.name.len() as u64);
            match random_case(k, &mut rng, scale).and_then(|case| check(&dev, k, &case)) {
                Ok(out) => {
                    let ok = out.passed();
                    if ok { passed += 1 } else { failed += 1 }
                    println!("{:<12} {:<5} dims {:<16} worst/tol {:>7.3} {}", out.kernel, if ok { "ok" } else { "FAIL" }, format!("{:?}", out.dims), out.worst_ratio, if ok { String::new() } else { out.worst });
                }
                Err(e) => {
                    failed += 1;
                    println!("{:<12} ERROR {}", k.info.name, e);
                }
            }
        }
    }
    println!("{} of {} checks passed on {}", passed, passed + failed, dev.describe());
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
