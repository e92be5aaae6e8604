#!/bin/bash
# cuda_staged_prep_run.sh: one call on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/) that
# checks and measures decode attention's preparation inside the staged kernel (attention_cuda.cu: a row per warp,
# the own K/V kept for its tile) and its early loads (the first tiles' older keys requested before the wait).
# Three ways in the same binary: A GEMMAC_CUDA_ATTN_ONE_PER_SEQ=0 (the old path: its own preparation launch, every
# load after the wait), B one per sequence (early loads, own preparation launch), C B with
# GEMMAC_CUDA_ATTN_PREP_FUSED=1. Predicted (E4B q4_0 tg128): A -> C about -4 us a layer on the critical path,
# 2.6 -> ~2.45 ms a token on an H200; B alone ~-1 us a layer.
# Order: the op tests, the model test each way, then E4B q4_0 alternated A / B / C: tg128, then 1 / 64 / 256
# sequences at depth 1024; kernel traces (bench/cuda_trace.c) of tg32 for A and C. Logs to $OUT.
# Usage: [MODEL_WAYS='A B C'] [TRACE_WAYS='A C'] bench/cuda_staged_prep_run.sh [tests|bench|all]
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
WHAT=${1:-all}
. bench/cuda_unpack.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
way() { case $1 in A) echo "GEMMAC_CUDA_ATTN_ONE_PER_SEQ=0 GEMMAC_CUDA_ATTN_PREP_FUSED=0";;
                   B) echo "GEMMAC_CUDA_ATTN_ONE_PER_SEQ=1 GEMMAC_CUDA_ATTN_PREP_FUSED=0";;
                   C) echo "GEMMAC_CUDA_ATTN_ONE_PER_SEQ=1 GEMMAC_CUDA_ATTN_PREP_FUSED=1";; esac; }
if [ "$WHAT" != bench ]; then
  timeout 300 "$B/test_cuda_ops" 2>&1 | tee "$OUT/ops.txt" | grep -E "prep|attention|FAIL|PASSED|ERROR|error" | head -30
  for w in ${MODEL_WAYS:-A B C}; do
    echo "== test_cuda_model, way $w: $(way $w)"
    env $(way $w) GEMMAC_MODEL=$SUB timeout 90 "$B/test_cuda_model" 2>&1 | tee -a "$OUT/model.txt" |
      grep -E "KL|batched|PASSED|FAIL|ERROR|error" | head -30
  done
fi
[ "$WHAT" = tests ] && exit 0
F=/tmp/e4b.gguf
"$B/gemmac" synth --preset gemma4-e4b --type q4_0 -o $F --quiet 2>/dev/null || exit 1
{
  for rep in 1 2; do
    for w in A B C; do
      echo "== E4B q4_0, way $w, tg128"
      env $(way $w) timeout 60 "$B/gemmac" bench -m $F -ngl all -p 0 -n 128 -r 2 2>&1 | grep -E "tg|rror"
    done
  done
  for w in A B C; do
    echo "== E4B q4_0, way $w, 1 / 64 / 256 sequences at depth 1024"
    env $(way $w) timeout 150 "$B/gemmac" bench -m $F -ngl all -p 0 -n 32 -npl 1,64,256 -d 1024 -r 1 2>&1 | grep -E "tg|rror"
  done
  for w in ${TRACE_WAYS:-A C}; do
    env $(way $w) GEMMAC_TRACE_GRAPH_ONLY=1 LD_PRELOAD=$B/libgemmac_cuda_trace.so \
      GEMMAC_TRACE_OUT=$OUT/trace_tg_$w.md timeout 100 "$B/gemmac" bench -m $F -ngl all -p 0 -n 32 -r 1 > /dev/null 2>&1
  done
} 2>&1 | tee "$OUT/e4b.txt"
rm -f $F
