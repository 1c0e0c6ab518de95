//! Integer view of one quant block: the signed integer value of every element and the integer
//! scale (and min) of every group of 16 elements, plus the block's float factors. The scalar
//! reference kernel is written on top of this view, so every type's dot product follows one
//! formula; the SIMD kernels decode the same bits their own way.
//!
//! Layouts are those of ggml's block structs; the dequantizer in `tf-weights` (checked against an
//! independent implementation) is the test oracle for these decoders.

// Decoders index several parallel arrays by one position: plain index loops read clearest.
#![allow(clippy::needless_range_loop)]

use tf_core::DType;

/// IEEE half to single, exact, inlined (`half`'s conversion is an out-of-line call that costs
/// as much as a whole legacy block's integer work). Same bits as `half::f16::to_f32`, NaN
/// quieting included.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7FFF;
    let bits = if em < 0x0400 {
        // Zero or subnormal: 2^-14 * (1 + m/2^10) - 2^-14, both steps exact.
        let two_m14 = f32::from_bits(113 << 23);
        (f32::from_bits((113 << 23) | (em << 13)) - two_m14).to_bits()
    } else if em < 0x7C00 {
        (em << 13) + (112 << 23)
    } else if em == 0x7C00 {
        0x7F80_0000
    } else {
        0x7FC0_0000 | ((em & 0x3FF) << 13)
    };
    f32::from_bits(sign | bits)
}

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// How a block's float factors enter the dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `acc + (d*dx) * isum`
    Scale,
    /// `acc + ((d*dx) * isum - (dmin*dx) * msum)`, msum = Σ min_g * xsum_g (k-quants with mins)
    ScaleMinusMin,
    /// `acc + ((d*dx) * isum + (m*dx) * xsum)` (Q4_1, Q5_1)
    ScalePlusMin,
}

/// A decoded k-quant super-block (256 values, 16 groups of 16).
pub struct KBlock {
    pub q: [i8; 256],
    pub scale: [i32; 16],
    pub min: [i32; 16],
    pub d: f32,
    pub dmin: f32,
    pub shape: Shape,
}

/// A decoded legacy block (32 values).
pub struct LBlock {
    pub q: [i8; 32],
    pub d: f32,
    pub m: f32,
    pub shape: Shape,
}

/// The 6-bit scale and min of group `j` (0..8) of a Q4_K/Q5_K block.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// All eight 6-bit scales and mins of a Q4_K/Q5_K block at once, as bytes of two u64 words
/// (the same values as [`scale_min_k4`] for j = 0..8).
#[inline(always)]
pub(crate) fn scales_mins_k4(s: &[u8]) -> (u64, u64) {
    let a0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let a1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let a2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let sc_lo = a0 & LOW6;
    let m_lo = a1 & LOW6;
    let sc_hi = (a2 & LOW4) | (((a0 >> 6) & TOP2) << 4);
    let m_hi = ((a2 >> 4) & LOW4) | (((a1 >> 6) & TOP2) << 4);
    (
        sc_lo as u64 | (sc_hi as u64) << 32,
        m_lo as u64 | (m_hi as u64) << 32,
    )
}

pub fn unpack_k(dtype: DType, b: &[u8]) -> KBlock {
    let mut k = KBlock {
        q: [0; 256],
        scale: [0; 16],
        min: [0; 16],
        d: 0.0,
        dmin: 0.0,
        shape: Shape::Scale,
    };
    match dtype {
        DType::Q2K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            k.d = f16_at(b, 80);
            k.dmin = f16_at(b, 82);
            k.shape = Shape::ScaleMinusMin;
            for g in 0..16 {
                k.scale[g] = (scales[g] & 0xF) as i32;
                k.min[g] = (scales[g] >> 4) as i32;
            }
            for n in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        k.q[128 * n + 32 * j + l] = ((qs[32 * n + l] >> (2 * j)) & 3) as i8;
                    }
                }
            }
        }
        DType::Q3K => {
            let (hmask, qs, sc) = (&b[0..32], &b[32..96], &b[96..108]);
            k.d = f16_at(b, 108);
            let a0 = u32::from_le_bytes([sc[0], sc[1], sc[2], sc[3]]);
            let a1 = u32::from_le_bytes([sc[4], sc[5], sc[6], sc[7]]);
            let t = u32::from_le_bytes([sc[8], sc[9], sc[10], sc[11]]);
            const M1: u32 = 0x0303_0303;
            const M2: u32 = 0x0f0f_0f0f;
            let aux = [
                (a0 & M2) | ((t & M1) << 4),
                (a1 & M2) | (((t >> 2) & M1) << 4),
                ((a0 >> 4) & M2) | (((t >> 4) & M1) << 4),
                ((a1 >> 4) & M2) | (((t >> 6) & M1) << 4),
            ];
            for g in 0..16 {
                let byte = (aux[g / 4] >> (8 * (g % 4))) as u8;
                k.scale[g] = byte as i8 as i32 - 32;
            }
            for n in 0..2 {
                for j in 0..4 {
                    let bit = 1u8 << (4 * n + j);
                    for l in 0..32 {
                        let low = ((qs[32 * n + l] >> (2 * j)) & 3) as i8;
                        let high = if hmask[l] & bit != 0 { 0 } else { 4 };
                        k.q[128 * n + 32 * j + l] = low - high;
                    }
                }
            }
        }
        DType::Q4K | DType::Q5K => {
            k.d = f16_at(b, 0);
            k.dmin = f16_at(b, 2);
            k.shape = Shape::ScaleMinusMin;
            let sc = &b[4..16];
            let (qh, qs): (Option<&[u8]>, &[u8]) = if dtype == DType::Q5K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            for j in 0..4 {
                for half in 0..2 {
                    let (s, m) = scale_min_k4(2 * j + half, sc);
                    k.scale[4 * j + 2 * half] = s as i32;
                    k.scale[4 * j + 2 * half + 1] = s as i32;
                    k.min[4 * j + 2 * half] = m as i32;
                    k.min[4 * j + 2 * half + 1] = m as i32;
                }
                for l in 0..32 {
                    let byte = qs[32 * j + l];
                    let (mut lo, mut hi) = (byte & 0xF, byte >> 4);
                    if let Some(qh) = qh {
                        lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
                    }
                    k.q[64 * j + l] = lo as i8;
                    k.q[64 * j + 32 + l] = hi as i8;
                }
            }
        }
        DType::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            k.d = f16_at(b, 208);
            for g in 0..16 {
                k.scale[g] = sc[g] as i8 as i32;
            }
            for n in 0..2 {
                let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
                for l in 0..32 {
                    let v = |low: u8, shift: u32| (low | (((qh[l] >> shift) & 3) << 4)) as i8 - 32;
                    k.q[128 * n + l] = v(ql[l] & 0xF, 0);
                    k.q[128 * n + 32 + l] = v(ql[l + 32] & 0xF, 2);
                    k.q[128 * n + 64 + l] = v(ql[l] >> 4, 4);
                    k.q[128 * n + 96 + l] = v(ql[l + 32] >> 4, 6);
                }
            }
        }
        _ => panic!("unpack_k: {dtype} is not a k-quant"),
    }
    k
}

use tf_core::dtype::MXFP4_TWICE;

pub fn unpack_legacy(dtype: DType, b: &[u8]) -> LBlock {
    let mut out = LBlock {
        q: [0; 32],
        d: f16_at(b, 0),
        m: 0.0,
        shape: Shape::Scale,
    };
    match dtype {
        DType::Q4_0 | DType::Q4_1 => {
            let (qs, offset) = if dtype == DType::Q4_0 {
                (&b[2..18], 8)
            } else {
                out.m = f16_at(b, 2);
                out.shape = Shape::ScalePlusMin;
                (&b[4..20], 0)
            };
            for j in 0..16 {
                out.q[j] = (qs[j] & 0xF) as i8 - offset;
                out.q[j + 16] = (qs[j] >> 4) as i8 - offset;
            }
        }
        DType::Q5_0 | DType::Q5_1 => {
            let (qh_at, qs_at, offset) = if dtype == DType::Q5_0 {
                (2, 6, 16)
            } else {
                out.m = f16_at(b, 2);
                out.shape = Shape::ScalePlusMin;
                (4, 8, 0)
            };
            let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
            let qs = &b[qs_at..qs_at + 16];
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) as u8;
                let h1 = ((qh >> (j + 16)) & 1) as u8;
                out.q[j] = ((qs[j] & 0xF) | (h0 << 4)) as i8 - offset;
                out.q[j + 16] = ((qs[j] >> 4) | (h1 << 4)) as i8 - offset;
            }
        }
        DType::Q8_0 => {
            for j in 0..32 {
                out.q[j] = b[2 + j] as i8;
            }
        }
        DType::MXFP4 => {
            // Integer codes twice the E2M1 values, under half the scale: exact.
            out.d = tf_core::dtype::e8m0_half(b[0]);
            for j in 0..16 {
                out.q[j] = MXFP4_TWICE[usize::from(b[1 + j] & 0xF)];
                out.q[j + 16] = MXFP4_TWICE[usize::from(b[1 + j] >> 4)];
            }
        }
        _ => panic!("unpack_legacy: {dtype} is not a legacy quant"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_unpack_equals_per_group_unpack() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let mut s = [0u8; 12];
            for b in s.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let (sc, mn) = scales_mins_k4(&s);
            for j in 0..8 {
                let (a, b) = scale_min_k4(j, &s);
                assert_eq!(((sc >> (8 * j)) & 0xff) as u8, a);
                assert_eq!(((mn >> (8 * j)) & 0xff) as u8, b);
            }
        }
    }
}
