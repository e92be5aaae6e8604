#!/bin/bash
# cuda_ab_run.sh: on the GPU machine, two builds of gemmac side by side on Gemma 4 E4B q4_0 (synthetic, made there):
# build-bin/b2.tar.xz (bench/cuda_pack.sh: the tree under test) and build-bin/gemmac_old.xz (the baseline binary,
# xz-compressed; on the development machine: relink bench/cuda_pack.sh's objects with the baseline's object of the
# file that changed, strip, xz). ROUNDS rounds (default 2) of each in turn: tg128, then the batches in NPL (-npl,
# default 1,64,256) at depth 1024 for each KV cache type in KVS (default "q8_0 f16"). NCU (optional): a regex of a
# kernel's mangled name, whose launch number NCU_SKIP (default 600) of a 256-sequence run gets Nsight Compute's summary, for each build and KV type.
# ENV: variables for every run. To fit the device tool's 64 MiB, carry build-bin with b2.tar.xz and gemmac_old.xz only.
# Usage: OUT=... [ROUNDS=2] [KVS=...] [NPL=...] [NCU=...] [ENV=...] bench/cuda_ab_run.sh
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
( cd build-bin && { [ -x bin/gemmac ] || tar xJf b2.tar.xz; } && xz -dc gemmac_old.xz > bin/gemmac_old && chmod +x bin/gemmac_old )
B=$PWD/build-bin/bin
export LD_LIBRARY_PATH=$PWD/build-bin/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
F=/tmp/e4b.gguf
[ -f $F ] || "$B/gemmac" synth --preset gemma4-e4b --type q4_0 -o $F --quiet 2>/dev/null
strip_row() { grep -E " tg|rror" | sed -E 's/^\| gemma4[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|//'; }
{
for round in $(seq 1 ${ROUNDS:-2}); do
  for v in gemmac_old gemmac; do
    echo "== round $round: $v tg128"
    env $ENV timeout 100 "$B/$v" bench -m $F -ngl all -p 0 -n 128 -r 2 2>&1 | strip_row
    for kv in ${KVS:-q8_0 f16}; do
      echo "== round $round: $v -ctk $kv depth 1024"
      env $ENV timeout 150 "$B/$v" bench -m $F -ngl all -ctk $kv -p 0 -n 32 -npl ${NPL:-1,64,256} -d 1024 -r 1 2>&1 | strip_row
    done
  done
done
} 2>&1 | tee "$OUT/bench.txt"
[ -n "$NCU" ] || exit 0
NCUB=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in gemmac_old gemmac; do for kv in ${KVS:-q8_0 f16}; do
  env $ENV GEMMAC_CUDA_GRAPHS=0 timeout 200 $NCUB --kernel-name-base mangled --kernel-name "regex:$NCU" \
    --launch-skip ${NCU_SKIP:-600} --launch-count 1 --section LaunchStats --section Occupancy --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section InstructionStats \
    "$B/$v" bench -m $F -ngl all -ctk $kv -p 0 -n 8 -npl 256 -d 1024 -r 1 > "$OUT/ncu_${v}_${kv}.txt" 2>&1
  echo "== ncu $v -ctk $kv"
  grep -E "Function Name|^ +Duration|DRAM Throughput|Warp Cycles Per Issued|Eligible Warps|Executed Instructions  |One or More|Registers Per" \
    "$OUT/ncu_${v}_${kv}.txt" | head -12
done; done 2>&1 | tee "$OUT/ncu.txt"
