# cuda_unpack.sh: sourced on the GPU machine by the scripts that run bench/cuda_pack.sh's binaries: unpacks build-bin/
# (once), sets B (the binaries' folder), SUB (the 2-layer q4_0 model) and LD_LIBRARY_PATH.
( cd build-bin && { [ -d bin ] || { for f in b1 b2 b3; do tar xJf $f.tar.xz; done; xz -dkf g3q40s.gguf.xz; }; } )
B=$PWD/build-bin/bin SUB=$PWD/build-bin/g3q40s.gguf
export LD_LIBRARY_PATH=$PWD/build-bin/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
