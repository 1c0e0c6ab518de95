"""GGUF conversion with llama.cpp's converter, GGUF summaries and checks against the checkpoint."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from .checkpoints import f32

def vocab_tokens(n: int) -> tuple[list[str], list[float], list[int]]:
    """<unk>, <s>, </s>, '▁', the printable ASCII characters, then '▁x' pieces and bigrams."""
    tokens = ["<unk>", "<s>", "</s>", "\u2581"]
    tokens += [chr(c) for c in range(0x21, 0x7F)]
    alnum = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    tokens += ["\u2581" + c for c in alnum]
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    for a in letters:
        for b in letters:
            if len(tokens) >= n:
                break
            tokens.append(a + b)
    tokens = tokens[:n]
    assert len(tokens) == n and len(set(tokens)) == n
    # gguf.SentencePieceTokenTypes: NORMAL 1, UNKNOWN 2, CONTROL 3
    types = [2, 3, 3] + [1] * (n - 3)
    scores = [0.0, 0.0, 0.0] + [-float(i) for i in range(1, n - 2)]
    return tokens, scores, types


def convert_to_gguf(hf_dir: Path, family: str, out_path: Path, no_mtp: bool = False) -> None:
    """`no_mtp`: convert_hf_to_gguf.py's --no-mtp (the Qwen3-Next / Qwen3.5 converters otherwise
    require MTP tensors: mtp_num_hidden_layers 0 and no mtp.* tensors fail an assertion)."""
    import gguf
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / family
        stage.mkdir()
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(hf_dir / f, stage / f)
        hparams = ModelBase.load_hparams(stage, False)
        arch = get_model_architecture(hparams, ModelType.TEXT)
        base = get_model_class(arch)
        n_vocab = hparams["vocab_size"]
        tokens, scores, types = vocab_tokens(n_vocab)
        if family == "gemma3":
            # Gemma3Model.modify_tensors trims token_embd to len(vocab) + len(added_tokens) of
            # tokenizer.json; list the same tokens so nothing is trimmed.
            tok_json = {"model": {"vocab": {t: i for i, t in enumerate(tokens)}}, "added_tokens": []}
            (stage / "tokenizer.json").write_text(json.dumps(tok_json))

        def set_vocab(self) -> None:
            # Replaces only the vocabulary step: a minimal SentencePiece-style vocabulary.
            w = self.gguf_writer
            w.add_tokenizer_model("llama")
            w.add_tokenizer_pre("default")
            w.add_token_list(tokens)
            w.add_token_scores(scores)
            w.add_token_types(types)
            w.add_unk_token_id(0)
            w.add_bos_token_id(1)
            w.add_eos_token_id(2)
            w.add_add_bos_token(True)
            w.add_add_eos_token(False)

        attrs = {"model_arch": base.model_arch, "set_vocab": set_vocab}
        if no_mtp:
            assert base.supports_mtp_export, base
            attrs["no_mtp"] = True
        patched = type(base.__name__, (base,), attrs)
        with torch.inference_mode():
            model = patched(
                stage,
                gguf.LlamaFileType.ALL_F32,
                out_path,
                is_big_endian=False,
                use_temp_file=False,
                eager=False,
                metadata_override=None,
                model_name=family,
                split_max_tensors=0,
                split_max_size=0,
                dry_run=False,
                small_first_shard=False,
            )
            model.write()


def gguf_summary(path: Path) -> dict:
    import gguf

    r = gguf.GGUFReader(str(path))
    meta = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        if name in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            v = field.contents()
            meta[name] = f"[{len(v)} entries]"
            continue
        meta[name] = field.contents()
    tensors = {
        t.name: dict(shape=[int(x) for x in t.shape], type=t.tensor_type.name) for t in r.tensors
    }
    return dict(meta=meta, tensors=tensors, reader=r)



def n_experts(config) -> int:
    """The expert count (Qwen3NextConfig has no num_local_experts alias of num_experts)."""
    n = getattr(config, "num_local_experts", None)
    return n if n is not None else config.num_experts


def check_gguf_facts(name: str, summary: dict, config) -> None:
    """Fail loudly if the converter no longer does what gguf_reading assumes."""
    meta = summary["meta"]
    arch = meta["general.architecture"]
    if name == "mistral":
        assert arch == "llama", arch
        assert not any("sliding_window" in k for k in meta), "Mistral GGUF now has a window key"
    if name == "phi3":
        assert meta["phi3.attention.sliding_window"] == 8
    if "expert_count" in " ".join(meta):
        assert meta[f"{arch}.expert_count"] == n_experts(config)
        assert meta[f"{arch}.expert_used_count"] == config.num_experts_per_tok
        # llama.cpp's qwen3moe, qwen3next and llama graphs renormalize the chosen weights
        # unconditionally (build_moe_ffn(..., norm_w = true, ..., SOFTMAX)), its olmoe graph never
        # does (norm_w = false): the GGUF carries no such flag.
        assert not any("weights_norm" in k or "gating_func" in k for k in meta), meta.keys()
    if name.startswith("qwen3moe"):
        assert arch == "qwen3moe", arch
        assert meta["qwen3moe.expert_feed_forward_length"] == config.moe_intermediate_size
        assert config.norm_topk_prob
    if name == "qwen3next":
        assert arch == "qwen3next", arch
        assert meta["qwen3next.expert_feed_forward_length"] == config.moe_intermediate_size
        assert config.norm_topk_prob
    if name == "mixtral":
        assert arch == "llama", arch
    if name == "olmoe":
        assert arch == "olmoe", arch
        assert not config.norm_topk_prob
        # the converter overwrites the config's rms_norm_eps with a literal 1e-5
        assert config.rms_norm_eps == 1e-5
        assert meta["olmoe.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
        assert meta["olmoe.feed_forward_length"] == config.intermediate_size  # the experts' width
        assert not any("expert_feed_forward_length" in k or "expert_weights" in k for k in meta), meta.keys()
        # llama.cpp's olmoe loader: attn_q_norm and attn_k_norm are {n_embd}
        assert meta["olmoe.attention.head_count_kv"] == meta["olmoe.attention.head_count"]
        for layer in range(config.num_hidden_layers):
            for t in ("attn_q_norm", "attn_k_norm"):
                assert summary["tensors"][f"blk.{layer}.{t}.weight"]["shape"] == [config.hidden_size], t
    if name == "gpt-oss":
        assert arch == "gpt-oss", arch
        assert meta["gpt-oss.expert_feed_forward_length"] == config.intermediate_size
        assert meta["gpt-oss.attention.sliding_window"] == config.sliding_window
        assert meta["gpt-oss.rope.scaling.type"] == "yarn"
        assert meta["gpt-oss.rope.scaling.factor"] == config.rope_parameters["factor"]
        assert meta["gpt-oss.rope.scaling.original_context_length"] == config.rope_parameters["original_max_position_embeddings"]
        assert meta["gpt-oss.rope.freq_base"] == config.rope_parameters["rope_theta"]
        # no truncate flag (gguf_reading), no layer pattern: llama.cpp's gpt-oss loader defaults to
        # a pattern of 2 (layer i sliding iff i % 2 == 0), which is this checkpoint's layer_types
        assert not any("truncate" in k or "sliding_window_pattern" in k for k in meta), meta.keys()
        assert config.layer_types == ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config.num_hidden_layers)]
        assert config.rope_parameters["truncate"] is False
        assert not any("swiglu" in k or "alpha" in k for k in meta), meta.keys()
    if name.startswith("gemma"):
        assert not any("pre_attn" in k or "attention.scale" in k for k in meta), meta.keys()
        assert not any("sliding_window_pattern" in k for k in meta), meta.keys()
        assert meta[f"{arch}.attention.sliding_window"] == 8


def compare_tensors(name: str, reader, hf_dir: Path, config, fam: dict) -> dict:
    """Numerical facts for the report: norm shifts and q/k permutations."""
    from safetensors.numpy import load_file

    st = load_file(str(hf_dir / "model.safetensors"))
    g = {t.name: np.asarray(t.data) for t in reader.tensors}
    res = {}
    hf_norm = st["model.layers.0.input_layernorm.weight"]
    gg_norm = g["blk.0.attn_norm.weight"].reshape(-1)
    res["attn_norm_equal"] = bool(np.array_equal(gg_norm, hf_norm))
    res["attn_norm_equal_plus_1"] = bool(np.allclose(gg_norm, hf_norm + 1.0, rtol=0, atol=1e-6))
    if "blk.0.attn_q.weight" in g:
        q = st["model.layers.0.self_attn.q_proj.weight"]
        k = st["model.layers.0.self_attn.k_proj.weight"]
        gq = g["blk.0.attn_q.weight"].reshape(q.shape)
        gk = g["blk.0.attn_k.weight"].reshape(k.shape)

        def permute(w, n_head):
            return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

        res["q_equal"] = bool(np.array_equal(gq, q))
        res["q_equal_permuted"] = bool(np.array_equal(gq, permute(q, config.num_attention_heads)))
        res["k_equal"] = bool(np.array_equal(gk, k))
        res["k_equal_permuted"] = bool(np.array_equal(gk, permute(k, config.num_key_value_heads)))
    if "blk.0.attn_qkv.weight" in g and "model.layers.0.self_attn.qkv_proj.weight" in st:  # phi3
        qkv = st["model.layers.0.self_attn.qkv_proj.weight"]
        res["qkv_equal"] = bool(np.array_equal(g["blk.0.attn_qkv.weight"].reshape(qkv.shape), qkv))
        gu = st["model.layers.0.mlp.gate_up_proj.weight"]
        res["ffn_up_equal_gate_up"] = bool(np.array_equal(g["blk.0.ffn_up.weight"].reshape(gu.shape), gu))
    if "rope_freqs.weight" in g:
        res["rope_freqs"] = [f32(x) for x in g["rope_freqs.weight"]]
    if name == "olmoe":
        for t, hf in (("attn_q_norm", "q_norm"), ("attn_k_norm", "k_norm")):
            res[f"{t}_equal_{hf}"] = all(
                bool(np.array_equal(g[f"blk.{layer}.{t}.weight"], st[f"model.layers.{layer}.self_attn.{hf}.weight"]))
                for layer in range(config.num_hidden_layers)
            )
    if "moe" in fam and not fam["moe"].get("gpt_oss"):  # gpt-oss: gpt_oss_gguf_checks
        m = fam["moe"]
        n_exp = n_experts(config)
        eq = dict(ffn_gate_inp_equal_router=True, ffn_gate_exps_equal_stacked_gate=True,
                  ffn_up_exps_equal_stacked_up=True, ffn_down_exps_equal_stacked_down=True)
        for layer in range(config.num_hidden_layers):
            r = st[m["router_hf"].format(L=layer)]
            eq["ffn_gate_inp_equal_router"] &= bool(np.array_equal(g[f"blk.{layer}.ffn_gate_inp.weight"].reshape(r.shape), r))
            for part in ("gate", "up", "down"):
                w = np.stack([st[m["experts_hf"][part].format(L=layer, E=e)] for e in range(n_exp)])
                gw = g[f"blk.{layer}.ffn_{part}_exps.weight"]
                eq[f"ffn_{part}_exps_equal_stacked_{part}"] &= bool(gw.shape == w.shape and np.array_equal(gw, w))
        res.update(eq)
    return res
