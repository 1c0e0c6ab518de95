//! The 256-value "k-quant" super-block formats (ggml-common.h). Each super-block has 8 or 16
//! sub-blocks with their own scale (and min); value v belongs to sub-block v / 32 or v / 16.
//!
//! - Q2_K {scales[16], qs[64], d, dmin}: scales[i] = scale (low 4) | min (high 4); 2-bit quants
//! - Q3_K {hmask[32], qs[64], scales[12], d}: 16 6-bit signed scales (-32); 2 low bits in qs, the
//!   third bit in hmask (a clear bit subtracts 4)
//! - Q4_K {d, dmin, scales[12], qs[128]}: 8 6-bit scales and mins; 4-bit quants
//! - Q5_K {d, dmin, scales[12], qh[32], qs[128]}: as Q4_K plus a fifth bit from qh
//! - Q6_K {ql[128], qh[64], scales[16]: i8, d}: 4 low bits in ql, 2 high bits in qh, -32

use super::f16_at;

pub(super) fn q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for (v, yv) in y.iter_mut().enumerate().take(256) {
        let sc = scales[v / 16];
        let dl = d * f32::from(sc & 0x0F);
        let ml = dmin * f32::from(sc >> 4);
        let shift = 2 * ((v % 128) / 32);
        let q = (qs[(v / 128) * 32 + v % 32] >> shift) & 3;
        *yv = dl * f32::from(q) - ml;
    }
}

/// The 16 6-bit Q3_K scales, still offset by 32: low 4 bits from bytes 0..8 (low nibbles for
/// sub-blocks 0..8, high nibbles for 8..16), high 2 bits from bytes 8..12.
fn q3_k_scale(scales: &[u8], i: usize) -> i32 {
    let low = if i < 8 {
        scales[i] & 0x0F
    } else {
        scales[i - 8] >> 4
    };
    let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

pub(super) fn q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = &b[96..108];
    let d = f16_at(b, 108);
    for (v, yv) in y.iter_mut().enumerate().take(256) {
        let dl = d * (q3_k_scale(scales, v / 16) as f32);
        let shift = 2 * ((v % 128) / 32);
        let low = i32::from((qs[(v / 128) * 32 + v % 32] >> shift) & 3);
        let high_set = (hmask[v % 32] >> (v / 32)) & 1 == 1;
        let q = low - if high_set { 0 } else { 4 };
        *yv = dl * (q as f32);
    }
}

/// Scale and min of sub-block j (0..8) from the 12 packed bytes of Q4_K/Q5_K
/// (ggml's get_scale_min_k4).
fn scale_min_k4(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

pub(super) fn q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (sub, ys) in y.chunks_exact_mut(32).enumerate().take(8) {
        let (sc, m) = scale_min_k4(scales, sub);
        let d1 = d * f32::from(sc);
        let m1 = dmin * f32::from(m);
        let bytes = &qs[(sub / 2) * 32..(sub / 2) * 32 + 32];
        let shift = 4 * (sub % 2);
        for (yl, &q) in ys.iter_mut().zip(bytes) {
            *yl = d1 * f32::from((q >> shift) & 0x0F) - m1;
        }
    }
}

pub(super) fn q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (sub, ys) in y.chunks_exact_mut(32).enumerate().take(8) {
        let (sc, m) = scale_min_k4(scales, sub);
        let d1 = d * f32::from(sc);
        let m1 = dmin * f32::from(m);
        let bytes = &qs[(sub / 2) * 32..(sub / 2) * 32 + 32];
        let shift = 4 * (sub % 2);
        for (l, yl) in ys.iter_mut().enumerate() {
            let low = (bytes[l] >> shift) & 0x0F;
            let high = (qh[l] >> sub) & 1;
            *yl = d1 * f32::from(low | (high << 4)) - m1;
        }
    }
}

pub(super) fn q6_k(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let scales = &b[192..208];
    let d = f16_at(b, 208);
    for (v, yv) in y.iter_mut().enumerate().take(256) {
        let half = v / 128;
        let k = (v % 128) / 32;
        let l = v % 32;
        let low_byte = ql[half * 64 + (k % 2) * 32 + l];
        let low = if k < 2 {
            low_byte & 0x0F
        } else {
            low_byte >> 4
        };
        let high = (qh[half * 32 + l] >> (2 * k)) & 3;
        let q = i32::from(low | (high << 4)) - 32;
        let dl = d * f32::from(scales[v / 16] as i8);
        *yv = dl * (q as f32);
    }
}
