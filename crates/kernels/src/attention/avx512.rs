//! [`group_body`](super::group_body) with AVX-512, lane for lane: each chunk's keys and values
//! are located once for all query heads of the KV head and for up to [`ROW_GROUP`] rows of one
//! sequence (a verify window, a prefill chunk); a cache in bf16 or q8_0 has the chunk's keys,
//! then its values, widened into one buffer first. A chunk runs in three passes so that what the
//! rows and heads share stays in L1: the scores of every (row, head), the dot products of six
//! of them with four keys at a time (each key vector loaded once for the six), then each head's
//! 16 dot products folded together (the canonical fold, transposed, the same additions on the
//! same operands); then per (row, head) the chunk max, the exponentials 16 at a time and their
//! sum in key order; then the value sums, six heads of a row and four vectors of their values at
//! a time, each value vector loaded once for the six. Every accumulator sees exactly the
//! operations of its head alone, in the same order. A long row alone on more threads than its
//! jobs ([`row_span`], [`merge_records`]) has its chunks computed on several threads and merged
//! in order afterwards, by the same merge step.

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

/// Heads whose value sums run together, over [`VALUE_DIMS`] vectors of each head's values at a
/// time: 24 accumulators of the 32 registers, and each value vector is loaded once for six heads.
const VALUE_HEADS: usize = 6;

/// Query heads whose scores are taken together, four keys at a time: 24 accumulators, each key
/// vector loaded once for the six.
const SCORE_QUERIES: usize = 6;
const VALUE_DIMS: usize = 4;

/// The attention of the query heads of KV head `kvh` for the rows `keys` (at most
/// [`ROW_GROUP`], reading the same keys up to their lengths): `q` and `out` hold, per row, the
/// group's heads (`group · head_dim` values a row). `wide` (`KEY_CHUNK · head_dim` values) holds
/// a chunk's keys, then its values, widened to f32 when the cache stores another format.
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
    wide: &mut [f32],
) {
    let part = Part {
        span: 0..usize::MAX,
        rec: None,
    };
    match shape.head_dim {
        64 => rows_heads::<4>(shape, q, kvh, keys, kv, out, wide, part),
        128 => rows_heads::<8>(shape, q, kvh, keys, kv, out, wide, part),
        256 => rows_heads::<16>(shape, q, kvh, keys, kv, out, wide, part),
        d => unreachable!("head_dim {d} is not supported here"),
    }
}

/// Floats of one chunk's partial result for one head: its max, its sum, its value sums.
pub(super) fn record_len(head_dim: usize) -> usize {
    head_dim + 2
}

/// [`rows`] for one row over the chunks starting in `span` only (key positions, multiples of
/// [`KEY_CHUNK`]), each chunk's max, sum and value sums per head written to `rec` (chunk by
/// chunk, head by head, [`record_len`] floats each) instead of merged: a long row's chunks
/// computed on several threads, then merged in order by [`merge_records`].
///
/// # Safety
/// As [`rows`].
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn row_span(
    shape: &AttnShape,
    q: &[f32],
    kvh: usize,
    key: &RowKeys,
    kv: &KvLayer,
    span: std::ops::Range<usize>,
    rec: &mut [f32],
    wide: &mut [f32],
) {
    let mut out = vec![0f32; q.len()];
    let keys = std::slice::from_ref(key);
    let part = Part {
        span,
        rec: Some(rec),
    };
    match shape.head_dim {
        64 => rows_heads::<4>(shape, q, kvh, keys, kv, &mut out, wide, part),
        128 => rows_heads::<8>(shape, q, kvh, keys, kv, &mut out, wide, part),
        256 => rows_heads::<16>(shape, q, kvh, keys, kv, &mut out, wide, part),
        d => unreachable!("head_dim {d} is not supported here"),
    }
}

/// The chunks of one row that [`row_span`] wrote to `rec`, `c0s` their starts in order (every
/// chunk the row visits), merged into `out` (the row's heads) exactly as [`rows`] merges them
/// as it goes.
///
/// # Safety
/// AVX-512 F must be available; `head_dim` is 64, 128 or 256.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn merge_records(
    head_dim: usize,
    c0s: impl Iterator<Item = usize>,
    rec: &[f32],
    out: &mut [f32],
) {
    match head_dim {
        64 => merge_records_nv::<4>(c0s, rec, out),
        128 => merge_records_nv::<8>(c0s, rec, out),
        256 => merge_records_nv::<16>(c0s, rec, out),
        d => unreachable!("head_dim {d} is not supported here"),
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn merge_records_nv<const NV: usize>(
    c0s: impl Iterator<Item = usize>,
    rec: &[f32],
    out: &mut [f32],
) {
    let hd = NV * 16;
    let g_n = out.len() / hd;
    let per = record_len(hd);
    let mut run = [Running {
        m: f32::NEG_INFINITY,
        l: 0.0,
    }; super::MAX_GROUP];
    out.fill(0.0);
    for (ci, c0) in c0s.enumerate() {
        for (g, st) in run.iter_mut().enumerate().take(g_n) {
            let r = &rec[(ci * g_n + g) * per..(ci * g_n + g + 1) * per];
            let mut ob = [_mm512_setzero_ps(); NV];
            for (j, v) in ob.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(r[2 + 16 * j..].as_ptr());
            }
            merge_chunk(st, c0 == 0, r[0], r[1], &ob, out.as_mut_ptr().add(g * hd));
        }
    }
    finish::<NV>(&run[..g_n], out);
}

/// Which chunks [`rows_heads`] visits and where their results go: merged into the output as
/// they come (`rec` None), or each chunk's max, sum and value sums written to `rec`.
struct Part<'a> {
    span: std::ops::Range<usize>,
    rec: Option<&'a mut [f32]>,
}

/// One chunk's max `m`, sum `l` and value sums `ob` of one head merged into its running state
/// and its output `o` (the first chunk, at position 0, taken as it is).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn merge_chunk<const NV: usize>(
    st: &mut Running,
    first: bool,
    m: f32,
    l: f32,
    ob: &[__m512; NV],
    o: *mut f32,
) {
    if first {
        st.m = m;
        st.l = l;
        for (j, c) in ob.iter().enumerate() {
            _mm512_storeu_ps(o.add(16 * j), *c);
        }
    } else {
        let nm = st.m.max(m);
        let a = canon::exp(st.m - nm);
        let bb = canon::exp(m - nm);
        st.l = st.l * a + l * bb;
        let (av, bv) = (_mm512_set1_ps(a), _mm512_set1_ps(bb));
        for (j, c) in ob.iter().enumerate() {
            let prev = _mm512_loadu_ps(o.add(16 * j));
            let merged = _mm512_add_ps(_mm512_mul_ps(prev, av), _mm512_mul_ps(*c, bv));
            _mm512_storeu_ps(o.add(16 * j), merged);
        }
        st.m = nm;
    }
}

/// Each head's output divided by its sum (heads whose sum is 0 stay 0).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn finish<const NV: usize>(run: &[Running], out: &mut [f32]) {
    for (g, st) in run.iter().enumerate() {
        if st.l > 0.0 {
            let d = _mm512_set1_ps(st.l);
            let o = out.as_mut_ptr().add(g * NV * 16);
            for j in 0..NV {
                let v = _mm512_div_ps(_mm512_loadu_ps(o.add(16 * j)), d);
                _mm512_storeu_ps(o.add(16 * j), v);
            }
        }
    }
}

/// Head state carried across chunks: the running max and sum of [`group_body`](super::group_body).
#[derive(Clone, Copy)]
struct Running {
    m: f32,
    l: f32,
}

// Long on purpose: one loop nest (key chunks, then rows and heads of the group) whose score,
// max, exp and sum steps keep their accumulators in registers across the chunk; split into
// functions, the fixed order of rule 3 would be harder to see, not easier.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_heads<const NV: usize>(
    shape: &AttnShape,
    q: &[f32],
    kvh: usize,
    keys: &[RowKeys],
    kv: &KvLayer,
    out: &mut [f32],
    wide: &mut [f32],
    mut part: Part,
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
        // A sliding-window row runs alone (`row_groups`).
        assert!(!k.windowed() || n_rows == 1);
        assert!(std::ptr::eq(k.table, first.table) && k.n_keys == first.n_keys + i);
    }
    // Records are written for a row alone (every chunk of the span is one of its own).
    assert!(part.rec.is_none() || n_rows == 1);
    let mut run = [[Running {
        m: f32::NEG_INFINITY,
        l: 0.0,
    }; super::MAX_GROUP]; ROW_GROUP];
    let mut kp = [std::ptr::null::<f32>(); KEY_CHUNK];
    let mut vp = [std::ptr::null::<f32>(); KEY_CHUNK];
    // Per query head of a score pass: its 16-lane dot product accumulators, one per key.
    let mut dot = [[_mm512_setzero_ps(); KEY_CHUNK]; SCORE_QUERIES];
    // Per (row, head): the chunk's scores, then their exponentials.
    let mut sc = [[0f32; KEY_CHUNK]; ROW_GROUP * super::MAX_GROUP];
    // Per (row, head): the chunk's max and sum of exponentials.
    let mut ms = [0f32; ROW_GROUP * super::MAX_GROUP];
    let mut ls = [0f32; ROW_GROUP * super::MAX_GROUP];
    out.fill(0.0);
    let last_keys = keys[n_rows - 1].n_keys;
    // The chunk grid from position 0; a window starts at the chunk holding its first key, and
    // that chunk's keys before it score -inf (exponential exactly 0, so the sums and the merge
    // get the bits of the portable body, which skips them).
    let window_first = first.first;
    let lo = (window_first / KEY_CHUNK * KEY_CHUNK).max(part.span.start);
    for c0 in (lo..last_keys.min(part.span.end)).step_by(KEY_CHUNK) {
        let n_max = (last_keys - c0).min(KEY_CHUNK);
        super::chunk_rows(kv, kv.k, first, kvh, hd, c0, n_max, &mut kp, wide);
        // The next chunk's keys and values, asked for now: a chunk's rows lie in blocks anywhere
        // in the cache, which the hardware prefetchers do not follow.
        super::prefetch_keys(
            kv,
            first,
            kvh,
            hd,
            c0 + KEY_CHUNK..last_keys.min(c0 + 2 * KEY_CHUNK),
        );
        // Scores are computed 16 keys at a time; lanes past a row's keys read the chunk's first
        // key (any valid row) and are discarded.
        let any = kp[0];
        for p in kp.iter_mut().take(n_max.div_ceil(16) * 16).skip(n_max) {
            *p = any;
        }
        // Rows with keys in this chunk (rows are consecutive positions: a suffix of them).
        let r_in = keys.iter().take_while(|row| row.n_keys <= c0).count();
        let n_of = |r: usize| (keys[r].n_keys - c0).min(KEY_CHUNK);
        // Scores of every (row, head): the dot products of up to SCORE_QUERIES query heads
        // with four keys at a time (each key vector loaded once for all of them), kept whole,
        // then each (row, head)'s 16-key halves folded; lanes past a row's keys are -inf.
        let halves = n_max.div_ceil(16);
        let nq = (n_rows - r_in) * g_n;
        let mut q0 = 0;
        while q0 < nq {
            let gb = (nq - q0).min(SCORE_QUERIES);
            let qp: [*const f32; SCORE_QUERIES] =
                std::array::from_fn(|b| q.as_ptr().add((r_in * g_n + q0 + b.min(gb - 1)) * hd));
            let npad = 16 * halves;
            match gb {
                1 => dots::<NV, 1>(npad, &kp, &qp, &mut dot),
                2 => dots::<NV, 2>(npad, &kp, &qp, &mut dot),
                3 => dots::<NV, 3>(npad, &kp, &qp, &mut dot),
                4 => dots::<NV, 4>(npad, &kp, &qp, &mut dot),
                5 => dots::<NV, 5>(npad, &kp, &qp, &mut dot),
                _ => dots::<NV, 6>(npad, &kp, &qp, &mut dot),
            }
            for (b, acc) in dot.iter().enumerate().take(gb) {
                let (r, g) = (r_in + (q0 + b) / g_n, (q0 + b) % g_n);
                let n = n_of(r);
                for h in 0..halves {
                    let base = 16 * h;
                    let dst = sc[r * g_n + g].as_mut_ptr().add(base);
                    if base >= n {
                        _mm512_storeu_ps(dst, _mm512_set1_ps(f32::NEG_INFINITY));
                        continue;
                    }
                    let cnt = (n - base).min(16);
                    let mut valid: __mmask16 = if cnt == 16 { 0xFFFF } else { (1u16 << cnt) - 1 };
                    let before = window_first.saturating_sub(c0 + base).min(16);
                    valid &= !((1u32 << before) - 1) as u16;
                    let lanes: &[__m512; 16] = acc[base..base + 16].try_into().unwrap();
                    let scaled = _mm512_mul_ps(fold16(lanes), _mm512_set1_ps(shape.scale));
                    let s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(f32::NEG_INFINITY), scaled);
                    _mm512_storeu_ps(dst, s);
                }
            }
            q0 += gb;
        }
        // Per (row, head): the chunk max, the exponentials (0 past the row's keys) and their sum
        // in key order.
        for r in r_in..n_rows {
            let n = n_of(r);
            for g in 0..g_n {
                let s = &mut sc[r * g_n + g];
                let (s0, s1) = if n > 16 {
                    (
                        _mm512_loadu_ps(s.as_ptr()),
                        _mm512_loadu_ps(s.as_ptr().add(16)),
                    )
                } else {
                    let s0 = _mm512_loadu_ps(s.as_ptr());
                    (s0, _mm512_set1_ps(f32::NEG_INFINITY))
                };
                let m = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
                let mv = _mm512_set1_ps(m);
                _mm512_storeu_ps(s.as_mut_ptr(), canon::x86::exp512(_mm512_sub_ps(s0, mv)));
                if n > 16 {
                    let x = canon::x86::exp512(_mm512_sub_ps(s1, mv));
                    _mm512_storeu_ps(s.as_mut_ptr().add(16), x);
                }
                ms[r * g_n + g] = m;
            }
            // The sums in key order, four heads' chains side by side (entries past the row's
            // heads are read and dropped).
            for g0 in (0..g_n).step_by(4) {
                let at = |b: usize| (r * g_n + g0 + b).min(sc.len() - 1);
                let e4: [&[f32; KEY_CHUNK]; 4] = std::array::from_fn(|b| &sc[at(b)]);
                let mut l4 = [0f32; 4];
                for i in 0..n {
                    for (l, e) in l4.iter_mut().zip(&e4) {
                        *l += e[i];
                    }
                }
                for (b, l) in l4.iter().enumerate().take(g_n - g0) {
                    ls[r * g_n + g0 + b] = *l;
                }
            }
        }
        // Value sums, a few heads of a row at a time (each value row loaded once for them),
        // merged into the heads' outputs as the portable body does.
        super::chunk_rows(kv, kv.v, first, kvh, hd, c0, n_max, &mut vp, wide);
        for r in r_in..n_rows {
            let n = n_of(r);
            let mut g0 = 0;
            while g0 < g_n {
                let gb = (g_n - g0).min(VALUE_HEADS);
                let es: [*const f32; VALUE_HEADS] =
                    std::array::from_fn(|b| sc[r * g_n + g0 + b.min(gb - 1)].as_ptr());
                let mut oc = [[_mm512_setzero_ps(); NV]; VALUE_HEADS];
                for j0 in (0..NV).step_by(VALUE_DIMS) {
                    match gb {
                        1 => value_sums::<NV, 1>(n, &vp, &es, j0, &mut oc),
                        2 => value_sums::<NV, 2>(n, &vp, &es, j0, &mut oc),
                        3 => value_sums::<NV, 3>(n, &vp, &es, j0, &mut oc),
                        4 => value_sums::<NV, 4>(n, &vp, &es, j0, &mut oc),
                        5 => value_sums::<NV, 5>(n, &vp, &es, j0, &mut oc),
                        _ => value_sums::<NV, 6>(n, &vp, &es, j0, &mut oc),
                    }
                }
                for (b, ob) in oc.iter().enumerate().take(gb) {
                    let g = g0 + b;
                    let (m, l) = (ms[r * g_n + g], ls[r * g_n + g]);
                    if let Some(rec) = part.rec.as_deref_mut() {
                        let per = record_len(hd);
                        let at = ((c0 - lo) / KEY_CHUNK * g_n + g) * per;
                        let d = &mut rec[at..at + per];
                        (d[0], d[1]) = (m, l);
                        for (j, c) in ob.iter().enumerate() {
                            _mm512_storeu_ps(d[2 + 16 * j..].as_mut_ptr(), *c);
                        }
                        continue;
                    }
                    let o = out.as_mut_ptr().add((r * g_n + g) * hd);
                    merge_chunk(&mut run[r][g], c0 == 0, m, l, ob, o);
                }
                g0 += gb;
            }
        }
    }
    if part.rec.is_none() {
        for (r, heads) in run.iter().enumerate().take(n_rows) {
            finish::<NV>(&heads[..g_n], &mut out[r * g_n * hd..(r + 1) * g_n * hd]);
        }
    }
}

/// `acc[b][t]` = the canonical dot's 16 lane sums (before the fold) of query `qp[b]` with key
/// `kp[t]`, for the first `npad` keys (a multiple of 4) and `GB` queries: each key vector is
/// loaded once for the `GB` queries, each accumulator sees exactly the FMAs of its dot alone.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dots<const NV: usize, const GB: usize>(
    npad: usize,
    kp: &[*const f32; KEY_CHUNK],
    qp: &[*const f32; SCORE_QUERIES],
    out: &mut [[__m512; KEY_CHUNK]; SCORE_QUERIES],
) {
    for t0 in (0..npad).step_by(4) {
        let k4 = [kp[t0], kp[t0 + 1], kp[t0 + 2], kp[t0 + 3]];
        let mut acc = [[_mm512_setzero_ps(); 4]; GB];
        for j in 0..NV {
            let kv = [
                _mm512_loadu_ps(k4[0].add(16 * j)),
                _mm512_loadu_ps(k4[1].add(16 * j)),
                _mm512_loadu_ps(k4[2].add(16 * j)),
                _mm512_loadu_ps(k4[3].add(16 * j)),
            ];
            for (a, &qb) in acc.iter_mut().zip(qp) {
                let qv = _mm512_loadu_ps(qb.add(16 * j));
                for (x, k) in a.iter_mut().zip(&kv) {
                    *x = _mm512_fmadd_ps(qv, *k, *x);
                }
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            o[t0..t0 + 4].copy_from_slice(a);
        }
    }
}

/// `oc[b][j0..j0 + VALUE_DIMS] = Σ_i e_b[i] · v[i]` over the chunk's first `n` keys, in key
/// order, for `GB` heads whose exponentials are at `es[b]`: each accumulator sees exactly the
/// FMAs of its head alone; each value vector is loaded once for all the heads.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn value_sums<const NV: usize, const GB: usize>(
    n: usize,
    vp: &[*const f32; KEY_CHUNK],
    es: &[*const f32; VALUE_HEADS],
    j0: usize,
    oc: &mut [[__m512; NV]; VALUE_HEADS],
) {
    let mut acc = [[_mm512_setzero_ps(); VALUE_DIMS]; GB];
    for (i, &row) in vp.iter().enumerate().take(n) {
        let mut v = [_mm512_setzero_ps(); VALUE_DIMS];
        for (j, x) in v.iter_mut().enumerate() {
            *x = _mm512_loadu_ps(row.add(16 * (j0 + j)));
        }
        for (b, ab) in acc.iter_mut().enumerate() {
            let eb = _mm512_set1_ps(*es[b].add(i));
            for (o, x) in ab.iter_mut().zip(&v) {
                *o = _mm512_fmadd_ps(eb, *x, *o);
            }
        }
    }
    for (b, ab) in acc.iter().enumerate() {
        oc[b][j0..j0 + VALUE_DIMS].copy_from_slice(ab);
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
