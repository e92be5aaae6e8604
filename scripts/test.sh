#!/usr/bin/env bash
# test.sh: the whole test suite, as CI runs it: a -Werror build with the unit, kernel and end-to-end tests
# (ctest), the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, and a short libFuzzer pass
# over the GGUF reader and the tokenizer. Usage: scripts/test.sh [--quick]  (--quick: the first part only)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${GEMMAC_FUZZ_SECONDS:-60}

echo "== build (-Werror) and tests"
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DGEMMAC_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs" >/dev/null
if [ "${1:-}" != "--quick" ]; then
  echo "== ASan + UBSan build and tests"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DGEMMAC_SANITIZE=ON -DGEMMAC_WERROR=ON >/dev/null
  cmake --build build-asan -j"$jobs" >/dev/null
  # the end-to-end model tests are slow unoptimised; they run in the main pass
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j"$jobs" -E 'test_llama_reference|test_cli')

  echo "== libFuzzer (${fuzz_seconds}s per target)"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" >/dev/null
  for target in build-fuzz/fuzz_*; do
    [ -x "$target" ] || continue
    name=$(basename "$target")
    corpus="build-fuzz/corpus-$name"
    mkdir -p "$corpus"
    seeds="tests/fuzz/seeds/$name"
    [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
    echo "-- $name"
    "$target" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 "$corpus" 2>&1 | tail -n 4
  done
fi

echo "== tests (release build)"
cd build-test && ctest --output-on-failure -j"$jobs"
