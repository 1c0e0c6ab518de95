"""One family's fixture directory, end to end."""

from __future__ import annotations

import os
import shutil

import numpy as np
import torch

from .checkpoints import (
    build_config,
    config_fields,
    f32,
    init_weights,
    logit_diff,
    margin_stats,
    run_logits,
    summarize,
    top1_changed,
    variant_logits,
)
from .families import NEMOTRON_H_CONFIG_FIELDS, OUT, TOP_K
from .gdn import check_gguf_meta, check_gguf_tensors, float64_reference, gdn_checks, gdn_record
from .gguf_convert import check_gguf_facts, compare_tensors, convert_to_gguf, gguf_summary
from .gpt_oss import (
    check_gpt_oss_hf_format,
    check_gpt_oss_hub_format,
    gpt_oss_f32_gguf_checks,
    gpt_oss_gguf_checks,
    gpt_oss_record,
    hub_reload_check,
    quantize_experts,
    write_gpt_oss_hub,
)
from .moe import check_hub_format, hf_tensor_table, hub_config, moe_record, routers, routing_stats, run_logits_routed, tie_context
from .nemotron_h import (
    autoconfig_unavailable,
    check_reloaded_config,
    converter_with_autoconfig,
    nemotron_checks,
    nemotron_record,
    write_hub_config,
)
from .nemotron_h import check_gguf_meta as nemotron_check_gguf_meta
from .nemotron_h import check_gguf_tensors as nemotron_check_gguf_tensors
from .nemotron_h import float64_reference as nemotron_float64_reference
from .olmoe import olmoe_attention_checks, olmoe_record
from .report import write_json

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
    gemma = name.startswith("gemma") or fam.get("zero_centred_norms", False)
    init_weights(model, fam, gemma)
    moe = fam.get("moe")
    gpt_oss = bool(moe and moe.get("gpt_oss"))
    nemotron = fam.get("nemotron_h") is not None
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
    if nemotron:
        # the hub's form of config.json (hybrid_override_pattern, no MoE keys), which the converter needs
        nh_hub = write_hub_config(hf_dir, model.config)

    # The oracle runs on the checkpoint as saved: reload it and check it matches the in-memory one.
    loaded = cls.from_pretrained(hf_dir, attn_implementation="eager", dtype=torch.float32, **extra).eval()
    assert loaded.config._attn_implementation == "eager"
    if nemotron:
        check_reloaded_config(loaded.config, model.config)
    if fam.get("gdn") is not None or nemotron:
        # Fresh (64-byte aligned) storage for every parameter, as the in-memory model has: torch's
        # CPU matmul of a [1, hidden] weight (Qwen3-Next's shared_expert_gate) rounds differently
        # at other alignments of the weight (seen: 1 ulp), so views into the loaded file's buffer
        # would make the outputs depend on where the file's tensors happen to lie.
        with torch.no_grad():
            for p in loaded.parameters():
                p.data = p.data.clone()
    if moe:
        assert loaded.config._experts_implementation == "eager"
        for key in ("num_local_experts", "num_experts", "num_experts_per_tok", "num_hidden_layers"):
            assert getattr(loaded.config, key, None) == getattr(model.config, key, None), key
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
    elif nemotron:
        # as under llama.cpp's pinned transformers (4.57.6, no nemotron_h): hparams from config.json itself
        with autoconfig_unavailable():
            convert_to_gguf(hf_dir, name, gguf_path)
    else:
        convert_to_gguf(hf_dir, name, gguf_path, no_mtp=bool(fam.get("gdn") is not None))
    summary = gguf_summary(gguf_path)
    check_gguf_facts(name, summary, loaded.config)
    if nemotron:
        checks = {}  # compare_tensors reads llama-style names; nemotron_check_gguf_tensors checks every tensor
        nemotron_check_gguf_meta(summary["meta"], loaded.config)
        nh_tensor_checks = nemotron_check_gguf_tensors(summary["reader"], hf_dir, loaded.config)
    else:
        checks = compare_tensors(name, summary["reader"], hf_dir, loaded.config, fam)
    if fam.get("gdn") is not None:
        check_gguf_meta(fam, summary["meta"], loaded.config)
        gdn_tensor_checks = check_gguf_tensors(fam, summary["reader"], hf_dir, loaded.config)
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
        config=config_fields(loaded.config, bool(moe), NEMOTRON_H_CONFIG_FIELDS if nemotron else None),
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
            doc["gguf_reading"]["top1_changed_positions_vs_primary"] = top1_changed(alt, logits)
    sens = {}
    for label, ov in fam.get("ablations", {}).items():
        with tie_context(fam):
            alt, _ = variant_logits(cls, fam, ov, state, seqs)
        sens[label] = dict(overrides=ov, **logit_diff(alt, logits))
    for label, so in fam.get("state_ablations", {}).items():
        with tie_context(fam):
            alt, _ = variant_logits(cls, fam, {}, state, seqs, state_overrides=so)
        sens[label] = dict(state_overrides={f"model.layers.*.{k}": v for k, v in so.items()}, **logit_diff(alt, logits))
    olmoe_attn = None
    if fam.get("attention_ablations"):
        olmoe_attn = olmoe_attention_checks(cls, fam, state, seqs, logits)
        for label in fam["attention_ablations"]:
            sens[label] = olmoe_attn.pop(label)
    gdn_out = None
    if fam.get("gdn") is not None:
        gdn_out = gdn_checks(cls, fam, state, seqs, logits, loaded.config)
        gdn_out["float64_gguf_reference"] = float64_reference(summary["reader"], summary["meta"], seqs, logits, cls, fam, state)
        sens.update(gdn_out.pop("sensitivity"))
    nh_out = None
    if nemotron:
        nh_out = nemotron_checks(cls, fam, state, seqs, logits, loaded.config)
        nh_out["float64_gguf_reference"] = nemotron_float64_reference(summary["reader"], summary["meta"], seqs, logits)
        sens.update(nh_out.pop("sensitivity"))
    if sens:
        doc["sensitivity"] = sens
    if moe:
        doc["moe"] = moe_record(fam, loaded, seqs, logits, routes, hf_tensors, summary, checks)
    if gpt_oss:
        doc["gpt_oss"] = gpt_oss_record(loaded, hub_table, hub_check, seqs)
    if name == "olmoe":
        doc["olmoe"] = olmoe_record(loaded, hf_tensors, summary, olmoe_attn)
    if gdn_out is not None:
        doc["gdn"] = dict(
            **gdn_out,
            **gdn_record(fam, loaded, hf_tensor_table(hf_dir), summary, checks, gdn_tensor_checks),
        )
    if nh_out is not None:
        doc["nemotron_h"] = dict(
            **nh_out,
            **nemotron_record(loaded, hf_tensor_table(hf_dir), summary, nh_tensor_checks, nh_hub,
                              converter_with_autoconfig(hf_dir)),
        )
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
