#!/usr/bin/env python3
"""serve_bench.py: throughput and latency of an OpenAI-compatible server on 127.0.0.1 (only).

  python3 bench/serve_bench.py --port 8080 [--levels 1,4,16,64] [--max-tokens 64] [--label gemmac]

For each concurrency level C it sends max(--min-requests, C) requests (at most --max-requests) from C threads:
POST /v1/completions, a fixed prompt set, temperature 0, max_tokens N, streamed. It measures, per level:
  - aggregate generated tokens/s: tokens of all requests / wall time of the level;
  - time to first token (TTFT): from sending the request to the first chunk with text, p50/p99;
  - per-token latency (ITL): the gap between successive chunks with text, over all requests, p50/p99.
A token is a streamed chunk with non-empty text (both gemmac and llama-cpp-python send one chunk per token;
a token that ends inside a UTF-8 character may be merged into the next chunk, which undercounts slightly and
equally for both). Prints a markdown table. Every loop is bounded: each level stops submitting after
--level-deadline seconds (what was not sent is reported), each request times out after --timeout seconds.
"""
import argparse
import concurrent.futures as cf
import json
import statistics
import sys
import threading
import time

import requests

HOST = "127.0.0.1"
PROMPTS = [
    "The history of the printing press begins",
    "In a small village by the sea, there lived",
    "The three most important ideas in physics are",
    "A recipe for bread: first,",
    "The city of Paris is known for",
    "Once upon a time, a robot",
    "The best way to learn a new language is",
    "Photosynthesis is the process by which",
]

_tls = threading.local()


def session():
    s = getattr(_tls, "s", None)
    if s is None:
        s = _tls.s = requests.Session()
    return s


def one(url, prompt, max_tokens, timeout, model):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    times = []
    err = None
    try:
        with session().post(url + "/v1/completions", json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                return {"error": f"HTTP {r.status_code}: {r.text[:200]}"}
            done = False
            for line in r.iter_lines():
                if not line:
                    continue
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data.strip() == b"[DONE]":
                    done = True
                    break
                d = json.loads(data)
                for c in d.get("choices") or []:
                    if c.get("text"):
                        times.append(time.perf_counter())
            if not done:
                err = "stream ended without [DONE]"
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    if err:
        return {"error": err}
    return {"t0": t0, "times": times}


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def level(url, conc, n_req, args):
    deadline = time.perf_counter() + args.level_deadline
    start = time.perf_counter()

    def task(i):
        if time.perf_counter() > deadline:
            return None
        return one(url, PROMPTS[i % len(PROMPTS)], args.max_tokens, args.timeout, args.model)

    with cf.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(task, range(n_req)))
    wall = time.perf_counter() - start
    sent = [r for r in res if r is not None]
    errors = [r["error"] for r in sent if "error" in r]
    ok = [r for r in sent if "error" not in r]
    tokens = sum(len(r["times"]) for r in ok)
    ttft = [(r["times"][0] - r["t0"]) * 1e3 for r in ok if r["times"]]
    itl = [(b - a) * 1e3 for r in ok for a, b in zip(r["times"], r["times"][1:])]
    return {"conc": conc, "requests": len(ok), "unsent": n_req - len(sent), "errors": len(errors),
            "first_error": errors[0] if errors else "", "tokens": tokens, "wall": wall,
            "tps": tokens / wall if wall > 0 else 0, "ttft50": pct(ttft, 50), "ttft99": pct(ttft, 99),
            "itl50": pct(itl, 50), "itl99": pct(itl, 99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--max-requests", type=int, default=64)
    ap.add_argument("--level-deadline", type=float, default=90.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--model", default="x")
    ap.add_argument("--label", default="server")
    args = ap.parse_args()
    url = f"http://{HOST}:{args.port}"
    requests.get(url + "/v1/models", timeout=10).raise_for_status()
    for p in PROMPTS[:2]:  # warm-up, not measured
        w = one(url, p, 8, args.timeout, args.model)
        if "error" in w:
            sys.exit(f"warm-up failed: {w['error']}")
    print(f"\n**{args.label}** — /v1/completions, streamed, temperature 0, max_tokens {args.max_tokens}, "
          f"{len(PROMPTS)} prompts\n")
    print("| concurrency | requests | gen tokens | wall s | agg tok/s | TTFT p50 ms | TTFT p99 ms "
          "| ITL p50 ms | ITL p99 ms | errors |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for c in [int(x) for x in args.levels.split(",")]:
        n = min(args.max_requests, max(args.min_requests, c))
        r = level(url, c, n, args)
        print(f"# {args.label} c={c}: {r['requests']} ok, {r['errors']} errors, {r['unsent']} unsent, "
              f"{r['tokens']} tokens in {r['wall']:.1f} s {r['first_error']}", file=sys.stderr, flush=True)
        print(f"| {r['conc']} | {r['requests']} | {r['tokens']} | {r['wall']:.1f} | {r['tps']:.1f} | "
              f"{r['ttft50']:.0f} | {r['ttft99']:.0f} | {r['itl50']:.1f} | {r['itl99']:.1f} | "
              f"{r['errors'] + r['unsent']} |", flush=True)

if __name__ == "__main__":
    main()
