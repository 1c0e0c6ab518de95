//! The 32-value block formats (ggml-common.h):
//!
//! - Q4_0 {d: f16, qs[16]}: y = d * (nibble - 8)
//! - Q4_1 {d: f16, m: f16, qs[16]}: y = d * nibble + m
//! - Q5_0 {d: f16, qh: u32, qs[16]}: y = d * ((nibble | bit << 4) - 16)
//! - Q5_1 {d: f16, m: f16, qh: u32, qs[16]}: y = d * (nibble | bit << 4) + m
//! - Q8_0 {d: f16, qs[32]: i8}: y = d * q
//! - MXFP4 {e: u8, qs[16]}: y = 2^(e - 127) * E2M1(nibble), E2M1 = ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}
//!   (stored as ggml does: twice the value, an integer, times 2^(e - 128))
//!
//! Value j < 16 takes the low nibble of qs[j]; value j + 16 the high nibble. Bit j of qh is the
//! fifth bit of value j.

use super::f16_at;
use tf_core::dtype::{e8m0_half, MXFP4_TWICE};

pub(super) fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = d * ((i32::from(qs[j] & 0x0F) - 8) as f32);
        y[j + 16] = d * ((i32::from(qs[j] >> 4) - 8) as f32);
    }
}

pub(super) fn q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = d * f32::from(qs[j] & 0x0F) + m;
        y[j + 16] = d * f32::from(qs[j] >> 4) + m;
    }
}

pub(super) fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        y[j] = d * ((i32::from((qs[j] & 0x0F) | (h0 << 4)) - 16) as f32);
        y[j + 16] = d * ((i32::from((qs[j] >> 4) | (h1 << 4)) - 16) as f32);
    }
}

pub(super) fn q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        y[j] = d * f32::from((qs[j] & 0x0F) | (h0 << 4)) + m;
        y[j + 16] = d * f32::from((qs[j] >> 4) | (h1 << 4)) + m;
    }
}

pub(super) fn mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for j in 0..16 {
        y[j] = d * f32::from(MXFP4_TWICE[usize::from(b[1 + j] & 0x0F)]);
        y[j + 16] = d * f32::from(MXFP4_TWICE[usize::from(b[1 + j] >> 4)]);
    }
}

pub(super) fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
        *yj = d * f32::from(q as i8);
    }
}
