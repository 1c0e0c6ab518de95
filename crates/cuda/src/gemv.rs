//! Few-row quantized matmuls (`matmul_gemv.cu`): decode's one row (up to four by
//! `TENSORFOLD_CUDA_GEMV`), for Q4_K and Q6_K weights interleaved by 32 columns; one lane per
//! column, dp4a, the CPU's float chain per block.

use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_core::DType;
use tf_kernels::actq::ActBlock;

use crate::ops::{grid, interleaved_fits, DevAct};
use crate::{CudaError, Gpu, Result};

/// One compiled configuration: up to `r` rows, `w` warps per thread block, `pf` with the next
/// block's weights loaded during the current one's sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GvCfg {
    pub r: usize,
    pub w: usize,
    pub pf: bool,
}

const fn cfg(r: usize, w: usize, pf: bool) -> GvCfg {
    GvCfg { r, w, pf }
}

/// Every configuration `matmul_gemv.cu` compiles, per type (`GV_KERNEL` lines): the ones
/// `preferred` picks from. (Also measured on the H200 and dropped, slower at every decode shape:
/// Q4_K 16 warps, Q4_K without prefetch, Q6_K one row without prefetch.)
pub const GV_Q4K: &[GvCfg] = &[
    cfg(1, 8, true),
    cfg(1, 4, true),
    cfg(2, 8, true),
    cfg(4, 8, true),
];
pub const GV_Q6K: &[GvCfg] = &[
    cfg(1, 8, true),
    cfg(1, 16, true),
    cfg(2, 8, false),
    cfg(4, 8, false),
];

/// The most rows any configuration takes.
pub const GV_MAX_ROWS: usize = 4;

/// Calls of up to this many rows take these kernels by default: decode's one row. They once
/// took rounds of up to 4 rows too, until the few-row tensor-core form (`matmul_mma_few.cu`,
/// [`MmaCfg::few_for`](crate::mma::MmaCfg::few_for)) and the one-warp tensor-core form
/// outgrew them there. H200, verify rounds after 512 tokens, greedy ids, two interleaved
/// runs, 2 / 3 / 4 rows, these kernels -> tensor cores: 7B shape 2.713-2.715 / 2.998-3.007 /
/// 2.873-2.886 -> 2.325-2.345 / 2.353-2.384 / 2.482-2.505 ms, 1.5B 1.367-1.392 /
/// 1.576-1.594 / 1.534-1.561 -> 1.273-1.291 / 1.281-1.312 / 1.288-1.308. One row stays here:
/// tensor cores for it, tg128 7B 462.1-465.2 -> 447.9-454.2 tok/s (few-row form on the narrow
/// matrices) or 355.8-359.4 (without it).
pub const GV_DEFAULT_ROWS: usize = 1;

impl GvCfg {
    /// The compiled configurations of `dtype` (empty for other types).
    pub fn all(dtype: DType) -> &'static [GvCfg] {
        match dtype {
            DType::Q4K => GV_Q4K,
            DType::Q6K => GV_Q6K,
            _ => &[],
        }
    }

    /// The kernel's name suffix (after the type's base name).
    pub fn suffix(&self) -> String {
        format!("{}_{}{}", self.r, self.w, if self.pf { "p" } else { "n" })
    }

    /// Whether a call at inner dimension `k` fits this configuration's shared memory on a GPU
    /// that allows `smem` bytes per block.
    pub fn fits(&self, k: usize, smem: usize) -> bool {
        k.is_multiple_of(256) && self.smem(k / 256) <= smem
    }

    /// The configurations to try for `rows` rows of `dtype` at inner dimension `k`, best first
    /// (every one gives the same bits; the order from `gpu-check`'s gemv speed table on the
    /// H200, per call in a stream of launches: e.g. Q4_K one row at 7B's q|k|v / o / gate|up /
    /// down 6.3 / 5.1 / 24.2 / 11.2 µs with `4_8p`, 1.5B's q|k|v / gate|up 4.2 / 6.6 µs with
    /// `1_4p`).
    pub fn preferred(dtype: DType, rows: usize, k: usize) -> &'static [GvCfg] {
        const Q4K_1: &[GvCfg] = &[cfg(4, 8, true), cfg(1, 8, true)];
        const Q4K_1S: &[GvCfg] = &[cfg(1, 4, true), cfg(1, 8, true)];
        const Q4K_2: &[GvCfg] = &[cfg(4, 8, true), cfg(2, 8, true)];
        const Q4K_4: &[GvCfg] = &[cfg(4, 8, true)];
        const Q6K_1: &[GvCfg] = &[cfg(1, 16, true), cfg(1, 8, true)];
        const Q6K_2: &[GvCfg] = &[cfg(2, 8, false), cfg(4, 8, false)];
        const Q6K_4: &[GvCfg] = &[cfg(4, 8, false)];
        match (dtype, rows) {
            (DType::Q4K, 0 | 1) if k <= 8 * 256 => Q4K_1S,
            (DType::Q4K, 0 | 1) => Q4K_1,
            (DType::Q4K, 2) => Q4K_2,
            (DType::Q4K, 3 | 4) => Q4K_4,
            (DType::Q6K, 0 | 1) => Q6K_1,
            (DType::Q6K, 2) => Q6K_2,
            (DType::Q6K, 3 | 4) => Q6K_4,
            _ => &[],
        }
    }

    /// Shared memory for `nb` blocks of k: per block `r` rows x 32 columns of two ints, then
    /// 32 columns of two floats; then `r` activation rows (256 int8 values, 16 i16 sums and
    /// one f32 scale per block).
    fn smem(&self, nb: usize) -> usize {
        nb * 32 * 8 * (self.r + 1) + self.r * nb * (256 + 32 + 4)
    }
}

/// Calls of 4 rows into matrices of at least this many columns take the tensor-core kernels,
/// whose one-warp form (`1_1_1`) fills its waves since 0a32ebd (H200, µs per call, few-row form
/// against tensor cores: 7B gate|up 37888 x 3584 36.1 / 29.4), and so do 4-row calls of every
/// Q6_K matrix (7B down 34.6 / 28.7, 1.5B down 14.5 / 10.3); narrower Q4_K matrices stay on the
/// few-row form (7B o 3584 x 3584 6.3 / 7.6, down 3584 x 18944 22.4 / 26.3). Verify rounds
/// after 512 tokens, greedy ids, two alternating runs each: 4 rows 3.515-3.533 -> 3.182-3.199
/// ms (7B) and 1.710-1.719 -> 1.647-1.657 (1.5B); with the same rule at 3 rows the 7B gained
/// 3% but the 1.5B lost 2%, so 3 rows stay on the few-row form.
pub const GV_WIDE_N: usize = 16384;

impl Gpu {
    /// Whether a call of `rows` rows into `n` columns of `dtype` (interleaved) takes the
    /// few-row kernels: up to [`gemv_rows`](Gpu::gemv_rows) rows, where the few-row
    /// tensor-core form does not take the call ([`MmaCfg::few_for`](crate::mma::MmaCfg::few_for))
    /// and, at 4 rows, see [`GV_WIDE_N`] (`TENSORFOLD_CUDA_GEMV_WIDE=0` keeps every such call on
    /// the few-row kernels, for measuring). Either way the bits are the same.
    pub fn gemv_takes(&self, dtype: DType, rows: usize, n: usize) -> bool {
        let wide = rows >= 4 && (dtype == DType::Q6K || n >= GV_WIDE_N);
        rows <= self.gemv_rows
            && !(self.gemv_wide && wide)
            && crate::mma::MmaCfg::few_for(rows, n).is_none()
    }

    /// The few-row configuration for `rows` rows of `dtype` at inner dimension `k` on this
    /// GPU, `None` where the few-row kernels do not apply (then the tensor-core kernels do).
    pub fn gemv_cfg(&self, dtype: DType, rows: usize, k: usize) -> Option<GvCfg> {
        GvCfg::preferred(dtype, rows, k)
            .iter()
            .copied()
            .find(|c| c.fits(k, self.smem_optin))
    }

    /// `out = x · wᵀ` for up to [`GV_MAX_ROWS`] rows of Q4_K or Q6_K weights in their
    /// interleaved layout; `cfg` `None` picks the configuration by row count.
    pub fn matmul_gemv(
        &self,
        dtype: DType,
        w: &CudaSlice<u8>,
        n: usize,
        x: &DevAct,
        out: &mut CudaSlice<f32>,
        cfg: Option<GvCfg>,
    ) -> Result<()> {
        let base = match dtype {
            DType::Q4K => "gv_q4k",
            DType::Q6K => "gv_q6k",
            _ => return Err(CudaError::Usage(format!("no gemv kernel for {dtype}"))),
        };
        let cfg = match cfg.or_else(|| self.gemv_cfg(dtype, x.rows, x.k)) {
            Some(c) if GvCfg::all(dtype).contains(&c) && x.rows <= c.r => c,
            _ => {
                return Err(CudaError::Usage(format!(
                    "matmul_gemv: no kernel for {} rows ({cfg:?})",
                    x.rows
                )))
            }
        };
        let smem = cfg.smem(x.k / 256);
        if !interleaved_fits(dtype, w, n, x, out) || smem > self.smem_optin {
            return Err(CudaError::Usage("matmul_gemv: sizes".into()));
        }
        let name = format!("{base}_{}", cfg.suffix());
        let f = self.function(&name)?;
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )?;
        let launch = LaunchConfig {
            grid_dim: (grid(n, 32), 1, 1),
            block_dim: ((32 * cfg.w) as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // SAFETY: sizes checked above; the kernel reads tiles of the interleaved layout and
        // `smem` bytes of dynamic shared memory.
        unsafe { self.launch_quant(&name, launch, w, n, x, false, out) }
    }
}

impl Gpu {
    /// `out1 = x · w1ᵀ` and `out2 = x · w2ᵀ` in one launch, for Q4_K `w1` and Q6_K `w2`
    /// (interleaved) and up to 2 rows; `false` (nothing launched) where no pair kernel applies.
    pub fn matmul_gemv_pair(
        &self,
        (d1, w1, n1): (DType, &CudaSlice<u8>, usize),
        (d2, w2, n2): (DType, &CudaSlice<u8>, usize),
        x: &DevAct,
        out1: &mut CudaSlice<f32>,
        out2: &mut CudaSlice<f32>,
    ) -> Result<bool> {
        let r = match x.rows {
            1 => 1,
            2 => 2,
            _ => return Ok(false),
        };
        // The kernels' configurations (`GV_PAIR` lines): Q4_K 8 warps with prefetch, Q6_K 8
        // warps, with prefetch for one row.
        let c1 = cfg(r, 8, true);
        let c2 = cfg(r, 8, r == 1);
        let k = x.k;
        let smem = c1.smem(k / 256).max(c2.smem(k / 256));
        if (d1, d2) != (DType::Q4K, DType::Q6K)
            || x.block != ActBlock::B256
            || !k.is_multiple_of(256)
            || smem > self.smem_optin
        {
            return Ok(false);
        }
        if !interleaved_fits(d1, w1, n1, x, out1) || !interleaved_fits(d2, w2, n2, x, out2) {
            return Err(CudaError::Usage("matmul_gemv_pair: sizes".into()));
        }
        let launch = LaunchConfig {
            grid_dim: (grid(n1, 32) + grid(n2, 32), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let name = format!("gvp_q4k_q6k_{r}");
        // SAFETY: sizes checked above; each half reads tiles of its interleaved layout and
        // `smem` bytes of dynamic shared memory.
        unsafe { self.launch_pair(&name, launch, (w1, n1, out1), (w2, n2, out2), x, false) }?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_is_compiled_and_every_few_rows_have_one() {
        let src = include_str!("../kernels/matmul_gemv.cu");
        for (base, dtype) in [("gv_q4k", DType::Q4K), ("gv_q6k", DType::Q6K)] {
            let ty = if dtype == DType::Q4K {
                "GvQ4K"
            } else {
                "GvQ6K"
            };
            for c in GvCfg::all(dtype) {
                let line = format!(
                    "GV_KERNEL({base}, {ty}, {}, {}, {}, {})",
                    c.r,
                    c.w,
                    c.pf,
                    if c.pf { "p" } else { "n" }
                );
                assert!(src.contains(&line), "{line}");
            }
            // Every compiled kernel is listed, and every listed one is someone's choice.
            let compiled = src.matches(&format!("GV_KERNEL({base},")).count();
            assert_eq!(compiled, GvCfg::all(dtype).len(), "{base}");
            let mut chosen = Vec::new();
            for k in [1536, 3584] {
                for rows in 1..=GV_MAX_ROWS {
                    let cs = GvCfg::preferred(dtype, rows, k);
                    assert!(!cs.is_empty());
                    for c in cs {
                        assert!(c.r >= rows && GvCfg::all(dtype).contains(c), "{c:?}");
                        chosen.push(*c);
                    }
                }
                assert!(GvCfg::preferred(dtype, GV_MAX_ROWS + 1, k).is_empty());
            }
            for c in GvCfg::all(dtype) {
                assert!(chosen.contains(c), "{c:?} is compiled but never chosen");
            }
        }
    }
}
