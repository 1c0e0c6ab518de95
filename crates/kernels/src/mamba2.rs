//! Mamba-2 (SSD) for hybrid models (Nemotron-H): the selective state-space recurrence with one
//! arithmetic for a position's state, as for Gated DeltaNet (`deltanet.rs`): the per-token
//! recurrence in token order, whatever the calls, so prefill in any chunks, one-token decode
//! and a drafted window give the same bits.
//!
//! Per head `h` (head width `P`, state width `N`, group `g = h / (heads / groups)` whose `B`
//! and `C` it reads), state `S` of `P x N` (state index contiguous), with
//! `dt = softplus(dt_raw + dt_bias)` and `A = -exp(A_log)`:
//!
//! ```text
//! decay   = exp(dt * A)
//! S[p][n] = fma(dt * x[p], B[n], S[p][n] * decay)
//! y[p]    = fma(D, x[p], sum_n S[p][n] * C[n])     n ascending, one FMA a step from 0
//! ```

use crate::canon;
use crate::pool::{SharedOut, ThreadPool};

/// A Mamba-2 layer's head layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsdShape {
    pub heads: usize,
    /// Channels of a head (`P`).
    pub head_dim: usize,
    /// State width per head (`N`).
    pub state: usize,
    /// Groups sharing `B` and `C` (heads are split evenly among them).
    pub groups: usize,
}

impl SsdShape {
    /// Floats of one sequence's state: `heads x head_dim x state`.
    pub fn state_len(&self) -> usize {
        self.heads * self.head_dim * self.state
    }

    /// Width of the heads' channels (`x`, `y`, `z`).
    pub fn inner(&self) -> usize {
        self.heads * self.head_dim
    }

    /// The group head `h` reads `B` and `C` of.
    pub fn group(&self, h: usize) -> usize {
        h / (self.heads / self.groups)
    }
}

/// Each head's step and decay input: `dt = softplus(raw + bias)`.
pub fn time_steps(raw: &[f32], bias: &[f32], dt: &mut [f32]) {
    for ((d, &r), &b) in dt.iter_mut().zip(raw).zip(bias) {
        *d = canon::softplus(r + b);
    }
}

/// One sequence's tokens through the SSD recurrence, in token order (module docs). `x` is
/// `tokens x inner`, `b` and `c` are `tokens x (groups * state)`, `dt` is `tokens x heads`;
/// `a` (`-exp(A_log)`) and `d` are per head; `s` is `heads x head_dim x state`, updated; `y`
/// gets `tokens x inner`. Heads run in parallel on `pool`, each one's steps unchanged.
#[allow(clippy::too_many_arguments)]
pub fn ssd(
    pool: &ThreadPool,
    shape: &SsdShape,
    x: &[f32],
    b: &[f32],
    c: &[f32],
    dt: &[f32],
    (a, d): (&[f32], &[f32]),
    s: &mut [f32],
    y: &mut [f32],
) {
    let (hs, p, n) = (shape.heads, shape.head_dim, shape.state);
    assert!(
        shape.groups > 0 && hs.is_multiple_of(shape.groups),
        "heads ({hs}) must be a multiple of groups ({})",
        shape.groups
    );
    let (inner, gw) = (hs * p, shape.groups * n);
    let tokens = dt.len() / hs;
    assert_eq!(s.len(), shape.state_len(), "SSD state size");
    assert!(
        x.len() == tokens * inner && y.len() == tokens * inner,
        "x/y size"
    );
    assert!(b.len() == tokens * gw && c.len() == tokens * gw, "B/C size");
    let states = SharedOut(s.as_mut_ptr());
    let outs = SharedOut(y.as_mut_ptr());
    pool.for_ranges(hs, 1, &|heads| {
        for h in heads {
            // SAFETY: head `h`'s state block is touched by this job only.
            let sh = unsafe { states.slice(h * p * n, p * n) };
            let g = shape.group(h);
            for t in 0..tokens {
                let xt = &x[t * inner + h * p..t * inner + (h + 1) * p];
                let bt = &b[t * gw + g * n..t * gw + (g + 1) * n];
                let ct = &c[t * gw + g * n..t * gw + (g + 1) * n];
                // SAFETY: token `t`'s slice of head `h` is written by this job only.
                let yt = unsafe { outs.slice(t * inner + h * p, p) };
                let (dth, ah, dh) = (dt[t * hs + h], a[h], d[h]);
                #[cfg(target_arch = "x86_64")]
                match crate::deltanet::fma_level() {
                    // SAFETY: the CPU has the features (checked); the body is safe code.
                    2 => unsafe { step_avx512(sh, xt, bt, ct, (dth, ah, dh), yt) },
                    // SAFETY: as above.
                    1 => unsafe { step_fma(sh, xt, bt, ct, (dth, ah, dh), yt) },
                    _ => step(sh, xt, bt, ct, (dth, ah, dh), yt),
                }
                #[cfg(not(target_arch = "x86_64"))]
                step(sh, xt, bt, ct, (dth, ah, dh), yt);
            }
        }
    });
}

crate::deltanet::compiled_with! {
    /// [`step`] compiled with AVX2 and FMA.
    "avx2,fma",
    fn step_fma(s: &mut [f32], x: &[f32], b: &[f32], c: &[f32], coef: (f32, f32, f32), y: &mut [f32]) => step
}

crate::deltanet::compiled_with! {
    /// [`step`] compiled with AVX-512.
    "avx512f,avx2,fma",
    fn step_avx512(s: &mut [f32], x: &[f32], b: &[f32], c: &[f32], coef: (f32, f32, f32), y: &mut [f32]) => step
}

/// One token of one head (module docs): each state row `p` is decayed, updated and read in one
/// pass, its entries in ascending `n`.
#[inline(always)]
fn step(
    s: &mut [f32],
    x: &[f32],
    b: &[f32],
    c: &[f32],
    (dt, a, d): (f32, f32, f32),
    y: &mut [f32],
) {
    let n = b.len();
    let decay = canon::exp(dt * a);
    for (p, (&xp, yp)) in x.iter().zip(y.iter_mut()).enumerate() {
        let row = &mut s[p * n..(p + 1) * n];
        let u = dt * xp;
        let mut acc = 0.0f32;
        for j in 0..n {
            row[j] = u.mul_add(b[j], row[j] * decay);
            acc = row[j].mul_add(c[j], acc);
        }
        *yp = d.mul_add(xp, acc);
    }
}

/// The gated, grouped RMS norm of the heads' output: `y * silu(z)` first, then each group of
/// `y.len() / groups` values scaled to unit RMS (`eps` added), times `w`; the sums of squares in
/// the canonical dot order.
pub fn gated_group_norm(y: &mut [f32], z: &[f32], w: &[f32], groups: usize, eps: f32) {
    for (v, &zi) in y.iter_mut().zip(z) {
        *v *= canon::silu(zi);
    }
    let width = y.len() / groups;
    for (g, part) in y.chunks_exact_mut(width).enumerate() {
        let ms = canon::dot_ref(part, part) / width as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for (v, &wi) in part.iter_mut().zip(&w[g * width..(g + 1) * width]) {
            *v = wi * (*v * inv);
        }
    }
}
