//! `gpu-check`'s few-row matmul cases (`crate::gemv`): every configuration against the CPU at
//! the matrix shapes of a decode step (long k, so each warp takes several blocks; a partial
//! last tile of columns), and each shape's time against the tensor-core kernel it replaces;
//! and at the same shapes, verify-round calls of 8-32 rows on every few-row tensor-core form
//! (`matmul_mma_few.cu`) against the form chosen without it.

use crate::gemv::GvCfg;
use crate::mma::{MmaCfg, MMA_CFGS};
use crate::Gpu;
use crate::{CudaError, Result};
use tf_core::DType;
use tf_kernels::matmul::{matmul, Activations, WeightMatrix};
use tf_kernels::{SimdLevel, ThreadPool};

use super::ops::{activations, bits_equal, time, Row};

/// (name, type, n, k): Qwen2.5-7B's and -1.5B's decode matrices (q|k|v, o, gate|up, down).
const SHAPES: &[(&str, DType, usize, usize)] = &[
    ("7B qkv", DType::Q4K, 4608, 3584),
    ("7B o", DType::Q4K, 3584, 3584),
    ("7B gate|up", DType::Q4K, 37888, 3584),
    ("7B down", DType::Q4K, 3584, 18944),
    ("7B down", DType::Q6K, 3584, 18944),
    ("7B v", DType::Q6K, 512, 3584),
    ("1.5B qkv", DType::Q4K, 2048, 1536),
    ("1.5B gate|up", DType::Q4K, 17920, 1536),
    ("1.5B down", DType::Q6K, 1536, 8960),
    ("odd", DType::Q4K, 100, 2560),
    ("odd", DType::Q6K, 100, 2560),
];

pub fn run(
    gpu: &Gpu,
    level: SimdLevel,
    pool: &ThreadPool,
    seed: u64,
    table: &mut Vec<Row>,
) -> Result<()> {
    let mut speed = Vec::new();
    let mut few = Vec::new();
    for (si, &(name, dtype, n, k)) in SHAPES.iter().enumerate() {
        let rows_max = crate::gemv::GV_MAX_ROWS;
        let x = activations(rows_max, k, seed ^ 0x6e6d);
        let acts = Activations::new(level, &x, rows_max, k);
        let m = TestMatrix::new(
            gpu,
            pool,
            (dtype, n, k),
            seed ^ (si as u64 * 104_729),
            &acts,
        )?;
        let (dil, want) = (&m.dev, &m.want);
        let dx = gpu.upload(&x)?;
        if n >= 512 {
            few_speed(gpu, (name, dtype, n, k), dil, seed, &mut few)?;
        }
        for rows in 1..=rows_max {
            let act = gpu.quantize(&dx, rows, k, tf_kernels::actq::ActBlock::B256)?;
            let mut out = gpu.zeros::<f32>(rows * n)?;
            let mut mma = || gpu.matmul_mma(dtype, dil, n, &act, &mut out, None);
            mma()?;
            let mma_us = gpu.time_calls(20, &mut mma)?;
            for &cfg in GvCfg::all(dtype)
                .iter()
                .filter(|c| c.r >= rows && c.fits(k, gpu.smem_optin))
            {
                let mut go = || gpu.matmul_gemv(dtype, dil, n, &act, &mut out, Some(cfg));
                go()?;
                let micros = time(gpu, &mut go)?;
                let stream_us = gpu.time_calls(20, &mut go)?;
                let got = gpu.download(&out)?;
                let (equal, max_diff) = bits_equal(&got, &want[..rows * n]);
                table.push(Row {
                    op: format!("matmul gemv {}", cfg.suffix()),
                    ty: format!("{dtype} {n}x{k}"),
                    rows,
                    equal,
                    total: rows * n,
                    max_diff,
                    micros,
                });
                speed.push((
                    name,
                    dtype,
                    n,
                    k,
                    rows,
                    cfg,
                    stream_us,
                    mma_us,
                    dtype.bytes_for(n * k).unwrap_or(0),
                ));
            }
        }
    }
    pair(gpu, level, pool, seed, table)?;
    println!();
    // Times per call from CUDA events around back-to-back launches (as in a decode graph, no
    // host synchronization in between).
    println!("| gemv speed | type | n x k | rows | config | time (µs) | GB/s | mma (µs) |");
    println!("| --- | --- | --- | ---: | --- | ---: | ---: | ---: |");
    for (name, dtype, n, k, rows, cfg, us, mma_us, bytes) in speed {
        println!(
            "| {name} | {dtype} | {n} x {k} | {rows} | {} | {us:.1} | {:.0} | {mma_us:.1} |",
            cfg.suffix(),
            bytes as f64 / us / 1e3
        );
    }
    println!();
    println!("| mma few-row speed | type | n x k | rows | config | time (µs) | GB/s |");
    println!("| --- | --- | --- | ---: | --- | ---: | ---: |");
    for line in few {
        println!("{line}");
    }
    println!();
    Ok(())
}

/// Verify-round calls (8, 16, 32 rows) of one decode matrix: the tensor-core configuration
/// chosen without the few-row form against every few-row one, per call in a stream of launches.
fn few_speed(
    gpu: &Gpu,
    (name, dtype, n, k): (&str, DType, usize, usize),
    dil: &crate::CudaSlice<u8>,
    seed: u64,
    lines: &mut Vec<String>,
) -> Result<()> {
    let x = activations(32, k, seed ^ 0x6677);
    let dx = gpu.upload(&x)?;
    let bytes = dtype.bytes_for(n * k).unwrap_or(0) as f64;
    for rows in [8, 16, 32] {
        let act = gpu.quantize(&dx, rows, k, tf_kernels::actq::ActBlock::B256)?;
        let mut out = gpu.zeros::<f32>(rows * n)?;
        let old = MmaCfg::without_few(dtype, rows, n, k, None);
        let cfgs = std::iter::once(old).chain(MMA_CFGS.iter().copied().filter(|c| c.h > 0));
        for (i, cfg) in cfgs.enumerate() {
            let mut go = || gpu.matmul_mma(dtype, dil, n, &act, &mut out, Some(cfg));
            go()?;
            let us = gpu.time_calls(20, &mut go)?;
            let label = if i == 0 { "without few-row: " } else { "" };
            lines.push(format!(
                "| {name} | {dtype} | {n} x {k} | {rows} | {label}{} | {us:.1} | {:.0} |",
                cfg.suffix(),
                bytes / us / 1e3
            ));
        }
    }
    Ok(())
}

/// The pair kernels (q|k in Q4_K and v in Q6_K in one launch) at 7B's and 1.5B's shapes: both
/// outputs against the CPU, one and two rows (`gvp_*`) and 2-16 (`fwp_*`).
fn pair(
    gpu: &Gpu,
    level: SimdLevel,
    pool: &ThreadPool,
    seed: u64,
    table: &mut Vec<Row>,
) -> Result<()> {
    const ROWS: usize = 16;
    for (n1, n2, k) in [(4096, 512, 3584), (1792, 256, 1536)] {
        let x = activations(ROWS, k, seed ^ 0x9a1);
        let acts = Activations::new(level, &x, ROWS, k);
        let dx = gpu.upload(&x)?;
        let a = TestMatrix::new(gpu, pool, (DType::Q4K, n1, k), seed ^ 0x9a1, &acts)?;
        let b = TestMatrix::new(gpu, pool, (DType::Q6K, n2, k), seed ^ 0x9a2, &acts)?;
        let calls = [1, 2].map(|r| (r, true));
        for (rows, gemv) in calls
            .into_iter()
            .chain([2, 3, 4, 5, 8, 9, 16].map(|r| (r, false)))
        {
            let act = gpu.quantize(&dx, rows, k, tf_kernels::actq::ActBlock::B256)?;
            let mut o1 = gpu.zeros::<f32>(rows * n1)?;
            let mut o2 = gpu.zeros::<f32>(rows * n2)?;
            let (ma, mb) = ((a.dtype, &a.dev, n1), (b.dtype, &b.dev, n2));
            let op = if gemv {
                "matmul gemv pair"
            } else {
                "matmul few-row pair"
            };
            let mut go = || {
                if gemv {
                    gpu.matmul_gemv_pair(ma, mb, &act, &mut o1, &mut o2)
                } else {
                    gpu.matmul_mma_few_pair(ma, mb, &act, &mut o1, &mut o2)
                }
            };
            if !go()? {
                return Err(CudaError::Usage(format!(
                    "{op}: no kernel for {rows} rows of {n1}+{n2} at k={k}"
                )));
            }
            let micros = gpu.time_calls(20, || go().map(|_| ()))?;
            for (m, n, out) in [(&a, n1, &o1), (&b, n2, &o2)] {
                let got = gpu.download(out)?;
                let (equal, max_diff) = bits_equal(&got, &m.want[..rows * n]);
                table.push(Row {
                    op: op.into(),
                    ty: format!("{} {n}x{k} of {n1}+{n2}", m.dtype),
                    rows,
                    equal,
                    total: rows * n,
                    max_diff,
                    micros,
                });
            }
        }
    }
    Ok(())
}

/// A random matrix of `dtype` (`n` rows of `k`) interleaved on the device, with the CPU's
/// product of it and `acts`.
struct TestMatrix {
    dtype: DType,
    dev: crate::CudaSlice<u8>,
    want: Vec<f32>,
}

impl TestMatrix {
    fn new(
        gpu: &Gpu,
        pool: &ThreadPool,
        (dtype, n, k): (DType, usize, usize),
        seed: u64,
        acts: &Activations,
    ) -> Result<TestMatrix> {
        let bytes = tf_weights::random_blocks(dtype, n * k, seed);
        let w = WeightMatrix::new(dtype, k, n, &bytes)
            .ok_or_else(|| CudaError::Usage("weight matrix".into()))?;
        let mut want = vec![0f32; acts.rows * n];
        matmul(pool, &w, acts, &mut want);
        let il = crate::ops::interleave(dtype, &bytes, n, k)
            .ok_or_else(|| CudaError::Usage("Q4_K or Q6_K".into()))?;
        Ok(TestMatrix {
            dtype,
            dev: gpu.upload(&il)?,
            want,
        })
    }
}
