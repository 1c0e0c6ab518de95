//! Matmul conformance (every SIMD level equals the scalar oracle bit for bit) and row invariance
//! (a row alone equals the same row inside any larger call, any thread count).

mod common;
use common::*;
use tf_core::DType;
use tf_kernels::matmul::{matmul, Activations, WeightMatrix};
use tf_kernels::{SimdLevel, ThreadPool};

fn run(level: SimdLevel, pool: &ThreadPool, w: &WeightMatrix, x: &[f32], rows: usize) -> Vec<f32> {
    let acts = Activations::new(level, x, rows, w.k);
    let mut out = vec![0f32; rows * w.n];
    matmul(pool, w, &acts, &mut out);
    out
}

#[test]
fn every_level_equals_the_reference() {
    let pool = ThreadPool::new(2);
    for dtype in DType::ALL {
        for (k, n) in [(256usize, 9usize), (512, 17), (1536, 40)] {
            let mut rng = SplitMix64::new(k as u64 * 31 + dtype.ggml_id() as u64);
            let wb = weights(&mut rng, dtype, k * n);
            let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
            let rows = 3;
            let x = activations(&mut rng, rows * k);
            let want = run(SimdLevel::Scalar, &pool, &w, &x, rows);
            assert!(want.iter().all(|v| v.is_finite()), "{dtype}");
            for level in SimdLevel::available() {
                let got = run(level, &pool, &w, &x, rows);
                assert!(bits_eq(&got, &want), "{dtype} k={k} {level:?}");
            }
        }
    }
}

/// Long rows (k = 9216: 36 k-quant blocks, 288 legacy ones, like an FFN down projection): the
/// reference's bits for one row, a partial tile, a full one and more than a tile, at every SIMD
/// level this CPU has.
#[test]
fn long_rows_in_block_runs_equal_the_reference() {
    let pool = ThreadPool::new(2);
    for dtype in [
        DType::Q4K,
        DType::Q6K,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4_1,
        DType::MXFP4,
    ] {
        let (k, n) = (9216, 11);
        let mut rng = SplitMix64::new(77 + dtype.ggml_id() as u64);
        let wb = weights(&mut rng, dtype, k * n);
        let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
        for rows in [1, 5, 8, 13] {
            let x = activations(&mut rng, rows * k);
            let want = run(SimdLevel::Scalar, &pool, &w, &x, rows);
            for level in SimdLevel::available() {
                let got = run(level, &pool, &w, &x, rows);
                assert!(bits_eq(&got, &want), "{dtype} rows={rows} {level:?}");
            }
        }
    }
}

/// Legacy rows whose block count is not a multiple of eight (the AVX2 Q4_0 kernel takes blocks
/// eight at a time, then four, then one): 1..=3 blocks, 8 + 3, 8 + 4 + 1, and Qwen2.5-0.5B's
/// 896 values (8 + 8 + 8 + 4), at 1, 3, 8 and 11 rows, every level equal to the reference.
#[test]
fn legacy_block_counts_off_eight_equal_the_reference() {
    let pool = ThreadPool::new(2);
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0] {
        for k in [32usize, 64, 96, 352, 416, 896] {
            let n = 5;
            let mut rng = SplitMix64::new(5150 + k as u64 + dtype.ggml_id() as u64);
            let wb = weights(&mut rng, dtype, k * n);
            let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
            for rows in [1, 3, 8, 11] {
                let x = activations(&mut rng, rows * k);
                let want = run(SimdLevel::Scalar, &pool, &w, &x, rows);
                for level in SimdLevel::available() {
                    let got = run(level, &pool, &w, &x, rows);
                    assert!(bits_eq(&got, &want), "{dtype} k={k} rows={rows} {level:?}");
                }
            }
        }
    }
}

/// One and two activation rows against more columns than eight: the AVX2 Q4_0 and Q4_K kernels
/// for short rows take eight columns in vector lanes and the columns left over one at a time. Column counts
/// off eight, thread counts that split them unevenly, every level equal to the reference.
#[test]
fn few_rows_over_many_columns_equal_the_reference() {
    let pools: Vec<ThreadPool> = (1..=3).map(ThreadPool::new).collect();
    for dtype in [DType::Q4_0, DType::Q4K, DType::Q8_0] {
        for (k, n) in [(896usize, 43usize), (256, 8), (512, 17), (4864, 24)] {
            if dtype.bytes_for(k).is_none() {
                continue; // 896 values are not whole Q4_K blocks
            }
            let mut rng = SplitMix64::new(808 + k as u64 + n as u64 + dtype.ggml_id() as u64);
            let wb = weights(&mut rng, dtype, k * n);
            let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
            let x = activations(&mut rng, 3 * k);
            let want = run(SimdLevel::Scalar, &pools[0], &w, &x, 3);
            for level in SimdLevel::available() {
                for pool in &pools {
                    for (r0, rows) in [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2)] {
                        let got = run(level, pool, &w, &x[r0 * k..(r0 + rows) * k], rows);
                        let span = &want[r0 * n..(r0 + rows) * n];
                        assert!(
                            bits_eq(&got, span),
                            "{dtype} k={k} n={n} rows {r0}+{rows} {level:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rows_are_invariant_to_batch_offset_and_threads() {
    let level = tf_kernels::detect();
    let pools: Vec<ThreadPool> = (1..=3).map(ThreadPool::new).collect();
    for dtype in [
        DType::Q4K,
        DType::Q6K,
        DType::Q4_0,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q4_1,
        DType::MXFP4,
        DType::F32,
        DType::F16,
    ] {
        let (k, n) = (512, 24);
        let mut rng = SplitMix64::new(1000 + dtype.ggml_id() as u64);
        let wb = weights(&mut rng, dtype, k * n);
        let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
        let total = 70;
        let x = activations(&mut rng, total * k);
        // Each row alone.
        let alone: Vec<Vec<f32>> = (0..total)
            .map(|r| run(level, &pools[0], &w, &x[r * k..(r + 1) * k], 1))
            .collect();
        for trial in 0..12 {
            let rows = 2 + rng.below(63);
            let start = rng.below(total - rows + 1);
            let pool = &pools[trial % 3];
            let got = run(level, pool, &w, &x[start * k..(start + rows) * k], rows);
            for r in 0..rows {
                assert!(
                    bits_eq(&got[r * n..(r + 1) * n], &alone[start + r]),
                    "{dtype}: row {} inside {rows} rows differs",
                    start + r
                );
            }
        }
    }
}

#[test]
fn quantized_dot_is_close_to_exact_math() {
    // The integer view (unpack) must describe the same numbers as the block layout: compare the
    // kernel with an f64 dot of the unpacked weights and the unquantized activations.
    use tf_kernels::matmul::unpack::{unpack_k, unpack_legacy};
    let pool = ThreadPool::new(1);
    for dtype in DType::ALL.into_iter().filter(|d| d.block_elems() > 1) {
        let k = 512;
        let mut rng = SplitMix64::new(77 + dtype.ggml_id() as u64);
        let wb = weights(&mut rng, dtype, k);
        let w = WeightMatrix::new(dtype, k, 1, &wb).unwrap();
        let x: Vec<f32> = (0..k).map(|_| rng.next_f32_signed()).collect();
        let got = run(SimdLevel::Scalar, &pool, &w, &x, 1)[0] as f64;
        let mut vals = vec![0f64; k];
        for (b, blk) in wb.chunks_exact(dtype.block_bytes()).enumerate() {
            if dtype.block_elems() == 256 {
                let u = unpack_k(dtype, blk);
                for i in 0..256 {
                    vals[256 * b + i] = u.d as f64 * u.scale[i / 16] as f64 * u.q[i] as f64
                        - u.dmin as f64 * u.min[i / 16] as f64;
                }
            } else {
                let u = unpack_legacy(dtype, blk);
                for i in 0..32 {
                    vals[32 * b + i] = u.d as f64 * u.q[i] as f64 + u.m as f64;
                }
            }
        }
        let exact: f64 = vals.iter().zip(&x).map(|(a, b)| a * *b as f64).sum();
        let mag: f64 = vals
            .iter()
            .zip(&x)
            .map(|(a, b)| (a * *b as f64).abs())
            .sum();
        assert!(
            (got - exact).abs() < 0.02 * mag,
            "{dtype}: {got} vs {exact} (mag {mag})"
        );
    }
}

/// Bytes of a block that hold f16 factors (kept valid); every other byte is a code or scale.
fn f16_bytes(dtype: DType) -> std::ops::Range<usize> {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => 0..2,
        DType::Q4_1 | DType::Q5_1 | DType::Q4K | DType::Q5K => 0..4,
        DType::Q2K => 80..84,
        DType::Q3K => 108..110,
        DType::Q6K => 208..210,
        _ => 0..0,
    }
}

#[test]
fn extreme_codes_and_activations_equal_the_reference() {
    // Saturation corners of the SIMD integer paths (vpmaddubsw saturates its i16 pair sums):
    // every code and scale byte at 0xFF, 0x80, 0x7F or 0x00, against activations of +127, -127,
    // alternating signs, and a row of one outlier per block among tiny values.
    let pool = ThreadPool::new(1);
    let k = 512;
    let n = 9; // one-row calls take eight columns at a time, and one more
    let mut rng = SplitMix64::new(4242);
    let tiny: Vec<f32> = (0..k)
        .map(|i| {
            if i % 32 == 7 {
                -1e3
            } else {
                (1.0 + rng.next_f32_signed().abs()) * 1e-3
            }
        })
        .collect();
    let rows: Vec<Vec<f32>> = vec![
        vec![1.0; k],
        vec![-1.0; k],
        (0..k)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect(),
        tiny.clone(),
    ];
    let x: Vec<f32> = rows.concat();
    for dtype in DType::ALL.into_iter().filter(|d| d.block_elems() > 1) {
        for fill in [0xFFu8, 0x80, 0x7F, 0x00, 0xAA] {
            let mut wb = weights(&mut rng, dtype, k * n);
            let keep = f16_bytes(dtype);
            for blk in wb.chunks_exact_mut(dtype.block_bytes()) {
                for (i, b) in blk.iter_mut().enumerate() {
                    if !keep.contains(&i) {
                        *b = fill;
                    }
                }
            }
            let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
            let want = run(SimdLevel::Scalar, &pool, &w, &x, rows.len());
            for level in SimdLevel::available() {
                let got = run(level, &pool, &w, &x, rows.len());
                assert!(
                    bits_eq(&got, &want),
                    "{dtype} fill={fill:#x} {level:?}: {got:?} vs {want:?}"
                );
                for (r, row) in rows.iter().enumerate() {
                    let alone = run(level, &pool, &w, row, 1);
                    assert!(
                        bits_eq(&alone, &want[r * n..(r + 1) * n]),
                        "{dtype} fill={fill:#x} {level:?}: row {r} alone"
                    );
                }
            }
        }
    }
}
