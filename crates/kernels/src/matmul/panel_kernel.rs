//! The AMX panel kernels: `out[r][c] = x[r] · w[c]` for weights in panel layout
//! ([`PackedMatrix`]).
//!
//! For each panel (16 columns) and each group of units along k, the codes are unpacked once into
//! tile order; then every chunk of up to 16 activation rows gets, per unit, one tile multiply
//! (`tdpbssd`: the unit's exact integer sums of 16 rows × 16 columns), and the sums go through
//! the type's integer scales and the float step of [`block_step`](super::reference::block_step)
//! on 16 columns at once. The integers are those of every other kernel and the float step is
//! the same IEEE operations per (row, column) in ascending block order, so the bits are the
//! reference's whatever the row count, the chunking or the thread count.
//!
//! Multiplies cost the same for 1 row and 16 (one tile instruction), so a verify round of many
//! rows costs little more than one row: the weights are read and unpacked once per call.

use super::amx;
use super::panel::{Kind, Layout, Line, PackedMatrix, PANEL};
use super::panel_vnni::panel_rows;
use crate::actq::{ActBlock, QuantAct};
use crate::pool::{SharedOut, ThreadPool};
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Rows of one tile multiply.
const CHUNK: usize = 16;
/// Rows that share one unpacking of each panel block (their activations stay in L2).
const PASS_ROWS: usize = 64;
/// Most units in one group (one float block of Q6_K; one of Q4_K; eight legacy blocks).
const MAX_UNITS: usize = 16;
/// Legacy blocks per group.
const LEGACY_GROUP: usize = 8;
/// Bytes of one group's unpacked codes (up to `MAX_UNITS` units of 256 bytes, or 8 of 512).
const GROUP_CODE_BYTES: usize = 4096;

struct Scratch {
    /// Unpacked codes of two groups (the one multiplied and the next).
    codes: Vec<Line>,
    /// Integer sums of two chunks (the one multiplied and the one scaled): per unit, 16 rows
    /// of 16 i32.
    sums: Vec<Line>,
    /// Float accumulators of one pass: per row, 16 columns.
    acc: Vec<Line>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        codes: vec![Line([0; 64]); 2 * GROUP_CODE_BYTES / 64],
        sums: vec![Line([0; 64]); 2 * MAX_UNITS * CHUNK],
        acc: vec![Line([0; 64]); PASS_ROWS],
    });
}

/// The activation block size a panel type reads.
pub(crate) fn act_block(p: &PackedMatrix) -> ActBlock {
    if p.layout.block_values == 256 {
        ActBlock::B256
    } else {
        ActBlock::B32
    }
}

/// Calls of at most this many rows take the VNNI panel kernel ([`super::panel_vnni`]) even
/// where tiles are available; see [`set_vnni_rows`]. Either kernel gives the same bits.
fn vnni_rows() -> usize {
    let v = VNNI_ROWS.load(Ordering::Relaxed);
    if v != usize::MAX {
        return v;
    }
    let v = std::env::var("TENSORFOLD_PANEL_VNNI_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_VNNI_ROWS);
    VNNI_ROWS.store(v, Ordering::Relaxed);
    v
}

/// Calls of up to 8 rows take the VNNI panel kernel (one pass of eight rows over the weights):
/// on the 2-core AMX machine, Qwen2.5-Coder-1.5B Q4_K_M forward of 8 rows 82.9 ms against
/// 93.2 on tiles; 16 rows (two passes) 143.0 ms against 125.1. Prefill's larger calls are
/// several times faster on tiles.
const DEFAULT_VNNI_ROWS: usize = 8;

static VNNI_ROWS: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sets the most rows a call may have and still take the VNNI panel kernel where tiles are
/// available (default [`DEFAULT_VNNI_ROWS`], or `TENSORFOLD_PANEL_VNNI_ROWS`): for measuring,
/// and for tests that run both kernels. Only speed changes.
pub fn set_vnni_rows(rows: usize) {
    VNNI_ROWS.store(rows, Ordering::Relaxed);
}

/// Columns `cols` of `p` (a range starting on a panel boundary) for every row of `x` into
/// `out[r * out_stride + (c - cols.start)]`: tiles where AMX is available and the call has more
/// than [`vnni_rows`] rows, else the VNNI panel kernel.
///
/// # Safety
/// The CPU must have AVX-512 VNNI; `out` must hold the rows and columns written.
pub(crate) unsafe fn matmul_packed(
    pool: &ThreadPool,
    p: &PackedMatrix,
    x: &QuantAct,
    out: &mut [f32],
    cols: std::ops::Range<usize>,
    out_stride: usize,
) {
    let tiles = x.rows > vnni_rows() && amx::available();
    Job::split(pool, p, x, out, cols, out_stride, &|job, panels| {
        // SAFETY: the CPU has AVX-512 VNNI (the caller's contract) and, for tiles, AMX.
        unsafe {
            if tiles {
                job.tiles(panels)
            } else {
                job.vnni(panels)
            }
        }
    });
}

/// One thread's share of a panel matmul (also run by [`super::panel_avx2`]).
pub(super) struct Job<'a> {
    pub p: &'a PackedMatrix,
    pub x: &'a QuantAct,
    pub dst: &'a SharedOut,
    pub base: usize,
    /// End of this thread's columns (none from here on are written).
    pub col_end: usize,
    pub out_stride: usize,
}

impl<'a> Job<'a> {
    /// Splits columns `cols` of `p` (whole panels, from a panel boundary) over the pool and
    /// runs `run` on each thread's job and panels, writing `out[r * out_stride + (c -
    /// cols.start)]`.
    pub(super) fn split(
        pool: &ThreadPool,
        p: &'a PackedMatrix,
        x: &'a QuantAct,
        out: &mut [f32],
        cols: std::ops::Range<usize>,
        out_stride: usize,
        run: &(dyn Fn(&Job, std::ops::Range<usize>) + Sync),
    ) {
        assert!(
            cols.start.is_multiple_of(PANEL),
            "panel ranges start on a panel"
        );
        assert!(cols.end <= p.n && x.k == p.k);
        let dst = SharedOut(out.as_mut_ptr());
        let base = cols.start;
        pool.for_ranges(cols.len(), PANEL, &|range| {
            let job = Job {
                p,
                x,
                dst: &dst,
                base,
                col_end: base + range.end,
                out_stride,
            };
            run(
                &job,
                (base + range.start) / PANEL..(base + range.end).div_ceil(PANEL),
            );
        });
    }

    /// The panels through tiles, in passes of rows of one chunk height each.
    unsafe fn tiles(&self, panels: std::ops::Range<usize>) {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let rows = self.x.rows;
            let unit_k = self.p.layout.unit_k;
            let full = rows / CHUNK * CHUNK;
            // SAFETY: AMX is available (checked by the caller); the tiles are configured for
            // the chunk height of each pass before it runs.
            unsafe {
                if full > 0 {
                    amx::configure(CHUNK, unit_k);
                    for r0 in (0..full).step_by(PASS_ROWS) {
                        self.pass(
                            &mut s,
                            panels.clone(),
                            r0..(r0 + PASS_ROWS).min(full),
                            CHUNK,
                        );
                    }
                }
                if rows > full {
                    amx::configure(rows - full, unit_k);
                    self.pass(&mut s, panels.clone(), full..rows, rows - full);
                }
            }
        });
    }

    /// The panels through the VNNI panel kernel, eight rows at a time.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn vnni(&self, panels: std::ops::Range<usize>) {
        let mut acc = [_mm512_setzero_ps(); 8];
        for panel in panels {
            let mut r0 = 0;
            while r0 < self.x.rows {
                let n = (self.x.rows - r0).min(8);
                let (p, x) = (self.p, self.x);
                match n {
                    1 => panel_rows::<1>(p, x, panel, r0, &mut acc),
                    2 => panel_rows::<2>(p, x, panel, r0, &mut acc),
                    3 => panel_rows::<3>(p, x, panel, r0, &mut acc),
                    4 => panel_rows::<4>(p, x, panel, r0, &mut acc),
                    5 => panel_rows::<5>(p, x, panel, r0, &mut acc),
                    6 => panel_rows::<6>(p, x, panel, r0, &mut acc),
                    7 => panel_rows::<7>(p, x, panel, r0, &mut acc),
                    _ => panel_rows::<8>(p, x, panel, r0, &mut acc),
                }
                let mask = self.mask(panel);
                for (i, a) in acc.iter().enumerate().take(n) {
                    let at = (r0 + i) * self.out_stride + (panel * PANEL - self.base);
                    _mm512_mask_storeu_ps(self.dst.0.add(at), mask, *a);
                }
                r0 += n;
            }
        }
    }

    /// Lanes of this thread's columns in `panel` (the last panel of a range may be partial).
    fn mask(&self, panel: usize) -> __mmask16 {
        let valid = (self.col_end - panel * PANEL).min(PANEL);
        if valid == PANEL {
            0xFFFF
        } else {
            ((1u32 << valid) - 1) as u16
        }
    }

    /// Rows `rows` (chunks of `m`, tiles configured for `m`) against `panels`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn pass(
        &self,
        s: &mut Scratch,
        panels: std::ops::Range<usize>,
        rows: std::ops::Range<usize>,
        m: usize,
    ) {
        let (p, x, l) = (self.p, self.x, &self.p.layout);
        let n_rows = rows.len();
        let group_blocks = if l.block_values == 32 {
            LEGACY_GROUP
        } else {
            1
        };
        let codes = s.codes.as_mut_ptr() as *mut u8;
        let sums = s.sums.as_mut_ptr() as *mut i32;
        let acc = s.acc.as_mut_ptr() as *mut f32;
        // Groups in memory order (panel after panel). The codes of the next group are unpacked
        // (two buffers) before the tile loads of this one: a tile load waits until the stores
        // it reads have retired, so unpacking one group ahead keeps the next group's weight
        // loads in flight while this group multiplies.
        let per_panel = p.blocks.div_ceil(group_blocks);
        let first_item = panels.start * per_panel;
        let end_item = panels.end * per_panel;
        let group = |item: usize| {
            let (panel, g) = (item / per_panel, item % per_panel);
            let b0 = g * group_blocks;
            (panel, b0, group_blocks.min(p.blocks - b0))
        };
        let buf = |item: usize| codes.add((item & 1) * GROUP_CODE_BYTES);
        let unpack = |item: usize| {
            let (panel, b0, nb) = group(item);
            let first = p.block(panel, b0);
            prefetch(first, nb * l.bytes);
            unpack_group(l, first, nb, buf(item))
        };
        let post = |first: *const u8, b0: usize, nb: usize, r0: usize, sums: *const i32| {
            let acc_rows = acc.add(16 * (r0 - rows.start));
            match l.kind {
                Kind::Q4K => post_q4k(first, b0, x, r0, m, sums, acc_rows),
                Kind::Q6K => post_q6k(first, b0, x, r0, m, sums, acc_rows),
                Kind::Q8_0 | Kind::Legacy { min: false, .. } => {
                    post_legacy::<false>(l, first, b0, nb, x, r0, m, sums, acc_rows)
                }
                Kind::Legacy { min: true, .. } => {
                    post_legacy::<true>(l, first, b0, nb, x, r0, m, sums, acc_rows)
                }
            }
        };
        let tiles = |b0: usize, nb: usize, r0: usize, codes: (*const u8, usize), sums: *mut i32| {
            let a = x.qs.as_ptr().add(r0 * x.k + b0 * l.block_values);
            let units = nb * l.units();
            amx::units(units, a, x.k, l.unit_k, codes.0, codes.1, sums, CHUNK * 16);
        };
        let finish = |panel: usize| {
            let c0 = panel * PANEL;
            let mask = self.mask(panel);
            for i in 0..n_rows {
                let at = (rows.start + i) * self.out_stride + (c0 - self.base);
                _mm512_mask_storeu_ps(self.dst.0.add(at), mask, _mm512_loadu_ps(acc.add(16 * i)));
                _mm512_storeu_ps(acc.add(16 * i), _mm512_setzero_ps());
            }
        };
        for i in 0..n_rows {
            _mm512_storeu_ps(acc.add(16 * i), _mm512_setzero_ps());
        }
        let mut next = unpack(first_item);
        if n_rows == m {
            // One chunk: a group's sums are scaled after the next group's tile products are
            // under way (two sum buffers), so the vector loads never wait on tile stores still
            // in flight and the tile unit works while the vector units scale.
            let mut pending: Option<(usize, *mut i32)> = None;
            for item in first_item..end_item {
                let (_, b0, nb) = group(item);
                let codes = next;
                if item + 1 < end_item {
                    next = unpack(item + 1);
                }
                let sums_now = sums.add((item & 1) * MAX_UNITS * CHUNK * 16);
                tiles(b0, nb, rows.start, codes, sums_now);
                if let Some((prev, prev_sums)) = pending.replace((item, sums_now)) {
                    let (panel, pb0, pnb) = group(prev);
                    post(p.block(panel, pb0), pb0, pnb, rows.start, prev_sums);
                    if pb0 + pnb == p.blocks {
                        finish(panel);
                    }
                }
            }
            if let Some((prev, prev_sums)) = pending {
                let (panel, pb0, pnb) = group(prev);
                post(p.block(panel, pb0), pb0, pnb, rows.start, prev_sums);
                finish(panel);
            }
            return;
        }
        for item in first_item..end_item {
            let (panel, b0, nb) = group(item);
            let codes = next;
            if item + 1 < end_item {
                next = unpack(item + 1);
            }
            for r0 in rows.clone().step_by(m) {
                tiles(b0, nb, r0, codes, sums);
                post(p.block(panel, b0), b0, nb, r0, sums);
            }
            if b0 + nb == p.blocks {
                finish(panel);
            }
        }
    }
}

/// The codes of `nb` consecutive panel blocks from `first` in tile order, and the bytes from
/// one unit's codes to the next: in place for Q8_0 (each block's codes are followed by its
/// scales), else unpacked into `buf`.
#[inline(always)]
unsafe fn unpack_group(
    l: &Layout,
    first: *const u8,
    nb: usize,
    buf: *mut u8,
) -> (*const u8, usize) {
    let m4 = _mm512_set1_epi8(0x0F);
    match l.kind {
        Kind::Q8_0 => return (first, l.bytes),
        Kind::Q4K => {
            for ch in 0..32 {
                let v = _mm512_loadu_si512(first.add(64 * ch) as *const _);
                nibble_rows(v, m4, _mm512_setzero_si512(), buf.add(128 * ch));
            }
        }
        Kind::Q6K => {
            let off = _mm512_set1_epi8(32);
            for u in 0..16 {
                for (r, c) in q6k_unit_codes(first, u).into_iter().enumerate() {
                    _mm512_storeu_si512(
                        buf.add(256 * u + 64 * r) as *mut _,
                        _mm512_sub_epi8(c, off),
                    );
                }
            }
        }
        Kind::Legacy { fp4: true, .. } => {
            // Signed values straight from the table (twice the E2M1 value).
            let table = _mm512_broadcast_i32x4(_mm_loadu_si128(
                tf_core::dtype::MXFP4_TWICE.as_ptr() as *const __m128i,
            ));
            for j in 0..nb {
                let src = first.add(j * l.bytes);
                for t in 0..4 {
                    let v = _mm512_loadu_si512(src.add(64 * t) as *const _);
                    let dst = buf.add(512 * j + 128 * t);
                    let lo = _mm512_and_si512(v, m4);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                    _mm512_storeu_si512(dst as *mut _, _mm512_shuffle_epi8(table, lo));
                    _mm512_storeu_si512(dst.add(64) as *mut _, _mm512_shuffle_epi8(table, hi));
                }
            }
        }
        Kind::Legacy { five, offset, .. } => {
            let off = _mm512_set1_epi8(offset as i8);
            let sixteen = _mm512_set1_epi8(16);
            for j in 0..nb {
                let src = first.add(j * l.bytes);
                for t in 0..4 {
                    let v = _mm512_loadu_si512(src.add(64 * t) as *const _);
                    let dst = buf.add(512 * j + 128 * t);
                    if five {
                        let high = src.add(l.high_at + 16 * t) as *const u64;
                        let lo = _mm512_and_si512(v, m4);
                        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                        let lo = _mm512_mask_add_epi8(lo, high.read_unaligned(), lo, sixteen);
                        let hi =
                            _mm512_mask_add_epi8(hi, high.add(1).read_unaligned(), hi, sixteen);
                        _mm512_storeu_si512(dst as *mut _, _mm512_sub_epi8(lo, off));
                        _mm512_storeu_si512(dst.add(64) as *mut _, _mm512_sub_epi8(hi, off));
                    } else {
                        nibble_rows(v, m4, off, dst);
                    }
                }
            }
        }
    }
    (buf, l.unit_k / 4 * 64)
}

/// How far ahead of the panel block in use the kernels ask for weights, and into which cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Prefetch {
    /// Bytes ahead (0: no prefetch). Panels lie one after another, so this runs into the next
    /// panel at the end of one.
    distance: usize,
    /// Into L2 (`prefetcht1`) rather than L1 (`prefetcht0`).
    l2: bool,
}

impl Prefetch {
    /// `TENSORFOLD_PANEL_PREFETCH=BYTES[:l1|:l2]` (0: off).
    fn parse(v: &str) -> Option<Prefetch> {
        let (n, cache) = v.split_once(':').unwrap_or((v, ""));
        let l2 = match cache {
            "" | "l2" => true,
            "l1" => false,
            _ => return None,
        };
        Some(Prefetch {
            distance: n.trim().parse().ok()?,
            l2,
        })
    }
}

/// The prefetch plan: `TENSORFOLD_PANEL_PREFETCH`, else what was measured best on each kind of
/// machine (docs/benchmarks.md): 2 KiB into L1 where AMX is built in (Sapphire Rapids class),
/// 6 KiB into L2 elsewhere (Zen 4: a few-row call's arithmetic then hides the memory stream
/// instead of adding to it; into L1 or nearer, it does not). A prefetch changes no result.
fn prefetch_plan() -> Prefetch {
    static P: std::sync::OnceLock<Prefetch> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        if let Ok(v) = std::env::var("TENSORFOLD_PANEL_PREFETCH") {
            match Prefetch::parse(&v) {
                Some(p) => return p,
                None => eprintln!(
                    "warning: TENSORFOLD_PANEL_PREFETCH={v:?} is not BYTES[:l1|:l2]; using the default"
                ),
            }
        }
        if amx::hardware() {
            Prefetch {
                distance: 2048,
                l2: false,
            }
        } else {
            Prefetch {
                distance: 6144,
                l2: true,
            }
        }
    })
}

/// Prefetches the `len` bytes at `p` plus the prefetch distance.
#[inline(always)]
pub(super) unsafe fn prefetch(p: *const u8, len: usize) {
    let plan = prefetch_plan();
    if plan.distance == 0 {
        return;
    }
    let at = p.wrapping_add(plan.distance);
    let mut off = 0;
    while off < len {
        let line = at.wrapping_add(off) as *const i8;
        if plan.l2 {
            _mm_prefetch::<_MM_HINT_T1>(line);
        } else {
            _mm_prefetch::<_MM_HINT_T0>(line);
        }
        off += 64;
    }
}

/// The four tile rows of Q6_K unit `u` of the panel block at `blk`, as unsigned 6-bit codes
/// (`low nibble | high two bits << 4`).
#[inline(always)]
pub(super) unsafe fn q6k_unit_codes(blk: *const u8, u: usize) -> [__m512i; 4] {
    let m4 = _mm512_set1_epi8(0x0F);
    let m30 = _mm512_set1_epi8(0x30);
    let n0 = _mm512_loadu_si512(blk.add(128 * u) as *const _);
    let n1 = _mm512_loadu_si512(blk.add(128 * u + 64) as *const _);
    let h = _mm512_loadu_si512(blk.add(2048 + 64 * u) as *const _);
    let highs = [
        _mm512_slli_epi16::<4>(h),
        _mm512_slli_epi16::<2>(h),
        h,
        _mm512_srli_epi16::<2>(h),
    ];
    let lows = [
        n0,
        _mm512_srli_epi16::<4>(n0),
        n1,
        _mm512_srli_epi16::<4>(n1),
    ];
    // (low & 0x0F) | (high & 0x30)
    std::array::from_fn(|r| {
        _mm512_ternarylogic_epi32::<0xEA>(lows[r], m4, _mm512_and_si512(highs[r], m30))
    })
}

/// A chunk of two nibble-packed tile rows into `dst` (low nibbles, then high), less `off`.
#[inline(always)]
unsafe fn nibble_rows(v: __m512i, m4: __m512i, off: __m512i, dst: *mut u8) {
    let lo = _mm512_and_si512(v, m4);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
    _mm512_storeu_si512(dst as *mut _, _mm512_sub_epi8(lo, off));
    _mm512_storeu_si512(dst.add(64) as *mut _, _mm512_sub_epi8(hi, off));
}

/// f16 scales of 16 columns at `p`, widened exactly.
#[inline(always)]
pub(super) unsafe fn scales16(p: *const u8) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// Row `i` of unit `u`'s integer sums.
#[inline(always)]
unsafe fn unit_sums(sums: *const i32, u: usize, i: usize) -> __m512i {
    _mm512_loadu_si512(sums.add(u * CHUNK * 16 + 16 * i) as *const _)
}

/// `acc + ((d*dx)*isum - (dmin*dx)*msum)` per column (`dmin` absent: `acc + (d*dx)*isum`).
#[inline(always)]
pub(super) unsafe fn step16(
    acc: __m512,
    d: __m512,
    dmin: Option<(__m512, __m512i, bool)>,
    dx: __m512,
    isum: __m512i,
) -> __m512 {
    let t1 = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum));
    match dmin {
        None => _mm512_add_ps(acc, t1),
        Some((m, msum, plus)) => {
            let t2 = _mm512_mul_ps(_mm512_mul_ps(m, dx), _mm512_cvtepi32_ps(msum));
            let t = if plus {
                _mm512_add_ps(t1, t2)
            } else {
                _mm512_sub_ps(t1, t2)
            };
            _mm512_add_ps(acc, t)
        }
    }
}

/// Q4_K: isum = Σ_u scale_u · S_u, msum = Σ_u min_u · (sum of the row's 32 values of unit u).
#[inline(always)]
unsafe fn post_q4k(
    blk: *const u8,
    b: usize,
    x: &QuantAct,
    r0: usize,
    m: usize,
    sums: *const i32,
    acc: *mut f32,
) {
    let sc: [__m512i; 8] = std::array::from_fn(|u| {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2048 + 16 * u) as *const __m128i))
    });
    let tail = Q4kTail::of(blk);
    for i in 0..m {
        let mut isum = _mm512_setzero_si512();
        for (u, s) in sc.iter().enumerate() {
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(unit_sums(sums, u, i), *s));
        }
        let a = _mm512_loadu_ps(acc.add(16 * i));
        _mm512_storeu_ps(acc.add(16 * i), tail.step(a, x, b, r0 + i, isum));
    }
}

/// A Q4_K panel block's mins and float scales, for the float step of its rows.
pub(super) struct Q4kTail {
    mins: [__m512i; 4],
    d: __m512,
    dmin: __m512,
}

impl Q4kTail {
    #[inline(always)]
    pub(super) unsafe fn of(blk: *const u8) -> Q4kTail {
        Q4kTail {
            mins: std::array::from_fn(|q| {
                _mm512_cvtepu8_epi16(_mm256_loadu_si256(blk.add(2176 + 32 * q) as *const __m256i))
            }),
            d: scales16(blk.add(2304)),
            dmin: scales16(blk.add(2336)),
        }
    }

    /// Row `r`'s float step for block `b` with integer sums `isum`: msum from the row's eight
    /// 32-value sums (four pairs of i16) against the mins' pairs.
    #[inline(always)]
    pub(super) unsafe fn step(
        &self,
        acc: __m512,
        x: &QuantAct,
        b: usize,
        r: usize,
        isum: __m512i,
    ) -> __m512 {
        let pairs = x.sums32_t.as_ptr().add((b * x.rows + r) * 8) as *const i32;
        let mut msum = _mm512_setzero_si512();
        for (q, mv) in self.mins.iter().enumerate() {
            msum = _mm512_dpwssd_epi32(msum, *mv, _mm512_set1_epi32(pairs.add(q).read_unaligned()));
        }
        let dx = _mm512_set1_ps(*x.d_t.get_unchecked(b * x.rows + r));
        step16(acc, self.d, Some((self.dmin, msum, false)), dx, isum)
    }
}

/// Q6_K: isum = Σ_u scale_u · S_u over its 16 units (the codes' offset is already out).
#[inline(always)]
unsafe fn post_q6k(
    blk: *const u8,
    b: usize,
    x: &QuantAct,
    r0: usize,
    m: usize,
    sums: *const i32,
    acc: *mut f32,
) {
    let sc: [__m512i; 16] = std::array::from_fn(|u| {
        _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(3072 + 16 * u) as *const __m128i))
    });
    let d = scales16(blk.add(3328));
    for i in 0..m {
        let r = r0 + i;
        let mut isum = _mm512_setzero_si512();
        for (u, s) in sc.iter().enumerate() {
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(unit_sums(sums, u, i), *s));
        }
        let dx = _mm512_set1_ps(*x.d_t.get_unchecked(b * x.rows + r));
        let a = _mm512_loadu_ps(acc.add(16 * i));
        _mm512_storeu_ps(acc.add(16 * i), step16(a, d, None, dx, isum));
    }
}

/// Legacy types and Q8_0: one float step per 32-value block, `nb` blocks from `b0`; with a
/// min (`MIN`), `+ (m*dx) * (sum of the row's 32 values)`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn post_legacy<const MIN: bool>(
    l: &Layout,
    first: *const u8,
    b0: usize,
    nb: usize,
    x: &QuantAct,
    r0: usize,
    m: usize,
    sums: *const i32,
    acc: *mut f32,
) {
    let nblk = x.k / 32;
    let mut d = [_mm512_setzero_ps(); LEGACY_GROUP];
    let mut mn = [_mm512_setzero_ps(); LEGACY_GROUP];
    for j in 0..nb {
        d[j] = scales16(first.add(j * l.bytes + l.d_at));
        if MIN {
            mn[j] = scales16(first.add(j * l.bytes + l.m_at));
        }
    }
    for i in 0..m {
        let r = r0 + i;
        let dxs = x.d.as_ptr().add(r * nblk + b0);
        let xsums = x.sums.as_ptr().add(r * nblk + b0);
        let mut a = _mm512_loadu_ps(acc.add(16 * i));
        for j in 0..nb {
            let dx = _mm512_set1_ps(*dxs.add(j));
            let isum = unit_sums(sums, j, i);
            let min = MIN.then(|| (mn[j], _mm512_set1_epi32(*xsums.add(j) as i32), true));
            a = step16(a, d[j], min, dx, isum);
        }
        _mm512_storeu_ps(acc.add(16 * i), a);
    }
}

#[cfg(test)]
mod tests {
    use super::Prefetch;

    #[test]
    fn prefetch_settings_parse() {
        let p = |distance, l2| Some(Prefetch { distance, l2 });
        assert_eq!(Prefetch::parse("6144"), p(6144, true));
        assert_eq!(Prefetch::parse("2048:l1"), p(2048, false));
        assert_eq!(Prefetch::parse("4096:l2"), p(4096, true));
        assert_eq!(Prefetch::parse("0"), p(0, true));
        assert_eq!(Prefetch::parse("4096:l3"), None);
        assert_eq!(Prefetch::parse("far"), None);
    }
}
