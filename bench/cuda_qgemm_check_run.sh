#!/bin/bash
# cuda_qgemm_check_run.sh: one call on the GPU machine that checks a change to qgemm_cuda.cu and times it against the
# committed build: test_cuda_ops (test_qgemm first, then every op test), test_cuda_model (as is, then with every q4_0
# product of 17-64 columns on the warpgroup kernel), then bench/cuda_mmq_probe of the committed build
# (build-bin/probe_old.xz, stripped and xz'd on the development machine) and of the new one in turn, ROUNDS times,
# and with NCU=1 Nsight Compute on the new build's GeGLU at 64 columns (bench/cuda_ncu_qgemm_run.sh). Carry
# build-bin with b1, b2 (bench/cuda_pack.sh; for this script lib/ alone will do) and probe_old.xz, and b3 with
# g3q40s.gguf.xz for the model test (left out when b3 is not carried: the device tool's 64 MiB may not hold all).
# Usage: OUT=... [ROUNDS=2] [NCU=1] bench/cuda_qgemm_check_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
xz -dc build-bin/probe_old.xz > "$B/cuda_mmq_probe_old" && chmod +x "$B/cuda_mmq_probe_old"
{
  echo "## test_cuda_ops, test_qgemm"
  GEMMAC_TEST_FILTER=test_qgemm timeout 300 "$B/test_cuda_ops" 2>&1 | grep -E "qgemm|FAIL|PASSED|ERROR|rror" | head -20
  echo "## test_cuda_ops, every test"
  timeout 400 "$B/test_cuda_ops" 2>&1 | grep -E "^\[  |FAIL|ERROR|rror" | head -40
  for w in "" "GEMMAC_CUDA_QGEMM_WG=1 GEMMAC_CUDA_QGEMM_MAX_N=64"; do
    [ -x "$B/test_cuda_model" ] || { echo "## test_cuda_model: not carried"; break; }
    echo "## test_cuda_model ${w:-(defaults)}"
    env $w GEMMAC_MODEL=$SUB timeout 120 "$B/test_cuda_model" 2>&1 | grep -E "KL|batched|PASSED|FAIL|ERROR|rror" | head -20
  done
  for r in $(seq 1 ${ROUNDS:-2}); do
    for p in cuda_mmq_probe_old cuda_mmq_probe; do
      echo "## round $r: $p"
      timeout 120 "$B/$p" 2>&1
    done
  done
} 2>&1 | tee "$OUT/call.txt"
[ -n "$NCU" ] && SHAPES=3 N=64 TAG=_new bash bench/cuda_ncu_qgemm_run.sh
exit 0
