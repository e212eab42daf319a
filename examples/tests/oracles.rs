//! For every example kernel, on random inputs of random shapes that meet its
//! `requires` (sizes that are not multiples of the vector width or tile
//! included), the mirror oracle agrees with the exact oracle within the
//! kernel's declared tolerance; integer outputs agree exactly.

use proptest::prelude::*;

/// Deterministic data driven by proptest's seed.
use tokitai_compiler::rng::SplitMix as Rng;

macro_rules! oracle_agreement {
    ($test:ident, $file:ident) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
            #[test]
            fn $test(seed in any::<u64>(), scale in 1i64..=72) {
                use tokitai_examples::$file::{tk_rt::Buf, KERNELS};
                for (info, mirror, exact, requires) in KERNELS {
                    let mut rng = Rng(seed ^ info.name.len() as u64);
                    // Dims: one value per equivalence class, within known bounds.
                    let mut dims = vec![0i64; info.dims.len()];
                    let mut scalars: Vec<f64>;
                    let mut tries = 0;
                    loop {
                        tries += 1;
                        prop_assert!(tries < 200, "no dims satisfying the requires of {}", info.name);
                        for d in 0..dims.len() {
                            let class = info.dim_class[d];
                            dims[d] = match info.dim_value[d] {
                                Some(v) => v,
                                None if class != d => dims[class.min(d)],
                                // Widen the range on retries so that lower bounds such as `E >= 2` are met.
                                None => rng.range(1, info.dim_upper[d].unwrap_or(i64::MAX).min(scale.max(1 + tries as i64)).max(1)),
                            };
                        }
                        for d in 0..dims.len() {
                            dims[d] = dims[info.dim_class[d]].max(dims[d].min(dims[info.dim_class[d]]));
                        }
                        scalars = info.scalars.iter().map(|(name, dtype)| {
                            let (lo, hi) = info.domain.iter().find(|x| x.0 == *name).map(|x| (x.1, x.2)).unwrap_or((0.5, 1.0));
                            // The kernel and both oracles see the scalar in its dtype.
                            let v = lo + (hi - lo) * rng.unit();
                            if *dtype == "f32" { v as f32 as f64 } else { v }
                        }).collect();
                        if requires(&dims, &scalars).is_ok() { break; }
                    }
                    let dim = |name: &str| -> i64 {
                        info.dims.iter().position(|d| *d == name).map(|i| dims[i]).unwrap_or_else(|| name.parse().unwrap_or(1))
                    };
                    let mut args = Vec::new();
                    for t in info.tensors {
                        let len: i64 = t.shape.iter().map(|d| dim(d)).product();
                        let len = len as usize;
                        let (lo, hi) = info.domain.iter().find(|x| x.0 == t.name).map(|x| (x.1, x.2)).unwrap_or((-1.0, 1.0));
                        let mut vals: Vec<f64> = (0..len).map(|_| lo + (hi - lo) * rng.unit()).collect();
                        // Edges of the domain, and values that round badly.
                        if len > 3 { vals[0] = lo; vals[1] = hi; vals[2] = (lo + hi) / 2.0; }
                        let buf = match t.dtype {
                            "f16" => Buf::F16(vals.iter().map(|v| half::f16::from_f64(*v)).collect()),
                            "bf16" => Buf::Bf16(vals.iter().map(|v| half::bf16::from_f64(*v)).collect()),
                            "f32" => Buf::F32(vals.iter().map(|v| *v as f32).collect()),
                            "f64" => Buf::F64(vals),
                            "i32" => {
                                let hi = info.index_ranges.iter().find(|r| r.0 == t.name).map(|r| dim(r.1)).unwrap_or(8);
                                Buf::I32((0..len).map(|_| rng.range(0, hi - 1) as i32).collect())
                            }
                            other => panic!("no generator for dtype {}", other),
                        };
                        args.push(buf);
                    }
                    // Inputs the domain's relations admit (`m * m <= 64.0 * v`).
                    for (t, s, factor, _) in info.relations {
                        let pos = |n: &str| info.tensors.iter().position(|p| p.name == n).expect("a relation names tensors");
                        let bound = args[pos(s)].to_f64();
                        let buf: &mut Buf = &mut args[pos(t)];
                        let mut vals = buf.to_f64();
                        tokitai_contracts::relation::enforce(&mut vals, &bound, *factor, |x| buf.store_f64(x));
                        buf.set_from_f64(&vals);
                    }
                    let want = exact(&dims, &scalars, &args).map_err(|e| TestCaseError::fail(format!("{}: exact: {}", info.name, e)))?;
                    let mut got = args.clone();
                    mirror(&dims, &scalars, &mut got).map_err(|e| TestCaseError::fail(format!("{}: mirror: {}", info.name, e)))?;
                    let outs: Vec<usize> = info.tensors.iter().enumerate().filter(|(_, t)| t.role != "input").map(|(i, _)| i).collect();
                    prop_assert_eq!(outs.len(), want.len());
                    for (o, exact_vals) in outs.iter().zip(&want) {
                        let t = &info.tensors[*o];
                        let kernel_vals = got[*o].to_f64();
                        let (abs, rel) = info.bound.iter().chain(info.tolerance).find(|x| x.0 == t.name).map(|x| (x.1, x.2)).unwrap_or((0.0, 0.0));
                        // A tolerance in magnitudes: at this case's dims and largest inputs.
                        let largest = |name: &str| info.tensors.iter().position(|p| p.name == name).map(|i| args[i].to_f64().iter().fold(0.0f64, |m, x| m.max(x.abs())));
                        let (abs, rel) = if info.tolerance_formula.is_empty() { (abs, rel) } else { info.tolerance_at(t.name, &info.symbol_values(&dims, &largest)).unwrap_or((abs, rel)) };
                        for (i, (k, e)) in kernel_vals.iter().zip(exact_vals).enumerate() {
                            prop_assert!(
                                tokitai_examples::$file::tk_rt::within(*k, *e, abs, rel),
                                "{}: output {}[{}] = {} but exact = {} (|diff| {} > {} + {}*|exact|), dims {:?}",
                                info.name, t.name, i, k, e, (k - e).abs(), abs, rel, dims
                            );
                        }
                    }
                }
            }
        }
    };
}

oracle_agreement!(gelu_oracles_agree, gelu);
oracle_agreement!(layernorm_oracles_agree, layernorm);
oracle_agreement!(linear_oracles_agree, linear);
oracle_agreement!(loss_oracles_agree, loss);
oracle_agreement!(moe_oracles_agree, moe);
oracle_agreement!(optim_oracles_agree, optim);
oracle_agreement!(softmax_oracles_agree, softmax);
