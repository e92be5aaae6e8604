#!/bin/bash
# cuda_kvq8_run.sh: on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/): the q8_0 KV cache
# (-ctk q8_0) against f16: test_cuda_ops and test_cuda_model (the q8_0 cases with the rest), then Gemma 4 E4B q4_0
# decoding, tg128 and 1 / 64 / 256 sequences at depth 1024, each way in turn, f16 first and last. Usage: OUT=... bench/cuda_kvq8_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
{
  echo "== test_cuda_ops"; timeout 300 "$B/test_cuda_ops" 2>&1 | grep -E "cuda  |PASSED|FAILED|rror|attention" | tail -40
  echo "== test_cuda_model"; GEMMAC_MODEL=${GEMMAC_MODEL:-$SUB} timeout 200 "$B/test_cuda_model" 2>&1 | tail -30
} 2>&1 | tee "$OUT/tests.txt"
F=/tmp/e4b.gguf
e4b_q4_0 $F || exit 1
{
for kv in f16 q8_0 f16 q8_0; do
  echo "== -ctk $kv"
  timeout 150 "$B/gemmac" bench -m $F -ngl all -ctk $kv -p 0 -n 128 -r 2 2>&1 | grep -E " tg|rror" |
    sed -E 's/^\| gemma4[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|//'
  timeout 150 "$B/gemmac" bench -m $F -ngl all -ctk $kv -p 0 -n 32 -npl 1,64,256 -d 1024 -r 1 2>&1 | grep -E " tg|rror" |
    sed -E 's/^\| gemma4[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|//'
done
} 2>&1 | tee "$OUT/bench.txt"
