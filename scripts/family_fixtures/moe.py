"""Mixtures of experts: routing records, tie rules, the hub's tensor layout, the `moe` record."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import torch

from .checkpoints import f32, run_logits, top1_changed

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
    from .gguf_convert import n_experts

    m = fam["moe"]
    n_exp, hid = n_experts(config), config.hidden_size
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



ROUTING = {
    "Qwen3MoeForCausalLM": "router logits = x @ mlp.gate.weight^T (float32, x = the post-attention "
    "RMSNorm output); p = softmax(router logits) over all experts (float32); the k largest p by "
    "torch.topk; with norm_topk_prob the chosen p are divided by their sum (float32); "
    "mlp(x) = sum over the chosen e of w_e * down_e(silu(gate_e x) * up_e x)",
    "Qwen3NextForCausalLM": "router logits = x @ mlp.gate.weight^T (float32, x = the post-attention "
    "RMSNorm output); p = softmax(router logits) over all experts (float32); the k largest p by "
    "torch.topk; with norm_topk_prob the chosen p are divided by their sum (float32); "
    "mlp(x) = sum over the chosen e of w_e * down_e(silu(gate_e x) * up_e x) + "
    "sigmoid(x @ mlp.shared_expert_gate.weight^T) * shared_expert(x), shared_expert(x) = "
    "down(silu(gate x) * up x) of width shared_expert_intermediate_size",
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
            top1_changed_positions=top1_changed(alt, logits),
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
