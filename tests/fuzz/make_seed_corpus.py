#!/usr/bin/env python3
# make_seed_corpus.py: writes a few small valid GGUF files (every value type, string arrays, tensors of
# several types, alignments 32/64, v2 and v3) as seeds for fuzz_gguf. Usage: make_seed_corpus.py DIR
# Standalone on purpose (no gguf-py): the fuzzer's job is to mutate these into malformed files.
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B", U64: "Q", I64: "q",
       F64: "d"}
# GGML type: (block size, bytes per block)
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack("<" + FMT[t], v)


def gguf(kvs, tensors, version=3, alignment=None):
    """kvs: [(key, type, value)]; tensors: [(name, ggml_type, [ne...])] with deterministic bytes."""
    align = alignment or 32
    if alignment:
        kvs = [("general.alignment", U32, alignment)] + kvs
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + value(t, v)
    data, infos = b"", b""
    for name, typ, ne in tensors:
        bs, bb = TYPES[typ]
        rows = 1
        for d in ne[1:]:
            rows *= d
        size = ne[0] // bs * bb * rows
        data += b"\0" * (-len(data) % align)
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", typ, len(data))
        data += bytes((i * 37 + 11) & 0xFF for i in range(size))
    out += infos
    out += b"\0" * (-len(out) % align)
    return out + data


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "corpus"
    os.makedirs(d, exist_ok=True)
    every = [
        ("general.architecture", STRING, "gemma3"),
        ("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 6000), ("t.i16", I16, -300),
        ("t.u32", U32, 4000000000), ("t.i32", I32, -7), ("t.f32", F32, 0.5), ("t.bool", BOOL, 1),
        ("t.u64", U64, 2**64 - 1), ("t.i64", I64, -2**63), ("t.f64", F64, 1e-6),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<pad>", "<eos>", "<bos>", "", "\u2581hi"])),
        ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, -1.0, -2.0, -3.0, -4.0])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 3, 1, 1])),
        ("a.bool", ARRAY, (BOOL, [0, 1])), ("a.u64", ARRAY, (U64, [1, 2])), ("a.empty", ARRAY, (U8, [])),
    ]
    tensors = [
        ("token_embd.weight", 0, [8, 5]),
        ("blk.0.attn_q.weight", 8, [64, 2]),
        ("blk.0.ffn_down.weight", 12, [256]),
        ("blk.0.attn_norm.weight", 1, [4, 2, 3]),
        ("t4d", 30, [2, 2, 2, 2]),
    ]
    seeds = {
        "full_v3_a32.gguf": gguf(every, tensors, 3, None),
        "full_v3_a64.gguf": gguf(every, tensors, 3, 64),
        "full_v2_a32.gguf": gguf(every, tensors, 2, 32),
        "kv_only.gguf": gguf(every, [], 3, None),
        "tensors_only.gguf": gguf([], [("a", 14, [256, 1]), ("b", 2, [32, 3])], 3, 16),
        "minimal.gguf": gguf([], [], 3, None),
    }
    for name, blob in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(blob)
    print(f"wrote {len(seeds)} seeds to {d}")


if __name__ == "__main__":
    main()
