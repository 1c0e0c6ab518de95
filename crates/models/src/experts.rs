//! The CPU mixture-of-experts feed-forward: route each row, run each expert once over the rows
//! that chose it, combine each row's experts in rank order. Every step is row-exact (the
//! matmuls are, routing and combining read one row), so a row's output is the same bits
//! whatever other rows share the call or share its experts.

use crate::config::MoeConfig;
use crate::registry::{Gating, Mlp};
use crate::weights::{with_panel, Experts};
use tf_kernels::matmul::{matmul, Activations, PackedMatrix};
use tf_kernels::moe::{combine, route, Choice, Routing};
use tf_kernels::{SimdLevel, ThreadPool};

/// `out` (rows x d) = the mixture of experts of `h` (rows x d). `panels`: the layer's panel
/// forms from the router on (router, then each expert's gate, up, down).
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_ffn(
    pool: &ThreadPool,
    level: SimdLevel,
    w: &Experts,
    panels: &[Option<PackedMatrix>],
    moe: &MoeConfig,
    act: Mlp,
    h: &[f32],
    out: &mut [f32],
) {
    let d = w.router.k;
    let m = h.len() / d;
    let (e, k, f) = (moe.experts, moe.used, moe.expert_ffn);
    let hx = Activations::new(level, h, m, d);
    let mut scores = vec![0f32; m * e];
    matmul(
        pool,
        &with_panel(&w.router, panels.first()),
        &hx,
        &mut scores,
    );
    if let Some(b) = &w.router_bias {
        add_rows(&mut scores, b);
    }
    let routing = Routing {
        used: k,
        norm_topk: moe.norm_topk,
        gating: match moe.gating {
            Gating::Softmax => tf_kernels::moe::Gating::Softmax,
            Gating::TopKSoftmax => tf_kernels::moe::Gating::TopKSoftmax,
        },
    };
    // Each row's choices, and each expert's (row, rank) pairs in row order.
    let mut choices: Vec<Vec<Choice>> = vec![Vec::with_capacity(k); m];
    let mut users: Vec<Vec<(usize, usize)>> = vec![Vec::new(); e];
    for (r, c) in choices.iter_mut().enumerate() {
        route(&scores[r * e..(r + 1) * e], routing, c);
        for (rank, ch) in c.iter().enumerate() {
            users[ch.expert].push((r, rank));
        }
    }
    // ys[(r * k + rank) * d..]: row r's output of its rank-th expert.
    let mut ys = vec![0f32; m * k * d];
    let (mut xe, mut g, mut u, mut a, mut y) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (x, rows) in users.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let n = rows.len();
        xe.clear();
        for &(r, _) in rows {
            xe.extend_from_slice(&h[r * d..(r + 1) * d]);
        }
        for buf in [&mut g, &mut u, &mut a] {
            buf.resize(n * f, 0.0);
        }
        y.resize(n * d, 0.0);
        let ex = &w.experts[x];
        let p = |i: usize| panels.get(1 + 3 * x + i);
        let xa = Activations::new(level, &xe, n, d);
        matmul(pool, &with_panel(&ex.gate, p(0)), &xa, &mut g);
        matmul(pool, &with_panel(&ex.up, p(1)), &xa, &mut u);
        if let Some(b) = &w.biases {
            add_rows(&mut g, &b.gate[x * f..(x + 1) * f]);
            add_rows(&mut u, &b.up[x * f..(x + 1) * f]);
        }
        act.apply(level, &g, &u, &mut a);
        let aa = Activations::new(level, &a, n, f);
        matmul(pool, &with_panel(&ex.down, p(2)), &aa, &mut y);
        if let Some(b) = &w.biases {
            add_rows(&mut y, &b.down[x * d..(x + 1) * d]);
        }
        for (j, &(r, rank)) in rows.iter().enumerate() {
            let at = (r * k + rank) * d;
            ys[at..at + d].copy_from_slice(&y[j * d..(j + 1) * d]);
        }
    }
    for (r, c) in choices.iter().enumerate() {
        combine(
            c,
            &ys[r * k * d..(r + 1) * k * d],
            &mut out[r * d..(r + 1) * d],
        );
    }
    // The shared expert, every row's, added after the routed ones times its gate.
    if let Some((sx, gate)) = &w.shared {
        let sf = sx.gate.n;
        let (mut g, mut u, mut a) = (vec![0f32; m * sf], vec![0f32; m * sf], vec![0f32; m * sf]);
        let p = |i: usize| panels.get(1 + 3 * e + i);
        matmul(pool, &with_panel(&sx.gate, p(0)), &hx, &mut g);
        matmul(pool, &with_panel(&sx.up, p(1)), &hx, &mut u);
        act.apply(level, &g, &u, &mut a);
        let mut y = vec![0f32; m * d];
        let aa = Activations::new(level, &a, m, sf);
        matmul(pool, &with_panel(&sx.down, p(2)), &aa, &mut y);
        for r in 0..m {
            let hr = &h[r * d..(r + 1) * d];
            let s = tf_kernels::canon::sigmoid(tf_kernels::canon::dot_ref(hr, gate));
            let or = &mut out[r * d..(r + 1) * d];
            for (o, yv) in or.iter_mut().zip(&y[r * d..(r + 1) * d]) {
                *o += s * yv;
            }
        }
    }
}

/// `bias` added to every row of `x`.
fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}
