#!/bin/bash
# cuda_device_run.sh: what one call on the GPU machine runs: report the tools, configure + build the CUDA
# targets in build-cuda (cmocka / cJSON from build-cuda-deps/ when the machine lacks them), run the op tests
# and the benchmark; logs go to $OUT (or /tmp/cuda_out). Usage: bench/cuda_device_run.sh [test|bench|all]
set -o pipefail
what=${1:-all}
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv; nvcc --version | tail -2
  cmake --version | head -1; gcc --version | head -1; command -v make ninja; nproc; } 2>&1 | tee "$OUT/env.txt"
D=$PWD/build-cuda-deps/root/usr
export CPATH=$D/include:$CPATH LIBRARY_PATH=$D/lib/x86_64-linux-gnu:$LIBRARY_PATH LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
gen=(); command -v make >/dev/null || gen=(-G Ninja)
cmake -S . -B build-cuda "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D -DGEMMAC_CUDA=ON > "$OUT/build.txt" 2>&1 &&
cmake --build build-cuda -j16 --target test_cuda_ops cuda_bench >> "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
echo "build ok"
rc=0
if [ "$what" != bench ]; then
  timeout 300 ./build-cuda/test_cuda_ops 2>&1 | tee "$OUT/test.txt"; rc=$?
fi
if [ "$what" != test ]; then
  timeout 240 ./build-cuda/cuda_bench "${@:2}" 2>&1 | tee "$OUT/bench.txt"
fi
exit $rc
