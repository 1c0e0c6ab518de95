//! The CPU backend of the forward: [`LayerOps`] over host buffers, walked by
//! [`walk`](crate::plan::walk) in the plan's order, then the output head. Each op is row-exact,
//! so a row's logits are the same whatever else is in the call.

use crate::error::{ModelError, Result};
use crate::experts::moe_ffn;
use crate::model::{Model, Row};
use crate::plan::{walk, DeltaMixer, LayerOps, LayerPlan, MambaMixer, Mixer, Plan};
use crate::recurrent::StateCache;
use crate::weights::{with_panel, Attention, Ffn, Panels};
use tf_kernels::attention::{attention, AttnShape, RowKeys};
use tf_kernels::kv::KvCache;
use tf_kernels::matmul::{matmul, matmul_cols, Activations};
use tf_kernels::ops::{rms_norm, rms_norm_heads};
use tf_kernels::ThreadPool;

fn norm_rows(model: &Model, x: &[f32], w: &[f32], out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rms_norm(model.level, xr, w, model.config.norm_eps, or);
    }
}

/// Each row of `x` (`w.len()` values) RMS-normed by `w`, in place.
fn norm_in_place(model: &Model, x: &mut [f32], w: &[f32]) {
    let mut out = vec![0f32; w.len()];
    for row in x.chunks_exact_mut(w.len()) {
        rms_norm(model.level, row, w, model.config.norm_eps, &mut out);
        row.copy_from_slice(&out);
    }
}

/// `cap * tanh(x / cap)` on every value (a pruned head's -inf stays -inf).
fn soft_cap(x: &mut [f32], cap: Option<f32>) {
    if let Some(cap) = cap {
        for v in x.iter_mut().filter(|v| v.is_finite()) {
            *v = cap * tf_kernels::canon::tanh(*v / cap);
        }
    }
}

fn add_bias(x: &mut [f32], bias: &Option<Vec<f32>>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            for (v, bb) in row.iter_mut().zip(b) {
                *v += bb;
            }
        }
    }
}

/// One forward call on the CPU: the rows, the cache, and the host buffers the ops share.
pub(crate) struct CpuPass<'a> {
    pub(crate) model: &'a Model,
    pub(crate) pool: &'a ThreadPool,
    pub(crate) rows: &'a [Row<'a>],
    kv: &'a mut KvCache,
    /// Recurrent layers' states (a model with Gated DeltaNet layers).
    pub(crate) states: Option<&'a mut StateCache>,
    pub(crate) panels: &'a Panels,
    /// Every row's keys from position 0 (full-attention layers).
    full_keys: Vec<RowKeys<'a>>,
    pub(crate) x: Vec<f32>,
    pub(crate) h: Vec<f32>,
    q: Vec<f32>,
    /// Each head's query then its gate (gated attention), and the gates.
    qg: Vec<f32>,
    gates: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    pub(crate) o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
}

/// Each row's keys, from the first its window lets it see.
fn row_keys<'a>(rows: &'a [Row<'a>], window: Option<usize>) -> Vec<RowKeys<'a>> {
    rows.iter()
        .map(|r| RowKeys {
            table: r.table,
            first: window.map_or(0, |w| (r.pos + 1).saturating_sub(w)),
            n_keys: r.pos + 1,
            remap: r.tree.map(|t| t.remap),
        })
        .collect()
}

impl<'a> CpuPass<'a> {
    /// A pass over `rows` with its buffers.
    fn new(
        model: &'a Model,
        pool: &'a ThreadPool,
        rows: &'a [Row<'a>],
        kv: &'a mut KvCache,
        states: Option<&'a mut StateCache>,
    ) -> CpuPass<'a> {
        let cfg = &model.config;
        let m = rows.len();
        // A mixture of experts keeps its own buffers (per expert).
        let f = if cfg.moe.is_some() { 0 } else { cfg.ffn_dim };
        let (d, qd, kvd) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim());
        let gated = model.plan.layers.iter().any(|l| l.attn_gate);
        let g = if gated { m * qd } else { 0 };
        CpuPass {
            model,
            pool,
            rows,
            kv,
            states,
            panels: model.panels(),
            full_keys: row_keys(rows, None),
            x: vec![0f32; m * d],
            h: vec![0f32; m * d],
            q: vec![0f32; m * qd],
            qg: vec![0f32; 2 * g],
            gates: vec![0f32; g],
            k: vec![0f32; m * kvd],
            v: vec![0f32; m * kvd],
            att: vec![0f32; m * qd],
            o: vec![0f32; m * d],
            gate: vec![0f32; m * f],
            up: vec![0f32; m * f],
            act: vec![0f32; m * f],
        }
    }
}

/// The attention weights of an attention layer (the plan and the weights bind them together).
fn attn_of<'w>(lw: &'w crate::weights::LayerWeights<'w>) -> &'w Attention<'w> {
    lw.attention()
        .expect("the plan's attention layers have attention weights")
}

/// The layer's index in the KV cache.
fn kv_of(lp: &LayerPlan) -> usize {
    match lp.mixer {
        Mixer::Attention { kv } => kv,
        _ => unreachable!("only attention layers have keys"),
    }
}

impl CpuPass<'_> {
    /// `x += post_norm(o)` where the layer has a post norm, else `x += o`.
    pub(crate) fn add_residual(&mut self, post: &Option<Vec<f32>>) {
        let o: &[f32] = match post {
            Some(w) => {
                norm_rows(self.model, &self.o, w, &mut self.h);
                &self.h
            }
            None => &self.o,
        };
        for (xv, ov) in self.x.iter_mut().zip(o) {
            *xv += ov;
        }
    }
}

impl LayerOps for CpuPass<'_> {
    type Error = ModelError;

    fn embed(&mut self, plan: &Plan) -> Result<()> {
        let w = &self.model.weights;
        let d = self.model.config.d_model;
        for (r, row) in self.rows.iter().enumerate() {
            let bytes = w
                .embed
                .row(row.token as usize)
                .expect("token checked against vocab");
            let xr = &mut self.x[r * d..(r + 1) * d];
            tf_weights::dequantize_row(w.embed.dtype, bytes, xr);
            if let Some(scale) = plan.embed_scale {
                xr.iter_mut().for_each(|v| *v *= scale);
            }
        }
        if let Some(first) = w.layers.first() {
            norm_rows(self.model, &self.x, &first.attn_norm, &mut self.h);
        }
        Ok(())
    }

    fn qkv(&mut self, layer: usize, lp: &LayerPlan) -> Result<()> {
        let (model, pool) = (self.model, self.pool);
        let cfg = &model.config;
        let (level, m) = (model.level, self.rows.len());
        let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
        let lw = attn_of(&model.weights.layers[layer]);
        let pk = &self.panels.layers[layer];
        let hx = Activations::new(level, &self.h, m, cfg.d_model);
        if lp.attn_gate {
            // Per head: its query, then its gate.
            let hd = cfg.head_dim;
            matmul(pool, &with_panel(&lw.wq, pk.first()), &hx, &mut self.qg);
            for (r, two) in self.qg.chunks_exact(2 * qd).enumerate() {
                for (hh, pair) in two.chunks_exact(2 * hd).enumerate() {
                    let at = r * qd + hh * hd;
                    self.q[at..at + hd].copy_from_slice(&pair[..hd]);
                    self.gates[at..at + hd].copy_from_slice(&pair[hd..]);
                }
            }
        } else {
            matmul(pool, &with_panel(&lw.wq, pk.first()), &hx, &mut self.q);
        }
        matmul(pool, &with_panel(&lw.wk, pk.get(1)), &hx, &mut self.k);
        matmul(pool, &with_panel(&lw.wv, pk.get(2)), &hx, &mut self.v);
        add_bias(&mut self.q, &lw.bq);
        add_bias(&mut self.k, &lw.bk);
        add_bias(&mut self.v, &lw.bv);
        if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
            if lp.qk_norm_full {
                norm_in_place(model, &mut self.q, qn);
                norm_in_place(model, &mut self.k, kn);
            } else {
                rms_norm_heads(level, &mut self.q, qn, cfg.norm_eps);
                rms_norm_heads(level, &mut self.k, kn, cfg.norm_eps);
            }
        }
        let rope = &model.ropes[lp.rope];
        let style = model.plan.ropes[lp.rope].style;
        for (r, row) in self.rows.iter().enumerate() {
            let (q, k, v) = (
                &mut self.q[r * qd..(r + 1) * qd],
                &mut self.k[r * kvd..(r + 1) * kvd],
                &self.v[r * kvd..(r + 1) * kvd],
            );
            rope.apply(q, cfg.head_dim, row.pos, style);
            rope.apply(k, cfg.head_dim, row.pos, style);
            self.kv.write(kv_of(lp), row.table, row.slot(), k, v);
        }
        Ok(())
    }

    fn attention(&mut self, layer: usize, lp: &LayerPlan) -> Result<()> {
        let cfg = &self.model.config;
        let lw = attn_of(&self.model.weights.layers[layer]);
        let shape = AttnShape {
            softcap: lp.attn_softcap,
            sinks: lw.sinks.as_deref(),
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            scale: lp.attn_scale,
        };
        let windowed;
        let keys = match lp.window {
            None => &self.full_keys,
            Some(_) => {
                windowed = row_keys(self.rows, lp.window);
                &windowed
            }
        };
        let (pool, level) = (self.pool, self.model.level);
        attention(
            pool,
            level,
            &shape,
            &self.q,
            keys,
            self.kv.layer(kv_of(lp)),
            &mut self.att,
        );
        Ok(())
    }

    fn attn_out(&mut self, layer: usize, lp: &LayerPlan) -> Result<()> {
        let model = self.model;
        let cfg = &model.config;
        let layer_w = &model.weights.layers[layer];
        let lw = attn_of(layer_w);
        if lp.attn_gate {
            for (a, &g) in self.att.iter_mut().zip(&self.gates) {
                *a *= tf_kernels::canon::sigmoid(g);
            }
        }
        let ax = Activations::new(model.level, &self.att, self.rows.len(), cfg.q_dim());
        let wo = with_panel(&lw.wo, self.panels.layers[layer].get(3));
        matmul(self.pool, &wo, &ax, &mut self.o);
        add_bias(&mut self.o, &lw.bo);
        self.add_residual(&layer_w.post_attn_norm);
        norm_rows(model, &self.x, &layer_w.ffn_norm, &mut self.h);
        Ok(())
    }

    fn delta_net(&mut self, layer: usize, dn: &DeltaMixer) -> Result<()> {
        self.delta_layer(layer, dn)
    }

    fn mamba(&mut self, layer: usize, m: &MambaMixer) -> Result<()> {
        self.mamba_layer(layer, m)
    }

    fn mlp(&mut self, layer: usize, lp: &LayerPlan, last: bool) -> Result<()> {
        let (model, pool) = (self.model, self.pool);
        let cfg = &model.config;
        let (level, m) = (model.level, self.rows.len());
        let lw = &model.weights.layers[layer];
        let pk = (self.panels.layers[layer].get(lw.ffn_panels()..)).unwrap_or(&[]);
        match (&lw.ffn, &lp.moe) {
            (Ffn::Moe(x), Some(moe)) => {
                moe_ffn(pool, level, x, pk, moe, lp.mlp, &self.h, &mut self.o)
            }
            (Ffn::Dense(w), _) => {
                let hx = Activations::new(level, &self.h, m, cfg.d_model);
                matmul(pool, &with_panel(&w.gate, pk.first()), &hx, &mut self.gate);
                matmul(pool, &with_panel(&w.up, pk.get(1)), &hx, &mut self.up);
                lp.mlp.apply(level, &self.gate, &self.up, &mut self.act);
                let fx = Activations::new(level, &self.act, m, cfg.ffn_dim);
                matmul(pool, &with_panel(&w.down, pk.get(2)), &fx, &mut self.o);
            }
            (Ffn::Plain { up, down }, _) => {
                let hx = Activations::new(level, &self.h, m, cfg.d_model);
                let f = up.n;
                matmul(
                    pool,
                    &with_panel(up, pk.first()),
                    &hx,
                    &mut self.gate[..m * f],
                );
                let (g, a) = (&self.gate[..m * f], &mut self.act[..m * f]);
                lp.mlp.apply(level, g, g, a);
                let fx = Activations::new(level, &self.act[..m * f], m, f);
                matmul(pool, &with_panel(down, pk.get(1)), &fx, &mut self.o);
            }
            (Ffn::Moe(_), None) | (Ffn::None, _) => {
                unreachable!("the plan follows the config the weights bound")
            }
        }
        self.add_residual(&lw.post_ffn_norm);
        if !last {
            let next = &model.weights.layers[layer + 1];
            norm_rows(model, &self.x, &next.attn_norm, &mut self.h);
        }
        Ok(())
    }
}

impl Model {
    /// Runs the model over `rows` (of one or several sequences), writing each row's key and value
    /// into `kv` before attention. Returns the logits of the rows with `logits: true`, in order,
    /// `vocab` values each.
    pub fn forward(&self, pool: &ThreadPool, rows: &[Row], kv: &mut KvCache) -> Result<Vec<f32>> {
        self.forward_head(pool, rows, kv, None)
    }

    /// [`forward`](Model::forward) computing only the output-head columns in `head` (ranges of
    /// token ids); every other logit is -inf, so no sampler can draw it. A pruned head is for
    /// draft models (whose guesses only change speed): it reads a fraction of the head's bytes.
    pub fn forward_head(
        &self,
        pool: &ThreadPool,
        rows: &[Row],
        kv: &mut KvCache,
        head: Option<&[std::ops::Range<usize>]>,
    ) -> Result<Vec<f32>> {
        self.forward_states(pool, rows, kv, None, head)
    }

    /// [`forward_head`](Model::forward_head) with the recurrent layers' states (required
    /// for a model that has them; see [`Model::state_cache`]).
    pub fn forward_states(
        &self,
        pool: &ThreadPool,
        rows: &[Row],
        kv: &mut KvCache,
        states: Option<&mut StateCache>,
        head: Option<&[std::ops::Range<usize>]>,
    ) -> Result<Vec<f32>> {
        self.forward_hidden(pool, rows, kv, states, head, None)
    }

    /// [`forward_states`](Model::forward_states) that also leaves in `hidden` every row's final
    /// hidden state (after the output norm), `d_model` values a row: what a multi-token-
    /// prediction head reads ([`forward_mtp`](Model::forward_mtp)).
    pub fn forward_hidden(
        &self,
        pool: &ThreadPool,
        rows: &[Row],
        kv: &mut KvCache,
        mut states: Option<&mut StateCache>,
        head: Option<&[std::ops::Range<usize>]>,
        hidden: Option<&mut Vec<f32>>,
    ) -> Result<Vec<f32>> {
        for r in rows {
            self.check_row(r)?;
        }
        match states.as_deref_mut() {
            Some(st) => st.begin(rows)?,
            None if self.plan.has_recurrent() => return Err(ModelError::NoStateCache),
            None => {}
        }
        let mut pass = CpuPass::new(self, pool, rows, kv, states);
        let walked = walk(&self.plan, &mut pass);
        if let Some(st) = pass.states.as_deref_mut() {
            match walked {
                Ok(()) => st.end(),
                Err(_) => st.abort(),
            }
        }
        walked?;
        if let Some(out) = hidden {
            out.clear();
            out.resize(pass.x.len(), 0.0);
            norm_rows(self, &pass.x, &self.weights.norm, out);
        }
        Ok(self.output_head(pool, rows, &pass.x, pass.panels, head))
    }

    /// The multi-token-prediction head over `rows` (each a token at its position), each with
    /// `hidden` (`d_model` values a row) the model's final hidden state at the position before
    /// it, as [`forward_hidden`](Model::forward_hidden) leaves it (or the head's own from its
    /// previous row, for a chain of guesses). Keys and values go to `kv`, a one-layer cache.
    /// Returns the logits of the rows that want them (only the columns in `head` where given,
    /// as [`forward_head`](Model::forward_head) does) and every row's output hidden state (the
    /// input of the next guess).
    pub fn forward_mtp(
        &self,
        pool: &ThreadPool,
        rows: &[Row],
        hidden: &[f32],
        kv: &mut KvCache,
        head: Option<&[std::ops::Range<usize>]>,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let (Some(mw), Some(lp)) = (&self.weights.mtp, &self.plan.mtp) else {
            return Err(ModelError::NoMtp);
        };
        for r in rows {
            self.check_row(r)?;
        }
        let (d, m, level) = (self.config.d_model, rows.len(), self.level);
        assert_eq!(hidden.len(), m * d, "one hidden state a row");
        let mut cat = vec![0f32; m * 2 * d];
        let mut e = vec![0f32; d];
        for (r, row) in rows.iter().enumerate() {
            let bytes = (self.weights.embed.row(row.token as usize)).expect("token checked");
            tf_weights::dequantize_row(self.weights.embed.dtype, bytes, &mut e);
            let (ce, ch) = cat[r * 2 * d..(r + 1) * 2 * d].split_at_mut(d);
            rms_norm(level, &e, &mw.enorm, self.config.norm_eps, ce);
            rms_norm(
                level,
                &hidden[r * d..(r + 1) * d],
                &mw.hnorm,
                self.config.norm_eps,
                ch,
            );
        }
        let layer = self.plan.layers.len();
        let mut pass = CpuPass::new(self, pool, rows, kv, None);
        let cx = Activations::new(level, &cat, m, 2 * d);
        matmul(pool, &mw.eh_proj, &cx, &mut pass.x);
        norm_rows(
            self,
            &pass.x,
            &self.weights.layers[layer].attn_norm,
            &mut pass.h,
        );
        pass.qkv(layer, lp)?;
        pass.attention(layer, lp)?;
        pass.attn_out(layer, lp)?;
        pass.mlp(layer, lp, true)?;
        let mut out = vec![0f32; m * d];
        norm_rows(self, &pass.x, &mw.head_norm, &mut out);
        let want: Vec<usize> = (0..m).filter(|&r| rows[r].logits).collect();
        let mut hs = Vec::with_capacity(want.len() * d);
        for &r in &want {
            hs.extend_from_slice(&out[r * d..(r + 1) * d]);
        }
        let out_w = match &mw.head {
            Some(h) => *h,
            None => with_panel(&self.weights.output, Some(&pass.panels.output)),
        };
        let logits = match want.is_empty() {
            true => Vec::new(),
            false => self.head_logits(pool, &out_w, &hs, head),
        };
        Ok((logits, out))
    }

    /// Final norm and output head over the rows that want logits, then the plan's soft-cap.
    fn output_head(
        &self,
        pool: &ThreadPool,
        rows: &[Row],
        x: &[f32],
        panels: &Panels,
        head: Option<&[std::ops::Range<usize>]>,
    ) -> Vec<f32> {
        let d = self.config.d_model;
        let want: Vec<usize> = (0..rows.len()).filter(|&r| rows[r].logits).collect();
        if want.is_empty() {
            return Vec::new();
        }
        let mut xs = Vec::with_capacity(want.len() * d);
        for &r in &want {
            xs.extend_from_slice(&x[r * d..(r + 1) * d]);
        }
        let mut hs = vec![0f32; xs.len()];
        norm_rows(self, &xs, &self.weights.norm, &mut hs);
        let out_w = with_panel(&self.weights.output, Some(&panels.output));
        self.head_logits(pool, &out_w, &hs, head)
    }

    /// The logits of the normed rows `hs` through `out_w` (only the columns in `head`, the
    /// rest -inf, where given), then the plan's soft-cap.
    fn head_logits(
        &self,
        pool: &ThreadPool,
        out_w: &tf_kernels::matmul::WeightMatrix,
        hs: &[f32],
        head: Option<&[std::ops::Range<usize>]>,
    ) -> Vec<f32> {
        let (d, vocab) = (self.config.d_model, self.config.vocab);
        let m = hs.len() / d;
        let hx = Activations::new(self.level, hs, m, d);
        let mut logits = match head {
            None => {
                let mut logits = vec![0f32; m * vocab];
                matmul(pool, out_w, &hx, &mut logits);
                logits
            }
            Some(ranges) => {
                let mut logits = vec![f32::NEG_INFINITY; m * vocab];
                for r in ranges {
                    let r = r.start.min(vocab)..r.end.min(vocab);
                    if !r.is_empty() {
                        let out = &mut logits[r.start..];
                        matmul_cols(pool, out_w, &hx, out, r, vocab);
                    }
                }
                logits
            }
        };
        soft_cap(&mut logits, self.plan.final_softcap);
        logits
    }
}
