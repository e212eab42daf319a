//! Tensors: a shape, a dtype and storage on the host or on a device.
//! Copies between host and device are explicit (`to_device`, `to_host`).

use crate::abi::tk_rt::Buf;
use crate::{Device, Error, Result};
use half::{bf16, f16};

/// Uploads of at most this many elements are scanned on the host for
/// the contract monitor (see `Tensor::write`).
const UPLOAD_SCANNED: usize = 4096;
/// Uploads of at most this many elements are known element by element.
const UPLOAD_EACH: usize = 16;

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
    /// What the contract monitor knows of a host tensor's values (their
    /// range, relations to other tensors' values): a tensor read by
    /// several launches between writes (a weight by the forward and the
    /// input-gradient contractions, an output gradient by three
    /// kernels) is scanned at most once, and one whose writer observed it
    /// not at all. Every method that writes host data (each takes `&mut
    /// self`, here in this file) forgets it first.
    facts: crate::monitor::HostFacts,
}

/// A host buffer outlives its tensor in the pool that `Tensor::output`
/// draws from on the CPU.
impl Drop for Tensor {
    fn drop(&mut self) {
        if let Storage::Host(buf) = &mut self.storage {
            crate::backend::host_pool::give(std::mem::take(buf));
        }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {}, {})", self.shape, self.dtype.name(), self.location())
    }
}

/// A buffer of `dtype` holding `data` (rounded to the dtype).
pub(crate) fn buf_from_f64(dtype: DType, data: &[f64]) -> Buf {
    match dtype {
        DType::F16 => Buf::F16(data.iter().map(|x| f16::from_f64(*x)).collect()),
        DType::Bf16 => Buf::Bf16(data.iter().map(|x| bf16::from_f64(*x)).collect()),
        DType::F32 => Buf::F32(data.iter().map(|x| *x as f32).collect()),
        DType::F64 => Buf::F64(data.to_vec()),
        DType::I32 => Buf::I32(data.iter().map(|x| *x as i32).collect()),
        DType::U32 => Buf::U32(data.iter().map(|x| *x as u32).collect()),
        DType::I64 => Buf::I64(data.iter().map(|x| *x as i64).collect()),
        DType::Bool => Buf::Bool(data.iter().map(|x| *x != 0.0).collect()),
    }
}

/// `n` zeros of `dtype`, allocated zeroed (every dtype's zero is all zero
/// bits): no f64 staging vector and no conversion per element (zeroing
/// host tensors that way was 5% of a nano b4096 CPU step).
pub(crate) fn buf_zeros(dtype: DType, n: usize) -> Buf {
    match dtype {
        DType::F16 => Buf::F16(vec![f16::ZERO; n]),
        DType::Bf16 => Buf::Bf16(vec![bf16::ZERO; n]),
        DType::F32 => Buf::F32(vec![0.0; n]),
        DType::F64 => Buf::F64(vec![0.0; n]),
        DType::I32 => Buf::I32(vec![0; n]),
        DType::U32 => Buf::U32(vec![0; n]),
        DType::I64 => Buf::I64(vec![0; n]),
        DType::Bool => Buf::Bool(vec![false; n]),
    }
}

fn elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Tensor {
    /// A tensor over `storage`, its range not yet known.
    fn new(shape: &[usize], dtype: DType, storage: Storage) -> Tensor {
        Tensor { shape: shape.to_vec(), dtype, storage, facts: Default::default() }
    }

    /// A host tensor over `buf`; its length must be the shape's product.
    pub fn from_buf(shape: &[usize], buf: Buf) -> Result<Tensor> {
        if buf.len() != elements(shape) {
            return Err(Error::Tensor(format!("shape {:?} holds {} elements, the data has {}", shape, elements(shape), buf.len())));
        }
        Ok(Tensor::new(shape, DType::of(&buf), Storage::Host(buf)))
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
        Tensor::from_buf(shape, buf_from_f64(dtype, data))
    }
    /// A tensor of the reference device holding real values (not rounded to
    /// `dtype`, which stays its declared type): perturbed parameters for
    /// finite differences.
    pub fn exact(shape: &[usize], dtype: DType, data: &[f64]) -> Result<Tensor> {
        if data.len() != elements(shape) {
            return Err(Error::Tensor(format!("shape {:?} holds {} elements, the data has {}", shape, elements(shape), data.len())));
        }
        Ok(Tensor::new(shape, dtype, Storage::Host(crate::backend::reference::reference_buf(dtype, data))))
    }
    /// Every element `value`, on `dev`.
    pub fn full(shape: &[usize], dtype: DType, value: f64, dev: &Device) -> Result<Tensor> {
        Tensor::from_f64_as(shape, dtype, &vec![value; elements(shape)])?.to_device(dev)
    }
    /// Storage for a kernel's output on `dev`: the kernel writes every
    /// element (its coverage is proved), so a GPU allocation is not cleared
    /// first (a memset per output was a measurable share of a small
    /// training step), nor is a CPU buffer reused from the host pool. The
    /// reference device gets zeros.
    pub fn output(shape: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
        match dev {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Ok(Tensor::new(shape, dtype, Storage::Cuda(c.uninit(elements(shape) * dtype.size_bytes())?)).written()),
            // A kept buffer of this size, else zeros (see
            // `backend::host_pool`).
            Device::Cpu => match crate::backend::host_pool::take(dtype.name(), elements(shape)) {
                Some(buf) => Tensor::from_buf(shape, buf),
                None => Tensor::zeros(shape, dtype, dev),
            },
            _ => Tensor::zeros(shape, dtype, dev),
        }
    }
    /// Zeros on `dev` that never come from a step's arena (see
    /// `backend::arena`): buffers that outlive every captured step.
    pub(crate) fn zeros_lasting(shape: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
        match dev {
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Ok(Tensor::new(shape, dtype, Storage::Cuda(c.zeros_lasting(elements(shape) * dtype.size_bytes())?)).written().zeroed()),
            _ => Tensor::zeros(shape, dtype, dev),
        }
    }
    pub fn zeros(shape: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
        match dev {
            // Zeroed on the device: no host buffer crosses the bus (the
            // trainer allocates its activations this way every step).
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Ok(Tensor::new(shape, dtype, Storage::Cuda(c.zeros(elements(shape) * dtype.size_bytes())?)).written().zeroed()),
            // The CPU holds the dtype itself: the zeros are its storage.
            Device::Cpu => {
                let mut t = Tensor::from_buf(shape, buf_zeros(dtype, elements(shape)))?;
                t.zeros_known();
                Ok(t)
            }
            _ => Tensor::from_buf(shape, buf_zeros(dtype, elements(shape)))?.to_device(dev),
        }
    }

    /// The device bytes this tensor covers (`None` on the host).
    pub(crate) fn device_span(&self) -> Option<crate::monitor::MemSpan> {
        match &self.storage {
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => Some(b.span()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// New or rewritten device bytes: what the contract monitor knew about
    /// them is gone (see `monitor::known`).
    fn written(self) -> Tensor {
        crate::monitor::forget(self.device_span());
        self
    }
    /// Device bytes just zeroed: the contract monitor knows their range.
    fn zeroed(self) -> Tensor {
        crate::monitor::filled(&self, 0.0, 0.0);
        self
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
        self.set_shape(shape)?;
        Ok(self)
    }
    /// `reshape` in place.
    pub fn set_shape(&mut self, shape: &[usize]) -> Result<()> {
        if elements(shape) != self.len() {
            return Err(Error::Tensor(format!("cannot reshape {:?} ({} elements) to {:?} ({} elements)", self.shape, self.len(), shape, elements(shape))));
        }
        self.shape = shape.to_vec();
        Ok(())
    }

    /// Copy every row of `src` into rows `at..at + src rows` of this tensor
    /// (a row is everything after the first axis). Both on one device.
    pub fn copy_rows_from(&mut self, at: usize, src: &Tensor) -> Result<()> {
        let row = |t: &Tensor| t.shape.iter().skip(1).product::<usize>();
        if row(self) != row(src) {
            return Err(Error::Tensor(format!("cannot copy rows of {:?} into rows of {:?}: the rows differ", src.shape, self.shape)));
        }
        self.copy_elements(at * row(self), src, 0, src.len())
    }

    /// Rows `at..at + n` of this tensor, as a new tensor on `dev`.
    pub fn rows(&self, at: usize, n: usize, dev: &Device) -> Result<Tensor> {
        let row: usize = self.shape.iter().skip(1).product();
        let mut shape = self.shape.clone();
        if shape.is_empty() || at + n > shape[0] {
            return Err(Error::Tensor(format!("rows {}..{} of {:?} are out of range", at, at + n, self.shape)));
        }
        shape[0] = n;
        // Every element is copied in: no need to clear it first.
        let mut out = Tensor::output(&shape, self.dtype, dev)?;
        out.copy_elements(0, self, at * row, n * row)?;
        Ok(out)
    }

    /// Copy `len` elements of `src` from element `from` to element `at` of
    /// this tensor (flat, row-major). Same dtype, same device.
    pub fn copy_elements(&mut self, at: usize, src: &Tensor, from: usize, len: usize) -> Result<()> {
        let fits = self.dtype == src.dtype && at + len <= self.len() && from + len <= src.len();
        let refuse = || Error::Tensor(format!("cannot copy {} elements of {} {:?} from {} into {} {:?} at {}", len, src.dtype.name(), src.shape, from, self.dtype.name(), self.shape, at));
        if !fits {
            return Err(refuse());
        }
        let size = self.dtype.size_bytes();
        crate::monitor::forget(self.device_span());
        let n = self.len();
        match (&mut self.storage, &src.storage) {
            // While the monitor is on, the range of what is copied is
            // found by the copy (see `monitor::copy_with_range`): the
            // whole tensor's, or a part's, kept with the others'.
            (Storage::Host(dst), Storage::Host(s)) if crate::monitor::mode() != crate::monitor::Mode::Off => {
                // A whole source whose range is known (a layer's gradient,
                // observed by its kernel) needs no fold.
                let known = Some(src.facts.known_range()).filter(|_| from == 0 && len == src.len());
                let range = match known {
                    Some(r) => crate::backend::bytes::copy_into(dst, at, s, from, len).then_some(r),
                    None => crate::monitor::copy_with_range(dst, at, s, from, len),
                };
                match range {
                    Some(Some(range)) if at == 0 && len == n => self.facts.observed(range),
                    Some(range) => self.facts.written_part(at, len, n, range),
                    None => self.facts.written(),
                }
                range.map(|_| ()).ok_or_else(refuse)
            }
            // In place, element-typed: no round trip through bytes.
            (Storage::Host(dst), Storage::Host(s)) => {
                self.facts.written();
                crate::backend::bytes::copy_into(dst, at, s, from, len).then_some(()).ok_or_else(refuse)
            }
            #[cfg(feature = "cuda")]
            (Storage::Cuda(dst), Storage::Cuda(s)) => dst.copy_from(at * size, s, from * size, len * size),
            #[cfg(feature = "hip")]
            (Storage::Hip(dst), Storage::Hip(s)) => dst.copy_from(at * size, s, from * size, len * size),
            #[allow(unreachable_patterns)]
            _ => Err(Error::Tensor(format!("cannot copy between {} and {}", src.location(), self.location()))),
        }
    }

    /// `shape`'s worth of this tensor's elements from element `at` on, as a
    /// tensor sharing its memory: kernels that write the view write this
    /// tensor. Device tensors only (host tensors own their buffers; the
    /// host copies instead, see `Device::has_views`).
    pub fn view(&self, at: usize, shape: &[usize]) -> Result<Tensor> {
        let len = elements(shape);
        if at + len > self.len() {
            return Err(Error::Tensor(format!("a view of elements {}..{} of {:?}", at, at + len, self.shape)));
        }
        #[cfg(feature = "cuda")]
        if let Storage::Cuda(b) = &self.storage {
            let size = self.dtype.size_bytes();
            return Ok(Tensor::new(shape, self.dtype, Storage::Cuda(b.view(at * size, len * size)?)));
        }
        Err(Error::Tensor(format!("views of {} tensors are not supported (only CUDA tensors share memory)", self.location())))
    }

    /// Overwrite every element with `src`'s (a host tensor of the same
    /// dtype and length), keeping this tensor's storage and address.
    pub fn write(&mut self, src: &Tensor) -> Result<()> {
        let Storage::Host(buf) = &src.storage else { return Err(Error::Tensor(format!("write takes a host tensor, not one on {}", src.location()))) };
        if src.dtype != self.dtype || src.len() != self.len() {
            return Err(Error::Tensor(format!("cannot write {} {:?} into {} {:?}", src.dtype.name(), src.shape, self.dtype.name(), self.shape)));
        }
        crate::monitor::forget(self.device_span());
        self.facts.written();
        match &mut self.storage {
            Storage::Host(dst) => {
                *dst = buf.clone();
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Storage::Cuda(dst) => {
                dst.write(&crate::backend::bytes::to_bytes(buf))?;
                // A small upload is known without a probe: a few values one
                // by one (the trainer's learning rate and bias corrections
                // are one upload read through views, each judged by its own
                // value), up to UPLOAD_SCANNED by the range the host scans.
                // A large one (a batch) is left to the probes: scanning it
                // would hold the host at the step's start.
                if src.len() <= UPLOAD_EACH {
                    crate::monitor::filled_each(self, &buf.to_f64());
                } else if src.len() <= UPLOAD_SCANNED {
                    if let Some((lo, hi)) = src.host_range() {
                        crate::monitor::filled(self, lo, hi);
                    }
                }
                Ok(())
            }
            #[cfg(feature = "hip")]
            Storage::Hip(_) => Err(Error::Tensor("writing into a HIP tensor in place is not supported".into())),
        }
    }

    /// Every element zero, in place.
    pub fn fill_zero(&mut self) -> Result<()> {
        crate::monitor::forget(self.device_span());
        self.facts.written();
        match &mut self.storage {
            Storage::Host(b) => {
                *b = buf_zeros(DType::of(b), b.len());
                self.zeros_known();
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => {
                b.clear()?;
                crate::monitor::filled(self, 0.0, 0.0);
                Ok(())
            }
            #[cfg(feature = "hip")]
            Storage::Hip(_) => Err(Error::Tensor("clearing a HIP tensor in place is not supported".into())),
        }
    }

    /// Does this tensor live where `dev` runs kernels?
    pub fn is_on(&self, dev: &Device) -> bool {
        match (&self.storage, dev) {
            (Storage::Host(_), Device::Cpu | Device::Reference) => true,
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
        let mut host = self.to_host()?;
        let Storage::Host(buf) = &mut host.storage else { unreachable!("to_host returns host storage") };
        // The reference device holds floats as f64; every other device holds
        // the tensor's own dtype.
        let want = match dev {
            Device::Reference => crate::backend::reference::reference_buf(self.dtype, &[]).dtype(),
            _ => self.dtype.name(),
        };
        if buf.dtype() != want {
            *buf = match dev {
                Device::Reference => crate::backend::reference::reference_buf(self.dtype, &buf.to_f64()),
                _ => buf_from_f64(self.dtype, &buf.to_f64()),
            };
        }
        let Storage::Host(buf) = &host.storage else { unreachable!("to_host returns host storage") };
        let storage = match dev {
            Device::Cpu | Device::Reference => return Ok(host),
            #[cfg(feature = "cuda")]
            Device::Cuda(c) => Storage::Cuda(c.upload(buf)?),
            #[cfg(feature = "hip")]
            Device::Hip(h) => Storage::Hip(h.upload(buf)?),
        };
        Ok(Tensor::new(&self.shape, self.dtype, storage).written())
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
        Ok(Tensor::new(&self.shape, self.dtype, Storage::Host(buf)))
    }

    /// Host buffers of several tensors, waiting for the device once where
    /// the backend can (CUDA: one synchronisation for all of them).
    pub fn read_all(tensors: &[&Tensor]) -> Result<Vec<Buf>> {
        #[cfg(feature = "cuda")]
        {
            let bufs: Option<Vec<_>> = tensors
                .iter()
                .map(|t| match &t.storage {
                    Storage::Cuda(b) => Some((b, t.dtype, t.len())),
                    #[allow(unreachable_patterns)]
                    _ => None,
                })
                .collect();
            if let Some(bufs) = bufs.filter(|b| !b.is_empty()) {
                return crate::backend::cuda::DeviceBuf::read_many(&bufs);
            }
        }
        tensors.iter().map(|t| t.to_buf()).collect()
    }

    /// The host buffer (copied back from a device when needed).
    pub fn to_buf(&self) -> Result<Buf> {
        match &mut self.to_host()?.storage {
            Storage::Host(b) => Ok(std::mem::take(b)),
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

    /// The host data, to write: what the monitor knew of it is gone.
    pub(crate) fn host_buf_mut(&mut self) -> Option<&mut Buf> {
        self.facts.written();
        match &mut self.storage {
            Storage::Host(b) => Some(b),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
    /// A float host tensor just zeroed: the monitor knows its range (and
    /// the parts' ranges that later copies into it leave standing).
    fn zeros_known(&mut self) {
        if matches!(self.dtype, DType::F16 | DType::Bf16 | DType::F32 | DType::F64) {
            self.facts.observed((0.0, 0.0));
        }
    }
    /// `(min, max)` of a host tensor's values (`monitor::range_of`),
    /// scanned at the first call after a write; `None` for a device
    /// tensor or integer data.
    pub(crate) fn host_range(&self) -> Option<(f64, f64)> {
        self.facts.range(self.host_buf()?)
    }
    /// What the monitor knows of a host tensor's values.
    pub(crate) fn facts(&self) -> &crate::monitor::HostFacts {
        &self.facts
    }
    /// What the monitor knows of a host tensor's values, to add what the
    /// writer observed (after the write: a write forgets it all).
    pub(crate) fn facts_mut(&mut self) -> &mut crate::monitor::HostFacts {
        &mut self.facts
    }
    pub(crate) fn host_buf(&self) -> Option<&Buf> {
        match &self.storage {
            Storage::Host(b) => Some(b),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16s(v: &[f32]) -> Tensor {
        Tensor::from_f16(&[v.len()], v.iter().map(|&x| f16::from_f32(x)).collect()).unwrap()
    }

    /// A CPU output drawn from the host pool holds a dropped tensor's
    /// values until the kernel writes it; the kernel writes every element,
    /// so the result is the one a zeroed buffer gives.
    #[test]
    fn a_cpu_output_reuses_a_dropped_buffer_and_the_kernel_overwrites_all_of_it() {
        // A length no other test uses (the pool is global).
        let n = 40_013;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32) * 8.0 - 4.0).collect();
        let x = f16s(&x);
        let mut fresh = Tensor::zeros(&[n], DType::F16, &Device::Cpu).unwrap();
        crate::kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut fresh).unwrap();
        let address = |t: &Tensor| match t.host_buf() {
            Some(Buf::F16(v)) => v.as_ptr(),
            _ => panic!("a host f16 tensor"),
        };
        let stale = f16s(&vec![f32::NAN; n]);
        let ptr = address(&stale);
        drop(stale);
        let mut reused = Tensor::output(&[n], DType::F16, &Device::Cpu).unwrap();
        assert_eq!(address(&reused), ptr, "the dropped tensor's allocation");
        crate::kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut reused).unwrap();
        assert_eq!(reused.host_buf().unwrap(), fresh.host_buf().unwrap());
    }

    /// The monitor's remembered range follows every way host data is
    /// written: a stale one would judge a launch by values it no longer
    /// reads.
    #[test]
    fn a_host_tensors_range_is_rescanned_after_every_write() {
        let mut t = f16s(&[1.0, 2.0, 3.0]);
        assert_eq!(t.host_range(), Some((1.0, 3.0)));
        t.fill_zero().unwrap();
        assert_eq!(t.host_range(), Some((0.0, 0.0)));
        t.write(&f16s(&[-5.0, 1.0, 2.0])).unwrap();
        assert_eq!(t.host_range(), Some((-5.0, 2.0)));
        t.copy_elements(0, &f16s(&[9.0]), 0, 1).unwrap();
        assert_eq!(t.host_range(), Some((1.0, 9.0)));
        t.copy_rows_from(1, &f16s(&[-7.0])).unwrap();
        assert_eq!(t.host_range(), Some((-7.0, 9.0)));
        // A copy over the whole tensor finds the range as it copies (a
        // slice of a larger source: the slice's range, not the source's).
        let big = f16s(&[100.0, 4.0, -2.0, 1.0, -100.0]);
        t.copy_elements(0, &big, 1, 3).unwrap();
        assert_eq!(t.host_range(), Some((-2.0, 4.0)));
        assert_eq!(t.host_range(), crate::monitor::range_of(t.host_buf().unwrap()), "as a scan finds it");
        let mut long = Tensor::zeros(&[300_000], DType::F32, &Device::Cpu).unwrap();
        let mut v: Vec<f32> = (0..300_001).map(|i| (i % 977) as f32 - 400.0).collect();
        v[123_457] = -1e6;
        long.copy_elements(0, &Tensor::from_f32(&[v.len()], v).unwrap(), 1, 300_000).unwrap();
        assert_eq!(long.host_range(), Some((-1e6, 576.0)), "pieces copied in parallel");
        v = vec![1.0; 300_000];
        v[7] = f32::NAN;
        long.copy_elements(0, &Tensor::from_f32(&[v.len()], v).unwrap(), 0, 300_000).unwrap();
        assert!(long.host_range().is_some_and(|(lo, hi)| lo.is_nan() && hi.is_nan()), "a NaN copied");
        // Parts copied into zeros (the packed gradient): the range is the
        // parts' and the zeros' between them; a part rewritten drops the
        // old part's values; a kernel's write forgets them all.
        let mut packed = Tensor::zeros(&[10], DType::F16, &Device::Cpu).unwrap();
        packed.copy_elements(1, &f16s(&[5.0, 6.0]), 0, 2).unwrap();
        packed.copy_elements(6, &f16s(&[-3.0, 2.0]), 0, 2).unwrap();
        assert_eq!(packed.host_range(), Some((-3.0, 6.0)));
        packed.copy_elements(1, &f16s(&[1.0, 1.5]), 0, 2).unwrap();
        assert_eq!(packed.host_range(), Some((-3.0, 2.0)), "the old part's 6 is gone");
        packed.copy_elements(0, &f16s(&[7.0, 8.0]), 0, 2).unwrap();
        assert_eq!(packed.host_range(), Some((-3.0, 8.0)), "a write over the edge of a part: the rest keeps the part's range");
        assert_eq!(packed.host_range(), crate::monitor::range_of(packed.host_buf().unwrap()));
        let x = f16s(&[0.0; 10]);
        crate::kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut packed).unwrap();
        packed.copy_elements(3, &f16s(&[9.0]), 0, 1).unwrap();
        assert_eq!(packed.host_range(), Some((0.0, 9.0)), "the kernel's observed zeros around the part");
        // A kernel's output (written through `host_buf_mut`).
        let x = f16s(&[0.0, 0.0, 0.0]);
        crate::kernels::gelu::gelu_fwd::launch(&Device::Cpu, &x, &mut t).unwrap();
        assert_eq!(t.host_range(), Some((0.0, 0.0)));
        // A reshape keeps the data, and the range.
        let t = t.reshape(&[3, 1]).unwrap();
        assert_eq!(t.host_range(), Some((0.0, 0.0)));
    }
}
