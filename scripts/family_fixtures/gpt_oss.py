"""gpt-oss: MXFP4 experts, the hub's packed checkpoint, the clamped SwiGLU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .checkpoints import build_config, f32, run_logits
from .families import FAMILIES, GPT_OSS_YARN
from .moe import hf_tensor_table

# E2M1 (FP4) value of each 4-bit code: bit 3 the sign, bits 0-2 the magnitude (OCP MX v1.0; the
# FP4_VALUES table of transformers' integrations/mxfp4.py; ggml's kvalues_mxfp4 are these values
# doubled, with the scale halved to match).
E2M1 = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32
)
MXFP4_BLOCK = 32

# openai/gpt-oss-20b's quantization_config (config.json)
GPT_OSS_HUB_QUANT = {
    "modules_to_not_convert": [
        "model.layers.*.self_attn",
        "model.layers.*.mlp.router",
        "model.embed_tokens",
        "lm_head",
    ],
    "quant_method": "mxfp4",
}


def mxfp4_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantize w [..., cols] in blocks of 32 consecutive values along the last axis. Returns the
    codes (uint8 [..., cols/32, 32], one E2M1 code each) and the scales (uint8 [..., cols/32], E8M0:
    the block's values are E2M1[code] * 2^(scale - 127)). The scale is 127 + floor(log2 max|x|) - 2
    (OCP MX: the block maximum lands in [4, 8) scale units); each value becomes the nearest E2M1
    magnitude (ties to the smaller; 6 and above saturate to 6) with the sign bit for negative values
    (zero is code 0, never -0)."""
    *pre, cols = w.shape
    assert cols % MXFP4_BLOCK == 0
    b = np.ascontiguousarray(w, dtype=np.float32).reshape(*pre, cols // MXFP4_BLOCK, MXFP4_BLOCK)
    amax = np.abs(b).max(axis=-1)
    assert (amax > 0).all()
    _, ex = np.frexp(amax)  # amax = m * 2^ex with m in [0.5, 1): floor(log2 amax) = ex - 1
    scales = ex.astype(np.int32) - 1 - 2 + 127
    assert ((scales >= 1) & (scales <= 254)).all()
    a = np.abs(b) / np.ldexp(np.float32(1.0), scales - 127)[..., None]  # exact: a power of two
    mag = np.abs(E2M1[:8][None, :] - a.reshape(-1, 1)).argmin(axis=-1).reshape(a.shape)
    codes = mag | np.where((b < 0) & (mag > 0), 8, 0)
    return np.ascontiguousarray(codes, dtype=np.uint8), np.ascontiguousarray(scales, dtype=np.uint8)


def mxfp4_dequantize(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """codes [..., G, 32], scales [..., G] -> float32 [..., G * 32], exactly."""
    v = np.ldexp(E2M1[codes], (scales.astype(np.int32) - 127)[..., None])
    assert v.dtype == np.float32
    return v.reshape(*codes.shape[:-2], -1)


def mxfp4_pack_hub(codes: np.ndarray) -> np.ndarray:
    """The hub's *_blocks bytes: [..., G, 32] codes -> [..., G, 16], byte i = element 2i in the low
    nibble, element 2i + 1 in the high nibble (what transformers' convert_moe_packed_tensors reads)."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def mxfp4_pack_ggml(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """ggml's block_mxfp4: [..., G, 32] codes + [..., G] scales -> [..., G, 17]: the E8M0 scale
    byte, then 16 bytes, byte j = element j in the low nibble, element j + 16 in the high nibble."""
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return np.concatenate([scales[..., None], qs], axis=-1).astype(np.uint8)


def quantize_experts(model) -> list[dict]:
    """Replace every expert matrix by its MXFP4 quantization, dequantized (exact in float32).
    Returns per layer {proj: (codes, scales)} in the hub's orientation: transformers holds
    gate_up_proj [E, hidden, 2*inter] and down_proj [E, inter, hidden] (input first); the hub's
    blocks are rows of output features ([E, 2*inter, hidden/32, ...], [E, hidden, inter/32, ...]),
    each row in blocks of 32 along the input."""
    out = []
    with torch.no_grad():
        for layer in model.model.layers:
            experts = layer.mlp.experts
            rec = {}
            for proj in ("gate_up_proj", "down_proj"):
                p = getattr(experts, proj)
                rows = p.detach().numpy().transpose(0, 2, 1)  # [E, out, in]
                codes, scales = mxfp4_quantize(rows)
                deq = mxfp4_dequantize(codes, scales)
                p.copy_(torch.from_numpy(np.ascontiguousarray(deq.transpose(0, 2, 1))))
                rec[proj] = (codes, scales)
            out.append(rec)
    return out


def write_gpt_oss_hub(hf_dir: Path, mx: list[dict], dst: Path) -> dict:
    """The checkpoint as openai/gpt-oss-20b stores it, for llama.cpp's converter: each layer's
    mlp.experts.{gate_up,down}_proj_{blocks,scales} (uint8) in place of the float expert matrices,
    every other tensor as hf/ has it (float32 here, bfloat16 on the hub); config.json with
    rope_theta + rope_scaling (the hub's spelling) and the hub's quantization_config. Returns the
    config and the tensor table (name -> shape, dtype)."""
    from safetensors.numpy import load_file, save_file

    st = load_file(str(hf_dir / "model.safetensors"))
    out = {}
    for name, v in st.items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            layer, proj = int(name.split(".")[2]), name.rsplit(".", 1)[1]
            codes, scales = mx[layer][proj]
            assert not (codes == 8).any()  # no -0
            out[name + "_blocks"] = np.ascontiguousarray(mxfp4_pack_hub(codes))
            out[name + "_scales"] = np.ascontiguousarray(scales)
        else:
            out[name] = v
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((hf_dir / "config.json").read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    cfg["quantization_config"] = GPT_OSS_HUB_QUANT
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return dict(config=json.loads((dst / "config.json").read_text()), tensors=hf_tensor_table(dst))


def check_gpt_oss_hub_format(hub_dir: Path, hf_dir: Path, mx: list[dict], config) -> None:
    """hf-mxfp4/ as the hub ships it: per layer the four uint8 expert tensors (shapes of
    openai/gpt-oss-20b's, toy sized) in place of hf/'s two float expert matrices, every other tensor
    hf/'s own bytes (float32); the blocks unpack (low nibble = element 2i, high = 2i + 1) to the
    quantization's codes, which dequantize (E2M1[code] * 2^(scale - 127)) to hf/'s matrices
    transposed; gate_up's even rows are hf/'s gate columns (0::2), odd rows its up columns (1::2)."""
    from safetensors.numpy import load_file

    hub, hf = load_file(str(hub_dir / "model.safetensors")), load_file(str(hf_dir / "model.safetensors"))
    n_exp, hid, ff = config.num_local_experts, config.hidden_size, config.intermediate_size
    G = MXFP4_BLOCK
    want_names = set()
    for layer in range(config.num_hidden_layers):
        pre = f"model.layers.{layer}.mlp.experts."
        shapes = {
            "gate_up_proj_blocks": (n_exp, 2 * ff, hid // G, G // 2),
            "gate_up_proj_scales": (n_exp, 2 * ff, hid // G),
            "down_proj_blocks": (n_exp, hid, ff // G, G // 2),
            "down_proj_scales": (n_exp, hid, ff // G),
        }
        for k, shape in shapes.items():
            v = hub[pre + k]
            assert v.dtype == np.uint8 and v.shape == shape, (pre + k, v.dtype, v.shape)
            want_names.add(pre + k)
        for proj in ("gate_up_proj", "down_proj"):
            blocks, scales = hub[pre + proj + "_blocks"], hub[pre + proj + "_scales"]
            codes = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], G)
            assert np.array_equal(codes, mx[layer][proj][0]) and np.array_equal(scales, mx[layer][proj][1])
            deq = mxfp4_dequantize(codes, scales)  # [E, out, in]
            assert np.array_equal(deq, hf[pre + proj].transpose(0, 2, 1)), pre + proj
            if proj == "gate_up_proj":
                assert np.array_equal(deq[:, 0::2], hf[pre + proj][:, :, 0::2].transpose(0, 2, 1))
                assert np.array_equal(deq[:, 1::2], hf[pre + proj][:, :, 1::2].transpose(0, 2, 1))
    for name, v in hf.items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            assert name not in hub, name
            continue
        want_names.add(name)
        assert hub[name].dtype == np.float32 and hub[name].tobytes() == v.tobytes(), name
    assert set(hub) == want_names, sorted(set(hub) ^ want_names)


def check_gpt_oss_hf_format(table: dict, config) -> None:
    """save_pretrained writes gpt-oss's experts as transformers holds them: fused, input first,
    gate and up interleaved along the last axis of gate_up_proj (even = gate, odd = up)."""
    n_exp, hid, ff, n_head = config.num_local_experts, config.hidden_size, config.intermediate_size, config.num_attention_heads
    for layer in range(config.num_hidden_layers):
        pre = f"model.layers.{layer}."
        want = {
            "mlp.router.weight": [n_exp, hid],
            "mlp.router.bias": [n_exp],
            "mlp.experts.gate_up_proj": [n_exp, hid, 2 * ff],
            "mlp.experts.gate_up_proj_bias": [n_exp, 2 * ff],
            "mlp.experts.down_proj": [n_exp, ff, hid],
            "mlp.experts.down_proj_bias": [n_exp, hid],
            "self_attn.sinks": [n_head],
        }
        for k, shape in want.items():
            assert table[pre + k]["shape"] == shape and table[pre + k]["dtype"] == "F32", (k, table.get(pre + k))
    assert not any(".experts.0." in n for n in table), "per-expert tensors"


def hub_reload_check(hub_dir: Path, state: dict) -> dict:
    """transformers' own reading of the hub-layout checkpoint (its MXFP4 dequantization,
    integrations/mxfp4.py) against the float32 weights the oracle runs with."""
    import transformers

    m = transformers.GptOssForCausalLM.from_pretrained(
        hub_dir,
        dtype=torch.float32,
        attn_implementation="eager",
        quantization_config=transformers.Mxfp4Config(dequantize=True),
    )
    sd = m.state_dict()
    experts = [k for k in state if ".mlp.experts." in k and not k.endswith("_bias")]
    others = [k for k in state if k not in experts]
    return dict(
        how="GptOssForCausalLM.from_pretrained(hub checkpoint, dtype=float32, "
        "quantization_config=Mxfp4Config(dequantize=True))",
        expert_matrices_bitwise_equal=all(
            sd[k].dtype == torch.float32 and torch.equal(sd[k], state[k]) for k in experts
        ),
        other_tensors_bitwise_equal=all(torch.equal(sd[k], state[k]) for k in others),
        expert_matrices_compared=len(experts),
    )


def gpt_oss_gguf_checks(reader, hf_dir: Path, mx: list[dict], config) -> dict:
    """The GGUF's tensors against the HF checkpoint: MXFP4 experts (gguf-py's own dequantize,
    and the raw bytes against our own ggml packing), the split of gate_up into gate (even columns)
    and up (odd columns), biases, router, sinks."""
    import gguf
    from safetensors.numpy import load_file

    st = load_file(str(hf_dir / "model.safetensors"))
    g = {t.name: t for t in reader.tensors}
    mxfp4 = gguf.GGMLQuantizationType.MXFP4
    res = dict(
        experts_type_mxfp4=True,
        experts_dequantize_equal_hf=True,
        experts_raw_bytes_equal_own_ggml_packing=True,
        expert_biases_equal=True,
        router_equal=True,
        sinks_equal=True,
        post_attention_norm_equal=True,
        attn_biases_equal=True,
    )

    def arr(name):
        return np.asarray(g[name].data)

    for layer in range(config.num_hidden_layers):
        pre = f"model.layers.{layer}."
        gu = st[pre + "mlp.experts.gate_up_proj"]  # [E, hidden, 2*inter]
        down = st[pre + "mlp.experts.down_proj"]  # [E, inter, hidden]
        gu_codes, gu_scales = mx[layer]["gate_up_proj"]  # rows [E, 2*inter, ...]
        dn_codes, dn_scales = mx[layer]["down_proj"]  # rows [E, hidden, ...]
        parts = dict(
            ffn_gate_exps=(gu[:, :, 0::2].transpose(0, 2, 1), gu_codes[:, 0::2], gu_scales[:, 0::2]),
            ffn_up_exps=(gu[:, :, 1::2].transpose(0, 2, 1), gu_codes[:, 1::2], gu_scales[:, 1::2]),
            ffn_down_exps=(down.transpose(0, 2, 1), dn_codes, dn_scales),
        )
        for part, (want, codes, scales) in parts.items():
            t = g[f"blk.{layer}.{part}.weight"]
            res["experts_type_mxfp4"] &= t.tensor_type == mxfp4
            raw = np.asarray(t.data)
            deq = gguf.quants.dequantize(raw, mxfp4)
            res["experts_dequantize_equal_hf"] &= bool(
                deq.dtype == np.float32 and deq.shape == want.shape and np.array_equal(deq, want)
            )
            own = mxfp4_pack_ggml(codes, scales).reshape(raw.shape)
            res["experts_raw_bytes_equal_own_ggml_packing"] &= bool(np.array_equal(raw, own))
        gub = st[pre + "mlp.experts.gate_up_proj_bias"]
        for name, want in (
            ("ffn_gate_exps.bias", gub[:, 0::2]),
            ("ffn_up_exps.bias", gub[:, 1::2]),
            ("ffn_down_exps.bias", st[pre + "mlp.experts.down_proj_bias"]),
        ):
            res["expert_biases_equal"] &= bool(np.array_equal(arr(f"blk.{layer}.{name}").reshape(want.shape), want))
        for name, hf in (("ffn_gate_inp.weight", "mlp.router.weight"), ("ffn_gate_inp.bias", "mlp.router.bias")):
            res["router_equal"] &= bool(np.array_equal(arr(f"blk.{layer}.{name}").reshape(st[pre + hf].shape), st[pre + hf]))
        res["sinks_equal"] &= bool(np.array_equal(arr(f"blk.{layer}.attn_sinks.weight"), st[pre + "self_attn.sinks"]))
        res["post_attention_norm_equal"] &= bool(
            np.array_equal(arr(f"blk.{layer}.post_attention_norm.weight"), st[pre + "post_attention_layernorm.weight"])
        )
        for gname, hname in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
            res["attn_biases_equal"] &= bool(np.array_equal(arr(f"blk.{layer}.{gname}.bias"), st[pre + f"self_attn.{hname}.bias"]))
    return res


def gguf_fields(reader) -> dict:
    """Every metadata field of a GGUF in full (the vocabulary too; the GGUF.* header fields aside):
    name -> (value types, value)."""
    return {n: ([int(t) for t in f.types], f.contents()) for n, f in reader.fields.items() if not n.startswith("GGUF.")}


def gpt_oss_f32_gguf_checks(f32_reader, mx_reader, hf_dir: Path, config) -> dict:
    """model-f32.gguf (hf/ converted with float experts) against model.gguf (the hub's MXFP4
    layout converted) and hf/: the same metadata but for general.file_type, the same tensors, all
    F32, the non-expert ones byte-equal to model.gguf's, the experts equal to hf/'s after the
    converter's transpose and gate/up split."""
    import gguf
    from safetensors.numpy import load_file

    st = load_file(str(hf_dir / "model.safetensors"))
    fa, fm = gguf_fields(f32_reader), gguf_fields(mx_reader)
    ft = "general.file_type"
    f32t, mxt = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.MXFP4
    ga = {t.name: t for t in f32_reader.tensors}
    gm = {t.name: t for t in mx_reader.tensors}
    experts = {f"blk.{i}.ffn_{p}_exps.weight" for i in range(config.num_hidden_layers) for p in ("gate", "up", "down")}
    res = dict(
        metadata_equal_but_file_type={k: v for k, v in fa.items() if k != ft} == {k: v for k, v in fm.items() if k != ft},
        file_types_f32_and_mxfp4_moe=bool(
            fa[ft][1] == gguf.LlamaFileType.ALL_F32 and fm[ft][1] == gguf.LlamaFileType.MOSTLY_MXFP4_MOE
        ),
        same_tensor_names_and_shapes=sorted(ga) == sorted(gm)
        and all([int(x) for x in ga[n].shape] == [int(x) for x in gm[n].shape] for n in ga),
        all_tensors_f32=all(t.tensor_type == f32t for t in ga.values()),
        mxfp4_gguf_experts_only_mxfp4=all((t.tensor_type == mxt) == (n in experts) for n, t in gm.items()),
        non_expert_tensors_bytes_equal_mxfp4_gguf=all(
            np.asarray(ga[n].data).tobytes() == np.asarray(gm[n].data).tobytes() for n in ga if n not in experts
        ),
        experts_equal_hf=True,
    )
    for layer in range(config.num_hidden_layers):
        pre = f"model.layers.{layer}."
        gu = st[pre + "mlp.experts.gate_up_proj"]  # [E, hidden, 2*inter], gate/up interleaved
        down = st[pre + "mlp.experts.down_proj"]  # [E, inter, hidden]
        for part, want in (
            ("gate", gu[:, :, 0::2].transpose(0, 2, 1)),
            ("up", gu[:, :, 1::2].transpose(0, 2, 1)),
            ("down", down.transpose(0, 2, 1)),
        ):
            got = np.asarray(ga[f"blk.{layer}.ffn_{part}_exps.weight"].data)
            res["experts_equal_hf"] &= bool(got.dtype == np.float32 and got.shape == want.shape and np.array_equal(got, want))
    return res


def swiglu_clamp_stats(model, seqs: list[list[int]]) -> dict:
    """How often the clamps of gpt-oss's SwiGLU bite: over every (position, chosen expert, feature)
    of every layer, gate values above swiglu_limit and up values outside [-limit, limit]."""
    counts = dict(values=0, gate_above_limit=0, up_above_limit=0, up_below_minus_limit=0, max_gate=-np.inf, max_abs_up=0.0)

    def hook(module, args, _out):
        x, ids, _ = args
        for e in range(module.num_experts):
            rows = (ids == e).any(dim=-1)
            if not rows.any():
                continue
            gu = x[rows] @ module.gate_up_proj[e] + module.gate_up_proj_bias[e]
            gate, up = gu[..., 0::2], gu[..., 1::2]
            counts["values"] += gate.numel()
            counts["gate_above_limit"] += int((gate > module.limit).sum())
            counts["up_above_limit"] += int((up > module.limit).sum())
            counts["up_below_minus_limit"] += int((up < -module.limit).sum())
            counts["max_gate"] = max(counts["max_gate"], float(gate.max()))
            counts["max_abs_up"] = max(counts["max_abs_up"], float(up.abs().max()))

    handles = [layer.mlp.experts.register_forward_hook(hook) for layer in model.model.layers]
    try:
        run_logits(model, seqs)
    finally:
        for h in handles:
            h.remove()
    counts["max_gate"] = f32(counts["max_gate"])
    counts["max_abs_up"] = f32(counts["max_abs_up"])
    return counts


def gpt_oss_record(loaded, hub_table: dict, hub_check: dict, seqs) -> dict:
    """What the Rust side needs to know about gpt-oss that the other families do not have."""
    import inspect

    from transformers.models.gpt_oss import modeling_gpt_oss as mg

    cfg = loaded.config
    rot = loaded.model.rotary_emb
    variants = {}
    for trunc in (False, True):
        _, c = build_config(FAMILIES["gpt-oss"], dict(rope_parameters={**GPT_OSS_YARN, "truncate": trunc}))
        r = mg.GptOssRotaryEmbedding(c)
        inv, att = r.inv_freq, r.attention_scaling
        variants[f"truncate_{str(trunc).lower()}"] = dict(inv_freq=[f32(x) for x in inv], attention_factor=float(att))
    base = 1.0 / (cfg.rope_parameters["rope_theta"] ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float) / cfg.head_dim))
    experts = loaded.model.layers[0].mlp.experts
    return dict(
        swiglu=dict(
            alpha=experts.alpha,
            limit=experts.limit,
            formula="gate, up = gate_up[..., 0::2], gate_up[..., 1::2] (gate_up = x @ gate_up_proj[e] + "
            "gate_up_proj_bias[e]: gate and up interleaved); gate = min(gate, limit); up = clamp(up, -limit, limit); "
            "out = (up + 1) * gate * sigmoid(alpha * gate); expert(x) = out @ down_proj[e] + down_proj_bias[e]",
            transformers_source=inspect.getsource(mg.GptOssExperts._apply_gate).splitlines(),
            llama_cpp="ggml_swiglu_oai (LLM_FFN_SWIGLU_OAI_MOE, alpha 1.702 and limit 7 hard-coded): "
            "x = min(gate, limit); y = clamp(up, -limit, limit); out = x / (1 + exp(-alpha x)) * (y + 1)",
            gguf_keys="none: the GGUF carries neither alpha nor limit (the hub's config.json has swiglu_limit "
            "only; transformers' MXFP4 experts hard-code alpha 1.702 too)",
            clamp_counts=swiglu_clamp_stats(loaded, seqs),
        ),
        router=dict(
            transformers_source=inspect.getsource(mg.GptOssTopKRouter.forward).splitlines(),
            rule="router logits = x @ router.weight^T + router.bias (float32); the k largest logits by "
            "torch.topk (descending); weights = softmax over those k logits only (float32); no "
            "renormalization beyond that softmax",
            llama_cpp="build_moe_ffn with ffn_gate_inp.bias added to the logits, "
            "LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT: top-k of the biased logits, softmax over the k",
        ),
        attention=dict(
            sinks="per head one learned logit: softmax over [q.k * head_dim^-1/2 + mask, sink] (max "
            "subtracted first), the sink's probability dropped, so the weights over the keys sum to < 1",
            transformers_source=inspect.getsource(mg.eager_attention_forward).splitlines(),
            sliding_window=cfg.sliding_window,
            window_rule="a sliding layer's query at position q sees keys k with q - sliding_window < k <= q "
            "(sliding_window keys, itself included; transformers' sliding_window_overlay, llama.cpp's "
            "LLAMA_SWA_TYPE_STANDARD masks p1 - p0 >= n_swa)",
            layer_types=cfg.layer_types,
            rope="NeoX halves: x[:d/2] and x[d/2:] rotated as pairs (i, i + d/2), cos/sin = "
            "cos/sin(position * inv_freq[i]) * attention_factor for q and k alike",
        ),
        yarn=dict(
            rope_parameters=cfg.rope_parameters,
            inv_freq_unscaled=[f32(x) for x in base],
            inv_freq=[f32(x) for x in rot.inv_freq],
            attention_factor=float(rot.attention_scaling),
            variants=variants,
        ),
        mxfp4=dict(
            e2m1_values_by_code=[float(v) for v in E2M1],
            value="E2M1[code] * 2^(scale - 127), scale the E8M0 byte of the block of 32",
            quantization="per block of 32 along the input: scale = 127 + floor(log2 max|x|) - 2, each value "
            "the nearest E2M1 magnitude (ties to the smaller, saturating at 6) with the sign bit; the "
            "dequantized values are the model's float32 expert weights (hf/)",
            hub_layout="gate_up_proj_blocks [E, 2*inter, hidden/32, 16] and gate_up_proj_scales [E, 2*inter, "
            "hidden/32]: row r = output feature r of gate_up (even r gate, odd r up, interleaved as in "
            "transformers' gate_up_proj columns); down_proj_blocks [E, hidden, inter/32, 16], down_proj_scales "
            "[E, hidden, inter/32]; in a block's 16 bytes byte i holds element 2i in the low nibble and 2i+1 "
            "in the high nibble; transformers' gate_up_proj[e] = dequantized rows transposed",
            ggml_layout="block_mxfp4 (GGUF type 39), 17 bytes per 32 values: byte 0 the E8M0 scale, then "
            "byte 1 + j (j < 16) = element j in the low nibble, element j + 16 in the high nibble; ggml "
            "decodes kvalues_mxfp4 (E2M1 doubled) times 2^(scale - 128)",
            hub_config=hub_table["config"],
            hub_tensors=hub_table["tensors"],
            transformers_reads_hub=hub_check,
        ),
    )
