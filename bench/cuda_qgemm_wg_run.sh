#!/bin/bash
# cuda_qgemm_wg_run.sh: one call on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/) that
# checks and measures qgemm_cuda.cu's warpgroup kernel (wgmma: the q4_0 weights dequantized in registers as the A
# operand, the activations in GM_CUDA_ACT_ORDER_QG read by the tensor cores straight from shared memory) against
# its warp kernel (mma.sync) and cuBLAS on f16 copies. Both kernels are in the same binary: GEMMAC_CUDA_QGEMM_WG=1
# picks the warpgroup one, GEMMAC_CUDA_QGEMM_MAX_N the largest batch the q4_0 kernels take (beyond: cuBLAS).
# Predicted (E4B q4_0, H200): the GeGLU 2 x 10240 x 2560 at 64 columns ~10-15 us against ~32 through cuBLAS and
# ~40 on the warp kernel; 64 sequences at depth 1024 from ~7 ms a step towards ~5 ms. (WAYS: OLD NEW ALL, below.)
# Order: the op tests, the model test each way, the product probe, then E4B q4_0 batches each way. Logs to $OUT.
# Usage: [OPS_FILTERS='test_act_order test_qgemm' | OPS_FILTERS=all] [PROBE_SPLITS='1 2 ...'] [PROFILE_N=64]
#        bench/cuda_qgemm_wg_run.sh [tests|bench|all|profile]   (profile: the probe, then Nsight Compute, no bench)
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
WHAT=${1:-all}
. bench/cuda_unpack.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
if [ "$WHAT" != bench ]; then
  for f in ${OPS_FILTERS:-test_act_order test_qgemm}; do # OPS_FILTERS=all: every op test
    [ "$f" = all ] && f=
    GEMMAC_TEST_FILTER=$f timeout 400 "$B/test_cuda_ops" 2>&1 | tee -a "$OUT/ops.txt" |
      grep -E "qgemm|act order|FAIL|PASSED|ERROR|error" | head -30
  done
  for w in "GEMMAC_CUDA_QGEMM_WG=0" "GEMMAC_CUDA_QGEMM_WG=1 GEMMAC_CUDA_QGEMM_MAX_N=64"; do # the model's 64-token prefill on each kernel
    echo "== test_cuda_model, $w"
    env $w GEMMAC_MODEL=$SUB timeout 90 "$B/test_cuda_model" 2>&1 | tee -a "$OUT/model.txt" |
      grep -E "KL|batched|PASSED|FAIL|ERROR|error" | head -30
  done
fi
[ "$WHAT" = tests ] && exit 0
for sp in ${PROBE_SPLITS:-default}; do # the most splits of K (GEMMAC_CUDA_QGEMM_SPLITS), as the probe reads it
  echo "== cuda_mmq_probe, splits $sp" | tee -a "$OUT/probe.txt"
  env $([ "$sp" = default ] || echo GEMMAC_CUDA_QGEMM_SPLITS=$sp) timeout 120 "$B/cuda_mmq_probe" 2>&1 | tee -a "$OUT/probe.txt"
done
if [ "$WHAT" = profile ]; then # Nsight Compute on the GeGLU at 64 columns: each kernel's first timed launch
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for k in qgemm_q4_0_kernel qgemm_q4_0_wg_kernel; do
    timeout 200 $NCU -k regex:"^$k" --launch-skip 5 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
      --section SourceCounters --print-details all --metrics "regex:smsp__average_warps?_issue_stalled_.*_per_issue_active\.ratio" \
      "$B/cuda_mmq_probe" 3 ${PROFILE_N:-64} > "$OUT/ncu_$k.txt" 2>&1
    grep -E "Duration|Throughput|Issued|Eligible|Active Warps|Stall|Registers|Block Limit|Achieved|Warp Cycles" "$OUT/ncu_$k.txt" | head -40
  done
  exit 0
fi
F=/tmp/e4b.gguf
"$B/gemmac" synth --preset gemma4-e4b --type q4_0 -o $F --quiet 2>/dev/null || exit 1
# OLD: the warp kernel only, up to 32 columns (the default before the warpgroup kernel); NEW: the defaults (the
# warpgroup kernel from 17 to 64 columns); ALL: the warpgroup kernel for every batch up to 64
way() { case $1 in OLD) echo GEMMAC_CUDA_QGEMM_WG=0;; NEW) echo GEMMAC_CUDA_QGEMM_WG=;; ALL) echo "GEMMAC_CUDA_QGEMM_WG=1 GEMMAC_CUDA_QGEMM_MAX_N=64";; esac; }
{
  for w in ${WAYS:-OLD NEW OLD NEW}; do
    echo "== E4B q4_0, $w ($(way $w)): 1 / 16 / 32 / 64 / 256 sequences at depth 1024"
    env $(way $w) timeout 150 "$B/gemmac" bench -m $F -ngl all -p 0 -n 32 -npl 1,16,32,64,256 -d 1024 -r 1 2>&1 | grep -E "tg|rror"
  done
  for w in OLD NEW; do
    echo "== E4B q4_0, $w ($(way $w)): pp512, tg128"
    env $(way $w) timeout 100 "$B/gemmac" bench -m $F -ngl all -p 512 -n 128 -r 2 2>&1 | grep -E "pp|tg|rror"
  done
} 2>&1 | tee "$OUT/e4b.txt"
rm -f $F
