//! Matrix products `out[r][c] = dot(x[r], w[c])` for every weight type.
//!
//! Work is split over output columns only (each thread owns whole dot products), and every dot
//! product is the same sequence of integer sums and float block steps whatever the number of
//! rows (one row may take a kernel with eight columns in vector lanes, which keeps that
//! sequence per lane): row-exact by construction.

pub mod reference;
pub mod unpack;

/// `pub unsafe fn $name(w, x, r0, out)` with `$feat` enabled: rows `r0..r0 + out.len()` against
/// one weight row through `$rows::<R>` (R = 1..8), eight rows at a time.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_by_eight {
    ($name:ident, $rows:ident, $feat:literal) => {
        #[target_feature(enable = $feat)]
        pub unsafe fn $name(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
            match out.len() {
                1 => $rows::<1>(w, x, r0, out),
                2 => $rows::<2>(w, x, r0, out),
                3 => $rows::<3>(w, x, r0, out),
                4 => $rows::<4>(w, x, r0, out),
                5 => $rows::<5>(w, x, r0, out),
                6 => $rows::<6>(w, x, r0, out),
                7 => $rows::<7>(w, x, r0, out),
                n => {
                    $rows::<8>(w, x, r0, out);
                    if n > 8 {
                        $name(w, x, r0 + 8, &mut out[8..]);
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_cols;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod lanes8;
pub mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_avx2;
#[cfg(target_arch = "x86_64")]
mod panel_kernel;
#[cfg(target_arch = "x86_64")]
pub use panel_kernel::set_vnni_rows;
#[cfg(target_arch = "x86_64")]
mod panel_vnni;

pub use panel::PackedMatrix;

use crate::actq::{ActBlock, QuantAct};
use crate::canon;
use crate::pool::{SharedOut, ThreadPool};
use crate::SimdLevel;
use half::{bf16, f16};
use std::cell::RefCell;
use std::sync::OnceLock;
use tf_core::DType;

/// A weight matrix of `n` rows (output features) of `k` values each, in its stored type, and
/// optionally the same integers in panel layout for the AMX kernels ([`PackedMatrix`]).
#[derive(Clone, Copy)]
pub struct WeightMatrix<'a> {
    pub dtype: DType,
    pub k: usize,
    pub n: usize,
    pub data: &'a [u8],
    pub packed: Option<&'a PackedMatrix>,
}

impl std::fmt::Debug for WeightMatrix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightMatrix")
            .field("dtype", &self.dtype)
            .field("k", &self.k)
            .field("n", &self.n)
            .field("packed", &self.packed.is_some())
            .finish()
    }
}

impl<'a> WeightMatrix<'a> {
    /// `None` when the byte length does not match `n` rows of `k` values of `dtype`.
    pub fn new(dtype: DType, k: usize, n: usize, data: &'a [u8]) -> Option<Self> {
        let row = dtype.bytes_for(k)?;
        (row.checked_mul(n)? == data.len()).then_some(WeightMatrix {
            dtype,
            k,
            n,
            data,
            packed: None,
        })
    }

    /// The same matrix read through its panel form `p` where the AMX kernels can run (the
    /// same bits either way). `p` must be `PackedMatrix::pack(self)`.
    pub fn with_packed(self, p: &'a PackedMatrix) -> WeightMatrix<'a> {
        assert!(p.dtype == self.dtype && p.k == self.k && p.n == self.n);
        WeightMatrix {
            packed: Some(p),
            ..self
        }
    }

    pub fn row_bytes(&self) -> usize {
        self.data.len() / self.n.max(1)
    }

    pub fn row(&self, c: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[c * rb..(c + 1) * rb]
    }
}

/// Which activation quantization a weight type consumes (`None`: float weights, f32 activations).
pub fn act_block(dtype: DType) -> Option<ActBlock> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => None,
        d if d.block_elems() == 32 => Some(ActBlock::B32),
        _ => Some(ActBlock::B256),
    }
}

/// Activation rows with their quantized forms made on first use, so that several matmuls reading
/// the same input (q/k/v, gate/up) quantize it once.
pub struct Activations<'a> {
    pub level: SimdLevel,
    pub x: &'a [f32],
    pub rows: usize,
    pub k: usize,
    q32: OnceLock<QuantAct>,
    q256: OnceLock<QuantAct>,
}

impl<'a> Activations<'a> {
    pub fn new(level: SimdLevel, x: &'a [f32], rows: usize, k: usize) -> Self {
        assert_eq!(x.len(), rows * k);
        Activations {
            level,
            x,
            rows,
            k,
            q32: OnceLock::new(),
            q256: OnceLock::new(),
        }
    }

    pub fn quant(&self, block: ActBlock) -> &QuantAct {
        let cell = match block {
            ActBlock::B32 => &self.q32,
            ActBlock::B256 => &self.q256,
        };
        cell.get_or_init(|| QuantAct::new(self.level, block, self.x, self.rows, self.k))
    }
}

type QDot = unsafe fn(&[u8], &QuantAct, usize) -> f32;
/// Computes `out.len()` consecutive rows starting at the given row against one weight row.
type QRows = unsafe fn(&[u8], &QuantAct, usize, &mut [f32]);
/// Rows `r0..r0 + out.len() / 8` against eight consecutive weight rows given back to back:
/// `out[8 * r + j]` is row `r0 + r` against weight row j.
type QCols8 = unsafe fn(&[u8], &QuantAct, usize, &mut [f32]);

/// The kernel that takes eight output columns at once for one or two activation rows, where
/// one exists ([`avx2_cols`]): it gives the bits of the type's other kernels.
/// Only for short rows (eight of them within [`COLS8_BYTES`]): eight long rows read side by side
/// are eight streams that the hardware prefetchers serve worse than one.
fn cols8_kernel(level: SimdLevel, w: &WeightMatrix) -> Option<QCols8> {
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx2 && 8 * w.row_bytes() <= COLS8_BYTES {
        return match w.dtype {
            DType::Q4_0 => Some(avx2_cols::cols8_q4_0),
            DType::Q4K => Some(avx2_cols::cols8_q4k),
            _ => None,
        };
    }
    let _ = (level, w);
    None
}

/// Whether a matrix of `dtype` is worth packing into panel form ([`PackedMatrix`]) for the
/// kernels of `level`: every type with a panel form at AVX-512 VNNI, Q4_0 and Q4_K at AVX2.
pub fn packs_at(level: SimdLevel, dtype: DType) -> bool {
    match level {
        SimdLevel::Avx512Vnni => panel::Layout::of(dtype).is_some(),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => panel_avx2::packs(dtype),
        _ => false,
    }
}

/// Bytes of eight weight rows up to which [`cols8_kernel`] applies.
const COLS8_BYTES: usize = 32 * 1024;

enum Kernel {
    Dot(QDot),
    Rows(QRows),
}

fn quant_kernel(level: SimdLevel, dtype: DType) -> Kernel {
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx512Vnni {
        return match dtype {
            DType::Q4K => Kernel::Rows(avx512::rows_q4k),
            DType::Q6K => Kernel::Rows(avx512::rows_q6k),
            DType::Q4_0 => Kernel::Rows(avx512::rows_q4_0),
            DType::Q4_1 => Kernel::Rows(avx512::rows_q4_1),
            DType::Q5_0 => Kernel::Rows(avx512::rows_q5_0),
            DType::Q5_1 => Kernel::Rows(avx512::rows_q5_1),
            DType::Q8_0 => Kernel::Rows(avx512::rows_q8_0),
            DType::MXFP4 => Kernel::Rows(avx512::rows_mxfp4),
            DType::Q2K => Kernel::Dot(avx512::dot_q2k),
            DType::Q3K => Kernel::Dot(avx512::dot_q3k),
            DType::Q5K => Kernel::Dot(avx512::dot_q5k),
            _ => Kernel::Dot(reference_dot(dtype)),
        };
    }
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx2 {
        return match dtype {
            DType::Q4_0 => Kernel::Rows(avx2::rows_q4_0),
            DType::Q4_1 => Kernel::Dot(avx2::dot_q4_1),
            DType::Q5_0 => Kernel::Dot(avx2::dot_q5_0),
            DType::Q5_1 => Kernel::Dot(avx2::dot_q5_1),
            DType::Q8_0 => Kernel::Dot(avx2::dot_q8_0),
            DType::Q2K => Kernel::Dot(avx2::dot_q2k),
            DType::Q3K => Kernel::Dot(avx2::dot_q3k),
            DType::Q4K => Kernel::Rows(avx2::rows_q4k),
            DType::Q5K => Kernel::Dot(avx2::dot_q5k),
            DType::Q6K => Kernel::Rows(avx2::rows_q6k),
            _ => Kernel::Dot(reference_dot(dtype)),
        };
    }
    let _ = level;
    Kernel::Dot(reference_dot(dtype))
}

fn reference_dot(dtype: DType) -> QDot {
    macro_rules! r {
        ($t:expr) => {{
            unsafe fn f(w: &[u8], x: &QuantAct, row: usize) -> f32 {
                reference::dot_ref($t, w, x, row)
            }
            f as QDot
        }};
    }
    match dtype {
        DType::Q4_0 => r!(DType::Q4_0),
        DType::Q4_1 => r!(DType::Q4_1),
        DType::Q5_0 => r!(DType::Q5_0),
        DType::Q5_1 => r!(DType::Q5_1),
        DType::Q8_0 => r!(DType::Q8_0),
        DType::Q2K => r!(DType::Q2K),
        DType::Q3K => r!(DType::Q3K),
        DType::Q4K => r!(DType::Q4K),
        DType::Q5K => r!(DType::Q5K),
        DType::Q6K => r!(DType::Q6K),
        DType::MXFP4 => r!(DType::MXFP4),
        other => unreachable!("{other} has no quantized kernel"),
    }
}

/// Up to this many rows take the eight-columns kernel ([`cols8_kernel`]).
const COLS8_ROWS: usize = 2;

/// Rows sharing one decoded weight block in the multi-row kernels.
const ROW_TILE: usize = 8;

/// Rows of activations handled together per weight column: the column's weights stay in L1
/// while these rows stream past.
const ROW_CHUNK: usize = 64;

/// `out[r * w.n + c] = x[r] · w[c]` for all rows r and columns c.
pub fn matmul(pool: &ThreadPool, w: &WeightMatrix, x: &Activations, out: &mut [f32]) {
    assert_eq!(w.k, x.k, "matmul: k mismatch");
    assert_eq!(out.len(), x.rows * w.n, "matmul: output size");
    matmul_cols(pool, w, x, out, 0..w.n, w.n);
}

/// Like [`matmul`] for columns `cols` of `w` only, written to `out[r * out_stride + (c - cols.start)]`.
pub fn matmul_cols(
    pool: &ThreadPool,
    w: &WeightMatrix,
    x: &Activations,
    out: &mut [f32],
    cols: std::ops::Range<usize>,
    out_stride: usize,
) {
    let level = x.level;
    let rows = x.rows;
    let base = cols.start;
    assert!(out.len() >= rows.saturating_sub(1) * out_stride + cols.len());
    #[cfg(target_arch = "x86_64")]
    if let Some(p) = w.packed {
        if level >= SimdLevel::Avx512Vnni && rows > 0 && cols.start.is_multiple_of(panel::PANEL) {
            let xq = x.quant(panel_kernel::act_block(p));
            // SAFETY: AVX-512 VNNI was detected; `out` holds every row's columns (asserted
            // above).
            unsafe { panel_kernel::matmul_packed(pool, p, xq, out, cols, out_stride) };
            return;
        }
        if level == SimdLevel::Avx2
            && panel_avx2::packs(p.dtype)
            && cols.start.is_multiple_of(panel::PANEL)
        {
            let xq = x.quant(panel_kernel::act_block(p));
            // SAFETY: AVX2, FMA and F16C were detected; `out` holds every row's columns
            // (asserted above).
            unsafe { panel_avx2::matmul_packed(pool, p, xq, out, cols, out_stride) };
            return;
        }
    }
    let dst = SharedOut(out.as_mut_ptr());
    match act_block(w.dtype) {
        Some(block) => {
            let xq = x.quant(block);
            let kernel = quant_kernel(level, w.dtype);
            let cols8 = cols8_kernel(level, w).filter(|_| rows <= COLS8_ROWS);
            pool.for_ranges(cols.len(), 8, &|range| {
                // One or two rows: whole groups of eight columns first, in vector lanes; the
                // columns left over go through the per-column kernel below.
                let mut start = range.start;
                if let Some(cols8) = cols8 {
                    let rb = w.row_bytes();
                    let mut tile = [0f32; 8 * COLS8_ROWS];
                    let tile = &mut tile[..8 * rows];
                    while start + 8 <= range.end {
                        let at = (base + start) * rb;
                        // SAFETY: the kernel's CPU features were detected on this CPU.
                        unsafe { cols8(&w.data[at..at + 8 * rb], xq, 0, tile) };
                        for (i, v) in tile.iter().enumerate() {
                            let (r, j) = (i / 8, i % 8);
                            // SAFETY: columns are split between threads; index in bounds.
                            unsafe { dst.write(r * out_stride + start + j, *v) };
                        }
                        start += 8;
                    }
                }
                let mut tile = [0f32; ROW_TILE];
                for r0 in (0..rows).step_by(ROW_CHUNK) {
                    let r1 = (r0 + ROW_CHUNK).min(rows);
                    for c in start..range.end {
                        let wrow = w.row(base + c);
                        let mut r = r0;
                        while r < r1 {
                            let n = ROW_TILE.min(r1 - r);
                            match kernel {
                                // SAFETY: the kernel's CPU features were detected on this CPU.
                                Kernel::Rows(f) => unsafe { f(wrow, xq, r, &mut tile[..n]) },
                                Kernel::Dot(f) => {
                                    for (i, t) in tile[..n].iter_mut().enumerate() {
                                        // SAFETY: as above.
                                        *t = unsafe { f(wrow, xq, r + i) };
                                    }
                                }
                            }
                            for (i, v) in tile[..n].iter().enumerate() {
                                // SAFETY: columns are split between threads; index in bounds.
                                unsafe { dst.write((r + i) * out_stride + c, *v) };
                            }
                            r += n;
                        }
                    }
                }
            });
        }
        None => {
            pool.for_ranges(cols.len(), 8, &|range| {
                thread_local! { static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) }; }
                ROW.with(|buf| {
                    let mut buf = buf.borrow_mut();
                    buf.resize(w.k, 0.0);
                    for c in range.clone() {
                        let wrow: &[f32] = match w.dtype {
                            DType::F32 => {
                                let bytes = w.row(base + c);
                                for (o, ch) in buf.iter_mut().zip(bytes.chunks_exact(4)) {
                                    *o = f32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]);
                                }
                                &buf
                            }
                            DType::F16 | DType::BF16 => {
                                let bytes = w.row(base + c);
                                for (o, ch) in buf.iter_mut().zip(bytes.chunks_exact(2)) {
                                    let bits = u16::from_le_bytes([ch[0], ch[1]]);
                                    *o = if w.dtype == DType::F16 {
                                        f16::from_bits(bits).to_f32()
                                    } else {
                                        bf16::from_bits(bits).to_f32()
                                    };
                                }
                                &buf
                            }
                            _ => unreachable!(),
                        };
                        for r in 0..rows {
                            let v = canon::dot(level, wrow, &x.x[r * x.k..(r + 1) * x.k]);
                            // SAFETY: as above.
                            unsafe { dst.write(r * out_stride + c, v) };
                        }
                    }
                });
            });
        }
    }
}
