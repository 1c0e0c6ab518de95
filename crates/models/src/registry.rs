//! The supported model families. Adding a family = one folder under `families/` and one line in
//! [`FAMILIES`].

use crate::families;
use tf_kernels::ops::RopeStyle;

/// The feed-forward activation of a dense MLP (`down(act(gate(x)) * up(x))`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    /// SiLU gate (Llama, Qwen, Mistral, Phi-3).
    SwiGlu,
    /// GELU (tanh form) gate (Gemma).
    GeGlu,
    /// gpt-oss's clamped SwiGLU: `(clamp(up, ±7) + 1) * g * sigmoid(1.702 g)`, `g = min(gate, 7)`.
    SwiGluOai,
    /// Squared ReLU of the up projection, no gate (Nemotron-H): `down(relu(x · up)^2)`.
    Relu2,
}

impl Mlp {
    /// `out = act(gate) * up` element by element, this MLP's activation.
    pub fn apply(self, level: tf_kernels::SimdLevel, gate: &[f32], up: &[f32], out: &mut [f32]) {
        use tf_kernels::ops;
        match self {
            Mlp::SwiGlu => ops::swiglu(level, gate, up, out),
            Mlp::GeGlu => ops::geglu(level, gate, up, out),
            Mlp::SwiGluOai => ops::swiglu_oai(gate, up, OAI_ALPHA, OAI_LIMIT, out),
            // One projection: `gate` is it (`up` unused).
            Mlp::Relu2 => {
                let _ = up;
                for (o, &g) in out.iter_mut().zip(gate) {
                    let r = g.max(0.0);
                    *o = r * r;
                }
            }
        }
    }
}

/// gpt-oss's SwiGLU constants (transformers and llama.cpp hard-code them too).
pub const OAI_ALPHA: f32 = 1.702;
pub const OAI_LIMIT: f32 = 7.0;

/// How a mixture of experts' router weighs the experts it picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over every expert's score, then the top k (Mixtral, Qwen3-MoE).
    Softmax,
    /// The top k scores, then a softmax over those k (gpt-oss).
    TopKSoftmax,
}

/// Which layers use the model's sliding window, when its config sets one (a config's own
/// per-layer list, `layer_types`, takes precedence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Windows {
    /// Every layer (Mistral, Phi-3).
    All,
    /// Every layer but each `n`-th (layer i is global when `(i + 1) % n == 0`): Gemma 3 (6),
    /// Gemma 2 (2).
    AllButEvery(usize),
}

/// What distinguishes one decoder family from another: data the plan is built from
/// ([`crate::plan::Plan`]), and the family's tensor names.
#[derive(Debug)]
pub struct Family {
    /// Our name for it.
    pub name: &'static str,
    /// `general.architecture` in GGUF files.
    pub gguf_arch: &'static str,
    /// `architectures[0]` (or `model_type`) in Hugging Face `config.json`.
    pub hf_names: &'static [&'static str],
    /// Biases on the q, k and v projections.
    pub qkv_bias: bool,
    /// RMSNorm over each head of q and k before RoPE.
    pub qk_norm: bool,
    /// The q and k norms span the whole projection, not one head (OLMoE).
    pub qk_norm_full: bool,
    /// How GGUF files of this family lay out rotary pairs (HF checkpoints are always Neox).
    pub gguf_rope: RopeStyle,
    pub mlp: Mlp,
    /// RMSNorm of the attention output and of the MLP output before each residual add (Gemma's
    /// "sandwich" norms).
    pub post_norms: bool,
    /// Hugging Face checkpoints store RMSNorm weights as `w` and scale by `1 + w` (Gemma); GGUF
    /// converters store `1 + w`.
    pub hf_norm_offset: bool,
    /// Token embeddings are multiplied by `sqrt(d_model)` (Gemma).
    pub embed_scale: bool,
    pub windows: Windows,
    /// RoPE base of the sliding-window layers when the file names none (Gemma 3: 10,000; the
    /// global layers take the model's base).
    pub local_rope_base: Option<f32>,
    /// q, k and v as one tensor (`attn_qkv`), and gate and up as one (`ffn_up` of twice the
    /// width, gate first): Phi-3.
    pub fused: bool,
    /// Hugging Face tensor names that differ from the Llama layout, as (GGUF-style name, HF
    /// name inside `model.layers.N.`).
    pub hf_tensors: &'static [(&'static str, &'static str)],
    /// Hugging Face names (inside `model.layers.N.`) of a mixture of experts' router and of
    /// expert `{e}`'s gate, up and down matrices.
    pub hf_experts: [&'static str; 4],
    /// Whether the chosen experts' weights are renormalized when the config does not say
    /// (`norm_topk_prob`).
    pub norm_topk_default: bool,
    /// The same for GGUF files, which carry no key for it: what llama.cpp's graph of the
    /// family does.
    pub norm_topk_gguf: bool,
    pub gating: Gating,
    /// Biases on the attention output, the router and each expert's projections (gpt-oss).
    pub gpt_oss_biases: bool,
    /// One attention-sink logit per query head (gpt-oss).
    pub sinks: bool,
    /// The GGUF name (inside `blk.N.`) of the norm before the feed-forward (gpt-oss's converter
    /// writes `post_attention_norm`).
    pub gguf_ffn_norm: &'static str,
    /// Hugging Face checkpoints hold all experts in two tensors, `mlp.experts.gate_up_proj`
    /// (`[experts, d_model, 2 * width]`, gate and up interleaved) and `mlp.experts.down_proj`
    /// (`[experts, width, d_model]`), with biases: gpt-oss. They are relaid out at load.
    pub hf_fused_experts: bool,
    /// YaRN's correction range rounded to whole dimensions when the file does not say
    /// (`truncate`; llama.cpp always rounds, gpt-oss does not).
    pub yarn_truncate_default: bool,
    /// Gated DeltaNet layers between the attention layers (Qwen3-Next, Qwen3.5).
    pub delta_net: bool,
    /// Gated attention: `q_proj` gives each head's query and then its gate, and the attention
    /// output is multiplied by `sigmoid(gate)` before `o_proj` (Qwen3-Next, Qwen3.5).
    pub gated_attention: bool,
    /// Blocks of one op each, Mamba-2, attention or MLP (Nemotron-H): the layer types come from
    /// the file (GGUF: which layers have KV heads and which a feed-forward width; HF:
    /// `hybrid_override_pattern`).
    pub mamba_blocks: bool,
    /// Attention rotates q and k (RoPE); false: no position encoding at all (Nemotron-H).
    pub rope: bool,
    /// Hugging Face names: the layers' prefix and the embedding, final norm and head (Nemotron-H
    /// checkpoints say `backbone.`).
    pub hf_layers: &'static str,
    pub hf_globals: [&'static str; 3],
}

impl Family {
    /// The Llama layout, which the other families change in a few fields.
    pub const LLAMA_LIKE: Family = Family {
        name: "",
        gguf_arch: "",
        hf_names: &[],
        qkv_bias: false,
        qk_norm: false,
        qk_norm_full: false,
        gguf_rope: RopeStyle::Neox,
        mlp: Mlp::SwiGlu,
        post_norms: false,
        hf_norm_offset: false,
        embed_scale: false,
        windows: Windows::All,
        local_rope_base: None,
        fused: false,
        hf_tensors: &[],
        hf_experts: [
            "mlp.gate.weight",
            "mlp.experts.{e}.gate_proj.weight",
            "mlp.experts.{e}.up_proj.weight",
            "mlp.experts.{e}.down_proj.weight",
        ],
        norm_topk_default: true,
        norm_topk_gguf: true,
        gating: Gating::Softmax,
        gpt_oss_biases: false,
        sinks: false,
        gguf_ffn_norm: "ffn_norm.weight",
        hf_fused_experts: false,
        yarn_truncate_default: true,
        delta_net: false,
        gated_attention: false,
        mamba_blocks: false,
        rope: true,
        hf_layers: "model.layers",
        hf_globals: [
            "model.embed_tokens.weight",
            "model.norm.weight",
            "lm_head.weight",
        ],
    };
}

pub static FAMILIES: &[&Family] = &[
    &families::llama::FAMILY,
    &families::qwen2::FAMILY,
    &families::qwen3::FAMILY,
    &families::qwen3moe::FAMILY,
    &families::olmoe::FAMILY,
    &families::gpt_oss::FAMILY,
    &families::gemma3::FAMILY,
    &families::gemma2::FAMILY,
    &families::phi3::FAMILY,
    &families::qwen35::FAMILY,
    &families::qwen3next::FAMILY,
    &families::nemotron_h::FAMILY,
];

pub fn by_gguf_arch(arch: &str) -> Option<&'static Family> {
    FAMILIES.iter().copied().find(|f| f.gguf_arch == arch)
}

pub fn by_hf_name(name: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.hf_names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

pub fn supported_list() -> String {
    FAMILIES
        .iter()
        .map(|f| f.gguf_arch)
        .collect::<Vec<_>>()
        .join(", ")
}
