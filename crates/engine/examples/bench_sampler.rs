//! Time per `Sampler::sample` call at the Qwen vocabulary size (151,936) on synthetic LLM-like
//! logits. Run: `cargo run --release -p tf-engine --example bench_sampler [NAME_FILTER [ITERS]]`.

use std::time::Instant;
use tf_core::SplitMix64;
use tf_engine::{Sampler, SamplingParams};

const VOCAB: usize = 151_936;

fn logits(seed: u64) -> Vec<f32> {
    // A long tail around 0 (sd ~2.5) and a few dozen strong candidates, like a real LM head.
    let mut rng = SplitMix64::new(seed);
    let mut next = move || rng.next_f32();
    let mut row: Vec<f32> = (0..VOCAB)
        .map(|_| (next() + next() + next() + next() - 2.0) * 4.3)
        .collect();
    for i in 0..40 {
        let id = (next() * VOCAB as f32) as usize % VOCAB;
        row[id] = 10.0 + 10.0 * next() - i as f32 * 0.1;
    }
    row
}

fn main() {
    let rows: Vec<Vec<f32>> = (0..8).map(logits).collect();
    let history: Vec<u32> = (0..512).map(|i| (i * 7919) % VOCAB as u32).collect();
    let d = SamplingParams::default();
    let cases = [
        ("greedy", SamplingParams::greedy()),
        ("T=1 no truncation", d),
        (
            "T=0.7 top_k=40",
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                ..d
            },
        ),
        ("T=1 top_p=0.9", SamplingParams { top_p: 0.9, ..d }),
        (
            "T=0.7 top_k=40 top_p=0.9 min_p=0.05",
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                top_p: 0.9,
                min_p: 0.05,
                ..d
            },
        ),
        ("T=1 min_p=0.05", SamplingParams { min_p: 0.05, ..d }),
        (
            "T=1 top_p=0.9 + penalties (512 history)",
            SamplingParams {
                top_p: 0.9,
                repetition_penalty: 1.1,
                frequency_penalty: 0.2,
                ..d
            },
        ),
    ];
    let filter = std::env::args().nth(1).unwrap_or_default();
    let iters: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let mut sampler = Sampler::new();
    for (name, params) in cases {
        if !name.contains(filter.as_str()) {
            continue;
        }
        let mut sink = 0u64;
        for p in 0..20u64 {
            sink += u64::from(sampler.sample(&rows[p as usize % 8], &params, 1, p, &history));
        }
        let start = Instant::now();
        for p in 0..iters {
            sink += u64::from(sampler.sample(&rows[p as usize % 8], &params, 1, p, &history));
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!("{name:42} {us:8.1} us/call  (checksum {sink})");
    }
}
