#!/usr/bin/env python3
"""llama_cpp_bench.py: the peer side of BENCHMARKS.md: llama.cpp (through llama-cpp-python) measured the way
`gemmac bench` measures: ppN = one batch of N pseudo-random tokens on an empty cache, tgN = N tokens
decoded one at a time on an empty cache; one warm-up, then -r repetitions; tokens/s mean ± sd.
(llama-cpp-python has no llama-bench binary; its per-call Python overhead is a few microseconds.)

Usage: python3 bench/llama_cpp_bench.py -m MODEL.gguf [-p 512] [-n 128] [-r 5] [-t 2]
"""
import argparse
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=int, default=2)
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.m, n_ctx=max(a.p, a.n) + 8, n_batch=max(a.p, 1), n_ubatch=max(a.p, 1),
                          n_threads=a.t, n_threads_batch=a.t, verbose=False)
    n_vocab = llm.n_vocab()
    x = 88172645463325252
    toks = []
    for i in range(max(a.p, a.n)):
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        toks.append(2 if i == 0 else x % n_vocab)

    def run(n, one_by_one):
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        t0 = time.perf_counter()
        if one_by_one:
            for t in toks[:n]:
                llm.eval([t])
        else:
            llm.eval(toks[:n])
        return n / (time.perf_counter() - t0)

    name = f"llama.cpp {llama_cpp.__version__}"
    print("| engine                  | threads |   test |                t/s |")
    print("| ----------------------- | ------: | -----: | -----------------: |")
    for test, n, obo in (("pp", a.p, False), ("tg", a.n, True)):
        if n <= 0:
            continue
        run(n, obo)  # warm-up
        v = [run(n, obo) for _ in range(a.r)]
        sd = statistics.stdev(v) if len(v) > 1 else 0.0
        print(f"| {name:23s} | {a.t:7d} | {test}{n:<4d} | {statistics.mean(v):9.2f} ± {sd:6.2f} |", flush=True)


if __name__ == "__main__":
    main()
