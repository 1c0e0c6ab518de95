//! Attention speed by row count: `cargo run --release -p tf-kernels --example attention_bench --
//! [THREADS] [CONTEXT] [ROWS,...] [avx2|native] [KV_TYPE]` (defaults 2, 512, 1,2,4,8,16,
//! native, bf16; `avx2` runs the AVX2 path on an AVX-512 machine; KV_TYPE f32, bf16 or q8_0). The shape is Qwen2.5-1.5B's (12 query heads, 2 KV heads of 128)
//! over 28 layers, each with its own keys and values (as in a forward, the layers' caches do not
//! share a core's L1 or L2); the rows are consecutive positions of one sequence ending at
//! CONTEXT, as in a verify round. Best of 15 passes, ms per 28-layer pass, and the ratio to the
//! first row count. Every path gives the same bits whatever the rows.

use std::time::Instant;
use tf_kernels::attention::{attention, AttnShape, RowKeys};
use tf_kernels::kv::{KvCache, KvFormat, BLOCK_SIZE};
use tf_kernels::ThreadPool;

const LAYERS: usize = 28;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let context: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(512);
    let counts: Vec<usize> = args
        .get(3)
        .map(|s| s.split(',').filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    let pool = ThreadPool::new(threads);
    let level = match args.get(4).map(String::as_str) {
        Some("avx2") => tf_kernels::SimdLevel::Avx2,
        _ => tf_kernels::cpu::detect(),
    };
    let format = args
        .get(5)
        .map(|s| KvFormat::parse(s).expect("KV_TYPE is f32, bf16 or q8_0"))
        .unwrap_or_default();
    let shape = AttnShape {
        softcap: None,
        sinks: None,
        n_heads: 12,
        n_kv_heads: 2,
        head_dim: 128,
        scale: 1.0 / (128f32).sqrt(),
    };
    let kv_dim = shape.n_kv_heads * shape.head_dim;
    let blocks = context.div_ceil(BLOCK_SIZE) + 1;
    let mut cache = KvCache::new(LAYERS, shape.n_kv_heads, shape.head_dim, blocks, format);
    // A scattered block table, as after a while of serving.
    let table: Vec<u32> = (0..blocks as u32)
        .map(|b| (b * 7) % blocks as u32)
        .collect();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    for l in 0..LAYERS {
        for pos in 0..context {
            let k: Vec<f32> = (0..kv_dim).map(|_| rand()).collect();
            let v: Vec<f32> = (0..kv_dim).map(|_| rand()).collect();
            cache.write(l, &table, pos, &k, &v);
        }
    }
    let qd = shape.n_heads * shape.head_dim;
    println!(
        "attention_bench: {threads} threads, context {context}, {level:?}, {LAYERS} layers, KV {}",
        format.name()
    );
    let mut one = 0.0;
    for &rows in &counts {
        let keys: Vec<RowKeys> = (0..rows)
            .map(|i| RowKeys {
                table: &table,
                first: 0,
                n_keys: context - rows + 1 + i,
                remap: None,
            })
            .collect();
        let q: Vec<f32> = (0..rows * qd).map(|_| rand()).collect();
        let mut out = vec![0f32; rows * qd];
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            for l in 0..LAYERS {
                attention(&pool, level, &shape, &q, &keys, cache.layer(l), &mut out);
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        if rows == counts[0] {
            one = best;
        }
        println!("rows {rows:>2}: {best:8.3} ms  {:5.2}x", best / one);
    }
}
