#!/usr/bin/env python3
"""gguf_subset.py: a smaller GGUF made of a real model's own tensors, for machines a full file cannot reach
(the GPU machine takes at most 64 MiB per call). Keeps the first --layers blocks, the first --vocab rows of
token_embd (the tied LM head) and the first --vocab entries of the tokenizer arrays; every kept tensor's bytes
are copied unchanged (same quantization), or with --bf16 dequantized (gguf-py) and stored as BF16, so that both
backends compute with f32 activations. Gemma 3 only (block_count key gemma3.block_count).

usage: gguf_subset.py IN.gguf OUT.gguf --layers 6 --vocab 32768 [--bf16]
"""
import argparse
import re
import struct

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# bytes per block and elements per block of the GGML types a Gemma 3 GGUF holds
TYPE_BLOCK = {0: (4, 1), 1: (2, 1), 2: (18, 32), 6: (22, 32), 8: (34, 32), 12: (144, 256), 13: (176, 256),
              14: (210, 256), 30: (2, 1)}


class Reader:
    def __init__(self, buf):
        self.b, self.o = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.o:self.o + n]
        self.o += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        raise ValueError(f"GGUF value type {t}")


def put_value(out, t, v):
    if t in SCALAR:
        out += struct.pack(SCALAR[t], v)
    elif t == 8:
        out += struct.pack("<Q", len(v)) + v
    elif t == 9:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for x in items:
            put_value(out, et, x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--bf16", action="store_true", help="store every matrix (2-D tensor) as BF16")
    a = ap.parse_args()
    buf = open(a.src, "rb").read()
    r = Reader(buf)
    assert r.b[:4] == b"GGUF", "not a GGUF file"
    r.o = 4
    version, n_t, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        kvs.append((k, t, r.value(t)))
    tensors = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        tensors.append([name, ne, r.take("<I"), r.take("<Q")])
    align = next((v for k, t, v in kvs if k == b"general.alignment"), 32)
    data0 = (r.o + align - 1) // align * align

    new_kvs = []
    for k, t, v in kvs:
        if k == b"gemma3.block_count":
            v = a.layers
        elif k.startswith(b"tokenizer.ggml.") and t == 9 and len(v[1]) > a.vocab:
            v = (v[0], v[1][:a.vocab])
        new_kvs.append((k, t, v))
    keep = []
    for name, ne, ty, off in tensors:
        m = re.match(rb"blk\.(\d+)\.", name)
        if m and int(m.group(1)) >= a.layers:
            continue
        bs, be = TYPE_BLOCK[ty]
        n_el = 1
        for x in ne:
            n_el *= x
        if name == b"token_embd.weight":
            ne = [ne[0], min(ne[1], a.vocab)]
            n_el = ne[0] * ne[1]
        data = buf[data0 + off:data0 + off + n_el // be * bs]
        if a.bf16 and len(ne) >= 2 and ty != 30:
            import numpy as np
            from gguf import quants
            raw = np.frombuffer(data, dtype=np.uint8)
            f = quants.dequantize(raw, ty).astype(np.float32).reshape(-1)
            u = f.view(np.uint32).astype(np.uint64)
            b16 = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
            data, ty = b16.tobytes(), 30
        keep.append((name, ne, ty, data))

    out = bytearray(b"GGUF") + struct.pack("<IQQ", version, len(keep), len(new_kvs))
    for k, t, v in new_kvs:
        put_value(out, 8, k)
        out += struct.pack("<I", t)
        put_value(out, t, v)
    off = 0
    offs = []
    for name, ne, ty, data in keep:
        offs.append(off)
        off = (off + len(data) + align - 1) // align * align
    for (name, ne, ty, data), o in zip(keep, offs):
        put_value(out, 8, name)
        out += struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", ty, o)
    out += b"\0" * ((-len(out)) % align)
    for (name, ne, ty, data), o in zip(keep, offs):
        out += data + b"\0" * ((-len(data)) % align)
    open(a.dst, "wb").write(out)
    print(f"{a.dst}: {len(keep)} tensors, {a.layers} layers, vocab {a.vocab}, {len(out) / 1048576:.1f} MiB")


if __name__ == "__main__":
    main()
