//! Gated DeltaNet kernels (`tf_kernels::deltanet`): the delta rule equals its slow reference bit
//! for bit, and gives the same bits whatever the chunking of the tokens into calls and whatever
//! the thread count; it is the same mathematics as the chunked form transformers prefills with
//! (an f64 implementation of that form, to a tolerance); the short convolution carries its state
//! across calls exactly; the canonical `ln`, `softplus` and `sigmoid` are close to libm's.

use tf_core::SplitMix64;
use tf_kernels::canon;
use tf_kernels::deltanet::{delta_rule, random_inputs, short_conv, DeltaInputs, DeltaShape};
use tf_kernels::ThreadPool;

const SHAPE: DeltaShape = DeltaShape {
    k_heads: 2,
    v_heads: 4,
    dk: 16,
    dv: 24,
    tiled: false,
};

/// The same heads in GGUF's order (value head h reads key head h % 2).
const TILED: DeltaShape = DeltaShape {
    tiled: true,
    ..SHAPE
};

type Inputs = DeltaInputs;

fn inputs(seed: u64, tokens: usize) -> Inputs {
    random_inputs(&SHAPE, tokens, seed)
}

/// The delta rule as its definition reads, element by element (value index outer).
fn reference(x: &Inputs, state: &mut [f32]) -> Vec<f32> {
    reference_of(&SHAPE, x, state)
}

fn reference_of(s: &DeltaShape, x: &Inputs, state: &mut [f32]) -> Vec<f32> {
    let (kw, vw) = (s.k_heads * s.dk, s.v_heads * s.dv);
    let tokens = x.g.len() / s.v_heads;
    let mut out = vec![0.0; tokens * vw];
    for t in 0..tokens {
        for h in 0..s.v_heads {
            let kh = match s.tiled {
                true => h % s.k_heads,
                false => h / (s.v_heads / s.k_heads),
            };
            let st = &mut state[h * s.dk * s.dv..(h + 1) * s.dk * s.dv];
            let decay = canon::exp(x.g[t * s.v_heads + h]);
            for e in st.iter_mut() {
                *e *= decay;
            }
            let k = |i: usize| x.k[t * kw + kh * s.dk + i];
            let q = |i: usize| x.q[t * kw + kh * s.dk + i];
            for j in 0..s.dv {
                let mut kv = 0.0f32;
                for i in 0..s.dk {
                    kv = st[i * s.dv + j].mul_add(k(i), kv);
                }
                let d = x.beta[t * s.v_heads + h] * (x.v[t * vw + h * s.dv + j] - kv);
                for i in 0..s.dk {
                    st[i * s.dv + j] = k(i).mul_add(d, st[i * s.dv + j]);
                }
            }
            for j in 0..s.dv {
                let mut o = 0.0f32;
                for i in 0..s.dk {
                    o = st[i * s.dv + j].mul_add(q(i), o);
                }
                out[t * vw + h * s.dv + j] = o;
            }
        }
    }
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs `x` in calls of the given sizes (state carried between them) on `threads` threads.
fn chunked(x: &Inputs, sizes: &[usize], threads: usize) -> (Vec<f32>, Vec<f32>) {
    chunked_of(&SHAPE, x, sizes, threads)
}

fn chunked_of(s: &DeltaShape, x: &Inputs, sizes: &[usize], threads: usize) -> (Vec<f32>, Vec<f32>) {
    let pool = ThreadPool::new(threads);
    let (kw, vw, hv) = (s.k_heads * s.dk, s.v_heads * s.dv, s.v_heads);
    let mut state = vec![0.0; s.state_len()];
    let mut out = Vec::new();
    let mut t0 = 0;
    for &n in sizes {
        let mut o = vec![0.0; n * vw];
        delta_rule(
            &pool,
            s,
            &x.q[t0 * kw..(t0 + n) * kw],
            &x.k[t0 * kw..(t0 + n) * kw],
            &x.v[t0 * vw..(t0 + n) * vw],
            &x.g[t0 * hv..(t0 + n) * hv],
            &x.beta[t0 * hv..(t0 + n) * hv],
            &mut state,
            &mut o,
        );
        out.extend(o);
        t0 += n;
    }
    (out, state)
}

#[test]
fn the_delta_rule_equals_its_reference_in_any_chunking_and_thread_count() {
    let tokens = 37;
    let x = inputs(1, tokens);
    let mut ref_state = vec![0.0; SHAPE.state_len()];
    let want = reference(&x, &mut ref_state);
    for (sizes, threads) in [
        (vec![37], 1),
        (vec![37], 2),
        (vec![1; 37], 2),
        (vec![5, 1, 16, 15], 3),
        (vec![36, 1], 2),
    ] {
        let (out, state) = chunked(&x, &sizes, threads);
        assert_eq!(
            bits(&out),
            bits(&want),
            "outputs, chunks {sizes:?}, {threads} threads"
        );
        assert_eq!(bits(&state), bits(&ref_state), "state, chunks {sizes:?}");
    }
}

#[test]
fn tiled_value_heads_read_their_key_head_and_differ_from_grouped() {
    let x = random_inputs(&TILED, 9, 5);
    let mut state = vec![0.0; TILED.state_len()];
    let want = reference_of(&TILED, &x, &mut state);
    let (out, got_state) = chunked_of(&TILED, &x, &[4, 5], 2);
    assert_eq!(bits(&out), bits(&want));
    assert_eq!(bits(&got_state), bits(&state));
    let (grouped, _) = chunked_of(&SHAPE, &x, &[9], 1);
    assert_ne!(bits(&grouped), bits(&out), "the head map must matter");
}

/// The chunked form transformers prefills with (`torch_chunk_gated_delta_rule`), in f64, for one
/// head: chunks of 64, the within-chunk triangular solve, the state carried between chunks.
fn chunk_form(
    q: &[Vec<f64>],
    k: &[Vec<f64>],
    v: &[Vec<f64>],
    g: &[f64],
    beta: &[f64],
) -> Vec<Vec<f64>> {
    let (n, dk, dv) = (q.len(), q[0].len(), v[0].len());
    let cs = 64;
    let mut s = vec![vec![0.0f64; dv]; dk];
    let mut out = Vec::new();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for c0 in (0..n).step_by(cs) {
        let m = cs.min(n - c0);
        let mut gam = vec![0.0; m];
        let mut acc = 0.0;
        for i in 0..m {
            acc += g[c0 + i];
            gam[i] = acc;
        }
        let gmat = |i: usize, j: usize| if i >= j { (gam[i] - gam[j]).exp() } else { 0.0 };
        // (I + L) T = I, L = strict lower part of diag(beta) K K^T ⊙ Gamma.
        let l = |i: usize, j: usize| beta[c0 + i] * dot(&k[c0 + i], &k[c0 + j]) * gmat(i, j);
        let solve = |rhs: &dyn Fn(usize) -> Vec<f64>| -> Vec<Vec<f64>> {
            let mut x: Vec<Vec<f64>> = Vec::with_capacity(m);
            for i in 0..m {
                let mut r = rhs(i);
                for (j, xj) in x.iter().enumerate() {
                    let lij = l(i, j);
                    for (a, b) in r.iter_mut().zip(xj) {
                        *a -= lij * b;
                    }
                }
                x.push(r);
            }
            x
        };
        let u = solve(&|i| v[c0 + i].iter().map(|x| x * beta[c0 + i]).collect());
        let w = solve(&|i| {
            k[c0 + i]
                .iter()
                .map(|x| x * beta[c0 + i] * gam[i].exp())
                .collect()
        });
        // V' = U - W S
        let vp: Vec<Vec<f64>> = (0..m)
            .map(|i| {
                (0..dv)
                    .map(|j| u[i][j] - (0..dk).map(|a| w[i][a] * s[a][j]).sum::<f64>())
                    .collect()
            })
            .collect();
        for i in 0..m {
            let o: Vec<f64> = (0..dv)
                .map(|j| {
                    let inter: f64 = (0..dk).map(|a| q[c0 + i][a] * gam[i].exp() * s[a][j]).sum();
                    let intra: f64 = (0..=i)
                        .map(|t| dot(&q[c0 + i], &k[c0 + t]) * gmat(i, t) * vp[t][j])
                        .sum();
                    inter + intra
                })
                .collect();
            out.push(o);
        }
        let last = gam[m - 1];
        for a in 0..dk {
            for j in 0..dv {
                let add: f64 = (0..m)
                    .map(|t| k[c0 + t][a] * (last - gam[t]).exp() * vp[t][j])
                    .sum();
                s[a][j] = last.exp() * s[a][j] + add;
            }
        }
    }
    out
}

#[test]
fn the_recurrence_is_the_chunked_form_transformers_prefills_with() {
    let s = SHAPE;
    let tokens = 150; // three chunks of 64, the last one partial
    let x = inputs(7, tokens);
    let (out, _) = chunked(&x, &[tokens], 2);
    let (kw, vw, hv) = (s.k_heads * s.dk, s.v_heads * s.dv, s.v_heads);
    let mut worst = 0.0f64;
    for h in 0..hv {
        let kh = s.k_head(h);
        let rows = |src: &[f32], w: usize, at: usize, len: usize| -> Vec<Vec<f64>> {
            (0..tokens)
                .map(|t| {
                    src[t * w + at..t * w + at + len]
                        .iter()
                        .map(|&v| v as f64)
                        .collect()
                })
                .collect()
        };
        let q = rows(&x.q, kw, kh * s.dk, s.dk);
        let k = rows(&x.k, kw, kh * s.dk, s.dk);
        let v = rows(&x.v, vw, h * s.dv, s.dv);
        let g: Vec<f64> = (0..tokens).map(|t| x.g[t * hv + h] as f64).collect();
        let beta: Vec<f64> = (0..tokens).map(|t| x.beta[t * hv + h] as f64).collect();
        let want = chunk_form(&q, &k, &v, &g, &beta);
        for t in 0..tokens {
            for j in 0..s.dv {
                let got = out[t * vw + h * s.dv + j] as f64;
                worst = worst.max((got - want[t][j]).abs());
            }
        }
    }
    assert!(
        worst < 1e-6,
        "largest difference from the chunked form: {worst}"
    );
}

#[test]
fn the_short_convolution_carries_its_state_across_calls() {
    let (channels, kernel, tokens) = (12, 4, 11);
    let mut r = SplitMix64::new(3);
    let w: Vec<f32> = (0..channels * kernel)
        .map(|_| r.next_f32_signed())
        .collect();
    let x: Vec<f32> = (0..tokens * channels)
        .map(|_| r.next_f32_signed())
        .collect();
    // Directly from the definition: zeros before the first token.
    let mut want = vec![0.0f32; tokens * channels];
    for t in 0..tokens {
        for c in 0..channels {
            let mut acc = 0.0f32;
            for i in 0..kernel {
                let src = t as isize - (kernel - 1) as isize + i as isize;
                let xi = if src < 0 {
                    0.0
                } else {
                    x[src as usize * channels + c]
                };
                acc = w[c * kernel + i].mul_add(xi, acc);
            }
            want[t * channels + c] = canon::silu(acc);
        }
    }
    for sizes in [vec![11], vec![1; 11], vec![2, 5, 4]] {
        let mut state = vec![0.0; (kernel - 1) * channels];
        let mut got = Vec::new();
        let mut t0 = 0;
        for n in sizes.iter().copied() {
            let mut o = vec![0.0; n * channels];
            short_conv(
                &w,
                kernel,
                &mut state,
                &x[t0 * channels..(t0 + n) * channels],
                &mut o,
            );
            got.extend(o);
            t0 += n;
        }
        assert_eq!(bits(&got), bits(&want), "chunks {sizes:?}");
        assert_eq!(
            bits(&state),
            bits(&x[(tokens - 3) * channels..]),
            "state holds the last inputs"
        );
    }
}

#[test]
fn canonical_ln_softplus_and_sigmoid_are_close_to_libm() {
    let mut r = SplitMix64::new(9);
    for _ in 0..20_000 {
        let x = (r.next_f64() * 80.0 - 40.0).exp() as f32;
        let want = (x as f64).ln();
        let got = canon::ln(x) as f64;
        assert!(
            (got - want).abs() <= 3e-7 * want.abs().max(1.0),
            "ln({x}) = {got}, libm {want}"
        );
    }
    assert_eq!(canon::ln(1.0), 0.0);
    assert_eq!(canon::ln(0.0), f32::NEG_INFINITY);
    assert!(canon::ln(-1.0).is_nan());
    for i in -400..=400 {
        let x = i as f32 * 0.1;
        let sp = (1.0 + (x as f64).exp()).ln();
        assert!(
            (canon::softplus(x) as f64 - sp).abs() <= 1e-6 * sp.max(1.0),
            "softplus({x})"
        );
        let sg = 1.0 / (1.0 + (-x as f64).exp());
        assert!(
            (canon::sigmoid(x) as f64 - sg).abs() <= 1e-6,
            "sigmoid({x})"
        );
    }
}
