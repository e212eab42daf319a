//! The CPU backend: the kernel's generated mirror code (its dtypes, fmas
//! and reduction order), on host tensors; its statement loops run in
//! parallel on rayon's threads when there is enough work.

use crate::abi::tk_rt::Buf;
use crate::launch::{Arg, Bound, KernelDef};
use crate::{Error, Result};

/// The generated code's parallel loops run on rayon's pool.
fn rayon_executor(chunks: usize, job: &(dyn Fn(usize) + Sync)) {
    use rayon::prelude::*;
    (0..chunks).into_par_iter().for_each(job);
}

pub fn run(k: &KernelDef, bound: &Bound, args: &mut [Arg]) -> Result<()> {
    crate::abi::tk_rt::set_executor(&rayon_executor);
    // Inputs are copied (the mirror takes every tensor as an owned buffer);
    // outputs and inouts are moved in and moved back.
    let mut bufs: Vec<Buf> = Vec::new();
    for a in args.iter_mut() {
        match a {
            Arg::In(t) => bufs.push(t.host_buf().expect("checked: host tensor").clone()),
            Arg::Out(t) => bufs.push(std::mem::replace(t.host_buf_mut().expect("checked: host tensor"), Buf::F32(Vec::new()))),
            Arg::Scalar(_) => {}
        }
    }
    let result = (k.mirror)(&bound.dims, &bound.scalars, &mut bufs);
    let mut it = bufs.into_iter();
    for a in args.iter_mut() {
        match a {
            Arg::In(_) => {
                it.next();
            }
            Arg::Out(t) => *t.host_buf_mut().expect("checked: host tensor") = it.next().expect("one buffer per tensor"),
            Arg::Scalar(_) => {}
        }
    }
    result.map_err(|message| Error::Cpu { kernel: k.info.name.into(), message })
}
