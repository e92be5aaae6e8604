#!/usr/bin/env python3
"""requant_q4_0.py SRC DST: a copy of the GGUF SRC with every 2-D weight of the blocks (blk.*.weight) requantized to
q4_0 by gguf-py (dequantized first), metadata and the other tensors unchanged. For tests of q4_0 kernels on a real
model's weights, e.g. the GPU's q4_0 batch products against the CPU backend:
    python3 scripts/requant_q4_0.py models/g3-sub-bf16.gguf models/g3-sub-q4_0.gguf
    GEMMAC_MODEL=models/g3-sub-q4_0.gguf build/test_cuda_model"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants


def main(src: str, dst: str) -> None:
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    n_q = 0
    for t in r.tensors:
        qtype = t.tensor_type
        data = t.data
        shape = [int(d) for d in reversed(t.shape)]  # numpy order: rows first
        if t.name.startswith("blk.") and len(shape) == 2 and shape[-1] % 32 == 0 and qtype != GGMLQuantizationType.F32:
            f32 = quants.dequantize(data, qtype).reshape(shape).astype(np.float32)
            data = quants.quantize(f32, GGMLQuantizationType.Q4_0)
            qtype = GGMLQuantizationType.Q4_0
            n_q += 1
        w.add_tensor(t.name, np.asarray(data), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{dst}: {n_q} of {len(r.tensors)} tensors as q4_0")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
