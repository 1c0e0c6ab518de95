//! The sampler's Gumbel-max scan over the whole vocabulary, spread over a thread pool with the
//! same token: each range of the vocabulary runs its own scan from the sequential scan's
//! starting state (the rank-0 token already offered), and the ranges' winners combine by the
//! same rule (higher score, then lower id). A range skips only tokens that cannot beat its own
//! best, which the combined winner is at least as good as, so no winner is ever skipped and the
//! combined winner is the sequential one. (Top-p's mass pass splits in `filter.rs`.)

use super::{Best, SCAN_CHUNK};
use std::sync::Mutex;
use tf_core::TokenId;
use tf_kernels::ThreadPool;

/// `best.scan(z, 0..n, kept)`, or `best.scan_all(z, 0..n)` when `kept` is `None`, on `pool`.
pub(super) fn scan(
    pool: &ThreadPool,
    best: &mut Best,
    z: &[f32],
    kept: Option<&(dyn Fn(usize) -> bool + Sync)>,
) {
    let start: &Best = best;
    let winner: Mutex<(f64, TokenId)> = Mutex::new((start.score, start.id));
    pool.for_ranges(z.len(), SCAN_CHUNK, &|r| {
        let mut b = start.clone();
        match kept {
            Some(kept) => b.scan(z, r, kept),
            None => b.scan_all(z, r),
        }
        let mut w = winner.lock().unwrap_or_else(|e| e.into_inner());
        if b.score > w.0 || (b.score == w.0 && b.id < w.1) {
            *w = (b.score, b.id);
        }
    });
    let (score, id) = winner.into_inner().unwrap_or_else(|e| e.into_inner());
    best.score = score;
    best.id = id;
}
