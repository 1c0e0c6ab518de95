//! A model's weights on the device: quantized matrices as their raw GGUF blocks (the kernels
//! decode them in place), norms and biases as f32. The token embedding stays on the host (one
//! row per token is dequantized there) unless it is also the output head.

use cudarc::driver::CudaSlice;
use tf_core::DType;
use tf_kernels::matmul::WeightMatrix;
use tf_models::weights::{Experts, Ffn, Weights};

use crate::ops::matmul_kernel;
use crate::{CudaError, Gpu, Result};

pub struct DevMatrix {
    pub dtype: DType,
    /// Inputs per row (the reduction length).
    pub k: usize,
    /// Rows (outputs).
    pub n: usize,
    pub data: CudaSlice<u8>,
    /// Q4_K / Q6_K blocks in the layout of `ops::interleave` (coalesced loads).
    pub interleaved: bool,
}

/// Matrices reading the same input: one matrix of all their rows when they share a tensor type
/// (one launch); q|k joined and v apart when only q and k do (a Q4_K_M layer with a Q6_K v:
/// one few-row launch for both); else each on its own.
pub enum Group {
    Fused(DevMatrix),
    Pair(DevMatrix, DevMatrix),
    Split(Vec<DevMatrix>),
}

impl Group {
    /// The first matrix (the one whose input quantization the others share).
    pub fn first(&self) -> &DevMatrix {
        match self {
            Group::Fused(m) | Group::Pair(m, _) => m,
            Group::Split(ms) => &ms[0],
        }
    }
}

pub struct DevLayer {
    pub attn_norm: CudaSlice<f32>,
    /// wq, wk, wv.
    pub qkv: Group,
    pub wo: DevMatrix,
    pub bq: Option<CudaSlice<f32>>,
    pub bk: Option<CudaSlice<f32>>,
    pub bv: Option<CudaSlice<f32>>,
    pub q_norm: Option<CudaSlice<f32>>,
    pub k_norm: Option<CudaSlice<f32>>,
    pub ffn_norm: CudaSlice<f32>,
    /// RMSNorms of the attention and MLP outputs before their residual adds (Gemma).
    pub post_attn_norm: Option<CudaSlice<f32>>,
    pub post_ffn_norm: Option<CudaSlice<f32>>,
    /// The attention output's bias, and one sink logit per query head (gpt-oss).
    pub bo: Option<CudaSlice<f32>>,
    pub sinks: Option<CudaSlice<f32>>,
    pub ffn: DevFfn,
}

pub enum DevFfn {
    Dense {
        /// w_gate, w_up.
        gate_up: Group,
        w_down: DevMatrix,
    },
    Moe(DevMoe),
}

/// A mixture of experts: the router, and each expert's matrices (and biases, gpt-oss).
pub struct DevMoe {
    pub router: DevMatrix,
    pub router_bias: Option<CudaSlice<f32>>,
    pub experts: Vec<DevExpert>,
}

pub struct DevExpert {
    pub gate: DevMatrix,
    pub up: DevMatrix,
    pub down: DevMatrix,
    pub biases: Option<[CudaSlice<f32>; 3]>,
}

impl DevLayer {
    /// The first matrix that reads `ffn_norm(x)`: its input quantization is made by the norm.
    pub fn ffn_input(&self) -> &DevMatrix {
        match &self.ffn {
            DevFfn::Dense { gate_up, .. } => gate_up.first(),
            DevFfn::Moe(m) => &m.router,
        }
    }
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
        // Q4_K (and Q6_K for the tensor-core kernels) interleaved by 32 rows: coalesced loads.
        let interleave = !std::env::var("TENSORFOLD_CUDA_INTERLEAVE").is_ok_and(|v| v == "0")
            && (m.dtype == DType::Q4K || (m.dtype == DType::Q6K && self.gpu.mma));
        let data = match interleave {
            true => self.gpu.upload(
                &crate::ops::interleave(m.dtype, m.data, m.n, m.k).expect("Q4_K or Q6_K"),
            )?,
            false => self.gpu.upload(m.data)?,
        };
        Ok(DevMatrix {
            dtype: m.dtype,
            k: m.k,
            n: m.n,
            data,
            interleaved: interleave,
        })
    }

    /// The matrices as one (rows concatenated) when they share type and width; for three
    /// matrices of which the first two do, those two joined and the third apart.
    fn group(&mut self, ms: &[&WeightMatrix], fuse: bool) -> Result<Group> {
        let fuse = fuse && std::env::var("TENSORFOLD_CUDA_FUSE").map_or(true, |v| v != "0");
        let alike = |ms: &[&WeightMatrix]| {
            fuse && ms.iter().all(|m| m.dtype == ms[0].dtype && m.k == ms[0].k)
        };
        if alike(ms) {
            return Ok(Group::Fused(self.joined(ms)?));
        }
        if ms.len() == 3 && alike(&ms[..2]) && ms[2].k == ms[0].k {
            return Ok(Group::Pair(self.joined(&ms[..2])?, self.matrix(ms[2])?));
        }
        Ok(Group::Split(
            ms.iter().map(|m| self.matrix(m)).collect::<Result<_>>()?,
        ))
    }

    /// One matrix of the rows of `ms` (same type and width), in order.
    fn joined(&mut self, ms: &[&WeightMatrix]) -> Result<DevMatrix> {
        let bytes: Vec<u8> = ms.iter().flat_map(|m| m.data.iter().copied()).collect();
        let n = ms.iter().map(|m| m.n).sum();
        let joined = WeightMatrix::new(ms[0].dtype, ms[0].k, n, &bytes)
            .ok_or_else(|| CudaError::Usage("fused matrix size".into()))?;
        self.matrix(&joined)
    }

    fn floats(&mut self, v: &[f32]) -> Result<CudaSlice<f32>> {
        self.bytes += v.len() * 4;
        self.gpu.upload(v)
    }

    fn opt(&mut self, v: &Option<Vec<f32>>) -> Result<Option<CudaSlice<f32>>> {
        v.as_ref().map(|v| self.floats(v)).transpose()
    }

    fn experts(&mut self, x: &Experts) -> Result<DevMoe> {
        let mut experts = Vec::with_capacity(x.experts.len());
        for (i, e) in x.experts.iter().enumerate() {
            let biases = match &x.biases {
                Some(b) => {
                    let (f, d) = (e.gate.n, e.down.n);
                    Some([
                        self.floats(&b.gate[i * f..(i + 1) * f])?,
                        self.floats(&b.up[i * f..(i + 1) * f])?,
                        self.floats(&b.down[i * d..(i + 1) * d])?,
                    ])
                }
                None => None,
            };
            experts.push(DevExpert {
                gate: self.matrix(&e.gate)?,
                up: self.matrix(&e.up)?,
                down: self.matrix(&e.down)?,
                biases,
            });
        }
        Ok(DevMoe {
            router: self.matrix(&x.router)?,
            router_bias: self.opt(&x.router_bias)?,
            experts,
        })
    }
}

impl DevWeights {
    pub fn upload(gpu: &Gpu, w: &Weights) -> Result<DevWeights> {
        let mut up = Uploader { gpu, bytes: 0 };
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            let ffn = match &l.ffn {
                Ffn::Dense(mlp) => DevFfn::Dense {
                    gate_up: up.group(&[&mlp.gate, &mlp.up], true)?,
                    w_down: up.matrix(&mlp.down)?,
                },
                Ffn::Moe(x) => DevFfn::Moe(up.experts(x)?),
                Ffn::Plain { .. } | Ffn::None => {
                    return Err(CudaError::Usage(
                        "Nemotron-H's blocks do not run on the GPU yet".into(),
                    ))
                }
            };
            let Some(at) = l.attention() else {
                return Err(CudaError::Usage(
                    "recurrent (Gated DeltaNet) layers do not run on the GPU yet".into(),
                ));
            };
            layers.push(DevLayer {
                attn_norm: up.floats(&l.attn_norm)?,
                // Per-head q/k norms run between the matmuls and RoPE: kept apart there.
                qkv: up.group(&[&at.wq, &at.wk, &at.wv], at.q_norm.is_none())?,
                wo: up.matrix(&at.wo)?,
                bq: up.opt(&at.bq)?,
                bk: up.opt(&at.bk)?,
                bv: up.opt(&at.bv)?,
                q_norm: up.opt(&at.q_norm)?,
                k_norm: up.opt(&at.k_norm)?,
                ffn_norm: up.floats(&l.ffn_norm)?,
                post_attn_norm: up.opt(&l.post_attn_norm)?,
                post_ffn_norm: up.opt(&l.post_ffn_norm)?,
                bo: up.opt(&at.bo)?,
                sinks: up.opt(&at.sinks)?,
                ffn,
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
