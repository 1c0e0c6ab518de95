//! [`group_body`](super::group_body) with AVX2, lane for lane, for one row's query heads of one
//! KV head. Each chunk's keys and values are located once for all heads (and the next chunk's
//! asked for into L2), then the chunk runs in three passes so that what the heads share stays
//! in L1: every head's scores, 16 keys at a time for all heads (four keys a step, the query
//! loaded once for the four, each key's two 8-lane accumulators the canonical dot's 16 lanes,
//! folded as [`canon::x86::fold256`] folds them); per head the max, the exponentials eight at a
//! time ([`canon::x86::exp256`], the scalar function's operations lane by lane) and their sum;
//! then the value sums, two heads and 32 values at a time in registers across the chunk, each
//! value vector loaded once for both.

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
    // A chunk's keys and values widened to f32 (unused when the cache stores f32).
    let mut kbuf = vec![0f32; KEY_CHUNK * hd];
    let mut vbuf = vec![0f32; KEY_CHUNK * hd];
    // Per head: the chunk's scores, then their exponentials, and the merge factors.
    let mut s = [[0f32; KEY_CHUNK]; MAX_GROUP];
    let mut ab = [(0f32, 0f32); MAX_GROUP];
    out.fill(0.0);
    for c0 in (0..keys.n_keys).step_by(KEY_CHUNK) {
        let n = (keys.n_keys - c0).min(KEY_CHUNK);
        super::chunk_rows(kv, kv.k, keys, kvh, hd, c0, n, &mut kp, &mut kbuf);
        super::chunk_rows(kv, kv.v, keys, kvh, hd, c0, n, &mut vp, &mut vbuf);
        // The next chunk's keys and values, asked for now (its blocks lie anywhere in the cache).
        super::prefetch_keys(
            kv,
            keys,
            kvh,
            hd,
            c0 + KEY_CHUNK..keys.n_keys.min(c0 + 2 * KEY_CHUNK),
        );
        // Scores are taken KEYS at a time; the ones past the chunk read its first key and are
        // never used.
        let padded = n.div_ceil(KEYS) * KEYS;
        let any = kp[0];
        for p in kp.iter_mut().take(padded).skip(n) {
            *p = any;
        }
        // Every head's scores, 16 keys at a time for all heads (those keys stay in L1).
        for kb in (0..padded).step_by(16) {
            for (g, sg) in s.iter_mut().enumerate().take(g_n) {
                let qg = q.as_ptr().add(g * hd);
                for k0 in (kb..(kb + 16).min(padded)).step_by(KEYS) {
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
                        sg[k0 + t] = canon::x86::fold256(lo[t], hi[t]) * shape.scale;
                    }
                }
            }
        }
        // Per head: the chunk max, the exponentials and their sum in key order, the merge.
        for (g, sg) in s.iter_mut().enumerate().take(g_n) {
            let mut m = f32::NEG_INFINITY;
            for &si in &sg[..n] {
                m = m.max(si);
            }
            let mv = _mm256_set1_ps(m);
            for i in (0..n).step_by(8) {
                let x = _mm256_sub_ps(_mm256_loadu_ps(sg.as_ptr().add(i)), mv);
                _mm256_storeu_ps(sg.as_mut_ptr().add(i), canon::x86::exp256(x));
            }
            let mut l = 0f32;
            for &ei in &sg[..n] {
                l += ei;
            }
            ab[g] = if c0 == 0 {
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
        }
        // The value sums, two heads and 32 values at a time (each value vector loaded once for
        // both heads), in registers across the chunk.
        for g0 in (0..g_n).step_by(2) {
            let (e, ab) = (&s[g0..g_n], &ab[g0..g_n]);
            for piece in 0..NV / 2 {
                match e.len() {
                    1 => value_piece::<1>(&vp, n, e, ab, piece, g0, c0, hd, out),
                    _ => value_piece::<2>(&vp, n, e, ab, piece, g0, c0, hd, out),
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

/// Values `32·piece..32·piece + 32` of heads `g0..g0 + GB`: `Σ_i e_g[i] · v[i]` over the chunk's
/// first `n` keys in key order (each lane's FMAs those of its head alone), merged into `out` as
/// the portable body merges (`ab`: the heads' factors for the old and the chunk's sums).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn value_piece<const GB: usize>(
    vp: &[*const f32; KEY_CHUNK],
    n: usize,
    e: &[[f32; KEY_CHUNK]],
    ab: &[(f32, f32)],
    piece: usize,
    g0: usize,
    c0: usize,
    hd: usize,
    out: &mut [f32],
) {
    let mut oc = [[_mm256_setzero_ps(); 4]; GB];
    for (i, &row) in vp.iter().enumerate().take(n) {
        let v = row.add(32 * piece);
        let vs: [__m256; 4] = [
            _mm256_loadu_ps(v),
            _mm256_loadu_ps(v.add(8)),
            _mm256_loadu_ps(v.add(16)),
            _mm256_loadu_ps(v.add(24)),
        ];
        for (b, ob) in oc.iter_mut().enumerate() {
            let eb = _mm256_set1_ps(e[b][i]);
            for (o, x) in ob.iter_mut().zip(&vs) {
                *o = _mm256_fmadd_ps(eb, *x, *o);
            }
        }
    }
    for (b, ob) in oc.iter().enumerate() {
        let (a, bb) = ab[b];
        let (av, bv) = (_mm256_set1_ps(a), _mm256_set1_ps(bb));
        let o = out.as_mut_ptr().add((g0 + b) * hd + 32 * piece);
        for (t, c) in ob.iter().enumerate() {
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
