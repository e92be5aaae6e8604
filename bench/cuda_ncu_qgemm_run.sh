#!/bin/bash
# cuda_ncu_qgemm_run.sh: on the GPU machine (binaries from bench/cuda_pack.sh with PROBES=cuda_mmq_probe, carried in
# build-bin/): Nsight Compute's view of qgemm_cuda.cu's warpgroup kernel on one product of bench/cuda_mmq_probe
# (SHAPES, default "3 4": E4B's GeGLU and down projection; N columns, default 64), with the stall samples of every
# SASS instruction (the source page as CSV: ncu_src_<shape>.csv), so that where a chunk's time goes can be read line
# by line. PROBE names another build of the probe in $B (e.g. cuda_mmq_probe_new), TAG the files' suffix.
# Usage: OUT=... [SHAPES=...] [N=...] [PROBE=...] [TAG=...] bench/cuda_ncu_qgemm_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for s in ${SHAPES:-3 4}; do
  rep="$OUT/ncu_qgemm_$s$TAG"
  timeout 200 $NCU -k regex:"^qgemm_q4_0_wg_kernel" --launch-skip 5 --launch-count 1 --import-source no \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section SourceCounters --section InstructionStats \
    --metrics "regex:smsp__average_warps?_issue_stalled_.*_per_issue_active\.ratio" \
    -o "$rep" "$B/${PROBE:-cuda_mmq_probe}" $s ${N:-64} > "$rep.log" 2>&1
  $NCU --import "$rep.ncu-rep" --print-details all > "$rep.txt" 2>&1
  $NCU --import "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_src_$s$TAG.csv" 2>&1 ||
    $NCU --import "$rep.ncu-rep" --page source --csv > "$OUT/ncu_src_$s$TAG.csv" 2>&1
  echo "== shape $s, ${N:-64} columns, ${PROBE:-cuda_mmq_probe}"
  grep -E "Grid Size|Cluster Size|Registers Per|Achieved Occupancy|Block Limit|^ +Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|Issued Warp|Eligible Warps|Active Warps Per|issue_stalled|Executed Instructions  |==ERROR|rror" "$rep.txt" | head -50
  head -c 600 "$OUT/ncu_src_$s$TAG.csv"; echo
done 2>&1 | tee -a "$OUT/call.txt"
