#!/bin/bash
# cuda_batch_trace_run.sh: on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/): where a batched
# decoding step of Gemma 4 E4B q4_0 goes now. For each batch in NPL (default 64 256): the throughput at depth 1024,
# then a CUPTI trace (bench/cuda_trace.c) of the decoding steps only (graph replays) into $OUT/trace_b<N>.md.
# ENV: extra variables for every run (e.g. "GEMMAC_CUDA_BRANCH=0 GEMMAC_CUDA_QKV_PREP=0" for the old path of a tree
# that has those switches); XARGS: extra arguments of gemmac bench (e.g. "-ctk q8_0"), TAG: a suffix of the trace files.
# Usage: OUT=... [NPL='64 256'] [ENV=...] [XARGS=...] [TAG=...] bench/cuda_batch_trace_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
F=/tmp/e4b.gguf
e4b_q4_0 $F || exit 1
{
for n in ${NPL:-64 256}; do
  T=$OUT/trace_b$n$TAG.md
  echo "== E4B q4_0, $n sequences at depth 1024 (${ENV:-defaults} $XARGS)"
  env $ENV timeout 120 "$B/gemmac" bench -m $F -ngl all $XARGS -p 0 -n 32 -npl $n -d 1024 -r 1 2>&1 | grep -E "x$n|rror"
  env $ENV GEMMAC_TRACE_GRAPH_ONLY=1 LD_PRELOAD=$B/libgemmac_cuda_trace.so GEMMAC_TRACE_OUT=$T \
    timeout 150 "$B/gemmac" bench -m $F -ngl all $XARGS -p 0 -n 16 -npl $n -d 1024 -r 1 > /dev/null 2>&1
  echo "   trace: $(grep -E 'critical path|^\| kernels \|' $T | tr '\n' ' ')"
done
} 2>&1 | tee -a "$OUT/call.txt"
