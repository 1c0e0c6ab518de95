//! The decoder layers on the device: the CUDA backend's [`LayerOps`], walked by
//! [`tf_models::walk`] like the CPU's. Inside an op, neighbours are fused where the fused kernel
//! runs the same operations (q|k|v and gate|up matmuls in one launch, biases + RoPE + KV write,
//! residual add + the next RMSNorm); the norms, SwiGLU and the attention merge also quantize
//! their output for the matmul that reads it next (the tag that matmul will ask for).

use super::scratch::{matmul, matmul_pair, SPLIT_ROWS};
use super::weights::{DevFfn, Group};
use super::CudaRunner;
use crate::ops::Glu;
use crate::rowops::{AttnDims, AttnKeys, AttnSplit, QkvPost};
use crate::{CudaError, Result};
use tf_models::{walk, LayerOps, LayerPlan, Plan};

impl CudaRunner {
    /// Every layer over the `m` rows in `s.x` (positions, slots and keys already uploaded).
    pub(super) fn layers(&mut self, m: usize) -> Result<()> {
        self.call_rows = m;
        let model = self.model.clone();
        let mut prof = std::mem::take(&mut self.prof);
        prof.start(&self.gpu);
        self.prof = prof;
        walk(&model.plan, self)
    }

    fn dims(&self, lp: &LayerPlan) -> AttnDims {
        let cfg = &self.model.config;
        AttnDims {
            rows: self.call_rows,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            scale: lp.attn_scale,
            window: lp.window,
            softcap: lp.attn_softcap,
        }
    }

    /// What every op reads: the model, the GPU and the call's row count (owned, so that the
    /// op may borrow the runner's buffers mutably beside them).
    fn call(
        &self,
    ) -> (
        std::sync::Arc<tf_models::Model>,
        std::sync::Arc<crate::Gpu>,
        usize,
    ) {
        (self.model.clone(), self.gpu.clone(), self.call_rows)
    }

    fn mark(&mut self, what: &'static str) {
        let gpu = self.gpu.clone();
        self.prof.mark(&gpu, what);
    }
}

impl LayerOps for CudaRunner {
    type Error = CudaError;

    fn delta_net(&mut self, _layer: usize, _dn: &tf_models::DeltaMixer) -> Result<()> {
        Err(CudaError::Usage(
            "recurrent (Gated DeltaNet) layers do not run on the GPU yet".into(),
        ))
    }

    fn mamba(&mut self, _layer: usize, _m: &tf_models::MambaMixer) -> Result<()> {
        Err(CudaError::Usage(
            "recurrent (Mamba-2) layers do not run on the GPU yet".into(),
        ))
    }

    fn embed(&mut self, _plan: &Plan) -> Result<()> {
        let (model, gpu, m) = self.call();
        let cfg = &model.config;
        let s = &mut self.s;
        let first = &self.w.layers[0];
        let q = s.acts.output_for(first.qkv.first(), self.tag + 1);
        gpu.rms_norm(
            &s.x,
            &first.attn_norm,
            cfg.d_model,
            cfg.norm_eps,
            m,
            &mut s.h,
            q,
        )?;
        self.mark("norm");
        Ok(())
    }

    fn qkv(&mut self, li: usize, lp: &LayerPlan) -> Result<()> {
        // Four matmul inputs per layer: h (q/k/v), att, h (gate/up), act.
        let t = self.tag;
        self.tag += 4;
        self.layer_tag = t;
        let (model, gpu, m) = self.call();
        let cfg = &model.config;
        let (qd, kvd, hd, eps) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim, cfg.norm_eps);
        let dims = self.dims(lp);
        let lw = &self.w.layers[li];
        let s = &mut self.s;
        let (kc, vc) = (&mut self.kc[li], &mut self.vc[li]);
        let cs = &self.rope_cs[lp.rope];
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
                // Per head, or over the whole projection (OLMoE).
                let (qn_rows, qn_n) = match lp.qk_norm_full {
                    true => ((m, qd), (m, kvd)),
                    false => ((m * cfg.n_heads, hd), (m * cfg.n_kv_heads, hd)),
                };
                gpu.rms_norm(&s.q, qn, qn_rows.1, eps, qn_rows.0, &mut s.tmp, None)?;
                gpu.stream
                    .memcpy_dtod(&s.tmp.slice(0..m * qd), &mut s.q.slice_mut(0..m * qd))?;
                gpu.rms_norm(&s.k, kn, qn_n.1, eps, qn_n.0, &mut s.tmp, None)?;
                gpu.stream
                    .memcpy_dtod(&s.tmp.slice(0..m * kvd), &mut s.k.slice_mut(0..m * kvd))?;
                let nh = (cfg.n_heads, cfg.n_kv_heads);
                gpu.rope(&mut s.q, &s.pos, m, nh.0, hd, rd, style, cs)?;
                gpu.rope(&mut s.k, &s.pos, m, nh.1, hd, rd, style, cs)?;
                gpu.kv_write(&s.k, &s.v, &s.slot, m, kvd, kc, vc)?;
            }
            (group, _, _) => {
                match group {
                    Group::Fused(w) => {
                        matmul(&gpu, w, &s.h, t + 1, m, &mut s.acts, &mut s.qkv)?;
                    }
                    Group::Pair(qk, v) => {
                        let ws = (qk, v);
                        matmul_pair(&gpu, ws, &s.h, t + 1, m, &mut s.acts, &mut s.qkv, &mut s.v)?;
                    }
                    Group::Split(ws) => {
                        matmul(&gpu, &ws[0], &s.h, t + 1, m, &mut s.acts, &mut s.tmp)?;
                        matmul(&gpu, &ws[1], &s.h, t + 1, m, &mut s.acts, &mut s.k)?;
                        matmul(&gpu, &ws[2], &s.h, t + 1, m, &mut s.acts, &mut s.v)?;
                    }
                }
                self.prof.mark(&gpu, "qkv");
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
                    cs,
                };
                gpu.qkv_post(&post, m, dims, &mut s.q, kc, vc)?;
            }
        }
        self.mark("qkv_post");
        Ok(())
    }

    fn attention(&mut self, li: usize, lp: &LayerPlan) -> Result<()> {
        let (gpu, m, t) = (self.gpu.clone(), self.call_rows, self.layer_tag);
        let dims = self.dims(lp);
        let lw = &self.w.layers[li];
        let s = &mut self.s;
        let keys = AttnKeys {
            kc: &mut self.kc[li],
            vc: &mut self.vc[li],
            meta: &s.meta,
            tables: &s.tables,
            remaps: &s.remaps,
            fresh: &s.slot,
            sinks: lw.sinks.as_ref(),
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
        self.mark("attn");
        Ok(())
    }

    fn attn_out(&mut self, li: usize, _lp: &LayerPlan) -> Result<()> {
        let (model, gpu, m) = self.call();
        let t = self.layer_tag;
        let cfg = &model.config;
        let lw = &self.w.layers[li];
        let s = &mut self.s;
        matmul(&gpu, &lw.wo, &s.att, t + 2, m, &mut s.acts, &mut s.o)?;
        if let Some(b) = &lw.bo {
            gpu.add_bias(&mut s.o, b, m, cfg.d_model)?;
        }
        self.prof.mark(&gpu, "wo");
        let (d, eps) = (cfg.d_model, cfg.norm_eps);
        // x += post_norm(o) where the layer has one (into `tmp`), else x += o.
        let o = match &lw.post_attn_norm {
            Some(w) => {
                gpu.rms_norm(&s.o, w, d, eps, m, &mut s.tmp, None)?;
                &s.tmp
            }
            None => &s.o,
        };
        let q = s.acts.output_for(lw.ffn_input(), t + 3);
        gpu.add_rms_norm(&mut s.x, o, &lw.ffn_norm, d, eps, m, &mut s.h, q)?;
        self.mark("add_norm");
        Ok(())
    }

    fn mlp(&mut self, li: usize, lp: &LayerPlan, _last: bool) -> Result<()> {
        let (model, gpu, m) = self.call();
        let t = self.layer_tag;
        let cfg = &model.config;
        let (d, eps) = (cfg.d_model, cfg.norm_eps);
        if lp.moe.is_some() {
            self.moe_ffn(li, lp, m)?;
        } else {
            self.dense_ffn(li, lp)?;
        }
        let lw = &self.w.layers[li];
        let next = self.w.layers.get(li + 1);
        let s = &mut self.s;
        let o = match &lw.post_ffn_norm {
            Some(w) => {
                gpu.rms_norm(&s.o, w, d, eps, m, &mut s.tmp, None)?;
                &s.tmp
            }
            None => &s.o,
        };
        match next {
            Some(nl) => {
                // The next layer's q/k/v matmul asks for tag t + 4 + 1.
                let q = s.acts.output_for(nl.qkv.first(), t + 5);
                gpu.add_rms_norm(&mut s.x, o, &nl.attn_norm, d, eps, m, &mut s.h, q)?
            }
            None => gpu.add_into(&mut s.x, o, m * d)?,
        }
        self.mark("add_norm");
        Ok(())
    }
}

impl CudaRunner {
    /// `s.o` = `down(act(h · gate) * (h · up))` over the call's rows.
    fn dense_ffn(&mut self, li: usize, lp: &LayerPlan) -> Result<()> {
        let (model, gpu, m) = self.call();
        let (t, f) = (self.layer_tag, model.config.ffn_dim);
        let DevFfn::Dense { gate_up, w_down } = &self.w.layers[li].ffn else {
            return Err(CudaError::Usage("dense_ffn on a mixture of experts".into()));
        };
        let s = &mut self.s;
        let act = Glu::of(lp.mlp);
        match gate_up {
            Group::Fused(w) => {
                matmul(&gpu, w, &s.h, t + 3, m, &mut s.acts, &mut s.gu)?;
                self.prof.mark(&gpu, "gate_up");
                let q = s.acts.output_for(w_down, t + 4);
                gpu.glu_fused(act, &s.gu, f, m, &mut s.act, q)?;
            }
            Group::Pair(..) => return Err(CudaError::Usage("gate|up grouped as a pair".into())),
            Group::Split(ws) => {
                matmul(&gpu, &ws[0], &s.h, t + 3, m, &mut s.acts, &mut s.gate)?;
                matmul(&gpu, &ws[1], &s.h, t + 3, m, &mut s.acts, &mut s.up)?;
                self.prof.mark(&gpu, "gate_up");
                gpu.glu(act, &s.gate, &s.up, m * f, &mut s.act)?;
            }
        }
        self.prof.mark(&gpu, "glu");
        matmul(&gpu, w_down, &s.act, t + 4, m, &mut s.acts, &mut s.o)?;
        self.prof.mark(&gpu, "down");
        Ok(())
    }
}
