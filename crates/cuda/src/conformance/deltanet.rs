//! Gated DeltaNet's delta rule on the GPU against `tf_kernels::deltanet::delta_rule`, bitwise:
//! the outputs of every token and the state after the last, for Qwen3-Next's head layout (16 key
//! heads, 32 value heads, 128 wide) and a small one, over token counts that mirror decode (1), a
//! drafted window (5) and prefill chunks, from a state some tokens in. (The CPU's result does not
//! depend on how tokens are split into calls: `tf-kernels`' tests.)

use tf_kernels::deltanet::{delta_rule, random_inputs as inputs, DeltaShape};
use tf_kernels::ThreadPool;

use super::ops::{bits_equal, Row};
use crate::{Gpu, Result};

pub(crate) fn run(gpu: &Gpu, pool: &ThreadPool, seed: u64, table: &mut Vec<Row>) -> Result<()> {
    let shapes = [
        DeltaShape {
            k_heads: 16,
            v_heads: 32,
            dk: 128,
            dv: 128,
            tiled: false,
        },
        DeltaShape {
            k_heads: 2,
            v_heads: 4,
            dk: 16,
            dv: 24,
            tiled: true,
        },
    ];
    for s in &shapes {
        for tokens in [1usize, 5, 64, 129] {
            let x = inputs(s, tokens, seed ^ tokens as u64);
            // A state some tokens in, as a conversation's would be.
            let start: Vec<f32> = {
                let warm = inputs(s, 3, seed ^ 0xdead);
                let mut st = vec![0.0; s.state_len()];
                let mut o = vec![0.0; 3 * s.v_heads * s.dv];
                delta_rule(
                    pool, s, &warm.q, &warm.k, &warm.v, &warm.g, &warm.beta, &mut st, &mut o,
                );
                st
            };
            let mut want_state = start.clone();
            let mut want = vec![0.0; tokens * s.v_heads * s.dv];
            delta_rule(
                pool,
                s,
                &x.q,
                &x.k,
                &x.v,
                &x.g,
                &x.beta,
                &mut want_state,
                &mut want,
            );
            let up = |v: &[f32]| gpu.upload(v);
            let (dq, dk, dv) = (up(&x.q)?, up(&x.k)?, up(&x.v)?);
            let (dg, db) = (up(&x.g)?, up(&x.beta)?);
            let mut dstate = up(&start)?;
            let mut dout = gpu.zeros::<f32>(want.len())?;
            let t0 = std::time::Instant::now();
            gpu.delta_rule(s, tokens, &dq, &dk, &dv, &dg, &db, &mut dstate, &mut dout)?;
            gpu.sync()?;
            let micros = t0.elapsed().as_secs_f64() * 1e6;
            let (eq, md) = bits_equal(&gpu.download(&dout)?, &want);
            let (seq, smd) = bits_equal(&gpu.download(&dstate)?, &want_state);
            table.push(Row {
                op: "delta_rule".into(),
                ty: format!("{}/{}x{} out", s.k_heads, s.v_heads, s.dk),
                rows: tokens,
                equal: eq,
                total: want.len(),
                max_diff: md,
                micros,
            });
            table.push(Row {
                op: "delta_rule".into(),
                ty: format!("{}/{}x{} state", s.k_heads, s.v_heads, s.dk),
                rows: tokens,
                equal: seq,
                total: want_state.len(),
                max_diff: smd,
                micros: 0.0,
            });
        }
    }
    Ok(())
}
