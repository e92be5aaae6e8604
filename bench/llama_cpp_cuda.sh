#!/bin/bash
# llama_cpp_cuda.sh: the peer beside `gemmac bench` on the GPU machine: llama.cpp's own llama-bench and
# llama-batched-bench, CUDA build, on the same GGUF file. The binaries come from the llama.cpp sources that the
# PyPI package llama-cpp-python vendors (the machine cannot build from the internet), built once on a machine with
# nvcc by `bench/llama_cpp_cuda.sh build SRC_DIR OUT_DIR` (sm_90 only, static, llama-bench + llama-batched-bench,
# xz-compressed into OUT_DIR/llama-cuda-bin.tar.xz so that they fit a device call), then on the GPU machine
# `bench/llama_cpp_cuda.sh run TARBALL FILE.gguf [NPL] [DEPTH]`: tg128 / pp512 like `gemmac bench -p 512 -n 128
# -r 3` (flash attention auto, every layer offloaded), and with NPL batched decoding like `gemmac bench -npl NPL
# -d DEPTH`: each of NPL sequences with a DEPTH-token prompt, then 128 tokens each (llama-batched-bench's S_TG t/s).
set -o pipefail
case "$1" in
build)
  src=$2 out=$3
  cmake -S "$src" -B "$src/build-cuda" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF \
    -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$src/build-cuda" --target llama-bench llama-batched-bench -j"$(nproc)" &&
  mkdir -p "$out" && strip "$src/build-cuda/bin/llama-bench" "$src/build-cuda/bin/llama-batched-bench" &&
  tar -C "$src/build-cuda/bin" -cJf "$out/llama-cuda-bin.tar.xz" llama-bench llama-batched-bench &&
  ls -la "$out/llama-cuda-bin.tar.xz"
  ;;
run)
  tarball=$(realpath "$2") f=$3 npl=$4 depth=${5:-1024}
  bin=/tmp/llama-cuda-bin; mkdir -p $bin && tar -C $bin -xJf "$tarball" || exit 1
  echo "== llama.cpp (llama-bench, CUDA, -ngl 99, flash attention auto): $f"
  timeout 300 $bin/llama-bench -m "$f" -ngl 99 -p 512 -n 128 -r 3 2>&1 | grep -v "^ggml_cuda_init\|^  Device"
  if [ -n "$npl" ]; then
    maxn=${npl##*,}
    echo "== llama.cpp (llama-batched-bench, CUDA): -npp $depth -ntg 128 -npl $npl"
    timeout 400 $bin/llama-batched-bench -m "$f" -ngl 99 -c $(( (depth + 128) * maxn + 256 )) -b 2048 -ub 512 \
      -npp "$depth" -ntg 128 -npl "$npl" 2>&1 | grep "^|"
  fi
  ;;
*) echo "usage: $0 build SRC_DIR OUT_DIR | run TARBALL FILE.gguf [NPL] [DEPTH]" >&2; exit 2 ;;
esac
