//! A bump allocator over device chunks, for steps that are replayed as a
//! graph: a graph bakes in every address its kernels touch, so each replay
//! must find a step's tensors where the captured step put them. The arena
//! gives the same sequence of requests the same addresses every time it is
//! restarted.
//!
//! Two phases: a rehearsal (`Mode::Grow`) runs the step for real and adds
//! chunks as it needs them; the capture (`Mode::Fixed`) replays the same
//! requests and may not grow, because allocating while a stream is being
//! captured would record the allocation into the graph.
//!
//! Generic over the chunk type so the placement logic is tested without a
//! GPU.

use crate::{Error, Result};

/// Each placement starts on this many bytes (the widest vector load and
/// the driver's own allocation granule for small buffers).
pub const ALIGN: usize = 256;
/// The smallest chunk requested from the device.
pub const CHUNK: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Allocations go to the device directly.
    Off,
    /// Place in the chunks, adding chunks when they are full.
    Grow,
    /// Place in the existing chunks only.
    Fixed,
}

pub struct Arena<C> {
    chunks: Vec<C>,
    mode: Mode,
    /// The chunk being filled and its first free byte.
    chunk: usize,
    used: usize,
}

impl<C> Default for Arena<C> {
    fn default() -> Self {
        Arena { chunks: Vec::new(), mode: Mode::Off, chunk: 0, used: 0 }
    }
}

impl<C: Clone> Arena<C> {
    /// Start placing from the first byte of the first chunk again.
    pub fn start(&mut self, mode: Mode) {
        self.mode = mode;
        self.chunk = 0;
        self.used = 0;
    }

    pub fn stop(&mut self) {
        self.mode = Mode::Off;
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Give the chunks back (the graphs that used them must be gone).
    pub fn release(&mut self) {
        self.stop();
        self.chunks.clear();
    }

    /// Bytes held in chunks.
    pub fn capacity(&self, len: impl Fn(&C) -> usize) -> usize {
        self.chunks.iter().map(len).sum()
    }

    /// Where `bytes` bytes go: `None` when the arena is off, else a chunk
    /// and the offset in it. `fresh(n)` allocates a chunk of `n` bytes,
    /// `len` tells a chunk's size.
    pub fn place(&mut self, bytes: usize, fresh: impl FnOnce(usize) -> Result<C>, len: impl Fn(&C) -> usize) -> Result<Option<(C, usize)>> {
        if self.mode == Mode::Off {
            return Ok(None);
        }
        let need = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        while let Some(c) = self.chunks.get(self.chunk) {
            if self.used + need <= len(c) {
                let at = self.used;
                self.used += need;
                return Ok(Some((c.clone(), at)));
            }
            self.chunk += 1;
            self.used = 0;
        }
        if self.mode == Mode::Fixed {
            return Err(Error::Tensor(format!(
                "the step asked for {} more bytes while being captured than when it was rehearsed (its allocations must repeat exactly)",
                need
            )));
        }
        let c = fresh(need.max(CHUNK))?;
        self.chunks.push(c.clone());
        self.used = need;
        Ok(Some((c, 0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// A chunk: its id and size.
    type Chunk = Rc<(usize, usize)>;

    fn place(a: &mut Arena<Chunk>, bytes: usize) -> Result<Option<(usize, usize)>> {
        let id = a.chunks.len();
        Ok(a.place(bytes, |n| Ok(Rc::new((id, n))), |c| c.1)?.map(|(c, at)| (c.0, at)))
    }

    #[test]
    fn off_places_nothing() {
        let mut a = Arena::default();
        assert_eq!(place(&mut a, 10).unwrap(), None);
    }

    #[test]
    fn a_restart_repeats_every_address() {
        let mut a = Arena::default();
        let sizes = [10, 300, CHUNK - 1000, 5000, 3 * CHUNK, 1];
        a.start(Mode::Grow);
        let first: Vec<_> = sizes.iter().map(|&s| place(&mut a, s).unwrap().unwrap()).collect();
        // Aligned, within a chunk, and no two placements overlap.
        assert_eq!(first[0], (0, 0));
        assert_eq!(first[1], (0, ALIGN));
        assert_eq!(first[2], (0, 3 * ALIGN));
        assert_eq!(first[3].0, 1, "a full chunk moves on to a new one");
        assert_eq!(first[4], (2, 0), "a request larger than a chunk gets a chunk of its own size");
        assert_eq!(first[5], (3, 0), "placement never goes back to an earlier chunk");
        assert_eq!(a.capacity(|c| c.1), CHUNK + CHUNK + 3 * CHUNK + CHUNK);
        a.start(Mode::Fixed);
        let again: Vec<_> = sizes.iter().map(|&s| place(&mut a, s).unwrap().unwrap()).collect();
        assert_eq!(first, again);
    }

    #[test]
    fn fixed_mode_refuses_to_grow() {
        let mut a = Arena::default();
        a.start(Mode::Grow);
        place(&mut a, 100).unwrap();
        a.start(Mode::Fixed);
        place(&mut a, 100).unwrap();
        let err = place(&mut a, CHUNK).unwrap_err().to_string();
        assert!(err.contains("while being captured"), "{}", err);
    }
}
