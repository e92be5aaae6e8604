#!/bin/bash
# cuda_fused_run.sh: one call on the GPU machine for issue 4's fusion / PDL / tensor-core slice: build the CLI and
# the CUDA tests (cmocka / cJSON from build-cuda-deps/ when the machine lacks them), run test_cuda_ops and
# test_cuda_model (MODEL: a real-weight model small enough to carry: bench/gguf_subset.py --bf16; a quantized subset
# fails the 64-token prefill check on the f16 tensor-core path, BENCHMARKS.md sixth session), then `gemmac bench
# -ngl all` on synthetic Gemma 4 files made there (`gemmac synth`), with programmatic dependent launch on and off;
# PROFILE=1 adds a per-op profile (GEMMAC_CUDA_PROFILE) of the first preset; NPL=1,8,64 adds batched decoding
# (-npl) at depth DEPTH (default 1024); PDL_OFF=0 skips the PDL-off run; TRACE=1 adds kernel traces of the first
# preset (bench/cuda_trace.c under LD_PRELOAD: every kernel's time inside the CUDA graphs) of decoding, pp512 and
# (with NPL) batched decoding at the largest -npl, demangled into $OUT/trace-*.md (TRACE_PDL=0: traced with PDL
# off, so that each kernel's duration is its own and not its wait for the kernel before).
# MODEL "-" skips test_cuda_model. EXTRA="ENV=V ... -- BENCH-ARGS; ..." adds benches of the first preset, one per
# ';'-separated item, each with its environment (e.g. EXTRA="GEMMAC_CUDA_PREP_THREADS=1024 -- -p 0 -n 128 -r 3").
# Logs to $OUT (or /tmp/cuda_out). Usage: bench/cuda_fused_run.sh MODEL.gguf [PRESET:TYPE ...]
#   (default presets: gemma4-e4b:q4_0)
set -o pipefail
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
MODEL=$1; shift
[ "$MODEL" != - ] && MODEL=$(realpath "$MODEL")
presets=("$@"); [ ${#presets[@]} -eq 0 ] && presets=(gemma4-e4b:q4_0)
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader; nvcc --version | tail -1
  nproc; date -u; } 2>&1 | tee "$OUT/env.txt"
. bench/cuda_build.sh
cuda_build -- gemmac_cli test_cuda_ops test_cuda_model ${TRACE:+gemmac_cuda_trace}
rc=0
timeout 200 ./build-dev/test_cuda_ops 2>&1 | tee "$OUT/ops.txt" | grep -v "^\[ RUN\|^\[       OK" || rc=1
if [ "$MODEL" != - ]; then
  GEMMAC_MODEL=$MODEL timeout 150 ./build-dev/test_cuda_model 2>&1 | tee "$OUT/model.txt" | grep -v "^\[ RUN\|^\[       OK" || rc=1
fi
{ for pt in "${presets[@]}"; do
    p=${pt%%:*}; t=${pt##*:}; f=/tmp/$p-$t.gguf
    ./build-dev/gemmac synth --preset "$p" --type "$t" -o "$f" --quiet || continue
    echo "== $p $t ($(stat -c %s "$f" | awk '{printf "%.2f GiB", $1/1073741824}')), PDL on"
    timeout 120 ./build-dev/gemmac bench -m "$f" -ngl all -p 512 -n 128 -r 3
    if [ "${PDL_OFF:-1}" != 0 ]; then
      echo "== $p $t, PDL off"
      GEMMAC_CUDA_PDL=0 timeout 60 ./build-dev/gemmac bench -m "$f" -ngl all -p 0 -n 128 -r 3
    fi
    if [ -n "$EXTRA" ]; then
      IFS=';' read -ra items <<< "$EXTRA"
      for it in "${items[@]}"; do
        envs=${it%%--*}; args=${it#*--}
        echo "== $p $t, $envs: gemmac bench$args"
        env $envs timeout 120 ./build-dev/gemmac bench -m "$f" -ngl all $args
      done
      EXTRA=
    fi
    if [ -n "$NPL" ]; then
      echo "== $p $t, batched decoding at depth ${DEPTH:-1024}"
      timeout 200 ./build-dev/gemmac bench -m "$f" -ngl all -p 0 -n 128 -npl "$NPL" -d "${DEPTH:-1024}" -r 2
    fi
    if [ -n "$PROFILE" ]; then
      echo "== $p $t, profile (GEMMAC_CUDA_PROFILE=1: no CUDA graphs, an event per op)"
      GEMMAC_CUDA_PROFILE=1 timeout 60 ./build-dev/gemmac bench -m "$f" -ngl all -p 512 -n 32 -r 1
      PROFILE=
    fi
    if [ -n "$TRACE" ]; then
      trace() { # NAME BENCH-ARGS...: one traced bench, its kernel table demangled
        local name=$1; shift
        rm -f "$OUT/trace.raw"
        GEMMAC_CUDA_PDL=${TRACE_PDL:-1} LD_PRELOAD=$PWD/build-dev/libgemmac_cuda_trace.so GEMMAC_TRACE_OUT=$OUT/trace.raw \
          timeout 120 ./build-dev/gemmac bench -m "$f" -ngl all -r 1 "$@" > /dev/null
        { echo "# $p $t: gemmac bench $*"; c++filt < "$OUT/trace.raw"; } > "$OUT/trace-$name.md"
        echo "== trace $name: $OUT/trace-$name.md"; head -30 "$OUT/trace-$name.md" | cut -c1-250
      }
      trace tg -p 0 -n 64
      trace pp512 -p 512 -n 0
      [ -n "$NPL" ] && trace npl -p 0 -n 16 -npl "${NPL##*,}" -d "${DEPTH:-1024}"
      TRACE=
    fi
    rm -f "$f"
  done; } 2>&1 | tee "$OUT/bench.txt"
exit $rc
