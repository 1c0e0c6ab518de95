//! Weights repacked for the AMX panel kernels ([`super::panel_kernel`]): the same integers
//! (codes, group scales and mins, block scales) as the GGUF blocks, laid out so that a tile load
//! reads them.
//!
//! Columns (output features) go in panels of 16. A panel stores, block after block along k, one
//! *panel block*: the codes of the 16 columns' blocks in tile order, then their integer scales
//! (and mins) column by column, then their f16 block scales. Tile order is the layout of the
//! right operand of `tdpbssd`: a *unit* of `unit_k` values (the values that share one integer
//! scale: a Q4_K group of 32, a Q6_K group of 16, a legacy block of 32) is `unit_k / 4` rows of
//! 64 bytes, row r holding values 4r..4r+4 of each column c at bytes 4c..4c+4. Four-bit code
//! planes hold two such rows in one 64-byte chunk (row 2t in the low nibbles, row 2t+1 in the
//! high ones), so unpacking a chunk is one mask and one shift.
//!
//! | type | panel block (bytes) | parts, in order |
//! |---|---|---|
//! | Q4_K | 2368 | codes 8 × 256 (nibbles), scales 8 × 16, mins 4 × 32 (pairs of groups, per column), d 32, dmin 32 |
//! | Q6_K | 3360 | low nibbles 16 × 128, high two bits 16 × 64 (bits 2r of row r), scales 16 × 16 (i8), d 32 |
//! | Q8_0 | 544 | codes 512 (i8, tile order), d 32 |
//! | Q4_0, Q4_1 | 288, 320 | codes 256 (nibbles), d 32, (m 32) |
//! | Q5_0, Q5_1 | 352, 384 | codes 256 (low nibbles), fifth bits 8 × 8 (a u64 per row), d 32, (m 32) |
//! | MXFP4 | 288 | E2M1 codes 256 (nibbles), d 32 (half the E8M0 scale as f16) |
//!
//! Codes are stored unsigned (the GGUF code); the kernels subtract each type's offset (MXFP4's
//! codes go through a table first: twice their value, plus 12). An MXFP4 matrix packs only
//! where every block's scale is exact in f16 (2^-24 to 2^15, every weight seen in practice);
//! otherwise it keeps its stored layout.

use super::unpack::{unpack_k, unpack_legacy};
use super::WeightMatrix;
use tf_core::DType;

/// Columns per panel.
pub const PANEL: usize = 16;

/// Twice each MXFP4 code's value plus 12: the unsigned code the kernels multiply (the 12 is
/// taken out through the activations' sum, as a legacy type's offset).
pub(crate) const FP4_CODES: [i8; 16] = {
    let mut t = [0i8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = tf_core::dtype::MXFP4_TWICE[i] + 12;
        i += 1;
    }
    t
};

/// How the integer sums of a type's units become the float step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Q4K,
    Q6K,
    Q8_0,
    /// A legacy type with 4-bit (`five: false`) or 5-bit codes, `offset` subtracted from each
    /// code, and a block min (`min`: Q4_1, Q5_1); `fp4`: each code looked up in
    /// [`FP4_CODES`] before the offset (MXFP4).
    Legacy {
        five: bool,
        offset: u8,
        min: bool,
        fp4: bool,
    },
}

/// A type's panel-block layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub kind: Kind,
    /// Values per float block (one step of the float chain).
    pub block_values: usize,
    /// Values per unit (per integer scale).
    pub unit_k: usize,
    /// Bytes of one panel block.
    pub bytes: usize,
    /// Offsets of the f16 block scales, the f16 mins (legacy types with a min) and the fifth
    /// bits (Q5_0, Q5_1).
    pub d_at: usize,
    pub m_at: usize,
    pub high_at: usize,
}

impl Layout {
    pub(crate) fn of(dtype: DType) -> Option<Layout> {
        let legacy = |five: bool, offset: u8, min: bool| {
            let high_at = 256;
            let d_at = if five { 320 } else { 256 };
            Layout {
                kind: Kind::Legacy {
                    five,
                    offset,
                    min,
                    fp4: false,
                },
                block_values: 32,
                unit_k: 32,
                bytes: d_at + 32 + if min { 32 } else { 0 },
                d_at,
                m_at: d_at + 32,
                high_at,
            }
        };
        Some(match dtype {
            DType::Q4K => Layout {
                kind: Kind::Q4K,
                block_values: 256,
                unit_k: 32,
                bytes: 2368,
                d_at: 2304,
                m_at: 2336,
                high_at: 0,
            },
            DType::Q6K => Layout {
                kind: Kind::Q6K,
                block_values: 256,
                unit_k: 16,
                bytes: 3360,
                d_at: 3328,
                m_at: 0,
                high_at: 2048,
            },
            DType::Q8_0 => Layout {
                kind: Kind::Q8_0,
                block_values: 32,
                unit_k: 32,
                bytes: 544,
                d_at: 512,
                m_at: 0,
                high_at: 0,
            },
            DType::Q4_0 => legacy(false, 8, false),
            DType::Q4_1 => legacy(false, 0, true),
            DType::Q5_0 => legacy(true, 16, false),
            DType::Q5_1 => legacy(true, 0, true),
            DType::MXFP4 => Layout {
                kind: Kind::Legacy {
                    five: false,
                    offset: 12,
                    min: false,
                    fp4: true,
                },
                ..legacy(false, 12, false)
            },
            _ => return None,
        })
    }

    /// Units in one float block.
    pub(crate) fn units(&self) -> usize {
        self.block_values / self.unit_k
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct Line(pub [u8; 64]);

/// A weight matrix in panel layout (see the module docs).
pub struct PackedMatrix {
    pub dtype: DType,
    pub k: usize,
    pub n: usize,
    pub(crate) layout: Layout,
    /// Float blocks along k.
    pub(crate) blocks: usize,
    data: Vec<Line>,
}

impl PackedMatrix {
    /// The panel form of `w`, or `None` for a type without one (floats, Q2_K, Q3_K, Q5_K) and
    /// for an MXFP4 matrix with a scale f16 cannot hold.
    pub fn pack(w: &WeightMatrix) -> Option<PackedMatrix> {
        let layout = Layout::of(w.dtype)?;
        let blocks = w.k / layout.block_values;
        let panels = w.n.div_ceil(PANEL);
        let per_panel = blocks * layout.bytes;
        let total = panels * per_panel;
        let mut data = vec![Line([0; 64]); total.div_ceil(64)];
        // SAFETY: `Line` is 64 plain bytes; the view covers exactly the allocation's prefix.
        let bytes: &mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, total) };
        let src_block = w.dtype.block_bytes();
        for (p, panel) in bytes.chunks_exact_mut(per_panel.max(1)).enumerate() {
            for (b, out) in panel.chunks_exact_mut(layout.bytes).enumerate() {
                let cols: Vec<Option<&[u8]>> = (0..PANEL)
                    .map(|c| {
                        let col = p * PANEL + c;
                        (col < w.n).then(|| &w.row(col)[b * src_block..(b + 1) * src_block])
                    })
                    .collect();
                if !pack_block(&layout, w.dtype, &cols, out) {
                    return None;
                }
            }
        }
        Some(PackedMatrix {
            dtype: w.dtype,
            k: w.k,
            n: w.n,
            layout,
            blocks,
            data,
        })
    }

    /// Bytes of the panel form.
    pub fn bytes(&self) -> usize {
        self.data.len() * 64
    }

    /// Panel block `b` of panel `p`.
    #[inline(always)]
    pub(crate) fn block(&self, p: usize, b: usize) -> *const u8 {
        debug_assert!(p < self.n.div_ceil(PANEL) && b < self.blocks);
        // SAFETY: in bounds by the assertion above (the data holds every panel's blocks).
        unsafe { (self.data.as_ptr() as *const u8).add((p * self.blocks + b) * self.layout.bytes) }
    }
}

/// Byte `4c + t` of tile row r for value `i = 4r + t` of column c within a unit.
#[inline(always)]
fn tile_pos(i: usize, c: usize) -> (usize, usize) {
    (i / 4, 4 * c + i % 4)
}

/// Puts a code of column `c`, value `i` of unit `u` into a nibble plane whose units are
/// `unit_bytes` apart (two tile rows per 64-byte chunk).
#[inline(always)]
fn put_nibble(plane: &mut [u8], unit_bytes: usize, u: usize, i: usize, c: usize, code: u8) {
    let (r, at) = tile_pos(i, c);
    let byte = &mut plane[u * unit_bytes + 64 * (r / 2) + at];
    *byte |= (code & 0xF) << (4 * (r % 2));
}

fn f16_bits(b: &[u8], at: usize) -> [u8; 2] {
    [b[at], b[at + 1]]
}

/// One panel block from the 16 columns' blocks (`None`: a column past the matrix, all zero);
/// false when a block cannot be held (an MXFP4 scale outside f16).
fn pack_block(l: &Layout, dtype: DType, cols: &[Option<&[u8]>], out: &mut [u8]) -> bool {
    for (c, blk) in cols.iter().enumerate() {
        let Some(blk) = blk else { continue };
        match l.kind {
            Kind::Legacy { fp4: true, .. } => {
                let d = half::f16::from_f32(tf_core::dtype::e8m0_half(blk[0]));
                if d.to_f32() != tf_core::dtype::e8m0_half(blk[0]) {
                    return false;
                }
                for j in 0..16 {
                    put_nibble(out, 256, 0, j, c, blk[1 + j] & 0xF);
                    put_nibble(out, 256, 0, j + 16, c, blk[1 + j] >> 4);
                }
                out[l.d_at + 2 * c..l.d_at + 2 * c + 2].copy_from_slice(&d.to_le_bytes());
            }
            Kind::Q4K => {
                let kb = unpack_k(dtype, blk);
                for u in 0..8 {
                    for i in 0..32 {
                        put_nibble(out, 256, u, i, c, kb.q[32 * u + i] as u8);
                    }
                    out[2048 + 16 * u + c] = kb.scale[2 * u] as u8;
                    out[2176 + 32 * (u / 2) + 2 * c + u % 2] = kb.min[2 * u] as u8;
                }
                out[2304 + 2 * c..2304 + 2 * c + 2].copy_from_slice(&f16_bits(blk, 0));
                out[2336 + 2 * c..2336 + 2 * c + 2].copy_from_slice(&f16_bits(blk, 2));
            }
            Kind::Q6K => {
                let kb = unpack_k(dtype, blk);
                for u in 0..16 {
                    for i in 0..16 {
                        let code = (kb.q[16 * u + i] + 32) as u8;
                        put_nibble(out, 128, u, i, c, code);
                        let (r, at) = tile_pos(i, c);
                        out[2048 + 64 * u + at] |= (code >> 4) << (2 * r);
                    }
                    out[3072 + 16 * u + c] = kb.scale[u] as i8 as u8;
                }
                out[3328 + 2 * c..3328 + 2 * c + 2].copy_from_slice(&f16_bits(blk, 208));
            }
            Kind::Q8_0 => {
                let lb = unpack_legacy(dtype, blk);
                for i in 0..32 {
                    let (r, at) = tile_pos(i, c);
                    out[64 * r + at] = lb.q[i] as u8;
                }
                out[512 + 2 * c..512 + 2 * c + 2].copy_from_slice(&f16_bits(blk, 0));
            }
            Kind::Legacy {
                five, offset, min, ..
            } => {
                let lb = unpack_legacy(dtype, blk);
                for i in 0..32 {
                    let code = (lb.q[i] + offset as i8) as u8;
                    put_nibble(out, 256, 0, i, c, code);
                    if five && code & 0x10 != 0 {
                        let (r, at) = tile_pos(i, c);
                        out[l.high_at + 8 * r + at / 8] |= 1 << (at % 8);
                    }
                }
                out[l.d_at + 2 * c..l.d_at + 2 * c + 2].copy_from_slice(&f16_bits(blk, 0));
                if min {
                    out[l.m_at + 2 * c..l.m_at + 2 * c + 2].copy_from_slice(&f16_bits(blk, 2));
                }
            }
        }
    }
    true
}
