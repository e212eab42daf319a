//! The CUDA backend's side of `crate::timeline`: timing events around each
//! launch on the main stream, host stamps around each wait for the device.
//! Off, it costs a launch one relaxed atomic load. Events come from a pool
//! kept across recordings (creating one costs about as much as a launch).

use super::cuda::device_err;
use crate::timeline::{Span, Timeline};
use crate::{Error, Result};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One recorded launch: its kernel, its two events (pool indices), the
/// host waits since the previous launch, and its step.
struct Launch {
    kernel: &'static str,
    began: usize,
    ended: usize,
    after_waits: Vec<&'static str>,
    /// Host time from the last wait's return to this launch's queueing.
    host_after_wait: Option<std::time::Duration>,
    step: usize,
}

#[derive(Default)]
struct Recording {
    pool: Vec<CudaEvent>,
    used: usize,
    launches: Vec<Launch>,
    /// Host waits since the last recorded launch, and when the last
    /// returned.
    waits: Vec<&'static str>,
    wait_returned: Option<std::time::Instant>,
    marks: Vec<String>,
}

#[derive(Default)]
pub(crate) struct Recorder {
    on: AtomicBool,
    recording: Mutex<Recording>,
}

impl Recording {
    /// A pool event recorded on `stream` now.
    fn stamp(&mut self, ctx: &Arc<CudaContext>, stream: &CudaStream) -> Result<usize> {
        if self.used == self.pool.len() {
            self.pool.push(ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(device_err("cuEventCreate"))?);
        }
        self.pool[self.used].record(stream).map_err(device_err("cuEventRecord"))?;
        self.used += 1;
        Ok(self.used - 1)
    }
}

impl Recorder {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Recording>> {
        self.recording.lock().map_err(|_| Error::Tensor("the timeline's lock is poisoned".into()))
    }

    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Start recording from nothing (the event pool kept).
    pub(crate) fn start(&self) -> Result<()> {
        let mut r = self.lock()?;
        r.used = 0;
        r.launches.clear();
        r.waits.clear();
        r.wait_returned = None;
        r.marks.clear();
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Launches after this belong to a new step named `label`.
    pub(crate) fn mark(&self, label: &str) -> Result<()> {
        if self.on() {
            self.lock()?.marks.push(label.to_string());
        }
        Ok(())
    }

    /// Run `launch` between two events on `stream`.
    pub(crate) fn around(&self, ctx: &Arc<CudaContext>, stream: &CudaStream, kernel: &'static str, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        // Not held across the launch (which may wait on the host's side).
        let (began, host_after_wait) = {
            let mut r = self.lock()?;
            let host_after_wait = r.wait_returned.take().map(|t| t.elapsed());
            (r.stamp(ctx, stream)?, host_after_wait)
        };
        launch()?;
        let mut r = self.lock()?;
        let ended = r.stamp(ctx, stream)?;
        let after_waits = std::mem::take(&mut r.waits);
        let step = r.marks.len().saturating_sub(1);
        r.launches.push(Launch { kernel, began, ended, after_waits, host_after_wait, step });
        Ok(())
    }

    /// The host has just waited for the device (`what`: a read-back, a
    /// sync).
    pub(crate) fn waited(&self, what: &'static str) {
        if self.on() {
            if let Ok(mut r) = self.recording.lock() {
                if !r.waits.contains(&what) {
                    r.waits.push(what);
                }
                r.wait_returned = Some(std::time::Instant::now());
            }
        }
    }

    /// Stop recording; once `stream` has run everything, the timeline.
    pub(crate) fn finish(&self, stream: &CudaStream) -> Result<Timeline> {
        self.on.store(false, Ordering::Release);
        stream.synchronize().map_err(device_err("cuStreamSynchronize"))?;
        let r = self.lock()?;
        let Some(first) = r.launches.first() else {
            return Ok(Timeline { spans: Vec::new(), marks: r.marks.clone() });
        };
        let origin = &r.pool[first.began];
        let at = |i: usize| -> Result<f64> { Ok(origin.elapsed_ms(&r.pool[i]).map_err(device_err("cuEventElapsedTime"))? as f64 * 1e3) };
        let spans = r.launches.iter().map(|l| Ok(Span { kernel: l.kernel.to_string(), begin_us: at(l.began)?, end_us: at(l.ended)?, after_waits: l.after_waits.clone(), host_after_wait_us: l.host_after_wait.map(|d| d.as_secs_f64() * 1e6), step: l.step })).collect::<Result<Vec<_>>>()?;
        let marks = if r.marks.is_empty() { vec!["all".to_string()] } else { r.marks.clone() };
        Ok(Timeline { spans, marks })
    }
}
