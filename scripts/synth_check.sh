#!/usr/bin/env bash
# synth_check.sh: for each synthetic preset that fits this machine, writes the GGUF (gemmac synth, once), runs a
# prompt of 256 different token ids and 32 greedy tokens (gemmac run -n 32 -c 320) under /usr/bin/time -v, checks
# every logit of a 35-token pass is finite (gemmac logits), and compares the peak RSS with the memory plan
# `gemmac info -c 320` prints. The varied prompt makes a mixture-of-experts model route to every expert, as real
# use does (a short run that repeats one token touches a fraction of the experts and stays under the plan)
# (weights the forward touches + KV + activations + tokenizer; the per-layer embedding table is left out).
# Passes when every RSS is within 10% of its plan. Too heavy for CI (files of 2-15 GB): run by hand, paste the
# table into BENCHMARKS.md.
#
# usage: scripts/synth_check.sh [BUILD_DIR] [OUT_DIR] [PRESET:TYPE ...]
#   default presets: gemma4-e2b:q4_0 gemma4-e4b:q4_0 gemma4-26b-a4b:q4_0
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/gemmac-synth}
shift $(( $# > 2 ? 2 : $# )) || true
PRESETS=("$@")
[ ${#PRESETS[@]} -eq 0 ] && PRESETS=(gemma4-e2b:q4_0 gemma4-e4b:q4_0 gemma4-26b-a4b:q4_0)
CLI=$BUILD/gemmac
mkdir -p "$OUT"
fail=0
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
printf "| %-16s | %-5s | %9s | %11s | %13s | %8s | %6s | %s |\n" preset type "file GiB" "synth s" "planned MiB" "RSS MiB" "RSS/plan" "finite"
printf "|%s|%s|%s|%s|%s|%s|%s|%s|\n" ------------------ ------- ----------- ------------- --------------- ---------- -------- --------
for pt in "${PRESETS[@]}"; do
  preset=${pt%%:*}; type=${pt##*:}
  f=$OUT/$preset-$type.gguf
  t_synth="(cached)"
  if [ ! -f "$f" ]; then
    s0=$(date +%s.%N)
    "$CLI" synth --preset "$preset" --type "$type" -o "$f" --quiet
    t_synth=$(echo "$(date +%s.%N) - $s0" | bc | xargs printf "%.0f")
  fi
  gib=$(stat -c %s "$f" | awk '{printf "%.2f", $1/1073741824}')
  plan=$("$CLI" info -m "$f" -c 320 | awk '/resident/ {print $2}')
  # NaN check: logits of every position of a 35-token pass
  ids=$(seq -s, 2 36)
  "$CLI" logits -m "$f" -c 64 --tokens "$ids" --out "$OUT/logits.bin"
  finite=$(python3 -c "import numpy as n,sys; a=n.fromfile('$OUT/logits.bin',dtype='<f4'); print('yes' if n.isfinite(a).all() and a.size>0 else 'NO')")
  # peak RSS of a 32-token greedy run, from a cold page cache as after a reboot: a file just written sits in the
  # page cache in large folios, and touching one row of the per-layer table would map its whole folio
  python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$f"
  /usr/bin/time -v "$CLI" run -m "$f" --tokens "$(seq -s, 1000 1000 256000)" -n 32 --temp 0 --ids -c 320 \
    > "$OUT/run.out" 2> "$OUT/run.err"
  rss_kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /,"",$2); print $2}' "$OUT/run.err")
  n_out=$(wc -w < "$OUT/run.out")
  rss=$(echo "$rss_kb" | awk '{printf "%.1f", $1/1024}')
  ratio=$(awk -v r="$rss" -v p="$plan" 'BEGIN {printf "%.3f", r/p}')
  printf "| %-16s | %-5s | %9s | %11s | %13s | %8s | %6s | %s |\n" "$preset" "$type" "$gib" "$t_synth" "$plan" "$rss" "$ratio" "$finite ($n_out ids)"
  ok=$(awk -v x="$ratio" 'BEGIN {print (x >= 0.9 && x <= 1.1) ? 1 : 0}')
  if [ "$ok" != 1 ] || [ "$finite" != yes ] || [ "$n_out" -ne 32 ]; then fail=1; fi
done
if [ $fail -ne 0 ]; then echo "FAIL: a run was not finite, did not give 32 tokens, or its RSS is not within 10% of the plan"; exit 1; fi
echo "PASS: every run finite, 32 tokens, peak RSS within 10% of the plan"
