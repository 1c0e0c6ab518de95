//! The decoder forward pass of every family: it walks the model's [`Plan`](crate::Plan) layer by
//! layer, over rows of any number of sequences. Each op is row-exact, so a row's logits are the
//! same whatever else is in the call.

use crate::error::Result;
use crate::model::{Model, Row};
use crate::registry::Mlp;
use crate::weights::with_panel;
use tf_kernels::attention::{attention, AttnShape, RowKeys};
use tf_kernels::kv::KvCache;
use tf_kernels::matmul::{matmul, matmul_cols, Activations};
use tf_kernels::ops::{geglu, rms_norm, rms_norm_heads, swiglu};
use tf_kernels::ThreadPool;

fn norm_rows(model: &Model, x: &[f32], w: &[f32], out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rms_norm(model.level, xr, w, model.config.norm_eps, or);
    }
}

/// `x += post_norm(o)` where the layer has a post norm, else `x += o`.
fn add_residual(model: &Model, x: &mut [f32], o: &[f32], post: &Option<Vec<f32>>, h: &mut [f32]) {
    let o: &[f32] = match post {
        Some(w) => {
            norm_rows(model, o, w, h);
            h
        }
        None => o,
    };
    for (xv, ov) in x.iter_mut().zip(o) {
        *xv += ov;
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
        for r in rows {
            self.check_row(r)?;
        }
        let cfg = &self.config;
        let level = self.level;
        let m = rows.len();
        let (d, qd, kvd, f) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let w = &self.weights;
        let panels = self.panels();

        let mut x = vec![0f32; m * d];
        for (r, row) in rows.iter().enumerate() {
            let bytes = w
                .embed
                .row(row.token as usize)
                .expect("token checked against vocab");
            let xr = &mut x[r * d..(r + 1) * d];
            tf_weights::dequantize_row(w.embed.dtype, bytes, xr);
            if let Some(scale) = self.plan.embed_scale {
                xr.iter_mut().for_each(|v| *v *= scale);
            }
        }
        let mut h = vec![0f32; m * d];
        let mut q = vec![0f32; m * qd];
        let mut k = vec![0f32; m * kvd];
        let mut v = vec![0f32; m * kvd];
        let mut att = vec![0f32; m * qd];
        let mut o = vec![0f32; m * d];
        let mut gate = vec![0f32; m * f];
        let mut up = vec![0f32; m * f];
        let mut act = vec![0f32; m * f];
        let keys_for = |window: Option<usize>| -> Vec<RowKeys> {
            rows.iter()
                .map(|r| RowKeys {
                    table: r.table,
                    first: window.map_or(0, |w| (r.pos + 1).saturating_sub(w)),
                    n_keys: r.pos + 1,
                    remap: r.tree.map(|t| t.remap),
                })
                .collect()
        };
        let full_keys = keys_for(None);

        for (li, lw) in w.layers.iter().enumerate() {
            let pk = &panels.layers[li];
            let lp = &self.plan.layers[li];
            let rope = &self.ropes[lp.rope];
            let shape = AttnShape {
                softcap: lp.attn_softcap,
                n_heads: cfg.n_heads,
                n_kv_heads: cfg.n_kv_heads,
                head_dim: cfg.head_dim,
                scale: lp.attn_scale,
            };
            norm_rows(self, &x, &lw.attn_norm, &mut h);
            let hx = Activations::new(level, &h, m, d);
            matmul(pool, &with_panel(&lw.wq, &pk[0]), &hx, &mut q);
            matmul(pool, &with_panel(&lw.wk, &pk[1]), &hx, &mut k);
            matmul(pool, &with_panel(&lw.wv, &pk[2]), &hx, &mut v);
            add_bias(&mut q, &lw.bq);
            add_bias(&mut k, &lw.bk);
            add_bias(&mut v, &lw.bv);
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                rms_norm_heads(level, &mut q, qn, cfg.norm_eps);
                rms_norm_heads(level, &mut k, kn, cfg.norm_eps);
            }
            for (r, row) in rows.iter().enumerate() {
                let style = self.plan.ropes[lp.rope].style;
                rope.apply(&mut q[r * qd..(r + 1) * qd], cfg.head_dim, row.pos, style);
                rope.apply(&mut k[r * kvd..(r + 1) * kvd], cfg.head_dim, row.pos, style);
                kv.write(
                    li,
                    row.table,
                    row.slot(),
                    &k[r * kvd..(r + 1) * kvd],
                    &v[r * kvd..(r + 1) * kvd],
                );
            }
            let windowed;
            let keys = match lp.window {
                None => &full_keys,
                Some(_) => {
                    windowed = keys_for(lp.window);
                    &windowed
                }
            };
            attention(pool, level, &shape, &q, keys, kv.layer(li), &mut att);
            let ax = Activations::new(level, &att, m, qd);
            matmul(pool, &with_panel(&lw.wo, &pk[3]), &ax, &mut o);
            add_residual(self, &mut x, &o, &lw.post_attn_norm, &mut h);

            norm_rows(self, &x, &lw.ffn_norm, &mut h);
            let hx = Activations::new(level, &h, m, d);
            matmul(pool, &with_panel(&lw.w_gate, &pk[4]), &hx, &mut gate);
            matmul(pool, &with_panel(&lw.w_up, &pk[5]), &hx, &mut up);
            match lp.mlp {
                Mlp::SwiGlu => swiglu(level, &gate, &up, &mut act),
                Mlp::GeGlu => geglu(level, &gate, &up, &mut act),
            }
            let fx = Activations::new(level, &act, m, f);
            matmul(pool, &with_panel(&lw.w_down, &pk[6]), &fx, &mut o);
            add_residual(self, &mut x, &o, &lw.post_ffn_norm, &mut h);
        }

        let want: Vec<usize> = (0..m).filter(|&r| rows[r].logits).collect();
        if want.is_empty() {
            return Ok(Vec::new());
        }
        let mut xs = Vec::with_capacity(want.len() * d);
        for &r in &want {
            xs.extend_from_slice(&x[r * d..(r + 1) * d]);
        }
        let mut hs = vec![0f32; xs.len()];
        norm_rows(self, &xs, &w.norm, &mut hs);
        let hx = Activations::new(level, &hs, want.len(), d);
        let out_w = with_panel(&w.output, &panels.output);
        let logits = match head {
            None => {
                let mut logits = vec![0f32; want.len() * cfg.vocab];
                matmul(pool, &out_w, &hx, &mut logits);
                logits
            }
            Some(ranges) => {
                let mut logits = vec![f32::NEG_INFINITY; want.len() * cfg.vocab];
                for r in ranges {
                    let r = r.start.min(cfg.vocab)..r.end.min(cfg.vocab);
                    if !r.is_empty() {
                        let out = &mut logits[r.start..];
                        matmul_cols(pool, &out_w, &hx, out, r, cfg.vocab);
                    }
                }
                logits
            }
        };
        let mut logits = logits;
        soft_cap(&mut logits, self.plan.final_softcap);
        Ok(logits)
    }
}
