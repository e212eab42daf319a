//! The CPU backend: the kernel's generated CPU schedule (`cpu_args`: the
//! mirror's dtypes, fmas and reduction order in a form for a CPU, or the
//! mirror itself), on host tensors, in parallel on the CPU pool's threads when
//! there is enough work.

use crate::abi::tk_rt::cpu::Watch;
use crate::abi::tk_rt::{Arg as MirrorArg, Buf};
use crate::call::{Arg, Bound, KernelDef, Observed};
use crate::{Error, Result};

pub fn run(k: &KernelDef, bound: &Bound, args: &mut [Arg]) -> Result<()> {
    // The generated code's parallel loops run on the CPU pool; dropped
    // host buffers are kept for the outputs of later launches.
    super::cpu_pool::install();
    super::host_pool::activate();
    // Inputs are borrowed; outputs and inouts are moved in and moved back.
    let mut owned: Vec<Buf> = Vec::new();
    for a in args.iter_mut() {
        if let Arg::Out(t) = a {
            owned.push(std::mem::take(t.host_buf_mut().expect("checked: host tensor")));
        }
    }
    let mut owned_in = owned.into_iter();
    let mut bufs: Vec<MirrorArg<'_>> = Vec::new();
    for a in args.iter() {
        match a {
            Arg::In(t) => bufs.push(MirrorArg::In(t.host_buf().expect("checked: host tensor"))),
            Arg::Out(_) => bufs.push(MirrorArg::Own(owned_in.next().expect("one buffer per output"))),
            Arg::Scalar(_) => {}
        }
    }
    // Observed for the contract monitor while it is on (its next launches
    // then find what they read known, not scanned).
    let watching = crate::monitor::mode() != crate::monitor::Mode::Off;
    let watch = if watching { Watch::new(k.info.tensors.len(), k.info.relations.len()) } else { Watch::off() };
    let result = (k.cpu_watched)(&bound.dims, &bound.scalars, &mut bufs, &watch);
    // The owned buffers, in the outputs' order: borrowed inputs end here.
    let back: Vec<Buf> = bufs.into_iter().filter_map(|b| if let MirrorArg::Own(x) = b { Some(x) } else { None }).collect();
    let mut back = back.into_iter();
    for a in args.iter_mut() {
        if let Arg::Out(t) = a {
            *t.host_buf_mut().expect("checked: host tensor") = back.next().expect("one buffer per output");
        }
    }
    result.map_err(|message| Error::Cpu { kernel: k.info.name.into(), message })?;
    if watching {
        record_observations(k, args, &watch);
    }
    Ok(())
}

/// What a finished call observed, onto its outputs: each observed
/// output's range (the fold's extremes in the output's dtype: rounding is
/// monotone, so they are the stored extremes), and each relation that
/// held on every pair stored, against its partner's data as it is now.
fn record_observations(k: &KernelDef, args: &mut [Arg], watch: &Watch) {
    let mut tensors: Vec<Option<&mut crate::Tensor>> = args.iter_mut().filter_map(|a| match a {
        Arg::Out(t) => Some(Some(&mut **t)),
        Arg::In(_) => Some(None),
        Arg::Scalar(_) => None,
    }).collect();
    for (i, t) in tensors.iter_mut().enumerate() {
        let (Some(t), Some(fold)) = (t, watch.observed(i)) else { continue };
        let (Some((lo, hi)), Some(buf)) = (fold.range(), t.host_buf()) else { continue };
        let stored = (buf.store_f64(lo as f64), buf.store_f64(hi as f64));
        t.facts_mut().observed(stored);
    }
    let judge = crate::monitor::Judge::of(k.info);
    for r in 0..k.info.relations.len() {
        let (Some(true), Some((sq, b, factor))) = (watch.held(r), judge.relation(r)) else { continue };
        let Some(partner) = tensors.get(b).and_then(|t| t.as_ref()).map(|t| t.facts().version()) else { continue };
        if let Some(Some(t)) = tensors.get_mut(sq) {
            t.facts_mut().held_against(partner, factor);
        }
    }
}

/// The generated CPU code (mirror oracles), on rayon's threads.
pub struct Cpu;

impl super::Backend for Cpu {
    fn run(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], _observed: Option<Observed>) -> Result<()> {
        run(k, bound, args)
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::optim::adamw;
    use crate::{Device, Tensor};

    /// AdamW's launch records that `m * m <= 64 v` held on the moments it
    /// stored, against `v` as it stored it; a later write of `v` ends the
    /// fact, and the observed ranges are those of the stored data.
    #[test]
    fn a_launch_records_what_it_observed_until_the_next_write() {
        let dev = Device::Cpu;
        let n = 3000;
        let f16s = |x: f32| Tensor::from_f16(&[1, n], vec![half::f16::from_f32(x); n]).unwrap();
        let f32s = |shape: &[usize], x: f32| Tensor::from_f32(shape, vec![x; shape.iter().product()]).unwrap();
        let (mut theta, mut m, mut v) = (f16s(0.5), f32s(&[1, n], 0.01), f32s(&[1, n], 0.001));
        let (g, lrs) = (f16s(0.25), f32s(&[1], 1.0));
        let (nsq, lr, bc1, bc2) = (f32s(&[], 0.0625 * n as f32), f32s(&[], 1e-3), f32s(&[], 10.0), f32s(&[], 1000.0));
        adamw::launch(&dev, &mut theta, &mut m, &mut v, &g, &lrs, &nsq, &lr, &bc1, &bc2, 0.9, 0.999, 1e-8, 0.01, 1.0, 1.0).unwrap();
        assert!(m.facts().holds_against(v.facts().version(), 64.0), "the relation held on what was stored");
        for t in [&theta, &m, &v] {
            let scanned = crate::monitor::range_of(t.host_buf().unwrap());
            assert_eq!(t.host_range(), scanned, "the observed range is the stored data's");
        }
        assert!(!m.facts().holds_against(v.facts().version(), 32.0), "only the factor checked");
        v.fill_zero().unwrap();
        assert!(!m.facts().holds_against(v.facts().version(), 64.0), "v written since: the fact is gone");
    }
}
