#!/usr/bin/env python3
"""make_safetensors_fixture.py: writes tests/golden/st_fixture.safetensors with the real `safetensors`
package (pip install safetensors numpy), for test_safetensors.c to read back: names, dtypes, shapes and
bytes must match what that library wrote. Several dtypes (BF16 and F8 through TensorSpec, since numpy has
no bfloat16), a scalar, an empty tensor, a 4-D tensor, a non-ASCII name, and __metadata__.

Tensor bytes follow a rule the C test repeats: with seed = (sum of the name's UTF-8 bytes) mod 256,
byte j is (seed * 37 + j * 11 + 5) mod 256, except BOOL, where it is (seed + j) mod 2.
Usage: python3 tests/golden/make_safetensors_fixture.py [out.safetensors]"""
import sys
from pathlib import Path

import numpy as np
import safetensors
from safetensors import serialize_file
from safetensors.numpy import TensorSpec

# name, numpy-style dtype accepted by TensorSpec, bytes per element, shape (HF order)
TENSORS = [
    ("model.embed_tokens.weight", "float32", 4, (4, 8)),
    ("model.layers.0.self_attn.q_proj.weight", "bfloat16", 2, (6, 8)),
    ("model.norm.weight", "float16", 2, (10,)),
    ("ids", "int64", 8, (3,)),
    ("bytes", "uint8", 1, (2, 3, 5)),
    ("mask", "bool", 1, (7,)),
    ("fp8.scale", "float8_e4m3fn", 1, (4, 2)),
    ("scalar", "float32", 4, ()),
    ("empty", "float32", 4, (0, 3)),
    ("conv.weight", "float16", 2, (2, 3, 2, 2)),
    ("unicod\u00e9.weight", "float32", 4, (2,)),
]
METADATA = {"format": "pt", "note": "gemmac fixture"}


def tensor_bytes(name, dtype, nbytes):
    seed = sum(name.encode("utf-8")) % 256
    if dtype == "bool":
        return bytes((seed + j) % 2 for j in range(nbytes))
    return bytes((seed * 37 + j * 11 + 5) % 256 for j in range(nbytes))


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("st_fixture.safetensors")
    keep = []
    specs = {}
    for name, dtype, size, shape in TENSORS:
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        buf = np.frombuffer(tensor_bytes(name, dtype, n * size), dtype=np.uint8).copy()
        keep.append(buf)
        specs[name] = TensorSpec(dtype=dtype, shape=shape, data_ptr=buf.ctypes.data, data_len=buf.nbytes)
    serialize_file(specs, str(out), metadata=METADATA)
    # read back with the same library: every tensor round-trips
    got = dict(safetensors.deserialize(out.read_bytes()))
    for name, dtype, size, shape in TENSORS:
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        assert list(got[name]["shape"]) == list(shape), name
        assert bytes(got[name]["data"]) == tensor_bytes(name, dtype, n * size), name
    print(f"wrote {out} ({out.stat().st_size} bytes, safetensors {safetensors.__version__})")


if __name__ == "__main__":
    main()
