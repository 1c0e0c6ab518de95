//! [`group_body`](super::group_body) with AVX-512, lane for lane: each chunk's keys and values
//! are located once for all query heads of the KV head and for up to [`ROW_GROUP`] rows of one
//! sequence (a verify window, a prefill chunk), so the chunk is read from memory once for all of
//! them; a head's scores for 16 keys are folded together (the canonical fold, transposed: the
//! same additions on the same operands), their exponentials taken 16 at a time, and the value
//! sums kept in registers across the chunk.

use super::{AttnShape, RowKeys, KEY_CHUNK};
use crate::canon;
use crate::kv::KvLayer;
use std::arch::x86_64::*;

/// Whether heads of `head_dim` values run here (whole 16-lane vectors, a register count the
/// kernel is compiled for); others take the portable body.
pub(super) fn supports(head_dim: usize) -> bool {
    matches!(head_dim, 64 | 128 | 256)
}

/// Rows of one sequence that take their chunks' key and value loads together: consecutive
/// positions (one more key each) read through the same block table, no remapped positions.
pub(super) const ROW_GROUP: usize = 8;

/// The attention of the query heads of KV head `kvh` for the rows `keys` (at most
/// [`ROW_GROUP`], reading the same keys up to their lengths): `q` and `out` hold, per row, the
/// group's heads (`group · head_dim` values a row).
///
/// # Safety
/// AVX-512 F must be available; `supports(shape.head_dim)`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn rows(
    shape: &AttnShape,
    q: &[f32],
    kvh: usize,
    keys: &[RowKeys],
    kv: &KvLayer,
    out: &mut [f32],
) {
    match shape.head_dim {
        64 => rows_heads::<4>(shape, q, kvh, keys, kv, out),
        128 => rows_heads::<8>(shape, q, kvh, keys, kv, out),
        256 => rows_heads::<16>(shape, q, kvh, keys, kv, out),
        d => unreachable!("head_dim {d} is not supported here"),
    }
}

/// Head state carried across chunks: the running max and sum of [`group_body`](super::group_body).
#[derive(Clone, Copy)]
struct Running {
    m: f32,
    l: f32,
}

#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_heads<const NV: usize>(
    shape: &AttnShape,
    q: &[f32],
    kvh: usize,
    keys: &[RowKeys],
    kv: &KvLayer,
    out: &mut [f32],
) {
    let hd = NV * 16;
    let n_rows = keys.len();
    let g_n = q.len() / (n_rows * hd);
    assert!(n_rows <= ROW_GROUP && g_n <= super::MAX_GROUP);
    assert!(q.len() == n_rows * g_n * hd && out.len() == q.len());
    let first = &keys[0];
    for (i, k) in keys.iter().enumerate() {
        // Every row reads its keys where the first row does.
        assert!(k.remap.is_none() || n_rows == 1);
        assert!(std::ptr::eq(k.table, first.table) && k.n_keys == first.n_keys + i);
    }
    let mut run = [[Running {
        m: f32::NEG_INFINITY,
        l: 0.0,
    }; super::MAX_GROUP]; ROW_GROUP];
    let mut kp = [std::ptr::null::<f32>(); KEY_CHUNK];
    let mut vp = [std::ptr::null::<f32>(); KEY_CHUNK];
    let mut e = [0f32; KEY_CHUNK];
    out.fill(0.0);
    let last_keys = keys[n_rows - 1].n_keys;
    for c0 in (0..last_keys).step_by(KEY_CHUNK) {
        let n_max = (last_keys - c0).min(KEY_CHUNK);
        for i in 0..n_max {
            let off = kv.offset(first.table, first.slot(c0 + i)) + kvh * hd;
            kp[i] = kv.k[off..off + hd].as_ptr();
            vp[i] = kv.v[off..off + hd].as_ptr();
        }
        // Scores are computed 16 keys at a time; lanes past a row's keys read the chunk's first
        // key (any valid row) and are discarded.
        let any = kp[0];
        for p in kp.iter_mut().take(n_max.div_ceil(16) * 16).skip(n_max) {
            *p = any;
        }
        for (r, row) in keys.iter().enumerate() {
            if row.n_keys <= c0 {
                continue;
            }
            let n = (row.n_keys - c0).min(KEY_CHUNK);
            for (g, st) in run[r].iter_mut().enumerate().take(g_n) {
                let at = (r * g_n + g) * hd;
                let qg = q.as_ptr().add(at);
                let mut qv = [_mm512_setzero_ps(); NV];
                for (j, v) in qv.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(qg.add(16 * j));
                }
                // Scores of the chunk, 16 keys a vector; lanes past the row's keys are -inf.
                let mut s = [_mm512_set1_ps(f32::NEG_INFINITY); KEY_CHUNK / 16];
                for (h, sv) in s.iter_mut().enumerate().take(n.div_ceil(16)) {
                    let base = 16 * h;
                    let cnt = (n - base).min(16);
                    let kh: &[*const f32; 16] = kp[base..base + 16].try_into().unwrap();
                    let mut acc = [_mm512_setzero_ps(); 16];
                    for (j, qj) in qv.iter().enumerate() {
                        for (a, k) in acc.iter_mut().zip(kh) {
                            *a = _mm512_fmadd_ps(*qj, _mm512_loadu_ps(k.add(16 * j)), *a);
                        }
                    }
                    let valid: __mmask16 = if cnt == 16 { 0xFFFF } else { (1u16 << cnt) - 1 };
                    let scaled = _mm512_mul_ps(fold16(&acc), _mm512_set1_ps(shape.scale));
                    *sv = _mm512_mask_blend_ps(valid, *sv, scaled);
                }
                let m = _mm512_reduce_max_ps(_mm512_max_ps(s[0], s[1]));
                // Exponentials (0 past the row's keys), their sum in key order, the value sums.
                for (h, sv) in s.iter().enumerate() {
                    let x = canon::x86::exp512(_mm512_sub_ps(*sv, _mm512_set1_ps(m)));
                    _mm512_storeu_ps(e.as_mut_ptr().add(16 * h), x);
                }
                let mut l = 0f32;
                for &ei in &e[..n] {
                    l += ei;
                }
                let mut oc = [_mm512_setzero_ps(); NV];
                for i in 0..n {
                    let eb = _mm512_set1_ps(e[i]);
                    for (j, o) in oc.iter_mut().enumerate() {
                        *o = _mm512_fmadd_ps(eb, _mm512_loadu_ps(vp[i].add(16 * j)), *o);
                    }
                }
                // Merge into the head's output, as the portable body does.
                let o = out.as_mut_ptr().add(at);
                if c0 == 0 {
                    st.m = m;
                    st.l = l;
                    for (j, c) in oc.iter().enumerate() {
                        _mm512_storeu_ps(o.add(16 * j), *c);
                    }
                } else {
                    let nm = st.m.max(m);
                    let a = canon::exp(st.m - nm);
                    let b = canon::exp(m - nm);
                    st.l = st.l * a + l * b;
                    let (av, bv) = (_mm512_set1_ps(a), _mm512_set1_ps(b));
                    for (j, c) in oc.iter().enumerate() {
                        let prev = _mm512_loadu_ps(o.add(16 * j));
                        let merged = _mm512_add_ps(_mm512_mul_ps(prev, av), _mm512_mul_ps(*c, bv));
                        _mm512_storeu_ps(o.add(16 * j), merged);
                    }
                    st.m = nm;
                }
            }
        }
    }
    for (r, heads) in run.iter().enumerate().take(n_rows) {
        for (g, st) in heads.iter().enumerate().take(g_n) {
            if st.l > 0.0 {
                let d = _mm512_set1_ps(st.l);
                let o = out.as_mut_ptr().add((r * g_n + g) * hd);
                for j in 0..NV {
                    let v = _mm512_div_ps(_mm512_loadu_ps(o.add(16 * j)), d);
                    _mm512_storeu_ps(o.add(16 * j), v);
                }
            }
        }
    }
}

/// Lane t = the canonical fold of `a[t]` (`acc[l] += acc[l + s]` for s = 8, 4, 2, 1), for 16
/// vectors at once: each step adds the same pairs of lanes, gathered from two vectors into one.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn fold16(a: &[__m512; 16]) -> __m512 {
    // (Loops, not `array::from_fn`: its closure is not inlined into a target-feature function.)
    // s = 8: vector i holds keys 2i (lanes 0-7) and 2i+1 (lanes 8-15).
    let mut s8 = [_mm512_setzero_ps(); 8];
    for (i, v) in s8.iter_mut().enumerate() {
        let (x, y) = (a[2 * i], a[2 * i + 1]);
        *v = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(x, y),
            _mm512_shuffle_f32x4::<0xEE>(x, y),
        );
    }
    // s = 4: vector i holds keys 4i..4i+4, one per 128-bit quarter.
    let mut s4 = [_mm512_setzero_ps(); 4];
    for (i, v) in s4.iter_mut().enumerate() {
        let (x, y) = (s8[2 * i], s8[2 * i + 1]);
        *v = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(x, y),
            _mm512_shuffle_f32x4::<0xDD>(x, y),
        );
    }
    // s = 2: quarter q of vector i holds keys 8i+q (lanes 0, 1) and 8i+4+q (lanes 2, 3).
    let mut s2 = [_mm512_setzero_ps(); 2];
    for (i, v) in s2.iter_mut().enumerate() {
        let (x, y) = (s4[2 * i], s4[2 * i + 1]);
        *v = _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(x, y),
            _mm512_shuffle_ps::<0xEE>(x, y),
        );
    }
    // s = 1: lane 4q + j holds key 4j + q.
    let s1 = _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(s2[0], s2[1]),
        _mm512_shuffle_ps::<0xDD>(s2[0], s2[1]),
    );
    let order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_permutexvar_ps(order, s1)
}
