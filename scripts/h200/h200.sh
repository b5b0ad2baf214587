#!/bin/sh
# On the H200 machine: build, the whole test suite on the GPU, probe, demo, and the h200 bench preset.
set -u
cd "$(dirname "$0")/../.."
sh scripts/h200/build.sh || exit 1
export FLASHCL_CACHE_DIR=/tmp/fcl-cache
build/tools/flashcl-probe > "$OUT/probe.txt" 2>&1; head -45 "$OUT/probe.txt"
# The toolchain checks (packaging, sanitizers, valgrind, fuzzing, static analysis) run in CI, not here.
FLASHCL_DEVICE=gpu timeout 300 ctest --test-dir build --output-on-failure -j4 \
  -E "package|sanitizers|valgrind|fuzz|static_analysis" > "$OUT/ctest-gpu.log" 2>&1
echo "ctest rc=$?"; grep -E "Test +#|tests passed|FAILED|ERROR|LINE|Failure" "$OUT/ctest-gpu.log" | head -40
FLASHCL_DEVICE=gpu timeout 60 build/tools/flashcl-demo 2>&1 | tail -12
FLASHCL_DEVICE=gpu timeout 180 build/tools/flashcl-bench --preset h200 --json > "$OUT/bench-h200.json" 2> "$OUT/bench-h200.err"
echo "bench rc=$?"; cat "$OUT/bench-h200.json"; tail -3 "$OUT/bench-h200.err"
