#!/bin/bash
# cuda_batch_knobs_run.sh: on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/): Gemma 4 E4B
# q4_0 decoding at depth 1024 (1, 64 and 256 sequences) under each of the batched path's run-time settings in turn,
# the defaults first and last, all in one binary: the activation preparation's threads (GEMMAC_CUDA_PREP_THREADS), the
# attention's blocks an SM (GEMMAC_CUDA_ATTN_FILL), the q4_0 tensor-core kernel's splits, columns a block and largest
# batch (GEMMAC_CUDA_QGEMM_*). BASE: variables for every run; KNOBS: the settings ("-" the defaults); ARGS: gemmac bench's
# test (default: -p 0 -n 32 -npl 1,64,256 -d 1024 -r 1).
# Usage: OUT=... [BASE=...] [KNOBS=...] [ARGS=...] bench/cuda_batch_knobs_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
F=/tmp/e4b.gguf
e4b_q4_0 $F || exit 1
KNOBS=${KNOBS:-"- GEMMAC_CUDA_PREP_THREADS=512 GEMMAC_CUDA_PREP_THREADS=256 GEMMAC_CUDA_ATTN_FILL=8 GEMMAC_CUDA_ATTN_FILL=32
  GEMMAC_CUDA_QGEMM_SPLITS=4 GEMMAC_CUDA_QGEMM_BLOCK_COLS=32 GEMMAC_CUDA_QGEMM_MAX_N=128 GEMMAC_CUDA_QGEMM_MAX_N=256 -"}
{
for k in $KNOBS; do
  echo "== ${k/#-/defaults}"
  env $BASE ${k#-} timeout 150 "$B/gemmac" bench -m $F -ngl all ${ARGS:--p 0 -n 32 -npl 1,64,256 -d 1024 -r 1} 2>&1 | grep -E " tg| pp|rror" |
    sed -E 's/^\| gemma4[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|//'
done
} 2>&1 | tee "$OUT/call.txt"
