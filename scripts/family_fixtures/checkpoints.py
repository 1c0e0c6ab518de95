"""Checkpoints: build and initialise the tiny models, run transformers, summarize the logits."""

from __future__ import annotations

import copy

import numpy as np
import torch

from .families import COMMON, CONFIG_FIELDS, GDN_CONFIG_FIELDS, MOE_CONFIG_FIELDS, SEQ_LENS, SEQ_SEED, TOP_K, VOCAB

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
    """Overwrite every parameter from a generator seeded per family (order: sorted names).
    `gemma`: the norms multiply by (1 + w) (Gemma, Qwen3.5, Qwen3-Next), so w is noise around 0."""
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
            # Gated DeltaNet's own parameters (qwen35, qwen3next)
            elif "A_log" in init and name.endswith(".linear_attn.A_log"):
                p.copy_(noise * init["A_log"][1] + init["A_log"][0])
            elif "dt_bias" in init and name.endswith(".linear_attn.dt_bias"):
                p.copy_(noise * init["dt_bias"])
            elif "conv" in init and name.endswith(".linear_attn.conv1d.weight"):
                p.copy_(noise * init["conv"])
            # Nemotron-H's Mamba-2 mixer parameters (A_log and D: (mean, std))
            elif "A_log" in init and name.endswith(".mixer.A_log"):
                p.copy_(noise * init["A_log"][1] + init["A_log"][0])
            elif "dt_bias" in init and name.endswith(".mixer.dt_bias"):
                p.copy_(noise * init["dt_bias"])
            elif "D" in init and name.endswith(".mixer.D"):
                p.copy_(noise * init["D"][1] + init["D"][0])
            elif "conv" in init and name.endswith(".mixer.conv1d.weight"):
                p.copy_(noise * init["conv"])
            elif name.endswith(".linear_attn.norm.weight"):
                # the gated RMSNorm multiplies by w itself (not 1 + w): noise around 1
                p.copy_(noise * init["norm"] + 1.0)
            elif p.ndim == 1 and "norm" in name:
                p.copy_(noise * init["norm"] + (0.0 if gemma else 1.0))
            elif p.ndim == 1:
                p.copy_(noise * init["bias"])
            elif "embed_tokens" in name or "lm_head" in name or name == "model.embeddings.weight":
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


def config_fields(config, moe: bool = False, extra: list[str] | None = None) -> dict:
    d = config.to_dict()
    d["_attn_implementation"] = config._attn_implementation
    fields = CONFIG_FIELDS + GDN_CONFIG_FIELDS + (MOE_CONFIG_FIELDS if moe else []) + (extra or [])
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


def top1_changed(alt: list[np.ndarray], ref: list[np.ndarray]) -> int:
    """Positions (over all sequences) whose argmax differs between alt and ref."""
    return sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in zip(alt, ref))


def logit_diff(alt: list[np.ndarray], ref: list[np.ndarray]) -> dict:
    """How far a variant's logits (alt) are from ref: a sensitivity entry's numbers."""
    diffs = [np.abs(a - b).max() for a, b in zip(alt, ref)]
    return dict(
        max_abs_logit_diff=f32(max(diffs)),
        max_abs_logit_diff_per_sequence=[f32(d) for d in diffs],
        top1_changed_positions=top1_changed(alt, ref),
    )
