#!/bin/sh
# The GPU figures and checks of docs/PERFORMANCE.md, on any machine with an OpenCL GPU, its
# driver, CMake, a C compiler, the OpenCL loader and headers and CMocka: a Release build, the
# CMocka suite on the GPU, the probe, the demo, and flashcl-bench's gpu and engine presets as
# JSON.
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
build/tools/flashcl-demo 2>&1 | tail -12
status=0
for preset in gpu engine; do
  build/tools/flashcl-bench --preset "$preset" --json > "$out/bench-$preset.json" 2> "$out/bench-$preset.err" ||
    status=1
  cat "$out/bench-$preset.json"
  tail -3 "$out/bench-$preset.err"
done
exit $status
