//! [`group_body`](super::group_body) with AVX2, lane for lane, for one row's query heads of one
//! KV head: each chunk's keys and values are located once for all heads; a head's scores are
//! taken four keys at a time (the query loaded once for the four, each key's two 8-lane
//! accumulators the canonical dot's 16 lanes, folded as [`canon::x86::fold256`] folds them),
//! their exponentials eight at a time ([`canon::x86::exp256`], the scalar function's
//! operations lane by lane), and the value sums kept in registers across the chunk, 64 values
//! at a time, instead of being loaded and stored back for every key.

use super::{AttnShape, RowKeys, KEY_CHUNK, MAX_GROUP};
use crate::canon;
use crate::kv::KvLayer;
use std::arch::x86_64::*;

/// Whether heads of `head_dim` values run here (whole 64-value pieces); others take the
/// portable body.
pub(super) fn supports(head_dim: usize) -> bool {
    matches!(head_dim, 64 | 128 | 256)
}

/// Keys whose scores are taken together: the query's loads are shared by them.
const KEYS: usize = 4;

/// The attention of the query heads `q` (`g · head_dim` values) of KV head `kvh` for one row.
///
/// # Safety
/// AVX2 and FMA must be available; `supports(shape.head_dim)`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn heads(
    shape: &AttnShape,
    q: &[f32],
    kvh: usize,
    keys: &RowKeys,
    kv: &KvLayer,
    out: &mut [f32],
) {
    match shape.head_dim {
        64 => heads_nv::<4>(shape, q, kvh, keys, kv, out),
        128 => heads_nv::<8>(shape, q, kvh, keys, kv, out),
        256 => heads_nv::<16>(shape, q, kvh, keys, kv, out),
        d => unreachable!("head_dim {d} is not supported here"),
    }
}

/// [`heads`] for heads of `16 · NV` values.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn heads_nv<const NV: usize>(
    shape: &AttnShape,
    q: &[f32],
    kvh: usize,
    keys: &RowKeys,
    kv: &KvLayer,
    out: &mut [f32],
) {
    let hd = NV * 16;
    let g_n = q.len() / hd;
    assert!(g_n <= MAX_GROUP && q.len() == g_n * hd && out.len() == q.len());
    // Per head, the running max and sum of the portable body.
    let mut big_m = [f32::NEG_INFINITY; MAX_GROUP];
    let mut big_l = [0f32; MAX_GROUP];
    let mut kp = [std::ptr::null::<f32>(); KEY_CHUNK];
    let mut vp = [std::ptr::null::<f32>(); KEY_CHUNK];
    let mut s = [0f32; KEY_CHUNK];
    let mut e = [0f32; KEY_CHUNK];
    out.fill(0.0);
    for c0 in (0..keys.n_keys).step_by(KEY_CHUNK) {
        let n = (keys.n_keys - c0).min(KEY_CHUNK);
        for i in 0..n {
            let off = kv.offset(keys.table, keys.slot(c0 + i)) + kvh * hd;
            kp[i] = kv.k[off..off + hd].as_ptr();
            vp[i] = kv.v[off..off + hd].as_ptr();
        }
        // Scores are taken KEYS at a time; the ones past the chunk read its first key and are
        // never used.
        let padded = n.div_ceil(KEYS) * KEYS;
        let any = kp[0];
        for p in kp.iter_mut().take(padded).skip(n) {
            *p = any;
        }
        for g in 0..g_n {
            let qg = q.as_ptr().add(g * hd);
            for k0 in (0..padded).step_by(KEYS) {
                let mut lo = [_mm256_setzero_ps(); KEYS];
                let mut hi = [_mm256_setzero_ps(); KEYS];
                for j in 0..NV {
                    let ql = _mm256_loadu_ps(qg.add(16 * j));
                    let qh = _mm256_loadu_ps(qg.add(16 * j + 8));
                    for t in 0..KEYS {
                        let k = kp[k0 + t].add(16 * j);
                        lo[t] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(k), lo[t]);
                        hi[t] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(k.add(8)), hi[t]);
                    }
                }
                for t in 0..KEYS {
                    s[k0 + t] = canon::x86::fold256(lo[t], hi[t]) * shape.scale;
                }
            }
            let mut m = f32::NEG_INFINITY;
            for &si in &s[..n] {
                m = m.max(si);
            }
            let mv = _mm256_set1_ps(m);
            for i in (0..n).step_by(8) {
                let x = _mm256_sub_ps(_mm256_loadu_ps(s.as_ptr().add(i)), mv);
                _mm256_storeu_ps(e.as_mut_ptr().add(i), canon::x86::exp256(x));
            }
            let mut l = 0f32;
            for &ei in &e[..n] {
                l += ei;
            }
            let (a, b) = if c0 == 0 {
                big_m[g] = m;
                big_l[g] = l;
                (0.0, 0.0)
            } else {
                let nm = big_m[g].max(m);
                let a = canon::exp(big_m[g] - nm);
                let b = canon::exp(m - nm);
                big_l[g] = big_l[g] * a + l * b;
                big_m[g] = nm;
                (a, b)
            };
            let (av, bv) = (_mm256_set1_ps(a), _mm256_set1_ps(b));
            // The value sums of 64 values at a time, in eight registers across the chunk.
            for piece in 0..NV / 4 {
                let mut oc = [_mm256_setzero_ps(); 8];
                for i in 0..n {
                    let eb = _mm256_set1_ps(e[i]);
                    let v = vp[i].add(64 * piece);
                    for (t, o) in oc.iter_mut().enumerate() {
                        *o = _mm256_fmadd_ps(eb, _mm256_loadu_ps(v.add(8 * t)), *o);
                    }
                }
                let o = out.as_mut_ptr().add(g * hd + 64 * piece);
                for (t, c) in oc.iter().enumerate() {
                    let merged = if c0 == 0 {
                        *c
                    } else {
                        let prev = _mm256_loadu_ps(o.add(8 * t));
                        _mm256_add_ps(_mm256_mul_ps(prev, av), _mm256_mul_ps(*c, bv))
                    };
                    _mm256_storeu_ps(o.add(8 * t), merged);
                }
            }
        }
    }
    for (g, &l) in big_l.iter().enumerate().take(g_n) {
        if l > 0.0 {
            let d = _mm256_set1_ps(l);
            let o = out.as_mut_ptr().add(g * hd);
            for j in 0..2 * NV {
                let v = _mm256_div_ps(_mm256_loadu_ps(o.add(8 * j)), d);
                _mm256_storeu_ps(o.add(8 * j), v);
            }
        }
    }
}
