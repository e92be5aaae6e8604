# cuda_unpack.sh: sourced on the GPU machine by the scripts that run bench/cuda_pack.sh's binaries: unpacks build-bin/
# (once), sets B (the binaries' folder), SUB (the 2-layer q4_0 model), LD_LIBRARY_PATH and OUT (default /tmp/cuda_out,
# made).
OUT=${OUT:-/tmp/cuda_out}; mkdir -p "$OUT"
( cd build-bin && { [ -d bin ] || { for f in b1 b2 b3; do tar xJf $f.tar.xz; done; xz -dkf g3q40s.gguf.xz; }; } )
B=$PWD/build-bin/bin SUB=$PWD/build-bin/g3q40s.gguf
export LD_LIBRARY_PATH=$PWD/build-bin/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
# gpu_env: the card (name, driver, clock) to stdout and $OUT/env.txt. e4b_q4_0 F: the synthetic Gemma 4 E4B q4_0 file
# at F, made once.
gpu_env() { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"; }
e4b_q4_0() { [ -f "$1" ] || "$B/gemmac" synth --preset gemma4-e4b --type q4_0 -o "$1" --quiet 2>/dev/null; }
