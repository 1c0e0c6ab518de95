"""OLMoE: q/k RMSNorm over the whole projection."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from .checkpoints import logit_diff, variant_logits

OLMOE_ATTENTION_MODES = {
    "hf": "transformers' OlmoeAttention (reimplemented: must give its outputs bit for bit)",
    "qk_norm_per_head": "q/k RMS taken per head (over head_dim, as Qwen3 does), the same [hidden] / "
    "[kv_heads*head_dim] weights applied element-wise, before RoPE",
    "qk_norm_after_rope": "q_norm / k_norm (whole projection) applied after RoPE instead of before (the RMS "
    "itself is rotation-invariant, the per-element weights are not)",
    "no_qk_norm": "q_norm / k_norm skipped",
}


@contextlib.contextmanager
def olmoe_attention(mode: str):
    """Replace OlmoeAttention.forward (eager, no cache) by one placing the q/k norms as `mode` says."""
    from transformers.models.olmoe import modeling_olmoe as mo

    assert mode in OLMOE_ATTENTION_MODES, mode

    def per_head(norm, x, head_dim):
        shape = x.shape
        h = x.to(torch.float32).view(*shape[:-1], -1, head_dim)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return norm.weight * h.view(shape).to(x.dtype)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
        assert cache is None and self.config.clip_qkv is None
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states)
        k = self.k_proj(hidden_states)
        v = self.v_proj(hidden_states)
        if mode == "hf":
            q, k = self.q_norm(q), self.k_norm(k)
        elif mode == "qk_norm_per_head":
            q, k = per_head(self.q_norm, q, self.head_dim), per_head(self.k_norm, k, self.head_dim)
        q = q.view(*hidden_shape).transpose(1, 2)
        k = k.view(*hidden_shape).transpose(1, 2)
        v = v.view(*hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = mo.apply_rotary_pos_emb(q, k, cos, sin)
        if mode == "qk_norm_after_rope":
            whole = lambda norm, x: norm(x.transpose(1, 2).reshape(*input_shape, -1)).view(*hidden_shape).transpose(1, 2)  # noqa: E731
            q, k = whole(self.q_norm, q), whole(self.k_norm, k)
        out, _ = mo.eager_attention_forward(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling)
        return self.o_proj(out.reshape(*input_shape, -1).contiguous()), None

    orig = mo.OlmoeAttention.forward
    mo.OlmoeAttention.forward = forward
    try:
        yield
    finally:
        mo.OlmoeAttention.forward = orig


def olmoe_attention_checks(cls, fam, state, seqs, logits) -> dict:
    """The reimplemented attention against transformers' own (bitwise), and each variant as a
    sensitivity entry (keyed by its mode)."""
    out = {}
    for mode in ("hf", *fam["attention_ablations"]):
        with olmoe_attention(mode):
            alt, _ = variant_logits(cls, fam, {}, state, seqs)
        if mode == "hf":
            out["reimplementation_bitwise_equal"] = all(np.array_equal(a, b) for a, b in zip(alt, logits))
            assert out["reimplementation_bitwise_equal"], "olmoe_attention('hf') differs from transformers"
            continue
        out[mode] = dict(attention=OLMOE_ATTENTION_MODES[mode], **logit_diff(alt, logits))
    return out


def olmoe_record(loaded, hf_tensors: dict, summary: dict, attn: dict) -> dict:
    """What the Rust side needs to know about OLMoE that the other families do not have."""
    import inspect

    from transformers.models.olmoe import modeling_olmoe as mo

    cfg = loaded.config
    attn_mod = loaded.model.layers[0].self_attn
    heads, kv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, attn_mod.head_dim
    meta, tensors = summary["meta"], summary["tensors"]
    return dict(
        qk_norm=dict(
            rule="q = q_norm(q_proj(x)) and k = k_norm(k_proj(x)): one RMSNorm over the whole projection "
            "(q: num_attention_heads * head_dim values, k: num_key_value_heads * head_dim) before the "
            "split into heads, not per head as Qwen3; then the heads are split and RoPE is applied to "
            "the normed q and k (v is not normed); RMSNorm: x * rsqrt(mean(x^2) + eps) in float32, times "
            "the weight",
            eps=cfg.rms_norm_eps,
            eps_source="config.rms_norm_eps (the same eps as every other RMSNorm of the model)",
            q_norm_weight_shape=hf_tensors["model.layers.0.self_attn.q_norm.weight"]["shape"],
            k_norm_weight_shape=hf_tensors["model.layers.0.self_attn.k_norm.weight"]["shape"],
            transformers_sizes="q_norm: RMSNorm(hidden_size), k_norm: RMSNorm(hidden_size // "
            "num_attention_heads * num_key_value_heads) (so heads * head_dim must equal hidden_size)",
            heads=heads,
            kv_heads=kv,
            head_dim=hd,
            q_norm_module=repr(attn_mod.q_norm),
            k_norm_module=repr(attn_mod.k_norm),
            clip_qkv=cfg.clip_qkv,
            clip_qkv_rule="if set, q, k (after their norms) and v are clamped to [-clip_qkv, clip_qkv] "
            "before RoPE; None here and in allenai/OLMoE-1B-7B-0924; the olmoe GGUF has no clamp key "
            "and llama.cpp's olmoe graph does not clamp",
            transformers_source=inspect.getsource(mo.OlmoeAttention.forward).splitlines(),
            reimplementation_bitwise_equal=attn["reimplementation_bitwise_equal"],
            variants_in_sensitivity=list(OLMOE_ATTENTION_MODES)[1:],
        ),
        gqa=("transformers takes num_key_value_heads < num_attention_heads (k_norm then spans "
             "kv_heads * head_dim), but llama.cpp's olmoe loader creates attn_k_norm as {n_embd} and "
             "the GGUF of a GQA checkpoint would not load; allenai/OLMoE-1B-7B-0924 has 16 heads and 16 "
             "KV heads; this fixture has kv_heads = heads = 4"),
        gguf=dict(
            arch=meta["general.architecture"],
            q_norm=dict(name="blk.N.attn_q_norm.weight", **tensors["blk.0.attn_q_norm.weight"]),
            k_norm=dict(name="blk.N.attn_k_norm.weight", **tensors["blk.0.attn_k_norm.weight"]),
            qk_permutation="none: OlmoeModel (conversion/olmo.py) does not permute q_proj / k_proj "
            "(moe.gguf_checks q_equal true, q_equal_permuted false); llama.cpp ropes olmoe as "
            "LLAMA_ROPE_TYPE_NEOX (pairs (i, i + head_dim/2)), transformers' rotate_half",
            rms_eps="the converter writes olmoe.attention.layer_norm_rms_epsilon = 1e-5 literally "
            "(OlmoeModel.set_gguf_parameters after the base class wrote config.rms_norm_eps: the key "
            "is overwritten, with a 'Duplicated key name' warning); this checkpoint's eps is 1e-5, so "
            "they agree",
            expert_keys={k: v for k, v in meta.items() if "expert" in k},
            expert_width_key="olmoe.feed_forward_length = intermediate_size (the experts' width; no "
            "expert_feed_forward_length key, no dense FFN)",
            no_routing_flags="no expert_weights_norm, expert_weights_scale or expert_gating_func key",
        ),
        llama_cpp_graph=dict(
            source="src/models/olmoe.cpp (llama_model_olmoe::graph)",
            attention="build_qkv(..., reshape = false): Q [n_embd, T], K/V [n_embd_gqa, T]; Qcur = "
            "build_norm(Qcur, attn_q_norm, LLM_NORM_RMS) and Kcur = build_norm(Kcur, attn_k_norm, "
            "LLM_NORM_RMS) over the whole rows (eps f_norm_rms_eps); then reshape to heads and "
            "ggml_rope_ext (NEOX) on the normed q, k; scale 1/sqrt(head_dim)",
            moe="build_moe_ffn(ffn_norm output, ffn_gate_inp, ffn_up_exps, ffn_gate_exps, ffn_down_exps, "
            "no probs bias, n_expert, n_expert_used, LLM_FFN_SILU, norm_w = false, w_scale = "
            "hparams.expert_weights_scale (0 by default, not read by the olmoe loader: no scaling), "
            "LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX): softmax over all experts, top-k, the chosen "
            "probabilities used unnormalized, as transformers with norm_topk_prob false",
            norm_topk_prob_true_unsupported="the olmoe graph never renormalizes: a checkpoint with "
            "norm_topk_prob true would convert without any flag and run unnormalized",
        ),
    )
