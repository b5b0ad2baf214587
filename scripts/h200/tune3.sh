#!/bin/sh
# H200: attention tiles, the default (32x32 where it fits) against FLASHCL_TUNE's 64x32 at D64.
set -u
cd "$(dirname "$0")/../.."
sh scripts/h200/build.sh || exit 1
export FLASHCL_CACHE_DIR=/tmp/fcl-cache
A="--attention 4,16,4096,4096,64 --attention 4,16,4096,4096,64,c --attention 1,16,16384,16384,64,c --attention 4,16,4096,4096,128"
for t in "" "attention_tile=64x32"; do
  echo "== tune: $t"
  FLASHCL_TUNE="$t" FLASHCL_DEVICE=gpu timeout 120 build/tools/flashcl-bench $A --reps 5 2>/dev/null | grep -v "^#"
done
FLASHCL_TUNE=attention_tile=64x32 FLASHCL_DEVICE=gpu timeout 200 build/tests/test_attention 2>&1 | tail -2
