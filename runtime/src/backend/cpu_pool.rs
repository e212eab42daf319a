//! The CPU backend's executor (issue 22): the generated code's parallel
//! loops (`tk_rt::run_jobs`) on a pool of threads that spin a while
//! between loops before they sleep, with the calling thread taking chunks
//! too.
//!
//! Why not rayon's pool: a training step on the CPU is ~150 parallel loops
//! of a few tens of microseconds each (nano b4096 on sixteen threads), and
//! a rayon loop started from outside the pool hands its work over and
//! sleeps until it is done, while the pool's threads, asleep after a few
//! microseconds idle, are woken one by one as the work splits: the
//! wake-ups cost as much as the work. Here a loop is published with one
//! atomic store; threads spinning on it start at once; each chunk is
//! taken with one atomic add.
//!
//! One loop runs at a time: a loop started while another runs (from inside
//! a chunk, or from another thread: tests, oracles) runs on rayon's pool.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle thread spins for the next loop before it sleeps: the
/// gap between two kernels of a step is microseconds; between steps, a
/// few milliseconds of host work.
const SPIN: Duration = Duration::from_millis(2);

/// A loop's chunks as a lifetime-erased pointer to the caller's closure:
/// valid while the loop is open (see `Pool::run`).
type Job = *const (dyn Fn(usize) + Sync);

struct Pool {
    /// Bumped when a loop opens and when it closes: odd while one is open.
    phase: AtomicU64,
    /// The open loop's closure and chunk count (written by the caller
    /// before the phase turns odd, read by threads after they see it odd).
    job: UnsafeCell<Option<(Job, usize)>>,
    /// The next chunk to take.
    next: AtomicUsize,
    /// Threads inside the open loop (they may hold its closure).
    inside: AtomicUsize,
    /// A loop is being run (by the caller that set it).
    busy: AtomicBool,
    /// A chunk panicked on a pool thread.
    panicked: AtomicBool,
    /// Threads asleep, and where they sleep.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the caller holding `busy`, while the
// phase is even (no thread reads it then: threads read it only after
// entering `inside` and seeing the phase odd, and the caller waits for
// `inside` to drain after closing the phase before it returns or writes
// again); everything else is atomics and a mutex.
unsafe impl Sync for Pool {}

static POOL: OnceLock<&'static Pool> = OnceLock::new();

fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            phase: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            next: AtomicUsize::new(0),
            inside: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }));
        // The caller takes chunks too: one thread fewer.
        let threads = crate::abi::tk_rt::threads().max(1) as usize;
        for i in 1..threads {
            let spawned = std::thread::Builder::new().name(format!("tokitai-cpu-{}", i)).spawn(move || pool.work());
            if spawned.is_err() {
                break; // fewer threads; the caller still runs every chunk
            }
        }
        pool
    })
}

/// Make the pool the generated code's executor (`tk_rt::run_jobs`,
/// `tk_rt::par_ranges`): the CPU backend's launches and the monitor's host
/// scans both call this first. The first executor installed stays.
pub fn install() {
    crate::abi::tk_rt::set_executor(&run_jobs);
}

/// Run `job(c)` for every `c < chunks` on the pool (the generated code's
/// executor), returning when all have run.
pub fn run_jobs(chunks: usize, job: &(dyn Fn(usize) + Sync)) {
    pool().run(chunks, job)
}

impl Pool {
    fn run(&self, chunks: usize, job: &(dyn Fn(usize) + Sync)) {
        if chunks <= 1 {
            (0..chunks).for_each(job);
            return;
        }
        if self.busy.compare_exchange(false, true, SeqCst, SeqCst).is_err() {
            use rayon::prelude::*;
            (0..chunks).into_par_iter().for_each(job);
            return;
        }
        // SAFETY: only the holder of `busy` writes `job`, while the phase is
        // even (see `impl Sync`); the erased lifetime ends after the
        // threads have left (below).
        unsafe {
            let erased: Job = std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(job);
            *self.job.get() = Some((erased, chunks));
        }
        self.next.store(0, SeqCst);
        self.phase.fetch_add(1, SeqCst); // odd: open
        if self.sleeping.load(SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.wake.notify_all();
        }
        // Take chunks until none are left.
        let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.take_chunks(job, chunks)));
        // Close the loop, then wait for the threads inside to finish their
        // chunks and let go of the closure.
        self.phase.fetch_add(1, SeqCst);
        while self.inside.load(SeqCst) > 0 {
            std::hint::spin_loop();
        }
        // SAFETY: the phase is even and no thread is inside.
        unsafe {
            *self.job.get() = None;
        }
        let pool_panicked = self.panicked.swap(false, SeqCst);
        self.busy.store(false, SeqCst);
        if let Err(p) = own {
            std::panic::resume_unwind(p);
        }
        if pool_panicked {
            panic!("a CPU kernel's chunk panicked on a pool thread");
        }
    }

    fn take_chunks(&self, job: &(dyn Fn(usize) + Sync), chunks: usize) {
        loop {
            let c = self.next.fetch_add(1, SeqCst);
            if c >= chunks {
                return;
            }
            job(c);
        }
    }

    /// A pool thread: wait for a loop to open, take its chunks, repeat.
    fn work(&self) {
        let mut seen = 0u64;
        loop {
            let phase = self.wait_for_open(seen);
            seen = phase;
            self.inside.fetch_add(1, SeqCst);
            // Still the loop we saw open? (It may have closed between.)
            if self.phase.load(SeqCst) == phase {
                // SAFETY: the phase is odd and we are inside: the caller
                // keeps the closure alive until we leave.
                if let Some((job, chunks)) = unsafe { *self.job.get() } {
                    let job: &(dyn Fn(usize) + Sync) = unsafe { &*job };
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.take_chunks(job, chunks))).is_err() {
                        self.panicked.store(true, SeqCst);
                    }
                }
            }
            self.inside.fetch_sub(1, SeqCst);
        }
    }

    /// The phase of the next open loop after phase `seen`: spinning for
    /// `SPIN`, then asleep.
    fn wait_for_open(&self, seen: u64) -> u64 {
        let open = |p: u64| p != seen && p % 2 == 1;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let p = self.phase.load(SeqCst);
            if open(p) {
                return p;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > SPIN {
                break;
            }
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleeping.fetch_add(1, SeqCst);
        loop {
            let p = self.phase.load(SeqCst);
            if open(p) {
                self.sleeping.fetch_sub(1, SeqCst);
                return p;
            }
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_chunk_runs_once_loop_after_loop_and_after_the_threads_sleep() {
        for round in 0..200 {
            let chunks = 1 + round % 37;
            let counts: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
            run_jobs(chunks, &|c| {
                counts[c].fetch_add(1, SeqCst);
            });
            assert!(counts.iter().all(|n| n.load(SeqCst) == 1), "round {}", round);
            if round == 100 {
                std::thread::sleep(SPIN * 3); // the threads fall asleep
            }
        }
    }

    #[test]
    fn a_loop_inside_a_chunk_or_beside_another_runs_all_its_chunks() {
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..50 {
                        run_jobs(8, &|_| {
                            run_jobs(5, &|_| {
                                total.fetch_add(1, SeqCst);
                            });
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(SeqCst), 3 * 50 * 8 * 5);
    }

    #[test]
    fn a_panicking_chunk_panics_the_caller_and_the_pool_goes_on() {
        let r = std::panic::catch_unwind(|| {
            run_jobs(64, &|c| {
                if c % 7 == 3 {
                    panic!("chunk {}", c);
                }
            })
        });
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        run_jobs(16, &|_| {
            n.fetch_add(1, SeqCst);
        });
        assert_eq!(n.load(SeqCst), 16);
    }
}
