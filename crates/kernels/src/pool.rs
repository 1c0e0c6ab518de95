//! A persistent worker pool. Work is split over output columns (or rows, or heads): never over a
//! reduction, so the thread count cannot change a bit of any result.
//!
//! A call is cut into chunks that the caller and the workers claim from a shared counter. The
//! caller never waits for a worker that has not started: if the other threads are busy (another
//! process on the core, say), the caller simply computes every chunk itself. Idle workers spin
//! briefly on a generation counter, then sleep; a decode step issues a few hundred small parallel
//! calls, so waking a sleeping thread for each would cost more than the call.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// One parallel call. Lives in an `Arc` so a worker that wakes late can look at the counters
/// safely; it dereferences `f` only after claiming a chunk, and the caller does not return until
/// every claimed chunk is done, so `f` is alive whenever it is called.
struct Job {
    next: AtomicUsize,
    done: AtomicUsize,
    chunks: usize,
    f: *const (dyn Fn(usize) + Sync),
}

// SAFETY: `f` points to a `Sync` closure and is only called while the owning `for_chunks` call is
// still waiting (see `Job`).
unsafe impl Send for Job {}
// SAFETY: as for `Send`: shared references only call the `Sync` closure, under the same wait.
unsafe impl Sync for Job {}

impl Job {
    /// Claims and runs chunks until none are left. Returns how many this thread ran.
    fn work(&self) {
        loop {
            let c = self.next.fetch_add(1, Ordering::AcqRel);
            if c >= self.chunks {
                return;
            }
            // SAFETY: a chunk was claimed, so the caller is still waiting for `done`.
            unsafe { (*self.f)(c) };
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct Shared {
    generation: AtomicUsize,
    job: Mutex<Option<Arc<Job>>>,
    sleeping: AtomicUsize,
    wake: Condvar,
    sleep_lock: Mutex<()>,
    shutdown: AtomicBool,
}

pub struct ThreadPool {
    threads: usize,
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    /// Serializes callers: one job at a time.
    run_lock: Mutex<()>,
}

/// Spins before a worker sleeps (about a millisecond).
const SPIN_ITERS: usize = 100_000;
/// Chunks per thread: small enough to balance when a thread is slow, large enough to keep the
/// claim counter cheap.
const CHUNKS_PER_THREAD: usize = 4;

impl ThreadPool {
    /// A pool of `threads` threads in total, the calling thread included.
    pub fn new(threads: usize) -> ThreadPool {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicUsize::new(0),
            job: Mutex::new(None),
            sleeping: AtomicUsize::new(0),
            wake: Condvar::new(),
            sleep_lock: Mutex::new(()),
            shutdown: AtomicBool::new(false),
        });
        let handles = (1..threads)
            .map(|tid| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("tf-worker-{tid}"))
                    .spawn(move || worker(shared))
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

    /// Runs `f(chunk)` for every chunk in `0..chunks`, spread over the pool; returns when all are
    /// done.
    pub fn for_chunks(&self, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.threads == 1 || chunks <= 1 {
            for c in 0..chunks {
                f(c);
            }
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: lifetime erasure only; see `Job` for why `f` is never called after we return.
        let f: *const (dyn Fn(usize) + Sync) = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(
                f,
            )
        };
        let job = Arc::new(Job {
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            chunks,
            f,
        });
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job.clone());
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        if self.shared.sleeping.load(Ordering::SeqCst) > 0 {
            let _s = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        job.work();
        let mut spins = 0u32;
        while job.done.load(Ordering::Acquire) < chunks {
            spins += 1;
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Splits `0..n` into contiguous ranges whose starts are multiples of `align` and runs
    /// `f(range)` for each, spread over the pool.
    pub fn for_ranges(&self, n: usize, align: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        let align = align.max(1);
        let units = n.div_ceil(align);
        if units == 0 {
            return;
        }
        let chunks = units.min(self.threads * CHUNKS_PER_THREAD);
        self.for_chunks(chunks, &|c| {
            let start = (units * c / chunks * align).min(n);
            let end = (units * (c + 1) / chunks * align).min(n);
            if start < end {
                f(start..end);
            }
        });
    }
}

fn worker(shared: Arc<Shared>) {
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
                let guard = shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                shared.sleeping.fetch_add(1, Ordering::SeqCst);
                if shared.generation.load(Ordering::SeqCst) == seen
                    && !shared.shutdown.load(Ordering::Acquire)
                {
                    let _unused = shared
                        .wake
                        .wait_timeout(guard, std::time::Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner());
                }
                shared.sleeping.fetch_sub(1, Ordering::SeqCst);
                spins = 0;
            }
        }
        let job = shared.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(job) = job {
            job.work();
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _s = self
                .shared
                .sleep_lock
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
// SAFETY: as for `Send`: the writes through shared copies go to disjoint indices.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `i` must be in bounds of the buffer and written by one thread only during the call.
    #[inline(always)]
    pub unsafe fn write(self, i: usize, v: f32) {
        *self.0.add(i) = v;
    }

    /// The `len` values from `i`, to write.
    ///
    /// # Safety
    /// They must be in bounds of the buffer and touched by one thread only during the call.
    #[inline(always)]
    pub unsafe fn slice<'a>(self, i: usize, len: usize) -> &'a mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(i), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn ranges_cover_everything_once() {
        for threads in 1..4 {
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
            pool.for_chunks(5, &|c| {
                total.fetch_add(c as u64 + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 2000 * 15);
    }
}
