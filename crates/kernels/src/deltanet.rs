//! Gated DeltaNet (Qwen3-Next, Qwen3.5): the linear-attention layer's recurrent pieces, with one
//! arithmetic for a position's state. The state after token t is the per-token recurrence, in
//! token order, whatever the calls: a prompt prefilled in chunks of any size, one-token decode
//! and a drafted window all run the same steps in the same order, so they give the same bits
//! (`tests/deltanet.rs` checks chunkings and thread counts against the slow reference).
//!
//! Per value head `h`, with its key head `h / (v_heads / k_heads)` (consecutive value heads share
//! a key head, as in transformers), state `S` of `dk x dv` (value index contiguous):
//!
//! ```text
//! S     <- exp(g) * S                       decay (g <= 0)
//! kv[j]  = sum_i S[i][j] * k[i]            i ascending, one FMA a step from 0
//! d[j]   = beta * (v[j] - kv[j])
//! S[i][j] = fma(k[i], d[j], S[i][j])       rank-one update
//! o[j]   = sum_i S[i][j] * q[i]            after the update, i ascending, one FMA a step
//! ```
//!
//! Every value lane does the same scalar operations (a product, an FMA, a difference), so the
//! loops vectorize over `j` without changing a bit; nothing is reassociated.

use crate::canon;
use crate::pool::{SharedOut, ThreadPool};
use tf_core::SplitMix64;

/// Defines `unsafe fn $name(args)`, the safe function `$body` compiled with the target features
/// `$features` (x86-64 only): the same operations, wider instructions. Callers check the
/// features first.
macro_rules! compiled_with {
    ($(#[$doc:meta])* $features:literal, fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name($($arg: $ty),*) {
            $body($($arg),*)
        }
    };
}
pub(crate) use compiled_with;

/// A layer's head layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaShape {
    pub k_heads: usize,
    pub v_heads: usize,
    /// Key (and query) head width.
    pub dk: usize,
    /// Value head width.
    pub dv: usize,
    /// Value head `h` reads key head `h % k_heads` (GGUF converters' order); otherwise
    /// `h / (v_heads / k_heads)` (transformers': consecutive value heads share a key head).
    pub tiled: bool,
}

impl DeltaShape {
    /// Floats of one sequence's state: `v_heads x dk x dv`.
    pub fn state_len(&self) -> usize {
        self.v_heads * self.dk * self.dv
    }

    /// The key head value head `h` reads.
    pub fn k_head(&self, h: usize) -> usize {
        if self.tiled {
            h % self.k_heads
        } else {
            h / (self.v_heads / self.k_heads)
        }
    }

    fn check(&self) {
        assert!(
            self.k_heads > 0 && self.v_heads.is_multiple_of(self.k_heads),
            "value heads ({}) must be a multiple of key heads ({})",
            self.v_heads,
            self.k_heads
        );
    }
}

/// The decay and the write strength of one token's value heads: `g = -exp(a_log) *
/// softplus(a + dt_bias)` (a log-decay, at most 0) and `beta = sigmoid(b)`, each with the
/// canonical functions.
pub fn gates(
    a_log: &[f32],
    dt_bias: &[f32],
    a: &[f32],
    b: &[f32],
    g: &mut [f32],
    beta: &mut [f32],
) {
    let rate: Vec<f32> = a_log.iter().map(|&v| -canon::exp(v)).collect();
    gates_at_rate(&rate, dt_bias, a, b, g, beta);
}

/// [`gates`] with each head's decay rate `-exp(A_log)` given (as GGUF files store it):
/// `g = rate * softplus(a + dt_bias)`, `beta = sigmoid(b)`.
pub fn gates_at_rate(
    rate: &[f32],
    dt_bias: &[f32],
    a: &[f32],
    b: &[f32],
    g: &mut [f32],
    beta: &mut [f32],
) {
    for h in 0..rate.len() {
        g[h] = rate[h] * canon::softplus(a[h] + dt_bias[h]);
        beta[h] = canon::sigmoid(b[h]);
    }
}

/// Scales `x` to unit length: `x * (1 / sqrt(sum x^2 + eps))`, the sum in the canonical dot
/// order ([`canon::dot_ref`]).
pub fn l2_normalize(x: &mut [f32], eps: f32) {
    let inv = 1.0 / (canon::dot_ref(x, x) + eps).sqrt();
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The short causal convolution of one sequence's tokens, then SiLU: channel `c` of token `t`
/// is `silu(sum_i w[c][i] * x[t - K + 1 + i][c])` (`i` ascending, one FMA a step from 0), inputs
/// before the first token taken from `state` (the last `K - 1` inputs, oldest first, channel
/// contiguous), which ends holding this call's last `K - 1` inputs. `x` and `out` are
/// `tokens x channels`; `w` is `channels x K`.
pub fn short_conv(w: &[f32], kernel: usize, state: &mut [f32], x: &[f32], out: &mut [f32]) {
    short_conv_bias(w, None, kernel, state, x, out);
}

/// [`short_conv`] with a bias per channel added to each sum before the SiLU (Mamba-2).
pub fn short_conv_bias(
    w: &[f32],
    bias: Option<&[f32]>,
    kernel: usize,
    state: &mut [f32],
    x: &[f32],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if fma_level() > 0 {
        // SAFETY: the CPU has AVX2 and FMA (checked); the body is safe code.
        unsafe { short_conv_fma(w, bias, kernel, state, x, out) };
        return;
    }
    short_conv_body(w, bias, kernel, state, x, out);
}

compiled_with! {
    /// [`short_conv_bias`] compiled with FMA instructions: `mul_add` becomes one instruction
    /// instead of a library call (a fused multiply-add is one correctly rounded operation either
    /// way).
    "avx2,fma",
    fn short_conv_fma(
        w: &[f32],
        bias: Option<&[f32]>,
        kernel: usize,
        state: &mut [f32],
        x: &[f32],
        out: &mut [f32],
    ) => short_conv_body
}

/// 0: no FMA; 1: AVX2 + FMA; 2: AVX-512F too.
#[cfg(target_arch = "x86_64")]
pub(crate) fn fma_level() -> u8 {
    static LEVEL: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        if std::env::var("TENSORFOLD_SIMD").is_ok_and(|v| v == "scalar") {
            return 0;
        }
        let fma = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        match (fma, is_x86_feature_detected!("avx512f")) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        }
    })
}

#[inline(always)]
fn short_conv_body(
    w: &[f32],
    bias: Option<&[f32]>,
    kernel: usize,
    state: &mut [f32],
    x: &[f32],
    out: &mut [f32],
) {
    let channels = w.len() / kernel;
    let hist = kernel - 1;
    assert_eq!(state.len(), hist * channels, "conv state size");
    let tokens = x.len() / channels;
    // The inputs in time order: the state, then this call's tokens.
    let mut all = Vec::with_capacity((hist + tokens) * channels);
    all.extend_from_slice(state);
    all.extend_from_slice(x);
    for t in 0..tokens {
        let o = &mut out[t * channels..(t + 1) * channels];
        o.fill(0.0);
        for i in 0..kernel {
            let xi = &all[(t + i) * channels..(t + i + 1) * channels];
            for c in 0..channels {
                o[c] = w[c * kernel + i].mul_add(xi[c], o[c]);
            }
        }
        if let Some(bias) = bias {
            for (v, &bb) in o.iter_mut().zip(bias) {
                *v += bb;
            }
        }
        for v in o.iter_mut() {
            *v = canon::silu(*v);
        }
    }
    state.copy_from_slice(&all[tokens * channels..]);
}

/// One sequence's tokens through the gated delta rule, in token order (module docs). `q` and `k`
/// are `tokens x (k_heads * dk)` (unit length; `q` also scaled by `1 / sqrt(dk)`), `v` is
/// `tokens x (v_heads * dv)`, `g` and `beta` are `tokens x v_heads`; `state` is
/// `v_heads x dk x dv`, updated; `out` gets `tokens x (v_heads * dv)`. Value heads run in
/// parallel on `pool`, each one's steps unchanged.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule(
    pool: &ThreadPool,
    shape: &DeltaShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &mut [f32],
    out: &mut [f32],
) {
    shape.check();
    let (hv, dk, dv) = (shape.v_heads, shape.dk, shape.dv);
    let (kw, vw) = (shape.k_heads * dk, hv * dv);
    let tokens = g.len() / hv;
    assert_eq!(state.len(), shape.state_len(), "delta-rule state size");
    assert!(q.len() == tokens * kw && k.len() == tokens * kw, "q/k size");
    assert!(
        v.len() == tokens * vw && out.len() == tokens * vw,
        "v/out size"
    );
    assert_eq!(beta.len(), tokens * hv, "beta size");
    let states = SharedOut(state.as_mut_ptr());
    let outs = SharedOut(out.as_mut_ptr());
    pool.for_ranges(hv, 1, &|heads| {
        let mut kv = vec![0f32; dv];
        for h in heads {
            // SAFETY: head `h`'s state block is touched by this job only.
            let s = unsafe { states.slice(h * dk * dv, dk * dv) };
            let kh = shape.k_head(h);
            for t in 0..tokens {
                let qt = &q[t * kw + kh * dk..t * kw + (kh + 1) * dk];
                let kt = &k[t * kw + kh * dk..t * kw + (kh + 1) * dk];
                let vt = &v[t * vw + h * dv..t * vw + (h + 1) * dv];
                // SAFETY: token `t`'s slice of head `h` is written by this job only.
                let ot = unsafe { outs.slice(t * vw + h * dv, dv) };
                let (gt, bt) = (g[t * hv + h], beta[t * hv + h]);
                #[cfg(target_arch = "x86_64")]
                match fma_level() {
                    // SAFETY: the CPU has the features (checked); the body is safe code.
                    2 => unsafe { step_avx512(s, qt, kt, vt, gt, bt, &mut kv, ot) },
                    // SAFETY: as above.
                    1 => unsafe { step_fma(s, qt, kt, vt, gt, bt, &mut kv, ot) },
                    _ => step(s, qt, kt, vt, gt, bt, &mut kv, ot),
                }
                #[cfg(not(target_arch = "x86_64"))]
                step(s, qt, kt, vt, gt, bt, &mut kv, ot);
            }
        }
    });
}

compiled_with! {
    /// [`step`] compiled with AVX2 and FMA: the same scalar operations per value lane, eight
    /// lanes an instruction.
    "avx2,fma",
    fn step_fma(
        s: &mut [f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        g: f32,
        beta: f32,
        kv: &mut [f32],
        o: &mut [f32],
    ) => step
}

compiled_with! {
    /// [`step`] compiled with AVX-512: sixteen lanes an instruction.
    "avx512f,avx2,fma",
    fn step_avx512(
        s: &mut [f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        g: f32,
        beta: f32,
        kv: &mut [f32],
        o: &mut [f32],
    ) => step
}

/// One token of one value head (module docs).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: f32,
    beta: f32,
    kv: &mut [f32],
    o: &mut [f32],
) {
    let dv = v.len();
    let decay = canon::exp(g);
    // Decay and read in one pass: each state value is decayed, stored, and summed into kv in
    // the same order as two passes would (kv ascends over i either way).
    kv.fill(0.0);
    for (i, &ki) in k.iter().enumerate() {
        let row = &mut s[i * dv..(i + 1) * dv];
        for j in 0..dv {
            row[j] *= decay;
            kv[j] = row[j].mul_add(ki, kv[j]);
        }
    }
    for j in 0..dv {
        kv[j] = beta * (v[j] - kv[j]);
    }
    // Update and read out in one pass: row i is final once updated, and o ascends over i.
    o.fill(0.0);
    for (i, (&ki, &qi)) in k.iter().zip(q).enumerate() {
        let row = &mut s[i * dv..(i + 1) * dv];
        for j in 0..dv {
            row[j] = ki.mul_add(kv[j], row[j]);
            o[j] = row[j].mul_add(qi, o[j]);
        }
    }
}

/// The gated RMS norm of a head's output: `w * (o / sqrt(mean(o^2) + eps)) * silu(z)`, the sum
/// of squares in the canonical dot order.
pub fn gated_rms_norm(o: &mut [f32], z: &[f32], w: &[f32], eps: f32) {
    let ms = canon::dot_ref(o, o) / o.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    for ((x, &zi), &wi) in o.iter_mut().zip(z).zip(w) {
        *x = wi * (*x * inv) * canon::silu(zi);
    }
}

/// One sequence's inputs to [`delta_rule`], token-major.
pub struct DeltaInputs {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub g: Vec<f32>,
    pub beta: Vec<f32>,
}

/// Random inputs as the layer makes them (tests and the GPU conformance checks): unit-length
/// keys and queries, the queries scaled by `1 / sqrt(dk)`, gates from random projections with
/// `A_log = ln(0.5 + 0.3 h)` and `dt_bias = 1`.
pub fn random_inputs(s: &DeltaShape, tokens: usize, seed: u64) -> DeltaInputs {
    let mut r = SplitMix64::new(seed);
    let mut rand = |n: usize| -> Vec<f32> { (0..n).map(|_| r.next_f32_signed()).collect() };
    let (mut q, mut k) = (
        rand(tokens * s.k_heads * s.dk),
        rand(tokens * s.k_heads * s.dk),
    );
    let v = rand(tokens * s.v_heads * s.dv);
    for x in q.chunks_mut(s.dk).chain(k.chunks_mut(s.dk)) {
        l2_normalize(x, 1e-6);
    }
    let scale = 1.0 / (s.dk as f32).sqrt();
    q.iter_mut().for_each(|x| *x *= scale);
    let a_log: Vec<f32> = (0..s.v_heads)
        .map(|h| (0.5 + h as f32 * 0.3).ln())
        .collect();
    let dt_bias = vec![1.0; s.v_heads];
    let (a, b) = (rand(tokens * s.v_heads), rand(tokens * s.v_heads));
    let (mut g, mut beta) = (vec![0.0; a.len()], vec![0.0; a.len()]);
    for t in 0..tokens {
        let at = t * s.v_heads..(t + 1) * s.v_heads;
        let (gt, bt) = (&mut g[at.clone()], &mut beta[at.clone()]);
        gates(&a_log, &dt_bias, &a[at.clone()], &b[at], gt, bt);
    }
    DeltaInputs { q, k, v, g, beta }
}
