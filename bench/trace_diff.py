#!/usr/bin/env python3
"""trace_diff.py: per kernel, the critical-path time a step of one bench/cuda_trace.c report adds over another's,
e.g. a batched run's trace minus a single-sequence run's of the same steps (gemmac bench runs its tg pass before its
-npl pass, so a trace of the -npl run holds both). Prints, largest first, microseconds a step and launches a step
of (A - B) / steps, from each kernel's count and mean end increment.
Usage: bench/trace_diff.py A.md B.md STEPS"""
import re
import sys

ROW = re.compile(r"\| \d+ \| [\d.]+ \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| \d+ \| (\S+) \|")


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                count, incr, name = int(m.group(1)), float(m.group(2)), m.group(3)
                out[name] = (count, count * incr)
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    a, b, steps = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
    rows = []
    for name in a.keys() | b.keys():  # a kernel of B alone counts against A
        (count, us), (bc, bus) = a.get(name, (0, 0.0)), b.get(name, (0, 0.0))
        rows.append(((us - bus) / steps, (count - bc) / steps, name))
    rows.sort(reverse=True)
    for us, launches, name in rows:
        print(f"{us:9.1f} us {launches:6.1f} launches  {name[:100]}")
    print(f"{sum(r[0] for r in rows):9.1f} us a step in all")


if __name__ == "__main__":
    main()
