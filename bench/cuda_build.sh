# cuda_build.sh: sourced by the GPU-machine scripts (bench/cuda_*.sh): cmocka / cJSON from build-cuda-deps/ when
# the machine lacks them, then `cuda_build [CMAKE_OPTION...] -- TARGET...` configures build-dev with CUDA and builds
# the targets, the log in $OUT/build.txt; on failure it prints the log's tail and exits the calling script.
# PREBUILT=1: the targets are already in build-dev (built here with the same sources, carried): no build.
D=$PWD/build-cuda-deps/root/usr
export CPATH=$D/include:$CPATH LIBRARY_PATH=$D/lib/x86_64-linux-gnu:$LIBRARY_PATH LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
cuda_build() {
  [ -n "$PREBUILT" ] && { echo "prebuilt binaries in build-dev"; return; }
  local opts=() gen=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  command -v make >/dev/null || gen=(-G Ninja)
  local t0; t0=$(date +%s)
  cmake -S . -B build-dev "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$D" -DGEMMAC_CUDA=ON "${opts[@]}" \
    > "$OUT/build.txt" 2>&1 &&
  cmake --build build-dev -j"$(nproc)" --target "$@" >> "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
  echo "build ok in $(( $(date +%s) - t0 )) s"
}
