"""The families: shapes, seeds, configs, init stds, GGUF-reading overrides and ablations."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # scripts/family_fixtures/ -> the repository
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


def qwen3moe_hub(**extra) -> dict:
    """The "moe" entry of the Qwen3-MoE families (a fresh dict per call): the hub's per-expert
    tensor names, the config key renames, then `extra` (router ties, tie rule)."""
    return dict(
        router_hf="model.layers.{L}.mlp.gate.weight",
        experts_hf=dict(
            gate="model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
            up="model.layers.{L}.mlp.experts.{E}.up_proj.weight",
            down="model.layers.{L}.mlp.experts.{E}.down_proj.weight",
        ),
        # transformers 5 writes the expert count as num_local_experts (its attribute_map);
        # the hub's Qwen3-MoE configs (Qwen/Qwen3-30B-A3B) spell it num_experts.
        hub_config_renames={"num_local_experts": "num_experts"},
        **extra,
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

# Qwen3.5 / Qwen3-Next (hybrid: Gated DeltaNet "linear attention" layers and gated full attention,
# layer_types [linear, linear, linear, full] = full_attention_interval 4 as the real models). Two
# linear key heads serve four value heads (each key head two value heads), so the value-head order
# matters (transformers: v-head h reads k-head h // 2; the qwen35 GGUF stores the value heads
# tiled, the qwen3next GGUF grouped). rope_theta 1e4 (the real models: 1e7) so that both rotary
# pairs of the 4 rotary dims (head_dim 16 x partial_rotary_factor 0.25) turn visibly over 70
# positions.
GDN_COMMON = dict(
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    full_attention_interval=4,  # as the hub's configs carry it beside layer_types
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    hidden_act="silu",
    attention_bias=False,
    tie_word_embeddings=False,
)
# init for both: "A_log" = (mean, std) of A_log (A = exp(A_log) in [0.05, 0.4] mostly, so that the
# state decays by exp(g) ~ 0.8-0.97 per token and remembers tens of tokens), "dt_bias" = std,
# "conv" = std of the depthwise conv taps; the (1 + w) RMSNorms (input / post-attention / final /
# q_norm / k_norm) get w = std "norm" noise around 0, the gated norm of the linear-attention output
# (a plain w) noise around 1.
GDN_INIT = dict(w=0.15, emb=0.5, norm=0.3, A_log=[-2.0, 1.0], dt_bias=0.5, conv=0.4)

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
        moe=qwen3moe_hub(),
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
        moe=qwen3moe_hub(
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
    # Qwen3.5 dense text model (Qwen3_5ForCausalLM, model_type qwen3_5_text; GGUF arch qwen35).
    # Interleaved M-RoPE sections [1, 1, 0] (the rotary pairs' t/h/w assignment; the hub's
    # [11, 11, 10] are for 32 pairs): for text every section has the same position, so it is plain
    # NeoX RoPE on the first 4 dims. No MTP block (mtp_num_hidden_layers 0): converted with
    # --no-mtp (see gdn).
    "qwen35": dict(
        cls="Qwen3_5ForCausalLM",
        seed=140,
        config=dict(
            **GDN_COMMON,
            rope_parameters=dict(
                rope_type="default",
                rope_theta=10000.0,
                partial_rotary_factor=0.25,
                mrope_section=[1, 1, 0],
                mrope_interleaved=True,
            ),
            mtp_num_hidden_layers=0,
        ),
        init=GDN_INIT,
        zero_centred_norms=True,
        gdn=dict(),
        ablations={
            "full_rope": dict(
                rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=1.0,
                                     mrope_section=[4, 4, 0], mrope_interleaved=True)
            ),
        },
    ),
    # Qwen3-Next (Qwen3NextForCausalLM, GGUF arch qwen3next): the same layer pattern with the fused
    # in_proj_qkvz / in_proj_ba projections, and a mixture of experts with a shared expert in every
    # layer (8 experts top-2, moe_intermediate_size 32, shared expert 32 wide behind a sigmoid gate).
    "qwen3next": dict(
        cls="Qwen3NextForCausalLM",
        # of seeds 150..184 the one with the widest top-k boundary: the narrowest gap between a
        # position's 2nd and 3rd router logit is 0.0164 with seed 169 (below 5e-3 for 30 of the 35)
        seed=169,
        config=dict(
            **GDN_COMMON,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
        init=dict(GDN_INIT, router=0.5),
        zero_centred_norms=True,
        moe=dict(
            router_hf="model.layers.{L}.mlp.gate.weight",
            experts_hf=dict(
                gate="model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
                up="model.layers.{L}.mlp.experts.{E}.up_proj.weight",
                down="model.layers.{L}.mlp.experts.{E}.down_proj.weight",
            ),
            # Qwen3NextConfig has no num_local_experts alias: save_pretrained writes num_experts
            hub_config_renames={},
        ),
        gdn=dict(),
        ablations={
            "full_rope": dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=1.0)),
            "no_norm_topk_prob": dict(norm_topk_prob=False),
            "top_k_1": dict(num_experts_per_tok=1),
            "top_k_3": dict(num_experts_per_tok=3),
        },
    ),
    # Nemotron-H (NemotronHForCausalLM, GGUF arch nemotron_h; nvidia/Nemotron-H-8B-Base-8K and
    # NVIDIA-Nemotron-Nano-9B-v2 at toy size): six blocks "M-M*-M" (Mamba-2, MLP, Mamba-2, attention,
    # MLP, Mamba-2), each x + mixer(RMSNorm(x)). Mamba-2: 8 heads of dim 8 (d_inner 64), 2 groups
    # (heads 0-3 read group 0), state 16, conv kernel 4 with bias; chunk_size 16 (the hub models: 128)
    # so that transformers' chunked prefill spans several chunks (1, 3, 5) and its inter-chunk
    # recurrence runs. Attention without RoPE, 4 heads / 2 KV heads / head_dim 16; MLP
    # down(relu(up x)^2), 128 wide. layer_norm_epsilon 1e-5 (what NemotronHConfig reads; the generator's
    # common rms_norm_eps is not read and is dropped from the hub-style config.json).
    # init: A_log = N(-2, 1) (A = -exp(A_log)), dt_bias N(0, 0.5), D = N(1, 0.5), conv taps N(0, 0.4),
    # conv bias ("bias") N(0, 0.3), the norms (block, final, gated) plain w = N(1, 0.3).
    "nemotron_h": dict(
        cls="NemotronHForCausalLM",
        seed=190,
        config=dict(
            hybrid_override_pattern="M-M*-M",
            num_hidden_layers=6,
            mamba_num_heads=8,
            mamba_head_dim=8,
            n_groups=2,
            ssm_state_size=16,
            conv_kernel=4,
            use_conv_bias=True,
            chunk_size=16,
            mamba_hidden_act="silu",
            mlp_hidden_act="relu2",
            layer_norm_epsilon=1e-5,
            use_bias=False,
            mlp_bias=False,
            attention_bias=False,
            tie_word_embeddings=False,
        ),
        init=dict(w=0.15, emb=0.5, norm=0.3, bias=0.3, A_log=[-2.0, 1.0], dt_bias=0.5, D=[1.0, 0.5], conv=0.4),
        nemotron_h=dict(),
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
# Also recorded for the hybrid (Gated DeltaNet) families (none of these is in another config).
GDN_CONFIG_FIELDS = (
    "full_attention_interval linear_num_key_heads linear_num_value_heads linear_key_head_dim "
    "linear_value_head_dim linear_conv_kernel_dim mtp_num_hidden_layers"
).split()
# Also recorded for the mixtures of experts (none of these is in a dense family's config).
MOE_CONFIG_FIELDS = (
    "num_experts num_local_experts num_experts_per_tok norm_topk_prob moe_intermediate_size "
    "decoder_sparse_step mlp_only_layers shared_expert_intermediate_size router_aux_loss_coef "
    "output_router_logits router_jitter_noise swiglu_alpha swiglu_limit"
).split()
# Also recorded for Nemotron-H (time_step_limit, with its infinity, is in the `nemotron_h` record).
NEMOTRON_H_CONFIG_FIELDS = (
    "layers_block_type mamba_num_heads mamba_head_dim n_groups ssm_state_size conv_kernel use_conv_bias "
    "chunk_size expand mamba_hidden_act mlp_hidden_act layer_norm_epsilon residual_in_fp32 use_bias "
    "mamba_proj_bias"
).split()
