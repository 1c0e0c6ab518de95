"""Qwen3.5 / Qwen3-Next (hybrid Gated DeltaNet + gated attention): variants of transformers' own
modules for the sensitivity entries, the chunked-vs-recurrent check, the converter's tensor rules
checked tensor by tensor, and the `gdn` record."""

from __future__ import annotations

import contextlib
import importlib
import inspect

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoints import f32, logit_diff, run_logits, variant_logits

# transformers module and class-name prefix per family class
HF_MODULES = {"Qwen3_5ForCausalLM": ("qwen3_5", "Qwen3_5"), "Qwen3NextForCausalLM": ("qwen3_next", "Qwen3Next")}


def modeling(fam: dict):
    m, prefix = HF_MODULES[fam["cls"]]
    return importlib.import_module(f"transformers.models.{m}.modeling_{m}"), prefix


# Variants computed by replacing one of transformers' functions or module forwards ("patch") or by
# transforming the checkpoint's tensors ("state"). Each "hf" mode is a reimplementation that must
# give transformers' own outputs bit for bit.
PATCH_VARIANTS = {
    # the delta rule (the module-level torch_chunk_gated_delta_rule the GatedDeltaNet forward calls)
    "recurrent": ("delta", "transformers' token-by-token torch_recurrent_gated_delta_rule in place of the "
                  "chunked torch_chunk_gated_delta_rule (chunk 64) that prefill runs"),
    "v_heads_tiled": ("delta", "value head h reads key head h % num_k_heads (q/k tiled: torch.repeat) instead "
                      "of h // (num_v_heads / num_k_heads) (repeat_interleave); what an engine reading the HF "
                      "checkpoint with the qwen35 GGUF's head order would compute"),
    "recurrent_state_omitted": ("delta", "every token starts from a zero state (o_t = q_t (k_t^T beta_t v_t)): a "
                                "decode step that does not carry the recurrent state"),
    # the gated RMSNorm of the linear-attention output
    "no_z_gate": ("gated_norm", "the linear-attention output RMSNorm without its silu(z) gate"),
    "z_gate_before_norm": ("gated_norm", "RMSNorm(o * silu(z)) * w (gate, then norm) instead of RMSNorm(o) * w * silu(z)"),
    # gated full attention
    "no_attn_output_gate": ("attention", "the full-attention output not multiplied by sigmoid(gate)"),
    "attn_gate_not_interleaved": ("attention", "q_proj's output read as [q of all heads | gate of all heads] "
                                  "instead of per head [q_h (head_dim) | gate_h (head_dim)]"),
    # Qwen3-Next's shared expert
    "no_shared_expert_gate": ("moe", "the shared expert's output added without its sigmoid(shared_expert_gate x) factor"),
    "no_shared_expert": ("moe", "the shared expert left out"),
}
STATE_VARIANTS = {
    "conv_state_omitted": "the depthwise conv's taps for the K-1 previous positions zeroed (only the current "
    "token's tap kept): a decode step that does not carry the conv state",
    "conv_kernel_reversed": "the conv taps applied in reverse order (tap 0 on the current token)",
    "zero_centred_norms_as_plain": "every (1 + w) RMSNorm (input, post-attention, final, q_norm, k_norm) "
    "multiplying by w instead (w -> w - 1 in the checkpoint)",
    "gated_norm_as_zero_centred": "the gated RMSNorm multiplying by (1 + w) like the others (w -> w + 1)",
    "no_decay": "g = 0 (A_log -> -inf): the state is never decayed",
    "dt_bias_zero": "softplus(a) without dt_bias",
    "ssm_a_exp_twice": "g = -exp(ssm_a) * softplus(...) with the GGUF's ssm_a (= -exp(A_log)): A_log -> -exp(A_log)",
    "qkvz_read_contiguous": "in_proj_qkvz read as [q | k | v | z] of all heads (Qwen3.5's split layout) instead "
    "of per key head [q_g | k_g | v_g (r heads) | z_g (r heads)]",
    "ba_read_contiguous": "in_proj_ba read as [b of all value heads | a of all value heads] instead of per key "
    "head [b_g (r) | a_g (r)]",
}
# per family: the patch variants and state variants recorded in `sensitivity`
FAMILY_VARIANTS = {
    "Qwen3_5ForCausalLM": (
        ["v_heads_tiled", "recurrent_state_omitted", "no_z_gate", "z_gate_before_norm", "no_attn_output_gate",
         "attn_gate_not_interleaved"],
        ["conv_state_omitted", "conv_kernel_reversed", "zero_centred_norms_as_plain", "gated_norm_as_zero_centred",
         "no_decay", "dt_bias_zero", "ssm_a_exp_twice"],
    ),
    "Qwen3NextForCausalLM": (
        ["v_heads_tiled", "recurrent_state_omitted", "no_z_gate", "z_gate_before_norm", "no_attn_output_gate",
         "attn_gate_not_interleaved", "no_shared_expert_gate", "no_shared_expert"],
        ["conv_state_omitted", "conv_kernel_reversed", "zero_centred_norms_as_plain", "gated_norm_as_zero_centred",
         "no_decay", "dt_bias_zero", "ssm_a_exp_twice", "qkvz_read_contiguous", "ba_read_contiguous"],
    ),
}


class Calls:
    """Counts the calls of a patched function and keeps what the delta rule saw (per call)."""

    def __init__(self):
        self.n = 0
        self.seen: list[dict] = []


@contextlib.contextmanager
def patched(fam: dict, kind: str, mode: str, calls: Calls | None = None):
    """Replace one of transformers' functions / forwards for the family; `mode` "hf" reimplements
    transformers' own computation."""
    mod, prefix = modeling(fam)
    calls = calls or Calls()
    if kind == "delta":
        orig_chunk, orig_rec = mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule

        def chunk(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=False, **kw):
            assert initial_state is None and use_qk_l2norm_in_kernel
            calls.n += 1
            calls.seen.append(dict(decay=g.exp().float().clone(), beta=beta.float().clone()))
            args = dict(g=g, beta=beta, output_final_state=output_final_state,
                        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, **kw)
            if mode == "recurrent":
                return orig_rec(query, key, value, initial_state=None, **args)
            if mode == "recurrent_state_omitted":
                outs = []
                for t in range(query.shape[1]):
                    s = slice(t, t + 1)
                    o, _ = orig_rec(query[:, s], key[:, s], value[:, s], initial_state=None,
                                    **{**args, "g": g[:, s], "beta": beta[:, s]})
                    outs.append(o)
                return torch.cat(outs, dim=1), None
            if mode == "v_heads_tiled":
                r = value.shape[2] // key.shape[2]
                query, key = query.repeat(1, 1, r, 1), key.repeat(1, 1, r, 1)
            else:
                assert mode == "hf", mode
            return orig_chunk(query, key, value, chunk_size=chunk_size, initial_state=None, **args)

        mod.torch_chunk_gated_delta_rule = chunk
        try:
            yield calls
        finally:
            mod.torch_chunk_gated_delta_rule = orig_chunk
        return
    if kind == "gated_norm":
        cls = getattr(mod, f"{prefix}RMSNormGated")

        def forward(self, hidden_states, gate):
            calls.n += 1
            input_dtype = hidden_states.dtype
            hs = hidden_states.to(torch.float32)
            if mode == "z_gate_before_norm":
                hs = hs * F.silu(gate.to(torch.float32))
            variance = hs.pow(2).mean(-1, keepdim=True)
            hs = hs * torch.rsqrt(variance + self.variance_epsilon)
            hs = self.weight * hs.to(input_dtype)
            if mode == "hf":
                hs = hs * F.silu(gate.to(torch.float32))
            else:
                assert mode in ("no_z_gate", "z_gate_before_norm"), mode
            return hs.to(input_dtype)
    elif kind == "attention":
        cls = getattr(mod, f"{prefix}Attention")

        def forward(self, hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
            assert cache is None
            calls.n += 1
            input_shape = hidden_states.shape[:-1]
            hidden_shape = (*input_shape, -1, self.head_dim)
            qg = self.q_proj(hidden_states)
            if mode == "attn_gate_not_interleaved":
                n = qg.shape[-1] // 2
                query_states, gate = qg[..., :n], qg[..., n:]
            else:
                query_states, gate = torch.chunk(qg.view(*input_shape, -1, self.head_dim * 2), 2, dim=-1)
                gate = gate.reshape(*input_shape, -1)
            query_states = self.q_norm(query_states.reshape(hidden_shape)).transpose(1, 2)
            key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
            value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            cos, sin = position_embeddings
            query_states, key_states = mod.apply_rotary_pos_emb(query_states, key_states, cos, sin)
            out, weights = mod.eager_attention_forward(
                self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling
            )
            out = out.reshape(*input_shape, -1).contiguous()
            if mode != "no_attn_output_gate":
                assert mode in ("hf", "attn_gate_not_interleaved"), mode
                out = out * torch.sigmoid(gate)
            return self.o_proj(out), weights
    elif kind == "moe":
        cls = getattr(mod, f"{prefix}SparseMoeBlock")

        def forward(self, hidden_states):
            calls.n += 1
            batch_size, sequence_length, hidden_dim = hidden_states.shape
            x = hidden_states.view(-1, hidden_dim)
            shared = self.shared_expert(x)
            _, routing_weights, selected_experts = self.gate(x)
            out = self.experts(x, selected_experts, routing_weights)
            if mode == "hf":
                shared = F.sigmoid(self.shared_expert_gate(x)) * shared
            if mode != "no_shared_expert":
                assert mode in ("hf", "no_shared_expert_gate"), mode
                out = out + shared
            return out.reshape(batch_size, sequence_length, hidden_dim)
    else:
        raise ValueError(kind)
    orig = cls.forward
    cls.forward = forward
    try:
        yield calls
    finally:
        cls.forward = orig


def transform_state(label: str, state: dict, config) -> dict:
    """The checkpoint as `label` (STATE_VARIANTS) reads it."""
    st = dict(state)
    nk, nv = config.linear_num_key_heads, config.linear_num_value_heads
    dk, dv = config.linear_key_head_dim, config.linear_value_head_dim
    r = nv // nk
    hit = 0
    for k, v in state.items():
        new = None
        if label == "conv_state_omitted" and k.endswith(".linear_attn.conv1d.weight"):
            new = v.clone()
            new[..., :-1] = 0.0
        elif label == "conv_kernel_reversed" and k.endswith(".linear_attn.conv1d.weight"):
            new = v.flip(-1)
        elif label == "zero_centred_norms_as_plain" and k.endswith(
            ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
             "self_attn.k_norm.weight")
        ) or (label == "zero_centred_norms_as_plain" and k == "model.norm.weight"):
            new = v - 1.0
        elif label == "gated_norm_as_zero_centred" and k.endswith(".linear_attn.norm.weight"):
            new = v + 1.0
        elif label == "no_decay" and k.endswith(".linear_attn.A_log"):
            new = torch.full_like(v, float("-inf"))
        elif label == "dt_bias_zero" and k.endswith(".linear_attn.dt_bias"):
            new = torch.zeros_like(v)
        elif label == "ssm_a_exp_twice" and k.endswith(".linear_attn.A_log"):
            new = -torch.exp(v)
        elif label == "qkvz_read_contiguous" and k.endswith(".linear_attn.in_proj_qkvz.weight"):
            # the rows an engine reading [q | k | v | z] would take, laid out as transformers reads them
            q, kk, vv, z = torch.split(v, [nk * dk, nk * dk, nv * dv, nv * dv], dim=0)
            new = torch.cat([torch.cat([q[g * dk:(g + 1) * dk], kk[g * dk:(g + 1) * dk],
                                        vv[g * r * dv:(g + 1) * r * dv], z[g * r * dv:(g + 1) * r * dv]])
                             for g in range(nk)])
        elif label == "ba_read_contiguous" and k.endswith(".linear_attn.in_proj_ba.weight"):
            b, a = torch.split(v, [nv, nv], dim=0)
            new = torch.cat([torch.cat([b[g * r:(g + 1) * r], a[g * r:(g + 1) * r]]) for g in range(nk)])
        if new is not None:
            assert new.shape == v.shape and not torch.equal(new, v), (label, k)
            st[k] = new
            hit += 1
    assert hit, label
    return st


def gdn_checks(cls, fam: dict, state: dict, seqs, logits, config) -> dict:
    """Bitwise checks of the reimplementations, the recurrent-form check, the decay statistics and
    the sensitivity entries (under "sensitivity")."""
    out: dict = {}
    patch_labels, state_labels = FAMILY_VARIANTS[fam["cls"]]
    n_linear = sum(t == "linear_attention" for t in config.layer_types)
    n_full = len(config.layer_types) - n_linear
    kinds = {"delta": n_linear, "gated_norm": n_linear, "attention": n_full}
    if "moe" in fam:
        kinds["moe"] = config.num_hidden_layers
    bitwise = {}
    for kind, per_seq in kinds.items():
        with patched(fam, kind, "hf") as calls:
            alt, _ = variant_logits(cls, fam, {}, state, seqs)
        assert calls.n == per_seq * len(seqs), (kind, calls.n)
        bitwise[kind] = all(np.array_equal(a, b) for a, b in zip(alt, logits))
        assert bitwise[kind], f"the {kind} reimplementation differs from transformers"
        if kind == "delta":
            seen = calls.seen[-n_linear:]  # the last (70-token) sequence, one entry per linear layer
            out["decay_and_beta_longest_sequence"] = [
                dict(
                    layer=i,
                    decay_exp_g=dict(min=f32(s["decay"].min()), median=f32(s["decay"].median()), max=f32(s["decay"].max())),
                    beta=dict(min=f32(s["beta"].min()), median=f32(s["beta"].median()), max=f32(s["beta"].max())),
                )
                for i, s in zip([i for i, t in enumerate(config.layer_types) if t == "linear_attention"], seen)
            ]
    out["reimplementations_bitwise_equal"] = bitwise
    # transformers' chunked prefill against its own token-by-token recurrence
    with patched(fam, "delta", "recurrent"):
        rec, _ = variant_logits(cls, fam, {}, state, seqs)
    out["chunked_vs_recurrent"] = dict(
        what=PATCH_VARIANTS["recurrent"][1],
        max_abs_logit_diff_per_sequence=[f32(np.abs(a - b).max()) for a, b in zip(rec, logits)],
        bitwise_equal_per_sequence=[bool(np.array_equal(a, b)) for a, b in zip(rec, logits)],
        top1_changed_positions=int(sum((a.argmax(-1) != b.argmax(-1)).sum() for a, b in zip(rec, logits))),
    )
    assert max(out["chunked_vs_recurrent"]["max_abs_logit_diff_per_sequence"]) < 5e-4, out["chunked_vs_recurrent"]
    out["decode_vs_prefill"] = decode_check(cls, fam, state, seqs[-1], logits[-1])
    sens = {}
    for label in patch_labels:
        kind, what = PATCH_VARIANTS[label]
        with patched(fam, kind, label) as calls:
            alt, _ = variant_logits(cls, fam, {}, state, seqs)
        assert calls.n > 0, label
        sens[label] = dict(variant=what, **logit_diff(alt, logits))
    for label in state_labels:
        alt, _ = variant_logits(cls, fam, {}, transform_state(label, state, config), seqs)
        assert all(np.isfinite(a).all() for a in alt), label
        sens[label] = dict(variant=STATE_VARIANTS[label], **logit_diff(alt, logits))
    out["sensitivity"] = sens
    return out


def decode_check(cls, fam, state, seq, ref) -> dict:
    """transformers' own cached decode (prefill of the first token, then one token per call with its
    conv / recurrent state cache: causal_conv1d_update and torch_recurrent_gated_delta_rule) against
    the one-call prefill of the same sequence."""
    from .checkpoints import build_config

    _, cfg = build_config(fam)
    m = cls(cfg).eval()
    m.load_state_dict(state, strict=False)
    rows = []
    with torch.no_grad():
        ids = torch.tensor([seq], dtype=torch.long)
        o = m(input_ids=ids[:, :1], use_cache=True)
        rows.append(o.logits[0, -1].numpy().copy())
        cache = o.past_key_values if hasattr(o, "past_key_values") else o.cache
        for t in range(1, len(seq)):
            o = m(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            cache = o.past_key_values if hasattr(o, "past_key_values") else o.cache
            rows.append(o.logits[0, -1].numpy().copy())
    dec = np.stack(rows)
    d = np.abs(dec - ref).max()
    assert d < 1e-3, d
    return dict(
        what="transformers' cached decode, one token per call (conv state: causal_conv1d_update; delta rule: "
        "torch_recurrent_gated_delta_rule from the cached state; full attention: KV cache), against the "
        "one-call prefill (chunked delta rule), on the 70-token sequence",
        max_abs_logit_diff=f32(d),
        top1_changed_positions=int((dec.argmax(-1) != ref.argmax(-1)).sum()),
    )


# ---------------------------------------------------------------------------------------------
# The converter's tensor rules, checked tensor by tensor


def v_head_perm(nk: int, nv: int, dim: int) -> np.ndarray:
    """Row order of the qwen35 GGUF's value-head blocks: GGUF value head j * nk + g (row block)
    holds HF value head g * r + j (grouped -> tiled, the converter's _reorder_v_heads)."""
    r = nv // nk
    return np.arange(nv * dim).reshape(nk, r, dim).transpose(1, 0, 2).reshape(-1)


def gguf_tensor_rules(fam: dict, st: dict, config) -> dict:
    """gguf tensor name -> (expected array as the GGUF reader returns it, rule)."""
    qwen35 = fam["cls"] == "Qwen3_5ForCausalLM"
    nk, nv = config.linear_num_key_heads, config.linear_num_value_heads
    dk, dv = config.linear_key_head_dim, config.linear_value_head_dim
    r = nv // nk
    kd = nk * dk
    plus1 = lambda a: (torch.from_numpy(a) + 1).numpy()  # noqa: E731  (the converter's data_torch + 1)
    neg_exp = lambda a: (-torch.exp(torch.from_numpy(a))).numpy()  # noqa: E731
    rules = {
        "token_embd.weight": (st["model.embed_tokens.weight"], "model.embed_tokens.weight"),
        "output.weight": (st["lm_head.weight"], "lm_head.weight"),
        "output_norm.weight": (plus1(st["model.norm.weight"]), "model.norm.weight + 1"),
    }
    vp, hp = v_head_perm(nk, nv, dv), v_head_perm(nk, nv, 1)
    for L, t in enumerate(config.layer_types):
        p = f"model.layers.{L}."
        b = f"blk.{L}."
        rules[b + "attn_norm.weight"] = (plus1(st[p + "input_layernorm.weight"]), "input_layernorm.weight + 1")
        rules[b + "post_attention_norm.weight"] = (plus1(st[p + "post_attention_layernorm.weight"]),
                                                   "post_attention_layernorm.weight + 1")
        if t == "full_attention":
            a = p + "self_attn."
            rules[b + "attn_q.weight"] = (st[a + "q_proj.weight"], "self_attn.q_proj.weight as is ([q_h | gate_h] per head, no permutation)")
            rules[b + "attn_k.weight"] = (st[a + "k_proj.weight"], "self_attn.k_proj.weight as is")
            rules[b + "attn_v.weight"] = (st[a + "v_proj.weight"], "self_attn.v_proj.weight as is")
            rules[b + "attn_output.weight"] = (st[a + "o_proj.weight"], "self_attn.o_proj.weight as is")
            rules[b + "attn_q_norm.weight"] = (plus1(st[a + "q_norm.weight"]), "self_attn.q_norm.weight + 1")
            rules[b + "attn_k_norm.weight"] = (plus1(st[a + "k_norm.weight"]), "self_attn.k_norm.weight + 1")
        else:
            a = p + "linear_attn."
            conv = st[a + "conv1d.weight"][:, 0, :]
            if qwen35:
                qkv = st[a + "in_proj_qkv.weight"]
                rules[b + "attn_qkv.weight"] = (np.concatenate([qkv[:2 * kd], qkv[2 * kd:][vp]]),
                                                "in_proj_qkv.weight, the v rows' heads reordered grouped -> tiled")
                rules[b + "attn_gate.weight"] = (st[a + "in_proj_z.weight"][vp], "in_proj_z.weight, heads grouped -> tiled")
                rules[b + "ssm_beta.weight"] = (st[a + "in_proj_b.weight"][hp], "in_proj_b.weight, rows grouped -> tiled")
                rules[b + "ssm_alpha.weight"] = (st[a + "in_proj_a.weight"][hp], "in_proj_a.weight, rows grouped -> tiled")
                rules[b + "ssm_a"] = (neg_exp(st[a + "A_log"])[hp], "-exp(A_log), grouped -> tiled")
                rules[b + "ssm_dt.bias"] = (st[a + "dt_bias"][hp], "dt_bias, grouped -> tiled")
                rules[b + "ssm_conv1d.weight"] = (np.concatenate([conv[:2 * kd], conv[2 * kd:][vp]]),
                                                  "conv1d.weight[:, 0, :], the v channels' heads grouped -> tiled")
                rules[b + "ssm_out.weight"] = (st[a + "out_proj.weight"][:, vp], "out_proj.weight, input columns grouped -> tiled")
            else:
                w = st[a + "in_proj_qkvz.weight"].reshape(nk, 2 * dk + 2 * r * dv, -1)
                q, k = w[:, :dk].reshape(kd, -1), w[:, dk:2 * dk].reshape(kd, -1)
                v, z = w[:, 2 * dk:2 * dk + r * dv].reshape(nv * dv, -1), w[:, 2 * dk + r * dv:].reshape(nv * dv, -1)
                rules[b + "attn_qkv.weight"] = (np.concatenate([q, k, v]), "in_proj_qkvz.weight's per-key-head "
                                                "[q_g | k_g | v_g | z_g] blocks gathered as [q all | k all | v all] "
                                                "(value heads stay grouped)")
                rules[b + "attn_gate.weight"] = (z, "in_proj_qkvz.weight's z blocks, all heads (grouped)")
                rules[b + "ssm_ba.weight"] = (st[a + "in_proj_ba.weight"], "in_proj_ba.weight as is (per key head [b_g (r) | a_g (r)])")
                rules[b + "ssm_a"] = (neg_exp(st[a + "A_log"]), "-exp(A_log)")
                rules[b + "ssm_dt.bias"] = (st[a + "dt_bias"], "dt_bias")
                rules[b + "ssm_conv1d.weight"] = (conv, "conv1d.weight[:, 0, :]")
                rules[b + "ssm_out.weight"] = (st[a + "out_proj.weight"], "out_proj.weight as is")
            rules[b + "ssm_norm.weight"] = (st[a + "norm.weight"], "linear_attn.norm.weight as is (no + 1)")
        if "moe" in fam:
            m = p + "mlp."
            rules[b + "ffn_gate_inp.weight"] = (st[m + "gate.weight"], "mlp.gate.weight (router)")
            for part in ("gate", "up", "down"):
                rules[b + f"ffn_{part}_exps.weight"] = (
                    np.stack([st[m + f"experts.{e}.{part}_proj.weight"] for e in range(config.num_experts)]),
                    f"mlp.experts.E.{part}_proj.weight stacked over E",
                )
                rules[b + f"ffn_{part}_shexp.weight"] = (st[m + f"shared_expert.{part}_proj.weight"],
                                                         f"mlp.shared_expert.{part}_proj.weight")
            rules[b + "ffn_gate_inp_shexp.weight"] = (st[m + "shared_expert_gate.weight"], "mlp.shared_expert_gate.weight")
        else:
            for part in ("gate", "up", "down"):
                rules[b + f"ffn_{part}.weight"] = (st[p + f"mlp.{part}_proj.weight"], f"mlp.{part}_proj.weight")
    return rules


def check_gguf_tensors(fam: dict, reader, hf_dir, config) -> dict:
    """Every GGUF tensor against its rule (bitwise); the rules by tensor kind (blk.N -> blk.*)."""
    from safetensors.numpy import load_file

    st = load_file(str(hf_dir / "model.safetensors"))
    g = {t.name: np.asarray(t.data) for t in reader.tensors}
    rules = gguf_tensor_rules(fam, st, config)
    assert sorted(rules) == sorted(g), sorted(set(rules) ^ set(g))
    by_kind: dict = {}
    for name, (want, rule) in rules.items():
        got = g[name]
        ok = got.shape == want.shape and got.dtype == np.float32 and np.array_equal(got, want)
        kind = name.split(".", 2)[2] if name.startswith("blk.") else name
        entry = by_kind.setdefault(kind, dict(rule=rule, bitwise_equal=True, layers=[]))
        entry["bitwise_equal"] &= bool(ok)
        if name.startswith("blk."):
            entry["layers"].append(int(name.split(".")[1]))
    bad = [k for k, v in by_kind.items() if not v["bitwise_equal"]]
    assert not bad, bad
    return by_kind


def check_gguf_meta(fam: dict, meta: dict, config) -> None:
    arch = meta["general.architecture"]
    assert arch == {"Qwen3_5ForCausalLM": "qwen35", "Qwen3NextForCausalLM": "qwen3next"}[fam["cls"]], arch
    want = {
        "block_count": config.num_hidden_layers,  # no MTP block (--no-mtp)
        "ssm.conv_kernel": config.linear_conv_kernel_dim,
        "ssm.state_size": config.linear_key_head_dim,
        "ssm.group_count": config.linear_num_key_heads,
        "ssm.time_step_rank": config.linear_num_value_heads,
        "ssm.inner_size": config.linear_value_head_dim * config.linear_num_value_heads,
        "attention.recurrent_layers": [t == "linear_attention" for t in config.layer_types],
        "full_attention_interval": 4,
        "rope.dimension_count": int(config.head_dim * config.rope_parameters["partial_rotary_factor"]),
        "attention.key_length": config.head_dim,
        "attention.value_length": config.head_dim,
        "rope.freq_base": config.rope_parameters["rope_theta"],
    }
    for k, v in want.items():
        assert meta[f"{arch}.{k}"] == v, (k, meta[f"{arch}.{k}"], v)
    assert not any("nextn" in k for k in meta), meta.keys()
    if arch == "qwen35":
        assert meta["qwen35.rope.dimension_sections"] == list(config.rope_parameters["mrope_section"]) + [0]
    else:
        assert not any("dimension_sections" in k for k in meta)
        assert meta["qwen3next.expert_shared_feed_forward_length"] == config.shared_expert_intermediate_size
    # llama.cpp reads head_v_dim = ssm.state_size (= the key head dim): the two must agree
    assert config.linear_key_head_dim == config.linear_value_head_dim


RULES = {
    "layers": "layer_types[i] (config) is linear_attention (Gated DeltaNet) or full_attention; without "
    "layer_types, transformers derives them from full_attention_interval n: layer i is full iff "
    "(i + 1) % n == 0 (the default 4 gives [lin, lin, lin, full] * k)",
    "decoder_layer": "h = x + mixer(RMSNorm_in(x)); out = h + mlp(RMSNorm_post(h)); logits = lm_head(RMSNorm_final(out))",
    "rms_norm": "input_layernorm, post_attention_layernorm, model.norm, q_norm, k_norm: y = x * rsqrt(mean(x^2) + "
    "eps) * (1 + w), in float32 (w zero-centred, initialised 0); eps = rms_norm_eps",
    "gated_rms_norm": "linear_attn.norm (per value head, over linear_value_head_dim): y = (o * rsqrt(mean(o^2) + eps)) "
    "* w * silu(z): norm first, then the plain weight w (initialised 1), then the gate; eps = rms_norm_eps",
    "gated_deltanet": "x = the layer's normed input. qkv = conv-mixed projection: [q (Hk*dk) | k (Hk*dk) | v (Hv*dv)] "
    "channels; y = silu(causal depthwise conv1d(qkv)) per channel with kernel K taps, no bias: y_t[c] = "
    "sum_{j<K} w[c, j] * qkv_{t-K+1+j}[c] (zero before the sequence start); split into q, k [T, Hk, dk], "
    "v [T, Hv, dv]; z = [T, Hv, dv]; beta = sigmoid(b) [T, Hv]; g = -exp(A_log) * softplus(a + dt_bias) "
    "[T, Hv] (float32); q and k l2-normalised over dk: x * rsqrt(sum(x^2) + 1e-6); q *= dk^-1/2; value head h "
    "uses key head h // (Hv / Hk) (repeat_interleave); per value head, state S [dk, dv] from 0: "
    "S = exp(g_t) S; kv = S^T k_t; delta = beta_t (v_t - kv); S = S + k_t delta^T; o_t = S^T q_t; then "
    "o = gated_rms_norm(o, z) per head, out_proj over the Hv*dv concatenation",
    "gated_attention": "q_proj gives 2*head_dim per head: per head h [q_h | gate_h] (interleaved per head); q = "
    "q_norm(q_h), k = k_norm(k_h) per head (over head_dim, (1 + w)); RoPE (NeoX halves: pairs (i, i + "
    "rope_dim/2)) on the first rope_dim = head_dim * partial_rotary_factor dims of each head, the rest "
    "unrotated; inv_freq_i = theta^(-2i/rope_dim); softmax(q k^T / sqrt(head_dim)) v (GQA: query head h uses "
    "KV head h // (heads / kv_heads)); out = o_proj(attn * sigmoid(gate))",
}


def def_source(mod, name: str) -> list[str]:
    """The lines of a top-level function of `mod` as its file has them (the installed
    transformers wraps these functions in kernels' Func modules, which inspect cannot read)."""
    lines = inspect.getsource(mod).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {name}("))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace() and lines[i][0] != ")")
    while not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def gdn_record(fam, loaded, hf_tensors, summary, checks, gguf_tensor_checks) -> dict:
    mod, prefix = modeling(fam)
    cfg = loaded.config
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    r = nv // nk
    qwen35 = fam["cls"] == "Qwen3_5ForCausalLM"
    meta = summary["meta"]
    arch = meta["general.architecture"]
    importable = {}
    for pkg in ("fla", "causal_conv1d"):
        try:
            importlib.import_module(pkg)
            importable[pkg] = True
        except ImportError:
            importable[pkg] = False
    assert not any(importable.values()), importable  # the oracle is transformers' torch code
    rules = dict(RULES)
    if qwen35:
        rules["projections"] = ("linear_attn.in_proj_qkv [2*Hk*dk + Hv*dv, hidden] (rows [q all heads | k all | v "
                                "all], value heads grouped by key head), in_proj_z [Hv*dv, hidden], in_proj_b "
                                "[Hv, hidden], in_proj_a [Hv, hidden]")
        rules["mlp"] = "down_proj(silu(gate_proj x) * up_proj x)"
        rules["rope"] = ("Qwen3_5TextRotaryEmbedding: interleaved M-RoPE, pair i takes its position from section "
                         "(t, h, w) = i % 3 while i < 3 * mrope_section[that section], else t; for text all three "
                         "positions are the token's position, so this is plain RoPE")
    else:
        rules["projections"] = ("linear_attn.in_proj_qkvz [Hk * (2*dk + 2*r*dv), hidden], r = Hv/Hk: per key head g "
                                "the rows [q_g (dk) | k_g (dk) | v_g (r*dv: value heads g*r .. g*r+r-1) | z_g (r*dv)]; "
                                "in_proj_ba [2*Hv, hidden]: per key head g [b_g (r) | a_g (r)]")
        rules["mlp"] = ("mixture of experts + shared expert: p = softmax(router x) (float32) over num_experts, "
                        "top-k, renormalised when norm_topk_prob; moe = sum_e w_e down_e(silu(gate_e x) * up_e x); "
                        "out = moe + sigmoid(shared_expert_gate x) * shared_expert(x) (shared_expert: a SwiGLU "
                        "MLP of width shared_expert_intermediate_size; shared_expert_gate: [1, hidden], no bias)")
        rules["rope"] = "Qwen3NextRotaryEmbedding: plain RoPE on the first rope_dim dims"
    perm = v_head_perm(nk, nv, 1).tolist()
    return dict(
        rules=rules,
        transformers_functions=dict(
            delta_rule=f"{mod.__name__}.torch_chunk_gated_delta_rule (chunk_size 64; prefill without cache)",
            conv=f"{mod.__name__}.causal_conv1d_fn (F.conv1d, groups = channels, padding K-1, first T outputs)",
            fla_importable=importable["fla"],
            causal_conv1d_importable=importable["causal_conv1d"],
            l2norm_source=def_source(mod, "l2norm"),
            recurrent_source=def_source(mod, "torch_recurrent_gated_delta_rule"),
        ),
        v_heads=dict(
            num_k_heads=nk,
            num_v_heads=nv,
            hf="grouped: value head h uses key head h // %d" % r,
            gguf_order="tiled" if qwen35 else "grouped",
            gguf_v_head_to_hf_v_head=perm if qwen35 else list(range(nv)),
            gguf_key_head_of_v_head=[p % nk for p in range(nv)] if qwen35 else [p // r for p in range(nv)],
            gguf_note=(
                "the converter (_LinearAttentionVReorderBase) reorders every value-head-indexed tensor from grouped "
                "to tiled: GGUF value head j*Hk + g = HF value head g*r + j (attn_qkv's v rows, attn_gate, ssm_beta, "
                "ssm_alpha, ssm_a, ssm_dt, ssm_conv1d's v channels, ssm_out's input columns); llama.cpp's qwen35 "
                "graph tiles q/k (ggml_repeat_4d): GGUF value head p uses key head p % Hk; ssm_norm (per head_v_dim) "
                "is shared by all heads and unchanged"
                if qwen35
                else "the converter keeps the value heads grouped (HF order): GGUF value head p uses key head p // r; "
                "llama.cpp's qwen3next graph repeat-interleaves q/k"
            ),
        ),
        mtp=dict(
            config=dict(mtp_num_hidden_layers=getattr(cfg, "mtp_num_hidden_layers", None)),
            conversion="convert_hf_to_gguf.py --no-mtp (model class no_mtp = True): without mtp.* tensors the "
            "Qwen3-Next / Qwen3.5 converters fail an assertion (_QwenMtpMixin.__init__: mtp_num_hidden_layers 0 and "
            "no mtp tensors found); with --no-mtp the GGUF has block_count = num_hidden_layers and no nextn key",
        ),
        gguf_tensor_checks=gguf_tensor_checks,
        gguf_checks=checks,
        hf_tensors=hf_tensors,
        **({} if "moe" in fam else dict(gguf=dict(meta=meta, tensors=summary["tensors"]))),
        gguf_arch=arch,
    )


# ---------------------------------------------------------------------------------------------
# An independent float64 forward of model.gguf, written from llama.cpp's qwen35 / qwen3next graphs


def gguf_reference_logits(reader, meta: dict, seqs) -> list[np.ndarray]:
    """numpy float64 forward of the GGUF as llama.cpp's graph reads it: norms multiply by the stored
    weight (the converter added 1), ssm_a used as stored (= -exp(A_log)), value head p reads key head
    p % Hk (qwen35, tiled) or p // r (qwen3next, grouped), q/k l2 norm eps = rms eps, the delta rule
    token by token, interleaved M-RoPE (qwen35) / NeoX RoPE (qwen3next) on rope.dimension_count
    dims, MoE softmax -> top-k -> renormalised + sigmoid-gated shared expert (qwen3next)."""
    arch = meta["general.architecture"]
    W = {t.name: np.asarray(t.data).astype(np.float64) for t in reader.tensors}
    kv = lambda k: meta[f"{arch}.{k}"]  # noqa: E731
    eps = float(kv("attention.layer_norm_rms_epsilon"))
    n_layer, n_head, n_kv, hd = kv("block_count"), kv("attention.head_count"), kv("attention.head_count_kv"), kv("attention.key_length")
    dk, Hk, Hv, K = kv("ssm.state_size"), kv("ssm.group_count"), kv("ssm.time_step_rank"), kv("ssm.conv_kernel")
    dv = kv("ssm.inner_size") // Hv
    r = Hv // Hk
    recurrent = kv("attention.recurrent_layers")
    n_rot, theta = kv("rope.dimension_count"), float(kv("rope.freq_base"))
    sections = list(kv("rope.dimension_sections")) if arch == "qwen35" else None
    n_exp, n_used = (kv("expert_count"), kv("expert_used_count")) if arch == "qwen3next" else (0, 0)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    silu = lambda x: x / (1.0 + np.exp(-x))  # noqa: E731
    sigmoid = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    softplus = lambda x: np.log1p(np.exp(x))  # noqa: E731

    def rope(x, pos):  # x [T, heads, hd]; NeoX pairs (i, i + n_rot/2) on the first n_rot dims
        half = n_rot // 2
        inv = theta ** (-2.0 * np.arange(half) / n_rot)
        p = np.repeat(pos[:, None].astype(np.float64), half, axis=1)  # [T, half]
        if sections is not None:  # llama.cpp's interleaved M-RoPE: text positions (p, p, p, 0)
            sect_dims = sum(sections)
            for i in range(half):
                s = i % sect_dims
                t_sec = (s % 3 == 0 and s < 3 * sections[0]) or (s % 3 == 1 and s < 3 * sections[1]) or (
                    s % 3 == 2 and s < 3 * sections[2])
                if not t_sec:
                    p[:, i] = 0.0  # the 4th (e) position, 0 for text
        ang = p * inv
        c, s_ = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:n_rot]
        out = x.copy()
        out[..., :half] = x1 * c - x2 * s_
        out[..., half:n_rot] = x2 * c + x1 * s_
        return out

    def ffn(h, L):
        b = f"blk.{L}."
        if arch == "qwen35":
            return (silu(h @ W[b + "ffn_gate.weight"].T) * (h @ W[b + "ffn_up.weight"].T)) @ W[b + "ffn_down.weight"].T
        logits = h @ W[b + "ffn_gate_inp.weight"].T
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-p[t], kind="stable")[:n_used]
            w = p[t, top] / p[t, top].sum()
            for e, we in zip(top, w):
                y = silu(W[b + "ffn_gate_exps.weight"][e] @ h[t]) * (W[b + "ffn_up_exps.weight"][e] @ h[t])
                out[t] += we * (W[b + "ffn_down_exps.weight"][e] @ y)
        sh = (silu(h @ W[b + "ffn_gate_shexp.weight"].T) * (h @ W[b + "ffn_up_shexp.weight"].T)) @ W[b + "ffn_down_shexp.weight"].T
        return out + sigmoid(h @ W[b + "ffn_gate_inp_shexp.weight"].T) * sh

    def linear_attn(h, L):
        b = f"blk.{L}."
        T = h.shape[0]
        qkv = h @ W[b + "attn_qkv.weight"].T
        z = (h @ W[b + "attn_gate.weight"].T).reshape(T, Hv, dv)
        if arch == "qwen35":
            bb, aa = h @ W[b + "ssm_beta.weight"].T, h @ W[b + "ssm_alpha.weight"].T
        else:
            ba = (h @ W[b + "ssm_ba.weight"].T).reshape(T, Hk, 2 * r)
            bb, aa = ba[..., :r].reshape(T, Hv), ba[..., r:].reshape(T, Hv)
        beta = sigmoid(bb)
        g = W[b + "ssm_a"] * softplus(aa + W[b + "ssm_dt.bias"])
        conv = W[b + "ssm_conv1d.weight"]  # [channels, K]
        xp = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv])
        y = silu(np.stack([(xp[t:t + K].T * conv).sum(-1) for t in range(T)]))
        q = y[:, :Hk * dk].reshape(T, Hk, dk)
        k = y[:, Hk * dk:2 * Hk * dk].reshape(T, Hk, dk)
        v = y[:, 2 * Hk * dk:].reshape(T, Hv, dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps) / np.sqrt(dk)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
        kh = [(p % Hk) if arch == "qwen35" else (p // r) for p in range(Hv)]
        S = np.zeros((Hv, dk, dv))
        o = np.zeros((T, Hv, dv))
        for t in range(T):
            for p in range(Hv):
                S[p] *= np.exp(g[t, p])
                delta = beta[t, p] * (v[t, p] - S[p].T @ k[t, kh[p]])
                S[p] += np.outer(k[t, kh[p]], delta)
                o[t, p] = S[p].T @ q[t, kh[p]]
        o = rms(o, W[b + "ssm_norm.weight"]) * silu(z)
        return o.reshape(T, Hv * dv) @ W[b + "ssm_out.weight"].T

    def attn(h, L):
        b = f"blk.{L}."
        T = h.shape[0]
        qg = (h @ W[b + "attn_q.weight"].T).reshape(T, n_head, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(T, n_head * hd)
        k = (h @ W[b + "attn_k.weight"].T).reshape(T, n_kv, hd)
        v = (h @ W[b + "attn_v.weight"].T).reshape(T, n_kv, hd)
        q, k = rms(q, W[b + "attn_q_norm.weight"]), rms(k, W[b + "attn_k_norm.weight"])
        pos = np.arange(T)
        q, k = rope(q, pos), rope(k, pos)
        o = np.zeros((T, n_head, hd))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for hh in range(n_head):
            kk = hh // (n_head // n_kv)
            s = q[:, hh] @ k[:, kk].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            o[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kk]
        return (o.reshape(T, n_head * hd) * sigmoid(gate)) @ W[b + "attn_output.weight"].T

    out = []
    for seq in seqs:
        x = W["token_embd.weight"][np.array(seq)]
        for L in range(n_layer):
            h = rms(x, W[f"blk.{L}.attn_norm.weight"])
            x = x + (linear_attn(h, L) if recurrent[L] else attn(h, L))
            x = x + ffn(rms(x, W[f"blk.{L}.post_attention_norm.weight"]), L)
        out.append(rms(x, W["output_norm.weight"]) @ W["output.weight"].T)
    return out


def float64_reference(reader, meta, seqs, logits, cls, fam, state) -> dict:
    ref = gguf_reference_logits(reader, meta, seqs)
    with patched(fam, "delta", "recurrent"):
        rec, _ = variant_logits(cls, fam, {}, state, seqs)
    d = [float(np.abs(a - b).max()) for a, b in zip(logits, ref)]
    dr = [float(np.abs(a - b).max()) for a, b in zip(rec, ref)]
    assert max(d) < 1e-3, d  # the GGUF, read as llama.cpp does, is transformers' model
    return dict(
        what="an independent numpy float64 forward of model.gguf written from llama.cpp's graph (" + meta[
            "general.architecture"] + ".cpp: recurrent delta rule token by token; see gguf_reference_logits in "
        "scripts/family_fixtures/gdn.py) against transformers' float32 outputs: how far the oracle itself is "
        "from float64 arithmetic",
        max_abs_logit_diff_per_sequence=[f32(x) for x in d],
        top1_changed_positions=int(sum((a.argmax(-1) != b.argmax(-1)).sum() for a, b in zip(logits, ref))),
        transformers_recurrent_max_abs_logit_diff_per_sequence=[f32(x) for x in dr],
        logits_first_sequence=[[f32(v) for v in row] for row in ref[0]],
    )
