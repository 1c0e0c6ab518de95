//! Mamba-2's SSD recurrence (`tf_kernels::mamba2`): equal to its element-by-element reference
//! bit for bit, whatever the chunking of the tokens into calls and the thread count; the
//! convolution's bias; the gated group norm against its definition.

use tf_core::SplitMix64;
use tf_kernels::canon;
use tf_kernels::deltanet::{short_conv, short_conv_bias};
use tf_kernels::mamba2::{gated_group_norm, ssd, time_steps, SsdShape};
use tf_kernels::ThreadPool;

const SHAPE: SsdShape = SsdShape {
    heads: 4,
    head_dim: 8,
    state: 16,
    groups: 2,
};

struct Inputs {
    x: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    dt: Vec<f32>,
    a: Vec<f32>,
    d: Vec<f32>,
}

fn inputs(seed: u64, tokens: usize) -> Inputs {
    let mut r = SplitMix64::new(seed);
    let mut v = |n: usize| -> Vec<f32> { (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect() };
    let s = SHAPE;
    let gw = s.groups * s.state;
    let (x, b, c, raw) = (
        v(tokens * s.inner()),
        v(tokens * gw),
        v(tokens * gw),
        v(tokens * s.heads),
    );
    let mut dt = vec![0.0; raw.len()];
    for t in 0..tokens {
        let r = t * s.heads..(t + 1) * s.heads;
        time_steps(&raw[r.clone()], &[0.5, 0.1, -0.3, 1.0], &mut dt[r]);
    }
    let a = (0..s.heads)
        .map(|h| -canon::exp((1 + h) as f32 * 0.3))
        .collect();
    let d = (0..s.heads).map(|h| 0.5 + 0.25 * h as f32).collect();
    Inputs { x, b, c, dt, a, d }
}

/// The recurrence as the module docs read, element by element.
fn reference(x: &Inputs, state: &mut [f32]) -> Vec<f32> {
    let s = SHAPE;
    let (p, n, inner, gw) = (s.head_dim, s.state, s.inner(), s.groups * s.state);
    let tokens = x.dt.len() / s.heads;
    let mut y = vec![0.0; tokens * inner];
    for t in 0..tokens {
        for h in 0..s.heads {
            let g = h / (s.heads / s.groups);
            let dt = x.dt[t * s.heads + h];
            let decay = canon::exp(dt * x.a[h]);
            for i in 0..p {
                let xp = x.x[t * inner + h * p + i];
                let mut acc = 0.0f32;
                for j in 0..n {
                    let at = h * p * n + i * n + j;
                    state[at] = (dt * xp).mul_add(x.b[t * gw + g * n + j], state[at] * decay);
                    acc = state[at].mul_add(x.c[t * gw + g * n + j], acc);
                }
                y[t * inner + h * p + i] = x.d[h].mul_add(xp, acc);
            }
        }
    }
    y
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn ssd_equals_its_reference_in_any_chunking_and_thread_count() {
    let tokens = 29;
    let x = inputs(3, tokens);
    let mut want_state = vec![0.0; SHAPE.state_len()];
    let want = reference(&x, &mut want_state);
    let s = SHAPE;
    let (inner, gw, hs) = (s.inner(), s.groups * s.state, s.heads);
    for (sizes, threads) in [
        (vec![29], 1),
        (vec![29], 2),
        (vec![1; 29], 2),
        (vec![4, 1, 16, 8], 3),
    ] {
        let pool = ThreadPool::new(threads);
        let mut state = vec![0.0; s.state_len()];
        let mut got = Vec::new();
        let mut t0 = 0;
        for n in sizes.iter().copied() {
            let mut y = vec![0.0; n * inner];
            ssd(
                &pool,
                &s,
                &x.x[t0 * inner..(t0 + n) * inner],
                &x.b[t0 * gw..(t0 + n) * gw],
                &x.c[t0 * gw..(t0 + n) * gw],
                &x.dt[t0 * hs..(t0 + n) * hs],
                (&x.a, &x.d),
                &mut state,
                &mut y,
            );
            got.extend(y);
            t0 += n;
        }
        assert_eq!(bits(&got), bits(&want), "outputs, chunks {sizes:?}");
        assert_eq!(bits(&state), bits(&want_state), "state, chunks {sizes:?}");
    }
}

#[test]
fn the_convolution_bias_is_added_before_the_silu() {
    let (channels, kernel, tokens) = (3, 4, 5);
    let mut r = SplitMix64::new(8);
    let mut v = |n: usize| -> Vec<f32> { (0..n).map(|_| r.next_f32() - 0.5).collect() };
    let (w, x, bias) = (v(channels * kernel), v(tokens * channels), v(channels));
    let zero = vec![0.0; channels];
    let (mut plain, mut with_zero, mut biased) = (
        vec![0.0; tokens * channels],
        vec![0.0; tokens * channels],
        vec![0.0; tokens * channels],
    );
    let st = || vec![0.0; (kernel - 1) * channels];
    short_conv(&w, kernel, &mut st(), &x, &mut plain);
    short_conv_bias(&w, Some(&zero), kernel, &mut st(), &x, &mut with_zero);
    short_conv_bias(&w, Some(&bias), kernel, &mut st(), &x, &mut biased);
    assert_eq!(bits(&plain), bits(&with_zero));
    // Channel 0 of token 0: only the last tap sees an input.
    let sum = w[kernel - 1] * x[0] + bias[0];
    assert!((biased[0] - canon::silu(sum)).abs() < 1e-6);
}

#[test]
fn the_gate_comes_before_the_group_norm() {
    let (width, groups) = (8, 2);
    let y: Vec<f32> = (0..width).map(|i| i as f32 * 0.3 - 1.0).collect();
    let z: Vec<f32> = (0..width).map(|i| 1.0 - i as f32 * 0.2).collect();
    let w: Vec<f32> = (0..width).map(|i| 1.0 + i as f32 * 0.1).collect();
    let mut got = y.clone();
    gated_group_norm(&mut got, &z, &w, groups, 1e-6);
    for g in 0..groups {
        let part: Vec<f64> = (g * 4..(g + 1) * 4)
            .map(|i| y[i] as f64 * canon::silu(z[i]) as f64)
            .collect();
        let rms = (part.iter().map(|v| v * v).sum::<f64>() / 4.0 + 1e-6).sqrt();
        for (j, v) in part.iter().enumerate() {
            let i = g * 4 + j;
            assert!((got[i] as f64 - w[i] as f64 * v / rms).abs() < 1e-5, "{i}");
        }
    }
}
