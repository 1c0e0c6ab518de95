#!/usr/bin/env python3
"""Independent float64 oracle for the real-model reference test.

For every case of shared/reference/*.json, runs a plain NumPy forward pass (weights dequantized by
the `gguf` package, no activation quantization, float64 everywhere) over llama.cpp's prompt and
completion ids (teacher forcing) and records, at each completion step, the oracle's top-5
log-probabilities and the log-probability of llama.cpp's chosen token. The Rust test uses it to
tell real near-ties (where valid arithmetic may pick either token) from implementation errors.

Usage: scripts/gen_reference_oracle.py REFERENCE_DIR MODELS_DIR OUT_DIR   (run once; commit output)
"""
import json, sys, os
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

PAIRS = {
    "llama.cpp-greedy-qwen2.5-coder-1.5b-q4_k_m.json": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "llama.cpp-greedy-qwen2.5-coder-0.5b.json": "qwen2.5-coder-0.5b-instruct.gguf",
    "llama.cpp-greedy-smollm2-135m-q4_1.json": "smollm2-135m-instruct-q4_1.gguf",
}


class Oracle:
    def __init__(self, path):
        r = GGUFReader(path)
        self.f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        self.arch = self.f["general.architecture"]
        g = lambda k, d=None: self.f.get(f"{self.arch}.{k}", d)
        self.L, self.d = g("block_count"), g("embedding_length")
        self.nh, self.nkv = g("attention.head_count"), g("attention.head_count_kv")
        self.base, self.eps = g("rope.freq_base", 10000.0), g("attention.layer_norm_rms_epsilon")
        self.hd = self.d // self.nh
        self.T = {t.name: t for t in r.tensors}
        self.cache = {}

    def W(self, name):
        if name not in self.cache:
            t = self.T[name]
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            shape = [int(x) for x in reversed(t.shape)]
            self.cache[name] = a.reshape(shape)
        return self.cache[name]

    def has(self, name):
        return name in self.T

    def forward(self, ids):
        n, d, hd = len(ids), self.d, self.hd
        emb = self.W("token_embd.weight")
        x = emb[ids]
        inv = self.base ** (-np.arange(0, hd, 2) / hd)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

        def rope(v):
            if self.arch == "llama":  # GGUF llama q/k rows are permuted: adjacent pairs
                a, b = v[..., 0::2], v[..., 1::2]
                o = np.empty_like(v)
                o[..., 0::2], o[..., 1::2] = a * cos - b * sin, a * sin + b * cos
                return o
            h = hd // 2
            a, b = v[..., :h], v[..., h:]
            return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

        rms = lambda v, w: v / np.sqrt((v * v).mean(-1, keepdims=True) + self.eps) * w
        bias = lambda name: self.W(name) if self.has(name) else 0.0
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for l in range(self.L):
            p = f"blk.{l}."
            h = rms(x, self.W(p + "attn_norm.weight"))
            q = h @ self.W(p + "attn_q.weight").T + bias(p + "attn_q.bias")
            k = h @ self.W(p + "attn_k.weight").T + bias(p + "attn_k.bias")
            v = h @ self.W(p + "attn_v.weight").T + bias(p + "attn_v.bias")
            if self.has(p + "attn_q_norm.weight"):
                q = rms(q.reshape(n, self.nh, hd), self.W(p + "attn_q_norm.weight")).reshape(n, -1)
                k = rms(k.reshape(n, self.nkv, hd), self.W(p + "attn_k_norm.weight")).reshape(n, -1)
            q, k = rope(q.reshape(n, self.nh, hd)), rope(k.reshape(n, self.nkv, hd))
            rep = self.nh // self.nkv
            k = np.repeat(k, rep, 1)
            v = np.repeat(v.reshape(n, self.nkv, hd), rep, 1)
            s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            x = x + np.einsum("hqk,khd->qhd", s, v).reshape(n, -1) @ self.W(p + "attn_output.weight").T
            h = rms(x, self.W(p + "ffn_norm.weight"))
            gt = h @ self.W(p + "ffn_gate.weight").T
            up = h @ self.W(p + "ffn_up.weight").T
            x = x + (gt / (1 + np.exp(-gt)) * up) @ self.W(p + "ffn_down.weight").T
        h = rms(x, self.W("output_norm.weight"))
        out = self.W("output.weight") if self.has("output.weight") else emb
        return h, out


def main():
    ref_dir, models_dir, out_dir = sys.argv[1:4]
    os.makedirs(out_dir, exist_ok=True)
    for ref, model in PAIRS.items():
        doc = json.load(open(os.path.join(ref_dir, ref)))
        oracle = Oracle(os.path.join(models_dir, model))
        cases = []
        for c in doc["cases"]:
            ids = c["prompt_ids"] + c["completion_ids"]
            h, out = oracle.forward(ids)
            P = len(c["prompt_ids"])
            steps = []
            for i, st in enumerate(c["steps"]):
                lg = h[P - 1 + i] @ out.T
                m = lg.max()
                lp = lg - m - np.log(np.exp(lg - m).sum())
                top = np.argsort(-lp, kind="stable")[:5]
                steps.append({"llama_id_logprob": float(lp[st["id"]]),
                              "top": [[int(t), float(lp[t])] for t in top]})
            cases.append({"name": c["name"], "steps": steps})
            print(ref, c["name"], "done", file=sys.stderr)
        json.dump({"oracle": "float64 NumPy forward of gguf-dequantized weights (scripts/gen_reference_oracle.py)",
                   "model": model, "cases": cases},
                  open(os.path.join(out_dir, ref.replace("llama.cpp-greedy-", "oracle-")), "w"), indent=0)


if __name__ == "__main__":
    main()
