//! What the keyed sampler costs per logits row on this machine, for a few parameter sets:
//! `cargo run --release -p tf-engine --example sampler_cost`. The row is synthetic (a
//! Qwen2.5-sized vocabulary, a bell of logits around 0 and a few tokens far above it); the
//! figure that matters is the per-row time against a forward's, since every drawn token pays it
//! on the host. Each case runs on one thread and then on a pool of the machine's threads.

use std::sync::Arc;
use std::time::Instant;
use tf_engine::sampler::{Sampler, SamplingParams};
use tf_kernels::ThreadPool;

const VOCAB: usize = 151_936;
const ROWS: usize = 200;

fn main() {
    let mut state = 12_345u64;
    let mut uniform = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as f32 / (1u64 << 31) as f32
    };
    let mut logits: Vec<f32> = (0..VOCAB)
        .map(|_| ((0..4).map(|_| uniform()).sum::<f32>() - 2.0) * 5.0)
        .collect();
    for (i, l) in logits.iter_mut().enumerate().take(2000).step_by(100) {
        *l = 18.0 - i as f32 / 400.0;
    }
    let cases = [
        (
            "greedy",
            SamplingParams {
                temperature: 0.0,
                ..Default::default()
            },
        ),
        ("temperature 1, no truncation", SamplingParams::default()),
        (
            "temperature 0.7, top_p 0.9",
            SamplingParams {
                temperature: 0.7,
                top_p: 0.9,
                ..Default::default()
            },
        ),
        (
            "temperature 0.7, top_k 40",
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                ..Default::default()
            },
        ),
    ];
    // One thread, then the machine's threads (`Sampler::with_pool`): the same tokens, so the
    // same id sums.
    let pool = Arc::new(ThreadPool::with_available_parallelism());
    let threads = pool.threads();
    for (label, mut sampler) in [
        ("1 thread".to_string(), Sampler::new()),
        (format!("{threads} threads"), Sampler::with_pool(pool)),
    ] {
        for (name, params) in cases {
            let start = Instant::now();
            let mut check = 0u64;
            for pos in 0..ROWS {
                check += u64::from(sampler.sample(&logits, &params, 7, pos as u64, &[]));
            }
            let us = start.elapsed().as_secs_f64() / ROWS as f64 * 1e6;
            println!("{label}, {name}: {us:.1} µs per row (token id sum {check})");
        }
    }
}
