#!/bin/bash
# cuda_next_quant_run.sh: one call on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/) that
# checks and measures the products quantizing the next op's q8_0 input themselves (mv_quant_own, matmul_cuda.cu),
# which GEMMAC_CUDA_LOOKAHEAD=1 turns on: the op tests, the 2-layer q4_0 model test with and without it, E4B q4_0 /
# q8_0 decoding with it off and on, alternated, and a CUPTI trace of single-sequence decoding each way. Logs to $OUT.
# First version (16-warp blocks, 2026-12-05 call 1): slower, tg128 2.61 -> 2.78 ms, the GeGLU at one block an SM
# (BENCHMARKS.md). Now (cbc2d70, 4-warp blocks in thread-block clusters sharing rows through distributed shared
# memory), predicted: the GeGLU back to ~13 us plus a cluster barrier (< 1 us), tg128 ~2.61 -> ~2.4 ms.
# Usage: bench/cuda_next_quant_run.sh
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
. bench/cuda_unpack.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
timeout 240 "$B/test_cuda_ops" 2>&1 | tee "$OUT/ops.txt" | grep -E "next op|FAIL|PASSED|ERROR|error" | head -20
for la in 0 1; do
  echo "== test_cuda_model, GEMMAC_CUDA_LOOKAHEAD=$la"
  GEMMAC_CUDA_LOOKAHEAD=$la GEMMAC_MODEL=$SUB timeout 120 "$B/test_cuda_model" 2>&1 | tee "$OUT/model$la.txt" |
    grep -E "KL|batched|PASSED|FAIL|ERROR|error" | head -30
done
F=/tmp/e4b.gguf
for t in q4_0 q8_0; do
  "$B/gemmac" synth --preset gemma4-e4b --type $t -o $F --quiet 2>/dev/null || exit 1
  for rep in 1 2; do for la in 0 1; do
    echo "== E4B $t, GEMMAC_CUDA_LOOKAHEAD=$la"
    GEMMAC_CUDA_LOOKAHEAD=$la timeout 100 "$B/gemmac" bench -m $F -ngl all -p 0 -n 128 -r 2 2>&1 | grep -E "tg"
  done; done
  if [ $t = q4_0 ]; then
    for la in 0 1; do
      echo "== E4B $t, GEMMAC_CUDA_LOOKAHEAD=$la, 1 / 4 / 8 sequences at depth 1024"
      GEMMAC_CUDA_LOOKAHEAD=$la timeout 150 "$B/gemmac" bench -m $F -ngl all -p 0 -n 32 -npl 1,4,8 -d 1024 -r 1 2>&1 |
        grep -E "tg"
      GEMMAC_CUDA_LOOKAHEAD=$la GEMMAC_TRACE_GRAPH_ONLY=1 LD_PRELOAD=$B/libgemmac_cuda_trace.so \
        GEMMAC_TRACE_OUT=$OUT/trace_tg_la$la.md timeout 100 "$B/gemmac" bench -m $F -ngl all -p 0 -n 16 -r 1 > /dev/null 2>&1
    done
  fi
  rm -f $F
done 2>&1 | tee "$OUT/e4b.txt"
