//! Allocator settings. Every forward returns its logits in a fresh `Vec` (a vocabulary of
//! floats per row: 0.6 MB for Qwen2.5, 39 MB for a 64-row verify round). glibc serves blocks
//! that large with a fresh `mmap` and unmaps them on free, so each round pays one page fault
//! per 4 KiB (measured on the H200 host: 13 ms for 19 MB, 28 ms for 39 MB — more than the
//! forward itself). Raising the mmap and trim thresholds keeps such blocks in the heap, where
//! a freed one is reused by the next round without faults.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_large_blocks() {
    // glibc's <malloc.h>: M_TRIM_THRESHOLD = -1, M_MMAP_THRESHOLD = -3.
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    // SAFETY: mallopt only changes allocator thresholds; called before any thread starts.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 1 << 30);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_large_blocks() {}
