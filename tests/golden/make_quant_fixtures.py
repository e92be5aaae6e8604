#!/usr/bin/env python3
"""make_quant_fixtures.py: layout ground truth for gemmac's tensor element types, from an independent
reference: llama.cpp's gguf-py (PyPI package `gguf`, numpy (de)quantizers in gguf.quants). Writes
tests/golden/quant_fixtures.bin, read by tests/kernels/test_quant.c.

    pip install gguf numpy && python3 tests/golden/make_quant_fixtures.py

Deterministic (fixed seeds); the output depends only on gguf-py's numbers.

File format (all little-endian):
    magic    4 bytes  b"GMQF"
    version  u32      1
    count    u32      number of records
    records, each:
        kind        u32   0 = dequantize: the C reference dequantizer must turn `bytes` into `floats`
                          1 = quantize:   the C reference quantizer must turn `floats` into `bytes`
        type        u32   GGML type number (gguf.GGMLQuantizationType)
        n_elements  u32   number of floats
        n_bytes     u32   number of bytes (= n_elements / block_size * block_bytes)
        kind 0: bytes[n_bytes], then f32[n_elements]
        kind 1: f32[n_elements], then bytes[n_bytes]
Every float in the file is finite (the script asserts it), so the C test can compare exactly.
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
from gguf import quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quant_fixtures.bin")

# Byte offsets of the f16 scale fields inside a block, per type (ggml-common.h layouts).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
N_BLOCKS = {T.Q4_0: 3, T.Q4_1: 3, T.Q5_0: 3, T.Q5_1: 3, T.Q8_0: 3, T.Q4_K: 2, T.Q5_K: 2, T.Q6_K: 2}


def f16_bytes(v):
    return np.array([v], dtype=np.float16).view(np.uint8)


def random_blocks(rng, qtype, n_blocks):
    """Random quant bytes with finite f16 scales; the last block is an edge case: every quant byte 0xFF,
    largest finite f16 scale with a negative sign on the first field (and the extreme q6_K scales)."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for k in range(n_blocks):
        for off in F16_FIELDS[qtype]:
            mag = 2.0 ** rng.uniform(-12, 2)
            b[k, off:off + 2] = f16_bytes(mag if rng.integers(2) else -mag)
    edge = b[-1]
    edge[:] = 0xFF
    for i, off in enumerate(F16_FIELDS[qtype]):
        edge[off:off + 2] = f16_bytes(-65504.0 if i == 0 else 65504.0)
    if qtype == T.Q6_K:
        edge[192:208] = np.array([0x80, 0x7F] * 8, dtype=np.uint8)  # int8 scales -128, 127
    return b.reshape(-1)


def record(kind, qtype, floats, raw):
    floats = np.ascontiguousarray(floats, dtype="<f4").reshape(-1)
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    assert np.all(np.isfinite(floats)), (qtype, kind)
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    assert raw.size == floats.size // block_size * type_size, (qtype, raw.size, floats.size)
    head = struct.pack("<IIII", kind, int(qtype), floats.size, raw.size)
    body = raw.tobytes() + floats.tobytes() if kind == 0 else floats.tobytes() + raw.tobytes()
    return head + body


def main():
    rng = np.random.default_rng(20240607)
    recs = []

    # ---- dequantize ground truth ----
    x = rng.standard_normal(64).astype(np.float32) * np.float32(3)
    recs.append(record(0, T.F32, x, x.view(np.uint8)))
    h = np.concatenate([rng.standard_normal(56) * 100, [65504, -65504, 6.1e-5, 6e-8, -6e-8, 0, -0.0, 1]])
    h = h.astype(np.float16)
    recs.append(record(0, T.F16, quants.dequantize(h.view(np.uint8), T.F16), h.view(np.uint8)))
    bf = rng.integers(0, 1 << 16, size=64, dtype=np.uint16)
    bf[(bf & 0x7F80) == 0x7F80] ^= 0x4000  # no inf / NaN
    recs.append(record(0, T.BF16, quants.dequantize(bf.view(np.uint8), T.BF16), bf.view(np.uint8)))
    for qtype, nb in N_BLOCKS.items():
        raw = random_blocks(rng, qtype, nb)
        recs.append(record(0, qtype, quants.dequantize(raw, qtype), raw))

    # ---- quantize ground truth (ggml's reference quantizers, mirrored in gguf-py) ----
    def act(n_blocks):
        a = rng.standard_normal((n_blocks, 32)).astype(np.float32)
        a *= (2.0 ** rng.uniform(-8, 8, size=(n_blocks, 1))).astype(np.float32)
        a[0] = 0  # all-zero block
        # ties: with |max| = 127 the scale is exactly 1, so these land on .5 and must round away from zero
        a[1] = np.array([127, -127, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5] * 4, dtype=np.float32)
        return a.reshape(-1)

    for qtype in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        a = act(4)
        recs.append(record(1, qtype, a, quants.quantize(a.reshape(1, -1), qtype)))
    a = rng.standard_normal(64).astype(np.float32) * np.float32(1e3)
    recs.append(record(1, T.BF16, a, quants.quantize(a, T.BF16)))

    data = b"GMQF" + struct.pack("<II", 1, len(recs)) + b"".join(recs)
    with open(OUT, "wb") as f:
        f.write(data)
    print(f"{OUT}: {len(recs)} records, {len(data)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
