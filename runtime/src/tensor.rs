//! Tensors: a shape, a dtype and storage on the host or on a device.
//! Copies between host and device are explicit (`to_device`, `to_host`).

use crate::abi::tk_rt::Buf;
use crate::{Device, Error, Result};
use half::{bf16, f16};

/// Element types (the language's dtypes; halves are `half::f16`/`bf16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    Bf16,
    F32,
    F64,
    I32,
    U32,
    I64,
    Bool,
}

impl DType {
    /// The name the language and the kernel metadata use.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }
    pub fn parse(name: &str) -> Option<DType> {
        [DType::F16, DType::Bf16, DType::F32, DType::F64, DType::I32, DType::U32, DType::I64, DType::Bool].into_iter().find(|d| d.name() == name)
    }
    fn of(buf: &Buf) -> DType {
        DType::parse(buf.dtype()).unwrap_or(DType::F32)
    }
}

pub(crate) enum Storage {
    Host(Buf),
    #[cfg(feature = "cuda")]
    Cuda(crate::backend::cuda::DeviceBuf),
    #[cfg(feature = "hip")]
    Hip(crate::backend::hip::DeviceBuf),
}

pub struct Tensor {
    shape: Vec<usize>,
    dtype: DType,
    pub(crate) storage: Storage,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {}, {})", self.shape, self.dtype.name(), self.location())
    }
}

fn elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Tensor {
    /// A host tensor over `buf`; its length must be the shape's product.
    pub fn from_buf(shape: &[usize], buf: Buf) -> Result<Tensor> {
        if buf.len() != elements(shape) {
            return Err(Error::Tensor(format!("shape {:?} holds {} elements, the data has {}", shape, elements(shape), buf.len())));
        }
        Ok(Tensor { shape: shape.to_vec(), dtype: DType::of(&buf), storage: Storage::Host(buf) })
    }
    pub fn from_f16(shape: &[usize], data: Vec<f16>) -> Result<Tensor> {
        Tensor::from_buf(shape, Buf::F16(data))
    }
    pub fn from_bf16(shape: &[usize], data: Vec<bf16>) -> Result<Tensor> {
        Tensor::from_buf(shape, Buf::Bf16(data))
    }
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> Result<Tensor> {
        Tensor::from_buf(shape, Buf::F32(data))
    }
    pub fn from_i32(shape: &[usize], data: Vec<i32>) -> Result<Tensor> {
        Tensor::from_buf(shape, Buf::I32(data))
    }
    /// A host tensor of `dtype` from f64 values (rounded to the dtype).
    pub fn from_f64_as(shape: &[usize], dtype: DType, data: &[f64]) -> Result<Tensor> {
        let buf = match dtype {
            DType::F16 => Buf::F16(data.iter().map(|x| f16::from_f64(*x)).collect()),
            DType::Bf16 => Buf::Bf16(data.iter().map(|x| bf16::from_f64(*x)).collect()),
            DType::F32 => Buf::F32(data.iter().map(|x| *x as f32).collect()),
            DType::F64 => Buf::F64(data.to_vec()),
            DType::I32 => Buf::I32(data.iter().map(|x| *x as i32).collect()),
            DType::U32 => Buf::U32(data.iter().map(|x| *x as u32).collect()),
            DType::I64 => Buf::I64(data.iter().map(|x| *x as i64).collect()),
            DType::Bool => Buf::Bool(data.iter().map(|x| *x != 0.0).collect()),
        };
        Tensor::from_buf(shape, buf)
    }
    /// Every element `value`, on `dev`.
    pub fn full(shape: &[usize], dtype: DType, value: f64, dev: &Device) -> Result<Tensor> {
        Tensor::from_f64_as(shape, dtype, &vec![value; elements(shape)])?.to_device(dev)
    }
    pub fn zeros(shape: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
        Tensor::full(shape, dtype, 0.0, dev)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn len(&self) -> usize {
        elements(&self.shape)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype.size_bytes()
    }
    /// "host", "cuda:0", "hip:0".
    pub fn location(&self) -> String {
        match &self.storage {
            Storage::Host(_) => "host".into(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => b.location(),
            #[cfg(feature = "hip")]
            Storage::Hip(b) => b.location(),
        }
    }

    /// The same elements under another shape of the same size (no copy).
    pub fn reshape(mut self, shape: &[usize]) -> Result<Tensor> {
        if elements(shape) != self.len() {
            return Err(Error::Tensor(format!("cannot reshape {:?} ({} elements) to {:?} ({} elements)", self.shape, self.len(), shape, elements(shape))));
        }
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// Copy every row of `src` into rows `at..at + src rows` of this tensor
    /// (a row is everything after the first axis). Both on one device.
    pub fn copy_rows_from(&mut self, at: usize, src: &Tensor) -> Result<()> {
        let row = |t: &Tensor| t.shape.iter().skip(1).product::<usize>();
        let rows = src.shape.first().copied().unwrap_or(1);
        let fits = self.dtype == src.dtype && row(self) == row(src) && at + rows <= self.shape.first().copied().unwrap_or(1);
        if !fits {
            return Err(Error::Tensor(format!("cannot copy {} {:?} into rows {}.. of {} {:?}", src.dtype.name(), src.shape, at, self.dtype.name(), self.shape)));
        }
        let offset = at * row(self) * self.dtype.size_bytes();
        match (&mut self.storage, &src.storage) {
            (Storage::Host(dst), Storage::Host(s)) => {
                // In place, element-typed: no round trip through bytes.
                if crate::backend::bytes::copy_into(dst, offset / self.dtype.size_bytes(), s) {
                    Ok(())
                } else {
                    Err(Error::Tensor(format!("cannot copy {} {:?} into rows {}.. of {:?}", src.dtype.name(), src.shape, at, self.shape)))
                }
            }
            #[cfg(feature = "cuda")]
            (Storage::Cuda(dst), Storage::Cuda(s)) => dst.copy_from(offset, s, src.size_bytes()),
            #[cfg(feature = "hip")]
            (Storage::Hip(dst), Storage::Hip(s)) => dst.copy_from(offset, s, src.size_bytes()),
            #[allow(unreachable_patterns)]
            _ => Err(Error::Tensor(format!("cannot copy between {} and {}", src.location(), self.location()))),
        }
    }

    /// Does this tensor live where `dev` runs kernels?
    pub fn is_on(&self, dev: &Device) -> bool {
        match (&self.storage, dev) {
            (Storage::Host(_), Device::Cpu) => true,
            #[cfg(feature = "cuda")]
            (Storage::Cuda(b), Device::Cuda(c)) => b.ordinal() == c.ordinal(),
            #[cfg(feature = "hip")]
            (Storage::Hip(b), Device::Hip(h)) => b.ordinal() == h.ordinal(),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// A copy on `dev` (the CPU device means the host).
    pub fn to_device(&self, dev: &Device) -> Result<Tensor> {
        let host = self.to_host()?;
        let Storage::Host(buf) = &host.storage else { unreachable!("to_host returns host storage") };
        let storage = match dev {
            Device::Cpu => return Ok(host),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Storage::Cuda(c.upload(buf)?),
            #[cfg(feature = "hip")]
            Device::Hip(h) => Storage::Hip(h.upload(buf)?),
        };
        Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage })
    }

    /// A host copy (waits for the device's queued work on this tensor).
    pub fn to_host(&self) -> Result<Tensor> {
        let buf = match &self.storage {
            Storage::Host(b) => b.clone(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => b.download(self.dtype, self.len())?,
            #[cfg(feature = "hip")]
            Storage::Hip(b) => b.download(self.dtype, self.len())?,
        };
        Ok(Tensor { shape: self.shape.clone(), dtype: self.dtype, storage: Storage::Host(buf) })
    }

    /// The host buffer (copied back from a device when needed).
    pub fn to_buf(&self) -> Result<Buf> {
        match self.to_host()?.storage {
            Storage::Host(b) => Ok(b),
            #[allow(unreachable_patterns)]
            _ => unreachable!("to_host returns host storage"),
        }
    }
    /// Every element as f64 (exact for every dtype but i64 beyond 2^53).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(self.to_buf()?.to_f64())
    }
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(self.to_buf()?.to_f32())
    }

    pub(crate) fn host_buf_mut(&mut self) -> Option<&mut Buf> {
        match &mut self.storage {
            Storage::Host(b) => Some(b),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
    pub(crate) fn host_buf(&self) -> Option<&Buf> {
        match &self.storage {
            Storage::Host(b) => Some(b),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}
