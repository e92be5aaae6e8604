#!/bin/bash
# cuda_backend_run.sh: one call on the GPU machine for the CUDA backend (issue 4, second slice): build the CLI
# and the CUDA tests (cmocka / cJSON from build-cuda-deps/ when the machine lacks them), run test_cuda_ops,
# test_cuda_model (GEMMAC_MODEL: a real-weight model small enough to carry, made by bench/gguf_subset.py),
# (with CUDA graphs, then again with GEMMAC_CUDA_GRAPHS=0), then `gemmac bench` (graphs off, then on) on a full-size Gemma 3 270M q4_K_M made on the spot by `gemmac synth` (same tensor
# types and shapes as the released file; speed does not depend on the weights' values), GPU and CPU.
# Logs go to $OUT (or /tmp/cuda_out). Usage: bench/cuda_backend_run.sh MODEL.gguf
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
MODEL=$(realpath "$1")
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv; nvcc --version | tail -2
  gcc --version | head -1; nproc; date -u; } 2>&1 | tee "$OUT/env.txt"
. bench/cuda_build.sh
cuda_build -- gemmac_cli test_cuda_ops test_cuda_model
rc=0
timeout 240 ./build-dev/test_cuda_ops 2>&1 | tee "$OUT/ops.txt" || rc=1
GEMMAC_MODEL=$MODEL timeout 240 ./build-dev/test_cuda_model 2>&1 | tee "$OUT/model.txt" || rc=1
echo "== test_cuda_model without CUDA graphs"
GEMMAC_CUDA_GRAPHS=0 GEMMAC_MODEL=$MODEL timeout 200 ./build-dev/test_cuda_model 2>&1 | tee "$OUT/model_nographs.txt" || rc=1
{ ./build-dev/gemmac synth --preset gemma3-270m --type q4_k_m --tokenizer none -o /tmp/g3_270m_synth.gguf > /dev/null &&
  ./build-dev/gemmac info -m /tmp/g3_270m_synth.gguf | grep -A6 "tensors by type"
  echo "== GPU, -ngl all, CUDA graphs off (before)"; GEMMAC_CUDA_GRAPHS=0 timeout 120 ./build-dev/gemmac bench -m /tmp/g3_270m_synth.gguf -ngl all -p 512 -n 128 -r 5
  echo "== GPU, -ngl all (CUDA graphs on)"; timeout 120 ./build-dev/gemmac bench -m /tmp/g3_270m_synth.gguf -ngl all -p 512 -n 128 -r 5
  echo "== GPU, -ngl all, derived real-weight model (6 layers), CUDA graphs off"; GEMMAC_CUDA_GRAPHS=0 timeout 60 ./build-dev/gemmac bench -m "$MODEL" -ngl all -p 512 -n 128 -r 3
  echo "== GPU, -ngl all, derived real-weight model (6 layers)"; timeout 60 ./build-dev/gemmac bench -m "$MODEL" -ngl all -p 512 -n 128 -r 3
  echo "== CPU, 16 threads"; timeout 120 ./build-dev/gemmac bench -m /tmp/g3_270m_synth.gguf -p 512 -n 128 -r 2
  echo "== no device visible"; CUDA_VISIBLE_DEVICES= ./build-dev/gemmac run -m "$MODEL" -ngl all -p hi -n 1 --no-progress; echo "exit $?"
} 2>&1 | tee "$OUT/bench.txt"
exit $rc
