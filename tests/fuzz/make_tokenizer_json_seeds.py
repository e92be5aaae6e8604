#!/usr/bin/env python3
"""make_tokenizer_json_seeds.py: seed inputs for fuzz_tokenizer_json: small tokenizer.json files in the
shapes tokenizer_json.c accepts (Gemma 3 / Gemma 4 style, merges as strings and pairs, side cases), each
prefixed with the byte that picks the kind hint. Usage: make_tokenizer_json_seeds.py CORPUS_DIR"""
import json
import os
import sys

SP = "\u2581"


def doc(merges_as_pairs, pre, extra_added=(), normalizer=None):
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<end_of_turn>": 4, SP: 5, "a": 6, "b": 7, "c": 8,
             "ab": 9, "bc": 10, "abc": 11, SP + "a": 12}
    for i in range(256):
        vocab["<0x%02X>" % i] = 13 + i
    merges = [("a", "b"), ("b", "c"), ("ab", "c"), (SP, "a")]
    added = [{"id": i, "content": t, "special": True, "normalized": False}
             for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<end_of_turn>"])]
    added += [dict(a) for a in extra_added]
    return {
        "version": "1.0", "added_tokens": added,
        "normalizer": normalizer or {"type": "Replace", "pattern": {"String": " "}, "content": SP},
        "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                                                    {"Sequence": {"id": "A", "type_id": 0}}]},
        "decoder": None,
        "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True,
                  "vocab": vocab, "merges": [list(m) if merges_as_pairs else " ".join(m) for m in merges]},
    }


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    split_space = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
    split_nl = {"type": "Split", "pattern": {"Regex": "[^\n]+|[\n]+"}, "behavior": "Isolated", "invert": False}
    seeds = [
        (0, doc(False, None)),
        (1, doc(True, split_space)),
        (2, doc(True, split_nl, [{"id": 269, "content": "<|turn>", "special": True},
                                 {"id": 270, "content": "<|channel>", "special": False}])),
        (0, doc(False, {"type": "Sequence", "pretokenizers": [split_space, split_nl]})),
        (1, doc(True, None, normalizer={"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP}, {"type": "Replace", "pattern": {"String": " "}, "content": SP}]})),
    ]
    for i, (hint, d) in enumerate(seeds):
        with open(os.path.join(out, "seed%d.json" % i), "wb") as f:
            f.write(bytes([hint]) + json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode())


if __name__ == "__main__":
    main()
