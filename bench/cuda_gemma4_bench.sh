#!/bin/bash
# cuda_gemma4_bench.sh: one call on the GPU machine: build the CLI (cJSON from build-cuda-deps/ when the machine
# lacks it), write synthetic Gemma 4 files there (`gemmac synth`, 16 threads) and run `gemmac bench -ngl all` on
# each: single-stream decode (tg) and prefill (pp), the issue-4 targets' shapes. Logs to $OUT (or /tmp/cuda_out).
# Usage: bench/cuda_gemma4_bench.sh [PRESET:TYPE ...]   (default gemma4-e2b:q4_0 gemma4-e4b:q4_0 gemma4-26b-a4b:q4_0)
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
. bench/cuda_build.sh
cuda_build -DGEMMAC_TESTS=OFF -- gemmac_cli
presets=("$@"); [ ${#presets[@]} -eq 0 ] && presets=(gemma4-e2b:q4_0 gemma4-e4b:q4_0 gemma4-26b-a4b:q4_0)
{ nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader; date -u
  for pt in "${presets[@]}"; do
    p=${pt%%:*}; t=${pt##*:}; f=/tmp/$p-$t.gguf
    ./build-dev/gemmac synth --preset "$p" --type "$t" -o "$f" --quiet || continue
    echo "== $p $t ($(stat -c %s "$f" | awk '{printf "%.2f GiB", $1/1073741824}'))"
    timeout 300 ./build-dev/gemmac bench -m "$f" -ngl all -p 512 -n 128 -r 3
    rm -f "$f"
  done; } 2>&1 | tee "$OUT/gemma4_bench.txt"
