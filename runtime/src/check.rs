//! Checking a kernel on a device against its exact (f64) oracle: random
//! shapes that meet `requires`, random inputs over the declared `domain`
//! (with its edges), outputs poisoned with NaN before the launch so that an
//! element the kernel never writes fails, and every element compared with
//! the derived error bound `|got - exact| <= abs + rel |exact|` (proved
//! within the declared tolerance; the tolerance itself where the compiler
//! derived no bound).
//!
//! Used by the CPU tests in CI and by the GPU suite (`tokitai-gpucheck`).

use tokitai_contracts::fp::edges;

use crate::abi::tk_info::SigParam;
use crate::abi::tk_rt::{self, Buf};
use crate::{Arg, Device, Error, KernelDef, Result, Tensor};

/// Deterministic test data: the runtime's one generator family (ChaCha8, as
/// the synthetic datasets use), seeded by the caller.
pub struct Rng(rand_chacha::ChaCha8Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        use rand::SeedableRng;
        Rng(rand_chacha::ChaCha8Rng::seed_from_u64(seed))
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        use rand::Rng as _;
        self.0.random::<f64>()
    }
    /// Uniform in [lo, hi] (just `lo` when the range is empty).
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        use rand::Rng as _;
        self.0.random_range(lo..=hi.max(lo))
    }
}

/// One call's data: dims (kernel order), scalars and every tensor (outputs
/// poisoned with NaN, integer outputs with -1).
#[derive(Clone)]
pub struct Case {
    pub dims: Vec<i64>,
    pub scalars: Vec<f64>,
    pub tensors: Vec<(Vec<usize>, Buf)>,
}

fn shape_of(k: &KernelDef, dims: &[i64], t: usize) -> Vec<usize> {
    k.info.tensors[t]
        .shape
        .iter()
        .map(|d| k.info.dims.iter().position(|x| x == d).map(|i| dims[i]).unwrap_or_else(|| d.parse().unwrap_or(1)) as usize)
        .collect()
}

/// Dims of about `scale` (each at most `scale` and its bound from
/// `requires`), scalars over their domain; retried until `requires` holds.
pub fn random_case(k: &KernelDef, rng: &mut Rng, scale: i64) -> Result<Case> {
    let info = k.info;
    let mut dims = vec![0i64; info.dims.len()];
    let mut scalars: Vec<f64>;
    let mut tries = 0;
    loop {
        tries += 1;
        if tries > 500 {
            return Err(Error::Argument { kernel: info.name.into(), message: format!("no dims of scale {} satisfy `requires`", scale) });
        }
        for d in 0..dims.len() {
            let class = info.dim_class[d];
            dims[d] = match info.dim_value[d] {
                Some(v) => v,
                None if class < d => dims[class],
                None => {
                    let hi = info.dim_upper[d].unwrap_or(i64::MAX).min(scale.max(1 + tries / 4)).max(1);
                    rng.range((hi / 2).max(1), hi)
                }
            };
        }
        scalars = info
            .scalars
            .iter()
            .map(|(name, _)| {
                let (lo, hi) = info.domain.iter().find(|x| x.0 == *name).map(|x| (x.1, x.2)).unwrap_or((0.5, 1.0));
                lo + (hi - lo) * rng.unit()
            })
            .collect();
        if (k.requires)(&dims, &scalars).is_ok() {
            break;
        }
    }
    case_with(k, rng, dims, scalars)
}

impl edges::Draws for Rng {
    fn unit(&mut self) -> f64 {
        Rng::unit(self)
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        Rng::range(self, lo, hi)
    }
}

/// Random data for given dims and scalars (outputs poisoned). Scalars are
/// rounded to their dtype first: the kernel receives them so, and the
/// exact oracle must see the same values (an f64 `0.999` against the
/// kernel's f32 `0.999` is an input difference, not a kernel error).
pub fn case_with(k: &KernelDef, rng: &mut Rng, dims: Vec<i64>, scalars: Vec<f64>) -> Result<Case> {
    let info = k.info;
    let scalars: Vec<f64> = scalars.iter().zip(info.scalars).map(|(v, (_, dtype))| if *dtype == "f32" { *v as f32 as f64 } else { *v }).collect();
    (k.requires)(&dims, &scalars).map_err(|message| Error::Requires { kernel: info.name.into(), message })?;
    let dim = |name: &str| info.dims.iter().position(|d| *d == name).map(|i| dims[i]).unwrap_or_else(|| name.parse().unwrap_or(1));
    let mut tensors = Vec::new();
    for (i, t) in info.tensors.iter().enumerate() {
        let shape = shape_of(k, &dims, i);
        let len: usize = shape.iter().product();
        let output = t.role == "output";
        let (lo, hi) = info.domain.iter().find(|x| x.0 == t.name).map(|x| (x.1, x.2)).unwrap_or((-1.0, 1.0));
        let mut vals: Vec<f64> = (0..len).map(|_| if output { f64::NAN } else { edges::value(rng, lo, hi) }).collect();
        if !output && len > 3 {
            // The domain's edges and middle.
            vals[0] = lo;
            vals[1] = hi;
            vals[2] = (lo + hi) / 2.0;
        }
        let buf = match t.dtype {
            "f16" => Buf::F16(vals.iter().map(|v| half::f16::from_f64(*v)).collect()),
            "bf16" => Buf::Bf16(vals.iter().map(|v| half::bf16::from_f64(*v)).collect()),
            "f32" => Buf::F32(vals.iter().map(|v| *v as f32).collect()),
            "f64" => Buf::F64(vals),
            "i32" if output => Buf::I32(vec![-1; len]),
            "i32" => {
                let hi = info.index_ranges.iter().find(|r| r.0 == t.name).map(|r| dim(r.1)).unwrap_or(8);
                Buf::I32((0..len).map(|_| rng.range(0, hi - 1) as i32).collect())
            }
            "u32" if output => Buf::U32(vec![u32::MAX; len]),
            // Residues: `requires a in [0, Q)` gives the range.
            "u32" => {
                let hi = info.index_ranges.iter().find(|r| r.0 == t.name).map(|r| dim(r.1)).unwrap_or(1 << 16);
                Buf::U32((0..len).map(|_| rng.range(0, hi - 1) as u32).collect())
            }
            other => return Err(Error::Argument { kernel: info.name.into(), message: format!("no generator for dtype {}", other) }),
        };
        tensors.push((shape, buf));
    }
    let mut case = Case { dims, scalars, tensors };
    enforce_relations(k, &mut case);
    Ok(case)
}

/// Pull the drawn inputs inside the domain's relations (`m * m <= 64.0 *
/// v`): the inputs of a case are ones the contract admits.
fn enforce_relations(k: &KernelDef, case: &mut Case) {
    let info = k.info;
    for (t, s, factor, _) in info.relations {
        let (Some(ti), Some(si)) = (info.tensors.iter().position(|p| p.name == *t), info.tensors.iter().position(|p| p.name == *s)) else { continue };
        let bound = case.tensors[si].1.to_f64();
        let buf = &mut case.tensors[ti].1;
        let mut vals = buf.to_f64();
        tokitai_contracts::relation::enforce(&mut vals, &bound, *factor, |x| buf.store_f64(x));
        buf.set_from_f64(&vals);
    }
}

/// Redraw every float input of `case` coherently at one edge of its
/// domain: all elements of a tensor of one sign and within a quarter of the
/// edge's magnitude, a quarter of them with every f16 mantissa bit set.
/// Reductions are at their worst on such inputs (no cancellation, every
/// partial sum as large as the domain allows); the compiler's soundness
/// sampler draws every third launch so.
pub fn make_coherent(k: &KernelDef, rng: &mut Rng, case: &mut Case) {
    for (t, (_, buf)) in k.info.tensors.iter().zip(case.tensors.iter_mut()) {
        if t.role == "output" {
            continue;
        }
        let (lo, hi) = k.info.domain.iter().find(|x| x.0 == t.name).map(|x| (x.1, x.2)).unwrap_or((-1.0, 1.0));
        let edge = edges::tensor_edge(rng, lo, hi);
        let mut value = || edges::near_edge(rng, edge, lo, hi);
        match buf {
            Buf::F16(v) => v.iter_mut().for_each(|x| *x = half::f16::from_f64(value())),
            Buf::Bf16(v) => v.iter_mut().for_each(|x| *x = half::bf16::from_f64(value())),
            Buf::F32(v) => v.iter_mut().for_each(|x| *x = value() as f32),
            Buf::F64(v) => v.iter_mut().for_each(|x| *x = value()),
            _ => {}
        }
    }
    enforce_relations(k, case);
}

/// Dims by name (every dim of the kernel), scalars at the middle of their
/// domain (or 0.5 without one).
pub fn case_for(k: &KernelDef, rng: &mut Rng, named: &[(&str, i64)]) -> Result<Case> {
    let info = k.info;
    let dims = info
        .dims
        .iter()
        .map(|d| named.iter().find(|(n, _)| n == d).map(|(_, v)| *v).ok_or_else(|| Error::Argument { kernel: info.name.into(), message: format!("no value given for dim {}", d) }))
        .collect::<Result<Vec<i64>>>()?;
    let scalars = info.scalars.iter().map(|(name, _)| info.domain.iter().find(|x| x.0 == *name).map(|x| (x.1 + x.2) / 2.0).unwrap_or(0.5)).collect();
    case_with(k, rng, dims, scalars)
}

/// Device tensors of a case and the launch arguments over them.
pub fn upload(dev: &Device, case: &Case) -> Result<Vec<Tensor>> {
    case.tensors.iter().map(|(s, b)| Tensor::from_buf(s, b.clone())?.to_device(dev)).collect()
}

/// Launch `k` once over `tensors` with `scalars`, in signature order.
pub fn launch_on(dev: &Device, k: &KernelDef, tensors: &mut [Tensor], scalars: &[f64]) -> Result<()> {
    with_args(k, tensors, scalars, |args| crate::launch(dev, k, args))
}

/// Tune `k` on `dev` for these tensors and scalars (`Device::tune`).
pub fn tune_on(dev: &Device, k: &KernelDef, tensors: &mut [Tensor], scalars: &[f64], reps: usize) -> Result<crate::tune::ClassTuning> {
    with_args(k, tensors, scalars, |args| dev.tune(k, args, reps))
}

/// The arguments of `k` in signature order, from its tensors and scalars.
fn with_args<R>(k: &KernelDef, tensors: &mut [Tensor], scalars: &[f64], f: impl FnOnce(&mut [Arg]) -> Result<R>) -> Result<R> {
    let mut scalars = scalars.iter();
    let mut ts = tensors.iter_mut().zip(k.info.tensors.iter());
    let mut args: Vec<Arg> = Vec::new();
    for p in k.signature {
        match p {
            SigParam::Tensor => {
                let (t, param) = ts.next().ok_or_else(|| Error::Argument { kernel: k.info.name.into(), message: "too few tensors".into() })?;
                args.push(if param.role == "input" { Arg::In(t) } else { Arg::Out(t) });
            }
            SigParam::Scalar => args.push(Arg::Scalar(*scalars.next().ok_or_else(|| Error::Argument { kernel: k.info.name.into(), message: "too few scalars".into() })?)),
        }
    }
    f(&mut args)
}

/// What one check found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub kernel: String,
    pub dims: Vec<i64>,
    pub elements: usize,
    /// Largest `|got - exact| / (abs + rel |exact|)` over every output
    /// element (<= 1 passes; NaN or an unwritten element gives infinity).
    pub worst_ratio: f64,
    /// The worst element, in words.
    pub worst: String,
    /// Elements whose error exceeded their bound.
    pub over: usize,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.worst_ratio <= 1.0
    }
}

/// Run `case` through `k` on `dev` and compare with the exact oracle,
/// within the kernel's derived bound (its tolerance where none was derived).
pub fn check(dev: &Device, k: &KernelDef, case: &Case) -> Result<Outcome> {
    let hosts: Vec<Option<&Buf>> = case.tensors.iter().map(|t| Some(&t.1)).collect();
    let broken = crate::monitor::relation_violation(k.info, &hosts, &[], &|_| false);
    if let Some(why) = &broken {
        return Err(Error::Contract { kernel: k.info.name.into(), message: format!("the test case is outside the proved bound: {}", why) });
    }
    let bounds: Vec<(&str, f64, f64)> = if k.info.tolerance_formula.is_empty() {
        k.info.bound.iter().chain(k.info.tolerance).copied().collect()
    } else {
        // A tolerance in magnitudes: the bound at this case's own dims and
        // magnitudes, as the contract monitor evaluates it at a launch.
        let ranges: Vec<Option<(f64, f64)>> = case.tensors.iter().map(|(_, b)| crate::monitor::range_of(b)).collect();
        let verdict = crate::monitor::judge(k, &crate::Bound { dims: case.dims.clone(), scalars: case.scalars.clone() }, &ranges, None);
        if let Some(why) = verdict.outside {
            return Err(Error::Contract { kernel: k.info.name.into(), message: format!("the test case is outside the proved bound: {}", why) });
        }
        verdict.bounds
    };
    check_within(dev, k, case, &bounds)
}

/// `check` against given bounds `(output, abs, rel)` (the first entry of
/// an output counts), e.g. the bound derived for this case's own dims.
pub fn check_within(dev: &Device, k: &KernelDef, case: &Case, bounds: &[(&str, f64, f64)]) -> Result<Outcome> {
    let info = k.info;
    let host: Vec<Buf> = case.tensors.iter().map(|(_, b)| b.clone()).collect();
    let want = (k.exact)(&case.dims, &case.scalars, &host).map_err(|message| Error::Cpu { kernel: info.name.into(), message })?;
    let mut tensors = upload(dev, case)?;
    launch_on(dev, k, &mut tensors, &case.scalars)?;
    dev.synchronize()?;
    let mut elements = 0;
    let mut worst_ratio: f64 = 0.0;
    let mut worst = String::from("no output elements");
    let mut over = 0;
    let outs: Vec<usize> = info.tensors.iter().enumerate().filter(|(_, t)| t.role != "input").map(|(i, _)| i).collect();
    for (o, exact) in outs.iter().zip(&want) {
        let t = &info.tensors[*o];
        let got = tensors[*o].to_f64_vec()?;
        let (abs, rel) = bounds.iter().find(|x| x.0 == t.name).map(|x| (x.1, x.2)).unwrap_or((0.0, 0.0));
        for (i, (g, e)) in got.iter().zip(exact).enumerate() {
            elements += 1;
            let bound = abs + rel * e.abs();
            let ratio = if tk_rt::within(*g, *e, abs, rel) {
                if bound > 0.0 { (g - e).abs() / bound } else { 0.0 }
            } else if g.is_finite() && bound > 0.0 {
                (g - e).abs() / bound
            } else {
                f64::INFINITY
            };
            over += (ratio > 1.0) as usize;
            if ratio > worst_ratio || elements == 1 {
                worst_ratio = worst_ratio.max(ratio);
                worst = format!("{}[{}] = {} against exact {} (bound abs {:e}, rel {:e})", t.name, i, g, e, abs, rel);
            }
        }
    }
    Ok(Outcome { kernel: info.name.into(), dims: case.dims.clone(), elements, worst_ratio, worst, over })
}
