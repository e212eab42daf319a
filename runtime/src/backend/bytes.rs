//! Host buffers as little-endian bytes and back (device copies move bytes).

use crate::abi::tk_rt::Buf;
use crate::DType;

pub fn to_bytes(buf: &Buf) -> Vec<u8> {
    fn flat<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|x| f(*x)).collect()
    }
    match buf {
        Buf::F16(v) => flat(v, |x| x.to_le_bytes()),
        Buf::Bf16(v) => flat(v, |x| x.to_le_bytes()),
        Buf::F32(v) => flat(v, |x| x.to_le_bytes()),
        Buf::F64(v) => flat(v, |x| x.to_le_bytes()),
        Buf::I32(v) => flat(v, |x| x.to_le_bytes()),
        Buf::U32(v) => flat(v, |x| x.to_le_bytes()),
        Buf::I64(v) => flat(v, |x| x.to_le_bytes()),
        Buf::Bool(v) => v.iter().map(|b| *b as u8).collect(),
    }
}

pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Buf {
    fn chunks<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N).map(|c| f(c.try_into().expect("exact chunks"))).collect()
    }
    match dtype {
        DType::F16 => Buf::F16(chunks(bytes, half::f16::from_le_bytes)),
        DType::Bf16 => Buf::Bf16(chunks(bytes, half::bf16::from_le_bytes)),
        DType::F32 => Buf::F32(chunks(bytes, f32::from_le_bytes)),
        DType::F64 => Buf::F64(chunks(bytes, f64::from_le_bytes)),
        DType::I32 => Buf::I32(chunks(bytes, i32::from_le_bytes)),
        DType::U32 => Buf::U32(chunks(bytes, u32::from_le_bytes)),
        DType::I64 => Buf::I64(chunks(bytes, i64::from_le_bytes)),
        DType::Bool => Buf::Bool(bytes.iter().map(|b| *b != 0).collect()),
    }
}

/// The first `len` elements of `dtype` in a device buffer's bytes (device
/// allocations may be larger than their tensor, e.g. one byte when empty).
pub fn decode(dtype: DType, len: usize, bytes: &[u8]) -> Buf {
    from_bytes(dtype, &bytes[..(len * dtype.size_bytes()).min(bytes.len())])
}

/// Copy every element of `src` into `dst` from element `at` on; both of one
/// dtype (checked by the caller), `src` fitting.
///
/// Large copies run in pieces on rayon's threads: the CPU trainer copies
/// every gradient into the packed one and the updated parameters back out
/// each step (tiny: 85M halves each way), which on one thread was a third
/// of a tiny step on sixteen.
pub fn copy_into(dst: &mut Buf, at: usize, src: &Buf, from: usize, len: usize) -> bool {
    fn put<T: Copy + Send + Sync>(d: &mut [T], at: usize, s: &[T], from: usize, len: usize) -> bool {
        /// Elements a piece (128 KiB of halves); copies of fewer than four
        /// pieces stay on the calling thread.
        const PIECE: usize = 1 << 16;
        match (d.get_mut(at..at + len), s.get(from..from + len)) {
            (Some(range), Some(s)) if len >= 4 * PIECE => {
                use rayon::prelude::*;
                range.par_chunks_mut(PIECE).zip(s.par_chunks(PIECE)).for_each(|(d, s)| d.copy_from_slice(s));
                true
            }
            (Some(range), Some(s)) => {
                range.copy_from_slice(s);
                true
            }
            _ => false,
        }
    }
    match (dst, src) {
        (Buf::F16(d), Buf::F16(s)) => put(d, at, s, from, len),
        (Buf::Bf16(d), Buf::Bf16(s)) => put(d, at, s, from, len),
        (Buf::F32(d), Buf::F32(s)) => put(d, at, s, from, len),
        (Buf::F64(d), Buf::F64(s)) => put(d, at, s, from, len),
        (Buf::I32(d), Buf::I32(s)) => put(d, at, s, from, len),
        (Buf::U32(d), Buf::U32(s)) => put(d, at, s, from, len),
        (Buf::I64(d), Buf::I64(s)) => put(d, at, s, from, len),
        (Buf::Bool(d), Buf::Bool(s)) => put(d, at, s, from, len),
        _ => false,
    }
}

/// A tensor map's 128 bytes (CUDA's opaque `CUtensorMap`), aligned as
/// the kernel's parameter is.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapBytes(pub [u64; 16]);

/// One kernel argument by value, as the kernel's signature declares it.
#[derive(Clone, Copy, Debug)]
pub enum ArgValue {
    Ptr(u64),
    TensorMap(TensorMapBytes),
    F32(f32),
    F64(f64),
    I32(i32),
    U32(u32),
    I64(i64),
    U8(u8),
}

impl ArgValue {
    /// A scalar of dtype `dtype` from its f64 carrier.
    pub fn scalar(dtype: &str, v: f64) -> ArgValue {
        match dtype {
            "f64" => ArgValue::F64(v),
            "i32" => ArgValue::I32(v as i32),
            "u32" => ArgValue::U32(v as u32),
            "i64" => ArgValue::I64(v as i64),
            "bool" => ArgValue::U8((v != 0.0) as u8),
            _ => ArgValue::F32(v as f32),
        }
    }
    /// A dim as the kernel's index type.
    pub fn dim(bits: u32, v: i64) -> ArgValue {
        if bits == 32 {
            ArgValue::I32(v as i32)
        } else {
            ArgValue::I64(v)
        }
    }
    /// The address of the value, as the driver's launch call wants it.
    pub fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        match self {
            ArgValue::Ptr(x) => x as *mut u64 as *mut _,
            ArgValue::TensorMap(x) => x as *mut TensorMapBytes as *mut _,
            ArgValue::F32(x) => x as *mut f32 as *mut _,
            ArgValue::F64(x) => x as *mut f64 as *mut _,
            ArgValue::I32(x) => x as *mut i32 as *mut _,
            ArgValue::U32(x) => x as *mut u32 as *mut _,
            ArgValue::I64(x) => x as *mut i64 as *mut _,
            ArgValue::U8(x) => x as *mut u8 as *mut _,
        }
    }
}

/// The argument values of a launch, in signature order; `ptr(i)` gives the
/// device address of tensor `i`.
pub fn launch_values(k: &crate::KernelDef, index_bits: u32, bound: &crate::call::Bound, ptr: impl Fn(usize) -> u64) -> Vec<ArgValue> {
    use crate::abi::tk_info::LaunchParam;
    k.params
        .iter()
        .map(|p| match *p {
            LaunchParam::Tensor(i) => ArgValue::Ptr(ptr(i)),
            LaunchParam::Scalar(i, dtype) => ArgValue::scalar(dtype, bound.scalars[i]),
            LaunchParam::Dim(i) => ArgValue::dim(index_bits, bound.dims[i]),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy large enough to run in pieces lands each element where a
    /// plain copy puts it, and touches nothing outside its range.
    #[test]
    fn a_large_copy_in_pieces_is_the_plain_copy() {
        let n = (1 << 18) + 12_345;
        let src = Buf::F32((0..n + 7).map(|i| i as f32).collect());
        let mut dst = Buf::F32(vec![-1.0; n + 100]);
        assert!(copy_into(&mut dst, 50, &src, 7, n));
        let Buf::F32(d) = &dst else { unreachable!() };
        assert!(d[..50].iter().all(|&x| x == -1.0));
        assert!((0..n).all(|i| d[50 + i] == (7 + i) as f32));
        assert!(d[50 + n..].iter().all(|&x| x == -1.0));
        // Out of range either side is refused.
        assert!(!copy_into(&mut dst, 101, &src, 7, n));
        assert!(!copy_into(&mut dst, 0, &src, 8, n));
    }
}
