"""Tiny random checkpoints of decoder families with transformers' logits as oracle; the
machinery of scripts/gen_family_fixtures.py (see its docstring), split by responsibility:

- families: the FAMILIES table, shapes, seeds and recorded config fields
- checkpoints: building and initialising the checkpoints, running transformers, logit summaries
- moe: routing records and statistics, tie rules, the hub's expert layout, the `moe` record
- gpt_oss: MXFP4 quantization, the hub's packed checkpoint and its checks, the `gpt_oss` record
- olmoe: OLMoE's q/k norm variants and the `olmoe` record
- gdn: Qwen3.5 / Qwen3-Next (Gated DeltaNet): variants, converter checks, a float64 GGUF
  reference forward, the `gdn` record
- nemotron_h: Nemotron-H (Mamba-2 hybrid): the hub-style config, the converter's hparams path, tensor
  rules checked tensor by tensor, variants, a float64 GGUF reference forward, the `nemotron_h` record
- gguf_convert: llama.cpp's converter with a minimal vocabulary, GGUF summaries and checks
- report: logits.json formatting
- build: make_family, one family's fixture directory end to end"""
