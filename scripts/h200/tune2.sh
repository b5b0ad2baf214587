#!/bin/sh
# H200: build, GPU softmax tests, softmax tunings across N.
set -u
cd "$(dirname "$0")/../.."
sh scripts/h200/build.sh || exit 1
export FLASHCL_CACHE_DIR=/tmp/fcl-cache
FLASHCL_DEVICE=gpu timeout 200 ctest --test-dir build --output-on-failure -j4 -R "softmax|plan" > "$OUT/ctest-gpu.log" 2>&1
echo "ctest rc=$?"; grep -E "Test +#|tests passed|FAILED|ERROR|LINE|Failure" "$OUT/ctest-gpu.log" | head -30
S="--softmax 2097152x128 --softmax 262144x1024 --softmax 65536x4096 --softmax 32768x8192 --softmax 16384x16384 --softmax 4096x65536 --softmax 1024x262144 --softmax 256x1048576 --softmax 64x4194304"
FLASHCL_DEVICE=gpu timeout 60 build/tools/flashcl-bench $S --reps 10 2>/dev/null | grep -v "^#"
S="--softmax 2097152x128 --softmax 262144x1024 --softmax 65536x4096 --softmax 32768x8192"
for t in "block_lanes=8" "block_lanes=16" "block_items=32" "block_items=32,block_lanes=8" "block_items=8"; do
  echo "== tune: $t"
  FLASHCL_TUNE="$t" FLASHCL_DEVICE=gpu timeout 60 build/tools/flashcl-bench $S --reps 10 2>/dev/null | grep -v "^#\|^case"
done
