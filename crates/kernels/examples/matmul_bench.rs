//! Quantized matmul speed by row count: `cargo run --release -p tf-kernels --example
//! matmul_bench -- [q4k|q6k|q8_0|q5_0|q4_0] [THREADS] [COLUMNS] [K] [ROWS,...]` (defaults q4k, 2,
//! 8960, 1536, 1,2,3,4,5,8,16).
//! "memory": a set of matrices of about 124 MB together, far beyond the last-level cache, one
//! pass over all of them (the weights stream from memory, as in a forward); "cache": the first
//! matrix as many times (with a few hundred columns it stays in a core's L2, so the figure is
//! the kernel's own arithmetic). Best of 15 passes each, ms, and the ratio to one row. Every
//! kernel gives the same bits whatever the row count; this measures what more rows cost.

use std::time::Instant;
use tf_core::DType;
use tf_kernels::matmul::{matmul, Activations, PackedMatrix, WeightMatrix};
use tf_kernels::ThreadPool;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dtype = match args.get(1).map(String::as_str) {
        None | Some("q4k") => DType::Q4K,
        Some("q6k") => DType::Q6K,
        Some("q8_0") => DType::Q8_0,
        Some("q5_0") => DType::Q5_0,
        Some("q4_0") => DType::Q4_0,
        Some(other) => {
            eprintln!("matmul_bench: unknown type '{other}' (q4k, q6k, q8_0, q5_0 or q4_0)");
            std::process::exit(2);
        }
    };
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let pool = ThreadPool::new(threads);
    let level = tf_kernels::cpu::detect();
    // Columns of each matrix: 8960 by default; a few hundred keep one matrix in a core's L2
    // for the cache figures.
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(8960);
    let k: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1536);
    let count = (124_000_000 / dtype.bytes_for(k).unwrap() / n).max(16);
    let mats: Vec<Vec<u8>> = (0..count)
        .map(|i| tf_weights::random_blocks(dtype, k * n, i as u64))
        .collect();
    let total: usize = mats.iter().map(Vec::len).sum();
    let panels = std::env::var("TENSORFOLD_PANELS").is_ok_and(|v| v == "1");
    let packed: Vec<Option<PackedMatrix>> = mats
        .iter()
        .map(|m| {
            let w = WeightMatrix::new(dtype, k, n, m).unwrap();
            panels.then(|| PackedMatrix::pack(&w)).flatten()
        })
        .collect();
    if panels {
        println!(
            "panel form: {}",
            if tf_kernels::matmul::amx::available() {
                "AMX kernels"
            } else {
                "no AMX: the other kernels"
            }
        );
    }
    println!(
        "{dtype} {n}x{k}, {level:?}, {threads} threads; memory: {count} matrices ({:.0} MB), cache: one",
        total as f64 / 1e6
    );
    println!("rows | memory ms | x1 | GB/s | cache ms | x1 | ms/row over 1");
    let mut base = (0.0, 0.0);
    let row_counts: Vec<usize> = match args.get(5) {
        Some(list) => list.split(',').filter_map(|r| r.parse().ok()).collect(),
        None => vec![1, 2, 3, 4, 5, 8, 16],
    };
    for rows in row_counts {
        let x: Vec<f32> = (0..rows * k)
            .map(|i| (i * 7919 % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let acts = Activations::new(level, &x, rows, k);
        let mut out = vec![0f32; rows * n];
        let mut time = |which: &[usize]| {
            let mut best = f64::MAX;
            for _ in 0..15 {
                let t = Instant::now();
                for &i in which {
                    let mut w = WeightMatrix::new(dtype, k, n, &mats[i]).unwrap();
                    if let Some(p) = &packed[i] {
                        w = w.with_packed(p);
                    }
                    matmul(&pool, &w, &acts, &mut out);
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            best
        };
        let mem = time(&(0..count).collect::<Vec<_>>());
        let cache = time(&vec![0; count]);
        if rows == 1 {
            base = (mem, cache);
        }
        println!(
            "{rows:>4} | {mem:>9.2} | {:.2} | {:>4.1} | {cache:>8.2} | {:.2} | {:.2}",
            mem / base.0,
            total as f64 / mem / 1e6,
            cache / base.1,
            (cache - base.1) / (rows as f64 - 1.0).max(1.0)
        );
    }
}
