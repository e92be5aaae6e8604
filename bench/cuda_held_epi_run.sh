#!/bin/bash
# cuda_held_epi_run.sh: one call on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/) that
# checks and measures the held tensor-core epilogues (backend_cuda.c "held epilogues"; GEMMAC_CUDA_HOLD_EPI=0 turns
# them off in the same binary). Predicted: 64 sequences at depth 1024 ~7.1 -> ~6.7 ms a step (five launches fewer a
# layer, ~2 us of critical path each), 256 sequences ~2-3%, pp512 ~2%, one sequence unchanged (n = 1 never holds).
# Order: the op tests, the model test each way, then E4B q4_0 alternated off / on: 64 and 256 sequences at depth
# 1024, pp512, tg128; kernel traces (bench/cuda_trace.c) of 64 sequences each way. Logs to $OUT.
# Usage: bench/cuda_held_epi_run.sh
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
. bench/cuda_unpack.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
timeout 240 "$B/test_cuda_ops" 2>&1 | tee "$OUT/ops.txt" | grep -E "held|tensor-core|FAIL|PASSED|ERROR|error" | head -20
for v in 1 0; do
  echo "== test_cuda_model, GEMMAC_CUDA_HOLD_EPI=$v"
  GEMMAC_CUDA_HOLD_EPI=$v GEMMAC_MODEL=$SUB timeout 60 "$B/test_cuda_model" 2>&1 | tee -a "$OUT/model.txt" |
    grep -E "KL|batched|PASSED|FAIL|ERROR|error" | head -30
done
F=/tmp/e4b.gguf
"$B/gemmac" synth --preset gemma4-e4b --type q4_0 -o $F --quiet 2>/dev/null || exit 1
{
  for rep in 1 2; do
    for v in 0 1; do
      echo "== E4B q4_0, GEMMAC_CUDA_HOLD_EPI=$v, 64 / 256 sequences at depth 1024"
      GEMMAC_CUDA_HOLD_EPI=$v timeout 150 "$B/gemmac" bench -m $F -ngl all -p 0 -n 32 -npl 64,256 -d 1024 -r 1 2>&1 | grep -E "tg|rror"
    done
  done
  for v in 0 1 0 1; do
    echo "== E4B q4_0, GEMMAC_CUDA_HOLD_EPI=$v, pp512 and tg128"
    GEMMAC_CUDA_HOLD_EPI=$v timeout 60 "$B/gemmac" bench -m $F -ngl all -p 512 -n 128 -r 2 2>&1 | grep -E "pp|tg|rror"
  done
  for v in 0 1; do
    GEMMAC_CUDA_HOLD_EPI=$v GEMMAC_TRACE_GRAPH_ONLY=1 LD_PRELOAD=$B/libgemmac_cuda_trace.so \
      GEMMAC_TRACE_OUT=$OUT/trace_x64_hold$v.md timeout 100 "$B/gemmac" bench -m $F -ngl all -p 0 -n 8 -npl 64 -d 1024 -r 1 > /dev/null 2>&1
  done
} 2>&1 | tee "$OUT/e4b.txt"
rm -f $F
