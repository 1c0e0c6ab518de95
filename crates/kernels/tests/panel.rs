//! The AMX panel kernels (weights repacked by `PackedMatrix::pack`): bit for bit the scalar
//! reference for every type with a panel form, at row counts around the tile height (16) and
//! the pass height (64), widths that leave a partial panel, long rows, extreme codes, and any
//! thread count; a row alone equals the same row inside any larger call.
//!
//! On a CPU without AMX the packed matrix is read by the VNNI panel kernel, or at the AVX2
//! level by the AVX2 panel kernel (Q4_0, Q4_K) and the other kernels (every other type); the line
//! printed says which ran. Every test runs at each SIMD level the CPU has.

mod common;
use common::*;
use tf_core::DType;
use tf_kernels::matmul::{amx, matmul, set_vnni_rows, Activations, PackedMatrix, WeightMatrix};
use tf_kernels::{SimdLevel, ThreadPool};

const PANEL_TYPES: [DType; 8] = [
    DType::Q4K,
    DType::Q6K,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::MXFP4,
];

fn run(level: SimdLevel, pool: &ThreadPool, w: &WeightMatrix, x: &[f32], rows: usize) -> Vec<f32> {
    let acts = Activations::new(level, x, rows, w.k);
    let mut out = vec![f32::NAN; rows * w.n];
    matmul(pool, w, &acts, &mut out);
    out
}

/// Runs `f` with every call on the VNNI panel kernel, then with every call of two or more
/// rows on tiles (where AMX is available). Tests in this file may overlap in time, and the
/// setting is global; that is harmless, since both kernels must give the same bits.
fn for_both_kernels(mut f: impl FnMut()) {
    set_vnni_rows(usize::MAX);
    f();
    set_vnni_rows(1);
    f();
    set_vnni_rows(8);
}

/// The SIMD levels this CPU can run, from AVX2 up (the AVX2 panel kernel runs on an AVX-512
/// CPU too, when asked for).
fn levels() -> Vec<SimdLevel> {
    let top = tf_kernels::detect();
    [SimdLevel::Avx2, SimdLevel::Avx512Vnni]
        .into_iter()
        .filter(|l| *l <= top)
        .collect()
}

fn note() {
    eprintln!(
        "panel kernels: AMX {}",
        if amx::available() {
            "available: the tile kernels ran"
        } else {
            "not available: the packed matrices went through the other kernels"
        }
    );
}

#[test]
fn panels_equal_the_reference() {
    note();
    let pools: Vec<ThreadPool> = (1..=3).map(ThreadPool::new).collect();
    for level in levels() {
        for dtype in PANEL_TYPES {
            // k: one block, several, and (legacy) a group of eight blocks plus a partial one.
            for (k, n) in [
                (256usize, 16usize),
                (768, 37),
                (2304, 5),
                (896, 48),
                (512, 100),
            ] {
                if k % dtype.block_elems() != 0 {
                    continue;
                }
                let mut rng = SplitMix64::new(k as u64 * 7 + n as u64 + dtype.ggml_id() as u64);
                let wb = weights(&mut rng, dtype, k * n);
                let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
                let p = PackedMatrix::pack(&w).expect("a panel type");
                let wp = w.with_packed(&p);
                for (t, rows) in [1usize, 2, 3, 4, 5, 6, 7, 15, 16, 17, 31, 33, 64, 65, 80]
                    .into_iter()
                    .enumerate()
                {
                    let x = activations(&mut rng, rows * k);
                    let want = run(SimdLevel::Scalar, &pools[0], &w, &x, rows);
                    let got = run(level, &pools[t % 3], &wp, &x, rows);
                    assert!(
                        bits_eq(&got, &want),
                        "{level:?} {dtype} k={k} n={n} rows={rows}"
                    );
                }
            }
        }
    }
}

#[test]
fn panel_rows_are_invariant_to_batch_and_offset() {
    let pool = ThreadPool::new(2);
    for level in levels() {
        for dtype in PANEL_TYPES {
            let (k, n) = (512, 72);
            let mut rng = SplitMix64::new(99 + dtype.ggml_id() as u64);
            let wb = weights(&mut rng, dtype, k * n);
            let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
            let p = PackedMatrix::pack(&w).unwrap();
            let wp = w.with_packed(&p);
            let total = 90;
            let x = activations(&mut rng, total * k);
            let alone: Vec<Vec<f32>> = (0..total)
                .map(|r| run(level, &pool, &wp, &x[r * k..(r + 1) * k], 1))
                .collect();
            for _ in 0..10 {
                let rows = 2 + rng.below(80);
                let start = rng.below(total - rows + 1);
                for_both_kernels(|| {
                    let got = run(level, &pool, &wp, &x[start * k..(start + rows) * k], rows);
                    for r in 0..rows {
                        assert!(
                            bits_eq(&got[r * n..(r + 1) * n], &alone[start + r]),
                            "{level:?} {dtype}: row {} inside {rows} rows",
                            start + r
                        );
                    }
                });
            }
        }
    }
}

#[test]
fn panels_take_extreme_codes_and_activations() {
    let pool = ThreadPool::new(2);
    let k = 512;
    let n = 20;
    let rows: Vec<Vec<f32>> = vec![
        vec![1.0; k],
        vec![-1.0; k],
        (0..k)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect(),
        (0..k)
            .map(|i| if i % 32 == 3 { -900.0 } else { 1e-3 })
            .collect(),
    ];
    let x = rows.concat();
    let mut rng = SplitMix64::new(5151);
    for level in levels() {
        for dtype in PANEL_TYPES {
            for fill in [0xFFu8, 0x80, 0x7F, 0x00, 0x55] {
                let mut wb = weights(&mut rng, dtype, k * n);
                let keep = match dtype {
                    DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => 0..2,
                    DType::Q6K => 208..210,
                    DType::MXFP4 => 0..1,
                    _ => 0..4,
                };
                for blk in wb.chunks_exact_mut(dtype.block_bytes()) {
                    for (i, b) in blk.iter_mut().enumerate() {
                        if !keep.contains(&i) {
                            *b = fill;
                        }
                    }
                }
                let w = WeightMatrix::new(dtype, k, n, &wb).unwrap();
                let p = PackedMatrix::pack(&w).unwrap();
                let want = run(SimdLevel::Scalar, &pool, &w, &x, rows.len());
                for_both_kernels(|| {
                    let got = run(level, &pool, &w.with_packed(&p), &x, rows.len());
                    assert!(bits_eq(&got, &want), "{level:?} {dtype} fill {fill:#x}");
                });
            }
        }
    }
}

#[test]
fn types_without_panels_are_not_packed() {
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q2K,
        DType::Q3K,
        DType::Q5K,
    ] {
        let mut rng = SplitMix64::new(3);
        let wb = weights(&mut rng, dtype, 256 * 4);
        let w = WeightMatrix::new(dtype, 256, 4, &wb).unwrap();
        assert!(PackedMatrix::pack(&w).is_none(), "{dtype}");
    }
    // MXFP4 scales f16 cannot hold keep the stored layout (and its kernels' bits).
    for scale in [0u8, 1, 103, 144, 255] {
        let mut rng = SplitMix64::new(4);
        let mut wb = weights(&mut rng, DType::MXFP4, 256 * 4);
        wb[17 * 5] = scale;
        let w = WeightMatrix::new(DType::MXFP4, 256, 4, &wb).unwrap();
        assert!(PackedMatrix::pack(&w).is_none(), "scale byte {scale}");
    }
    for scale in [104u8, 143] {
        let mut rng = SplitMix64::new(4);
        let mut wb = weights(&mut rng, DType::MXFP4, 256 * 4);
        wb[17 * 5] = scale;
        let w = WeightMatrix::new(DType::MXFP4, 256, 4, &wb).unwrap();
        assert!(PackedMatrix::pack(&w).is_some(), "scale byte {scale}");
    }
}
