#!/bin/bash
# cuda_qgemm_rows_run.sh: on the GPU machine, how qgemm_cuda.cu's warpgroup kernel scales with its grid: the probe's
# GeGLU (shape 3, K 2560) at N columns (NS, default "32 64") with every matrix MS rows (default "8448 10240 16896":
# 132, 160 and 264 blocks of 128 rows, i.e. one block an SM, E4B's 1.2, two), then Nsight Compute's duration of the
# kernel alone at the card's own clocks (--clock-control none) for each, and the test of the model on the 2-layer
# q4_0 file both ways (as bench/cuda_qgemm_check_run.sh). Carry build-bin with b1 (cuda_mmq_probe), b2 (lib/ will do),
# b3 and g3q40s.gguf.xz. Usage: OUT=... [MS=...] [NS=...] [NCU_RUNS=0] [NCU_SRC=1] bench/cuda_qgemm_rows_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
{
  for w in "" "GEMMAC_CUDA_QGEMM_WG=1 GEMMAC_CUDA_QGEMM_MAX_N=64"; do
    [ -x "$B/test_cuda_model" ] || { echo "## test_cuda_model: not carried"; break; }
    echo "## test_cuda_model ${w:-(defaults)}"
    env $w GEMMAC_MODEL=$SUB timeout 120 "$B/test_cuda_model" 2>&1 | grep -E "KL|batched|PASSED|FAIL|ERROR|rror" | head -20
  done
  for n in ${NS:-32 64}; do for m in ${MS:-8448 10240 16896}; do
    echo "## GeGLU 2 x $m x 2560, $n columns: probe (us with the input's preparation), then the kernel alone (ncu)"
    PROBE_M=$m timeout 60 "$B/cuda_mmq_probe" 3 $n 2>&1 | tail -1
    [ "${NCU_RUNS:-1}" = 0 ] && continue # NCU_RUNS=0: the probe alone
    PROBE_M=$m timeout 120 $NCU --clock-control none -k regex:"^qgemm_q4_0_wg_kernel" --launch-skip 5 --launch-count 3 \
      --section LaunchStats --section SpeedOfLight --section SchedulerStats "$B/cuda_mmq_probe" 3 $n 2>&1 |
      grep -E "^ +Duration|Grid Size|Issued Warp Per Scheduler|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput" | sort | uniq -c
  done; done
} 2>&1 | tee "$OUT/call.txt"
[ -n "$NCU_SRC" ] || exit 0 # NCU_SRC=1: and the stall samples of every SASS line at E4B's shape, 64 columns
SHAPES=3 N=64 TAG=_rows bash bench/cuda_ncu_qgemm_run.sh > /dev/null 2>&1
grep -E "Duration|Issued Warp|Executed Instructions  |Warp Cycles|Eligible" "$OUT/ncu_qgemm_3_rows.txt" | head -12
exit 0
