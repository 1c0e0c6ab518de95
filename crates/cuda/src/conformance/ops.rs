//! The ops `gpu-check` runs: q8 activation quantization, quantized matmuls, RMSNorm, each
//! against the CPU kernels of `tf_kernels` (themselves checked bitwise against their oracles).

use std::time::Instant;
use tf_core::SplitMix64;

use crate::mma::{MmaCfg, MMA_CFGS};
use crate::ops::{DevAct, MatmulForm};
use crate::Gpu;
use crate::{CudaError, Result};
use tf_core::DType;
use tf_kernels::actq::{ActBlock, QuantAct};
use tf_kernels::matmul::{matmul, Activations, WeightMatrix};
use tf_kernels::ops::{RopeStyle, RopeTable};
use tf_kernels::{canon, ops, SimdLevel, ThreadPool};

/// Inner dimension of the test matrices (a multiple of 256 so every type fits), and columns.
const K: usize = 1536;
const N: usize = 1024;
const TIMING_REPS: usize = 5;

/// Which GPU kernel a matmul check runs.
#[derive(Clone, Copy)]
enum Kernel {
    Form(MatmulForm),
    TileInterleaved,
    Mma(MmaCfg),
    Float,
}

pub(crate) struct Row {
    pub op: String,
    pub ty: String,
    pub rows: usize,
    pub equal: usize,
    pub total: usize,
    pub max_diff: f64,
    pub micros: f64,
}

/// Activation-like rows: mostly N(0,1)-ish, some outliers, one zero block and one block so
/// small that 127/amax overflows (the quantizer's zero rule).
pub(crate) fn activations(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut s = SplitMix64::new(seed);
    let mut x: Vec<f32> = (0..rows * k)
        .map(|i| {
            let u = s.next_f32() - 0.5;
            if i % 211 == 0 {
                u * 60.0
            } else {
                u * 3.0
            }
        })
        .collect();
    if rows > 1 && x.len() >= k + 512 {
        x[k..k + 256].fill(0.0);
        x[k + 256..k + 512].fill(1e-38);
    }
    x
}

/// The first `rows` rows of a GPU quantized activation against the CPU's: (values equal, values,
/// largest scale difference), counting codes, scales and sums.
pub(crate) fn quant_equal(
    gpu: &Gpu,
    got: &DevAct,
    want: &QuantAct,
    rows: usize,
) -> Result<(usize, usize, f64)> {
    let k = want.k;
    let (nd, ns) = (
        rows * k / got.block.values(),
        rows * k / got.block.sum_len(),
    );
    let qs = gpu.download(&got.qs)?;
    let d = gpu.download(&got.d)?;
    let sums = gpu.download(&got.sums)?;
    let (deq, dmax) = bits_equal(&d[..nd], &want.d[..nd]);
    let qeq = qs[..rows * k]
        .iter()
        .zip(&want.qs)
        .filter(|(a, b)| a == b)
        .count();
    let seq = sums[..ns]
        .iter()
        .zip(&want.sums)
        .filter(|(a, b)| a == b)
        .count();
    // The tensor-core copy, where the quantization wrote one: every code in its place, and
    // each row's record of its sub-block sums (64 h + l, l in 0..64) for every block.
    let (feq, ftotal) = if got.has_frag() {
        let frag = gpu.download(&got.frag)?;
        let codes = (0..rows * k)
            .filter(|&i| frag[crate::ops::frag_index(i / k, i % k, k)] == want.qs[i])
            .count();
        let subs = rows * k / 32;
        let records = (0..subs)
            .filter(|&i| {
                let (r, b, s) = (i / (k / 32), i % (k / 32) / 8, i % 8);
                let sum: i32 = want.qs[r * k + 256 * b + 32 * s..][..32]
                    .iter()
                    .map(|&q| q as i32)
                    .sum();
                let at = crate::ops::frag_rec_index(r, b, k);
                let (h, l) = (frag[at + s] as i32, frag[at + 8 + s] as i32);
                64 * h + l == sum && (0..64).contains(&l)
            })
            .count();
        (codes + records, rows * k + subs)
    } else {
        (0, 0)
    };
    Ok((deq + qeq + seq + feq, nd + rows * k + ns + ftotal, dmax))
}

pub(crate) fn bits_equal(a: &[f32], b: &[f32]) -> (usize, f64) {
    let mut eq = 0;
    let mut md = 0f64;
    for (x, y) in a.iter().zip(b) {
        if x.to_bits() == y.to_bits() {
            eq += 1;
        } else {
            md = md.max((*x as f64 - *y as f64).abs());
        }
    }
    (eq, md)
}

/// Median wall time of `f` (launch and synchronize) in microseconds.
pub(crate) fn time(gpu: &Gpu, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut t = Vec::new();
    for _ in 0..TIMING_REPS {
        let s = Instant::now();
        f()?;
        gpu.sync()?;
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(|a, b| a.total_cmp(b));
    Ok(t[t.len() / 2])
}

/// Every kernel against its CPU oracle, one check after another in the order of the printed
/// table (long on purpose: each check is a few lines, and the list reads as the table does).
pub fn run(args: &super::Options) -> Result<()> {
    let max_rows = args.rows.iter().copied().max().unwrap_or(1);
    if args.rows.iter().any(|&r| r == 0 || r > 512) {
        return Err(CudaError::Usage(
            "--rows: each count must be in 1..=512".into(),
        ));
    }
    let cache = &args.cache;
    let mut gpu = Gpu::open(args.gpu, Some(cache), tf_kernels::kv::KvFormat::F32)?;
    println!(
        "gpu: {} (sm_{}{}); kernels {} in {:.1} ms ({} bytes){}",
        gpu.name,
        gpu.cc.0,
        gpu.cc.1,
        if gpu.program.cached {
            "loaded from cache"
        } else {
            "compiled"
        },
        gpu.program.millis,
        gpu.program.bytes,
        gpu.program
            .path
            .as_ref()
            .map(|p| format!(", {}", p.display()))
            .unwrap_or_default()
    );
    let again = Gpu::open(args.gpu, Some(cache), tf_kernels::kv::KvFormat::F32)?;
    println!(
        "second open: {} in {:.2} ms",
        if again.program.cached {
            "loaded from cache (nothing compiled)"
        } else {
            "COMPILED AGAIN (cache not used)"
        },
        again.program.millis
    );
    drop(again);

    let level = tf_kernels::detect();
    let pool = ThreadPool::with_available_parallelism();
    let x = activations(max_rows, K, args.seed);
    let dx = gpu.upload(&x)?;
    let mut table = Vec::new();

    // q8 activation quantization.
    for block in [ActBlock::B32, ActBlock::B256] {
        let want = QuantAct::new(SimdLevel::Scalar, block, &x, max_rows, K);
        for &rows in &args.rows {
            let got = gpu.quantize(&dx, rows, K, block)?;
            let (equal, total, max_diff) = quant_equal(&gpu, &got, &want, rows)?;
            let micros = time(&gpu, || {
                gpu.quantize(&dx, rows, K, block)?;
                Ok(())
            })?;
            table.push(Row {
                op: "actq".into(),
                ty: format!("B{}", block.values()),
                rows,
                equal,
                total,
                max_diff,
                micros,
            });
        }
    }

    // Quantized matmuls.
    let types = [
        DType::Q8_0,
        DType::Q4K,
        DType::Q6K,
        DType::Q5_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_1,
        DType::Q2K,
        DType::Q3K,
        DType::Q5K,
        DType::MXFP4,
        DType::F32,
        DType::F16,
        DType::BF16,
    ];
    for (ti, dtype) in types.into_iter().enumerate() {
        let wbytes = tf_weights::random_blocks(dtype, N * K, args.seed ^ ((ti as u64 + 1) * 7919));
        let w = WeightMatrix::new(dtype, K, N, &wbytes)
            .ok_or_else(|| CudaError::Usage("weight matrix".into()))?;
        let acts = Activations::new(level, &x, max_rows, K);
        let mut want = vec![0f32; max_rows * N];
        matmul(&pool, &w, &acts, &mut want);
        let dw = gpu.upload(&wbytes)?;
        // Q4_K and Q6_K also in the interleaved layouts the GPU runner uploads.
        let dil = match crate::ops::interleave(dtype, &wbytes, N, K) {
            Some(il) => Some(gpu.upload(&il)?),
            None => None,
        };
        let block = tf_kernels::matmul::act_block(dtype);
        let mut kernels = Vec::new();
        match (block, &dil) {
            (None, _) => kernels.push(Kernel::Float),
            (Some(_), il) => {
                kernels.extend([
                    Kernel::Form(MatmulForm::Warp),
                    Kernel::Form(MatmulForm::Tile),
                ]);
                if il.is_some() && dtype == DType::Q4K {
                    kernels.push(Kernel::TileInterleaved);
                }
                if il.is_some() {
                    kernels.extend(MMA_CFGS.iter().map(|&c| Kernel::Mma(c)));
                }
            }
        }
        for &kernel in &kernels {
            for &rows in &args.rows {
                let act = match block {
                    Some(b) => Some(gpu.quantize(&dx, rows, K, b)?),
                    None => None,
                };
                // The forms that read the activations' tensor-core copy run up to the rows it
                // is written for.
                if matches!((kernel, &act), (Kernel::Mma(c), Some(a)) if !c.takes(a)) {
                    continue;
                }
                let mut out = gpu.zeros::<f32>(rows * N)?;
                let mut launch = || -> Result<()> {
                    match (&act, kernel, &dil) {
                        (Some(a), Kernel::Form(f), _) => {
                            gpu.matmul_q_form(f, dtype, &dw, N, a, &mut out)?
                        }
                        (Some(a), Kernel::TileInterleaved, Some(il)) => {
                            gpu.matmul_q4k_interleaved(il, N, a, &mut out)?
                        }
                        (Some(a), Kernel::Mma(c), Some(il)) => {
                            gpu.matmul_mma(dtype, il, N, a, &mut out, Some(c))?
                        }
                        _ => gpu.matmul_f(dtype, &dw, N, K, &dx, rows, &mut out)?,
                    }
                    Ok(())
                };
                launch()?;
                let micros = time(&gpu, &mut launch)?;
                let got = gpu.download(&out)?;
                let (eq, md) = bits_equal(&got, &want[..rows * N]);
                table.push(Row {
                    op: match kernel {
                        Kernel::Form(MatmulForm::Tile) => "matmul tile".into(),
                        Kernel::TileInterleaved => "matmul interleaved".into(),
                        Kernel::Mma(c) => format!("matmul mma {}", c.suffix()),
                        _ => "matmul".into(),
                    },
                    ty: format!("{dtype} {N}x{K}"),
                    rows,
                    equal: eq,
                    total: rows * N,
                    max_diff: md,
                    micros,
                });
            }
        }
    }

    // RMSNorm, at a width that is a multiple of 16 and one that is not.
    for n in [K, 1000] {
        let xn = activations(max_rows, n, args.seed ^ 0x5151);
        let wn: Vec<f32> = (0..n).map(|i| 1.0 + (i % 13) as f32 / 10.0).collect();
        let mut want = vec![0f32; max_rows * n];
        for r in 0..max_rows {
            ops::rms_norm(
                level,
                &xn[r * n..(r + 1) * n],
                &wn,
                1e-6,
                &mut want[r * n..(r + 1) * n],
            );
        }
        let (dxn, dwn) = (gpu.upload(&xn)?, gpu.upload(&wn)?);
        for &rows in &args.rows {
            let mut out = gpu.zeros::<f32>(rows * n)?;
            gpu.rms_norm(&dxn, &dwn, n, 1e-6, rows, &mut out, None)?;
            let got = gpu.download(&out)?;
            let (eq, md) = bits_equal(&got, &want[..rows * n]);
            let micros = time(&gpu, || {
                gpu.rms_norm(&dxn, &dwn, n, 1e-6, rows, &mut out, None)
            })?;
            table.push(Row {
                op: "rms_norm".into(),
                ty: format!("f32 n={n}"),
                rows,
                equal: eq,
                total: rows * n,
                max_diff: md,
                micros,
            });
        }
    }

    // SwiGLU, GeGLU and gpt-oss's clamped SwiGLU over an FFN-wide row, gate values wide enough
    // to reach exp's cut-offs and the clamps;
    // then soft-capping (`cap * tanh(x / cap)`) of the same values, infinities kept.
    {
        const F: usize = 8960;
        let mut s = SplitMix64::new(args.seed ^ 0x5a5a);
        let mut wide = |scale: f32| -> Vec<f32> {
            (0..max_rows * F)
                .map(|_| (s.next_f32() - 0.5) * scale)
                .collect()
        };
        let (gate, up) = (wide(200.0), wide(20.0));
        let (dg, du) = (gpu.upload(&gate)?, gpu.upload(&up)?);
        use tf_models::Mlp;
        for mlp in [Mlp::SwiGlu, Mlp::GeGlu, Mlp::SwiGluOai] {
            let act = crate::ops::Glu::of(mlp);
            let mut want = vec![0f32; max_rows * F];
            mlp.apply(level, &gate, &up, &mut want);
            for &rows in &args.rows {
                let mut out = gpu.zeros::<f32>(rows * F)?;
                gpu.glu(act, &dg, &du, rows * F, &mut out)?;
                let got = gpu.download(&out)?;
                let (eq, md) = bits_equal(&got, &want[..rows * F]);
                let micros = time(&gpu, || gpu.glu(act, &dg, &du, rows * F, &mut out))?;
                table.push(Row {
                    op: format!("glu {act:?}"),
                    ty: format!("f32 n={F}"),
                    rows,
                    equal: eq,
                    total: rows * F,
                    max_diff: md,
                    micros,
                });
            }
        }
        let mut x = gate.clone();
        x[1] = f32::NEG_INFINITY;
        x[2] = f32::INFINITY;
        for cap in [30.0f32, 5.0] {
            let want: Vec<f32> = (x.iter())
                .map(|&v| match v.is_finite() {
                    true => cap * canon::tanh(v / cap),
                    false => v,
                })
                .collect();
            let mut dx = gpu.upload(&x)?;
            gpu.soft_cap(&mut dx, x.len(), cap)?;
            let (eq, md) = bits_equal(&gpu.download(&dx)?, &want);
            table.push(Row {
                op: "soft_cap".into(),
                ty: format!("cap {cap}"),
                rows: max_rows,
                equal: eq,
                total: x.len(),
                max_diff: md,
                micros: 0.0,
            });
        }
    }

    // A mixture's rank-order combine (`moe::combine`), 8 ranks of 2048 values a row.
    {
        let (k, n) = (8, 2048);
        let ys = activations(max_rows * k, n, args.seed ^ 0x6b6b);
        let w: Vec<f32> = activations(max_rows, k, args.seed ^ 0x6c6c)
            .iter()
            .map(|v| v.abs() / 8.0)
            .collect();
        let mut want = vec![0f32; max_rows * n];
        for r in 0..max_rows {
            let choices: Vec<tf_kernels::moe::Choice> = (0..k)
                .map(|j| tf_kernels::moe::Choice {
                    expert: j,
                    weight: w[r * k + j],
                })
                .collect();
            let row = r * n..(r + 1) * n;
            tf_kernels::moe::combine(&choices, &ys[r * k * n..(r + 1) * k * n], &mut want[row]);
        }
        let (dys, dw) = (gpu.upload(&ys)?, gpu.upload(&w)?);
        let mut out = gpu.zeros::<f32>(max_rows * n)?;
        gpu.moe_combine(&dys, &dw, max_rows, k, n, &mut out)?;
        let (eq, md) = bits_equal(&gpu.download(&out)?, &want);
        table.push(Row {
            op: "moe_combine".into(),
            ty: format!("k={k} n={n}"),
            rows: max_rows,
            equal: eq,
            total: max_rows * n,
            max_diff: md,
            micros: 0.0,
        });
    }

    // The weights' f16 scales: every bit pattern (zeros, subnormals, infinities, NaNs) to the
    // CPU's float.
    let got = gpu.f16_table()?;
    let equal = (0..=u16::MAX)
        .filter(|&h| {
            got[h as usize].to_bits() == tf_kernels::matmul::unpack::f16_to_f32(h).to_bits()
        })
        .count();
    table.push(Row {
        op: "f16_to_f32".into(),
        ty: "every f16".into(),
        rows: 1,
        equal,
        total: 65536,
        max_diff: 0.0,
        micros: 0.0,
    });

    super::fused::run(&gpu, level, &args.rows, args.seed, &mut table)?;
    super::argmax::run(&gpu, &args.rows, args.seed, &mut table)?;
    super::gemv::run(&gpu, level, &pool, args.seed, &mut table)?;
    super::deltanet::run(&gpu, &pool, args.seed, &mut table)?;
    super::attn::run(&mut gpu, level, &pool, args.seed, &mut table)?;
    // The attention kernels once more as compiled for a bf16 KV cache.
    let mut gpu16 = Gpu::open(args.gpu, Some(cache), tf_kernels::kv::KvFormat::Bf16)?;
    super::attn::run(&mut gpu16, level, &pool, args.seed, &mut table)?;
    drop(gpu16);

    // RoPE: Qwen2.5-1.5B's q heads, random positions below 4096, both pair styles.
    for style in [RopeStyle::Neox, RopeStyle::Interleaved] {
        let (heads, hd, max_pos) = (12usize, 128usize, 4096usize);
        let table_cpu = RopeTable::new(hd, 1e6, max_pos);
        let dcs = gpu.upload(&crate::ops::rope_table(hd, 1e6, max_pos))?;
        let xr = activations(max_rows, heads * hd, args.seed ^ 0x7070);
        let mut s = SplitMix64::new(args.seed);
        let pos: Vec<i32> = (0..max_rows).map(|_| s.below(max_pos) as i32).collect();
        let mut want = xr.clone();
        for (r, row) in want.chunks_exact_mut(heads * hd).enumerate() {
            table_cpu.apply(row, hd, pos[r] as usize, style);
        }
        let dpos = gpu.upload(&pos)?;
        for &rows in &args.rows {
            let mut dxr = gpu.upload(&xr[..rows * heads * hd])?;
            gpu.rope(&mut dxr, &dpos, rows, heads, hd, hd, style, &dcs)?;
            let got = gpu.download(&dxr)?;
            let (eq, md) = bits_equal(&got, &want[..rows * heads * hd]);
            let micros = time(&gpu, || {
                gpu.rope(&mut dxr, &dpos, rows, heads, hd, hd, style, &dcs)
            })?;
            table.push(Row {
                op: "rope".into(),
                ty: format!("{style:?} 12x128"),
                rows,
                equal: eq,
                total: rows * heads * hd,
                max_diff: md,
                micros,
            });
        }
    }

    println!("| op | type | rows | bitwise equal | max abs diff | time (µs) |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    let mut failed = 0;
    for r in &table {
        if r.equal != r.total {
            failed += 1;
        }
        println!(
            "| {} | {} | {} | {} of {}{} | {} | {:.1} |",
            r.op,
            r.ty,
            r.rows,
            r.equal,
            r.total,
            if r.equal == r.total { "" } else { " ✗" },
            if r.max_diff == 0.0 {
                "0".to_string()
            } else {
                format!("{:.3e}", r.max_diff)
            },
            r.micros
        );
    }
    println!(
        "{} checks, {} bitwise equal, {} not (CPU: {})",
        table.len(),
        table.len() - failed,
        failed,
        level.name()
    );
    speed(&gpu, args.seed)?;
    if failed > 0 {
        return Err(CudaError::Usage(format!(
            "{failed} GPU checks differ from the CPU"
        )));
    }
    Ok(())
}

/// Matmul speed at Qwen2.5-7B's FFN shapes (weights far beyond L2): time per call and weight
/// bytes read per second, the figure a decode step is bound by.
fn speed(gpu: &Gpu, seed: u64) -> Result<()> {
    println!();
    println!("| matmul speed | n x k | rows | time (µs) | weight GB/s |");
    println!("| --- | --- | ---: | ---: | ---: |");
    let shapes = [
        (DType::Q4K, 18944, 3584),
        (DType::Q6K, 3584, 18944),
        (DType::Q8_0, 18944, 3584),
        (DType::Q5_0, 18944, 3584),
    ];
    for (dtype, n, k) in shapes {
        let wbytes = tf_weights::random_blocks(dtype, n * k, seed);
        let dw = gpu.upload(&wbytes)?;
        let x = activations(512, k, seed);
        let dx = gpu.upload(&x)?;
        let block = tf_kernels::matmul::act_block(dtype).expect("quantized");
        if let Some(il) = crate::ops::interleave(dtype, &wbytes, n, k) {
            let dil = gpu.upload(&il)?;
            let mut cfgs: Vec<Option<MmaCfg>> = vec![None];
            cfgs.extend(MMA_CFGS.iter().map(|&c| Some(c)));
            for rows in [1, 2, 4, 8, 16, 32, 64, 512] {
                let act = gpu.quantize(&dx, rows, k, block)?;
                let mut out = gpu.zeros::<f32>(rows * n)?;
                for &cfg in &cfgs {
                    if cfg.is_some_and(|c| !c.takes(&act)) {
                        continue;
                    }
                    let mut go = || gpu.matmul_mma(dtype, &dil, n, &act, &mut out, cfg);
                    go()?;
                    let micros = time(gpu, go)?;
                    let name = match cfg {
                        Some(c) => c.suffix(),
                        None => "auto".into(),
                    };
                    println!(
                        "| {dtype} mma {name} | {n} x {k} | {rows} | {micros:.1} | {:.0} |",
                        wbytes.len() as f64 / micros / 1e3
                    );
                }
                if dtype == DType::Q4K {
                    // The dp4a kernel reads the same layout.
                    gpu.matmul_q4k_interleaved(&dil, n, &act, &mut out)?;
                    let micros = time(gpu, || gpu.matmul_q4k_interleaved(&dil, n, &act, &mut out))?;
                    println!(
                        "| {dtype} Interleaved | {n} x {k} | {rows} | {micros:.1} | {:.0} |",
                        wbytes.len() as f64 / micros / 1e3
                    );
                }
            }
        }
        for form in [MatmulForm::Warp, MatmulForm::Tile] {
            for rows in [1, 2, 4, 8, 16, 32, 64] {
                let act = gpu.quantize(&dx, rows, k, block)?;
                let mut out = gpu.zeros::<f32>(rows * n)?;
                gpu.matmul_q_form(form, dtype, &dw, n, &act, &mut out)?;
                let micros = time(gpu, || {
                    gpu.matmul_q_form(form, dtype, &dw, n, &act, &mut out)
                })?;
                println!(
                    "| {dtype} {form:?} | {n} x {k} | {rows} | {micros:.1} | {:.0} |",
                    wbytes.len() as f64 / micros / 1e3
                );
            }
        }
    }
    Ok(())
}
