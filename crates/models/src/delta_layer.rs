//! The CPU's Gated DeltaNet layer (Qwen3.5, Qwen3-Next): the projections over every row of the
//! call (row-exact matmuls), then per sequence, in position order, the short convolution, the
//! q/k L2 norms, the gates and the delta rule on that sequence's state (`recurrent.rs` says
//! which state each row runs on), then the gated norm and the output projection over every row.
//! A guess logs its inputs; a replay runs the same steps on them.

use crate::error::Result;
use crate::plan::DeltaMixer;
use crate::recurrent::{From, RowPlan};
use crate::transformer::CpuPass;
use crate::weights::{with_panel, DeltaWeights, MixerWeights};
use tf_kernels::deltanet::{delta_rule, gated_rms_norm, gates_at_rate, l2_normalize, short_conv};
use tf_kernels::matmul::{matmul, Activations};
use tf_kernels::ThreadPool;

/// The L2 norm's epsilon of q and k (transformers' and the fla kernels' fixed value).
const L2_EPS: f32 = 1e-6;

/// One sequence's rows (`n` of them) through a layer's recurrence, from `state` (this layer's
/// convolution inputs, then its delta-rule matrices), which ends after the last row. `raw` is
/// the projected channels before the convolution (`n x channels`), `gates` each row's `a` then
/// `b` (`n x 2 v_heads`); `out` gets the delta rule's output (`n x v_heads * dv`).
fn chain(
    pool: &ThreadPool,
    w: &DeltaWeights,
    dn: &DeltaMixer,
    state: &mut [f32],
    raw: &[f32],
    gates: &[f32],
    out: &mut [f32],
) {
    let s = dn.shape;
    let kw = s.k_heads * s.dk;
    let ch = 2 * kw + s.v_heads * s.dv;
    let n = raw.len() / ch;
    let (conv_state, delta) = state.split_at_mut((dn.kernel - 1) * ch);
    let mut x = vec![0f32; n * ch];
    short_conv(&w.conv, dn.kernel, conv_state, raw, &mut x);
    let (mut q, mut k, mut v) = (
        Vec::with_capacity(n * kw),
        Vec::with_capacity(n * kw),
        Vec::with_capacity(n * (ch - 2 * kw)),
    );
    for row in x.chunks_exact(ch) {
        q.extend_from_slice(&row[..kw]);
        k.extend_from_slice(&row[kw..2 * kw]);
        v.extend_from_slice(&row[2 * kw..]);
    }
    let scale = 1.0 / (s.dk as f32).sqrt();
    for head in q.chunks_exact_mut(s.dk) {
        l2_normalize(head, L2_EPS);
        head.iter_mut().for_each(|e| *e *= scale);
    }
    for head in k.chunks_exact_mut(s.dk) {
        l2_normalize(head, L2_EPS);
    }
    let hv = s.v_heads;
    let (mut g, mut beta) = (vec![0f32; n * hv], vec![0f32; n * hv]);
    for t in 0..n {
        let (a, b) = gates[t * 2 * hv..(t + 1) * 2 * hv].split_at(hv);
        let r = t * hv..(t + 1) * hv;
        gates_at_rate(&w.rate, &w.dt_bias, a, b, &mut g[r.clone()], &mut beta[r]);
    }
    delta_rule(pool, &s, &q, &k, &v, &g, &beta, delta, out);
}

/// A recurrent layer's steps over one sequence's run of rows: `(state, raw, gates, out)`.
pub(crate) type Chain<'c> = dyn Fn(&mut [f32], &[f32], &[f32], &mut [f32]) + 'c;

impl CpuPass<'_> {
    /// The call's rows through recurrent layer `index`'s per-sequence part: accepted guesses of
    /// earlier calls replayed into the committed state, then runs of rows that continue one
    /// state, each through `chain(state, raw, gates, out)` (`raw`: `ch` channels a row, `gates`:
    /// `ng` a row, `out`: `ow` a row); guesses' inputs logged, snapshots taken.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn recurrent_rows(
        &mut self,
        index: usize,
        (raw, ch): (&[f32], usize),
        (gates, ng): (&[f32], usize),
        (out, ow): (&mut [f32], usize),
        chain: &Chain,
    ) {
        let m = self.rows.len();
        let states = (self.states.as_deref_mut()).expect("checked before the walk");
        let mut call = states.call.take().expect("begun before the walk");
        let part = states.part(index).clone();
        let span = part.conv.start..part.delta.end;
        let state_len = states.state_len();
        let mut scratch = vec![0f32; ow];
        for sp in &call.seqs {
            for (entry, snap) in &sp.replay {
                let (committed, _) = states.states(sp.id);
                let e = &entry[part.log.clone()];
                chain(
                    &mut committed[span.clone()],
                    &e[..ch],
                    &e[ch..],
                    &mut scratch,
                );
                if let Some(blk) = snap {
                    let kept = call
                        .snaps
                        .entry(*blk)
                        .or_insert_with(|| vec![0.0; state_len]);
                    kept[span.clone()].copy_from_slice(&committed[span.clone()]);
                }
            }
        }
        let mut r = 0;
        while r < m {
            let (si, from) = (call.rows[r].seq, call.rows[r].from);
            let id = call.seqs[si].id;
            let mut e = r + 1;
            let continues = |x: &RowPlan, before: &RowPlan| {
                x.seq == si
                    && match from {
                        From::Committed => x.from == From::Committed && before.snap.is_none(),
                        From::Fresh | From::Previous => x.from == From::Previous,
                    }
            };
            while e < m && continues(&call.rows[e], &call.rows[e - 1]) {
                e += 1;
            }
            let (committed, work) = states.states(id);
            let st = match from {
                From::Committed => &mut committed[span.clone()],
                From::Fresh => {
                    work[span.clone()].copy_from_slice(&committed[span.clone()]);
                    &mut work[span.clone()]
                }
                From::Previous => &mut work[span.clone()],
            };
            let rows_out = &mut out[r * ow..e * ow];
            chain(st, &raw[r * ch..e * ch], &gates[r * ng..e * ng], rows_out);
            if let (From::Committed, Some(blk)) = (from, call.rows[e - 1].snap) {
                let kept = call
                    .snaps
                    .entry(blk)
                    .or_insert_with(|| vec![0.0; state_len]);
                kept[span.clone()].copy_from_slice(st);
            }
            if from != From::Committed {
                for t in r..e {
                    let entry = states.log_entry(id, self.rows[t].slot());
                    let dst = &mut entry[part.log.clone()];
                    dst[..ch].copy_from_slice(&raw[t * ch..(t + 1) * ch]);
                    dst[ch..].copy_from_slice(&gates[t * ng..(t + 1) * ng]);
                }
            }
            r = e;
        }
        states.call = Some(call);
    }

    pub(crate) fn delta_layer(&mut self, layer: usize, dn: &DeltaMixer) -> Result<()> {
        let (model, pool) = (self.model, self.pool);
        let cfg = &model.config;
        let (level, m, d) = (model.level, self.rows.len(), cfg.d_model);
        let lw = &model.weights.layers[layer];
        let MixerWeights::DeltaNet(w) = &lw.mixer else {
            unreachable!("the plan's recurrent layers have DeltaNet weights")
        };
        let s = dn.shape;
        let (hv, vw) = (s.v_heads, s.v_heads * s.dv);
        let ch = 2 * s.k_heads * s.dk + vw;
        let pk = &self.panels.layers[layer];
        let hx = Activations::new(level, &self.h, m, d);
        let (mut raw, mut z) = (vec![0f32; m * ch], vec![0f32; m * vw]);
        let (mut a, mut b) = (vec![0f32; m * hv], vec![0f32; m * hv]);
        matmul(pool, &with_panel(&w.qkv, pk.first()), &hx, &mut raw);
        matmul(pool, &with_panel(&w.z, pk.get(1)), &hx, &mut z);
        matmul(pool, &with_panel(&w.b, pk.get(2)), &hx, &mut b);
        matmul(pool, &with_panel(&w.a, pk.get(3)), &hx, &mut a);
        // Each row's gate inputs: `a`, then `b`.
        let mut gates = Vec::with_capacity(m * 2 * hv);
        for (ra, rb) in a.chunks_exact(hv).zip(b.chunks_exact(hv)) {
            gates.extend_from_slice(ra);
            gates.extend_from_slice(rb);
        }
        let mut o = vec![0f32; m * vw];
        let run = |st: &mut [f32], raw: &[f32], g: &[f32], out: &mut [f32]| {
            chain(pool, w, dn, st, raw, g, out)
        };
        self.recurrent_rows(dn.state, (&raw, ch), (&gates, 2 * hv), (&mut o, vw), &run);
        for (oh, zh) in o.chunks_exact_mut(s.dv).zip(z.chunks_exact(s.dv)) {
            gated_rms_norm(oh, zh, &w.norm, cfg.norm_eps);
        }
        let ox = Activations::new(level, &o, m, vw);
        matmul(pool, &with_panel(&w.out, pk.get(4)), &ox, &mut self.o);
        self.finish_mixer(layer);
        Ok(())
    }

    /// `x += post_norm(o)`; `h = ffn_norm(x)` (a recurrent layer's end, as `attn_out`'s).
    pub(crate) fn finish_mixer(&mut self, layer: usize) {
        let model = self.model;
        let lw = &model.weights.layers[layer];
        self.add_residual(&lw.post_attn_norm);
        let (d, eps, level) = (model.config.d_model, model.config.norm_eps, model.level);
        let (x, h) = (&self.x, &mut self.h);
        for (xr, hr) in x.chunks_exact(d).zip(h.chunks_exact_mut(d)) {
            tf_kernels::ops::rms_norm(level, xr, &lw.ffn_norm, eps, hr);
        }
    }
}
