#!/bin/sh
# The GPU figures and checks of docs/PERFORMANCE.md, on any machine with an OpenCL GPU, its
# driver, CMake, a C compiler, the OpenCL loader and headers and CMocka: a Release build, the
# CMocka suite on the GPU, the probe, the demo, flashcl-bench's gpu and engine presets,
# prefill and decode and softmax in every storage type, with the NVIDIA kernels and
# with them switched off, as JSON.
# Everything lands in OUT (default: ./gpu-check). FLASHCL_DEVICE picks the device ("gpu" by
# default); FLASHCL_TUNE, FLASHCL_BUILD_OPTIONS and the like pass through.
# usage: scripts/gpu-check.sh [OUT]
set -u
cd "$(dirname "$0")/.."
out=${1:-gpu-check}
mkdir -p "$out"
export FLASHCL_DEVICE="${FLASHCL_DEVICE:-gpu}" FLASHCL_CACHE_DIR="${FLASHCL_CACHE_DIR:-$PWD/build/gpu-program-cache}"
jobs=$(nproc 2>/dev/null || echo 4)
cmake -B build -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
  cmake --build build -j "$jobs" >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
build/tools/flashcl-probe > "$out/probe.txt" 2>&1
head -60 "$out/probe.txt"
# The toolchain checks (packaging, sanitizers, valgrind, fuzzing, static analysis, offline
# compiles) do not depend on the device: CI runs them.
ctest --test-dir build --output-on-failure -j 4 -E "package|sanitizers|valgrind|fuzz|static_analysis|amd_offline" \
  > "$out/ctest.log" 2>&1
echo "ctest rc=$?"
grep -E "Test +#|tests passed|FAILED|ERROR|Failure" "$out/ctest.log" | head -40
# The softmax and attention tests again with the NVIDIA kernels switched off: the portable path
# they are checked against passes on its own too.
FLASHCL_TUNE=attention_mma=0 ctest --test-dir build --output-on-failure -R "^(softmax|attention|attention_v2|fast_paths)$" \
  > "$out/ctest-mma-off.log" 2>&1
echo "ctest (NVIDIA kernels off) rc=$?"
# ... and the K/V tests with 8-bit decoding on the tensor-core kernel's _kv build.
FLASHCL_TUNE=attention_kv_decode=0 ctest --test-dir build --output-on-failure -R "^(fast_paths|kv)$" \
  > "$out/ctest-kv-decode-off.log" 2>&1
echo "ctest (8-bit decode kernel off) rc=$?"
build/tools/flashcl-demo 2>&1 | tail -12
status=0
for preset in gpu engine; do
  build/tools/flashcl-bench --preset "$preset" --json > "$out/bench-$preset.json" 2> "$out/bench-$preset.err" ||
    status=1
  cat "$out/bench-$preset.json"
  tail -3 "$out/bench-$preset.err"
done
FLASHCL_TUNE=attention_mma=0 build/tools/flashcl-bench --preset engine --json \
  > "$out/bench-engine-portable.json" || status=1
# Prefill and (multi-head) decode in every storage type (issue 13's cases), on the NVIDIA
# kernels where the device has them and with them switched off (the portable kernels); and
# float32 prefill with FCL_PRECISION_TF32 (--dtype tf32), which only the tensor cores change.
prefill="--attention 4,16,4096,4096,64 --attention 4,16,4096,4096,64,c --attention 4,16,4096,4096,128
  --attention 4,16,4096,4096,128,c --attention 1,16,16384,16384,64,c --attention 4,16,4096,4096,256
  --attention 4,16,4096,4096,256,c"
decode="--attention 8,32,1,8192,128 --attention 8,32,1,32768,128 --attention 8,32,1,8192,64
  --attention 8,32/8,1,8192,128 --attention 8,32/8,1,32768,128 --attention 8,32/8,1,32768,128,p16
  --attention 8,32,1,8192,256 --attention 8,32/8,1,8192,256 --attention 8,32/8,1,8192,256,p16"
# shellcheck disable=SC2086 # $prefill is a list of options
build/tools/flashcl-bench --dtype tf32 $prefill --json > "$out/bench-prefill-tf32.json" || status=1
for dtype in f16 bf16 f32; do
  for kind in prefill decode; do
    eval "cases=\$$kind"
    # shellcheck disable=SC2086 # $cases is a list of options
    build/tools/flashcl-bench --dtype $dtype $cases --json > "$out/bench-$kind-$dtype.json" || status=1
    # shellcheck disable=SC2086
    FLASHCL_TUNE=attention_mma=0 build/tools/flashcl-bench --dtype $dtype $cases --json \
      > "$out/bench-$kind-$dtype-portable.json" || status=1
  done
done
# K/V caches in each format beside f16 (docs/PERFORMANCE.md, "Quantized and 8-bit K/V
# caches (f16 q)"), the writer of a step's tokens, and 8-bit decoding on the _kv build instead of the
# 8-bit decode kernel.
kv="--attention 8,32/8,1,32768,128 --attention 8,32/8,1,32768,128,p16 --attention 8,32,1,32768,128
  --attention 4,16,4096,4096,128,c --kv-write 256,8,128,p16"
for format in f16 q8_0 q4_0 fp8_e4m3 int8; do
  # shellcheck disable=SC2086 # $kv is a list of options
  build/tools/flashcl-bench --dtype f16 --kv $format $kv --json > "$out/bench-kv-$format.json" || status=1
  # ... with float32 q (llama.cpp's types: f16 K/V on the tensor cores, the coded ones decoded)
  # shellcheck disable=SC2086
  build/tools/flashcl-bench --dtype f32 --kv $format $kv --json > "$out/bench-kv-f32q-$format.json" ||
    status=1
done
# shellcheck disable=SC2086
FLASHCL_TUNE=attention_kv_decode=0 build/tools/flashcl-bench --dtype f16 --kv q8_0 $kv --json \
  > "$out/bench-kv-q8_0-kv-build.json" || status=1
# Softmax over the gpu preset's shapes (M x N = 2^28) in every storage type, with NVIDIA's
# softmax kernel and without it (FLASHCL_TUNE=softmax_nv=0: the portable kernels).
softmax="--softmax 2097152x128 --softmax 262144x1024 --softmax 65536x4096 --softmax 16384x16384
  --softmax 4096x65536 --softmax 1024x262144 --softmax 256x1048576 --softmax 64x4194304"
for dtype in f32 f16 bf16; do
  # shellcheck disable=SC2086 # $softmax is a list of options
  build/tools/flashcl-bench --dtype $dtype $softmax --json > "$out/bench-softmax-$dtype.json" || status=1
  # shellcheck disable=SC2086
  FLASHCL_TUNE=softmax_nv=0 build/tools/flashcl-bench --dtype $dtype $softmax --json \
    > "$out/bench-softmax-$dtype-portable.json" || status=1
done
exit $status
