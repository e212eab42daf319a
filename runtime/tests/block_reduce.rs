//! The CPU mirror's block reduction computes only what lane 0 of the
//! kernel's butterflies sees, in place: it must give the bits of the whole
//! XOR butterfly (every lane, every mask, a copy per level), for any
//! combining function (here also one that is not commutative, so that the
//! operands' order shows) and for values a sum treats specially (-0, NaN,
//! infinities).

use tokitai_runtime::abi::tk_rt::block_reduce;

/// The kernel's reduction as the GPU runs it, written out whole.
fn reference(parts: &[f32], warp: usize, ident: f32, f: &dyn Fn(f32, f32) -> f32) -> f32 {
    let butterfly = |vals: &mut Vec<f32>| {
        let mut mask = vals.len() / 2;
        while mask >= 1 {
            let old = vals.clone();
            for l in 0..vals.len() {
                vals[l] = f(old[l], old[l ^ mask]);
            }
            mask /= 2;
        }
    };
    let nwarps = parts.len() / warp;
    let mut firsts = Vec::new();
    for w in 0..nwarps {
        let mut lanes = parts[w * warp..(w + 1) * warp].to_vec();
        butterfly(&mut lanes);
        firsts.push(lanes[0]);
    }
    let mut lanes: Vec<f32> = (0..warp).map(|l| if l < nwarps { firsts[l] } else { ident }).collect();
    butterfly(&mut lanes);
    lanes[0]
}

#[test]
fn the_lane_zero_reduction_has_the_whole_butterflys_bits() {
    let specials = [-0.0f32, 0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-45, -3.5, 65504.0];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let sum = |a: f32, b: f32| a + b;
    let max = |a: f32, b: f32| if b > a { b } else { a };
    let lopsided = |a: f32, b: f32| a - 0.5 * b;
    let mut checked = 0;
    for (threads, warp) in [(32usize, 32usize), (128, 32), (256, 32), (1024, 32), (256, 64), (512, 64)] {
        for round in 0..200 {
            let parts: Vec<f32> = (0..threads)
                .map(|_| {
                    let r = next();
                    if round % 4 == 0 && r % 5 == 0 {
                        specials[(r >> 8) as usize % specials.len()]
                    } else {
                        ((r >> 11) as f64 / (1u64 << 53) as f64 * 200.0 - 100.0) as f32
                    }
                })
                .collect();
            for (f, ident) in [(&sum as &dyn Fn(f32, f32) -> f32, -0.0f32), (&sum, 0.0), (&max, f32::NEG_INFINITY), (&lopsided, 0.0)] {
                let want = reference(&parts, warp, ident, f);
                let got = block_reduce(&mut parts.clone(), warp, threads, ident, &f);
                assert_eq!(got.to_bits(), want.to_bits(), "{} threads, warp {}: {:e} against {:e}", threads, warp, got, want);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * 200 * 4);
}

/// Lanes from `live` on hold the identity (threads past a row's length):
/// skipping their warps gives the whole butterfly's bits, for every
/// `live`, signed zeros and NaNs among the live lanes included. A wrong
/// `live` (a live lane skipped) is seen.
#[test]
fn warps_of_identities_are_skipped_with_the_same_bits() {
    let sum = |a: f32, b: f32| a + b;
    let max = |a: f32, b: f32| if b > a { b } else { a };
    let specials = [-0.0f32, 0.0, f32::NAN, 1.5, -2.25, f32::INFINITY];
    let mut wrong_seen = false;
    for (threads, warp) in [(256usize, 32usize), (256, 64), (1024, 32)] {
        for live in [0usize, 1, 31, 32, 33, 100, 128, 200, threads] {
            for (f, ident) in [(&sum as &dyn Fn(f32, f32) -> f32, 0.0f32), (&sum, -0.0), (&max, f32::NEG_INFINITY)] {
                let parts: Vec<f32> = (0..threads).map(|t| if t < live { specials[t % specials.len()] * (1.0 + t as f32) } else { ident }).collect();
                let want = reference(&parts, warp, ident, f);
                let got = block_reduce(&mut parts.clone(), warp, live, ident, &f);
                assert_eq!(got.to_bits(), want.to_bits(), "{} threads, warp {}, live {}", threads, warp, live);
                if live > warp {
                    // Skipping a live warp of finite values: they are lost.
                    let plain: Vec<f32> = (0..threads).map(|t| if t < live { 1.0 + t as f32 } else { ident }).collect();
                    let short = block_reduce(&mut plain.clone(), warp, live - warp, ident, &f);
                    wrong_seen |= short.to_bits() != reference(&plain, warp, ident, f).to_bits();
                }
            }
        }
    }
    assert!(wrong_seen, "a `live` too small is never seen");
}
