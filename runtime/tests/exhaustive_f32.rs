//! Functions of the CPU schedule checked over every f32.
//!
//! The CPU's `tanh` (`tk_rt::tanh_f32`, no library call) is within 0.82 ulp
//! of the real value for every f32: checked over all of them (the
//! function is odd, and the sign is copied from the argument, so the
//! non-negative ones, and the sign of a few), against f64 `tanh` (within
//! an ulp of f64, 2^-29 of an f32 ulp). The accuracy proofs assume 2 ulp
//! for `tanh` (CUDA's and HIP's documented bound), so the CPU's is inside
//! the assumption.

use rayon::prelude::*;
use tokitai_runtime::abi::tk_rt::{rbf16, rf16, tanh_f32};

/// The f32 ulp at the real value `v` (the spacing of the f32s around it).
fn ulp_at(v: f64) -> f64 {
    let a = v.abs();
    if a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    2f64.powi(a.log2().floor() as i32 - 23)
}

#[test]
fn tanh_f32_is_within_0_82_ulp_for_every_f32() {
    let worst = (0u32..0x7f80_0001)
        .into_par_iter()
        .with_min_len(1 << 16)
        .map(|bits| {
            let x = f32::from_bits(bits);
            let exact = (x as f64).tanh();
            ((tanh_f32(x) as f64 - exact).abs() / ulp_at(exact), bits)
        })
        .reduce(|| (0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
    eprintln!("worst: {} ulp at {:e}", worst.0, f32::from_bits(worst.1));
    assert!(worst.0 <= 0.82, "{} ulp at {:e}", worst.0, f32::from_bits(worst.1));
    for x in [-0.0f32, -1e-30, -0.3, -0.55, -3.0, -9.99, -10.0, -1e30, f32::NEG_INFINITY] {
        assert_eq!(tanh_f32(x).to_bits(), (-tanh_f32(-x)).to_bits(), "odd at {}", x);
    }
    assert!(tanh_f32(f32::NAN).is_nan());
    assert_eq!(tanh_f32(f32::INFINITY), 1.0);
}

/// The check above can fail: plain `1 - 2 / (e^2x + 1)` in f32 is not
/// within an ulp near 0 (cancellation).
#[test]
fn the_ulp_check_refutes_a_cancelling_tanh() {
    let naive = |x: f32| 1.0 - 2.0 / ((2.0 * x).exp() + 1.0);
    let x = 1e-3f32;
    let exact = (x as f64).tanh();
    assert!((naive(x) as f64 - exact).abs() / ulp_at(exact) > 1.0);
}

/// The branch-free roundings to f16 and bf16 (`tk_rt::rf16`, `rbf16`)
/// give `half`'s bits for every f32 (NaN payloads included).
#[test]
fn the_branch_free_roundings_are_halfs_for_every_f32() {
    let wrong = (0u32..=u32::MAX)
        .into_par_iter()
        .find_any(|&bits| {
            let x = f32::from_bits(bits);
            rf16(x).to_bits() != half::f16::from_f32(x).to_f32().to_bits() || rbf16(x).to_bits() != half::bf16::from_f32(x).to_f32().to_bits()
        });
    assert_eq!(wrong, None, "differs at {:#x}", wrong.unwrap_or(0));
}

/// The check above can fail: rounding ties away from zero differs.
#[test]
fn the_rounding_check_refutes_ties_away() {
    let away = |x: f32| f32::from_bits((x.to_bits() + 0x1000) & 0xffff_e000);
    let tie = f32::from_bits(0x3f80_1000); // 1 + 2^-11: halfway between two f16s
    assert_ne!(away(tie).to_bits(), half::f16::from_f32(tie).to_f32().to_bits());
    assert_eq!(rf16(tie).to_bits(), half::f16::from_f32(tie).to_f32().to_bits());
}
