//! A model's weights on the device: quantized matrices as their raw GGUF blocks (the kernels
//! decode them in place), norms and biases as f32. The token embedding stays on the host (one
//! row per token is dequantized there) unless it is also the output head.

use cudarc::driver::CudaSlice;
use tf_core::DType;
use tf_kernels::matmul::WeightMatrix;
use tf_models::weights::Weights;

use crate::ops::matmul_kernel;
use crate::{CudaError, Gpu, Result};

pub struct DevMatrix {
    pub dtype: DType,
    /// Inputs per row (the reduction length).
    pub k: usize,
    /// Rows (outputs).
    pub n: usize,
    pub data: CudaSlice<u8>,
}

pub struct DevLayer {
    pub attn_norm: CudaSlice<f32>,
    pub wq: DevMatrix,
    pub wk: DevMatrix,
    pub wv: DevMatrix,
    pub wo: DevMatrix,
    pub bq: Option<CudaSlice<f32>>,
    pub bk: Option<CudaSlice<f32>>,
    pub bv: Option<CudaSlice<f32>>,
    pub q_norm: Option<CudaSlice<f32>>,
    pub k_norm: Option<CudaSlice<f32>>,
    pub ffn_norm: CudaSlice<f32>,
    pub w_gate: DevMatrix,
    pub w_up: DevMatrix,
    pub w_down: DevMatrix,
}

pub struct DevWeights {
    pub layers: Vec<DevLayer>,
    pub norm: CudaSlice<f32>,
    pub output: DevMatrix,
    /// Bytes uploaded.
    pub bytes: usize,
}

struct Uploader<'g> {
    gpu: &'g Gpu,
    bytes: usize,
}

impl Uploader<'_> {
    fn matrix(&mut self, m: &WeightMatrix) -> Result<DevMatrix> {
        if matmul_kernel(m.dtype).is_none() {
            return Err(CudaError::Usage(format!(
                "no GPU matmul for tensor type {}",
                m.dtype
            )));
        }
        self.bytes += m.data.len();
        Ok(DevMatrix {
            dtype: m.dtype,
            k: m.k,
            n: m.n,
            data: self.gpu.upload(m.data)?,
        })
    }

    fn floats(&mut self, v: &[f32]) -> Result<CudaSlice<f32>> {
        self.bytes += v.len() * 4;
        self.gpu.upload(v)
    }

    fn opt(&mut self, v: &Option<Vec<f32>>) -> Result<Option<CudaSlice<f32>>> {
        v.as_ref().map(|v| self.floats(v)).transpose()
    }
}

impl DevWeights {
    pub fn upload(gpu: &Gpu, w: &Weights) -> Result<DevWeights> {
        let mut up = Uploader { gpu, bytes: 0 };
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            layers.push(DevLayer {
                attn_norm: up.floats(&l.attn_norm)?,
                wq: up.matrix(&l.wq)?,
                wk: up.matrix(&l.wk)?,
                wv: up.matrix(&l.wv)?,
                wo: up.matrix(&l.wo)?,
                bq: up.opt(&l.bq)?,
                bk: up.opt(&l.bk)?,
                bv: up.opt(&l.bv)?,
                q_norm: up.opt(&l.q_norm)?,
                k_norm: up.opt(&l.k_norm)?,
                ffn_norm: up.floats(&l.ffn_norm)?,
                w_gate: up.matrix(&l.w_gate)?,
                w_up: up.matrix(&l.w_up)?,
                w_down: up.matrix(&l.w_down)?,
            });
        }
        let norm = up.floats(&w.norm)?;
        let output = up.matrix(&w.output)?;
        Ok(DevWeights {
            layers,
            norm,
            output,
            bytes: up.bytes,
        })
    }
}
