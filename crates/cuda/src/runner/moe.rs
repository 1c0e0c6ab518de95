//! The mixture-of-experts feed-forward on the device, as the CPU's `moe_ffn` computes it: the
//! router's scores on the device, each row routed on the host by `tf_kernels::moe::route` (the
//! very function the CPU calls), then each used expert once over the rows that chose it
//! (gathered, the row-exact matmuls and activation, scattered to their (row, rank) places), and
//! the rows combined in rank order on the device. Every step reads one row or is row-exact, so
//! a row's output is the CPU's bits whatever else shares the call.
//!
//! Routing on the host waits for the scores, so a model with experts runs without CUDA graphs.

use tf_kernels::moe::{route, Choice, Gating, Routing};
use tf_models::LayerPlan;

use super::scratch::matmul;
use super::weights::DevFfn;
use super::CudaRunner;
use crate::ops::Glu;
use crate::{CudaError, Result};

/// The first tag of the experts' matmul inputs (`scratch::matmul` quantizes an input once per
/// tag): a range of its own, counted up by `CudaRunner::expert_tag`, never reused.
pub(super) const EXPERT_TAGS: u64 = 1 << 62;

impl CudaRunner {
    /// `s.o` = the mixture of experts of `s.h` over the call's `m` rows.
    pub(super) fn moe_ffn(&mut self, li: usize, lp: &LayerPlan, m: usize) -> Result<()> {
        let (gpu, model) = (self.gpu.clone(), self.model.clone());
        let d = model.config.d_model;
        let cfg = lp
            .moe
            .as_ref()
            .ok_or_else(|| CudaError::Usage("moe_ffn on a dense layer".into()))?;
        let (e, k, f) = (cfg.experts, cfg.used, cfg.expert_ffn);
        let DevFfn::Moe(x) = &self.w.layers[li].ffn else {
            return Err(CudaError::Usage("moe_ffn without experts".into()));
        };
        let s = &mut self.s;
        let ms = s
            .moe
            .as_mut()
            .ok_or_else(|| CudaError::Usage("no expert buffers".into()))?;
        // The router reads ffn_norm(x), quantized by that norm under tag t + 3.
        matmul(
            &gpu,
            &x.router,
            &s.h,
            self.layer_tag + 3,
            m,
            &mut s.acts,
            &mut ms.scores,
        )?;
        if let Some(b) = &x.router_bias {
            gpu.add_bias(&mut ms.scores, b, m, e)?;
        }
        let mut scores = vec![0f32; m * e];
        gpu.stream
            .memcpy_dtoh(&ms.scores.slice(0..m * e), &mut scores)?;
        gpu.sync()?;
        self.prof.mark(&gpu, "router");

        let routing = Routing {
            used: k,
            norm_topk: cfg.norm_topk,
            gating: match cfg.gating {
                tf_models::registry::Gating::Softmax => Gating::Softmax,
                tf_models::registry::Gating::TopKSoftmax => Gating::TopKSoftmax,
            },
        };
        let mut choices: Vec<Choice> = Vec::with_capacity(k);
        let mut users: Vec<Vec<(usize, usize)>> = vec![Vec::new(); e];
        let mut weights = vec![0f32; m * k];
        for r in 0..m {
            route(&scores[r * e..(r + 1) * e], routing, &mut choices);
            if choices.len() != k {
                return Err(CudaError::Usage(format!(
                    "routing chose {} of {k} experts",
                    choices.len()
                )));
            }
            for (rank, c) in choices.iter().enumerate() {
                users[c.expert].push((r, rank));
                weights[r * k + rank] = c.weight;
            }
        }
        // Per used expert: (expert, offset of its indices, rows); gather indices, then scatter.
        let mut idx: Vec<i32> = Vec::with_capacity(2 * m * k);
        let mut runs = Vec::new();
        for (ex, rows) in users.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            runs.push((ex, idx.len(), rows.len()));
            idx.extend(rows.iter().map(|&(r, _)| r as i32));
            idx.extend(rows.iter().map(|&(r, rank)| (r * k + rank) as i32));
        }
        gpu.stream.memcpy_htod(&idx, &mut ms.idx)?;
        gpu.stream.memcpy_htod(&weights, &mut ms.w)?;

        let act = Glu::of(lp.mlp);
        let mut tag = self.expert_tag;
        for (ex, at, n) in runs {
            let w = &x.experts[ex];
            gpu.gather_rows(&s.h, &ms.idx.slice(at..at + n), n, d, &mut ms.xe)?;
            tag += 2;
            matmul(&gpu, &w.gate, &ms.xe, tag, n, &mut s.acts, &mut ms.g)?;
            matmul(&gpu, &w.up, &ms.xe, tag, n, &mut s.acts, &mut ms.u)?;
            if let Some([bg, bu, _]) = &w.biases {
                gpu.add_bias(&mut ms.g, bg, n, f)?;
                gpu.add_bias(&mut ms.u, bu, n, f)?;
            }
            gpu.glu(act, &ms.g, &ms.u, n * f, &mut ms.a)?;
            matmul(&gpu, &w.down, &ms.a, tag + 1, n, &mut s.acts, &mut ms.y)?;
            if let Some([_, _, bd]) = &w.biases {
                gpu.add_bias(&mut ms.y, bd, n, d)?;
            }
            let to = ms.idx.slice(at + n..at + 2 * n);
            gpu.scatter_rows(&ms.y, &to, n, d, &mut ms.ys)?;
        }
        self.expert_tag = tag + 2;
        self.prof.mark(&gpu, "experts");
        gpu.moe_combine(&ms.ys, &ms.w, m, k, d, &mut s.o)?;
        self.prof.mark(&gpu, "combine");
        Ok(())
    }
}
