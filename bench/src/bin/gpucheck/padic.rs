//! The p-adic valuation-skip product on the device (issue 23): the
//! skipping kernels, with and without their certificate, and the dense
//! kernel, against the dense product and certificate computed on the host
//! in u64 (`padic::reference`), on adversarial inputs (zeros, p^k - 1,
//! high valuations, every product skipped, none skipped, valuations at the
//! threshold, high-valuation blocks, uniform) at ragged shapes, for both
//! compiled moduli. The shapes take the small tiles and, at 1031 x 1029,
//! the default 64 x 64 tile, whose slabs the skipping kernels skip whole.

use tokitai_runtime::padic::{adversarial, matmul, product, reference, Form, MODULI};
use tokitai_runtime::Device;

/// Each check's label and whether it passed.
pub fn run(dev: &Device, small: bool) -> Vec<(String, bool)> {
    let shapes: &[(usize, usize, usize)] = if small { &[(7, 37, 5)] } else { &[(7, 37, 5), (65, 300, 129), (257, 1031, 97), (1031, 80, 1029)] };
    let mut out = Vec::new();
    for (p, k) in MODULI {
        for &(m, inner, n) in shapes {
            for (name, a, b) in adversarial(p, k, m, inner, n, 0x9AD1C ^ m as u64) {
                let want = reference(p, k, &a, &b);
                let skipped: u64 = want.skipped.iter().map(|&s| s as u64).sum();
                let mut line = Vec::new();
                let mut ok = true;
                match matmul(p, k, &a, &b, dev) {
                    Ok(got) => {
                        let same = got == want;
                        ok &= same;
                        line.push(format!("certified {}", if same { "equal" } else { "DIFFERS" }));
                    }
                    Err(e) => {
                        ok = false;
                        line.push(format!("certified ERROR {}", e));
                    }
                }
                for form in [Form::Dense, Form::Skip] {
                    match product(form, p, k, &a, &b, dev) {
                        Ok(c) => {
                            ok &= c == want.c;
                            line.push(format!("{:?} {}", form, if c == want.c { "equal" } else { "DIFFERS" }));
                        }
                        Err(e) => {
                            ok = false;
                            line.push(format!("{:?} ERROR {}", form, e));
                        }
                    }
                }
                out.push((format!("padic {}^{} {} {}x{}x{}", p, k, name, m, inner, n), ok));
                println!(
                    "padic {}^{} {:<28} {:>4}x{:<5}x{:<4} skipped {:>9} of {:>10}  {:<5} {}",
                    p,
                    k,
                    name,
                    m,
                    inner,
                    n,
                    skipped,
                    m * inner * n,
                    if ok { "ok" } else { "FAIL" },
                    line.join(", ")
                );
            }
        }
    }
    out
}
