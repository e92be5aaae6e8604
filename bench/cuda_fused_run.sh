#!/bin/bash
# cuda_fused_run.sh: one call on the GPU machine for issue 4's fusion / PDL / tensor-core slice: build the CLI and
# the CUDA tests (cmocka / cJSON from build-cuda-deps/ when the machine lacks them), run test_cuda_ops and
# test_cuda_model (MODEL: a real-weight model small enough to carry, bench/gguf_subset.py), then `gemmac bench
# -ngl all` on synthetic Gemma 4 files made there (`gemmac synth`), with programmatic dependent launch on and off;
# PROFILE=1 adds a per-op profile (GEMMAC_CUDA_PROFILE) of the first preset; NPL=1,8,64 adds batched decoding
# (-npl) at depth DEPTH (default 1024).
# Logs to $OUT (or /tmp/cuda_out). Usage: bench/cuda_fused_run.sh MODEL.gguf [PRESET:TYPE ...]
#   (default presets: gemma4-e4b:q4_0)
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
MODEL=$(realpath "$1"); shift
presets=("$@"); [ ${#presets[@]} -eq 0 ] && presets=(gemma4-e4b:q4_0)
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader; nvcc --version | tail -1
  nproc; date -u; } 2>&1 | tee "$OUT/env.txt"
. bench/cuda_build.sh
cuda_build -- gemmac_cli test_cuda_ops test_cuda_model
rc=0
timeout 200 ./build-dev/test_cuda_ops 2>&1 | tee "$OUT/ops.txt" | grep -v "^\[ RUN\|^\[       OK" || rc=1
GEMMAC_MODEL=$MODEL timeout 150 ./build-dev/test_cuda_model 2>&1 | tee "$OUT/model.txt" | grep -v "^\[ RUN\|^\[       OK" || rc=1
{ for pt in "${presets[@]}"; do
    p=${pt%%:*}; t=${pt##*:}; f=/tmp/$p-$t.gguf
    ./build-dev/gemmac synth --preset "$p" --type "$t" -o "$f" --quiet || continue
    echo "== $p $t ($(stat -c %s "$f" | awk '{printf "%.2f GiB", $1/1073741824}')), PDL on"
    timeout 120 ./build-dev/gemmac bench -m "$f" -ngl all -p 512 -n 128 -r 3
    echo "== $p $t, PDL off"
    GEMMAC_CUDA_PDL=0 timeout 60 ./build-dev/gemmac bench -m "$f" -ngl all -p 0 -n 128 -r 3
    if [ -n "$NPL" ]; then
      echo "== $p $t, batched decoding at depth ${DEPTH:-1024}"
      timeout 200 ./build-dev/gemmac bench -m "$f" -ngl all -p 0 -n 128 -npl "$NPL" -d "${DEPTH:-1024}" -r 2
    fi
    if [ -n "$PROFILE" ]; then
      echo "== $p $t, profile (GEMMAC_CUDA_PROFILE=1: no CUDA graphs, an event per op)"
      GEMMAC_CUDA_PROFILE=1 timeout 60 ./build-dev/gemmac bench -m "$f" -ngl all -p 512 -n 32 -r 1
      PROFILE=
    fi
    rm -f "$f"
  done; } 2>&1 | tee "$OUT/bench.txt"
exit $rc
