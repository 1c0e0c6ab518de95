"""Nemotron-H (hybrid Mamba-2 / attention / squared-ReLU MLP blocks; transformers' nemotron_h module,
GGUF arch nemotron_h): the hub-style config.json, the converter run as llama.cpp pins it, the GGUF
tensor rules checked tensor by tensor, variants of transformers' own functions for the sensitivity
entries, the chunked-vs-recurrent and decode checks, a float64 forward of the GGUF and the
`nemotron_h` record."""

from __future__ import annotations

import contextlib
import importlib
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoints import build_config, f32, logit_diff, run_logits, variant_logits

MOD = "transformers.models.nemotron_h.modeling_nemotron_h"
PATTERN_CHARS = {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}


def modeling():
    return importlib.import_module(MOD)


# ---------------------------------------------------------------------------------------------
# hf/config.json as the hub's Nemotron-H checkpoints spell it

# Keys transformers 5's save_pretrained writes that a dense hub config (nvidia/Nemotron-H-8B-Base-8K,
# NVIDIA-Nemotron-Nano-9B-v2) does not carry: the mixture-of-experts and MTP defaults of NemotronHConfig,
# and time_step_limit, which transformers 5 spells [0.0, {"__float__": "Infinity"}] (no JSON literal
# for infinity; absent, transformers takes its default (0.0, inf)).
HUB_DROPPED_KEYS = (
    "moe_intermediate_size", "moe_latent_size", "moe_shared_expert_intermediate_size", "moe_shared_expert_overlap",
    "mtp_layers_block_type", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob",
    "num_experts_per_tok", "num_nextn_predict_layers", "output_router_logits", "routed_scaling_factor",
    "topk_group", "time_step_limit", "rms_norm_eps",
)


def write_hub_config(hf_dir: Path, config) -> dict:
    """Rewrite transformers' config.json in the hub's form: the block types as the
    hybrid_override_pattern string (M = Mamba-2, * = attention, - = MLP, E = MoE) with
    num_hidden_layers, in place of the layers_block_type list; no MoE / MTP keys. llama.cpp's
    converter needs this form: it takes a dense MLP block only from a '-' of the string (a
    layers_block_type list marks only "moe" entries as FFN blocks), and treats any config carrying
    num_experts_per_tok as the MoE arch nemotron_h_moe."""
    path = hf_dir / "config.json"
    d = json.loads(path.read_text())
    types = d.pop("layers_block_type")
    assert types == list(config.layers_block_type), types
    out = {}
    for k, v in d.items():
        if k in HUB_DROPPED_KEYS:
            continue
        out[k] = v
        if k == "hidden_size":
            out["hybrid_override_pattern"] = "".join(PATTERN_CHARS[t] for t in types)
    out["num_hidden_layers"] = len(types)
    out = dict(sorted(out.items()))
    path.write_text(json.dumps(out, indent=2) + "\n")
    assert config.time_step_limit[0] == 0.0 and math.isinf(config.time_step_limit[1])
    return dict(
        hybrid_override_pattern=out["hybrid_override_pattern"],
        dropped_keys=[k for k in HUB_DROPPED_KEYS if k in d],
        note="hf/config.json is transformers 5's save_pretrained output rewritten in the hub's form "
        "(nvidia/Nemotron-H-8B-Base-8K, NVIDIA-Nemotron-Nano-9B-v2): hybrid_override_pattern + num_hidden_layers "
        "instead of layers_block_type, without the MoE / MTP keys and without time_step_limit (transformers 5 "
        "writes [0.0, {\"__float__\": \"Infinity\"}]; absent, it is (0.0, inf)); rms_norm_eps (the generator's "
        "common kwargs; NemotronHConfig reads layer_norm_epsilon, and the converter would write it as "
        "layer_norm_rms_epsilon) dropped too. transformers reads it back to the same layers_block_type and "
        "mixer geometry (asserted); llama.cpp's converter needs this form (see converter)",
    )


def check_reloaded_config(loaded_cfg, cfg) -> None:
    for k in ("layers_block_type", "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel",
              "use_conv_bias", "chunk_size", "layer_norm_epsilon", "mlp_hidden_act", "intermediate_size",
              "num_attention_heads", "num_key_value_heads", "head_dim", "use_bias", "mlp_bias", "tie_word_embeddings"):
        assert getattr(loaded_cfg, k) == getattr(cfg, k), (k, getattr(loaded_cfg, k), getattr(cfg, k))
    assert tuple(loaded_cfg.time_step_limit) == (0.0, float("inf")), loaded_cfg.time_step_limit


# ---------------------------------------------------------------------------------------------
# The converter: llama.cpp pins transformers 4.57.6 for convert_hf_to_gguf.py, which has no
# nemotron_h model type, so ModelBase.load_hparams falls back to reading config.json itself.


@contextlib.contextmanager
def autoconfig_unavailable():
    """ModelBase.load_hparams as it runs under llama.cpp's pinned transformers (4.57.6, no nemotron_h):
    AutoConfig.from_pretrained fails and the converter reads config.json itself. Under the installed
    transformers 5 it would read AutoConfig(...).to_dict() instead, which lists every NemotronHConfig
    default (num_experts_per_tok among them) and the block types as a list (see converter_with_autoconfig)."""
    import conversion.base as base

    orig = base.AutoConfig

    class _NoNemotronH:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise ValueError("model type nemotron_h unknown (as under llama.cpp's pinned transformers 4.57.6)")

    base.AutoConfig = _NoNemotronH
    try:
        yield
    finally:
        base.AutoConfig = orig


def converter_with_autoconfig(hf_dir: Path) -> dict:
    """What the same converter writes when it reads the config through the installed transformers 5
    (AutoConfig(...).to_dict()): recorded, not shipped."""
    import tempfile

    from .gguf_convert import convert_to_gguf, gguf_summary

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "autoconfig.gguf"
        convert_to_gguf(hf_dir, "nemotron_h", path)
        s = gguf_summary(path)
    meta = s["meta"]
    arch = meta["general.architecture"]
    keys = {k: v for k, v in meta.items() if k.startswith(arch + ".") and not k.startswith(arch + ".ssm.")}
    return dict(
        what="the same conversion with the installed transformers 5's AutoConfig reading the config (llama.cpp pins "
        "transformers 4.57.6, which has no nemotron_h): hparams = NemotronHConfig(...).to_dict(), which carries "
        "num_experts_per_tok (a default) and layers_block_type as a list; NemotronHModel.__init__ then picks the "
        "MoE arch, and the list form marks no '-' MLP block, so feed_forward_length is all zeros: llama.cpp would "
        "take the MLP blocks for Mamba-2 blocks (n_head_kv = n_ff = 0) and fail on their missing ssm tensors",
        architecture=arch,
        keys=keys,
        tensor_names_layer_1=sorted(n for n in s["tensors"] if n.startswith("blk.1.")),
    )


def check_gguf_meta(meta: dict, config) -> None:
    assert meta["general.architecture"] == "nemotron_h", meta["general.architecture"]
    a = "nemotron_h."
    types = list(config.layers_block_type)
    want = {
        "block_count": len(types),
        "embedding_length": config.hidden_size,
        "feed_forward_length": [config.intermediate_size if t == "mlp" else 0 for t in types],
        "attention.head_count": config.num_attention_heads,
        "attention.head_count_kv": [config.num_key_value_heads if t == "full_attention" else 0 for t in types],
        "attention.key_length": config.head_dim,
        "attention.value_length": config.head_dim,
        "attention.layer_norm_epsilon": float(np.float32(config.layer_norm_epsilon)),
        "ssm.conv_kernel": config.conv_kernel,
        "ssm.inner_size": config.mamba_num_heads * config.mamba_head_dim,
        "ssm.state_size": config.ssm_state_size,
        "ssm.time_step_rank": config.mamba_num_heads,
        "ssm.group_count": config.n_groups,
        "context_length": 2 ** 20,
        "rope.scaling.finetuned": False,
        "vocab_size": config.vocab_size,
    }
    for k, v in want.items():
        assert meta[a + k] == v, (k, meta[a + k], v)
    # no rms-eps key (llama.cpp falls back to attention.layer_norm_epsilon), no rope base, no expert
    # keys, no time-step limit, no attention scale
    assert not any(k.endswith(("layer_norm_rms_epsilon", "freq_base")) for k in meta), meta.keys()
    assert not any("expert" in k or "time_step_limit" in k or "attention.scale" in k for k in meta), meta.keys()


def permute_qk(w: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """LlamaModel.permute (convert_hf_to_gguf): per head, rows (i, i + d/2) interleaved."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensor_rules(st: dict, config) -> dict:
    """gguf tensor name -> (expected array as the GGUF reader returns it (numpy order: GGUF dims
    reversed), rule)."""
    H, G = config.mamba_num_heads, config.n_groups
    d_inner = H * config.mamba_head_dim
    neg_exp = lambda a: (-torch.exp(torch.from_numpy(a))).numpy()  # noqa: E731  (the converter's -torch.exp)
    rules = {
        "token_embd.weight": (st["backbone.embeddings.weight"], "backbone.embeddings.weight"),
        "output_norm.weight": (st["backbone.norm_f.weight"], "backbone.norm_f.weight as is (no + 1)"),
        "output.weight": (st["lm_head.weight"], "lm_head.weight (untied)"),
    }
    for L, t in enumerate(config.layers_block_type):
        p, b = f"backbone.layers.{L}.", f"blk.{L}."
        rules[b + "attn_norm.weight"] = (st[p + "norm.weight"], "layers.N.norm.weight (every block's one pre-norm, "
                                         "named attn_norm whatever the block type)")
        m = p + "mixer."
        if t == "linear_attention":
            rules[b + "ssm_in.weight"] = (st[m + "in_proj.weight"], "mixer.in_proj.weight as is (rows [z | xBC | dt])")
            rules[b + "ssm_conv1d.weight"] = (st[m + "conv1d.weight"][:, 0, :], "mixer.conv1d.weight squeezed "
                                              "[conv_dim, 1, K] -> [conv_dim, K] (GGUF dims {K, conv_dim})")
            rules[b + "ssm_conv1d.bias"] = (st[m + "conv1d.bias"], "mixer.conv1d.bias")
            rules[b + "ssm_dt.bias"] = (st[m + "dt_bias"], "mixer.dt_bias (renamed dt_proj.bias by the converter)")
            rules[b + "ssm_a"] = (neg_exp(st[m + "A_log"]).reshape(H, 1), "-exp(A_log) reshaped [H, 1] "
                                  "(GGUF dims {1, H}); no .weight suffix")
            rules[b + "ssm_d"] = (st[m + "D"].reshape(H, 1), "mixer.D reshaped [H, 1] (GGUF dims {1, H}); no .weight suffix")
            rules[b + "ssm_norm.weight"] = (st[m + "norm.weight"].reshape(G, d_inner // G), "mixer.norm.weight "
                                            "reshaped [n_groups, d_inner / n_groups] (GGUF dims {d_inner/G, G}), no + 1")
            rules[b + "ssm_out.weight"] = (st[m + "out_proj.weight"], "mixer.out_proj.weight as is")
        elif t == "full_attention":
            nh, nkv = config.num_attention_heads, config.num_key_value_heads
            rules[b + "attn_q.weight"] = (permute_qk(st[m + "q_proj.weight"], nh, nh), "mixer.q_proj.weight "
                                          "PERMUTED (LlamaModel.permute, n_head): the converter's llama q/k "
                                          "permutation, though no block uses RoPE; q.k per head is unchanged")
            rules[b + "attn_k.weight"] = (permute_qk(st[m + "k_proj.weight"], nh, nkv), "mixer.k_proj.weight "
                                          "PERMUTED (LlamaModel.permute, n_head_kv)")
            rules[b + "attn_v.weight"] = (st[m + "v_proj.weight"], "mixer.v_proj.weight as is")
            rules[b + "attn_output.weight"] = (st[m + "o_proj.weight"], "mixer.o_proj.weight as is")
        elif t == "mlp":
            rules[b + "ffn_up.weight"] = (st[m + "up_proj.weight"], "mixer.up_proj.weight as is")
            rules[b + "ffn_down.weight"] = (st[m + "down_proj.weight"], "mixer.down_proj.weight as is")
        else:
            raise ValueError(t)
    return rules


def check_gguf_tensors(reader, hf_dir: Path, config) -> dict:
    from safetensors.numpy import load_file

    st = load_file(str(hf_dir / "model.safetensors"))
    g = {t.name: np.asarray(t.data) for t in reader.tensors}
    rules = gguf_tensor_rules(st, config)
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
    # the permutation is not the identity at this head_dim
    q = st["backbone.layers.%d.mixer.q_proj.weight" % list(config.layers_block_type).index("full_attention")]
    assert not np.array_equal(permute_qk(q, config.num_attention_heads, config.num_attention_heads), q)
    return by_kind


# ---------------------------------------------------------------------------------------------
# Variants: transformers' functions replaced ("patch") or the checkpoint's tensors transformed ("state")


PATCH_VARIANTS = {
    # the selective scan (the module-level mamba2_chunk_scan that mamba2_scan_forward calls)
    "recurrent": ("scan", "transformers' single-step mamba2_selective_state_update (the decode step), token by token "
                  "from a zero state, in place of the chunked mamba2_chunk_scan (SSD) that prefill runs"),
    "ssm_state_not_carried": ("scan", "every token starts from a zero SSM state: y_t = C_t . (dt_t x_t B_t^T) + D x_t "
                              "(a decode step that does not carry the recurrent state)"),
    "groups_tiled": ("scan", "head h reads B/C group h % n_groups (tiled) instead of h // (heads / n_groups) "
                     "(repeat_interleave)"),
    # the gated RMSNorm
    "gate_after_norm": ("gated_norm", "RMSNorm_group(y) * w * silu(z) (norm, then gate) instead of "
                        "RMSNorm_group(y * silu(z)) * w (gate first: norm_before_gate = False)"),
    "norm_over_whole_width": ("gated_norm", "the gated RMSNorm over the whole d_inner instead of per group of "
                              "d_inner / n_groups"),
    "no_gate": ("gated_norm", "the gated RMSNorm without its silu(z) gate"),
    # attention
    "attention_with_rope": ("attention", "NeoX RoPE (theta 1e4, all head_dim dims) applied to q and k in the attention "
                            "blocks, which have none"),
}
STATE_VARIANTS = {
    "d_skip_dropped": "D = 0: no D * x skip in the Mamba-2 output",
    "conv_bias_dropped": "the depthwise conv without its bias",
    "dt_bias_dropped": "dt = softplus(dt_raw) without dt_bias",
    "conv_state_not_carried": "the conv's taps for the K-1 previous positions zeroed (only the current token's tap "
    "kept): a decode step that does not carry the conv state",
    "conv_kernel_reversed": "the conv taps applied in reverse order (tap K-1 on the oldest position instead of the "
    "current one)",
    "ssm_a_exp_twice": "A = -exp(ssm_a) with the GGUF's ssm_a (= -exp(A_log)): A_log -> -exp(A_log)",
    "B_C_swapped": "xBC read as [x | C | B] instead of [x | B | C] (the B and C channel blocks of in_proj, conv "
    "weight and conv bias swapped)",
}
CONFIG_VARIANTS = {
    "relu_not_squared": ("MLP activation relu instead of relu2 (squared ReLU)", dict(mlp_hidden_act="relu")),
}


class Calls:
    def __init__(self):
        self.n = 0
        self.seen: list[dict] = []


@contextlib.contextmanager
def patched(kind: str, mode: str, calls: Calls | None = None):
    """Replace one of transformers' functions / forwards; `mode` "hf" reimplements (or passes
    through to) transformers' own computation."""
    mod = modeling()
    calls = calls or Calls()
    if kind == "scan":
        orig_scan, step = mod.mamba2_chunk_scan, mod.mamba2_selective_state_update

        def scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None, dt_softplus=False,
                 dt_limit=(0.0, float("inf")), return_final_states=False, **kw):
            assert initial_states is None and not return_final_states and dt_softplus
            calls.n += 1
            d = F.softplus(dt + dt_bias.to(dt.dtype))
            calls.seen.append(dict(dt=d.float().clone(), decay=torch.exp(d.float() * A.float()).clone()))
            b, T, Hh, P = hidden_states.shape
            G, N = B.shape[2], B.shape[3]
            if mode in ("recurrent", "ssm_state_not_carried"):
                outs = []
                state = torch.zeros(b, Hh, P, N, dtype=torch.float32)
                for t in range(T):
                    if mode == "ssm_state_not_carried":
                        state = torch.zeros(b, Hh, P, N, dtype=torch.float32)
                    y = step(state, hidden_states[:, t], dt[:, t, :, None].expand(-1, -1, P),
                             A[:, None, None].expand(-1, P, N), B[:, t], C[:, t], D[:, None].expand(-1, P),
                             z=None, dt_bias=dt_bias[:, None].expand(-1, P), dt_softplus=True)
                    outs.append(y)
                return torch.stack(outs, dim=1)
            if mode == "groups_tiled":
                B, C = B.repeat(1, 1, Hh // G, 1), C.repeat(1, 1, Hh // G, 1)
            else:
                assert mode == "hf", mode
            return orig_scan(hidden_states, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias, initial_states=None,
                             dt_softplus=True, dt_limit=dt_limit, return_final_states=False, **kw)

        mod.mamba2_chunk_scan = scan
        try:
            yield calls
        finally:
            mod.mamba2_chunk_scan = orig_scan
        return
    if kind == "gated_norm":
        cls = mod.NemotronHRMSNormGated

        def forward(self, hidden_states, gate=None):
            calls.n += 1
            input_dtype = hidden_states.dtype
            hs = hidden_states.to(torch.float32)
            if mode in ("hf", "norm_over_whole_width"):
                hs = hs * F.silu(gate.to(torch.float32))
            group = hs.shape[-1] if mode == "norm_over_whole_width" else self.group_size
            *prefix, last = hs.shape
            hg = hs.view(*prefix, last // group, group)
            var = hg.pow(2).mean(-1, keepdim=True)
            hg = hg * torch.rsqrt(var + self.variance_epsilon)
            out = self.weight * hg.view(*prefix, last).to(input_dtype)
            if mode == "gate_after_norm":
                out = out * F.silu(gate.to(torch.float32))
            else:
                assert mode in ("hf", "norm_over_whole_width", "no_gate"), mode
            return out
    elif kind == "attention":
        cls = mod.NemotronHAttention

        def forward(self, hidden_states, attention_mask=None, cache=None, **kwargs):
            assert cache is None
            calls.n += 1
            input_shape = hidden_states.shape[:-1]
            hidden_shape = (*input_shape, -1, self.head_dim)
            q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            if mode == "attention_with_rope":
                T = hidden_states.shape[1]
                inv = 1.0 / (10000.0 ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
                ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
                emb = torch.cat([ang, ang], dim=-1)
                q, k = mod.apply_rotary_pos_emb(q, k, emb.cos()[None], emb.sin()[None])
            else:
                assert mode == "hf", mode
            out, w = mod.eager_attention_forward(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling)
            out = out.reshape(*input_shape, -1).contiguous()
            return self.o_proj(out), w
    else:
        raise ValueError(kind)
    orig = cls.forward
    cls.forward = forward
    try:
        yield calls
    finally:
        cls.forward = orig


def transform_state(label: str, state: dict, config) -> dict:
    st = dict(state)
    d_inner = config.mamba_num_heads * config.mamba_head_dim
    gn = config.n_groups * config.ssm_state_size
    hit = 0
    for k, v in state.items():
        new = None
        if label == "d_skip_dropped" and k.endswith(".mixer.D"):
            new = torch.zeros_like(v)
        elif label == "conv_bias_dropped" and k.endswith(".mixer.conv1d.bias"):
            new = torch.zeros_like(v)
        elif label == "dt_bias_dropped" and k.endswith(".mixer.dt_bias"):
            new = torch.zeros_like(v)
        elif label == "conv_state_not_carried" and k.endswith(".mixer.conv1d.weight"):
            new = v.clone()
            new[..., :-1] = 0.0
        elif label == "conv_kernel_reversed" and k.endswith(".mixer.conv1d.weight"):
            new = v.flip(-1)
        elif label == "ssm_a_exp_twice" and k.endswith(".mixer.A_log"):
            new = -torch.exp(v)
        elif label == "B_C_swapped" and k.endswith((".mixer.conv1d.weight", ".mixer.conv1d.bias", ".mixer.in_proj.weight")):
            off = d_inner if k.endswith("in_proj.weight") else 0  # in_proj rows: [z (d_inner) | x | B | C | dt]
            new = v.clone()
            xb, xc = off + d_inner, off + d_inner + gn
            new[xb:xb + gn], new[xc:xc + gn] = v[xc:xc + gn], v[xb:xb + gn]
        if new is not None:
            assert new.shape == v.shape and not torch.equal(new, v), (label, k)
            st[k] = new
            hit += 1
    assert hit, label
    return st


def decode_check(cls, fam, state, seq, ref) -> dict:
    """transformers' own cached decode (the first token as a one-token prefill, then one token per
    call: causal_conv1d_update and mamba2_selective_state_update from the cached conv / SSM state,
    the KV cache for attention) against the one-call prefill of the same sequence."""
    _, cfg = build_config(fam)
    m = cls(cfg).eval()
    m.load_state_dict(state, strict=False)
    rows = []
    with torch.no_grad():
        ids = torch.tensor([seq], dtype=torch.long)
        o = m(input_ids=ids[:, :1], use_cache=True)
        rows.append(o.logits[0, -1].numpy().copy())
        cache = o.cache
        for t in range(1, len(seq)):
            o = m(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
            cache = o.cache
            rows.append(o.logits[0, -1].numpy().copy())
    dec = np.stack(rows)
    d = np.abs(dec - ref).max()
    assert d < 1e-3, d
    return dict(
        what="transformers' cached decode, one token per call (conv state: causal_conv1d_update; SSM: "
        "mamba2_selective_state_update from the cached state; attention: KV cache), against the one-call "
        "prefill (mamba2_chunk_scan, chunk_size %d), on the %d-token sequence" % (cfg.chunk_size, len(seq)),
        max_abs_logit_diff=f32(d),
        top1_changed_positions=int((dec.argmax(-1) != ref.argmax(-1)).sum()),
    )


def nemotron_checks(cls, fam: dict, state: dict, seqs, logits, config) -> dict:
    out: dict = {}
    types = list(config.layers_block_type)
    n_m, n_a = types.count("linear_attention"), types.count("full_attention")
    bitwise = {}
    for kind, per_seq in (("scan", n_m), ("gated_norm", n_m), ("attention", n_a)):
        with patched(kind, "hf") as calls:
            alt, _ = variant_logits(cls, fam, {}, state, seqs)
        assert calls.n == per_seq * len(seqs), (kind, calls.n)
        bitwise[kind] = all(np.array_equal(a, b) for a, b in zip(alt, logits))
        assert bitwise[kind], f"the {kind} reimplementation differs from transformers"
        if kind == "scan":
            seen = calls.seen[-n_m:]
            layers = [i for i, t in enumerate(types) if t == "linear_attention"]
            out["dt_and_decay_longest_sequence"] = [
                dict(
                    layer=i,
                    dt_softplus=dict(min=f32(s["dt"].min()), median=f32(s["dt"].median()), max=f32(s["dt"].max())),
                    decay_exp_dt_A=dict(min=f32(s["decay"].min()), median=f32(s["decay"].median()),
                                        max=f32(s["decay"].max())),
                )
                for i, s in zip(layers, seen)
            ]
    out["reimplementations_bitwise_equal"] = bitwise
    with patched("scan", "recurrent"):
        rec, _ = variant_logits(cls, fam, {}, state, seqs)
    out["chunked_vs_recurrent"] = dict(
        what=PATCH_VARIANTS["recurrent"][1] + "; chunk_size %d, so the sequences span 1, 3 and 5 chunks" % config.chunk_size,
        max_abs_logit_diff_per_sequence=[f32(np.abs(a - b).max()) for a, b in zip(rec, logits)],
        bitwise_equal_per_sequence=[bool(np.array_equal(a, b)) for a, b in zip(rec, logits)],
        top1_changed_positions=int(sum((a.argmax(-1) != b.argmax(-1)).sum() for a, b in zip(rec, logits))),
    )
    assert max(out["chunked_vs_recurrent"]["max_abs_logit_diff_per_sequence"]) < 5e-4, out["chunked_vs_recurrent"]
    c128, _ = variant_logits(cls, fam, dict(chunk_size=128), state, seqs)
    out["chunk_size_128_vs_%d" % config.chunk_size] = dict(
        what="the same prefill with chunk_size 128 (the hub models' value: one chunk for every sequence here)",
        max_abs_logit_diff_per_sequence=[f32(np.abs(a - b).max()) for a, b in zip(c128, logits)],
    )
    out["decode_vs_prefill"] = decode_check(cls, fam, state, seqs[-1], logits[-1])
    sens = {}
    for label, (kind, what) in PATCH_VARIANTS.items():
        if label == "recurrent":
            continue
        with patched(kind, label) as calls:
            alt, _ = variant_logits(cls, fam, {}, state, seqs)
        assert calls.n > 0, label
        sens[label] = dict(variant=what, **logit_diff(alt, logits))
    for label, what in STATE_VARIANTS.items():
        alt, _ = variant_logits(cls, fam, {}, transform_state(label, state, config), seqs)
        assert all(np.isfinite(a).all() for a in alt), label
        sens[label] = dict(variant=what, **logit_diff(alt, logits))
    for label, (what, ov) in CONFIG_VARIANTS.items():
        alt, _ = variant_logits(cls, fam, ov, state, seqs)
        sens[label] = dict(variant=what, config_overrides=ov, **logit_diff(alt, logits))
    out["sensitivity"] = sens
    return out


# ---------------------------------------------------------------------------------------------
# An independent float64 forward of model.gguf, written from llama.cpp's nemotron_h graph
# (src/models/nemotron-h.cpp, llm_build_mamba_base::build_mamba2_layer, ggml_ssm_conv / ggml_ssm_scan)


def gguf_reference_logits(reader, meta: dict, seqs) -> list[np.ndarray]:
    a = "nemotron_h."
    W = {t.name: np.asarray(t.data).astype(np.float64) for t in reader.tensors}
    eps = float(meta.get(a + "attention.layer_norm_rms_epsilon", meta[a + "attention.layer_norm_epsilon"]))
    n_layer = meta[a + "block_count"]
    n_head = meta[a + "attention.head_count"]
    n_kv, n_ff = meta[a + "attention.head_count_kv"], meta[a + "feed_forward_length"]
    hd = meta[a + "attention.key_length"]
    K, d_inner, N = meta[a + "ssm.conv_kernel"], meta[a + "ssm.inner_size"], meta[a + "ssm.state_size"]
    H, G = meta[a + "ssm.time_step_rank"], meta[a + "ssm.group_count"]
    P = d_inner // H

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    silu = lambda x: x / (1.0 + np.exp(-x))  # noqa: E731
    softplus = lambda x: np.logaddexp(0.0, x)  # noqa: E731

    def mamba2(h, L):
        b = f"blk.{L}."
        T = h.shape[0]
        zxbcdt = h @ W[b + "ssm_in.weight"].T
        z = zxbcdt[:, :d_inner].reshape(T, H, P)
        xbc = zxbcdt[:, d_inner:2 * d_inner + 2 * G * N]
        dt = zxbcdt[:, 2 * d_inner + 2 * G * N:]
        conv = W[b + "ssm_conv1d.weight"]  # [conv_dim, K]: tap K-1 on the current token
        xp = np.concatenate([np.zeros((K - 1, xbc.shape[1])), xbc])
        xbc = silu(np.stack([(xp[t:t + K].T * conv).sum(-1) for t in range(T)]) + W[b + "ssm_conv1d.bias"])
        x = xbc[:, :d_inner].reshape(T, H, P)
        B = xbc[:, d_inner:d_inner + G * N].reshape(T, G, N)
        C = xbc[:, d_inner + G * N:].reshape(T, G, N)
        dt = softplus(dt + W[b + "ssm_dt.bias"])  # [T, H]
        A = W[b + "ssm_a"][:, 0]  # = -exp(A_log), used as stored
        D = W[b + "ssm_d"][:, 0]
        S = np.zeros((H, P, N))
        y = np.zeros((T, H, P))
        for t in range(T):
            for hh in range(H):
                g = hh // (H // G)  # repeat_interleave
                S[hh] = S[hh] * np.exp(dt[t, hh] * A[hh]) + np.outer(x[t, hh] * dt[t, hh], B[t, g])
                y[t, hh] = S[hh] @ C[t, g]
        y = y + x * D[None, :, None]
        y = (y * silu(z)).reshape(T, G, d_inner // G)  # gate first, then the per-group RMS norm
        y = rms(y, W[b + "ssm_norm.weight"]).reshape(T, d_inner)
        return y @ W[b + "ssm_out.weight"].T

    def attn(h, L):
        b = f"blk.{L}."
        T, nkv = h.shape[0], n_kv[L]
        q = (h @ W[b + "attn_q.weight"].T).reshape(T, n_head, hd)
        k = (h @ W[b + "attn_k.weight"].T).reshape(T, nkv, hd)
        v = (h @ W[b + "attn_v.weight"].T).reshape(T, nkv, hd)
        o = np.zeros((T, n_head, hd))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for hh in range(n_head):
            kk = hh // (n_head // nkv)
            s = q[:, hh] @ k[:, kk].T / np.sqrt(hd) + mask  # no RoPE
            s = np.exp(s - s.max(-1, keepdims=True))
            o[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kk]
        return o.reshape(T, n_head * hd) @ W[b + "attn_output.weight"].T

    def mlp(h, L):
        b = f"blk.{L}."
        return np.maximum(h @ W[b + "ffn_up.weight"].T, 0.0) ** 2 @ W[b + "ffn_down.weight"].T

    out = []
    for seq in seqs:
        x = W["token_embd.weight"][np.array(seq)]
        for L in range(n_layer):
            h = rms(x, W[f"blk.{L}.attn_norm.weight"])
            if n_kv[L] == 0 and n_ff[L] == 0:
                x = x + mamba2(h, L)
            elif n_ff[L] == 0:
                x = x + attn(h, L)
            else:
                x = x + mlp(h, L)
        out.append(rms(x, W["output_norm.weight"]) @ W["output.weight"].T)
    return out


def float64_reference(reader, meta, seqs, logits) -> dict:
    ref = gguf_reference_logits(reader, meta, seqs)
    d = [float(np.abs(a - b).max()) for a, b in zip(logits, ref)]
    assert max(d) < 1e-3, d
    return dict(
        what="an independent numpy float64 forward of model.gguf written from llama.cpp's nemotron_h graph (Mamba-2 "
        "scan token by token as ggml_ssm_scan; see gguf_reference_logits in scripts/family_fixtures/nemotron_h.py) "
        "against transformers' float32 outputs",
        max_abs_logit_diff_per_sequence=[f32(x) for x in d],
        top1_changed_positions=int(sum((a.argmax(-1) != b.argmax(-1)).sum() for a, b in zip(logits, ref))),
        logits_first_sequence=[[f32(v) for v in row] for row in ref[0]],
    )


# ---------------------------------------------------------------------------------------------
# The record

RULES = {
    "blocks": "layers_block_type[i] (hybrid_override_pattern char i: M = linear_attention = Mamba-2 mixer, * = "
    "full_attention, - = mlp, E = moe); every block is x = x + mixer(RMSNorm(x)) with its one RMSNorm "
    "(layers.N.norm); logits = lm_head(RMSNorm_f(x)) (norm_f, untied lm_head); no embedding scale",
    "rms_norm": "y = w * (x * rsqrt(mean(x^2) + eps)) in float32, plain w (initialised 1, no + 1); eps = "
    "layer_norm_epsilon (block norms, norm_f and the gated norm)",
    "mamba2": "zxbcdt = in_proj(h) [T, 2*d_inner + 2*G*N + H] split [z (d_inner) | xBC (d_inner + 2*G*N) | dt (H)]; "
    "xBC = silu(causal depthwise conv1d(xBC) + conv_bias): out_t[c] = bias[c] + sum_{j<K} w[c, j] * xBC_{t-K+1+j}[c] "
    "(zeros before the start); split [x (H*P) | B (G*N) | C (G*N)], x -> [T, H, P], B, C -> [T, G, N]; "
    "dt = clamp(softplus(dt + dt_bias), time_step_limit) (default (0, inf): no clamp); A = -exp(A_log) [H]; "
    "head h uses group g = h // (H / G); per head, state S [P, N] from 0: S = exp(dt_t A) S + (dt_t x_t) B_t^T; "
    "y_t = S C_t + D x_t; then the gated norm and out_proj",
    "gated_norm": "y [T, d_inner] (heads concatenated, head-major) times silu(z) FIRST, then RMS-normalised per "
    "group of d_inner / G consecutive channels (group k = channels k*d_inner/G ..; G = n_groups), times the weight "
    "[d_inner]: NemotronHRMSNormGated, norm_before_gate = False",
    "attention": "q, k, v projections (no bias, whatever attention_bias says), no RoPE, no q/k norm; "
    "softmax(q k^T * head_dim^-1/2 + causal mask) v, GQA: query head h uses KV head h // (heads / kv_heads); o_proj",
    "mlp": "down_proj(relu(up_proj x)^2): squared ReLU, no gate; biases only if mlp_bias",
}


def nemotron_record(loaded, hf_tensors: dict, summary: dict, tensor_checks: dict, hub: dict, autoconfig: dict) -> dict:
    cfg = loaded.config
    mod = modeling()
    importable = {}
    for pkg in ("mamba_ssm", "causal_conv1d"):
        try:
            importlib.import_module(pkg)
            importable[pkg] = True
        except ImportError:
            importable[pkg] = False
    assert not any(importable.values()), importable  # the oracle is transformers' torch code
    d_inner = cfg.mamba_num_heads * cfg.mamba_head_dim
    return dict(
        rules=RULES,
        shapes=dict(
            layers_block_type=list(cfg.layers_block_type),
            hybrid_override_pattern=cfg.hybrid_override_pattern,
            d_inner=d_inner,
            conv_dim=d_inner + 2 * cfg.n_groups * cfg.ssm_state_size,
            in_proj_rows=2 * d_inner + 2 * cfg.n_groups * cfg.ssm_state_size + cfg.mamba_num_heads,
            heads=cfg.mamba_num_heads,
            head_dim=cfg.mamba_head_dim,
            n_groups=cfg.n_groups,
            heads_per_group=cfg.mamba_num_heads // cfg.n_groups,
            state_size=cfg.ssm_state_size,
            conv_kernel=cfg.conv_kernel,
            chunk_size=cfg.chunk_size,
            time_step_limit=[cfg.time_step_limit[0], str(cfg.time_step_limit[1])],
            gated_norm_group_size=d_inner // cfg.n_groups,
        ),
        transformers_functions=dict(
            prefill_conv=f"{mod.__name__}.causal_conv1d_fn (F.conv1d, groups = channels, padding K-1, first T outputs) + silu",
            prefill_scan=f"{mod.__name__}.mamba2_chunk_scan (SSD, chunk_size {cfg.chunk_size}, dt clamped to "
            "time_step_limit), via mamba2_scan_forward",
            decode_conv=f"{mod.__name__}.causal_conv1d_update",
            decode_scan=f"{mod.__name__}.mamba2_selective_state_update (no time_step_limit clamp)",
            mamba_ssm_importable=importable["mamba_ssm"],
            causal_conv1d_importable=importable["causal_conv1d"],
            note="with neither package importable and no hub kernels, every call runs the torch reference code "
            "(CPU, eval mode: the fused mamba2_split_conv1d_scan_combined path is taken only when training)",
        ),
        hub_config=hub,
        converter=dict(
            how="convert_hf_to_gguf's NemotronHModel (GraniteHybridModel / Mamba2Model base) on hf/, with "
            "ModelBase.load_hparams reading config.json itself: llama.cpp pins transformers 4.57.6 for conversion, "
            "which has no nemotron_h model type, so AutoConfig fails there and the converter falls back to the raw "
            "config.json (reproduced here by making AutoConfig fail during the conversion)",
            with_installed_transformers_autoconfig=autoconfig,
        ),
        gguf_tensor_checks=tensor_checks,
        hf_tensors=hf_tensors,
        gguf=dict(meta=summary["meta"], tensors=summary["tensors"]),
    )
