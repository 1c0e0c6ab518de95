//! Tensor-core quantized matmuls (`matmul_mma.cu`): Q4_K and Q6_K weights interleaved by 32
//! columns, int8 `mma.sync` for the integer block sums, the CPU's float chain per block.

use cudarc::driver::{CudaSlice, LaunchConfig};
use tf_core::DType;
use tf_kernels::actq::ActBlock;

use crate::ops::{grid, interleave_q4k, DevAct};
use crate::{CudaError, Gpu, Result};

/// Q6_K weight rows (`n` rows of `k / 256` blocks of 210 bytes) in the layout of `mma_q6k`:
/// for each tile of 32 rows and each block index, the block's first 208 bytes as thirteen
/// 16-byte words, each word of the tile's 32 rows side by side (512 bytes), then the 32 rows'
/// `d` (2 bytes each). Rows past `n` in the last tile are zero. The same bytes, other places.
pub fn interleave_q6k(data: &[u8], n: usize, k: usize) -> Vec<u8> {
    const TB: usize = 13 * 512 + 64;
    let nb = k / 256;
    let tiles = n.div_ceil(32);
    let mut out = vec![0u8; tiles * nb * TB];
    for c in 0..n {
        let (tile, lane) = (c / 32, c % 32);
        for b in 0..nb {
            let blk = &data[(c * nb + b) * 210..][..210];
            let at = (tile * nb + b) * TB;
            for w in 0..13 {
                let o = at + w * 512 + lane * 16;
                out[o..o + 16].copy_from_slice(&blk[16 * w..16 * w + 16]);
            }
            let o = at + 13 * 512 + lane * 2;
            out[o..o + 2].copy_from_slice(&blk[208..210]);
        }
    }
    out
}

/// The interleaved layout of a weight type, where the GPU has one.
pub fn interleave(dtype: DType, data: &[u8], n: usize, k: usize) -> Option<Vec<u8>> {
    match dtype {
        DType::Q4K => Some(interleave_q4k(data, n, k)),
        DType::Q6K => Some(interleave_q6k(data, n, k)),
        _ => None,
    }
}

/// Bytes of `n` interleaved rows of `k` values.
fn interleaved_len(dtype: DType, n: usize, k: usize) -> Option<usize> {
    let per = match dtype {
        DType::Q4K => 9 * 512,
        DType::Q6K => 13 * 512 + 64,
        _ => return None,
    };
    Some(n.div_ceil(32) * (k / 256) * per)
}

/// One compiled configuration of the mma kernels: 8 `nt` rows per warp tile, `s` warps
/// splitting the blocks of k, `rw` warps on further row tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaCfg {
    pub nt: usize,
    pub s: usize,
    pub rw: usize,
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
];

impl MmaCfg {
    pub const fn new(nt: usize, s: usize, rw: usize) -> MmaCfg {
        MmaCfg { nt, s, rw }
    }

    /// The configuration for a call of `rows` rows of `dtype` (every one gives the same bits;
    /// chosen by the H200 timings of `gpu-check`'s speed table at 7B's FFN shapes).
    pub fn for_rows(dtype: DType, rows: usize) -> MmaCfg {
        match (dtype, rows) {
            (DType::Q6K, 0..=8) => MmaCfg::new(1, 8, 1),
            (DType::Q6K, 9..=64) => MmaCfg::new(1, 4, 1),
            (DType::Q6K, _) => MmaCfg::new(4, 1, 4),
            (_, 0..=8) => MmaCfg::new(1, 4, 1),
            (_, 9..=16) => MmaCfg::new(2, 4, 1),
            (_, 17..=64) => MmaCfg::new(4, 4, 1),
            _ => MmaCfg::new(8, 1, 4),
        }
    }

    fn launch(self, rows: usize, n: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (grid(rows, 8 * self.nt * self.rw), grid(n, 16), 1),
            block_dim: ((32 * self.s * self.rw) as u32, 1, 1),
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
        let need = interleaved_len(dtype, n, x.k).unwrap_or(usize::MAX);
        if x.block != ActBlock::B256
            || !x.k.is_multiple_of(256)
            || w.len() < need
            || out.len() < x.rows * n
        {
            return Err(CudaError::Usage("matmul_mma: sizes".into()));
        }
        let cfg = cfg.unwrap_or_else(|| MmaCfg::for_rows(dtype, x.rows));
        if !MMA_CFGS.contains(&cfg) {
            return Err(CudaError::Usage(format!(
                "matmul_mma: no kernel for {cfg:?}"
            )));
        }
        let name = format!("{base}_{}_{}_{}", cfg.nt, cfg.s, cfg.rw);
        // SAFETY: sizes checked above; the kernel reads tiles of the interleaved layout.
        unsafe { self.launch_quant(&name, cfg.launch(x.rows, n), w, n, x, out) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q6k_interleaving_moves_every_byte_of_every_block_once() {
        let (n, k) = (40, 512);
        let data: Vec<u8> = (0..n * (k / 256) * 210)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let il = interleave_q6k(&data, n, k);
        assert_eq!(il.len(), interleaved_len(DType::Q6K, n, k).unwrap());
        let nb = k / 256;
        for c in 0..n {
            for b in 0..nb {
                let blk = &data[(c * nb + b) * 210..][..210];
                let at = ((c / 32) * nb + b) * (13 * 512 + 64);
                for i in 0..208 {
                    assert_eq!(il[at + (i / 16) * 512 + (c % 32) * 16 + i % 16], blk[i]);
                }
                assert_eq!(&il[at + 13 * 512 + (c % 32) * 2..][..2], &blk[208..210]);
            }
        }
        // Rows past n are zero: the bytes moved are exactly the input's.
        let moved: u64 = il.iter().map(|&b| b as u64).sum();
        assert_eq!(moved, data.iter().map(|&b| b as u64).sum::<u64>());
    }

    #[test]
    fn every_row_count_has_a_compiled_configuration() {
        for dtype in [DType::Q4K, DType::Q6K] {
            for rows in [1, 2, 8, 9, 16, 17, 33, 64, 65, 2048] {
                assert!(MMA_CFGS.contains(&MmaCfg::for_rows(dtype, rows)), "{rows}");
            }
        }
        let src = include_str!("../kernels/matmul_mma.cu");
        for c in MMA_CFGS {
            let line = format!("MMA_KERNEL(name, D, {}, {}, {})", c.nt, c.s, c.rw);
            assert!(src.contains(&line), "{line}");
        }
    }
}
