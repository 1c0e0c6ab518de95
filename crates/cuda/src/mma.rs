//! Tensor-core quantized matmuls (`matmul_mma.cu`): Q4_K and Q6_K weights interleaved by 32
//! columns (`ops::interleave`), int8 `mma.sync` for the integer block sums, the CPU's float chain per block.

use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_core::DType;

use crate::ops::{grid, interleaved_fits, DevAct, FRAG_MAX_ROWS};
use crate::{CudaError, Gpu, Result};

/// One compiled configuration of the mma kernels: 8 `nt` rows per warp tile, `s` warps
/// splitting the blocks of k, `rw` warps on further row tiles; with `cw` > 1 the staged form
/// (`matmul_mma_staged`): `cw` x `rw` warps sharing activations staged in shared memory; with
/// `h` > 0 the few-row form (`matmul_mma_few.cu`): `h` warps on 16 columns each, `s` slots of
/// them splitting the blocks of k, `st` with the activations staged in shared memory; `b` > 0
/// asks ptxas for registers that fit `b` thread blocks per multiprocessor (0: its own choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaCfg {
    pub nt: usize,
    pub s: usize,
    pub rw: usize,
    pub cw: usize,
    pub h: usize,
    pub st: bool,
    pub b: usize,
}

/// Every configuration `matmul_mma.cu` compiles (`MMA_CONFIGS`).
pub const MMA_CFGS: &[MmaCfg] = &[
    MmaCfg::new(1, 1, 1),
    MmaCfg::new(2, 1, 1),
    MmaCfg::new(2, 1, 1).bounded(ONE_WARP_B),
    MmaCfg::new(2, 1, 2),
    MmaCfg::new(4, 1, 1),
    MmaCfg::new(1, 16, 1),
    MmaCfg::new(1, 8, 1),
    MmaCfg::new(1, 4, 1),
    MmaCfg::new(2, 16, 1),
    MmaCfg::new(2, 8, 1),
    MmaCfg::new(2, 4, 1),
    MmaCfg::new(4, 4, 1),
    MmaCfg::staged(2, 4, 2),
    MmaCfg::few(1, 4, 2, false),
    MmaCfg::few(1, 8, 1, false),
    MmaCfg::few(1, 16, 1, false),
    MmaCfg::few(2, 4, 2, false),
    MmaCfg::few(2, 8, 1, false),
    MmaCfg::few(2, 8, 1, true),
];

/// The widest matrix the few-row form takes by default (`TENSORFOLD_CUDA_MMA_FEW_N` overrides,
/// for measuring): 288 thread blocks of 16 columns, so 7B's 4,608-column q|k|v (1.09 waves on
/// an H200) as well. There the one-warp form `2_4_1` took 13.1 us for 16 rows, and the 7B
/// 16-row verify round with greedy ids went 3.692 / 3.733 -> 3.654 / 3.659 ms (H200, after
/// 512 tokens, interleaved; at 4,224 columns, one wave, before).
pub const FEW_MAX_N: usize = 4608;

/// The fewest rows the few-row form takes by default: from 2 rows its 8-row tile (the rows
/// past the call read the last one) is faster than `matmul_gemv.cu`; see [`GV_DEFAULT_ROWS`]
/// for the figures (5 while that kernel took up to 4 rows). One row stays there.
///
/// [`GV_DEFAULT_ROWS`]: crate::gemv::GV_DEFAULT_ROWS
pub const FEW_MIN_ROWS: usize = 2;

/// The widest matrix whose 9-16 row calls take the few-row form in 8-row tiles: 264 thread
/// blocks (two 8-row tiles of each 16 columns), one wave on an H200.
pub const FEW_NT1_MAX_N: usize = 2112;

/// Thread blocks of the one-warp, two-tile kernel (`2_1_1`) that fit a multiprocessor at the
/// registers ptxas gives it on its own (128: Nsight Compute on the H200).
pub const ONE_WARP_FIT: usize = 16;

/// The blocks per multiprocessor its bounded form is compiled for (`2_1_1_b17`, at most 120
/// registers): 7B's 16-row gate|up, 2,368 warps, then leaves 124 warps for a second wave
/// instead of 256 (Nsight Compute: 1.12 waves at ptxas's 128 registers). H200, 7B shape,
/// verify rounds after 512 tokens, greedy ids, interleaved runs: 16 rows 3.348 / 3.309 ->
/// 3.256 / 3.247 ms (18 blocks: 3.312 / 3.266); again with the plain form forced
/// (`TENSORFOLD_CUDA_MMA_MID=q4k:2_1_1`) 3.380 / 3.370 -> 3.253 / 3.245. 32 rows lost (5.496
/// / 5.465 -> 5.640 / 5.635), so only calls of one row tile take it.
pub const ONE_WARP_B: usize = 17;

impl MmaCfg {
    pub const fn new(nt: usize, s: usize, rw: usize) -> MmaCfg {
        MmaCfg {
            nt,
            s,
            rw,
            cw: 1,
            h: 0,
            st: false,
            b: 0,
        }
    }

    pub const fn staged(nt: usize, cw: usize, rw: usize) -> MmaCfg {
        MmaCfg {
            nt,
            s: 1,
            rw,
            cw,
            h: 0,
            st: false,
            b: 0,
        }
    }

    pub const fn few(nt: usize, s: usize, h: usize, st: bool) -> MmaCfg {
        MmaCfg {
            nt,
            s,
            rw: 1,
            cw: 1,
            h,
            st,
            b: 0,
        }
    }

    /// This configuration compiled to fit `b` thread blocks per multiprocessor.
    pub const fn bounded(self, b: usize) -> MmaCfg {
        MmaCfg { b, ..self }
    }

    /// `self`, or its form bounded to [`ONE_WARP_B`] blocks per multiprocessor where that is the
    /// faster: a one-warp Q4_K call of 9-16 rows (`2_1_1`) with more warps than one wave of
    /// [`ONE_WARP_FIT`] per multiprocessor of the `sms` (7B's gate|up, 2,368 warps).
    pub fn with_occupancy(self, dtype: DType, rows: usize, n: usize, sms: usize) -> MmaCfg {
        let one_warp = self == MmaCfg::new(2, 1, 1);
        if one_warp
            && dtype == DType::Q4K
            && (9..=16).contains(&rows)
            && n / 16 > ONE_WARP_FIT * sms
        {
            self.bounded(ONE_WARP_B)
        } else {
            self
        }
    }

    /// Whether the kernel reads the activations in [`DevAct::frag`]'s order (the forms that
    /// read them from global memory; the staged ones copy [`DevAct::qs`]'s rows to shared memory).
    pub fn reads_frag(&self) -> bool {
        self.cw == 1 && !self.st
    }

    /// Whether the kernel can take the activations `x`: the forms that read the tensor-core
    /// copy, only where the quantization wrote one (up to [`FRAG_MAX_ROWS`] rows).
    pub fn takes(&self, x: &DevAct) -> bool {
        !self.reads_frag() || x.has_frag()
    }

    /// `TENSORFOLD_CUDA_MMA_MID`'s list: `type:suffix` pairs (`q4k` or `q6k`), comma-separated;
    /// entries that name no compiled configuration are left out.
    pub fn parse_mid(v: &str) -> Vec<(DType, MmaCfg)> {
        v.split(',')
            .filter_map(|e| {
                let (t, c) = e.split_once(':')?;
                let t = match t {
                    "q4k" => DType::Q4K,
                    "q6k" => DType::Q6K,
                    _ => return None,
                };
                let c = MMA_CFGS.iter().copied().find(|m| m.suffix() == c)?;
                Some((t, c))
            })
            .collect()
    }

    /// The kernel's name suffix (after the type's base name).
    pub fn suffix(&self) -> String {
        if self.h > 0 {
            let p = if self.st { "fws" } else { "fw" };
            format!("{p}_{}_{}_{}", self.nt, self.s, self.h)
        } else if self.cw > 1 {
            format!("st_{}_{}_{}", self.nt, self.cw, self.rw)
        } else {
            let b = if self.b > 0 {
                format!("_b{}", self.b)
            } else {
                String::new()
            };
            format!("{}_{}_{}{b}", self.nt, self.s, self.rw)
        }
    }

    /// The configuration for a call of `rows` rows of `dtype` (every one gives the same bits;
    /// chosen by the H200 timings of `gpu-check`'s speed table at 7B's FFN shapes). Over 64
    /// rows the staged form (8 warps: 4 column blocks x 2 row tiles sharing each block of k's
    /// activations in shared memory, `st_2_4_2`) since its loop stopped copying the prefetched
    /// weights between blocks (512 rows: Q4_K 18944 x 3584 439 µs against 476 for 2_1_2, Q6_K
    /// 3584 x 18944 593 against 736; pp2048 1.5B shape 21,750 -> 23,150 tok/s, 7B 6,890 ->
    /// 7,580). Before that, one warp per block on 16 rows x 16 columns with a second warp on the
    /// same columns (2_1_2, its weights from L1) had beaten every staged form.
    pub fn for_rows(dtype: DType, rows: usize) -> MmaCfg {
        match (dtype, rows) {
            (DType::Q6K, 0..=8) => MmaCfg::new(1, 8, 1),
            (DType::Q6K, 9..=32) => MmaCfg::new(2, 8, 1),
            (DType::Q6K, 33..=64) => MmaCfg::staged(2, 4, 2),
            (_, 0..=8) => MmaCfg::new(1, 4, 1),
            (_, 9..=64) => MmaCfg::new(2, 4, 1),
            _ => MmaCfg::staged(2, 4, 2),
        }
    }

    /// The configuration for a call of `rows` rows of `dtype` into `n` columns at inner
    /// dimension `k`: [`for_rows`](Self::for_rows)'s tile, with the blocks of k split over as
    /// many warps as keep weight bytes in flight (every split gives the same bits). Where the
    /// columns alone give 8 warps per multiprocessor of a large GPU (1,024) each warp takes
    /// every block of k (no shared-memory exchange, the chains in registers); otherwise Q4_K
    /// doubles the split while under 2,048 warps and each warp keeps 2 or more blocks. `split`
    /// forces a split where that configuration is compiled (for measuring). H200: with a
    /// 2,048-warp threshold, verify rounds after 512 tokens of 16 rows went 3.77-3.82 -> 3.58
    /// ms (1.5B shape) and 7.73-8.03 -> 7.45-7.78 (7B); once the Q4_K mins moved onto the
    /// tensor cores, 16 rows of 18944 x 3584 Q4_K took 29.4 µs unsplit (1,184 warps) against
    /// 37.4 split in 8, hence 1,024. The Q6_K splits measured no better.
    pub fn for_call(dtype: DType, rows: usize, n: usize, k: usize, split: Option<usize>) -> MmaCfg {
        match MmaCfg::few_for(rows, n) {
            Some(c) => c,
            None => MmaCfg::without_few(dtype, rows, n, k, split),
        }
    }

    /// [`for_call`](Self::for_call) among the forms other than the few-row one.
    pub fn without_few(
        dtype: DType,
        rows: usize,
        n: usize,
        k: usize,
        split: Option<usize>,
    ) -> MmaCfg {
        let base = MmaCfg::for_rows(dtype, rows);
        if base.cw > 1 || base.rw > 1 {
            return base;
        }
        let pick = |s: usize| MmaCfg::new(base.nt, s, 1);
        let warps = n / 16 * rows.div_ceil(8 * base.nt);
        let s = match split {
            Some(s) => s,
            None if warps >= 1024 => 1,
            None if dtype == DType::Q4K => {
                let nb = k / 256;
                let mut s = base.s;
                while warps * s < 2048 && 4 * s <= nb && MMA_CFGS.contains(&pick(2 * s)) {
                    s *= 2;
                }
                s
            }
            None => base.s,
        };
        if MMA_CFGS.contains(&pick(s)) {
            pick(s)
        } else {
            base
        }
    }

    /// The few-row form for a call of `rows` rows into `n` columns, where it is the faster:
    /// [`FEW_MIN_ROWS`]-16 rows of matrices whose 16-column blocks fit one wave of two 8-warp thread blocks per
    /// multiprocessor of an H200 (n <= 4,224: a 7B layer's o and down, all of a 1.5B layer's
    /// but gate|up). H200, per call in a stream of launches (`gpu-check`'s few-row table), 16
    /// rows, the other forms -> `fw_2_8_1`: 7B o 11.7 -> 7.5 µs, down Q6_K 46.2 -> 43.6, 1.5B
    /// q|k|v 6.3 -> 4.1, down 14.5 -> 14.1; 8 rows: 7B o 8.1 -> 5.9, down Q4_K 28.6 -> 27.8,
    /// Q6_K 33.9 -> 31.4. Wider matrices (gate|up, the head) and 17 rows or more stay faster on
    /// the forms that give each warp all the blocks of k.
    ///
    /// Tiles of 8 rows (`fw_1_8_1`) where they too fit that wave: up to 8 rows (one tile, where
    /// a 16-row tile would compute 8 rows for nothing) and, over 8 rows, matrices of up to
    /// [`FEW_NT1_MAX_N`] columns (two thread blocks per 16 columns, the second reading the
    /// weights the first brought into L2). H200, verify rounds after 512 tokens, greedy ids,
    /// `fw_2_8_1` -> `fw_1_8_1` everywhere: 1.5B shape 8 rows 1.709-1.717 -> 1.645-1.671 ms, 16
    /// rows 1.981-1.984 -> 1.887-1.896; 7B 8 rows 3.207-3.251 -> 3.044-3.092, but 16 rows
    /// 4.471-4.538 -> 4.742-4.777 (its 3,584-column o and down in two waves).
    pub fn few_for(rows: usize, n: usize) -> Option<MmaCfg> {
        static MAX_N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let max_n = *MAX_N.get_or_init(|| {
            std::env::var("TENSORFOLD_CUDA_MMA_FEW_N")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(FEW_MAX_N)
        });
        // `TENSORFOLD_CUDA_MMA_FEW_MIN` overrides the fewest rows, for measuring.
        static MIN_ROWS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let min_rows = *MIN_ROWS.get_or_init(|| {
            std::env::var("TENSORFOLD_CUDA_MMA_FEW_MIN")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(FEW_MIN_ROWS)
                .max(1)
        });
        if !(min_rows..=16).contains(&rows) || n > max_n {
            return None;
        }
        Some(if rows <= 8 || n <= FEW_NT1_MAX_N {
            MmaCfg::few(1, 8, 1, false)
        } else {
            MmaCfg::few(2, 8, 1, false)
        })
    }

    /// Dynamic shared memory of the few-row form (`matmul_mma_few.cu`): two buffers of the
    /// slots' sums and factors, then two of their activation blocks (`st`) or of each warp's
    /// fragment-order pieces.
    fn few_smem(&self, dtype: DType) -> usize {
        let (r8, cols) = (8 * self.nt, 16 * self.h);
        let xpad = if dtype == DType::Q4K { 288 } else { 272 };
        let staged = if self.st {
            2 * self.s * r8 * xpad
        } else {
            2 * self.s * self.h * self.nt * crate::ops::FRAG_GB
        };
        2 * self.s * (r8 * (cols + 1) * 8 + cols * 8) + staged
    }

    fn launch(self, dtype: DType, rows: usize, n: usize) -> LaunchConfig {
        if self.h > 0 {
            return LaunchConfig {
                grid_dim: (grid(n, 16 * self.h), grid(rows, 8 * self.nt), 1),
                block_dim: ((32 * self.s * self.h) as u32, 1, 1),
                shared_mem_bytes: self.few_smem(dtype) as u32,
            };
        }
        LaunchConfig {
            grid_dim: (grid(rows, 8 * self.nt * self.rw), grid(n, 16 * self.cw), 1),
            block_dim: ((32 * self.s * self.rw * self.cw) as u32, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

impl Gpu {
    /// `out = x · wᵀ` for Q4_K or Q6_K weights in their interleaved layout ([`interleave`]),
    /// on tensor cores; `cfg` `None` picks the configuration by row count.
    pub fn matmul_mma(
        &self,
        dtype: DType,
        w: &CudaSlice<u8>,
        n: usize,
        x: &DevAct,
        out: &mut CudaSlice<f32>,
        cfg: Option<MmaCfg>,
    ) -> Result<()> {
        let base = match dtype {
            DType::Q4K => "mma_q4k",
            DType::Q6K => "mma_q6k",
            _ => return Err(CudaError::Usage(format!("no mma kernel for {dtype}"))),
        };
        if !interleaved_fits(dtype, w, n, x, out) {
            return Err(CudaError::Usage("matmul_mma: sizes".into()));
        }
        // The kernels read row `rows - 1` in place of rows past the call: no call of no rows.
        if x.rows == 0 {
            return Ok(());
        }
        let mid = self.mma_mid.iter().find(|(t, _)| *t == dtype).map(|m| m.1);
        let forced = match x.rows {
            0..=64 => mid.filter(|_| MmaCfg::few_for(x.rows, n).is_none()),
            _ => self.mma_many,
        };
        let cfg = match (cfg.or(forced), self.mma_few) {
            (Some(c), _) => c,
            (None, Some(f)) if MmaCfg::few_for(x.rows, n).is_some() => match f {
                Some(c) => c,
                None => MmaCfg::without_few(dtype, x.rows, n, x.k, self.mma_split),
            },
            _ => MmaCfg::for_call(dtype, x.rows, n, x.k, self.mma_split)
                .with_occupancy(dtype, x.rows, n, self.sms),
        };
        if !MMA_CFGS.contains(&cfg) {
            return Err(CudaError::Usage(format!(
                "matmul_mma: no kernel for {cfg:?}"
            )));
        }
        if !cfg.takes(x) {
            return Err(CudaError::Usage(format!(
                "matmul_mma: {} reads the activations' tensor-core copy, written for calls of \
                 up to {FRAG_MAX_ROWS} rows ({} here)",
                cfg.suffix(),
                x.rows
            )));
        }
        let name = format!("{base}_{}", cfg.suffix());
        let launch = cfg.launch(dtype, x.rows, n);
        if launch.shared_mem_bytes as usize > self.smem_optin {
            return Err(CudaError::Usage("matmul_mma: shared memory".into()));
        }
        if cfg.h > 0 {
            self.function(&name)?.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                launch.shared_mem_bytes as i32,
            )?;
        }
        // SAFETY: sizes checked above and rows >= 1; the kernel reads tiles of the interleaved
        // layout, rows up to `rows - 1` (and the few-row form `launch.shared_mem_bytes` of
        // dynamic shared memory).
        unsafe { self.launch_quant(&name, launch, w, n, x, cfg.reads_frag(), out) }
    }
}

/// The configurations `fwp_q4k_q6k_*` compiles (`MMA_FEW_PAIR`): those [`MmaCfg::few_for`]
/// gives.
pub const PAIR_CFGS: &[MmaCfg] = &[MmaCfg::few(1, 8, 1, false), MmaCfg::few(2, 8, 1, false)];

impl Gpu {
    /// `out1 = x · w1ᵀ` and `out2 = x · w2ᵀ` in one launch of the few-row form, for Q4_K `w1`
    /// and Q6_K `w2` (interleaved), where each alone would take that form (2-16 rows, no
    /// override by `TENSORFOLD_CUDA_MMA_FEW`), in the configuration of their combined width;
    /// `false` (nothing launched) elsewhere. The same bits as the two calls.
    pub fn matmul_mma_few_pair(
        &self,
        (d1, w1, n1): (DType, &CudaSlice<u8>, usize),
        (d2, w2, n2): (DType, &CudaSlice<u8>, usize),
        x: &DevAct,
        out1: &mut CudaSlice<f32>,
        out2: &mut CudaSlice<f32>,
    ) -> Result<bool> {
        let rows = x.rows;
        let each_few =
            |d: DType, n: usize| MmaCfg::few_for(rows, n).is_some() && !self.gemv_takes(d, rows, n);
        let cfg = match MmaCfg::few_for(rows, n1 + n2) {
            Some(c) if PAIR_CFGS.contains(&c) && c.takes(x) => c,
            _ => return Ok(false),
        };
        if (d1, d2) != (DType::Q4K, DType::Q6K)
            || !self.mma
            || self.mma_few.is_some()
            || !each_few(d1, n1)
            || !each_few(d2, n2)
        {
            return Ok(false);
        }
        if !interleaved_fits(d1, w1, n1, x, out1) || !interleaved_fits(d2, w2, n2, x, out2) {
            return Err(CudaError::Usage("matmul_mma_few_pair: sizes".into()));
        }
        let cols = 16 * cfg.h;
        let smem = cfg.few_smem(d1).max(cfg.few_smem(d2));
        if smem > self.smem_optin {
            return Ok(false);
        }
        let name = format!("fwp_q4k_q6k_{}_{}_{}", cfg.nt, cfg.s, cfg.h);
        let launch = LaunchConfig {
            grid_dim: (grid(n1, cols) + grid(n2, cols), grid(rows, 8 * cfg.nt), 1),
            block_dim: ((32 * cfg.s * cfg.h) as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // SAFETY: sizes checked above and rows >= 2; each half reads tiles of its interleaved
        // layout, the activations' tensor-core copy (written: `takes`), and `smem` bytes of
        // dynamic shared memory.
        unsafe { self.launch_pair(&name, launch, (w1, n1, out1), (w2, n2, out2), x, true) }?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wide_one_tile_q4k_calls_take_the_bounded_one_warp_kernel() {
        let pick = |dtype, rows, n| MmaCfg::for_call(dtype, rows, n, 3584, None);
        let bounded = MmaCfg::new(2, 1, 1).bounded(ONE_WARP_B);
        assert!(MMA_CFGS.contains(&bounded));
        // 7B's gate|up on an H200's 132 multiprocessors, at 9-16 rows.
        for rows in [9, 16] {
            let c = pick(DType::Q4K, rows, 37888);
            assert_eq!(c.with_occupancy(DType::Q4K, rows, 37888, 132), bounded);
        }
        // 32 rows, 1.5B's gate|up, and the Q6_K head keep ptxas's own registers.
        for (dtype, rows, n) in [
            (DType::Q4K, 32, 37888),
            (DType::Q4K, 16, 17920),
            (DType::Q6K, 16, 152064),
            (DType::Q4K, 8, 37888),
        ] {
            let c = pick(dtype, rows, n);
            assert_eq!(
                c.with_occupancy(dtype, rows, n, 132).b,
                0,
                "{dtype} {rows} {n}"
            );
        }
        assert_eq!(bounded.suffix(), "2_1_1_b17");
    }

    #[test]
    fn every_row_count_has_a_compiled_configuration() {
        for dtype in [DType::Q4K, DType::Q6K] {
            for rows in [1, 2, 8, 9, 16, 17, 33, 64, 65, 2048] {
                assert!(MMA_CFGS.contains(&MmaCfg::for_rows(dtype, rows)), "{rows}");
            }
        }
        for dtype in [DType::Q4K, DType::Q6K] {
            for rows in [1, 5, 8, 9, 16, 17, 64, 65, 512] {
                for (n, k) in [(256, 1536), (1536, 8960), (37888, 3584), (151936, 3584)] {
                    for split in [None, Some(0), Some(1), Some(3)] {
                        let c = MmaCfg::for_call(dtype, rows, n, k, split);
                        assert!(MMA_CFGS.contains(&c), "{dtype} {rows} {n} {k} {split:?}");
                        let c = MmaCfg::without_few(dtype, rows, n, k, split);
                        assert!(MMA_CFGS.contains(&c), "{dtype} {rows} {n} {k} {split:?}");
                        assert_eq!(c.nt, MmaCfg::for_rows(dtype, rows).nt);
                    }
                }
            }
        }
        let src = concat!(
            include_str!("../kernels/matmul_mma.cu"),
            include_str!("../kernels/matmul_mma_few.cu")
        );
        for rows in 1..=16 {
            for n in [256, 512, 2048, 2112, 2304, 4096, 4608] {
                if let Some(c) = MmaCfg::few_for(rows, n) {
                    assert!(PAIR_CFGS.contains(&c), "{rows} {n}");
                }
            }
        }
        for c in PAIR_CFGS {
            let line = format!("MMA_FEW_PAIR({}, {}, {})", c.nt, c.s, c.h);
            assert!(src.contains(&line), "{line}");
        }
        for c in MMA_CFGS {
            let line = if c.h > 0 {
                let p = if c.st { "true, fws" } else { "false, fw" };
                format!("MMA_FEW(name, D, {}, {}, {}, {p})", c.nt, c.s, c.h)
            } else if c.cw > 1 {
                format!("MMA_STAGED(name, D, {}, {}, {})", c.nt, c.cw, c.rw)
            } else if c.b > 0 {
                format!(
                    "MMA_KERNEL_B(name, D, {}, {}, {}, {})",
                    c.nt, c.s, c.rw, c.b
                )
            } else {
                format!("MMA_KERNEL(name, D, {}, {}, {})", c.nt, c.s, c.rw)
            };
            // A configuration with its own launch bounds: MMA_KERNEL_LB(name, D, nt, s, rw, ...).
            let bounded = line
                .replace("MMA_KERNEL(", "MMA_KERNEL_LB(")
                .replace(')', ",");
            assert!(src.contains(&line) || src.contains(&bounded), "{line}");
        }
    }
}
