//! Small row-wise ops: RMSNorm, RoPE, SwiGLU and GeGLU (re-exported from [`canon`]). Each output row reads
//! only its own input row, with fixed operation order.

use crate::canon;
use crate::SimdLevel;

pub use canon::{geglu, swiglu};

/// gpt-oss's clamped SwiGLU: `g = min(gate, limit)`, `u = clamp(up, -limit, limit)`,
/// `out = g / (1 + exp(-alpha g)) * (u + 1)`, with the canonical exponential, one element at a
/// time (so any SIMD level gives these bits).
pub fn swiglu_oai(gate: &[f32], up: &[f32], alpha: f32, limit: f32, out: &mut [f32]) {
    assert!(gate.len() == up.len() && up.len() == out.len());
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let g = g.min(limit);
        let u = u.clamp(-limit, limit);
        *o = g / (1.0 + canon::exp(-alpha * g)) * (u + 1.0);
    }
}

/// `out = x / sqrt(mean(x²) + eps) * weight`, with the canonical dot for the sum of squares.
pub fn rms_norm(level: SimdLevel, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len();
    assert!(weight.len() == n && out.len() == n);
    let ss = canon::dot(level, x, x);
    let r = 1.0 / (ss / n as f32 + eps).sqrt();
    for i in 0..n {
        out[i] = (x[i] * r) * weight[i];
    }
}

/// In-place RMSNorm of each `dim`-sized slice of `x` (per-head q/k norms).
pub fn rms_norm_heads(level: SimdLevel, x: &mut [f32], weight: &[f32], eps: f32) {
    let dim = weight.len();
    let mut tmp = vec![0f32; dim];
    for head in x.chunks_exact_mut(dim) {
        rms_norm(level, head, weight, eps, &mut tmp);
        head.copy_from_slice(&tmp);
    }
}

/// How rotary pairs are formed within a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): llama weights as stored in GGUF.
    Interleaved,
    /// Pairs (i, i + rot_dim/2): Qwen2/3, and HF-layout llama weights.
    Neox,
}

/// Precomputed cos/sin for every position below `max_pos` (computed in f64, rounded once).
pub struct RopeTable {
    rot_dim: usize,
    /// The angle per position of each rotary pair (`base^(-2i/rot_dim)`, divided by the pair's
    /// scaling factor where the model scales its frequencies).
    thetas: Vec<f64>,
    /// cos and sin multiplied by this (YaRN; 1 otherwise).
    mscale: f64,
    max_pos: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    pub fn new(rot_dim: usize, base: f32, max_pos: usize) -> RopeTable {
        Self::with_factors(rot_dim, base, &[], max_pos)
    }

    /// The plain frequencies `base^(-2i/rot_dim)`, each divided by `factors[i]` (missing
    /// factors are 1): Llama 3's frequency scaling, linear scaling (one factor for all).
    pub fn with_factors(rot_dim: usize, base: f32, factors: &[f64], max_pos: usize) -> RopeTable {
        let thetas = (0..rot_dim / 2)
            .map(|i| {
                let f = factors.get(i).copied().unwrap_or(1.0);
                (base as f64).powf(-2.0 * i as f64 / rot_dim as f64) / f
            })
            .collect();
        Self::with_thetas(rot_dim, thetas, max_pos)
    }

    pub fn with_thetas(rot_dim: usize, thetas: Vec<f64>, max_pos: usize) -> RopeTable {
        let half = rot_dim / 2;
        assert_eq!(thetas.len(), half);
        let mut t = RopeTable {
            rot_dim,
            thetas,
            mscale: 1.0,
            max_pos,
            cos: vec![0.0; max_pos * half],
            sin: vec![0.0; max_pos * half],
        };
        t.fill();
        t
    }

    /// The same table with cos and sin multiplied by `mscale` (in f64, rounded once): YaRN's
    /// attention factor.
    pub fn scaled(mut self, mscale: f64) -> RopeTable {
        if mscale != self.mscale {
            self.mscale = mscale;
            self.fill();
        }
        self
    }

    fn fill(&mut self) {
        let half = self.rot_dim / 2;
        let t = self;
        for p in 0..t.max_pos {
            for i in 0..half {
                let (c, s) = t.angle(p, i);
                t.cos[p * half + i] = c;
                t.sin[p * half + i] = s;
            }
        }
    }

    fn angle(&self, pos: usize, i: usize) -> (f32, f32) {
        let a = pos as f64 * self.thetas[i];
        (
            (a.cos() * self.mscale) as f32,
            (a.sin() * self.mscale) as f32,
        )
    }

    /// What cos and sin are multiplied by.
    pub fn mscale(&self) -> f64 {
        self.mscale
    }

    /// The angle per position of each rotary pair.
    pub fn thetas(&self) -> &[f64] {
        &self.thetas
    }

    pub fn rot_dim(&self) -> usize {
        self.rot_dim
    }

    /// Rotates every head (`head_dim` values each) of `x` for position `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize, style: RopeStyle) {
        let half = self.rot_dim / 2;
        let mut cs = [(0f32, 0f32); 256];
        for (i, slot) in cs.iter_mut().enumerate().take(half) {
            *slot = if pos < self.max_pos {
                (self.cos[pos * half + i], self.sin[pos * half + i])
            } else {
                self.angle(pos, i)
            };
        }
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in cs.iter().enumerate().take(half) {
                let (a, b) = match style {
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_levels_agree() {
        let x: Vec<f32> = (0..1537)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..1537).map(|i| 1.0 + (i % 13) as f32 / 10.0).collect();
        let mut want = vec![0f32; x.len()];
        rms_norm(SimdLevel::Scalar, &x, &w, 1e-6, &mut want);
        for level in SimdLevel::available() {
            let mut got = vec![0f32; x.len()];
            rms_norm(level, &x, &w, 1e-6, &mut got);
            assert!(got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    #[test]
    fn rope_table_matches_direct_and_styles_relate() {
        let t = RopeTable::new(64, 10000.0, 100);
        let x: Vec<f32> = (0..128).map(|i| i as f32 / 10.0).collect();
        // Beyond the table the same f64 formula is used.
        let big = RopeTable::new(64, 10000.0, 200);
        let mut a = x.clone();
        let mut b = x.clone();
        t.apply(&mut a, 64, 150, RopeStyle::Neox);
        big.apply(&mut b, 64, 150, RopeStyle::Neox);
        assert_eq!(a, b);
        // Interleaved on permuted data equals Neox on the original, permuted.
        let perm: Vec<usize> = (0..32).flat_map(|i| [i, i + 32]).collect();
        let xp: Vec<f32> = perm.iter().map(|&j| x[j]).collect();
        let mut n = x[..64].to_vec();
        let mut i = xp.clone();
        t.apply(&mut n, 64, 7, RopeStyle::Neox);
        t.apply(&mut i, 64, 7, RopeStyle::Interleaved);
        let np: Vec<f32> = perm.iter().map(|&j| n[j]).collect();
        assert_eq!(np, i);
    }
}
