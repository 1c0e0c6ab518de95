#!/usr/bin/env python3
"""Generate tiny random checkpoints of sixteen decoder families, with transformers' logits as oracle.

Output: crates/models/tests/fixtures/families/<family>/ for each family in FAMILIES
(llama3, llama, qwen2, qwen3, gemma3, gemma2, mistral, phi3, the mixtures of experts
qwen3moe, qwen3moe_ties, mixtral, gpt-oss, olmoe, the hybrid Gated DeltaNet families qwen35
and qwen3next, and the hybrid Mamba-2 family nemotron_h):

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
  * `gdn` (qwen35, qwen3next): see below.
  * `nemotron_h` (nemotron_h): see below.

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

Hybrid Gated DeltaNet families (transformers' qwen3_5 / qwen3_next modules, the torch
implementations: fla and causal_conv1d are not installed, so prefill runs
torch_chunk_gated_delta_rule, chunk 64, and causal_conv1d_fn), 4 layers with layer_types
[linear_attention x 3, full_attention] (full_attention_interval 4, also written to config.json as
the hub's configs have it), 4 heads / 2 KV heads / head_dim 16 in the full-attention layer with
partial_rotary_factor 0.25 (4 rotary dims; rope_theta 1e4 so that both rotary pairs turn over 70
positions), linear attention with 2 key heads and 4 value heads (each key head serves two value
heads, so the value-head order matters), key / value head dims 16, conv kernel 4, rms_norm_eps
1e-6, untied head, no MTP block (mtp_num_hidden_layers 0 for qwen35): the converter then needs
convert_hf_to_gguf.py's --no-mtp (model class no_mtp = True; without mtp.* tensors it fails an
assertion), so the GGUFs have block_count 4 and no nextn key. Init: the (1 + w) RMSNorms
(input, post-attention, final, q_norm, k_norm) get w = N(0, 0.3), the gated output norm
(plain w) N(1, 0.3), A_log = N(-2, 1), dt_bias N(0, 0.5), conv taps N(0, 0.4).
- qwen35 (Qwen3_5ForCausalLM, model_type qwen3_5_text; GGUF arch qwen35): dense MLP
  (intermediate 128), separate in_proj_qkv / in_proj_z / in_proj_b / in_proj_a, interleaved
  M-RoPE sections [1, 1, 0] (= plain RoPE for text). The converter reorders every value-head
  tensor from grouped to tiled (GGUF value head j*2 + g = HF value head g*2 + j).
- qwen3next (Qwen3NextForCausalLM; GGUF arch qwen3next): fused in_proj_qkvz / in_proj_ba (per
  key head [q | k | v (2 heads) | z (2 heads)] and [b (2) | a (2)]), split by the converter into
  attn_qkv + attn_gate (value heads stay grouped) and kept as ssm_ba; every layer a mixture of
  experts (8 experts top-2, moe_intermediate_size 32, norm_topk_prob true, router std 0.5; seed
  169 of 150..184 has the widest top-k boundary, 0.0164) plus a shared expert (width 32) behind
  sigmoid(shared_expert_gate x). Its `moe` section is the other mixtures'.
The reloaded checkpoint's parameters get fresh (aligned) storage before the oracle runs: torch's
CPU matmul of the [1, 64] shared_expert_gate weight rounds differently (1 ulp) at other
alignments of the weight. logits.json's `gdn` section: the rules (text), the transformers
functions that ran (and the source of l2norm and torch_recurrent_gated_delta_rule); the value-head
order of each GGUF; `gguf_tensor_checks`: every GGUF tensor against its rule from the HF tensors
(bitwise: +1 on the (1 + w) norms only, ssm_a = -exp(A_log), ssm_dt.bias = dt_bias, conv squeezed,
the qkvz split, the tiled reorder); the MTP handling; `reimplementations_bitwise_equal`
(transformers' delta rule call, gated norm, gated attention and shared-expert MoE block,
reimplemented for the variants, give its outputs bit for bit); `chunked_vs_recurrent`
(transformers' torch_recurrent_gated_delta_rule in place of the chunked form: max |diff| of the
logits per sequence); `decode_vs_prefill` (transformers' own cached one-token-at-a-time decode
against the prefill, 70-token sequence); `decay_and_beta_longest_sequence` (exp(g) and beta
ranges per layer); `float64_gguf_reference`: an independent numpy float64 forward of model.gguf as
llama.cpp's graphs read it (gdn.gguf_reference_logits) against the primary outputs, asserted
< 1e-3 (measured up to 1.1e-4 for qwen35, 1.5e-4 for qwen3next: the float32 error of the oracle
itself, larger than the dense families' because the gated norm divides by rms(o) of the delta
rule's output), with its full logit rows for the first sequence. `sensitivity` adds: v heads
tiled instead of grouped, recurrent state or conv state not carried (a decode step without
them), conv taps reversed, (1 + w) norms as plain w, the gated norm as (1 + w), no decay, no
dt_bias, ssm_a exponentiated again, no silu(z) gate / gate before the norm, no attention output
gate, q_proj's [q | gate] read as two halves instead of per head, full instead of partial RoPE,
and for qwen3next: no shared-expert gate, no shared expert, in_proj_qkvz / in_proj_ba read as
contiguous [q|k|v|z] / [b|a], the routing ablations. Every one moves the logits by 2 to 28.

Hybrid Mamba-2 family nemotron_h (NemotronHForCausalLM, transformers' nemotron_h module, model_type
nemotron_h; GGUF arch nemotron_h; nvidia/Nemotron-H-8B-Base-8K and NVIDIA-Nemotron-Nano-9B-v2 at toy
size): six blocks, hybrid_override_pattern "M-M*-M" (Mamba-2, MLP, Mamba-2, attention, MLP, Mamba-2),
each block x + mixer(RMSNorm(x)) with its one norm, then norm_f and an untied lm_head. Mamba-2: 8
heads of dim 8 (d_inner 64), n_groups 2 (head h reads B/C group h // 4), ssm_state_size 16, conv
kernel 4 with bias, in_proj rows [z | xBC | dt] (200), the gated RMSNorm (gate first, then the norm
per group of 32 channels); chunk_size 16 (the hub models: 128) so that the chunked prefill spans 1, 3
and 5 chunks; layer_norm_epsilon 1e-5. Attention: 4 heads / 2 KV heads / head_dim 16, no RoPE, no
bias. MLP: down(relu(up x)^2), 128 wide. No MoE block. The oracle is transformers' torch code
(mamba_ssm and causal_conv1d are not installed: prefill runs causal_conv1d_fn and the chunked
mamba2_chunk_scan). Init: A_log N(-2, 1), dt_bias N(0, 0.5), D N(1, 0.5), conv taps N(0, 0.4), conv
bias N(0, 0.3), every norm weight N(1, 0.3) (plain w). hf/config.json is written in the hub's form
(hybrid_override_pattern + num_hidden_layers, no MoE / MTP keys, no time_step_limit: its default
(0, inf) has no JSON literal; transformers 5 writes layers_block_type and every MoE default).
Conversion: llama.cpp pins transformers 4.57.6, which has no nemotron_h, so its ModelBase.load_hparams
reads config.json itself; the script makes AutoConfig fail during the conversion to get that path
(with the installed transformers 5, AutoConfig's dict carries num_experts_per_tok and the block
types as a list: the converter then writes a nemotron_h_moe GGUF with feed_forward_length all 0,
recorded as nemotron_h.converter.with_installed_transformers_autoconfig). The GGUF: per-layer
feed_forward_length (0 but for MLP blocks) and attention.head_count_kv (0 but for attention blocks)
encode the block types; attention.layer_norm_epsilon only (no rms key); ssm_a = -exp(A_log) and
ssm_d as {1, heads}; ssm_norm as {d_inner / n_groups, n_groups}; the conv squeezed; attn_q / attn_k
permuted by the converter's llama q/k permutation though no block uses RoPE (q.k per head unchanged).
logits.json's `nemotron_h` section: the rules (text), shapes, the transformers functions that ran,
the hub-config rewrite, the converter path, `gguf_tensor_checks` (every GGUF tensor against its rule
from the HF tensors, bitwise), `reimplementations_bitwise_equal` (the scan call, the gated norm and
the attention forward, reimplemented for the variants, give transformers' outputs bit for bit),
`chunked_vs_recurrent` (transformers' single-step mamba2_selective_state_update token by token in
place of the chunked scan), `chunk_size_128_vs_16`, `decode_vs_prefill` (transformers' own cached
decode, one token per call, on the 70-token sequence), `dt_and_decay_longest_sequence`,
`float64_gguf_reference` (an independent numpy float64 forward of model.gguf as llama.cpp's
nemotron_h graph reads it, asserted < 1e-3; measured about 2e-5), hf_tensors and the GGUF's metadata
and tensor shapes. `sensitivity`: SSM state or conv state not carried, B/C groups tiled instead of
repeat-interleaved, gate after the norm, norm over the whole width, no gate, RoPE in the attention
blocks, D skip dropped, conv bias dropped, dt_bias dropped, conv taps reversed, ssm_a exponentiated
again, B and C swapped, relu instead of relu2. Every one moves the logits by 4 to 22.

Run (deterministic on one machine: a rerun rewrites identical files; torch's CPU kernels differ
between processors, so on another machine logits.json can differ in the last float32 digits):

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
import hashlib
import json
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from family_fixtures.build import make_family  # noqa: E402
from family_fixtures.checkpoints import sequences  # noqa: E402
from family_fixtures.families import FAMILIES, OUT  # noqa: E402


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
