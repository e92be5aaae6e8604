#!/bin/bash
# cuda_ncu_attn_run.sh: on the GPU machine (binaries from bench/cuda_pack.sh, carried in build-bin/): Nsight Compute's
# view of one staged decode-attention launch of Gemma 4 E4B q4_0 at 256 sequences and depth 1024 (graphs off, so
# that launches are counted in order; the skipped ones, 600 at D = 256 and 120 at 512, are the single-sequence steps (two runs of 8)
# that gemmac bench runs first and the first batched ones), for each KV type in
# KVS (default "q8_0 f16") and head dim D (256: sliding layers, 512: global). Usage: OUT=... [KVS=...] [D=...] bench/cuda_ncu_attn_run.sh
set -o pipefail
. bench/cuda_unpack.sh
gpu_env
F=/tmp/e4b.gguf
e4b_q4_0 $F || exit 1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for kv in ${KVS:-q8_0 f16}; do
  K=$([ $kv = q8_0 ] && echo "attn_staged_kernelI4KvQ8Li${D:-256}" || echo "attn_staged_kernelI6__halfLi${D:-256}")
  GEMMAC_CUDA_GRAPHS=0 timeout 240 $NCU --kernel-name-base mangled --kernel-name regex:$K --launch-skip $([ ${D:-256} = 256 ] && echo 600 || echo 120) --launch-count 1 \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats \
    "$B/gemmac" bench -m $F -ngl all -ctk $kv -p 0 -n 8 -npl 256 -d 1024 -r 1 > "$OUT/ncu_${kv}_${D:-256}.txt" 2>&1
  echo "== $kv D=${D:-256}"
  grep -E "Grid Size|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|^ +Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|No Eligible|Stall|Dynamic Shared|==ERROR|rror" "$OUT/ncu_${kv}_${D:-256}.txt" | head -40
done 2>&1 | tee -a "$OUT/call.txt"
