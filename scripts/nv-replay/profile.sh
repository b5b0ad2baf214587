#!/bin/sh
# Nsight Compute over one launch of a flashcl kernel on an NVIDIA GPU. Nsight Compute does
# not see NVIDIA's OpenCL launches ("No kernels were profiled"), so the launch is captured
# from OpenCL (clshim.c, under LD_PRELOAD), replayed through CUDA's driver API (culaunch.c:
# the same PTX, arguments and buffers; it checks that its outputs equal the OpenCL launch's)
# and profiled there. The GPU's clocks are left as they are (--clock-control none).
# Needs the CUDA toolkit (cuda.h, libcuda, ncu) and the OpenCL headers.
# usage: scripts/nv-replay/profile.sh BUILD_DIR KERNEL OUT_DIR flashcl-bench-arguments...
#   e.g. scripts/nv-replay/profile.sh build attention_kvdec_d128 /tmp/prof \
#          --dtype f16 --kv int8 --attention 8,32/8,1,32768,128
# OUT_DIR gets the capture (cap/), KERNEL.ncu-rep and its details, raw metrics and SASS
# with stall samples as text (PROF_LIST=1 with the bench lists the kernels' names);
# scripts/nv-replay/phases.py OUT_DIR/KERNEL-sass.csv splits the samples by barrier.
set -eu
build=$1 kernel=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out/cap"
cc -O2 -shared -fPIC -o "$out/libclshim.so" "$here/clshim.c" -ldl
cc -O2 -o "$out/culaunch" "$here/culaunch.c" -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda
PROF_KERNEL=$kernel PROF_DIR=$out/cap LD_PRELOAD=$out/libclshim.so "$build/tools/flashcl-bench" "$@"
"$out/culaunch" "$out/cap" 20
"$cuda/bin/ncu" --clock-control none --set full --import-source no --launch-skip 2 --launch-count 1 \
  -f -o "$out/$kernel" "$out/culaunch" "$out/cap" 3
"$cuda/bin/ncu" -i "$out/$kernel.ncu-rep" --page details > "$out/$kernel-details.txt"
"$cuda/bin/ncu" -i "$out/$kernel.ncu-rep" --page raw --csv > "$out/$kernel-raw.csv"
"$cuda/bin/ncu" -i "$out/$kernel.ncu-rep" --page source --csv --print-source sass > "$out/$kernel-sass.csv"
