//! The CPU's Mamba-2 layer (Nemotron-H): the input projection's three parts over every row
//! (row-exact matmuls), then per sequence, in position order, the convolution (with its bias),
//! the time steps and the SSD recurrence on that sequence's state (`recurrent.rs` says which
//! state each row runs on, as for Gated DeltaNet), then the gated group norm and the output
//! projection over every row.

use crate::error::Result;
use crate::plan::MambaMixer;
use crate::transformer::CpuPass;
use crate::weights::{with_panel, MambaWeights, MixerWeights};
use tf_kernels::deltanet::short_conv_bias;
use tf_kernels::mamba2::{gated_group_norm, ssd, time_steps};
use tf_kernels::matmul::{matmul, Activations};
use tf_kernels::ThreadPool;

/// One sequence's rows through the layer's recurrence from `state` (the convolution's inputs,
/// then the SSD matrices), which ends after the last row: `raw` the x, B, C channels before the
/// convolution, `dt_raw` each head's step input; `y` gets the heads' outputs.
fn chain(
    pool: &ThreadPool,
    w: &MambaWeights,
    mm: &MambaMixer,
    state: &mut [f32],
    raw: &[f32],
    dt_raw: &[f32],
    y: &mut [f32],
) {
    let s = mm.shape;
    let (inner, gw, ch) = (s.inner(), s.groups * s.state, mm.channels());
    let n = raw.len() / ch;
    let (conv_state, ssm) = state.split_at_mut((mm.kernel - 1) * ch);
    let mut xbc = vec![0f32; n * ch];
    short_conv_bias(
        &w.conv,
        Some(&w.conv_bias),
        mm.kernel,
        conv_state,
        raw,
        &mut xbc,
    );
    let (mut x, mut b, mut c) = (
        Vec::with_capacity(n * inner),
        Vec::with_capacity(n * gw),
        Vec::with_capacity(n * gw),
    );
    for row in xbc.chunks_exact(ch) {
        x.extend_from_slice(&row[..inner]);
        b.extend_from_slice(&row[inner..inner + gw]);
        c.extend_from_slice(&row[inner + gw..]);
    }
    let mut dt = vec![0f32; dt_raw.len()];
    for (o, r) in dt
        .chunks_exact_mut(s.heads)
        .zip(dt_raw.chunks_exact(s.heads))
    {
        time_steps(r, &w.dt_bias, o);
    }
    ssd(pool, &s, &x, &b, &c, &dt, (&w.rate, &w.d), ssm, y);
}

impl CpuPass<'_> {
    pub(crate) fn mamba_layer(&mut self, layer: usize, mm: &MambaMixer) -> Result<()> {
        let (model, pool) = (self.model, self.pool);
        let cfg = &model.config;
        let (level, m, d) = (model.level, self.rows.len(), cfg.d_model);
        let lw = &model.weights.layers[layer];
        let MixerWeights::Mamba(w) = &lw.mixer else {
            unreachable!("the plan's Mamba-2 layers have Mamba-2 weights")
        };
        let s = mm.shape;
        let (inner, ch, heads) = (s.inner(), mm.channels(), s.heads);
        let pk = &self.panels.layers[layer];
        let hx = Activations::new(level, &self.h, m, d);
        let (mut z, mut raw, mut dt) = (
            vec![0f32; m * inner],
            vec![0f32; m * ch],
            vec![0f32; m * heads],
        );
        matmul(pool, &with_panel(&w.z, pk.first()), &hx, &mut z);
        matmul(pool, &with_panel(&w.xbc, pk.get(1)), &hx, &mut raw);
        matmul(pool, &with_panel(&w.dt, pk.get(2)), &hx, &mut dt);
        let mut y = vec![0f32; m * inner];
        let run = |st: &mut [f32], raw: &[f32], g: &[f32], out: &mut [f32]| {
            chain(pool, w, mm, st, raw, g, out)
        };
        self.recurrent_rows(mm.state, (&raw, ch), (&dt, heads), (&mut y, inner), &run);
        for (yr, zr) in y.chunks_exact_mut(inner).zip(z.chunks_exact(inner)) {
            gated_group_norm(yr, zr, &w.norm, s.groups, cfg.norm_eps);
        }
        let yx = Activations::new(level, &y, m, inner);
        matmul(pool, &with_panel(&w.out, pk.get(3)), &yx, &mut self.o);
        self.finish_mixer(layer);
        Ok(())
    }
}
