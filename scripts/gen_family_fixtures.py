#!/usr/bin/env python3
"""Generate tiny random checkpoints of thirteen decoder families, with transformers' logits as oracle.

Output: crates/models/tests/fixtures/families/<family>/ for each family in FAMILIES
(llama3, llama, qwen2, qwen3, gemma3, gemma2, mistral, phi3, and the mixtures of experts
qwen3moe, qwen3moe_ties, mixtral, gpt-oss, olmoe):

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
- model-f32.gguf (gpt-oss only): hf/ converted by the same code with every tensor F32, the experts
  too, beside model.gguf's MXFP4 experts (see gpt-oss below).
- hf-mxfp4/config.json + hf-mxfp4/model.safetensors (gpt-oss only): the same checkpoint in the
  format real gpt-oss checkpoints ship in (MXFP4 experts, see gpt-oss below), for testing a loader
  of that format; model.gguf is converted from it.
- logits.json: transformers' (eager attention, float32, CPU, one thread) output on three fixed
  token sequences (lengths 12, 40, 70; ids seeded, in [0, vocab)): per position the top-5 ids,
  their float32 logits and float64 log-probabilities (log_softmax in float64 of the float32
  logits) and the top-1/top-2 logit margin; the full float32 logit rows for the first sequence.
  It also records the versions, the config fields that matter (as transformers saw them), and:
  * `gguf_reading` (gemma2, gemma3, mistral, phi3, gpt-oss): the same outputs from transformers
    with the config changed to what llama.cpp does with this GGUF, where that differs from the HF
    checkpoint: Gemma GGUFs carry no `query_pre_attn_scalar` (llama.cpp scales by head_dim^-1/2
    below 27B); the Mistral GGUF carries no sliding window (llama arch: full attention);
    llama.cpp ignores the Phi-3 GGUF's `phi3.attention.sliding_window` ("Phi SWA is currently
    disabled"); the gpt-oss GGUF has no YaRN `truncate` flag and llama.cpp always truncates the
    correction range (the checkpoint says truncate: false). The script asserts these facts on the
    converted files.
  * `sensitivity`: how far the logits move when one feature is switched off (sliding window,
    soft-capping, rope scaling, top-k, weight renormalization, ...; for gpt-oss also parameters
    replaced in the state: sinks -inf, router bias 0, expert biases 0), to show the fixture can
    tell the feature is implemented.
  * `moe` (mixtures of experts only): the routing as transformers computes it (text), the tie
    rule of the outputs, `max_abs_logit`; `routing_stats` over every routing decision (position
    x layer): distinct expert sets per layer, expert use, the smallest gap between the k-th and
    (k+1)-th router logit (asserted >= 5e-3, so rounding cannot change a choice), and exact ties
    of routing probabilities (counted per tied group: straddling the top-k boundary, wholly
    chosen, wholly not); `tie_break`: the outputs again with torch.topk itself and with ties
    broken by the lower / higher expert id, against `outputs`; `gguf_checks` (the GGUF's
    ffn_gate_inp / ffn_{gate,up,down}_exps equal the HF router / per-expert matrices stacked);
    `hf_tensors` (every safetensors name, shape, dtype); `gguf` (metadata without the vocabulary,
    and every tensor's shape as GGUF lists it, ne0 first, and type); the router logits of the
    first sequence; `routes`: per sequence, layer and position the chosen ids (in top-k order)
    and their weights. For gpt-oss the router logits include the router bias, `gguf_checks`
    compares the MXFP4 experts (below), and `gguf_reading` carries its own routing_stats (its
    boundary gap asserted >= 5e-3 too).
  * `gpt_oss` (gpt-oss only): see below.
  * `olmoe` (olmoe only): see below.

Shapes: hidden 64, 4 heads, 2 KV heads, head_dim 16, intermediate 128, vocab 256, 4 layers,
max_position_embeddings 256; Gemma 3 has 6 layers, so that llama.cpp's implied pattern (every 6th
layer global; the GGUF has no pattern key) is the checkpoint's own `layer_types`.

Mixtures of experts (issue 49), 3 layers each, every layer sparse, router matrices with std 0.5
so that the chosen experts vary from token to token:
- qwen3moe (Qwen3MoeForCausalLM, GGUF arch qwen3moe): 8 experts, top-2, moe_intermediate_size 32,
  norm_topk_prob true, rope_theta 1e6, untied head. Routing: softmax over all experts (float32),
  top k, the chosen probabilities divided by their sum (llama.cpp's qwen3moe graph always
  renormalizes; the GGUF carries no flag for it). hf/config.json spells the expert count
  `num_experts`, as the hub's Qwen3-MoE configs do (transformers 5 would write
  `num_local_experts`; it reads either).
- qwen3moe_ties: qwen3moe's checkpoint with router row 2 a copy of row 1 and row 6 a copy of row 5
  in every layer, so those experts' scores tie exactly at every position. torch.topk on CPU
  breaks such ties in no fixed id order, so this fixture's outputs break them by the lower
  expert id (torch.topk replaced by a stable sort); `moe.tie_break.torch_topk` and
  `moe.torch_topk_routing_stats` record what torch.topk itself does.
- mixtral (MixtralForCausalLM, GGUF arch llama with expert tensors): 4 experts, top-2,
  intermediate_size 64 per expert, no sliding window; weights always renormalized.
- olmoe (OlmoeForCausalLM, GGUF arch olmoe; allenai/OLMoE-1B-7B-0924 at toy size): 8 experts,
  top-2, intermediate_size 32 per expert, norm_topk_prob false (OLMoE's default: the chosen
  softmax probabilities are the weights, not renormalized; llama.cpp's olmoe graph passes
  norm_w = false and the GGUF has no flag), 4 KV heads (= heads, as the real model: llama.cpp's
  olmoe loader sizes attn_k_norm {n_embd}, so a GQA GGUF would not load), rms_norm_eps 1e-5
  (the converter writes 1e-5 whatever the config says), rope_theta 1e4, untied head. Attention:
  q = q_norm(q_proj x), k = k_norm(k_proj x), each one RMSNorm over the whole projection
  (weights [hidden] and [kv_heads * head_dim]) before the split into heads and before RoPE (NeoX
  halves; the converter does not permute q/k). logits.json's `olmoe` section records these rules,
  the tensor shapes on both sides, the GGUF keys and llama.cpp's olmoe graph; `sensitivity` adds
  q/k norms taken per head, applied after RoPE, or skipped (OlmoeAttention.forward replaced by a
  reimplementation, asserted bit-equal to transformers' own when unchanged).
hf/ holds the hub's per-expert tensors (model.layers.N.mlp.gate.weight and
model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight (qwen3moe, olmoe); model.layers.N.block_sparse_moe.gate.weight
and ...block_sparse_moe.experts.E.{w1,w3,w2}.weight), which transformers 5's save_pretrained
writes from its fused in-memory experts (the script asserts the layout); the oracle runs the
experts' eager loop (experts_implementation "eager").

gpt-oss (GptOssForCausalLM, GGUF arch gpt-oss), 3 layers (sliding, full, sliding: layer_types
alternate from sliding as in the real model; 4 layers would take the fixture past 4.5 MB),
sliding_window 8, 8 experts top-2, intermediate_size 64, attention biases, one learned sink logit
per head (std 1), router bias, gate_up / down expert biases, swiglu_alpha 1.702, swiglu_limit 7
(expert matrices drawn with std 0.3 / 0.15 so that the clamp bites: counted in
gpt_oss.swiglu.clamp_counts), YaRN as openai/gpt-oss-20b (factor 32, beta_fast 32, beta_slow 1,
truncate false, theta 150000) but original_max_position_embeddings 32 (max_position_embeddings
1024 = 32 x 32), so that the correction range [0, 1.09] (truncated [0, 2]) falls inside head_dim
16's eight rotary pairs. Routing: top-k of the router logits + bias, softmax over the k chosen.
MXFP4 experts: the drawn expert matrices are quantized to MXFP4 (blocks of 32 along the input,
E8M0 scale = 127 + floor(log2 max|x|) - 2, nearest E2M1 value) and the dequantized values (exact
in float32) are the model's weights, so hf/ (float32, transformers' fused layout as save_pretrained
writes it: mlp.experts.gate_up_proj [E, hidden, 2*inter] with gate/up interleaved along the last
axis, down_proj [E, inter, hidden], their biases, mlp.router.{weight,bias}, self_attn.sinks) and
the MXFP4 GGUF hold the same values. hf-mxfp4/ is the checkpoint in the hub's packed layout, as
openai/gpt-oss-20b ships it: config.json with rope_theta + rope_scaling and quantization_config
{quant_method: mxfp4, modules_to_not_convert as the hub's}; in model.safetensors, per layer
mlp.experts.gate_up_proj_blocks [E, 2*inter, hidden/32, 16] and gate_up_proj_scales
[E, 2*inter, hidden/32], down_proj_blocks [E, hidden, inter/32, 16] and down_proj_scales
[E, hidden, inter/32], all uint8, in place of hf/'s two float expert matrices; every other
tensor (expert biases, router, sinks, attention, norms, embeddings, head) is hf/'s own, float32
(the hub's are bfloat16). Row r of a gate_up tensor is output feature r of gate_up: even rows
gate, odd rows up (interleaved, as hf/'s gate_up_proj columns); each row is blocks of 32 along the
input; in a block's 16 bytes byte i holds element 2i in the low nibble and element 2i + 1 in the
high nibble (a 4-bit E2M1 code: bit 3 the sign); a scale byte s (E8M0) scales its block by
2^(s - 127). It is for loading the hub format: its MXFP4 experts are the very integers of
model.gguf's (same codes and scale bytes, repacked as ggml's block_mxfp4 by the converter), so a
loader can compare its reading of hf-mxfp4/ against its reading of model.gguf bit for bit, and
both dequantize exactly to hf/'s floats. The converter reads hf-mxfp4/ for model.gguf; the GGUF
carries ffn_{gate,up,down}_exps as MXFP4 (type 39), everything else F32. Asserted: hf-mxfp4/'s
tensors are exactly those (names, shapes, dtypes), its non-expert tensors byte-equal hf/'s, its
blocks unpack to the quantization's codes and dequantize to hf/'s matrices; transformers itself
(Mxfp4Config(dequantize=True)) reads hf-mxfp4/ to exactly hf/'s weights; gguf-py's MXFP4
dequantize of the GGUF's expert tensors equals hf/'s gate (even columns of gate_up_proj), up (odd)
and down matrices; the raw GGUF blocks equal our own ggml packing of the same codes and scale
bytes (scale byte, then byte j = element j | element j+16 << 4).
model-f32.gguf is the same checkpoint converted from hf/ itself (float32 fused experts, no
quantization_config: the converter transposes gate_up_proj / down_proj and splits gate_up into
ffn_gate_exps (even columns) and ffn_up_exps (odd), warning "not in MXFP4"), so every tensor is
F32. It is for the exact comparison (3e-4) of everything but MXFP4: an engine runs quantized
weights on activations quantized to int8 (as llama.cpp's CPU MXFP4 matmul quantizes them to Q8_0),
so model.gguf's logits cannot meet transformers' at that tolerance; its MXFP4 experts are checked
bit-exact at the kernel level (dequantization, integer dot products) and only loosely end to end.
Asserted: the two GGUFs' metadata are equal field by field (value types and values, the vocabulary
included) but for general.file_type, which names the tensor types (MOSTLY_MXFP4_MOE 38 vs ALL_F32
0); they list the same tensors with the same shapes; every tensor of model-f32.gguf is F32, each
non-expert one byte-equal to model.gguf's, and ffn_{gate,up,down}_exps equal hf/'s gate, up and
down matrices exactly. gguf_reading applies to both files.
logits.json's `gpt_oss` section records the SwiGLU and router code of the installed transformers,
the clamp counts, the sink rule, the YaRN inverse frequencies (truncate false / true) and
attention factor, the E2M1 table, both MXFP4 byte layouts and hf-mxfp4/'s config and tensors
(mxfp4.hub_config, mxfp4.hub_tensors).

Run (deterministic: a rerun rewrites identical files):

    python3 -m venv /tmp/oracle-venv
    /tmp/oracle-venv/bin/pip install torch transformers safetensors numpy sentencepiece protobuf
    # llama.cpp's converter, from the llama-cpp-python source package (its vendored llama.cpp,
    # extracted by scripts/build-llama-cpp, which also builds the bench tools; only the source is
    # needed here).
    scripts/build-llama-cpp
    /tmp/oracle-venv/bin/python scripts/gen_family_fixtures.py \\
        --llama-cpp target/llama.cpp/src/llama.cpp [--only gemma3,phi3]

(gpt-oss needs nothing more: the MXFP4 packing is the script's own, numpy.)

Generated with torch 2.15.0, transformers 5.25.0, llama-cpp-python 0.3.36 (see logits.json).
"""

from __future__ import annotations

import argparse
import contextlib
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

QWEN3MOE = dict(
    num_hidden_layers=3,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
    tie_word_embeddings=False,
    attention_bias=False,
)

# gpt-oss's rope: YaRN as openai/gpt-oss-20b has it (factor 32, beta_fast 32, beta_slow 1,
# truncate false, theta 150000), with original_max_position_embeddings 32 instead of 4096 so that,
# at head_dim 16, the correction range is [0, 1.09] (truncated: [0, 2]): rotary pair 0 keeps its
# frequency, pair 1 (wavelength 28 positions) is a mix that truncation changes, pairs 2-7 are
# divided by 32; the cos/sin carry YaRN's attention factor 1 + 0.1 ln 32.
GPT_OSS_YARN = dict(
    rope_type="yarn",
    rope_theta=150000.0,
    factor=32.0,
    beta_fast=32.0,
    beta_slow=1.0,
    truncate=False,
    original_max_position_embeddings=32,
)
GPT_OSS_SEED = 125
# of seeds 126..159 one of the widest top-k boundaries: the narrowest gap between a position's
# 2nd and 3rd router logit is 0.0139 with seed 132 (0.0157 with 138 and 153, whose last layers use
# fewer expert pairs; below 5e-3 for 23 of the 34 seeds, 2.2e-4 with 158)
OLMOE_SEED = 132

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
    # Mixtures of experts (issue 49). "router" = std of the router matrices (larger than "w", so
    # that the experts chosen vary from token to token and the top-k boundary is clear); "moe"
    # names the hub's (per-expert) tensor names and the routing facts the script records.
    "qwen3moe": dict(
        cls="Qwen3MoeForCausalLM",
        seed=109,
        config=QWEN3MOE,
        init=dict(w=0.15, emb=0.5, norm=0.3, router=0.5),
        moe=dict(
            router_hf="model.layers.{L}.mlp.gate.weight",
            experts_hf=dict(
                gate="model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
                up="model.layers.{L}.mlp.experts.{E}.up_proj.weight",
                down="model.layers.{L}.mlp.experts.{E}.down_proj.weight",
            ),
            # transformers 5 writes the expert count as num_local_experts (its attribute_map);
            # the hub's Qwen3-MoE configs (Qwen/Qwen3-30B-A3B) spell it num_experts.
            hub_config_renames={"num_local_experts": "num_experts"},
        ),
        ablations={
            "no_norm_topk_prob": dict(norm_topk_prob=False),
            "top_k_3": dict(num_experts_per_tok=3),
            "top_k_1": dict(num_experts_per_tok=1),
        },
    ),
    # qwen3moe's checkpoint with, in every layer, router row 2 a copy of row 1 and row 6 a copy
    # of row 5: experts 1 and 2 (and 5 and 6) get bit-identical scores at every position.
    "qwen3moe_ties": dict(
        cls="Qwen3MoeForCausalLM",
        seed=109,
        config=QWEN3MOE,
        init=dict(w=0.15, emb=0.5, norm=0.3, router=0.5),
        moe=dict(
            router_hf="model.layers.{L}.mlp.gate.weight",
            experts_hf=dict(
                gate="model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
                up="model.layers.{L}.mlp.experts.{E}.up_proj.weight",
                down="model.layers.{L}.mlp.experts.{E}.down_proj.weight",
            ),
            hub_config_renames={"num_local_experts": "num_experts"},
            router_ties=[(1, 2), (5, 6)],  # (source row, copy)
            # torch.topk (CPU) breaks these ties in no id order; the oracle breaks them by the
            # lower expert id, the rule we implement (torch.topk's own outputs are recorded too).
            tie_rule="lower_id",
        ),
    ),
    "mixtral": dict(
        cls="MixtralForCausalLM",
        # of seeds 110..117 the one with the widest top-k boundary: the narrowest gap between a
        # position's 2nd and 3rd router logit is 0.017 with seed 114, 3e-5 with 110
        seed=114,
        config=dict(
            num_hidden_layers=3,
            intermediate_size=64,  # each expert's FFN width (= hidden: expert matrices are square)
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=None,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            tie_word_embeddings=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3, router=0.5),
        moe=dict(
            router_hf="model.layers.{L}.block_sparse_moe.gate.weight",
            experts_hf=dict(
                gate="model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight",
                up="model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight",
                down="model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight",
            ),
            hub_config_renames={},
        ),
        ablations={"top_k_1": dict(num_experts_per_tok=1), "top_k_3": dict(num_experts_per_tok=3)},
    ),
    # gpt-oss (issue 49): the real model's features at toy size. MXFP4 experts: the drawn expert
    # matrices are quantized to MXFP4 and the dequantized values (exact in float32) are the model's
    # weights; the converter gets them in the hub's packed layout (see make_gpt_oss_hub).
    # init: "experts"/"experts_down" = std of gate_up_proj / down_proj before quantization (large
    # enough that the SwiGLU clamp at swiglu_limit bites at some positions), "expert_bias" = std of
    # gate_up_proj_bias / down_proj_bias, "router_bias" = std of the router bias, "sinks" = std of
    # the attention sinks.
    "gpt-oss": dict(
        cls="GptOssForCausalLM",
        seed=GPT_OSS_SEED,
        config=dict(
            num_hidden_layers=3,  # sliding, full, sliding (4 would take the fixture past 4.5 MB)
            intermediate_size=64,  # each expert's FFN width (MXFP4: a multiple of 32)
            num_local_experts=8,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters=GPT_OSS_YARN,
            max_position_embeddings=1024,  # = factor * original_max_position_embeddings, as the real model
            attention_bias=True,
            swiglu_alpha=1.702,
            swiglu_limit=7.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
        init=dict(w=0.1, emb=0.3, norm=0.3, bias=0.3, router=0.5, router_bias=0.5, sinks=1.0,
                  experts=0.3, experts_down=0.15, expert_bias=0.3),
        gguf_reading=dict(
            overrides=dict(rope_parameters={**GPT_OSS_YARN, "truncate": True}),
            why="the GGUF carries no YaRN truncate flag and llama.cpp always truncates the YaRN "
            "correction range (ggml_rope_yarn_corr_dims: floor of the beta_fast dimension, ceil of "
            "the beta_slow one), where the checkpoint says truncate: false as gpt-oss does; so the "
            "GGUF model's rotary frequencies are those of truncate: true",
        ),
        moe=dict(
            router_hf="model.layers.{L}.mlp.router.weight",
            hub_config_renames={},
            gpt_oss=True,
        ),
        ablations={
            "no_yarn": dict(rope_parameters=dict(rope_type="default", rope_theta=150000.0)),
            "yarn_truncate": dict(rope_parameters={**GPT_OSS_YARN, "truncate": True}),
            "no_sliding_window": dict(layer_types=["full_attention"] * 3),
            "no_swiglu_limit": dict(swiglu_limit=1e30),
            "top_k_1": dict(num_experts_per_tok=1),
        },
        # parameters replaced in the oracle's state (suffix of the name -> value)
        state_ablations={
            "no_sinks": {"self_attn.sinks": "-inf"},
            "no_router_bias": {"mlp.router.bias": 0.0},
            "no_expert_biases": {"mlp.experts.gate_up_proj_bias": 0.0, "mlp.experts.down_proj_bias": 0.0},
        },
    ),
    # OLMoE (allenai/OLMoE-1B-7B-0924 at toy size): q/k RMSNorm over the whole projection, routing
    # without renormalization (norm_topk_prob false). 4 KV heads = 4 heads, as the real model has:
    # transformers would take fewer (k_norm over kv_heads * head_dim), but llama.cpp's olmoe loader
    # sizes attn_k_norm {n_embd} (though attn_k is {n_embd, n_embd_gqa}), so a GQA GGUF would not load.
    "olmoe": dict(
        cls="OlmoeForCausalLM",
        seed=OLMOE_SEED,
        config=dict(
            num_hidden_layers=3,
            num_key_value_heads=4,
            num_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,  # each expert's FFN width (OLMoE has no moe_intermediate_size)
            norm_topk_prob=False,
            rms_norm_eps=1e-5,  # the real model's, and what the converter writes whatever the config says
            clip_qkv=None,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            tie_word_embeddings=False,
            attention_bias=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3, router=0.5),
        moe=dict(
            router_hf="model.layers.{L}.mlp.gate.weight",
            experts_hf=dict(
                gate="model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
                up="model.layers.{L}.mlp.experts.{E}.up_proj.weight",
                down="model.layers.{L}.mlp.experts.{E}.down_proj.weight",
            ),
            # OlmoeConfig's attribute_map is {num_local_experts: num_experts}: save_pretrained
            # already writes num_experts, as the hub's OLMoE configs do.
            hub_config_renames={},
        ),
        ablations={
            "norm_topk_prob_true": dict(norm_topk_prob=True),
            "top_k_1": dict(num_experts_per_tok=1),
            "top_k_3": dict(num_experts_per_tok=3),
            "rms_norm_eps_1e-6": dict(rms_norm_eps=1e-6),
        },
        # attention variants (olmoe_attention): sensitivity entries too
        attention_ablations=("qk_norm_per_head", "qk_norm_after_rope", "no_qk_norm"),
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
# Also recorded for the mixtures of experts (none of these is in a dense family's config).
MOE_CONFIG_FIELDS = (
    "num_experts num_local_experts num_experts_per_tok norm_topk_prob moe_intermediate_size "
    "decoder_sparse_step mlp_only_layers shared_expert_intermediate_size router_aux_loss_coef "
    "output_router_logits router_jitter_noise swiglu_alpha swiglu_limit"
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
    if "moe" in fam:
        config._experts_implementation = "eager"  # the per-expert loop, not grouped_mm
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
            # gpt-oss's own parameters (no other family's init names these stds)
            if "sinks" in init and name.endswith(".self_attn.sinks"):
                p.copy_(noise * init["sinks"])
            elif "router_bias" in init and name.endswith(".mlp.router.bias"):
                p.copy_(noise * init["router_bias"])
            elif "expert_bias" in init and name.endswith(("experts.gate_up_proj_bias", "experts.down_proj_bias")):
                p.copy_(noise * init["expert_bias"])
            elif "experts" in init and name.endswith("experts.gate_up_proj"):
                p.copy_(noise * init["experts"])
            elif "experts_down" in init and name.endswith("experts.down_proj"):
                p.copy_(noise * init["experts_down"])
            elif p.ndim == 1 and "norm" in name:
                p.copy_(noise * init["norm"] + (0.0 if gemma else 1.0))
            elif p.ndim == 1:
                p.copy_(noise * init["bias"])
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(noise * init["emb"])
            elif "router" in init and name.endswith((".mlp.gate.weight", ".mlp.router.weight")):
                p.copy_(noise * init["router"])
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


def config_fields(config, moe: bool = False) -> dict:
    d = config.to_dict()
    d["_attn_implementation"] = config._attn_implementation
    fields = CONFIG_FIELDS + (MOE_CONFIG_FIELDS if moe else [])
    return {k: d[k] for k in fields if k in d}


def variant_logits(cls, fam, overrides, state, seqs, state_overrides=None):
    _, cfg = build_config(fam, overrides)
    m = cls(cfg).eval()
    if state_overrides:
        # replace every parameter whose name ends with a key by the value ("-inf" for -infinity)
        state = dict(state)
        for suffix, v in state_overrides.items():
            hit = [k for k in state if k.endswith(suffix)]
            assert len(hit) == cfg.num_hidden_layers, (suffix, hit)
            for k in hit:
                state[k] = torch.full_like(state[k], float(v))
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
# Mixtures of experts: routing records, tie rules, the hub's tensor layout
# ---------------------------------------------------------------------------------------------


def routers(model) -> list:
    """Each layer's router (Qwen3MoeTopKRouter / MixtralTopKRouter / GptOssTopKRouter), in layer order."""
    out = [m for n, m in model.named_modules() if n.endswith((".mlp.gate", ".mlp.router"))]
    assert len(out) == model.config.num_hidden_layers, len(out)
    return out


def run_logits_routed(model, seqs: list[list[int]]):
    """run_logits, plus what every router computed: per sequence, per layer, (router logits
    [T, E] float32, the chosen expert ids [T, k] in torch.topk's order, their weights [T, k])."""
    routes: list[list[tuple]] = []
    cur: list[tuple] = []

    def hook(_module, _inputs, out):
        logits, weights, ids = out
        assert logits.dtype == torch.float32 and weights.dtype == torch.float32
        cur.append((logits.numpy().copy(), ids.numpy().copy(), weights.numpy().copy()))

    handles = [r.register_forward_hook(hook) for r in routers(model)]
    try:
        out = []
        for s in seqs:
            cur.clear()
            out.extend(run_logits(model, [s]))
            routes.append(list(cur))
    finally:
        for h in handles:
            h.remove()
    return out, routes


@contextlib.contextmanager
def topk_tie_rule(rule: str):
    """Replace torch.topk (the routers' only use of it) by a sort that breaks ties by the lower
    ("lower_id") or the higher ("higher_id") expert id."""
    orig = torch.topk

    def topk(x, k, dim=-1, largest=True, sorted=True):
        assert dim in (-1, x.ndim - 1) and largest and sorted
        n = x.shape[-1]
        src = x if rule == "lower_id" else x.flip(-1)
        vals, idx = torch.sort(src, dim=-1, descending=True, stable=True)
        if rule == "higher_id":
            idx = n - 1 - idx
        return vals[..., :k], idx[..., :k]

    torch.topk = topk
    try:
        yield
    finally:
        torch.topk = orig


def routing_stats(routes, k: int) -> dict:
    """Distinct expert sets, expert use, the router-logit gap at the top-k boundary, and every
    exact tie among the routing probabilities (the values torch.topk compares)."""
    n_layers = len(routes[0])
    n_exp = routes[0][0][0].shape[1]
    layers = []
    all_sets: set = set()
    totals = dict(boundary_ties=0, boundary_picks_lower_ids=0, boundary_picks_higher_ids=0, boundary_picks_other=0,
                  inside_ties=0, inside_ties_lower_id_first=0, outside_ties=0, tied_logits_with_unequal_probs=0)
    for layer in range(n_layers):
        sets: set = set()
        use = [0] * n_exp
        gaps = []
        t = {key: 0 for key in totals}
        for seq in routes:
            logits, ids, _ = seq[layer]
            probs = torch.softmax(torch.from_numpy(logits), dim=-1, dtype=torch.float).numpy()
            for lrow, prow, chosen in zip(logits, probs, ids):
                chosen = [int(e) for e in chosen]
                sets.add(tuple(sorted(chosen)))
                for e in chosen:
                    use[e] += 1
                ls = np.sort(lrow)[::-1]
                gaps.append(np.float32(ls[k - 1]) - np.float32(ls[k]))
                for a in range(n_exp):
                    for b in range(a + 1, n_exp):
                        if lrow[a] == lrow[b] and prow[a] != prow[b]:
                            t["tied_logits_with_unequal_probs"] += 1
                # groups of equal probabilities
                for v in sorted(set(prow.tolist())):
                    group = [e for e in range(n_exp) if prow[e] == v]
                    if len(group) < 2:
                        continue
                    picked = sorted(e for e in chosen if e in group)
                    if len(picked) == len(group):
                        t["inside_ties"] += 1
                        pos = [chosen.index(e) for e in group]
                        t["inside_ties_lower_id_first"] += int(pos == sorted(pos))
                    elif not picked:
                        t["outside_ties"] += 1
                    else:
                        t["boundary_ties"] += 1
                        n = len(picked)
                        if picked == group[:n]:
                            t["boundary_picks_lower_ids"] += 1
                        elif picked == group[-n:]:
                            t["boundary_picks_higher_ids"] += 1
                        else:
                            t["boundary_picks_other"] += 1
        all_sets |= sets
        g = np.array(gaps, dtype=np.float32)
        nz = g[g > 0]
        layers.append(
            dict(
                distinct_expert_sets=len(sets),
                expert_use=use,
                min_boundary_gap=f32(g.min()),
                min_nonzero_boundary_gap=f32(nz.min()) if nz.size else None,
                nonzero_boundary_gaps_below_1e_2=int((nz < 1e-2).sum()),
                **t,
            )
        )
        for key in totals:
            totals[key] += t[key]
    return dict(
        decisions=sum(len(seq[0][1]) for seq in routes) * n_layers,
        distinct_expert_sets_per_layer=[x["distinct_expert_sets"] for x in layers],
        distinct_expert_sets_all_layers=len(all_sets),
        min_nonzero_boundary_gap=min((x["min_nonzero_boundary_gap"] for x in layers if x["min_nonzero_boundary_gap"] is not None), default=None),
        **totals,
        per_layer=layers,
    )


def routing_record(routes) -> list:
    """Per sequence, per layer, per position: the chosen ids (torch.topk's order) and weights."""
    return [
        [[dict(ids=[int(e) for e in i], weights=[f32(x) for x in w]) for i, w in zip(ids, ws)] for _, ids, ws in seq]
        for seq in routes
    ]


def hf_tensor_table(hf_dir: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(hf_dir / "model.safetensors"), "np") as f:
        return {
            k: dict(shape=[int(x) for x in f.get_slice(k).get_shape()], dtype=f.get_slice(k).get_dtype())
            for k in f.keys()
        }


def check_hub_format(table: dict, fam: dict, config) -> None:
    """save_pretrained must have written the hub's per-expert tensors (transformers 5 holds the
    experts fused in memory, as experts.gate_up_proj [E, 2F, H] and experts.down_proj [E, H, F],
    and converts back on saving)."""
    m = fam["moe"]
    n_exp, hid = config.num_local_experts, config.hidden_size
    ff = getattr(config, "moe_intermediate_size", None) or config.intermediate_size
    want = {}
    for layer in range(config.num_hidden_layers):
        want[m["router_hf"].format(L=layer)] = [n_exp, hid]
        for e in range(n_exp):
            want[m["experts_hf"]["gate"].format(L=layer, E=e)] = [ff, hid]
            want[m["experts_hf"]["up"].format(L=layer, E=e)] = [ff, hid]
            want[m["experts_hf"]["down"].format(L=layer, E=e)] = [hid, ff]
    for name, shape in want.items():
        assert name in table, f"save_pretrained wrote no {name} (fused experts?): {sorted(table)[:20]}"
        assert table[name]["shape"] == shape, (name, table[name], shape)
    experts = [n for n in table if ".experts." in n or n.endswith(".gate.weight")]
    assert sorted(experts) == sorted(want), sorted(set(experts) ^ set(want))


def hub_config(hf_dir: Path, renames: dict) -> None:
    """Rename config.json keys to the hub's spelling (transformers reads either)."""
    if not renames:
        return
    path = hf_dir / "config.json"
    d = json.loads(path.read_text())
    assert path.read_text() == json.dumps(d, indent=2, sort_keys=True) + "\n"  # save_pretrained's format
    for old, new in renames.items():
        d[new] = d.pop(old)
    path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# gpt-oss: MXFP4 experts, the hub's packed checkpoint, the clamped SwiGLU
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# OLMoE: q/k RMSNorm over the whole projection
# ---------------------------------------------------------------------------------------------

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
        diffs = [np.abs(a - b).max() for a, b in zip(alt, logits)]
        out[mode] = dict(
            attention=OLMOE_ATTENTION_MODES[mode],
            max_abs_logit_diff=f32(max(diffs)),
            max_abs_logit_diff_per_sequence=[f32(d) for d in diffs],
            top1_changed_positions=sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, logits)),
        )
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
    moe = fam.get("moe")
    gpt_oss = bool(moe and moe.get("gpt_oss"))
    mx = quantize_experts(model) if gpt_oss else None
    if moe and moe.get("router_ties"):
        with torch.no_grad():
            for router in routers(model):
                for src, dst in moe["router_ties"]:
                    router.weight[dst] = router.weight[src]
    model.save_pretrained(hf_dir)
    for f in sorted(os.listdir(hf_dir)):
        if f not in ("config.json", "model.safetensors"):
            os.remove(hf_dir / f)
    extra = {}
    if moe:
        hub_config(hf_dir, moe["hub_config_renames"])
        hf_tensors = hf_tensor_table(hf_dir)
        if gpt_oss:
            check_gpt_oss_hf_format(hf_tensors, model.config)
        else:
            check_hub_format(hf_tensors, fam, model.config)
        extra = dict(experts_implementation="eager")

    # The oracle runs on the checkpoint as saved: reload it and check it matches the in-memory one.
    loaded = cls.from_pretrained(hf_dir, attn_implementation="eager", dtype=torch.float32, **extra).eval()
    assert loaded.config._attn_implementation == "eager"
    if moe:
        assert loaded.config._experts_implementation == "eager"
        for key in ("num_local_experts", "num_experts_per_tok", "num_hidden_layers"):
            assert getattr(loaded.config, key) == getattr(model.config, key), key
        with tie_context(fam):
            logits, routes = run_logits_routed(loaded, seqs)
            in_memory = run_logits(model, seqs)
        stats = routing_stats(routes, loaded.config.num_experts_per_tok)
        # A near-tie at the top-k boundary would let float rounding pick other experts.
        assert stats["min_nonzero_boundary_gap"] >= 5e-3, stats["min_nonzero_boundary_gap"]
    else:
        logits = run_logits(loaded, seqs)
        in_memory = run_logits(model, seqs)
    for a, b in zip(logits, in_memory):
        assert np.array_equal(a, b), "reloaded checkpoint disagrees with the in-memory model"
    state = {k: v.clone() for k, v in loaded.state_dict().items()}

    gguf_path = out / "model.gguf"
    if gpt_oss:
        # the converter reads gpt-oss in the hub's MXFP4 layout (as openai/gpt-oss-20b ships):
        # hf-mxfp4/, committed beside hf/ for the loaders of that format
        hub_dir = out / "hf-mxfp4"
        hub_dir.mkdir()
        hub_table = write_gpt_oss_hub(hf_dir, mx, hub_dir)
        check_gpt_oss_hub_format(hub_dir, hf_dir, mx, loaded.config)
        hub_check = hub_reload_check(hub_dir, state)
        assert hub_check["expert_matrices_bitwise_equal"] and hub_check["other_tensors_bitwise_equal"], hub_check
        convert_to_gguf(hub_dir, name, gguf_path)
        assert sorted(os.listdir(hub_dir)) == ["config.json", "model.safetensors"], os.listdir(hub_dir)
    else:
        convert_to_gguf(hf_dir, name, gguf_path)
    summary = gguf_summary(gguf_path)
    check_gguf_facts(name, summary, loaded.config)
    checks = compare_tensors(name, summary["reader"], hf_dir, loaded.config, fam)
    if gpt_oss:
        checks.update(gpt_oss_gguf_checks(summary["reader"], hf_dir, mx, loaded.config))
        assert all(v for k, v in checks.items() if k.endswith(("_equal", "_mxfp4", "_packing", "equal_hf"))), checks
        # every tensor F32 (the experts too): the float checkpoint itself, for the exact comparison
        f32_path = out / "model-f32.gguf"
        convert_to_gguf(hf_dir, name, f32_path)
        f32_summary = gguf_summary(f32_path)
        check_gguf_facts(name, f32_summary, loaded.config)
        f32_checks = gpt_oss_f32_gguf_checks(f32_summary["reader"], summary["reader"], hf_dir, loaded.config)
        assert all(f32_checks.values()), f32_checks

    doc = dict(
        family=name,
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
        hf_class=fam["cls"],
        attn_implementation="eager",
        seed=fam["seed"],
        init_std=fam["init"],
        config=config_fields(loaded.config, bool(moe)),
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
        if moe:
            # the GGUF reading's routing must be as clear-cut as the primary one
            m_alt = cls(alt_cfg).eval()
            m_alt.load_state_dict(state)
            alt2, alt_routes = run_logits_routed(m_alt, seqs)
            assert all(np.array_equal(a, b) for a, b in zip(alt, alt2))
            alt_stats = routing_stats(alt_routes, alt_cfg.num_experts_per_tok)
            assert alt_stats["min_nonzero_boundary_gap"] >= 5e-3, alt_stats["min_nonzero_boundary_gap"]
            doc["gguf_reading"]["routing_stats"] = {k: v for k, v in alt_stats.items() if k != "per_layer"}
            doc["gguf_reading"]["top1_changed_positions_vs_primary"] = sum(
                int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, logits)
            )
    sens = {}
    for label, ov in fam.get("ablations", {}).items():
        with tie_context(fam):
            alt, _ = variant_logits(cls, fam, ov, state, seqs)
        diffs = [np.abs(a - b).max() for a, b in zip(alt, logits)]
        flips = sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, logits))
        sens[label] = dict(
            overrides=ov,
            max_abs_logit_diff=f32(max(diffs)),
            max_abs_logit_diff_per_sequence=[f32(d) for d in diffs],
            top1_changed_positions=flips,
        )
    for label, so in fam.get("state_ablations", {}).items():
        with tie_context(fam):
            alt, _ = variant_logits(cls, fam, {}, state, seqs, state_overrides=so)
        diffs = [np.abs(a - b).max() for a, b in zip(alt, logits)]
        flips = sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, logits))
        sens[label] = dict(
            state_overrides={f"model.layers.*.{k}": v for k, v in so.items()},
            max_abs_logit_diff=f32(max(diffs)),
            max_abs_logit_diff_per_sequence=[f32(d) for d in diffs],
            top1_changed_positions=flips,
        )
    olmoe_attn = None
    if fam.get("attention_ablations"):
        olmoe_attn = olmoe_attention_checks(cls, fam, state, seqs, logits)
        for label in fam["attention_ablations"]:
            sens[label] = olmoe_attn.pop(label)
    if sens:
        doc["sensitivity"] = sens
    if moe:
        doc["moe"] = moe_record(fam, loaded, seqs, logits, routes, hf_tensors, summary, checks)
    if gpt_oss:
        doc["gpt_oss"] = gpt_oss_record(loaded, hub_table, hub_check, seqs)
    if name == "olmoe":
        doc["olmoe"] = olmoe_record(loaded, hf_tensors, summary, olmoe_attn)
    write_json(out / "logits.json", doc)

    report[name] = dict(
        gguf_meta=summary["meta"],
        gguf_tensors=summary["tensors"],
        stats=doc["stats"],
        sensitivity=sens,
        gguf_reading_diff=doc.get("gguf_reading", {}).get("max_abs_logit_diff_vs_primary"),
    )
    report[name]["checks"] = checks
    if gpt_oss:
        report[name]["f32_gguf_checks"] = f32_checks


ROUTING = {
    "Qwen3MoeForCausalLM": "router logits = x @ mlp.gate.weight^T (float32, x = the post-attention "
    "RMSNorm output); p = softmax(router logits) over all experts (float32); the k largest p by "
    "torch.topk; with norm_topk_prob the chosen p are divided by their sum (float32); "
    "mlp(x) = sum over the chosen e of w_e * down_e(silu(gate_e x) * up_e x)",
    "MixtralForCausalLM": "router logits = x @ block_sparse_moe.gate.weight^T (float32); p = softmax(router "
    "logits) over all experts (float32); the k largest p by torch.topk; the chosen p are always divided "
    "by their sum (float32); mlp(x) = sum over the chosen e of w_e * w2_e(silu(w1_e x) * w3_e x)",
    "OlmoeForCausalLM": "router logits = x @ mlp.gate.weight^T (float32, x = the post-attention "
    "RMSNorm output); p = softmax(router logits) over all experts (float32); the k largest p by "
    "torch.topk; norm_topk_prob false: the chosen p are the weights as they are (not divided by "
    "their sum, so they add up to less than 1); mlp(x) = sum over the chosen e of "
    "w_e * down_e(silu(gate_e x) * up_e x)",
    "GptOssForCausalLM": "router logits = x @ mlp.router.weight^T + mlp.router.bias (float32, x = the "
    "post-attention RMSNorm output); the k largest router logits by torch.topk (no softmax over all "
    "experts first); w = softmax over the k chosen logits (float32); mlp(x) = sum over the chosen e of "
    "w_e * (down_proj[e]^T swiglu(gate_up_proj[e]^T x + gate_up_proj_bias[e]) + down_proj_bias[e]) "
    "(the down bias is weighted too; swiglu: see gpt_oss.swiglu)",
}

COMBINE = (
    "transformers (experts_implementation eager) adds each chosen expert's weighted output into "
    "zeros in ascending expert id order (one index_add_ per expert hit); llama.cpp adds them in "
    "top-k rank order; with k = 2 both orders give the same bits (a + b == b + a)"
)


def tie_context(fam: dict):
    """The tie rule the family's primary outputs use (torch.topk itself where none is named)."""
    rule = fam.get("moe", {}).get("tie_rule")
    return topk_tie_rule(rule) if rule else contextlib.nullcontext()


def moe_record(fam, loaded, seqs, logits, routes, hf_tensors, summary, checks) -> dict:
    k = loaded.config.num_experts_per_tok
    rule = fam["moe"].get("tie_rule")
    for src, dst in fam["moe"].get("router_ties", []):
        for seq in routes:
            for layer_logits, _, _ in seq:
                assert np.array_equal(layer_logits[:, src], layer_logits[:, dst]), "tied router rows, unequal scores"

    def versus(alt) -> dict:
        return dict(
            outputs_bitwise_equal=all(np.array_equal(a, b) for a, b in zip(alt, logits)),
            max_abs_logit_diff=f32(max(np.abs(a - b).max() for a, b in zip(alt, logits))),
            top1_changed_positions=sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, logits)),
        )

    native, native_routes = run_logits_routed(loaded, seqs)  # torch.topk's own tie-breaking
    tie_break = dict(torch_topk=versus(native))
    for r in ("lower_id", "higher_id"):
        with topk_tie_rule(r):
            tie_break[r] = versus(run_logits(loaded, seqs))
    stats = routing_stats(routes, k)
    ns = routing_stats(native_routes, k)
    if ns["boundary_ties"]:
        fact = (
            f"at {ns['boundary_ties']} of {ns['decisions']} routing decisions (position x layer) equal "
            "routing probabilities straddle the top-k boundary; torch.topk (CPU) chose the lower ids "
            f"{ns['boundary_picks_lower_ids']} times and the higher ids {ns['boundary_picks_higher_ids']} "
            f"times (others {ns['boundary_picks_other']}): its tie-breaking follows no id order. "
        )
    else:
        fact = "no exact ties at the top-k boundary: every tie rule gives these outputs (tie_break). "
    if rule:
        fact += (
            f"outputs, routes and sensitivity use ties broken by the {rule.replace('_', ' ')} (torch.topk "
            "replaced by a stable descending sort); tie_break.torch_topk is how far torch.topk's own "
            "choice lands from them"
        )
    else:
        fact += "outputs are torch.topk's own"
    doc = dict(
        experts_implementation=loaded.config._experts_implementation,
        routing=ROUTING[fam["cls"]],
        combine=COMBINE,
        tie_rule=rule or "torch.topk",
        hf_expert_format=(
            "fused, as transformers holds them in memory (save_pretrained writes them unchanged): "
            "mlp.experts.gate_up_proj [E, hidden, 2*inter] (input first; gate = columns 0::2, up = "
            "columns 1::2, interleaved), gate_up_proj_bias [E, 2*inter] (interleaved alike), "
            "down_proj [E, inter, hidden] (input first), down_proj_bias [E, hidden]; float32, the "
            "MXFP4 values dequantized (the hub's packed layout: gpt_oss.mxfp4)"
            if fam["moe"].get("gpt_oss")
            else "per-expert tensors, the hub's layout (save_pretrained converts transformers 5's "
            "fused in-memory experts.gate_up_proj [E, 2F, H] / experts.down_proj [E, H, F] back)"
        ),
        hf_config_renames=fam["moe"]["hub_config_renames"],
        router_ties=[list(t) for t in fam["moe"].get("router_ties", [])],
        tie_break_fact=fact,
        max_abs_logit=f32(max(np.abs(lg).max() for lg in logits)),
        routing_stats=stats,
    )
    if rule:
        doc["torch_topk_routing_stats"] = {key: v for key, v in ns.items() if key != "per_layer"}
    doc.update(
        tie_break=tie_break,
        gguf_checks=checks,
        hf_tensors=hf_tensors,
        gguf=dict(meta=summary["meta"], tensors=summary["tensors"]),
        router_logits_first_sequence=[[[f32(v) for v in row] for row in layer[0]] for layer in routes[0]],
        routes=routing_record(routes),
    )
    return doc


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
        assert meta[f"{arch}.expert_count"] == config.num_local_experts
        assert meta[f"{arch}.expert_used_count"] == config.num_experts_per_tok
        # llama.cpp's qwen3moe and llama graphs renormalize the chosen weights unconditionally
        # (build_moe_ffn(..., norm_w = true, ..., SOFTMAX)), its olmoe graph never does (norm_w =
        # false): the GGUF carries no such flag.
        assert not any("weights_norm" in k or "gating_func" in k for k in meta), meta.keys()
    if name.startswith("qwen3moe"):
        assert arch == "qwen3moe", arch
        assert meta["qwen3moe.expert_feed_forward_length"] == config.moe_intermediate_size
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
    if "blk.0.attn_qkv.weight" in g:
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
        n_exp = config.num_local_experts
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
