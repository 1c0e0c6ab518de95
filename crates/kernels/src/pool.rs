//! A persistent worker pool. Work is split over output columns (or rows, or heads): never over a
//! reduction, so the thread count cannot change a bit of any result.
//!
//! Workers spin briefly on a generation counter and then sleep on a condition variable: a decode
//! step issues a few hundred small parallel calls, and waking a sleeping thread for each would cost
//! more than the call itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Job = dyn Fn(usize, usize) + Sync;

struct Shared {
    /// Bumped once per `run`; workers start a job when they see a new value.
    generation: AtomicUsize,
    /// Workers still busy with the current job.
    pending: AtomicUsize,
    /// Lifetime-erased pointer to the current job; valid while `pending > 0`.
    job: Mutex<Option<JobPtr>>,
    wake: Condvar,
    sleepers: Mutex<()>,
    shutdown: std::sync::atomic::AtomicBool,
}

#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: the pointee is `Sync` and `run` keeps it alive until every worker has finished with it.
unsafe impl Send for JobPtr {}

pub struct ThreadPool {
    threads: usize,
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    /// Serializes callers: one job at a time.
    run_lock: Mutex<()>,
}

const SPIN_ITERS: usize = 200_000;

impl ThreadPool {
    /// A pool of `threads` workers in total, the calling thread included.
    pub fn new(threads: usize) -> ThreadPool {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            job: Mutex::new(None),
            wake: Condvar::new(),
            sleepers: Mutex::new(()),
            shutdown: std::sync::atomic::AtomicBool::new(false),
        });
        let handles = (1..threads)
            .map(|tid| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("tf-worker-{tid}"))
                    .spawn(move || worker(shared, tid, threads))
                    .expect("spawning a worker thread")
            })
            .collect();
        ThreadPool {
            threads,
            shared,
            handles,
            run_lock: Mutex::new(()),
        }
    }

    /// One thread per available core.
    pub fn with_available_parallelism() -> ThreadPool {
        ThreadPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(thread_index, thread_count)` on every thread of the pool and returns when all are done.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        if self.threads == 1 {
            f(0, 1);
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: we erase the lifetime of `f`; the pointer is only dereferenced by workers between
        // the generation bump below and their decrement of `pending`, and we wait for `pending == 0`
        // before returning, so `f` outlives every use.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize, usize) + Sync), *const Job>(f) };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(JobPtr(ptr));
        self.shared
            .pending
            .store(self.threads - 1, Ordering::SeqCst);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        {
            let _s = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        f(0, self.threads);
        while self.shared.pending.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
    }

    /// Splits `0..n` into contiguous ranges, one per thread, each a multiple of `align` (except the
    /// last), and runs `f(range)` for each non-empty one.
    pub fn for_ranges(&self, n: usize, align: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        let align = align.max(1);
        let units = n.div_ceil(align);
        let threads = self.threads.min(units.max(1));
        if threads <= 1 {
            if n > 0 {
                f(0..n);
            }
            return;
        }
        self.run(&|tid, _| {
            if tid >= threads {
                return;
            }
            let start = (units * tid / threads * align).min(n);
            let end = (units * (tid + 1) / threads * align).min(n);
            if start < end {
                f(start..end);
            }
        });
    }
}

fn worker(shared: Arc<Shared>, tid: usize, threads: usize) {
    let mut seen = 0usize;
    loop {
        let mut spins = 0;
        loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            let g = shared.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins += 1;
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
            } else {
                let guard = shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
                if shared.generation.load(Ordering::Acquire) == seen
                    && !shared.shutdown.load(Ordering::Acquire)
                {
                    let _unused = shared
                        .wake
                        .wait_timeout(guard, std::time::Duration::from_millis(50))
                        .unwrap_or_else(|e| e.into_inner());
                }
                spins = 0;
            }
        }
        let job = *shared.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(JobPtr(ptr)) = job {
            // SAFETY: see `ThreadPool::run`: the job outlives this call.
            let f = unsafe { &*ptr };
            f(tid, threads);
        }
        shared.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _s = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A raw pointer to an output buffer that several threads write at disjoint indices.
#[derive(Clone, Copy)]
pub struct SharedOut(pub *mut f32);
// SAFETY: users only write disjoint index sets from different threads (columns or rows split by
// `for_ranges`), and the buffer outlives the parallel call.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `i` must be in bounds of the buffer and written by one thread only during the call.
    #[inline(always)]
    pub unsafe fn write(self, i: usize, v: f32) {
        *self.0.add(i) = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn ranges_cover_everything_once() {
        for threads in 1..5 {
            let pool = ThreadPool::new(threads);
            for n in [0usize, 1, 7, 64, 1000] {
                for align in [1usize, 4, 16] {
                    let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                    pool.for_ranges(n, align, &|r| {
                        assert!(r.start % align == 0);
                        for i in r {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                }
            }
        }
    }

    #[test]
    fn many_small_jobs() {
        let pool = ThreadPool::new(3);
        let total = AtomicU64::new(0);
        for _ in 0..2000 {
            pool.run(&|tid, _| {
                total.fetch_add(tid as u64 + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 2000 * 6);
    }
}
