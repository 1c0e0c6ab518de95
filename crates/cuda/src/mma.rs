//! Tensor-core quantized matmuls (`matmul_mma.cu`): Q4_K and Q6_K weights interleaved by 32
//! columns (`ops::interleave`), int8 `mma.sync` for the integer block sums, the CPU's float chain per block.

use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_core::DType;

use crate::ops::{grid, interleaved_fits, DevAct};
use crate::{CudaError, Gpu, Result};

/// One compiled configuration of the mma kernels: 8 `nt` rows per warp tile, `s` warps
/// splitting the blocks of k, `rw` warps on further row tiles; with `cw` > 1 the staged form
/// (`matmul_mma_staged`): `cw` x `rw` warps sharing activations staged in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaCfg {
    pub nt: usize,
    pub s: usize,
    pub rw: usize,
    pub cw: usize,
}

/// Every configuration `matmul_mma.cu` compiles (`MMA_CONFIGS`).
pub const MMA_CFGS: &[MmaCfg] = &[
    MmaCfg::new(1, 16, 1),
    MmaCfg::new(1, 8, 1),
    MmaCfg::new(1, 4, 1),
    MmaCfg::new(2, 8, 1),
    MmaCfg::new(2, 4, 1),
    MmaCfg::new(4, 4, 1),
    MmaCfg::new(8, 2, 1),
    MmaCfg::new(8, 1, 4),
    MmaCfg::new(4, 1, 4),
    MmaCfg::staged(4, 4, 2),
];

impl MmaCfg {
    pub const fn new(nt: usize, s: usize, rw: usize) -> MmaCfg {
        MmaCfg { nt, s, rw, cw: 1 }
    }

    pub const fn staged(nt: usize, cw: usize, rw: usize) -> MmaCfg {
        MmaCfg { nt, s: 1, rw, cw }
    }

    /// The kernel's name suffix (after the type's base name).
    pub fn suffix(&self) -> String {
        if self.cw > 1 {
            format!("st_{}_{}_{}", self.nt, self.cw, self.rw)
        } else {
            format!("{}_{}_{}", self.nt, self.s, self.rw)
        }
    }

    /// The configuration for a call of `rows` rows of `dtype` (every one gives the same bits;
    /// chosen by the H200 timings of `gpu-check`'s speed table at 7B's FFN shapes).
    pub fn for_rows(dtype: DType, rows: usize) -> MmaCfg {
        match (dtype, rows) {
            (DType::Q6K, 0..=8) => MmaCfg::new(1, 8, 1),
            (DType::Q6K, 9..=64) => MmaCfg::new(1, 4, 1),
            (DType::Q6K, _) => MmaCfg::staged(4, 4, 2),
            (_, 0..=8) => MmaCfg::new(1, 4, 1),
            (_, 9..=16) => MmaCfg::new(2, 4, 1),
            (_, 17..=64) => MmaCfg::new(4, 4, 1),
            _ => MmaCfg::new(8, 1, 4),
        }
    }

    fn launch(self, rows: usize, n: usize) -> LaunchConfig {
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
        let cfg = cfg.unwrap_or_else(|| MmaCfg::for_rows(dtype, x.rows));
        if !MMA_CFGS.contains(&cfg) {
            return Err(CudaError::Usage(format!(
                "matmul_mma: no kernel for {cfg:?}"
            )));
        }
        let name = format!("{base}_{}", cfg.suffix());
        // SAFETY: sizes checked above; the kernel reads tiles of the interleaved layout.
        unsafe { self.launch_quant(&name, cfg.launch(x.rows, n), w, n, x, out) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_count_has_a_compiled_configuration() {
        for dtype in [DType::Q4K, DType::Q6K] {
            for rows in [1, 2, 8, 9, 16, 17, 33, 64, 65, 2048] {
                assert!(MMA_CFGS.contains(&MmaCfg::for_rows(dtype, rows)), "{rows}");
            }
        }
        let src = include_str!("../kernels/matmul_mma.cu");
        for c in MMA_CFGS {
            let line = if c.cw > 1 {
                format!("MMA_STAGED(name, D, {}, {}, {})", c.nt, c.cw, c.rw)
            } else {
                format!("MMA_KERNEL(name, D, {}, {}, {})", c.nt, c.s, c.rw)
            };
            assert!(src.contains(&line), "{line}");
        }
    }
}
