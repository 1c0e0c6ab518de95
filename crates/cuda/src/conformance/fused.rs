//! `gpu-check` of the kernels that also quantize their output for the next matmul (RMSNorm,
//! residual add + RMSNorm, SwiGLU and GeGLU over a fused gate|up row): the float output against the CPU
//! op, and the quantized form against `QuantAct` of the CPU's output, both bitwise.

use crate::ops::Glu;
use crate::Gpu;
use crate::Result;
use tf_kernels::actq::{ActBlock, QuantAct};
use tf_kernels::{ops, SimdLevel};

use super::ops::{activations, bits_equal, quant_equal, time, Row};

/// Row width (a multiple of 256) and gated-activation width (Qwen2.5-1.5B's FFN).
const N: usize = 1536;
const F: usize = 8960;

#[derive(Clone, Copy)]
enum Op {
    Norm,
    AddNorm,
    Glu(Glu),
}

pub fn run(
    gpu: &Gpu,
    level: SimdLevel,
    row_counts: &[usize],
    seed: u64,
    table: &mut Vec<Row>,
) -> Result<()> {
    let max_rows = row_counts.iter().copied().max().unwrap_or(1);
    let x = activations(max_rows, N, seed ^ 0x1111);
    let y = activations(max_rows, N, seed ^ 0x2222);
    let w: Vec<f32> = (0..N).map(|i| 1.0 + (i % 13) as f32 / 10.0).collect();
    // gate|up rows, gate values wide enough to reach exp's cut-offs.
    let gate: Vec<f32> = activations(max_rows, F, seed ^ 0x3333)
        .iter()
        .map(|v| v * 40.0)
        .collect();
    let up = activations(max_rows, F, seed ^ 0x4444);
    let gu: Vec<f32> = (0..max_rows)
        .flat_map(|r| {
            let row = r * F..(r + 1) * F;
            gate[row.clone()].iter().chain(&up[row]).copied()
        })
        .collect();

    let mut sum = vec![0f32; max_rows * N];
    for (i, s) in sum.iter_mut().enumerate() {
        *s = x[i] + y[i];
    }
    let norm_of = |v: &[f32]| {
        let mut out = vec![0f32; max_rows * N];
        for r in 0..max_rows {
            let row = r * N..(r + 1) * N;
            ops::rms_norm(level, &v[row.clone()], &w, 1e-6, &mut out[row]);
        }
        out
    };
    let glu_of = |mlp: tf_models::Mlp| {
        let mut out = vec![0f32; max_rows * F];
        mlp.apply(level, &gate, &up, &mut out);
        out
    };

    let (dx, dy, dw, dgu) = (
        gpu.upload(&x)?,
        gpu.upload(&y)?,
        gpu.upload(&w)?,
        gpu.upload(&gu)?,
    );
    for (op, name, want, width) in [
        (Op::Norm, "rms_norm_q", norm_of(&x), N),
        (Op::AddNorm, "add_rms_norm_q", norm_of(&sum), N),
        (
            Op::Glu(Glu::Silu),
            "glu_fused_q silu",
            glu_of(tf_models::Mlp::SwiGlu),
            F,
        ),
        (
            Op::Glu(Glu::GeluTanh),
            "glu_fused_q gelu",
            glu_of(tf_models::Mlp::GeGlu),
            F,
        ),
    ] {
        for block in [ActBlock::B32, ActBlock::B256] {
            let want_q = QuantAct::new(SimdLevel::Scalar, block, &want, max_rows, width);
            for &rows in row_counts {
                let mut out = gpu.zeros::<f32>(rows * width)?;
                let mut act = gpu.act_buffer(block, rows, width)?;
                let mut launch = || -> Result<()> {
                    match op {
                        Op::Norm => {
                            gpu.rms_norm(&dx, &dw, N, 1e-6, rows, &mut out, Some(&mut act))?
                        }
                        Op::AddNorm => {
                            // x is updated in place: a fresh copy per launch.
                            let mut dxa = gpu.upload(&x[..rows * N])?;
                            gpu.add_rms_norm(
                                &mut dxa,
                                &dy,
                                &dw,
                                N,
                                1e-6,
                                rows,
                                &mut out,
                                Some(&mut act),
                            )?
                        }
                        Op::Glu(a) => gpu.glu_fused(a, &dgu, F, rows, &mut out, Some(&mut act))?,
                    }
                    Ok(())
                };
                launch()?;
                let micros = time(gpu, &mut launch)?;
                let got = gpu.download(&out)?;
                let (feq, fmax) = bits_equal(&got, &want[..rows * width]);
                let (qeq, qtotal, qmax) = quant_equal(gpu, &act, &want_q, rows)?;
                table.push(Row {
                    op: name.into(),
                    ty: format!("n={width} B{}", block.values()),
                    rows,
                    equal: feq + qeq,
                    total: rows * width + qtotal,
                    max_diff: fmax.max(qmax),
                    micros,
                });
            }
        }
    }
    Ok(())
}
