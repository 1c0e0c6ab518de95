#!/usr/bin/env python3
"""Generate tiny random checkpoints of eight decoder families, with transformers' logits as oracle.

Output: crates/models/tests/fixtures/families/<family>/ for each family in FAMILIES
(llama3, llama, qwen2, qwen3, gemma3, gemma2, mistral, phi3):

- hf/config.json + hf/model.safetensors: a tiny checkpoint with random weights (float32, norm
  weights random too), saved by Hugging Face transformers' `save_pretrained`.
- model.gguf: the same checkpoint converted by llama.cpp's own `convert_hf_to_gguf.py` code
  (outtype f32), so tensor naming, q/k permutation, Gemma's norm +1 shift, Phi-3's fused tensors
  and the metadata keys are llama.cpp's, not ours. Tiny random checkpoints ship no tokenizer, so
  only the converter's vocabulary step (`set_vocab`) is replaced: it writes a minimal
  SentencePiece-style (`tokenizer.ggml.model = llama`) vocabulary of exactly `vocab_size` tokens
  (<unk>=0, <s>=1, </s>=2, then single characters and short pieces). Gemma 3's converter also
  reads the vocabulary size off `tokenizer.json` to trim embedding rows, so its conversion input
  (a staging copy of hf/) gets a `tokenizer.json` listing the same tokens; hf/ itself holds only
  config.json and model.safetensors.
- logits.json: transformers' (eager attention, float32, CPU, one thread) output on three fixed
  token sequences (lengths 12, 40, 70; ids seeded, in [0, vocab)): per position the top-5 ids,
  their float32 logits and float64 log-probabilities (log_softmax in float64 of the float32
  logits) and the top-1/top-2 logit margin; the full float32 logit rows for the first sequence.
  It also records the versions, the config fields that matter (as transformers saw them), and:
  * `gguf_reading` (gemma2, gemma3, mistral, phi3): the same outputs from transformers with the
    config changed to what llama.cpp does with this GGUF, where that differs from the HF
    checkpoint: Gemma GGUFs carry no `query_pre_attn_scalar` (llama.cpp scales by head_dim^-1/2
    below 27B); the Mistral GGUF carries no sliding window (llama arch: full attention);
    llama.cpp ignores the Phi-3 GGUF's `phi3.attention.sliding_window` ("Phi SWA is currently
    disabled"). The script asserts these facts on the converted files.
  * `sensitivity`: how far the logits move when one feature is switched off (sliding window,
    soft-capping, rope scaling, ...), to show the fixture can tell the feature is implemented.

Shapes: hidden 64, 4 heads, 2 KV heads, head_dim 16, intermediate 128, vocab 256, 4 layers,
max_position_embeddings 256; Gemma 3 has 6 layers, so that llama.cpp's implied pattern (every 6th
layer global; the GGUF has no pattern key) is the checkpoint's own `layer_types`.

Run (deterministic: a rerun rewrites identical files):

    python3 -m venv /tmp/oracle-venv
    /tmp/oracle-venv/bin/pip install torch transformers safetensors numpy sentencepiece protobuf
    # llama.cpp's converter, from the llama-cpp-python source package (its vendored llama.cpp,
    # extracted by scripts/build-llama-cpp, which also builds the bench tools; only the source is
    # needed here).
    scripts/build-llama-cpp
    /tmp/oracle-venv/bin/python scripts/gen_family_fixtures.py \\
        --llama-cpp target/llama.cpp/src/llama.cpp [--only gemma3,phi3]

Generated with torch 2.15.0, transformers 5.25.0, llama-cpp-python 0.3.36 (see logits.json).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "models" / "tests" / "fixtures" / "families"

VOCAB = 256
SEQ_LENS = (12, 40, 70)
SEQ_SEED = 20240611
TOP_K = 5

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    attention_dropout=0.0,
    use_cache=False,
)

# name -> (transformers class, seed, config kwargs, init stds, GGUF-reading overrides, ablations)
# init: "w" = std of every matrix, "emb" = std of the embedding (and tied head), "norm" = std of
# the norm weights around their neutral value (1, or 0 for Gemma's (1 + w) norms), "bias" = std
# of biases.
FAMILIES: dict[str, dict] = {
    "llama3": dict(
        cls="LlamaForCausalLM",
        seed=101,
        config=dict(
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=500000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=16,
            ),
            tie_word_embeddings=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3),
        ablations={"no_rope_scaling": dict(rope_parameters=dict(rope_type="default", rope_theta=500000.0))},
    ),
    "llama": dict(
        cls="LlamaForCausalLM",
        seed=102,
        config=dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0), tie_word_embeddings=False),
        init=dict(w=0.15, emb=0.5, norm=0.3),
    ),
    "qwen2": dict(
        cls="Qwen2ForCausalLM",
        seed=103,
        config=dict(rope_parameters=dict(rope_type="default", rope_theta=1000000.0), tie_word_embeddings=False),
        init=dict(w=0.15, emb=0.5, norm=0.3, bias=0.3),
    ),
    "qwen3": dict(
        cls="Qwen3ForCausalLM",
        seed=104,
        config=dict(
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            tie_word_embeddings=True,
            attention_bias=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3),
    ),
    "gemma3": dict(
        cls="Gemma3ForCausalLM",
        seed=105,
        config=dict(
            num_hidden_layers=6,
            sliding_window=8,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
            rope_parameters={
                "full_attention": dict(rope_type="default", rope_theta=1000000.0),
                "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
            },
            query_pre_attn_scalar=24,
            tie_word_embeddings=True,
            hidden_activation="gelu_pytorch_tanh",
            attn_logit_softcapping=None,
            final_logit_softcapping=None,
        ),
        init=dict(w=0.15, emb=0.15, norm=0.3),
        gguf_reading=dict(
            overrides=dict(query_pre_attn_scalar=16),
            why="the GGUF carries no query_pre_attn_scalar: llama.cpp scales attention by "
            "head_dim^-1/2 (n_embd/n_head only for 62-layer Gemma 3 27B)",
        ),
        ablations={
            "no_sliding_window": dict(sliding_window=4096),
            "query_pre_attn_scalar_eq_head_dim": dict(query_pre_attn_scalar=16),
            "local_rope_base_eq_global": dict(
                rope_parameters={
                    "full_attention": dict(rope_type="default", rope_theta=1000000.0),
                    "sliding_attention": dict(rope_type="default", rope_theta=1000000.0),
                }
            ),
        },
    ),
    "gemma2": dict(
        cls="Gemma2ForCausalLM",
        seed=106,
        config=dict(
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"] * 2,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            query_pre_attn_scalar=24,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=4.0,
            tie_word_embeddings=True,
            hidden_activation="gelu_pytorch_tanh",
        ),
        init=dict(w=0.25, emb=0.3, norm=0.3),
        gguf_reading=dict(
            overrides=dict(query_pre_attn_scalar=16),
            why="the GGUF carries no query_pre_attn_scalar: llama.cpp scales attention by "
            "head_dim^-1/2 (n_embd/n_head only for 46-layer Gemma 2 27B)",
        ),
        ablations={
            "no_sliding_window": dict(sliding_window=4096),
            "no_attn_softcap": dict(attn_logit_softcapping=None),
            "no_final_softcap": dict(final_logit_softcapping=None),
            "query_pre_attn_scalar_eq_head_dim": dict(query_pre_attn_scalar=16),
        },
    ),
    "mistral": dict(
        cls="MistralForCausalLM",
        seed=107,
        config=dict(
            sliding_window=8,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            tie_word_embeddings=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3),
        gguf_reading=dict(
            overrides=dict(sliding_window=None),
            why="llama.cpp's converter writes no sliding-window key for MistralForCausalLM "
            "(GGUF arch llama): the GGUF model attends to every earlier position",
        ),
        ablations={"no_sliding_window": dict(sliding_window=None)},
    ),
    "phi3": dict(
        cls="Phi3ForCausalLM",
        seed=108,
        config=dict(
            sliding_window=8,
            original_max_position_embeddings=256,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            tie_word_embeddings=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3),
        gguf_reading=dict(
            overrides=dict(sliding_window=None),
            why="the GGUF carries phi3.attention.sliding_window = 8, but llama.cpp's phi3 loader "
            "ignores it ('Phi SWA is currently disabled') and attends to every earlier position; "
            "a reader that honours the key matches the primary outputs instead",
        ),
        ablations={"no_sliding_window": dict(sliding_window=None)},
    ),
}

# Config fields recorded in logits.json (those present in the family's config).
CONFIG_FIELDS = (
    "architectures model_type vocab_size hidden_size intermediate_size num_hidden_layers "
    "num_attention_heads num_key_value_heads head_dim max_position_embeddings rms_norm_eps "
    "rope_parameters rope_theta rope_scaling rope_local_base_freq partial_rotary_factor "
    "original_max_position_embeddings sliding_window layer_types use_sliding_window "
    "max_window_layers query_pre_attn_scalar attn_logit_softcapping final_logit_softcapping "
    "tie_word_embeddings attention_bias mlp_bias hidden_act hidden_activation bos_token_id "
    "eos_token_id pad_token_id _attn_implementation dtype"
).split()


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------


def build_config(fam: dict, overrides: dict | None = None):
    import transformers

    cls = getattr(transformers, fam["cls"])
    kwargs = {**COMMON, **copy.deepcopy(fam["config"]), **copy.deepcopy(overrides or {})}
    config = cls.config_class(**kwargs)
    config._attn_implementation = "eager"
    config.architectures = [fam["cls"]]
    return cls, config


def init_weights(model: torch.nn.Module, fam: dict, gemma: bool) -> None:
    """Overwrite every parameter from a generator seeded per family (order: sorted names)."""
    init = fam["init"]
    gen = torch.Generator().manual_seed(fam["seed"])
    params = dict(model.named_parameters())  # tied parameters appear once
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim == 1 and "norm" in name:
                p.copy_(noise * init["norm"] + (0.0 if gemma else 1.0))
            elif p.ndim == 1:
                p.copy_(noise * init["bias"])
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(noise * init["emb"])
            else:
                p.copy_(noise * init["w"])


def sequences() -> list[list[int]]:
    rng = np.random.default_rng(SEQ_SEED)
    return [[int(x) for x in rng.integers(0, VOCAB, size=n)] for n in SEQ_LENS]


def run_logits(model, seqs: list[list[int]]) -> list[np.ndarray]:
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s], dtype=torch.long)
            logits = model(input_ids=ids, use_cache=False).logits[0]
            assert logits.dtype == torch.float32
            out.append(logits.numpy().copy())
    return out


def f32(x) -> float:
    """The shortest decimal that reads back as this float32 (as a Python float)."""
    return float(str(np.float32(x)))


def summarize(logits: list[np.ndarray], full_first: bool) -> list[dict]:
    seqs = []
    for i, lg in enumerate(logits):
        lp = torch.log_softmax(torch.from_numpy(lg.astype(np.float64)), dim=-1).numpy()
        positions = []
        for row, lrow in zip(lg, lp):
            # ties broken by lower id (stable sort of the negated row)
            order = np.argsort(-row, kind="stable")[:TOP_K]
            positions.append(
                dict(
                    top_ids=[int(t) for t in order],
                    top_logits=[f32(row[t]) for t in order],
                    top_logprobs=[float(lrow[t]) for t in order],
                    margin=f32(np.float32(row[order[0]]) - np.float32(row[order[1]])),
                )
            )
        entry = dict(positions=positions)
        if full_first and i == 0:
            entry["logits"] = [[f32(v) for v in row] for row in lg]
        seqs.append(entry)
    return seqs


def config_fields(config) -> dict:
    d = config.to_dict()
    d["_attn_implementation"] = config._attn_implementation
    return {k: d[k] for k in CONFIG_FIELDS if k in d}


def variant_logits(cls, fam, overrides, state, seqs):
    _, cfg = build_config(fam, overrides)
    m = cls(cfg).eval()
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("lm_head" in k for k in missing), missing  # tied heads
    return run_logits(m, seqs), cfg


def margin_stats(logits: list[np.ndarray]) -> dict:
    margins = []
    for lg in logits:
        top2 = np.sort(lg, axis=-1)[:, -2:]
        margins.extend((top2[:, 1] - top2[:, 0]).tolist())
    m = np.array(margins)
    return dict(
        min=f32(m.min()),
        median=f32(np.median(m)),
        below_1e_3=int((m < 1e-3).sum()),
        logit_std=f32(np.std(np.concatenate(logits))),
    )


# ---------------------------------------------------------------------------------------------
# GGUF conversion with llama.cpp's converter
# ---------------------------------------------------------------------------------------------


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


def convert_to_gguf(hf_dir: Path, family: str, out_path: Path) -> None:
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

        patched = type(base.__name__, (base,), {"model_arch": base.model_arch, "set_vocab": set_vocab})
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


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def _scalar(x) -> bool:
    return x is None or isinstance(x, (bool, int, float, str))


def _fmt(obj, level: int) -> str:
    """JSON with nesting on separate lines, but lists of scalars, logit rows and per-position
    records each on one line."""
    compact = lambda o: json.dumps(o, separators=(",", ":"), allow_nan=False)  # noqa: E731
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if "top_ids" in obj or all(_scalar(v) or (isinstance(v, list) and all(map(_scalar, v))) for v in obj.values()):
            return compact(obj)
        items = [f"{inner}{json.dumps(k)}: {_fmt(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(map(_scalar, obj)):
            return compact(obj)
        return "[\n" + ",\n".join(inner + _fmt(v, level + 1) for v in obj) + "\n" + pad + "]"
    return compact(obj)


def write_json(path: Path, obj) -> None:
    text = _fmt(obj, 0) + "\n"
    assert json.loads(text) == obj
    path.write_text(text)


def make_family(name: str, fam: dict, seqs: list[list[int]], report: dict) -> None:
    import transformers

    out = OUT / name
    hf_dir = out / "hf"
    if out.exists():
        shutil.rmtree(out)
    hf_dir.mkdir(parents=True)

    cls, config = build_config(fam)
    torch.manual_seed(fam["seed"])
    model = cls(config).eval()
    gemma = name.startswith("gemma")
    init_weights(model, fam, gemma)
    model.save_pretrained(hf_dir)
    for f in sorted(os.listdir(hf_dir)):
        if f not in ("config.json", "model.safetensors"):
            os.remove(hf_dir / f)

    # The oracle runs on the checkpoint as saved: reload it and check it matches the in-memory one.
    loaded = cls.from_pretrained(hf_dir, attn_implementation="eager", dtype=torch.float32).eval()
    assert loaded.config._attn_implementation == "eager"
    logits = run_logits(loaded, seqs)
    for a, b in zip(logits, run_logits(model, seqs)):
        assert np.array_equal(a, b), "reloaded checkpoint disagrees with the in-memory model"
    state = {k: v.clone() for k, v in loaded.state_dict().items()}

    gguf_path = out / "model.gguf"
    convert_to_gguf(hf_dir, name, gguf_path)
    summary = gguf_summary(gguf_path)
    check_gguf_facts(name, summary, loaded.config)

    doc = dict(
        family=name,
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
        hf_class=fam["cls"],
        attn_implementation="eager",
        seed=fam["seed"],
        init_std=fam["init"],
        config=config_fields(loaded.config),
        logprobs="float64 log_softmax of transformers' float32 logits",
        top_k=TOP_K,
        sequences=seqs,
        stats=margin_stats(logits),
        outputs=summarize(logits, full_first=True),
    )
    if "gguf_reading" in fam:
        gr = fam["gguf_reading"]
        alt, alt_cfg = variant_logits(cls, fam, gr["overrides"], state, seqs)
        doc["gguf_reading"] = dict(
            why=gr["why"],
            config_overrides=gr["overrides"],
            max_abs_logit_diff_vs_primary=f32(max(np.abs(a - b).max() for a, b in zip(alt, logits))),
            stats=margin_stats(alt),
            outputs=summarize(alt, full_first=True),
        )
    sens = {}
    for label, ov in fam.get("ablations", {}).items():
        alt, _ = variant_logits(cls, fam, ov, state, seqs)
        diffs = [np.abs(a - b).max() for a, b in zip(alt, logits)]
        flips = sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, logits))
        sens[label] = dict(
            overrides=ov,
            max_abs_logit_diff=f32(max(diffs)),
            max_abs_logit_diff_per_sequence=[f32(d) for d in diffs],
            top1_changed_positions=flips,
        )
    if sens:
        doc["sensitivity"] = sens
    write_json(out / "logits.json", doc)

    report[name] = dict(
        gguf_meta=summary["meta"],
        gguf_tensors=summary["tensors"],
        stats=doc["stats"],
        sensitivity=sens,
        gguf_reading_diff=doc.get("gguf_reading", {}).get("max_abs_logit_diff_vs_primary"),
    )
    report[name]["checks"] = compare_tensors(name, summary["reader"], hf_dir, loaded.config)


def check_gguf_facts(name: str, summary: dict, config) -> None:
    """Fail loudly if the converter no longer does what gguf_reading assumes."""
    meta = summary["meta"]
    arch = meta["general.architecture"]
    if name == "mistral":
        assert arch == "llama", arch
        assert not any("sliding_window" in k for k in meta), "Mistral GGUF now has a window key"
    if name == "phi3":
        assert meta["phi3.attention.sliding_window"] == 8
    if name.startswith("gemma"):
        assert not any("pre_attn" in k or "attention.scale" in k for k in meta), meta.keys()
        assert not any("sliding_window_pattern" in k for k in meta), meta.keys()
        assert meta[f"{arch}.attention.sliding_window"] == 8


def compare_tensors(name: str, reader, hf_dir: Path, config) -> dict:
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
    if "blk.0.attn_qkv.weight" in g:
        qkv = st["model.layers.0.self_attn.qkv_proj.weight"]
        res["qkv_equal"] = bool(np.array_equal(g["blk.0.attn_qkv.weight"].reshape(qkv.shape), qkv))
        gu = st["model.layers.0.mlp.gate_up_proj.weight"]
        res["ffn_up_equal_gate_up"] = bool(np.array_equal(g["blk.0.ffn_up.weight"].reshape(gu.shape), gu))
    if "rope_freqs.weight" in g:
        res["rope_freqs"] = [f32(x) for x in g["rope_freqs.weight"]]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source dir (with convert_hf_to_gguf.py, conversion/, gguf-py/)")
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    ap.add_argument("--report", type=Path, help="also write converter facts (GGUF keys, tensors, checks) as JSON here")
    args = ap.parse_args()

    llama_cpp = args.llama_cpp.resolve()
    if not (llama_cpp / "convert_hf_to_gguf.py").is_file():
        sys.exit(f"{llama_cpp}: no convert_hf_to_gguf.py")
    sys.path.insert(0, str(llama_cpp))
    sys.path.insert(1, str(llama_cpp / "gguf-py"))

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    logging.basicConfig(level=logging.WARNING)

    names = [n for n in args.only.split(",") if n] or list(FAMILIES)
    seqs = sequences()
    report: dict = {}
    for name in names:
        print(f"== {name}", flush=True)
        make_family(name, FAMILIES[name], seqs, report)
        for f in sorted((OUT / name).rglob("*")):
            if f.is_file():
                print(f"   {f.relative_to(OUT)}  {f.stat().st_size}  {hashlib.sha256(f.read_bytes()).hexdigest()[:16]}")
    if args.report:
        args.report.write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
