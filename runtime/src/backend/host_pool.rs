//! Host buffers kept for reuse (issue 22: no allocation per launch in the
//! training loop). A training step on the CPU asks for the same outputs,
//! of the same dtypes and lengths, every step; allocating each afresh made
//! the kernel page every new buffer in, zeroed, on the launching thread:
//! 10% of a nano b4096 step on two threads and a third of it on sixteen,
//! where everything else runs in parallel.
//!
//! Once the CPU backend has run a kernel, a dropped host tensor gives its
//! buffer here (when large enough to be worth keeping); `Tensor::output` on
//! the CPU takes the smallest one of its dtype that holds its length (an
//! expert's rows change every step) and is not twice as large. A taken buffer holds the old tensor's values: a CPU
//! kernel writes every element of its outputs (the coverage proof; the
//! generated `tk_rt::cpu::output` never reads them), as on a GPU, whose
//! outputs are not cleared either.
//!
//! Bounded: past [`MAX_BYTES`] the oldest buffers are freed.

use crate::abi::tk_rt::Buf;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Buffers smaller than this go back to the allocator (its own free lists
/// serve them without paging).
pub const MIN_BYTES: usize = 64 << 10;
/// The most bytes the pool holds.
pub const MAX_BYTES: usize = 2 << 30;

/// A buffer's dtype and capacity in elements.
type Key = (&'static str, usize);

struct Pool {
    /// Kept buffers by dtype and capacity, each with the number of the
    /// `give` that brought it (the oldest are freed first).
    free: BTreeMap<Key, Vec<(u64, Buf)>>,
    gives: u64,
    bytes: usize,
    cap: usize,
}

/// `f` applied to the `Vec` inside any `Buf`.
macro_rules! on_vec {
    ($buf:expr, $v:ident => $e:expr) => {
        match $buf {
            Buf::F16($v) => $e,
            Buf::Bf16($v) => $e,
            Buf::F32($v) => $e,
            Buf::F64($v) => $e,
            Buf::I32($v) => $e,
            Buf::U32($v) => $e,
            Buf::I64($v) => $e,
            Buf::Bool($v) => $e,
        }
    };
}

fn capacity(buf: &Buf) -> usize {
    on_vec!(buf, v => v.capacity())
}

fn bytes_of(buf: &Buf) -> usize {
    capacity(buf) * crate::DType::parse(buf.dtype()).map_or(8, |d| d.size_bytes())
}

/// `buf` holding `len` elements, within its capacity (no allocation);
/// elements past its old length are zero.
fn fit(buf: &mut Buf, len: usize) {
    on_vec!(buf, v => v.resize(len, Default::default()))
}

impl Pool {
    fn new(cap: usize) -> Pool {
        Pool { free: BTreeMap::new(), gives: 0, bytes: 0, cap }
    }

    /// The smallest kept buffer of `dtype` that holds `len` elements
    /// without wasting more than half of itself.
    fn take(&mut self, dtype: &'static str, len: usize) -> Option<Buf> {
        let key = *self.free.range((dtype, len)..=(dtype, len.saturating_mul(2))).find(|(_, v)| !v.is_empty())?.0;
        let (_, mut buf) = self.free.get_mut(&key)?.pop()?;
        self.bytes -= bytes_of(&buf);
        fit(&mut buf, len);
        Some(buf)
    }

    fn give(&mut self, buf: Buf) {
        let bytes = bytes_of(&buf);
        if bytes < MIN_BYTES || bytes > self.cap {
            return;
        }
        self.gives += 1;
        self.free.entry((buf.dtype(), capacity(&buf))).or_default().push((self.gives, buf));
        self.bytes += bytes;
        while self.bytes > self.cap {
            let oldest = self.free.iter().filter_map(|(k, v)| v.first().map(|(n, _)| (*n, *k))).min();
            let Some((_, key)) = oldest else { break };
            let v = self.free.get_mut(&key).expect("found above");
            let (_, b) = v.remove(0);
            self.bytes -= bytes_of(&b);
        }
    }
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);
/// Whether the CPU backend has run: only then are buffers kept, so that a
/// process on a GPU does not hold its downloaded host copies here.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Keep dropped host buffers from now on (the CPU backend calls this as it
/// runs a kernel).
pub fn activate() {
    if !ACTIVE.load(Ordering::Relaxed) {
        ACTIVE.store(true, Ordering::Relaxed);
    }
}

/// A kept buffer of `dtype` (its name) holding `len` elements, if one
/// fits.
pub fn take(dtype: &'static str, len: usize) -> Option<Buf> {
    POOL.lock().ok()?.as_mut()?.take(dtype, len)
}

/// Keep `buf` for a later `take` (or free it: small, or no CPU kernel has
/// run).
pub fn give(buf: Buf) {
    if !ACTIVE.load(Ordering::Relaxed) || bytes_of(&buf) < MIN_BYTES {
        return;
    }
    if let Ok(mut pool) = POOL.lock() {
        pool.get_or_insert_with(|| Pool::new(MAX_BYTES)).give(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The pool is global: each test uses lengths no other test uses.

    #[test]
    fn a_given_buffer_is_taken_back_by_its_dtype_for_any_length_it_holds_without_waste() {
        activate();
        let n = (MIN_BYTES / 4) + 17;
        let buf = Buf::F32(vec![3.0; n]);
        let ptr = match &buf { Buf::F32(v) => v.as_ptr(), _ => unreachable!() };
        give(buf);
        assert!(take("i32", n).is_none(), "another dtype");
        assert!(take("f32", n + 1).is_none(), "a longer length");
        assert!(take("f32", n / 2 - 1).is_none(), "less than half of it");
        let back = take("f32", n - 5).expect("a shorter length it holds");
        assert!(matches!(&back, Buf::F32(v) if v.as_ptr() == ptr && v.len() == n - 5), "the same allocation, at the asked length");
        assert!(take("f32", n - 5).is_none(), "taken once");
        // Given back shorter, it still serves its whole capacity.
        give(back);
        let again = take("f32", n).expect("its capacity");
        assert!(matches!(&again, Buf::F32(v) if v.as_ptr() == ptr && v.len() == n));
    }

    #[test]
    fn small_buffers_are_not_kept() {
        activate();
        let n = MIN_BYTES / 4 - 1;
        give(Buf::F32(vec![0.0; n]));
        assert!(take("f32", n).is_none());
    }

    #[test]
    fn the_pool_frees_its_oldest_buffers_past_its_cap() {
        // A pool of three buffers' room: the first is freed by the fourth.
        let n = MIN_BYTES / 2;
        let mut pool = Pool::new(3 * MIN_BYTES);
        for v in 1..=4u16 {
            pool.give(Buf::F16(vec![half::f16::from_bits(v); n]));
        }
        assert_eq!(pool.bytes, 3 * MIN_BYTES);
        let bits = |b: Buf| match b { Buf::F16(v) => v[0].to_bits(), _ => unreachable!() };
        let mut left: Vec<u16> = std::iter::from_fn(|| pool.take("f16", n)).map(bits).collect();
        left.sort();
        assert_eq!(left, vec![2, 3, 4], "the oldest went first");
        assert_eq!(pool.bytes, 0);
        // The smallest that fits is taken first.
        let mut pool = Pool::new(8 * MIN_BYTES);
        pool.give(Buf::F16(vec![half::f16::ZERO; 3 * n]));
        pool.give(Buf::F16(vec![half::f16::ZERO; 2 * n]));
        assert!(matches!(pool.take("f16", 2 * n - 1), Some(Buf::F16(v)) if v.capacity() == 2 * n));
        pool.take("f16", 3 * n).expect("the other");
        // A buffer larger than the whole pool is not kept.
        pool.give(Buf::F16(vec![half::f16::ZERO; 9 * n]));
        assert_eq!(pool.bytes, 0);
    }
}
