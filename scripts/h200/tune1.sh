#!/bin/sh
# H200: build, GPU tests, then softmax block tunings and decode.
set -u
cd "$(dirname "$0")/../.."
sh scripts/h200/build.sh || exit 1
export FLASHCL_CACHE_DIR=/tmp/fcl-cache
FLASHCL_DEVICE=gpu build/tools/flashcl-probe > "$OUT/probe.txt" 2>&1; head -32 "$OUT/probe.txt" | tail -20
FLASHCL_DEVICE=gpu timeout 240 ctest --test-dir build --output-on-failure -j4 -E "amd|example|bench" > "$OUT/ctest-gpu.log" 2>&1
echo "ctest rc=$?"; grep -E "Test +#|tests passed|FAILED|ERROR|LINE|Failure" "$OUT/ctest-gpu.log" | head -30
S="--softmax 2097152x128 --softmax 262144x1024 --softmax 65536x4096 --softmax 32768x8192"
for t in "" "block_lanes=8" "block_lanes=4" "block_items=32" "block_items=32,block_lanes=8" "block_items=8"; do
  echo "== tune: $t"
  FLASHCL_TUNE="$t" FLASHCL_DEVICE=gpu timeout 60 build/tools/flashcl-bench $S --reps 10 2>/dev/null | grep -v "^#"
done
echo "== decode"
FLASHCL_DEVICE=gpu timeout 90 build/tools/flashcl-bench --attention 8,32,1,8192,128 --attention 8,32,1,32768,128 --attention 4,16,4096,4096,64 --reps 5 2>/dev/null
