//! Binding a hybrid model's own layers, in GGUF and Hugging Face naming: Gated DeltaNet layers
//! and a shared expert (Qwen3.5, Qwen3-Next), Nemotron-H's one-op blocks with their Mamba-2
//! layers, and the multi-token-prediction head. Qwen3-Next's checkpoints fuse the projections per key head
//! (`in_proj_qkvz`: each key head's q, k, then its value heads' v and z; `in_proj_ba`: its
//! value heads' b, then a); their rows are regrouped at load into q | k | v, z, b and a, which
//! is what GGUF converters write.

use crate::config::{DeltaConfig, ModelConfig};
use crate::error::{ModelError, Result};
use crate::weights::{Binder, Ffn, LayerWeights, MixerWeights, Mlp, Naming};
use tf_kernels::matmul::WeightMatrix;
use tf_weights::TensorView;

/// A Mamba-2 layer: the input projection's three parts (the gate `z`, the convolution's x, B, C
/// channels, each head's `dt`), the convolution with its bias, `-exp(A_log)`, `D` and the
/// time-step bias per head, the grouped norm's weights, the output projection.
pub struct MambaWeights<'a> {
    pub z: WeightMatrix<'a>,
    pub xbc: WeightMatrix<'a>,
    pub dt: WeightMatrix<'a>,
    pub out: WeightMatrix<'a>,
    /// `channels x kernel`.
    pub conv: Vec<f32>,
    pub conv_bias: Vec<f32>,
    pub rate: Vec<f32>,
    pub d: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
}

/// A Gated DeltaNet layer: projections to the convolution's q, k, v channels, the output gate
/// `z`, the write strength `b` and the decay input `a`; the convolution; the decay rate
/// (`-exp(A_log)`) and time-step bias per value head; the gated norm over a value head; the
/// output projection.
pub struct DeltaWeights<'a> {
    pub qkv: WeightMatrix<'a>,
    pub z: WeightMatrix<'a>,
    pub b: WeightMatrix<'a>,
    pub a: WeightMatrix<'a>,
    pub out: WeightMatrix<'a>,
    /// `channels x kernel`.
    pub conv: Vec<f32>,
    pub rate: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
}

/// A multi-token-prediction head (Qwen3.5, Qwen3-Next): from a token's embedding and the
/// model's final hidden state at the position before it, one more decoder layer predicts the
/// token after: `eh_proj([enorm(embed) | hnorm(hidden)])`, the layer, `head_norm`, the head.
pub struct MtpWeights<'a> {
    /// `2 d_model -> d_model`: the normed embedding first, then the normed hidden state.
    pub eh_proj: WeightMatrix<'a>,
    pub enorm: Vec<f32>,
    pub hnorm: Vec<f32>,
    pub head_norm: Vec<f32>,
    /// Its own output head, where the file has one (else the model's).
    pub head: Option<WeightMatrix<'a>>,
}

impl<'a> Binder<'a> {
    /// Block `i` of a Nemotron-H-style model: its norm, and a Mamba-2 layer, attention or a
    /// squared-ReLU MLP.
    pub(crate) fn block(
        &self,
        naming: Naming,
        i: usize,
        cfg: &ModelConfig,
        mc: &crate::config::MambaConfig,
    ) -> Result<LayerWeights<'a>> {
        use crate::config::Block;
        let fam = cfg.family;
        let d = cfg.d_model;
        let n = |w: &str| naming.layer(i, w, fam);
        let norm = self.norm(&n("attn_norm.weight"), d, false)?;
        let (mixer, ffn) = match mc.blocks[i] {
            Block::Mamba => (
                MixerWeights::Mamba(self.mamba(naming, i, cfg, mc)?),
                Ffn::None,
            ),
            Block::Attention => (
                MixerWeights::Attention(self.attention(naming, i, cfg)?),
                Ffn::None,
            ),
            Block::Mlp => {
                // The block's widths: the file's per-layer list gives it; the config's widest.
                let f = cfg.ffn_dim;
                let ffn = Ffn::Plain {
                    up: self.matrix(&n("ffn_up.weight"), d, f)?,
                    down: self.matrix(&n("ffn_down.weight"), f, d)?,
                };
                (MixerWeights::None, ffn)
            }
        };
        Ok(LayerWeights {
            attn_norm: norm.clone(),
            mixer,
            ffn_norm: norm,
            post_attn_norm: None,
            post_ffn_norm: None,
            ffn,
        })
    }

    /// Layer `i`'s Gated DeltaNet weights.
    pub(crate) fn delta(
        &self,
        naming: Naming,
        i: usize,
        cfg: &ModelConfig,
        dn: &DeltaConfig,
    ) -> Result<DeltaWeights<'a>> {
        let d = cfg.d_model;
        let (hk, hv, dk, dv) = (dn.k_heads, dn.v_heads, dn.dk, dn.dv);
        let (ch, vw) = (dn.channels(), hv * dv);
        let kernel = dn.conv_kernel;
        let gguf = |w: &str| format!("blk.{i}.{w}");
        let hf = |w: &str| format!("model.layers.{i}.linear_attn.{w}");
        match naming {
            Naming::Gguf => {
                let [b, a] = match self.src.tensor(&gguf("ssm_ba.weight")) {
                    Some(_) => {
                        let ba = self.regroup(&gguf("ssm_ba.weight"), d, hk, &[hv / hk; 2])?;
                        [ba[0], ba[1]]
                    }
                    None => [
                        self.matrix(&gguf("ssm_beta.weight"), d, hv)?,
                        self.matrix(&gguf("ssm_alpha.weight"), d, hv)?,
                    ],
                };
                Ok(DeltaWeights {
                    qkv: self.matrix(&gguf("attn_qkv.weight"), d, ch)?,
                    z: self.matrix(&gguf("attn_gate.weight"), d, vw)?,
                    b,
                    a,
                    out: self.matrix(&gguf("ssm_out.weight"), vw, d)?,
                    conv: self.conv(&gguf("ssm_conv1d.weight"), ch, kernel)?,
                    rate: self.vector(&gguf("ssm_a"), hv)?,
                    dt_bias: self.vector(&gguf("ssm_dt.bias"), hv)?,
                    norm: self.vector(&gguf("ssm_norm.weight"), dv)?,
                })
            }
            Naming::Hf => {
                let (qkv, z, b, a) = match self.src.tensor(&hf("in_proj_qkvz.weight")) {
                    // Per key head: q (dk), k (dk), v (r dv), z (r dv).
                    Some(_) => {
                        let r = hv / hk;
                        let parts = [dk, dk, r * dv, r * dv];
                        let m = self.regroup(&hf("in_proj_qkvz.weight"), d, hk, &parts)?;
                        let ba = self.regroup(&hf("in_proj_ba.weight"), d, hk, &[r, r])?;
                        (self.joined(&m[..3], d)?, m[3], ba[0], ba[1])
                    }
                    None => (
                        self.matrix(&hf("in_proj_qkv.weight"), d, ch)?,
                        self.matrix(&hf("in_proj_z.weight"), d, vw)?,
                        self.matrix(&hf("in_proj_b.weight"), d, hv)?,
                        self.matrix(&hf("in_proj_a.weight"), d, hv)?,
                    ),
                };
                let a_log = self.vector(&hf("A_log"), hv)?;
                Ok(DeltaWeights {
                    qkv,
                    z,
                    b,
                    a,
                    out: self.matrix(&hf("out_proj.weight"), vw, d)?,
                    conv: self.conv(&hf("conv1d.weight"), ch, kernel)?,
                    rate: a_log.iter().map(|&v| -tf_kernels::canon::exp(v)).collect(),
                    dt_bias: self.vector(&hf("dt_bias"), hv)?,
                    norm: self.vector(&hf("norm.weight"), dv)?,
                })
            }
        }
    }

    /// Layer `i`'s Mamba-2 weights (GGUF `ssm_*`; HF `mixer.*`).
    pub(crate) fn mamba(
        &self,
        naming: Naming,
        i: usize,
        cfg: &ModelConfig,
        mc: &crate::config::MambaConfig,
    ) -> Result<MambaWeights<'a>> {
        let d = cfg.d_model;
        let (heads, inner) = (mc.heads, mc.heads * mc.head_dim);
        let ch = inner + 2 * mc.groups * mc.state;
        let name = |gguf: &str, hf: &str| match naming {
            Naming::Gguf => format!("blk.{i}.{gguf}"),
            Naming::Hf => format!("{}.{i}.mixer.{hf}", cfg.family.hf_layers),
        };
        let parts = self.split(
            &name("ssm_in.weight", "in_proj.weight"),
            d,
            &[inner, ch, heads],
        )?;
        let rate = match naming {
            Naming::Gguf => self.flat(&name("ssm_a", ""), heads)?,
            Naming::Hf => (self.flat(&name("", "A_log"), heads)?)
                .iter()
                .map(|&v| -tf_kernels::canon::exp(v))
                .collect(),
        };
        Ok(MambaWeights {
            z: parts[0],
            xbc: parts[1],
            dt: parts[2],
            out: self.matrix(&name("ssm_out.weight", "out_proj.weight"), inner, d)?,
            conv: self.conv(
                &name("ssm_conv1d.weight", "conv1d.weight"),
                ch,
                mc.conv_kernel,
            )?,
            conv_bias: self.flat(&name("ssm_conv1d.bias", "conv1d.bias"), ch)?,
            rate,
            d: self.flat(&name("ssm_d", "D"), heads)?,
            dt_bias: self.flat(&name("ssm_dt.bias", "dt_bias"), heads)?,
            norm: self.flat(&name("ssm_norm.weight", "norm.weight"), inner)?,
        })
    }

    /// Tensor `name`, which must be there.
    fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        self.src
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor {
                source_path: self.src.describe(),
                name: name.to_string(),
            })
    }

    /// A tensor of `n` values whatever its shape (`[n]`, `[1, n]`, `[n / g, g]`), as floats.
    fn flat(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        if t.dims.iter().product::<usize>() != n {
            return Err(ModelError::BadShape {
                source_path: self.src.describe(),
                name: name.to_string(),
                expected: vec![n],
                found: t.dims.to_vec(),
            });
        }
        Ok(t.to_f32()?)
    }

    /// A depthwise convolution's taps, `channels x kernel` (GGUF `[kernel, channels]`, HF
    /// `[channels, 1, kernel]`).
    fn conv(&self, name: &str, channels: usize, kernel: usize) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        let ok = t.dims.first() == Some(&kernel)
            && t.dims.last() == Some(&channels)
            && t.dims.iter().product::<usize>() == kernel * channels;
        if !ok {
            return Err(ModelError::BadShape {
                source_path: self.src.describe(),
                name: name.to_string(),
                expected: vec![kernel, channels],
                found: t.dims.to_vec(),
            });
        }
        Ok(t.to_f32()?)
    }

    /// A matrix whose output rows come in `groups` groups of `parts` (each group: part 0's
    /// rows, then part 1's, ...), regrouped into one matrix per part (every group's rows of
    /// that part, in group order). Rows are whole, so any type regroups exactly.
    fn regroup(
        &self,
        name: &str,
        k: usize,
        groups: usize,
        parts: &[usize],
    ) -> Result<Vec<WeightMatrix<'a>>> {
        let per: usize = parts.iter().sum();
        let whole = self.matrix(name, k, groups * per)?;
        let row = whole.row_bytes();
        let mut at = 0;
        let mut out = Vec::with_capacity(parts.len());
        for &p in parts {
            let mut bytes = Vec::with_capacity(groups * p * row);
            for g in 0..groups {
                let first = g * per + at;
                bytes.extend_from_slice(&whole.data[first * row..(first + p) * row]);
            }
            at += p;
            let data = self.arena.keep(bytes);
            out.push(WeightMatrix::new(whole.dtype, k, groups * p, data).expect("whole rows"));
        }
        Ok(out)
    }

    /// Matrices of the same input width and type, their rows one after another.
    fn joined(&self, parts: &[WeightMatrix<'a>], k: usize) -> Result<WeightMatrix<'a>> {
        let mut bytes = Vec::new();
        for p in parts {
            bytes.extend_from_slice(p.data);
        }
        let n = parts.iter().map(|p| p.n).sum();
        let data = self.arena.keep(bytes);
        Ok(WeightMatrix::new(parts[0].dtype, k, n, data).expect("whole rows"))
    }

    /// Layer `i`'s shared expert (width `w`) and its gate's `d` weights.
    pub(crate) fn shared_expert(
        &self,
        naming: Naming,
        i: usize,
        d: usize,
        w: usize,
    ) -> Result<(Mlp<'a>, Vec<f32>)> {
        let name = |gguf: &str, hf: &str| match naming {
            Naming::Gguf => format!("blk.{i}.{gguf}"),
            Naming::Hf => format!("model.layers.{i}.mlp.{hf}"),
        };
        let mlp = Mlp {
            gate: self.matrix(
                &name("ffn_gate_shexp.weight", "shared_expert.gate_proj.weight"),
                d,
                w,
            )?,
            up: self.matrix(
                &name("ffn_up_shexp.weight", "shared_expert.up_proj.weight"),
                d,
                w,
            )?,
            down: self.matrix(
                &name("ffn_down_shexp.weight", "shared_expert.down_proj.weight"),
                w,
                d,
            )?,
        };
        let gate = name("ffn_gate_inp_shexp.weight", "shared_expert_gate.weight");
        let t = self.tensor(&gate)?;
        if t.dims.iter().product::<usize>() != d || t.dims.first() != Some(&d) {
            return Err(ModelError::BadShape {
                source_path: self.src.describe(),
                name: gate,
                expected: vec![d],
                found: t.dims.to_vec(),
            });
        }
        Ok((mlp, t.to_f32()?))
    }
}
