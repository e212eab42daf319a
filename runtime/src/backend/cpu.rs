//! The CPU backend: the kernel's generated CPU schedule (`cpu_args`: the
//! mirror's dtypes, fmas and reduction order in a form for a CPU, or the
//! mirror itself), on host tensors, in parallel on the CPU pool's threads when
//! there is enough work.

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
    let result = (k.cpu)(&bound.dims, &bound.scalars, &mut bufs);
    // The owned buffers, in the outputs' order: borrowed inputs end here.
    let back: Vec<Buf> = bufs.into_iter().filter_map(|b| if let MirrorArg::Own(x) = b { Some(x) } else { None }).collect();
    let mut back = back.into_iter();
    for a in args.iter_mut() {
        if let Arg::Out(t) = a {
            *t.host_buf_mut().expect("checked: host tensor") = back.next().expect("one buffer per output");
        }
    }
    result.map_err(|message| Error::Cpu { kernel: k.info.name.into(), message })
}

/// The generated CPU code (mirror oracles), on rayon's threads.
pub struct Cpu;

impl super::Backend for Cpu {
    fn run(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], _observed: Option<Observed>) -> Result<()> {
        run(k, bound, args)
    }
}
