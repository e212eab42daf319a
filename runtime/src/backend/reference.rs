//! The reference backend: every kernel evaluated by its exact oracle (real
//! arithmetic in f64, no roundings), on host tensors whose float elements
//! are held as f64. The same model code that trains on the CPU or a GPU runs
//! here as the f64 reference: gradient checks and `--diagnose` compare
//! against it.

use crate::abi::tk_rt::Buf;
use crate::call::{Arg, Bound, KernelDef, Observed};
use crate::tensor::DType;
use crate::{Error, Result};

pub fn run(k: &KernelDef, bound: &Bound, args: &mut [Arg]) -> Result<()> {
    let mut bufs: Vec<Buf> = Vec::new();
    for (param, a) in k.info.tensors.iter().zip(args.iter().filter(|a| a.tensor().is_some())) {
        let t = a.tensor().expect("filtered to tensors");
        let host = t.host_buf().expect("checked: host tensor");
        bufs.push(if param.role == "output" {
            // Only the dtype and length of an output are looked at.
            DType::parse(param.dtype).map(|d| crate::tensor::buf_from_f64(d, &vec![0.0; t.len()])).unwrap_or_else(|| host.clone())
        } else {
            host.clone()
        });
    }
    let outs = (k.exact)(&bound.dims, &bound.scalars, &bufs).map_err(|message| Error::Cpu { kernel: k.info.name.into(), message })?;
    let mut outs = outs.into_iter();
    for a in args.iter_mut() {
        if let Arg::Out(t) = a {
            let values = outs.next().ok_or_else(|| Error::Cpu { kernel: k.info.name.into(), message: "the exact oracle returned too few outputs".into() })?;
            let dtype = t.dtype();
            *t.host_buf_mut().expect("checked: host tensor") = reference_buf(dtype, &values);
        }
    }
    Ok(())
}

/// How the reference device holds values of `dtype`: floats as f64,
/// integers in their own type.
pub fn reference_buf(dtype: DType, values: &[f64]) -> Buf {
    match dtype {
        DType::F16 | DType::Bf16 | DType::F32 | DType::F64 => Buf::F64(values.to_vec()),
        DType::I32 => Buf::I32(values.iter().map(|v| *v as i32).collect()),
        DType::U32 => Buf::U32(values.iter().map(|v| *v as u32).collect()),
        DType::I64 => Buf::I64(values.iter().map(|v| *v as i64).collect()),
        DType::Bool => Buf::Bool(values.iter().map(|v| *v != 0.0).collect()),
    }
}

/// Every kernel by its exact oracle, in f64.
pub struct Reference;

impl super::Backend for Reference {
    fn run(&self, k: &KernelDef, bound: &Bound, args: &mut [Arg], _observed: Option<Observed>) -> Result<()> {
        run(k, bound, args)
    }
}
