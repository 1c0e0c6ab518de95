//! The layer plan: a model's decoder as data. A family's config reading produces a
//! [`ModelConfig`]; [`Plan::new`] turns it into what the forward walks, layer by layer, so a new
//! family is a descriptor (`families/<name>/`) and, at most, a new op — never a new forward.
//! [`walk`] is the forward: it calls a backend's [`LayerOps`] in the plan's order, so the CPU
//! and the CUDA backend run one forward with their own kernels. A backend checks the plan at
//! load and refuses a model whose ops it lacks ([`Plan::features`]).

use crate::config::{ModelConfig, MoeConfig};
use crate::registry::Mlp;
use tf_kernels::deltanet::DeltaShape;
use tf_kernels::mamba2::SsdShape;
use tf_kernels::ops::{RopeStyle, RopeTable};

/// What mixes a layer's positions: attention over the KV cache, or a recurrent layer.
#[derive(Clone, Debug, PartialEq)]
pub enum Mixer {
    /// Attention; its keys and values are layer `kv` of the KV cache.
    Attention { kv: usize },
    /// Gated DeltaNet; its state is recurrent layer `state` of the state cache.
    DeltaNet(DeltaMixer),
    /// Mamba-2; its state is recurrent layer `state` of the state cache.
    Mamba(MambaMixer),
    /// No mixer: the layer is its feed-forward alone (Nemotron-H's MLP blocks).
    None,
}

/// A Mamba-2 layer's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct MambaMixer {
    pub shape: SsdShape,
    /// Taps of the short convolution.
    pub kernel: usize,
    /// Index among the model's recurrent layers.
    pub state: usize,
}

impl MambaMixer {
    /// Channels of the convolution: x, B and C.
    pub fn channels(&self) -> usize {
        self.shape.inner() + 2 * self.shape.groups * self.shape.state
    }
}

/// A Gated DeltaNet layer's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaMixer {
    pub shape: DeltaShape,
    /// Taps of the short convolution.
    pub kernel: usize,
    /// Index among the model's recurrent layers.
    pub state: usize,
}

/// One rotary embedding of the model (global layers, and the sliding layers where they differ).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    /// Rotated dimensions of each head (the rest pass through).
    pub dim: usize,
    pub base: f32,
    pub style: RopeStyle,
    /// Divisor of each rotary pair's frequency (empty: none).
    pub factors: Vec<f64>,
    /// cos and sin are multiplied by this (YaRN's attention factor; 1 otherwise).
    pub mscale: f64,
}

impl RopeSpec {
    pub fn table(&self, max_pos: usize) -> RopeTable {
        RopeTable::with_factors(self.dim, self.base, &self.factors, max_pos).scaled(self.mscale)
    }
}

/// One decoder layer: attention, then the MLP, each as `x + post_norm(f(norm(x)))`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerPlan {
    pub mixer: Mixer,
    /// The layer has a feed-forward after its mixer (Nemotron-H's mixer blocks have none).
    pub ffn: bool,
    /// Each head's query comes with a gate; the attention output is times `sigmoid(gate)`.
    pub attn_gate: bool,
    /// Keys visible to a row (its own position included); `None` = every earlier key.
    pub window: Option<usize>,
    /// Index into [`Plan::ropes`].
    pub rope: usize,
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// The q/k norms span the whole projection (OLMoE), not one head.
    pub qk_norm_full: bool,
    /// The activation of the MLP, or of each expert.
    pub mlp: Mlp,
    /// The MLP is a mixture of experts (routed per token); `None` = one dense MLP.
    pub moe: Option<MoeConfig>,
    /// RMSNorm of the attention and MLP outputs before the residual add.
    pub post_norms: bool,
    /// A bias added to the attention output projection (gpt-oss).
    pub o_bias: bool,
    /// One sink logit per query head joins the attention softmax (gpt-oss).
    pub sinks: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Token embeddings are multiplied by this.
    pub embed_scale: Option<f32>,
    pub ropes: Vec<RopeSpec>,
    pub layers: Vec<LayerPlan>,
    /// `cap * tanh(logit / cap)` on the output logits.
    pub final_softcap: Option<f32>,
    /// The multi-token-prediction layer (weights: the layer after the decoder's), full
    /// attention over its own one-layer KV cache.
    pub mtp: Option<LayerPlan>,
}

impl Plan {
    /// The plan of `cfg`; `file_factors` are rotary frequency divisors stored in the model file
    /// (a Llama 3.x GGUF), which take the place of the config's scaling.
    pub fn new(cfg: &ModelConfig, file_factors: Option<&[f32]>) -> Plan {
        let fam = cfg.family;
        let global_factors = match file_factors {
            Some(f) => f.iter().map(|&v| v as f64).collect(),
            None => cfg.rope_scaling.factors(cfg.rope_dim, cfg.rope_base),
        };
        let mut ropes = vec![RopeSpec {
            dim: cfg.rope_dim,
            base: cfg.rope_base,
            style: cfg.rope_style,
            factors: global_factors,
            mscale: cfg.rope_scaling.mscale(),
        }];
        let slides = (0..cfg.n_layers).any(|l| cfg.layer_slides(l));
        if slides && cfg.rope_local_base.is_some() {
            ropes.push(RopeSpec {
                dim: cfg.rope_dim,
                base: cfg.rope_local_base.unwrap_or(cfg.rope_base),
                style: cfg.rope_style,
                factors: Vec::new(),
                mscale: 1.0,
            });
        }
        let (mut kv, mut state) = (0, 0);
        let layers: Vec<LayerPlan> = (0..cfg.n_layers)
            .map(|l| {
                let slide = cfg.layer_slides(l);
                let block = cfg.mamba.as_ref().map(|m| m.blocks[l]);
                let mixer = match (&cfg.delta, &cfg.mamba) {
                    (_, Some(m)) if block == Some(crate::config::Block::Mamba) => {
                        state += 1;
                        Mixer::Mamba(MambaMixer {
                            shape: SsdShape {
                                heads: m.heads,
                                head_dim: m.head_dim,
                                state: m.state,
                                groups: m.groups,
                            },
                            kernel: m.conv_kernel,
                            state: state - 1,
                        })
                    }
                    (_, Some(_)) if block == Some(crate::config::Block::Mlp) => Mixer::None,
                    (Some(d), _) if !d.attention[l] => {
                        state += 1;
                        Mixer::DeltaNet(DeltaMixer {
                            shape: DeltaShape {
                                k_heads: d.k_heads,
                                v_heads: d.v_heads,
                                dk: d.dk,
                                dv: d.dv,
                                tiled: d.tiled,
                            },
                            kernel: d.conv_kernel,
                            state: state - 1,
                        })
                    }
                    _ => {
                        kv += 1;
                        Mixer::Attention { kv: kv - 1 }
                    }
                };
                LayerPlan {
                    mixer,
                    // Nemotron-H: only MLP blocks have a feed-forward.
                    ffn: block.is_none_or(|b| b == crate::config::Block::Mlp),
                    attn_gate: fam.gated_attention,
                    window: if slide { cfg.sliding_window } else { None },
                    rope: if slide { ropes.len() - 1 } else { 0 },
                    attn_scale: cfg.attn_scale,
                    attn_softcap: cfg.attn_softcap,
                    qkv_bias: fam.qkv_bias,
                    qk_norm: fam.qk_norm,
                    qk_norm_full: fam.qk_norm_full,
                    mlp: fam.mlp,
                    moe: cfg.moe.clone(),
                    post_norms: fam.post_norms,
                    o_bias: fam.gpt_oss_biases,
                    sinks: fam.sinks,
                }
            })
            .collect();
        let mtp = (cfg.mtp_layers > 0).then(|| LayerPlan {
            mixer: Mixer::Attention { kv: 0 },
            window: None,
            rope: 0,
            ..layers
                .iter()
                .find(|l: &&LayerPlan| matches!(l.mixer, Mixer::Attention { .. }))
                .cloned()
                .unwrap_or_else(|| layers[0].clone())
        });
        Plan {
            embed_scale: fam.embed_scale.then(|| (cfg.d_model as f32).sqrt()),
            ropes,
            layers,
            final_softcap: cfg.final_softcap,
            mtp,
        }
    }

    /// One line for `info`: attention kinds by layer count, MLP, norms, scales.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let sliding: Vec<&LayerPlan> = self.layers.iter().filter(|l| l.window.is_some()).collect();
        let rope_of = |l: &LayerPlan| {
            let r = &self.ropes[l.rope];
            let scaled = if r.factors.is_empty() { "" } else { ", scaled" };
            format!("rope base {}{scaled}", r.base)
        };
        if let Some(l) = sliding.first() {
            let w = l.window.unwrap_or(0);
            parts.push(format!(
                "{} sliding (window {w}, {})",
                sliding.len(),
                rope_of(l)
            ));
        }
        let recurrent = self.recurrent();
        if let Some(d) = recurrent.first() {
            let s = d.shape;
            parts.push(format!(
                "{} Gated DeltaNet ({}/{} key/value heads of {}/{}, conv {})",
                recurrent.len(),
                s.k_heads,
                s.v_heads,
                s.dk,
                s.dv,
                d.kernel
            ));
        }
        let attending = |l: &&LayerPlan| matches!(l.mixer, Mixer::Attention { .. });
        let global = (self.layers.iter().filter(attending)).find(|l| l.window.is_none());
        if let Some(l) = global {
            let n = self.kv_layers() - sliding.len();
            let gated = if l.attn_gate { "gated, " } else { "" };
            let r = &self.ropes[l.rope];
            parts.push(format!(
                "{n} global ({gated}{}, {} rotary dims)",
                rope_of(l),
                r.dim
            ));
        }
        if let Some(l) = self.layers.first() {
            match &l.moe {
                Some(m) => parts.push(format!(
                    "{:?} mixture of {} experts (width {}), {} per token{}",
                    l.mlp,
                    m.experts,
                    m.expert_ffn,
                    m.used,
                    match (m.gating, m.norm_topk) {
                        (crate::registry::Gating::TopKSoftmax, _) => ", softmax over the chosen",
                        (_, true) => ", weights renormalized",
                        _ => "",
                    }
                )),
                None => parts.push(format!("{:?}", l.mlp)),
            }
            if l.post_norms {
                parts.push("post norms".into());
            }
            if let Some(c) = l.attn_softcap {
                parts.push(format!("attention soft-cap {c}"));
            }
        }
        if let Some(s) = self.embed_scale {
            parts.push(format!("embeddings x{s:.3}"));
        }
        if let Some(c) = self.final_softcap {
            parts.push(format!("logit soft-cap {c}"));
        }
        parts.join("; ")
    }

    /// Layers with keys and values in the KV cache.
    pub fn kv_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|l| matches!(l.mixer, Mixer::Attention { .. }))
            .count()
    }

    /// Whether some layer keeps a state per sequence (Gated DeltaNet, Mamba-2).
    pub fn has_recurrent(&self) -> bool {
        !self.recurrent_sizes().is_empty()
    }

    /// The state each recurrent layer keeps, in layer order (= state index order).
    pub fn recurrent_sizes(&self) -> Vec<crate::LayerSize> {
        (self.layers.iter())
            .filter_map(|l| match &l.mixer {
                Mixer::DeltaNet(d) => Some(crate::LayerSize {
                    channels: 2 * d.shape.k_heads * d.shape.dk + d.shape.v_heads * d.shape.dv,
                    kernel: d.kernel,
                    delta: d.shape.state_len(),
                    gates: 2 * d.shape.v_heads,
                }),
                Mixer::Mamba(m) => Some(crate::LayerSize {
                    channels: m.channels(),
                    kernel: m.kernel,
                    delta: m.shape.state_len(),
                    gates: m.shape.heads,
                }),
                Mixer::Attention { .. } | Mixer::None => None,
            })
            .collect()
    }

    /// The Gated DeltaNet layers' shapes, in layer order.
    pub fn recurrent(&self) -> Vec<&DeltaMixer> {
        (self.layers.iter())
            .filter_map(|l| match &l.mixer {
                Mixer::DeltaNet(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    /// The widest sliding window, when every layer slides (then a sequence needs keys only that
    /// far back); `None` when some layer reads the whole prefix.
    pub fn all_windowed(&self) -> Option<usize> {
        self.layers
            .iter()
            .map(|l| l.window)
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .max()
    }

    /// What this plan uses beyond the plain Llama/Qwen decoder (full attention scaled by
    /// `head_dim^-1/2`, SwiGLU, pre-norms only, one unscaled RoPE, unscaled embeddings): a
    /// backend refuses at load a plan with a feature it does not run.
    pub fn features(&self, head_dim: usize) -> Vec<Feature> {
        let mut out = Vec::new();
        let mut add = |cond: bool, f: Feature| {
            if cond && !out.contains(&f) {
                out.push(f);
            }
        };
        add(self.embed_scale.is_some(), Feature::ScaledEmbeddings);
        add(self.final_softcap.is_some(), Feature::FinalSoftcap);
        add(self.ropes.len() > 1, Feature::SecondRope);
        let scaled = self.ropes.iter().any(|r| !r.factors.is_empty());
        add(scaled, Feature::RopeScaling);
        add(
            self.ropes.iter().any(|r| r.mscale != 1.0),
            Feature::RopeMscale,
        );
        let plain_scale = 1.0 / (head_dim as f32).sqrt();
        for l in &self.layers {
            add(l.window.is_some(), Feature::SlidingWindow);
            add(l.attn_softcap.is_some(), Feature::AttentionSoftcap);
            add(l.attn_scale != plain_scale, Feature::AttentionScale);
            add(l.mlp == Mlp::GeGlu, Feature::GeGlu);
            add(l.mlp == Mlp::SwiGluOai, Feature::ClampedSwiGlu);
            add(l.o_bias, Feature::OutputBias);
            add(l.sinks, Feature::AttentionSinks);
            add(l.qk_norm_full, Feature::FullQkNorm);
            add(l.post_norms, Feature::PostNorms);
            add(l.moe.is_some(), Feature::Moe);
            add(matches!(l.mixer, Mixer::DeltaNet(_)), Feature::DeltaNet);
            add(matches!(l.mixer, Mixer::Mamba(_)), Feature::Mamba);
            add(
                matches!(l.mixer, Mixer::None) || !l.ffn,
                Feature::SingleOpBlocks,
            );
            add(l.attn_gate, Feature::GatedAttention);
            let shared = l.moe.as_ref().is_some_and(|m| m.shared_ffn.is_some());
            add(shared, Feature::SharedExpert);
        }
        out
    }
}

/// An op of the plan beyond the plain decoder (see [`Plan::features`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    ScaledEmbeddings,
    FinalSoftcap,
    /// A second RoPE table (sliding layers with their own base).
    SecondRope,
    RopeScaling,
    SlidingWindow,
    AttentionSoftcap,
    /// An attention scale other than `head_dim^-1/2`.
    AttentionScale,
    GeGlu,
    PostNorms,
    /// A mixture-of-experts feed-forward.
    Moe,
    /// cos and sin scaled (YaRN).
    RopeMscale,
    ClampedSwiGlu,
    OutputBias,
    AttentionSinks,
    /// q/k RMSNorm over the whole projection.
    FullQkNorm,
    /// Gated DeltaNet layers (a recurrent state per sequence).
    DeltaNet,
    /// Mamba-2 layers (a recurrent state per sequence).
    Mamba,
    /// Layers with a mixer or a feed-forward alone (Nemotron-H's blocks).
    SingleOpBlocks,
    /// Attention output gated per head.
    GatedAttention,
    /// A gated shared expert beside the routed ones.
    SharedExpert,
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Feature::ScaledEmbeddings => "scaled embeddings",
            Feature::FinalSoftcap => "final-logit soft-capping",
            Feature::SecondRope => "a second RoPE base",
            Feature::RopeScaling => "RoPE frequency scaling",
            Feature::SlidingWindow => "sliding-window attention",
            Feature::AttentionSoftcap => "attention-logit soft-capping",
            Feature::AttentionScale => "a custom attention scale",
            Feature::GeGlu => "GeGLU",
            Feature::PostNorms => "post-attention and post-MLP norms",
            Feature::Moe => "mixture-of-experts feed-forward",
            Feature::RopeMscale => "YaRN's scaled cos and sin",
            Feature::ClampedSwiGlu => "gpt-oss's clamped SwiGLU",
            Feature::OutputBias => "a bias on the attention output",
            Feature::AttentionSinks => "attention sinks",
            Feature::FullQkNorm => "q/k norms over the whole projection",
            Feature::DeltaNet => "Gated DeltaNet (linear attention) layers",
            Feature::Mamba => "Mamba-2 layers",
            Feature::SingleOpBlocks => "mixer-only and feed-forward-only blocks",
            Feature::GatedAttention => "gated attention",
            Feature::SharedExpert => "a shared expert",
        })
    }
}

/// The op set every backend implements over the rows of one forward call. Each op reads and
/// writes the backend's own buffers: the residual stream `x`, the normalized rows `h`, the
/// attention output `att`. An op does everything its layer plan asks of its part of the layer
/// (or refuses at load what it cannot), and a backend may fuse inside an op, never across the
/// order [`walk`] gives.
pub trait LayerOps {
    type Error;
    /// `x` = the rows' token embeddings, times the plan's scale; `h` = layer 0's `attn_norm(x)`.
    fn embed(&mut self, plan: &Plan) -> Result<(), Self::Error>;
    /// q, k, v from `h`; biases, per-head q/k norms, RoPE with the layer's table; each row's key
    /// and value written into the cache.
    fn qkv(&mut self, layer: usize, lp: &LayerPlan) -> Result<(), Self::Error>;
    /// `att` = each row's attention over its keys (the layer's window, scale and soft-cap).
    fn attention(&mut self, layer: usize, lp: &LayerPlan) -> Result<(), Self::Error>;
    /// `x += post_norm(att · wo)`; `h = ffn_norm(x)`.
    fn attn_out(&mut self, layer: usize, lp: &LayerPlan) -> Result<(), Self::Error>;
    /// A recurrent layer in place of `qkv`, `attention` and `attn_out`: `x += out(mix(h))`
    /// with the sequence states advanced; `h = ffn_norm(x)`.
    fn delta_net(&mut self, layer: usize, dn: &DeltaMixer) -> Result<(), Self::Error>;
    /// A Mamba-2 layer, as [`delta_net`](LayerOps::delta_net).
    fn mamba(&mut self, layer: usize, m: &MambaMixer) -> Result<(), Self::Error>;
    /// `x += post_norm(down(act(h · gate) * (h · up)))`, or for a mixture of experts the
    /// routed experts' outputs summed in rank order, each times its router weight; then `h` =
    /// the next layer's `attn_norm(x)` (nothing after the last layer).
    fn mlp(&mut self, layer: usize, lp: &LayerPlan, last: bool) -> Result<(), Self::Error>;
}

/// The decoder forward, once for every backend: the plan's layers in order. (The output head
/// follows, in the backend's own form: logits, greedy ids or draws.)
pub fn walk<O: LayerOps>(plan: &Plan, ops: &mut O) -> Result<(), O::Error> {
    ops.embed(plan)?;
    let n = plan.layers.len();
    for (layer, lp) in plan.layers.iter().enumerate() {
        match &lp.mixer {
            Mixer::Attention { .. } => {
                ops.qkv(layer, lp)?;
                ops.attention(layer, lp)?;
                ops.attn_out(layer, lp)?;
            }
            Mixer::DeltaNet(dn) => ops.delta_net(layer, dn)?,
            Mixer::Mamba(m) => ops.mamba(layer, m)?,
            // `h` is already the layer's feed-forward input (its norm is bound as attn_norm).
            Mixer::None => {}
        }
        if !lp.ffn {
            // A mixer-only layer's ffn_norm is the next layer's input norm (bound so at load).
            continue;
        }
        ops.mlp(layer, lp, layer + 1 == n)?;
    }
    Ok(())
}
