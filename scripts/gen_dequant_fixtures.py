#!/usr/bin/env python3
"""Generates the dequantization fixtures of crates/weights/tests/fixtures/dequant/.

For each of the 14 tensor types TensorFold reads, writes `<type>.blocks` (random but valid raw
blocks: random quant bits, small finite f16 scales) and `<type>.f32` (the values gguf-py's
reference `gguf.quants.dequantize` produces for them, little-endian f32). The Rust test
`dequant_fixtures` checks that tf-weights' dequantize matches them bit for bit.

Usage: python3 scripts/gen_dequant_fixtures.py   (needs numpy and the `gguf` package)
Deterministic: rerunning rewrites identical files.
"""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = Path(__file__).resolve().parent.parent / "crates/weights/tests/fixtures/dequant"

# (file stem, type, number of blocks)
TYPES = [
    ("f32", T.F32, 64),
    ("f16", T.F16, 64),
    ("bf16", T.BF16, 64),
    ("q4_0", T.Q4_0, 4),
    ("q4_1", T.Q4_1, 4),
    ("q5_0", T.Q5_0, 4),
    ("q5_1", T.Q5_1, 4),
    ("q8_0", T.Q8_0, 4),
    ("q2_k", T.Q2_K, 3),
    ("q3_k", T.Q3_K, 3),
    ("q4_k", T.Q4_K, 3),
    ("q5_k", T.Q5_K, 3),
    ("q6_k", T.Q6_K, 3),
    ("mxfp4", T.MXFP4, 6),
]

# Byte offsets of the f16 scale fields in each block, with the range of |value| drawn and
# whether the sign is random. Chosen so dequantized values look like real weights.
SCALES = {
    T.Q4_0: [(0, 1e-3, 1e-2, True)],
    T.Q4_1: [(0, 1e-3, 1e-2, False), (2, 5e-3, 1e-1, True)],
    T.Q5_0: [(0, 1e-3, 1e-2, True)],
    T.Q5_1: [(0, 1e-3, 1e-2, False), (2, 5e-3, 1e-1, True)],
    T.Q8_0: [(0, 1e-4, 1e-3, True)],
    T.Q2_K: [(80, 1e-3, 5e-3, False), (82, 1e-3, 5e-3, False)],
    T.Q3_K: [(108, 2e-4, 1e-3, True)],
    T.Q4_K: [(0, 1e-4, 5e-4, False), (2, 1e-4, 5e-4, False)],
    T.Q5_K: [(0, 6.2e-5, 2.5e-4, False), (2, 6.2e-5, 2.5e-4, False)],
    T.Q6_K: [(208, 6.2e-5, 2e-4, True)],
}


def float_values(rng: np.random.Generator, n: int) -> np.ndarray:
    v = (rng.standard_normal(n) * 0.02).astype(np.float32)
    # A few edge values every float format holds exactly or rounds deterministically.
    v[:6] = [0.0, -0.0, 1.0, -2.5, 6e-8, 65504.0]
    return v


def make_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        return float_values(rng, n_blocks).view(np.uint8)
    if qtype == T.F16:
        return float_values(rng, n_blocks).astype(np.float16).view(np.uint8)
    if qtype == T.BF16:
        bits = float_values(rng, n_blocks).view(np.uint32) >> np.uint32(16)
        return bits.astype(np.uint16).view(np.uint8)
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if qtype == T.MXFP4:
        # E8M0 scale bytes: weight-like ones, the two subnormal scales and a large one.
        blocks[:, 0] = rng.integers(118, 124, size=n_blocks)
        blocks[:3, 0] = [0, 1, 250]
        return blocks.reshape(-1)
    for at, lo, hi, signed in SCALES[qtype]:
        v = rng.uniform(lo, hi, size=n_blocks)
        if signed:
            v *= rng.choice([-1.0, 1.0], size=n_blocks)
        blocks[:, at : at + 2] = v.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240607)
    for stem, qtype, n_blocks in TYPES:
        raw = make_blocks(rng, qtype, n_blocks)
        values = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)
        assert np.all(np.isfinite(values)), stem
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        assert raw.size == n_blocks * block_bytes and values.size == n_blocks * block_elems, stem
        (OUT / f"{stem}.blocks").write_bytes(raw.tobytes())
        (OUT / f"{stem}.f32").write_bytes(values.astype("<f4").tobytes())
        print(f"{stem}: {raw.size} bytes -> {values.size} values, max |x| {np.abs(values).max():.4g}")


if __name__ == "__main__":
    main()
