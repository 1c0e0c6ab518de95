//! The decoder layers on the device: `tf_models::Model::forward`'s op sequence, with neighbours
//! fused where the fused kernel runs the same operations (q|k|v and gate|up matmuls in one
//! launch, biases + RoPE + KV write, residual add + the next RMSNorm).

use super::scratch::{matmul, matmul_pair, SPLIT_ROWS};
use super::weights::Group;
use super::CudaRunner;
use crate::rowops::{AttnDims, AttnKeys, AttnSplit, QkvPost};
use crate::Result;

impl CudaRunner {
    /// Every layer over the `m` rows in `s.x` (positions, slots and keys already uploaded).
    pub(super) fn layers(&mut self, m: usize) -> Result<()> {
        let cfg = self.model.config.clone();
        let (d, qd, kvd, f) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let (hd, eps) = (cfg.head_dim, cfg.norm_eps);
        let dims = AttnDims {
            rows: m,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let gpu = self.gpu.clone();
        let mut prof = std::mem::take(&mut self.prof);
        prof.start(&gpu);
        // Norms and SwiGLU also quantize their output for the matmul that reads it next (the
        // tag that matmul will ask for), saving its `actq` launch.
        let s = &mut self.s;
        let first = &self.w.layers[0];
        let q = s.acts.output_for(first.qkv.first(), self.tag + 1);
        gpu.rms_norm(&s.x, &first.attn_norm, d, eps, m, &mut s.h, q)?;
        prof.mark(&gpu, "norm");
        for li in 0..self.w.layers.len() {
            // Four matmul inputs per layer: h (q/k/v), att, h (gate/up), act.
            let t = self.tag;
            self.tag += 4;
            let lw = &self.w.layers[li];
            let next = self.w.layers.get(li + 1);
            let s = &mut self.s;
            let (kc, vc) = (&mut self.kc[li], &mut self.vc[li]);
            let (rd, style) = (cfg.rope_dim, cfg.rope_style);

            match (&lw.qkv, &lw.q_norm, &lw.k_norm) {
                (Group::Split(ws), Some(qn), Some(kn)) => {
                    // Per-head norms between the matmuls and RoPE: the ops one by one.
                    matmul(&gpu, &ws[0], &s.h, t + 1, m, &mut s.acts, &mut s.q)?;
                    matmul(&gpu, &ws[1], &s.h, t + 1, m, &mut s.acts, &mut s.k)?;
                    matmul(&gpu, &ws[2], &s.h, t + 1, m, &mut s.acts, &mut s.v)?;
                    for (x, b, n) in [
                        (&mut s.q, &lw.bq, qd),
                        (&mut s.k, &lw.bk, kvd),
                        (&mut s.v, &lw.bv, kvd),
                    ] {
                        if let Some(b) = b {
                            gpu.add_bias(x, b, m, n)?;
                        }
                    }
                    gpu.rms_norm(&s.q, qn, hd, eps, m * cfg.n_heads, &mut s.tmp, None)?;
                    gpu.stream
                        .memcpy_dtod(&s.tmp.slice(0..m * qd), &mut s.q.slice_mut(0..m * qd))?;
                    gpu.rms_norm(&s.k, kn, hd, eps, m * cfg.n_kv_heads, &mut s.tmp, None)?;
                    gpu.stream
                        .memcpy_dtod(&s.tmp.slice(0..m * kvd), &mut s.k.slice_mut(0..m * kvd))?;
                    let nh = (cfg.n_heads, cfg.n_kv_heads);
                    gpu.rope(&mut s.q, &s.pos, m, nh.0, hd, rd, style, &self.rope_cs)?;
                    gpu.rope(&mut s.k, &s.pos, m, nh.1, hd, rd, style, &self.rope_cs)?;
                    gpu.kv_write(&s.k, &s.v, &s.slot, m, kvd, kc, vc)?;
                }
                (group, _, _) => {
                    match group {
                        Group::Fused(w) => {
                            matmul(&gpu, w, &s.h, t + 1, m, &mut s.acts, &mut s.qkv)?;
                        }
                        Group::Pair(qk, v) => {
                            let ws = (qk, v);
                            matmul_pair(
                                &gpu,
                                ws,
                                &s.h,
                                t + 1,
                                m,
                                &mut s.acts,
                                &mut s.qkv,
                                &mut s.v,
                            )?;
                        }
                        Group::Split(ws) => {
                            matmul(&gpu, &ws[0], &s.h, t + 1, m, &mut s.acts, &mut s.tmp)?;
                            matmul(&gpu, &ws[1], &s.h, t + 1, m, &mut s.acts, &mut s.k)?;
                            matmul(&gpu, &ws[2], &s.h, t + 1, m, &mut s.acts, &mut s.v)?;
                        }
                    }
                    prof.mark(&gpu, "qkv");
                    // (q, k, v, q / k / v row strides)
                    let (q, k, v, strides) = match group {
                        Group::Fused(_) => {
                            let stride = qd + 2 * kvd;
                            let b = &s.qkv;
                            let (q, k, v) = (b.slice(0..), b.slice(qd..), b.slice(qd + kvd..));
                            (q, k, v, [stride; 3])
                        }
                        Group::Pair(..) => {
                            let (b, stride) = (&s.qkv, qd + kvd);
                            (
                                b.slice(0..),
                                b.slice(qd..),
                                s.v.slice(0..),
                                [stride, stride, kvd],
                            )
                        }
                        Group::Split(_) => {
                            let (q, k, v) = (s.tmp.slice(0..), s.k.slice(0..), s.v.slice(0..));
                            (q, k, v, [qd, kvd, kvd])
                        }
                    };
                    let post = QkvPost {
                        q,
                        k,
                        v,
                        q_stride: strides[0],
                        k_stride: strides[1],
                        v_stride: strides[2],
                        bq: lw.bq.as_ref(),
                        bk: lw.bk.as_ref(),
                        bv: lw.bv.as_ref(),
                        pos: &s.pos,
                        slot: &s.slot,
                        rot_dim: rd,
                        style,
                        cs: &self.rope_cs,
                    };
                    gpu.qkv_post(&post, m, dims, &mut s.q, kc, vc)?;
                }
            }
            prof.mark(&gpu, "qkv_post");

            let keys = AttnKeys {
                kc,
                vc,
                meta: &s.meta,
                tables: &s.tables,
                remaps: &s.remaps,
                fresh: &s.slot,
            };
            let split = (m <= SPLIT_ROWS && self.split_ok).then(|| AttnSplit {
                max_chunks: s.max_chunks,
                splits: gpu.attention_splits(&dims, s.max_chunks),
                part_ml: &mut s.part_ml,
                part_o: &mut s.part_o,
            });
            // The merge of the split form also quantizes its output for the o matmul.
            let q = s.acts.output_for(&lw.wo, t + 2);
            gpu.attention(dims, &s.q, &keys, split, &mut s.att, q)?;
            prof.mark(&gpu, "attn");
            matmul(&gpu, &lw.wo, &s.att, t + 2, m, &mut s.acts, &mut s.o)?;
            prof.mark(&gpu, "wo");
            let q = s.acts.output_for(lw.gate_up.first(), t + 3);
            gpu.add_rms_norm(&mut s.x, &s.o, &lw.ffn_norm, d, eps, m, &mut s.h, q)?;
            prof.mark(&gpu, "add_norm");

            match &lw.gate_up {
                Group::Fused(w) => {
                    matmul(&gpu, w, &s.h, t + 3, m, &mut s.acts, &mut s.gu)?;
                    prof.mark(&gpu, "gate_up");
                    let q = s.acts.output_for(&lw.w_down, t + 4);
                    gpu.swiglu_fused(&s.gu, f, m, &mut s.act, q)?;
                }
                Group::Pair(..) => {
                    return Err(crate::CudaError::Usage("gate|up grouped as a pair".into()))
                }
                Group::Split(ws) => {
                    matmul(&gpu, &ws[0], &s.h, t + 3, m, &mut s.acts, &mut s.gate)?;
                    matmul(&gpu, &ws[1], &s.h, t + 3, m, &mut s.acts, &mut s.up)?;
                    prof.mark(&gpu, "gate_up");
                    gpu.swiglu(&s.gate, &s.up, m * f, &mut s.act)?;
                }
            }
            prof.mark(&gpu, "swiglu");
            matmul(&gpu, &lw.w_down, &s.act, t + 4, m, &mut s.acts, &mut s.o)?;
            prof.mark(&gpu, "down");
            match next {
                Some(nl) => {
                    // The next layer's q/k/v matmul asks for tag t + 4 + 1.
                    let q = s.acts.output_for(nl.qkv.first(), t + 5);
                    gpu.add_rms_norm(&mut s.x, &s.o, &nl.attn_norm, d, eps, m, &mut s.h, q)?
                }
                None => gpu.add_into(&mut s.x, &s.o, m * d)?,
            }
            prof.mark(&gpu, "add_norm");
        }
        self.prof = prof;
        Ok(())
    }
}
