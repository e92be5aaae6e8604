#!/bin/bash
# cuda_chain_stream_run.sh: one call on the GPU machine (binaries from `PROBES=cuda_chain_probe bench/cuda_pack.sh`, carried in build-bin/) that
# checks and measures two changes at once, each switchable in the same binary:
#   - chains streaming re-laid q4_0 weights through shared memory (GEMMAC_CUDA_CHAIN=1, GEMMAC_CUDA_CHAIN_STREAM=0/1;
#     chain_cuda.cu). Predicted: probe ~58 -> ~35-40 us a layer, against ~44.5 for the launches one by one.
#   - the next op's q8_0 input quantized by clusters of the 4-warp product blocks (GEMMAC_CUDA_LOOKAHEAD=1,
#     matmul_cuda.cu). Predicted: tg128 ~2.6 -> ~2.4 ms.
# Order: the op tests, the model test each way, the chain probe, then E4B q4_0 / q8_0 decoding alternated, q4_0 at
# 1 / 64 / 256 sequences, and kernel traces (bench/cuda_trace.c) of LOOKAHEAD=1 and CHAIN=1 decoding. Logs to $OUT.
# Measured once (BENCHMARKS.md, twenty-first session) and both changes dropped: on the tree since, GEMMAC_CUDA_CHAIN_STREAM
# is not read (both CHAIN rows run the register chain) and LOOKAHEAD=1 is the fifth session's counted quantization.
# Usage: bench/cuda_chain_stream_run.sh
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
. bench/cuda_unpack.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
timeout 200 "$B/test_cuda_ops" 2>&1 | tee "$OUT/ops.txt" | grep -E "chain|next op|FAIL|PASSED|ERROR|error" | head -20
for v in "LOOKAHEAD=0" "LOOKAHEAD=1" "CHAIN=1"; do
  echo "== test_cuda_model, GEMMAC_CUDA_$v"
  env GEMMAC_CUDA_$v GEMMAC_MODEL=$SUB timeout 60 "$B/test_cuda_model" 2>&1 | tee -a "$OUT/model.txt" |
    grep -E "KL|batched|PASSED|FAIL|ERROR|error" | head -30
done
echo "== cuda_chain_probe g8"
timeout 60 "$B/cuda_chain_probe" g8 2>&1 | tee "$OUT/probe.txt"
F=/tmp/e4b.gguf
for t in q4_0 q8_0; do
  "$B/gemmac" synth --preset gemma4-e4b --type $t -o $F --quiet 2>/dev/null || exit 1
  for rep in 1 2; do
    for v in "LOOKAHEAD=0" "LOOKAHEAD=1" "CHAIN=1" "CHAIN_STREAM=0 GEMMAC_CUDA_CHAIN=1"; do
      [ $t = q8_0 ] && [ "${v:0:5}" = CHAIN ] && continue
      echo "== E4B $t, GEMMAC_CUDA_$v"
      env GEMMAC_CUDA_$v timeout 60 "$B/gemmac" bench -m $F -ngl all -p 0 -n 128 -r 2 2>&1 | grep -E "tg|rror"
    done
  done
  if [ $t = q4_0 ]; then
    echo "== E4B $t, defaults, 1 / 64 / 256 sequences at depth 1024"
    timeout 200 "$B/gemmac" bench -m $F -ngl all -p 0 -n 32 -npl 1,64,256 -d 1024 -r 1 2>&1 | grep -E "tg|rror"
    for v in "LOOKAHEAD=1" "CHAIN=1"; do
      env GEMMAC_CUDA_$v GEMMAC_TRACE_GRAPH_ONLY=1 LD_PRELOAD=$B/libgemmac_cuda_trace.so \
        GEMMAC_TRACE_OUT=$OUT/trace_tg_${v%%=*}.md timeout 100 "$B/gemmac" bench -m $F -ngl all -p 0 -n 16 -r 1 > /dev/null 2>&1
    done
  fi
  rm -f $F
done 2>&1 | tee "$OUT/e4b.txt"
