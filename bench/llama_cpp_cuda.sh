#!/bin/bash
# llama_cpp_cuda.sh: the peer beside `gemmac bench` on the GPU machine: llama.cpp's llama-batched-bench, CUDA
# build, on the same GGUF file. The binary comes from the llama.cpp sources that the PyPI package llama-cpp-python
# vendors (the GPU machine cannot fetch anything), built once on a machine with nvcc by
#   bench/llama_cpp_cuda.sh build SRC_DIR OUT_DIR
# (sm_90 only, static ggml, stripped, xz-compressed: ~41 MB, so that it fits a device call beside the tree; the
# twin llama-bench does not fit too, and llama-batched-bench measures both), then on the GPU machine
#   bench/llama_cpp_cuda.sh run TARBALL FILE.gguf
# runs, with every layer offloaded and flash attention left at its default (auto):
#   -npp 512 -ntg 128 -npl 1       S_PP = pp512, S_TG = tg128 at depth 512 (gemmac bench -p 512; -n 128 -d 512)
#   -npp 1024 -ntg 128 -npl NPL    S_TG = aggregate decoding of NPL sequences 1024 deep (gemmac bench -npl NPL -d 1024)
set -o pipefail
case "$1" in
build)
  src=$2 out=$3
  cmake -S "$src" -B "$src/build-cuda" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF \
    -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$src/build-cuda" --target llama-batched-bench -j"$(nproc)" &&
  mkdir -p "$out" && strip "$src/build-cuda/bin/llama-batched-bench" &&
  tar -C "$src/build-cuda/bin" -cJf "$out/llama-batched-bench.tar.xz" llama-batched-bench &&
  ls -la "$out/llama-batched-bench.tar.xz"
  ;;
run)
  tarball=$(realpath "$2") f=$3 npl=${NPL:-1,8,64,256}
  bin=/tmp/llama-cuda-bin; mkdir -p $bin
  [ -x $bin/llama-batched-bench ] || tar -C $bin -xJf "$tarball" || exit 1 # once per machine
  maxn=${npl##*,}
  echo "== llama.cpp (llama-batched-bench, CUDA, -ngl 99): -npp 512 -ntg 128 -npl 1"
  rows() { local out; out=$("$@" 2>&1); echo "$out" | grep "^|" || { echo "(no result:)"; echo "$out" | tail -4; }; }
  rows timeout 120 $bin/llama-batched-bench -m "$f" -ngl 99 -c 1024 -npp 512 -ntg 128 -npl 1
  echo "== llama.cpp (llama-batched-bench, CUDA, -ngl 99): -npp 1024 -ntg 128 -npl $npl"
  rows timeout 300 $bin/llama-batched-bench -m "$f" -ngl 99 -c $(( 1152 * maxn + 256 )) -npp 1024 -ntg 128 -npl "$npl"
  ;;
*) echo "usage: $0 build SRC_DIR OUT_DIR | run TARBALL FILE.gguf   (NPL=1,8,64,256)" >&2; exit 2 ;;
esac
